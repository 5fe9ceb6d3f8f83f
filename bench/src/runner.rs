//! The benchmark: every job on every selected device, `runs` times, device order alternating
//! between repetitions (odd repetitions take the devices in order, even ones in reverse), then
//! the medians, the summary and the JSON (docs/architecture.md "What is measured", "Output").
//!
//! One run is [`crate::run_loop`]'s business; this module plans each job per device, keeps the order,
//! drops a device that stops answering, and hands the results as data to [`crate::report`] and
//! [`crate::json`]. Per-tag arrays are allocated per job and the histograms once; nothing is
//! allocated per I/O.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use blockdev::BlockDevice;

use crate::console::{say, Console};
use crate::offsets::derived_seed;
use crate::plan::{fit_buffer, plan_job, DevicePlan};
use crate::report;
use crate::results::{medians_of, BenchmarkResults, ReportContext, RunEnd};
use crate::run_loop::DeviceRegion;
use crate::run_loop::{run_once, Measurements, RunLabel, Scratch};
use crate::settings::{Config, DeviceSelection, JobSpec};
use crate::trace::{NoTraceOutput, TraceOutput, TraceRing};
use crate::units::SizeText;
use crate::written::MAX_TRACKED_SLOTS;

pub use crate::run_loop::{RunEnvironment, DRAIN_TIMEOUT_NS, PROGRESS_INTERVAL_NS};
pub use crate::stall_watch::STALLED_CLOCK_READINGS;

/// Why a write or mixed job does not run on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WriteRefusal {
    /// `write=` does not name the device.
    #[error(
        "write= does not name it (write and mixed jobs need write=DEV and a marked scratch region; nothing was \
         written)"
    )]
    NotAllowed,
    /// The device has no valid scratch region.
    #[error(
        "it has no valid scratch region (mark a partition with `barebench scratch` or build the card with \
         `barebench image --scratch`; nothing was written)"
    )]
    NoRegion,
    /// The kernel gives the benchmark no CPU access to its buffers.
    #[error("this kernel gives the benchmark no access to its buffers")]
    NoBufferAccess,
}

/// Runs every job of `config` on the selected `devices` and prints the run lines, progress,
/// per-job tables with the CPU cost per I/O, the summary and the JSON block to `console`.
///
/// When the buffer area holds fewer than queue depth × block size bytes, requests share
/// buffers and a line says so. Console write errors are ignored: there is nowhere else to
/// report them.
pub fn run_benchmark(
    config: &Config,
    devices: &mut [&mut dyn BlockDevice],
    environment: &RunEnvironment<'_>,
    context: &ReportContext<'_>,
    console: &mut dyn Console,
) -> BenchmarkResults {
    run_benchmark_with_traces(config, devices, environment, context, console, &NoTraceOutput)
}

/// [`run_benchmark`], writing the `trace=` records of each traced run through `traces` after
/// the run (crate::trace).
pub fn run_benchmark_with_traces(
    config: &Config,
    devices: &mut [&mut dyn BlockDevice],
    environment: &RunEnvironment<'_>,
    context: &ReportContext<'_>,
    console: &mut dyn Console,
    traces: &dyn TraceOutput,
) -> BenchmarkResults {
    let counters = environment.cpu_counters;
    let mut results = BenchmarkResults {
        cycles_status: counters.cycles_status(),
        instructions_status: counters.instructions_status(),
        ..BenchmarkResults::default()
    };
    let selected = select_devices(config, devices, &mut |message| say(console, &mut results.notes, message));
    results.device_names = selected.iter().map(|&index| devices[index].name().to_string()).collect();
    report::print_start(console, config, &results.device_names);
    if let Some(source) = environment.conditions {
        results.conditions = Some(crate::conditions::start(source, console, &mut results.notes));
    }
    for warning in report::region_warnings(context, &results.device_names) {
        say(console, &mut results.notes, warning);
    }
    if environment.clock.ticks_per_second() == 0 {
        let message = String::from("the timer reports a frequency of 0 Hz; nothing can be measured");
        say(console, &mut results.notes, message);
    } else {
        let mut benchmark = Benchmark::new(config, devices, environment, &selected);
        benchmark.rings = allocate_rings(config, benchmark.devices, &selected, &mut |message| {
            say(console, &mut results.notes, message)
        });
        benchmark.trace_output = traces;
        for (job_index, job) in config.jobs.iter().enumerate() {
            if benchmark.clock_stalled {
                break;
            }
            if job.operation.is_stream() {
                benchmark.run_stream_job(job_index, job, &mut results, console);
                continue;
            }
            benchmark.run_job(job_index, job, &mut results, console);
        }
    }
    if let (Some(source), Some(conditions)) = (environment.conditions, results.conditions.as_mut()) {
        crate::conditions::finish(source, conditions, console);
    }
    results.medians = medians_of(&results.runs);
    report::print_summary(console, config, &results);
    crate::conditions_summary::print_summary(console, &results);
    let _ = crate::json::write_results_block(console, config, context, &results);
    results
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

/// A job's plan on one device, with the messages about it (they go into each run's notes).
struct PlannedDevice {
    plan: DevicePlan,
    notes: Vec<String>,
    /// The settings the runs use: for write and mixed jobs the region is the scratch region's.
    config: Config,
}

/// The state that lasts across jobs.
struct Benchmark<'b, 'd> {
    config: &'b Config,
    devices: &'b mut [&'d mut dyn BlockDevice],
    environment: &'b RunEnvironment<'b>,
    selected: &'b [usize],
    measurements: [Measurements; 2],
    /// Devices that kept requests in flight past the drain timeout: not used again.
    stuck: Vec<bool>,
    clock_stalled: bool,
    /// `trace=`: each device's ring (indexed like `devices`), allocated before the first run.
    rings: Vec<Option<TraceRing>>,
    trace_output: &'b dyn TraceOutput,
}

