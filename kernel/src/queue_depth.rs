//! A queue-depth runner over the block interface, for the NVMe bring-up measurement and the
//! `nvme.selftest=qdN` self-test (`runtime::nvme`), whatever the device: keeps N reads of
//! chosen sizes at random places in flight, optionally checks every byte against the test
//! pattern (`blockdev::pattern`), and times each read from submit to the poll that returned it
//! (fio's clat plus the submit, docs/nvme-and-fio.md §3.1).
#![forbid(unsafe_code)]

use alloc::vec::Vec;
use bench::offsets::RandomGenerator;
use bench::series::milli_mib_per_s;
use bench::stats::LatencyAccumulator;
use blockdev::{BlockDevice, Clock, Completion, Geometry, IoError, Operation, Request, SubmitError};
use core::fmt;
use hal::dma::DmaRegion;

/// A run gives up when no read completes for this long.
pub const IDLE_TIMEOUT_MS: u64 = 10_000;
/// Buffers are this far apart in the scratch memory (and aligned to it).
pub const SLOT_ALIGNMENT_BYTES: usize = 4096;

/// Where a request starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    /// LBA 0.
    Start,
    /// The last whole request before the end of the device.
    End,
    /// Anywhere, aligned to `lba_alignment_bytes`.
    Random,
}

/// What to read.
#[derive(Clone, Copy, Debug)]
pub struct Workload<'a> {
    /// Placements, used in turn (empty = all random).
    pub places: &'a [Place],
    /// Requests kept in flight (capped by the device's `max_in_flight`).
    pub depth: u32,
    pub requests: u32,
    /// Request sizes in bytes, used in turn (rounded up to whole blocks).
    pub sizes_bytes: &'a [u32],
    /// Offsets of the data in each buffer, used in turn (multiples of 4 bytes; non-zero values
    /// make PRP1 start inside a page).
    pub buffer_offsets_bytes: &'a [usize],
    /// Start LBAs are multiples of this many bytes.
    pub lba_alignment_bytes: u64,
    pub verify: bool,
    pub seed: u64,
}

impl Workload<'_> {
    fn slot_bytes(&self) -> usize {
        let largest = self.sizes_bytes.iter().copied().max().unwrap_or(0) as usize;
        let offset = self.buffer_offsets_bytes.iter().copied().max().unwrap_or(0);
        (largest + offset).div_ceil(SLOT_ALIGNMENT_BYTES) * SLOT_ALIGNMENT_BYTES
    }

    /// Scratch DMA memory the run needs.
    pub fn scratch_bytes(&self) -> usize {
        self.slot_bytes() * self.depth as usize
    }
}

/// Runs of at most this many reads also report their median latency.
pub const MEDIAN_MAX_SAMPLES: u32 = 4096;

/// Latency of the reads of a run: the benchmark's exact statistics ([`LatencyAccumulator`]) and,
/// for runs of up to [`MEDIAN_MAX_SAMPLES`] reads, the median.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadLatency {
    pub statistics: bench::stats::LatencySummary,
    /// The middle value (the upper one of an even count).
    pub median_ns: Option<u64>,
}

/// How a run went.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunReport {
    pub depth: u32,
    pub requests: u32,
    pub bytes: u64,
    pub failed: u32,
    pub first_failure: Option<(u64, IoError)>,
    pub mismatches: u32,
    /// Device byte offset of the first byte that differed from the pattern.
    pub first_mismatch: Option<u64>,
    pub max_in_flight: u32,
    pub elapsed_ns: u64,
    pub latency: ReadLatency,
}

impl RunReport {
    pub fn iops(&self) -> u64 {
        (u128::from(self.requests) * 1_000_000_000).checked_div(u128::from(self.elapsed_ns)).unwrap_or(0)
            as u64
    }

    /// Thousandths of a MiB/s (print with `bench::units::MibPerS`).
    pub fn milli_mib_per_s(&self) -> u64 {
        milli_mib_per_s(self.bytes, self.elapsed_ns)
    }

