//! End-to-end: the tools people read fio results with, on a QEMU virt run of the real kernel
//! (an NVMe drive and an SD card, json+): `barebench report` writes fio-plot's layout and its
//! own charts, fio-plot 1.1.21 (PyPI, in a cached virtual environment) renders `-l`, `-H` and `-C`
//! charts from it, and fio's `fio_jsonplus_clat2csv` (Debian's `fio`) turns the json+ bins
//! into a CSV whose totals match the run (docs/fio-json.md §7).
#![cfg(feature = "e2e")]
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::qemu_harness::{nvme_aio, Machine, Run, TestImage};
use serde_json::Value;

const SETTINGS: &str = "jobs=randread:4k:1,randread:4k:32 ramp=100ms runtime=600ms runs=3 \
     sample_interval=100ms output=json+ offset=0 size=8m progress=off";

/// The virtual environment with fio-plot: `BAREBENCH_VENV`, else ~/.cache/barebench/venv, made
/// here when `make deps` has not made it.
fn fio_plot_environment() -> PathBuf {
    let dir = std::env::var_os("BAREBENCH_VENV").map(PathBuf::from).unwrap_or_else(|| {
        let home = std::env::var_os("HOME").expect("HOME or BAREBENCH_VENV must be set to find fio-plot");
        Path::new(&home).join(".cache/barebench/venv")
    });
    if dir.join("bin/fio-plot").exists() && dir.join("bin/python").exists() {
        return dir;
    }
    let created = Command::new("python3").arg("-m").arg("venv").arg(&dir).status();
    let installed = created.is_ok_and(|status| status.success())
        && Command::new(dir.join("bin/pip"))
            .args(["install", "-q", "fio-plot==1.1.21", "six"])
            .status()
            .is_ok_and(|status| status.success());
    assert!(
        installed && dir.join("bin/fio-plot").exists(),
        "fio-plot 1.1.21 is not installed in {} and could not be installed there (python3 -m venv, \
         then pip install fio-plot==1.1.21 six, from PyPI); run `make deps`",
        dir.display()
    );
    dir
}

/// fio's json+ converter from Debian's `fio` package.
fn clat2csv() -> PathBuf {
    let path = PathBuf::from("/usr/bin/fio_jsonplus_clat2csv");
    assert!(path.exists(), "fio_jsonplus_clat2csv is missing (Debian package fio; `make deps` installs it)");
    path
}

fn run_tool(command: &mut Command) -> String {
    let output = command.output().unwrap_or_else(|error| panic!("{command:?}: {error}"));
    let text =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "{command:?} failed:\n{text}");
    text
}

