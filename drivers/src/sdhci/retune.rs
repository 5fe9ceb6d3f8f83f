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
use crate::sd::timing::{Timing, TUNING_BLOCK_BYTES};
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
                (Command::mmc_send_tuning_block_hs200(), if card.bus_width_bits == 8 { 128 } else { 64 })
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
    use super::*;
    use crate::sd::error::CommandFailure;

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
