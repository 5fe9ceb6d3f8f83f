//! What the AArch32 exception vectors save, and how to name it (ARMv7 ARM B1.8 exception
//! vectors, B4.1.52 DFSR and B4.1.96 IFSR short-descriptor fault status; ARM1176JZF-S TRM §3.2.21
//! for the same encodings on ARMv6; docs/aarch32-pis.md §4).
#![forbid(unsafe_code)]

use core::fmt;

/// Bytes the vectors reserve on the exception mode's stack for one [`ExceptionFrame`].
pub const FRAME_BYTES: usize = core::mem::size_of::<ExceptionFrame>();

/// Registers at the moment of the exception, as `exception_common` in `entry_aarch32.rs` stores
/// them: r0-r12, the interrupted mode's SP and LR, the return address (the exception mode's LR),
/// its SPSR, and the fault registers.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExceptionFrame {
    pub general_registers: [u32; 13],
    pub stack_pointer: u32,
    pub link_register: u32,
    pub return_address: u32,
    pub spsr: u32,
    pub dfsr: u32,
    pub dfar: u32,
    pub ifsr: u32,
    pub ifar: u32,
    pub padding: u32,
}

const _: () = assert!(FRAME_BYTES == 88 && FRAME_BYTES.is_multiple_of(8));

/// Which vector was taken: its offset in the table divided by 4 (ARMv7 ARM table B1-3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VectorEntry(pub u32);

impl VectorEntry {
    pub const UNDEFINED_INSTRUCTION: u32 = 1;
    pub const SUPERVISOR_CALL: u32 = 2;
    pub const PREFETCH_ABORT: u32 = 3;
    pub const DATA_ABORT: u32 = 4;
    pub const IRQ: u32 = 6;
    pub const FIQ: u32 = 7;

    pub fn kind(self) -> &'static str {
        match self.0 {
            Self::UNDEFINED_INSTRUCTION => "undefined instruction",
            Self::SUPERVISOR_CALL => "supervisor call",
            Self::PREFETCH_ABORT => "prefetch abort",
            Self::DATA_ABORT => "data abort",
            Self::IRQ => "IRQ",
            Self::FIQ => "FIQ",
            _ => "unexpected vector",
        }
    }
}

/// The processor mode of a CPSR/SPSR value (ARMv7 ARM B1.3.1 table B1-1).
pub fn mode_name(psr: u32) -> &'static str {
    match psr & 0x1f {
        0x10 => "User",
        0x11 => "FIQ",
        0x12 => "IRQ",
        0x13 => "Supervisor",
        0x16 => "Monitor",
        0x17 => "Abort",
        0x1a => "Hyp",
        0x1b => "Undefined",
        0x1f => "System",
        _ => "reserved mode",
    }
}

/// The short-descriptor fault status (FS[4] = bit 10, FS[3:0] = bits 3:0) in words.
pub fn fault_status_name(status: u32) -> &'static str {
    match ((status >> 6) & 0x10) | (status & 0xf) {
        0x01 => "alignment fault",
        0x02 => "debug event",
        0x03 | 0x06 => "access flag fault",
        0x04 => "instruction cache maintenance fault",
        0x05 | 0x07 => "translation fault",
        0x08 => "synchronous external abort",
        0x09 | 0x0b => "domain fault",
        0x0c | 0x0e => "external abort on translation table walk",
        0x0d | 0x0f => "permission fault",
        0x16 => "asynchronous external abort",
        _ => "other fault",
    }
}

/// The report the kernel prints: vector, mode, fault status and addresses, registers.
pub type ExceptionReport<'a> = crate::ExceptionReport<'a, ExceptionFrame, VectorEntry>;

impl fmt::Display for ExceptionReport<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let frame = self.frame;
        writeln!(
            f,
            "*** EXCEPTION: {} taken from {} mode (SPSR {:#010x})",
            self.vector.kind(),
            mode_name(frame.spsr),
            frame.spsr
        )?;
        match self.vector.0 {
            VectorEntry::DATA_ABORT => {
                let access = if frame.dfsr & (1 << 11) != 0 { "write" } else { "read" };
                writeln!(f, "    DFSR   {:#010x}: {} ({access})", frame.dfsr, fault_status_name(frame.dfsr))?;
                writeln!(f, "    DFAR   {:#010x}", frame.dfar)?;
            }
            VectorEntry::PREFETCH_ABORT => {
                writeln!(f, "    IFSR   {:#010x}: {}", frame.ifsr, fault_status_name(frame.ifsr))?;
                writeln!(f, "    IFAR   {:#010x}", frame.ifar)?;
            }
            _ => {}
        }
        // The return address is the faulting instruction + 8 for aborts, + 4 otherwise.
        writeln!(f, "    PC     {:#010x} (exception LR)", frame.return_address)?;
        write!(f, "    SP     {:#010x}  LR {:#010x}", frame.stack_pointer, frame.link_register)?;
        for (index, value) in frame.general_registers.iter().enumerate() {
            if index % 4 == 0 {
                write!(f, "\n   ")?;
            }
            write!(f, " r{index:<2} {value:#010x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_abort_names_its_fault_access_and_address() {
        // A translation fault (section, FS 0b00101) on a write, from Supervisor mode.
        let frame = ExceptionFrame {
            dfsr: 0x805,
            dfar: 0xdead_0000,
            spsr: 0x6000_01d3,
            return_address: 0x8124,
            ..Default::default()
        };
        let text = std::format!("{}", ExceptionReport { frame: &frame, vector: VectorEntry(4) });
        for needle in [
            "data abort taken from Supervisor mode",
            "DFSR   0x00000805: translation fault (write)",
            "DFAR   0xdead0000",
            "PC     0x00008124",
            "r12",
        ] {
            assert!(text.contains(needle), "{needle} missing from\n{text}");
        }
        assert!(!text.contains("IFSR"));
    }

    #[test]
    fn fault_status_uses_both_fs_fields() {
        assert_eq!(fault_status_name(0x001), "alignment fault");
        assert_eq!(fault_status_name(0x00d), "permission fault");
        // FS[4] in bit 10: 0b10110 is an asynchronous external abort.
        assert_eq!(fault_status_name(0x406), "asynchronous external abort");
        assert_eq!(fault_status_name(0x006), "access flag fault");
        assert_eq!(fault_status_name(0x008), "synchronous external abort");
    }

    #[test]
    fn vectors_and_modes_have_names() {
        assert_eq!(VectorEntry(1).kind(), "undefined instruction");
        assert_eq!(VectorEntry(3).kind(), "prefetch abort");
        assert_eq!(VectorEntry(0).kind(), "unexpected vector");
        assert_eq!(mode_name(0x1d3), "Supervisor");
        assert_eq!(mode_name(0x1da), "Hyp");
        assert_eq!(mode_name(0x10), "User");
        let frame = ExceptionFrame { ifsr: 0x5, ifar: 0x4000_0000, ..Default::default() };
        let text = std::format!("{}", ExceptionReport { frame: &frame, vector: VectorEntry(3) });
        assert!(text.contains("IFSR   0x00000005: translation fault"), "{text}");
        assert!(text.contains("IFAR   0x40000000"), "{text}");
    }
}
