//! `barebench scratch PATH --partition N` on image files: it shows what it will write, refuses
//! without a terminal unless `--yes`, refuses a partition with a file system unless `--force`,
//! and writes nothing but the 512-byte marker.
#![forbid(unsafe_code)]

use std::fs::{self, File};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use tools::scratch::{add_scratch_partition, scan_file};

const MIB: u64 = 1 << 20;

fn barebench(args: &[&str], image: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_barebench"))
        .arg("scratch")
        .arg(image)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A 16 MiB image with a 0xDA partition at 2 MiB (4 MiB) whose marker has been wiped.
fn unmarked_image(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("disk.img");
    File::create(&path).unwrap().set_len(16 * MIB).unwrap();
    add_scratch_partition(&path, 2 * MIB, 4 * MIB, 1).unwrap();
    let mut bytes = fs::read(&path).unwrap();
    bytes[2 * MIB as usize..2 * MIB as usize + 512].fill(0);
    fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn marking_asks_first_and_writes_only_the_marker() {
    let dir = tempfile::tempdir().unwrap();
    let path = unmarked_image(dir.path());
    let before = fs::read(&path).unwrap();

    let refused = barebench(&["--partition", "1"], &path);
    assert!(!refused.status.success());
    let stdout = String::from_utf8_lossy(&refused.stdout);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stdout.contains("partition 1 (MBR, type 0xda) from byte 2097152, 4 MiB"), "{stdout}");
    assert!(stdout.contains("will write: a 512-byte BAREBENCHSCRATCH marker"), "{stdout}");
    assert!(stderr.contains("add --yes"), "{stderr}");
    assert_eq!(fs::read(&path).unwrap(), before, "nothing written without confirmation");

    let marked = barebench(&["--partition", "1", "--yes"], &path);
    assert!(marked.status.success(), "{}", String::from_utf8_lossy(&marked.stderr));
    let after = fs::read(&path).unwrap();
    let changed: Vec<usize> = (0..after.len()).filter(|&i| after[i] != before[i]).collect();
    let marker = 2 * MIB as usize..2 * MIB as usize + 512;
    assert!(!changed.is_empty() && changed.iter().all(|i| marker.contains(i)), "{changed:?}");
    assert_eq!(scan_file(&path).unwrap().len(), 1);
}

#[test]
fn a_filesystem_or_a_missing_partition_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = unmarked_image(dir.path());
    let mut bytes = fs::read(&path).unwrap();
    bytes[2 * MIB as usize + 82..2 * MIB as usize + 90].copy_from_slice(b"FAT32   ");
    fs::write(&path, &bytes).unwrap();
    let refused = barebench(&["--partition", "1", "--yes"], &path);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("holds a FAT32 file system"));
    assert_eq!(fs::read(&path).unwrap(), bytes);
    let forced = barebench(&["--partition", "1", "--yes", "--force"], &path);
    assert!(forced.status.success(), "{}", String::from_utf8_lossy(&forced.stderr));

    let missing = barebench(&["--partition", "3", "--yes"], &path);
    assert!(String::from_utf8_lossy(&missing.stderr).contains("has no partition 3"));
}
