//! The xHCI register blocks with the specification's names (eXtensible Host Controller Interface
//! for USB, revision 1.2: §5.3 capability registers, §5.4 operational registers, §5.5 runtime
//! registers, §5.6 doorbells, §7 extended capabilities; offsets and traps as tabulated in
//! docs/usb-storage.md §1 and §3).
//!
//! Every access is 32 bits wide. The 64-bit registers (CRCR, DCBAAP, ERSTBA, ERDP) are written
//! as two 32-bit halves, low first: the specification allows it (§5.1), and the BCM2711's PCIe
//! bridge drops the upper half of a 64-bit MMIO write (docs/usb-storage.md §1 step 7).
#![forbid(unsafe_code)]

use core::fmt;
use hal::mmio::{Reg, RegisterIo};
use tock_registers::register_bitfields;
use tock_registers::LocalRegisterCopy;

/// Capability register offsets from the xHCI base (§5.3).
pub mod capability {
    /// CAPLENGTH (bits 7:0) and HCIVERSION (bits 31:16).
    pub const CAPLENGTH_HCIVERSION: usize = 0x00;
    pub const HCSPARAMS1: usize = 0x04;
    pub const HCSPARAMS2: usize = 0x08;
    pub const HCSPARAMS3: usize = 0x0c;
    pub const HCCPARAMS1: usize = 0x10;
    /// Doorbell array offset (bits 31:2).
    pub const DBOFF: usize = 0x14;
    /// Runtime register space offset (bits 31:5).
    pub const RTSOFF: usize = 0x18;
}

/// Operational register offsets from the operational base (base + CAPLENGTH, §5.4).
pub mod operational {
    pub const USBCMD: usize = 0x00;
    pub const USBSTS: usize = 0x04;
    pub const PAGESIZE: usize = 0x08;
    pub const CRCR: usize = 0x18;
    pub const DCBAAP: usize = 0x30;
    pub const CONFIG: usize = 0x38;
    /// PORTSC of port 1; port n is at `PORT_REGISTERS + PORT_STRIDE × (n − 1)` (§5.4.8).
    pub const PORT_REGISTERS: usize = 0x400;
    pub const PORT_STRIDE: usize = 0x10;
}

/// The capability registers with fields (offsets from the register block's base).
pub const HCSPARAMS1: Reg<HCSPARAMS1::Register> = Reg::new(capability::HCSPARAMS1);
pub const HCSPARAMS2: Reg<HCSPARAMS2::Register> = Reg::new(capability::HCSPARAMS2);
pub const HCCPARAMS1: Reg<HCCPARAMS1::Register> = Reg::new(capability::HCCPARAMS1);
/// The operational registers with fields, from the operational base (place them with `at`).
pub const USBCMD: Reg<USBCMD::Register> = Reg::new(operational::USBCMD);
pub const USBSTS: Reg<USBSTS::Register> = Reg::new(operational::USBSTS);

/// Writes a 64-bit register as two 32-bit writes, low half first (§5.1), whatever the register
/// block does with a 64-bit access (`Mmio` makes one 64-bit store, which BCM2711's PCIe bridge
/// cuts in half: docs/usb-storage.md §1 step 7, docs/pcie-brcmstb.md §6).
pub fn write_split64<R: RegisterIo>(registers: &R, offset_bytes: usize, value: u64) {
    registers.write32(offset_bytes, value as u32);
    registers.write32(offset_bytes + 4, (value >> 32) as u32);
}

/// Interrupter register offsets from the runtime base (§5.5.2): interrupter i at 0x20 + 0x20 i.
pub mod interrupter {
    pub const FIRST: usize = 0x20;
    pub const STRIDE: usize = 0x20;
    pub const IMAN: usize = 0x00;
    pub const IMOD: usize = 0x04;
    pub const ERSTSZ: usize = 0x08;
    pub const ERSTBA: usize = 0x10;
    pub const ERDP: usize = 0x18;
}