    pub fn passed(&self) -> bool {
        self.failed == 0 && self.mismatches == 0
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunError {
    ScratchTooSmall {
        needed_bytes: usize,
        available_bytes: usize,
    },
    /// The device is smaller than one request.
    DeviceTooSmall {
        block_count: u64,
        request_blocks: u32,
    },
    Refused {
        lba: u64,
        block_count: u32,
        error: SubmitError,
    },
    /// Reads stopped completing.
    Timeout {
        in_flight: u32,
        completed: u32,
        waited_ms: u64,
    },
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            RunError::ScratchTooSmall { needed_bytes, available_bytes } => {
                write!(f, "needs {needed_bytes} bytes of buffers, {available_bytes} available")
            }
            RunError::DeviceTooSmall { block_count, request_blocks } => {
                write!(f, "the device has {block_count} blocks, a request needs {request_blocks}")
            }
            RunError::Refused { lba, block_count, error } => {
                write!(f, "a read of {block_count} blocks at LBA {lba} was refused: {}", error.name())
            }
            RunError::Timeout { in_flight, completed, waited_ms } => write!(
                f,
                "no read completed for {waited_ms} ms ({completed} done, {in_flight} still in flight)"
            ),
        }
    }
}

#[derive(Clone, Copy, Default)]
struct Slot<'r> {
    lba: u64,
    block_count: u32,
    submitted_ticks: u64,
    data: Option<DmaRegion<'r>>,
}

/// Where the next read goes and how big it is.
struct Planned {
    lba: u64,
    block_count: u32,
    buffer_offset_bytes: usize,
}

/// Chooses each read of a workload in turn.
struct Planner<'w> {
    workload: &'w Workload<'w>,
    geometry: Geometry,
    alignment_blocks: u64,
    random: RandomGenerator,
    next_request: usize,
}

impl<'w> Planner<'w> {
    fn new(workload: &'w Workload<'w>, geometry: Geometry) -> Self {
        let block_bytes = u64::from(geometry.logical_block_bytes);
        Planner {
            workload,
            geometry,
            alignment_blocks: (workload.lba_alignment_bytes / block_bytes).max(1),
            random: RandomGenerator::new(workload.seed),
            next_request: 0,
        }
    }

    fn next(&mut self) -> Result<Planned, RunError> {
        let (workload, geometry) = (self.workload, self.geometry);
        let index = self.next_request;
        self.next_request += 1;
        let size = u64::from(workload.sizes_bytes[index % workload.sizes_bytes.len()]);
        let block_count = size
            .div_ceil(u64::from(geometry.logical_block_bytes))
            .clamp(1, u64::from(geometry.max_request_blocks)) as u32;
        let buffer_offset_bytes = match workload.buffer_offsets_bytes {
            [] => 0,
            offsets => offsets[index % offsets.len()],
        };
        let last_start =
            geometry.block_count.checked_sub(u64::from(block_count)).ok_or(RunError::DeviceTooSmall {
                block_count: geometry.block_count,
                request_blocks: block_count,
            })?;
        let place = match workload.places {
            [] => Place::Random,
            places => places[index % places.len()],
        };
        let lba = match place {
            Place::Start => 0,
            Place::End => last_start,
            Place::Random => {
                self.random.below(last_start / self.alignment_blocks + 1) * self.alignment_blocks
            }
        };
        Ok(Planned { lba, block_count, buffer_offset_bytes })
    }
}

/// At most this many reads in flight (the runner's slot table).
const MAX_DEPTH: usize = 256;

/// One run in progress.
struct Runner<'r, C: Clock + ?Sized> {
    device: &'r mut dyn BlockDevice,
    clock: &'r C,
    scratch: DmaRegion<'r>,
    slot_bytes: usize,
    block_bytes: u64,
    verify: bool,
    requests: u32,
    planner: Planner<'r>,
    slots: [Slot<'r>; MAX_DEPTH],
    report: RunReport,
    latency: LatencyAccumulator,
    samples_ns: Option<Vec<u64>>,
    issued: u32,
    completed: u32,
    in_flight: u32,
    last_progress_ticks: u64,
}

