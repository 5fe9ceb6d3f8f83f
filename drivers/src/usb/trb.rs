//! Transfer Request Blocks: the 16-byte entries of every xHCI ring (eXtensible Host Controller
//! Interface 1.2, §6.4: transfer TRBs §6.4.1, event TRBs §6.4.2, command TRBs §6.4.3, Link TRB
//! §6.4.4.1; completion codes §6.4.5 Table 6-90). Builders for the TRBs the driver writes and a
//! decoder for the events it reads; the cycle bit is left to the ring that places the TRB.
#![forbid(unsafe_code)]

use core::fmt;

/// Bytes per TRB.
pub const TRB_BYTES: usize = 16;
/// The most one transfer TRB may carry; TRB buffers also never cross a 64 KiB boundary
/// (§4.11.7.1, §6.4.1: TRB Transfer Length is 17 bits, at most 64 KiB).
pub const MAX_TRB_TRANSFER_BYTES: usize = 64 << 10;

/// TRB types (§6.4.6 Table 6-91).
pub mod trb_type {
    pub const NORMAL: u8 = 1;
    pub const SETUP_STAGE: u8 = 2;
    pub const DATA_STAGE: u8 = 3;
    pub const STATUS_STAGE: u8 = 4;
    pub const LINK: u8 = 6;
    pub const NO_OP: u8 = 8;
    pub const ENABLE_SLOT: u8 = 9;
    pub const DISABLE_SLOT: u8 = 10;
    pub const ADDRESS_DEVICE: u8 = 11;
    pub const CONFIGURE_ENDPOINT: u8 = 12;
    pub const EVALUATE_CONTEXT: u8 = 13;
    pub const RESET_ENDPOINT: u8 = 14;
    pub const STOP_ENDPOINT: u8 = 15;
    pub const SET_TR_DEQUEUE_POINTER: u8 = 16;
    pub const RESET_DEVICE: u8 = 17;
    pub const NO_OP_COMMAND: u8 = 23;
    pub const TRANSFER_EVENT: u8 = 32;
    pub const COMMAND_COMPLETION_EVENT: u8 = 33;
    pub const PORT_STATUS_CHANGE_EVENT: u8 = 34;
    pub const HOST_CONTROLLER_EVENT: u8 = 37;
}

/// Control-word (dword 3) flags (§6.4.1.1).
pub mod flags {
    pub const CYCLE: u32 = 1 << 0;
    /// Link TRB: Toggle Cycle.
    pub const TOGGLE_CYCLE: u32 = 1 << 1;
    /// Interrupt on Short Packet.
    pub const ISP: u32 = 1 << 2;
    /// Chain: the TD continues in the next TRB.
    pub const CHAIN: u32 = 1 << 4;
    /// Interrupt On Completion.
    pub const IOC: u32 = 1 << 5;
    /// Immediate Data (Setup Stage).
    pub const IDT: u32 = 1 << 6;
    /// Data/Status Stage direction: 1 = IN.
    pub const DIRECTION_IN: u32 = 1 << 16;
}

/// One TRB as four little-endian words.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Trb {
    pub dwords: [u32; 4],
}

impl Trb {
    fn with_type(trb_type: u8) -> Trb {
        Trb { dwords: [0, 0, 0, u32::from(trb_type) << 10] }
    }

    fn pointer(mut self, address: u64) -> Trb {
        self.dwords[0] = address as u32;
        self.dwords[1] = (address >> 32) as u32;
        self
    }

    fn slot(mut self, slot_id: u8) -> Trb {
        self.dwords[3] |= u32::from(slot_id) << 24;
        self
    }

    fn endpoint(mut self, dci: u8) -> Trb {
        self.dwords[3] |= u32::from(dci & 0x1f) << 16;
        self
    }

    /// Adds control-word flags.
    pub fn with_flags(mut self, bits: u32) -> Trb {
        self.dwords[3] |= bits;
        self
    }

    pub fn trb_type(&self) -> u8 {
        ((self.dwords[3] >> 10) & 0x3f) as u8
    }

    pub fn cycle(&self) -> bool {
        self.dwords[3] & flags::CYCLE != 0
    }

    pub fn set_cycle(&mut self, cycle: bool) {
        self.dwords[3] = (self.dwords[3] & !flags::CYCLE) | u32::from(cycle);
    }

