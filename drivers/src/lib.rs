//! barebench's hardware drivers. Register blocks use the specifications' names; protocol logic is
//! generic over [`mmio::RegisterIo`] so that simulated controllers stand in for the hardware in
//! host tests; DMA memory, bus addresses and cache maintenance go through [`platform::Platform`].
#![no_std]

extern crate alloc;

pub mod activity_led;
pub mod barrier;
pub mod blocking;
pub mod dma;
#[cfg(any(test, feature = "testing"))]
pub mod firmware_model;
pub mod gpio;
pub mod mailbox;
pub mod mmio;
pub mod nvme;
pub mod options;
pub mod pci;
pub mod pl011;
pub mod platform;
pub mod sd;
pub mod sdhci;
pub mod sdhost;
pub mod snapshot;
pub mod system_timer;
pub mod timebase;
pub mod usb;

#[cfg(any(test, feature = "testing"))]
pub mod testing;
