//! The kernel at run time (bare-metal target only): entry from `boot`, discovery, console,
//! banner, memory map and MMU, command line, devices, benchmark, and the end of the run.

mod arch;
pub mod console;
mod exceptions;
pub mod exit;
pub mod firmware;
pub mod led;
pub mod nvme;
pub mod pci_enumeration;
pub mod pci_topology;
pub mod platform;
pub mod pmu;
#[cfg(target_arch = "aarch64")]
pub mod root_complex;
pub mod rp1;
pub mod sd;
pub mod storage;
mod sync;
pub mod timer;
pub mod trace;
pub mod usb;
pub mod windows;

use crate::board::{BlockKind, BoardFamily, MmioBlock, Span, UartClock};
use crate::devicetree::DeviceTree;
use crate::discovery::{self, BoardInfo, ConfigSource, UnknownBoard};
use crate::kernel_settings::{self, KernelSettings, TestFault, Token};
use crate::memory_plan::{self, MemoryPlan, PlanRequest};
use crate::{print, println};
use blockdev::Clock;
use boot::cpu::{registers, MainId};
use drivers::mailbox::CpuClock;
use exit::{finish, ExitStatus, PsciConduit};
use firmware::Firmware;
use hal::platform::Platform;
use platform::KernelPlatform;
use pmu::PerformanceCounters;
use sync::SingleCoreCell;
use timer::KernelTimer;

pub const PROGRAM_NAME: &str = "barebench";
pub const PROGRAM_VERSION: &str = env!("CARGO_PKG_VERSION");

const MIB: u64 = 1 << 20;
const HEAP_BYTES: u64 = 16 * MIB;
const DMA_POOL_BYTES: &[u64] = &[192 * MIB, 128 * MIB, 64 * MIB, 32 * MIB];
#[cfg(target_arch = "aarch64")]
const TABLE_COUNT: usize = 24;
/// Words read at x0 when looking for ATAGS (QEMU's list is a few dozen words).
const ATAGS_WINDOW_WORDS: usize = 1024;

#[cfg(target_arch = "aarch64")]
static TRANSLATION_TABLES: SingleCoreCell<[boot::mmu::Table; TABLE_COUNT]> =
    SingleCoreCell::new([boot::mmu::Table::EMPTY; TABLE_COUNT]);
#[cfg(target_arch = "arm")]
static SECTION_TABLE: SingleCoreCell<boot::mmu_aarch32::SectionTable> =
    SingleCoreCell::new(boot::mmu_aarch32::SectionTable::EMPTY);

#[global_allocator]
static HEAP: linked_list_allocator::LockedHeap = linked_list_allocator::LockedHeap::empty();

extern "C" {
    static __image_start: u8;
    static __image_end: u8;
}

/// Everything `main` learned at start-up, for the rest of the run.
pub struct Machine {
    pub info: BoardInfo,
    pub timer: KernelTimer,
    pub platform: &'static KernelPlatform,
    pub firmware: Option<Firmware>,
    /// The exception level at entry in AArch64 terms (HYP = 2 on AArch32).
    pub entry_level: u64,
    /// What `boot` passed: the level on AArch64, the CPSR mode on AArch32.
    pub entry_state: u64,
    pub main_id: MainId,
    /// The ARM clock after asking the firmware for its maximum (`None`: no firmware to ask).
    pub cpu_clock: Option<CpuClock>,
    /// The CPU's cycle and instruction counters (the CPU cost per I/O).
    pub pmu: PerformanceCounters,
    /// The boot's timestamps (the firmware's part and the kernel's entry and banner).
    pub boot: BootStamps,
}

/// When the kernel started and printed its banner, and how long the firmware took before it.
#[derive(Clone, Copy, Debug)]
pub struct BootStamps {
    /// The kernel timer at the first instruction of `barebench_boot_main`.
    pub entry_ticks: u64,
    pub banner_ticks: u64,
    /// The firmware's part (docs/hardware.md §4.7), and which counter says so.
    pub firmware_ns: Option<u64>,
    pub counter: &'static str,
}

impl Machine {
    /// The boot times for the benchmark's report.
    pub fn boot_times(&self) -> bench::conditions::BootTimes {
        bench::conditions::BootTimes {
            firmware_counter: self.boot.counter,
            firmware_ns: self.boot.firmware_ns,
            entry_ticks: self.boot.entry_ticks,
            banner_ticks: self.boot.banner_ticks,
            ticks_per_second: self.timer.ticks_per_second(),
            led_ns: led::pattern_ns(),
        }
    }
}

/// Prints `stage: <step>` before a bring-up step that can hang, and waits until it has left the
/// UART, so that a log that stops there names the step (docs/hardware.md §4.8).
pub fn stage(step: core::fmt::Arguments<'_>) {
    println!("stage: {step}");
    console::flush();
}

