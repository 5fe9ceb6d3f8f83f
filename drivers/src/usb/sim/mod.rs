//! A simulated xHCI for host tests, at least as strict as QEMU's `qemu-xhci` (hw/usb/hcd-xhci.c)
//! and the xHCI 1.2 rules it skips: registers with their access rules (32-bit accesses only,
//! 64-bit registers low half first, RW1C bits, no interrupts enabled, no doorbell while
//! halted), the command ring, one event ring whose overflow is a violation, device contexts of 32 or 64 bytes (CSZ), the
//! Input Control Context rules QEMU enforces, endpoint states (Reset Endpoint only when Halted,
//! Set TR Dequeue only when Stopped), transfer rings read by cycle bit with Link TRBs (chain bit
//! required inside a TD), TRB buffers never crossing 64 KiB, TD Size checked, streams through a
//! stream context array (SCT = 1, IDs below the array size, one outstanding status/data read per
//! stream), and USB devices behind root ports ([`device`]). Every DMA address goes through the
//! bus offset of the NVMe simulator's arena, so a driver that forgets its translation fails.
//! Driver mistakes are collected as violations; transfer events can be held and released in
//! any interleaving of endpoints (each ring's in order), and a Bulk-Only drive can NAK its data
//! while the CBW's event is taken.
#![forbid(unsafe_code)]

extern crate std;

pub mod device;
pub mod disk;
pub mod dwc3;

use super::trb::{trb_type, CompletionCode, Trb, TRB_BYTES};
pub use crate::nvme::sim::NvmeArena;
use core::cell::RefCell;
use device::{SimUsbDevice, Transfer};
use hal::mmio::RegisterIo;
pub use hal::testing::ArenaPlatform as SimPlatform;
use std::collections::{BTreeMap, BTreeSet};
use std::format;
use std::string::String;
use std::vec;
use std::vec::Vec;

pub const REGISTER_BYTES: usize = 0x1000;
const RUNTIME_OFFSET: usize = 0x600;
const DOORBELL_OFFSET: usize = 0x800;
const EXTENDED_CAPABILITIES: usize = 0x40;

#[derive(Clone, Debug)]
pub struct SimConfig {
    /// CAPLENGTH (QEMU 0x40; 0x80 here so that nothing may assume it).
    pub capability_length: u8,
    pub usb3_ports: u8,
    pub usb2_ports: u8,
    pub max_slots: u8,
    pub scratchpads: u16,
    /// 32 (QEMU, VL805) or 64 (RP1) bytes per context.
    pub context_bytes: usize,
    /// HCCPARAMS1.MaxPSASize (QEMU 7 = 256 entries; 0 = no streams).
    pub max_psa_size: u8,
    /// A USB Legacy Support capability with the BIOS semaphore set; `true` if the firmware
    /// lets go when asked.
    pub legacy_bios_owned: Option<bool>,
    /// Left running by the firmware.
    pub start_running: bool,
    /// HCCPARAMS1.PPC: ports start unpowered.
    pub port_power_control: bool,
    /// (port, µs): the device on that port connects this long after the port has power (after
    /// the controller reset when ports are always powered), as a USB 3 drive retraining after
    /// the reset or a slow bridge does. Other devices connect at once.
    pub connect_delay_us: Vec<(u8, u64)>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            capability_length: 0x80,
            usb3_ports: 4,
            usb2_ports: 4,
            max_slots: 64,
            scratchpads: 0,
            context_bytes: 32,
            max_psa_size: 7,
            legacy_bios_owned: None,
            start_running: false,
            port_power_control: false,
            connect_delay_us: Vec::new(),
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct RingState {
    dequeue: u64,
    cycle: bool,
}

#[derive(Clone, Debug)]
struct Endpoint {
    state: u8,
    address: u8,
    ring: RingState,
    /// Stream context array, its entries, and the rings read from it.
    streams: Option<(u64, u32, BTreeMap<u16, RingState>)>,
    max_packet: u16,
}

#[derive(Clone, Debug)]
struct Slot {
    port: u8,
    output: u64,
    addressed: bool,
    endpoints: BTreeMap<u8, Endpoint>,
    armed: BTreeSet<(u8, u16)>,
}

/// Counters for the tests.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimStatistics {
    pub commands: Vec<u8>,
    pub doorbells: u64,
    pub register_reads: u64,
    pub transfer_tds: u64,
    pub events: u64,
    pub erdp_writes: u64,
    pub stream_doorbells: BTreeSet<u16>,
}

struct State {
    config: SimConfig,
    usbcmd: u32,
    usbsts: u32,
    config_register: u32,
    crcr: u64,
    dcbaap: u64,
    halves: BTreeMap<usize, u32>,
    iman: u32,
    erstsz: u32,
    erstba: u64,
    erdp: u64,
    event_ring: Option<(u64, u32)>,
    event_enqueue: u32,
    event_cycle: bool,
    command_ring: Option<RingState>,
    legacy: u32,
    portsc: Vec<u32>,
    /// Ports whose device connects at this time (ns of the platform's clock).
    connect_at_ns: BTreeMap<u8, u64>,
    devices: BTreeMap<u8, SimUsbDevice>,
    slots: BTreeMap<u8, Slot>,
    hold_transfer_events: bool,
    /// Held events with the ring they came from (slot, DCI, stream): a ring's events stay in
    /// order, as a controller completes a ring's TDs in order.
    held: Vec<((u8, u8, u16), Trb)>,
    /// The ring whose TD the sim is completing, for the events it posts.
    current_ring: (u8, u8, u16),
    statistics: SimStatistics,
    violations: Vec<String>,
}

pub struct SimXhci<'a> {
    platform: &'a SimPlatform,
    state: RefCell<State>,
}

const PORTSC_CCS: u32 = 1;
const PORTSC_PED: u32 = 1 << 1;
const PORTSC_PR: u32 = 1 << 4;
const PORTSC_PP: u32 = 1 << 9;
const PORTSC_CSC: u32 = 1 << 17;
const PORTSC_PRC: u32 = 1 << 21;
const PORTSC_WRC: u32 = 1 << 19;
const PORTSC_WPR: u32 = 1 << 31;
const EP_RUNNING: u8 = 1;
const EP_HALTED: u8 = 2;
const EP_STOPPED: u8 = 3;

impl<'a> SimXhci<'a> {
    /// A controller with `devices` attached at (port, device).
    pub fn new(platform: &'a SimPlatform, config: SimConfig, devices: Vec<(u8, SimUsbDevice)>) -> Self {
        let ports = usize::from(config.usb3_ports + config.usb2_ports);
        let mut state = State {
            usbcmd: if config.start_running { 1 } else { 0 },
            usbsts: if config.start_running { 0 } else { 1 },
            config_register: 0,
            crcr: 0,
            dcbaap: 0,
            halves: BTreeMap::new(),
            iman: 0,
            erstsz: 0,
            erstba: 0,
            erdp: 0,
            event_ring: None,
            event_enqueue: 0,
            event_cycle: true,
            command_ring: None,
            legacy: match config.legacy_bios_owned {
                Some(_) => 1 | (1 << 16),
                None => 0,
            },
            portsc: vec![0; ports],
            connect_at_ns: BTreeMap::new(),
            devices: devices.into_iter().collect(),
            slots: BTreeMap::new(),
            hold_transfer_events: false,
            held: Vec::new(),
            current_ring: (0, 0, 0),
            statistics: SimStatistics::default(),
            violations: Vec::new(),
            config,
        };
        state.attach_all(platform.peek_ns());
        SimXhci { platform, state: RefCell::new(state) }
    }

