//! The benchmark's settings from the kernel command line: `key=value` words, presets, defaults (docs/architecture.md "Configuration").
//!
//! The reference workload is the default. A `preset=` sets defaults that explicit keys then
//! override wherever they stand on the line. A malformed value is reported with the accepted
//! forms and the key keeps its default; keys that are not the benchmark's are handed back as
//! [`Applied::NotMine`] so the kernel can claim its own (`exit=`, `nvme.*`, ...).

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use crate::units::{
    parse_duration_ns, parse_size_bytes, DurationText, SizeText, GIB, KIB, MIB, NS_PER_MS, NS_PER_S,
};

/// The keys this module owns, in the order the help text lists them.
pub const KNOWN_KEYS: [&str; 18] = [
    "jobs",
    "ramp",
    "runtime",
    "runs",
    "offset",
    "size",
    "devices",
    "seed",
    "preset",
    "progress",
    "sample_interval",
    "output",
    "trace",
    "write",
    "write.verify",
    "check",
    "scan.range",
    "scan.slow",
];

/// Commands kept per run when `trace=DEV` gives no count.
pub const DEFAULT_KEEP: u32 = 65_536;
/// The largest count `trace=DEV:N` accepts (the ring must also fit in the heap: see
/// `crate::trace::TraceRing::allocate`).
pub const MAX_KEEP: u32 = 1 << 22;
/// The most `trace=` settings one command line may carry.
pub const MAX_TRACE_REQUESTS: usize = 8;
/// The accepted forms, for the message about a malformed `trace=`.
pub const EXPECTED_TRACE: &str =
    "DEV or DEV:N, a device name like nvme0 and the commands to keep per run (1 to 4194304, default 65536)";

/// `trace=DEV[:N]`: record up to `keep` commands of each run on `device`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceRequest {
    pub device: String,
    pub keep: u32,
}

impl TraceRequest {
    /// Parses `DEV` or `DEV:N`.
    pub fn parse(value: &str) -> Option<TraceRequest> {
        let (device, keep) = match value.split_once(':') {
            Some((device, count)) => {
                (device, count.parse::<u32>().ok().filter(|n| (1..=MAX_KEEP).contains(n))?)
            }
            None => (value, DEFAULT_KEEP),
        };
        let valid_name =
            !device.is_empty() && device.len() <= 16 && device.bytes().all(|b| b.is_ascii_alphanumeric());
        valid_name.then(|| TraceRequest { device: String::from(device), keep })
    }
}

/// The smallest block size a job may ask for (one 512-byte sector).
pub const MIN_BLOCK_BYTES: u64 = 512;
/// The deepest queue a job may ask for; devices clamp further to what they allow.
pub const MAX_QUEUE_DEPTH: u32 = 1024;
/// Most jobs one command line may list (keeps the results table and memory bounded).
pub const MAX_JOBS: usize = 64;
/// Most repetitions of each job.
pub const MAX_RUNS: u32 = 100;
/// Longest ramp or measured window (one day), so that tick arithmetic cannot overflow.
pub const MAX_DURATION_NS: u64 = 86_400 * NS_PER_S;
/// The default seed of the offset generator: fixed, so that runs repeat exactly (as fio's
/// `randrepeat=1` default does); printed at the start and settable with `seed=`.
pub const DEFAULT_SEED: u64 = 0x6261_7265_6265_6e63; // "barebenc" in ASCII
/// fio's default `bwavgtime`/`iopsavgtime`: IOPS and bandwidth are sampled every 500 ms of the
/// measured window (docs/fio-json.md §3).
pub const DEFAULT_SAMPLE_INTERVAL_NS: u64 = 500 * NS_PER_MS;

/// The JSON flavour: fio's `--output-format=json`, or `json+` with every latency histogram bin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    Json,
    /// Adds `bins` (fio's 1856-bucket histogram, non-zero buckets) to `clat_ns` and `lat_ns`.
    JsonPlus,
}

impl OutputFormat {
    pub fn name(self) -> &'static str {
        match self {
            OutputFormat::Json => "json",
            OutputFormat::JsonPlus => "json+",
        }
    }
}

/// How often reads are checked against the test pattern (`check=`, crate::pattern_check).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckSetting {
    /// Every [`DEFAULT_CHECK_EVERY`]-th read on a device whose region lies in a pattern region,
    /// except under `preset=reference`; no check elsewhere.
    Auto,
    Off,
    /// Every N-th successful read, on every device.
    Every(u32),
}

/// `check=auto` checks every 64th read: a DMA window, cache or data-path mistake on a board
/// corrupts most reads, so one in 64 finds it in the first run's first second (thousands of
/// reads per run even on an SD card), while the checking CPU time stays a few per cent of the
/// run even for 1 MiB reads (docs/checks.md §3 has the measured cost).
pub const DEFAULT_CHECK_EVERY: u32 = 64;
/// The largest N of `check=N`.
pub const MAX_CHECK_EVERY: u32 = 1_000_000;

impl fmt::Display for CheckSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CheckSetting::Auto => f.write_str("auto"),
            CheckSetting::Off => f.write_str("off"),
            CheckSetting::Every(every) => write!(f, "{every}"),
        }
    }
}

/// One word of the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Setting<'a> {
    /// `key=value` (the value may be empty).
    Pair { key: &'a str, value: &'a str },
    /// A word without `=`.
    Malformed { token: &'a str },
}

/// The words of a command line, split at whitespace and at the first `=` of each word.
pub fn settings(line: &str) -> impl Iterator<Item = Setting<'_>> {
    line.split_ascii_whitespace().map(|token| match token.split_once('=') {
        Some((key, value)) => Setting::Pair { key, value },
        None => Setting::Malformed { token },
    })
}

/// What a job's requests do. Writes and mixed jobs run only inside a device's marked scratch
/// region and only on devices named by `write=` (docs/writes.md §1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobOperation {
    Read,
    RandRead,
    Write,
    RandWrite,
    /// Sequential, reads and writes mixed (fio `rw`).
    ReadWrite,
    /// Random, reads and writes mixed (fio `randrw`).
    RandReadWrite,
    /// The whole surface read once from first to last LBA in steps of `block_bytes`, each
    /// step's MiB/s kept with its offset (`jobs=scan[:STEP[:QD]]`, crate::scan).
    Scan,
    /// The scratch region written end to end, again and again, for `runtime=`: MiB/s per
    /// second and the cache cliff (`jobs=sustained:BS[:QD]`, crate::sustained).
    Sustained,
    /// hdparm's `-T` and `-t` figures (`preset=hdparm`, crate::hdparm).
    Hdparm,
}

impl JobOperation {
    /// fio's `rw=` name.
    pub fn fio_name(self) -> &'static str {
        match self {
            JobOperation::Read => "read",
            JobOperation::RandRead => "randread",
            JobOperation::Write => "write",
            JobOperation::RandWrite => "randwrite",
            JobOperation::ReadWrite => "rw",
            JobOperation::RandReadWrite => "randrw",
            JobOperation::Scan => "scan",
            JobOperation::Sustained => "sustained",
            JobOperation::Hdparm => "hdparm",
        }
    }

    /// Whether the job streams through the device once or for a time and keeps a series
    /// (scan, sustained, hdparm) instead of fio's figures over a window (crate::stream_jobs).
    pub fn is_stream(self) -> bool {
        matches!(self, JobOperation::Scan | JobOperation::Sustained | JobOperation::Hdparm)
    }

    pub fn is_random(self) -> bool {
        matches!(self, JobOperation::RandRead | JobOperation::RandWrite | JobOperation::RandReadWrite)
    }

    /// Whether the job writes at all (write, randwrite, rw, randrw, sustained).
    pub fn is_write(self) -> bool {
        !matches!(
            self,
            JobOperation::Read | JobOperation::RandRead | JobOperation::Scan | JobOperation::Hdparm
        )
    }

    /// Whether the job mixes reads and writes (`mix=` applies).
    pub fn is_mixed(self) -> bool {
        matches!(self, JobOperation::ReadWrite | JobOperation::RandReadWrite)
    }

    fn from_name(name: &str) -> Option<JobOperation> {
        match name {
            "read" => Some(JobOperation::Read),
            "randread" => Some(JobOperation::RandRead),
            "write" => Some(JobOperation::Write),
            "randwrite" => Some(JobOperation::RandWrite),
            "rw" | "readwrite" => Some(JobOperation::ReadWrite),
            "randrw" => Some(JobOperation::RandReadWrite),
            _ => None,
        }
    }
}

