//! `kvplan calibrate`: measure this machine, or fit a profile to measured tables or real
//! serving runs; what to measure, the fits and the profile's text are `kvplan_calibrate`'s.

use std::path::PathBuf;

use clap::Args;
use kvplan_calibrate::inputs::{Labels, Measuring, file_name, fit_runs, fit_table};
use kvplan_report as report;
use kvplan_report::files::{write_or_print, write_text};

use super::exec::open_backend;
use crate::args::*;
use crate::error::CliError;

/// `--help`'s long text (`src/help/calibrate.txt`).
pub const CALIBRATE_LONG: &str = include_str!("../help/calibrate.txt").trim_ascii_end();

/// `kvplan calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Backend
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Where to write the profile TOML (with --from-table and --from-runs: optional, else the
    /// fitted section is printed after the error table)
    #[arg(long, value_name = "FILE", required_unless_present_any = ["from_table", "from_runs"])]
    pub out: Option<PathBuf>,
    /// Fewer sizes and shapes: seconds on a CPU, for CI
    #[arg(long)]
    pub quick: bool,
    /// Preset or profile file whose fields the profile keeps where nothing is measured
    /// [default: the preset whose GPU name matches, if any; with --from-table: a100-80g-sxm
    /// or h100-sxm from the file name]
    #[arg(long, value_name = "PRESET|FILE")]
    pub base: Option<String>,
    /// Fit the [kernels] section from a measured table (Vidur's profiling CSV: model sizes,
    /// num_tokens, num_tensor_parallel_workers, one *_ms column per op), or [kernels.attention]
    /// from a measured attention table (header phase,batch_size,query_tokens_per_seq,
    /// kv_tokens_per_seq,median_ms_per_layer), instead of measuring
    #[arg(long, value_name = "FILE", conflicts_with = "quick")]
    pub from_table: Option<PathBuf>,
    /// Fit the serving figures (decode attention's KV bandwidth, the engine's host time, the
    /// frontend latency) to real serving runs: a stage table of shared-prefix runs (one row per
    /// load stage with the server's settings and the measured TTFT / E2E; see
    /// data/validation/real_vllm/); --base names the GPU's profile
    #[arg(long, value_name = "FILE", conflicts_with_all = ["quick", "models", "from_table"])]
    pub from_runs: Option<PathBuf>,
    /// With --from-runs: requests of each stage replayed while fitting (the report replays all)
    #[arg(long, value_name = "N", default_value_t = 3000, requires = "from_runs")]
    pub fit_requests: u64,
    /// Streaming multiprocessors of the GPU (the GEMM model's wave quantisation; with
    /// --from-table) [default: from the base's GPU name: A100 108, H100/H200 SXM 132]
    #[arg(long, value_name = "N", requires = "from_table")]
    pub sms: Option<u32>,
    /// Profile name [default: the --out file's stem]
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Models whose layer shapes to measure (repeatable) [default: depends on backend and
    /// --quick]; with an attention table, the model it was measured on [default: the preset the
    /// file name contains]
    #[arg(long = "model", value_name = "NAME|PATH")]
    pub models: Vec<String>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// How `kvplan calibrate` names its options in the library's messages.
const LABELS: Labels = Labels {
    command: "kvplan calibrate",
    table: "--from-table",
    runs: "--from-runs",
    out: "--out",
    quick: "--quick",
    hardware: "--hardware",
    model: "--model",
    base: "--base",
    sms: "--sms",
    fit_requests: "--fit-requests",
};

/// `kvplan calibrate`: with `--from-runs` or `--from-table` a fit, else a measurement.
pub fn calibrate(args: &CalibrateArgs) -> Result<String, CliError> {
    let (base, out, format) = (
        args.base.as_deref(),
        args.out.as_deref(),
        args.output.format,
    );
    if let Some(runs) = &args.from_runs {
        let name = args.name.as_deref();
        let bar = kvplan_report::progress::bar();
        let f = fit_runs(
            runs,
            base,
            args.fit_requests,
            name,
            out,
            LABELS,
            bar.as_ref(),
        )?;
        drop(bar);
        let heading = format!("calibrate --from-runs {}", file_name(runs));
        return Ok(report::calibrate::runs_fit(
            &heading, &f, out, "--out", format,
        )?);
    }
    if let Some(table) = &args.from_table {
        let fit = fit_table(table, &args.models, base, args.sms, LABELS)?;
        return Ok(write_or_print(
            fit.report,
            out,
            "--out",
            &fit.profile,
            &fit.section,
        )?);
    }
    let out = out.ok_or_else(|| CliError::input("--out FILE is required"))?;
    let name = args.name.as_deref();
    let mut run = Measuring::new(&args.models, base, name, out, args.quick, LABELS)?;
    let mut ex = open_backend(&args.backend)?;
    let plan = run.plan(ex.info())?;
    let bar = kvplan_report::progress::bar();
    let started = std::time::Instant::now();
    let m = kvplan_calibrate::measure(ex.as_mut(), &plan, &mut |i, total, what| {
        bar.start(total as u64, &format!("calibrating: {what}"));
        bar.set(i as u64 - 1);
    });
    drop(bar);
    let m = m?;
    let (file, text) = run.profile(&m, LABELS)?;
    write_text(out, "--out", &text)?;
    let elapsed = started.elapsed().as_secs_f64();
    Ok(report::calibrate::measurement(
        &m, &plan, &file, &run.name, out, elapsed, format,
    )?)
}
