//! The across-the-family layout of `barebench report`: the comparison that puts the same microSD
//! card in every Pi model and runs fio's sequential and random reads and writes at 4K, 64K and
//! 1M, iodepth 64 (docs/writes.md, the `matrix` preset), laid out as it publishes it: one table
//! per board with rows sequential read, sequential write, random read, random write and columns
//! 4K, 64K, 1M in MB/s (10^6 bytes per second, as it states), then one chart per test with the
//! boards side by side. A board is named by its banner (model and revision), a card by its CID
//! (an NVMe drive by its model, a USB drive by its strings), so two cards in one board are two
//! series. The cells are the `matrix` jobs exactly (bench::settings::MATRIX_JOBS); a job the
//! board did not run says why (the kernel's `skipped` line), and one that completed no I/O in
//! its window says so rather than showing zero.
#![forbid(unsafe_code)]

use std::fmt::Write as _;

use bench::settings::{JobOperation, JobSpec, MATRIX_JOBS};

use super::chart::BarChart;
use super::{format_block, Report, ResultRow, SourceKind, BYTES_PER_MIB};

/// Bytes per MB: the published tables' unit.
pub const BYTES_PER_MB: f64 = 1_000_000.0;

/// The four tests, in the published row order.
pub const TESTS: [(JobOperation, &str); 4] = [
    (JobOperation::Read, "Sequential read"),
    (JobOperation::Write, "Sequential write"),
    (JobOperation::RandRead, "Random read"),
    (JobOperation::RandWrite, "Random write"),
];

/// The three block sizes, in the published column order.
pub fn block_sizes() -> Vec<u64> {
    let mut sizes: Vec<u64> = MATRIX_JOBS.iter().map(|job| job.block_bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    sizes
}

/// One cell of a board's table.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// MB/s (10^6 B/s), the median of the runs.
    MegabytesPerSecond(f64),
    /// The job ran but completed no I/O in its measured window.
    NoIo,
    /// The kernel skipped the job on this device, for this reason.
    Skipped(String),
    /// Neither a result nor a reason (a run cut short, another preset).
    Missing,
}

impl Cell {
    fn text(&self) -> String {
        match self {
            Cell::MegabytesPerSecond(value) => super::table::figure_text(*value),
            Cell::NoIo => "no I/O".to_string(),
            Cell::Skipped(_) => "not run".to_string(),
            Cell::Missing => "-".to_string(),
        }
    }

    fn value(&self) -> Option<f64> {
        match self {
            Cell::MegabytesPerSecond(value) => Some(*value),
            _ => None,
        }
    }
}

/// One board and card (or drive): a table and a series of the charts.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The banner's model and revision (else the results' board, else the log's name).
    pub board: String,
    pub device: String,
    /// The card's CID (a drive's identity), when the console gave it.
    pub identity: Option<String>,
    /// The report's label of the log it comes from, and the log.
    pub source: String,
    pub log: std::path::PathBuf,
    /// `cells[test][block size]`, in [`TESTS`] and [`block_sizes`] order.
    pub cells: Vec<Vec<Cell>>,
}

impl Series {
    /// The card in a few words: product name and serial number from the CID.
    pub fn card_short(&self) -> String {
        let Some(identity) = &self.identity else { return self.device.clone() };
        let quoted_after = |key: &str| {
            identity
                .split(key)
                .nth(1)
                .and_then(|rest| rest.strip_prefix('"'))
                .and_then(|rest| rest.split('"').next())
        };
        let serial = identity.split("serial ").nth(1).and_then(|rest| rest.split([' ', ',']).next());
        match (quoted_after("product "), serial) {
            (Some(product), Some(serial)) => format!("{product} {serial}"),
            _ => identity.chars().take(40).collect(),
        }
    }

    fn has_results(&self) -> bool {
        self.cells.iter().flatten().any(|cell| matches!(cell, Cell::MegabytesPerSecond(_) | Cell::NoIo))
    }
}

/// The layout: every board and card that ran any of the matrix jobs.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FamilyLayout {
    pub series: Vec<Series>,
    /// Logs of a board and card already shown (the first log of each is).
    pub repeated: Vec<String>,
}