/// The default share of reads in a mixed job, as fio's `rwmixread`.
pub const DEFAULT_READ_PERCENT: u8 = 50;

/// One workload as the command line asks for it (`op:bs:qd[:mix=N][:flush=N]`); devices may
/// round the block size and clamp the queue depth.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobSpec {
    pub operation: JobOperation,
    pub block_bytes: u64,
    pub queue_depth: u32,
    /// Percentage of reads: 100 for read jobs, 0 for write jobs, `mix=` (default 50) for mixed.
    pub read_percent: u8,
    /// A flush after every this many writes (sysbench's `--file-fsync-freq`); 0 = none.
    pub flush_every_writes: u32,
}

impl JobSpec {
    pub const fn new(operation: JobOperation, block_bytes: u64, queue_depth: u32) -> JobSpec {
        let read_percent = match operation {
            JobOperation::Read | JobOperation::RandRead | JobOperation::Scan | JobOperation::Hdparm => 100,
            JobOperation::Write | JobOperation::RandWrite | JobOperation::Sustained => 0,
            JobOperation::ReadWrite | JobOperation::RandReadWrite => DEFAULT_READ_PERCENT,
        };
        JobSpec { operation, block_bytes, queue_depth, read_percent, flush_every_writes: 0 }
    }

    /// The same job with `mix=` (mixed jobs only) and `flush=`.
    pub const fn with_mix(mut self, read_percent: u8, flush_every_writes: u32) -> JobSpec {
        self.read_percent = read_percent;
        self.flush_every_writes = flush_every_writes;
        self
    }
}

impl fmt::Display for JobSpec {
    /// `op:bs:qd[:mix=N][:flush=N]`, as the command line writes it (`hdparm` alone).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operation == JobOperation::Hdparm {
            return f.write_str("hdparm");
        }
        write!(f, "{}:{}:{}", self.operation.fio_name(), SizeText(self.block_bytes), self.queue_depth)?;
        if self.operation.is_mixed() && self.read_percent != DEFAULT_READ_PERCENT {
            write!(f, ":mix={}", self.read_percent)?;
        }
        if self.flush_every_writes > 0 {
            write!(f, ":flush={}", self.flush_every_writes)?;
        }
        Ok(())
    }
}

/// Which devices run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceSelection {
    /// Every device the kernel passes, in its order.
    All,
    /// These names, in this order (the first is "device A" of the alternation).
    Named(Vec<String>),
}

/// A named set of defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Preset {
    /// The published reference workload (docs/architecture.md): the defaults.
    Reference,
    /// The reference jobs, shortened for emulators (about a minute on QEMU with two devices).
    Quick,
    /// 4k, 64k and 1m × read and randread at QD 64 (other published Pi storage tests).
    BlockSizes,
    /// 4k, 64k and 1m × read, write, randread, randwrite at QD 64 (the same microSD in every
    /// Pi model with fio); write jobs run only where `write=` allows.
    Matrix,
    /// randrw 4k QD64, 75 % reads, over 500 MiB (a Pi 4 SD card against a USB SSD with fio).
    RandRw,
    /// randrw 16k QD1, 60 % reads, a flush every 100 writes, over 250 MiB (sysbench `fileio
    /// rndrw` on a Pi 400: `--file-rw-ratio=1.5 --file-fsync-freq=100`).
    FileIo,
    /// hdparm's two figures, `-T` and `-t`, once per device (crate::hdparm).
    Hdparm,
}

impl Preset {
    pub fn name(self) -> &'static str {
        match self {
            Preset::Reference => "reference",
            Preset::Quick => "quick",
            Preset::BlockSizes => "blocksizes",
            Preset::Matrix => "matrix",
            Preset::RandRw => "randrw",
            Preset::FileIo => "fileio",
            Preset::Hdparm => "hdparm",
        }
    }

    fn from_name(name: &str) -> Option<Preset> {
        match name {
            "reference" => Some(Preset::Reference),
            "quick" => Some(Preset::Quick),
            "blocksizes" => Some(Preset::BlockSizes),
            "matrix" => Some(Preset::Matrix),
            "randrw" => Some(Preset::RandRw),
            "fileio" => Some(Preset::FileIo),
            "hdparm" => Some(Preset::Hdparm),
            _ => None,
        }
    }
}

/// The reference jobs: sequential 1 MiB QD16, 4 KiB random QD1 and QD32 (docs/architecture.md).
pub const REFERENCE_JOBS: [JobSpec; 3] = [
    JobSpec::new(JobOperation::Read, MIB, 16),
    JobSpec::new(JobOperation::RandRead, 4 * KIB, 1),
    JobSpec::new(JobOperation::RandRead, 4 * KIB, 32),
];

/// The `blocksizes` preset's queue depth (the published iodepth=64 tests).
const BLOCK_SIZES_QUEUE_DEPTH: u32 = 64;
/// The `blocksizes` preset's jobs.
pub const BLOCK_SIZE_JOBS: [JobSpec; 6] = [
    JobSpec::new(JobOperation::Read, 4 * KIB, BLOCK_SIZES_QUEUE_DEPTH),
    JobSpec::new(JobOperation::Read, 64 * KIB, BLOCK_SIZES_QUEUE_DEPTH),
    JobSpec::new(JobOperation::Read, MIB, BLOCK_SIZES_QUEUE_DEPTH),
    JobSpec::new(JobOperation::RandRead, 4 * KIB, BLOCK_SIZES_QUEUE_DEPTH),
    JobSpec::new(JobOperation::RandRead, 64 * KIB, BLOCK_SIZES_QUEUE_DEPTH),
    JobSpec::new(JobOperation::RandRead, MIB, BLOCK_SIZES_QUEUE_DEPTH),
];

/// The `matrix` preset's jobs: each block size × read, write, randread, randwrite at QD 64.
pub const MATRIX_JOBS: [JobSpec; 12] = [
    JobSpec::new(JobOperation::Read, 4 * KIB, BLOCK_SIZES_QUEUE_DEPTH),
    JobSpec::new(JobOperation::Write, 4 * KIB, BLOCK_SIZES_QUEUE_DEPTH),
    JobSpec::new(JobOperation::RandRead, 4 * KIB, BLOCK_SIZES_QUEUE_DEPTH),
    JobSpec::new(JobOperation::RandWrite, 4 * KIB, BLOCK_SIZES_QUEUE_DEPTH),
    JobSpec::new(JobOperation::Read, 64 * KIB, BLOCK_SIZES_QUEUE_DEPTH),
    JobSpec::new(JobOperation::Write, 64 * KIB, BLOCK_SIZES_QUEUE_DEPTH),
    JobSpec::new(JobOperation::RandRead, 64 * KIB, BLOCK_SIZES_QUEUE_DEPTH),
    JobSpec::new(JobOperation::RandWrite, 64 * KIB, BLOCK_SIZES_QUEUE_DEPTH),
    JobSpec::new(JobOperation::Read, MIB, BLOCK_SIZES_QUEUE_DEPTH),
    JobSpec::new(JobOperation::Write, MIB, BLOCK_SIZES_QUEUE_DEPTH),
    JobSpec::new(JobOperation::RandRead, MIB, BLOCK_SIZES_QUEUE_DEPTH),
    JobSpec::new(JobOperation::RandWrite, MIB, BLOCK_SIZES_QUEUE_DEPTH),
];
/// The `hdparm` preset's job: 2 MiB reads and copies, hdparm's `TIMING_BUF_BYTES`.
pub const HDPARM_JOB: JobSpec = JobSpec::new(JobOperation::Hdparm, 2 * MIB, 1);
/// The step of `jobs=scan` when none is given: 4 MiB (about 250 000 steps on a 1 TB drive).
pub const DEFAULT_SCAN_STEP_BYTES: u64 = 4 * MIB;
/// The queue depth of `scan` and `sustained` when none is given: the reference sequential
/// read's.
pub const DEFAULT_STREAM_QUEUE_DEPTH: u32 = 16;

