//! Host tests of the USB driver behind the Broadcom STB PCIe root complex model
//! (`pci::brcmstb::sim`): the Pi 4's VL805 on BCM2711 pcie0, which answers only once the
//! VideoCore has reloaded its firmware (docs/usb-storage.md §7 and §13, docs/pcie-brcmstb.md
//! §8), and an xHCI card on a Pi 5's pcie1, whose DMA reaches memory only through the inbound
//! window at PCI 0x10_0000_0000 (docs/hardware.md §1.4). The xHCI simulator sits behind the
//! model's outbound window, and every DMA access it makes goes through the model's inbound
//! decoding.
#![forbid(unsafe_code)]

extern crate std;

use super::super::controller::HostController;
use super::super::mass_storage::{MassStorageDevice, Protocol};
use super::super::options::UsbOptions;
use super::super::regs::Speed;
use super::super::sim::device::{DeviceKind, SimUsbDevice};
use super::super::sim::disk::SimDisk;
use super::super::sim::{SimConfig, SimPlatform, SimXhci};
use super::super::DiscardEvents;
use crate::pci::brcmstb::sim::{Block, CpuWindow, ModelConfig, RootComplexModel, PCIE1_BRIDGE_LINE};
use crate::pci::brcmstb::{Bcm2712Resets, LinkPlan, RootComplex, Soc};
use crate::pci::sim::SimulatedFunction;
use crate::pci::{vl805, ConfigAccess, Enumerator, HostWindows, PciFunction, Window};
use blockdev::{BlockDevice, Completion, Operation, Request};
use core::cell::{Cell, RefCell};
use hal::mmio::RegisterIo;
use hal::platform::{BusTranslation, Platform};
use std::rc::Rc;
use std::string::{String, ToString};
use std::vec;
use std::vec::Vec;

const ARENA: usize = 48 << 20;
const GIB: u64 = 1 << 30;
const DISK_BLOCKS: u64 = 1 << 17;
const VL805_FIRMWARE: u32 = 0x0001_38a1;

/// The xHCI behind its PCI function: without firmware (a VL805 after the PCIe reset) it does not
/// answer, and a write to it is a violation. Reads then return all ones, which is what a read
/// nothing claims gives, and which the driver refuses as "no controller".
struct FirmwareGate<'a> {
    xhci: &'a SimXhci<'a>,
    loaded: Cell<bool>,
    writes_without_firmware: Cell<u32>,
}

impl<'a> FirmwareGate<'a> {
    fn new(xhci: &'a SimXhci<'a>, loaded: bool) -> Self {
        FirmwareGate { xhci, loaded: Cell::new(loaded), writes_without_firmware: Cell::new(0) }
    }
}

impl RegisterIo for FirmwareGate<'_> {
    fn read32(&self, offset_bytes: usize) -> u32 {
        if self.loaded.get() {
            self.xhci.read32(offset_bytes)
        } else {
            u32::MAX
        }
    }

    fn write32(&self, offset_bytes: usize, value: u32) {
        if self.loaded.get() {
            self.xhci.write32(offset_bytes, value)
        } else {
            self.writes_without_firmware.set(self.writes_without_firmware.get() + 1);
        }
    }

    fn read64(&self, offset_bytes: usize) -> u64 {
        self.xhci.read64(offset_bytes)
    }

    fn write64(&self, offset_bytes: usize, value: u64) {
        self.xhci.write64(offset_bytes, value)
    }
}