register_bitfields![u32,
    /// Structural Parameters 1 (§5.3.3).
    pub HCSPARAMS1 [
        MaxSlots OFFSET(0) NUMBITS(8) [],
        MaxIntrs OFFSET(8) NUMBITS(11) [],
        MaxPorts OFFSET(24) NUMBITS(8) []
    ],
    /// Structural Parameters 2 (§5.3.4).
    pub HCSPARAMS2 [
        IST OFFSET(0) NUMBITS(4) [],
        ERSTMax OFFSET(4) NUMBITS(4) [],
        MaxScratchpadBufsHi OFFSET(21) NUMBITS(5) [],
        SPR OFFSET(26) NUMBITS(1) [],
        MaxScratchpadBufsLo OFFSET(27) NUMBITS(5) []
    ],
    /// Capability Parameters 1 (§5.3.6).
    pub HCCPARAMS1 [
        AC64 OFFSET(0) NUMBITS(1) [],
        BNC OFFSET(1) NUMBITS(1) [],
        /// Context Size: 1 = 64-byte contexts.
        CSZ OFFSET(2) NUMBITS(1) [],
        /// Port Power Control.
        PPC OFFSET(3) NUMBITS(1) [],
        /// Maximum Primary Stream Array Size: 2^(MaxPSASize + 1) entries, 0 = no streams.
        MaxPSASize OFFSET(12) NUMBITS(4) [],
        /// Extended Capabilities Pointer, in 32-bit words from the base.
        xECP OFFSET(16) NUMBITS(16) []
    ],
    /// USB Command (§5.4.1).
    pub USBCMD [
        RS OFFSET(0) NUMBITS(1) [],
        HCRST OFFSET(1) NUMBITS(1) [],
        INTE OFFSET(2) NUMBITS(1) [],
        HSEE OFFSET(3) NUMBITS(1) []
    ],
    /// USB Status (§5.4.2); HSE, EINT, PCD are write-1-to-clear.
    pub USBSTS [
        HCH OFFSET(0) NUMBITS(1) [],
        HSE OFFSET(2) NUMBITS(1) [],
        EINT OFFSET(3) NUMBITS(1) [],
        PCD OFFSET(4) NUMBITS(1) [],
        CNR OFFSET(11) NUMBITS(1) [],
        HCE OFFSET(12) NUMBITS(1) []
    ],
    /// Command Ring Control, low half (§5.4.5).
    pub CRCR [
        RCS OFFSET(0) NUMBITS(1) [],
        CS OFFSET(1) NUMBITS(1) [],
        CA OFFSET(2) NUMBITS(1) [],
        CRR OFFSET(3) NUMBITS(1) []
    ],
    /// Port Status and Control (§5.4.8).
    pub PORTSC [
        /// Current Connect Status.
        CCS OFFSET(0) NUMBITS(1) [],
        /// Port Enabled/Disabled: write 1 disables the port.
        PED OFFSET(1) NUMBITS(1) [],
        OCA OFFSET(3) NUMBITS(1) [],
        /// Port Reset (write 1 to start).
        PR OFFSET(4) NUMBITS(1) [],
        /// Port Link State (written only together with LWS).
        PLS OFFSET(5) NUMBITS(4) [
            U0 = 0,
            U3 = 3,
            Disabled = 4,
            RxDetect = 5,
            Inactive = 6,
            Polling = 7,
            Recovery = 8,
            HotReset = 9,
            ComplianceMode = 10,
            Resume = 15
        ],
        PP OFFSET(9) NUMBITS(1) [],
        PortSpeed OFFSET(10) NUMBITS(4) [],
        PIC OFFSET(14) NUMBITS(2) [],
        LWS OFFSET(16) NUMBITS(1) [],
        CSC OFFSET(17) NUMBITS(1) [],
        PEC OFFSET(18) NUMBITS(1) [],
        WRC OFFSET(19) NUMBITS(1) [],
        OCC OFFSET(20) NUMBITS(1) [],
        PRC OFFSET(21) NUMBITS(1) [],
        PLC OFFSET(22) NUMBITS(1) [],
        CEC OFFSET(23) NUMBITS(1) [],
        CAS OFFSET(24) NUMBITS(1) [],
        WCE OFFSET(25) NUMBITS(1) [],
        WDE OFFSET(26) NUMBITS(1) [],
        WOE OFFSET(27) NUMBITS(1) [],
        DR OFFSET(30) NUMBITS(1) [],
        /// Warm Port Reset (USB 3 ports, write 1 to start).
        WPR OFFSET(31) NUMBITS(1) []
    ],
    /// Interrupter Management (§5.5.2.1); IP is write-1-to-clear.
    pub IMAN [
        IP OFFSET(0) NUMBITS(1) [],
        IE OFFSET(1) NUMBITS(1) []
    ],
    /// Event Ring Dequeue Pointer, low half (§5.5.2.3.3); EHB is write-1-to-clear.
    pub ERDP [
        DESI OFFSET(0) NUMBITS(3) [],
        EHB OFFSET(3) NUMBITS(1) []
    ]
];

