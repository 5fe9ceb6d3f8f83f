//! Scratch regions: the only places barebench ever writes. A region is announced by a 512-byte
//! marker at the first byte of a partition listed in the MBR (primary entries) or, when the MBR
//! is protective, in the GPT (UEFI 2.10 §5.2.3 protective MBR, §5.3.2 GPT header, §5.3.3 GPT
//! partition entry array). Nothing else counts: not a partition type, not a file system label.
//!
//! The marker is [`crate::marker`]'s, of kind `BAREBENCHSCRATCH`, with a random region id. The
//! first MiB of a region, marker included, is never written (docs/writes.md §1).
//!
//! This module is shared by the kernel (the scan at attach time) and the host tool (`barebench
//! scratch`, `barebench image --scratch`), so both read and write the same bytes.

use core::fmt;

use crate::crc32::Crc32;
use crate::marker::{le_u32, le_u64, Marker, MarkerError, MarkerKind, RESERVED_BYTES};

/// MBR partition type 0xDA ("non-FS data"); the tool gives it to the partitions it makes. The
/// type alone never makes a region.
pub const MBR_TYPE_NON_FS_DATA: u8 = 0xDA;
/// MBR partition type of a protective MBR (UEFI 2.10 §5.2.3).
pub const MBR_TYPE_GPT_PROTECTIVE: u8 = 0xEE;
/// Most GPT entries the scan reads (the usual array has 128).
pub const MAX_GPT_ENTRIES: u32 = 1024;

/// Which table listed a partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartitionTable {
    /// A primary MBR entry, with its type byte.
    Mbr {
        partition_type: u8,
    },
    Gpt,
}

/// A partition as its table describes it, in logical blocks of the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Partition {
    /// 1-based, as Linux numbers them (MBR primary 1-4, GPT entry index + 1).
    pub number: u32,
    pub table: PartitionTable,
    pub first_lba: u64,
    pub block_count: u64,
}

impl fmt::Display for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.table {
            PartitionTable::Mbr { partition_type } => {
                write!(f, "partition {} (MBR, type {partition_type:#04x})", self.number)
            }
            PartitionTable::Gpt => write!(f, "partition {} (GPT)", self.number),
        }
    }
}

/// A valid scratch region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScratchRegion {
    pub partition: Partition,
    /// The marker's byte offset on the device (the partition's first byte).
    pub start_bytes: u64,
    pub length_bytes: u64,
    pub region_id: u64,
}

impl ScratchRegion {
    /// The bytes that may be written: the region without its first MiB, as (offset, length).
    pub fn writable(&self) -> (u64, u64) {
        (self.start_bytes + RESERVED_BYTES, self.length_bytes - RESERVED_BYTES)
    }
}

/// Why a partition holds no usable region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The marker block is there but not valid.
    #[error("{0}")]
    Marker(MarkerError),
    /// An MBR partition of type 0xDA with no marker: a type alone makes no region.
    #[error(
        "type 0xda but no BAREBENCHSCRATCH marker (a partition type alone never makes a scratch region; \
         mark it with `barebench scratch`)"
    )]
    TypeWithoutMarker,
    /// The marker's length runs past the partition's end.
    #[error("marker length {length_bytes} bytes runs past the partition's end ({partition_bytes} bytes)")]
    LengthPastPartition { length_bytes: u64, partition_bytes: u64 },
    /// Not even the reserved MiB plus one block.
    #[error(
        "marker length {length_bytes} bytes is less than the reserved 1 MiB plus one block ({minimum_bytes} bytes)"
    )]
    TooSmall { length_bytes: u64, minimum_bytes: u64 },
    /// The partition table entry runs past the end of the device.
    #[error("the table says it ends at block {end_lba}, past the device's {device_blocks} blocks")]
    PartitionPastDevice { end_lba: u64, device_blocks: u64 },
}

/// What the scan found at one partition. Partitions without a marker (and not of type 0xDA) are
/// not reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finding {
    Region(ScratchRegion),
    Refused { partition: Partition, reason: Refusal },
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Region(region) => write!(
                f,
                "{}: scratch region id {:#018x}, {} bytes at byte {} (the first MiB is never written)",
                region.partition, region.region_id, region.length_bytes, region.start_bytes
            ),
            Finding::Refused { partition, reason } => {
                write!(f, "{partition}: not a scratch region: {reason}")
            }
        }
    }
}

