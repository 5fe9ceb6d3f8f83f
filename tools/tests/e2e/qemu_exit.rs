//! End-to-end: `tools::qemu::QemuRun` boots a hand-assembled kernel on every machine and passes
//! on the exit status set through semihosting, with the serial console captured (docs/qemu.md §4).
#![cfg(feature = "e2e")]
#![forbid(unsafe_code)]

use std::time::Duration;

use tools::qemu::{write_semihosting_exit_kernel, Machine, QemuError, QemuRun};

/// A run of the hand-assembled exit kernel (printing `message`, exiting with `exit_code`), with
/// its images and log in a temporary directory that lives as long as the returned guard.
fn exit_kernel_run(machine: Machine, message: &[u8], exit_code: u32) -> (tempfile::TempDir, QemuRun) {
    let dir = tempfile::tempdir().unwrap();
    let kernel = dir.path().join("exit.img");
    write_semihosting_exit_kernel(&kernel, machine, message, exit_code).unwrap();
    let mut run = QemuRun::new(machine);
    run.kernel = kernel;
    run.workdir = dir.path().to_path_buf();
    run.log_path = dir.path().join("serial.log");
    run.timeout = Some(Duration::from_secs(60));
    (dir, run)
}

fn run_exit_kernel(machine: Machine, exit_code: u32) -> tools::qemu::Outcome {
    let (_dir, run) = exit_kernel_run(machine, b"hello from exit kernel\n", exit_code);
    let mut live = Vec::new();
    let outcome = run.run(&mut live).unwrap();
    assert_eq!(String::from_utf8(live).unwrap(), outcome.log_text);
    assert_eq!(std::fs::read_to_string(&outcome.log_path).unwrap(), outcome.log_text);
    outcome
}

#[test]
fn raspi3b_exit_status_and_serial_are_passed_on() {
    let outcome = run_exit_kernel(Machine::Raspi3b, 42);
    assert_eq!(outcome.exit_code(), 42, "stderr: {}", outcome.qemu_stderr);
    assert_eq!(outcome.log_text, "hello from exit kernel\n");
}

#[test]
fn raspi4b_exit_status_is_passed_on() {
    let outcome = run_exit_kernel(Machine::Raspi4b, 3);
    assert_eq!(outcome.exit_code(), 3, "stderr: {}", outcome.qemu_stderr);
    assert_eq!(outcome.log_text, "hello from exit kernel\n");
}

#[test]
fn virt_exit_status_zero_is_passed_on() {
    let outcome = run_exit_kernel(Machine::Virt, 0);
    assert_eq!(outcome.exit_code(), 0, "stderr: {}", outcome.qemu_stderr);
    assert_eq!(outcome.log_text, "hello from exit kernel\n");
}

/// QEMU starts with the NVMe and sdhci-pci devices and the images `QemuRun` made for them (the
/// exit kernel never touches the devices: the kernel's reads are checked in nvme.rs, sd.rs and
/// benchmark.rs).
#[test]
fn virt_starts_with_nvme_and_sd_disks_and_their_images_are_made() {
    let (dir, mut run) = exit_kernel_run(Machine::Virt, b"ok\n", 5);
    run.sd = Some("40M:zeros".parse().unwrap());
    run.nvme = Some("16M".parse().unwrap());
    run.nvme_options = vec!["mdts=9".to_string()];
    let outcome = run.run(&mut std::io::sink()).unwrap();
    assert_eq!(outcome.exit_code(), 5, "stderr: {}", outcome.qemu_stderr);
    // The SD card was rounded up to 64 MiB; the NVMe image holds the pattern.
    let sd_image = dir.path().join("disk-sd-64MiB-zeros.img");
    assert_eq!(std::fs::metadata(sd_image).unwrap().len(), 64 << 20);
    let nvme = std::fs::read(dir.path().join("disk-nvme-16MiB-pattern.img")).unwrap();
    let last_sector: &[u8; 512] = nvme[nvme.len() - 512..].try_into().unwrap();
    assert_eq!(tools::pattern::identify_sector(last_sector), Some((16 << 20) / 512 - 1));
}

