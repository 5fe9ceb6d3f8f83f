//! SD card bring-up over any [`CardBus`]: identification (CMD0, CMD8, ACMD41 with HCS and, where
//! host and board can switch, S18R), the optional 1.8 V switch (CMD11) with power cycle and
//! retry when it fails, CMD2/CMD3/CMD9/CMD7, the card's registers (SCR, SD Status), 4-bit bus,
//! and the fastest timing both sides support (SD Physical Layer Simplified Specification v9.00
//! §4.2 card identification, §4.2.4 signal voltage switch, §4.3.10 CMD6; SDHCI §3.6 card
//! initialization); a device that answers CMD1 instead of ACMD41 is an eMMC ([`super::mmc`]).
#![forbid(unsafe_code)]

use super::bus::{BusWidth, CardBus, UhsBus};
use super::card_registers::{ocr, CapacityClass, Cid, Csd, Scr, SdStatus};
use super::command::Command;
use super::error::{FailureKind, SdError};
use super::mmc::{self, EmmcInfo, EmmcModeText};
use super::signalling::{switch_to_1v8, BoardSignalling};
use super::speed::{negotiate_timing, select_timing};
use super::timing::{BringUpOptions, Timing, TimingFallback};
use core::fmt;
use hal::platform::{Deadline, Platform};

/// How long a card may stay busy in ACMD41 (SD §4.2.3: "1 second").
pub const INITIALIZATION_TIMEOUT_US: u64 = 1_000_000;
/// Pause between ACMD41 polls.
const OPERATING_CONDITION_POLL_US: u64 = 5_000;
/// Attempts for the register reads that real hosts are known to fail once (circle: "SEND_SCR
/// may fail with DATA_TIMEOUT on the Raspberry Pi 4").
const REGISTER_READ_ATTEMPTS: u32 = 3;

/// Attempts at the 1.8 V switch, each after a card power cycle, before the card is run at
/// 3.3 V (Linux `mmc_sd_get_cid` tries up to 10 times; 3 bounds the bring-up to well under a
/// second here).
pub const VOLTAGE_SWITCH_ATTEMPTS: u32 = 3;

/// What became of failed 1.8 V switches (SD §4.2.4.2: a failed switch leaves the card unusable
/// until its power is cycled; Linux `mmc_set_uhs_voltage` then `mmc_power_cycle`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VoltageSwitchReport {
    /// Attempts that failed, each followed by a card power cycle.
    pub failures: u32,
    pub last_failure: SdError,
    /// Whether a later attempt reached 1.8 V (else the card runs at 3.3 V).
    pub reached_1v8: bool,
}

impl fmt::Display for VoltageSwitchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let times = if self.failures == 1 { "once" } else { "more than once" };
        write!(
            f,
            "the 1.8 V switch failed {times} ({} attempts, last: {}); the card was power-cycled",
            self.failures, self.last_failure
        )?;
        if self.reached_1v8 {
            write!(f, " and reached 1.8 V on attempt {}", self.failures + 1)
        } else {
            write!(f, " and runs at 3.3 V")
        }
    }
}

/// What the bring-up learned and negotiated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CardInfo {
    pub ocr: u32,
    pub rca: u16,
    pub cid: Cid,
    pub csd: Csd,
    /// An SD card's SCR (zero for an eMMC, which has none).
    pub scr: Scr,
    pub sd_status: Option<SdStatus>,
    /// An eMMC: what its EXT_CSD says (`None` for an SD card).
    pub emmc: Option<EmmcInfo>,
    /// The card answered CMD8 (physical layer 2.00 or later).
    pub interface_v2: bool,
    pub signalling_1v8: bool,
    /// Failed 1.8 V switches, when there were any.
    pub voltage_switch: Option<VoltageSwitchReport>,
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
        match &self.emmc {
            Some(emmc) => emmc.capacity_bytes(),
            None => self.csd.capacity_bytes(),
        }
    }

    /// Whether data addresses are block numbers: the OCR's access mode for an eMMC, the
    /// capacity class for an SD card (SD §4.3.14).
    pub fn block_addressed(&self) -> bool {
        match &self.emmc {
            Some(emmc) => emmc.sector_addressed,
            None => self.capacity_class().block_addressed(),
        }
    }

    /// The data address of 512-byte block `lba`: the block number for SDHC and larger (and
    /// sector-mode eMMC), the byte offset otherwise.
    pub fn data_address(&self, lba: u64) -> u32 {
        if self.block_addressed() {
            lba as u32
        } else {
            (lba * 512) as u32
        }
    }

    /// Whether CMD23 (SET_BLOCK_COUNT) may announce multi-block transfers: the SCR says for an
    /// SD card; every eMMC from 4.3 on has it (JESD84-B51 §6.6.8; Linux `mmc.c` sets
    /// `MMC_CMD23` for MMC v3+ CSDs).
    pub fn supports_cmd23(&self) -> bool {
        self.emmc.is_some() || self.scr.supports_cmd23()
    }

    /// `eMMC 5.1, 8-bit DDR52` for an eMMC.
    pub fn emmc_mode(&self) -> Option<EmmcModeText<'_>> {
        self.emmc.as_ref().map(|info| EmmcModeText {
            info,
            bus_width_bits: self.bus_width_bits,
            timing: self.timing,
        })
    }
}

