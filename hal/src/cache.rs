//! Data-cache maintenance by virtual address, for DMA memory that is cached (the kernel's own DMA
//! pool is mapped non-cacheable and needs none): clean before a device reads what the CPU wrote,
//! clean-and-invalidate after a device wrote what the CPU will read (Arm ARM DDI 0487 D7.5.9
//! "Data cache maintenance instructions", `dc cvac` / `dc civac`; on the 32-bit Pis the CP15
//! operations by MVA both cores have, c7, c10, 1 and c7, c14, 1: ARM1176JZF-S TRM §3.2.22,
//! docs/aarch32-pis.md §4). Each range ends with a DSB, so the maintenance is complete when the
//! function returns. Which memory needs it is the platform's decision
//! ([`crate::platform::Platform::clean_for_device`]); these only exist on the bare-metal targets.

/// The smallest data-cache line, from CTR_EL0.DminLine (words, log2).
#[cfg(all(target_arch = "aarch64", target_os = "none"))]
pub fn data_cache_line_bytes() -> usize {
    let cache_type: u64;
    // SAFETY: reading CTR_EL0 has no side effects.
    unsafe {
        core::arch::asm!("mrs {0}, ctr_el0", out(reg) cache_type, options(nomem, nostack, preserves_flags))
    };
    4 << ((cache_type >> 16) & 0xf)
}

/// The smallest data-cache line of the two 32-bit cores (ARM1176: 32 bytes; Cortex-A7: 64), used
/// as the step of maintenance by address: cleaning every 32 bytes of a 64-byte line repeats work
/// but misses nothing.
#[cfg(all(target_arch = "arm", target_os = "none"))]
pub fn data_cache_line_bytes() -> usize {
    32
}

/// Runs `operation` on every cache line of `[address, address + length_bytes)`, then a DSB.
#[cfg(all(any(target_arch = "aarch64", target_arch = "arm"), target_os = "none"))]
fn for_each_line(address: usize, length_bytes: usize, mut operation: impl FnMut(usize)) {
    let line = data_cache_line_bytes();
    let mut cursor = address & !(line - 1);
    while cursor < address + length_bytes {
        operation(cursor);
        cursor += line;
    }
    crate::barrier::full();
}

/// Cleans `[address, address + length_bytes)` to the point of coherency, then waits.
#[cfg(all(any(target_arch = "aarch64", target_arch = "arm"), target_os = "none"))]
pub fn clean_data_cache_range(address: usize, length_bytes: usize) {
    for_each_line(address, length_bytes, |line| {
        // SAFETY: cleaning a line by address writes back dirty data and nothing else.
        #[cfg(target_arch = "aarch64")]
        unsafe {
            core::arch::asm!("dc cvac, {0}", in(reg) line, options(nostack, preserves_flags))
        };
        // SAFETY: as above, with the CP15 operation.
        #[cfg(target_arch = "arm")]
        unsafe {
            core::arch::asm!("mcr p15, 0, {0}, c7, c10, 1", in(reg) line, options(nostack))
        };
    });
}

/// Cleans and invalidates `[address, address + length_bytes)`, so later reads fetch what a device
/// wrote. Clean-and-invalidate rather than invalidate alone, so that a partial line shared with
/// other data never loses a CPU write.
#[cfg(all(any(target_arch = "aarch64", target_arch = "arm"), target_os = "none"))]
pub fn invalidate_data_cache_range(address: usize, length_bytes: usize) {
    for_each_line(address, length_bytes, |line| {
        // SAFETY: clean-and-invalidate by address loses no data.
        #[cfg(target_arch = "aarch64")]
        unsafe {
            core::arch::asm!("dc civac, {0}", in(reg) line, options(nostack, preserves_flags))
        };
        // SAFETY: as above, with the CP15 operation.
        #[cfg(target_arch = "arm")]
        unsafe {
            core::arch::asm!("mcr p15, 0, {0}, c7, c14, 1", in(reg) line, options(nostack))
        };
    });
}
