//! What the jobs that are not fio's found, as data: the whole-surface scan, the sustained write
//! and hdparm's two timings (docs/surface-and-sustained.md), with the arithmetic of their
//! figures and their lines in the summary. The jobs themselves are crate::scan,
//! crate::sustained and crate::hdparm; the JSON writer crate::stream_json.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use blockdev::IoErrorKind;

use crate::pattern_check::CheckSummary;
use crate::series::{milli_mib_per_s, BoundedSeries};
use crate::settings::SlowThreshold;
use crate::units::{ByteSize, Fixed, MibPerS, Seconds, MIB, NS_PER_S};
use crate::written::VerifyOutcome;

/// One step: where it starts and how fast it was read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct StepRate {
    /// Thousandths of a MiB/s (first, so that steps order by speed).
    pub milli_mib_s: u64,
    pub offset_bytes: u64,
}

/// Consecutive slow steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlowZone {
    pub start_bytes: u64,
    pub end_bytes: u64,
    pub steps: u64,
    pub min_milli_mib_s: u64,
    /// All its bytes over all its time.
    pub bytes: u64,
    pub ns: u64,
}

impl SlowZone {
    pub fn mean_milli_mib_s(&self) -> u64 {
        milli_mib_per_s(self.bytes, self.ns)
    }
}

/// What a scan found on one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanResult {
    pub job_index: usize,
    pub device_index: usize,
    pub device_name: String,
    /// The job as asked (`scan:4m:16`).
    pub job: String,
    pub start_bytes: u64,
    pub end_bytes: u64,
    pub step_bytes: u64,
    pub request_bytes: u64,
    pub queue_depth: u32,
    /// Steps read (the last may be short), their bytes, and the time from the first request
    /// to the last step's end.
    pub steps: u64,
    pub bytes: u64,
    pub elapsed_ns: u64,
    pub min: StepRate,
    pub max: StepRate,
    /// The slowest 1 % of the steps (at least one), slowest first.
    pub slowest: Vec<StepRate>,
    pub slow_threshold: SlowThreshold,
    pub slow_zones: Vec<SlowZone>,
    pub slow_zone_count: u64,
    pub series: BoundedSeries,
    /// Failed reads by kind ([`IoErrorKind::index`]) and the first offsets that failed.
    pub errors: [u64; IoErrorKind::ALL.len()],
    pub error_offsets: Vec<u64>,
    pub check: Option<CheckSummary>,
    /// Why it ended early, if it did (`RunEnd::reason`).
    pub ended_early: Option<&'static str>,
    pub notes: Vec<String>,
}

impl ScanResult {
    /// All the bytes over all the time, thousandths of a MiB/s.
    pub fn mean_milli_mib_s(&self) -> u64 {
        milli_mib_per_s(self.bytes, self.elapsed_ns)
    }

    /// Failed reads and reads that differ from the test pattern.
    pub fn errors_total(&self) -> u64 {
        self.errors.iter().sum::<u64>() + self.check.as_ref().map_or(0, |check| check.mismatches)
    }
}

/// The cache cliff: the first second at half the first seconds' mean or less ([`CLIFF_PERCENT`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cliff {
    /// When that second began, from the first request.
    pub at_ns: u64,
    /// Bytes written before it.
    pub bytes_before: u64,
    /// Its MiB/s, thousandths.
    pub milli_mib_s: u64,
}

/// What a sustained write found on one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SustainedResult {
    pub job_index: usize,
    pub device_index: usize,
    pub device_name: String,
    pub job: String,
    pub start_bytes: u64,
    pub end_bytes: u64,
    pub request_bytes: u64,
    pub queue_depth: u32,
    pub runtime_ns: u64,
    pub elapsed_ns: u64,
    pub bytes: u64,
    /// Whole passes through the region, and where the last one stopped.
    pub passes: u32,
    pub last_pass_end_bytes: u64,
    /// One point per second (merged in pairs beyond [`crate::series::MAX_POINTS`]); positions in
    /// ns from the first request.
    pub series: BoundedSeries,
    /// The first seconds' mean (over at most [`REFERENCE_SAMPLES`] seconds) and the time it
    /// covers.
    pub reference_milli_mib_s: u64,
    pub reference_ns: u64,
    pub cliff: Option<Cliff>,
    /// From the cliff to the end.
    pub steady_milli_mib_s: Option<u64>,
    /// Time spent making the data, before each write went out.
    pub fill_ns: u64,
    pub errors: [u64; IoErrorKind::ALL.len()],
    pub verify: Option<VerifyOutcome>,
    pub scratch_region_id: Option<u64>,
    /// Why it ended early, if it did (`RunEnd::reason`).
    pub ended_early: Option<&'static str>,
    pub notes: Vec<String>,
}

impl SustainedResult {
    pub fn mean_milli_mib_s(&self) -> u64 {
        milli_mib_per_s(self.bytes, self.elapsed_ns)
    }

    pub fn errors_total(&self) -> u64 {
        self.errors.iter().sum()
    }

    /// Whether it wrote without failures and read everything back as written.
    pub fn is_clean(&self) -> bool {
        let verified =
            self.verify.as_ref().is_none_or(|verify| verify.mismatches == 0 && verify.read_errors == 0);
        self.errors_total() == 0 && verified && self.ended_early.is_none()
    }
}

/// hdparm's `TIMING_BUF_MB`: each unit read or copied counts as this many "MB".
pub const TIMING_BUF_MB: u64 = 2;
/// hdparm's `TIMING_BUF_BYTES`: `TIMING_BUF_MB` × 1024 × 1024.
pub const TIMING_BUF_BYTES: u64 = TIMING_BUF_MB * MIB;
/// One of the two timings: units of [`TIMING_BUF_BYTES`] in a time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HdparmTiming {
    pub iterations: u64,
    /// The time hdparm divides by (for `-T`, after `overhead_ns` was taken off).
    pub elapsed_ns: u64,
    /// `-T` only: the same loop without the copies.
    pub overhead_ns: u64,
}

