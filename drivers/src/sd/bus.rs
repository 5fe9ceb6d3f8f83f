//! What the SD card protocol needs from a host controller, whatever its registers: send a
//! command, read a small data block by PIO, set the bus width, set a timing's clock
//! ([`CardBus`]); and, for hosts with 1.8 V signalling, the host's side of the signal voltage
//! switch and of the tuning procedure ([`UhsBus`]). The SDHCI host and the BCM2835 sdhost both
//! implement `CardBus`, so that card identification, the card's registers and the CMD6 speed
//! switch ([`super::identify`], [`super::speed`]) exist once (SD Physical Layer Simplified
//! Specification v9.00 §4.2, §4.3.10).
//!
//! The traits speak in commands, responses and bus settings, never in registers: the eMMC
//! protocol ([`super::mmc`]: CMD1, EXT_CSD, SWITCH, the bus test; JEDEC JESD84-B51 and Linux
//! `drivers/mmc/core/mmc.c`) runs on the same hosts through a few more methods with defaults for
//! hosts that cannot (8-bit bus, eMMC timings, one block written by PIO, HS200 tuning).
#![forbid(unsafe_code)]

use super::card_registers::CardStatus;
use super::command::Command;
use super::error::SdError;
use super::timing::{Timing, TuningFailure};
use hal::platform::Platform;

/// Identification clock (SD §4.2: ≤ 400 kHz).
pub const IDENTIFICATION_CLOCK_HZ: u32 = 400_000;
/// How long a card may stay busy after R1b (SD §4.12.3: 250 ms write, 1 s erase are the
/// worst cases named; no erase is ever sent).
pub const BUSY_TIMEOUT_US: u64 = 1_000_000;
/// How long one data block may take to arrive (SD §4.6.2.1: 100 ms read timeout for SDHC).
pub const BLOCK_TIMEOUT_US: u64 = 500_000;

/// The response registers after a command, as SDHCI stores them: a short response in word 0,
/// a 136-bit one as bits 127:8 of its register (without the CRC byte, SDHCI §2.2.7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Response {
    pub words: [u32; 4],
}

impl Response {
    pub fn short(&self) -> u32 {
        self.words[0]
    }

    /// Whether this answer to `command` is a card status (R1, R1b) with error bits set.
    pub fn reports_card_status_errors(&self, command: &Command) -> bool {
        command.returns_card_status() && CardStatus(self.short()).errors() != 0
    }

    /// A response whose 136-bit register arrived whole, CRC byte included (the BCM2835 sdhost's
    /// SDRSP0-3): stored as SDHCI stores it, without the CRC byte.
    pub fn from_long_register(register: u128) -> Response {
        let shifted = register >> 8;
        Response {
            words: [shifted as u32, (shifted >> 32) as u32, (shifted >> 64) as u32, (shifted >> 96) as u32],
        }
    }

    /// A 136-bit response as the 128-bit register it carries (CRC byte zero: the controller
    /// keeps bits 127:8 in RESPONSE[119:0], SDHCI §2.2.7).
    pub fn long_register(&self) -> u128 {
        let value = u128::from(self.words[0])
            | u128::from(self.words[1]) << 32
            | u128::from(self.words[2]) << 64
            | u128::from(self.words[3]) << 96;
        value << 8
    }
}

/// The width of the data bus: 1 and 4 bits for SD cards (ACMD6), 8 bits too for eMMC
/// (JESD84-B51 EXT_CSD BUS_WIDTH).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BusWidth {
    One,
    Four,
    Eight,
}

impl BusWidth {
    pub fn bits(self) -> u8 {
        match self {
            BusWidth::One => 1,
            BusWidth::Four => 4,
            BusWidth::Eight => 8,
        }
    }
}

/// The host-side bus mode the driver programmed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BusMode {
    pub width_bits: u8,
    pub sd_clock_hz: u32,
}

/// A host controller as the card protocol drives it.
/// CMD55 APP_CMD, which must come right before an application command (SD §4.3.9, ACMDn);
/// nothing for any other command. Every host's command paths start with it.
pub fn prefix_application_command<B: CardBus + ?Sized>(
    bus: &mut B,
    command: &Command,
    rca: u16,
) -> Result<(), SdError> {
    if command.application {
        bus.send_command(&Command::app_command(rca), rca)?;
    }
    Ok(())
}

pub trait CardBus {
    type Platform: Platform;

    fn platform(&self) -> &Self::Platform;

    /// Sends a command without data (CMD55 first for an ACMD) and returns its response; R1b
    /// waits for the end of busy; an R1 with error bits is an error.
    fn send_command(&mut self, command: &Command, rca: u16) -> Result<Response, SdError>;

    /// A command with one small block read by PIO (SCR, SD Status, switch status; an eMMC's
    /// 512-byte EXT_CSD): one block of `out.len()` bytes.
    fn read_register_data(
        &mut self,
        command: &Command,
        rca: u16,
        out: &mut [u8],
    ) -> Result<Response, SdError>;

    /// A command with one small block written by PIO, then the card's busy waited out (CMD49's
    /// 512-byte extension register block, crate::sd::command_queue; an eMMC's CMD19 bus test). A
    /// host that cannot says so.
    fn write_register_data(&mut self, command: &Command, rca: u16, data: &[u8]) -> Result<Response, SdError> {
        let _ = (command, rca, data);
        Err(SdError::UnusableHost { reason: "this host writes no register data", value: 0 })
    }

    /// The host side of a bus width the card was switched to (ACMD6 for SD).
    fn set_bus_width(&mut self, width: BusWidth) -> Result<(), SdError>;

    fn bus_mode(&self) -> BusMode;

