//! The choice of heads per group and prefill chunk: the fastest candidate on the simulated
//! schedule (see the parent module's docs for the rule).
//!
//! Two devices keep it fast without changing the answer:
//!
//! - **A bound.** [`busy_seconds`] sums each stream's op durations without building the
//!   schedule; the busiest engine's sum is a lower bound on the makespan. Candidates are timed in
//!   increasing bound order and the search stops once the next bound exceeds the best time found:
//!   a skipped candidate cannot be faster. (Small chunks, whose prefetch traffic grows as
//!   `S²/chunk`, go without being built.)
//! - **Whole schedules.** Each candidate's seconds are the full schedule's makespan. (An
//!   earlier shortcut timed 4–6 layers and extrapolated; with rotary embedding and residual
//!   adds in the layer, a copy stream's backlog can shift the per-layer increment late in the
//!   stack — llama-3-8b on a half-duplex h100-pcie, from layer 21 of 32 — so the shortcut was
//!   no longer exact. Timing whole schedules costs 0.36 s instead of 0.19 s for a 1M-token
//!   plan.)

use serde::Serialize;

use super::memory::{DEFAULT_CHUNK_TOKENS, MemoryBreakdown, divisors, plan_memory};
use super::schedule::{Layout, MAX_OPS, build_schedule, busy_seconds, estimated_ops};
use crate::types::Shape;
use kvplan_sim::engine;
use kvplan_vocab::cost::CostModel;
use kvplan_vocab::error::{Error, Result};
use kvplan_vocab::hardware::HardwareProfile;
use kvplan_vocab::model::ModelSpec;
use kvplan_vocab::schedule::HostMemory;

/// Smallest power of two on the planner's chunk grid (it wins only when nothing larger fits, e.g.
/// a large batch: the working set grows with `batch x chunk` rows; the roofline chunk may be
/// smaller).
pub const MIN_CHUNK_TOKENS: u32 = 128;
/// Largest chunk on the planner's grid.
pub const MAX_CHUNK_TOKENS: u32 = 65_536;
/// Relative difference under which two times are a tie (decided by memory).
pub const TIE: f64 = 1e-9;

/// Smallest prefill chunk for which offloaded attention is compute-bound on `cost`: attention
/// of a `c`-token chunk over a `P`-token prefix costs `4·(Hq/Hkv)·d·c·P` FLOPs per KV head
/// (plus the chunk's own triangle), its prefetch `2·d·p·P` bytes per KV head, so compute covers
/// the copy when `c >= p·t_byte / (2·(Hq/Hkv)·t_flop)` — independent of `P` and of the group
/// size. 1,425 tokens for Llama-3-8B on the RTX 4090 profile.
pub fn roofline_chunk(model: &ModelSpec, cost: &CostModel, host: HostMemory) -> u32 {
    let t_flop = cost.attention_cost(model.dtype).secs_per_flop;
    let t_byte = cost.h2d(host).secs_per_byte;
    let gqa = f64::from(model.gqa_group().max(1));
    let c = model.dtype_bytes() as f64 * t_byte / (2.0 * gqa * t_flop);
    if c.is_finite() && c > 0.0 {
        c.ceil().min(f64::from(u32::MAX)) as u32
    } else {
        MAX_CHUNK_TOKENS
    }
}

/// The chunks the planner tries, ascending: the powers of two from [`MIN_CHUNK_TOKENS`] to
/// [`MAX_CHUNK_TOKENS`], the paper's 10,240, the roofline chunk ([`roofline_chunk`]) and the
/// context itself (one pass), each capped at the context and at [`MAX_CHUNK_TOKENS`], without
/// repeats.
pub fn chunk_grid(roofline: u32, context: u32) -> Vec<u32> {
    let cap = context.clamp(1, MAX_CHUNK_TOKENS);
    let mut v: Vec<u32> = (MIN_CHUNK_TOKENS.trailing_zeros()..=MAX_CHUNK_TOKENS.trailing_zeros())
        .map(|e| 1u32 << e)
        .chain([DEFAULT_CHUNK_TOKENS, roofline.max(1), context])
        .map(|c| c.min(cap))
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// The group sizes the planner tries, ascending: every divisor of the KV heads (the schedule's
/// groups are equal, so a group size must divide them), or `fixed`.
pub fn group_grid(model: &ModelSpec, fixed: Option<u32>) -> Vec<u32> {
    match fixed {
        Some(g) => vec![g],
        None => divisors(model.num_kv_heads),
    }
}

/// One (heads per group, chunk) the optimiser considered.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Candidate {
    /// KV heads per offload group.
    pub heads_per_group: u32,
    /// Prefill chunk tokens.
    pub chunk_tokens: u32,
    /// Peak GPU bytes of the plan.
    pub peak_gpu: u64,
    /// Lower bound on the makespan (the busiest engine's summed op time), seconds.
    pub bound_s: f64,
    /// Predicted makespan of prefill and decode ([`predicted_seconds`]), seconds; `None` when
    /// the bound already ruled the candidate out.
    pub seconds: Option<f64>,
}

/// The optimiser's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Choice {
    /// The chosen candidate (`seconds` is set).
    pub best: Candidate,
    /// Every candidate that fits (memory and [`MAX_OPS`]), in grid order (group, then chunk).
    pub candidates: Vec<Candidate>,
}