    pub fn violations(&self) -> Vec<String> {
        let state = self.state.borrow();
        let mut all = state.violations.clone();
        for (port, device) in &state.devices {
            all.extend(device.violations.iter().map(|v| format!("device on port {port}: {v}")));
            all.extend(device.disk.violations.iter().map(|v| format!("disk on port {port}: {v}")));
        }
        all
    }

    pub fn assert_no_violations(&self) {
        let violations = self.violations();
        assert!(violations.is_empty(), "driver mistakes: {violations:#?}");
    }

    pub fn statistics(&self) -> SimStatistics {
        self.state.borrow().statistics.clone()
    }

    /// Runs `change` on the device at `port` (faults, counters).
    pub fn with_device<T>(&self, port: u8, change: impl FnOnce(&mut SimUsbDevice) -> T) -> T {
        change(self.state.borrow_mut().devices.get_mut(&port).expect("a device on that port"))
    }

    /// Holds transfer events back until [`Self::release_held`].
    pub fn hold_transfer_events(&self, hold: bool) {
        self.state.borrow_mut().hold_transfer_events = hold;
    }

    pub fn held_count(&self) -> usize {
        self.state.borrow().held.len()
    }

    /// Posts up to `count` held events; with `newest_first`, the rings whose events came last
    /// go first (out of order across rings, in order within each ring).
    pub fn release_held(&self, count: usize, newest_first: bool) {
        let mut state = self.state.borrow_mut();
        for _ in 0..count {
            let mut candidates = (0..state.held.len()).filter(|&i| {
                let ring = state.held[i].0;
                !state.held[..i].iter().any(|(other, _)| *other == ring)
            });
            let chosen = if newest_first { candidates.next_back() } else { candidates.next() };
            let Some(index) = chosen else {
                break;
            };
            let (_, event) = state.held.remove(index);
            state.write_event(self.platform, event);
        }
    }

    /// Posts up to `count` held events of endpoint `dci` (of any slot and stream), the oldest
    /// first: a test picks how the events of different endpoints interleave, which a controller
    /// may do in any way, while each ring's events keep their order (xHCI 1.2 §4.10.1: a
    /// ring's TDs complete in order; nothing orders the events of different endpoints).
    pub fn release_held_of(&self, dci: u8, count: usize) {
        let mut state = self.state.borrow_mut();
        for _ in 0..count {
            let Some(index) = state.held.iter().position(|((_, held_dci, _), _)| *held_dci == dci) else {
                break;
            };
            let (_, event) = state.held.remove(index);
            state.write_event(self.platform, event);
        }
    }

    /// Retries everything the devices may now answer (after a fault is cleared).
    pub fn rerun(&self) {
        let mut state = self.state.borrow_mut();
        let slots: Vec<u8> = state.slots.keys().copied().collect();
        for slot in slots {
            state.run_slot(self.platform, slot);
        }
    }
}

fn bit(value: u32, mask: u32) -> bool {
    value & mask != 0
}

impl State {
    fn violation(&mut self, text: String) {
        if self.violations.len() < 64 {
            self.violations.push(text);
        }
    }

    fn port_count(&self) -> u8 {
        self.config.usb3_ports + self.config.usb2_ports
    }

    fn is_usb3_port(&self, port: u8) -> bool {
        port >= 1 && port <= self.config.usb3_ports
    }

    /// Connects each device to its port (after power and reset), or schedules its connection.
    fn attach_all(&mut self, now_ns: u64) {
        self.connect_at_ns.clear();
        for index in 0..self.portsc.len() {
            let port = index as u8 + 1;
            let powered = !self.config.port_power_control;
            self.portsc[index] = if powered { PORTSC_PP } else { 0 };
            if let Some(device) = self.devices.get(&port) {
                let speed = device.speed;
                if speed.is_super_speed() != self.is_usb3_port(port) {
                    self.violations.push(format!("test set-up: a {speed} device on port {port}"));
                }
                if powered {
                    self.power_on(port, now_ns);
                }
            } else {
                self.portsc[index] |= 5 << 5;
            }
        }
    }

    /// The port got power: its device connects now or after its delay.
    fn power_on(&mut self, port: u8, now_ns: u64) {
        if !self.devices.contains_key(&port) {
            return;
        }
        match self.config.connect_delay_us.iter().find(|(at, _)| *at == port) {
            Some(&(_, delay_us)) => {
                // Nothing on the wire yet: a USB 3 port polls for a receiver (RxDetect).
                self.portsc[usize::from(port) - 1] |= 5 << 5;
                self.connect_at_ns.insert(port, now_ns + delay_us * 1000);
            }
            None => self.connect(port),
        }
    }

    /// The device on `port` appears: CCS and CSC, its speed; a USB 3 port trains to Enabled
    /// (U0), a USB 2 port waits for a reset (Polling).
    fn connect(&mut self, port: u8) {
        let Some(speed) = self.devices.get(&port).map(|device| device.speed) else {
            return;
        };
        let index = usize::from(port) - 1;
        let mut portsc =
            (self.portsc[index] & !(0xf << 5)) | PORTSC_CCS | PORTSC_CSC | (u32::from(speed.id()) << 10);
        portsc |= if speed.is_super_speed() { PORTSC_PED } else { 7 << 5 };
        self.portsc[index] = portsc;
    }

    /// Devices whose time came connect.
    fn connect_due(&mut self, now_ns: u64) {
        let due: Vec<u8> =
            self.connect_at_ns.iter().filter(|(_, at)| **at <= now_ns).map(|(port, _)| *port).collect();
        for port in due {
            self.connect_at_ns.remove(&port);
            self.connect(port);
        }
    }

    fn capability(&self, offset: usize) -> u32 {
        let config = &self.config;
        let ports = u32::from(self.port_count());
        match offset {
            0x00 => u32::from(config.capability_length) | (0x0110 << 16),
            0x04 => u32::from(config.max_slots) | (1 << 8) | (ports << 24),
            0x08 => (u32::from(config.scratchpads >> 5) << 21) | (u32::from(config.scratchpads & 0x1f) << 27),
            0x10 => {
                let first = if config.legacy_bios_owned.is_some() {
                    EXTENDED_CAPABILITIES
                } else {
                    EXTENDED_CAPABILITIES + 0x10
                };
                1 | (u32::from(config.context_bytes == 64) << 2)
                    | (u32::from(config.port_power_control) << 3)
                    | (u32::from(config.max_psa_size) << 12)
                    | ((first as u32 / 4) << 16)
            }
            0x14 => DOORBELL_OFFSET as u32,
            0x18 => RUNTIME_OFFSET as u32,
            0x40 => self.legacy | (4 << 8),
            0x50 => 0x0300_0402,
            0x54 | 0x64 => 0x2042_5355,
            0x58 => 1 | (u32::from(config.usb3_ports) << 8),
            0x60 => 0x0200_0002,
            0x68 => (u32::from(config.usb3_ports) + 1) | (u32::from(config.usb2_ports) << 8),
            _ => 0,
        }
    }

