//! Memory barriers around DMA and doorbells (Arm ARM B2.3; SPDK's aarch64 choices in
//! `include/spdk/barrier.h`: `dsb st` before an MMIO doorbell, `dmb oshld` after reading a
//! completion's phase bit). `core::sync::atomic::fence` emits DMB only, never DSB, so these use
//! inline assembly on the target and compiler fences on the host (where tests run single-threaded
//! against simulated devices). The 32-bit kernel is ARMv6 code that also runs on the Cortex-A7,
//! so it uses the CP15 barrier operations both cores have (c7, c10, 4 = DSB; c7, c10, 5 = DMB:
//! ARM1176JZF-S TRM §3.2.22; docs/aarch32-pis.md §4 item 9); they order all accesses, a superset
//! of what each AArch64 variant asks for.

/// All earlier stores (descriptors, queue entries) are complete before later stores, including a
/// doorbell write to device memory.
#[inline(always)]
pub fn store_before_doorbell() {
    #[cfg(all(target_arch = "aarch64", target_os = "none"))]
    // SAFETY: `dsb st` only orders memory accesses; it has no other effect.
    unsafe {
        core::arch::asm!("dsb st", options(nostack, preserves_flags))
    };
    #[cfg(all(target_arch = "arm", target_os = "none"))]
    cp15_data_synchronization_barrier();
    #[cfg(not(target_os = "none"))]
    core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
}

/// Loads after this point (the rest of a completion entry, DMA data) are not performed before
/// the load that observed the completion (its phase bit).
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
    #[cfg(not(target_os = "none"))]
    core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
}

/// A full system barrier: every memory access before it completes before any after it.
#[inline(always)]
pub fn full() {
    #[cfg(all(target_arch = "aarch64", target_os = "none"))]
    // SAFETY: `dsb sy` only orders memory accesses.
    unsafe {
        core::arch::asm!("dsb sy", options(nostack, preserves_flags))
    };
    #[cfg(all(target_arch = "arm", target_os = "none"))]
    cp15_data_synchronization_barrier();
    #[cfg(not(target_os = "none"))]
    core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
}

#[cfg(all(target_arch = "arm", target_os = "none"))]
#[inline(always)]
fn cp15_data_synchronization_barrier() {
    // SAFETY: the CP15 DSB only waits for earlier memory accesses to complete.
    unsafe {
        core::arch::asm!("mcr p15, 0, {0}, c7, c10, 4", in(reg) 0u32, options(nostack, preserves_flags))
    };
}
