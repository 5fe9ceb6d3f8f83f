//! `jobs=scan[:STEP[:QD]]`: the whole surface read once, first LBA to last, in steps of 4 MiB
//! by default (docs/surface-and-sustained.md §2).
//!
//! Each step is read by queue-depth requests that go out together ([`crate::stream`] with
//! batches of one step), and the next step waits until the whole step is back. A step's time
//! runs from the end of the step before (the first request for the first step) to the end of
//! its own last request, so the steps' times add up to the scan's and each is its own: requests
//! of neighbouring steps in flight together, or completions of several steps seen in one poll,
//! would blur where a slow zone is. The device is idle only for the moment between two steps.
//!
//! What is kept is bounded whatever the device's size: the [`BoundedSeries`] of the steps, the
//! slowest 1 % of steps with their offsets (at most [`MAX_SLOWEST`]), the first
//! [`MAX_SLOW_ZONES`] slow zones (runs of steps below `scan.slow=`) and counts. With a pattern
//! region on the device (`check=`), every N-th read inside it is compared with the test pattern.

use alloc::collections::BinaryHeap;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use blockdev::{BlockDevice, Clock, IoErrorKind, Operation};

use crate::console::{say, Console, ProgressLine};
use crate::pattern_check::ReadChecker;
use crate::plan::DevicePlan;
use crate::region::Region;
use crate::results::RunEnd;
use crate::run_loop::RunEnvironment;
use crate::series::{milli_mib_per_s, BoundedSeries};
use crate::settings::{Config, SlowThreshold};
use crate::stream::{Flow, Piece, StreamObserver, StreamSpec};
use crate::stream_plan::{fit_stream, own_buffers, StreamLabel};
use crate::stream_results::{ScanResult, SlowZone, StepRate};
use crate::stream_run::{run_counting_failures, ProgressPacing};
use crate::units::{ByteSize, Fixed, MibPerS, Seconds, SizeText};

/// The most slowest steps kept (1 % of a 1.6 TB drive in 4 MiB steps).
pub const MAX_SLOWEST: usize = 4096;
/// The most slow zones kept (the count is complete).
pub const MAX_SLOW_ZONES: usize = 64;
/// The most offsets of failed reads kept (the count is complete).
pub const MAX_ERROR_OFFSETS: usize = 8;
/// Steps judged against their own mean before a `N%` threshold uses the mean of the steps before
/// each step.
pub const WARMUP_STEPS: usize = 16;
/// Steps of the slowest list and slow zones printed on the console (the JSON has all it keeps).
const PRINTED_SLOWEST: usize = 8;

/// The byte range `config.scan_range` names on a device of `capacity_bytes`; `None` when it
/// starts beyond the end.
pub fn scan_region(config: &Config, capacity_bytes: u64) -> Option<Region> {
    let range = config.scan_range;
    let end = range.end_bytes.map_or(capacity_bytes, |end| end.min(capacity_bytes));
    (range.start_bytes < end)
        .then(|| Region { offset_bytes: range.start_bytes, size_bytes: end - range.start_bytes })
}

