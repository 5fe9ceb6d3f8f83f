//! End-to-end: NVMe faults and an SD card ejected mid-run (docs/qemu.md §12, §13) under QEMU virt,
//! injected by `barebench qemu --fault` (the real binary, the real kernel image), with the other
//! device measured beside the failing one. Each run must name the failure, count the failed I/Os
//! by kind in the table and the JSON, measure the other device normally and end with exit status
//! 2 (a device failed), within a bounded time. The slow drive exercises the command timeout, Abort
//! and the controller reset; the removed drive (QEMU monitor, no guest cooperation) the all-ones
//! registers of a device that is gone; the ejected card the SD host's Card Removal.
#![forbid(unsafe_code)]
#![cfg(feature = "e2e")]

use crate::qemu_harness::{repository_root, scratch_dir};
use std::process::Command;
use std::time::{Duration, Instant};

/// `barebench qemu`'s own bound on the run; the test's time limit is this and a little more.
const QEMU_TIMEOUT_S: u64 = 90;

struct FaultRun {
    status: Option<i32>,
    console: String,
    elapsed: Duration,
}

/// Runs `barebench qemu --fault FAULT` on virt with a 64 MiB NVMe drive and SD card (both
/// pattern-filled) and `settings`.
fn run_with_fault(fault: &str, settings: &str) -> FaultRun {
    let workdir = scratch_dir().join(format!("fault-{fault}"));
    std::fs::create_dir_all(&workdir).unwrap();
    let log = workdir.join("serial.log");
    let started = Instant::now();
    let output = Command::new(env!("CARGO_BIN_EXE_barebench"))
        .current_dir(repository_root())
        .args(["qemu", "--machine", "virt", "--nvme", "64M:pattern", "--sd", "64M:pattern", "--fault", fault])
        .arg("--workdir")
        .arg(&workdir)
        .arg("--log")
        .arg(&log)
        .args(["--timeout", &QEMU_TIMEOUT_S.to_string(), "--cmdline", settings])
        .output()
        .expect("barebench runs");
    let console = std::fs::read_to_string(&log).unwrap_or_default();
    FaultRun { status: output.status.code(), console, elapsed: started.elapsed() }
}

/// The value of the first `"key" : N` after `after` in the console's JSON.
fn json_number_after(console: &str, after: &str, key: &str) -> u64 {
    let rest = &console[console.find(after).unwrap_or_else(|| panic!("{after} in the JSON"))..];
    let pattern = format!("\"{key}\" : ");
    let start = rest.find(&pattern).unwrap_or_else(|| panic!("{key} after {after}")) + pattern.len();
    rest[start..].split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
}

/// The summary row of `device`: its IOPS and its errors column.
fn summary_iops_and_errors(console: &str, device: &str) -> (f64, u64) {
    let summary = &console[console.find("summary: medians").expect("a summary")..];
    let row = summary
        .lines()
        .find(|line| line.starts_with(&format!("{device:<8} ")))
        .unwrap_or_else(|| panic!("a summary row for {device}:\n{console}"));
    let columns: Vec<&str> = row.split_whitespace().collect();
    let errors = columns[columns.len() - 1].parse().unwrap();
    let iops = columns[columns.len() - 4].parse().unwrap();
    (iops, errors)
}

