//! A simulated BCM2835 sdhost with a simulated SD card, for host tests: the registers of
//! docs/aarch32-pis.md §7 (QEMU's `hw/sd/bcm2835_sdhost.c` for the behaviour it models), a
//! 16-word FIFO refilled as it is read, and the simulated card both hosts share ([`SimCard`]).
//!
//! At least as strict as the hardware where the driver's correctness depends on it: NEW stays
//! set for a few polls and a command written meanwhile is lost; the block size and count must be
//! written before a data command (SDHBLC holds 9 bits, sizes are powers of two); a long response
//! with busy is refused; nothing answers while the card has no power; identification above
//! 400 kHz gets no answer; without SLOW_CARD only the divider's low 3 bits count in data mode, and
//! data clocked faster than the card's timing allows fails its CRC; an open-ended CMD18 leaves
//! the state machine in READWAIT until CMD12; reading an empty FIFO is a FIFO error.
#![forbid(unsafe_code)]

extern crate std;

use super::regs::{offsets, FIFO_WORDS, MAX_BLOCKS_PER_COMMAND};
use crate::sd::card_registers::ocr;
use crate::sd::sim_card::SimCard;
use core::cell::RefCell;
use hal::mmio::RegisterIo;
use std::collections::VecDeque;
use std::vec::Vec;

// The register bits as the model keeps them, written out here from QEMU's
// `hw/sd/bcm2835_sdhost.c` and Linux's `drivers/mmc/host/bcm2835.c` rather than taken from the
// driver's `regs.rs`, so that a wrong bit there is not mirrored here.
pub mod cmd {
    pub const INDEX_MASK: u32 = 0x3f;
    pub const READ: u32 = 1 << 6;
    pub const LONG_RESPONSE: u32 = 1 << 9;
    pub const BUSY_WAIT: u32 = 1 << 11;
    pub const FAIL: u32 = 1 << 14;
    pub const NEW: u32 = 1 << 15;
}

pub mod status {
    pub const DATA_FLAG: u32 = 1 << 0;
    pub const FIFO_ERROR: u32 = 1 << 3;
    pub const CRC16_ERROR: u32 = 1 << 5;
    pub const COMMAND_TIMEOUT: u32 = 1 << 6;
    pub const DATA_TIMEOUT: u32 = 1 << 7;
    pub const BUSY_INTERRUPT: u32 = 1 << 10;
}

pub mod config {
    /// The 4-bit card bus.
    pub const WIDE_EXTERNAL_BUS: u32 = 1 << 2;
    /// Use the whole divider in data mode too (without it only its low 3 bits count).
    pub const SLOW_CARD: u32 = 1 << 3;
    /// Raise BUSY_INTERRUPT when a BUSY_WAIT command's busy ends.
    pub const BUSY_INTERRUPT_ENABLE: u32 = 1 << 10;
}

pub mod debug_mode {
    pub const STATE_MASK: u32 = 0xf;
    pub const STATE_DATA: u32 = 0x1;
    pub const STATE_READ_DATA: u32 = 0x2;
    pub const STATE_READ_WAIT: u32 = 0x4;
    pub const FIFO_WORDS_SHIFT: u32 = 4;
    pub const FIFO_WORDS_MASK: u32 = 0x1f;
    pub const WRITE_THRESHOLD_SHIFT: u32 = 9;
    pub const READ_THRESHOLD_SHIFT: u32 = 14;
    pub const THRESHOLD_MASK: u32 = 0x1f;
    pub const FORCE_DATA_MODE: u32 = 1 << 19;
}

/// Polls of SDCMD during which NEW stays set after a command is written.
const COMMAND_POLLS: u32 = 2;
/// SDHSTS reads an R1b command's busy lasts before BUSY_IRPT is raised.
const BUSY_POLLS: u32 = 3;

