//! The report's scans, sustained writes and hdparm timings (docs/surface-and-sustained.md §6):
//! a line chart of MiB/s against position, one line per device, with each point's slowest and
//! fastest sample as a band; line charts of a sustained write against time and against bytes
//! written, the cache cliff marked; and their tables in the Markdown. Axes are logarithmic only
//! when the values span more than 100×. Same size and font as the other charts (`chart.rs`).
#![forbid(unsafe_code)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use bench::stream_json::read::{PointReport, ScanReport, SustainedReport};
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::Shift;
use plotters::prelude::*;

use super::chart::{draw_line_legend, register_font, spans_log_scale, ChartError, CHART_SIZE, FONT_FAMILY};
use super::{format_block, Report, BYTES_PER_MIB};

const GIB: f64 = 1024.0 * BYTES_PER_MIB;

/// One line: a device's points as (x, mean, min, max).
#[derive(Debug, Clone, PartialEq)]
pub struct Line {
    pub name: String,
    pub points: Vec<(f64, f64, f64, f64)>,
    /// An x to mark with its label (the cache cliff).
    pub mark: Option<(f64, String)>,
}

/// A line chart.
#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    /// File name without extension.
    pub name: String,
    pub title: String,
    pub x_label: String,
    pub lines: Vec<Line>,
}

impl LineChart {
    fn y_values(&self) -> impl Iterator<Item = f64> + '_ {
        self.lines
            .iter()
            .flat_map(|line| line.points.iter().flat_map(|p| [p.1, p.2, p.3]))
            .filter(|v| *v > 0.0)
    }

    /// Whether the y values span enough for a logarithmic axis ([`spans_log_scale`]).
    pub fn log_scale(&self) -> bool {
        spans_log_scale(self.y_values())
    }
}

/// The series name of a device: with its source when several are merged.
fn series_name(report: &Report, source: &str, device: &str) -> String {
    if report.sources.len() > 1 {
        format!("{source} {device}")
    } else {
        device.to_string()
    }
}

/// Bytes to GiB or MiB: GiB when the largest position is 2 GiB or more.
fn position_unit(largest_bytes: u64) -> (f64, &'static str) {
    if largest_bytes as f64 >= 2.0 * GIB {
        (GIB, "GiB")
    } else {
        (BYTES_PER_MIB, "MiB")
    }
}

fn mean_min_max(point: &PointReport) -> (f64, f64, f64) {
    (point.mib_s, point.min_mib_s, point.max_mib_s)
}

/// The charts of every scan and sustained write in the report.
pub fn charts(report: &Report) -> Vec<LineChart> {
    let mut charts = Vec::new();
    let scans: Vec<(&str, &ScanReport)> = report
        .sources
        .iter()
        .flat_map(|source| source.scans.iter().map(move |scan| (source.label.as_str(), scan)))
        .collect();
    if !scans.is_empty() {
        let largest = scans.iter().map(|(_, scan)| scan.end).max().unwrap_or(0);
        let (unit, unit_name) = position_unit(largest);
        let lines = scans
            .iter()
            .map(|(source, scan)| Line {
                name: series_name(report, source, &scan.device),
                points: scan
                    .series
                    .points
                    .iter()
                    .map(|point| {
                        let (mean, min, max) = mean_min_max(point);
                        ((point.start + point.end) as f64 / 2.0 / unit, mean, min, max)
                    })
                    .collect(),
                mark: None,
            })
            .collect();
        charts.push(LineChart {
            name: "scan-throughput".to_string(),
            title: "Whole-surface read: MiB/s per step against position".to_string(),
            x_label: format!("position on the device, {unit_name}"),
            lines,
        });
    }
    let sustained: Vec<(&str, &SustainedReport)> = report
        .sources
        .iter()
        .flat_map(|source| source.sustained.iter().map(move |run| (source.label.as_str(), run)))
        .collect();
    if !sustained.is_empty() {
        let largest = sustained.iter().map(|(_, run)| run.bytes).max().unwrap_or(0);
        let (unit, unit_name) = position_unit(largest);
        let against = |x_of: &dyn Fn(&PointReport) -> f64,
                       mark_of: &dyn Fn(&SustainedReport) -> Option<f64>| {
            sustained
                .iter()
                .map(|(source, run)| Line {
                    name: series_name(report, source, &run.device),
                    points: run
                        .series
                        .points
                        .iter()
                        .map(|point| {
                            let (mean, min, max) = mean_min_max(point);
                            (x_of(point), mean, min, max)
                        })
                        .collect(),
                    mark: mark_of(run).map(|x| (x, format!("{} cache cliff", run.device))),
                })
                .collect::<Vec<Line>>()
        };
        charts.push(LineChart {
            name: "sustained-time".to_string(),
            title: "Sustained writes: MiB/s each second".to_string(),
            x_label: "time since the first write, s".to_string(),
            lines: against(&|point| (point.start + point.end) as f64 / 2e9, &|run| {
                run.cliff.as_ref().map(|c| c.at_ns as f64 / 1e9)
            }),
        });
        charts.push(LineChart {
            name: "sustained-bytes".to_string(),
            title: "Sustained writes: MiB/s against bytes written".to_string(),
            x_label: format!("written before the second, {unit_name}"),
            lines: against(&|point| point.bytes_before as f64 / unit, &|run| {
                run.cliff.as_ref().map(|c| c.bytes_before as f64 / unit)
            }),
        });
    }
    charts
}

