//! The report reads what the benchmark really prints: `bench::runner::run_benchmark` runs on two
//! simulated devices (an SD-like one at queue depth 1, an NVMe-like one with a deep queue) with
//! a simulated clock, and `tools::report` turns the console text into rows (format compatibility
//! between bench's JSON writer and the host's reader; docs/nvme-and-fio.md §3.5–3.6).
#![forbid(unsafe_code)]

use std::collections::VecDeque;
use std::fmt::Write as _;

use blockdev::testing::SteppingClock;
use blockdev::{check_request, BlockDevice, Completion, DmaBuffer, Geometry, Request, SubmitError};
use tools::report::input::load_source;
use tools::report::SourceKind;

/// Completes each request a fixed time after it was kicked, in order.
struct FixedLatencyDevice<'c> {
    name: &'static str,
    geometry: Geometry,
    latency_ticks: u64,
    clock: &'c SteppingClock,
    submitted: Vec<u32>,
    in_flight: VecDeque<(u32, u64)>,
}

impl BlockDevice for FixedLatencyDevice<'_> {
    fn name(&self) -> &str {
        self.name
    }

    fn geometry(&self) -> Geometry {
        self.geometry
    }

    fn submit(&mut self, request: Request) -> Result<(), (Request, SubmitError)> {
        if let Err(error) = check_request(&self.geometry, &request) {
            return Err((request, error));
        }
        if self.submitted.len() + self.in_flight.len() >= self.geometry.max_in_flight as usize {
            return Err((request, SubmitError::QueueFull));
        }
        self.submitted.push(request.tag);
        Ok(())
    }

    fn kick(&mut self) {
        let due = self.clock.peek() + self.latency_ticks;
        for tag in self.submitted.drain(..) {
            self.in_flight.push_back((tag, due));
        }
    }

    fn poll(&mut self, completions: &mut [Completion]) -> usize {
        let now = self.clock.peek();
        let mut count = 0;
        while count < completions.len() {
            match self.in_flight.front() {
                Some(&(tag, due)) if due <= now => {
                    self.in_flight.pop_front();
                    completions[count] = Completion { tag, result: Ok(()) };
                    count += 1;
                }
                _ => break,
            }
        }
        count
    }
}

#[test]
fn report_reads_the_benchmarks_own_console_output() {
    const TICKS_PER_SECOND: u64 = 1_000_000;
    let clock = SteppingClock::new(TICKS_PER_SECOND, 5);
    let geometry = |max_in_flight| Geometry {
        logical_block_bytes: 512,
        block_count: 16 << 21,
        max_request_blocks: 2048,
        max_in_flight,
    };
    let mut sd = FixedLatencyDevice {
        name: "sd0",
        geometry: geometry(1),
        latency_ticks: 400,
        clock: &clock,
        submitted: Vec::new(),
        in_flight: VecDeque::new(),
    };
    let mut nvme = FixedLatencyDevice {
        name: "nvme0",
        geometry: geometry(63),
        latency_ticks: 80,
        clock: &clock,
        submitted: Vec::new(),
        in_flight: VecDeque::new(),
    };
    let mut problems = Vec::new();
    let config = bench::settings::Config::from_command_line(
        "preset=quick runs=3 ramp=0 runtime=50ms progress=off",
        |_| false,
        &mut |error| problems.push(error.to_string()),
    );
    assert!(problems.is_empty(), "{problems:?}");
    let geometries = [sd.geometry, nvme.geometry];
    let mut buffer = vec![0u8; bench::plan::buffer_bytes_needed(&config, &geometries)];
    let area = DmaBuffer {
        cpu_address: buffer.as_mut_ptr() as usize,
        physical_address: buffer.as_mut_ptr() as u64,
        length_bytes: buffer.len(),
    };
    let mut console = String::new();
    let context = bench::results::ReportContext {
        board: "simulated-pi",
        timer_frequency_hz: TICKS_PER_SECOND,
        ..Default::default()
    };
    let mut devices: [&mut dyn BlockDevice; 2] = [&mut sd, &mut nvme];
    let counters = bench::cpu_cost::NoCpuCounters("simulated");
    let environment = bench::runner::RunEnvironment {
        clock: &clock,
        cpu_counters: &counters,
        buffer_area: area,
        memory: None,
        writes: None,
        conditions: None,
    };
    bench::runner::run_benchmark(&config, &mut devices, &environment, &context, &mut console);
    drop(buffer);

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("simulated.log");
    // The way a serial line delivers it: CR LF line ends.
    let mut serial_text = String::new();
    for line in console.lines() {
        let _ = write!(serial_text, "{line}\r\n");
    }
    std::fs::write(&log, serial_text).unwrap();
    let source = load_source(&log);
    assert!(source.problems.is_empty(), "{:?}\n{console}", source.problems);
    assert_eq!(source.kind, SourceKind::BarebenchLog);
    assert_eq!(source.board.as_deref(), Some("simulated-pi"));
    assert_eq!(source.label, "simulated-pi");
    let rows: Vec<(String, String)> =
        source.rows.iter().map(|row| (row.device.clone(), row.workload())).collect();
    assert_eq!(rows.len(), 6, "{rows:?}");
    for device in ["sd0", "nvme0"] {
        for workload in ["read 1M QD16", "randread 4K QD1", "randread 4K QD32"] {
            let found = source.rows.iter().find(|row| {
                row.device == device && row.workload().starts_with(&workload[..workload.len() - 4])
            });
            let row = found.unwrap_or_else(|| panic!("{device} {workload} missing from {rows:?}"));
            assert_eq!(row.runs, 3, "{row:?}");
            assert!(row.mib_per_s > 0.0 && row.iops > 0.0, "{row:?}");
            assert!(row.latency_p99_us.is_some(), "{row:?}");
        }
    }
    // On the SD-like device both 4 KiB jobs ran at QD1; each row still names the job asked for.
    let sd_jobs: Vec<&str> =
        source.rows.iter().filter(|row| row.device == "sd0").map(|row| row.job.as_str()).collect();
    assert_eq!(sd_jobs, ["read:1m:16", "randread:4k:1", "randread:4k:32"], "{rows:?}");
    // 4 KiB at QD1 on the SD-like device: one I/O per 400 µs plus polling, so below 2500 IOPS.
    let sd_qd1 = source.rows.iter().find(|row| row.device == "sd0" && row.iodepth == 1).unwrap();
    assert!(sd_qd1.iops < 2500.0 && sd_qd1.iops > 1000.0, "{sd_qd1:?}");
    assert!(sd_qd1.latency_mean_us >= 400.0, "{sd_qd1:?}");
}
