//! End-to-end: per-command traces (`trace=DEV[:N]`) under QEMU virt, decoded on the host with
//! `defmt-decoder` and `build/kernel-virt.elf` (tools::report::trace, and `barebench report
//! --trace`): one row per I/O the run counted, submit times in order, latency = completion −
//! submit, LBAs inside the region, the run's mean latency; a ring of N keeps N; an ELF that does
//! not match is named. Also the IOPS and CPU cost per I/O with and without `trace=` (printed,
//! not asserted: QEMU's timing is the host's), instructions counted under `-icount shift=0`.
#![cfg(feature = "e2e")]
#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::qemu_harness::{nvme_aio, repository_root, Machine, Outcome, Run, TestImage};
use bench::fio_json::{extract_json_from_log, parse_fio_json, FioJob};

use tools::report::trace::{decode_traces, DecodedTrace, TraceError};

const REGION: &str = "offset=1m size=8m";
const REGION_LBAS: std::ops::Range<u64> = 2048..2048 + 16384;

fn elf() -> PathBuf {
    repository_root().join("build").join("kernel-virt.elf")
}

/// Runs virt with an SD card and an NVMe drive (the images live until the run ends).
fn virt_run(settings: &str, stem: &str, extra: &[&str]) -> Outcome {
    let sd = TestImage::full(&format!("{stem}-sd"), 16 << 20);
    let nvme = TestImage::full(&format!("{stem}-nvme"), 16 << 20);
    Run::new(Machine::Virt)
        .append(&format!("exit=semihosting progress=off {REGION} {settings}"))
        .args(&["-drive", &format!("if=none,id=sdc,{}", sd.drive())])
        .args(&["-device", "sdhci-pci,sd-spec-version=3", "-device", "sd-card,drive=sdc"])
        .args(&["-drive", &format!("if=none,id=nv,{},aio={}", nvme.drive(), nvme_aio())])
        .args(&["-device", "nvme,drive=nv,serial=trace"])
        .args(extra)
        .timeout(Duration::from_secs(900))
        .go()
}

fn jobs(output: &str) -> Vec<FioJob> {
    let json = extract_json_from_log(output).unwrap_or_else(|e| panic!("{e:?} in:\n{output}"));
    parse_fio_json(&json).unwrap().jobs
}

/// The JSON job of a trace: device and run number (`job1-run2` → `-run2`).
fn job_of<'a>(jobs: &'a [FioJob], trace: &DecodedTrace) -> &'a FioJob {
    let run = trace.run.rsplit('-').next().unwrap();
    jobs.iter()
        .find(|job| {
            job.settings.device.as_deref() == Some(trace.device.as_str())
                && job.jobname.ends_with(&format!("-{run}"))
        })
        .unwrap_or_else(|| panic!("no job for {} {}", trace.device, trace.run))
}

fn check_against_the_run(trace: &DecodedTrace, job: &FioJob) {
    let rows = trace.rows();
    let name = format!("{} {}", trace.device, trace.run);
    assert_eq!(trace.not_kept, 0, "{name}");
    assert_eq!(rows.len() as u64, job.read.total_ios, "{name}: one row per I/O of the run");
    assert!(rows.windows(2).all(|pair| pair[0].submit_ns <= pair[1].submit_ns), "{name}");
    for row in &rows {
        assert_eq!(row.latency_ns, row.complete_ns - row.submit_ns, "{name}: {row:?}");
        assert!(row.submit_ns <= row.doorbell_ns && row.doorbell_ns <= row.complete_ns, "{name}: {row:?}");
        assert!(REGION_LBAS.contains(&row.record.lba) && row.record.block_count == 8, "{name}: {row:?}");
        assert_eq!(row.record.status, 0, "{name}");
    }
    let mean = tools::report::trace::mean_latency_ns(&rows);
    assert!(
        (mean - job.read.lat_ns.mean).abs() <= 1.0,
        "{name}: mean {mean} vs the run's {}",
        job.read.lat_ns.mean
    );
}

