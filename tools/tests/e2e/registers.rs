//! End-to-end: `regs=DEV` register snapshots under QEMU on every SD host and on NVMe: virt's
//! sdhci-pci and NVMe controller (as found, after bring-up, after the last run of a short
//! benchmark), raspi3b's Arasan (no ADMA registers read: it advertises no ADMA2) and raspi4b's
//! EMMC2 and legacy Arasan together (`regs=all`).
#![cfg(feature = "e2e")]
#![forbid(unsafe_code)]

use crate::qemu_harness::{nvme_aio, Machine, Run, TestImage};

/// The register lines of one snapshot (after the `regs       DEV   ` prefix): the lines after
/// the heading `regs       DEV WHEN…`.
fn snapshot<'a>(output: &'a str, device: &str, when: &str) -> Vec<&'a str> {
    let heading = format!("regs       {device} {when}");
    let mut lines = output.lines().skip_while(|line| !line.starts_with(&heading));
    assert!(lines.next().is_some(), "no `{heading}` in:\n{output}");
    let prefix = format!("regs       {device}   ");
    lines.map_while(|line| line.strip_prefix(prefix.as_str())).collect()
}

/// The value printed for `name`: a line is `0xOFFSET NAME (28 columns) VALUE [(meaning)]`.
fn value(lines: &[&str], name: &str) -> u64 {
    let line = lines
        .iter()
        .find(|line| line.get(7..35).map(str::trim_end) == Some(name))
        .unwrap_or_else(|| panic!("no {name} in {lines:#?}"));
    let number = line[36..].split_whitespace().next().unwrap();
    match number.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).unwrap(),
        None => number.parse().unwrap(),
    }
}

#[test]
fn virt_sd_and_nvme_registers_at_bring_up_and_after_the_last_run() {
    let sd = TestImage::full("regs-virt-sd", 16 << 20);
    let nvme = TestImage::full("regs-virt-nvme", 16 << 20);
    let run = Run::new(Machine::Virt)
        .append(
            "exit=semihosting regs=sd0 regs=nvme0 regs=bad:name jobs=randread:4k:1 ramp=0ms runtime=100ms \
             runs=1 offset=0 size=8m progress=off",
        )
        .args(&["-drive", &format!("if=none,id=sdc,{}", sd.drive())])
        .args(&["-device", "sdhci-pci,sd-spec-version=3", "-device", "sd-card,drive=sdc"])
        .args(&["-drive", &format!("if=none,id=nv,{},aio={}", nvme.drive(), nvme_aio())])
        .args(&["-device", "nvme,drive=nv,serial=regs"])
        .go();
    run.assert_status(0);
    let out = &run.output;
    assert!(out.contains("warning: bad setting regs=bad:name: expected a device name such as sd0"), "{out}");
    let found = snapshot(out, "sd0", "as found (SDHCI at 0x");
    let brought_up = snapshot(out, "sd0", "after bring-up");
    let after = snapshot(out, "sd0", "after the last run");
    for lines in [&found, &brought_up, &after] {
        assert_eq!(value(lines, "capabilities"), 0x0578_34b4, "{lines:#?}");
        assert_eq!(value(lines, "host controller version") & 0xff, 2, "SDHCI 3.00");
        assert_eq!(value(lines, "ADMA error status"), 0);
    }
    // QEMU resets the controller: clock off and no bus power until the driver starts it.
    assert_eq!(value(&found, "clock control") & 0b100, 0, "{found:#?}");
    assert_eq!(value(&brought_up, "clock control") & 0b111, 0b111, "{brought_up:#?}");
    assert_eq!(value(&brought_up, "host control 1") & 0b10, 0b10, "4-bit bus");
    assert_eq!(value(&after, "error interrupt status"), 0);
    let found = snapshot(out, "nvme0", "as found (NVMe 00:");
    let brought_up = snapshot(out, "nvme0", "after bring-up");
    let after = snapshot(out, "nvme0", "after the last run");
    assert_eq!(value(&found, "CC") & 1, 0, "disabled as found: {found:#?}");
    for lines in [&brought_up, &after] {
        assert_eq!(value(lines, "CC") & 1, 1, "{lines:#?}");
        assert_eq!(value(lines, "CSTS") & 0b11, 0b01, "ready, not fatal: {lines:#?}");
        assert_eq!(value(lines, "INTMS"), 0xffff_ffff, "every vector masked (polled)");
    }
    for lines in [&found, &brought_up, &after] {
        assert_eq!(value(lines, "doorbell stride"), 4, "{lines:#?}");
        assert_eq!(value(lines, "VS"), 0x0001_0400, "NVMe 1.4");
        assert_eq!(value(lines, "CAP") & 0xffff, 2047, "QEMU's MQES");
    }
    // The snapshot after the run comes after the summary.
    assert!(out.find("summary: medians").unwrap() < out.find("regs       nvme0 after the last run").unwrap());
}

#[test]
fn raspi3b_arasan_registers_without_adma() {
    let image = TestImage::full("regs-raspi3b", 16 << 20);
    let run = Run::new(Machine::Raspi3b)
        .append("exit=semihosting sd.host=arasan regs=sd0 jobs=none")
        .arg("-drive")
        .arg(&format!("if=sd,{}", image.drive()))
        .go();
    run.assert_status(0);
    let out = &run.output;
    let lines = snapshot(out, "sd0", "as found (SDHCI at 0x3f300000");
    assert_eq!(value(&lines, "capabilities"), 0x0521_34b4, "{lines:#?}");
    assert!(!out.contains("ADMA"), "QEMU's raspi Arasan advertises no ADMA2:\n{out}");
    let after = snapshot(out, "sd0", "after the last run");
    assert_eq!(value(&after, "clock control") & 0b111, 0b111);
}

#[test]
fn raspi4b_emmc2_and_arasan_registers_with_regs_all() {
    let emmc2 = TestImage::full("regs-raspi4b-emmc2", 16 << 20);
    let arasan = TestImage::full("regs-raspi4b-arasan", 16 << 20);
    let run = Run::new(Machine::Raspi4b)
        .append("exit=semihosting regs=all jobs=none")
        .arg("-drive")
        .arg(&format!("if=sd,{}", arasan.drive()))
        .arg("-drive")
        .arg(&format!("if=none,id=e2,{}", emmc2.drive()))
        .arg("-device")
        .arg("sd-card,drive=e2,bus=/generic-sdhci/sd-bus")
        .go();
    run.assert_status(0);
    let out = &run.output;
    let emmc2 = snapshot(out, "sd0", "as found (SDHCI at 0xfe340000");
    let arasan = snapshot(out, "sd1", "as found (SDHCI at 0xfe300000");
    for lines in [&emmc2, &arasan] {
        assert_eq!(value(lines, "capabilities"), 0x0521_34b4, "{lines:#?}");
    }
    for device in ["sd0", "sd1"] {
        let after = snapshot(out, device, "after the last run");
        assert_eq!(value(&after, "present state") & (1 << 16), 1 << 16, "card inserted: {after:#?}");
    }
}