/// Called by `boot` on core 0 at EL1 (AArch32: in SVC), MMU off, stack and BSS ready.
/// `entry_state` is the exception level at entry, or on AArch32 the CPSR mode.
#[no_mangle]
extern "C" fn barebench_boot_main(boot_argument: u64, entry_state: u64) -> ! {
    let main_id = registers::main_id();
    let entry_ticks = timer::ticks_at_entry(main_id);
    let entry_level = arch::entry_level(entry_state);
    let mut info = match discover(boot_argument, entry_level, main_id) {
        Ok(info) => info,
        Err(unknown) => stop_on_unknown_board(boot_argument, unknown),
    };
    for span in info.profile.device_spans {
        // SAFETY: `discover` found this board, whose device spans hold its registers only and are
        // what the memory map maps as Device memory (until then the MMU is off and every access
        // is a device access).
        unsafe { windows::admit(*span) };
    }
    let timer = KernelTimer::for_board(info.profile);
    let (timer, timebase) = timer.checked_against_system_timer(info.profile);
    let firmware = info
        .profile
        .block(BlockKind::Mailbox)
        .ok()
        .and_then(|mailbox| Firmware::new(mailbox, info.profile.videocore_bus, timer).ok());
    if let Some(firmware) = firmware {
        ask_firmware(&mut info, &firmware);
    }
    let qemu = info.is_qemu() || info.profile.family == BoardFamily::QemuVirt;
    let led_setting = kernel_settings::led_setting(&info.command_line);
    led::init(
        &info,
        firmware,
        timer,
        led_setting.enabled(qemu),
        led_setting == kernel_settings::LedSetting::Trace,
    );
    led::stage(drivers::activity_led::Stage::Boot);
    // PIO copies, polling and per-command overhead are timed at whatever clock the ARM runs.
    let cpu_clock = firmware.map(|firmware| raise_cpu_clock(&firmware, timer));
    // On the Pi 2 the release registers are device registers nobody else writes: the cores are
    // sent to the WFI loop whatever the entry (QEMU's raw image enters in SVC).
    if entry_level == 2 || info.profile.family == BoardFamily::RaspberryPi2 {
        park_secondary_cores(info.profile.spin_slots(cfg!(target_arch = "arm")));
    }
    init_console(&info, firmware.as_ref());
    led::stage(drivers::activity_led::Stage::ConsoleUp);
    let boot = BootStamps {
        entry_ticks,
        banner_ticks: timer.now_ticks(),
        firmware_ns: timer::firmware_part_ns(&info, &timer, entry_ticks),
        counter: crate::boot_time::firmware_counter(info.profile.family, qemu),
    };
    print_banner(&info, main_id, entry_state, &timer, timebase.as_ref(), cpu_clock.as_ref(), &boot);
    led::describe();
    rp1::mirror_console(&info);
    let pmu = PerformanceCounters::start();
    println!("pmu        {}", pmu.describe());
    for warning in &info.warnings {
        println!("warning: {warning}");
    }
    stage(format_args!("memory map"));
    let plan = match set_up_memory(&info) {
        Ok(plan) => plan,
        Err(error) => {
            println!("error: cannot lay out memory: {error}; stopping");
            finish(ExitStatus::UnknownBoard)
        }
    };
    // SAFETY: the plan's DMA pool is RAM mapped non-cacheable and used by nothing else.
    let platform: &'static KernelPlatform =
        alloc::boxed::Box::leak(alloc::boxed::Box::new(unsafe { KernelPlatform::new(timer, plan.dma_pool) }));
    let (settings, benchmark) = apply_command_line(&info, entry_level);
    if let Some(fault) = settings.test_fault {
        apply_test_fault(fault);
    }
    let machine =
        Machine { info, timer, platform, firmware, entry_level, entry_state, main_id, cpu_clock, pmu, boot };
    let status = run(&machine, &settings, &benchmark);
    finish(status)
}

/// What the kernel does once the machine is up: find the storage devices, run the integrity
/// checks asked for, then the benchmark.
fn run(machine: &Machine, settings: &KernelSettings, benchmark: &bench::settings::Config) -> ExitStatus {
    let mut storage = storage::Storage::default();
    attach_storage(machine, settings, &mut storage);
    if storage.is_empty() {
        println!("storage    no usable devices found");
    }
    stage(format_args!("scratch scan"));
    let regions = storage::scan_scratch_regions(benchmark, &mut storage, machine.platform);
    let mut status = ExitStatus::Success;
    if !storage::run_block_checks(settings, &mut storage, machine.platform) {
        status = ExitStatus::DeviceErrors;
    }
    if benchmark.jobs.is_empty() {
        println!("benchmark  no jobs (jobs=none)");
    } else if storage.is_empty() {
        println!("benchmark  no devices to measure; not run");
    } else {
        let outcome = run_benchmark(machine, settings, benchmark, &mut storage, &regions);
        if !outcome.devices_ok {
            status = ExitStatus::DeviceErrors;
        }
        if outcome.throttled && settings.throttle_fails {
            println!(
                "throttle=fail: the SoC was throttled or under-voltage during the benchmark; exit status {}",
                ExitStatus::DeviceErrors as u32
            );
            status = ExitStatus::DeviceErrors;
        }
    }
    storage.print_registers_after_runs();
    stage(format_args!("shutdown"));
    storage.shut_down();
    status
}

