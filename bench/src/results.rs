//! What the benchmark measured, as data the console report and the JSON writer read: runs and
//! their medians in unrounded fixed-point integers, and the facts the kernel passes about the
//! board and each device (docs/nvme-and-fio.md §3.4, §3.6).
//!
//! Rates are kept in millionths (IOPS × 10^6, bytes/s × 10^6) and latencies in thousandths of a
//! nanosecond, so medians are taken from the unrounded values; only printing rounds.

use alloc::string::String;
use alloc::vec::Vec;

use blockdev::{DataPath, IoErrorKind, SubmitError};

use crate::cpu_cost::{CounterStatus, CpuCost, CpuPerIo};
use crate::distributions::{DepthCounts, RateSummary, LATENCY_BANDS};
use crate::histogram::{
    bucket_value_ns, LatencyHistogram, FIO_DEFAULT_PERCENTILES, P50_INDEX, P99_9_INDEX, P99_INDEX,
};
use crate::settings::JobSpec;
use crate::stats::{LatencySummary, MILLI_PER_UNIT};
use crate::units::NS_PER_S;

/// Millionths per unit: the fixed-point scale of rates.
pub const MICRO_PER_UNIT: u128 = 1_000_000;

/// How medians are taken; printed with the summary and put in the JSON.
pub const MEDIAN_RULE: &str = "median of the runs for each metric independently; for an even \
     number of runs, the mean of the two middle values";

/// Facts the kernel passes for the report (the top-level `"barebench"` JSON object).
#[derive(Clone, Copy, Debug, Default)]
pub struct ReportContext<'a> {
    /// Board name as the kernel identified it (`"Raspberry Pi 5"`, `"qemu-virt"`).
    pub board: &'a str,
    /// `CNTFRQ_EL0`.
    pub timer_frequency_hz: u64,
    /// Any other facts, written as JSON strings.
    pub extra: &'a [(&'a str, &'a str)],
    /// What the kernel learned about devices before the benchmark, by device name.
    pub device_facts: &'a [DeviceFacts<'a>],
}

impl ReportContext<'_> {
    pub fn facts_of(&self, device_name: &str) -> Option<&DeviceFacts<'_>> {
        self.device_facts.iter().find(|facts| facts.device_name == device_name)
    }
}

/// What the kernel learned about one device before the first run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceFacts<'a> {
    pub device_name: &'a str,
    /// Spread reads over the benchmark's region, to catch a deallocated (never written) one.
    pub region_sample: Option<RegionSample>,
    /// How the device says it answers reads of deallocated blocks, in words (NVMe Identify
    /// Namespace DLFEAT bits 2:0).
    pub deallocated_read: Option<&'a str>,
}

/// The result of reading a few blocks spread over the region before the first run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionSample {
    pub region_offset_bytes: u64,
    pub region_size_bytes: u64,
    /// Reads attempted, and the bytes of each.
    pub reads: u32,
    pub read_bytes: u64,
    /// Reads that failed (error, timeout, or no data transferred).
    pub failed: u32,
    /// Every byte of every read that succeeded was zero (false when none succeeded).
    pub all_zero: bool,
}

impl RegionSample {
    /// Whether the region reads as never written: every read came back, all of it zeros.
    pub fn looks_deallocated(&self) -> bool {
        self.all_zero && self.failed < self.reads
    }
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
    /// Whether the CPU's counters gave the cpu-per-I/O figures, and why not.
    pub cycles_status: CounterStatus,
    pub instructions_status: CounterStatus,
    /// `jobs=scan`: one per device (crate::scan).
    pub scans: Vec<crate::stream_results::ScanResult>,
    /// `jobs=sustained`: one per device (crate::sustained).
    pub sustained: Vec<crate::stream_results::SustainedResult>,
    /// `preset=hdparm`: one per device and run (crate::hdparm).
    pub hdparm: Vec<crate::stream_results::HdparmResult>,
    /// Throttling, temperature, clocks and boot time, when the kernel reports them.
    pub conditions: Option<crate::conditions::BenchmarkConditions>,
}

impl BenchmarkResults {
    /// Whether the scans, sustained writes and hdparm timings ran without a failed I/O, a
    /// mismatch or an early end (the fio jobs' runs are the kernel's to judge).
    pub fn stream_jobs_clean(&self) -> bool {
        let scans = self.scans.iter().all(|scan| scan.errors_total() == 0 && scan.ended_early.is_none());
        let hdparm =
            self.hdparm.iter().all(|timing| timing.errors_total() == 0 && timing.ended_early.is_none());
        scans && hdparm && self.sustained.iter().all(|sustained| sustained.is_clean())
    }

