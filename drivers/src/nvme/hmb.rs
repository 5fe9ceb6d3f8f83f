//! The Host Memory Buffer (NVMe Base Specification 1.4 §8.9; Set Features Host Memory Buffer,
//! Feature Identifier 0Dh, §5.21.1.13). A DRAM-less SSD asks for host memory for its mapping
//! tables: Identify Controller HMPRE (preferred) and HMMIN (minimum) in 4 KiB units, HMMINDS (the
//! smallest descriptor entry) and HMMAXD (most entries). The host gives it a list of 16-byte
//! descriptors (address aligned to the memory page size, size in pages) with CDW11 EHM = 1,
//! CDW12 HSIZE (pages), CDW13/14 the list's bus address (16-byte aligned) and CDW15 the entry
//! count, and takes it back with EHM = 0 before the memory goes away.
//!
//! Mainline Linux gives every controller one (`drivers/nvme/host/pci.c`, `nvme_setup_host_mem`,
//! up to `max_host_mem_size_mb`, 128 MiB); Raspberry Pi OS boots with
//! `nvme.max_host_mem_size_mb=0` (raspberrypi/linux#7635's command line), so drives there
//! run without. barebench follows Raspberry Pi OS unless `nvme.hmb=MiB` asks for one; it is taken
//! back at shutdown.
//!
//! The DMA pool is a bump allocator that never frees, which shapes two rules Linux does not need
//! (its buffer comes from `dma_alloc_attrs` and is freed again by `nvme_free_host_mem` when
//! Set Features fails):
//! - the buffer is planned from what the pool has left before anything is allocated
//!   ([`HmbPlan`]): a pool that cannot give HMMIN loses nothing to the attempt. When the
//!   controller refuses the buffer, [`HmbOutcome::Refused`] tells the pool's owner that the memory
//!   taken for it is unused (the kernel rewinds its pool to where it stood before the call);
//! - the buffer comes after the I/O queues (Linux's `nvme_probe` sets it up just before
//!   `nvme_setup_io_queues`), so a buffer that takes most of the pool cannot leave the queues
//!   without memory: it gets what they left.
#![forbid(unsafe_code)]

use super::command::{admin_opcode, feature, SubmissionEntry};
use super::status::Status;
use alloc::vec::Vec;
use core::fmt;
use hal::dma::{DmaAllocation, DmaRegionError};
use hal::platform::{BusTranslation, Platform};

/// Bytes of one descriptor entry.
pub const DESCRIPTOR_BYTES: usize = 16;
/// Entries the driver's one-page list holds.
pub const MAX_DESCRIPTORS: usize = 4096 / DESCRIPTOR_BYTES;
/// HMPRE, HMMIN and HMMINDS count 4 KiB units whatever the memory page size.
pub const UNIT_BYTES: u64 = 4096;
/// The largest piece of the buffer (Linux starts at the largest it can get and halves; the pool
/// here is one contiguous bump allocator, so pieces of this size keep the list short).
pub const LARGEST_CHUNK_BYTES: u64 = 16 << 20;
/// CDW11: Enable Host Memory (bit 0).
const ENABLE_HOST_MEMORY: u32 = 1;

/// What the controller asks for (Identify Controller bytes 272-279, 332-337).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HmbRequest {
    pub preferred_bytes: u64,
    pub minimum_bytes: u64,
    /// Smallest descriptor entry (0: any).
    pub minimum_descriptor_bytes: u64,
    /// Most descriptor entries (0: no limit).
    pub max_descriptors: u16,
}

impl HmbRequest {
    pub fn offered(&self) -> bool {
        self.preferred_bytes > 0
    }
}

/// `HMPRE 64 MiB, HMMIN 16 MiB` for the identity line.
impl fmt::Display for HmbRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.offered() {
            return write!(f, "no host memory buffer (HMPRE 0)");
        }
        write!(
            f,
            "host memory buffer HMPRE {} KiB, HMMIN {} KiB",
            self.preferred_bytes >> 10,
            self.minimum_bytes >> 10
        )
    }
}

/// What `nvme.hmb=` led to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HmbOutcome {
    /// The controller does not ask for one.
    NotOffered,
    /// `nvme.hmb=off` (the default): none given, as Raspberry Pi OS.
    Off { request: HmbRequest },
    /// Less than the controller's minimum was allowed (or could be allocated): none given.
    BelowMinimum { request: HmbRequest, available_bytes: u64 },
    /// Asked for before any I/O queue exists: none given (the queues come first).
    BeforeIoQueues,
    /// The controller refused Set Features 0Dh with `status`: none given, and the `bytes` taken
    /// for it (buffer and list) are unused; the driver keeps none of it.
    Refused { bytes: u64, status: Status },
    /// Given: `bytes` in `descriptors` pieces.
    Enabled { bytes: u64, descriptors: usize },
}

