//! `kvplan exec`: the plan `simulate` would run, run for real on a backend.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::args::*;
use crate::error::CliError;
use kvplan_exec::{BackendKind, ExecOptions, Executor};
use kvplan_planner::report::RunReport;
use kvplan_report as report;
use kvplan_report::files::write_output;
use kvplan_vocab::timeline::{Run, write_chrome_trace, write_csv};

pub const EXEC_LONG: &str = "\
Plan a scenario exactly as `simulate` does, then run the schedule for real and report the
measured timeline with the same fields (and --trace) as `simulate`.

  --backend cuda  NVIDIA GPU through cudarc (driver, cuBLAS and NVRTC loaded at run time): copy
                  engines on their own streams, cuBLAS GEMMs, NVRTC attention kernels, events
                  for dependencies and timing. Fails with one line where there is no GPU.
  --backend cpu   one thread per stream on host memory with real f32 arithmetic; runs anywhere.

Weights, activations and the KV cache are synthetic (seeded random) at the model's real shapes:
timing does not depend on values, and nothing is downloaded. The --hardware profile still
decides the plan (memory checks, KVPR split); pass a calibrated profile of the machine you run
on for a plan that fits it.";

/// `kvplan exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// What to run
    #[command(flatten)]
    pub run: StrategyRunArgs,
    /// Backend
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Write the measured timeline (Chrome trace JSON, or CSV when FILE ends in .csv)
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

pub(crate) fn open_backend(b: &BackendArgs) -> Result<Box<dyn Executor>, CliError> {
    let kind = BackendKind::parse(&b.backend).ok_or_else(|| {
        CliError::input(format!(
            "--backend: unknown backend '{}'; use cuda or cpu",
            b.backend
        ))
    })?;
    let opts = ExecOptions {
        device: b.device,
        seed: b.seed,
        warmup_runs: b.warmup,
    };
    Ok(kvplan_exec::open(kind, &opts)?)
}

pub(crate) fn write_runs(path: &Path, runs: &[Run]) -> Result<(), CliError> {
    let csv = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    Ok(write_output(path, "--trace", |w| {
        if csv {
            write_csv(runs, w)
        } else {
            write_chrome_trace(runs, w)
        }
    })?)
}

/// `kvplan exec`.
pub fn exec(args: &ExecArgs) -> Result<String, CliError> {
    let sc = args.run.run.resolve(args.run.strategy.clone())?;
    let p = sc.plan()?;
    let mut ex = open_backend(&args.backend)?;
    let timeline = ex.run(&p.schedule)?;
    if let Some(path) = &args.trace {
        write_runs(
            path,
            &[Run {
                name: "measured",
                schedule: &p.schedule,
                timeline: &timeline,
            }],
        )?;
    }
    let r = RunReport::new(&p, &timeline);
    Ok(report::planner::measured_run(
        &p,
        &r,
        args.output.format.into(),
    )?)
}
