//! The AArch32 entry point and exception vectors for the 32-bit Pis (docs/aarch32-pis.md §2-4:
//! Pi 1 firmware enters in Secure SVC, Pi 2 firmware in Non-secure HYP, QEMU's raw image in
//! Non-secure SVC at 0x10000, QEMU's ELF in Secure SVC on every core; ARMv7 ARM B1.8 vectors,
//! B9.1 Hyp mode). Assembled as ARMv6K with VFPv2, so that the one image runs on the ARM1176 and
//! the Cortex-A7; the two ARMv7 virtualization instructions are written as words.
//!
//! `_start`: keeps r2 (ATAGS or DTB), parks every core but the first (MPIDR, read only on the
//! Cortex-A7), leaves HYP for SVC (with the physical counter opened to PL1), copies the image to
//! its link address when the loader put it elsewhere (QEMU's raw image at 0x10000), sets the
//! exception-mode stacks, enables VFP in RunFast mode, zeroes BSS, sets VBAR and calls
//! `barebench_boot_main(r2_at_entry, cpsr_mode_at_entry)`.

core::arch::global_asm!(
    r#"
.arch armv6k
.fpu vfpv2
.arm
.section .text.boot, "ax"
.global _start
_start:
    mov     r10, r2                 // ATAGS or DTB pointer (or 0)
    mrs     r11, cpsr
    and     r11, r11, #0x1f         // the mode at entry, for the banner

    // Only core 0 runs the kernel. The ARM1176 (part 0xB76) is a single core without MPIDR.
    mrc     p15, 0, r3, c0, c0, 0
    ldr     r4, =0xfff0
    and     r4, r3, r4
    ldr     r5, =0xb760
    cmp     r4, r5
    beq     1f
    mrc     p15, 0, r3, c0, c0, 5   // MPIDR: Aff0 in bits 1:0
    tst     r3, #3
    bne     park_core
1:
    // Leave HYP (Pi 2 firmware): open the physical counter to PL1 (CNTHCTL PL1PCTEN|PL1PCEN),
    // CNTVOFF = 0, no traps, then ERET to SVC with A, I, F masked (Linux safe_svcmode_maskall).
    cmp     r11, #0x1a
    bne     2f
    mov     r0, #3
    mcr     p15, 4, r0, c14, c1, 0  // CNTHCTL
    mov     r0, #0
    mov     r1, #0
    mcrr    p15, 4, r0, r1, c14     // CNTVOFF
    mcr     p15, 4, r0, c1, c1, 0   // HCR
    mcr     p15, 4, r0, c1, c1, 2   // HCPTR
    mcr     p15, 4, r0, c1, c1, 3   // HSTR
    mrs     r0, cpsr
    bic     r0, r0, #0x1f
    orr     r0, r0, #0x13
    orr     r0, r0, #0x1c0
    msr     spsr_cxsf, r0           // SPSR_hyp
    adr     lr, 3f
    .word   0xe12ef30e              // msr elr_hyp, lr
    .word   0xe160006e              // eret
2:  cpsid   aif, #0x13
3:
    // Run from the link address: QEMU loads a raw image at 0x10000 (docs/aarch32-pis.md §3).
    // The first part of the copy moves this code itself (the source and destination do not
    // overlap there); the rest runs from the link address, so that the copy never overwrites
    // the instructions doing it. An image loaded below its link address cannot be moved in place.
    adr     r0, _start
    ldr     r1, =_start
    cmp     r0, r1
    beq     5f
    blo     park_core
    ldr     r7, =__data_end         // literals are read here: the pool is not copied yet
    ldr     r8, =40f
    adr     r2, 41f
4:  ldr     r3, [r0], #4
    str     r3, [r1], #4
    cmp     r0, r2
    blo     4b
    mov     pc, r8
40:
44: cmp     r1, r7
    ldrlo   r3, [r0], #4
    strlo   r3, [r1], #4
    blo     44b
    mov     r0, #0
    mcr     p15, 0, r0, c7, c5, 0   // invalidate the instruction cache
    mcr     p15, 0, r0, c7, c10, 4  // DSB
    mcr     p15, 0, r0, c7, c5, 4   // ISB
41:
5:
    // Stacks: one for the exception modes, one for SVC.
    ldr     r0, =__exception_stack_top
    cps     #0x11                   // FIQ
    mov     sp, r0
    cps     #0x12                   // IRQ
    mov     sp, r0
    cps     #0x17                   // Abort
    mov     sp, r0
    cps     #0x1b                   // Undefined
    mov     sp, r0
    cps     #0x13                   // Supervisor
    ldr     sp, =__stack_top

    // VFP before any Rust code (hard-float ABI): CP10/CP11 full access, FPEXC.EN, and FPSCR
    // FZ|DN, the VFP11 RunFast mode (docs/aarch32-pis.md §4 item 3).
    mrc     p15, 0, r0, c1, c0, 2
    orr     r0, r0, #(0xf << 20)
    mcr     p15, 0, r0, c1, c0, 2
    mov     r0, #0
    mcr     p15, 0, r0, c7, c5, 4   // ISB
    mov     r0, #0x40000000
    vmsr    fpexc, r0
    mov     r0, #0x03000000
    vmsr    fpscr, r0

    // SCTLR: vectors through VBAR (V = 0), unaligned accesses as ARMv6/v7 (U = 1).
    mrc     p15, 0, r0, c1, c0, 0
    bic     r0, r0, #(1 << 13)
    orr     r0, r0, #(1 << 22)
    mcr     p15, 0, r0, c1, c0, 0
    ldr     r0, =barebench_exception_vectors
    mcr     p15, 0, r0, c12, c0, 0  // VBAR
    mov     r0, #0
    mcr     p15, 0, r0, c7, c5, 4   // ISB

    ldr     r0, =__bss_start
    ldr     r1, =__bss_end
    mov     r2, #0
6:  cmp     r0, r1
    strlo   r2, [r0], #4
    blo     6b

    mov     r0, r10
    mov     r1, #0
    mov     r2, r11
    mov     r3, #0
    bl      barebench_boot_main
    b       park_core

.global park_core
park_core:
    // WFI, not WFE: under QEMU's TCG a WFE loop keeps a host CPU busy (docs/qemu.md §1). The
    // ARM1176 idles with the CP15 wait-for-interrupt operation, ARMv7 with the WFI instruction.
    cpsid   aif
    mrc     p15, 0, r3, c0, c0, 0
    ldr     r4, =0xfff0
    and     r4, r3, r4
    ldr     r5, =0xb760
    cmp     r4, r5
    mov     r0, #0
7:  mcreq   p15, 0, r0, c7, c0, 4
    wfine
    b       7b

// Vectors (32-byte aligned for VBAR). Each saves r0-r12 on the exception mode's stack, puts
// its index in r0 and joins exception_common, which adds the rest of the frame.
.macro VECTOR index
    sub     sp, sp, #{frame_bytes}
    stmia   sp, {{r0-r12}}
    mov     r0, #\index
    b       exception_common
.endm

.balign 32
.global barebench_exception_vectors
barebench_exception_vectors:
    b       vector_reset
    b       vector_undefined
    b       vector_svc
    b       vector_prefetch_abort
    b       vector_data_abort
    b       vector_reserved
    b       vector_irq
    b       vector_fiq

vector_reset:           VECTOR 0
vector_undefined:       VECTOR 1
vector_svc:             VECTOR 2
vector_prefetch_abort:  VECTOR 3
vector_data_abort:      VECTOR 4
vector_reserved:        VECTOR 5
vector_irq:             VECTOR 6
vector_fiq:             VECTOR 7

exception_common:
    str     lr, [sp, #60]           // return address
    mrs     r1, spsr
    str     r1, [sp, #64]
    // The interrupted mode's SP and LR: switch to it (User is read through System), with
    // interrupts masked, and back.
    mrs     r2, cpsr
    and     r3, r1, #0x1f
    cmp     r3, #0x10
    moveq   r3, #0x1f
    bic     r4, r2, #0x1f
    orr     r4, r4, r3
    orr     r4, r4, #0xc0
    msr     cpsr_c, r4
    mov     r5, sp
    mov     r6, lr
    msr     cpsr_c, r2
    str     r5, [sp, #52]
    str     r6, [sp, #56]
    mrc     p15, 0, r1, c5, c0, 0   // DFSR
    str     r1, [sp, #68]
    mrc     p15, 0, r1, c6, c0, 0   // DFAR
    str     r1, [sp, #72]
    mrc     p15, 0, r1, c5, c0, 1   // IFSR
    str     r1, [sp, #76]
    mrc     p15, 0, r1, c6, c0, 2   // IFAR
    str     r1, [sp, #80]
    mov     r1, r0
    mov     r0, sp
    bl      barebench_exception
    b       park_core
.ltorg
"#,
    frame_bytes = const crate::exception_aarch32::FRAME_BYTES,
);