impl Choice {
    /// Candidates that were timed.
    pub fn timed(&self) -> usize {
        self.candidates
            .iter()
            .filter(|c| c.seconds.is_some())
            .count()
    }
}

/// The simulated makespan (prefill and decode) of the HeadInfer schedule of `layout`, in
/// seconds: the full schedule on the engine.
pub fn predicted_seconds(
    model: &ModelSpec,
    shape: &Shape,
    layout: &Layout,
    host: HostMemory,
    cost: &CostModel,
) -> Result<f64> {
    let s = build_schedule(model, shape, layout, host)?;
    engine::makespan(&s, cost).map_err(|e| Error::InvalidSchedule(e.to_string()))
}

/// The fastest (heads per group, chunk) of `groups × chunks` that fits: peak GPU memory within
/// the usable memory and at most [`MAX_OPS`] ops; ties (within [`TIE`]) go to the smaller peak
/// memory. `None` when no candidate fits. See the module docs for the search.
pub fn choose(
    model: &ModelSpec,
    hw: &HardwareProfile,
    cost: &CostModel,
    shape: &Shape,
    host: HostMemory,
    groups: &[u32],
    chunks: &[u32],
) -> Result<Option<Choice>> {
    let budget = hw.gpu.usable_bytes();
    let duplex = cost.duplex();
    let mut cands: Vec<Candidate> = Vec::new();
    for &g in groups {
        for &c in chunks {
            let mem: MemoryBreakdown = plan_memory(model, shape, c, g);
            let layout = Layout {
                chunk_tokens: c,
                heads_per_group: Some(g),
            };
            if mem.peak_gpu > budget || estimated_ops(model, shape, &layout) > MAX_OPS {
                continue;
            }
            cands.push(Candidate {
                heads_per_group: g,
                chunk_tokens: c,
                peak_gpu: mem.peak_gpu,
                bound_s: busy_seconds(model, shape, &layout, host, cost).bound(duplex),
                seconds: None,
            });
        }
    }
    let mut order: Vec<usize> = (0..cands.len()).collect();
    order.sort_by(|&i, &j| cands[i].bound_s.total_cmp(&cands[j].bound_s));
    let mut best: Option<usize> = None;
    for i in order {
        if let Some(b) = best
            && cands[i].bound_s > cands[b].seconds.unwrap_or(f64::INFINITY) * (1.0 + TIE)
        {
            break;
        }
        let layout = Layout {
            chunk_tokens: cands[i].chunk_tokens,
            heads_per_group: Some(cands[i].heads_per_group),
        };
        let t = predicted_seconds(model, shape, &layout, host, cost)?;
        cands[i].seconds = Some(t);
        best = match best {
            Some(b) if !better(&cands[i], &cands[b]) => Some(b),
            _ => Some(i),
        };
    }
    Ok(best.map(|b| Choice {
        best: cands[b],
        candidates: cands,
    }))
}

/// Whether timed candidate `x` beats timed candidate `y`: faster beyond [`TIE`], or a tie on
/// time with less peak memory.
fn better(x: &Candidate, y: &Candidate) -> bool {
    let (tx, ty) = (
        x.seconds.unwrap_or(f64::INFINITY),
        y.seconds.unwrap_or(f64::INFINITY),
    );
    if tx < ty * (1.0 - TIE) {
        true
    } else if ty < tx * (1.0 - TIE) {
        false
    } else {
        x.peak_gpu < y.peak_gpu
    }
}

/// The adaptive group size for a fixed chunk: the largest divisor of `Hkv` whose plan fits the
/// usable GPU memory, or `None`.
pub fn adaptive_heads_per_group(
    model: &ModelSpec,
    hw: &HardwareProfile,
    shape: &Shape,
    chunk: u32,
) -> Option<u32> {
    divisors(model.num_kv_heads)
        .into_iter()
        .rev()
        .find(|&g| plan_memory(model, shape, chunk, g).peak_gpu <= hw.gpu.usable_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_grid_is_powers_of_two_the_papers_chunk_the_roofline_and_the_context() {
        let pow: Vec<u32> = (7..=16).map(|e| 1 << e).collect();
        let mut want = pow.clone();
        want.extend([1425, 10240]);
        want.sort_unstable();
        assert_eq!(chunk_grid(1425, 1 << 30), want);
        assert_eq!(
            chunk_grid(1425, 3000),
            vec![128, 256, 512, 1024, 1425, 2048, 3000]
        );
        assert_eq!(chunk_grid(1425, 500), vec![128, 256, 500]);
        assert_eq!(chunk_grid(1425, 100), vec![100]);
        assert_eq!(chunk_grid(40_000, 1 << 30).len(), 12);
        assert_eq!(
            *chunk_grid(200_000, 1 << 30).last().unwrap(),
            MAX_CHUNK_TOKENS
        );
        assert_eq!(chunk_grid(60, 1 << 30)[..2], [60, MIN_CHUNK_TOKENS]);
    }

    #[test]
    fn ties_go_to_the_smaller_memory() {
        let c = |s: f64, m: u64| Candidate {
            heads_per_group: 1,
            chunk_tokens: 1,
            peak_gpu: m,
            bound_s: 0.0,
            seconds: Some(s),
        };
        assert!(better(&c(1.0, 9), &c(1.1, 1)));
        assert!(better(&c(1.0, 1), &c(1.0 + 1e-12, 9)));
        assert!(!better(&c(1.0, 9), &c(1.0 + 1e-12, 1)));
    }
}
