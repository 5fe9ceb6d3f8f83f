//! `preset=hdparm` (`jobs=hdparm`): hdparm's two figures, `-T` then `-t`, printed as hdparm
//! 9.x prints them (docs/surface-and-sustained.md §5).
//!
//! What hdparm does (hdparm.c, `time_cache` and `time_device`; read, not copied):
//! - it reads in units of `TIMING_BUF_BYTES` = `TIMING_BUF_MB` × 1024 × 1024 with
//!   `TIMING_BUF_MB` = 2, and counts each read as 2 "MB": its MB is 2^20 bytes, not 10^6;
//! - `-t` reads such units one after another from the device's start until at least 3 s have
//!   passed (or the device's end, `nsectors / 2048 / 2` units), and prints
//!   ` Timing buffered disk reads: %3u MB in %5.2f seconds = %6.2f MB/sec` with MB/sec =
//!   total MB / elapsed seconds (`kB/sec` = that × 1024 when it is 1 or less);
//! - `-T` reads the same first unit again and again, from the page cache, until at least 2 s
//!   have passed, subtracts the time the loop takes without the reads (lseek and the timer) and
//!   prints ` Timing cached reads:   ...` the same way.
//!
//! Here `-t` streams 2 MiB at a time from LBA 0 ([`crate::stream`] with 2 MiB batches: the
//! requests of one unit, split at what one request may carry, go out together and the next
//! unit waits for the whole of this one, as one `read()` does). There is no page cache: `-T`
//! copies 2 MiB from one buffer of RAM to another, cached memory to cached memory, which is
//! the memory-copy path a cached read ends in. Both figures are also given in MB of 10^6 bytes.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use blockdev::{BlockDevice, Clock, IoErrorKind, Operation};

use crate::console::{say, Console};
use crate::results::RunEnd;
use crate::run_loop::RunEnvironment;
use crate::settings::{JobOperation, JobSpec};
use crate::stall_watch::StallWatch;
use crate::stream::{run_stream, Flow, Piece, StreamObserver, StreamSpec};
use crate::stream_plan::{fit_stream, StreamLabel};
use crate::stream_results::{HdparmResult, HdparmTiming, TIMING_BUF_BYTES};
use crate::units::{Fixed, NS_PER_S};

/// `-t` reads until at least this long has passed.
pub const BUFFERED_NS: u64 = 3 * NS_PER_S;
/// `-T` copies until at least this long has passed.
pub const CACHED_NS: u64 = 2 * NS_PER_S;

/// hdparm's `-T` loop: `copy` (one unit) again and again until [`CACHED_NS`] have passed, then
/// the same number of passes without the copy, whose time is taken off. A timer that stops
/// ends the loop ([`StallWatch`], as in the run loop) with the tick it stopped at and the message
/// that says so.
pub fn time_cached(clock: &dyn Clock, copy: &mut dyn FnMut()) -> Result<HdparmTiming, (RunEnd, String)> {
    let limit = clock.ns_to_ticks(CACHED_NS);
    let start = clock.now_ticks();
    let mut stall = StallWatch { last_reading: start, identical_readings: 0 };
    let mut iterations = 0u64;
    let mut end = start;
    while end - start < limit {
        iterations += 1;
        copy();
        end = clock.now_ticks();
        if stall.has_stopped(end) {
            return Err((RunEnd::ClockStalled { ticks: end }, stall.stopped_message(end)));
        }
    }
    let overhead_start = clock.now_ticks();
    let mut overhead_end = overhead_start;
    for _ in 0..iterations {
        overhead_end = core::hint::black_box(clock.now_ticks());
    }
    let overhead_ns = clock.ticks_to_ns(overhead_end - overhead_start);
    let elapsed_ns = clock.ticks_to_ns(end - start).saturating_sub(overhead_ns);
    Ok(HdparmTiming { iterations, elapsed_ns, overhead_ns })
}

/// Two buffers of one unit in RAM, copied one into the other.
pub struct MemoryCopy {
    from: Vec<u8>,
    to: Vec<u8>,
}

impl Default for MemoryCopy {
    fn default() -> Self {
        MemoryCopy::new()
    }
}

impl MemoryCopy {
    pub fn new() -> MemoryCopy {
        let from = (0..TIMING_BUF_BYTES).map(|index| index as u8).collect();
        MemoryCopy { from, to: alloc::vec![0; TIMING_BUF_BYTES as usize] }
    }

    pub fn copy(&mut self) {
        self.to.copy_from_slice(core::hint::black_box(&self.from));
        core::hint::black_box(&mut self.to);
    }
}

