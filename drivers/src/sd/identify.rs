//! SD card bring-up over any [`CardBus`]: identification (CMD0, CMD8, ACMD41 with HCS and, where
//! host and board can switch, S18R), the optional 1.8 V switch (CMD11), CMD2/CMD3/CMD9/CMD7, the
//! card's registers (SCR, SD Status), 4-bit bus, and the fastest timing both sides support
//! (SD Physical Layer Simplified Specification v9.00 §4.2 card identification, §4.2.4 signal
//! voltage switch, §4.3.10 CMD6; SDHCI §3.6 card initialization).
#![forbid(unsafe_code)]

use super::bus::{BusWidth, CardBus, UhsBus};
use super::card_registers::{ocr, CapacityClass, Cid, Csd, Scr, SdStatus};
use super::command::Command;
use super::error::{FailureKind, SdError};
use super::signalling::{switch_to_1v8, BoardSignalling};
use super::speed::{negotiate_timing, select_timing};
use super::timing::{BringUpOptions, Timing, TimingFallback};
use hal::platform::{Deadline, Platform};

/// How long a card may stay busy in ACMD41 (SD §4.2.3: "1 second").
pub const INITIALIZATION_TIMEOUT_US: u64 = 1_000_000;
/// Pause between ACMD41 polls.
const OPERATING_CONDITION_POLL_US: u64 = 5_000;
/// Attempts for the register reads that real hosts are known to fail once (circle: "SEND_SCR
/// may fail with DATA_TIMEOUT on the Raspberry Pi 4").
const REGISTER_READ_ATTEMPTS: u32 = 3;

/// What the bring-up learned and negotiated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CardInfo {
    pub ocr: u32,
    pub rca: u16,
    pub cid: Cid,
    pub csd: Csd,
    pub scr: Scr,
    pub sd_status: Option<SdStatus>,
    /// The card answered CMD8 (physical layer 2.00 or later).
    pub interface_v2: bool,
    pub signalling_1v8: bool,
    pub timing: Timing,
    /// Set when `timing` is a fallback from a faster timing whose tuning failed.
    pub fallback: Option<TimingFallback>,
    pub bus_width_bits: u8,
    pub sd_clock_hz: u32,
}

impl CardInfo {
    pub fn capacity_class(&self) -> CapacityClass {
        self.csd.capacity_class()
    }
    pub fn capacity_bytes(&self) -> u64 {
        self.csd.capacity_bytes()
    }

    /// The data address of 512-byte block `lba`: the block number for SDHC and larger, the byte
    /// offset for SDSC (SD §4.3.14).
    pub fn data_address(&self, lba: u64) -> u32 {
        if self.capacity_class().block_addressed() {
            lba as u32
        } else {
            (lba * 512) as u32
        }
    }
}

/// Brings the card on `host` to the transfer state at its best timing.
pub fn bring_up<B: UhsBus>(
    host: &mut B,
    board: Option<&dyn BoardSignalling>,
    options: BringUpOptions,
) -> Result<CardInfo, SdError> {
    // Start at 3.3 V whatever the previous owner left (docs/hardware.md §2.5, circle). A board
    // whose rail cannot be set is used without 1.8 V.
    let board = board.filter(|board| board.set_io_1v8(false).is_ok());
    let may_switch = board.is_some() && host.can_signal_at_1v8();
    host.initialize()?;
    host.check_card_present()?;
    match identify(host, may_switch, board, options) {
        Err(SdError::BoardHook { .. }) | Err(SdError::Command(_)) if may_switch => {
            // A failed 1.8 V switch leaves the card unusable until its power is cycled
            // (SD §4.2.4.2); try once more at 3.3 V only.
            if let Some(board) = board {
                host.power_off();
                board.power_cycle_card()?;
                board.set_io_1v8(false)?;
            }
            host.initialize()?;
            identify(host, false, board, options)
        }
        result => result,
    }
}

