//! The runner with `trace=` (crate::trace): records against the run's own figures, identical
//! figures with and without a trace, a full ring, failed commands, recording cost metered apart.

use alloc::string::String;
use alloc::vec::Vec;
use core::cell::RefCell;
use std::format;

use blockdev::testing::SteppingClock;
use blockdev::{BlockDevice, Clock, DmaBuffer, IoErrorKind};

use crate::cmdline::TraceRequest;
use crate::cmdline::{Config, JobOperation, JobSpec, Preset};
use crate::console::Console;
use crate::cpu_cost::{CpuCounters, NoCpuCounters};
use crate::plan::tests::nvme_geometry;
use crate::results::{BenchmarkResults, ReportContext};
use crate::run::RunEnvironment;
use crate::runner::run_benchmark_with_traces;
use crate::sim::{SimBehaviour, SimDevice};
use crate::trace::{RunTrace, TraceOutput, TraceRecord, TraceStatus};

const GHZ: u64 = 1_000_000_000;
const US: u64 = 1_000;
const MS: u64 = 1_000_000;

/// One run's trace as written: device, run name, records, commands not kept.
type Captured = (String, String, Vec<TraceRecord>, u64);

/// Keeps every run's records and counts.
#[derive(Default)]
struct CapturedTraces {
    runs: RefCell<Vec<Captured>>,
}

impl TraceOutput for CapturedTraces {
    fn write_records(&self, console: &mut dyn Console, trace: &RunTrace<'_>) {
        let _ = writeln!(console, "{} records", trace.ring.records().len());
        self.runs.borrow_mut().push((
            String::from(trace.device),
            String::from(trace.run_name),
            trace.ring.records().to_vec(),
            trace.ring.not_kept(),
        ));
    }
}

fn config(traces: &[(&str, u32)], queue_depth: u32, runs: u32) -> Config {
    let mut config = Config::for_preset(Preset::Reference);
    config.jobs = alloc::vec![JobSpec::new(JobOperation::RandRead, 4096, queue_depth)];
    (config.ramp_ns, config.runtime_ns, config.runs) = (MS, 5 * MS, runs);
    (config.offset_bytes, config.size_bytes) = (1 << 20, 8 << 20);
    config.traces = traces
        .iter()
        .map(|(device, keep)| TraceRequest { device: String::from(*device), keep: *keep })
        .collect();
    config
}

fn device<'c>(clock: &'c SteppingClock, behaviour: impl FnOnce(&mut SimBehaviour)) -> SimDevice<'c> {
    let mut settings = SimBehaviour::new(nvme_geometry(), 40 * US);
    settings.random_latency_ticks = 60 * US;
    behaviour(&mut settings);
    SimDevice::new("nvme0", settings, clock)
}

fn run(
    config: &Config,
    device: &mut SimDevice<'_>,
    clock: &SteppingClock,
    counters: &dyn CpuCounters,
    traces: &CapturedTraces,
) -> (BenchmarkResults, String) {
    let context = ReportContext { board: "simulated", timer_frequency_hz: GHZ, ..ReportContext::default() };
    let buffer_area =
        DmaBuffer { cpu_address: 0x4000_0000, physical_address: 0x4000_0000, length_bytes: 1 << 20 };
    let environment =
        RunEnvironment { clock, cpu_counters: counters, buffer_area, writes: None, memory: None };
    let mut console = String::new();
    let devices: &mut [&mut dyn BlockDevice] = &mut [device];
    let results = run_benchmark_with_traces(config, devices, &environment, &context, &mut console, traces);
    (results, console)
}

#[test]
fn every_command_of_the_window_is_recorded_as_the_run_counted_it() {
    let clock = SteppingClock::new(GHZ, 100);
    let mut nvme = device(&clock, |_| {});
    let traces = CapturedTraces::default();
    let (results, console) =
        run(&config(&[("nvme0", 65_536)], 8, 2), &mut nvme, &clock, &NoCpuCounters("host"), &traces);
    let captured = traces.runs.borrow();
    assert_eq!(captured.len(), 2);
    for (run, (device, run_name, records, not_kept)) in results.runs.iter().zip(captured.iter()) {
        assert_eq!((device.as_str(), run_name.as_str()), ("nvme0", format!("job1-run{}", run.run).as_str()));
        assert_eq!(*not_kept, 0);
        assert_eq!(records.len() as u64, run.ios, "one record per I/O the run counted");
        // Times are ticks since the run's start (1 GHz: ticks are ns): completions inside the window.
        let (ramp, window) = (run.ramp_ns, run.window_ns);
        assert!(records.iter().all(|r| (ramp..ramp + window).contains(&r.completed_ticks)));
        assert!(records
            .iter()
            .all(|r| r.submitted_ticks <= r.kicked_ticks && r.kicked_ticks < r.completed_ticks));
        let latency_sum: u64 = records.iter().map(|r| r.completed_ticks - r.submitted_ticks).sum();
        let mean_milli_ns =
            (u128::from(latency_sum) * 1000 + records.len() as u128 / 2) / records.len() as u128;
        assert_eq!(mean_milli_ns, run.lat.mean_milli_ns, "the run's mean latency");
        let (min, max) = records
            .iter()
            .map(|r| r.completed_ticks - r.submitted_ticks)
            .fold((u64::MAX, 0), |(lo, hi), l| (lo.min(l), hi.max(l)));
        assert_eq!((min, max), (run.lat.min_ns, run.lat.max_ns));
        // LBAs inside the region (1 MiB .. 9 MiB in 512-byte blocks), 8 blocks each.
        assert!(records.iter().all(|r| (2048..18432 - 8).contains(&r.lba) && r.block_count == 8));
        assert!(records.iter().all(|r| r.status == TraceStatus::Ok));
        // The simulated driver says nothing more: queue 0, command 0, no SQ head.
        assert!(records.iter().all(|r| r.detail == blockdev::CommandDetail::default()));
    }
    let begin = console.find("==== barebench trace begin nvme0 job1-run1 ====\n").expect(&console);
    let end = console[begin..].find("==== barebench trace end ====\n").expect(&console);
    assert!(console[begin..begin + end].contains(&format!("{} records", results.runs[0].ios)));
    let summary = format!(
        "nvme0    trace job1-run1: {} commands recorded, 0 more not kept (ring of 65536); recording n/a instr / n/a cycles per I/O (cycles: host) (instructions: host)\n",
        results.runs[0].ios
    );
    assert!(console.contains(&summary), "{console}");
}