/// Why identification stopped: a failed 1.8 V switch (the card is power-cycled and asked again),
/// or anything else.
enum IdentifyFailure {
    VoltageSwitch(SdError),
    Other(SdError),
}

impl From<SdError> for IdentifyFailure {
    fn from(error: SdError) -> Self {
        IdentifyFailure::Other(error)
    }
}

/// Brings the card on `host` to the transfer state at its best timing.
///
/// Where the board can cut the card's power (Pi 4 and Pi 5), the card is power-cycled first: a
/// card an earlier stage left at 1.8 V keeps it until then (Linux `mmc_sd_card_using_v18`;
/// raspberrypi/rpi-eeprom "Fix SD 1V8 reset"). A failed 1.8 V switch is followed by a power
/// cycle and a new identification, with S18R up to [`VOLTAGE_SWITCH_ATTEMPTS`] times, then at
/// 3.3 V; the outcome is in [`CardInfo::voltage_switch`].
pub fn bring_up<B: UhsBus>(
    host: &mut B,
    board: Option<&dyn BoardSignalling>,
    options: BringUpOptions,
) -> Result<CardInfo, SdError> {
    // Start at 3.3 V whatever the previous owner left (docs/hardware.md §2.5, circle). A board
    // whose rail cannot be set is used without 1.8 V.
    let board = board.filter(|board| board.set_io_1v8(false).is_ok());
    if let Some(board) = board {
        if board.card_present() == Some(false) {
            return Err(SdError::NoCard { present_state: host.data_lines().register });
        }
        host.power_off();
        board.power_cycle_card()?;
    }
    let may_switch = board.is_some() && host.can_signal_at_1v8();
    host.initialize()?;
    host.check_card_present()?;
    let mut report: Option<VoltageSwitchReport> = None;
    loop {
        let failures = report.map_or(0, |report| report.failures);
        let request_1v8 = may_switch && failures < VOLTAGE_SWITCH_ATTEMPTS;
        let last_failure = match identify(host, request_1v8, board, options) {
            Ok(mut info) => {
                if let Some(report) = report.as_mut() {
                    report.reached_1v8 = info.signalling_1v8;
                }
                info.voltage_switch = report;
                return Ok(info);
            }
            Err(IdentifyFailure::VoltageSwitch(error)) if request_1v8 => (failures + 1, error),
            // Any other command or board failure while 1.8 V was asked for: once more at 3.3 V
            // only.
            Err(IdentifyFailure::Other(error @ (SdError::BoardHook { .. } | SdError::Command(_))))
                if request_1v8 =>
            {
                (VOLTAGE_SWITCH_ATTEMPTS, error)
            }
            Err(IdentifyFailure::VoltageSwitch(error) | IdentifyFailure::Other(error)) => return Err(error),
        };
        report = Some(VoltageSwitchReport {
            failures: last_failure.0,
            last_failure: last_failure.1,
            reached_1v8: false,
        });
        // The card is unusable until its power is cycled (SD §4.2.4.2).
        host.power_off();
        if let Some(board) = board {
            board.power_cycle_card()?;
            board.set_io_1v8(false)?;
        }
        host.initialize()?;
    }
}

