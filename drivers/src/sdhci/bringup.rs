//! SD card bring-up on an SDHCI host: identification (CMD0, CMD8, ACMD41 with HCS and, where
//! the board can switch, S18R), the optional 1.8 V switch (CMD11), CMD2/CMD3/CMD9/CMD7, the
//! card's registers (SCR, SD Status), 4-bit bus, and the fastest timing both sides support
//! (SD Physical Layer Simplified Specification v9.00 §4.2 card identification, §4.2.4 signal
//! voltage switch, §4.3.10 CMD6; SDHCI §3.6 card initialization, §3.6.1 voltage switch,
//! §2.2.24 Host Control 2 and the tuning procedure).

use super::card::{ocr, BusSpeedFunction, CapacityClass, Cid, Csd, Scr, SdStatus, SwitchStatus};
use super::command::Command;
use super::error::{FailureKind, SdError};
use super::host::{SdhciHost, BLOCK_TIMEOUT_US};
use super::regs::{interrupt, offsets, HOST_CONTROL2, PRESENT_STATE, TRANSFER_MODE_COMMAND};
use crate::mmio::RegisterIo;
use crate::platform::{Deadline, Platform};

/// How long a card may stay busy in ACMD41 (SD §4.2.3: "1 second").
pub const INITIALIZATION_TIMEOUT_US: u64 = 1_000_000;
/// Pause between ACMD41 polls.
const OPERATING_CONDITION_POLL_US: u64 = 5_000;
/// Attempts for the register reads that real hosts are known to fail once (circle: "SEND_SCR
/// may fail with DATA_TIMEOUT on the Raspberry Pi 4").
const REGISTER_READ_ATTEMPTS: u32 = 3;
/// CMD19 repetitions before tuning is declared failed (SDHCI §2.2.24: 40).
const TUNING_ATTEMPTS: u32 = 40;
/// 1.8 V switch settling times (SDHCI §3.6.1 steps 6 and 9; docs/hardware.md §2.5: regulator 5 ms).
const SIGNAL_SWITCH_SETTLE_US: u64 = 5_000;
const SIGNAL_SWITCH_CLOCK_US: u64 = 1_000;

/// The board's control of the card's I/O rail and power (Pi 4: firmware expander lines 4 and 6;
/// Pi 5: AON GPIO 3 and 4; docs/hardware.md §2.5).
pub trait BoardSignalling {
    /// Switches the SD I/O rail: `true` = 1.8 V, `false` = 3.3 V.
    fn set_io_1v8(&self, enable: bool) -> Result<(), SdError>;
    /// Removes card power and restores it (the only way back to 3.3 V for a card at 1.8 V).
    fn power_cycle_card(&self) -> Result<(), SdError>;
}

/// The bus timing in use (SD §3.9; SDHCI Host Control 2 UHS Mode Select).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timing {
    DefaultSpeed,
    HighSpeed,
    Sdr25,
    Sdr50,
    Sdr104,
    Ddr50,
}

impl Timing {
    pub fn name(self) -> &'static str {
        match self {
            Timing::DefaultSpeed => "Default Speed (DS)",
            Timing::HighSpeed => "High Speed (HS)",
            Timing::Sdr25 => "UHS-I SDR25",
            Timing::Sdr50 => "UHS-I SDR50",
            Timing::Sdr104 => "UHS-I SDR104",
            Timing::Ddr50 => "UHS-I DDR50",
        }
    }

    /// The fastest SDCLK the timing allows (SD §3.9.1).
    pub fn max_clock_hz(self) -> u32 {
        match self {
            Timing::DefaultSpeed => 25_000_000,
            Timing::HighSpeed | Timing::Sdr25 | Timing::Ddr50 => 50_000_000,
            Timing::Sdr50 => 100_000_000,
            Timing::Sdr104 => 208_000_000,
        }
    }

    fn function(self) -> BusSpeedFunction {
        match self {
            Timing::DefaultSpeed => BusSpeedFunction::DefaultSpeed,
            Timing::HighSpeed | Timing::Sdr25 => BusSpeedFunction::HighSpeed,
            Timing::Sdr50 => BusSpeedFunction::Sdr50,
            Timing::Sdr104 => BusSpeedFunction::Sdr104,
            Timing::Ddr50 => BusSpeedFunction::Ddr50,
        }
    }

    fn uhs_mode(self) -> u32 {
        match self {
            Timing::DefaultSpeed => 0,
            Timing::HighSpeed | Timing::Sdr25 => 1,
            Timing::Sdr50 => 2,
            Timing::Sdr104 => 3,
            Timing::Ddr50 => 4,
        }
    }
}

