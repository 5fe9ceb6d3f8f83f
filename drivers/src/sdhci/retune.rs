//! Re-tuning (SDHCI §2.2.24, §3.8 "Sampling Clock Tuning"; Linux `drivers/mmc/core/core.c`
//! `mmc_retune`, `drivers/mmc/host/sdhci.c` `sdhci_execute_tuning`): a tuned sampling point may
//! stop holding as temperature and voltage move, so a card running a tuned timing (SDR104,
//! SDR50 where the host asks, DDR50 when its tuning worked, eMMC HS200) is tuned again before
//! the retry of a request that failed its data CRC, and whenever the capabilities' re-tuning
//! timer (Timer Count for Re-Tuning, bits 43:40: 2^(n-1) s) has run out.
#![forbid(unsafe_code)]

use super::host::SdhciHost;
use super::regs::HOST_CONTROL2;
use super::tuning::execute_tuning;
use crate::sd::command::Command;
use crate::sd::error::{FailureKind, SdError};
use crate::sd::identify::CardInfo;
use crate::sd::timing::{mmc_hs200_tuning_block_bytes, Timing, TUNING_BLOCK_BYTES};
use hal::mmio::RegisterIo;
use hal::platform::{Deadline, Platform};

/// What re-tuning needs: the tuning command of the timing, and when the timer runs out.
#[derive(Clone, Copy, Debug)]
pub struct Retuning {
    command: Command,
    block_bytes: u32,
    period_ticks: Option<u64>,
    due: Option<Deadline>,
}

impl Retuning {
    /// For a card the host runs with a tuned sampling clock (Sampling Clock Select set after
    /// bring-up); `None` otherwise.
    pub fn for_card<R: RegisterIo, P: Platform>(
        host: &SdhciHost<'_, R, P>,
        card: &CardInfo,
    ) -> Option<Retuning> {
        if !host.host_control2().is_set(HOST_CONTROL2::SAMPLING_CLOCK_SELECT) {
            return None;
        }
        let (command, block_bytes) = match card.timing {
            Timing::MmcHs200 => {
                (Command::mmc_send_tuning_block_hs200(), mmc_hs200_tuning_block_bytes(card.bus_width_bits))
            }
            _ => (Command::send_tuning_block(), TUNING_BLOCK_BYTES),
        };
        let period_ticks = host
            .capabilities()
            .retuning_period_s()
            .map(|seconds| host.platform().ns_to_ticks(u64::from(seconds) * 1_000_000_000));
        let due = period_ticks.map(|ticks| Deadline::after_ticks(host.platform(), ticks));
        Some(Retuning { command, block_bytes, period_ticks, due })
    }

    /// Whether `error` calls for tuning again before a retry: a data CRC or end-bit error.
    pub fn needed_after(error: &SdError) -> bool {
        matches!(error, SdError::Command(failure) if failure.kind == FailureKind::DataLine)
    }

    /// Whether the timer has run out.
    pub fn timer_ran_out<P: Platform>(&self, platform: &P) -> bool {
        self.due.is_some_and(|due| due.has_passed(platform))
    }