/// An error to inject into a data phase: the host status bits, after this many words.
#[derive(Clone, Copy, Debug)]
pub struct DataInjection {
    pub command_index: u8,
    pub after_words: usize,
    pub status_bits: u32,
    pub times: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CardState {
    Idle,
    Ready,
    Identification,
    StandBy,
    Transfer,
    SendingData,
}

pub struct SimSdhostState {
    pub card: SimCard,
    pub core_clock_hz: u32,
    command: u32,
    argument: u32,
    pub divider: u32,
    /// SDTOUT: SD clocks a read may wait for its data.
    pub data_timeout_clocks: u32,
    response: [u32; 4],
    pub host_status: u32,
    pub power: u32,
    pub debug_mode: u32,
    pub host_config: u32,
    block_bytes: u32,
    block_count: u32,
    polls_left: u32,
    /// SDHSTS reads until the card releases DAT0 after an R1b command.
    busy_polls_left: u32,
    fifo: VecDeque<u32>,
    /// Bytes of the running read not yet in the FIFO.
    pending: VecDeque<u8>,
    /// The running read is an open-ended CMD18.
    open_ended: bool,
    card_state: CardState,
    app_command: bool,
    acmd41_polls: u32,
    block_count_from_cmd23: Option<u32>,
    high_speed: bool,
    pub data_injection: Option<DataInjection>,
    words_pushed: usize,
    running_command: u8,
    /// Every command seen: (index, argument, SD clock in Hz).
    pub log: Vec<(u8, u32, u32)>,
    /// Rules the driver broke, in order.
    pub violations: Vec<&'static str>,
}

pub struct SimSdhost {
    pub state: RefCell<SimSdhostState>,
}

impl SimSdhost {
    /// A controller clocked by `core_clock_hz`, `card` in the slot, registers as at reset (QEMU:
    /// SDEDM 0xC60F).
    pub fn new(core_clock_hz: u32, card: SimCard) -> Self {
        SimSdhost {
            state: RefCell::new(SimSdhostState {
                card,
                core_clock_hz,
                command: 0,
                argument: 0,
                divider: 0,
                data_timeout_clocks: 0,
                response: [0; 4],
                host_status: 0,
                power: 0,
                debug_mode: 0xc60f,
                host_config: 0,
                block_bytes: 0,
                block_count: 0,
                polls_left: 0,
                busy_polls_left: 0,
                fifo: VecDeque::new(),
                pending: VecDeque::new(),
                open_ended: false,
                card_state: CardState::Idle,
                app_command: false,
                acmd41_polls: 0,
                block_count_from_cmd23: None,
                high_speed: false,
                data_injection: None,
                words_pushed: 0,
                running_command: 0,
                log: Vec::new(),
                violations: Vec::new(),
            }),
        }
    }

    pub fn command_indices(&self) -> Vec<u8> {
        self.state.borrow().log.iter().map(|entry| entry.0).collect()
    }
}

impl SimSdhostState {
    /// SDCLK as the card sees it: the whole divider, or in data mode without SLOW_CARD only its
    /// low 3 bits.
    fn sd_clock_hz(&self) -> u32 {
        let data_mode = matches!(self.card_state, CardState::Transfer | CardState::SendingData);
        let divider = if data_mode && self.host_config & config::SLOW_CARD == 0 {
            self.divider & 7
        } else {
            self.divider
        };
        self.core_clock_hz / (divider + 2)
    }

    fn card_status(&self) -> u32 {
        let state = match self.card_state {
            CardState::Idle => 0,
            CardState::Ready => 1,
            CardState::Identification => 2,
            CardState::StandBy => 3,
            CardState::Transfer => 4,
            CardState::SendingData => 5,
        };
        (state << 9) | (1 << 8) | if self.app_command { 1 << 5 } else { 0 }
    }

    fn fail(&mut self) {
        self.command |= cmd::FAIL;
        self.host_status |= status::COMMAND_TIMEOUT;
    }

