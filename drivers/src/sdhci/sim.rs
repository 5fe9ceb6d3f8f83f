//! A simulated SDHCI controller with a simulated SD card, for host tests: registers as the
//! SDHCI specification lays them out, commands executed when word 0x0C is written, PIO through
//! the data port, ADMA2 descriptor walking over test memory, error injection, and checks of the
//! rules the driver must keep (write spacing at slow clocks, no write to register 0x00).
//! The card behaves like QEMU's (`hw/sd/sd.c`, as docs/qemu.md §2 describes it) unless told otherwise.

extern crate std;

use super::card::ocr;
use super::regs::{interrupt, offsets};
use crate::mmio::RegisterIo;
use blockdev::Clock;
use core::cell::RefCell;
use std::collections::VecDeque;
use std::vec;
use std::vec::Vec;

/// The shared test arena (a 1 GHz clock stepping 1 µs per read, so waits end quickly).
pub type TestPlatform = crate::testing::ArenaPlatform;

/// Where an injected error strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectAt {
    /// The command itself fails (no response / bad response).
    Command,
    /// The data phase fails after this many blocks.
    Data { after_blocks: u32 },
    /// The data phase stops without any status (the card went silent).
    Stall { after_blocks: u32 },
}

#[derive(Clone, Copy, Debug)]
pub struct Injection {
    pub command_index: u8,
    /// Error Interrupt Status bits in their word-0x30 positions (e.g. `interrupt::DATA_CRC`).
    pub error_bits: u32,
    pub at: InjectAt,
    /// How many commands it affects.
    pub times: u32,
}

/// The simulated card.
#[derive(Clone, Debug)]
pub struct SimCard {
    pub present: bool,
    pub capacity_bytes: u64,
    pub block_addressed: bool,
    pub answers_cmd8: bool,
    pub accepts_1v8: bool,
    /// ACMD41 polls that still answer busy.
    pub busy_polls: u32,
    pub cid: u128,
    pub csd: u128,
    pub scr: [u8; 8],
    pub ssr: [u8; 64],
    pub switch_support: u16,
    pub accepts_cmd23: bool,
    pub rca: u16,
}

impl SimCard {
    /// QEMU's card for an image of `capacity_bytes` (docs/qemu.md §2: SDSC up to 2 GiB, CSD v1,
    /// OCR 0x80ffff00; SDHC above, CSD v2, OCR 0xc0ffff00; SCR 0x02258000; CMD6 support 0x8003).
    pub fn qemu_like(capacity_bytes: u64) -> SimCard {
        let block_addressed = capacity_bytes > 2 << 30;
        let csd = if block_addressed {
            (1u128 << 126)
                | (0x32u128 << 96)
                | (0x5b5u128 << 84)
                | (9u128 << 80)
                | (((capacity_bytes / (512 * 1024)) as u128 - 1) << 48)
        } else {
            (0x32u128 << 96)
                | (0x5b5u128 << 84)
                | (9u128 << 80)
                | (((capacity_bytes >> 18) as u128 - 1) << 62)
                | (7u128 << 47)
        };
        SimCard {
            present: true,
            capacity_bytes,
            block_addressed,
            answers_cmd8: true,
            accepts_1v8: false,
            busy_polls: 1,
            cid: u128::from_be_bytes([
                0xaa, b'X', b'Y', b'Q', b'E', b'M', b'U', b'!', 0x01, 0xde, 0xad, 0xbe, 0xef, 0x00, 0x62,
                0x3f,
            ]),
            csd,
            scr: [0x02, 0x25, 0x80, 0x00, 0, 0, 0, 0],
            ssr: {
                let mut ssr = [0u8; 64];
                ssr[0] = 0x80;
                ssr
            },
            switch_support: 0x8003,
            accepts_cmd23: true,
            rca: 0x4567,
        }
    }
}

/// Card states (SD §4.10.1), as the simulation tracks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Idle,
    Ready,
    Identification,
    StandBy,
    Transfer,
    SendingData,
}

impl State {
    fn bits(self) -> u32 {
        match self {
            State::Idle => 0,
            State::Ready => 1,
            State::Identification => 2,
            State::StandBy => 3,
            State::Transfer => 4,
            State::SendingData => 5,
        }
    }
}