/// `scan.range=START:END`: the bytes a scan reads, from `start_bytes` to `end_bytes` (exclusive;
/// `None`, written `end`, is the device's end).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScanRange {
    pub start_bytes: u64,
    pub end_bytes: Option<u64>,
}

impl ScanRange {
    pub const WHOLE_DEVICE: ScanRange = ScanRange { start_bytes: 0, end_bytes: None };

    fn parse(value: &str) -> Option<ScanRange> {
        let (start, end) = value.split_once(':')?;
        let start_bytes = parse_size_bytes(start)?;
        let end_bytes = match end {
            "end" => None,
            _ => Some(parse_size_bytes(end).filter(|&end| end > start_bytes)?),
        };
        Some(ScanRange { start_bytes, end_bytes })
    }
}

impl fmt::Display for ScanRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", SizeText(self.start_bytes))?;
        match self.end_bytes {
            Some(end) => write!(f, "{}", SizeText(end)),
            None => f.write_str("end"),
        }
    }
}

/// `scan.slow=`: what makes a scan step part of a slow zone (crate::scan).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlowThreshold {
    /// Slower than this percentage of the mean of the steps read before it (`50%`).
    PercentOfMean(u32),
    /// Slower than this many MiB/s (`20`).
    MibPerSecond(u32),
}

impl SlowThreshold {
    pub const DEFAULT: SlowThreshold = SlowThreshold::PercentOfMean(50);

    fn parse(value: &str) -> Option<SlowThreshold> {
        match value.strip_suffix('%') {
            Some(percent) => parse_plain_number(percent)
                .filter(|percent| (1..=100).contains(percent))
                .map(|percent| SlowThreshold::PercentOfMean(percent as u32)),
            None => parse_plain_number(value)
                .and_then(|mib| u32::try_from(mib).ok())
                .filter(|&mib| mib > 0)
                .map(SlowThreshold::MibPerSecond),
        }
    }
}

impl fmt::Display for SlowThreshold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SlowThreshold::PercentOfMean(percent) => write!(f, "{percent}%"),
            SlowThreshold::MibPerSecond(mib) => write!(f, "{mib}"),
        }
    }
}

/// The `randrw` preset's job.
pub const RANDRW_JOB: JobSpec = JobSpec::new(JobOperation::RandReadWrite, 4 * KIB, 64).with_mix(75, 0);
/// The `fileio` preset's job.
pub const FILEIO_JOB: JobSpec = JobSpec::new(JobOperation::RandReadWrite, 16 * KIB, 1).with_mix(60, 100);

/// Everything the benchmark runs with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub jobs: Vec<JobSpec>,
    pub ramp_ns: u64,
    pub runtime_ns: u64,
    pub runs: u32,
    pub offset_bytes: u64,
    pub size_bytes: u64,
    pub devices: DeviceSelection,
    pub seed: u64,
    pub preset: Preset,
    /// Whether the in-place progress line is printed during runs (barebench's own key).
    pub progress: bool,
    /// `write=`: the devices on which write and mixed jobs may run (each also needs a marked
    /// scratch region). Empty: nothing is ever written.
    pub write_devices: Vec<String>,
    /// `write.verify=`: read back and check every block a write or mixed run wrote.
    pub write_verify: bool,
    /// `trace=DEV[:N]` (repeatable): devices whose commands are recorded (crate::trace).
    pub traces: Vec<TraceRequest>,
    /// Length of the intervals IOPS and bandwidth are sampled over (fio's `bwavgtime`).
    pub sample_interval_ns: u64,
    pub output: OutputFormat,
    /// `check=`: which completed reads are compared with the test pattern.
    pub check: CheckSetting,
    /// Devices whose pattern region the kernel found (`blockdev::pattern_region`), as the
    /// readable (offset, length) in bytes: their region is placed inside it.
    pub pattern_regions: Vec<(String, crate::region::Region)>,
    /// `scan.range=`: what `jobs=scan` reads.
    pub scan_range: ScanRange,
    /// `scan.slow=`: which scan steps count as a slow zone.
    pub scan_slow: SlowThreshold,
}

impl Default for Config {
    fn default() -> Self {
        Config::for_preset(Preset::Reference)
    }
}

/// The outcome of [`Config::apply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The key is the benchmark's and its value was taken.
    Set,
    /// The key is not the benchmark's: the kernel decides whether it knows it.
    NotMine,
}

/// A setting that could not be used; its `Display` is the message for the console.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    pub key: String,
    pub value: String,
    pub problem: ConfigProblem,
}

/// What is wrong with a setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ConfigProblem {
    /// A known key with a value it does not accept; `kept` is the value used instead.
    Malformed { expected: &'static str, kept: String },
    /// A key neither the benchmark nor the kernel knows.
    UnknownKey,
    /// A word without `=` that the kernel does not know (`key` holds the word).
    NotKeyValue,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.problem {
            ConfigProblem::Malformed { expected, kept } => write!(
                f,
                "bad setting {}={}: expected {expected}; using the default {kept}",
                self.key, self.value
            ),
            ConfigProblem::UnknownKey => {
                write!(f, "{}", unknown_setting_message(&self.key, &self.value))
            }
            ConfigProblem::NotKeyValue => {
                write!(f, "bad setting {}: expected key=value (keys: {}); ignored", self.key, KeyList)
            }
        }
    }
}

/// The message for a key nobody knows: `unknown setting foo=bar; accepted keys: jobs, ramp, ...`.
pub fn unknown_setting_message<'a>(key: &'a str, value: &'a str) -> impl fmt::Display + 'a {
    UnknownSetting { key, value }
}

struct UnknownSetting<'a> {
    key: &'a str,
    value: &'a str,
}

impl fmt::Display for UnknownSetting<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown setting {}={}; accepted keys: {}", self.key, self.value, KeyList)
    }
}

struct KeyList;

impl fmt::Display for KeyList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, key) in KNOWN_KEYS.iter().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            f.write_str(key)?;
        }
        Ok(())
    }
}

const EXPECTED_JOBS: &str = "a comma-separated list of op:bs:qd[:mix=N][:flush=N] with op read, \
     randread, write, randwrite, rw or randrw, bs a size of at least 512 like 4k or 1m, qd 1 to \
     1024, mix the percentage of reads of rw/randrw (0 to 100, default 50), flush a flush after \
     every N writes (e.g. jobs=read:1m:16,randrw:16k:1:mix=60:flush=100), scan[:STEP[:QD]], \
     sustained:BS[:QD] or hdparm, at most 64 jobs, or none";
const EXPECTED_DURATION: &str = "a duration like 10s or 500ms (0 allowed), at most 86400s";
const EXPECTED_RUNTIME: &str = "a duration like 10s or 500ms, at least 1ms, at most 86400s";
const EXPECTED_RUNS: &str = "a whole number of runs from 1 to 100";
const EXPECTED_OFFSET: &str = "a size in bytes or with k, m, g or t (binary) like 1g";
const EXPECTED_SIZE: &str = "a non-zero size in bytes or with k, m, g or t (binary) like 2g";
const EXPECTED_DEVICES: &str =
    "all, or a comma-separated list of device names like sd0,nvme0 (letters, digits, '.', '_', '-')";
