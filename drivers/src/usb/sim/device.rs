//! Simulated USB mass storage devices for host tests: descriptors like QEMU's `usb-storage`
//! (Bulk-Only, hw/usb/dev-storage.c) and `usb-uas` (hw/usb/dev-uas.c), or a bridge with both in
//! two alternate settings; standard and class requests; the Bulk-Only state machine (CBW, data,
//! CSW, STALL until CLEAR_FEATURE, everything STALLed after a phase error until the Bulk-Only
//! reset, like QEMU's `needs_reset`); UAS over streams (one outstanding status and data read per
//! stream, as QEMU asserts) or with Read/Write Ready below SuperSpeed; and faults to inject.
#![forbid(unsafe_code)]

extern crate std;

use super::super::regs::Speed;
use super::disk::SimDisk;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::format;
use std::string::String;
use std::vec;
use std::vec::Vec;

/// Which transports the device offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    /// Bulk-Only only (QEMU `usb-storage`).
    BulkOnly,
    /// UAS only, `2^streams_exponent` streams at SuperSpeed (QEMU `usb-uas`: 4).
    Uas { streams_exponent: u8 },
    /// Bulk-Only in alternate 0, UAS in alternate 1 (a typical bridge).
    Both { streams_exponent: u8 },
    /// A HID keyboard: not mass storage.
    Keyboard,
}

/// Faults to inject.
#[derive(Clone, Debug, Default)]
pub struct Faults {
    /// Bulk-Only: the next data stage is ended with a STALL (CSW status 1 follows).
    pub stall_next_data: bool,
    /// Bulk-Only: this many CSW reads are STALLed (the CSW comes on the read after them).
    pub stall_csws: u32,
    /// Bulk-Only: the next data-in ends in a USB transaction error (a bus error, not a STALL).
    pub transaction_error_next_data: bool,
    /// Bulk-Only: REQUEST SENSE itself fails (CSW status 1).
    pub fail_request_sense: bool,
    /// Bulk-Only: the next CSW reports a phase error; everything STALLs until a reset.
    pub phase_error_next: bool,
    /// Bulk-Only: the next CSW has a wrong signature.
    pub bad_csw_next: bool,
    /// Get Max LUN STALLs (one LUN).
    pub stall_get_max_lun: bool,
    /// The next this many READs never complete (until a reset or an abort).
    pub hang_reads: u32,
    /// UAS: the response code to task management functions.
    pub task_management_response: Option<u8>,
    /// UAS: new commands wait (no data, no status) until [`SimUsbDevice::release_uas_task`].
    pub hold_uas_tasks: bool,
    /// Bulk-Only: while set, a data-in stage NAKs (the drive is still reading its medium), so
    /// the CBW's event comes before the data's, as on QEMU's `usb-storage`, whose READ data
    /// goes asynchronous (hw/usb/dev-storage.c). Cleared, the data goes on the next IN.
    pub hold_bot_data_in: bool,
}

/// What a transfer did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transfer {
    /// Completed; for IN the bytes sent (maybe fewer than asked: a short packet).
    Done(Vec<u8>),
    Stall,
    /// The transaction failed on the bus (the controller retries, then halts the endpoint).
    TransactionError,
    /// NAK: nothing yet, try later.
    NotReady,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum BotState {
    Cbw,
    DataIn { data: Vec<u8>, expected: u32, sent: u32, csw: [u8; 13] },
    Csw([u8; 13]),
    Hung,
    NeedsReset,
}

#[derive(Clone, Debug)]
struct UasTask {
    data: Vec<u8>,
    sent: u32,
    /// The data phase is over (at once when there is none): only then is status sent, as
    /// QEMU finishes the data packet before the status (hw/usb/dev-uas.c).
    data_done: bool,
    sense_iu: Vec<u8>,
    hung: bool,
    announced: bool,
}

/// Counters for the tests' assertions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceStatistics {
    pub control_requests: Vec<(u8, u8)>,
    pub clear_halts: Vec<u8>,
    pub bulk_only_resets: u32,
    pub set_interface: Vec<(u8, u8)>,
    pub task_management: Vec<(u8, u16)>,
    pub max_uas_tasks: usize,
}