/// Where the data of a running transfer comes from.
#[derive(Clone, Debug)]
enum Source {
    Bytes(Vec<u8>),
    Sectors { first_sector: u64 },
}

#[derive(Clone, Debug)]
struct Transfer {
    source: Source,
    block_bytes: usize,
    blocks: u32,
    blocks_sent: u32,
    auto_cmd12: bool,
    command_index: u8,
}

pub struct SimState {
    pub registers: [u32; 64],
    pub card: SimCard,
    state: State,
    app_command: bool,
    pending_errors: u32,
    acmd41_polls: u32,
    block_count_from_cmd23: Option<u32>,
    buffer: VecDeque<u32>,
    transfer: Option<Transfer>,
    pub injections: Vec<Injection>,
    /// Every command seen: (index, argument, transfer mode).
    pub log: Vec<(u8, u32, u16)>,
    pub sdma_address_written: bool,
    /// Smallest gap between two non-data register writes while SDCLK ≤ 400 kHz, in ns.
    pub min_slow_write_gap_ns: u64,
    last_write_ns: Option<u64>,
    pub line_resets: u32,
    pub dma_transfers: u32,
    pub signal_1v8_requested: bool,
    dat_low: bool,
    stalled: bool,
    pub tuning_commands: u32,
}

/// The simulated controller.
pub struct SimHost<'a> {
    pub state: RefCell<SimState>,
    platform: &'a TestPlatform,
}

impl<'a> SimHost<'a> {
    /// A controller with the given capabilities and version word (0xFC), card attached.
    pub fn new(
        platform: &'a TestPlatform,
        capabilities: (u32, u32),
        version_word: u32,
        card: SimCard,
    ) -> Self {
        let mut registers = [0u32; 64];
        registers[offsets::CAPABILITIES / 4] = capabilities.0;
        registers[offsets::CAPABILITIES_HIGH / 4] = capabilities.1;
        registers[offsets::SLOT_STATUS_VERSION / 4] = version_word;
        SimHost {
            state: RefCell::new(SimState {
                registers,
                card,
                state: State::Idle,
                app_command: false,
                pending_errors: 0,
                acmd41_polls: 0,
                block_count_from_cmd23: None,
                buffer: VecDeque::new(),
                transfer: None,
                injections: Vec::new(),
                log: Vec::new(),
                sdma_address_written: false,
                min_slow_write_gap_ns: u64::MAX,
                last_write_ns: None,
                line_resets: 0,
                dma_transfers: 0,
                signal_1v8_requested: false,
                dat_low: false,
                stalled: false,
                tuning_commands: 0,
            }),
            platform,
        }
    }

    pub fn inject(&self, injection: Injection) {
        self.state.borrow_mut().injections.push(injection);
    }

    /// Commands seen, by index (ACMDs appear after their CMD55).
    pub fn command_indices(&self) -> Vec<u8> {
        self.state.borrow().log.iter().map(|(index, _, _)| *index).collect()
    }
}

impl SimState {
    fn register(&self, offset: usize) -> u32 {
        self.registers[offset / 4]
    }

    fn sd_clock_hz(&self) -> u32 {
        let word = self.register(offsets::CLOCK_TIMEOUT_RESET);
        if word & 0b100 == 0 {
            return 0;
        }
        let divider = ((word >> 8) & 0xff) | (((word >> 6) & 0b11) << 8);
        let base_hz = ((self.register(offsets::CAPABILITIES) >> 8) & 0xff) * 1_000_000;
        if divider == 0 {
            base_hz
        } else {
            base_hz / (2 * divider)
        }
    }

    fn raise(&mut self, bits: u32) {
        let enabled = self.register(offsets::INTERRUPT_STATUS_ENABLE);
        let mut status = self.register(offsets::INTERRUPT_STATUS) | (bits & enabled);
        if status & 0xffff_0000 != 0 {
            status |= interrupt::ERROR_INTERRUPT;
        }
        self.registers[offsets::INTERRUPT_STATUS / 4] = status;
    }

