//! Pattern regions (docs/ecosystem.md §5): a partition whose content the kernel can compute, so that `check=` can
//! verify the benchmark's reads on the board itself. A region is announced by a 512-byte marker
//! at the first byte of a primary MBR partition (the classic MBR: 16-byte entries at byte 446,
//! signature 0x55 0xAA at byte 510); the partition type the tool gives it (0x7F, "reserved for
//! individual or experimental use") is never trusted alone.
//!
//! The marker is [`crate::marker`]'s, of kind `BAREBENCHPATTERN`, with no region id (the
//! scan's errors are the scratch scan's [`ScanError`]). Every other sector of the region holds
//! [`crate::pattern`] for its own sector number counted from the start of the device, so a read
//! anywhere in it is checked with [`crate::pattern::first_mismatch`]. The benchmark reads from
//! the region's second MiB on ([`PatternRegion::readable`]), keeping the marker out of the reads
//! and 1 MiB alignment for every block size.
//!
//! Shared by the kernel (the scan before the first run) and the host tool
//! (`barebench image --pattern`, `barebench qemu --sd SIZE:pattern-partition`).

use core::fmt;

use crate::marker::{Marker, MarkerError, MarkerKind, RESERVED_BYTES};
/// The device the scan reads, one logical block at a time: the same reader as the scratch scan's.
pub use crate::scratch::BlockReader;
/// Why a partition with a marker holds no usable region: the scratch scan's refusals (a pattern
/// partition is never refused for its type alone, so `TypeWithoutMarker` does not come from here).
pub use crate::scratch::Refusal;
use crate::scratch::{block_buffer, length_refusal, mbr_entries, read, ScanError};

/// MBR partition type the tool gives pattern partitions (0x7F: reserved for individual or
/// experimental use). The type alone never makes a region.
pub const MBR_TYPE_PATTERN: u8 = 0x7F;

/// A valid pattern region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PatternRegion {
    /// 1-based MBR primary partition number, as Linux counts.
    pub partition_number: u32,
    /// The marker's byte offset on the device (the partition's first byte).
    pub start_bytes: u64,
    pub length_bytes: u64,
}

impl PatternRegion {
    /// The bytes the benchmark reads: the region without its first MiB, as (offset, length).
    pub fn readable(&self) -> (u64, u64) {
        (self.start_bytes + RESERVED_BYTES, self.length_bytes - RESERVED_BYTES)
    }
}

impl fmt::Display for PatternRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (offset, length) = self.readable();
        write!(
            f,
            "pattern region in partition {}: {length} bytes from byte {offset} (marker at byte {})",
            self.partition_number, self.start_bytes
        )
    }
}

/// What the scan found: the first valid region, or the reason each marked partition was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finding {
    Region(PatternRegion),
    Refused { partition_number: u32, reason: Refusal },
}

/// Reads the MBR, then the first block of each primary partition, and reports every marked
/// partition to `found` (partitions without the magic are not reported). `buffer` must hold
/// one block.
pub fn scan<R: BlockReader>(
    reader: &mut R,
    buffer: &mut [u8],
    found: &mut dyn FnMut(Finding),
) -> Result<(), ScanError<R::Error>> {
    let buffer = block_buffer(reader, buffer)?;
    let Some(entries) = mbr_entries(reader, buffer)? else {
        return Ok(());
    };
    for (index, entry) in entries.iter().enumerate() {
        if entry.partition_type == 0 || entry.block_count == 0 {
            continue;
        }
        let number = index as u32 + 1;
        if let Some(finding) = check_partition(reader, buffer, number, entry.first_lba, entry.block_count)? {
            found(finding);
        }
    }
    Ok(())
}

