//! USB mass storage over a polled xHCI host controller (eXtensible Host Controller Interface
//! 1.2; USB Mass Storage Bulk-Only Transport 1.0; USB Attached SCSI; SCSI SPC-4 / SBC-3; the
//! facts and pitfalls gathered in docs/usb-storage.md): [`controller`] brings the xHC up and
//! runs its command and event rings, [`device`] enumerates a device behind a root port,
//! [`bot`] and [`uas`] (with its information units in [`uas_iu`]) carry SCSI commands, and [`mass_storage`] makes a drive a block device.
//! Polled like the other drivers: interrupts stay off and the event ring is read by cycle bit.
//!
//! Everything is generic over [`hal::mmio::RegisterIo`] (the xHCI registers) and
//! [`hal::platform::Platform`] (DMA memory, bus addresses, cache maintenance, time), so the
//! host tests run the same code against the simulated controller and drives in `sim`.

pub mod bot;
pub mod context;
pub mod controller;
pub mod descriptors;
pub mod device;
pub mod dwc3;
pub mod error;
pub mod mass_storage;
pub mod options;
pub mod regs;
pub mod ring;
pub mod rp1;
pub mod scsi;
pub mod transport;
pub mod trb;
pub mod uas;
pub mod uas_iu;

pub use controller::{HostController, SharedController};
pub use error::UsbError;
pub use mass_storage::{AttachError, DiscardEvents, DriveIdentity, EventSink, MassStorageDevice, Protocol};
pub use options::{ProtocolChoice, UsbOptions};
pub use regs::Speed;

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;
