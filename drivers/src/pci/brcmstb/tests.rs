//! Host tests of the root complex driver against the register model (`sim`), with the NVMe
//! simulator behind it: bring-up, bus walk, NVMe bring-up and reads checked by CRC, for BCM2711
//! (CM4) and BCM2712 (Pi 5 pcie1); and the model's refusals for each broken rule.
#![forbid(unsafe_code)]

extern crate std;

use super::regs::{offsets, rescal, reset_controller};
use super::sim::{Block, LoggedWrite, ModelBlock, ModelConfig, RootComplexModel, PCIE1_BRIDGE_LINE};
use super::windows::{inbound_size_code, outbound_window_values, InboundWindow, WindowProblem};
use super::*;
use crate::nvme::events::DiscardEvents;
use crate::nvme::sim::{NvmeArena, SimConfig, SimController, SimPlatform};
use crate::nvme::{Controller, DepthChoice};
use crate::pci::sim::SimulatedFunction;
use crate::pci::{ClassCode, Enumerator, PciFunction, Topology, Window};
use blockdev::{BlockDevice, Completion, Operation, Request};
use hal::mmio::{BusRegisters, WideAccess};
use std::format;
use std::string::ToString;
use std::vec::Vec;

const ARENA: usize = 32 << 20;
const GIB: u64 = 1 << 30;

/// Pi 5 pcie1 (docs/hardware.md §1.4): ~4 GiB 32-bit window at PCI 0, 12 GiB prefetchable at
/// PCI 0x4_0000_0000; memory at PCI 0x10_0000_0000.
fn pi5_plan() -> LinkPlan {
    LinkPlan {
        outbound: HostWindows {
            memory32: Some(Window {
                cpu_base: 0x1b_0000_0000,
                pci_base: 0,
                size_bytes: 0xffff_fffc,
                prefetchable: false,
            }),
            memory64: Some(Window {
                cpu_base: 0x18_0000_0000,
                pci_base: 0x4_0000_0000,
                size_bytes: 12 * GIB,
                prefetchable: true,
            }),
        },
        inbound: BusTranslation { cpu_base: 0, bus_base: 0x10_0000_0000, size_bytes: 64 * GIB },
        gen: 2,
        perst_extra_ms: 0,
        rp1_link_live: false,
        num_lanes: None,
        vdm_qos_map: None,
        spread_spectrum: false,
    }
}

/// CM4 (upstream bcm2711.dtsi): 64 MiB at PCI 0xF800_0000, memory at PCI 0 for 3 GiB.
fn cm4_plan() -> LinkPlan {
    LinkPlan {
        outbound: HostWindows {
            memory32: Some(Window {
                cpu_base: 0x6_0000_0000,
                pci_base: 0xf800_0000,
                size_bytes: 64 << 20,
                prefetchable: false,
            }),
            memory64: None,
        },
        inbound: BusTranslation { cpu_base: 0, bus_base: 0, size_bytes: 3 * GIB },
        gen: 2,
        perst_extra_ms: 0,
        rp1_link_live: false,
        num_lanes: None,
        vdm_qos_map: None,
        spread_spectrum: false,
    }
}

fn plan_for(soc: Soc) -> LinkPlan {
    match soc {
        Soc::Bcm2711 => cm4_plan(),
        Soc::Bcm2712 => pi5_plan(),
    }
}

/// An NVMe SSD's function: 64-bit non-prefetchable 16 KiB BAR 0, payloads up to 512 bytes.
fn nvme_function() -> SimulatedFunction {
    SimulatedFunction::endpoint(0x144d, 0xa80a, 0x01_08_02, &[(0, 0x4000, 0b100), (1, 0, 0)])
        .with_pcie_capability(2)
}

type Host<'m> = RootComplex<'m, ModelBlock<'m, 'm>, SimPlatform>;

fn root_complex<'m>(model: &'m RootComplexModel<'m>, platform: &'m SimPlatform, soc: Soc) -> Host<'m> {
    let registers = model.block(Block::RootComplex);
    match soc {
        Soc::Bcm2711 => RootComplex::bcm2711(registers, platform),
        Soc::Bcm2712 => RootComplex::bcm2712(
            registers,
            Bcm2712Resets {
                controller: model.block(Block::ResetController),
                rescal: model.block(Block::Rescal),
                bridge_line: PCIE1_BRIDGE_LINE,
            },
            platform,
        ),
    }
}

fn walk(root: &Host<'_>, plan: &LinkPlan) -> Topology {
    Enumerator::new(root, plan.outbound).run()
}

fn nvme_of(topology: &Topology) -> PciFunction {
    *topology.with_class(ClassCode::NVME).next().expect("an NVMe controller behind the root port")
}

/// Brings the NVMe controller up through the model's CPU window and reads `blocks` blocks from
/// `lba`; returns the CRC-32 of what arrived.
fn read_through_model(
    model: &RootComplexModel<'_>,
    platform: &SimPlatform,
    nvme: &PciFunction,
    wide: WideAccess,
    dma: BusTranslation,
    lba: u64,
    blocks: u32,
) -> Result<u32, std::string::String> {
    let bar = nvme.bar(0).ok_or("no BAR 0")?;
    let registers = BusRegisters::new(model.cpu_window(bar.cpu_address, bar.size_bytes as usize), wide);
    let mut controller = Controller::bring_up(
        registers,
        bar.size_bytes as usize,
        platform,
        dma,
        &DiscardEvents,
        "nvme 01:00.0".to_string(),
    )
    .map_err(|e| format!("{e}"))?;
    let namespaces = controller.active_namespaces().map_err(|e| format!("{e}"))?;
    controller.request_io_queues(1).map_err(|e| format!("{e}"))?;
    let depth = DepthChoice::new(16, controller.capabilities());
    let mut pair = controller
        .create_io_queue_pair(&namespaces[0], depth, "nvme0".to_string())
        .map_err(|e| format!("{e}"))?;
    let bytes = blocks as usize * 512;
    let buffer = hal::platform::Platform::allocate_dma(platform, bytes, 4096).map_err(|e| format!("{e}"))?;
    let request = Request { tag: 7, operation: Operation::Read, lba, block_count: blocks, buffer };
    pair.submit(request).map_err(|(_, e)| format!("{e:?}"))?;
    pair.kick();
    let mut done = [Completion::default(); 1];
    for _ in 0..10_000 {
        // Time passes between polls: the simulated controller completes commands on clock reads.
        blockdev::Clock::now_ticks(platform);
        if pair.poll(&mut done) == 1 {
            done[0].result.map_err(|e| format!("{e}"))?;
            return Ok(blockdev::crc32::crc32(&platform.cpu_read(&buffer)));
        }
    }
    Err("the read did not complete".to_string())
}

fn pattern_crc(lba: u64, blocks: u32) -> u32 {
    blockdev::crc32::crc32(&crate::nvme::sim::pattern_bytes(lba * 512, blocks as usize * 512))
}

/// The whole path for one SoC: bring-up, walk, NVMe, reads; returns the link and the root
/// complex model's complaints, then the NVMe model's (ordering included).
fn nvme_through(
    soc: Soc,
    wide: Option<WideAccess>,
    dma: Option<BusTranslation>,
) -> (LinkUp, Result<u32, std::string::String>, Vec<std::string::String>) {
    let platform = SimPlatform::for_nvme(ARENA);
    let sim = SimController::new(&platform, SimConfig::default());
    let model = RootComplexModel::new(ModelConfig::new(soc), &platform).with_device(nvme_function(), &sim);
    platform.set_bus_view(model.inbound());
    let root = root_complex(&model, &platform, soc);
    let plan = plan_for(soc);
    let link = root.bring_up(&plan).expect("link up");
    let topology = walk(&root, &plan);
    let nvme = nvme_of(&topology);
    let wide = wide.unwrap_or(soc.wide_access());
    let crc = read_through_model(&model, &platform, &nvme, wide, dma.unwrap_or(plan.inbound), 4096, 64);
    let mut violations = model.violations();
    violations.extend(sim.violations());
    (link, crc, violations)
}

