//! What the SD card protocol needs from a host controller, whatever its registers: send a
//! command, read a small data block by PIO, widen the bus, set a timing's clock. The SDHCI host
//! and the BCM2835 sdhost both implement it, so that card identification, the card's registers
//! and the CMD6 speed switch ([`super::bringup`]) exist once (SD Physical Layer Simplified
//! Specification v9.00 §4.2, §4.3.10).

use super::bringup::Timing;
use super::command::Command;
use super::error::SdError;
use super::host::{BusMode, Response};
use crate::platform::Platform;

pub trait CardBus {
    type Platform: Platform;

    fn platform(&self) -> &Self::Platform;

    /// Sends a command without data (CMD55 first for an ACMD) and returns its response; R1b
    /// waits for the end of busy; an R1 with error bits is an error.
    fn send_command(&mut self, command: &Command, rca: u16) -> Result<Response, SdError>;

    /// A command with one small block read by PIO (SCR, SD Status, switch status).
    fn read_register_data(
        &mut self,
        command: &Command,
        rca: u16,
        out: &mut [u8],
    ) -> Result<Response, SdError>;

    /// The host side of ACMD6: a 4-bit data bus.
    fn set_bus_width_4_bit(&mut self);

    fn bus_mode(&self) -> BusMode;

    /// Whether the host can run the card at High Speed (50 MHz, SD §3.9.1) at 3.3 V.
    fn supports_high_speed(&self) -> bool;

    /// The host side of a 3.3 V timing the card switched to: High Speed's host bit where the
    /// host has one, and SDCLK at the fastest frequency not above `target_hz`, which it returns.
    fn set_timing_3v3(&mut self, timing: Timing, target_hz: u32) -> Result<u32, SdError>;
}