/// How the benchmark went, for the exit status.
struct BenchmarkOutcome {
    /// No I/O failed, every check matched, no run ended early.
    devices_ok: bool,
    /// The firmware reported throttling or under-voltage during the benchmark.
    throttled: bool,
}

/// Room left in the DMA pool after the benchmark's buffers, for anything allocated later.
const DMA_POOL_RESERVE_BYTES: u64 = 4 * MIB;

/// Runs the benchmark on every device (the runner applies `devices=`) after sampling each
/// device's region; false when some I/O failed or no buffer could be had.
fn run_benchmark(
    machine: &Machine,
    settings: &KernelSettings,
    config: &bench::settings::Config,
    storage: &mut storage::Storage,
    regions: &[storage::FoundRegion],
) -> BenchmarkOutcome {
    use blockdev::BlockDevice;
    let Some(area) = allocate_benchmark_buffers(machine, config, storage) else {
        return BenchmarkOutcome { devices_ok: false, throttled: false };
    };
    let mut config = config.clone();
    config.pattern_regions = storage::scan_pattern_regions(&config, storage, machine.platform, area);
    let config = &config;
    stage(format_args!("region sampling"));
    let samples = storage::sample_regions(config, storage, machine.platform, area);
    let device_facts: alloc::vec::Vec<bench::results::DeviceFacts<'_>> = samples
        .iter()
        .map(|sampled| bench::results::DeviceFacts {
            device_name: &sampled.device_name,
            region_sample: Some(sampled.sample),
            deallocated_read: sampled.deallocated_read,
        })
        .collect();
    let board = BoardFacts::of(machine, storage);
    let extra = board.extra();
    let context = bench::results::ReportContext {
        board: board.name,
        timer_frequency_hz: machine.timer.ticks_per_second(),
        extra: &extra,
        device_facts: &device_facts,
    };
    let memory = platform::DmaBufferMemory { platform: machine.platform };
    let device_regions: alloc::vec::Vec<bench::run_loop::DeviceRegion<'_>> = regions
        .iter()
        .map(|found| bench::run_loop::DeviceRegion { device_name: &found.device_name, region: found.region })
        .collect();
    // Without write= nothing may be written: the runner then refuses every write job.
    let writes = (!config.write_devices.is_empty())
        .then_some(bench::run_loop::WriteAccess { memory: &memory, regions: &device_regions });
    let conditions_settings = bench::conditions::ConditionsSettings {
        cooldown_below_millic: settings.cooldown_below_millic,
        throttle_fails: settings.throttle_fails,
    };
    let between_runs = led::heartbeat_between_runs;
    let in_window = led::heartbeat_in_window;
    let firmware_conditions =
        machine.firmware.as_ref().map(|firmware| crate::conditions::FirmwareConditions {
            firmware,
            settings: conditions_settings,
            faked_throttle: match settings.test_fault {
                Some(TestFault::Throttled) => kernel_settings::FAKED_THROTTLE_FLAGS,
                _ => 0,
            },
            boot: Some(machine.boot_times()),
            between_runs: &between_runs,
            in_window: &in_window,
        });
    let no_firmware = crate::conditions::NoFirmware {
        reason: "this machine has no VideoCore firmware to ask",
        settings: conditions_settings,
        boot: Some(machine.boot_times()),
        in_window: &in_window,
    };
    let conditions: &dyn bench::conditions::ConditionsSource = match &firmware_conditions {
        Some(source) => source,
        None => &no_firmware,
    };
    stage(format_args!("benchmark"));
    let environment = bench::runner::RunEnvironment {
        clock: &machine.timer,
        cpu_counters: &machine.pmu,
        buffer_area: area,
        memory: Some(&memory),
        writes,
        conditions: Some(conditions),
    };
    let mut lent: alloc::vec::Vec<storage::LentDevice> =
        storage.devices_mut().iter_mut().map(storage::StorageDevice::lend).collect();
    let mut devices: alloc::vec::Vec<&mut dyn BlockDevice> =
        lent.iter_mut().map(storage::LentDevice::device).collect();
    let results = bench::runner::run_benchmark_with_traces(
        config,
        &mut devices,
        &environment,
        &context,
        &mut console::ConsoleWriter,
        &trace::DefmtTraces,
    );
    let errors: u64 = results.runs.iter().map(|run| run.errors_total()).sum();
    let verified = results
        .runs
        .iter()
        .filter_map(|run| run.verify.as_ref())
        .all(|verify| verify.mismatches == 0 && verify.read_errors == 0);
    let ran_cleanly = results.runs.iter().all(|run| run.ended_early.is_none());
    BenchmarkOutcome {
        devices_ok: errors == 0 && verified && ran_cleanly && results.stream_jobs_clean(),
        throttled: results.throttled_during(),
    }
}