    fn present_state(&self) -> u32 {
        let mut value = 0;
        if self.card.present {
            value |= 1 << 16;
        }
        value |= 1 << 17 | 1 << 18;
        if !self.dat_low {
            value |= 0xf << 20;
        }
        value |= 1 << 24;
        if !self.buffer.is_empty() {
            value |= 1 << 11 | 1 << 9 | 1 << 1;
        }
        value
    }

    fn card_status(&mut self) -> u32 {
        let mut status = self.state.bits() << 9 | 1 << 8 | self.pending_errors;
        if self.app_command {
            status |= 1 << 5;
        }
        self.pending_errors = 0;
        status
    }

    fn take_injection(&mut self, index: u8, data: bool) -> Option<Injection> {
        let position = self
            .injections
            .iter()
            .position(|i| i.command_index == index && i.times > 0 && (i.at != InjectAt::Command) == data)?;
        self.injections[position].times -= 1;
        Some(self.injections[position])
    }

    fn execute(&mut self, platform: &TestPlatform) {
        let word = self.register(offsets::TRANSFER_MODE_COMMAND);
        let mode = (word & 0xffff) as u16;
        let index = ((word >> 24) & 0x3f) as u8;
        let argument = self.register(offsets::ARGUMENT);
        let data_present = word & (1 << 21) != 0;
        self.log.push((index, argument, mode));
        let application = self.app_command;
        self.app_command = false;
        if !self.card.present || self.register(offsets::HOST_CONTROL_POWER) & 0x100 == 0 {
            // A command without response "completes" with nobody listening.
            self.raise(if index == 0 { interrupt::COMMAND_COMPLETE } else { interrupt::COMMAND_TIMEOUT });
            return;
        }
        if let Some(injection) = self.take_injection(index, false) {
            self.raise(injection.error_bits);
            return;
        }
        let response = self.respond(index, argument, application);
        let Some(response) = response else {
            if index != 0 {
                self.raise(interrupt::COMMAND_TIMEOUT);
            } else {
                self.raise(interrupt::COMMAND_COMPLETE);
            }
            return;
        };
        match response {
            Response::Short(value) => self.registers[offsets::RESPONSE0 / 4] = value,
            Response::Long(register) => {
                let bits = register >> 8;
                for i in 0..4 {
                    self.registers[offsets::RESPONSE0 / 4 + i] = (bits >> (32 * i)) as u32;
                }
            }
        }
        self.raise(interrupt::COMMAND_COMPLETE);
        if matches!(index, 7 | 12) {
            self.raise(interrupt::TRANSFER_COMPLETE);
        }
        if data_present {
            self.start_data(index, argument, mode, application, platform);
        }
    }

    fn start_data(
        &mut self,
        index: u8,
        argument: u32,
        mode: u16,
        application: bool,
        platform: &TestPlatform,
    ) {
        let block_size_count = self.register(offsets::BLOCK_SIZE_COUNT);
        let block_bytes = (block_size_count & 0xfff) as usize;
        let multi = mode & (1 << 5) != 0;
        let mut blocks = if multi { block_size_count >> 16 } else { 1 };
        let source = match (application, index) {
            (true, 51) => Source::Bytes(self.card.scr.to_vec()),
            (true, 13) => Source::Bytes(self.card.ssr.to_vec()),
            (false, 6) => {
                let mut status = vec![0u8; 64];
                status[12..14].copy_from_slice(&self.card.switch_support.to_be_bytes());
                let function = (argument & 0xf) as u16;
                let selected = if function == 0xf {
                    0
                } else if self.card.switch_support & (1 << function) != 0 {
                    function as u8
                } else {
                    0xf
                };
                status[16] = selected;
                Source::Bytes(status)
            }
            (false, 19) => {
                self.tuning_commands += 1;
                let control2 = self.register(offsets::AUTO_CMD_ERROR_HOST_CONTROL2);
                if self.tuning_commands >= 3 && control2 & (1 << 22) != 0 {
                    self.registers[offsets::AUTO_CMD_ERROR_HOST_CONTROL2 / 4] =
                        (control2 & !(1 << 22)) | (1 << 23);
                }
                Source::Bytes(vec![0x5a; 64])
            }
            (false, 17 | 18) => {
                let sector =
                    if self.card.block_addressed { u64::from(argument) } else { u64::from(argument) / 512 };
                if let Some(count) = self.block_count_from_cmd23.take() {
                    blocks = count;
                }
                Source::Sectors { first_sector: sector }
            }
            _ => return,
        };
        self.state = State::SendingData;
        let transfer = Transfer {
            source,
            block_bytes,
            blocks,
            blocks_sent: 0,
            auto_cmd12: multi && (mode >> 2) & 0b11 == 1,
            command_index: index,
        };
        let adma_capable = self.register(offsets::CAPABILITIES) & (1 << 19) != 0;
        let adma_selected = (self.register(offsets::HOST_CONTROL_POWER) >> 3) & 0b11 >= 2;
        self.transfer = Some(transfer);
        if mode & 1 != 0 && adma_capable && adma_selected {
            self.run_adma(platform);
        } else {
            self.load_next_block();
        }
    }

