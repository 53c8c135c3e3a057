//! `kvplan sweep` and `kvplan merge`: the sweep file checked against the command's limits, the
//! rows of this run's points (`--shard`, `--resume`) streamed to stdout or `--out` with a
//! progress bar, and shard outputs joined. The sweep itself (file, points, rows, merge) is
//! `kvplan_sweep`.

use std::path::{Path, PathBuf};

use clap::Args;
use kvplan_report::cleanup::set_interrupt_message;
use kvplan_report::files::{remove_orphaned_temps, stream_to, write_text};
use kvplan_sweep::{Fingerprint, Format, PlotLabels, Shard, Sweep, SweepError};

use super::plot::noted;
use crate::error::CliError;
use crate::messages::hold_note;
use kvplan_report::plots::draw_table;

/// `--help`'s long text (`src/help/sweep.txt`).
pub const SWEEP_LONG: &str = include_str!("../help/sweep.txt").trim_ascii_end();

/// `--help`'s long text (`src/help/merge.txt`).
pub const MERGE_LONG: &str = include_str!("../help/merge.txt").trim_ascii_end();

/// `kvplan sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Sweep TOML file (kind, [base] or base_file, [axes], [[points]]; see above)
    #[arg(value_name = "SWEEP")]
    pub file: PathBuf,
    /// Write the rows to FILE (streamed as points finish) instead of stdout
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Row format
    #[arg(long, value_enum, default_value_t = Format::Csv)]
    pub format: Format,
    /// Write the rows to --out itself as points finish, keep the rows already there and run
    /// only the rest; the complete file is put in point order
    #[arg(long, requires = "out")]
    pub resume: bool,
    /// Run only the points with index % N == I (0-based), e.g. --shard 0/4
    #[arg(long, value_name = "I/N")]
    pub shard: Option<Shard>,
    /// Refuse sweeps of more points than this without --yes
    #[arg(long, value_name = "N", default_value_t = kvplan_sweep::DEFAULT_MAX_POINTS)]
    pub max_points: u64,
    /// Run a sweep of more than --max-points points
    #[arg(long)]
    pub yes: bool,
    /// After the run, draw --plot-y against --plot-x as an SVG line chart, one line per value
    /// of the --plot-series columns (needs --out in CSV; with --shard, plot the merged file
    /// with `kvplan plot`)
    #[arg(long, value_name = "FILE.svg", requires = "out")]
    pub plot: Option<PathBuf>,
    /// Column for the plot's x axis [default: the last axis]
    #[arg(long, value_name = "COLUMN", requires = "plot")]
    pub plot_x: Option<String>,
    /// Column for the plot's y axis [default: decode_latency_s for simulate sweeps, ttft_p99_s
    /// for serve sweeps]
    #[arg(long, value_name = "COLUMN", requires = "plot")]
    pub plot_y: Option<String>,
    /// Comma-separated columns whose values make the series [default: the other axes]
    #[arg(long, value_name = "COLUMN[,COLUMN]", requires = "plot")]
    pub plot_series: Option<String>,
}

/// `kvplan merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// OUT then the shard outputs (or only the shard outputs, with --out)
    #[arg(value_name = "FILE", required = true)]
    pub paths: Vec<PathBuf>,
    /// The merged file (else the first FILE)
    #[arg(long, value_name = "OUT")]
    pub out: Option<PathBuf>,
    /// The sweep file the shards ran: also checks that no point after the last one given is
    /// missing
    #[arg(long, value_name = "SWEEP")]
    pub sweep: Option<PathBuf>,
}

/// How `kvplan sweep` names the plot's settings in the library's messages.
const PLOT_LABELS: PlotLabels = PlotLabels {
    plot: "--plot",
    x: "--plot-x",
    y: "--plot-y",
    series: "--plot-series",
    not_csv: "draws from the CSV rows; drop --format jsonl (or plot a CSV with `kvplan plot`)",
};

impl From<SweepError> for CliError {
    fn from(e: SweepError) -> Self {
        CliError::input(e.to_string())
    }
}

