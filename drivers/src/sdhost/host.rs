//! The BCM2835 sdhost controller: reset, clock, command issue and completion, PIO reads from
//! its FIFO, and recovery, in the order Linux's `drivers/mmc/host/bcm2835.c` uses them
//! (docs/aarch32-pis.md §7). The card protocol on top is `crate::sd`'s, through [`CardBus`].
#![forbid(unsafe_code)]

use super::clock::SdhostClock;
use super::regs::{offsets, CLEAR_ALL, ERRORS, FIFO_WORDS, MAX_DIVIDER, THRESHOLD_WORDS};
use super::regs::{COMMAND, DEBUG_MODE, HOST_CONFIG, HOST_STATUS};
use crate::sd::bus::{prefix_application_command, BusMode, BusWidth, CardBus, Response};
use crate::sd::bus::{BLOCK_TIMEOUT_US, BUSY_TIMEOUT_US, IDENTIFICATION_CLOCK_HZ};
use crate::sd::command::{Command, DataPhase, ResponseKind};
use crate::sd::error::{CommandFailure, FailureKind, SdError};
use crate::sd::timing::Timing;
use hal::dma::PioTarget;
use hal::mmio::RegisterIo;
use hal::platform::{Deadline, Platform};
use tock_registers::fields::FieldValue;
use tock_registers::LocalRegisterCopy;
use DEBUG_MODE::STATE;

/// How long NEW may stay set: Linux waits up to 100 ms for a command to finish.
pub const COMMAND_TIMEOUT_US: u64 = 100_000;
/// Power settling on each side of the VDD switch at reset (Linux: 20 ms).
pub const POWER_SETTLE_US: u64 = 20_000;
/// The data timeout register in SD clocks: half a second (Linux: clock / 2).
fn timeout_clocks(sd_clock_hz: u32) -> u32 {
    sd_clock_hz / 2
}

/// SDCDIV for the fastest SDCLK not above `target_hz` from `core_hz` (SDCLK = core / (div + 2)),
/// and the frequency it gives. Below what the 11-bit divider reaches, the slowest.
pub fn divider_for(core_hz: u32, target_hz: u32) -> (u32, u32) {
    let target_hz = target_hz.max(1);
    let divisor = core_hz.div_ceil(target_hz).max(2);
    let divider = (divisor - 2).min(MAX_DIVIDER);
    (divider, core_hz / (divider + 2))
}

/// One sdhost controller.
pub struct SdhostHost<'p, R: RegisterIo, P: Platform> {
    registers: R,
    platform: &'p P,
    clock: SdhostClock<'p>,
    host_config: LocalRegisterCopy<u32, HOST_CONFIG::Register>,
    sd_clock_hz: u32,
    bus_width_bits: u8,
}

impl<'p, R: RegisterIo, P: Platform> SdhostHost<'p, R, P> {
    /// `clock` says who sets the SD clock: the firmware, or the driver dividing the VPU core
    /// clock (mailbox clock 4; [`SdhostClock::probe`]).
    pub fn new(registers: R, platform: &'p P, clock: SdhostClock<'p>) -> Self {
        SdhostHost {
            registers,
            platform,
            clock,
            host_config: LocalRegisterCopy::new(0),
            sd_clock_hz: 0,
            bus_width_bits: 1,
        }
    }

