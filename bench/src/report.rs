//! Console output for people: run lines, per-job tables with the CPU cost per I/O, warnings
//! about the devices, the summary and device ratios (docs/architecture.md "Output"). It reads the
//! results as data ([`crate::results`]); the progress line is [`crate::console`]'s.
//!
//! Latencies in the tables are submit → completion (fio's `lat`), in µs with one decimal below
//! 10 ms and whole µs above. Console write errors are ignored: there is nowhere to report them.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use blockdev::IoErrorKind;
use core::fmt::{self, Write};

use crate::cpu_cost::{CounterStatus, CpuPerIo};
use crate::histogram::{P50_INDEX, P99_9_INDEX, P99_INDEX};
use crate::plan::DevicePlan;
use crate::results::{
    BenchmarkResults, Direction, MedianResult, ReportContext, RunResult, MEDIAN_RULE, MICRO_PER_UNIT,
};
use crate::settings::{Config, JobSpec};
use crate::stats::MILLI_PER_UNIT;
use crate::units::{DurationText, Fixed, LatencyMicros, SizeText, MIB};

/// The opening lines: what will run.
pub fn print_start(console: &mut dyn fmt::Write, config: &Config, device_names: &[String]) {
    let _ = writeln!(
        console,
        "barebench {}: {} jobs × {} devices × {} runs (device order alternates between runs); \
         ramp {} then {} measured; region {} at offset {}; seed {}",
        env!("CARGO_PKG_VERSION"),
        config.jobs.len(),
        device_names.len(),
        config.runs,
        DurationText(config.ramp_ns),
        DurationText(config.runtime_ns),
        SizeText(config.size_bytes),
        SizeText(config.offset_bytes),
        config.seed
    );
    let _ = writeln!(console, "settings: {config}");
    if device_names.is_empty() {
        let _ = writeln!(console, "no devices to run");
    } else {
        let _ = write!(console, "devices:");
        for name in device_names {
            let _ = write!(console, " {name}");
        }
        let _ = writeln!(console);
    }
}

/// The line before each job's messages and runs.
pub fn print_job_header(console: &mut dyn fmt::Write, job: &JobSpec, job_number: usize, jobs: usize) {
    let _ = writeln!(console, "\njob {job_number}/{jobs}: {job}");
}

/// The line before each run.
pub fn print_run_header(
    console: &mut dyn fmt::Write,
    job: &JobSpec,
    plan: &DevicePlan,
    device_name: &str,
    (run, runs): (u32, u32),
    config: &Config,
) {
    let _ = writeln!(
        console,
        "run {run}/{runs}: {} {} qd{} on {device_name}, region {} at offset {}, ramp {} then {} \
         measured",
        job.operation.fio_name(),
        SizeText(plan.block_bytes),
        plan.queue_depth,
        SizeText(plan.region_size_bytes),
        SizeText(plan.region_offset_bytes),
        DurationText(config.ramp_ns),
        DurationText(config.runtime_ns),
    );
}

fn mib_per_s(bandwidth_micro: u128) -> Fixed {
    Fixed::new(bandwidth_micro / u128::from(MIB), 6).rounded_to(1)
}

fn mb_per_s(bandwidth_micro: u128) -> Fixed {
    // bytes/s × 10^6 / 10^6 = bytes/s, which is MB/s with six decimals.
    Fixed::new(bandwidth_micro / MICRO_PER_UNIT, 6).rounded_to(1)
}

fn iops(iops_micro: u128) -> Fixed {
    Fixed::new(iops_micro, 6).rounded_to(0)
}

fn micros(milli_ns: u128) -> LatencyMicros {
    LatencyMicros { milli_ns }
}

fn ns_to_milli(ns: u64) -> u128 {
    u128::from(ns) * MILLI_PER_UNIT
}

const JOB_TABLE_HEADER: &str = "job          bs    qd  device       run      MiB/s       IOPS    \
     mean µs     p50 µs     p99 µs   p99.9 µs     max µs  errors";

