//! `kvplan exec`: the plan `simulate` would run, run for real on a backend.

use std::path::PathBuf;

use clap::Args;

use crate::args::*;
use crate::error::CliError;
use kvplan_exec::{BackendKind, ExecOptions, Executor};
use kvplan_planner::report::RunReport;
use kvplan_report as report;
use kvplan_report::files::write_trace;
use kvplan_vocab::timeline::Run;

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

/// `kvplan exec`.
pub fn exec(args: &ExecArgs) -> Result<String, CliError> {
    let sc = args.run.run.resolve_executed(args.run.strategy.clone())?;
    let p = sc.plan()?;
    let bar = crate::progress::bar();
    let timeline = open_backend(&args.backend)?.run_with(&p.schedule, bar.as_ref())?;
    drop(bar);
    if let Some(path) = &args.trace {
        let run = Run {
            name: "measured",
            schedule: &p.schedule,
            timeline: &timeline,
        };
        write_trace(path, "--trace", &[run])?;
    }
    let r = RunReport::new(&p, &timeline);
    let format = args.output.format.into();
    Ok(report::planner::measured_run(&p, &r, format)?)
}
