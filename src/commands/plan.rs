//! `kvplan plan kvpr|headinfer|runahead`: a planner's decisions, without simulating.

use clap::{Args, Subcommand};

use crate::args::*;
use crate::error::CliError;
use kvplan_planner::plan::{Strategy, split_problem};
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
    let sc = args.run.resolve(Some(strategy.as_str().into()))?;
    let cost = sc.cost_model();
    let p = sc.plan_with(&cost, strategy)?;
    let format = args.output.format.into();
    Ok(match strategy {
        Strategy::Kvpr => {
            // Why the first decode step's split is what it is.
            let (gpu, host, model) = (p.weights_on_gpu, p.host_memory, sc.options.split_model);
            let problem0 = split_problem(&cost, &sc.model, &sc.shape, gpu, host, 1, model);
            let first = p.decisions.splits().first();
            let why = first.map(|s| s.split.reason.explain(&problem0, &s.split));
            report::planner::kvpr_plan(&sc, &p, why, format)
        }
        Strategy::Runahead => report::planner::runahead_plan(&sc, &p, format),
        _ => report::planner::headinfer_plan(&sc, &p, format),
    }?)
}
