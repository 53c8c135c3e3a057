//! `kvplan simulate`: a scenario planned and run on the discrete-event simulator.

use std::path::PathBuf;

use clap::Args;

use crate::args::*;
use crate::error::CliError;
use kvplan_planner::plan::Strategy;
use kvplan_planner::run::{SimulatedRun, compare, compared, simulate_scenario};
use kvplan_report as report;
use kvplan_report::files::write_trace;

/// `--help`'s long text (`src/help/simulate.txt`).
pub const SIMULATE_LONG: &str = include_str!("../help/simulate.txt").trim_ascii_end();

/// `kvplan simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// What to run
    #[command(flatten)]
    pub run: StrategyRunArgs,
    /// Run kvpr, full-transfer and gpu-only and print them side by side (ignores --strategy)
    #[arg(long)]
    pub compare: bool,
    /// Write the simulated timeline: Chrome trace JSON for Perfetto / chrome://tracing, or CSV
    /// when FILE ends in .csv (one track per stream; with --compare, one process per strategy)
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `kvplan simulate`.
pub fn simulate(args: &SimulateArgs) -> Result<String, CliError> {
    let compared: Vec<Strategy> = if args.compare { compared() } else { Vec::new() };
    let sc = args.run.run.resolve(args.run.strategy.clone(), &compared)?;
    let (trace, format) = (args.trace.as_deref(), args.output.format);
    if !args.compare {
        let mut s = simulate_scenario(&sc)?;
        crate::messages::word_run(&mut s);
        if let Some(path) = trace {
            write_trace(path, "--trace", &[s.as_run()])?;
        }
        return Ok(report::planner::simulated_run(&s, trace, format)?);
    }
    // --compare: the library's rules pick the strategies and skip those that cannot run.
    let mut c = compare(&sc)?;
    c.runs.iter_mut().for_each(crate::messages::word_run);
    if let Some(path) = trace {
        let runs: Vec<_> = c.runs.iter().map(SimulatedRun::as_run).collect();
        write_trace(path, "--trace", &runs)?;
    }
    Ok(report::planner::comparison(&sc, &c, trace, format)?)
}