impl HdparmTiming {
    /// hdparm's `total_MB`.
    pub fn total_mb(&self) -> u64 {
        self.iterations * TIMING_BUF_MB
    }

    pub fn bytes(&self) -> u64 {
        self.iterations * TIMING_BUF_BYTES
    }

    /// hdparm's MB/sec (MB = 2^20 bytes), in hundredths, rounded to the nearest as `%6.2f` does.
    pub fn centi_mb_per_s(&self) -> u64 {
        rounded_ratio(u128::from(self.total_mb()) * 100 * u128::from(NS_PER_S), self.elapsed_ns)
    }

    /// The same rate in MB of 10^6 bytes, hundredths.
    pub fn centi_decimal_mb_per_s(&self) -> u64 {
        rounded_ratio(u128::from(self.bytes()) * 100 * u128::from(NS_PER_S), self.elapsed_ns * 1_000_000)
    }

    /// `%3u MB in %5.2f seconds = %6.2f MB/sec`, or `kB/sec` (MB/sec × 1024) when `slow`.
    fn text(&self, slow: bool) -> String {
        let seconds = Fixed::new(u128::from(rounded_ratio(u128::from(self.elapsed_ns), NS_PER_S / 100)), 2);
        let (rate, unit) = match slow {
            false => (self.centi_mb_per_s(), "MB/sec"),
            true => (
                rounded_ratio(u128::from(self.total_mb()) * 102_400 * u128::from(NS_PER_S), self.elapsed_ns),
                "kB/sec",
            ),
        };
        format!(
            "{:>3} MB in {seconds:>5} seconds = {:>6} {unit}",
            self.total_mb(),
            Fixed::new(u128::from(rate), 2)
        )
    }

    /// `-t`'s figures as hdparm prints them (it switches to kB/sec at 1 MB/s or less).
    pub fn buffered_text(&self) -> String {
        self.text(self.total_mb() * NS_PER_S <= self.elapsed_ns)
    }

    /// `-T`'s figures as hdparm prints them (kB/sec when total MB < elapsed seconds).
    pub fn cached_text(&self) -> String {
        self.text(self.total_mb() * NS_PER_S < self.elapsed_ns)
    }
}

/// `numerator / denominator` rounded to the nearest integer (0 for no time).
fn rounded_ratio(numerator: u128, denominator: u64) -> u64 {
    if denominator == 0 {
        return 0;
    }
    let denominator = u128::from(denominator);
    ((numerator + denominator / 2) / denominator) as u64
}

/// One `-T` and `-t` on one device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HdparmResult {
    pub job_index: usize,
    pub device_index: usize,
    pub device_name: String,
    pub run: u32,
    pub cached: HdparmTiming,
    /// `None` when the device holds less than one unit.
    pub buffered: Option<HdparmTiming>,
    pub request_bytes: u64,
    pub queue_depth: u32,
    pub errors: [u64; IoErrorKind::ALL.len()],
    /// Why it ended early, if it did (`RunEnd::reason`).
    pub ended_early: Option<&'static str>,
    pub notes: Vec<String>,
}

impl HdparmResult {
    pub fn errors_total(&self) -> u64 {
        self.errors.iter().sum()
    }
}

impl fmt::Display for HdparmTiming {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.buffered_text())
    }
}

/// One line per scan, sustained write and hdparm timing for the summary; returns how many.
pub fn print_summary(
    console: &mut dyn fmt::Write,
    (scans, sustained_writes, hdparm): (&[ScanResult], &[SustainedResult], &[HdparmResult]),
) -> usize {
    for scan in scans {
        let _ = writeln!(
            console,
            "scan      {:<8} min {} MiB/s at {}, mean {}, max {} at {}; {} slow zones, {} errors",
            scan.device_name,
            MibPerS(scan.min.milli_mib_s),
            ByteSize(scan.min.offset_bytes),
            MibPerS(scan.mean_milli_mib_s()),
            MibPerS(scan.max.milli_mib_s),
            ByteSize(scan.max.offset_bytes),
            scan.slow_zone_count,
            scan.errors_total()
        );
    }
    for sustained in sustained_writes {
        let _ = write!(
            console,
            "sustained {:<8} mean {} MiB/s over {}, ",
            sustained.device_name,
            MibPerS(sustained.mean_milli_mib_s()),
            Seconds(sustained.elapsed_ns)
        );
        let _ = match (sustained.cliff, sustained.steady_milli_mib_s) {
            (Some(cliff), Some(steady)) => writeln!(
                console,
                "cache cliff at {} after {}, steady {} MiB/s",
                Seconds(cliff.at_ns),
                ByteSize(cliff.bytes_before),
                MibPerS(steady)
            ),
            _ => writeln!(console, "no cache cliff"),
        };
    }
    for timing in hdparm {
        let rate = |timing: &HdparmTiming| Fixed::new(u128::from(timing.centi_mb_per_s()), 2);
        let _ = write!(
            console,
            "hdparm    {:<8} run {}: cached {} MB/sec",
            timing.device_name,
            timing.run,
            rate(&timing.cached)
        );
        if let Some(buffered) = &timing.buffered {
            let _ = write!(console, ", buffered disk {} MB/sec", rate(buffered));
        }
        let _ = writeln!(console, " (hdparm's MB, 2^20 bytes)");
    }
    scans.len() + sustained_writes.len() + hdparm.len()
}
