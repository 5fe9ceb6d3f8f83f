//! End-to-end: `barebench qemu --profile` under QEMU virt with the TCG plugin
//! (`build/libbarebench_profile.so`, `make profiler`): a short NVMe job's instructions per I/O by
//! function, which add up to the kernel's own `cpu per I/O` line, name the driver's and the
//! benchmark's hot functions, and come with folded stacks a flame-graph tool reads
//! (docs/measurement.md §18). About 5 s.
#![cfg(feature = "e2e")]
#![forbid(unsafe_code)]

use std::fs;
use std::process::Command;

use crate::qemu_harness::{repository_root, scratch_dir};

/// The figure after `label` in `line` ("driver 1039 instr" → 1039).
fn figure_after(line: &str, label: &str) -> f64 {
    let rest = line.split(label).nth(1).unwrap_or_else(|| panic!("{label} in {line}"));
    let text = rest.split_whitespace().next().unwrap();
    text.parse().unwrap_or_else(|_| panic!("{text:?} in {line}"))
}

/// The `cpu per I/O` line after the job table of `job`.
fn cpu_line<'a>(output: &'a str, job: &str) -> &'a str {
    let table = output.split(&format!("results for {job}")).nth(1).unwrap_or_else(|| panic!("{output}"));
    table.lines().find(|line| line.starts_with("nvme0    cpu per I/O: ")).unwrap_or_else(|| panic!("{table}"))
}

/// The table `barebench` printed for `job`, and its rows (function, account, instructions per I/O).
fn table(output: &str, job: &str) -> Vec<(String, &'static str, f64)> {
    let start = format!("profile of nvme0 {job}: ");
    let text = output.split(&start).nth(1).unwrap_or_else(|| panic!("no profile of {job}:\n{output}"));
    let mut account = "";
    let mut rows = Vec::new();
    for line in text.lines().skip(1).take_while(|line| line.starts_with("  ")) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            ["driver", "instr/IO", "share"] => account = "driver",
            ["bookkeeping", "instr/IO", "share"] => account = "bookkeeping",
            ["recording", "instr/IO", "share"] => account = "recording",
            [name @ .., per_io, _share] => rows.push((name.join(" "), account, per_io.parse().unwrap())),
            _ => panic!("{line}"),
        }
    }
    rows
}

#[test]
fn a_profile_of_a_short_nvme_job_adds_up_to_the_cpu_line_and_names_the_hot_functions() {
    let root = repository_root();
    let workdir = scratch_dir().join("profile");
    fs::create_dir_all(&workdir).unwrap();
    let folded = workdir.join("nvme.folded");
    let output = Command::new(env!("CARGO_BIN_EXE_barebench"))
        .current_dir(&root)
        .arg("qemu")
        .args(["--machine", "virt", "--nvme", "32M:pattern", "--timeout", "600"])
        .arg("--workdir")
        .arg(&workdir)
        .arg("--profile")
        .arg(&folded)
        .args([
            "--",
            "devices=nvme0",
            "jobs=randread:4k:1,randread:4k:32",
            "ramp=0",
            "runtime=20ms",
            "runs=1",
        ])
        .args(["offset=0", "size=8m", "nvme.measure=off", "progress=off"])
        .output()
        .expect("run barebench");
    let _ = fs::remove_file(workdir.join("disk-nvme-32MiB-pattern.img"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    for job in ["randread:4k:1", "randread:4k:32"] {
        let line = cpu_line(&stdout, job);
        let rows = table(&stdout, job);
        println!("{job}: {line}");
        for (account, label) in [("driver", "driver"), ("bookkeeping", "bookkeeping")] {
            let measured = figure_after(line, label);
            let total = rows
                .iter()
                .find(|(name, _, _)| *name == format!("{account} total"))
                .unwrap_or_else(|| panic!("no {account} total in {rows:?}"))
                .2;
            let functions: f64 = rows
                .iter()
                .filter(|(name, row_account, _)| *row_account == account && !name.ends_with(" total"))
                .map(|row| row.2)
                .sum();
            println!("  {account}: cpu line {measured}, profile {total:.1} (rows {functions:.1})");
            assert!(
                (total - measured).abs() <= measured * 0.01,
                "{account}: {total} vs {measured}\n{stdout}"
            );
            assert!((functions - total).abs() <= 0.2 + total * 0.001, "{account} rows add up: {rows:?}");
        }
        let named = |account: &str, part: &str| {
            rows.iter().any(|(name, row_account, per_io)| {
                *row_account == account && name.contains(part) && *per_io > 0.0
            })
        };
        // The driver's submission and completion paths and the benchmark's own loop and statistics.
        assert!(named("driver", "drivers::nvme::"), "{rows:?}");
        assert!(named("driver", "submit"), "{rows:?}");
        assert!(named("bookkeeping", "bench::run_loop::"), "{rows:?}");
        assert!(named("bookkeeping", "bench::stats::LatencySums::record"), "{rows:?}");
    }
    // Folded stacks: every line `device;job;account;frames... count`, the driver's under a submit.
    let all = fs::read_to_string(&folded).unwrap();
    let one = fs::read_to_string(workdir.join("nvme.folded-nvme0-randread-4k-1.folded")).unwrap();
    assert!(all.len() > one.len() && all.contains(&one), "the file of all profiles holds each one");
    for line in all.lines() {
        let (stack, count) = line.rsplit_once(' ').unwrap();
        assert!(count.parse::<u64>().unwrap() > 0, "{line}");
        assert!(stack.starts_with("nvme0;randread:4k:"), "{line}");
        assert!(stack.split(';').count() >= 4, "{line}");
    }
    assert!(
        one.lines().any(|line| line.starts_with("nvme0;randread:4k:1;driver;") && line.contains("submit")),
        "{one}"
    );
}
