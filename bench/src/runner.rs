//! The runner: per-device job plans, a queue depth kept in flight, timestamps, windows and repetitions.
//!
//! A run ramps, then measures a window; the runner keeps the queue depth in flight all the time,
//! timestamps each I/O when it is submitted, when the doorbell has been rung and when its
//! completion is seen, and counts only I/Os that complete inside the window (an I/O in flight at
//! the ramp boundary counts when it completes inside the window, its latency including ramp
//! time, as in fio). After the window no new I/O is submitted and the device is drained.
//!
//! Each job runs `runs` times; odd repetitions take the devices in order, even ones in reverse.
//! Nothing allocates per I/O: the per-tag arrays are allocated per job and the histograms once.
//!
//! The progress line is written from inside the loop, at most every 500 ms. On a 115200-baud
//! UART one line takes a few milliseconds, and I/Os that complete meanwhile carry that time in
//! their latency (at QD1 the device also idles for it); `progress=off` removes the effect.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use blockdev::{
    BlockDevice, Clock, Completion, DmaBuffer, Geometry, IoErrorKind, Operation, Request, SubmitError,
};

use crate::cmdline::{Config, DeviceSelection, JobSpec};
use crate::histogram::{LatencyHistogram, FIO_DEFAULT_PERCENTILES};
use crate::offsets::{derived_seed, AccessPattern, OffsetGenerator};
use crate::report;
use crate::results::{medians_of, MedianResult, RunEnd, RunResult};
use crate::stats::LatencyAccumulator;
use crate::units::{SizeText, NS_PER_MS, NS_PER_S};

/// How long after the window the runner waits for requests still in flight. Drivers time out
/// their own commands well before this and complete them with `IoErrorKind::Timeout`.
pub const DRAIN_TIMEOUT_NS: u64 = 10 * NS_PER_S;
/// At most one progress update per this interval (≈ 2 per second).
pub const PROGRESS_INTERVAL_NS: u64 = 500 * NS_PER_MS;
/// This many identical timer readings in a row mean the timer has stopped (one loop iteration
/// takes well over a tick of the slowest timer, 52 ns at 19.2 MHz, so a working timer changes
/// within a few readings); every wait of the runner is measured with it, so the benchmark stops.
pub const STALLED_CLOCK_READINGS: u64 = 1_000_000;

/// The message for a write job (nothing is ever written).
pub const WRITES_REFUSED: &str =
    "writes are not enabled: barebench is read-only unless a write region was made for it";

/// Facts the kernel passes for the report (the top-level `"barebench"` JSON object).
#[derive(Clone, Copy, Debug, Default)]
pub struct ReportContext<'a> {
    /// Board name as the kernel identified it (`"Raspberry Pi 5"`, `"qemu-virt"`).
    pub board: &'a str,
    /// `CNTFRQ_EL0`.
    pub timer_frequency_hz: u64,
    /// Any other facts, written as JSON strings.
    pub extra: &'a [(&'a str, &'a str)],
}

/// Everything the benchmark measured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BenchmarkResults {
    /// Every run, in the order it ran.
    pub runs: Vec<RunResult>,
    /// The median per (job, device), by job then device.
    pub medians: Vec<MedianResult>,
    /// Names of the devices that took part, in "device A, device B" order.
    pub device_names: Vec<String>,
    /// Messages printed about skipped jobs, devices and settings.
    pub notes: Vec<String>,
}

/// How one job runs on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevicePlan {
    pub block_bytes: u64,
    pub blocks_per_request: u32,
    pub queue_depth: u32,
    pub region_offset_bytes: u64,
    pub region_size_bytes: u64,
    /// Whole blocks of `block_bytes` in the region (offsets are `region_offset + k × block_bytes`).
    pub block_slots: u64,
}

/// Why a job cannot run on a device at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlanError {
    /// The geometry describes no readable blocks.
    NoBlocks { block_count: u64, logical_block_bytes: u32 },
    /// The geometry allows no request at all.
    NoRequests { max_request_blocks: u32, max_in_flight: u32 },
    /// The region (after fitting it to the device) holds no whole block.
    RegionTooSmall { region_offset_bytes: u64, region_size_bytes: u64, block_bytes: u64 },
    /// The DMA buffer area cannot hold one block.
    BufferTooSmall { buffer_bytes: usize, block_bytes: u64 },
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PlanError::NoBlocks { block_count, logical_block_bytes } => write!(
                f,
                "the device reports {block_count} blocks of {logical_block_bytes} bytes; nothing \
                 to read"
            ),
            PlanError::NoRequests { max_request_blocks, max_in_flight } => write!(
                f,
                "the device accepts requests of at most {max_request_blocks} blocks with \
                 {max_in_flight} in flight"
            ),
            PlanError::RegionTooSmall { region_offset_bytes, region_size_bytes, block_bytes } => write!(
                f,
                "the region of {region_size_bytes} bytes at {region_offset_bytes} holds no whole \
                 block of {}",
                SizeText(block_bytes)
            ),
            PlanError::BufferTooSmall { buffer_bytes, block_bytes } => write!(
                f,
                "the buffer area of {buffer_bytes} bytes cannot hold one block of {}",
                SizeText(block_bytes)
            ),
        }
    }
}

/// Adapts `job` to a device: block size rounded up to the logical block and clamped to what one
/// request may carry, queue depth clamped to `max_in_flight`, region moved or shrunk to fit the
/// device and its start aligned to the block size. Every change is described in `notes`.
/// `Err` says why the job cannot run on this device at all.
pub fn plan_job(
    job: &JobSpec,
    config: &Config,
    geometry: &Geometry,
    device_name: &str,
    notes: &mut Vec<String>,
) -> Result<DevicePlan, PlanError> {
    let logical_block_bytes = u64::from(geometry.logical_block_bytes);
    if logical_block_bytes == 0 || geometry.block_count == 0 {
        return Err(PlanError::NoBlocks {
            block_count: geometry.block_count,
            logical_block_bytes: geometry.logical_block_bytes,
        });
    }
    if geometry.max_request_blocks == 0 || geometry.max_in_flight == 0 {
        return Err(PlanError::NoRequests {
            max_request_blocks: geometry.max_request_blocks,
            max_in_flight: geometry.max_in_flight,
        });
    }

    let mut block_bytes = job.block_bytes;
    if !block_bytes.is_multiple_of(logical_block_bytes) {
        let rounded = block_bytes.div_ceil(logical_block_bytes) * logical_block_bytes;
        notes.push(format!(
            "{device_name}: block size {} is not a multiple of its {logical_block_bytes}-byte \
             logical block; using {}",
            SizeText(block_bytes),
            SizeText(rounded)
        ));
        block_bytes = rounded;
    }
    let max_request_bytes = u64::from(geometry.max_request_blocks) * logical_block_bytes;
    if block_bytes > max_request_bytes {
        notes.push(format!(
            "{device_name}: block size {} is more than one request may carry ({} = {} blocks of \
             {logical_block_bytes} bytes); using {}",
            SizeText(block_bytes),
            SizeText(max_request_bytes),
            geometry.max_request_blocks,
            SizeText(max_request_bytes)
        ));
        block_bytes = max_request_bytes;
    }

    let mut queue_depth = job.queue_depth;
    if queue_depth > geometry.max_in_flight {
        queue_depth = geometry.max_in_flight;
        if queue_depth == 1 {
            notes.push(format!(
                "{device_name} has no command queueing (one request in flight): running at queue \
                 depth 1 instead of {}",
                job.queue_depth
            ));
        } else {
            notes.push(format!(
                "{device_name}: queue depth {} is more than the {queue_depth} requests it can \
                 have in flight; using {queue_depth}",
                job.queue_depth
            ));
        }
    }

    let capacity_bytes = geometry.capacity_bytes();
    let (mut offset_bytes, mut size_bytes) = (config.offset_bytes, config.size_bytes);
    if size_bytes >= capacity_bytes {
        if (offset_bytes, size_bytes) != (0, capacity_bytes) {
            notes.push(format!(
                "{device_name}: region {} at {} does not fit its {}; using the whole device",
                SizeText(size_bytes),
                SizeText(offset_bytes),
                SizeText(capacity_bytes)
            ));
        }
        offset_bytes = 0;
        size_bytes = capacity_bytes;
    } else if offset_bytes > capacity_bytes - size_bytes {
        let moved = capacity_bytes - size_bytes;
        notes.push(format!(
            "{device_name}: region {} at {} ends beyond its {}; moved to start at {} bytes",
            SizeText(size_bytes),
            SizeText(offset_bytes),
            SizeText(capacity_bytes),
            moved
        ));
        offset_bytes = moved;
    }
    let region_end = offset_bytes + size_bytes;
    let aligned_offset = offset_bytes.div_ceil(block_bytes) * block_bytes;
    let block_slots = region_end.saturating_sub(aligned_offset) / block_bytes;
    if block_slots == 0 {
        return Err(PlanError::RegionTooSmall {
            region_offset_bytes: offset_bytes,
            region_size_bytes: size_bytes,
            block_bytes,
        });
    }
    if aligned_offset != offset_bytes {
        notes.push(format!(
            "{device_name}: region start {offset_bytes} aligned up to {aligned_offset} (a \
             multiple of the block size)"
        ));
    }
    Ok(DevicePlan {
        block_bytes,
        blocks_per_request: (block_bytes / logical_block_bytes) as u32,
        queue_depth,
        region_offset_bytes: aligned_offset,
        region_size_bytes: block_slots * block_bytes,
        block_slots,
    })
}