/// `-T` then `-t` on one device; `None` when the device cannot be read this way (said why).
pub(crate) fn run(
    device: &mut dyn BlockDevice,
    environment: &RunEnvironment<'_>,
    label: &StreamLabel<'_>,
    run: u32,
    console: &mut dyn Console,
) -> Option<(HdparmResult, Option<RunEnd>)> {
    run_with_copy(device, environment, label, run, console, &mut |copy| copy())
}

/// [`run`] with the copy of `-T` made through `copy_with` (tests time a simulated copy).
pub(crate) fn run_with_copy(
    device: &mut dyn BlockDevice,
    environment: &RunEnvironment<'_>,
    label: &StreamLabel<'_>,
    run: u32,
    console: &mut dyn Console,
    copy_with: &mut dyn FnMut(&mut dyn FnMut()),
) -> Option<(HdparmResult, Option<RunEnd>)> {
    let name = String::from(device.name());
    let geometry = device.geometry();
    let mut notes = Vec::new();
    let units = geometry.capacity_bytes() / TIMING_BUF_BYTES;
    let unit_job = JobSpec::new(JobOperation::Hdparm, TIMING_BUF_BYTES, u32::MAX);
    let plan = match fit_stream(&unit_job, &geometry, (0, units * TIMING_BUF_BYTES), &name, &mut Vec::new()) {
        Ok(plan) => plan,
        Err(_) if units == 0 => {
            say(console, &mut notes, format!("{name}: hdparm -t: the device holds less than one 2 MiB read"));
            fit_stream(&unit_job, &geometry, (0, geometry.capacity_bytes()), &name, &mut Vec::new()).ok()?
        }
        Err(error) => {
            say(console, &mut notes, format!("job hdparm skipped on {name}: {error}"));
            return None;
        }
    };
    let queue_depth = TIMING_BUF_BYTES.div_ceil(plan.block_bytes).min(u64::from(plan.queue_depth)) as u32;
    let _ = writeln!(console, "\n{name}:");
    let mut memory = MemoryCopy::new();
    let (cached, stalled) = match time_cached(environment.clock, &mut || copy_with(&mut || memory.copy())) {
        Ok(cached) => {
            let _ = writeln!(console, " Timing cached reads:   {}", cached.cached_text());
            (cached, None)
        }
        Err((end, message)) => {
            say(console, &mut notes, format!(" Timing cached reads: {message}"));
            (HdparmTiming::default(), Some(end))
        }
    };
    let mut result = HdparmResult {
        job_index: label.job_index,
        device_index: label.device_index,
        device_name: name.clone(),
        run,
        cached,
        buffered: None,
        request_bytes: plan.block_bytes,
        queue_depth,
        errors: [0; IoErrorKind::ALL.len()],
        ended_early: None,
        notes,
    };
    if let Some(end) = stalled {
        result.ended_early = Some(end.reason());
        return Some((result, Some(end)));
    }
    let ended = match units {
        0 => None,
        _ => time_buffered(device, environment, (units, plan.block_bytes, queue_depth), &mut result, console),
    };
    print_units_note(console, &result);
    Some((result, ended))
}

/// hdparm's `-t`: units from LBA 0, one at a time, until 3 s or the device's end.
fn time_buffered(
    device: &mut dyn BlockDevice,
    environment: &RunEnvironment<'_>,
    (units, request_bytes, queue_depth): (u64, u64, u32),
    result: &mut HdparmResult,
    console: &mut dyn Console,
) -> Option<RunEnd> {
    let spec = StreamSpec {
        operation: Operation::Read,
        start_bytes: 0,
        end_bytes: units * TIMING_BUF_BYTES,
        request_bytes,
        logical_block_bytes: u64::from(device.geometry().logical_block_bytes),
        queue_depth: queue_depth as usize,
        batch_bytes: Some(TIMING_BUF_BYTES),
        wrap: false,
    };
    let clock = environment.clock;
    let mut observer = BufferedReads {
        limit_ticks: clock.ns_to_ticks(BUFFERED_NS),
        max_iterations: units,
        start_ticks: 0,
        end_ticks: 0,
        iterations: 0,
        errors: [0; IoErrorKind::ALL.len()],
    };
    let end = run_stream(device, clock, environment.buffer_area, spec, &mut observer, console);
    result.errors = observer.errors;
    result.ended_early = end.ended_early.map(|end| end.reason());
    result.notes.extend(end.message);
    let timing = HdparmTiming {
        iterations: observer.iterations,
        elapsed_ns: clock.ticks_to_ns(observer.end_ticks.saturating_sub(observer.start_ticks)),
        overhead_ns: 0,
    };
    match result.errors_total() {
        0 if result.ended_early.is_none() => {
            let _ = writeln!(console, " Timing buffered disk reads: {}", timing.buffered_text());
            result.buffered = Some(timing);
        }
        failed => {
            let message = format!(" Timing buffered disk reads: read failed ({failed} requests failed)");
            say(console, &mut result.notes, message);
        }
    }
    end.ended_early
}