    /// Runs whose reading after them reports throttling or under-voltage.
    pub fn throttled_runs(&self) -> impl Iterator<Item = &RunResult> {
        self.runs.iter().filter(|run| run.conditions.as_ref().is_some_and(|c| c.after.is_throttled()))
    }

    /// Whether throttling or under-voltage happened during the benchmark: after a run, or in the
    /// reading at the end (what `throttle=fail` fails on; flags only from before the first job,
    /// since boot, do not count).
    pub fn throttled_during(&self) -> bool {
        self.throttled_runs().next().is_some()
            || self
                .conditions
                .as_ref()
                .and_then(|c| c.after.as_ref())
                .is_some_and(crate::conditions::ConditionsReading::is_throttled)
    }
}

/// Why a run stopped before its window was over, or could not be drained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunEnd {
    /// The device refused a request with something other than "queue full" (or refused with
    /// "queue full" while nothing was in flight, so retrying could never succeed).
    SubmitRefused { error: SubmitError, lba: u64 },
    /// Requests were still in flight long after the window; the device is not used again.
    DrainTimeout { in_flight: u32, waited_ns: u64 },
    /// The timer returned the same value for [`crate::runner::STALLED_CLOCK_READINGS`]
    /// readings in a row; nothing more can be measured.
    ClockStalled { ticks: u64 },
}

impl RunEnd {
    /// A short, stable name for the JSON.
    pub fn reason(&self) -> &'static str {
        match self {
            RunEnd::SubmitRefused { .. } => "submit refused",
            RunEnd::DrainTimeout { .. } => "drain timeout",
            RunEnd::ClockStalled { .. } => "timer stopped",
        }
    }
}

/// Which I/Os a result counts: a mixed job gives one result per direction and run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum Direction {
    #[default]
    Read,
    Write,
}

impl Direction {
    /// fio's section name (`"read"`, `"write"`).
    pub fn name(self) -> &'static str {
        match self {
            Direction::Read => "read",
            Direction::Write => "write",
        }
    }
}

/// The flushes of a write run (sysbench reports them as fsyncs/s).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlushResult {
    /// Flushes due in the measured window (sent, or counted where there is no cache).
    pub count: u64,
    /// Whether flushes went to the device, or the device said it has no cache to flush.
    pub sent: bool,
    /// Submit → completion of the flushes sent in the window.
    pub lat: LatencySummary,
    pub lat_p99_ns: u64,
    pub errors: u64,
    /// Why no flush was sent (the device has no enabled volatile write cache).
    pub no_cache: Option<&'static str>,
}

