//! Device, input and stream contexts (eXtensible Host Controller Interface 1.2, §6.2: slot
//! context §6.2.2, endpoint context §6.2.3, stream context §6.2.4, input control context
//! §6.2.5.1; docs/usb-storage.md §1 (its paragraph on contexts) and §4-5). A context is 32 or
//! 64 bytes as HCCPARAMS1.CSZ says (QEMU and the VL805 use 32, RP1 64), of which the first 32
//! are defined.

use super::regs::Speed;

/// Device Context Index of an endpoint address (bit 7 = IN): 2 × number + direction (§4.5.1);
/// the default control endpoint is DCI 1.
pub fn dci_of(endpoint_address: u8) -> u8 {
    let number = endpoint_address & 0x0f;
    if number == 0 {
        1
    } else {
        2 * number + u8::from(endpoint_address & 0x80 != 0)
    }
}

/// Where each context sits for a context size (§6.2.1, §6.2.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextLayout {
    pub context_bytes: usize,
}

impl ContextLayout {
    pub fn new(context_bytes: usize) -> Self {
        assert!(context_bytes == 32 || context_bytes == 64, "contexts are 32 or 64 bytes");
        ContextLayout { context_bytes }
    }

    /// Input context: control, slot, then DCI 1-31.
    pub fn input_context_bytes(&self) -> usize {
        33 * self.context_bytes
    }

    /// Output (device) context: slot, then DCI 1-31.
    pub fn device_context_bytes(&self) -> usize {
        32 * self.context_bytes
    }

    pub fn input_slot_offset(&self) -> usize {
        self.context_bytes
    }

    pub fn input_endpoint_offset(&self, dci: u8) -> usize {
        (usize::from(dci) + 1) * self.context_bytes
    }

    pub fn output_endpoint_offset(&self, dci: u8) -> usize {
        usize::from(dci) * self.context_bytes
    }
}

/// Input Control Context words 0 and 1 (§6.2.5.1): Drop and Add Context flags (bit n = DCI n,
/// bit 0 = slot context).
pub fn input_control(drop_flags: u32, add_flags: u32) -> [u32; 2] {
    [drop_flags, add_flags]
}

/// The slot context fields the driver sets (§6.2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotContext {
    pub route_string: u32,
    pub speed: Speed,
    /// Index of the last valid endpoint context (the highest DCI in use).
    pub context_entries: u8,
    /// 1-based root hub port.
    pub root_hub_port: u8,
}

impl SlotContext {
    pub fn encode(&self) -> [u32; 4] {
        [
            (self.route_string & 0xf_ffff)
                | (u32::from(self.speed.id()) << 20)
                | (u32::from(self.context_entries & 0x1f) << 27),
            u32::from(self.root_hub_port) << 16,
            0,
            0,
        ]
    }
}

/// Slot states in the output slot context, dword 3 bits 31:27 (§6.2.2 Table 6-7).
pub fn slot_state(dword3: u32) -> u8 {
    (dword3 >> 27) as u8
}

/// Endpoint state in the output endpoint context, dword 0 bits 2:0 (§6.2.3 Table 6-8):
/// 0 disabled, 1 running, 2 halted, 3 stopped, 4 error.
pub fn endpoint_state(dword0: u32) -> u8 {
    (dword0 & 7) as u8
}

pub fn endpoint_state_name(state: u8) -> &'static str {
    match state {
        0 => "Disabled",
        1 => "Running",
        2 => "Halted",
        3 => "Stopped",
        4 => "Error",
        _ => "reserved",
    }
}

/// Endpoint types (§6.2.3 Table 6-9).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EndpointType {
    BulkOut = 2,
    Control = 4,
    BulkIn = 6,
}

/// The endpoint context fields the driver sets (§6.2.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndpointContext {
    pub endpoint_type: EndpointType,
    pub max_packet_bytes: u16,
    /// SuperSpeed bMaxBurst (0-15): packets per burst − 1.
    pub max_burst: u8,
    /// TR Dequeue Pointer with DCS in bit 0, or the stream context array (DCS 0).
    pub dequeue: u64,
    pub average_trb_bytes: u16,
    /// MaxPStreams: 0 without streams, else log2(array entries) − 1.
    pub max_primary_streams: u8,
}

impl EndpointContext {
    /// Error Count 3: the xHC retries a transaction three times before halting (§4.10.2.7).
    pub const ERROR_COUNT: u32 = 3;

    pub fn encode(&self) -> [u32; 5] {
        let streams = u32::from(self.max_primary_streams & 0x1f);
        // Linear Stream Array: the primary array holds rings, not secondary arrays (§6.2.3).
        let linear_stream_array = u32::from(streams != 0) << 15;
        [
            (streams << 10) | linear_stream_array,
            (Self::ERROR_COUNT << 1)
                | ((self.endpoint_type as u32) << 3)
                | (u32::from(self.max_burst) << 8)
                | (u32::from(self.max_packet_bytes) << 16),
            self.dequeue as u32,
            (self.dequeue >> 32) as u32,
            u32::from(self.average_trb_bytes),
        ]
    }
}

