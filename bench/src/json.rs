//! The machine-readable results: fio-compatible JSON between two marker lines (docs/nvme-and-fio.md §3.5).
//!
//! Field names and units follow fio 3.x's `--output-format=json`: per job `jobname`, `groupid`,
//! `error`, `"job options"` (strings), and a `read` object with `io_bytes`, `io_kbytes`,
//! `bw_bytes`, `bw` (KiB/s), `iops`, `runtime` (ms), `total_ios`, `short_ios`, `drop_ios`,
//! `slat_ns`, `clat_ns`, `lat_ns` (`min`, `max`, `mean`, `stddev`, `N`, and for clat and lat
//! `percentile` keyed `"99.000000"`); `write` is all zeros, as fio writes it for read jobs.
//! barebench adds a `"barebench"` object per job (with the CPU cost per I/O and whether the
//! region read as never written), `"barebench medians"` and a top-level `"barebench"` object
//! (with the counters' status and each device's region sample). Every number comes from
//! integers; floats are printed as fixed decimals; a figure that was not measured is `null`.
//! `bw_bytes` and `iops` are computed from the window in nanoseconds (fio uses milliseconds).
//! The writer reads the results as data ([`crate::results`]).

use core::fmt::{self, Write};

use blockdev::IoErrorKind;

use crate::cpu_cost::{CpuCost, CpuPerIo};
use crate::distributions::{
    fio_percent, DepthCounts, RateSummary, BATCH_BAND_KEYS, DEPTH_PERCENT_FLOOR, LATENCY_BANDS,
    LATENCY_PERCENT_FLOOR, LEVEL_BAND_KEYS, MS_BAND_KEYS, UNIT_BAND_KEYS,
};
use crate::histogram::{FIO_DEFAULT_PERCENTILES, HUNDRED_PERCENT};
use crate::json_writer::{write_check, write_errors, write_verify, JsonWriter};
use crate::results::{
    BenchmarkResults, DeviceFacts, Direction, FlushResult, HistogramBins, MedianResult, ReportContext,
    RunResult, MEDIAN_RULE, MICRO_PER_UNIT,
};
use crate::settings::{Config, OutputFormat};
use crate::stats::LatencySummary;
use crate::units::{DurationText, Fixed, SizeText, KIB, NS_PER_MS, NS_PER_S};
use crate::{JSON_BEGIN_MARKER, JSON_END_MARKER};

/// fio's `error` for a run that ended early: EIO (Linux errno 5, `asm-generic/errno-base.h`).
const FIO_ERROR_EIO: u32 = 5;

/// Decimals of the fixed-point means (thousandths of a ns) and rates (millionths).
const MEAN_DECIMALS: u32 = 3;
const RATE_DECIMALS: u32 = 6;
/// Decimals of percentages kept in millionths of a percent.
const PERCENT_DECIMALS: u32 = 6;
/// What fio's OS-level fields mean here; written in the top-level `"barebench"` object.
pub const FIO_FIELDS_ON_BARE_METAL: &str = "usr_cpu = share of the run's CPU cycles spent in the \
     driver and the benchmark's bookkeeping rather than waiting for the device (0 when the cycle \
     counter does not count); sys_cpu, ctx, majf, minf = 0 (no interrupts, scheduler or paging); \
     timestamp, timestamp_ms, job_start = 0 and time = the epoch (no wall clock); disk_util empty \
     (no block layer); bw and iops samples every sample_interval of the window";
/// What C's `ctime()` prints for time 0 (UTC), without the newline: `time` with no wall clock.
pub const EPOCH_CTIME: &str = "Thu Jan  1 00:00:00 1970";

/// Writes the marker lines and the JSON document between them.
pub fn write_results_block(
    out: &mut dyn fmt::Write,
    config: &Config,
    context: &ReportContext<'_>,
    results: &BenchmarkResults,
) -> fmt::Result {
    writeln!(out, "\n{JSON_BEGIN_MARKER}")?;
    write_fio_json(out, config, context, results)?;
    writeln!(out, "\n{JSON_END_MARKER}")
}

/// Writes the JSON document alone.
pub fn write_fio_json(
    out: &mut dyn fmt::Write,
    config: &Config,
    context: &ReportContext<'_>,
    results: &BenchmarkResults,
) -> fmt::Result {
    let mut json = JsonWriter::new(out);
    json.open(None, '{')?;
    json.string_field("fio version", format_args!("barebench-{}", env!("CARGO_PKG_VERSION")))?;
    // No wall clock on bare metal: the epoch, as fio would print for a clock at 0.
    json.number_field("timestamp", 0u32)?;
    json.number_field("timestamp_ms", 0u32)?;
    json.string_field("time", format_args!("{EPOCH_CTIME}"))?;

    json.open(Some("global options"), '{')?;
    json.string_field("ramp_time", format_args!("{}", DurationText(config.ramp_ns)))?;
    json.string_field("runtime", format_args!("{}", DurationText(config.runtime_ns)))?;
    json.string_field("time_based", format_args!("1"))?;
    let wrote =
        results.runs.iter().any(|run| run.direction == Direction::Write) || !results.sustained.is_empty();
    let readonly = if wrote { "0" } else { "1" };
    json.string_field("readonly", format_args!("{readonly}"))?;
    json.string_field("randseed", format_args!("{}", config.seed))?;
    json.close('}')?;

    json.open(Some("jobs"), '[')?;
    for run in &results.runs {
        // A mixed run is one fio job with both sections: written with its read result.
        let sibling = results.runs.iter().find(|other| {
            other.direction != run.direction
                && (other.job_index, other.device_index, other.run)
                    == (run.job_index, run.device_index, run.run)
        });
        if run.direction == Direction::Write && sibling.is_some() {
            continue;
        }
        let (read, write) = match run.direction {
            Direction::Read => (Some(run), sibling),
            Direction::Write => (None, Some(run)),
        };
        write_job(&mut json, config, run, (read, write), context.facts_of(&run.device_name))?;
    }
    json.close(']')?;
    // fio's Linux block-device statistics; there is no block layer here.
    json.open(Some("disk_util"), '[')?;
    json.close(']')?;

    json.open(Some("barebench medians"), '[')?;
    for median in &results.medians {
        write_median(&mut json, median)?;
    }
    json.close(']')?;
    crate::stream_json::write_stream_results(&mut json, results)?;

    json.open(Some("barebench"), '{')?;
    json.string_field("version", format_args!("{}", env!("CARGO_PKG_VERSION")))?;
    json.string_field("board", format_args!("{}", context.board))?;
    json.number_field("timer_frequency_hz", context.timer_frequency_hz)?;
    json.number_field("seed", config.seed)?;
    json.number_field("runs", config.runs)?;
    json.string_field("median_rule", format_args!("{MEDIAN_RULE}"))?;
    json.string_field(
        "latency",
        format_args!(
            "lat = submit to completion seen; clat = doorbell to completion seen; slat = submit \
             to doorbell"
        ),
    )?;
    json.string_field("fio_fields", format_args!("{FIO_FIELDS_ON_BARE_METAL}"))?;
    json.string_field("settings", format_args!("{config}"))?;
    json.open(Some("devices"), '[')?;
    for name in &results.device_names {
        json.string_element(format_args!("{name}"))?;
    }
    json.close(']')?;
    json.open(Some("notes"), '[')?;
    for note in &results.notes {
        json.string_element(format_args!("{note}"))?;
    }
    json.close(']')?;
    json.open(Some("cpu_counters"), '{')?;
    json.string_field("cycles", format_args!("{}", results.cycles_status))?;
    json.string_field("instructions", format_args!("{}", results.instructions_status))?;
    json.close('}')?;
    json.open(Some("region_samples"), '[')?;
    for facts in context.device_facts {
        write_device_facts(&mut json, facts)?;
    }
    json.close(']')?;
    // Extra facts may not replace the fields above (a JSON object's keys must be unique).
    const OWN_KEYS: [&str; 15] = [
        "conditions",
        "boot",
        "fio_fields",
        "version",
        "board",
        "timer_frequency_hz",
        "seed",
        "runs",
        "median_rule",
        "latency",
        "settings",
        "devices",
        "notes",
        "cpu_counters",
        "region_samples",
    ];
    if let Some(conditions) = &results.conditions {
        conditions::write_benchmark(&mut json, conditions, results)?;
    }
    for (key, value) in context.extra {
        if !OWN_KEYS.contains(key) {
            json.string_field(key, format_args!("{value}"))?;
        }
    }
    json.close('}')?;
    json.close('}')
}

