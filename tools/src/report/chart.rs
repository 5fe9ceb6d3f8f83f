//! Bar charts of a report, as SVG and PNG (plotters 0.3.7, docs/ecosystem.md §2.3): sequential MiB/s
//! per device, 4 KiB random IOPS at QD1 and QD32, and QD1 latency mean and p99; one series per
//! source (board or log). Text uses DejaVu Sans from the `dejavu` crate (Bitstream Vera
//! licence), so PNG text needs no system font.

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{Report, ResultRow};

/// Chart size in pixels.
pub(crate) const CHART_SIZE: (u32, u32) = (1100, 620);
/// The font family the charts ask for; registered from the `dejavu` crate.
pub(crate) const FONT_FAMILY: &str = "sans-serif";
/// Share of a category's width that its bars take.
const GROUP_WIDTH: f64 = 0.8;

/// Errors drawing a chart.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    #[error("cannot draw chart {path}: {message}")]
    Draw { path: PathBuf, message: String },
}

/// One bar chart: categories along x, one bar per series in each category.
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    /// File name without extension.
    pub name: String,
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    /// (series name, one value per category).
    pub series: Vec<(String, Vec<Option<f64>>)>,
}

pub(crate) fn register_font() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // The font bytes are compiled in and valid; a failure would only mean no text.
        let _ = plotters::style::register_font(FONT_FAMILY, FontStyle::Normal, dejavu::sans::regular());
    });
}

/// Groups rows into a chart: `category(row)` names the x position (None = not in this chart),
/// `values(row)` gives the bars of that row as (series suffix, value).
fn build_chart(
    report: &Report,
    name: &str,
    title: &str,
    y_label: &str,
    category: impl Fn(&ResultRow) -> Option<String>,
    values: impl Fn(&ResultRow) -> Vec<(&'static str, Option<f64>)>,
) -> Option<BarChart> {
    let mut categories: Vec<String> = Vec::new();
    let mut series: Vec<(String, Vec<Option<f64>>)> = Vec::new();
    for row in report.rows() {
        let Some(category_name) = category(row) else {
            continue;
        };
        let category_index = match categories.iter().position(|existing| *existing == category_name) {
            Some(index) => index,
            None => {
                categories.push(category_name);
                for (_, values) in &mut series {
                    values.push(None);
                }
                categories.len() - 1
            }
        };
        for (suffix, value) in values(row) {
            let series_name =
                if suffix.is_empty() { row.source.clone() } else { format!("{} {suffix}", row.source) };
            let series_index = match series.iter().position(|(existing, _)| *existing == series_name) {
                Some(index) => index,
                None => {
                    series.push((series_name, vec![None; categories.len()]));
                    series.len() - 1
                }
            };
            series[series_index].1[category_index] = value;
        }
    }
    (!categories.is_empty()).then(|| BarChart {
        name: name.to_string(),
        title: title.to_string(),
        y_label: y_label.to_string(),
        categories,
        series,
    })
}

/// The report's charts; a chart with no matching rows is left out.
pub fn charts(report: &Report) -> Vec<BarChart> {
    let sequential = build_chart(
        report,
        "sequential-mib-s",
        "Sequential throughput",
        "MiB/s",
        |row| row.is_sequential().then(|| format!("{}\n{}", row.device, row.workload_and_job())),
        |row| vec![("", Some(row.mib_per_s))],
    );
    let random_iops = build_chart(
        report,
        "random-4k-iops",
        "4 KiB random IOPS at QD1 and QD32",
        "IOPS",
        |row| {
            (row.is_random() && row.block_bytes == 4096 && matches!(row.iodepth, 1 | 32))
                .then(|| format!("{}\n{}", row.device, row.workload_and_job()))
        },
        |row| vec![("", Some(row.iops))],
    );
    let latency = build_chart(
        report,
        "latency-qd1-us",
        "Latency at QD1 (mean and p99, submission to completion)",
        "µs",
        |row| (row.iodepth == 1).then(|| format!("{}\n{}", row.device, row.workload_and_job())),
        |row| vec![("mean", Some(row.latency_mean_us)), ("p99", row.latency_p99_us)],
    );
    [sequential, random_iops, latency].into_iter().flatten().collect()
}

fn draw_error(path: &Path) -> impl Fn(String) -> ChartError + '_ {
    move |message| ChartError::Draw { path: path.to_path_buf(), message }
}