    fn block_bytes_at(&self, transfer: &Transfer, block: u32) -> Vec<u8> {
        match &transfer.source {
            Source::Bytes(bytes) => bytes.clone(),
            Source::Sectors { first_sector } => {
                let mut out = vec![0u8; transfer.block_bytes];
                for (i, chunk) in out.chunks_mut(512).enumerate() {
                    let mut sector = [0u8; 512];
                    blockdev::pattern::fill_sector(first_sector + u64::from(block) + i as u64, &mut sector);
                    chunk.copy_from_slice(&sector[..chunk.len()]);
                }
                out
            }
        }
    }

    /// Loads the next PIO block into the buffer, or finishes the transfer.
    fn load_next_block(&mut self) {
        let Some(transfer) = self.transfer.clone() else {
            return;
        };
        if transfer.blocks_sent == transfer.blocks {
            self.finish_transfer(&transfer);
            return;
        }
        if let Some(injection) = self.take_injection(transfer.command_index, true) {
            match injection.at {
                InjectAt::Data { after_blocks } if after_blocks <= transfer.blocks_sent => {
                    self.raise(injection.error_bits);
                    self.transfer = None;
                    return;
                }
                InjectAt::Stall { after_blocks } if after_blocks <= transfer.blocks_sent => {
                    self.stalled = true;
                    self.transfer = None;
                    return;
                }
                _ => {
                    // Not yet: put it back for a later block.
                    if let Some(i) = self
                        .injections
                        .iter_mut()
                        .find(|i| i.command_index == injection.command_index && i.at == injection.at)
                    {
                        i.times += 1;
                    }
                }
            }
        }
        let bytes = self.block_bytes_at(&transfer, transfer.blocks_sent);
        for word in bytes.chunks(4) {
            let mut padded = [0u8; 4];
            padded[..word.len()].copy_from_slice(word);
            self.buffer.push_back(u32::from_le_bytes(padded));
        }
        if let Some(t) = self.transfer.as_mut() {
            t.blocks_sent += 1;
        }
        self.raise(interrupt::BUFFER_READ_READY);
    }

    fn finish_transfer(&mut self, transfer: &Transfer) {
        self.transfer = None;
        self.state = State::Transfer;
        let _ = transfer.auto_cmd12;
        self.raise(interrupt::TRANSFER_COMPLETE);
    }

