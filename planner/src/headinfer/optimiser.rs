//! The choice of heads per group and prefill chunk.

use super::memory::{DEFAULT_CHUNK_TOKENS, divisors, plan_memory};
use crate::cost::CostModel;
use crate::hardware::HardwareProfile;
use crate::model::ModelSpec;
use crate::plan::Shape;
use crate::schedule::HostMemory;

/// Smallest chunk the planner chooses by itself (only when nothing larger fits, e.g. a large
/// batch: the working set grows with `batch x chunk` rows).
pub const MIN_CHUNK_TOKENS: u32 = 128;
/// Largest chunk the planner chooses by itself.
pub const MAX_CHUNK_TOKENS: u32 = 65_536;

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

/// The chunks the planner tries, largest first: the paper's 10,240 (or the roofline minimum
/// rounded up to 1,024 when larger, at most 65,536), halving down to 128; never above the
/// context.
pub(crate) fn chunk_candidates(roofline: u32, context: u32) -> Vec<u32> {
    let first = DEFAULT_CHUNK_TOKENS
        .max(roofline.div_ceil(1024).saturating_mul(1024))
        .min(MAX_CHUNK_TOKENS);
    let mut v = vec![first.min(context)];
    let mut c = first;
    while c > MIN_CHUNK_TOKENS {
        c = (c / 2).max(MIN_CHUNK_TOKENS);
        if v.last().is_some_and(|&l| c < l) {
            v.push(c);
        }
    }
    v
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
    fn chunk_candidates_halve_and_respect_the_context() {
        assert_eq!(
            chunk_candidates(1429, 1 << 30),
            vec![10240, 5120, 2560, 1280, 640, 320, 160, 128]
        );
        assert_eq!(
            chunk_candidates(1429, 3000),
            vec![3000, 2560, 1280, 640, 320, 160, 128]
        );
        assert_eq!(chunk_candidates(1429, 500), vec![500, 320, 160, 128]);
        assert_eq!(chunk_candidates(1429, 100), vec![100]);
        assert_eq!(chunk_candidates(40_000, 1 << 30)[0], 40_960);
        assert_eq!(chunk_candidates(200_000, 1 << 30)[0], MAX_CHUNK_TOKENS);
    }
}
