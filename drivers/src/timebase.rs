//! The generic counter's rate checked against the BCM283x system timer's 1 MHz counter at boot.
//!
//! Every figure the benchmark prints is a count of counter ticks divided by the rate CNTFRQ
//! claims, so a counter that runs at another rate scales every latency and bandwidth silently.
//! It happens on real boards: a BCM2837 started with the 32-bit image runs armstub7, which sets
//! the ARM-local timer prescaler only for BCM2711 (raspberrypi/tools `armstubs/armstub7.S`), and
//! the counter then ticks at 1 MHz while CNTFRQ says 19.2 MHz; circle's `lib/timer.cpp` refuses
//! to run on the same condition. The system timer is clocked at 1 MHz on every BCM2835 to
//! BCM2712 (BCM2835 ARM Peripherals ch. 12), so counting both for [`CHECK_WINDOW_US`] gives the
//! counter's real rate to 0.01 %.
//!
//! Each end of the window is a counter read, a system-timer read and a counter read again, so
//! the counter value at the system-timer read is known to within the two counter reads; a
//! window whose ends are not tight enough (the core was interrupted or, under QEMU, descheduled
//! between the reads) is measured again, up to [`ATTEMPTS`] times.
#![forbid(unsafe_code)]

use core::fmt;

/// How long the two counters are compared (system-timer µs).
pub const CHECK_WINDOW_US: u64 = 10_000;
/// How far the counter's rate may stray from the reported rate, in parts per 10 000 (1 %).
pub const TOLERANCE_PER_10K: u64 = 100;
/// Windows measured before the check gives up on a machine too busy to measure.
pub const ATTEMPTS: u32 = 5;
/// A window counts only when both ends together leave at most this share of the window's
/// counter ticks unknown (parts per 10 000: 0.5 %, half the tolerance).
const END_UNCERTAINTY_PER_10K: u64 = 50;

/// The two clocks as the check reads them.
pub trait TimebaseSources {
    /// The generic counter (CNTPCT).
    fn counter_ticks(&mut self) -> u64;
    /// The system timer's free-running count, in µs.
    fn reference_us(&mut self) -> u64;
}

/// What the check found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimebaseCheck {
    /// The counter runs at the reported rate, within [`TOLERANCE_PER_10K`].
    Agrees { reported_hz: u64, measured_hz: u64 },
    /// It does not: every figure timed with the reported rate would be scaled by
    /// `measured / reported`.
    Disagrees { reported_hz: u64, measured_hz: u64 },
    /// No window was clean enough to judge, or the system timer did not move.
    Unchecked { reason: &'static str },
}

impl TimebaseCheck {
    pub fn disagrees(&self) -> bool {
        matches!(self, TimebaseCheck::Disagrees { .. })
    }
}

impl fmt::Display for TimebaseCheck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Rounded to the kHz: the window measures to about 0.01 %.
        let khz = |hz: u64| {
            let khz = (hz + 500) / 1000;
            (khz / 1000, khz % 1000)
        };
        match *self {
            TimebaseCheck::Agrees { measured_hz, .. } => {
                let (mhz, khz) = khz(measured_hz);
                write!(
                    f,
                    "counter checked against the 1 MHz system timer over {} ms: {mhz}.{khz:03} MHz, as reported",
                    CHECK_WINDOW_US / 1000
                )
            }
            TimebaseCheck::Disagrees { reported_hz, measured_hz } => {
                let (reported_mhz, reported_khz) = khz(reported_hz);
                let (mhz, khz) = khz(measured_hz);
                write!(
                    f,
                    "counter runs at {mhz}.{khz:03} MHz against the 1 MHz system timer, not the {reported_mhz}.{reported_khz:03} MHz CNTFRQ reports"
                )
            }
            TimebaseCheck::Unchecked { reason } => write!(f, "counter not checked: {reason}"),
        }
    }
}

/// One end of a window: the counter just before and just after a system-timer read.
#[derive(Clone, Copy, Debug)]
struct WindowEnd {
    counter_before: u64,
    reference_us: u64,
    counter_after: u64,
}

