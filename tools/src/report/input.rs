//! Reading the report's inputs: barebench serial logs (the fio-compatible JSON block between
//! the result markers) and fio JSON from Linux runs, through `bench::fio_json`
//! (docs/nvme-and-fio.md §3.5–3.6 for the format; medians preferred when a job ran several times).
#![forbid(unsafe_code)]

use std::fs;
use std::path::Path;

use bench::fio_json::{extract_json_from_log, parse_fio_json, FioDirection, FioReport, LogError};
use bench::{JSON_BEGIN_MARKER, JSON_END_MARKER};

use super::{format_block, ConsoleFacts, ResultRow, Source, SourceKind, BYTES_PER_MIB};

/// Nanoseconds per microsecond.
const NS_PER_US: f64 = 1000.0;

/// Reads one input file; problems (unreadable, no results, truncated) are recorded in the
/// source rather than returned, so the report goes on with the other inputs.
pub fn load_source(path: &Path) -> Source {
    let stem = path.file_stem().map(|stem| stem.to_string_lossy().into_owned()).unwrap_or_default();
    let mut source = Source {
        label: stem.clone(),
        path: path.to_path_buf(),
        kind: SourceKind::BarebenchLog,
        board: None,
        rows: Vec::new(),
        problems: Vec::new(),
        conditions: None,
        boot: None,
        console: ConsoleFacts::default(),
        scans: Vec::new(),
        sustained: Vec::new(),
        hdparm: Vec::new(),
    };
    let text = match fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(error) => {
            source.problems.push(format!("cannot read {}: {error}", path.display()));
            return source;
        }
    };
    let is_log = text.contains(JSON_BEGIN_MARKER) || text.contains(JSON_END_MARKER);
    if !is_log {
        if let Ok(report) = parse_fio_json(&text) {
            if !report.is_barebench() {
                source.kind = SourceKind::LinuxFio;
                source.label = format!("linux fio ({stem})");
            }
            fill_from_report(&mut source, &report);
            return source;
        }
    }
    source.console = console_facts(&text);
    match extract_json_from_log(&text) {
        Ok(json) => match parse_fio_json(&json) {
            Ok(report) => fill_from_report(&mut source, &report),
            Err(error) => source.problems.push(format!("the results block is not valid JSON: {error}")),
        },
        Err(error @ LogError::NoBeginMarker { .. }) => {
            source.problems.push(format!(
                "no results in this log ({error}); the run ended or was cut before printing them. Last line: {:?}",
                last_line(&text)
            ));
            if let Some(explanation) = crate::stages::explain(&text) {
                source.problems.push(explanation);
            }
        }
        Err(error @ LogError::NoEndMarker { .. }) => {
            let partial = partial_report(&text);
            source.problems.push(format!(
                "the results block is truncated ({error}); {} complete job(s) recovered, medians and later jobs missing",
                partial.jobs.len()
            ));
            fill_from_report(&mut source, &partial);
        }
    }
    source
}

/// `firmware 2345.678 ms before the kernel; kernel 12.345 ms to the banner, 4567.890 ms to the
/// first measured I/O` from the JSON's `boot` object (docs/fio-json.md §10).
fn boot_text(boot: &serde_json::Value) -> String {
    let ms = |key: &str| match boot.get(key).and_then(serde_json::Value::as_f64) {
        Some(value) => format!("{value:.3} ms"),
        None => "? ms".to_string(),
    };
    format!(
        "firmware {} before the kernel; kernel {} to the banner, {} to the first measured I/O",
        ms("firmware_ms"),
        ms("kernel_to_banner_ms"),
        ms("kernel_to_first_io_ms")
    )
}