/// Why the partition tables could not be read at all (by this scan or the pattern-region scan,
/// which reads the MBR only).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScanError<E> {
    /// A block could not be read.
    #[error("reading block {lba} failed: {error}")]
    Read { lba: u64, error: E },
    /// The logical block size is not a power of two from 512 to 65536 bytes, or the buffer is
    /// shorter than a block.
    #[error("logical block size {block_bytes} bytes is not one the scan handles")]
    BadBlockSize { block_bytes: u32 },
    /// The MBR is protective but the GPT header is not valid.
    #[error("protective MBR but the GPT is not valid: {0:?}")]
    BadGpt(GptProblem),
}

/// What is wrong with a GPT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GptProblem {
    NoSignature,
    BadHeaderSize { header_bytes: u32 },
    HeaderCrc { stored: u32, computed: u32 },
    BadEntries { entry_count: u32, entry_bytes: u32 },
    EntriesCrc { stored: u32, computed: u32 },
}

/// The device the scan reads, one logical block at a time.
pub trait BlockReader {
    type Error;
    fn block_bytes(&self) -> u32;
    fn block_count(&self) -> u64;
    /// Reads block `lba` into `out` (exactly one block long).
    fn read_block(&mut self, lba: u64, out: &mut [u8]) -> Result<(), Self::Error>;
}

/// Reads the MBR (and the GPT if the MBR is protective), then each partition's first block, and
/// reports every region and every refused marker to `found`. `buffer` must hold one block.
pub fn scan<R: BlockReader>(
    reader: &mut R,
    buffer: &mut [u8],
    found: &mut dyn FnMut(Finding),
) -> Result<(), ScanError<R::Error>> {
    for_each_partition(reader, buffer, &mut |reader, buffer, partition| {
        check_partition(reader, buffer, partition, found)
    })
}

/// Partition `number` (1-based, as Linux counts) of the MBR or, behind a protective MBR, the GPT.
pub fn find_partition<R: BlockReader>(
    reader: &mut R,
    buffer: &mut [u8],
    number: u32,
) -> Result<Option<Partition>, ScanError<R::Error>> {
    let mut result = None;
    for_each_partition(reader, buffer, &mut |_, _, partition| {
        if partition.number == number {
            result = Some(partition);
        }
        Ok(())
    })?;
    Ok(result)
}

/// What [`for_each_partition`] calls for each partition; it may use the reader and the buffer.
type Visit<'v, R> =
    dyn FnMut(&mut R, &mut [u8], Partition) -> Result<(), ScanError<<R as BlockReader>::Error>> + 'v;

/// Calls `visit` for each MBR primary partition or, when the MBR is protective, each GPT entry.
fn for_each_partition<R: BlockReader>(
    reader: &mut R,
    buffer: &mut [u8],
    visit: &mut Visit<'_, R>,
) -> Result<(), ScanError<R::Error>> {
    let buffer = block_buffer(reader, buffer)?;
    let Some(entries) = mbr_entries(reader, buffer)? else {
        return Ok(());
    };
    if entries.iter().any(|entry| entry.partition_type == MBR_TYPE_GPT_PROTECTIVE) {
        return for_each_gpt_partition(reader, buffer, visit);
    }
    for (index, entry) in entries.iter().enumerate() {
        if entry.partition_type == 0 || entry.block_count == 0 {
            continue;
        }
        let table = PartitionTable::Mbr { partition_type: entry.partition_type };
        let (first_lba, block_count) = (entry.first_lba, entry.block_count);
        visit(reader, buffer, Partition { number: index as u32 + 1, table, first_lba, block_count })?;
    }
    Ok(())
}

/// One primary entry of the classic MBR (16 bytes at byte 446 + 16 × index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MbrEntry {
    pub partition_type: u8,
    pub first_lba: u64,
    pub block_count: u64,
}

/// `buffer` cut to one block of the device, or `BadBlockSize` when the device's block size is
/// not a power of two from 512 to 64 KiB or the buffer is shorter than a block. Shared with the
/// pattern-region scan.
pub(crate) fn block_buffer<'b, R: BlockReader>(
    reader: &R,
    buffer: &'b mut [u8],
) -> Result<&'b mut [u8], ScanError<R::Error>> {
    let block_bytes = reader.block_bytes();
    let valid_size = block_bytes.is_power_of_two() && (512..=65_536).contains(&block_bytes);
    if !valid_size || buffer.len() < block_bytes as usize {
        return Err(ScanError::BadBlockSize { block_bytes });
    }
    Ok(&mut buffer[..block_bytes as usize])
}

