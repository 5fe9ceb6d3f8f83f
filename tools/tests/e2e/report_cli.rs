//! `barebench report` on a recorded (synthetic) serial log and a fio 3.36 JSON from Linux:
//! the expected Markdown table, CSV and JSON, well-formed SVG charts and PNGs that decode.
#![forbid(unsafe_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn data(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

#[test]
fn report_from_a_log_and_linux_fio() {
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_barebench"))
        .arg("report")
        .arg("-o")
        .arg(out.path())
        .arg(data("tests/data/pi5-synthetic.log"))
        .arg(data("../bench/tests/data/fio-3.36-nvme-randread.json"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));

    let markdown = fs::read_to_string(out.path().join("report.md")).unwrap();
    // Latency columns are lat (submission to completion); the synthetic log has no lat p99, so
    // its p99 is clat's.
    let expected_rows = [
        "| pi5 | sd0 | sd0-read-1m-qd16 | read 1M QD16 | 3 | 43.5 | 43.5 | 367817 | 402653 |",
        "| pi5 | sd0 | sd0-randread-4k-qd1 | randread 4K QD1 | 3 | 11.5 | 2950 | 339 | 612 |",
        "| pi5 | nvme0 | nvme0-read-1m-qd16 | read 1M QD16 | 3 | 418 | 418 | 38260 | 41943 |",
        "| pi5 | nvme0 | nvme0-randread-4k-qd1 | randread 4K QD1 | 3 | 47.3 | 12100 | 81.2 | 112 |",
        "| pi5 | nvme0 | nvme0-randread-4k-qd32 | randread 4K QD32 | 3 | 385 | 98500 | 325 | 520 |",
        "| linux fio (fio-3.36-nvme-randread) | /dev/nvme0n1 | randread-4k-qd1 | randread 4K QD1 | 1 | 53.0 | 13579 | 73.6 | 110 |",
    ];
    for row in expected_rows {
        assert!(markdown.contains(row), "missing {row:?} in\n{markdown}");
    }
    assert_eq!(
        markdown.lines().filter(|line| line.starts_with("| pi5 ") || line.starts_with("| linux fio")).count(),
        8
    );

    let csv = fs::read_to_string(out.path().join("report.csv")).unwrap();
    assert_eq!(csv.lines().count(), 9, "header and 8 rows");
    let json: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(out.path().join("report.json")).unwrap()).unwrap();
    assert_eq!(json["sources"][0]["board"], "pi5");
    assert_eq!(json["sources"][1]["kind"], "linux_fio");

    // fio-plot's layout beside the report: one fio document per job and device.
    for file in ["nvme0/4k/randread-1-1.json", "sd0/1m/read-16-1.json", "nvme0n1/4k/randread-32-1.json"] {
        let path = out.path().join("fio").join(file);
        let document: serde_json::Value = serde_json::from_str(&fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(document["jobs"][0]["job options"]["numjobs"], "1", "{file}");
    }
    for name in ["sequential-mib-s", "random-4k-iops", "latency-qd1-us"] {
        let svg = fs::read_to_string(out.path().join(format!("{name}.svg"))).unwrap();
        let document = roxmltree::Document::parse(&svg).unwrap_or_else(|error| panic!("{name}.svg: {error}"));
        assert_eq!(document.root_element().tag_name().name(), "svg");
        assert!(document.descendants().filter(|node| node.has_tag_name("rect")).count() >= 3, "{name}: bars");
        let png = fs::File::open(out.path().join(format!("{name}.png"))).unwrap();
        let mut reader = png::Decoder::new(std::io::BufReader::new(png)).read_info().unwrap();
        let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
        let frame = reader.next_frame(&mut pixels).unwrap();
        assert!(frame.width > 0 && frame.height > 0);
    }
}

#[test]
fn report_on_a_log_without_results_says_what_is_missing_and_writes_nothing() {
    let out = tempfile::tempdir().unwrap();
    let log = out.path().join("boot-only.log");
    fs::write(&log, "barebench 0.1.0\r\nnvme0: no link\r\n").unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_barebench"))
        .arg("report")
        .arg("-o")
        .arg(out.path().join("report"))
        .arg(&log)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no results in this log") && stderr.contains("nvme0: no link"), "{stderr}");
    assert!(stderr.contains("no results in any input; nothing written"), "{stderr}");
    // No empty report.md, .csv, .json or charts that could pass for results.
    assert!(!out.path().join("report").exists(), "{:?}", fs::read_dir(out.path().join("report")).ok());
}
