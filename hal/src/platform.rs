//! What a driver needs from the machine besides its registers: time, DMA memory, bus addresses and
//! cache maintenance (docs/architecture.md, "How a driver sees hardware").
//!
//! The Pi's DMA masters do not see RAM at its CPU address (BCM2711 EMMC2 B0 sees RAM at bus
//! 0xC000_0000, BCM2712 PCIe at CPU + 0x10_0000_0000; docs/hardware.md §1.4, §2.4), so every driver is
//! given a [`BusTranslation`] and turns physical addresses into bus addresses with it. None of the
//! Pi's DMA paths is cache-coherent, so a driver calls [`Platform::clean_for_device`] before a
//! device reads memory the CPU wrote and [`Platform::invalidate_for_cpu`] after a device wrote
//! memory the CPU will read, even though QEMU (which models no caches) never shows the difference.
//!
//! Cache maintenance is not ordering: these calls only deal with caches (and cost nothing for
//! the non-cacheable DMA pool; [`crate::cache`] has the maintenance by address). The order in
//! which a device sees memory and registers is the driver's to enforce with [`crate::barrier`]:
//! a store barrier between writing what the device will read and the register write that starts
//! it, a load barrier between the read that shows the device finished and the reads of what it
//! wrote.

use blockdev::{Clock, DmaBuffer};

/// DMA memory could not be provided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("DMA pool exhausted: asked for {requested_bytes} bytes aligned to {alignment_bytes}, {remaining_bytes} bytes left")]
pub struct DmaAllocationError {
    pub requested_bytes: usize,
    pub alignment_bytes: usize,
    pub remaining_bytes: usize,
}

/// The machine services a driver uses. Methods take `&self`; implementations use interior
/// mutability for the allocator.
///
/// # Safety
/// Drivers turn what this trait returns into raw memory accesses and device programming
/// ([`crate::dma::DmaRegion`]), so an implementor promises, as rcore-os/virtio-drivers' `Hal`
/// does:
/// - every buffer from [`Platform::allocate_dma`] is `length_bytes` of memory the CPU may read
///   and write at `cpu_address`, aligned to `alignment_bytes`, zeroed, and that stays valid,
///   does not move and is handed to no one else for as long as the platform value lives;
/// - `physical_address` is the CPU physical address of those same bytes (`cpu_address` maps to
///   it), so a device given the bus address of `physical_address` through the board's
///   [`BusTranslation`] reads and writes exactly that buffer and nothing else;
/// - [`Platform::is_dma_memory`] says yes only for a buffer whose bytes all lie in memory
///   `allocate_dma` hands out, at the same `cpu_address`/`physical_address` correspondence (so a
///   request's data can be reached as a [`crate::dma::DmaRegion`] without further promises);
/// - [`Platform::clean_for_device`] returns only once the CPU's writes to the buffer are in
///   memory where a device reads them, and [`Platform::invalidate_for_cpu`] only once no cached
///   line can hide what a device wrote (both may do nothing where the memory is not cached);
/// - [`Platform::needs_cache_maintenance`] says no only for a buffer for which both do nothing.
pub unsafe trait Platform: Clock {
    /// Zeroed DMA memory of `length_bytes`, aligned to `alignment_bytes` (a power of two), that
    /// lives as long as the platform (see the trait's safety contract). Memory from the
    /// kernel's pool is mapped non-cacheable.
    fn allocate_dma(
        &self,
        length_bytes: usize,
        alignment_bytes: usize,
    ) -> Result<DmaBuffer, DmaAllocationError>;

    /// The bytes [`Platform::allocate_dma`] can still hand out, before alignment.
    fn dma_remaining_bytes(&self) -> u64;

    /// Makes CPU writes to `buffer` reach memory, where a device reads (clean the data cache by
    /// address, complete when this returns). Orders nothing against later accesses: the driver
    /// puts `barrier::store_before_doorbell` between this and the register write that starts
    /// the device.
    fn clean_for_device(&self, buffer: &DmaBuffer);

    /// Makes device writes to `buffer` visible to later CPU reads (invalidate the data cache by
    /// address). Call it after the device wrote; the driver orders its reads after the
    /// observation that the device finished with `barrier::load_after_completion`.
    fn invalidate_for_cpu(&self, buffer: &DmaBuffer);

    /// Whether `buffer` lies in DMA memory this platform hands out (see the trait's safety
    /// contract): a request's data buffer the CPU may then reach through a region.
    fn is_dma_memory(&self, buffer: &DmaBuffer) -> bool;

    /// Whether [`Platform::clean_for_device`] and [`Platform::invalidate_for_cpu`] do anything
    /// for `buffer` (see the trait's safety contract). A driver that keeps a buffer for good
    /// (a queue's ring) asks once and leaves out the calls when they would do nothing. By
    /// default they always may.
    fn needs_cache_maintenance(&self, _buffer: &DmaBuffer) -> bool {
        true
    }

    /// Waits at least `microseconds`.
    fn delay_us(&self, microseconds: u64) {
        let deadline = Deadline::after_us(self, microseconds);
        while !deadline.has_passed(self) {
            core::hint::spin_loop();
        }
    }
}

/// How one DMA master sees RAM: CPU physical `cpu_base .. cpu_base + size_bytes` appears at
/// `bus_base`. The identity translation covers everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BusTranslation {
    pub cpu_base: u64,
    pub bus_base: u64,
    pub size_bytes: u64,
}

