//! The CPU's access to the buffer area. The kernel hands the runner one DMA region for the data
//! of every request (`blockdev::DmaBuffer`, which only names memory) and a [`BufferMemory`] to
//! reach its bytes: write jobs fill their blocks through it (docs/writes.md §4), and `check=`
//! compares what was read (docs/checks.md §2).

use blockdev::DmaBuffer;

/// CPU access to the buffer area, for the data of write jobs and for checking what is read.
pub trait BufferMemory {
    /// Calls `access` with the bytes of `buffer` (a part of the buffer area no request is using).
    fn with_bytes(&self, buffer: &DmaBuffer, access: &mut dyn FnMut(&mut [u8]));
}
