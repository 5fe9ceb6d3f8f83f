//! barebench's hardware access layer: every piece of unsafe code the drivers need, behind safe
//! interfaces, so that the `drivers` crate forbids unsafe code outright (the policy of Tock's
//! `chips/*` and `kernel` split, applied to one small crate).
//!
//! - [`mmio`]: register blocks ([`mmio::RegisterIo`], and [`mmio::Mmio`], the one volatile
//!   implementation over memory-mapped registers, created unsafely by the platform layer);
//! - [`platform`]: what a driver needs from the machine besides registers (time, DMA memory, bus
//!   addresses, cache maintenance), as the unsafe trait [`platform::Platform`] whose implementor
//!   (the kernel, or [`testing`]'s arena) makes the promises; modelled on rcore-os/virtio-drivers'
//!   `Hal`;
//! - [`dma`]: the CPU's only way into DMA memory, [`dma::DmaRegion`], borrowed from the platform
//!   that handed the memory out, so that it cannot outlive it, and created safely (as
//!   virtio-drivers' `Dma<H>` is);
//! - [`barrier`]: the memory barriers around DMA and doorbells;
//! - [`cache`]: data-cache maintenance by address, for platforms whose DMA memory is cached;
//! - [`counter`]: the generic timer's counter, for the kernel's timer and the benchmark's loop.
//!
//! With the `testing` feature (and in its own tests) [`testing`] provides the host-test platform
//! and the ordered event log that MMIO writes, barriers, cache maintenance and CPU accesses to DMA
//! memory are recorded in.
#![no_std]

pub mod barrier;
pub mod cache;
pub mod counter;
pub mod dma;
pub mod mmio;
pub mod platform;

#[cfg(any(test, feature = "testing"))]
pub mod testing;
