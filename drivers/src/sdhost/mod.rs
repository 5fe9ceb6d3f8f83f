//! The BCM2835 sdhost: the SD slot's controller on Pi 1, Zero, Pi 2 and Pi 3 as Linux drives it
//! (`drivers/mmc/host/bcm2835.c`; docs/aarch32-pis.md §7). [`host::SdhostHost`] drives its
//! registers and is a host of the SD card protocol ([`crate::sd::CardBus`]), so that
//! [`crate::sd::bring_up_at_3v3`] identifies the card; [`device::SdhostCard`] is the card as
//! a `blockdev::BlockDevice` (PIO from the 16-word FIFO).

pub mod device;
pub mod host;
pub mod regs;

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

pub use device::SdhostCard;
pub use host::SdhostHost;
