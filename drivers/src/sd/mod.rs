//! The SD card protocol, whatever the host controller (SD Physical Layer Simplified
//! Specification v9.00): commands ([`command`]), the card's registers and status
//! ([`card_registers`]), identification ([`identify`]), the 1.8 V switch ([`signalling`]), the
//! CMD6 speed switch with UHS-I tuning and its fallback ([`speed`]), and what every host's block
//! device shares ([`block`]). It drives a host only through [`bus::CardBus`] (and
//! [`bus::UhsBus`] for 1.8 V signalling and tuning), as virtio-drivers' devices drive a
//! transport: [`crate::sdhci`] and [`crate::sdhost`] are two hosts of it and never import each
//! other.
//!
//! What a card protocol needs from a host is in the bus traits and nothing else, so another
//! sequence over the same traits leaves the hosts as they are: an eMMC identification (CMD1
//! until the OCR's busy bit clears, CMD3 assigning the RCA, EXT_CSD read by CMD8 as a 512-byte
//! [`bus::CardBus::read_register_data`], the bus width by CMD6 and
//! [`bus::CardBus::set_bus_width`]; JEDEC JESD84-B51, Linux `drivers/mmc/core/mmc.c`) would be an
//! `mmc` module beside [`identify`]; SD command queueing (CMD44/CMD45 task set-up, CMD46/CMD47
//! task execution; SD Physical Layer 6.00 and later) would replace [`block::BlockCard::data_command`]'s
//! choice of data command, which the hosts execute as given.
#![forbid(unsafe_code)]

pub mod block;
pub mod bus;
pub mod card_registers;
pub mod command;
pub mod command_queue;
pub mod error;
pub mod identify;
pub mod options;
pub mod signalling;
pub mod speed;
pub mod timing;

#[cfg(test)]
pub(crate) mod sim_card;

pub use block::{BlockCard, ReadError, SdBlockDevice};
pub use bus::{BusMode, BusWidth, CardBus, Response, UhsBus};
pub use error::{CommandFailure, FailureKind, SdError};
pub use identify::{bring_up, bring_up_at_3v3, CardInfo};
pub use options::{Cmd23Request, ModeRequest, SdOptions};
pub use signalling::BoardSignalling;
pub use timing::{BringUpOptions, Timing};
