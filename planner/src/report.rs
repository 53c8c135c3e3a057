//! The record `simulate` (and `exec`) prints for one run: latency, throughput, utilisation,
//! traffic and memory, in the units the KVPR paper reports them.

use serde::Serialize;

use crate::offload::{StepSplit, splits};
use crate::runahead::TtftByMethod;
use crate::types::{Order, Plan};
use kvplan_vocab::schedule::HostMemory;
use kvplan_vocab::timeline::{Breakdown, Metrics, Source, Timeline, Window, metrics};

/// One run's results. Field names are a contract: scripts read them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunReport {
    /// `kvpr`, `full-transfer`, `gpu-only`.
    pub strategy: String,
    /// Model name.
    pub model: String,
    /// Hardware profile name.
    pub hardware: String,
    /// `simulated` or `measured`.
    pub source: String,
    /// `sim`, `cpu` or `cuda`.
    pub backend: String,
    /// The profile (simulated) or the device that ran it (measured).
    pub device: String,
    /// Sequences per GPU batch.
    pub batch: u32,
    /// GPU batches per weight load.
    pub gpu_batches: u32,
    /// Prompt tokens.
    pub prompt: u32,
    /// Generated tokens.
    #[serde(rename = "gen")]
    pub gen_len: u32,
    /// Loop order.
    pub order: Order,
    /// Weights resident on the GPU.
    pub weights_on_gpu: bool,
    /// Host memory kind.
    pub host_memory: HostMemory,
    /// Time to the end of prefill (first token), seconds.
    pub prefill_latency_s: f64,
    /// Time of the `gen - 1` decode steps, seconds.
    pub decode_latency_s: f64,
    /// `batch * gpu_batches * (gen - 1) / decode_latency_s` (KVPR's definition); 0 when `gen = 1`.
    pub decode_throughput_tok_s: f64,
    /// Prefill plus decode, seconds.
    pub total_latency_s: f64,
    /// Fraction of the decode window with a kernel running on the GPU.
    pub gpu_busy_fraction: f64,
    /// Decode-window seconds with no kernel running.
    pub gpu_idle_s: f64,
    /// Bytes host→device over the whole run.
    pub h2d_bytes: u64,
    /// Bytes device→host over the whole run.
    pub d2h_bytes: u64,
    /// Peak GPU memory of the plan, bytes.
    pub peak_gpu_bytes: u64,
    /// Peak host memory of the plan, bytes.
    pub peak_host_bytes: u64,
    /// Mean fraction of cached tokens recomputed per decode step (KVPR; 0 otherwise).
    pub mean_recompute_fraction: f64,
    /// Per-category summed op time in the decode window, seconds.
    pub decode_breakdown: Breakdown,
    /// Busy fraction of each stream in the decode window, by stream name.
    pub stream_busy_fraction: std::collections::BTreeMap<String, f64>,
    /// Ops in the schedule.
    pub ops: usize,
    /// Decisions and warnings.
    pub notes: Vec<crate::types::PlanNote>,
}

impl RunReport {
    /// Builds the report of `plan` run as `timeline` (simulated or measured, from its source).
    pub fn new(plan: &Plan, timeline: &Timeline) -> Self {
        let (source, backend, device) = match &timeline.source {
            Source::Simulated { hardware } => ("simulated", "sim".to_string(), hardware.clone()),
            Source::Measured { backend, device } => ("measured", backend.clone(), device.clone()),
        };
        let whole = metrics(&plan.schedule, timeline, Window::Whole);
        let decode: Metrics = metrics(&plan.schedule, timeline, Window::Decode);
        let decode_latency = if plan.shape.gen_len > 1 {
            whole.makespan_s - whole.prefill_end_s
        } else {
            0.0
        };
        let tokens = plan.shape.total_batch() as f64 * f64::from(plan.shape.gen_len - 1);
        let splits = splits(&plan.decisions);
        let mean_frac = if splits.is_empty() {
            0.0
        } else {
            splits.iter().map(recompute_fraction).sum::<f64>() / splits.len() as f64
        };
        RunReport {
            strategy: plan.strategy.as_str().into(),
            model: plan.model.clone(),
            hardware: plan.hardware.clone(),
            source: source.into(),
            backend,
            device,
            batch: plan.shape.batch,
            gpu_batches: plan.shape.gpu_batches,
            prompt: plan.shape.prompt,
            gen_len: plan.shape.gen_len,
            order: plan.order,
            weights_on_gpu: plan.weights_on_gpu,
            host_memory: plan.host_memory,
            prefill_latency_s: whole.prefill_end_s,
            decode_latency_s: decode_latency,
            decode_throughput_tok_s: if decode_latency > 0.0 {
                tokens / decode_latency
            } else {
                0.0
            },
            total_latency_s: whole.makespan_s,
            gpu_busy_fraction: decode.gpu_busy_fraction,
            gpu_idle_s: decode.gpu_idle_s,
            h2d_bytes: whole.h2d_bytes,
            d2h_bytes: whole.d2h_bytes,
            peak_gpu_bytes: plan.memory.gpu_bytes(),
            peak_host_bytes: plan.memory.host_bytes(),
            mean_recompute_fraction: mean_frac,
            stream_busy_fraction: decode
                .streams
                .iter()
                .map(|s| (s.name.clone(), s.busy_fraction))
                .collect(),
            decode_breakdown: decode.breakdown,
            ops: plan.schedule.len(),
            notes: plan.notes.clone(),
        }
    }
}

/// Fraction of a decode step's cached tokens that KVPR recomputes (`l / s'`).
pub fn recompute_fraction(step: &StepSplit) -> f64 {
    f64::from(step.split.recompute_tokens) / f64::from(step.seq_len.max(1))
}

/// Fraction of the transfer-only layer time a KVPR split saves (`1 - t(l) / t(0)`).
pub fn saved_fraction(step: &StepSplit) -> f64 {
    1.0 - step.split.layer_s / step.split.transfer_only_s
}

/// Each KV-Runahead TTFT method (named as in [`TtftByMethod`]'s fields: `runahead`,
/// `single_device`, `even_chain`, `tensor_parallel`) with its TTFT in seconds and its speed-up
/// over one device.
pub fn ttft_speedups(t: &TtftByMethod) -> [(&'static str, f64, f64); 4] {
    let one = t.single_device;
    [
        ("runahead", t.runahead),
        ("single_device", t.single_device),
        ("even_chain", t.even_chain),
        ("tensor_parallel", t.tensor_parallel),
    ]
    .map(|(name, v)| (name, v, one / v))
}