/// Reads block 0 into `buffer` and returns its four primary MBR entries, or `None` when the
/// block has no MBR signature (0x55 0xAA at byte 510). Shared with the pattern-region scan.
pub(crate) fn mbr_entries<R: BlockReader>(
    reader: &mut R,
    buffer: &mut [u8],
) -> Result<Option<[MbrEntry; 4]>, ScanError<R::Error>> {
    read(reader, 0, buffer)?;
    if le_u16(buffer, 510) != 0xAA55 {
        return Ok(None);
    }
    Ok(Some(core::array::from_fn(|index| {
        let at = 446 + 16 * index;
        MbrEntry {
            partition_type: buffer[at + 4],
            first_lba: u64::from(le_u32(buffer, at + 8)),
            block_count: u64::from(le_u32(buffer, at + 12)),
        }
    })))
}

fn le_u16(bytes: &[u8], offset: usize) -> u16 {
    u16::from_le_bytes([bytes[offset], bytes[offset + 1]])
}

pub(crate) fn read<R: BlockReader>(
    reader: &mut R,
    lba: u64,
    buffer: &mut [u8],
) -> Result<(), ScanError<R::Error>> {
    reader.read_block(lba, buffer).map_err(|error| ScanError::Read { lba, error })
}

/// The GPT header's fields the scan uses.
struct GptEntries {
    first_lba: u64,
    count: u32,
    entry_bytes: u32,
    crc: u32,
}

fn for_each_gpt_partition<R: BlockReader>(
    reader: &mut R,
    buffer: &mut [u8],
    visit: &mut Visit<'_, R>,
) -> Result<(), ScanError<R::Error>> {
    read(reader, 1, buffer)?;
    let entries = gpt_header(buffer).map_err(ScanError::BadGpt)?;
    let computed = gpt_entries_crc(reader, buffer, &entries)?;
    if computed != entries.crc {
        return Err(ScanError::BadGpt(GptProblem::EntriesCrc { stored: entries.crc, computed }));
    }
    let block_bytes = buffer.len() as u64;
    for index in 0..entries.count {
        // Entries are a power of two of at least 128 bytes, so none straddles a block; the
        // entry's block is read again for each entry because the visitor may reuse the buffer.
        let byte = u64::from(index) * u64::from(entries.entry_bytes);
        read(reader, entries.first_lba + byte / block_bytes, buffer)?;
        let at = (byte % block_bytes) as usize;
        if let Some(partition) = gpt_partition(index + 1, &buffer[at..at + 48]) {
            visit(reader, buffer, partition)?;
        }
    }
    Ok(())
}

fn gpt_header(block: &[u8]) -> Result<GptEntries, GptProblem> {
    if &block[..8] != b"EFI PART" {
        return Err(GptProblem::NoSignature);
    }
    let header_bytes = le_u32(block, 12);
    if header_bytes < 92 || header_bytes as usize > block.len() {
        return Err(GptProblem::BadHeaderSize { header_bytes });
    }
    let stored = le_u32(block, 16);
    let mut crc = Crc32::new();
    crc.update(&block[..16]);
    crc.update(&[0; 4]);
    crc.update(&block[20..header_bytes as usize]);
    if crc.finish() != stored {
        return Err(GptProblem::HeaderCrc { stored, computed: crc.finish() });
    }
    let (count, entry_bytes) = (le_u32(block, 80), le_u32(block, 84));
    let valid = count <= MAX_GPT_ENTRIES && entry_bytes >= 128 && entry_bytes.is_power_of_two();
    if !valid {
        return Err(GptProblem::BadEntries { entry_count: count, entry_bytes });
    }
    Ok(GptEntries { first_lba: le_u64(block, 72), count, entry_bytes, crc: le_u32(block, 88) })
}

/// The CRC-32 of the whole entry array, read block by block.
fn gpt_entries_crc<R: BlockReader>(
    reader: &mut R,
    buffer: &mut [u8],
    entries: &GptEntries,
) -> Result<u32, ScanError<R::Error>> {
    let block_bytes = buffer.len() as u64;
    let total_bytes = u64::from(entries.count) * u64::from(entries.entry_bytes);
    let mut crc = Crc32::new();
    let mut done_bytes = 0u64;
    while done_bytes < total_bytes {
        read(reader, entries.first_lba + done_bytes / block_bytes, buffer)?;
        let take = (total_bytes - done_bytes).min(block_bytes) as usize;
        crc.update(&buffer[..take]);
        done_bytes += take as u64;
    }
    Ok(crc.finish())
}

