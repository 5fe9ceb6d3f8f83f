//! The Pi's Broadcom STB PCIe root complex on the running machine (docs/pcie-brcmstb.md,
//! docs/hardware.md §3): the plan from the board table, device tree and command line
//! (`crate::root_complex_plan`), a first register read that may fault (QEMU's raspi4b has no root complex
//! at all: docs/qemu.md §9), the bring-up with `drivers::pci::brcmstb`, one line for the link, the
//! bus walk and its listing, and on a Pi 4 the VL805's firmware reload before the USB driver
//! (`usb` module) takes the controller.
#![forbid(unsafe_code)]

use super::pci_topology::{self, PciTopology};
use super::{windows, Machine};
use crate::board::{BridgeReset, MmioBlock, PcieHost};
use crate::kernel_settings::KernelSettings;
use crate::println;
use crate::root_complex_plan::{self, HostPlan, WindowSource};
use bench::units::ByteSize;
use drivers::pci::brcmstb::options::PcieOptions;
use drivers::pci::brcmstb::regs::{offsets, reset_controller};
use drivers::pci::brcmstb::{Bcm2712Resets, LinkPlan, LinkUp, RootComplex};
use drivers::pci::{vl805, PciFunction};
use hal::mmio::{Mmio, RegisterIo};
use hal::platform::Platform;

type KernelRootComplex = RootComplex<'static, Mmio, super::platform::KernelPlatform>;

/// Brings the board's root complex up and walks it; `None` when it is off, absent or its link
/// is down (each said on the console).
pub fn enumerate(
    machine: &Machine,
    settings: &KernelSettings,
    board: &PcieHost,
    options: &PcieOptions,
) -> Option<PciTopology> {
    let name = board.name;
    if settings.pcie_off {
        println!("{name:<10} off (pcie=off): the root complex is left as the firmware left it");
        return None;
    }
    let plan = root_complex_plan::plan(
        board,
        machine.info.device_tree.as_ref(),
        machine.info.board_revision,
        options,
    );
    describe(&plan);
    super::stage(format_args!("{name} bring-up"));
    let (probe_block, probe_offset, probe_name) = first_register(board);
    let probe_address = probe_block.base + probe_offset;
    match windows::probe_read32(probe_block, probe_offset) {
        Ok(Some(_)) => {}
        Ok(None) => {
            println!(
                "{name:<10} link down: nothing answers at {:#x} (reading {probe_name} at {probe_address:#x} raised a synchronous external abort); PCIe skipped",
                board.registers.base
            );
            return None;
        }
        Err(error) => {
            println!("{name:<10} {error}; PCIe skipped");
            return None;
        }
    }
    let root = match root_complex(machine, board) {
        Ok(root) => root,
        Err(error) => {
            println!("{name:<10} {error}; PCIe skipped");
            return None;
        }
    };
    let link_plan = LinkPlan {
        outbound: plan.host.windows,
        inbound: plan.host.dma,
        gen: plan.gen,
        perst_extra_ms: plan.perst_extra_ms,
        rp1_link_live: super::rp1::rp1_link_live(machine.info.profile),
        num_lanes: plan.num_lanes,
        vdm_qos_map: plan.vdm_qos_map,
        spread_spectrum: plan.spread_spectrum,
    };
    match root.bring_up(&link_plan) {
        Ok(link) => report_link(name, &link),
        Err(error) => {
            println!("{name:<10} {error}; no PCIe devices");
            return None;
        }
    }
    let topology = pci_topology::walk(&root, plan.host.windows, machine.platform, options);
    println!(
        "pci        {name}: {} function{}",
        topology.functions.len(),
        if topology.functions.len() == 1 { "" } else { "s" }
    );
    pci_topology::list(&topology, &plan.host.windows);
    // A VL805 whose firmware could not be reloaded is left out: nothing may drive it.
    let usable = |function: &&PciFunction| {
        !vl805::is_vl805(function) || reload_vl805_firmware(machine, &root, function)
    };
    Some(PciTopology {
        functions: topology.functions.iter().filter(usable).copied().collect(),
        dma: plan.host.dma,
        wide_access: board.soc.wide_access(),
    })
}

fn describe(plan: &HostPlan) {
    let host = &plan.host;
    let source = match &plan.source {
        WindowSource::DeviceTree(node) => alloc::format!("device tree {node}"),
        WindowSource::BoardTable => alloc::string::String::from("board table"),
    };
    println!(
        "{:<10} {} root complex at {:#x} ({source}): inbound pci {:#x} -> cpu {:#x} ({}), Gen{} limit, PERST# extra {} ms",
        host.name,
        host.soc.name(),
        host.registers.base,
        host.dma.bus_base,
        host.dma.cpu_base,
        ByteSize(host.dma.size_bytes),
        plan.gen,
        plan.perst_extra_ms
    );
    for note in &plan.notes {
        println!("{:<10} {note}", host.name);
    }
}

/// The first register the bring-up reads, which must answer for the root complex to exist:
/// BCM2711's RGR1_SW_INIT_1 (the only one readable while the bridge is in reset), BCM2712's
/// reset controller status of the bridge's line.
fn first_register(board: &PcieHost) -> (MmioBlock, u64, &'static str) {
    match board.bridge_reset {
        Some(BridgeReset { controller, line, .. }) => {
            let (bank, _) = reset_controller::bank_and_bit(line);
            (
                controller,
                (bank + reset_controller::SW_INIT_STATUS) as u64,
                "the reset controller's SW_INIT_STATUS",
            )
        }
        None => (board.registers, offsets::RGR1_SW_INIT_1 as u64, "RGR1_SW_INIT_1"),
    }
}

/// The root complex on the board table's blocks (checked against the device tree's reg), which
/// nothing else in the kernel uses.
fn root_complex(machine: &Machine, board: &PcieHost) -> Result<KernelRootComplex, windows::OutsideDevices> {
    let registers = windows::open(board.registers)?;
    Ok(match board.bridge_reset {
        None => RootComplex::bcm2711(registers, machine.platform),
        Some(reset) => {
            let (controller, rescal_block) = (windows::open(reset.controller)?, windows::open(reset.rescal)?);
            let resets = Bcm2712Resets { controller, rescal: rescal_block, bridge_line: reset.line };
            RootComplex::bcm2712(registers, resets, machine.platform)
        }
    })
}

fn report_link(name: &str, link: &LinkUp) {
    println!("{name:<10} {link}");
}

/// Pi 4 B / 400: the VL805 lost its firmware with the PCIe reset; the VideoCore reloads it when
/// told, before the USB driver touches the controller. Whether the controller may be used.
fn reload_vl805_firmware<R: RegisterIo, P: Platform>(
    machine: &Machine,
    root: &RootComplex<'_, R, P>,
    function: &PciFunction,
) -> bool {
    let Some(firmware) = machine.firmware.as_ref() else {
        println!("pci          VL805: no mailbox to ask for its firmware; its USB ports are not used");
        return false;
    };
    let outcome = vl805::ensure_firmware(root, function.address, machine.platform, |address| {
        firmware.notify_xhci_reset(address)
    });
    println!("pci          {outcome}");
    outcome.allows_use()
}
