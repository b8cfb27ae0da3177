//! `--plot FILE.svg`: a benchmark's results drawn with plotters' SVG backend (text is
//! emitted as SVG `<text>`, so no font files are needed to write it).
//!
//! A figure is a title, one or more stacked [`Chart`]s and a footer (machine, commit).
//! A chart draws each [`Series`] as a line with markers against a categorical x axis (the
//! thread counts, group sizes or transaction sizes that ran, evenly spaced as in the
//! papers' figures), as bars when only one x value ran, or against a linear axis (time).
//! The legend sits beside the plot, so it never hides a line. The drawing is the `plot`
//! feature (on by default); a `--no-default-features` binary refuses `--plot`.

// Without the drawing, the charts' fields are written and never read.
#![cfg_attr(not(feature = "plot"), allow(dead_code))]

use std::path::Path;

#[cfg(feature = "plot")]
use plotters::coord::ranged1d::SegmentValue;
#[cfg(feature = "plot")]
use plotters::coord::Shift;
#[cfg(feature = "plot")]
use plotters::element::DashedPathElement;
#[cfg(feature = "plot")]
use plotters::prelude::*;
#[cfg(feature = "plot")]
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// One line (or bar): a variant's points (x, y).
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// How the x values are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XAxis {
    /// The distinct x values that ran, evenly spaced (threads, group sizes...).
    Categories,
    /// A linear axis (time).
    Linear,
}

/// A horizontal reference line (a bound, a budget).
#[derive(Debug, Clone)]
pub struct HLine {
    pub name: String,
    pub y: f64,
}

/// One panel of a figure.
#[derive(Debug, Clone)]
pub struct Chart {
    /// The panel's caption: what is fixed in it (workload, mix, options).
    pub caption: String,
    /// The x axis, with its unit.
    pub x_label: String,
    /// The y axis, with its unit.
    pub y_label: String,
    /// What a series is (protocol, engine, structure...): the x axis of a bar chart.
    pub variant_label: String,
    pub x: XAxis,
    pub series: Vec<Series>,
    pub hlines: Vec<HLine>,
}

impl Chart {
    pub fn new(caption: impl Into<String>, x_label: &str, y_label: &str, variant_label: &str) -> Self {
        Chart {
            caption: caption.into(),
            x_label: x_label.into(),
            y_label: y_label.into(),
            variant_label: variant_label.into(),
            x: XAxis::Categories,
            series: Vec::new(),
            hlines: Vec::new(),
        }
    }

    /// Adds point (x, y) to the series `name`, creating it (in order of first appearance).
    pub fn push(&mut self, name: &str, x: f64, y: f64) {
        match self.series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push((x, y)),
            None => self.series.push(Series { name: name.into(), points: vec![(x, y)] }),
        }
    }
}

#[cfg(feature = "plot")]
/// Distinct colours (Tableau 20: the ten strong ones, then their light shades, drawn
/// with hollow markers).
const COLOURS: [RGBColor; 20] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
    RGBColor(174, 199, 232),
    RGBColor(255, 187, 120),
    RGBColor(152, 223, 138),
    RGBColor(255, 152, 150),
    RGBColor(197, 176, 213),
    RGBColor(196, 156, 148),
    RGBColor(247, 182, 210),
    RGBColor(199, 199, 199),
    RGBColor(219, 219, 141),
    RGBColor(158, 218, 229),
];

#[cfg(feature = "plot")]
fn colour(i: usize) -> RGBColor {
    COLOURS[i % COLOURS.len()]
}

#[cfg(feature = "plot")]
const FONT: &str = "sans-serif";
#[cfg(feature = "plot")]
const WIDTH: u32 = 1200;
#[cfg(feature = "plot")]
const PANEL_HEIGHT: u32 = 560;
#[cfg(feature = "plot")]
const LEGEND_WIDTH: u32 = 300;

#[cfg(feature = "plot")]
type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

#[cfg(feature = "plot")]
fn err(e: impl std::fmt::Display) -> String {
    format!("drawing the plot: {e}")
}

