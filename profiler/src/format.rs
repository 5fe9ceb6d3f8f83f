//! The file the plugin writes and `barebench qemu --profile` reads: one record per run of the
//! benchmark (one `bench::cpu_cost::run_metered`), in the order the runs ended, as text lines:
//!
//! ```text
//! barebench-profile 1
//! run IOS LAPS METER_INSTRUCTIONS
//! node ID PARENT FUNCTION_HEX        (call-tree places first seen in this run)
//! slot NODE BLOCK_HEX LENGTH DRIVER BOOKKEEPING RECORDING
//! end
//! ```
//!
//! A node is a function entered from its parent node (0 is the root); a slot is a translation
//! block (its first address and its length in instructions) run in a node, with the instructions
//! each reported account of the CPU meter got from it in that run
//! (`accounting::REPORTED_ACCOUNTS`).
#![forbid(unsafe_code)]

use std::fmt::Write as _;

/// The first line of a profile file.
pub const HEADER: &str = "barebench-profile 1";

/// A call-tree place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeRecord {
    pub id: u32,
    pub parent: u32,
    /// The address the call went to.
    pub function: u64,
}

/// One block's instructions in one call-tree place, per reported account.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotRecord {
    pub node: u32,
    pub block_start: u64,
    /// The block's instructions (4 bytes each in A64).
    pub block_instructions: u32,
    /// Driver, bookkeeping, recording.
    pub counts: [i64; 3],
}

/// One run's counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunRecord {
    /// Completions the meter divided by.
    pub ios: u64,
    /// Laps of the meter seen.
    pub laps: u64,
    /// Instructions inside the laps (the meter's own, charged to nobody).
    pub meter_instructions: u64,
    pub nodes: Vec<NodeRecord>,
    pub slots: Vec<SlotRecord>,
}

impl RunRecord {
    /// The record as lines of the file.
    pub fn to_text(&self) -> String {
        let mut text = format!("run {} {} {}\n", self.ios, self.laps, self.meter_instructions);
        for node in &self.nodes {
            let _ = writeln!(text, "node {} {} {:x}", node.id, node.parent, node.function);
        }
        for slot in &self.slots {
            let [driver, bookkeeping, recording] = slot.counts;
            let _ = writeln!(
                text,
                "slot {} {:x} {} {driver} {bookkeeping} {recording}",
                slot.node, slot.block_start, slot.block_instructions
            );
        }
        text.push_str("end\n");
        text
    }
}

/// What is wrong with a profile file.
#[derive(Debug, PartialEq, Eq)]
pub struct FormatError {
    pub line: usize,
    pub message: String,
}

impl std::fmt::Display for FormatError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.message)
    }
}

impl std::error::Error for FormatError {}

/// The runs of a profile file, in order. A run the file ends inside of (QEMU stopped mid-run) is
/// left out.
pub fn parse(text: &str) -> Result<Vec<RunRecord>, FormatError> {
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, HEADER)) => {}
        _ => return Err(FormatError { line: 1, message: format!("not a profile (expected `{HEADER}`)") }),
    }
    let mut runs = Vec::new();
    let mut current: Option<RunRecord> = None;
    for (index, line) in lines {
        let error = |message: &str| FormatError { line: index + 1, message: format!("{message}: {line:?}") };
        let fields: Vec<&str> = line.split_whitespace().collect();
        let decimal = |at: usize| fields.get(at).and_then(|field| field.parse::<i64>().ok());
        let hex = |at: usize| fields.get(at).and_then(|field| u64::from_str_radix(field, 16).ok());
        match (fields.first().copied(), current.as_mut()) {
            (Some("run"), None) if fields.len() == 4 => {
                let numbers = (decimal(1), decimal(2), decimal(3));
                let (Some(ios), Some(laps), Some(meter)) = numbers else { return Err(error("bad run line")) };
                current = Some(RunRecord {
                    ios: ios as u64,
                    laps: laps as u64,
                    meter_instructions: meter as u64,
                    ..RunRecord::default()
                });
            }
            (Some("node"), Some(run)) if fields.len() == 4 => {
                let (Some(id), Some(parent), Some(function)) = (decimal(1), decimal(2), hex(3)) else {
                    return Err(error("bad node line"));
                };
                run.nodes.push(NodeRecord { id: id as u32, parent: parent as u32, function });
            }
            (Some("slot"), Some(run)) if fields.len() == 7 => {
                let (Some(node), Some(block_start), Some(length)) = (decimal(1), hex(2), decimal(3)) else {
                    return Err(error("bad slot line"));
                };
                let (Some(driver), Some(bookkeeping), Some(recording)) = (decimal(4), decimal(5), decimal(6))
                else {
                    return Err(error("bad slot line"));
                };
                run.slots.push(SlotRecord {
                    node: node as u32,
                    block_start,
                    block_instructions: length as u32,
                    counts: [driver, bookkeeping, recording],
                });
            }
            (Some("end"), Some(_)) => runs.extend(current.take()),
            (None, _) => {}
            _ => return Err(error("unexpected line")),
        }
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_reads_back_as_written() {
        let run = RunRecord {
            ios: 12,
            laps: 80,
            meter_instructions: 1234,
            nodes: vec![NodeRecord { id: 1, parent: 0, function: 0x4008_1000 }],
            slots: vec![SlotRecord {
                node: 1,
                block_start: 0x4008_1010,
                block_instructions: 5,
                counts: [40, -2, 0],
            }],
        };
        let text = format!("{HEADER}\n{}{}", run.to_text(), "run 3 1 1\nnode 2 1 ff\n");
        assert_eq!(parse(&text), Ok(vec![run]), "the unfinished second run is left out");
    }

    #[test]
    fn other_files_are_refused_with_the_line() {
        assert_eq!(parse("hello").unwrap_err().line, 1);
        let error = parse(&format!("{HEADER}\nrun 1 1 1\nslot x\n")).unwrap_err();
        assert_eq!(error.line, 3);
        assert!(error.to_string().contains("unexpected line"), "{error}");
    }
}