/// One run: one device, one job, one repetition (one direction of a mixed job).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunResult {
    /// The I/Os this result counts.
    pub direction: Direction,
    pub job_index: usize,
    /// The job as configured.
    pub job: JobSpec,
    /// Index into the device slice given to the runner.
    pub device_index: usize,
    pub device_name: String,
    /// Repetition number, from 1.
    pub run: u32,
    /// Block size and queue depth used on this device (after rounding and clamping).
    pub block_bytes: u64,
    pub queue_depth: u32,
    pub region_offset_bytes: u64,
    pub region_size_bytes: u64,
    pub seed: u64,
    pub ramp_ns: u64,
    /// Length of the measured window.
    pub window_ns: u64,
    /// From the start of the ramp to the end of the drain.
    pub elapsed_ns: u64,
    /// Successful I/Os completed inside the window, and their bytes.
    pub ios: u64,
    pub bytes: u64,
    /// Submit → doorbell.
    pub slat: LatencySummary,
    /// Doorbell → completion seen (fio's clat).
    pub clat: LatencySummary,
    /// Submit → completion seen (fio's lat; what the console tables show).
    pub lat: LatencySummary,
    /// fio's default percentile list ([`FIO_DEFAULT_PERCENTILES`]), ns.
    pub clat_percentiles_ns: [u64; FIO_DEFAULT_PERCENTILES.len()],
    pub lat_percentiles_ns: [u64; FIO_DEFAULT_PERCENTILES.len()],
    /// The non-empty buckets of the clat and lat histograms (fio's json+ `bins`).
    pub clat_bins: HistogramBins,
    pub lat_bins: HistogramBins,
    /// Completions per fio latency band (`latency_ns`, `latency_us`, `latency_ms` in order).
    pub latency_bands: [u64; LATENCY_BANDS],
    /// fio's queue-depth bands inside the window.
    pub depth: DepthCounts,
    /// IOPS and bandwidth (KiB/s) sampled over fixed intervals of the window.
    pub iops_samples: RateSummary,
    pub bandwidth_kib_samples: RateSummary,
    /// Failed I/Os completed inside the window, indexed by [`IoErrorKind::index`].
    pub errors: [u64; IoErrorKind::ALL.len()],
    /// The kind of the first failed I/O in the window (fio's `first_error`).
    pub first_error: Option<IoErrorKind>,
    pub ended_early: Option<RunEnd>,
    /// CPU spent in the driver and in the benchmark's bookkeeping over the whole run.
    pub cpu: CpuCost,
    /// How the driver moved the run's data (commands, PIO fallbacks), for drivers that say.
    pub data_path: Option<DataPath>,
    /// What `check=` found, when the run checked its reads (or was asked to).
    pub check: Option<crate::pattern_check::CheckSummary>,
    /// Messages about this run, as printed.
    pub notes: Vec<String>,
    /// The run's flushes (write results of jobs with `flush=`).
    pub flushes: Option<FlushResult>,
    /// What checking the written data found (write results with `write.verify=on`).
    pub verify: Option<crate::written::VerifyOutcome>,
    /// The scratch region's id (write results).
    pub scratch_region_id: Option<u64>,
    /// The timer when the run's first I/O was submitted (the ramp's start), in its ticks.
    pub started_at_ticks: u64,
    /// The machine's conditions after the run and the `cooldown=` wait before it.
    pub conditions: Option<crate::conditions::RunConditions>,
}

impl RunResult {
    /// I/Os per second × 10^6.
    pub fn iops_micro(&self) -> u128 {
        per_second_micro(u128::from(self.ios), self.window_ns)
    }

    /// Bytes per second × 10^6.
    pub fn bandwidth_micro(&self) -> u128 {
        per_second_micro(u128::from(self.bytes), self.window_ns)
    }

    /// Failed I/Os of every kind plus the reads `check=` found differing from the pattern.
    pub fn errors_total(&self) -> u64 {
        self.errors.iter().sum::<u64>() + self.check_mismatches()
    }

    /// Reads `check=` found differing from the test pattern.
    pub fn check_mismatches(&self) -> u64 {
        self.check.as_ref().map_or(0, |check| check.mismatches)
    }

    /// Flushes per second × 10^6 (0 without flushes).
    pub fn flushes_micro(&self) -> u128 {
        self.flushes.map_or(0, |flushes| per_second_micro(u128::from(flushes.count), self.window_ns))
    }
}

/// The non-empty buckets of a latency histogram as (bucket value in ns, count), ascending: fio's
/// json+ `bins` (docs/fio-json.md §4).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistogramBins(pub Vec<(u64, u64)>);

impl HistogramBins {
    pub fn of(histogram: &LatencyHistogram) -> HistogramBins {
        let counts = histogram.counts().iter().enumerate();
        HistogramBins(
            counts
                .filter(|(_, &count)| count > 0)
                .map(|(index, &count)| (bucket_value_ns(index), count))
                .collect(),
        )
    }
}

/// `amount / window` per second, × 10^6; 0 for an empty window.
fn per_second_micro(amount: u128, window_ns: u64) -> u128 {
    if window_ns == 0 {
        return 0;
    }
    amount * MICRO_PER_UNIT * u128::from(NS_PER_S) / u128::from(window_ns)
}