    /// Whether the host can run the card at High Speed (50 MHz, SD §3.9.1) at 3.3 V.
    fn supports_high_speed(&self) -> bool;

    /// The host side of a 3.3 V timing the card switched to: High Speed's host bit where the
    /// host has one, and SDCLK at the fastest frequency not above `target_hz`, which it returns.
    fn set_timing_3v3(&mut self, timing: Timing, target_hz: u32) -> Result<u32, SdError>;

    /// The widest data bus the host offers (an eMMC's bus test then finds what is wired).
    fn max_bus_width(&self) -> BusWidth {
        BusWidth::Four
    }

    /// Whether the host can run an eMMC at `timing` (JESD84-B51 §5.3.2): by default the legacy
    /// timing, and High Speed where [`CardBus::supports_high_speed`] says so.
    fn supports_mmc_timing(&self, timing: Timing) -> bool {
        match timing {
            Timing::MmcLegacy => true,
            Timing::MmcHighSpeed => self.supports_high_speed(),
            _ => false,
        }
    }

    /// The host side of an eMMC timing the device switched to (HS_TIMING, and BUS_WIDTH for
    /// DDR), and SDCLK at the fastest frequency not above `target_hz`, which it returns.
    fn set_mmc_timing(&mut self, timing: Timing, target_hz: u32) -> Result<u32, SdError> {
        self.set_timing_3v3(timing, target_hz)
    }

    /// The HS200 tuning procedure with CMD21 (JESD84-B51 §6.6.5), on a host that can tune.
    fn tune_mmc_hs200(&mut self, _block_bytes: u32) -> Result<(), TuningFailure> {
        Err(TuningFailure::NotIssued { commands: 0 })
    }
}

/// The levels of the DAT[3:0] lines and the register they were read from (for messages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataLines {
    /// Bit n = DAT[n] high.
    pub levels: u8,
    pub register: u32,
}

/// What the UHS-I path needs beyond [`CardBus`]: the host's side of the signal voltage switch
/// (SD §4.2.4.2; SDHCI §3.6.1) and of the tuning procedure (SD §4.2.4.5; SDHCI §2.2.24). The
/// sequences themselves are the protocol's ([`super::identify::bring_up`],
/// [`super::speed`]); a host without 1.8 V signalling (the BCM2835 sdhost) implements only
/// `CardBus` and is brought up with [`super::identify::bring_up_at_3v3`].
pub trait UhsBus: CardBus {
    /// Resets the host, powers the bus at 3.3 V and runs the identification clock.
    fn initialize(&mut self) -> Result<(), SdError>;

    /// `Err(NoCard)` when card detect says no card is inserted.
    fn check_card_present(&self) -> Result<(), SdError>;

    /// Switches bus power off (before a card power cycle).
    fn power_off(&mut self);

    /// Whether the host (its capabilities, and its board's wiring) can signal at 1.8 V.
    fn can_signal_at_1v8(&self) -> bool;

    fn stop_sd_clock(&mut self);
    fn start_sd_clock(&mut self);
    fn data_lines(&self) -> DataLines;

    /// Sets the host's 1.8 V signalling enable.
    fn enable_1v8_signalling(&mut self);

    /// `Err` when the 1.8 V signalling enable did not stay set (the host could not switch).
    fn confirm_1v8_signalling(&self) -> Result<(), SdError>;

    /// Whether the host can run `timing` at 1.8 V.
    fn supports_uhs_timing(&self, timing: Timing) -> bool;

    /// Whether SDR50 needs tuning on this host (SDHCI §2.2.26 "Use Tuning for SDR50").
    fn sdr50_needs_tuning(&self) -> bool;

    /// The host side of a UHS-I timing the card switched to, and SDCLK at the fastest frequency
    /// not above `target_hz`, which it returns.
    fn set_uhs_timing(&mut self, timing: Timing, target_hz: u32) -> Result<u32, SdError>;

    /// Runs the host's tuning procedure with `command` (CMD19 for SD), whose data block of
    /// `block_bytes` the controller samples, until it has a sampling point or gives up.
    fn execute_tuning(&mut self, command: &Command, block_bytes: u32) -> Result<(), TuningFailure>;

    /// Back to the fixed sampling clock after failed tuning, with the CMD and DAT lines reset.
    fn reset_tuning(&mut self);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_responses_become_the_register_without_crc() {
        let response = Response { words: [0x4433_2211, 0x8877_6655, 0xccbb_aa99, 0x00ff_eedd] };
        assert_eq!(response.long_register(), 0xffee_ddcc_bbaa_9988_7766_5544_3322_1100);
        assert_eq!(response.short(), 0x4433_2211);
        // The whole register with its CRC byte (sdhost) keeps all but the CRC byte.
        let whole = Response::from_long_register(0xffee_ddcc_bbaa_9988_7766_5544_3322_11a5);
        assert_eq!(whole, response);
    }

    #[test]
    fn only_a_card_status_with_error_bits_is_an_error() {
        let out_of_range = Response { words: [CardStatus::OUT_OF_RANGE | (4 << 9), 0, 0, 0] };
        let transfer_state = Response { words: [4 << 9, 0, 0, 0] };
        assert!(out_of_range.reports_card_status_errors(&Command::send_status(1)));
        assert!(!transfer_state.reports_card_status_errors(&Command::send_status(1)));
        // R6 (CMD3) carries the RCA in the same bits, R3 (ACMD41) the OCR: no card status.
        assert!(!out_of_range.reports_card_status_errors(&Command::send_relative_address()));
        assert!(!out_of_range.reports_card_status_errors(&Command::send_operating_condition(0)));
    }
}