/// Runs `workload` on `device`, with buffers carved from `scratch`: fills the queue, then
/// replaces each completed read with the next until all are done.
pub fn run<'r, C: Clock + ?Sized>(
    device: &'r mut dyn BlockDevice,
    clock: &'r C,
    scratch: DmaRegion<'r>,
    workload: &'r Workload<'r>,
) -> Result<RunReport, RunError> {
    let mut runner = Runner::new(device, clock, scratch, workload)?;
    let start_ticks = clock.now_ticks();
    runner.fill()?;
    while runner.completed < runner.issued {
        runner.reap()?;
    }
    Ok(runner.finish(start_ticks))
}

impl<'r, C: Clock + ?Sized> Runner<'r, C> {
    fn new(
        device: &'r mut dyn BlockDevice,
        clock: &'r C,
        scratch: DmaRegion<'r>,
        workload: &'r Workload<'r>,
    ) -> Result<Self, RunError> {
        let geometry = device.geometry();
        let depth = workload.depth.min(geometry.max_in_flight).clamp(1, MAX_DEPTH as u32);
        let slot_bytes = workload.slot_bytes();
        let needed_bytes = slot_bytes * depth as usize;
        if needed_bytes > scratch.length_bytes() {
            return Err(RunError::ScratchTooSmall { needed_bytes, available_bytes: scratch.length_bytes() });
        }
        let samples_ns =
            (workload.requests <= MEDIAN_MAX_SAMPLES).then(|| Vec::with_capacity(workload.requests as usize));
        Ok(Runner {
            device,
            clock,
            scratch,
            slot_bytes,
            block_bytes: u64::from(geometry.logical_block_bytes),
            verify: workload.verify,
            requests: workload.requests,
            planner: Planner::new(workload, geometry),
            slots: [Slot::default(); MAX_DEPTH],
            report: RunReport { depth, ..RunReport::default() },
            latency: LatencyAccumulator::new(),
            samples_ns,
            issued: 0,
            completed: 0,
            in_flight: 0,
            last_progress_ticks: clock.now_ticks(),
        })
    }

    /// Submits the next planned read into `slot_index`'s buffer.
    fn submit(&mut self, slot_index: usize) -> Result<(), RunError> {
        let Planned { lba, block_count, buffer_offset_bytes } = self.planner.next()?;
        let start = slot_index * self.slot_bytes + buffer_offset_bytes;
        let bytes = block_count as usize * self.block_bytes as usize;
        let data = self.scratch.subregion(start, bytes).ok_or(RunError::ScratchTooSmall {
            needed_bytes: start + bytes,
            available_bytes: self.scratch.length_bytes(),
        })?;
        let request = Request {
            tag: slot_index as u32,
            operation: Operation::Read,
            lba,
            block_count,
            buffer: data.buffer(),
        };
        self.slots[slot_index] =
            Slot { lba, block_count, submitted_ticks: self.clock.now_ticks(), data: Some(data) };
        self.device.submit(request).map_err(|(_, error)| RunError::Refused { lba, block_count, error })?;
        self.issued += 1;
        self.in_flight += 1;
        self.report.max_in_flight = self.report.max_in_flight.max(self.in_flight);
        Ok(())
    }

    /// Puts the first `depth` reads in flight with one kick.
    fn fill(&mut self) -> Result<(), RunError> {
        for slot_index in 0..self.report.depth as usize {
            if self.issued == self.requests {
                break;
            }
            self.submit(slot_index)?;
        }
        self.device.kick();
        Ok(())
    }

