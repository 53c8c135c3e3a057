//! `kvplan plan <strategy>`: a planner's decisions, without simulating. KVPR, HeadInfer and
//! KV-Runahead have their own reports; any other registered strategy
//! ([`kvplan_planner::registry`]) prints the generic one: the plan, its decisions, memory and
//! notes.

use clap::{Args, FromArgMatches, Subcommand};

use crate::args::*;
use crate::error::CliError;
use kvplan_planner::plan::Strategy;
use kvplan_planner::registry;
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
    /// Any other registered strategy, by name, with the same options.
    #[command(external_subcommand)]
    Registered(Vec<String>),
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
    let registered: PlanArgs;
    let (args, strategy) = match planner {
        PlanCommand::Kvpr(a) => (a, Strategy::KVPR),
        PlanCommand::Headinfer(a) => (a, Strategy::HEADINFER),
        PlanCommand::Runahead(a) => (a, Strategy::RUNAHEAD),
        PlanCommand::Registered(words) => {
            let (strategy, args) = registered_args(words)?;
            registered = args;
            (&registered, strategy)
        }
    };
    let sc = args.run.resolve(Some(strategy.as_str().into()), &[])?;
    let (mut p, format) = (sc.plan()?, args.output.format);
    crate::messages::word_notes(&mut p.notes);
    Ok(match strategy {
        Strategy::KVPR => report::planner::kvpr_plan(&sc, &p, format),
        Strategy::RUNAHEAD => report::planner::runahead_plan(&sc, &p, format),
        Strategy::HEADINFER => report::planner::headinfer_plan(&sc, &p, format),
        _ => report::planner::any_plan(&p, format),
    }?)
}

/// `words` (a strategy's name, then its arguments) parsed as [`PlanArgs`], for a strategy that
/// is registered but has no subcommand of its own.
fn registered_args(words: &[String]) -> Result<(Strategy, PlanArgs), CliError> {
    let name = words.first().map_or("", String::as_str);
    let Some(planner) = registry::find(name) else {
        return Err(CliError::input(format!(
            "plan: unknown strategy '{name}'; use one of {}",
            registry::names().join(", ")
        )));
    };
    let command = PlanArgs::augment_args(clap::Command::new(planner.name()));
    let matches = command.try_get_matches_from(words).map_err(|e| {
        let text = e.render().to_string();
        CliError::input(
            text.lines()
                .next()
                .unwrap_or("invalid arguments")
                .trim_start_matches("error: ")
                .to_string(),
        )
    })?;
    let args = PlanArgs::from_arg_matches(&matches).map_err(|e| CliError::input(e.to_string()))?;
    Ok((planner.strategy(), args))
}
