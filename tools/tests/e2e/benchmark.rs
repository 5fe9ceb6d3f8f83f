//! End-to-end: the benchmark itself under QEMU, on virt's sdhci-pci card and on
//! raspi4b's EMMC2 card, with a short job list: the per-job tables, the summary and the
//! fio-compatible JSON block (read back with `bench::fio_json`, the parser the host tool uses).
#![cfg(feature = "e2e")]
#![forbid(unsafe_code)]

use crate::qemu_harness::{nvme_aio, Machine, Run, TestImage};
use bench::fio_json::{extract_json_from_log, parse_fio_json, FioReport};

const SHORT: &str =
    "jobs=randread:4k:1,read:64k:4 ramp=100ms runtime=400ms runs=2 offset=0 size=8m progress=off";

fn report_from(output: &str) -> FioReport {
    let json = extract_json_from_log(output).unwrap_or_else(|e| panic!("{e:?} in:\n{output}"));
    parse_fio_json(&json).unwrap_or_else(|e| panic!("{e:?} in:\n{json}"))
}

/// Checks the JSON of a two-job, two-run benchmark on one device.
fn check_report(report: &FioReport, device: &str) {
    assert!(report.fio_version.starts_with("barebench-"), "{}", report.fio_version);
    assert_eq!(report.jobs.len(), 4, "2 jobs x 2 runs");
    for job in &report.jobs {
        assert_eq!(job.job_options.get("filename").map(String::as_str), Some(device));
        assert_eq!(job.error, 0, "{}", job.jobname);
        let read = &job.read;
        assert!(read.total_ios > 0, "{} did no I/O", job.jobname);
        assert_eq!(read.io_bytes, read.total_ios * job.settings.block_bytes, "{}", job.jobname);
        // IOPS from the window: total_ios over about 400 ms.
        let expected_iops = read.total_ios as f64 / 0.4;
        assert!(
            (read.iops - expected_iops).abs() / expected_iops < 0.02,
            "{}: {} vs {expected_iops}",
            job.jobname,
            read.iops
        );
        let lat = &read.lat_ns;
        assert!(lat.min > 0 && lat.min <= lat.max, "{}", job.jobname);
        assert!((lat.min as f64) <= lat.mean && lat.mean <= lat.max as f64, "{}", job.jobname);
        let p50 = lat.percentile(50.0).unwrap();
        let p99 = lat.percentile(99.0).unwrap();
        assert!(lat.min <= p50 && p50 <= p99 && p99 <= lat.max, "{}: {p50} {p99}", job.jobname);
    }
    let names: Vec<&str> = report.jobs.iter().map(|j| j.jobname.as_str()).collect();
    assert!(names.contains(&format!("randread-4k-qd1-{device}-run2").as_str()), "{names:?}");
    assert_eq!(report.barebench_medians.len(), 2, "one median per job and device");
}

fn check_tables(output: &str, device: &str) {
    assert!(output.contains("2 jobs × 1 devices × 2 runs"), "{output}");
    for job in ["randread:4k:1", "read:64k:4"] {
        assert!(output.contains(&format!("results for {job}")), "{job}:\n{output}");
    }
    let summary = output.split("summary: medians per device and job").nth(1).expect("a summary");
    assert!(summary.lines().any(|l| l.starts_with(device) && l.contains("randread:4k:1")), "{summary}");
    // The SD host has no command queueing: QD 4 runs at 1, and says so.
    assert!(output.contains(&format!("{device} has no command queueing")), "{output}");
}

#[test]
fn virt_sd_benchmark_prints_tables_and_fio_json() {
    let image = TestImage::full("bench-virt-sd", 16 << 20);
    let run = Run::new(Machine::Virt)
        .append(&format!("exit=semihosting {SHORT}"))
        .args(&["-drive", &format!("if=none,id=sdc,{}", image.drive())])
        .args(&["-device", "sdhci-pci,sd-spec-version=3", "-device", "sd-card,drive=sdc"])
        .go();
    run.assert_status(0);
    check_tables(&run.output, "sd0");
    check_report(&report_from(&run.output), "sd0");
}

#[test]
fn raspi4b_emmc2_benchmark_prints_tables_and_fio_json() {
    let image = TestImage::full("bench-raspi4b", 16 << 20);
    let run = Run::new(Machine::Raspi4b)
        .append(&format!("exit=semihosting {SHORT}"))
        .args(&["-drive", &format!("if=none,id=e2,{}", image.drive())])
        .args(&["-device", "sd-card,drive=e2,bus=/generic-sdhci/sd-bus"])
        .go();
    run.assert_status(0);
    check_tables(&run.output, "sd0");
    let report = report_from(&run.output);
    check_report(&report, "sd0");
    let board = report.barebench.as_ref().and_then(|b| b.board.clone()).unwrap_or_default();
    assert!(board.contains("Raspberry Pi 4"), "{board}");
    // The ARM clock the run was timed at, as the firmware (here QEMU's model) reported it.
    let json = extract_json_from_log(&run.output).unwrap();
    for field in [
        "\"cpu_clock\" : \"cpu clock 700 MHz (measured: firmware did not answer GET_CLOCK_RATE_MEASURED (0x00030047); max 700 MHz)\"",
        "\"cpu_clock_hz\" : \"700000000\"",
        "\"cpu_max_clock_hz\" : \"700000000\"",
    ] {
        assert!(json.contains(field), "{field} missing in:\n{json}");
    }
    check_conditions(&run.output);
}