fn draw<DB: DrawingBackend>(chart: &LineChart, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
    let x_max =
        chart.lines.iter().flat_map(|line| line.points.iter().map(|p| p.0)).fold(0.0, f64::max).max(1e-3);
    let y_max = chart.y_values().fold(0.0, f64::max).max(1e-3);
    if chart.log_scale() {
        let y_min = chart.y_values().fold(f64::MAX, f64::min);
        let bottom = 10f64.powf((y_min / 2.0).log10().floor());
        draw_on_axis(chart, root, (x_max, (bottom..y_max * 2.0).log_scale()), (bottom, "MiB/s (log scale)"))
    } else {
        draw_on_axis(chart, root, (x_max, 0.0..y_max * 1.15), (0.0, "MiB/s"))
    }
}

/// Draws the lines, each with its band of slowest to fastest samples and its mark, on a
/// linear or logarithmic y axis whose lowest value is `floor`.
fn draw_on_axis<DB, Y>(
    chart: &LineChart,
    root: &DrawingArea<DB, Shift>,
    (x_max, y_axis): (f64, Y),
    (floor, y_label): (f64, &str),
) -> Result<(), String>
where
    DB: DrawingBackend,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let to_text = |error: DrawingAreaErrorKind<DB::ErrorType>| error.to_string();
    root.fill(&WHITE).map_err(to_text)?;
    let mut context = ChartBuilder::on(root)
        .caption(&chart.title, (FONT_FAMILY, 22))
        .margin(20)
        .x_label_area_size(50)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..x_max * 1.02, y_axis)
        .map_err(to_text)?;
    context
        .configure_mesh()
        .x_desc(chart.x_label.as_str())
        .y_desc(y_label)
        .light_line_style(WHITE)
        .label_style((FONT_FAMILY, 14))
        .draw()
        .map_err(to_text)?;
    let y_top = chart.y_values().fold(0.0, f64::max) * 1.1;
    for (index, line) in chart.lines.iter().enumerate() {
        let colour = Palette99::pick(index).to_rgba();
        // The band between each point's slowest and fastest sample.
        if line.points.iter().any(|p| p.2 != p.3) {
            let band: Vec<(f64, f64)> = line
                .points
                .iter()
                .map(|p| (p.0, p.3.max(floor)))
                .chain(line.points.iter().rev().map(|p| (p.0, p.2.max(floor))))
                .collect();
            context
                .draw_series(std::iter::once(Polygon::new(band, colour.mix(0.18).filled())))
                .map_err(to_text)?;
        }
        let means: Vec<(f64, f64)> = line.points.iter().map(|p| (p.0, p.1.max(floor))).collect();
        context
            .draw_series(LineSeries::new(means, colour.stroke_width(2)))
            .map_err(to_text)?
            .label(line.name.as_str())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], colour.stroke_width(2)));
        if let Some((x, label)) = &line.mark {
            let path = vec![(*x, floor.max(1e-3)), (*x, y_top)];
            context
                .draw_series(std::iter::once(PathElement::new(path, colour.stroke_width(1))))
                .map_err(to_text)?;
            let text = Text::new(label.clone(), (*x, y_top), (FONT_FAMILY, 14));
            context.draw_series(std::iter::once(text)).map_err(to_text)?;
        }
    }
    draw_line_legend(&mut context, SeriesLabelPosition::LowerRight).map_err(to_text)?;
    root.present().map_err(to_text)
}

