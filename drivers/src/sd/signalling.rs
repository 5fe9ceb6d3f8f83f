//! The signal voltage switch to 1.8 V (SD Physical Layer Simplified Specification v9.00
//! §4.2.4.2; SDHCI §3.6.1; docs/hardware.md §2.5): CMD11, SD clock stopped, DAT[3:0] low, the
//! board's I/O rail and the host's signalling to 1.8 V, SD clock back, DAT[3:0] high.
#![forbid(unsafe_code)]

use super::bus::UhsBus;
use super::command::Command;
use super::error::SdError;
use hal::platform::Platform;

/// 1.8 V switch settling times (SDHCI §3.6.1 steps 6 and 9; docs/hardware.md §2.5: regulator 5 ms).
const SIGNAL_SWITCH_SETTLE_US: u64 = 5_000;
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
}

/// Switches card, board and host to 1.8 V signalling.
pub fn switch_to_1v8<B: UhsBus>(host: &mut B, board: &dyn BoardSignalling) -> Result<(), SdError> {
    host.send_command(&Command::voltage_switch(), 0)?;
    host.stop_sd_clock();
    let lines = host.data_lines();
    if lines.levels & ALL_DATA_LINES != 0 {
        return Err(SdError::UnusableCard { reason: "DAT[3:0] not low after CMD11", value: lines.register });
    }
    board.set_io_1v8(true)?;
    host.enable_1v8_signalling();
    host.platform().delay_us(SIGNAL_SWITCH_SETTLE_US);
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
