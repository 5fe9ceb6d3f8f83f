//! The report as a Markdown table (one row per device and job, like the published Pi storage
//! tables, docs/ecosystem.md §4.2), CSV and JSON.
#![forbid(unsafe_code)]

use std::fmt::Write;

use super::{format_block, Report, ResultRow, SourceKind};

/// A number with a precision that suits its size (3 significant digits, at least).
fn figure(value: f64) -> String {
    if !value.is_finite() {
        return "-".to_string();
    }
    if value == 0.0 {
        return "0".to_string();
    }
    match value.abs() {
        magnitude if magnitude >= 100.0 => format!("{value:.0}"),
        magnitude if magnitude >= 10.0 => format!("{value:.1}"),
        _ => format!("{value:.2}"),
    }
}

/// [`figure`] for other modules (chart value labels).
pub(crate) fn figure_text(value: f64) -> String {
    figure(value)
}

fn optional_figure(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_string(), figure)
}

/// The Markdown report: a table of every row, then what was missing per input.
pub fn markdown(report: &Report) -> String {
    let mut text = String::from("# barebench results\n\n");
    let sources: Vec<String> = report
        .sources
        .iter()
        .map(|source| {
            let kind = match source.kind {
                SourceKind::BarebenchLog => "barebench serial log",
                SourceKind::LinuxFio => "fio JSON from Linux",
            };
            let mut line = format!("- **{}**: {kind} `{}`", source.label, source.path.display());
            for (what, text) in [("conditions", &source.conditions), ("boot", &source.boot)] {
                if let Some(text) = text {
                    line.push_str(&format!(
                        "\n  - {what}: {}",
                        text.strip_prefix("conditions: ").unwrap_or(text)
                    ));
                }
            }
            line
        })
        .collect();
    text.push_str(&sources.join("\n"));
    text.push_str("\n\nMiB/s = 2^20 bytes per second. Latency is total latency (fio's lat: submission to completion) in µs; for inputs without lat percentiles (fio's default) the p99 is fio's clat p99. ");
    text.push_str("Figures are the median of the runs when a job ran more than once.\n\n");
    text.push_str(
        "| Source | Device | Job | Workload | Runs | MiB/s | IOPS | Lat mean (µs) | Lat p99 (µs) | Throttled |\n",
    );
    text.push_str("|---|---|---|---|---:|---:|---:|---:|---:|---|\n");
    for row in report.rows() {
        let _ = writeln!(
            text,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            row.source,
            row.device,
            row.job,
            row.workload(),
            row.runs,
            figure(row.mib_per_s),
            figure(row.iops),
            figure(row.latency_mean_us),
            optional_figure(row.latency_p99_us),
            throttled_cell(row)
        );
    }
    if report.rows().next().is_none() {
        // Scans, sustained writes and hdparm timings have tables of their own (surface.rs).
        let placeholder = if report.has_results() { "(no fio-style jobs)" } else { "(no results found)" };
        text.push_str(&format!("| {placeholder} | | | | | | | | | |\n"));
    }
    if report.rows().any(|row| row.throttled_runs.is_some_and(|runs| runs > 0)) {
        text.push_str(
            "\n**Throttled**: the firmware reported throttling or under-voltage after that many of the \
             row's runs (GET_THROTTLED); their figures may be the throttled SoC's. `-`: not reported.\n",
        );
    }
    let problems: Vec<String> = report
        .sources
        .iter()
        .flat_map(|source| {
            source.problems.iter().map(move |problem| format!("- {}: {problem}", source.label))
        })
        .collect();
    if !problems.is_empty() {
        text.push_str("\n## Missing or incomplete\n\n");
        text.push_str(&problems.join("\n"));
        text.push('\n');
    }
    text
}

/// `yes (2 of 3 runs)`, `no`, or `-` when the input does not say.
fn throttled_cell(row: &ResultRow) -> String {
    match row.throttled_runs {
        None => "-".to_string(),
        Some(0) => "no".to_string(),
        Some(runs) => format!("**yes** ({runs} of {} runs)", row.runs),
    }
}

/// Quotes a CSV field when needed (RFC 4180 §2.6–2.7).
fn csv_field(value: &str) -> String {
    if value.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", value.replace('"', "\"\""))
    } else {
        value.to_string()
    }
}

