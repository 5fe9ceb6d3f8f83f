//! The JSON of a real benchmark run against fio 3.36's own JSON, key by key and type by type,
//! and its interval samples, latency and depth bands and json+ bins against values this test
//! computes itself from what the simulated device saw (docs/fio-json.md §2–§5).

use core::cell::RefCell;
use std::collections::VecDeque;
use std::string::String;
use std::vec::Vec;

use blockdev::testing::SteppingClock;
use blockdev::{check_request, BlockDevice, Clock, Completion, DmaBuffer, Geometry, Request, SubmitError};
use serde_json::Value;

use crate::cmdline::{Config, JobOperation, JobSpec, OutputFormat};
use crate::cpu_cost::NoCpuCounters;
use crate::fio_json::extract_json_from_log;
use crate::results::ReportContext;
use crate::runner::{run_benchmark, RunEnvironment};
use crate::units::NS_PER_MS;

const FIO_3_36: &str = include_str!("../../tests/data/fio-3.36-nvme-randread.json");

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
    let mut config = Config::for_preset(crate::cmdline::Preset::Quick);
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
                    Some(our_value) => {
                        missing_or_different(fio_value, our_value, &std::format!("{path}.{key}"), problems)
                    }
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
    let completed: Vec<(u64, u64)> = log.completions.iter().copied().filter(|&(t, _)| in_window(t)).collect();
    assert!(completed.len() > 100, "{} completions", completed.len());
    assert_eq!(job["read"]["total_ios"].as_u64(), Some(completed.len() as u64));

    // Interval samples: boundary k counts completions in (b(k-1), b(k)], the first from the ramp's end.
    let boundaries: Vec<u64> = (1..=RUNTIME_NS / INTERVAL_NS).map(|k| ramp_end + k * INTERVAL_NS).collect();
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
        assert_eq!(read[std::format!("{prefix}_samples")].as_u64(), Some(samples.len() as u64), "{prefix}");
        assert_eq!(read[std::format!("{prefix}_min")].as_u64(), samples.iter().min().copied(), "{prefix}");
        assert_eq!(read[std::format!("{prefix}_max")].as_u64(), samples.iter().max().copied(), "{prefix}");
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
    let level_band = |n: usize| [1usize, 2, 4, 8, 16, 32, 64].iter().rposition(|&low| n >= low).unwrap_or(0);
    let batch_band = |n: usize| [0usize, 1, 5, 9, 17, 33, 65].iter().rposition(|&low| n >= low).unwrap_or(0);
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