#[test]
fn virt_traces_decode_into_the_runs_own_commands() {
    let run = virt_run(
        "trace=nvme0 trace=sd0 jobs=randread:4k:8 ramp=50ms runtime=300ms runs=2",
        "trace-virt",
        &[],
    );
    run.assert_status(0);
    let out = &run.output;
    let traces = decode_traces(out, &elf()).unwrap_or_else(|e| panic!("{e}\n{out}"));
    assert_eq!(traces.len(), 4, "2 devices x 2 runs");
    let jobs = jobs(out);
    for trace in &traces {
        check_against_the_run(trace, job_of(&jobs, trace));
    }
    // NVMe names its queue and commands and reports the SQ head; the SD host has one slot.
    let nvme = traces.iter().find(|t| t.device == "nvme0").unwrap();
    assert!(nvme.records.iter().all(|r| r.queue_id == 1 && r.sq_head < 1024), "{:?}", &nvme.records[..3]);
    let sd = traces.iter().find(|t| t.device == "sd0").unwrap();
    assert!(sd.records.iter().all(|r| r.queue_id == 0 && r.sq_head == bench::trace::NO_SQ_HEAD));
    for line in out.lines().filter(|l| l.contains(" trace job1-run")) {
        println!("{line}");
    }
    // The host tool writes the CSV, the charts and the summary.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("virt.log");
    std::fs::write(&log, out).unwrap();
    let report = Command::new(env!("CARGO_BIN_EXE_barebench"))
        .args(["report", "--trace", "--elf"])
        .arg(elf())
        .arg("-o")
        .arg(dir.path().join("out"))
        .arg(&log)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&report.stdout);
    assert!(report.status.success(), "{stdout}{}", String::from_utf8_lossy(&report.stderr));
    assert!(stdout.contains("4 traces decoded with"), "{stdout}");
    let csv = std::fs::read_to_string(dir.path().join("out/trace-nvme0-job1-run2.csv")).unwrap();
    let second = traces.iter().find(|t| t.device == "nvme0" && t.run == "job1-run2").unwrap();
    assert_eq!(csv.lines().count(), second.records.len() + 1, "a header and one row per command");
    for suffix in ["latency.svg", "latency.png", "histogram.svg", "histogram.png", "gaps.svg", "gaps.png"] {
        assert!(dir.path().join(format!("out/trace-sd0-job1-run1-{suffix}")).exists(), "{suffix}");
    }
    let summary = std::fs::read_to_string(dir.path().join("out/traces.md")).unwrap();
    assert!(
        summary.contains("## nvme0 job1-run1") && summary.contains("Slowest commands:\n\n- "),
        "{summary}"
    );
}

#[test]
fn a_ring_of_n_keeps_n_and_a_foreign_elf_is_named() {
    let run = virt_run(
        "trace=sd0:20 devices=sd0 jobs=randread:4k:1 ramp=0ms runtime=200ms runs=1",
        "trace-ring",
        &[],
    );
    run.assert_status(0);
    let out = &run.output;
    let traces = decode_traces(out, &elf()).unwrap_or_else(|e| panic!("{e}\n{out}"));
    let job = &jobs(out)[0];
    assert_eq!(traces[0].records.len(), 20);
    assert_eq!(traces[0].not_kept, job.read.total_ios - 20);
    assert!(
        out.contains(&format!(
            "sd0      trace job1-run1: 20 commands recorded, {} more not kept (ring of 20)",
            job.read.total_ios - 20
        )),
        "{out}"
    );
    // An ELF without a defmt table (this test binary), and a frame no table knows.
    let foreign = std::env::current_exe().unwrap();
    let error = decode_traces(out, &foreign).unwrap_err();
    assert!(matches!(error, TraceError::NoTable { .. }), "{error}");
    let marker = "==== barebench trace begin sd0 job1-run1 ====\n";
    let corrupted = out.replacen(marker, &format!("{marker}/wA=\n"), 1);
    let error = decode_traces(&corrupted, &elf()).unwrap_err().to_string();
    assert!(error.contains("does not match this log: sd0 job1-run1, line 1"), "{error}");
}

/// IOPS and CPU cost per I/O of one run on nvme0, as printed.
fn nvme_figures(run: &Outcome) -> (f64, String, Option<String>) {
    let out = &run.output;
    let job = &jobs(out)[0];
    let cpu = out.lines().find(|l| l.starts_with("nvme0    cpu per I/O")).unwrap_or_default().to_string();
    let recording = out.lines().find(|l| l.starts_with("nvme0    trace job1-run1")).map(String::from);
    (job.read.iops, cpu, recording)
}

#[test]
fn iops_and_cpu_cost_with_and_without_trace() {
    let settings = "devices=nvme0 jobs=randread:4k:4 ramp=100ms runtime=1s runs=1";
    let traced = virt_run(&format!("trace=nvme0 {settings}"), "trace-cost-on", &[]);
    let plain = virt_run(settings, "trace-cost-off", &[]);
    traced.assert_status(0);
    plain.assert_status(0);
    let (iops_traced, cpu_traced, recording) = nvme_figures(&traced);
    let (iops_plain, cpu_plain, _) = nvme_figures(&plain);
    println!("QEMU virt, nvme0 randread 4k QD4, 1 s: {iops_traced:.0} IOPS with trace=nvme0, {iops_plain:.0} without ({:+.1} %)", (iops_traced / iops_plain - 1.0) * 100.0);
    println!("  with:    {cpu_traced}\n  without: {cpu_plain}\n  {}", recording.unwrap());
    // Under -icount shift=0 instructions are counted: the recording cost in instructions.
    let settings = "devices=nvme0 jobs=randread:4k:4 ramp=0ms runtime=20ms runs=1";
    let icount =
        |trace: &str, stem: &str| virt_run(&format!("{trace} {settings}"), stem, &["-icount", "shift=0"]);
    let traced = icount("trace=nvme0", "trace-icount-on");
    let plain = icount("", "trace-icount-off");
    traced.assert_status(0);
    plain.assert_status(0);
    let (_, cpu_traced, recording) = nvme_figures(&traced);
    let (_, cpu_plain, _) = nvme_figures(&plain);
    let recording = recording.unwrap();
    println!("QEMU virt -icount shift=0, nvme0 randread 4k QD4, 20 ms:\n  with:    {cpu_traced}\n  without: {cpu_plain}\n  {recording}");
    assert!(!recording.contains("n/a"), "instructions are counted under icount: {recording}");
}
