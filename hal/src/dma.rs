//! The CPU's only way into memory a device reads or writes by DMA: NVMe queues, PRP lists and
//! identify data, SDHCI ADMA2 descriptor tables, xHCI rings, contexts and wrappers, and the data
//! the SD hosts move by PIO. Every access is volatile and copies in or out: no Rust reference into
//! DMA memory ever exists, because the device reads and writes the same bytes behind the
//! compiler's back (docs/architecture.md, "How a driver sees hardware"; the Rust reference,
//! "Behavior considered undefined", on references to memory changed by others).
//!
//! A [`DmaRegion`] borrows the platform that handed its memory out, so the compiler keeps it from
//! outliving that memory, and it is made safely: from fresh platform memory
//! ([`DmaRegion::allocate`], or [`DmaAllocation::new`] with the bus address the device uses), or
//! from a buffer the platform confirms is its DMA memory ([`DmaRegion::of_buffer`]: a request's
//! data). The unsafe promises are the platform's ([`Platform`] is an unsafe trait), as in
//! rcore-os/virtio-drivers, whose `Dma<H>` is created safely from its `Hal`.

use crate::platform::{BusTranslation, DmaAllocationError, Platform, UnreachableAddress};
use blockdev::DmaBuffer;
use core::marker::PhantomData;
use core::ptr;

/// A DMA buffer the CPU reads and writes with volatile copies, valid while the platform borrow
/// `'p` lasts. It is `Copy`: copies name the same bytes and hand out no references, so they cannot
/// alias in the sense Rust forbids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaRegion<'p> {
    buffer: DmaBuffer,
    platform: PhantomData<&'p ()>,
}

/// DMA memory a driver allocated for its own structures (queues, rings, tables, wrappers): the
/// region the CPU reaches and the address its device uses for the same bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaAllocation<'p> {
    pub region: DmaRegion<'p>,
    pub bus_address: u64,
}

/// DMA memory for a driver's own structures could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DmaRegionError {
    #[error("{0}")]
    Allocation(DmaAllocationError),
    #[error("{0}")]
    Unreachable(UnreachableAddress),
}

/// A buffer that is not the platform's DMA memory, so the CPU may not reach it through a region.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{physical_address:#x}+{length_bytes:#x} is not DMA memory of this platform")]
pub struct ForeignBuffer {
    pub physical_address: u64,
    pub length_bytes: usize,
}

impl<'p> DmaAllocation<'p> {
    /// Fresh, zeroed DMA memory for a driver's own structures, aligned to `alignment_bytes` and
    /// checked to be reachable through `translation`.
    pub fn new<P: Platform + ?Sized>(
        platform: &'p P,
        translation: &BusTranslation,
        length_bytes: usize,
        alignment_bytes: usize,
    ) -> Result<DmaAllocation<'p>, DmaRegionError> {
        let region = DmaRegion::allocate(platform, length_bytes, alignment_bytes)
            .map_err(DmaRegionError::Allocation)?;
        let bus_address = translation
            .to_bus(region.physical_address(), region.length_bytes() as u64)
            .map_err(DmaRegionError::Unreachable)?;
        Ok(DmaAllocation { region, bus_address })
    }
}

/// The panic of an access outside its region, out of line: the accesses on every I/O's path
/// (queue entries, completions) stay a compare and a branch, with no message built around them.
#[cold]
#[inline(never)]
fn misplaced_access(offset_bytes: usize, length_bytes: usize, region_bytes: usize) -> ! {
    panic!(
        "DMA access at {offset_bytes:#x} ({length_bytes} bytes) outside or misaligned in a {region_bytes:#x}-byte region"
    )
}

