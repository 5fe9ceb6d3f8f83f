//! End-to-end: write and mixed jobs on QEMU virt's NVMe drive and SD card (sdhci-pci) and on
//! raspi4b's EMMC2 card, inside a marked scratch region, proven from the image file. The image
//! (a copy, written in place) holds an MBR with four partitions: 1 a valid region, 2 type 0xDA
//! without a marker, 3 a marker with a bad CRC, 4 a marker whose length runs past its partition. After write, randwrite, rw and randrw with
//! flushes, verified: every byte outside partition 1's writable part is what it was, the
//! refusals were printed, and verification found no mismatch. Also the refusal without
//! `write=` and on a card without a region, and a sustained write (`jobs=sustained`) held to the
//! same region.
#![cfg(feature = "e2e")]
#![forbid(unsafe_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::qemu_harness::{repository_root, scratch_dir};
use blockdev::marker::Marker;

const MIB: u64 = 1 << 20;
const IMAGE_BYTES: u64 = 64 * MIB;
/// Partition 1: 16 MiB at 1 MiB, a valid region of all of it (writable from 2 MiB).
const REGION: (u64, u64) = (MIB, 16 * MIB);

/// The test image: pattern bytes everywhere but the MBR and the markers; without `with_region`
/// partition 1 is an ordinary 0xDA partition without a marker, so the disk has no region at all.
fn build_image(path: &Path, with_region: bool) -> Vec<u8> {
    let mut bytes = vec![0u8; IMAGE_BYTES as usize];
    let mut sector = [0u8; 512];
    for (index, chunk) in bytes.chunks_mut(512).enumerate() {
        blockdev::pattern::fill_sector(index as u64, &mut sector);
        chunk.copy_from_slice(&sector);
    }
    let mut mbr = [0u8; 512];
    // (type, first LBA, sectors): 1 good, 2 no marker, 3 bad CRC, 4 length past the end.
    let partitions =
        [(0xDA, 2048u32, 32768u32), (0xDA, 36864, 4096), (0xDA, 40960, 8192), (0x83, 49152, 8192)];
    for (index, (kind, first, count)) in partitions.iter().enumerate() {
        let at = 446 + 16 * index;
        mbr[at + 4] = *kind;
        mbr[at + 8..at + 12].copy_from_slice(&first.to_le_bytes());
        mbr[at + 12..at + 16].copy_from_slice(&count.to_le_bytes());
    }
    mbr[510..].copy_from_slice(&[0x55, 0xAA]);
    bytes[..512].copy_from_slice(&mbr);
    let put = |bytes: &mut Vec<u8>, offset: u64, marker: [u8; 512]| {
        bytes[offset as usize..offset as usize + 512].copy_from_slice(&marker)
    };
    if with_region {
        put(&mut bytes, REGION.0, Marker::scratch(REGION.1, 0xB0B).encode());
    }
    let mut bad_crc = Marker::scratch(4 * MIB, 3).encode();
    bad_crc[41] ^= 0x10;
    put(&mut bytes, 40960 * 512, bad_crc);
    put(&mut bytes, 49152 * 512, Marker::scratch(5 * MIB, 4).encode());
    fs::write(path, &bytes).unwrap();
    bytes
}

/// Where the test image goes: the machine, `barebench qemu`'s option and the image file it
/// writes in place.
#[derive(Clone, Copy)]
struct Target {
    machine: &'static str,
    option: &'static str,
    device: &'static str,
    image: &'static str,
}

const VIRT_NVME: Target =
    Target { machine: "virt", option: "--nvme", device: "nvme0", image: "disk-nvme-64MiB-file-writable.img" };
const VIRT_SD: Target =
    Target { machine: "virt", option: "--sd", device: "sd0", image: "disk-sd-64MiB-file-writable.img" };
const RASPI4B_EMMC2: Target = Target {
    machine: "raspi4b",
    option: "--emmc2",
    device: "sd0",
    image: "disk-emmc2-64MiB-file-writable.img",
};

