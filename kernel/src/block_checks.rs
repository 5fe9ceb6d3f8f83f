//! Reading blocks outside the benchmark: the `crc=DEV:LBA:COUNT` and `verify=DEV:LBA:COUNT`
//! checks and the region sample taken before the first run (docs/measurement.md).
//!
//! Every read goes into a buffer first filled with a poison pattern, and a block that still holds
//! the poison afterwards is a read that reported success without transferring data: the check
//! fails instead of computing a CRC of stale memory or taking a zeroed buffer for an empty disk.
#![forbid(unsafe_code)]

use alloc::vec;
use alloc::vec::Vec;

use bench::region::Region;
use bench::results::RegionSample;
use blockdev::blocking::{complete_one, WaitError};
use blockdev::crc32::Crc32;
use blockdev::{BlockDevice, DmaBuffer, Operation, Request};
use hal::dma::DmaRegion;
use hal::platform::Platform;

/// What a buffer holds before each read: no device's data and no test pattern looks like it.
pub const POISON: &[u8; 16] = b"barebench poison";
/// How long one read may take before a check gives up on the device.
pub const READ_TIMEOUT_US: u64 = 30_000_000;
/// Spread reads over the region before the first run.
pub const REGION_SAMPLE_READS: u32 = 64;
/// Bytes of each sample read (at least one logical block).
pub const REGION_SAMPLE_BYTES: u64 = 4096;

/// Why a check could not be completed.
#[derive(Debug, thiserror::Error)]
pub enum CheckFailure {
    #[error("no such device")]
    NoSuchDevice,
    #[error("range is beyond the end of the device ({block_count} blocks); nothing was read")]
    OutOfRange { block_count: u64 },
    #[error("{0}")]
    NoBuffer(hal::platform::DmaAllocationError),
    /// The buffer handed to the check is not the platform's DMA memory.
    #[error("{0}")]
    NotDmaMemory(hal::dma::ForeignBuffer),
    #[error("request refused: {}", .0.name())]
    Refused(blockdev::SubmitError),
    #[error("read at LBA {lba} failed: {error}")]
    Failed { lba: u64, error: blockdev::IoError },
    #[error("read at LBA {lba} did not complete in time")]
    Timeout { lba: u64 },
    /// The read reported success but this block still holds the poison pattern.
    #[error("read at LBA {lba} reported success but transferred no data (the block still holds the poison pattern)")]
    NotTransferred { lba: u64 },
    #[error("MISMATCH: first differing byte at device offset {byte_offset}")]
    Mismatch { byte_offset: u64 },
}

/// CRC-32 of `block_count` logical blocks from `lba`, read one chunk at a time.
pub fn crc_of_blocks<P: Platform + ?Sized>(
    device: &mut dyn BlockDevice,
    platform: &P,
    buffer: DmaBuffer,
    lba: u64,
    block_count: u64,
) -> Result<u32, CheckFailure> {
    let mut crc = Crc32::new();
    for_each_chunk(device, platform, buffer, lba, block_count, |_, bytes| crc.update(bytes))?;
    Ok(crc.finish())
}

/// Reads the range and compares every byte with the test pattern (`blockdev::pattern`).
pub fn verify_blocks<P: Platform + ?Sized>(
    device: &mut dyn BlockDevice,
    platform: &P,
    buffer: DmaBuffer,
    lba: u64,
    block_count: u64,
) -> Result<(), CheckFailure> {
    let block_bytes = u64::from(device.geometry().logical_block_bytes);
    let mut mismatch = None;
    for_each_chunk(device, platform, buffer, lba, block_count, |chunk_lba, bytes| {
        if mismatch.is_none() {
            if let Some(offset) = blockdev::pattern::first_mismatch(chunk_lba * block_bytes, bytes) {
                mismatch = Some(chunk_lba * block_bytes + offset as u64);
            }
        }
    })?;
    match mismatch {
        None => Ok(()),
        Some(byte_offset) => Err(CheckFailure::Mismatch { byte_offset }),
    }
}

