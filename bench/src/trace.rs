//! Per-command traces (`trace=DEV[:N]`): every command of each measured run on a device, kept in
//! a ring allocated before the run (a few stores per completion, no formatting, no allocation),
//! written out after the run between [`TRACE_BEGIN_PREFIX`] and [`TRACE_END_MARKER`] lines by a
//! [`TraceOutput`] (the kernel's: defmt frames, docs/architecture.md "Output"), and read back on
//! the host by `barebench report --trace`.
//!
//! A record is kept for each command that completes inside the measured window, the ones the
//! run's figures count (docs/measurement.md), with its submit, doorbell and completion-seen
//! timer readings: latency = completion − submit, as the run's `lat`. When the ring is full the
//! first N are kept and the rest counted. [`WireRecord`] is the record as it travels, and
//! [`text`] the text-safe line form of the binary frames.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use blockdev::{CommandDetail, IoErrorKind, Operation};

use crate::console::Console;
use crate::cpu_cost::{CounterStatus, CounterTotals};
use crate::units::Fixed;

/// The start of the line before a run's trace: `==== barebench trace begin DEV RUN ====`.
pub const TRACE_BEGIN_PREFIX: &str = "==== barebench trace begin ";
/// The line after a run's trace.
pub const TRACE_END_MARKER: &str = "==== barebench trace end ====";

/// The completion status of a traced command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TraceStatus {
    Ok,
    /// The request failed: the kind and the driver's code (NVMe status field, SDHCI error bits).
    Failed {
        kind: IoErrorKind,
        code: u32,
    },
}

/// One command of a run, as recorded (timer ticks since the run started).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceRecord {
    pub submitted_ticks: u64,
    pub kicked_ticks: u64,
    pub completed_ticks: u64,
    pub operation: Operation,
    pub lba: u64,
    pub block_count: u32,
    pub detail: CommandDetail,
    pub status: TraceStatus,
}

/// The record as it travels: one integer per field, every time relative to the run's start, so
/// that the frame encoder's zero compression shortens them (defmt's rzcobs). Field order is the
/// order of the kernel's format string and of [`WireRecord::from_fields`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireRecord {
    pub submitted_ticks: u64,
    pub kicked_ticks: u64,
    pub completed_ticks: u64,
    pub lba: u64,
    pub block_count: u32,
    pub queue_id: u16,
    pub command_id: u16,
    /// The SQ head the completion reported, [`NO_SQ_HEAD`] when the device has none.
    pub sq_head: u32,
    /// 0 for a read, 1 for a write.
    pub operation: u8,
    /// 0 for success, else 1 + the index of the error kind in `IoErrorKind::ALL`.
    pub status: u8,
    pub status_code: u32,
}

/// `sq_head` of a device that reports none (an SD host).
pub const NO_SQ_HEAD: u32 = u32::MAX;
/// How many integers a [`WireRecord`] is.
pub const WIRE_FIELDS: usize = 11;

impl WireRecord {
    pub fn from_record(record: &TraceRecord) -> WireRecord {
        let (status, status_code) = match record.status {
            TraceStatus::Ok => (0, 0),
            TraceStatus::Failed { kind, code } => (1 + kind.index() as u8, code),
        };
        WireRecord {
            submitted_ticks: record.submitted_ticks,
            kicked_ticks: record.kicked_ticks,
            completed_ticks: record.completed_ticks,
            lba: record.lba,
            block_count: record.block_count,
            queue_id: record.detail.queue_id,
            command_id: record.detail.command_id,
            sq_head: record.detail.sq_head.map_or(NO_SQ_HEAD, u32::from),
            operation: u8::from(record.operation == Operation::Write),
            status,
            status_code,
        }
    }

    /// The record back, `None` when a field holds what no record can (an unknown status).
    pub fn to_record(&self) -> Option<TraceRecord> {
        let status = match self.status {
            0 => TraceStatus::Ok,
            n => TraceStatus::Failed {
                kind: *IoErrorKind::ALL.get(usize::from(n) - 1)?,
                code: self.status_code,
            },
        };
        let operation = match self.operation {
            0 => Operation::Read,
            1 => Operation::Write,
            _ => return None,
        };
        let sq_head = match self.sq_head {
            NO_SQ_HEAD => None,
            head => Some(u16::try_from(head).ok()?),
        };
        Some(TraceRecord {
            submitted_ticks: self.submitted_ticks,
            kicked_ticks: self.kicked_ticks,
            completed_ticks: self.completed_ticks,
            operation,
            lba: self.lba,
            block_count: self.block_count,
            detail: CommandDetail { queue_id: self.queue_id, command_id: self.command_id, sq_head },
            status,
        })
    }

