//! The root complex's address windows (Linux `brcm_pcie_set_outbound_win`,
//! `brcm_pcie_encode_ibar_size`, `brcm_pcie_get_inbound_wins`; docs/pcie-brcmstb.md §2-§3,
//! docs/hardware.md §3.5-3.6): outbound windows turn CPU addresses into PCI addresses in 1 MiB
//! units; the inbound window turns device DMA addresses into CPU addresses and must be a power of
//! two in size, aligned to its size.
#![forbid(unsafe_code)]

use super::soc::Soc;
use crate::pci::Window;
use core::fmt;
use hal::platform::BusTranslation;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The register values of one outbound window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OutboundWindowValues {
    pub pci_low: u32,
    pub pci_high: u32,
    /// MISC_CPU_2_PCIE_MEM_WINn_BASE_LIMIT: base MB bits 11:0 at 15:4, limit MB bits 11:0 at 31:20.
    pub base_limit: u32,
    /// MB number bits 19:12 of the base and of the limit.
    pub base_high: u32,
    pub limit_high: u32,
}

/// A window the hardware cannot express.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowProblem {
    /// An outbound window's CPU base is not on a 1 MiB boundary (the registers count in MB).
    CpuBaseNotMibAligned {
        cpu_base: u64,
    },
    /// An outbound window ends beyond the 40-bit CPU address space the registers reach.
    BeyondFortyBits {
        cpu_base: u64,
        size_bytes: u64,
    },
    EmptyWindow {
        cpu_base: u64,
    },
    /// The inbound size is outside what RC_BARn_CONFIG_LO.SIZE encodes (4 KiB..64 GiB).
    InboundSizeUnencodable {
        size_bytes: u64,
    },
    /// The inbound window's PCI address is not aligned to its (power-of-two) size.
    InboundMisaligned {
        pci_base: u64,
        size_bytes: u64,
    },
    /// BCM2711's inbound window maps CPU address 0; `dma-ranges` said otherwise.
    InboundCpuBaseNotZero {
        cpu_base: u64,
    },
    /// BCM2711's main inbound window may not start between 2 and 4 GiB (Linux refuses it).
    InboundBetween2And4Gib {
        pci_base: u64,
    },
}

impl fmt::Display for WindowProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            WindowProblem::CpuBaseNotMibAligned { cpu_base } => {
                write!(f, "outbound window at CPU {cpu_base:#x} is not 1 MiB aligned")
            }
            WindowProblem::BeyondFortyBits { cpu_base, size_bytes } => {
                write!(f, "outbound window {cpu_base:#x}+{size_bytes:#x} ends beyond 40-bit CPU addresses")
            }
            WindowProblem::EmptyWindow { cpu_base } => {
                write!(f, "outbound window at CPU {cpu_base:#x} is empty")
            }
            WindowProblem::InboundSizeUnencodable { size_bytes } => {
                write!(f, "inbound window of {size_bytes:#x} bytes is outside 4 KiB..64 GiB")
            }
            WindowProblem::InboundMisaligned { pci_base, size_bytes } => {
                write!(f, "inbound window at PCI {pci_base:#x} is not aligned to its size {size_bytes:#x}")
            }
            WindowProblem::InboundCpuBaseNotZero { cpu_base } => {
                write!(f, "BCM2711's inbound window maps CPU address 0, not {cpu_base:#x}")
            }
            WindowProblem::InboundBetween2And4Gib { pci_base } => {
                write!(f, "BCM2711's inbound window may not start at PCI {pci_base:#x} (between 2 and 4 GiB)")
            }
        }
    }
}

