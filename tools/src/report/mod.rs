//! `barebench report`: results from serial logs (bare metal) and fio JSON (Linux) as Markdown,
//! CSV, JSON and bar charts (docs/architecture.md "Output"; docs/ecosystem.md §4.2–4.3 for what readers expect).
#![forbid(unsafe_code)]

pub mod chart;
pub mod family;
pub mod fio_layout;
pub mod input;
pub mod surface;
pub mod table;
pub mod trace;
pub mod trace_chart;

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// Errors writing the report files.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: io::Error },
    #[error(transparent)]
    Chart(#[from] chart::ChartError),
}

/// Reads every input (logs and fio JSON) into one report, labels made unique.
pub fn build_report(inputs: &[PathBuf]) -> Report {
    let mut report = Report { sources: inputs.iter().map(|path| input::load_source(path)).collect() };
    report.make_labels_unique();
    report
}

/// Writes report.md, report.csv, report.json, the charts (SVG and PNG) and fio-plot's layout
/// (`fio/<device>/<bs>/<rw>-<iodepth>-<numjobs>.json`) into `dir`; returns the paths written.
pub fn write_report(report: &Report, dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        fs::write(&path, text).map_err(|source| ReportError::Write { path: path.clone(), source })?;
        Ok::<PathBuf, ReportError>(path)
    };
    fs::create_dir_all(dir).map_err(|source| ReportError::Write { path: dir.to_path_buf(), source })?;
    let family = family::layout(report);
    let mut charts = chart::charts(report);
    charts.extend(family::charts(&family));
    let line_charts = surface::charts(report);
    let mut markdown = table::markdown(report);
    markdown.push_str(&family::markdown(&family));
    markdown.push_str(&surface::markdown(report));
    if !charts.is_empty() || !line_charts.is_empty() {
        markdown.push_str("\n## Charts\n\n");
        let titles = charts.iter().map(|chart| (&chart.title, &chart.name));
        for (title, name) in titles.chain(line_charts.iter().map(|chart| (&chart.title, &chart.name))) {
            markdown.push_str(&format!("![{title}]({name}.svg)\n"));
        }
    }
    let mut written = vec![
        write("report.md", markdown)?,
        write("report.csv", table::csv(report))?,
        write("report.json", table::json(report))?,
    ];
    if !family.series.is_empty() {
        written.push(write("family.csv", family::csv(&family))?);
    }
    for chart in &charts {
        written.extend(chart::write_chart(chart, dir)?);
    }
    for chart in &line_charts {
        written.extend(surface::write_chart(chart, dir)?);
    }
    written.extend(fio_layout::write_fio_layout(report, dir)?);
    Ok(written)
}

/// The report's Markdown without the chart links: the table of every row, then the
/// across-the-family tables when a log ran `preset=matrix` (what `barebench report` prints).
pub fn markdown(report: &Report) -> String {
    let mut text = table::markdown(report);
    text.push_str(&family::markdown(&family::layout(report)));
    text.push_str(&surface::markdown(report));
    text
}

/// Writes each trace's CSV and charts into `dir` and a `traces.md` summary; returns the paths.
pub fn write_traces(traces: &[trace::DecodedTrace], dir: &Path) -> Result<Vec<PathBuf>, trace::TraceError> {
    std::fs::create_dir_all(dir)
        .map_err(|source| trace::TraceError::Write { path: dir.to_path_buf(), source })?;
    let write = |path: PathBuf, text: &str| {
        std::fs::write(&path, text)
            .map_err(|source| trace::TraceError::Write { path: path.clone(), source })?;
        Ok::<PathBuf, trace::TraceError>(path)
    };
    let mut written = Vec::new();
    let mut summary = String::from("# barebench traces\n");
    for trace in traces {
        let stem = trace.file_stem();
        written.push(write(dir.join(format!("{stem}.csv")), &trace::csv(trace))?);
        written.extend(trace_chart::write_charts(trace, dir)?);
        let rows = trace.rows();
        let _ = writeln!(
            summary,
            "\n## {} {}\n\n{} commands ({} more not kept), mean latency {:.1} µs\n\n![latency over time]({stem}-latency.svg)\n![latency histogram]({stem}-histogram.svg)\n![completion gaps]({stem}-gaps.svg)\n\nSlowest commands:\n",
            trace.device,
            trace.run,
            rows.len(),
            trace.not_kept,
            trace::mean_latency_ns(&rows) / 1e3
        );
        for line in trace::slowest(trace, 10) {
            let _ = writeln!(summary, "{line}");
        }
    }
    written.push(write(dir.join("traces.md"), &summary)?);
    Ok(written)
}

/// Bytes in a MiB (the unit of the published Pi benchmark tables, docs/ecosystem.md §4.2).
pub const BYTES_PER_MIB: f64 = 1_048_576.0;

