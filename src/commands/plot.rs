//! `kvplan plot`: a metric against an axis from a CSV table; the reading and drawing live in
//! `kvplan_plot` and `kvplan_report::plots`.

use std::path::PathBuf;

use clap::Args;

use crate::error::CliError;
use kvplan_report::files::write_text;
use kvplan_report::plots::{TablePlot, draw_table};

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

/// `kvplan plot`.
pub fn plot(args: &PlotArgs) -> Result<String, CliError> {
    let (x, y, title) = (&args.x, &args.y, args.title.as_deref());
    let svg = noted(draw_table(&args.csv, x, y, &args.series, title)?);
    match &args.out {
        Some(p) => {
            write_text(p, "--out", &svg)?;
            Ok(format!("plot: written to {}\n", p.display()))
        }
        None => Ok(svg),
    }
}

/// The SVG of a table's plot (`kvplan plot`, `kvplan sweep --plot`), the rows it skipped noted
/// on stderr.
pub fn noted(plot: TablePlot) -> String {
    if let Some(note) = plot.note {
        crate::messages::hold_note(note.to_string());
    }
    plot.svg
}