// ---------------------------------------------------------------------------------------------
// The model-based end-to-end tests ("Done when" of the brief).

#[test]
fn bcm2712_pcie1_brings_up_nvme_and_reads_blocks_with_the_right_crc() {
    let (link, crc, violations) = nvme_through(Soc::Bcm2712, None, None);
    assert!(violations.is_empty(), "{violations:#?}");
    assert_eq!((link.speed_gen, link.width, link.target_gen), (2, 1, 2));
    assert_eq!(link.calibration, Some(Calibration::Done));
    assert!((100..=110).contains(&link.waited_ms), "{link:?}");
    assert_eq!(crc, Ok(pattern_crc(4096, 64)));
    let line = format!("{link}");
    assert!(line.starts_with("link up Gen2 x1 (5.0 GT/s), target Gen2, 10"), "{line}");
    assert!(line.ends_with(" ms after PERST# release; RESCAL calibrated"), "{line}");
}

#[test]
fn bcm2711_cm4_brings_up_nvme_and_reads_blocks_with_the_right_crc() {
    let (link, crc, violations) = nvme_through(Soc::Bcm2711, None, None);
    assert!(violations.is_empty(), "{violations:#?}");
    assert_eq!((link.speed_gen, link.width, link.target_gen), (2, 1, 2));
    assert_eq!(link.calibration, None);
    assert_eq!(crc, Ok(pattern_crc(4096, 64)));
}

#[test]
fn a_prefetchable_bar_is_reached_through_the_second_window() {
    // A controller whose BAR 0 is 64-bit prefetchable lands in pcie1's 12 GiB window at CPU
    // 0x18_0000_0000 (outbound window 1 and the root port's prefetchable window).
    let platform = SimPlatform::for_nvme(ARENA);
    let sim = SimController::new(&platform, SimConfig::default());
    let prefetchable =
        SimulatedFunction::endpoint(0x144d, 0xa80a, 0x01_08_02, &[(0, 0x4000, 0b1100), (1, 0, 0)]);
    let model =
        RootComplexModel::new(ModelConfig::new(Soc::Bcm2712), &platform).with_device(prefetchable, &sim);
    platform.set_bus_view(model.inbound());
    let root = root_complex(&model, &platform, Soc::Bcm2712);
    let plan = pi5_plan();
    root.bring_up(&plan).unwrap();
    let nvme = nvme_of(&walk(&root, &plan));
    assert_eq!(nvme.bar(0).unwrap().cpu_address, 0x18_0000_0000);
    let crc = read_through_model(&model, &platform, &nvme, WideAccess::Native, plan.inbound, 100, 16);
    assert_eq!(crc, Ok(pattern_crc(100, 16)));
    model.assert_no_violations();
    sim.assert_no_violations();
}

#[test]
fn a_controller_in_endpoint_mode_is_refused_after_the_link() {
    let platform = SimPlatform::for_nvme(ARENA);
    let sim = SimController::new(&platform, SimConfig::default());
    let config = ModelConfig { endpoint_mode: true, ..ModelConfig::new(Soc::Bcm2711) };
    let model = RootComplexModel::new(config, &platform).with_device(nvme_function(), &sim);
    let error = root_complex(&model, &platform, Soc::Bcm2711).bring_up(&cm4_plan()).unwrap_err();
    assert_eq!(error, BringUpError::NotRootComplex { status: 0x30 });
    assert!(format!("{error}").contains("endpoint mode (PCIE_STATUS 0x00000030"), "{error}");
}

/// The last value written to root complex register `offset`.
fn last_written(model: &RootComplexModel<'_>, offset: usize) -> u32 {
    model.writes().iter().rev().find(|w| root_complex_write(offset)(w)).expect("written").value
}

#[test]
fn the_bus_interface_and_inbound_registers_hold_what_the_sources_say() {
    // BCM2711: 128-byte bursts, SCB0 = 2 GiB for a 2 GiB window at PCI 0x8000_0000 in window 2.
    let platform = SimPlatform::for_nvme(ARENA);
    let model = RootComplexModel::new(ModelConfig::new(Soc::Bcm2711), &platform);
    let mut plan = cm4_plan();
    plan.inbound = BusTranslation { cpu_base: 0, bus_base: 0x8000_0000, size_bytes: 2 * GIB };
    let _ = root_complex(&model, &platform, Soc::Bcm2711).bring_up(&plan);
    let misc = last_written(&model, offsets::MISC_MISC_CTRL);
    assert_eq!(misc, (16 << 27) | (1 << 13) | (1 << 12) | (1 << 10) | (1 << 7), "{misc:#x}");
    // RGR1: bridge reset, PERST# asserted, bridge released, later PERST# released.
    let rgr1: Vec<u32> = model
        .writes()
        .iter()
        .filter(|w| root_complex_write(offsets::RGR1_SW_INIT_1)(w))
        .map(|w| w.value)
        .collect();
    assert_eq!(rgr1, [0b11, 0b11, 0b01, 0b00]);
    assert_eq!(last_written(&model, regs::inbound_window_config(2)), 0x8000_0000 | 0x10);
    assert_eq!(last_written(&model, regs::inbound_window_config(2) + 4), 0);
    for disabled in [1, 3] {
        assert_eq!(last_written(&model, regs::inbound_window_config(disabled)) & 0x1f, 0);
    }
    // BCM2712: 512-byte bursts, no SCB size, window 1 remapped to a CPU address above 4 GiB.
    let platform = SimPlatform::for_nvme(ARENA);
    let model = RootComplexModel::new(ModelConfig::new(Soc::Bcm2712), &platform);
    let mut plan = pi5_plan();
    plan.inbound = BusTranslation { cpu_base: 0x1_4000_0000, bus_base: 0x10_4000_0000, size_bytes: GIB };
    let _ = root_complex(&model, &platform, Soc::Bcm2712).bring_up(&plan);
    let misc = last_written(&model, offsets::MISC_MISC_CTRL);
    assert_eq!(misc, (2 << 20) | (1 << 13) | (1 << 12) | (1 << 10) | (1 << 7), "{misc:#x}");
    assert_eq!(last_written(&model, regs::inbound_window_config(1)), 0x4000_0000 | 0xf);
    assert_eq!(last_written(&model, regs::inbound_window_config(1) + 4), 0x10);
    assert_eq!(last_written(&model, regs::inbound_window_remap(1)), 0x4000_0001);
    assert_eq!(last_written(&model, regs::inbound_window_remap(1) + 4), 1);
    for disabled in [2, 3] {
        assert_eq!(last_written(&model, regs::inbound_window_config(disabled)) & 0x1f, 0);
        assert_eq!(last_written(&model, regs::inbound_window_remap(disabled)) & 1, 0);
    }
    assert_eq!((Soc::Bcm2711.name(), Soc::Bcm2712.name()), ("BCM2711", "BCM2712"));
}

