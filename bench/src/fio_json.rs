//! Reads fio-compatible JSON — fio 3.x's own and barebench's — and finds it in serial logs (docs/nvme-and-fio.md §3.5).
//!
//! The host tool uses this module to put bare-metal results and Linux fio results side by side.
//! It needs the `std` feature (serde and serde_json).
//!
//! - [`extract_json_from_log`] finds the block between [`crate::JSON_BEGIN_MARKER`] and
//!   [`crate::JSON_END_MARKER`] in a serial log, which may contain `\r` progress lines, ANSI escape
//!   sequences and may end early.
//! - [`parse_fio_json`] reads a whole JSON document into a [`FioReport`]. Fields fio always writes
//!   are plain fields (zero when absent); barebench's extra objects are optional. Each job's
//!   [`JobSettings`] are resolved from its `"job options"`, falling back to `"global options"`
//!   (where fio puts options given before the first `--name` on its command line), then to the
//!   barebench facts when present, then to fio's documented defaults.

use std::collections::BTreeMap;
use std::string::{String, ToString};
use std::vec::Vec;

use serde::de::{self, Deserializer};
use serde::Deserialize;

use crate::{JSON_BEGIN_MARKER, JSON_END_MARKER};

/// A whole fio JSON document (`--output-format=json`), as fio 3.x or barebench writes it.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct FioReport {
    /// `"fio-3.36"` for fio, `"barebench-0.1.0"` for this program.
    #[serde(rename = "fio version")]
    pub fio_version: String,
    /// Report time in s and ms since the epoch, and as `ctime()` text (barebench, without a
    /// wall clock: 0 and the epoch).
    #[serde(deserialize_with = "lenient_u64")]
    pub timestamp: u64,
    #[serde(deserialize_with = "lenient_u64")]
    pub timestamp_ms: u64,
    pub time: String,
    /// Options that apply to every job (values as strings, as fio writes them).
    #[serde(rename = "global options", deserialize_with = "options_map")]
    pub global_options: BTreeMap<String, String>,
    /// One entry per job (barebench: one per device × workload × run).
    pub jobs: Vec<FioJob>,
    /// fio's Linux block-device statistics (empty from barebench), kept as they are.
    pub disk_util: Vec<serde_json::Value>,
    /// barebench only: the median of the runs per device and workload.
    #[serde(rename = "barebench medians")]
    pub barebench_medians: Vec<BarebenchMedian>,
    /// barebench only: program version and the facts the kernel passed (board, timer).
    pub barebench: Option<BarebenchInfo>,
    /// barebench only: whole-surface scans, sustained writes and hdparm timings
    /// (crate::stream_json).
    #[serde(rename = "barebench scan")]
    pub barebench_scan: Vec<crate::stream_json::read::ScanReport>,
    #[serde(rename = "barebench sustained")]
    pub barebench_sustained: Vec<crate::stream_json::read::SustainedReport>,
    #[serde(rename = "barebench hdparm")]
    pub barebench_hdparm: Vec<crate::stream_json::read::HdparmReport>,
}

impl FioReport {
    /// True when the document was written by barebench rather than fio.
    pub fn is_barebench(&self) -> bool {
        self.fio_version.starts_with("barebench")
    }
}

/// One entry of `"jobs"`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct FioJob {
    pub jobname: String,
    pub groupid: i64,
    /// ms since the epoch at the post-ramp stats reset (fio 3.36+; 0 from barebench).
    #[serde(deserialize_with = "lenient_u64")]
    pub job_start: u64,
    /// fio's errno for the job (0 = no error).
    pub error: i64,
    /// Seconds left, and seconds since the start (rounded up).
    #[serde(deserialize_with = "lenient_u64")]
    pub eta: u64,
    #[serde(deserialize_with = "lenient_u64")]
    pub elapsed: u64,
    /// Options given for this job only (values as strings).
    #[serde(rename = "job options", deserialize_with = "options_map")]
    pub job_options: BTreeMap<String, String>,
    pub read: FioDirection,
    pub write: FioDirection,
    pub trim: FioDirection,
    pub sync: FioSync,
    /// Milliseconds the job ran (fio 3.x).
    #[serde(deserialize_with = "lenient_u64")]
    pub job_runtime: u64,
    /// % of the runtime in user and kernel mode (barebench: driver and bookkeeping against
    /// waiting, and 0).
    pub usr_cpu: f64,
    pub sys_cpu: f64,
    /// Context switches, major and minor page faults (0 from barebench).
    #[serde(deserialize_with = "lenient_u64")]
    pub ctx: u64,
    #[serde(deserialize_with = "lenient_u64")]
    pub majf: u64,
    #[serde(deserialize_with = "lenient_u64")]
    pub minf: u64,
    /// Queue-depth bands in %, keyed as fio writes them (`"1"`, `"2"`, …, `">=64"`).
    pub iodepth_level: BTreeMap<String, f64>,
    pub iodepth_submit: BTreeMap<String, f64>,
    pub iodepth_complete: BTreeMap<String, f64>,
    /// Completion-latency bands in %, keyed by their upper bound in the unit.
    pub latency_ns: BTreeMap<String, f64>,
    pub latency_us: BTreeMap<String, f64>,
    pub latency_ms: BTreeMap<String, f64>,
    #[serde(deserialize_with = "lenient_u64")]
    pub latency_depth: u64,
    #[serde(deserialize_with = "lenient_u64")]
    pub latency_target: u64,
    pub latency_percentile: f64,
    #[serde(deserialize_with = "lenient_u64")]
    pub latency_window: u64,
    /// barebench only: device, run number, errors by kind, window, sizes used.
    pub barebench: Option<BarebenchJob>,
    /// The job's effective settings, resolved by [`parse_fio_json`] (not part of the JSON).
    #[serde(skip)]
    pub settings: JobSettings,
}

