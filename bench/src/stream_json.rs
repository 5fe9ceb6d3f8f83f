//! The JSON of the scans, sustained writes and hdparm timings: three top-level arrays beside
//! fio's `"jobs"` (`"barebench scan"`, `"barebench sustained"`, `"barebench hdparm"`), written
//! only when such jobs ran (docs/surface-and-sustained.md §6). Rates are MiB/s with three
//! decimals (hdparm's in its own MB, 2^20 bytes, with two, and in MB of 10^6 bytes); positions
//! are bytes from the device's start (scan) or ns from the first request (sustained).

use core::fmt;

use crate::json_writer::{write_check, write_errors, write_verify, JsonWriter};
use crate::results::BenchmarkResults;
use crate::series::BoundedSeries;
use crate::stream_results::{HdparmResult, HdparmTiming, ScanResult, StepRate, SustainedResult};
use crate::units::Fixed;

/// Thousandths of a MiB/s as a JSON number.
fn mib_s(milli: u64) -> Fixed {
    Fixed::new(u128::from(milli), 3)
}

/// The arrays of whichever of the three kinds ran.
pub(crate) fn write_stream_results(json: &mut JsonWriter<'_>, results: &BenchmarkResults) -> fmt::Result {
    if !results.scans.is_empty() {
        json.open(Some("barebench scan"), '[')?;
        for scan in &results.scans {
            write_scan(json, scan)?;
        }
        json.close(']')?;
    }
    if !results.sustained.is_empty() {
        json.open(Some("barebench sustained"), '[')?;
        for sustained in &results.sustained {
            write_sustained(json, sustained)?;
        }
        json.close(']')?;
    }
    if !results.hdparm.is_empty() {
        json.open(Some("barebench hdparm"), '[')?;
        for timing in &results.hdparm {
            write_hdparm(json, timing)?;
        }
        json.close(']')?;
    }
    Ok(())
}

fn write_step(json: &mut JsonWriter<'_>, key: Option<&str>, step: &StepRate) -> fmt::Result {
    json.open(key, '{')?;
    json.number_field("offset", step.offset_bytes)?;
    json.fixed_field("mib_s", mib_s(step.milli_mib_s))?;
    json.close('}')
}

/// `"series"`: the points, each with where it starts and ends, its samples, the MiB/s of all of
/// them and the slowest and fastest; with `bytes_before`, the bytes of the points before it.
fn write_series(json: &mut JsonWriter<'_>, series: &BoundedSeries, bytes_before: bool) -> fmt::Result {
    json.open(Some("series"), '{')?;
    json.number_field("samples_per_point", series.samples_per_point())?;
    json.open(Some("points"), '[')?;
    let mut before = 0u64;
    for point in series.points() {
        json.open(None, '{')?;
        json.number_field("start", point.start)?;
        json.number_field("end", point.end)?;
        json.number_field("samples", point.samples)?;
        json.number_field("bytes", point.bytes)?;
        if bytes_before {
            json.number_field("bytes_before", before)?;
        }
        json.fixed_field("mib_s", mib_s(point.mean_milli_mib_s()))?;
        json.fixed_field("min_mib_s", mib_s(point.min_milli_mib_s))?;
        json.fixed_field("max_mib_s", mib_s(point.max_milli_mib_s))?;
        json.close('}')?;
        before += point.bytes;
    }
    json.close(']')?;
    json.close('}')
}

fn write_ending(
    json: &mut JsonWriter<'_>,
    ended_early: Option<&'static str>,
    notes: &[alloc::string::String],
) -> fmt::Result {
    match ended_early {
        Some(reason) => json.string_field("ended_early", format_args!("{reason}"))?,
        None => json.null_field("ended_early")?,
    }
    json.open(Some("notes"), '[')?;
    for note in notes {
        json.string_element(format_args!("{note}"))?;
    }
    json.close(']')
}

/// Opens a device's object: its name, the job as asked, the byte range, the request size and
/// the queue depth (`bs_key` names the request size).
fn open_device_object(
    json: &mut JsonWriter<'_>,
    (device, job): (&str, &str),
    (start, end): (u64, u64),
    (bs_key, bs, iodepth): (&str, u64, u32),
) -> fmt::Result {
    json.open(None, '{')?;
    json.string_field("device", format_args!("{device}"))?;
    json.string_field("job", format_args!("{job}"))?;
    json.number_field("start", start)?;
    json.number_field("end", end)?;
    json.number_field(bs_key, bs)?;
    json.number_field("iodepth", iodepth)
}