const EXPECTED_SEED: &str = "a number, decimal or 0x-prefixed hexadecimal, like 42 or 0x2a";
const EXPECTED_SAMPLE_INTERVAL: &str = "a duration from 1ms to 1 day, like 500ms or 1s";
const EXPECTED_OUTPUT: &str = "json or json+";
const EXPECTED_CHECK: &str = "off, auto, or N from 1 to 1000000 (check every N-th read)";
const EXPECTED_PRESET: &str = "reference, quick, blocksizes, matrix, randrw, fileio or hdparm";
const EXPECTED_SCAN_RANGE: &str =
    "START:END, two sizes like 0:64g (END after START), or START:end for the rest of the device";
const EXPECTED_SCAN_SLOW: &str =
    "N% (1 to 100, of the mean of the steps before) or N (MiB/s, at least 1), like 50% or 20";
const EXPECTED_ON_OFF: &str = "on or off";
const EXPECTED_WRITE: &str = "a comma-separated list of device names like nvme0,sd0 on which write \
     and mixed jobs may run (each needs a marked scratch region), or none";

impl Config {
    /// The defaults of a preset (devices all, default seed, progress on).
    pub fn for_preset(preset: Preset) -> Config {
        let mut config = Config {
            jobs: Vec::new(),
            ramp_ns: 0,
            runtime_ns: 0,
            runs: 0,
            offset_bytes: 0,
            size_bytes: 0,
            devices: DeviceSelection::All,
            seed: DEFAULT_SEED,
            preset,
            progress: true,
            write_devices: Vec::new(),
            write_verify: true,
            traces: Vec::new(),
            sample_interval_ns: DEFAULT_SAMPLE_INTERVAL_NS,
            output: OutputFormat::Json,
            check: CheckSetting::Auto,
            pattern_regions: Vec::new(),
            scan_range: ScanRange::WHOLE_DEVICE,
            scan_slow: SlowThreshold::DEFAULT,
        };
        config.apply_preset(preset);
        config
    }

    /// Sets the fields a preset governs: jobs, ramp, runtime, runs, offset, size.
    fn apply_preset(&mut self, preset: Preset) {
        self.preset = preset;
        match preset {
            Preset::Reference | Preset::BlockSizes | Preset::Matrix => {
                self.ramp_ns = 2 * NS_PER_S;
                self.runtime_ns = 10 * NS_PER_S;
                self.runs = 3;
                self.offset_bytes = GIB;
                self.size_bytes = 2 * GIB;
            }
            Preset::RandRw | Preset::FileIo => {
                self.ramp_ns = 2 * NS_PER_S;
                self.runtime_ns = 10 * NS_PER_S;
                self.runs = 3;
                self.offset_bytes = 0;
                self.size_bytes = if preset == Preset::RandRw { 500 * MIB } else { 250 * MIB };
            }
            Preset::Quick => {
                self.ramp_ns = 500 * NS_PER_MS;
                self.runtime_ns = 2 * NS_PER_S;
                self.runs = 3;
                self.offset_bytes = 0;
                self.size_bytes = 256 * MIB;
            }
            // hdparm times its own reads (≥ 3 s) and copies (≥ 2 s) from the device's start;
            // ramp, runtime, offset and size do not apply.
            Preset::Hdparm => {
                self.ramp_ns = 0;
                self.runtime_ns = 10 * NS_PER_S;
                self.runs = 1;
                self.offset_bytes = 0;
                self.size_bytes = 2 * GIB;
            }
        }
        self.jobs = match preset {
            Preset::Reference | Preset::Quick => REFERENCE_JOBS.to_vec(),
            Preset::BlockSizes => BLOCK_SIZE_JOBS.to_vec(),
            Preset::Matrix => MATRIX_JOBS.to_vec(),
            Preset::RandRw => alloc::vec![RANDRW_JOB],
            Preset::FileIo => alloc::vec![FILEIO_JOB],
            Preset::Hdparm => alloc::vec![HDPARM_JOB],
        };
    }

