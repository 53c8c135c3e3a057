//! SVG plots: a column against another of a CSV table (`kvplan plot`, a sweep's plot) and a
//! serving run's KV blocks and queues against time and its latency CDFs; the drawing is
//! `kvplan_plot`'s. Messages name the option by the label the caller passes.

use std::path::Path;

use kvplan_plot::table::{axis_label, read_table, series_from_table};
use kvplan_plot::{ServingPoint, latency_cdf, line_chart, serving_timeseries};
use kvplan_serve::{RequestRecord, ServeReport, Status};

use crate::error::Error;

/// A plotting error for `what` (the option, or the table's file): bad input, or a drawing
/// failure.
fn plot_error(what: &str, e: kvplan_plot::Error) -> Error {
    match e {
        kvplan_plot::Error::Draw(_) => Error::Failure(format!("{what}: {e}")),
        kvplan_plot::Error::Read(m) => Error::Input(m),
        _ => Error::Input(format!("{what}: {e}")),
    }
}

/// A table plotted: the SVG, and the note on the rows skipped (x or y not a number), if any.
#[derive(Debug, Clone)]
pub struct TablePlot {
    /// The SVG.
    pub svg: String,
    /// `N of M rows skipped: ...`, for stderr.
    pub note: Option<String>,
}

/// Draws column `y` against `x` of the CSV table at `csv`, one line per value of the `series`
/// columns; `title` defaults to `Y against X`.
pub fn draw_table(
    csv: &Path,
    x: &str,
    y: &str,
    series: &[String],
    title: Option<&str>,
) -> Result<TablePlot, Error> {
    let shown = csv.display().to_string();
    let (header, rows) = read_table(csv).map_err(|e| plot_error(&shown, e))?;
    let t = series_from_table(&header, &rows, x, y, series).map_err(|e| plot_error(&shown, e))?;
    let title = title.map_or_else(|| format!("{y} against {x}"), str::to_string);
    let svg = line_chart(&t.series, &axis_label(x), &axis_label(y), &title)
        .map_err(|e| plot_error(&shown, e))?;
    let note = (t.skipped > 0).then(|| {
        format!(
            "{} of {} rows skipped: {x} or {y} is not a number",
            t.skipped,
            rows.len(),
        )
    });
    Ok(TablePlot { svg, note })
}

/// The SVG of a serving run's KV blocks and sequences against time (the option `what`).
pub fn serve_timeseries(out: &ServeReport, title: &str, what: &str) -> Result<String, Error> {
    let points: Vec<ServingPoint> = out
        .series()
        .iter()
        .map(|r| ServingPoint {
            t_s: r.t_s,
            gpu_blocks: f64::from(r.gpu_blocks_used),
            host_blocks: f64::from(r.host_blocks_used),
            running: f64::from(r.running),
            waiting: f64::from(r.waiting),
            swapped: f64::from(r.swapped),
        })
        .collect();
    serving_timeseries(&points, title).map_err(|e| plot_error(what, e))
}

/// The SVG of a serving run's TTFT, TPOT and E2E CDFs of the finished requests (the option
/// `what`).
pub fn serve_cdf(out: &ServeReport, title: &str, what: &str) -> Result<String, Error> {
    let done: Vec<_> = out
        .requests
        .iter()
        .filter(|r| r.status == Status::Finished)
        .collect();
    if done.is_empty() {
        return Err(Error::Input(format!("{what}: no request finished")));
    }
    let col = |f: fn(&RequestRecord) -> f64| -> Vec<f64> { done.iter().map(|r| f(r)).collect() };
    latency_cdf(
        &col(|r| r.ttft_s),
        &col(|r| r.tpot_s),
        &col(|r| r.e2e_s),
        title,
    )
    .map_err(|e| plot_error(what, e))
}