    fn execute(&mut self, value: u32) {
        let index = (value & cmd::INDEX_MASK) as u8;
        self.command = value;
        self.polls_left = COMMAND_POLLS;
        self.log.push((index, self.argument, self.sd_clock_hz()));
        if self.busy_polls_left > 0 {
            self.violations.push("a command while the card still signals busy after an R1b command");
        }
        if value & cmd::LONG_RESPONSE != 0 && value & cmd::BUSY_WAIT != 0 {
            self.violations.push("a 136-bit response with busy wait (the hardware refuses it)");
            return self.fail();
        }
        if self.power & 1 == 0 || !self.card.present {
            return self.fail();
        }
        let identifying =
            matches!(self.card_state, CardState::Idle | CardState::Ready | CardState::Identification);
        if identifying && self.sd_clock_hz() > 400_000 {
            return self.fail();
        }
        let application = core::mem::take(&mut self.app_command);
        let Some(response) = self.respond(index, application) else {
            return self.fail();
        };
        match response {
            Answer::Short(word) => self.response = [word, 0, 0, 0],
            Answer::Long(register) => {
                self.response = [
                    register as u32,
                    (register >> 32) as u32,
                    (register >> 64) as u32,
                    (register >> 96) as u32,
                ]
            }
        }
        if matches!(index, 7 | 12) && !application {
            if value & cmd::BUSY_WAIT == 0 {
                self.violations.push("an R1b command without BUSY_WAIT");
            } else {
                // The card holds DAT0 low for a while; BUSY_IRPT marks the end (if enabled).
                self.busy_polls_left = BUSY_POLLS;
            }
        }
        if value & cmd::READ != 0 {
            self.start_read(index, application);
        }
    }

    fn respond(&mut self, index: u8, application: bool) -> Option<Answer> {
        let card = self.card.clone();
        let argument = self.argument;
        let for_us = argument >> 16 == u32::from(card.rca);
        match (application, index) {
            (_, 0) => {
                self.card_state = CardState::Idle;
                self.acmd41_polls = 0;
                self.high_speed = false;
                Some(Answer::Short(0))
            }
            (false, 8) => card.answers_cmd8.then_some(Answer::Short(argument & 0xfff)),
            (_, 55) => {
                self.app_command = true;
                Some(Answer::Short(self.card_status()))
            }
            (true, 41) => {
                self.acmd41_polls += 1;
                let mut value = 0x00ff_8000;
                if self.acmd41_polls > card.busy_polls {
                    value |= ocr::POWER_UP_DONE;
                    if card.block_addressed {
                        value |= ocr::CARD_CAPACITY_STATUS;
                    }
                    self.card_state = CardState::Ready;
                }
                Some(Answer::Short(value))
            }
            (false, 2) if self.card_state == CardState::Ready => {
                self.card_state = CardState::Identification;
                Some(Answer::Long(card.cid))
            }
            (false, 3) => {
                self.card_state = CardState::StandBy;
                Some(Answer::Short(u32::from(card.rca) << 16 | 0x0500))
            }
            (false, 9) if for_us => Some(Answer::Long(card.csd)),
            (false, 7) if for_us => {
                let status = self.card_status();
                self.card_state = CardState::Transfer;
                Some(Answer::Short(status))
            }
            (false, 13) => Some(Answer::Short(self.card_status())),
            (false, 12) if self.card_state == CardState::SendingData => {
                let status = self.card_status();
                self.card_state = CardState::Transfer;
                self.pending.clear();
                self.fifo.clear();
                self.open_ended = false;
                self.set_state_machine(debug_mode::STATE_DATA);
                Some(Answer::Short(status))
            }
            (false, 16) => Some(Answer::Short(self.card_status())),
            (false, 23) if card.accepts_cmd23 && self.card_state == CardState::Transfer => {
                self.block_count_from_cmd23 = Some(argument);
                Some(Answer::Short(self.card_status()))
            }
            (false, 17 | 18) if self.card_state == CardState::Transfer => {
                let sector =
                    if card.block_addressed { u64::from(argument) } else { u64::from(argument) / 512 };
                let out_of_range = if sector * 512 >= card.capacity_bytes { 1 << 31 } else { 0 };
                Some(Answer::Short(self.card_status() | out_of_range))
            }
            (false, 6) | (true, 6 | 13 | 51) if self.card_state == CardState::Transfer => {
                if !application && index == 6 && argument & 0x8000_0000 != 0 && argument & 0xf == 1 {
                    self.high_speed = true;
                }
                Some(Answer::Short(self.card_status()))
            }
            _ => None,
        }
    }

