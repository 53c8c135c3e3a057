//! Preemption: what a preempted request's KV becomes, one [`PreemptionMode`] per
//! [`Preemption`], and the one [`preempt`] every scheduler calls. A mode decides what is kept on
//! the host ([`PreemptionMode::keep`]); freeing the GPU blocks, the host accounting, the step's
//! copies and the queues are the same for all.
//!
//! - `recompute` keeps nothing: the request's tokens are recomputed when it resumes (vLLM V1's
//!   only mode, and vLLM 0.4's `RECOMPUTE`).
//! - `swap` keeps its K and V in host memory when the swap space has room and it is decoding
//!   (vLLM 0.4 swaps only decoding sequences), else recomputes.
//! - `hybrid` keeps the layer inputs `X` of its first `l` tokens and the K and V of the rest
//!   (KVPR's balance at block granularity, [`crate::iteration::IterationTimer::hybrid_split`]); with no room
//!   for that it falls back to `swap`, then to `recompute`.

use super::{Place, State, Step};
use crate::schedulers::Preemption;

/// What a preempted request keeps on the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kept {
    /// Blocks of K and V.
    pub kv_blocks: u32,
    /// Blocks of layer inputs (hybrid).
    pub act_blocks: u32,
    /// Tokens whose K and V will be recomputed from the kept inputs.
    pub recompute_tokens: u32,
}

/// What a preempted request's KV becomes.
pub trait PreemptionMode: Sync {
    /// What request `v` keeps on the host, or `None` to recompute it.
    fn keep(&self, st: &State<'_>, v: usize) -> Option<Kept>;
}

struct Recompute;
struct Swap;
struct Hybrid;

impl PreemptionMode for Recompute {
    fn keep(&self, _: &State<'_>, _: usize) -> Option<Kept> {
        None
    }
}

/// Whether `v` is decoding (vLLM 0.4 swaps only decoding sequences; a chunked prompt is
/// recomputed).
fn decoding(st: &State<'_>, v: usize) -> bool {
    let s = &st.seqs[v];
    s.known() - s.computed == 1
}

impl PreemptionMode for Swap {
    fn keep(&self, st: &State<'_>, v: usize) -> Option<Kept> {
        let blocks = st.seqs[v].kv.blocks.len() as u32;
        let free = st.r.host_bytes - st.host_used;
        (decoding(st, v) && u64::from(blocks) * st.r.block_bytes <= free).then_some(Kept {
            kv_blocks: blocks,
            act_blocks: 0,
            recompute_tokens: 0,
        })
    }
}

impl PreemptionMode for Hybrid {
    fn keep(&self, st: &State<'_>, v: usize) -> Option<Kept> {
        let Some(timer) = &st.hybrid else {
            return Swap.keep(st, v);
        };
        if !decoding(st, v) {
            return None;
        }
        let s = &st.seqs[v];
        let blocks = s.kv.blocks.len() as u32;
        let h = timer.hybrid_split(s.computed);
        let lb = h.act_blocks.min(blocks);
        let bytes = u64::from(blocks - lb) * st.r.block_bytes + u64::from(lb) * st.act_block_bytes;
        if bytes <= st.r.host_bytes - st.host_used {
            Some(Kept {
                kv_blocks: blocks - lb,
                act_blocks: lb,
                recompute_tokens: h.recompute_tokens,
            })
        } else {
            Swap.keep(st, v)
        }
    }
}

impl Preemption {
    /// Its mode.
    pub fn mode(self) -> &'static dyn PreemptionMode {
        match self {
            Preemption::Recompute => &Recompute,
            Preemption::Swap => &Swap,
            Preemption::Hybrid => &Hybrid,
        }
    }
}

/// Preempts `v`: its GPU blocks freed (they stay cached until reused), and it either keeps what
/// its mode keeps on the host (swapped, its copies out in `step`) or is recomputed (its
/// computed tokens dropped, first in the waiting queue).
pub fn preempt(st: &mut State<'_>, step: &mut Step, v: usize) {
    st.counters.preemptions += 1;
    let kept = st.r.config.preemption.mode().keep(st, v);
    let block_bytes = st.r.block_bytes;
    let act_block_bytes = st.act_block_bytes;
    let s = &mut st.seqs[v];
    st.kv.free(&mut s.kv);
    s.preemptions += 1;
    if let Some(t) = &mut st.kv.tier {
        // Its stored units become hits once copied (vLLM completes a preempted request's
        // stores, blocking the next forward pass on them: not modelled).
        t.finish_stores(v, Some(s.store_end));
    }
    match kept {
        Some(k) => {
            let held =
                u64::from(k.kv_blocks) * block_bytes + u64::from(k.act_blocks) * act_block_bytes;
            s.host_bytes = held;
            s.act_blocks = k.act_blocks;
            s.place = Place::Swapped;
            s.recomputed_tokens += u64::from(k.recompute_tokens);
            s.swapped_tokens += u64::from(s.computed - k.recompute_tokens);
            st.host_used += held;
            st.counters.swap_out_bytes += held;
            step.shape.swap_out_blocks += k.kv_blocks;
            step.shape.act_out_blocks += k.act_blocks;
            st.swapped.push_back(v);
        }
        None => {
            s.recomputed_tokens += u64::from(s.computed);
            s.computed = 0;
            s.place = Place::Waiting;
            st.waiting.push_front(v);
        }
    }
}
