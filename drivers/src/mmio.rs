//! Register access: the [`RegisterIo`] trait the drivers are written against, and [`Mmio`], its
//! volatile implementation over a memory-mapped register block.
//!
//! Drivers decode register values with `tock_registers::LocalRegisterCopy` and the bitfields
//! declared in each driver's `regs.rs`; only this module touches device memory.

/// Access to one block of 32-bit registers, addressed by byte offset.
pub trait RegisterIo {
    fn read32(&self, offset_bytes: usize) -> u32;
    fn write32(&self, offset_bytes: usize, value: u32);

    /// A 64-bit register read as two 32-bit halves, low first (NVMe allows this for CAP, ASQ, ACQ).
    fn read64(&self, offset_bytes: usize) -> u64 {
        let low = u64::from(self.read32(offset_bytes));
        let high = u64::from(self.read32(offset_bytes + 4));
        (high << 32) | low
    }

    /// A 64-bit register written as two 32-bit halves, low first.
    fn write64(&self, offset_bytes: usize, value: u64) {
        self.write32(offset_bytes, value as u32);
        self.write32(offset_bytes + 4, (value >> 32) as u32);
    }
}

impl<T: RegisterIo + ?Sized> RegisterIo for &T {
    fn read32(&self, offset_bytes: usize) -> u32 {
        (**self).read32(offset_bytes)
    }
    fn write32(&self, offset_bytes: usize, value: u32) {
        (**self).write32(offset_bytes, value)
    }
    fn read64(&self, offset_bytes: usize) -> u64 {
        (**self).read64(offset_bytes)
    }
    fn write64(&self, offset_bytes: usize, value: u64) {
        (**self).write64(offset_bytes, value)
    }
}

/// A memory-mapped register block at a fixed address (from the device tree or a PCI BAR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mmio {
    base_address: usize,
    length_bytes: usize,
}

impl Mmio {
    /// # Safety
    /// `base_address .. base_address + length_bytes` must be a device register block that is
    /// mapped as device memory for as long as this value (or a copy) is used, and the registers
    /// must tolerate 32-bit accesses.
    pub const unsafe fn new(base_address: usize, length_bytes: usize) -> Self {
        Mmio { base_address, length_bytes }
    }

    pub fn base_address(&self) -> usize {
        self.base_address
    }

    pub fn length_bytes(&self) -> usize {
        self.length_bytes
    }

    fn register_address(&self, offset_bytes: usize) -> usize {
        assert!(
            offset_bytes.is_multiple_of(4) && offset_bytes + 4 <= self.length_bytes,
            "register offset {offset_bytes:#x} outside a {:#x}-byte block",
            self.length_bytes
        );
        self.base_address + offset_bytes
    }
}

impl RegisterIo for Mmio {
    fn read32(&self, offset_bytes: usize) -> u32 {
        let address = self.register_address(offset_bytes);
        // SAFETY: `Mmio::new`'s contract makes every aligned in-range offset a mapped device
        // register; the range and alignment were checked just above.
        unsafe { core::ptr::read_volatile(address as *const u32) }
    }

    fn write32(&self, offset_bytes: usize, value: u32) {
        let address = self.register_address(offset_bytes);
        // SAFETY: as for `read32`.
        unsafe { core::ptr::write_volatile(address as *mut u32, value) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mmio_reads_and_writes_memory_in_range() {
        let mut block = [0u32; 4];
        // SAFETY: the array stands in for a register block for the length of the test.
        let io = unsafe { Mmio::new(block.as_mut_ptr() as usize, 16) };
        io.write32(4, 0xdead_beef);
        io.write64(8, 0x1122_3344_5566_7788);
        assert_eq!(io.read32(4), 0xdead_beef);
        assert_eq!(io.read64(8), 0x1122_3344_5566_7788);
        assert_eq!(io.read32(8), 0x5566_7788);
        assert_eq!(block[1], 0xdead_beef);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn mmio_refuses_offsets_past_the_block() {
        let mut block = [0u32; 4];
        // SAFETY: as above.
        let io = unsafe { Mmio::new(block.as_mut_ptr() as usize, 16) };
        io.read32(16);
    }
}