    pub fn platform(&self) -> &'p P {
        self.platform
    }

    pub fn clock(&self) -> SdhostClock<'p> {
        self.clock
    }

    pub fn read(&self, offset: usize) -> u32 {
        self.registers.read32(offset)
    }

    pub fn write(&self, offset: usize, value: u32) {
        self.registers.write32(offset, value)
    }

    /// Linux's `bcm2835_reset_internal`: power off, every register cleared, status cleared,
    /// both FIFO thresholds at 4 words ("due to silicon bug"), 20 ms, power on, 20 ms; then the
    /// host configuration (internal wide bus, the whole divider in data mode, busy signalled in
    /// the status) and the identification clock.
    pub fn initialize(&mut self) -> Result<(), SdError> {
        self.write(offsets::POWER, 0);
        for offset in [offsets::COMMAND, offsets::ARGUMENT, offsets::HOST_CONFIG] {
            self.write(offset, 0);
        }
        // SDCDIV is the firmware's once it sets the clock.
        if let SdhostClock::Divider { .. } = self.clock {
            self.write(offsets::CLOCK_DIVIDER, 0);
        }
        self.write(offsets::TIMEOUT, 0xf0_0000);
        self.write(offsets::BLOCK_BYTES, 0);
        self.write(offsets::BLOCK_COUNT, 0);
        self.registers.write(HOST_STATUS, CLEAR_ALL);
        self.registers.modify(
            DEBUG_MODE,
            DEBUG_MODE::WRITE_THRESHOLD.val(THRESHOLD_WORDS)
                + DEBUG_MODE::READ_THRESHOLD.val(THRESHOLD_WORDS)
                + DEBUG_MODE::FORCE_DATA_MODE::CLEAR,
        );
        self.platform.delay_us(POWER_SETTLE_US);
        self.write(offsets::POWER, 1);
        self.platform.delay_us(POWER_SETTLE_US);
        self.host_config.write(
            HOST_CONFIG::WIDE_INTERNAL_BUS::SET
                + HOST_CONFIG::SLOW_CARD::SET
                + HOST_CONFIG::BUSY_INTERRUPT_ENABLE::SET,
        );
        self.registers.write_value(HOST_CONFIG, self.host_config);
        self.bus_width_bits = 1;
        self.set_clock(IDENTIFICATION_CLOCK_HZ)?;
        Ok(())
    }

    /// SDCLK at the fastest frequency not above `target_hz` (set by the firmware, or by the
    /// driver's divider), with a half-second data timeout.
    pub fn set_clock(&mut self, target_hz: u32) -> Result<u32, SdError> {
        let sd_clock_hz = match self.clock {
            SdhostClock::Firmware(firmware) => {
                SdhostClock::set_by_firmware(firmware, target_hz).map_err(|_| SdError::UnusableHost {
                    reason: "the firmware did not answer SET_SDHOST_CLOCK",
                    value: target_hz,
                })?
            }
            SdhostClock::Divider { core_hz, .. } => {
                let (divider, sd_clock_hz) = divider_for(core_hz, target_hz);
                self.write(offsets::CLOCK_DIVIDER, divider);
                sd_clock_hz
            }
        };
        self.write(offsets::TIMEOUT, timeout_clocks(sd_clock_hz));
        self.sd_clock_hz = sd_clock_hz;
        Ok(sd_clock_hz)
    }

    /// SDEDM bits 8:4: words waiting in the FIFO.
    pub fn fifo_words(&self) -> u32 {
        self.registers.read(DEBUG_MODE).read(DEBUG_MODE::FIFO_WORDS)
    }

    /// The state machine's state (`None` for a state this driver does not name).
    fn state_machine(&self) -> Option<DEBUG_MODE::STATE::Value> {
        self.registers.read(DEBUG_MODE).read_as_enum(DEBUG_MODE::STATE)
    }

    /// A failure record: the host status in the interrupt-status field, SDEDM in the
    /// present-state field.
    pub fn failure(&self, command: Command, kind: FailureKind, host_status: u32) -> CommandFailure {
        CommandFailure {
            command,
            kind,
            interrupt_status: host_status,
            present_state: self.read(offsets::DEBUG_MODE),
            response: self.read(offsets::RESPONSE0),
            auto_command_status: 0,
            adma_error_status: 0,
            blocks_done: 0,
            blocks: 0,
            attempts: 1,
        }
    }

    /// After an error: the status cleared, the FIFO drained, and the state machine forced back
    /// to data mode when it is stuck mid-transfer (Linux `bcm2835_finish_data` and its error path).
    pub fn recover(&mut self) {
        self.registers.write(HOST_STATUS, CLEAR_ALL);
        for _ in 0..FIFO_WORDS {
            if self.fifo_words() == 0 {
                break;
            }
            let _ = self.read(offsets::DATA);
        }
        let state = self.state_machine();
        if !matches!(state, Some(STATE::Value::Identification | STATE::Value::Data)) {
            self.registers.modify(DEBUG_MODE, DEBUG_MODE::FORCE_DATA_MODE::SET);
        }
    }

    /// Writes a command: waits for the previous one, clears old errors, for a data command the
    /// block size and then the count (both before SDCMD), the argument, then SDCMD with NEW.
    pub fn issue(&mut self, command: &Command, block_bytes: u32, blocks: u32) -> Result<(), SdError> {
        self.wait_not_busy(command)?;
        let old = self.registers.read(HOST_STATUS);
        if old.any_matching_bits_set(ERRORS) || old.is_set(HOST_STATUS::BUSY_INTERRUPT) {
            self.registers.write_value(HOST_STATUS, old);
        }
        let mut flags = match command.response {
            ResponseKind::None => COMMAND::NO_RESPONSE::SET,
            ResponseKind::R2 => COMMAND::LONG_RESPONSE::SET,
            ResponseKind::R1b => COMMAND::BUSY_WAIT::SET,
            ResponseKind::R1 | ResponseKind::R3 | ResponseKind::R6 | ResponseKind::R7 => FieldValue::none(),
        };
        if command.data != DataPhase::None {
            self.write(offsets::BLOCK_BYTES, block_bytes);
            self.write(offsets::BLOCK_COUNT, blocks);
            flags += COMMAND::READ::SET;
        }
        self.write(offsets::ARGUMENT, command.argument);
        self.registers
            .write(COMMAND, COMMAND::INDEX.val(u32::from(command.index)) + flags + COMMAND::NEW::SET);
        Ok(())
    }

    fn wait_not_busy(&self, command: &Command) -> Result<(), SdError> {
        let deadline = Deadline::after_us(self.platform, COMMAND_TIMEOUT_US);
        while self.registers.read(COMMAND).is_set(COMMAND::NEW) {
            if deadline.has_passed(self.platform) {
                let host_status = self.registers.read(HOST_STATUS).get();
                return Err(self.failure(*command, FailureKind::NoCompletion, host_status).into());
            }
            core::hint::spin_loop();
        }
        Ok(())
    }

    /// Waits for NEW to clear and reads the response; FAIL is an error named by the host status
    /// (a CRC7 error on R3 is not: the OCR carries no CRC). R1b waits for the end of busy.
    pub fn wait_command_complete(&mut self, command: &Command) -> Result<Response, SdError> {
        self.wait_not_busy(command)?;
        let host_status = self.registers.read(HOST_STATUS).get();
        let failed = self.registers.read(COMMAND).is_set(COMMAND::FAIL);
        let errors = host_status & ERRORS.value;
        let ignorable = command.response == ResponseKind::R3 && errors == HOST_STATUS::CRC7_ERROR::SET.value;
        if (failed || errors != 0) && !ignorable {
            let kind = if errors == 0 { FailureKind::CommandTimeout } else { failure_kind(errors) };
            let failure = self.failure(*command, kind, host_status);
            self.recover();
            return Err(failure.into());
        }
        let response = match command.response {
            ResponseKind::R2 => {
                let word = |index: usize| u128::from(self.read(offsets::RESPONSE0 + 4 * index));
                Response::from_long_register(word(0) | word(1) << 32 | word(2) << 64 | word(3) << 96)
            }
            _ => Response { words: [self.read(offsets::RESPONSE0), 0, 0, 0] },
        };
        if command.response == ResponseKind::R1b {
            self.wait_busy_end(command)?;
        }
        Ok(response)
    }

    /// BUSY_INTERRUPT (enabled in the host configuration) marks the end of an R1b busy.
    fn wait_busy_end(&mut self, command: &Command) -> Result<(), SdError> {
        let deadline = Deadline::after_us(self.platform, BUSY_TIMEOUT_US);
        loop {
            let host_status = self.registers.read(HOST_STATUS);
            if host_status.is_set(HOST_STATUS::BUSY_INTERRUPT) {
                self.registers.write(HOST_STATUS, HOST_STATUS::BUSY_INTERRUPT::SET);
                return Ok(());
            }
            let failed = host_status.any_matching_bits_set(ERRORS);
            if failed || deadline.has_passed(self.platform) {
                let kind = if failed { failure_kind(host_status.get()) } else { FailureKind::NoCompletion };
                let failure = self.failure(*command, kind, host_status.get());
                self.recover();
                return Err(failure.into());
            }
            core::hint::spin_loop();
        }
    }

    fn check_card_status(&self, command: &Command, response: &Response) -> Result<(), SdError> {
        if response.reports_card_status_errors(command) {
            let mut failure = self.failure(*command, FailureKind::CardStatus, 0);
            failure.response = response.short();
            return Err(failure.into());
        }
        Ok(())
    }

    /// Moves words into `out` from word `*words_done` on for as long as the FIFO has any (its
    /// fill level read once per burst of at most 16 words); never waits for an empty FIFO.
    /// `Err` carries the host status when an error bit is set.
    pub fn read_fifo(
        &mut self,
        out: &mut (impl PioTarget + ?Sized),
        words_done: &mut usize,
    ) -> Result<(), u32> {
        let host_status = self.registers.read(HOST_STATUS);
        if host_status.any_matching_bits_set(ERRORS) {
            return Err(host_status.get());
        }
        let total_words = out.length_bytes() / 4;
        while *words_done < total_words {
            let available = self.fifo_words() as usize;
            if available == 0 {
                break;
            }
            for _ in 0..available.min(total_words - *words_done) {
                let word = self.read(offsets::DATA);
                out.store_word(*words_done * 4, word);
                *words_done += 1;
            }
        }
        Ok(())
    }

    /// After the last word: an error the host flagged while the data came (a CRC16 error on the
    /// last block is flagged after its words were taken from the FIFO) fails the command; then
    /// waits for the state machine to reach identification or data mode; stuck waiting for more
    /// read data (an open-ended read the card goes on with), it is forced to data mode, as Linux
    /// does.
    pub fn finish_data(&mut self, command: &Command) -> Result<(), SdError> {
        let host_status = self.registers.read(HOST_STATUS);
        if host_status.any_matching_bits_set(ERRORS) {
            let host_status = host_status.get();
            let failure = self.failure(*command, failure_kind(host_status), host_status);
            self.recover();
            return Err(failure.into());
        }
        let deadline = Deadline::after_us(self.platform, BLOCK_TIMEOUT_US);
        loop {
            match self.state_machine() {
                Some(STATE::Value::Identification | STATE::Value::Data) => return Ok(()),
                Some(STATE::Value::ReadWait | STATE::Value::WriteStart1) => {
                    self.registers.modify(DEBUG_MODE, DEBUG_MODE::FORCE_DATA_MODE::SET);
                    return Ok(());
                }
                _ => {}
            }
            if deadline.has_passed(self.platform) {
                let host_status = self.read(offsets::HOST_STATUS);
                let failure = self.failure(*command, FailureKind::NoCompletion, host_status);
                self.recover();
                return Err(failure.into());
            }
            core::hint::spin_loop();
        }
    }

    /// Reads the whole data phase of a command already issued into `out` by polling.
    fn read_data_blocking(&mut self, command: &Command, out: &mut [u8]) -> Result<(), SdError> {
        let mut words_done = 0;
        let mut deadline = Deadline::after_us(self.platform, BLOCK_TIMEOUT_US);
        while words_done < out.len() / 4 {
            let before = words_done;
            if let Err(host_status) = self.read_fifo(out, &mut words_done) {
                let mut failure = self.failure(*command, failure_kind(host_status), host_status);
                failure.blocks = 1;
                self.recover();
                return Err(failure.into());
            }
            if words_done != before {
                deadline = Deadline::after_us(self.platform, BLOCK_TIMEOUT_US);
            } else if deadline.has_passed(self.platform) {
                let host_status = self.read(offsets::HOST_STATUS);
                let mut failure = self.failure(*command, FailureKind::NoCompletion, host_status);
                failure.blocks = 1;
                self.recover();
                return Err(failure.into());
            }
        }
        self.finish_data(command)
    }
}

