//! CPU cost per I/O: instructions retired and cycles spent in the driver (its `submit`, `kick`
//! and the `poll`s that return completions) and in the benchmark's own bookkeeping (offsets,
//! timestamps, statistics, histograms), read from the CPU's performance counters through
//! [`CpuCounters`] (Arm ARM D11 "The Performance Monitors Extension": PMCCNTR_EL0 and event 0x08
//! INST_RETIRED; docs/measurement.md).
//!
//! The runner calls [`CpuMeter::lap`] at every boundary between driver code and its own; each lap
//! charges what the counters moved since the previous lap to one [`Account`]. Polls that find
//! nothing, and the loop around them, are waiting, not work: they are charged to
//! [`Account::Pending`] and dropped unless the same loop pass submits or completes something: the
//! lap that ends a pass says which ([`Account::PassDidIo`], [`Account::PassWaited`]). What one lap
//! itself costs, the pending account's resolution included (every lap runs the same instructions),
//! is measured when the meter starts and taken off every lap, so the counts are those of the code
//! between the laps.

use core::fmt;

/// One reading of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CounterReading {
    /// Processor cycles (PMCCNTR_EL0 in the kernel).
    pub cycles: u64,
    /// Instructions retired (an event counter programmed with event 0x08 in the kernel).
    pub instructions: u64,
}

/// Whether a counter gives figures, and if not, why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CounterStatus {
    Counting,
    /// Not counted; the text says why (printed after "instructions: " or "cycles: ").
    Unavailable(&'static str),
}

impl Default for CounterStatus {
    fn default() -> Self {
        CounterStatus::Unavailable("not measured")
    }
}

impl CounterStatus {
    pub fn is_counting(self) -> bool {
        self == CounterStatus::Counting
    }
}

impl fmt::Display for CounterStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CounterStatus::Counting => f.write_str("counting"),
            CounterStatus::Unavailable(reason) => f.write_str(reason),
        }
    }
}

/// The CPU's cycle and instruction counters: the PMU in the kernel, a model in host tests.
pub trait CpuCounters {
    /// Both counters now. A counter that is not [`CounterStatus::Counting`] may read anything.
    fn read(&self) -> CounterReading;

    fn cycles_status(&self) -> CounterStatus;

    fn instructions_status(&self) -> CounterStatus;

    /// Width of the instruction counter: differences are taken modulo 2^bits (PMUv3 event
    /// counters are 32 bits wide).
    fn instruction_counter_bits(&self) -> u32 {
        64
    }
}

/// For machines without counters: nothing is measured, and the figures say why.
pub struct NoCpuCounters(pub &'static str);

impl CpuCounters for NoCpuCounters {
    fn read(&self) -> CounterReading {
        CounterReading::default()
    }

    fn cycles_status(&self) -> CounterStatus {
        CounterStatus::Unavailable(self.0)
    }

    fn instructions_status(&self) -> CounterStatus {
        CounterStatus::Unavailable(self.0)
    }
}

/// Where the CPU time since the previous lap goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Account {
    /// The driver's `submit`, `kick`, or a `poll` that returned completions.
    Driver = 0,
    /// The benchmark's own work for I/Os that were submitted or completed.
    Bookkeeping = 1,
    /// The benchmark's loop, before it is known whether this pass does any I/O.
    Pending = 2,
    /// Waiting (a poll that found nothing) or output: not part of any I/O's cost.
    Excluded = 3,
    /// Storing a completed command in the `trace=` ring (bench::trace): measured apart so the
    /// recording cost per I/O can be printed; the benchmark's bookkeeping does not include it.
    Recording = 4,
    /// Ends a pass of the loop that submitted or completed I/O: charged as bookkeeping, and what
    /// the pass left pending becomes bookkeeping too. Not an account of its own.
    PassDidIo = 5,
    /// Ends a pass that only waited: charged as excluded, and what the pass left pending is
    /// dropped, so that its tail is never a later pass's cost. Not an account of its own.
    PassWaited = 6,
}

/// How many [`Account`]s hold totals (the two pass-ending laps charge two of them).
const ACCOUNTS: usize = 5;