/// PORTSC bits that are write-1-to-clear: the change bits (§5.4.8 Table 5-27).
pub const PORTSC_CHANGE_BITS: u32 = 0x00fe_0000;
/// PORTSC bits a write must carry unchanged: PP, PIC and the wake enables (§4.19.2; U-Boot's
/// `XHCI_PORT_RWS` keeps the same set). PED (write 1 = disable), PR/WPR (start a reset), LWS
/// (write PLS) and the change bits are never carried over.
pub const PORTSC_PRESERVED_BITS: u32 = (1 << 9) | (3 << 14) | (7 << 25);

/// The value to write to PORTSC to set `set_bits` (PR, WPR, or change bits to clear) without
/// disabling the port, clearing other change bits or moving the link state.
pub fn portsc_write_value(current: u32, set_bits: u32) -> u32 {
    (current & PORTSC_PRESERVED_BITS) | set_bits
}

/// PORTSC decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortStatus(pub u32);

impl PortStatus {
    fn register(self) -> LocalRegisterCopy<u32, PORTSC::Register> {
        LocalRegisterCopy::new(self.0)
    }
    pub fn connected(self) -> bool {
        self.register().is_set(PORTSC::CCS)
    }
    pub fn enabled(self) -> bool {
        self.register().is_set(PORTSC::PED)
    }
    pub fn powered(self) -> bool {
        self.register().is_set(PORTSC::PP)
    }
    pub fn in_reset(self) -> bool {
        self.register().is_set(PORTSC::PR)
    }
    pub fn reset_changed(self) -> bool {
        self.register().is_set(PORTSC::PRC)
    }
    pub fn link_state(self) -> u8 {
        self.register().read(PORTSC::PLS) as u8
    }
    /// Protocol Speed ID (§7.2.1; Table 7-13 defaults: 1 FS, 2 LS, 3 HS, 4 SS, 5 SSP).
    pub fn speed_id(self) -> u8 {
        self.register().read(PORTSC::PortSpeed) as u8
    }
    pub fn change_bits(self) -> u32 {
        self.0 & PORTSC_CHANGE_BITS
    }
}

/// Port Link State values (§5.4.8 PLS).
pub mod link_state {
    pub const U0: u8 = 0;
    pub const DISABLED: u8 = 4;
    pub const RX_DETECT: u8 = 5;
    pub const INACTIVE: u8 = 6;
    pub const POLLING: u8 = 7;
    pub const COMPLIANCE_MODE: u8 = 10;
}

/// The speeds a root port reports (default Protocol Speed IDs, §7.2.2.1.1 Table 7-13).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Speed {
    Low,
    Full,
    High,
    Super,
    SuperPlus,
}

impl Speed {
    pub fn from_id(id: u8) -> Option<Speed> {
        match id {
            1 => Some(Speed::Full),
            2 => Some(Speed::Low),
            3 => Some(Speed::High),
            4 => Some(Speed::Super),
            5 => Some(Speed::SuperPlus),
            _ => None,
        }
    }

    /// The Protocol Speed ID that goes into the slot context.
    pub fn id(self) -> u8 {
        match self {
            Speed::Full => 1,
            Speed::Low => 2,
            Speed::High => 3,
            Speed::Super => 4,
            Speed::SuperPlus => 5,
        }
    }

    /// Default control endpoint packet size before the device descriptor is read (USB 3.2
    /// §9.6.1 bMaxPacketSize0: 512 at SuperSpeed; USB 2.0 §5.5.3: 64 at high speed, 8 at low
    /// speed; full speed starts at 64 and is corrected from the descriptor, as Linux does).
    pub fn default_control_packet_bytes(self) -> u16 {
        match self {
            Speed::Super | Speed::SuperPlus => 512,
            Speed::High | Speed::Full => 64,
            Speed::Low => 8,
        }
    }

