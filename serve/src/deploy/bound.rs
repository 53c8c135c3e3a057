//! The roofline bound on a unit's request rate, from the datasheet alone (no simulation): what
//! no schedule can beat, so a candidate below it is pruned without being served.
//!
//! Per replica (one tensor-parallel rank's shapes and its GPU):
//! - **decode**: a decode step reads every active decoder weight once (the linear weights in
//!   their stored dtype; a mixture of experts its `top_k` routed and shared experts only) and
//!   the K and V of every sequence it carries, at the GPU's memory bandwidth, and carries at
//!   most `max_num_seqs` sequences. Over a run, a request's `out` decode steps share the
//!   weights' read with at most `max_num_seqs − 1` others and each read at least its prompt's
//!   K and V, so a request takes at least `(out × weight bytes / max_num_seqs + KV bytes per
//!   token × prompt × out) / bandwidth` of the GPU: the rate is at most `bandwidth / (mean out
//!   × weight bytes / max_num_seqs + KV bytes per token × mean(prompt × out))` (attention over
//!   the whole context, as the simulator models it: no sliding window);
//! - **compute**: every token costs at least two FLOPs per active linear parameter at the
//!   GPU's highest dense peak, so tokens per second are at most `peak / (2 × active linear
//!   parameters)`; with prefix caching off, prompt tokens count too (a cached prompt token costs
//!   nothing, so with caching on only output tokens do).
//!
//! Embedding lookups, norms, attention and the KV cache's reads are left out and a 1% margin
//! covers the norms folded into the byte count: the bound is above any real rate. A colocated
//! unit's rate is at most its replica's output-token bound over the mean output length; a
//! disaggregated unit's, the smaller of its decode pool's (output tokens) and its prefill
//! pool's (prompt tokens, with prefix caching off).

use crate::deploy::{Layout, Load};
use crate::scenario::ServeScenario;
use kvplan_vocab::{HardwareProfile, ModelSpec};

/// A unit's roofline bound.
#[derive(Debug, Clone, PartialEq)]
pub struct RateBound {
    /// Requests per second no unit of the shape can exceed.
    pub requests_per_s: f64,
    /// Which limit binds, in words.
    pub why: String,
}

/// One replica's bounds: requests/s by the decode steps' reads, and tokens/s by compute.
fn replica(m: &ModelSpec, hw: &HardwareProfile, max_num_seqs: u32, load: &Load) -> (f64, f64) {
    let dtype_bytes = m.dtype_bytes() as f64;
    let params = m.params() as f64;
    let linear = m.linear_params() as f64;
    let active_linear = (linear - (params - m.active_params() as f64)).max(1.0);
    let linear_bytes = (m.weight_bytes() as f64 - (params - linear) * dtype_bytes).max(1.0);
    let active_bytes = 0.99 * linear_bytes * active_linear / linear.max(1.0);
    let per_request = load.mean_output_tokens.max(1.0) * active_bytes / f64::from(max_num_seqs)
        + 0.99 * m.kv_bytes_per_token() as f64 * load.mean_prompt_x_output;
    let decode = hw.gpu.mem_bandwidth / per_request;
    let p = &hw.gpu.peak_flops;
    let peak = [p.fp16, p.bf16, p.fp32, p.fp8.unwrap_or(0.0)]
        .into_iter()
        .fold(0.0, f64::max);
    let compute = peak / (2.0 * 0.99 * active_linear);
    (decode, compute)
}

/// The bound on a unit of `sc` (one unit resolved) laid out as `layout`, for `load`'s lengths.
pub fn unit_rate_bound(sc: &ServeScenario, layout: Layout, load: &Load) -> RateBound {
    let out = load.mean_output_tokens.max(1.0);
    let input = load.mean_input_tokens.max(0.0);
    let colocated = |m: &ModelSpec, hw: &HardwareProfile, seqs: u32, caching: bool| {
        let (d, c) = replica(m, hw, seqs, load);
        let per_token = if caching { out } else { out + input };
        let by_decode = d;
        let by_compute = c / per_token;
        if by_decode <= by_compute {
            (
                by_decode,
                format!("decode: {seqs} sequences a step, weights read once a step"),
            )
        } else {
            (
                by_compute,
                "compute: 2 FLOPs per active parameter a token".to_string(),
            )
        }
    };
    let (rate, why) = match (&sc.cluster, layout) {
        (Some(c), Layout::Disaggregated { .. }) => {
            let (mut pre, mut dec) = (0.0, 0.0);
            let mut caching = true;
            for r in &c.replicas {
                let (d, cmp) = replica(&r.model, &r.hardware, r.resolved.max_num_seqs, load);
                match r.role {
                    crate::cluster::Role::Prefill => {
                        caching &= r.resolved.prefix_caching;
                        pre += cmp;
                    }
                    _ => dec += d.min(cmp / out),
                }
            }
            let by_decode = dec;
            let by_prefill = if caching || input <= 0.0 {
                f64::INFINITY
            } else {
                pre / input
            };
            if by_decode <= by_prefill {
                (
                    by_decode,
                    "the decode pool's weights read once a step".to_string(),
                )
            } else {
                (by_prefill, "the prefill pool's compute".to_string())
            }
        }
        (Some(c), Layout::Colocated) => {
            let r = &c.replicas[0];
            colocated(
                &r.model,
                &r.hardware,
                r.resolved.max_num_seqs,
                r.resolved.prefix_caching,
            )
        }
        (None, _) => colocated(
            &sc.model,
            &sc.hardware,
            sc.resolved.max_num_seqs,
            sc.resolved.prefix_caching,
        ),
    };
    RateBound {
        requests_per_s: rate,
        why,
    }
}
