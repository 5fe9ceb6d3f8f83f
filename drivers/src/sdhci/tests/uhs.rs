//! What a real UHS-I board does that QEMU does not, against the simulated host and card
//! (`sim.rs`, with the board's power and I/O rail wired to the card: `SimBoardHooks`): a card
//! that refuses a 1.8 V switch or pulls DAT[3:0] low only after its CMD11 response, a card an
//! earlier stage left at 1.8 V, a controller that raises a spurious error bit during tuning and
//! needs 1 ms between CMD19s, a sampling point that drifts, the re-tuning timer, High Speed
//! Enable in UHS modes, Clock Control cleared before a new divider, and the Pi 5's card-detect
//! line (SD Physical Layer §4.2.4; SDHCI §2.2.24, §3.2.3; Linux `drivers/mmc/core/core.c`
//! `mmc_set_uhs_voltage`, `drivers/mmc/core/sd.c`, `drivers/mmc/host/sdhci.c`).

#![forbid(unsafe_code)]

extern crate std;

use super::super::quirks::{BCM2711_EMMC2, BCM2712_SDHCI};
use super::super::regs::{interrupt, offsets};
use super::super::sim::{SimBoard, SimBoardHooks, SimHost, TestPlatform};
use super::super::SdCard;
use super::{assert_pattern, host, platform, read, sim, uhs_card, UHS};
use crate::sd::error::SdError;
use crate::sd::identify::{bring_up, CardInfo, VOLTAGE_SWITCH_ATTEMPTS};
use crate::sd::options::{Cmd23Request, ModeRequest};
use crate::sd::sim_card::SimCard;
use crate::sd::timing::{BringUpOptions, Timing};
use hal::mmio::RegisterIo;
use hal::platform::Platform;
use std::string::ToString;
use std::vec::Vec;

/// A Pi 4-like UHS host (SDR50, DDR50, 1.8 V at 200 MHz) with `card`, brought up through the
/// board's hooks; the simulator and what the bring-up gave.
fn pi4_bring_up(
    card: SimCard,
) -> (&'static SimHost<'static>, &'static TestPlatform, Result<CardInfo, SdError>) {
    let platform = platform(8 << 20);
    let sim = sim(platform, UHS, card);
    let mut host = host(sim, platform, &BCM2711_EMMC2, Some(UHS.base_clock_hz));
    let board = SimBoardHooks::new(sim);
    let info = bring_up(&mut host, Some(&board), BringUpOptions::default());
    (sim, platform, info)
}

