//! End-to-end: `check=` on QEMU. Disks made as `barebench qemu` makes `SIZE:pattern-partition`
//! (an MBR and a marked pattern partition, `blockdev::pattern_region`); the kernel finds the
//! region, reads inside it, and `check=1` finds exactly the bytes a test flipped in a copy of the
//! image (their LBAs and offsets), with exit status 2. A clean disk under `preset=quick` is
//! checked by default (`check=auto`) and passes. Virt NVMe, virt SD (sdhci-pci) and raspi4b EMMC2.
#![forbid(unsafe_code)]
#![cfg(feature = "e2e")]

use std::collections::BTreeSet;
use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::time::Duration;

use crate::qemu_harness::{nvme_aio, scratch_dir, Machine, Outcome, Run};
use tools::disk::{DiskContent, DiskSpec};

const MIB: u64 = 1 << 20;
/// The disks: 64 MiB (a power of two, as QEMU's SD card needs), the pattern partition from
/// 1 MiB, so the benchmark reads from 2 MiB on.
const DISK_BYTES: u64 = 64 * MIB;
const REGION_START: u64 = 2 * MIB;
/// One sequential 4 KiB job at QD1 over 16 blocks of the region: every block is read, in order.
const SETTINGS: &str =
    "exit=semihosting progress=off jobs=read:4k:1 runs=1 ramp=0 runtime=300ms offset=0 size=64k check=1";

/// A pattern-partition disk image, deleted when dropped.
struct Disk {
    path: PathBuf,
}

impl Disk {
    /// A fresh pattern-partition disk with one bit pattern flipped (xor 0xff) at each byte of
    /// `corrupt`.
    fn new(stem: &str, corrupt: &[u64]) -> Disk {
        let path = scratch_dir().join(format!("{stem}-{}.img", std::process::id()));
        let _ = std::fs::remove_file(path.with_extension("spec"));
        let spec: DiskSpec = format!("{DISK_BYTES}:pattern-partition").parse().unwrap();
        assert_eq!(spec.content, DiskContent::PatternPartition);
        spec.create_image(&path, |_, _| {}).unwrap();
        let _ = std::fs::remove_file(path.with_extension("spec"));
        let mut file = OpenOptions::new().read(true).write(true).open(&path).unwrap();
        for &byte in corrupt {
            let mut value = [0u8; 1];
            file.seek(SeekFrom::Start(byte)).unwrap();
            file.read_exact(&mut value).unwrap();
            file.seek(SeekFrom::Start(byte)).unwrap();
            file.write_all(&[value[0] ^ 0xff]).unwrap();
        }
        Disk { path }
    }

    fn drive(&self, id: &str) -> String {
        format!("if=none,id={id},file={},format=raw,snapshot=on", self.path.display())
    }
}

impl Drop for Disk {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Three bytes in three different blocks of the region read by [`SETTINGS`].
fn corruptions(salt: u64) -> Vec<u64> {
    vec![
        REGION_START + 2 * 4096 + 17 + salt,
        REGION_START + 7 * 4096 + 4000 - salt,
        REGION_START + 12 * 4096 + 512 + salt,
    ]
}

/// (LBA, byte offset in the read, device byte) of every `DEV: MISMATCH:` line.
fn mismatches(output: &str, device: &str) -> Vec<(u64, u64, u64)> {
    let prefix = format!("{device}: MISMATCH: read at LBA ");
    output
        .lines()
        .filter_map(|line| line.strip_prefix(&prefix))
        .map(|rest| {
            let numbers: Vec<u64> = rest
                .split(|c: char| !c.is_ascii_digit())
                .filter(|word| !word.is_empty())
                .map(|word| word.parse().unwrap())
                .collect();
            // LBA, blocks, byte offset, device byte.
            (numbers[0], numbers[2], numbers[3])
        })
        .collect()
}

/// Checks that `device` found exactly `corrupt`: the first mismatches name each flipped byte
/// once, in the order the sequential job reads them, with the read's LBA and the offset in it.
fn assert_found_exactly(output: &str, device: &str, corrupt: &[u64]) {
    let found = mismatches(output, device);
    assert_eq!(found.len(), 4, "{device}: the first four mismatches are printed\n{output}");
    for (index, &byte) in corrupt.iter().enumerate() {
        let block_start = byte / 4096 * 4096;
        assert_eq!(found[index], (block_start / 512, byte - block_start, byte), "{device}\n{output}");
    }
    let distinct: BTreeSet<u64> = found.iter().map(|&(_, _, byte)| byte).collect();
    assert_eq!(distinct, corrupt.iter().copied().collect(), "{device}: nothing else\n{output}");
    let summary = output
        .lines()
        .find(|line| line.starts_with(&format!("check: {device} ")))
        .unwrap_or_else(|| panic!("{device}: no check summary\n{output}"));
    assert!(summary.ends_with("MISMATCHES FOUND"), "{summary}");
}

fn check_line<'a>(output: &'a str, device: &str) -> &'a str {
    let prefix = format!("{device:<8} check: ");
    output.lines().find(|line| line.starts_with(&prefix)).unwrap_or_else(|| panic!("no {prefix}\n{output}"))
}

