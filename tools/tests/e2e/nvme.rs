//! End-to-end: the polled NVMe driver under QEMU virt. One pattern-filled 64 MiB image
//! (`blockdev::pattern`) behind `-device nvme`, read with QEMU's default MDTS (512 KiB), with
//! `mdts=9` (2 MiB) and `mdts=3` (32 KiB), with 512- and 4096-byte logical blocks, with two I/O
//! queue pairs, and with 32 reads in flight (`nvme.selftest=qd32`); every range is checked byte
//! for byte (`verify=`) and by CRC (`crc=`) against CRCs the host computes from the image with
//! crc32fast. Also: no NVMe device, a controller without a namespace, and bad input.
#![cfg(feature = "e2e")]
#![forbid(unsafe_code)]

use crate::qemu_harness::{nvme_aio, scratch_dir, Machine, Outcome, Run};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

const SECTOR: u64 = 512;
const IMAGE_BYTES: u64 = 64 << 20;
const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
/// Read sizes from one sector to several MDTS-sized commands (512 B, 4 KiB, 64 KiB, 1 MiB, 4 MiB).
const READ_SIZES: [u64; 5] = [512, 4 * KIB, 64 * KIB, MIB, 4 * MIB];

/// The image, every sector pattern-filled; built once per test binary and kept (its content is
/// a function of its size only). QEMU opens it with `snapshot=on`, so nothing writes it.
fn image() -> &'static PathBuf {
    static IMAGE: OnceLock<PathBuf> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let path = scratch_dir().join("nvme-pattern-64MiB.img");
        let fresh = std::fs::metadata(&path).map(|m| m.len() == IMAGE_BYTES).unwrap_or(false)
            && first_and_last_sectors_match(&path);
        if !fresh {
            let temporary = scratch_dir().join(format!("nvme-pattern-{}.tmp", std::process::id()));
            let mut file = File::create(&temporary).unwrap();
            let mut chunk = Vec::with_capacity(MIB as usize);
            let mut sector = [0u8; 512];
            for first in (0..IMAGE_BYTES / SECTOR).step_by((MIB / SECTOR) as usize) {
                chunk.clear();
                for s in first..first + MIB / SECTOR {
                    blockdev::pattern::fill_sector(s, &mut sector);
                    chunk.extend_from_slice(&sector);
                }
                file.write_all(&chunk).unwrap();
            }
            file.sync_all().unwrap();
            std::fs::rename(&temporary, &path).unwrap();
        }
        path
    })
}

fn first_and_last_sectors_match(path: &PathBuf) -> bool {
    let mut file = File::open(path).unwrap();
    let mut expected = [0u8; 512];
    let mut actual = [0u8; 512];
    for s in [0, IMAGE_BYTES / SECTOR - 1] {
        blockdev::pattern::fill_sector(s, &mut expected);
        file.seek(SeekFrom::Start(s * SECTOR)).unwrap();
        if file.read_exact(&mut actual).is_err() || actual != expected {
            return false;
        }
    }
    true
}

/// CRC-32 of `count` blocks of `block_bytes` from `lba`, read from the image by the host.
fn host_crc(block_bytes: u64, lba: u64, count: u64) -> u32 {
    let mut file = File::open(image()).unwrap();
    file.seek(SeekFrom::Start(lba * block_bytes)).unwrap();
    let mut bytes = vec![0u8; (count * block_bytes) as usize];
    file.read_exact(&mut bytes).unwrap();
    crc32fast::hash(&bytes)
}

/// The ranges read: each size at the start, at the end and at a pseudo-random place.
fn ranges(block_bytes: u64) -> Vec<(u64, u64)> {
    let blocks = IMAGE_BYTES / block_bytes;
    let mut ranges = Vec::new();
    let mut state = 0x2545_f491_u64;
    for size in READ_SIZES.iter().filter(|s| **s >= block_bytes) {
        let count = size / block_bytes;
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        let random = (state >> 33) % (blocks - count);
        for lba in [0, blocks - count, random] {
            ranges.push((lba, count));
        }
    }
    ranges
}

struct Drive {
    device_options: String,
    block_bytes: u64,
}

impl Drive {
    fn new(device_options: &str) -> Drive {
        let block_bytes = if device_options.contains("logical_block_size=4096") { 4096 } else { 512 };
        Drive { device_options: device_options.to_string(), block_bytes }
    }