    /// Applies one `key=value`. On error the configuration is unchanged. `preset=` resets the
    /// fields it governs, so apply it before other keys ([`Config::from_command_line`] does).
    pub fn apply(&mut self, key: &str, value: &str) -> Result<Applied, ConfigError> {
        let malformed = |expected: &'static str, kept: String| ConfigError {
            key: key.to_string(),
            value: value.to_string(),
            problem: ConfigProblem::Malformed { expected, kept },
        };
        match key {
            "jobs" => {
                self.jobs = parse_jobs(value)
                    .ok_or_else(|| malformed(EXPECTED_JOBS, JobListText(&self.jobs).to_string()))?
            }
            "ramp" => {
                self.ramp_ns = parse_duration_ns(value)
                    .filter(|&ns| ns <= MAX_DURATION_NS)
                    .ok_or_else(|| malformed(EXPECTED_DURATION, DurationText(self.ramp_ns).to_string()))?
            }
            "runtime" => {
                self.runtime_ns = parse_duration_ns(value)
                    .filter(|&ns| (NS_PER_MS..=MAX_DURATION_NS).contains(&ns))
                    .ok_or_else(|| malformed(EXPECTED_RUNTIME, DurationText(self.runtime_ns).to_string()))?
            }
            "runs" => {
                self.runs = parse_plain_number(value)
                    .and_then(|runs| u32::try_from(runs).ok())
                    .filter(|runs| (1..=MAX_RUNS).contains(runs))
                    .ok_or_else(|| malformed(EXPECTED_RUNS, self.runs.to_string()))?
            }
            "offset" => {
                self.offset_bytes = parse_size_bytes(value)
                    .ok_or_else(|| malformed(EXPECTED_OFFSET, SizeText(self.offset_bytes).to_string()))?
            }
            "size" => {
                self.size_bytes = parse_size_bytes(value)
                    .filter(|&bytes| bytes > 0)
                    .ok_or_else(|| malformed(EXPECTED_SIZE, SizeText(self.size_bytes).to_string()))?
            }
            "devices" => {
                self.devices = parse_devices(value).ok_or_else(|| {
                    malformed(EXPECTED_DEVICES, DeviceSelectionText(&self.devices).to_string())
                })?
            }
            "seed" => {
                self.seed =
                    parse_seed(value).ok_or_else(|| malformed(EXPECTED_SEED, self.seed.to_string()))?
            }
            "preset" => {
                let preset = Preset::from_name(value)
                    .ok_or_else(|| malformed(EXPECTED_PRESET, self.preset.name().to_string()))?;
                self.apply_preset(preset);
            }
            "progress" => {
                self.progress = parse_on_off(value)
                    .ok_or_else(|| malformed(EXPECTED_ON_OFF, on_off(self.progress).to_string()))?
            }
            "write" => {
                self.write_devices = parse_write_devices(value).ok_or_else(|| {
                    malformed(EXPECTED_WRITE, WriteDevicesText(&self.write_devices).to_string())
                })?
            }
            "write.verify" => {
                self.write_verify = parse_on_off(value)
                    .ok_or_else(|| malformed(EXPECTED_ON_OFF, on_off(self.write_verify).to_string()))?
            }
            "trace" => {
                let kept = || String::from("no trace of it");
                let request = TraceRequest::parse(value).ok_or_else(|| malformed(EXPECTED_TRACE, kept()))?;
                if self.traces.len() >= MAX_TRACE_REQUESTS {
                    return Err(malformed("at most 8 trace= settings", kept()));
                }
                self.traces.retain(|existing| existing.device != request.device);
                self.traces.push(request);
            }
            "sample_interval" => {
                self.sample_interval_ns = parse_duration_ns(value)
                    .filter(|&ns| (NS_PER_MS..=MAX_DURATION_NS).contains(&ns))
                    .ok_or_else(|| {
                        malformed(EXPECTED_SAMPLE_INTERVAL, DurationText(self.sample_interval_ns).to_string())
                    })?
            }
            "output" => {
                self.output = match value {
                    "json" => OutputFormat::Json,
                    "json+" => OutputFormat::JsonPlus,
                    _ => return Err(malformed(EXPECTED_OUTPUT, self.output.name().to_string())),
                }
            }
            "check" => {
                self.check = match value {
                    "off" => CheckSetting::Off,
                    "auto" => CheckSetting::Auto,
                    _ => parse_plain_number(value)
                        .and_then(|every| u32::try_from(every).ok())
                        .filter(|every| (1..=MAX_CHECK_EVERY).contains(every))
                        .map(CheckSetting::Every)
                        .ok_or_else(|| malformed(EXPECTED_CHECK, self.check.to_string()))?,
                }
            }
            "scan.range" => {
                self.scan_range = ScanRange::parse(value)
                    .ok_or_else(|| malformed(EXPECTED_SCAN_RANGE, self.scan_range.to_string()))?
            }
            "scan.slow" => {
                self.scan_slow = SlowThreshold::parse(value)
                    .ok_or_else(|| malformed(EXPECTED_SCAN_SLOW, self.scan_slow.to_string()))?
            }
            _ => return Ok(Applied::NotMine),
        }
        Ok(Applied::Set)
    }

    /// Reads a whole command line: the last `preset=` first, then every other key in order (the
    /// last of a repeated key wins). Keys that are not the benchmark's and for which
    /// `is_kernel_key` is false are reported as unknown; so are words without `=` that
    /// `is_kernel_key` does not claim. Every problem goes to `diagnostics`; nothing stops.
    pub fn from_command_line(
        line: &str,
        is_kernel_key: impl Fn(&str) -> bool,
        diagnostics: &mut impl FnMut(&ConfigError),
    ) -> Config {
        let mut config = Config::default();
        let last_preset = settings(line).filter_map(|setting| match setting {
            Setting::Pair { key: "preset", value } => Some(value),
            _ => None,
        });
        if let Some(preset) = last_preset.last() {
            if let Err(error) = config.apply("preset", preset) {
                diagnostics(&error);
            }
        }
        for setting in settings(line) {
            match setting {
                Setting::Pair { key: "preset", value: _ } => {}
                Setting::Pair { key, value } => match config.apply(key, value) {
                    Ok(Applied::Set) => {}
                    Ok(Applied::NotMine) if is_kernel_key(key) => {}
                    Ok(Applied::NotMine) => diagnostics(&ConfigError {
                        key: key.to_string(),
                        value: value.to_string(),
                        problem: ConfigProblem::UnknownKey,
                    }),
                    Err(error) => diagnostics(&error),
                },
                Setting::Malformed { token } => {
                    if !is_kernel_key(token) {
                        diagnostics(&ConfigError {
                            key: token.to_string(),
                            value: String::new(),
                            problem: ConfigProblem::NotKeyValue,
                        });
                    }
                }
            }
        }
        config
    }

    /// The pattern region the kernel found on `name`, as its readable bytes.
    pub fn pattern_region(&self, name: &str) -> Option<crate::region::Region> {
        self.pattern_regions.iter().find(|(device, _)| device == name).map(|&(_, region)| region)
    }

    /// Every how many successful reads `name` has one checked, or `None` for no check.
    pub fn check_every(&self, name: &str) -> Option<u32> {
        match self.check {
            CheckSetting::Off => None,
            CheckSetting::Every(every) => Some(every),
            CheckSetting::Auto if self.preset == Preset::Reference => None,
            CheckSetting::Auto => self.pattern_region(name).map(|_| DEFAULT_CHECK_EVERY),
        }
    }

    /// True when `name` is one of the devices to run.
    pub fn selects_device(&self, name: &str) -> bool {
        match &self.devices {
            DeviceSelection::All => true,
            DeviceSelection::Named(names) => names.iter().any(|n| n == name),
        }
    }
}

impl fmt::Display for Config {
    /// The settings as a command line that reproduces them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "preset={} jobs={} ramp={} runtime={} runs={} offset={} size={} devices={} seed={} \
             progress={} sample_interval={} output={} write={} write.verify={} check={} scan.range={} \
             scan.slow={}",
            self.preset.name(),
            JobListText(&self.jobs),
            DurationText(self.ramp_ns),
            DurationText(self.runtime_ns),
            self.runs,
            SizeText(self.offset_bytes),
            SizeText(self.size_bytes),
            DeviceSelectionText(&self.devices),
            self.seed,
            on_off(self.progress),
            DurationText(self.sample_interval_ns),
            self.output.name(),
            WriteDevicesText(&self.write_devices),
            on_off(self.write_verify),
            self.check,
            self.scan_range,
            self.scan_slow,
        )
    }
}

fn on_off(value: bool) -> &'static str {
    if value {
        "on"
    } else {
        "off"
    }
}

fn parse_on_off(value: &str) -> Option<bool> {
    match value {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    }
}

/// `write=` as the command line writes it (`none` for no device).
pub struct WriteDevicesText<'a>(pub &'a [String]);

impl fmt::Display for WriteDevicesText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("none");
        }
        f.write_str(&self.0.join(","))
    }
}

fn parse_write_devices(value: &str) -> Option<Vec<String>> {
    if value == "none" {
        return Some(Vec::new());
    }
    match parse_devices(value)? {
        DeviceSelection::Named(names) => Some(names),
        DeviceSelection::All => None,
    }
}

/// A job list as the command line writes it.
pub struct JobListText<'a>(pub &'a [JobSpec]);

impl fmt::Display for JobListText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, job) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{job}")?;
        }
        Ok(())
    }
}

/// A device selection as the command line writes it.
pub struct DeviceSelectionText<'a>(pub &'a DeviceSelection);

impl fmt::Display for DeviceSelectionText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            DeviceSelection::All => f.write_str("all"),
            DeviceSelection::Named(names) => {
                for (index, name) in names.iter().enumerate() {
                    if index > 0 {
                        f.write_str(",")?;
                    }
                    f.write_str(name)?;
                }
                Ok(())
            }
        }
    }
}

fn parse_jobs(value: &str) -> Option<Vec<JobSpec>> {
    let mut jobs = Vec::new();
    // `jobs=none`: no benchmark, only the device report and the checks (crc=, verify=).
    if value == "none" {
        return Some(jobs);
    }
    for item in value.split(',') {
        if jobs.len() == MAX_JOBS {
            return None;
        }
        if let Some(job) = parse_stream_job(item) {
            jobs.push(job?);
            continue;
        }
        let mut fields = item.split(':');
        let operation = JobOperation::from_name(fields.next()?)?;
        let block_bytes = parse_size_bytes(fields.next()?).filter(|&b| b >= MIN_BLOCK_BYTES)?;
        let queue_depth = parse_plain_number(fields.next()?)
            .and_then(|qd| u32::try_from(qd).ok())
            .filter(|qd| (1..=MAX_QUEUE_DEPTH).contains(qd))?;
        jobs.push(parse_job_options(JobSpec::new(operation, block_bytes, queue_depth), fields)?);
    }
    Some(jobs)
}

/// `scan[:STEP[:QD]]`, `sustained:BS[:QD]` and `hdparm`: `None` when `item` is none of them,
/// `Some(None)` when it is one, malformed.
fn parse_stream_job(item: &str) -> Option<Option<JobSpec>> {
    let mut fields = item.split(':');
    let (operation, default_bytes) = match fields.next()? {
        "scan" => (JobOperation::Scan, Some(DEFAULT_SCAN_STEP_BYTES)),
        "sustained" => (JobOperation::Sustained, None),
        "hdparm" => return Some(fields.next().is_none().then_some(HDPARM_JOB)),
        _ => return None,
    };
    let block_bytes = match fields.next() {
        Some(size) => parse_size_bytes(size).filter(|&bytes| bytes >= MIN_BLOCK_BYTES),
        None => default_bytes,
    };
    let queue_depth = match fields.next() {
        Some(depth) => parse_plain_number(depth)
            .and_then(|qd| u32::try_from(qd).ok())
            .filter(|qd| (1..=MAX_QUEUE_DEPTH).contains(qd)),
        None => Some(DEFAULT_STREAM_QUEUE_DEPTH),
    };
    let job = block_bytes.zip(queue_depth).filter(|_| fields.next().is_none());
    Some(job.map(|(block_bytes, queue_depth)| JobSpec::new(operation, block_bytes, queue_depth)))
}