impl WindowEnd {
    fn read(sources: &mut impl TimebaseSources) -> WindowEnd {
        let counter_before = sources.counter_ticks();
        let reference_us = sources.reference_us();
        let counter_after = sources.counter_ticks();
        WindowEnd { counter_before, reference_us, counter_after }
    }

    /// Twice the counter at the system-timer read (the midpoint without rounding).
    fn counter_doubled(&self) -> u64 {
        self.counter_before + self.counter_after
    }

    fn uncertainty_ticks(&self) -> u64 {
        self.counter_after.saturating_sub(self.counter_before)
    }
}

/// Compares the counter with the system timer over [`CHECK_WINDOW_US`]; `reported_hz` is what
/// CNTFRQ says.
pub fn check_counter(sources: &mut impl TimebaseSources, reported_hz: u64) -> TimebaseCheck {
    for _ in 0..ATTEMPTS {
        let start = WindowEnd::read(sources);
        let Some(end) = wait_for_window_end(sources, &start, reported_hz) else {
            return TimebaseCheck::Unchecked {
                reason: "the system timer did not advance through the window",
            };
        };
        let elapsed_us = end.reference_us - start.reference_us;
        let ticks_doubled = end.counter_doubled().saturating_sub(start.counter_doubled());
        let uncertainty = start.uncertainty_ticks() + end.uncertainty_ticks();
        if uncertainty * 2 * 10_000 > ticks_doubled * END_UNCERTAINTY_PER_10K {
            continue;
        }
        let measured_hz = (u128::from(ticks_doubled) * 1_000_000 / (2 * u128::from(elapsed_us))) as u64;
        let difference = measured_hz.abs_diff(reported_hz);
        return if u128::from(difference) * 10_000 > u128::from(reported_hz) * u128::from(TOLERANCE_PER_10K) {
            TimebaseCheck::Disagrees { reported_hz, measured_hz }
        } else {
            TimebaseCheck::Agrees { reported_hz, measured_hz }
        };
    }
    TimebaseCheck::Unchecked { reason: "every window was interrupted" }
}

