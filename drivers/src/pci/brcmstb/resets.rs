//! BCM2712's resets around a root complex (Linux `drivers/reset/reset-brcmstb.c` and
//! `reset-brcmstb-rescal.c`; docs/pcie-brcmstb.md §1, docs/hardware.md §3.3): the bridge reset is
//! one line of the SoC's reset controller (43 for pcie1, 44 for pcie2 in front of RP1), and
//! RESCAL, the SATA/PCIe resistor calibration shared by every root complex, sits in pcie1's
//! register page.
#![forbid(unsafe_code)]

use super::regs::{rescal, reset_controller, MISC_PCIE_STATUS, PCIE_STATUS};
use hal::mmio::RegisterIo;
use hal::platform::{wait_until, Platform};
use tock_registers::LocalRegisterCopy;

/// pcie2's bridge reset line: the root complex in front of RP1 (bcm2712.dtsi `resets =
/// <&pcie_rescal>, <&bcm_reset 44>`).
pub const PCIE2_BRIDGE_LINE: u32 = 44;

/// Whether reset controller line `line` is asserted (its SW_INIT_STATUS bit, Linux
/// `reset-brcmstb.c` `brcmstb_reset_status`). A read of the reset controller alone: the check to
/// make before touching a root complex the firmware may have left in reset, such as pcie2, which
/// it resets before starting the OS unless config.txt says `pciex4_reset=0`
/// (raspberrypi/rpi-eeprom#487).
pub fn line_in_reset<R: RegisterIo>(controller: &R, line: u32) -> bool {
    let (bank, bit) = reset_controller::bank_and_bit(line);
    controller.read32(bank + reset_controller::SW_INIT_STATUS) & bit != 0
}

/// Whether a root complex the firmware may have left running (BCM2712's pcie2) can be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkAccess {
    /// Its bridge is in reset: none of its registers may be read (an access raises an SError or
    /// hangs; which one is not documented).
    BridgeInReset,
    /// Out of reset, link down (MISC_PCIE_STATUS as read).
    LinkDown { status: u32 },
    /// Out of reset with PHYLINKUP and DL_ACTIVE set: the windows behind it answer.
    LinkUp,
}

/// The check before any access to a root complex behind reset line `line`: the reset
/// controller's status first ([`line_in_reset`]), and only with the bridge out of reset the root
/// complex's MISC_PCIE_STATUS, through `root_complex`, which is not called otherwise.
pub fn link_access<C: RegisterIo, R: RegisterIo>(
    controller: &C,
    line: u32,
    root_complex: impl FnOnce() -> R,
) -> LinkAccess {
    if line_in_reset(controller, line) {
        return LinkAccess::BridgeInReset;
    }
    let status = root_complex().read(MISC_PCIE_STATUS);
    if status_says_link_up(status) {
        LinkAccess::LinkUp
    } else {
        LinkAccess::LinkDown { status: status.get() }
    }
}

/// PHYLINKUP and DL_ACTIVE set in MISC_PCIE_STATUS (Linux `brcm_pcie_link_up`). All ones is what
/// a failed read returns (AXI_READ_ERROR_DATA on BCM2712), not a link.
pub fn status_says_link_up(status: LocalRegisterCopy<u32, PCIE_STATUS::Register>) -> bool {
    status.get() != u32::MAX
        && status.is_set(PCIE_STATUS::PCIE_PHYLINKUP)
        && status.is_set(PCIE_STATUS::PCIE_DL_ACTIVE)
}

/// After a reset line is released the block needs "typically 14 µs for the worst case"; Linux
/// waits 100-200 µs.
pub const LINE_SETTLE_US: u64 = 200;
/// RESCAL is polled every 100 µs for up to 1 ms (Linux `readl_poll_timeout(.., 100, 1000)`).
pub const RESCAL_TIMEOUT_US: u64 = 1000;

/// What the calibration step did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Calibration {
    /// Not run: RP1's link on pcie2 is live (`pciex4_reset=0`), and the calibration is shared
    /// with it. Whether re-running it would disturb that link is not known; it is not risked.
    KeptForRp1,
    /// Run now, and finished.
    Done,
}

/// Why RESCAL failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CalibrationError {
    /// START did not read back as set ("failed to start SATA/PCIe rescal").
    DidNotStart { start: u32 },
    /// STATUS stayed clear for 1 ms ("time out on SATA/PCIe rescal").
    Timeout { status: u32 },
}

/// The reset controller line of one root complex's bridge and the RESCAL block.
pub struct Bcm2712Resets<R: RegisterIo> {
    pub controller: R,
    pub rescal: R,
    pub bridge_line: u32,
}

impl<R: RegisterIo> Bcm2712Resets<R> {
    /// SW_INIT_SET: only this line's bit is written (the other lines of the bank, such as
    /// pcie2's, are untouched by the set/clear registers).
    pub fn assert_bridge(&self) {
        let (bank, bit) = reset_controller::bank_and_bit(self.bridge_line);
        self.controller.write32(bank + reset_controller::SW_INIT_SET, bit);
    }

    pub fn deassert_bridge<P: Platform>(&self, platform: &P) {
        let (bank, bit) = reset_controller::bank_and_bit(self.bridge_line);
        self.controller.write32(bank + reset_controller::SW_INIT_CLEAR, bit);
        platform.delay_us(LINE_SETTLE_US);
    }

    /// Runs RESCAL, once per boot as Linux does (a shared reset, `reset_control_reset`), whatever
    /// the firmware left in STATUS, unless RP1's link is live. pcie1's bridge must be out of
    /// reset: RESCAL is unreachable otherwise.
    pub fn calibrate<P: Platform>(
        &self,
        platform: &P,
        rp1_link_live: bool,
    ) -> Result<Calibration, CalibrationError> {
        if rp1_link_live {
            return Ok(Calibration::KeptForRp1);
        }
        let start = self.rescal.read32(rescal::START);
        self.rescal.write32(rescal::START, start | rescal::BIT);
        let start = self.rescal.read32(rescal::START);
        if start & rescal::BIT == 0 {
            return Err(CalibrationError::DidNotStart { start });
        }
        let finished =
            wait_until(platform, RESCAL_TIMEOUT_US, || self.rescal.read32(rescal::STATUS) & rescal::BIT != 0);
        if !finished {
            return Err(CalibrationError::Timeout { status: self.rescal.read32(rescal::STATUS) });
        }
        let start = self.rescal.read32(rescal::START);
        self.rescal.write32(rescal::START, start & !rescal::BIT);
        Ok(Calibration::Done)
    }
}