/// The board, the device identities and the skipped jobs, from the console lines the kernel
/// prints (kernel/src/runtime: the banner's `board      MODEL (revision 0xNNNNNN)`, `sdN
/// card MID ...`, `nvme         model "..." serial "..."` before its namespaces `nvmeN`, `usbN
/// port N: ...`; bench's `job JOB skipped on DEVICE: REASON`). The last boot of the log counts.
pub fn console_facts(text: &str) -> ConsoleFacts {
    let boot_start = text
        .rfind("bare-metal storage benchmark")
        .map_or(0, |index| text[..index].rfind('\n').map_or(0, |start| start + 1));
    let mut facts = ConsoleFacts::default();
    let mut nvme_controller: Option<String> = None;
    fn add_identity(facts: &mut ConsoleFacts, device: &str, identity: String) {
        if facts.identity(device).is_none() {
            facts.device_identities.push((device.to_string(), identity));
        }
    }
    for line in text[boot_start..].lines() {
        let line = line.rsplit('\r').find(|part| !part.trim().is_empty()).unwrap_or("").trim_end();
        let Some((word, rest)) = line.split_once(' ') else { continue };
        let rest = rest.trim_start();
        match word {
            "board" if facts.board_model.is_none() => facts.board_model = Some(rest.to_string()),
            "nvme" => {
                if let Some(model) = rest.strip_prefix("model ") {
                    nvme_controller = Some(model.to_string());
                }
            }
            "job" => {
                if let Some((job, after)) = rest.split_once(" skipped on ") {
                    if let Some((device, reason)) = after.split_once(": ") {
                        facts.skipped_jobs.push((job.to_string(), device.to_string(), reason.to_string()));
                    }
                }
            }
            device if numbered(device, "sd") => {
                if let Some(cid) = rest.strip_prefix("card ") {
                    add_identity(&mut facts, device, format!("card {cid}"));
                }
            }
            device if numbered(device, "nvme") => {
                if let Some(controller) = &nvme_controller {
                    add_identity(&mut facts, device, format!("model {controller}"));
                }
            }
            device if numbered(device, "usb") && rest.starts_with("port ") => {
                add_identity(&mut facts, device, rest.to_string());
            }
            _ => {}
        }
    }
    facts
}

/// Whether `word` is a device name `PREFIX<number>` (`sd0`, `nvme1`), not `sd0:` or `sdhci`.
fn numbered(word: &str, prefix: &str) -> bool {
    word.strip_prefix(prefix).is_some_and(|number| number.parse::<u32>().is_ok())
}

fn last_line(text: &str) -> String {
    text.lines()
        .rev()
        .flat_map(|line| line.rsplit('\r'))
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("")
        .chars()
        .take(120)
        .collect()
}

/// The complete job objects before the cut of a truncated results block, with the document's
/// header (`"fio version"`, `"global options"`, the top-level `"barebench"` object) when it came
/// before the jobs: the complete parts are cut out and parsed as a document of their own.
fn partial_report(log: &str) -> FioReport {
    let Some(begin) = log.rfind(JSON_BEGIN_MARKER) else {
        return FioReport::default();
    };
    let block = &log[begin + JSON_BEGIN_MARKER.len()..];
    let Some(jobs_key) = block.find("\"jobs\"") else {
        return FioReport::default();
    };
    let Some(array_start) = block[jobs_key..].find('[').map(|offset| jobs_key + offset + 1) else {
        return FioReport::default();
    };
    let mut complete_jobs: Vec<&str> = Vec::new();
    let mut rest = &block[array_start..];
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
        if !rest.starts_with('{') {
            break;
        }
        let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<serde::de::IgnoredAny>();
        match stream.next() {
            Some(Ok(_)) => {
                let end = stream.byte_offset();
                complete_jobs.push(&rest[..end]);
                rest = &rest[end..];
            }
            _ => break,
        }
    }
    let header = block[..jobs_key].trim().trim_end_matches(',').trim_end();
    let jobs = complete_jobs.join(",");
    let with_header = format!("{header}, \"jobs\": [{jobs}]}}");
    let bare = format!("{{\"jobs\": [{jobs}]}}");
    let header_usable = header.starts_with('{') && header.len() > 1;
    header_usable
        .then(|| parse_fio_json(&with_header).ok())
        .flatten()
        .or_else(|| parse_fio_json(&bare).ok())
        .unwrap_or_default()
}