/// Choices the user can make (`sd.*` options).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BringUpOptions {
    /// Allow CMD6 to leave Default Speed.
    pub allow_speed_switch: bool,
    /// Upper bound on the SD clock.
    pub max_clock_hz: Option<u32>,
}

impl Default for BringUpOptions {
    fn default() -> Self {
        BringUpOptions { allow_speed_switch: true, max_clock_hz: None }
    }
}

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
}

/// Brings the card on `host` to the transfer state at its best timing.
pub fn bring_up<R: RegisterIo, P: Platform>(
    host: &mut SdhciHost<'_, R, P>,
    board: Option<&dyn BoardSignalling>,
    options: BringUpOptions,
) -> Result<CardInfo, SdError> {
    // Start at 3.3 V whatever the previous owner left (docs/hardware.md §2.5, circle). A board
    // whose rail cannot be set is used without 1.8 V.
    let board = board.filter(|board| board.set_io_1v8(false).is_ok());
    let may_switch = board.is_some()
        && host.quirks().can_switch_to_1v8
        && host.capabilities().voltage_1v8()
        && host.capabilities().version.at_least_v3();
    host.initialize()?;
    if !host.card_detected() {
        return Err(SdError::NoCard { present_state: host.present_state() });
    }
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

fn identify<R: RegisterIo, P: Platform>(
    host: &mut SdhciHost<'_, R, P>,
    request_1v8: bool,
    board: Option<&dyn BoardSignalling>,
    options: BringUpOptions,
) -> Result<CardInfo, SdError> {
    host.send_command(&Command::go_idle(), 0)?;
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
    let mut signalling_1v8 = false;
    if request_1v8 && ocr & ocr::SWITCHING_TO_1V8_ACCEPTED != 0 {
        if let Some(board) = board {
            switch_to_1v8(host, board)?;
            signalling_1v8 = true;
        }
    }
    let cid = Cid { raw: host.send_command(&Command::all_send_cid(), 0)?.long_register() };
    let mut rca = 0;
    for _ in 0..2 {
        rca = (host.send_command(&Command::send_relative_address(), 0)?.short() >> 16) as u16;
        if rca != 0 {
            break;
        }
    }
    if rca == 0 {
        return Err(SdError::UnusableCard {
            reason: "the card published relative address 0 twice",
            value: 0,
        });
    }
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
        host.set_bus_width_4_bit();
    }
    let mut status = [0u8; 64];
    let sd_status = host
        .read_register_data(&Command::sd_status(), rca, &mut status)
        .ok()
        .map(|_| SdStatus { bytes: status });
    let timing = select_timing(host, rca, &scr, &csd, signalling_1v8, options)?;
    let target_hz = options.max_clock_hz.map_or(timing.max_clock_hz(), |cap| cap.min(timing.max_clock_hz()));
    let sd_clock_hz = host.set_clock(target_hz)?;
    let needs_tuning =
        timing == Timing::Sdr104 || (timing == Timing::Sdr50 && host.capabilities().sdr50_needs_tuning());
    if needs_tuning && execute_tuning(host).is_err() {
        // Fall back to SDR25, which needs no tuning (SD §4.2.4.5).
        return finish_with_fallback(host, rca, cid, csd, scr, sd_status, ocr, interface_v2, options);
    }
    Ok(CardInfo {
        ocr,
        rca,
        cid,
        csd,
        scr,
        sd_status,
        interface_v2,
        signalling_1v8,
        timing,
        bus_width_bits: host.bus_mode().width_bits,
        sd_clock_hz,
    })
}