    /// Walks the ADMA2 descriptor table (32- or 64-bit per DMA Select) and writes the data.
    fn run_adma(&mut self, platform: &TestPlatform) {
        let Some(transfer) = self.transfer.clone() else {
            return;
        };
        self.dma_transfers += 1;
        let wide = (self.register(offsets::HOST_CONTROL_POWER) >> 3) & 0b11 == 3;
        let mut descriptor = u64::from(self.register(offsets::ADMA_SYSTEM_ADDRESS));
        if wide {
            descriptor |= u64::from(self.register(offsets::ADMA_SYSTEM_ADDRESS_HIGH)) << 32;
        }
        let total = transfer.block_bytes * transfer.blocks as usize;
        let mut data = Vec::with_capacity(total);
        for block in 0..transfer.blocks {
            data.extend(self.block_bytes_at(&transfer, block));
        }
        if let Some(injection) = self.take_injection(transfer.command_index, true) {
            if let InjectAt::Data { .. } = injection.at {
                self.raise(injection.error_bits);
                self.transfer = None;
                return;
            }
            self.stalled = true;
            self.transfer = None;
            return;
        }
        let stride = if wide { 12 } else { 8 };
        let mut written = 0usize;
        for _ in 0..4096 {
            let Some(pointer) = platform.cpu_pointer(descriptor, stride) else {
                self.registers[offsets::ADMA_ERROR_STATUS / 4] = 1;
                self.raise(interrupt::ADMA);
                return;
            };
            let mut entry = [0u8; 12];
            // SAFETY: test memory, in range (checked by cpu_pointer).
            unsafe { core::ptr::copy_nonoverlapping(pointer, entry.as_mut_ptr(), stride) };
            let attributes = u32::from_le_bytes(entry[0..4].try_into().unwrap());
            let length = (attributes >> 16) as usize;
            let address = if wide {
                u64::from_le_bytes(entry[4..12].try_into().unwrap())
            } else {
                u64::from(u32::from_le_bytes(entry[4..8].try_into().unwrap()))
            };
            assert_eq!(attributes & 1, 1, "descriptor not valid");
            assert_eq!((attributes >> 4) & 0b11, 0b10, "descriptor action is not Tran");
            let length = if length == 0 { 65_536 } else { length };
            let chunk = length.min(total - written);
            let Some(target) = platform.cpu_pointer(address, chunk) else {
                self.registers[offsets::ADMA_ERROR_STATUS / 4] = 2;
                self.raise(interrupt::ADMA);
                return;
            };
            // SAFETY: test memory, in range (checked by cpu_pointer).
            unsafe { core::ptr::copy_nonoverlapping(data[written..].as_ptr(), target, chunk) };
            written += chunk;
            if attributes & 0b10 != 0 {
                break;
            }
            descriptor += stride as u64;
        }
        assert_eq!(written, total, "descriptors do not cover the transfer");
        self.finish_transfer(&transfer);
    }

    fn respond(&mut self, index: u8, argument: u32, application: bool) -> Option<Response> {
        let card = self.card.clone();
        match (application, index) {
            (_, 0) => {
                self.state = State::Idle;
                self.acmd41_polls = 0;
                None
            }
            (false, 8) => card.answers_cmd8.then_some(Response::Short(argument & 0xfff)),
            (_, 55) => {
                let status = self.card_status() | 1 << 5;
                self.app_command = true;
                Some(Response::Short(status))
            }
            (true, 41) => {
                self.acmd41_polls += 1;
                let mut value = 0x00ff_8000;
                if self.acmd41_polls > card.busy_polls {
                    value |= ocr::POWER_UP_DONE;
                    if card.block_addressed {
                        value |= ocr::CARD_CAPACITY_STATUS;
                    }
                    if card.accepts_1v8 && argument & ocr::SWITCHING_TO_1V8_REQUEST != 0 {
                        value |= ocr::SWITCHING_TO_1V8_ACCEPTED;
                    }
                    self.state = State::Ready;
                }
                Some(Response::Short(value))
            }
            (false, 11) => {
                if !card.accepts_1v8 {
                    return None;
                }
                self.dat_low = true;
                Some(Response::Short(self.card_status()))
            }
            (false, 2) => {
                self.state = State::Identification;
                Some(Response::Long(card.cid))
            }
            (false, 3) => {
                self.state = State::StandBy;
                Some(Response::Short(u32::from(card.rca) << 16 | 0x0500))
            }
            (false, 9) if argument >> 16 == u32::from(card.rca) => Some(Response::Long(card.csd)),
            (false, 7) if argument >> 16 == u32::from(card.rca) => {
                let status = self.card_status();
                self.state = State::Transfer;
                Some(Response::Short(status))
            }
            (false, 13) => Some(Response::Short(self.card_status())),
            (false, 12) => {
                if self.state != State::SendingData {
                    self.pending_errors |= 1 << 22;
                    return None;
                }
                let status = self.card_status();
                self.state = State::Transfer;
                self.transfer = None;
                self.buffer.clear();
                Some(Response::Short(status))
            }
            (false, 16) => Some(Response::Short(self.card_status())),
            (false, 23) if card.accepts_cmd23 => {
                self.block_count_from_cmd23 = Some(argument);
                Some(Response::Short(self.card_status()))
            }
            (false, 17 | 18) => {
                let sector =
                    if card.block_addressed { u64::from(argument) } else { u64::from(argument) / 512 };
                if sector * 512 >= card.capacity_bytes {
                    return Some(Response::Short(self.card_status() | 1 << 31));
                }
                Some(Response::Short(self.card_status()))
            }
            (false, 6 | 19) | (true, 6 | 13 | 51) => Some(Response::Short(self.card_status())),
            _ => {
                self.pending_errors |= 1 << 22;
                None
            }
        }
    }
}

