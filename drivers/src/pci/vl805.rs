//! The VIA VL805 USB 3 controller behind the Pi 4 B / 400 root complex (PCI 1106:3483): after a
//! PCIe reset its firmware is gone, and the VideoCore reloads it when told through the mailbox
//! (tag NOTIFY_XHCI_RESET, 0x0003_0058, with the function's bus/device/function); a non-zero
//! firmware version at configuration offset 0x50 means it is already loaded (Linux
//! `rpi_firmware_init_vl805` and `reset-raspberrypi.c`; docs/pcie-brcmstb.md §8, docs/hardware.md
//! §3.2).
#![forbid(unsafe_code)]

use super::{ConfigAccess, FunctionAddress, PciFunction};
use core::fmt;
use hal::platform::Platform;

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

/// What [`ensure_firmware`] found or did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Firmware<E> {
    /// A version was already there (loaded from the VL805's own EEPROM).
    AlreadyLoaded { version: u32 },
    /// The VideoCore was asked and the version now reads so.
    Reloaded { version: u32 },
    /// The mailbox call failed.
    ReloadFailed(E),
}

impl<E> Firmware<E> {
    /// Whether the controller may be driven: not after a failed reload (docs/usb-storage.md §13).
    pub fn allows_use(&self) -> bool {
        !matches!(self, Firmware::ReloadFailed(_))
    }
}

impl<E: fmt::Display> fmt::Display for Firmware<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Firmware::AlreadyLoaded { version } => {
                write!(f, "VL805 firmware {version:#x} already loaded")
            }
            Firmware::Reloaded { version } => write!(
                f,
                "VL805 firmware reloaded by the VideoCore (mailbox tag 0x00030058): version {version:#x}"
            ),
            Firmware::ReloadFailed(error) => {
                write!(f, "VL805 firmware reload failed: {error}; its USB ports are not used")
            }
        }
    }
}

/// Asks for the firmware through `notify` (the mailbox's NOTIFY_XHCI_RESET with the function's
/// address) unless a version is already loaded, then gives the controller [`START_US`].
pub fn ensure_firmware<C: ConfigAccess, P: Platform, E>(
    config: &C,
    address: FunctionAddress,
    platform: &P,
    notify: impl FnOnce(u32) -> Result<(), E>,
) -> Firmware<E> {
    let version = firmware_version(config, address);
    if version != 0 {
        return Firmware::AlreadyLoaded { version };
    }
    match notify(mailbox_address(address)) {
        Ok(()) => {
            platform.delay_us(START_US);
            Firmware::Reloaded { version: firmware_version(config, address) }
        }
        Err(error) => Firmware::ReloadFailed(error),
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::pci::sim::SimulatedFunction;
    use core::cell::RefCell;
    use hal::testing::ArenaPlatform;
    use std::format;

    /// One VL805 at 01:00.0 whose firmware version the "VideoCore" sets when notified.
    struct OneFunction(RefCell<SimulatedFunction>);
    impl ConfigAccess for OneFunction {
        fn read32(&self, function: FunctionAddress, offset: u16) -> u32 {
            match (function.bus, function.device) {
                (1, 0) => self.0.borrow().read(offset),
                _ => u32::MAX,
            }
        }
        fn write32(&self, _function: FunctionAddress, _offset: u16, _value: u32) {}
        fn first_bus(&self) -> u8 {
            0
        }
        fn last_bus(&self) -> u8 {
            1
        }
    }

    fn vl805(version: u32) -> OneFunction {
        let mut function = SimulatedFunction::endpoint(VENDOR_ID, DEVICE_ID, 0x0c_03_30, &[]);
        function.registers[usize::from(FIRMWARE_VERSION_OFFSET) / 4] = version;
        OneFunction(RefCell::new(function))
    }

    const AT: FunctionAddress = FunctionAddress { bus: 1, device: 0, function: 0 };

    #[test]
    fn only_1106_3483_is_a_vl805() {
        let function = |vendor_id, device_id| PciFunction {
            address: AT,
            vendor_id,
            device_id,
            class: crate::pci::ClassCode { base: 0x0c, sub: 0x03, prog_if: 0x30 },
            revision: 1,
            is_bridge: false,
            bars: [None; crate::pci::MAX_BARS],
            bar_problems: [None; crate::pci::MAX_BARS],
        };
        assert!(is_vl805(&function(0x1106, 0x3483)));
        assert!(!is_vl805(&function(0x1106, 0x3038)));
        assert!(!is_vl805(&function(0x1b21, 0x3483)));
        assert!(!is_vl805(&function(0x14e4, 0x2711)));
    }

    #[test]
    fn firmware_is_asked_for_only_when_missing() {
        let platform = ArenaPlatform::new(4096);
        let loaded = vl805(0x0001_38a1);
        let outcome: Firmware<&str> = ensure_firmware(&loaded, AT, &platform, |_| panic!("not needed"));
        assert_eq!(outcome, Firmware::AlreadyLoaded { version: 0x0001_38a1 });

        let empty = vl805(0);
        let outcome: Firmware<&str> = ensure_firmware(&empty, AT, &platform, |address| {
            assert_eq!(address, 0x10_0000);
            empty.0.borrow_mut().registers[usize::from(FIRMWARE_VERSION_OFFSET) / 4] = 0x0001_38a1;
            Ok(())
        });
        assert_eq!(outcome, Firmware::Reloaded { version: 0x0001_38a1 });
        assert!(format!("{outcome}")
            .contains("reloaded by the VideoCore (mailbox tag 0x00030058): version 0x138a1"));

        assert!(outcome.allows_use());
        assert!(Firmware::<&str>::AlreadyLoaded { version: 1 }.allows_use());
        let outcome = ensure_firmware(&vl805(0), AT, &platform, |_| Err("no answer"));
        assert!(!outcome.allows_use());
        assert_eq!(
            format!("{outcome}"),
            "VL805 firmware reload failed: no answer; its USB ports are not used"
        );
    }

    #[test]
    fn the_hardwired_pi4_address_is_0x100000() {
        assert_eq!(mailbox_address(FunctionAddress { bus: 1, device: 0, function: 0 }), 0x10_0000);
        assert_eq!(
            mailbox_address(FunctionAddress { bus: 2, device: 3, function: 4 }),
            0x20_0000 | 3 << 15 | 4 << 12
        );
    }
}