/// One device's region sample and deallocated-read behaviour.
fn write_device_facts(json: &mut JsonWriter<'_>, facts: &DeviceFacts<'_>) -> fmt::Result {
    json.open(None, '{')?;
    json.string_field("device", format_args!("{}", facts.device_name))?;
    match facts.deallocated_read {
        Some(behaviour) => json.string_field("deallocated_read", format_args!("{behaviour}"))?,
        None => json.null_field("deallocated_read")?,
    }
    if let Some(sample) = facts.region_sample {
        json.number_field("region_offset_bytes", sample.region_offset_bytes)?;
        json.number_field("region_size_bytes", sample.region_size_bytes)?;
        json.number_field("reads", sample.reads)?;
        json.number_field("read_bytes", sample.read_bytes)?;
        json.number_field("failed", sample.failed)?;
        json.bool_field("all_zero", sample.all_zero)?;
        json.bool_field("looks_deallocated", sample.looks_deallocated())?;
    }
    json.close('}')
}

/// The CPU cost per I/O: the completions it covers and four figures (`null` when not counted).
fn write_cpu_per_io(json: &mut JsonWriter<'_>, ios: Option<u64>, per_io: &CpuPerIo) -> fmt::Result {
    json.open(Some("cpu_per_io"), '{')?;
    if let Some(ios) = ios {
        json.number_field("ios", ios)?;
    }
    for (name, value) in per_io.named() {
        match value {
            Some(milli) => json.fixed_field(name, Fixed::new(milli, MEAN_DECIMALS))?,
            None => json.null_field(name)?,
        }
    }
    json.close('}')
}

/// How the driver moved the data: `"data_path": {"mode", "commands", "pio_fallbacks"}`, for
/// drivers that say.
fn write_data_path(json: &mut JsonWriter<'_>, path: Option<&blockdev::DataPath>) -> fmt::Result {
    let Some(path) = path else {
        return Ok(());
    };
    json.open(Some("data_path"), '{')?;
    json.string_field("mode", format_args!("{}", path.mode))?;
    json.number_field("commands", path.commands)?;
    json.number_field("pio_fallbacks", path.pio_fallbacks)?;
    json.close('}')
}

/// One fio job: `run`'s options, then the read and write sections from the results of each
/// direction (a section without one is zeros, as fio writes it).
fn write_job(
    json: &mut JsonWriter<'_>,
    config: &Config,
    run: &RunResult,
    (read, write): (Option<&RunResult>, Option<&RunResult>),
    facts: Option<&DeviceFacts<'_>>,
) -> fmt::Result {
    json.open(None, '{')?;
    json.string_field(
        "jobname",
        format_args!(
            "{}-{}-qd{}-{}-run{}",
            run.job.operation.fio_name(),
            SizeText(run.job.block_bytes),
            run.job.queue_depth,
            run.device_name,
            run.run
        ),
    )?;
    json.number_field("groupid", 0u32)?;
    // No wall clock: fio's epoch milliseconds become 0.
    json.number_field("job_start", 0u32)?;
    let error = if run.ended_early.is_some() { FIO_ERROR_EIO } else { 0 };
    json.number_field("error", error)?;
    // fio writes these with continue_on_error, which is how every run here goes on after a
    // failed I/O (docs/fio-json.md §2): the failed I/Os and the errno of the first.
    json.number_field("total_err", run.errors_total())?;
    json.number_field("first_error", run.first_error.map_or(0, IoErrorKind::linux_errno))?;
    json.number_field("eta", 0u32)?;
    json.number_field("elapsed", run.elapsed_ns.div_ceil(NS_PER_S))?;
    write_job_options(json, config, run)?;

    let runtime_ms = rounded_ms(run.window_ns);
    for (key, direction) in [("read", read), ("write", write)] {
        match direction {
            Some(result) => write_direction(json, config, key, result)?,
            None => write_zero_direction(json, key)?,
        }
    }
    write_zero_direction(json, "trim")?;
    write_sync(json, write.and_then(|write| write.flushes.as_ref()))?;
    json.number_field("job_runtime", runtime_ms)?;
    write_cpu_fields(json, &run.cpu)?;
    write_depth_bands(json, &run.depth)?;
    // fio's bands count the completions of every direction of the job.
    let mut bands = [0u64; LATENCY_BANDS];
    for result in [read, write].into_iter().flatten() {
        bands.iter_mut().zip(&result.latency_bands).for_each(|(total, count)| *total += count);
    }
    write_latency_bands(json, &bands)?;
    json.number_field("latency_depth", run.queue_depth)?;
    json.number_field("latency_target", 0u32)?;
    json.fixed_field("latency_percentile", Fixed::new(100_000_000, PERCENT_DECIMALS))?;
    json.number_field("latency_window", 0u32)?;
    write_job_facts(json, run, write, facts)
}

/// `"job options"`: what fio would list for this job, always with `rw`, `bs`, `iodepth` and
/// `numjobs` (fio-plot skips a file without them, docs/fio-json.md §7).
fn write_job_options(json: &mut JsonWriter<'_>, config: &Config, run: &RunResult) -> fmt::Result {
    json.open(Some("job options"), '{')?;
    json.string_field("name", format_args!("{}-{}", run.job.operation.fio_name(), run.device_name))?;
    json.string_field("filename", format_args!("{}", run.device_name))?;
    json.string_field("rw", format_args!("{}", run.job.operation.fio_name()))?;
    json.string_field("bs", format_args!("{}", SizeText(run.block_bytes)))?;
    json.string_field("iodepth", format_args!("{}", run.queue_depth))?;
    json.string_field("numjobs", format_args!("1"))?;
    json.string_field("offset", format_args!("{}", run.region_offset_bytes))?;
    json.string_field("size", format_args!("{}", run.region_size_bytes))?;
    json.string_field("ramp_time", format_args!("{}", DurationText(config.ramp_ns)))?;
    json.string_field("runtime", format_args!("{}", DurationText(config.runtime_ns)))?;
    if run.job.operation.is_mixed() {
        json.string_field("rwmixread", format_args!("{}", run.job.read_percent))?;
    }
    if run.job.flush_every_writes > 0 {
        json.string_field("fsync", format_args!("{}", run.job.flush_every_writes))?;
    }
    json.close('}')
}

