//! `jobs=sustained:BS[:QD]`: the marked scratch region written end to end, again and again,
//! for `runtime=`, with the MiB/s of every second, the cache cliff and the steady state after it
//! (docs/surface-and-sustained.md §4).
//!
//! A device that writes into a fast cache first (an SD card's or an SSD's SLC cache, a host's
//! write-back cache under QEMU) slows down once it is full. The cliff is the first second whose
//! MiB/s is half the mean of the first 10 seconds or less ([`CLIFF_PERCENT`]: half, with 1 % for
//! a second's whole requests, so that a device whose speed halves is seen to); the console and
//! the JSON give when it came and how many bytes had been written before it, and the mean MiB/s
//! from it to the end.
//! Seconds are counted from the first request by the completions' times; a second with no
//! completion counts as 0 MiB/s.
//!
//! It runs only where a write job may (`write=` names the device and it has a marked scratch
//! region; docs/writes.md §1), inside the region's writable part. Each pass writes every block
//! with the data write jobs write (`crate::written`: LBA, run id, the pass as the sequence
//! number, CRC-32, pseudo-random payload), so with `write.verify=on` the region is read back
//! afterwards and each block compared with what the last pass put there.

use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use blockdev::{BlockDevice, Clock, IoErrorKind, Operation, Request};

use crate::buffers::BufferMemory;
use crate::console::{say, Console, ProgressLine};
use crate::offsets::derived_seed;
use crate::plan::DevicePlan;
use crate::results::RunEnd;
use crate::run_loop::RunEnvironment;
use crate::series::{milli_mib_per_s, BoundedSeries};
use crate::settings::{Config, JobSpec};
use crate::stream::{run_stream, Flow, Piece, StreamEnd, StreamObserver, StreamSpec};
use crate::stream_plan::{fit_stream, own_buffers, StreamLabel};
use crate::stream_results::{Cliff, SustainedResult};
use crate::stream_run::{run_counting_failures, ProgressPacing};
use crate::units::{ByteSize, MibPerS, Seconds, SizeText, NS_PER_S};
use crate::written::{self, VerifyOutcome};

/// The length of each sample: one second.
pub const SAMPLE_NS: u64 = NS_PER_S;
/// The first seconds whose mean the cliff is measured against.
pub const REFERENCE_SAMPLES: usize = 10;
/// A second at this percentage of the first seconds' mean or below is the cliff: half, and 1 %
/// more because a second holds whole requests (at 488 requests a second one request is 0.2 %).
pub const CLIFF_PERCENT: u64 = 51;
/// The most failed writes remembered (their blocks are not checked); more and the region is
/// not verified at all.
const MAX_FAILED_WRITES: usize = 4096;

/// Finds the cache cliff in a run's seconds as they come.
#[derive(Clone, Debug, Default)]
pub struct CliffFinder {
    /// The first seconds, (start ns, bytes, ns), until the reference is known.
    first: Vec<(u64, u64, u64)>,
    reference: Option<u64>,
    reference_ns: u64,
    bytes_before: u64,
    cliff: Option<Cliff>,
    after_bytes: u64,
    after_ns: u64,
}

impl CliffFinder {
    /// One sample: `bytes` in `ns` from `start_ns`.
    pub fn add(&mut self, start_ns: u64, bytes: u64, ns: u64) {
        if self.reference.is_none() {
            self.first.push((start_ns, bytes, ns));
            if self.first.len() == REFERENCE_SAMPLES {
                self.settle_reference();
            }
            return;
        }
        self.judge(start_ns, bytes, ns);
    }

