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
    use alloc::string::ToString;
    use proptest::prelude::*;

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
}
