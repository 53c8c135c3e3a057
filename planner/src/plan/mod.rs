//! Plans: the shared types ([`types`]) and the
//! fixed-batch offload planner (KVPR, full transfer, gpu-only: [`offload`], its split search
//! [`split`] and schedule builder [`offload_schedule`]). [`plan`] dispatches a strategy to its
//! planner; HeadInfer and KV-Runahead live in [`crate::headinfer`] and [`crate::runahead`].

pub mod offload;
pub mod offload_schedule;
pub mod split;
pub mod types;

pub use offload::memory_plan;
pub use split::{MAX_SEARCHED_STEPS, kvpr_splits, split_problem};
pub use types::*;

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
    match strategy {
        Strategy::HeadInfer => crate::headinfer::plan(model, hw, cost, shape, options),
        Strategy::Runahead => crate::runahead::plan(model, hw, cost, shape, options),
        Strategy::Kvpr | Strategy::FullTransfer | Strategy::GpuOnly => {
            offload::plan(model, hw, cost, shape, strategy, options)
        }
    }
}