fn violations(sim: &SimHost<'_>) -> Vec<&'static str> {
    sim.state.borrow().violations.clone()
}

#[test]
fn dat_lines_are_looked_at_a_millisecond_after_the_cmd11_response() {
    // The card pulls DAT[3:0] low 0.5 ms after answering CMD11 (SD §4.2.4.2 allows it; Linux
    // waits 1 ms): looked at at once, the lines still read high and the switch would fail.
    let mut card = uhs_card(0x801f);
    card.dat_low_after_cmd11_ns = 500_000;
    let (sim, _, info) = pi4_bring_up(card);
    let info = info.unwrap();
    assert!(info.signalling_1v8);
    assert_eq!(info.voltage_switch, None, "the first switch should have worked");
    assert_eq!(info.timing, Timing::Ddr50);
    assert_eq!(violations(sim), Vec::<&str>::new());
}

#[test]
fn a_card_refusing_its_first_1v8_switch_is_power_cycled_and_switches_on_the_second() {
    let mut card = uhs_card(0x801f);
    card.refused_1v8_switches = 1;
    let (sim, _, info) = pi4_bring_up(card);
    let info = info.unwrap();
    assert!(info.signalling_1v8);
    assert_eq!(info.timing, Timing::Ddr50);
    let report = info.voltage_switch.expect("the failed switch is reported");
    assert_eq!((report.failures, report.reached_1v8), (1, true));
    assert!(
        matches!(report.last_failure, SdError::UnusableCard { reason, .. } if reason.contains("not high"))
    );
    assert!(
        report.to_string().ends_with("the card was power-cycled and reached 1.8 V on attempt 2"),
        "{report}"
    );
    // Once before identification, once after the failed switch.
    assert_eq!(sim.state.borrow().power_cycles, 2);
}

#[test]
fn a_card_that_never_switches_runs_at_3v3_after_every_attempt_failed() {
    let mut card = uhs_card(0x801f);
    card.refused_1v8_switches = 99;
    let (sim, _, info) = pi4_bring_up(card);
    let info = info.unwrap();
    assert!(!info.signalling_1v8);
    assert_eq!(info.timing, Timing::HighSpeed);
    let report = info.voltage_switch.unwrap();
    assert_eq!((report.failures, report.reached_1v8), (VOLTAGE_SWITCH_ATTEMPTS, false));
    assert!(report.to_string().ends_with("and runs at 3.3 V"), "{report}");
    assert_eq!(sim.state.borrow().power_cycles, 1 + VOLTAGE_SWITCH_ATTEMPTS);
    // The last identification did not ask for 1.8 V.
    let log = sim.state.borrow().log.clone();
    let last_acmd41 = log.iter().rev().find(|(index, _, _)| *index == 41).unwrap();
    assert_eq!(last_acmd41.1 & (1 << 24), 0);
}

#[test]
fn a_card_left_at_1v8_by_an_earlier_stage_is_power_cycled_before_identification() {
    let mut card = uhs_card(0x801f);
    card.left_at_1v8 = true;
    let (sim, _, info) = pi4_bring_up(card);
    let info = info.unwrap();
    // Without the power cycle every answer at 3.3 V would be garbled and the card would end at
    // 3.3 V at best; with it the card identifies at once and switches to 1.8 V.
    assert!(info.signalling_1v8);
    assert_eq!((info.timing, info.voltage_switch), (Timing::Ddr50, None));
    assert_eq!(sim.state.borrow().power_cycles, 1);
    assert_eq!(violations(sim), Vec::<&str>::new());
}

#[test]
fn sdr104_is_tuned_with_only_buffer_read_ready_enabled_and_cmd19s_a_millisecond_apart() {
    // The Pi 5 model raises a spurious Data End Bit Error with each tuning block and finds no
    // sampling point when CMD19s come less than 1 ms apart.
    let platform = platform(8 << 20);
    let board = SimBoard::PI5_SDHCI;
    let sim = sim(platform, board, uhs_card(0x801f));
    assert!(sim.state.borrow().spurious_tuning_error);
    let mut host = host(sim, platform, &BCM2712_SDHCI, Some(board.base_clock_hz));
    let hooks = SimBoardHooks::new(sim);
    let info = bring_up(&mut host, Some(&hooks), BringUpOptions::default()).unwrap();
    assert_eq!((info.timing, info.fallback), (Timing::Sdr104, None));
    assert_eq!(sim.state.borrow().tunings_completed, 1);
    // The status enables are back as they were (Linux `sdhci_end_tuning`).
    assert_eq!(sim.read32(offsets::INTERRUPT_STATUS_ENABLE), interrupt::ENABLED);
    // UHS modes set High Speed Enable too (Linux `sdhci_set_ios`).
    assert_ne!(sim.read32(offsets::HOST_CONTROL_POWER) & (1 << 2), 0);
    assert_eq!(violations(sim), Vec::<&str>::new());
}

#[test]
fn a_failed_ddr50_tuning_is_ignored_and_ddr50_kept() {
    let mut card = uhs_card(0x8017);
    card.tunable = false;
    let (sim, _, info) = pi4_bring_up(card);
    let info = info.unwrap();
    assert_eq!((info.timing, info.fallback), (Timing::Ddr50, None));
    let state = sim.state.borrow();
    assert!(!state.tuning_log.is_empty(), "DDR50 is tuned as Linux tunes it");
    assert_eq!(state.tunings_completed, 0);
    // The fixed sampling clock stays (Sampling Clock Select clear).
    assert_eq!(state.registers[offsets::AUTO_CMD_ERROR_HOST_CONTROL2 / 4] & (1 << 23), 0);
}

/// SDR104 on the Pi 5 model, as a block device.
fn pi5_sdr104_device() -> (
    &'static SimHost<'static>,
    &'static TestPlatform,
    SdCard<'static, &'static SimHost<'static>, TestPlatform>,
) {
    let platform = platform(8 << 20);
    let board = SimBoard { capabilities: (SimBoard::PI5_SDHCI.capabilities.0, 0x100), ..SimBoard::PI5_SDHCI };
    pi5_device_on(platform, board)
}

fn pi5_device_on(
    platform: &'static TestPlatform,
    board: SimBoard,
) -> (
    &'static SimHost<'static>,
    &'static TestPlatform,
    SdCard<'static, &'static SimHost<'static>, TestPlatform>,
) {
    let sim = sim(platform, board, uhs_card(0x801f));
    let mut host = host(sim, platform, &BCM2712_SDHCI, Some(board.base_clock_hz));
    let hooks = SimBoardHooks::new(sim);
    let info = bring_up(&mut host, Some(&hooks), BringUpOptions::default()).unwrap();
    assert_eq!(info.timing, Timing::Sdr104);
    (
        sim,
        platform,
        SdCard::new(
            host,
            info,
            "sd0",
            ModeRequest::Auto,
            Cmd23Request::Auto,
            crate::sd::options::AutoCmd23Request::On,
        )
        .unwrap(),
    )
}

#[test]
fn a_crc_error_after_the_sampling_point_drifted_re_tunes_before_the_retry() {
    let (sim, platform, mut device) = pi5_sdr104_device();
    let (completion, buffer) = read(&mut device, platform, 64, 8);
    assert_eq!(completion.result, Ok(()));
    assert_pattern(platform, &buffer, 64);
    sim.drift();
    let (completion, buffer) = read(&mut device, platform, 200, 16);
    assert_eq!(completion.result, Ok(()), "the retry after re-tuning reads the data");
    assert_pattern(platform, &buffer, 200);
    assert_eq!(sim.state.borrow().tunings_completed, 2);
}

#[test]
fn the_capabilities_re_tuning_timer_re_tunes_when_it_runs_out() {
    // Timer Count for Re-Tuning = 1 (capabilities bits 43:40): every 2^(1-1) = 1 s.
    let (sim, platform, mut device) = pi5_sdr104_device();
    assert_eq!(read(&mut device, platform, 0, 1).0.result, Ok(()));
    assert_eq!(sim.state.borrow().tunings_completed, 1);
    platform.delay_us(1_100_000);
    assert_eq!(read(&mut device, platform, 0, 1).0.result, Ok(()));
    assert_eq!(sim.state.borrow().tunings_completed, 2, "tuned again once the period ran out");
    // Within the period: no tuning.
    assert_eq!(read(&mut device, platform, 0, 1).0.result, Ok(()));
    assert_eq!(sim.state.borrow().tunings_completed, 2);
}

#[test]
fn a_re_tuning_period_of_2_s_is_not_cut_short() {
    // Timer Count for Re-Tuning = 2: every 2^(2-1) = 2 s; 1.1 s later it has not run out yet.
    let platform = platform(8 << 20);
    let board = SimBoard { capabilities: (SimBoard::PI5_SDHCI.capabilities.0, 0x200), ..SimBoard::PI5_SDHCI };
    let (sim, platform, mut device) = pi5_device_on(platform, board);
    platform.delay_us(1_100_000);
    assert_eq!(read(&mut device, platform, 0, 1).0.result, Ok(()));
    assert_eq!(sim.state.borrow().tunings_completed, 1, "not tuned again within 2 s");
    platform.delay_us(1_000_000);
    assert_eq!(read(&mut device, platform, 0, 1).0.result, Ok(()));
    assert_eq!(sim.state.borrow().tunings_completed, 2, "tuned again once 2 s had passed");
}

#[test]
fn a_new_divider_is_written_only_after_clock_control_was_cleared() {
    // Every bring-up changes the divider (400 kHz, then the timing's clock); the model counts a
    // divider changed under the running internal clock as a violation and glitches the clock.
    let (sim, _, info) = pi4_bring_up(uhs_card(0x801f));
    assert_eq!(info.unwrap().sd_clock_hz, 50_000_000);
    assert!(
        !violations(sim).iter().any(|violation| violation.contains("Clock Control")),
        "{:?}",
        violations(sim)
    );
}

#[test]
fn a_pi5_whose_card_detect_line_says_empty_sends_no_command() {
    let platform = platform(1 << 20);
    let mut card = uhs_card(0x801f);
    card.present = false;
    let sim = sim(platform, SimBoard::PI5_SDHCI, card);
    let mut host = host(sim, platform, &BCM2712_SDHCI, Some(200_000_000));
    let mut hooks = SimBoardHooks::new(sim);
    hooks.card_detect = Some(false);
    let error = bring_up(&mut host, Some(&hooks), BringUpOptions::default()).unwrap_err();
    assert!(matches!(error, SdError::NoCard { .. }), "{error:?}");
    assert!(sim.command_indices().is_empty());
}
