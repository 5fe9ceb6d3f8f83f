//! `check=N`: every N-th successful read of a run is compared with the test pattern
//! (`blockdev::pattern`, each 512-byte sector names itself), after its completion has been
//! time-stamped and recorded, so a cache, DMA-window or data-path mistake on a board shows up as
//! counted mismatches instead of figures that look fine (docs/checks.md).
//!
//! The comparison runs in the loop right after the poll that found the read, before the next
//! submission; its time is measured with the run's clock and kept apart from every I/O's
//! latency and CPU cost. At queue depth 1 nothing else is in flight meanwhile, so no other I/O
//! is touched; deeper, an I/O that completes during a check is seen when the check ends.

use alloc::vec::Vec;

use blockdev::DmaBuffer;

use crate::buffers::BufferMemory;

/// Mismatches kept with their place per run (the console shows these; the count is complete).
pub const MAX_REPORTED_MISMATCHES: usize = 4;

/// A checked read that differs from the pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "read at LBA {lba} ({block_count} blocks) differs from the test pattern at byte {byte_offset} of the read \
     (device byte {device_byte})"
)]
pub struct Mismatch {
    /// The read's first logical block and length.
    pub lba: u64,
    pub block_count: u32,
    /// The first differing byte, counted from the read's first byte.
    pub byte_offset: u64,
    /// The same byte counted from the start of the device.
    pub device_byte: u64,
}

/// What the checks of one run found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckSummary {
    /// One successful read in `every` was checked.
    pub every: u32,
    pub checked: u64,
    pub checked_bytes: u64,
    pub mismatches: u64,
    /// The first [`MAX_REPORTED_MISMATCHES`] mismatches, in the order found.
    pub first: Vec<Mismatch>,
    /// Time spent comparing, over the run.
    pub check_ns: u64,
    /// Why the run could not check its reads, when it could not.
    pub skipped: Option<&'static str>,
}

impl CheckSummary {
    /// The mean time of one check, ns.
    pub fn ns_per_check(&self) -> u64 {
        self.check_ns.checked_div(self.checked).unwrap_or(0)
    }
}

/// Counts successful reads and compares every `every`-th with the pattern.
pub(crate) struct ReadChecker<'m> {
    memory: &'m dyn BufferMemory,
    logical_block_bytes: u64,
    until_next: u32,
    pub(crate) summary: CheckSummary,
}

impl<'m> ReadChecker<'m> {
    pub(crate) fn new(memory: &'m dyn BufferMemory, every: u32, logical_block_bytes: u32) -> Self {
        ReadChecker {
            memory,
            logical_block_bytes: u64::from(logical_block_bytes),
            until_next: every.max(1),
            summary: CheckSummary { every: every.max(1), ..CheckSummary::default() },
        }
    }

    /// Counts one successful read; true when this one is to be checked.
    pub(crate) fn is_due(&mut self) -> bool {
        self.until_next -= 1;
        if self.until_next > 0 {
            return false;
        }
        self.until_next = self.summary.every;
        true
    }

