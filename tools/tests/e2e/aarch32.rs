//! End-to-end: the 32-bit image on QEMU's raspi0 (Zero), raspi1ap (A+) and raspi2b (Pi 2 v1.1)
//! in `qemu-system-arm` (docs/aarch32-pis.md §3). Each run boots the raw image as the card holds
//! it (QEMU loads it at 0x10000 and passes ATAGS; the kernel moves itself to its link address
//! 0x8000), checks the banner, board and timer lines, reads a pattern image through the sdhost
//! or the Arasan with `crc=` checks against the host's CRCs, runs a short 4K QD1 benchmark with
//! its table and fio-compatible JSON, and ends with `exit=semihosting`. One run boots the ELF
//! (Secure SVC, every raspi2b core at the entry). Images are small and runs short: TCG is slow
//! on these machines.
#![cfg(feature = "e2e")]
#![forbid(unsafe_code)]

use crate::qemu_harness::{Machine, Outcome, Run, TestImage};
use bench::fio_json::{extract_json_from_log, parse_fio_json};
use std::time::Duration;

/// The card: 64 MiB, an SDSC card in QEMU's model (byte addresses), pattern everywhere.
const CARD_BYTES: u64 = 64 << 20;
/// Reads checked with crc=: the start, a multi-block run across the sdhost's 511-block split,
/// single blocks, and the last blocks.
const RANGES: [(u64, u64); 5] = [(0, 1), (1, 600), (4097, 1), (70_000, 33), (131_064, 8)];
const BENCHMARK: &str = "jobs=randread:4k:1 ramp=200ms runtime=1s runs=1 offset=0 size=16m progress=off";

fn field<'a>(output: &'a str, name: &str) -> &'a str {
    output
        .lines()
        .find_map(|line| line.strip_prefix(name).map(str::trim))
        .unwrap_or_else(|| panic!("no `{name}` line in:\n{output}"))
}

fn checks() -> String {
    RANGES.iter().map(|(lba, count)| format!("crc=sd0:{lba}:{count}")).collect::<Vec<_>>().join(" ")
}

/// Boots `machine` with the pattern card on its SD slot and `settings`, and checks what every
/// run shares: exit status 0, the crc= lines against the host's CRCs, the benchmark's table and
/// JSON. Prints boot-to-banner and the 4K QD1 row (`cargo test -- --nocapture` shows them).
fn boot_and_read(machine: Machine, elf: bool, settings: &str, label: &str) -> Outcome {
    let image = TestImage::full(label, CARD_BYTES);
    let mut run = Run::new(machine)
        .append(&format!("exit=semihosting {settings} {} {BENCHMARK}", checks()))
        .arg("-drive")
        .arg(&format!("if=sd,{}", image.drive()))
        .timeout(Duration::from_secs(600));
    if elf {
        run = run.elf();
    }
    let outcome = run.go();
    outcome.assert_status(0);
    let out = &outcome.output;
    for &(lba, count) in &RANGES {
        let expected = format!("crc sd0 {lba} {count} {:#010x}", image.crc(lba, count));
        assert!(out.lines().any(|line| line == expected), "missing `{expected}` in:\n{out}");
    }
    assert!(out.contains("results for randread:4k:1"), "{out}");
    let json = extract_json_from_log(out).unwrap_or_else(|e| panic!("{e:?} in:\n{out}"));
    let report = parse_fio_json(&json).unwrap_or_else(|e| panic!("{e:?} in:\n{json}"));
    assert_eq!(report.jobs.len(), 1);
    assert!(report.jobs[0].read.total_ios > 0, "{out}");
    let row =
        out.lines().find(|line| line.starts_with("sd0") && line.contains("randread:4k:1")).unwrap_or("");
    println!("{label}: boot {} | {}", field(out, "boot"), row);
    outcome
}

fn json_info(output: &str) -> bench::fio_json::BarebenchInfo {
    let json = extract_json_from_log(output).unwrap();
    parse_fio_json(&json).unwrap().barebench.expect("a barebench object")
}

#[test]
fn raspi0_zero_reads_through_the_sdhost_timed_by_the_system_timer() {
    let run = boot_and_read(Machine::Raspi0, false, "", "raspi0-sdhost");
    let out = &run.output;
    assert!(out.lines().find(|l| !l.trim().is_empty()).unwrap().starts_with("barebench "), "{out}");
    assert!(field(out, "board").starts_with("Raspberry Pi Zero (revision 0x920092)"), "{out}");
    assert_eq!(field(out, "soc"), "BCM2835");
    assert!(field(out, "cpu").starts_with("ARM1176JZF-S r0p7 (MIDR 0x410fb767), 1 core"), "{out}");
    assert_eq!(
        field(out, "timer"),
        "1.000 MHz (BCM2835 system timer at 0x20003000; latency resolution 1000 ns)"
    );
    assert_eq!(field(out, "entry"), "SVC");
    assert_eq!(field(out, "config"), "ATAGS at 0x100 (no device tree)");
    assert_eq!(
        field(out, "pmu"),
        "not driven by the 32-bit kernel (ARM1176 c15 counters, Cortex-A7 PMUv2); no CPU cost per I/O"
    );
    assert!(
        out.contains("sd0      cpu per I/O: not measured (cycles: not driven by the 32-bit kernel"),
        "{out}"
    );
    assert!(field(out, "memory").starts_with("MMU on"), "{out}");
    assert!(out.contains("sdhost at 0x20202000: BCM2835 sdhost (board table), PIO"), "{out}");
    assert!(
        out.contains("sdhci at 0x20300000: not probed: GPIO 48-53 give the SD slot to the sdhost"),
        "{out}"
    );
    let mode = field(out, "sd0        mode");
    assert!(
        mode.contains("4-bit bus, 50000000 Hz, High Speed (HS)") && mode.ends_with("end by CMD12"),
        "{mode}"
    );
    let info = json_info(out);
    assert_eq!(info.timer_frequency_hz, Some(1_000_000));
    assert_eq!(
        info.other.get("sd0_controller").and_then(|v| v.as_str()),
        Some("BCM2835 sdhost at 0x20202000")
    );
    assert_eq!(info.other.get("entry").and_then(|v| v.as_str()), Some("SVC"));
}

