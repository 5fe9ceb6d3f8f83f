//! One run of one job on one device: the queue depth kept in flight, three timestamps per I/O,
//! the ramp, the measured window and the drain (docs/architecture.md "What is measured"; slat,
//! clat and lat as fio defines them: docs/nvme-and-fio.md §3.1).
//!
//! Each pass of the loop takes three steps: `RunLoop::reap` polls, reads the timer once (the
//! pass's time, and the completions' when the poll found any) and records what completed,
//! `RunLoop::fill` submits until the queue depth is in flight again
//! and rings the doorbell once for the batch (so a finished tag is reused in the same pass);
//! between the two, one compare per pass asks whether `RunLoop::timed_events` is due: the IOPS
//! and bandwidth samples, the window's end, the progress line (fed without ever waiting for the
//! UART) and the drain deadline. An I/O
//! counts when it completes inside the window; one in flight at the ramp boundary counts when it
//! completes inside the window, its latency including ramp time, as in fio. After the window no
//! new I/O is submitted and the device is drained.
//!
//! Around the driver's calls the loop laps a [`CpuMeter`], which splits the CPU's work into the
//! driver's and the benchmark's own (docs/measurement.md). With `trace=` the loop also stores
//! each command that completes in the window in a [`TraceRing`] (polling with
//! `BlockDevice::poll_detailed` for the queue and command identifiers), metered apart as
//! [`Account::Recording`]. Nothing here allocates per I/O.

use alloc::boxed::Box;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::num::NonZeroU64;

use blockdev::scratch::ScratchRegion;
use blockdev::{
    BlockDevice, Clock, CommandDetail, Completion, DmaBuffer, FlushSupport, IoError, IoErrorKind, Operation,
    Request, SubmitError,
};

use crate::buffers::BufferMemory;
use crate::console::{Console, ProgressLine};
use crate::cpu_cost::{Account, CpuCounters, CpuMeter};
use crate::distributions::{latency_band_in_bucket, DepthCounts, DepthTally, RateSampler, LATENCY_BANDS};
use crate::histogram::{LatencyHistogram, FIO_DEFAULT_PERCENTILES, P99_INDEX};
use crate::offsets::{AccessPattern, OffsetGenerator, RandomGenerator};
use crate::pattern_check::{CheckSummary, ReadChecker};
use crate::plan::DevicePlan;
use crate::report;
use crate::results::{Direction, FlushResult, HistogramBins, RunEnd, RunResult};
use crate::settings::{Config, JobSpec, OutputFormat};
use crate::stall_watch::StallWatch;
use crate::stats::{LatencyAccumulator, LatencySums};
use crate::trace::{TraceRing, TraceStatus};
use crate::units::{SizeText, NS_PER_MS, NS_PER_S};
use crate::written::{self, Expected, SlotTable, VerifyOutcome};

/// How long after the window the runner waits for requests still in flight. Drivers time out
/// their own commands well before this and complete them with `IoErrorKind::Timeout`.
pub const DRAIN_TIMEOUT_NS: u64 = 10 * NS_PER_S;
/// At most one progress update per this interval (≈ 2 per second).
pub const PROGRESS_INTERVAL_NS: u64 = 500 * NS_PER_MS;
/// How often the unsent part of the progress line is offered to the console: a 115200-baud
/// UART sends about 11.5 bytes per millisecond, so its FIFO has room again by then.
pub const PROGRESS_PUMP_INTERVAL_NS: u64 = NS_PER_MS;

/// A device's marked scratch region, found by the kernel's scan of its partitions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceRegion<'a> {
    pub device_name: &'a str,
    pub region: ScratchRegion,
}

/// What write and mixed jobs need: CPU access to the buffers and the scratch regions.
#[derive(Clone, Copy)]
pub struct WriteAccess<'a> {
    pub memory: &'a dyn BufferMemory,
    pub regions: &'a [DeviceRegion<'a>],
}

/// What the runner needs from the machine besides the devices.
#[derive(Clone, Copy)]
pub struct RunEnvironment<'a> {
    /// The timer every timestamp comes from.
    pub clock: &'a dyn Clock,
    /// The CPU's cycle and instruction counters, for the CPU cost per I/O.
    pub cpu_counters: &'a dyn CpuCounters,
    /// One DMA region for the read data; requests share it when it is smaller than queue
    /// depth × block size (reads only, so what is measured does not change).
    pub buffer_area: DmaBuffer,
    /// CPU access to `buffer_area` for `check=`; `None`: reads are never checked.
    pub memory: Option<&'a dyn BufferMemory>,
    /// `None`: write and mixed jobs are refused (nothing can be written).
    pub writes: Option<WriteAccess<'a>>,
    /// The machine's conditions (throttling, temperature, clocks, boot time, the LED's heartbeat);
    /// `None`: not reported.
    pub conditions: Option<&'a dyn crate::conditions::ConditionsSource>,
}

/// `ticks × 10^9 / frequency`, truncating like `blockdev::ticks_to_ns`, with a 64-bit division
/// whenever the product fits (every latency shorter than ~5 minutes at 54 MHz).
#[derive(Clone, Copy)]
pub(crate) struct TickConverter {
    ticks_per_second: u64,
    /// Nanoseconds per tick when a second is a whole number of them (62.5 MHz: 16; 1 GHz: 1),
    /// else 0: then a conversion is one multiplication, with the same result.
    whole_ns_per_tick: u64,
    /// The most ticks that one multiplication converts (0 without a whole number of ns per tick:
    /// 0 ticks are 0 ns at any rate). Three conversions per I/O take this path: a compare and
    /// a multiplication each.
    multiply_up_to_ticks: u64,
}

impl TickConverter {
    fn new(ticks_per_second: u64) -> TickConverter {
        let whole = if ticks_per_second > 0 && NS_PER_S.is_multiple_of(ticks_per_second) {
            NS_PER_S / ticks_per_second
        } else {
            0
        };
        let multiply_up_to_ticks = u64::MAX.checked_div(whole).unwrap_or(0);
        TickConverter { ticks_per_second, whole_ns_per_tick: whole, multiply_up_to_ticks }
    }

    #[inline]
    fn ns(self, ticks: u64) -> u64 {
        if ticks <= self.multiply_up_to_ticks {
            return ticks * self.whole_ns_per_tick;
        }
        self.ns_by_division(ticks)
    }

    /// lat, clat and slat in ns of an I/O submitted, sent (doorbell) and seen complete at these
    /// ticks: each difference converted as [`TickConverter::ns`] converts it, a difference that
    /// would be negative (a timer that went back) as 0. When the ticks are in order, as a working
    /// timer gives them, lat is the longest of the three, so one compare tells whether all three
    /// convert with one multiplication each.
    #[inline]
    fn latencies_ns(self, submitted: u64, kicked: u64, done: u64) -> (u64, u64, u64) {
        let lat_ticks = done.wrapping_sub(submitted);
        if submitted <= kicked && kicked <= done && lat_ticks <= self.multiply_up_to_ticks {
            let ns_per_tick = self.whole_ns_per_tick;
            return (
                lat_ticks * ns_per_tick,
                (done - kicked) * ns_per_tick,
                (kicked - submitted) * ns_per_tick,
            );
        }
        (
            self.ns(done.saturating_sub(submitted)),
            self.ns(done.saturating_sub(kicked)),
            self.ns(kicked.saturating_sub(submitted)),
        )
    }

    fn ns_by_division(self, ticks: u64) -> u64 {
        match ticks.checked_mul(NS_PER_S) {
            Some(product) => product / self.ticks_per_second,
            None => blockdev::ticks_to_ns(ticks, self.ticks_per_second),
        }
    }
}

/// The run's timestamps: the generic timer's counter read inline when the clock is that counter
/// ([`Clock::is_generic_counter`]), else the clock's `now_ticks`; the same readings either way.
#[derive(Clone, Copy)]
struct TickSource<'a> {
    clock: &'a dyn Clock,
    /// Whether the loop may read the counter itself: it then runs with `GENERIC_COUNTER` set.
    generic_counter: bool,
}

