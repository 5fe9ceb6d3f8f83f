//! End-to-end: USB mass storage under QEMU virt: `qemu-xhci` with a Bulk-Only `usb-storage` on
//! root port 1 and a UAS `usb-uas` + `scsi-hd` on port 2, both backed by pattern images. The
//! kernel's `crc=` results at the start, the end and pseudo-random places of each disk, 512 B to
//! 1 MiB, are compared with CRCs the host computes (crc32fast) and `verify=` checks every byte;
//! the benchmark runs at QD 1 and 32 (UAS keeps 15, BOT runs at 1 and says so) and its JSON is
//! parsed; a `blkdebug` drive that fails reads gives named errors and the run goes on; both
//! transports also run at high speed (`p3=0`: UAS with Read/Write Ready), with bad settings, and
//! on a controller without streams.
#![cfg(feature = "e2e")]
#![forbid(unsafe_code)]

use crate::qemu_harness::{scratch_dir, Machine, Outcome, Run, TestImage};
use bench::fio_json::{extract_json_from_log, parse_fio_json};
use std::time::Duration;

const IMAGE_BYTES: u64 = 64 << 20;
const BLOCKS: u64 = IMAGE_BYTES / 512;
/// Transfer sizes in 512-byte blocks: 512 B, 4 KiB, 64 KiB, 1 MiB.
const COUNTS: [u64; 4] = [1, 8, 128, 2048];

/// Each size at the start, at the end and at a pseudo-random place (a fixed-seed LCG).
fn ranges(seed: u64) -> Vec<(u64, u64)> {
    let mut state = seed;
    let mut ranges = Vec::new();
    for count in COUNTS {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ranges.extend([(0, count), (BLOCKS - count, count), ((state >> 11) % (BLOCKS - count), count)]);
    }
    ranges
}

fn checks(device: &str, ranges: &[(u64, u64)]) -> String {
    ranges
        .iter()
        .flat_map(|(lba, count)| {
            [format!("crc={device}:{lba}:{count}"), format!("verify={device}:{lba}:{count}")]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn assert_checks(output: &str, device: &str, image: &TestImage, ranges: &[(u64, u64)]) {
    for &(lba, count) in ranges {
        let crc = format!("crc {device} {lba} {count} {:#010x}", image.crc(lba, count));
        assert!(output.lines().any(|line| line == crc), "missing `{crc}` in:\n{output}");
        let verify = format!("verify {device} {lba} {count} ok");
        assert!(output.lines().any(|line| line == verify), "missing `{verify}` in:\n{output}");
    }
}

fn line_with<'a>(output: &'a str, text: &str) -> &'a str {
    output.lines().find(|l| l.contains(text)).unwrap_or_else(|| panic!("no line with `{text}` in:\n{output}"))
}

/// The end-of-run counters of a drive or controller (`usb0: 3 requests, ...`).
fn counters<'a>(output: &'a str, source: &str) -> &'a str {
    output
        .lines()
        .find(|l| {
            l.starts_with(&format!("{source}: ")) && (l.contains(" requests, ") || l.contains(" events ("))
        })
        .unwrap_or_else(|| panic!("no counters of {source} in:\n{output}"))
}