    pub fn is_chained(&self) -> bool {
        self.dwords[3] & flags::CHAIN != 0
    }

    pub fn set_chain(&mut self, chain: bool) {
        self.dwords[3] = (self.dwords[3] & !flags::CHAIN) | if chain { flags::CHAIN } else { 0 };
    }

    pub fn parameter(&self) -> u64 {
        u64::from(self.dwords[0]) | (u64::from(self.dwords[1]) << 32)
    }

    /// TRB Transfer Length of a transfer TRB (bits 16:0 of dword 2).
    pub fn transfer_length(&self) -> u32 {
        self.dwords[2] & 0x1_ffff
    }

    /// A Normal TRB (§6.4.1.1): `length_bytes` at bus address `buffer`, with TD Size
    /// `packets_left` (clamped to 31, §4.11.2.4) and `extra_flags` (CHAIN, IOC, ISP).
    pub fn normal(buffer: u64, length_bytes: u32, packets_left: u32, extra_flags: u32) -> Trb {
        debug_assert!(length_bytes as usize <= MAX_TRB_TRANSFER_BYTES);
        let mut trb = Trb::with_type(trb_type::NORMAL).pointer(buffer).with_flags(extra_flags);
        trb.dwords[2] = length_bytes | (packets_left.min(31) << 17);
        trb
    }

    /// A Setup Stage TRB carrying the 8-byte request as immediate data (§6.4.1.2.1); the Transfer
    /// Type says whether a data stage follows and its direction (0 none, 2 OUT, 3 IN).
    pub fn setup_stage(request: u64, data_stage: Option<bool>) -> Trb {
        let transfer_type = match data_stage {
            None => 0,
            Some(false) => 2,
            Some(true) => 3,
        };
        let mut trb = Trb::with_type(trb_type::SETUP_STAGE).pointer(request).with_flags(flags::IDT);
        trb.dwords[2] = 8;
        trb.dwords[3] |= transfer_type << 16;
        trb
    }

    /// A Data Stage TRB (§6.4.1.2.2).
    pub fn data_stage(buffer: u64, length_bytes: u32, direction_in: bool) -> Trb {
        let mut trb = Trb::with_type(trb_type::DATA_STAGE).pointer(buffer);
        trb.dwords[2] = length_bytes;
        if direction_in {
            trb.dwords[3] |= flags::DIRECTION_IN | flags::ISP;
        }
        trb
    }

    /// A Status Stage TRB (§6.4.1.2.3): IN unless the data stage was IN (USB 2.0 §8.5.3), IOC.
    pub fn status_stage(direction_in: bool) -> Trb {
        let trb = Trb::with_type(trb_type::STATUS_STAGE).with_flags(flags::IOC);
        if direction_in {
            trb.with_flags(flags::DIRECTION_IN)
        } else {
            trb
        }
    }

    /// A Link TRB to `segment` (§6.4.4.1) with Toggle Cycle.
    pub fn link(segment: u64) -> Trb {
        Trb::with_type(trb_type::LINK).pointer(segment).with_flags(flags::TOGGLE_CYCLE)
    }

    pub fn no_op_command() -> Trb {
        Trb::with_type(trb_type::NO_OP_COMMAND)
    }

    /// Enable Slot (§6.4.3.2) for a Protocol Slot Type.
    pub fn enable_slot(slot_type: u8) -> Trb {
        let mut trb = Trb::with_type(trb_type::ENABLE_SLOT);
        trb.dwords[3] |= u32::from(slot_type & 0x1f) << 16;
        trb
    }

    pub fn disable_slot(slot_id: u8) -> Trb {
        Trb::with_type(trb_type::DISABLE_SLOT).slot(slot_id)
    }

    /// Address Device (§6.4.3.4) with BSR = 0: the xHC sends SET_ADDRESS itself.
    pub fn address_device(input_context: u64, slot_id: u8) -> Trb {
        Trb::with_type(trb_type::ADDRESS_DEVICE).pointer(input_context).slot(slot_id)
    }

    pub fn configure_endpoint(input_context: u64, slot_id: u8) -> Trb {
        Trb::with_type(trb_type::CONFIGURE_ENDPOINT).pointer(input_context).slot(slot_id)
    }

    pub fn evaluate_context(input_context: u64, slot_id: u8) -> Trb {
        Trb::with_type(trb_type::EVALUATE_CONTEXT).pointer(input_context).slot(slot_id)
    }

