//! Register access: the [`RegisterIo`] trait the drivers are written against, [`Mmio`], its
//! volatile implementation over a memory-mapped register block, and [`BusRegisters`], which
//! carries a bus's rule for 64-bit registers (BCM2711's PCIe takes no 64-bit MMIO:
//! docs/pcie-brcmstb.md §6).
//!
//! Each driver's `regs.rs` names its registers as [`Reg`] constants, the offset together with the
//! `tock_registers` bitfields its value decodes as, so [`RegisterIo::read`] hands back a
//! `LocalRegisterCopy` only that register's fields read; only this module touches device memory.

use core::marker::PhantomData;
use tock_registers::fields::FieldValue;
use tock_registers::{LocalRegisterCopy, RegisterLongName};

/// A 32-bit register's byte offset in its block together with the bitfield type
/// (`tock_registers::register_bitfields!`) its value decodes as, so that a read of a register can
/// only be decoded with that register's fields: `const PRESENT_STATE: Reg<PRESENT_STATE::Register>
/// = Reg::new(0x24)`, then `registers.read(PRESENT_STATE).is_set(PRESENT_STATE::CARD_INSERTED)`.
pub struct Reg<R: RegisterLongName> {
    offset_bytes: usize,
    register: PhantomData<R>,
}

impl<R: RegisterLongName> Reg<R> {
    pub const fn new(offset_bytes: usize) -> Self {
        Reg { offset_bytes, register: PhantomData }
    }

    pub const fn offset_bytes(&self) -> usize {
        self.offset_bytes
    }

    /// The same register in a block that starts `base_bytes` into this one (xHCI's operational
    /// registers sit at CAPLENGTH, its port registers at a stride).
    pub const fn at(self, base_bytes: usize) -> Self {
        Reg::new(base_bytes + self.offset_bytes)
    }
}

impl<R: RegisterLongName> Clone for Reg<R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R: RegisterLongName> Copy for Reg<R> {}

impl<R: RegisterLongName> core::fmt::Debug for Reg<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Reg({:#x})", self.offset_bytes)
    }
}

/// Access to one block of 32-bit registers, addressed by byte offset.
pub trait RegisterIo {
    fn read32(&self, offset_bytes: usize) -> u32;
    fn write32(&self, offset_bytes: usize, value: u32);

    /// `register`'s value, decodable only with its own fields.
    fn read<R: RegisterLongName>(&self, register: Reg<R>) -> LocalRegisterCopy<u32, R>
    where
        Self: Sized,
    {
        LocalRegisterCopy::new(self.read32(register.offset_bytes()))
    }

    /// Writes `value` (fields of `register` only; the others written as zero).
    fn write<R: RegisterLongName>(&self, register: Reg<R>, value: FieldValue<u32, R>)
    where
        Self: Sized,
    {
        self.write32(register.offset_bytes(), value.value)
    }

    /// Writes a whole value of `register`, read (and changed) earlier.
    fn write_value<R: RegisterLongName>(&self, register: Reg<R>, value: LocalRegisterCopy<u32, R>)
    where
        Self: Sized,
    {
        self.write32(register.offset_bytes(), value.get())
    }

    /// Read-modify-write of the fields in `change`; the others keep what was read.
    fn modify<R: RegisterLongName>(&self, register: Reg<R>, change: FieldValue<u32, R>)
    where
        Self: Sized,
    {
        let mut value = self.read(register);
        value.modify(change);
        self.write32(register.offset_bytes(), value.get());
    }

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

    /// The address of the `width_bytes` register at `offset_bytes`, checked against the block.
    /// Inlined into every access: a driver's offsets are constants (its `regs.rs`), so the
    /// alignment test folds away and one compare with the length stays; the message is
    /// formatted only on the cold path, out of line.
    #[inline(always)]
    fn register_address(&self, offset_bytes: usize, width_bytes: usize) -> usize {
        if !offset_bytes.is_multiple_of(width_bytes) || offset_bytes + width_bytes > self.length_bytes {
            outside_the_block(offset_bytes, width_bytes, self.length_bytes);
        }
        self.base_address + offset_bytes
    }
}

