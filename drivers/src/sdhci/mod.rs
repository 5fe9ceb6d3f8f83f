//! One SDHCI host driver for every standard-layout controller (BCM2835/2837 Arasan, BCM2711
//! EMMC2, BCM2712 sdio1, `sdhci-pci`) and the SD card protocol on top of it (SD Host Controller
//! Simplified Specification v4.20; SD Physical Layer Simplified Specification v9.00).
//!
//! Board differences are data in [`quirks`]; [`host::SdhciHost`] drives the registers;
//! [`bringup::bring_up`] takes a card from power-on to the transfer state; [`device::SdCard`]
//! is the card as a `blockdev::BlockDevice` (PIO or ADMA2).

pub mod adma;
pub mod bringup;
pub mod card;
pub mod card_bus;
pub mod clock;
pub mod command;
pub mod device;
pub mod error;
pub mod host;
pub mod options;
pub mod quirks;
pub mod regs;
pub mod snapshot;

#[cfg(test)]
pub(crate) mod sim;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod write_tests;

pub use bringup::{bring_up, bring_up_at_3v3, BoardSignalling, BringUpOptions, CardInfo, Timing};
pub use card_bus::CardBus;
pub use device::{Cmd23Request, ModeRequest, SdCard, TransferMode};
pub use error::{CommandFailure, FailureKind, SdError};
pub use host::SdhciHost;
pub use quirks::HostQuirks;