fn virt_run(nvme: &Disk, sd: &Disk, settings: &str) -> Outcome {
    Run::new(Machine::Virt)
        .append(settings)
        .args(&["-drive", &format!("{},aio={}", nvme.drive("nv"), nvme_aio())])
        .args(&["-device", "nvme,drive=nv,serial=barebench0"])
        .args(&["-drive", &sd.drive("sdc")])
        .args(&["-device", "sdhci-pci,sd-spec-version=3", "-device", "sd-card,drive=sdc"])
        .timeout(Duration::from_secs(300))
        .go()
}

#[test]
fn virt_nvme_and_sd_check_1_finds_exactly_the_flipped_bytes() {
    let (nvme_bytes, sd_bytes) = (corruptions(0), corruptions(3));
    let nvme = Disk::new("check-nvme-corrupt", &nvme_bytes);
    let sd = Disk::new("check-sd-corrupt", &sd_bytes);
    let run = virt_run(&nvme, &sd, SETTINGS);
    run.assert_status(2);
    let out = &run.output;
    for device in ["nvme0", "sd0"] {
        assert!(
            out.contains(&format!(
                "{device:<10} pattern region in partition 1: 65011712 bytes from byte 2097152 (marker at byte \
                 1048576): the benchmark reads inside it"
            )),
            "{out}"
        );
    }
    assert_found_exactly(out, "nvme0", &nvme_bytes);
    assert_found_exactly(out, "sd0", &sd_bytes);
    eprintln!("virt: {}\nvirt: {}", check_line(out, "nvme0"), check_line(out, "sd0"));
}

#[test]
fn virt_clean_disks_are_checked_by_default_under_preset_quick_and_pass() {
    let nvme = Disk::new("check-nvme-clean", &[]);
    let sd = Disk::new("check-sd-clean", &[]);
    let settings =
        "exit=semihosting progress=off preset=quick jobs=randread:4k:1 runs=1 ramp=0 runtime=500ms";
    let run = virt_run(&nvme, &sd, settings);
    run.assert_status(0);
    let out = &run.output;
    for device in ["nvme0", "sd0"] {
        let line = check_line(out, device);
        assert!(line.contains("(every 64th), 0 mismatches"), "{line}");
        assert!(out.contains(&format!("check: {device} 0 mismatches in ")), "{out}");
        eprintln!("virt check=auto: {line}");
    }
}

#[test]
fn raspi4b_emmc2_check_1_finds_exactly_the_flipped_bytes() {
    let bytes = corruptions(5);
    let card = Disk::new("check-emmc2-corrupt", &bytes);
    let run = Run::new(Machine::Raspi4b)
        .append(SETTINGS)
        .args(&["-drive", &card.drive("e2")])
        .args(&["-device", "sd-card,drive=e2,bus=/generic-sdhci/sd-bus"])
        .timeout(Duration::from_secs(300))
        .go();
    run.assert_status(2);
    assert_found_exactly(&run.output, "sd0", &bytes);
    eprintln!("raspi4b: {}", check_line(&run.output, "sd0"));
}