/// Primary stream array entries for `streams` stream IDs (1..=streams, entry 0 reserved): the
/// next power of two above `streams`, at least 2 (§4.12.2), and the MaxPStreams that says so.
pub fn stream_array_for(streams: u32) -> (u32, u8) {
    let entries = (streams + 1).next_power_of_two().max(2);
    (entries, (entries.trailing_zeros() - 1) as u8)
}

/// A Stream Context (§6.2.4.1) pointing at a ring (dequeue with DCS in bit 0), SCT = 1
/// (primary transfer ring).
pub fn stream_context(dequeue_with_cycle: u64) -> [u32; 4] {
    let pointer = (dequeue_with_cycle & !0xf) | (dequeue_with_cycle & 1) | (1 << 1);
    [pointer as u32, (pointer >> 32) as u32, 0, 0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_addresses_map_to_device_context_indices() {
        assert_eq!(dci_of(0x00), 1);
        assert_eq!(dci_of(0x80), 1);
        assert_eq!(dci_of(0x81), 3, "bulk IN 1 (QEMU usb-storage)");
        assert_eq!(dci_of(0x02), 4, "bulk OUT 2");
        assert_eq!(dci_of(0x01), 2);
        assert_eq!(dci_of(0x8f), 31);
    }

    #[test]
    fn layouts_follow_the_context_size() {
        let small = ContextLayout::new(32);
        assert_eq!((small.input_context_bytes(), small.device_context_bytes()), (1056, 1024));
        assert_eq!(small.input_slot_offset(), 32);
        assert_eq!(small.input_endpoint_offset(1), 64, "QEMU reads EP0 at ictx + 64");
        assert_eq!(small.output_endpoint_offset(3), 96);
        let large = ContextLayout::new(64);
        assert_eq!(large.input_context_bytes(), 2112, "Linux's input context on a CSZ = 1 xHC");
        assert_eq!(large.input_endpoint_offset(4), 320);
        assert_eq!(large.output_endpoint_offset(1), 64);
    }

    #[test]
    #[should_panic(expected = "32 or 64")]
    fn other_context_sizes_are_refused() {
        ContextLayout::new(48);
    }

    #[test]
    fn slot_and_endpoint_contexts_encode_their_fields() {
        let slot = SlotContext { route_string: 0, speed: Speed::Super, context_entries: 4, root_hub_port: 3 };
        assert_eq!(slot.encode(), [(4 << 20) | (4 << 27), 3 << 16, 0, 0]);
        let control = EndpointContext {
            endpoint_type: EndpointType::Control,
            max_packet_bytes: 512,
            max_burst: 0,
            dequeue: 0x8000_1000 | 1,
            average_trb_bytes: 8,
            max_primary_streams: 0,
        };
        assert_eq!(control.encode(), [0, (3 << 1) | (4 << 3) | (512 << 16), 0x8000_1001, 0, 8]);
        let streamed = EndpointContext {
            endpoint_type: EndpointType::BulkIn,
            max_packet_bytes: 1024,
            max_burst: 15,
            dequeue: 0x10_0000_2000,
            average_trb_bytes: 3072,
            max_primary_streams: 4,
        };
        let words = streamed.encode();
        assert_eq!(words[0], (4 << 10) | (1 << 15), "MaxPStreams 4 with LSA");
        assert_eq!(words[1], (3 << 1) | (6 << 3) | (15 << 8) | (1024 << 16));
        assert_eq!((words[2], words[3], words[4]), (0x2000, 0x10, 3072));
        assert_eq!(endpoint_state(0x0000_0402), 2);
        // The names error messages use for each state (xHCI 1.2 §6.2.3 Table 6-8).
        let names: [&str; 6] = core::array::from_fn(|state| endpoint_state_name(state as u8));
        assert_eq!(names, ["Disabled", "Running", "Halted", "Stopped", "Error", "reserved"]);
        assert_eq!(endpoint_state_name(9), "reserved");
        assert_eq!(slot_state(3 << 27 | 5), 3);
        assert_eq!(input_control(1 << 3, 0b1001), [8, 9]);
    }

    #[test]
    fn stream_arrays_round_up_past_the_reserved_entry() {
        // QEMU's usb-uas has 16 streams: 17 entries → 32, MaxPStreams 4 (QEMU allocates 2 << 4).
        assert_eq!(stream_array_for(16), (32, 4));
        assert_eq!(stream_array_for(15), (16, 3));
        assert_eq!(stream_array_for(1), (2, 0));
        assert_eq!(stream_array_for(0), (2, 0));
        assert_eq!(stream_array_for(255), (256, 7));
        assert_eq!(stream_context(0x4000_2000 | 1), [0x4000_2003, 0, 0, 0]);
        assert_eq!(stream_context(0x1_0000_0040), [0x42, 1, 0, 0], "DCS 0, SCT 1");
    }
}