/// The table after a job: a row per device and run, then the device's median row.
pub fn print_job_table(
    console: &mut dyn fmt::Write,
    job: &JobSpec,
    runs: &[RunResult],
    medians: &[MedianResult],
    device_names: &[String],
) {
    let _ = writeln!(
        console,
        "\nresults for {job} (latency = submit to completion; median row: each column's median, \
         errors summed)"
    );
    let _ = writeln!(console, "{JOB_TABLE_HEADER}");
    for name in device_names {
        let mut device_runs: alloc::vec::Vec<&RunResult> =
            runs.iter().filter(|r| &r.device_name == name).collect();
        device_runs.sort_by_key(|r| r.run);
        for run in device_runs {
            let row = JobRow {
                run_label: RunLabel::Run(run.run),
                bandwidth_micro: run.bandwidth_micro(),
                iops_micro: run.iops_micro(),
                mean_milli_ns: run.lat.mean_milli_ns,
                p50_milli_ns: ns_to_milli(run.lat_percentiles_ns[P50_INDEX]),
                p99_milli_ns: ns_to_milli(run.lat_percentiles_ns[P99_INDEX]),
                p99_9_milli_ns: ns_to_milli(run.lat_percentiles_ns[P99_9_INDEX]),
                max_milli_ns: ns_to_milli(run.lat.max_ns),
                errors: run.errors_total(),
            };
            row.write(
                console,
                &OperationLabel(&run.job, run.direction),
                run.block_bytes,
                run.queue_depth,
                name,
            );
        }
        for median in medians.iter().filter(|m| &m.device_name == name) {
            let row = JobRow {
                run_label: RunLabel::Median,
                bandwidth_micro: median.bandwidth_micro,
                iops_micro: median.iops_micro,
                mean_milli_ns: median.lat_mean_milli_ns,
                p50_milli_ns: median.lat_p50_milli_ns,
                p99_milli_ns: median.lat_p99_milli_ns,
                p99_9_milli_ns: median.lat_p99_9_milli_ns,
                max_milli_ns: median.lat_max_milli_ns,
                errors: median.errors_total,
            };
            row.write(
                console,
                &OperationLabel(&median.job, median.direction),
                median.block_bytes,
                median.queue_depth,
                name,
            );
        }
    }
    for name in device_names {
        print_errors_by_kind(console, name, runs.iter().filter(|r| &r.device_name == name));
    }
    print_flushes(console, medians);
}

/// A line per device whose job flushes: flushes per second and their latency (sysbench's
/// fsyncs/s), or that there was no cache to flush.
fn print_flushes(console: &mut dyn fmt::Write, medians: &[MedianResult]) {
    for median in medians.iter().filter(|m| m.direction == Direction::Write && m.job.flush_every_writes > 0) {
        let Some(flushes_micro) = median.flushes_micro else { continue };
        let every = median.job.flush_every_writes;
        let _ = match (median.flush_lat_mean_milli_ns, median.flush_no_cache) {
            (_, Some(reason)) => writeln!(
                console,
                "{:<8} flushes/s {} counted, none sent: {reason}, so there is no cache to flush (one \
                 due after every {every} writes)",
                median.device_name,
                iops(flushes_micro),
            ),
            (mean, None) => writeln!(
                console,
                "{:<8} flushes/s {} (one after every {every} writes), flush latency mean {} µs, p99 {} µs",
                median.device_name,
                iops(flushes_micro),
                micros(mean.unwrap_or(0)),
                micros(median.flush_lat_p99_milli_ns.unwrap_or(0)),
            ),
        };
    }
}

/// The operation column: fio's name, with the direction for mixed jobs (`randrw read`).
struct OperationLabel<'a>(&'a JobSpec, Direction);

impl fmt::Display for OperationLabel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.0.operation.fio_name();
        let text: alloc::string::String = if self.0.operation.is_mixed() {
            alloc::format!("{name} {}", self.1.name())
        } else {
            name.into()
        };
        f.pad(&text)
    }
}

/// Whether `median` is the first of its job's results on its device: a mixed job has a read and
/// a write result from the same runs, whose CPU cost and data path are the same figures.
fn first_direction_of_job(median: &MedianResult) -> bool {
    !(median.job.operation.is_mixed() && median.direction == Direction::Write)
}