/// One direction of a job (`"read"`, `"write"`): fio's per-direction statistics.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct FioDirection {
    #[serde(deserialize_with = "lenient_u64")]
    pub io_bytes: u64,
    #[serde(deserialize_with = "lenient_u64")]
    pub io_kbytes: u64,
    /// Bytes per second over the measured window.
    #[serde(deserialize_with = "lenient_u64")]
    pub bw_bytes: u64,
    /// KiB per second.
    #[serde(deserialize_with = "lenient_u64")]
    pub bw: u64,
    pub iops: f64,
    /// The measured window in milliseconds.
    #[serde(deserialize_with = "lenient_u64")]
    pub runtime: u64,
    #[serde(deserialize_with = "lenient_u64")]
    pub total_ios: u64,
    #[serde(deserialize_with = "lenient_u64")]
    pub short_ios: u64,
    #[serde(deserialize_with = "lenient_u64")]
    pub drop_ios: u64,
    pub slat_ns: FioLatency,
    pub clat_ns: FioLatency,
    pub lat_ns: FioLatency,
    /// Bandwidth over the interval samples in KiB/s; `bw_agg` in % of the group's.
    #[serde(deserialize_with = "lenient_u64")]
    pub bw_min: u64,
    #[serde(deserialize_with = "lenient_u64")]
    pub bw_max: u64,
    pub bw_agg: f64,
    pub bw_mean: f64,
    pub bw_dev: f64,
    #[serde(deserialize_with = "lenient_u64")]
    pub bw_samples: u64,
    /// IOPS over the interval samples.
    #[serde(deserialize_with = "lenient_u64")]
    pub iops_min: u64,
    #[serde(deserialize_with = "lenient_u64")]
    pub iops_max: u64,
    pub iops_mean: f64,
    pub iops_stddev: f64,
    #[serde(deserialize_with = "lenient_u64")]
    pub iops_samples: u64,
}

/// The `"sync"` object: fsync count and latency (zero for reads).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct FioSync {
    #[serde(deserialize_with = "lenient_u64")]
    pub total_ios: u64,
    pub lat_ns: FioLatency,
}

/// A latency statistic in nanoseconds (`slat_ns`, `clat_ns`, `lat_ns`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct FioLatency {
    #[serde(deserialize_with = "lenient_u64")]
    pub min: u64,
    #[serde(deserialize_with = "lenient_u64")]
    pub max: u64,
    pub mean: f64,
    pub stddev: f64,
    /// Number of samples.
    #[serde(rename = "N", deserialize_with = "lenient_u64")]
    pub samples: u64,
    /// Percentile → value in ns, keyed as fio writes them (`"99.000000"`); empty when fio did not
    /// report percentiles for this statistic.
    #[serde(rename = "percentile", deserialize_with = "percentile_map")]
    pub percentiles: BTreeMap<String, u64>,
    /// json+ only: histogram bucket value in ns → count, non-empty buckets.
    #[serde(deserialize_with = "bins_map")]
    pub bins: BTreeMap<u64, u64>,
}

impl FioLatency {
    /// The value reported for percentile `percent` (e.g. `99.0`, `99.9`), if present.
    pub fn percentile(&self, percent: f64) -> Option<u64> {
        self.percentiles.iter().find_map(|(key, value)| {
            let key_percent: f64 = key.trim().parse().ok()?;
            ((key_percent - percent).abs() < 1e-6).then_some(*value)
        })
    }
}