/// The DMA buffer area that lets every request of every job have a buffer of its own: the
/// largest queue depth × block size over the read jobs and the given devices. A smaller area
/// works (requests then share buffers), down to [`minimum_buffer_bytes`].
pub fn buffer_bytes_needed(config: &Config, geometries: &[Geometry]) -> usize {
    largest_plan_bytes(config, geometries, |plan| {
        plan.block_bytes.saturating_mul(u64::from(plan.queue_depth))
    })
}

/// The smallest DMA buffer area with which every job can run: its largest block size.
pub fn minimum_buffer_bytes(config: &Config, geometries: &[Geometry]) -> usize {
    largest_plan_bytes(config, geometries, |plan| plan.block_bytes)
}

fn largest_plan_bytes(
    config: &Config,
    geometries: &[Geometry],
    bytes_of: impl Fn(&DevicePlan) -> u64,
) -> usize {
    let mut ignored_notes = Vec::new();
    let mut largest = 0u64;
    for job in config.jobs.iter().filter(|job| !job.operation.is_write()) {
        for geometry in geometries {
            if let Ok(plan) = plan_job(job, config, geometry, "", &mut ignored_notes) {
                largest = largest.max(bytes_of(&plan));
            }
            ignored_notes.clear();
        }
    }
    usize::try_from(largest).unwrap_or(usize::MAX)
}

/// `ticks × 10^9 / frequency`, truncating like `blockdev::ticks_to_ns`, with a 64-bit division
/// whenever the product fits (every latency shorter than ~5 minutes at 54 MHz).
#[derive(Clone, Copy)]
struct TickConverter {
    ticks_per_second: u64,
}

impl TickConverter {
    fn ns(self, ticks: u64) -> u64 {
        match ticks.checked_mul(NS_PER_S) {
            Some(product) => product / self.ticks_per_second,
            None => blockdev::ticks_to_ns(ticks, self.ticks_per_second),
        }
    }
}

/// Per-tag state, allocated once per job for its deepest queue.
struct Scratch {
    submitted_at_ticks: Vec<u64>,
    kicked_at_ticks: Vec<u64>,
    tag_in_flight: Vec<bool>,
    free_tags: Vec<u32>,
    batch: Vec<u32>,
    completions: Vec<Completion>,
}

impl Scratch {
    fn new(queue_depth: usize) -> Scratch {
        Scratch {
            submitted_at_ticks: alloc::vec![0; queue_depth],
            kicked_at_ticks: alloc::vec![0; queue_depth],
            tag_in_flight: alloc::vec![false; queue_depth],
            free_tags: Vec::with_capacity(queue_depth),
            batch: Vec::with_capacity(queue_depth),
            completions: alloc::vec![Completion::default(); queue_depth],
        }
    }

    fn reset(&mut self, queue_depth: usize) {
        self.tag_in_flight.fill(false);
        self.free_tags.clear();
        self.free_tags.extend((0..queue_depth as u32).rev());
        self.batch.clear();
    }
}

/// The statistics of one run (histograms allocated once per benchmark, reset per run).
struct Measurements {
    slat: LatencyAccumulator,
    clat: LatencyAccumulator,
    lat: LatencyAccumulator,
    clat_histogram: LatencyHistogram,
    lat_histogram: LatencyHistogram,
    ios: u64,
    errors: [u64; IoErrorKind::ALL.len()],
}

impl Measurements {
    fn new() -> Measurements {
        Measurements {
            slat: LatencyAccumulator::new(),
            clat: LatencyAccumulator::new(),
            lat: LatencyAccumulator::new(),
            clat_histogram: LatencyHistogram::new(),
            lat_histogram: LatencyHistogram::new(),
            ios: 0,
            errors: [0; IoErrorKind::ALL.len()],
        }
    }

    fn reset(&mut self) {
        self.slat = LatencyAccumulator::new();
        self.clat = LatencyAccumulator::new();
        self.lat = LatencyAccumulator::new();
        self.clat_histogram.reset();
        self.lat_histogram.reset();
        self.ios = 0;
        self.errors = [0; IoErrorKind::ALL.len()];
    }
}

/// What identifies a run, for the messages and the result.
struct RunLabel<'a> {
    job_index: usize,
    job: &'a JobSpec,
    run: u32,
    runs: u32,
    device_index: usize,
    seed: u64,
}