/// `nvme0    failed I/Os by kind, all runs: 37 media, 2 timeout` for a device whose runs had
/// failures; nothing otherwise.
fn print_errors_by_kind<'r>(
    console: &mut dyn fmt::Write,
    device_name: &str,
    runs: impl Iterator<Item = &'r RunResult>,
) {
    let mut totals = [0u64; IoErrorKind::ALL.len()];
    for run in runs {
        for (total, count) in totals.iter_mut().zip(run.errors) {
            *total += count;
        }
    }
    if totals.iter().all(|count| *count == 0) {
        return;
    }
    let _ = write!(console, "{device_name:<8} failed I/Os by kind, all runs:");
    let mut separator = " ";
    for kind in IoErrorKind::ALL.iter().filter(|kind| totals[kind.index()] > 0) {
        let _ = write!(console, "{separator}{} {}", totals[kind.index()], kind.name());
        separator = ", ";
    }
    let _ = writeln!(console);
}

/// The CPU cost per I/O of each device in a job: the median of its runs.
pub fn print_cpu_cost(console: &mut dyn fmt::Write, medians: &[MedianResult], results: &BenchmarkResults) {
    for median in medians.iter().filter(|median| first_direction_of_job(median)) {
        let _ = writeln!(
            console,
            "{:<8} {}",
            median.device_name,
            CpuCostText {
                per_io: &median.cpu_per_io,
                cycles: results.cycles_status,
                instructions: results.instructions_status,
            }
        );
    }
}

/// How each device in a job moved its data, summed over the runs:
/// `sd0      data path: ADMA2 (32-bit), 1240 commands, 0 by PIO instead`.
pub fn print_data_paths(console: &mut dyn fmt::Write, medians: &[MedianResult]) {
    for median in medians.iter().filter(|median| first_direction_of_job(median)) {
        if let Some(path) = median.data_path {
            let _ = writeln!(
                console,
                "{:<8} data path: {}, {} commands, {} by PIO instead",
                median.device_name, path.mode, path.commands, path.pio_fallbacks
            );
        }
    }
}

/// The warning after a run in which some commands did not move their data the device's way.
pub fn pio_fallback_note(device_name: &str, path: &blockdev::DataPath) -> String {
    format!(
        "warning: {device_name}: {} of {} commands moved their data by PIO, not {} (a buffer the DMA \
         engine cannot use); this run measured both",
        path.pio_fallbacks, path.commands, path.mode
    )
}

/// After a run with `check=`: `sd0      check: 40 of the reads checked (every 64th), 0
/// mismatches; 3.2 µs per check (160 KiB compared)`.
pub fn check_line(device_name: &str, summary: &crate::pattern_check::CheckSummary) -> String {
    format!(
        "{device_name:<8} check: {} reads checked (every {}), {} mismatches; {} µs per check ({} compared)",
        summary.checked,
        Ordinal(summary.every),
        summary.mismatches,
        micros(ns_to_milli(summary.ns_per_check())),
        SizeText(summary.checked_bytes),
    )
}

/// `1st`, `2nd`, `64th`: which read of every so many is checked (`every 1st` reads as "every").
struct Ordinal(u32);

impl fmt::Display for Ordinal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let number = self.0;
        if number == 1 {
            return f.write_str("read");
        }
        let suffix = match (number % 10, number % 100) {
            (1, hundred) if hundred != 11 => "st",
            (2, hundred) if hundred != 12 => "nd",
            (3, hundred) if hundred != 13 => "rd",
            _ => "th",
        };
        write!(f, "{number}{suffix}")
    }
}

/// `cpu per I/O: driver N instr / M cycles, bookkeeping N instr / M cycles`, with `n/a` and
/// the reason for a counter that did not count.
pub struct CpuCostText<'a> {
    pub per_io: &'a CpuPerIo,
    pub cycles: CounterStatus,
    pub instructions: CounterStatus,
}

impl fmt::Display for CpuCostText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (cycles, instructions) = (self.cycles, self.instructions);
        if !cycles.is_counting() && !instructions.is_counting() {
            return write!(f, "cpu per I/O: not measured (cycles: {cycles}; instructions: {instructions})");
        }
        let per_io = self.per_io;
        write!(
            f,
            "cpu per I/O: driver {} instr / {} cycles, bookkeeping {} instr / {} cycles",
            Count(per_io.driver_instructions_milli),
            Count(per_io.driver_cycles_milli),
            Count(per_io.bookkeeping_instructions_milli),
            Count(per_io.bookkeeping_cycles_milli),
        )?;
        for (name, status) in [("cycles", cycles), ("instructions", instructions)] {
            if let CounterStatus::Unavailable(reason) = status {
                write!(f, " ({name}: {reason})")?;
            }
        }
        Ok(())
    }
}