/// `barebench qemu` with the image as a writable disk of `target`; returns (the image before,
/// status, console, the image after the run).
fn run(name: &str, target: Target, settings: &str) -> (Vec<u8>, Option<i32>, String, Vec<u8>) {
    run_on(name, target, true, settings)
}

fn run_on(
    name: &str,
    target: Target,
    with_region: bool,
    settings: &str,
) -> (Vec<u8>, Option<i32>, String, Vec<u8>) {
    let dir = scratch_dir().join(format!("writes-{name}-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let source: PathBuf = dir.join("source.img");
    let before = build_image(&source, with_region);
    let log = dir.join("console.log");
    let output = Command::new(env!("CARGO_BIN_EXE_barebench"))
        .current_dir(repository_root())
        .args(["qemu", "--machine", target.machine, "--timeout", "900", "--workdir"])
        .arg(&dir)
        .arg("--log")
        .arg(&log)
        .arg(target.option)
        .arg(format!("64M:{},writable", source.display()))
        .arg("--")
        .args(settings.split_whitespace())
        .output()
        .unwrap();
    let console = fs::read_to_string(&log).unwrap_or_default();
    let after = fs::read(dir.join(target.image)).unwrap();
    let _ = fs::remove_dir_all(&dir);
    (before, output.status.code(), console, after)
}

fn changed_outside(before: &[u8], after: &[u8], (start, end): (u64, u64)) -> Vec<usize> {
    (0..before.len())
        .filter(|&i| before[i] != after[i] && !(start as usize..end as usize).contains(&i))
        .collect()
}

/// Every write and mixed operation with flushes on `target`, then the proof from the image.
fn every_write_operation_stays_in_the_region_and_verifies(name: &str, target: Target) -> String {
    let device = target.device;
    let settings = format!(
        "write={device} jobs=write:64k:4,randwrite:4k:16:flush=32,rw:16k:2,randrw:4k:8:mix=75:flush=16 \
         ramp=100ms runtime=400ms runs=1 progress=off nvme.measure=off"
    );
    let (before, status, console, after) = run(name, target, &settings);
    assert_eq!(status, Some(0), "{console}");
    let writable = (REGION.0 + MIB, REGION.0 + REGION.1);
    let outside = changed_outside(&before, &after, writable);
    assert!(
        outside.is_empty(),
        "{} bytes changed outside the writable part, first at {}",
        outside.len(),
        outside[0]
    );
    assert_ne!(
        before[writable.0 as usize..writable.1 as usize],
        after[writable.0 as usize..writable.1 as usize]
    );
    for refused in [
        "partition 2 (MBR, type 0xda): not a scratch region: type 0xda but no BAREBENCHSCRATCH marker",
        "partition 3 (MBR, type 0xda): not a scratch region: marker CRC-32",
        "partition 4 (MBR, type 0x83): not a scratch region: marker length 5242880 bytes runs past",
    ] {
        assert!(console.contains(refused), "missing {refused:?} in\n{console}");
    }
    assert!(
        console.contains("partition 1 (MBR, type 0xda): scratch region id 0x0000000000000b0b"),
        "{console}"
    );
    // One line per run on the console (the JSON notes repeat them, inside quotes), each
    // without a mismatch.
    let verify_prefix = format!("{device}: verify: ");
    let verify_lines: Vec<&str> = console.lines().filter(|line| line.starts_with(&verify_prefix)).collect();
    assert_eq!(verify_lines.len(), 4, "{console}");
    assert!(verify_lines.iter().all(|line| line.ends_with(": all as written")), "{verify_lines:?}");
    assert!(!console.contains("verify FAILED"), "{console}");
    assert!(console.contains("flushes/s"), "{console}");
    assert!(console.contains("randrw read") && console.contains("randrw write"), "{console}");
    console
}

#[test]
fn virt_nvme_writes_stay_in_the_region_and_verify() {
    let console = every_write_operation_stays_in_the_region_and_verifies("nvme", VIRT_NVME);
    assert!(!console.contains("no cache to flush"), "{console}");
}

/// QEMU's card lists no extension registers: the flushes are counted, none is sent.
const SD_FLUSHES_COUNTED: &str = "counted, none sent: the card has no extension registers (SCR CMD48/49 bit \
     clear), so there is no cache to flush";

#[test]
fn virt_sd_writes_stay_in_the_region_and_verify() {
    let console = every_write_operation_stays_in_the_region_and_verifies("virt-sd", VIRT_SD);
    // QEMU's card lists no extension registers: the flushes are counted, none is sent.
    assert!(console.contains(SD_FLUSHES_COUNTED), "{console}");
}

#[test]
fn raspi4b_emmc2_writes_stay_in_the_region_and_verify() {
    let console = every_write_operation_stays_in_the_region_and_verifies("raspi4b", RASPI4B_EMMC2);
    assert!(console.contains(SD_FLUSHES_COUNTED), "{console}");
}

/// `jobs=sustained` writes the region end to end for `runtime=`, again and again, and reads it
/// back: nothing outside it changes, the whole of it does, and it verifies. `size=2m` keeps the
/// region small enough to be written whole within a 300 ms run even on a slow host.
#[test]
fn virt_nvme_sustained_writes_stay_in_the_region_and_verify() {
    let settings = "write=nvme0 jobs=sustained:256k:4 runtime=300ms size=2m progress=off nvme.measure=off";
    let (before, status, console, after) = run("sustained", VIRT_NVME, settings);
    assert_eq!(status, Some(0), "{console}");
    let written = (REGION.0 + MIB, REGION.0 + 3 * MIB);
    let outside = changed_outside(&before, &after, written);
    assert!(outside.is_empty(), "{} bytes changed outside the 2 MiB written", outside.len());
    // Every 256 KiB block of it was written at least once.
    for block in (written.0..written.1).step_by(256 << 10) {
        let range = block as usize..block as usize + 512;
        assert_ne!(before[range.clone()], after[range], "block at {block} never written");
    }
    assert!(
        console.contains("sustained writes on nvme0: region 2 MiB at 2 MiB (the scratch region)"),
        "{console}"
    );
    let summary = console
        .lines()
        .find(|l| l.starts_with("nvme0    sustained: "))
        .unwrap_or_else(|| panic!("{console}"));
    println!("QEMU virt NVMe, emulator figures: {summary}");
    assert!(console.contains("nvme0    cache cliff"), "{console}");
    let verify =
        console.lines().find(|l| l.starts_with("nvme0: verify: ")).unwrap_or_else(|| panic!("{console}"));
    assert!(
        verify.starts_with("nvme0: verify: 8 blocks of 256k read back") && verify.ends_with("all as written"),
        "{verify}"
    );
    assert!(console.contains("\"barebench sustained\" : ["), "{console}");
}

#[test]
fn without_write_nothing_is_written_and_the_read_jobs_run() {
    let settings =
        "jobs=randwrite:4k:4,randread:4k:4 ramp=50ms runtime=200ms runs=1 progress=off nvme.measure=off";
    let (before, status, console, after) = run("refused", VIRT_NVME, settings);
    assert_eq!(status, Some(0), "{console}");
    assert!(before == after, "the image changed");
    assert!(console.contains("job randwrite:4k:4 skipped on nvme0: write= does not name it"), "{console}");
    assert!(console.contains("results for randread:4k:4"), "{console}");
}

#[test]
fn a_card_without_a_region_is_not_written_and_says_why() {
    let settings = "write=sd0 jobs=randwrite:4k:1,randread:4k:1 ramp=50ms runtime=200ms runs=1 progress=off";
    let (before, status, console, after) = run_on("no-region", VIRT_SD, false, settings);
    assert_eq!(status, Some(0), "{console}");
    assert!(before == after, "the image changed");
    assert!(
        console.contains("sd0        no scratch region (no MBR or GPT partition starts with a valid"),
        "{console}"
    );
    assert!(
        console.contains("job randwrite:4k:1 skipped on sd0: it has no valid scratch region"),
        "{console}"
    );
    assert!(console.contains("results for randread:4k:1"), "{console}");
}
