//! The conditions of a run in the JSON (docs/fio-json.md §10): the job's `barebench.conditions`,
//! the median's `throttled_runs`, and the top-level `barebench.conditions` and `barebench.boot`.

use core::fmt;

use super::JsonWriter;
use crate::conditions::{boot_parts, BenchmarkConditions, ConditionsReading, RunConditions};
use crate::conditions_summary::Sentence;
use crate::results::BenchmarkResults;
use crate::units::Fixed;

/// Milliseconds with three decimals from nanoseconds.
fn milliseconds(ns: u64) -> Fixed {
    Fixed::new(u128::from(ns / 1000), 3)
}

fn optional_number(json: &mut JsonWriter<'_>, key: &str, value: Option<u32>) -> fmt::Result {
    match value {
        Some(value) => json.number_field(key, value),
        None => json.null_field(key),
    }
}

/// One reading: `throttled` (the raw word), `throttle_flags` (their names), the temperature and
/// its limit in m°C, the clocks, and the tags the firmware did not answer.
pub(super) fn write_reading(
    json: &mut JsonWriter<'_>,
    key: &str,
    reading: &ConditionsReading,
) -> fmt::Result {
    json.open(Some(key), '{')?;
    match reading.throttled {
        Some(flags) => {
            json.number_field("throttled", flags.0)?;
            json.open(Some("throttle_flags"), '[')?;
            for (_, name) in flags.set_flags() {
                json.string_element(format_args!("{name}"))?;
            }
            json.close(']')?;
        }
        None => json.null_field("throttled")?,
    }
    optional_number(json, "temperature_millicelsius", reading.temperature_millic)?;
    optional_number(json, "temperature_limit_millicelsius", reading.temperature_limit_millic)?;
    if !reading.clocks.is_empty() {
        json.open(Some("clocks"), '{')?;
        for clock in &reading.clocks {
            json.open(Some(clock.name), '{')?;
            optional_number(json, "requested_hz", clock.requested_hz)?;
            optional_number(json, "measured_hz", clock.measured_hz)?;
            json.close('}')?;
        }
        json.close('}')?;
    }
    json.open(Some("not_answered"), '[')?;
    for tag in &reading.not_answered {
        json.string_element(format_args!("{tag}"))?;
    }
    json.close(']')?;
    json.close('}')
}

/// The job's `conditions`: the reading after the run, whether it ran throttled, the
/// `cooldown=` wait before it.
pub(super) fn write_run(json: &mut JsonWriter<'_>, conditions: &RunConditions) -> fmt::Result {
    json.open(Some("conditions"), '{')?;
    json.bool_field("throttled_run", conditions.after.is_throttled())?;
    write_reading(json, "after", &conditions.after)?;
    if let Some(cooldown) = conditions.cooldown {
        json.number_field("cooldown_wait_ns", cooldown.waited_ns)?;
        json.bool_field("cooldown_gave_up", cooldown.gave_up)?;
    }
    json.close('}')
}

/// The top-level `conditions` and `boot` objects.
pub(super) fn write_benchmark(
    json: &mut JsonWriter<'_>,
    conditions: &BenchmarkConditions,
    results: &BenchmarkResults,
) -> fmt::Result {
    json.open(Some("conditions"), '{')?;
    match conditions.unavailable {
        Some(reason) => json.string_field("unavailable", format_args!("{reason}"))?,
        None => {
            write_reading(json, "before", &conditions.before)?;
            if let Some(after) = &conditions.after {
                write_reading(json, "after", after)?;
            }
        }
    }
    optional_number(json, "max_temperature_millicelsius", conditions.highest_millic)?;
    json.number_field("throttled_runs", results.throttled_runs().count() as u32)?;
    json.bool_field("throttled_during", results.throttled_during())?;
    optional_number(json, "cooldown_below_millicelsius", conditions.settings.cooldown_below_millic)?;
    let policy = if conditions.settings.throttle_fails { "fail" } else { "warn" };
    json.string_field("throttle", format_args!("{policy}"))?;
    json.string_field("sentence", format_args!("{}", Sentence { conditions, results }))?;
    json.close('}')?;
    if let Some(boot) = &conditions.boot {
        let first_io = results.runs.iter().map(|run| run.started_at_ticks).min();
        let (firmware_ns, to_banner_ns, to_first_io_ns) = boot_parts(boot, first_io);
        json.open(Some("boot"), '{')?;
        json.string_field("firmware_counter", format_args!("{}", boot.firmware_counter))?;
        match firmware_ns {
            Some(ns) => json.fixed_field("firmware_ms", milliseconds(ns))?,
            None => json.null_field("firmware_ms")?,
        }
        json.fixed_field("kernel_to_banner_ms", milliseconds(to_banner_ns))?;
        match to_first_io_ns {
            Some(ns) => json.fixed_field("kernel_to_first_io_ms", milliseconds(ns))?,
            None => json.null_field("kernel_to_first_io_ms")?,
        }
        json.fixed_field("led_patterns_ms", milliseconds(boot.led_ns))?;
        json.close('}')?;
    }
    Ok(())
}