fn write_scan(json: &mut JsonWriter<'_>, scan: &ScanResult) -> fmt::Result {
    let range = (scan.start_bytes, scan.end_bytes);
    open_device_object(
        json,
        (&scan.device_name, &scan.job),
        range,
        ("request_bytes", scan.request_bytes, scan.queue_depth),
    )?;
    json.number_field("step_bytes", scan.step_bytes)?;
    json.number_field("steps", scan.steps)?;
    json.number_field("bytes", scan.bytes)?;
    json.number_field("elapsed_ns", scan.elapsed_ns)?;
    write_step(json, Some("min"), &scan.min)?;
    json.fixed_field("mean_mib_s", mib_s(scan.mean_milli_mib_s()))?;
    write_step(json, Some("max"), &scan.max)?;
    json.open(Some("slowest"), '[')?;
    for step in &scan.slowest {
        write_step(json, None, step)?;
    }
    json.close(']')?;
    json.string_field("slow_threshold", format_args!("{}", scan.slow_threshold))?;
    json.number_field("slow_zone_count", scan.slow_zone_count)?;
    json.open(Some("slow_zones"), '[')?;
    for zone in &scan.slow_zones {
        json.open(None, '{')?;
        json.number_field("start", zone.start_bytes)?;
        json.number_field("end", zone.end_bytes)?;
        json.number_field("steps", zone.steps)?;
        json.fixed_field("min_mib_s", mib_s(zone.min_milli_mib_s))?;
        json.fixed_field("mean_mib_s", mib_s(zone.mean_milli_mib_s()))?;
        json.close('}')?;
    }
    json.close(']')?;
    write_errors(json, &scan.errors, scan.errors_total())?;
    json.open(Some("error_offsets"), '[')?;
    for offset in &scan.error_offsets {
        json.string_element(format_args!("{offset}"))?;
    }
    json.close(']')?;
    if let Some(check) = &scan.check {
        write_check(json, check)?;
    }
    write_series(json, &scan.series, false)?;
    write_ending(json, scan.ended_early, &scan.notes)?;
    json.close('}')
}

fn write_sustained(json: &mut JsonWriter<'_>, sustained: &SustainedResult) -> fmt::Result {
    let range = (sustained.start_bytes, sustained.end_bytes);
    let (names, bs) = ((sustained.device_name.as_str(), sustained.job.as_str()), sustained.request_bytes);
    open_device_object(json, names, range, ("bs", bs, sustained.queue_depth))?;
    json.number_field("runtime_ns", sustained.runtime_ns)?;
    json.number_field("elapsed_ns", sustained.elapsed_ns)?;
    json.number_field("bytes", sustained.bytes)?;
    json.number_field("passes", sustained.passes)?;
    json.fixed_field("mean_mib_s", mib_s(sustained.mean_milli_mib_s()))?;
    json.fixed_field("first_seconds_mib_s", mib_s(sustained.reference_milli_mib_s))?;
    json.number_field("first_seconds_ns", sustained.reference_ns)?;
    match sustained.cliff {
        Some(cliff) => {
            json.open(Some("cliff"), '{')?;
            json.number_field("at_ns", cliff.at_ns)?;
            json.number_field("bytes_before", cliff.bytes_before)?;
            json.fixed_field("mib_s", mib_s(cliff.milli_mib_s))?;
            json.close('}')?;
        }
        None => json.null_field("cliff")?,
    }
    match sustained.steady_milli_mib_s {
        Some(steady) => json.fixed_field("steady_mib_s", mib_s(steady))?,
        None => json.null_field("steady_mib_s")?,
    }
    json.number_field("data_generation_ns", sustained.fill_ns)?;
    if let Some(id) = sustained.scratch_region_id {
        json.string_field("scratch_region_id", format_args!("{id:#018x}"))?;
    }
    write_errors(json, &sustained.errors, sustained.errors_total())?;
    if let Some(verify) = &sustained.verify {
        write_verify(json, verify)?;
    }
    write_series(json, &sustained.series, true)?;
    write_ending(json, sustained.ended_early, &sustained.notes)?;
    json.close('}')
}

fn write_timing(json: &mut JsonWriter<'_>, key: &str, timing: &HdparmTiming, line: &str) -> fmt::Result {
    json.open(Some(key), '{')?;
    json.number_field("iterations", timing.iterations)?;
    json.number_field("bytes", timing.bytes())?;
    json.number_field("mb", timing.total_mb())?;
    json.number_field("elapsed_ns", timing.elapsed_ns)?;
    json.number_field("overhead_ns", timing.overhead_ns)?;
    json.fixed_field("mb_per_sec", Fixed::new(u128::from(timing.centi_mb_per_s()), 2))?;
    json.fixed_field("decimal_mb_per_s", Fixed::new(u128::from(timing.centi_decimal_mb_per_s()), 2))?;
    json.string_field("line", format_args!("{line}"))?;
    json.close('}')
}

