//! The CPU: MIDR decoding (Arm ARM D17.2.100, ARMv7 ARM B4.1.105; part numbers from the
//! ARM1176JZF-S and Cortex-A7/A53/A72/A76 TRMs), the Performance Monitors' identification fields
//! (Arm ARM D11 "The Performance Monitors Extension"; ID_AA64DFR0_EL1, PMCR_EL0, PMCEID0_EL0 in
//! D17.2/D17.5), and on the target the system registers the kernel reads (AArch64 system
//! registers, or the AArch32 CP15 encodings of docs/aarch32-pis.md §4, §5) and the PMU counters
//! it runs ([`registers::Pmu`]).

/// The decoded Main ID Register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MainId(pub u64);

/// The cores the supported boards use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoreModel {
    /// Pi 1 A/B/A+/B+, Zero, Zero W, CM1 (BCM2835); QEMU raspi0, raspi1ap.
    Arm1176,
    /// Pi 2 B v1.0/1.1 (BCM2836); QEMU raspi2b.
    CortexA7,
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
            CoreModel::Arm1176 => "ARM1176JZF-S",
            CoreModel::CortexA7 => "Cortex-A7",
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
            0xb76 => Some(CoreModel::Arm1176),
            0xc07 => Some(CoreModel::CortexA7),
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

/// The PMU version from ID_AA64DFR0_EL1.PMUVer (bits 11:8); `None` when there is no PMUv3
/// (0: not implemented, 0xf: an IMPLEMENTATION DEFINED PMU this code does not drive).
pub fn pmu_version_name(debug_features: u64) -> Option<&'static str> {
    match (debug_features >> 8) & 0xf {
        0 | 0xf => None,
        1 => Some("PMUv3"),
        4 => Some("PMUv3p1"),
        5 => Some("PMUv3p4"),
        6 => Some("PMUv3p5"),
        7 => Some("PMUv3p7"),
        8 => Some("PMUv3p8"),
        9 => Some("PMUv3p9"),
        _ => Some("PMUv3 (later revision)"),
    }
}

/// PMCR_EL0.N (bits 15:11): how many event counters are implemented.
pub fn event_counter_count(performance_control: u64) -> u32 {
    ((performance_control >> 11) & 0x1f) as u32
}

/// Common event INST_RETIRED: instructions architecturally executed (Arm ARM D11.11).
pub const EVENT_INSTRUCTIONS_RETIRED: u32 = 0x08;

/// Whether PMCEID0_EL0 marks common event `event` (0..=31) as implemented.
pub fn common_event_implemented(common_events_0: u64, event: u32) -> bool {
    event < 32 && (common_events_0 >> event) & 1 == 1
}

/// PMCR_EL0 that starts counting: E (enable), P (reset the event counters), C (reset the cycle
/// counter), LC (the cycle counter overflows at 64 bits, not 32).
pub const PMCR_START: u64 = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 6);
/// PMCNTENSET_EL0: the cycle counter (bit 31) and event counter 0.
pub const COUNTERS_ENABLED: u64 = (1 << 31) | 1;

#[cfg(all(target_arch = "arm", target_os = "none"))]
pub mod registers {
    //! Reads of the CP15 registers the kernel reports (AArch32 target only; ARMv7 ARM B4.1,
    //! ARM1176JZF-S TRM §3.2; docs/aarch32-pis.md §4, §5).

    pub fn main_id() -> super::MainId {
        let value: u32;
        // SAFETY: reading MIDR (c0, c0, 0) has no side effects and exists on every ARM core.
        unsafe { core::arch::asm!("mrc p15, 0, {0}, c0, c0, 0", out(reg) value, options(nomem, nostack)) };
        super::MainId(u64::from(value))
    }

    /// MPIDR on ARMv7 (the ARM1176 has none: its c0, c0, 5 reads MIDR).
    pub fn multiprocessor_affinity() -> u64 {
        let value: u32;
        // SAFETY: reading c0, c0, 5 has no side effects on either core.
        unsafe { core::arch::asm!("mrc p15, 0, {0}, c0, c0, 5", out(reg) value, options(nomem, nostack)) };
        u64::from(value)
    }

    /// CNTFRQ (c14, c0, 0). Only on cores with the generic timer (Cortex-A7).
    pub fn counter_frequency_hz() -> u64 {
        let value: u32;
        // SAFETY: reading CNTFRQ has no side effects; callers use it only on a Cortex-A7.
        unsafe { core::arch::asm!("mrc p15, 0, {0}, c14, c0, 0", out(reg) value, options(nomem, nostack)) };
        u64::from(value)
    }

    /// Short-descriptor translation: 32-bit physical addresses (ID_AA64MMFR0's PARange 0).
    pub fn physical_address_range() -> u64 {
        0
    }
}

#[cfg(all(target_arch = "aarch64", target_os = "none"))]
pub mod registers {
    //! Reads of the system registers the kernel reports (target only).
    use aarch64_cpu::registers::{Readable, CNTFRQ_EL0, ID_AA64MMFR0_EL1, MIDR_EL1, MPIDR_EL1};

    pub fn main_id() -> super::MainId {
        super::MainId(MIDR_EL1.get())
    }

    pub fn multiprocessor_affinity() -> u64 {
        MPIDR_EL1.get()
    }

    pub fn counter_frequency_hz() -> u64 {
        CNTFRQ_EL0.get()
    }