/// The finding for one partition, `None` when its first block has no marker magic.
fn check_partition<R: BlockReader>(
    reader: &mut R,
    buffer: &mut [u8],
    partition_number: u32,
    first_lba: u64,
    block_count: u64,
) -> Result<Option<Finding>, ScanError<R::Error>> {
    let refused = |reason| Ok(Some(Finding::Refused { partition_number, reason }));
    let device_blocks = reader.block_count();
    let end_lba = first_lba.saturating_add(block_count);
    if end_lba > device_blocks {
        return refused(Refusal::PartitionPastDevice { end_lba, device_blocks });
    }
    read(reader, first_lba, buffer)?;
    let marker = match Marker::parse(MarkerKind::Pattern, buffer) {
        Ok(marker) => marker,
        Err(MarkerError::NoMagic { .. }) => return Ok(None),
        Err(error) => return refused(Refusal::Marker(error)),
    };
    if let Some(reason) = length_refusal(marker.length_bytes, block_count, reader.block_bytes()) {
        return refused(reason);
    }
    let start_bytes = first_lba * u64::from(reader.block_bytes());
    Ok(Some(Finding::Region(PatternRegion {
        partition_number,
        start_bytes,
        length_bytes: marker.length_bytes,
    })))
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec;
    use std::vec::Vec;

    use super::*;

    /// A disk image in memory, 512-byte blocks.
    struct MemoryDisk {
        bytes: Vec<u8>,
    }

    impl BlockReader for MemoryDisk {
        type Error = &'static str;
        fn block_bytes(&self) -> u32 {
            512
        }
        fn block_count(&self) -> u64 {
            self.bytes.len() as u64 / 512
        }
        fn read_block(&mut self, lba: u64, out: &mut [u8]) -> Result<(), &'static str> {
            let start = lba as usize * 512;
            out.copy_from_slice(self.bytes.get(start..start + 512).ok_or("past the end")?);
            Ok(())
        }
    }

    fn disk_with_partition(
        partition_type: u8,
        first_lba: u32,
        sectors: u32,
        marker: Option<[u8; 512]>,
    ) -> MemoryDisk {
        let mut bytes = vec![0u8; 8 << 20];
        bytes[510] = 0x55;
        bytes[511] = 0xAA;
        let entry = &mut bytes[446 + 16..446 + 32];
        entry[4] = partition_type;
        entry[8..12].copy_from_slice(&first_lba.to_le_bytes());
        entry[12..16].copy_from_slice(&sectors.to_le_bytes());
        if let Some(marker) = marker {
            let start = first_lba as usize * 512;
            bytes[start..start + 512].copy_from_slice(&marker);
        }
        MemoryDisk { bytes }
    }

    fn findings(disk: &mut MemoryDisk) -> Vec<Finding> {
        let mut found = Vec::new();
        scan(disk, &mut [0u8; 512], &mut |finding| found.push(finding)).unwrap();
        found
    }

    #[test]
    fn a_marked_partition_is_a_region_whatever_its_type() {
        let marker = Marker::pattern(4 << 20).encode();
        assert_eq!(Marker::parse(MarkerKind::Pattern, &marker), Ok(Marker::pattern(4 << 20)));
        for partition_type in [MBR_TYPE_PATTERN, 0x83] {
            let mut disk = disk_with_partition(partition_type, 4096, 8192, Some(marker));
            let region =
                PatternRegion { partition_number: 2, start_bytes: 4096 * 512, length_bytes: 4 << 20 };
            assert_eq!(findings(&mut disk), vec![Finding::Region(region)]);
            assert_eq!(region.readable(), (4096 * 512 + (1 << 20), 3 << 20));
        }
    }

    #[test]
    fn the_type_alone_and_unmarked_disks_make_no_region() {
        assert!(findings(&mut disk_with_partition(MBR_TYPE_PATTERN, 4096, 8192, None)).is_empty());
        let mut no_mbr = disk_with_partition(MBR_TYPE_PATTERN, 4096, 8192, None);
        no_mbr.bytes[510] = 0;
        assert!(findings(&mut no_mbr).is_empty());
    }

    #[test]
    fn bad_markers_and_impossible_lengths_are_refused_with_the_reason() {
        let refusal = |disk: &mut MemoryDisk| match findings(disk).as_slice() {
            [Finding::Refused { partition_number: 2, reason }] => *reason,
            other => panic!("{other:?}"),
        };
        let mut corrupt = Marker::pattern(4 << 20).encode();
        corrupt[24] ^= 1;
        assert!(matches!(
            refusal(&mut disk_with_partition(0x7F, 4096, 8192, Some(corrupt))),
            Refusal::Marker(MarkerError::BadCrc { .. })
        ));
        let long = Marker::pattern(5 << 20).encode();
        assert_eq!(
            refusal(&mut disk_with_partition(0x7F, 4096, 8192, Some(long))),
            Refusal::LengthPastPartition { length_bytes: 5 << 20, partition_bytes: 4 << 20 }
        );
        let short = Marker::pattern(1 << 20).encode();
        assert_eq!(
            refusal(&mut disk_with_partition(0x7F, 4096, 8192, Some(short))),
            Refusal::TooSmall { length_bytes: 1 << 20, minimum_bytes: (1 << 20) + 512 }
        );
        assert_eq!(
            refusal(&mut disk_with_partition(0x7F, 12288, 8192, Some(long))),
            Refusal::PartitionPastDevice { end_lba: 20480, device_blocks: 16384 }
        );
        let mut version = Marker::pattern(4 << 20).encode();
        version[16] = 2;
        assert_eq!(
            Marker::parse(MarkerKind::Pattern, &version),
            Err(MarkerError::UnknownVersion { version: 2 })
        );
        let mut reserved = Marker::pattern(4 << 20).encode();
        reserved[100] = 1;
        assert_eq!(
            Marker::parse(MarkerKind::Pattern, &reserved),
            Err(MarkerError::ReservedNotZero { offset: 100 })
        );
    }
}
