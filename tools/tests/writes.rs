//! End-to-end: write and mixed jobs on QEMU virt's NVMe drive, inside a marked scratch region,
//! proven from the image file. The image (a copy, written in place) holds an MBR with four
//! partitions: 1 a valid region, 2 type 0xDA without a marker, 3 a marker with a bad CRC, 4 a
//! marker whose length runs past its partition. After write, randwrite, rw and randrw with
//! flushes, verified: every byte outside partition 1's writable part is what it was, the
//! refusals were printed, and verification found no mismatch. Also the refusal without
//! `write=`.
#![cfg(feature = "e2e")]

mod qemu_harness;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use blockdev::scratch::Marker;
use qemu_harness::{repository_root, scratch_dir};

const MIB: u64 = 1 << 20;
const IMAGE_BYTES: u64 = 64 * MIB;
/// Partition 1: 16 MiB at 1 MiB, a valid region of all of it (writable from 2 MiB).
const REGION: (u64, u64) = (MIB, 16 * MIB);

/// The test image: pattern bytes everywhere but the MBR and the markers.
fn build_image(path: &Path) -> Vec<u8> {
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
    put(&mut bytes, REGION.0, Marker { length_bytes: REGION.1, region_id: 0xB0B }.encode());
    let mut bad_crc = Marker { length_bytes: 4 * MIB, region_id: 3 }.encode();
    bad_crc[41] ^= 0x10;
    put(&mut bytes, 40960 * 512, bad_crc);
    put(&mut bytes, 49152 * 512, Marker { length_bytes: 5 * MIB, region_id: 4 }.encode());
    fs::write(path, &bytes).unwrap();
    bytes
}

/// `barebench qemu` on virt with the image as a writable NVMe drive; returns (status, console,
/// the image after the run).
fn run(name: &str, settings: &str) -> (Vec<u8>, Option<i32>, String, Vec<u8>) {
    let dir = scratch_dir().join(format!("writes-{name}-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let source: PathBuf = dir.join("source.img");
    let before = build_image(&source);
    let log = dir.join("console.log");
    let output = Command::new(env!("CARGO_BIN_EXE_barebench"))
        .current_dir(repository_root())
        .args(["qemu", "--machine", "virt", "--timeout", "900", "--workdir"])
        .arg(&dir)
        .arg("--log")
        .arg(&log)
        .arg("--nvme")
        .arg(format!("64M:{},writable", source.display()))
        .arg("--")
        .args(settings.split_whitespace())
        .output()
        .unwrap();
    let console = fs::read_to_string(&log).unwrap_or_default();
    let after = fs::read(dir.join("disk-nvme-64MiB-file-writable.img")).unwrap();
    let _ = fs::remove_dir_all(&dir);
    (before, output.status.code(), console, after)
}

fn changed_outside(before: &[u8], after: &[u8], (start, end): (u64, u64)) -> Vec<usize> {
    (0..before.len())
        .filter(|&i| before[i] != after[i] && !(start as usize..end as usize).contains(&i))
        .collect()
}

#[test]
fn every_write_operation_stays_in_the_region_and_verifies() {
    let settings =
        "write=nvme0 jobs=write:64k:4,randwrite:4k:16:flush=32,rw:16k:2,randrw:4k:8:mix=75:flush=16 \
                    ramp=100ms runtime=400ms runs=1 progress=off nvme.measure=off";
    let (before, status, console, after) = run("all", settings);
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
    // One line per run on the console (the JSON notes repeat them, inside quotes).
    assert_eq!(console.lines().filter(|line| line.starts_with("nvme0: verify: ")).count(), 4, "{console}");
    assert!(!console.contains("verify FAILED"), "{console}");
    assert!(console.contains("flushes/s"), "{console}");
    assert!(console.contains("randrw read") && console.contains("randrw write"), "{console}");
}

#[test]
fn without_write_nothing_is_written_and_the_read_jobs_run() {
    let settings =
        "jobs=randwrite:4k:4,randread:4k:4 ramp=50ms runtime=200ms runs=1 progress=off nvme.measure=off";
    let (before, status, console, after) = run("refused", settings);
    assert_eq!(status, Some(0), "{console}");
    assert!(before == after, "the image changed");
    assert!(console.contains("job randwrite:4k:4 skipped on nvme0: write= does not name it"), "{console}");
    assert!(console.contains("results for randread:4k:4"), "{console}");
}