    /// Largest bulk packet at this speed (USB 2.0 §5.8.3, USB 3.2 §9.6.6).
    pub fn max_bulk_packet_bytes(self) -> u16 {
        match self {
            Speed::Super | Speed::SuperPlus => 1024,
            Speed::High => 512,
            Speed::Full | Speed::Low => 64,
        }
    }

    pub fn is_super_speed(self) -> bool {
        matches!(self, Speed::Super | Speed::SuperPlus)
    }
}

impl fmt::Display for Speed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Speed::Low => "Low Speed 1.5 Mb/s",
            Speed::Full => "Full Speed 12 Mb/s",
            Speed::High => "High Speed 480 Mb/s",
            Speed::Super => "SuperSpeed 5 Gb/s",
            Speed::SuperPlus => "SuperSpeedPlus 10 Gb/s",
        })
    }
}

/// The capability registers decoded into the units the driver uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Capabilities {
    pub capability_length: u8,
    /// HCIVERSION as BCD, 0x0100 = 1.0.0.
    pub version: u16,
    pub max_slots: u8,
    pub max_interrupters: u16,
    pub max_ports: u8,
    pub event_ring_segment_table_max: u8,
    pub scratchpad_buffers: u16,
    pub addressing_64: bool,
    /// 64 or 32 bytes per context (HCCPARAMS1.CSZ).
    pub context_bytes: usize,
    pub port_power_control: bool,
    /// HCCPARAMS1.MaxPSASize (0: no streams).
    pub max_primary_stream_array_size: u8,
    /// Byte offset of the first extended capability (0: none).
    pub extended_capabilities_offset: usize,
    pub doorbell_offset: usize,
    pub runtime_offset: usize,
}

impl Capabilities {
    /// Decodes the words at capability offsets 0x00, 0x04, 0x08, 0x10, 0x14 and 0x18.
    pub fn decode(
        length_version: u32,
        structural1: LocalRegisterCopy<u32, HCSPARAMS1::Register>,
        structural2: LocalRegisterCopy<u32, HCSPARAMS2::Register>,
        parameters1: LocalRegisterCopy<u32, HCCPARAMS1::Register>,
        dboff: u32,
        rtsoff: u32,
    ) -> Self {
        let scratchpads_high = structural2.read(HCSPARAMS2::MaxScratchpadBufsHi) as u16;
        let scratchpads_low = structural2.read(HCSPARAMS2::MaxScratchpadBufsLo) as u16;
        Capabilities {
            capability_length: length_version as u8,
            version: (length_version >> 16) as u16,
            max_slots: structural1.read(HCSPARAMS1::MaxSlots) as u8,
            max_interrupters: structural1.read(HCSPARAMS1::MaxIntrs) as u16,
            max_ports: structural1.read(HCSPARAMS1::MaxPorts) as u8,
            event_ring_segment_table_max: structural2.read(HCSPARAMS2::ERSTMax) as u8,
            scratchpad_buffers: (scratchpads_high << 5) | scratchpads_low,
            addressing_64: parameters1.is_set(HCCPARAMS1::AC64),
            context_bytes: if parameters1.is_set(HCCPARAMS1::CSZ) { 64 } else { 32 },
            port_power_control: parameters1.is_set(HCCPARAMS1::PPC),
            max_primary_stream_array_size: parameters1.read(HCCPARAMS1::MaxPSASize) as u8,
            extended_capabilities_offset: (parameters1.read(HCCPARAMS1::xECP) as usize) * 4,
            doorbell_offset: (dboff & !0x3) as usize,
            runtime_offset: (rtsoff & !0x1f) as usize,
        }
    }

    /// Entries the primary stream array may have (2^(MaxPSASize + 1)), 0 without streams.
    pub fn max_stream_array_entries(&self) -> u32 {
        match self.max_primary_stream_array_size {
            0 => 0,
            size => 2u32 << size,
        }
    }
}

impl fmt::Display for Capabilities {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "xHCI {}.{}{}, {} slots, {} ports, {} interrupters, {} scratchpad page{}, {}-byte contexts, {}",
            self.version >> 8,
            (self.version >> 4) & 0xf,
            match self.version & 0xf {
                0 => alloc::string::String::new(),
                minor => alloc::format!(".{minor}"),
            },
            self.max_slots,
            self.max_ports,
            self.max_interrupters,
            self.scratchpad_buffers,
            if self.scratchpad_buffers == 1 { "" } else { "s" },
            self.context_bytes,
            match self.max_stream_array_entries() {
                0 => alloc::string::String::from("no streams"),
                entries => alloc::format!("stream arrays up to {entries} entries"),
            }
        )
    }
}

