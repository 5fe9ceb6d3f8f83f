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
#![forbid(unsafe_code)]

use super::command::{admin_opcode, feature, SubmissionEntry};
use alloc::vec::Vec;
use core::fmt;
use hal::dma::DmaAllocation;
use hal::platform::{BusTranslation, Platform};

/// Bytes of one descriptor entry.
pub const DESCRIPTOR_BYTES: usize = 16;
/// Entries the driver's one-page list holds.
pub const MAX_DESCRIPTORS: usize = 4096 / DESCRIPTOR_BYTES;
/// HMPRE, HMMIN and HMMINDS count 4 KiB units whatever the memory page size.
pub const UNIT_BYTES: u64 = 4096;
/// The largest piece asked of the DMA pool at once (Linux starts at the largest it can get and
/// halves; the pool here is a bump allocator, so pieces are tried from this size down).
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
    /// Given: `bytes` in `descriptors` pieces.
    Enabled { bytes: u64, descriptors: usize },
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
            HmbOutcome::Enabled { bytes, descriptors } => write!(
                f,
                "host memory buffer of {} KiB given in {descriptors} piece{} (Set Features 0Dh)",
                bytes >> 10,
                if *descriptors == 1 { "" } else { "s" }
            ),
        }
    }
}

/// The memory given to the controller, and its descriptor list.
pub struct HostMemoryBuffer<'p> {
    pub list: DmaAllocation<'p>,
    pub chunks: Vec<DmaAllocation<'p>>,
    pub bytes: u64,
}

impl<'p> HostMemoryBuffer<'p> {
    /// Allocates up to `limit_bytes` (capped by HMPRE) in pieces of at least HMMINDS and at most
    /// HMMAXD of them, each aligned to the memory page size; `Err(available)` when less than
    /// HMMIN came together.
    pub fn allocate<P: Platform>(
        platform: &'p P,
        dma: &BusTranslation,
        page_bytes: usize,
        request: &HmbRequest,
        limit_bytes: u64,
    ) -> Result<Self, u64> {
        let page = page_bytes as u64;
        let wanted = request.preferred_bytes.min(limit_bytes) / page * page;
        let max_pieces = match request.max_descriptors {
            0 => MAX_DESCRIPTORS,
            most => usize::from(most).min(MAX_DESCRIPTORS),
        };
        let smallest_piece = request.minimum_descriptor_bytes.max(page);
        let list = DmaAllocation::new(platform, dma, MAX_DESCRIPTORS * DESCRIPTOR_BYTES, page_bytes)
            .map_err(|_| 0u64)?;
        let mut chunks = Vec::new();
        let mut bytes = 0u64;
        let mut piece = wanted.min(LARGEST_CHUNK_BYTES);
        while bytes < wanted && chunks.len() < max_pieces && piece >= smallest_piece {
            let size = piece.min(wanted - bytes).max(smallest_piece) / page * page;
            match DmaAllocation::new(platform, dma, size as usize, page_bytes) {
                Ok(chunk) => {
                    bytes += size;
                    chunks.push(chunk);
                }
                Err(_) => piece /= 2,
            }
        }
        if bytes == 0 || bytes < request.minimum_bytes {
            return Err(bytes);
        }
        for (index, chunk) in chunks.iter().enumerate() {
            let entry = index * DESCRIPTOR_BYTES;
            list.region.write_u64(entry, chunk.bus_address);
            let pages = (chunk.region.length_bytes() / page_bytes) as u32;
            list.region.write_words(entry + 8, &[pages, 0]);
        }
        platform.clean_for_device(&list.region.buffer());
        Ok(HostMemoryBuffer { list, chunks, bytes })
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