/// Writes `chart` as `<dir>/<name>.svg` and `.png`; returns both paths.
pub fn write_chart(chart: &LineChart, dir: &Path) -> Result<Vec<PathBuf>, ChartError> {
    register_font();
    let mut written = Vec::new();
    for extension in ["svg", "png"] {
        let path = dir.join(format!("{}.{extension}", chart.name));
        let drawn = match extension {
            "svg" => draw(chart, &SVGBackend::new(&path, CHART_SIZE).into_drawing_area()),
            _ => draw(chart, &BitMapBackend::new(&path, CHART_SIZE).into_drawing_area()),
        };
        drawn.map_err(|message| ChartError::Draw { path: path.clone(), message })?;
        written.push(path);
    }
    Ok(written)
}

/// The Markdown sections of the scans, sustained writes and hdparm timings (empty when none ran).
pub fn markdown(report: &Report) -> String {
    let mut text = String::new();
    let gib = |bytes: u64| bytes as f64 / GIB;
    let scans: Vec<_> =
        report.sources.iter().flat_map(|s| s.scans.iter().map(move |scan| (s, scan))).collect();
    if !scans.is_empty() {
        text.push_str("\n## Whole-surface reads\n\n| source | device | range GiB | step | steps | min MiB/s (at GiB) | mean MiB/s | max MiB/s (at GiB) | slow zones | errors |\n|---|---|---|---|---|---|---|---|---|---|\n");
        for (source, scan) in scans {
            let _ = writeln!(
                text,
                "| {} | {} | {:.3} to {:.3} | {} | {} | {:.1} ({:.3}) | {:.1} | {:.1} ({:.3}) | {} | {} |",
                source.label,
                scan.device,
                gib(scan.start),
                gib(scan.end),
                format_block(scan.step_bytes),
                scan.steps,
                scan.min.mib_s,
                gib(scan.min.offset),
                scan.mean_mib_s,
                scan.max.mib_s,
                gib(scan.max.offset),
                scan.slow_zone_count,
                scan.errors_total
            );
        }
    }
    let sustained: Vec<_> =
        report.sources.iter().flat_map(|s| s.sustained.iter().map(move |run| (s, run))).collect();
    if !sustained.is_empty() {
        text.push_str("\n## Sustained writes\n\n| source | device | bs | QD | seconds | written GiB | mean MiB/s | first seconds MiB/s | cache cliff | steady MiB/s | errors |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
        for (source, run) in sustained {
            let cliff = run.cliff.as_ref().map_or_else(
                || "none".to_string(),
                |cliff| {
                    format!("at {:.0} s after {:.3} GiB", cliff.at_ns as f64 / 1e9, gib(cliff.bytes_before))
                },
            );
            let steady = run.steady_mib_s.map_or_else(|| "-".to_string(), |steady| format!("{steady:.1}"));
            let _ = writeln!(
                text,
                "| {} | {} | {} | {} | {:.1} | {:.3} | {:.1} | {:.1} | {cliff} | {steady} | {} |",
                source.label,
                run.device,
                format_block(run.bs),
                run.iodepth,
                run.elapsed_ns as f64 / 1e9,
                gib(run.bytes),
                run.mean_mib_s,
                run.first_seconds_mib_s,
                run.errors_total
            );
        }
    }
    let hdparm: Vec<_> =
        report.sources.iter().flat_map(|s| s.hdparm.iter().map(move |run| (s, run))).collect();
    if !hdparm.is_empty() {
        text.push_str("\n## hdparm\n\nAs hdparm prints them: its MB is 2^20 bytes (each 2 MiB read counts as 2 MB). `-T` is a copy from memory to memory on bare metal.\n\n| source | device | run | -T (cached) | -t (buffered disk) | -t in MB/s of 10^6 bytes |\n|---|---|---|---|---|---|\n");
        for (source, run) in hdparm {
            let line = |timing: &Option<bench::stream_json::read::TimingReport>| {
                timing.as_ref().map_or_else(|| "-".to_string(), |timing| format!("`{}`", timing.line.trim()))
            };
            let decimal = run
                .buffered
                .as_ref()
                .map_or_else(|| "-".to_string(), |t| format!("{:.2}", t.decimal_mb_per_s));
            let _ = writeln!(
                text,
                "| {} | {} | {} | {} | {} | {decimal} |",
                source.label,
                run.device,
                run.run,
                line(&run.cached),
                line(&run.buffered)
            );
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::super::tests::sample_report;
    use super::*;
    use bench::stream_json::read::{CliffReport, SeriesReport, StepReport};

    fn point(start: u64, end: u64, mib_s: f64, bytes_before: u64) -> PointReport {
        PointReport {
            start,
            end,
            samples: 1,
            bytes: end - start,
            bytes_before,
            mib_s,
            min_mib_s: mib_s * 0.9,
            max_mib_s: mib_s * 1.1,
        }
    }

    #[test]
    fn scans_and_sustained_writes_become_line_charts_and_tables() {
        let mut report = sample_report();
        let mib = 1u64 << 20;
        report.sources[0].scans = vec![ScanReport {
            device: "nvme0".into(),
            start: 0,
            end: 64 * mib,
            step_bytes: 4 * mib,
            steps: 16,
            min: StepReport { offset: 32 * mib, mib_s: 50.0 },
            max: StepReport { offset: 0, mib_s: 400.0 },
            mean_mib_s: 300.0,
            slow_zone_count: 1,
            series: SeriesReport {
                samples_per_point: 1,
                points: (0..16)
                    .map(|i| point(i * 4 * mib, (i + 1) * 4 * mib, if i == 8 { 50.0 } else { 300.0 }, 0))
                    .collect(),
            },
            ..ScanReport::default()
        }];
        report.sources[0].sustained = vec![SustainedReport {
            device: "sd0".into(),
            bs: mib,
            iodepth: 1,
            elapsed_ns: 20_000_000_000,
            bytes: 600 * mib,
            mean_mib_s: 30.0,
            first_seconds_mib_s: 40.0,
            cliff: Some(CliffReport { at_ns: 12_000_000_000, bytes_before: 480 * mib, mib_s: 10.0 }),
            steady_mib_s: Some(12.0),
            series: SeriesReport {
                samples_per_point: 1,
                points: (0..20u64)
                    .map(|s| point(s * 1_000_000_000, (s + 1) * 1_000_000_000, 30.0, s * 30 * mib))
                    .collect(),
            },
            ..SustainedReport::default()
        }];
        let charts = charts(&report);
        let names: Vec<&str> = charts.iter().map(|chart| chart.name.as_str()).collect();
        assert_eq!(names, ["scan-throughput", "sustained-time", "sustained-bytes"]);
        assert_eq!(charts[0].lines[0].points.len(), 16);
        assert_eq!(charts[0].x_label, "position on the device, MiB");
        assert_eq!(charts[1].lines[0].mark.as_ref().map(|mark| mark.0), Some(12.0));
        assert_eq!(charts[2].lines[0].mark.as_ref().map(|mark| mark.0), Some(480.0));
        assert!(!charts[0].log_scale());
        let dir = tempfile::tempdir().unwrap();
        for chart in &charts {
            let written = write_chart(chart, dir.path()).unwrap();
            assert_eq!(written.len(), 2);
        }
        let svg = std::fs::read_to_string(dir.path().join("scan-throughput.svg")).unwrap();
        assert!(svg.contains("Whole-surface read: MiB/s per step against position"));
        assert!(svg.contains("nvme0"));
        let markdown = markdown(&report);
        assert!(markdown.contains("## Whole-surface reads"), "{markdown}");
        assert!(
            markdown.contains("| pi5 | nvme0 | 0.000 to 0.062 | 4M | 16 | 50.0 (0.031) | 300.0 |"),
            "{markdown}"
        );
        assert!(markdown.contains("| at 12 s after 0.469 GiB | 12.0 |"), "{markdown}");
    }

    #[test]
    fn a_scan_whose_steps_span_more_than_a_hundredfold_gets_a_log_axis() {
        let mut report = sample_report();
        let mib = 1u64 << 20;
        let rates = [400.0, 400.0, 2.0, 400.0];
        report.sources[0].scans = vec![ScanReport {
            device: "sd0".into(),
            end: 16 * mib,
            step_bytes: 4 * mib,
            steps: 4,
            series: SeriesReport {
                samples_per_point: 1,
                points: (0..4u64)
                    .map(|i| point(i * 4 * mib, (i + 1) * 4 * mib, rates[i as usize], 0))
                    .collect(),
            },
            ..ScanReport::default()
        }];
        let charts = charts(&report);
        assert!(charts[0].log_scale(), "1.8 to 440 MiB/s");
        let dir = tempfile::tempdir().unwrap();
        write_chart(&charts[0], dir.path()).unwrap();
        let svg = std::fs::read_to_string(dir.path().join("scan-throughput.svg")).unwrap();
        assert!(svg.contains("MiB/s (log scale)"), "the axis says it is logarithmic");
    }
}