fn matches_job(row: &ResultRow, job: &JobSpec) -> bool {
    if row.job == job.to_string() {
        return true;
    }
    // Logs whose medians carry no job name: the workload as asked.
    row.rw == job.operation.fio_name()
        && row.block_bytes == job.block_bytes
        && row.asked_iodepth() == job.queue_depth
}

/// The matrix job for a test and block size.
fn matrix_job(operation: JobOperation, block_bytes: u64) -> Option<&'static JobSpec> {
    MATRIX_JOBS.iter().find(|job| job.operation == operation && job.block_bytes == block_bytes)
}

/// Lays out every barebench log of `report` that ran matrix jobs.
pub fn layout(report: &Report) -> FamilyLayout {
    let blocks = block_sizes();
    let mut layout = FamilyLayout::default();
    for source in report.sources.iter().filter(|source| source.kind == SourceKind::BarebenchLog) {
        let mut devices: Vec<&str> = source.rows.iter().map(|row| row.device.as_str()).collect();
        devices.extend(source.console.skipped_jobs.iter().map(|(_, device, _)| device.as_str()));
        let mut seen_devices = Vec::new();
        for device in devices {
            if seen_devices.contains(&device) {
                continue;
            }
            seen_devices.push(device);
            let cells: Vec<Vec<Cell>> = TESTS
                .iter()
                .map(|(operation, _)| {
                    blocks.iter().map(|&block_bytes| cell(source, device, *operation, block_bytes)).collect()
                })
                .collect();
            let series = Series {
                board: source
                    .console
                    .board_model
                    .clone()
                    .or_else(|| source.board.clone())
                    .unwrap_or_else(|| source.label.clone()),
                device: device.to_string(),
                identity: source.console.identity(device).map(str::to_string),
                source: source.label.clone(),
                log: source.path.clone(),
                cells,
            };
            if !series.has_results()
                && !series.cells.iter().flatten().any(|cell| matches!(cell, Cell::Skipped(_)))
            {
                continue;
            }
            let repeated = layout.series.iter().any(|shown| {
                (&shown.board, &shown.device, &shown.identity)
                    == (&series.board, &series.device, &series.identity)
            });
            if repeated {
                layout.repeated.push(format!("{} {} (log {})", series.board, series.device, series.source));
            } else {
                layout.series.push(series);
            }
        }
    }
    layout
}

fn cell(source: &super::Source, device: &str, operation: JobOperation, block_bytes: u64) -> Cell {
    let Some(job) = matrix_job(operation, block_bytes) else { return Cell::Missing };
    let row = source.rows.iter().find(|row| row.device == device && matches_job(row, job));
    if let Some(row) = row {
        if row.iops == 0.0 && row.mib_per_s == 0.0 {
            return Cell::NoIo;
        }
        return Cell::MegabytesPerSecond(row.mib_per_s * BYTES_PER_MIB / BYTES_PER_MB);
    }
    let asked = job.to_string();
    source
        .console
        .skipped_jobs
        .iter()
        .find(|(skipped, skipped_device, _)| *skipped == asked && skipped_device == device)
        .map_or(Cell::Missing, |(_, _, reason)| Cell::Skipped(reason.clone()))
}