/// The optional `mix=N` (mixed jobs only, 0-100) and `flush=N` (jobs that write, N ≥ 1) fields.
fn parse_job_options<'a>(mut job: JobSpec, fields: impl Iterator<Item = &'a str>) -> Option<JobSpec> {
    let (mut seen_mix, mut seen_flush) = (false, false);
    for field in fields {
        let (key, value) = field.split_once('=')?;
        let number = parse_plain_number(value)?;
        match key {
            "mix" if job.operation.is_mixed() && !seen_mix && number <= 100 => {
                job.read_percent = number as u8;
                seen_mix = true;
            }
            "flush"
                if job.operation.is_write() && !seen_flush && (1..=u64::from(u32::MAX)).contains(&number) =>
            {
                job.flush_every_writes = number as u32;
                seen_flush = true;
            }
            _ => return None,
        }
    }
    Some(job)
}

fn parse_plain_number(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

fn parse_seed(text: &str) -> Option<u64> {
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) if !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u64::from_str_radix(hex, 16).ok()
        }
        Some(_) => None,
        None => parse_plain_number(text),
    }
}

fn parse_devices(value: &str) -> Option<DeviceSelection> {
    if value == "all" {
        return Some(DeviceSelection::All);
    }
    let mut names: Vec<String> = Vec::new();
    for name in value.split(',') {
        let valid = !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        if !valid {
            return None;
        }
        if !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    Some(DeviceSelection::Named(names))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::format;
    use std::vec;

    fn parse(line: &str) -> (Config, Vec<String>) {
        let mut messages = Vec::new();
        let config = Config::from_command_line(
            line,
            |key| key == "exit" || key.starts_with("nvme.") || key == "quiet",
            &mut |error: &ConfigError| messages.push(error.to_string()),
        );
        (config, messages)
    }

    #[test]
    fn jobs_none_means_no_benchmark() {
        let mut config = Config::default();
        assert_eq!(config.apply("jobs", "none").unwrap(), Applied::Set);
        assert!(config.jobs.is_empty());
        assert!(config.apply("jobs", "none,read:4k:1").is_err());
    }

    #[test]
    fn defaults_are_the_reference_workload() {
        let config = Config::default();
        assert_eq!(config.jobs, REFERENCE_JOBS.to_vec());
        assert_eq!(JobListText(&config.jobs).to_string(), "read:1m:16,randread:4k:1,randread:4k:32");
        assert_eq!(config.ramp_ns, 2 * NS_PER_S);
        assert_eq!(config.runtime_ns, 10 * NS_PER_S);
        assert_eq!(config.runs, 3);
        assert_eq!(config.offset_bytes, GIB);
        assert_eq!(config.size_bytes, 2 * GIB);
        assert_eq!(config.devices, DeviceSelection::All);
        assert_eq!(config.seed, DEFAULT_SEED);
        assert!(config.progress);
        assert_eq!(parse("").0, config);
    }

    #[test]
    fn every_key_takes_its_accepted_forms() {
        let (config, messages) = parse(
            "jobs=randread:512:1024,read:3m:2,write:4k:1,randwrite:1g:8 ramp=500ms runtime=3s \
             runs=5 offset=4096 size=1t devices=sd0,nvme0,sd0 seed=0x2A progress=off",
        );
        assert!(messages.is_empty(), "{messages:?}");
        assert_eq!(
            config.jobs,
            vec![
                JobSpec::new(JobOperation::RandRead, 512, 1024),
                JobSpec::new(JobOperation::Read, 3 * MIB, 2),
                JobSpec::new(JobOperation::Write, 4 * KIB, 1),
                JobSpec::new(JobOperation::RandWrite, GIB, 8),
            ]
        );
        assert_eq!(config.ramp_ns, 500 * NS_PER_MS);
        assert_eq!(config.runtime_ns, 3 * NS_PER_S);
        assert_eq!(config.runs, 5);
        assert_eq!(config.offset_bytes, 4096);
        assert_eq!(config.size_bytes, 1 << 40);
        assert_eq!(config.devices, DeviceSelection::Named(vec!["sd0".into(), "nvme0".into()]));
        assert!(config.selects_device("nvme0") && !config.selects_device("nvme1"));
        assert_eq!(config.seed, 42);
        assert!(!config.progress);
        assert_eq!(parse("seed=12345 ramp=0").0.seed, 12345);
        assert_eq!(parse("ramp=0").0.ramp_ns, 0);
        assert_eq!(parse("devices=all").0.devices, DeviceSelection::All);
        assert!(parse("progress=on").0.progress);
        let (config, messages) = parse("sample_interval=250ms output=json+");
        assert!(messages.is_empty(), "{messages:?}");
        assert_eq!((config.sample_interval_ns, config.output), (250 * NS_PER_MS, OutputFormat::JsonPlus));
        assert_eq!(parse("output=json").0.output, OutputFormat::Json);
        assert_eq!(Config::default().sample_interval_ns, 500 * NS_PER_MS);
        assert_eq!(Config::default().output, OutputFormat::Json);
    }

    #[test]
    fn each_malformed_value_keeps_the_default_and_says_what_is_accepted() {
        let cases: [(&str, &str); 41] = [
            ("jobs=read:4k:1:mix=50", "mix the percentage of reads of rw/randrw"),
            ("jobs=randrw:4k:1:mix=101", "0 to 100"),
            ("jobs=randrw:4k:1:mix=50:mix=60", "op:bs:qd[:mix=N][:flush=N]"),
            ("jobs=randwrite:4k:1:flush=0", "a flush after every N writes"),
            ("jobs=randread:4k:1:flush=10", "a flush after every N writes"),
            ("jobs=randrw:4k:1:speed=3", "op:bs:qd[:mix=N][:flush=N]"),
            ("write=all", "on which write and mixed jobs may run"),
            ("write.verify=yes", "expected on or off; using the default on"),
            ("jobs=read:1m", "using the default read:1m:16,randread:4k:1,randread:4k:32"),
            ("jobs=read:1m:16:4", "expected a comma-separated list of op:bs:qd"),
            ("jobs=copy:4k:1", "op read, randread, write, randwrite, rw or randrw"),
            ("jobs=read:256:1", "bs a size of at least 512"),
            ("jobs=read:4x:1", "like 4k or 1m"),
            ("jobs=read:4k:0", "qd 1 to 1024"),
            ("jobs=read:4k:1025", "qd 1 to 1024"),
            ("jobs=read:4k:1,", "op:bs:qd"),
            ("jobs=", "op:bs:qd"),
            ("ramp=2", "expected a duration like 10s or 500ms (0 allowed)"),
            ("ramp=2m", "using the default 2s"),
            ("ramp=86401s", "at most 86400s"),
            ("runtime=ten", "expected a duration like 10s or 500ms, at least 1ms"),
            ("runtime=0", "using the default 10s"),
            ("runtime=0ms", "at least 1ms"),
            ("runs=0", "expected a whole number of runs from 1 to 100; using the default 3"),
            ("runs=101", "from 1 to 100"),
            ("runs=-1", "from 1 to 100"),
            ("runs=3.5", "from 1 to 100"),
            ("offset=1.5g", "using the default 1g"),
            ("offset=", "like 1g"),
            ("size=0", "a non-zero size"),
            ("size=2gb", "using the default 2g"),
            ("devices=", "using the default all"),
            ("devices=sd0,,nvme0", "comma-separated list of device names"),
            ("devices=sd/0", "like sd0,nvme0"),
            ("seed=", "decimal or 0x-prefixed hexadecimal"),
            ("seed=0xZZ", "using the default 7089073068225949283"),
            ("preset=fast", "expected reference, quick, blocksizes, matrix, randrw, fileio or hdparm; using the default reference"),
            ("progress=yes", "expected on or off; using the default on"),
            ("sample_interval=0", "from 1ms to 1 day, like 500ms or 1s; using the default 500ms"),
            ("sample_interval=fast", "like 500ms"),
            ("output=xml", "expected json or json+; using the default json"),
        ];
        let default = Config::default();
        for (line, expected_text) in cases {
            let (config, messages) = parse(line);
            assert_eq!(config, default, "{line} must leave the defaults");
            assert_eq!(messages.len(), 1, "{line}: {messages:?}");
            let key_value = line;
            assert!(
                messages[0].starts_with(&format!("bad setting {key_value}: expected ")),
                "{line}: {}",
                messages[0]
            );
            assert!(messages[0].contains(expected_text), "{line}: {}", messages[0]);
        }
    }

    #[test]
    fn scan_sustained_and_hdparm_jobs_and_the_scan_keys_parse_and_print_back() {
        let (config, messages) = parse(
            "jobs=scan,scan:8m,scan:1m:4,sustained:1m,sustained:64k:8,hdparm scan.range=1g:end scan.slow=20",
        );
        assert!(messages.is_empty(), "{messages:?}");
        let kinds: Vec<(JobOperation, u64, u32)> =
            config.jobs.iter().map(|job| (job.operation, job.block_bytes, job.queue_depth)).collect();
        assert_eq!(
            kinds,
            vec![
                (JobOperation::Scan, 4 * MIB, DEFAULT_STREAM_QUEUE_DEPTH),
                (JobOperation::Scan, 8 * MIB, 16),
                (JobOperation::Scan, MIB, 4),
                (JobOperation::Sustained, MIB, 16),
                (JobOperation::Sustained, 64 * KIB, 8),
                (JobOperation::Hdparm, 2 * MIB, 1),
            ]
        );
        assert_eq!(
            JobListText(&config.jobs).to_string(),
            "scan:4m:16,scan:8m:16,scan:1m:4,sustained:1m:16,sustained:64k:8,hdparm"
        );
        assert!(
            JobOperation::Sustained.is_write()
                && !JobOperation::Scan.is_write()
                && !JobOperation::Hdparm.is_write()
        );
        assert!(JobOperation::Scan.is_stream() && !JobOperation::Read.is_stream());
        assert_eq!(config.scan_range, ScanRange { start_bytes: GIB, end_bytes: None });
        assert_eq!(config.scan_slow, SlowThreshold::MibPerSecond(20));
        let again = parse(&config.to_string());
        assert!(again.1.is_empty(), "{:?}", again.1);
        assert_eq!(again.0, config);
        assert_eq!(parse("scan.range=0:64g scan.slow=25%").0.to_string().split(" scan.").count(), 3);
        assert_eq!(Config::default().scan_range, ScanRange::WHOLE_DEVICE);
        assert_eq!(Config::default().scan_slow, SlowThreshold::PercentOfMean(50));
        let hdparm = Config::for_preset(Preset::Hdparm);
        assert_eq!((JobListText(&hdparm.jobs).to_string(), hdparm.runs), (String::from("hdparm"), 1));
        for (bad, expected) in [
            ("jobs=sustained", "sustained:BS[:QD]"),
            ("jobs=scan:4m:16:2", "scan[:STEP[:QD]]"),
            ("jobs=hdparm:2m", "or hdparm"),
            ("jobs=scan:100", "bs a size of at least 512"),
            ("jobs=sustained:1m:0", "qd 1 to 1024"),
            ("scan.range=2g:1g", "END after START"),
            ("scan.range=1g", "START:END"),
            ("scan.slow=0", "N (MiB/s, at least 1)"),
            ("scan.slow=101%", "N% (1 to 100"),
        ] {
            let (config, messages) = parse(bad);
            assert_eq!(config, Config::default(), "{bad}");
            assert!(messages.len() == 1 && messages[0].contains(expected), "{bad}: {messages:?}");
        }
    }

    #[test]
    fn mixed_jobs_take_mix_and_flush_and_print_back() {
        let (config, messages) =
            parse("jobs=randrw:4k:64:mix=75,rw:1m:2,randrw:16k:1:mix=60:flush=100,write:64k:8:flush=4");
        assert!(messages.is_empty(), "{messages:?}");
        assert_eq!(config.jobs[0], RANDRW_JOB);
        assert_eq!(config.jobs[1].read_percent, DEFAULT_READ_PERCENT);
        assert_eq!(config.jobs[2], FILEIO_JOB);
        assert_eq!((config.jobs[3].read_percent, config.jobs[3].flush_every_writes), (0, 4));
        assert_eq!(
            JobListText(&config.jobs).to_string(),
            "randrw:4k:64:mix=75,rw:1m:2,randrw:16k:1:mix=60:flush=100,write:64k:8:flush=4"
        );
        assert!(JobOperation::ReadWrite.is_write() && JobOperation::ReadWrite.is_mixed());
        assert!(!JobOperation::RandRead.is_write() && JobOperation::RandReadWrite.is_random());
        assert_eq!(parse("jobs=readwrite:4k:1").0.jobs[0].operation, JobOperation::ReadWrite);
    }

    #[test]
    fn write_names_devices_and_is_empty_by_default() {
        assert!(Config::default().write_devices.is_empty());
        assert!(Config::default().write_verify);
        let (config, messages) = parse("write=nvme0,sd0,nvme0 write.verify=off");
        assert!(messages.is_empty(), "{messages:?}");
        assert_eq!(config.write_devices, vec![String::from("nvme0"), String::from("sd0")]);
        assert!(!config.write_verify);
        assert!(parse("write=nvme0 write=none").0.write_devices.is_empty());
        assert!(config.to_string().contains("write=nvme0,sd0 write.verify=off"));
    }

    #[test]
    fn the_write_presets_follow_the_published_setups() {
        let matrix = Config::for_preset(Preset::Matrix);
        assert_eq!(
            JobListText(&matrix.jobs).to_string(),
            "read:4k:64,write:4k:64,randread:4k:64,randwrite:4k:64,read:64k:64,write:64k:64,\
             randread:64k:64,randwrite:64k:64,read:1m:64,write:1m:64,randread:1m:64,randwrite:1m:64"
        );
        let randrw = Config::for_preset(Preset::RandRw);
        assert_eq!(JobListText(&randrw.jobs).to_string(), "randrw:4k:64:mix=75");
        assert_eq!(randrw.size_bytes, 500 * MIB);
        let fileio = Config::for_preset(Preset::FileIo);
        assert_eq!(JobListText(&fileio.jobs).to_string(), "randrw:16k:1:mix=60:flush=100");
        assert_eq!(fileio.size_bytes, 250 * MIB);
        assert_eq!(parse("preset=fileio").0.preset, Preset::FileIo);
    }

    #[test]
    fn the_runtime_message_reads_as_documented() {
        let (_, messages) = parse("runtime=ten");
        assert_eq!(
            messages,
            vec![String::from(
                "bad setting runtime=ten: expected a duration like 10s or 500ms, at least 1ms, \
                 at most 86400s; using the default 10s"
            )]
        );
    }

    #[test]
    fn too_many_jobs_are_refused() {
        let many = vec!["read:4k:1"; MAX_JOBS + 1].join(",");
        let (config, messages) = parse(&format!("jobs={many}"));
        assert_eq!(config.jobs, REFERENCE_JOBS.to_vec());
        assert_eq!(messages.len(), 1);
        let enough = vec!["read:4k:1"; MAX_JOBS].join(",");
        assert_eq!(parse(&format!("jobs={enough}")).0.jobs.len(), MAX_JOBS);
    }

    #[test]
    fn unknown_keys_and_bare_words_are_reported_unless_the_kernel_claims_them() {
        let (config, messages) = parse("foo=bar exit=poweroff nvme.mdts=8 quiet rootwait runs=2 =x");
        assert_eq!(config.runs, 2);
        assert_eq!(
            messages,
            vec![
                String::from(
                    "unknown setting foo=bar; accepted keys: jobs, ramp, runtime, runs, offset, \
                     size, devices, seed, preset, progress, sample_interval, output, trace, write, write.verify, check, scan.range, scan.slow"
                ),
                String::from(
                    "bad setting rootwait: expected key=value (keys: jobs, ramp, runtime, runs, \
                     offset, size, devices, seed, preset, progress, sample_interval, output, trace, write, write.verify, check, scan.range, scan.slow); ignored"
                ),
                String::from(
                    "unknown setting =x; accepted keys: jobs, ramp, runtime, runs, offset, size, \
                     devices, seed, preset, progress, sample_interval, output, trace, write, write.verify, check, scan.range, scan.slow"
                ),
            ]
        );
        let mut config = Config::default();
        assert_eq!(config.apply("exit", "1"), Ok(Applied::NotMine));
        assert_eq!(config.apply("runs", "7"), Ok(Applied::Set));
        assert_eq!(
            unknown_setting_message("a", "b").to_string(),
            "unknown setting a=b; accepted keys: jobs, ramp, runtime, runs, offset, size, \
             devices, seed, preset, progress, sample_interval, output, trace, write, write.verify, check, scan.range, scan.slow"
        );
    }

    #[test]
    fn check_is_off_auto_or_every_nth_and_auto_follows_preset_and_pattern_region() {
        assert_eq!(parse("check=1").0.check, CheckSetting::Every(1));
        assert_eq!(parse("check=off").0.check, CheckSetting::Off);
        assert_eq!(parse("check=7 check=auto").0.check, CheckSetting::Auto);
        for bad in ["check=0", "check=-1", "check=on", "check=1000001"] {
            let (config, messages) = parse(bad);
            assert_eq!(config.check, CheckSetting::Auto, "{bad}");
            assert!(messages[0].contains("expected off, auto, or N from 1 to 1000000"), "{messages:?}");
            assert!(messages[0].contains("using the default auto"), "{messages:?}");
        }
        let mut quick = parse("preset=quick").0;
        assert_eq!(quick.check_every("sd0"), None, "no pattern region, no check");
        quick.pattern_regions.push((
            String::from("sd0"),
            crate::region::Region { offset_bytes: 1 << 20, size_bytes: 1 << 30 },
        ));
        assert_eq!(quick.check_every("sd0"), Some(DEFAULT_CHECK_EVERY));
        assert_eq!(quick.check_every("nvme0"), None);
        let mut reference = parse("").0;
        reference.pattern_regions = quick.pattern_regions.clone();
        assert_eq!(reference.check_every("sd0"), None, "off for the reference preset");
        assert_eq!(parse("check=3").0.check_every("nvme0"), Some(3), "an explicit N checks every device");
        quick.check = CheckSetting::Off;
        assert_eq!(quick.check_every("sd0"), None);
        assert!(parse("check=5").0.to_string().contains(" check=5 "));
    }

    #[test]
    fn presets_set_defaults_that_explicit_keys_override_in_any_order() {
        let quick = Config::for_preset(Preset::Quick);
        assert_eq!(quick.jobs, REFERENCE_JOBS.to_vec());
        assert_eq!(quick.ramp_ns, 500 * NS_PER_MS);
        assert_eq!(quick.runtime_ns, 2 * NS_PER_S);
        assert_eq!(quick.runs, 3);
        assert_eq!(quick.offset_bytes, 0);
        assert_eq!(quick.size_bytes, 256 * MIB);

        let blocksizes = Config::for_preset(Preset::BlockSizes);
        assert_eq!(
            JobListText(&blocksizes.jobs).to_string(),
            "read:4k:64,read:64k:64,read:1m:64,randread:4k:64,randread:64k:64,randread:1m:64"
        );
        assert_eq!(blocksizes.runtime_ns, 10 * NS_PER_S);

        let before = parse("runtime=1s preset=quick seed=9").0;
        let after = parse("preset=quick runtime=1s seed=9").0;
        assert_eq!(before, after);
        assert_eq!(before.preset, Preset::Quick);
        assert_eq!(before.runtime_ns, NS_PER_S);
        assert_eq!(before.ramp_ns, 500 * NS_PER_MS);
        assert_eq!(before.seed, 9);

        // The last preset wins; a bad preset is reported and the reference stays.
        assert_eq!(parse("preset=quick preset=blocksizes").0.preset, Preset::BlockSizes);
        let (config, messages) = parse("preset=nope runs=4");
        assert_eq!(config.preset, Preset::Reference);
        assert_eq!(config.runs, 4);
        assert_eq!(messages.len(), 1);
        // A preset keeps devices and seed: they are not preset fields.
        let (config, _) = parse("devices=sd0 seed=5 preset=quick");
        assert_eq!(config.devices, DeviceSelection::Named(vec!["sd0".into()]));
        assert_eq!(config.seed, 5);
    }

    #[test]
    fn the_display_form_reads_back_to_the_same_config() {
        let (config, _) =
            parse("preset=quick jobs=read:4k:8,randwrite:64k:2 runs=7 devices=nvme0 seed=77 progress=off");
        let text = config.to_string();
        let (again, messages) = parse(&text);
        assert!(messages.is_empty(), "{messages:?}");
        assert_eq!(again, config);
    }

    #[test]
    fn words_split_at_the_first_equals_sign() {
        let words: Vec<Setting<'_>> = settings("  a=b=c  quiet\tx= ").collect();
        assert_eq!(
            words,
            vec![
                Setting::Pair { key: "a", value: "b=c" },
                Setting::Malformed { token: "quiet" },
                Setting::Pair { key: "x", value: "" },
            ]
        );
    }

    #[test]
    fn requests_name_a_device_and_an_optional_count() {
        assert_eq!(
            TraceRequest::parse("nvme0"),
            Some(TraceRequest { device: "nvme0".to_string(), keep: 65_536 })
        );
        assert_eq!(
            TraceRequest::parse("sd0:100"),
            Some(TraceRequest { device: "sd0".to_string(), keep: 100 })
        );
        assert_eq!(TraceRequest::parse("sd0:4194304").map(|r| r.keep), Some(MAX_KEEP));
        for bad in
            ["", ":5", "sd0:", "sd0:0", "sd0:4194305", "sd0:x", "sd 0", "sd0:1:2", "averyveryverylongname0"]
        {
            assert_eq!(TraceRequest::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn trace_is_repeatable_and_a_device_named_twice_keeps_the_last() {
        let mut problems = Vec::new();
        let config = Config::from_command_line(
            "trace=nvme0 trace=sd0:100 trace=sd0:200 trace=sd0:0 trace=:3",
            |_| false,
            &mut |error| problems.push(error.to_string()),
        );
        assert_eq!(
            config.traces,
            [
                TraceRequest { device: String::from("nvme0"), keep: 65_536 },
                TraceRequest { device: String::from("sd0"), keep: 200 }
            ]
        );
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("bad setting trace=sd0:0: expected DEV or DEV:N"), "{problems:?}");
        assert!(Config::default().traces.is_empty());
        let mut config = Config::default();
        for n in 0..8 {
            config.apply("trace", &alloc::format!("sd{n}")).unwrap();
        }
        let error = config.apply("trace", "nvme9").unwrap_err();
        assert!(error.to_string().contains("at most 8 trace= settings"), "{error}");
    }
}