/// Scans one device; `None` when it cannot run there (the reason is printed and kept).
pub(crate) fn run(
    device: &mut dyn BlockDevice,
    environment: &RunEnvironment<'_>,
    config: &Config,
    label: &StreamLabel<'_>,
    console: &mut dyn Console,
) -> Option<(ScanResult, Option<RunEnd>)> {
    let name = String::from(device.name());
    let geometry = device.geometry();
    let mut notes = Vec::new();
    let job = label.job;
    let planned = scan_region(config, geometry.capacity_bytes())
        .ok_or_else(|| {
            format!(
                "scan.range={} starts beyond the end of its {}",
                config.scan_range,
                ByteSize(geometry.capacity_bytes())
            )
        })
        .and_then(|region| {
            let plan =
                fit_stream(job, &geometry, (region.offset_bytes, region.size_bytes), &name, &mut notes);
            let plan = plan.map_err(|error| format!("{error}"))?;
            let own = own_buffers(&plan, environment.buffer_area.length_bytes)
                .map_err(|error| format!("{error}"))?;
            Ok((plan, own))
        });
    let (mut plan, own_buffers) = match planned {
        Ok(planned) => planned,
        Err(reason) => {
            say(console, &mut notes, format!("job {job} skipped on {name}: {reason}"));
            return None;
        }
    };
    for note in &notes {
        let _ = writeln!(console, "{note}");
    }
    let logical = u64::from(geometry.logical_block_bytes);
    let step_bytes = job.block_bytes.div_ceil(logical) * logical;
    // A step is read by as many requests as the queue depth, so that the device has them all.
    let split_bytes = step_bytes / u64::from(plan.queue_depth) / logical * logical;
    if split_bytes >= logical && split_bytes < plan.block_bytes {
        plan.block_bytes = split_bytes;
        plan.blocks_per_request = (split_bytes / logical) as u32;
    }
    let _ = writeln!(
        console,
        "scan on {name}: {} to {} ({}) in steps of {}, requests of {} at queue depth {}",
        ByteSize(plan.region_offset_bytes),
        ByteSize(plan.region_offset_bytes + plan.region_size_bytes),
        ByteSize(plan.region_size_bytes),
        SizeText(step_bytes),
        SizeText(plan.block_bytes),
        plan.queue_depth
    );
    let checker =
        scan_checker(environment, config, &name, own_buffers, geometry.logical_block_bytes, &mut notes);
    let mut observer = ScanObserver::new(
        environment.clock,
        &plan,
        step_bytes,
        config.scan_slow,
        (job, &name, config.progress),
    );
    observer.checker = checker;
    observer.pattern = config.pattern_region(&name);
    let spec = StreamSpec {
        operation: Operation::Read,
        start_bytes: plan.region_offset_bytes,
        end_bytes: plan.region_offset_bytes + plan.region_size_bytes,
        request_bytes: plan.block_bytes,
        logical_block_bytes: logical,
        queue_depth: plan.queue_depth as usize,
        batch_bytes: Some(step_bytes),
        wrap: false,
    };
    let end = run_counting_failures(
        device,
        environment,
        spec,
        (&mut observer, ScanObserver::finish),
        console,
        &mut notes,
    );
    let reason = end.ended_early.map(|end| end.reason());
    let result = observer.into_result(label, (name.clone(), job.to_string()), &plan, reason, notes);
    print_scan(console, &result);
    Some((result, end.ended_early))
}

/// The checker of `check=` for the scan's reads inside the device's pattern region, or `None`
/// (with a note when checks were asked for but cannot be made).
fn scan_checker<'e>(
    environment: &RunEnvironment<'e>,
    config: &Config,
    name: &str,
    own_buffers: bool,
    logical_block_bytes: u32,
    notes: &mut Vec<String>,
) -> Option<ReadChecker<'e>> {
    let every = config.check_every(name)?;
    let reason = match (environment.memory, own_buffers) {
        (Some(memory), true) => return Some(ReadChecker::new(memory, every, logical_block_bytes)),
        (None, _) => "this kernel gives the benchmark no access to its buffers",
        (Some(_), false) => {
            "requests share buffers (the buffer area is smaller than queue depth × request size)"
        }
    };
    notes.push(format!("{name}: check={every} asked for, but no read of the scan is checked: {reason}"));
    None
}

/// Judges steps against `scan.slow=` and joins slow neighbours into zones.
struct SlowZones {
    threshold: SlowThreshold,
    /// With `N%`: the first [`WARMUP_STEPS`] steps with their bytes and time, judged against
    /// their own mean once there are enough.
    warming_up: bool,
    warmup: Vec<(StepRate, u64, u64)>,
    /// Bytes and time of every step judged so far (the running mean).
    bytes: u64,
    ns: u64,
    zones: Vec<SlowZone>,
    count: u64,
    open: Option<SlowZone>,
}

impl SlowZones {
    fn new(threshold: SlowThreshold) -> SlowZones {
        let warming_up = matches!(threshold, SlowThreshold::PercentOfMean(_));
        SlowZones {
            threshold,
            warming_up,
            warmup: Vec::new(),
            bytes: 0,
            ns: 0,
            zones: Vec::new(),
            count: 0,
            open: None,
        }
    }

