//! PCI Express enumeration for a bare-metal host (PCI Local Bus Specification 3.0 §6.1-6.2.5
//! configuration header and BARs; PCI-to-PCI Bridge Architecture 1.2 §3.2 type 1 header; PCI
//! Firmware Specification's "sizing a BAR" procedure). No firmware assigns BARs before the kernel
//! on QEMU virt or on a bare-metal Pi (docs/qemu.md §3), so the kernel walks the buses, sizes every
//! memory BAR, places it in the host bridge's windows and turns on memory decode and bus mastering.
//!
//! Configuration space is reached through [`ConfigAccess`]: [`ecam::Ecam`] for the generic ECAM
//! host (QEMU virt), [`brcmstb::RootComplex`] for the Broadcom STB root complex of Pi 4, CM4 and
//! Pi 5 (index register + 4 KiB data window, docs/hardware.md §3.4). The host's outbound windows
//! ([`HostWindows`]) and its DMA view of RAM (`platform::BusTranslation`) come from the device
//! tree (`ranges`, `dma-ranges`), never from constants.
#![forbid(unsafe_code)]

pub mod brcmstb;
pub mod ecam;
pub mod payload;
pub mod ranges;
pub mod ready;
pub mod vl805;

#[cfg(test)]
pub(crate) mod sim;

use core::fmt;
pub use payload::{PayloadSettings, PcieCapability};
pub use ready::{ReadyEvent, ReadyWait};

/// Bus, device and function numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct FunctionAddress {
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl fmt::Display for FunctionAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02x}:{:02x}.{}", self.bus, self.device, self.function)
    }
}

/// Base class, subclass and programming interface (configuration offset 0x09-0x0B).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassCode {
    pub base: u8,
    pub sub: u8,
    pub prog_if: u8,
}

impl ClassCode {
    /// NVM Express (NVMe specification §2.1.5: class 01h, subclass 08h, interface 02h).
    pub const NVME: ClassCode = ClassCode { base: 0x01, sub: 0x08, prog_if: 0x02 };
    /// SD host controller with DMA (SD Host Controller Simplified Specification: 08h 05h 01h).
    pub const SDHCI: ClassCode = ClassCode { base: 0x08, sub: 0x05, prog_if: 0x01 };
    /// USB xHCI host controller (xHCI 1.2 §5.2.1: serial bus 0Ch, USB 03h, interface 30h).
    pub const XHCI: ClassCode = ClassCode { base: 0x0c, sub: 0x03, prog_if: 0x30 };

    pub fn name(&self) -> &'static str {
        match (self.base, self.sub) {
            (0x01, 0x08) => "NVMe controller",
            (0x08, 0x05) => "SD host controller",
            (0x0c, 0x03) => "USB controller",
            (0x06, 0x00) => "host bridge",
            (0x06, 0x04) => "PCI bridge",
            (0x02, _) => "network controller",
            (0x01, _) => "storage controller",
            _ => "other",
        }
    }
}

impl fmt::Display for ClassCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02x}:{:02x}:{:02x}", self.base, self.sub, self.prog_if)
    }
}

/// Configuration register offsets used here (PCI LB 3.0 §6.1).
pub mod offsets {
    pub const VENDOR_DEVICE: u16 = 0x00;
    pub const COMMAND_STATUS: u16 = 0x04;
    pub const CLASS_REVISION: u16 = 0x08;
    pub const HEADER_TYPE_WORD: u16 = 0x0c;
    pub const BAR0: u16 = 0x10;
    /// Type 1: primary, secondary, subordinate bus numbers and secondary latency timer.
    pub const BRIDGE_BUS_NUMBERS: u16 = 0x18;
    /// Type 1: memory base (bits 15:0) and memory limit (bits 31:16), in 1 MiB units << 4.
    pub const BRIDGE_MEMORY_WINDOW: u16 = 0x20;
    /// Type 1: prefetchable memory base/limit and their upper halves.
    pub const BRIDGE_PREFETCHABLE_WINDOW: u16 = 0x24;
    pub const BRIDGE_PREFETCHABLE_BASE_UPPER: u16 = 0x28;
    pub const BRIDGE_PREFETCHABLE_LIMIT_UPPER: u16 = 0x2c;
}

