//! `kvplan sweep` and `kvplan merge`: the sweep file checked against the command's limits, the
//! rows of this run's points (`--shard`, `--resume`) streamed to stdout or `--out` with a
//! progress bar, and shard outputs joined. The sweep itself (file, points, rows, merge) is
//! `kvplan_sweep`.

use std::path::{Path, PathBuf};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use kvplan_report::files::{stream_to, write_text};
use kvplan_sweep::{Format, PlotLabels, Shard, Sweep, SweepError};

use super::plot::noted;
use crate::error::CliError;
use kvplan_report::plots::draw_table;

pub const SWEEP_LONG: &str = "\
Run every point of a sweep file through the same path as `kvplan simulate FILE` (kind =
\"simulate\": planner and discrete-event simulator) or `kvplan serve FILE` (kind = \"serve\":
the serving simulator), in parallel (RAYON_NUM_THREADS threads; a progress bar on a terminal),
and write one row per point in point order, whatever the thread count.

  kind = \"simulate\"               # or \"serve\"
  [base]                          # a scenario exactly as `kvplan simulate FILE` reads it
  model = \"opt-6.7b\"              #   (or, instead of [base]: base_file = \"scenarios/x.toml\",
  hardware = \"a100-40g-pcie4\"     #   relative to the sweep file)
  [base.workload]
  prompt = 128
  gen = 32
  [axes]                          # cartesian product; first axis outermost, last fastest
  hardware = [\"a100-40g-pcie4\", \"h100-pcie\"]
  \"workload.batch\" = [8, 16, 32]   # any scenario field by its dotted path
  strategy = [\"kvpr\", \"full-transfer\"]
  [[points]]                      # optional explicit points, after the grid
  \"workload.batch\" = 64
  \"offload.split\" = 100

Any field works (model, hardware, strategy, dtype, workload.*, offload.*, headinfer.*,
runahead.*; for serve: workload.qps / arrivals / prompt_lengths / output_lengths / trace /
requests / seed, serve.scheduler / preemption / block_size / tensor_parallel_size, ...): each
point's values are set at their paths in the base and read as the scenario, so an unknown field
or a value of the wrong type stops the sweep before it starts, naming the axis. Relative paths
are relative to the file that writes them.

Columns: point, the axes' paths (then fields only [[points]] set), the metrics
(simulate: prefill_latency_s, decode_latency_s, total_latency_s, decode_throughput_tok_s,
gpu_busy_fraction, gpu_idle_s, peak_gpu_bytes, peak_host_bytes, h2d_bytes, d2h_bytes,
mean_recompute_fraction, ops; serve: requests, finished, rejected, output_tok_s, total_tok_s,
requests_per_s, ttft/tpot/e2e/queue p50/p90/p99 in seconds, preemptions, swap_out_bytes,
swap_in_bytes, gpu_busy_fraction, makespan_s, iterations, gpu_blocks), then status (ok or error)
and reason: a point that cannot run (it does not fit, an invalid combination) is a row with
status error and why, not a failure.

Large and distributed sweeps:
  --out FILE --resume   continue a killed run: whole rows already in FILE are kept (a cut-off
                        last line is recomputed), the rest appended; the result is the same
                        bytes as an uninterrupted run
  --shard I/N           run only points with index % N == I (0-based); then
                        `kvplan merge OUT SHARD...` gives the unsharded file byte for byte
  --yes                 needed above --max-points (default 100000) points
  --plot FILE.svg       after the run, --plot-y against --plot-x, one line per value of the
                        other axes (--plot-series to choose); needs --out in CSV";

pub const MERGE_LONG: &str = "\
Join the outputs of `kvplan sweep FILE --shard I/N` (CSV or JSONL) into the file the unsharded
run writes, byte for byte: one header, rows in point order. Fails, naming the file or point, on
different columns (outputs of different sweeps), a point in two inputs, a missing point, or a cut-off
last line. Gaps below the largest point are always found; give --sweep FILE to check the points
after it too.
  kvplan merge all.csv shard-0.csv shard-1.csv shard-2.csv
  kvplan merge --out all.csv --sweep sweep.toml shard-*.csv";

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
    /// Keep the rows already in --out and run only the rest
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
    // A progress bar where stderr is a terminal (indicatif hides it elsewhere).
    let ran = points.indices.len();
    let template = "{bar:40} {pos}/{len} points, {elapsed} elapsed, about {eta} left";
    let style = ProgressStyle::with_template(template).expect("valid template");
    let bar = ProgressBar::new(ran as u64).with_style(style);
    let result = stream_to(args.out.as_deref(), "--out", points.keep(), |sink| {
        sweep.stream(&points.indices, format, points.header(), sink, || {
            bar.inc(1)
        })
    });
    bar.finish_and_clear();
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

/// `kvplan merge`.
pub fn merge(args: &MergeArgs) -> Result<String, CliError> {
    let (out, inputs) = match &args.out {
        Some(o) => (o.as_path(), &args.paths[..]),
        None => (args.paths[0].as_path(), &args.paths[1..]),
    };
    if inputs.is_empty() {
        return Err(CliError::input(
            "merge: give the output file and the shard outputs: kvplan merge OUT SHARD... (or --out OUT SHARD...)",
        ));
    }
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    };
    if let Some(i) = inputs.iter().find(|i| same(i, out)) {
        return Err(CliError::input(format!(
            "merge: the output '{}' is also an input; the output comes first (kvplan merge OUT SHARD...) or after --out",
            i.display()
        )));
    }
    let texts = kvplan_sweep::rows::read_inputs(inputs).map_err(CliError::input)?;
    let points = args.sweep.as_deref().map(Sweep::from_file).transpose()?;
    let merged = kvplan_sweep::rows::merge(&texts, points.map(|s| s.len()))
        .map_err(|e| CliError::input(format!("merge: {e}")))?;
    write_text(out, "merge output", &merged)?;
    Ok(format!("{}: merged {} files\n", out.display(), texts.len()))
}
