//! The prefill/decode schedule of a HeadInfer layout: per chunk × layer × head group, prefetch
//! (H2D) into one of two ping-pong buffers, attention, write-back (D2H).

use serde::Serialize;

use super::memory::{MemStrategy, heads_error};
use crate::types::Shape;
use kvplan_vocab::cost::CostModel;
use kvplan_vocab::error::{Error, Result};
use kvplan_vocab::hardware::Duplex;
use kvplan_vocab::layers::layer_kernels;
use kvplan_vocab::layers::{attention_index, elem_bytes_per_token, embed_op};
use kvplan_vocab::model::ModelSpec;
use kvplan_vocab::schedule::{
    ElemKind, HostMemory, LabelId, OpId, OpKind, Payload, Phase, Ring, Schedule, ScheduleBuilder,
    StreamKind, Tag,
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
    kernels: Vec<LabelId>,
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
    // The layer's kernels (one attention among them), less the attention when it runs per group.
    let kernels = layer_kernels(model, 1, 1, 1).len() as u64;
    let per_layer = if groups > 0 {
        kernels - 1 + 4 * groups
    } else {
        kernels
    };
    passes * (u64::from(model.num_layers) * per_layer + 4)
}

/// The op kinds of one pass — a prefill chunk `[start, start + n)` or a decode step — shared by
/// [`build_schedule`] and [`busy_seconds`], so the bound and the schedule cannot drift apart.
struct Pass {
    phase: Phase,
    step: u32,
    embed: OpKind,
    /// The layer's kernels over all heads (the attention, at `attention_at`, only without
    /// offload).
    kernels: Vec<(&'static str, OpKind)>,
    /// Index of the attention op in `kernels`.
    attention_at: usize,
    /// Per head group: the prefetch of the group's `start` earlier tokens (none for the first
    /// chunk), the append of the new K,V, the attention, the write-back of the new K,V.
    prefetch: Option<OpKind>,
    append: OpKind,
    attention: OpKind,
    store: OpKind,
    final_norm: OpKind,
    /// `lm_head` and `sample`: the last prefill chunk and every decode step.
    head: Option<(OpKind, OpKind)>,
}

/// The passes of `shape` with prefill chunks of `chunk` tokens: `(phase, step, start, n)`.
fn passes(shape: &Shape, chunk: u32) -> impl Iterator<Item = (Phase, u32, u32, u32)> + '_ {
    let chunk = chunk.clamp(1, shape.prompt.max(1));
    let prefill = (0..shape.prompt.div_ceil(chunk)).map(move |k| {
        let start = k * chunk;
        (Phase::Prefill, 0, start, chunk.min(shape.prompt - start))
    });
    let decode = (1..shape.gen_len).map(|t| (Phase::Decode, t, shape.cached_at(t), 1));
    prefill.chain(decode)
}

