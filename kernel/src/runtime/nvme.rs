//! NVMe controllers on the running machine: every PCI function of class 01:08:02 is
//! brought up with `drivers::nvme` (NVMe Base Specification 1.4 §7.6.1), described on the
//! console, its active namespaces registered as `nvme0`, `nvme1`, … in discovery order, a few
//! reads timed at bring-up (`nvme.measure`), an optional queue-depth self-test run
//! (`nvme.selftest=qdN`), and the controller shut down normally (CC.SHN) at the end of the run.
#![forbid(unsafe_code)]

use super::pci_topology::{PciFunction, PciTopology};
use super::platform::KernelPlatform;
use super::storage::{print_registers, DeviceClass, SharedDevice, Storage};
use super::{windows, Machine};
use crate::board::{BlockKind, MmioBlock};
use crate::bring_up::{DeviceDeadline, NVME_CONTROLLER_BUDGET_MS};
use crate::kernel_settings::KernelSettings;
use crate::println;
use crate::queue_depth::{self as selftest, Place, RunReport, Workload};
use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use bench::units::ByteSize;
use bench::units::MibPerS;
use blockdev::BlockDevice;
use drivers::nvme::identify::NamespaceIdentity;
use drivers::nvme::{Controller, DepthChoice, DriverOptions, Event, EventSink, NamespaceDevice};
use drivers::snapshot::RegisterSnapshot;
use hal::dma::DmaRegion;
use hal::mmio::{BusRegisters, Mmio};

/// PCI class of an NVMe controller: mass storage (01), non-volatile memory (08), NVM Express
/// (02) (docs/nvme-and-fio.md §1.0).
const NVME_PCI_CLASS: (u8, u8, u8) = (0x01, 0x08, 0x02);
const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// BAR 0 behind the host's rule for 64-bit registers (two 32-bit halves behind BCM2711's root
/// complex: docs/pcie-brcmstb.md §6).
type Bar0 = BusRegisters<Mmio>;
type KernelController = Controller<'static, Bar0, KernelPlatform>;
type KernelNamespace = NamespaceDevice<'static, Bar0, KernelPlatform>;

/// The driver's reports go to the console.
struct ConsoleEvents;

impl EventSink for ConsoleEvents {
    fn report(&self, source: &str, event: &Event) {
        println!("{source}: {event}");
    }
}

static CONSOLE_EVENTS: ConsoleEvents = ConsoleEvents;

/// The bring-up measurement (`nvme.measure=on`, the default): QD 1 latency of 4 KiB reads, the
/// time of 1 MiB reads, and the IOPS of 4 KiB reads at QD 32, all at random 4 KiB-aligned places.
const MEASURE_QD1: Workload<'static> = Workload {
    places: &[],
    depth: 1,
    requests: 64,
    sizes_bytes: &[4096],
    buffer_offsets_bytes: &[],
    lba_alignment_bytes: 4096,
    verify: false,
    seed: 0x5eed_0001,
};
const MEASURE_1MIB: Workload<'static> = Workload {
    places: &[],
    depth: 1,
    requests: 8,
    sizes_bytes: &[1 << 20],
    buffer_offsets_bytes: &[],
    lba_alignment_bytes: 1 << 20,
    verify: false,
    seed: 0x5eed_0002,
};
const MEASURE_QD32: Workload<'static> = Workload {
    places: &[],
    depth: 32,
    requests: 2048,
    sizes_bytes: &[4096],
    buffer_offsets_bytes: &[],
    lba_alignment_bytes: 4096,
    verify: false,
    seed: 0x5eed_0003,
};

