//! What the conditions of a benchmark say at its end, from its results (docs/measurement.md §16):
//! the runs that ran throttled under the summary, the `conditions:` sentence (the console's and
//! the JSON's) and the boot line.
#![forbid(unsafe_code)]

use alloc::format;
use core::fmt;

use crate::conditions::{boot_parts, flags_of, BenchmarkConditions, BootTimes, Celsius, Milliseconds};
use crate::console::Console;
use crate::results::BenchmarkResults;

/// Under the summary: the runs that ran throttled, then the `conditions:` sentence.
pub(crate) fn print_summary(console: &mut dyn Console, results: &BenchmarkResults) {
    let Some(conditions) = &results.conditions else {
        return;
    };
    for run in results.throttled_runs() {
        let flags = run.conditions.as_ref().map(|c| flags_of(&c.after)).unwrap_or_default();
        let _ = writeln!(
            console,
            "{:<8} {:<20} run {} ran throttled: {flags}",
            run.device_name,
            format!("{}", run.job),
            run.run
        );
    }
    let _ = writeln!(console, "{}", Sentence { conditions, results });
    if let Some(boot) = &conditions.boot {
        let first_io = results.runs.iter().map(|run| run.started_at_ticks).min();
        let _ = writeln!(console, "boot: {}", BootText { boot, first_io });
    }
}

/// `firmware 2500.000 ms before the kernel; kernel 3.000 ms to the banner, 626.760 ms to the
/// first measured I/O (LED patterns 0.000 ms)`.
struct BootText<'a> {
    boot: &'a BootTimes,
    first_io: Option<u64>,
}

impl fmt::Display for BootText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (firmware_ns, to_banner_ns, to_first_io_ns) = boot_parts(self.boot, self.first_io);
        match firmware_ns {
            Some(ns) => write!(f, "firmware {} before the kernel; ", Milliseconds(ns))?,
            None => f.write_str("firmware part unknown; ")?,
        }
        write!(f, "kernel {} to the banner", Milliseconds(to_banner_ns))?;
        if let Some(ns) = to_first_io_ns {
            write!(f, ", {} to the first measured I/O", Milliseconds(ns))?;
        }
        write!(f, " (LED patterns {})", Milliseconds(self.boot.led_ns))
    }
}

/// The published method's closing sentence: `conditions: no throttling flags before or after the
/// tests; SoC 48.5 °C at the end (max 51.2 °C during)`.
pub struct Sentence<'a> {
    pub conditions: &'a BenchmarkConditions,
    pub results: &'a BenchmarkResults,
}

impl fmt::Display for Sentence<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let conditions = self.conditions;
        f.write_str("conditions: ")?;
        if let Some(reason) = conditions.unavailable {
            return write!(f, "not reported ({reason})");
        }
        let after = conditions.after.as_ref();
        let throttled_runs = self.results.throttled_runs().count();
        match (conditions.before.throttled, after.and_then(|after| after.throttled)) {
            (Some(before), Some(end)) if !before.any() && !end.any() && throttled_runs == 0 => {
                f.write_str("no throttling flags before or after the tests")?
            }
            (Some(before), end) => {
                write!(f, "throttling flags before the tests: {before} (since boot); ")?;
                write!(f, "{throttled_runs} of {} runs ran throttled; ", self.results.runs.len())?;
                match end {
                    Some(end) => write!(f, "at the end: {end}")?,
                    None => f.write_str("at the end: not reported")?,
                }
            }
            (None, _) => {
                f.write_str("throttling not reported (the firmware does not answer GET_THROTTLED)")?
            }
        }
        match (after.and_then(|after| after.temperature_millic), conditions.highest_millic) {
            (Some(end), Some(highest)) => {
                write!(f, "; SoC {} at the end (max {} during)", Celsius(end), Celsius(highest))
            }
            _ => f.write_str("; SoC temperature not reported"),
        }
    }
}