    /// One poll: records what completed and refills the freed slots (one kick), or gives up
    /// after [`IDLE_TIMEOUT_MS`] without a completion.
    fn reap(&mut self) -> Result<(), RunError> {
        let mut completions = [Completion::default(); 64];
        let count = self.device.poll(&mut completions);
        let now = self.clock.now_ticks();
        if count == 0 {
            let idle_ns = self.clock.ticks_to_ns(now.saturating_sub(self.last_progress_ticks));
            if idle_ns > IDLE_TIMEOUT_MS * 1_000_000 {
                return Err(RunError::Timeout {
                    in_flight: self.in_flight,
                    completed: self.completed,
                    waited_ms: idle_ns / 1_000_000,
                });
            }
            core::hint::spin_loop();
            return Ok(());
        }
        self.last_progress_ticks = now;
        let mut resubmitted = false;
        for completion in &completions[..count] {
            self.record(completion, now);
            if self.issued < self.requests {
                self.submit(completion.tag as usize)?;
                resubmitted = true;
            }
        }
        if resubmitted {
            self.device.kick();
        }
        Ok(())
    }

    /// Latency, size and outcome of one completed read, its data checked if asked.
    fn record(&mut self, completion: &Completion, now_ticks: u64) {
        let slot = self.slots[completion.tag as usize];
        let latency_ns = self.clock.ticks_to_ns(now_ticks.saturating_sub(slot.submitted_ticks));
        self.latency.record(latency_ns);
        if let Some(samples) = self.samples_ns.as_mut() {
            samples.push(latency_ns);
        }
        self.completed += 1;
        self.in_flight -= 1;
        self.report.requests += 1;
        self.report.bytes += u64::from(slot.block_count) * self.block_bytes;
        match completion.result {
            Err(error) => {
                self.report.failed += 1;
                self.report.first_failure.get_or_insert((slot.lba, error));
            }
            Ok(()) if self.verify => self.check_data(&slot),
            Ok(()) => {}
        }
    }

    fn check_data(&mut self, slot: &Slot) {
        // The read into this slot completed (the driver made the data visible to the CPU) and no
        // other request uses the slot until it is submitted again.
        let Some(data) = slot.data else {
            return;
        };
        let mut sector = [0u8; blockdev::pattern::SECTOR_BYTES];
        for offset_bytes in (0..data.length_bytes()).step_by(sector.len()) {
            let chunk =
                &mut sector[..(data.length_bytes() - offset_bytes).min(blockdev::pattern::SECTOR_BYTES)];
            data.read_bytes(offset_bytes, chunk);
            let device_offset = slot.lba * self.block_bytes + offset_bytes as u64;
            if let Some(position) = blockdev::pattern::first_mismatch(device_offset, chunk) {
                self.report.mismatches += 1;
                self.report.first_mismatch.get_or_insert(device_offset + position as u64);
                return;
            }
        }
    }

    fn finish(mut self, start_ticks: u64) -> RunReport {
        self.report.elapsed_ns = self.clock.ticks_to_ns(self.clock.now_ticks().saturating_sub(start_ticks));
        self.report.latency.statistics = self.latency.summary();
        if let Some(mut samples) = self.samples_ns.filter(|samples| !samples.is_empty()) {
            samples.sort_unstable();
            self.report.latency.median_ns = Some(samples[samples.len() / 2]);
        }
        self.report
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blockdev::{Geometry, IoErrorKind};
    use hal::platform::Platform;
    use hal::testing::ArenaPlatform;
    use std::collections::VecDeque;
    use std::vec::Vec;

    /// A disk of 512-byte blocks that hold the test pattern, taking `max_in_flight` requests and
    /// answering each by DMA a few polls after `kick()` (the data made visible to the CPU, as a
    /// driver does): reads that cover `failing_lba` fail, the
    /// block at `corrupt_lba` comes back with one byte wrong, and a `silent` disk never answers.
    struct PatternDisk<'p> {
        platform: &'p ArenaPlatform,
        geometry: Geometry,
        queued: VecDeque<Request>,
        started: VecDeque<(Request, u32)>,
        failing_lba: Option<u64>,
        corrupt_lba: Option<u64>,
        silent: bool,
        reads: Vec<(u64, u32)>,
    }