#[test]
fn media_errors_are_named_counted_by_kind_and_the_sd_card_is_measured_normally() {
    // Random 4 KiB reads over the first 4 MiB: the second MiB fails, so about a quarter do.
    let run = run_with_fault(
        "nvme-media",
        "preset=quick jobs=randread:4k:1 runs=2 ramp=0ms runtime=1s offset=0 size=4m nvme.measure=off",
    );
    let console = &run.console;
    assert_eq!(run.status, Some(2), "a device failed: exit status 2\n{console}");
    assert!(run.elapsed < Duration::from_secs(QEMU_TIMEOUT_S + 10));
    assert!(console.contains("nvme0q1: Read failed: Unrecovered Read Error (02/81)"), "{console}");
    // The first 4 failures of each run are described, the rest counted.
    let described = console.matches("Read failed: Unrecovered Read Error").count();
    assert!(described <= 2 * 4 + 1, "{described} failures described\n{console}");
    assert!(console.contains("nvme0: ... and "), "the count of the rest\n{console}");
    let (nvme_iops, nvme_errors) = summary_iops_and_errors(console, "nvme0");
    assert!(nvme_errors > 10 && nvme_iops > 0.0, "{nvme_errors} errors, {nvme_iops} IOPS\n{console}");
    let by_kind = format!("nvme0    failed I/Os by kind, all runs: {nvme_errors} media");
    assert!(console.lines().any(|line| line.trim_end() == by_kind), "{by_kind}\n{console}");
    // The JSON: per-kind counts under barebench, fio's total_err and first_error (ENODATA).
    let first_nvme_job = "\"jobname\" : \"randread-4k-qd1-nvme0-run1\"";
    let media = json_number_after(console, first_nvme_job, "media");
    assert!(media > 0);
    assert_eq!(json_number_after(console, first_nvme_job, "total_err"), media);
    assert_eq!(json_number_after(console, first_nvme_job, "first_error"), 61);
    // The SD card beside it: measured, no failures.
    let (sd_iops, sd_errors) = summary_iops_and_errors(console, "sd0");
    assert!(sd_iops > 0.0 && sd_errors == 0, "sd0: {sd_iops} IOPS, {sd_errors} errors\n{console}");
    assert!(console.contains("barebench results: fio-compatible JSON end"));
}

#[test]
fn a_drive_slower_than_the_timeout_is_aborted_reset_and_the_run_goes_on() {
    // Every NVMe read takes 2 s; the command timeout is 500 ms (added by the fault).
    let run = run_with_fault(
        "nvme-slow",
        "preset=quick jobs=randread:4k:4 runs=2 ramp=0ms runtime=2s offset=0 size=4m nvme.measure=off",
    );
    let console = &run.console;
    assert_eq!(run.status, Some(2), "a device failed: exit status 2\n{console}");
    assert!(run.elapsed < Duration::from_secs(QEMU_TIMEOUT_S + 10));
    assert!(console.contains("command timeout 500 ms (nvme.timeout-ms=)"), "{console}");
    assert!(console.contains("nvme0q1: Read timed out: no completion after "), "{console}");
    // QEMU's Abort leaves a command it cannot cancel running: not aborted, then a reset.
    assert!(console.contains("Abort of sqid:1 cid:0: not aborted"), "{console}");
    assert!(console.contains("controller reset (sqid:1 cid:0 could not be aborted) in "), "{console}");
    // Both runs ran (the controller came back for the second) and counted their timeouts.
    let (_, nvme_errors) = summary_iops_and_errors(console, "nvme0");
    assert_eq!(nvme_errors, 8, "4 in flight per run, 2 runs\n{console}");
    let by_kind = format!("nvme0    failed I/Os by kind, all runs: {nvme_errors} timeout");
    assert!(console.lines().any(|line| line.trim_end() == by_kind), "{by_kind}\n{console}");
    let second_run = "\"jobname\" : \"randread-4k-qd4-nvme0-run2\"";
    assert_eq!(json_number_after(console, second_run, "first_error"), 110);
    assert_eq!(json_number_after(console, second_run, "timeout"), 4);
    let (sd_iops, sd_errors) = summary_iops_and_errors(console, "sd0");
    assert!(sd_iops > 0.0 && sd_errors == 0, "sd0: {sd_iops} IOPS, {sd_errors} errors\n{console}");
}