    /// One step of `step_bytes` at `rate.offset_bytes` read in `ns`.
    fn add(&mut self, rate: StepRate, step_bytes: u64, ns: u64) {
        if self.warming_up {
            self.warmup.push((rate, step_bytes, ns));
            if self.warmup.len() == WARMUP_STEPS {
                self.judge_warmup();
            }
            return;
        }
        self.judge(rate, step_bytes, ns, milli_mib_per_s(self.bytes, self.ns));
    }

    /// The first steps against their own mean (also at the end of a scan of fewer steps).
    fn judge_warmup(&mut self) {
        self.warming_up = false;
        let bytes: u64 = self.warmup.iter().map(|step| step.1).sum();
        let ns: u64 = self.warmup.iter().map(|step| step.2).sum();
        let mean = milli_mib_per_s(bytes, ns);
        for (rate, step_bytes, step_ns) in core::mem::take(&mut self.warmup) {
            self.judge(rate, step_bytes, step_ns, mean);
        }
    }

    fn judge(&mut self, rate: StepRate, step_bytes: u64, ns: u64, mean_milli: u64) {
        let limit = match self.threshold {
            SlowThreshold::PercentOfMean(percent) => mean_milli * u64::from(percent) / 100,
            SlowThreshold::MibPerSecond(mib) => u64::from(mib) * 1000,
        };
        self.bytes += step_bytes;
        self.ns += ns;
        if rate.milli_mib_s >= limit {
            self.close();
            return;
        }
        match &mut self.open {
            Some(zone) if zone.end_bytes == rate.offset_bytes => {
                zone.end_bytes += step_bytes;
                zone.steps += 1;
                zone.min_milli_mib_s = zone.min_milli_mib_s.min(rate.milli_mib_s);
                zone.bytes += step_bytes;
                zone.ns += ns;
            }
            _ => {
                self.close();
                self.open = Some(SlowZone {
                    start_bytes: rate.offset_bytes,
                    end_bytes: rate.offset_bytes + step_bytes,
                    steps: 1,
                    min_milli_mib_s: rate.milli_mib_s,
                    bytes: step_bytes,
                    ns,
                });
            }
        }
    }

    fn close(&mut self) {
        if let Some(zone) = self.open.take() {
            self.count += 1;
            if self.zones.len() < MAX_SLOW_ZONES {
                self.zones.push(zone);
            }
        }
    }

    fn finish(&mut self) {
        if self.warming_up {
            self.judge_warmup();
        }
        self.close();
    }
}

/// What the scan keeps while it runs.
struct ScanObserver<'o> {
    clock: &'o dyn Clock,
    name: &'o str,
    start_bytes: u64,
    end_bytes: u64,
    step_bytes: u64,
    start_ticks: u64,
    previous_end_ticks: u64,
    steps: u64,
    bytes: u64,
    min: Option<StepRate>,
    max: StepRate,
    slowest: BinaryHeap<StepRate>,
    slowest_kept: usize,
    zones: SlowZones,
    series: BoundedSeries,
    errors: [u64; IoErrorKind::ALL.len()],
    error_offsets: Vec<u64>,
    checker: Option<ReadChecker<'o>>,
    pattern: Option<Region>,
    progress: ProgressLine<'o>,
    pacing: ProgressPacing,
}