    fn operational(&self) -> usize {
        usize::from(self.config.capability_length)
    }

    fn read(&mut self, offset: usize, now_ns: u64) -> u32 {
        self.statistics.register_reads += 1;
        self.connect_due(now_ns);
        let op = self.operational();
        if offset < op {
            return self.capability(offset);
        }
        if offset < RUNTIME_OFFSET {
            let register = offset - op;
            if register >= 0x400 {
                let index = (register - 0x400) / 0x10;
                return if (register - 0x400).is_multiple_of(0x10) {
                    self.portsc.get(index).copied().unwrap_or(0)
                } else {
                    0
                };
            }
            return match register {
                0x00 => self.usbcmd,
                0x04 => self.usbsts,
                0x08 => 1,
                0x18 => u32::from(self.command_ring.is_some() && self.running()) << 3,
                0x1c => 0,
                0x30 => self.dcbaap as u32,
                0x34 => (self.dcbaap >> 32) as u32,
                0x38 => self.config_register,
                _ => 0,
            };
        }
        if offset < DOORBELL_OFFSET {
            return match offset - RUNTIME_OFFSET {
                0x20 => self.iman,
                0x28 => self.erstsz,
                0x30 => self.erstba as u32,
                0x34 => (self.erstba >> 32) as u32,
                0x38 => self.erdp as u32,
                0x3c => (self.erdp >> 32) as u32,
                _ => 0,
            };
        }
        0
    }

    fn running(&self) -> bool {
        self.usbsts & 1 == 0
    }

    /// Joins the halves of a 64-bit register: the low half must come first (BCM2711 PCIe drops
    /// the high half of 64-bit writes; QEMU latches on the high half).
    fn half(&mut self, name: &str, low_offset: usize, high: bool, value: u32) -> Option<u64> {
        if !high {
            self.halves.insert(low_offset, value);
            return None;
        }
        match self.halves.remove(&low_offset) {
            Some(low) => Some(u64::from(low) | (u64::from(value) << 32)),
            None => {
                self.violation(format!("{name} high half written without the low half first"));
                None
            }
        }
    }

    fn write(&mut self, platform: &SimPlatform, offset: usize, value: u32) {
        let op = self.operational();
        if offset >= DOORBELL_OFFSET {
            self.doorbell(platform, (offset - DOORBELL_OFFSET) / 4, value);
        } else if offset >= RUNTIME_OFFSET {
            self.runtime_write(platform, offset - RUNTIME_OFFSET, value);
        } else if offset >= op + 0x400 {
            let register = offset - op - 0x400;
            if register.is_multiple_of(0x10) {
                self.port_write(register / 0x10, value, platform.peek_ns());
            }
        } else if offset >= op {
            self.operational_write(platform, offset - op, value);
        } else if offset == EXTENDED_CAPABILITIES
            && self.config.legacy_bios_owned.is_some()
            && bit(value, 1 << 24)
        {
            self.legacy |= 1 << 24;
            if self.config.legacy_bios_owned == Some(true) {
                self.legacy &= !(1 << 16);
            }
        }
    }

    fn operational_write(&mut self, platform: &SimPlatform, register: usize, value: u32) {
        match register {
            0x00 => self.command_write(value, platform.peek_ns()),
            0x04 => self.usbsts &= !(value & 0b11100),
            0x18 | 0x1c => {
                if self.running() {
                    self.violation(String::from("CRCR written while running"));
                }
                if let Some(crcr) = self.half("CRCR", 0x18, register == 0x1c, value) {
                    if crcr & 0x30 != 0 || (crcr & !0x3f) == 0 {
                        self.violation(format!("CRCR {crcr:#x}: pointer not 64-byte aligned or zero"));
                    }
                    self.crcr = crcr;
                    self.command_ring = Some(RingState { dequeue: crcr & !0x3f, cycle: crcr & 1 != 0 });
                }
            }
            0x30 | 0x34 => {
                if let Some(pointer) = self.half("DCBAAP", 0x30, register == 0x34, value) {
                    if pointer & 0x3f != 0 {
                        self.violation(format!("DCBAAP {pointer:#x} not 64-byte aligned"));
                    }
                    self.dcbaap = pointer;
                    if let Some(array) = self.read_u64(platform, pointer) {
                        if self.config.scratchpads > 0 {
                            self.check_scratchpads(platform, array);
                        }
                    }
                }
            }
            0x38 => self.config_register = value & 0xff,
            _ => {}
        }
    }

    fn check_scratchpads(&mut self, platform: &SimPlatform, array: u64) {
        if array == 0 || array & 0x3f != 0 {
            self.violation(format!("scratchpad array {array:#x}: missing or misaligned"));
            return;
        }
        for index in 0..u64::from(self.config.scratchpads) {
            match self.read_u64(platform, array + 8 * index) {
                Some(page) if page != 0 && page % 4096 == 0 => {}
                other => self.violation(format!("scratchpad {index}: page {other:?}")),
            }
        }
    }

    fn command_write(&mut self, value: u32, now_ns: u64) {
        if bit(value, 1 << 2) {
            self.violation(String::from("USBCMD.INTE set: the driver is polled"));
        }
        if bit(value, 1 << 1) {
            if self.running() {
                self.violation(String::from("HCRST while running"));
            }
            self.reset(now_ns);
            return;
        }
        if bit(value, 1) && !self.running() {
            if self.config_register == 0
                || self.dcbaap == 0
                || self.command_ring.is_none()
                || self.event_ring.is_none()
            {
                self.violation(String::from("R/S set before CONFIG, DCBAAP, CRCR and the event ring"));
            }
            self.usbsts &= !1;
        } else if !bit(value, 1) {
            self.usbsts |= 1;
        }
        self.usbcmd = value & 0xf;
    }

    fn reset(&mut self, now_ns: u64) {
        self.usbcmd = 0;
        self.usbsts = 1;
        self.config_register = 0;
        self.crcr = 0;
        self.dcbaap = 0;
        self.command_ring = None;
        self.event_ring = None;
        self.erstba = 0;
        self.erstsz = 0;
        self.erdp = 0;
        self.iman = 0;
        self.slots.clear();
        self.halves.clear();
        for device in self.devices.values_mut() {
            device.bus_reset();
        }
        self.attach_all(now_ns);
    }

    fn runtime_write(&mut self, platform: &SimPlatform, register: usize, value: u32) {
        match register {
            0x20 => {
                if bit(value, 2) {
                    self.violation(String::from("IMAN.IE set: the driver is polled"));
                }
                self.iman = value & 2;
            }
            0x28 => {
                if value != 1 {
                    self.violation(format!("ERSTSZ {value}: QEMU takes exactly one segment"));
                }
                self.erstsz = value;
            }
            0x30 | 0x34 => {
                if let Some(pointer) = self.half("ERSTBA", 0x30, register == 0x34, value) {
                    self.erstba = pointer;
                    self.load_segment_table(platform, pointer);
                }
            }
            0x38 | 0x3c => {
                if let Some(pointer) = self.half("ERDP", 0x38, register == 0x3c, value) {
                    self.statistics.erdp_writes += 1;
                    self.erdp = pointer & !0xf;
                    if let Some((base, size)) = self.event_ring {
                        if self.erdp < base || self.erdp >= base + u64::from(size) * 16 {
                            self.violation(format!("ERDP {pointer:#x} outside the event ring"));
                        }
                    }
                }
            }
            _ => {}
        }
    }