/// The Pi 4 B board table's pcie0: 64 MiB at PCI 0xF800_0000, RAM at PCI 0 for 3 GiB.
fn pi4_plan() -> LinkPlan {
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

/// The Pi 5 board table's pcie1: ~4 GiB at PCI 0, RAM at PCI 0x10_0000_0000.
fn pi5_plan() -> LinkPlan {
    LinkPlan {
        outbound: HostWindows {
            memory32: Some(Window {
                cpu_base: 0x1b_0000_0000,
                pci_base: 0,
                size_bytes: 0xffff_fffc,
                prefetchable: false,
            }),
            memory64: None,
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

/// An xHCI function with a 64-bit 4 KiB BAR 0 (the VL805's, as circle and `lspci` show it).
fn xhci_function(vendor_id: u16, device_id: u16) -> SimulatedFunction {
    SimulatedFunction::endpoint(vendor_id, device_id, 0x0c_03_30, &[(0, 0x1000, 0b100), (1, 0, 0)])
}

type Host<'m> = RootComplex<'m, crate::pci::brcmstb::sim::ModelBlock<'m, 'm>, SimPlatform>;

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

fn platform() -> SimPlatform {
    let platform = SimPlatform::new(ARENA);
    platform.set_step_ticks(20_000);
    platform
}

/// A SuperSpeed UAS drive on root port 1 of a VL805-like xHCI (32-byte contexts, scratchpads).
fn xhci_with_drive(platform: &SimPlatform) -> SimXhci<'_> {
    let config = SimConfig { scratchpads: 4, ..SimConfig::default() };
    let drive = SimUsbDevice::new(
        Speed::Super,
        DeviceKind::Uas { streams_exponent: 4 },
        SimDisk::new(DISK_BLOCKS, 512),
    );
    SimXhci::new(platform, config, vec![(1, drive)])
}

/// Brings the root complex up and walks it; the xHCI function it found.
fn walk(root: &Host<'_>, plan: &LinkPlan) -> PciFunction {
    root.bring_up(plan).expect("link up");
    let topology = Enumerator::new(root, plan.outbound).run();
    let function =
        *topology.with_class(crate::pci::ClassCode::XHCI).next().expect("an xHCI behind the root port");
    function
}

/// The xHCI driver on the function's BAR through the model's CPU window, with the host's DMA
/// translation; reads 64 blocks at LBA 4096 from the drive on port 1 and returns them.
fn read_through_root_complex(
    model: &RootComplexModel<'_>,
    platform: &SimPlatform,
    function: &PciFunction,
    dma: BusTranslation,
) -> Result<Vec<u8>, String> {
    let bar = function.bar(0).ok_or("no BAR 0")?;
    let registers: CpuWindow<'_, '_> = model.cpu_window(bar.cpu_address, bar.size_bytes as usize);
    let controller = HostController::bring_up(
        registers,
        bar.size_bytes as usize,
        platform,
        dma,
        "xhci 01:00.0".to_string(),
    )
    .map_err(|error| std::format!("{error}"))?;
    controller.power_ports();
    let speed = controller.enable_port(1).map_err(|e| std::format!("{e}"))?.ok_or("no drive on port 1")?;
    let shared = Rc::new(RefCell::new(controller));
    let mut drive = MassStorageDevice::attach(
        shared,
        1,
        speed,
        &UsbOptions::default(),
        "usb0".to_string(),
        &DiscardEvents,
    )
    .map_err(|e| std::format!("{e}"))?;
    assert_eq!(drive.identity().protocol, Protocol::Uas);
    let buffer = platform.allocate_dma(64 * 512, 4096).map_err(|e| std::format!("{e}"))?;
    let request = Request { tag: 3, operation: Operation::Read, lba: 4096, block_count: 64, buffer };
    drive.submit(request).map_err(|(_, e)| std::format!("{e:?}"))?;
    drive.kick();
    let mut done = [Completion::default(); 1];
    for _ in 0..100_000 {
        if drive.poll(&mut done) == 1 {
            done[0].result.map_err(|e| std::format!("{e}"))?;
            return Ok(platform.cpu_read(&buffer));
        }
    }
    Err("the read did not complete".to_string())
}

fn expected_blocks() -> Vec<u8> {
    SimDisk::new(DISK_BLOCKS, 512).contents(4096, 64)
}

#[test]
fn the_pi4_vl805_is_driven_through_pcie0_after_its_firmware_reload() {
    let platform = platform();
    let xhci = xhci_with_drive(&platform);
    let gate = FirmwareGate::new(&xhci, false);
    let model = RootComplexModel::new(ModelConfig::new(Soc::Bcm2711), &platform)
        .with_device(xhci_function(vl805::VENDOR_ID, vl805::DEVICE_ID), &gate);
    platform.set_bus_view(model.inbound());
    let root = root_complex(&model, &platform, Soc::Bcm2711);
    let plan = pi4_plan();
    let vl805_function = walk(&root, &plan);
    assert_eq!(vl805_function.bar(0).map(|bar| bar.cpu_address), Some(0x6_0000_0000));

    // Before the reload the controller does not answer: the driver says so and writes nothing.
    let early = read_through_root_complex(&model, &platform, &vl805_function, plan.inbound);
    assert!(early.as_ref().is_err_and(|e| e.contains("0xffffffff")), "{early:?}");
    assert_eq!(gate.writes_without_firmware.get(), 0);

    // The VideoCore's part: asked once through the mailbox, it loads the firmware.
    let mut asked = Vec::new();
    let outcome = vl805::ensure_firmware(&root, vl805_function.address, &platform, |address| {
        asked.push(address);
        root.write32(vl805_function.address, vl805::FIRMWARE_VERSION_OFFSET, VL805_FIRMWARE);
        gate.loaded.set(true);
        Ok::<(), ()>(())
    });
    assert_eq!(outcome, vl805::Firmware::Reloaded { version: VL805_FIRMWARE, waited_ms: 0 });
    assert_eq!(asked, [0x10_0000]);

    let data = read_through_root_complex(&model, &platform, &vl805_function, plan.inbound);
    assert_eq!(data.as_deref(), Ok(&expected_blocks()[..]));
    model.assert_no_violations();
    xhci.assert_no_violations();
}

#[test]
fn an_xhci_behind_pi5_pcie1_uses_the_inbound_window_for_every_dma() {
    let platform = platform();
    let xhci = xhci_with_drive(&platform);
    let gate = FirmwareGate::new(&xhci, true);
    let model = RootComplexModel::new(ModelConfig::new(Soc::Bcm2712), &platform)
        .with_device(xhci_function(0x1b21, 0x2142), &gate);
    platform.set_bus_view(model.inbound());
    let root = root_complex(&model, &platform, Soc::Bcm2712);
    let plan = pi5_plan();
    let function = walk(&root, &plan);
    let data = read_through_root_complex(&model, &platform, &function, plan.inbound);
    assert_eq!(data.as_deref(), Ok(&expected_blocks()[..]));
    model.assert_no_violations();
    xhci.assert_no_violations();
}

#[test]
fn an_xhci_given_the_wrong_dma_translation_reaches_no_memory() {
    let platform = platform();
    let xhci = xhci_with_drive(&platform);
    let gate = FirmwareGate::new(&xhci, true);
    let model = RootComplexModel::new(ModelConfig::new(Soc::Bcm2712), &platform)
        .with_device(xhci_function(0x1b21, 0x2142), &gate);
    platform.set_bus_view(model.inbound());
    let root = root_complex(&model, &platform, Soc::Bcm2712);
    let plan = pi5_plan();
    let function = walk(&root, &plan);
    // CPU addresses as bus addresses: below the inbound window.
    let outcome = read_through_root_complex(&model, &platform, &function, BusTranslation::IDENTITY);
    assert!(outcome.is_err(), "{outcome:?}");
    assert!(
        model.violations().iter().any(|v| v.contains("hits no inbound window")),
        "{:?}",
        model.violations()
    );
}