/// Self-test request sizes (rounded up to whole blocks): single blocks, pages, an unaligned
/// 12 KiB, 64 KiB and 1 MiB (split at MDTS on QEMU's default).
const SELF_TEST_MIXED_SIZES: [u32; 6] = [512, 4096, 12288, 65536, 1 << 20, 8192];
/// Data offsets inside the buffers: page aligned, and starting inside a page (PRP1 offset).
const SELF_TEST_OFFSETS: [usize; 4] = [0, 512, 4092, 2048];
const SELF_TEST_PLACES: [Place; 3] = [Place::Start, Place::Random, Place::End];
const SELF_TEST_4K_READS: u32 = 2048;
const SELF_TEST_MIXED_READS: u32 = 384;
const SELF_TEST_LARGE_READS: u32 = 6;
const SELF_TEST_LARGE_BYTES: u32 = 4 << 20;

fn self_test_workloads(depth: u32) -> [(&'static str, Workload<'static>); 3] {
    [
        (
            "4 KiB random",
            Workload {
                places: &[],
                depth,
                requests: SELF_TEST_4K_READS,
                sizes_bytes: &[4096],
                buffer_offsets_bytes: &[],
                lba_alignment_bytes: 4096,
                verify: true,
                seed: 0x5e1f_0001,
            },
        ),
        (
            "mixed 512 B-1 MiB",
            Workload {
                places: &SELF_TEST_PLACES,
                depth,
                requests: SELF_TEST_MIXED_READS,
                sizes_bytes: &SELF_TEST_MIXED_SIZES,
                buffer_offsets_bytes: &SELF_TEST_OFFSETS,
                lba_alignment_bytes: 512,
                verify: true,
                seed: 0x5e1f_0002,
            },
        ),
        (
            "4 MiB start/random/end",
            Workload {
                places: &SELF_TEST_PLACES,
                depth: depth.min(2),
                requests: SELF_TEST_LARGE_READS,
                sizes_bytes: &[SELF_TEST_LARGE_BYTES],
                buffer_offsets_bytes: &[0, 4092],
                lba_alignment_bytes: 4096,
                verify: true,
                seed: 0x5e1f_0003,
            },
        ),
    ]
}

fn parse_options(settings: &KernelSettings) -> DriverOptions {
    let (options, errors) = DriverOptions::parse(settings.driver_options_for("nvme."));
    for error in errors {
        println!("warning: {error}");
    }
    options
}

/// Finds the NVMe controllers in PCI order and registers their namespaces.
pub fn attach(
    machine: &Machine,
    settings: &KernelSettings,
    pci: Option<&PciTopology>,
    storage: &mut Storage,
) {
    let options = parse_options(settings);
    let Some(topology) = pci else {
        println!("nvme       no PCIe devices; no NVMe controllers");
        return;
    };
    let (base, sub, prog_if) = NVME_PCI_CLASS;
    let functions: Vec<PciFunction> = topology.with_class(base, sub, prog_if).copied().collect();
    if functions.is_empty() {
        println!("nvme       no NVMe controller on PCIe (class 01:08:02)");
        return;
    }
    let mut scratch = Scratch::new(&options, machine.platform);
    for function in &functions {
        attach_controller(machine, (&options, settings), function, topology, &mut scratch, storage);
    }
}

/// DMA buffers for the measurement and the self-test, allocated once (the pool never frees).
struct Scratch {
    bytes_wanted: usize,
    buffer: Option<Result<DmaRegion<'static>, String>>,
    platform: &'static KernelPlatform,
}

impl Scratch {
    fn new(options: &DriverOptions, platform: &'static KernelPlatform) -> Self {
        let mut bytes_wanted = 0;
        if options.measure {
            for workload in [MEASURE_QD1, MEASURE_1MIB, MEASURE_QD32] {
                bytes_wanted = bytes_wanted.max(workload.scratch_bytes());
            }
        }
        if let Some(depth) = options.self_test_depth {
            for (_, workload) in self_test_workloads(depth) {
                bytes_wanted = bytes_wanted.max(workload.scratch_bytes());
            }
        }
        Scratch { bytes_wanted, buffer: None, platform }
    }

    fn get(&mut self) -> Result<DmaRegion<'static>, String> {
        let bytes = self.bytes_wanted;
        let platform = self.platform;
        self.buffer
            .get_or_insert_with(|| {
                DmaRegion::allocate(platform, bytes, 4096).map_err(|error| format!("{error}"))
            })
            .clone()
    }
}

