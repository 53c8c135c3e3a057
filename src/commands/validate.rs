//! `kvplan validate`: one scenario simulated and executed, and how far the two differ.

use std::path::PathBuf;

use clap::Args;

use kvplan_planner::report::RunReport;
use kvplan_planner::run::simulate_scenario;
use kvplan_report as report;
use kvplan_report::files::write_trace;
use kvplan_vocab::timeline::Run;

use super::diff::verdict;
use super::exec::open_backend;
use crate::args::*;
use crate::error::CliError;

/// `--help`'s long text (`src/help/validate.txt`).
pub const VALIDATE_LONG: &str = include_str!("../help/validate.txt").trim_ascii_end();

/// `kvplan validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// What to run (--hardware is the profile to validate)
    #[command(flatten)]
    pub run: StrategyRunArgs,
    /// Backend
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Largest acceptable end-to-end relative error of the makespan
    #[arg(long, value_name = "FRACTION", default_value_t = 0.10)]
    pub max_error: f64,
    /// Write both timelines into one Chrome trace (processes `simulated` and `measured`)
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `kvplan validate`.
pub fn validate(args: &ValidateArgs) -> Result<String, CliError> {
    if !(args.max_error.is_finite() && args.max_error > 0.0) {
        return Err(CliError::input(format!(
            "--max-error: must be a positive fraction such as 0.1 (got {})",
            args.max_error
        )));
    }
    let sc = args.run.run.resolve_executed(args.run.strategy.clone())?;
    let busy = busy_machine();
    if let Some(b) = &busy {
        crate::messages::hold_note(format!(
            "{b}: the measured times include other work, so the error can exceed --max-error for that alone; measure on a quiet machine"
        ));
    }
    let mut s = simulate_scenario(&sc)?;
    crate::messages::word_run(&mut s);
    let (p, schedule) = (&s.plan, &s.plan.schedule);
    let measured = open_backend(&args.backend)?.run(schedule)?;
    if let Some(path) = &args.trace {
        let run = |name, timeline| Run {
            name,
            schedule,
            timeline,
        };
        let runs = [run("simulated", &s.timeline), run("measured", &measured)];
        write_trace(path, "--trace", &runs)?;
    }
    let c = kvplan_calibrate::compare(schedule, &s.timeline, &measured);
    let rm = RunReport::new(p, &measured);
    let format = args.output.format;
    let out = report::planner::validation(p, &s.report, &rm, &c, args.max_error, format)?;
    let failed = (c.end_to_end_error > args.max_error).then(|| {
        format!(
            "end-to-end error {:.1}% exceeds --max-error {:.1}%{}",
            c.end_to_end_error * 100.0,
            args.max_error * 100.0,
            busy.as_ref()
                .map_or(String::new(), |b| format!(" ({b} when it started)"))
        )
    });
    verdict(out, failed)
}

/// `the machine is busy (load average 3.1 on 2 cores)` when the one-minute load average
/// (`/proc/loadavg`, Linux) is above half the cores: other work shares the CPU a measurement
/// times. `None` when it is not, or where the load cannot be read.
fn busy_machine() -> Option<String> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let load: f64 = text.split_whitespace().next()?.parse().ok()?;
    let cores = std::thread::available_parallelism().ok()?.get();
    (load > 0.5 * cores as f64)
        .then(|| format!("the machine is busy (load average {load:.1} on {cores} cores)"))
}
