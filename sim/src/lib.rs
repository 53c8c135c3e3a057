//! kvplan's simulator: runs a [`Schedule`](kvplan_planner::Schedule) on modelled resources and
//! returns a [`Timeline`](kvplan_planner::Timeline).
//!
//! The discrete-event engine itself is [`kvplan_planner::engine`], so the planners time their
//! candidates on the same engine (see that module for the model and the determinism rules); this
//! crate is the simulator's public face and re-exports it. [`run`](mod@run) goes from a checked
//! [`Scenario`](kvplan_planner::scenario::Scenario) to simulated reports: one strategy
//! ([`run::simulate_scenario`]) or every strategy side by side ([`run::compare`]).
//!
//! ```
//! use kvplan_planner::{CostModel, HardwareProfile, ModelSpec};
//! use kvplan_planner::plan::{plan, Options, Shape, Strategy};
//!
//! let hw = HardwareProfile::preset("a100-40g-pcie4")?;
//! let cost = CostModel::new(&hw);
//! let model = ModelSpec::preset("opt-1.3b")?;
//! let shape = Shape { batch: 8, gpu_batches: 1, prompt: 64, gen_len: 4 };
//! let p = plan(&model, &hw, &cost, &shape, Strategy::FullTransfer, &Options::default())?;
//! let timeline = kvplan_sim::simulate(&p.schedule, &cost).unwrap();
//! assert_eq!(timeline.spans.len(), p.schedule.len());
//! # Ok::<(), kvplan_planner::Error>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod run;

pub use kvplan_planner::engine::{
    EngineMap, Error, makespan, reference_spans, run, run_with, simulate,
};
