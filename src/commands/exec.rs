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

/// `--help`'s long text (`src/help/exec.txt`).
pub const EXEC_LONG: &str = include_str!("../help/exec.txt").trim_ascii_end();

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
    let mut p = sc.plan()?;
    crate::messages::word_notes(&mut p.notes);
    let bar = kvplan_report::progress::bar();
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
    let format = args.output.format;
    Ok(report::planner::measured_run(&p, &r, format)?)
}