fn identify<B: UhsBus>(
    host: &mut B,
    request_1v8: bool,
    board: Option<&dyn BoardSignalling>,
    options: BringUpOptions,
) -> Result<CardInfo, SdError> {
    let (interface_v2, ocr) = identify_operating_conditions(host, request_1v8)?;
    let mut signalling_1v8 = false;
    if request_1v8 && ocr & ocr::SWITCHING_TO_1V8_ACCEPTED != 0 {
        if let Some(board) = board {
            switch_to_1v8(host, board)?;
            signalling_1v8 = true;
        }
    }
    let registers = read_card_registers(host)?;
    let (timing, fallback) =
        negotiate_timing(host, registers.rca, &registers.scr, &registers.csd, signalling_1v8, options)?;
    Ok(registers.into_card_info(host, ocr, interface_v2, signalling_1v8, timing, fallback))
}

/// Brings a card on a host without 1.8 V signalling or tuning (the BCM2835 sdhost) to the
/// transfer state: identification at 3.3 V, the card's registers, 4-bit bus, then High Speed
/// when card and host have it, else Default Speed.
pub fn bring_up_at_3v3<B: CardBus>(host: &mut B, options: BringUpOptions) -> Result<CardInfo, SdError> {
    let (interface_v2, ocr) = identify_operating_conditions(host, false)?;
    let registers = read_card_registers(host)?;
    let candidates = [(Timing::HighSpeed, host.supports_high_speed())];
    let timing =
        match select_timing(host, registers.rca, &registers.scr, &registers.csd, &candidates, options)? {
            Some((timing, _)) => timing,
            None => Timing::DefaultSpeed,
        };
    host.set_timing_3v3(timing, options.clock_for(timing))?;
    Ok(registers.into_card_info(host, ocr, interface_v2, false, timing, None))
}

/// CMD0, CMD8 and ACMD41 until the card is ready: whether it answered CMD8, and its OCR.
fn identify_operating_conditions<B: CardBus>(
    host: &mut B,
    request_1v8: bool,
) -> Result<(bool, u32), SdError> {
    // CMD0 has no response; a host that still sees none on the bus (the sdhost's FAIL with an
    // empty slot) has no card.
    match host.send_command(&Command::go_idle(), 0) {
        Err(SdError::Command(failure)) if failure.kind == FailureKind::CommandTimeout => {
            return Err(SdError::NoCard { present_state: failure.present_state })
        }
        result => result?,
    };
    let interface_v2 = match host.send_command(&Command::send_interface_condition(), 0) {
        Ok(response) if response.short() & 0xfff == 0x1aa => true,
        Ok(response) => {
            return Err(SdError::UnusableCard {
                reason: "CMD8 echoed the wrong voltage/check pattern",
                value: response.short(),
            })
        }
        Err(SdError::Command(failure)) if failure.kind == FailureKind::CommandTimeout => false,
        Err(error) => return Err(error),
    };
    let ocr = wait_until_ready(host, interface_v2, request_1v8)?;
    Ok((interface_v2, ocr))
}

/// What identification reads from the card once it is ready.
struct CardRegisters {
    rca: u16,
    cid: Cid,
    csd: Csd,
    scr: Scr,
    sd_status: Option<SdStatus>,
}

impl CardRegisters {
    fn into_card_info<B: CardBus>(
        self,
        host: &B,
        ocr: u32,
        interface_v2: bool,
        signalling_1v8: bool,
        timing: Timing,
        fallback: Option<TimingFallback>,
    ) -> CardInfo {
        CardInfo {
            ocr,
            rca: self.rca,
            cid: self.cid,
            csd: self.csd,
            scr: self.scr,
            sd_status: self.sd_status,
            interface_v2,
            signalling_1v8,
            timing,
            fallback,
            bus_width_bits: host.bus_mode().width_bits,
            sd_clock_hz: host.bus_mode().sd_clock_hz,
        }
    }
}

