//! `barebench report --trace`: the per-command traces of a serial log (`trace=DEV[:N]`, the
//! kernel's defmt channel: `bench::trace`) decoded with `defmt-decoder` and the kernel ELF that
//! carries the format strings (docs/ecosystem.md §2.2), written as `trace-DEV-RUN.csv` (one row
//! per command, times in ns from the run's start) with charts: latency over time, a latency
//! histogram with fio's percentiles marked (bench's own histogram, so the values are the run
//! table's), and the gaps between completions; and the slowest commands listed.
#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use bench::histogram::{LatencyHistogram, FIO_DEFAULT_PERCENTILES};
use bench::trace::{parse_begin_marker, text, TraceStatus, WireRecord, TRACE_END_MARKER, WIRE_FIELDS};
use blockdev::IoErrorKind;
use defmt_decoder::{DecodeError, Table};

/// Why traces could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("cannot read the kernel ELF {path}: {message}")]
    Elf { path: PathBuf, message: String },
    #[error("{path} carries no defmt table (.defmt section): not a barebench kernel ELF")]
    NoTable { path: PathBuf },
    #[error(
        "the kernel ELF {path} does not match this log: {device} {run}, line {line} of its trace: {problem}; \
         pass --elf with the ELF (build/kernel-virt.elf or build/kernel8.elf) of the kernel that printed the log"
    )]
    Mismatch { path: PathBuf, device: String, run: String, line: usize, problem: String },
    #[error("{device} {run}: the trace has no end line (the log was cut short)")]
    Unterminated { device: String, run: String },
    #[error("{device} {run}: the header announces {announced} records, {decoded} decoded")]
    Incomplete { device: String, run: String, announced: u64, decoded: usize },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot draw {path}: {message}")]
    Draw { path: PathBuf, message: String },
}

/// One run's decoded trace.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodedTrace {
    pub device: String,
    pub run: String,
    pub ticks_per_second: u64,
    /// Commands that completed in the window after the ring was full.
    pub not_kept: u64,
    /// Commands in the order the kernel recorded them (completion order).
    pub records: Vec<WireRecord>,
}

/// One trace block of the log: the marker's names and its lines (with their line numbers).
struct Block<'a> {
    device: &'a str,
    run: &'a str,
    lines: Vec<(usize, &'a str)>,
}

/// The trace blocks of a log.
fn blocks(log: &str) -> Result<Vec<Block<'_>>, TraceError> {
    let mut blocks = Vec::new();
    let mut current: Option<Block> = None;
    for (number, line) in log.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if let Some((device, run)) = parse_begin_marker(line) {
            if let Some(open) = current.take() {
                return Err(TraceError::Unterminated { device: open.device.into(), run: open.run.into() });
            }
            current = Some(Block { device, run, lines: Vec::new() });
        } else if line == TRACE_END_MARKER {
            blocks.extend(current.take());
        } else if let Some(block) = current.as_mut() {
            block.lines.push((number + 1, line));
        }
    }
    match current {
        Some(open) => Err(TraceError::Unterminated { device: open.device.into(), run: open.run.into() }),
        None => Ok(blocks),
    }
}

/// What one frame said.
#[derive(Debug)]
enum FrameContent {
    Header { device: String, run: String, ticks_per_second: u64, records: u64, not_kept: u64 },
    Command(WireRecord),
}

/// Reads a decoded frame's message (`trace DEV RUN …` or `cmd …`).
fn frame_content(message: &str) -> Result<FrameContent, String> {
    let words: Vec<&str> = message.split_whitespace().collect();
    let numbers = |words: &[&str]| -> Result<Vec<u64>, String> {
        words.iter().map(|w| w.parse::<u64>().map_err(|_| format!("`{w}` is not a number"))).collect()
    };
    match words.as_slice() {
        ["trace", device, run, rest @ ..] if rest.len() == 4 => {
            let values = numbers(rest)?;
            Ok(FrameContent::Header {
                device: device.to_string(),
                run: run.to_string(),
                ticks_per_second: values[0],
                records: values[2],
                not_kept: values[3],
            })
        }
        ["cmd", rest @ ..] if rest.len() == WIRE_FIELDS => WireRecord::from_fields(&numbers(rest)?)
            .map(FrameContent::Command)
            .ok_or_else(|| String::from("a field out of its range")),
        _ => Err(format!("the frame decodes as `{message}`, which is no barebench trace frame")),
    }
}