/// The conditions of a run on QEMU's firmware model (25.0 °C, limit 99.0 °C, never throttled,
/// GET_CLOCK_RATE_MEASURED unanswered: docs/qemu.md §8): the banner's boot split, the readings,
/// the `conditions:` sentence, their JSON keys and `barebench report`'s Throttled column.
fn check_conditions(out: &str) {
    let boot = out.lines().find(|line| line.starts_with("boot ")).unwrap();
    assert!(
        boot.contains("before the kernel (QEMU's system timer, from the emulator's start); kernel "),
        "{boot}"
    );
    assert!(
        out.contains("conditions before the first job: no throttling flags; SoC 25.0 °C (the firmware throttles at 99.0 °C)"),
        "{out}"
    );
    assert!(
        out.contains("\nconditions: no throttling flags before or after the tests; SoC 25.0 °C at the end (max 25.0 °C during)\n"),
        "{out}"
    );
    let value: serde_json::Value = serde_json::from_str(&extract_json_from_log(out).unwrap()).unwrap();
    let conditions = &value["barebench"]["conditions"];
    assert_eq!(conditions["before"]["throttled"], 0);
    assert_eq!(conditions["after"]["temperature_millicelsius"], 25_000);
    assert_eq!(conditions["after"]["temperature_limit_millicelsius"], 99_000);
    assert_eq!(conditions["after"]["clocks"]["arm"]["requested_hz"], 700_000_000u64);
    assert!(conditions["after"]["clocks"]["emmc2"]["measured_hz"].is_null());
    assert_eq!(conditions["after"]["not_answered"][0], "GET_CLOCK_RATE_MEASURED (0x00030047)");
    assert_eq!(conditions["throttled_runs"], 0);
    let boot = &value["barebench"]["boot"];
    assert!(boot["firmware_ms"].as_f64().unwrap() > 0.0, "{boot}");
    let to_banner = boot["kernel_to_banner_ms"].as_f64().unwrap();
    assert!(boot["kernel_to_first_io_ms"].as_f64().unwrap() > to_banner, "{boot}");
    assert_eq!(value["jobs"][1]["barebench"]["conditions"]["throttled_run"], false);
    let (markdown, _) = crate::qemu_harness::report_markdown("bench-raspi4b-report", out);
    assert!(markdown.contains("| Throttled |"), "{markdown}");
    assert!(markdown.lines().any(|line| line.contains("| sd0 |") && line.ends_with("| no |")), "{markdown}");
}

#[test]
fn virt_nvme_and_sd_alternate_and_are_compared() {
    let sd = TestImage::full("bench-virt-pair-sd", 16 << 20);
    let nvme = TestImage::full("bench-virt-pair-nvme", 16 << 20);
    let run = Run::new(Machine::Virt)
        .append(&format!("exit=semihosting {SHORT}"))
        .args(&["-drive", &format!("if=none,id=sdc,{}", sd.drive())])
        .args(&["-device", "sdhci-pci,sd-spec-version=3", "-device", "sd-card,drive=sdc"])
        .args(&["-drive", &format!("if=none,id=nv,{},aio={}", nvme.drive(), nvme_aio())])
        .args(&["-device", "nvme,drive=nv,serial=bench-pair"])
        .go();
    run.assert_status(0);
    let out = &run.output;
    assert!(out.contains("devices: sd0 nvme0"), "{out}");
    // Run 1 goes sd0 then nvme0, run 2 the other way round.
    let position = |needle: &str| out.find(needle).unwrap_or_else(|| panic!("{needle} missing:\n{out}"));
    assert!(position("run 1/2: randread 4k qd1 on sd0") < position("run 1/2: randread 4k qd1 on nvme0"));
    assert!(position("run 2/2: randread 4k qd1 on nvme0") < position("run 2/2: randread 4k qd1 on sd0"));
    // The NVMe queue keeps QD 4; the SD host runs at 1.
    assert!(out.contains("run 1/2: read 64k qd4 on nvme0"), "{out}");
    assert!(out.contains("run 1/2: read 64k qd1 on sd0"), "{out}");
    let ratios = out.split("ratios between sd0 and nvme0").nth(1).expect("a ratio table");
    let row = ratios.lines().find(|l| l.starts_with("randread:4k:1")).expect("a randread row");
    assert!(row.contains("nvme0 "), "QEMU's NVMe path beats its SD path: {row}");
    let report = report_from(out);
    assert_eq!(report.jobs.len(), 8, "2 jobs x 2 devices x 2 runs");
    for device in ["sd0", "nvme0"] {
        let jobs = report.jobs.iter().filter(|j| j.settings.device.as_deref() == Some(device)).count();
        assert_eq!(jobs, 4, "{device}");
    }
    assert_eq!(report.barebench_medians.len(), 4);
}