/// A register access outside its block or misaligned: a driver bug, reported with the offset.
#[cold]
#[inline(never)]
fn outside_the_block(offset_bytes: usize, width_bytes: usize, length_bytes: usize) -> ! {
    panic!("register offset {offset_bytes:#x} ({width_bytes} bytes) outside a {length_bytes:#x}-byte block")
}

impl RegisterIo for Mmio {
    #[inline(always)]
    fn read32(&self, offset_bytes: usize) -> u32 {
        let address = self.register_address(offset_bytes, 4);
        // SAFETY: `Mmio::new`'s contract makes every aligned in-range offset a mapped device
        // register; the range and alignment were checked just above.
        unsafe { core::ptr::read_volatile(address as *const u32) }
    }

    #[inline(always)]
    fn write32(&self, offset_bytes: usize, value: u32) {
        let address = self.register_address(offset_bytes, 4);
        // SAFETY: as for `read32`.
        unsafe { core::ptr::write_volatile(address as *mut u32, value) }
    }

    /// One 64-bit access (a bus that cannot carry it is wrapped in [`BusRegisters`]).
    #[inline(always)]
    fn read64(&self, offset_bytes: usize) -> u64 {
        let address = self.register_address(offset_bytes, 8);
        // SAFETY: as for `read32`, for an 8-byte aligned in-range register.
        unsafe { core::ptr::read_volatile(address as *const u64) }
    }

    #[inline(always)]
    fn write64(&self, offset_bytes: usize, value: u64) {
        let address = self.register_address(offset_bytes, 8);
        // SAFETY: as for `read64`.
        unsafe { core::ptr::write_volatile(address as *mut u64, value) }
    }
}

/// How a bus carries accesses to 64-bit registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WideAccess {
    /// One 64-bit access.
    Native,
    /// Two 32-bit accesses, low word first: BCM2711's PCIe "can't handle 64bit MMIO accesses"
    /// (docs/pcie-brcmstb.md §6; Linux reads NVMe CAP with `lo_hi_readq` for the same reason).
    Split32,
}

/// A register block behind a bus with a rule for 64-bit registers; 32-bit accesses pass
/// through unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BusRegisters<R> {
    registers: R,
    wide: WideAccess,
}

impl<R: RegisterIo> BusRegisters<R> {
    pub fn new(registers: R, wide: WideAccess) -> Self {
        BusRegisters { registers, wide }
    }

    pub fn wide_access(&self) -> WideAccess {
        self.wide
    }

    /// The register block underneath.
    pub fn inner(&self) -> &R {
        &self.registers
    }
}

impl<R: RegisterIo> RegisterIo for BusRegisters<R> {
    fn read32(&self, offset_bytes: usize) -> u32 {
        self.registers.read32(offset_bytes)
    }

    fn write32(&self, offset_bytes: usize, value: u32) {
        self.registers.write32(offset_bytes, value)
    }

    fn read64(&self, offset_bytes: usize) -> u64 {
        match self.wide {
            WideAccess::Native => self.registers.read64(offset_bytes),
            WideAccess::Split32 => {
                let low = u64::from(self.registers.read32(offset_bytes));
                let high = u64::from(self.registers.read32(offset_bytes + 4));
                (high << 32) | low
            }
        }
    }

