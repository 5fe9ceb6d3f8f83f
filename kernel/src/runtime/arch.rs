//! The few instructions the kernel's run-time needs that differ between AArch64 and the 32-bit
//! Pis' AArch32: idle, wake, the semihosting and PSCI traps, and the deliberate faults of
//! `test-fault=` (Arm ARM C6.2 for A64; ARMv7 ARM A8.8 and docs/aarch32-pis.md §3 for A32).

/// An address no board maps, for `test-fault=data-abort`.
#[cfg(target_arch = "aarch64")]
pub const UNMAPPED_ADDRESS: usize = 0x7000_0000_0000;
/// An address no 32-bit Pi maps (RAM ends below 1 GiB, devices at 0x2000_0000 or 0x3F00_0000-0x401F_FFFF).
#[cfg(target_arch = "arm")]
pub const UNMAPPED_ADDRESS: usize = 0xf000_0000;

/// Waits for an interrupt (none is enabled, so this is a low-power stop). The ARM1176 uses the
/// CP15 wait-for-interrupt operation (ARM1176JZF-S TRM §3.2.22), ARMv7 the WFI instruction.
pub fn wait_for_interrupt() {
    #[cfg(target_arch = "aarch64")]
    aarch64_cpu::asm::wfi();
    #[cfg(target_arch = "arm")]
    if boot::cpu::registers::main_id().core_model() == Some(boot::cpu::CoreModel::Arm1176) {
        // SAFETY: the CP15 wait-for-interrupt operation only stops the core until an interrupt.
        unsafe { core::arch::asm!("mcr p15, 0, {0}, c7, c0, 4", in(reg) 0u32, options(nostack)) };
    } else {
        // SAFETY: WFI only stops the core until an interrupt.
        unsafe { core::arch::asm!("wfi", options(nostack)) };
    }
}

/// Wakes cores waiting in WFE.
pub fn send_event() {
    #[cfg(target_arch = "aarch64")]
    aarch64_cpu::asm::sev();
    #[cfg(target_arch = "arm")]
    // SAFETY: SEV only signals an event to the other cores.
    unsafe {
        core::arch::asm!("sev", options(nostack))
    };
}

/// Semihosting SYS_EXIT with ADP_Stopped_ApplicationExit and `code`: on AArch64 SYS_EXIT (0x18)
/// with `hlt #0xf000`; on AArch32 SYS_EXIT_EXTENDED (0x20), whose block carries the code, with
/// `svc 0x123456` (docs/qemu.md §4, docs/aarch32-pis.md §3). Returns only if nobody answers.
pub fn semihosting_exit(code: u32) {
    #[cfg(target_arch = "aarch64")]
    {
        let parameter_block: [u64; 2] = [0x20026, u64::from(code)];
        // SAFETY: `hlt #0xf000` is the A64 semihosting trap; QEMU (run with -semihosting) reads
        // the two-word block at x1 and ends the process. Only reached when asked for.
        unsafe {
            core::arch::asm!("hlt #0xf000", in("x0") 0x18u64, in("x1") parameter_block.as_ptr(), options(nostack));
        }
    }
    #[cfg(target_arch = "arm")]
    {
        let parameter_block: [u32; 2] = [0x20026, code];
        // SAFETY: `svc 0x123456` is the A32 semihosting trap; QEMU reads the block at r1 and
        // ends the process. Only reached when the command line asked for it.
        unsafe {
            core::arch::asm!("svc 0x123456", in("r0") 0x20u32, in("r1") parameter_block.as_ptr(), options(nostack));
        }
    }
}

/// A PSCI call through SMC or HVC (Arm DEN0022 §5.2).
pub fn psci_call(function: u32, smc: bool) {
    #[cfg(target_arch = "aarch64")]
    {
        let function = u64::from(function);
        if smc {
            // SAFETY: SMC to the secure firmware's PSCI implementation.
            unsafe { core::arch::asm!("smc #0", inout("x0") function => _, options(nostack)) };
        } else {
            // SAFETY: HVC to the hypervisor's PSCI implementation.
            unsafe { core::arch::asm!("hvc #0", inout("x0") function => _, options(nostack)) };
        }
    }
    #[cfg(target_arch = "arm")]
    {
        // The instructions as words: the ARMv6K assembler knows neither (ARMv7 ARM A8.8.160
        // SMC #0 = 0xE1600070; B9.3.3 HVC #0 = 0xE1400070).
        if smc {
            // SAFETY: SMC to a secure monitor's PSCI implementation (only when a device tree names one).
            unsafe { core::arch::asm!(".word 0xe1600070", inout("r0") function => _, options(nostack)) };
        } else {
            // SAFETY: HVC to a hypervisor's PSCI implementation (only when a device tree names one).
            unsafe { core::arch::asm!(".word 0xe1400070", inout("r0") function => _, options(nostack)) };
        }
    }
}

/// Executes a permanently undefined instruction (A64 UDF #0; A32 0xE7F000F0).
pub fn undefined_instruction() {
    #[cfg(target_arch = "aarch64")]
    // SAFETY: deliberately executes a permanently undefined encoding; the vectors report it.
    unsafe {
        core::arch::asm!("udf #0", options(nostack))
    };
    #[cfg(target_arch = "arm")]
    // SAFETY: as above, in the A32 encoding.
    unsafe {
        core::arch::asm!(".word 0xe7f000f0", options(nostack))
    };
}

/// The exception level the kernel was entered at, in AArch64 terms, from what `boot` passes:
/// the level itself on AArch64; on AArch32 the CPSR mode, HYP counting as EL2 and every PL1 mode
/// as EL1.
pub fn entry_level(entry_state: u64) -> u64 {
    if cfg!(target_arch = "arm") {
        return if entry_state == 0x1a { 2 } else { 1 };
    }
    entry_state
}

/// The entry for the banner and the JSON: `EL2`, or on AArch32 the mode (`HYP`, `SVC`).
pub fn entry_name(entry_state: u64) -> &'static str {
    if cfg!(target_arch = "arm") {
        return match entry_state {
            0x1a => "HYP",
            0x13 => "SVC",
            0x1f => "SYS",
            0x16 => "MON",
            _ => "other mode",
        };
    }
    match entry_state {
        3 => "EL3",
        2 => "EL2",
        _ => "EL1",
    }
}
