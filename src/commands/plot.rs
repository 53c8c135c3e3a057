//! `kvplan plot`: a metric against an axis from a CSV table; the reading and drawing live in
//! `kvplan_plot` and `kvplan_report::plots`.

use std::path::PathBuf;

use clap::Args;

use crate::error::CliError;
use kvplan_report::files::write_text;
use kvplan_report::plots::{TablePlot, draw_table};

/// `--help`'s long text (`src/help/plot.txt`).
pub const PLOT_LONG: &str = include_str!("../help/plot.txt").trim_ascii_end();

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