/// A physical range the device cannot reach through its translation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{physical_address:#x}+{length_bytes:#x} is outside the device's DMA window {:#x}+{:#x}", .translation.cpu_base, .translation.size_bytes)]
pub struct UnreachableAddress {
    pub physical_address: u64,
    pub length_bytes: u64,
    pub translation: BusTranslation,
}

impl BusTranslation {
    pub const IDENTITY: BusTranslation = BusTranslation { cpu_base: 0, bus_base: 0, size_bytes: u64::MAX };

    /// The bus address of `physical_address .. physical_address + length_bytes`.
    /// Compares and adds without building the error on the way (a request's path takes this).
    #[inline]
    pub fn to_bus(&self, physical_address: u64, length_bytes: u64) -> Result<u64, UnreachableAddress> {
        let offset = physical_address.wrapping_sub(self.cpu_base);
        let inside = physical_address >= self.cpu_base
            && length_bytes <= self.size_bytes
            && offset <= self.size_bytes - length_bytes;
        match self.bus_base.checked_add(offset) {
            Some(bus_address) if inside => Ok(bus_address),
            _ => Err(UnreachableAddress { physical_address, length_bytes, translation: *self }),
        }
    }
}

/// A point in time after which a wait gives up; every polling loop in the drivers uses one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deadline {
    pub start_ticks: u64,
    pub end_ticks: u64,
}

impl Deadline {
    pub fn after_us<C: Clock + ?Sized>(clock: &C, microseconds: u64) -> Self {
        let start_ticks = clock.now_ticks();
        let end_ticks = start_ticks.saturating_add(clock.ns_to_ticks(microseconds.saturating_mul(1000)));
        Deadline { start_ticks, end_ticks }
    }

    /// A deadline `ticks` from now, for hot paths that converted their timeout once.
    pub fn after_ticks<C: Clock + ?Sized>(clock: &C, ticks: u64) -> Self {
        let start_ticks = clock.now_ticks();
        Deadline { start_ticks, end_ticks: start_ticks.saturating_add(ticks) }
    }

    pub fn has_passed<C: Clock + ?Sized>(&self, clock: &C) -> bool {
        self.has_passed_at(clock.now_ticks())
    }

    /// Whether the deadline has passed at `now_ticks`: a loop that checks many deadlines reads
    /// the clock once for all of them.
    pub fn has_passed_at(&self, now_ticks: u64) -> bool {
        now_ticks >= self.end_ticks
    }

    /// Microseconds since the deadline was set (for error reports).
    pub fn elapsed_us<C: Clock + ?Sized>(&self, clock: &C) -> u64 {
        clock.ticks_to_ns(clock.now_ticks().saturating_sub(self.start_ticks)) / 1000
    }
}

/// Polls `condition` until it holds or `timeout_us` passes; returns whether it held. The
/// condition is checked once more after the deadline so that a slow host never turns a success
/// into a timeout.
pub fn wait_until<C: Clock + ?Sized>(
    clock: &C,
    timeout_us: u64,
    mut condition: impl FnMut() -> bool,
) -> bool {
    let deadline = Deadline::after_us(clock, timeout_us);
    loop {
        if condition() {
            return true;
        }
        if deadline.has_passed(clock) {
            return condition();
        }
        core::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockdev::testing::SteppingClock;

    #[test]
    fn translations_add_the_offset_and_refuse_what_is_outside() {
        // BCM2711 EMMC2 on B0 stepping: bus 0xC000_0000 -> CPU 0, 1 GiB (docs/hardware.md §1.4).
        let emmc2_b0 = BusTranslation { cpu_base: 0, bus_base: 0xC000_0000, size_bytes: 0x4000_0000 };
        assert_eq!(emmc2_b0.to_bus(0x0100_0000, 4096), Ok(0xC100_0000));
        assert!(emmc2_b0.to_bus(0x3FFF_F000, 0x2000).is_err());
        // BCM2712 pcie1: DMA address = CPU + 0x10_0000_0000 for 64 GiB.
        let pcie1 = BusTranslation { cpu_base: 0, bus_base: 0x10_0000_0000, size_bytes: 64 << 30 };
        assert_eq!(pcie1.to_bus(0x8_0000, 512), Ok(0x10_0008_0000));
        let virt = BusTranslation { cpu_base: 0x4000_0000, bus_base: 0x4000_0000, size_bytes: 1 << 30 };
        assert!(virt.to_bus(0x3FFF_FFFF, 1).is_err());
        assert_eq!(BusTranslation::IDENTITY.to_bus(0x1234, 8), Ok(0x1234));
    }

    #[test]
    fn waits_end_at_the_deadline() {
        // Every read advances 1 µs at 1 GHz.
        let clock = SteppingClock::new(1_000_000_000, 1_000);
        let mut polls = 0;
        assert!(!wait_until(&clock, 50, || {
            polls += 1;
            false
        }));
        assert!((40..=60).contains(&polls), "{polls} polls for 50 µs at 1 µs per poll");
        let deadline = Deadline::after_ticks(&clock, 5_000);
        assert_eq!(deadline.end_ticks - deadline.start_ticks, 5_000);
        assert_eq!(Deadline::after_ticks(&clock, u64::MAX).end_ticks, u64::MAX);
        let mut countdown = 3;
        assert!(wait_until(&clock, 50, || {
            countdown -= 1;
            countdown == 0
        }));
    }
}
