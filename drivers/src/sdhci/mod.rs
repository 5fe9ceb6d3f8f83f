//! One SDHCI host driver for every standard-layout controller (BCM2835/2837 Arasan, BCM2711
//! EMMC2, BCM2712 sdio1, `sdhci-pci`), a host of the SD card protocol in [`crate::sd`] (SD Host
//! Controller Simplified Specification v4.20).
//!
//! Board differences are data in [`quirks`]; [`host::SdhciHost`] drives the registers and is the
//! protocol's `CardBus` and `UhsBus` ([`card_bus`], with the tuning procedure in [`tuning`]), so
//! that `sd::bring_up` takes a card from power-on to the transfer state; [`device::SdCard`] is
//! the card as a `blockdev::BlockDevice` (PIO or ADMA2).

pub mod adma;
pub mod card_bus;
pub mod clock;
pub mod command;
pub mod device;
pub mod host;
pub mod quirks;
pub mod regs;
pub mod snapshot;
pub mod tuning;

#[cfg(test)]
pub(crate) mod sim;
#[cfg(test)]
mod tests;

pub use device::{SdCard, TransferMode};
pub use host::SdhciHost;
pub use quirks::HostQuirks;
