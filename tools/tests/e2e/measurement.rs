//! End-to-end: what the benchmark says about its own measurement under QEMU virt: the PMU line
//! and the CPU cost per I/O (instruction counts only under `-icount shift=0`), the progress
//! line, and the warning for a region that reads as never written (docs/measurement.md).
#![cfg(feature = "e2e")]
#![forbid(unsafe_code)]

use std::time::Duration;

use crate::qemu_harness::{Machine, Run, TestImage};
use bench::fio_json::extract_json_from_log;

/// A virt run with an NVMe namespace and an SD card.
fn virt_with(nvme: &TestImage, sd: &TestImage, append: &str) -> Run {
    Run::new(Machine::Virt)
        .append(&format!("exit=semihosting nvme.measure=off {append}"))
        .args(&["-drive", &format!("if=none,id=sdc,{}", sd.drive())])
        .args(&["-device", "sdhci-pci,sd-spec-version=3", "-device", "sd-card,drive=sdc"])
        .args(&["-drive", &format!("if=none,id=nv,{},aio=io_uring", nvme.drive())])
        .args(&["-device", "nvme,drive=nv,serial=measurement"])
}

/// The `cpu per I/O` line of `device` after the job table of `job`.
fn cpu_line<'a>(output: &'a str, job: &str, device: &str) -> &'a str {
    let table = output.split(&format!("results for {job}")).nth(1).unwrap_or_else(|| panic!("{output}"));
    let prefix = format!("{device:<8} cpu per I/O: ");
    table.lines().find(|line| line.starts_with(&prefix)).unwrap_or_else(|| panic!("no cpu line:\n{table}"))
}

/// The number before `word` in `line` ("driver 945 instr" → 945 for "instr" after "driver").
fn count_before(line: &str, after: &str, word: &str) -> u64 {
    let rest = line.split(after).nth(1).unwrap_or_else(|| panic!("{after} in {line}"));
    let text = rest.split(word).next().unwrap().trim().rsplit(' ').next().unwrap();
    text.parse().unwrap_or_else(|_| panic!("{text:?} in {line}"))
}

#[test]
fn a_region_that_reads_as_zeros_is_warned_about_and_the_progress_line_is_written() {
    let nvme = TestImage::new("measure-zeros-nvme", 32 << 20, &[]);
    let sd = TestImage::full("measure-pattern-sd", 16 << 20);
    let run = virt_with(&nvme, &sd, "jobs=randread:4k:1 ramp=0 runtime=700ms runs=1 offset=0 size=8m").go();
    run.assert_status(0);
    let out = &run.output;
    assert!(out.contains("nvme0      deallocated blocks read as all zeros (DLFEAT 0x01)"), "{out}");
    let warning =
        "warning: nvme0: all 64 sampled reads of 4k spread over region 8m at offset 0 read as zeros";
    let at = out.find(warning).unwrap_or_else(|| panic!("{out}"));
    assert!(at < out.find("run 1/1").unwrap(), "the warning comes before the first run");
    assert!(!out.contains("warning: sd0"), "the SD card holds the pattern:\n{out}");
    // The progress line: rewritten in place with a bare carriage return during the run.
    assert!(out.contains("\r  sd0 randread 4k qd1 run 1/1: 0.5 of 0.7 s, "), "{out}");
    let json = extract_json_from_log(out).unwrap();
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let samples = value["barebench"]["region_samples"].as_array().unwrap();
    let nvme_sample = samples.iter().find(|s| s["device"] == "nvme0").unwrap();
    assert_eq!(nvme_sample["looks_deallocated"], true, "{nvme_sample}");
    assert_eq!(nvme_sample["reads"], 64);
    assert_eq!(nvme_sample["deallocated_read"], "deallocated blocks read as all zeros");
    let sd_sample = samples.iter().find(|s| s["device"] == "sd0").unwrap();
    assert_eq!(sd_sample["looks_deallocated"], false, "{sd_sample}");
    for job in value["jobs"].as_array().unwrap() {
        let zeros = job["barebench"]["region_reads_as_zeros"].as_bool().unwrap();
        assert_eq!(zeros, job["barebench"]["device"] == "nvme0", "{job}");
    }
}

#[test]
fn without_icount_the_cpu_cost_has_cycles_and_says_why_instructions_are_missing() {
    let nvme = TestImage::full("measure-cycles-nvme", 16 << 20);
    let sd = TestImage::full("measure-cycles-sd", 16 << 20);
    let run =
        virt_with(&nvme, &sd, "jobs=randread:4k:1 ramp=0 runtime=200ms runs=1 offset=0 size=8m progress=off")
            .go();
    run.assert_status(0);
    let out = &run.output;
    assert!(
        out.contains(
            "pmu        PMUv3, 6 event counters; cycles (PMCCNTR_EL0): counting; instructions (event \
             0x08): event 0x08 not implemented (PMCEID0_EL0 bit 8 clear; QEMU has it only with \
             -icount shift=N)"
        ),
        "{out}"
    );
    for device in ["sd0", "nvme0"] {
        let line = cpu_line(out, "randread:4k:1", device);
        assert!(line.contains("driver n/a instr / "), "{line}");
        assert!(line.ends_with("(instructions: event 0x08 not implemented (PMCEID0_EL0 bit 8 clear; QEMU has it only with -icount shift=N))"), "{line}");
        assert!(count_before(line, "driver n/a instr /", "cycles") > 0, "{line}");
    }
    let json = extract_json_from_log(out).unwrap();
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    let cost = &value["jobs"][0]["barebench"]["cpu_per_io"];
    assert!(cost["driver_instructions"].is_null() && cost["driver_cycles"].is_f64(), "{cost}");
    assert_eq!(value["barebench"]["cpu_counters"]["cycles"], "counting");
}

#[test]
fn under_icount_the_cpu_cost_counts_instructions() {
    let nvme = TestImage::full("measure-icount-nvme", 16 << 20);
    let sd = TestImage::full("measure-icount-sd", 16 << 20);
    let run =
        virt_with(&nvme, &sd, "devices=nvme0 jobs=randread:4k:1 ramp=0 runtime=5ms runs=1 offset=0 size=8m")
            .args(&["-icount", "shift=0"])
            .timeout(Duration::from_secs(900))
            .go();
    run.assert_status(0);
    let out = &run.output;
    assert!(out.contains("cycles (PMCCNTR_EL0): counting; instructions (event 0x08): counting"), "{out}");
    let line = cpu_line(out, "randread:4k:1", "nvme0");
    // A polled NVMe read is a few hundred instructions in the driver and in the bookkeeping;
    // under icount a cycle is an instruction (1 ns each at shift=0, and PMCCNTR counts ns).
    let driver = count_before(line, "driver", "instr");
    let bookkeeping = count_before(line, "bookkeeping", "instr");
    assert!((100..5_000).contains(&driver), "{line}");
    assert!((50..2_000).contains(&bookkeeping), "{line}");
    assert_eq!(count_before(line, "instr /", "cycles"), driver, "{line}");
    assert!(!line.contains("n/a"), "{line}");
}