/// Decodes every trace of `log` with the defmt table of the ELF at `elf_path`.
pub fn decode_traces(log: &str, elf_path: &Path) -> Result<Vec<DecodedTrace>, TraceError> {
    let elf = std::fs::read(elf_path)
        .map_err(|error| TraceError::Elf { path: elf_path.to_path_buf(), message: error.to_string() })?;
    let table = Table::parse(&elf)
        .map_err(|error| TraceError::Elf { path: elf_path.to_path_buf(), message: error.to_string() })?
        .ok_or_else(|| TraceError::NoTable { path: elf_path.to_path_buf() })?;
    blocks(log)?.iter().map(|block| decode_block(block, &table, elf_path)).collect()
}

fn decode_block(block: &Block<'_>, table: &Table, elf_path: &Path) -> Result<DecodedTrace, TraceError> {
    let mismatch = |line: usize, problem: String| TraceError::Mismatch {
        path: elf_path.to_path_buf(),
        device: block.device.into(),
        run: block.run.into(),
        line,
        problem,
    };
    let mut decoder = table.new_stream_decoder();
    let mut header = None;
    let mut records = Vec::new();
    for (position, &(line_number, line)) in block.lines.iter().enumerate() {
        let bytes = text::decode(line)
            .map_err(|e| mismatch(position + 1, format!("log line {line_number} is not base64 ({e:?})")))?;
        decoder.received(&bytes);
        let content = match decoder.decode() {
            Ok(frame) => frame_content(&frame.display_message().to_string()),
            Err(DecodeError::UnexpectedEof) => Err(String::from("an incomplete frame")),
            Err(DecodeError::Malformed) => Err(String::from("a frame its table cannot decode")),
        }
        .map_err(|problem| mismatch(position + 1, problem))?;
        match content {
            FrameContent::Header { device, run, ticks_per_second, records: announced, not_kept }
                if header.is_none() && device == block.device && run == block.run =>
            {
                header = Some((ticks_per_second, announced, not_kept))
            }
            FrameContent::Command(record) if header.is_some() => records.push(record),
            _ => return Err(mismatch(position + 1, String::from("frames out of order"))),
        }
    }
    let (ticks_per_second, announced, not_kept) =
        header.ok_or_else(|| mismatch(0, String::from("the trace has no header frame")))?;
    if announced != records.len() as u64 {
        return Err(TraceError::Incomplete {
            device: block.device.into(),
            run: block.run.into(),
            announced,
            decoded: records.len(),
        });
    }
    Ok(DecodedTrace {
        device: block.device.into(),
        run: block.run.into(),
        ticks_per_second,
        not_kept,
        records,
    })
}

/// One command with its times in ns from the run's start.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CommandRow {
    pub submit_ns: u64,
    pub doorbell_ns: u64,
    pub complete_ns: u64,
    /// Completion − submit (the run's `lat`).
    pub latency_ns: u64,
    pub record: WireRecord,
}

impl DecodedTrace {
    /// The commands in submit order, times in ns (`ticks × 10^9 / frequency`, truncating as the
    /// kernel does: exact at QEMU's 62.5 MHz).
    pub fn rows(&self) -> Vec<CommandRow> {
        let ns = |ticks: u64| blockdev::ticks_to_ns(ticks, self.ticks_per_second);
        let mut rows: Vec<CommandRow> = self
            .records
            .iter()
            .map(|record| CommandRow {
                submit_ns: ns(record.submitted_ticks),
                doorbell_ns: ns(record.kicked_ticks),
                complete_ns: ns(record.completed_ticks),
                latency_ns: ns(record.completed_ticks.saturating_sub(record.submitted_ticks)),
                record: *record,
            })
            .collect();
        rows.sort_by_key(|row| (row.submit_ns, row.complete_ns));
        rows
    }

