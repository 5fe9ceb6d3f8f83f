//! A polled NVMe driver (NVMe Base Specification 1.4 over PCIe; bring-up, queues, PRPs, status
//! and shutdown as summarised in docs/nvme-and-fio.md §1): controller bring-up and admin commands in
//! [`controller`], one block device per I/O queue pair in [`io_queue`], a namespace spread over
//! several pairs in [`namespace`]. No interrupts: completion queues are created with IEN = 0 and
//! polled by their phase tag.
//!
//! The driver is generic over [`hal::mmio::RegisterIo`] (BAR0) and
//! [`hal::platform::Platform`] (DMA memory, cache maintenance, time), so the host tests run
//! the same code against the simulated controller in `sim`.

pub mod admin;
pub mod command;
pub mod controller;
pub mod enable;
pub mod error;
pub mod events;
pub mod hmb;
pub mod identify;
pub mod io_queue;
pub mod namespace;
pub mod options;
pub mod prp;
pub mod regs;
pub mod ring;
pub mod snapshot;
pub mod status;

#[cfg(test)]
pub(crate) mod sim;

pub use controller::{Controller, DepthChoice, QueueGrant, ShutdownReport};
pub use error::NvmeError;
pub use events::{Event, EventSink};
pub use io_queue::{IoQueuePair, QueueStatistics};
pub use namespace::NamespaceDevice;
pub use options::DriverOptions;
