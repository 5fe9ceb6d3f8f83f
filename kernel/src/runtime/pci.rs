//! PCIe on the running machine: QEMU virt's generic ECAM host from the device tree
//! (`pci-host-ecam-generic`: `reg`, `bus-range`, `ranges`, `dma-ranges`), or the board's Broadcom
//! STB root complex (`pcie` module: Pi 4, CM4, Pi 5); walked with `drivers::pci`, every function
//! listed with the BARs it was given.

use super::Machine;
use crate::board::{BlockKind, MmioBlock};
use crate::cmdline::KernelSettings;
use crate::devicetree::{DeviceNode, DeviceTree};
use crate::println;
use alloc::vec::Vec;
use bench::units::ByteSize;
use drivers::mmio::WideAccess;
use drivers::pci::{ecam::Ecam, ranges, Enumerator, HostWindows, Topology};
pub use drivers::pci::{AssignedBar, BarProblem, ClassCode, FunctionAddress, PciFunction};
use drivers::platform::BusTranslation;

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

/// Walks the machine's PCIe host: the device tree's ECAM host if it names one, else the board's
/// root complex.
pub fn enumerate(machine: &Machine, settings: &KernelSettings) -> Option<PciTopology> {
    let ecam = machine
        .info
        .device_tree
        .and_then(|tree| tree.find_compatible(&["pci-host-ecam-generic"]).map(|node| (tree, node)));
    if let Some((tree, node)) = ecam {
        super::stage(format_args!("pci enumeration ({})", node.name));
        return enumerate_ecam(&tree, &node);
    }
    let host = machine.info.profile.pcie?;
    enumerate_root_complex(machine, settings, &host)
}

#[cfg(target_arch = "aarch64")]
fn enumerate_root_complex(
    machine: &Machine,
    settings: &KernelSettings,
    host: &crate::board::PcieHost,
) -> Option<PciTopology> {
    super::pcie::enumerate(machine, settings, host)
}

/// No 32-bit Pi has a PCIe root complex, so the 32-bit kernel carries no driver for one.
#[cfg(target_arch = "arm")]
fn enumerate_root_complex(
    _machine: &Machine,
    _settings: &KernelSettings,
    host: &crate::board::PcieHost,
) -> Option<PciTopology> {
    println!("{:<10} not driven by the 32-bit kernel; PCIe skipped", host.name);
    None
}

fn enumerate_ecam(tree: &DeviceTree<'_>, node: &DeviceNode<'_>) -> Option<PciTopology> {
    let Some((ecam_base, ecam_bytes)) = node.first_reg else {
        println!("pci        {}: no usable reg property; PCIe skipped", node.name);
        return None;
    };
    let (first_bus, last_bus) = match tree.property(node.offset, "bus-range") {
        Some(value) if value.len() == 8 => (value[3], value[7]),
        _ => (0, ((ecam_bytes >> 20).saturating_sub(1)).min(255) as u8),
    };
    let decoded_buses = u64::from(last_bus - first_bus) + 1;
    if decoded_buses << 20 > ecam_bytes {
        println!(
            "pci        ECAM at {ecam_base:#x} is {ecam_bytes:#x} bytes, too small for buses {first_bus}-{last_bus}; PCIe skipped"
        );
        return None;
    }
    let windows = tree
        .property(node.offset, "ranges")
        .map(|value| ranges::host_windows(value, node.parent_address_cells, node.size_cells))
        .unwrap_or_default();
    let dma = ranges::dma_translation(
        tree.property(node.offset, "dma-ranges"),
        node.parent_address_cells,
        node.size_cells,
    );
    if windows.memory32.is_none() && windows.memory64.is_none() {
        println!(
            "pci        host at {ecam_base:#x} has no memory window in its ranges; BARs cannot be assigned"
        );
    }
    let block = MmioBlock::new(BlockKind::PciEcam, ecam_base, decoded_buses << 20);
    // SAFETY: the device tree names this ECAM region, and the memory map covers it as device memory.
    let region = unsafe { super::windows::open(block) };
    let config = Ecam::new(region, first_bus, last_bus);
    let topology = Enumerator::new(&config, windows).run();
    println!(
        "pci        ECAM host at {ecam_base:#x}, buses {first_bus}-{last_bus}, {} function{}",
        topology.functions.len(),
        if topology.functions.len() == 1 { "" } else { "s" }
    );
    list(&topology, &windows);
    Some(PciTopology {
        functions: topology.functions.iter().copied().collect(),
        dma,
        wide_access: WideAccess::Native,
    })
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