    pub fn physical_address_range() -> u64 {
        ID_AA64MMFR0_EL1.read(ID_AA64MMFR0_EL1::PARange)
    }

    /// ID_AA64DFR0_EL1: which debug and performance-monitor features the core has.
    pub fn debug_features() -> u64 {
        let value: u64;
        // SAFETY: ID_AA64DFR0_EL1 is readable at EL1 on every AArch64 core; the read has no side
        // effect.
        unsafe { core::arch::asm!("mrs {}, id_aa64dfr0_el1", out(reg) value, options(nomem, nostack)) };
        value
    }

    /// The PMUv3 of this core. Holding one proves the PMU is implemented, so its registers can be
    /// accessed (on a core without one they are UNDEFINED and would trap).
    #[derive(Clone, Copy, Debug)]
    pub struct Pmu {
        _present: (),
    }

    impl Pmu {
        /// The PMU, if ID_AA64DFR0_EL1.PMUVer says there is a PMUv3.
        pub fn detect() -> Option<Pmu> {
            super::pmu_version_name(debug_features()).map(|_| Pmu { _present: () })
        }

        /// PMCR_EL0.
        pub fn control(&self) -> u64 {
            let value: u64;
            // SAFETY: the PMU exists (see `detect`) and the boot code left its registers untrapped
            // at EL1 (MDCR_EL2/MDCR_EL3); reading PMCR_EL0 has no side effect.
            unsafe { core::arch::asm!("mrs {}, pmcr_el0", out(reg) value, options(nomem, nostack)) };
            value
        }

        /// PMCEID0_EL0: the common events 0x00-0x1f this PMU implements.
        pub fn common_events_0(&self) -> u64 {
            let value: u64;
            // SAFETY: as in `control`; PMCEID0_EL0 is read-only.
            unsafe { core::arch::asm!("mrs {}, pmceid0_el0", out(reg) value, options(nomem, nostack)) };
            value
        }

        /// Counts cycles in PMCCNTR_EL0 and `event` in event counter 0, at EL0 and EL1 (filters
        /// clear), both reset to zero.
        pub fn start(&self, event: u32) {
            // SAFETY: as in `control`. These writes only program the counters: event counter 0
            // selects `event` with no filter, the cycle counter has no filter, both are enabled,
            // and PMCR_EL0 resets and starts them. No memory is touched.
            unsafe {
                core::arch::asm!(
                    "msr pmevtyper0_el0, {event}",
                    "msr pmccfiltr_el0, xzr",
                    "msr pmcntenset_el0, {enabled}",
                    "msr pmcr_el0, {control}",
                    "isb",
                    event = in(reg) u64::from(event),
                    enabled = in(reg) super::COUNTERS_ENABLED,
                    control = in(reg) super::PMCR_START,
                    options(nomem, nostack),
                )
            };
        }

        /// (PMCCNTR_EL0, PMEVCNTR0_EL0) after an ISB, so that every instruction before the
        /// call has been counted.
        #[inline(always)]
        pub fn read(&self) -> (u64, u64) {
            let (cycles, events): (u64, u64);
            // SAFETY: as in `control`; reading the counters has no side effect.
            unsafe {
                core::arch::asm!(
                    "isb",
                    "mrs {cycles}, pmccntr_el0",
                    "mrs {events}, pmevcntr0_el0",
                    cycles = out(reg) cycles,
                    events = out(reg) events,
                    options(nomem, nostack),
                )
            };
            (cycles, events)
        }
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
        // QEMU raspi0/raspi1ap (ARM1176JZF-S r0p7) and raspi2b (Cortex-A7 r0p5).
        assert_eq!(MainId(0x410f_b767).core_model(), Some(CoreModel::Arm1176));
        assert_eq!(MainId(0x410f_c075).core_model(), Some(CoreModel::CortexA7));
        assert_eq!(std::format!("{}", MainId(0x410f_b767)), "ARM1176JZF-S r0p7");
        assert!(std::format!("{}", MainId(0x410f_d400)).contains("part 0xd40"));
    }

    #[test]
    fn pmu_fields_decode() {
        // QEMU's Cortex-A53 ID_AA64DFR0_EL1 (0x10305106): PMUVer 1; Cortex-A76: PMUVer 4.
        assert_eq!(pmu_version_name(0x1030_5106), Some("PMUv3"));
        assert_eq!(pmu_version_name(0x0000_0410), Some("PMUv3p1"));
        assert_eq!(pmu_version_name(0x0000_0006), None);
        assert_eq!(pmu_version_name(0x0000_0f06), None);
        // PMCR_EL0 of a Cortex-A76 (IMP 0x41, IDCODE 0x03, N = 6).
        assert_eq!(event_counter_count(0x4103_3000), 6);
        assert_eq!(event_counter_count(0x0000_0000), 0);
        assert!(common_event_implemented(0x0000_0100, EVENT_INSTRUCTIONS_RETIRED));
        assert!(!common_event_implemented(0x0002_0001, EVENT_INSTRUCTIONS_RETIRED));
        assert!(!common_event_implemented(u64::MAX, 40));
        assert_eq!((PMCR_START, COUNTERS_ENABLED), (0x47, 0x8000_0001));
    }

    #[test]
    fn parange_bits() {
        assert_eq!(physical_address_bits(2), 40);
        assert_eq!(physical_address_bits(5), 48);
    }
}