impl HmbOutcome {
    /// Whether DMA memory was taken for a buffer that neither the driver nor the controller
    /// uses: the pool's owner may take back what it handed out during the setup.
    pub fn left_memory_unused(&self) -> bool {
        matches!(self, HmbOutcome::Refused { .. })
    }
}

impl fmt::Display for HmbOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HmbOutcome::NotOffered => write!(f, "the controller asks for no host memory buffer"),
            HmbOutcome::Off { request } => write!(
                f,
                "host memory buffer off (nvme.hmb=off, as Raspberry Pi OS); the controller would take {} KiB",
                request.preferred_bytes >> 10
            ),
            HmbOutcome::BelowMinimum { request, available_bytes } => write!(
                f,
                "no host memory buffer: {} KiB available, the controller needs at least {} KiB (HMMIN)",
                available_bytes >> 10,
                request.minimum_bytes >> 10
            ),
            HmbOutcome::BeforeIoQueues => write!(
                f,
                "no host memory buffer before the I/O queues: it gets what the DMA pool has left after them"
            ),
            HmbOutcome::Refused { bytes, status } => write!(
                f,
                "no host memory buffer: the controller refused {} KiB (Set Features 0Dh: {status})",
                bytes >> 10
            ),
            HmbOutcome::Enabled { bytes, descriptors } => write!(
                f,
                "host memory buffer of {} KiB given in {descriptors} piece{} (Set Features 0Dh)",
                bytes >> 10,
                if *descriptors == 1 { "" } else { "s" }
            ),
        }
    }
}

/// The pieces a buffer will be made of, worked out from what the pool has left before any of
/// it is allocated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HmbPlan {
    pub piece_bytes: Vec<u64>,
}

impl HmbPlan {
    /// Up to `limit_bytes` (capped by HMPRE and by `pool_room_bytes` less the descriptor list and
    /// one page of alignment), in pieces of at least HMMINDS and at most [`LARGEST_CHUNK_BYTES`]
    /// (unless HMMINDS is larger), at most HMMAXD of them, each a whole number of pages;
    /// `Err(bytes)` when less than HMMIN (or nothing) would come together.
    pub fn new(
        request: &HmbRequest,
        limit_bytes: u64,
        pool_room_bytes: u64,
        page_bytes: usize,
    ) -> Result<Self, u64> {
        let page = page_bytes as u64;
        let list_bytes = (MAX_DESCRIPTORS * DESCRIPTOR_BYTES) as u64;
        // Page-sized, page-aligned requests follow each other without gaps: only the first one
        // may lose up to a page to alignment.
        let room = pool_room_bytes.saturating_sub(page + list_bytes.next_multiple_of(page));
        let wanted = request.preferred_bytes.min(limit_bytes).min(room) / page * page;
        let max_pieces = match request.max_descriptors {
            0 => MAX_DESCRIPTORS,
            most => usize::from(most).min(MAX_DESCRIPTORS),
        };
        let smallest_piece = request.minimum_descriptor_bytes.max(page).next_multiple_of(page);
        let largest_piece = LARGEST_CHUNK_BYTES.max(smallest_piece);
        let mut piece_bytes = Vec::new();
        let mut left = wanted;
        while left >= smallest_piece && piece_bytes.len() < max_pieces {
            let piece = left.min(largest_piece);
            piece_bytes.push(piece);
            left -= piece;
        }
        let bytes: u64 = piece_bytes.iter().sum();
        if bytes == 0 || bytes < request.minimum_bytes {
            return Err(bytes);
        }
        Ok(HmbPlan { piece_bytes })
    }

    pub fn bytes(&self) -> u64 {
        self.piece_bytes.iter().sum()
    }
}

/// The memory given to the controller, and its descriptor list.
pub struct HostMemoryBuffer<'p> {
    pub list: DmaAllocation<'p>,
    pub chunks: Vec<DmaAllocation<'p>>,
    pub bytes: u64,
}

