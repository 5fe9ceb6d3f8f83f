//! The PCI functions found behind one host bridge, as the drivers that attach to them see them
//! (class, BARs, how the bridge sees RAM for DMA, how wide registers are reached); the bus walk
//! every host shares (waiting for functions that answer configuration retry, `pcie.ready-ms=`,
//! with a line per second) and its listing on the console.
#![forbid(unsafe_code)]

use super::platform::KernelPlatform;
use crate::println;
use alloc::vec::Vec;
use bench::units::ByteSize;
use drivers::pci::brcmstb::options::PcieOptions;
use drivers::pci::{ready, ConfigAccess, Enumerator, HostWindows, ReadyEvent, ReadyWait, Topology};
pub use drivers::pci::{AssignedBar, BarProblem, ClassCode, FunctionAddress, PciFunction};
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

/// Walks `config`'s buses (waiting for retrying functions as `pcie.ready-ms=` says) and sets the
/// payload sizes.
pub fn walk<C: ConfigAccess>(
    config: &C,
    windows: HostWindows,
    platform: &'static KernelPlatform,
    options: &PcieOptions,
) -> Topology {
    let report = |event: &ReadyEvent| println!("pci        {event}");
    let wait = ReadyWait {
        clock: platform,
        limit_ms: options.ready_ms.unwrap_or(ready::DEFAULT_READY_MS),
        report: &report,
    };
    Enumerator::new(config, windows).with_ready_wait(wait).run()
}

/// Prints the windows, then every function with its class and BARs, then what was left out and
/// the payload sizes.
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
        match function.pcie {
            Some(pcie) => println!(
                "pci        {} {:04x}:{:04x} class {} ({}), PCIe max payload {} bytes ({} supported), read request {} bytes",
                function.address,
                function.vendor_id,
                function.device_id,
                function.class,
                function.class.name(),
                pcie.max_payload_bytes,
                pcie.max_payload_supported_bytes,
                pcie.max_read_request_bytes
            ),
            None => println!(
                "pci        {} {:04x}:{:04x} class {} ({})",
                function.address,
                function.vendor_id,
                function.device_id,
                function.class,
                function.class.name()
            ),
        }
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
    for address in &topology.not_ready {
        println!("pci        {address} still answered configuration retry: left out (pcie.ready-ms=)");
    }
    if let Some(payload) = topology.payload {
        println!("pci        {payload}");
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