/// `bw_min` … `iops_samples` from the interval samples; `bw_agg` against the job's own
/// bandwidth (each run is its own group): 100·bw_mean / (bw_bytes / 1024), at most 100, 100 when
/// the job moved at most 1 KiB/s, 0 without samples (fio `convert_agg_kbytes_percent()`).
fn write_rate_samples(
    json: &mut JsonWriter<'_>,
    bandwidth_kib: &RateSummary,
    iops: &RateSummary,
    bw_bytes: u128,
) -> fmt::Result {
    let bw_agg_micro = if bandwidth_kib.samples == 0 {
        0
    } else if bw_bytes <= u128::from(KIB) {
        HUNDRED_PERCENT_MICRO
    } else {
        // mean (thousandths) × 1000 → millionths; × 100 % × 1024 B/KiB ÷ bytes/s.
        (bandwidth_kib.mean_milli * 1000 * 100 * u128::from(KIB) / bw_bytes).min(HUNDRED_PERCENT_MICRO)
    };
    json.number_field("bw_min", bandwidth_kib.min)?;
    json.number_field("bw_max", bandwidth_kib.max)?;
    json.fixed_field("bw_agg", Fixed::new(bw_agg_micro, PERCENT_DECIMALS))?;
    json.fixed_field("bw_mean", Fixed::new(bandwidth_kib.mean_milli, MEAN_DECIMALS))?;
    json.fixed_field("bw_dev", Fixed::new(bandwidth_kib.stddev_milli, MEAN_DECIMALS))?;
    json.number_field("bw_samples", bandwidth_kib.samples)?;
    json.number_field("iops_min", iops.min)?;
    json.number_field("iops_max", iops.max)?;
    json.fixed_field("iops_mean", Fixed::new(iops.mean_milli, MEAN_DECIMALS))?;
    json.fixed_field("iops_stddev", Fixed::new(iops.stddev_milli, MEAN_DECIMALS))?;
    json.number_field("iops_samples", iops.samples)
}

/// 100 % in millionths of a percent.
const HUNDRED_PERCENT_MICRO: u128 = 100_000_000;

/// `usr_cpu`: the share of the run's cycles in the driver and bookkeeping, against waiting
/// ([`CpuCost::busy_percent_micro`]; 0 when the cycle counter does not count). `sys_cpu`: 0, no
/// exception or interrupt handler runs during a run. No scheduler and no paging: `ctx`, `majf`,
/// `minf` are 0.
fn write_cpu_fields(json: &mut JsonWriter<'_>, cost: &CpuCost) -> fmt::Result {
    json.fixed_field("usr_cpu", Fixed::new(cost.busy_percent_micro().unwrap_or(0), PERCENT_DECIMALS))?;
    json.fixed_field("sys_cpu", Fixed::new(0, PERCENT_DECIMALS))?;
    for key in ["ctx", "majf", "minf"] {
        json.number_field(key, 0u32)?;
    }
    Ok(())
}

fn write_depth_bands(json: &mut JsonWriter<'_>, depth: &DepthCounts) -> fmt::Result {
    let maps = [
        ("iodepth_level", &LEVEL_BAND_KEYS, &depth.level),
        ("iodepth_submit", &BATCH_BAND_KEYS, &depth.submit),
        ("iodepth_complete", &BATCH_BAND_KEYS, &depth.complete),
    ];
    for (name, keys, counts) in maps {
        write_percent_map(json, name, keys, counts, DEPTH_PERCENT_FLOOR)?;
    }
    Ok(())
}

/// `latency_ns`, `latency_us`, `latency_ms`: the share of completions in each band, over all
/// completions of the window.
fn write_latency_bands(json: &mut JsonWriter<'_>, bands: &[u64; LATENCY_BANDS]) -> fmt::Result {
    let total: u64 = bands.iter().sum();
    let (ns, rest) = bands.split_at(UNIT_BAND_KEYS.len());
    let (us, ms) = rest.split_at(UNIT_BAND_KEYS.len());
    let maps: [(&str, &[&str], &[u64]); 3] = [
        ("latency_ns", &UNIT_BAND_KEYS, ns),
        ("latency_us", &UNIT_BAND_KEYS, us),
        ("latency_ms", &MS_BAND_KEYS, ms),
    ];
    for (name, keys, counts) in maps {
        json.open(Some(name), '{')?;
        for (key, &count) in keys.iter().zip(counts) {
            json.fixed_field(
                key,
                Fixed::new(fio_percent(count, total, LATENCY_PERCENT_FLOOR), PERCENT_DECIMALS),
            )?;
        }
        json.close('}')?;
    }
    Ok(())
}

/// One depth map: each band's share of the map's own total.
fn write_percent_map(
    json: &mut JsonWriter<'_>,
    name: &str,
    keys: &[&str],
    counts: &[u64],
    floor: u128,
) -> fmt::Result {
    let total: u64 = counts.iter().sum();
    json.open(Some(name), '{')?;
    for (key, &count) in keys.iter().zip(counts) {
        json.fixed_field(key, Fixed::new(fio_percent(count, total, floor), PERCENT_DECIMALS))?;
    }
    json.close('}')
}

/// The job's `"barebench"` object: what ran, errors by kind, the CPU cost per I/O, and for a
/// write or mixed job its scratch region, flushes and verification.
fn write_job_facts(
    json: &mut JsonWriter<'_>,
    run: &RunResult,
    write: Option<&RunResult>,
    facts: Option<&DeviceFacts<'_>>,
) -> fmt::Result {
    json.open(Some("barebench"), '{')?;
    json.string_field("device", format_args!("{}", run.device_name))?;
    json.number_field("run", run.run)?;
    json.number_field("block_bytes", run.block_bytes)?;
    json.number_field("queue_depth", run.queue_depth)?;
    json.number_field("requested_block_bytes", run.job.block_bytes)?;
    json.number_field("requested_queue_depth", run.job.queue_depth)?;
    json.number_field("window_ns", run.window_ns)?;
    json.number_field("ramp_ns", run.ramp_ns)?;
    json.number_field("elapsed_ns", run.elapsed_ns)?;
    json.number_field("region_offset_bytes", run.region_offset_bytes)?;
    json.number_field("region_size_bytes", run.region_size_bytes)?;
    json.number_field("seed", run.seed)?;
    write_errors(json, &run.errors, run.errors_total())?;
    if let Some(check) = &run.check {
        write_check(json, check)?;
    }
    if let Some(end) = run.ended_early {
        json.string_field("ended_early", format_args!("{}", end.reason()))?;
    }
    let cost: &CpuCost = &run.cpu;
    write_cpu_per_io(json, Some(cost.ios), &cost.per_io())?;
    if let Some(write) = write {
        write_write_facts(json, write)?;
    }
    write_data_path(json, run.data_path.as_ref())?;
    if let Some(run_conditions) = &run.conditions {
        conditions::write_run(json, run_conditions)?;
    }
    if let Some(sample) = facts.and_then(|facts| facts.region_sample) {
        json.bool_field("region_reads_as_zeros", sample.looks_deallocated())?;
    }
    json.open(Some("notes"), '[')?;
    for note in &run.notes {
        json.string_element(format_args!("{note}"))?;
    }
    json.close(']')?;
    json.close('}')?;
    json.close('}')
}

