//! The CPU: MIDR_EL1 decoding (Arm ARM D17.2.100; part numbers from the Cortex-A53/A72/A76 TRMs),
//! and on the target the system registers the kernel reads.

/// The decoded Main ID Register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MainId(pub u64);

/// The cores the supported boards use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoreModel {
    /// Pi 3, Zero 2 W (BCM2837 / RP3A0); QEMU raspi3b.
    CortexA53,
    /// QEMU virt `-cpu cortex-a57`.
    CortexA57,
    /// Pi 4, 400, CM4 (BCM2711); QEMU raspi4b.
    CortexA72,
    /// Pi 5 (BCM2712).
    CortexA76,
}

impl CoreModel {
    pub fn name(self) -> &'static str {
        match self {
            CoreModel::CortexA53 => "Cortex-A53",
            CoreModel::CortexA57 => "Cortex-A57",
            CoreModel::CortexA72 => "Cortex-A72",
            CoreModel::CortexA76 => "Cortex-A76",
        }
    }
}

impl MainId {
    pub fn implementer(self) -> u8 {
        (self.0 >> 24) as u8
    }
    pub fn variant(self) -> u8 {
        ((self.0 >> 20) & 0xf) as u8
    }
    pub fn part_number(self) -> u16 {
        ((self.0 >> 4) & 0xfff) as u16
    }
    pub fn revision(self) -> u8 {
        (self.0 & 0xf) as u8
    }

    /// The core model, when the implementer is Arm (0x41) and the part is one we know.
    pub fn core_model(self) -> Option<CoreModel> {
        if self.implementer() != 0x41 {
            return None;
        }
        match self.part_number() {
            0xd03 => Some(CoreModel::CortexA53),
            0xd07 => Some(CoreModel::CortexA57),
            0xd08 => Some(CoreModel::CortexA72),
            0xd0b => Some(CoreModel::CortexA76),
            _ => None,
        }
    }
}

impl core::fmt::Display for MainId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.core_model() {
            Some(model) => write!(f, "{} r{}p{}", model.name(), self.variant(), self.revision()),
            None => write!(
                f,
                "unknown core (implementer {:#04x}, part {:#05x})",
                self.implementer(),
                self.part_number()
            ),
        }
    }
}

/// Physical address bits from ID_AA64MMFR0_EL1.PARange (Arm ARM D17.2.64).
pub fn physical_address_bits(parange: u64) -> u32 {
    match parange & 0xf {
        0 => 32,
        1 => 36,
        2 => 40,
        3 => 42,
        4 => 44,
        5 => 48,
        _ => 52,
    }
}

#[cfg(all(target_arch = "aarch64", target_os = "none"))]
pub mod registers {
    //! Reads of the system registers the kernel reports (target only).
    use aarch64_cpu::registers::{Readable, CNTFRQ_EL0, CNTPCT_EL0, ID_AA64MMFR0_EL1, MIDR_EL1, MPIDR_EL1};

    pub fn main_id() -> super::MainId {
        super::MainId(MIDR_EL1.get())
    }

    pub fn multiprocessor_affinity() -> u64 {
        MPIDR_EL1.get()
    }

    pub fn counter_frequency_hz() -> u64 {
        CNTFRQ_EL0.get()
    }

    /// CNTPCT_EL0 after an ISB, so the read is not hoisted (docs/hardware.md §1.5).
    #[inline(always)]
    pub fn counter_ticks() -> u64 {
        aarch64_cpu::asm::barrier::isb(aarch64_cpu::asm::barrier::SY);
        CNTPCT_EL0.get()
    }

    pub fn physical_address_range() -> u64 {
        ID_AA64MMFR0_EL1.read(ID_AA64MMFR0_EL1::PARange)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qemu_and_pi_cores_decode() {
        // QEMU raspi3b and raspi4b MIDR values (docs/qemu.md §1); Pi 5 Cortex-A76 r4p1.
        assert_eq!(MainId(0x410f_d034).core_model(), Some(CoreModel::CortexA53));
        assert_eq!(MainId(0x410f_d083).core_model(), Some(CoreModel::CortexA72));
        assert_eq!(MainId(0x414f_d0b1).core_model(), Some(CoreModel::CortexA76));
        assert_eq!(std::format!("{}", MainId(0x410f_d034)), "Cortex-A53 r0p4");
        assert_eq!(MainId(0x510f_8000).core_model(), None);
        assert!(std::format!("{}", MainId(0x410f_d400)).contains("part 0xd40"));
    }

    #[test]
    fn parange_bits() {
        assert_eq!(physical_address_bits(2), 40);
        assert_eq!(physical_address_bits(5), 48);
    }
}