impl<'a> TickSource<'a> {
    fn new(clock: &'a dyn Clock) -> TickSource<'a> {
        TickSource { clock, generic_counter: clock.is_generic_counter() }
    }

    /// A reading: with `GENERIC_COUNTER` (only when `generic_counter` holds), the counter read
    /// inline on the bare-metal targets, which have it (`hal::counter`).
    #[inline(always)]
    fn now<const GENERIC_COUNTER: bool>(&self) -> u64 {
        #[cfg(all(any(target_arch = "aarch64", target_arch = "arm"), target_os = "none"))]
        if GENERIC_COUNTER {
            return hal::counter::generic_counter_ticks();
        }
        self.clock.now_ticks()
    }
}

/// What the runner keeps for one tag while its request is in flight.
#[derive(Clone, Copy)]
struct TagState {
    submitted_at_ticks: u64,
    kicked_at_ticks: u64,
    in_flight: bool,
    /// The request (its operation also for write and mixed jobs' bookkeeping, the rest for a
    /// trace record).
    operation: Operation,
    lba: u64,
    block_count: u32,
    /// The block slot of the region (write and mixed jobs).
    slot: u64,
    /// A write's sequence number.
    sequence: u32,
    /// What a read must find (a slot written earlier in the run).
    expected: Expected,
}

impl Default for TagState {
    fn default() -> Self {
        TagState {
            submitted_at_ticks: 0,
            kicked_at_ticks: 0,
            in_flight: false,
            operation: Operation::Read,
            slot: 0,
            sequence: 0,
            expected: Expected::Unknown,
            lba: 0,
            block_count: 0,
        }
    }
}

/// Per-tag state, allocated once per job for its deepest queue.
pub(crate) struct Scratch {
    tags: Vec<TagState>,
    free_tags: Vec<u32>,
    /// The tags of the batch being submitted, in order (one per request in flight at most).
    batch: Vec<u32>,
    completions: Vec<Completion>,
    /// What each slot holds, for write and mixed jobs (allocated per job, cleared per run).
    table: Option<SlotTable>,
    /// Filled by `poll_detailed` while a trace records.
    details: Vec<CommandDetail>,
}

impl Scratch {
    pub(crate) fn new(queue_depth: usize) -> Scratch {
        Scratch {
            tags: alloc::vec![TagState::default(); queue_depth],
            free_tags: Vec::with_capacity(queue_depth),
            batch: alloc::vec![0; queue_depth],
            completions: alloc::vec![Completion::default(); queue_depth],
            table: None,
            details: alloc::vec![CommandDetail::default(); queue_depth],
        }
    }

    /// Room to track `slot_count` slots (write and mixed jobs).
    pub(crate) fn track_slots(&mut self, slot_count: u64) {
        match &mut self.table {
            Some(table) if table.len() >= slot_count => {}
            _ => self.table = Some(SlotTable::new(slot_count)),
        }
    }

    fn reset(&mut self, queue_depth: usize) {
        self.tags.fill(TagState::default());
        self.free_tags.clear();
        self.free_tags.extend((0..queue_depth as u32).rev());
        if let Some(table) = &mut self.table {
            table.clear();
        }
    }
}

/// The statistics of one run (histograms allocated once per benchmark, reset per run).
pub(crate) struct Measurements {
    /// The three statistics of every successful I/O in the window, counted once in `ios`.
    slat: LatencySums,
    clat: LatencySums,
    lat: LatencySums,
    clat_histogram: LatencyHistogram,
    lat_histogram: LatencyHistogram,
    /// fio's `latency_ns`/`_us`/`_ms` bands of the completion latencies.
    latency_bands: [u64; LATENCY_BANDS],
    ios: u64,
    errors: [u64; IoErrorKind::ALL.len()],
    /// The kind of the first I/O that failed in the window.
    first_error: Option<IoErrorKind>,
}

impl Measurements {
    pub(crate) fn new() -> Measurements {
        Measurements {
            slat: LatencySums::default(),
            clat: LatencySums::default(),
            lat: LatencySums::default(),
            clat_histogram: LatencyHistogram::new(),
            lat_histogram: LatencyHistogram::new(),
            latency_bands: [0; LATENCY_BANDS],
            ios: 0,
            errors: [0; IoErrorKind::ALL.len()],
            first_error: None,
        }
    }

    fn reset(&mut self) {
        self.slat = LatencySums::default();
        self.clat = LatencySums::default();
        self.lat = LatencySums::default();
        self.clat_histogram.reset();
        self.lat_histogram.reset();
        self.latency_bands = [0; LATENCY_BANDS];
        self.ios = 0;
        self.errors = [0; IoErrorKind::ALL.len()];
        self.first_error = None;
    }

    /// One successful I/O inside the window: submit, doorbell and completion-seen ticks.
    #[inline(always)]
    fn record(&mut self, converter: TickConverter, submitted: u64, kicked: u64, done: u64) {
        let (lat_ns, clat_ns, slat_ns) = converter.latencies_ns(submitted, kicked, done);
        self.lat.record(lat_ns);
        self.lat_histogram.record(lat_ns);
        self.clat.record(clat_ns);
        let clat_bucket = self.clat_histogram.record(clat_ns);
        self.latency_bands[latency_band_in_bucket(clat_bucket, clat_ns)] += 1;
        self.slat.record(slat_ns);
        self.ios += 1;
    }

    /// One completion of the request `state` describes, seen at `done`: timed when it succeeded
    /// inside the window; a failure counts whenever it ends (a timeout that a recovery ends after
    /// the window is still a failed I/O of this run).
    #[inline(always)]
    fn count(
        &mut self,
        converter: TickConverter,
        result: Result<(), IoError>,
        state: ReleasedTag,
        done: u64,
        inside_window: bool,
    ) {
        match result {
            Ok(()) if inside_window => {
                self.record(converter, state.submitted_at_ticks, state.kicked_at_ticks, done)
            }
            Ok(()) => {}
            Err(error) => {
                self.errors[error.kind.index()] += 1;
                self.first_error.get_or_insert(error.kind);
            }
        }
    }
}

/// What a completion needs of its tag's state (the whole state is copied for write jobs alone).
#[derive(Clone, Copy)]
struct ReleasedTag {
    submitted_at_ticks: u64,
    kicked_at_ticks: u64,
    operation: Operation,
}

/// Frees `tag` if its request was in flight, and returns what the completion needs of its state;
/// `None` for a tag that was not in flight (tags beyond this run's queue depth were reset with
/// the rest and never are).
#[inline(always)]
fn release_tag(tags: &mut [TagState], free_tags: &mut Vec<u32>, tag: u32) -> Option<ReleasedTag> {
    let state = tags.get_mut(tag as usize).filter(|state| state.in_flight)?;
    state.in_flight = false;
    free_tags.push(tag);
    Some(ReleasedTag {
        submitted_at_ticks: state.submitted_at_ticks,
        kicked_at_ticks: state.kicked_at_ticks,
        operation: state.operation,
    })
}

/// What [`RunLoop::passes`] hands back to [`RunLoop::run_passes`].
enum Handback {
    /// The clock gave the same reading too often: it has stopped.
    ClockStalled { now: u64 },
    /// A timed event is due at `now`, after a poll that completed I/O when `completed`.
    EventDue { now: u64, completed: bool },
    /// The driver refused a request ([`RunLoop::refused`]; the batch before it was sent); the
    /// pass did I/O when `did_io`.
    Refused { did_io: bool },
    /// Submissions have ended and nothing is in flight: the pass's lap is all that is left.
    Drained { did_io: bool },
}

/// The lap that ends a pass of the loop: whether the pass submitted or completed I/O decides
/// whether its pending work is bookkeeping.
fn pass_end(did_io: bool) -> Account {
    if did_io {
        Account::PassDidIo
    } else {
        Account::PassWaited
    }
}

/// What identifies a run, for the messages and the result.
pub(crate) struct RunLabel<'a> {
    pub job_index: usize,
    pub job: &'a JobSpec,
    pub run: u32,
    pub runs: u32,
    pub device_index: usize,
    pub seed: u64,
}

