//! The kernel's side of `hal::platform::Platform`: the generic timer, the DMA pool (mapped
//! normal non-cacheable, handed out by a bump allocator that never frees: drivers allocate at
//! bring-up; the memory of an NVMe host memory buffer the controller refused is rewound),
//! data-cache maintenance for memory outside the pool, and the benchmark's CPU access to its
//! buffers in the pool.

use super::sync::SingleCoreCell;
use super::timer::KernelTimer;
use crate::board::Span;
use blockdev::{Clock, DmaBuffer};
use drivers::nvme::hmb::HmbOutcome;
use drivers::nvme::{Controller, NvmeError};
use hal::mmio::RegisterIo;
use hal::platform::{DmaAllocationError, Platform};

/// A point of the DMA pool's bump allocator (see [`KernelPlatform::pool_mark`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolMark(u64);

pub struct KernelPlatform {
    timer: KernelTimer,
    pool: Span,
    next_free: SingleCoreCell<u64>,
}

impl KernelPlatform {
    /// # Safety
    /// `pool` must be RAM mapped normal non-cacheable that nothing else uses.
    pub unsafe fn new(timer: KernelTimer, pool: Span) -> Self {
        KernelPlatform { timer, pool, next_free: SingleCoreCell::new(pool.base) }
    }

    pub fn timer(&self) -> KernelTimer {
        self.timer
    }

    pub fn pool(&self) -> Span {
        self.pool
    }

    /// `controller.set_up_host_memory_buffer(limit_mib)` (`nvme.hmb=`), with the memory of a
    /// buffer the controller refused taken back off the pool.
    pub fn set_up_host_memory_buffer<R: RegisterIo + Clone>(
        &self,
        controller: &mut Controller<'_, R, KernelPlatform>,
        limit_mib: Option<u64>,
    ) -> Result<HmbOutcome, NvmeError> {
        let mark = self.pool_mark();
        let outcome = controller.set_up_host_memory_buffer(limit_mib)?;
        if outcome.left_memory_unused() {
            // SAFETY: for this outcome the driver keeps nothing it allocated during the call and
            // the controller refused the buffer, so no device reaches that memory; nothing else
            // allocated from the pool during the call.
            unsafe { self.rewind_pool(mark) };
        }
        Ok(outcome)
    }

    /// Where the next allocation starts: a mark [`KernelPlatform::rewind_pool`] can go back to.
    fn pool_mark(&self) -> PoolMark {
        PoolMark(self.next_free.with(|next| *next).unwrap_or(self.pool.end()))
    }

    /// Takes back everything handed out since `mark` (a bring-up step that allocated and then
    /// found its memory unused, such as a host memory buffer the controller refused).
    ///
    /// # Safety
    /// Nothing allocated since `mark` may still be in use, by the CPU or by a device: no region
    /// made from it is kept anywhere, and no device was left able to reach it.
    unsafe fn rewind_pool(&self, mark: PoolMark) {
        self.next_free.with(|next| {
            if (self.pool.base..=*next).contains(&mark.0) {
                *next = mark.0;
            }
        });
    }

    #[inline]
    fn in_pool(&self, buffer: &DmaBuffer) -> bool {
        let start = buffer.physical_address;
        let end = start.checked_add(buffer.length_bytes as u64);
        start >= self.pool.base && end.is_some_and(|end| end <= self.pool.end())
    }
}

impl Clock for KernelPlatform {
    fn now_ticks(&self) -> u64 {
        self.timer.now_ticks()
    }

    fn ticks_per_second(&self) -> u64 {
        self.timer.ticks_per_second()
    }
}