    /// Boots virt with this drive, `crc=` and `verify=` for every range, and `extra` settings.
    fn run(&self, extra: &str) -> Outcome {
        let mut line = String::from("exit=semihosting jobs=none");
        for (lba, count) in ranges(self.block_bytes) {
            line.push_str(&format!(" crc=nvme0:{lba}:{count} verify=nvme0:{lba}:{count}"));
        }
        line.push(' ');
        line.push_str(extra);
        let drive =
            format!("if=none,id=nv,file={},format=raw,snapshot=on,aio={}", image().display(), nvme_aio());
        let device = format!("nvme,drive=nv,serial=barebench0{}", self.device_options);
        Run::new(Machine::Virt)
            .append(&line)
            .args(&["-drive", &drive, "-device", &device])
            .timeout(Duration::from_secs(150))
            .go()
    }

    /// Every `crc=` matches the host's CRC and every `verify=` passed.
    fn assert_checks(&self, outcome: &Outcome) {
        let out = &outcome.output;
        for (lba, count) in ranges(self.block_bytes) {
            let expected =
                format!("crc nvme0 {lba} {count} {:#010x}", host_crc(self.block_bytes, lba, count));
            assert!(out.lines().any(|l| l == expected), "missing `{expected}` in:\n{out}");
            let verified = format!("verify nvme0 {lba} {count} ok");
            assert!(out.lines().any(|l| l == verified), "missing `{verified}` in:\n{out}");
        }
    }
}

fn line_with<'a>(out: &'a str, text: &str) -> &'a str {
    out.lines().find(|l| l.contains(text)).unwrap_or_else(|| panic!("no line with `{text}` in:\n{out}"))
}

/// The three self-test workloads passed with 32 reads in flight.
fn assert_self_test_passed(out: &str) {
    for what in ["4 KiB random", "mixed 512 B-1 MiB", "4 MiB start/random/end"] {
        let line = line_with(out, &format!("nvme0: self-test qd32 {what}:"));
        assert!(line.contains(": passed,"), "{line}\n{out}");
    }
    let random = line_with(out, "nvme0: self-test qd32 4 KiB random:");
    assert!(random.contains("at up to 32 in flight"), "{random}");
    let mixed = line_with(out, "nvme0: self-test qd32 mixed 512 B-1 MiB:");
    assert!(mixed.contains("at up to 32 in flight"), "{mixed}");
}

/// No command failed, no completion was distrusted, and the controller shut down normally.
fn assert_clean_end(out: &str) {
    assert!(!out.contains(" failed: "), "{out}");
    let counters = line_with(out, " untrusted completions, ");
    assert!(counters.contains(" 0 command errors, 0 untrusted completions"), "{counters}");
    assert!(counters.contains("0 failed)"), "{counters}");
    assert!(line_with(out, "nvme 00:01.0: shut down (CSTS.SHST complete)").contains("deleted"), "{out}");
}

/// Runs `settings` on `drive` and checks what every good run shows: exit status 0, the `crc=` and
/// `verify=` results, the self-test passed and a clean shutdown.
fn run_clean(drive: &Drive, settings: &str) -> Outcome {
    let outcome = drive.run(settings);
    outcome.assert_status(0);
    drive.assert_checks(&outcome);
    assert_self_test_passed(&outcome.output);
    assert_clean_end(&outcome.output);
    outcome
}