pub struct SimUsbDevice {
    pub speed: Speed,
    pub kind: DeviceKind,
    pub disk: SimDisk,
    pub faults: Faults,
    pub vendor_id: u16,
    pub product_id: u16,
    pub address: u8,
    pub configuration: u8,
    pub alternate: u8,
    halted: BTreeSet<u8>,
    bot: BotState,
    uas_tasks: BTreeMap<u16, UasTask>,
    /// Below SuperSpeed: IUs waiting for the status read, and the task whose data moves.
    uas_status_queue: VecDeque<Vec<u8>>,
    uas_data_task: Option<u16>,
    pub statistics: DeviceStatistics,
    pub violations: Vec<String>,
}

pub const BOT_IN: u8 = 0x81;
pub const BOT_OUT: u8 = 0x02;
pub const UAS_COMMAND: u8 = 0x01;
pub const UAS_STATUS: u8 = 0x82;
pub const UAS_DATA_IN: u8 = 0x83;
pub const UAS_DATA_OUT: u8 = 0x04;
/// The UAS endpoints of a dual-transport bridge's alternate 1.
const DUAL_UAS: [u8; 4] = [0x04, 0x83, 0x81, 0x02];

impl SimUsbDevice {
    pub fn new(speed: Speed, kind: DeviceKind, disk: SimDisk) -> Self {
        SimUsbDevice {
            speed,
            kind,
            disk,
            faults: Faults::default(),
            vendor_id: 0x46f4,
            product_id: match kind {
                DeviceKind::Uas { .. } => 0x0003,
                _ => 0x0001,
            },
            address: 0,
            configuration: 0,
            alternate: 0,
            halted: BTreeSet::new(),
            bot: BotState::Cbw,
            uas_tasks: BTreeMap::new(),
            uas_status_queue: VecDeque::new(),
            uas_data_task: None,
            statistics: DeviceStatistics::default(),
            violations: Vec::new(),
        }
    }

    fn super_speed(&self) -> bool {
        self.speed.is_super_speed()
    }

    fn bulk_packet(&self) -> u16 {
        self.speed.max_bulk_packet_bytes()
    }

    /// The device descriptor (USB 2.0 §9.6.1).
    pub fn device_descriptor(&self) -> Vec<u8> {
        let (bcd, max_packet0) = if self.super_speed() { (0x0300u16, 9u8) } else { (0x0200, 64) };
        let mut bytes = vec![18, 1];
        bytes.extend_from_slice(&bcd.to_le_bytes());
        bytes.extend_from_slice(&[0, 0, 0, max_packet0]);
        bytes.extend_from_slice(&self.vendor_id.to_le_bytes());
        bytes.extend_from_slice(&self.product_id.to_le_bytes());
        bytes.extend_from_slice(&[0, 1, 1, 2, 3, 1]);
        bytes
    }

    fn endpoint(&self, bytes: &mut Vec<u8>, address: u8, streams_exponent: u8, pipe: Option<u8>) {
        bytes.extend_from_slice(&[7, 5, address, 2]);
        bytes.extend_from_slice(&self.bulk_packet().to_le_bytes());
        bytes.push(0);
        if let Some(pipe) = pipe {
            bytes.extend_from_slice(&[4, 0x24, pipe, 0]);
        }
        if self.super_speed() {
            bytes.extend_from_slice(&[6, 0x30, 15, streams_exponent, 0, 0]);
        }
    }