    /// Compares the read of `block_count` blocks at `lba` in `buffer` with the pattern (the
    /// caller adds the time it took to `summary.check_ns`).
    pub(crate) fn check(&mut self, lba: u64, block_count: u32, buffer: &DmaBuffer) {
        let device_offset = lba * self.logical_block_bytes;
        let length = (u64::from(block_count) * self.logical_block_bytes) as usize;
        let mut first_difference = None;
        self.memory.with_bytes(buffer, &mut |bytes| {
            let data = &bytes[..length.min(bytes.len())];
            first_difference = blockdev::pattern::first_mismatch(device_offset, data);
        });
        self.summary.checked += 1;
        self.summary.checked_bytes += length as u64;
        if let Some(offset) = first_difference {
            self.summary.mismatches += 1;
            if self.summary.first.len() < MAX_REPORTED_MISMATCHES {
                let byte_offset = offset as u64;
                let device_byte = device_offset + byte_offset;
                self.summary.first.push(Mismatch { lba, block_count, byte_offset, device_byte });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    // The runner with `check=` (crate::pattern_check) against a simulated device whose medium holds the
    // test pattern: exactly the corrupted reads are found, with their LBA and offset; every N-th
    // read is checked; unchecked I/Os keep their figures; where checks are impossible the run says
    // why; `check=auto` follows the preset and the pattern region.

    use super::*;
    use alloc::string::String;
    use alloc::vec::Vec;

    use blockdev::testing::SteppingClock;
    use blockdev::{BlockDevice, Request};

    use crate::cpu_cost::NoCpuCounters;
    use crate::plan::tests::nvme_geometry;
    use crate::region::Region;
    use crate::results::{BenchmarkResults, ReportContext};
    use crate::run_loop::RunEnvironment;
    use crate::runner::run_benchmark;
    use crate::settings::{CheckSetting, Config, JobOperation, JobSpec, Preset, DEFAULT_CHECK_EVERY};
    use crate::sim::{SimBehaviour, SimDevice, SimMedium, TestMemory};

    const GHZ: u64 = 1_000_000_000;
    const US: u64 = 1_000;
    const MS: u64 = 1_000_000;
    /// The simulated medium's bytes (every region the tests read lies inside).
    const MEDIUM_BYTES: usize = 8 << 20;
    /// Where the simulated buffer area starts in the fake address space.
    const AREA_BASE: usize = 0x4000_0000;

    /// `op` jobs of 4 KiB at `queue_depth` over 64 KiB from 1 MiB, one run, with `check`.
    fn config(operation: JobOperation, queue_depth: u32, check: CheckSetting) -> Config {
        let mut config = Config::for_preset(Preset::Quick);
        config.jobs = alloc::vec![JobSpec::new(operation, 4096, queue_depth)];
        (config.ramp_ns, config.runtime_ns, config.runs) = (MS, 5 * MS, 1);
        (config.offset_bytes, config.size_bytes) = (1 << 20, 64 << 10);
        config.check = check;
        config
    }

    /// Runs `config` on one simulated NVMe drive (40 µs per read) whose medium has bits flipped at
    /// `corrupt`; `memory: false` runs without CPU access to the buffers.
    fn run(
        config: &Config,
        corrupt: &[u64],
        area_bytes: usize,
        memory: bool,
    ) -> (BenchmarkResults, String, Vec<Request>) {
        let clock = SteppingClock::new(GHZ, 100);
        let buffers = TestMemory::new(AREA_BASE, area_bytes);
        let mut disk = alloc::vec![0u8; MEDIUM_BYTES];
        for (sector, bytes) in disk.chunks_mut(512).enumerate() {
            blockdev::pattern::fill_sector(sector as u64, bytes.try_into().unwrap());
        }
        for &byte in corrupt {
            disk[byte as usize] ^= 0x10;
        }
        let medium = SimMedium { memory: &buffers, disk: core::cell::RefCell::new(disk), corrupt_lba: None };
        let mut device =
            SimDevice::new("nvme0", SimBehaviour::new(nvme_geometry(), 40 * US), &clock).with_medium(&medium);
        let context =
            ReportContext { board: "simulated", timer_frequency_hz: GHZ, ..ReportContext::default() };
        let counters = NoCpuCounters("host test");
        let environment = RunEnvironment {
            clock: &clock,
            cpu_counters: &counters,
            buffer_area: buffers.area(),
            memory: memory.then_some(&buffers as &dyn BufferMemory),
            writes: None,
            conditions: None,
        };
        let mut console = String::new();
        let results = {
            let devices: &mut [&mut dyn BlockDevice] = &mut [&mut device];
            run_benchmark(config, devices, &environment, &context, &mut console)
        };
        (results, console, device.accepted.clone())
    }

    #[test]
    fn check_1_finds_exactly_the_corrupted_reads_with_lba_and_offset() {
        // Blocks 3 and 9 of the 16-block region are corrupt: sequential reads wrap around it, so
        // each is read several times.
        let corrupt = [(1 << 20) + 3 * 4096 + 100, (1 << 20) + 9 * 4096 + 4095];
        let (results, console, accepted) =
            run(&config(JobOperation::Read, 1, CheckSetting::Every(1)), &corrupt, 1 << 20, true);
        let run = &results.runs[0];
        let check = run.check.as_ref().unwrap();
        let covers =
            |request: &Request, byte: u64| (request.lba * 512..(request.lba + 8) * 512).contains(&byte);
        let bad_reads =
            accepted.iter().filter(|request| corrupt.iter().any(|&byte| covers(request, byte))).count();
        assert!(bad_reads >= 4, "{bad_reads}");
        assert_eq!(check.checked, accepted.len() as u64, "every completed read was checked");
        assert_eq!(check.mismatches, bad_reads as u64);
        assert_eq!(check.first.len(), MAX_REPORTED_MISMATCHES);
        assert_eq!(
            (check.first[0].lba, check.first[0].byte_offset, check.first[0].device_byte),
            (2048 + 24, 100, corrupt[0])
        );
        assert_eq!(
            (check.first[1].lba, check.first[1].byte_offset, check.first[1].device_byte),
            (2048 + 72, 4095, corrupt[1])
        );
        assert_eq!(check.first[2].device_byte, corrupt[0], "the next lap of the region");
        // Mismatches are errors: in the run, its median and the summary.
        assert_eq!(run.errors_total(), bad_reads as u64);
        assert_eq!(results.medians[0].errors_total, bad_reads as u64);
        assert!(console.contains(
        "nvme0: MISMATCH: read at LBA 2072 (8 blocks) differs from the test pattern at byte 100 of the read \
         (device byte 1060964)"
    ), "{console}");
        assert_eq!(
            console.matches("\nnvme0: MISMATCH: read at").count(),
            MAX_REPORTED_MISMATCHES,
            "the first few only"
        );
        assert!(
            console.contains(&alloc::format!(
                "{} reads checked (every read), {bad_reads} mismatches",
                check.checked
            )),
            "{console}"
        );
        assert!(
            console.contains(&alloc::format!(
                "check: nvme0 {bad_reads} mismatches in {} reads checked over 1 runs: MISMATCHES FOUND",
                check.checked
            )),
            "{console}"
        );
    }

    #[test]
    fn a_clean_medium_passes_and_every_nth_read_is_checked() {
        let (results, console, accepted) =
            run(&config(JobOperation::RandRead, 4, CheckSetting::Every(5)), &[], 1 << 20, true);
        let check = results.runs[0].check.as_ref().unwrap();
        assert_eq!(check.mismatches, 0);
        assert_eq!(check.checked, accepted.len() as u64 / 5);
        assert_eq!(check.checked_bytes, check.checked * 4096);
        assert_eq!(results.runs[0].errors_total(), 0);
        assert!(console.contains("(every 5th), 0 mismatches"), "{console}");
        assert!(console.contains("all matched the test pattern"), "{console}");
    }

    #[test]
    fn unchecked_reads_keep_their_latencies() {
        // At queue depth 1 a check runs after the read's completion was time-stamped and before the
        // next read is submitted: the other reads' latencies are those of a run without checks.
        let plain = run(&config(JobOperation::RandRead, 1, CheckSetting::Off), &[], 1 << 20, true).0;
        let checked = run(&config(JobOperation::RandRead, 1, CheckSetting::Every(2)), &[], 1 << 20, true).0;
        let (plain, checked) = (&plain.runs[0], &checked.runs[0]);
        assert!(plain.check.is_none());
        assert!(checked.check.as_ref().unwrap().checked > 10);
        assert_eq!((checked.lat.min_ns, checked.lat.max_ns), (plain.lat.min_ns, plain.lat.max_ns));
        assert_eq!(checked.clat.mean_milli_ns, plain.clat.mean_milli_ns);
        assert_eq!(checked.slat.max_ns, plain.slat.max_ns);
    }

    #[test]
    fn where_reads_cannot_be_checked_the_run_says_why() {
        // 32 KiB of buffers for 16 requests of 4 KiB: requests share buffers.
        let (results, console, _) =
            run(&config(JobOperation::RandRead, 16, CheckSetting::Every(1)), &[], 32 << 10, true);
        let check = results.runs[0].check.as_ref().unwrap();
        assert_eq!((check.checked, check.skipped.is_some()), (0, true));
        assert!(
            console.contains("nvme0: check=1 asked for, but no read is checked: requests share buffers"),
            "{console}"
        );
        let (results, console, _) =
            run(&config(JobOperation::RandRead, 1, CheckSetting::Every(1)), &[], 1 << 20, false);
        assert_eq!(results.runs[0].check.as_ref().unwrap().checked, 0);
        assert!(console.contains("no access to its buffers"), "{console}");
    }

    #[test]
    fn check_auto_checks_pattern_regions_except_under_the_reference_preset() {
        let mut auto = config(JobOperation::RandRead, 1, CheckSetting::Auto);
        let (results, _, _) = run(&auto, &[], 1 << 20, true);
        assert!(results.runs[0].check.is_none(), "no pattern region: no check");
        auto.pattern_regions
            .push((String::from("nvme0"), Region { offset_bytes: 2 << 20, size_bytes: 4 << 20 }));
        let (results, _, accepted) = run(&auto, &[], 1 << 20, true);
        let check = results.runs[0].check.as_ref().unwrap();
        assert_eq!(check.every, DEFAULT_CHECK_EVERY);
        assert_eq!(check.checked, accepted.len() as u64 / u64::from(DEFAULT_CHECK_EVERY));
        assert!(
            accepted.iter().all(|request| (4096..12288).contains(&request.lba)),
            "inside the pattern region"
        );
        auto.preset = Preset::Reference;
        assert!(run(&auto, &[], 1 << 20, true).0.runs[0].check.is_none());
    }

    #[test]
    fn the_json_job_carries_the_checks_and_counts_mismatches_as_errors() {
        let corrupt = [(1 << 20) + 3 * 4096 + 100];
        let (results, console, _) =
            run(&config(JobOperation::Read, 1, CheckSetting::Every(1)), &corrupt, 1 << 20, true);
        let check = results.runs[0].check.as_ref().unwrap();
        let json = &console[console.find("==== barebench results: fio-compatible JSON begin").unwrap()..];
        let object = alloc::format!(
        "\"errors_total\" : {mismatches},\n        \"check\" : {{\n          \"every\" : 1,\n          \"checked\" : {checked},\n          \"checked_bytes\" : {bytes},\n          \"mismatches\" : {mismatches},",
        mismatches = check.mismatches,
        checked = check.checked,
        bytes = check.checked_bytes
    );
        assert!(json.contains(&object), "{json}");
        assert!(json.contains("\"first_mismatches\" : [\n            {\n              \"lba\" : 2072,\n              \"blocks\" : 8,\n              \"byte_offset\" : 100,\n              \"device_byte\" : 1060964\n"), "{json}");
    }
}