/// barebench's per-job facts (the `"barebench"` object inside a job).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct BarebenchJob {
    /// Device name as the console prints it (`sd0`, `nvme0`).
    pub device: String,
    /// Repetition number, from 1.
    pub run: u32,
    /// Block size actually used (after rounding to the device).
    pub block_bytes: u64,
    /// Queue depth actually used (after clamping to the device).
    pub queue_depth: u32,
    /// Block size the configuration asked for.
    pub requested_block_bytes: u64,
    /// Queue depth the configuration asked for.
    pub requested_queue_depth: u32,
    /// Length of the measured window in nanoseconds.
    pub window_ns: u64,
    /// Ramp before the window in nanoseconds.
    pub ramp_ns: u64,
    /// Region the offsets were drawn from.
    pub region_offset_bytes: u64,
    pub region_size_bytes: u64,
    /// Seed of the offset generator for this run.
    pub seed: u64,
    /// Failed I/Os completed inside the window, by `blockdev::IoErrorKind::name`.
    pub errors: BTreeMap<String, u64>,
    pub errors_total: u64,
    /// Messages about this run (clamping, early end, no I/O).
    pub notes: Vec<String>,
    /// The machine's conditions after the run (docs/fio-json.md §10).
    pub conditions: Option<BarebenchJobConditions>,
}

/// A job's `barebench.conditions`: whether the firmware reported throttling or under-voltage
/// after the run (the rest of the object is read as it is).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct BarebenchJobConditions {
    pub throttled_run: bool,
    pub cooldown_wait_ns: Option<u64>,
}

/// One entry of `"barebench medians"`: the median over the runs of one device and workload,
/// each metric independently (docs/nvme-and-fio.md §3.6).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct BarebenchMedian {
    pub device: String,
    /// The job as asked on the command line (`randread:4k:32`), before per-device clamping;
    /// empty in logs from before it was written.
    pub job: String,
    pub rw: String,
    /// Block size in bytes.
    pub bs: u64,
    pub iodepth: u32,
    /// How many runs the median is taken over.
    pub runs: u32,
    pub iops: f64,
    pub bw_bytes: f64,
    pub clat_mean_ns: f64,
    pub clat_p50_ns: f64,
    pub clat_p99_ns: f64,
    pub clat_p99_9_ns: f64,
    pub lat_mean_ns: f64,
    pub lat_p50_ns: f64,
    pub lat_p99_ns: f64,
    pub lat_p99_9_ns: f64,
    pub lat_max_ns: f64,
    /// Failed I/Os summed over the runs (not a median).
    pub errors_total: u64,
    /// Runs after which the firmware reported throttling or under-voltage; absent from logs
    /// without the conditions.
    pub throttled_runs: Option<u32>,
}

/// The top-level `"barebench"` object: program version and what the kernel passed.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct BarebenchInfo {
    pub version: String,
    pub board: Option<String>,
    pub timer_frequency_hz: Option<u64>,
    pub seed: Option<u64>,
    /// How the median of an even number of runs is taken.
    pub median_rule: Option<String>,
    /// Anything else the kernel added.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

/// A job's effective settings, resolved from job options, global options, barebench facts and
/// fio's defaults (fio HOWTO: `rw` defaults to `read`, `bs` to 4096, `iodepth` to 1).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct JobSettings {
    /// `read`, `randread`, ... as fio spells it.
    pub rw: String,
    pub block_bytes: u64,
    pub queue_depth: u32,
    /// barebench's device name, or fio's `filename` (e.g. `/dev/nvme0n1`); `None` when neither.
    pub device: Option<String>,
    pub ramp_time_ns: Option<u64>,
    pub runtime_ns: Option<u64>,
    /// barebench's run number.
    pub run: Option<u32>,
}

/// fio's default `rw` (HOWTO, `readwrite=str`: "read" is the default).
const FIO_DEFAULT_RW: &str = "read";
/// fio's default `bs` (HOWTO, `blocksize=int`: 4096).
const FIO_DEFAULT_BLOCK_BYTES: u64 = 4096;
/// fio's default `iodepth` (HOWTO, `iodepth=int`: 1).
const FIO_DEFAULT_QUEUE_DEPTH: u32 = 1;

impl FioJob {
    /// The option `key` for this job: its own `"job options"` first, then `global_options`.
    pub fn option<'a>(&'a self, global_options: &'a BTreeMap<String, String>, key: &str) -> Option<&'a str> {
        self.job_options.get(key).or_else(|| global_options.get(key)).map(String::as_str)
    }