/// The median over the runs of one device and job, each metric independently.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MedianResult {
    pub direction: Direction,
    pub job_index: usize,
    pub job: JobSpec,
    pub device_index: usize,
    pub device_name: String,
    pub block_bytes: u64,
    pub queue_depth: u32,
    /// Runs the median is taken over.
    pub runs: u32,
    pub iops_micro: u128,
    pub bandwidth_micro: u128,
    pub clat_mean_milli_ns: u128,
    pub clat_p50_milli_ns: u128,
    pub clat_p99_milli_ns: u128,
    pub clat_p99_9_milli_ns: u128,
    pub lat_mean_milli_ns: u128,
    pub lat_p50_milli_ns: u128,
    pub lat_p99_milli_ns: u128,
    pub lat_p99_9_milli_ns: u128,
    pub lat_max_milli_ns: u128,
    /// Failed I/Os summed over the runs (a count, not a median).
    pub errors_total: u64,
    /// The median of the runs' CPU cost per I/O, figure by figure (over the runs that have it).
    pub cpu_per_io: CpuPerIo,
    /// Flushes per second × 10^6, flush latency mean and p99 (runs with flushes only).
    pub flushes_micro: Option<u128>,
    pub flush_lat_mean_milli_ns: Option<u128>,
    pub flush_lat_p99_milli_ns: Option<u128>,
    /// Why flushes were only counted (the device has no cache to flush).
    pub flush_no_cache: Option<&'static str>,
    /// Verification mismatches summed over the runs (write results with verification).
    pub verify_mismatches: Option<u64>,
    /// Commands and PIO fallbacks summed over the runs (counts, not medians).
    pub data_path: Option<DataPath>,
    /// Runs after which the firmware reported throttling or under-voltage (`None` when the
    /// runs carry no conditions).
    pub throttled_runs: Option<u32>,
}

/// The median of `values` ([`MEDIAN_RULE`]): the middle value, or for an even count the mean
/// of the two middle values rounded half up in the last fixed-point digit. 0 when empty.
pub fn median(values: &mut [u128]) -> u128 {
    if values.is_empty() {
        return 0;
    }
    values.sort_unstable();
    let middle = values.len() / 2;
    if values.len() % 2 == 1 {
        values[middle]
    } else {
        let (lower, upper) = (values[middle - 1], values[middle]);
        // ⌈(lower + upper) / 2⌉ without overflow.
        lower / 2 + upper / 2 + (lower % 2 + upper % 2).div_ceil(2)
    }
}

/// The medians of every (job, device, direction) in `runs`, by job, then device index, then
/// direction (read first).
pub fn medians_of(runs: &[RunResult]) -> Vec<MedianResult> {
    let mut keys: Vec<(usize, usize, Direction)> =
        runs.iter().map(|run| (run.job_index, run.device_index, run.direction)).collect();
    keys.sort_unstable();
    keys.dedup();
    keys.into_iter()
        .filter_map(|(job_index, device_index, direction)| {
            let group: Vec<&RunResult> = runs
                .iter()
                .filter(|r| {
                    r.job_index == job_index && r.device_index == device_index && r.direction == direction
                })
                .collect();
            median_of_group(&group)
        })
        .collect()
}

/// The median of a figure over the runs that have it.
fn median_where(group: &[&RunResult], value: &dyn Fn(&RunResult) -> Option<u128>) -> Option<u128> {
    let mut values: Vec<u128> = group.iter().filter_map(|run| value(run)).collect();
    (!values.is_empty()).then(|| median(&mut values))
}

fn median_of_group(group: &[&RunResult]) -> Option<MedianResult> {
    let first = group.first()?;
    let metric = |value: &dyn Fn(&RunResult) -> u128| {
        let mut values: Vec<u128> = group.iter().map(|run| value(run)).collect();
        median(&mut values)
    };
    let ns = |value: u64| u128::from(value) * MILLI_PER_UNIT;
    let measured = |value: &dyn Fn(&CpuPerIo) -> Option<u128>| {
        let mut values: Vec<u128> = group.iter().filter_map(|run| value(&run.cpu.per_io())).collect();
        (!values.is_empty()).then(|| median(&mut values))
    };
    let flush_ns = |run: &RunResult, value: &dyn Fn(&FlushResult) -> u128| run.flushes.map(|f| value(&f));
    Some(MedianResult {
        direction: first.direction,
        flushes_micro: median_where(group, &|r| r.flushes.map(|_| r.flushes_micro())),
        flush_lat_mean_milli_ns: median_where(group, &|r| flush_ns(r, &|f| f.lat.mean_milli_ns)),
        flush_lat_p99_milli_ns: median_where(group, &|r| flush_ns(r, &|f| ns(f.lat_p99_ns))),
        flush_no_cache: group.iter().find_map(|run| run.flushes.and_then(|f| f.no_cache)),
        verify_mismatches: group
            .iter()
            .filter_map(|run| run.verify.as_ref().map(|v| v.mismatches))
            .reduce(|a, b| a + b),
        job_index: first.job_index,
        job: first.job,
        device_index: first.device_index,
        device_name: first.device_name.clone(),
        block_bytes: first.block_bytes,
        queue_depth: first.queue_depth,
        runs: group.len() as u32,
        iops_micro: metric(&|r| r.iops_micro()),
        bandwidth_micro: metric(&|r| r.bandwidth_micro()),
        clat_mean_milli_ns: metric(&|r| r.clat.mean_milli_ns),
        clat_p50_milli_ns: metric(&|r| ns(r.clat_percentiles_ns[P50_INDEX])),
        clat_p99_milli_ns: metric(&|r| ns(r.clat_percentiles_ns[P99_INDEX])),
        clat_p99_9_milli_ns: metric(&|r| ns(r.clat_percentiles_ns[P99_9_INDEX])),
        lat_mean_milli_ns: metric(&|r| r.lat.mean_milli_ns),
        lat_p50_milli_ns: metric(&|r| ns(r.lat_percentiles_ns[P50_INDEX])),
        lat_p99_milli_ns: metric(&|r| ns(r.lat_percentiles_ns[P99_INDEX])),
        lat_p99_9_milli_ns: metric(&|r| ns(r.lat_percentiles_ns[P99_9_INDEX])),
        lat_max_milli_ns: metric(&|r| ns(r.lat.max_ns)),
        errors_total: group.iter().map(|r| r.errors_total()).sum(),
        cpu_per_io: CpuPerIo {
            driver_instructions_milli: measured(&|c| c.driver_instructions_milli),
            driver_cycles_milli: measured(&|c| c.driver_cycles_milli),
            bookkeeping_instructions_milli: measured(&|c| c.bookkeeping_instructions_milli),
            bookkeeping_cycles_milli: measured(&|c| c.bookkeeping_cycles_milli),
        },
        data_path: summed_data_path(group),
        throttled_runs: group.iter().any(|run| run.conditions.is_some()).then(|| {
            group.iter().filter(|run| run.conditions.as_ref().is_some_and(|c| c.after.is_throttled())).count()
                as u32
        }),
    })
}