impl<'o> ScanObserver<'o> {
    fn new(
        clock: &'o dyn Clock,
        plan: &'o DevicePlan,
        step_bytes: u64,
        threshold: SlowThreshold,
        (job, name, progress): (&'o crate::settings::JobSpec, &'o str, bool),
    ) -> ScanObserver<'o> {
        let steps = plan.region_size_bytes.div_ceil(step_bytes);
        let slowest_kept = usize::try_from(steps.div_ceil(100)).unwrap_or(MAX_SLOWEST).clamp(1, MAX_SLOWEST);
        ScanObserver {
            clock,
            name,
            start_bytes: plan.region_offset_bytes,
            end_bytes: plan.region_offset_bytes + plan.region_size_bytes,
            step_bytes,
            start_ticks: 0,
            previous_end_ticks: 0,
            steps: 0,
            bytes: 0,
            min: None,
            max: StepRate::default(),
            slowest: BinaryHeap::with_capacity(slowest_kept + 1),
            slowest_kept,
            zones: SlowZones::new(threshold),
            series: BoundedSeries::new(),
            errors: [0; IoErrorKind::ALL.len()],
            error_offsets: Vec::new(),
            checker: None,
            pattern: None,
            progress: ProgressLine::new(name, job, plan, (1, 1), 0, progress),
            pacing: ProgressPacing::new(clock),
        }
    }

    /// The bytes of step `index` (the last one may be short).
    fn step_size(&self, index: u64) -> u64 {
        let start = self.start_bytes + index * self.step_bytes;
        self.step_bytes.min(self.end_bytes - start)
    }

    fn record_step(&mut self, index: u64, ns: u64) {
        let offset_bytes = self.start_bytes + index * self.step_bytes;
        let bytes = self.step_size(index);
        let rate = StepRate { milli_mib_s: milli_mib_per_s(bytes, ns), offset_bytes };
        self.steps += 1;
        self.bytes += bytes;
        self.min = Some(self.min.map_or(rate, |min| min.min(rate)));
        if rate.milli_mib_s > self.max.milli_mib_s || self.steps == 1 {
            self.max = rate;
        }
        self.slowest.push(rate);
        if self.slowest.len() > self.slowest_kept {
            self.slowest.pop();
        }
        self.zones.add(rate, bytes, ns);
        self.series.push(offset_bytes, offset_bytes + bytes, bytes, ns);
    }

    /// With `check=`: every N-th successful read inside the pattern region (anywhere on a device
    /// without one), compared with the pattern before its buffer is used again.
    fn check(&mut self, piece: &Piece) {
        let Some(checker) = self.checker.as_mut() else { return };
        // A device without a pattern region is checked everywhere, as fio jobs check it.
        let inside = self.pattern.is_none_or(|pattern| {
            piece.offset_bytes >= pattern.offset_bytes
                && piece.offset_bytes + piece.bytes <= pattern.offset_bytes + pattern.size_bytes
        });
        if !inside || !checker.is_due() {
            return;
        }
        let started = self.clock.now_ticks();
        checker.check(piece.lba, piece.block_count, &piece.buffer);
        checker.summary.check_ns += self.clock.ticks_to_ns(self.clock.now_ticks().saturating_sub(started));
    }

    fn show_progress(&mut self, now: u64) {
        let total = self.end_bytes - self.start_bytes;
        let done = (self.steps * self.step_bytes).min(total);
        let elapsed_ns = self.clock.ticks_to_ns(now.saturating_sub(self.start_ticks));
        let rate = milli_mib_per_s(done, elapsed_ns);
        let remaining = total.saturating_sub(done);
        let eta = match done {
            0 => String::from("?"),
            _ => format!(
                "{}",
                Seconds((u128::from(elapsed_ns) * u128::from(remaining) / u128::from(done)) as u64)
            ),
        };
        let percent = Fixed::new(u128::from(done) * 1000 / u128::from(total.max(1)), 1);
        self.progress.show(format_args!(
            "scan {}: {} of {} ({percent} %), {} MiB/s, ETA {eta}",
            self.name,
            ByteSize(done / crate::units::MIB * crate::units::MIB),
            ByteSize(total),
            MibPerS(rate)
        ));
    }

    fn finish(&mut self, end_ticks: u64, console: &mut dyn Console) {
        self.zones.finish();
        if self.progress.is_enabled() {
            self.show_progress(end_ticks);
        }
        self.progress.interrupt(console);
    }

    fn into_result(
        mut self,
        label: &StreamLabel<'_>,
        (device_name, job): (String, String),
        plan: &DevicePlan,
        ended_early: Option<&'static str>,
        notes: Vec<String>,
    ) -> ScanResult {
        let check = self.checker.take().map(|checker| checker.summary);
        ScanResult {
            job_index: label.job_index,
            device_index: label.device_index,
            device_name,
            job,
            start_bytes: self.start_bytes,
            end_bytes: self.end_bytes,
            step_bytes: self.step_bytes,
            request_bytes: plan.block_bytes,
            queue_depth: plan.queue_depth,
            steps: self.steps,
            bytes: self.bytes,
            elapsed_ns: self.clock.ticks_to_ns(self.previous_end_ticks.saturating_sub(self.start_ticks)),
            min: self.min.unwrap_or_default(),
            max: self.max,
            slowest: self.slowest.into_sorted_vec(),
            slow_threshold: self.zones.threshold,
            slow_zones: self.zones.zones,
            slow_zone_count: self.zones.count,
            series: self.series,
            errors: self.errors,
            error_offsets: self.error_offsets,
            check,
            ended_early,
            notes,
        }
    }
}

