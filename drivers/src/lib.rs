//! barebench's hardware drivers. Register blocks use the specifications' names; protocol logic is
//! generic over [`hal::mmio::RegisterIo`] so that simulated controllers stand in for the hardware
//! in host tests; DMA memory, bus addresses and cache maintenance go through
//! [`hal::platform::Platform`]. Every unsafe operation the drivers need is the `hal` crate's, so
//! this crate forbids unsafe code.
//!
//! Tests follow one layout: a file's unit tests sit in its own `#[cfg(test)] mod tests`; a
//! driver's tests against its simulator (`sim`) sit in the driver folder's `tests` module
//! (`tests.rs`, or `tests/` with one file per topic).
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod activity_led;
#[cfg(any(test, feature = "testing"))]
pub mod firmware_model;
pub mod gpio;
pub mod mailbox;
pub mod nvme;
pub mod option_parsing;
pub mod pci;
pub mod pl011;
pub mod sd;
pub mod sdhci;
pub mod sdhost;
pub mod snapshot;
pub mod system_timer;
pub mod usb;