/// The runs' data paths added up (`None` when no run has one).
fn summed_data_path(group: &[&RunResult]) -> Option<DataPath> {
    group.iter().filter_map(|run| run.data_path).reduce(|total, path| DataPath {
        mode: total.mode,
        commands: total.commands + path.commands,
        pio_fallbacks: total.pio_fallbacks + path.pio_fallbacks,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::settings::JobOperation;
    use std::vec;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut []), 0);
        assert_eq!(median(&mut [7]), 7);
        assert_eq!(median(&mut [9, 1, 5]), 5);
        assert_eq!(median(&mut [4, 1, 3, 2]), 3); // (2 + 3) / 2 = 2.5 → rounds half up
        assert_eq!(median(&mut [10, 20]), 15);
        assert_eq!(median(&mut [u128::MAX, u128::MAX - 2]), u128::MAX - 1);
        assert_eq!(median(&mut [1, 100, 2, 1000, 3]), 3);
    }

    pub(crate) fn run_result(device_index: usize, run: u32, ios: u64, lat_ns: u64) -> RunResult {
        let latency = LatencySummary {
            samples: ios,
            min_ns: lat_ns,
            max_ns: lat_ns * 2,
            mean_milli_ns: u128::from(lat_ns) * 1000,
            stddev_milli_ns: 0,
        };
        RunResult {
            direction: Direction::Read,
            flushes: None,
            verify: None,
            scratch_region_id: None,
            job_index: 0,
            job: JobSpec::new(JobOperation::RandRead, 4096, 1),
            device_index,
            device_name: ["nvme0", "sd0"][device_index].into(),
            run,
            block_bytes: 4096,
            queue_depth: 1,
            region_offset_bytes: 0,
            region_size_bytes: 1 << 20,
            seed: 1,
            ramp_ns: 0,
            window_ns: NS_PER_S,
            elapsed_ns: NS_PER_S,
            ios,
            bytes: ios * 4096,
            slat: LatencySummary::default(),
            clat: latency,
            lat: latency,
            clat_percentiles_ns: [lat_ns; 17],
            lat_percentiles_ns: [lat_ns; 17],
            clat_bins: HistogramBins::default(),
            lat_bins: HistogramBins::default(),
            latency_bands: [0; LATENCY_BANDS],
            depth: DepthCounts::default(),
            iops_samples: RateSummary::default(),
            bandwidth_kib_samples: RateSummary::default(),
            errors: [0, 1, 0, 0, 0, 0, 0],
            first_error: Some(IoErrorKind::Crc),
            ended_early: None,
            cpu: CpuCost::default(),
            data_path: None,
            check: None,
            notes: vec![],
            started_at_ticks: 0,
            conditions: None,
        }
    }

    #[test]
    fn data_paths_are_summed_over_the_runs() {
        let path =
            |commands, pio_fallbacks| Some(DataPath { mode: "ADMA2 (32-bit)", commands, pio_fallbacks });
        let mut runs = vec![run_result(1, 1, 10, 100), run_result(1, 2, 10, 100), run_result(1, 3, 10, 100)];
        runs[0].data_path = path(100, 0);
        runs[1].data_path = path(120, 3);
        runs[2].data_path = path(90, 1);
        assert_eq!(medians_of(&runs)[0].data_path, path(310, 4));
        assert_eq!(medians_of(&[run_result(0, 1, 10, 100)])[0].data_path, None);
    }

    #[test]
    fn medians_are_per_metric_and_per_device() {
        // Run 2 has the most I/Os but run 3 has the lowest latency: each metric independently.
        let runs = vec![
            run_result(0, 1, 1000, 300),
            run_result(1, 1, 10, 90_000),
            run_result(0, 2, 3000, 200),
            run_result(1, 2, 30, 70_000),
            run_result(0, 3, 2000, 100),
        ];
        let medians = medians_of(&runs);
        assert_eq!(medians.len(), 2);
        let nvme = &medians[0];
        assert_eq!((nvme.device_name.as_str(), nvme.runs), ("nvme0", 3));
        assert_eq!(nvme.iops_micro, 2000 * MICRO_PER_UNIT);
        assert_eq!(nvme.bandwidth_micro, 2000 * 4096 * MICRO_PER_UNIT);
        assert_eq!(nvme.lat_mean_milli_ns, 200_000);
        assert_eq!(nvme.lat_max_milli_ns, 400_000);
        assert_eq!(nvme.errors_total, 3);
        let sd = &medians[1];
        assert_eq!(sd.runs, 2);
        assert_eq!(sd.iops_micro, 20 * MICRO_PER_UNIT);
        assert_eq!(sd.lat_p99_milli_ns, 80_000_000);
        assert_eq!(sd.cpu_per_io, CpuPerIo::default(), "no counters, no figures");
    }

    #[test]
    fn cpu_cost_medians_are_per_figure_over_the_runs_that_measured_it() {
        let cost = |ios, driver_instructions, counted| CpuCost {
            ios,
            driver: crate::cpu_cost::CounterTotals { instructions: driver_instructions, cycles: 3 * ios },
            bookkeeping: crate::cpu_cost::CounterTotals { instructions: ios, cycles: ios },
            whole_run: crate::cpu_cost::CounterTotals::default(),
            instructions_counted: counted,
            cycles_counted: true,
        };
        let mut runs = vec![run_result(0, 1, 10, 1), run_result(0, 2, 10, 1), run_result(0, 3, 10, 1)];
        runs[0].cpu = cost(10, 4_000, true); // 400 per I/O
        runs[1].cpu = cost(20, 5_000, true); // 250 per I/O
        runs[2].cpu = cost(30, 0, false);
        let median = &medians_of(&runs)[0];
        // Instructions: the two runs that counted them, (250 + 400) / 2; cycles: all three.
        assert_eq!(median.cpu_per_io.driver_instructions_milli, Some(325_000));
        assert_eq!(median.cpu_per_io.driver_cycles_milli, Some(3_000));
        assert_eq!(median.cpu_per_io.bookkeeping_instructions_milli, Some(1_000));
    }

    #[test]
    fn a_region_reads_as_deallocated_when_the_reads_that_came_back_are_all_zeros() {
        let sample = RegionSample {
            region_offset_bytes: 0,
            region_size_bytes: 1 << 20,
            reads: 64,
            read_bytes: 4096,
            failed: 0,
            all_zero: true,
        };
        assert!(sample.looks_deallocated());
        assert!(!RegionSample { all_zero: false, ..sample }.looks_deallocated());
        assert!(!RegionSample { failed: 64, ..sample }.looks_deallocated());
    }

    #[test]
    fn rates_of_an_empty_window_are_zero() {
        let mut run = run_result(0, 1, 5, 100);
        run.window_ns = 0;
        assert_eq!(run.iops_micro(), 0);
        assert_eq!(run.bandwidth_micro(), 0);
        // 5 I/Os in 3 s: 1.666666… IOPS, kept to the millionth.
        run.window_ns = 3 * NS_PER_S;
        assert_eq!(run.iops_micro(), 1_666_666);
    }
}