impl StreamObserver for ScanObserver<'_> {
    fn started(&mut self, now_ticks: u64) {
        self.start_ticks = now_ticks;
        self.previous_end_ticks = now_ticks;
        self.pacing.start(now_ticks);
    }

    fn completed(&mut self, piece: &Piece) {
        if let Err(error) = piece.result {
            self.errors[error.kind.index()] += 1;
            if self.error_offsets.len() < MAX_ERROR_OFFSETS {
                self.error_offsets.push(piece.offset_bytes);
            }
        } else {
            self.check(piece);
        }
    }

    /// A whole step is back.
    fn batch_done(&mut self, now_ticks: u64) -> Flow {
        let ticks = now_ticks.saturating_sub(self.previous_end_ticks).max(1);
        self.previous_end_ticks = now_ticks;
        self.record_step(self.steps, self.clock.ticks_to_ns(ticks).max(1));
        Flow::Continue
    }

    fn tick(&mut self, now_ticks: u64, console: &mut dyn Console) -> Flow {
        if self.pacing.line_due(now_ticks) {
            self.show_progress(now_ticks);
        }
        self.pacing.pump(now_ticks, &mut self.progress, console);
        Flow::Continue
    }

    fn interrupt(&mut self, console: &mut dyn Console) {
        self.progress.interrupt(console);
    }
}

