//! The conditions of a run as the VideoCore firmware reports them (docs/measurement.md §16):
//! `bench::conditions::ConditionsSource` over the mailbox's GET_THROTTLED,
//! GET_TEMPERATURE, GET_MAX_TEMPERATURE, GET_CLOCK_RATE and GET_CLOCK_RATE_MEASURED, with the
//! kernel's `cooldown=`/`throttle=` settings, its boot times and the LED's heartbeat. Portable:
//! the host tests run it against `drivers::firmware_model::FirmwareModel`.
#![forbid(unsafe_code)]

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use bench::conditions::{
    BootTimes, ClockSample, ConditionsReading, ConditionsSettings, ConditionsSource, ThrottleFlags,
};
use drivers::mailbox::{
    clocks, tags, temperature_millicelsius, throttled_flags, ClockReading, MailboxError, PropertyTags,
};

/// The firmware's answers as the benchmark's conditions.
pub struct FirmwareConditions<'a, F: PropertyTags> {
    pub firmware: &'a F,
    pub settings: ConditionsSettings,
    /// `test-fault=throttled`: flags added to every GET_THROTTLED answer.
    pub faked_throttle: u32,
    pub boot: Option<BootTimes>,
    /// The LED's heartbeat between runs and inside windows (no-ops without an LED).
    pub between_runs: &'a dyn Fn(),
    pub in_window: &'a dyn Fn(),
}

/// `GET_CLOCK_RATE_MEASURED (0x00030047)`, with the error unless it is "not answered".
fn describe_failure(error: MailboxError, tag: u32) -> String {
    let name = tags::name(tag).unwrap_or("tag");
    match error {
        MailboxError::TagNotAnswered { .. } => format!("{name} ({tag:#010x})"),
        other => format!("{name} ({tag:#010x}: {other})"),
    }
}

/// Keeps the value, or records which tag failed (once).
fn answered(result: Result<u32, MailboxError>, tag: u32, not_answered: &mut Vec<String>) -> Option<u32> {
    match result {
        Ok(value) => Some(value),
        Err(error) => {
            let failure = describe_failure(error, tag);
            if !not_answered.contains(&failure) {
                not_answered.push(failure);
            }
            None
        }
    }
}

impl<F: PropertyTags> FirmwareConditions<'_, F> {
    /// The clocks the conditions report, requested and measured.
    pub fn clocks(&self, not_answered: &mut Vec<String>) -> Vec<ClockSample> {
        clocks::REPORTED
            .iter()
            .map(|&clock_id| {
                let reading = ClockReading::read(self.firmware, clock_id);
                ClockSample {
                    name: clocks::name(clock_id),
                    requested_hz: answered(reading.requested_hz, tags::GET_CLOCK_RATE, not_answered),
                    measured_hz: answered(reading.measured_hz, tags::GET_CLOCK_RATE_MEASURED, not_answered),
                }
            })
            .collect()
    }
}

impl<F: PropertyTags> ConditionsSource for FirmwareConditions<'_, F> {
    fn read(&self, with_clocks: bool) -> ConditionsReading {
        let mut not_answered = Vec::new();
        let throttled = answered(throttled_flags(self.firmware), tags::GET_THROTTLED, &mut not_answered)
            .map(|flags| ThrottleFlags(flags | self.faked_throttle));
        let temperature_millic = answered(
            temperature_millicelsius(self.firmware, tags::GET_TEMPERATURE),
            tags::GET_TEMPERATURE,
            &mut not_answered,
        );
        let temperature_limit_millic = answered(
            temperature_millicelsius(self.firmware, tags::GET_MAX_TEMPERATURE),
            tags::GET_MAX_TEMPERATURE,
            &mut not_answered,
        );
        let clocks = if with_clocks { self.clocks(&mut not_answered) } else { Vec::new() };
        ConditionsReading { throttled, temperature_millic, temperature_limit_millic, clocks, not_answered }
    }

    fn temperature_millic(&self) -> Option<u32> {
        temperature_millicelsius(self.firmware, tags::GET_TEMPERATURE).ok()
    }

    fn settings(&self) -> ConditionsSettings {
        self.settings
    }

    fn boot(&self) -> Option<BootTimes> {
        self.boot
    }

    fn between_runs(&self) {
        (self.between_runs)()
    }

    fn in_window_heartbeat(&self) {
        (self.in_window)()
    }
}

/// A machine without a VideoCore firmware (QEMU virt): nothing to read, boot time still known.
pub struct NoFirmware<'a> {
    pub reason: &'static str,
    pub settings: ConditionsSettings,
    pub boot: Option<BootTimes>,
    pub in_window: &'a dyn Fn(),
}