/// One direction's fio section from a result.
fn write_direction(json: &mut JsonWriter<'_>, config: &Config, key: &str, run: &RunResult) -> fmt::Result {
    json.open(Some(key), '{')?;
    json.number_field("io_bytes", run.bytes)?;
    json.number_field("io_kbytes", run.bytes / KIB)?;
    let bw_bytes = run.bandwidth_micro() / MICRO_PER_UNIT;
    json.number_field("bw_bytes", bw_bytes)?;
    json.number_field("bw", bw_bytes / u128::from(KIB))?;
    json.fixed_field("iops", Fixed::new(run.iops_micro(), RATE_DECIMALS))?;
    json.number_field("runtime", rounded_ms(run.window_ns))?;
    json.number_field("total_ios", run.ios)?;
    json.number_field("short_ios", 0u32)?;
    json.number_field("drop_ios", 0u32)?;
    let bins = |bins| (config.output == OutputFormat::JsonPlus).then_some(bins);
    write_latency(json, "slat_ns", &run.slat, None, None)?;
    write_latency(json, "clat_ns", &run.clat, Some(&run.clat_percentiles_ns), bins(&run.clat_bins))?;
    write_latency(json, "lat_ns", &run.lat, Some(&run.lat_percentiles_ns), bins(&run.lat_bins))?;
    write_rate_samples(json, &run.bandwidth_kib_samples, &run.iops_samples, bw_bytes)?;
    json.close('}')
}

/// fio's `"sync"` section (its fsyncs): the run's flushes, as sysbench counts its fsyncs; zeros
/// for a job without flushes.
fn write_sync(json: &mut JsonWriter<'_>, flushes: Option<&FlushResult>) -> fmt::Result {
    json.open(Some("sync"), '{')?;
    json.number_field("total_ios", flushes.map_or(0, |flushes| flushes.count))?;
    let default = LatencySummary::default();
    write_latency(json, "lat_ns", flushes.map_or(&default, |flushes| &flushes.lat), None, None)?;
    json.close('}')
}

/// The scratch region, the flushes (as sysbench reports fsyncs) and the verification of a
/// write run, in the job's `"barebench"` object.
fn write_write_facts(json: &mut JsonWriter<'_>, write: &RunResult) -> fmt::Result {
    if let Some(id) = write.scratch_region_id {
        json.string_field("scratch_region_id", format_args!("{id:#018x}"))?;
    }
    if let Some(flushes) = write.flushes {
        json.open(Some("flush"), '{')?;
        json.number_field("count", flushes.count)?;
        json.bool_field("sent", flushes.sent)?;
        if let Some(reason) = flushes.no_cache {
            json.string_field("not_sent_because", format_args!("{reason}"))?;
        }
        json.fixed_field("per_second", Fixed::new(write.flushes_micro(), RATE_DECIMALS))?;
        json.number_field("errors", flushes.errors)?;
        json.number_field("lat_p99_ns", flushes.lat_p99_ns)?;
        write_latency(json, "lat_ns", &flushes.lat, None, None)?;
        json.close('}')?;
    }
    if let Some(verify) = &write.verify {
        write_verify(json, verify)?;
    }
    Ok(())
}

fn rounded_ms(ns: u64) -> u64 {
    (ns + NS_PER_MS / 2) / NS_PER_MS
}

fn write_latency(
    json: &mut JsonWriter<'_>,
    key: &str,
    summary: &LatencySummary,
    percentiles_ns: Option<&[u64; FIO_DEFAULT_PERCENTILES.len()]>,
    bins: Option<&HistogramBins>,
) -> fmt::Result {
    json.open(Some(key), '{')?;
    json.number_field("min", summary.min_ns)?;
    json.number_field("max", summary.max_ns)?;
    json.fixed_field("mean", Fixed::new(summary.mean_milli_ns, MEAN_DECIMALS))?;
    json.fixed_field("stddev", Fixed::new(summary.stddev_milli_ns, MEAN_DECIMALS))?;
    json.number_field("N", summary.samples)?;
    // fio leaves the percentiles out when there are no samples.
    if let Some(values) = percentiles_ns.filter(|_| summary.samples > 0) {
        json.open(Some("percentile"), '{')?;
        for (&percent, &value) in FIO_DEFAULT_PERCENTILES.iter().zip(values.iter()) {
            let mut key = crate::units::TextBuffer::<16>::new();
            // fio's "%f": six decimals of the percentage.
            let millionths_per_percent = HUNDRED_PERCENT / 100;
            write!(key, "{}.{:06}", percent / millionths_per_percent, percent % millionths_per_percent)?;
            json.number_field(key.as_str(), value)?;
        }
        json.close('}')?;
        // json+: every non-empty histogram bucket, keyed by its value in ns (fio's `bins`).
        if let Some(bins) = bins {
            json.open(Some("bins"), '{')?;
            for &(value_ns, count) in &bins.0 {
                let mut key = crate::units::TextBuffer::<24>::new();
                write!(key, "{value_ns}")?;
                json.number_field(key.as_str(), count)?;
            }
            json.close('}')?;
        }
    }
    json.close('}')
}

fn write_zero_direction(json: &mut JsonWriter<'_>, key: &str) -> fmt::Result {
    json.open(Some(key), '{')?;
    for field in ["io_bytes", "io_kbytes", "bw_bytes", "bw"] {
        json.number_field(field, 0u32)?;
    }
    json.fixed_field("iops", Fixed::new(0, RATE_DECIMALS))?;
    for field in ["runtime", "total_ios", "short_ios", "drop_ios"] {
        json.number_field(field, 0u32)?;
    }
    for latency in ["slat_ns", "clat_ns", "lat_ns"] {
        write_latency(json, latency, &LatencySummary::default(), None, None)?;
    }
    write_rate_samples(json, &RateSummary::default(), &RateSummary::default(), 0)?;
    json.close('}')
}

fn write_median(json: &mut JsonWriter<'_>, median: &MedianResult) -> fmt::Result {
    let milli = |value: u128| Fixed::new(value, MEAN_DECIMALS);
    json.open(None, '{')?;
    json.string_field("device", format_args!("{}", median.device_name))?;
    // The job as asked (`randread:4k:32`); `bs`/`iodepth` below are what ran on this device.
    json.string_field("job", format_args!("{}", median.job))?;
    json.string_field("rw", format_args!("{}", median.job.operation.fio_name()))?;
    json.string_field("direction", format_args!("{}", median.direction.name()))?;
    json.number_field("bs", median.block_bytes)?;
    json.number_field("iodepth", median.queue_depth)?;
    json.number_field("runs", median.runs)?;
    json.fixed_field("iops", Fixed::new(median.iops_micro, RATE_DECIMALS))?;
    json.fixed_field("bw_bytes", Fixed::new(median.bandwidth_micro, RATE_DECIMALS))?;
    json.fixed_field("clat_mean_ns", milli(median.clat_mean_milli_ns))?;
    json.fixed_field("clat_p50_ns", milli(median.clat_p50_milli_ns))?;
    json.fixed_field("clat_p99_ns", milli(median.clat_p99_milli_ns))?;
    json.fixed_field("clat_p99_9_ns", milli(median.clat_p99_9_milli_ns))?;
    json.fixed_field("lat_mean_ns", milli(median.lat_mean_milli_ns))?;
    json.fixed_field("lat_p50_ns", milli(median.lat_p50_milli_ns))?;
    json.fixed_field("lat_p99_ns", milli(median.lat_p99_milli_ns))?;
    json.fixed_field("lat_p99_9_ns", milli(median.lat_p99_9_milli_ns))?;
    json.fixed_field("lat_max_ns", milli(median.lat_max_milli_ns))?;
    json.number_field("errors_total", median.errors_total)?;
    if let Some(flushes_micro) = median.flushes_micro {
        json.fixed_field("flushes_per_second", Fixed::new(flushes_micro, RATE_DECIMALS))?;
        json.fixed_field("flush_lat_mean_ns", milli(median.flush_lat_mean_milli_ns.unwrap_or(0)))?;
        json.fixed_field("flush_lat_p99_ns", milli(median.flush_lat_p99_milli_ns.unwrap_or(0)))?;
    }
    if let Some(mismatches) = median.verify_mismatches {
        json.number_field("verify_mismatches", mismatches)?;
    }
    write_cpu_per_io(json, None, &median.cpu_per_io)?;
    write_data_path(json, median.data_path.as_ref())?;
    if let Some(throttled_runs) = median.throttled_runs {
        json.number_field("throttled_runs", throttled_runs)?;
    }
    json.close('}')
}