/// The failure kind of the host status's error bits, most specific first.
pub fn failure_kind(host_status: u32) -> FailureKind {
    if HOST_STATUS::COMMAND_TIMEOUT.is_set(host_status) {
        FailureKind::CommandTimeout
    } else if HOST_STATUS::CRC7_ERROR.is_set(host_status) {
        FailureKind::CommandLine
    } else if HOST_STATUS::DATA_TIMEOUT.is_set(host_status) {
        FailureKind::DataTimeout
    } else if HOST_STATUS::CRC16_ERROR.is_set(host_status) {
        FailureKind::DataLine
    } else {
        FailureKind::HostTransfer
    }
}

impl<'p, R: RegisterIo, P: Platform> CardBus for SdhostHost<'p, R, P> {
    type Platform = P;

    fn platform(&self) -> &P {
        self.platform
    }

    fn send_command(&mut self, command: &Command, rca: u16) -> Result<Response, SdError> {
        prefix_application_command(self, command, rca)?;
        self.issue(command, 0, 0)?;
        let response = self.wait_command_complete(command)?;
        self.check_card_status(command, &response)?;
        Ok(response)
    }

    fn read_register_data(
        &mut self,
        command: &Command,
        rca: u16,
        out: &mut [u8],
    ) -> Result<Response, SdError> {
        prefix_application_command(self, command, rca)?;
        self.issue(command, out.len() as u32, 1)?;
        let response = self.wait_command_complete(command)?;
        self.read_data_blocking(command, out)?;
        self.check_card_status(command, &response)?;
        Ok(response)
    }

