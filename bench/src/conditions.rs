//! The conditions of a run as the machine reports them (docs/measurement.md §16): the
//! firmware's throttle flags and SoC temperature before the first job, after every run and at the
//! end, the clocks that actually ran, how long the board took to boot, and `cooldown=` waits
//! before each run. The kernel reads them (the VideoCore mailbox) through a [`ConditionsSource`];
//! this module decides what they mean, what to say on the console and what goes in the results.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use blockdev::Clock;

use crate::console::Console;
use crate::stall_watch::StallWatch;
use crate::units::{NS_PER_MS, NS_PER_S};

/// GET_THROTTLED's answer (Raspberry Pi documentation, `vcgencmd get_throttled`): bits 0-3 say
/// what holds now, bits 16-19 what happened since the previous reading (the kernel has the
/// firmware clear them after each answer, as Linux's `raspberrypi-hwmon.c` does), or since boot
/// for the first reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThrottleFlags(pub u32);

/// Each flag: bit, console name, JSON key.
pub const THROTTLE_FLAGS: [(u32, &str, &str); 8] = [
    (0, "under-voltage now", "under_voltage_now"),
    (1, "ARM frequency capped now", "arm_frequency_capped_now"),
    (2, "throttled now", "throttled_now"),
    (3, "soft temperature limit active now", "soft_temperature_limit_now"),
    (16, "under-voltage occurred", "under_voltage_occurred"),
    (17, "ARM frequency capping occurred", "arm_frequency_capping_occurred"),
    (18, "throttling occurred", "throttling_occurred"),
    (19, "soft temperature limit occurred", "soft_temperature_limit_occurred"),
];

impl ThrottleFlags {
    /// Whether any flag is set (bits the documentation does not name count too).
    pub fn any(self) -> bool {
        self.0 != 0
    }

    /// The flags set, as (console name, JSON key).
    pub fn set_flags(self) -> impl Iterator<Item = (&'static str, &'static str)> {
        THROTTLE_FLAGS
            .into_iter()
            .filter(move |(bit, _, _)| self.0 & (1 << bit) != 0)
            .map(|(_, name, key)| (name, key))
    }

    /// Bits set that no flag names.
    pub fn unnamed_bits(self) -> u32 {
        let named: u32 = THROTTLE_FLAGS.iter().map(|(bit, _, _)| 1 << bit).sum();
        self.0 & !named
    }
}

/// `under-voltage now, throttling occurred`, or `none`.
impl fmt::Display for ThrottleFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.any() {
            return f.write_str("none");
        }
        let mut first = true;
        for (name, _) in self.set_flags() {
            if !first {
                f.write_str(", ")?;
            }
            f.write_str(name)?;
            first = false;
        }
        if self.unnamed_bits() != 0 {
            if !first {
                f.write_str(", ")?;
            }
            write!(f, "bits {:#x}", self.unnamed_bits())?;
        }
        Ok(())
    }
}

/// A temperature in thousandths of a °C, printed with one decimal (`48.5 °C`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Celsius(pub u32);

impl fmt::Display for Celsius {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tenths = (self.0 + 50) / 100;
        write!(f, "{}.{} °C", tenths / 10, tenths % 10)
    }
}

/// One clock as the firmware reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockSample {
    /// `arm`, `core`, `emmc`, `emmc2`.
    pub name: &'static str,
    /// What was requested (GET_CLOCK_RATE).
    pub requested_hz: Option<u32>,
    /// What the firmware measures (GET_CLOCK_RATE_MEASURED).
    pub measured_hz: Option<u32>,
}

/// A rate in MHz with one decimal.
struct Mhz(u32);

impl fmt::Display for Mhz {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tenths = (u64::from(self.0) + 50_000) / 100_000;
        write!(f, "{}.{} MHz", tenths / 10, tenths % 10)
    }
}

/// One reading of the machine's conditions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ConditionsReading {
    /// GET_THROTTLED; `None` when the firmware did not answer.
    pub throttled: Option<ThrottleFlags>,
    /// GET_TEMPERATURE, m°C.
    pub temperature_millic: Option<u32>,
    /// GET_MAX_TEMPERATURE: where the firmware starts throttling, m°C (a limit, not a peak).
    pub temperature_limit_millic: Option<u32>,
    /// The clocks, in the readings before and after the benchmark.
    pub clocks: Vec<ClockSample>,
    /// The tags the firmware did not answer, named (`GET_CLOCK_RATE_MEASURED (0x00030047)`).
    pub not_answered: Vec<String>,
}

