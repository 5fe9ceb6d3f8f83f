//! SD card bring-up on an SDHCI host: identification (CMD0, CMD8, ACMD41 with HCS and, where
//! the board can switch, S18R), the optional 1.8 V switch (CMD11), CMD2/CMD3/CMD9/CMD7, the
//! card's registers (SCR, SD Status), 4-bit bus, and the fastest timing both sides support
//! (SD Physical Layer Simplified Specification v9.00 §4.2 card identification, §4.2.4 signal
//! voltage switch, §4.3.10 CMD6; SDHCI §3.6 card initialization, §3.6.1 voltage switch,
//! §2.2.24 Host Control 2 and the tuning procedure).

use super::card::{ocr, BusSpeedFunction, CapacityClass, Cid, Csd, Scr, SdStatus, SwitchStatus};
use super::card_bus::CardBus;
use super::command::Command;
use super::error::{FailureKind, SdError};
use super::host::SdhciHost;
use super::regs::{interrupt, offsets, HOST_CONTROL2, PRESENT_STATE, TRANSFER_MODE_COMMAND};
use crate::mmio::RegisterIo;
use crate::platform::{Deadline, Platform};
use core::fmt;

/// How long a card may stay busy in ACMD41 (SD §4.2.3: "1 second").
pub const INITIALIZATION_TIMEOUT_US: u64 = 1_000_000;
/// Pause between ACMD41 polls.
const OPERATING_CONDITION_POLL_US: u64 = 5_000;
/// Attempts for the register reads that real hosts are known to fail once (circle: "SEND_SCR
/// may fail with DATA_TIMEOUT on the Raspberry Pi 4").
const REGISTER_READ_ATTEMPTS: u32 = 3;
/// CMD19 repetitions before tuning is declared failed (SDHCI §2.2.24: 40).
const TUNING_ATTEMPTS: u32 = 40;
/// How long one CMD19 may take to raise Buffer Read Ready (Linux `sdhci_send_tuning`: 50 ms).
const TUNING_BLOCK_TIMEOUT_US: u64 = 50_000;
/// The tuning block on a 4-bit bus (SD §4.2.4.5: 64 bytes).
const TUNING_BLOCK_BYTES: u32 = 64;
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

    /// Whether the host must run the tuning procedure before using this timing (SD §4.2.4.5;
    /// SDHCI §2.2.26 "Use Tuning for SDR50").
    fn needs_tuning(self, sdr50_needs_tuning: bool) -> bool {
        self == Timing::Sdr104 || (self == Timing::Sdr50 && sdr50_needs_tuning)
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

impl BringUpOptions {
    /// The SD clock to ask for with `timing`: its ceiling, capped by `sd.max-clock-hz`.
    fn clock_for(&self, timing: Timing) -> u32 {
        self.max_clock_hz.map_or(timing.max_clock_hz(), |cap| cap.min(timing.max_clock_hz()))
    }
}

/// Why the tuning procedure gave no tuned sampling clock (SDHCI §2.2.24).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TuningFailure {
    /// CMD19 could not be issued (command or data inhibit stayed set).
    NotIssued { commands: u32 },
    /// Buffer Read Ready did not come, or an error bit came instead.
    NoBufferReadReady { commands: u32, interrupt_status: u32 },
    /// The controller ended tuning without selecting the tuned sampling clock.
    NotTuned { commands: u32 },
    /// Execute Tuning was still set after the specification's 40 CMD19s.
    StillExecuting,
}

impl fmt::Display for TuningFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TuningFailure::NotIssued { commands } => {
                write!(f, "CMD19 number {} could not be issued", commands + 1)
            }
            TuningFailure::NoBufferReadReady { commands, interrupt_status } => write!(
                f,
                "no Buffer Read Ready for CMD19 number {} (interrupt status {interrupt_status:#010x})",
                commands + 1
            ),
            TuningFailure::NotTuned { commands } => write!(
                f,
                "the controller ended tuning after {commands} CMD19 without selecting the tuned clock"
            ),
            TuningFailure::StillExecuting => {
                write!(f, "Execute Tuning still set after {TUNING_ATTEMPTS} CMD19")
            }
        }
    }
}