// SAFETY: `new`'s caller hands over a pool of RAM that nothing else uses, mapped normal
// non-cacheable and identity-mapped (CPU address = physical address); the bump allocator hands
// out each byte once (`rewind_pool` takes back only memory nothing holds), zeroes what it hands
// out, and the cache maintenance below cleans or invalidates by address for anything outside
// the pool (docs/architecture.md, "How a driver sees hardware").
unsafe impl Platform for KernelPlatform {
    fn allocate_dma(
        &self,
        length_bytes: usize,
        alignment_bytes: usize,
    ) -> Result<DmaBuffer, DmaAllocationError> {
        let alignment = alignment_bytes.max(64) as u64;
        let error = |remaining_bytes| DmaAllocationError {
            requested_bytes: length_bytes,
            alignment_bytes,
            remaining_bytes,
        };
        let start = self
            .next_free
            .with(|next| {
                let start = next.div_ceil(alignment) * alignment;
                let end = start.checked_add(length_bytes as u64).filter(|end| *end <= self.pool.end());
                match end {
                    Some(end) => {
                        *next = end;
                        Ok(start)
                    }
                    None => Err(error((self.pool.end() - *next) as usize)),
                }
            })
            .unwrap_or(Err(error(0)))?;
        // SAFETY: [start, start + length) was just carved out of the pool, which the caller of
        // `new` guaranteed is mapped RAM used by nothing else.
        unsafe { core::ptr::write_bytes(start as usize as *mut u8, 0, length_bytes) };
        Ok(DmaBuffer { cpu_address: start as usize, physical_address: start, length_bytes })
    }

    fn dma_remaining_bytes(&self) -> u64 {
        self.next_free.with(|next| self.pool.end() - *next).unwrap_or(0)
    }

    /// The pool is Normal non-cacheable: nothing to clean (the driver's store barrier orders the
    /// writes before its doorbell). Elsewhere `dc cvac` by line, then DSB.
    fn clean_for_device(&self, buffer: &DmaBuffer) {
        if !self.in_pool(buffer) {
            hal::cache::clean_data_cache_range(buffer.cpu_address, buffer.length_bytes);
        }
    }

    /// The pool is Normal non-cacheable: nothing to invalidate (the driver's load barrier orders
    /// the reads after the completion). Elsewhere `dc civac` by line, then DSB.
    #[inline]
    fn invalidate_for_cpu(&self, buffer: &DmaBuffer) {
        if !self.in_pool(buffer) {
            hal::cache::invalidate_data_cache_range(buffer.cpu_address, buffer.length_bytes);
        }
    }

    /// The pool is Normal non-cacheable: its buffers need no clean or invalidate.
    fn needs_cache_maintenance(&self, buffer: &DmaBuffer) -> bool {
        !self.in_pool(buffer)
    }

    /// Everything `allocate_dma` hands out lies in the pool, identity-mapped.
    fn is_dma_memory(&self, buffer: &DmaBuffer) -> bool {
        self.in_pool(buffer) && buffer.cpu_address as u64 == buffer.physical_address
    }
}

/// The benchmark's CPU access to its DMA buffers: the data of write jobs and the checks of
/// what reads return, with the cache maintenance DMA needs around it.
pub struct DmaBufferMemory<'p> {
    pub platform: &'p KernelPlatform,
}

impl bench::buffers::BufferMemory for DmaBufferMemory<'_> {
    fn with_bytes(&self, buffer: &DmaBuffer, access: &mut dyn FnMut(&mut [u8])) {
        assert!(self.platform.is_dma_memory(buffer), "the benchmark's buffers come from the DMA pool");
        self.platform.invalidate_for_cpu(buffer);
        // SAFETY: the buffer lies in this platform's pool (checked above), identity-mapped; the
        // runner only hands over parts of its own DMA buffer area that no request is using (before a write is submitted, after a read
        // completed), so no device accesses the bytes while the slice lives; the slice exists
        // only for the call, and nothing else makes a reference to them meanwhile.
        let bytes =
            unsafe { core::slice::from_raw_parts_mut(buffer.cpu_address as *mut u8, buffer.length_bytes) };
        access(bytes);
        self.platform.clean_for_device(buffer);
    }
}