impl ConditionsReading {
    /// Whether the firmware reported throttling or under-voltage.
    pub fn is_throttled(&self) -> bool {
        self.throttled.is_some_and(ThrottleFlags::any)
    }
}

/// `no throttling flags; SoC 48.5 °C (limit 85.0 °C); clocks measured arm 1500.0 MHz, ...`.
impl fmt::Display for ConditionsReading {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.throttled {
            Some(flags) if flags.any() => write!(f, "throttling flags: {flags}")?,
            Some(_) => f.write_str("no throttling flags")?,
            None => f.write_str("throttling not reported")?,
        }
        match (self.temperature_millic, self.temperature_limit_millic) {
            (Some(now), Some(limit)) => {
                write!(f, "; SoC {} (the firmware throttles at {})", Celsius(now), Celsius(limit))?
            }
            (Some(now), None) => write!(f, "; SoC {}", Celsius(now))?,
            (None, _) => f.write_str("; SoC temperature not reported")?,
        }
        if !self.clocks.is_empty() {
            f.write_str("; clocks measured")?;
            write_rates(f, &self.clocks, |clock| clock.measured_hz)?;
            f.write_str(" (requested")?;
            write_rates(f, &self.clocks, |clock| clock.requested_hz)?;
            f.write_str(")")?;
        }
        if !self.not_answered.is_empty() {
            write!(f, "; the firmware did not answer {}", self.not_answered.join(", "))?;
        }
        Ok(())
    }
}

/// ` arm 1500.0 MHz, core ?`: one rate of each clock, `?` where the firmware gave none.
fn write_rates(
    f: &mut fmt::Formatter<'_>,
    clocks: &[ClockSample],
    rate: impl Fn(&ClockSample) -> Option<u32>,
) -> fmt::Result {
    for (index, clock) in clocks.iter().enumerate() {
        let separator = if index == 0 { " " } else { ", " };
        match rate(clock) {
            Some(hz) => write!(f, "{separator}{} {}", clock.name, Mhz(hz))?,
            None => write!(f, "{separator}{} ?", clock.name)?,
        }
    }
    Ok(())
}

/// `cooldown=` and `throttle=`, as the kernel read them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConditionsSettings {
    /// Wait before each run until the SoC is below this (m°C).
    pub cooldown_below_millic: Option<u32>,
    /// `throttle=fail`: a benchmark during which throttling or under-voltage happened ends with
    /// exit status 2 (the default `warn` only says so).
    pub throttle_fails: bool,
}

/// How long the board took to boot, as the kernel measured it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BootTimes {
    /// The counter the firmware's part comes from and what its zero is (docs/hardware.md §4.7).
    pub firmware_counter: &'static str,
    /// The firmware's part: the counter's reading at the kernel's first instruction.
    pub firmware_ns: Option<u64>,
    /// The kernel's timer at its first instruction and at the banner, in the run clock's ticks,
    /// and its rate.
    pub entry_ticks: u64,
    pub banner_ticks: u64,
    pub ticks_per_second: u64,
    /// Time spent showing LED stage patterns before the first job.
    pub led_ns: u64,
}

/// What the machine tells about the conditions of a run: the kernel's side.
pub trait ConditionsSource {
    /// Throttle flags (the sticky ones cleared after the answer), temperature and its limit;
    /// the clocks too when `with_clocks`.
    fn read(&self, with_clocks: bool) -> ConditionsReading;
    /// The SoC temperature alone (m°C), for `cooldown=`.
    fn temperature_millic(&self) -> Option<u32>;
    fn settings(&self) -> ConditionsSettings;
    /// Why nothing can be read on this machine, where that is so (QEMU virt: no firmware).
    fn unavailable(&self) -> Option<&'static str> {
        None
    }
    fn boot(&self) -> Option<BootTimes> {
        None
    }
    /// Between runs, outside every measured window (may take time).
    fn between_runs(&self) {}
    /// Between the I/Os of a measured window, at most every
    /// [`crate::run_loop::PROGRESS_INTERVAL_NS`]: must not wait for anything.
    fn in_window_heartbeat(&self) {}
}