    /// The configuration descriptor with everything in it.
    pub fn configuration_descriptor(&self) -> Vec<u8> {
        let mut bytes = vec![9, 2, 0, 0, 1, 1, 0, 0xc0, 0];
        match self.kind {
            DeviceKind::BulkOnly => {
                bytes.extend_from_slice(&[9, 4, 0, 0, 2, 0x08, 0x06, 0x50, 0]);
                self.endpoint(&mut bytes, BOT_IN, 0, None);
                self.endpoint(&mut bytes, BOT_OUT, 0, None);
            }
            DeviceKind::Uas { streams_exponent } => {
                bytes.extend_from_slice(&[9, 4, 0, 0, 4, 0x08, 0x06, 0x62, 0]);
                for (address, pipe) in
                    [(UAS_COMMAND, 1), (UAS_STATUS, 2), (UAS_DATA_IN, 3), (UAS_DATA_OUT, 4)]
                {
                    self.endpoint(
                        &mut bytes,
                        address,
                        if pipe == 1 { 0 } else { streams_exponent },
                        Some(pipe),
                    );
                }
            }
            DeviceKind::Both { streams_exponent } => {
                bytes.extend_from_slice(&[9, 4, 0, 0, 2, 0x08, 0x06, 0x50, 0]);
                self.endpoint(&mut bytes, BOT_IN, 0, None);
                self.endpoint(&mut bytes, BOT_OUT, 0, None);
                bytes.extend_from_slice(&[9, 4, 0, 1, 4, 0x08, 0x06, 0x62, 0]);
                for (pipe, address) in DUAL_UAS.iter().enumerate() {
                    let streams = if pipe == 0 { 0 } else { streams_exponent };
                    self.endpoint(&mut bytes, *address, streams, Some(pipe as u8 + 1));
                }
            }
            DeviceKind::Keyboard => {
                bytes.extend_from_slice(&[9, 4, 0, 0, 1, 0x03, 0x01, 0x01, 0]);
                bytes.extend_from_slice(&[7, 5, 0x81, 3, 8, 0, 10]);
            }
        }
        let total = bytes.len() as u16;
        bytes[2..4].copy_from_slice(&total.to_le_bytes());
        bytes
    }

    /// Endpoint addresses of the configuration (all alternates), with packet size, burst and
    /// stream exponent.
    pub fn endpoints(&self) -> Vec<(u8, u16, u8, u8)> {
        let bytes = self.configuration_descriptor();
        let mut found = Vec::new();
        let mut offset = 0;
        while offset + 2 <= bytes.len() {
            let length = usize::from(bytes[offset]);
            match bytes[offset + 1] {
                5 => found.push((
                    bytes[offset + 2],
                    u16::from_le_bytes([bytes[offset + 4], bytes[offset + 5]]),
                    0,
                    0,
                )),
                0x30 => {
                    if let Some(last) = found.last_mut() {
                        last.2 = bytes[offset + 2];
                        last.3 = bytes[offset + 3] & 0x1f;
                    }
                }
                _ => {}
            }
            offset += length.max(1);
        }
        // An address used by two alternate settings: the one with streams speaks for both.
        found.sort_unstable_by_key(|e| (e.0, core::cmp::Reverse(e.3)));
        found.dedup_by_key(|e| e.0);
        found
    }

    fn string(&self, index: u8) -> Option<Vec<u8>> {
        let text = match index {
            0 => return Some(vec![4, 3, 0x09, 0x04]),
            1 => "BAREBENCH",
            2 => "SIM USB DISK",
            3 => "SIM0001",
            _ => return None,
        };
        let mut bytes = vec![(2 + 2 * text.len()) as u8, 3];
        for byte in text.bytes() {
            bytes.extend_from_slice(&[byte, 0]);
        }
        Some(bytes)
    }

    /// A control request (USB 2.0 §9.4, BOT §3.1-3.2); `Err` is a STALL.
    pub fn control(&mut self, setup: [u8; 8]) -> Result<Vec<u8>, ()> {
        let (request_type, request) = (setup[0], setup[1]);
        let value = u16::from_le_bytes([setup[2], setup[3]]);
        let index = u16::from_le_bytes([setup[4], setup[5]]);
        let length = usize::from(u16::from_le_bytes([setup[6], setup[7]]));
        self.statistics.control_requests.push((request_type, request));
        let mut answer = match (request_type, request) {
            (0x80, 6) => match (value >> 8) as u8 {
                1 => self.device_descriptor(),
                2 => self.configuration_descriptor(),
                3 => self.string(value as u8).ok_or(())?,
                _ => return Err(()),
            },
            (0x00, 9) => {
                if value != 1 {
                    return Err(());
                }
                self.configuration = 1;
                self.alternate = 0;
                self.halted.clear();
                Vec::new()
            }
            (0x01, 11) => {
                let allowed = matches!(self.kind, DeviceKind::Both { .. }) && value <= 1 || value == 0;
                if index != 0 || !allowed {
                    return Err(());
                }
                self.statistics.set_interface.push((index as u8, value as u8));
                self.alternate = value as u8;
                Vec::new()
            }
            (0x02, 1) => {
                self.statistics.clear_halts.push(index as u8);
                self.halted.remove(&(index as u8));
                Vec::new()
            }
            (0x21, 0xff) if self.offers_bot() => {
                self.statistics.bulk_only_resets += 1;
                self.bot = BotState::Cbw;
                Vec::new()
            }
            (0xa1, 0xfe) if self.offers_bot() => {
                if self.faults.stall_get_max_lun {
                    return Err(());
                }
                vec![0]
            }
            _ => return Err(()),
        };
        answer.truncate(length);
        Ok(answer)
    }

