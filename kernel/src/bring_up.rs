//! The order the kernel brings devices up in, and each device's own bring-up deadline.
//!
//! The board's SD hosts come first, before PCIe is touched: the PCIe link training of a root
//! complex, an NVMe controller waiting out its CAP.TO (up to 127.5 s) or a USB port that takes
//! its time must not stand between the SD card and its measurement. Every device then gets its
//! own deadline ([`DeviceDeadline`]), checked between the steps of its bring-up (one USB port
//! after another, one NVMe namespace after another, the SD card's timing read): a device that
//! runs past it stops where it is, says so, and leaves the others their time. The waits inside
//! the drivers are bounded each (their own timeouts); the deadline bounds their sum.
#![forbid(unsafe_code)]

use blockdev::Clock;

/// What is attached, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachStep {
    /// The SD hosts of the board table (Arasan, EMMC2, BCM2712 sdio1, sdhost).
    BoardSdHosts,
    /// The Pi 5's RP1 USB controllers behind pcie2 (`usb.rp1=on`), while RP1's link is as the
    /// firmware left it: before pcie1 is brought up.
    Rp1Usb,
    /// PCIe: the device tree's ECAM host or the board's root complex, walked.
    PciEnumeration,
    /// SDHCI functions found on PCIe (`sdhci-pci`).
    PciSdHosts,
    Nvme,
    Usb,
}

/// The order of [`AttachStep`]s: SD before PCIe; the names SD cards get do not change (board
/// hosts first, then PCI ones).
pub const ATTACH_ORDER: [AttachStep; 6] = [
    AttachStep::BoardSdHosts,
    AttachStep::Rp1Usb,
    AttachStep::PciEnumeration,
    AttachStep::PciSdHosts,
    AttachStep::Nvme,
    AttachStep::Usb,
];

/// Each device's bring-up budget, ms: an SD host with its identification, the 1.8 V switch's power
/// cycles and the timing read; an NVMe controller with its namespaces and self-test; an xHCI with
/// every port.
pub const SD_HOST_BUDGET_MS: u64 = 10_000;
pub const NVME_CONTROLLER_BUDGET_MS: u64 = 60_000;
pub const XHCI_BUDGET_MS: u64 = 30_000;

/// One device's bring-up deadline.
pub struct DeviceDeadline<'c, C: Clock + ?Sized> {
    clock: &'c C,
    started_ticks: u64,
    budget_ms: u64,
}

impl<'c, C: Clock + ?Sized> DeviceDeadline<'c, C> {
    /// Starts the clock on a device's bring-up with `budget_ms`.
    pub fn start(clock: &'c C, budget_ms: u64) -> Self {
        DeviceDeadline { clock, started_ticks: clock.now_ticks(), budget_ms }
    }

    pub fn elapsed_ms(&self) -> u64 {
        self.clock.ticks_to_ns(self.clock.now_ticks().saturating_sub(self.started_ticks)) / 1_000_000
    }

    /// Whether the device has used its budget.
    pub fn has_passed(&self) -> bool {
        self.elapsed_ms() >= self.budget_ms
    }

    pub fn budget_ms(&self) -> u64 {
        self.budget_ms
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::Cell;

    struct FakeClock {
        now_ms: Cell<u64>,
    }
    impl Clock for FakeClock {
        fn now_ticks(&self) -> u64 {
            self.now_ms.get()
        }
        fn ticks_per_second(&self) -> u64 {
            1000
        }
    }

    #[test]
    fn the_board_sd_hosts_come_before_any_pcie() {
        let position = |step| ATTACH_ORDER.iter().position(|s| *s == step).unwrap();
        assert_eq!(ATTACH_ORDER[0], AttachStep::BoardSdHosts);
        assert!(position(AttachStep::BoardSdHosts) < position(AttachStep::PciEnumeration));
        for step in [AttachStep::PciSdHosts, AttachStep::Nvme, AttachStep::Usb] {
            assert!(position(AttachStep::PciEnumeration) < position(step), "{step:?} needs PCIe first");
        }
        assert!(position(AttachStep::Rp1Usb) < position(AttachStep::PciEnumeration));
        // SD names stay in their order: board hosts, then PCI hosts.
        assert!(position(AttachStep::BoardSdHosts) < position(AttachStep::PciSdHosts));
    }

    #[test]
    fn each_device_has_its_own_deadline() {
        let clock = FakeClock { now_ms: Cell::new(1_000) };
        let first = DeviceDeadline::start(&clock, 500);
        clock.now_ms.set(1_400);
        assert!(!first.has_passed());
        clock.now_ms.set(1_500);
        assert!(first.has_passed());
        assert_eq!(first.elapsed_ms(), 500);
        // The next device starts afresh, whatever the first one used.
        let second = DeviceDeadline::start(&clock, 500);
        assert!(!second.has_passed());
        assert_eq!(second.budget_ms(), 500);
    }
}