/// The layout as Markdown: a heading, the unit, then a table per board and card with what was
/// not run and why under it. Empty when no log ran a matrix job.
pub fn markdown(layout: &FamilyLayout) -> String {
    if layout.series.is_empty() {
        return String::new();
    }
    let blocks = block_sizes();
    let depth = MATRIX_JOBS[0].queue_depth;
    let mut text = String::from("\n## Across the family: MB/s per board and card\n\n");
    let _ = writeln!(
        text,
        "MB/s = 10^6 bytes per second, the unit of the published across-the-family comparison (the \
         table above is in MiB/s). Each cell is the median of the runs of `preset=matrix`'s job: \
         sequential and random reads and writes at {} with queue depth {depth} asked (an SD host \
         runs it at depth 1). Boards are named by their banner (model and revision), cards by \
         their CID.",
        blocks.iter().map(|&bytes| format_block(bytes)).collect::<Vec<_>>().join(", ")
    );
    for series in &layout.series {
        let identity = series.identity.as_deref().map(|identity| format!(": {identity}")).unwrap_or_default();
        let _ = writeln!(text, "\n### {}, {}{identity}\n", series.board, series.device);
        text.push_str("| MB/s (10^6 B/s) |");
        for &bytes in &blocks {
            let _ = write!(text, " {} |", format_block(bytes));
        }
        text.push_str("\n|---|");
        text.push_str(&"---:|".repeat(blocks.len()));
        text.push('\n');
        for ((_, name), row) in TESTS.iter().zip(&series.cells) {
            let _ = write!(text, "| {name} |");
            for cell in row {
                let _ = write!(text, " {} |", cell.text());
            }
            text.push('\n');
        }
        let notes = cell_notes(series, &blocks);
        if !notes.is_empty() {
            text.push('\n');
            for note in notes {
                let _ = writeln!(text, "- {note}");
            }
        }
        let _ = writeln!(text, "\nFrom **{}** (`{}`).", series.source, series.log.display());
    }
    if !layout.repeated.is_empty() {
        let _ = writeln!(
            text,
            "\nThe same board and card again, not shown (the first log of each is): {}.",
            layout.repeated.join("; ")
        );
    }
    text
}

/// Why cells hold no figure, one line per reason naming the cells.
fn cell_notes(series: &Series, blocks: &[u64]) -> Vec<String> {
    let mut reasons: Vec<(String, Vec<String>)> = Vec::new();
    for ((_, name), row) in TESTS.iter().zip(&series.cells) {
        for (cell, &bytes) in row.iter().zip(blocks) {
            let reason = match cell {
                Cell::MegabytesPerSecond(_) => continue,
                Cell::NoIo => {
                    "no I/O completed in the measured window (a longer runtime= lets one finish)".to_string()
                }
                Cell::Skipped(reason) => format!("not run: {reason}"),
                Cell::Missing => "no result in the log (another preset, or the log ends early)".to_string(),
            };
            let place = format!("{name} {}", format_block(bytes));
            match reasons.iter_mut().find(|(known, _)| *known == reason) {
                Some((_, cells)) => cells.push(place),
                None => reasons.push((reason, vec![place])),
            }
        }
    }
    reasons.into_iter().map(|(reason, cells)| format!("{}: {reason}", cells.join(", "))).collect()
}

/// One chart per test: the block sizes along x, the boards (and cards) side by side.
pub fn charts(layout: &FamilyLayout) -> Vec<BarChart> {
    if layout.series.is_empty() {
        return Vec::new();
    }
    let blocks = block_sizes();
    let labels = series_labels(&layout.series);
    TESTS
        .iter()
        .enumerate()
        .map(|(test_index, (operation, name))| BarChart {
            name: format!("family-{}", operation.fio_name()),
            title: format!("{name} across the family (preset=matrix, MB/s)"),
            y_label: "MB/s (10^6 B/s)".to_string(),
            categories: blocks.iter().map(|&bytes| format_block(bytes)).collect(),
            series: layout
                .series
                .iter()
                .zip(&labels)
                .map(|(series, label)| {
                    (label.clone(), series.cells[test_index].iter().map(Cell::value).collect())
                })
                .collect(),
            higher_is_better: true,
        })
        .collect()
}

/// Legend labels: the board when every series has the same card (the published case), the card
/// when every series has the same board, else both.
pub fn series_labels(series: &[Series]) -> Vec<String> {
    let same = |key: &dyn Fn(&Series) -> String| series.iter().all(|one| key(one) == key(&series[0]));
    let one_card = same(&|one: &Series| format!("{} {:?}", one.device, one.identity));
    let one_board = same(&|one: &Series| one.board.clone());
    series
        .iter()
        .map(|one| match (one_card, one_board) {
            (true, _) => one.board.clone(),
            (false, true) => format!("{} {}", one.device, one.card_short()),
            (false, false) => format!("{}, {} {}", one.board, one.device, one.card_short()),
        })
        .collect()
}

