//! `kvplan plan kvpr|headinfer|runahead`: a planner's decisions, without simulating.

use clap::{Args, Subcommand};

use crate::args::*;
use crate::error::CliError;
use kvplan_planner::plan::{Plan, Strategy};
use kvplan_planner::scenario::Scenario;
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

/// `kvplan plan kvpr`.
pub fn plan_kvpr(args: &PlanArgs) -> Result<String, CliError> {
    let sc = args.run.resolve(Some(Strategy::Kvpr.as_str().into()))?;
    let cost = sc.cost_model();
    let p = sc.plan_with(&cost, Strategy::Kvpr)?;
    let problem0 = kvplan_planner::plan::split_problem(
        &cost,
        &sc.model,
        &sc.shape,
        p.weights_on_gpu,
        p.host_memory,
        1,
        sc.options.split_model,
    );
    let why = p
        .decisions
        .splits()
        .first()
        .map(|s| s.split.reason.explain(&problem0, &s.split));
    Ok(report::planner::kvpr_plan(
        &sc,
        &p,
        why,
        args.output.format.into(),
    )?)
}

/// Resolves a `plan <planner>` command's scenario with the strategy fixed.
fn plan_for(args: &PlanArgs, strategy: Strategy) -> Result<(Scenario, Plan), CliError> {
    let sc = args.run.resolve(Some(strategy.as_str().into()))?;
    let p = sc.plan_with(&sc.cost_model(), strategy)?;
    Ok((sc, p))
}

/// `kvplan plan <planner>`.
pub fn plan(planner: &PlanCommand) -> Result<String, CliError> {
    let (args, strategy) = match planner {
        PlanCommand::Kvpr(a) => return plan_kvpr(a),
        PlanCommand::Headinfer(a) => (a, Strategy::HeadInfer),
        PlanCommand::Runahead(a) => (a, Strategy::Runahead),
    };
    let (sc, p) = plan_for(args, strategy)?;
    let format = args.output.format.into();
    Ok(match strategy {
        Strategy::Runahead => report::planner::runahead_plan(&sc, &p, format),
        _ => report::planner::headinfer_plan(&sc, &p, format),
    }?)
}
