//! A profile's `[serving]` section: what a serving engine costs on the host, besides the GPU's
//! kernels. The serving simulator (`kvplan serve`) adds these to every engine step and request.
//!
//! vLLM V1 (v0.15.1) runs one engine-core process per GPU group: each step the host schedules
//! (`Scheduler.schedule`), prepares the inputs and launches the model (`GPUModelRunner.
//! execute_model`: a CUDA-graph replay, or launches around eager attention), and after the GPU
//! processes the sampled tokens (`update_from_output`, output serialisation). With asynchronous
//! scheduling (the default) the host prepares step `k + 1` while the GPU runs step `k`, so the
//! host's time hides behind the GPU's unless it is longer. The API server process tokenises
//! requests, detokenises and streams tokens; a client sees that latency on top of the engine's.
//!
//! The figures depend on the host CPU and the software version, not on the GPU: one set serves
//! every preset unless a profile gives its own, and `kvplan calibrate` fits them to measured
//! serving runs (its from-runs option).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::limits;

/// `[serving]`: host-side costs of a serving engine, microseconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServingSection {
    /// Where the figures come from.
    pub source: String,
    /// Host time before a step's launch: scheduling and input preparation, per step.
    pub schedule_us: f64,
    /// The same, per request in the step.
    pub schedule_per_seq_us: f64,
    /// The same, per token in the step (input ids, positions, slot mapping).
    pub schedule_per_token_us: f64,
    /// Host time after a step's output: sampled-token bookkeeping, `update_from_output`,
    /// output serialisation, per step.
    pub update_us: f64,
    /// The same, per request in the step.
    pub update_per_seq_us: f64,
    /// Host time to replay one full CUDA graph.
    pub graph_launch_us: f64,
    /// Host time per layer of a step run as piecewise CUDA graphs (the eager attention call
    /// between two graph pieces).
    pub piecewise_layer_us: f64,
    /// Per request, between the client and the engine: tokenisation, the hop to the engine
    /// process, detokenisation and HTTP streaming (a client-side TTFT includes it).
    pub frontend_us: f64,
    /// Host time for Triton to compile one kernel on first use (a freshly started vLLM
    /// server's fused-MoE GEMMs; the serving simulator's `cold_start`).
    pub kernel_compile_us: f64,
}

/// The built-in figures: vLLM 0.15.1 on an H100 SXM server's host, with inference-perf as the
/// client. The split of the host time into its parts is an estimate (schedule 400 us + 8 us per
/// request + 0.05 us per token, update 200 us + 6 us per request, a graph launch 50 us, 30 us
/// per layer of a piecewise step); its scale (x1.656) and the frontend latency (6.49 ms) were
/// fitted by `kvplan calibrate` (from runs) to the five served Llama-2-7B stages of
/// `data/validation/real_vllm/` (with h100-sxm's decode attention). With asynchronous
/// scheduling the host time hides behind the GPU's on these runs; it binds for small models and
/// short steps. Another host CPU, vLLM version or client needs its own fit.
impl Default for ServingSection {
    fn default() -> Self {
        ServingSection {
            source: DEFAULT_SOURCE.into(),
            schedule_us: 662.49,
            schedule_per_seq_us: 13.25,
            schedule_per_token_us: 0.0828,
            update_us: 331.24,
            update_per_seq_us: 9.937,
            graph_launch_us: 82.81,
            piecewise_layer_us: 49.686,
            frontend_us: 6494.5,
            kernel_compile_us: KERNEL_COMPILE_US,
        }
    }
}

/// The built-in compile time of one kernel, microseconds: fitted to the first load stages of
/// the three served Mixtral-8x7B runs of `data/validation/real_vllm/` (freshly started vLLM
/// 0.15.1 servers, TP 2 on H100), their TTFT means replayed with `cold_start`
/// (`serve/tests/real_vllm.rs` recomputes the fit).
pub const KERNEL_COMPILE_US: f64 = 600_000.0;

/// The source line of the built-in figures.
pub const DEFAULT_SOURCE: &str = "vLLM 0.15.1 on an H100 SXM host with an inference-perf client: \
     host-time scale and frontend latency fitted to real runs (kvplan calibrate, from runs), the \
     split of the host time estimated";

impl ServingSection {
    /// Checks every figure (`origin: serving.FIELD` in errors): each from 0 to 10 s.
    pub fn check(&self, origin: &str) -> Result<()> {
        for (field, v) in [
            ("schedule_us", self.schedule_us),
            ("schedule_per_seq_us", self.schedule_per_seq_us),
            ("schedule_per_token_us", self.schedule_per_token_us),
            ("update_us", self.update_us),
            ("update_per_seq_us", self.update_per_seq_us),
            ("graph_launch_us", self.graph_launch_us),
            ("piecewise_layer_us", self.piecewise_layer_us),
            ("frontend_us", self.frontend_us),
            ("kernel_compile_us", self.kernel_compile_us),
        ] {
            if !(v.is_finite() && (0.0..=1e7).contains(&v)) {
                return Err(Error::invalid(
                    format!("{origin}: serving.{field}"),
                    limits::show(v),
                    "must be from 0 to 10000000 microseconds",
                ));
            }
        }
        Ok(())
    }
}
