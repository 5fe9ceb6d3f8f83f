//! Bar charts of a report, as SVG and PNG (plotters 0.3.7, docs/ecosystem.md §2.3), laid out
//! like the published storage comparisons: per workload the devices side by side, one colour per
//! device (and per source when several inputs are merged), each bar's value written on it, the
//! ratio between the best and the worst device above each group, a logarithmic axis (said on the
//! axis) when values span more than 100×, and a light major grid only. Charts: sequential MiB/s,
//! 4 KiB random IOPS at QD1 and QD32 (as asked; an SD host runs QD32 at QD1), and latency at QD1
//! (mean, p99, p99.9). Text uses DejaVu Sans from the `dejavu` crate (Bitstream Vera licence), so
//! PNG text needs no system font.
#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
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
/// Values spanning more than this factor get a logarithmic axis.
const LOG_SCALE_SPAN: f64 = 100.0;

/// Whether positive `values` span more than [`LOG_SCALE_SPAN`], so that a chart of them takes a
/// logarithmic axis (bar charts here, line charts in surface.rs).
pub(crate) fn spans_log_scale(values: impl Iterator<Item = f64>) -> bool {
    let (min, max) = values.fold((f64::MAX, 0.0f64), |(min, max), v| (min.min(v), max.max(v)));
    max > 0.0 && max / min > LOG_SCALE_SPAN
}
/// Series colours (Tableau 10), in series order.
const SERIES_COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];
/// The major grid: light grey.
const GRID_COLOUR: RGBColor = RGBColor(225, 225, 225);

/// Errors drawing a chart.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    #[error("cannot draw chart {path}: {message}")]
    Draw { path: PathBuf, message: String },
}

/// One grouped bar chart: categories (workloads) along x, one bar per series (device) in each.
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    /// File name without extension.
    pub name: String,
    pub title: String,
    pub y_label: String,
    pub categories: Vec<String>,
    /// (series name, one value per category).
    pub series: Vec<(String, Vec<Option<f64>>)>,
    /// Throughput (higher is better) or latency (lower is better), for the ratio's wording.
    pub higher_is_better: bool,
}

impl BarChart {
    fn values(&self) -> impl Iterator<Item = f64> + '_ {
        self.series.iter().flat_map(|(_, values)| values.iter().flatten().copied()).filter(|v| *v > 0.0)
    }

    /// Whether the positive values span more than [`LOG_SCALE_SPAN`].
    pub fn log_scale(&self) -> bool {
        spans_log_scale(self.values())
    }

    /// The axis title, saying when the axis is logarithmic.
    pub fn axis_label(&self) -> String {
        if self.log_scale() {
            format!("{} (log scale)", self.y_label)
        } else {
            self.y_label.clone()
        }
    }

    /// "nvme0 196× higher than sd0" / "nvme0 12× lower than sd0": the best series of a category against the worst,
    /// when at least two have a value.
    pub fn ratio_label(&self, category_index: usize) -> Option<String> {
        let mut present = self
            .series
            .iter()
            .filter_map(|(name, values)| values[category_index].filter(|v| *v > 0.0).map(|v| (name, v)));
        let first = present.next()?;
        let (mut best, mut worst, mut count) = (first, first, 1);
        for (name, value) in present {
            count += 1;
            let better = if self.higher_is_better { value > best.1 } else { value < best.1 };
            if better {
                best = (name, value);
            }
            let worse = if self.higher_is_better { value < worst.1 } else { value > worst.1 };
            if worse {
                worst = (name, value);
            }
        }
        if count < 2 {
            return None;
        }
        let (ratio, word) =
            if self.higher_is_better { (best.1 / worst.1, "higher") } else { (worst.1 / best.1, "lower") };
        Some(format!("{} {}× {word} than {}", best.0, super::table::figure_text(ratio), worst.0))
    }
}

pub(crate) fn register_font() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // The font bytes are compiled in and valid; a failure would only mean no text.
        let _ = plotters::style::register_font(FONT_FAMILY, FontStyle::Normal, dejavu::sans::regular());
    });
}