impl ConditionsSource for NoFirmware<'_> {
    fn read(&self, _with_clocks: bool) -> ConditionsReading {
        ConditionsReading::default()
    }
    fn temperature_millic(&self) -> Option<u32> {
        None
    }
    fn settings(&self) -> ConditionsSettings {
        self.settings
    }
    fn unavailable(&self) -> Option<&'static str> {
        Some(self.reason)
    }
    fn boot(&self) -> Option<BootTimes> {
        self.boot
    }
    fn in_window_heartbeat(&self) {
        (self.in_window)()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bench::conditions::{cool_down, COOLDOWN_POLL_NS};
    use blockdev::testing::SteppingClock;
    use drivers::firmware_model::FirmwareModel;
    use std::string::ToString;

    fn conditions(firmware: &FirmwareModel) -> FirmwareConditions<'_, FirmwareModel> {
        FirmwareConditions {
            firmware,
            settings: ConditionsSettings::default(),
            faked_throttle: 0,
            boot: None,
            between_runs: &|| {},
            in_window: &|| {},
        }
    }

    #[test]
    fn a_calm_pi_reads_as_calm_with_every_clock() {
        let board = FirmwareModel::pi4();
        let reading = conditions(&board).read(true);
        assert_eq!(reading.throttled, Some(ThrottleFlags(0)));
        assert_eq!(
            (reading.temperature_millic, reading.temperature_limit_millic),
            (Some(48_500), Some(85_000))
        );
        let names: Vec<&str> = reading.clocks.iter().map(|clock| clock.name).collect();
        assert_eq!(names, ["arm", "core", "emmc", "emmc2"]);
        assert_eq!(reading.clocks[3].measured_hz, Some(100_000_000));
        assert!(reading.not_answered.is_empty());
        // The sticky bits were asked to be cleared.
        assert_eq!(board.calls.borrow()[0].request, [0xffff]);
    }

    #[test]
    fn throttling_during_a_run_shows_in_the_reading_after_it_only() {
        let board = FirmwareModel::pi4();
        let source = conditions(&board);
        assert!(!source.read(false).is_throttled());
        // Under-voltage during the run, over by its end: the sticky bit tells.
        board.raise(1 << 0);
        board.settle();
        let after = source.read(false);
        assert_eq!(after.throttled, Some(ThrottleFlags(1 << 16)));
        assert!(!source.read(false).is_throttled(), "reported once");
        assert!(conditions(&FirmwareModel::under_voltage()).read(false).is_throttled());
        let hot = conditions(&FirmwareModel::throttled()).read(false);
        assert_eq!(hot.throttled.unwrap().to_string(), "ARM frequency capped now, throttled now, soft temperature limit active now, ARM frequency capping occurred, throttling occurred, soft temperature limit occurred");
    }

    #[test]
    fn qemus_answers_and_the_unanswered_tag_are_named() {
        let qemu = FirmwareModel::qemu_like();
        let reading = conditions(&qemu).read(true);
        assert_eq!(reading.temperature_millic, Some(25_000));
        assert_eq!(reading.clocks[0].measured_hz, None);
        assert_eq!(reading.not_answered, ["GET_CLOCK_RATE_MEASURED (0x00030047)"], "named once");
        // test-fault=throttled makes QEMU's 0 look throttled.
        let faked = FirmwareConditions {
            faked_throttle: crate::kernel_settings::FAKED_THROTTLE_FLAGS,
            ..conditions(&qemu)
        };
        assert_eq!(faked.read(false).throttled, Some(ThrottleFlags(0x5_0005)));
    }

    #[test]
    fn a_silent_firmware_leaves_everything_unknown_and_says_why() {
        let silent = FirmwareModel::silent();
        let reading = conditions(&silent).read(true);
        assert_eq!((reading.throttled, reading.temperature_millic), (None, None));
        assert!(reading
            .clocks
            .iter()
            .all(|clock| clock.measured_hz.is_none() && clock.requested_hz.is_none()));
        assert!(
            reading.not_answered[0].starts_with("GET_THROTTLED (0x00030046: no mailbox answer"),
            "{:?}",
            reading.not_answered
        );
        assert_eq!(reading.not_answered.len(), 5, "{:?}", reading.not_answered);
        assert_eq!(conditions(&silent).temperature_millic(), None);
    }

    #[test]
    fn cooldown_waits_for_the_model_to_cool_after_its_polls() {
        // 66, 61, 56 then 49 °C: the fourth poll is below 50 °C.
        let board = FirmwareModel::pi4().with_temperatures(&[66_000, 61_000, 56_000, 49_000]);
        let source = conditions(&board);
        let clock = SteppingClock::new(1_000_000_000, 10_000_000);
        let mut console = String::new();
        let cooldown = cool_down(&|| source.temperature_millic(), &clock, 50_000, &mut console);
        assert_eq!((cooldown.polls, cooldown.last_millic), (4, Some(49_000)));
        assert!(cooldown.waited_ns >= 3 * COOLDOWN_POLL_NS, "{}", cooldown.waited_ns);
        assert_eq!(board.count(tags::GET_TEMPERATURE), 4);
        assert!(console.contains("cooldown: SoC 66.0 °C, waiting until it is below 50.0 °C"), "{console}");
    }
}