    fn write64(&self, offset_bytes: usize, value: u64) {
        match self.wide {
            WideAccess::Native => self.registers.write64(offset_bytes, value),
            WideAccess::Split32 => {
                self.registers.write32(offset_bytes, value as u32);
                self.registers.write32(offset_bytes + 4, (value >> 32) as u32);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
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

    /// Records the width of every access, and every value written.
    #[derive(Default)]
    struct WidthRecorder {
        accesses: core::cell::RefCell<std::vec::Vec<(usize, u8)>>,
        written: core::cell::RefCell<std::vec::Vec<u64>>,
    }
    impl RegisterIo for WidthRecorder {
        fn read32(&self, offset_bytes: usize) -> u32 {
            self.accesses.borrow_mut().push((offset_bytes, 32));
            offset_bytes as u32
        }
        fn write32(&self, offset_bytes: usize, value: u32) {
            self.accesses.borrow_mut().push((offset_bytes, 32));
            self.written.borrow_mut().push(u64::from(value));
        }
        fn read64(&self, offset_bytes: usize) -> u64 {
            self.accesses.borrow_mut().push((offset_bytes, 64));
            0
        }
        fn write64(&self, offset_bytes: usize, value: u64) {
            self.accesses.borrow_mut().push((offset_bytes, 64));
            self.written.borrow_mut().push(value);
        }
    }

    #[test]
    fn split_buses_make_two_32_bit_accesses_low_first() {
        let split = BusRegisters::new(WidthRecorder::default(), WideAccess::Split32);
        assert_eq!(split.read64(0x28), (0x2c << 32) | 0x28);
        split.write64(0x30, 0x1122_3344_5566_7788);
        split.write32(0x14, 1);
        assert_eq!(split.wide_access(), WideAccess::Split32);
        assert_eq!(
            split.inner().accesses.borrow().as_slice(),
            [(0x28, 32), (0x2c, 32), (0x30, 32), (0x34, 32), (0x14, 32)]
        );
        assert_eq!(split.inner().written.borrow().as_slice(), [0x5566_7788, 0x1122_3344, 1]);
        let native = BusRegisters::new(WidthRecorder::default(), WideAccess::Native);
        native.read64(0);
        native.write64(0x28, 5);
        assert_eq!(native.inner().accesses.borrow().as_slice(), [(0, 64), (0x28, 64)]);
        assert_eq!(native.inner().written.borrow().as_slice(), [5]);
    }

    tock_registers::register_bitfields![u32,
        CONTROL [
            ENABLE OFFSET(0) NUMBITS(1) [],
            MODE OFFSET(4) NUMBITS(2) [Idle = 0, Busy = 2]
        ],
        STATUS [
            READY OFFSET(0) NUMBITS(1) []
        ]
    ];
    const CONTROL: Reg<CONTROL::Register> = Reg::new(4);
    const STATUS: Reg<STATUS::Register> = Reg::new(8);

    #[test]
    fn typed_registers_read_write_and_modify_their_own_fields() {
        let mut block = [0u32; 4];
        // SAFETY: the array stands in for a register block for the length of the test.
        let io = unsafe { Mmio::new(block.as_mut_ptr() as usize, 16) };
        io.write32(4, 0xff00_0000);
        io.modify(CONTROL, CONTROL::ENABLE::SET + CONTROL::MODE::Busy);
        assert_eq!(io.read32(4), 0xff00_0021, "modify keeps the other bits");
        assert!(io.read(CONTROL).is_set(CONTROL::ENABLE));
        assert!(io.read(CONTROL).matches_all(CONTROL::MODE::Busy));
        io.write(STATUS, STATUS::READY::SET);
        let mut control = io.read(CONTROL);
        control.modify(CONTROL::ENABLE::CLEAR);
        io.write_value(CONTROL, control);
        assert_eq!(io.read32(4), 0xff00_0020);
        io.write_value(CONTROL, io.read(CONTROL));
        assert_eq!((io.read32(8), io.read(STATUS).is_set(STATUS::READY)), (1, true));
        assert_eq!(
            (CONTROL.offset_bytes(), std::format!("{STATUS:?}")),
            (4, std::string::String::from("Reg(0x8)"))
        );
        assert_eq!(block[1], 0xff00_0020);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn mmio_refuses_misaligned_64_bit_registers() {
        let mut block = [0u64; 2];
        // SAFETY: the array stands in for a register block for the length of the test.
        let io = unsafe { Mmio::new(block.as_mut_ptr() as usize, 16) };
        io.read64(4);
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