    fn set_state_machine(&mut self, state: u32) {
        self.debug_mode = (self.debug_mode & !debug_mode::STATE_MASK) | state;
    }

    fn start_read(&mut self, index: u8, application: bool) {
        let bytes = self.block_bytes as usize * self.block_count as usize;
        if bytes == 0 {
            self.violations.push("a data command without SDHBCT and SDHBLC written first");
            return;
        }
        // A card may take up to 100 ms to start sending (SD Physical Layer Specification
        // §4.6.2.1): a shorter SDTOUT ends the read with a data timeout before any data.
        if u64::from(self.data_timeout_clocks) < u64::from(self.sd_clock_hz()) / 10 {
            self.violations.push("SDTOUT shorter than the 100 ms read access time");
            self.host_status |= status::DATA_TIMEOUT;
            return;
        }
        let data: Vec<u8> = match (application, index) {
            (true, 51) => self.card.scr.to_vec(),
            (true, 13) => self.card.ssr.to_vec(),
            (false, 6) => {
                let mut status = std::vec![0u8; 64];
                status[12..14].copy_from_slice(&self.card.switch_support.to_be_bytes());
                status[16] = if self.argument & 0x8000_0000 != 0 { (self.argument & 0xf) as u8 } else { 0 };
                status
            }
            (false, 17 | 18) => self.sectors(index),
            _ => Vec::new(),
        };
        self.open_ended = index == 18 && self.block_count_from_cmd23.take().is_none();
        self.pending = data.into_iter().take(bytes).collect();
        self.words_pushed = 0;
        self.running_command = index;
        self.card_state = if matches!(index, 17 | 18) { CardState::SendingData } else { CardState::Transfer };
        self.set_state_machine(debug_mode::STATE_READ_DATA);
        self.refill();
    }

    fn sectors(&self, index: u8) -> Vec<u8> {
        let first =
            if self.card.block_addressed { u64::from(self.argument) } else { u64::from(self.argument) / 512 };
        let count = if index == 17 { 1 } else { u64::from(self.block_count) };
        let mut out = Vec::new();
        for sector in first..first + count {
            let mut bytes = [0u8; 512];
            blockdev::pattern::fill_sector(sector, &mut bytes);
            out.extend_from_slice(&bytes);
        }
        out
    }

    /// The timing's clock limit: data faster than this fails its CRC.
    fn data_clock_limit_hz(&self) -> u32 {
        if self.high_speed {
            50_000_000
        } else {
            25_000_000
        }
    }

    /// An injected error strikes once the FIFO has taken `after_words` of the command's data:
    /// the status bit is set and no more data arrives; what the FIFO holds stays readable.
    fn strike_injection(&mut self) {
        let Some(injection) = self.data_injection else {
            return;
        };
        if injection.command_index == self.running_command
            && self.words_pushed >= injection.after_words
            && injection.times > 0
            && !self.pending.is_empty()
        {
            self.host_status |= injection.status_bits;
            self.data_injection = Some(DataInjection { times: injection.times - 1, ..injection });
            self.pending.clear();
        }
    }

    fn refill(&mut self) {
        self.strike_injection();
        while self.fifo.len() < FIFO_WORDS as usize && !self.pending.is_empty() {
            let mut word = [0u8; 4];
            for byte in word.iter_mut() {
                *byte = self.pending.pop_front().unwrap_or(0);
            }
            self.fifo.push_back(u32::from_le_bytes(word));
            self.words_pushed += 1;
            self.host_status |= status::DATA_FLAG;
            self.strike_injection();
        }
        if self.pending.is_empty() && self.fifo.is_empty() {
            if self.open_ended {
                // The card goes on sending until CMD12; the block waits for room.
                self.set_state_machine(debug_mode::STATE_READ_WAIT);
            } else {
                self.set_state_machine(debug_mode::STATE_DATA);
                if self.card_state == CardState::SendingData {
                    self.card_state = CardState::Transfer;
                }
            }
        }
        let words = (self.fifo.len() as u32) << debug_mode::FIFO_WORDS_SHIFT;
        self.debug_mode =
            (self.debug_mode & !(debug_mode::FIFO_WORDS_MASK << debug_mode::FIFO_WORDS_SHIFT)) | words;
    }

