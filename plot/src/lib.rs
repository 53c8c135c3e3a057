//! kvplan's plots as SVG text: a metric against an axis with one line per series
//! ([`line_chart`]), a serving run's time series ([`serving_timeseries`]) and latency CDFs
//! ([`latency_cdf`]); [`table`] turns any kvplan CSV table into series.
//!
//! Drawing uses plotters' SVG backend only: text is written as `<text>` elements (no fonts are
//! rasterised, no system libraries), and the same input gives byte-identical SVG.
//!
//! ```
//! use kvplan_plot::{Series, line_chart};
//!
//! let s = Series::new("kvpr", vec![(8.0, 1.5), (16.0, 2.5), (32.0, 4.0)]);
//! let svg = line_chart(&[s], "batch (sequences)", "throughput (tokens/s)", "KVPR")?;
//! assert!(svg.starts_with("<svg") && svg.contains("kvpr"));
//! # Ok::<(), kvplan_plot::Error>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod table;

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

/// Width of a chart, pixels.
const WIDTH: u32 = 800;
/// Height of one panel, pixels.
const PANEL_HEIGHT: u32 = 480;
/// Series longer than this are thinned before drawing (see [`thin`]): a long serving run has an
/// iteration every few milliseconds, more than a plot can show.
pub const MAX_POINTS: usize = 2000;
/// Lines with at most this many points get a marker at each point.
const MARKER_POINTS: usize = 60;

/// Line colours (Tableau 10), reused in order past ten series.
const PALETTE: [RGBColor; 10] = [
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
];

/// What can go wrong while plotting.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Nothing to draw: no series, or no series with a point.
    #[error("nothing to plot: {0}")]
    Empty(String),
    /// A point with a NaN or infinite coordinate.
    #[error("series '{series}' has a non-finite point ({x}, {y})")]
    NonFinite {
        /// The series' name.
        series: String,
        /// The point's x.
        x: f64,
        /// The point's y.
        y: f64,
    },
    /// Values spread wider than a floating-point axis can hold (its span overflows).
    #[error(
        "the {axis} values run from {lo:e} to {hi:e}, a span too wide to draw; plot a narrower range"
    )]
    SpanTooWide {
        /// `x` or `y`.
        axis: &'static str,
        /// The smallest value.
        lo: f64,
        /// The largest value.
        hi: f64,
    },
    /// A column named that the table does not have.
    #[error("no column '{name}' (columns: {columns})")]
    UnknownColumn {
        /// The name asked for.
        name: String,
        /// The table's columns, comma-separated.
        columns: String,
    },
    /// One line asked for (no series columns) where rows repeat an x value: the table varies
    /// other columns too, and one line through every row would zig-zag between them.
    #[error(
        "{x} = {value} appears in {rows} rows: the table varies other columns too ({candidates}); give the columns that tell the lines apart as series, or filter the table to one value of each"
    )]
    RepeatedX {
        /// The x column.
        x: String,
        /// The first x value found more than once.
        value: String,
        /// Rows holding it.
        rows: usize,
        /// Columns that differ between those rows and repeat over the table (the likely axes),
        /// comma-separated; `none found` when no column does.
        candidates: String,
    },
    /// A table with a header and no rows, or no header.
    #[error("the table has no rows")]
    EmptyTable,
    /// A column whose cells are not numbers (in every row).
    #[error("column '{0}' has no numeric value")]
    NonNumeric(String),
    /// A table that cannot be read (the message names the file).
    #[error("{0}")]
    Read(String),
    /// The drawing backend failed (not expected when drawing to a string).
    #[error("cannot draw the plot: {0}")]
    Draw(String),
}

fn draw_err(e: impl std::fmt::Display) -> Error {
    Error::Draw(e.to_string())
}

/// One line: a name for the legend and its points (x, y), drawn in the order given.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The legend entry.
    pub name: String,
    /// The points.
    pub points: Vec<(f64, f64)>,
    /// Whether the points are joined by a line (else markers only, a scatter).
    pub joined: bool,
}

impl Series {
    /// A line named `name`.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series {
            name: name.into(),
            points,
            joined: true,
        }
    }

    /// Points named `name`, drawn as markers without a line.
    pub fn scatter(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Series {
            joined: false,
            ..Series::new(name, points)
        }
    }
}

/// Where a panel's legend goes.
#[derive(Debug, Clone, Copy)]
enum Legend {
    UpperLeft,
    LowerRight,
}