    fn offers_bot(&self) -> bool {
        matches!(self.kind, DeviceKind::BulkOnly | DeviceKind::Both { .. })
    }

    /// Whether the active interface setting is Bulk-Only.
    fn bot_active(&self) -> bool {
        match self.kind {
            DeviceKind::BulkOnly => true,
            DeviceKind::Both { .. } => self.alternate == 0,
            _ => false,
        }
    }

    fn uas_roles(&self) -> [u8; 4] {
        match self.kind {
            DeviceKind::Both { .. } => DUAL_UAS,
            _ => [UAS_COMMAND, UAS_STATUS, UAS_DATA_IN, UAS_DATA_OUT],
        }
    }

    fn streams(&self) -> u16 {
        match self.kind {
            DeviceKind::Uas { streams_exponent } | DeviceKind::Both { streams_exponent }
                if self.super_speed() =>
            {
                1 << streams_exponent
            }
            _ => 0,
        }
    }

    fn check_ready(&mut self, endpoint: u8) -> Result<(), Transfer> {
        if self.configuration == 0 {
            self.violations.push(format!("bulk transfer on {endpoint:#04x} before SET_CONFIGURATION"));
            return Err(Transfer::Stall);
        }
        if self.halted.contains(&endpoint) {
            return Err(Transfer::Stall);
        }
        Ok(())
    }

    fn halt(&mut self, endpoint: u8) -> Transfer {
        self.halted.insert(endpoint);
        Transfer::Stall
    }

    /// Data the host sends on a bulk OUT endpoint (stream 0 without streams).
    pub fn bulk_out(&mut self, endpoint: u8, stream: u16, data: &[u8]) -> Transfer {
        if let Err(transfer) = self.check_ready(endpoint) {
            return transfer;
        }
        if self.bot_active() {
            return self.bot_out(endpoint, data);
        }
        let roles = self.uas_roles();
        if endpoint == roles[0] && stream == 0 {
            return self.uas_command(data);
        }
        self.violations.push(format!("OUT transfer to {endpoint:#04x} stream {stream}: no writes expected"));
        self.halt(endpoint)
    }

    /// Data the host asks for on a bulk IN endpoint, at most `max_bytes`.
    pub fn bulk_in(&mut self, endpoint: u8, stream: u16, max_bytes: usize) -> Transfer {
        if let Err(transfer) = self.check_ready(endpoint) {
            return transfer;
        }
        if self.bot_active() {
            return self.bot_in(endpoint, max_bytes);
        }
        let roles = self.uas_roles();
        if endpoint == roles[1] {
            self.uas_status(stream, max_bytes)
        } else if endpoint == roles[2] {
            self.uas_data_in(stream, max_bytes)
        } else {
            self.violations.push(format!("IN transfer from {endpoint:#04x}, not a UAS IN pipe"));
            self.halt(endpoint)
        }
    }

    fn csw(&mut self, tag: u32, residue: u32, status: u8) -> [u8; 13] {
        let mut csw = [0u8; 13];
        let signature: u32 =
            if core::mem::take(&mut self.faults.bad_csw_next) { 0x5342_5356 } else { 0x5342_5355 };
        let status = if core::mem::take(&mut self.faults.phase_error_next) { 2 } else { status };
        csw[0..4].copy_from_slice(&signature.to_le_bytes());
        csw[4..8].copy_from_slice(&tag.to_le_bytes());
        csw[8..12].copy_from_slice(&residue.to_le_bytes());
        csw[12] = status;
        csw
    }