    fn load_segment_table(&mut self, platform: &SimPlatform, pointer: u64) {
        if pointer & 0x3f != 0 {
            self.violation(format!("ERSTBA {pointer:#x} not 64-byte aligned"));
        }
        let mut entry = [0u8; 16];
        if !platform.read_bus(pointer, &mut entry) {
            self.violation(format!("ERSTBA {pointer:#x} outside the DMA arena"));
            return;
        }
        let base = u64::from_le_bytes(entry[0..8].try_into().expect("8"));
        let size = u32::from_le_bytes(entry[8..12].try_into().expect("4"));
        if !(16..=4096).contains(&size) || base & 0x3f != 0 {
            self.violation(format!("event ring segment {base:#x} × {size}: bad size or alignment"));
            return;
        }
        if self.erdp != base {
            self.violation(format!(
                "ERDP {:#x} not at the event ring {base:#x} when ERSTBA was written",
                self.erdp
            ));
        }
        self.event_ring = Some((base, size));
        self.event_enqueue = 0;
        self.event_cycle = true;
    }

    fn port_write(&mut self, index: usize, value: u32, now_ns: u64) {
        let Some(&current) = self.portsc.get(index) else {
            return;
        };
        let port = index as u8 + 1;
        if bit(value, PORTSC_PED) {
            self.violation(format!("PORTSC {port} written with PED = 1 (that disables the port)"));
        }
        let mut portsc = current & !(value & 0x00fe_0000);
        if bit(value, PORTSC_PP) && !bit(current, PORTSC_PP) {
            self.portsc[index] = portsc | PORTSC_PP;
            self.power_on(port, now_ns);
            portsc = self.portsc[index];
        }
        if bit(value, PORTSC_PR) || bit(value, PORTSC_WPR) {
            if bit(value, PORTSC_PR) && self.is_usb3_port(port) {
                self.violation(format!("PR on USB 3 port {port} (a USB 3 port trains by itself)"));
            }
            if let (Some(device), true) = (self.devices.get_mut(&port), bit(portsc, PORTSC_CCS)) {
                device.bus_reset();
                portsc = (portsc & !(0xf << 5)) | PORTSC_PED | PORTSC_PRC;
                if bit(value, PORTSC_WPR) {
                    portsc |= PORTSC_WRC;
                }
            }
        }
        self.portsc[index] = portsc;
    }

    fn read_u64(&mut self, platform: &SimPlatform, bus: u64) -> Option<u64> {
        let value = platform.read_bus_u64(bus);
        if value.is_none() {
            self.violation(format!("DMA read at {bus:#x}, outside the arena (bus translation missing?)"));
        }
        value
    }

    fn read_words<const N: usize>(&mut self, platform: &SimPlatform, bus: u64) -> [u32; N] {
        let mut bytes = vec![0u8; 4 * N];
        if !platform.read_bus(bus, &mut bytes) {
            self.violation(format!("DMA read at {bus:#x}, outside the arena"));
        }
        core::array::from_fn(|i| u32::from_le_bytes(bytes[4 * i..4 * i + 4].try_into().expect("4")))
    }

    fn write_words(&mut self, platform: &SimPlatform, bus: u64, words: &[u32]) {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        if !platform.write_bus(bus, &bytes) {
            self.violation(format!("DMA write at {bus:#x}, outside the arena"));
        }
    }

    fn read_trb(&mut self, platform: &SimPlatform, bus: u64) -> Trb {
        Trb { dwords: self.read_words::<4>(platform, bus) }
    }

    fn write_event(&mut self, platform: &SimPlatform, mut event: Trb) {
        let Some((base, size)) = self.event_ring else {
            self.violation(String::from("an event with no event ring"));
            return;
        };
        let consumer = ((self.erdp.saturating_sub(base)) / 16) as u32;
        if (self.event_enqueue + 1) % size == consumer {
            self.violation(String::from("event ring full: the driver does not move ERDP on time"));
            return;
        }
        event.set_cycle(self.event_cycle);
        self.write_words(platform, base + u64::from(self.event_enqueue) * 16, &event.dwords);
        self.statistics.events += 1;
        self.event_enqueue += 1;
        if self.event_enqueue == size {
            self.event_enqueue = 0;
            self.event_cycle = !self.event_cycle;
        }
    }

    fn transfer_event(
        &mut self,
        platform: &SimPlatform,
        slot: u8,
        dci: u8,
        pointer: u64,
        residual: u32,
        code: CompletionCode,
    ) {
        let event = Trb {
            dwords: [
                pointer as u32,
                (pointer >> 32) as u32,
                (residual & 0xff_ffff) | (u32::from(code.0) << 24),
                (u32::from(trb_type::TRANSFER_EVENT) << 10)
                    | (u32::from(dci) << 16)
                    | (u32::from(slot) << 24),
            ],
        };
        if self.hold_transfer_events {
            self.held.push((self.current_ring, event));
        } else {
            self.write_event(platform, event);
        }
    }

    /// The next TD on a ring: its TRBs (address, TRB) and the ring state after it, or `None`
    /// when the controller does not own a whole TD there.
    fn fetch_td(
        &mut self,
        platform: &SimPlatform,
        ring: RingState,
        control: bool,
    ) -> Option<(Vec<(u64, Trb)>, RingState)> {
        let mut state = ring;
        let mut trbs = Vec::new();
        for _ in 0..512 {
            let trb = self.read_trb(platform, state.dequeue);
            if trb.cycle() != state.cycle {
                return None;
            }
            if trb.trb_type() == trb_type::LINK {
                let inside = trbs.last().is_some_and(|(_, t): &(u64, Trb)| t.is_chained());
                if inside && !trb.is_chained() {
                    self.violation(format!(
                        "Link TRB at {:#x} inside a TD without the chain bit",
                        state.dequeue
                    ));
                }
                let target = trb.parameter() & !0xf;
                if target & 0x3f != 0 {
                    self.violation(format!("Link TRB target {target:#x} not 64-byte aligned"));
                }
                state.dequeue = target;
                if trb.dwords[3] & 2 != 0 {
                    state.cycle = !state.cycle;
                }
                continue;
            }
            trbs.push((state.dequeue, trb));
            state.dequeue += TRB_BYTES as u64;
            let ends = if control { trb.trb_type() == trb_type::STATUS_STAGE } else { !trb.is_chained() };
            if ends {
                return Some((trbs, state));
            }
        }
        self.violation(String::from("a TD of more than 512 TRBs (ring without an end?)"));
        None
    }