pub const COMMAND_MEMORY_SPACE: u32 = 1 << 1;
pub const COMMAND_BUS_MASTER: u32 = 1 << 2;
pub const COMMAND_INTX_DISABLE: u32 = 1 << 10;

/// Reads and writes of configuration space, one 32-bit register at a time.
pub trait ConfigAccess {
    fn read32(&self, function: FunctionAddress, offset: u16) -> u32;
    fn write32(&self, function: FunctionAddress, offset: u16, value: u32);
    /// The buses this host decodes (device tree `bus-range`).
    fn first_bus(&self) -> u8;
    fn last_bus(&self) -> u8;
}

/// One outbound window: CPU addresses `cpu_base..` reach PCI addresses `pci_base..`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub cpu_base: u64,
    pub pci_base: u64,
    pub size_bytes: u64,
    pub prefetchable: bool,
}

/// The host bridge's memory windows (device tree `ranges`; I/O space is not used).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostWindows {
    /// Non-prefetchable window below 4 GiB on the PCI side.
    pub memory32: Option<Window>,
    /// A window above 4 GiB on the PCI side, for 64-bit BARs.
    pub memory64: Option<Window>,
}

/// A memory BAR after sizing and placement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AssignedBar {
    pub index: u8,
    /// Where the CPU reaches it.
    pub cpu_address: u64,
    /// What was written into the BAR.
    pub pci_address: u64,
    pub size_bytes: u64,
    pub is_64_bit: bool,
    pub prefetchable: bool,
}

/// Why a BAR was left unassigned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarProblem {
    /// An I/O-space BAR (the kernel uses memory space only).
    IoSpace { index: u8 },
    /// No window has room for it.
    NoRoom { index: u8, size_bytes: u64, is_64_bit: bool },
    /// The BAR's read-back value makes no sense (size not a power of two).
    Nonsense { index: u8, value: u32 },
}

pub const MAX_BARS: usize = 6;

/// A function found by the bus walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PciFunction {
    pub address: FunctionAddress,
    pub vendor_id: u16,
    pub device_id: u16,
    pub class: ClassCode,
    pub revision: u8,
    pub is_bridge: bool,
    pub bars: [Option<AssignedBar>; MAX_BARS],
    pub bar_problems: [Option<BarProblem>; MAX_BARS],
    /// The PCI Express capability, if the function has one (conventional PCI functions do not).
    pub pcie: Option<PcieCapability>,
}

impl PciFunction {
    pub fn bar(&self, index: usize) -> Option<AssignedBar> {
        self.bars.get(index).copied().flatten()
    }
}

/// Most functions one walk records.
pub const MAX_FUNCTIONS: usize = 64;

/// Bump allocation inside one window.
#[derive(Clone, Copy, Debug)]
struct WindowAllocator {
    window: Window,
    next_pci: u64,
}

impl WindowAllocator {
    fn new(window: Window) -> Self {
        WindowAllocator { window, next_pci: window.pci_base }
    }

    fn allocate(&mut self, size_bytes: u64) -> Option<u64> {
        let start = self.next_pci.checked_next_multiple_of(size_bytes)?;
        let end = start.checked_add(size_bytes)?;
        if end > self.window.pci_base + self.window.size_bytes {
            return None;
        }
        self.next_pci = end;
        Some(start)
    }

    fn cpu_address_of(&self, pci_address: u64) -> u64 {
        pci_address - self.window.pci_base + self.window.cpu_base
    }

    fn align_to(&mut self, alignment: u64) {
        self.next_pci = self.next_pci.next_multiple_of(alignment);
    }
}

/// Sizes of a memory BAR read back after writing all ones (PCI LB 3.0 §6.2.5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BarSizing {
    pub size_bytes: u64,
    pub is_64_bit: bool,
    pub prefetchable: bool,
}

/// Decodes the read-back of a memory BAR (and its upper half for 64-bit BARs). `None` for an
/// unimplemented BAR (reads back 0).
pub fn decode_bar_sizing(low_readback: u32, high_readback: Option<u32>) -> Option<Result<BarSizing, u32>> {
    let is_64_bit = (low_readback >> 1) & 0b11 == 0b10;
    let prefetchable = low_readback & (1 << 3) != 0;
    let mask = if is_64_bit {
        (u64::from(high_readback.unwrap_or(0)) << 32) | u64::from(low_readback & !0xf)
    } else {
        u64::from(low_readback & !0xf) | 0xffff_ffff_0000_0000
    };
    if mask == 0 || (!is_64_bit && low_readback & !0xf == 0) {
        return None;
    }
    let size_bytes = (!mask).wrapping_add(1);
    if !size_bytes.is_power_of_two() {
        return Some(Err(low_readback));
    }
    Some(Ok(BarSizing { size_bytes, is_64_bit, prefetchable }))
}

