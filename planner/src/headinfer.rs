//! HeadInfer (METHODS.md section 2): head-wise KV offload for long contexts — memory model per
//! strategy, capacity search, head-group and chunk planning, prefill/decode schedules.
//!
//! (Being implemented; see `plan` for the entry point the shared planner calls.)

use serde::Serialize;

use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::hardware::HardwareProfile;
use crate::model::ModelSpec;
use crate::plan::{Options, Plan, Shape};

/// HeadInfer options (all optional: the planner chooses).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HeadInferOptions {
    /// KV heads per offload group (fixed), or the adaptive policy when `None`.
    pub heads_per_group: Option<u32>,
    /// Prefill chunk tokens (fixed), or chosen from the roofline when `None`.
    pub chunk_tokens: Option<u32>,
}

/// The decisions of a HeadInfer plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeadInferDetails {
    /// KV heads per offload group.
    pub heads_per_group: u32,
    /// Prefill chunk tokens.
    pub chunk_tokens: u32,
}

/// Plans HeadInfer for `shape` (`shape.prompt` is the context length).
pub fn plan(
    model: &ModelSpec,
    hw: &HardwareProfile,
    cost: &CostModel,
    shape: &Shape,
    options: &Options,
) -> Result<Plan> {
    let _ = (model, hw, cost, shape, options);
    Err(Error::invalid(
        "--strategy",
        "headinfer",
        "the HeadInfer planner is not built yet",
    ))
}