/// One chart: series, axis labels, title, scale.
struct Panel<'a> {
    series: &'a [Series],
    x_label: &'a str,
    y_label: &'a str,
    title: &'a str,
    log_x: bool,
    /// The y axis from 0 to 1 (fractions).
    unit_y: bool,
    legend: Legend,
}

/// A line chart: one line per series (with markers when a line has few points), a legend with
/// the series' names, the axes labelled `x_label` and `y_label` (put the unit in them, e.g.
/// `"batch (sequences)"`), and a title.
///
/// Errors: [`Error::Empty`] when no series has a point, [`Error::NonFinite`] for a NaN or
/// infinite coordinate.
pub fn line_chart(
    series: &[Series],
    x_label: &str,
    y_label: &str,
    title: &str,
) -> Result<String, Error> {
    check(series, title)?;
    let panel = Panel {
        series,
        x_label,
        y_label,
        title,
        log_x: false,
        unit_y: false,
        legend: Legend::UpperLeft,
    };
    render(&[panel])
}

/// A serving run's state at one iteration (the fields of `kvplan_serve`'s iteration record that
/// the time-series plot shows).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServingPoint {
    /// Time, seconds.
    pub t_s: f64,
    /// GPU KV blocks in use.
    pub gpu_blocks: f64,
    /// Host (swap) KV blocks in use.
    pub host_blocks: f64,
    /// Running sequences.
    pub running: f64,
    /// Waiting sequences.
    pub waiting: f64,
    /// Swapped-out sequences.
    pub swapped: f64,
}

/// A serving run's time series: two panels in one SVG, KV blocks used on the GPU and on the
/// host against time (s) above, running / waiting / swapped sequences against time below.
/// Runs with more than [`MAX_POINTS`] iterations are thinned, keeping each stretch's peak.
pub fn serving_timeseries(points: &[ServingPoint], title: &str) -> Result<String, Error> {
    if points.is_empty() {
        return Err(Error::Empty("no iteration was recorded".into()));
    }
    // Each value holds until the next iteration starts: a step line.
    let line = |name: &str, f: fn(&ServingPoint) -> f64| {
        let mut steps = Vec::with_capacity(2 * points.len());
        for (i, p) in points.iter().enumerate() {
            if i > 0 {
                steps.push((p.t_s, f(&points[i - 1])));
            }
            steps.push((p.t_s, f(p)));
        }
        Series::new(name, thin(&steps))
    };
    let blocks = [
        line("GPU", |p| p.gpu_blocks),
        line("host", |p| p.host_blocks),
    ];
    let seqs = [
        line("running", |p| p.running),
        line("waiting", |p| p.waiting),
        line("swapped", |p| p.swapped),
    ];
    check(&blocks, title)?;
    check(&seqs, title)?;
    let blocks_title = format!("{title}: KV cache");
    let seqs_title = format!("{title}: sequences");
    render(&[
        Panel {
            series: &blocks,
            x_label: "time (s)",
            y_label: "KV blocks used (blocks)",
            title: &blocks_title,
            log_x: false,
            unit_y: false,
            legend: Legend::UpperLeft,
        },
        Panel {
            series: &seqs,
            x_label: "time (s)",
            y_label: "sequences (count)",
            title: &seqs_title,
            log_x: false,
            unit_y: false,
            legend: Legend::UpperLeft,
        },
    ])
}

/// Empirical CDFs of request latencies: TTFT, TPOT and E2E (seconds; NaN values, e.g. of
/// rejected requests, are left out), one line each, x on a log scale when the values span more
/// than two decades, y the fraction of requests at or below x.
pub fn latency_cdf(
    ttft_s: &[f64],
    tpot_s: &[f64],
    e2e_s: &[f64],
    title: &str,
) -> Result<String, Error> {
    let all: Vec<f64> = [ttft_s, tpot_s, e2e_s]
        .iter()
        .flat_map(|v| v.iter().copied())
        .filter(|x| x.is_finite())
        .collect();
    let lo = all
        .iter()
        .copied()
        .filter(|x| *x > 0.0)
        .fold(f64::INFINITY, f64::min);
    let hi = all.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let log_x = lo.is_finite() && hi / lo > 100.0;
    let series: Vec<Series> = [("TTFT", ttft_s), ("TPOT", tpot_s), ("E2E", e2e_s)]
        .iter()
        .map(|(name, v)| {
            // A log axis cannot show zero: such values are left out of that line's points but
            // still count in the fractions.
            Series::new(*name, cdf(v, log_x))
        })
        .filter(|s| !s.points.is_empty())
        .collect();
    check(&series, title)?;
    render(&[Panel {
        series: &series,
        x_label: if log_x {
            "latency (s, log scale)"
        } else {
            "latency (s)"
        },
        y_label: "fraction of requests",
        title,
        log_x,
        unit_y: true,
        legend: Legend::LowerRight,
    }])
}