/// Walks the buses, assigns BARs, enables the functions and sets their payload sizes.
pub struct Enumerator<'a, C: ConfigAccess> {
    config: &'a C,
    memory32: Option<WindowAllocator>,
    memory64: Option<WindowAllocator>,
    next_bus: u8,
    found: heapless::Vec<PciFunction, MAX_FUNCTIONS>,
    overflowed: bool,
    ready: Option<ReadyWait<'a>>,
    not_ready: heapless::Vec<FunctionAddress, MAX_NOT_READY>,
}

/// Functions still answering "retry" that one walk records.
pub const MAX_NOT_READY: usize = 8;

/// The result of a walk.
pub struct Topology {
    pub functions: heapless::Vec<PciFunction, MAX_FUNCTIONS>,
    /// More functions existed than [`MAX_FUNCTIONS`]; the rest were not recorded.
    pub truncated: bool,
    /// Functions that still answered "retry" (Vendor ID 0x0001) when the wait ended, or at once
    /// when the walk had no [`ReadyWait`]: left out.
    pub not_ready: heapless::Vec<FunctionAddress, MAX_NOT_READY>,
    /// Max Payload Size and Max Read Request Size programmed into every PCI Express function.
    pub payload: Option<PayloadSettings>,
}

impl Topology {
    pub fn with_class(&self, class: ClassCode) -> impl Iterator<Item = &PciFunction> {
        self.functions.iter().filter(move |f| f.class == class)
    }
}

impl<'a, C: ConfigAccess> Enumerator<'a, C> {
    pub fn new(config: &'a C, windows: HostWindows) -> Self {
        Enumerator {
            config,
            memory32: windows.memory32.map(WindowAllocator::new),
            memory64: windows.memory64.map(WindowAllocator::new),
            next_bus: config.first_bus().wrapping_add(1),
            found: heapless::Vec::new(),
            overflowed: false,
            ready: None,
            not_ready: heapless::Vec::new(),
        }
    }

    /// Waits for functions that answer "retry" (see [`ready`]); without it they are left out at
    /// once.
    pub fn with_ready_wait(mut self, wait: ReadyWait<'a>) -> Self {
        self.ready = Some(wait);
        self
    }

    /// Walks from the host's first bus, then sets every PCI Express function's payload sizes
    /// (see [`payload`]); returns what it found.
    pub fn run(mut self) -> Topology {
        let first = self.config.first_bus();
        self.scan_bus(first);
        let payload = payload::configure(self.config, &mut self.found);
        Topology { functions: self.found, truncated: self.overflowed, not_ready: self.not_ready, payload }
    }

    fn scan_bus(&mut self, bus: u8) {
        for device in 0..32u8 {
            let function0 = FunctionAddress { bus, device, function: 0 };
            if self.vendor(function0).is_none() {
                continue;
            }
            let multifunction = (self.config.read32(function0, offsets::HEADER_TYPE_WORD) >> 16) & 0x80 != 0;
            let functions = if multifunction { 8 } else { 1 };
            for function in 0..functions {
                let address = FunctionAddress { bus, device, function };
                if self.vendor(address).is_some() {
                    self.visit(address);
                }
            }
        }
    }

    /// The function's Vendor ID, after waiting for it if it answers "retry"; `None` when
    /// nothing is there or it never got ready.
    fn vendor(&mut self, address: FunctionAddress) -> Option<u16> {
        let mut id = self.config.read32(address, offsets::VENDOR_DEVICE);
        if ready::is_retry(id) {
            let waited = match &self.ready {
                Some(wait) => wait.wait(self.config, address),
                None => Err(0),
            };
            match waited {
                Ok(ready_id) => id = ready_id,
                Err(_) => {
                    if !self.not_ready.contains(&address) {
                        // Beyond MAX_NOT_READY the rest are only reported as they happen.
                        let _ = self.not_ready.push(address);
                    }
                    return None;
                }
            }
        }
        let vendor = id as u16;
        (vendor != 0xffff && vendor != 0).then_some(vendor)
    }

