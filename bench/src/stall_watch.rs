//! A timer that has stopped: the same reading [`STALLED_CLOCK_READINGS`] times in a row. The run
//! loop, the stream jobs and the cooldown wait each watch their clock with one, so a broken timer
//! ends a wait instead of holding the machine.

use alloc::format;
use alloc::string::String;

/// This many identical timer readings in a row mean the timer has stopped (one loop iteration
/// takes well over a tick of the slowest timer, 52 ns at 19.2 MHz, so a working timer changes
/// within a few readings); every wait of the runner is measured with it, so the benchmark stops.
pub const STALLED_CLOCK_READINGS: u64 = 1_000_000;

/// Notices a timer that has stopped.
pub(crate) struct StallWatch {
    pub(crate) last_reading: u64,
    pub(crate) identical_readings: u64,
}

impl StallWatch {
    /// Whether `now` makes [`STALLED_CLOCK_READINGS`] identical readings in a row.
    pub(crate) fn has_stopped(&mut self, now: u64) -> bool {
        if now != self.last_reading {
            self.last_reading = now;
            self.identical_readings = 0;
            return false;
        }
        self.identical_readings += 1;
        self.identical_readings >= STALLED_CLOCK_READINGS
    }

    /// The message that says the timer stopped at `now` (the run ends as
    /// `RunEnd::ClockStalled { ticks: now }`).
    pub(crate) fn stopped_message(&self, now: u64) -> String {
        format!(
            "the timer stopped at tick {now} ({} identical readings); the benchmark stops here",
            self.identical_readings
        )
    }
}