/// `kvplan sweep`.
pub fn sweep(args: &SweepArgs) -> Result<String, CliError> {
    let sweep = Sweep::from_file(&args.file)?;
    if sweep.len() > args.max_points && !args.yes {
        return Err(CliError::input(format!(
            "{}: {} points, more than --max-points {}; pass --yes to run them all, or narrow the axes",
            args.file.display(),
            sweep.len(),
            args.max_points
        )));
    }
    let format = args.format;
    let (x, y, series) = (
        args.plot_x.as_deref(),
        args.plot_y.as_deref(),
        args.plot_series.as_deref(),
    );
    let plot = args
        .plot
        .as_deref()
        .map(|f| sweep.plot_spec(f, format, x, y, series, PLOT_LABELS))
        .transpose()
        .map_err(CliError::input)?;
    // --resume: keep the whole rows already written; everything is checked before writing.
    let resume = args.out.as_deref().filter(|_| args.resume);
    let points = sweep
        .points(args.shard, resume, format, "--resume")
        .map_err(CliError::input)?;
    // A resumed run into a regular file (or a new one) writes its rows in place, as they
    // finish, so that a killed run leaves every finished row for the next --resume; once
    // complete, the file is put in point order. Anything else is written in point order.
    let in_place = args.out.as_deref().filter(|_| points.keep().is_some());
    // A progress bar where stderr is a terminal.
    let ran = points.indices.len();
    let bar = kvplan_report::progress::bar();
    bar.start(ran as u64, "points");
    // Which sweep wrote the rows, beside them: before rows are written in place (--resume),
    // after the new file is complete otherwise.
    let stamp = |out: &Path| write_fingerprint(out, "--out", &sweep.fingerprint());
    if let Some(out) = in_place {
        stamp(out)?;
        set_interrupt_message(format!(
            "the rows finished so far are in {}: run the same command again (with --resume) to run the rest",
            out.display()
        ));
    }
    let ordered = in_place.is_none();
    let result = stream_to(args.out.as_deref(), "--out", points.keep(), |sink| {
        sweep.stream(
            &points.indices,
            format,
            points.header(),
            ordered,
            sink,
            || bar.advance(),
        )
    });
    drop(bar);
    match (&args.out, in_place, &result) {
        (Some(out), None, Ok(Some(_))) => stamp(out)?,
        (_, Some(out), Ok(Some(_))) => put_in_point_order(out, format)?,
        _ => {}
    }
    let Some(errors) = result? else {
        return Ok(String::new());
    };
    // With --out, stdout is free for a summary; on stdout the rows must stay alone.
    let Some(out) = &args.out else {
        if errors > 0 {
            eprintln!(
                "note: {errors} of {ran} points could not run (status error; the reason column says why)"
            );
        }
        return Ok(String::new());
    };
    if let Some(spec) = &plot {
        let svg = noted(draw_table(out, &spec.x, &spec.y, &spec.series, None)?);
        write_text(&spec.file, "--out", &svg)?;
    }
    Ok(points.summary(out, errors, plot.as_ref().map(|s| s.file.as_path())))
}

/// Writes `fp` beside the rows file `out` ([`Fingerprint::path`]) for the option `what`. The
/// lock on `out` covers the sidecar too: a temporary file of it that a killed run left is an
/// orphan, removed (with a note).
/// A FIFO or device (`/dev/null`, `/dev/stdout`) has no sidecar: nothing is written beside it.
fn write_fingerprint(out: &Path, what: &str, fp: &Fingerprint) -> Result<(), CliError> {
    if std::fs::metadata(out).is_ok_and(|m| !m.is_file()) {
        return Ok(());
    }
    let sidecar = Fingerprint::path(out);
    for tmp in remove_orphaned_temps(&sidecar) {
        hold_note(format!(
            "{what}: removed {}, left by a run that was killed while writing {}",
            tmp.display(),
            sidecar.display()
        ));
    }
    Ok(write_text(&sidecar, what, &fp.to_text("--resume"))?)
}

/// Rewrites the complete output `out` of a resumed run (its rows in the order they finished)
/// with its rows in point order, the bytes of an uninterrupted run; through a temporary file
/// renamed into place, so that a run killed meanwhile leaves the complete rows, which the next
/// --resume keeps and puts in order. A file in order already is left alone.
fn put_in_point_order(out: &Path, format: Format) -> Result<(), CliError> {
    let text = std::fs::read_to_string(out).map_err(|e| {
        CliError::failure(format!("--out: cannot read back '{}': {e}", out.display()))
    })?;
    match kvplan_sweep::rows::sort_rows(&text, format) {
        Some(sorted) => Ok(write_text(out, "--out", &sorted)?),
        None => Ok(()),
    }
}

impl MergeArgs {
    /// The merged file (`--out`, else the first FILE; none without paths) and the shards.
    pub fn output_and_inputs(&self) -> (Option<&Path>, &[PathBuf]) {
        match (&self.out, self.paths.split_first()) {
            (Some(o), _) => (Some(o.as_path()), &self.paths[..]),
            (None, Some((first, rest))) => (Some(first.as_path()), rest),
            (None, None) => (None, &[]),
        }
    }
}

/// `kvplan merge` (its output checked against the shards before it runs, in `claims`).
pub fn merge(args: &MergeArgs) -> Result<String, CliError> {
    let (Some(out), inputs @ [_, ..]) = args.output_and_inputs() else {
        return Err(CliError::input(
            "merge: give the output file and the shard outputs: kvplan merge OUT SHARD... (or --out OUT SHARD...)",
        ));
    };
    let texts = kvplan_sweep::rows::read_inputs(inputs).map_err(CliError::input)?;
    let points = args.sweep.as_deref().map(Sweep::from_file).transpose()?;
    let sweep = args.sweep.as_deref().zip(points.as_ref());
    let stamp = kvplan_sweep::fingerprint::check_shards(inputs, sweep)
        .map_err(|e| CliError::input(format!("merge: {e}")))?;
    let merged = kvplan_sweep::rows::merge(&texts, points.map(|s| s.len()))
        .map_err(|e| CliError::input(format!("merge: {e}")))?;
    write_text(out, "merge output", &merged)?;
    if let Some(f) = stamp {
        write_fingerprint(out, "merge output", &f)?;
    }
    Ok(format!("{}: merged {} files\n", out.display(), texts.len()))
}