    /// Reset Endpoint (§6.4.3.7) with TSP = 0: the endpoint's data toggle / sequence is reset.
    pub fn reset_endpoint(slot_id: u8, dci: u8) -> Trb {
        Trb::with_type(trb_type::RESET_ENDPOINT).slot(slot_id).endpoint(dci)
    }

    pub fn stop_endpoint(slot_id: u8, dci: u8) -> Trb {
        Trb::with_type(trb_type::STOP_ENDPOINT).slot(slot_id).endpoint(dci)
    }

    /// Set TR Dequeue Pointer (§6.4.3.9): `dequeue` (16-byte aligned) with DCS, for stream
    /// `stream_id` (0 without streams; then SCT is 0, else 1 = primary ring).
    pub fn set_tr_dequeue(slot_id: u8, dci: u8, stream_id: u16, dequeue: u64, cycle: bool) -> Trb {
        let stream_context_type = if stream_id == 0 { 0 } else { 1 << 1 };
        let mut trb = Trb::with_type(trb_type::SET_TR_DEQUEUE_POINTER)
            .pointer((dequeue & !0xf) | stream_context_type | u64::from(cycle))
            .slot(slot_id)
            .endpoint(dci);
        trb.dwords[2] = u32::from(stream_id) << 16;
        trb
    }

    pub fn reset_device(slot_id: u8) -> Trb {
        Trb::with_type(trb_type::RESET_DEVICE).slot(slot_id)
    }
}

/// A completion code (§6.4.5 Table 6-90).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompletionCode(pub u8);

impl CompletionCode {
    pub const SUCCESS: CompletionCode = CompletionCode(1);
    pub const DATA_BUFFER_ERROR: CompletionCode = CompletionCode(2);
    pub const BABBLE_DETECTED: CompletionCode = CompletionCode(3);
    pub const USB_TRANSACTION_ERROR: CompletionCode = CompletionCode(4);
    pub const TRB_ERROR: CompletionCode = CompletionCode(5);
    pub const STALL_ERROR: CompletionCode = CompletionCode(6);
    pub const RESOURCE_ERROR: CompletionCode = CompletionCode(7);
    pub const NO_SLOTS_AVAILABLE: CompletionCode = CompletionCode(9);
    pub const INVALID_STREAM_TYPE: CompletionCode = CompletionCode(10);
    pub const SLOT_NOT_ENABLED: CompletionCode = CompletionCode(11);
    pub const ENDPOINT_NOT_ENABLED: CompletionCode = CompletionCode(12);
    pub const SHORT_PACKET: CompletionCode = CompletionCode(13);
    pub const PARAMETER_ERROR: CompletionCode = CompletionCode(17);
    pub const CONTEXT_STATE_ERROR: CompletionCode = CompletionCode(19);
    pub const EVENT_RING_FULL: CompletionCode = CompletionCode(21);
    pub const STOPPED: CompletionCode = CompletionCode(26);
    pub const STOPPED_LENGTH_INVALID: CompletionCode = CompletionCode(27);
    pub const INVALID_STREAM_ID: CompletionCode = CompletionCode(34);

    /// Success, or a short packet (a successful transfer with a residue, §4.10.1.1).
    pub fn is_success(self) -> bool {
        self == Self::SUCCESS || self == Self::SHORT_PACKET
    }

    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "Invalid",
            1 => "Success",
            2 => "Data Buffer Error",
            3 => "Babble Detected Error",
            4 => "USB Transaction Error",
            5 => "TRB Error",
            6 => "Stall Error",
            7 => "Resource Error",
            8 => "Bandwidth Error",
            9 => "No Slots Available Error",
            10 => "Invalid Stream Type Error",
            11 => "Slot Not Enabled Error",
            12 => "Endpoint Not Enabled Error",
            13 => "Short Packet",
            14 => "Ring Underrun",
            15 => "Ring Overrun",
            16 => "VF Event Ring Full Error",
            17 => "Parameter Error",
            18 => "Bandwidth Overrun Error",
            19 => "Context State Error",
            20 => "No Ping Response Error",
            21 => "Event Ring Full Error",
            22 => "Incompatible Device Error",
            23 => "Missed Service Error",
            24 => "Command Ring Stopped",
            25 => "Command Aborted",
            26 => "Stopped",
            27 => "Stopped - Length Invalid",
            28 => "Stopped - Short Packet",
            29 => "Max Exit Latency Too Large Error",
            31 => "Isoch Buffer Overrun",
            32 => "Event Lost Error",
            33 => "Undefined Error",
            34 => "Invalid Stream ID Error",
            35 => "Secondary Bandwidth Error",
            36 => "Split Transaction Error",
            _ => "reserved/vendor code",
        }
    }
}