/// One controller: bring-up, its usable namespaces, the queue plan, then each namespace as a
/// device. Every failure is reported and skips what it affects; the rest goes on.
fn attach_controller(
    machine: &Machine,
    (options, settings): (&DriverOptions, &KernelSettings),
    function: &PciFunction,
    topology: &PciTopology,
    scratch: &mut Scratch,
    storage: &mut Storage,
) {
    let label = format!("nvme {}", function.address);
    let deadline = DeviceDeadline::start(machine.platform, NVME_CONTROLLER_BUDGET_MS);
    super::stage(format_args!("nvme bring-up ({})", function.address));
    let Some(mut found) = open_controller(machine, function, topology, &label) else {
        return;
    };
    describe_controller(&found.controller);
    let Some(plan) = plan_queues(&mut found.controller, options, &label) else {
        shut_down_on_exit(storage, found.controller, Vec::new());
        return;
    };
    let mut opened = Vec::new();
    for &namespace in &plan.namespaces {
        let name = storage.next_name(DeviceClass::Nvme);
        describe_namespace(&name, &namespace);
        if let Some(device) = open_namespace(&mut found.controller, &name, namespace, &plan) {
            opened.push((name, namespace, device));
        }
    }
    // After the I/O queues, so that a large buffer gets what they left instead of starving them.
    set_up_host_memory_buffer(machine, &mut found.controller, options, &label);
    let mut devices = Vec::new();
    for (name, namespace, device) in opened {
        // Past the controller's bring-up deadline its namespaces are still registered, without
        // the bring-up reads (`crate::bring_up`).
        let mut options_here = *options;
        if deadline.has_passed() && (options.measure || options.self_test_depth.is_some()) {
            println!(
                "{name}: controller bring-up took {} ms, past its {} ms deadline; no bring-up reads",
                deadline.elapsed_ms(),
                deadline.budget_ms()
            );
            options_here.measure = false;
            options_here.self_test_depth = None;
        }
        let Some(device) = bring_up_reads(&found.controller, &name, device, machine, &options_here, scratch)
        else {
            continue;
        };
        if settings.wants_registers(&name) {
            watch_registers(storage, &name, function, &found);
        }
        devices.push(device.clone());
        storage.add_shared(DeviceClass::Nvme, device);
        storage.set_deallocated_read(&name, namespace.deallocated_read().description());
    }
    shut_down_on_exit(storage, found.controller, devices);
}

/// `nvme.hmb=`: the host memory buffer, from what the DMA pool has left; the memory of a buffer
/// the controller refused goes back to the pool.
fn set_up_host_memory_buffer(
    machine: &Machine,
    controller: &mut KernelController,
    options: &DriverOptions,
    label: &str,
) {
    match machine.platform.set_up_host_memory_buffer(controller, options.host_memory_buffer_mib) {
        Ok(outcome) => println!("nvme         {outcome}"),
        Err(error) => println!("{label}: host memory buffer not given: {error}"),
    }
}

/// A controller brought up behind its BAR 0, with its registers as found before the first write.
struct FoundController {
    controller: KernelController,
    registers: Bar0,
    bar0_address: u64,
    as_found: RegisterSnapshot,
}