/// Reads ends until the system timer is [`CHECK_WINDOW_US`] past `start`; `None` when it has not
/// got there while the counter ran a hundred windows' worth at the reported rate (or, for a
/// counter that does not move either, after as many reads): a system timer that stops, at once or
/// part-way through the window, never holds the boot.
fn wait_for_window_end(
    sources: &mut impl TimebaseSources,
    start: &WindowEnd,
    reported_hz: u64,
) -> Option<WindowEnd> {
    let give_up_ticks = reported_hz.max(1_000_000) * CHECK_WINDOW_US * 100 / 1_000_000;
    let mut reads = 0u64;
    loop {
        let end = WindowEnd::read(sources);
        if end.reference_us >= start.reference_us + CHECK_WINDOW_US {
            return Some(end);
        }
        reads += 1;
        let counter_ran = end.counter_after.saturating_sub(start.counter_after);
        if counter_ran > give_up_ticks || reads > give_up_ticks {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use crate::system_timer::SystemTimer;
    use core::cell::Cell;
    use hal::mmio::RegisterIo;
    use std::string::ToString;

    /// Simulated time in ns, advanced by every register or counter read.
    struct Board {
        now_ns: Cell<u64>,
        read_ns: u64,
        counter_hz: u64,
        /// A jump of the clock (ns) before the read with this number, as a core interrupted or a
        /// QEMU vCPU descheduled between two reads.
        stall_at_read: Option<(u64, u64)>,
        reads: Cell<u64>,
        /// The system timer stops at this reading (µs); it reads on as the board's clock until then.
        system_timer_stops_at_us: Option<u64>,
    }

    impl Board {
        fn new(counter_hz: u64) -> Board {
            Board {
                now_ns: Cell::new(5_000_000_000),
                read_ns: 150,
                counter_hz,
                stall_at_read: None,
                reads: Cell::new(0),
                system_timer_stops_at_us: None,
            }
        }
        fn tick(&self) -> u64 {
            let reads = self.reads.get() + 1;
            self.reads.set(reads);
            let mut now = self.now_ns.get() + self.read_ns;
            if let Some((at, stall_ns)) = self.stall_at_read {
                if at == reads {
                    now += stall_ns;
                }
            }
            self.now_ns.set(now);
            now
        }
    }

    /// The BCM2835 system timer's CLO/CHI as the board's 1 MHz clock drives them.
    impl RegisterIo for &Board {
        fn read32(&self, offset_bytes: usize) -> u32 {
            let running_us = self.tick() / 1000;
            let now_us = self.system_timer_stops_at_us.map_or(running_us, |stop_us| running_us.min(stop_us));
            match offset_bytes {
                0x04 => now_us as u32,
                0x08 => (now_us >> 32) as u32,
                _ => panic!("system timer register {offset_bytes:#x}"),
            }
        }
        fn write32(&self, offset_bytes: usize, _: u32) {
            panic!("the system timer is never written ({offset_bytes:#x})");
        }
    }

    struct Sources<'b> {
        board: &'b Board,
    }
    impl TimebaseSources for Sources<'_> {
        fn counter_ticks(&mut self) -> u64 {
            let now = self.board.tick();
            (u128::from(now) * u128::from(self.board.counter_hz) / 1_000_000_000) as u64
        }
        fn reference_us(&mut self) -> u64 {
            SystemTimer::new(self.board).ticks()
        }
    }

    fn check(board: &Board, reported_hz: u64) -> TimebaseCheck {
        check_counter(&mut Sources { board }, reported_hz)
    }

    #[test]
    fn a_counter_at_its_reported_rate_agrees() {
        for hz in [19_200_000, 54_000_000, 62_500_000] {
            let result = check(&Board::new(hz), hz);
            let TimebaseCheck::Agrees { measured_hz, .. } = result else { panic!("{result:?}") };
            assert!(measured_hz.abs_diff(hz) * 10_000 < hz, "{measured_hz} for {hz}");
        }
        let text = check(&Board::new(19_200_000), 19_200_000).to_string();
        assert!(
            text.starts_with("counter checked against the 1 MHz system timer over 10 ms: 19.2"),
            "{text}"
        );
    }

    #[test]
    fn a_bcm2837_counter_left_at_1_mhz_under_a_19_2_mhz_cntfrq_disagrees() {
        let result = check(&Board::new(1_000_000), 19_200_000);
        let TimebaseCheck::Disagrees { reported_hz, measured_hz } = result else { panic!("{result:?}") };
        assert_eq!(reported_hz, 19_200_000);
        assert!(measured_hz.abs_diff(1_000_000) < 1_000, "{measured_hz}");
        assert_eq!(
            result.to_string(),
            "counter runs at 1.000 MHz against the 1 MHz system timer, not the 19.200 MHz CNTFRQ reports"
        );
        // 2 % off is outside the 1 % tolerance, 0.5 % inside.
        assert!(check(&Board::new(19_584_000), 19_200_000).disagrees());
        assert!(!check(&Board::new(19_296_000), 19_200_000).disagrees());
    }

    #[test]
    fn an_interrupted_window_is_measured_again() {
        // 5 ms lost between the counter read and the system-timer read at one end: that window
        // would say 50 % off; it is thrown away and the next one is right.
        let mut board = Board::new(19_200_000);
        board.stall_at_read = Some((2, 5_000_000));
        let result = check(&board, 19_200_000);
        assert!(matches!(result, TimebaseCheck::Agrees { .. }), "{result:?}");
    }

    #[test]
    fn a_stopped_system_timer_leaves_the_counter_unchecked() {
        let mut board = Board::new(19_200_000);
        board.system_timer_stops_at_us = Some(1234);
        assert_eq!(
            check(&board, 19_200_000),
            TimebaseCheck::Unchecked { reason: "the system timer did not advance through the window" }
        );
    }

    #[test]
    fn a_system_timer_that_stops_part_way_through_the_window_does_not_hold_the_boot() {
        let mut board = Board::new(19_200_000);
        // The board's clock starts at 5 s: the timer runs 3 ms of the 10 ms window, then stops.
        board.system_timer_stops_at_us = Some(5_003_000);
        assert_eq!(
            check(&board, 19_200_000),
            TimebaseCheck::Unchecked { reason: "the system timer did not advance through the window" }
        );
    }
}
