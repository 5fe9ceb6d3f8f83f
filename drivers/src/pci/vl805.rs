//! The VIA VL805 USB 3 controller behind the Pi 4 B / 400 root complex (PCI 1106:3483): after a
//! PCIe reset its firmware is gone, and the VideoCore reloads it when told through the mailbox
//! (tag NOTIFY_XHCI_RESET, 0x0003_0058, with the function's bus/device/function); a non-zero
//! firmware version at configuration offset 0x50 means it is already loaded (Linux
//! `rpi_firmware_init_vl805` and `reset-raspberrypi.c`; docs/pcie-brcmstb.md §8, docs/hardware.md
//! §3.2).

use super::{ConfigAccess, FunctionAddress, PciFunction};

pub const VENDOR_ID: u16 = 0x1106;
pub const DEVICE_ID: u16 = 0x3483;
/// Configuration offset of the loaded firmware's version (0 = none).
pub const FIRMWARE_VERSION_OFFSET: u16 = 0x50;
/// The firmware needs 200 µs-1 ms to start the controller after the mailbox call.
pub const START_US: u64 = 1000;

pub fn is_vl805(function: &PciFunction) -> bool {
    function.vendor_id == VENDOR_ID && function.device_id == DEVICE_ID
}

pub fn firmware_version<C: ConfigAccess>(config: &C, address: FunctionAddress) -> u32 {
    config.read32(address, FIRMWARE_VERSION_OFFSET)
}

/// The mailbox's encoding of a function: bus << 20 | device << 15 | function << 12.
pub fn mailbox_address(address: FunctionAddress) -> u32 {
    u32::from(address.bus) << 20 | u32::from(address.device) << 15 | u32::from(address.function) << 12
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hardwired_pi4_address_is_0x100000() {
        assert_eq!(mailbox_address(FunctionAddress { bus: 1, device: 0, function: 0 }), 0x10_0000);
        assert_eq!(
            mailbox_address(FunctionAddress { bus: 2, device: 3, function: 4 }),
            0x20_0000 | 3 << 15 | 4 << 12
        );
    }
}
