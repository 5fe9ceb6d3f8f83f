//! `check=N`: every N-th successful read of a run is compared with the test pattern
//! (`blockdev::pattern`, each 512-byte sector names itself), after its completion has been
//! time-stamped and recorded, so a cache, DMA-window or data-path mistake on a board shows up as
//! counted mismatches instead of figures that look fine (docs/checks.md).
//!
//! The comparison runs in the loop right after the poll that found the read, before the next
//! submission; its time is measured with the run's clock and kept apart from every I/O's
//! latency and CPU cost. At queue depth 1 nothing else is in flight meanwhile, so no other I/O
//! is touched; deeper, an I/O that completes during a check is seen when the check ends.

use alloc::vec::Vec;

use blockdev::DmaBuffer;

use crate::buffers::BufferMemory;

/// Mismatches kept with their place per run (the console shows these; the count is complete).
pub const MAX_REPORTED_MISMATCHES: usize = 4;

/// A checked read that differs from the pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "read at LBA {lba} ({block_count} blocks) differs from the test pattern at byte {byte_offset} of the read \
     (device byte {device_byte})"
)]
pub struct Mismatch {
    /// The read's first logical block and length.
    pub lba: u64,
    pub block_count: u32,
    /// The first differing byte, counted from the read's first byte.
    pub byte_offset: u64,
    /// The same byte counted from the start of the device.
    pub device_byte: u64,
}

/// What the checks of one run found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckSummary {
    /// One successful read in `every` was checked.
    pub every: u32,
    pub checked: u64,
    pub checked_bytes: u64,
    pub mismatches: u64,
    /// The first [`MAX_REPORTED_MISMATCHES`] mismatches, in the order found.
    pub first: Vec<Mismatch>,
    /// Time spent comparing, over the run.
    pub check_ns: u64,
    /// Why the run could not check its reads, when it could not.
    pub skipped: Option<&'static str>,
}

impl CheckSummary {
    /// The mean time of one check, ns.
    pub fn ns_per_check(&self) -> u64 {
        self.check_ns.checked_div(self.checked).unwrap_or(0)
    }
}

/// Counts successful reads and compares every `every`-th with the pattern.
pub(crate) struct ReadChecker<'m> {
    memory: &'m dyn BufferMemory,
    logical_block_bytes: u64,
    until_next: u32,
    pub(crate) summary: CheckSummary,
}

impl<'m> ReadChecker<'m> {
    pub(crate) fn new(memory: &'m dyn BufferMemory, every: u32, logical_block_bytes: u32) -> Self {
        ReadChecker {
            memory,
            logical_block_bytes: u64::from(logical_block_bytes),
            until_next: every.max(1),
            summary: CheckSummary { every: every.max(1), ..CheckSummary::default() },
        }
    }

    /// Counts one successful read; true when this one is to be checked.
    pub(crate) fn is_due(&mut self) -> bool {
        self.until_next -= 1;
        if self.until_next > 0 {
            return false;
        }
        self.until_next = self.summary.every;
        true
    }

    /// Compares the read of `block_count` blocks at `lba` in `buffer` with the pattern (the
    /// caller adds the time it took to `summary.check_ns`).
    pub(crate) fn check(&mut self, lba: u64, block_count: u32, buffer: &DmaBuffer) {
        let device_offset = lba * self.logical_block_bytes;
        let length = (u64::from(block_count) * self.logical_block_bytes) as usize;
        let mut first_difference = None;
        self.memory.with_bytes(buffer, &mut |bytes| {
            let data = &bytes[..length.min(bytes.len())];
            first_difference = blockdev::pattern::first_mismatch(device_offset, data);
        });
        self.summary.checked += 1;
        self.summary.checked_bytes += length as u64;
        if let Some(offset) = first_difference {
            self.summary.mismatches += 1;
            if self.summary.first.len() < MAX_REPORTED_MISMATCHES {
                let byte_offset = offset as u64;
                let device_byte = device_offset + byte_offset;
                self.summary.first.push(Mismatch { lba, block_count, byte_offset, device_byte });
            }
        }
    }
}