#[allow(clippy::too_many_arguments)]
fn finish_with_fallback<R: RegisterIo, P: Platform>(
    host: &mut SdhciHost<'_, R, P>,
    rca: u16,
    cid: Cid,
    csd: Csd,
    scr: Scr,
    sd_status: Option<SdStatus>,
    ocr: u32,
    interface_v2: bool,
    options: BringUpOptions,
) -> Result<CardInfo, SdError> {
    host.modify_host_control2(
        HOST_CONTROL2::EXECUTE_TUNING::SET.value | HOST_CONTROL2::SAMPLING_CLOCK_SELECT::SET.value,
        0,
    );
    let mut status = [0u8; 64];
    host.read_register_data(&Command::switch_function(0x80ff_fff1), rca, &mut status)?;
    host.modify_host_control2(
        HOST_CONTROL2::UHS_MODE.mask << HOST_CONTROL2::UHS_MODE.shift,
        HOST_CONTROL2::UHS_MODE.val(Timing::Sdr25.uhs_mode()).value,
    );
    let target_hz = options
        .max_clock_hz
        .map_or(Timing::Sdr25.max_clock_hz(), |cap| cap.min(Timing::Sdr25.max_clock_hz()));
    let sd_clock_hz = host.set_clock(target_hz)?;
    Ok(CardInfo {
        ocr,
        rca,
        cid,
        csd,
        scr,
        sd_status,
        interface_v2,
        signalling_1v8: true,
        timing: Timing::Sdr25,
        bus_width_bits: host.bus_mode().width_bits,
        sd_clock_hz,
    })
}