#[test]
fn raspi0_zero_reads_through_the_arasan() {
    let run = boot_and_read(Machine::Raspi0, false, "sd.host=arasan", "raspi0-arasan");
    let out = &run.output;
    assert!(
        out.contains("sdhost at 0x20202000: not probed: GPIO 48-53 give the SD slot to the Arasan"),
        "{out}"
    );
    assert!(out.contains("sdhci at 0x20300000: Arasan EMMC"), "{out}");
    assert!(field(out, "sd0        mode").ends_with("end by auto-CMD12"), "{out}");
    let info = json_info(out);
    assert_eq!(
        info.other.get("sd0_controller").and_then(|v| v.as_str()),
        Some("Arasan EMMC (BCM2835/2837/2711 legacy) at 0x20300000")
    );
}

#[test]
fn raspi1ap_reads_through_both_controllers() {
    let run = boot_and_read(Machine::Raspi1ap, false, "sd.host=sdhost", "raspi1ap-sdhost");
    let out = &run.output;
    assert!(field(out, "board").starts_with("Raspberry Pi Model A+ (revision 0x900021)"), "{out}");
    assert!(field(out, "timer").starts_with("1.000 MHz (BCM2835 system timer"), "{out}");
    assert!(out.contains("sdhost at 0x20202000: BCM2835 sdhost"), "{out}");
    let run = boot_and_read(Machine::Raspi1ap, false, "sd.host=arasan", "raspi1ap-arasan");
    assert!(run.output.contains("sdhci at 0x20300000: Arasan EMMC"), "{}", run.output);
}

#[test]
fn raspi2b_reads_through_both_controllers_timed_by_the_generic_timer() {
    let run = boot_and_read(Machine::Raspi2b, false, "", "raspi2b-sdhost");
    let out = &run.output;
    assert!(field(out, "board").starts_with("Raspberry Pi 2 Model B (revision 0xa21041)"), "{out}");
    assert_eq!(field(out, "soc"), "BCM2836");
    assert!(field(out, "cpu").starts_with("Cortex-A7 r0p5 (MIDR 0x410fc075), 4 cores"), "{out}");
    // QEMU's counter runs at 62.5 MHz, not the 19.2 MHz of a Pi 2 (docs/aarch32-pis.md §3).
    assert_eq!(field(out, "timer"), "62.500 MHz (CNTFRQ = 62500000)");
    assert!(out.contains("sdhost at 0x3f202000: BCM2835 sdhost"), "{out}");
    let info = json_info(out);
    assert_eq!(info.timer_frequency_hz, Some(62_500_000));
    let cycles = info.other.get("cpu_counters").and_then(|counters| counters.get("cycles"));
    assert!(
        cycles.and_then(|reason| reason.as_str()).is_some_and(|reason| reason.contains("32-bit kernel")),
        "{cycles:?}"
    );
    let run = boot_and_read(Machine::Raspi2b, false, "sd.host=arasan", "raspi2b-arasan");
    assert!(run.output.contains("sdhci at 0x3f300000: Arasan EMMC"), "{}", run.output);
}

#[test]
fn raspi2b_elf_starts_in_secure_svc_on_every_core_and_asks_the_firmware() {
    let run = Run::new(Machine::Raspi2b)
        .elf()
        .append("exit=semihosting jobs=none via=mailbox")
        .timeout(Duration::from_secs(300))
        .go();
    run.assert_status(0);
    let out = &run.output;
    assert_eq!(field(out, "entry"), "SVC");
    assert!(field(out, "config").starts_with("board table and VideoCore mailbox"), "{out}");
    assert_eq!(field(out, "cmdline"), "\"exit=semihosting jobs=none via=mailbox\"");
    assert_eq!(
        out.matches(": bare-metal storage benchmark").count(),
        1,
        "only core 0 runs the kernel:\n{out}"
    );
    // No card: QEMU attaches one without medium to the slot.
    assert!(out.contains("sdhost at 0x3f202000: no card"), "{out}");
}

#[test]
fn a_data_abort_is_reported_with_its_fault_registers() {
    let run = Run::new(Machine::Raspi1ap)
        .append("exit=semihosting jobs=none test-fault=data-abort")
        .timeout(Duration::from_secs(300))
        .go();
    run.assert_status(3);
    let out = &run.output;
    assert!(out.contains("*** EXCEPTION: data abort taken from Supervisor mode"), "{out}");
    assert!(out.contains("DFSR   0x00000005: translation fault (read)"), "{out}");
    assert!(out.contains("DFAR   0xf0000000"), "{out}");
}