    /// The fields in wire order, widened.
    pub fn fields(&self) -> [u64; WIRE_FIELDS] {
        [
            self.submitted_ticks,
            self.kicked_ticks,
            self.completed_ticks,
            self.lba,
            u64::from(self.block_count),
            u64::from(self.queue_id),
            u64::from(self.command_id),
            u64::from(self.sq_head),
            u64::from(self.operation),
            u64::from(self.status),
            u64::from(self.status_code),
        ]
    }

    /// The record from its fields in wire order; `None` when one does not fit its width.
    pub fn from_fields(fields: &[u64]) -> Option<WireRecord> {
        let [submitted, kicked, completed, lba, blocks, queue, command, head, operation, status, code] =
            <[u64; WIRE_FIELDS]>::try_from(fields).ok()?;
        Some(WireRecord {
            submitted_ticks: submitted,
            kicked_ticks: kicked,
            completed_ticks: completed,
            lba,
            block_count: u32::try_from(blocks).ok()?,
            queue_id: u16::try_from(queue).ok()?,
            command_id: u16::try_from(command).ok()?,
            sq_head: u32::try_from(head).ok()?,
            operation: u8::try_from(operation).ok()?,
            status: u8::try_from(status).ok()?,
            status_code: u32::try_from(code).ok()?,
        })
    }
}

/// Why a trace ring could not be had.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no memory for a ring of {keep} commands ({bytes} bytes)")]
pub struct RingTooLarge {
    pub keep: u32,
    pub bytes: usize,
}

/// The preallocated ring one device's runs record into; reset before each run.
pub struct TraceRing {
    records: Vec<TraceRecord>,
    keep: usize,
    not_kept: u64,
    /// The run's start, subtracted from every timestamp.
    start_ticks: u64,
    /// What recording cost the CPU over the last run (`Account::Recording`).
    recording_cost: CounterTotals,
}

impl TraceRing {
    /// A ring for `keep` records, allocated now (never during a run); refuses what the heap
    /// cannot hold instead of stopping the kernel.
    pub fn allocate(keep: u32) -> Result<TraceRing, RingTooLarge> {
        let mut records = Vec::new();
        let bytes = keep as usize * core::mem::size_of::<TraceRecord>();
        records.try_reserve_exact(keep as usize).map_err(|_| RingTooLarge { keep, bytes })?;
        Ok(TraceRing {
            records,
            keep: keep as usize,
            not_kept: 0,
            start_ticks: 0,
            recording_cost: CounterTotals::default(),
        })
    }

    /// Empties the ring for a run starting at `start_ticks`.
    pub fn start(&mut self, start_ticks: u64) {
        self.records.clear();
        self.not_kept = 0;
        self.start_ticks = start_ticks;
        self.recording_cost = CounterTotals::default();
    }

    /// Sets what recording cost over the run (the runner's meter).
    pub fn set_recording_cost(&mut self, cost: CounterTotals) {
        self.recording_cost = cost;
    }

    /// What recording cost over the run.
    pub fn recording_cost(&self) -> CounterTotals {
        self.recording_cost
    }

    /// Commands recorded or counted: the run's completions inside the window.
    pub fn commands_seen(&self) -> u64 {
        self.records.len() as u64 + self.not_kept
    }

    /// Stores one completed command (absolute timer readings); past `keep` only counts it. A
    /// push within the reserved capacity never allocates.
    #[inline]
    pub fn record(
        &mut self,
        ticks: (u64, u64, u64),
        request: (Operation, u64, u32),
        detail: CommandDetail,
        status: TraceStatus,
    ) {
        if self.records.len() == self.keep {
            self.not_kept += 1;
            return;
        }
        let (submitted, kicked, completed) = ticks;
        let (operation, lba, block_count) = request;
        let start = self.start_ticks;
        self.records.push(TraceRecord {
            submitted_ticks: submitted.wrapping_sub(start),
            kicked_ticks: kicked.wrapping_sub(start),
            completed_ticks: completed.wrapping_sub(start),
            operation,
            lba,
            block_count,
            detail,
            status,
        });
    }

    pub fn records(&self) -> &[TraceRecord] {
        &self.records
    }

