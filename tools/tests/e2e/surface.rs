//! End-to-end: the jobs that are not fio's on QEMU virt's NVMe drive and SD card (sdhci-pci),
//! small pattern images: the whole-surface scan with `check=` (every step accounted for, every
//! checked read matching the pattern) and hdparm's two lines in hdparm's format, then
//! `barebench report` on the log, which must draw the scan's chart and print both tables
//! (docs/surface-and-sustained.md). `sd.cq=on` on QEMU's card, which has no command queue, is
//! said and falls back to one request at a time. One boot for all of it keeps the test short.
#![cfg(feature = "e2e")]
#![forbid(unsafe_code)]

use std::fs;
use std::process::Command;

use crate::qemu_harness::{repository_root, scratch_dir};

/// `barebench qemu` on virt with the given disks; returns (status, console).
fn run_virt(name: &str, disks: &[&str], settings: &str) -> (Option<i32>, String, std::path::PathBuf) {
    let dir = scratch_dir().join(format!("surface-{name}-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let log = dir.join("console.log");
    let output = Command::new(env!("CARGO_BIN_EXE_barebench"))
        .current_dir(repository_root())
        .args(["qemu", "--machine", "virt", "--timeout", "600", "--workdir"])
        .arg(&dir)
        .arg("--log")
        .arg(&log)
        .args(disks)
        .arg("--")
        .args(settings.split_whitespace())
        .output()
        .unwrap();
    let console = fs::read_to_string(&log).unwrap_or_default();
    (output.status.code(), console, dir)
}

/// hdparm's `%3u MB in %5.2f seconds = %6.2f MB/sec` after the label, checked field by field.
fn assert_hdparm_line(console: &str, label: &str) -> f64 {
    let line = console
        .lines()
        .find(|line| line.starts_with(label))
        .unwrap_or_else(|| panic!("no `{label}` line in:\n{console}"));
    let rest = &line[label.len()..];
    let (mb, rest) = rest.split_once(" MB in ").unwrap_or_else(|| panic!("{line}"));
    let (seconds, rest) = rest.split_once(" seconds = ").unwrap_or_else(|| panic!("{line}"));
    let rate = rest.strip_suffix(" MB/sec").unwrap_or_else(|| panic!("{line}"));
    assert!(mb.len() >= 3 && seconds.len() >= 5 && rate.len() >= 6, "hdparm's widths: {line:?}");
    let (mb, seconds, rate): (u64, f64, f64) =
        (mb.trim().parse().unwrap(), seconds.trim().parse().unwrap(), rate.trim().parse().unwrap());
    assert_eq!(mb % 2, 0, "2 MB per read: {line}");
    // MB/sec is the MB over the seconds (both rounded as printed).
    assert!((rate - mb as f64 / seconds).abs() <= rate * 0.01 + 0.01, "{line}");
    rate
}

#[test]
fn scan_and_hdparm_on_virt_nvme_and_sd_with_the_report_chart() {
    let settings = "jobs=scan:2m,hdparm runs=1 check=4 sd.cq=on progress=off nvme.measure=off";
    let (status, console, dir) =
        run_virt("virt", &["--nvme", "64M:pattern", "--sd", "16M:pattern"], settings);
    assert_eq!(status, Some(0), "{console}");
    // QEMU's card has no command queue: said, and the card is read one request at a time.
    for line in [
        "sd0        the card has no command queue (no extension registers: SCR CMD48/49 bit clear)",
        "sd0        sd.cq=on asked for, but the card has no command queue: one request at a time",
    ] {
        assert!(console.lines().any(|l| l == line), "missing {line:?} in:\n{console}");
    }
    // Every step of both devices, every checked read as the pattern says.
    for (device, steps) in [("nvme0", 32), ("sd0", 8)] {
        let line = format!("{device:<8} scan: {steps} steps, ");
        assert!(console.contains(&line), "missing {line:?} in:\n{console}");
        let check = format!("{device:<8} check: ");
        let check = console.lines().find(|l| l.starts_with(&check)).unwrap_or_else(|| panic!("{console}"));
        assert!(check.contains(" reads checked (every 4th), 0 mismatches"), "{check}");
    }
    assert!(!console.contains("MISMATCH"), "{console}");
    assert!(console.contains("slow zones (steps below 50 % of the mean of the steps before)"), "{console}");
    // hdparm's lines, in its format and arithmetic, for both devices.
    let cached_lines = console.lines().filter(|line| line.starts_with(" Timing cached reads:   ")).count();
    assert_eq!(cached_lines, 2, "one per device: {console}");
    let cached = assert_hdparm_line(&console, " Timing cached reads:   ");
    let buffered = assert_hdparm_line(&console, " Timing buffered disk reads: ");
    assert!(cached > 0.0 && buffered > 0.0);
    assert!(console.contains("hdparm counts each 2 MiB read as 2 MB (MB = 2^20 bytes)"), "{console}");
    println!("QEMU virt: hdparm -T {cached} MB/sec, -t {buffered} MB/sec (hdparm's MB), emulator figures");
    // The report draws the scan and tabulates both.
    let out = dir.join("report");
    let report = Command::new(env!("CARGO_BIN_EXE_barebench"))
        .args(["report", "-o"])
        .arg(&out)
        .arg(dir.join("console.log"))
        .output()
        .unwrap();
    assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
    let markdown = fs::read_to_string(out.join("report.md")).unwrap();
    assert!(markdown.contains("## Whole-surface reads"), "{markdown}");
    assert!(markdown.contains("## hdparm"), "{markdown}");
    assert!(markdown.contains("![Whole-surface read: MiB/s per step against position](scan-throughput.svg)"));
    let svg = fs::read_to_string(out.join("scan-throughput.svg")).unwrap();
    assert!(svg.contains("nvme0") && svg.contains("sd0"), "one line per device");
    assert!(fs::metadata(out.join("scan-throughput.png")).unwrap().len() > 1000);
    let _ = fs::remove_dir_all(&dir);
}