/// Runs every job of `config` on the selected `devices` and prints the run lines, progress,
/// per-job tables, the summary and the JSON block to `console`.
///
/// `buffer_area` is one DMA region for the read data; when it holds fewer than queue depth ×
/// block size bytes, requests share buffers (reads only, so what is measured does not change)
/// and a line says so. Console write errors are ignored: there is nowhere else to report them.
pub fn run_benchmark(
    config: &Config,
    devices: &mut [&mut dyn BlockDevice],
    clock: &dyn Clock,
    buffer_area: DmaBuffer,
    context: &ReportContext<'_>,
    console: &mut dyn fmt::Write,
) -> BenchmarkResults {
    let mut results = BenchmarkResults::default();
    let selected = select_devices(config, devices, &mut |message| say(console, &mut results.notes, message));
    results.device_names = selected.iter().map(|&index| devices[index].name().to_string()).collect();
    report::print_start(console, config, &results.device_names);

    if clock.ticks_per_second() == 0 {
        say(
            console,
            &mut results.notes,
            String::from("the timer reports a frequency of 0 Hz; nothing can be measured"),
        );
        finish(console, config, context, &mut results);
        return results;
    }

    let mut measurements = Measurements::new();
    let mut stuck = alloc::vec![false; devices.len()];
    let mut clock_stalled = false;
    for (job_index, job) in config.jobs.iter().enumerate() {
        if clock_stalled {
            break;
        }
        if job.operation.is_write() {
            say(console, &mut results.notes, format!("job {job} skipped: {WRITES_REFUSED}"));
            continue;
        }
        report::print_job_header(console, job, job_index + 1, config.jobs.len());
        let mut plans: Vec<Option<DevicePlan>> = alloc::vec![None; devices.len()];
        // The plan's messages (clamping, sharing) also go into each run's JSON notes.
        let mut plan_notes: Vec<Vec<String>> = alloc::vec![Vec::new(); devices.len()];
        for &device_index in &selected {
            let device = &devices[device_index];
            let mut notes = Vec::new();
            let plan = plan_job(job, config, &device.geometry(), device.name(), &mut notes)
                .and_then(|plan| check_buffer(&plan, &buffer_area, device.name(), &mut notes));
            for note in &notes {
                say(console, &mut results.notes, note.clone());
            }
            plan_notes[device_index] = notes;
            match plan {
                Ok(plan) => plans[device_index] = Some(plan),
                Err(reason) => say(
                    console,
                    &mut results.notes,
                    format!("job {job} skipped on {}: {reason}", device.name()),
                ),
            }
        }
        let deepest = plans.iter().flatten().map(|plan| plan.queue_depth as usize).max().unwrap_or(0);
        if deepest == 0 {
            continue;
        }
        let mut scratch = Scratch::new(deepest);
        let first_of_job = results.runs.len();
        let seed = derived_seed(config.seed, job_index as u64);
        for run in 1..=config.runs {
            let order: Vec<usize> =
                if run % 2 == 1 { selected.clone() } else { selected.iter().rev().copied().collect() };
            for device_index in order {
                let Some(plan) = plans[device_index] else {
                    continue;
                };
                if stuck[device_index] || clock_stalled {
                    continue;
                }
                let label = RunLabel { job_index, job, run, runs: config.runs, device_index, seed };
                let mut result = run_once(
                    &mut *devices[device_index],
                    clock,
                    config,
                    &plan,
                    &label,
                    &buffer_area,
                    &mut scratch,
                    &mut measurements,
                    console,
                );
                result.notes.splice(0..0, plan_notes[device_index].iter().cloned());
                match result.ended_early {
                    Some(RunEnd::DrainTimeout { .. }) => stuck[device_index] = true,
                    Some(RunEnd::ClockStalled { .. }) => clock_stalled = true,
                    _ => {}
                }
                results.runs.push(result);
            }
        }
        let job_runs = &results.runs[first_of_job..];
        let job_medians = medians_of(job_runs);
        report::print_job_table(console, job, job_runs, &job_medians, &results.device_names);
    }
    finish(console, config, context, &mut results);
    results
}

/// Prints a message on its own line and keeps it in `notes`.
fn say(console: &mut dyn fmt::Write, notes: &mut Vec<String>, message: String) {
    let _ = writeln!(console, "{message}");
    notes.push(message);
}

fn finish(
    console: &mut dyn fmt::Write,
    config: &Config,
    context: &ReportContext<'_>,
    results: &mut BenchmarkResults,
) {
    results.medians = medians_of(&results.runs);
    report::print_summary(console, config, results);
    let _ = crate::json::write_results_block(console, config, context, results);
}

/// The indices of the devices to run, in "A, B" order; names that do not exist are reported.
fn select_devices(
    config: &Config,
    devices: &[&mut dyn BlockDevice],
    say: &mut dyn FnMut(String),
) -> Vec<usize> {
    match &config.devices {
        DeviceSelection::All => (0..devices.len()).collect(),
        DeviceSelection::Named(names) => names
            .iter()
            .filter_map(|name| {
                let found = devices.iter().position(|device| device.name() == name);
                if found.is_none() {
                    let available: Vec<&str> = devices.iter().map(|d| d.name()).collect();
                    say(format!(
                        "devices={name}: no such device (found: {}); skipped",
                        if available.is_empty() { String::from("none") } else { available.join(", ") }
                    ));
                }
                found
            })
            .collect(),
    }
}

/// Checks that the buffer area holds at least one block, and says when requests must share.
fn check_buffer(
    plan: &DevicePlan,
    buffer_area: &DmaBuffer,
    device_name: &str,
    notes: &mut Vec<String>,
) -> Result<DevicePlan, PlanError> {
    let buffers = buffer_area.length_bytes as u64 / plan.block_bytes;
    if buffers == 0 {
        return Err(PlanError::BufferTooSmall {
            buffer_bytes: buffer_area.length_bytes,
            block_bytes: plan.block_bytes,
        });
    }
    if buffers < u64::from(plan.queue_depth) {
        notes.push(format!(
            "{device_name}: requests share {buffers} buffers of {} (the buffer area is {} bytes; \
             queue depth {} × {} would need {}); reads only, so this does not change what is \
             measured",
            SizeText(plan.block_bytes),
            buffer_area.length_bytes,
            plan.queue_depth,
            SizeText(plan.block_bytes),
            u64::from(plan.queue_depth) * plan.block_bytes
        ));
    }
    Ok(*plan)
}

