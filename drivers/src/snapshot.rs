//! Register snapshots for `regs=DEV`: a controller's registers read by name, with side-effect-free
//! reads only, so that controllers and firmware hand-off states can be compared
//! (docs/hardware.md §2 for SDHCI, docs/nvme-and-fio.md §1.1 for NVMe).
//!
//! A snapshot is data: the drivers fill it ([`crate::sdhci::snapshot`], [`crate::nvme::snapshot`])
//! and the kernel prints it with [`RegisterSnapshot::lines`], one register per line.
#![forbid(unsafe_code)]

use core::fmt;

/// The most registers one snapshot holds.
pub const MAX_REGISTERS: usize = 24;

/// One register (or field of a shared word) as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamedRegister {
    /// The specification's name (`CAP`, `present state`).
    pub name: &'static str,
    /// Byte offset of the register (or of the word holding it) in the block.
    pub offset_bytes: usize,
    /// Width of the register in bits (8, 16, 32 or 64); the value is printed with that many digits.
    pub width_bits: u8,
    pub value: u64,
    /// What the value means where it is derived rather than read (`4-byte doorbell stride`).
    pub note: Option<&'static str>,
}

/// A controller's registers at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RegisterSnapshot {
    pub registers: heapless::Vec<NamedRegister, MAX_REGISTERS>,
}

impl RegisterSnapshot {
    /// Adds a register; beyond [`MAX_REGISTERS`] the rest are dropped (a driver bug, caught by
    /// the drivers' tests, which check every register is there).
    pub fn push(&mut self, name: &'static str, offset_bytes: usize, width_bits: u8, value: u64) {
        let _ = self.registers.push(NamedRegister { name, offset_bytes, width_bits, value, note: None });
    }

    /// Adds a value derived from the registers (printed with its explanation).
    pub fn push_derived(&mut self, name: &'static str, offset_bytes: usize, value: u64, note: &'static str) {
        let register = NamedRegister { name, offset_bytes, width_bits: 0, value, note: Some(note) };
        let _ = self.registers.push(register);
    }

    /// The value of the register called `name`.
    pub fn value(&self, name: &str) -> Option<u64> {
        self.registers.iter().find(|r| r.name == name).map(|r| r.value)
    }

    /// One printable line per register: `0x040 capabilities            0x000000000568c8b2`.
    pub fn lines(&self) -> impl Iterator<Item = &NamedRegister> {
        self.registers.iter()
    }
}

impl fmt::Display for NamedRegister {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#06x} {:<28} ", self.offset_bytes, self.name)?;
        match (self.note, self.width_bits) {
            (Some(note), _) => write!(f, "{} ({note})", self.value),
            (None, bits) => {
                let digits = usize::from(bits.max(8) / 4);
                write!(f, "{:#0width$x}", self.value, width = digits + 2)
            }
        }
    }
}

/// A register block that logs every access, for the tests that check a snapshot only reads.
#[cfg(test)]
pub(crate) struct AccessLog<R> {
    pub registers: R,
    pub reads: core::cell::RefCell<alloc::vec::Vec<usize>>,
    pub writes: core::cell::RefCell<alloc::vec::Vec<(usize, u32)>>,
}

#[cfg(test)]
impl<R: hal::mmio::RegisterIo> AccessLog<R> {
    pub fn new(registers: R) -> Self {
        AccessLog { registers, reads: Default::default(), writes: Default::default() }
    }
}

#[cfg(test)]
impl<R: hal::mmio::RegisterIo> hal::mmio::RegisterIo for AccessLog<R> {
    fn read32(&self, offset_bytes: usize) -> u32 {
        self.reads.borrow_mut().push(offset_bytes);
        self.registers.read32(offset_bytes)
    }
    fn write32(&self, offset_bytes: usize, value: u32) {
        self.writes.borrow_mut().push((offset_bytes, value));
        self.registers.write32(offset_bytes, value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;

    #[test]
    fn registers_print_with_their_width_and_derived_values_with_their_meaning() {
        let mut snapshot = RegisterSnapshot::default();
        snapshot.push("host control 1", 0x28, 8, 0x02);
        snapshot.push("CAP", 0x00, 64, 0x0000_0020_3c03_3fff);
        snapshot.push_derived("doorbell stride", 0x00, 4, "bytes, 4 << CAP.DSTRD");
        let lines: alloc::vec::Vec<alloc::string::String> =
            snapshot.lines().map(|r| format!("{r}")).collect();
        assert_eq!(lines[0], "0x0028 host control 1               0x02");
        assert_eq!(lines[1], "0x0000 CAP                          0x000000203c033fff");
        assert_eq!(lines[2], "0x0000 doorbell stride              4 (bytes, 4 << CAP.DSTRD)");
        assert_eq!(snapshot.value("CAP"), Some(0x0000_0020_3c03_3fff));
        assert_eq!(snapshot.value("nothing"), None);
    }
}