    fn read_data(&mut self) -> u32 {
        if self.sd_clock_hz() > self.data_clock_limit_hz() && self.card_state == CardState::SendingData {
            self.host_status |= status::CRC16_ERROR;
        }
        let Some(word) = self.fifo.pop_front() else {
            self.violations.push("SDDATA read with the FIFO empty");
            self.host_status |= status::FIFO_ERROR;
            return 0;
        };
        self.refill();
        word
    }
}

enum Answer {
    Short(u32),
    Long(u128),
}

impl RegisterIo for SimSdhost {
    fn read32(&self, offset_bytes: usize) -> u32 {
        let mut state = self.state.borrow_mut();
        match offset_bytes {
            offsets::COMMAND => {
                if state.polls_left > 0 {
                    state.polls_left -= 1;
                    return state.command;
                }
                state.command & !cmd::NEW
            }
            offsets::ARGUMENT => state.argument,
            offsets::CLOCK_DIVIDER => state.divider,
            0x10 | 0x14 | 0x18 | 0x1c => state.response[(offset_bytes - offsets::RESPONSE0) / 4],
            offsets::HOST_STATUS => {
                if state.busy_polls_left > 0 {
                    state.busy_polls_left -= 1;
                    if state.busy_polls_left == 0 && state.host_config & config::BUSY_INTERRUPT_ENABLE != 0 {
                        state.host_status |= status::BUSY_INTERRUPT;
                    }
                }
                state.host_status
            }
            offsets::POWER => state.power,
            offsets::DEBUG_MODE => state.debug_mode,
            offsets::HOST_CONFIG => state.host_config,
            offsets::BLOCK_BYTES => state.block_bytes,
            offsets::DATA => state.read_data(),
            offsets::BLOCK_COUNT => state.block_count,
            _ => panic!("sdhost read of an unknown register {offset_bytes:#x}"),
        }
    }

    fn write32(&self, offset_bytes: usize, value: u32) {
        let mut state = self.state.borrow_mut();
        match offset_bytes {
            offsets::COMMAND => {
                if value & cmd::NEW == 0 {
                    state.command = value;
                } else if state.polls_left > 0 {
                    state.violations.push("SDCMD written while the previous command still had NEW set");
                } else if state.debug_mode & debug_mode::STATE_MASK == debug_mode::STATE_READ_WAIT {
                    // Linux's bcm2835_finish_data forces data mode before the next command.
                    state.violations.push("SDCMD written while the state machine waits for read data");
                    state.execute(value);
                } else {
                    state.execute(value);
                }
            }
            offsets::ARGUMENT => state.argument = value,
            offsets::TIMEOUT => state.data_timeout_clocks = value,
            offsets::CLOCK_DIVIDER => state.divider = value & 0x7ff,
            offsets::HOST_STATUS => state.host_status &= !value,
            offsets::POWER => state.power = value & 1,
            offsets::DEBUG_MODE => {
                let keep =
                    debug_mode::STATE_MASK | (debug_mode::FIFO_WORDS_MASK << debug_mode::FIFO_WORDS_SHIFT);
                let forced = value & debug_mode::FORCE_DATA_MODE != 0;
                state.debug_mode = (state.debug_mode & keep) | (value & !keep & !debug_mode::FORCE_DATA_MODE);
                if forced {
                    state.set_state_machine(debug_mode::STATE_DATA);
                }
            }
            offsets::HOST_CONFIG => state.host_config = value,
            offsets::BLOCK_BYTES => {
                if value != 0 && !value.is_power_of_two() {
                    state.violations.push("a block size that is not a power of two");
                }
                state.block_bytes = value;
            }
            offsets::BLOCK_COUNT => {
                if value > MAX_BLOCKS_PER_COMMAND {
                    state.violations.push("a block count wider than SDHBLC's 9 bits");
                }
                state.block_count = value & 0x1ff;
            }
            offsets::DATA => state.violations.push("SDDATA written: the driver never writes"),
            _ => panic!("sdhost write of an unknown register {offset_bytes:#x}"),
        }
    }
}
