//! The data write and mixed jobs put on a device, and how it is checked (docs/writes.md §4,
//! docs/measurement.md §15).
//!
//! Every logical block written carries a 32-byte header: bytes 0..8 its LBA, 8..16 the run id,
//! 16..24 the write's sequence number in the run, 24..28 the CRC-32 (zlib's) of the whole block
//! with these four bytes taken as zero, 28..32 zero. The rest is pseudo-random (xorshift64*,
//! seeded from LBA, run id and sequence number), so it does not compress, and it can be
//! regenerated to check a read byte for byte.
//!
//! [`SlotTable`] remembers, per block slot of the run's region, the sequence number last
//! written there, so that reads of blocks written earlier in a mixed run and the read-back
//! after the run know exactly what to expect. The runner never has two requests in flight on
//! one slot, so what a read returns is never ambiguous.

use alloc::vec::Vec;

use blockdev::crc32::Crc32;

/// Bytes of the header at the start of every logical block written.
pub const HEADER_BYTES: usize = 32;
/// Most slots a write run tracks (4 bytes each: 4 MiB of table); larger regions are shrunk.
pub const MAX_TRACKED_SLOTS: u64 = 1 << 20;
/// At most this many mismatching LBAs are kept for the report (the count is exact).
pub const MAX_REPORTED_MISMATCHES: usize = 8;

const IN_FLIGHT: u32 = 1 << 31;
/// A slot whose write failed: its content is unknown, so it is not checked.
const UNKNOWN: u32 = IN_FLIGHT - 1;

/// A run's identity in the data: the job's seed, the run number and the device index mixed.
pub fn run_id(seed: u64, run: u32, device_index: usize) -> u64 {
    splitmix(seed ^ (u64::from(run) << 32) ^ device_index as u64)
}

fn splitmix(value: u64) -> u64 {
    let mut z = value.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fills `out` (whole logical blocks starting at `first_lba`) with what write `sequence` of run
/// `run_id` puts there.
pub fn fill_blocks(out: &mut [u8], first_lba: u64, logical_block_bytes: usize, run_id: u64, sequence: u32) {
    for (index, block) in out.chunks_exact_mut(logical_block_bytes).enumerate() {
        fill_block(block, first_lba + index as u64, run_id, sequence);
    }
}

fn fill_block(block: &mut [u8], lba: u64, run_id: u64, sequence: u32) {
    block[..8].copy_from_slice(&lba.to_le_bytes());
    block[8..16].copy_from_slice(&run_id.to_le_bytes());
    block[16..24].copy_from_slice(&u64::from(sequence).to_le_bytes());
    block[24..HEADER_BYTES].fill(0);
    let mut state =
        splitmix(lba ^ run_id.rotate_left(17) ^ u64::from(sequence).wrapping_mul(0xA24B_AED4_963E_E407));
    state |= 1;
    for word in block[HEADER_BYTES..].chunks_mut(8) {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        let bytes = state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        word.copy_from_slice(&bytes[..word.len()]);
    }
    let crc = block_crc(block);
    block[24..28].copy_from_slice(&crc.to_le_bytes());
}

/// The CRC-32 of a block with its CRC field (bytes 24..28) taken as zero.
fn block_crc(block: &[u8]) -> u32 {
    let mut crc = Crc32::new();
    crc.update(&block[..24]);
    crc.update(&[0; 4]);
    crc.update(&block[28..]);
    crc.finish()
}

/// The first LBA of `data` (whole logical blocks from `first_lba`) that is not exactly what
/// write `sequence` of run `run_id` put there.
pub fn first_mismatch(
    data: &[u8],
    first_lba: u64,
    logical_block_bytes: usize,
    run_id: u64,
    sequence: u32,
    expected: &mut [u8],
) -> Option<u64> {
    let expected = &mut expected[..logical_block_bytes];
    for (index, block) in data.chunks_exact(logical_block_bytes).enumerate() {
        let lba = first_lba + index as u64;
        fill_block(expected, lba, run_id, sequence);
        if block != &expected[..] {
            return Some(lba);
        }
    }
    None
}

/// What each block slot of a write run holds.
pub struct SlotTable {
    slots: Vec<u32>,
}

/// What a read of a slot should find.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Expected {
    /// Not written in this run (or its write failed): not checked.
    #[default]
    Unknown,
    Written {
        sequence: u32,
    },
}

impl SlotTable {
    pub fn new(slot_count: u64) -> SlotTable {
        SlotTable { slots: alloc::vec![0; slot_count as usize] }
    }