/// One run of `label.job` on `device` as `plan` says; prints its header and progress.
pub(crate) fn run_once(
    device: &mut dyn BlockDevice,
    environment: &RunEnvironment<'_>,
    (config, plan, label): (&Config, &DevicePlan, &RunLabel<'_>),
    (scratch, measurements, trace): (&mut Scratch, &mut [Measurements; 2], Option<&mut TraceRing>),
    console: &mut dyn Console,
) -> Vec<RunResult> {
    let device_name = String::from(device.name());
    report::print_run_header(console, label.job, plan, &device_name, (label.run, label.runs), config);
    let path_before = device.data_path();
    // Failures before this run (region sampling, an earlier run) are not this run's.
    let _ = device.take_unreported_failures();
    let mut run =
        RunLoop::new(device, &device_name, environment, (config, plan, label), (scratch, measurements));
    if let Some(ring) = trace {
        ring.start(run.times.start);
        run.trace = Some(ring);
    }
    run.run(console);
    let path_after = run.device.data_path();
    let unreported = run.device.take_unreported_failures();
    if config.write_verify {
        run.verify_written(console);
    }
    let mut outcome = run.finish(console);
    if unreported > 0 {
        let message = format!(
            "{device_name}: ... and {unreported} more failed commands not described (the errors \
             column counts every failed I/O)"
        );
        let _ = writeln!(console, "{message}");
        outcome.notes.push(message);
    }
    // The histograms' bins are kept only for json+ (up to 1856 per kind and run on the heap).
    let keep_bins = config.output == OutputFormat::JsonPlus;
    let data_path = path_after.zip(path_before).map(|(after, before)| after.since(&before));
    if let Some(path) = data_path.filter(|path| path.pio_fallbacks > 0) {
        let message = report::pio_fallback_note(&device_name, &path);
        let _ = writeln!(console, "{message}");
        outcome.notes.push(message);
    }
    let mut results = outcome.into_results(plan, label, &device_name, keep_bins);
    for result in &mut results {
        result.data_path = data_path;
    }
    results
}

/// The flushes of a run with `flush=`.
struct FlushState {
    support: FlushSupport,
    every_writes: u32,
    writes_since: u32,
    /// Flushes due inside the window (sent and completed, or counted without a cache).
    counted: u64,
    errors: u64,
    lat: LatencyAccumulator,
    histogram: LatencyHistogram,
}

impl FlushState {
    fn result(&self) -> FlushResult {
        let lat = self.lat.summary();
        let mut p99 = [0u64; 1];
        self.histogram.percentiles_ns(
            &[FIO_DEFAULT_PERCENTILES[P99_INDEX]],
            (lat.min_ns, lat.max_ns),
            &mut p99,
        );
        FlushResult {
            count: self.counted,
            sent: self.support == FlushSupport::Command,
            no_cache: match self.support {
                FlushSupport::NoCache(reason) => Some(reason),
                FlushSupport::Command => None,
            },
            lat,
            lat_p99_ns: p99[0],
            errors: self.errors,
        }
    }
}

impl WriteChecks<'_> {
    /// Compares a completed read of `buffer` (from `lba`) with what write `sequence` put there.
    fn check(&mut self, buffer: &DmaBuffer, lba: u64, logical_block_bytes: usize, sequence: u32) {
        let (run_id, expected) = (self.run_id, &mut self.expected_block);
        let mut mismatch = None;
        self.memory.with_bytes(buffer, &mut |bytes| {
            mismatch = written::first_mismatch(bytes, lba, logical_block_bytes, run_id, sequence, expected);
        });
        self.outcome.blocks_checked += 1;
        if let Some(lba) = mismatch {
            self.outcome.record_mismatch(lba);
        }
    }
}

/// What a write or mixed run checks, besides what it measures.
struct WriteChecks<'r> {
    memory: &'r dyn BufferMemory,
    run_id: u64,
    /// Check reads of slots written earlier in the run.
    check_reads: bool,
    outcome: VerifyOutcome,
    /// One logical block of expected data.
    expected_block: Vec<u8>,
    region_id: Option<u64>,
}

/// The ticks that bound a run.
struct RunTimes {
    start: u64,
    ramp_ticks: u64,
    window_ticks: u64,
    ramp_end: u64,
    window_end: u64,
    drain_deadline: u64,
    progress_interval_ticks: u64,
    pump_interval_ticks: u64,
}

impl RunTimes {
    /// Whether `ticks` lies inside the measured window: one subtraction and one compare (a tick
    /// before the ramp's end wraps to a difference beyond the window).
    #[inline]
    fn in_window(&self, ticks: u64) -> bool {
        ticks.wrapping_sub(self.ramp_end) < self.window_ticks
    }

    fn starting_now(clock: &dyn Clock, config: &Config) -> RunTimes {
        let ramp_ticks = clock.ns_to_ticks(config.ramp_ns);
        let window_ticks = clock.ns_to_ticks(config.runtime_ns);
        let drain_ticks = clock.ns_to_ticks(DRAIN_TIMEOUT_NS);
        let progress_interval_ticks = clock.ns_to_ticks(PROGRESS_INTERVAL_NS);
        let pump_interval_ticks = clock.ns_to_ticks(PROGRESS_PUMP_INTERVAL_NS);
        let start = clock.now_ticks();
        let ramp_end = start + ramp_ticks;
        let window_end = ramp_end + window_ticks;
        RunTimes {
            start,
            ramp_ticks,
            window_ticks,
            ramp_end,
            window_end,
            drain_deadline: window_end + drain_ticks,
            progress_interval_ticks,
            pump_interval_ticks,
        }
    }
}

/// How many offsets a write or mixed job draws before giving up on finding a slot with no
/// request in flight (it then waits for a completion).
const SLOT_TRIES: u32 = 64;

/// What a write or mixed run decides per request.
struct WriteMix<'r> {
    read_percent: u64,
    random: RandomGenerator,
    run_id: u64,
    next_sequence: u32,
    memory: &'r dyn BufferMemory,
}

/// Offsets and buffers for the next request.
struct RequestSource<'r> {
    offsets: OffsetGenerator,
    region_offset_bytes: u64,
    /// Non-zero, so that dividing by it needs no test (a device that reports 0 has 1).
    logical_block_bytes: NonZeroU64,
    blocks_per_request: u32,
    block_bytes: u64,
    buffer_area: DmaBuffer,
    buffer_count: NonZeroU64,
    mix: Option<WriteMix<'r>>,
}

impl<'r> RequestSource<'r> {
    fn new(
        plan: &DevicePlan,
        logical_block_bytes: u32,
        job: &JobSpec,
        seed: u64,
        buffer_area: DmaBuffer,
    ) -> Self {
        let pattern =
            if job.operation.is_random() { AccessPattern::Random } else { AccessPattern::Sequential };
        RequestSource {
            offsets: OffsetGenerator::new(
                pattern,
                plan.region_offset_bytes,
                plan.block_bytes,
                plan.block_slots,
                seed,
            ),
            region_offset_bytes: plan.region_offset_bytes,
            logical_block_bytes: NonZeroU64::new(u64::from(logical_block_bytes)).unwrap_or(NonZeroU64::MIN),
            blocks_per_request: plan.blocks_per_request,
            block_bytes: plan.block_bytes,
            buffer_area,
            buffer_count: NonZeroU64::new(buffer_area.length_bytes as u64 / plan.block_bytes)
                .unwrap_or(NonZeroU64::MIN),
            mix: None,
        }
    }

    /// Buffer `tag` (modulo the buffers there are).
    #[inline(always)]
    fn buffer(&self, tag: u32) -> DmaBuffer {
        let buffer_offset = (u64::from(tag) % self.buffer_count) * self.block_bytes;
        DmaBuffer {
            cpu_address: self.buffer_area.cpu_address + buffer_offset as usize,
            physical_address: self.buffer_area.physical_address + buffer_offset,
            length_bytes: self.block_bytes as usize,
        }
    }

    #[inline(always)]
    fn io(&self, tag: u32, operation: Operation, offset_bytes: u64) -> Request {
        Request {
            tag,
            operation,
            lba: offset_bytes / self.logical_block_bytes,
            block_count: self.blocks_per_request,
            buffer: self.buffer(tag),
        }
    }

    /// The first LBA of a slot.
    fn slot_lba(&self, slot: u64) -> u64 {
        (self.region_offset_bytes + slot * self.block_bytes) / self.logical_block_bytes
    }

    /// The next read of a read job, into buffer `tag`.
    #[inline(always)]
    fn request(&mut self, tag: u32) -> Request {
        let offset_bytes = self.offsets.next_offset_bytes();
        self.io(tag, Operation::Read, offset_bytes)
    }