    /// SDHCFG's 4-bit card bus; the sdhost has no 8-bit bus.
    fn set_bus_width(&mut self, width: BusWidth) -> Result<(), SdError> {
        match width {
            BusWidth::One => self.host_config.modify(HOST_CONFIG::WIDE_EXTERNAL_BUS::CLEAR),
            BusWidth::Four => self.host_config.modify(HOST_CONFIG::WIDE_EXTERNAL_BUS::SET),
            BusWidth::Eight => {
                return Err(SdError::UnusableHost { reason: "the sdhost has no 8-bit bus", value: 8 })
            }
        }
        self.registers.write_value(HOST_CONFIG, self.host_config);
        self.bus_width_bits = width.bits();
        Ok(())
    }

    fn bus_mode(&self) -> BusMode {
        BusMode { width_bits: self.bus_width_bits, sd_clock_hz: self.sd_clock_hz }
    }

    /// Linux runs the sdhost at High Speed (`MMC_CAP_SD_HIGHSPEED`): 50 MHz from a 250 MHz core.
    fn supports_high_speed(&self) -> bool {
        true
    }

    /// The sdhost has no High Speed bit: the timing is only its clock.
    fn set_timing_3v3(&mut self, _timing: Timing, target_hz: u32) -> Result<u32, SdError> {
        self.set_clock(target_hz)
    }
}