/// What `cooldown=` did before a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cooldown {
    pub waited_ns: u64,
    /// Temperature readings taken.
    pub polls: u32,
    /// The last and the highest reading.
    pub last_millic: Option<u32>,
    pub highest_millic: Option<u32>,
    /// The SoC was still too warm after [`COOLDOWN_LIMIT_NS`].
    pub gave_up: bool,
}

/// The conditions of one run: the reading after it, and the wait before it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunConditions {
    pub after: ConditionsReading,
    pub cooldown: Option<Cooldown>,
}

/// The conditions of the whole benchmark.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BenchmarkConditions {
    pub before: ConditionsReading,
    pub after: Option<ConditionsReading>,
    pub settings: ConditionsSettings,
    pub boot: Option<BootTimes>,
    /// The highest temperature read (every reading and every `cooldown=` poll), m°C.
    pub highest_millic: Option<u32>,
    pub unavailable: Option<&'static str>,
}

impl BenchmarkConditions {
    fn saw_temperature(&mut self, millic: Option<u32>) {
        if let Some(millic) = millic {
            self.highest_millic = Some(self.highest_millic.map_or(millic, |highest| highest.max(millic)));
        }
    }
}

/// How often `cooldown=` reads the temperature, and how long it waits at most.
pub const COOLDOWN_POLL_NS: u64 = NS_PER_S;
pub const COOLDOWN_LIMIT_NS: u64 = 15 * 60 * NS_PER_S;

/// The reading before the first job; says what is set.
pub(crate) fn start(
    source: &dyn ConditionsSource,
    console: &mut dyn Console,
    notes: &mut Vec<String>,
) -> BenchmarkConditions {
    let settings = source.settings();
    let unavailable = source.unavailable();
    let before = if unavailable.is_some() { ConditionsReading::default() } else { source.read(true) };
    match unavailable {
        Some(reason) => {
            let _ = writeln!(console, "conditions not reported: {reason}");
        }
        None => {
            let _ = writeln!(console, "conditions before the first job: {before}");
        }
    }
    if before.is_throttled() {
        let message =
            format!("warning: the firmware reports {} before the first job (since boot)", flags_of(&before));
        let _ = writeln!(console, "{message}");
        notes.push(message);
    }
    let mut conditions = BenchmarkConditions {
        before,
        after: None,
        settings,
        boot: source.boot(),
        highest_millic: None,
        unavailable,
    };
    conditions.saw_temperature(conditions.before.temperature_millic);
    conditions
}

pub(crate) fn flags_of(reading: &ConditionsReading) -> ThrottleFlags {
    reading.throttled.unwrap_or_default()
}

/// Before a run: `cooldown=` waits with a progress line until the SoC is below its setting.
pub(crate) fn before_run(
    source: &dyn ConditionsSource,
    clock: &dyn Clock,
    conditions: &mut BenchmarkConditions,
    console: &mut dyn Console,
) -> Option<Cooldown> {
    source.between_runs();
    let below = conditions.settings.cooldown_below_millic?;
    if conditions.unavailable.is_some() {
        return None;
    }
    let cooldown = cool_down(&|| source.temperature_millic(), clock, below, console);
    conditions.saw_temperature(cooldown.highest_millic);
    Some(cooldown)
}

/// Reads the temperature every [`COOLDOWN_POLL_NS`] until it is below `below_millic`, rewriting
/// one progress line; gives up after [`COOLDOWN_LIMIT_NS`], or when the timer stops.
pub fn cool_down(
    temperature: &dyn Fn() -> Option<u32>,
    clock: &dyn Clock,
    below_millic: u32,
    console: &mut dyn Console,
) -> Cooldown {
    let started = clock.now_ticks();
    let mut cooldown = Cooldown::default();
    loop {
        let reading = temperature();
        cooldown.polls += 1;
        cooldown.last_millic = reading;
        cooldown.highest_millic = cooldown.highest_millic.max(reading);
        let waited_ns = clock.ticks_to_ns(clock.now_ticks() - started);
        cooldown.waited_ns = waited_ns;
        let Some(millic) = reading else {
            let _ =
                writeln!(console, "cooldown: the SoC temperature is not reported; running without waiting");
            return cooldown;
        };
        if millic < below_millic {
            if cooldown.polls > 1 {
                let _ = writeln!(
                    console,
                    "\rcooldown: SoC {} after {} s; running",
                    Celsius(millic),
                    waited_ns / NS_PER_S
                );
            }
            return cooldown;
        }
        if waited_ns >= COOLDOWN_LIMIT_NS {
            cooldown.gave_up = true;
            let _ = writeln!(
                console,
                "\rcooldown: SoC still {} after {} min (cooldown={}); running anyway",
                Celsius(millic),
                waited_ns / (60 * NS_PER_S),
                Celsius(below_millic)
            );
            return cooldown;
        }
        let _ = write!(
            console,
            "\rcooldown: SoC {}, waiting until it is below {} ({} s so far)",
            Celsius(millic),
            Celsius(below_millic),
            waited_ns / NS_PER_S
        );
        if !sleep(clock, COOLDOWN_POLL_NS) {
            cooldown.gave_up = true;
            let _ = writeln!(console, "\rcooldown: the timer stopped; running without waiting");
            return cooldown;
        }
    }
}