enum Response {
    Short(u32),
    Long(u128),
}

impl RegisterIo for SimHost<'_> {
    fn read32(&self, offset_bytes: usize) -> u32 {
        let mut state = self.state.borrow_mut();
        match offset_bytes {
            offsets::PRESENT_STATE => state.present_state(),
            offsets::BUFFER_DATA_PORT => {
                let word = state.buffer.pop_front().unwrap_or(0);
                if state.buffer.is_empty() {
                    state.load_next_block();
                }
                word
            }
            _ => state.register(offset_bytes),
        }
    }

    fn write32(&self, offset_bytes: usize, value: u32) {
        let now = self.platform.now_ticks();
        let mut state = self.state.borrow_mut();
        if offset_bytes != offsets::BUFFER_DATA_PORT {
            let clock = state.sd_clock_hz();
            if clock <= 400_000 {
                if let Some(last) = state.last_write_ns {
                    state.min_slow_write_gap_ns = state.min_slow_write_gap_ns.min(now - last);
                }
            }
            state.last_write_ns = Some(now);
        }
        let index = offset_bytes / 4;
        match offset_bytes {
            offsets::SDMA_ADDRESS => state.sdma_address_written = true,
            offsets::TRANSFER_MODE_COMMAND => {
                state.registers[index] = value;
                drop(state);
                self.state.borrow_mut().execute(self.platform);
            }
            offsets::CLOCK_TIMEOUT_RESET => {
                let resets = value >> 24;
                let mut value = value & 0x00ff_ffff;
                if resets & 1 != 0 {
                    let keep =
                        [offsets::CAPABILITIES, offsets::CAPABILITIES_HIGH, offsets::SLOT_STATUS_VERSION];
                    for (i, register) in state.registers.iter_mut().enumerate() {
                        if !keep.contains(&(i * 4)) {
                            *register = 0;
                        }
                    }
                    state.buffer.clear();
                    state.transfer = None;
                    value = 0;
                }
                if resets & 0b110 != 0 {
                    state.line_resets += 1;
                    state.buffer.clear();
                    state.transfer = None;
                    state.stalled = false;
                }
                if value & 1 != 0 {
                    value |= 0b10;
                }
                state.registers[index] = value;
                if state.dat_low
                    && value & 0b100 != 0
                    && state.register(offsets::AUTO_CMD_ERROR_HOST_CONTROL2) & (1 << 19) != 0
                {
                    state.dat_low = false;
                }
            }
            offsets::INTERRUPT_STATUS => {
                let status = state.register(offsets::INTERRUPT_STATUS) & !value;
                let status =
                    if status & 0xffff_0000 == 0 { status & !interrupt::ERROR_INTERRUPT } else { status };
                state.registers[index] = status;
            }
            offsets::AUTO_CMD_ERROR_HOST_CONTROL2 => {
                if value & (1 << 19) != 0 {
                    state.signal_1v8_requested = true;
                }
                state.registers[index] = value & 0xffff_0000;
            }
            offsets::CAPABILITIES | offsets::CAPABILITIES_HIGH | offsets::SLOT_STATUS_VERSION => {}
            _ => state.registers[index] = value,
        }
    }
}