impl Pass {
    /// The ops of pass `(phase, step, start, n)` with `g` KV heads per group.
    fn new(
        model: &ModelSpec,
        shape: &Shape,
        g: u32,
        host: HostMemory,
        (phase, step, start, n): (Phase, u32, u32, u32),
    ) -> Pass {
        let p = model.dtype_bytes();
        let b = shape.batch;
        let bu = u64::from(b);
        // K and V of one token of one group.
        let group_tok = 2 * u64::from(g) * u64::from(model.head_dim) * p;
        let kernels = layer_kernels(model, b, n, start + n);
        Pass {
            phase,
            step,
            embed: embed_op(model, b, n),
            attention_at: attention_index(&kernels),
            kernels,
            prefetch: (start > 0).then_some(OpKind::H2D {
                bytes: bu * u64::from(start) * group_tok,
                payload: Payload::Cache,
                host,
            }),
            append: OpKind::Elementwise {
                kind: ElemKind::Other,
                bytes: 2 * bu * u64::from(n) * group_tok,
                rows: 0,
            },
            attention: OpKind::Attention {
                batch: b,
                q_heads: (g * model.gqa_group()) as u16,
                kv_heads: g as u16,
                q_len: n,
                kv_len: start + n,
                head_dim: model.head_dim as u16,
                causal: n > 1,
                dtype: model.dtype,
                kv: model.kv_cache_dtype,
            },
            store: OpKind::D2H {
                bytes: bu * u64::from(n) * group_tok,
                payload: Payload::Cache,
                host,
            },
            final_norm: OpKind::Elementwise {
                kind: ElemKind::Norm,
                bytes: bu * elem_bytes_per_token(model, ElemKind::Norm),
                rows: b,
            },
            // Only the last position's logits (prefill) or the new token's (decode).
            head: (phase == Phase::Decode || start + n == shape.prompt).then_some((
                OpKind::Gemm {
                    m: b,
                    n: model.vocab,
                    k: model.hidden,
                    batch: 1,
                    dtype: model.dtype,
                    weights: kvplan_vocab::WeightFormat::Dense,
                },
                OpKind::Elementwise {
                    kind: ElemKind::Other,
                    bytes: bu * u64::from(model.vocab) * 4,
                    rows: 0,
                },
            )),
        }
    }
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
        && (g == 0 || !model.num_kv_heads.is_multiple_of(g))
    {
        return Err(heads_error(model, g));
    }
    let est = estimated_ops(model, shape, layout);
    if est > MAX_OPS {
        return Err(Error::invalid(
            "workload.prompt",
            shape.prompt,
            format!(
                "the schedule would have about {est} ops (limit {MAX_OPS}); use a larger `headinfer.chunk`, more `headinfer.heads_per_group`, or a smaller `workload.gen`"
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
    let names: Vec<&str> = layer_kernels(model, 1, 1, 1)
        .iter()
        .map(|(n, _)| *n)
        .collect();
    let lb = Labels {
        embed: sb.label("embed"),
        kernels: names.iter().map(|n| sb.label(n)).collect(),
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
    let mut ring = Ring::default();
    let mut last_store: Vec<Option<OpId>> = vec![None; layers * groups];

    for at in passes(shape, layout.chunk_tokens) {
        let pass = Pass::new(model, shape, g, host, at);
        let tag = |layer: u16, group: u16| Tag {
            phase: pass.phase,
            step: pass.step,
            layer,
            batch: 0,
            group,
        };
        sb.push(pass.embed, c, lb.embed, tag(Tag::NONE, Tag::NONE), &[]);
        for j in 0..layers {
            let t = tag(j as u16, Tag::NONE);
            let a = pass.attention_at;
            // The new K,V are ready after the projection and rotary embedding.
            let mut new_kv = None;
            for (k, &label) in pass.kernels[..a].iter().zip(&lb.kernels) {
                new_kv = Some(sb.push(k.1, c, label, t, &[]));
            }
            match links {
                None => {
                    sb.push(pass.kernels[a].1, c, lb.kernels[a], t, &[]);
                }
                Some((h2d, d2h)) => {
                    for i in 0..groups {
                        let gt = tag(j as u16, i as u16);
                        let unit = j * groups + i;
                        let load = pass.prefetch.map(|k| {
                            sb.push(
                                k,
                                h2d,
                                lb.prefetch,
                                gt,
                                &[ring.reuse_dep(), last_store[unit]],
                            )
                        });
                        sb.push(pass.append, c, lb.append, gt, &[]);
                        let attn = sb.push(pass.attention, c, lb.kernels[a], gt, &[load]);
                        ring.push(attn);
                        last_store[unit] = Some(sb.push(pass.store, d2h, lb.store, gt, &[new_kv]));
                    }
                }
            }
            for (k, &label) in pass.kernels.iter().zip(&lb.kernels).skip(a + 1) {
                sb.push(k.1, c, label, t, &[]);
            }
        }
        let t = tag(Tag::NONE, Tag::NONE);
        sb.push(pass.final_norm, c, lb.final_norm, t, &[]);
        if let Some((lm_head, sample)) = pass.head {
            sb.push(lm_head, c, lb.lm_head, t, &[]);
            sb.push(sample, c, lb.sample, t, &[]);
        }
    }
    Ok(sb.build())
}

/// Busy seconds of each stream of a schedule: the sums of its ops' durations.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct Busy {
    /// `gpu0.compute`.
    pub compute: f64,
    /// `gpu0.h2d` (prefetch).
    pub h2d: f64,
    /// `gpu0.d2h` (write-back).
    pub d2h: f64,
}

impl Busy {
    /// A lower bound on the makespan: an engine runs one op at a time, and with a half-duplex
    /// link the two copy streams share one engine.
    pub fn bound(&self, duplex: Duplex) -> f64 {
        let link = match duplex {
            Duplex::Full => self.h2d.max(self.d2h),
            Duplex::Half => self.h2d + self.d2h,
        };
        self.compute.max(link)
    }
}

/// The [`Busy`] seconds of the schedule [`build_schedule`] would build, on `cost`, without
/// building it: one duration per op kind and pass, times layers and groups (every layer of a
/// pass has the same ops). Takes microseconds per pass where the schedule takes
/// `layers × (kernels - 1 + 4·groups)` ops.
pub fn busy_seconds(
    model: &ModelSpec,
    shape: &Shape,
    layout: &Layout,
    host: HostMemory,
    cost: &CostModel,
) -> Busy {
    let (g, groups) = match layout.heads_per_group {
        Some(g) => (g.max(1), f64::from(model.num_kv_heads / g.max(1))),
        None => (model.num_kv_heads, 0.0),
    };
    let layers = f64::from(model.num_layers);
    let d = |k: &OpKind| cost.duration(k);
    let mut busy = Busy::default();
    for at in passes(shape, layout.chunk_tokens) {
        let pass = Pass::new(model, shape, g, host, at);
        // Without offload one attention over all heads; with offload one per group.
        let mut layer: f64 = (pass.kernels.iter().enumerate())
            .filter(|&(i, _)| groups == 0.0 || i != pass.attention_at)
            .map(|(_, k)| d(&k.1))
            .sum();
        if groups > 0.0 {
            layer += groups * (d(&pass.append) + d(&pass.attention));
            busy.h2d += layers * groups * pass.prefetch.as_ref().map_or(0.0, d);
            busy.d2h += layers * groups * d(&pass.store);
        }
        busy.compute += d(&pass.embed)
            + layers * layer
            + d(&pass.final_norm)
            + pass.head.map_or(0.0, |(a, b)| d(&a) + d(&b));
    }
    busy
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvplan_vocab::schedule::HostMemory;

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
            e.starts_with("workload.prompt:")
                && e.contains("limit 20000000")
                && e.contains("chunk"),
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
