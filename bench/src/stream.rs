//! A sequential stream of reads or writes through a byte range, the engine of the scan, the
//! sustained write and hdparm's `-t` (crate::scan, crate::sustained, crate::hdparm;
//! docs/surface-and-sustained.md §1).
//!
//! Requests of `request_bytes` go out in offset order, `queue_depth` of them in flight, with one
//! doorbell per batch, as [`crate::run_loop`] does for fio's jobs; what completed, when, is handed
//! to a [`StreamObserver`], which keeps its own figures (steps, seconds, iterations) and says when
//! to stop. Unlike a fio job a stream has no ramp and no measured window: it ends at the end of
//! its range, or when the observer stops it (time, iterations), and then drains. With
//! `batch_bytes` the requests of each batch go out together and the next batch waits until the
//! whole batch has completed (one `read()` of a program at a time, which the block layer splits
//! into requests). With `wrap` the stream starts again at the range's start after its end (each
//! time round is a pass). Nothing is allocated per request.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use blockdev::{BlockDevice, Clock, Completion, DmaBuffer, IoError, Operation, Request, SubmitError};

use crate::console::Console;
use crate::results::RunEnd;
use crate::run_loop::DRAIN_TIMEOUT_NS;
use crate::stall_watch::StallWatch;

/// What a stream does and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StreamSpec {
    pub operation: Operation,
    /// The byte range, whole logical blocks: `[start_bytes, end_bytes)`.
    pub start_bytes: u64,
    pub end_bytes: u64,
    /// Bytes per request (the last request before the end or a batch's end may be shorter).
    pub request_bytes: u64,
    pub logical_block_bytes: u64,
    pub queue_depth: usize,
    /// Requests go out in batches of this many bytes, one batch at a time.
    pub batch_bytes: Option<u64>,
    /// After the end, start again at the start.
    pub wrap: bool,
}

/// A request that completed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Piece {
    pub offset_bytes: u64,
    pub bytes: u64,
    pub lba: u64,
    pub block_count: u32,
    /// Which time through the range (from 1).
    pub pass: u32,
    /// When the poll that found it returned.
    pub done_ticks: u64,
    pub result: Result<(), IoError>,
    /// Its data, until the observer returns.
    pub buffer: DmaBuffer,
}

/// Whether the stream goes on submitting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    Stop,
}

/// What a stream reports to, and who decides when it stops.
pub(crate) trait StreamObserver {
    /// Once, just before the first request goes out.
    fn started(&mut self, _now_ticks: u64) {}
    /// Before a write goes out: its data into `request.buffer`.
    fn fill(&mut self, _request: &Request, _pass: u32) {}
    /// A request completed; its buffer is read here or never.
    fn completed(&mut self, piece: &Piece);
    /// A whole batch has completed (streams with `batch_bytes` only).
    fn batch_done(&mut self, _now_ticks: u64) -> Flow {
        Flow::Continue
    }
    /// Once per pass of the loop: the progress line, a time limit.
    fn tick(&mut self, now_ticks: u64, console: &mut dyn Console) -> Flow;
    /// Ends the progress line so that a message can follow.
    fn interrupt(&mut self, _console: &mut dyn Console) {}
}

/// How a stream ended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct StreamEnd {
    pub ended_early: Option<RunEnd>,
    /// The message printed about it.
    pub message: Option<String>,
    /// Where the next request would have gone, and in which pass.
    pub next_offset_bytes: u64,
    pub pass: u32,
    pub end_ticks: u64,
    /// Completions whose tag had no request in flight.
    pub unknown_completions: u64,
}

/// A request in flight.
#[derive(Clone, Copy, Debug, Default)]
struct InFlight {
    offset_bytes: u64,
    bytes: u64,
    pass: u32,
    busy: bool,
}