/// One DMA area for the benchmark's read buffers: what every request needs a buffer of its own,
/// or what the pool has left (requests then share), but at least the largest block.
fn allocate_benchmark_buffers(
    machine: &Machine,
    config: &bench::settings::Config,
    storage: &storage::Storage,
) -> Option<blockdev::DmaBuffer> {
    let geometries: alloc::vec::Vec<blockdev::Geometry> =
        storage.devices().iter().map(|entry| entry.device.geometry()).collect();
    let wanted = bench::plan::buffer_bytes_needed(config, &geometries) as u64;
    let minimum = bench::plan::minimum_buffer_bytes(config, &geometries) as u64;
    let available = machine.platform.dma_remaining_bytes().saturating_sub(DMA_POOL_RESERVE_BYTES);
    let area_bytes = wanted.min(available).max(minimum).max(4096);
    match hal::platform::Platform::allocate_dma(machine.platform, area_bytes as usize, 4096) {
        Ok(area) => Some(area),
        Err(error) => {
            println!("benchmark  cannot allocate its buffers: {error}; not run");
            None
        }
    }
}

/// The board facts the JSON carries besides the board's name.
struct BoardFacts<'m> {
    name: &'m str,
    soc: &'static str,
    cpu: alloc::string::String,
    entry: &'static str,
    /// `(<device>_controller, controller)` for each SD slot, e.g. `("sd0_controller", "sdhost")`.
    controllers: alloc::vec::Vec<(alloc::string::String, alloc::string::String)>,
    revision: Option<alloc::string::String>,
    cpu_clock: Option<alloc::string::String>,
    cpu_clock_hz: Option<alloc::string::String>,
    cpu_max_clock_hz: Option<alloc::string::String>,
}