    fn visit(&mut self, address: FunctionAddress) {
        let id = self.config.read32(address, offsets::VENDOR_DEVICE);
        let class_revision = self.config.read32(address, offsets::CLASS_REVISION);
        let header_type = (self.config.read32(address, offsets::HEADER_TYPE_WORD) >> 16) as u8 & 0x7f;
        let class = ClassCode {
            base: (class_revision >> 24) as u8,
            sub: (class_revision >> 16) as u8,
            prog_if: (class_revision >> 8) as u8,
        };
        let is_bridge = header_type == 1;
        let mut function = PciFunction {
            address,
            vendor_id: id as u16,
            device_id: (id >> 16) as u16,
            class,
            revision: class_revision as u8,
            is_bridge,
            bars: [None; MAX_BARS],
            bar_problems: [None; MAX_BARS],
            pcie: payload::find_pcie_capability(self.config, address),
        };
        let bar_count = if is_bridge {
            2
        } else if header_type == 0 {
            MAX_BARS
        } else {
            0
        };
        let command = self.config.read32(address, offsets::COMMAND_STATUS) & 0xffff;
        // Decode off while the BARs are rewritten.
        self.config.write32(address, offsets::COMMAND_STATUS, command & !(COMMAND_MEMORY_SPACE | 1));
        self.assign_bars(&mut function, bar_count);
        if is_bridge {
            self.configure_bridge(address);
        }
        let has_memory = function.bars.iter().any(Option::is_some);
        let mut new_command = command | COMMAND_INTX_DISABLE;
        if has_memory || is_bridge {
            new_command |= COMMAND_MEMORY_SPACE | COMMAND_BUS_MASTER;
        }
        self.config.write32(address, offsets::COMMAND_STATUS, new_command);
        if self.found.push(function).is_err() {
            self.overflowed = true;
        }
    }

    fn assign_bars(&mut self, function: &mut PciFunction, bar_count: usize) {
        let address = function.address;
        let mut index = 0usize;
        while index < bar_count {
            let offset = offsets::BAR0 + 4 * index as u16;
            let original = self.config.read32(address, offset);
            if original & 1 != 0 {
                function.bar_problems[index] = Some(BarProblem::IoSpace { index: index as u8 });
                index += 1;
                continue;
            }
            let is_64_bit = (original >> 1) & 0b11 == 0b10 && index + 1 < bar_count;
            self.config.write32(address, offset, 0xffff_ffff);
            let low = self.config.read32(address, offset);
            let high = if is_64_bit {
                let original_high = self.config.read32(address, offset + 4);
                self.config.write32(address, offset + 4, 0xffff_ffff);
                let high = self.config.read32(address, offset + 4);
                self.config.write32(address, offset + 4, original_high);
                Some(high)
            } else {
                None
            };
            self.config.write32(address, offset, original);
            let step = if is_64_bit { 2 } else { 1 };
            match decode_bar_sizing(low, high) {
                None => {}
                Some(Err(value)) => {
                    function.bar_problems[index] = Some(BarProblem::Nonsense { index: index as u8, value })
                }
                Some(Ok(sizing)) => match self.place(sizing) {
                    Some((pci_address, cpu_address)) => {
                        self.config.write32(address, offset, (pci_address as u32) | (low & 0xf));
                        if sizing.is_64_bit {
                            self.config.write32(address, offset + 4, (pci_address >> 32) as u32);
                        }
                        function.bars[index] = Some(AssignedBar {
                            index: index as u8,
                            cpu_address,
                            pci_address,
                            size_bytes: sizing.size_bytes,
                            is_64_bit: sizing.is_64_bit,
                            prefetchable: sizing.prefetchable,
                        });
                    }
                    None => {
                        function.bar_problems[index] = Some(BarProblem::NoRoom {
                            index: index as u8,
                            size_bytes: sizing.size_bytes,
                            is_64_bit: sizing.is_64_bit,
                        })
                    }
                },
            }
            index += step;
        }
    }