/// What a lap does, per [`Account`]: the account it charges, and two masks applied to the pending
/// account afterwards (what of it moves to bookkeeping, what of it stays pending), so that every
/// lap runs the same instructions whatever it names and the calibration measures each exactly.
#[derive(Clone, Copy)]
struct LapRule {
    charged: usize,
    pending_to_bookkeeping: u64,
    pending_kept: u64,
}

const fn charges(account: Account) -> LapRule {
    LapRule { charged: account as usize, pending_to_bookkeeping: 0, pending_kept: u64::MAX }
}

/// Indexed by [`Account`].
const LAP_RULES: [LapRule; 7] = [
    charges(Account::Driver),
    charges(Account::Bookkeeping),
    charges(Account::Pending),
    charges(Account::Excluded),
    charges(Account::Recording),
    LapRule { charged: Account::Bookkeeping as usize, pending_to_bookkeeping: u64::MAX, pending_kept: 0 },
    LapRule { charged: Account::Excluded as usize, pending_to_bookkeeping: 0, pending_kept: 0 },
];

/// Instructions and cycles summed over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CounterTotals {
    pub instructions: u64,
    pub cycles: u64,
}

impl CounterTotals {
    fn add(&mut self, delta: CounterTotals) {
        self.instructions += delta.instructions;
        self.cycles += delta.cycles;
    }
}

/// What one run cost the CPU, summed over every I/O that completed in it (ramp and drain
/// included: the driver does the same work for them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuCost {
    /// Completions the totals cover.
    pub ios: u64,
    pub driver: CounterTotals,
    pub bookkeeping: CounterTotals,
    /// Everything the counters moved over the run, waiting and output included.
    pub whole_run: CounterTotals,
    pub instructions_counted: bool,
    pub cycles_counted: bool,
}

/// Thousandths per unit: the fixed-point scale of per-I/O figures.
pub const MILLI_PER_UNIT: u128 = 1000;

impl CpuCost {
    /// The share of the run's cycles spent in the driver and the benchmark's bookkeeping rather
    /// than waiting for the device (polls that found nothing) or printing, in millionths of a
    /// percent; `None` when cycles were not counted. barebench's `usr_cpu` (docs/fio-json.md §10).
    pub fn busy_percent_micro(&self) -> Option<u128> {
        let busy = u128::from(self.driver.cycles) + u128::from(self.bookkeeping.cycles);
        let whole = u128::from(self.whole_run.cycles);
        (self.cycles_counted && whole > 0).then(|| (busy * 100_000_000 / whole).min(100_000_000))
    }

    /// Per-I/O figures in thousandths, `None` where a counter did not count or nothing completed.
    pub fn per_io(&self) -> CpuPerIo {
        let per_io = |total: u64, counted: bool| {
            (counted && self.ios > 0).then(|| u128::from(total) * MILLI_PER_UNIT / u128::from(self.ios))
        };
        CpuPerIo {
            driver_instructions_milli: per_io(self.driver.instructions, self.instructions_counted),
            driver_cycles_milli: per_io(self.driver.cycles, self.cycles_counted),
            bookkeeping_instructions_milli: per_io(self.bookkeeping.instructions, self.instructions_counted),
            bookkeeping_cycles_milli: per_io(self.bookkeeping.cycles, self.cycles_counted),
        }
    }
}

/// CPU cost per I/O in thousandths of an instruction or cycle; `None` = not measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuPerIo {
    pub driver_instructions_milli: Option<u128>,
    pub driver_cycles_milli: Option<u128>,
    pub bookkeeping_instructions_milli: Option<u128>,
    pub bookkeeping_cycles_milli: Option<u128>,
}