impl<'m> BoardFacts<'m> {
    fn of(machine: &'m Machine, storage: &storage::Storage) -> BoardFacts<'m> {
        let info = &machine.info;
        let name = match info.profile.family {
            BoardFamily::QemuVirt => "QEMU virt",
            _ => info.model.as_str(),
        };
        BoardFacts {
            name,
            soc: soc_name(info),
            cpu: alloc::format!("{}", machine.main_id),
            entry: arch::entry_name(machine.entry_state),
            controllers: storage
                .controllers()
                .iter()
                .map(|(device, controller)| (alloc::format!("{device}_controller"), controller.clone()))
                .collect(),
            revision: info.board_revision.map(|r| alloc::format!("{r:#08x}")),
            cpu_clock: machine.cpu_clock.map(|clock| alloc::format!("{clock}")),
            cpu_clock_hz: machine
                .cpu_clock
                .and_then(|clock| clock.current_hz.ok())
                .map(|hz| alloc::format!("{hz}")),
            cpu_max_clock_hz: machine
                .cpu_clock
                .and_then(|clock| clock.max_hz.ok())
                .map(|hz| alloc::format!("{hz}")),
        }
    }

    fn extra(&self) -> alloc::vec::Vec<(&str, &str)> {
        let mut extra = alloc::vec![("soc", self.soc), ("cpu", self.cpu.as_str()), ("entry", self.entry)];
        for (key, value) in &self.controllers {
            extra.push((key.as_str(), value.as_str()));
        }
        let optional = [
            ("board_revision", &self.revision),
            ("cpu_clock", &self.cpu_clock),
            ("cpu_clock_hz", &self.cpu_clock_hz),
            ("cpu_max_clock_hz", &self.cpu_max_clock_hz),
        ];
        for (key, value) in optional {
            if let Some(value) = value {
                extra.push((key, value.as_str()));
            }
        }
        extra
    }
}

/// Finds the SD cards, NVMe namespaces and USB drives and adds them to `storage` in naming
/// order: SD hosts first (board table order, before PCIe is touched; then PCI), the Pi 5's RP1
/// USB drives (before pcie1 is brought up, while RP1's link is as the firmware left it), then
/// NVMe controllers in PCI order, then the other USB drives controller by controller, port by
/// port (`crate::bring_up`).
fn attach_storage(machine: &Machine, settings: &KernelSettings, storage: &mut storage::Storage) {
    use crate::bring_up::{AttachStep, ATTACH_ORDER};
    let mut pci = None;
    let mut sd_found_shown = false;
    for step in ATTACH_ORDER {
        match step {
            AttachStep::BoardSdHosts => sd::attach_board_hosts(machine, settings, storage),
            AttachStep::Rp1Usb => usb::attach_rp1(machine, settings, storage),
            AttachStep::PciEnumeration => {
                pci = pci_enumeration::enumerate(machine, settings);
                if pci.is_some() && machine.info.profile.pcie.is_some() {
                    led::stage(drivers::activity_led::Stage::PcieLink);
                }
            }
            AttachStep::PciSdHosts => sd::attach_pci_hosts(machine, settings, pci.as_ref(), storage),
            AttachStep::Nvme => nvme::attach(machine, settings, pci.as_ref(), storage),
            AttachStep::Usb => usb::attach(machine, settings, pci.as_ref(), storage),
        }
        if !sd_found_shown && storage.devices().iter().any(|entry| entry.class == storage::DeviceClass::Sd) {
            led::stage(drivers::activity_led::Stage::SdFound);
            sd_found_shown = true;
        }
    }
}

/// Whether x0 may point at boot parameters: non-zero, word aligned and in the low 4 GiB where
/// every supported firmware and QEMU put them. Reading an arbitrary address with the MMU off could
/// be a bus error before there is a console to report it.
fn is_plausible_boot_argument(boot_argument: u64) -> bool {
    boot_argument != 0 && boot_argument.is_multiple_of(4) && boot_argument < (1 << 32)
}

fn discover(boot_argument: u64, entry_level: u64, main_id: MainId) -> Result<BoardInfo, UnknownBoard> {
    let plausible = is_plausible_boot_argument(boot_argument);
    let mut corrupt_tree = None;
    if plausible {
        // SAFETY: x0 points into RAM on every supported start (firmware, QEMU), checked above.
        match unsafe { DeviceTree::from_address(boot_argument as usize) } {
            Ok(tree) => return discovery::from_device_tree(tree, boot_argument, main_id),
            Err(crate::devicetree::DeviceTreeError::BadMagic { .. }) => {
                // SAFETY: as above; the ATAGS parser stops at the first malformed tag.
                let memory = unsafe {
                    core::slice::from_raw_parts(boot_argument as usize as *const u8, 4 * ATAGS_WINDOW_WORDS)
                };
                if let Some(tags) = crate::atags::parse(memory) {
                    return discovery::from_atags(&tags, boot_argument, main_id);
                }
            }
            Err(error) => corrupt_tree = Some(error),
        }
    }
    // No parameters: the Pi firmware and QEMU's raspi machines start at EL2 or EL3, so a start at
    // EL1 without a device tree is some other machine whose addresses the kernel does not know.
    // The 32-bit image serves only the 32-bit Pis, which QEMU's ELF loader and the Pi 1 firmware
    // start in SVC: there the core alone picks the board.
    if entry_level < 2 && !cfg!(target_arch = "arm") {
        return Err(UnknownBoard { main_id, root_compatible: None });
    }
    let mut info = discovery::from_core(main_id, ConfigSource::Firmware)?;
    match corrupt_tree {
        Some(error) => info.warn(format_args!(
            "the device tree at {boot_argument:#x} is corrupt ({error}); using the board table"
        )),
        None if boot_argument != 0 => info.warn(format_args!(
            "x0 = {boot_argument:#x} holds neither a device tree nor ATAGS; using the board table"
        )),
        None => {}
    }
    Ok(info)
}

/// Asks the firmware to run the ARM at its maximum clock and reads back what it runs at.
fn raise_cpu_clock(firmware: &Firmware, mut timer: KernelTimer) -> CpuClock {
    use embedded_hal::delay::DelayNs;
    CpuClock::raise_to_maximum(firmware, || timer.delay_us(drivers::mailbox::CLOCK_TRANSITION_US as u32))
}

/// Fills in what only the VideoCore knows: the board revision, and without a device tree the
/// memory split and the command line.
fn ask_firmware(info: &mut BoardInfo, firmware: &Firmware) {
    match firmware.board_revision() {
        Ok(revision) => {
            info.board_revision = Some(revision);
            let revision_name = drivers::mailbox::BoardRevision(revision).model_name();
            if let (Some(name), ConfigSource::Atags { .. } | ConfigSource::Firmware) =
                (revision_name, info.source)
            {
                discovery::copy_truncated(&mut info.model, name);
            }
        }
        Err(error) => info.warn(format_args!("firmware board revision unavailable: {error}")),
    }
    info.firmware_revision = firmware.firmware_revision().ok();
    // QEMU's raspi machines hand the same -append to ATAGS and to the mailbox, but the ATAGS copy
    // is cut where it meets the secondary-core stub at 0x300; the mailbox's copy is whole.
    if let ConfigSource::Atags { .. } = info.source {
        let mut line = heapless::String::new();
        if firmware.command_line(&mut line).is_ok() && line.len() > info.command_line.len() {
            info.set_command_line(&line);
        }
    }
    if info.source == ConfigSource::Firmware {
        match firmware.arm_memory() {
            Ok((base, size_bytes)) if size_bytes > 0 => {
                info.memory.clear();
                let _ = info.memory.push(Span::new(base, size_bytes));
            }
            Ok(_) => info.warn(format_args!("firmware reports no ARM memory; using the board table")),
            Err(error) => {
                info.warn(format_args!("firmware memory split unavailable ({error}); using the board table"))
            }
        }
        let mut line = heapless::String::new();
        match firmware.command_line(&mut line) {
            Ok(()) => info.set_command_line(&line),
            Err(error) => info.warn(format_args!("firmware command line unavailable: {error}")),
        }
    }
}

/// Moves cores 1-3 from the firmware's WFE spin loop into `boot`'s WFI loop (on the Pi 2 through
/// the ARM-local mailbox set registers, whose 32-bit width is the pointer's there). Under QEMU a core
/// waiting in WFE spins a host CPU (TCG treats WFE as a yield); in WFI it sleeps, which made SD
/// PIO about four times faster in docs/qemu.md §1's measurements. Done before the MMU is on, so the
/// slots are written straight to memory where the waiting cores read them.
fn park_secondary_cores(spin_table: &[u64]) {
    let park = boot::park_core_address();
    for &slot in spin_table {
        // SAFETY: the slots are the firmware's release words in low RAM (board table); writing
        // the address of a WFI loop releases a waiting core into it and touches nothing else.
        unsafe { core::ptr::write_volatile(slot as usize as *mut usize, park as usize) };
    }
    if !spin_table.is_empty() {
        hal::barrier::full();
        arch::send_event();
    }
}

fn init_console(info: &BoardInfo, firmware: Option<&Firmware>) {
    let profile = info.profile;
    // Every board of the table has one (board tests); without it there is nowhere to print.
    let Ok(console_uart) = profile.block(BlockKind::ConsoleUart) else {
        return;
    };
    if let (
        Some(gpio),
        BoardFamily::RaspberryPi1
        | BoardFamily::RaspberryPi2
        | BoardFamily::RaspberryPi3
        | BoardFamily::RaspberryPi4,
    ) = (windows::gpio(profile), profile.family)
    {
        // Route the PL011 to the header pins GPIO 14/15 (ALT0) whatever the firmware chose
        // (docs/hardware.md §4.1, docs/ecosystem.md §4.1: on Pi 3/4 and Zero W the PL011
        // otherwise serves Bluetooth; docs/aarch32-pis.md §2).
        gpio.set_functions(14..=15, drivers::gpio::PinFunction::Alt0);
        // Take GPIO 32/33 (Bluetooth's PL011 pins, ALT3) off the UART so that only the header
        // pins drive its receive line.
        gpio.set_functions(32..=33, drivers::gpio::PinFunction::Input);
    }
    let uart_clock_hz = match profile.uart_clock {
        UartClock::Fixed { hz } => Some(hz),
        UartClock::FromMailbox { fallback_hz } => Some(
            firmware
                .and_then(|f| f.clock_rate_hz(drivers::mailbox::clocks::UART).ok())
                .unwrap_or(fallback_hz),
        ),
        UartClock::KeepFirmware { fallback_hz } => {
            match windows::open(console_uart).map(drivers::pl011::Pl011::new) {
                Ok(uart) if uart.divisors().0 == 0 => Some(fallback_hz),
                _ => None,
            }
        }
    };
    console::init(console_uart, uart_clock_hz);
}

fn print_banner(
    info: &BoardInfo,
    main_id: MainId,
    entry_state: u64,
    timer: &KernelTimer,
    timebase: Option<&drivers::timebase::TimebaseCheck>,
    cpu_clock: Option<&CpuClock>,
    boot: &BootStamps,
) {
    println!();
    println!("{PROGRAM_NAME} {PROGRAM_VERSION}: bare-metal storage benchmark");
    match info.profile.family {
        BoardFamily::QemuVirt => print!("board      QEMU virt (device tree model \"{}\")", info.model),
        _ => print!("board      {}", info.model),
    }
    if let Some(revision) = info.board_revision {
        print!(" (revision {revision:#08x})");
    }
    println!();
    println!("family     {}", info.profile.name);
    println!("soc        {}", soc_name(info));
    let plural = if info.core_count == 1 { "" } else { "s" };
    println!("cpu        {main_id} (MIDR {:#010x}), {} core{plural}", main_id.0, info.core_count);
    if let Some(clock) = cpu_clock {
        println!("           {clock}");
    }
    if let Some(revision) = info.firmware_revision {
        let qemu = if info.is_qemu() { " (QEMU's firmware model)" } else { "" };
        println!("firmware   VideoCore revision {revision:#010x}{qemu}");
    }
    print!("ram        {} MiB", info.total_memory_bytes() / MIB);
    for bank in &info.memory {
        print!(" [{:#x}-{:#x}]", bank.base, bank.end());
    }
    println!();
    println!("timer      {}", timer.describe());
    match timebase {
        Some(check) if check.disagrees() => {
            println!("warning: {check}; timing with the system timer instead (1 µs resolution)")
        }
        Some(check) => println!("           {check}"),
        None => {}
    }
    println!("entry      {}", arch::entry_name(entry_state));
    println!("config     {}", info.source);
    if !info.compatible.is_empty() {
        println!("compatible {}", info.compatible);
    }
    println!("cmdline    \"{}\"", info.command_line);
    use bench::conditions::Milliseconds;
    let to_banner = Milliseconds(timer.ticks_to_ns(boot.banner_ticks.saturating_sub(boot.entry_ticks)));
    match boot.firmware_ns {
        Some(ns) => print!(
            "boot       firmware {} before the kernel ({}); ",
            Milliseconds(ns),
            crate::boot_time::counter_name(info.profile.family, info.is_qemu())
        ),
        None => print!("boot       firmware part unknown; "),
    }
    println!("kernel {to_banner} from entry to banner (LED patterns {})", Milliseconds(led::pattern_ns()));
}

/// The SoC as the firmware names it (board revision), else as the board table does.
fn soc_name(info: &BoardInfo) -> &'static str {
    info.board_revision
        .and_then(|r| drivers::mailbox::BoardRevision(r).processor_name())
        .unwrap_or(info.profile.soc)
}