fn gpt_partition(number: u32, entry: &[u8]) -> Option<Partition> {
    if entry[..16].iter().all(|&byte| byte == 0) {
        return None;
    }
    let (first_lba, last_lba) = (le_u64(entry, 32), le_u64(entry, 40));
    let block_count = last_lba.checked_sub(first_lba)?.checked_add(1)?;
    Some(Partition { number, table: PartitionTable::Gpt, first_lba, block_count })
}

/// Reads a partition's first block and reports a region or a refusal.
fn check_partition<R: BlockReader>(
    reader: &mut R,
    buffer: &mut [u8],
    partition: Partition,
    found: &mut dyn FnMut(Finding),
) -> Result<(), ScanError<R::Error>> {
    let device_blocks = reader.block_count();
    let end_lba = partition.first_lba.saturating_add(partition.block_count);
    if end_lba > device_blocks {
        let reason = Refusal::PartitionPastDevice { end_lba, device_blocks };
        found(Finding::Refused { partition, reason });
        return Ok(());
    }
    read(reader, partition.first_lba, buffer)?;
    if let Some(finding) = judge_marker(&partition, buffer, reader.block_bytes()) {
        found(finding);
    }
    Ok(())
}

/// Why a marker's length makes no region in a partition of `block_count` blocks: past the
/// partition's end, or not even the reserved MiB plus one block. Shared with the pattern-region
/// scan.
pub(crate) fn length_refusal(length_bytes: u64, block_count: u64, block_bytes: u32) -> Option<Refusal> {
    let partition_bytes = block_count * u64::from(block_bytes);
    if length_bytes > partition_bytes {
        return Some(Refusal::LengthPastPartition { length_bytes, partition_bytes });
    }
    let minimum_bytes = RESERVED_BYTES + u64::from(block_bytes);
    (length_bytes < minimum_bytes).then_some(Refusal::TooSmall { length_bytes, minimum_bytes })
}

