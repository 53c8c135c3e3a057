//! `kvplan plot` (a metric against an axis from a CSV table) and the SVG plots of `kvplan serve`
//! (`--plot`, `--plot-cdf`); the drawing lives in `kvplan_plot`.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::error::CliError;
use kvplan_plot::table::{axis_label, series_from_table};
use kvplan_plot::{ServingPoint, latency_cdf, line_chart, serving_timeseries};
use kvplan_report::files::write_output;
use kvplan_serve::{ServeReport, Status};

pub const PLOT_LONG: &str = "\
Plot column --y against column --x of a CSV table that kvplan wrote (a sweep's output: axis
columns first, then metrics; serve --format csv or --requests-csv; --timeseries-csv), one line
per distinct value of the --series columns, as an SVG file. Rows whose x or y is not a number
(error rows, empty cells) are skipped and counted in a note on stderr. Axis labels are the
column names with the unit their suffix implies (_s seconds, _bytes bytes, _tok_s tokens/s,
_fraction fraction). Exit 2, writing nothing, on an unknown column, an empty table or a column
with no number.
  kvplan serve --model llama-2-7b --hardware a100-80g-sxm --arrivals poisson --qps 4 \\
      --lengths 512 --output-lengths 64 --requests 200 --format csv > requests.csv
  kvplan plot requests.csv --x arrival_s --y e2e_s --out e2e.svg";

/// `kvplan plot`.
#[derive(Debug, Args)]
pub struct PlotArgs {
    /// The CSV table (header row first)
    #[arg(value_name = "CSV")]
    pub csv: PathBuf,
    /// Column on the x axis
    #[arg(long, value_name = "COLUMN")]
    pub x: String,
    /// Column on the y axis
    #[arg(long, value_name = "COLUMN")]
    pub y: String,
    /// Columns whose distinct values make one line each [default: one line]
    #[arg(long, value_name = "COLUMN[,COLUMN]", value_delimiter = ',')]
    pub series: Vec<String>,
    /// Title [default: Y against X]
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,
    /// The SVG file to write [default: the SVG on stdout]
    #[arg(long, value_name = "FILE.svg")]
    pub out: Option<PathBuf>,
}

/// A plotting error for the option `what`: bad input (exit 2), or a drawing failure (exit 1).
fn plot_error(what: &str, e: kvplan_plot::Error) -> CliError {
    match e {
        kvplan_plot::Error::Draw(_) => CliError::failure(format!("{what}: {e}")),
        _ => CliError::input(format!("{what}: {e}")),
    }
}

/// Reads a CSV table: the header and the rows (ragged rows allowed; missing cells are empty).
fn read_table(path: &Path) -> Result<(Vec<String>, Vec<Vec<String>>), CliError> {
    let shown = path.display();
    let mut r = csv::ReaderBuilder::new()
        .flexible(true)
        .from_path(path)
        .map_err(|e| CliError::input(format!("{shown}: cannot read: {e}")))?;
    let header: Vec<String> = r
        .headers()
        .map_err(|e| CliError::input(format!("{shown}: {e}")))?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    let mut rows = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| CliError::input(format!("{shown}: {e}")))?;
        rows.push(rec.iter().map(String::from).collect());
    }
    if header.iter().all(|h| h.is_empty()) {
        return Err(CliError::input(format!("{shown}: the table has no header")));
    }
    Ok((header, rows))
}

/// `kvplan plot`.
pub fn plot(args: &PlotArgs) -> Result<String, CliError> {
    match &args.out {
        Some(p) => {
            plot_table(
                &args.csv,
                &args.x,
                &args.y,
                &args.series,
                args.title.as_deref(),
                p,
            )?;
            Ok(format!("plot: written to {}\n", p.display()))
        }
        None => draw_table(
            &args.csv,
            &args.x,
            &args.y,
            &args.series,
            args.title.as_deref(),
        ),
    }
}

/// Draws column `y` against `x` of the CSV table at `csv`, one line per value of the `series`
/// columns, and writes the SVG to `out` (`kvplan plot --out`, `kvplan sweep --plot`).
pub fn plot_table(
    csv: &Path,
    x: &str,
    y: &str,
    series: &[String],
    title: Option<&str>,
    out: &Path,
) -> Result<(), CliError> {
    let svg = draw_table(csv, x, y, series, title)?;
    write_output(out, "--out", |w| w.write_all(svg.as_bytes()))?;
    Ok(())
}

fn draw_table(
    csv: &Path,
    x: &str,
    y: &str,
    series: &[String],
    title: Option<&str>,
) -> Result<String, CliError> {
    let (header, rows) = read_table(csv)?;
    let shown = csv.display().to_string();
    let t = series_from_table(&header, &rows, x, y, series).map_err(|e| plot_error(&shown, e))?;
    let title = title.map_or_else(|| format!("{y} against {x}"), str::to_string);
    let svg = line_chart(&t.series, &axis_label(x), &axis_label(y), &title)
        .map_err(|e| plot_error(&shown, e))?;
    if t.skipped > 0 {
        eprintln!(
            "note: {} of {} rows skipped: {x} or {y} is not a number",
            t.skipped,
            rows.len(),
        );
    }
    Ok(svg)
}

/// The SVG of `serve --plot`: KV blocks and sequences against time.
pub fn serve_timeseries(out: &ServeReport, title: &str) -> Result<String, CliError> {
    let points: Vec<ServingPoint> = out
        .iterations
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
    serving_timeseries(&points, title).map_err(|e| plot_error("--plot", e))
}

/// The SVG of `serve --plot-cdf`: TTFT, TPOT and E2E CDFs of the finished requests.
pub fn serve_cdf(out: &ServeReport, title: &str) -> Result<String, CliError> {
    let done: Vec<_> = out
        .requests
        .iter()
        .filter(|r| r.status == Status::Finished)
        .collect();
    if done.is_empty() {
        return Err(CliError::input("--plot-cdf: no request finished"));
    }
    let col = |f: fn(&kvplan_serve::output::RequestRecord) -> f64| -> Vec<f64> {
        done.iter().map(|r| f(r)).collect()
    };
    latency_cdf(
        &col(|r| r.ttft_s),
        &col(|r| r.tpot_s),
        &col(|r| r.e2e_s),
        title,
    )
    .map_err(|e| plot_error("--plot-cdf", e))
}