fn image_span() -> Span {
    // SAFETY: the linker script defines both symbols; only their addresses are taken.
    let (start, end) = unsafe { (&__image_start as *const u8 as u64, &__image_end as *const u8 as u64) };
    Span::new(start, end - start)
}

fn set_up_memory(info: &BoardInfo) -> Result<MemoryPlan, memory_plan::PlanError> {
    let profile = info.profile;
    let mut reserved: heapless::Vec<Span, 4> = heapless::Vec::new();
    let mut keep_mapped: heapless::Vec<Span, 2> = heapless::Vec::new();
    if profile.low_reserved_bytes > 0 {
        let _ = reserved.push(Span::new(0, profile.low_reserved_bytes));
    }
    if let Some(tree) = info.device_tree_span() {
        let _ = reserved.push(tree);
        let _ = keep_mapped.push(tree);
    }
    let plan = memory_plan::plan(&PlanRequest {
        ram: &info.memory,
        devices: profile.device_spans,
        image: image_span(),
        reserved: &reserved,
        keep_mapped: &keep_mapped,
        dma_limit: profile.dma_limit,
        heap_bytes: HEAP_BYTES,
        dma_pool_bytes: DMA_POOL_BYTES,
    })?;
    let parange = registers::physical_address_range();
    enable_translation(info, &plan, parange);
    // SAFETY: the heap range comes from the plan: mapped RAM used by nothing else.
    unsafe { HEAP.lock().init(plan.heap.base as usize as *mut u8, plan.heap.size_bytes as usize) };
    println!(
        "memory     MMU on ({} regions, {}-bit PA); heap {} MiB at {:#x}; DMA pool {} MiB at {:#x} (non-cacheable)",
        plan.regions.len(),
        boot::cpu::physical_address_bits(parange),
        plan.heap.size_bytes / MIB,
        plan.heap.base,
        plan.dma_pool.size_bytes / MIB,
        plan.dma_pool.base
    );
    Ok(plan)
}

