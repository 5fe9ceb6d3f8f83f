//! USB mass storage on the running machine: every xHCI the board has (PCI functions of class
//! 0c:03:30 found by whatever PCI host the kernel brought up, e.g. `qemu-xhci` on QEMU virt or
//! the Pi 4's VL805 behind the PCIe root complex; the Pi 5's two RP1 controllers, DWC3 cores,
//! when the firmware left pcie2 up and `usb.rp1=on`) is brought up with `drivers::usb`, its root
//! ports watched for `usb.connect-ms`, and each mass storage drive registered as `usb0`, `usb1`,
//! … in discovery order (docs/usb-storage.md §7 for the Pi facts, §8 for QEMU).
#![forbid(unsafe_code)]

use super::pci_topology::{ClassCode, PciTopology};
use super::platform::KernelPlatform;
use super::rp1::{rp1_access, Rp1Access};
use super::storage::{DeviceClass, SharedDevice, Storage};
use super::windows;
use super::Machine;
use crate::board::{self, BlockKind, BoardFamily, BoardProfile, MmioBlock};
use crate::bring_up::{DeviceDeadline, XHCI_BUDGET_MS};
use crate::kernel_settings::KernelSettings;
use crate::println;
use alloc::boxed::Box;
use alloc::format;
use alloc::rc::Rc;
use alloc::string::String;
use alloc::vec::Vec;
use blockdev::BlockDevice;
use core::cell::RefCell;
use drivers::usb::controller::{PortList, PortWait};
use drivers::usb::rp1::bring_up_rp1_controller;
use drivers::usb::{EventSink, HostController, MassStorageDevice, Protocol, SharedController, UsbOptions};
use hal::mmio::Mmio;
use hal::platform::BusTranslation;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

type KernelController = HostController<'static, Mmio, KernelPlatform>;
type KernelDrive = MassStorageDevice<'static, Mmio, KernelPlatform>;

/// The driver's messages go to the console.
struct ConsoleEvents;

impl EventSink for ConsoleEvents {
    fn report(&self, source: &str, message: &dyn core::fmt::Display) {
        println!("{source}: {message}");
    }
}

static CONSOLE_EVENTS: ConsoleEvents = ConsoleEvents;

/// One xHCI to bring up: where its registers are, how it sees RAM, and whether a DWC3 core
/// around it needs setting up first (RP1).
struct Site {
    label: String,
    registers: MmioBlock,
    dma: BusTranslation,
    dwc3: bool,
}

fn options(settings: &KernelSettings, report_errors: bool) -> UsbOptions {
    let (options, errors) = UsbOptions::parse(settings.driver_options_for("usb."));
    if report_errors {
        for error in errors {
            println!("warning: {error}");
        }
    }
    options
}

/// The Pi 5's RP1 controllers (`usb.rp1=on`), before pcie1 is brought up. pcie2 is checked as the
/// console's mirror checks it (`rp1::rp1_access`): its bridge's reset line first, its link status
/// only once it is out of reset.
pub fn attach_rp1(machine: &Machine, settings: &KernelSettings, storage: &mut Storage) {
    let profile = machine.info.profile;
    let access = rp1_access(profile);
    if access == Rp1Access::NotHere {
        return;
    }
    // Bad `usb.` values are named once, by `attach`.
    let options = options(settings, false);
    if !options.pi5_rp1 {
        println!(
            "usb        Pi 5 USB ports are on RP1 behind pcie2, which this kernel does not bring up; with \
             pciex4_reset=0 in config.txt the firmware leaves it up, and usb.rp1=on uses it"
        );
        return;
    }
    match access {
        Rp1Access::NotHere => {}
        Rp1Access::BridgeInReset => println!(
            "usb        usb.rp1=on, but pcie2 (RP1's link) is held in reset, as the firmware leaves it unless \
             config.txt says pciex4_reset=0; RP1's USB ports are not used (nothing of pcie2 was read)"
        ),
        Rp1Access::LinkDown { status } => println!(
            "usb        usb.rp1=on, but pcie2 (RP1's link) is out of reset and down (MISC_PCIE_STATUS {status:#010x}); \
             RP1's USB ports are not used"
        ),
        Rp1Access::Reachable => {
            for site in rp1_sites(profile) {
                attach_controller(machine, &options, site, storage);
            }
        }
    }
}

/// Finds the xHCIs on PCI, brings them up and registers their drives.
pub fn attach(
    machine: &Machine,
    settings: &KernelSettings,
    pci: Option<&PciTopology>,
    storage: &mut Storage,
) {
    let options = options(settings, true);
    let sites = pci_sites(pci);
    if sites.is_empty() {
        say_why_none(machine, pci);
        return;
    }
    for site in sites {
        attach_controller(machine, &options, site, storage);
    }
}

