//! Driver-owned DMA memory (queues, PRP lists, identify buffers) read and written by the CPU with
//! volatile accesses, because the controller reads and writes the same bytes behind the
//! compiler's back (docs/architecture.md "How a driver sees hardware": unsafe only in the memory layer).

use blockdev::DmaBuffer;
use core::ptr;

/// A DMA buffer the driver allocated for itself and shares only with its controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaRegion {
    buffer: DmaBuffer,
}

impl DmaRegion {
    /// # Safety
    /// `buffer` must be valid memory (from `Platform::allocate_dma`) that lives for the rest of
    /// the run, aligned to at least 8 bytes, and that only this driver and its controller use.
    pub unsafe fn new(buffer: DmaBuffer) -> Self {
        assert!(
            buffer.cpu_address.is_multiple_of(8),
            "DMA region at {:#x} is not 8-byte aligned",
            buffer.cpu_address
        );
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

    fn address_of(&self, offset_bytes: usize, length_bytes: usize, alignment_bytes: usize) -> usize {
        assert!(
            offset_bytes.is_multiple_of(alignment_bytes)
                && offset_bytes.checked_add(length_bytes).is_some_and(|end| end <= self.buffer.length_bytes),
            "DMA access at {offset_bytes:#x} ({length_bytes} bytes) outside or misaligned in a {:#x}-byte region",
            self.buffer.length_bytes
        );
        self.buffer.cpu_address + offset_bytes
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

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec;

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
}