    /// The mean of the first seconds (a short last one, the drain's, left out unless there is
    /// nothing else), then each of them judged against it.
    fn settle_reference(&mut self) {
        let any_whole = self.first.iter().any(|sample| sample.2 >= SAMPLE_NS / 2);
        let counted = |sample: &&(u64, u64, u64)| !any_whole || sample.2 >= SAMPLE_NS / 2;
        let bytes = self.first.iter().filter(counted).map(|sample| sample.1).sum();
        let ns = self.first.iter().filter(counted).map(|sample| sample.2).sum();
        self.reference = Some(milli_mib_per_s(bytes, ns));
        self.reference_ns = ns;
        for (start_ns, bytes, ns) in core::mem::take(&mut self.first) {
            self.judge(start_ns, bytes, ns);
        }
    }

    fn judge(&mut self, start_ns: u64, bytes: u64, ns: u64) {
        let rate = milli_mib_per_s(bytes, ns);
        // A short last sample (the drain) says too little to be the cliff.
        let whole = ns >= SAMPLE_NS / 2;
        let limit = self.reference.unwrap_or(0) * CLIFF_PERCENT / 100;
        if self.cliff.is_none() && whole && rate <= limit {
            self.cliff = Some(Cliff { at_ns: start_ns, bytes_before: self.bytes_before, milli_mib_s: rate });
        }
        if self.cliff.is_some() {
            self.after_bytes += bytes;
            self.after_ns += ns;
        }
        self.bytes_before += bytes;
    }

    /// After the last sample: (reference, the time it covers, the cliff, the steady state after it).
    pub fn finish(&mut self) -> (u64, u64, Option<Cliff>, Option<u64>) {
        if self.reference.is_none() && !self.first.is_empty() {
            self.settle_reference();
        }
        let steady = self.cliff.map(|_| milli_mib_per_s(self.after_bytes, self.after_ns));
        (self.reference.unwrap_or(0), self.reference_ns, self.cliff, steady)
    }
}

/// Writes the scratch region of one device for `runtime=`; `None` when it cannot run there.
pub(crate) fn run(
    device: &mut dyn BlockDevice,
    environment: &RunEnvironment<'_>,
    config: &Config,
    label: &StreamLabel<'_>,
    console: &mut dyn Console,
) -> Option<(SustainedResult, Option<RunEnd>)> {
    let name = String::from(device.name());
    let job = label.job;
    let mut notes = Vec::new();
    let (plan, memory) = match plan_writes(device, environment, config, job, &mut notes) {
        Ok(planned) => planned,
        Err(reason) => {
            say(console, &mut notes, format!("job {job} skipped on {name}: {reason}"));
            return None;
        }
    };
    for note in &notes {
        let _ = writeln!(console, "{note}");
    }
    let _ = writeln!(
        console,
        "sustained writes on {name}: region {} at {} (the scratch region), writes of {} at queue depth {}, for {}",
        ByteSize(plan.region_size_bytes),
        ByteSize(plan.region_offset_bytes),
        SizeText(plan.block_bytes),
        plan.queue_depth,
        Seconds(config.runtime_ns)
    );
    let geometry = device.geometry();
    let run_id = written::run_id(derived_seed(config.seed, label.job_index as u64), 1, label.device_index);
    let spec = StreamSpec {
        operation: Operation::Write,
        start_bytes: plan.region_offset_bytes,
        end_bytes: plan.region_offset_bytes + plan.region_size_bytes,
        request_bytes: plan.block_bytes,
        logical_block_bytes: u64::from(geometry.logical_block_bytes),
        queue_depth: plan.queue_depth as usize,
        batch_bytes: None,
        wrap: true,
    };
    let progress = ProgressLine::new(&name, job, &plan, (1, 1), config.runtime_ns, config.progress);
    let mut observer =
        WriteObserver::new(environment.clock, memory, (run_id, spec.logical_block_bytes), &name, progress);
    observer.runtime_ticks = environment.clock.ns_to_ticks(config.runtime_ns);
    let end = run_counting_failures(
        device,
        environment,
        spec,
        (&mut observer, WriteObserver::finish),
        console,
        &mut notes,
    );
    let verify = (config.write_verify && end.ended_early.is_none())
        .then(|| verify_region(device, environment, spec, (&observer, &end), console));
    let region_id = environment
        .writes
        .and_then(|access| access.regions.iter().find(|region| region.device_name == name))
        .map(|region| region.region.region_id);
    let result = observer.into_result(
        label,
        (name.clone(), job),
        (&plan, config.runtime_ns),
        (&end, verify, region_id),
        notes,
    );
    print_sustained(console, &result);
    Some((result, end.ended_early))
}

