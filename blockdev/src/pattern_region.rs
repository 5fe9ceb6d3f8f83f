//! Pattern regions (docs/ecosystem.md §5): a partition whose content the kernel can compute, so that `check=` can
//! verify the benchmark's reads on the board itself. A region is announced by a 512-byte marker
//! at the first byte of a primary MBR partition (the classic MBR: 16-byte entries at byte 446,
//! signature 0x55 0xAA at byte 510); the partition type the tool gives it (0x7F, "reserved for
//! individual or experimental use") is never trusted alone.
//!
//! Marker layout (little-endian), shaped like the scratch-region marker: bytes 0..16 ASCII
//! `BAREBENCHPATTERN`; 16..20 format version (1); 20..24 zero; 24..32 region length in bytes
//! counted from the marker's first byte, inside the partition; 32..40 zero; 40..44 CRC-32
//! (zlib's) of bytes 0..40; 44..512 zero. Every other sector of the region holds
//! [`crate::pattern`] for its own sector number counted from the start of the device, so a read
//! anywhere in it is checked with [`crate::pattern::first_mismatch`]. The benchmark reads from
//! the region's second MiB on ([`PatternRegion::readable`]), keeping the marker out of the reads
//! and 1 MiB alignment for every block size.
//!
//! Shared by the kernel (the scan before the first run) and the host tool
//! (`barebench image --pattern`, `barebench qemu --sd SIZE:pattern-partition`).

use core::fmt;

use crate::crc32::crc32;
/// The device the scan reads, one logical block at a time: the same reader as the scratch scan's.
pub use crate::scratch::BlockReader;
use crate::scratch::{le_u32, le_u64};

/// The marker's first 16 bytes.
pub const MARKER_MAGIC: [u8; 16] = *b"BAREBENCHPATTERN";
/// The only marker format this code knows.
pub const MARKER_VERSION: u32 = 1;
/// Size of the marker (at the start of the partition's first logical block).
pub const MARKER_BYTES: usize = 512;
/// The start of every region that the benchmark does not read (the marker is in it).
pub const RESERVED_BYTES: u64 = 1 << 20;
/// MBR partition type the tool gives pattern partitions (0x7F: reserved for individual or
/// experimental use). The type alone never makes a region.
pub const MBR_TYPE_PATTERN: u8 = 0x7F;

const CRC_COVERED_BYTES: usize = 40;
const MBR_ENTRIES_OFFSET: usize = 446;
const MBR_ENTRY_BYTES: usize = 16;
const MBR_SIGNATURE_OFFSET: usize = 510;

/// The contents of a valid marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Marker {
    /// Bytes of the region, counted from the marker's first byte.
    pub length_bytes: u64,
}

/// Why 512 bytes are not a usable marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerError {
    /// The first 16 bytes are not `BAREBENCHPATTERN`: no marker at all.
    NoMagic,
    UnknownVersion {
        version: u32,
    },
    BadCrc {
        stored: u32,
        computed: u32,
    },
    ReservedNotZero {
        offset: usize,
    },
}

impl fmt::Display for MarkerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            MarkerError::NoMagic => write!(f, "no BAREBENCHPATTERN marker"),
            MarkerError::UnknownVersion { version } => {
                write!(f, "marker of unknown version {version} (this kernel knows version {MARKER_VERSION})")
            }
            MarkerError::BadCrc { stored, computed } => {
                write!(f, "marker CRC-32 {stored:#010x} does not match its bytes ({computed:#010x})")
            }
            MarkerError::ReservedNotZero { offset } => write!(f, "marker byte {offset} should be zero"),
        }
    }
}

impl Marker {
    /// The 512 bytes of this marker.
    pub fn encode(&self) -> [u8; MARKER_BYTES] {
        let mut bytes = [0u8; MARKER_BYTES];
        bytes[..16].copy_from_slice(&MARKER_MAGIC);
        bytes[16..20].copy_from_slice(&MARKER_VERSION.to_le_bytes());
        bytes[24..32].copy_from_slice(&self.length_bytes.to_le_bytes());
        let crc = crc32(&bytes[..CRC_COVERED_BYTES]);
        bytes[40..44].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// Reads a marker from the first 512 bytes of `bytes` (shorter input has no marker).
    pub fn parse(bytes: &[u8]) -> Result<Marker, MarkerError> {
        let Some(bytes) = bytes.get(..MARKER_BYTES) else {
            return Err(MarkerError::NoMagic);
        };
        if bytes[..16] != MARKER_MAGIC {
            return Err(MarkerError::NoMagic);
        }
        let version = le_u32(bytes, 16);
        if version != MARKER_VERSION {
            return Err(MarkerError::UnknownVersion { version });
        }
        let stored = le_u32(bytes, 40);
        let computed = crc32(&bytes[..CRC_COVERED_BYTES]);
        if stored != computed {
            return Err(MarkerError::BadCrc { stored, computed });
        }
        let reserved = (20..24).chain(32..40).chain(44..MARKER_BYTES);
        if let Some(offset) = reserved.into_iter().find(|&offset| bytes[offset] != 0) {
            return Err(MarkerError::ReservedNotZero { offset });
        }
        Ok(Marker { length_bytes: le_u64(bytes, 24) })
    }
}

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

/// Why a partition with a marker holds no usable region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    Marker(MarkerError),
    /// The marker's length runs past the partition's end.
    LengthPastPartition {
        length_bytes: u64,
        partition_bytes: u64,
    },
    /// Not even the reserved MiB plus one sector.
    TooSmall {
        length_bytes: u64,
    },
    /// The partition table entry runs past the end of the device.
    PartitionPastDevice {
        end_lba: u64,
        device_blocks: u64,
    },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Refusal::Marker(error) => write!(f, "{error}"),
            Refusal::LengthPastPartition { length_bytes, partition_bytes } => write!(
                f,
                "marker length {length_bytes} bytes runs past the partition's end ({partition_bytes} bytes)"
            ),
            Refusal::TooSmall { length_bytes } => write!(
                f,
                "marker length {length_bytes} bytes is less than the reserved 1 MiB plus one sector"
            ),
            Refusal::PartitionPastDevice { end_lba, device_blocks } => write!(
                f,
                "the table says it ends at block {end_lba}, past the device's {device_blocks} blocks"
            ),
        }
    }
}

