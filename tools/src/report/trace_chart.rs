//! The charts of one run's trace (plotters, with the report's font and size: `chart.rs`):
//! latency of every command over the run, the latency histogram with fio's percentiles marked,
//! and the gap between consecutive completions; each as SVG and PNG.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use super::chart::{draw_line_legend, register_font, CHART_SIZE, FONT_FAMILY};
use super::trace::{percentiles_ns, CommandRow, DecodedTrace, TraceError};

/// Bars of the histogram.
const HISTOGRAM_BINS: usize = 60;
/// The percentiles marked on the histogram (of fio's list).
const MARKED_PERCENTILES: [f64; 5] = [50.0, 90.0, 99.0, 99.9, 99.99];

/// What one chart shows.
enum Plot {
    /// (x, y) points: x in ms from the run's start, y in µs.
    Scatter { points: Vec<(f64, f64)>, y_label: &'static str },
    /// Bars over µs with vertical lines at the named percentiles.
    Histogram { bins: Vec<(f64, f64, u64)>, marks: Vec<(String, f64)> },
}

struct TraceChart {
    suffix: &'static str,
    title: String,
    plot: Plot,
}

fn charts(trace: &DecodedTrace) -> Vec<TraceChart> {
    let rows = trace.rows();
    let label = format!("{} {}", trace.device, trace.run);
    let latency = rows.iter().map(|r| (r.complete_ns as f64 / 1e6, r.latency_ns as f64 / 1e3)).collect();
    let mut completions: Vec<u64> = rows.iter().map(|r| r.complete_ns).collect();
    completions.sort_unstable();
    let gaps = completions.windows(2).map(|w| (w[1] as f64 / 1e6, (w[1] - w[0]) as f64 / 1e3)).collect();
    vec![
        TraceChart {
            suffix: "latency",
            title: format!("{label}: latency of every command (submit to completion)"),
            plot: Plot::Scatter { points: latency, y_label: "latency µs" },
        },
        TraceChart {
            suffix: "histogram",
            title: format!("{label}: latency histogram, fio percentiles marked"),
            plot: histogram(&rows),
        },
        TraceChart {
            suffix: "gaps",
            title: format!("{label}: time between consecutive completions"),
            plot: Plot::Scatter { points: gaps, y_label: "gap µs" },
        },
    ]
}

/// Log-spaced bins from the smallest to the largest latency (tails span decades).
fn histogram(rows: &[CommandRow]) -> Plot {
    let latencies: Vec<f64> = rows.iter().map(|r| (r.latency_ns as f64 / 1e3).max(1e-3)).collect();
    let low = latencies.iter().copied().fold(f64::INFINITY, f64::min);
    let high = latencies.iter().copied().fold(0.0, f64::max);
    let (low, high) = if latencies.is_empty() { (1.0, 10.0) } else { (low, high.max(low * 1.01)) };
    let ratio = (high / low).powf(1.0 / HISTOGRAM_BINS as f64);
    let mut counts = vec![0u64; HISTOGRAM_BINS];
    for latency in &latencies {
        let bin = ((latency / low).ln() / ratio.ln()) as usize;
        counts[bin.min(HISTOGRAM_BINS - 1)] += 1;
    }
    let edge = |i: usize| low * ratio.powi(i as i32);
    let bins = counts.iter().enumerate().map(|(i, &c)| (edge(i), edge(i + 1), c)).collect();
    let marks = percentiles_ns(rows)
        .into_iter()
        .filter(|(percent, _)| MARKED_PERCENTILES.contains(percent))
        .map(|(percent, ns)| (format!("p{percent} {:.1} µs", ns as f64 / 1e3), (ns as f64 / 1e3).max(low)))
        .collect();
    Plot::Histogram { bins, marks }
}

fn draw<DB: DrawingBackend>(chart: &TraceChart, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
    let to_text = |error: DrawingAreaErrorKind<DB::ErrorType>| error.to_string();
    root.fill(&WHITE).map_err(to_text)?;
    let builder = |x: std::ops::Range<f64>, y: std::ops::Range<f64>| {
        ChartBuilder::on(root)
            .caption(&chart.title, (FONT_FAMILY, 22))
            .margin(20)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d(x, y)
    };
    match &chart.plot {
        Plot::Scatter { points, y_label } => {
            let x_max = points.iter().map(|p| p.0).fold(0.0, f64::max).max(1e-3);
            let y_max = points.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-3) * 1.1;
            let mut context = builder(0.0..x_max, 0.0..y_max).map_err(to_text)?;
            context
                .configure_mesh()
                .x_desc("time since the run started, ms")
                .y_desc(*y_label)
                .label_style((FONT_FAMILY, 14))
                .draw()
                .map_err(to_text)?;
            let color = Palette99::pick(0).to_rgba();
            context
                .draw_series(points.iter().map(|p| Circle::new(*p, 2, color.filled())))
                .map_err(to_text)?;
        }
        Plot::Histogram { bins, marks } => {
            let x_low = bins.first().map_or(1.0, |b| b.0);
            let x_high = bins.last().map_or(10.0, |b| b.1);
            let y_max = bins.iter().map(|b| b.2).max().unwrap_or(1).max(1) as f64 * 1.15;
            let mut context = ChartBuilder::on(root)
                .caption(&chart.title, (FONT_FAMILY, 22))
                .margin(20)
                .x_label_area_size(50)
                .y_label_area_size(80)
                .build_cartesian_2d((x_low..x_high).log_scale(), 0.0..y_max)
                .map_err(to_text)?;
            context
                .configure_mesh()
                .x_desc("latency µs (log scale)")
                .y_desc("commands")
                .label_style((FONT_FAMILY, 14))
                .draw()
                .map_err(to_text)?;
            let color = Palette99::pick(0).to_rgba();
            context
                .draw_series(
                    bins.iter().map(|&(l, r, c)| Rectangle::new([(l, 0.0), (r, c as f64)], color.filled())),
                )
                .map_err(to_text)?;
            for (index, (name, at)) in marks.iter().enumerate() {
                let mark = Palette99::pick(index + 1).to_rgba();
                context
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(*at, 0.0), (*at, y_max)],
                        mark.stroke_width(2),
                    )))
                    .map_err(to_text)?
                    .label(name.as_str())
                    .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], mark.stroke_width(2)));
            }
            draw_line_legend(&mut context, SeriesLabelPosition::UpperRight).map_err(to_text)?;
        }
    }
    root.present().map_err(to_text)
}