    fn resolve_settings(&self, global_options: &BTreeMap<String, String>) -> JobSettings {
        let option = |keys: &[&str]| keys.iter().find_map(|key| self.option(global_options, key));
        let extras = self.barebench.as_ref();
        let rw = option(&["rw", "readwrite"]).unwrap_or(FIO_DEFAULT_RW).to_string();
        let block_bytes = extras
            .map(|e| e.block_bytes)
            .filter(|&b| b > 0)
            .or_else(|| option(&["bs", "blocksize"]).and_then(parse_fio_block_size))
            .unwrap_or(FIO_DEFAULT_BLOCK_BYTES);
        let queue_depth = extras
            .map(|e| e.queue_depth)
            .filter(|&q| q > 0)
            .or_else(|| option(&["iodepth"]).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(FIO_DEFAULT_QUEUE_DEPTH);
        let device = extras
            .map(|e| e.device.clone())
            .filter(|d| !d.is_empty())
            .or_else(|| option(&["filename"]).map(str::to_string));
        JobSettings {
            rw,
            block_bytes,
            queue_depth,
            device,
            ramp_time_ns: option(&["ramp_time"]).and_then(parse_fio_time_ns),
            runtime_ns: option(&["runtime", "timeout"]).and_then(parse_fio_time_ns),
            run: extras.map(|e| e.run).filter(|&r| r > 0),
        }
    }
}

/// Why a document could not be read as fio JSON.
#[derive(Debug, thiserror::Error)]
pub enum FioJsonError {
    /// No line of the text starts with `{`.
    #[error("no JSON object in the text ({text_bytes} bytes, no line starts with '{{')")]
    NoJsonObject { text_bytes: usize },
    /// The JSON is malformed or does not have fio's shape.
    #[error("not fio JSON at line {line}, column {column}: {message}")]
    Json { line: usize, column: usize, message: String },
}

/// Reads fio 3.x JSON or barebench's fio-compatible JSON.
///
/// Text before the first line that starts with `{` is skipped (fio sometimes prints notes before
/// its JSON, fio#731), and so is anything after the document.
pub fn parse_fio_json(text: &str) -> Result<FioReport, FioJsonError> {
    let start = json_start(text).ok_or(FioJsonError::NoJsonObject { text_bytes: text.len() })?;
    let body = &text[start..];
    let mut documents = serde_json::Deserializer::from_str(body).into_iter::<FioReport>();
    let mut report = match documents.next() {
        Some(Ok(report)) => report,
        Some(Err(error)) => {
            let skipped_lines = text[..start].matches('\n').count();
            return Err(FioJsonError::Json {
                line: error.line() + skipped_lines,
                column: error.column(),
                message: error.to_string(),
            });
        }
        None => return Err(FioJsonError::NoJsonObject { text_bytes: text.len() }),
    };
    let global_options = report.global_options.clone();
    for job in &mut report.jobs {
        job.settings = job.resolve_settings(&global_options);
    }
    Ok(report)
}

fn json_start(text: &str) -> Option<usize> {
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        let indent = line.len() - line.trim_start().len();
        if line.trim_start().starts_with('{') {
            return Some(offset + indent);
        }
        offset += line.len();
    }
    None
}

/// Why no results block could be taken from a serial log.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LogError {
    /// The begin marker never appears (`end_marker_seen`: the end marker does, alone).
    #[error(
        "no begin marker (\"{}\") in {log_bytes} bytes of log{}",
        JSON_BEGIN_MARKER,
        if *.end_marker_seen { "; an end marker is there, so the log starts too late" } else { "" }
    )]
    NoBeginMarker { log_bytes: usize, end_marker_seen: bool },
    /// The log stops after the begin marker without the end marker.
    #[error(
        "begin marker but no end marker (log truncated after {log_bytes} bytes; {bytes_after_begin} bytes of \
         results after the begin marker)"
    )]
    NoEndMarker { log_bytes: usize, bytes_after_begin: usize },
}