impl fmt::Display for CompletionCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (completion code {})", self.name(), self.0)
    }
}

/// An event TRB, decoded (§6.4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// Transfer Event (§6.4.2.1): the TRB it reports, the bytes of that TRB not transferred,
    /// the endpoint (DCI) and slot.
    Transfer { trb_pointer: u64, residual_bytes: u32, code: CompletionCode, slot_id: u8, dci: u8 },
    /// Command Completion Event (§6.4.2.2).
    CommandCompletion { command_pointer: u64, code: CompletionCode, slot_id: u8, parameter: u32 },
    /// Port Status Change Event (§6.4.2.3), with the 1-based port.
    PortStatusChange { port: u8 },
    /// Host Controller Event (§6.4.2.6): the xHC reports an error of its own (event ring full).
    HostController { code: CompletionCode },
    /// Any other event type.
    Other { trb_type: u8 },
}

impl Event {
    pub fn decode(trb: &Trb) -> Event {
        let code = CompletionCode((trb.dwords[2] >> 24) as u8);
        let slot_id = (trb.dwords[3] >> 24) as u8;
        match trb.trb_type() {
            trb_type::TRANSFER_EVENT => Event::Transfer {
                trb_pointer: trb.parameter(),
                residual_bytes: trb.dwords[2] & 0x00ff_ffff,
                code,
                slot_id,
                dci: ((trb.dwords[3] >> 16) & 0x1f) as u8,
            },
            trb_type::COMMAND_COMPLETION_EVENT => Event::CommandCompletion {
                command_pointer: trb.parameter(),
                code,
                slot_id,
                parameter: trb.dwords[2] & 0x00ff_ffff,
            },
            trb_type::PORT_STATUS_CHANGE_EVENT => {
                Event::PortStatusChange { port: (trb.dwords[0] >> 24) as u8 }
            }
            trb_type::HOST_CONTROLLER_EVENT => Event::HostController { code },
            other => Event::Other { trb_type: other },
        }
    }
}

/// Splits `length_bytes` at bus address `buffer` into TRB-sized pieces that never cross a
/// 64 KiB boundary (§4.11.7.1), calling `piece(address, bytes)` in order.
pub fn split_at_64k(buffer: u64, length_bytes: usize, mut piece: impl FnMut(u64, u32)) {
    let mut address = buffer;
    let mut remaining = length_bytes;
    while remaining > 0 {
        let to_boundary = MAX_TRB_TRANSFER_BYTES - (address as usize & (MAX_TRB_TRANSFER_BYTES - 1));
        let bytes = remaining.min(to_boundary);
        piece(address, bytes as u32);
        address += bytes as u64;
        remaining -= bytes;
    }
}

/// Whether `length_bytes` at `buffer` fit one transfer TRB ([`split_at_64k`] makes one piece).
pub fn fits_one_trb(buffer: u64, length_bytes: usize) -> bool {
    let offset = buffer as usize & (MAX_TRB_TRANSFER_BYTES - 1);
    length_bytes > 0 && offset + length_bytes <= MAX_TRB_TRANSFER_BYTES
}

/// How many TRBs [`split_at_64k`] makes.
pub fn trbs_for(buffer: u64, length_bytes: usize) -> usize {
    let mut count = 0;
    split_at_64k(buffer, length_bytes, |_, _| count += 1);
    count
}

