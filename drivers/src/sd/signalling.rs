//! The signal voltage switch to 1.8 V (SD Physical Layer Simplified Specification v9.00
//! §4.2.4.2; SDHCI §3.6.1; docs/hardware.md §2.5; Linux `drivers/mmc/core/core.c`
//! `mmc_set_uhs_voltage` for the waits): CMD11, 1 ms, SD clock stopped, DAT[3:0] low, the
//! board's I/O rail and the host's signalling to 1.8 V, 10 ms with the clock gated, SD clock
//! back, 1 ms, DAT[3:0] high. A failure is the caller's to recover from by a power cycle
//! (`identify::bring_up`).
#![forbid(unsafe_code)]

use super::bus::UhsBus;
use super::command::Command;
use super::error::SdError;
use hal::platform::Platform;

/// The card drives CMD and DAT[3:0] low after its CMD11 response; Linux waits 1 ms before
/// looking (`mmc_set_uhs_voltage`).
pub const AFTER_CMD11_US: u64 = 1_000;
/// The SD clock stays gated at least 5 ms while the voltage switches (SD §4.2.4.2); Linux keeps
/// it gated 10 ms (`mmc_set_uhs_voltage`: "though spec only says 5 ms").
const CLOCK_GATED_US: u64 = 10_000;
/// After the clock restarts, at least 1 ms before DAT[3:0] say whether the card switched.
const SIGNAL_SWITCH_CLOCK_US: u64 = 1_000;
/// DAT[3:0] all high.
const ALL_DATA_LINES: u8 = 0b1111;

/// The board's control of the card's I/O rail and power (Pi 4: firmware expander lines 4 and 6;
/// Pi 5: AON GPIO 3 and 4; docs/hardware.md §2.5).
pub trait BoardSignalling {
    /// Switches the SD I/O rail: `true` = 1.8 V, `false` = 3.3 V.
    fn set_io_1v8(&self, enable: bool) -> Result<(), SdError>;
    /// Removes card power and restores it (the only way back to 3.3 V for a card at 1.8 V).
    fn power_cycle_card(&self) -> Result<(), SdError>;
    /// Whether the board's card-detect line says a card is in the slot (Pi 5: AON GPIO 5, low =
    /// present); `None` when the board has no such line.
    fn card_present(&self) -> Option<bool> {
        None
    }
}

/// Switches card, board and host to 1.8 V signalling.
pub fn switch_to_1v8<B: UhsBus>(host: &mut B, board: &dyn BoardSignalling) -> Result<(), SdError> {
    host.send_command(&Command::voltage_switch(), 0)?;
    host.platform().delay_us(AFTER_CMD11_US);
    host.stop_sd_clock();
    let lines = host.data_lines();
    if lines.levels & ALL_DATA_LINES != 0 {
        return Err(SdError::UnusableCard { reason: "DAT[3:0] not low after CMD11", value: lines.register });
    }
    board.set_io_1v8(true)?;
    host.enable_1v8_signalling();
    host.platform().delay_us(CLOCK_GATED_US);
    host.confirm_1v8_signalling()?;
    host.start_sd_clock();
    host.platform().delay_us(SIGNAL_SWITCH_CLOCK_US);
    let lines = host.data_lines();
    if lines.levels & ALL_DATA_LINES != ALL_DATA_LINES {
        return Err(SdError::UnusableCard {
            reason: "DAT[3:0] not high after the 1.8 V switch",
            value: lines.register,
        });
    }
    Ok(())
}
