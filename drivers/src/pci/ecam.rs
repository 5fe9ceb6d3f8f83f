//! The PCI Express Enhanced Configuration Access Mechanism (PCIe Base Specification §7.2.2): every
//! function's 4 KiB configuration space is memory-mapped at
//! `base + (bus - first_bus) << 20 | device << 15 | function << 12`.
#![forbid(unsafe_code)]

use super::{ConfigAccess, FunctionAddress};
use hal::mmio::RegisterIo;

/// An ECAM region over any register access (an `Mmio` spanning the whole region in the kernel).
pub struct Ecam<R: RegisterIo> {
    region: R,
    first_bus: u8,
    last_bus: u8,
}

impl<R: RegisterIo> Ecam<R> {
    /// `region` must cover `(last_bus - first_bus + 1) << 20` bytes.
    pub fn new(region: R, first_bus: u8, last_bus: u8) -> Self {
        Ecam { region, first_bus, last_bus }
    }

    /// The register access underneath (for tests and diagnostics).
    pub fn region(&self) -> &R {
        &self.region
    }

    fn offset(&self, function: FunctionAddress, register: u16) -> Option<usize> {
        if function.bus < self.first_bus
            || function.bus > self.last_bus
            || function.device > 31
            || function.function > 7
        {
            return None;
        }
        let bus = usize::from(function.bus - self.first_bus);
        Some(
            (bus << 20)
                | (usize::from(function.device) << 15)
                | (usize::from(function.function) << 12)
                | usize::from(register & 0xffc),
        )
    }
}

impl<R: RegisterIo> ConfigAccess for Ecam<R> {
    fn read32(&self, function: FunctionAddress, offset: u16) -> u32 {
        // Reads outside the decoded buses answer like an absent function.
        self.offset(function, offset).map(|at| self.region.read32(at)).unwrap_or(0xffff_ffff)
    }

    fn write32(&self, function: FunctionAddress, offset: u16, value: u32) {
        if let Some(at) = self.offset(function, offset) {
            self.region.write32(at, value);
        }
    }

    fn first_bus(&self) -> u8 {
        self.first_bus
    }

    fn last_bus(&self) -> u8 {
        self.last_bus
    }
}