#[test]
fn default_mdts_512_byte_blocks_qd32() {
    let drive = Drive::new("");
    let outcome = run_clean(&drive, "nvme.selftest=qd32");
    let out = &outcome.output;
    assert!(out.contains("nvme       00:01.0 1b36:0010 BAR0 0x8000000000 (16 KiB, 64-bit)"), "{out}");
    // The CAP fields the driver depends on, as QEMU 9 and 10 set them for these options (the raw
    // value also carries bits that differ between versions: docs/qemu.md §3).
    let cap = line_with(out, "nvme         NVMe 1.4.0 (VS), CAP 0x");
    assert!(
        cap.contains("MQES 2047 (2048 entries), DSTRD 0 (4-byte doorbell stride), TO 15 (7500 ms)"),
        "{cap}"
    );
    assert!(cap.contains("MPSMIN 0 (4096 B), MPSMAX 4 (65536 B), CQR 1, CSS 0x"), "{cap}");
    assert!(cap.contains(" (NVM)"), "{cap}");
    assert!(out.contains("model \"QEMU NVMe Ctrl\", serial \"barebench0\""), "{out}");
    assert!(out.contains("MDTS 7 (512 KiB per command), SQES 0x66, CQES 0x44, NN 256"), "{out}");
    // QEMU's NVMe has no host memory buffer (HMPRE 0): the identity line says so.
    assert!(out.contains(", no host memory buffer (HMPRE 0)"), "{out}");
    assert!(out.contains("nvme         the controller asks for no host memory buffer"), "{out}");
    assert!(out.contains("nvme0      namespace 1: 67108864 bytes (0.06 GiB) = NSZE 131072 × 512 B"), "{out}");
    assert!(out.contains("nvme0      LBA size 512 B: format 0 of 8 (512+0"), "{out}");
    assert!(
        out.contains("nvme0      1 I/O queue pair (qid 1) × 1024 entries, polled (IEN 0, PC 1): 1023 requests in flight"),
        "{out}"
    );
    assert!(out.contains("512 KiB per command (1 MiB = 2 commands)"), "{out}");
    let timing = line_with(out, "nvme0: 4 KiB QD1 read ");
    assert!(timing.contains("1 MiB read") && timing.contains("4 KiB QD32 "), "{timing}");
    eprintln!("default mdts, 512 B blocks, aio={}:\n{out}", nvme_aio());
}

#[test]
fn mdts_2_mib_and_32_kib() {
    for (mdts, per_command, commands_per_mib) in
        [(9, "2 MiB", "1 MiB = 1 command)"), (3, "32 KiB", "1 MiB = 32 commands)")]
    {
        let drive = Drive::new(&format!(",mdts={mdts}"));
        let outcome = run_clean(&drive, "nvme.selftest=qd32");
        let out = &outcome.output;
        assert!(out.contains(&format!("MDTS {mdts} ({per_command} per command)")), "{out}");
        assert!(out.contains(&format!("{per_command} per command ({commands_per_mib}")), "{out}");
        eprintln!("mdts={mdts}:\n{}", line_with(out, "nvme0: 4 KiB QD1 read "));
    }
}

#[test]
fn logical_blocks_of_4096_bytes() {
    let drive = Drive::new(",logical_block_size=4096,physical_block_size=4096");
    let outcome = run_clean(&drive, "nvme.selftest=qd32");
    let out = &outcome.output;
    assert!(out.contains("nvme0      namespace 1: 67108864 bytes (0.06 GiB) = NSZE 16384 × 4096 B"), "{out}");
    assert!(out.contains("nvme0      LBA size 4096 B: format 4 of 8 (4096+0"), "{out}");
}

#[test]
fn two_queue_pairs_share_the_reads() {
    let drive = Drive::new("");
    let outcome = run_clean(&drive, "nvme.queues=2 nvme.depth=64 nvme.selftest=qd32");
    let out = &outcome.output;
    assert!(
        out.contains(
            "I/O queue pairs: 2 asked (2 per namespace × 1 namespace), controller allocates 64 SQ / 64 CQ"
        ),
        "{out}"
    );
    assert!(out.contains("nvme0      2 I/O queue pairs (qid 1, 2) × 64 entries, polled (IEN 0, PC 1): 126 requests in flight"), "{out}");
    assert!(out.contains("2 I/O queue pairs deleted"), "{out}");
}

#[test]
fn no_nvme_controller_the_run_goes_on() {
    let run = Run::new(Machine::Virt).append("exit=semihosting jobs=none").go();
    run.assert_status(0);
    assert!(run.output.contains("nvme       no NVMe controller on PCIe (class 01:08:02)"), "{}", run.output);
}

#[test]
fn a_controller_without_namespaces_is_described_and_shut_down() {
    let run = Run::new(Machine::Virt)
        .append("exit=semihosting jobs=none")
        .args(&["-device", "nvme,serial=empty0"])
        .go();
    run.assert_status(0);
    let out = &run.output;
    assert!(out.contains("model \"QEMU NVMe Ctrl\", serial \"empty0\""), "{out}");
    assert!(out.contains("nvme 00:01.0: no usable namespace"), "{out}");
    assert!(out.contains("nvme 00:01.0: shut down (CSTS.SHST complete)"), "{out}");
    assert!(out.contains("storage    no usable devices found"), "{out}");
}