#[test]
fn raspi4b_emmc2_card_is_accepted() {
    let (_dir, mut run) = exit_kernel_run(Machine::Raspi4b, b"", 9);
    run.sd = Some("64M".parse().unwrap());
    run.emmc2 = Some("32M:zeros".parse().unwrap());
    let outcome = run.run(&mut std::io::sink()).unwrap();
    assert_eq!(outcome.exit_code(), 9, "stderr: {}", outcome.qemu_stderr);
}

#[test]
fn a_kernel_that_never_exits_is_killed_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let kernel = dir.path().join("spin.img");
    // B . : spins for ever.
    std::fs::write(&kernel, 0x1400_0000u32.to_le_bytes()).unwrap();
    let mut run = QemuRun::new(Machine::Raspi3b);
    run.kernel = kernel;
    run.workdir = dir.path().to_path_buf();
    run.log_path = dir.path().join("serial.log");
    run.timeout = Some(Duration::from_secs(1));
    let started = std::time::Instant::now();
    let error = run.run(&mut std::io::sink()).unwrap_err();
    assert!(matches!(error, QemuError::TimedOut { timeout_s: 1, .. }), "{error}");
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn the_cli_exits_with_the_kernel_status_and_124_on_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let kernel = dir.path().join("exit.img");
    write_semihosting_exit_kernel(&kernel, Machine::Raspi3b, b"cli run\n", 42).unwrap();
    let log = dir.path().join("cli.log");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_barebench"))
        .args(["qemu", "--machine", "raspi3b", "--timeout", "60", "--kernel"])
        .arg(&kernel)
        .arg("--workdir")
        .arg(dir.path())
        .arg("--log")
        .arg(&log)
        .args(["--sd", "48M:zeros", "--", "preset=quick"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(42), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&output.stdout), "cli run\n");
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "cli run\n");
    assert!(stderr.contains("not a power of two"), "{stderr}");
    assert!(stderr.contains("preset=quick exit=semihosting"), "{stderr}");

    let spin = dir.path().join("spin.img");
    std::fs::write(&spin, 0x1400_0000u32.to_le_bytes()).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_barebench"))
        .args(["qemu", "--machine", "raspi3b", "--timeout", "1", "--kernel"])
        .arg(&spin)
        .arg("--workdir")
        .arg(dir.path())
        .arg("--log")
        .arg(&log)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(124), "{}", String::from_utf8_lossy(&output.stderr));
}

#[test]
fn a_kernel_that_prints_for_ever_is_still_killed_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let kernel = dir.path().join("chatty.img");
    // movz x2,#0x3f20,lsl#16; movk x2,#0x1000; movz w3,#'x'; str w3,[x2]; b .-4 (raspi3b PL011)
    let words: [u32; 5] = [0xD2A7_E402, 0xF282_0002, 0x5280_0F03, 0xB900_0043, 0x17FF_FFFF];
    let image: Vec<u8> = words.iter().flat_map(|word| word.to_le_bytes()).collect();
    std::fs::write(&kernel, image).unwrap();
    let mut run = QemuRun::new(Machine::Raspi3b);
    run.kernel = kernel;
    run.workdir = dir.path().to_path_buf();
    run.log_path = dir.path().join("serial.log");
    run.timeout = Some(Duration::from_secs(1));
    let started = std::time::Instant::now();
    let error = run.run(&mut std::io::sink()).unwrap_err();
    let QemuError::TimedOut { log_text, .. } = error else { panic!("{error}") };
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(log_text.starts_with("xxxx"));
    assert_eq!(std::fs::metadata(dir.path().join("serial.log")).unwrap().len(), log_text.len() as u64);
}