/// A PNG that decodes to a picture of some size with more than one colour.
fn assert_picture(path: &Path) {
    let file = std::fs::File::open(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    let mut reader = png::Decoder::new(std::io::BufReader::new(file)).read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
    let frame = reader.next_frame(&mut pixels).unwrap();
    assert!(
        frame.width >= 400 && frame.height >= 300,
        "{}: {}x{}",
        path.display(),
        frame.width,
        frame.height
    );
    let first = &pixels[..4];
    assert!(pixels.chunks(4).any(|pixel| pixel != first), "{} is blank", path.display());
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn fio_plot_and_clat2csv_read_a_qemu_run() {
    let venv = fio_plot_environment();
    let converter = clat2csv();
    let sd = TestImage::full("fio-consumers-sd", 16 << 20);
    let nvme = TestImage::full("fio-consumers-nvme", 16 << 20);
    let run = Run::new(Machine::Virt)
        .append(&format!("exit=semihosting {SETTINGS}"))
        .args(&["-drive", &format!("if=none,id=sdc,{}", sd.drive())])
        .args(&["-device", "sdhci-pci,sd-spec-version=3", "-device", "sd-card,drive=sdc"])
        .args(&["-drive", &format!("if=none,id=nv,{},aio={}", nvme.drive(), nvme_aio())])
        .args(&["-device", "nvme,drive=nv,serial=fio-consumers"])
        .go();
    run.assert_status(0);

    let out = tempfile::tempdir().unwrap();
    let log = out.path().join("virt.log");
    std::fs::write(&log, &run.output).unwrap();
    let report_dir = out.path().join("report");
    run_tool(
        Command::new(env!("CARGO_BIN_EXE_barebench")).arg("report").arg("-o").arg(&report_dir).arg(&log),
    );

    // fio-plot's layout: both depths for NVMe; the SD card ran QD32 at QD1, which keeps a
    // directory of its own beside its QD1 job.
    let fio = report_dir.join("fio");
    for file in [
        "nvme0/4k/randread-1-1.json",
        "nvme0/4k/randread-32-1.json",
        "sd0/4k/randread-1-1.json",
        "sd0/4k-asked-qd32/randread-1-1.json",
    ] {
        assert!(fio.join(file).exists(), "{file} missing");
    }
    assert!(!fio.join("sd0/4k/randread-32-1.json").exists());
    let asked32 = read_json(&fio.join("sd0/4k-asked-qd32/randread-1-1.json"));
    assert_eq!(asked32["jobs"][0]["barebench"]["requested_queue_depth"], 32, "{asked32}");
    let qd32 = read_json(&fio.join("nvme0/4k/randread-32-1.json"));
    let job = &qd32["jobs"][0];
    let read = &job["read"];
    let total_ios = read["total_ios"].as_u64().unwrap();
    assert!(total_ios > 100, "{total_ios}");
    let samples = read["iops_samples"].as_u64().unwrap();
    assert!((1..=6).contains(&samples), "600 ms in 100 ms intervals: {samples}");
    assert_eq!(job["iodepth_level"]["32"].as_f64().map(|share| share > 50.0), Some(true), "{job}");

    let plot = |arguments: &[&str], name: &str| {
        let png = out.path().join(name);
        let mut command = Command::new(venv.join("bin/fio-plot"));
        command.current_dir(&report_dir).args(arguments).arg("-o").arg(&png);
        run_tool(&mut command);
        assert_picture(&png);
    };
    let common = ["-r", "randread", "-n", "1"];
    plot(&[&["-i", "fio/nvme0/4k", "-T", "nvme0 4k", "-l", "-d", "1", "32"][..], &common].concat(), "l.png");
    plot(&[&["-i", "fio/nvme0/4k", "-T", "nvme0 4k", "-H", "-d", "1"][..], &common].concat(), "h.png");
    plot(
        &[&["-i", "fio/nvme0/4k", "fio/sd0/4k", "-T", "nvme0 vs sd0", "-C", "-d", "1"][..], &common].concat(),
        "c.png",
    );
    plot(
        &[&["-i", "fio/sd0/4k", "fio/sd0/4k-asked-qd32", "-T", "sd0 asked QD1 and QD32", "-C", "-d", "1"][..], &common]
            .concat(),
        "c-sd0.png",
    );

    // fio_jsonplus_clat2csv: its CSV's counts are the run's, and its own check passes.
    let python = venv.join("bin/python");
    let csv = out.path().join("clat.csv");
    let source = fio.join("nvme0/4k/randread-32-1.json");
    run_tool(Command::new(&python).arg(&converter).arg(&source).arg(&csv));
    let validated = run_tool(Command::new(&python).arg(&converter).arg(&source).arg(&csv).arg("--validate"));
    assert!(validated.contains("validated"), "{validated}");
    let table = std::fs::read_to_string(out.path().join("clat_job0.csv")).unwrap();
    let mut lines = table.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').map(str::trim).collect();
    for kind in ["clat", "lat"] {
        let count_column = header.iter().position(|name| *name == format!("read_{kind}_ns_count")).unwrap();
        let cumulative_column = count_column + 1;
        let mut count_sum = 0u64;
        let mut last_cumulative = 0u64;
        for line in table.lines().skip(1) {
            let cells: Vec<&str> = line.split(',').map(str::trim).collect();
            if let Ok(count) = cells[count_column].parse::<u64>() {
                count_sum += count;
                last_cumulative = cells[cumulative_column].parse().unwrap();
            }
        }
        assert_eq!(count_sum, total_ios, "{kind} counts");
        assert_eq!(last_cumulative, total_ios, "{kind} cumulative");
        assert_eq!(read[format!("{kind}_ns")]["N"].as_u64(), Some(total_ios));
    }

    // barebench's own charts: one series per device, in the devices' order, with the values.
    let svg = std::fs::read_to_string(report_dir.join("random-4k-iops.svg")).unwrap();
    let document = roxmltree::Document::parse(&svg).unwrap();
    let texts: Vec<String> = document
        .descendants()
        .filter(|node| node.has_tag_name("text"))
        .filter_map(|node| node.text())
        .map(|t| t.trim().to_string())
        .collect();
    for device in ["sd0", "nvme0"] {
        assert!(texts.iter().any(|text| text == device), "legend entry {device} in {texts:?}");
    }
    assert!(texts.iter().any(|text| text.contains("× higher")), "the ratio is written: {texts:?}");
    assert_picture(&report_dir.join("random-4k-iops.png"));
    assert_picture(&report_dir.join("latency-qd1-us.png"));
}
