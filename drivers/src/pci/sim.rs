//! A simulated PCI function's configuration space for host tests (PCI Local Bus Specification
//! 3.0 §6.1-6.2.5): read-only identity and class, BARs whose address bits below their size read
//! back as zero with fixed type bits, a read-only status register, optionally a PCI Express
//! capability (PCIe Base 4.0 §7.5.3: read-only Device Capabilities, Device Control whose payload
//! fields reset to 128 bytes / 512-byte reads), and helpers that decode what the bus walk wrote.
#![forbid(unsafe_code)]

extern crate std;

/// A function's configuration space with BARs that behave like hardware: the address bits below
/// the size read back as zero, the type bits are fixed.
#[derive(Clone)]
pub(crate) struct SimulatedFunction {
    pub registers: [u32; 64],
    /// (size, type bits) per BAR slot; 64-bit BARs occupy two slots (upper slot size 0).
    pub bar_sizes: [(u64, u32); 6],
    pub header_type: u8,
    /// The function answers configuration requests with "retry" until this time (ns of the bus's
    /// clock): the Vendor ID reads 0x0001, everything else fails (all ones).
    pub retry_until_ns: u64,
    /// Device Control ignores writes to its payload fields, as QEMU's devices do (hw/pci/pcie.c
    /// makes only the error reporting enables writable).
    pub payload_read_only: bool,
}

/// Where [`SimulatedFunction::with_pcie_capability`] puts the capability.
pub const PCIE_CAPABILITY_OFFSET: u16 = 0x40;

impl SimulatedFunction {
    pub fn endpoint(vendor: u16, device: u16, class: u32, bars: &[(usize, u64, u32)]) -> Self {
        let mut function = SimulatedFunction {
            registers: [0; 64],
            bar_sizes: [(0, 0); 6],
            header_type: 0,
            retry_until_ns: 0,
            payload_read_only: false,
        };
        function.registers[0] = u32::from(vendor) | (u32::from(device) << 16);
        function.registers[2] = class << 8 | 0x02;
        for &(slot, size, type_bits) in bars {
            function.bar_sizes[slot] = (size, type_bits);
            function.registers[4 + slot] = type_bits;
        }
        function
    }

    pub fn bridge() -> Self {
        let mut function = Self::endpoint(0x1b36, 0x000c, 0x06_04_00, &[]);
        function.header_type = 1;
        function.registers[3] = 1 << 16;
        function
    }

    /// Adds a PCI Express capability (the only one in the list) whose Device Capabilities
    /// supports payloads of `128 << payload_code` bytes.
    pub fn with_pcie_capability(mut self, payload_code: u32) -> Self {
        let at = usize::from(PCIE_CAPABILITY_OFFSET) / 4;
        self.registers[1] |= 1 << 20;
        self.registers[13] = u32::from(PCIE_CAPABILITY_OFFSET);
        self.registers[at] = 0x0002_0010;
        self.registers[at + 1] = payload_code & 0b111;
        // Device Control at reset: Max Payload 128 (0), Max Read Request 512 (2 << 12).
        self.registers[at + 2] = 2 << 12;
        self
    }

    /// Device Control's Max Payload Size and Max Read Request Size in bytes.
    pub fn payload_sizes(&self) -> (u32, u32) {
        let control = self.registers[usize::from(PCIE_CAPABILITY_OFFSET) / 4 + 2];
        (128 << ((control >> 5) & 7), 128 << ((control >> 12) & 7))
    }

    pub fn read(&self, offset: u16) -> u32 {
        self.registers[usize::from(offset) / 4]
    }

    pub fn write(&mut self, offset: u16, value: u32) {
        let index = usize::from(offset) / 4;
        if index == 1 {
            // The status half is read-only here (its error bits are RW1C).
            self.registers[1] = (self.registers[1] & 0xffff_0000) | (value & 0xffff);
            return;
        }
        let capability = usize::from(PCIE_CAPABILITY_OFFSET) / 4;
        if self.registers[1] & (1 << 20) != 0 && (capability..capability + 2).contains(&index) {
            return;
        }
        if self.payload_read_only && self.registers[1] & (1 << 20) != 0 && index == capability + 2 {
            let fields = (7 << 5) | (7 << 12);
            self.registers[index] = (self.registers[index] & fields) | (value & !fields);
            return;
        }
        let limit = if self.header_type == 1 { 2 } else { 6 };
        if (4..4 + limit).contains(&index) {
            let slot = index - 4;
            let (size, type_bits) = self.bar_sizes[slot];
            let is_upper_half = slot > 0 && self.bar_sizes[slot - 1].1 & 0b110 == 0b100 && size == 0;
            if is_upper_half {
                let full = self.bar_sizes[slot - 1].0;
                self.registers[index] = value & !((full.saturating_sub(1) >> 32) as u32);
            } else if size == 0 {
                self.registers[index] = 0;
            } else {
                self.registers[index] = (value & !((size - 1) as u32) & !0xf) | type_bits;
            }
            return;
        }
        if index == 2 || index == 0 {
            return;
        }
        self.registers[index] = value;
    }
}

impl SimulatedFunction {
    /// The command register (memory space bit 1, bus master bit 2).
    pub fn command(&self) -> u32 {
        self.registers[1] & 0xffff
    }

    /// Memory BAR `index` as (PCI address, size) when it has been given an address.
    pub fn memory_bar(&self, index: usize) -> Option<(u64, u64)> {
        let (size, type_bits) = self.bar_sizes[index];
        if size == 0 || type_bits & 1 != 0 {
            return None;
        }
        let low = u64::from(self.registers[4 + index] & !0xf);
        let high = if type_bits & 0b110 == 0b100 { u64::from(self.registers[5 + index]) << 32 } else { 0 };
        Some((high | low, size))
    }
}