/// What a partition's first block makes of it; `None` for an ordinary partition.
pub fn judge_marker(partition: &Partition, first_block: &[u8], block_bytes: u32) -> Option<Finding> {
    let refused = |reason| Some(Finding::Refused { partition: *partition, reason });
    let marker = match Marker::parse(MarkerKind::Scratch, first_block) {
        Ok(marker) => marker,
        Err(MarkerError::NoMagic { .. }) => {
            return match partition.table {
                PartitionTable::Mbr { partition_type: MBR_TYPE_NON_FS_DATA } => {
                    refused(Refusal::TypeWithoutMarker)
                }
                _ => None,
            };
        }
        Err(error) => return refused(Refusal::Marker(error)),
    };
    if let Some(reason) = length_refusal(marker.length_bytes, partition.block_count, block_bytes) {
        return refused(reason);
    }
    Some(Finding::Region(ScratchRegion {
        partition: *partition,
        start_bytes: partition.first_lba * u64::from(block_bytes),
        length_bytes: marker.length_bytes,
        region_id: marker.region_id,
    }))
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::crc32::crc32;
    use std::string::ToString;
    use std::vec;
    use std::vec::Vec;

    const MIB: u64 = 1 << 20;

    /// An in-memory disk of 512-byte blocks.
    struct Disk {
        bytes: Vec<u8>,
        block_bytes: u32,
        reads: Vec<u64>,
    }

    impl Disk {
        fn new(size_bytes: u64, block_bytes: u32) -> Disk {
            Disk { bytes: vec![0; size_bytes as usize], block_bytes, reads: Vec::new() }
        }

        fn put(&mut self, offset: u64, data: &[u8]) {
            self.bytes[offset as usize..offset as usize + data.len()].copy_from_slice(data);
        }

        fn mbr(&mut self, entries: &[(u8, u32, u32)]) {
            let mut sector = [0u8; 512];
            for (index, &(partition_type, first_lba, block_count)) in entries.iter().enumerate() {
                let at = 446 + 16 * index;
                sector[at + 4] = partition_type;
                sector[at + 8..at + 12].copy_from_slice(&first_lba.to_le_bytes());
                sector[at + 12..at + 16].copy_from_slice(&block_count.to_le_bytes());
            }
            sector[510] = 0x55;
            sector[511] = 0xAA;
            self.put(0, &sector);
        }

        /// A protective MBR and a GPT with 128 entries at LBA 2 (512-byte blocks).
        fn gpt(&mut self, partitions: &[(u64, u64)]) {
            self.gpt_with(partitions, 128, 92);
        }

        /// A protective MBR and a GPT with `count` entries of 128 bytes at LBA 2 and a header of
        /// `header_bytes` (its CRC over that many bytes).
        fn gpt_with(&mut self, partitions: &[(u64, u64)], count: u32, header_bytes: u32) {
            self.mbr(&[(MBR_TYPE_GPT_PROTECTIVE, 1, u32::MAX)]);
            let mut array = vec![0u8; count as usize * 128];
            for (index, &(first_lba, last_lba)) in partitions.iter().enumerate() {
                let entry = &mut array[index * 128..index * 128 + 128];
                entry[..16].copy_from_slice(&[0xAF; 16]);
                entry[16..32].copy_from_slice(&[index as u8 + 1; 16]);
                entry[32..40].copy_from_slice(&first_lba.to_le_bytes());
                entry[40..48].copy_from_slice(&last_lba.to_le_bytes());
            }
            let mut header = [0u8; 512];
            header[..8].copy_from_slice(b"EFI PART");
            header[8..12].copy_from_slice(&0x0001_0000u32.to_le_bytes());
            header[12..16].copy_from_slice(&header_bytes.to_le_bytes());
            header[72..80].copy_from_slice(&2u64.to_le_bytes());
            header[80..84].copy_from_slice(&count.to_le_bytes());
            header[84..88].copy_from_slice(&128u32.to_le_bytes());
            header[88..92].copy_from_slice(&crc32(&array).to_le_bytes());
            self.put(512, &header);
            self.put(1024, &array);
            self.seal_gpt_header();
        }

        /// Recomputes the GPT header's CRC over the size its header says (at most a block).
        fn seal_gpt_header(&mut self) {
            let header = &mut self.bytes[512..1024];
            let size = (u32::from_le_bytes(header[12..16].try_into().unwrap()) as usize).min(512);
            header[16..20].fill(0);
            let crc = crc32(&header[..size]);
            header[16..20].copy_from_slice(&crc.to_le_bytes());
        }

        fn findings(&mut self) -> Result<Vec<Finding>, ScanError<()>> {
            let mut findings = Vec::new();
            let mut buffer = vec![0u8; self.block_bytes as usize];
            scan(self, &mut buffer, &mut |finding| findings.push(finding))?;
            Ok(findings)
        }
    }

    impl BlockReader for Disk {
        type Error = ();
        fn block_bytes(&self) -> u32 {
            self.block_bytes
        }
        fn block_count(&self) -> u64 {
            self.bytes.len() as u64 / u64::from(self.block_bytes)
        }
        fn read_block(&mut self, lba: u64, out: &mut [u8]) -> Result<(), ()> {
            self.reads.push(lba);
            let at = (lba * u64::from(self.block_bytes)) as usize;
            out.copy_from_slice(self.bytes.get(at..at + out.len()).ok_or(())?);
            Ok(())
        }
    }

    fn marker(length_bytes: u64) -> [u8; 512] {
        Marker::scratch(length_bytes, 0x1234_5678_9abc_def0).encode()
    }

    fn refusal(findings: &[Finding]) -> Refusal {
        match findings {
            [Finding::Refused { reason, .. }] => *reason,
            other => panic!("expected one refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_marker_reads_back_and_its_crc_is_zlibs() {
        let bytes = marker(8 * MIB);
        assert_eq!(&bytes[..16], b"BAREBENCHSCRATCH");
        assert_eq!(bytes[16..24], [1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(bytes[24..32], (8 * MIB).to_le_bytes());
        assert_eq!(bytes[32..40], 0x1234_5678_9abc_def0u64.to_le_bytes());
        // zlib.crc32(bytes[:40]) computed independently in Python for this marker.
        assert_eq!(u32::from_le_bytes(bytes[40..44].try_into().unwrap()), 0x839c_42c6);
        assert!(bytes[44..].iter().all(|&b| b == 0));
        let parsed = Marker::parse(MarkerKind::Scratch, &bytes).unwrap();
        assert_eq!(parsed, Marker::scratch(8 * MIB, 0x1234_5678_9abc_def0));
    }

    #[test]
    fn bad_markers_are_refused_each_for_its_reason() {
        let good = marker(8 * MIB);
        let mut bad_crc = good;
        bad_crc[24] ^= 1;
        assert!(matches!(Marker::parse(MarkerKind::Scratch, &bad_crc), Err(MarkerError::BadCrc { .. })));
        let mut version = good;
        version[16] = 2;
        assert_eq!(
            Marker::parse(MarkerKind::Scratch, &version),
            Err(MarkerError::UnknownVersion { version: 2 })
        );
        let mut reserved = good;
        reserved[20] = 1;
        let crc = crc32(&reserved[..40]);
        reserved[40..44].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            Marker::parse(MarkerKind::Scratch, &reserved),
            Err(MarkerError::ReservedNotZero { offset: 20 })
        );
        let mut tail = good;
        tail[511] = 1;
        assert_eq!(
            Marker::parse(MarkerKind::Scratch, &tail),
            Err(MarkerError::ReservedNotZero { offset: 511 })
        );
        let mut magic = good;
        magic[0] = b'b';
        assert_eq!(
            Marker::parse(MarkerKind::Scratch, &magic),
            Err(MarkerError::NoMagic { kind: MarkerKind::Scratch })
        );
        assert_eq!(
            Marker::parse(MarkerKind::Scratch, &good[..511]),
            Err(MarkerError::NoMagic { kind: MarkerKind::Scratch })
        );
    }

    #[test]
    fn mbr_partitions_with_markers_are_regions_and_the_rest_are_refused_or_ignored() {
        let mut disk = Disk::new(64 * MIB, 512);
        // 1: FAT, no marker (ignored). 2: a good region of 8 MiB in a 16 MiB partition.
        // 3: type 0xDA without a marker. 4: bad CRC.
        disk.mbr(&[(0x0C, 2048, 2048), (0xDA, 4096, 32768), (0xDA, 36864, 4096), (0xDA, 40960, 8192)]);
        disk.put(4096 * 512, &marker(8 * MIB));
        let mut bad = marker(4 * MIB);
        bad[40] ^= 0xFF;
        disk.put(40960 * 512, &bad);
        let findings = disk.findings().unwrap();
        assert_eq!(findings.len(), 3, "{findings:?}");
        let Finding::Region(region) = findings[0] else { panic!("{findings:?}") };
        assert_eq!(region.partition.number, 2);
        assert_eq!((region.start_bytes, region.length_bytes), (4096 * 512, 8 * MIB));
        assert_eq!(region.writable(), (4096 * 512 + MIB, 7 * MIB));
        assert!(
            matches!(findings[1], Finding::Refused { partition, reason: Refusal::TypeWithoutMarker } if partition.number == 3)
        );
        assert!(matches!(
            findings[2],
            Finding::Refused { reason: Refusal::Marker(MarkerError::BadCrc { .. }), .. }
        ));
        assert!(findings[1]
            .to_string()
            .starts_with("partition 3 (MBR, type 0xda): not a scratch region: type 0xda"));
    }

    #[test]
    fn a_length_past_the_partition_end_is_refused() {
        let mut disk = Disk::new(16 * MIB, 512);
        disk.mbr(&[(0x83, 2048, 4096)]);
        disk.put(2048 * 512, &marker(2 * MIB + 512));
        let reason = refusal(&disk.findings().unwrap());
        assert_eq!(
            reason,
            Refusal::LengthPastPartition { length_bytes: 2 * MIB + 512, partition_bytes: 2 * MIB }
        );
        // Exactly the partition is fine.
        disk.put(2048 * 512, &marker(2 * MIB));
        assert!(matches!(disk.findings().unwrap()[..], [Finding::Region(_)]));
    }

    #[test]
    fn a_region_smaller_than_a_mib_and_a_block_is_refused() {
        let mut disk = Disk::new(16 * MIB, 512);
        disk.mbr(&[(0xDA, 2048, 8192)]);
        disk.put(2048 * 512, &marker(MIB + 511));
        let reason = refusal(&disk.findings().unwrap());
        assert_eq!(reason, Refusal::TooSmall { length_bytes: MIB + 511, minimum_bytes: MIB + 512 });
        disk.put(2048 * 512, &marker(MIB + 512));
        assert!(matches!(disk.findings().unwrap()[..], [Finding::Region(_)]));
    }

    #[test]
    fn an_unknown_version_is_refused_with_the_partition_named() {
        let mut disk = Disk::new(16 * MIB, 512);
        disk.mbr(&[(0xDA, 2048, 8192)]);
        let mut bytes = marker(2 * MIB);
        bytes[16] = 7;
        disk.put(2048 * 512, &bytes);
        let findings = disk.findings().unwrap();
        assert_eq!(refusal(&findings), Refusal::Marker(MarkerError::UnknownVersion { version: 7 }));
        assert!(findings[0].to_string().contains("partition 1 (MBR, type 0xda)"));
        assert!(findings[0].to_string().contains("unknown version 7"));
    }

    #[test]
    fn a_partition_past_the_device_end_is_refused_without_reading_it() {
        let mut disk = Disk::new(4 * MIB, 512);
        disk.mbr(&[(0xDA, 2048, 8192)]);
        let reason = refusal(&disk.findings().unwrap());
        assert_eq!(reason, Refusal::PartitionPastDevice { end_lba: 10240, device_blocks: 8192 });
        assert_eq!(disk.reads, vec![0]);
    }

    #[test]
    fn no_mbr_signature_means_no_regions_even_with_a_marker_at_block_zero() {
        let mut disk = Disk::new(4 * MIB, 512);
        disk.put(0, &marker(2 * MIB));
        assert!(disk.findings().unwrap().is_empty());
        // A marker in the middle of the disk outside any partition does not count either.
        disk.mbr(&[(0x0C, 4096, 2048)]);
        disk.put(2048 * 512, &marker(MIB * 2));
        assert!(disk.findings().unwrap().is_empty());
    }

    #[test]
    fn gpt_entries_are_scanned_only_behind_a_protective_mbr() {
        let mut disk = Disk::new(64 * MIB, 512);
        disk.gpt(&[(2048, 4095), (4096, 36863), (36864, 40959)]);
        disk.put(4096 * 512, &marker(16 * MIB));
        disk.put(36864 * 512, &marker(3 * MIB)); // the partition holds 2 MiB
        let findings = disk.findings().unwrap();
        assert_eq!(findings.len(), 2, "{findings:?}");
        let Finding::Region(region) = findings[0] else { panic!("{findings:?}") };
        assert_eq!(
            region.partition,
            Partition { number: 2, table: PartitionTable::Gpt, first_lba: 4096, block_count: 32768 }
        );
        assert!(matches!(findings[1], Finding::Refused { reason: Refusal::LengthPastPartition { .. }, .. }));
        assert!(findings[1].to_string().starts_with("partition 3 (GPT): not a scratch region"));
    }

    #[test]
    fn a_gpt_with_a_bad_crc_is_not_trusted() {
        let mut disk = Disk::new(64 * MIB, 512);
        disk.gpt(&[(4096, 36863)]);
        disk.put(4096 * 512, &marker(16 * MIB));
        disk.bytes[1024 + 32] ^= 1; // an entry's first LBA: the array CRC no longer matches
        assert!(matches!(disk.findings(), Err(ScanError::BadGpt(GptProblem::EntriesCrc { .. }))));
        disk.gpt(&[(4096, 36863)]);
        disk.bytes[512 + 80] = 200; // entry count: the header CRC no longer matches
        assert!(matches!(disk.findings(), Err(ScanError::BadGpt(GptProblem::HeaderCrc { .. }))));
        disk.bytes[512] = b'X';
        assert!(matches!(disk.findings(), Err(ScanError::BadGpt(GptProblem::NoSignature))));
    }

    #[test]
    fn four_kib_blocks_put_the_gpt_and_partitions_in_4k_units() {
        let mut disk = Disk::new(64 * MIB, 4096);
        disk.mbr(&[(0xDA, 256, 2048)]);
        disk.put(256 * 4096, &marker(8 * MIB));
        let findings = disk.findings().unwrap();
        let Finding::Region(region) = findings[0] else { panic!("{findings:?}") };
        assert_eq!(region.start_bytes, MIB);
        // The minimum is a MiB plus one 4 KiB block.
        disk.put(256 * 4096, &marker(MIB + 512));
        assert_eq!(
            refusal(&disk.findings().unwrap()),
            Refusal::TooSmall { length_bytes: MIB + 512, minimum_bytes: MIB + 4096 }
        );
    }

    #[test]
    fn partitions_are_found_by_number_in_either_table() {
        let mut disk = Disk::new(64 * MIB, 512);
        disk.mbr(&[(0x0C, 2048, 2048), (0xDA, 4096, 8192)]);
        let mut buffer = [0u8; 512];
        let second = find_partition(&mut disk, &mut buffer, 2).unwrap().unwrap();
        assert_eq!((second.first_lba, second.block_count), (4096, 8192));
        assert_eq!(find_partition(&mut disk, &mut buffer, 3).unwrap(), None);
        disk.gpt(&[(2048, 4095), (4096, 36863)]);
        let second = find_partition(&mut disk, &mut buffer, 2).unwrap().unwrap();
        assert_eq!((second.table, second.first_lba, second.block_count), (PartitionTable::Gpt, 4096, 32768));
    }

    #[test]
    fn gpt_headers_with_sizes_or_entries_out_of_range_are_refused_by_name() {
        let mut disk = Disk::new(64 * MIB, 512);
        for header_bytes in [91, 513] {
            disk.gpt_with(&[(4096, 36863)], 128, header_bytes);
            assert_eq!(disk.findings(), Err(ScanError::BadGpt(GptProblem::BadHeaderSize { header_bytes })));
        }
        // A header as long as the block is valid.
        disk.gpt_with(&[(4096, 36863)], 128, 512);
        disk.put(4096 * 512, &marker(16 * MIB));
        assert_eq!(disk.findings().unwrap().len(), 1);
        for (entry_count, entry_bytes) in [(128, 64u32), (128, 192), (MAX_GPT_ENTRIES + 1, 128)] {
            disk.gpt_with(&[(4096, 36863)], 128, 92);
            disk.put(512 + 80, &entry_count.to_le_bytes());
            disk.put(512 + 84, &entry_bytes.to_le_bytes());
            disk.seal_gpt_header();
            let expected = GptProblem::BadEntries { entry_count, entry_bytes };
            assert_eq!(disk.findings(), Err(ScanError::BadGpt(expected)));
        }
    }

    #[test]
    fn a_gpt_entry_array_shorter_than_a_block_is_checked_over_its_own_length() {
        let mut disk = Disk::new(64 * MIB, 512);
        // Five entries of 128 bytes: a block and a quarter.
        disk.gpt_with(&[(2048, 4095), (4096, 36863), (36864, 40959)], 5, 92);
        disk.put(4096 * 512, &marker(16 * MIB));
        let findings = disk.findings().unwrap();
        assert!(matches!(findings[..], [Finding::Region(_)]), "{findings:?}");
    }

    #[test]
    fn mbr_entries_without_a_type_or_without_blocks_are_skipped() {
        let mut disk = Disk::new(64 * MIB, 512);
        disk.mbr(&[(0xDA, 2048, 0), (0, 4096, 32768)]);
        disk.put(2048 * 512, &marker(2 * MIB));
        disk.put(4096 * 512, &marker(16 * MIB));
        assert_eq!(disk.findings().unwrap(), Vec::new());
        assert_eq!(disk.reads, vec![0]);
    }

    #[test]
    fn a_partition_that_ends_at_the_device_end_is_a_region() {
        let mut disk = Disk::new(4 * MIB, 512);
        disk.mbr(&[(0xDA, 2048, 6144)]);
        disk.put(2048 * 512, &marker(3 * MIB));
        assert!(matches!(disk.findings().unwrap()[..], [Finding::Region(_)]));
    }

    #[test]
    fn scan_errors_say_what_failed() {
        let read: ScanError<&str> = ScanError::Read { lba: 7, error: "timeout" };
        assert_eq!(read.to_string(), "reading block 7 failed: timeout");
        let size: ScanError<&str> = ScanError::BadBlockSize { block_bytes: 520 };
        assert_eq!(size.to_string(), "logical block size 520 bytes is not one the scan handles");
        let gpt: ScanError<&str> = ScanError::BadGpt(GptProblem::NoSignature);
        assert_eq!(gpt.to_string(), "protective MBR but the GPT is not valid: NoSignature");
    }

    #[test]
    fn block_sizes_the_scan_cannot_handle_are_an_error() {
        let mut disk = Disk::new(MIB, 512);
        disk.block_bytes = 520;
        assert_eq!(disk.findings(), Err(ScanError::BadBlockSize { block_bytes: 520 }));
        let mut disk = Disk::new(MIB, 512);
        let mut short = [0u8; 256];
        assert!(matches!(scan(&mut disk, &mut short, &mut |_| {}), Err(ScanError::BadBlockSize { .. })));
    }
}
