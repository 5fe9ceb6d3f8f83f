//! Finding and walking the PCIe bus on the running machine: QEMU virt's generic ECAM host from the
//! device tree (`pci-host-ecam-generic`: `reg`, `bus-range`, `ranges`, `dma-ranges`), or the
//! board's Broadcom STB root complex (`root_complex` module: Pi 4, CM4, Pi 5); walked with
//! `drivers::pci`, every function listed with the BARs it was given (`pci_topology`).
#![forbid(unsafe_code)]

use super::pci_topology::{list, walk, PciTopology};
use super::Machine;
use crate::board::{BlockKind, MmioBlock};
use crate::devicetree::{DeviceNode, DeviceTree};
use crate::kernel_settings::KernelSettings;
use crate::println;
use drivers::pci::brcmstb::options::PcieOptions;
use drivers::pci::{ecam::Ecam, ranges};
use hal::mmio::WideAccess;

/// Walks the machine's PCIe host: the device tree's ECAM host if it names one, else the board's
/// root complex. The `pcie.` options apply to both.
pub fn enumerate(machine: &Machine, settings: &KernelSettings) -> Option<PciTopology> {
    let (options, errors) = PcieOptions::parse(settings.driver_options_for("pcie."));
    for error in errors {
        println!("warning: {error}");
    }
    let ecam = machine
        .info
        .device_tree
        .and_then(|tree| tree.find_compatible(&["pci-host-ecam-generic"]).map(|node| (tree, node)));
    if let Some((tree, node)) = ecam {
        super::stage(format_args!("pci enumeration ({})", node.name));
        return enumerate_ecam(machine, &tree, &node, &options);
    }
    let host = machine.info.profile.pcie?;
    enumerate_root_complex(machine, settings, &host, &options)
}

#[cfg(target_arch = "aarch64")]
fn enumerate_root_complex(
    machine: &Machine,
    settings: &KernelSettings,
    host: &crate::board::PcieHost,
    options: &PcieOptions,
) -> Option<PciTopology> {
    super::root_complex::enumerate(machine, settings, host, options)
}

/// No 32-bit Pi has a PCIe root complex, so the 32-bit kernel carries no driver for one.
#[cfg(target_arch = "arm")]
fn enumerate_root_complex(
    _machine: &Machine,
    _settings: &KernelSettings,
    host: &crate::board::PcieHost,
    _options: &PcieOptions,
) -> Option<PciTopology> {
    println!("{:<10} not driven by the 32-bit kernel; PCIe skipped", host.name);
    None
}

fn enumerate_ecam(
    machine: &Machine,
    tree: &DeviceTree<'_>,
    node: &DeviceNode<'_>,
    options: &PcieOptions,
) -> Option<PciTopology> {
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
    let region = match super::windows::open(block) {
        Ok(region) => region,
        Err(error) => {
            println!("pci        {error}; PCIe skipped");
            return None;
        }
    };
    let config = Ecam::new(region, first_bus, last_bus);
    let topology = walk(&config, windows, machine.platform, options);
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