/// Counts the units of `-t` and stops after 3 s or the last one.
struct BufferedReads {
    limit_ticks: u64,
    max_iterations: u64,
    start_ticks: u64,
    end_ticks: u64,
    iterations: u64,
    errors: [u64; IoErrorKind::ALL.len()],
}

impl StreamObserver for BufferedReads {
    fn started(&mut self, now_ticks: u64) {
        self.start_ticks = now_ticks;
        self.end_ticks = now_ticks;
    }

    fn completed(&mut self, piece: &Piece) {
        if let Err(error) = piece.result {
            self.errors[error.kind.index()] += 1;
        }
    }

    fn batch_done(&mut self, now_ticks: u64) -> Flow {
        self.iterations += 1;
        self.end_ticks = now_ticks;
        let failed = self.errors.iter().any(|&count| count > 0);
        let done = now_ticks - self.start_ticks >= self.limit_ticks || self.iterations >= self.max_iterations;
        if done || failed {
            Flow::Stop
        } else {
            Flow::Continue
        }
    }

    fn tick(&mut self, _now_ticks: u64, _console: &mut dyn Console) -> Flow {
        Flow::Continue
    }
}

/// What the MB in hdparm's lines are, and the rates in MB of 10^6 bytes.
fn print_units_note(console: &mut dyn Console, result: &HdparmResult) {
    let decimal = |timing: &HdparmTiming| Fixed::new(u128::from(timing.centi_decimal_mb_per_s()), 2);
    let _ = write!(
        console,
        "{:<8} hdparm counts each 2 MiB read as 2 MB (MB = 2^20 bytes); in MB of 10^6 bytes: cached {} MB/s",
        result.device_name,
        decimal(&result.cached)
    );
    if let Some(buffered) = &result.buffered {
        let _ = write!(console, ", buffered {} MB/s", decimal(buffered));
    }
    let _ = writeln!(
        console,
        "; -T copies 2 MiB from memory to memory (no page cache here), -t reads 2 MiB at a time from LBA 0 in requests of {} ({} at once)",
        crate::units::SizeText(result.request_bytes),
        result.queue_depth
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu_cost::NoCpuCounters;
    use crate::sim::{SimBehaviour, SimDevice};
    use blockdev::testing::SteppingClock;
    use blockdev::Geometry;

    #[test]
    fn the_lines_have_hdparms_widths_and_arithmetic() {
        // hdparm's published example: 132 MB (66 reads of 2 MiB) in 3.0068 s.
        let timing = HdparmTiming { iterations: 66, elapsed_ns: 3_006_800_000, overhead_ns: 0 };
        assert_eq!(timing.buffered_text(), "132 MB in  3.01 seconds =  43.90 MB/sec");
        assert_eq!(timing.centi_decimal_mb_per_s(), 4603, "138.4 MB of 10^6 bytes in 3.0068 s");
        let fast = HdparmTiming { iterations: 547, elapsed_ns: 3_000_500_000, overhead_ns: 0 };
        assert_eq!(fast.buffered_text(), "1094 MB in  3.00 seconds = 364.61 MB/sec");
        let cached = HdparmTiming { iterations: 7798, elapsed_ns: 1_998_300_000, overhead_ns: 0 };
        assert_eq!(cached.cached_text(), "15596 MB in  2.00 seconds = 7804.63 MB/sec");
        // At 1 MB/s or less hdparm gives kB/sec: MB/sec × 1024.
        let slow = HdparmTiming { iterations: 1, elapsed_ns: 4_000_000_000, overhead_ns: 0 };
        assert_eq!(slow.buffered_text(), "  2 MB in  4.00 seconds = 512.00 kB/sec");
    }

    #[test]
    fn cached_reads_take_off_the_loop_without_copies() {
        // Each copy takes 1 ms of a 1 MHz clock, each reading of it 1 µs.
        let clock = SteppingClock::new(1_000_000, 1);
        let timing = time_cached(&clock, &mut || clock.advance_to(clock.peek() + 1_000)).unwrap();
        // 1001 µs per pass: 1999 passes reach 2.000999 s; the overhead loop takes 1999 µs.
        assert_eq!(timing.iterations, 1999);
        assert_eq!(timing.overhead_ns, 1_999_000);
        assert_eq!(timing.elapsed_ns, 2_000_999_000 - 1_999_000);
        assert_eq!(timing.cached_text(), "3998 MB in  2.00 seconds = 2000.00 MB/sec");
    }

    #[test]
    fn cached_reads_end_when_the_timer_stops_instead_of_copying_for_ever() {
        let clock = SteppingClock::frozen(1_000_000);
        let mut copies = 0u64;
        let (end, message) = time_cached(&clock, &mut || copies += 1).unwrap_err();
        assert_eq!(end, RunEnd::ClockStalled { ticks: 0 });
        assert_eq!(
            copies,
            crate::stall_watch::STALLED_CLOCK_READINGS,
            "stopped as soon as the watch said so"
        );
        assert!(message.contains("the timer stopped at tick 0"), "{message}");
    }

    #[test]
    fn a_stopped_timer_ends_hdparm_before_the_device_is_read() {
        let clock = SteppingClock::frozen(1_000_000_000);
        let geometry = Geometry {
            logical_block_bytes: 512,
            block_count: 1 << 14,
            max_request_blocks: 512,
            max_in_flight: 4,
        };
        let mut device = SimDevice::new("sd0", SimBehaviour::new(geometry, 0), &clock);
        let counters = NoCpuCounters("host test");
        let environment = crate::stream::tests::environment(&clock, &counters, 2 << 20);
        let job = crate::settings::HDPARM_JOB;
        let label = StreamLabel { job_index: 0, job: &job, device_index: 0 };
        let mut console = String::new();
        let (result, end) =
            run_with_copy(&mut device, &environment, &label, 1, &mut console, &mut |_copy| ()).unwrap();
        assert_eq!(end, Some(RunEnd::ClockStalled { ticks: 0 }));
        assert_eq!(result.ended_early, Some("timer stopped"));
        assert!((result.cached.iterations, result.buffered) == (0, None), "{result:?}");
        assert!(console.contains(" Timing cached reads: the timer stopped at tick 0"), "{console}");
        assert!(device.accepted.is_empty(), "no read after the timer stopped");
    }

    #[test]
    fn a_device_of_known_speed_gives_its_mb_per_second() {
        // 1 KiB per 10 µs on one channel: 2 MiB per 20.48 ms, 97.66 MiB/s; requests of 256 KiB,
        // eight of them for each 2 MiB read.
        let clock = SteppingClock::new(1_000_000_000, 10);
        let geometry = Geometry {
            logical_block_bytes: 512,
            block_count: 1 << 21,
            max_request_blocks: 512,
            max_in_flight: 32,
        };
        let mut behaviour = SimBehaviour::new(geometry, 0);
        behaviour.transfer_ticks_per_kib = 10_000;
        let mut device = SimDevice::new("sd0", behaviour, &clock);
        let counters = NoCpuCounters("host test");
        let environment = crate::stream::tests::environment(&clock, &counters, 2 << 20);
        let job = crate::settings::HDPARM_JOB;
        assert_eq!(job.to_string(), "hdparm");
        let label = StreamLabel { job_index: 0, job: &job, device_index: 0 };
        let mut console = String::new();
        // The copy takes 0.5 ms: 4000 MB/sec.
        let mut copy = |_copy: &mut dyn FnMut()| clock.advance_to(clock.peek() + 500_000);
        let (result, _) =
            run_with_copy(&mut device, &environment, &label, 1, &mut console, &mut copy).unwrap();
        let buffered = result.buffered.unwrap();
        // 3 s / 20.48 ms: the 147th read is the first to end past 3 s.
        assert_eq!(buffered.iterations, 147, "{console}");
        assert_eq!(buffered.total_mb(), 294);
        assert!((3_010_000_000..3_011_000_000).contains(&buffered.elapsed_ns), "{buffered:?}");
        // The device's speed, 2 MiB per 20.48 ms, is 97.66 hdparm MB/s and 102.40 MB/s of 10^6 bytes.
        assert!((9_763..=9_766).contains(&buffered.centi_mb_per_s()), "{buffered:?}");
        assert!((10_237..=10_240).contains(&buffered.centi_decimal_mb_per_s()), "{buffered:?}");
        assert_eq!((result.request_bytes, result.queue_depth), (256 << 10, 8));
        let line = format!(" Timing buffered disk reads: {}\n", buffered.buffered_text());
        assert!(line.starts_with(" Timing buffered disk reads: 294 MB in  3.01 seconds =  97.6"), "{line}");
        assert!(console.contains(&line), "{console}");
        assert!(
            console.contains("\nsd0:\n Timing cached reads:   8000 MB in  2.00 seconds = 4000.00 MB/sec\n"),
            "{console}"
        );
        assert!(console.contains("in MB of 10^6 bytes: cached 4194.30 MB/s, buffered 102.4"), "{console}");
        // The reads started at LBA 0 and went in order, one 2 MiB read at a time.
        assert_eq!(device.accepted[0].lba, 0);
        assert!(device.accepted.windows(2).all(|pair| pair[1].lba == pair[0].lba + 512));
        assert_eq!(device.max_in_flight_seen, 8);
    }
}