#[test]
fn a_removed_drive_is_said_gone_once_its_reads_fail_as_gone_and_the_sd_card_finishes() {
    // Removed 0.5 s into its first run; found at the first command past the 1 s timeout.
    let run = run_with_fault(
        "nvme-gone",
        "preset=quick jobs=randread:4k:4 runs=2 ramp=0ms runtime=2s offset=0 size=4m nvme.measure=off \
         nvme.timeout-ms=1000",
    );
    let console = &run.console;
    assert_eq!(run.status, Some(2), "a device failed: exit status 2\n{console}");
    assert!(run.elapsed < Duration::from_secs(QEMU_TIMEOUT_S + 10));
    assert_eq!(console.matches("device gone (CSTS reads 0xffffffff)").count(), 1, "said once\n{console}");
    assert!(
        console.contains("nvme0q1: device gone (CSTS reads 0xffffffff): 4 requests in flight"),
        "{console}"
    );
    assert!(console.contains("refused (the device is gone or was not recovered)"), "{console}");
    assert!(console.contains("normal shutdown failed: the controller is gone"), "{console}");
    let by_kind = "nvme0    failed I/Os by kind, all runs: 4 device-gone";
    assert!(console.lines().any(|line| line.trim_end() == by_kind), "{by_kind}\n{console}");
    let first_run = "\"jobname\" : \"randread-4k-qd4-nvme0-run1\"";
    assert_eq!(json_number_after(console, first_run, "first_error"), 19);
    assert_eq!(json_number_after(console, first_run, "device-gone"), 4);
    // Both SD runs ran to the end, without failures.
    // "2.0 of 2.0 s", or a little more when the host stalls QEMU during the last read.
    let last_run = "sd0 randread 4k qd1 run 2/2: ";
    let seconds_run = console.rsplit(last_run).next().and_then(|rest| rest.split(" of 2.0 s").next());
    let seconds_run: f64 = seconds_run.and_then(|text| text.parse().ok()).unwrap_or(0.0);
    assert!(seconds_run >= 2.0, "sd0's second run did not run its 2 s\n{console}");
    let (sd_iops, sd_errors) = summary_iops_and_errors(console, "sd0");
    assert!(sd_iops > 0.0 && sd_errors == 0, "sd0: {sd_iops} IOPS, {sd_errors} errors\n{console}");
}

#[test]
fn an_ejected_sd_card_is_said_gone_once_its_read_fails_as_gone_and_the_nvme_drive_finishes() {
    // Ejected 0.5 s into its first run (QEMU monitor `eject -f sdc`): QEMU's sdhci clears Card
    // Inserted and raises Card Removal; the driver sees it at the next look.
    let run = run_with_fault(
        "sd-eject",
        "preset=quick jobs=randread:4k:4 runs=2 ramp=0ms runtime=2s offset=0 size=4m nvme.measure=off",
    );
    let console = &run.console;
    assert_eq!(run.status, Some(2), "a device failed: exit status 2\n{console}");
    assert!(run.elapsed < Duration::from_secs(QEMU_TIMEOUT_S + 10));
    // Said once on the console (the JSON's error list may repeat it).
    let said =
        console.lines().filter(|line| line.contains("sd0: read failed: card removed") && !line.contains('"'));
    assert_eq!(said.count(), 1, "said once\n{console}");
    assert!(console.contains("its reads fail as device-gone"), "{console}");
    // Each later run is refused at its first request, not retried against an absent card.
    let refused = "refused (the device is gone or was not recovered); this run ends here for sd0";
    let refused_lines = console.lines().filter(|line| line.starts_with("sd0: ") && line.ends_with(refused));
    assert_eq!(refused_lines.count(), 2, "{console}");
    let by_kind = "sd0      failed I/Os by kind, all runs: 1 device-gone";
    assert!(console.lines().any(|line| line.trim_end() == by_kind), "{by_kind}\n{console}");
    let first_run = "\"jobname\" : \"randread-4k-qd4-sd0-run1\"";
    assert_eq!(json_number_after(console, first_run, "first_error"), 19);
    assert_eq!(json_number_after(console, first_run, "device-gone"), 1);
    // Both NVMe runs ran to the end, without failures.
    assert!(console.contains("nvme0 randread 4k qd4 run 2/2: 2.0 of 2.0 s"), "{console}");
    let (nvme_iops, nvme_errors) = summary_iops_and_errors(console, "nvme0");
    assert!(nvme_iops > 0.0 && nvme_errors == 0, "nvme0: {nvme_iops} IOPS, {nvme_errors} errors\n{console}");
}
