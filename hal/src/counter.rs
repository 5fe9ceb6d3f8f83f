//! The generic timer's physical counter, read where it is needed: the kernel's timer reads it, and
//! the benchmark's loop reads it inline for the three timestamps of every I/O, where a call through
//! the timer's trait object would cost more than the read (docs/measurement.md §10).
//!
//! Each read comes after an ISB, so that it is not taken ahead of the instructions before it: the
//! Arm ARM (DDI 0487, the generic timer chapter) lets reads of the counter occur speculatively and
//! out of order (docs/hardware.md §1.5). AArch64 reads CNTPCT_EL0; the 32-bit Cortex-A7 (Pi 2)
//! reads the 64-bit CNTPCT with `mrrc p15, 0, Rt, Rt2, c14` after the CP15 ISB (Arm ARM DDI 0406C,
//! CNTPCT). The ARM1176 (Pi 1, Zero) has no generic timer: nothing here may run on it, which is
//! the caller's promise ([`blockdev::Clock::is_generic_counter`]). These exist only on the
//! bare-metal targets.

/// CNTPCT_EL0 after an ISB.
#[cfg(all(target_arch = "aarch64", target_os = "none"))]
#[inline(always)]
pub fn generic_counter_ticks() -> u64 {
    let ticks: u64;
    // SAFETY: the ISB and the read of CNTPCT_EL0, which EL1 may always read, have no side effect
    // and touch no memory.
    unsafe { core::arch::asm!("isb", "mrs {0}, cntpct_el0", out(reg) ticks, options(nomem, nostack)) };
    ticks
}

/// CNTPCT (`mrrc p15, 0, low, high, c14`) after the CP15 ISB. Only on a core with the generic
/// timer (the Cortex-A7), as the module says.
#[cfg(all(target_arch = "arm", target_os = "none"))]
#[inline(always)]
pub fn generic_counter_ticks() -> u64 {
    let (low, high): (u32, u32);
    // SAFETY: the CP15 ISB and the CNTPCT read have no side effects and touch no memory; callers
    // use this only on a core with the generic timer.
    unsafe {
        core::arch::asm!(
            "mcr p15, 0, {zero}, c7, c5, 4",
            "mrrc p15, 0, {low}, {high}, c14",
            zero = in(reg) 0u32,
            low = out(reg) low,
            high = out(reg) high,
            options(nomem, nostack)
        )
    };
    (u64::from(high) << 32) | u64::from(low)
}