/// Reads `block_count` blocks from `lba` through `buffer`, one chunk at a time, and hands each
/// chunk's LBA and bytes to `consume`. The range is checked before anything is read.
fn for_each_chunk<P: Platform + ?Sized>(
    device: &mut dyn BlockDevice,
    platform: &P,
    buffer: DmaBuffer,
    lba: u64,
    block_count: u64,
    mut consume: impl FnMut(u64, &[u8]),
) -> Result<(), CheckFailure> {
    let geometry = device.geometry();
    let out_of_range = || CheckFailure::OutOfRange { block_count: geometry.block_count };
    if lba.checked_add(block_count).is_none_or(|end| end > geometry.block_count) {
        return Err(out_of_range());
    }
    let block_bytes = u64::from(geometry.logical_block_bytes);
    let chunk_blocks =
        (buffer.length_bytes as u64 / block_bytes).min(u64::from(geometry.max_request_blocks)).max(1);
    let mut next = lba;
    let mut remaining = block_count;
    while remaining > 0 {
        let blocks = remaining.min(chunk_blocks);
        let chunk = buffer.slice(0, (blocks * block_bytes) as usize).ok_or_else(out_of_range)?;
        read_checked(device, platform, chunk, next, blocks as u32, |bytes| consume(next, bytes))?;
        next += blocks;
        remaining -= blocks;
    }
    Ok(())
}

/// Reads `block_count` blocks at `lba` into `buffer` after poisoning it, and hands the bytes to
/// `consume` once every block is known to have been written by the device.
pub fn read_checked<P: Platform + ?Sized, R>(
    device: &mut dyn BlockDevice,
    platform: &P,
    buffer: DmaBuffer,
    lba: u64,
    block_count: u32,
    consume: impl FnOnce(&[u8]) -> R,
) -> Result<R, CheckFailure> {
    // The caller lends `buffer` to this check alone: no request is using it, and the device
    // writes it only during the read below.
    let region = DmaRegion::of_buffer(platform, buffer).map_err(CheckFailure::NotDmaMemory)?;
    fill_with_poison(&region);
    // The poison must be in memory before the device writes, or a later eviction could
    // overwrite the data with it.
    platform.clean_for_device(&buffer);
    read_blocking(device, platform, buffer, lba, block_count)?;
    platform.invalidate_for_cpu(&buffer);
    // The read completed: no device writes the buffer any more, and a copy is what the checks
    // read (no reference into DMA memory).
    let mut bytes = vec![0u8; buffer.length_bytes];
    region.read_bytes(0, &mut bytes);
    let block_bytes = bytes.len() / block_count.max(1) as usize;
    match bytes.chunks(block_bytes.max(1)).position(is_poison) {
        Some(block) => Err(CheckFailure::NotTransferred { lba: lba + block as u64 }),
        None => Ok(consume(&bytes)),
    }
}

fn fill_with_poison(region: &DmaRegion) {
    for offset_bytes in (0..region.length_bytes()).step_by(POISON.len()) {
        let length_bytes = POISON.len().min(region.length_bytes() - offset_bytes);
        region.write_bytes(offset_bytes, &POISON[..length_bytes]);
    }
}

fn is_poison(bytes: &[u8]) -> bool {
    bytes.iter().zip(POISON.iter().cycle()).all(|(byte, poison)| byte == poison)
}

/// One read through the block interface, waiting for its completion (bounded).
pub fn read_blocking<P: Platform + ?Sized>(
    device: &mut dyn BlockDevice,
    platform: &P,
    buffer: DmaBuffer,
    lba: u64,
    block_count: u32,
) -> Result<(), CheckFailure> {
    const TAG: u32 = 0x0c8c_0001;
    let request = Request { tag: TAG, operation: Operation::Read, lba, block_count, buffer };
    match complete_one(device, platform, request, READ_TIMEOUT_US) {
        Ok(result) => result.map_err(|error| CheckFailure::Failed { lba, error }),
        Err(WaitError::Refused(error)) => Err(CheckFailure::Refused(error)),
        Err(WaitError::Timeout) => Err(CheckFailure::Timeout { lba }),
    }
}

/// The logical blocks the region sample reads: up to [`REGION_SAMPLE_READS`] reads of
/// [`REGION_SAMPLE_BYTES`] (at least one block, at most what the buffer and one request take)
/// spread evenly from the region's first whole block to its last; (LBA, blocks) each.
pub fn region_sample_reads(
    region: Region,
    logical_block_bytes: u32,
    max_request_blocks: u32,
    buffer_bytes: usize,
) -> Vec<(u64, u32)> {
    let block_bytes = u64::from(logical_block_bytes.max(1));
    let wanted_blocks = REGION_SAMPLE_BYTES.div_ceil(block_bytes).max(1);
    let read_blocks =
        wanted_blocks.min(u64::from(max_request_blocks)).min(buffer_bytes as u64 / block_bytes).max(1);
    let first = region.offset_bytes.div_ceil(block_bytes);
    let end = (region.offset_bytes + region.size_bytes) / block_bytes;
    let slots = end.saturating_sub(first) / read_blocks;
    let reads = slots.min(u64::from(REGION_SAMPLE_READS));
    (0..reads)
        .map(|index| {
            let slot = if reads == 1 { 0 } else { index * (slots - 1) / (reads - 1) };
            (first + slot * read_blocks, read_blocks as u32)
        })
        .collect()
}