/// A per-I/O count in thousandths, printed whole; `n/a` when not measured.
struct Count(Option<u128>);

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            // Thousandths (`cpu_cost::MILLI_PER_UNIT`): three decimals, rounded to whole.
            Some(milli) => write!(f, "{}", Fixed::new(milli, 3).rounded_to(0)),
            None => f.write_str("n/a"),
        }
    }
}

/// A warning for every device whose region read as never written before the first run.
pub fn region_warnings(context: &ReportContext<'_>, device_names: &[String]) -> Vec<String> {
    let mut warnings = Vec::new();
    for name in device_names {
        let Some(facts) = context.facts_of(name) else {
            continue;
        };
        let Some(sample) = facts.region_sample.filter(|sample| sample.looks_deallocated()) else {
            continue;
        };
        let mut warning = format!(
            "warning: {name}: all {} sampled reads of {} spread over region {} at offset {} read \
             as zeros: the region looks deallocated (never written), and a device may answer such \
             reads without touching its flash, so read figures look better than real data would \
             give; write data to the region first",
            sample.reads - sample.failed,
            SizeText(sample.read_bytes),
            SizeText(sample.region_size_bytes),
            SizeText(sample.region_offset_bytes),
        );
        if let Some(behaviour) = facts.deallocated_read {
            warning.push_str(&format!(" (the device says: {behaviour})"));
        }
        warnings.push(warning);
    }
    warnings
}

/// Which run a job-table row shows.
enum RunLabel {
    Run(u32),
    Median,
}

impl fmt::Display for RunLabel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunLabel::Run(number) => fmt::Display::fmt(number, f),
            RunLabel::Median => f.pad("median"),
        }
    }
}

/// One row of the job table: a run's figures or the median of the runs (latency = lat).
struct JobRow {
    run_label: RunLabel,
    bandwidth_micro: u128,
    iops_micro: u128,
    mean_milli_ns: u128,
    p50_milli_ns: u128,
    p99_milli_ns: u128,
    p99_9_milli_ns: u128,
    max_milli_ns: u128,
    errors: u64,
}

impl JobRow {
    fn write(
        &self,
        console: &mut dyn fmt::Write,
        operation: &OperationLabel<'_>,
        block_bytes: u64,
        queue_depth: u32,
        device: &str,
    ) {
        let _ = writeln!(
            console,
            "{:<9} {:>5} {:>5}  {:<8} {:>6} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7}",
            operation,
            SizeText(block_bytes).to_padded(),
            queue_depth,
            device,
            self.run_label,
            mib_per_s(self.bandwidth_micro),
            iops(self.iops_micro),
            micros(self.mean_milli_ns),
            micros(self.p50_milli_ns),
            micros(self.p99_milli_ns),
            micros(self.p99_9_milli_ns),
            micros(self.max_milli_ns),
            self.errors,
        );
    }
}

/// The summary of medians per device and job, and the ratios when two devices ran.
pub fn print_summary(console: &mut dyn fmt::Write, config: &Config, results: &BenchmarkResults) {
    let _ = writeln!(
        console,
        "\nsummary: medians per device and job ({MEDIAN_RULE}; latency = submit to completion)"
    );
    if results.medians.is_empty() {
        if crate::stream_results::print_summary(
            console,
            (&results.scans, &results.sustained, &results.hdparm),
        ) == 0
        {
            let _ = writeln!(console, "no results");
        }
        return;
    }
    let _ = writeln!(
        console,
        "device   job                  bs    qd  runs      MiB/s       MB/s       IOPS    mean µs     \
         p99 µs  errors"
    );
    for name in &results.device_names {
        for median in results.medians.iter().filter(|m| &m.device_name == name) {
            let _ = writeln!(
                console,
                "{:<8} {:<16} {:>6} {:>5} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>7}",
                name,
                JobLabel(&median.job, median.direction).to_padded(),
                SizeText(median.block_bytes).to_padded(),
                median.queue_depth,
                median.runs,
                mib_per_s(median.bandwidth_micro),
                mb_per_s(median.bandwidth_micro),
                iops(median.iops_micro),
                micros(median.lat_mean_milli_ns),
                micros(median.lat_p99_milli_ns),
                median.errors_total,
            );
        }
    }
    print_check_totals(console, results);
    print_ratios(console, config, results);
    crate::stream_results::print_summary(console, (&results.scans, &results.sustained, &results.hdparm));
}