fn write_hdparm(json: &mut JsonWriter<'_>, result: &HdparmResult) -> fmt::Result {
    json.open(None, '{')?;
    json.string_field("device", format_args!("{}", result.device_name))?;
    json.number_field("run", result.run)?;
    json.string_field(
        "units",
        format_args!(
            "mb and mb_per_sec as hdparm counts them, MB = 2^20 bytes; decimal_mb_per_s in MB of 10^6 bytes"
        ),
    )?;
    let cached_line = alloc::format!(" Timing cached reads:   {}", result.cached.cached_text());
    write_timing(json, "cached", &result.cached, &cached_line)?;
    match &result.buffered {
        Some(buffered) => {
            let line = alloc::format!(" Timing buffered disk reads: {}", buffered.buffered_text());
            write_timing(json, "buffered", buffered, &line)?;
        }
        None => json.null_field("buffered")?,
    }
    json.number_field("request_bytes", result.request_bytes)?;
    json.number_field("iodepth", result.queue_depth)?;
    write_errors(json, &result.errors, result.errors_total())?;
    write_ending(json, result.ended_early, &result.notes)?;
    json.close('}')
}

/// Reading the three arrays back (feature `std`): what `barebench report` charts and tabulates.
#[cfg(feature = "std")]
pub mod read {
    use serde::{Deserialize, Serialize};
    use std::string::String;
    use std::vec::Vec;

    /// One step, or one slow or fast point.
    #[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
    #[serde(default)]
    pub struct StepReport {
        pub offset: u64,
        pub mib_s: f64,
    }

    /// One point of a series.
    #[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
    #[serde(default)]
    pub struct PointReport {
        pub start: u64,
        pub end: u64,
        pub samples: u64,
        pub bytes: u64,
        /// Sustained writes only: the bytes written before the point.
        pub bytes_before: u64,
        pub mib_s: f64,
        pub min_mib_s: f64,
        pub max_mib_s: f64,
    }

    #[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
    #[serde(default)]
    pub struct SeriesReport {
        pub samples_per_point: u64,
        pub points: Vec<PointReport>,
    }

    #[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
    #[serde(default)]
    pub struct ZoneReport {
        pub start: u64,
        pub end: u64,
        pub steps: u64,
        pub min_mib_s: f64,
        pub mean_mib_s: f64,
    }

    /// An entry of `"barebench scan"`.
    #[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
    #[serde(default)]
    pub struct ScanReport {
        pub device: String,
        pub job: String,
        pub start: u64,
        pub end: u64,
        pub step_bytes: u64,
        pub request_bytes: u64,
        pub iodepth: u32,
        pub steps: u64,
        pub bytes: u64,
        pub elapsed_ns: u64,
        pub min: StepReport,
        pub mean_mib_s: f64,
        pub max: StepReport,
        pub slowest: Vec<StepReport>,
        pub slow_threshold: String,
        pub slow_zone_count: u64,
        pub slow_zones: Vec<ZoneReport>,
        pub errors_total: u64,
        pub series: SeriesReport,
    }

    #[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
    #[serde(default)]
    pub struct CliffReport {
        pub at_ns: u64,
        pub bytes_before: u64,
        pub mib_s: f64,
    }

    /// An entry of `"barebench sustained"`.
    #[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
    #[serde(default)]
    pub struct SustainedReport {
        pub device: String,
        pub job: String,
        pub start: u64,
        pub end: u64,
        pub bs: u64,
        pub iodepth: u32,
        pub runtime_ns: u64,
        pub elapsed_ns: u64,
        pub bytes: u64,
        pub passes: u32,
        pub mean_mib_s: f64,
        pub first_seconds_mib_s: f64,
        pub first_seconds_ns: u64,
        pub cliff: Option<CliffReport>,
        pub steady_mib_s: Option<f64>,
        pub errors_total: u64,
        pub series: SeriesReport,
    }

    /// `-T` or `-t`.
    #[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
    #[serde(default)]
    pub struct TimingReport {
        pub iterations: u64,
        pub bytes: u64,
        pub mb: u64,
        pub elapsed_ns: u64,
        pub mb_per_sec: f64,
        pub decimal_mb_per_s: f64,
        pub line: String,
    }

    /// An entry of `"barebench hdparm"`.
    #[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq)]
    #[serde(default)]
    pub struct HdparmReport {
        pub device: String,
        pub run: u32,
        pub cached: Option<TimingReport>,
        pub buffered: Option<TimingReport>,
        pub errors_total: u64,
    }
}