#[test]
fn a_traced_run_measures_exactly_what_an_untraced_one_does() {
    let outcome = |traces: &[(&str, u32)]| {
        let clock = SteppingClock::new(GHZ, 100);
        let mut nvme = device(&clock, |_| {});
        let (results, _) =
            run(&config(traces, 8, 1), &mut nvme, &clock, &NoCpuCounters("host"), &CapturedTraces::default());
        (results.runs, nvme.accepted)
    };
    let (traced, traced_requests) = outcome(&[("nvme0", 65_536)]);
    let (plain, plain_requests) = outcome(&[]);
    assert_eq!(traced, plain);
    assert_eq!(traced_requests, plain_requests);
}

#[test]
fn a_full_ring_keeps_the_first_commands_and_counts_the_rest() {
    let clock = SteppingClock::new(GHZ, 100);
    let mut nvme = device(&clock, |_| {});
    let traces = CapturedTraces::default();
    let (results, console) =
        run(&config(&[("nvme0", 10)], 4, 1), &mut nvme, &clock, &NoCpuCounters("host"), &traces);
    let (_, _, records, not_kept) = &traces.runs.borrow()[0];
    assert_eq!(records.len(), 10);
    assert_eq!(*not_kept, results.runs[0].ios - 10);
    // The first ten to complete in the window.
    assert!(records.windows(2).all(|pair| pair[0].completed_ticks <= pair[1].completed_ticks));
    assert!(records[0].completed_ticks >= MS && records[0].completed_ticks < MS + 200 * US);
    assert!(
        console.contains(&format!("10 commands recorded, {not_kept} more not kept (ring of 10)")),
        "{console}"
    );
}

#[test]
fn failed_commands_are_recorded_with_their_status() {
    let clock = SteppingClock::new(GHZ, 100);
    let mut nvme = device(&clock, |b| b.error_every = Some((5, IoErrorKind::DeviceStatus)));
    let traces = CapturedTraces::default();
    let (results, _) =
        run(&config(&[("nvme0", 65_536)], 2, 1), &mut nvme, &clock, &NoCpuCounters("host"), &traces);
    let (_, _, records, _) = &traces.runs.borrow()[0];
    let failed = records
        .iter()
        .filter(|r| matches!(r.status, TraceStatus::Failed { kind: IoErrorKind::DeviceStatus, .. }))
        .count();
    let run = &results.runs[0];
    assert!(failed > 0);
    assert_eq!(failed as u64, run.errors[IoErrorKind::DeviceStatus.index()]);
    assert_eq!(records.len() as u64, run.ios + failed as u64);
}

#[test]
fn recording_is_metered_apart_from_the_bookkeeping() {
    use crate::cpu_cost::tests::ModelCounters;
    // The model counters move only when read: recording, which reads nothing, costs nothing,
    // and the bookkeeping is the same as without a trace (the extra laps are calibrated out).
    let outcome = |traces: &[(&str, u32)]| {
        let counters = ModelCounters::new(11);
        let clock = SteppingClock::new(GHZ, 100);
        let mut nvme = device(&clock, |_| {});
        let (results, console) =
            run(&config(traces, 4, 1), &mut nvme, &clock, &counters, &CapturedTraces::default());
        (results.runs[0].cpu, console)
    };
    let (traced, console) = outcome(&[("nvme0", 65_536)]);
    let (plain, _) = outcome(&[]);
    // The whole run (usr_cpu's denominator) includes the recording laps' own counter reads.
    assert!(traced.whole_run.instructions > plain.whole_run.instructions);
    let without_whole_run =
        |cost: crate::cpu_cost::CpuCost| crate::cpu_cost::CpuCost { whole_run: Default::default(), ..cost };
    assert_eq!(without_whole_run(traced), without_whole_run(plain));
    assert!(console.contains("recording 0.0 instr / 0.0 cycles per I/O\n"), "{console}");
}

#[test]
fn a_trace_of_an_unknown_device_or_too_large_a_ring_is_reported_and_the_run_goes_on() {
    let clock = SteppingClock::new(GHZ, 100);
    let mut nvme = device(&clock, |_| {});
    let traces = CapturedTraces::default();
    let mut config = config(&[("nvme7", 10)], 4, 1);
    config.traces.push(TraceRequest { device: String::from("nvme0"), keep: u32::MAX });
    let (results, console) = run(&config, &mut nvme, &clock, &NoCpuCounters("host"), &traces);
    assert!(console.contains("trace=nvme7: no such device among those measured; not traced\n"), "{console}");
    assert!(
        console.contains("trace=nvme0:4294967295: no memory for a ring of 4294967295 commands"),
        "{console}"
    );
    assert!(results.runs[0].ios > 0);
    assert!(traces.runs.borrow().is_empty());
    assert!(!console.contains("trace begin"));
    let _ = clock.now_ticks();
}
