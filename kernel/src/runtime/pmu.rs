//! The CPU's performance counters for the benchmark's CPU cost per I/O: cycles in PMCCNTR_EL0
//! and instructions retired (common event 0x08) in event counter 0 (Arm ARM D11 "The
//! Performance Monitors Extension"), with the reason when a counter gives nothing
//! (docs/measurement.md).
//!
//! Under QEMU (TCG) the cycle counter follows the virtual clock at 1 GHz, and INST_RETIRED
//! exists only with `-icount shift=N`: QEMU then sets PMCEID0_EL0 bit 8 and counts exactly
//! (target/arm/helper.c, `instructions_supported`). Without it the bit is clear and the kernel
//! says so instead of printing a count.
//!
//! The 32-bit kernel drives no performance monitor: the ARM1176's counters are IMPLEMENTATION
//! DEFINED CP15 c15 registers (ARM1176JZF-S TRM, c15 Performance Monitor Control Register) and the Cortex-A7's PMUv2 has a 32-bit
//! cycle counter (ARMv7 ARM C12), neither of which is the PMUv3 below; it says so on the `pmu`
//! line and the benchmark reports no CPU cost per I/O.

use bench::cpu_cost::{CounterReading, CounterStatus, CpuCounters};
#[cfg(target_arch = "aarch64")]
use boot::cpu::registers::Pmu;
#[cfg(target_arch = "aarch64")]
use boot::cpu::{
    common_event_implemented, event_counter_count, pmu_version_name, EVENT_INSTRUCTIONS_RETIRED,
};

/// No PMU is driven on 32-bit ARM, so none is ever held.
#[cfg(target_arch = "arm")]
enum Pmu {}

#[cfg(target_arch = "arm")]
impl Pmu {
    fn read(&self) -> (u64, u64) {
        match *self {}
    }
}

/// PMUv3 event counters are 32 bits wide unless PMCR_EL0.LP is set (PMUv3p5), which the kernel
/// leaves clear.
const EVENT_COUNTER_BITS: u32 = 32;
/// Iterations of the loop that checks the counters move.
#[cfg(target_arch = "aarch64")]
const LIVENESS_LOOP_ITERATIONS: u32 = 1000;

#[cfg(target_arch = "aarch64")]
const NO_PMU: &str = "no PMUv3 on this core (ID_AA64DFR0_EL1.PMUVer is 0 or 0xf)";
#[cfg(target_arch = "arm")]
const NO_PMU: &str = "not driven by the 32-bit kernel (ARM1176 c15 counters, Cortex-A7 PMUv2)";
#[cfg(target_arch = "aarch64")]
const NO_EVENT_COUNTER: &str = "no event counter (PMCR_EL0.N = 0)";
#[cfg(target_arch = "aarch64")]
const NO_INSTRUCTION_EVENT: &str =
    "event 0x08 not implemented (PMCEID0_EL0 bit 8 clear; QEMU has it only with -icount shift=N)";
#[cfg(target_arch = "aarch64")]
const NOT_COUNTING: &str = "the counter did not move across a 1000-iteration loop";

/// The PMU as the benchmark sees it.
pub struct PerformanceCounters {
    pmu: Option<Pmu>,
    version: &'static str,
    event_counters: u32,
    cycles: CounterStatus,
    instructions: CounterStatus,
}

impl PerformanceCounters {
    /// No counters: the CPU cost per I/O is not reported.
    fn absent() -> PerformanceCounters {
        PerformanceCounters {
            pmu: None,
            version: "none",
            event_counters: 0,
            cycles: CounterStatus::Unavailable(NO_PMU),
            instructions: CounterStatus::Unavailable(NO_PMU),
        }
    }

    /// On 32-bit ARM: no counters (see the module comment).
    #[cfg(target_arch = "arm")]
    pub fn start() -> PerformanceCounters {
        PerformanceCounters::absent()
    }

    /// Finds the PMU, starts the cycle counter and an INST_RETIRED event counter, and checks that
    /// each one moves.
    #[cfg(target_arch = "aarch64")]
    pub fn start() -> PerformanceCounters {
        let Some(pmu) = Pmu::detect() else {
            return PerformanceCounters::absent();
        };
        let version = pmu_version_name(boot::cpu::registers::debug_features()).unwrap_or("PMUv3");
        let event_counters = event_counter_count(pmu.control());
        let mut instructions = if event_counters == 0 {
            CounterStatus::Unavailable(NO_EVENT_COUNTER)
        } else if !common_event_implemented(pmu.common_events_0(), EVENT_INSTRUCTIONS_RETIRED) {
            CounterStatus::Unavailable(NO_INSTRUCTION_EVENT)
        } else {
            CounterStatus::Counting
        };
        pmu.start(EVENT_INSTRUCTIONS_RETIRED);
        let (cycles_moved, instructions_moved) = counters_move(&pmu);
        let cycles =
            if cycles_moved { CounterStatus::Counting } else { CounterStatus::Unavailable(NOT_COUNTING) };
        if instructions.is_counting() && !instructions_moved {
            instructions = CounterStatus::Unavailable(NOT_COUNTING);
        }
        PerformanceCounters { pmu: Some(pmu), version, event_counters, cycles, instructions }
    }

    /// The banner line: the PMU and what each counter does.
    pub fn describe(&self) -> impl core::fmt::Display + '_ {
        struct Description<'a>(&'a PerformanceCounters);
        impl core::fmt::Display for Description<'_> {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                let counters = self.0;
                if counters.pmu.is_none() {
                    return write!(f, "{NO_PMU}; no CPU cost per I/O");
                }
                write!(
                    f,
                    "{}, {} event counters; cycles (PMCCNTR_EL0): {}; instructions (event 0x08): {}",
                    counters.version, counters.event_counters, counters.cycles, counters.instructions
                )
            }
        }
        Description(self)
    }
}

/// Whether the cycle and event counters move across a short loop.
#[cfg(target_arch = "aarch64")]
fn counters_move(pmu: &Pmu) -> (bool, bool) {
    let (cycles_before, events_before) = pmu.read();
    for iteration in 0..LIVENESS_LOOP_ITERATIONS {
        core::hint::black_box(iteration);
    }
    let (cycles_after, events_after) = pmu.read();
    (cycles_after != cycles_before, events_after != events_before)
}

impl CpuCounters for PerformanceCounters {
    #[inline(always)]
    fn read(&self) -> CounterReading {
        match &self.pmu {
            Some(pmu) => {
                let (cycles, instructions) = pmu.read();
                CounterReading { cycles, instructions }
            }
            None => CounterReading::default(),
        }
    }

    fn cycles_status(&self) -> CounterStatus {
        self.cycles
    }

    fn instructions_status(&self) -> CounterStatus {
        self.instructions
    }

    fn instruction_counter_bits(&self) -> u32 {
        EVENT_COUNTER_BITS
    }
}