#[test]
fn bad_input_is_named_and_the_run_goes_on() {
    let blocks = IMAGE_BYTES / SECTOR;
    let drive = format!("if=none,id=nv,file={},format=raw,snapshot=on,aio={}", image().display(), nvme_aio());
    let run = Run::new(Machine::Virt)
        .append(&format!(
            "exit=semihosting jobs=none nvme.depth=4096 nvme.queues=zero nvme.selftest=fast nvme.hmb=lots crc=nvme0:{blocks}:1 crc=nvme0:{}:2 crc=nvme0:0:1",
            blocks - 1
        ))
        .args(&["-drive", &drive, "-device", "nvme,drive=nv,serial=barebench0,mqes=63"])
        .go();
    run.assert_status(2);
    let out = &run.output;
    assert!(
        out.contains(
            "nvme 00:01.0: queue depth 4096 is more than the controller allows (CAP.MQES + 1 = 64); using 64"
        ),
        "{out}"
    );
    assert!(
        out.contains("1 I/O queue pair (qid 1) × 64 entries, polled (IEN 0, PC 1): 63 requests in flight"),
        "{out}"
    );
    assert!(
        out.contains("warning: bad driver option nvme.queues=zero: expected a queue pair count from 1 to 64"),
        "{out}"
    );
    assert!(out.contains("warning: bad driver option nvme.selftest=fast: expected qdN"), "{out}");
    assert!(
        out.contains("warning: bad driver option nvme.hmb=lots: expected a host memory buffer limit from 1 to 1024 MiB, or off"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "crc nvme0 {blocks} 1: range is beyond the end of the device ({blocks} blocks); nothing was read"
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("crc nvme0 {} 2: range is beyond the end of the device", blocks - 1)),
        "{out}"
    );
    let good = format!("crc nvme0 0 1 {:#010x}", host_crc(512, 0, 1));
    assert!(out.lines().any(|l| l == good), "the good check still runs: {out}");
    assert_clean_end(out);
}

#[test]
fn two_namespaces_become_nvme0_and_nvme1() {
    let drive = |id: &str| {
        format!("if=none,id={id},file={},format=raw,snapshot=on,aio={}", image().display(), nvme_aio())
    };
    let last_4k = IMAGE_BYTES / 4096 - 16;
    let run = Run::new(Machine::Virt)
        .append(&format!(
            "exit=semihosting jobs=none crc=nvme0:0:2048 verify=nvme1:{last_4k}:16 crc=nvme1:{last_4k}:16"
        ))
        .args(&[
            "-drive",
            &drive("nv1"),
            "-drive",
            &drive("nv2"),
            "-device",
            "nvme,id=nvc,serial=multi0",
            "-device",
            "nvme-ns,drive=nv1,bus=nvc,nsid=1",
            "-device",
            "nvme-ns,drive=nv2,bus=nvc,nsid=2,logical_block_size=4096,physical_block_size=4096",
        ])
        .go();
    run.assert_status(0);
    let out = &run.output;
    assert!(out.contains("I/O queue pairs: 2 asked (1 per namespace × 2 namespaces)"), "{out}");
    assert!(out.contains("nvme0      namespace 1: 67108864 bytes (0.06 GiB) = NSZE 131072 × 512 B"), "{out}");
    assert!(out.contains("nvme1      namespace 2: 67108864 bytes (0.06 GiB) = NSZE 16384 × 4096 B"), "{out}");
    assert!(out.contains("nvme1      1 I/O queue pair (qid 2)"), "{out}");
    let first = format!("crc nvme0 0 2048 {:#010x}", host_crc(512, 0, 2048));
    let second = format!("crc nvme1 {last_4k} 16 {:#010x}", host_crc(4096, last_4k, 16));
    assert!(out.lines().any(|l| l == first) && out.lines().any(|l| l == second), "{out}");
    assert!(out.contains(&format!("verify nvme1 {last_4k} 16 ok")), "{out}");
    assert!(
        out.contains("nvme 00:01.0: shut down (CSTS.SHST complete)")
            && out.contains("2 I/O queue pairs deleted"),
        "{out}"
    );
}