    /// Checks a bulk TD's TRBs: 64 KiB boundaries, TD Size (§4.11.2.4), IOC on the last.
    fn check_bulk_td(&mut self, trbs: &[(u64, Trb)], max_packet: u16) {
        let total: u64 = trbs.iter().map(|(_, t)| u64::from(t.transfer_length())).sum();
        let mut done = 0u64;
        for (index, (address, trb)) in trbs.iter().enumerate() {
            if trb.trb_type() != trb_type::NORMAL {
                self.violation(format!("TRB type {} on a bulk ring at {address:#x}", trb.trb_type()));
            }
            let buffer = trb.parameter();
            let length = u64::from(trb.transfer_length());
            if length > 0 && buffer / 0x1_0000 != (buffer + length - 1) / 0x1_0000 {
                self.violation(format!("TRB buffer {buffer:#x}+{length:#x} crosses a 64 KiB boundary"));
            }
            done += length;
            let last = index + 1 == trbs.len();
            let expected =
                if last { 0 } else { (total - done).div_ceil(u64::from(max_packet.max(1))).min(31) };
            let td_size = u64::from((trb.dwords[2] >> 17) & 0x1f);
            if td_size != expected {
                self.violation(format!("TD Size {td_size} where {expected} packets remain (§4.11.2.4)"));
            }
            if last && trb.dwords[3] & (1 << 5) == 0 {
                self.violation(String::from("a TD without IOC on its last TRB: no event will come"));
            }
        }
    }

    fn doorbell(&mut self, platform: &SimPlatform, index: usize, value: u32) {
        self.statistics.doorbells += 1;
        if !self.running() {
            self.violation(format!("doorbell {index} written while halted (QEMU ignores it)"));
            return;
        }
        if index == 0 {
            if value != 0 {
                self.violation(format!("command doorbell written with {value:#x}"));
            }
            self.run_commands(platform);
            return;
        }
        let slot = index as u8;
        let dci = (value & 0xff) as u8;
        let stream = (value >> 16) as u16;
        if stream != 0 {
            self.statistics.stream_doorbells.insert(stream);
        }
        let Some(state) = self.slots.get_mut(&slot) else {
            self.violation(format!("doorbell for slot {slot}, not enabled"));
            return;
        };
        if !state.endpoints.contains_key(&dci) {
            self.violation(format!("doorbell for slot {slot} endpoint {dci}, not configured"));
            return;
        }
        state.armed.insert((dci, stream));
        // The rung ring first (QEMU kicks only it), then whatever the device can now answer.
        while self.run_td(platform, slot, dci, stream) {}
        self.run_slot(platform, slot);
    }

    fn run_commands(&mut self, platform: &SimPlatform) {
        for _ in 0..256 {
            let Some(ring) = self.command_ring else {
                self.violation(String::from("command doorbell without a command ring"));
                return;
            };
            let trb = self.read_trb(platform, ring.dequeue);
            if trb.cycle() != ring.cycle {
                return;
            }
            if trb.trb_type() == trb_type::LINK {
                let toggle = trb.dwords[3] & 2 != 0;
                self.command_ring =
                    Some(RingState { dequeue: trb.parameter() & !0xf, cycle: ring.cycle ^ toggle });
                continue;
            }
            self.command_ring = Some(RingState { dequeue: ring.dequeue + 16, cycle: ring.cycle });
            self.statistics.commands.push(trb.trb_type());
            let (code, slot) = self.command(platform, &trb);
            let event = Trb {
                dwords: [
                    ring.dequeue as u32,
                    (ring.dequeue >> 32) as u32,
                    u32::from(code.0) << 24,
                    (u32::from(trb_type::COMMAND_COMPLETION_EVENT) << 10) | (u32::from(slot) << 24),
                ],
            };
            self.write_event(platform, event);
        }
    }

    fn command(&mut self, platform: &SimPlatform, trb: &Trb) -> (CompletionCode, u8) {
        let slot = (trb.dwords[3] >> 24) as u8;
        let dci = ((trb.dwords[3] >> 16) & 0x1f) as u8;
        if trb.trb_type() != trb_type::ENABLE_SLOT
            && trb.trb_type() != trb_type::NO_OP_COMMAND
            && !self.slots.contains_key(&slot)
        {
            return (CompletionCode::SLOT_NOT_ENABLED, slot);
        }
        let code = match trb.trb_type() {
            trb_type::NO_OP_COMMAND => CompletionCode::SUCCESS,
            trb_type::ENABLE_SLOT => return self.enable_slot(),
            trb_type::DISABLE_SLOT => {
                self.slots.remove(&slot);
                CompletionCode::SUCCESS
            }
            trb_type::ADDRESS_DEVICE => self.address_device(platform, slot, trb.parameter()),
            trb_type::CONFIGURE_ENDPOINT => self.configure_endpoint(platform, slot, trb.parameter()),
            trb_type::EVALUATE_CONTEXT => self.evaluate_context(platform, slot, trb.parameter()),
            trb_type::RESET_ENDPOINT => self.change_endpoint(platform, slot, dci, EP_HALTED, EP_STOPPED),
            trb_type::STOP_ENDPOINT => self.stop_endpoint(platform, slot, dci),
            trb_type::SET_TR_DEQUEUE_POINTER => {
                let stream = (trb.dwords[2] >> 16) as u16;
                self.set_dequeue(platform, slot, dci, stream, trb.parameter())
            }
            other => {
                self.violation(format!("command TRB type {other} not expected"));
                CompletionCode::TRB_ERROR
            }
        };
        (code, slot)
    }

    fn enable_slot(&mut self) -> (CompletionCode, u8) {
        let limit = self.config_register as u8;
        match (1..=limit).find(|slot| !self.slots.contains_key(slot)) {
            Some(slot) => {
                self.slots.insert(
                    slot,
                    Slot {
                        port: 0,
                        output: 0,
                        addressed: false,
                        endpoints: BTreeMap::new(),
                        armed: BTreeSet::new(),
                    },
                );
                (CompletionCode::SUCCESS, slot)
            }
            None => (CompletionCode::NO_SLOTS_AVAILABLE, 0),
        }
    }

    fn context_bytes(&self) -> u64 {
        self.config.context_bytes as u64
    }

    fn input_control(&mut self, platform: &SimPlatform, input: u64) -> (u32, u32) {
        if input & 0x3f != 0 {
            self.violation(format!("input context {input:#x} not 64-byte aligned"));
        }
        let [drop_flags, add_flags] = self.read_words::<2>(platform, input);
        (drop_flags, add_flags)
    }