    /// Polls a started read waits before it completes.
    const ANSWER_POLLS: u32 = 3;

    impl<'p> PatternDisk<'p> {
        fn new(platform: &'p ArenaPlatform, block_count: u64, max_in_flight: u32) -> Self {
            PatternDisk {
                platform,
                geometry: Geometry {
                    logical_block_bytes: 512,
                    block_count,
                    max_request_blocks: 8192,
                    max_in_flight,
                },
                queued: VecDeque::new(),
                started: VecDeque::new(),
                failing_lba: None,
                corrupt_lba: None,
                silent: false,
                reads: Vec::new(),
            }
        }

        fn answer(&self, request: &Request) -> Result<(), IoError> {
            let end = request.lba + u64::from(request.block_count);
            if self.failing_lba.is_some_and(|lba| (request.lba..end).contains(&lba)) {
                return Err(IoError { kind: IoErrorKind::Media, code: 0x281 });
            }
            let mut data = std::vec![0u8; request.block_count as usize * 512];
            for (sector, lba) in data.chunks_exact_mut(512).zip(request.lba..end) {
                let sector: &mut [u8; 512] = sector.try_into().expect("512-byte chunks");
                blockdev::pattern::fill_sector(lba, sector);
                if self.corrupt_lba == Some(lba) {
                    sector[0] ^= 0xff;
                }
            }
            let buffer = request.buffer.slice(0, data.len()).expect("checked at submission");
            assert!(self.platform.device_write(buffer.physical_address, &data), "arena memory");
            // As a driver does when the device's completion is seen.
            self.platform.invalidate_for_cpu(&buffer);
            Ok(())
        }
    }

