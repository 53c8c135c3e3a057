//! A checked [`Scenario`] in, simulated results out: plan, simulate, report — and the rules of
//! comparing (which strategies run side by side, which failures are reported rather than
//! fatal, and the KVPR-over-full-transfer ratios). Front ends (the CLI, a sweep, a server) call
//! these and only render what they return.
//!
//! ```
//! use kvplan_planner::scenario::{RawScenario, RawWorkload};
//!
//! let scenario = RawScenario {
//!     model: Some("opt-1.3b".into()),
//!     hardware: Some("a100-40g-pcie4".into()),
//!     workload: RawWorkload { batch: Some(8), gen_len: Some(4), ..Default::default() },
//!     ..Default::default()
//! }
//! .resolve()?;
//! let run = kvplan_planner::run::simulate_scenario(&scenario)?;
//! assert!(run.report.decode_latency_s > 0.0);
//! let c = kvplan_planner::run::compare(&scenario)?;
//! assert_eq!(c.runs.len() + c.skipped.len(), 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::report::RunReport;
use crate::scenario::Scenario;
use crate::types::{Plan, Strategy, WeightsPlacement};
use kvplan_vocab::{CostModel, Timeline};
use serde::Serialize;

/// Why a run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The planner refused the scenario (it does not fit, …) or failed.
    #[error(transparent)]
    Plan(#[from] kvplan_vocab::Error),
    /// The simulator failed on the planned schedule (a bug, not bad input).
    #[error("simulation failed: {0}")]
    Simulate(#[from] kvplan_sim::Error),
    /// `compare`: no strategy can run the scenario.
    #[error("no strategy can run this scenario; {}", skipped.iter().map(|s| format!("{}: {}", s.strategy.as_str(), s.error)).collect::<Vec<_>>().join("; "))]
    NothingRuns {
        /// Every strategy with the reason it was not run.
        skipped: Vec<Skipped>,
    },
}

impl RunError {
    /// True for errors caused by the input (a plan that does not fit, …).
    pub fn is_input_error(&self) -> bool {
        match self {
            RunError::Plan(e) => e.is_input_error(),
            RunError::Simulate(_) => false,
            RunError::NothingRuns { .. } => true,
        }
    }
}

/// One strategy planned, simulated and reported.
#[derive(Debug, Clone)]
pub struct SimulatedRun {
    /// The plan (its schedule, memory and decisions).
    pub plan: Plan,
    /// The simulated timeline of the plan's schedule.
    pub timeline: Timeline,
    /// The figures `simulate` prints.
    pub report: RunReport,
}

impl SimulatedRun {
    /// The run as a timeline export names it: its strategy, schedule and timeline.
    pub fn as_run(&self) -> kvplan_vocab::timeline::Run<'_> {
        kvplan_vocab::timeline::Run {
            name: self.plan.strategy.as_str(),
            schedule: &self.plan.schedule,
            timeline: &self.timeline,
        }
    }
}

/// Plans the scenario with its own strategy, simulates it and builds its report.
pub fn simulate_scenario(scenario: &Scenario) -> Result<SimulatedRun, RunError> {
    simulate_strategy(scenario, &scenario.cost_model(), scenario.strategy)
}

/// Plans the scenario with `strategy` on `cost` (the scenario's cost model), simulates it and
/// builds its report.
pub fn simulate_strategy(
    scenario: &Scenario,
    cost: &CostModel,
    strategy: Strategy,
) -> Result<SimulatedRun, RunError> {
    let plan = scenario.plan_with(cost, strategy)?;
    let timeline = kvplan_sim::simulate(&plan.schedule, cost)?;
    let report = RunReport::new(&plan, &timeline);
    Ok(SimulatedRun {
        plan,
        timeline,
        report,
    })
}

/// The strategies `compare` runs side by side, in this order: the registered strategies that
/// ask to be compared ([`Planner::compared`](crate::strategy::Planner::compared)).
pub fn compared() -> Vec<Strategy> {
    crate::registry::compared()
}

/// A strategy `compare` could not run for the scenario, and why.
#[derive(Debug)]
pub struct Skipped {
    /// The strategy.
    pub strategy: Strategy,
    /// The planner's reason (an input error: it does not fit, …).
    pub error: kvplan_vocab::Error,
}

/// KVPR relative to full transfer (`kvpr / full-transfer`): below 1 for latency is better.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Ratios {
    /// Decode latency ratio.
    pub decode_latency_ratio: f64,
    /// Decode throughput ratio.
    pub throughput_ratio: f64,
}

/// Every compared strategy run on one scenario.
#[derive(Debug)]
pub struct Comparison {
    /// The strategies that ran, in [`compared`] order (never empty).
    pub runs: Vec<SimulatedRun>,
    /// The strategies the planner refused, with the reason.
    pub skipped: Vec<Skipped>,
    /// KVPR over full transfer, when both ran and full transfer's decode takes time.
    pub kvpr_vs_full_transfer: Option<Ratios>,
}

impl Comparison {
    /// The run of `strategy`, if it ran.
    pub fn get(&self, strategy: Strategy) -> Option<&SimulatedRun> {
        self.runs.iter().find(|r| r.plan.strategy == strategy)
    }
}

/// Runs every strategy of [`compared`] on the scenario (ignoring its own strategy). A strategy
/// the planner refuses for the input (it does not fit, …) is [`Skipped`], not fatal; other
/// failures are. `gpu-only` has no placement choice: its weights are always on the GPU.
pub fn compare(scenario: &Scenario) -> Result<Comparison, RunError> {
    let cost = scenario.cost_model();
    let mut runs = Vec::new();
    let mut skipped = Vec::new();
    for strategy in compared() {
        let mut sc = scenario.clone();
        if strategy == Strategy::GPU_ONLY {
            sc.options.weights = WeightsPlacement::Gpu;
        }
        match simulate_strategy(&sc, &cost, strategy) {
            Ok(r) => runs.push(r),
            Err(RunError::Plan(e)) if e.is_input_error() => {
                skipped.push(Skipped { strategy, error: e })
            }
            Err(e) => return Err(e),
        }
    }
    if runs.is_empty() {
        return Err(RunError::NothingRuns { skipped });
    }
    let report = |st: Strategy| {
        runs.iter()
            .find(|r| r.plan.strategy == st)
            .map(|r| &r.report)
    };
    let kvpr_vs_full_transfer = match (report(Strategy::KVPR), report(Strategy::FULL_TRANSFER)) {
        (Some(k), Some(f)) if f.decode_latency_s > 0.0 => Some(Ratios {
            decode_latency_ratio: k.decode_latency_s / f.decode_latency_s,
            throughput_ratio: k.decode_throughput_tok_s / f.decode_throughput_tok_s,
        }),
        _ => None,
    };
    Ok(Comparison {
        runs,
        skipped,
        kvpr_vs_full_transfer,
    })
}