/// QEMU arguments for one xHCI with a BOT drive on port 1 and a UAS drive on port 2.
fn two_drives(xhci: &str, bot: &str, uas: &str) -> Vec<String> {
    [
        "-device",
        xhci,
        "-drive",
        &format!("if=none,id=ub,{bot}"),
        "-device",
        "usb-storage,bus=xhci.0,port=1,drive=ub,serial=barebench-bot",
        "-device",
        "usb-uas,id=uas,bus=xhci.0,port=2",
        "-drive",
        &format!("if=none,id=ud,{uas}"),
        "-device",
        "scsi-hd,bus=uas.0,scsi-id=0,lun=0,drive=ud,serial=barebench-uas",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn boot(settings: &str, args: &[String], timeout_s: u64) -> Outcome {
    let arguments: Vec<&str> = args.iter().map(String::as_str).collect();
    Run::new(Machine::Virt)
        .append(&format!("exit=semihosting {settings}"))
        .args(&arguments)
        .timeout(Duration::from_secs(timeout_s))
        .go()
}

#[test]
fn bot_and_uas_drives_identify_and_read_right_everywhere() {
    let image = TestImage::full("usb-pattern", IMAGE_BYTES);
    let (bot_ranges, uas_ranges) = (ranges(0x5eed_0b07), ranges(0x5eed_0a55));
    let settings = format!("jobs=none {} {}", checks("usb0", &bot_ranges), checks("usb1", &uas_ranges));
    let run = boot(&settings, &two_drives("qemu-xhci,id=xhci", &image.drive(), &image.drive()), 180);
    run.assert_status(0);
    let out = &run.output;
    assert!(out.contains("pci        00:01.0 1b36:000d class 0c:03:30 (USB controller)"), "{out}");
    let controller = line_with(out, "usb          xhci 00:01.0: xHCI 1.0, 64 slots, 8 ports");
    assert!(
        controller.contains("stream arrays up to 256 entries") && controller.contains("polled (IMAN.IE 0)"),
        "{controller}"
    );
    assert!(
        controller.contains("USB 3.0 ports 1-4") && controller.contains("USB 2.0 ports 5-8"),
        "{controller}"
    );
    // The root ports are watched for usb.connect-ms (1.5 s) with a line every 500 ms, and the
    // empty ones are named.
    assert!(
        out.contains("xhci 00:01.0: waiting for devices on ports 3-8 (5")
            && out.contains(" of 1500 ms, usb.connect-ms)"),
        "{out}"
    );
    assert!(out.contains("xhci 00:01.0: nothing connected on ports 3-8 after 15"), "{out}");
    assert!(
        out.contains("usb0       port 1: SuperSpeed 5 Gb/s, 46f4:0001 \"QEMU\" \"QEMU USB HARDDRIVE\" serial \"barebench-bot\", USB 3.00"),
        "{out}"
    );
    assert!(
        out.contains(
            "usb0       SuperSpeed 5 Gb/s, BOT, 1 command at a time, 1 LUN; up to 1 MiB per request"
        ),
        "{out}"
    );
    assert!(
        out.contains("usb1       port 2: SuperSpeed 5 Gb/s, 46f4:0003 \"QEMU\" \"USB Attached SCSI HBA\""),
        "{out}"
    );
    assert!(
        out.contains("usb1       SuperSpeed 5 Gb/s, UAS, 16 streams: 15 commands in flight (tag 16 kept for task management)"),
        "{out}"
    );
    for device in ["usb0", "usb1"] {
        let scsi = line_with(out, &format!("{device:<10} SCSI \"QEMU\" \"QEMU HARDDISK\""));
        assert!(
            scsi.contains(
                "direct-access block device; 67108864 bytes (0.06 GiB) = 131072 × 512 B (READ CAPACITY(16))"
            ),
            "{scsi}"
        );
    }
    assert_checks(out, "usb0", &image, &bot_ranges);
    assert_checks(out, "usb1", &image, &uas_ranges);
    assert!(counters(out, "usb0").contains(" 0 failed; "), "{out}");
    assert!(counters(out, "usb1").contains(" 0 failed; "), "{out}");
    assert!(counters(out, "xhci 00:01.0").contains(" 0 stray events, 0 host controller events"), "{out}");
}

#[test]
fn the_benchmark_runs_bot_at_depth_one_and_uas_at_fifteen() {
    let image = TestImage::full("usb-bench", 16 << 20);
    let settings = "jobs=randread:4k:1,randread:4k:32,read:1m:16 ramp=100ms runtime=500ms runs=2 offset=0 size=16m progress=off";
    let run = boot(settings, &two_drives("qemu-xhci,id=xhci", &image.drive(), &image.drive()), 300);
    run.assert_status(0);
    let out = &run.output;
    assert!(
        out.contains(
            "usb0 has no command queueing (one request in flight): running at queue depth 1 instead of 32"
        ),
        "{out}"
    );
    assert!(
        out.contains("usb1: queue depth 32 is more than the 15 requests it can have in flight; using 15"),
        "{out}"
    );
    assert!(out.contains("run 1/2: randread 4k qd15 on usb1"), "{out}");
    assert!(out.contains("run 1/2: read 1m qd1 on usb0"), "{out}");
    let ratios = out.split("ratios between usb0 and usb1").nth(1).expect("a ratio table");
    assert!(ratios.lines().any(|l| l.starts_with("randread:4k:32")), "{ratios}");
    let json = extract_json_from_log(out).unwrap_or_else(|e| panic!("{e:?} in:\n{out}"));
    let report = parse_fio_json(&json).unwrap_or_else(|e| panic!("{e:?} in:\n{json}"));
    assert_eq!(report.jobs.len(), 12, "3 jobs x 2 devices x 2 runs");
    for job in &report.jobs {
        assert_eq!(job.error, 0, "{}", job.jobname);
        assert!(job.read.total_ios > 0, "{} did no I/O", job.jobname);
    }
    let depth = |device: &str, job: &str| {
        report
            .jobs
            .iter()
            .find(|j| j.settings.device.as_deref() == Some(device) && j.jobname.starts_with(job))
            .map(|j| j.job_options.get("iodepth").cloned().unwrap_or_default())
    };
    assert_eq!(depth("usb1", "randread-4k-qd32").as_deref(), Some("15"));
    assert_eq!(depth("usb0", "randread-4k-qd32").as_deref(), Some("1"));
    assert_eq!(report.barebench_medians.len(), 6);
    assert!(counters(out, "usb1").contains("up to 15 in flight"), "{out}");
    eprintln!(
        "{}",
        out.split("summary: ").nth(1).unwrap_or(out).split("==== barebench").next().unwrap_or("")
    );
}

#[test]
fn failing_reads_are_named_and_the_run_goes_on() {
    let image = TestImage::full("usb-blkdebug", 16 << 20);
    // errno 61 (ENODATA) on a read of sector 2048 becomes MEDIUM ERROR 03/11/00 (docs/usb-storage.md §8).
    let config = scratch_dir().join(format!("usb-blkdebug-{}.conf", std::process::id()));
    std::fs::write(&config, "[inject-error]\nevent = \"read_aio\"\nerrno = \"61\"\nsector = \"2048\"\n")
        .unwrap();
    let failing = format!(
        "format=raw,file.driver=blkdebug,file.config={},file.image.filename={},snapshot=on,rerror=report,werror=report",
        config.display(),
        image.path.display()
    );
    let settings = "jobs=none crc=usb0:0:8 crc=usb0:2040:16 crc=usb0:4096:8 crc=usb1:0:8 crc=usb1:2048:1 crc=usb1:4096:8";
    let run = boot(settings, &two_drives("qemu-xhci,id=xhci", &failing, &failing), 120);
    let _ = std::fs::remove_file(&config);
    run.assert_status(2);
    let out = &run.output;
    for (device, lba, count) in [("usb0", 2040, 16), ("usb1", 2048, 1)] {
        assert!(
            out.contains(&format!(
                "{device}: READ(10) of {count} blocks at LBA {lba} failed: CHECK CONDITION (0x02), MEDIUM ERROR: unrecovered read error (03/11/00)"
            )),
            "{out}"
        );
        assert!(
            out.contains(&format!(
                "crc {device} {lba} {count}: read at LBA {lba} failed: device-status (code 0x31100)"
            )),
            "{out}"
        );
        for (good_lba, good_count) in [(0, 8), (4096, 8)] {
            let expected =
                format!("crc {device} {good_lba} {good_count} {:#010x}", image.crc(good_lba, good_count));
            assert!(out.lines().any(|l| l == expected), "the run goes on: `{expected}` in:\n{out}");
        }
        assert!(counters(out, device).contains("1 failed, 1 device-status"), "{out}");
    }
    assert!(counters(out, "usb0").contains(", 2 REQUEST SENSE"), "BOT asks for the sense: {out}");
}

#[test]
fn high_speed_ports_reset_and_uas_uses_read_ready() {
    let image = TestImage::full("usb-high-speed", 16 << 20);
    let (bot, uas) = ([(0u64, 2048u64), (BLOCKS / 4 - 8, 8)], [(0u64, 8u64), (BLOCKS / 4 - 2048, 2048)]);
    let settings = format!(
        "jobs=randread:4k:8 ramp=50ms runtime=300ms runs=1 offset=0 size=8m progress=off {} {}",
        checks("usb0", &bot),
        checks("usb1", &uas)
    );
    let run = boot(&settings, &two_drives("qemu-xhci,id=xhci,p3=0", &image.drive(), &image.drive()), 180);
    run.assert_status(0);
    let out = &run.output;
    assert!(out.contains("usb0       port 1: High Speed 480 Mb/s, 46f4:0001"), "{out}");
    assert!(out.contains("usb1       High Speed 480 Mb/s, UAS without streams (Read/Write Ready), 32 tags: 31 commands in flight"), "{out}");
    assert!(
        !line_with(out, "usb          xhci 00:01.0:").contains("USB 3.0"),
        "no USB 3 ports with p3=0: {out}"
    );
    assert_checks(out, "usb0", &image, &bot);
    assert_checks(out, "usb1", &image, &uas);
    assert!(out.contains("run 1/1: randread 4k qd8 on usb1"), "{out}");
}

#[test]
fn settings_and_controllers_the_drives_cannot_use_are_named() {
    let image = TestImage::full("usb-settings", 16 << 20);
    // usb.protocol=bot on a UAS-only drive, a bad value, and a controller without streams: the
    // UAS drive at SuperSpeed cannot work there, the BOT drive still does.
    let settings = "jobs=none usb.protocol=bot usb.protocol=fast crc=usb0:0:8";
    let run =
        boot(settings, &two_drives("qemu-xhci,id=xhci,streams=off", &image.drive(), &image.drive()), 120);
    run.assert_status(0);
    let out = &run.output;
    assert!(
        out.contains(
            "warning: bad driver option usb.protocol=fast: expected auto, uas or bot; the default is kept"
        ),
        "{out}"
    );
    assert!(line_with(out, "usb          xhci 00:01.0:").contains("no streams"), "{out}");
    assert!(
        out.contains("xhci 00:01.0 port 2 (SuperSpeed 5 Gb/s): UAS at SuperSpeed needs bulk streams, and this controller has none"),
        "{out}"
    );
    let expected = format!("crc usb0 0 8 {:#010x}", image.crc(0, 8));
    assert!(out.lines().any(|l| l == expected), "{out}");
    assert!(!out.contains("usb1 "), "{out}");
    // usb.protocol=bot on the UAS-only drive with streams: named, and UAS is used.
    let run = boot(
        "jobs=none usb.protocol=bot crc=usb1:8:8",
        &two_drives("qemu-xhci,id=xhci", &image.drive(), &image.drive()),
        120,
    );
    run.assert_status(0);
    assert!(
        run.output
            .contains("usb1       usb.protocol=bot: the drive offers no Bulk-Only interface; using UAS"),
        "{}",
        run.output
    );
    // No xHCI at all, and an xHCI with nothing plugged in.
    let none = boot("jobs=none", &[], 60);
    none.assert_status(0);
    assert!(none.output.contains("usb        no xHCI on PCIe (class 0c:03:30)"), "{}", none.output);
    let empty = boot("jobs=none", &["-device".to_string(), "qemu-xhci,id=xhci".to_string()], 60);
    empty.assert_status(0);
    assert!(empty.output.contains("xhci 00:01.0: no usable USB drive"), "{}", empty.output);
}

#[test]
fn a_pi3_says_its_usb_is_not_an_xhci() {
    let run = Run::new(Machine::Raspi3b).append("exit=semihosting jobs=none").go();
    run.assert_status(0);
    assert!(
        run.output.contains("usb        the Pi 3's USB is a DWC2 OTG controller (no xHCI); not supported"),
        "{}",
        run.output
    );
}