fn identify<B: UhsBus>(
    host: &mut B,
    request_1v8: bool,
    board: Option<&dyn BoardSignalling>,
    options: BringUpOptions,
) -> Result<CardInfo, IdentifyFailure> {
    let (interface_v2, ocr) = match identify_operating_conditions(host, request_1v8)? {
        Found::Sd { interface_v2, ocr } => (interface_v2, ocr),
        Found::Emmc { ocr } => {
            let emmc = mmc::bring_up_emmc(host, ocr, options)?;
            return Ok(emmc_card_info(host, emmc));
        }
    };
    let mut signalling_1v8 = false;
    if request_1v8 && ocr & ocr::SWITCHING_TO_1V8_ACCEPTED != 0 {
        if let Some(board) = board {
            switch_to_1v8(host, board).map_err(IdentifyFailure::VoltageSwitch)?;
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
/// when card and host have it, else Default Speed; or an eMMC's identification and bus set-up.
pub fn bring_up_at_3v3<B: CardBus>(host: &mut B, options: BringUpOptions) -> Result<CardInfo, SdError> {
    let (interface_v2, ocr) = match identify_operating_conditions(host, false)? {
        Found::Sd { interface_v2, ocr } => (interface_v2, ocr),
        Found::Emmc { ocr } => {
            let emmc = mmc::bring_up_emmc(host, ocr, options)?;
            return Ok(emmc_card_info(host, emmc));
        }
    };
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

/// An eMMC's bring-up as the card information every host's block device takes.
fn emmc_card_info<B: CardBus>(host: &B, emmc: mmc::EmmcBringUp) -> CardInfo {
    CardInfo {
        ocr: emmc.ocr,
        rca: emmc.rca,
        cid: emmc.cid,
        csd: emmc.csd,
        scr: Scr::from_bytes([0; 8]),
        sd_status: None,
        emmc: Some(emmc.info),
        interface_v2: false,
        signalling_1v8: emmc.timing == Timing::MmcHs200,
        voltage_switch: None,
        timing: emmc.timing,
        fallback: emmc.fallback,
        bus_width_bits: host.bus_mode().width_bits,
        sd_clock_hz: host.bus_mode().sd_clock_hz,
    }
}

/// What answered identification.
enum Found {
    Sd { interface_v2: bool, ocr: u32 },
    Emmc { ocr: u32 },
}

/// CMD0, CMD8 and ACMD41 until an SD card is ready; when nothing answers ACMD41, CMD0 and CMD1
/// for an eMMC (Linux `mmc_rescan` tries SD, then MMC). Nothing answering either is no card:
/// a CMD8 that gets no echo at all, and an OCR of 0, count as no answer (the BCM2835 sdhost
/// reports an empty slot as zeros, not as a timeout: Linux `bcm2835-sdhost.c`).
fn identify_operating_conditions<B: CardBus>(host: &mut B, request_1v8: bool) -> Result<Found, SdError> {
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
        Ok(response) if response.short() & 0xfff == 0 => false,
        Ok(response) => {
            return Err(SdError::UnusableCard {
                reason: "CMD8 echoed the wrong voltage/check pattern",
                value: response.short(),
            })
        }
        Err(SdError::Command(failure)) if failure.kind == FailureKind::CommandTimeout => false,
        Err(error) => return Err(error),
    };
    let present_state = match wait_until_ready(host, interface_v2, request_1v8)? {
        Answer::Ready(ocr) => return Ok(Found::Sd { interface_v2, ocr }),
        Answer::Silent { present_state } => present_state,
    };
    host.send_command(&Command::go_idle(), 0)?;
    match mmc::wait_until_ready(host)? {
        Some(ocr) => Ok(Found::Emmc { ocr }),
        None => Err(SdError::NoCard { present_state }),
    }
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
            emmc: None,
            interface_v2,
            signalling_1v8,
            voltage_switch: None,
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

/// What ACMD41 got.
enum Answer {
    Ready(u32),
    /// Nothing answered the first ACMD41 (or it answered an OCR of 0).
    Silent {
        present_state: u32,
    },
}

/// ACMD41 until the card leaves the busy state (SD §4.2.3).
fn wait_until_ready<B: CardBus>(
    host: &mut B,
    interface_v2: bool,
    request_1v8: bool,
) -> Result<Answer, SdError> {
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
                if first && value & ocr::VOLTAGE_WINDOW_3V3 == 0 {
                    return Ok(Answer::Silent { present_state: 0 });
                }
                if value & ocr::POWER_UP_DONE != 0 {
                    return Ok(Answer::Ready(value));
                }
                if deadline.has_passed(host.platform()) {
                    return Err(SdError::UnusableCard {
                        reason: "the card stayed busy in ACMD41 for 1 s",
                        value,
                    });
                }
            }
            Err(SdError::Command(failure)) if first && failure.kind == FailureKind::CommandTimeout => {
                return Ok(Answer::Silent { present_state: failure.present_state });
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