fn pci_sites(pci: Option<&PciTopology>) -> Vec<Site> {
    let Some(topology) = pci else {
        return Vec::new();
    };
    let ClassCode { base, sub, prog_if } = ClassCode::XHCI;
    let mut sites = Vec::new();
    for function in topology.with_class(base, sub, prog_if) {
        let label = format!("xhci {}", function.address);
        let Some(bar) = function.bar(0) else {
            println!(
                "{label}: xHCI {:04x}:{:04x} without an assigned BAR 0; skipped",
                function.vendor_id, function.device_id
            );
            continue;
        };
        println!(
            "usb        {} {:04x}:{:04x} xHCI BAR0 {:#x} ({} KiB, {}-bit)",
            function.address,
            function.vendor_id,
            function.device_id,
            bar.cpu_address,
            bar.size_bytes >> 10,
            if bar.is_64_bit { 64 } else { 32 }
        );
        sites.push(Site {
            label,
            registers: MmioBlock::new(BlockKind::PciBar, bar.cpu_address, bar.size_bytes),
            dma: topology.dma,
            dwc3: false,
        });
    }
    sites
}

/// The Pi 5's RP1 xHCIs, once pcie2's link is known to be up.
fn rp1_sites(profile: &BoardProfile) -> Vec<Site> {
    (0..2u8)
        .filter_map(|index| profile.block(BlockKind::Rp1Xhci(index)).ok().map(|block| (index, block)))
        .map(|(index, registers)| Site {
            label: format!("rp1 xhci{index}"),
            registers,
            dma: board::RP1_DMA,
            dwc3: true,
        })
        .collect()
}

fn say_why_none(machine: &Machine, pci: Option<&PciTopology>) {
    match (machine.info.profile.family, pci) {
        (BoardFamily::RaspberryPi4, None) => println!(
            "usb        the Pi 4's USB 3 controller (VL805) is behind pcie0, which is not up (see the pcie0 line); no USB drives"
        ),
        (BoardFamily::RaspberryPi3, _) => {
            println!("usb        the Pi 3's USB is a DWC2 OTG controller (no xHCI); not supported")
        }
        // RP1's controllers were dealt with before PCIe (`attach_rp1`).
        (BoardFamily::RaspberryPi5, _) => {}
        (_, None) => println!("usb        no PCIe host; no xHCI"),
        (_, Some(_)) => println!("usb        no xHCI on PCIe (class 0c:03:30)"),
    }
}

fn attach_controller(machine: &Machine, options: &UsbOptions, site: Site, storage: &mut Storage) {
    let deadline = DeviceDeadline::start(machine.platform, XHCI_BUDGET_MS);
    super::stage(format_args!("usb bring-up ({})", site.label));
    // The site's registers come from an assigned PCI BAR (memory decoding and bus mastering on)
    // or the board table.
    let registers = match windows::open(site.registers) {
        Ok(registers) => registers,
        Err(error) => {
            println!("usb        {error}; skipped");
            return;
        }
    };
    let register_bytes = site.registers.size_bytes as usize;
    let brought_up = if site.dwc3 {
        bring_up_rp1_controller(registers, register_bytes, machine.platform, site.dma, site.label.clone())
            .map(|(controller, report)| {
                println!("usb          {}: {report}", site.label);
                controller
            })
    } else {
        HostController::bring_up(registers, register_bytes, machine.platform, site.dma, site.label.clone())
    };
    let controller = match brought_up {
        Ok(controller) => controller,
        Err(error) => {
            println!("{}: {error}; skipped", site.label);
            return;
        }
    };
    describe_controller(&controller);
    let label = site.label.as_str();
    let report = |wait: &PortWait| println!("{label}: {wait}");
    let scan = controller.scan_ports(options.connect_wait_ms, &report);
    for (port, error) in &scan.failed {
        println!("{label} port {port}: {error}; skipped");
    }
    if !scan.empty.is_empty() {
        println!(
            "{label}: nothing connected on port{} {} after {} ms (usb.connect-ms)",
            if scan.empty.len() == 1 { "" } else { "s" },
            PortList(&scan.empty),
            scan.waited_ms
        );
    }
    let shared: SharedController<'static, Mmio, KernelPlatform> = Rc::new(RefCell::new(controller));
    let mut drives = Vec::new();
    for (port, speed) in scan.enabled {
        if deadline.has_passed() {
            println!(
                "{label}: bring-up took {} ms, past its {} ms deadline; port {port} and the later connected ones not probed",
                deadline.elapsed_ms(),
                deadline.budget_ms()
            );
            break;
        }
        let provisional = format!("{label} port {port}");
        match MassStorageDevice::attach(shared.clone(), port, speed, options, provisional, &CONSOLE_EVENTS) {
            Ok(mut drive) => {
                let name = storage.next_name(DeviceClass::Usb);
                drive.set_name(name.clone());
                describe_drive(&name, &drive);
                let drive = SharedDrive::new(drive);
                drives.push(drive.clone());
                storage.add_shared(DeviceClass::Usb, drive);
            }
            Err(error) => println!("{label} port {port} ({speed}): {error}; skipped"),
        }
    }
    if drives.is_empty() {
        println!("{}: no usable USB drive", site.label);
    }
    report_on_exit(storage, shared, drives);
}