/// The write plan inside the region `config` names (the runner set it to the scratch region's
/// writable part), each request in flight with a buffer of its own and never two on one block.
fn plan_writes<'e>(
    device: &dyn BlockDevice,
    environment: &RunEnvironment<'e>,
    config: &Config,
    job: &JobSpec,
    notes: &mut Vec<String>,
) -> Result<(DevicePlan, &'e dyn BufferMemory), String> {
    let name = device.name();
    let memory = environment
        .writes
        .map(|access| access.memory)
        .ok_or_else(|| String::from("this kernel gives the benchmark no access to its buffers"))?;
    let mut plan = fit_stream(job, &device.geometry(), (config.offset_bytes, config.size_bytes), name, notes)
        .map_err(|error| error.to_string())?;
    own_buffers(&plan, environment.buffer_area.length_bytes).map_err(|error| error.to_string())?;
    let buffers = (environment.buffer_area.length_bytes as u64 / plan.block_bytes) as u32;
    let limit = buffers.min(plan.block_slots.min(u64::from(u32::MAX)) as u32);
    if limit < plan.queue_depth {
        notes.push(format!(
            "{name}: writing at queue depth {limit} instead of {} (requests in flight never share a \
             buffer or a block; the buffer area holds {buffers} of {}, the region {} blocks)",
            plan.queue_depth,
            SizeText(plan.block_bytes),
            plan.block_slots
        ));
        plan.queue_depth = limit;
    }
    let inside = plan.region_offset_bytes >= config.offset_bytes
        && plan.region_offset_bytes + plan.region_size_bytes <= config.offset_bytes + config.size_bytes;
    if !inside {
        return Err(String::from("its plan left the scratch region"));
    }
    Ok((plan, memory))
}

/// What the sustained write keeps while it runs.
struct WriteObserver<'o> {
    clock: &'o dyn Clock,
    memory: &'o dyn BufferMemory,
    run_id: u64,
    logical_block_bytes: u64,
    name: &'o str,
    runtime_ticks: u64,
    start_ticks: u64,
    sample_ticks: u64,
    /// The sample being filled: its index from the start and its bytes.
    sample_index: u64,
    sample_bytes: u64,
    series: BoundedSeries,
    cliff: CliffFinder,
    bytes: u64,
    last_done_ticks: u64,
    last_rate: u64,
    fill_ticks: u64,
    errors: [u64; IoErrorKind::ALL.len()],
    /// (offset, pass) of each write that failed, while there are few enough to remember.
    failed: BTreeSet<(u64, u32)>,
    failed_overflow: bool,
    progress: ProgressLine<'o>,
    pacing: ProgressPacing,
}

