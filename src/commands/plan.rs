//! `kvplan plan kvpr|headinfer|runahead`: a planner's decisions, without simulating.

use clap::{Args, Subcommand};

use crate::args::*;
use crate::error::CliError;
use kvplan_planner::plan::Strategy;
use kvplan_report as report;

/// Planners.
#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// KVPR: the recompute/transfer split for every decode step, and why
    Kvpr(PlanArgs),
    /// HeadInfer: heads per offload group, prefill chunk size and memory for a long context
    Headinfer(PlanArgs),
    /// KV-Runahead: the context partition over devices, TTFT per method and the speed-up
    Runahead(PlanArgs),
}

/// `kvplan plan ...`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// What to plan
    #[command(flatten)]
    pub run: RunArgs,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `kvplan plan <planner>`: the scenario resolved with the planner's strategy, and its plan.
pub fn plan(planner: &PlanCommand) -> Result<String, CliError> {
    let (args, strategy) = match planner {
        PlanCommand::Kvpr(a) => (a, Strategy::Kvpr),
        PlanCommand::Headinfer(a) => (a, Strategy::HeadInfer),
        PlanCommand::Runahead(a) => (a, Strategy::Runahead),
    };
    let sc = args.run.resolve(Some(strategy.as_str().into()), &[])?;
    let (p, format) = (sc.plan()?, args.output.format);
    Ok(match strategy {
        Strategy::Kvpr => report::planner::kvpr_plan(&sc, &p, format),
        Strategy::Runahead => report::planner::runahead_plan(&sc, &p, format),
        _ => report::planner::headinfer_plan(&sc, &p, format),
    }?)
}
