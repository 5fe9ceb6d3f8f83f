//! Which Broadcom STB root complex design, and what differs between them: register offsets,
//! burst size, the fastest link, how wide registers behind it are read (Linux
//! `drivers/pci/controller/pcie-brcmstb.c` `pcie_cfg_data` per SoC; docs/pcie-brcmstb.md §4, §6).
#![forbid(unsafe_code)]

use super::regs::{offsets, HARD_DEBUG, MISC_HARD_PCIE_HARD_DEBUG_2711, MISC_HARD_PCIE_HARD_DEBUG_2712};
use hal::mmio::{Reg, WideAccess};

/// Which root complex design.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Soc {
    Bcm2711,
    Bcm2712,
}

impl Soc {
    pub fn name(self) -> &'static str {
        match self {
            Soc::Bcm2711 => "BCM2711",
            Soc::Bcm2712 => "BCM2712",
        }
    }

    pub(super) fn hard_debug(self) -> Reg<HARD_DEBUG::Register> {
        match self {
            Soc::Bcm2711 => MISC_HARD_PCIE_HARD_DEBUG_2711,
            Soc::Bcm2712 => MISC_HARD_PCIE_HARD_DEBUG_2712,
        }
    }

    pub(super) fn intr2_cpu_base(self) -> usize {
        match self {
            Soc::Bcm2711 => offsets::INTR2_CPU_BASE_2711,
            Soc::Bcm2712 => offsets::INTR2_CPU_BASE_2712,
        }
    }

    /// SCB_MAX_BURST_SIZE: 128 bytes on BCM2711, 512 on BCM2712 (Linux; the sources disagree for
    /// BCM2712, docs/pcie-brcmstb.md §4).
    pub(super) fn max_burst_size(self) -> u32 {
        match self {
            Soc::Bcm2711 => 0,
            Soc::Bcm2712 => 2,
        }
    }

    /// The fastest link generation the root complex trains to.
    pub fn fastest_gen(self) -> u8 {
        match self {
            Soc::Bcm2711 => 2,
            Soc::Bcm2712 => 3,
        }
    }

    /// How 64-bit registers of devices behind it must be read (docs/pcie-brcmstb.md §6).
    pub fn wide_access(self) -> WideAccess {
        match self {
            Soc::Bcm2711 => WideAccess::Split32,
            Soc::Bcm2712 => WideAccess::Native,
        }
    }
}