    /// `trace-DEV-RUN`, the stem of its files.
    pub fn file_stem(&self) -> String {
        format!("trace-{}-{}", self.device, self.run)
    }
}

/// The CSV: one row per command in submit order.
pub fn csv(trace: &DecodedTrace) -> String {
    let mut text = String::from(
        "command,submit_ns,doorbell_ns,complete_ns,latency_ns,clat_ns,operation,lba,blocks,queue_id,command_id,sq_head,status,status_code\n",
    );
    for (index, row) in trace.rows().iter().enumerate() {
        let r = &row.record;
        let sq_head =
            if r.sq_head == bench::trace::NO_SQ_HEAD { String::new() } else { r.sq_head.to_string() };
        let _ = writeln!(
            text,
            "{index},{},{},{},{},{},{},{},{},{},{},{sq_head},{},{}",
            row.submit_ns,
            row.doorbell_ns,
            row.complete_ns,
            row.latency_ns,
            row.complete_ns.saturating_sub(row.doorbell_ns),
            if r.operation == 0 { "read" } else { "write" },
            r.lba,
            r.block_count,
            r.queue_id,
            r.command_id,
            status_name(r),
            r.status_code
        );
    }
    text
}

fn status_name(record: &WireRecord) -> &'static str {
    match record.to_record().map(|r| r.status) {
        Some(TraceStatus::Ok) => "ok",
        Some(TraceStatus::Failed { kind, .. }) => kind.name(),
        None => "unknown",
    }
}

/// fio's percentiles of the trace's latencies, from bench's histogram (as the run's table).
pub fn percentiles_ns(rows: &[CommandRow]) -> Vec<(f64, u64)> {
    let mut histogram = LatencyHistogram::new();
    let (mut smallest, mut largest) = (u64::MAX, 0);
    for row in rows.iter().filter(|row| row.record.status == 0) {
        histogram.record(row.latency_ns);
        (smallest, largest) = (smallest.min(row.latency_ns), largest.max(row.latency_ns));
    }
    let mut values = [0u64; FIO_DEFAULT_PERCENTILES.len()];
    histogram.percentiles_ns(&FIO_DEFAULT_PERCENTILES, (smallest, largest), &mut values);
    FIO_DEFAULT_PERCENTILES.iter().map(|&p| f64::from(p) / 1e6).zip(values).collect()
}

/// The mean latency of the successful commands in ns (the run table's `mean`).
pub fn mean_latency_ns(rows: &[CommandRow]) -> f64 {
    let ok: Vec<u64> = rows.iter().filter(|row| row.record.status == 0).map(|row| row.latency_ns).collect();
    if ok.is_empty() {
        return 0.0;
    }
    ok.iter().map(|&l| l as f64).sum::<f64>() / ok.len() as f64
}

/// The `count` slowest commands as Markdown list lines.
pub fn slowest(trace: &DecodedTrace, count: usize) -> Vec<String> {
    let mut rows = trace.rows();
    rows.sort_by_key(|row| std::cmp::Reverse(row.latency_ns));
    rows.iter()
        .take(count)
        .map(|row| {
            format!(
                "- {:.1} µs: LBA {} ({} blocks), submitted at {:.3} ms, queue {} command {}, {}",
                row.latency_ns as f64 / 1e3,
                row.record.lba,
                row.record.block_count,
                row.submit_ns as f64 / 1e6,
                row.record.queue_id,
                row.record.command_id,
                status_name(&row.record)
            )
        })
        .collect()
}

/// The kernel ELFs to try when none is named: the ones `make` leaves in `build/`.
pub fn default_elves(build_dir: &Path) -> Vec<PathBuf> {
    ["kernel-virt.elf", "kernel8.elf"]
        .iter()
        .map(|name| build_dir.join(name))
        .filter(|p| p.exists())
        .collect()
}