impl CpuPerIo {
    /// The four figures with their JSON names, in the order the console prints them.
    pub fn named(&self) -> [(&'static str, Option<u128>); 4] {
        [
            ("driver_instructions", self.driver_instructions_milli),
            ("driver_cycles", self.driver_cycles_milli),
            ("bookkeeping_instructions", self.bookkeeping_instructions_milli),
            ("bookkeeping_cycles", self.bookkeeping_cycles_milli),
        ]
    }
}

/// Marks the end of a run's metering for the instruction profile (`barebench qemu --profile`,
/// docs/measurement.md §18), which stops at this function's first instruction and reads the
/// run's completions from `x0`: the C calling convention fixes where the argument is. It does
/// nothing else.
#[inline(never)]
pub extern "C" fn run_metered(ios: u64) -> u64 {
    core::hint::black_box(ios)
}

/// Laps used to measure what a lap costs.
const CALIBRATION_LAPS: u32 = 16;

/// Charges CPU time to driver and bookkeeping over one run.
pub struct CpuMeter<'c> {
    counters: &'c dyn CpuCounters,
    /// False when neither counter counts: laps then do nothing.
    active: bool,
    instructions_mask: u64,
    last: CounterReading,
    /// What a lap with nothing between it and the previous one measures.
    lap_cost: CounterTotals,
    /// Indexed by [`Account`] (the five that hold totals).
    accounts: [CounterTotals; ACCOUNTS],
    cost: CpuCost,
    /// The reading when the run started (after calibration).
    started: CounterReading,
}