    impl BlockDevice for PatternDisk<'_> {
        fn name(&self) -> &str {
            "disk0"
        }
        fn geometry(&self) -> Geometry {
            self.geometry
        }
        fn submit(&mut self, request: Request) -> Result<(), (Request, SubmitError)> {
            if self.queued.len() + self.started.len() >= self.geometry.max_in_flight as usize {
                return Err((request, SubmitError::QueueFull));
            }
            blockdev::check_request(&self.geometry, &request).map_err(|error| (request, error))?;
            self.reads.push((request.lba, request.block_count));
            self.queued.push_back(request);
            Ok(())
        }
        fn kick(&mut self) {
            self.started.extend(self.queued.drain(..).map(|request| (request, ANSWER_POLLS)));
        }
        fn poll(&mut self, completions: &mut [Completion]) -> usize {
            if self.silent {
                return 0;
            }
            let mut finished = 0;
            let mut still = VecDeque::new();
            while let Some((request, polls)) = self.started.pop_front() {
                if polls > 0 || finished == completions.len() {
                    still.push_back((request, polls.saturating_sub(1)));
                    continue;
                }
                completions[finished] = Completion { tag: request.tag, result: self.answer(&request) };
                finished += 1;
            }
            self.started = still;
            finished
        }
    }

    fn workload<'a>(depth: u32, requests: u32, sizes_bytes: &'a [u32]) -> Workload<'a> {
        Workload {
            places: &[],
            depth,
            requests,
            sizes_bytes,
            buffer_offsets_bytes: &[],
            lba_alignment_bytes: 512,
            verify: true,
            seed: 7,
        }
    }

    const MIXED: [u32; 5] = [4096, 512, 65536, 1 << 20, 12288];

    #[test]
    fn qd32_mixed_reads_at_odd_buffer_offsets_verify() {
        let platform = ArenaPlatform::new(96 << 20);
        platform.set_step_us(1);
        let mut disk = PatternDisk::new(&platform, 1 << 20, 64);
        let workload = Workload { buffer_offsets_bytes: &[0, 512, 4092, 2048], ..workload(32, 300, &MIXED) };
        let scratch = DmaRegion::allocate(&platform, workload.scratch_bytes(), 4096).unwrap();
        let report = run(&mut disk, &platform, scratch, &workload).unwrap();
        assert_eq!(report.requests, 300);
        assert!(report.passed(), "{report:?}");
        assert_eq!((report.max_in_flight, report.depth), (32, 32));
        let latency = report.latency.statistics;
        assert_eq!(latency.samples, 300);
        assert!(u128::from(latency.min_ns) * 1000 <= latency.mean_milli_ns);
        let median = report.latency.median_ns.expect("300 reads have a median");
        assert!(latency.min_ns <= median && median <= latency.max_ns);
        assert!(report.iops() > 0);
        assert!(platform.log().violations().is_empty(), "{:?}", platform.log().violations());
    }

    #[test]
    fn failures_and_wrong_data_are_counted() {
        let platform = ArenaPlatform::new(32 << 20);
        platform.set_step_us(1);
        let mut disk = PatternDisk::new(&platform, 64, 4);
        disk.failing_lba = Some(3);
        disk.corrupt_lba = Some(40);
        let workload = Workload { seed: 3, ..workload(4, 1000, &[512]) };
        let scratch = DmaRegion::allocate(&platform, workload.scratch_bytes(), 4096).unwrap();
        let report = run(&mut disk, &platform, scratch, &workload).unwrap();
        assert!(report.failed > 0, "{report:?}");
        assert_eq!(report.first_failure.unwrap().0, 3);
        assert!(report.mismatches > 0);
        assert_eq!(report.first_mismatch, Some(40 * 512));
        assert!(!report.passed());
    }

    #[test]
    fn a_device_that_stops_answering_times_out() {
        let platform = ArenaPlatform::new(32 << 20);
        let mut disk = PatternDisk::new(&platform, 1 << 20, 4);
        disk.silent = true;
        let workload = Workload { verify: false, ..workload(2, 4, &[4096]) };
        let scratch = DmaRegion::allocate(&platform, workload.scratch_bytes(), 4096).unwrap();
        let error = run(&mut disk, &platform, scratch, &workload).unwrap_err();
        assert!(
            matches!(error, RunError::Timeout { in_flight: 2, completed: 0, waited_ms } if waited_ms >= IDLE_TIMEOUT_MS),
            "{error:?}"
        );
        let small = DmaRegion::allocate(&platform, 4096, 4096).unwrap();
        assert!(matches!(run(&mut disk, &platform, small, &workload), Err(RunError::ScratchTooSmall { .. })));
    }

    #[test]
    fn fixed_places_read_the_start_and_the_end() {
        let platform = ArenaPlatform::new(64 << 20);
        platform.set_step_us(1);
        let mut disk = PatternDisk::new(&platform, 1 << 20, 4);
        let workload = Workload {
            places: &[Place::Start, Place::End, Place::Random],
            buffer_offsets_bytes: &[0, 4092],
            lba_alignment_bytes: 4096,
            seed: 11,
            ..workload(1, 6, &[4 << 20])
        };
        let scratch = DmaRegion::allocate(&platform, workload.scratch_bytes(), 4096).unwrap();
        let report = run(&mut disk, &platform, scratch, &workload).unwrap();
        assert!(report.passed(), "{report:?}");
        assert_eq!(report.bytes, 6 * (4 << 20));
        let end = disk.geometry().block_count;
        assert!(disk.reads.iter().any(|(lba, _)| *lba == 0), "a read at the start");
        assert!(
            disk.reads.iter().any(|(lba, blocks)| lba + u64::from(*blocks) == end),
            "a read ending at the last block"
        );
    }

    #[test]
    fn rates_are_computed_from_the_elapsed_time() {
        let report =
            RunReport { requests: 1000, bytes: 1000 * 4096, elapsed_ns: 50_000_000, ..RunReport::default() };
        assert_eq!(report.iops(), 20_000);
        assert_eq!(report.milli_mib_per_s(), 78_125);
        assert_eq!(RunReport::default().iops(), 0);
    }
}