/// Rows from a parsed document: the medians when present, otherwise one row per job and
/// direction that did I/O.
pub fn fill_from_report(source: &mut Source, report: &FioReport) {
    if let Some(board) = report.barebench.as_ref().and_then(|info| info.board.clone()) {
        source.label = board.clone();
        source.board = Some(board);
    }
    if let Some(info) = &report.barebench {
        let sentence = info.other.get("conditions").and_then(|conditions| conditions.get("sentence"));
        source.conditions = sentence.and_then(serde_json::Value::as_str).map(str::to_string);
        source.boot = info.other.get("boot").map(boot_text);
    }
    source.scans.clone_from(&report.barebench_scan);
    source.sustained.clone_from(&report.barebench_sustained);
    source.hdparm.clone_from(&report.barebench_hdparm);
    let streams_only = !(report.barebench_scan.is_empty()
        && report.barebench_sustained.is_empty()
        && report.barebench_hdparm.is_empty());
    if streams_only && report.jobs.is_empty() {
        return;
    }
    if !report.barebench_medians.is_empty() {
        for median in &report.barebench_medians {
            let job = if median.job.is_empty() {
                // Older logs: the first run's name of a job that ran this way on this device.
                report
                    .jobs
                    .iter()
                    .find(|job| {
                        job.settings.device.as_deref() == Some(median.device.as_str())
                            && job.settings.rw == median.rw
                            && job.settings.block_bytes == median.bs
                            && job.settings.queue_depth == median.iodepth
                    })
                    .map(|job| job_label(&job.jobname, &median.device))
                    .unwrap_or_else(|| {
                        format!("{}-{}-qd{}", median.rw, format_block(median.bs), median.iodepth)
                    })
            } else {
                median.job.clone()
            };
            // Logs from before lat percentiles were written have only clat's.
            let p99_ns = if median.lat_p99_ns > 0.0 { median.lat_p99_ns } else { median.clat_p99_ns };
            let p99 = (p99_ns > 0.0).then_some(p99_ns / NS_PER_US);
            let p99_9_ns = if median.lat_p99_9_ns > 0.0 { median.lat_p99_9_ns } else { median.clat_p99_9_ns };
            let p99_9 = (p99_9_ns > 0.0).then_some(p99_9_ns / NS_PER_US);
            source.rows.push(ResultRow {
                source: source.label.clone(),
                device: median.device.clone(),
                job,
                rw: median.rw.clone(),
                block_bytes: median.bs,
                iodepth: median.iodepth,
                runs: median.runs,
                mib_per_s: median.bw_bytes / BYTES_PER_MIB,
                iops: median.iops,
                latency_mean_us: median.lat_mean_ns / NS_PER_US,
                latency_p99_us: p99,
                latency_p99_9_us: p99_9,
                errors: median.errors_total,
                throttled_runs: median.throttled_runs,
            });
        }
        return;
    }
    if report.jobs.is_empty() {
        source.problems.push("the results hold no jobs".to_string());
    }
    for job in &report.jobs {
        let settings = &job.settings;
        let mixed = matches!(settings.rw.as_str(), "rw" | "readwrite" | "randrw" | "trimwrite");
        let directions = [("read", &job.read), ("write", &job.write)];
        let mut any = false;
        for (direction_name, direction) in directions {
            if direction.total_ios == 0 && direction.io_bytes == 0 {
                continue;
            }
            any = true;
            let rw = if mixed { format!("{}:{direction_name}", settings.rw) } else { settings.rw.clone() };
            let (latency_mean_us, latency_p99_us, latency_p99_9_us) = latency_us(direction);
            if latency_p99_us.is_none() {
                source.problems.push(format!("job {}: no 99th percentile latency in the input", job.jobname));
            }
            source.rows.push(ResultRow {
                source: source.label.clone(),
                device: settings.device.clone().unwrap_or_else(|| "-".to_string()),
                job: job.jobname.clone(),
                rw,
                block_bytes: settings.block_bytes,
                iodepth: settings.queue_depth,
                runs: 1,
                mib_per_s: direction.bw_bytes as f64 / BYTES_PER_MIB,
                iops: direction.iops,
                latency_mean_us,
                latency_p99_us,
                latency_p99_9_us,
                errors: job.barebench.as_ref().map_or(u64::from(job.error != 0), |extra| extra.errors_total),
                throttled_runs: job
                    .barebench
                    .as_ref()
                    .and_then(|extra| extra.conditions.as_ref())
                    .map(|conditions| u32::from(conditions.throttled_run)),
            });
        }
        if !any {
            source.problems.push(format!("job {} did no I/O (fio error {})", job.jobname, job.error));
        }
    }
}

/// Latency mean, p99 and p99.9 in µs: total latency (fio's `lat`, submission to completion; what
/// barebench's console shows) when the input has it, else completion latency (`clat`). fio
/// reports percentiles for `lat` only with `lat_percentiles=1`, so the p99 falls back to clat's.
fn latency_us(direction: &FioDirection) -> (f64, Option<f64>, Option<f64>) {
    let mean_ns = if direction.lat_ns.samples > 0 || direction.lat_ns.mean > 0.0 {
        direction.lat_ns.mean
    } else {
        direction.clat_ns.mean
    };
    let percentile_us = |percent: f64| {
        let ns = direction.lat_ns.percentile(percent).or_else(|| direction.clat_ns.percentile(percent));
        ns.map(|ns| ns as f64 / NS_PER_US)
    };
    (mean_ns / NS_PER_US, percentile_us(99.0), percentile_us(99.9))
}

