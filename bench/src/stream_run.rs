//! What the scan and the sustained writes do around [`run_stream`]: count the device's failures
//! that were not described during the stream alone, and pace the progress line (drawn every
//! [`PROGRESS_INTERVAL_NS`], sent a little at a time every [`PROGRESS_PUMP_INTERVAL_NS`] so that
//! the UART never makes an I/O wait: docs/measurement.md §11).

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use blockdev::{BlockDevice, Clock};

use crate::console::{say, Console, ProgressLine};
use crate::run_loop::{RunEnvironment, PROGRESS_INTERVAL_NS, PROGRESS_PUMP_INTERVAL_NS};
use crate::stream::{run_stream, StreamEnd, StreamObserver, StreamSpec};

/// What ends an observer's part of a stream: it is told the stream's last tick.
pub(crate) type FinishObserver<O> = fn(&mut O, u64, &mut dyn Console);

/// Runs `spec` on `device` with `observer`, then `finish`es the observer at the stream's end
/// (which ends its progress line) and notes what the stream said and how many failed commands
/// the device counted without describing them during the stream.
pub(crate) fn run_counting_failures<O: StreamObserver>(
    device: &mut dyn BlockDevice,
    environment: &RunEnvironment<'_>,
    spec: StreamSpec,
    (observer, finish): (&mut O, FinishObserver<O>),
    console: &mut dyn Console,
    notes: &mut Vec<String>,
) -> StreamEnd {
    let _ = device.take_unreported_failures();
    let end = run_stream(device, environment.clock, environment.buffer_area, spec, observer, console);
    let unreported = device.take_unreported_failures();
    finish(observer, end.end_ticks, console);
    notes.extend(end.message.iter().cloned());
    if unreported > 0 {
        let name = device.name();
        say(console, notes, format!("{name}: ... and {unreported} more failed commands not described"));
    }
    end
}

/// When a stream job's progress line is drawn and when its unsent part goes to the console.
pub(crate) struct ProgressPacing {
    progress_interval_ticks: u64,
    pump_interval_ticks: u64,
    next_progress_ticks: u64,
    next_pump_ticks: u64,
}

impl ProgressPacing {
    pub(crate) fn new(clock: &dyn Clock) -> ProgressPacing {
        ProgressPacing {
            progress_interval_ticks: clock.ns_to_ticks(PROGRESS_INTERVAL_NS),
            pump_interval_ticks: clock.ns_to_ticks(PROGRESS_PUMP_INTERVAL_NS),
            next_progress_ticks: 0,
            next_pump_ticks: 0,
        }
    }

    /// The stream started at `now_ticks`: the first line is due one interval later.
    pub(crate) fn start(&mut self, now_ticks: u64) {
        self.next_progress_ticks = now_ticks + self.progress_interval_ticks;
    }

    /// Whether the line is due at `now_ticks`; if so, the next one is an interval later.
    pub(crate) fn line_due(&mut self, now_ticks: u64) -> bool {
        let due = now_ticks >= self.next_progress_ticks;
        if due {
            self.next_progress_ticks = now_ticks + self.progress_interval_ticks;
        }
        due
    }

    /// Sends a little more of `progress` when it has some unsent and the pump is due.
    pub(crate) fn pump(
        &mut self,
        now_ticks: u64,
        progress: &mut ProgressLine<'_>,
        console: &mut dyn Console,
    ) {
        if progress.has_unsent() && now_ticks >= self.next_pump_ticks {
            progress.pump(console);
            self.next_pump_ticks = now_ticks + self.pump_interval_ticks;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockdev::testing::SteppingClock;

    #[test]
    fn the_line_is_due_once_per_interval_from_the_start() {
        let clock = SteppingClock::new(1_000_000_000, 0);
        let mut pacing = ProgressPacing::new(&clock);
        pacing.start(1000);
        assert!(!pacing.line_due(1000 + PROGRESS_INTERVAL_NS - 1));
        assert!(pacing.line_due(1000 + PROGRESS_INTERVAL_NS));
        assert!(!pacing.line_due(1000 + PROGRESS_INTERVAL_NS + 1), "the next one is an interval later");
        assert!(pacing.line_due(1000 + 2 * PROGRESS_INTERVAL_NS + 1));
    }
}