#[cfg(feature = "plot")]
/// Writes `charts`, stacked, under `title`, with `footer` in small print, to `path`.
pub fn write_svg(path: &Path, title: &str, footer: &str, charts: &[Chart]) -> Result<(), String> {
    if charts.is_empty() || charts.iter().all(|c| c.series.iter().all(|s| s.points.is_empty())) {
        return Err("--plot: there is no result to draw".into());
    }
    let height = 70 + 30 + PANEL_HEIGHT * charts.len() as u32;
    {
        let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (top, rest) = root.split_vertically(70);
        top.draw(&Text::new(
            title.to_string(),
            ((WIDTH / 2) as i32, 20),
            TextStyle::from((FONT, 30).into_font()).pos(Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(err)?;
        let (body, foot) = rest.split_vertically(PANEL_HEIGHT * charts.len() as u32);
        foot.draw(&Text::new(footer.to_string(), (10, 8), (FONT, 15).into_font().color(&RGBColor(90, 90, 90))))
            .map_err(err)?;
        for (panel, chart) in body.split_evenly((charts.len(), 1)).iter().zip(charts) {
            // The caption, wrapped, above the plot and the legend.
            let lines = wrap(&chart.caption, 100);
            let (head, panel) = panel.split_vertically(12 + 24 * lines.len() as u32);
            for (k, line) in lines.iter().enumerate() {
                head.draw(&Text::new(
                    line.clone(),
                    (((WIDTH - LEGEND_WIDTH) / 2) as i32, 10 + 24 * k as i32),
                    TextStyle::from((FONT, 19).into_font()).pos(Pos::new(HPos::Center, VPos::Top)),
                ))
                .map_err(err)?;
            }
            let (plot, legend) = panel.split_horizontally(WIDTH - LEGEND_WIDTH);
            let xs = distinct_x(chart);
            match chart.x {
                XAxis::Linear => draw_linear(&plot, chart)?,
                XAxis::Categories if xs.is_empty() => {}
                XAxis::Categories if xs.len() == 1 => draw_bars(&plot, chart, xs[0])?,
                XAxis::Categories => draw_lines(&plot, chart, &xs)?,
            }
            draw_legend(&legend, chart)?;
        }
        root.present().map_err(err)?;
    }
    Ok(())
}

#[cfg(feature = "plot")]
/// Splits `text` into lines of at most about `width` characters, at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split(' ') {
        match lines.last_mut() {
            Some(l) if l.chars().count() + 1 + word.chars().count() <= width => {
                l.push(' ');
                l.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

#[cfg(feature = "plot")]
fn distinct_x(chart: &Chart) -> Vec<f64> {
    let mut xs: Vec<f64> = chart.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    xs
}

/// Numbers as people read them: 1.25M, 350k, 12.5.
pub fn si(v: f64) -> String {
    let a = v.abs();
    let (x, suffix) = if a >= 1e9 {
        (v / 1e9, "G")
    } else if a >= 1e6 {
        (v / 1e6, "M")
    } else if a >= 1e3 {
        (v / 1e3, "k")
    } else {
        (v, "")
    };
    let s = if x.abs() >= 100.0 || x.fract() == 0.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    };
    let s = if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s };
    format!("{s}{suffix}")
}

/// A binary built without the `plot` feature (`--no-default-features`) draws nothing;
/// `OutputArgs::check` refuses `--plot` there before a benchmark runs.
#[cfg(not(feature = "plot"))]
pub fn write_svg(_path: &Path, _title: &str, _footer: &str, _charts: &[Chart]) -> Result<(), String> {
    Err(NOT_BUILT.into())
}

/// Why `--plot` is refused by a binary built without plots.
#[cfg(not(feature = "plot"))]
pub const NOT_BUILT: &str =
    "--plot: this binary was built without plots (the `plot` feature, on by default; `--no-default-features` leaves it out)";

#[cfg(feature = "plot")]
/// The y axis: linear from 0, or logarithmic (drawn as log10 of the values) when the
/// values span more than 50x, so that a 1-record transaction's rate is not flattened
/// beside a 100-record one's.
struct YScale {
    log: bool,
    lo: f64,
    hi: f64,
}

#[cfg(feature = "plot")]
impl YScale {
    fn of(chart: &Chart) -> Self {
        let ys: Vec<f64> = chart
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .chain(chart.hlines.iter().map(|h| h.y))
            .collect();
        let max = ys.iter().copied().fold(0.0f64, f64::max);
        let min_pos = ys.iter().copied().filter(|y| *y > 0.0).fold(f64::INFINITY, f64::min);
        if ys.iter().all(|y| *y > 0.0) && max / min_pos > 50.0 {
            YScale { log: true, lo: min_pos.log10().floor(), hi: max.log10().ceil() }
        } else {
            YScale { log: false, lo: 0.0, hi: if max > 0.0 { max * 1.12 } else { 1.0 } }
        }
    }
    fn map(&self, y: f64) -> f64 {
        if self.log {
            y.max(f64::MIN_POSITIVE).log10()
        } else {
            y
        }
    }
    fn label(&self, v: f64) -> String {
        si(if self.log { 10f64.powf(v) } else { v })
    }
    fn desc(&self, chart: &Chart) -> String {
        if self.log {
            format!("{} (log scale)", chart.y_label)
        } else {
            chart.y_label.clone()
        }
    }
}

#[cfg(feature = "plot")]
/// Light-shaded series have hollow markers.
fn marker<C>(i: usize, at: C, c: RGBColor) -> Circle<C, i32> {
    if i % COLOURS.len() < 10 {
        Circle::new(at, 5, c.filled())
    } else {
        Circle::new(at, 5, c.stroke_width(2))
    }
}

#[cfg(feature = "plot")]
/// Lines with markers over evenly spaced x values.
fn draw_lines(area: &Area, chart: &Chart, xs: &[f64]) -> Result<(), String> {
    let y = YScale::of(chart);
    let n = xs.len() as i32;
    let mut c = ChartBuilder::on(area)
        .margin(16)
        .x_label_area_size(56)
        .y_label_area_size(90)
        .build_cartesian_2d((0..n - 1).into_segmented(), y.lo..y.hi)
        .map_err(err)?;
    let label = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(i) => xs.get(*i as usize).map_or(String::new(), |x| si(*x)),
        _ => String::new(),
    };
    let ylabel = |v: &f64| y.label(*v);
    c.configure_mesh()
        .disable_x_mesh()
        .x_labels(xs.len() + 1)
        .x_label_formatter(&label)
        .y_label_formatter(&ylabel)
        .x_desc(&chart.x_label)
        .y_desc(y.desc(chart))
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .light_line_style(RGBColor(240, 240, 240))
        .max_light_lines(1)
        .draw()
        .map_err(err)?;
    let at = |x: f64| SegmentValue::CenterOf(xs.iter().position(|v| *v == x).unwrap_or(0) as i32);
    for (j, h) in chart.hlines.iter().enumerate() {
        let ends = [(SegmentValue::Exact(0), y.map(h.y)), (SegmentValue::Last, y.map(h.y))];
        c.draw_series(DashedLineSeries::new(ends, 10, 6, hline_colour(j).stroke_width(2))).map_err(err)?;
    }
    for (i, s) in chart.series.iter().enumerate() {
        let mut pts: Vec<(f64, f64)> = s.points.clone();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let pts: Vec<_> = pts.iter().map(|&(x, v)| (at(x), y.map(v))).collect();
        c.draw_series(LineSeries::new(pts.clone(), colour(i).stroke_width(2))).map_err(err)?;
        c.draw_series(pts.into_iter().map(|p| marker(i, p, colour(i)))).map_err(err)?;
    }
    Ok(())
}

#[cfg(feature = "plot")]
/// One bar per series, when a single x value ran (named in the x axis' description).
fn draw_bars(area: &Area, chart: &Chart, x: f64) -> Result<(), String> {
    let y = YScale::of(chart);
    let n = chart.series.len() as i32;
    let mut c = ChartBuilder::on(area)
        .margin(16)
        .x_label_area_size(56)
        .y_label_area_size(90)
        .build_cartesian_2d((0..n - 1).into_segmented(), y.lo..y.hi)
        .map_err(err)?;
    let names: Vec<&str> = chart.series.iter().map(|s| s.name.as_str()).collect();
    // Names under the bars only where they fit; the legend names every bar anyway.
    let room = (WIDTH - LEGEND_WIDTH - 120) as usize / names.len().max(1) / 8;
    let fits = names.iter().all(|n| n.chars().count() <= room);
    let label = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(i) if fits => names.get(*i as usize).map_or(String::new(), |s| s.to_string()),
        _ => String::new(),
    };
    let ylabel = |v: &f64| y.label(*v);
    c.configure_mesh()
        .disable_x_mesh()
        .x_labels(names.len() + 1)
        .x_label_formatter(&label)
        .y_label_formatter(&ylabel)
        .x_desc(format!("{} ({}: {})", chart.variant_label, chart.x_label, si(x)))
        .y_desc(y.desc(chart))
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .light_line_style(RGBColor(240, 240, 240))
        .max_light_lines(1)
        .draw()
        .map_err(err)?;
    for (j, h) in chart.hlines.iter().enumerate() {
        let ends = [(SegmentValue::Exact(0), y.map(h.y)), (SegmentValue::Last, y.map(h.y))];
        c.draw_series(DashedLineSeries::new(ends, 10, 6, hline_colour(j).stroke_width(2))).map_err(err)?;
    }
    for (i, s) in chart.series.iter().enumerate() {
        let v = s.points.first().map_or(0.0, |p| p.1);
        let i32i = i as i32;
        let mut bar = Rectangle::new(
            [(SegmentValue::Exact(i32i), y.lo), (SegmentValue::Exact(i32i + 1), y.map(v))],
            colour(i).filled(),
        );
        bar.set_margin(0, 0, 12, 12);
        c.draw_series(std::iter::once(bar)).map_err(err)?;
        c.draw_series(std::iter::once(Text::new(
            si(v),
            (SegmentValue::CenterOf(i32i), y.map(v)),
            TextStyle::from((FONT, 14).into_font()).pos(Pos::new(HPos::Center, VPos::Bottom)),
        )))
        .map_err(err)?;
    }
    Ok(())
}

#[cfg(feature = "plot")]
/// Lines against a linear x axis (time).
fn draw_linear(area: &Area, chart: &Chart) -> Result<(), String> {
    let y = YScale::of(chart);
    let xmax = chart.series.iter().flat_map(|s| s.points.iter().map(|p| p.0)).fold(0.0f64, f64::max).max(1e-3);
    let mut c = ChartBuilder::on(area)
        .margin(16)
        .x_label_area_size(56)
        .y_label_area_size(90)
        .build_cartesian_2d(0.0..xmax, y.lo..y.hi)
        .map_err(err)?;
    let ylabel = |v: &f64| y.label(*v);
    let xlabel = |v: &f64| si(*v);
    c.configure_mesh()
        .x_label_formatter(&xlabel)
        .y_label_formatter(&ylabel)
        .x_desc(&chart.x_label)
        .y_desc(y.desc(chart))
        .axis_desc_style((FONT, 18))
        .label_style((FONT, 15))
        .light_line_style(RGBColor(240, 240, 240))
        .max_light_lines(1)
        .draw()
        .map_err(err)?;
    for (j, h) in chart.hlines.iter().enumerate() {
        let c2 = hline_colour(j);
        c.draw_series(DashedLineSeries::new([(0.0, y.map(h.y)), (xmax, y.map(h.y))], 10, 6, c2.stroke_width(2)))
            .map_err(err)?;
    }
    for (i, s) in chart.series.iter().enumerate() {
        let pts: Vec<_> = s.points.iter().map(|&(x, v)| (x, y.map(v))).collect();
        c.draw_series(LineSeries::new(pts, colour(i).stroke_width(2))).map_err(err)?;
    }
    Ok(())
}

#[cfg(feature = "plot")]
fn hline_colour(j: usize) -> RGBColor {
    [RGBColor(0, 0, 0), RGBColor(120, 120, 120), RGBColor(200, 60, 60)][j % 3]
}

#[cfg(feature = "plot")]
/// The legend: a line, a marker and the name of each series; dashed lines for references.
fn draw_legend(area: &Area, chart: &Chart) -> Result<(), String> {
    let font = TextStyle::from((FONT, 15).into_font());
    let mut y = 60;
    area.draw(&Text::new(chart.variant_label.clone(), (12, y - 28), (FONT, 16).into_font().color(&BLACK)))
        .map_err(err)?;
    for (i, s) in chart.series.iter().enumerate() {
        area.draw(&PathElement::new(vec![(12, y), (44, y)], colour(i).stroke_width(3))).map_err(err)?;
        if chart.x == XAxis::Categories {
            area.draw(&marker(i, (28, y), colour(i))).map_err(err)?;
        }
        area.draw(&Text::new(s.name.clone(), (52, y), font.clone().pos(Pos::new(HPos::Left, VPos::Center))))
            .map_err(err)?;
        y += 24;
    }
    for (j, h) in chart.hlines.iter().enumerate() {
        area.draw(&DashedPathElement::new(vec![(12, y), (44, y)], 6, 4, hline_colour(j).stroke_width(2)))
            .map_err(err)?;
        area.draw(&Text::new(
            format!("{} ({})", h.name, si(h.y)),
            (52, y),
            font.clone().pos(Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(err)?;
        y += 24;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "plot")]
    #[test]
    fn captions_wrap_at_spaces() {
        assert_eq!(wrap("aa bb cc dd", 5), ["aa bb", "cc dd"]);
        assert_eq!(wrap("averyveryverylongword x", 5), ["averyveryverylongword", "x"]);
    }

    #[test]
    fn numbers_read_as_people_write_them() {
        assert_eq!(si(1_250_000.0), "1.25M");
        assert_eq!(si(350_000.0), "350k");
        assert_eq!(si(12.5), "12.5");
        assert_eq!(si(16.0), "16");
        assert_eq!(si(0.0), "0");
    }

    #[cfg(feature = "plot")]
    #[test]
    fn every_layout_writes_an_svg_naming_its_series() {
        let tmp = tempfile::tempdir().unwrap();
        let mut lines = Chart::new("lines", "threads", "throughput (tx/s)", "protocol");
        let mut bars = Chart::new("bars", "threads", "throughput (tx/s)", "protocol");
        let mut time = Chart::new("time", "time (s)", "resident (MiB)", "phase");
        time.x = XAxis::Linear;
        time.hlines.push(HLine { name: "bound".into(), y: 80.0 });
        for (i, name) in ["tictoc", "silo", "mvcc-si/epo-r"].iter().enumerate() {
            for t in [1.0, 2.0, 4.0] {
                lines.push(name, t, 1000.0 * t * (i + 1) as f64);
                time.push(name, t, 10.0 * t);
            }
            bars.push(name, 2.0, 5e5 * (i + 1) as f64);
        }
        let path = tmp.path().join("p.svg");
        write_svg(&path, "bench txn", "footer", &[lines, bars, time]).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        for needle in ["tictoc", "silo", "mvcc-si/epo-r", "bound", "throughput (tx/s)", "threads", "bench txn"] {
            assert!(svg.contains(needle), "{needle} is missing");
        }
        let empty = Chart::new("x", "x", "y", "v");
        assert!(write_svg(&tmp.path().join("e.svg"), "t", "f", std::slice::from_ref(&empty)).is_err());
        // An empty panel beside a drawn one is left blank.
        let one = Chart { series: vec![Series { name: "a".into(), points: vec![(1.0, 2.0)] }], ..empty.clone() };
        write_svg(&tmp.path().join("f.svg"), "t", "f", &[one, empty]).unwrap();
    }
}