/// Finds barebench's JSON between the marker lines in a serial log.
///
/// When the log holds several complete blocks (several boots), the last one is returned. ANSI
/// escape sequences and control characters other than tab and newline are removed from the block
/// (JSON escapes its own control characters, so such bytes can only be line noise).
pub fn extract_json_from_log(log: &str) -> Result<String, LogError> {
    let mut last_complete: Option<&str> = None;
    let mut truncated_after_begin: Option<usize> = None;
    let mut search_from = 0;
    while let Some(found) = log[search_from..].find(JSON_BEGIN_MARKER) {
        let block_start = search_from + found + JSON_BEGIN_MARKER.len();
        let rest = &log[block_start..];
        let next_begin = rest.find(JSON_BEGIN_MARKER).unwrap_or(rest.len());
        match rest[..next_begin].find(JSON_END_MARKER) {
            Some(end) => {
                last_complete = Some(&rest[..end]);
                truncated_after_begin = None;
            }
            None => truncated_after_begin = Some(rest.len()),
        }
        search_from = block_start;
    }
    match (last_complete, truncated_after_begin) {
        (Some(block), _) => Ok(clean_log_text(block)),
        (None, Some(bytes_after_begin)) => {
            Err(LogError::NoEndMarker { log_bytes: log.len(), bytes_after_begin })
        }
        (None, None) => Err(LogError::NoBeginMarker {
            log_bytes: log.len(),
            end_marker_seen: log.contains(JSON_END_MARKER),
        }),
    }
}

/// Removes ANSI escape sequences (ECMA-48 CSI `ESC [ … final byte`, and two-byte `ESC x`) and
/// control characters other than `\t` and `\n`.
fn clean_log_text(block: &str) -> String {
    let mut cleaned = String::with_capacity(block.len());
    let mut chars = block.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            // A two-byte escape (`ESC x`) is dropped whole; a CSI (`ESC [`) runs through its
            // parameter and intermediate bytes (0x20..=0x3F) to a final byte in 0x40..=0x7E.
            '\u{1b}' => {
                if chars.next() == Some('[') {
                    for following in chars.by_ref() {
                        if ('\u{40}'..='\u{7e}').contains(&following) {
                            break;
                        }
                    }
                }
            }
            '\t' | '\n' => cleaned.push(c),
            c if c.is_control() => {}
            c => cleaned.push(c),
        }
    }
    cleaned.trim().to_string()
}

/// Parses a size as fio's `int` options take it (fio HOWTO, "Parameter types"): a number with an
/// optional suffix k/m/g/t/p (case-insensitive, optional trailing `b`) meaning powers of 1024;
/// the IEC-looking `kib`/`mib`/… mean powers of 1000 in fio's default `kb_base=1024` (fio's
/// compatibility mode, documented in the HOWTO's `kb_base`). For `bs`, only the first value of
/// a `read,write` pair or `low-high` range is read.
pub fn parse_fio_block_size(text: &str) -> Option<u64> {
    let first = text.split([',', ':']).next()?.trim();
    let first = first.split('-').next()?.trim().to_ascii_lowercase();
    let digits_end = first.find(|c: char| !c.is_ascii_digit()).unwrap_or(first.len());
    let number: u64 = first[..digits_end].parse().ok()?;
    let suffix = &first[digits_end..];
    let (prefix, decimal) = match suffix.strip_suffix("ib") {
        Some(prefix) => (prefix, true),
        None => (suffix.strip_suffix('b').unwrap_or(suffix), false),
    };
    let power = match prefix {
        "" => 0,
        "k" => 1,
        "m" => 2,
        "g" => 3,
        "t" => 4,
        "p" => 5,
        _ => return None,
    };
    if decimal && power == 0 {
        return None;
    }
    let base: u64 = if decimal { 1000 } else { 1024 };
    number.checked_mul(base.checked_pow(power)?)
}

/// Parses a time as fio's `time` options take it (fio HOWTO, "Parameter types"): seconds unless a
/// suffix says otherwise: `d`, `h`, `m` (minutes), `s`, `ms`/`msec`, `us`/`usec`.
pub fn parse_fio_time_ns(text: &str) -> Option<u64> {
    let text = text.trim().to_ascii_lowercase();
    let digits_end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let number: u64 = text[..digits_end].parse().ok()?;
    let ns_per_unit: u64 = match &text[digits_end..] {
        "" | "s" | "sec" => 1_000_000_000,
        "ms" | "msec" => 1_000_000,
        "us" | "usec" => 1_000,
        "m" | "min" => 60 * 1_000_000_000,
        "h" => 3_600 * 1_000_000_000,
        "d" => 86_400 * 1_000_000_000,
        _ => return None,
    };
    number.checked_mul(ns_per_unit)
}

/// An option map whose values are strings in fio's output; numbers and booleans are accepted and
/// turned into their text.
fn options_map<'de, D: Deserializer<'de>>(deserializer: D) -> Result<BTreeMap<String, String>, D::Error> {
    let raw = BTreeMap::<String, serde_json::Value>::deserialize(deserializer)?;
    Ok(raw
        .into_iter()
        .map(|(key, value)| {
            let text = match value {
                serde_json::Value::String(text) => text,
                other => other.to_string(),
            };
            (key, text)
        })
        .collect())
}