impl<'o> WriteObserver<'o> {
    fn new(
        clock: &'o dyn Clock,
        memory: &'o dyn BufferMemory,
        (run_id, logical_block_bytes): (u64, u64),
        name: &'o str,
        progress: ProgressLine<'o>,
    ) -> WriteObserver<'o> {
        WriteObserver {
            clock,
            memory,
            run_id,
            logical_block_bytes,
            name,
            runtime_ticks: 0,
            start_ticks: 0,
            sample_ticks: clock.ns_to_ticks(SAMPLE_NS),
            sample_index: 0,
            sample_bytes: 0,
            series: BoundedSeries::new(),
            cliff: CliffFinder::default(),
            bytes: 0,
            last_done_ticks: 0,
            last_rate: 0,
            fill_ticks: 0,
            errors: [0; IoErrorKind::ALL.len()],
            failed: BTreeSet::new(),
            failed_overflow: false,
            progress,
            pacing: ProgressPacing::new(clock),
        }
    }

    /// Closes the samples before `index` (those with no completion as 0 MiB/s).
    fn close_samples_before(&mut self, index: u64) {
        while self.sample_index < index {
            self.close_sample(SAMPLE_NS);
            self.sample_index += 1;
            self.sample_bytes = 0;
        }
    }

    fn close_sample(&mut self, ns: u64) {
        let start_ns = self.sample_index * SAMPLE_NS;
        self.series.push(start_ns, start_ns + ns, self.sample_bytes, ns);
        self.cliff.add(start_ns, self.sample_bytes, ns);
        self.last_rate = milli_mib_per_s(self.sample_bytes, ns);
    }

    fn finish(&mut self, end_ticks: u64, console: &mut dyn Console) {
        let end = end_ticks.max(self.last_done_ticks);
        let end_index = (end - self.start_ticks) / self.sample_ticks.max(1);
        self.close_samples_before(end_index);
        let tail_ns = self.clock.ticks_to_ns((end - self.start_ticks) % self.sample_ticks.max(1));
        if tail_ns > 0 && (self.sample_bytes > 0 || self.sample_index == 0) {
            self.close_sample(tail_ns);
        }
        self.last_done_ticks = end;
        if self.progress.is_enabled() {
            self.show_progress(end);
        }
        self.progress.interrupt(console);
    }

    fn show_progress(&mut self, now: u64) {
        let elapsed = self.clock.ticks_to_ns(now.saturating_sub(self.start_ticks));
        let runtime = self.clock.ticks_to_ns(self.runtime_ticks);
        self.progress.show(format_args!(
            "sustained {}: {} of {}, {} written, {} MiB/s in the last second",
            self.name,
            Seconds(elapsed),
            Seconds(runtime),
            ByteSize(self.bytes / crate::units::MIB * crate::units::MIB),
            MibPerS(self.last_rate)
        ));
    }

    fn into_result(
        mut self,
        label: &StreamLabel<'_>,
        (device_name, job): (String, &JobSpec),
        (plan, runtime_ns): (&DevicePlan, u64),
        (end, verify, scratch_region_id): (&StreamEnd, Option<VerifyOutcome>, Option<u64>),
        notes: Vec<String>,
    ) -> SustainedResult {
        let (reference_milli_mib_s, reference_ns, cliff, steady_milli_mib_s) = self.cliff.finish();
        SustainedResult {
            job_index: label.job_index,
            device_index: label.device_index,
            device_name,
            job: job.to_string(),
            start_bytes: plan.region_offset_bytes,
            end_bytes: plan.region_offset_bytes + plan.region_size_bytes,
            request_bytes: plan.block_bytes,
            queue_depth: plan.queue_depth,
            runtime_ns,
            elapsed_ns: self.clock.ticks_to_ns(self.last_done_ticks.saturating_sub(self.start_ticks)),
            bytes: self.bytes,
            passes: end.pass.saturating_sub(1),
            last_pass_end_bytes: end.next_offset_bytes,
            series: core::mem::take(&mut self.series),
            reference_milli_mib_s,
            reference_ns,
            cliff,
            steady_milli_mib_s,
            fill_ns: self.clock.ticks_to_ns(self.fill_ticks),
            errors: self.errors,
            verify,
            scratch_region_id,
            ended_early: end.ended_early.map(|end| end.reason()),
            notes,
        }
    }
}