impl<'c> CpuMeter<'c> {
    /// A meter for one run; measures its own lap cost first.
    pub fn new(counters: &'c dyn CpuCounters) -> CpuMeter<'c> {
        let cost = CpuCost {
            instructions_counted: counters.instructions_status().is_counting(),
            cycles_counted: counters.cycles_status().is_counting(),
            ..CpuCost::default()
        };
        let bits = counters.instruction_counter_bits().min(64);
        let mut meter = CpuMeter {
            counters,
            active: cost.instructions_counted || cost.cycles_counted,
            instructions_mask: if bits == 64 { u64::MAX } else { (1u64 << bits) - 1 },
            last: counters.read(),
            lap_cost: CounterTotals::default(),
            accounts: [CounterTotals::default(); ACCOUNTS],
            cost,
            started: CounterReading::default(),
        };
        meter.calibrate();
        meter.started = meter.last;
        meter
    }

    /// Measures the cost of a lap as the smallest of a few pairs of back-to-back laps: between the
    /// two readings of a pair runs nothing but the end of the first lap, the second one's call
    /// (its arguments and the branch) and its start, which is what every lap adds to the code it
    /// measures. (Keeping the loop's own instructions out of the pair makes each lap's figure the
    /// code between the laps, to the instruction; the instruction profile relies on that,
    /// docs/measurement.md §18.)
    fn calibrate(&mut self) {
        if !self.active {
            return;
        }
        let mut cheapest = CounterTotals { instructions: u64::MAX, cycles: u64::MAX };
        for _ in 0..CALIBRATION_LAPS {
            self.lap(Account::Excluded);
            let delta = self.lap(Account::Excluded);
            cheapest.instructions = cheapest.instructions.min(delta.instructions);
            cheapest.cycles = cheapest.cycles.min(delta.cycles);
        }
        self.lap_cost = cheapest;
    }

    /// Charges what the counters moved since the previous lap (less the lap's own cost) to
    /// `account`, and returns it. A lap that ends a pass ([`Account::PassDidIo`],
    /// [`Account::PassWaited`]) also resolves what the pass left pending: to bookkeeping when the
    /// pass did I/O, dropped when it only waited, so that a pass that only waited never adds its
    /// tail to the next pass's cost (whether a completion is seen at the first poll after the
    /// doorbell or only a few polls later then changes nothing). Never inlined: the instruction
    /// profile (`barebench qemu --profile`) watches it, and [`run_metered`].
    #[inline(never)]
    pub fn lap(&mut self, account: Account) -> CounterTotals {
        if !self.active {
            return CounterTotals::default();
        }
        let now = self.counters.read();
        let delta = CounterTotals {
            instructions: (now.instructions.wrapping_sub(self.last.instructions) & self.instructions_mask)
                .saturating_sub(self.lap_cost.instructions),
            cycles: now.cycles.wrapping_sub(self.last.cycles).saturating_sub(self.lap_cost.cycles),
        };
        self.last = now;
        let rule = LAP_RULES[account as usize];
        self.accounts[rule.charged].add(delta);
        let pending = self.accounts[Account::Pending as usize];
        self.accounts[Account::Bookkeeping as usize].add(CounterTotals {
            instructions: pending.instructions & rule.pending_to_bookkeeping,
            cycles: pending.cycles & rule.pending_to_bookkeeping,
        });
        self.accounts[Account::Pending as usize] = CounterTotals {
            instructions: pending.instructions & rule.pending_kept,
            cycles: pending.cycles & rule.pending_kept,
        };
        delta
    }

    /// What has been charged to `account` so far.
    pub fn total(&self, account: Account) -> CounterTotals {
        self.accounts[account as usize]
    }

    /// The totals, for `ios` completions.
    pub fn finish(self, ios: u64) -> CpuCost {
        run_metered(ios);
        let now = if self.active { self.counters.read() } else { self.started };
        let whole_run = CounterTotals {
            instructions: now.instructions.wrapping_sub(self.started.instructions) & self.instructions_mask,
            cycles: now.cycles.wrapping_sub(self.started.cycles),
        };
        CpuCost {
            ios,
            whole_run,
            driver: self.accounts[Account::Driver as usize],
            bookkeeping: self.accounts[Account::Bookkeeping as usize],
            ..self.cost
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use core::cell::Cell;

    /// Counters that a test moves by hand: every `read` itself costs `read_cost` of each.
    pub(crate) struct ModelCounters {
        pub now: Cell<CounterReading>,
        pub read_cost: u64,
        pub instructions: CounterStatus,
        pub bits: u32,
    }

    impl ModelCounters {
        pub(crate) fn new(read_cost: u64) -> ModelCounters {
            ModelCounters {
                now: Cell::new(CounterReading::default()),
                read_cost,
                instructions: CounterStatus::Counting,
                bits: 64,
            }
        }

        /// Code that runs `instructions` instructions in twice as many cycles.
        pub(crate) fn run(&self, instructions: u64) {
            let now = self.now.get();
            self.now.set(CounterReading {
                instructions: now.instructions.wrapping_add(instructions),
                cycles: now.cycles + 2 * instructions,
            });
        }
    }

    impl CpuCounters for ModelCounters {
        fn read(&self) -> CounterReading {
            self.run(self.read_cost);
            let now = self.now.get();
            let mask = if self.bits == 64 { u64::MAX } else { (1 << self.bits) - 1 };
            CounterReading { instructions: now.instructions & mask, cycles: now.cycles }
        }
        fn cycles_status(&self) -> CounterStatus {
            CounterStatus::Counting
        }
        fn instructions_status(&self) -> CounterStatus {
            self.instructions
        }
        fn instruction_counter_bits(&self) -> u32 {
            self.bits
        }
    }

    #[test]
    fn laps_charge_the_code_between_them_without_their_own_cost() {
        let counters = ModelCounters::new(7);
        let mut meter = CpuMeter::new(&counters);
        meter.lap(Account::Excluded);
        counters.run(100);
        meter.lap(Account::Driver);
        counters.run(30);
        meter.lap(Account::Bookkeeping);
        counters.run(5);
        meter.lap(Account::Driver);
        counters.run(1_000_000);
        meter.lap(Account::Excluded);
        let cost = meter.finish(1);
        assert_eq!(cost.driver, CounterTotals { instructions: 105, cycles: 210 });
        assert_eq!(cost.bookkeeping, CounterTotals { instructions: 30, cycles: 60 });
        let per_io = cost.per_io();
        assert_eq!(per_io.driver_instructions_milli, Some(105_000));
        assert_eq!(per_io.bookkeeping_cycles_milli, Some(60_000));
    }

    #[test]
    fn the_busy_share_is_driver_and_bookkeeping_cycles_over_the_whole_run() {
        let counters = ModelCounters::new(0);
        let mut meter = CpuMeter::new(&counters);
        counters.run(100);
        meter.lap(Account::Driver);
        counters.run(30);
        meter.lap(Account::Bookkeeping);
        counters.run(870); // waiting
        meter.lap(Account::Excluded);
        counters.run(250); // after the last lap: part of the run, nobody's cost
        let cost = meter.finish(1);
        assert_eq!(cost.whole_run, CounterTotals { instructions: 1250, cycles: 2500 });
        // 260 of 2500 cycles: 10.4 %.
        assert_eq!(cost.busy_percent_micro(), Some(10_400_000));
        let none = CpuMeter::new(&NoCpuCounters("absent")).finish(1);
        assert_eq!(none.busy_percent_micro(), None);
    }

    /// A 64-bit instruction counter that leaves the width at its default.
    struct WideCounter(Cell<u64>);

    impl CpuCounters for WideCounter {
        fn read(&self) -> CounterReading {
            CounterReading { cycles: 0, instructions: self.0.get() }
        }
        fn cycles_status(&self) -> CounterStatus {
            CounterStatus::Unavailable("not modelled")
        }
        fn instructions_status(&self) -> CounterStatus {
            CounterStatus::Counting
        }
    }

    #[test]
    fn a_counter_is_64_bits_wide_unless_it_says_otherwise() {
        let counter = WideCounter(Cell::new(u64::from(u32::MAX) - 5));
        let mut meter = CpuMeter::new(&counter);
        counter.0.set(counter.0.get() + (1 << 33) + 10);
        meter.lap(Account::Driver);
        let cost = meter.finish(1);
        assert_eq!(cost.driver.instructions, (1 << 33) + 10);
        assert_eq!(cost.per_io().driver_cycles_milli, None);
    }

    #[test]
    fn pending_work_counts_only_when_the_pass_did_io() {
        let counters = ModelCounters::new(3);
        let mut meter = CpuMeter::new(&counters);
        meter.lap(Account::Excluded);
        counters.run(40);
        meter.lap(Account::Pending);
        meter.lap(Account::PassWaited);
        counters.run(50);
        meter.lap(Account::Pending);
        counters.run(9);
        meter.lap(Account::Bookkeeping);
        counters.run(4);
        meter.lap(Account::PassDidIo);
        // Nothing is left pending to count twice.
        meter.lap(Account::PassDidIo);
        let cost = meter.finish(2);
        assert_eq!(cost.bookkeeping.instructions, 63);
        assert_eq!(cost.per_io().bookkeeping_instructions_milli, Some(31_500));
    }

    #[test]
    fn the_tail_of_a_pass_that_only_waited_is_no_later_passs_cost() {
        let counters = ModelCounters::new(3);
        let mut meter = CpuMeter::new(&counters);
        // A pass that only waited: its head is pending, its tail (the rest of the loop) too.
        counters.run(10);
        meter.lap(Account::Pending);
        counters.run(77);
        meter.lap(Account::PassWaited);
        // The next pass completes an I/O.
        counters.run(5);
        meter.lap(Account::Pending);
        counters.run(3);
        meter.lap(Account::PassDidIo);
        assert_eq!(meter.finish(1).bookkeeping.instructions, 8);
    }

    #[test]
    fn a_narrow_counter_wraps_and_missing_counters_give_no_figures() {
        let mut counters = ModelCounters::new(2);
        counters.bits = 32;
        counters.now.set(CounterReading { instructions: u64::from(u32::MAX) - 10, cycles: 0 });
        let mut meter = CpuMeter::new(&counters);
        counters.run(25);
        meter.lap(Account::Driver);
        assert_eq!(meter.finish(1).driver.instructions, 25);

        counters.instructions = CounterStatus::Unavailable("not implemented");
        let mut meter = CpuMeter::new(&counters);
        counters.run(25);
        meter.lap(Account::Driver);
        let per_io = meter.finish(1).per_io();
        assert_eq!((per_io.driver_instructions_milli, per_io.driver_cycles_milli), (None, Some(50_000)));

        // A run that completed nothing has no per-I/O figures, counted or not.
        let counters = ModelCounters::new(2);
        let mut meter = CpuMeter::new(&counters);
        counters.run(25);
        meter.lap(Account::Driver);
        assert_eq!(meter.finish(0).per_io(), CpuPerIo::default());

        let none = NoCpuCounters("no PMU");
        let mut meter = CpuMeter::new(&none);
        assert_eq!(meter.lap(Account::Driver), CounterTotals::default());
        assert_eq!(meter.finish(0).per_io(), CpuPerIo::default());
        assert_eq!(none.instructions_status().to_string(), "no PMU");
    }
}
