//! The PCI functions found behind one host bridge, as the drivers that attach to them see them
//! (class, BARs, how the bridge sees RAM for DMA, how wide registers are reached), and their
//! listing on the console.
#![forbid(unsafe_code)]

use crate::println;
use alloc::vec::Vec;
use bench::units::ByteSize;
pub use drivers::pci::{AssignedBar, BarProblem, ClassCode, FunctionAddress, PciFunction};
use drivers::pci::{HostWindows, Topology};
use hal::mmio::WideAccess;
use hal::platform::BusTranslation;

/// The functions found behind one host bridge, how they see RAM for DMA, and how their 64-bit
/// registers must be reached.
pub struct PciTopology {
    pub functions: Vec<PciFunction>,
    pub dma: BusTranslation,
    /// `Split32` behind BCM2711's root complex (no 64-bit MMIO), `Native` elsewhere.
    pub wide_access: WideAccess,
}

impl PciTopology {
    pub fn with_class(&self, base: u8, sub: u8, prog_if: u8) -> impl Iterator<Item = &PciFunction> {
        let wanted = ClassCode { base, sub, prog_if };
        self.functions.iter().filter(move |f| f.class == wanted)
    }
}

/// Prints the windows, then every function with its class and BARs.
pub fn list(topology: &Topology, windows: &HostWindows) {
    for window in [windows.memory32, windows.memory64].into_iter().flatten() {
        println!(
            "pci          window cpu {:#x} -> pci {:#x}, {}{}",
            window.cpu_base,
            window.pci_base,
            ByteSize(window.size_bytes),
            if window.prefetchable { ", prefetchable" } else { "" }
        );
    }
    for function in &topology.functions {
        println!(
            "pci        {} {:04x}:{:04x} class {} ({})",
            function.address,
            function.vendor_id,
            function.device_id,
            function.class,
            function.class.name()
        );
        for bar in function.bars.iter().flatten() {
            println!(
                "pci          BAR{} {}-bit memory{} at {:#x}, {}",
                bar.index,
                if bar.is_64_bit { 64 } else { 32 },
                if bar.prefetchable { " (prefetchable)" } else { "" },
                bar.cpu_address,
                ByteSize(bar.size_bytes)
            );
        }
        for problem in function.bar_problems.iter().flatten() {
            list_problem(problem);
        }
    }
    if topology.truncated {
        println!("pci        more functions than the kernel records; the rest are ignored");
    }
}

fn list_problem(problem: &BarProblem) {
    match problem {
        BarProblem::IoSpace { index } => println!("pci          BAR{index} is I/O space: left unassigned"),
        BarProblem::NoRoom { index, size_bytes, is_64_bit } => println!(
            "pci          BAR{index} ({}-bit, {}) does not fit in the host's windows: left unassigned",
            if *is_64_bit { 64 } else { 32 },
            ByteSize(*size_bytes)
        ),
        BarProblem::Nonsense { index, value } => {
            println!("pci          BAR{index} reads back {value:#010x}, not a valid size: left unassigned")
        }
    }
}