/// The running stream.
struct Stream<'s> {
    device: &'s mut dyn BlockDevice,
    clock: &'s dyn Clock,
    spec: StreamSpec,
    buffer_area: DmaBuffer,
    buffer_count: u64,
    tags: Vec<InFlight>,
    free_tags: Vec<u32>,
    completions: Vec<Completion>,
    in_flight: usize,
    next_offset_bytes: u64,
    pass: u32,
    batch_end_bytes: u64,
    held_back: Option<(Request, u32)>,
    submitting: bool,
    /// When a request last completed (or the stream started).
    last_progress_ticks: u64,
    /// [`DRAIN_TIMEOUT_NS`] in the clock's ticks, converted once.
    drain_timeout_ticks: u64,
    end: StreamEnd,
    stall: StallWatch,
}

/// Runs `spec` on `device` until its range ends or `observer` stops it, then drains.
pub(crate) fn run_stream(
    device: &mut dyn BlockDevice,
    clock: &dyn Clock,
    buffer_area: DmaBuffer,
    spec: StreamSpec,
    observer: &mut dyn StreamObserver,
    console: &mut dyn Console,
) -> StreamEnd {
    let buffer_count = (buffer_area.length_bytes as u64 / spec.request_bytes.max(1)).max(1);
    let queue_depth = spec.queue_depth.max(1);
    let first_batch_end = spec.batch_bytes.map_or(spec.end_bytes, |batch| spec.start_bytes + batch);
    let mut stream = Stream {
        device,
        clock,
        spec: StreamSpec { queue_depth, ..spec },
        buffer_area,
        buffer_count,
        tags: alloc::vec![InFlight::default(); queue_depth],
        free_tags: (0..queue_depth as u32).rev().collect(),
        completions: alloc::vec![Completion::default(); queue_depth],
        in_flight: 0,
        next_offset_bytes: spec.start_bytes,
        pass: 1,
        batch_end_bytes: first_batch_end.min(spec.end_bytes),
        held_back: None,
        submitting: spec.end_bytes > spec.start_bytes,
        last_progress_ticks: 0,
        drain_timeout_ticks: clock.ns_to_ticks(DRAIN_TIMEOUT_NS),
        end: StreamEnd::default(),
        stall: StallWatch { last_reading: 0, identical_readings: 0 },
    };
    let start = clock.now_ticks();
    stream.stall.last_reading = start;
    stream.last_progress_ticks = start;
    observer.started(start);
    stream.run(observer, console);
    // A request held back for lack of room was never sent: the stream ends before it.
    let (next_offset_bytes, pass) = match stream.held_back {
        Some((request, pass)) => (request.lba * stream.spec.logical_block_bytes, pass),
        None => (stream.next_offset_bytes, stream.pass),
    };
    stream.end.next_offset_bytes = next_offset_bytes;
    stream.end.pass = pass;
    stream.end
}