/// A faster timing that was switched to and then given up, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimingFallback {
    pub wanted: Timing,
    pub reason: TuningFailure,
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
        host.set_bus_width_4_bit();
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

/// Switches card and host to the fastest timing both support, tunes when the timing needs it,
/// and falls back to a timing without tuning when tuning fails.
fn negotiate_timing<R: RegisterIo, P: Platform>(
    host: &mut SdhciHost<'_, R, P>,
    rca: u16,
    scr: &Scr,
    csd: &Csd,
    signalling_1v8: bool,
    options: BringUpOptions,
) -> Result<(Timing, Option<TimingFallback>), SdError> {
    let candidates = sdhci_timing_candidates(host, signalling_1v8);
    let Some((timing, support)) = select_timing(host, rca, scr, csd, &candidates, options)? else {
        apply_timing(host, Timing::DefaultSpeed, signalling_1v8, options)?;
        return Ok((Timing::DefaultSpeed, None));
    };
    apply_timing(host, timing, signalling_1v8, options)?;
    if !timing.needs_tuning(host.capabilities().sdr50_needs_tuning()) {
        return Ok((timing, None));
    }
    match execute_tuning(host) {
        Ok(()) => Ok((timing, None)),
        Err(reason) => {
            let reached = fall_back_without_tuning(host, rca, &support, options)?;
            Ok((reached, Some(TimingFallback { wanted: timing, reason })))
        }
    }
}

/// The timings an SDHCI host offers, fastest first, each with whether the host can run it:
/// UHS-I in Linux's order of preference, SDR104, DDR50, SDR50 (Linux `drivers/mmc/core/sd.c`
/// `sd_update_bus_speed_mode`; the Pi 4 runs DDR50 this way: docs/hardware.md §2.6), or High
/// Speed at 3.3 V.
fn sdhci_timing_candidates<R: RegisterIo, P: Platform>(
    host: &SdhciHost<'_, R, P>,
    signalling_1v8: bool,
) -> heapless::Vec<(Timing, bool), 4> {
    let capabilities = host.capabilities();
    let base_hz = host.base_clock_hz();
    let list: &[(Timing, bool)] = if signalling_1v8 {
        &[
            (Timing::Sdr104, capabilities.sdr104() && base_hz >= 100_000_000),
            (Timing::Ddr50, capabilities.ddr50()),
            (Timing::Sdr50, capabilities.sdr50() && base_hz >= 100_000_000),
            (Timing::Sdr25, true),
        ]
    } else {
        &[(Timing::HighSpeed, capabilities.high_speed())]
    };
    list.iter().copied().collect()
}

/// Picks the first of `candidates` (fastest first, with whether the host can run each) that the
/// card supports and switches the card to it with CMD6 (SD §4.3.10). `None` when the card stays
/// at Default Speed.
fn select_timing<B: CardBus>(
    host: &mut B,
    rca: u16,
    scr: &Scr,
    csd: &Csd,
    candidates: &[(Timing, bool)],
    options: BringUpOptions,
) -> Result<Option<(Timing, SwitchStatus)>, SdError> {
    if !options.allow_speed_switch || !scr.supports_switch() || !csd.supports_switch() {
        return Ok(None);
    }
    let mut bytes = [0u8; 64];
    // Mode 0 (check) with every group "no change" reports what the card supports.
    host.read_register_data(&Command::switch_function(0x00ff_ffff), rca, &mut bytes)?;
    let support = SwitchStatus { bytes };
    for &(timing, host_can) in candidates {
        if host_can && support.supports(timing.function()) {
            return Ok(switch_card(host, rca, timing)?.then_some((timing, support)));
        }
    }
    Ok(None)
}

/// CMD6 mode 1 for `timing`'s access mode; whether the card switched (SD §4.3.10.4: the status
/// names the function selected, 0xF on error).
pub(crate) fn switch_card<B: CardBus>(host: &mut B, rca: u16, timing: Timing) -> Result<bool, SdError> {
    let function = timing.function() as u32;
    let mut bytes = [0u8; 64];
    host.read_register_data(&Command::switch_function(0x80ff_fff0 | function), rca, &mut bytes)?;
    Ok(u32::from(SwitchStatus { bytes }.group1_selection()) == function)
}