#[cfg(test)]
mod tests {
    use crate::cpu_cost::NoCpuCounters;
    use crate::fio_json::{extract_json_from_log, parse_fio_json};
    use crate::results::ReportContext;
    use crate::run_loop::{DeviceRegion, RunEnvironment, WriteAccess};
    use crate::runner::run_benchmark;
    use crate::settings::{Config, JobOperation, JobSpec};
    use crate::sim::{SimBehaviour, SimDevice, SimMedium, TestMemory};
    use crate::units::{MIB, NS_PER_MS};
    use blockdev::scratch::{Partition, PartitionTable, ScratchRegion};
    use blockdev::testing::SteppingClock;
    use blockdev::{Clock, Geometry, Operation};
    use core::cell::RefCell;
    use std::string::String;

    #[test]
    fn scans_and_sustained_writes_run_once_per_device_and_read_back_from_the_json() {
        let clock = SteppingClock::new(1_000_000_000, 10);
        let geometry = Geometry {
            logical_block_bytes: 512,
            block_count: 64 << 11,
            max_request_blocks: 256,
            max_in_flight: 8,
        };
        let mut behaviour = SimBehaviour::new(geometry, 2_000);
        behaviour.transfer_ticks_per_kib = 2_000;
        let nvme = SimDevice::new("nvme0", behaviour.clone(), &clock);
        let mut sd = SimDevice::new(
            "sd0",
            SimBehaviour { geometry: Geometry { max_in_flight: 1, ..geometry }, ..behaviour },
            &clock,
        );
        let config = Config {
            jobs: std::vec![
                JobSpec::new(JobOperation::Scan, 4 * MIB, 4),
                JobSpec::new(JobOperation::Sustained, 64 << 10, 4)
            ],
            runtime_ns: 300 * NS_PER_MS,
            runs: 3,
            write_devices: std::vec![String::from("nvme0")],
            progress: false,
            ..Config::default()
        };
        let partition = Partition {
            number: 1,
            table: PartitionTable::Mbr { partition_type: 0xDA },
            first_lba: 2048,
            block_count: 16384,
        };
        let region = ScratchRegion { partition, start_bytes: MIB, length_bytes: 8 * MIB, region_id: 0x5EED };
        let regions = [DeviceRegion { device_name: "nvme0", region }];
        let memory = TestMemory::new(0x4000_0000, 1 << 20);
        let medium =
            SimMedium { memory: &memory, disk: RefCell::new(std::vec![0; 64 << 20]), corrupt_lba: None };
        let mut nvme = nvme.with_medium(&medium);
        let counters = NoCpuCounters("host test");
        let environment = RunEnvironment {
            clock: &clock,
            cpu_counters: &counters,
            buffer_area: memory.area(),
            memory: Some(&memory),
            writes: Some(WriteAccess { memory: &memory, regions: &regions }),
            conditions: None,
        };
        let context = ReportContext {
            board: "simulated",
            timer_frequency_hz: clock.ticks_per_second(),
            ..ReportContext::default()
        };
        let mut console = String::new();
        let results = run_benchmark(&config, &mut [&mut nvme, &mut sd], &environment, &context, &mut console);
        // Once per device whatever runs= says; sd0 has no write= and no region.
        assert_eq!(results.scans.len(), 2, "{console}");
        assert_eq!(results.sustained.len(), 1, "{console}");
        assert!(results.runs.is_empty());
        assert!(console.contains("job sustained:64k:4 skipped on sd0: write= does not name it"), "{console}");
        assert!(results.stream_jobs_clean(), "{console}");
        assert!(sd.accepted.iter().all(|request| request.operation == Operation::Read));
        let (start, length) = region.writable();
        assert!(nvme
            .accepted
            .iter()
            .filter(|request| request.operation == Operation::Write)
            .all(|request| request.lba * 512 >= start
                && (request.lba + u64::from(request.block_count)) * 512 <= start + length));
        let report = parse_fio_json(&extract_json_from_log(&console).unwrap()).unwrap();
        assert_eq!(report.global_options["readonly"], "0");
        assert_eq!(report.barebench_scan.len(), 2);
        let scan = &report.barebench_scan[1];
        assert_eq!(
            (scan.device.as_str(), scan.job.as_str(), scan.steps, scan.end),
            ("sd0", "scan:4m:4", 16, 64 * MIB)
        );
        assert_eq!(scan.series.points.len(), 16);
        assert!(scan.mean_mib_s > 100.0 && scan.min.mib_s <= scan.mean_mib_s, "{scan:?}");
        let sustained = &report.barebench_sustained[0];
        assert_eq!((sustained.device.as_str(), sustained.bs, sustained.start), ("nvme0", 64 << 10, start));
        assert!(sustained.bytes > 0 && sustained.cliff.is_none());
        assert_eq!(sustained.series.points[0].bytes_before, 0);
        assert!(report.barebench_hdparm.is_empty());
        assert!(console.contains("\nscan      sd0      min "), "{console}");
        assert!(console.contains("\nsustained nvme0    mean "), "{console}");
        assert!(!console.contains("no results"), "{console}");
    }
}
