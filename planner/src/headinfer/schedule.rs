//! The prefill/decode schedule of a HeadInfer layout: per chunk × layer × head group, prefetch
//! (H2D) into one of two ping-pong buffers, attention, write-back (D2H).

use serde::Serialize;

use super::memory::{MemStrategy, heads_error};
use crate::error::{Error, Result};
use crate::model::ModelSpec;
use crate::plan::{Shape, layer_kernels};
use crate::schedule::{
    HostMemory, LabelId, OpId, OpKind, Payload, Phase, Ring, Schedule, ScheduleBuilder, StreamKind,
    Tag,
};

/// Most ops a HeadInfer schedule may have (about 2.5 GiB of schedule and timeline).
pub const MAX_OPS: u64 = 20_000_000;

/// The loop structure of a prefill/decode schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Layout {
    /// Prefill chunk tokens (`>= prompt`: one pass).
    pub chunk_tokens: u32,
    /// KV heads per offload group; `None` keeps the KV cache on the GPU (no copies).
    pub heads_per_group: Option<u32>,
}

impl Layout {
    /// The schedule shape of a memory-model strategy at `context` tokens: standard and 4-bit
    /// (its kernels modelled as standard ones) one pass, chunked prefill `chunk`-token chunks,
    /// layer offload one pass with whole-layer groups, HeadInfer `chunk`-token chunks with
    /// `heads_per_group`.
    pub fn of(
        model: &ModelSpec,
        strategy: MemStrategy,
        context: u32,
        chunk: u32,
        heads_per_group: u32,
    ) -> Layout {
        match strategy {
            MemStrategy::Standard | MemStrategy::KvQuant4bit => Layout {
                chunk_tokens: context,
                heads_per_group: None,
            },
            MemStrategy::ChunkedPrefill => Layout {
                chunk_tokens: chunk,
                heads_per_group: None,
            },
            MemStrategy::LayerOffload => Layout {
                chunk_tokens: context,
                heads_per_group: Some(model.num_kv_heads),
            },
            MemStrategy::HeadInfer => Layout {
                chunk_tokens: chunk,
                heads_per_group: Some(heads_per_group),
            },
        }
    }
}

struct Labels {
    embed: LabelId,
    kernels: [LabelId; 8],
    prefetch: LabelId,
    append: LabelId,
    store: LabelId,
    final_norm: LabelId,
    lm_head: LabelId,
    sample: LabelId,
}

/// Ops a schedule of `layout` will have.
pub fn estimated_ops(model: &ModelSpec, shape: &Shape, layout: &Layout) -> u64 {
    let chunk = layout.chunk_tokens.clamp(1, shape.prompt.max(1));
    let passes = u64::from(shape.prompt.div_ceil(chunk)) + u64::from(shape.gen_len) - 1;
    let groups = layout
        .heads_per_group
        .map_or(0, |g| u64::from(model.num_kv_heads / g.max(1)));
    let per_layer = if groups > 0 { 7 + 4 * groups } else { 8 };
    passes * (u64::from(model.num_layers) * per_layer + 4)
}