    fn address_device(&mut self, platform: &SimPlatform, slot: u8, input: u64) -> CompletionCode {
        let (drop_flags, add_flags) = self.input_control(platform, input);
        if drop_flags != 0 || add_flags != 0b11 {
            self.violation(format!(
                "Address Device input control {drop_flags:#x}/{add_flags:#x}, not 0/0b11"
            ));
            return CompletionCode::TRB_ERROR;
        }
        let size = self.context_bytes();
        let slot_context = self.read_words::<4>(platform, input + size);
        let endpoint0 = self.read_words::<5>(platform, input + 2 * size);
        let port = (slot_context[1] >> 16) as u8;
        let Some(device) = self.devices.get(&port) else {
            self.violation(format!("Address Device for port {port}, where no device is"));
            return CompletionCode::USB_TRANSACTION_ERROR;
        };
        let speed = device.speed;
        if !bit(self.portsc[usize::from(port) - 1], PORTSC_PED) {
            self.violation(format!("Address Device on port {port}, not enabled"));
            return CompletionCode::USB_TRANSACTION_ERROR;
        }
        if (slot_context[0] >> 20) & 0xf != u32::from(speed.id()) || slot_context[0] >> 27 != 1 {
            self.violation(format!("slot context {:#010x}: wrong speed or context entries", slot_context[0]));
        }
        self.check_control_context(&endpoint0, speed.default_control_packet_bytes());
        let Some(output) = self.read_u64(platform, self.dcbaap + 8 * u64::from(slot)) else {
            return CompletionCode::TRB_ERROR;
        };
        if output == 0 || output & 0x3f != 0 {
            self.violation(format!("DCBAA[{slot}] = {output:#x}: missing or misaligned output context"));
            return CompletionCode::TRB_ERROR;
        }
        self.devices.get_mut(&port).expect("checked").address = slot;
        let ring = RingState {
            dequeue: u64::from(endpoint0[2] & !0xf) | (u64::from(endpoint0[3]) << 32),
            cycle: endpoint0[2] & 1 != 0,
        };
        let state = self.slots.get_mut(&slot).expect("enabled");
        state.port = port;
        state.output = output;
        state.addressed = true;
        let max_packet = (endpoint0[1] >> 16) as u16;
        state
            .endpoints
            .insert(1, Endpoint { state: EP_RUNNING, address: 0, ring, streams: None, max_packet });
        let mut output_slot = slot_context;
        output_slot[3] = (2 << 27) | u32::from(slot);
        self.write_words(platform, output, &output_slot);
        self.write_endpoint_state(platform, slot, 1);
        CompletionCode::SUCCESS
    }

    fn check_control_context(&mut self, context: &[u32; 5], max_packet: u16) {
        let endpoint_type = (context[1] >> 3) & 7;
        let error_count = (context[1] >> 1) & 3;
        if endpoint_type != 4 || error_count != 3 || (context[1] >> 16) as u16 != max_packet {
            self.violation(format!(
                "control endpoint context {:#010x}: type 4, CErr 3, MPS {max_packet} expected",
                context[1]
            ));
        }
        if context[2] & 1 == 0 {
            self.violation(String::from("control endpoint DCS 0 for a fresh ring"));
        }
        if context[4] & 0xffff != 8 {
            self.violation(format!("control endpoint Average TRB Length {}", context[4] & 0xffff));
        }
    }

    fn write_endpoint_state(&mut self, platform: &SimPlatform, slot: u8, dci: u8) {
        let size = self.context_bytes();
        let Some(state) = self.slots.get(&slot) else {
            return;
        };
        let (output, endpoint_state) = (state.output, state.endpoints.get(&dci).map_or(0, |e| e.state));
        self.write_words(platform, output + u64::from(dci) * size, &[u32::from(endpoint_state)]);
    }

    fn evaluate_context(&mut self, platform: &SimPlatform, slot: u8, input: u64) -> CompletionCode {
        let (drop_flags, add_flags) = self.input_control(platform, input);
        if drop_flags != 0 || add_flags & !0b11 != 0 {
            self.violation(format!("Evaluate Context input control {drop_flags:#x}/{add_flags:#x}"));
            return CompletionCode::TRB_ERROR;
        }
        if add_flags & 2 != 0 {
            let endpoint0 = self.read_words::<5>(platform, input + 2 * self.context_bytes());
            if let Some(endpoint) = self.slots.get_mut(&slot).and_then(|s| s.endpoints.get_mut(&1)) {
                endpoint.max_packet = (endpoint0[1] >> 16) as u16;
            }
        }
        CompletionCode::SUCCESS
    }

    fn configure_endpoint(&mut self, platform: &SimPlatform, slot: u8, input: u64) -> CompletionCode {
        let (drop_flags, add_flags) = self.input_control(platform, input);
        if drop_flags & 3 != 0 || add_flags & 3 != 1 {
            self.violation(format!(
                "Configure Endpoint input control {drop_flags:#x}/{add_flags:#x}: A0 = 1, A1 = D0 = D1 = 0"
            ));
            return CompletionCode::TRB_ERROR;
        }
        if !self.slots.get(&slot).is_some_and(|s| s.addressed) {
            return CompletionCode::CONTEXT_STATE_ERROR;
        }
        let size = self.context_bytes();
        let slot_context = self.read_words::<4>(platform, input + size);
        let entries = slot_context[0] >> 27;
        let highest = (2..32).filter(|dci| add_flags & (1 << dci) != 0).max().unwrap_or(1);
        if entries < highest {
            self.violation(format!("slot context entries {entries} below the highest DCI added, {highest}"));
        }
        for dci in 2..32u8 {
            if drop_flags & (1 << dci) != 0 {
                if let Some(state) = self.slots.get_mut(&slot) {
                    state.endpoints.remove(&dci);
                    state.armed.retain(|(d, _)| *d != dci);
                }
            }
        }
        for dci in 2..32u8 {
            if add_flags & (1 << dci) != 0 {
                let context = self.read_words::<5>(platform, input + (u64::from(dci) + 1) * size);
                if let Some(endpoint) = self.endpoint_from_context(platform, slot, dci, &context) {
                    self.slots.get_mut(&slot).expect("checked").endpoints.insert(dci, endpoint);
                    self.write_endpoint_state(platform, slot, dci);
                }
            }
        }
        CompletionCode::SUCCESS
    }

    fn endpoint_from_context(
        &mut self,
        platform: &SimPlatform,
        slot: u8,
        dci: u8,
        context: &[u32; 5],
    ) -> Option<Endpoint> {
        let port = self.slots.get(&slot)?.port;
        let address = (dci / 2) | if dci % 2 == 1 { 0x80 } else { 0 };
        let found = self.devices.get(&port)?.endpoints().into_iter().find(|e| e.0 == address);
        let Some((_, max_packet, burst, streams_exponent)) = found else {
            self.violation(format!(
                "DCI {dci} (endpoint {address:#04x}) is not one of the device's endpoints"
            ));
            return None;
        };
        let endpoint_type = (context[1] >> 3) & 7;
        let expected_type = if dci % 2 == 1 { 6 } else { 2 };
        if endpoint_type != expected_type || (context[1] >> 1) & 3 != 3 {
            self.violation(format!(
                "DCI {dci}: endpoint type {endpoint_type} (want {expected_type}) or CErr not 3"
            ));
        }
        if (context[1] >> 16) as u16 != max_packet || ((context[1] >> 8) & 0xff) as u8 != burst {
            self.violation(format!(
                "DCI {dci}: MPS/burst {:#x} do not match the descriptors ({max_packet}/{burst})",
                context[1]
            ));
        }
        let pointer = u64::from(context[2]) | (u64::from(context[3]) << 32);
        let max_primary_streams = ((context[0] >> 10) & 0x1f) as u8;
        let mut endpoint = Endpoint {
            state: EP_RUNNING,
            address,
            ring: RingState { dequeue: pointer & !0xf, cycle: pointer & 1 != 0 },
            streams: None,
            max_packet,
        };
        if max_primary_streams > 0 {
            if max_primary_streams > self.config.max_psa_size
                || context[0] & (1 << 15) == 0
                || streams_exponent == 0
            {
                self.violation(format!(
                    "DCI {dci}: MaxPStreams {max_primary_streams} without LSA, host or device support"
                ));
            }
            if pointer & 0xf != 0 {
                self.violation(format!(
                    "DCI {dci}: stream array {pointer:#x} not 16-byte aligned or DCS set"
                ));
            }
            let _ = platform;
            endpoint.streams = Some((pointer & !0xf, 2 << max_primary_streams, BTreeMap::new()));
        }
        Some(endpoint)
    }