fn describe_controller(controller: &KernelController) {
    let capabilities = controller.capabilities();
    let mut ports = String::new();
    for protocol in controller.protocols().iter().filter(|protocol| protocol.port_count > 0) {
        let last = u16::from(protocol.first_port) + u16::from(protocol.port_count) - 1;
        ports.push_str(&format!(
            ", USB {}.{:x} ports {}-{last}",
            protocol.major_revision,
            protocol.minor_revision >> 4,
            protocol.first_port
        ));
    }
    println!(
        "usb          {}: {capabilities}; {} slots enabled, polled (IMAN.IE 0){ports}",
        controller.label(),
        controller.slots_enabled()
    );
}

fn describe_drive(name: &str, drive: &KernelDrive) {
    let identity = drive.identity();
    let geometry = drive.geometry();
    println!(
        "{name:<10} port {}: {}, {:04x}:{:04x} \"{}\" \"{}\" serial \"{}\", USB {:x}.{:02x}, slot {}",
        identity.port,
        identity.speed,
        identity.vendor_id,
        identity.product_id,
        identity.manufacturer,
        identity.product,
        identity.serial,
        identity.usb_version >> 8,
        identity.usb_version & 0xff,
        identity.slot_id
    );
    let inquiry = &identity.inquiry;
    let bytes = geometry.capacity_bytes();
    let hundredths_gib = u128::from(bytes) * 100 / u128::from(GIB);
    println!(
        "{name:<10} SCSI \"{}\" \"{}\" rev \"{}\", {}{}; {bytes} bytes ({}.{:02} GiB) = {} × {} B (READ CAPACITY({}))",
        inquiry.vendor_text(),
        inquiry.product_text(),
        inquiry.revision_text(),
        inquiry.device_type_name(),
        if inquiry.removable { ", removable" } else { "" },
        hundredths_gib / 100,
        hundredths_gib % 100,
        geometry.block_count,
        geometry.logical_block_bytes,
        if identity.read_capacity_16 { 16 } else { 10 }
    );
    let transport = match identity.protocol {
        Protocol::Uas if identity.streams => format!(
            "UAS, {} streams: {} commands in flight (tag {} kept for task management)",
            identity.tags, identity.commands_in_flight, identity.tags
        ),
        Protocol::Uas => format!(
            "UAS without streams (Read/Write Ready), {} tags: {} commands in flight",
            identity.tags, identity.commands_in_flight
        ),
        Protocol::BulkOnly => format!(
            "BOT, 1 command at a time, {} LUN{}",
            identity.logical_units,
            if identity.logical_units == 1 { "" } else { "s" }
        ),
    };
    println!(
        "{name:<10} {}, {transport}; up to {} per request",
        identity.speed,
        human_bytes(u64::from(geometry.max_request_blocks) * u64::from(geometry.logical_block_bytes))
    );
    if let Some(note) = &identity.protocol_note {
        println!("{name:<10} {note}");
    }
}

fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= MIB && b % MIB == 0 => format!("{} MiB", b / MIB),
        b if b >= 1024 && b % 1024 == 0 => format!("{} KiB", b / 1024),
        b => format!("{b} B"),
    }
}

/// At the end of the run: each drive's counters and its controller's.
fn report_on_exit(
    storage: &mut Storage,
    controller: SharedController<'static, Mmio, KernelPlatform>,
    drives: Vec<SharedDrive>,
) {
    storage.on_shutdown(Box::new(move || {
        for drive in &drives {
            let inner = drive.borrow();
            let statistics = inner.statistics();
            let mut failures = String::new();
            for kind in blockdev::IoErrorKind::ALL {
                let count = statistics.by_kind[kind.index()];
                if count > 0 {
                    failures.push_str(&format!(", {count} {}", kind.name()));
                }
            }
            println!(
                "{}: {} requests, {} failed{failures}; {}",
                drive.name(),
                statistics.requests,
                statistics.failed,
                inner.transport_counters()
            );
        }
        let hc = controller.borrow();
        let statistics = hc.statistics();
        println!(
            "{}: {} events ({} transfer), {} commands, {} doorbell writes, {} ERDP writes, {} stray events, {} host controller events",
            hc.label(),
            statistics.events,
            statistics.transfer_events,
            statistics.commands,
            statistics.doorbell_writes,
            statistics.erdp_writes,
            statistics.stray_events,
            statistics.host_controller_events
        );
    }));
}

/// A drive shared between the storage registry (the block interface) and the end-of-run report.
type SharedDrive = SharedDevice<KernelDrive>;