/// Builds the prefill and decode schedule of `layout` (see the module docs). Streams
/// `gpu0.compute`, and with offload `gpu0.h2d` (prefetch) and `gpu0.d2h` (write-back).
///
/// Prefill, per chunk `[start, start + n)` and layer: `ln1`, `qkv_proj` (n rows); per head group
/// `i`: `prefetch_kv` of the group's `start` earlier tokens (H2D; waits for the attention two
/// group-units earlier, which last read the buffer, and for the group's last write-back),
/// `kv_append` of the chunk's new K,V behind them, `attention` of the group's query heads
/// (`q_len = n`, `kv_len = start + n`, causal), `store_kv` of the chunk's K,V (D2H after
/// `qkv_proj`); then `out_proj`, `ln2`, `ffn_up`, `ffn_act`, `ffn_down`. Without offload one
/// attention over all heads. Decode steps fetch each group's whole cache and store one token.
pub fn build_schedule(
    model: &ModelSpec,
    shape: &Shape,
    layout: &Layout,
    host: HostMemory,
) -> Result<Schedule> {
    shape.validate()?;
    if let Some(g) = layout.heads_per_group
        && (g == 0 || model.num_kv_heads % g != 0)
    {
        return Err(heads_error(model, g));
    }
    let est = estimated_ops(model, shape, layout);
    if est > MAX_OPS {
        return Err(Error::invalid(
            "--prompt",
            shape.prompt,
            format!(
                "the schedule would have about {est} ops (limit {MAX_OPS}); use a larger --chunk, more --heads-per-group, or a smaller --gen"
            ),
        ));
    }
    let mut sb = ScheduleBuilder::with_capacity(est as usize, 2 * est as usize);
    let c = sb.stream(0, StreamKind::Compute, "gpu0.compute");
    let links = layout.heads_per_group.map(|_| {
        (
            sb.stream(0, StreamKind::H2D, "gpu0.h2d"),
            sb.stream(0, StreamKind::D2H, "gpu0.d2h"),
        )
    });
    let names = layer_kernels(model, 1, 1, 1).map(|(n, _)| n);
    let lb = Labels {
        embed: sb.label("embed"),
        kernels: names.map(|n| sb.label(n)),
        prefetch: sb.label("prefetch_kv"),
        append: sb.label("kv_append"),
        store: sb.label("store_kv"),
        final_norm: sb.label("final_norm"),
        lm_head: sb.label("lm_head"),
        sample: sb.label("sample"),
    };
    let layers = model.num_layers as usize;
    let (g, groups) = match layout.heads_per_group {
        Some(g) => (g, (model.num_kv_heads / g) as usize),
        None => (model.num_kv_heads, 0),
    };
    let p = model.dtype_bytes();
    let b = shape.batch;
    let bu = u64::from(b);
    let h = u64::from(model.hidden);
    // K and V of one token of one group.
    let group_tok = 2 * u64::from(g) * u64::from(model.head_dim) * p;
    let q_heads = (g * model.gqa_group()) as u16;
    let mut ring = Ring::default();
    let mut last_store: Vec<Option<OpId>> = vec![None; layers * groups];
    let chunk = layout.chunk_tokens.clamp(1, shape.prompt);

    // (phase, step, start, n): prefill chunks, then decode steps.
    let prefill = (0..shape.prompt.div_ceil(chunk)).map(|k| {
        let start = k * chunk;
        (Phase::Prefill, 0, start, chunk.min(shape.prompt - start))
    });
    let decode = (1..shape.gen_len).map(|t| (Phase::Decode, t, shape.cached_at(t), 1));
    for (phase, step, start, n) in prefill.chain(decode) {
        let tag = |layer: u16, group: u16| Tag {
            phase,
            step,
            layer,
            batch: 0,
            group,
        };
        let kernels = layer_kernels(model, b, n, start + n);
        sb.push(
            OpKind::Elementwise {
                bytes: 2 * bu * u64::from(n) * h * p,
            },
            c,
            lb.embed,
            tag(Tag::NONE, Tag::NONE),
            &[],
        );
        for j in 0..layers {
            let t = tag(j as u16, Tag::NONE);
            sb.push(kernels[0].1, c, lb.kernels[0], t, &[]);
            let qkv = sb.push(kernels[1].1, c, lb.kernels[1], t, &[]);
            match links {
                None => {
                    sb.push(kernels[2].1, c, lb.kernels[2], t, &[]);
                }
                Some((h2d, d2h)) => {
                    for i in 0..groups {
                        let gt = tag(j as u16, i as u16);
                        let unit = j * groups + i;
                        let load = (start > 0).then(|| {
                            sb.push(
                                OpKind::H2D {
                                    bytes: bu * u64::from(start) * group_tok,
                                    payload: Payload::Cache,
                                    host,
                                },
                                h2d,
                                lb.prefetch,
                                gt,
                                &[ring.reuse_dep(), last_store[unit]],
                            )
                        });
                        sb.push(
                            OpKind::Elementwise {
                                bytes: 2 * bu * u64::from(n) * group_tok,
                            },
                            c,
                            lb.append,
                            gt,
                            &[],
                        );
                        let attn = sb.push(
                            OpKind::Attention {
                                batch: b,
                                q_heads,
                                kv_heads: g as u16,
                                q_len: n,
                                kv_len: start + n,
                                head_dim: model.head_dim as u16,
                                causal: n > 1,
                                dtype: model.dtype,
                            },
                            c,
                            lb.kernels[2],
                            gt,
                            &[load],
                        );
                        ring.push(attn);
                        last_store[unit] = Some(sb.push(
                            OpKind::D2H {
                                bytes: bu * u64::from(n) * group_tok,
                                payload: Payload::Cache,
                                host,
                            },
                            d2h,
                            lb.store,
                            gt,
                            &[Some(qkv)],
                        ));
                    }
                }
            }
            for (k, label) in kernels.iter().zip(lb.kernels).skip(3) {
                sb.push(k.1, c, label, t, &[]);
            }
        }
        let t = tag(Tag::NONE, Tag::NONE);
        sb.push(
            OpKind::Elementwise {
                bytes: 2 * bu * h * p,
            },
            c,
            lb.final_norm,
            t,
            &[],
        );
        // Only the last position's logits (prefill) or the new token's (decode).
        if phase == Phase::Decode || start + n == shape.prompt {
            sb.push(
                OpKind::Gemm {
                    m: b,
                    n: model.vocab,
                    k: model.hidden,
                    batch: 1,
                    dtype: model.dtype,
                },
                c,
                lb.lm_head,
                t,
                &[],
            );
            sb.push(
                OpKind::Elementwise {
                    bytes: bu * u64::from(model.vocab) * 4,
                },
                c,
                lb.sample,
                t,
                &[],
            );
        }
    }
    Ok(sb.build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::HostMemory;

    fn llama() -> ModelSpec {
        ModelSpec::preset("llama-3-8b").unwrap()
    }

    #[test]
    fn a_schedule_beyond_the_op_limit_is_an_error_naming_the_fix() {
        let shape = Shape {
            batch: 1,
            gpu_batches: 1,
            prompt: 100_000_000,
            gen_len: 1,
        };
        let layout = Layout {
            chunk_tokens: 128,
            heads_per_group: Some(1),
        };
        let e = build_schedule(&llama(), &shape, &layout, HostMemory::Pinned)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--prompt:") && e.contains("limit 20000000") && e.contains("--chunk"),
            "{e}"
        );
    }

    #[test]
    fn schedule_op_count_matches_the_estimate() {
        let m = ModelSpec::preset("opt-125m").unwrap();
        let shape = Shape {
            batch: 2,
            gpu_batches: 1,
            prompt: 1000,
            gen_len: 3,
        };
        for layout in [
            Layout {
                chunk_tokens: 256,
                heads_per_group: Some(3),
            },
            Layout {
                chunk_tokens: 1000,
                heads_per_group: None,
            },
        ] {
            let s = build_schedule(&m, &shape, &layout, HostMemory::Pinned).unwrap();
            s.validate().unwrap();
            let est = estimated_ops(&m, &shape, &layout);
            assert!(
                s.len() as u64 <= est && s.len() as u64 + 64 >= est,
                "{} vs {est}",
                s.len()
            );
        }
    }
}