/// The layout as CSV: board, device, card, test, then MB/s per block size (empty where no figure).
pub fn csv(layout: &FamilyLayout) -> String {
    let blocks = block_sizes();
    let mut text = String::from("board,device,card,test");
    for &bytes in &blocks {
        let _ = write!(text, ",mb_per_s_{}", format_block(bytes));
    }
    text.push('\n');
    for series in &layout.series {
        for ((_, name), row) in TESTS.iter().zip(&series.cells) {
            let quote = |value: &str| format!("\"{}\"", value.replace('"', "\"\""));
            let _ = write!(
                text,
                "{},{},{},{name}",
                quote(&series.board),
                quote(&series.device),
                quote(series.identity.as_deref().unwrap_or(""))
            );
            for cell in row {
                text.push(',');
                if let Some(value) = cell.value() {
                    let _ = write!(text, "{value}");
                }
            }
            text.push('\n');
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// Logs of QEMU runs of `preset=matrix` on four boards (tools/tests/data/family/*.log).
    fn fixture() -> Report {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/family");
        let inputs: Vec<PathBuf> = ["raspi2b", "raspi3b", "raspi4b", "virt", "raspi3b-second-card-reads"]
            .iter()
            .map(|name| dir.join(format!("{name}.log")))
            .collect();
        super::super::build_report(&inputs)
    }

    fn cell_texts(series: &Series) -> Vec<Vec<String>> {
        series.cells.iter().map(|row| row.iter().map(Cell::text).collect()).collect()
    }

    #[test]
    fn each_board_and_card_is_a_series_named_by_banner_and_cid() {
        let layout = layout(&fixture());
        let names: Vec<(String, String)> =
            layout.series.iter().map(|series| (series.board.clone(), series.card_short())).collect();
        assert_eq!(
            names,
            [
                ("Raspberry Pi 2 Model B (revision 0xa21041)".to_string(), "QEMU! 0xdeadbeef".to_string()),
                ("Raspberry Pi 3 Model B (revision 0xa02082)".to_string(), "QEMU! 0xdeadbeef".to_string()),
                ("Raspberry Pi 4 Model B (revision 0xb03115)".to_string(), "QEMU! 0xdeadbeef".to_string()),
                (
                    "QEMU virt (device tree model \"linux,dummy-virt\")".to_string(),
                    "QEMU! 0xdeadbeef".to_string()
                ),
                ("Raspberry Pi 3 Model B (revision 0xa02082)".to_string(), "SN512 0xfff7b17b".to_string()),
            ]
        );
        assert!(layout.repeated.is_empty());
        let labels = series_labels(&layout.series);
        assert_eq!(labels[1], "Raspberry Pi 3 Model B (revision 0xa02082), sd0 QEMU! 0xdeadbeef");
        assert_eq!(labels[4], "Raspberry Pi 3 Model B (revision 0xa02082), sd0 SN512 0xfff7b17b");
    }

    #[test]
    fn cells_are_the_matrix_jobs_in_mb_per_s() {
        let report = fixture();
        let layout = layout(&report);
        let pi2 = &layout.series[0];
        // raspi2b.log's summary: read:4k:64 3.3 MB/s (its median bw_bytes / 10^6).
        let read_4k = report.sources[0].rows.iter().find(|row| row.job == "read:4k:64").unwrap();
        let Cell::MegabytesPerSecond(value) = pi2.cells[0][0] else { panic!("{:?}", pi2.cells[0][0]) };
        assert!((value - read_4k.mib_per_s * BYTES_PER_MIB / 1e6).abs() < 1e-9);
        assert!(value > read_4k.mib_per_s, "MB/s are smaller units than MiB/s");
        for series in &layout.series[..4] {
            for (test, row) in TESTS.iter().zip(cell_texts(series)) {
                assert_eq!(row.len(), 3);
                for text in &row[..2] {
                    assert!(
                        text.parse::<f64>().is_ok_and(|value| value > 0.0),
                        "{} {}: {row:?}",
                        series.board,
                        test.1
                    );
                }
            }
        }
    }

    #[test]
    fn a_job_with_no_io_and_a_skipped_write_say_so() {
        let layout = layout(&fixture());
        // raspi4b.log: randread:1m:64 completed nothing in its 500 ms window.
        assert_eq!(layout.series[2].cells[2][2], Cell::NoIo);
        let reads_only = &layout.series[4];
        assert_eq!(
            cell_texts(reads_only)[1],
            ["not run", "not run", "not run"],
            "sequential writes without write="
        );
        assert!(
            matches!(&reads_only.cells[3][0], Cell::Skipped(reason) if reason.starts_with("write= does not name it"))
        );
        let text = markdown(&layout);
        assert!(text.contains(
            "- Sequential write 4K, Sequential write 64K, Sequential write 1M, Random write 4K, Random write 64K, \
             Random write 1M: not run: write= does not name it"
        ), "{text}");
        assert!(
            text.contains("Random read 1M, Random write 1M: no I/O completed in the measured window"),
            "{text}"
        );
    }

    #[test]
    fn the_markdown_has_one_table_per_board_and_card_in_the_published_shape() {
        let text = markdown(&layout(&fixture()));
        assert!(text.contains("MB/s = 10^6 bytes per second"), "{text}");
        assert_eq!(text.matches("\n### ").count(), 5);
        assert_eq!(text.matches("| MB/s (10^6 B/s) | 4K | 64K | 1M |").count(), 5);
        let pi3 = text
            .split("\n### Raspberry Pi 3 Model B (revision 0xa02082), sd0: card MID 0xaa")
            .nth(1)
            .unwrap();
        let rows: Vec<&str> = pi3
            .lines()
            .filter(|line| line.starts_with("| ") && !line.starts_with("| MB/s"))
            .take(4)
            .collect();
        let names: Vec<&str> = rows.iter().map(|row| row.split('|').nth(1).unwrap().trim()).collect();
        assert_eq!(names, ["Sequential read", "Sequential write", "Random read", "Random write"]);
        assert!(markdown(&FamilyLayout::default()).is_empty());
    }

    #[test]
    fn one_chart_per_test_with_the_boards_side_by_side() {
        let charts = charts(&layout(&fixture()));
        let names: Vec<&str> = charts.iter().map(|chart| chart.name.as_str()).collect();
        assert_eq!(names, ["family-read", "family-write", "family-randread", "family-randwrite"]);
        for chart in &charts {
            assert_eq!(chart.categories, ["4K", "64K", "1M"]);
            assert_eq!(chart.series.len(), 5);
            assert_eq!(chart.y_label, "MB/s (10^6 B/s)");
        }
        // The reads-only log has no write figures.
        assert_eq!(charts[1].series[4].1, [None, None, None]);
    }

    #[test]
    fn the_same_card_in_every_board_is_labelled_by_board_alone() {
        let mut layout = layout(&fixture());
        layout.series.truncate(4);
        let labels = series_labels(&layout.series);
        assert_eq!(labels[0], "Raspberry Pi 2 Model B (revision 0xa21041)");
        let csv = csv(&layout);
        assert!(csv.starts_with("board,device,card,test,mb_per_s_4K,mb_per_s_64K,mb_per_s_1M\n"));
        assert_eq!(csv.lines().count(), 1 + 4 * 4);
        assert!(csv.contains(
            "\"Raspberry Pi 4 Model B (revision 0xb03115)\",\"sd0\",\"card MID 0xaa OEM \"\"XY\"\""
        ));
    }

    #[test]
    fn a_second_log_of_the_same_board_and_card_is_named_not_shown() {
        let mut report = fixture();
        let copy = report.sources[1].clone();
        report.sources.push(copy);
        report.make_labels_unique();
        let layout = layout(&report);
        assert_eq!(layout.series.len(), 5);
        assert_eq!(layout.repeated.len(), 1);
        assert!(
            layout.repeated[0].ends_with("sd0 (log Raspberry Pi 3 Model B (3))"),
            "{:?}",
            layout.repeated
        );
    }
}