/// Waits `ns` on `clock`; false when the timer stopped meanwhile.
fn sleep(clock: &dyn Clock, ns: u64) -> bool {
    let start = clock.now_ticks();
    let end = start + clock.ns_to_ticks(ns);
    let mut stall = StallWatch { last_reading: start, identical_readings: 0 };
    loop {
        let now = clock.now_ticks();
        if now >= end {
            return true;
        }
        if stall.has_stopped(now) {
            return false;
        }
        core::hint::spin_loop();
    }
}

/// After a run: the reading, and a warning naming the run when a flag is set.
pub(crate) fn after_run(
    source: &dyn ConditionsSource,
    conditions: &mut BenchmarkConditions,
    run_label: fmt::Arguments<'_>,
    console: &mut dyn Console,
) -> Option<(ConditionsReading, Option<String>)> {
    if conditions.unavailable.is_some() {
        return None;
    }
    let reading = source.read(false);
    conditions.saw_temperature(reading.temperature_millic);
    let warning = reading.is_throttled().then(|| {
        format!(
            "warning: {run_label}: the firmware reports {} (the run's figures are flagged)",
            flags_of(&reading)
        )
    });
    if let Some(warning) = &warning {
        let _ = writeln!(console, "{warning}");
    }
    Some((reading, warning))
}

/// The reading at the end.
pub(crate) fn finish(
    source: &dyn ConditionsSource,
    conditions: &mut BenchmarkConditions,
    console: &mut dyn Console,
) {
    if conditions.unavailable.is_some() {
        return;
    }
    let after = source.read(true);
    conditions.saw_temperature(after.temperature_millic);
    let _ = writeln!(console, "conditions after the last job: {after}");
    conditions.after = Some(after);
}

/// Milliseconds with three decimals, for boot times.
pub struct Milliseconds(pub u64);

impl fmt::Display for Milliseconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:03} ms", self.0 / NS_PER_MS, (self.0 % NS_PER_MS) / 1000)
    }
}