    /// The next request of a write or mixed job, on a slot with nothing in flight; `None` when
    /// no free slot turned up (the caller waits for a completion).
    fn mixed_request(&mut self, tag: u32, table: &mut SlotTable) -> Option<(Request, TagState)> {
        let slot = (0..SLOT_TRIES)
            .map(|_| (self.offsets.next_offset_bytes() - self.region_offset_bytes) / self.block_bytes)
            .find(|&slot| !table.is_busy(slot))?;
        let expected = table.start(slot);
        let mix = self.mix.as_mut()?;
        let is_read = mix.random.below(100) < mix.read_percent;
        let offset_bytes = self.region_offset_bytes + slot * self.block_bytes;
        let mut state = TagState { slot, expected, ..TagState::default() };
        if is_read {
            return Some((self.io(tag, Operation::Read, offset_bytes), state));
        }
        mix.next_sequence += 1;
        let (run_id, sequence, memory) = (mix.run_id, mix.next_sequence, mix.memory);
        state.operation = Operation::Write;
        state.sequence = sequence;
        let request = self.io(tag, Operation::Write, offset_bytes);
        let (lba, block_bytes) = (request.lba, self.logical_block_bytes.get() as usize);
        memory.with_bytes(&request.buffer, &mut |bytes| {
            written::fill_blocks(bytes, lba, block_bytes, run_id, sequence)
        });
        Some((request, state))
    }
}

/// The state of a run while it runs.
struct RunLoop<'r> {
    device: &'r mut dyn BlockDevice,
    device_name: &'r str,
    clock: &'r dyn Clock,
    /// The clock for the three timestamps of every I/O.
    ticks: TickSource<'r>,
    converter: TickConverter,
    queue_depth: usize,
    requests: RequestSource<'r>,
    scratch: &'r mut Scratch,
    measurements: &'r mut [Measurements; 2],
    flush: Option<FlushState>,
    checks: Option<WriteChecks<'r>>,
    /// On the heap: the meter's laps are calls that take its address, and the address of the
    /// run loop's own state would otherwise escape with it, so that every field is reloaded from
    /// memory after every lap.
    meter: Box<CpuMeter<'r>>,
    progress: ProgressLine<'r>,
    times: RunTimes,
    /// IOPS and bandwidth samples per direction ([`Direction`] as index).
    sampler: [RateSampler; 2],
    /// The direction whose results carry the job's queue-depth bands (reads, unless the job
    /// only writes).
    depth_direction: usize,
    /// fio's queue-depth bands, inside the window (formed when the result is made).
    depth: DepthTally,
    block_bytes: u64,
    next_progress: u64,
    next_pump: u64,
    /// The earliest of the sample, window end, progress and drain ticks ([`RunLoop::next_event`]).
    next_event_ticks: u64,
    in_flight: usize,
    /// Requests sent (counted per doorbell); less those in flight, the completions so far.
    sent: u64,
    unknown_completions: u64,
    held_back: Option<Request>,
    /// A request the driver refused in this pass (not for lack of room), with why.
    refused: Option<(Request, SubmitError)>,
    submitting: bool,
    ended_early: Option<RunEnd>,
    notes: Vec<String>,
    stall: StallWatch,
    trace: Option<&'r mut TraceRing>,
    checker: Option<ReadChecker<'r>>,
    /// Why `check=` asked for checks this run cannot make.
    check_skipped: Option<(u32, &'static str)>,
    /// Told at the progress line's pace, for the LED's heartbeat.
    conditions: Option<&'r dyn crate::conditions::ConditionsSource>,
}

/// What a finished run leaves besides its statistics.
struct RunOutcome<'r> {
    measurements: &'r [Measurements; 2],
    flush: Option<FlushResult>,
    verify: Option<VerifyOutcome>,
    region_id: Option<u64>,
    converter: TickConverter,
    times: RunTimes,
    sampler: [RateSampler; 2],
    depth_direction: usize,
    depth: DepthTally,
    end_ticks: u64,
    ended_early: Option<RunEnd>,
    notes: Vec<String>,
    cpu: crate::cpu_cost::CpuCost,
    check: Option<CheckSummary>,
}