    fn bot_out(&mut self, endpoint: u8, data: &[u8]) -> Transfer {
        if endpoint != BOT_OUT {
            self.violations.push(format!("Bulk-Only OUT on {endpoint:#04x}"));
            return self.halt(endpoint);
        }
        match self.bot {
            BotState::Cbw => {}
            BotState::NeedsReset => return Transfer::Stall,
            _ => {
                self.violations.push(String::from("a CBW before the previous command's CSW was read"));
                self.bot = BotState::NeedsReset;
                return self.halt(endpoint);
            }
        }
        if data.len() != 31 || data[0..4] != 0x4342_5355u32.to_le_bytes() {
            self.violations.push(format!("invalid CBW ({} bytes)", data.len()));
            self.bot = BotState::NeedsReset;
            return self.halt(endpoint);
        }
        let tag = u32::from_le_bytes(data[4..8].try_into().expect("4"));
        let expected = u32::from_le_bytes(data[8..12].try_into().expect("4"));
        let direction_in = data[12] & 0x80 != 0;
        let cdb_length = usize::from(data[14] & 0x1f);
        let cdb = data[15..15 + cdb_length.min(16)].to_vec();
        if expected > 0 && !direction_in {
            self.violations.push(String::from("a CBW with data out: nothing may be written"));
        }
        let is_read = matches!(cdb.first(), Some(0x28 | 0x88));
        if is_read && self.faults.hang_reads > 0 {
            self.faults.hang_reads -= 1;
            self.bot = BotState::Hung;
            return Transfer::Done(Vec::new());
        }
        let mut answer = self.disk.execute(&cdb, expected);
        if cdb.first() == Some(&0x03) && self.faults.fail_request_sense {
            answer.data.clear();
            answer.status = 2;
        }
        let residue = expected - answer.data.len().min(expected as usize) as u32;
        let status = u8::from(answer.status != 0);
        let csw = self.csw(tag, residue, status);
        self.bot = if expected == 0 {
            BotState::Csw(csw)
        } else {
            BotState::DataIn { data: answer.data, expected, sent: 0, csw }
        };
        Transfer::Done(Vec::new())
    }

    fn bot_in(&mut self, endpoint: u8, max_bytes: usize) -> Transfer {
        if endpoint != BOT_IN {
            self.violations.push(format!("Bulk-Only IN on {endpoint:#04x}"));
            return self.halt(endpoint);
        }
        match core::mem::replace(&mut self.bot, BotState::Cbw) {
            BotState::Cbw => {
                self.violations.push(String::from("bulk IN before a CBW (QEMU STALLs it)"));
                Transfer::NotReady
            }
            BotState::Hung => {
                self.bot = BotState::Hung;
                Transfer::NotReady
            }
            BotState::NeedsReset => {
                self.bot = BotState::NeedsReset;
                Transfer::Stall
            }
            BotState::Csw(csw) => {
                if self.faults.stall_csws > 0 {
                    self.faults.stall_csws -= 1;
                    self.bot = BotState::Csw(csw);
                    return self.halt(endpoint);
                }
                if max_bytes < 13 {
                    self.violations.push(format!("CSW read of {max_bytes} bytes"));
                }
                if csw[12] == 2 {
                    self.bot = BotState::NeedsReset;
                }
                Transfer::Done(csw.to_vec())
            }
            BotState::DataIn { data, expected, sent, mut csw } => {
                if self.faults.hold_bot_data_in {
                    self.bot = BotState::DataIn { data, expected, sent, csw };
                    return Transfer::NotReady;
                }
                if core::mem::take(&mut self.faults.transaction_error_next_data) {
                    self.bot = BotState::DataIn { data, expected, sent, csw };
                    return Transfer::TransactionError;
                }
                if core::mem::take(&mut self.faults.stall_next_data) {
                    csw[12] = 1;
                    self.disk.pending_sense = Some({
                        let mut sense = [0u8; 18];
                        sense[0] = 0x70;
                        sense[2] = 0x0b;
                        sense[7] = 10;
                        sense
                    });
                    self.bot = BotState::Csw(csw);
                    return self.halt(endpoint);
                }
                let start = sent as usize;
                let available = data.len().saturating_sub(start);
                let chunk = available.min(max_bytes);
                let piece = data[start..start + chunk].to_vec();
                let sent = sent + chunk as u32;
                let finished = chunk < max_bytes || sent >= expected || chunk == available;
                self.bot = if finished {
                    BotState::Csw(csw)
                } else {
                    BotState::DataIn { data, expected, sent, csw }
                };
                Transfer::Done(piece)
            }
        }
    }

