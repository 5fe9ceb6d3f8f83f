//! Memory barriers around DMA and doorbells, the cheapest that are correct for queues in Normal
//! non-cacheable memory and registers in Device memory (Arm ARM DDI 0487 B2.3 "Definition of
//! the Armv8 memory model" and C6.2 DMB; Linux `arch/arm64/include/asm/io.h`, whose `writel()`
//! and `readl()` carry `dmb oshst` / `dmb oshld` since "arm64: io: Relax implicit barriers in
//! default I/O accessors"; SPDK `lib/nvme/nvme_pcie_common.c`, `dmb oshld` after the phase bit).
//!
//! Why DMB and not DSB: a DMB orders the accesses as every observer in its shareability domain
//! sees them, and Armv8 is other-multi-copy atomic, so a DMA master in the outer-shareable
//! domain that sees the doorbell write also sees the queue entry written before the DMB. DSB
//! additionally stalls until the accesses complete, which only matters for masters private to
//! a CPU and for cache maintenance ([`crate::cache`]'s routines end in their own DSB).
//! `core::sync::atomic::fence` emits inner-shareable DMBs only, too narrow for a device, so these
//! use inline assembly on the target and a compiler fence on the host, where tests run against
//! simulated devices; in host tests each barrier is also recorded in the test platform's event
//! log ([`crate::testing`]), in order with MMIO writes and DMA, so tests can check its place.
//!
//! The 32-bit kernel is ARMv6 code that also runs on the Cortex-A7, so it uses the CP15 barrier
//! operations both cores have (c7, c10, 4 = DSB; c7, c10, 5 = DMB: ARM1176JZF-S TRM §3.2.22;
//! docs/aarch32-pis.md §4 item 9); they order all accesses, a superset of what each AArch64
//! variant asks for.

/// The barrier kinds, for the test event log and for messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BarrierKind {
    /// `dmb oshst`: earlier stores are observed before later stores.
    Store,
    /// `dmb oshld`: earlier loads are performed before later loads and stores.
    Load,
    /// `dsb sy`: every earlier access completes before any later one starts.
    Full,
}

impl BarrierKind {
    /// Whether this barrier keeps earlier stores ahead of later stores.
    pub fn orders_stores(self) -> bool {
        matches!(self, BarrierKind::Store | BarrierKind::Full)
    }

    /// Whether this barrier keeps earlier loads ahead of later loads and stores.
    pub fn orders_loads(self) -> bool {
        matches!(self, BarrierKind::Load | BarrierKind::Full)
    }
}

/// All earlier stores (queue entries, PRP lists, descriptors) are observed by the device before
/// any later store, in particular a doorbell write to Device memory. `dmb oshst`: the
/// outer-shareable domain holds the DMA masters; Linux's `writel()` puts the same barrier in
/// front of every MMIO write.
#[inline(always)]
pub fn store_before_doorbell() {
    #[cfg(all(target_arch = "aarch64", target_os = "none"))]
    // SAFETY: `dmb oshst` only orders memory accesses; it has no other effect.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags))
    };
    #[cfg(all(target_arch = "arm", target_os = "none"))]
    cp15_data_synchronization_barrier();
    host_barrier(BarrierKind::Store);
}

/// Earlier loads are performed before any later load or store. Used after the load that
/// observed a completion (its phase bit), so the rest of the entry and the DMA data are not read
/// early; and after reading completion entries, before the store that hands their slots back
/// to the device (a DMB LD orders loads against later stores too: Arm ARM C6.2 DMB).
/// `dmb oshld`, as SPDK after the phase check and Linux's `readl()`.
#[inline(always)]
pub fn load_after_completion() {
    #[cfg(all(target_arch = "aarch64", target_os = "none"))]
    // SAFETY: `dmb oshld` only orders memory accesses.
    unsafe {
        core::arch::asm!("dmb oshld", options(nostack, preserves_flags))
    };
    #[cfg(all(target_arch = "arm", target_os = "none"))]
    // SAFETY: the CP15 DMB only orders memory accesses.
    unsafe {
        core::arch::asm!("mcr p15, 0, {0}, c7, c10, 5", in(reg) 0u32, options(nostack, preserves_flags))
    };
    host_barrier(BarrierKind::Load);
}

/// A full system barrier: every memory access before it completes before any after it (for
/// the firmware mailbox and the secondary cores' release, not for the I/O paths).
#[inline(always)]
pub fn full() {
    #[cfg(all(target_arch = "aarch64", target_os = "none"))]
    // SAFETY: `dsb sy` only orders memory accesses.
    unsafe {
        core::arch::asm!("dsb sy", options(nostack, preserves_flags))
    };
    #[cfg(all(target_arch = "arm", target_os = "none"))]
    cp15_data_synchronization_barrier();
    host_barrier(BarrierKind::Full);
}

/// Off the target: a compiler fence, and in tests an entry in the platform's event log.
#[inline(always)]
fn host_barrier(kind: BarrierKind) {
    #[cfg(not(all(target_arch = "aarch64", target_os = "none")))]
    core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
    #[cfg(any(test, feature = "testing"))]
    crate::testing::record(crate::testing::PlatformEvent::Barrier(kind));
    #[cfg(not(any(test, feature = "testing")))]
    let _ = kind;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{ArenaPlatform, PlatformEvent};

    #[test]
    fn each_barrier_is_logged_with_its_kind_in_order() {
        let platform = ArenaPlatform::new(4096);
        let start = platform.log().len();
        store_before_doorbell();
        load_after_completion();
        full();
        assert_eq!(
            platform.log().since(start),
            [
                PlatformEvent::Barrier(BarrierKind::Store),
                PlatformEvent::Barrier(BarrierKind::Load),
                PlatformEvent::Barrier(BarrierKind::Full),
            ]
        );
    }

    #[test]
    fn kinds_say_what_they_order() {
        assert!(BarrierKind::Store.orders_stores() && !BarrierKind::Store.orders_loads());
        assert!(BarrierKind::Load.orders_loads() && !BarrierKind::Load.orders_stores());
        assert!(BarrierKind::Full.orders_loads() && BarrierKind::Full.orders_stores());
    }
}

#[cfg(all(target_arch = "arm", target_os = "none"))]
#[inline(always)]
fn cp15_data_synchronization_barrier() {
    // SAFETY: the CP15 DSB only waits for earlier memory accesses to complete.
    unsafe {
        core::arch::asm!("mcr p15, 0, {0}, c7, c10, 4", in(reg) 0u32, options(nostack, preserves_flags))
    };
}