/// What the scan found: the first valid region, or the reason each marked partition was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finding {
    Region(PatternRegion),
    Refused { partition_number: u32, reason: Refusal },
}

/// Why the partition table could not be read at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanError<E> {
    Read {
        lba: u64,
        error: E,
    },
    /// The logical block size is not a power of two from 512 to 65536 bytes, or the buffer is
    /// shorter than a block.
    BadBlockSize {
        block_bytes: u32,
    },
}

impl<E: fmt::Display> fmt::Display for ScanError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScanError::Read { lba, error } => write!(f, "reading block {lba} failed: {error}"),
            ScanError::BadBlockSize { block_bytes } => {
                write!(f, "logical block size {block_bytes} bytes is not one the scan handles")
            }
        }
    }
}

/// Reads the MBR, then the first block of each primary partition, and reports every marked
/// partition to `found` (partitions without the magic are not reported). `buffer` must hold
/// one block.
pub fn scan<R: BlockReader>(
    reader: &mut R,
    buffer: &mut [u8],
    found: &mut dyn FnMut(Finding),
) -> Result<(), ScanError<R::Error>> {
    let block_bytes = reader.block_bytes();
    let valid_size = block_bytes.is_power_of_two() && (512..=65_536).contains(&block_bytes);
    if !valid_size || buffer.len() < block_bytes as usize {
        return Err(ScanError::BadBlockSize { block_bytes });
    }
    let buffer = &mut buffer[..block_bytes as usize];
    read(reader, 0, buffer)?;
    if buffer[MBR_SIGNATURE_OFFSET..MBR_SIGNATURE_OFFSET + 2] != [0x55, 0xAA] {
        return Ok(());
    }
    let mut entries = [(0u8, 0u64, 0u64); 4];
    for (index, entry) in entries.iter_mut().enumerate() {
        let at = MBR_ENTRIES_OFFSET + MBR_ENTRY_BYTES * index;
        *entry = (buffer[at + 4], u64::from(le_u32(buffer, at + 8)), u64::from(le_u32(buffer, at + 12)));
    }
    for (index, &(partition_type, first_lba, block_count)) in entries.iter().enumerate() {
        if partition_type == 0 || block_count == 0 {
            continue;
        }
        let number = index as u32 + 1;
        if let Some(finding) = check_partition(reader, buffer, number, first_lba, block_count)? {
            found(finding);
        }
    }
    Ok(())
}

fn read<R: BlockReader>(reader: &mut R, lba: u64, buffer: &mut [u8]) -> Result<(), ScanError<R::Error>> {
    reader.read_block(lba, buffer).map_err(|error| ScanError::Read { lba, error })
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
    let marker = match Marker::parse(buffer) {
        Ok(marker) => marker,
        Err(MarkerError::NoMagic) => return Ok(None),
        Err(error) => return refused(Refusal::Marker(error)),
    };
    let block_bytes = u64::from(reader.block_bytes());
    let partition_bytes = block_count * block_bytes;
    if marker.length_bytes > partition_bytes {
        return refused(Refusal::LengthPastPartition { length_bytes: marker.length_bytes, partition_bytes });
    }
    if marker.length_bytes < RESERVED_BYTES + 512 {
        return refused(Refusal::TooSmall { length_bytes: marker.length_bytes });
    }
    let start_bytes = first_lba * block_bytes;
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
        let marker = Marker { length_bytes: 4 << 20 }.encode();
        assert_eq!(Marker::parse(&marker), Ok(Marker { length_bytes: 4 << 20 }));
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
        let mut corrupt = Marker { length_bytes: 4 << 20 }.encode();
        corrupt[24] ^= 1;
        assert!(matches!(
            refusal(&mut disk_with_partition(0x7F, 4096, 8192, Some(corrupt))),
            Refusal::Marker(MarkerError::BadCrc { .. })
        ));
        let long = Marker { length_bytes: 5 << 20 }.encode();
        assert_eq!(
            refusal(&mut disk_with_partition(0x7F, 4096, 8192, Some(long))),
            Refusal::LengthPastPartition { length_bytes: 5 << 20, partition_bytes: 4 << 20 }
        );
        let short = Marker { length_bytes: 1 << 20 }.encode();
        assert_eq!(
            refusal(&mut disk_with_partition(0x7F, 4096, 8192, Some(short))),
            Refusal::TooSmall { length_bytes: 1 << 20 }
        );
        assert_eq!(
            refusal(&mut disk_with_partition(0x7F, 12288, 8192, Some(long))),
            Refusal::PartitionPastDevice { end_lba: 20480, device_blocks: 16384 }
        );
        let mut version = Marker { length_bytes: 4 << 20 }.encode();
        version[16] = 2;
        assert_eq!(Marker::parse(&version), Err(MarkerError::UnknownVersion { version: 2 }));
        let mut reserved = Marker { length_bytes: 4 << 20 }.encode();
        reserved[100] = 1;
        assert_eq!(Marker::parse(&reserved), Err(MarkerError::ReservedNotZero { offset: 100 }));
    }
}