/// Builds the identity map of `plan` and turns the MMU on (4 KiB-granule tables on AArch64).
#[cfg(target_arch = "aarch64")]
fn enable_translation(_info: &BoardInfo, plan: &MemoryPlan, parange: u64) {
    let root_address = TRANSLATION_TABLES
        .with(|tables| {
            boot::mmu::build_identity_map(&plan.regions, tables)
                .map(|root| &tables[root] as *const boot::mmu::Table as u64)
        })
        .expect("translation tables are only built once");
    let root_address = match root_address {
        Ok(address) => address,
        Err(error) => {
            println!("error: cannot build the translation tables: {error:?}; stopping");
            finish(ExitStatus::UnknownBoard)
        }
    };
    // SAFETY: the tables identity-map all RAM (the image, stack and tables included), the DMA
    // pool and every device the kernel uses, and live in a static for the rest of the run.
    unsafe { boot::mmu::enable(root_address, boot::mmu::translation_control_value(parange)) };
}

/// Builds the identity map of `plan` and turns the MMU on (1 MiB short-descriptor sections on
/// AArch32, docs/aarch32-pis.md §4).
#[cfg(target_arch = "arm")]
fn enable_translation(_info: &BoardInfo, plan: &MemoryPlan, _parange: u64) {
    let table_address = SECTION_TABLE
        .with(|table| {
            boot::mmu_aarch32::build_section_map(&plan.regions, table)
                .map(|()| table as *const boot::mmu_aarch32::SectionTable as u32)
        })
        .expect("the section table is only built once");
    let table_address = match table_address {
        Ok(address) => address,
        Err(error) => {
            println!("error: cannot build the section table: {error:?}; stopping");
            finish(ExitStatus::UnknownBoard)
        }
    };
    let core = registers::main_id().core_model();
    // SAFETY: the table identity-maps all RAM (the image, stacks and the table included), the
    // DMA pool and every device the kernel uses, and lives in a static for the rest of the run.
    unsafe { boot::mmu_aarch32::enable(table_address, core) };
}