impl<'r> RunLoop<'r> {
    fn new(
        device: &'r mut dyn BlockDevice,
        device_name: &'r str,
        environment: &RunEnvironment<'r>,
        (config, plan, label): (&Config, &'r DevicePlan, &RunLabel<'r>),
        (scratch, measurements): (&'r mut Scratch, &'r mut [Measurements; 2]),
    ) -> RunLoop<'r> {
        let progress = ProgressLine::new(
            device_name,
            label.job,
            plan,
            (label.run, label.runs),
            config.ramp_ns + config.runtime_ns,
            config.progress,
        );
        let logical_block_bytes = device.geometry().logical_block_bytes;
        let queue_depth = plan.queue_depth as usize;
        scratch.reset(queue_depth);
        measurements.iter_mut().for_each(Measurements::reset);
        let mut requests =
            RequestSource::new(plan, logical_block_bytes, label.job, label.seed, environment.buffer_area);
        let checks = Self::write_setup(environment, config, label, device_name, &mut requests);
        let flush = (checks.is_some() && label.job.flush_every_writes > 0).then(|| FlushState {
            support: device.flush_support(),
            every_writes: label.job.flush_every_writes,
            writes_since: 0,
            counted: 0,
            errors: 0,
            lat: LatencyAccumulator::new(),
            histogram: LatencyHistogram::new(),
        });
        let clock = environment.clock;
        let times = RunTimes::starting_now(clock, config);
        let meter = Box::new(CpuMeter::new(environment.cpu_counters));
        let sampler = RateSampler::new(
            times.ramp_end,
            times.window_ticks,
            clock.ns_to_ticks(config.sample_interval_ns),
        );
        // Write and mixed jobs check what they read back against what they wrote instead.
        let check_every = config.check_every(device_name).filter(|_| label.job.read_percent == 100);
        let (checker, check_skipped) = match check_every {
            None => (None, None),
            Some(every) => {
                match read_checker(environment, &requests, queue_depth, every, logical_block_bytes) {
                    Ok(checker) => (Some(checker), None),
                    Err(reason) => (None, Some((every, reason))),
                }
            }
        };
        RunLoop {
            device_name,
            device,
            clock,
            ticks: TickSource::new(clock),
            converter: TickConverter::new(clock.ticks_per_second()),
            queue_depth,
            requests,
            scratch,
            measurements,
            flush,
            checks,
            meter,
            progress,
            sampler: [sampler; 2],
            depth_direction: if label.job.read_percent > 0 { Direction::Read } else { Direction::Write }
                as usize,
            depth: DepthTally::default(),
            block_bytes: plan.block_bytes,
            next_progress: times.start + times.progress_interval_ticks,
            next_pump: times.start,
            next_event_ticks: times.start,
            stall: StallWatch { last_reading: times.start, identical_readings: 0 },
            times,
            in_flight: 0,
            sent: 0,
            unknown_completions: 0,
            held_back: None,
            refused: None,
            submitting: true,
            ended_early: None,
            notes: Vec::new(),
            trace: None,
            checker,
            check_skipped,
            conditions: environment.conditions,
        }
    }

    /// For a write or mixed job: the per-request mix and the checks (the runner has made sure
    /// the job may write here and given the scratch a slot table).
    fn write_setup(
        environment: &RunEnvironment<'r>,
        config: &Config,
        label: &RunLabel<'_>,
        device_name: &str,
        requests: &mut RequestSource<'r>,
    ) -> Option<WriteChecks<'r>> {
        let access = environment.writes.filter(|_| label.job.operation.is_write())?;
        let run_id = written::run_id(label.seed, label.run, label.device_index);
        requests.mix = Some(WriteMix {
            read_percent: u64::from(label.job.read_percent),
            random: RandomGenerator::new(run_id),
            run_id,
            next_sequence: 0,
            memory: access.memory,
        });
        let region_id =
            access.regions.iter().find(|r| r.device_name == device_name).map(|r| r.region.region_id);
        Some(WriteChecks {
            memory: access.memory,
            run_id,
            check_reads: config.write_verify,
            outcome: VerifyOutcome::default(),
            expected_block: alloc::vec![0; requests.logical_block_bytes.get() as usize],
            region_id,
        })
    }

    /// Requests that completed (with a tag that was in flight), failures included.
    fn completed(&self) -> u64 {
        self.sent - self.in_flight as u64
    }

    fn run(&mut self, console: &mut dyn Console) {
        let reads_only = self.trace.is_none() && self.checker.is_none() && self.checks.is_none();
        match (reads_only, self.ticks.generic_counter) {
            (true, true) => self.run_passes::<true, true>(console),
            (true, false) => self.run_passes::<true, false>(console),
            // Runs that write, trace or check have no cost target: one loop, the clock's method.
            (false, _) => self.run_passes::<false, false>(console),
        }
    }

    /// The loop: [`RunLoop::passes`], and what it hands back. `READS_ONLY`: the run only reads,
    /// with nothing to trace or check (every request is a read, and a completion is only counted
    /// and timed). `GENERIC_COUNTER`: the timestamps read the generic timer's counter inline
    /// ([`TickSource::now`]).
    fn run_passes<const READS_ONLY: bool, const GENERIC_COUNTER: bool>(&mut self, console: &mut dyn Console) {
        let mut handback = self.passes::<READS_ONLY, GENERIC_COUNTER>();
        loop {
            handback = match handback {
                Handback::ClockStalled { now } => {
                    let (end, message) =
                        (RunEnd::ClockStalled { ticks: now }, self.stall.stopped_message(now));
                    self.end_early(end, message, console);
                    return;
                }
                Handback::EventDue { now, completed } => {
                    if self.timed_events(now, console) {
                        self.meter.lap(pass_end(completed));
                        return;
                    }
                    match self.finish_pass::<READS_ONLY, GENERIC_COUNTER>(completed) {
                        Some(handback) => handback,
                        None => self.passes::<READS_ONLY, GENERIC_COUNTER>(),
                    }
                }
                Handback::Refused { did_io } => {
                    self.meter.lap(Account::Pending);
                    if let Some((request, error)) = self.refused.take() {
                        self.refuse(request, error, console);
                    }
                    self.meter.lap(Account::Excluded);
                    match self.close_pass(did_io) {
                        Some(handback) => handback,
                        None => self.passes::<READS_ONLY, GENERIC_COUNTER>(),
                    }
                }
                Handback::Drained { did_io } => {
                    self.meter.lap(pass_end(did_io));
                    return;
                }
            }
        }
    }

    /// Passes of the loop until one needs what this function must not do itself. It never hands
    /// the run loop's state (or a field's address) to code it does not inline, so the compiler
    /// knows that the driver's calls and the meter's laps cannot change that state and may keep
    /// it in registers across them; the rare work that needs more (the timed events, a refusal,
    /// the end) is [`RunLoop::run_passes`]'s.
    #[inline(never)]
    fn passes<const READS_ONLY: bool, const GENERIC_COUNTER: bool>(&mut self) -> Handback {
        loop {
            // One clock reading per pass, right after the poll: the completions' time when it
            // found any.
            let (now, completed) = self.reap::<READS_ONLY, GENERIC_COUNTER>();
            if self.stall.has_stopped(now) {
                return Handback::ClockStalled { now };
            }
            // Samples, the window's end, the progress line and the drain deadline: one compare
            // per pass until the earliest of them is due.
            if now >= self.next_event_ticks {
                return Handback::EventDue { now, completed };
            }
            if let Some(handback) = self.finish_pass::<READS_ONLY, GENERIC_COUNTER>(completed) {
                return handback;
            }
        }
    }

    /// The rest of a pass after its poll and timed events: submissions, then the lap that ends
    /// the pass, unless the loop must hand back.
    #[inline(always)]
    fn finish_pass<const READS_ONLY: bool, const GENERIC_COUNTER: bool>(
        &mut self,
        completed: bool,
    ) -> Option<Handback> {
        let did_io = (self.submitting && self.fill::<READS_ONLY, GENERIC_COUNTER>()) || completed;
        if self.refused.is_some() {
            return Some(Handback::Refused { did_io });
        }
        self.close_pass(did_io)
    }

    /// Ends a pass with its lap, or hands back when submissions have ended and nothing is in
    /// flight (the lap is then the caller's).
    #[inline(always)]
    fn close_pass(&mut self, did_io: bool) -> Option<Handback> {
        if !self.submitting && self.in_flight == 0 {
            return Some(Handback::Drained { did_io });
        }
        self.meter.lap(pass_end(did_io));
        None
    }

    /// What is due at `now`: IOPS and bandwidth samples, the end of submissions at the window's
    /// end, the progress line, the drain deadline. Returns whether the run must stop; sets the
    /// tick of the next event.
    fn timed_events(&mut self, now: u64, console: &mut dyn Console) -> bool {
        while now >= self.sampler[0].next_due_ticks {
            self.take_sample(now);
        }
        if self.submitting && now >= self.times.window_end {
            self.submitting = false;
        }
        let stop = self.end_of_pass(now, console);
        self.next_event_ticks = self.next_event();
        stop
    }

    /// The earliest tick at which [`RunLoop::timed_events`] has something to do. Only it changes
    /// what this depends on (a refused request ends submissions early, which only makes the
    /// real next event, the drain deadline, later than this one).
    fn next_event(&self) -> u64 {
        let mut next = self.sampler[0].next_due_ticks.min(self.next_progress);
        if self.progress.has_unsent() {
            next = next.min(self.next_pump);
        }
        next.min(if self.submitting { self.times.window_end } else { self.times.drain_deadline })
    }

    /// One IOPS and bandwidth sample (docs/fio-json.md §3), charged to nobody's CPU cost.
    fn take_sample(&mut self, now: u64) {
        self.meter.lap(Account::Pending);
        let ticks_per_second = self.converter.ticks_per_second;
        for (sampler, measurements) in self.sampler.iter_mut().zip(self.measurements.iter()) {
            sampler.sample(now, measurements.ios, self.block_bytes, ticks_per_second);
        }
        self.meter.lap(Account::Excluded);
    }

    /// Submits until the queue depth is in flight, then rings the doorbell once for the batch.
    /// Returns whether anything was submitted. A request the driver refuses (other than for lack
    /// of room with requests in flight) ends the batch and waits in `refused`.
    #[inline(always)]
    fn fill<const READS_ONLY: bool, const GENERIC_COUNTER: bool>(&mut self) -> bool {
        // The batch's tags are `scratch.batch[..batch_len]`; they are counted in flight at the
        // doorbell.
        let room = self.queue_depth - self.in_flight;
        let mut batch_len = 0;
        while batch_len < room {
            let Some(request) = self.next_request::<READS_ONLY>() else {
                break;
            };
            let submitted_at = self.ticks.now::<GENERIC_COUNTER>();
            self.meter.lap(Account::Pending);
            match self.device.submit(request) {
                Ok(()) => {
                    self.meter.lap(Account::Driver);
                    self.note_submitted(&request, submitted_at, batch_len);
                    batch_len += 1;
                }
                Err((request, SubmitError::QueueFull)) if self.in_flight + batch_len > 0 => {
                    self.meter.lap(Account::Pending);
                    self.held_back = Some(request);
                    break;
                }
                Err((request, error)) => {
                    self.meter.lap(Account::Excluded);
                    self.refused = Some((request, error));
                    break;
                }
            }
        }
        if batch_len == 0 {
            return false;
        }
        self.in_flight += batch_len;
        self.meter.lap(Account::Bookkeeping);
        self.device.kick();
        self.meter.lap(Account::Driver);
        let kicked_at = self.ticks.now::<GENERIC_COUNTER>();
        let Scratch { batch, tags, .. } = &mut *self.scratch;
        // A slice, so that its bounds are read once and not again after every store.
        let tags = tags.as_mut_slice();
        for &tag in batch.iter().take(batch_len) {
            tags[tag as usize].kicked_at_ticks = kicked_at;
        }
        self.sent += batch_len as u64;
        if self.times.in_window(kicked_at) {
            self.depth.record_kick(batch_len, self.in_flight);
        }
        true
    }

    /// The request the driver refused for lack of room last time, else a new one.
    #[inline(always)]
    fn next_request<const READS_ONLY: bool>(&mut self) -> Option<Request> {
        if self.held_back.is_some() {
            return self.held_back.take();
        }
        let tag = self.scratch.free_tags.pop()?;
        if READS_ONLY || self.checks.is_none() || self.scratch.table.is_none() {
            return Some(self.requests.request(tag));
        }
        if let Some(flush) = self.flush_due(tag) {
            return Some(flush);
        }
        let table = self.scratch.table.as_mut()?;
        let Some((request, state)) = self.requests.mixed_request(tag, table) else {
            self.scratch.free_tags.push(tag);
            return None;
        };
        self.scratch.tags[tag as usize] = state;
        if let (Operation::Write, Some(flush)) = (request.operation, &mut self.flush) {
            flush.writes_since += 1;
        }
        Some(request)
    }

    /// A flush request in `tag` when `flush=N` writes have been made since the last one. A
    /// device without a cache gets none: the flush is only counted.
    fn flush_due(&mut self, tag: u32) -> Option<Request> {
        let flush = self.flush.as_mut().filter(|flush| flush.writes_since >= flush.every_writes)?;
        flush.writes_since = 0;
        if let FlushSupport::NoCache(_) = flush.support {
            let now = self.clock.now_ticks();
            if now >= self.times.ramp_end && now < self.times.window_end {
                flush.counted += 1;
            }
            return None;
        }
        let state = TagState { operation: Operation::Flush, ..TagState::default() };
        self.scratch.tags[tag as usize] = state;
        let buffer = DmaBuffer { length_bytes: 0, ..self.requests.buffer(tag) };
        Some(Request { tag, operation: Operation::Flush, lba: 0, block_count: 0, buffer })
    }

    /// A request that was never sent leaves its slot as it was.
    fn release_unsent(&mut self, request: &Request) {
        let state = self.scratch.tags[request.tag as usize];
        if let (Some(table), Operation::Read | Operation::Write) =
            (self.scratch.table.as_mut(), state.operation)
        {
            if self.checks.is_some() {
                table.finish(state.slot, None);
            }
        }
    }

    /// Notes a request the driver took as the batch's `position`-th.
    fn note_submitted(&mut self, request: &Request, submitted_at: u64, position: usize) {
        let state = &mut self.scratch.tags[request.tag as usize];
        state.submitted_at_ticks = submitted_at;
        state.in_flight = true;
        (state.operation, state.lba, state.block_count) =
            (request.operation, request.lba, request.block_count);
        self.scratch.batch[position] = request.tag;
    }

    /// A refusal other than "queue full" with requests in flight ends the run's submissions.
    fn refuse(&mut self, request: Request, error: SubmitError, console: &mut dyn Console) {
        self.release_unsent(&request);
        self.scratch.free_tags.push(request.tag);
        let message = format!(
            "{name}: request for {} blocks at LBA {} refused ({}); this run ends here for {name}",
            request.block_count,
            request.lba,
            error.name(),
            name = self.device_name,
        );
        self.end_early(RunEnd::SubmitRefused { error, lba: request.lba }, message, console);
        self.submitting = false;
    }

    /// Polls once, reads the clock, and records what completed. Returns the clock reading and
    /// whether anything completed (at that reading); a poll that finds nothing is waiting, and
    /// its CPU time is no I/O's cost.
    #[inline(always)]
    fn reap<const READS_ONLY: bool, const GENERIC_COUNTER: bool>(&mut self) -> (u64, bool) {
        self.meter.lap(Account::Pending);
        let completions = &mut self.scratch.completions[..self.queue_depth];
        let count = match self.trace {
            Some(_) if !READS_ONLY => {
                self.device.poll_detailed(completions, &mut self.scratch.details[..self.queue_depth])
            }
            _ => self.device.poll(completions),
        };
        if count == 0 {
            self.meter.lap(Account::Excluded);
            return (self.ticks.now::<GENERIC_COUNTER>(), false);
        }
        self.meter.lap(Account::Driver);
        let done = self.ticks.now::<GENERIC_COUNTER>();
        let inside_window = self.times.in_window(done);
        if inside_window {
            self.depth.record_reap(count);
        }
        if READS_ONLY {
            self.complete_reads(count, done, inside_window);
            return (done, true);
        }
        for index in 0..count {
            let completion = self.scratch.completions[index];
            let known = self.complete(completion, done, inside_window);
            // The trace has what the run counts: successes in the window, failures whenever.
            let counted = inside_window || completion.result.is_err();
            if known && counted && self.trace.is_some() {
                self.record(completion, self.scratch.details[index], done);
            }
            if known && completion.result.is_ok() {
                self.check_read(completion.tag);
            }
        }
        // No lap here: the rest of a pass that completed I/O is bookkeeping, which the next lap
        // (before a submission, or the one that ends the pass) charges it to.
        (done, true)
    }

    /// The first `count` completions of a run that only reads: each frees its tag and is counted
    /// as a read. The scratch's parts are borrowed apart, so that a store to one does not make
    /// the compiler read the others' bounds again.
    #[inline(always)]
    fn complete_reads(&mut self, count: usize, done: u64, inside_window: bool) {
        let Scratch { completions, tags, free_tags, .. } = &mut *self.scratch;
        let tags = tags.as_mut_slice();
        let reads = &mut self.measurements[Direction::Read as usize];
        for completion in completions.iter().take(count) {
            match release_tag(tags, free_tags, completion.tag) {
                Some(state) => {
                    self.in_flight -= 1;
                    reads.count(self.converter, completion.result, state, done, inside_window);
                }
                None => self.unknown_completions += 1,
            }
        }
    }

    /// Frees the completion's tag and counts it; false for a tag that was not in flight.
    fn complete(&mut self, completion: Completion, done: u64, inside_window: bool) -> bool {
        let Some(state) = release_tag(&mut self.scratch.tags, &mut self.scratch.free_tags, completion.tag)
        else {
            self.unknown_completions += 1;
            return false;
        };
        self.in_flight -= 1;
        let direction = match state.operation {
            Operation::Flush => {
                self.complete_flush(completion, state.submitted_at_ticks, done, inside_window);
                return true;
            }
            Operation::Write => Direction::Write,
            Operation::Read => Direction::Read,
        };
        if self.checks.is_some() {
            let state = self.scratch.tags[completion.tag as usize];
            self.account_slot(completion, &state);
        }
        self.measurements[direction as usize].count(
            self.converter,
            completion.result,
            state,
            done,
            inside_window,
        );
        true
    }

    /// With `check=`, compares every N-th successful read with the test pattern, after its
    /// completion was time-stamped and before its buffer can be used again; the time it takes
    /// is measured apart and charged to no I/O.
    fn check_read(&mut self, tag: u32) {
        let Some(checker) = self.checker.as_mut() else {
            return;
        };
        if !checker.is_due() {
            return;
        }
        let state = self.scratch.tags[tag as usize];
        let buffer = self.requests.buffer(tag);
        self.meter.lap(Account::Bookkeeping);
        let started = self.clock.now_ticks();
        checker.check(state.lba, state.block_count, &buffer);
        checker.summary.check_ns += self.converter.ns(self.clock.now_ticks().saturating_sub(started));
        self.meter.lap(Account::Excluded);
    }

    /// Stores a command that completed in the window in the trace ring, metered apart.
    fn record(&mut self, completion: Completion, detail: CommandDetail, done: u64) {
        let Some(ring) = self.trace.as_deref_mut() else {
            return;
        };
        let Some(state) = self.scratch.tags.get(completion.tag as usize) else {
            return;
        };
        let status = match completion.result {
            Ok(()) => TraceStatus::Ok,
            Err(error) => TraceStatus::Failed { kind: error.kind, code: error.code },
        };
        self.meter.lap(Account::Bookkeeping);
        ring.record(
            (state.submitted_at_ticks, state.kicked_at_ticks, done),
            (state.operation, state.lba, state.block_count),
            detail,
            status,
        );
        self.meter.lap(Account::Recording);
    }

    fn complete_flush(&mut self, completion: Completion, submitted: u64, done: u64, inside_window: bool) {
        let Some(flush) = self.flush.as_mut().filter(|_| inside_window) else {
            return;
        };
        flush.counted += 1;
        match completion.result {
            Ok(()) => {
                let lat_ns = self.converter.ns(done.saturating_sub(submitted));
                flush.lat.record(lat_ns);
                flush.histogram.record(lat_ns);
            }
            Err(_) => flush.errors += 1,
        }
    }

    /// A write job's bookkeeping of what each slot holds, and the check of reads of slots
    /// written earlier in the run.
    fn account_slot(&mut self, completion: Completion, state: &TagState) {
        let (Some(table), Some(checks)) = (self.scratch.table.as_mut(), self.checks.as_mut()) else {
            return;
        };
        let succeeded = completion.result.is_ok();
        if state.operation == Operation::Write {
            table.finish(state.slot, Some((state.sequence, succeeded)));
            return;
        }
        table.finish(state.slot, None);
        let (Expected::Written { sequence }, true, true) = (state.expected, succeeded, checks.check_reads)
        else {
            return;
        };
        let buffer = self.requests.buffer(completion.tag);
        let lba = self.requests.slot_lba(state.slot);
        checks.check(&buffer, lba, self.requests.logical_block_bytes.get() as usize, sequence);
    }

    /// The progress line and the drain deadline; returns whether the run must stop. The
    /// progress line's work is nobody's CPU cost.
    fn end_of_pass(&mut self, now: u64, console: &mut dyn Console) -> bool {
        let progress_due = now >= self.next_progress;
        let pump_due = self.progress.has_unsent() && now >= self.next_pump;
        if progress_due || pump_due {
            self.meter.lap(Account::Pending);
            if progress_due {
                self.progress.update(self.converter.ns(now - self.times.start), self.completed());
                self.next_progress = now + self.times.progress_interval_ticks;
                // The heartbeat waits for nothing (a posted GPIO write at most) and is nobody's
                // CPU cost, like the progress line.
                if let Some(conditions) = self.conditions {
                    conditions.in_window_heartbeat();
                }
            }
            self.progress.pump(console);
            self.next_pump = now + self.times.pump_interval_ticks;
            self.meter.lap(Account::Excluded);
        }
        if self.submitting || self.in_flight == 0 || now < self.times.drain_deadline {
            return false;
        }
        let message = format!(
            "{name}: {} requests still in flight {} s after the window; {name} is not used again",
            self.in_flight,
            DRAIN_TIMEOUT_NS / NS_PER_S,
            name = self.device_name,
        );
        let ended = RunEnd::DrainTimeout {
            in_flight: self.in_flight as u32,
            waited_ns: self.converter.ns(now - self.times.window_end),
        };
        self.end_early(ended, message, console);
        true
    }

    /// Records why the run ended early and says so below the progress line.
    fn end_early(&mut self, end: RunEnd, message: String, console: &mut dyn Console) {
        self.ended_early = Some(end);
        self.progress.interrupt(console);
        let _ = writeln!(console, "{message}");
        self.notes.push(message);
    }

    /// After the run, outside the window: reads back every slot written in it, up to the queue
    /// depth at a time, and compares each block with what was written. Prints the outcome.
    fn verify_written(&mut self, console: &mut dyn Console) {
        if self.checks.is_none() || self.in_flight > 0 || self.ended_early.is_some() {
            return;
        }
        let Some(table) = self.scratch.table.take() else {
            return;
        };
        let deadline = self.clock.now_ticks() + self.clock.ns_to_ticks(DRAIN_TIMEOUT_NS);
        let mut next_slot = 0;
        let mut batch: Vec<(u64, u32)> = Vec::with_capacity(self.queue_depth);
        loop {
            batch.clear();
            while batch.len() < self.queue_depth {
                let Some((slot, sequence)) = table.next_written(next_slot) else { break };
                batch.push((slot, sequence));
                next_slot = slot + 1;
            }
            if batch.is_empty() || !self.verify_batch(&batch, deadline) {
                break;
            }
        }
        if let Some(checks) = &mut self.checks {
            checks.outcome.unknown_blocks = table.failed();
        }
        self.scratch.table = Some(table);
        self.say_verified(console);
    }

    /// Reads one batch back (tag i reads slot `batch[i]`); `false` when the device stopped
    /// answering before the deadline (the rest is not checked).
    fn verify_batch(&mut self, batch: &[(u64, u32)], deadline: u64) -> bool {
        let mut outstanding = 0usize;
        for (tag, &(slot, _)) in batch.iter().enumerate() {
            let offset_bytes = self.requests.region_offset_bytes + slot * self.requests.block_bytes;
            let request = self.requests.io(tag as u32, Operation::Read, offset_bytes);
            match self.device.submit(request) {
                Ok(()) => outstanding += 1,
                Err(_) => self.checks.as_mut().map_or((), |c| c.outcome.read_errors += 1),
            }
        }
        self.device.kick();
        let mut done = alloc::vec![false; batch.len()];
        while outstanding > 0 {
            if self.clock.now_ticks() >= deadline {
                return false;
            }
            let count = self.device.poll(&mut self.scratch.completions[..self.queue_depth]);
            for index in 0..count {
                let completion = self.scratch.completions[index];
                let tag = completion.tag as usize;
                if tag >= batch.len() || done[tag] {
                    continue;
                }
                done[tag] = true;
                outstanding -= 1;
                self.check_read_back(completion, batch[tag]);
            }
        }
        true
    }

    fn check_read_back(&mut self, completion: Completion, (slot, sequence): (u64, u32)) {
        let buffer = self.requests.buffer(completion.tag);
        let lba = self.requests.slot_lba(slot);
        let logical_block_bytes = self.requests.logical_block_bytes.get() as usize;
        let Some(checks) = self.checks.as_mut() else { return };
        match completion.result {
            Ok(()) => checks.check(&buffer, lba, logical_block_bytes, sequence),
            Err(_) => checks.outcome.read_errors += 1,
        }
    }

    fn say_verified(&mut self, console: &mut dyn Console) {
        let Some(checks) = &self.checks else { return };
        let outcome = &checks.outcome;
        let block = SizeText(self.requests.block_bytes);
        let message = if outcome.mismatches == 0 && outcome.read_errors == 0 {
            format!(
                "{}: verify: {} blocks of {block} read back and checked (written in this run, and \
                 reads of written blocks while measuring): all as written",
                self.device_name, outcome.blocks_checked
            )
        } else {
            format!(
                "{}: verify FAILED: {} of {} blocks of {block} differ from what was written (first at \
                 LBA {:?}), {} read-back errors",
                self.device_name,
                outcome.mismatches,
                outcome.blocks_checked,
                outcome.mismatch_lbas,
                outcome.read_errors
            )
        };
        self.progress.interrupt(console);
        let _ = writeln!(console, "{message}");
        self.notes.push(message);
    }

    /// The last progress update and the run's closing messages.
    fn finish(mut self, console: &mut dyn Console) -> RunOutcome<'r> {
        let end = self.clock.now_ticks();
        self.progress.finish(
            console,
            self.converter.ns(end.saturating_sub(self.times.start)),
            self.completed(),
        );
        let name = self.device_name;
        if self.unknown_completions > 0 {
            let message = format!(
                "{name}: {} completions carried a tag that was not in flight; ignored",
                self.unknown_completions
            );
            let _ = writeln!(console, "{message}");
            self.notes.push(message);
        }
        if self.measurements.iter().all(|m| m.ios == 0) {
            let errors: u64 = self.measurements.iter().flat_map(|m| m.errors.iter()).sum();
            let message = format!(
                "{name}: no I/O completed successfully in the measured window ({errors} failed); its \
                 figures are zero"
            );
            let _ = writeln!(console, "{message}");
            self.notes.push(message);
        }
        if let Some(request) = self.held_back.take() {
            self.release_unsent(&request);
        }
        if let Some(ring) = self.trace.take() {
            ring.set_recording_cost(self.meter.total(Account::Recording));
        }
        let check = self.report_checks(console);
        let completed = self.completed();
        RunOutcome {
            flush: self.flush.as_ref().map(FlushState::result),
            region_id: self.checks.as_ref().and_then(|checks| checks.region_id),
            verify: self.checks.map(|checks| checks.outcome),
            measurements: self.measurements,
            converter: self.converter,
            times: self.times,
            sampler: self.sampler,
            depth_direction: self.depth_direction,
            depth: self.depth,
            end_ticks: end,
            ended_early: self.ended_early,
            notes: self.notes,
            cpu: (*self.meter).finish(completed),
            check,
        }
    }

    /// The check line of the run, its first mismatches, and a note for each of them.
    fn report_checks(&mut self, console: &mut dyn Console) -> Option<CheckSummary> {
        let name = self.device_name;
        if let Some((every, reason)) = self.check_skipped {
            let message = format!("{name}: check={every} asked for, but no read is checked: {reason}");
            let _ = writeln!(console, "{message}");
            self.notes.push(message);
            return Some(CheckSummary { every, skipped: Some(reason), ..CheckSummary::default() });
        }
        let summary = self.checker.take()?.summary;
        for mismatch in &summary.first {
            let message = format!("{name}: MISMATCH: {mismatch}");
            let _ = writeln!(console, "{message}");
            self.notes.push(message);
        }
        let _ = writeln!(console, "{}", report::check_line(name, &summary));
        Some(summary)
    }
}