/// The series a row belongs to: its device, prefixed with its source when several are merged.
fn series_name(report: &Report, row: &ResultRow) -> String {
    if report.sources.len() > 1 {
        format!("{} {}", row.source, row.device)
    } else {
        row.device.clone()
    }
}

/// What one chart shows.
struct ChartSpec<'a> {
    name: &'a str,
    title: &'a str,
    y_label: &'a str,
    higher_is_better: bool,
}

/// Groups rows into a chart: `bars(row)` gives the (category, value) pairs a row contributes,
/// none when the row is not in this chart.
fn build_chart(
    report: &Report,
    spec: ChartSpec<'_>,
    bars: impl Fn(&ResultRow) -> Vec<(String, Option<f64>)>,
) -> Option<BarChart> {
    let mut categories: Vec<String> = Vec::new();
    // Per category, the devices that ran it at another queue depth than asked.
    let mut notes: Vec<Vec<String>> = Vec::new();
    let mut series: Vec<(String, Vec<Option<f64>>)> = Vec::new();
    for row in report.rows() {
        for (category_name, value) in bars(row) {
            let category_index = match categories.iter().position(|existing| *existing == category_name) {
                Some(index) => index,
                None => {
                    categories.push(category_name);
                    notes.push(Vec::new());
                    for (_, values) in &mut series {
                        values.push(None);
                    }
                    categories.len() - 1
                }
            };
            let note = format!("({} ran at QD{})", row.device, row.iodepth);
            if row.iodepth != row.asked_iodepth() && !notes[category_index].contains(&note) {
                notes[category_index].push(note);
            }
            let name = series_name(report, row);
            let series_index = match series.iter().position(|(existing, _)| *existing == name) {
                Some(index) => index,
                None => {
                    series.push((name, vec![None; categories.len()]));
                    series.len() - 1
                }
            };
            series[series_index].1[category_index] = value;
        }
    }
    for (category, notes) in categories.iter_mut().zip(notes) {
        for note in notes {
            category.push('\n');
            category.push_str(&note);
        }
    }
    (!categories.is_empty()).then(|| BarChart {
        name: spec.name.to_string(),
        title: spec.title.to_string(),
        y_label: spec.y_label.to_string(),
        categories,
        series,
        higher_is_better: spec.higher_is_better,
    })
}

/// The report's charts; a chart with no matching rows is left out.
pub fn charts(report: &Report) -> Vec<BarChart> {
    let throughput = |name, title, y_label| ChartSpec { name, title, y_label, higher_is_better: true };
    let sequential =
        build_chart(report, throughput("sequential-mib-s", "Sequential throughput", "MiB/s"), |row| {
            if row.is_sequential() {
                vec![(row.asked_workload(), Some(row.mib_per_s))]
            } else {
                vec![]
            }
        });
    let random_iops = build_chart(
        report,
        throughput("random-4k-iops", "4 KiB random IOPS at QD1 and QD32", "IOPS"),
        |row| {
            let wanted = row.is_random() && row.block_bytes == 4096 && matches!(row.asked_iodepth(), 1 | 32);
            if wanted {
                vec![(row.asked_workload(), Some(row.iops))]
            } else {
                vec![]
            }
        },
    );
    let latency_spec = ChartSpec {
        name: "latency-qd1-us",
        title: "Latency at QD1 (submission to completion)",
        y_label: "µs",
        higher_is_better: false,
    };
    let latency = build_chart(report, latency_spec, |row| {
        if row.asked_iodepth() != 1 {
            return vec![];
        }
        let workload = row.asked_workload();
        vec![
            (format!("{workload}\nmean"), Some(row.latency_mean_us)),
            (format!("{workload}\np99"), row.latency_p99_us),
            (format!("{workload}\np99.9"), row.latency_p99_9_us),
        ]
    });
    [sequential, random_iops, latency].into_iter().flatten().collect()
}

