//! Reset to Rust for every way the kernel is started (Arm ARM D1 "The AArch64 exception model";
//! docs/hardware.md §4, docs/qemu.md §1): Pi firmware (EL2, DTB in x0), QEMU raspi raw image (EL2, ATAGS or
//! DTB in x0) or ELF (EL3, all cores at the entry point), QEMU virt (EL1, DTB in x0); and on the
//! 32-bit Pis (docs/aarch32-pis.md §2-4) the AArch32 entry in [`entry_aarch32`] with its own
//! exception frame ([`exception_aarch32`]) and short-descriptor tables ([`mmu_aarch32`]).
//!
//! `_start` parks every core but the first with WFI, drops to EL1, enables FP/SIMD, zeroes BSS,
//! sets the stack and the exception vectors, and calls the kernel's
//! `barebench_boot_main(x0_at_entry, entry_exception_level)`. Exceptions land in the kernel's
//! `barebench_exception(frame, vector)`. The MMU is turned on later, from Rust, once the kernel
//! knows the board's memory map ([`mmu`]).
//!
//! The decoding and page-table code is portable and tested on the host; only the assembly and
//! system-register accesses are target-only.
#![cfg_attr(not(test), no_std)]

pub mod cpu;
pub mod exception;
pub mod exception_aarch32;
pub mod mmu;
pub mod mmu_aarch32;

/// The report the kernel prints for an exception: the registers the vectors saved and which
/// vector was taken; each architecture's module ([`exception`], [`exception_aarch32`]) says how it
/// reads.
pub struct ExceptionReport<'a, Frame, Vector> {
    pub frame: &'a Frame,
    pub vector: Vector,
}

#[cfg(all(target_arch = "aarch64", target_os = "none"))]
mod entry;
#[cfg(all(target_arch = "arm", target_os = "none"))]
mod entry_aarch32;

/// What `barebench_probe_read32` returns in x0/x1.
#[cfg(all(target_arch = "aarch64", target_os = "none"))]
#[repr(C)]
struct ProbeResult {
    value: u64,
    faulted: u64,
}

/// Reads a 32-bit register that may not answer: `None` when the load takes a synchronous abort
/// (an external abort from a block that is absent, as the PCIe root complex is on QEMU's raspi4b:
/// docs/qemu.md §9). Asynchronous SErrors stay masked and are not caught.
///
/// # Safety
/// `address` must be 4-byte aligned and mapped as device memory, and reading it must have no
/// side effect the caller does not want.
#[cfg(all(target_arch = "aarch64", target_os = "none"))]
pub unsafe fn probe_read32(address: usize) -> Option<u32> {
    extern "C" {
        fn barebench_probe_read32(address: usize) -> ProbeResult;
    }
    // SAFETY: the caller guarantees the address is a mapped, aligned register; a fault on the one
    // load inside is turned into `faulted = 1` by the synchronous exception vector.
    let result = unsafe { barebench_probe_read32(address) };
    (result.faulted == 0).then_some(result.value as u32)
}

/// The address of `park_core`, the WFI loop secondary cores are sent to (target only).
#[cfg(all(target_arch = "aarch64", target_os = "none"))]
pub fn park_core_address() -> u64 {
    extern "C" {
        fn park_core() -> !;
    }
    park_core as *const () as u64
}

/// The address of `park_core`, the WFI loop secondary cores are sent to (AArch32 target only).
#[cfg(all(target_arch = "arm", target_os = "none"))]
pub fn park_core_address() -> u64 {
    extern "C" {
        fn park_core() -> !;
    }
    park_core as *const () as usize as u64
}