/// Writes the three charts of `trace` into `dir` as `trace-DEV-RUN-{latency,histogram,gaps}`
/// `.svg` and `.png`; returns the paths.
pub fn write_charts(trace: &DecodedTrace, dir: &Path) -> Result<Vec<PathBuf>, TraceError> {
    register_font();
    let mut written = Vec::new();
    for chart in charts(trace) {
        let stem = format!("{}-{}", trace.file_stem(), chart.suffix);
        let svg = dir.join(format!("{stem}.svg"));
        draw(&chart, &SVGBackend::new(&svg, CHART_SIZE).into_drawing_area())
            .map_err(|message| TraceError::Draw { path: svg.clone(), message })?;
        let png = dir.join(format!("{stem}.png"));
        draw(&chart, &BitMapBackend::new(&png, CHART_SIZE).into_drawing_area())
            .map_err(|message| TraceError::Draw { path: png.clone(), message })?;
        written.extend([svg, png]);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bench::trace::WireRecord;

    #[test]
    fn the_three_charts_are_drawn_with_their_titles_and_marks() {
        let records = (0..200u64)
            .map(|i| {
                WireRecord::from_fields(&[
                    i * 100,
                    i * 100 + 1,
                    i * 100 + 50 + i % 7 * 20,
                    i * 8,
                    8,
                    1,
                    i % 64,
                    5,
                    0,
                    0,
                    0,
                ])
                .unwrap()
            })
            .collect();
        let trace = DecodedTrace {
            device: "nvme0".into(),
            run: "job1-run1".into(),
            ticks_per_second: 62_500_000,
            not_kept: 0,
            records,
        };
        let dir = tempfile::tempdir().unwrap();
        let written = write_charts(&trace, dir.path()).unwrap();
        assert_eq!(written.len(), 6);
        let svg = std::fs::read_to_string(dir.path().join("trace-nvme0-job1-run1-histogram.svg")).unwrap();
        let document = roxmltree::Document::parse(&svg).unwrap();
        let texts: Vec<String> = document
            .descendants()
            .filter(|n| n.has_tag_name("text"))
            .filter_map(|n| n.text().map(|t| t.trim().to_string()))
            .collect();
        assert!(
            texts.iter().any(|t| t == "nvme0 job1-run1: latency histogram, fio percentiles marked"),
            "{texts:?}"
        );
        assert!(texts.iter().any(|t| t.starts_with("p99.9 ") && t.ends_with(" µs")), "{texts:?}");
        let png = std::fs::metadata(dir.path().join("trace-nvme0-job1-run1-gaps.png")).unwrap();
        assert!(png.len() > 1000);
    }
}
