//! The entry point and exception vectors (Arm ARM D1.10 "Exception entry", D13 system registers).
//! Register values follow docs/hardware.md §4 and docs/qemu.md §6.

core::arch::global_asm!(
    r#"
.section .text.boot, "ax"
.global _start
_start:
    // x0 holds the DTB or ATAGS pointer (or 0); keep it in x19 for the kernel.
    mov     x19, x0

    // Only core 0 runs the kernel. Cores are numbered in Aff0, except on CPUs that set MPIDR.MT
    // (bit 24), such as the Pi 5's Cortex-A76, which number them in Aff1 (docs/hardware.md §4.3).
    mrs     x1, mpidr_el1
    and     x2, x1, #0xff
    ubfx    x3, x1, #8, #8
    tst     x1, #(1 << 24)
    csel    x2, x3, x2, ne
    cbnz    x2, park_core

    mrs     x20, CurrentEL
    ubfx    x20, x20, #2, #2
    cmp     x20, #3
    b.eq    from_el3
    cmp     x20, #2
    b.eq    from_el2
    b       at_el1

from_el3:
    // EL3 (QEMU raspi with an ELF): no FP traps; lower levels non-secure, EL2 AArch64, HVC on.
    msr     cptr_el3, xzr
    msr     mdcr_el3, xzr           // no debug or PMU access trapped to EL3
    mov     x0, #0x5b1              // SCR_EL3: NS | RES1 (bits 5:4) | SMD | HCE | RW
    msr     scr_el3, x0
    bl      configure_el2_for_el1
    mov     x0, #0x3c5              // EL1h with D, A, I, F masked
    msr     spsr_el3, x0
    adr     x0, at_el1
    msr     elr_el3, x0
    eret

from_el2:
    bl      configure_el2_for_el1
    mov     x0, #0x3c5
    msr     spsr_el2, x0
    adr     x0, at_el1
    msr     elr_el2, x0
    eret

configure_el2_for_el1:
    mov     x0, #(1 << 31)          // HCR_EL2.RW: EL1 is AArch64; nothing trapped to EL2
    msr     hcr_el2, x0
    mov     x0, #3                  // CNTHCTL_EL2: EL1PCTEN | EL1PCEN (physical timer at EL1)
    msr     cnthctl_el2, x0
    msr     cntvoff_el2, xzr
    mov     x0, #0x33ff             // CPTR_EL2: RES1 bits, TFP clear (no FP/SIMD trap)
    msr     cptr_el2, x0
    msr     hstr_el2, xzr
    ldr     x0, =0x30d00800         // SCTLR_EL1: RES1 bits only; MMU and caches off
    msr     sctlr_el1, x0
    // MDCR_EL2: every PMU counter to EL1 (HPMN = PMCR_EL0.N) and nothing trapped to EL2, so the
    // kernel can count cycles and instructions. Only with a PMUv3 (ID_AA64DFR0_EL1.PMUVer not 0
    // or 0xf): without one PMCR_EL0 is UNDEFINED.
    mrs     x0, id_aa64dfr0_el1
    ubfx    x0, x0, #8, #4
    cbz     x0, 4f
    cmp     x0, #0xf
    b.eq    4f
    mrs     x0, pmcr_el0
    ubfx    x0, x0, #11, #5
    msr     mdcr_el2, x0
4:  ret

at_el1:
    // FP/SIMD before any Rust code: the target enables NEON and the compiler uses it freely.
    mov     x0, #(3 << 20)          // CPACR_EL1.FPEN = 0b11
    msr     cpacr_el1, x0
    isb
    ldr     x0, =__stack_top
    mov     sp, x0
    ldr     x0, =__bss_start
    ldr     x1, =__bss_end
1:  cmp     x0, x1
    b.hs    2f
    stp     xzr, xzr, [x0], #16
    b       1b
2:  ldr     x0, =barebench_exception_vectors
    msr     vbar_el1, x0
    isb
    mov     x0, x19
    mov     x1, x20
    bl      barebench_boot_main
    b       park_core

.global park_core
park_core:
    // WFI, not WFE: QEMU's TCG turns WFE into a busy yield that eats a host CPU (docs/qemu.md §1).
    msr     daifset, #0xf
3:  wfi
    b       3b

// Exception vectors: 16 entries of 0x80 bytes. Each saves x0/x1, puts its index in x1 and
// branches to the common code, which saves the rest and calls the kernel's handler.
.macro VECTOR index
    .balign 0x80
    sub     sp, sp, #{frame_bytes}
    stp     x0, x1, [sp, #0]
    mov     x1, #\index
    b       exception_common
.endm

// The synchronous entry for the kernel's own level first checks whether the fault is the load
// in `barebench_probe_read32`: that one resumes at the probe's fault exit instead of stopping.
.macro PROBE_VECTOR index
    .balign 0x80
    sub     sp, sp, #{frame_bytes}
    stp     x0, x1, [sp, #0]
    mrs     x0, elr_el1
    adrp    x1, barebench_probe_load
    add     x1, x1, :lo12:barebench_probe_load
    cmp     x0, x1
    b.ne    1f
    adrp    x1, barebench_probe_fault
    add     x1, x1, :lo12:barebench_probe_fault
    msr     elr_el1, x1
    ldp     x0, x1, [sp, #0]
    add     sp, sp, #{frame_bytes}
    eret
1:  mov     x1, #\index
    b       exception_common
.endm

.balign 0x800
.global barebench_exception_vectors
barebench_exception_vectors:
    VECTOR 0
    VECTOR 1
    VECTOR 2
    VECTOR 3
    PROBE_VECTOR 4
    VECTOR 5
    VECTOR 6
    VECTOR 7
    VECTOR 8
    VECTOR 9
    VECTOR 10
    VECTOR 11
    VECTOR 12
    VECTOR 13
    VECTOR 14
    VECTOR 15

// A 32-bit read that may fault (a register block that is not there): x0 = address; returns
// x0 = value, x1 = 0, or x0 = 0, x1 = 1 when the load faulted (see PROBE_VECTOR).
.global barebench_probe_read32
barebench_probe_read32:
barebench_probe_load:
    ldr     w0, [x0]
    mov     x1, #0
    ret
barebench_probe_fault:
    mov     x0, #0
    mov     x1, #1
    ret

exception_common:
    stp     x2, x3, [sp, #16]
    stp     x4, x5, [sp, #32]
    stp     x6, x7, [sp, #48]
    stp     x8, x9, [sp, #64]
    stp     x10, x11, [sp, #80]
    stp     x12, x13, [sp, #96]
    stp     x14, x15, [sp, #112]
    stp     x16, x17, [sp, #128]
    stp     x18, x19, [sp, #144]
    stp     x20, x21, [sp, #160]
    stp     x22, x23, [sp, #176]
    stp     x24, x25, [sp, #192]
    stp     x26, x27, [sp, #208]
    stp     x28, x29, [sp, #224]
    mrs     x2, elr_el1
    stp     x30, x2, [sp, #240]
    mrs     x2, spsr_el1
    mrs     x3, esr_el1
    stp     x2, x3, [sp, #256]
    mrs     x2, far_el1
    add     x3, sp, #{frame_bytes}
    stp     x2, x3, [sp, #272]
    mov     x0, sp
    bl      barebench_exception
    b       park_core
"#,
    frame_bytes = const crate::exception::FRAME_BYTES,
);