impl<'b, 'd> Benchmark<'b, 'd> {
    fn new(
        config: &'b Config,
        devices: &'b mut [&'d mut dyn BlockDevice],
        environment: &'b RunEnvironment<'b>,
        selected: &'b [usize],
    ) -> Self {
        let stuck = alloc::vec![false; devices.len()];
        Benchmark {
            config,
            devices,
            environment,
            selected,
            measurements: [Measurements::new(), Measurements::new()],
            stuck,
            clock_stalled: false,
            rings: Vec::new(),
            trace_output: &NoTraceOutput,
        }
    }

    /// Every run of one job, then its table.
    fn run_job(
        &mut self,
        job_index: usize,
        job: &JobSpec,
        results: &mut BenchmarkResults,
        console: &mut dyn Console,
    ) {
        report::print_job_header(console, job, job_index + 1, self.config.jobs.len());
        let plans = self.plan_devices(job, results, console);
        let deepest = plans.iter().flatten().map(|planned| planned.plan.queue_depth as usize).max();
        let Some(deepest) = deepest else {
            return;
        };
        let mut scratch = Scratch::new(deepest);
        if job.operation.is_write() {
            let slots = plans.iter().flatten().map(|planned| planned.plan.block_slots).max().unwrap_or(0);
            scratch.track_slots(slots);
        }
        let first_of_job = results.runs.len();
        let seed = derived_seed(self.config.seed, job_index as u64);
        for run in 1..=self.config.runs {
            for device_index in run_order(self.selected, run) {
                let Some(planned) = &plans[device_index] else {
                    continue;
                };
                if self.stuck[device_index] || self.clock_stalled {
                    continue;
                }
                let label = RunLabel { job_index, job, run, runs: self.config.runs, device_index, seed };
                let environment = self.environment;
                let source = environment.conditions;
                let cooldown = match (source, results.conditions.as_mut()) {
                    (Some(source), Some(conditions)) => {
                        crate::conditions::before_run(source, environment.clock, conditions, console)
                    }
                    _ => None,
                };
                let run_results = run_once(
                    &mut *self.devices[device_index],
                    environment,
                    (&planned.config, &planned.plan, &label),
                    (
                        &mut scratch,
                        &mut self.measurements,
                        self.rings.get_mut(device_index).and_then(Option::as_mut),
                    ),
                    console,
                );
                if let Some(Some(ring)) = self.rings.get(device_index) {
                    let run_name = format!("job{}-run{run}", job_index + 1);
                    let name = self.devices[device_index].name();
                    write_trace(console, self.trace_output, (name, &run_name), ring, self.environment);
                }
                let after = match (source, results.conditions.as_mut()) {
                    (Some(source), Some(conditions)) => crate::conditions::after_run(
                        source,
                        conditions,
                        format_args!(
                            "{} run {run}/{} of {job}",
                            self.devices[device_index].name(),
                            self.config.runs
                        ),
                        console,
                    ),
                    _ => None,
                };
                for mut result in run_results {
                    result.notes.splice(0..0, planned.notes.iter().cloned());
                    if let Some((reading, warning)) = &after {
                        result.conditions =
                            Some(crate::conditions::RunConditions { after: reading.clone(), cooldown });
                        result.notes.extend(warning.iter().cloned());
                    }
                    match result.ended_early {
                        Some(RunEnd::DrainTimeout { .. }) => self.stuck[device_index] = true,
                        Some(RunEnd::ClockStalled { .. }) => self.clock_stalled = true,
                        _ => {}
                    }
                    results.runs.push(result);
                }
            }
        }
        let job_runs = &results.runs[first_of_job..];
        let job_medians = medians_of(job_runs);
        report::print_job_table(console, job, job_runs, &job_medians, &results.device_names);
        report::print_cpu_cost(console, &job_medians, results);
        report::print_data_paths(console, &job_medians);
    }

    /// A scan, sustained write or hdparm job: on each selected device in turn, once
    /// (crate::stream_jobs); a device that stops answering is not used again.
    fn run_stream_job(
        &mut self,
        job_index: usize,
        job: &JobSpec,
        results: &mut BenchmarkResults,
        console: &mut dyn Console,
    ) {
        report::print_job_header(console, job, job_index + 1, self.config.jobs.len());
        for &device_index in self.selected {
            if self.stuck[device_index] || self.clock_stalled {
                continue;
            }
            let name = self.devices[device_index].name().to_string();
            let config = match self.job_config(job, &name) {
                Ok(config) => config,
                Err(refusal) => {
                    say(console, &mut results.notes, format!("job {job} skipped on {name}: {refusal}"));
                    continue;
                }
            };
            let label = crate::stream_plan::StreamLabel { job_index, job, device_index };
            let device = &mut *self.devices[device_index];
            match crate::stream_jobs::run_on_device(
                device,
                self.environment,
                &config,
                &label,
                results,
                console,
            ) {
                Some(RunEnd::DrainTimeout { .. }) => self.stuck[device_index] = true,
                Some(RunEnd::ClockStalled { .. }) => self.clock_stalled = true,
                _ => {}
            }
        }
    }

    /// The job's plan on each selected device (indexed like `devices`); the messages are printed.
    fn plan_devices(
        &self,
        job: &JobSpec,
        results: &mut BenchmarkResults,
        console: &mut dyn Console,
    ) -> Vec<Option<PlannedDevice>> {
        let mut plans: Vec<Option<PlannedDevice>> = (0..self.devices.len()).map(|_| None).collect();
        for &device_index in self.selected {
            let device = &self.devices[device_index];
            let mut notes = Vec::new();
            let config = match self.job_config(job, device.name()) {
                Ok(config) => config,
                Err(refusal) => {
                    let message = format!("job {job} skipped on {}: {refusal}", device.name());
                    say(console, &mut results.notes, message);
                    continue;
                }
            };
            let plan = plan_job(job, &config, &device.geometry(), device.name(), &mut notes)
                .and_then(|plan| fit_buffer(&plan, &self.environment.buffer_area, device.name(), &mut notes))
                .map(|plan| match job.operation.is_write() {
                    true => fit_write_plan(
                        plan,
                        self.environment.buffer_area.length_bytes,
                        device.name(),
                        &mut notes,
                    ),
                    false => plan,
                });
            let outside =
                plan.as_ref().is_ok_and(|plan| job.operation.is_write() && !inside_region(plan, &config));
            if outside {
                say(
                    console,
                    &mut results.notes,
                    format!("job {job} skipped on {}: its plan left the scratch region", device.name()),
                );
                continue;
            }
            for note in &notes {
                say(console, &mut results.notes, note.clone());
            }
            match plan {
                Ok(plan) => plans[device_index] = Some(PlannedDevice { plan, notes, config }),
                Err(reason) => say(
                    console,
                    &mut results.notes,
                    format!("job {job} skipped on {}: {reason}", device.name()),
                ),
            }
        }
        plans
    }
}

/// A ring for each selected device that `trace=` names; a name that is no selected device, or a
/// ring the heap cannot hold, is reported and the benchmark runs without it.
fn allocate_rings(
    config: &Config,
    devices: &[&mut dyn BlockDevice],
    selected: &[usize],
    say: &mut dyn FnMut(String),
) -> Vec<Option<TraceRing>> {
    let mut rings: Vec<Option<TraceRing>> = (0..devices.len()).map(|_| None).collect();
    for request in &config.traces {
        let found = selected.iter().copied().find(|&index| devices[index].name() == request.device);
        let Some(index) = found else {
            say(format!("trace={}: no such device among those measured; not traced", request.device));
            continue;
        };
        match TraceRing::allocate(request.keep) {
            Ok(ring) => rings[index] = Some(ring),
            Err(error) => say(format!("trace={}:{}: {error}; not traced", request.device, request.keep)),
        }
    }
    rings
}

/// A run's trace between its markers, then what it held and what recording cost per I/O.
fn write_trace(
    console: &mut dyn Console,
    output: &dyn TraceOutput,
    (device, run_name): (&str, &str),
    ring: &TraceRing,
    environment: &RunEnvironment<'_>,
) {
    let _ = writeln!(console, "{}", crate::trace::begin_marker(device, run_name));
    let trace = crate::trace::RunTrace {
        device,
        run_name,
        ticks_per_second: environment.clock.ticks_per_second(),
        ring,
    };
    output.write_records(console, &trace);
    let _ = writeln!(console, "{}", crate::trace::TRACE_END_MARKER);
    let counters = environment.cpu_counters;
    let cost = crate::trace::RecordingCostText {
        ring,
        cycles: counters.cycles_status(),
        instructions: counters.instructions_status(),
    };
    let _ = writeln!(
        console,
        "{device:<8} trace {run_name}: {} commands recorded, {} more not kept (ring of {}); {cost}",
        ring.records().len(),
        ring.not_kept(),
        ring.keep()
    );
}