impl<'p> HostMemoryBuffer<'p> {
    /// Allocates the planned pieces, each aligned to the memory page size, and writes the
    /// descriptor list; `Err` when the pool gives less than [`Platform::dma_remaining_bytes`]
    /// reported (what was allocated before then stays taken: the plan leaves a page of slack so
    /// that this does not happen).
    pub fn allocate<P: Platform>(
        platform: &'p P,
        dma: &BusTranslation,
        page_bytes: usize,
        plan: &HmbPlan,
    ) -> Result<Self, DmaRegionError> {
        let list = DmaAllocation::new(platform, dma, MAX_DESCRIPTORS * DESCRIPTOR_BYTES, page_bytes)?;
        let mut chunks = Vec::with_capacity(plan.piece_bytes.len());
        for &bytes in &plan.piece_bytes {
            chunks.push(DmaAllocation::new(platform, dma, bytes as usize, page_bytes)?);
        }
        for (index, chunk) in chunks.iter().enumerate() {
            let entry = index * DESCRIPTOR_BYTES;
            list.region.write_u64(entry, chunk.bus_address);
            let pages = (chunk.region.length_bytes() / page_bytes) as u32;
            list.region.write_words(entry + 8, &[pages, 0]);
        }
        platform.clean_for_device(&list.region.buffer());
        Ok(HostMemoryBuffer { list, chunks, bytes: plan.bytes() })
    }

    /// Bytes taken from the pool: the buffer and its list.
    pub fn taken_bytes(&self) -> u64 {
        self.bytes + self.list.region.length_bytes() as u64
    }

    /// Set Features Host Memory Buffer with EHM = 1 for this memory.
    pub fn enable_command(&self, page_bytes: usize) -> SubmissionEntry {
        set_host_memory_buffer(
            ENABLE_HOST_MEMORY,
            (self.bytes / page_bytes as u64) as u32,
            self.list.bus_address,
            self.chunks.len() as u32,
        )
    }
}

/// Set Features Host Memory Buffer with EHM = 0: the controller stops using the memory.
pub fn disable_command() -> SubmissionEntry {
    set_host_memory_buffer(0, 0, 0, 0)
}

fn set_host_memory_buffer(cdw11: u32, size_pages: u32, list_bus: u64, entries: u32) -> SubmissionEntry {
    let mut entry = SubmissionEntry::new(admin_opcode::SET_FEATURES, 0);
    entry.dwords[10] = u32::from(feature::HOST_MEMORY_BUFFER);
    entry.dwords[11] = cdw11;
    entry.dwords[12] = size_pages;
    entry.dwords[13] = list_bus as u32;
    entry.dwords[14] = (list_bus >> 32) as u32;
    entry.dwords[15] = entries;
    entry
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn request(preferred_mib: u64, minimum_mib: u64, smallest_kib: u64, most: u16) -> HmbRequest {
        HmbRequest {
            preferred_bytes: preferred_mib * MIB,
            minimum_bytes: minimum_mib * MIB,
            minimum_descriptor_bytes: smallest_kib << 10,
            max_descriptors: most,
        }
    }

    #[test]
    fn plans_fit_the_room_left_after_the_list_and_one_page_of_alignment() {
        let plan = HmbPlan::new(&request(64, 8, 64, 0), 64 * MIB, 40 * MIB, 4096).unwrap();
        assert_eq!(plan.piece_bytes, [16 * MIB, 16 * MIB, 8 * MIB - 8192]);
        assert_eq!(plan.bytes(), 40 * MIB - 8192);
        // The limit and HMPRE cap it as well.
        assert_eq!(HmbPlan::new(&request(64, 8, 64, 0), 20 * MIB, 1 << 40, 4096).unwrap().bytes(), 20 * MIB);
        assert_eq!(HmbPlan::new(&request(12, 8, 64, 0), 64 * MIB, 1 << 40, 4096).unwrap().bytes(), 12 * MIB);
    }

    #[test]
    fn plans_keep_within_hmmaxd_and_hmminds_and_refuse_below_hmmin() {
        // HMMAXD 2: two 16 MiB pieces of the 40 MiB wanted.
        let plan = HmbPlan::new(&request(40, 8, 0, 2), 40 * MIB, 1 << 40, 4096).unwrap();
        assert_eq!(plan.piece_bytes, [16 * MIB, 16 * MIB]);
        // HMMINDS 32 MiB: one piece of 32 MiB, the remaining 8 MiB are too small for a second.
        let plan = HmbPlan::new(&request(40, 8, 32 << 10, 0), 40 * MIB, 1 << 40, 4096).unwrap();
        assert_eq!(plan.piece_bytes, [32 * MIB]);
        // 8 MiB wanted, the room holds less: the byte count that would have come together.
        assert_eq!(HmbPlan::new(&request(32, 8, 64, 0), 32 * MIB, 6 * MIB, 4096), Err(6 * MIB - 8192));
        assert_eq!(HmbPlan::new(&request(32, 8, 64, 0), 32 * MIB, 4096, 4096), Err(0));
    }
}