/// The scan's lines after it ran.
fn print_scan(console: &mut dyn Console, scan: &ScanResult) {
    let name = scan.device_name.as_str();
    let _ = writeln!(
        console,
        "{name:<8} scan: {} steps, {} in {}: MiB/s per step min {} at {}, mean {}, max {} at {}",
        scan.steps,
        ByteSize(scan.bytes),
        Seconds(scan.elapsed_ns),
        MibPerS(scan.min.milli_mib_s),
        ByteSize(scan.min.offset_bytes),
        MibPerS(scan.mean_milli_mib_s()),
        MibPerS(scan.max.milli_mib_s),
        ByteSize(scan.max.offset_bytes),
    );
    let _ = write!(console, "{name:<8} slowest 1 % ({} of {} steps):", scan.slowest.len(), scan.steps);
    for (index, step) in scan.slowest.iter().take(PRINTED_SLOWEST).enumerate() {
        let separator = if index == 0 { " " } else { ", " };
        let _ = write!(
            console,
            "{separator}{} MiB/s at {}",
            MibPerS(step.milli_mib_s),
            ByteSize(step.offset_bytes)
        );
    }
    if scan.slowest.len() > PRINTED_SLOWEST {
        let _ = write!(console, ", ... (all in the JSON)");
    }
    let _ = writeln!(console);
    let threshold = match scan.slow_threshold {
        SlowThreshold::PercentOfMean(percent) => format!("below {percent} % of the mean of the steps before"),
        SlowThreshold::MibPerSecond(mib) => format!("below {mib} MiB/s"),
    };
    let _ = write!(console, "{name:<8} slow zones (steps {threshold}): {}", scan.slow_zone_count);
    for zone in scan.slow_zones.iter().take(PRINTED_SLOWEST) {
        let _ = write!(
            console,
            "; {} to {} ({} steps, min {} MiB/s, mean {})",
            ByteSize(zone.start_bytes),
            ByteSize(zone.end_bytes),
            zone.steps,
            MibPerS(zone.min_milli_mib_s),
            MibPerS(zone.mean_milli_mib_s())
        );
    }
    if scan.slow_zone_count > PRINTED_SLOWEST as u64 {
        let _ = write!(console, "; ... (the first {} in the JSON)", scan.slow_zones.len());
    }
    let _ = writeln!(console);
    let failed: u64 = scan.errors.iter().sum();
    if failed > 0 {
        let _ = writeln!(
            console,
            "{name:<8} scan errors: {failed} reads failed, first at byte offsets {:?}",
            scan.error_offsets
        );
    }
    if let Some(check) = &scan.check {
        for mismatch in &check.first {
            let _ = writeln!(console, "{name}: MISMATCH: {mismatch}");
        }
        let _ = writeln!(console, "{}", crate::report::check_line(name, check));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu_cost::NoCpuCounters;
    use crate::sim::{SimBehaviour, SimDevice};
    use crate::stream::tests::environment;
    use crate::units::MIB;
    use blockdev::testing::SteppingClock;
    use blockdev::Geometry;

    const GHZ: u64 = 1_000_000_000;

    /// A device that reads at 1 µs per KiB (≈ 977 MiB/s), ten times slower from 96 MiB to 104 MiB.
    fn slow_zone_device(geometry: Geometry, clock: &SteppingClock) -> SimDevice<'_> {
        let mut behaviour = SimBehaviour::new(geometry, 2_000);
        behaviour.transfer_ticks_per_kib = 1_000;
        behaviour.transfer_factor = Some(|request, _written_bytes| {
            let offset = request.lba * 512;
            if (96 * MIB..104 * MIB).contains(&offset) {
                10
            } else {
                1
            }
        });
        SimDevice::new("nvme0", behaviour, clock)
    }

    fn geometry(block_count: u64) -> Geometry {
        Geometry { logical_block_bytes: 512, block_count, max_request_blocks: 1024, max_in_flight: 32 }
    }

    fn scan(
        device: &mut SimDevice<'_>,
        clock: &SteppingClock,
        config: &Config,
        job: crate::settings::JobSpec,
    ) -> (ScanResult, String) {
        let counters = NoCpuCounters("host test");
        let environment = environment(clock, &counters, 8 << 20);
        let label = StreamLabel { job_index: 0, job: &job, device_index: 0 };
        let mut console = String::new();
        let (result, _) = run(device, &environment, config, &label, &mut console).expect("the scan runs");
        (result, console)
    }

    #[test]
    fn a_slow_zone_at_a_known_offset_is_found_there() {
        let clock = SteppingClock::new(GHZ, 50);
        let mut device = slow_zone_device(geometry(256 << 11), &clock); // 256 MiB
        let config = Config { progress: false, ..Config::default() };
        let job = crate::settings::JobSpec::new(crate::settings::JobOperation::Scan, 4 * MIB, 16);
        let (result, console) = scan(&mut device, &clock, &config, job);
        assert_eq!((result.steps, result.bytes), (64, 256 * MIB));
        assert_eq!((result.start_bytes, result.end_bytes), (0, 256 * MIB));
        assert_eq!(result.slow_zone_count, 1, "{console}");
        let zone = result.slow_zones[0];
        assert_eq!((zone.start_bytes, zone.end_bytes, zone.steps), (96 * MIB, 104 * MIB, 2), "{console}");
        assert!(
            result.min.offset_bytes == 96 * MIB || result.min.offset_bytes == 100 * MIB,
            "{:?}",
            result.min
        );
        assert!(result.min.milli_mib_s < result.max.milli_mib_s / 5, "{result:?}");
        // 1 % of 64 steps is one step: the slowest, in the zone.
        assert_eq!(result.slowest.len(), 1);
        assert!((96 * MIB..104 * MIB).contains(&result.slowest[0].offset_bytes));
        assert!(console.contains("slow zones (steps below 50 % of the mean of the steps before): 1; 96 MiB to 104 MiB (2 steps"), "{console}");
        assert_eq!(result.series.points().len(), 64);
        // Every byte was read once, in order, at the queue depth.
        assert_eq!(device.accepted.len(), 1024, "16 requests of 256 KiB a step");
        assert_eq!(device.max_in_flight_seen, 16);
    }

    #[test]
    fn check_compares_the_reads_with_the_pattern_inside_the_pattern_region() {
        use crate::sim::{SimMedium, TestMemory};
        use core::cell::RefCell;
        let clock = SteppingClock::new(GHZ, 50);
        let memory = TestMemory::new(0x4000_0000, 4 << 20);
        let mut disk = std::vec![0u8; 16 << 20];
        for (sector, bytes) in disk.chunks_mut(512).enumerate() {
            let mut filled = [0u8; 512];
            blockdev::pattern::fill_sector(sector as u64, &mut filled);
            bytes.copy_from_slice(&filled);
        }
        // One byte wrong at 5 MiB + 700, inside the pattern region; one at 13 MiB, outside it.
        disk[(5 << 20) + 700] ^= 0xff;
        disk[13 << 20] ^= 0xff;
        let medium = SimMedium { memory: &memory, disk: RefCell::new(disk), corrupt_lba: None };
        let mut device = slow_zone_device(geometry(16 << 11), &clock).with_medium(&medium);
        let mut config =
            Config { progress: false, check: crate::settings::CheckSetting::Every(1), ..Config::default() };
        config
            .pattern_regions
            .push((String::from("nvme0"), Region { offset_bytes: MIB, size_bytes: 11 * MIB }));
        let job = crate::settings::JobSpec::new(crate::settings::JobOperation::Scan, MIB, 4);
        let counters = NoCpuCounters("host test");
        let environment = RunEnvironment {
            memory: Some(&memory),
            buffer_area: memory.area(),
            ..environment(&clock, &counters, 0)
        };
        let label = StreamLabel { job_index: 0, job: &job, device_index: 0 };
        let mut console = String::new();
        let (result, _) = run(&mut device, &environment, &config, &label, &mut console).unwrap();
        let check = result.check.clone().unwrap();
        // Requests of 256 KiB: the 44 inside the region are checked, the one wrong byte found.
        assert_eq!((check.checked, check.mismatches), (44, 1), "{console}");
        assert_eq!(check.first[0].device_byte, (5 << 20) + 700);
        assert_eq!(result.errors_total(), 1);
        assert!(console.contains("nvme0: MISMATCH: read at LBA 10240"), "{console}");
    }

    #[test]
    fn an_absolute_threshold_and_a_range_limit_the_scan() {
        let clock = SteppingClock::new(GHZ, 50);
        let mut device = slow_zone_device(geometry(256 << 11), &clock);
        let config = Config {
            progress: false,
            scan_range: crate::settings::ScanRange { start_bytes: 64 * MIB, end_bytes: Some(128 * MIB) },
            scan_slow: SlowThreshold::MibPerSecond(500),
            ..Config::default()
        };
        let job = crate::settings::JobSpec::new(crate::settings::JobOperation::Scan, 8 * MIB, 4);
        let (result, console) = scan(&mut device, &clock, &config, job);
        assert_eq!((result.start_bytes, result.end_bytes, result.steps), (64 * MIB, 128 * MIB, 8));
        assert_eq!(result.slow_zones.len(), 1, "{console}");
        assert_eq!((result.slow_zones[0].start_bytes, result.slow_zones[0].end_bytes), (96 * MIB, 104 * MIB));
        assert!(device.accepted.iter().all(|request| (64 * MIB..128 * MIB).contains(&(request.lba * 512))));
    }

    #[test]
    fn a_terabyte_scan_keeps_a_bounded_series_and_says_how_far_it_is() {
        // 2^31 blocks of 512 bytes: 1 TiB, 262 144 steps of 4 MiB in simulated time.
        let clock = SteppingClock::new(GHZ, 10);
        let mut behaviour = SimBehaviour::new(
            Geometry {
                logical_block_bytes: 512,
                block_count: 1 << 31,
                max_request_blocks: 8192,
                max_in_flight: 4,
            },
            1_000,
        );
        behaviour.transfer_ticks_per_kib = 1_000;
        let mut device = SimDevice::new("nvme0", behaviour, &clock);
        let config = Config::default();
        let job = crate::settings::JobSpec::new(crate::settings::JobOperation::Scan, 4 * MIB, 1);
        let (result, console) = scan(&mut device, &clock, &config, job);
        assert_eq!(result.steps, 1 << 18);
        assert_eq!(result.bytes, 1 << 40);
        assert!(result.series.points().len() <= crate::series::MAX_POINTS);
        assert!(result.series.points().len() > crate::series::MAX_POINTS / 2);
        assert_eq!(result.series.samples(), 1 << 18);
        assert_eq!(result.slowest.len(), 2622, "1 % of the steps");
        // The progress line showed the ETA on the way.
        assert!(console.contains("\r  scan nvme0: "), "{}", &console[..console.len().min(2000)]);
        assert!(console.contains("ETA "));
        assert!(console.contains("(100.0 %)"));
    }
}
