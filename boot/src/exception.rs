//! What the exception vectors save, and how to name it (Arm ARM D1.10.4 vector offsets, D17.2.37
//! ESR_ELx exception classes).
#![forbid(unsafe_code)]

use core::fmt;

/// Bytes the vectors reserve on the stack for one [`ExceptionFrame`].
pub const FRAME_BYTES: usize = core::mem::size_of::<ExceptionFrame>();

/// Registers at the moment of the exception, as `exception_common` stores them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExceptionFrame {
    pub general_registers: [u64; 31],
    pub elr: u64,
    pub spsr: u64,
    pub esr: u64,
    pub far: u64,
    pub stack_pointer: u64,
}

const _: () = assert!(FRAME_BYTES == 288 && FRAME_BYTES.is_multiple_of(16));

/// Which of the 16 vector entries was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VectorEntry(pub u64);

impl VectorEntry {
    pub fn origin(self) -> &'static str {
        match self.0 / 4 {
            0 => "current EL with SP_EL0",
            1 => "current EL with SP_ELx",
            2 => "lower EL, AArch64",
            _ => "lower EL, AArch32",
        }
    }

    pub fn kind(self) -> &'static str {
        match self.0 % 4 {
            0 => "synchronous",
            1 => "IRQ",
            2 => "FIQ",
            _ => "SError",
        }
    }

    pub fn is_synchronous(self) -> bool {
        self.0.is_multiple_of(4)
    }
}

/// ESR_ELx.EC, bits 31:26.
pub fn exception_class(esr: u64) -> u8 {
    ((esr >> 26) & 0x3f) as u8
}

/// The Arm ARM's name for an exception class.
pub fn exception_class_name(class: u8) -> &'static str {
    match class {
        0x00 => "unknown reason",
        0x01 => "trapped WFI/WFE",
        0x07 => "trapped SVE/SIMD/FP access",
        0x0e => "illegal execution state",
        0x15 => "SVC in AArch64",
        0x16 => "HVC in AArch64",
        0x17 => "SMC in AArch64",
        0x18 => "trapped MSR/MRS/system instruction",
        0x20 => "instruction abort from a lower EL",
        0x21 => "instruction abort without a change of EL",
        0x22 => "PC alignment fault",
        0x24 => "data abort from a lower EL",
        0x25 => "data abort without a change of EL",
        0x26 => "SP alignment fault",
        0x2c => "trapped floating-point exception",
        0x2f => "SError interrupt",
        0x30 => "breakpoint from a lower EL",
        0x31 => "breakpoint without a change of EL",
        0x32 => "software step from a lower EL",
        0x33 => "software step without a change of EL",
        0x34 => "watchpoint from a lower EL",
        0x35 => "watchpoint without a change of EL",
        0x3c => "BRK instruction",
        _ => "reserved or unlisted class",
    }
}

/// For data and instruction aborts: the fault status code (ISS bits 5:0) in words.
pub fn fault_status_name(esr: u64) -> Option<&'static str> {
    let class = exception_class(esr);
    if !matches!(class, 0x20 | 0x21 | 0x24 | 0x25) {
        return None;
    }
    Some(match esr & 0x3f {
        0x00..=0x03 => "address size fault",
        0x04..=0x07 => "translation fault",
        0x09..=0x0b => "access flag fault",
        0x0d..=0x0f => "permission fault",
        0x10 => "synchronous external abort",
        0x21 => "alignment fault",
        0x30 => "TLB conflict abort",
        _ => "other fault",
    })
}

/// The report the kernel prints: class, ESR, ELR, FAR and SPSR on one line each.
pub type ExceptionReport<'a> = crate::ExceptionReport<'a, ExceptionFrame, VectorEntry>;

impl fmt::Display for ExceptionReport<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let frame = self.frame;
        let class = exception_class(frame.esr);
        writeln!(f, "*** EXCEPTION: {} exception from {}", self.vector.kind(), self.vector.origin())?;
        write!(f, "    class  EC {class:#04x}: {}", exception_class_name(class))?;
        if let Some(fault) = fault_status_name(frame.esr) {
            let access = if frame.esr & (1 << 6) != 0 { "write" } else { "read" };
            write!(f, " ({fault}, {access})")?;
        }
        writeln!(f)?;
        writeln!(f, "    ESR    {:#018x}", frame.esr)?;
        writeln!(f, "    ELR    {:#018x}", frame.elr)?;
        writeln!(f, "    FAR    {:#018x}", frame.far)?;
        writeln!(f, "    SPSR   {:#018x}", frame.spsr)?;
        write!(f, "    SP     {:#018x}  LR {:#018x}", frame.stack_pointer, frame.general_registers[30])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_abort_is_named_with_its_fault() {
        // A translation fault at level 1 on a read, taken at EL1: EC 0x25, DFSC 0x05.
        let esr = (0x25 << 26) | (1 << 25) | 0x05;
        assert_eq!(exception_class(esr), 0x25);
        assert_eq!(exception_class_name(0x25), "data abort without a change of EL");
        assert_eq!(fault_status_name(esr), Some("translation fault"));
        assert_eq!(fault_status_name(0x3c << 26), None);
    }

    #[test]
    fn vector_entries_decode() {
        assert_eq!(
            (VectorEntry(4).origin(), VectorEntry(4).kind()),
            ("current EL with SP_ELx", "synchronous")
        );
        assert_eq!(VectorEntry(7).kind(), "SError");
        assert!(VectorEntry(8).is_synchronous());
        assert_eq!(VectorEntry(13).origin(), "lower EL, AArch32");
    }

    #[test]
    fn report_prints_every_register() {
        let mut frame = ExceptionFrame {
            esr: 0x9600_0045,
            elr: 0x8_1234,
            far: 0xdead_0000,
            spsr: 0x3c5,
            ..Default::default()
        };
        frame.general_registers[30] = 0x8_0000;
        let text = std::format!("{}", ExceptionReport { frame: &frame, vector: VectorEntry(4) });
        for needle in [
            "EC 0x25",
            "ESR    0x0000000096000045",
            "ELR    0x0000000000081234",
            "FAR    0x00000000dead0000",
            "SPSR   0x00000000000003c5",
            "write",
        ] {
            assert!(text.contains(needle), "{needle} missing from\n{text}");
        }
    }
}