/// The Normal TRBs of one bulk TD: 64 KiB-bounded pieces, TD Size per §4.11.2.4 (packets left
/// after this TRB, at most 31, 0 in the last), CHAIN on all but the last, IOC on the last, ISP
/// on every piece of an IN transfer (so a short transfer reports where it stopped).
pub fn bulk_td(
    buffer: u64,
    length_bytes: usize,
    max_packet_bytes: u16,
    direction_in: bool,
    mut push: impl FnMut(Trb),
) {
    let packet = u64::from(max_packet_bytes.max(1));
    let total = length_bytes as u64;
    let count = trbs_for(buffer, length_bytes);
    let mut done = 0u64;
    let mut index = 0;
    let isp = if direction_in { flags::ISP } else { 0 };
    split_at_64k(buffer, length_bytes, |address, bytes| {
        index += 1;
        done += u64::from(bytes);
        let last = index == count;
        let packets_left = if last { 0 } else { (total - done).div_ceil(packet).min(31) as u32 };
        let chain_or_ioc = if last { flags::IOC } else { flags::CHAIN };
        push(Trb::normal(address, bytes, packets_left, chain_or_ioc | isp));
    });
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::format;
    use std::vec::Vec;

    #[test]
    fn command_trbs_put_slot_endpoint_and_type_where_the_spec_says() {
        let trb = Trb::address_device(0x1234_5640, 7);
        assert_eq!(trb.dwords, [0x1234_5640, 0, 0, (7 << 24) | (11 << 10)]);
        let trb = Trb::reset_endpoint(3, 5);
        assert_eq!(trb.dwords[3], (3 << 24) | (5 << 16) | (14 << 10));
        let trb = Trb::set_tr_dequeue(2, 6, 9, 0x8000_1230, true);
        assert_eq!(trb.dwords[0], 0x8000_1230 | 0b0010 | 1, "SCT 1 (primary ring) and DCS");
        assert_eq!(trb.dwords[2], 9 << 16);
        assert_eq!(trb.trb_type(), trb_type::SET_TR_DEQUEUE_POINTER);
        let plain = Trb::set_tr_dequeue(2, 3, 0, 0x8000_1000, false);
        assert_eq!(plain.dwords[0], 0x8000_1000, "no streams: SCT 0");
        assert_eq!(Trb::enable_slot(2).dwords[3], (9 << 10) | (2 << 16));
        assert_eq!(Trb::link(0x10_0000_0000).dwords, [0, 0x10, 0, (6 << 10) | 2]);
        assert_eq!(Trb::configure_endpoint(0x40, 1).trb_type(), 12);
        assert_eq!(Trb::evaluate_context(0x40, 1).trb_type(), 13);
        assert_eq!(Trb::stop_endpoint(1, 3).dwords[3], (1 << 24) | (3 << 16) | (15 << 10));
        assert_eq!(Trb::disable_slot(4).dwords[3], (4 << 24) | (10 << 10));
        assert_eq!(Trb::reset_device(4).dwords[3], (4 << 24) | (17 << 10));
        assert_eq!(Trb::no_op_command().trb_type(), 23);
    }

    #[test]
    fn control_stages_encode_direction_and_immediate_data() {
        // GET_DESCRIPTOR(device, 18): 80 06 00 01 00 00 12 00.
        let request = u64::from_le_bytes([0x80, 0x06, 0x00, 0x01, 0x00, 0x00, 0x12, 0x00]);
        let setup = Trb::setup_stage(request, Some(true));
        assert_eq!(setup.dwords, [0x0100_0680, 0x0012_0000, 8, (3 << 16) | (2 << 10) | (1 << 6)]);
        assert_eq!(Trb::setup_stage(0, None).dwords[3] >> 16 & 3, 0);
        assert_eq!(Trb::setup_stage(0, Some(false)).dwords[3] >> 16 & 3, 2);
        let data = Trb::data_stage(0x4000, 18, true);
        assert_eq!(data.dwords[3], (3 << 10) | (1 << 16) | flags::ISP);
        assert_eq!(Trb::status_stage(false).dwords[3], (4 << 10) | flags::IOC);
        assert_eq!(Trb::status_stage(true).dwords[3], (4 << 10) | flags::IOC | (1 << 16));
    }

    #[test]
    fn events_decode_their_fields() {
        let transfer =
            Trb { dwords: [0x4000_0010, 0x10, (13 << 24) | 512, (5 << 24) | (3 << 16) | (32 << 10) | 1] };
        assert_eq!(
            Event::decode(&transfer),
            Event::Transfer {
                trb_pointer: 0x10_4000_0010,
                residual_bytes: 512,
                code: CompletionCode::SHORT_PACKET,
                slot_id: 5,
                dci: 3
            }
        );
        let command = Trb { dwords: [0x100, 0, 1 << 24, (2 << 24) | (33 << 10)] };
        assert!(matches!(
            Event::decode(&command),
            Event::CommandCompletion {
                command_pointer: 0x100,
                code: CompletionCode::SUCCESS,
                slot_id: 2,
                ..
            }
        ));
        let port = Trb { dwords: [5 << 24, 0, 1 << 24, 34 << 10] };
        assert_eq!(Event::decode(&port), Event::PortStatusChange { port: 5 });
        let full = Trb { dwords: [0, 0, 21 << 24, 37 << 10] };
        assert_eq!(Event::decode(&full), Event::HostController { code: CompletionCode::EVENT_RING_FULL });
        assert_eq!(Event::decode(&Trb { dwords: [0, 0, 0, 39 << 10] }), Event::Other { trb_type: 39 });
        assert_eq!(format!("{}", CompletionCode::STALL_ERROR), "Stall Error (completion code 6)");
        assert!(CompletionCode::SHORT_PACKET.is_success() && !CompletionCode::STALL_ERROR.is_success());
        assert_eq!(CompletionCode(200).name(), "reserved/vendor code");
    }

    #[test]
    fn buffers_split_at_64k_boundaries() {
        let mut pieces = Vec::new();
        split_at_64k(0x1_fff0, 0x20, |a, n| pieces.push((a, n)));
        assert_eq!(pieces, [(0x1_fff0, 0x10), (0x2_0000, 0x10)]);
        pieces.clear();
        split_at_64k(0x4_0000, 1 << 20, |a, n| pieces.push((a, n)));
        assert_eq!(pieces.len(), 16);
        assert!(pieces.iter().all(|&(a, n)| a % 0x1_0000 == 0 && n == 0x1_0000));
        assert_eq!(trbs_for(0x4_0200, 1 << 20), 17, "an unaligned MiB touches 17 windows");
        assert_eq!(trbs_for(0x1000, 512), 1);
        assert_eq!(trbs_for(0x1000, 0), 0);
    }

    #[test]
    fn bulk_tds_chain_count_packets_and_interrupt_once() {
        let mut trbs = Vec::new();
        // 150 KiB from 0x1_8000: pieces 32 KiB, 64 KiB, 54 KiB at 1024-byte packets.
        bulk_td(0x1_8000, 150 << 10, 1024, true, |t| trbs.push(t));
        assert_eq!(trbs.len(), 3);
        assert_eq!(
            trbs.iter().map(|t| t.transfer_length()).collect::<Vec<_>>(),
            [32 << 10, 64 << 10, 54 << 10]
        );
        // TD Size: packets after the TRB, clamped to 31; 0 in the last.
        assert_eq!(trbs[0].dwords[2] >> 17 & 0x1f, 31);
        assert_eq!(trbs[1].dwords[2] >> 17 & 0x1f, 31, "54 packets left, clamped");
        assert_eq!(trbs[2].dwords[2] >> 17 & 0x1f, 0);
        assert!(trbs[0].is_chained() && trbs[1].is_chained() && !trbs[2].is_chained());
        assert!(trbs.iter().all(|t| t.dwords[3] & flags::ISP != 0));
        assert_eq!(trbs.iter().filter(|t| t.dwords[3] & flags::IOC != 0).count(), 1);
        assert!(trbs[2].dwords[3] & flags::IOC != 0);
        let mut out = Vec::new();
        bulk_td(0x2000, 31, 512, false, |t| out.push(t));
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].dwords[3], (1 << 10) | flags::IOC, "OUT: no ISP, no chain");
        // Small remainders: 3 packets of 512 left after a 1 KiB piece of a 2.5 KiB TD.
        let mut tail = Vec::new();
        bulk_td(0xfc00, 2560, 512, true, |t| tail.push(t));
        assert_eq!(tail[0].dwords[2] >> 17 & 0x1f, 3);
    }

    #[test]
    fn cycle_and_chain_bits_can_be_rewritten() {
        let mut trb = Trb::normal(0, 8, 0, flags::IOC);
        trb.set_cycle(true);
        assert!(trb.cycle());
        trb.set_chain(true);
        assert!(trb.is_chained() && trb.dwords[3] & flags::IOC != 0);
        trb.set_cycle(false);
        trb.set_chain(false);
        assert_eq!(trb.dwords[3], (1 << 10) | flags::IOC);
    }
}