fn draw_error(path: &Path) -> impl Fn(String) -> ChartError + '_ {
    move |message| ChartError::Draw { path: path.to_path_buf(), message }
}

/// Draws `chart` on a linear or logarithmic axis.
fn draw<DB: DrawingBackend>(chart: &BarChart, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
    let max = chart.values().fold(0.0f64, f64::max);
    if chart.log_scale() {
        let min = chart.values().fold(f64::MAX, f64::min);
        // A decade below the smallest bar's half, so that it still shows.
        let bottom = 10f64.powf((min / 2.0).log10().floor());
        let top = 10f64.powf((max * 6.0).log10().ceil()).min(max * 12.0);
        draw_on_axis(chart, root, (bottom..top).log_scale(), bottom)
    } else {
        let top = if max > 0.0 { max * 1.3 } else { 1.0 };
        draw_on_axis(chart, root, 0f64..top, 0.0)
    }
}

fn draw_on_axis<DB, Y>(
    chart: &BarChart,
    root: &DrawingArea<DB, Shift>,
    y_axis: Y,
    bar_bottom: f64,
) -> Result<(), String>
where
    DB: DrawingBackend,
    Y: AsRangedCoord<Value = f64>,
    Y::CoordDescType: ValueFormatter<f64>,
{
    let to_text = |error: DrawingAreaErrorKind<DB::ErrorType>| error.to_string();
    root.fill(&WHITE).map_err(to_text)?;
    let category_count = chart.categories.len();
    let mut context = ChartBuilder::on(root)
        .caption(&chart.title, (FONT_FAMILY, 24))
        .margin(20)
        .x_label_area_size(60)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..category_count as f64, y_axis)
        .map_err(to_text)?;
    let axis_label = chart.axis_label();
    context
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .bold_line_style(GRID_COLOUR)
        .light_line_style(TRANSPARENT)
        .y_label_formatter(&|value| super::table::figure_text(*value))
        .y_desc(axis_label.as_str())
        .label_style((FONT_FAMILY, 14))
        .axis_desc_style((FONT_FAMILY, 16))
        .draw()
        .map_err(to_text)?;
    let series_count = chart.series.len().max(1);
    let bar_width = GROUP_WIDTH / series_count as f64;
    let value_style =
        TextStyle::from((FONT_FAMILY, 12).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom));
    for (series_index, (series_name, values)) in chart.series.iter().enumerate() {
        let colour = SERIES_COLOURS[series_index % SERIES_COLOURS.len()];
        let bars: Vec<(f64, f64)> = values
            .iter()
            .enumerate()
            .filter_map(|(category_index, value)| {
                let left =
                    category_index as f64 + (1.0 - GROUP_WIDTH) / 2.0 + series_index as f64 * bar_width;
                value.filter(|v| *v > 0.0).map(|value| (left, value))
            })
            .collect();
        context
            .draw_series(bars.iter().map(|(left, value)| {
                Rectangle::new([(*left, bar_bottom), (left + bar_width * 0.95, *value)], colour.filled())
            }))
            .map_err(to_text)?
            .label(series_name.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 14, y + 6)], colour.filled()));
        context
            .draw_series(bars.iter().map(|(left, value)| {
                Text::new(
                    super::table::figure_text(*value),
                    (left + bar_width * 0.475, *value),
                    value_style.clone(),
                )
            }))
            .map_err(to_text)?;
    }
    context
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(GRID_COLOUR)
        .label_font((FONT_FAMILY, 14))
        .draw()
        .map_err(to_text)?;
    let label_style = TextStyle::from((FONT_FAMILY, 13).into_font()).pos(Pos::new(HPos::Center, VPos::Top));
    let ratio_style = TextStyle::from((FONT_FAMILY, 14).into_font())
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    for (category_index, category) in chart.categories.iter().enumerate() {
        // Category names under the axis, one line per text line.
        let (x, y) = context.backend_coord(&(category_index as f64 + 0.5, bar_bottom));
        for (line_index, line) in category.lines().enumerate() {
            root.draw(&Text::new(line.to_string(), (x, y + 6 + 16 * line_index as i32), label_style.clone()))
                .map_err(to_text)?;
        }
        // The ratio above the group's tallest bar.
        let tallest =
            chart.series.iter().filter_map(|(_, values)| values[category_index]).fold(0.0f64, f64::max);
        if let Some(ratio) = chart.ratio_label(category_index) {
            let (x, top) = context.backend_coord(&(category_index as f64 + 0.5, tallest));
            root.draw(&Text::new(ratio, (x, top - 22), ratio_style.clone())).map_err(to_text)?;
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

/// The legend of a line chart (one entry per series) at `position`, on a white box with a
/// black border: the same on the scan, sustained-write and trace charts.
pub(crate) fn draw_line_legend<'a, DB, CT>(
    context: &mut ChartContext<'a, DB, CT>,
    position: SeriesLabelPosition,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate,
{
    context
        .configure_series_labels()
        .position(position)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FONT_FAMILY, 14))
        .draw()
}