/// Decodes with the first of `elves` that matches the log; when none does, the first error.
pub fn decode_with_any(log: &str, elves: &[PathBuf]) -> Result<(PathBuf, Vec<DecodedTrace>), TraceError> {
    let mut first_error = None;
    for elf in elves {
        match decode_traces(log, elf) {
            Ok(traces) => return Ok((elf.clone(), traces)),
            Err(error) => {
                first_error.get_or_insert(error);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| TraceError::Elf {
        path: PathBuf::from("build/kernel-virt.elf"),
        message: String::from("no kernel ELF in build/ (run `make`, or pass --elf)"),
    }))
}

/// The error kind a status byte names (for tests and messages).
pub fn status_kind(status: u8) -> Option<IoErrorKind> {
    IoErrorKind::ALL.get(usize::from(status).checked_sub(1)?).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(submitted: u64, completed: u64, lba: u64) -> WireRecord {
        WireRecord::from_fields(&[submitted, submitted + 1, completed, lba, 8, 1, 3, 5, 0, 0, 0]).unwrap()
    }

    fn trace() -> DecodedTrace {
        DecodedTrace {
            device: "nvme0".into(),
            run: "job1-run1".into(),
            ticks_per_second: 62_500_000,
            not_kept: 0,
            // Completion order: the second submitted finishes first.
            records: vec![record(20, 100, 8), record(10, 300, 0), record(30, 1000, 16)],
        }
    }

    #[test]
    fn rows_are_in_submit_order_with_times_in_ns() {
        let rows = trace().rows();
        let submits: Vec<u64> = rows.iter().map(|r| r.submit_ns).collect();
        assert_eq!(submits, [160, 320, 480]);
        assert_eq!(rows[0].latency_ns, 290 * 16);
        assert!(rows.iter().all(|r| r.latency_ns == r.complete_ns - r.submit_ns));
        let csv = csv(&trace());
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[1], "0,160,176,4800,4640,4624,read,0,8,1,3,5,ok,0");
    }

    #[test]
    fn slowest_commands_come_first_with_lba_and_time() {
        let lines = slowest(&trace(), 2);
        assert_eq!(lines[0], "- 15.5 µs: LBA 16 (8 blocks), submitted at 0.000 ms, queue 1 command 3, ok");
        assert!(lines[1].contains("LBA 0 "), "{lines:?}");
    }

    #[test]
    fn percentiles_are_benchs_and_frames_are_checked() {
        let rows = trace().rows();
        let percentiles = percentiles_ns(&rows);
        assert_eq!(percentiles.len(), 17);
        assert_eq!(percentiles[6].0, 50.0);
        assert!(percentiles.iter().all(|(_, ns)| (1280..=15_520).contains(ns)), "{percentiles:?}");
        assert!(matches!(
            frame_content("trace nvme0 job1-run1 62500000 5 3 0"),
            Ok(FrameContent::Header { records: 3, .. })
        ));
        assert!(frame_content("cmd 1 2 3").is_err());
        assert!(frame_content("hello 1 2").unwrap_err().contains("no barebench trace frame"));
        assert!(frame_content("cmd 1 2 3 4 5 70000 7 8 0 0 0").unwrap_err().contains("out of its range"));
    }

    #[test]
    fn a_log_cut_inside_a_trace_is_named() {
        let log = "x\n==== barebench trace begin sd0 job1-run1 ====\nAAAA\n";
        assert!(matches!(blocks(log), Err(TraceError::Unterminated { .. })));
        let log = "==== barebench trace begin sd0 job1-run1 ====\nAAAA\n==== barebench trace end ====\n";
        let found = blocks(log).unwrap();
        assert_eq!((found[0].device, found[0].run, found[0].lines.len()), ("sd0", "job1-run1", 1));
        assert_eq!(status_kind(3), Some(IoErrorKind::DeviceStatus));
        assert_eq!(status_kind(0), None);
    }
}