/// barebench's job names are `rw-bs-qdN-DEVICE-runN` (one per run); a row covers all runs of
/// one device, so it keeps the `rw-bs-qdN` part: the job as it was asked for.
fn job_label(jobname: &str, device: &str) -> String {
    match jobname.find(&format!("-{device}-run")) {
        Some(end) => jobname[..end].to_string(),
        None => jobname.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIO_SAMPLE: &str = include_str!("../../../bench/tests/data/fio-3.36-nvme-randread.json");
    const BAREBENCH_LOG: &str = include_str!("../../tests/data/pi5-synthetic.log");

    fn write_temp(name: &str, text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(name);
        fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn linux_fio_json_gives_one_row_per_job() {
        let (_dir, path) = write_temp("pi5-nvme.json", FIO_SAMPLE);
        let source = load_source(&path);
        assert_eq!(source.kind, SourceKind::LinuxFio);
        assert_eq!(source.label, "linux fio (pi5-nvme)");
        assert_eq!(source.rows.len(), 3);
        let qd1 = &source.rows[1];
        assert_eq!(qd1.job, "randread-4k-qd1");
        assert_eq!(qd1.device, "/dev/nvme0n1");
        assert_eq!((qd1.block_bytes, qd1.iodepth, qd1.runs), (4096, 1, 1));
        assert!((qd1.iops - 13_579.142_086).abs() < 1e-6);
        assert!((qd1.mib_per_s - 55_620_165.0 / BYTES_PER_MIB).abs() < 1e-9);
        assert!((qd1.latency_mean_us - 73.556_847_281).abs() < 1e-9, "lat mean, not clat");
        assert_eq!(qd1.latency_p99_us, Some(110.08));
        assert!(source.problems.is_empty(), "{:?}", source.problems);
    }

    #[test]
    fn a_barebench_log_uses_the_medians_and_the_board() {
        let (_dir, path) = write_temp("run1.log", BAREBENCH_LOG);
        let source = load_source(&path);
        assert_eq!(source.kind, SourceKind::BarebenchLog);
        assert_eq!(source.label, "pi5");
        assert_eq!(source.board.as_deref(), Some("pi5"));
        let rows: Vec<(String, String, u32)> =
            source.rows.iter().map(|row| (row.device.clone(), row.workload(), row.runs)).collect();
        assert_eq!(
            rows,
            [
                ("sd0".to_string(), "read 1M QD16".to_string(), 3),
                ("sd0".to_string(), "randread 4K QD1".to_string(), 3),
                ("nvme0".to_string(), "read 1M QD16".to_string(), 3),
                ("nvme0".to_string(), "randread 4K QD1".to_string(), 3),
                ("nvme0".to_string(), "randread 4K QD32".to_string(), 3),
            ]
        );
        let nvme_qd1 = &source.rows[3];
        assert_eq!(nvme_qd1.job, "nvme0-randread-4k-qd1");
        assert!((nvme_qd1.iops - 12_100.0).abs() < 1e-9);
        assert_eq!(nvme_qd1.latency_p99_us, Some(112.5));
        // lat's mean; the synthetic log has no lat p99, so the p99 is clat's.
        assert!((nvme_qd1.latency_mean_us - 81.15).abs() < 1e-9);
    }

    #[test]
    fn a_log_without_results_says_so() {
        let (_dir, path) = write_temp("boot.log", "barebench 0.1.0\r\nsd0: card init failed\r\n");
        let source = load_source(&path);
        assert!(source.rows.is_empty());
        assert_eq!(source.problems.len(), 1);
        assert!(source.problems[0].contains("no results"), "{:?}", source.problems);
        assert!(source.problems[0].contains("sd0: card init failed"));
    }

    #[test]
    fn the_conditions_sentence_and_the_boot_time_come_with_the_source() {
        let log = format!(
            "{}\n{{\"fio version\" : \"barebench-0.1.0\", \"jobs\" : [], \"barebench\" : {{\"version\" : \"0.1.0\", \
             \"board\" : \"pi4\", \"conditions\" : {{\"sentence\" : \"conditions: no throttling flags before or after the tests\"}}, \
             \"boot\" : {{\"firmware_ms\" : 2345.678, \"kernel_to_banner_ms\" : 12.5, \"kernel_to_first_io_ms\" : 4567.0}}}}}}\n{}\n",
            JSON_BEGIN_MARKER, JSON_END_MARKER
        );
        let (_dir, path) = write_temp("pi4.log", &log);
        let source = load_source(&path);
        assert_eq!(
            source.conditions.as_deref(),
            Some("conditions: no throttling flags before or after the tests")
        );
        assert_eq!(
            source.boot.as_deref(),
            Some("firmware 2345.678 ms before the kernel; kernel 12.500 ms to the banner, 4567.000 ms to the first measured I/O")
        );
        let markdown = super::super::table::markdown(&super::super::Report { sources: vec![source] });
        assert!(
            markdown.contains("  - conditions: no throttling flags before or after the tests"),
            "{markdown}"
        );
        assert!(markdown.contains("  - boot: firmware 2345.678 ms before the kernel"), "{markdown}");
    }

    #[test]
    fn a_log_cut_after_a_stage_marker_names_the_stage_and_what_to_check() {
        let (_dir, path) = write_temp(
            "pi5.log",
            "barebench 0.1.0\r\nstage: memory map\r\nstage: pcie1 bring-up\r\npcie1 link training\r\n",
        );
        let source = load_source(&path);
        assert_eq!(source.problems.len(), 2, "{:?}", source.problems);
        assert!(
            source.problems[1].starts_with("the log ends in `stage: pcie1 bring-up`"),
            "{:?}",
            source.problems
        );
        assert!(source.problems[1].contains("pcie=off"));
    }

    #[test]
    fn a_truncated_log_keeps_the_complete_jobs() {
        let end = BAREBENCH_LOG.find("\"jobname\" : \"nvme0-read-1m-qd16\"").unwrap();
        let (_dir, path) = write_temp("cut.log", &BAREBENCH_LOG[..end + 10]);
        let source = load_source(&path);
        assert_eq!(source.label, "pi5", "the top-level barebench object came before the jobs");
        let devices: Vec<&str> = source.rows.iter().map(|row| row.device.as_str()).collect();
        assert!(!devices.is_empty() && devices.iter().all(|device| *device == "sd0"), "{devices:?}");
        assert!(source.problems.iter().any(|problem| problem.contains("truncated")), "{:?}", source.problems);
    }

    #[test]
    fn the_console_names_the_board_each_device_and_the_skipped_jobs_of_the_last_boot() {
        let console = "barebench 0.1.0: bare-metal storage benchmark\r\nboard      Raspberry Pi 2 Model B (revision 0xa21041)\r\n\
             sd0        card MID 0x27 OEM \"PH\" product \"SD16G\"\r\n\
             \r\nbarebench 0.1.0: bare-metal storage benchmark\r\nboard      QEMU virt (device tree model \"linux,dummy-virt\")\r\n\
             sd0        card MID 0xaa OEM \"XY\" product \"QEMU!\" rev 0.1 serial 0xdeadbeef made 2006-02\r\n\
             sd0        capacity 67108864 bytes\r\nsd0: 1 MiB read in 302827 µs\r\n\
             nvme         model \"QEMU NVMe Ctrl\", serial \"barebench0\", firmware \"10.0.2\"\r\n\
             nvme0      namespace 1: 67108864 bytes\r\n\
             usb0       port 1: SuperSpeed 5 Gb/s, 46f4:0001 \"QEMU\" \"QEMU USB HARDDRIVE\"\r\n\
             usb0       SCSI \"QEMU\" \"QEMU HARDDISK\"\r\n\
             job write:4k:64 skipped on sd0: write= does not name it (write and mixed jobs need write=DEV)\r\n";
        let facts = console_facts(console);
        assert_eq!(facts.board_model.as_deref(), Some("QEMU virt (device tree model \"linux,dummy-virt\")"));
        assert_eq!(
            facts.identity("sd0"),
            Some("card MID 0xaa OEM \"XY\" product \"QEMU!\" rev 0.1 serial 0xdeadbeef made 2006-02")
        );
        assert_eq!(
            facts.identity("nvme0"),
            Some("model \"QEMU NVMe Ctrl\", serial \"barebench0\", firmware \"10.0.2\"")
        );
        assert_eq!(
            facts.identity("usb0"),
            Some("port 1: SuperSpeed 5 Gb/s, 46f4:0001 \"QEMU\" \"QEMU USB HARDDRIVE\"")
        );
        assert_eq!(
            facts.skipped_jobs,
            [(
                "write:4k:64".to_string(),
                "sd0".to_string(),
                "write= does not name it (write and mixed jobs need write=DEV)".to_string()
            )]
        );
        let (_dir, path) = write_temp("virt.log", console);
        assert_eq!(load_source(&path).console, facts);
    }

    #[test]
    fn an_unreadable_input_is_a_problem_not_a_failure() {
        let source = load_source(Path::new("/nonexistent/x.log"));
        assert!(source.rows.is_empty());
        assert!(source.problems[0].contains("cannot read"));
    }
}