impl StreamObserver for WriteObserver<'_> {
    fn started(&mut self, now_ticks: u64) {
        self.start_ticks = now_ticks;
        self.last_done_ticks = now_ticks;
        self.pacing.start(now_ticks);
    }

    fn fill(&mut self, request: &Request, pass: u32) {
        let started = self.clock.now_ticks();
        let (run_id, block_bytes) = (self.run_id, self.logical_block_bytes as usize);
        self.memory.with_bytes(&request.buffer, &mut |bytes| {
            written::fill_blocks(bytes, request.lba, block_bytes, run_id, pass)
        });
        self.fill_ticks += self.clock.now_ticks().saturating_sub(started);
    }

    fn completed(&mut self, piece: &Piece) {
        let index = (piece.done_ticks.saturating_sub(self.start_ticks)) / self.sample_ticks.max(1);
        self.close_samples_before(index);
        self.last_done_ticks = self.last_done_ticks.max(piece.done_ticks);
        match piece.result {
            Ok(()) => {
                self.sample_bytes += piece.bytes;
                self.bytes += piece.bytes;
            }
            Err(error) => {
                self.errors[error.kind.index()] += 1;
                if self.failed.len() < MAX_FAILED_WRITES {
                    self.failed.insert((piece.offset_bytes, piece.pass));
                } else {
                    self.failed_overflow = true;
                }
            }
        }
    }

    fn tick(&mut self, now_ticks: u64, console: &mut dyn Console) -> Flow {
        if self.pacing.line_due(now_ticks) {
            self.show_progress(now_ticks);
        }
        self.pacing.pump(now_ticks, &mut self.progress, console);
        if now_ticks.saturating_sub(self.start_ticks) >= self.runtime_ticks {
            return Flow::Stop;
        }
        Flow::Continue
    }

    fn interrupt(&mut self, console: &mut dyn Console) {
        self.progress.interrupt(console);
    }
}

/// Reads the region back and compares each block with what the last pass put there: blocks
/// before where it stopped hold its pass, the rest the pass before (none on a first pass).
fn verify_region(
    device: &mut dyn BlockDevice,
    environment: &RunEnvironment<'_>,
    write: StreamSpec,
    (writes, end): (&WriteObserver<'_>, &StreamEnd),
    console: &mut dyn Console,
) -> VerifyOutcome {
    let mut checker = VerifyObserver {
        memory: writes.memory,
        run_id: writes.run_id,
        logical_block_bytes: writes.logical_block_bytes,
        last_pass: end.pass,
        last_pass_end_bytes: end.next_offset_bytes,
        failed: &writes.failed,
        outcome: VerifyOutcome::default(),
        expected_block: alloc::vec![0; writes.logical_block_bytes as usize],
    };
    if writes.failed_overflow {
        checker.outcome.unknown_blocks = u64::MAX;
        return checker.outcome;
    }
    let spec = StreamSpec { operation: Operation::Read, wrap: false, ..write };
    let read_back =
        run_stream(device, environment.clock, environment.buffer_area, spec, &mut checker, console);
    if read_back.ended_early.is_some() {
        checker.outcome.read_errors += 1;
    }
    checker.outcome
}

/// Checks each block read back.
struct VerifyObserver<'v> {
    memory: &'v dyn BufferMemory,
    run_id: u64,
    logical_block_bytes: u64,
    last_pass: u32,
    last_pass_end_bytes: u64,
    failed: &'v BTreeSet<(u64, u32)>,
    outcome: VerifyOutcome,
    expected_block: Vec<u8>,
}

impl StreamObserver for VerifyObserver<'_> {
    fn completed(&mut self, piece: &Piece) {
        let pass =
            if piece.offset_bytes < self.last_pass_end_bytes { self.last_pass } else { self.last_pass - 1 };
        if pass == 0 {
            return;
        }
        if self.failed.contains(&(piece.offset_bytes, pass)) {
            self.outcome.unknown_blocks += 1;
            return;
        }
        if piece.result.is_err() {
            self.outcome.read_errors += 1;
            return;
        }
        let (run_id, block_bytes, expected) =
            (self.run_id, self.logical_block_bytes as usize, &mut self.expected_block);
        let mut mismatch = None;
        self.memory.with_bytes(&piece.buffer, &mut |bytes| {
            mismatch = written::first_mismatch(bytes, piece.lba, block_bytes, run_id, pass, expected);
        });
        self.outcome.blocks_checked += 1;
        if let Some(lba) = mismatch {
            self.outcome.record_mismatch(lba);
        }
    }

    fn tick(&mut self, _now_ticks: u64, _console: &mut dyn Console) -> Flow {
        Flow::Continue
    }
}