/// One line per device whose reads were checked: reads checked and mismatches over all runs
/// (the mismatches are in the errors column too).
fn print_check_totals(console: &mut dyn fmt::Write, results: &BenchmarkResults) {
    for name in &results.device_names {
        let checks =
            results.runs.iter().filter(|run| &run.device_name == name).filter_map(|run| run.check.as_ref());
        let (runs, checked, mismatches) =
            checks.fold((0u32, 0u64, 0u64), |(runs, checked, mismatches), check| {
                (runs + 1, checked + check.checked, mismatches + check.mismatches)
            });
        if runs > 0 {
            let verdict = if mismatches == 0 { "all matched the test pattern" } else { "MISMATCHES FOUND" };
            let _ = writeln!(
                console,
                "check: {name} {mismatches} mismatches in {checked} reads checked over {runs} runs: {verdict}"
            );
        }
    }
}

fn print_ratios(console: &mut dyn fmt::Write, config: &Config, results: &BenchmarkResults) {
    let [first, second] = results.device_names.as_slice() else {
        return;
    };
    let _ = writeln!(
        console,
        "\nratios between {first} and {second}: each cell names the better device and by how many times \
         (throughput: its value ÷ the other's; latency: the other's ÷ its own)"
    );
    let _ = writeln!(
        console,
        "job                  MiB/s                IOPS                 mean latency         p99 \
         latency"
    );
    let pairs = config.jobs.iter().enumerate().flat_map(|(index, job)| {
        [Direction::Read, Direction::Write].map(|direction| (index, job, direction))
    });
    for (job_index, job, direction) in pairs {
        let find = |name: &String| {
            results
                .medians
                .iter()
                .find(|m| m.job_index == job_index && &m.device_name == name && m.direction == direction)
        };
        let (Some(a), Some(b)) = (find(first), find(second)) else {
            continue;
        };
        let _ = writeln!(
            console,
            "{:<20} {:<20} {:<20} {:<20} {}",
            JobLabel(job, direction).to_padded(),
            Ratio::higher_is_better(a, b, a.bandwidth_micro, b.bandwidth_micro).to_padded(),
            Ratio::higher_is_better(a, b, a.iops_micro, b.iops_micro).to_padded(),
            Ratio::lower_is_better(a, b, a.lat_mean_milli_ns, b.lat_mean_milli_ns).to_padded(),
            Ratio::lower_is_better(a, b, a.lat_p99_milli_ns, b.lat_p99_milli_ns),
        );
    }
}

/// `op:bs:qd` of a job as configured.
/// `op:bs:qd` of a job as configured, with the direction of a mixed job (`randrw:4k:64 write`).
struct JobLabel<'a>(&'a JobSpec, Direction);

impl fmt::Display for JobLabel<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        if self.0.operation.is_mixed() {
            write!(f, " {}", self.1.name())?;
        }
        Ok(())
    }
}

/// "`better` N.N×": which device is better and by how many times (always ≥ 1).
pub struct Ratio<'a> {
    better_name: &'a str,
    tenths: Option<u128>,
}

impl<'a> Ratio<'a> {
    /// For throughput: the device with the larger value is better; the ratio is larger ÷ smaller.
    pub fn higher_is_better(
        a: &'a MedianResult,
        b: &'a MedianResult,
        a_value: u128,
        b_value: u128,
    ) -> Ratio<'a> {
        if a_value >= b_value {
            Ratio::of(&a.device_name, a_value, b_value)
        } else {
            Ratio::of(&b.device_name, b_value, a_value)
        }
    }

    /// For latency: the device with the smaller value is better; the ratio is slower ÷ faster.
    pub fn lower_is_better(
        a: &'a MedianResult,
        b: &'a MedianResult,
        a_value: u128,
        b_value: u128,
    ) -> Ratio<'a> {
        if a_value <= b_value {
            Ratio::of(&a.device_name, b_value, a_value)
        } else {
            Ratio::of(&b.device_name, a_value, b_value)
        }
    }

    fn of(better_name: &'a str, numerator: u128, denominator: u128) -> Ratio<'a> {
        let tenths =
            (numerator > 0 && denominator > 0).then(|| (numerator * 10 + denominator / 2) / denominator);
        Ratio { better_name, tenths }
    }
}