/// A count that fio writes as an integer; a float (another writer's) is rounded.
fn lenient_u64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    let value = serde_json::Value::deserialize(deserializer)?;
    json_value_to_u64(&value).ok_or_else(|| {
        de::Error::invalid_value(de::Unexpected::Other(&value.to_string()), &"a non-negative number")
    })
}

fn json_value_to_u64(value: &serde_json::Value) -> Option<u64> {
    match value {
        serde_json::Value::Number(number) => number.as_u64().or_else(|| {
            let float = number.as_f64()?;
            (float >= 0.0 && float.is_finite()).then(|| float.round() as u64)
        }),
        _ => None,
    }
}

fn percentile_map<'de, D: Deserializer<'de>>(deserializer: D) -> Result<BTreeMap<String, u64>, D::Error> {
    let raw = BTreeMap::<String, serde_json::Value>::deserialize(deserializer)?;
    raw.into_iter()
        .map(|(key, value)| match json_value_to_u64(&value) {
            Some(number) => Ok((key, number)),
            None => {
                Err(de::Error::invalid_value(de::Unexpected::Other(&value.to_string()), &"a latency in ns"))
            }
        })
        .collect()
}

/// json+ `bins`: keys are bucket values in ns, as decimal text.
fn bins_map<'de, D: Deserializer<'de>>(deserializer: D) -> Result<BTreeMap<u64, u64>, D::Error> {
    let raw = BTreeMap::<String, serde_json::Value>::deserialize(deserializer)?;
    raw.into_iter()
        .map(|(key, value)| match (key.trim().parse::<u64>(), json_value_to_u64(&value)) {
            (Ok(bucket_ns), Some(count)) => Ok((bucket_ns, count)),
            _ => Err(de::Error::invalid_value(
                de::Unexpected::Other(&key),
                &"a bucket value in ns and a count",
            )),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;

    const FIO_SAMPLE: &str = include_str!("../tests/data/fio-3.36-nvme-randread.json");

    #[test]
    fn reads_a_fio_3_report_with_options_in_global_options() {
        let report = parse_fio_json(FIO_SAMPLE).expect("fixture parses");
        assert!(!report.is_barebench());
        assert_eq!(report.fio_version, "fio-3.36");
        assert_eq!(report.jobs.len(), 3);

        let qd1 = &report.jobs[1];
        assert_eq!(qd1.jobname, "randread-4k-qd1");
        assert_eq!(qd1.settings.rw, "randread");
        assert_eq!(qd1.settings.block_bytes, 4096);
        assert_eq!(qd1.settings.queue_depth, 1);
        // filename, ramp_time and runtime were given before --name: only in "global options".
        assert_eq!(qd1.settings.device.as_deref(), Some("/dev/nvme0n1"));
        assert_eq!(qd1.settings.ramp_time_ns, Some(2_000_000_000));
        assert_eq!(qd1.settings.runtime_ns, Some(10_000_000_000));
        assert_eq!(qd1.read.total_ios, 135_805);
        assert!((qd1.read.iops - 13_579.142_086).abs() < 1e-6);
        assert_eq!(qd1.read.bw_bytes, 55_620_165);
        assert!((qd1.read.clat_ns.mean - 71_806.522_845).abs() < 1e-6);
        assert_eq!(qd1.read.clat_ns.percentile(99.0), Some(110_080));
        assert_eq!(qd1.read.clat_ns.percentile(99.99), Some(1_433_600));
        assert_eq!(qd1.read.clat_ns.percentile(42.0), None);
        assert!(qd1.read.lat_ns.percentiles.is_empty());
        assert_eq!(qd1.read.lat_ns.samples, 135_805);
        assert_eq!(qd1.write.total_ios, 0);
        assert!(qd1.barebench.is_none());

        let sequential = &report.jobs[0];
        assert_eq!(sequential.settings.rw, "read");
        assert_eq!(sequential.settings.block_bytes, 1 << 20);
        assert_eq!(sequential.settings.queue_depth, 16);
        assert_eq!(report.jobs[2].settings.queue_depth, 32);

        // The rest of fio 3.36's schema.
        assert_eq!((report.timestamp, report.timestamp_ms), (1_718_000_039, 1_718_000_039_512));
        assert_eq!(report.time, "Mon Jun 10 06:13:59 2024");
        assert_eq!(report.disk_util.len(), 1);
        assert_eq!((sequential.job_start, sequential.elapsed, sequential.eta), (1_718_000_000_123, 13, 0));
        let read = &sequential.read;
        assert_eq!((read.bw_min, read.bw_max, read.bw_samples), (440_320, 462_848, 20));
        assert!((read.bw_agg - 100.0).abs() < 1e-9 && (read.bw_mean - 451_206.2).abs() < 1e-6);
        assert!((read.bw_dev - 4_301.77).abs() < 1e-6);
        assert_eq!((read.iops_min, read.iops_max, read.iops_samples), (430, 452, 20));
        assert!((read.iops_mean - 440.6).abs() < 1e-9 && (read.iops_stddev - 4.19).abs() < 1e-9);
        assert_eq!((sequential.trim.total_ios, sequential.sync.total_ios), (0, 0));
        assert!((sequential.usr_cpu - 1.23).abs() < 1e-9 && (sequential.sys_cpu - 4.56).abs() < 1e-9);
        assert_eq!((sequential.ctx, sequential.majf, sequential.minf), (4423, 0, 36));
        assert_eq!(sequential.iodepth_level.get("16"), Some(&100.0));
        assert_eq!(sequential.iodepth_complete.get("8"), Some(&0.1));
        assert_eq!(sequential.iodepth_submit.len(), 7);
        assert_eq!(sequential.latency_us.get("100"), Some(&97.5));
        assert_eq!((sequential.latency_ns.len(), sequential.latency_ms.len()), (10, 12));
        assert_eq!(
            (sequential.latency_depth, sequential.latency_target, sequential.latency_window),
            (16, 0, 0)
        );
        assert!((sequential.latency_percentile - 100.0).abs() < 1e-9);
        assert!(read.clat_ns.bins.is_empty(), "json, not json+");
    }

    #[test]
    fn reads_json_plus_bins() {
        let text = r#"{"jobs": [{"read": {"clat_ns": {"N": 3, "bins": {"2528": 2, "87552": 1}}}}]}"#;
        let report = parse_fio_json(text).unwrap();
        let bins: Vec<(u64, u64)> = report.jobs[0].read.clat_ns.bins.iter().map(|(&k, &v)| (k, v)).collect();
        assert_eq!(bins, [(2528, 2), (87_552, 1)]);
        assert!(parse_fio_json(r#"{"jobs": [{"read": {"clat_ns": {"bins": {"x": 1}}}}]}"#).is_err());
    }

    #[test]
    fn skips_notes_before_the_json_and_reports_syntax_errors_with_position() {
        let noisy = format!("note: both iodepth >= 1 and synchronous I/O engine\n{FIO_SAMPLE}\n");
        assert_eq!(parse_fio_json(&noisy).unwrap().jobs.len(), 3);

        assert!(matches!(
            parse_fio_json("fio: no jobs given"),
            Err(FioJsonError::NoJsonObject { text_bytes: 18 })
        ));
        let error = parse_fio_json("warning\n{\n \"jobs\" : [ { \"read\" : 7 } ]\n}").unwrap_err();
        match &error {
            FioJsonError::Json { line, .. } => assert_eq!(*line, 3),
            other => panic!("unexpected {other:?}"),
        }
        assert!(error.to_string().starts_with("not fio JSON at line 3"));
    }

    #[test]
    fn fio_sizes_and_times_follow_the_howto() {
        assert_eq!(parse_fio_block_size("4k"), Some(4096));
        assert_eq!(parse_fio_block_size("4K"), Some(4096));
        assert_eq!(parse_fio_block_size("4kb"), Some(4096));
        assert_eq!(parse_fio_block_size("1M"), Some(1 << 20));
        assert_eq!(parse_fio_block_size("4096"), Some(4096));
        assert_eq!(parse_fio_block_size("4KiB"), Some(4000));
        assert_eq!(parse_fio_block_size("4k,64k"), Some(4096));
        assert_eq!(parse_fio_block_size("4k-16k"), Some(4096));
        assert_eq!(parse_fio_block_size("4x"), None);
        assert_eq!(parse_fio_block_size(""), None);
        assert_eq!(parse_fio_time_ns("2"), Some(2_000_000_000));
        assert_eq!(parse_fio_time_ns("500ms"), Some(500_000_000));
        assert_eq!(parse_fio_time_ns("1m"), Some(60_000_000_000));
        assert_eq!(parse_fio_time_ns("250us"), Some(250_000));
        assert_eq!(parse_fio_time_ns("ten"), None);
    }

    #[test]
    fn options_given_as_numbers_are_read_as_text() {
        let report = parse_fio_json(
            r#"{"fio version":"x","global options":{"iodepth":8,"bs":"64k"},
                "jobs":[{"jobname":"j","read":{"iops":1.5,"bw_bytes":12.0}}]}"#,
        )
        .unwrap();
        let job = &report.jobs[0];
        assert_eq!(job.settings.queue_depth, 8);
        assert_eq!(job.settings.block_bytes, 65536);
        assert_eq!(job.settings.rw, "read");
        assert_eq!(job.read.bw_bytes, 12);
    }

    #[test]
    fn barebench_facts_take_precedence_over_options() {
        let report = parse_fio_json(
            r#"{"fio version":"barebench-0.1.0","global options":{"ramp_time":"500ms"},
                "jobs":[{"jobname":"j","job options":{"rw":"randread","bs":"4k","iodepth":"32",
                  "filename":"sd0"},
                  "barebench":{"device":"sd0","run":2,"block_bytes":4096,"queue_depth":1,
                  "requested_queue_depth":32,"errors":{"crc":3},"errors_total":3}}],
                "barebench medians":[{"device":"sd0","rw":"randread","bs":4096,"iodepth":1,
                  "runs":3,"iops":2500.5}],
                "barebench":{"version":"0.1.0","board":"qemu-virt","timer_frequency_hz":62500000,
                  "cpu":"cortex-a72"}}"#,
        )
        .unwrap();
        assert!(report.is_barebench());
        let job = &report.jobs[0];
        assert_eq!(job.settings.queue_depth, 1);
        assert_eq!(job.settings.device.as_deref(), Some("sd0"));
        assert_eq!(job.settings.run, Some(2));
        assert_eq!(job.settings.ramp_time_ns, Some(500_000_000));
        let extras = job.barebench.as_ref().unwrap();
        assert_eq!(extras.errors.get("crc"), Some(&3));
        assert_eq!(extras.requested_queue_depth, 32);
        assert_eq!(report.barebench_medians[0].iops, 2500.5);
        let info = report.barebench.as_ref().unwrap();
        assert_eq!(info.timer_frequency_hz, Some(62_500_000));
        assert_eq!(info.other.get("cpu"), Some(&serde_json::Value::String("cortex-a72".into())));
    }

    fn block(body: &str) -> String {
        format!("{JSON_BEGIN_MARKER}\r\n{body}\r\n{JSON_END_MARKER}\r\n")
    }

    #[test]
    fn extracts_the_block_between_markers_from_a_noisy_log() {
        let log = format!(
            "\x1b[2J\x1b[Hbarebench 0.1.0\r\n  nvme0 read 1m qd16: 1.5 s of 12.0 s\r  nvme0 read \
             1m qd16: 12.0 s of 12.0 s\n{}done\n",
            block("{\"fio version\" : \"barebench-0.1.0\",\x1b[0m \"jobs\" : []}")
        );
        let json = extract_json_from_log(&log).unwrap();
        assert_eq!(json, "{\"fio version\" : \"barebench-0.1.0\", \"jobs\" : []}");
        assert!(parse_fio_json(&json).unwrap().is_barebench());
    }

    #[test]
    fn takes_the_last_complete_block() {
        let log = format!("{}reboot\n{}", block("{\"first\": 1}"), block("{\"second\": 2}"));
        assert_eq!(extract_json_from_log(&log).unwrap(), "{\"second\": 2}");
        let with_truncated_tail = format!("{}{JSON_BEGIN_MARKER}\n{{\"thi", block("{\"a\": 1}"));
        assert_eq!(extract_json_from_log(&with_truncated_tail).unwrap(), "{\"a\": 1}");
    }

    #[test]
    fn says_what_is_missing() {
        let error = extract_json_from_log("boot\nno results\n").unwrap_err();
        assert_eq!(error, LogError::NoBeginMarker { log_bytes: 16, end_marker_seen: false });
        assert!(error.to_string().starts_with("no begin marker"));

        let truncated = format!("boot\n{JSON_BEGIN_MARKER}\n{{\"jobs\": [");
        let error = extract_json_from_log(&truncated).unwrap_err();
        assert_eq!(error, LogError::NoEndMarker { log_bytes: truncated.len(), bytes_after_begin: 11 });
        assert!(error.to_string().starts_with(&format!(
            "begin marker but no end marker (log truncated after {} bytes",
            truncated.len()
        )));

        let tail_only = format!("}}\n{JSON_END_MARKER}\n");
        assert!(extract_json_from_log(&tail_only)
            .unwrap_err()
            .to_string()
            .contains("an end marker is there"));
    }
}