    fn sense_iu(tag: u16, status: u8, sense: Option<[u8; 18]>) -> Vec<u8> {
        let mut iu = vec![0u8; 16];
        iu[0] = 0x03;
        iu[2..4].copy_from_slice(&tag.to_be_bytes());
        iu[6] = status;
        if let Some(sense) = sense {
            iu[14..16].copy_from_slice(&18u16.to_be_bytes());
            iu.extend_from_slice(&sense);
        }
        iu
    }

    fn response_iu(tag: u16, code: u8) -> Vec<u8> {
        let mut iu = vec![0u8; 8];
        iu[0] = 0x04;
        iu[2..4].copy_from_slice(&tag.to_be_bytes());
        iu[7] = code;
        iu
    }

    fn uas_command(&mut self, data: &[u8]) -> Transfer {
        if data.len() < 4 {
            self.violations.push(format!("{}-byte IU on the command pipe", data.len()));
            return self.halt(self.uas_roles()[0]);
        }
        let tag = u16::from_be_bytes([data[2], data[3]]);
        let streams = self.streams();
        if tag == 0 || (streams > 0 && tag > streams) {
            self.violations.push(format!("tag {tag} outside 1..={streams}"));
        }
        if self.uas_tasks.contains_key(&tag) {
            self.violations.push(format!("tag {tag} is already in use (QEMU: OVERLAPPED TAG)"));
            self.queue_status(tag, Self::response_iu(tag, 0x0a));
            return Transfer::Done(Vec::new());
        }
        match data[0] {
            0x01 if data.len() >= 32 => {
                if data[8..16] != [0; 8] {
                    self.violations.push(String::from("a LUN other than 0"));
                }
                let cdb = data[16..32].to_vec();
                let is_read = matches!(cdb.first(), Some(0x28 | 0x88));
                let expected = match cdb.first() {
                    Some(0x28) => u32::from(u16::from_be_bytes([cdb[7], cdb[8]])) * self.disk.block_bytes,
                    Some(0x88) => {
                        u32::from_be_bytes([cdb[10], cdb[11], cdb[12], cdb[13]]) * self.disk.block_bytes
                    }
                    Some(0x12) => u32::from(u16::from_be_bytes([cdb[3], cdb[4]])),
                    Some(0x03) => u32::from(cdb[4]),
                    Some(0x25) => 8,
                    Some(0x9e) => u32::from_be_bytes([cdb[10], cdb[11], cdb[12], cdb[13]]),
                    _ => 0,
                };
                let hung = (is_read && self.faults.hang_reads > 0) || self.faults.hold_uas_tasks;
                if is_read && self.faults.hang_reads > 0 {
                    self.faults.hang_reads -= 1;
                }
                let answer = self.disk.execute(&cdb, expected);
                let data = if answer.status == 0 { answer.data } else { Vec::new() };
                let task = UasTask {
                    data,
                    sent: 0,
                    data_done: expected == 0,
                    sense_iu: Self::sense_iu(tag, answer.status, answer.sense),
                    hung,
                    announced: false,
                };
                self.uas_tasks.insert(tag, task);
                self.statistics.max_uas_tasks = self.statistics.max_uas_tasks.max(self.uas_tasks.len());
                if !self.super_speed() {
                    self.announce_hs();
                }
                Transfer::Done(Vec::new())
            }
            0x05 if data.len() >= 16 => {
                let function = data[4];
                let task_tag = u16::from_be_bytes([data[6], data[7]]);
                self.statistics.task_management.push((function, task_tag));
                let code = self.faults.task_management_response.unwrap_or(0x00);
                match (code, function) {
                    (0x00, 0x01) => {
                        self.uas_tasks.remove(&task_tag);
                        if self.uas_data_task == Some(task_tag) {
                            self.uas_data_task = None;
                        }
                    }
                    (0x00, 0x02 | 0x08) => {
                        self.uas_tasks.clear();
                        self.uas_data_task = None;
                    }
                    _ => {}
                }
                self.queue_status(tag, Self::response_iu(tag, code));
                Transfer::Done(Vec::new())
            }
            id => {
                self.violations
                    .push(format!("unknown IU {id:#04x} ({} bytes) on the command pipe", data.len()));
                self.halt(self.uas_roles()[0])
            }
        }
    }

