//! barebench's hardware drivers. Register blocks use the specifications' names; protocol logic is
//! generic over [`hal::mmio::RegisterIo`] so that simulated controllers stand in for the hardware
//! in host tests; DMA memory, bus addresses and cache maintenance go through
//! [`hal::platform::Platform`]. Every unsafe operation the drivers need is the `hal` crate's, so
//! this crate forbids unsafe code.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod activity_led;
pub mod blocking;
#[cfg(any(test, feature = "testing"))]
pub mod firmware_model;
pub mod gpio;
pub mod mailbox;
pub mod nvme;
pub mod options;
pub mod pci;
pub mod pl011;
pub mod sd;
pub mod sdhci;
pub mod sdhost;
pub mod snapshot;
pub mod system_timer;
pub mod usb;