/// The checker of a run with `check=every`, or why there can be none: reads are checked only
/// where the CPU can see the buffers and each request in flight has a buffer of its own.
fn read_checker<'r>(
    environment: &RunEnvironment<'r>,
    requests: &RequestSource,
    queue_depth: usize,
    every: u32,
    logical_block_bytes: u32,
) -> Result<ReadChecker<'r>, &'static str> {
    let memory = environment.memory.ok_or("this kernel gives the benchmark no access to its buffers")?;
    if (requests.buffer_count.get() as usize) < queue_depth {
        return Err("requests share buffers (the buffer area is smaller than queue depth × block size)");
    }
    Ok(ReadChecker::new(memory, every, logical_block_bytes))
}

impl RunOutcome<'_> {
    /// A result per direction the job has (a mixed job has both); the write result carries
    /// the flushes and the checks.
    fn into_results(
        self,
        plan: &DevicePlan,
        label: &RunLabel<'_>,
        device_name: &str,
        keep_bins: bool,
    ) -> Vec<RunResult> {
        let read_percent = label.job.read_percent;
        let mut results = Vec::new();
        if read_percent > 0 {
            let mut read = self.result(Direction::Read, plan, label, device_name, keep_bins);
            read.check = self.check.clone();
            results.push(read);
        }
        if read_percent < 100 {
            let mut write = self.result(Direction::Write, plan, label, device_name, keep_bins);
            write.flushes = self.flush;
            write.verify = self.verify.clone();
            write.scratch_region_id = self.region_id;
            results.push(write);
        }
        results
    }

    fn result(
        &self,
        direction: Direction,
        plan: &DevicePlan,
        label: &RunLabel<'_>,
        device_name: &str,
        keep_bins: bool,
    ) -> RunResult {
        let measurements = &self.measurements[direction as usize];
        let sampler = &self.sampler[direction as usize];
        let bins =
            |histogram| if keep_bins { HistogramBins::of(histogram) } else { HistogramBins::default() };
        let mut clat_percentiles_ns = [0u64; FIO_DEFAULT_PERCENTILES.len()];
        let mut lat_percentiles_ns = [0u64; FIO_DEFAULT_PERCENTILES.len()];
        let ios = measurements.ios;
        let (clat, lat) = (measurements.clat.summary(ios), measurements.lat.summary(ios));
        let clat_extremes = (clat.min_ns, clat.max_ns);
        let lat_extremes = (lat.min_ns, lat.max_ns);
        measurements.clat_histogram.percentiles_ns(
            &FIO_DEFAULT_PERCENTILES,
            clat_extremes,
            &mut clat_percentiles_ns,
        );
        measurements.lat_histogram.percentiles_ns(
            &FIO_DEFAULT_PERCENTILES,
            lat_extremes,
            &mut lat_percentiles_ns,
        );
        RunResult {
            direction,
            job_index: label.job_index,
            job: *label.job,
            device_index: label.device_index,
            device_name: String::from(device_name),
            run: label.run,
            block_bytes: plan.block_bytes,
            queue_depth: plan.queue_depth,
            region_offset_bytes: plan.region_offset_bytes,
            region_size_bytes: plan.region_size_bytes,
            seed: label.seed,
            ramp_ns: self.converter.ns(self.times.ramp_ticks),
            window_ns: self.converter.ns(self.times.window_ticks),
            elapsed_ns: self.converter.ns(self.end_ticks.saturating_sub(self.times.start)),
            ios: measurements.ios,
            bytes: measurements.ios * plan.block_bytes,
            slat: measurements.slat.summary(ios),
            clat,
            lat,
            clat_percentiles_ns,
            lat_percentiles_ns,
            clat_bins: bins(&measurements.clat_histogram),
            lat_bins: bins(&measurements.lat_histogram),
            latency_bands: measurements.latency_bands,
            depth: if direction as usize == self.depth_direction {
                self.depth.counts()
            } else {
                DepthCounts::default()
            },
            iops_samples: sampler.iops(),
            bandwidth_kib_samples: sampler.bandwidth_kib(),
            errors: measurements.errors,
            first_error: measurements.first_error,
            ended_early: self.ended_early,
            cpu: self.cpu,
            notes: self.notes.clone(),
            flushes: None,
            verify: None,
            scratch_region_id: None,
            data_path: None,
            check: None,
            started_at_ticks: self.times.start,
            conditions: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_one_reading_of_the_clock_each() {
        let clock = blockdev::testing::SteppingClock::new(1_000_000, 5);
        let ticks = TickSource::new(&clock);
        assert!(!ticks.generic_counter);
        let first = ticks.now::<false>();
        assert_eq!(ticks.now::<false>(), first + 5, "one reading of the clock per timestamp");
    }

    #[test]
    fn the_three_latencies_are_each_difference_converted_alone() {
        for ticks_per_second in [1_000_000_000, 62_500_000, 54_000_000, 19_200_000, 3] {
            let converter = TickConverter::new(ticks_per_second);
            let mut random = RandomGenerator::new(ticks_per_second ^ 0x1a7);
            let limit = converter.multiply_up_to_ticks;
            let mut ticks =
                [0, 1, 2, limit, limit.wrapping_add(1), u64::MAX / NS_PER_S, u64::MAX - 1, u64::MAX].to_vec();
            ticks.extend((0..3000).map(|_| random.next_u64() >> random.below(64)));
            // In order, out of order (a timer that went back), equal, at and past the limit.
            for triple in ticks.windows(3) {
                let (submitted, kicked, done) = (triple[0], triple[1], triple[2]);
                for (s, k, d) in [
                    (submitted, kicked, done),
                    (0, submitted.min(kicked), submitted.max(kicked)),
                    (0, 0, limit.saturating_add(triple[2] % 3)),
                    (submitted, submitted, submitted),
                ] {
                    let expected = (
                        converter.ns(d.saturating_sub(s)),
                        converter.ns(d.saturating_sub(k)),
                        converter.ns(k.saturating_sub(s)),
                    );
                    assert_eq!(
                        converter.latencies_ns(s, k, d),
                        expected,
                        "{s} {k} {d} at {ticks_per_second} Hz"
                    );
                }
            }
        }
    }

    #[test]
    fn tick_conversion_matches_the_block_interfaces_at_every_rate() {
        // Whole ns per tick (1 GHz, 62.5 MHz, 1 MHz) and not (54 MHz, 19.2 MHz, 3 Hz).
        for ticks_per_second in [1_000_000_000, 62_500_000, 1_000_000, 54_000_000, 19_200_000, 3] {
            let converter = TickConverter::new(ticks_per_second);
            let mut random = RandomGenerator::new(ticks_per_second);
            let edges =
                [0, 1, 2, converter.multiply_up_to_ticks, u64::MAX / NS_PER_S, u64::MAX - 1, u64::MAX];
            let draws = (0..10_000).map(|_| random.next_u64() >> random.below(64));
            for ticks in
                edges.into_iter().flat_map(|t| [t.saturating_sub(1), t, t.saturating_add(1)]).chain(draws)
            {
                assert_eq!(
                    converter.ns(ticks),
                    blockdev::ticks_to_ns(ticks, ticks_per_second),
                    "{ticks} ticks at {ticks_per_second} Hz"
                );
            }
        }
    }
}