mod conditions;
#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu_cost::NoCpuCounters;
    use crate::fio_json::{extract_json_from_log, parse_fio_json};
    use crate::histogram::{P50_INDEX, P99_INDEX};
    use crate::results::ReportContext;
    use crate::runner::{run_benchmark, RunEnvironment};
    use crate::settings::{Config, JobOperation, JobSpec, OutputFormat, Preset};
    use crate::sim::{SimBehaviour, SimDevice};
    use crate::units::{NS_PER_MS, NS_PER_S};
    use blockdev::testing::SteppingClock;
    use blockdev::{
        check_request, BlockDevice, Clock, Completion, DmaBuffer, Geometry, Request, SubmitError,
    };
    use core::cell::RefCell;
    use serde_json::Value;
    use std::collections::VecDeque;
    use std::string::String;
    use std::vec::Vec;

    /// Two simulated devices (an NVMe-like and an SD-like one) through a shortened reference
    /// workload; returns the console text and the results.
    fn simulated_benchmark() -> (String, BenchmarkResults, Config) {
        let clock = SteppingClock::new(54_000_000, 2);
        let mut nvme_behaviour = SimBehaviour::new(
            Geometry {
                logical_block_bytes: 512,
                block_count: 8 << 21,
                max_request_blocks: 2048,
                max_in_flight: 63,
            },
            4_000, // 74 µs at 54 MHz
        );
        nvme_behaviour.random_latency_ticks = 2_000;
        nvme_behaviour.transfer_ticks_per_kib = 54; // ≈ 1 GB/s

        let mut sd_behaviour = SimBehaviour::new(
            Geometry {
                logical_block_bytes: 512,
                block_count: 1 << 21,
                max_request_blocks: 65_535,
                max_in_flight: 1,
            },
            20_000, // 370 µs
        );
        sd_behaviour.random_latency_ticks = 10_000;
        sd_behaviour.error_every = Some((50, IoErrorKind::Crc));
        sd_behaviour.transfer_ticks_per_kib = 600; // ≈ 90 MB/s
        let mut nvme = SimDevice::new("nvme0", nvme_behaviour, &clock);
        let mut sd = SimDevice::new("sd0", sd_behaviour, &clock);
        let mut config = Config::for_preset(Preset::Quick);
        config.ramp_ns = 100 * NS_PER_MS;
        config.runtime_ns = 1_000 * NS_PER_MS;
        config.jobs = [
            JobSpec::new(JobOperation::Read, 1 << 20, 16),
            JobSpec::new(JobOperation::RandRead, 4096, 1),
            JobSpec::new(JobOperation::RandRead, 4096, 32),
        ]
        .to_vec();
        let mut console = String::new();
        let context = ReportContext {
            board: "simulated \"board\"",
            timer_frequency_hz: 54_000_000,
            extra: &[("cpu", "host test"), ("board", "ignored duplicate")],
            device_facts: &[],
        };
        let mut devices: [&mut dyn BlockDevice; 2] = [&mut nvme, &mut sd];
        let counters = NoCpuCounters("host test");
        let environment = RunEnvironment {
            clock: &clock,
            cpu_counters: &counters,
            buffer_area: DmaBuffer {
                cpu_address: 0x1000_0000,
                physical_address: 0x1000_0000,
                length_bytes: 8 << 20,
            },
            memory: None,
            writes: None,
            conditions: None,
        };
        let results = run_benchmark(&config, &mut devices, &environment, &context, &mut console);
        (console, results, config)
    }

    #[test]
    fn json_round_trips_through_the_log_extractor_and_parser() {
        let (console, results, _) = simulated_benchmark();
        std::println!("{console}");
        assert_eq!(console.matches(JSON_BEGIN_MARKER).count(), 1);
        assert_eq!(console.matches(JSON_END_MARKER).count(), 1);
        let json = extract_json_from_log(&console).unwrap();
        let report = parse_fio_json(&json).unwrap();

        assert!(report.is_barebench());
        assert_eq!(report.fio_version, std::format!("barebench-{}", env!("CARGO_PKG_VERSION")));
        assert_eq!(report.jobs.len(), results.runs.len());
        assert_eq!(results.runs.len(), 3 * 2 * 3);
        for (job, run) in report.jobs.iter().zip(&results.runs) {
            let read = &job.read;
            assert_eq!(read.total_ios, run.ios);
            assert_eq!(read.io_bytes, run.bytes);
            assert_eq!(u128::from(read.bw_bytes), run.bandwidth_micro() / MICRO_PER_UNIT);
            assert!((read.iops - run.iops_micro() as f64 / 1e6).abs() < 1e-6);
            assert_eq!(read.runtime, run.window_ns / NS_PER_MS);
            assert_eq!(read.clat_ns.samples, run.ios);
            assert_eq!(read.lat_ns.min, run.lat.min_ns);
            assert_eq!(read.lat_ns.max, run.lat.max_ns);
            assert!((read.lat_ns.mean - run.lat.mean_milli_ns as f64 / 1e3).abs() < 1e-9);
            assert!((read.clat_ns.stddev - run.clat.stddev_milli_ns as f64 / 1e3).abs() < 1e-9);
            assert!((read.slat_ns.mean - run.slat.mean_milli_ns as f64 / 1e3).abs() < 1e-9);
            assert_eq!(read.clat_ns.percentile(50.0), Some(run.clat_percentiles_ns[P50_INDEX]));
            assert_eq!(read.lat_ns.percentile(99.0), Some(run.lat_percentiles_ns[P99_INDEX]));
            assert_eq!(read.lat_ns.percentiles.len(), 17);
            assert_eq!(job.write.total_ios, 0);
            assert_eq!(read.iops_samples, run.iops_samples.samples);
            assert_eq!(
                (read.bw_min, read.bw_max),
                (run.bandwidth_kib_samples.min, run.bandwidth_kib_samples.max)
            );
            assert!((read.iops_mean - run.iops_samples.mean_milli as f64 / 1e3).abs() < 1e-9);
            assert_eq!(job.latency_depth, u64::from(run.queue_depth));
            assert_eq!(job.elapsed, run.elapsed_ns.div_ceil(NS_PER_S));
            let band_total: f64 =
                job.latency_ns.values().chain(job.latency_us.values()).chain(job.latency_ms.values()).sum();
            assert!(run.ios == 0 || (99.9..100.2).contains(&band_total), "{band_total}");
            let settings = &job.settings;
            assert_eq!(settings.rw, run.job.operation.fio_name());
            assert_eq!(settings.block_bytes, run.block_bytes);
            assert_eq!(settings.queue_depth, run.queue_depth);
            assert_eq!(settings.device.as_deref(), Some(run.device_name.as_str()));
            assert_eq!(settings.run, Some(run.run));
            assert_eq!(settings.runtime_ns, Some(NS_PER_S));
            assert_eq!(settings.ramp_time_ns, Some(100 * NS_PER_MS));
            let extras = job.barebench.as_ref().unwrap();
            assert_eq!(extras.errors_total, run.errors_total());
            assert_eq!(extras.errors.get("crc").copied(), Some(run.errors[1]));
            assert_eq!(extras.window_ns, run.window_ns);
            assert_eq!(extras.requested_queue_depth, run.job.queue_depth);
        }
        // The SD device ran at queue depth 1 whatever was asked, said so, and saw CRC errors.
        // The job name carries the workload as asked; the options and facts what ran.
        let sd_qd32 = report.jobs.iter().find(|j| j.jobname == "randread-4k-qd32-sd0-run2").unwrap();
        assert_eq!(sd_qd32.job_options.get("iodepth").map(String::as_str), Some("1"));
        let facts = sd_qd32.barebench.as_ref().unwrap();
        assert_eq!((facts.requested_queue_depth, facts.queue_depth), (32, 1));
        assert!(facts.notes.iter().any(|n| n.starts_with("sd0 has no command queueing")));
        let names: std::collections::BTreeSet<&str> =
            report.jobs.iter().map(|j| j.jobname.as_str()).collect();
        assert_eq!(names.len(), report.jobs.len(), "job names are unique");
        assert!(report
            .jobs
            .iter()
            .filter(|j| j.settings.device.as_deref() == Some("sd0"))
            .all(|j| j.settings.queue_depth == 1));
        assert!(results.runs.iter().any(|r| r.errors[1] > 0));

        assert_eq!(report.barebench_medians.len(), results.medians.len());
        for (parsed, median) in report.barebench_medians.iter().zip(&results.medians) {
            assert_eq!(parsed.device, median.device_name);
            assert_eq!(parsed.runs, 3);
            assert!((parsed.iops - median.iops_micro as f64 / 1e6).abs() < 1e-6);
            assert!((parsed.bw_bytes - median.bandwidth_micro as f64 / 1e6).abs() < 1e-6);
            assert!((parsed.lat_p99_ns - median.lat_p99_milli_ns as f64 / 1e3).abs() < 1e-9);
            assert!((parsed.clat_mean_ns - median.clat_mean_milli_ns as f64 / 1e3).abs() < 1e-9);
        }
        let info = report.barebench.as_ref().unwrap();
        assert_eq!(info.board.as_deref(), Some("simulated \"board\""));
        assert_eq!(info.timer_frequency_hz, Some(54_000_000));
        assert_eq!(info.median_rule.as_deref(), Some(MEDIAN_RULE));
        assert_eq!(info.other.get("cpu"), Some(&serde_json::Value::String("host test".into())));
    }

    #[test]
    fn the_json_has_fio_field_names_and_types() {
        let (console, results, _) = simulated_benchmark();
        let json = extract_json_from_log(&console).unwrap();
        let value: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
        assert!(value["fio version"].is_string());
        assert!(value["global options"]["ramp_time"].is_string());
        let jobs = value["jobs"].as_array().unwrap();
        assert_eq!(jobs.len(), results.runs.len());
        for job in jobs {
            for key in ["jobname", "groupid", "error", "job options", "read", "write"] {
                assert!(job.get(key).is_some(), "missing {key}");
            }
            for option in ["rw", "bs", "iodepth", "filename", "ramp_time", "runtime"] {
                assert!(job["job options"][option].is_string(), "option {option}");
            }
            let read = &job["read"];
            for key in
                ["io_bytes", "io_kbytes", "bw_bytes", "bw", "runtime", "total_ios", "short_ios", "drop_ios"]
            {
                assert!(read[key].is_u64(), "read.{key}");
            }
            assert!(read["iops"].is_f64());
            for latency in ["slat_ns", "clat_ns", "lat_ns"] {
                let stat = &read[latency];
                assert!(stat["min"].is_u64() && stat["max"].is_u64() && stat["N"].is_u64());
                assert!(stat["mean"].is_f64() && stat["stddev"].is_f64(), "{latency}");
            }
            assert!(read["slat_ns"].get("percentile").is_none());
            let percentiles = read["clat_ns"]["percentile"].as_object().unwrap();
            let keys: Vec<&str> = percentiles.keys().map(String::as_str).collect();
            for key in ["1.000000", "50.000000", "99.000000", "99.500000", "99.990000"] {
                assert!(keys.contains(&key), "{key} in {keys:?}");
            }
            assert!(job["write"]["iops"].is_f64());
            assert!(job["barebench"]["errors"]["timeout"].is_u64());
        }
        let medians = value["barebench medians"].as_array().unwrap();
        assert_eq!(medians.len(), 6);
        assert!(medians[0]["lat_p99_ns"].is_f64());
    }

    #[test]
    fn strings_are_escaped() {
        let mut out = String::new();
        crate::json_writer::write_escaped(&mut out, format_args!("a\"b\\c\nd\u{1}é")).unwrap();
        assert_eq!(out, "\"a\\\"b\\\\c\\nd\\u0001é\"");
        let parsed: String = serde_json::from_str(&out).unwrap();
        assert_eq!(parsed, "a\"b\\c\nd\u{1}é");
    }

    #[test]
    fn empty_results_are_still_a_valid_document() {
        let mut out = String::new();
        let config = Config::default();
        write_results_block(&mut out, &config, &ReportContext::default(), &BenchmarkResults::default())
            .unwrap();
        let json = extract_json_from_log(&out).unwrap();
        let report = parse_fio_json(&json).unwrap();
        assert!(report.jobs.is_empty() && report.barebench_medians.is_empty());
        assert!(json.contains("\"jobs\" : [],") || json.contains("\"jobs\" : []"));
    }

    // The JSON against fio 3.36's own, key by key.
    // The JSON of a real benchmark run against fio 3.36's own JSON, key by key and type by type,
    // and its interval samples, latency and depth bands and json+ bins against values this test
    // computes itself from what the simulated device saw (docs/fio-json.md §2–§5).
    const FIO_3_36: &str = include_str!("../tests/data/fio-3.36-nvme-randread.json");

    /// The clock runs in ns; an empty poll moves it by this much (a poll's cost), so every event
    /// lies on a 1 µs grid and the runner sees each completion at exactly its due time.
    const POLL_STEP_NS: u64 = 1_000;
    /// Latencies in µs, taken in turn by each request: every fio band from µs to ms is reached.
    const LATENCIES_US: [u64; 8] = [3, 40, 150, 900, 1_500, 25_000, 7, 60];
    const QUEUE_DEPTH: u32 = 8;
    const RAMP_NS: u64 = 10 * NS_PER_MS;
    const RUNTIME_NS: u64 = 100 * NS_PER_MS;
    const INTERVAL_NS: u64 = 10 * NS_PER_MS;
    const BLOCK_BYTES: u64 = 4096;

    /// What the device saw, in clock ticks (= ns).
    #[derive(Default)]
    struct DeviceLog {
        first_submit: Option<u64>,
        /// (time, requests in this doorbell, requests in flight after it).
        kicks: Vec<(u64, usize, usize)>,
        /// (time, completions returned) for polls that returned some.
        reaps: Vec<(u64, usize)>,
        /// (completion time, latency) of every completion.
        completions: Vec<(u64, u64)>,
    }

    /// Completes each request a scripted time after its doorbell.
    struct ScriptedDevice<'c> {
        clock: &'c SteppingClock,
        geometry: Geometry,
        submitted: Vec<u32>,
        in_flight: VecDeque<(u32, u64, u64)>,
        next_latency: usize,
        log: &'c RefCell<DeviceLog>,
    }

    impl BlockDevice for ScriptedDevice<'_> {
        fn name(&self) -> &str {
            "nvme0"
        }

        fn geometry(&self) -> Geometry {
            self.geometry
        }

        fn submit(&mut self, request: Request) -> Result<(), (Request, SubmitError)> {
            if let Err(error) = check_request(&self.geometry, &request) {
                return Err((request, error));
            }
            self.log.borrow_mut().first_submit.get_or_insert(self.clock.peek());
            self.submitted.push(request.tag);
            Ok(())
        }

        fn kick(&mut self) {
            let now = self.clock.peek();
            let batch = self.submitted.len();
            for tag in self.submitted.drain(..) {
                let latency = LATENCIES_US[self.next_latency % LATENCIES_US.len()] * 1_000;
                self.next_latency += 1;
                self.in_flight.push_back((tag, now + latency, latency));
            }
            self.log.borrow_mut().kicks.push((now, batch, self.in_flight.len()));
        }

        fn poll(&mut self, completions: &mut [Completion]) -> usize {
            let now = self.clock.peek();
            let mut count = 0;
            while count < completions.len() {
                let Some(position) = self.in_flight.iter().position(|&(_, due, _)| due <= now) else {
                    break;
                };
                let (tag, due, latency) = self.in_flight.remove(position).unwrap_or_default();
                completions[count] = Completion { tag, result: Ok(()) };
                self.log.borrow_mut().completions.push((due, latency));
                count += 1;
            }
            if count == 0 {
                self.clock.advance_to(now + POLL_STEP_NS);
            } else {
                self.log.borrow_mut().reaps.push((now, count));
            }
            count
        }
    }

    fn config(output: OutputFormat) -> Config {
        let mut config = Config::for_preset(crate::settings::Preset::Quick);
        config.jobs = [JobSpec::new(JobOperation::RandRead, BLOCK_BYTES, QUEUE_DEPTH)].to_vec();
        config.runs = 1;
        config.ramp_ns = RAMP_NS;
        config.runtime_ns = RUNTIME_NS;
        config.sample_interval_ns = INTERVAL_NS;
        config.progress = false;
        config.output = output;
        config
    }

    /// One run of the scripted device; returns the JSON and the device's log.
    fn scripted_run(output: OutputFormat) -> (Value, DeviceLog) {
        let clock = SteppingClock::new(1_000_000_000, 0);
        let log = RefCell::new(DeviceLog::default());
        let mut device = ScriptedDevice {
            clock: &clock,
            geometry: Geometry {
                logical_block_bytes: 512,
                block_count: 1 << 22,
                max_request_blocks: 256,
                max_in_flight: 64,
            },
            submitted: Vec::new(),
            in_flight: VecDeque::new(),
            next_latency: 0,
            log: &log,
        };
        let counters = NoCpuCounters("host test");
        let environment = RunEnvironment {
            clock: &clock,
            cpu_counters: &counters,
            buffer_area: DmaBuffer {
                cpu_address: 0x1000_0000,
                physical_address: 0x1000_0000,
                length_bytes: 1 << 20,
            },
            memory: None,
            writes: None,
            conditions: None,
        };
        let mut console = String::new();
        let mut devices: [&mut dyn BlockDevice; 1] = [&mut device];
        run_benchmark(&config(output), &mut devices, &environment, &ReportContext::default(), &mut console);
        assert_eq!(clock.ticks_per_second(), 1_000_000_000);
        let json = extract_json_from_log(&console).expect("a results block");
        (serde_json::from_str(&json).expect("valid JSON"), log.into_inner())
    }

    /// Same JSON type: objects, arrays, strings, and numbers split as fio prints them (`%lld`
    /// integers, `%f` floats).
    fn kind(value: &Value) -> &'static str {
        match value {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(number) if number.is_f64() => "float",
            Value::Number(_) => "integer",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        }
    }

    /// Every key of `fio` is in `ours` with the same type, recursively; array elements are compared
    /// when both arrays have some; option objects only by type. Collects the paths that differ.
    fn missing_or_different(fio: &Value, ours: &Value, path: &str, problems: &mut Vec<String>) {
        if kind(fio) != kind(ours) {
            problems.push(std::format!("{path}: fio has {}, barebench {}", kind(fio), kind(ours)));
            return;
        }
        // Option objects hold what each run was given, not a schema (fio lists only options set).
        let options = path.ends_with(" options");
        match (fio, ours) {
            (Value::Object(fio), Value::Object(ours)) if !options => {
                for (key, fio_value) in fio {
                    match ours.get(key) {
                        Some(our_value) => missing_or_different(
                            fio_value,
                            our_value,
                            &std::format!("{path}.{key}"),
                            problems,
                        ),
                        None => problems.push(std::format!("{path}.{key}: missing")),
                    }
                }
            }
            (Value::Array(fio), Value::Array(ours)) => {
                if let (Some(fio_first), Some(our_first)) = (fio.first(), ours.first()) {
                    missing_or_different(fio_first, our_first, &std::format!("{path}[0]"), problems);
                }
            }
            _ => {}
        }
    }

    #[test]
    fn every_key_fio_3_36_writes_is_there_with_fios_type() {
        let (ours, _) = scripted_run(OutputFormat::Json);
        let fio: Value = serde_json::from_str(FIO_3_36).unwrap();
        let mut problems = Vec::new();
        let (mut fio_top, mut our_top) = (fio.clone(), ours.clone());
        let fio_job = fio_top.as_object_mut().unwrap().remove("jobs").unwrap()[0].clone();
        let our_job = our_top.as_object_mut().unwrap().remove("jobs").unwrap()[0].clone();
        missing_or_different(&fio_top, &our_top, "", &mut problems);
        missing_or_different(&fio_job, &our_job, "jobs[0]", &mut problems);
        // The options fio-plot needs, as strings (docs/fio-json.md §7).
        for option in ["rw", "bs", "iodepth", "numjobs"] {
            if !our_job["job options"][option].is_string() {
                problems.push(std::format!("job options.{option} is not a string"));
            }
        }
        assert!(problems.is_empty(), "{problems:#?}");
        // The keys nobody can measure here say so the way fio would.
        assert_eq!(ours["time"], "Thu Jan  1 00:00:00 1970");
        assert_eq!(
            (our_job["ctx"].as_u64(), our_job["majf"].as_u64(), our_job["minf"].as_u64()),
            (Some(0), Some(0), Some(0))
        );
        assert_eq!(our_job["latency_depth"].as_u64(), Some(u64::from(QUEUE_DEPTH)));
        assert!(our_job["read"]["clat_ns"].get("bins").is_none(), "bins only with json+");
    }

    fn close(actual: &Value, expected: f64, tolerance: f64, what: &str) {
        let actual = actual.as_f64().unwrap_or_else(|| panic!("{what} is not a number: {actual}"));
        assert!((actual - expected).abs() <= tolerance, "{what}: {actual}, expected {expected}");
    }

    /// fio's percentage with its floor for non-zero shares.
    fn share(count: u64, total: u64, floor: f64) -> f64 {
        if count == 0 || total == 0 {
            return 0.0;
        }
        (100.0 * count as f64 / total as f64).max(floor)
    }

    /// Sample mean and standard deviation (n − 1).
    fn mean_and_stddev(values: &[u64]) -> (f64, f64) {
        let n = values.len() as f64;
        let mean = values.iter().sum::<u64>() as f64 / n;
        let squares: f64 = values.iter().map(|&v| (v as f64 - mean).powi(2)).sum();
        (mean, if values.len() > 1 { (squares / (n - 1.0)).sqrt() } else { 0.0 })
    }

    #[test]
    fn samples_and_bands_match_what_the_device_saw() {
        let (ours, log) = scripted_run(OutputFormat::Json);
        let job = &ours["jobs"][0];
        let start = log.first_submit.unwrap();
        let (ramp_end, window_end) = (start + RAMP_NS, start + RAMP_NS + RUNTIME_NS);
        let in_window = |t: u64| t >= ramp_end && t < window_end;
        let completed: Vec<(u64, u64)> =
            log.completions.iter().copied().filter(|&(t, _)| in_window(t)).collect();
        assert!(completed.len() > 100, "{} completions", completed.len());
        assert_eq!(job["read"]["total_ios"].as_u64(), Some(completed.len() as u64));

        // Interval samples: boundary k counts completions in (b(k-1), b(k)], the first from the ramp's end.
        let boundaries: Vec<u64> =
            (1..=RUNTIME_NS / INTERVAL_NS).map(|k| ramp_end + k * INTERVAL_NS).collect();
        let mut iops_samples = Vec::new();
        let mut bw_samples = Vec::new();
        for (k, &boundary) in boundaries.iter().enumerate() {
            let previous = if k == 0 { ramp_end } else { boundaries[k - 1] + 1 };
            let count = completed.iter().filter(|&&(t, _)| t >= previous && t <= boundary).count() as u64;
            if count > 0 {
                iops_samples.push(count * 1_000_000_000 / INTERVAL_NS);
                bw_samples.push(count * BLOCK_BYTES * 1_000_000_000 / INTERVAL_NS / 1024);
            }
        }
        let read = &job["read"];
        for (prefix, deviation, samples) in
            [("iops", "iops_stddev", &iops_samples), ("bw", "bw_dev", &bw_samples)]
        {
            let (mean, stddev) = mean_and_stddev(samples);
            assert_eq!(
                read[std::format!("{prefix}_samples")].as_u64(),
                Some(samples.len() as u64),
                "{prefix}"
            );
            assert_eq!(
                read[std::format!("{prefix}_min")].as_u64(),
                samples.iter().min().copied(),
                "{prefix}"
            );
            assert_eq!(
                read[std::format!("{prefix}_max")].as_u64(),
                samples.iter().max().copied(),
                "{prefix}"
            );
            close(&read[std::format!("{prefix}_mean")], mean, 1e-3, prefix);
            close(&read[deviation], stddev, 1e-3, deviation);
        }
        let bw_bytes = read["bw_bytes"].as_f64().unwrap();
        close(
            &read["bw_agg"],
            (100.0 * mean_and_stddev(&bw_samples).0 * 1024.0 / bw_bytes).min(100.0),
            1e-5,
            "bw_agg",
        );

        // Latency bands: each completion by its latency, truncated to ns, µs or ms.
        let edges = [2u64, 4, 10, 20, 50, 100, 250, 500, 750, 1000];
        let total = completed.len() as u64;
        for (map, unit_ns) in [("latency_ns", 1u64), ("latency_us", 1_000), ("latency_ms", 1_000_000)] {
            let keys: Vec<String> = job[map].as_object().unwrap().keys().cloned().collect();
            assert_eq!(keys.len(), if map == "latency_ms" { 12 } else { 10 }, "{map}");
            for (index, &edge) in edges.iter().enumerate() {
                let lower = if index == 0 { 0 } else { edges[index - 1] };
                let count = completed
                    .iter()
                    .filter(|&&(_, latency)| {
                        let in_unit = latency / unit_ns;
                        let unit_applies = match unit_ns {
                            1 => latency < 1_000,
                            1_000 => (1_000..1_000_000).contains(&latency),
                            _ => latency >= 1_000_000,
                        };
                        unit_applies && in_unit >= lower && in_unit < edge
                    })
                    .count() as u64;
                close(
                    &job[map][edge.to_string()],
                    share(count, total, 0.01),
                    1e-6,
                    &std::format!("{map}.{edge}"),
                );
            }
        }
        assert!(job["latency_ms"]["50"].as_f64().unwrap() > 0.0, "the 25 ms completions");

        // Depth bands, from the device's own doorbells and reaps inside the window.
        let level_band =
            |n: usize| [1usize, 2, 4, 8, 16, 32, 64].iter().rposition(|&low| n >= low).unwrap_or(0);
        let batch_band =
            |n: usize| [0usize, 1, 5, 9, 17, 33, 65].iter().rposition(|&low| n >= low).unwrap_or(0);
        let mut level = [0u64; 7];
        let mut submit = [0u64; 7];
        let mut complete = [0u64; 7];
        for &(_, batch, in_flight) in log.kicks.iter().filter(|&&(t, _, _)| in_window(t)) {
            level[level_band(in_flight)] += batch as u64;
            submit[batch_band(batch)] += 1;
        }
        for &(_, count) in log.reaps.iter().filter(|&&(t, _)| in_window(t)) {
            complete[batch_band(count)] += 1;
        }
        let maps = [
            ("iodepth_level", ["1", "2", "4", "8", "16", "32", ">=64"], level),
            ("iodepth_submit", ["0", "4", "8", "16", "32", "64", ">=64"], submit),
            ("iodepth_complete", ["0", "4", "8", "16", "32", "64", ">=64"], complete),
        ];
        for (map, keys, counts) in maps {
            let total: u64 = counts.iter().sum();
            assert!(total > 0, "{map}");
            for (key, count) in keys.iter().zip(counts) {
                close(&job[map][*key], share(count, total, 0.1), 1e-6, &std::format!("{map}.{key}"));
            }
        }
        assert!(job["iodepth_level"]["8"].as_f64().unwrap() > 50.0, "QD8 is kept in flight");
    }

    /// fio's histogram bucket value (`plat_val_to_idx`, `plat_idx_to_val`): exact below 128 ns,
    /// then 64 buckets per power of two, each reported at its middle.
    fn fio_bucket_value(value_ns: u64) -> u64 {
        if value_ns < 128 {
            return value_ns;
        }
        let exponent = 63 - value_ns.leading_zeros() as u64 - 6;
        let start = (value_ns >> exponent) << exponent;
        start + (1 << exponent) / 2
    }

    #[test]
    fn json_plus_bins_are_fios_buckets_of_every_completion() {
        let (ours, log) = scripted_run(OutputFormat::JsonPlus);
        let job = &ours["jobs"][0];
        let start = log.first_submit.unwrap();
        let in_window = |t: u64| t >= start + RAMP_NS && t < start + RAMP_NS + RUNTIME_NS;
        let mut expected = std::collections::BTreeMap::<u64, u64>::new();
        for &(_, latency) in log.completions.iter().filter(|&&(t, _)| in_window(t)) {
            *expected.entry(fio_bucket_value(latency)).or_default() += 1;
        }
        for kind in ["clat_ns", "lat_ns"] {
            let bins: std::collections::BTreeMap<u64, u64> = job["read"][kind]["bins"]
                .as_object()
                .unwrap_or_else(|| panic!("{kind} has no bins"))
                .iter()
                .map(|(key, count)| (key.parse().unwrap(), count.as_u64().unwrap()))
                .collect();
            assert_eq!(bins, expected, "{kind}");
        }
        assert!(job["read"]["slat_ns"].get("bins").is_none(), "fio gives slat no percentiles, so no bins");
    }
}