/// Extended capability IDs (§7 Table 7-1).
pub mod extended_capability {
    /// USB Legacy Support (§7.1).
    pub const LEGACY_SUPPORT: u8 = 1;
    /// Supported Protocol (§7.2).
    pub const SUPPORTED_PROTOCOL: u8 = 2;
    /// USBLEGSUP: HC BIOS Owned Semaphore (bit 16) and HC OS Owned Semaphore (bit 24).
    pub const BIOS_OWNED: u32 = 1 << 16;
    pub const OS_OWNED: u32 = 1 << 24;
    /// USBLEGCTLSTS (at +4): the SMI enables are bits 0, 4, 13, 14, 15; the RW1C events 29-31.
    pub const LEGACY_SMI_ENABLES: u32 = (1 << 0) | (1 << 4) | (7 << 13);
    pub const LEGACY_SMI_EVENTS: u32 = 7 << 29;
}

/// One Supported Protocol capability (§7.2): which root ports speak which USB major revision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SupportedProtocol {
    /// 2 (USB 2) or 3 (USB 3).
    pub major_revision: u8,
    pub minor_revision: u8,
    /// First root port (1-based) and how many.
    pub first_port: u8,
    pub port_count: u8,
    /// Protocol Slot Type for Enable Slot.
    pub slot_type: u8,
}

impl SupportedProtocol {
    /// Decodes the capability's first, third and fourth words (offsets +0, +8, +0xC).
    pub fn decode(word0: u32, word2: u32, word3: u32) -> Self {
        SupportedProtocol {
            major_revision: (word0 >> 24) as u8,
            minor_revision: (word0 >> 16) as u8,
            first_port: word2 as u8,
            port_count: (word2 >> 8) as u8,
            slot_type: (word3 & 0x1f) as u8,
        }
    }

    pub fn covers(&self, port: u8) -> bool {
        port >= self.first_port && u16::from(port) < u16::from(self.first_port) + u16::from(self.port_count)
    }
}

