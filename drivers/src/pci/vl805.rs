//! The VIA VL805 USB 3 controller behind the Pi 4 B / 400 root complex (PCI 1106:3483): after a
//! PCIe reset its firmware is gone, and the VideoCore reloads it when told through the mailbox
//! (tag NOTIFY_XHCI_RESET, 0x0003_0058, with the function's bus/device/function); a non-zero
//! firmware version at configuration offset 0x50 means it is already loaded (Linux
//! `rpi_firmware_init_vl805` and `reset-raspberrypi.c`; docs/pcie-brcmstb.md §8, docs/hardware.md
//! §3.2). Whether the reload worked is decided by that version, read again until it is non-zero:
//! the mailbox answer alone does not say (its tag response bit may be clear).
#![forbid(unsafe_code)]

use super::{ConfigAccess, FunctionAddress, PciFunction};
use core::fmt;
use hal::platform::{Deadline, Platform};

pub const VENDOR_ID: u16 = 0x1106;
pub const DEVICE_ID: u16 = 0x3483;
/// Configuration offset of the loaded firmware's version (0 = none).
pub const FIRMWARE_VERSION_OFFSET: u16 = 0x50;
/// The firmware needs 200 µs-1 ms to start the controller after the mailbox call (Linux
/// `reset-raspberrypi.c`: `usleep_range(200, 1000)`); the version is read again for up to this
/// long before the reload counts as failed. How long a real load takes is not documented.
pub const VERSION_WAIT_MS: u64 = 1000;
/// Between two reads of the version.
const VERSION_POLL_US: u64 = 1000;

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
    /// The VideoCore was asked and the version reads so `waited_ms` after the call returned.
    Reloaded { version: u32, waited_ms: u64 },
    /// The mailbox call failed.
    ReloadFailed(E),
    /// The call was answered, but the version still read 0 after [`VERSION_WAIT_MS`]: no
    /// firmware runs in the VL805.
    VersionStillZero { waited_ms: u64 },
}

impl<E> Firmware<E> {
    /// Whether the controller may be driven: not after a failed reload (docs/usb-storage.md §13).
    pub fn allows_use(&self) -> bool {
        matches!(self, Firmware::AlreadyLoaded { .. } | Firmware::Reloaded { .. })
    }
}

impl<E: fmt::Display> fmt::Display for Firmware<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Firmware::AlreadyLoaded { version } => {
                write!(f, "VL805 firmware {version:#x} already loaded")
            }
            Firmware::Reloaded { version, waited_ms } => write!(
                f,
                "VL805 firmware reloaded by the VideoCore (mailbox tag 0x00030058): version {version:#x} after {waited_ms} ms"
            ),
            Firmware::ReloadFailed(error) => {
                write!(f, "VL805 firmware reload failed: {error}; its USB ports are not used")
            }
            Firmware::VersionStillZero { waited_ms } => write!(
                f,
                "VL805 firmware reload failed: the mailbox answered, but the firmware version at configuration offset 0x50 still reads 0 after {waited_ms} ms; its USB ports are not used"
            ),
        }
    }
}

/// Asks for the firmware through `notify` (the mailbox's NOTIFY_XHCI_RESET with the function's
/// address) unless a version is already loaded, then reads the version until it is non-zero, for
/// at most [`VERSION_WAIT_MS`].
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
    if let Err(error) = notify(mailbox_address(address)) {
        return Firmware::ReloadFailed(error);
    }
    let wait = Deadline::after_us(platform, VERSION_WAIT_MS * 1000);
    loop {
        let version = firmware_version(config, address);
        let waited_ms = wait.elapsed_us(platform) / 1000;
        if version != 0 {
            return Firmware::Reloaded { version, waited_ms };
        }
        if wait.has_passed(platform) {
            return Firmware::VersionStillZero { waited_ms };
        }
        platform.delay_us(VERSION_POLL_US);
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
            pcie: None,
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
        assert_eq!(outcome, Firmware::Reloaded { version: 0x0001_38a1, waited_ms: 0 });
        assert!(format!("{outcome}")
            .contains("reloaded by the VideoCore (mailbox tag 0x00030058): version 0x138a1 after 0 ms"));

        assert!(outcome.allows_use());
        assert!(Firmware::<&str>::AlreadyLoaded { version: 1 }.allows_use());
        let outcome = ensure_firmware(&vl805(0), AT, &platform, |_| Err("no answer"));
        assert!(!outcome.allows_use());
        assert_eq!(
            format!("{outcome}"),
            "VL805 firmware reload failed: no answer; its USB ports are not used"
        );
    }

    /// A VL805 whose firmware version reads 0 until `loaded_after_ns` past the mailbox call.
    struct SlowLoader<'p> {
        platform: &'p ArenaPlatform,
        loaded_at_ns: core::cell::Cell<Option<u64>>,
    }
    impl ConfigAccess for SlowLoader<'_> {
        fn read32(&self, function: FunctionAddress, offset: u16) -> u32 {
            let loaded = self.loaded_at_ns.get().is_some_and(|at| self.platform.peek_ns() >= at);
            match (function, offset) {
                (AT, FIRMWARE_VERSION_OFFSET) if loaded => 0x0001_38a1,
                (AT, _) => 0,
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

    #[test]
    fn a_version_appearing_400_ms_after_the_call_is_waited_for_and_one_that_never_does_is_named() {
        let platform = ArenaPlatform::new(4096);
        let slow = SlowLoader { platform: &platform, loaded_at_ns: core::cell::Cell::new(None) };
        let outcome: Firmware<&str> = ensure_firmware(&slow, AT, &platform, |_| {
            slow.loaded_at_ns.set(Some(platform.peek_ns() + 400_000_000));
            Ok(())
        });
        match outcome {
            Firmware::Reloaded { version: 0x0001_38a1, waited_ms } => {
                assert!((400..=410).contains(&waited_ms), "{waited_ms}")
            }
            other => panic!("{other:?}"),
        }
        assert!(outcome.allows_use());
        // The mailbox answered but nothing was loaded: a named failure after a second.
        let never = SlowLoader { platform: &platform, loaded_at_ns: core::cell::Cell::new(None) };
        let outcome: Firmware<&str> = ensure_firmware(&never, AT, &platform, |_| Ok(()));
        assert!(matches!(outcome, Firmware::VersionStillZero { waited_ms: 1000..=1010 }), "{outcome:?}");
        assert!(!outcome.allows_use());
        assert!(format!("{outcome}").contains("still reads 0 after 10"), "{outcome}");
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
