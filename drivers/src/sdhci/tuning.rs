//! SDHCI's tuning procedure (SD Host Controller Simplified Specification v4.20 §2.2.24 Execute
//! Tuning; SD Physical Layer §4.2.4.5 CMD19): with Execute Tuning set, each tuning command
//! raises Buffer Read Ready and nothing else — no Command Complete, no Transfer Complete (Linux
//! `sdhci_start_tuning` and `sdhci_data_irq` rely on the same) — until the controller clears
//! Execute Tuning; Sampling Clock Select then says whether it found a sampling point. When to
//! tune, and what to do when it fails, is the protocol's (`sd::speed`).
#![forbid(unsafe_code)]

use super::host::SdhciHost;
use super::regs::{interrupt, offsets, HOST_CONTROL2, TRANSFER_MODE_COMMAND};
use crate::sd::command::Command;
use crate::sd::timing::{TuningFailure, TUNING_ATTEMPTS};
use hal::mmio::RegisterIo;
use hal::platform::{Deadline, Platform};

/// How long one CMD19 may take to raise Buffer Read Ready (Linux `sdhci_send_tuning`: 50 ms).
const TUNING_BLOCK_TIMEOUT_US: u64 = 50_000;

/// Pause between CMD19s (Linux `sdhci_execute_tuning`: `tuning_delay` is 1 ms for CMD19 and
/// none for eMMC's CMD21; "Spec does not require a delay between tuning cycles", but the hosts
/// Linux runs SD tuning on get one).
const TUNING_DELAY_CMD19_US: u64 = 1_000;

/// Runs the procedure with `command`, whose block of `block_bytes` the controller samples. On
/// failure the fixed sampling clock is restored (`reset_tuning`) by the caller.
///
/// While it runs only Buffer Read Ready is enabled in the status (Linux `sdhci_start_tuning`:
/// "to make sure we don't hit a controller bug, we _only_ enable Buffer Read Ready"); the
/// status enables are restored afterwards (`sdhci_end_tuning`).
pub fn execute_tuning<R: RegisterIo, P: Platform>(
    host: &mut SdhciHost<'_, R, P>,
    command: &Command,
    block_bytes: u32,
) -> Result<(), TuningFailure> {
    let enabled = host.read(offsets::INTERRUPT_STATUS_ENABLE);
    host.write(offsets::INTERRUPT_STATUS_ENABLE, interrupt::BUFFER_READ_READY);
    host.modify_host_control2(0, HOST_CONTROL2::EXECUTE_TUNING::SET.value);
    let tuned = run_tuning_commands(host, command, block_bytes);
    host.write(offsets::INTERRUPT_STATUS, interrupt::CLEAR_ALL);
    host.write(offsets::INTERRUPT_STATUS_ENABLE, enabled);
    tuned
}

/// The tuning commands, until the controller clears Execute Tuning or the specification's 40
/// have gone.
fn run_tuning_commands<R: RegisterIo, P: Platform>(
    host: &mut SdhciHost<'_, R, P>,
    command: &Command,
    block_bytes: u32,
) -> Result<(), TuningFailure> {
    let delay_us =
        if command.index == Command::send_tuning_block().index { TUNING_DELAY_CMD19_US } else { 0 };
    for commands in 0..TUNING_ATTEMPTS {
        if host.issue(command, TRANSFER_MODE_COMMAND::READ::SET.value, block_bytes, 1).is_err() {
            return Err(TuningFailure::NotIssued { commands });
        }
        wait_for_tuning_block(host)
            .map_err(|interrupt_status| TuningFailure::NoBufferReadReady { commands, interrupt_status })?;
        host.platform().delay_us(delay_us);
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

/// Waits for the Buffer Read Ready of one tuning command and clears it; the block itself stays
/// in the controller. `Err` carries the interrupt status when an error bit or the deadline came
/// first.
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