/// One row of the report: one device and job of one source.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResultRow {
    /// The board or log the row comes from (the chart series).
    pub source: String,
    pub device: String,
    /// fio's `jobname`.
    pub job: String,
    /// fio's `rw`: read, write, randread, randwrite, ...
    pub rw: String,
    pub block_bytes: u64,
    pub iodepth: u32,
    /// Runs the figures are the median of (1 = a single run).
    pub runs: u32,
    pub mib_per_s: f64,
    pub iops: f64,
    /// Latency mean (fio's lat, else clat), in microseconds.
    pub latency_mean_us: f64,
    /// Latency 99th percentile (lat, else clat), in microseconds, when known.
    pub latency_p99_us: Option<f64>,
    /// Latency 99.9th percentile (lat, else clat), in microseconds, when known.
    pub latency_p99_9_us: Option<f64>,
    /// Failed I/Os.
    pub errors: u64,
    /// Runs after which the firmware reported throttling or under-voltage (`None`: not
    /// reported, as for Linux fio or logs from before barebench read the throttle flags).
    pub throttled_runs: Option<u32>,
}

impl ResultRow {
    /// Sequential in fio's sense (`rw=read`/`write`/`rw`).
    pub fn is_sequential(&self) -> bool {
        matches!(self.rw.as_str(), "read" | "write" | "rw" | "readwrite")
    }

    /// Random in fio's sense.
    pub fn is_random(&self) -> bool {
        self.rw.starts_with("rand")
    }

    /// `read 1M QD16` style description.
    pub fn workload(&self) -> String {
        format!("{} {} QD{}", self.rw, format_block(self.block_bytes), self.iodepth)
    }

    /// The queue depth the job asked for: barebench's `op:bs:qd` job names it (an SD host runs
    /// such a job at QD1); otherwise the depth that ran.
    pub fn asked_iodepth(&self) -> u32 {
        let asked = self.job.rsplit(':').next().and_then(|depth| depth.parse::<u32>().ok());
        asked.filter(|_| self.job.contains(':')).unwrap_or(self.iodepth)
    }

    /// The workload as asked (`randread 4K QD32`), under which devices are compared side by side.
    pub fn asked_workload(&self) -> String {
        format!("{} {} QD{}", self.rw, format_block(self.block_bytes), self.asked_iodepth())
    }

    /// The workload, naming the job asked for when the device ran it differently (barebench's
    /// `randread:4k:32` clamped to QD1 on an SD host), so that two such rows stay apart.
    pub fn workload_and_job(&self) -> String {
        let asked_depth = self.job.rsplit(':').next().and_then(|depth| depth.parse::<u32>().ok());
        match asked_depth {
            Some(depth) if depth != self.iodepth => format!("{} (job {})", self.workload(), self.job),
            _ => self.workload(),
        }
    }
}

/// A block size the way fio writes it: `4K`, `1M`, `512` (binary units).
pub fn format_block(bytes: u64) -> String {
    const UNITS: [(u32, &str); 3] = [(30, "G"), (20, "M"), (10, "K")];
    for (shift, unit) in UNITS {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// What kind of input a source was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// A barebench serial log (bare metal or QEMU).
    BarebenchLog,
    /// fio JSON from a Linux run on the same hardware.
    LinuxFio,
}

/// One input file and what was found in it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Source {
    /// The label used in tables and charts: the board, or the file name.
    pub label: String,
    pub path: PathBuf,
    pub kind: SourceKind,
    pub board: Option<String>,
    pub rows: Vec<ResultRow>,
    /// What is missing or odd in this input (no results, truncated log, bad JSON...).
    pub problems: Vec<String>,
    /// barebench logs: the `conditions:` sentence (throttling and temperature) and the boot time.
    pub conditions: Option<String>,
    pub boot: Option<String>,
    /// What the console said besides the results (empty for fio JSON).
    pub console: ConsoleFacts,
    /// barebench's whole-surface scans, sustained writes and hdparm timings.
    pub scans: Vec<bench::stream_json::read::ScanReport>,
    pub sustained: Vec<bench::stream_json::read::SustainedReport>,
    pub hdparm: Vec<bench::stream_json::read::HdparmReport>,
}

/// Facts a barebench log states on its console: the board as the banner names it, each
/// device's identity, and the jobs skipped on a device with the reason.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ConsoleFacts {
    /// The banner's `board` line: model and revision, e.g. `Raspberry Pi 4 Model B (revision 0xc03114)`.
    pub board_model: Option<String>,
    /// (device, identity): an SD card's CID, an NVMe controller's model and serial, a USB
    /// drive's strings.
    pub device_identities: Vec<(String, String)>,
    /// (job as asked, device, reason) for each `job JOB skipped on DEVICE: REASON` line.
    pub skipped_jobs: Vec<(String, String, String)>,
}

impl ConsoleFacts {
    /// The identity of `device`, when the console gave one.
    pub fn identity(&self, device: &str) -> Option<&str> {
        self.device_identities.iter().find(|(name, _)| name == device).map(|(_, identity)| identity.as_str())
    }
}

/// The whole report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Report {
    pub sources: Vec<Source>,
}

impl Report {
    pub fn rows(&self) -> impl Iterator<Item = &ResultRow> {
        self.sources.iter().flat_map(|source| source.rows.iter())
    }