#[test]
fn bcm2711_reads_through_an_inbound_window_away_from_pci_0() {
    let platform = SimPlatform::for_nvme(ARENA);
    let sim = SimController::new(&platform, SimConfig::default());
    let model =
        RootComplexModel::new(ModelConfig::new(Soc::Bcm2711), &platform).with_device(nvme_function(), &sim);
    platform.set_bus_view(model.inbound());
    let root = root_complex(&model, &platform, Soc::Bcm2711);
    let mut plan = cm4_plan();
    plan.inbound = BusTranslation { cpu_base: 0, bus_base: 0x8000_0000, size_bytes: 2 * GIB };
    root.bring_up(&plan).unwrap();
    let nvme = nvme_of(&walk(&root, &plan));
    let crc = read_through_model(&model, &platform, &nvme, WideAccess::Split32, plan.inbound, 7, 9);
    assert_eq!(crc, Ok(pattern_crc(7, 9)));
    model.assert_no_violations();
    sim.assert_no_violations();
}

#[test]
fn the_link_line_names_speed_width_and_target() {
    let link = LinkUp {
        speed_gen: 1,
        width: 1,
        target_gen: 3,
        waited_ms: 150,
        spread_spectrum: None,
        calibration: Some(Calibration::KeptForRp1),
    };
    assert_eq!(
        format!("{link}"),
        "link up Gen1 x1 (2.5 GT/s), target Gen3, 150 ms after PERST# release; RESCAL not re-run: RP1's link on pcie2 shares it"
    );
    let pi4 = LinkUp {
        speed_gen: 2,
        width: 1,
        target_gen: 2,
        waited_ms: 101,
        calibration: None,
        spread_spectrum: Some(true),
    };
    assert_eq!(
        format!("{pi4}"),
        "link up Gen2 x1 (5.0 GT/s), target Gen2, 101 ms after PERST# release (SSC)"
    );
    assert_eq!(gen_rate(3), "8.0 GT/s");
    assert_eq!(gen_rate(0), "unknown speed");
}

#[test]
fn the_payload_size_is_programmed_on_both_ends_of_the_link() {
    for soc in [Soc::Bcm2711, Soc::Bcm2712] {
        for (device_code, expected) in [(2, 512), (1, 256), (0, 128)] {
            let platform = SimPlatform::for_nvme(ARENA);
            let sim = SimController::new(&platform, SimConfig::default());
            let device =
                SimulatedFunction::endpoint(0x144d, 0xa80a, 0x01_08_02, &[(0, 0x4000, 0b100), (1, 0, 0)])
                    .with_pcie_capability(device_code);
            let model = RootComplexModel::new(ModelConfig::new(soc), &platform).with_device(device, &sim);
            let root = root_complex(&model, &platform, soc);
            let plan = plan_for(soc);
            root.bring_up(&plan).unwrap();
            let topology = walk(&root, &plan);
            let payload = topology.payload.expect("the root port and the device are PCI Express");
            assert_eq!((payload.max_payload_bytes, payload.max_read_request_bytes), (expected, 512));
            let root_port = FunctionAddress { bus: 0, device: 0, function: 0 };
            let root_control = root.read32(root_port, 0xb4);
            assert_eq!(128 << ((root_control >> 5) & 7), expected, "{soc:?}: the root port's end");
            let device = FunctionAddress { bus: 1, device: 0, function: 0 };
            let device_control = root.read32(device, 0x48);
            assert_eq!(
                (128 << ((device_control >> 5) & 7), 128 << ((device_control >> 12) & 7)),
                (expected, 512),
                "{soc:?}: the device's end"
            );
            model.assert_no_violations();
        }
    }
}

#[test]
fn a_64_bit_register_access_on_bcm2711_is_caught() {
    let (_, crc, violations) = nvme_through(Soc::Bcm2711, Some(WideAccess::Native), None);
    assert!(crc.is_err(), "{crc:?}");
    assert!(violations.iter().any(|v| v.contains("cannot carry 64-bit MMIO")), "{violations:#?}");
}

#[test]
fn a_dma_offset_other_than_the_inbound_window_is_caught() {
    // The NVMe driver told that devices see memory 1:1 on a Pi 5 (it is CPU + 0x10_0000_0000).
    let identity = BusTranslation { cpu_base: 0, bus_base: 0, size_bytes: 64 * GIB };
    let (_, crc, violations) = nvme_through(Soc::Bcm2712, None, Some(identity));
    assert!(crc.is_err(), "{crc:?}");
    assert!(violations.iter().any(|v| v.contains("hits no inbound window")), "{violations:#?}");
}

#[test]
fn a_window_the_root_complex_was_not_given_is_caught() {
    let platform = SimPlatform::for_nvme(ARENA);
    let sim = SimController::new(&platform, SimConfig::default());
    let model =
        RootComplexModel::new(ModelConfig::new(Soc::Bcm2712), &platform).with_device(nvme_function(), &sim);
    platform.set_bus_view(model.inbound());
    let root = root_complex(&model, &platform, Soc::Bcm2712);
    let plan = pi5_plan();
    root.bring_up(&plan).unwrap();
    // The walk places BARs in a 32-bit window the outbound registers do not describe.
    let mut other = plan;
    other.outbound.memory32.as_mut().unwrap().cpu_base = 0x1c_0000_0000;
    let topology = Enumerator::new(&root, other.outbound).run();
    let crc =
        read_through_model(&model, &platform, &nvme_of(&topology), WideAccess::Native, plan.inbound, 0, 8);
    assert!(crc.is_err());
    assert!(
        model.violations().iter().any(|v| v.contains("in no outbound window")),
        "{:#?}",
        model.violations()
    );
}

#[test]
fn the_walk_finds_the_root_port_and_the_device_and_opens_the_windows() {
    for soc in [Soc::Bcm2711, Soc::Bcm2712] {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let model =
            RootComplexModel::new(ModelConfig::new(soc), &platform).with_device(nvme_function(), &sim);
        let root = root_complex(&model, &platform, soc);
        let plan = plan_for(soc);
        root.bring_up(&plan).unwrap();
        let topology = walk(&root, &plan);
        assert_eq!(topology.functions.len(), 2, "{soc:?}");
        let port = *topology.with_class(ClassCode { base: 6, sub: 4, prog_if: 0 }).next().unwrap();
        assert_eq!((port.vendor_id, port.class), (0x14e4, ClassCode { base: 6, sub: 4, prog_if: 0 }));
        assert_eq!(port.device_id, if soc == Soc::Bcm2711 { 0x2711 } else { 0x2712 });
        let nvme = nvme_of(&topology);
        assert_eq!(nvme.address, FunctionAddress { bus: 1, device: 0, function: 0 });
        let bar = nvme.bar(0).unwrap();
        // The non-prefetchable BAR goes to the 32-bit window, never the prefetchable one.
        let expected = if soc == Soc::Bcm2711 { (0x6_0000_0000, 0xf800_0000) } else { (0x1b_0000_0000, 0) };
        assert_eq!((bar.cpu_address, bar.pci_address), expected, "{soc:?}");
        model.assert_no_violations();
    }
}

// ---------------------------------------------------------------------------------------------
// Bring-up details.