/// Maps BAR 0 and brings the controller up; `None` (reported) when it has no BAR or fails.
fn open_controller(
    machine: &Machine,
    function: &PciFunction,
    topology: &PciTopology,
    label: &str,
) -> Option<FoundController> {
    let Some(bar) = function.bar(0) else {
        println!(
            "{label}: NVMe controller {:04x}:{:04x} without an assigned BAR 0; skipped",
            function.vendor_id, function.device_id
        );
        return None;
    };
    println!(
        "nvme       {} {:04x}:{:04x} BAR0 {:#x} ({} KiB, {}-bit)",
        function.address,
        function.vendor_id,
        function.device_id,
        bar.cpu_address,
        bar.size_bytes / KIB,
        if bar.is_64_bit { 64 } else { 32 }
    );
    // PCI enumeration assigned this BAR inside the host bridge's memory window, with memory
    // decoding and bus mastering enabled.
    let bar0 = match windows::open(MmioBlock::new(BlockKind::PciBar, bar.cpu_address, bar.size_bytes)) {
        Ok(window) => window,
        Err(error) => {
            println!("{label}: {error}; skipped");
            return None;
        }
    };
    let registers = BusRegisters::new(bar0, topology.wide_access);
    let as_found = drivers::nvme::snapshot::snapshot(&registers);
    let brought_up = Controller::bring_up(
        registers,
        bar.size_bytes as usize,
        machine.platform,
        topology.dma,
        &CONSOLE_EVENTS,
        String::from(label),
    );
    match brought_up {
        Ok(controller) => {
            Some(FoundController { controller, registers, bar0_address: bar.cpu_address, as_found })
        }
        Err(error) => {
            println!("{label}: {error}; skipped");
            None
        }
    }
}

/// Which namespaces get devices, and with how many queue pairs of what depth each.
struct QueuePlan {
    namespaces: Vec<NamespaceIdentity>,
    pairs_each: usize,
    depth: DepthChoice,
}

/// The usable namespaces and the queue pairs the controller grants them; `None` (reported)
/// when no namespace can be used.
fn plan_queues(controller: &mut KernelController, options: &DriverOptions, label: &str) -> Option<QueuePlan> {
    let mut usable = usable_namespaces(controller, label)?;
    let wanted = (usize::from(options.queue_pairs) * usable.len()).min(usize::from(u16::MAX)) as u16;
    let grant = match controller.request_io_queues(wanted) {
        Ok(grant) => grant,
        Err(error) => {
            println!("{label}: cannot set the number of queues: {error}");
            return None;
        }
    };
    println!(
        "nvme         I/O queue pairs: {} asked ({} per namespace × {} namespace{}), controller allocates {} SQ / {} CQ",
        grant.requested,
        options.queue_pairs,
        usable.len(),
        if usable.len() == 1 { "" } else { "s" },
        grant.submission_queues,
        grant.completion_queues
    );
    controller.set_io_timeout_ms(options.io_timeout_ms);
    println!(
        "nvme         command timeout {} ms (nvme.timeout-ms=): a later command is aborted, and the controller reset if it still does not come back",
        options.io_timeout_ms
    );
    let usable_pairs = usize::from(grant.usable_pairs());
    if usable_pairs < usable.len() {
        println!(
            "{label}: only {usable_pairs} queue pairs for {} namespaces; the last {} get none and are not registered",
            usable.len(),
            usable.len() - usable_pairs
        );
        usable.truncate(usable_pairs);
    }
    let pairs_each = (usable_pairs / usable.len()).min(usize::from(options.queue_pairs)).max(1);
    if pairs_each < usize::from(options.queue_pairs) {
        println!(
            "{label}: nvme.queues={} asked for, the controller's queues allow {pairs_each} per namespace",
            options.queue_pairs
        );
    }
    let depth = DepthChoice::new(options.queue_entries, controller.capabilities());
    if depth.was_clamped() {
        println!("{label}: {depth}");
    }
    Some(QueuePlan { namespaces: usable, pairs_each, depth })
}

/// The active namespaces the driver can use; `None` (reported) when there are none.
fn usable_namespaces(controller: &mut KernelController, label: &str) -> Option<Vec<NamespaceIdentity>> {
    let namespaces = match controller.active_namespaces() {
        Ok(namespaces) => namespaces,
        Err(error) => {
            println!("{label}: cannot list namespaces: {error}");
            return None;
        }
    };
    let mut usable = Vec::new();
    for namespace in namespaces {
        match controller.check_namespace(&namespace) {
            Ok(_) => usable.push(namespace),
            Err(error) => println!("{label}: {error}; not registered"),
        }
    }
    if usable.is_empty() {
        println!("{label}: no usable namespace");
        return None;
    }
    Some(usable)
}