impl<'p> DmaRegion<'p> {
    /// Fresh, zeroed DMA memory of `length_bytes`, aligned to `alignment_bytes`.
    pub fn allocate<P: Platform + ?Sized>(
        platform: &'p P,
        length_bytes: usize,
        alignment_bytes: usize,
    ) -> Result<DmaRegion<'p>, DmaAllocationError> {
        let buffer = platform.allocate_dma(length_bytes, alignment_bytes)?;
        // `Platform` is an unsafe trait whose implementors promise that `allocate_dma` returns
        // valid memory, given to no one else, that stays valid while the platform lives; the
        // region borrows the platform for `'p`.
        Ok(DmaRegion { buffer, platform: PhantomData })
    }

    /// The region of `buffer` (a request's data), when `platform` confirms it lies in DMA memory
    /// it handed out: memory that stays valid while the platform lives.
    pub fn of_buffer<P: Platform + ?Sized>(
        platform: &'p P,
        buffer: DmaBuffer,
    ) -> Result<DmaRegion<'p>, ForeignBuffer> {
        if !platform.is_dma_memory(&buffer) {
            return Err(ForeignBuffer {
                physical_address: buffer.physical_address,
                length_bytes: buffer.length_bytes,
            });
        }
        Ok(DmaRegion { buffer, platform: PhantomData })
    }

    pub fn buffer(&self) -> DmaBuffer {
        self.buffer
    }

    pub fn physical_address(&self) -> u64 {
        self.buffer.physical_address
    }

    pub fn length_bytes(&self) -> usize {
        self.buffer.length_bytes
    }

    /// The sub-range `[offset, offset + length)` as a region of the same memory, or `None` when
    /// it does not fit.
    pub fn subregion(&self, offset_bytes: usize, length_bytes: usize) -> Option<DmaRegion<'p>> {
        let buffer = self.buffer.slice(offset_bytes, length_bytes)?;
        Some(DmaRegion { buffer, platform: PhantomData })
    }

    /// The sub-range `[offset, offset + length)` as a buffer (for cache maintenance).
    pub fn slice(&self, offset_bytes: usize, length_bytes: usize) -> DmaBuffer {
        self.buffer.slice(offset_bytes, length_bytes).unwrap_or_else(|| {
            panic!(
                "DMA slice {offset_bytes:#x}+{length_bytes:#x} outside a {:#x}-byte region",
                self.buffer.length_bytes
            )
        })
    }

    /// The CPU address of `length_bytes` at `offset_bytes`, which must lie inside the region and
    /// be aligned to `alignment_bytes` in memory (not only within the region).
    fn address_of(&self, offset_bytes: usize, length_bytes: usize, alignment_bytes: usize) -> usize {
        let inside =
            offset_bytes.checked_add(length_bytes).is_some_and(|end| end <= self.buffer.length_bytes);
        let address = self.buffer.cpu_address.wrapping_add(offset_bytes);
        if !(inside && address.is_multiple_of(alignment_bytes)) {
            misplaced_access(offset_bytes, length_bytes, self.buffer.length_bytes);
        }
        address
    }

    /// In host tests, logs the CPU access for the ordering checks (see `crate::testing`).
    fn log_access(&self, offset_bytes: usize, length_bytes: usize, write: bool) {
        #[cfg(any(test, feature = "testing"))]
        {
            let range = crate::testing::ByteRange::new(
                self.buffer.physical_address + offset_bytes as u64,
                length_bytes as u64,
            );
            crate::testing::record(if write {
                crate::testing::PlatformEvent::CpuWrite(range)
            } else {
                crate::testing::PlatformEvent::CpuRead(range)
            });
        }
        #[cfg(not(any(test, feature = "testing")))]
        let _ = (offset_bytes, length_bytes, write);
    }

    pub fn read_u32(&self, offset_bytes: usize) -> u32 {
        let address = self.address_of(offset_bytes, 4, 4);
        self.log_access(offset_bytes, 4, false);
        // SAFETY: the region was made from the platform's DMA memory, valid for `'p` (see
        // `allocate` and `of_buffer`); the offset was checked to be
        // inside it and 4-byte aligned.
        unsafe { ptr::read_volatile(address as *const u32) }
    }

    /// Reads `words.len()` consecutive 32-bit words from `offset_bytes`.
    pub fn read_words(&self, offset_bytes: usize, words: &mut [u32]) {
        let address = self.address_of(offset_bytes, 4 * words.len(), 4);
        self.log_access(offset_bytes, 4 * words.len(), false);
        for (index, word) in words.iter_mut().enumerate() {
            // SAFETY: as for `read_u32`; the whole run was checked to lie inside the region.
            *word = unsafe { ptr::read_volatile((address as *const u32).add(index)) };
        }
    }

    /// Writes `words` as consecutive 32-bit words from `offset_bytes` (a queue entry).
    pub fn write_words(&self, offset_bytes: usize, words: &[u32]) {
        let address = self.address_of(offset_bytes, 4 * words.len(), 4);
        self.log_access(offset_bytes, 4 * words.len(), true);
        for (index, word) in words.iter().enumerate() {
            // SAFETY: as for `read_words`; only this driver writes the region from the CPU side.
            unsafe { ptr::write_volatile((address as *mut u32).add(index), *word) };
        }
    }

    /// Writes `words` as consecutive 64-bit words from `offset_bytes` (8-byte aligned): a
    /// 64-byte queue entry in eight stores instead of sixteen. Inlined: an entry built in
    /// registers is stored straight from them, with no copy on the stack and no call.
    #[inline(always)]
    pub fn write_u64s(&self, offset_bytes: usize, words: &[u64]) {
        let address = self.address_of(offset_bytes, 8 * words.len(), 8);
        self.log_access(offset_bytes, 8 * words.len(), true);
        for (index, word) in words.iter().enumerate() {
            // SAFETY: as for `write_words`, with 8-byte alignment checked for the whole run.
            unsafe { ptr::write_volatile((address as *mut u64).add(index), *word) };
        }
    }

    pub fn write_u64(&self, offset_bytes: usize, value: u64) {
        self.write_u64s(offset_bytes, &[value]);
    }

    /// Sets `length_bytes` bytes from `offset_bytes` to zero, a 32-bit word at a time (both must
    /// be multiples of 4): xHCI contexts and USB wrappers are cleared before each use.
    pub fn zero(&self, offset_bytes: usize, length_bytes: usize) {
        assert!(length_bytes.is_multiple_of(4), "zeroing {length_bytes} bytes: not whole words");
        let address = self.address_of(offset_bytes, length_bytes, 4);
        self.log_access(offset_bytes, length_bytes, true);
        for index in 0..length_bytes / 4 {
            // SAFETY: as for `write_words`; the whole run was checked to lie inside the region.
            unsafe { ptr::write_volatile((address as *mut u32).add(index), 0) };
        }
    }

    /// Copies `bytes` into the region from `offset_bytes` (PIO data, poison before a checked read).
    pub fn write_bytes(&self, offset_bytes: usize, bytes: &[u8]) {
        let address = self.address_of(offset_bytes, bytes.len(), 1);
        self.log_access(offset_bytes, bytes.len(), true);
        for (index, byte) in bytes.iter().enumerate() {
            // SAFETY: as for `write_words`, byte by byte.
            unsafe { ptr::write_volatile((address as *mut u8).add(index), *byte) };
        }
    }

    /// Copies `out.len()` bytes from `offset_bytes` (identify data after its command completed).
    pub fn read_bytes(&self, offset_bytes: usize, out: &mut [u8]) {
        let address = self.address_of(offset_bytes, out.len(), 1);
        self.log_access(offset_bytes, out.len(), false);
        for (index, byte) in out.iter_mut().enumerate() {
            // SAFETY: as for `read_words`.
            *byte = unsafe { ptr::read_volatile((address as *const u8).add(index)) };
        }
    }
}