/// Reads a few blocks spread over `region` and reports whether they all read as zeros; stops at
/// the first failed read, which is returned too.
pub fn sample_region<P: Platform + ?Sized>(
    device: &mut dyn BlockDevice,
    platform: &P,
    buffer: DmaBuffer,
    region: Region,
) -> (RegionSample, Option<CheckFailure>) {
    let geometry = device.geometry();
    let reads = region_sample_reads(
        region,
        geometry.logical_block_bytes,
        geometry.max_request_blocks,
        buffer.length_bytes,
    );
    let mut sample = RegionSample {
        region_offset_bytes: region.offset_bytes,
        region_size_bytes: region.size_bytes,
        reads: 0,
        read_bytes: reads
            .first()
            .map_or(0, |&(_, blocks)| u64::from(blocks) * u64::from(geometry.logical_block_bytes)),
        failed: 0,
        all_zero: false,
    };
    let mut all_zero = true;
    for (lba, blocks) in reads {
        sample.reads += 1;
        let Some(chunk) = buffer.slice(0, sample.read_bytes as usize) else {
            break;
        };
        match read_checked(device, platform, chunk, lba, blocks, |bytes| bytes.iter().all(|&byte| byte == 0))
        {
            Ok(zeros) => all_zero &= zeros,
            Err(failure) => {
                sample.failed += 1;
                return (sample, Some(failure));
            }
        }
    }
    sample.all_zero = all_zero && sample.reads > sample.failed;
    (sample, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockdev::{Completion, Geometry, SubmitError};
    use hal::testing::ArenaPlatform;

    /// What the fake device does with a read.
    #[derive(Clone, Copy, PartialEq)]
    enum Answer {
        /// Writes the test pattern, as a disk made by `barebench qemu --nvme SIZE:pattern`.
        Pattern,
        /// Writes zeros, as a deallocated region.
        Zeros,
        /// Reports success and writes nothing.
        NothingTransferred,
    }

    /// Writes what it answers into the request's buffer by DMA, as a disk does.
    struct FakeDisk<'p> {
        platform: &'p ArenaPlatform,
        answer: Answer,
        pending: Option<Request>,
        reads: Vec<(u64, u32)>,
    }

    impl<'p> FakeDisk<'p> {
        fn new(platform: &'p ArenaPlatform, answer: Answer) -> Self {
            FakeDisk { platform, answer, pending: None, reads: Vec::new() }
        }
    }

    impl BlockDevice for FakeDisk<'_> {
        fn name(&self) -> &str {
            "nvme0"
        }
        fn geometry(&self) -> Geometry {
            Geometry {
                logical_block_bytes: 512,
                block_count: 1 << 20,
                max_request_blocks: 256,
                max_in_flight: 1,
            }
        }
        fn submit(&mut self, request: Request) -> Result<(), (Request, SubmitError)> {
            self.reads.push((request.lba, request.block_count));
            self.pending = Some(request);
            Ok(())
        }
        fn kick(&mut self) {}
        fn poll(&mut self, completions: &mut [Completion]) -> usize {
            let Some(request) = self.pending.take() else {
                return 0;
            };
            let mut sector = [0u8; 512];
            for index in 0..request.block_count as usize {
                match self.answer {
                    Answer::Pattern => {
                        blockdev::pattern::fill_sector(request.lba + index as u64, &mut sector)
                    }
                    Answer::Zeros => sector.fill(0),
                    Answer::NothingTransferred => continue,
                }
                let physical_address = request.buffer.physical_address + (index * 512) as u64;
                assert!(self.platform.device_write(physical_address, &sector), "the buffer is arena memory");
            }
            completions[0] = Completion { tag: request.tag, result: Ok(()) };
            1
        }
    }

    fn pattern_crc(lba: u64, count: u64) -> u32 {
        let mut crc = Crc32::new();
        let mut sector = [0u8; 512];
        for sector_lba in lba..lba + count {
            blockdev::pattern::fill_sector(sector_lba, &mut sector);
            crc.update(&sector);
        }
        crc.finish()
    }

    #[test]
    fn checks_of_a_disk_that_transfers_data_pass() {
        let platform = ArenaPlatform::new(1 << 20);
        let buffer = platform.allocate_dma(64 << 10, 4096).unwrap();
        let mut disk = FakeDisk::new(&platform, Answer::Pattern);
        assert_eq!(crc_of_blocks(&mut disk, &platform, buffer, 1000, 300).unwrap(), pattern_crc(1000, 300));
        assert!(verify_blocks(&mut disk, &platform, buffer, 5, 129).is_ok());
        // 64 KiB chunks of 128 blocks (the buffer), whatever the request limit.
        assert_eq!(&disk.reads[..3], &[(1000, 128), (1128, 128), (1256, 44)]);
    }

    #[test]
    fn a_read_that_reports_success_without_data_fails_both_checks() {
        let platform = ArenaPlatform::new(1 << 20);
        let buffer = platform.allocate_dma(64 << 10, 4096).unwrap();
        // The buffer first holds exactly what the device would have sent: only the poison
        // tells a transfer that never happened from one that did.
        let mut pattern = FakeDisk::new(&platform, Answer::Pattern);
        verify_blocks(&mut pattern, &platform, buffer, 0, 128).unwrap();
        let mut silent = FakeDisk::new(&platform, Answer::NothingTransferred);
        let failure = verify_blocks(&mut silent, &platform, buffer, 0, 128).unwrap_err();
        assert!(matches!(failure, CheckFailure::NotTransferred { lba: 0 }), "{failure}");
        let failure = crc_of_blocks(&mut silent, &platform, buffer, 77, 3).unwrap_err();
        assert!(matches!(failure, CheckFailure::NotTransferred { lba: 77 }), "{failure}");
        assert!(failure.to_string().contains("reported success but transferred no data"));
        assert!(platform.clean_calls.get() >= 3, "the poison is cleaned to memory before each read");
    }

    #[test]
    fn the_region_sample_reads_spread_blocks_and_sees_zeros() {
        let region = Region { offset_bytes: 1 << 20, size_bytes: 256 << 20 };
        let reads = region_sample_reads(region, 512, 256, 1 << 20);
        assert_eq!(reads.len(), 64);
        assert_eq!(reads[0], (2048, 8));
        assert_eq!(reads[63], (2048 + (256 << 11) - 8, 8));
        assert!(reads.windows(2).all(|pair| pair[1].0 > pair[0].0 + 8));
        // A region of three 4 KiB reads, an unaligned start, a 4 KiB-block device, a tiny buffer.
        assert_eq!(
            region_sample_reads(Region { offset_bytes: 100, size_bytes: 12_700 }, 512, 256, 1 << 20).len(),
            3
        );
        assert_eq!(
            region_sample_reads(Region { offset_bytes: 0, size_bytes: 1 << 30 }, 4096, 256, 1 << 20)[1].1,
            1
        );
        assert_eq!(
            region_sample_reads(Region { offset_bytes: 0, size_bytes: 1 << 30 }, 512, 256, 1024)[0].1,
            2
        );
        assert!(region_sample_reads(Region { offset_bytes: 0, size_bytes: 100 }, 512, 256, 4096).is_empty());

        let platform = ArenaPlatform::new(1 << 20);
        let buffer = platform.allocate_dma(64 << 10, 4096).unwrap();
        let mut zeros = FakeDisk::new(&platform, Answer::Zeros);
        let (sample, failure) = sample_region(&mut zeros, &platform, buffer, region);
        assert!(failure.is_none());
        assert_eq!((sample.reads, sample.read_bytes, sample.failed, sample.all_zero), (64, 4096, 0, true));
        assert!(sample.looks_deallocated());
        assert_eq!(zeros.reads, reads);

        let mut pattern = FakeDisk::new(&platform, Answer::Pattern);
        let (sample, _) = sample_region(&mut pattern, &platform, buffer, region);
        assert!(!sample.all_zero && !sample.looks_deallocated());

        // A zeroed buffer and a device that writes nothing is not an empty disk.
        platform.cpu_fill(&buffer, 0);
        let mut silent = FakeDisk::new(&platform, Answer::NothingTransferred);
        let (sample, failure) = sample_region(&mut silent, &platform, buffer, region);
        assert!(matches!(failure, Some(CheckFailure::NotTransferred { lba: 2048 })));
        assert_eq!((sample.reads, sample.failed, sample.all_zero), (1, 1, false));
        assert!(!sample.looks_deallocated());
    }
}