    /// Slots tracked.
    pub fn len(&self) -> u64 {
        self.slots.len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    pub fn clear(&mut self) {
        self.slots.fill(0);
    }

    /// Whether a request to this slot is in flight (the runner then picks another slot).
    pub fn is_busy(&self, slot: u64) -> bool {
        self.slots[slot as usize] & IN_FLIGHT != 0
    }

    /// A request to `slot` was submitted; returns what a read should find.
    pub fn start(&mut self, slot: u64) -> Expected {
        let value = &mut self.slots[slot as usize];
        *value |= IN_FLIGHT;
        match *value & !IN_FLIGHT {
            0 | UNKNOWN => Expected::Unknown,
            sequence => Expected::Written { sequence },
        }
    }

    /// The request to `slot` finished; a write's `sequence` is now there if it succeeded.
    pub fn finish(&mut self, slot: u64, write: Option<(u32, bool)>) {
        let value = &mut self.slots[slot as usize];
        *value &= !IN_FLIGHT;
        match write {
            Some((sequence, true)) => *value = sequence,
            Some((_, false)) => *value = UNKNOWN,
            None => {}
        }
    }

    /// Slots written in this run with the sequence number there, in slot order.
    pub fn written(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, &value)| value != 0 && value != UNKNOWN && value & IN_FLIGHT == 0)
            .map(|(slot, &value)| (slot as u64, value))
    }

    /// The first slot from `from` on that holds a completed write, with its sequence number.
    pub fn next_written(&self, from: u64) -> Option<(u64, u32)> {
        let start = usize::try_from(from).ok()?;
        self.slots.get(start..)?.iter().enumerate().find_map(|(offset, &value)| {
            let written = value != 0 && value != UNKNOWN && value & IN_FLIGHT == 0;
            written.then_some(((start + offset) as u64, value))
        })
    }

    /// Slots whose write failed (their content is unknown).
    pub fn failed(&self) -> u64 {
        self.slots.iter().filter(|&&value| value & !IN_FLIGHT == UNKNOWN).count() as u64
    }
}

/// What the checks of a run's written data found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VerifyOutcome {
    /// Blocks (of the job's block size) read and compared: in mixed runs while measuring, and
    /// after the run.
    pub blocks_checked: u64,
    /// Blocks that differed, and the first LBAs where they did.
    pub mismatches: u64,
    pub mismatch_lbas: Vec<u64>,
    /// Read-back requests that failed or could not be made.
    pub read_errors: u64,
    /// Slots whose write failed, not checked.
    pub unknown_blocks: u64,
}

impl VerifyOutcome {
    pub fn record_mismatch(&mut self, lba: u64) {
        self.mismatches += 1;
        if self.mismatch_lbas.len() < MAX_REPORTED_MISMATCHES {
            self.mismatch_lbas.push(lba);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_carry_their_header_and_check_byte_for_byte() {
        let mut data = alloc::vec![0u8; 4096];
        fill_blocks(&mut data, 100, 512, 0xABCD, 7);
        for (index, block) in data.chunks(512).enumerate() {
            assert_eq!(u64::from_le_bytes(block[..8].try_into().unwrap()), 100 + index as u64);
            assert_eq!(u64::from_le_bytes(block[8..16].try_into().unwrap()), 0xABCD);
            assert_eq!(u64::from_le_bytes(block[16..24].try_into().unwrap()), 7);
            let crc = u32::from_le_bytes(block[24..28].try_into().unwrap());
            assert_eq!(crc, block_crc(block));
            assert_eq!(block[28..32], [0; 4]);
        }
        assert_ne!(data[32..512], data[512 + 32..1024], "each block's payload differs");
        let mut scratch = [0u8; 512];
        assert_eq!(first_mismatch(&data, 100, 512, 0xABCD, 7, &mut scratch), None);
        assert_eq!(first_mismatch(&data, 100, 512, 0xABCD, 8, &mut scratch), Some(100));
        assert_eq!(first_mismatch(&data, 100, 512, 0xABCE, 7, &mut scratch), Some(100));
        data[3 * 512 + 300] ^= 1;
        assert_eq!(first_mismatch(&data, 100, 512, 0xABCD, 7, &mut scratch), Some(103));
    }

    #[test]
    fn the_payload_does_not_compress() {
        // Every byte value appears, with no long runs: a crude but telling check.
        let mut data = alloc::vec![0u8; 65536];
        fill_blocks(&mut data, 0, 4096, 1, 1);
        let mut seen = [0u32; 256];
        for block in data.chunks(4096) {
            for &byte in &block[HEADER_BYTES..] {
                seen[byte as usize] += 1;
            }
        }
        assert!(seen.iter().all(|&count| (150..370).contains(&count)), "{seen:?}");
    }

    #[test]
    fn slots_remember_the_last_completed_write() {
        let mut table = SlotTable::new(4);
        assert_eq!(table.start(1), Expected::Unknown);
        assert!(table.is_busy(1));
        table.finish(1, Some((5, true)));
        assert!(!table.is_busy(1));
        assert_eq!(table.start(1), Expected::Written { sequence: 5 });
        table.finish(1, None);
        table.start(2);
        table.finish(2, Some((6, false)));
        assert_eq!(table.start(2), Expected::Unknown);
        table.finish(2, None);
        assert_eq!(table.written().collect::<Vec<_>>(), alloc::vec![(1, 5)]);
        assert_eq!(table.next_written(0), Some((1, 5)));
        assert_eq!(table.next_written(2), None);
        assert_eq!(table.next_written(99), None);
        assert_eq!(table.failed(), 1);
        table.clear();
        assert_eq!(table.written().count(), 0);
    }

    #[test]
    fn run_ids_differ_by_run_and_device() {
        assert_ne!(run_id(1, 1, 0), run_id(1, 2, 0));
        assert_ne!(run_id(1, 1, 0), run_id(1, 1, 1));
        assert_eq!(run_id(1, 1, 0), run_id(1, 1, 0));
    }
}