#[cfg(test)]
mod tests {
    use super::super::tests::{row, sample_report};
    use super::super::Source;
    use super::*;

    fn one_source(rows: Vec<ResultRow>) -> Report {
        let mut report = sample_report();
        report.sources.truncate(1);
        report.sources[0].rows = rows;
        report
    }

    #[test]
    fn devices_sit_side_by_side_per_workload_one_series_each() {
        let charts = charts(&sample_report());
        let names: Vec<&str> = charts.iter().map(|chart| chart.name.as_str()).collect();
        assert_eq!(names, ["sequential-mib-s", "random-4k-iops", "latency-qd1-us"]);
        let sequential = &charts[0];
        assert_eq!(sequential.categories, ["read 1M QD16"]);
        assert_eq!(
            sequential.series,
            [
                ("pi5 sd0".to_string(), vec![Some(88.4)]),
                ("pi5 nvme0".to_string(), vec![Some(823.7)]),
                ("linux fio /dev/nvme0n1".to_string(), vec![Some(780.1)]),
            ]
        );
        let iops = &charts[1];
        assert_eq!(iops.categories, ["randread 4K QD1", "randread 4K QD32"]);
        let series: Vec<&str> = iops.series.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(series, ["pi5 sd0", "pi5 nvme0"]);
        let latency = &charts[2];
        assert_eq!(
            latency.categories,
            ["randread 4K QD1\nmean", "randread 4K QD1\np99", "randread 4K QD1\np99.9"]
        );
        let sd = &latency.series[0];
        assert_eq!(sd.0, "pi5 sd0");
        let sd_row = &sample_report().sources[0].rows[1];
        assert_eq!(sd.1, [Some(sd_row.latency_mean_us), sd_row.latency_p99_us, sd_row.latency_p99_9_us]);
    }

    #[test]
    fn one_source_names_series_by_device_and_notes_a_device_that_ran_another_depth() {
        let mut clamped = row("pi5", "sd0", "randread", 4096, 1, 3.0);
        clamped.job = "randread:4k:32".to_string();
        let mut nvme = row("pi5", "nvme0", "randread", 4096, 32, 400.0);
        nvme.job = "randread:4k:32".to_string();
        let charts = charts(&one_source(vec![clamped, nvme]));
        let iops = &charts[0];
        assert_eq!(iops.categories, ["randread 4K QD32\n(sd0 ran at QD1)"]);
        let series: Vec<&str> = iops.series.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(series, ["sd0", "nvme0"]);
    }