/// The namespace's queue pairs; `None` (reported) when it gets no queue.
fn open_namespace(
    controller: &mut KernelController,
    name: &str,
    namespace: NamespaceIdentity,
    plan: &QueuePlan,
) -> Option<SharedNamespace> {
    let mut pairs = Vec::new();
    for _ in 0..plan.pairs_each {
        let queue_name = format!("{name}q{}", pairs.len() + 1);
        match controller.create_io_queue_pair(&namespace, plan.depth, queue_name) {
            Ok(pair) => pairs.push(pair),
            Err(error) => {
                println!("{name}: cannot create I/O queue pair {}: {error}", pairs.len() + 1);
                break;
            }
        }
    }
    if pairs.is_empty() {
        println!("{name}: no I/O queue; not registered");
        return None;
    }
    let device = NamespaceDevice::new(String::from(name), namespace, pairs);
    describe_queues(name, &device, controller.command_limit_bytes());
    Some(SharedNamespace::new(device))
}

/// The bring-up measurement and self-test when asked; `None` (reported) when the namespace
/// stops answering.
fn bring_up_reads(
    controller: &KernelController,
    name: &str,
    mut device: SharedNamespace,
    machine: &Machine,
    options: &DriverOptions,
    scratch: &mut Scratch,
) -> Option<SharedNamespace> {
    let mut responsive = true;
    if options.measure {
        responsive &= measure(name, &mut device, machine.platform, scratch);
    }
    if let (Some(depth), true) = (options.self_test_depth, responsive) {
        responsive &= self_test(name, &mut device, depth, machine.platform, scratch);
    }
    if !responsive {
        // Reads are still outstanding: the device cannot be handed to the checks or the
        // benchmark.
        println!(
            "{name}: reads stopped completing (CSTS = {:#010x}); not registered",
            controller.status_register()
        );
        return None;
    }
    Some(device)
}

/// `regs=`: the registers as found and after bring-up now, and after the last run later.
fn watch_registers(storage: &mut Storage, name: &str, function: &PciFunction, found: &FoundController) {
    let when = format!(
        "as found (NVMe {} BAR0 {:#x}, before the driver's first write)",
        function.address, found.bar0_address
    );
    print_registers(name, &when, &found.as_found);
    let registers = found.registers;
    print_registers(name, "after bring-up", &drivers::nvme::snapshot::snapshot(&registers));
    storage.watch_registers(name, Box::new(move || drivers::nvme::snapshot::snapshot(&registers)));
}

fn describe_controller(controller: &KernelController) {
    let identity = controller.identity();
    println!("nvme         NVMe {} (VS), {}", controller.version(), controller.capabilities());
    let mdts = match controller.max_transfer_bytes() {
        Some(bytes) => format!("MDTS {} ({} per command)", identity.mdts, ByteSize(bytes)),
        None => String::from("MDTS 0 (no limit)"),
    };
    println!(
        "nvme         model \"{}\", serial \"{}\", firmware \"{}\", PCI vendor {:04x}, controller id {}",
        identity.model, identity.serial, identity.firmware, identity.vendor_id, identity.controller_id
    );
    println!(
        "nvme         {mdts}, SQES {:#04x}, CQES {:#04x}, NN {}, VER {}, MAXCMD {}, RTD3E {} µs, volatile write cache {}, {}",
        identity.sqes,
        identity.cqes,
        identity.namespace_count,
        identity.version,
        identity.max_commands,
        identity.rtd3_entry_latency_us,
        if identity.volatile_write_cache { "present" } else { "absent" },
        identity.host_memory
    );
}

