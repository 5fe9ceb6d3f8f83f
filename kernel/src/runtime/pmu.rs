//! The CPU's performance counters for the benchmark's CPU cost per I/O: cycles in PMCCNTR_EL0
//! and instructions retired (common event 0x08) in event counter 0 (Arm ARM D11 "The
//! Performance Monitors Extension"), with the reason when a counter gives nothing
//! (docs/measurement.md).
//!
//! Under QEMU (TCG) the cycle counter follows the virtual clock at 1 GHz, and INST_RETIRED
//! exists only with `-icount shift=N`: QEMU then sets PMCEID0_EL0 bit 8 and counts exactly
//! (target/arm/helper.c, `instructions_supported`). Without it the bit is clear and the kernel
//! says so instead of printing a count.

use bench::cpu_cost::{CounterReading, CounterStatus, CpuCounters};
use boot::cpu::registers::Pmu;
use boot::cpu::{
    common_event_implemented, event_counter_count, pmu_version_name, EVENT_INSTRUCTIONS_RETIRED,
};

/// PMUv3 event counters are 32 bits wide unless PMCR_EL0.LP is set (PMUv3p5), which the kernel
/// leaves clear.
const EVENT_COUNTER_BITS: u32 = 32;
/// Iterations of the loop that checks the counters move.
const LIVENESS_LOOP_ITERATIONS: u32 = 1000;

const NO_PMU: &str = "no PMUv3 on this core (ID_AA64DFR0_EL1.PMUVer is 0 or 0xf)";
const NO_EVENT_COUNTER: &str = "no event counter (PMCR_EL0.N = 0)";
const NO_INSTRUCTION_EVENT: &str =
    "event 0x08 not implemented (PMCEID0_EL0 bit 8 clear; QEMU has it only with -icount shift=N)";
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
    /// Finds the PMU, starts the cycle counter and an INST_RETIRED event counter, and checks that
    /// each one moves.
    pub fn start() -> PerformanceCounters {
        let Some(pmu) = Pmu::detect() else {
            return PerformanceCounters {
                pmu: None,
                version: "none",
                event_counters: 0,
                cycles: CounterStatus::Unavailable(NO_PMU),
                instructions: CounterStatus::Unavailable(NO_PMU),
            };
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