/// Where the SD hosts' PIO paths put the 32-bit words they read from the data port, in
/// little-endian byte order: plain memory for register data (SCR, SD Status), a [`DmaRegion`]
/// for request buffers, written with volatile copies.
pub trait PioTarget {
    fn length_bytes(&self) -> usize;
    fn store_word(&mut self, offset_bytes: usize, word: u32);
}

impl PioTarget for [u8] {
    fn length_bytes(&self) -> usize {
        self.len()
    }

    fn store_word(&mut self, offset_bytes: usize, word: u32) {
        self[offset_bytes..offset_bytes + 4].copy_from_slice(&word.to_le_bytes());
    }
}

impl PioTarget for DmaRegion<'_> {
    fn length_bytes(&self) -> usize {
        self.buffer.length_bytes
    }

    fn store_word(&mut self, offset_bytes: usize, word: u32) {
        self.write_bytes(offset_bytes, &word.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::testing::{ArenaPlatform, ByteRange, PlatformEvent, PHYSICAL_BASE};
    use std::string::ToString;
    use std::vec::Vec;

    #[test]
    fn accesses_stay_inside_and_aligned() {
        let platform = ArenaPlatform::new(1 << 16);
        let region = DmaRegion::allocate(&platform, 64, 64).unwrap();
        region.write_words(4, &[0xAABB_CCDD]);
        region.write_u64(8, 0x1122_3344_5566_7788);
        assert_eq!(region.read_u32(4), 0xAABB_CCDD);
        assert_eq!(region.read_u32(8), 0x5566_7788);
        let mut words = [0u32; 3];
        region.read_words(4, &mut words);
        assert_eq!(words, [0xAABB_CCDD, 0x5566_7788, 0x1122_3344]);
        let mut bytes = [0u8; 4];
        region.read_bytes(4, &mut bytes);
        assert_eq!(bytes, [0xDD, 0xCC, 0xBB, 0xAA]);
        region.write_words(56, &[1, 2]);
        assert_eq!(region.read_u32(60), 2);
        assert_eq!(region.slice(16, 8).physical_address, region.physical_address() + 0x10);
        assert_eq!(region.subregion(56, 8).map(|tail| tail.read_u32(4)), Some(2));
        assert_eq!(region.subregion(60, 8), None);
        let outside = std::panic::catch_unwind(|| region.read_u32(64));
        assert!(outside.is_err());
        let past_the_end = std::panic::catch_unwind(|| region.write_words(56, &[1, 2, 3]));
        assert!(past_the_end.is_err());
        let read_past_the_end = std::panic::catch_unwind(|| region.read_words(56, &mut [0u32; 3]));
        assert!(read_past_the_end.is_err());
        let bytes_past_the_end = std::panic::catch_unwind(|| region.read_bytes(60, &mut [0u8; 5]));
        assert!(bytes_past_the_end.is_err());
        let misaligned = std::panic::catch_unwind(|| region.write_u64(4, 0));
        assert!(misaligned.is_err());
    }

    #[test]
    fn zero_clears_exactly_the_words_asked_for() {
        let platform = ArenaPlatform::new(1 << 16);
        let region = DmaRegion::allocate(&platform, 32, 64).unwrap();
        region.write_words(0, &[u32::MAX; 8]);
        region.zero(4, 16);
        let mut words = [0u32; 8];
        region.read_words(0, &mut words);
        assert_eq!(words, [u32::MAX, 0, 0, 0, 0, u32::MAX, u32::MAX, u32::MAX]);
        assert!(std::panic::catch_unwind(|| region.zero(24, 12)).is_err(), "past the end");
        assert!(std::panic::catch_unwind(|| region.zero(0, 6)).is_err(), "not whole words");
    }

    #[test]
    fn bytes_go_in_and_out_at_any_offset_and_words_need_aligned_memory() {
        let platform = ArenaPlatform::new(1 << 16);
        let region = DmaRegion::allocate(&platform, 32, 64).unwrap().subregion(1, 24).unwrap();
        region.write_bytes(2, b"poison");
        let mut out = [0u8; 8];
        region.read_bytes(1, &mut out);
        assert_eq!(&out, b"\0poison\0");
        // Offset 3 of a region at base + 1 is 4-byte aligned in memory, offset 0 is not.
        region.write_words(3, &[0x0403_0201]);
        assert_eq!(region.read_u32(3), 0x0403_0201);
        assert!(std::panic::catch_unwind(|| region.read_u32(0)).is_err(), "misaligned in memory");
        assert!(std::panic::catch_unwind(|| region.write_bytes(20, &[0; 5])).is_err(), "past the end");
    }

    #[test]
    fn pio_words_land_little_endian_in_memory_and_in_regions() {
        let mut plain = [0u8; 8];
        PioTarget::store_word(&mut plain[..], 4, 0x4433_2211);
        assert_eq!(plain, [0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44]);
        assert_eq!(PioTarget::length_bytes(&plain[..]), 8);
        let platform = ArenaPlatform::new(1 << 16);
        let mut region = DmaRegion::allocate(&platform, 16, 64).unwrap();
        region.store_word(8, 0x4433_2211);
        let mut out = [0u8; 4];
        region.read_bytes(8, &mut out);
        assert_eq!(out, [0x11, 0x22, 0x33, 0x44]);
        assert_eq!(PioTarget::length_bytes(&region), 16);
    }

    #[test]
    fn allocations_are_zeroed_reachable_and_refused_outside_the_window() {
        let platform = ArenaPlatform::new(1 << 16);
        let identity = BusTranslation::IDENTITY;
        let allocation = DmaAllocation::new(&platform, &identity, 4096, 4096).unwrap();
        assert_eq!(allocation.bus_address, allocation.region.physical_address());
        assert_eq!(allocation.region.read_u32(4092), 0);
        let offset = BusTranslation { cpu_base: 0, bus_base: 0xC000_0000, size_bytes: 1 << 40 };
        let shifted = DmaAllocation::new(&platform, &offset, 64, 64).unwrap();
        assert_eq!(shifted.bus_address, shifted.region.physical_address() + 0xC000_0000);
        let nowhere = BusTranslation { cpu_base: 0, bus_base: 0, size_bytes: 0x1000 };
        let refused = DmaAllocation::new(&platform, &nowhere, 64, 64);
        assert!(matches!(refused, Err(DmaRegionError::Unreachable(_))), "{refused:?}");
        let too_big = DmaAllocation::new(&platform, &identity, 1 << 20, 64);
        assert!(matches!(too_big, Err(DmaRegionError::Allocation(_))), "{too_big:?}");
        assert!(too_big.unwrap_err().to_string().contains("DMA pool exhausted"));
    }

    #[test]
    fn only_the_platforms_own_memory_becomes_a_region() {
        let platform = ArenaPlatform::new(1 << 16);
        let buffer = platform.allocate_dma(512, 64).unwrap();
        let region = DmaRegion::of_buffer(&platform, buffer.slice(256, 256).unwrap()).unwrap();
        region.write_bytes(0, &[7]);
        assert_eq!(platform.cpu_read(&buffer.slice(256, 1).unwrap()), [7]);
        // Memory the platform never handed out (here: a host vector) is refused.
        let mut elsewhere = std::vec![0u8; 64];
        let foreign = DmaBuffer {
            cpu_address: elsewhere.as_mut_ptr() as usize,
            physical_address: PHYSICAL_BASE - 0x1000,
            length_bytes: 64,
        };
        let refused = DmaRegion::of_buffer(&platform, foreign).unwrap_err();
        assert_eq!(refused.to_string(), "0x3ffff000+0x40 is not DMA memory of this platform");
        // A buffer reaching past the arena's end is refused too.
        let beyond = DmaBuffer { length_bytes: 1 << 17, ..buffer };
        assert!(DmaRegion::of_buffer(&platform, beyond).is_err());
    }

    #[test]
    fn host_tests_see_every_cpu_access_at_its_physical_range() {
        let platform = ArenaPlatform::new(1 << 16);
        let region = DmaRegion::allocate(&platform, 256, 64).unwrap();
        let start = platform.log().len();
        region.write_bytes(16, &[1, 2, 3]);
        region.read_u32(64);
        region.write_words(128, &[1, 2, 3]);
        region.read_words(128, &mut [0u32; 2]);
        let seen: Vec<PlatformEvent> = platform.log().since(start).to_vec();
        let at = |offset: u64, length: u64| ByteRange::new(region.physical_address() + offset, length);
        let expected = [
            PlatformEvent::CpuWrite(at(16, 3)),
            PlatformEvent::CpuRead(at(64, 4)),
            PlatformEvent::CpuWrite(at(128, 12)),
            PlatformEvent::CpuRead(at(128, 8)),
        ];
        assert_eq!(seen, expected);
    }
}
