//! Test doubles shared by the host tests of every crate (feature `testing`): a clock that moves a
//! set step each time it is read, which tests can also move forward or stop.

use core::cell::Cell;

use crate::Clock;

/// A simulated time source. Every [`Clock::now_ticks`] returns the current tick and then moves
/// the clock forward by the step, so a polling loop sees time pass at a known rate; a test or a
/// simulated device can also jump it forward ([`SteppingClock::advance_to`]).
#[derive(Debug)]
pub struct SteppingClock {
    ticks: Cell<u64>,
    step_ticks: Cell<u64>,
    ticks_per_second: u64,
    /// A broken timer: every reading is the same and nothing moves it.
    frozen: bool,
}

impl SteppingClock {
    /// Starts at tick 0 and moves `step_ticks` per reading.
    pub fn new(ticks_per_second: u64, step_ticks: u64) -> SteppingClock {
        SteppingClock {
            ticks: Cell::new(0),
            step_ticks: Cell::new(step_ticks),
            ticks_per_second,
            frozen: false,
        }
    }

    /// A timer that never advances, whatever reads or moves it.
    pub fn frozen(ticks_per_second: u64) -> SteppingClock {
        SteppingClock { frozen: true, ..SteppingClock::new(ticks_per_second, 0) }
    }

    /// The current tick, without moving the clock.
    pub fn peek(&self) -> u64 {
        self.ticks.get()
    }

    /// Moves the clock to `ticks` if that is later than now.
    pub fn advance_to(&self, ticks: u64) {
        if !self.frozen && ticks > self.ticks.get() {
            self.ticks.set(ticks);
        }
    }

    /// Sets how far each reading moves the clock.
    pub fn set_step_ticks(&self, step_ticks: u64) {
        self.step_ticks.set(step_ticks);
    }
}

impl Clock for SteppingClock {
    fn now_ticks(&self) -> u64 {
        let now = self.ticks.get();
        if !self.frozen {
            self.ticks.set(now + self.step_ticks.get());
        }
        now
    }

    fn ticks_per_second(&self) -> u64 {
        self.ticks_per_second
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readings_step_and_jumps_only_go_forward() {
        let clock = SteppingClock::new(1_000_000_000, 10);
        assert_eq!((clock.now_ticks(), clock.now_ticks(), clock.peek()), (0, 10, 20));
        clock.advance_to(500);
        clock.advance_to(400);
        assert_eq!(clock.now_ticks(), 500);
        clock.set_step_ticks(0);
        assert_eq!((clock.now_ticks(), clock.now_ticks()), (510, 510));
        let stopped = SteppingClock::frozen(54_000_000);
        stopped.advance_to(1000);
        assert_eq!(
            (stopped.now_ticks(), stopped.now_ticks(), stopped.ticks_per_second()),
            (0, 0, 54_000_000)
        );
    }
}