fn describe_namespace(name: &str, namespace: &NamespaceIdentity) {
    let format = namespace.format();
    let block_bytes = u64::from(format.data_bytes().unwrap_or(0));
    let bytes = namespace.size_bytes().unwrap_or(0);
    let capacity_bytes = namespace.capacity_bytes().unwrap_or(0);
    let hundredths_gib = u128::from(bytes) * 100 / u128::from(GIB);
    println!(
        "{name:<10} namespace {}: {bytes} bytes ({}.{:02} GiB) = NSZE {} × {block_bytes} B; capacity {capacity_bytes} bytes (NCAP {}), NUSE {}",
        namespace.namespace_id,
        hundredths_gib / 100,
        hundredths_gib % 100,
        namespace.size_blocks,
        namespace.capacity_blocks,
        namespace.utilization_blocks
    );
    let mut formats = String::new();
    for (index, lba_format) in namespace.formats().iter().enumerate() {
        let marker = if index == namespace.format_index { "*" } else { "" };
        formats.push_str(&format!(" {index}:{lba_format}{marker}"));
    }
    println!(
        "{name:<10} LBA size {block_bytes} B: format {} of {} ({format}, {} performance); formats (data+metadata):{formats}",
        namespace.format_index,
        namespace.format_count,
        format.performance_name()
    );
    println!(
        "{name:<10} {} (DLFEAT {:#04x})",
        namespace.deallocated_read().description(),
        namespace.deallocate_features
    );
}

fn describe_queues(name: &str, device: &KernelNamespace, command_limit_bytes: u64) {
    let pairs = device.pairs();
    let geometry = device.geometry();
    let queue_ids: Vec<String> = pairs.iter().map(|p| format!("{}", p.queue_id())).collect();
    let block_bytes = u64::from(geometry.logical_block_bytes);
    let command_bytes = u64::from(pairs[0].max_command_blocks()) * block_bytes;
    println!(
        "{name:<10} {} I/O queue pair{} (qid {}) × {} entries, polled (IEN 0, PC 1): {} requests in flight, up to {} per request, {} per command (1 MiB = {} command{})",
        pairs.len(),
        if pairs.len() == 1 { "" } else { "s" },
        queue_ids.join(", "),
        pairs[0].entries(),
        geometry.max_in_flight,
        ByteSize(u64::from(geometry.max_request_blocks) * block_bytes),
        ByteSize(command_bytes.min(command_limit_bytes)),
        MIB.div_ceil(command_bytes),
        if MIB.div_ceil(command_bytes) == 1 { "" } else { "s" }
    );
}

fn microseconds(ns: u64) -> String {
    format!("{}.{:01}", ns / 1000, (ns % 1000) / 100)
}

/// Times reads through the block interface. False when reads stopped
/// completing.
fn measure(
    name: &str,
    device: &mut SharedNamespace,
    platform: &'static KernelPlatform,
    scratch: &mut Scratch,
) -> bool {
    let Ok(buffer) =
        scratch.get().inspect_err(|error| println!("{name}: no buffers for the timing reads: {error}"))
    else {
        return true;
    };
    let mut reports = Vec::new();
    for workload in [MEASURE_QD1, MEASURE_1MIB, MEASURE_QD32] {
        match selftest::run(&mut *device, platform, buffer, &workload) {
            Ok(report) if report.passed() => reports.push(report),
            Ok(report) => {
                describe_failures(name, "timing reads", &report);
                return true;
            }
            Err(error) => {
                println!("{name}: timing reads stopped: {error}");
                return !matches!(error, selftest::RunError::Timeout { .. });
            }
        }
    }
    let [qd1, large, qd32] = reports[..] else {
        return true;
    };
    println!(
        "{name}: 4 KiB QD1 read {} µs (median of {}; mean {}, min {}, max {}), 1 MiB read {} µs (median of {}; mean {}, min {}, max {}), 4 KiB QD{} {} IOPS ({} reads, {} MiB/s)",
        microseconds(qd1.latency.median_ns.unwrap_or(0)),
        qd1.requests,
        microseconds(qd1.latency.statistics.mean_ns()),
        microseconds(qd1.latency.statistics.min_ns),
        microseconds(qd1.latency.statistics.max_ns),
        microseconds(large.latency.median_ns.unwrap_or(0)),
        large.requests,
        microseconds(large.latency.statistics.mean_ns()),
        microseconds(large.latency.statistics.min_ns),
        microseconds(large.latency.statistics.max_ns),
        qd32.depth,
        qd32.iops(),
        qd32.requests,
        MibPerS(qd32.milli_mib_per_s())
    );
    true
}