    fn change_endpoint(
        &mut self,
        platform: &SimPlatform,
        slot: u8,
        dci: u8,
        from: u8,
        to: u8,
    ) -> CompletionCode {
        let Some(endpoint) = self.slots.get_mut(&slot).and_then(|s| s.endpoints.get_mut(&dci)) else {
            return CompletionCode::ENDPOINT_NOT_ENABLED;
        };
        if endpoint.state != from {
            return CompletionCode::CONTEXT_STATE_ERROR;
        }
        endpoint.state = to;
        self.write_endpoint_state(platform, slot, dci);
        CompletionCode::SUCCESS
    }

    fn stop_endpoint(&mut self, platform: &SimPlatform, slot: u8, dci: u8) -> CompletionCode {
        let Some(endpoint) = self.slots.get_mut(&slot).and_then(|s| s.endpoints.get_mut(&dci)) else {
            return CompletionCode::ENDPOINT_NOT_ENABLED;
        };
        if endpoint.state == EP_HALTED {
            return CompletionCode::CONTEXT_STATE_ERROR;
        }
        endpoint.state = EP_STOPPED;
        self.write_endpoint_state(platform, slot, dci);
        CompletionCode::SUCCESS
    }

    fn set_dequeue(
        &mut self,
        platform: &SimPlatform,
        slot: u8,
        dci: u8,
        stream: u16,
        pointer: u64,
    ) -> CompletionCode {
        let Some(endpoint) = self.slots.get_mut(&slot).and_then(|s| s.endpoints.get_mut(&dci)) else {
            return CompletionCode::ENDPOINT_NOT_ENABLED;
        };
        if endpoint.state != EP_STOPPED {
            return CompletionCode::CONTEXT_STATE_ERROR;
        }
        let ring = RingState { dequeue: pointer & !0xf, cycle: pointer & 1 != 0 };
        let stream_context_type = (pointer >> 1) & 7;
        match endpoint.streams.as_mut() {
            Some((_, entries, rings)) => {
                if stream == 0 || u32::from(stream) >= *entries || stream_context_type != 1 {
                    return CompletionCode::INVALID_STREAM_ID;
                }
                rings.insert(stream, ring);
            }
            None => {
                if stream != 0 || stream_context_type != 0 {
                    return CompletionCode::INVALID_STREAM_TYPE;
                }
                endpoint.ring = ring;
            }
        }
        let _ = platform;
        CompletionCode::SUCCESS
    }

    /// The ring of (dci, stream), reading the stream context the first time (§4.12.2).
    fn ring_of(
        &mut self,
        platform: &SimPlatform,
        slot: u8,
        dci: u8,
        stream: u16,
    ) -> Result<RingState, CompletionCode> {
        let endpoint = self
            .slots
            .get(&slot)
            .and_then(|s| s.endpoints.get(&dci))
            .cloned()
            .ok_or(CompletionCode::ENDPOINT_NOT_ENABLED)?;
        let Some((array, entries, rings)) = endpoint.streams.clone() else {
            if stream != 0 {
                self.violation(format!("stream {stream} rung on DCI {dci}, which has no streams"));
            }
            return Ok(endpoint.ring);
        };
        if stream == 0 || u32::from(stream) >= entries {
            self.violation(format!("stream {stream} outside 1..{entries} on DCI {dci}"));
            return Err(CompletionCode::INVALID_STREAM_ID);
        }
        if let Some(ring) = rings.get(&stream) {
            return Ok(*ring);
        }
        let context = self.read_words::<4>(platform, array + 16 * u64::from(stream));
        if (context[0] >> 1) & 7 != 1 {
            self.violation(format!(
                "stream context {stream} of DCI {dci}: SCT {} (1 expected)",
                (context[0] >> 1) & 7
            ));
            return Err(CompletionCode::INVALID_STREAM_TYPE);
        }
        let ring = RingState {
            dequeue: u64::from(context[0] & !0xf) | (u64::from(context[1]) << 32),
            cycle: context[0] & 1 != 0,
        };
        self.set_ring(slot, dci, stream, ring);
        Ok(ring)
    }

    fn set_ring(&mut self, slot: u8, dci: u8, stream: u16, ring: RingState) {
        if let Some(endpoint) = self.slots.get_mut(&slot).and_then(|s| s.endpoints.get_mut(&dci)) {
            match endpoint.streams.as_mut() {
                Some((_, _, rings)) => {
                    rings.insert(stream, ring);
                }
                None => endpoint.ring = ring,
            }
        }
    }

    /// Works through every armed ring of the slot until no TD moves.
    fn run_slot(&mut self, platform: &SimPlatform, slot: u8) {
        for _ in 0..1000 {
            let armed: Vec<(u8, u16)> =
                self.slots.get(&slot).map(|s| s.armed.iter().copied().collect()).unwrap_or_default();
            let mut progress = false;
            for (dci, stream) in armed {
                while self.run_td(platform, slot, dci, stream) {
                    progress = true;
                }
            }
            if !progress {
                return;
            }
        }
    }

    /// Runs the next TD of (dci, stream); `true` if it completed.
    fn run_td(&mut self, platform: &SimPlatform, slot: u8, dci: u8, stream: u16) -> bool {
        let Some(endpoint) = self.slots.get(&slot).and_then(|s| s.endpoints.get(&dci)).cloned() else {
            return false;
        };
        if endpoint.state == EP_HALTED {
            return false;
        }
        let ring = match self.ring_of(platform, slot, dci, stream) {
            Ok(ring) => ring,
            Err(code) => {
                self.transfer_event(platform, slot, dci, 0, 0, code);
                if let Some(state) = self.slots.get_mut(&slot) {
                    state.armed.remove(&(dci, stream));
                }
                return false;
            }
        };
        let control = dci == 1;
        self.current_ring = (slot, dci, stream);
        let Some((trbs, after)) = self.fetch_td(platform, ring, control) else {
            return false;
        };
        if !control {
            self.check_bulk_td(&trbs, endpoint.max_packet);
            let port = self.slots.get(&slot).map_or(0, |s| s.port);
            let bulk_only_in = endpoint.address & 0x80 != 0
                && self.devices.get(&port).is_some_and(|d| d.bulk_only_data_in_pending());
            if bulk_only_in && self.fetch_td(platform, after, false).is_some() {
                self.violation(String::from(
                    "a TD queued behind a Bulk-Only data-in stage (QEMU's usb-storage never answers a CSW read queued so)",
                ));
            }
        }
        if let Some(endpoint) = self.slots.get_mut(&slot).and_then(|s| s.endpoints.get_mut(&dci)) {
            endpoint.state = EP_RUNNING;
        }
        let port = self.slots.get(&slot).map_or(0, |s| s.port);
        let outcome = if control {
            self.control_td(platform, port, &trbs)
        } else {
            self.bulk_td(platform, port, endpoint.address, stream, &trbs)
        };
        match outcome {
            None => {
                if endpoint.streams.is_some() && self.fetch_td(platform, after, false).is_some() {
                    self.violation(format!(
                        "a second TD on stream {stream} of DCI {dci} while the first waits (QEMU asserts)"
                    ));
                }
                false
            }
            Some((transferred, code)) => {
                self.statistics.transfer_tds += 1;
                // A STALL, or a transaction error after the retries of CErr, halts the endpoint
                // at the failed TD (§4.10.2).
                if code == CompletionCode::STALL_ERROR || code == CompletionCode::USB_TRANSACTION_ERROR {
                    if let Some(endpoint) = self.slots.get_mut(&slot).and_then(|s| s.endpoints.get_mut(&dci))
                    {
                        endpoint.state = EP_HALTED;
                    }
                    self.write_endpoint_state(platform, slot, dci);
                    self.transfer_event(platform, slot, dci, trbs[0].0, trbs[0].1.transfer_length(), code);
                    return false;
                }
                self.set_ring(slot, dci, stream, after);
                self.td_events(platform, slot, dci, &trbs, transferred);
                true
            }
        }
    }