/// The registers for CPU `window.cpu_base..` → PCI `window.pci_base..` (Linux
/// `brcm_pcie_set_outbound_win`: MB numbers of base and last byte, bits 39:32 in the HI registers).
pub fn outbound_window_values(window: &Window) -> Result<OutboundWindowValues, WindowProblem> {
    let cpu_base = window.cpu_base;
    if window.size_bytes == 0 {
        return Err(WindowProblem::EmptyWindow { cpu_base });
    }
    if !cpu_base.is_multiple_of(MIB) {
        return Err(WindowProblem::CpuBaseNotMibAligned { cpu_base });
    }
    let last = cpu_base.checked_add(window.size_bytes - 1).filter(|last| *last < 1 << 40);
    let Some(last) = last else {
        return Err(WindowProblem::BeyondFortyBits { cpu_base, size_bytes: window.size_bytes });
    };
    let (base_mb, limit_mb) = (cpu_base / MIB, last / MIB);
    Ok(OutboundWindowValues {
        pci_low: window.pci_base as u32,
        pci_high: (window.pci_base >> 32) as u32,
        base_limit: ((limit_mb as u32 & 0xfff) << 20) | ((base_mb as u32 & 0xfff) << 4),
        base_high: (base_mb >> 12) as u32 & 0xff,
        limit_high: (limit_mb >> 12) as u32 & 0xff,
    })
}

/// RC_BARn_CONFIG_LO.SIZE for a power-of-two window (Linux `brcm_pcie_encode_ibar_size`: 4-32 KiB
/// are 0x1c-0x1f, 64 KiB-64 GiB are log2 - 15).
pub fn inbound_size_code(size_bytes: u64) -> Option<u32> {
    if !size_bytes.is_power_of_two() {
        return None;
    }
    match size_bytes.trailing_zeros() {
        log2 @ 12..=15 => Some(log2 - 12 + 0x1c),
        log2 @ 16..=36 => Some(log2 - 15),
        _ => None,
    }
}

/// The one inbound window the driver programs: where system memory appears to devices.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InboundWindow {
    pub pci_base: u64,
    pub cpu_base: u64,
    /// A power of two covering the `dma-ranges` entry.
    pub size_bytes: u64,
}

impl InboundWindow {
    /// The window for the memory a `dma-ranges` entry describes: its size rounded up to a power
    /// of two (Linux: "3GB of memory requires a 4GB viewport"), checked against what `soc`
    /// accepts.
    pub fn covering(soc: Soc, dma: &BusTranslation) -> Result<InboundWindow, WindowProblem> {
        let size_bytes = dma.size_bytes.checked_next_power_of_two().unwrap_or(0);
        if inbound_size_code(size_bytes).is_none() {
            return Err(WindowProblem::InboundSizeUnencodable { size_bytes: dma.size_bytes });
        }
        if !dma.bus_base.is_multiple_of(size_bytes) {
            return Err(WindowProblem::InboundMisaligned { pci_base: dma.bus_base, size_bytes });
        }
        if soc == Soc::Bcm2711 {
            if dma.cpu_base != 0 {
                return Err(WindowProblem::InboundCpuBaseNotZero { cpu_base: dma.cpu_base });
            }
            if dma.bus_base > 2 * GIB && dma.bus_base < 4 * GIB {
                return Err(WindowProblem::InboundBetween2And4Gib { pci_base: dma.bus_base });
            }
        }
        Ok(InboundWindow { pci_base: dma.bus_base, cpu_base: dma.cpu_base, size_bytes })
    }

    pub fn size_code(&self) -> u32 {
        inbound_size_code(self.size_bytes).unwrap_or(0)
    }

    /// MISC_CTRL.SCB0_SIZE on BCM2711: log2 of the memory controller window - 15.
    pub fn scb_size_code(&self) -> u32 {
        self.size_bytes.trailing_zeros().saturating_sub(15)
    }
}

/// The outbound windows of a host, in register order: the 32-bit one, then the 64-bit one.
pub fn outbound_list(windows: &crate::pci::HostWindows) -> impl Iterator<Item = Window> {
    [windows.memory32, windows.memory64].into_iter().flatten()
}