/// Walks the extended capability list from `first_offset` (bytes from the base) with `read32`,
/// calling `visit(offset, id, first_word)` for each; stops at a zero next pointer, after 64
/// capabilities, or when a pointer leaves `register_bytes`.
pub fn walk_extended_capabilities(
    first_offset: usize,
    register_bytes: usize,
    read32: impl Fn(usize) -> u32,
    mut visit: impl FnMut(usize, u8, u32),
) {
    let mut offset = first_offset;
    for _ in 0..64 {
        if offset == 0 || offset + 4 > register_bytes {
            return;
        }
        let word = read32(offset);
        if word == u32::MAX {
            return;
        }
        visit(offset, word as u8, word);
        let next_words = ((word >> 8) & 0xff) as usize;
        if next_words == 0 {
            return;
        }
        offset += next_words * 4;
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;
    use std::vec::Vec;

    /// What QEMU 10's `qemu-xhci` reports (hw/usb/hcd-xhci.c `xhci_cap_read`, streams on, p2 = p3
    /// = 4, 64 slots, 16 interrupters).
    fn qemu() -> Capabilities {
        Capabilities::decode(
            0x0100_0040,
            LocalRegisterCopy::new(0x0800_1040),
            LocalRegisterCopy::new(0x0000_000f),
            LocalRegisterCopy::new(0x0008_7001),
            0x2000,
            0x1000,
        )
    }

    #[test]
    fn qemu_capabilities_decode_as_its_source_says() {
        let caps = qemu();
        assert_eq!(caps.capability_length, 0x40);
        assert_eq!(caps.version, 0x0100);
        assert_eq!((caps.max_slots, caps.max_ports, caps.max_interrupters), (64, 8, 16));
        assert_eq!(caps.scratchpad_buffers, 0);
        assert_eq!(caps.context_bytes, 32);
        assert!(caps.addressing_64 && !caps.port_power_control);
        assert_eq!(caps.max_primary_stream_array_size, 7);
        assert_eq!(caps.max_stream_array_entries(), 256);
        assert_eq!(caps.extended_capabilities_offset, 0x20);
        assert_eq!((caps.doorbell_offset, caps.runtime_offset), (0x2000, 0x1000));
        assert_eq!(
            format!("{caps}"),
            "xHCI 1.0, 64 slots, 8 ports, 16 interrupters, 0 scratchpad pages, 32-byte contexts, stream arrays up to 256 entries"
        );
    }

    #[test]
    fn scratchpad_count_joins_both_halves_and_csz_selects_64_byte_contexts() {
        // Hi = 1 (bits 25:21), Lo = 3 (bits 31:27): 1 << 5 | 3 = 35.
        let caps = Capabilities::decode(
            0x0110_0020,
            LocalRegisterCopy::new(0),
            LocalRegisterCopy::new((1 << 21) | (3 << 27)),
            LocalRegisterCopy::new(1 << 2),
            0x100,
            0x200,
        );
        assert_eq!(caps.scratchpad_buffers, 35);
        assert_eq!(caps.context_bytes, 64);
        assert_eq!(caps.max_stream_array_entries(), 0);
        assert!(format!("{caps}").starts_with("xHCI 1.1, "));
        assert!(format!("{caps}").ends_with("no streams"));
    }

    #[test]
    fn port_writes_never_disable_the_port_or_clear_other_changes() {
        // Connected, enabled, powered, SuperSpeed, U0, CSC and PRC pending.
        let current = 1 | 2 | (1 << 9) | (4 << 10) | (1 << 17) | (1 << 21);
        let status = PortStatus(current);
        assert!(status.connected() && status.enabled() && status.powered());
        assert_eq!(status.speed_id(), 4);
        assert_eq!(status.change_bits(), (1 << 17) | (1 << 21));
        // Clearing CSC alone: PP kept, PED and PRC not written.
        assert_eq!(portsc_write_value(current, 1 << 17), (1 << 9) | (1 << 17));
        // A reset keeps PP and the wake bits only.
        let with_wake = current | (1 << 25);
        assert_eq!(portsc_write_value(with_wake, 1 << 4), (1 << 9) | (1 << 25) | (1 << 4));
    }

    #[test]
    fn speeds_map_both_ways() {
        for id in 1..=5 {
            assert_eq!(Speed::from_id(id).unwrap().id(), id);
        }
        assert_eq!(Speed::from_id(0), None);
        assert_eq!(Speed::from_id(4).unwrap().default_control_packet_bytes(), 512);
        assert_eq!(Speed::High.max_bulk_packet_bytes(), 512);
        assert_eq!(format!("{}", Speed::Super), "SuperSpeed 5 Gb/s");
        assert!(Speed::High < Speed::Super);
    }

    #[test]
    fn extended_capabilities_are_walked_by_their_next_pointers() {
        // QEMU: USB 2 protocol at 0x20 (next 4 words), USB 3 protocol at 0x30 (last).
        let words = |offset: usize| match offset {
            0x20 => 0x0200_0402,
            0x28 => (4 << 8) | 5,
            0x2c => 0,
            0x30 => 0x0300_0002,
            0x38 => (4 << 8) | 1,
            0x3c => 0,
            _ => 0,
        };
        let mut seen = Vec::new();
        walk_extended_capabilities(0x20, 0x4000, words, |offset, id, _| seen.push((offset, id)));
        assert_eq!(seen, [(0x20, 2), (0x30, 2)]);
        let usb2 = SupportedProtocol::decode(words(0x20), words(0x28), words(0x2c));
        assert_eq!((usb2.major_revision, usb2.first_port, usb2.port_count), (2, 5, 4));
        assert!(usb2.covers(5) && usb2.covers(8) && !usb2.covers(4) && !usb2.covers(9));
        // A list that loops back on itself ends after a bounded number of steps.
        let mut count = 0;
        walk_extended_capabilities(0x40, 0x4000, |_| 0x0000_0001, |_, _, _| count += 1);
        assert_eq!(count, 1, "next pointer 0 ends the walk");
        walk_extended_capabilities(0x40, 0x4000, |_| 0x0000_0101, |_, _, _| count += 1);
        assert!(count < 70);
        let mut none = 0;
        walk_extended_capabilities(0x4000, 0x4000, |_| 1, |_, _, _| none += 1);
        assert_eq!(none, 0, "pointer outside the registers");
    }
}