fn draw<DB: DrawingBackend>(chart: &BarChart, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
    let to_text = |error: DrawingAreaErrorKind<DB::ErrorType>| error.to_string();
    root.fill(&WHITE).map_err(to_text)?;
    let y_max = chart
        .series
        .iter()
        .flat_map(|(_, values)| values.iter().flatten())
        .fold(0.0f64, |max, value| max.max(*value));
    let y_top = if y_max > 0.0 { y_max * 1.15 } else { 1.0 };
    let category_count = chart.categories.len();
    let mut context = ChartBuilder::on(root)
        .caption(&chart.title, (FONT_FAMILY, 24))
        .margin(20)
        .x_label_area_size(60)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..category_count as f64, 0f64..y_top)
        .map_err(to_text)?;
    context
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_label_formatter(&|value| super::table::figure_text(*value))
        .y_desc(chart.y_label.as_str())
        .label_style((FONT_FAMILY, 14))
        .axis_desc_style((FONT_FAMILY, 16))
        .draw()
        .map_err(to_text)?;
    let series_count = chart.series.len().max(1);
    let bar_width = GROUP_WIDTH / series_count as f64;
    let value_style =
        TextStyle::from((FONT_FAMILY, 12).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    for (series_index, (series_name, values)) in chart.series.iter().enumerate() {
        let color = Palette99::pick(series_index).to_rgba();
        let bars: Vec<(f64, f64)> = values
            .iter()
            .enumerate()
            .filter_map(|(category_index, value)| {
                let left =
                    category_index as f64 + (1.0 - GROUP_WIDTH) / 2.0 + series_index as f64 * bar_width;
                value.map(|value| (left, value))
            })
            .collect();
        context
            .draw_series(bars.iter().map(|(left, value)| {
                Rectangle::new([(*left, 0.0), (left + bar_width, *value)], color.filled())
            }))
            .map_err(to_text)?
            .label(series_name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], color.filled()));
        context
            .draw_series(bars.iter().map(|(left, value)| {
                Text::new(
                    super::table::figure_text(*value),
                    (left + bar_width / 2.0, *value),
                    value_style.clone(),
                )
            }))
            .map_err(to_text)?;
    }
    context
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT_FAMILY, 14))
        .draw()
        .map_err(to_text)?;
    // Category names under the axis, at the centre of each group, one line per text line.
    let label_style = TextStyle::from((FONT_FAMILY, 13).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    for (category_index, category) in chart.categories.iter().enumerate() {
        let (x, y) = context.backend_coord(&(category_index as f64 + 0.5, 0.0));
        for (line_index, line) in category.lines().enumerate() {
            root.draw(&Text::new(line.to_string(), (x, y + 6 + 16 * line_index as i32), label_style.clone()))
                .map_err(to_text)?;
        }
    }
    root.present().map_err(to_text)
}

/// Writes `chart` as `<dir>/<name>.svg` and `<dir>/<name>.png`; returns both paths.
pub fn write_chart(chart: &BarChart, dir: &Path) -> Result<Vec<PathBuf>, ChartError> {
    register_font();
    let svg_path = dir.join(format!("{}.svg", chart.name));
    {
        let root = SVGBackend::new(&svg_path, CHART_SIZE).into_drawing_area();
        draw(chart, &root).map_err(draw_error(&svg_path))?;
    }
    let png_path = dir.join(format!("{}.png", chart.name));
    {
        let root = BitMapBackend::new(&png_path, CHART_SIZE).into_drawing_area();
        draw(chart, &root).map_err(draw_error(&png_path))?;
    }
    Ok(vec![svg_path, png_path])
}

#[cfg(test)]
mod tests {
    use super::super::tests::{row, sample_report};
    use super::*;

    #[test]
    fn charts_group_rows_by_device_workload_and_source() {
        let charts = charts(&sample_report());
        let names: Vec<&str> = charts.iter().map(|chart| chart.name.as_str()).collect();
        assert_eq!(names, ["sequential-mib-s", "random-4k-iops", "latency-qd1-us"]);
        let sequential = &charts[0];
        assert_eq!(
            sequential.categories,
            ["sd0\nread 1M QD16", "nvme0\nread 1M QD16", "/dev/nvme0n1\nread 1M QD16"]
        );
        assert_eq!(sequential.series.len(), 2);
        assert_eq!(sequential.series[0], ("pi5".to_string(), vec![Some(88.4), Some(823.7), None]));
        assert_eq!(sequential.series[1], ("linux fio".to_string(), vec![None, None, Some(780.1)]));
        let iops = &charts[1];
        assert_eq!(iops.categories.len(), 4);
        let latency = &charts[2];
        let series_names: Vec<&str> = latency.series.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(series_names, ["pi5 mean", "pi5 p99"]);
    }

    #[test]
    fn a_chart_without_rows_is_left_out() {
        let mut report = sample_report();
        report.sources[0].rows = vec![row("pi5", "sd0", "randwrite", 65536, 4, 3.0)];
        report.sources.truncate(1);
        assert!(charts(&report).is_empty());
    }

    #[test]
    fn svg_is_well_formed_and_png_decodes() {
        let dir = tempfile::tempdir().unwrap();
        let chart = &charts(&sample_report())[0];
        let paths = write_chart(chart, dir.path()).unwrap();
        let svg = std::fs::read_to_string(&paths[0]).unwrap();
        let document = roxmltree::Document::parse(&svg).unwrap();
        let texts: Vec<String> = document
            .descendants()
            .filter(|node| node.has_tag_name("text"))
            .filter_map(|node| node.text().map(|text| text.trim().to_string()))
            .collect();
        assert!(texts.iter().any(|text| text == "Sequential throughput"), "{texts:?}");
        assert!(texts.iter().any(|text| text == "nvme0"), "{texts:?}");
        assert!(texts.iter().any(|text| text == "824"), "{texts:?}");
        let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&paths[1]).unwrap()));
        let mut reader = decoder.read_info().unwrap();
        let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
        let frame = reader.next_frame(&mut pixels).unwrap();
        assert_eq!((frame.width, frame.height), CHART_SIZE);
        assert!(pixels.iter().any(|byte| *byte != 255), "the PNG is not blank");
    }
}
