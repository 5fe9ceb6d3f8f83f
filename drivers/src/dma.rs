//! The CPU's only way into memory a device reads or writes by DMA: NVMe queues, PRP lists and
//! identify data, SDHCI ADMA2 descriptor tables, xHCI rings, contexts and wrappers, and the data
//! the SD hosts move by PIO. Every access is volatile and copies in or out: no Rust reference into
//! DMA memory ever exists, because the device reads and writes the same bytes behind the
//! compiler's back (docs/architecture.md, "How a driver sees hardware"; the Rust reference,
//! "Behavior considered undefined", on references to memory changed by others).

use crate::platform::{BusTranslation, DmaAllocationError, Platform, UnreachableAddress};
use blockdev::DmaBuffer;
use core::{fmt, ptr};

/// A DMA buffer the CPU reads and writes with volatile copies. It is `Copy`: copies name the same
/// bytes and hand out no references, so they cannot alias in the sense Rust forbids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaRegion {
    buffer: DmaBuffer,
}

/// DMA memory for a driver's own structures could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaRegionError {
    Allocation(DmaAllocationError),
    Unreachable(UnreachableAddress),
}

impl fmt::Display for DmaRegionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DmaRegionError::Allocation(error) => write!(f, "{error}"),
            DmaRegionError::Unreachable(error) => write!(f, "{error}"),
        }
    }
}

/// Fresh, zeroed DMA memory for a driver's own structures, aligned to `alignment_bytes` and
/// checked to be reachable through `translation`; returns the region and its bus address.
///
/// # Safety
/// The region (and every copy of it) must not be used after `platform` is dropped: drivers keep
/// it inside an object that borrows `platform`.
pub unsafe fn allocate_region<P: Platform + ?Sized>(
    platform: &P,
    translation: &BusTranslation,
    length_bytes: usize,
    alignment_bytes: usize,
) -> Result<(DmaRegion, u64), DmaRegionError> {
    let buffer = platform.allocate_dma(length_bytes, alignment_bytes).map_err(DmaRegionError::Allocation)?;
    let bus_address = translation
        .to_bus(buffer.physical_address, buffer.length_bytes as u64)
        .map_err(DmaRegionError::Unreachable)?;
    // SAFETY: `Platform` is an unsafe trait whose implementors promise that `allocate_dma`
    // returns valid memory, given to no one else, that stays valid while the platform lives; the
    // caller promises not to use the region beyond that.
    Ok((unsafe { DmaRegion::new(buffer) }, bus_address))
}

impl DmaRegion {
    /// # Safety
    /// `buffer.cpu_address .. + length_bytes` must be memory the CPU may read and write (as
    /// [`Platform::allocate_dma`] returns it) for as long as the region or a copy of it is used,
    /// and nothing but this driver's CPU accesses and its device's DMA may touch it meanwhile.
    pub unsafe fn new(buffer: DmaBuffer) -> Self {
        DmaRegion { buffer }
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
        assert!(
            inside && address.is_multiple_of(alignment_bytes),
            "DMA access at {offset_bytes:#x} ({length_bytes} bytes) outside or misaligned in a {:#x}-byte region",
            self.buffer.length_bytes
        );
        address
    }

    /// In host tests, logs the CPU access for the ordering checks (see `crate::testing`).
    fn log_access(&self, offset_bytes: usize, length_bytes: usize, write: bool) {
        #[cfg(test)]
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
        #[cfg(not(test))]
        let _ = (offset_bytes, length_bytes, write);
    }