/// One run of one job on one device.
#[allow(clippy::too_many_arguments)]
fn run_once(
    device: &mut dyn BlockDevice,
    clock: &dyn Clock,
    config: &Config,
    plan: &DevicePlan,
    label: &RunLabel<'_>,
    buffer_area: &DmaBuffer,
    scratch: &mut Scratch,
    measurements: &mut Measurements,
    console: &mut dyn fmt::Write,
) -> RunResult {
    let device_name = device.name().to_string();
    report::print_run_header(console, label.job, plan, &device_name, label.run, label.runs, config);

    let geometry = device.geometry();
    let logical_block_bytes = u64::from(geometry.logical_block_bytes);
    let queue_depth = plan.queue_depth as usize;
    let buffer_count = (buffer_area.length_bytes as u64 / plan.block_bytes).max(1);
    let pattern =
        if label.job.operation.is_random() { AccessPattern::Random } else { AccessPattern::Sequential };
    let mut offsets = OffsetGenerator::new(
        pattern,
        plan.region_offset_bytes,
        plan.block_bytes,
        plan.block_slots,
        label.seed,
    );
    let converter = TickConverter { ticks_per_second: clock.ticks_per_second() };
    scratch.reset(queue_depth);
    measurements.reset();

    let ramp_ticks = clock.ns_to_ticks(config.ramp_ns);
    let window_ticks = clock.ns_to_ticks(config.runtime_ns);
    let progress_interval_ticks = clock.ns_to_ticks(PROGRESS_INTERVAL_NS);
    let drain_ticks = clock.ns_to_ticks(DRAIN_TIMEOUT_NS);
    let mut progress = report::ProgressLine::new(
        &device_name,
        label.job,
        plan,
        label.run,
        label.runs,
        config.ramp_ns + config.runtime_ns,
        config.progress,
    );

    let start = clock.now_ticks();
    let ramp_end = start + ramp_ticks;
    let window_end = ramp_end + window_ticks;
    let drain_deadline = window_end + drain_ticks;
    let mut next_progress = start + progress_interval_ticks;

    let mut in_flight: usize = 0;
    let mut completed: u64 = 0;
    let mut unknown_completions: u64 = 0;
    let mut held_back: Option<Request> = None;
    let mut submitting = true;
    let mut ended_early: Option<RunEnd> = None;
    let mut notes: Vec<String> = Vec::new();
    let mut last_reading = start;
    let mut identical_readings: u64 = 0;

    loop {
        let now = clock.now_ticks();
        if now == last_reading {
            identical_readings += 1;
            if identical_readings >= STALLED_CLOCK_READINGS {
                ended_early = Some(RunEnd::ClockStalled { ticks: now });
                progress.interrupt(console);
                let message = format!(
                    "the timer stopped at tick {now} ({identical_readings} identical readings); \
                     the benchmark stops here"
                );
                let _ = writeln!(console, "{message}");
                notes.push(message);
                break;
            }
        } else {
            last_reading = now;
            identical_readings = 0;
        }
        if submitting && now >= window_end {
            submitting = false;
        }
        if submitting {
            scratch.batch.clear();
            while in_flight < queue_depth {
                let request = match held_back.take() {
                    Some(request) => request,
                    None => {
                        let Some(tag) = scratch.free_tags.pop() else {
                            break;
                        };
                        let offset_bytes = offsets.next_offset_bytes();
                        let buffer_offset = (u64::from(tag) % buffer_count) * plan.block_bytes;
                        Request {
                            tag,
                            operation: Operation::Read,
                            lba: offset_bytes / logical_block_bytes,
                            block_count: plan.blocks_per_request,
                            buffer: DmaBuffer {
                                cpu_address: buffer_area.cpu_address + buffer_offset as usize,
                                physical_address: buffer_area.physical_address + buffer_offset,
                                length_bytes: plan.block_bytes as usize,
                            },
                        }
                    }
                };
                let submitted_at = clock.now_ticks();
                match device.submit(request) {
                    Ok(()) => {
                        let tag = request.tag as usize;
                        scratch.submitted_at_ticks[tag] = submitted_at;
                        scratch.tag_in_flight[tag] = true;
                        scratch.batch.push(request.tag);
                        in_flight += 1;
                    }
                    Err((request, SubmitError::QueueFull)) if in_flight > 0 => {
                        held_back = Some(request);
                        break;
                    }
                    Err((request, error)) => {
                        scratch.free_tags.push(request.tag);
                        ended_early = Some(RunEnd::SubmitRefused { error, lba: request.lba });
                        let message = format!(
                            "{device_name}: request for {} blocks at LBA {} refused ({}); this \
                             run ends here for {device_name}",
                            request.block_count,
                            request.lba,
                            error.name()
                        );
                        progress.interrupt(console);
                        let _ = writeln!(console, "{message}");
                        notes.push(message);
                        submitting = false;
                        break;
                    }
                }
            }
            if !scratch.batch.is_empty() {
                device.kick();
                let kicked_at = clock.now_ticks();
                for &tag in &scratch.batch {
                    scratch.kicked_at_ticks[tag as usize] = kicked_at;
                }
            }
        }
        if !submitting && in_flight == 0 {
            break;
        }

        let count = device.poll(&mut scratch.completions[..queue_depth]);
        if count > 0 {
            let done = clock.now_ticks();
            let inside_window = done >= ramp_end && done < window_end;
            for completion in &scratch.completions[..count] {
                let tag = completion.tag as usize;
                if tag >= queue_depth || !scratch.tag_in_flight[tag] {
                    unknown_completions += 1;
                    continue;
                }
                scratch.tag_in_flight[tag] = false;
                scratch.free_tags.push(completion.tag);
                in_flight -= 1;
                completed += 1;
                if !inside_window {
                    continue;
                }
                match completion.result {
                    Ok(()) => {
                        let submitted = scratch.submitted_at_ticks[tag];
                        let kicked = scratch.kicked_at_ticks[tag];
                        let lat_ns = converter.ns(done.saturating_sub(submitted));
                        let clat_ns = converter.ns(done.saturating_sub(kicked));
                        measurements.lat.record(lat_ns);
                        measurements.lat_histogram.record(lat_ns);
                        measurements.clat.record(clat_ns);
                        measurements.clat_histogram.record(clat_ns);
                        measurements.slat.record(converter.ns(kicked.saturating_sub(submitted)));
                        measurements.ios += 1;
                    }
                    Err(error) => measurements.errors[error.kind.index()] += 1,
                }
            }
        }

        if now >= next_progress {
            progress.update(console, converter.ns(now - start), completed);
            next_progress = now + progress_interval_ticks;
        }
        if !submitting && now >= drain_deadline {
            ended_early = Some(RunEnd::DrainTimeout {
                in_flight: in_flight as u32,
                waited_ns: converter.ns(now - window_end),
            });
            progress.interrupt(console);
            let message = format!(
                "{device_name}: {in_flight} requests still in flight {} s after the window; \
                 {device_name} is not used again",
                DRAIN_TIMEOUT_NS / NS_PER_S
            );
            let _ = writeln!(console, "{message}");
            notes.push(message);
            break;
        }
    }
    let end = clock.now_ticks();
    progress.finish(console, converter.ns(end.saturating_sub(start)), completed);

    if unknown_completions > 0 {
        let message = format!(
            "{device_name}: {unknown_completions} completions carried a tag that was not in \
             flight; ignored"
        );
        let _ = writeln!(console, "{message}");
        notes.push(message);
    }
    if measurements.ios == 0 {
        let errors: u64 = measurements.errors.iter().sum();
        let message = format!(
            "{device_name}: no I/O completed successfully in the measured window ({errors} \
             failed); its figures are zero"
        );
        let _ = writeln!(console, "{message}");
        notes.push(message);
    }

    let mut clat_percentiles_ns = [0u64; FIO_DEFAULT_PERCENTILES.len()];
    let mut lat_percentiles_ns = [0u64; FIO_DEFAULT_PERCENTILES.len()];
    measurements.clat_histogram.percentiles_ns(&FIO_DEFAULT_PERCENTILES, &mut clat_percentiles_ns);
    measurements.lat_histogram.percentiles_ns(&FIO_DEFAULT_PERCENTILES, &mut lat_percentiles_ns);
    RunResult {
        job_index: label.job_index,
        job: *label.job,
        device_index: label.device_index,
        device_name,
        run: label.run,
        block_bytes: plan.block_bytes,
        queue_depth: plan.queue_depth,
        region_offset_bytes: plan.region_offset_bytes,
        region_size_bytes: plan.region_size_bytes,
        seed: label.seed,
        ramp_ns: converter.ns(ramp_ticks),
        window_ns: converter.ns(window_ticks),
        ios: measurements.ios,
        bytes: measurements.ios * plan.block_bytes,
        slat: measurements.slat.summary(),
        clat: measurements.clat.summary(),
        lat: measurements.lat.summary(),
        clat_percentiles_ns,
        lat_percentiles_ns,
        errors: measurements.errors,
        ended_early,
        notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmdline::{JobOperation, Preset};
    use crate::sim::{SimBehaviour, SimClock, SimDevice};
    use core::cell::RefCell;
    use std::string::String;
    use std::vec;

    const GHZ: u64 = 1_000_000_000;
    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;

    fn nvme_geometry() -> Geometry {
        Geometry {
            logical_block_bytes: 512,
            block_count: 8 << 21, // 8 GiB
            max_request_blocks: 256,
            max_in_flight: 63,
        }
    }

    fn sd_geometry() -> Geometry {
        Geometry {
            logical_block_bytes: 512,
            block_count: 1 << 21, // 1 GiB
            max_request_blocks: 65_535,
            max_in_flight: 1,
        }
    }

    fn config(jobs: &[JobSpec], ramp_ns: u64, runtime_ns: u64, runs: u32) -> Config {
        let mut config = Config::for_preset(Preset::Reference);
        config.jobs = jobs.to_vec();
        config.ramp_ns = ramp_ns;
        config.runtime_ns = runtime_ns;
        config.runs = runs;
        config.offset_bytes = 0;
        config.size_bytes = 64 << 20;
        config
    }

    /// A buffer area the simulated devices never touch (addresses only).
    fn buffer_area(length_bytes: usize) -> DmaBuffer {
        DmaBuffer { cpu_address: 0x4000_0000, physical_address: 0x4000_0000, length_bytes }
    }

    fn run(
        config: &Config,
        devices: &mut [&mut dyn BlockDevice],
        clock: &SimClock,
        buffer_bytes: usize,
    ) -> (BenchmarkResults, String) {
        let mut console = String::new();
        let context = ReportContext {
            board: "simulated",
            timer_frequency_hz: clock.ticks_per_second(),
            extra: &[("cpu", "host")],
        };
        let results =
            run_benchmark(config, devices, clock, buffer_area(buffer_bytes), &context, &mut console);
        (results, console)
    }

    #[test]
    fn queue_depth_is_held_through_the_window() {
        let clock = SimClock::new(GHZ, 100);
        let mut behaviour = SimBehaviour::new(nvme_geometry(), 50 * US);
        behaviour.random_latency_ticks = 50 * US;
        let mut device = SimDevice::new("nvme0", behaviour, &clock);
        let job = JobSpec::new(JobOperation::RandRead, 4096, 8);
        let config = config(&[job], MS, 10 * MS, 1);
        let (results, _) = run(&config, &mut [&mut device], &clock, 1 << 20);

        let window_end = MS + 10 * MS; // the run starts at tick 0 at 1 GHz
        let in_window: Vec<&(u64, usize)> = device.polls.iter().filter(|(t, _)| *t < window_end).collect();
        assert!(in_window.len() > 100);
        assert!(in_window.iter().all(|&&(_, in_flight)| in_flight == 8));
        assert_eq!(device.max_in_flight_seen, 8);
        // After the window the queue drains and nothing new is submitted.
        assert_eq!(device.polls.last().map(|p| p.1), Some(1));
        assert!(device.accepted.iter().all(|r| r.operation == Operation::Read));
        let run = &results.runs[0];
        assert_eq!(run.queue_depth, 8);
        assert_eq!(run.window_ns, 10 * MS);
        // 8 in flight at 50..100 µs each: about 8 / 75 µs ≈ 107 000 IOPS.
        let iops = run.iops_micro() / 1_000_000;
        assert!((95_000..120_000).contains(&iops), "{iops}");
        assert!(run.lat.min_ns >= 50 * US && run.lat.max_ns <= 100 * US + 10 * US);
    }

    #[test]
    fn a_1_mhz_counter_gives_whole_microseconds_and_exact_statistics() {
        // The Pi 1 / Zero latency clock is the BCM2835 system timer: one tick is 1 µs
        // (docs/aarch32-pis.md §5). The clock moves only when the device completes, so I/O k of
        // this QD1 run completes at exactly k × 250 ticks.
        const MHZ: u64 = 1_000_000;
        let clock = SimClock::new(MHZ, 0);
        let mut device = SimDevice::new("sd0", SimBehaviour::new(nvme_geometry(), 250), &clock);
        let job = JobSpec::new(JobOperation::RandRead, 4096, 1);
        let config = config(&[job], MS, 100 * MS, 1);
        let (results, console) = run(&config, &mut [&mut device], &clock, 1 << 20);
        let first = &results.runs[0];
        assert_eq!((first.lat.min_ns, first.lat.max_ns), (250 * US, 250 * US));
        assert_eq!(first.lat.mean_milli_ns, u128::from(250 * US) * 1000);
        assert_eq!(first.lat.stddev_milli_ns, 0);
        assert!(first.lat_percentiles_ns.iter().all(|&p| p == 250 * US), "{:?}", first.lat_percentiles_ns);
        assert_eq!(first.window_ns, 100 * MS);
        assert_eq!(first.ios, 400);
        assert!(console.contains("\"timer_frequency_hz\" : 1000000"), "{console}");

        // Latencies spread over 100..=400 ticks: every figure a whole microsecond, the
        // percentiles ordered and inside the samples' range.
        let clock = SimClock::new(MHZ, 0);
        let mut behaviour = SimBehaviour::new(nvme_geometry(), 100);
        behaviour.random_latency_ticks = 300;
        let mut device = SimDevice::new("sd0", behaviour, &clock);
        let (results, _) = run(&config, &mut [&mut device], &clock, 1 << 20);
        let lat = &results.runs[0].lat;
        assert!(lat.min_ns >= 100 * US && lat.max_ns <= 400 * US, "{lat:?}");
        assert_eq!((lat.min_ns % US, lat.max_ns % US), (0, 0));
        let percentiles = &results.runs[0].lat_percentiles_ns;
        assert!(percentiles.windows(2).all(|pair| pair[0] <= pair[1]), "{percentiles:?}");
        assert!(percentiles.iter().all(|&p| lat.min_ns <= p && p <= lat.max_ns), "{percentiles:?}");
        let mean_ns = (lat.mean_milli_ns / 1000) as u64;
        assert!((200 * US..=300 * US).contains(&mean_ns), "{mean_ns}");
    }

    #[test]
    fn ramp_is_excluded_and_in_flight_io_at_the_boundary_counts() {
        // Clock advances only when the device jumps it to the next completion: I/O k of a
        // queue-depth-1 run completes at exactly k × 30 µs.
        let clock = SimClock::new(GHZ, 0);
        let mut device = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 30 * US), &clock);
        let job = JobSpec::new(JobOperation::Read, 4096, 1);
        // Window [45 µs, 135 µs): completions at 60, 90, 120 count; the one at 60 µs was
        // submitted at 30 µs, during the ramp, and counts with its whole 30 µs.
        let config = config(&[job], 45 * US, 90 * US, 1);
        let (results, _) = run(&config, &mut [&mut device], &clock, 1 << 20);
        let run = &results.runs[0];
        assert_eq!(run.ios, 3);
        assert_eq!(run.bytes, 3 * 4096);
        assert_eq!(run.window_ns, 90 * US);
        assert_eq!(run.ramp_ns, 45 * US);
        assert_eq!((run.lat.min_ns, run.lat.max_ns), (30 * US, 30 * US));
        // The bucket [29 952, 30 208) has midpoint 30 080, clamped to the largest sample seen.
        assert_eq!(run.lat_percentiles_ns[crate::histogram::P99_INDEX], 30_000);
        // 3 I/Os in 90 µs.
        assert_eq!(run.iops_micro(), 33_333_333_333);
        // The completion at 135 µs (the window's end) is outside it, and one more was in
        // flight when submission stopped: 5 requests in all (at 0, 30, 60, 90, 120 µs).
        assert_eq!(device.accepted.len(), 5);
        // Sequential reads walk the region from its start.
        let lbas: Vec<u64> = device.accepted.iter().map(|r| r.lba).collect();
        assert_eq!(lbas, vec![0, 8, 16, 24, 32]);
    }

    #[test]
    fn without_ramp_the_window_starts_at_once_and_its_end_is_exclusive() {
        let clock = SimClock::new(GHZ, 0);
        let mut device = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 10 * US), &clock);
        let job = JobSpec::new(JobOperation::RandRead, 4096, 4);
        let config = config(&[job], 0, 100 * US, 1);
        let (results, _) = run(&config, &mut [&mut device], &clock, 1 << 20);
        // Batches of 4 complete at 10, 20, …, 90 µs; the batch at 100 µs is outside.
        assert_eq!(results.runs[0].ios, 36);
    }

    #[test]
    fn devices_alternate_order_between_runs() {
        let clock = SimClock::new(GHZ, 50);
        let log = RefCell::new(Vec::new());
        let mut nvme =
            SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 20 * US), &clock).with_order_log(&log);
        let mut sd =
            SimDevice::new("sd0", SimBehaviour::new(sd_geometry(), 200 * US), &clock).with_order_log(&log);
        let job = JobSpec::new(JobOperation::RandRead, 4096, 4);
        let config = config(&[job], MS, 5 * MS, 4);
        let (results, _) = run(&config, &mut [&mut nvme, &mut sd], &clock, 1 << 20);
        let order: Vec<(&str, u32)> = results.runs.iter().map(|r| (r.device_name.as_str(), r.run)).collect();
        assert_eq!(
            order,
            vec![
                ("nvme0", 1),
                ("sd0", 1),
                ("sd0", 2),
                ("nvme0", 2),
                ("nvme0", 3),
                ("sd0", 3),
                ("sd0", 4),
                ("nvme0", 4)
            ]
        );
        // What the devices saw: consecutive runs on the same device merge in the log.
        assert_eq!(*log.borrow(), vec!["nvme0", "sd0", "nvme0", "sd0", "nvme0"]);
        assert_eq!(results.device_names, vec!["nvme0", "sd0"]);
    }

    /// The runs of a job on a device whose latency is 2000 ticks plus a seeded random part, and
    /// their medians, for checking against values worked out by hand.
    fn seeded_runs(runs: u32) -> (Vec<RunResult>, MedianResult) {
        let clock = SimClock::new(54_000_000, 3);
        let mut behaviour = SimBehaviour::new(nvme_geometry(), 2_000);
        behaviour.random_latency_ticks = 4_000;
        let mut device = SimDevice::new("nvme0", behaviour, &clock);
        let job = JobSpec::new(JobOperation::RandRead, 4096, 2);
        let config = config(&[job], MS, 3 * MS, runs);
        let (results, _) = run(&config, &mut [&mut device], &clock, 1 << 20);
        assert_eq!(results.medians.len(), 1);
        (results.runs, results.medians[0].clone())
    }

    fn column(runs: &[RunResult], value: impl Fn(&RunResult) -> u128) -> Vec<u128> {
        runs.iter().map(value).collect()
    }

    #[test]
    fn the_median_of_three_runs_is_the_middle_value_of_each_metric() {
        let (runs, median) = seeded_runs(3);
        // What the three runs measured (IOPS and bytes/s × 10^6, latencies in thousandths of a ns).
        assert_eq!(column(&runs, |r| r.iops_micro()), [26_333_333_333, 27_333_333_333, 28_000_000_000]);
        assert_eq!(
            column(&runs, |r| r.bandwidth_micro()),
            [107_861_333_333_333, 111_957_333_333_333, 114_688_000_000_000]
        );
        assert_eq!(column(&runs, |r| r.lat.mean_milli_ns), [75_285_886, 73_528_427, 71_723_107]);
        assert_eq!(column(&runs, |r| r.clat.mean_milli_ns), [75_230_456, 73_472_817, 71_667_488]);
        assert_eq!(column(&runs, |r| u128::from(r.lat.max_ns)), [110_092, 109_981, 110_222]);
        // Worked out by hand: the middle of each column once sorted, from whichever run it comes.
        assert_eq!(median.runs, 3);
        assert_eq!(median.iops_micro, 27_333_333_333);
        assert_eq!(median.bandwidth_micro, 111_957_333_333_333);
        assert_eq!(median.lat_mean_milli_ns, 73_528_427);
        assert_eq!(median.clat_mean_milli_ns, 73_472_817);
        // 109 981 < 110 092 < 110 222: run 1's maximum, although run 2 has the middle mean.
        assert_eq!(median.lat_max_milli_ns, 110_092_000);
    }

    #[test]
    fn the_median_of_four_runs_is_the_mean_of_the_two_middle_values_rounded_half_up() {
        let (runs, median) = seeded_runs(4);
        assert_eq!(
            column(&runs, |r| r.iops_micro()),
            [26_333_333_333, 27_333_333_333, 28_000_000_000, 26_666_666_666]
        );
        assert_eq!(column(&runs, |r| r.clat.mean_milli_ns), [75_230_456, 73_472_817, 71_667_488, 74_785_588]);
        assert_eq!(column(&runs, |r| u128::from(r.lat.max_ns)), [110_092, 109_981, 110_222, 110_777]);
        assert_eq!(median.runs, 4);
        // (26 666 666 666 + 27 333 333 333) / 2 = 26 999 999 999.5 → 27 000 000 000.
        assert_eq!(median.iops_micro, 27_000_000_000);
        // (73 472 817 + 74 785 588) / 2 = 74 129 202.5 → 74 129 203.
        assert_eq!(median.clat_mean_milli_ns, 74_129_203);
        // (110 092 + 110 222) / 2 = 110 157 ns.
        assert_eq!(median.lat_max_milli_ns, 110_157_000);
    }

    #[test]
    fn errors_are_counted_by_kind_and_do_not_stop_the_run() {
        let clock = SimClock::new(GHZ, 10);
        let mut behaviour = SimBehaviour::new(nvme_geometry(), 20 * US);
        behaviour.error_every = Some((10, IoErrorKind::Crc));
        let mut device = SimDevice::new("nvme0", behaviour, &clock);
        let job = JobSpec::new(JobOperation::RandRead, 4096, 4);
        let config = config(&[job], MS, 4 * MS, 1);
        let (results, console) = run(&config, &mut [&mut device], &clock, 1 << 20);
        let run = &results.runs[0];
        let crc = run.errors[IoErrorKind::Crc.index()];
        assert!(crc > 0);
        assert_eq!(run.errors_total(), crc);
        assert!(run.ios >= 8 * crc && run.ios <= 10 * crc, "{} ios, {crc} errors", run.ios);
        assert!(run.ended_early.is_none());
        assert!(console.contains("\"crc\" : "));
    }

    #[test]
    fn a_device_where_everything_fails_reports_zeros_and_says_so() {
        let clock = SimClock::new(GHZ, 10);
        let mut behaviour = SimBehaviour::new(sd_geometry(), 100 * US);
        behaviour.error_every = Some((1, IoErrorKind::Timeout));
        let mut device = SimDevice::new("sd0", behaviour, &clock);
        let job = JobSpec::new(JobOperation::RandRead, 4096, 1);
        let config = config(&[job], MS, 4 * MS, 1);
        let (results, console) = run(&config, &mut [&mut device], &clock, 1 << 20);
        let run = &results.runs[0];
        assert_eq!((run.ios, run.iops_micro(), run.bandwidth_micro()), (0, 0, 0));
        assert_eq!(run.lat, crate::stats::LatencySummary::default());
        assert!(run.errors[IoErrorKind::Timeout.index()] >= 39);
        assert!(console.contains("sd0: no I/O completed successfully in the measured window"));
        assert_eq!(results.medians[0].iops_micro, 0);
        assert!(console.contains("\"N\" : 0"));
    }

    #[test]
    fn a_submit_refusal_ends_that_run_for_that_device_only() {
        let clock = SimClock::new(GHZ, 10);
        let mut behaviour = SimBehaviour::new(nvme_geometry(), 20 * US);
        behaviour.refuse_after = Some((5, SubmitError::OutOfRange));
        let mut refusing = SimDevice::new("nvme0", behaviour, &clock);
        let mut sd = SimDevice::new("sd0", SimBehaviour::new(sd_geometry(), 100 * US), &clock);
        let job = JobSpec::new(JobOperation::RandRead, 4096, 4);
        let config = config(&[job], MS, 4 * MS, 2);
        let (results, console) = run(&config, &mut [&mut refusing, &mut sd], &clock, 1 << 20);
        assert_eq!(results.runs.len(), 4);
        let nvme_runs: Vec<&RunResult> = results.runs.iter().filter(|r| r.device_name == "nvme0").collect();
        for run in &nvme_runs {
            assert!(matches!(
                run.ended_early,
                Some(RunEnd::SubmitRefused { error: SubmitError::OutOfRange, .. })
            ));
        }
        assert!(console.contains("refused (beyond the end of the device); this run ends here"));
        assert!(results
            .runs
            .iter()
            .filter(|r| r.device_name == "sd0")
            .all(|r| r.ios > 0 && r.ended_early.is_none()));
        assert_eq!(refusing.accepted.len(), 5);
        assert!(console.contains("\"error\" : 5"));
    }

    #[test]
    fn a_device_that_never_completes_is_dropped_after_the_drain_timeout() {
        let clock = SimClock::new(GHZ, 1_000);
        let mut behaviour = SimBehaviour::new(nvme_geometry(), 20 * US);
        behaviour.stall_after = Some(3);
        let mut stalling = SimDevice::new("nvme0", behaviour, &clock);
        let job = JobSpec::new(JobOperation::RandRead, 4096, 2);
        let config = config(&[job, job], MS, 2 * MS, 2);
        let (results, console) = run(&config, &mut [&mut stalling], &clock, 1 << 20);
        assert_eq!(results.runs.len(), 1);
        assert!(matches!(
            results.runs[0].ended_early,
            Some(RunEnd::DrainTimeout { in_flight: 2, waited_ns }) if waited_ns >= DRAIN_TIMEOUT_NS
        ));
        assert!(console.contains("nvme0: 2 requests still in flight 10 s after the window"));
    }

    #[test]
    fn jobs_are_adapted_to_each_device_with_a_message() {
        let config = config(&[], 0, MS, 1);
        let mut notes = Vec::new();
        let sd_job = JobSpec::new(JobOperation::RandRead, 4096, 32);
        let plan = plan_job(&sd_job, &config, &sd_geometry(), "sd0", &mut notes).unwrap();
        assert_eq!(plan.queue_depth, 1);
        assert_eq!(
            notes,
            vec![String::from(
                "sd0 has no command queueing (one request in flight): running at queue depth 1 \
                 instead of 32"
            )]
        );

        notes.clear();
        let big = JobSpec::new(JobOperation::Read, 1 << 20, 100);
        let plan = plan_job(&big, &config, &nvme_geometry(), "nvme0", &mut notes).unwrap();
        assert_eq!((plan.block_bytes, plan.blocks_per_request), (128 << 10, 256));
        assert_eq!(plan.queue_depth, 63);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("more than one request may carry (128k = 256 blocks"));
        assert!(notes[1].contains("queue depth 100 is more than the 63 requests"));

        notes.clear();
        let mut four_k = nvme_geometry();
        four_k.logical_block_bytes = 4096;
        let small = JobSpec::new(JobOperation::RandRead, 512, 1);
        let plan = plan_job(&small, &config, &four_k, "nvme1", &mut notes).unwrap();
        assert_eq!((plan.block_bytes, plan.blocks_per_request), (4096, 1));
        assert!(notes[0].contains("block size 512 is not a multiple of its 4096-byte"));

        // The reference region (2 GiB at 1 GiB) on a 1 GiB card: the whole card.
        notes.clear();
        let reference = Config::default();
        let plan = plan_job(&sd_job, &reference, &sd_geometry(), "sd0", &mut notes).unwrap();
        assert_eq!((plan.region_offset_bytes, plan.region_size_bytes), (0, 1 << 30));
        assert!(notes[1].contains("region 2g at 1g does not fit its 1g; using the whole device"));

        // 256 MiB at 900 MiB on a 1 GiB card: moved to end at the end of the card.
        notes.clear();
        let mut shifted = config.clone();
        shifted.offset_bytes = 900 << 20;
        shifted.size_bytes = 256 << 20;
        let plan = plan_job(&sd_job, &shifted, &sd_geometry(), "sd0", &mut notes).unwrap();
        assert_eq!(plan.region_offset_bytes, 768 << 20);
        assert_eq!(plan.block_slots, (256 << 20) / 4096);
        assert!(notes[1].contains("moved to start at 805306368 bytes"));

        // An unaligned region start is aligned up to the block size.
        notes.clear();
        let mut unaligned = config.clone();
        unaligned.offset_bytes = 1000;
        let plan = plan_job(&big, &unaligned, &nvme_geometry(), "nvme0", &mut notes).unwrap();
        assert_eq!(plan.region_offset_bytes, 128 << 10);
        assert!(notes.iter().any(|n| n.contains("region start 1000 aligned up to 131072")));

        // A region smaller than a block cannot run.
        let mut tiny = config.clone();
        tiny.size_bytes = 4096;
        let error = plan_job(&big, &tiny, &nvme_geometry(), "nvme0", &mut notes).unwrap_err();
        assert_eq!(
            error,
            PlanError::RegionTooSmall {
                region_offset_bytes: 0,
                region_size_bytes: 4096,
                block_bytes: 128 << 10
            }
        );
        assert!(error.to_string().contains("holds no whole block of 128k"));
        let broken = Geometry { max_in_flight: 0, ..nvme_geometry() };
        assert_eq!(
            plan_job(&big, &config, &broken, "x", &mut notes),
            Err(PlanError::NoRequests { max_request_blocks: 256, max_in_flight: 0 })
        );
        let empty = Geometry { block_count: 0, ..nvme_geometry() };
        assert!(matches!(
            plan_job(&big, &config, &empty, "x", &mut notes),
            Err(PlanError::NoBlocks { block_count: 0, .. })
        ));
    }

    #[test]
    fn random_offsets_stay_aligned_inside_the_region() {
        let clock = SimClock::new(GHZ, 10);
        let mut device = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 5 * US), &clock);
        let job = JobSpec::new(JobOperation::RandRead, 16 << 10, 8);
        let mut config = config(&[job], 0, 2 * MS, 1);
        config.offset_bytes = 3 << 30;
        config.size_bytes = 1 << 20;
        run(&config, &mut [&mut device], &clock, 1 << 20);
        assert!(device.accepted.len() > 1000);
        let mut slots_seen = [false; 64];
        for request in &device.accepted {
            let offset = request.lba * 512;
            assert!(offset >= 3 << 30 && offset + (16 << 10) <= (3 << 30) + (1 << 20));
            assert_eq!((offset - (3 << 30)) % (16 << 10), 0);
            assert_eq!(request.block_count, 32);
            slots_seen[((offset - (3 << 30)) / (16 << 10)) as usize] = true;
        }
        assert!(slots_seen.iter().all(|&seen| seen));
    }

    #[test]
    fn named_devices_run_in_the_given_order_and_missing_ones_are_reported() {
        let clock = SimClock::new(GHZ, 10);
        let mut nvme = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 20 * US), &clock);
        let mut sd = SimDevice::new("sd0", SimBehaviour::new(sd_geometry(), 100 * US), &clock);
        let job = JobSpec::new(JobOperation::RandRead, 4096, 1);
        let mut config = config(&[job], 0, MS, 1);
        config.devices = DeviceSelection::Named(vec!["sd0".into(), "usb0".into(), "nvme0".into()]);
        let (results, console) = run(&config, &mut [&mut nvme, &mut sd], &clock, 1 << 20);
        assert_eq!(results.device_names, vec!["sd0", "nvme0"]);
        assert_eq!(results.runs[0].device_name, "sd0");
        assert!(console.contains("devices=usb0: no such device (found: nvme0, sd0); skipped"));

        config.devices = DeviceSelection::Named(vec!["nvme0".into()]);
        let (results, _) = run(&config, &mut [&mut nvme, &mut sd], &clock, 1 << 20);
        assert_eq!(results.device_names, vec!["nvme0"]);
        assert_eq!(results.runs.len(), 1);
    }

    #[test]
    fn write_jobs_are_refused_and_nothing_is_written() {
        let clock = SimClock::new(GHZ, 10);
        let mut nvme = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 20 * US), &clock);
        let jobs = [
            JobSpec::new(JobOperation::Write, 4096, 1),
            JobSpec::new(JobOperation::RandWrite, 4096, 1),
            JobSpec::new(JobOperation::RandRead, 4096, 1),
        ];
        let config = config(&jobs, 0, MS, 1);
        let (results, console) = run(&config, &mut [&mut nvme], &clock, 1 << 20);
        assert!(console.contains(
            "job write:4k:1 skipped: writes are not enabled: barebench is read-only unless a \
             write region was made for it"
        ));
        assert!(console.contains("job randwrite:4k:1 skipped: writes are not enabled"));
        assert_eq!(results.runs.len(), 1);
        assert!(nvme.accepted.iter().all(|r| r.operation == Operation::Read));
    }

    #[test]
    fn a_small_buffer_area_is_shared_and_a_too_small_one_skips_the_job() {
        let clock = SimClock::new(GHZ, 10);
        let mut nvme = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 20 * US), &clock);
        let job = JobSpec::new(JobOperation::Read, 64 << 10, 16);
        let config = config(&[job], 0, MS, 1);
        let geometries = [nvme_geometry(), sd_geometry()];
        assert_eq!(buffer_bytes_needed(&config, &geometries), 16 * (64 << 10));
        assert_eq!(minimum_buffer_bytes(&config, &geometries), 64 << 10);

        let (results, console) = run(&config, &mut [&mut nvme], &clock, 4 * (64 << 10));
        assert!(console.contains("nvme0: requests share 4 buffers of 64k"));
        assert!(results.runs[0].ios > 0);
        for request in &nvme.accepted {
            let start = request.buffer.cpu_address - 0x4000_0000;
            assert!(start + request.buffer.length_bytes <= 4 * (64 << 10));
            assert_eq!(request.buffer.length_bytes, 64 << 10);
        }

        let (results, console) = run(&config, &mut [&mut nvme], &clock, 1000);
        assert!(results.runs.is_empty());
        assert!(console.contains(
            "job read:64k:16 skipped on nvme0: the buffer area of 1000 bytes cannot hold one \
             block of 64k"
        ));
    }

    #[test]
    fn a_driver_with_fewer_slots_than_it_advertises_is_retried_not_dropped() {
        let clock = SimClock::new(GHZ, 10);
        let mut behaviour = SimBehaviour::new(nvme_geometry(), 20 * US);
        behaviour.real_slots = Some(3);
        let mut nvme = SimDevice::new("nvme0", behaviour, &clock);
        let job = JobSpec::new(JobOperation::RandRead, 4096, 8);
        let config = config(&[job], 0, MS, 1);
        let (results, _) = run(&config, &mut [&mut nvme], &clock, 1 << 20);
        assert!(results.runs[0].ended_early.is_none());
        assert_eq!(nvme.max_in_flight_seen, 3);
        assert!(results.runs[0].ios > 100);
    }

    #[test]
    fn progress_is_rewritten_in_place_about_twice_a_second() {
        let clock = SimClock::new(GHZ, 1_000);
        let mut nvme = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 2 * MS), &clock);
        let job = JobSpec::new(JobOperation::RandRead, 4096, 1);
        let config = config(&[job], 500 * MS, 2_000 * MS, 1);
        let (_, console) = run(&config, &mut [&mut nvme], &clock, 1 << 20);
        let progress_start = console.find("\r  nvme0").unwrap();
        let progress_end = progress_start + console[progress_start..].find('\n').unwrap();
        let progress = &console[progress_start..progress_end];
        // 2.5 s at one update per 0.5 s, plus the final one.
        let updates = progress.matches('\r').count();
        assert!((5..=7).contains(&updates), "{updates} updates: {progress:?}");
        assert!(progress.ends_with("I/Os "));
        assert!(progress.contains("2.5 of 2.5 s") || progress.contains("2.6 of 2.5 s"));

        let mut quiet = config.clone();
        quiet.progress = false;
        let (_, console) = run(&quiet, &mut [&mut nvme], &clock, 1 << 20);
        assert!(!console.contains('\r'));
    }

    #[test]
    fn no_devices_and_a_dead_timer_still_produce_a_report() {
        let clock = SimClock::new(GHZ, 10);
        let config = config(&REFERENCE, 0, MS, 1);
        let (results, console) = run(&config, &mut [], &clock, 1 << 20);
        assert!(results.runs.is_empty());
        assert!(console.contains("no devices to run"));
        assert!(console.contains(crate::JSON_END_MARKER));

        let dead = SimClock::new(0, 10);
        let mut nvme = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 20 * US), &dead);
        let (results, console) = run(&config, &mut [&mut nvme], &dead, 1 << 20);
        assert!(results.runs.is_empty());
        assert!(console.contains("the timer reports a frequency of 0 Hz"));
    }

    #[test]
    fn a_stopped_timer_ends_the_benchmark_instead_of_hanging() {
        let clock = SimClock::frozen(GHZ);
        let mut nvme = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 20 * US), &clock);
        let mut sd = SimDevice::new("sd0", SimBehaviour::new(sd_geometry(), 20 * US), &clock);
        let job = JobSpec::new(JobOperation::RandRead, 4096, 1);
        let config = config(&[job, job], 0, MS, 2);
        let (results, console) = run(&config, &mut [&mut nvme, &mut sd], &clock, 1 << 20);
        assert_eq!(results.runs.len(), 1);
        assert_eq!(results.runs[0].ended_early, Some(RunEnd::ClockStalled { ticks: 0 }));
        assert!(console.contains("the timer stopped at tick 0"));
        assert!(console.contains(crate::JSON_END_MARKER));
        assert!(sd.accepted.is_empty());
    }

    const REFERENCE: [JobSpec; 3] = crate::cmdline::REFERENCE_JOBS;
}