/// The sustained write's lines after it ran.
fn print_sustained(console: &mut dyn Console, result: &SustainedResult) {
    let name = result.device_name.as_str();
    let region_bytes = result.end_bytes - result.start_bytes;
    let passes_tenths = (u128::from(result.bytes) * 10 / u128::from(region_bytes.max(1))) as u64;
    let _ = writeln!(
        console,
        "{name:<8} sustained: {} written in {} ({}.{} times the region), mean {} MiB/s; first {} mean {} MiB/s",
        ByteSize(result.bytes),
        Seconds(result.elapsed_ns),
        passes_tenths / 10,
        passes_tenths % 10,
        MibPerS(result.mean_milli_mib_s()),
        Seconds(result.reference_ns),
        MibPerS(result.reference_milli_mib_s),
    );
    match (result.cliff, result.steady_milli_mib_s) {
        (Some(cliff), Some(steady)) => {
            let _ = writeln!(
                console,
                "{name:<8} cache cliff at {} after {} written ({} MiB/s, half the first seconds' mean or less); \
                 steady state after it {} MiB/s",
                Seconds(cliff.at_ns),
                ByteSize(cliff.bytes_before),
                MibPerS(cliff.milli_mib_s),
                MibPerS(steady)
            );
        }
        _ => {
            let _ = writeln!(
                console,
                "{name:<8} cache cliff: none (no second at half the first seconds' mean or less)"
            );
        }
    }
    let _ = writeln!(
        console,
        "{name:<8} making the data took {} of the {} (the CPU fills each block before it is written)",
        Seconds(result.fill_ns),
        Seconds(result.elapsed_ns)
    );
    if result.errors_total() > 0 {
        let _ = writeln!(console, "{name:<8} sustained: {} writes failed", result.errors_total());
    }
    let Some(verify) = &result.verify else { return };
    let block = SizeText(result.request_bytes);
    if verify.unknown_blocks == u64::MAX {
        let _ = writeln!(console, "{name}: verify: not made (more than {MAX_FAILED_WRITES} writes failed)");
    } else if verify.mismatches == 0 && verify.read_errors == 0 {
        let _ = writeln!(
            console,
            "{name}: verify: {} blocks of {block} read back and checked (what the last passes wrote): all as written",
            verify.blocks_checked
        );
    } else {
        let _ = writeln!(
            console,
            "{name}: verify FAILED: {} of {} blocks of {block} differ from what was written (first at LBA {:?}), \
             {} read-back errors",
            verify.mismatches,
            verify.blocks_checked,
            verify.mismatch_lbas,
            verify.read_errors
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu_cost::NoCpuCounters;
    use crate::run_loop::{DeviceRegion, WriteAccess};
    use crate::settings::JobOperation;
    use crate::sim::{SimBehaviour, SimDevice, SimMedium, TestMemory};
    use crate::units::{KIB, MIB, NS_PER_MS};
    use blockdev::scratch::{Partition, PartitionTable, ScratchRegion};
    use blockdev::testing::SteppingClock;
    use blockdev::Geometry;
    use core::cell::RefCell;

    const GHZ: u64 = 1_000_000_000;
    /// The halving device writes at 250 µs per KiB (3.9 MiB/s) until this many bytes were
    /// written, then at half that speed.
    const CACHE_BYTES: u64 = 48 * MIB;

    /// A device writing `ticks_per_kib` per KiB; with `halving`, twice as slow after
    /// [`CACHE_BYTES`].
    fn device<'c>(clock: &'c SteppingClock, ticks_per_kib: u64, halving: bool) -> SimDevice<'c> {
        let geometry = Geometry {
            logical_block_bytes: 512,
            block_count: 1 << 21,
            max_request_blocks: 2048,
            max_in_flight: 8,
        };
        let mut behaviour = SimBehaviour::new(geometry, 5_000);
        behaviour.transfer_ticks_per_kib = ticks_per_kib;
        if halving {
            behaviour.transfer_factor =
                Some(|_request, written_bytes| if written_bytes < CACHE_BYTES { 1 } else { 2 });
        }
        SimDevice::new("nvme0", behaviour, clock)
    }

    /// A scratch region at 1 MiB whose writable part is `writable_bytes` long, from 2 MiB.
    fn region(writable_bytes: u64) -> ScratchRegion {
        ScratchRegion {
            partition: Partition {
                number: 1,
                table: PartitionTable::Mbr { partition_type: 0xDA },
                first_lba: 2048,
                block_count: (writable_bytes + MIB) / 512,
            },
            start_bytes: MIB,
            length_bytes: writable_bytes + MIB,
            region_id: 0xB0B,
        }
    }

    fn config(region: ScratchRegion, runtime_ns: u64, verify: bool) -> Config {
        let (offset_bytes, size_bytes) = region.writable();
        Config {
            runtime_ns,
            write_verify: verify,
            progress: false,
            offset_bytes,
            size_bytes,
            ..Config::default()
        }
    }

    fn sustained(
        device: &mut SimDevice<'_>,
        clock: &SteppingClock,
        memory: &TestMemory,
        (config, region, job): (&Config, ScratchRegion, JobSpec),
    ) -> (SustainedResult, String) {
        let counters = NoCpuCounters("host test");
        let regions = [DeviceRegion { device_name: "nvme0", region }];
        let environment = RunEnvironment {
            clock,
            cpu_counters: &counters,
            buffer_area: memory.area(),
            memory: Some(memory),
            writes: Some(WriteAccess { memory, regions: &regions }),
            conditions: None,
        };
        let label = StreamLabel { job_index: 0, job: &job, device_index: 0 };
        let mut console = String::new();
        let (result, _) = run(device, &environment, config, &label, &mut console).expect("it runs");
        (result, console)
    }

    #[test]
    fn a_device_whose_writes_halve_after_n_bytes_shows_the_cliff_at_n() {
        let clock = SteppingClock::new(GHZ, 20);
        let mut device = device(&clock, 250_000, true);
        let memory = TestMemory::new(0x4000_0000, 1 << 20);
        let region = region(64 * MIB);
        let job = JobSpec::new(JobOperation::Sustained, 4 * KIB, 8);
        let (result, console) =
            sustained(&mut device, &clock, &memory, (&config(region, 20 * NS_PER_S, false), region, job));
        let cliff = result.cliff.unwrap_or_else(|| panic!("no cliff: {console}"));
        // One second holds about 3.9 MiB at the fast speed: the cliff is within one second's
        // bytes (one step of the series) of N.
        let one_second_bytes = 4 * MIB;
        assert!(
            cliff.bytes_before.abs_diff(CACHE_BYTES) <= one_second_bytes,
            "cliff after {} KiB: {console}",
            cliff.bytes_before / KIB
        );
        assert_eq!(cliff.at_ns % NS_PER_S, 0);
        assert!((12 * NS_PER_S..=13 * NS_PER_S).contains(&cliff.at_ns), "{console}");
        let steady = result.steady_milli_mib_s.unwrap();
        assert!((1_900..2_000).contains(&steady), "steady {steady}: {console}");
        assert!((3_850..3_910).contains(&result.reference_milli_mib_s), "{console}");
        assert_eq!(result.reference_ns, 10 * NS_PER_S);
        // Twenty seconds and the drain's few milliseconds.
        assert_eq!(result.series.points().len(), 21, "{:?}", result.series.points().last());
        assert!(result.series.points()[20].ns < NS_PER_S / 10);
        assert!(
            console.contains("cache cliff at 12.0 s after")
                || console.contains("cache cliff at 13.0 s after"),
            "{console}"
        );
        // Every write stayed inside the writable part of the region.
        let (offset, length) = region.writable();
        assert!(device.accepted.iter().all(|request| {
            let start = request.lba * 512;
            let end = start + u64::from(request.block_count) * 512;
            request.operation == Operation::Write && start >= offset && end <= offset + length
        }));
    }

    #[test]
    fn a_device_without_a_cache_has_no_cliff() {
        let clock = SteppingClock::new(GHZ, 20);
        let mut device = device(&clock, 250_000, false);
        let memory = TestMemory::new(0x4000_0000, 1 << 20);
        let region = region(64 * MIB);
        let job = JobSpec::new(JobOperation::Sustained, 4 * KIB, 8);
        let (result, console) =
            sustained(&mut device, &clock, &memory, (&config(region, 3 * NS_PER_S, false), region, job));
        assert_eq!(result.cliff, None, "{console}");
        assert_eq!(result.reference_ns, 3 * NS_PER_S, "fewer than 10 seconds: all of them");
        assert!(console.contains("cache cliff: none"), "{console}");
    }

    #[test]
    fn the_last_passes_read_back_as_written_and_corruption_is_found() {
        let clock = SteppingClock::new(GHZ, 20);
        let memory = TestMemory::new(0x4000_0000, 8 << 20);
        let region = region(8 * MIB);
        let job = JobSpec::new(JobOperation::Sustained, MIB, 8);
        let settings = config(region, 30 * NS_PER_MS, true);
        for corrupt_lba in [None, Some(10_000)] {
            let medium =
                SimMedium { memory: &memory, disk: RefCell::new(alloc::vec![0; 16 << 20]), corrupt_lba };
            let mut device = device(&clock, 1_000, false).with_medium(&medium);
            let (result, console) = sustained(&mut device, &clock, &memory, (&settings, region, job));
            let verify = result.verify.clone().unwrap();
            assert!(result.passes >= 2, "{console}");
            assert_eq!(verify.blocks_checked, 8, "{console}");
            match corrupt_lba {
                None => {
                    assert_eq!((verify.mismatches, verify.read_errors), (0, 0), "{console}");
                    assert!(
                        console.contains("nvme0: verify: 8 blocks of 1m read back and checked"),
                        "{console}"
                    );
                    assert!(result.is_clean());
                }
                Some(lba) => {
                    assert_eq!(
                        (verify.mismatches, verify.mismatch_lbas.clone()),
                        (1, alloc::vec![lba]),
                        "{console}"
                    );
                    assert!(console.contains("verify FAILED"), "{console}");
                    assert!(!result.is_clean());
                }
            }
        }
    }

    #[test]
    fn seconds_at_half_or_less_of_the_first_ten_make_the_cliff() {
        let mut finder = CliffFinder::default();
        for second in 0..10 {
            finder.add(second * NS_PER_S, 100 * MIB, NS_PER_S);
        }
        finder.add(10 * NS_PER_S, 52 * MIB, NS_PER_S);
        finder.add(11 * NS_PER_S, 50 * MIB, NS_PER_S);
        finder.add(12 * NS_PER_S, 40 * MIB, NS_PER_S);
        let (reference, reference_ns, cliff, steady) = finder.finish();
        assert_eq!((reference, reference_ns), (100_000, 10 * NS_PER_S));
        assert_eq!(
            cliff,
            Some(Cliff { at_ns: 11 * NS_PER_S, bytes_before: 1052 * MIB, milli_mib_s: 50_000 })
        );
        assert_eq!(steady, Some(45_000));
    }
}
