//! Plans: the shared types ([`types`]), the kernels every planner emits ([`kernels`]), and the
//! fixed-batch offload planner (KVPR, full transfer, gpu-only: [`offload`], its split search
//! [`split`] and schedule builder [`offload_schedule`]). [`plan`] dispatches a strategy to its
//! planner; HeadInfer and KV-Runahead live in [`crate::headinfer`] and [`crate::runahead`].

pub mod kernels;
pub mod offload;
pub mod offload_schedule;
pub mod split;
pub mod types;

pub use kernels::{
    attention_batch_of, batch_attention_op, concat_kernel, embed_op, forward_ops,
    forward_ops_batched, head_ops, layer_compute_s, layer_kernels, recompute_gemm,
};
pub use offload::memory_plan;
pub use split::{MAX_SEARCHED_STEPS, kvpr_splits, split_problem};
pub use types::*;

use crate::cost::CostModel;
use crate::error::Result;
use crate::hardware::HardwareProfile;
use crate::model::ModelSpec;

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