impl Benchmark<'_, '_> {
    /// The settings a job runs with on a device: as configured for reads; for write and mixed
    /// jobs, only where both keys hold (`write=` names the device and it has a scratch region),
    /// with the region set to the scratch region's writable part (`size=` may shrink it).
    fn job_config(&self, job: &JobSpec, device_name: &str) -> Result<Config, WriteRefusal> {
        if !job.operation.is_write() {
            return Ok(self.config.clone());
        }
        if !self.config.write_devices.iter().any(|name| name == device_name) {
            return Err(WriteRefusal::NotAllowed);
        }
        let access = self.environment.writes.ok_or(WriteRefusal::NoBufferAccess)?;
        let region = region_of(access.regions, device_name).ok_or(WriteRefusal::NoRegion)?;
        let (offset_bytes, length_bytes) = region.writable();
        let mut config = self.config.clone();
        config.offset_bytes = offset_bytes;
        config.size_bytes = length_bytes.min(self.config.size_bytes);
        Ok(config)
    }
}

fn region_of(regions: &[DeviceRegion<'_>], device_name: &str) -> Option<blockdev::scratch::ScratchRegion> {
    regions.iter().find(|region| region.device_name == device_name).map(|region| region.region)
}

/// Whether the plan's region lies inside the configured (scratch) region: the last guard
/// before anything is written.
fn inside_region(plan: &DevicePlan, config: &Config) -> bool {
    let end = plan.region_offset_bytes.checked_add(plan.region_size_bytes);
    let allowed_end = config.offset_bytes.checked_add(config.size_bytes);
    plan.region_offset_bytes >= config.offset_bytes && end.is_some() && end <= allowed_end
}

/// A write plan keeps one buffer per request in flight (a shared buffer would mix two writes'
/// data) and tracks at most [`MAX_TRACKED_SLOTS`] slots.
fn fit_write_plan(
    mut plan: DevicePlan,
    buffer_bytes: usize,
    device_name: &str,
    notes: &mut Vec<String>,
) -> DevicePlan {
    let buffers = (buffer_bytes as u64 / plan.block_bytes).max(1);
    if buffers < u64::from(plan.queue_depth) {
        notes.push(format!(
            "{device_name}: queue depth {} needs {} buffers of {} and the buffer area holds {buffers}; \
             writing at queue depth {buffers} (requests in flight never share a buffer)",
            plan.queue_depth,
            plan.queue_depth,
            SizeText(plan.block_bytes)
        ));
        plan.queue_depth = buffers as u32;
    }
    if plan.block_slots > MAX_TRACKED_SLOTS {
        plan.block_slots = MAX_TRACKED_SLOTS;
        plan.region_size_bytes = MAX_TRACKED_SLOTS * plan.block_bytes;
        notes.push(format!(
            "{device_name}: the write region is cut to {} ({MAX_TRACKED_SLOTS} blocks of {}), the \
             most whose contents are tracked for verification",
            SizeText(plan.region_size_bytes),
            SizeText(plan.block_bytes)
        ));
    }
    plan
}

/// The devices in "A, B" order for odd runs and in reverse for even ones.
fn run_order(selected: &[usize], run: u32) -> Vec<usize> {
    if run % 2 == 1 {
        selected.to_vec()
    } else {
        selected.iter().rev().copied().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu_cost::NoCpuCounters;
    use crate::plan::tests::{nvme_geometry, sd_geometry};
    use crate::results::Direction;
    use crate::results::{MedianResult, RunResult};
    use crate::run_loop::WriteAccess;
    use crate::settings::{JobOperation, Preset};
    use crate::sim::{SimBehaviour, SimDevice, SimMedium, TestMemory};
    use blockdev::testing::SteppingClock;
    use blockdev::Request;
    use blockdev::{Clock, DmaBuffer, IoErrorKind, Operation, SubmitError};
    use core::cell::RefCell;
    use std::string::String;
    use std::vec;

    const GHZ: u64 = 1_000_000_000;
    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;

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
        clock: &SteppingClock,
        buffer_bytes: usize,
    ) -> (BenchmarkResults, String) {
        let mut console = String::new();
        let results = run_on(config, devices, clock, buffer_bytes, &mut console);
        (results, console)
    }

    /// The benchmark with a console of the test's choice and no CPU counters.
    fn run_on(
        config: &Config,
        devices: &mut [&mut dyn BlockDevice],
        clock: &SteppingClock,
        buffer_bytes: usize,
        console: &mut dyn Console,
    ) -> BenchmarkResults {
        let context = ReportContext {
            board: "simulated",
            timer_frequency_hz: clock.ticks_per_second(),
            extra: &[("cpu", "host")],
            device_facts: &[],
        };
        let counters = NoCpuCounters("host test");
        let environment = RunEnvironment {
            clock,
            cpu_counters: &counters,
            buffer_area: buffer_area(buffer_bytes),
            memory: None,
            writes: None,
            conditions: None,
        };
        run_benchmark(config, devices, &environment, &context, console)
    }

    #[test]
    fn queue_depth_is_held_through_the_window() {
        let clock = SteppingClock::new(GHZ, 100);
        let mut behaviour = SimBehaviour::new(nvme_geometry(), 50 * US);
        behaviour.random_latency_ticks = 50 * US;
        let mut device = SimDevice::new("nvme0", behaviour, &clock);
        let job = JobSpec::new(JobOperation::RandRead, 4096, 8);
        let config = config(&[job], MS, 10 * MS, 1);
        let (results, _) = run(&config, &mut [&mut device], &clock, 1 << 20);

        let window_end = MS + 10 * MS; // the run starts at tick 0 at 1 GHz
        let in_window: Vec<&(u64, usize)> = device.polls.iter().filter(|(t, _)| *t < window_end).collect();
        assert!(in_window.len() > 100);
        // Every poll but the first (before anything was submitted) sees the whole queue depth.
        assert_eq!(in_window[0].1, 0);
        assert!(in_window[1..].iter().all(|&&(_, in_flight)| in_flight == 8));
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
        let clock = SteppingClock::new(MHZ, 0);
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
        let clock = SteppingClock::new(MHZ, 0);
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
        let clock = SteppingClock::new(GHZ, 0);
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
    fn every_run_starts_from_zero() {
        // A device whose every read takes 30 µs, a clock that moves only with it: each of the
        // three runs sees exactly the same I/Os, so nothing may carry over from one to the next.
        let clock = SteppingClock::new(GHZ, 0);
        let mut device = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 30 * US), &clock);
        let job = JobSpec::new(JobOperation::Read, 4096, 2);
        let config = config(&[job], 45 * US, 900 * US, 3);
        let (results, _) = run(&config, &mut [&mut device], &clock, 1 << 20);
        let first = &results.runs[0];
        assert_eq!(first.ios, 60);
        for run in &results.runs[1..] {
            assert_eq!(
                (run.ios, run.lat, run.clat, run.slat, run.lat_percentiles_ns, run.errors, run.cpu),
                (
                    first.ios,
                    first.lat,
                    first.clat,
                    first.slat,
                    first.lat_percentiles_ns,
                    first.errors,
                    first.cpu
                )
            );
        }
    }

    #[test]
    fn without_ramp_the_window_starts_at_once_and_its_end_is_exclusive() {
        let clock = SteppingClock::new(GHZ, 0);
        let mut device = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 10 * US), &clock);
        let job = JobSpec::new(JobOperation::RandRead, 4096, 4);
        let config = config(&[job], 0, 100 * US, 1);
        let (results, _) = run(&config, &mut [&mut device], &clock, 1 << 20);
        // Batches of 4 complete at 10, 20, …, 90 µs; the batch at 100 µs is outside.
        assert_eq!(results.runs[0].ios, 36);
    }

    #[test]
    fn devices_alternate_order_between_runs() {
        let clock = SteppingClock::new(GHZ, 50);
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
        let clock = SteppingClock::new(54_000_000, 3);
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
        assert_eq!(column(&runs, |r| r.iops_micro()), [26_666_666_666, 27_333_333_333, 27_000_000_000]);
        assert_eq!(
            column(&runs, |r| r.bandwidth_micro()),
            [109_226_666_666_666, 111_957_333_333_333, 110_592_000_000_000]
        );
        assert_eq!(column(&runs, |r| r.lat.mean_milli_ns), [75_331_438, 73_765_780, 74_999_975]);
        assert_eq!(column(&runs, |r| r.clat.mean_milli_ns), [75_275_913, 73_710_195, 74_944_432]);
        assert_eq!(column(&runs, |r| u128::from(r.lat.max_ns)), [110_666, 109_981, 111_092]);
        // Worked out by hand: the middle of each column once sorted, from whichever run it comes.
        assert_eq!(median.runs, 3);
        assert_eq!(median.iops_micro, 27_000_000_000);
        assert_eq!(median.bandwidth_micro, 110_592_000_000_000);
        assert_eq!(median.lat_mean_milli_ns, 74_999_975);
        assert_eq!(median.clat_mean_milli_ns, 74_944_432);
        // 109 981 < 110 666 < 111 092: run 1's maximum, although run 3 has the middle mean.
        assert_eq!(median.lat_max_milli_ns, 110_666_000);
    }

    #[test]
    fn the_median_of_four_runs_is_the_mean_of_the_two_middle_values_rounded_half_up() {
        let (runs, median) = seeded_runs(4);
        assert_eq!(
            column(&runs, |r| r.iops_micro()),
            [26_666_666_666, 27_333_333_333, 27_000_000_000, 27_666_666_666]
        );
        assert_eq!(column(&runs, |r| r.clat.mean_milli_ns), [75_275_913, 73_710_195, 74_944_432, 71_419_867]);
        assert_eq!(column(&runs, |r| u128::from(r.lat.max_ns)), [110_666, 109_981, 111_092, 110_203]);
        assert_eq!(median.runs, 4);
        // (27 000 000 000 + 27 333 333 333) / 2 = 27 166 666 666.5 → 27 166 666 667.
        assert_eq!(median.iops_micro, 27_166_666_667);
        // (73 710 195 + 74 944 432) / 2 = 74 327 313.5 → 74 327 314.
        assert_eq!(median.clat_mean_milli_ns, 74_327_314);
        // (110 203 + 110 666) / 2 = 110 434.5 ns.
        assert_eq!(median.lat_max_milli_ns, 110_434_500);
    }

    #[test]
    fn errors_are_counted_by_kind_and_do_not_stop_the_run() {
        let clock = SteppingClock::new(GHZ, 10);
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
        // One completion in 10 fails, counted over the whole run (ramp 1 ms, window 4 ms); the
        // successes only inside the window.
        assert!(crc * 10 >= run.ios && crc * 10 <= 2 * run.ios, "{} ios, {crc} errors", run.ios);
        assert!(run.ended_early.is_none());
        assert!(console.contains("\"crc\" : "));
        // fio's continue_on_error keys: the count and the first failure's errno (EIO).
        assert!(console.contains(&format!("\"total_err\" : {crc},")), "{console}");
        assert!(console.contains("\"first_error\" : 5,"), "{console}");
        assert_eq!(run.first_error, Some(IoErrorKind::Crc));
        // The table's errors by kind, and the failures the driver did not describe, which
        // include those completed during the ramp and the drain.
        assert!(
            console.contains(&format!("nvme0    failed I/Os by kind, all runs: {crc} crc\n")),
            "{console}"
        );
        let unreported = console
            .split("nvme0: ... and ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|count| count.parse::<u64>().ok())
            .expect("the count of failures not described");
        assert!(unreported >= crc, "{unreported} not described, {crc} in the window");
    }

    #[test]
    fn runs_without_failures_say_nothing_about_them() {
        let clock = SteppingClock::new(GHZ, 10);
        let mut device = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 20 * US), &clock);
        let job = JobSpec::new(JobOperation::RandRead, 4096, 4);
        let config = config(&[job], MS, 4 * MS, 1);
        let (results, console) = run(&config, &mut [&mut device], &clock, 1 << 20);
        assert_eq!(results.runs[0].first_error, None);
        assert!(console.contains("\"total_err\" : 0,") && console.contains("\"first_error\" : 0,"));
        assert!(!console.contains("failed I/Os by kind") && !console.contains("more failed commands"));
    }

    #[test]
    fn a_device_where_everything_fails_reports_zeros_and_says_so() {
        let clock = SteppingClock::new(GHZ, 10);
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
        let clock = SteppingClock::new(GHZ, 10);
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
        let clock = SteppingClock::new(GHZ, 1_000);
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
        // The CPU cost is per completion: the requests sent less the two still in flight.
        assert_eq!(results.runs[0].cpu.ios, stalling.accepted.len() as u64 - 2);
    }

    #[test]
    fn random_offsets_stay_aligned_inside_the_region() {
        let clock = SteppingClock::new(GHZ, 10);
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
        let clock = SteppingClock::new(GHZ, 10);
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

    /// A 64 MiB device with a scratch region of 16 MiB at 8 MiB (writable from 9 MiB).
    fn scratch_region() -> DeviceRegion<'static> {
        use blockdev::scratch::{Partition, PartitionTable, ScratchRegion};
        let partition = Partition {
            number: 2,
            table: PartitionTable::Mbr { partition_type: 0xDA },
            first_lba: 16384,
            block_count: 32768,
        };
        let region =
            ScratchRegion { partition, start_bytes: 8 << 20, length_bytes: 16 << 20, region_id: 0x5EED };
        DeviceRegion { device_name: "nvme0", region }
    }

    fn small_geometry() -> blockdev::Geometry {
        blockdev::Geometry {
            logical_block_bytes: 512,
            block_count: 64 << 11,
            max_request_blocks: 256,
            max_in_flight: 63,
        }
    }

    /// The benchmark with CPU access to `memory` and the given scratch regions.
    fn run_writing(
        config: &Config,
        devices: &mut [&mut dyn BlockDevice],
        clock: &SteppingClock,
        memory: &TestMemory,
        regions: &[DeviceRegion<'_>],
    ) -> (BenchmarkResults, String) {
        let context = ReportContext {
            board: "simulated",
            timer_frequency_hz: clock.ticks_per_second(),
            extra: &[],
            device_facts: &[],
        };
        let counters = NoCpuCounters("host test");
        let writes = WriteAccess { memory, regions };
        let environment = RunEnvironment {
            clock,
            cpu_counters: &counters,
            buffer_area: memory.area(),
            memory: None,
            writes: Some(writes),
            conditions: None,
        };
        let mut console = String::new();
        let results = run_benchmark(config, devices, &environment, &context, &mut console);
        (results, console)
    }

    fn write_config(jobs: &[JobSpec]) -> Config {
        let mut config = config(jobs, MS, 20 * MS, 1);
        config.write_devices = vec!["nvme0".into()];
        config
    }

    #[test]
    fn write_jobs_without_write_setting_are_refused_and_nothing_is_written() {
        let clock = SteppingClock::new(GHZ, 10);
        let mut nvme = SimDevice::new("nvme0", SimBehaviour::new(small_geometry(), 20 * US), &clock);
        let jobs = [
            JobSpec::new(JobOperation::Write, 4096, 1),
            JobSpec::new(JobOperation::RandReadWrite, 4096, 1),
            JobSpec::new(JobOperation::RandRead, 4096, 1),
        ];
        let mut config = config(&jobs, 0, MS, 1);
        let memory = TestMemory::new(0x4000_0000, 1 << 20);
        let (results, console) = run_writing(&config, &mut [&mut nvme], &clock, &memory, &[scratch_region()]);
        assert!(
            console.contains(
                "job write:4k:1 skipped on nvme0: write= does not name it (write and mixed jobs need \
             write=DEV and a marked scratch region; nothing was written)"
            ),
            "{console}"
        );
        assert!(console.contains("job randrw:4k:1 skipped on nvme0: write= does not name it"));
        assert_eq!(results.runs.len(), 1, "the read job still ran");
        assert!(nvme.accepted.iter().all(|r| r.operation == Operation::Read));

        // write= names another device: still refused here.
        config.write_devices = vec!["sd0".into()];
        let (_, console) = run_writing(&config, &mut [&mut nvme], &clock, &memory, &[scratch_region()]);
        assert!(console.contains("job write:4k:1 skipped on nvme0: write= does not name it"));
        assert!(nvme.accepted.iter().all(|r| r.operation == Operation::Read));
    }

    #[test]
    fn write_jobs_on_a_device_without_a_region_are_refused() {
        let clock = SteppingClock::new(GHZ, 10);
        let mut nvme = SimDevice::new("nvme0", SimBehaviour::new(small_geometry(), 20 * US), &clock);
        let config = write_config(&[
            JobSpec::new(JobOperation::RandWrite, 4096, 4),
            JobSpec::new(JobOperation::Read, 4096, 1),
        ]);
        let memory = TestMemory::new(0x4000_0000, 1 << 20);
        let (results, console) = run_writing(&config, &mut [&mut nvme], &clock, &memory, &[]);
        assert!(
            console.contains("job randwrite:4k:4 skipped on nvme0: it has no valid scratch region"),
            "{console}"
        );
        assert_eq!(results.runs.len(), 1);
        assert!(nvme.accepted.iter().all(|r| r.operation == Operation::Read));
        // A kernel that gives no buffer access cannot write either.
        let (_, console) = run(&config, &mut [&mut nvme], &clock, 1 << 20);
        assert!(console
            .contains("job randwrite:4k:4 skipped on nvme0: this kernel gives the benchmark no access"));
        assert!(nvme.accepted.iter().all(|r| r.operation == Operation::Read));
    }

    /// The writes of every operation stay inside the region's writable part, and what they
    /// wrote reads back as written.
    #[test]
    fn writes_stay_in_the_scratch_region_and_verify() {
        for job in [
            JobSpec::new(JobOperation::Write, 4096, 8),
            JobSpec::new(JobOperation::RandWrite, 64 << 10, 8),
            JobSpec::new(JobOperation::ReadWrite, 4096, 4),
            JobSpec::new(JobOperation::RandReadWrite, 4096, 16).with_mix(75, 0),
        ] {
            let clock = SteppingClock::new(GHZ, 10);
            let memory = TestMemory::new(0x4000_0000, 2 << 20);
            let medium =
                SimMedium { memory: &memory, disk: RefCell::new(vec![0xA5; 64 << 20]), corrupt_lba: None };
            let behaviour = SimBehaviour::new(small_geometry(), 20 * US);
            let mut nvme = SimDevice::new("nvme0", behaviour, &clock).with_medium(&medium);
            let (results, console) =
                run_writing(&write_config(&[job]), &mut [&mut nvme], &clock, &memory, &[scratch_region()]);
            let writes: Vec<&Request> =
                nvme.accepted.iter().filter(|r| r.operation == Operation::Write).collect();
            assert!(writes.len() > 50, "{job}: {}", writes.len());
            for write in &writes {
                let (start, end) = (write.lba * 512, (write.lba + u64::from(write.block_count)) * 512);
                assert!(start >= 9 << 20 && end <= 24 << 20, "{job}: write at {start}..{end}");
            }
            let disk = medium.disk.borrow();
            assert!(disk[..9 << 20].iter().all(|&b| b == 0xA5), "{job}: before the writable part");
            assert!(disk[24 << 20..].iter().all(|&b| b == 0xA5), "{job}: after the region");
            let write_result = results.runs.iter().find(|r| r.direction == Direction::Write).unwrap();
            let verify = write_result.verify.as_ref().unwrap();
            assert_eq!((verify.mismatches, verify.read_errors), (0, 0), "{job}: {verify:?}");
            assert!(verify.blocks_checked > 0, "{job}");
            assert_eq!(write_result.scratch_region_id, Some(0x5EED));
            assert!(console.contains("nvme0: verify: "), "{console}");
            assert_eq!(results.runs.len(), if job.operation.is_mixed() { 2 } else { 1 }, "{job}");
        }
    }

    #[test]
    fn a_device_that_corrupts_a_block_fails_verification_by_lba() {
        let clock = SteppingClock::new(GHZ, 10);
        let memory = TestMemory::new(0x4000_0000, 1 << 20);
        let corrupt = (9 << 20) / 512 + 8 * 3; // the fourth 4 KiB block of the writable part
        let medium =
            SimMedium { memory: &memory, disk: RefCell::new(vec![0; 64 << 20]), corrupt_lba: Some(corrupt) };
        let mut nvme = SimDevice::new("nvme0", SimBehaviour::new(small_geometry(), 20 * US), &clock)
            .with_medium(&medium);
        let config = write_config(&[JobSpec::new(JobOperation::Write, 4096, 4)]);
        let (results, console) = run_writing(&config, &mut [&mut nvme], &clock, &memory, &[scratch_region()]);
        let verify = results.runs[0].verify.as_ref().unwrap();
        assert_eq!(verify.mismatches, 1, "{verify:?}");
        assert_eq!(verify.mismatch_lbas, vec![corrupt]);
        assert!(console.contains("nvme0: verify FAILED: 1 of"), "{console}");
        assert!(console.contains(&format!("(first at LBA [{corrupt}])")), "{console}");
    }

    #[test]
    fn mixed_jobs_read_their_share_and_check_what_they_read() {
        let clock = SteppingClock::new(GHZ, 10);
        let memory = TestMemory::new(0x4000_0000, 1 << 20);
        let medium = SimMedium { memory: &memory, disk: RefCell::new(vec![0; 64 << 20]), corrupt_lba: None };
        let mut nvme = SimDevice::new("nvme0", SimBehaviour::new(small_geometry(), 20 * US), &clock)
            .with_medium(&medium);
        let mut config = write_config(&[JobSpec::new(JobOperation::RandReadWrite, 4096, 8).with_mix(75, 0)]);
        config.size_bytes = 256 << 10; // 64 slots: reads often find blocks written earlier
        config.write_verify = true;
        let (results, _) = run_writing(&config, &mut [&mut nvme], &clock, &memory, &[scratch_region()]);
        let reads = nvme.accepted.iter().filter(|r| r.operation == Operation::Read).count() as f64;
        let writes = nvme.accepted.iter().filter(|r| r.operation == Operation::Write).count() as f64;
        let share = reads / (reads + writes);
        assert!((0.70..0.80).contains(&share), "{share}");
        let read = results.runs.iter().find(|r| r.direction == Direction::Read).unwrap();
        let write = results.runs.iter().find(|r| r.direction == Direction::Write).unwrap();
        assert!(read.ios > 0 && write.ios > 0);
        let verify = write.verify.as_ref().unwrap();
        // More checks than the 64 slots read back after the run: reads while measuring counted.
        assert!(verify.blocks_checked > 64, "{verify:?}");
        assert_eq!(verify.mismatches, 0);
        // No two requests were ever in flight on one slot: the medium's order is the table's.
        assert!(nvme
            .accepted
            .iter()
            .all(|r| r.lba * 512 >= 9 << 20 && (r.lba + 8) * 512 <= (9 << 20) + (256 << 10)));
    }

    #[test]
    fn a_mixed_run_is_one_fio_job_with_both_sections_and_the_write_facts() {
        let clock = SteppingClock::new(GHZ, 10);
        let memory = TestMemory::new(0x4000_0000, 1 << 20);
        let medium = SimMedium { memory: &memory, disk: RefCell::new(vec![0; 64 << 20]), corrupt_lba: None };
        let mut behaviour = SimBehaviour::new(small_geometry(), 20 * US);
        behaviour.flush_support = blockdev::FlushSupport::Command;
        behaviour.data_path = Some(("ADMA2 (32-bit)", None));
        let mut nvme = SimDevice::new("nvme0", behaviour, &clock).with_medium(&medium);
        let mut config =
            write_config(&[JobSpec::new(JobOperation::RandReadWrite, 16 << 10, 1).with_mix(60, 100)]);
        config.runs = 2;
        let (results, console) = run_writing(&config, &mut [&mut nvme], &clock, &memory, &[scratch_region()]);
        assert_eq!(results.runs.len(), 4, "a read and a write result per run");
        let json = crate::fio_json::extract_json_from_log(&console).unwrap();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        let jobs = value["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), 2, "one fio job per run");
        for job in jobs {
            assert!(job["read"]["total_ios"].as_u64().unwrap() > 0);
            assert!(job["write"]["total_ios"].as_u64().unwrap() > 0);
            assert_eq!(job["job options"]["rwmixread"], "60");
            assert_eq!(job["job options"]["fsync"], "100");
            assert_eq!(job["barebench"]["scratch_region_id"], "0x0000000000005eed");
            assert_eq!(job["barebench"]["verify"]["mismatches"], 0);
            assert!(job["barebench"]["flush"]["count"].as_u64().is_some());
            // fio's fsyncs: the flushes sent, with their latency.
            assert_eq!(job["sync"]["total_ios"], job["barebench"]["flush"]["count"]);
            assert!(job["write"]["clat_ns"]["percentile"]["99.000000"].as_u64().unwrap() > 0);
        }
        // The run's CPU cost and data path are one line each, not one per direction.
        for line in ["nvme0    cpu per I/O", "nvme0    data path: ADMA2"] {
            assert_eq!(console.lines().filter(|l| l.starts_with(line)).count(), 1, "{line}\n{console}");
        }
        assert_eq!(value["global options"]["readonly"], "0");
        let medians = value["barebench medians"].as_array().unwrap();
        let directions: Vec<&str> = medians.iter().map(|m| m["direction"].as_str().unwrap()).collect();
        assert_eq!(directions, ["read", "write"]);
        assert!(console.contains("randrw:16k:1:mix=60:flush=100 read"), "{console}");
        assert!(console.contains("randrw:16k:1:mix=60:flush=100 write"), "{console}");
    }

    #[test]
    fn flushes_are_sent_every_n_writes_or_counted_without_a_cache() {
        let clock = SteppingClock::new(GHZ, 10);
        let memory = TestMemory::new(0x4000_0000, 1 << 20);
        let mut behaviour = SimBehaviour::new(small_geometry(), 20 * US);
        behaviour.flush_support = blockdev::FlushSupport::Command;
        let mut nvme = SimDevice::new("nvme0", behaviour, &clock);
        let config = write_config(&[JobSpec::new(JobOperation::RandWrite, 4096, 1).with_mix(0, 10)]);
        let (results, console) = run_writing(&config, &mut [&mut nvme], &clock, &memory, &[scratch_region()]);
        let writes = nvme.accepted.iter().filter(|r| r.operation == Operation::Write).count();
        let flushes = nvme.accepted.iter().filter(|r| r.operation == Operation::Flush).count();
        assert!(writes > 100);
        assert_eq!(flushes, writes / 10, "one flush after every 10 writes");
        let flush = results.runs[0].flushes.unwrap();
        assert!(flush.sent && flush.count > 0 && flush.lat.samples == flush.count, "{flush:?}");
        assert!(console.contains("flushes/s"), "{console}");

        let mut no_cache = SimDevice::new("nvme0", SimBehaviour::new(small_geometry(), 20 * US), &clock);
        let (results, console) =
            run_writing(&config, &mut [&mut no_cache], &clock, &memory, &[scratch_region()]);
        assert!(no_cache.accepted.iter().all(|r| r.operation != Operation::Flush));
        let flush = results.runs[0].flushes.unwrap();
        assert!(!flush.sent && flush.count > 0 && flush.lat.samples == 0, "{flush:?}");
        assert!(console.contains("no cache to flush"), "{console}");
    }

    #[test]
    fn every_request_in_flight_reads_into_a_buffer_of_its_own() {
        let clock = SteppingClock::new(GHZ, 10);
        let mut nvme = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 20 * US), &clock);
        let job = JobSpec::new(JobOperation::RandRead, 16 << 10, 8);
        let config = config(&[job], 0, MS, 1);
        run(&config, &mut [&mut nvme], &clock, 8 * (16 << 10));
        let mut buffers_used = std::collections::BTreeSet::new();
        for request in &nvme.accepted {
            let buffer = request.buffer;
            let offset = buffer.cpu_address - 0x4000_0000;
            assert_eq!(offset % (16 << 10), 0, "{buffer:?}");
            assert!(offset + buffer.length_bytes <= 8 * (16 << 10), "{buffer:?}");
            assert_eq!(buffer.physical_address, buffer.cpu_address as u64, "the area is identity-mapped");
            // Tag k always reads into buffer k.
            assert_eq!(offset, request.tag as usize * (16 << 10), "{request:?}");
            buffers_used.insert(offset);
        }
        assert_eq!(buffers_used.len(), 8);
    }

    #[test]
    fn a_small_buffer_area_is_shared_and_a_too_small_one_skips_the_job() {
        let clock = SteppingClock::new(GHZ, 10);
        let mut nvme = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 20 * US), &clock);
        let job = JobSpec::new(JobOperation::Read, 64 << 10, 16);
        let config = config(&[job], 0, MS, 1);

        let (results, console) = run(&config, &mut [&mut nvme], &clock, 4 * (64 << 10));
        assert!(console.contains("nvme0: requests share 4 buffers of 64k"));
        assert!(results.runs[0].ios > 0);
        for request in &nvme.accepted {
            let start = request.buffer.cpu_address - 0x4000_0000;
            assert!(start + request.buffer.length_bytes <= 4 * (64 << 10));
            assert_eq!(request.buffer.length_bytes, 64 << 10);
            // Tags share the four buffers round robin.
            assert_eq!(start, (request.tag as usize % 4) * (64 << 10), "{request:?}");
        }

        let (results, console) = run(&config, &mut [&mut nvme], &clock, 1000);
        assert!(results.runs.is_empty());
        assert!(console.contains(
            "job read:64k:16 skipped on nvme0: the buffer area of 1000 bytes cannot hold one \
             block of 64k"
        ));
    }

    #[test]
    fn completions_for_tags_not_in_flight_are_counted_and_ignored() {
        let clock = SteppingClock::new(GHZ, 10);
        let mut behaviour = SimBehaviour::new(nvme_geometry(), 20 * US);
        behaviour.echo_completions = true;
        behaviour.random_latency_ticks = 10 * US;
        let mut nvme = SimDevice::new("nvme0", behaviour, &clock);
        let config = config(&[JobSpec::new(JobOperation::RandRead, 4096, 4)], 0, MS, 1);
        let (results, console) = run(&config, &mut [&mut nvme], &clock, 1 << 20);
        let run = &results.runs[0];
        assert!(nvme.echoed > 10);
        let note =
            std::format!("nvme0: {} completions carried a tag that was not in flight; ignored", nvme.echoed);
        assert!(console.contains(&note), "{console}");
        assert!(run.notes.contains(&note));
        // The echoes neither count as I/O nor free a tag twice: the queue depth stays 4.
        assert_eq!(run.cpu.ios, nvme.accepted.len() as u64);
        assert_eq!(nvme.max_in_flight_seen, 4);
        assert!(run.ended_early.is_none());
    }

    #[test]
    fn queue_full_with_nothing_in_flight_ends_the_run_instead_of_spinning() {
        let clock = SteppingClock::new(GHZ, 10);
        let mut behaviour = SimBehaviour::new(nvme_geometry(), 20 * US);
        behaviour.real_slots = Some(0);
        let mut nvme = SimDevice::new("nvme0", behaviour, &clock);
        let config = config(&[JobSpec::new(JobOperation::RandRead, 4096, 4)], 0, MS, 1);
        let (results, console) = run(&config, &mut [&mut nvme], &clock, 1 << 20);
        assert!(matches!(
            results.runs[0].ended_early,
            Some(RunEnd::SubmitRefused { error: SubmitError::QueueFull, .. })
        ));
        assert!(console.contains("refused (queue full); this run ends here for nvme0"), "{console}");
        assert!(nvme.accepted.is_empty());
    }

    #[test]
    fn a_driver_with_fewer_slots_than_it_advertises_is_retried_not_dropped() {
        let clock = SteppingClock::new(GHZ, 10);
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
        let clock = SteppingClock::new(GHZ, 1_000);
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
        let clock = SteppingClock::new(GHZ, 10);
        let config = config(&REFERENCE, 0, MS, 1);
        let (results, console) = run(&config, &mut [], &clock, 1 << 20);
        assert!(results.runs.is_empty());
        assert!(console.contains("no devices to run"));
        assert!(console.contains(crate::JSON_END_MARKER));

        let dead = SteppingClock::new(0, 10);
        let mut nvme = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 20 * US), &dead);
        let (results, console) = run(&config, &mut [&mut nvme], &dead, 1 << 20);
        assert!(results.runs.is_empty());
        assert!(console.contains("the timer reports a frequency of 0 Hz"));
    }

    #[test]
    fn a_stopped_timer_ends_the_benchmark_instead_of_hanging() {
        let clock = SteppingClock::frozen(GHZ);
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

    /// The same benchmark on a fresh device and clock: once with the progress line and a UART
    /// as slow as a 115200-baud PL011 with a 16-byte FIFO (a blocking write waits for room,
    /// moving the clock), once with `progress=off`.
    fn run_with_and_without_progress() -> (BenchmarkResults, BenchmarkResults, String) {
        // At queue depth 4, I/Os are in flight whenever the UART would make the runner wait.
        let job = JobSpec::new(JobOperation::RandRead, 4096, 4);
        let mut config = config(&[job], 500 * MS, 2_000 * MS, 1);
        let mut outcomes = Vec::new();
        for progress in [true, false] {
            config.progress = progress;
            let clock = SteppingClock::new(GHZ, 1_000);
            let mut behaviour = SimBehaviour::new(nvme_geometry(), 90 * US);
            behaviour.random_latency_ticks = 20 * US;
            let mut nvme = SimDevice::new("nvme0", behaviour, &clock);
            let mut uart = crate::console::tests::SlowUart::new(&clock, 16, 86_800);
            let results = run_on(&config, &mut [&mut nvme], &clock, 1 << 20, &mut uart);
            outcomes.push((results, uart.text));
        }
        let (quiet, _) = outcomes.pop().unwrap();
        let (loud, text) = outcomes.pop().unwrap();
        (loud, quiet, text)
    }

    #[test]
    fn the_progress_line_never_stalls_measured_io() {
        let (with_progress, without_progress, console) = run_with_and_without_progress();
        // The line was really written (five updates and the final one) ...
        let progress = console.split("\r  nvme0").count() - 1;
        assert!((5..=7).contains(&progress), "{progress} progress texts in {console:?}");
        // ... and every figure of the run is what it is without it (the run starts later, after
        // the slow UART took the lines before it).
        let figures = |results: &BenchmarkResults| {
            let mut runs = results.runs.clone();
            runs.iter_mut().for_each(|run| run.started_at_ticks = 0);
            runs
        };
        assert_eq!(figures(&with_progress), figures(&without_progress));
        assert!(with_progress.runs[0].ios > 40_000);
    }

    /// A clock whose every reading costs `cost` instructions on the model counters.
    struct ChargingClock<'c> {
        clock: &'c SteppingClock,
        counters: &'c crate::cpu_cost::tests::ModelCounters,
        cost: u64,
    }

    impl Clock for ChargingClock<'_> {
        fn now_ticks(&self) -> u64 {
            self.counters.run(self.cost);
            self.clock.now_ticks()
        }
        fn ticks_per_second(&self) -> u64 {
            self.clock.ticks_per_second()
        }
    }

    #[test]
    fn cpu_cost_counts_the_driver_calls_and_bookkeeping_but_not_waiting() {
        use crate::cpu_cost::tests::ModelCounters;
        use crate::sim::SimDriverCost;
        let counters = ModelCounters::new(11);
        let clock = SteppingClock::new(GHZ, 0);
        let cost =
            SimDriverCost { counters: &counters, submit: 100, kick: 20, productive_poll: 50, empty_poll: 7 };
        let mut behaviour = SimBehaviour::new(nvme_geometry(), 10 * US);
        behaviour.empty_polls_before_completion = 3;
        let mut nvme = SimDevice::new("nvme0", behaviour, &clock).with_cpu_cost(cost);
        let job = JobSpec::new(JobOperation::RandRead, 4096, 1);
        let config = config(&[job], 0, MS, 2);
        let charging = ChargingClock { clock: &clock, counters: &counters, cost: 3 };
        let environment = RunEnvironment {
            clock: &charging,
            cpu_counters: &counters,
            buffer_area: buffer_area(1 << 20),
            memory: None,
            writes: None,
            conditions: None,
        };
        let context =
            ReportContext { board: "simulated", timer_frequency_hz: GHZ, ..ReportContext::default() };
        let mut console = String::new();
        let results = run_benchmark(&config, &mut [&mut nvme], &environment, &context, &mut console);
        let run = &results.runs[0];
        assert_eq!(run.cpu.ios, 100, "1 ms of 10 µs reads");
        // Per I/O: submit + kick + the poll that found it; the three empty polls are waiting.
        // Bookkeeping: the timer readings of the passes that did I/O, 3 instructions each (a
        // pass that only waited, its reading included, is nobody's cost). The pass that
        // completes I/O k also submits I/O k + 1: three readings (the pass's own after the poll,
        // which is the completion's, then submit and doorbell); the first pass has no
        // completion but its own reading (3) and the last, at the window's end, no submit (1):
        // 9 + 99 × 9 + 3 = 903 for 100 I/Os.
        assert_eq!(run.cpu.driver.instructions, 100 * (100 + 20 + 50));
        assert_eq!(run.cpu.bookkeeping.instructions, 903);
        let per_io = run.cpu.per_io();
        assert_eq!(per_io.driver_instructions_milli, Some(170_000));
        // The model's cycles are twice its instructions.
        assert_eq!(per_io.driver_cycles_milli, Some(340_000));
        assert_eq!(per_io.bookkeeping_instructions_milli, Some(9_030));
        assert_eq!(per_io.bookkeeping_cycles_milli, Some(18_060));
        assert_eq!(results.medians[0].cpu_per_io, per_io);
        assert!(
            console.contains(
                "nvme0    cpu per I/O: driver 170 instr / 340 cycles, bookkeeping 9 instr / 18 cycles\n"
            ),
            "{console}"
        );
        assert!(console.contains("\"driver_instructions\" : 170.000"), "{console}");
    }

    #[test]
    fn without_counters_the_cpu_line_says_why() {
        let clock = SteppingClock::new(GHZ, 10);
        let mut sd = SimDevice::new("sd0", SimBehaviour::new(sd_geometry(), 100 * US), &clock);
        let config = config(&[JobSpec::new(JobOperation::RandRead, 4096, 1)], 0, MS, 1);
        let (results, console) = run(&config, &mut [&mut sd], &clock, 1 << 20);
        assert_eq!(results.medians[0].cpu_per_io, crate::cpu_cost::CpuPerIo::default());
        assert!(
            console
                .contains("sd0      cpu per I/O: not measured (cycles: host test; instructions: host test)"),
            "{console}"
        );
        assert!(console.contains("\"driver_instructions\" : null"), "{console}");
    }

    #[test]
    fn a_region_that_reads_as_zeros_is_warned_about_before_the_first_run_and_recorded() {
        use crate::results::{DeviceFacts, RegionSample};
        let clock = SteppingClock::new(GHZ, 10);
        let mut nvme = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 20 * US), &clock);
        let mut sd = SimDevice::new("sd0", SimBehaviour::new(sd_geometry(), 100 * US), &clock);
        let config = config(&[JobSpec::new(JobOperation::RandRead, 4096, 1)], 0, MS, 1);
        let sample = RegionSample {
            region_offset_bytes: 0,
            region_size_bytes: 64 << 20,
            reads: 64,
            read_bytes: 4096,
            failed: 0,
            all_zero: true,
        };
        let facts = [
            DeviceFacts {
                device_name: "nvme0",
                region_sample: Some(sample),
                deallocated_read: Some("deallocated blocks read as zeros (DLFEAT 0x01)"),
            },
            DeviceFacts {
                device_name: "sd0",
                region_sample: Some(RegionSample { all_zero: false, ..sample }),
                deallocated_read: None,
            },
        ];
        let context = ReportContext { board: "simulated", device_facts: &facts, ..ReportContext::default() };
        let counters = NoCpuCounters("host test");
        let environment = RunEnvironment {
            clock: &clock,
            cpu_counters: &counters,
            buffer_area: buffer_area(1 << 20),
            memory: None,
            writes: None,
            conditions: None,
        };
        let mut console = String::new();
        let results = run_benchmark(&config, &mut [&mut nvme, &mut sd], &environment, &context, &mut console);
        let warning =
            "warning: nvme0: all 64 sampled reads of 4k spread over region 64m at offset 0 read as \
                       zeros: the region looks deallocated (never written)";
        let at = console.find(warning).unwrap_or_else(|| panic!("{console}"));
        assert!(at < console.find("run 1/1").unwrap(), "before the first run");
        assert!(console[at..]
            .lines()
            .next()
            .unwrap()
            .ends_with("(the device says: deallocated blocks read as zeros (DLFEAT 0x01))"));
        assert!(!console.contains("warning: sd0"), "{console}");
        assert!(results.notes.iter().any(|note| note.starts_with(warning)));
        let json = crate::fio_json::extract_json_from_log(&console).unwrap();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        let samples = value["barebench"]["region_samples"].as_array().unwrap();
        assert_eq!(samples[0]["device"], "nvme0");
        assert_eq!(samples[0]["looks_deallocated"], true);
        assert_eq!(samples[0]["deallocated_read"], "deallocated blocks read as zeros (DLFEAT 0x01)");
        assert_eq!(samples[1]["looks_deallocated"], false);
        for job in value["jobs"].as_array().unwrap() {
            let zeros = job["barebench"]["region_reads_as_zeros"].as_bool().unwrap();
            assert_eq!(zeros, job["barebench"]["device"] == "nvme0");
        }
    }

    #[test]
    fn pio_fallbacks_are_counted_per_run_printed_and_in_the_json() {
        let clock = SteppingClock::new(GHZ, 10);
        let mut adma = SimBehaviour::new(sd_geometry(), 100 * US);
        adma.data_path = Some(("ADMA2 (32-bit)", Some(10)));
        let mut sd = SimDevice::new("sd0", adma, &clock);
        let mut clean = SimBehaviour::new(sd_geometry(), 100 * US);
        clean.data_path = Some(("ADMA2 (32-bit)", None));
        let mut sd1 = SimDevice::new("sd1", clean, &clock);
        let mut nvme = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 20 * US), &clock);
        let config = config(&[JobSpec::new(JobOperation::RandRead, 4096, 1)], 0, 10 * MS, 2);
        let (results, console) = run(&config, &mut [&mut sd, &mut sd1, &mut nvme], &clock, 1 << 20);
        let sd_runs: Vec<&RunResult> = results.runs.iter().filter(|r| r.device_name == "sd0").collect();
        // Each run counts only its own commands: every request of the run, one in ten by PIO.
        let mut total = (0, 0);
        for run in &sd_runs {
            let path = run.data_path.expect("sd0 says how its data moved");
            assert!(path.commands >= run.ios && path.commands > 0, "{path:?} for {} I/Os", run.ios);
            assert!(path.pio_fallbacks > 0 && path.pio_fallbacks <= path.commands / 10 + 1, "{path:?}");
            let warning = format!(
                "warning: sd0: {} of {} commands moved their data by PIO, not ADMA2 (32-bit)",
                path.pio_fallbacks, path.commands
            );
            assert!(console.contains(&warning), "{warning}\n{console}");
            assert!(run.notes.iter().any(|note| note.starts_with(&warning)));
            total = (total.0 + path.commands, total.1 + path.pio_fallbacks);
        }
        let line =
            format!("sd0      data path: ADMA2 (32-bit), {} commands, {} by PIO instead", total.0, total.1);
        assert!(console.contains(&line), "{line}\n{console}");
        assert!(console.contains("sd1      data path: ADMA2 (32-bit), "), "{console}");
        assert!(!console.contains("warning: sd1"), "{console}");
        assert!(!console.contains("nvme0    data path"), "{console}");
        let json = crate::fio_json::extract_json_from_log(&console).unwrap();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        for job in value["jobs"].as_array().unwrap() {
            let barebench = &job["barebench"];
            match barebench["device"].as_str().unwrap() {
                "sd0" => {
                    assert_eq!(barebench["data_path"]["mode"], "ADMA2 (32-bit)");
                    assert!(barebench["data_path"]["pio_fallbacks"].as_u64().unwrap() > 0);
                }
                "sd1" => assert_eq!(barebench["data_path"]["pio_fallbacks"], 0),
                _ => assert!(barebench.get("data_path").is_none()),
            }
        }
        let medians = value["barebench medians"].as_array().unwrap();
        let sd0 = medians.iter().find(|m| m["device"] == "sd0").unwrap();
        assert_eq!(sd0["data_path"]["commands"], total.0);
        assert_eq!(sd0["data_path"]["pio_fallbacks"], total.1);
    }

    const REFERENCE: [JobSpec; 3] = crate::settings::REFERENCE_JOBS;
}
