//! End-to-end: `barebench image` builds an image that fsck.fat and mtools accept and that holds
//! every expected file with the expected bytes; `--write` to a plain file and a loop device.
#![cfg(feature = "e2e")]
#![forbid(unsafe_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const PARTITION_OFFSET: u64 = 8192 * 512;

fn barebench(args: &[&str], cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_barebench")).args(args).current_dir(cwd).output().expect("run barebench")
}

fn text(output: &Output) -> String {
    format!(
        "status {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Fake firmware as the firmware repository's boot/ lays it out, with distinct contents.
fn fake_firmware(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for name in [
        "bootcode.bin",
        "start.elf",
        "fixup.dat",
        "start4.elf",
        "fixup4.dat",
        "bcm2710-rpi-3-b.dtb",
        "bcm2711-rpi-4-b.dtb",
        "bcm2712-rpi-5-b.dtb",
        "LICENCE.broadcom",
        "COPYING.linux",
    ] {
        let bytes: Vec<u8> = format!("fake {name} ").bytes().cycle().take(3000 + name.len() * 97).collect();
        fs::write(dir.join(name), &bytes).unwrap();
        files.push((name.to_string(), bytes));
    }
    fs::create_dir_all(dir.join("overlays")).unwrap();
    fs::write(dir.join("overlays/disable-bt.dtbo"), b"fake overlay").unwrap();
    files.push(("overlays/disable-bt.dtbo".to_string(), b"fake overlay".to_vec()));
    files
}

fn fsck_partition(image: &Path) {
    let bytes = fs::read(image).unwrap();
    let partition = image.with_extension("part");
    fs::write(&partition, &bytes[PARTITION_OFFSET as usize..]).unwrap();
    let output =
        Command::new("fsck.fat").arg("-n").arg(&partition).output().expect("fsck.fat (dosfstools) installed");
    assert!(output.status.success(), "fsck.fat -n: {}", text(&output));
    fs::remove_file(partition).unwrap();
}

fn mtools_file(image: &Path, name: &str) -> Vec<u8> {
    let output = Command::new("mtype")
        .arg("-i")
        .arg(format!("{}@@{PARTITION_OFFSET}", image.display()))
        .arg(format!("::{name}"))
        .env("MTOOLS_SKIP_CHECK", "1")
        .output()
        .expect("mtype (mtools) installed");
    assert!(output.status.success(), "mtype {name}: {}", text(&output));
    output.stdout
}

fn mdir_listing(image: &Path, dir: &str) -> String {
    let output = Command::new("mdir")
        .arg("-b")
        .arg("-i")
        .arg(format!("{}@@{PARTITION_OFFSET}", image.display()))
        .arg(format!("::{dir}"))
        .output()
        .expect("mdir (mtools) installed");
    assert!(output.status.success(), "mdir: {}", text(&output));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn kernel(dir: &Path) -> (PathBuf, Vec<u8>) {
    let bytes: Vec<u8> = (0..70_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let path = dir.join("kernel8.img");
    fs::write(&path, &bytes).unwrap();
    (path, bytes)
}

/// A stand-in 32-bit kernel beside the 64-bit one.
fn kernel32(dir: &Path) -> (PathBuf, Vec<u8>) {
    let bytes: Vec<u8> = (0..50_000u32).map(|i| (i * 11 % 253) as u8).collect();
    let path = dir.join("kernel.img");
    fs::write(&path, &bytes).unwrap();
    (path, bytes)
}

/// Fake firmware and a kernel in `work`, and `barebench image` with `--write target` plus
/// `extra` arguments, run there: the set-up every `--write` test shares.
fn write_image(work: &Path, target: &str, extra: &[&str]) -> Output {
    let firmware_dir = work.join("boot");
    fs::create_dir_all(&firmware_dir).unwrap();
    fake_firmware(&firmware_dir);
    let (kernel_path, _) = kernel(work);
    let (kernel32_path, _) = kernel32(work);
    let mut args = vec![
        "image",
        "-o",
        "card.img",
        "--kernel",
        kernel_path.to_str().unwrap(),
        "--kernel32",
        kernel32_path.to_str().unwrap(),
        "--firmware",
        firmware_dir.to_str().unwrap(),
        "--size",
        "64M",
        "--write",
        target,
    ];
    args.extend_from_slice(extra);
    barebench(&args, work)
}

#[test]
fn image_from_a_firmware_directory_passes_fsck_and_mtools() {
    let work = tempfile::tempdir().unwrap();
    let firmware_dir = work.path().join("boot");
    fs::create_dir_all(&firmware_dir).unwrap();
    let firmware = fake_firmware(&firmware_dir);
    let (kernel_path, kernel_bytes) = kernel(work.path());
    let (kernel32_path, kernel32_bytes) = kernel32(work.path());
    let image = work.path().join("card.img");
    let output = barebench(
        &[
            "image",
            "-o",
            image.to_str().unwrap(),
            "--kernel",
            kernel_path.to_str().unwrap(),
            "--kernel32",
            kernel32_path.to_str().unwrap(),
            "--firmware",
            firmware_dir.to_str().unwrap(),
            "--size",
            "100M",
            "--",
            "preset=quick",
            "devices=sd0",
        ],
        work.path(),
    );
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(fs::metadata(&image).unwrap().len(), 128 << 20, "rounded up to a power of two");
    fsck_partition(&image);

    let root = mdir_listing(&image, "/");
    for name in [
        "bootcode.bin",
        "config.txt",
        "cmdline.txt",
        "kernel8.img",
        "kernel_2712.img",
        "kernel.img",
        "kernel7.img",
        "bcm2712-rpi-5-b.dtb",
    ] {
        assert!(root.contains(name), "{name} missing from {root}");
    }
    for (name, bytes) in &firmware {
        assert_eq!(&mtools_file(&image, name), bytes, "{name}");
    }
    assert_eq!(mtools_file(&image, "kernel8.img"), kernel_bytes);
    assert_eq!(mtools_file(&image, "kernel_2712.img"), kernel_bytes);
    assert_eq!(mtools_file(&image, "kernel.img"), kernel32_bytes);
    assert_eq!(mtools_file(&image, "kernel7.img"), kernel32_bytes);
    assert_eq!(mtools_file(&image, "cmdline.txt"), b"preset=quick devices=sd0\n");
    let config = String::from_utf8(mtools_file(&image, "config.txt")).unwrap();
    assert!(config.contains("dtoverlay=disable-bt"), "the overlay is on the card: {config}");
    assert!(config.contains("kernel_address=0x80000"));
    assert!(
        config.contains("[pi2]\n# Pi 2 B\nkernel=kernel7.img\narm_64bit=0\nkernel_address=0x8000\n"),
        "{config}"
    );
    assert!(config.contains("os_check=0"));
}

#[test]
fn missing_kernel_tells_to_run_make() {
    let work = tempfile::tempdir().unwrap();
    let firmware_dir = work.path().join("boot");
    fs::create_dir_all(&firmware_dir).unwrap();
    fake_firmware(&firmware_dir);
    let output =
        barebench(&["image", "-o", "x.img", "--firmware", firmware_dir.to_str().unwrap()], work.path());
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("build/kernel8.img") && stderr.contains("run `make`"), "{stderr}");
}

#[test]
fn image_from_debian_packages_holds_firmware_dtbs_and_licences() {
    // Uses the download cache ($XDG_CACHE_HOME/barebench or ~/.cache/barebench); the first run
    // downloads raspi-firmware (4.8 MB) and the 6.12 arm64 kernel package (93 MB).
    let work = tempfile::tempdir().unwrap();
    let (kernel_path, _) = kernel(work.path());
    let (kernel32_path, _) = kernel32(work.path());
    let image = work.path().join("card.img");
    let output = barebench(
        &[
            "image",
            "-o",
            image.to_str().unwrap(),
            "--kernel",
            kernel_path.to_str().unwrap(),
            "--kernel32",
            kernel32_path.to_str().unwrap(),
            "--cmdline",
            "runs=1",
        ],
        work.path(),
    );
    assert!(output.status.success(), "{}", text(&output));
    assert_eq!(fs::metadata(&image).unwrap().len(), 256 << 20);
    fsck_partition(&image);
    let root = mdir_listing(&image, "/");
    for name in [
        "bootcode.bin",
        "start.elf",
        "fixup.dat",
        "start4.elf",
        "fixup4.dat",
        "bcm2837-rpi-3-b.dtb",
        "bcm2711-rpi-4-b.dtb",
        "bcm2712-rpi-5-b.dtb",
        "LICENCE.broadcom",
        "COPYING.linux",
    ] {
        assert!(root.contains(name), "{name} missing from {root}");
    }
    // Firmware blobs are ELF files / binaries of plausible size; the DTBs are flattened trees.
    assert_eq!(&mtools_file(&image, "start4.elf")[..4], b"\x7fELF");
    assert_eq!(&mtools_file(&image, "bcm2712-rpi-5-b.dtb")[..4], &[0xd0, 0x0d, 0xfe, 0xed]);
    let licence = String::from_utf8(mtools_file(&image, "LICENCE.broadcom")).unwrap();
    assert!(licence.contains("Broadcom Corporation") && licence.contains("DISCLAIMER"), "{licence}");
    let config = String::from_utf8(mtools_file(&image, "config.txt")).unwrap();
    assert!(config.contains("upstream_kernel=1"));
    assert!(!config.contains("dtoverlay=disable-bt"));
    assert_eq!(mtools_file(&image, "cmdline.txt"), b"runs=1\n");
}

#[test]
fn write_to_a_plain_file_copies_and_verifies() {
    let work = tempfile::tempdir().unwrap();
    let target = work.path().join("card-copy.bin");
    fs::write(&target, b"old contents").unwrap();
    let output = write_image(work.path(), target.to_str().unwrap(), &["--yes"]);
    assert!(output.status.success(), "{}", text(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("written and verified"));
    assert!(fs::read(&target).unwrap() == fs::read(work.path().join("card.img")).unwrap());
}

#[test]
fn write_without_yes_and_without_a_terminal_is_refused() {
    let work = tempfile::tempdir().unwrap();
    let target = work.path().join("target.bin");
    fs::write(&target, b"keep me").unwrap();
    let output = write_image(work.path(), target.to_str().unwrap(), &[]);
    assert!(!output.status.success(), "{}", text(&output));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--yes"));
    assert_eq!(fs::read(&target).unwrap(), b"keep me");
}

/// `losetup` (util-linux; Debian package `mount`, which `make deps` installs): from the PATH, or
/// from the sbin directories that are not on an ordinary user's PATH.
fn losetup() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).map(|dir| dir.join("losetup")).collect::<Vec<_>>())
        .unwrap_or_default();
    on_path
        .into_iter()
        .chain(["/usr/sbin/losetup", "/sbin/losetup"].map(PathBuf::from))
        .find(|candidate| candidate.is_file())
        .unwrap_or_else(|| {
            panic!(
                "losetup is not installed: this test needs it to attach a loop device (Debian package \
                 `mount`, util-linux elsewhere; `make deps` installs it on Debian 12)"
            )
        })
}

/// Set to skip the loop-device test on purpose where loop devices cannot be made (e.g. an
/// unprivileged container); the test says it was skipped.
const SKIP_LOOP_DEVICE: &str = "BAREBENCH_SKIP_LOOP_DEVICE";

/// A loop device over a file stands in for a card. Making one needs losetup and the right to
/// create loop devices (root or CAP_SYS_ADMIN, and /dev/loop-control); without them the test
/// fails and says why, unless BAREBENCH_SKIP_LOOP_DEVICE=1 asks to skip it.
#[test]
fn write_to_a_loop_device_needs_force_and_verifies() {
    if std::env::var_os(SKIP_LOOP_DEVICE).is_some_and(|value| value == "1") {
        eprintln!("skipped: {SKIP_LOOP_DEVICE}=1");
        return;
    }
    let losetup = losetup();
    let work = tempfile::tempdir().unwrap();
    let backing = work.path().join("loop-backing.bin");
    fs::write(&backing, vec![0u8; 80 << 20]).unwrap();
    let output = Command::new(&losetup).args(["--find", "--show"]).arg(&backing).output().unwrap();
    assert!(
        output.status.success(),
        "{} --find --show failed ({}): creating a loop device needs root or CAP_SYS_ADMIN; run the \
         tests with those rights, or set {SKIP_LOOP_DEVICE}=1 to skip this test",
        losetup.display(),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    let device = String::from_utf8_lossy(&output.stdout).trim().to_string();
    let detach = |device: &str| {
        let _ = Command::new(&losetup).arg("-d").arg(device).status();
    };
    let refused = write_image(work.path(), &device, &["--yes"]);
    let forced = write_image(work.path(), &device, &["--yes", "--force"]);
    detach(&device);
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--force"), "{}", text(&refused));
    assert!(forced.status.success(), "{}", text(&forced));
    let image = fs::read(work.path().join("card.img")).unwrap();
    let written = fs::read(&backing).unwrap();
    assert!(written[..image.len()] == image[..]);
}

#[test]
fn a_pattern_partition_follows_the_fat_one_and_the_kernels_scan_finds_it() {
    use blockdev::pattern_region::{scan, BlockReader, Finding};
    struct ImageDisk(Vec<u8>);
    impl BlockReader for ImageDisk {
        type Error = ();
        fn block_bytes(&self) -> u32 {
            512
        }
        fn block_count(&self) -> u64 {
            self.0.len() as u64 / 512
        }
        fn read_block(&mut self, lba: u64, out: &mut [u8]) -> Result<(), ()> {
            out.copy_from_slice(&self.0[lba as usize * 512..][..512]);
            Ok(())
        }
    }
    let work = tempfile::tempdir().unwrap();
    let firmware_dir = work.path().join("boot");
    fs::create_dir_all(&firmware_dir).unwrap();
    fake_firmware(&firmware_dir);
    let (kernel_path, _) = kernel(work.path());
    let (kernel32_path, _) = kernel32(work.path());
    let output = barebench(
        &[
            "image",
            "-o",
            "card.img",
            "--kernel",
            kernel_path.to_str().unwrap(),
            "--kernel32",
            kernel32_path.to_str().unwrap(),
            "--firmware",
            firmware_dir.to_str().unwrap(),
            "--size",
            "64M",
            "--pattern",
            "16M",
        ],
        work.path(),
    );
    assert!(output.status.success(), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(
            "pattern region: partition 2 (type 0x7f), 16 MiB from byte 67108864; image now 128 MiB"
        ),
        "{stdout}"
    );
    let image = work.path().join("card.img");
    fsck_partition(&image);
    let bytes = fs::read(&image).unwrap();
    assert_eq!(bytes.len(), 128 << 20);
    let mut found = Vec::new();
    scan(&mut ImageDisk(bytes.clone()), &mut [0u8; 512], &mut |finding| found.push(finding)).unwrap();
    let [Finding::Region(region)] = found.as_slice() else { panic!("{found:?}") };
    assert_eq!((region.partition_number, region.start_bytes, region.length_bytes), (2, 64 << 20, 16 << 20));
    let (offset, length) = region.readable();
    assert_eq!(blockdev::pattern::first_mismatch(offset, &bytes[offset as usize..][..length as usize]), None);
}