/// Reads the command line: the kernel's own settings and the driver options here, the
/// benchmark's in `bench`; the firmware's additions are left alone; anything else is named with
/// the accepted forms and the run goes on with that key's default.
fn apply_command_line(info: &BoardInfo, entry_level: u64) -> (KernelSettings, bench::settings::Config) {
    let mut settings = KernelSettings::default();
    let mut firmware_settings = 0usize;
    for token in kernel_settings::tokens(&info.command_line) {
        match token {
            Token::Setting { key, value } if kernel_settings::is_kernel_key(key) => {
                if let Err(error) = settings.apply(key, value) {
                    println!("warning: {error}");
                }
            }
            Token::Setting { key, value } if kernel_settings::is_driver_option(key) => {
                if let Err(error) = settings.add_driver_option(key, value) {
                    println!("warning: {error}");
                }
            }
            Token::Setting { key, .. } | Token::Bare(key) if kernel_settings::is_firmware_key(key) => {
                firmware_settings += 1
            }
            Token::Setting { .. } | Token::Bare(_) => {}
        }
    }
    let is_someone_elses = |key: &str| {
        kernel_settings::is_kernel_key(key)
            || kernel_settings::is_driver_option(key)
            || kernel_settings::is_firmware_key(key)
    };
    let config =
        bench::settings::Config::from_command_line(&info.command_line, is_someone_elses, &mut |error| {
            use bench::settings::ConfigProblem;
            match error.problem {
                ConfigProblem::UnknownKey | ConfigProblem::NotKeyValue => {
                    println!("warning: {error}; kernel settings: {}", kernel_settings::KERNEL_KEYS_HELP)
                }
                _ => println!("warning: {error}"),
            }
        });
    if firmware_settings > 0 {
        println!("cmdline    {firmware_settings} firmware/Linux settings ignored");
    }
    set_exit_method(info, entry_level, settings.exit);
    (settings, config)
}

/// The way the run ends; for `exit=psci` the conduit the device tree's psci node names, else
/// the board's (docs/hardware.md §4.3: SMC to TF-A on a Pi 5), never an HVC nobody answers.
fn set_exit_method(info: &BoardInfo, entry_level: u64, method: kernel_settings::ExitMethod) {
    let tree_method = info.device_tree.and_then(|tree| {
        let node = tree.find_compatible(&["arm,psci-1.0", "arm,psci-0.2", "arm,psci"])?;
        tree.string_property(node.offset, "method")
    });
    match crate::board::choose_psci_conduit(info.profile, tree_method, entry_level) {
        Ok((conduit, note)) => {
            if let (kernel_settings::ExitMethod::Psci, Some(note)) = (method, note) {
                println!("exit       psci: {note}");
            }
            exit::set_method(method, conduit);
        }
        Err(reason) if method == kernel_settings::ExitMethod::Psci => {
            println!("warning: exit=psci: {reason}; the run will end idling instead");
            exit::set_method(kernel_settings::ExitMethod::Idle, PsciConduit::Smc);
        }
        Err(_) => exit::set_method(method, PsciConduit::Smc),
    }
}

/// Raises the fault `test-fault=` asks for; `throttled` only changes what the conditions read.
fn apply_test_fault(fault: TestFault) {
    if fault == TestFault::Throttled {
        println!(
            "test-fault: the firmware's throttle flags read as {:#x} (under-voltage, throttled) on purpose",
            kernel_settings::FAKED_THROTTLE_FLAGS
        );
        return;
    }
    println!("test-fault: raising {fault:?} on purpose");
    match fault {
        TestFault::DataAbort => {
            let unmapped = arch::UNMAPPED_ADDRESS as *const u64;
            // SAFETY: deliberately unsound: the load faults, which is what the test wants to see.
            let value = unsafe { core::ptr::read_volatile(unmapped) };
            panic!("the load from an unmapped address returned {value:#x}");
        }
        TestFault::UndefinedInstruction => {
            arch::undefined_instruction();
            panic!("UDF did not trap");
        }
        TestFault::Panic => panic!("test-fault=panic asked for a panic"),
        TestFault::Throttled => {}
    }
}

/// The unknown-board stop: say so where we can, touch nothing else.
fn stop_on_unknown_board(boot_argument: u64, unknown: UnknownBoard) -> ! {
    // A device tree may still name a PL011 and the exit method (QEMU machines other than ours).
    let plausible = is_plausible_boot_argument(boot_argument);
    // SAFETY: as in `discover`.
    let tree = plausible.then(|| unsafe { DeviceTree::from_address(boot_argument as usize) }.ok()).flatten();
    if let Some(tree) = tree {
        if let Some((uart, bytes)) = tree.find_compatible(&["arm,pl011"]).and_then(|node| node.first_reg) {
            let block = MmioBlock::new(BlockKind::ConsoleUart, uart, bytes);
            // SAFETY: the device tree names a PL011 here: registers, reached with the MMU off (a
            // device access); its divisors are left as they are.
            unsafe { windows::admit(Span::new(uart, bytes)) };
            console::init(block, None);
            println!(
                "{PROGRAM_NAME}: unknown board (MIDR {:#010x}: {}, compatible {:?}); stopping without touching any device",
                unknown.main_id.0, unknown.main_id, unknown.root_compatible
            );
            let exit_requested = tree
                .find_path("/chosen")
                .and_then(|chosen| tree.string_property(chosen.offset, "bootargs"))
                .map(|line| line.split_ascii_whitespace().any(|token| token == "exit=semihosting"))
                .unwrap_or(false);
            if exit_requested {
                exit::set_method(kernel_settings::ExitMethod::Semihosting, PsciConduit::Hvc);
                finish(ExitStatus::UnknownBoard);
            }
        }
    }
    exit::idle()
}