/// The boot's parts in ns: (firmware, entry to banner, entry to the first measured I/O).
pub fn boot_parts(boot: &BootTimes, first_io_ticks: Option<u64>) -> (Option<u64>, u64, Option<u64>) {
    let ns = |ticks: u64| blockdev::ticks_to_ns(ticks, boot.ticks_per_second.max(1));
    let to_banner = ns(boot.banner_ticks.saturating_sub(boot.entry_ticks));
    let to_first_io = first_io_ticks.map(|ticks| ns(ticks.saturating_sub(boot.entry_ticks)));
    (boot.firmware_ns, to_banner, to_first_io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conditions_summary::Sentence;
    use crate::results::tests::run_result;
    use crate::results::BenchmarkResults;
    use blockdev::testing::SteppingClock;
    use core::cell::RefCell;
    use std::string::ToString;
    use std::vec;

    #[test]
    fn flags_are_named_and_unknown_bits_kept() {
        assert_eq!(ThrottleFlags(0).to_string(), "none");
        assert_eq!(
            ThrottleFlags(0x5_0005).to_string(),
            "under-voltage now, throttled now, under-voltage occurred, throttling occurred"
        );
        assert_eq!(ThrottleFlags(1 << 8).to_string(), "bits 0x100");
        assert!(ThrottleFlags(1 << 8).any());
        let keys: Vec<&str> = ThrottleFlags(0x8_0002).set_flags().map(|(_, key)| key).collect();
        assert_eq!(keys, ["arm_frequency_capped_now", "soft_temperature_limit_occurred"]);
        assert_eq!(Celsius(48_549).to_string(), "48.5 °C");
        assert_eq!(Celsius(48_550).to_string(), "48.6 °C");
    }

    /// A machine whose temperature falls by `step` per poll from `start`.
    struct Cooling {
        next: RefCell<u32>,
        step: u32,
    }

    #[test]
    fn cooldown_waits_until_the_soc_is_below_the_setting_and_says_so() {
        let clock = SteppingClock::new(1_000_000_000, 1_000_000);
        let soc = Cooling { next: RefCell::new(62_000), step: 5_000 };
        let temperature = || {
            let now = *soc.next.borrow();
            *soc.next.borrow_mut() = now.saturating_sub(soc.step);
            Some(now)
        };
        let mut console = String::new();
        let cooldown = cool_down(&temperature, &clock, 50_000, &mut console);
        // 62, 57, 52, 47: the fourth poll is below 50 °C, about three seconds later.
        assert_eq!(cooldown.polls, 4);
        assert_eq!(cooldown.last_millic, Some(47_000));
        assert_eq!(cooldown.highest_millic, Some(62_000));
        assert!(!cooldown.gave_up);
        assert!((3 * NS_PER_S..4 * NS_PER_S).contains(&cooldown.waited_ns), "{}", cooldown.waited_ns);
        assert!(
            console.contains("\rcooldown: SoC 62.0 °C, waiting until it is below 50.0 °C (0 s so far)"),
            "{console}"
        );
        assert!(console.ends_with("\rcooldown: SoC 47.0 °C after 3 s; running\n"), "{console:?}");
        // Already cool: one poll, nothing printed.
        let mut quiet = String::new();
        assert_eq!(cool_down(&|| Some(30_000), &clock, 50_000, &mut quiet).polls, 1);
        assert!(quiet.is_empty());
        // Not reported: said once, no wait.
        let mut unknown = String::new();
        assert_eq!(cool_down(&|| None, &clock, 50_000, &mut unknown).polls, 1);
        assert!(unknown.contains("not reported"));
    }

    #[test]
    fn cooldown_gives_up_when_the_timer_stops_instead_of_waiting_for_ever() {
        let clock = SteppingClock::frozen(1_000_000_000);
        let mut console = String::new();
        let cooldown = cool_down(&|| Some(70_000), &clock, 50_000, &mut console);
        assert!(cooldown.gave_up && cooldown.polls == 1, "{cooldown:?}");
        assert!(console.contains("cooldown: the timer stopped; running without waiting"), "{console}");
    }

    #[test]
    fn cooldown_gives_up_on_a_soc_that_stays_hot() {
        // 60 s per clock reading: the limit comes after a handful of polls.
        let clock = SteppingClock::new(1_000_000_000, 60 * NS_PER_S);
        let mut console = String::new();
        let cooldown = cool_down(&|| Some(70_000), &clock, 50_000, &mut console);
        assert!(cooldown.gave_up);
        assert!(console.contains("SoC still 70.0 °C after"), "{console}");
    }

    fn reading(flags: u32, temperature: u32) -> ConditionsReading {
        ConditionsReading {
            throttled: Some(ThrottleFlags(flags)),
            temperature_millic: Some(temperature),
            temperature_limit_millic: Some(85_000),
            ..ConditionsReading::default()
        }
    }

    fn results_with(before: u32, per_run: &[u32], end: u32) -> BenchmarkResults {
        let runs = per_run
            .iter()
            .enumerate()
            .map(|(index, &flags)| {
                let mut run = run_result(0, index as u32 + 1, 10, 100);
                run.conditions = Some(RunConditions { after: reading(flags, 50_000), cooldown: None });
                run
            })
            .collect();
        BenchmarkResults {
            runs,
            conditions: Some(BenchmarkConditions {
                before: reading(before, 45_000),
                after: Some(reading(end, 48_500)),
                highest_millic: Some(51_200),
                ..BenchmarkConditions::default()
            }),
            ..BenchmarkResults::default()
        }
    }

    fn sentence(results: &BenchmarkResults) -> String {
        Sentence { conditions: results.conditions.as_ref().unwrap(), results }.to_string()
    }

    #[test]
    fn the_sentence_says_what_the_published_method_says() {
        let calm = results_with(0, &[0, 0, 0], 0);
        assert_eq!(
            sentence(&calm),
            "conditions: no throttling flags before or after the tests; SoC 48.5 °C at the end (max 51.2 °C during)"
        );
        assert!(!calm.throttled_during());
        let weak_supply = results_with(0x1_0000, &[0, 0x1_0001, 0], 0x1_0000);
        assert_eq!(
            sentence(&weak_supply),
            "conditions: throttling flags before the tests: under-voltage occurred (since boot); 1 of 3 runs ran \
             throttled; at the end: under-voltage occurred; SoC 48.5 °C at the end (max 51.2 °C during)"
        );
        assert!(weak_supply.throttled_during());
        assert_eq!(weak_supply.throttled_runs().map(|run| run.run).collect::<Vec<_>>(), [2]);
        // Only before the first job: not during the benchmark.
        assert!(!results_with(0x1_0000, &[0, 0], 0).throttled_during());
        let mut unreported = results_with(0, &[0], 0);
        if let Some(conditions) = unreported.conditions.as_mut() {
            conditions.before.throttled = None;
            conditions.after = Some(ConditionsReading::default());
        }
        assert_eq!(
            sentence(&unreported),
            "conditions: throttling not reported (the firmware does not answer GET_THROTTLED); SoC temperature not reported"
        );
        let virt = BenchmarkResults {
            conditions: Some(BenchmarkConditions {
                unavailable: Some("no firmware"),
                ..BenchmarkConditions::default()
            }),
            ..BenchmarkResults::default()
        };
        assert_eq!(sentence(&virt), "conditions: not reported (no firmware)");
    }

    #[test]
    fn a_reading_names_its_clocks_and_what_was_not_answered() {
        let mut before = reading(0, 25_000);
        before.temperature_limit_millic = Some(99_000);
        before.clocks = vec![
            ClockSample { name: "arm", requested_hz: Some(700_000_000), measured_hz: None },
            ClockSample { name: "core", requested_hz: Some(700_000_000), measured_hz: None },
        ];
        before.not_answered = vec!["GET_CLOCK_RATE_MEASURED (0x00030047)".to_string()];
        assert_eq!(
            before.to_string(),
            "no throttling flags; SoC 25.0 °C (the firmware throttles at 99.0 °C); clocks measured arm ?, core ? \
             (requested arm 700.0 MHz, core 700.0 MHz); the firmware did not answer GET_CLOCK_RATE_MEASURED (0x00030047)"
        );
    }

    #[test]
    fn boot_parts_are_counted_from_the_kernels_first_instruction() {
        let boot = BootTimes {
            firmware_counter: "test",
            firmware_ns: Some(2_000_000_000),
            entry_ticks: 1_000,
            banner_ticks: 4_000,
            ticks_per_second: 1_000_000,
            led_ns: 0,
        };
        // 1 MHz ticks: 3 ms to the banner, 2 s to the first I/O.
        assert_eq!(boot_parts(&boot, Some(2_001_000)), (Some(2_000_000_000), 3_000_000, Some(2_000_000_000)));
        assert_eq!(Milliseconds(3_456_789).to_string(), "3.456 ms");
    }
}

/// The runner with a [`ConditionsSource`] (crate::conditions): readings before the first job,
/// after every run and at the end; a run after which the firmware reports throttling is flagged
/// on the console, in its notes, in the summary and in the JSON; `cooldown=` waits before runs;
/// the heartbeat is told inside the window and between runs; the boot times reach the JSON.
#[cfg(test)]
mod with_the_runner {
    use alloc::string::String;
    use alloc::vec::Vec;
    use core::cell::{Cell, RefCell};

    use blockdev::testing::SteppingClock;
    use blockdev::{BlockDevice, DmaBuffer};

    use super::{
        BootTimes, ClockSample, ConditionsReading, ConditionsSettings, ConditionsSource, ThrottleFlags,
    };
    use crate::cpu_cost::NoCpuCounters;
    use crate::fio_json::{extract_json_from_log, parse_fio_json};
    use crate::plan::tests::nvme_geometry;
    use crate::results::{BenchmarkResults, ReportContext};
    use crate::run_loop::RunEnvironment;
    use crate::runner::run_benchmark;
    use crate::settings::{Config, JobOperation, JobSpec, Preset};
    use crate::sim::{SimBehaviour, SimDevice};

    const GHZ: u64 = 1_000_000_000;
    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;

    /// A machine whose throttle word is scripted reading by reading (0 once the script ends) and
    /// whose temperature falls 5 °C per `cooldown=` poll from 62 °C.
    struct ScriptedMachine {
        throttle_words: RefCell<Vec<u32>>,
        reads: Cell<u32>,
        temperature: Cell<u32>,
        settings: ConditionsSettings,
        heartbeats_in_window: Cell<u32>,
        between_runs: Cell<u32>,
    }

    impl ScriptedMachine {
        fn new(throttle_words: &[u32], settings: ConditionsSettings) -> Self {
            ScriptedMachine {
                throttle_words: RefCell::new(throttle_words.iter().rev().copied().collect()),
                reads: Cell::new(0),
                temperature: Cell::new(62_000),
                settings,
                heartbeats_in_window: Cell::new(0),
                between_runs: Cell::new(0),
            }
        }
    }

    impl ConditionsSource for ScriptedMachine {
        fn read(&self, with_clocks: bool) -> ConditionsReading {
            self.reads.set(self.reads.get() + 1);
            let word = self.throttle_words.borrow_mut().pop().unwrap_or(0);
            ConditionsReading {
                throttled: Some(ThrottleFlags(word)),
                temperature_millic: Some(48_500),
                temperature_limit_millic: Some(85_000),
                clocks: if with_clocks {
                    alloc::vec![ClockSample {
                        name: "arm",
                        requested_hz: Some(1_500_000_000),
                        measured_hz: Some(1_499_900_000)
                    }]
                } else {
                    Vec::new()
                },
                not_answered: Vec::new(),
            }
        }
        fn temperature_millic(&self) -> Option<u32> {
            let now = self.temperature.get();
            self.temperature.set(now.saturating_sub(5_000));
            Some(now)
        }
        fn settings(&self) -> ConditionsSettings {
            self.settings
        }
        fn boot(&self) -> Option<BootTimes> {
            Some(BootTimes {
                firmware_counter: "test counter",
                firmware_ns: Some(2_500_000_000),
                entry_ticks: 0,
                banner_ticks: 3 * MS,
                ticks_per_second: GHZ,
                led_ns: 0,
            })
        }
        fn between_runs(&self) {
            self.between_runs.set(self.between_runs.get() + 1);
        }
        fn in_window_heartbeat(&self) {
            self.heartbeats_in_window.set(self.heartbeats_in_window.get() + 1);
        }
    }

    /// One randread job, two runs of 1.2 s on a simulated NVMe drive.
    fn run(machine: &ScriptedMachine) -> (BenchmarkResults, String) {
        let clock = SteppingClock::new(GHZ, 1_000);
        let mut config = Config::for_preset(Preset::Quick);
        config.jobs = alloc::vec![JobSpec::new(JobOperation::RandRead, 4096, 1)];
        (config.ramp_ns, config.runtime_ns, config.runs) = (200 * MS, MS * 1_000, 2);
        (config.offset_bytes, config.size_bytes) = (0, 1 << 20);
        let mut device = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 100 * US), &clock);
        let context =
            ReportContext { board: "simulated", timer_frequency_hz: GHZ, ..ReportContext::default() };
        let counters = NoCpuCounters("host test");
        let environment = RunEnvironment {
            clock: &clock,
            cpu_counters: &counters,
            buffer_area: DmaBuffer {
                cpu_address: 0x4000_0000,
                physical_address: 0x4000_0000,
                length_bytes: 1 << 20,
            },
            memory: None,
            writes: None,
            conditions: Some(machine),
        };
        let mut console = String::new();
        let results = {
            let devices: &mut [&mut dyn BlockDevice] = &mut [&mut device];
            run_benchmark(&config, devices, &environment, &context, &mut console)
        };
        (results, console)
    }

    #[test]
    fn a_calm_machine_gives_the_published_sentence_and_every_reading() {
        let machine = ScriptedMachine::new(&[], ConditionsSettings::default());
        let (results, console) = run(&machine);
        // Before, after each of the two runs, at the end.
        assert_eq!(machine.reads.get(), 4);
        assert!(console.contains("conditions before the first job: no throttling flags; SoC 48.5 °C (the firmware throttles at 85.0 °C); clocks measured arm 1499.9 MHz (requested arm 1500.0 MHz)"), "{console}");
        assert!(console.contains("\nconditions: no throttling flags before or after the tests; SoC 48.5 °C at the end (max 48.5 °C during)\n"), "{console}");
        assert!(
            console
                .contains("\nboot: firmware 2500.000 ms before the kernel; kernel 3.000 ms to the banner, "),
            "{console}"
        );
        assert!(!results.throttled_during());
        // The heartbeat: at the progress line's pace inside the windows, and before each run.
        assert!(machine.heartbeats_in_window.get() >= 4, "{}", machine.heartbeats_in_window.get());
        assert_eq!(machine.between_runs.get(), 2);
        let json = extract_json_from_log(&console).unwrap();
        let value: serde_json::Value = serde_json::from_str(&json).unwrap();
        let top = &value["barebench"];
        assert_eq!(top["conditions"]["before"]["throttled"], 0);
        assert_eq!(top["conditions"]["after"]["clocks"]["arm"]["measured_hz"], 1_499_900_000u64);
        assert_eq!(top["conditions"]["throttled_runs"], 0);
        assert_eq!(top["conditions"]["throttle"], "warn");
        assert_eq!(top["boot"]["firmware_ms"], 2500.0);
        assert_eq!(top["boot"]["kernel_to_banner_ms"], 3.0);
        assert!(top["boot"]["kernel_to_first_io_ms"].is_f64(), "{}", top["boot"]);
        let job = &value["jobs"][0]["barebench"]["conditions"];
        assert_eq!(job["throttled_run"], false);
        assert_eq!(job["after"]["temperature_millicelsius"], 48_500);
        assert_eq!(value["barebench medians"][0]["throttled_runs"], 0);
    }

    #[test]
    fn a_run_after_which_the_firmware_reports_under_voltage_is_flagged_everywhere() {
        // Before: nothing; after run 1: nothing; after run 2: under-voltage occurred; end: nothing.
        let machine = ScriptedMachine::new(&[0, 0, 0x1_0000, 0], ConditionsSettings::default());
        let (results, console) = run(&machine);
        assert!(results.throttled_during());
        let flagged: Vec<u32> = results.throttled_runs().map(|run| run.run).collect();
        assert_eq!(flagged, [2]);
        assert!(
            console.contains(
                "warning: nvme0 run 2/2 of randread:4k:1: the firmware reports under-voltage occurred"
            ),
            "{console}"
        );
        assert!(results.runs[1].notes.iter().any(|note| note.contains("under-voltage occurred")));
        assert!(
            console.contains("nvme0    randread:4k:1        run 2 ran throttled: under-voltage occurred"),
            "{console}"
        );
        assert!(console.contains("conditions: throttling flags before the tests: none (since boot); 1 of 2 runs ran throttled; at the end: none"), "{console}");
        let report = parse_fio_json(&extract_json_from_log(&console).unwrap()).unwrap();
        assert_eq!(report.barebench_medians[0].throttled_runs, Some(1));
        let throttled: Vec<bool> = report
            .jobs
            .iter()
            .map(|job| job.barebench.as_ref().unwrap().conditions.as_ref().unwrap().throttled_run)
            .collect();
        assert_eq!(throttled, [false, true]);
    }

    #[test]
    fn cooldown_waits_before_each_run_and_the_wait_is_in_the_json() {
        let settings = ConditionsSettings { cooldown_below_millic: Some(50_000), throttle_fails: true };
        let machine = ScriptedMachine::new(&[], settings);
        let (results, console) = run(&machine);
        // 62, 57, 52, 47 °C before the first run; the second starts at once (42 °C).
        assert!(console.contains("cooldown: SoC 62.0 °C, waiting until it is below 50.0 °C"), "{console}");
        let waits: Vec<u32> =
            results.runs.iter().map(|run| run.conditions.as_ref().unwrap().cooldown.unwrap().polls).collect();
        assert_eq!(waits, [4, 1]);
        let conditions = results.conditions.as_ref().unwrap();
        assert_eq!(conditions.highest_millic, Some(62_000), "the polls count as during");
        let json = extract_json_from_log(&console).unwrap();
        assert!(json.contains("\"cooldown_wait_ns\" : "), "{json}");
        assert!(json.contains("\"cooldown_below_millicelsius\" : 50000"), "{json}");
        assert!(json.contains("\"throttle\" : \"fail\""), "{json}");
    }
}