    /// Commands that completed in the window after the ring was full.
    pub fn not_kept(&self) -> u64 {
        self.not_kept
    }

    pub fn keep(&self) -> usize {
        self.keep
    }

    pub fn start_ticks(&self) -> u64 {
        self.start_ticks
    }
}

/// One run's trace as handed to the [`TraceOutput`].
pub struct RunTrace<'a> {
    pub device: &'a str,
    /// `job1-run2`: the job's position in `jobs=` and the repetition.
    pub run_name: &'a str,
    pub ticks_per_second: u64,
    pub ring: &'a TraceRing,
}

/// Writes a run's records between the marker lines (the kernel: one defmt frame per record, as
/// [`text`] lines). Called after the run, outside the measured window.
pub trait TraceOutput {
    fn write_records(&self, console: &mut dyn Console, trace: &RunTrace<'_>);
}

/// For machines without a trace channel (host tests of the runner): says so between the markers.
pub struct NoTraceOutput;

impl TraceOutput for NoTraceOutput {
    fn write_records(&self, console: &mut dyn Console, trace: &RunTrace<'_>) {
        let _ = writeln!(console, "no trace channel: {} records not written", trace.ring.records().len());
    }
}

/// `recording N instr / M cycles per I/O`: what storing one record cost, measured around each
/// store (`Account::Recording`), with the reason for a counter that did not count.
pub struct RecordingCostText<'a> {
    pub ring: &'a TraceRing,
    pub cycles: CounterStatus,
    pub instructions: CounterStatus,
}

impl fmt::Display for RecordingCostText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let seen = self.ring.commands_seen();
        let cost = self.ring.recording_cost();
        let per_io = |total: u64, status: CounterStatus| -> Option<Fixed> {
            (status.is_counting() && seen > 0)
                .then(|| Fixed::new(u128::from(total) * 10 / u128::from(seen), 1))
        };
        f.write_str("recording ")?;
        for (index, (value, unit)) in [
            (per_io(cost.instructions, self.instructions), "instr"),
            (per_io(cost.cycles, self.cycles), "cycles"),
        ]
        .into_iter()
        .enumerate()
        {
            if index > 0 {
                f.write_str(" / ")?;
            }
            match value {
                Some(value) => write!(f, "{value} {unit}")?,
                None => write!(f, "n/a {unit}")?,
            }
        }
        f.write_str(" per I/O")?;
        for (name, status) in [("cycles", self.cycles), ("instructions", self.instructions)] {
            if let CounterStatus::Unavailable(reason) = status {
                write!(f, " ({name}: {reason})")?;
            }
        }
        Ok(())
    }
}

/// The line before a run's trace.
pub fn begin_marker(device: &str, run_name: &str) -> String {
    alloc::format!("{TRACE_BEGIN_PREFIX}{device} {run_name} ====")
}

/// The device and run a begin marker names, `None` for any other line.
pub fn parse_begin_marker(line: &str) -> Option<(&str, &str)> {
    let inner = line.trim_end().strip_prefix(TRACE_BEGIN_PREFIX)?.strip_suffix(" ====")?;
    let (device, run) = inner.split_once(' ')?;
    (!device.is_empty() && !run.is_empty() && !run.contains(' ')).then_some((device, run))
}

/// The text-safe form of binary frames: each frame is one line of standard base64 (RFC 4648 §4,
/// with padding), so a terminal shows harmless characters and the host finds frame boundaries
/// at line ends.
pub mod text {
    use alloc::vec::Vec;
    use core::fmt;

    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    /// Writes `bytes` as base64 (no line end).
    pub fn encode(bytes: &[u8], out: &mut dyn fmt::Write) -> fmt::Result {
        for chunk in bytes.chunks(3) {
            let word =
                chunk.iter().enumerate().fold(0u32, |word, (i, &b)| word | u32::from(b) << (16 - 8 * i));
            for position in 0..4 {
                let character = if position <= chunk.len() {
                    ALPHABET[(word >> (18 - 6 * position) & 0x3f) as usize] as char
                } else {
                    '='
                };
                out.write_char(character)?;
            }
        }
        Ok(())
    }