fn describe_failures(name: &str, what: &str, report: &RunReport) {
    if let Some((lba, error)) = report.first_failure {
        println!(
            "{name}: {what}: {} of {} reads failed, the first at LBA {lba}: {error}",
            report.failed, report.requests
        );
    }
    if let Some(offset) = report.first_mismatch {
        println!(
            "{name}: {what}: {} reads differ from the test pattern, the first at device offset {offset}",
            report.mismatches
        );
    }
}

/// `nvme.selftest=qdN`: N verified reads in flight through the block interface. False when
/// reads stopped completing.
fn self_test(
    name: &str,
    device: &mut SharedNamespace,
    depth: u32,
    platform: &'static KernelPlatform,
    scratch: &mut Scratch,
) -> bool {
    let Ok(buffer) =
        scratch.get().inspect_err(|error| println!("{name}: self-test qd{depth}: no buffers: {error}"))
    else {
        return true;
    };
    for (what, workload) in self_test_workloads(depth) {
        match selftest::run(&mut *device, platform, buffer, &workload) {
            Ok(report) => {
                println!(
                    "{name}: self-test qd{depth} {what}: {} {} reads ({} bytes) at up to {} in flight, {} failed, {} differ from the pattern; {} IOPS, {} MiB/s, latency mean {} µs, max {} µs",
                    if report.passed() { "passed," } else { "FAILED," },
                    report.requests,
                    report.bytes,
                    report.max_in_flight,
                    report.failed,
                    report.mismatches,
                    report.iops(),
                    MibPerS(report.milli_mib_per_s()),
                    microseconds(report.latency.statistics.mean_ns()),
                    microseconds(report.latency.statistics.max_ns)
                );
                describe_failures(name, &format!("self-test {what}"), &report);
            }
            Err(error) => {
                println!("{name}: self-test qd{depth} {what}: FAILED: {error}");
                if matches!(error, selftest::RunError::Timeout { .. }) {
                    return false;
                }
            }
        }
    }
    true
}

/// At the end of the run: each namespace's counters, then the controller's normal shutdown.
fn shut_down_on_exit(storage: &mut Storage, mut controller: KernelController, devices: Vec<SharedNamespace>) {
    storage.on_shutdown(Box::new(move || {
        for device in &devices {
            let statistics = device.borrow().statistics();
            let mut errors = String::new();
            for (status, count) in &statistics.errors_by_status {
                errors.push_str(&format!("; {status} ×{count}"));
            }
            println!(
                "{}: {} requests ({} split, {} failed), {} commands, {} command errors, {} untrusted completions, {} SQ and {} CQ doorbell writes{errors}",
                device.name(),
                statistics.requests_completed,
                statistics.requests_split,
                statistics.requests_failed,
                statistics.commands_completed,
                statistics.command_errors,
                statistics.protocol_errors,
                statistics.sq_doorbell_writes,
                statistics.cq_doorbell_writes
            );
        }
        let label = String::from(controller.label());
        match controller.shutdown() {
            Ok(report) => {
                if let Some(error) = report.deletion_error {
                    println!("{label}: deleting the I/O queues: {error}");
                }
                println!(
                    "{label}: shut down (CSTS.SHST complete) after {} µs, {} I/O queue pair{} deleted",
                    report.waited_us,
                    report.queues_deleted,
                    if report.queues_deleted == 1 { "" } else { "s" }
                );
            }
            Err(error) => println!("{label}: normal shutdown failed: {error}"),
        }
    }));
}

/// A namespace shared between the storage registry (the block interface) and the shutdown hook
/// (its counters).
type SharedNamespace = SharedDevice<KernelNamespace>;