/// ACMD41 until the card leaves the busy state (SD §4.2.3). A card that never answers CMD55 /
/// ACMD41 is no card.
fn wait_until_ready<R: RegisterIo, P: Platform>(
    host: &mut SdhciHost<'_, R, P>,
    interface_v2: bool,
    request_1v8: bool,
) -> Result<u32, SdError> {
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

/// The signal voltage switch (SDHCI §3.6.1; SD §4.2.4.2; docs/hardware.md §2.5).
fn switch_to_1v8<R: RegisterIo, P: Platform>(
    host: &mut SdhciHost<'_, R, P>,
    board: &dyn BoardSignalling,
) -> Result<(), SdError> {
    host.send_command(&Command::voltage_switch(), 0)?;
    host.stop_sd_clock();
    let dat_mask = PRESENT_STATE::DAT_LEVEL.mask << PRESENT_STATE::DAT_LEVEL.shift;
    let present = host.present_state();
    if present & dat_mask != 0 {
        return Err(SdError::UnusableCard { reason: "DAT[3:0] not low after CMD11", value: present });
    }
    board.set_io_1v8(true)?;
    host.modify_host_control2(0, HOST_CONTROL2::SIGNALING_1V8::SET.value);
    host.platform().delay_us(SIGNAL_SWITCH_SETTLE_US);
    if !host.host_control2().is_set(HOST_CONTROL2::SIGNALING_1V8) {
        return Err(SdError::UnusableHost {
            reason: "1.8 V signalling enable did not stay set",
            value: host.read(offsets::AUTO_CMD_ERROR_HOST_CONTROL2),
        });
    }
    host.start_sd_clock();
    host.platform().delay_us(SIGNAL_SWITCH_CLOCK_US);
    let present = host.present_state();
    if present & dat_mask != dat_mask {
        return Err(SdError::UnusableCard {
            reason: "DAT[3:0] not high after the 1.8 V switch",
            value: present,
        });
    }
    Ok(())
}

fn read_scr<R: RegisterIo, P: Platform>(host: &mut SdhciHost<'_, R, P>, rca: u16) -> Result<Scr, SdError> {
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

/// Picks and switches to the fastest timing card and host share (CMD6 §4.3.10; Host Control 1
/// High Speed Enable, Host Control 2 UHS Mode Select).
fn select_timing<R: RegisterIo, P: Platform>(
    host: &mut SdhciHost<'_, R, P>,
    rca: u16,
    scr: &Scr,
    csd: &Csd,
    signalling_1v8: bool,
    options: BringUpOptions,
) -> Result<Timing, SdError> {
    if !options.allow_speed_switch || !scr.supports_switch() || !csd.supports_switch() {
        return Ok(Timing::DefaultSpeed);
    }
    let mut bytes = [0u8; 64];
    // Mode 0 (check) with every group "no change" reports what the card supports.
    host.read_register_data(&Command::switch_function(0x00ff_ffff), rca, &mut bytes)?;
    let support = SwitchStatus { bytes };
    let capabilities = host.capabilities();
    let base_hz = host.base_clock_hz();
    let candidates: &[(Timing, bool)] = if signalling_1v8 {
        &[
            (Timing::Sdr104, capabilities.sdr104() && base_hz >= 100_000_000),
            (Timing::Sdr50, capabilities.sdr50() && base_hz >= 100_000_000),
            (Timing::Ddr50, capabilities.ddr50()),
            (Timing::Sdr25, true),
        ]
    } else {
        &[(Timing::HighSpeed, capabilities.high_speed())]
    };
    let Some(timing) = candidates
        .iter()
        .find(|(timing, host_can)| *host_can && support.supports(timing.function()))
        .map(|(timing, _)| *timing)
    else {
        return Ok(Timing::DefaultSpeed);
    };
    let function = timing.function() as u32;
    host.read_register_data(&Command::switch_function(0x80ff_fff0 | function), rca, &mut bytes)?;
    let result = SwitchStatus { bytes };
    if u32::from(result.group1_selection()) != function {
        return Ok(Timing::DefaultSpeed);
    }
    // The card switches within 8 clocks after the status block (SD §4.3.10.4).
    if signalling_1v8 {
        host.modify_host_control2(
            HOST_CONTROL2::UHS_MODE.mask << HOST_CONTROL2::UHS_MODE.shift,
            HOST_CONTROL2::UHS_MODE.val(timing.uhs_mode()).value,
        );
    } else {
        host.set_high_speed();
    }
    Ok(timing)
}

/// The SDHCI tuning procedure (§2.2.24 Execute Tuning; SD §4.2.4.5 CMD19).
fn execute_tuning<R: RegisterIo, P: Platform>(host: &mut SdhciHost<'_, R, P>) -> Result<(), SdError> {
    let command = Command::send_tuning_block();
    host.modify_host_control2(0, HOST_CONTROL2::EXECUTE_TUNING::SET.value);
    for _ in 0..TUNING_ATTEMPTS {
        host.issue(&command, TRANSFER_MODE_COMMAND::READ::SET.value, 64, 1)?;
        host.wait_command_complete(&command)?;
        let deadline = Deadline::after_us(host.platform(), BLOCK_TIMEOUT_US);
        loop {
            let status = host.read(offsets::INTERRUPT_STATUS);
            if status & interrupt::BUFFER_READ_READY != 0 {
                host.write(offsets::INTERRUPT_STATUS, interrupt::BUFFER_READ_READY);
                break;
            }
            if status & interrupt::ALL_ERRORS != 0 || deadline.has_passed(host.platform()) {
                let failure = host.failure(command, FailureKind::from_interrupt_status(status), status);
                host.recover(true);
                return Err(failure.into());
            }
            core::hint::spin_loop();
        }
        let control = host.host_control2();
        if !control.is_set(HOST_CONTROL2::EXECUTE_TUNING) {
            if control.is_set(HOST_CONTROL2::SAMPLING_CLOCK_SELECT) {
                return Ok(());
            }
            break;
        }
    }
    let value = host.read(offsets::AUTO_CMD_ERROR_HOST_CONTROL2);
    let mut failure = host.failure(command, FailureKind::BadResponse, 0);
    failure.response = value;
    host.recover(true);
    Err(failure.into())
}