    pub fn read_u32(&self, offset_bytes: usize) -> u32 {
        let address = self.address_of(offset_bytes, 4, 4);
        self.log_access(offset_bytes, 4, false);
        // SAFETY: `new`'s contract makes the region valid memory; the offset was checked to be
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

    pub fn write_u64(&self, offset_bytes: usize, value: u64) {
        let address = self.address_of(offset_bytes, 8, 8);
        self.log_access(offset_bytes, 8, true);
        // SAFETY: as for `write_words`, with 8-byte alignment checked.
        unsafe { ptr::write_volatile(address as *mut u64, value) }
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

impl PioTarget for DmaRegion {
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
    use std::string::ToString;
    use std::vec;
    use std::vec::Vec;

    #[test]
    fn accesses_stay_inside_and_aligned() {
        let mut backing = vec![0u64; 8];
        let buffer = DmaBuffer {
            cpu_address: backing.as_mut_ptr() as usize,
            physical_address: 0x8000,
            length_bytes: 64,
        };
        // SAFETY: the vector outlives the region and nothing else touches it in this test.
        let region = unsafe { DmaRegion::new(buffer) };
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
        assert_eq!(region.slice(16, 8).physical_address, 0x8010);
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
        drop(backing);
    }

    #[test]
    fn zero_clears_exactly_the_words_asked_for() {
        let mut backing = vec![u64::MAX; 4];
        let buffer =
            DmaBuffer { cpu_address: backing.as_mut_ptr() as usize, physical_address: 0, length_bytes: 32 };
        // SAFETY: the vector outlives the region and nothing else touches it in this test.
        let region = unsafe { DmaRegion::new(buffer) };
        region.zero(4, 16);
        let mut words = [0u32; 8];
        region.read_words(0, &mut words);
        assert_eq!(words, [u32::MAX, 0, 0, 0, 0, u32::MAX, u32::MAX, u32::MAX]);
        assert!(std::panic::catch_unwind(|| region.zero(24, 12)).is_err(), "past the end");
        assert!(std::panic::catch_unwind(|| region.zero(0, 6)).is_err(), "not whole words");
        drop(backing);
    }

    #[test]
    fn bytes_go_in_and_out_at_any_offset_and_words_need_aligned_memory() {
        let mut backing = vec![0u64; 4];
        let base = backing.as_mut_ptr() as usize;
        let unaligned = DmaBuffer { cpu_address: base + 1, physical_address: 0x9001, length_bytes: 24 };
        // SAFETY: the vector outlives the region and nothing else touches it in this test.
        let region = unsafe { DmaRegion::new(unaligned) };
        region.write_bytes(2, b"poison");
        let mut out = [0u8; 8];
        region.read_bytes(1, &mut out);
        assert_eq!(&out, b"\0poison\0");
        // Offset 3 of a region at base + 1 is 4-byte aligned in memory, offset 0 is not.
        region.write_words(3, &[0x0403_0201]);
        assert_eq!(region.read_u32(3), 0x0403_0201);
        assert!(std::panic::catch_unwind(|| region.read_u32(0)).is_err(), "misaligned in memory");
        assert!(std::panic::catch_unwind(|| region.write_bytes(20, &[0; 5])).is_err(), "past the end");
        drop(backing);
    }

    #[test]
    fn pio_words_land_little_endian_in_memory_and_in_regions() {
        let mut plain = [0u8; 8];
        PioTarget::store_word(&mut plain[..], 4, 0x4433_2211);
        assert_eq!(plain, [0, 0, 0, 0, 0x11, 0x22, 0x33, 0x44]);
        assert_eq!(PioTarget::length_bytes(&plain[..]), 8);
        let mut backing = vec![0u64; 2];
        let buffer =
            DmaBuffer { cpu_address: backing.as_mut_ptr() as usize, physical_address: 0, length_bytes: 16 };
        // SAFETY: the vector outlives the region and nothing else touches it in this test.
        let mut region = unsafe { DmaRegion::new(buffer) };
        region.store_word(8, 0x4433_2211);
        let mut out = [0u8; 4];
        region.read_bytes(8, &mut out);
        assert_eq!(out, [0x11, 0x22, 0x33, 0x44]);
        assert_eq!(PioTarget::length_bytes(&region), 16);
        drop(backing);
    }

    #[test]
    fn allocated_regions_are_zeroed_reachable_and_refused_outside_the_window() {
        let platform = crate::testing::ArenaPlatform::new(1 << 16);
        let identity = BusTranslation::IDENTITY;
        // SAFETY: the regions are used only while `platform` lives.
        let (region, bus) = unsafe { allocate_region(&platform, &identity, 4096, 4096) }.unwrap();
        assert_eq!(bus, region.physical_address());
        assert_eq!(region.read_u32(4092), 0);
        let offset = BusTranslation { cpu_base: 0, bus_base: 0xC000_0000, size_bytes: 1 << 40 };
        // SAFETY: as above.
        let (shifted, shifted_bus) = unsafe { allocate_region(&platform, &offset, 64, 64) }.unwrap();
        assert_eq!(shifted_bus, shifted.physical_address() + 0xC000_0000);
        let nowhere = BusTranslation { cpu_base: 0, bus_base: 0, size_bytes: 0x1000 };
        // SAFETY: as above.
        let refused = unsafe { allocate_region(&platform, &nowhere, 64, 64) };
        assert!(matches!(refused, Err(DmaRegionError::Unreachable(_))), "{refused:?}");
        // SAFETY: as above.
        let too_big = unsafe { allocate_region(&platform, &identity, 1 << 20, 64) };
        assert!(matches!(too_big, Err(DmaRegionError::Allocation(_))), "{too_big:?}");
        assert!(too_big.unwrap_err().to_string().contains("DMA pool exhausted"));
    }

    #[test]
    fn host_tests_see_every_cpu_access_at_its_physical_range() {
        use crate::testing::{ByteRange, PlatformEvent};
        let platform = crate::testing::ArenaPlatform::new(1 << 16);
        let buffer = platform.allocate_dma(256, 64).unwrap();
        // SAFETY: arena memory used only here, while the platform lives.
        let region = unsafe { DmaRegion::new(buffer) };
        let start = platform.log().len();
        region.write_bytes(16, &[1, 2, 3]);
        region.read_u32(64);
        region.write_words(128, &[1, 2, 3]);
        region.read_words(128, &mut [0u32; 2]);
        let seen: Vec<PlatformEvent> = platform.log().since(start).to_vec();
        let at = |offset: u64, length: u64| ByteRange::new(buffer.physical_address + offset, length);
        let expected = [
            PlatformEvent::CpuWrite(at(16, 3)),
            PlatformEvent::CpuRead(at(64, 4)),
            PlatformEvent::CpuWrite(at(128, 12)),
            PlatformEvent::CpuRead(at(128, 8)),
        ];
        assert_eq!(seen, expected);
    }
}