/// The rows as CSV with a header line; numbers unrounded.
pub fn csv(report: &Report) -> String {
    let mut text = String::from(
        "source,device,job,rw,block_bytes,block,iodepth,runs,mib_per_s,iops,latency_mean_us,latency_p99_us,latency_p99_9_us,errors,throttled_runs\n",
    );
    for row in report.rows() {
        let ResultRow {
            source,
            device,
            job,
            rw,
            block_bytes,
            iodepth,
            runs,
            mib_per_s,
            iops,
            latency_mean_us,
            latency_p99_us,
            latency_p99_9_us,
            errors,
            throttled_runs,
        } = row;
        let _ = writeln!(
            text,
            "{},{},{},{},{block_bytes},{},{iodepth},{runs},{mib_per_s},{iops},{latency_mean_us},{},{},{errors},{}",
            csv_field(source),
            csv_field(device),
            csv_field(job),
            csv_field(rw),
            format_block(*block_bytes),
            latency_p99_us.map(|value| value.to_string()).unwrap_or_default(),
            latency_p99_9_us.map(|value| value.to_string()).unwrap_or_default(),
            throttled_runs.map(|value| value.to_string()).unwrap_or_default()
        );
    }
    text
}

/// The whole report (sources, rows, problems) as pretty JSON.
pub fn json(report: &Report) -> String {
    serde_json::to_string_pretty(report).unwrap_or_else(|error| format!("{{\"error\": \"{error}\"}}"))
}

#[cfg(test)]
mod tests {
    use super::super::tests::sample_report;
    use super::*;

    #[test]
    fn markdown_has_one_row_per_device_and_job() {
        let text = markdown(&sample_report());
        let table_rows: Vec<&str> =
            text.lines().filter(|line| line.starts_with("| ") && !line.starts_with("| Source")).collect();
        assert_eq!(table_rows.len(), 7);
        assert_eq!(
            table_rows[0],
            "| pi5 | sd0 | read-1M-qd16 | read 1M QD16 | 3 | 88.4 | 88.4 | 180995 | 361991 | - |"
        );
        assert!(text.contains("| linux fio | /dev/nvme0n1 |"));
        assert!(text.contains("## Missing or incomplete\n\n- linux fio: one job had no p99"));
    }

    #[test]
    fn throttled_rows_are_marked_and_explained() {
        let mut report = sample_report();
        report.sources[0].rows[0].throttled_runs = Some(2);
        report.sources[0].rows[1].throttled_runs = Some(0);
        let text = markdown(&report);
        assert!(text.contains("| 361991 | **yes** (2 of 3 runs) |"), "{text}");
        assert!(text.contains("| no |"), "{text}");
        assert!(text.contains("**Throttled**: the firmware reported throttling"), "{text}");
        let csv_text = csv(&report);
        assert!(csv_text.lines().nth(1).unwrap().ends_with(",0,2"), "{csv_text}");
        assert!(csv_text.lines().nth(3).unwrap().ends_with(",0,"), "{csv_text}");
        assert!(!markdown(&sample_report()).contains("**Throttled**"));
    }

    #[test]
    fn markdown_says_when_nothing_was_found() {
        let text = markdown(&Report::default());
        assert!(text.contains("(no results found)"));
    }

    #[test]
    fn figures_keep_three_significant_digits() {
        assert_eq!(figure(823.7), "824");
        assert_eq!(figure(48.25), "48.2");
        assert_eq!(figure(1.234), "1.23");
        assert_eq!(figure(f64::NAN), "-");
        assert_eq!(figure(0.0), "0");
    }

    #[test]
    fn csv_has_a_header_and_quotes_when_needed() {
        let mut report = sample_report();
        report.sources[0].rows[0].job = "seq, \"fast\"".to_string();
        let text = csv(&report);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 8);
        assert!(lines[0].starts_with("source,device,job,rw,block_bytes"));
        assert!(
            lines[1].starts_with("pi5,sd0,\"seq, \"\"fast\"\"\",read,1048576,1M,16,3,88.4,"),
            "{}",
            lines[1]
        );
    }

    #[test]
    fn json_round_trips_through_serde() {
        let value: serde_json::Value = serde_json::from_str(&json(&sample_report())).unwrap();
        assert_eq!(value["sources"][0]["rows"][3]["device"], "nvme0");
        assert_eq!(value["sources"][1]["kind"], "linux_fio");
        assert_eq!(value["sources"][1]["rows"][0]["mib_per_s"], 780.1);
    }
}