    /// Whether any input gave a row, a scan, a sustained write or an hdparm timing.
    pub fn has_results(&self) -> bool {
        self.sources.iter().any(|source| {
            !(source.rows.is_empty()
                && source.scans.is_empty()
                && source.sustained.is_empty()
                && source.hdparm.is_empty())
        })
    }

    /// Labels of the sources, in input order, made unique (`pi4`, `pi4 (2)`).
    pub fn make_labels_unique(&mut self) {
        let mut seen: Vec<String> = Vec::new();
        for source in &mut self.sources {
            let base = source.label.clone();
            let mut label = base.clone();
            let mut count = 1;
            while seen.contains(&label) {
                count += 1;
                label = format!("{base} ({count})");
            }
            if label != base {
                source.label = label.clone();
                for row in &mut source.rows {
                    row.source = label.clone();
                }
            }
            seen.push(label);
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn row(
        source: &str,
        device: &str,
        rw: &str,
        block_bytes: u64,
        iodepth: u32,
        mib_per_s: f64,
    ) -> ResultRow {
        let iops = mib_per_s * BYTES_PER_MIB / block_bytes as f64;
        ResultRow {
            source: source.to_string(),
            device: device.to_string(),
            job: format!("{rw}-{}-qd{iodepth}", format_block(block_bytes)),
            rw: rw.to_string(),
            block_bytes,
            iodepth,
            runs: 3,
            mib_per_s,
            iops,
            latency_mean_us: 1e6 * f64::from(iodepth) / iops,
            latency_p99_us: Some(2e6 * f64::from(iodepth) / iops),
            latency_p99_9_us: Some(3e6 * f64::from(iodepth) / iops),
            errors: 0,
            throttled_runs: None,
        }
    }

    pub(crate) fn sample_report() -> Report {
        let pi5 = vec![
            row("pi5", "sd0", "read", 1 << 20, 16, 88.4),
            row("pi5", "sd0", "randread", 4096, 1, 11.2),
            row("pi5", "sd0", "randread", 4096, 32, 14.9),
            row("pi5", "nvme0", "read", 1 << 20, 16, 823.7),
            row("pi5", "nvme0", "randread", 4096, 1, 48.3),
            row("pi5", "nvme0", "randread", 4096, 32, 402.5),
        ];
        let linux = vec![row("linux fio", "/dev/nvme0n1", "read", 1 << 20, 16, 780.1)];
        Report {
            sources: vec![
                Source {
                    label: "pi5".to_string(),
                    path: PathBuf::from("pi5.log"),
                    kind: SourceKind::BarebenchLog,
                    board: Some("pi5".to_string()),
                    rows: pi5,
                    problems: vec![],
                    conditions: None,
                    boot: None,
                    console: ConsoleFacts::default(),
                    scans: vec![],
                    sustained: vec![],
                    hdparm: vec![],
                },
                Source {
                    label: "linux fio".to_string(),
                    path: PathBuf::from("linux.json"),
                    kind: SourceKind::LinuxFio,
                    board: None,
                    rows: linux,
                    problems: vec!["one job had no p99".to_string()],
                    conditions: None,
                    boot: None,
                    console: ConsoleFacts::default(),
                    scans: vec![],
                    sustained: vec![],
                    hdparm: vec![],
                },
            ],
        }
    }

    #[test]
    fn blocks_format_like_fio() {
        assert_eq!(format_block(4096), "4K");
        assert_eq!(format_block(1 << 20), "1M");
        assert_eq!(format_block(65536), "64K");
        assert_eq!(format_block(512), "512");
        assert_eq!(format_block(1536), "1536");
    }

    #[test]
    fn workloads_are_classified() {
        let sequential = row("a", "sd0", "read", 1 << 20, 16, 1.0);
        assert!(sequential.is_sequential() && !sequential.is_random());
        assert_eq!(sequential.workload(), "read 1M QD16");
        let random = row("a", "sd0", "randread", 4096, 1, 1.0);
        assert!(random.is_random() && !random.is_sequential());
    }

    #[test]
    fn a_clamped_job_is_named_next_to_what_ran() {
        let mut clamped = row("a", "sd0", "randread", 4096, 1, 1.0);
        clamped.job = "randread:4k:32".to_string();
        assert_eq!(clamped.workload_and_job(), "randread 4K QD1 (job randread:4k:32)");
        clamped.job = "randread:4k:1".to_string();
        assert_eq!(clamped.workload_and_job(), "randread 4K QD1");
        let linux = row("linux fio", "/dev/nvme0n1", "randread", 4096, 32, 1.0);
        assert_eq!(linux.workload_and_job(), "randread 4K QD32");
    }

    #[test]
    fn duplicate_labels_are_numbered() {
        let mut report = sample_report();
        report.sources[1].label = "pi5".to_string();
        report.make_labels_unique();
        assert_eq!(report.sources[1].label, "pi5 (2)");
        assert_eq!(report.sources[1].rows[0].source, "pi5 (2)");
        assert_eq!(report.sources[0].label, "pi5");
    }
}