impl fmt::Display for Ratio<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.tenths {
            Some(tenths) => write!(f, "{} {}×", self.better_name, Fixed::new(tenths, 1)),
            None => write!(f, "{} n/a", self.better_name),
        }
    }
}

/// Renders a `Display` value first so that width and alignment apply to its whole text.
trait ToPadded: fmt::Display + Sized {
    fn to_padded(self) -> Padded<Self> {
        Padded(self)
    }
}

impl<T: fmt::Display> ToPadded for T {}

struct Padded<T>(T);

impl<T: fmt::Display> fmt::Display for Padded<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = crate::units::TextBuffer::<96>::new();
        write!(text, "{}", self.0)?;
        f.pad(text.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{JobOperation, JobSpec};
    use alloc::string::ToString;

    fn median(device_name: &str, iops_micro: u128, lat_mean_milli_ns: u128) -> MedianResult {
        MedianResult {
            direction: crate::results::Direction::Read,
            flushes_micro: None,
            flush_lat_mean_milli_ns: None,
            flush_lat_p99_milli_ns: None,
            flush_no_cache: None,
            verify_mismatches: None,
            job_index: 0,
            job: JobSpec::new(JobOperation::RandRead, 4096, 1),
            device_index: 0,
            device_name: device_name.to_string(),
            block_bytes: 4096,
            queue_depth: 1,
            runs: 3,
            iops_micro,
            bandwidth_micro: 0,
            clat_mean_milli_ns: 0,
            clat_p50_milli_ns: 0,
            clat_p99_milli_ns: 0,
            clat_p99_9_milli_ns: 0,
            lat_mean_milli_ns,
            lat_p50_milli_ns: 0,
            lat_p99_milli_ns: 0,
            lat_p99_9_milli_ns: 0,
            lat_max_milli_ns: 0,
            errors_total: 0,
            cpu_per_io: CpuPerIo::default(),
            data_path: None,
            throttled_runs: None,
        }
    }

    #[test]
    fn run_and_median_rows_share_the_columns() {
        let row = |run_label| JobRow {
            run_label,
            bandwidth_micro: 4 * u128::from(MIB) * MICRO_PER_UNIT,
            iops_micro: 1024 * MICRO_PER_UNIT,
            mean_milli_ns: 976_562_500,
            p50_milli_ns: 950_000_000,
            p99_milli_ns: 2_000_000_000,
            p99_9_milli_ns: 3_000_000_000,
            max_milli_ns: 12_000_000_000_000,
            errors: 2,
        };
        let job = JobSpec::new(JobOperation::RandRead, 4096, 1);
        let mut text = alloc::string::String::new();
        row(RunLabel::Run(3)).write(&mut text, &OperationLabel(&job, Direction::Read), 4096, 1, "sd0");
        row(RunLabel::Median).write(&mut text, &OperationLabel(&job, Direction::Read), 4096, 1, "sd0");
        let lines: alloc::vec::Vec<&str> = text.lines().collect();
        assert_eq!(lines[0].len(), lines[1].len(), "{text}");
        assert!(
            lines[0].starts_with("randread     4k     1  sd0           3        4.0       1024      976.6"),
            "{text}"
        );
        assert!(lines[1].contains("sd0      median"), "{text}");
        // Below 10 ms one decimal, above whole microseconds.
        assert!(lines[0].ends_with("  12000000       2"), "{text}");
    }

    #[test]
    fn ratios_name_the_better_device_both_for_throughput_and_latency() {
        let sd = median("sd0", 2_000_000_000, 500_000_000);
        let nvme = median("nvme0", 9_800_000_000, 100_000_000);
        let iops = Ratio::higher_is_better(&sd, &nvme, sd.iops_micro, nvme.iops_micro).to_string();
        assert_eq!(iops, "nvme0 4.9×");
        let latency =
            Ratio::lower_is_better(&sd, &nvme, sd.lat_mean_milli_ns, nvme.lat_mean_milli_ns).to_string();
        assert_eq!(latency, "nvme0 5.0×");
        let slower_first = Ratio::lower_is_better(&nvme, &sd, nvme.lat_mean_milli_ns, sd.lat_mean_milli_ns);
        assert_eq!(slower_first.to_string(), "nvme0 5.0×");
        let nothing = median("nvme0", 0, 0);
        assert_eq!(Ratio::higher_is_better(&sd, &nothing, sd.iops_micro, 0).to_string(), "sd0 n/a");
    }
}