    /// Tunes again (on failure back to the fixed sampling clock, as after a failed tuning) and
    /// restarts the timer.
    pub fn retune<R: RegisterIo, P: Platform>(&mut self, host: &mut SdhciHost<'_, R, P>) {
        if execute_tuning(host, &self.command, self.block_bytes).is_err() {
            host.reset_tuning();
        }
        self.due = self.period_ticks.map(|ticks| Deadline::after_ticks(host.platform(), ticks));
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::super::quirks::BCM2712_SDHCI;
    use super::super::sim::{SimBoard, SimBoardHooks, SimHost, TuningCommandSeen, TUNING_PASSES};
    use super::super::tests::{host, platform, sim, uhs_card, Host};
    use super::*;
    use crate::sd::error::CommandFailure;
    use crate::sd::identify::bring_up;
    use crate::sd::sim_card::SimCard;
    use crate::sd::timing::BringUpOptions;
    use std::vec;
    use std::vec::Vec;

    /// A BCM2712-like host with an 8-bit bus (the Pi 5 capabilities plus bit 18) and an eMMC
    /// that the board wires with `wired_width_bits` lines, brought up in HS200 at 1.8 V.
    fn hs200_emmc(wired_width_bits: u8) -> (&'static SimHost<'static>, Host, CardInfo) {
        let board = SimBoard {
            capabilities: (SimBoard::PI5_SDHCI.capabilities.0 | (1 << 18), 0),
            ..SimBoard::PI5_SDHCI
        };
        let platform = platform(1 << 20);
        let mut card = SimCard::emmc(32 << 30);
        card.emmc.as_mut().unwrap().wired_width_bits = wired_width_bits;
        let sim = sim(platform, board, card);
        let mut host = host(sim, platform, &BCM2712_SDHCI, Some(board.base_clock_hz));
        let options = BringUpOptions { emmc_hs200: true, ..BringUpOptions::default() };
        let card = bring_up(&mut host, None, options).unwrap();
        assert_eq!((card.timing, card.bus_width_bits), (Timing::MmcHs200, wired_width_bits));
        (sim, host, card)
    }

    /// An SD card brought up in SDR104 on the Pi 5 model (its hooks switch the card to 1.8 V).
    fn sdr104_sd_card() -> (&'static SimHost<'static>, Host, CardInfo) {
        let platform = platform(1 << 20);
        let board = SimBoard::PI5_SDHCI;
        let sim = sim(platform, board, uhs_card(0x801f));
        let mut host = host(sim, platform, &BCM2712_SDHCI, Some(board.base_clock_hz));
        let card = bring_up(&mut host, Some(&SimBoardHooks::new(sim)), BringUpOptions::default()).unwrap();
        assert_eq!((card.timing, card.bus_width_bits), (Timing::Sdr104, 4));
        (sim, host, card)
    }

    /// Lets the tuned sampling point drift, re-tunes as the device does after a data CRC error,
    /// and returns the tuning commands the controller saw for it. The drift is gone and no rule
    /// of the simulated controller or card was broken only when re-tuning found a new point.
    fn retune_after_drift(sim: &SimHost<'_>, host: &mut Host, card: &CardInfo) -> Vec<TuningCommandSeen> {
        assert_eq!(sim.state.borrow().tunings_completed, 1, "tuned at bring-up");
        let seen_at_bring_up = sim.state.borrow().tuning_log.len();
        let mut retuning = Retuning::for_card(host, card).expect("a card on a tuned sampling clock");
        sim.drift();
        retuning.retune(host);
        let sampling_clock_tuned = host.host_control2().is_set(HOST_CONTROL2::SAMPLING_CLOCK_SELECT);
        let state = sim.state.borrow();
        assert_eq!(state.violations, Vec::<&str>::new());
        assert_eq!(state.tunings_completed, 2, "re-tuning found a sampling point");
        assert!(sampling_clock_tuned && !state.drifted);
        state.tuning_log[seen_at_bring_up..].to_vec()
    }

    #[test]
    fn an_hs200_emmc_on_an_8_bit_bus_re_tunes_with_cmd21_and_128_byte_blocks() {
        let (sim, mut host, card) = hs200_emmc(8);
        let seen = retune_after_drift(sim, &mut host, &card);
        let cmd21 = TuningCommandSeen { index: 21, block_bytes: 128 };
        assert_eq!(seen, vec![cmd21; TUNING_PASSES as usize]);
    }

    #[test]
    fn an_hs200_emmc_on_a_4_bit_bus_re_tunes_with_cmd21_and_64_byte_blocks() {
        // The host has 8 lines but the board wires 4: the bus test settles on 4 bits.
        let (sim, mut host, card) = hs200_emmc(4);
        let seen = retune_after_drift(sim, &mut host, &card);
        let cmd21 = TuningCommandSeen { index: 21, block_bytes: 64 };
        assert_eq!(seen, vec![cmd21; TUNING_PASSES as usize]);
    }

    #[test]
    fn an_sdr104_sd_card_re_tunes_with_cmd19_and_64_byte_blocks() {
        let (sim, mut host, card) = sdr104_sd_card();
        let seen = retune_after_drift(sim, &mut host, &card);
        let cmd19 = TuningCommandSeen { index: 19, block_bytes: TUNING_BLOCK_BYTES };
        assert_eq!(seen, vec![cmd19; TUNING_PASSES as usize]);
    }

    fn failure(kind: FailureKind) -> SdError {
        SdError::Command(CommandFailure {
            command: Command::send_tuning_block(),
            kind,
            interrupt_status: 0,
            present_state: 0,
            response: 0,
            auto_command_status: 0,
            adma_error_status: 0,
            blocks_done: 0,
            blocks: 1,
            attempts: 1,
        })
    }

    #[test]
    fn only_a_data_crc_or_end_bit_error_calls_for_tuning_again() {
        assert!(Retuning::needed_after(&failure(FailureKind::DataLine)));
        for kind in [
            FailureKind::CommandTimeout,
            FailureKind::CommandLine,
            FailureKind::DataTimeout,
            FailureKind::HostTransfer,
            FailureKind::CardStatus,
            FailureKind::NoCompletion,
        ] {
            assert!(!Retuning::needed_after(&failure(kind)), "{kind:?}");
        }
        assert!(!Retuning::needed_after(&SdError::NoCard { present_state: 0 }));
    }
}