    /// The event of a finished TD: at the TRB where a short transfer ended if it asked for one
    /// (ISP), else at the IOC TRB (§4.10.1.1; QEMU `xhci_xfer_report`).
    fn td_events(
        &mut self,
        platform: &SimPlatform,
        slot: u8,
        dci: u8,
        trbs: &[(u64, Trb)],
        transferred: usize,
    ) {
        let mut left = transferred;
        let mut short = false;
        let mut reported = false;
        for (address, trb) in trbs {
            if trb.trb_type() == trb_type::STATUS_STAGE {
                // A control transfer's Status stage is a TD of its own (§4.11.2.2).
                short = false;
                reported = false;
            }
            let length = match trb.trb_type() {
                trb_type::NORMAL | trb_type::DATA_STAGE => trb.transfer_length() as usize,
                _ => 0,
            };
            let chunk = length.min(left);
            left -= chunk;
            let this_short = chunk < length;
            short |= this_short;
            let isp = trb.dwords[3] & (1 << 2) != 0;
            let ioc = trb.dwords[3] & (1 << 5) != 0;
            if !reported && ((this_short && isp) || ioc) {
                let code = if short { CompletionCode::SHORT_PACKET } else { CompletionCode::SUCCESS };
                self.transfer_event(platform, slot, dci, *address, (length - chunk) as u32, code);
                reported = true;
            }
        }
    }

    fn control_td(
        &mut self,
        platform: &SimPlatform,
        port: u8,
        trbs: &[(u64, Trb)],
    ) -> Option<(usize, CompletionCode)> {
        let setup = trbs[0].1;
        if setup.trb_type() != trb_type::SETUP_STAGE
            || setup.dwords[3] & (1 << 6) == 0
            || setup.transfer_length() != 8
        {
            self.violation(String::from("a control TD without a Setup Stage TRB with IDT and length 8"));
            return Some((0, CompletionCode::TRB_ERROR));
        }
        let request = setup.parameter().to_le_bytes();
        let data = trbs.iter().find(|(_, t)| t.trb_type() == trb_type::DATA_STAGE).map(|(_, t)| *t);
        let status = trbs.last().expect("a status stage").1;
        let direction_in = request[0] & 0x80 != 0;
        let transfer_type = (setup.dwords[3] >> 16) & 3;
        let expected_type = match (data.is_some(), direction_in) {
            (false, _) => 0,
            (true, false) => 2,
            (true, true) => 3,
        };
        if transfer_type != expected_type
            || status.dwords[3] & (1 << 16) != u32::from(!(data.is_some() && direction_in)) << 16
        {
            self.violation(format!(
                "control request {:02x?}: transfer type or status direction wrong",
                &request[..2]
            ));
        }
        let answer = self.devices.get_mut(&port).map(|device| device.control(request));
        match answer {
            Some(Ok(bytes)) => {
                let mut transferred = 0;
                if let Some(data) = data {
                    let length = (data.transfer_length() as usize).min(bytes.len());
                    if !platform.write_bus(data.parameter(), &bytes[..length]) {
                        self.violation(format!(
                            "control data buffer {:#x} outside the arena",
                            data.parameter()
                        ));
                    }
                    transferred = length;
                }
                Some((transferred, CompletionCode::SUCCESS))
            }
            _ => Some((0, CompletionCode::STALL_ERROR)),
        }
    }

    fn bulk_td(
        &mut self,
        platform: &SimPlatform,
        port: u8,
        address: u8,
        stream: u16,
        trbs: &[(u64, Trb)],
    ) -> Option<(usize, CompletionCode)> {
        let total: usize = trbs.iter().map(|(_, t)| t.transfer_length() as usize).sum();
        let device = self.devices.get_mut(&port)?;
        let transfer = if address & 0x80 != 0 {
            device.bulk_in(address, stream, total)
        } else {
            let mut data = Vec::with_capacity(total);
            for (_, trb) in trbs {
                let mut piece = vec![0u8; trb.transfer_length() as usize];
                if !platform.read_bus(trb.parameter(), &mut piece) {
                    self.violation(format!("OUT buffer {:#x} outside the arena", trb.parameter()));
                }
                data.extend_from_slice(&piece);
            }
            self.devices.get_mut(&port)?.bulk_out(address, stream, &data)
        };
        match transfer {
            Transfer::NotReady => None,
            Transfer::Stall => Some((0, CompletionCode::STALL_ERROR)),
            Transfer::TransactionError => Some((0, CompletionCode::USB_TRANSACTION_ERROR)),
            Transfer::Done(bytes) if address & 0x80 != 0 => {
                let mut offset = 0;
                for (_, trb) in trbs {
                    let length = (trb.transfer_length() as usize).min(bytes.len() - offset);
                    if length > 0 && !platform.write_bus(trb.parameter(), &bytes[offset..offset + length]) {
                        self.violation(format!("IN buffer {:#x} outside the arena", trb.parameter()));
                    }
                    offset += length;
                }
                Some((bytes.len(), CompletionCode::SUCCESS))
            }
            Transfer::Done(_) => Some((total, CompletionCode::SUCCESS)),
        }
    }
}

impl RegisterIo for SimXhci<'_> {
    fn read32(&self, offset_bytes: usize) -> u32 {
        assert!(
            offset_bytes.is_multiple_of(4) && offset_bytes < REGISTER_BYTES,
            "register {offset_bytes:#x}"
        );
        self.state.borrow_mut().read(offset_bytes, self.platform.peek_ns())
    }

    fn write32(&self, offset_bytes: usize, value: u32) {
        assert!(
            offset_bytes.is_multiple_of(4) && offset_bytes < REGISTER_BYTES,
            "register {offset_bytes:#x}"
        );
        self.state.borrow_mut().write(self.platform, offset_bytes, value)
    }

    /// A 64-bit access is a driver mistake: BCM2711's PCIe bridge cannot carry it
    /// (docs/pcie-brcmstb.md §6), and the driver promises 32-bit accesses only.
    fn read64(&self, offset_bytes: usize) -> u64 {
        self.state.borrow_mut().violation(format!("64-bit read of register {offset_bytes:#x}"));
        u64::MAX
    }

    fn write64(&self, offset_bytes: usize, _value: u64) {
        self.state.borrow_mut().violation(format!("64-bit write of register {offset_bytes:#x}"));
    }
}