    /// A status IU for `tag`: below SuperSpeed it waits in the one status queue; at SuperSpeed
    /// it becomes a task that only has status left (so the stream's status read finds it).
    fn queue_status(&mut self, tag: u16, iu: Vec<u8>) {
        if self.super_speed() {
            self.uas_tasks.insert(
                tag,
                UasTask {
                    data: Vec::new(),
                    sent: 0,
                    data_done: true,
                    sense_iu: iu,
                    hung: false,
                    announced: true,
                },
            );
        } else {
            self.uas_status_queue.push_back(iu);
        }
    }

    /// Below SuperSpeed: announce the next task that has data with READ READY, or queue the
    /// Sense IU of one that has none (UAS §4.4.1; QEMU moves one data-in at a time).
    fn announce_hs(&mut self) {
        let tags: Vec<u16> = self.uas_tasks.keys().copied().collect();
        for tag in tags {
            let task = self.uas_tasks.get_mut(&tag).expect("listed");
            if task.announced || task.hung {
                continue;
            }
            if task.data.is_empty() {
                task.announced = true;
                let iu = task.sense_iu.clone();
                self.uas_tasks.remove(&tag);
                self.uas_status_queue.push_back(iu);
            } else if self.uas_data_task.is_none() {
                task.announced = true;
                self.uas_data_task = Some(tag);
                let mut ready = vec![0x06, 0, 0, 0];
                ready[2..4].copy_from_slice(&tag.to_be_bytes());
                self.uas_status_queue.push_back(ready);
            }
        }
    }

    fn uas_status(&mut self, stream: u16, max_bytes: usize) -> Transfer {
        if self.super_speed() {
            let Some(task) = self.uas_tasks.get(&stream) else {
                return Transfer::NotReady;
            };
            if task.hung || !task.data_done {
                return Transfer::NotReady;
            }
            let iu = task.sense_iu.clone();
            self.uas_tasks.remove(&stream);
            return Transfer::Done(iu.into_iter().take(max_bytes).collect());
        }
        if stream != 0 {
            self.violations.push(format!("status read on stream {stream} below SuperSpeed"));
        }
        match self.uas_status_queue.pop_front() {
            Some(iu) => Transfer::Done(iu.into_iter().take(max_bytes).collect()),
            None => Transfer::NotReady,
        }
    }

    fn uas_data_in(&mut self, stream: u16, max_bytes: usize) -> Transfer {
        let tag = if self.super_speed() {
            stream
        } else {
            match self.uas_data_task {
                Some(tag) => tag,
                None => {
                    self.violations.push(String::from("data-in read without a READ READY"));
                    return Transfer::NotReady;
                }
            }
        };
        let super_speed = self.super_speed();
        let Some(task) = self.uas_tasks.get_mut(&tag) else {
            return Transfer::NotReady;
        };
        if task.hung {
            return Transfer::NotReady;
        }
        let start = task.sent as usize;
        let chunk = task.data.len().saturating_sub(start).min(max_bytes);
        let piece = task.data[start..start + chunk].to_vec();
        task.sent += chunk as u32;
        let done = task.sent as usize >= task.data.len();
        task.data_done = done;
        if !super_speed && done {
            let iu = task.sense_iu.clone();
            self.uas_tasks.remove(&tag);
            self.uas_data_task = None;
            self.uas_status_queue.push_back(iu);
            self.announce_hs();
        }
        Transfer::Done(piece)
    }

    /// Bulk-Only: the data-in stage of a command is under way.
    pub fn bulk_only_data_in_pending(&self) -> bool {
        matches!(self.bot, BotState::DataIn { .. } | BotState::Hung)
    }

    /// A USB reset (port reset, controller reset): back to the default state (USB 2.0 §9.1.1.3).
    pub fn bus_reset(&mut self) {
        self.address = 0;
        self.configuration = 0;
        self.alternate = 0;
        self.halted.clear();
        self.bot = BotState::Cbw;
        self.uas_tasks.clear();
        self.uas_status_queue.clear();
        self.uas_data_task = None;
    }

    /// Lets a held UAS command go on (its data and status may now be sent).
    pub fn release_uas_task(&mut self, tag: u16) {
        if let Some(task) = self.uas_tasks.get_mut(&tag) {
            task.hung = false;
        }
        if !self.super_speed() {
            self.announce_hs();
        }
    }

    /// Tags with a command the device has not finished.
    pub fn uas_tags_in_progress(&self) -> Vec<u16> {
        self.uas_tasks.keys().copied().collect()
    }
}