    #[test]
    fn the_axis_turns_logarithmic_beyond_a_hundredfold_and_says_so() {
        let chart = |values: [f64; 2]| BarChart {
            name: "c".into(),
            title: "t".into(),
            y_label: "IOPS".into(),
            categories: vec!["randread 4K QD32".into()],
            series: vec![("sd0".into(), vec![Some(values[0])]), ("nvme0".into(), vec![Some(values[1])])],
            higher_is_better: true,
        };
        let wide = chart([468.0, 91_968.0]);
        assert!(wide.log_scale());
        assert_eq!(wide.axis_label(), "IOPS (log scale)");
        let narrow = chart([468.0, 46_800.0]);
        assert!(!narrow.log_scale(), "exactly 100× stays linear");
        assert_eq!(narrow.axis_label(), "IOPS");
        assert_eq!(wide.ratio_label(0).as_deref(), Some("nvme0 197× higher than sd0"));
        let latency = BarChart { higher_is_better: false, ..chart([2465.0, 1032.0]) };
        assert_eq!(latency.ratio_label(0).as_deref(), Some("nvme0 2.39× lower than sd0"));
        let alone = BarChart { series: vec![("sd0".into(), vec![Some(1.0)])], ..chart([1.0, 1.0]) };
        assert_eq!(alone.ratio_label(0), None, "no ratio with one device");
    }

    #[test]
    fn a_chart_without_rows_is_left_out() {
        let report = one_source(vec![row("pi5", "sd0", "randwrite", 65536, 4, 3.0)]);
        assert!(charts(&report).is_empty());
    }

    /// The fill colours of the SVG's bars and the texts it writes.
    fn svg_contents(path: &Path) -> (Vec<String>, Vec<String>) {
        let svg = std::fs::read_to_string(path).unwrap();
        let document = roxmltree::Document::parse(&svg).unwrap();
        let fills = document
            .descendants()
            .filter(|node| node.has_tag_name("rect"))
            .filter_map(|node| node.attribute("fill").map(str::to_string))
            .collect();
        let texts = document
            .descendants()
            .filter(|node| node.has_tag_name("text"))
            .filter_map(|node| node.text().map(|text| text.trim().to_string()))
            .collect();
        (fills, texts)
    }

    #[test]
    fn the_svg_has_one_colour_per_device_its_values_and_the_ratio_and_the_png_decodes() {
        let dir = tempfile::tempdir().unwrap();
        let mut sd = row("pi5", "sd0", "randread", 4096, 32, 1.83);
        sd.iops = 468.0;
        let mut nvme = row("pi5", "nvme0", "randread", 4096, 32, 359.25);
        nvme.iops = 91_968.0;
        let chart = &charts(&one_source(vec![sd, nvme]))[0];
        let paths = write_chart(chart, dir.path()).unwrap();
        let (fills, texts) = svg_contents(&paths[0]);
        for expected in
            ["4 KiB random IOPS at QD1 and QD32", "sd0", "nvme0", "468", "91968", "IOPS (log scale)"]
        {
            assert!(texts.iter().any(|text| text == expected), "{expected} in {texts:?}");
        }
        assert!(texts.iter().any(|text| text == "nvme0 197× higher than sd0"), "{texts:?}");
        for colour in &SERIES_COLOURS[..2] {
            let hex = format!("#{:02X}{:02X}{:02X}", colour.0, colour.1, colour.2);
            // One bar and one legend swatch per device.
            assert_eq!(
                fills.iter().filter(|fill| fill.eq_ignore_ascii_case(&hex)).count(),
                2,
                "{hex} in {fills:?}"
            );
        }
        let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&paths[1]).unwrap()));
        let mut reader = decoder.read_info().unwrap();
        let mut pixels = vec![0; reader.output_buffer_size().unwrap()];
        let frame = reader.next_frame(&mut pixels).unwrap();
        assert_eq!((frame.width, frame.height), CHART_SIZE);
        assert!(pixels.iter().any(|byte| *byte != 255), "the PNG is not blank");
    }

    #[test]
    fn merged_sources_keep_their_own_series() {
        let mut report = sample_report();
        report.sources.push(Source { label: "pi4".into(), ..report.sources[0].clone() });
        for row in &mut report.sources[2].rows {
            row.source = "pi4".into();
        }
        let sequential = &charts(&report)[0];
        let series: Vec<&str> = sequential.series.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(series, ["pi5 sd0", "pi5 nvme0", "linux fio /dev/nvme0n1", "pi4 sd0", "pi4 nvme0"]);
    }
}
