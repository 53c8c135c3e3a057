//! KV-Runahead (METHODS.md section 3): parallel prefill over `P` devices with an uneven context
//! partition and a point-to-point KV chain.
//!
//! (Being implemented; see `plan` for the entry point the shared planner calls.)

use serde::Serialize;

use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::hardware::HardwareProfile;
use crate::model::ModelSpec;
use crate::plan::{Options, Plan, Shape};

/// KV-Runahead options.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunaheadOptions {
    /// Devices available (`P`).
    pub devices: u32,
    /// Device-to-device bandwidth override, GB/s (else the profile's peer link).
    pub link_gbps: Option<f64>,
    /// Device-to-device latency override, microseconds.
    pub link_latency_us: Option<f64>,
}

impl Default for RunaheadOptions {
    fn default() -> Self {
        RunaheadOptions {
            devices: 4,
            link_gbps: None,
            link_latency_us: None,
        }
    }
}

/// TTFT of each method, seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TtftByMethod {
    /// The chosen KV-Runahead partition.
    pub runahead: f64,
    /// All prefill on one device.
    pub single_device: f64,
    /// Equal chunks with the same chain.
    pub even_chain: f64,
    /// Tensor/sequence-parallel prefill with an all-gather of K, V.
    pub tensor_parallel: f64,
}

/// The decisions of a KV-Runahead plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunaheadDetails {
    /// Devices the chosen plan uses (may be fewer than offered).
    pub devices_used: u32,
    /// Context tokens per device, in chain order; sums to the context.
    pub partition: Vec<u32>,
    /// Predicted TTFT per method.
    pub ttft_s: TtftByMethod,
    /// `single_device / runahead`.
    pub speedup: f64,
}

/// Plans KV-Runahead for `shape` (`shape.prompt` is the context length).
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
        "runahead",
        "the KV-Runahead planner is not built yet",
    ))
}