#[test]
fn without_a_device_the_link_is_down_after_about_200_ms_and_the_bridge_stays_out_of_reset() {
    for soc in [Soc::Bcm2711, Soc::Bcm2712] {
        let platform = SimPlatform::for_nvme(ARENA);
        let model = RootComplexModel::new(ModelConfig::new(soc), &platform);
        let root = root_complex(&model, &platform, soc);
        let error = root.bring_up(&plan_for(soc)).unwrap_err();
        match error {
            BringUpError::LinkDown { waited_ms, status } => {
                assert!((200..=210).contains(&waited_ms), "{waited_ms}");
                assert_eq!(status, 0x80);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            format!("{error}"),
            format!(
                "link down after {} ms (PCIE_STATUS 0x00000080: PHYLINKUP 0, DL_ACTIVE 0, LINK_IN_L23 0, PORT 1 (root complex))",
                match error {
                    BringUpError::LinkDown { waited_ms, .. } => waited_ms,
                    _ => 0,
                }
            )
        );
        assert!(!model.bridge_in_reset(), "RESCAL lives in pcie1's page: its bridge stays out of reset");
        // A walk after a failed link touches nothing below the root port.
        let topology = walk(&root, &plan_for(soc));
        assert_eq!(topology.functions.len(), 1);
        model.assert_no_violations();
    }
}

#[test]
fn the_speed_limit_is_what_the_link_trains_to() {
    for (gen, device_gen, expected) in [(1, 3, 1), (2, 3, 2), (3, 3, 3), (3, 2, 2)] {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let config = ModelConfig { device_gen, ..ModelConfig::new(Soc::Bcm2712) };
        let model = RootComplexModel::new(config, &platform).with_device(nvme_function(), &sim);
        let root = root_complex(&model, &platform, Soc::Bcm2712);
        let link = root.bring_up(&LinkPlan { gen, ..pi5_plan() }).unwrap();
        assert_eq!((link.speed_gen, link.target_gen), (expected, gen), "gen {gen}, device gen {device_gen}");
    }
    // BCM2711 stops at Gen 2 whatever it is asked.
    let platform = SimPlatform::for_nvme(ARENA);
    let sim = SimController::new(&platform, SimConfig::default());
    let model =
        RootComplexModel::new(ModelConfig::new(Soc::Bcm2711), &platform).with_device(nvme_function(), &sim);
    let link =
        root_complex(&model, &platform, Soc::Bcm2711).bring_up(&LinkPlan { gen: 3, ..cm4_plan() }).unwrap();
    assert_eq!((link.speed_gen, link.target_gen), (2, 2));
}

#[test]
fn a_slow_device_needs_the_extra_perst_time() {
    for (extra_ms, comes_up) in [(0, false), (200, false), (300, true)] {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let config = ModelConfig { device_refclk_ms: 250, ..ModelConfig::new(Soc::Bcm2712) };
        let model = RootComplexModel::new(config, &platform).with_device(nvme_function(), &sim);
        let root = root_complex(&model, &platform, Soc::Bcm2712);
        let outcome = root.bring_up(&LinkPlan { perst_extra_ms: extra_ms, ..pi5_plan() });
        assert_eq!(outcome.is_ok(), comes_up, "pcie.perst-ms={extra_ms}: {outcome:?}");
        model.assert_no_violations();
    }
}

#[test]
fn a_device_answering_retry_is_waited_for_by_the_bus_walk() {
    let platform = SimPlatform::for_nvme(ARENA);
    let sim = SimController::new(&platform, SimConfig::default());
    let config = ModelConfig { device_retry_ms: 1500, ..ModelConfig::new(Soc::Bcm2712) };
    let model = RootComplexModel::new(config, &platform).with_device(nvme_function(), &sim);
    let root = root_complex(&model, &platform, Soc::Bcm2712);
    root.bring_up(&pi5_plan()).unwrap();
    let events = core::cell::RefCell::new(Vec::new());
    let report = |event: &crate::pci::ReadyEvent| events.borrow_mut().push(*event);
    let wait = crate::pci::ReadyWait { clock: &platform, limit_ms: 10_000, report: &report };
    let topology = Enumerator::new(&root, pi5_plan().outbound).with_ready_wait(wait).run();
    let nvme = nvme_of(&topology);
    assert_eq!(nvme.vendor_id, 0x144d);
    let ready = events.borrow().iter().find_map(|event| match event {
        crate::pci::ReadyEvent::Ready { waited_ms, .. } => Some(*waited_ms),
        _ => None,
    });
    assert!(ready.is_some_and(|ms| (1390..=1520).contains(&ms)), "{:?}", events.borrow());
    // CRS visibility was on (the model answers vendor 0x0001 only then).
    let root_control = model
        .writes()
        .iter()
        .rev()
        .find(|w| w.offset == offsets::ROOT_CONTROL_CAPABILITIES)
        .map(|w| w.value)
        .unwrap();
    assert_ne!(root_control & (1 << 4), 0);
    model.assert_no_violations();
}

#[test]
fn rescal_runs_once_per_boot_unless_rp1s_link_is_live() {
    // Whatever the firmware left in STATUS, RESCAL runs (Linux resets the shared RESCAL once per
    // boot), unless pcie2 carries a live link to RP1.
    for (calibrated, rp1_link_live, runs, outcome) in [
        (false, false, 1, Calibration::Done),
        (true, false, 1, Calibration::Done),
        (true, true, 0, Calibration::KeptForRp1),
    ] {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let config = ModelConfig {
            rescal_calibrated: calibrated,
            pcie2_in_reset: !rp1_link_live,
            ..ModelConfig::new(Soc::Bcm2712)
        };
        let model = RootComplexModel::new(config, &platform).with_device(nvme_function(), &sim);
        let link = root_complex(&model, &platform, Soc::Bcm2712)
            .bring_up(&LinkPlan { rp1_link_live, ..pi5_plan() })
            .unwrap();
        assert_eq!(link.calibration, Some(outcome), "calibrated {calibrated}, RP1 live {rp1_link_live}");
        assert_eq!(model.rescal_runs(), runs);
        model.assert_no_violations();
    }
    // The model objects to a re-run under RP1's live link.
    let platform = SimPlatform::for_nvme(ARENA);
    let sim = SimController::new(&platform, SimConfig::default());
    let config = ModelConfig { pcie2_in_reset: false, ..ModelConfig::new(Soc::Bcm2712) };
    let model = RootComplexModel::new(config, &platform).with_device(nvme_function(), &sim);
    root_complex(&model, &platform, Soc::Bcm2712).bring_up(&pi5_plan()).unwrap();
    assert!(
        model.violations().iter().any(|v| v.contains("RESCAL re-run while RP1's link")),
        "{:?}",
        model.violations()
    );
    // A calibration that never finishes is reported after 1 ms.
    let platform = SimPlatform::for_nvme(ARENA);
    let config = ModelConfig { rescal_polls: u32::MAX, ..ModelConfig::new(Soc::Bcm2712) };
    let model = RootComplexModel::new(config, &platform);
    let error = root_complex(&model, &platform, Soc::Bcm2712).bring_up(&pi5_plan()).unwrap_err();
    assert_eq!(error, BringUpError::Calibration(CalibrationError::Timeout { status: 0 }));
    assert_eq!(format!("{error}"), "RESCAL did not finish in 1 ms (STATUS 0x0)");
    assert!(!model.bridge_in_reset());
    // A START bit that does not stick is reported at once.
    let platform = SimPlatform::for_nvme(ARENA);
    let config = ModelConfig { rescal_start_ignored: true, ..ModelConfig::new(Soc::Bcm2712) };
    let model = RootComplexModel::new(config, &platform);
    let error = root_complex(&model, &platform, Soc::Bcm2712).bring_up(&pi5_plan()).unwrap_err();
    assert_eq!(error, BringUpError::Calibration(CalibrationError::DidNotStart { start: 0 }));
    assert_eq!(format!("{error}"), "RESCAL did not start (START 0x0)");
}

#[test]
fn leftover_l23_request_and_perst_assert_are_cleared_before_perst_is_released() {
    for soc in [Soc::Bcm2711, Soc::Bcm2712] {
        for (l23, perst_assert) in [(true, false), (false, true), (true, true)] {
            let platform = SimPlatform::for_nvme(ARENA);
            let sim = SimController::new(&platform, SimConfig::default());
            let config = ModelConfig {
                left_l23_request: l23,
                left_perst_assert: perst_assert,
                ..ModelConfig::new(soc)
            };
            let model = RootComplexModel::new(config, &platform).with_device(nvme_function(), &sim);
            let link = root_complex(&model, &platform, soc).bring_up(&plan_for(soc));
            assert!(link.is_ok(), "{soc:?}, L23 {l23}, PERST_ASSERT {perst_assert}: {link:?}");
            model.assert_no_violations();
        }
    }
}

#[test]
fn pcie1_advertises_the_device_trees_num_lanes() {
    for (num_lanes, advertised, powered_down) in [(Some(1), 1, true), (None, 4, false), (Some(4), 4, false)] {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let model = RootComplexModel::new(ModelConfig::new(Soc::Bcm2712), &platform)
            .with_device(nvme_function(), &sim);
        let root = root_complex(&model, &platform, Soc::Bcm2712);
        root.bring_up(&LinkPlan { num_lanes, ..pi5_plan() }).unwrap();
        let root_port = FunctionAddress { bus: 0, device: 0, function: 0 };
        let link_capabilities = root.read32(root_port, 0xb8);
        assert_eq!((link_capabilities >> 4) & 0x3f, advertised, "num-lanes {num_lanes:?}");
        let phy_control = model
            .writes()
            .iter()
            .rev()
            .find(|w| root_complex_write(offsets::RC_PL_REG_PHY_CTL_1)(w))
            .map(|w| w.value);
        assert_eq!(phy_control.is_some_and(|value| value & (1 << 3) != 0), powered_down);
        model.assert_no_violations();
    }
}

#[test]
fn pcie1_gets_the_device_trees_vdm_qos_map() {
    for map in [Some(0x3333_3333), None] {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let model = RootComplexModel::new(ModelConfig::new(Soc::Bcm2712), &platform)
            .with_device(nvme_function(), &sim);
        root_complex(&model, &platform, Soc::Bcm2712)
            .bring_up(&LinkPlan { vdm_qos_map: map, ..pi5_plan() })
            .unwrap();
        let control = last_written(&model, offsets::MISC_CTRL_1);
        match map {
            Some(map) => {
                assert_ne!(control & (1 << 5), 0, "VDM reception on");
                assert_eq!(last_written(&model, offsets::MISC_VDM_PRIORITY_TO_QOS_MAP_LO), map);
                assert_eq!(last_written(&model, offsets::MISC_VDM_PRIORITY_TO_QOS_MAP_HI), map);
                assert_eq!(last_written(&model, offsets::RC_TL_VDM_CTL1), 0);
                assert_eq!(last_written(&model, offsets::RC_TL_VDM_CTL0) & (0b111 << 16), 0b111 << 16);
            }
            None => {
                assert_eq!(control & (1 << 5), 0, "VDM reception off without a map");
                assert!(!model.writes().iter().any(|w| w.offset == offsets::MISC_VDM_PRIORITY_TO_QOS_MAP_LO));
            }
        }
        model.assert_no_violations();
    }
}

#[test]
fn bcm2711_turns_spread_spectrum_on_after_the_link_when_the_device_tree_asks() {
    for asked in [true, false] {
        let platform = SimPlatform::for_nvme(ARENA);
        let sim = SimController::new(&platform, SimConfig::default());
        let model = RootComplexModel::new(ModelConfig::new(Soc::Bcm2711), &platform)
            .with_device(nvme_function(), &sim);
        let link = root_complex(&model, &platform, Soc::Bcm2711)
            .bring_up(&LinkPlan { spread_spectrum: asked, ..cm4_plan() })
            .unwrap();
        assert_eq!(link.spread_spectrum, asked.then_some(true));
        assert_eq!(format!("{link}").ends_with(" (SSC)"), asked, "{link}");
        model.assert_no_violations();
    }
    // BCM2712 has none: the plan's wish is not acted on.
    let platform = SimPlatform::for_nvme(ARENA);
    let sim = SimController::new(&platform, SimConfig::default());
    let model =
        RootComplexModel::new(ModelConfig::new(Soc::Bcm2712), &platform).with_device(nvme_function(), &sim);
    let link = root_complex(&model, &platform, Soc::Bcm2712)
        .bring_up(&LinkPlan { spread_spectrum: true, ..pi5_plan() })
        .unwrap();
    assert_eq!(link.spread_spectrum, None);
    model.assert_no_violations();
}

#[test]
fn pcie2_is_read_only_once_its_bridge_is_out_of_reset() {
    use super::resets::PCIE2_BRIDGE_LINE;
    for (in_reset, link_up, expected) in [
        (true, true, LinkAccess::BridgeInReset),
        (false, false, LinkAccess::LinkDown { status: 0x80 }),
        (false, true, LinkAccess::LinkUp),
    ] {
        let platform = SimPlatform::for_nvme(ARENA);
        let config = ModelConfig {
            pcie2_in_reset: in_reset,
            pcie2_link_up: link_up,
            ..ModelConfig::new(Soc::Bcm2712)
        };
        let model = RootComplexModel::new(config, &platform);
        let mut opened = 0;
        let access = link_access(&model.block(Block::ResetController), PCIE2_BRIDGE_LINE, || {
            opened += 1;
            model.block(Block::Pcie2)
        });
        // In reset, pcie2's block is not even opened.
        assert_eq!((access, opened), (expected, u32::from(!in_reset)));
        model.assert_no_violations();
    }
    // The model raises the SError a direct read under reset would.
    let platform = SimPlatform::for_nvme(ARENA);
    let model = RootComplexModel::new(
        ModelConfig { pcie2_in_reset: true, ..ModelConfig::new(Soc::Bcm2712) },
        &platform,
    );
    model.block(Block::Pcie2).read32(offsets::MISC_PCIE_STATUS);
    assert!(model.violations()[0].contains("SError"), "{:?}", model.violations());
}

#[test]
fn only_pcie1s_reset_line_is_ever_written() {
    let platform = SimPlatform::for_nvme(ARENA);
    let sim = SimController::new(&platform, SimConfig::default());
    let model =
        RootComplexModel::new(ModelConfig::new(Soc::Bcm2712), &platform).with_device(nvme_function(), &sim);
    let before = model.reset_banks();
    root_complex(&model, &platform, Soc::Bcm2712).bring_up(&pi5_plan()).unwrap();
    let (bank, bit) = reset_controller::bank_and_bit(PCIE1_BRIDGE_LINE);
    for write in model.writes().iter().filter(|w| w.block == Block::ResetController) {
        assert_eq!(
            (write.offset - write.offset % reset_controller::BANK_BYTES, write.value),
            (bank, bit),
            "{write:?}"
        );
    }
    let after = model.reset_banks();
    assert_eq!(after[1] & !bit, before[1] & !bit, "pcie2 (line 44) and pcie0 (42) keep their state");
    assert_eq!(after[1] & bit, 0);
    model.assert_no_violations();
}

/// The index of the first logged write matching `is`.
fn first_write(writes: &[LoggedWrite], is: impl Fn(&LoggedWrite) -> bool) -> usize {
    writes.iter().position(is).expect("the write happened")
}

/// Matches writes to root complex register `offset`.
fn root_complex_write(offset: usize) -> impl Fn(&LoggedWrite) -> bool {
    move |write| write.block == Block::RootComplex && write.offset == offset
}

#[test]
fn windows_pll_and_speed_limit_come_before_perst_release_and_crs_visibility_after_link_up() {
    let platform = SimPlatform::for_nvme(ARENA);
    let sim = SimController::new(&platform, SimConfig::default());
    let model =
        RootComplexModel::new(ModelConfig::new(Soc::Bcm2712), &platform).with_device(nvme_function(), &sim);
    root_complex(&model, &platform, Soc::Bcm2712).bring_up(&pi5_plan()).unwrap();
    let writes = model.writes();
    let release = first_write(&writes, |w| {
        w.block == Block::RootComplex && w.offset == offsets::MISC_PCIE_CTRL && w.value & (1 << 2) != 0
    });
    let deassert = first_write(&writes, |w| w.block == Block::ResetController);
    let calibration = first_write(&writes, |w| w.block == Block::Rescal);
    assert!(deassert < calibration, "RESCAL only once the bridge is out of reset");
    // The bridge is released, calibrated, then pulsed through its reset (Linux brcm_pcie_setup).
    let (bank, bit) = reset_controller::bank_and_bit(PCIE1_BRIDGE_LINE);
    let line_writes: Vec<(usize, u32)> =
        writes.iter().filter(|w| w.block == Block::ResetController).map(|w| (w.offset, w.value)).collect();
    let (set, clear) = (bank + reset_controller::SW_INIT_SET, bank + reset_controller::SW_INIT_CLEAR);
    assert_eq!(line_writes, [(clear, bit), (set, bit), (clear, bit)]);
    // Without pcie.perst-ms nothing holds the PERST# pad.
    assert!(writes
        .iter()
        .filter(|w| root_complex_write(offsets::MISC_HARD_PCIE_HARD_DEBUG_2712)(w))
        .all(|w| w.value & (1 << 3) == 0));
    for (name, offset) in [
        ("PLL (MDIO)", offsets::RC_DL_MDIO_WR_DATA),
        ("outbound window 0", offsets::MISC_CPU_2_PCIE_MEM_WIN0_BASE_LIMIT),
        ("inbound window 1", regs::inbound_window_config(1)),
        ("UBUS remap 1", regs::inbound_window_remap(1)),
        ("Link Control 2", offsets::LINK_CONTROL_2),
        ("Link Capabilities", offsets::RC_CFG_PRIV1_LINK_CAPABILITY),
    ] {
        assert!(first_write(&writes, root_complex_write(offset)) < release, "{name} after PERST# release");
    }
    // Polled: every interrupt masked and the MSI target off before the link comes up.
    for base in [offsets::INTR2_CPU_BASE_2712, offsets::MSI_INTR2_BASE] {
        let mask = first_write(&writes, root_complex_write(base + offsets::INTR2_MASK_SET));
        assert!(mask < release && writes[mask].value == u32::MAX, "{base:#x}");
    }
    // The QoS work-arounds: forwarding search off, the D0 fixes on, and (one lane: no timing fix)
    // 15 AXI requests in flight at most.
    let axi = writes.iter().rev().find(|w| root_complex_write(offsets::MISC_AXI_INTF_CTRL)(w)).unwrap().value;
    assert_eq!(axi & 0x3f, 15, "{axi:#x}");
    assert_eq!(axi & ((1 << 13) | (1 << 11) | (1 << 7)), (1 << 13) | (1 << 11), "{axi:#x}");
    let msi = first_write(&writes, root_complex_write(offsets::MISC_MSI_BAR_CONFIG_LO));
    assert!(msi < release && writes[msi].value & 1 == 0);
    let crs = first_write(&writes, root_complex_write(offsets::ROOT_CONTROL_CAPABILITIES));
    assert!(crs > release);
    assert!(writes[crs].at_ns >= writes[release].at_ns + 100_000_000, "CRSSVE before the link is up");
}

// ---------------------------------------------------------------------------------------------
// The model refuses what the hardware refuses.

#[test]
fn the_model_keeps_the_link_down_when_perst_is_released_before_the_pll_is_set() {
    let platform = SimPlatform::for_nvme(ARENA);
    let sim = SimController::new(&platform, SimConfig::default());
    let model =
        RootComplexModel::new(ModelConfig::new(Soc::Bcm2712), &platform).with_device(nvme_function(), &sim);
    let registers = model.block(Block::RootComplex);
    let resets = model.block(Block::ResetController);
    let (bank, bit) = reset_controller::bank_and_bit(PCIE1_BRIDGE_LINE);
    resets.write32(bank + reset_controller::SW_INIT_CLEAR, bit);
    registers.write32(offsets::MISC_HARD_PCIE_HARD_DEBUG_2712, 0);
    registers.write32(offsets::LINK_CONTROL_2, 2);
    registers.write32(offsets::RC_CFG_PRIV1_LINK_CAPABILITY, 2);
    registers.write32(offsets::MISC_PCIE_CTRL, 1 << 2);
    platform.delay_us(300_000);
    assert_eq!(registers.read32(offsets::MISC_PCIE_STATUS) & 0x30, 0);
    model.assert_no_violations();
}

#[test]
fn the_model_refuses_access_during_bridge_reset_foreign_reset_lines_and_config_without_a_link() {
    let platform = SimPlatform::for_nvme(ARENA);
    let model = RootComplexModel::new(ModelConfig::new(Soc::Bcm2712), &platform);
    let registers = model.block(Block::RootComplex);
    registers.read32(offsets::MISC_PCIE_STATUS);
    model.block(Block::Rescal).read32(rescal::STATUS);
    let (bank, _) = reset_controller::bank_and_bit(44);
    model.block(Block::ResetController).write32(bank + reset_controller::SW_INIT_SET, 1 << 12);
    let violations = model.violations();
    assert!(violations[0].contains("while the bridge is in reset"), "{violations:#?}");
    assert!(violations[1].contains("RESCAL"), "{violations:#?}");
    assert!(violations[2].contains("line 44 (pcie2 (RP1))"), "{violations:#?}");

    let platform = SimPlatform::for_nvme(ARENA);
    let model = RootComplexModel::new(ModelConfig::new(Soc::Bcm2711), &platform);
    let registers = model.block(Block::RootComplex);
    assert_eq!(registers.read32(offsets::RGR1_SW_INIT_1), 0b11, "RGR1 answers during the reset");
    registers.write32(offsets::RGR1_SW_INIT_1, 0b01);
    registers.write32(offsets::EXT_CFG_INDEX, 1 << 20);
    registers.read32(offsets::EXT_CFG_DATA);
    registers.read32(0x4444);
    let violations = model.violations();
    assert!(violations[0].contains("while the link is down: CPU abort"), "{violations:#?}");
    assert!(violations[1].contains("unknown root complex register 0x4444"), "{violations:#?}");
}

#[test]
fn config_accesses_without_a_link_never_reach_the_data_window() {
    let platform = SimPlatform::for_nvme(ARENA);
    let model = RootComplexModel::new(ModelConfig::new(Soc::Bcm2711), &platform);
    let root = root_complex(&model, &platform, Soc::Bcm2711);
    let device = FunctionAddress { bus: 1, device: 0, function: 0 };
    // While the bridge is in reset the status read fails (all ones), which is no link either.
    assert_eq!(root.read32(device, 0), u32::MAX);
    assert_eq!(model.violations().len(), 1);
    model.block(Block::RootComplex).write32(offsets::RGR1_SW_INIT_1, 0b01);
    assert_eq!(root.read32(device, 0), u32::MAX);
    root.write32(device, 4, 6);
    let root_port_slot = FunctionAddress { bus: 0, device: 1, function: 0 };
    assert_eq!(root.read32(root_port_slot, 0), u32::MAX);
    assert!(model.writes().iter().all(|w| w.offset != offsets::EXT_CFG_INDEX));
    assert_eq!(model.violations().len(), 1, "{:#?}", model.violations());
}

#[test]
fn configuration_addresses_outside_the_topology_never_reach_the_hardware() {
    let platform = SimPlatform::for_nvme(ARENA);
    let sim = SimController::new(&platform, SimConfig::default());
    let model =
        RootComplexModel::new(ModelConfig::new(Soc::Bcm2712), &platform).with_device(nvme_function(), &sim);
    let root = root_complex(&model, &platform, Soc::Bcm2712);
    root.bring_up(&pi5_plan()).unwrap();
    let writes_before = model.writes().len();
    for (bus, device, function, offset) in [
        (0, 0, 0, 0x1000u16),
        (0, 1, 0, 0),
        (0, 0, 1, 0),
        (1, 1, 0, 0),
        (1, 32, 0, 0),
        (1, 0, 8, 0),
        (2, 0, 8, 0),
        (2, 32, 0, 0),
    ] {
        let address = FunctionAddress { bus, device, function };
        assert_eq!(root.read32(address, offset), u32::MAX, "{address} +{offset:#x}");
        root.write32(address, offset, 0);
    }
    assert_eq!(model.writes().len(), writes_before, "nothing written, not even EXT_CFG_INDEX");
    // Device 31, function 7 of a deeper bus exist (behind a switch).
    root.read32(FunctionAddress { bus: 2, device: 31, function: 7 }, 0);
    assert_eq!(
        model.writes().last().map(|w| (w.offset, w.value)),
        Some((offsets::EXT_CFG_INDEX, 2 << 20 | 31 << 15 | 7 << 12))
    );
    // A real function on a deeper bus (behind a switch) is selected through the index.
    assert_eq!(root.read32(FunctionAddress { bus: 2, device: 3, function: 1 }, 0), u32::MAX);
    assert_eq!(
        model.writes().last().map(|w| (w.offset, w.value)),
        Some((offsets::EXT_CFG_INDEX, 2 << 20 | 3 << 15 | 1 << 12))
    );
    model.assert_no_violations();
}

// ---------------------------------------------------------------------------------------------
// Encoders, with the worked values of docs/pcie-brcmstb.md §2-§3.

#[test]
fn the_register_map_matches_linux_and_the_rdb_names() {
    // Linux pcie-brcmstb.c (and the RT-Thread port of the downstream driver for BAR4-10).
    let expected = [
        (offsets::LINK_CONTROL_STATUS, 0x0bc),
        (offsets::ROOT_CONTROL_CAPABILITIES, 0x0c8),
        (offsets::LINK_CONTROL_2, 0x0dc),
        (offsets::RC_CFG_VENDOR_SPECIFIC_REG1, 0x188),
        (offsets::RC_CFG_PRIV1_ID_VAL3, 0x43c),
        (offsets::RC_CFG_PRIV1_LINK_CAPABILITY, 0x4dc),
        (offsets::RC_DL_MDIO_ADDR, 0x1100),
        (offsets::RC_DL_MDIO_WR_DATA, 0x1104),
        (offsets::RC_PL_PHY_CTL_15, 0x184c),
        (offsets::MISC_MISC_CTRL, 0x4008),
        (offsets::MISC_CPU_2_PCIE_MEM_WIN0_LO, 0x400c),
        (offsets::MISC_CPU_2_PCIE_MEM_WIN0_HI, 0x4010),
        (offsets::MISC_MSI_BAR_CONFIG_LO, 0x4044),
        (offsets::MISC_RC_CONFIG_RETRY_TIMEOUT, 0x405c),
        (offsets::MISC_PCIE_CTRL, 0x4064),
        (offsets::MISC_PCIE_STATUS, 0x4068),
        (offsets::MISC_CPU_2_PCIE_MEM_WIN0_BASE_LIMIT, 0x4070),
        (offsets::MISC_CPU_2_PCIE_MEM_WIN0_BASE_HI, 0x4080),
        (offsets::MISC_CPU_2_PCIE_MEM_WIN0_LIMIT_HI, 0x4084),
        (offsets::MISC_CTRL_1, 0x40a0),
        (offsets::MISC_UBUS_CTRL, 0x40a4),
        (offsets::MISC_UBUS_TIMEOUT, 0x40a8),
        (offsets::MISC_AXI_INTF_CTRL, 0x416c),
        (offsets::MISC_AXI_READ_ERROR_DATA, 0x4170),
        (offsets::MISC_HARD_PCIE_HARD_DEBUG_2711, 0x4204),
        (offsets::MISC_HARD_PCIE_HARD_DEBUG_2712, 0x4304),
        (offsets::INTR2_CPU_BASE_2711, 0x4300),
        (offsets::INTR2_CPU_BASE_2712, 0x4400),
        (offsets::MSI_INTR2_BASE, 0x4500),
        (offsets::EXT_CFG_DATA, 0x8000),
        (offsets::EXT_CFG_INDEX, 0x9000),
        (offsets::RGR1_SW_INIT_1, 0x9210),
    ];
    for (offset, value) in expected {
        assert_eq!(offset, value, "{value:#x}");
    }
    let configs: Vec<usize> = (1..=10).map(regs::inbound_window_config).collect();
    assert_eq!(configs, [0x402c, 0x4034, 0x403c, 0x40d4, 0x40dc, 0x40e4, 0x40ec, 0x40f4, 0x40fc, 0x4104]);
    let remaps: Vec<usize> = (1..=10).map(regs::inbound_window_remap).collect();
    assert_eq!(remaps, [0x40ac, 0x40b4, 0x40bc, 0x410c, 0x4114, 0x411c, 0x4124, 0x412c, 0x4134, 0x413c]);
    assert_eq!(reset_controller::bank_and_bit(43), (0x18, 1 << 11));
    assert_eq!(reset_controller::bank_and_bit(44), (0x18, 1 << 12));
    assert_eq!(reset_controller::bank_and_bit(5), (0, 1 << 5));
}

#[test]
fn outbound_windows_encode_as_the_sources_show() {
    let pi5 = pi5_plan().outbound;
    let low = outbound_window_values(&pi5.memory32.unwrap()).unwrap();
    assert_eq!(
        (low.pci_low, low.pci_high, low.base_limit, low.base_high, low.limit_high),
        (0, 0, 0xfff0_0000, 0x1b, 0x1b)
    );
    let high = outbound_window_values(&pi5.memory64.unwrap()).unwrap();
    assert_eq!(
        (high.pci_low, high.pci_high, high.base_limit, high.base_high, high.limit_high),
        (0, 4, 0xfff0_0000, 0x18, 0x1a)
    );
    let cm4 = outbound_window_values(&cm4_plan().outbound.memory32.unwrap()).unwrap();
    assert_eq!(
        (cm4.pci_low, cm4.base_limit, cm4.base_high, cm4.limit_high),
        (0xf800_0000, 0x03f0_0000, 6, 6)
    );
    // A base that is not a multiple of 4 GiB puts MB bits 11:0 in BASE (bits 15:4).
    let inner =
        Window { cpu_base: 0x6_0040_0000, pci_base: 0xc000_0000, size_bytes: 4 << 20, prefetchable: false };
    let inner = outbound_window_values(&inner).unwrap();
    assert_eq!((inner.base_limit, inner.base_high, inner.limit_high), (0x0070_0040, 6, 6));
    // The last byte may be 2^40 - 1, not 2^40.
    let top =
        Window { cpu_base: (1 << 40) - (1 << 20), pci_base: 0, size_bytes: 1 << 20, prefetchable: false };
    assert_eq!(outbound_window_values(&top).unwrap().limit_high, 0xff);
    let over = Window { size_bytes: (1 << 20) + 1, ..top };
    assert!(matches!(outbound_window_values(&over), Err(WindowProblem::BeyondFortyBits { .. })));
    let odd = Window { cpu_base: 0x6_0008_0000, pci_base: 0, size_bytes: 1 << 20, prefetchable: false };
    assert_eq!(
        outbound_window_values(&odd),
        Err(WindowProblem::CpuBaseNotMibAligned { cpu_base: 0x6_0008_0000 })
    );
    let far = Window { cpu_base: 0xff_fff0_0000, pci_base: 0, size_bytes: 2 << 20, prefetchable: false };
    assert!(matches!(outbound_window_values(&far), Err(WindowProblem::BeyondFortyBits { .. })));
}

#[test]
fn inbound_windows_are_powers_of_two_with_linuxs_size_codes() {
    assert_eq!(inbound_size_code(4 << 10), Some(0x1c));
    assert_eq!(inbound_size_code(32 << 10), Some(0x1f));
    assert_eq!(inbound_size_code(64 << 10), Some(1));
    assert_eq!(inbound_size_code(4 * GIB), Some(0x11));
    assert_eq!(inbound_size_code(64 * GIB), Some(0x15));
    assert_eq!(inbound_size_code(128 * GIB), None);
    assert_eq!(inbound_size_code(3 * GIB), None);
    let cm4 = InboundWindow::covering(Soc::Bcm2711, &cm4_plan().inbound).unwrap();
    assert_eq!((cm4.pci_base, cm4.size_bytes, cm4.size_code(), cm4.scb_size_code()), (0, 4 * GIB, 0x11, 17));
    // C0 boards: the firmware moves memory to PCI 0x4_0000_0000 (docs/pcie-brcmstb.md §3).
    let c0 = BusTranslation { cpu_base: 0, bus_base: 0x4_0000_0000, size_bytes: 8 * GIB };
    assert_eq!(InboundWindow::covering(Soc::Bcm2711, &c0).unwrap().size_code(), 0x12);
    // Exactly 2 GiB and exactly 4 GiB are allowed; only between them is refused.
    for (bus_base, size_bytes) in [(2 * GIB, 2 * GIB), (4 * GIB, 4 * GIB)] {
        let edge = BusTranslation { cpu_base: 0, bus_base, size_bytes };
        assert_eq!(InboundWindow::covering(Soc::Bcm2711, &edge).map(|w| w.pci_base), Ok(bus_base));
    }
    let pi5 = InboundWindow::covering(Soc::Bcm2712, &pi5_plan().inbound).unwrap();
    assert_eq!((pi5.pci_base, pi5.size_code()), (0x10_0000_0000, 0x15));
    let moved = BusTranslation { cpu_base: 0x1000_0000, bus_base: 0, size_bytes: GIB };
    assert_eq!(
        InboundWindow::covering(Soc::Bcm2711, &moved),
        Err(WindowProblem::InboundCpuBaseNotZero { cpu_base: 0x1000_0000 })
    );
    let between = BusTranslation { cpu_base: 0, bus_base: 3 * GIB, size_bytes: GIB };
    assert_eq!(
        InboundWindow::covering(Soc::Bcm2711, &between),
        Err(WindowProblem::InboundBetween2And4Gib { pci_base: 3 * GIB })
    );
    let messages = [
        (
            WindowProblem::CpuBaseNotMibAligned { cpu_base: 0x6_0008_0000 },
            "outbound window at CPU 0x600080000 is not 1 MiB aligned",
        ),
        (
            WindowProblem::BeyondFortyBits { cpu_base: 1 << 40, size_bytes: 1 << 20 },
            "outbound window 0x10000000000+0x100000 ends beyond 40-bit CPU addresses",
        ),
        (WindowProblem::EmptyWindow { cpu_base: 0x1000 }, "outbound window at CPU 0x1000 is empty"),
        (
            WindowProblem::InboundSizeUnencodable { size_bytes: 128 * GIB },
            "inbound window of 0x2000000000 bytes is outside 4 KiB..64 GiB",
        ),
        (
            WindowProblem::InboundMisaligned { pci_base: GIB, size_bytes: 2 * GIB },
            "inbound window at PCI 0x40000000 is not aligned to its size 0x80000000",
        ),
        (
            WindowProblem::InboundCpuBaseNotZero { cpu_base: 0x1000 },
            "BCM2711's inbound window maps CPU address 0, not 0x1000",
        ),
        (
            WindowProblem::InboundBetween2And4Gib { pci_base: 3 * GIB },
            "BCM2711's inbound window may not start at PCI 0xc0000000 (between 2 and 4 GiB)",
        ),
    ];
    for (problem, text) in messages {
        assert_eq!(format!("{problem}"), text);
        assert_eq!(format!("{}", BringUpError::Window(problem)), text);
    }
    let empty = Window { cpu_base: 0x6_0000_0000, pci_base: 0, size_bytes: 0, prefetchable: false };
    assert_eq!(outbound_window_values(&empty), Err(WindowProblem::EmptyWindow { cpu_base: 0x6_0000_0000 }));
    let misaligned = BusTranslation { cpu_base: 0, bus_base: GIB, size_bytes: 2 * GIB };
    assert!(matches!(
        InboundWindow::covering(Soc::Bcm2712, &misaligned),
        Err(WindowProblem::InboundMisaligned { .. })
    ));
}

#[test]
fn a_bad_plan_is_refused_before_any_register_is_touched() {
    let platform = SimPlatform::for_nvme(ARENA);
    let model = RootComplexModel::new(ModelConfig::new(Soc::Bcm2712), &platform);
    let mut plan = pi5_plan();
    plan.inbound.bus_base = 0x10_0000_1000;
    let error = root_complex(&model, &platform, Soc::Bcm2712).bring_up(&plan).unwrap_err();
    assert!(matches!(error, BringUpError::Window(WindowProblem::InboundMisaligned { .. })));
    assert!(model.writes().is_empty());
}

#[test]
fn the_pi4_vl805_is_listed_with_its_bar_in_the_window() {
    let platform = SimPlatform::for_nvme(ARENA);
    struct Quiet;
    impl RegisterIo for Quiet {
        fn read32(&self, _offset_bytes: usize) -> u32 {
            panic!("the VL805 is left alone")
        }
        fn write32(&self, _offset_bytes: usize, _value: u32) {
            panic!("the VL805 is left alone")
        }
    }
    let vl805 = SimulatedFunction::endpoint(0x1106, 0x3483, 0x0c_03_30, &[(0, 0x1000, 0b100), (1, 0, 0)]);
    let model = RootComplexModel::new(ModelConfig::new(Soc::Bcm2711), &platform).with_device(vl805, &Quiet);
    let root = root_complex(&model, &platform, Soc::Bcm2711);
    // The Pi 4 B device tree: 64 MiB at PCI 0xF800_0000, 3 GiB of memory at PCI 0.
    root.bring_up(&cm4_plan()).unwrap();
    let topology = walk(&root, &cm4_plan());
    let usb = topology.functions.iter().find(|f| crate::pci::vl805::is_vl805(f)).expect("VL805");
    assert_eq!(usb.class.name(), "USB controller");
    assert_eq!(usb.bar(0).unwrap().cpu_address, 0x6_0000_0000);
    assert_eq!(crate::pci::vl805::firmware_version(&root, usb.address), 0, "no firmware after the reset");
    model.assert_no_violations();
}

#[test]
fn a_reset_line_is_read_without_touching_the_block_behind_it() {
    use super::resets::{line_in_reset, PCIE2_BRIDGE_LINE};
    let clock = blockdev::testing::SteppingClock::new(1_000_000_000, 1_000);
    for held in [false, true] {
        let model = RootComplexModel::new(
            ModelConfig { pcie2_in_reset: held, ..ModelConfig::new(Soc::Bcm2712) },
            &clock,
        );
        let controller = model.block(Block::ResetController);
        assert_eq!(line_in_reset(&controller, PCIE2_BRIDGE_LINE), held, "pcie2");
        assert!(line_in_reset(&controller, PCIE1_BRIDGE_LINE), "pcie1 waits for the kernel");
        assert!(model.writes().is_empty(), "only reads");
        model.assert_no_violations();
    }
}