impl Stream<'_> {
    fn run(&mut self, observer: &mut dyn StreamObserver, console: &mut dyn Console) {
        loop {
            let now = self.clock.now_ticks();
            if self.stall.has_stopped(now) {
                let (end, message) = (RunEnd::ClockStalled { ticks: now }, self.stall.stopped_message(now));
                self.end_early(end, message, observer, console);
                break;
            }
            self.reap(observer);
            if self.submitting {
                self.next_batch(observer);
                self.fill(observer, console);
            }
            if observer.tick(now, console) == Flow::Stop {
                self.submitting = false;
            }
            if !self.submitting && self.in_flight == 0 {
                break;
            }
            if self.in_flight > 0 && self.waited_too_long(now, observer, console) {
                break;
            }
        }
        self.end.end_ticks = self.clock.now_ticks();
    }

    /// Polls once and hands each completion to the observer.
    fn reap(&mut self, observer: &mut dyn StreamObserver) {
        let count = self.device.poll(&mut self.completions);
        if count == 0 {
            return;
        }
        let done_ticks = self.clock.now_ticks();
        self.last_progress_ticks = done_ticks;
        for index in 0..count {
            let completion = self.completions[index];
            let Some(request) = self.tags.get_mut(completion.tag as usize).filter(|tag| tag.busy) else {
                self.end.unknown_completions += 1;
                continue;
            };
            request.busy = false;
            let request = *request;
            let buffer = self.buffer(completion.tag, request.bytes);
            let lba = request.offset_bytes / self.spec.logical_block_bytes;
            let block_count = (request.bytes / self.spec.logical_block_bytes) as u32;
            observer.completed(&Piece {
                offset_bytes: request.offset_bytes,
                bytes: request.bytes,
                lba,
                block_count,
                pass: request.pass,
                done_ticks,
                result: completion.result,
                buffer,
            });
            self.free_tags.push(completion.tag);
            self.in_flight -= 1;
        }
    }

    /// With batches: once the current batch has completed, tells the observer and opens the next.
    fn next_batch(&mut self, observer: &mut dyn StreamObserver) {
        let Some(batch_bytes) = self.spec.batch_bytes else { return };
        let batch_complete = self.in_flight == 0 && self.next_offset_bytes >= self.batch_end_bytes;
        if !batch_complete || self.held_back.is_some() {
            return;
        }
        if observer.batch_done(self.clock.now_ticks()) == Flow::Stop {
            self.submitting = false;
            return;
        }
        if self.next_offset_bytes >= self.spec.end_bytes {
            if !self.spec.wrap {
                self.submitting = false;
                return;
            }
            self.next_offset_bytes = self.spec.start_bytes;
            self.pass += 1;
        }
        self.batch_end_bytes = (self.next_offset_bytes + batch_bytes).min(self.spec.end_bytes);
    }

    /// Submits until the queue depth is in flight, then rings the doorbell once.
    fn fill(&mut self, observer: &mut dyn StreamObserver, console: &mut dyn Console) {
        let mut submitted = false;
        while self.in_flight < self.spec.queue_depth {
            let Some((request, pass)) = self.held_back.take().or_else(|| self.next_request(observer)) else {
                break;
            };
            match self.device.submit(request) {
                Ok(()) => {
                    let tag = &mut self.tags[request.tag as usize];
                    tag.busy = true;
                    tag.pass = pass;
                    self.in_flight += 1;
                    submitted = true;
                }
                Err((request, SubmitError::QueueFull)) if self.in_flight > 0 => {
                    self.held_back = Some((request, pass));
                    break;
                }
                Err((request, error)) => {
                    self.free_tags.push(request.tag);
                    let message = format!(
                        "{name}: request for {} blocks at LBA {} refused ({}); the stream ends here for {name}",
                        request.block_count,
                        request.lba,
                        error.name(),
                        name = self.device.name(),
                    );
                    self.end_early(
                        RunEnd::SubmitRefused { error, lba: request.lba },
                        message,
                        observer,
                        console,
                    );
                    break;
                }
            }
        }
        if submitted {
            self.device.kick();
        }
    }

    /// The next request in offset order (wrapping when the stream does), or `None` at the end of
    /// the range or of the current batch, or with no free tag.
    fn next_request(&mut self, observer: &mut dyn StreamObserver) -> Option<(Request, u32)> {
        if self.next_offset_bytes >= self.spec.end_bytes {
            // With batches the end is the batch's business (crate::stream::Stream::next_batch).
            if self.spec.batch_bytes.is_some() {
                return None;
            }
            if !self.spec.wrap {
                self.submitting = false;
                return None;
            }
            self.next_offset_bytes = self.spec.start_bytes;
            self.pass += 1;
        }
        if self.next_offset_bytes >= self.batch_end_bytes {
            return None;
        }
        let tag = self.free_tags.pop()?;
        let offset_bytes = self.next_offset_bytes;
        let bytes = self.spec.request_bytes.min(self.batch_end_bytes - offset_bytes);
        self.next_offset_bytes += bytes;
        self.tags[tag as usize] = InFlight { offset_bytes, bytes, pass: self.pass, busy: false };
        let request = Request {
            tag,
            operation: self.spec.operation,
            lba: offset_bytes / self.spec.logical_block_bytes,
            block_count: (bytes / self.spec.logical_block_bytes) as u32,
            buffer: self.buffer(tag, bytes),
        };
        if self.spec.operation == Operation::Write {
            observer.fill(&request, self.pass);
        }
        Some((request, self.pass))
    }

    /// Buffer `tag` (modulo the buffers there are), `bytes` long.
    fn buffer(&self, tag: u32, bytes: u64) -> DmaBuffer {
        let offset = (u64::from(tag) % self.buffer_count) * self.spec.request_bytes;
        DmaBuffer {
            cpu_address: self.buffer_area.cpu_address + offset as usize,
            physical_address: self.buffer_area.physical_address + offset,
            length_bytes: bytes as usize,
        }
    }

    /// True once requests have been in flight for [`DRAIN_TIMEOUT_NS`] without any completing
    /// (drivers time their commands out well before): the device is not used again.
    fn waited_too_long(
        &mut self,
        now: u64,
        observer: &mut dyn StreamObserver,
        console: &mut dyn Console,
    ) -> bool {
        let waited_ticks = now.saturating_sub(self.last_progress_ticks);
        if waited_ticks < self.drain_timeout_ticks {
            return false;
        }
        let message = format!(
            "{name}: {} requests in flight and none completed for {} s; {name} is not used again",
            self.in_flight,
            DRAIN_TIMEOUT_NS / crate::units::NS_PER_S,
            name = self.device.name(),
        );
        let ended = RunEnd::DrainTimeout {
            in_flight: self.in_flight as u32,
            waited_ns: self.clock.ticks_to_ns(waited_ticks),
        };
        self.end_early(ended, message, observer, console);
        true
    }

    fn end_early(
        &mut self,
        end: RunEnd,
        message: String,
        observer: &mut dyn StreamObserver,
        console: &mut dyn Console,
    ) {
        self.submitting = false;
        observer.interrupt(console);
        let _ = writeln!(console, "{message}");
        self.end.ended_early = Some(end);
        self.end.message = Some(message);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::plan::tests::nvme_geometry;
    use crate::run_loop::RunEnvironment;
    use crate::sim::{SimBehaviour, SimDevice};
    use blockdev::testing::SteppingClock;

    /// Records every completion; stops after `stop_after_batches` batches.
    #[derive(Default)]
    pub(crate) struct Recorder {
        pub pieces: Vec<(u64, u64, u32)>,
        pub batches: u32,
        pub stop_after_batches: Option<u32>,
    }

    impl StreamObserver for Recorder {
        fn completed(&mut self, piece: &Piece) {
            self.pieces.push((piece.offset_bytes, piece.bytes, piece.pass));
        }
        fn batch_done(&mut self, _now_ticks: u64) -> Flow {
            self.batches += 1;
            match self.stop_after_batches {
                Some(stop) if self.batches >= stop => Flow::Stop,
                _ => Flow::Continue,
            }
        }
        fn tick(&mut self, _now_ticks: u64, _console: &mut dyn Console) -> Flow {
            Flow::Continue
        }
    }

    pub(crate) fn area(length_bytes: usize) -> DmaBuffer {
        DmaBuffer { cpu_address: 0x4000_0000, physical_address: 0x4000_0000, length_bytes }
    }

    /// A read-only environment with a buffer area of `buffer_bytes` (no memory, no writes).
    pub(crate) fn environment<'e>(
        clock: &'e SteppingClock,
        counters: &'e crate::cpu_cost::NoCpuCounters,
        buffer_bytes: usize,
    ) -> RunEnvironment<'e> {
        RunEnvironment {
            clock,
            cpu_counters: counters,
            buffer_area: area(buffer_bytes),
            memory: None,
            writes: None,
            conditions: None,
        }
    }

    fn spec(start_bytes: u64, end_bytes: u64, request_bytes: u64, queue_depth: usize) -> StreamSpec {
        StreamSpec {
            operation: Operation::Read,
            start_bytes,
            end_bytes,
            request_bytes,
            logical_block_bytes: 512,
            queue_depth,
            batch_bytes: None,
            wrap: false,
        }
    }

    #[test]
    fn a_stream_reads_its_range_once_in_order_at_its_queue_depth() {
        let clock = SteppingClock::new(1_000_000_000, 10);
        let mut device = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 20_000), &clock);
        let mut recorder = Recorder::default();
        let mut console = String::new();
        // 1 MiB from 64 KiB in 128 KiB requests, the last one short (1 MiB is not a multiple).
        let spec = spec(64 << 10, (64 << 10) + (1 << 20) + 4096, 128 << 10, 4);
        let end = run_stream(&mut device, &clock, area(1 << 20), spec, &mut recorder, &mut console);
        assert_eq!(end.ended_early, None);
        let offsets: Vec<u64> = device.accepted.iter().map(|r| r.lba * 512).collect();
        assert_eq!(offsets.len(), 9);
        assert_eq!(offsets[0], 64 << 10);
        assert!(offsets.windows(2).all(|pair| pair[1] == pair[0] + (128 << 10)));
        assert_eq!(device.accepted[8].block_count, 8);
        assert_eq!(device.max_in_flight_seen, 4);
        let total: u64 = recorder.pieces.iter().map(|piece| piece.1).sum();
        assert_eq!(total, (1 << 20) + 4096);
        assert!(console.is_empty());
    }

    #[test]
    fn batches_wait_for_each_other_and_wrapping_counts_passes() {
        let clock = SteppingClock::new(1_000_000_000, 10);
        let mut device = SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 20_000), &clock);
        let mut recorder = Recorder { stop_after_batches: Some(5), ..Recorder::default() };
        let mut batched = spec(0, 1 << 20, 128 << 10, 8);
        batched.batch_bytes = Some(512 << 10);
        batched.wrap = true;
        let end = run_stream(&mut device, &clock, area(1 << 20), batched, &mut recorder, &mut String::new());
        // Five batches of four requests: two passes of the 1 MiB range and half a third.
        assert_eq!(recorder.pieces.len(), 20);
        assert_eq!(recorder.batches, 5);
        assert_eq!(device.max_in_flight_seen, 4, "a batch never overlaps the next");
        assert_eq!(recorder.pieces.last().map(|piece| piece.2), Some(3));
        assert_eq!((end.pass, end.next_offset_bytes), (3, 512 << 10));
    }

    #[test]
    fn a_refused_request_ends_the_stream_with_a_message() {
        let clock = SteppingClock::new(1_000_000_000, 10);
        let mut behaviour = SimBehaviour::new(nvme_geometry(), 20_000);
        behaviour.refuse_after = Some((3, SubmitError::OutOfRange));
        let mut device = SimDevice::new("nvme0", behaviour, &clock);
        let mut console = String::new();
        let end = run_stream(
            &mut device,
            &clock,
            area(1 << 20),
            spec(0, 1 << 20, 4096, 2),
            &mut Recorder::default(),
            &mut console,
        );
        assert!(matches!(
            end.ended_early,
            Some(RunEnd::SubmitRefused { error: SubmitError::OutOfRange, .. })
        ));
        assert!(console.contains("nvme0: request for 8 blocks at LBA 24 refused"), "{console}");
    }

    #[test]
    fn a_device_that_never_completes_is_given_up_after_the_drain_timeout() {
        let clock = SteppingClock::new(1_000_000_000, 1_000);
        let mut behaviour = SimBehaviour::new(nvme_geometry(), 20_000);
        behaviour.stall_after = Some(2);
        let mut device = SimDevice::new("nvme0", behaviour, &clock);
        let mut console = String::new();
        let end = run_stream(
            &mut device,
            &clock,
            area(1 << 20),
            spec(0, 1 << 20, 4096, 4),
            &mut Recorder::default(),
            &mut console,
        );
        assert!(matches!(end.ended_early, Some(RunEnd::DrainTimeout { .. })), "{end:?}");
        assert!(console.contains("4 requests in flight and none completed for 10 s"), "{console}");
    }
}