    /// A line that is not base64.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct NotBase64 {
        /// Byte position of the first offending character.
        pub position: usize,
    }

    /// The bytes of one base64 line (surrounding whitespace and a CR allowed).
    pub fn decode(line: &str) -> Result<Vec<u8>, NotBase64> {
        let line = line.trim();
        if !line.len().is_multiple_of(4) {
            return Err(NotBase64 { position: line.len() });
        }
        let mut bytes = Vec::with_capacity(line.len() / 4 * 3);
        let quads = line.as_bytes().chunks(4);
        let last = line.len() / 4;
        for (index, quad) in quads.enumerate() {
            let padding = quad.iter().rev().take_while(|&&c| c == b'=').count();
            if padding > 2 || (padding > 0 && index + 1 != last) {
                return Err(NotBase64 { position: index * 4 });
            }
            let mut word = 0u32;
            for (i, &c) in quad[..4 - padding].iter().enumerate() {
                let value =
                    ALPHABET.iter().position(|&a| a == c).ok_or(NotBase64 { position: index * 4 + i })?;
                word |= (value as u32) << (18 - 6 * i);
            }
            let produced = 3 - padding;
            bytes.extend((0..produced).map(|i| (word >> (16 - 8 * i)) as u8));
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::console::Console;
    use crate::cpu_cost::{CpuCounters, NoCpuCounters};
    use crate::plan::tests::nvme_geometry;
    use crate::results::{BenchmarkResults, ReportContext};
    use crate::run_loop::RunEnvironment;
    use crate::runner::run_benchmark_with_traces;
    use crate::settings::{Config, JobOperation, JobSpec, Preset, TraceRequest};
    use crate::sim::{SimBehaviour, SimDevice};
    use alloc::string::String;
    use alloc::string::ToString;
    use alloc::vec::Vec;
    use blockdev::testing::SteppingClock;
    use blockdev::{BlockDevice, Clock, DmaBuffer, IoErrorKind};
    use core::cell::RefCell;
    use proptest::prelude::*;
    use std::format;

    fn detail(queue_id: u16, command_id: u16, sq_head: Option<u16>) -> CommandDetail {
        CommandDetail { queue_id, command_id, sq_head }
    }

    #[test]
    fn the_ring_keeps_the_first_n_and_counts_the_rest() {
        let mut ring = TraceRing::allocate(3).unwrap();
        assert!(ring.records.capacity() >= 3);
        ring.start(1000);
        for i in 0..5u64 {
            ring.record(
                (1000 + i, 1001 + i, 1010 + i),
                (Operation::Read, i * 8, 8),
                detail(1, i as u16, Some(2)),
                TraceStatus::Ok,
            );
        }
        assert_eq!(ring.records().len(), 3);
        assert_eq!(ring.not_kept(), 2);
        assert_eq!(ring.records()[2].submitted_ticks, 2);
        assert_eq!((ring.records()[0].kicked_ticks, ring.records()[0].completed_ticks), (1, 10));
        assert_eq!(ring.records()[1].lba, 8);
        // A new run starts empty.
        ring.start(5000);
        assert_eq!((ring.records().len(), ring.not_kept(), ring.start_ticks()), (0, 0, 5000));
    }

    #[test]
    fn a_ring_the_heap_cannot_hold_is_refused() {
        let error = TraceRing::allocate(u32::MAX).err().expect("refused");
        assert_eq!(error.keep, u32::MAX);
        assert!(error.to_string().starts_with("no memory for a ring of 4294967295 commands"));
    }

    #[test]
    fn markers_name_device_and_run() {
        let line = begin_marker("nvme0", "job1-run2");
        assert_eq!(line, "==== barebench trace begin nvme0 job1-run2 ====");
        assert_eq!(parse_begin_marker(&line), Some(("nvme0", "job1-run2")));
        assert_eq!(parse_begin_marker("==== barebench trace begin nvme0 ===="), None);
        assert_eq!(parse_begin_marker(TRACE_END_MARKER), None);
    }

    fn any_record() -> impl Strategy<Value = TraceRecord> {
        (
            (any::<u64>(), any::<u64>(), any::<u64>()),
            (any::<bool>(), any::<u64>(), any::<u32>()),
            (any::<u16>(), any::<u16>(), proptest::option::of(any::<u16>())),
            (0usize..=IoErrorKind::ALL.len(), any::<u32>()),
        )
            .prop_map(|(times, request, ids, status)| TraceRecord {
                submitted_ticks: times.0,
                kicked_ticks: times.1,
                completed_ticks: times.2,
                operation: if request.0 { Operation::Write } else { Operation::Read },
                lba: request.1,
                block_count: request.2,
                detail: detail(ids.0, ids.1, ids.2),
                status: match status.0 {
                    0 => TraceStatus::Ok,
                    n => TraceStatus::Failed { kind: IoErrorKind::ALL[n - 1], code: status.1 },
                },
            })
    }

    proptest! {
        #[test]
        fn records_survive_the_wire_form(record in any_record()) {
            let wire = WireRecord::from_record(&record);
            let back = WireRecord::from_fields(&wire.fields()).unwrap();
            prop_assert_eq!(back, wire);
            prop_assert_eq!(back.to_record(), Some(record));
        }

        #[test]
        fn frames_survive_the_text_lines(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut line = String::new();
            text::encode(&bytes, &mut line).unwrap();
            prop_assert!(line.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'='));
            prop_assert_eq!(text::decode(&line).unwrap(), bytes);
        }
    }

    #[test]
    fn wire_fields_out_of_range_are_refused() {
        let mut fields = WireRecord::from_record(&TraceRecord {
            submitted_ticks: 1,
            kicked_ticks: 2,
            completed_ticks: 3,
            operation: Operation::Read,
            lba: 4,
            block_count: 5,
            detail: detail(6, 7, None),
            status: TraceStatus::Ok,
        })
        .fields();
        assert_eq!(fields[7], u64::from(NO_SQ_HEAD));
        fields[5] = 1 << 16;
        assert_eq!(WireRecord::from_fields(&fields), None);
        assert_eq!(WireRecord::from_fields(&fields[..10]), None);
        let unknown_status = WireRecord { status: 9, ..WireRecord::from_fields(&[0; WIRE_FIELDS]).unwrap() };
        assert_eq!(unknown_status.to_record(), None);
    }

    #[test]
    fn base64_matches_rfc_4648_and_refuses_garbage() {
        // RFC 4648 §10 test vectors.
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            let mut line = String::new();
            text::encode(plain.as_bytes(), &mut line).unwrap();
            assert_eq!(line, encoded);
            assert_eq!(text::decode(encoded).unwrap(), plain.as_bytes());
        }
        assert_eq!(text::decode("Zm9v\r\n").unwrap(), b"foo");
        assert_eq!(text::decode("Zm9"), Err(text::NotBase64 { position: 3 }));
        assert_eq!(text::decode("Zg==Zm9v"), Err(text::NotBase64 { position: 0 }));
        assert_eq!(text::decode("Zm!v"), Err(text::NotBase64 { position: 2 }));
        assert_eq!(text::decode("Z==="), Err(text::NotBase64 { position: 0 }));
    }

    // The runner with `trace=`, against the simulated device.
    // The runner with `trace=` (crate::trace): records against the run's own figures, identical
    // figures with and without a trace, a full ring, failed commands, recording cost metered apart.
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
        let context =
            ReportContext { board: "simulated", timer_frequency_hz: GHZ, ..ReportContext::default() };
        let buffer_area =
            DmaBuffer { cpu_address: 0x4000_0000, physical_address: 0x4000_0000, length_bytes: 1 << 20 };
        let environment = RunEnvironment {
            clock,
            cpu_counters: counters,
            buffer_area,
            writes: None,
            memory: None,
            conditions: None,
        };
        let mut console = String::new();
        let devices: &mut [&mut dyn BlockDevice] = &mut [device];
        let results =
            run_benchmark_with_traces(config, devices, &environment, &context, &mut console, traces);
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
            assert_eq!(
                (device.as_str(), run_name.as_str()),
                ("nvme0", format!("job1-run{}", run.run).as_str())
            );
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
            let (results, _) = run(
                &config(traces, 8, 1),
                &mut nvme,
                &clock,
                &NoCpuCounters("host"),
                &CapturedTraces::default(),
            );
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
        let without_whole_run = |cost: crate::cpu_cost::CpuCost| crate::cpu_cost::CpuCost {
            whole_run: Default::default(),
            ..cost
        };
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
        assert!(
            console.contains("trace=nvme7: no such device among those measured; not traced\n"),
            "{console}"
        );
        assert!(
            console.contains("trace=nvme0:4294967295: no memory for a ring of 4294967295 commands"),
            "{console}"
        );
        assert!(results.runs[0].ios > 0);
        assert!(traces.runs.borrow().is_empty());
        assert!(!console.contains("trace begin"));
        let _ = clock.now_ticks();
    }
}