/// CMD2, CMD3, CMD9, CMD7 (and CMD16 for byte-addressed cards), the SCR, the 4-bit bus when the
/// card has it, and the SD Status (SD §4.2.2, §4.3).
fn read_card_registers<B: CardBus>(host: &mut B) -> Result<CardRegisters, SdError> {
    let cid = Cid { raw: host.send_command(&Command::all_send_cid(), 0)?.long_register() };
    let rca = publish_relative_address(host)?;
    let csd_raw = host.send_command(&Command::send_csd(rca), rca)?.long_register();
    let csd = Csd::decode(csd_raw).map_err(|error| SdError::UnusableCard {
        reason: "reserved CSD_STRUCTURE",
        value: u32::from(error.structure),
    })?;
    host.send_command(&Command::select_card(rca), rca)?;
    if !csd.capacity_class().block_addressed() {
        host.send_command(&Command::set_block_length(512), rca)?;
    }
    let scr = read_scr(host, rca)?;
    if scr.supports_4_bit_bus() {
        host.send_command(&Command::set_bus_width_4_bit(), rca)?;
        host.set_bus_width(BusWidth::Four)?;
    }
    let mut status = [0u8; 64];
    let sd_status = host
        .read_register_data(&Command::sd_status(), rca, &mut status)
        .ok()
        .map(|_| SdStatus { bytes: status });
    Ok(CardRegisters { rca, cid, csd, scr, sd_status })
}

/// CMD3 until the card publishes a non-zero relative address (SD §4.2.2: zero is reserved).
fn publish_relative_address<B: CardBus>(host: &mut B) -> Result<u16, SdError> {
    for _ in 0..2 {
        let rca = (host.send_command(&Command::send_relative_address(), 0)?.short() >> 16) as u16;
        if rca != 0 {
            return Ok(rca);
        }
    }
    Err(SdError::UnusableCard { reason: "the card published relative address 0 twice", value: 0 })
}

/// ACMD41 until the card leaves the busy state (SD §4.2.3). A card that never answers CMD55 /
/// ACMD41 is no card.
fn wait_until_ready<B: CardBus>(host: &mut B, interface_v2: bool, request_1v8: bool) -> Result<u32, SdError> {
    let mut argument = ocr::VOLTAGE_WINDOW_3V3;
    if interface_v2 {
        argument |= ocr::HOST_CAPACITY_SUPPORT | ocr::SDXC_POWER_CONTROL;
        if request_1v8 {
            argument |= ocr::SWITCHING_TO_1V8_REQUEST;
        }
    }
    let deadline = Deadline::after_us(host.platform(), INITIALIZATION_TIMEOUT_US);
    let mut first = true;
    loop {
        match host.send_command(&Command::send_operating_condition(argument), 0) {
            Ok(response) => {
                let value = response.short();
                if value & ocr::POWER_UP_DONE != 0 {
                    return Ok(value);
                }
                if deadline.has_passed(host.platform()) {
                    return Err(SdError::UnusableCard {
                        reason: "the card stayed busy in ACMD41 for 1 s",
                        value,
                    });
                }
            }
            Err(SdError::Command(failure)) if first && failure.kind == FailureKind::CommandTimeout => {
                return Err(SdError::NoCard { present_state: failure.present_state });
            }
            Err(error) => return Err(error),
        }
        first = false;
        host.platform().delay_us(OPERATING_CONDITION_POLL_US);
    }
}

fn read_scr<B: CardBus>(host: &mut B, rca: u16) -> Result<Scr, SdError> {
    let mut last_error = None;
    for _ in 0..REGISTER_READ_ATTEMPTS {
        let mut bytes = [0u8; 8];
        match host.read_register_data(&Command::send_scr(), rca, &mut bytes) {
            Ok(_) => return Ok(Scr::from_bytes(bytes)),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.unwrap_or(SdError::UnusableCard { reason: "no SCR", value: 0 }))
}