/// Sets the host side of `timing` (the card switches within 8 clocks after the CMD6 status
/// block, SD §4.3.10.4): at 1.8 V the UHS mode with the SD clock stopped, at 3.3 V High Speed
/// Enable; then the SD clock.
fn apply_timing<R: RegisterIo, P: Platform>(
    host: &mut SdhciHost<'_, R, P>,
    timing: Timing,
    signalling_1v8: bool,
    options: BringUpOptions,
) -> Result<u32, SdError> {
    let target_hz = options.clock_for(timing);
    if signalling_1v8 {
        return host.switch_uhs_mode(timing.uhs_mode(), target_hz);
    }
    host.set_timing_3v3(timing, target_hz)
}

/// After failed tuning: back to the fixed sampling clock, the bus down to SDR25's 50 MHz before
/// any further command (an untuned sampling point at SDR104/SDR50 speed garbles data), then the
/// best timing that needs no tuning: DDR50 when card and host have it, else SDR25.
fn fall_back_without_tuning<R: RegisterIo, P: Platform>(
    host: &mut SdhciHost<'_, R, P>,
    rca: u16,
    support: &SwitchStatus,
    options: BringUpOptions,
) -> Result<Timing, SdError> {
    host.reset_tuning();
    apply_timing(host, Timing::Sdr25, true, options)?;
    let ddr50 = host.capabilities().ddr50() && support.supports(BusSpeedFunction::Ddr50);
    for timing in [Timing::Ddr50, Timing::Sdr25] {
        if (timing == Timing::Sdr25 || ddr50) && switch_card(host, rca, timing)? {
            apply_timing(host, timing, true, options)?;
            return Ok(timing);
        }
    }
    Err(SdError::UnusableCard { reason: "the card refused SDR25 after failed tuning", value: 0 })
}

/// The SDHCI tuning procedure (§2.2.24 Execute Tuning; SD §4.2.4.5 CMD19): with Execute Tuning
/// set, each CMD19 raises Buffer Read Ready and nothing else — no Command Complete, no Transfer
/// Complete (Linux `sdhci_start_tuning` and `sdhci_data_irq` rely on the same) — until the
/// controller clears Execute Tuning; Sampling Clock Select then says whether it found a sampling
/// point. On failure the fixed sampling clock is restored (`reset_tuning`) by the caller.
fn execute_tuning<R: RegisterIo, P: Platform>(host: &mut SdhciHost<'_, R, P>) -> Result<(), TuningFailure> {
    let command = Command::send_tuning_block();
    host.modify_host_control2(0, HOST_CONTROL2::EXECUTE_TUNING::SET.value);
    for commands in 0..TUNING_ATTEMPTS {
        if host.issue(&command, TRANSFER_MODE_COMMAND::READ::SET.value, TUNING_BLOCK_BYTES, 1).is_err() {
            return Err(TuningFailure::NotIssued { commands });
        }
        wait_for_tuning_block(host)
            .map_err(|interrupt_status| TuningFailure::NoBufferReadReady { commands, interrupt_status })?;
        let control = host.host_control2();
        if !control.is_set(HOST_CONTROL2::EXECUTE_TUNING) {
            if control.is_set(HOST_CONTROL2::SAMPLING_CLOCK_SELECT) {
                return Ok(());
            }
            return Err(TuningFailure::NotTuned { commands: commands + 1 });
        }
    }
    Err(TuningFailure::StillExecuting)
}

/// Waits for the Buffer Read Ready of one CMD19 and clears it; the block itself stays in the
/// controller. `Err` carries the interrupt status when an error bit or the deadline came first.
fn wait_for_tuning_block<R: RegisterIo, P: Platform>(host: &mut SdhciHost<'_, R, P>) -> Result<(), u32> {
    let deadline = Deadline::after_us(host.platform(), TUNING_BLOCK_TIMEOUT_US);
    loop {
        let status = host.read(offsets::INTERRUPT_STATUS);
        if status & interrupt::BUFFER_READ_READY != 0 {
            host.write(offsets::INTERRUPT_STATUS, interrupt::BUFFER_READ_READY);
            return Ok(());
        }
        if status & interrupt::ALL_ERRORS != 0 || deadline.has_passed(host.platform()) {
            return Err(status);
        }
        core::hint::spin_loop();
    }
}