/// One panel of a [`parity_chart`]: a metric, its unit, and its points (measured, predicted),
/// one series per legend entry.
#[derive(Debug, Clone, PartialEq)]
pub struct ParityPanel {
    /// The metric, as the panel's title.
    pub metric: String,
    /// Its unit, for the axis labels (`s`, `req/s`).
    pub unit: String,
    /// The points: x measured, y predicted. Each series keeps its colour across panels by its
    /// place in the list, so give every panel the same series (empty where it has no point).
    pub series: Vec<Series>,
}

/// Predicted against measured: one panel per metric, two side by side, both axes on a log scale
/// over the same span (the panel's points' own), and the line y = x where prediction equals
/// measurement; a point above the line was predicted high. Points are markers. A log axis
/// cannot show 0 or less: such points are left out; a panel left with none is drawn empty.
///
/// Errors: [`Error::Empty`] when no panel has a positive point, [`Error::NonFinite`] for a NaN
/// or infinite coordinate.
pub fn parity_chart(panels: &[ParityPanel], title: &str) -> Result<String, Error> {
    let positive = |s: &Series| Series {
        points: (s.points.iter().copied())
            .filter(|&(x, y)| !(x <= 0.0 || y <= 0.0))
            .collect(),
        ..s.clone()
    };
    let kept: Vec<Vec<Series>> = panels
        .iter()
        .map(|p| p.series.iter().map(positive).collect())
        .collect();
    let all: Vec<Series> = kept.iter().flatten().cloned().collect();
    check(&all, title)?;
    let cols = panels.len().clamp(1, 2);
    let rows = panels.len().div_ceil(cols);
    let side = PANEL_HEIGHT;
    let mut svg = String::new();
    {
        let size = (side * cols as u32, side * rows as u32 + 40);
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let root = root.titled(title, ("sans-serif", 22)).map_err(draw_err)?;
        let areas = root.split_evenly((rows, cols));
        for ((p, series), area) in panels.iter().zip(&kept).zip(&areas) {
            draw_parity(area, p, series)?;
        }
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

/// A log axis's tick: three significant digits at most, no trailing zeros (`0.009`, `20`).
fn tick(v: f64) -> String {
    if !(v.is_finite() && v > 0.0) {
        return format!("{v}");
    }
    let digits = (2 - v.log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn draw_parity<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    p: &ParityPanel,
    series: &[Series],
) -> Result<(), Error> {
    let values = || {
        series
            .iter()
            .flat_map(|s| s.points.iter().flat_map(|q| [q.0, q.1]))
    };
    let lo = values().fold(f64::INFINITY, f64::min);
    let hi = values().fold(f64::NEG_INFINITY, f64::max);
    let (lo, hi) = if lo.is_finite() { (lo, hi) } else { (1.0, 1.0) };
    let (lo, hi) = (lo / 1.5, hi * 1.5);
    let x_label = format!("measured ({}, log scale)", p.unit);
    let y_label = format!("predicted ({}, log scale)", p.unit);
    let mut chart = ChartBuilder::on(area)
        .caption(&p.metric, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((lo..hi).log_scale(), (lo..hi).log_scale())
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .x_labels(6)
        .y_labels(6)
        .x_label_formatter(&|v| tick(*v))
        .y_label_formatter(&|v| tick(*v))
        .light_line_style(WHITE)
        .draw()
        .map_err(draw_err)?;
    let grey = RGBColor(127, 127, 127);
    chart
        .draw_series(DashedLineSeries::new(
            [(lo, lo), (hi, hi)],
            6,
            4,
            grey.stroke_width(1),
        ))
        .map_err(draw_err)?
        .label("y = x")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey.stroke_width(1)));
    for (i, s) in series.iter().enumerate() {
        if s.points.is_empty() {
            continue;
        }
        let color = PALETTE[i % PALETTE.len()];
        chart
            .draw_series(s.points.iter().map(|&q| Circle::new(q, 3, color.filled())))
            .map_err(draw_err)?
            .label(s.name.as_str())
            .legend(move |(x, y)| Circle::new((x + 10, y), 3, color.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 12))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(draw_err)?;
    Ok(())
}

/// The empirical CDF of the finite values of `v` as a step line: (x, fraction at or below x),
/// at most [`MAX_POINTS`] points (evenly spaced ranks beyond that).
fn cdf(v: &[f64], positive_only: bool) -> Vec<(f64, f64)> {
    let mut v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let steps = n.min(MAX_POINTS / 2);
    let mut out = Vec::with_capacity(2 * steps);
    for k in 0..steps {
        // The k-th of `steps` evenly spaced ranks, ending at the largest value.
        let i = if steps == n {
            k
        } else {
            ((k + 1) * n).div_ceil(steps) - 1
        };
        let x = v[i];
        if positive_only && x <= 0.0 {
            continue;
        }
        let below = if out.is_empty() {
            // Values left out before this one still count in the fraction.
            let j = v.partition_point(|y| *y < x);
            j as f64 / n as f64
        } else {
            out.last().map(|p: &(f64, f64)| p.1).unwrap_or(0.0)
        };
        out.push((x, below));
        out.push((x, (i + 1) as f64 / n as f64));
    }
    out
}

/// At most [`MAX_POINTS`] of `points`: each stretch of consecutive points becomes the one with
/// the largest y (the peaks a thinned line must not hide); fewer points are kept as they are.
pub fn thin(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    if points.len() <= MAX_POINTS {
        return points.to_vec();
    }
    let per = points.len().div_ceil(MAX_POINTS);
    points
        .chunks(per)
        .map(|c| {
            *c.iter()
                .reduce(|a, b| if b.1 > a.1 { b } else { a })
                .expect("chunks are not empty")
        })
        .collect()
}

fn check(series: &[Series], title: &str) -> Result<(), Error> {
    if series.iter().all(|s| s.points.is_empty()) {
        return Err(Error::Empty(format!("'{title}' has no point")));
    }
    for s in series {
        if let Some(&(x, y)) = s
            .points
            .iter()
            .find(|(x, y)| !x.is_finite() || !y.is_finite())
        {
            return Err(Error::NonFinite {
                series: s.name.clone(),
                x,
                y,
            });
        }
    }
    // An axis spans its values plus margins: a span that overflows has no ticks to draw (the
    // tick search would not end).
    let points = || series.iter().flat_map(|s| s.points.iter());
    for (axis, values) in [
        ("x", points().map(|p| p.0).collect::<Vec<_>>()),
        ("y", points().map(|p| p.1).collect()),
    ] {
        let lo = values.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if !((hi - lo) * 1.25).is_finite() || !(hi.abs().max(lo.abs()) * 1.25).is_finite() {
            return Err(Error::SpanTooWide { axis, lo, hi });
        }
    }
    Ok(())
}

/// The span of `v` with a margin, never empty.
fn span(v: impl Iterator<Item = f64>, from_zero: bool) -> Range<f64> {
    let (mut lo, mut hi) = v.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    if from_zero {
        lo = lo.min(0.0);
        hi = hi.max(0.0);
    }
    if hi - lo <= 0.0 {
        let d = if hi == 0.0 { 1.0 } else { hi.abs() * 0.1 };
        lo -= d;
        hi += d;
    }
    let m = (hi - lo) * 0.05;
    (if from_zero && lo >= 0.0 { lo } else { lo - m })..(hi + m)
}

/// Draws the panels one above the other into an SVG string.
fn render(panels: &[Panel]) -> Result<String, Error> {
    let mut svg = String::new();
    {
        let height = PANEL_HEIGHT * panels.len() as u32;
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let areas = root.split_evenly((panels.len(), 1));
        for (p, area) in panels.iter().zip(&areas) {
            let xs = p.series.iter().flat_map(|s| s.points.iter().map(|q| q.0));
            let ys = p.series.iter().flat_map(|s| s.points.iter().map(|q| q.1));
            let y = if p.unit_y { 0.0..1.02 } else { span(ys, true) };
            if p.log_x {
                let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
                    (lo.min(x), hi.max(x))
                });
                draw_panel(area, p, (lo / 1.2..hi * 1.2).log_scale(), y)?;
            } else {
                draw_panel(area, p, span(xs, false), y)?;
            }
        }
        root.present().map_err(draw_err)?;
    }
    Ok(svg)
}

fn draw_panel<DB, X>(
    area: &DrawingArea<DB, Shift>,
    p: &Panel,
    x: X,
    y: Range<f64>,
) -> Result<(), Error>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: ValueFormatter<f64>,
{
    let mut chart = ChartBuilder::on(area)
        .caption(p.title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(x, y)
        .map_err(draw_err)?;
    chart
        .configure_mesh()
        .x_desc(p.x_label)
        .y_desc(p.y_label)
        .light_line_style(WHITE)
        .draw()
        .map_err(draw_err)?;
    for (i, s) in p.series.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        if !s.joined {
            chart
                .draw_series(s.points.iter().map(|&q| Circle::new(q, 3, color.filled())))
                .map_err(draw_err)?
                .label(s.name.as_str())
                .legend(move |(x, y)| Circle::new((x + 10, y), 3, color.filled()));
            continue;
        }
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(draw_err)?
            .label(s.name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        if s.points.len() <= MARKER_POINTS {
            chart
                .draw_series(s.points.iter().map(|&q| Circle::new(q, 3, color.filled())))
                .map_err(draw_err)?;
        }
    }
    chart
        .configure_series_labels()
        .position(match p.legend {
            Legend::UpperLeft => SeriesLabelPosition::UpperLeft,
            Legend::LowerRight => SeriesLabelPosition::LowerRight,
        })
        .label_font(("sans-serif", 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()
        .map_err(draw_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_too_wide_for_an_axis_is_refused_not_drawn_forever() {
        let chart = |points: Vec<(f64, f64)>| {
            let s = [Series::new("s", points)];
            line_chart(&s, "x", "y", "t")
        };
        for (points, axis) in [
            (vec![(4.0, 1e308), (5.0, -1e308)], "y"),
            (vec![(1e308, 1.0), (-1e308, 2.0)], "x"),
        ] {
            let e = chart(points).unwrap_err();
            assert!(
                matches!(e, Error::SpanTooWide { axis: a, .. } if a == axis),
                "{e}"
            );
        }
        // Wide but finite spans still draw.
        assert!(chart(vec![(1.0, 1e300), (2.0, -1e300)]).is_ok());
    }

    fn two() -> Vec<Series> {
        vec![
            Series::new("kvpr", vec![(1.0, 2.0), (2.0, 3.0), (4.0, 3.5)]),
            Series::new("full-transfer", vec![(1.0, 1.0), (2.0, 1.5), (4.0, 1.7)]),
        ]
    }

    #[test]
    fn line_chart_has_labels_legend_and_a_line_per_series() {
        let svg = line_chart(&two(), "batch (sequences)", "throughput (tokens/s)", "t").unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
        assert!(svg.trim_end().ends_with("</svg>"));
        for want in [
            "batch (sequences)",
            "throughput (tokens/s)",
            "kvpr",
            "full-transfer",
        ] {
            assert!(svg.contains(want), "missing {want}");
        }
        // One 2-pixel polyline per series, plus one per legend entry (the axes and ticks are
        // 1-pixel).
        assert_eq!(svg.matches("stroke-width=\"2\"").count(), 4, "{svg}");
        assert_eq!(svg.matches("<circle").count(), 6);
    }

    #[test]
    fn parity_chart_draws_panels_on_log_axes_with_the_diagonal() {
        let panel = |metric: &str, pts: Vec<(f64, f64)>| ParityPanel {
            metric: metric.into(),
            unit: "s".into(),
            series: vec![
                Series::scatter("llama", pts),
                Series::scatter("mixtral", vec![]),
            ],
        };
        let panels = [
            panel("TTFT mean", vec![(0.025, 0.026), (100.0, 600.0)]),
            // A zero cannot sit on a log axis: left out, the rest drawn.
            panel("TPOT", vec![(0.0, 0.007), (0.008, 0.009)]),
            panel("E2E mean", vec![(1.8, 1.9)]),
        ];
        let svg = parity_chart(&panels, "predicted against measured").unwrap();
        for want in [
            "TTFT mean",
            "TPOT",
            "E2E mean",
            "log scale",
            "y = x",
            "llama",
        ] {
            assert!(svg.contains(want), "missing {want}");
        }
        // The empty series has no legend entry; 4 points drawn, one per legend of llama's.
        assert!(!svg.contains("mixtral"));
        assert_eq!(svg.matches("<circle").count(), 4 + 3);
        assert_eq!(
            svg,
            parity_chart(&panels, "predicted against measured").unwrap()
        );
        assert!(matches!(
            parity_chart(&[panel("x", vec![(0.0, 1.0)])], "t"),
            Err(Error::Empty(_))
        ));
        assert!(matches!(
            parity_chart(&[panel("x", vec![(f64::NAN, 1.0)])], "t"),
            Err(Error::NonFinite { .. })
        ));
    }

    #[test]
    fn same_input_same_bytes() {
        let a = line_chart(&two(), "x (s)", "y", "t").unwrap();
        let b = line_chart(&two(), "x (s)", "y", "t").unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn bad_series_are_errors() {
        assert!(matches!(
            line_chart(&[Series::new("a", vec![])], "x", "y", "t"),
            Err(Error::Empty(_))
        ));
        assert!(matches!(
            line_chart(&[Series::new("a", vec![(1.0, f64::NAN)])], "x", "y", "t"),
            Err(Error::NonFinite { .. })
        ));
    }

    #[test]
    fn single_point_and_flat_lines_draw() {
        let s = [Series::new("one", vec![(3.0, 5.0)])];
        assert!(line_chart(&s, "x", "y", "t").unwrap().contains("one"));
        let s = [Series::new("flat", vec![(0.0, 0.0), (1.0, 0.0)])];
        assert!(line_chart(&s, "x", "y", "t").unwrap().contains("flat"));
    }

    #[test]
    fn cdf_steps_end_at_one() {
        let c = cdf(&[3.0, 1.0, f64::NAN, 2.0], false);
        assert_eq!(
            c,
            vec![
                (1.0, 0.0),
                (1.0, 1.0 / 3.0),
                (2.0, 1.0 / 3.0),
                (2.0, 2.0 / 3.0),
                (3.0, 2.0 / 3.0),
                (3.0, 1.0)
            ]
        );
        let big: Vec<f64> = (0..10_000).map(|i| i as f64).collect();
        let c = cdf(&big, false);
        assert!(c.len() <= MAX_POINTS);
        assert_eq!(*c.last().unwrap(), (9999.0, 1.0));
        // Zeros are left out of a log axis but still count.
        let c = cdf(&[0.0, 1.0], true);
        assert_eq!(c, vec![(1.0, 0.5), (1.0, 1.0)]);
    }

    #[test]
    fn latency_cdf_goes_log_over_two_decades() {
        let ttft = [0.01, 0.02, 0.05];
        let tpot = [0.001, 0.002];
        let e2e = [0.5, 1.0, 2.0];
        let svg = latency_cdf(&ttft, &tpot, &e2e, "t").unwrap();
        for want in [
            "TTFT",
            "TPOT",
            "E2E",
            "latency (s, log scale)",
            "fraction of requests",
        ] {
            assert!(svg.contains(want), "missing {want}");
        }
        let svg = latency_cdf(&[1.0, 2.0], &[1.5], &[3.0], "t").unwrap();
        assert!(svg.contains("latency (s)") && !svg.contains("log scale"));
        assert!(matches!(
            latency_cdf(&[f64::NAN], &[], &[], "t"),
            Err(Error::Empty(_))
        ));
    }

    #[test]
    fn thinning_keeps_peaks() {
        let mut p: Vec<(f64, f64)> = (0..10_000).map(|i| (i as f64, 0.0)).collect();
        p[5_001].1 = 7.0;
        let t = thin(&p);
        assert!(t.len() <= MAX_POINTS);
        assert!(t.contains(&(5_001.0, 7.0)));
    }

    #[test]
    fn serving_timeseries_has_two_panels() {
        let pts: Vec<ServingPoint> = (0..50)
            .map(|i| ServingPoint {
                t_s: i as f64 * 0.1,
                gpu_blocks: i as f64,
                host_blocks: 0.0,
                running: 3.0,
                waiting: 1.0,
                swapped: 0.0,
            })
            .collect();
        let svg = serving_timeseries(&pts, "serve").unwrap();
        for want in [
            "time (s)",
            "KV blocks used (blocks)",
            "sequences (count)",
            "GPU",
            "host",
            "running",
            "waiting",
            "swapped",
        ] {
            assert!(svg.contains(want), "missing {want}");
        }
        assert!(matches!(serving_timeseries(&[], "t"), Err(Error::Empty(_))));
    }
}