    /// 64-bit BARs go to the 64-bit window when there is one (if it is prefetchable, only
    /// prefetchable BARs), everything else to the 32-bit window.
    fn place(&mut self, sizing: BarSizing) -> Option<(u64, u64)> {
        // A BAR smaller than a page still gets a page of its own, so mappings never share one.
        let size = sizing.size_bytes.max(4096);
        // A non-prefetchable BAR never goes into a prefetchable window (PCI-PCI Bridge 1.2
        // §3.2.5.10: reads there may be merged or prefetched).
        if sizing.is_64_bit {
            let fits = |allocator: &WindowAllocator| !allocator.window.prefetchable || sizing.prefetchable;
            if let Some(allocator) = self.memory64.as_mut().filter(|allocator| fits(allocator)) {
                if let Some(pci) = allocator.allocate(size) {
                    return Some((pci, allocator.cpu_address_of(pci)));
                }
            }
        }
        let allocator = self.memory32.as_mut()?;
        let pci = allocator.allocate(size)?;
        if !sizing.is_64_bit && pci + size > (1 << 32) {
            return None;
        }
        Some((pci, allocator.cpu_address_of(pci)))
    }

    /// Gives the bridge the next bus numbers, walks behind it, and opens its memory window over
    /// what its children got (bridges forward 1 MiB-aligned windows: PCI-PCI Bridge 1.2 §3.2.5.8).
    fn configure_bridge(&mut self, bridge: FunctionAddress) {
        const BRIDGE_ALIGNMENT: u64 = 1 << 20;
        let secondary = self.next_bus;
        if secondary > self.config.last_bus() || secondary == 0 {
            return;
        }
        self.next_bus = secondary.wrapping_add(1);
        let numbers = self.config.read32(bridge, offsets::BRIDGE_BUS_NUMBERS);
        let with_subordinate = |subordinate: u8| {
            (numbers & 0xff00_0000)
                | (u32::from(subordinate) << 16)
                | (u32::from(secondary) << 8)
                | u32::from(bridge.bus)
        };
        self.config.write32(bridge, offsets::BRIDGE_BUS_NUMBERS, with_subordinate(self.config.last_bus()));
        for allocator in [self.memory32.as_mut(), self.memory64.as_mut()].into_iter().flatten() {
            allocator.align_to(BRIDGE_ALIGNMENT);
        }
        let start32 = self.memory32.map(|a| a.next_pci);
        let start64 = self.memory64.map(|a| a.next_pci);
        self.scan_bus(secondary);
        let subordinate = self.next_bus.wrapping_sub(1);
        self.config.write32(bridge, offsets::BRIDGE_BUS_NUMBERS, with_subordinate(subordinate));
        for allocator in [self.memory32.as_mut(), self.memory64.as_mut()].into_iter().flatten() {
            allocator.align_to(BRIDGE_ALIGNMENT);
        }
        // Non-prefetchable window: 32-bit only. An empty window is written with base > limit.
        let window = match (start32, self.memory32.map(|a| a.next_pci)) {
            (Some(start), Some(end)) if end > start => {
                (((end - 1) >> 20) as u32 & 0xfff) << 20 | (((start >> 20) as u32 & 0xfff) << 4)
            }
            _ => 0x0000_fff0,
        };
        self.config.write32(bridge, offsets::BRIDGE_MEMORY_WINDOW, window);
        // 64-bit BARs behind the bridge sit in its prefetchable window (64-bit decoding).
        match (start64, self.memory64.map(|a| a.next_pci)) {
            (Some(start), Some(end)) if end > start => {
                let limit = end - 1;
                let value =
                    ((limit >> 20) as u32 & 0xfff) << 20 | ((start >> 20) as u32 & 0xfff) << 4 | 0x0001_0001;
                self.config.write32(bridge, offsets::BRIDGE_PREFETCHABLE_WINDOW, value);
                self.config.write32(bridge, offsets::BRIDGE_PREFETCHABLE_BASE_UPPER, (start >> 32) as u32);
                self.config.write32(bridge, offsets::BRIDGE_PREFETCHABLE_LIMIT_UPPER, (limit >> 32) as u32);
            }
            _ => self.config.write32(bridge, offsets::BRIDGE_PREFETCHABLE_WINDOW, 0x0000_fff0),
        }
    }
}

#[cfg(test)]
mod tests;
