//! The dispatcher and the planner's public face: [`plan`] sends a strategy to its
//! [`Planner`] through [`crate::registry`] (the offload planner in [`crate::offload`], HeadInfer
//! in [`crate::headinfer`], KV-Runahead in [`crate::runahead`], and any registered at run time),
//! and the shared plan types ([`crate::types`], [`crate::strategy`]) and the offload planner's
//! public pieces are re-exported here, so `kvplan_planner::plan::{plan, Options, Shape,
//! Strategy, Plan}` is the one path callers use. No strategy imports this module: each reads the
//! leaves [`crate::types`] and [`crate::strategy`].

pub use crate::offload::memory_plan;
pub use crate::offload::split::{MAX_SEARCHED_STEPS, kvpr_splits, split_problem};
pub use crate::offload::{KvprOptions, SplitModel, SplitPolicy, Splits, StepSplit, splits};
pub use crate::strategy::{Defaults, Input, Planner};
pub use crate::types::*;

use kvplan_vocab::cost::CostModel;
use kvplan_vocab::error::Result;
use kvplan_vocab::hardware::HardwareProfile;
use kvplan_vocab::model::ModelSpec;

/// Plans `strategy` for `shape` of `model` on `hw`.
pub fn plan(
    model: &ModelSpec,
    hw: &HardwareProfile,
    cost: &CostModel,
    shape: &Shape,
    strategy: Strategy,
    options: &Options,
) -> Result<Plan> {
    shape.validate()?;
    crate::registry::planner(strategy).plan(&Input {
        model,
        hw,
        cost,
        shape,
        options,
    })
}
