//! The speed switch: the fastest timing card and host both support, chosen from the card's
//! CMD6 status and switched to with CMD6 mode 1 (SD Physical Layer Simplified Specification
//! v9.00 §4.3.10), and for UHS-I the tuning sequence with its fallback to a timing that needs no
//! tuning (SD §4.2.4.5). The host's side of each step is a [`CardBus`] or [`UhsBus`] method.
#![forbid(unsafe_code)]

use super::bus::{CardBus, UhsBus};
use super::card_registers::{BusSpeedFunction, Csd, Scr, SwitchStatus};
use super::command::Command;
use super::error::SdError;
use super::timing::{BringUpOptions, Timing, TimingFallback, TUNING_BLOCK_BYTES};

/// The UHS-I timings in Linux's order of preference, SDR104, DDR50, SDR50, SDR25 (Linux
/// `drivers/mmc/core/sd.c` `sd_update_bus_speed_mode`; the Pi 4 runs DDR50 this way:
/// docs/hardware.md §2.6).
const UHS_PREFERENCE: [Timing; 4] = [Timing::Sdr104, Timing::Ddr50, Timing::Sdr50, Timing::Sdr25];

/// Switches card and host to the fastest timing both support, tunes when the timing needs it,
/// and falls back to a timing without tuning when tuning fails: UHS-I at 1.8 V, High Speed at
/// 3.3 V.
pub fn negotiate_timing<B: UhsBus>(
    host: &mut B,
    rca: u16,
    scr: &Scr,
    csd: &Csd,
    signalling_1v8: bool,
    options: BringUpOptions,
) -> Result<(Timing, Option<TimingFallback>), SdError> {
    let candidates = timing_candidates(host, signalling_1v8);
    let Some((timing, support)) = select_timing(host, rca, scr, csd, &candidates, options)? else {
        apply_timing(host, Timing::DefaultSpeed, signalling_1v8, options)?;
        return Ok((Timing::DefaultSpeed, None));
    };
    apply_timing(host, timing, signalling_1v8, options)?;
    if !timing.needs_tuning(host.sdr50_needs_tuning()) {
        return Ok((timing, None));
    }
    match host.execute_tuning(&Command::send_tuning_block(), TUNING_BLOCK_BYTES) {
        Ok(()) => Ok((timing, None)),
        Err(reason) => {
            let reached = fall_back_without_tuning(host, rca, &support, options)?;
            Ok((reached, Some(TimingFallback { wanted: timing, reason })))
        }
    }
}

/// The timings a host offers, fastest first, each with whether the host can run it: UHS-I at
/// 1.8 V, High Speed at 3.3 V.
fn timing_candidates<B: UhsBus>(host: &B, signalling_1v8: bool) -> heapless::Vec<(Timing, bool), 4> {
    if signalling_1v8 {
        UHS_PREFERENCE.iter().map(|&timing| (timing, host.supports_uhs_timing(timing))).collect()
    } else {
        [(Timing::HighSpeed, host.supports_high_speed())].into_iter().collect()
    }
}

/// Picks the first of `candidates` (fastest first, with whether the host can run each) that the
/// card supports and switches the card to it with CMD6 (SD §4.3.10). `None` when the card stays
/// at Default Speed.
pub fn select_timing<B: CardBus>(
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
pub fn switch_card<B: CardBus>(host: &mut B, rca: u16, timing: Timing) -> Result<bool, SdError> {
    let function = timing.function() as u32;
    let mut bytes = [0u8; 64];
    host.read_register_data(&Command::switch_function(0x80ff_fff0 | function), rca, &mut bytes)?;
    Ok(u32::from(SwitchStatus { bytes }.group1_selection()) == function)
}

/// Sets the host side of `timing` (the card switches within 8 clocks after the CMD6 status
/// block, SD §4.3.10.4): at 1.8 V the UHS mode, at 3.3 V High Speed; then the SD clock.
fn apply_timing<B: UhsBus>(
    host: &mut B,
    timing: Timing,
    signalling_1v8: bool,
    options: BringUpOptions,
) -> Result<u32, SdError> {
    let target_hz = options.clock_for(timing);
    if signalling_1v8 {
        return host.set_uhs_timing(timing, target_hz);
    }
    host.set_timing_3v3(timing, target_hz)
}

/// After failed tuning: back to the fixed sampling clock, the bus down to SDR25's 50 MHz before
/// any further command (an untuned sampling point at SDR104/SDR50 speed garbles data), then the
/// best timing that needs no tuning: DDR50 when card and host have it, else SDR25.
fn fall_back_without_tuning<B: UhsBus>(
    host: &mut B,
    rca: u16,
    support: &SwitchStatus,
    options: BringUpOptions,
) -> Result<Timing, SdError> {
    host.reset_tuning();
    apply_timing(host, Timing::Sdr25, true, options)?;
    let ddr50 = host.supports_uhs_timing(Timing::Ddr50) && support.supports(BusSpeedFunction::Ddr50);
    for timing in [Timing::Ddr50, Timing::Sdr25] {
        if (timing == Timing::Sdr25 || ddr50) && switch_card(host, rca, timing)? {
            apply_timing(host, timing, true, options)?;
            return Ok(timing);
        }
    }
    Err(SdError::UnusableCard { reason: "the card refused SDR25 after failed tuning", value: 0 })
}
