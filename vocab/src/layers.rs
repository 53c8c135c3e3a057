//! The kernels of a decoder layer and the KVPR recomputation, as [`OpKind`]s: what every
//! planner puts on a compute stream and what the cost model times.

use crate::attention::AttentionBatch;
use crate::cost::CostModel;
use crate::model::{LayerFfn, ModelSpec, Moe};
use crate::quant::WeightFormat;
use crate::schedule::{ElemKind, OpKind};

/// The kernels of one decoder layer for `batch` sequences of `q_len` new tokens each,
/// attending over `kv_len` keys: [`forward_ops`] of a uniform batch.
pub fn layer_kernels(
    m: &ModelSpec,
    batch: u32,
    q_len: u32,
    kv_len: u32,
) -> Vec<(&'static str, OpKind)> {
    forward_ops(m, &[(q_len, kv_len)], batch)
}

/// Position of the (first) attention op in a layer's kernels: the token-wise kernels before it
/// (`ln1`, `qkv_proj`, `rope`) and after it (`out_proj` .. the second residual add).
pub fn attention_index(ops: &[(&'static str, OpKind)]) -> usize {
    ops.iter()
        .position(|(_, k)| matches!(k, OpKind::Attention { .. } | OpKind::BatchAttention { .. }))
        .expect("a layer has an attention op")
}

/// The kernels of one decoder layer for a ragged (mixed) batch: `copies` sequences of each
/// `(q_len, kv_len)` in `seqs` (prefill chunks and decode steps together, as continuous batching
/// runs them). The token-wise kernels (norms, projections, rotary embedding, FFN, residual adds,
/// tensor-parallel all-reduces) run once over all rows; attention runs once per distinct
/// `(q_len, kv_len)` (a varlen kernel's work is the sum of these), in the order the shapes first
/// appear. A uniform batch gives exactly [`layer_kernels`]' ops.
///
/// The layer, as vLLM runs a Llama-style block on one tensor-parallel rank ([`ModelSpec`]'s
/// per-rank shapes, see [`ModelSpec::sharded`]): `ln1`, `qkv_proj`, `rope` (rotary models
/// only), attention, `out_proj`, `allreduce_attn` (tensor parallel only), `residual_attn`,
/// `ln2`, `ffn_up`, `ffn_act`, `ffn_down`, `allreduce_ffn`, `residual_ffn`.
///
/// A mixture-of-experts model's layer is its MoE layer ([`ModelSpec::main_ffn`]; the FFN is
/// [`moe_ffn_ops`]); [`forward_ops_for`] gives a layer of either kind.
pub fn forward_ops(m: &ModelSpec, seqs: &[(u32, u32)], copies: u32) -> Vec<(&'static str, OpKind)> {
    layer_ops(m, m.main_ffn(), seqs, copies, false)
}

/// [`forward_ops`] of a layer running `ffn` (the dense layers of a model that mixes dense and
/// MoE layers, [`ModelSpec::layer_ffn`]).
pub fn forward_ops_for(
    m: &ModelSpec,
    ffn: LayerFfn,
    seqs: &[(u32, u32)],
    copies: u32,
) -> Vec<(&'static str, OpKind)> {
    layer_ops(m, ffn, seqs, copies, false)
}

/// [`forward_ops`] with ONE attention kernel for the whole batch, as vLLM runs it (a varlen /
/// paged FlashAttention call per layer): a batch of more than one distinct `(q_len, kv_len)`
/// gets a single [`OpKind::BatchAttention`] of the batch's statistics ([`attention_batch_of`]);
/// a uniform batch keeps the [`OpKind::Attention`] op of [`layer_kernels`].
///
/// (The serving simulator's schedule still uses [`forward_ops`]: its closed form costs one
/// attention per distinct shape and a property test holds the two equal; both move to this
/// layer together.)
pub fn forward_ops_batched(
    m: &ModelSpec,
    seqs: &[(u32, u32)],
    copies: u32,
) -> Vec<(&'static str, OpKind)> {
    layer_ops(m, m.main_ffn(), seqs, copies, true)
}

/// [`forward_ops_batched`] of a layer running `ffn`.
pub fn forward_ops_batched_for(
    m: &ModelSpec,
    ffn: LayerFfn,
    seqs: &[(u32, u32)],
    copies: u32,
) -> Vec<(&'static str, OpKind)> {
    layer_ops(m, ffn, seqs, copies, true)
}

/// The statistics of `copies` sequences of each `(q_len, kv_len)` in `seqs` (causal attention
/// of the new tokens): what one attention kernel over them sees.
pub fn attention_batch_of(seqs: &[(u32, u32)], copies: u32) -> AttentionBatch {
    let mut b = AttentionBatch::new();
    for &(q_len, kv_len) in seqs {
        b.merge(&AttentionBatch::uniform(copies, q_len, kv_len, q_len > 1));
    }
    b
}

/// One attention kernel over `batch` with the model's heads.
pub fn batch_attention_op(m: &ModelSpec, batch: AttentionBatch) -> OpKind {
    OpKind::BatchAttention {
        batch,
        q_heads: m.num_heads as u16,
        kv_heads: m.num_kv_heads as u16,
        head_dim: m.head_dim as u16,
        dtype: m.dtype,
        kv: m.kv_cache_dtype,
    }
}

fn layer_ops(
    m: &ModelSpec,
    ffn: LayerFfn,
    seqs: &[(u32, u32)],
    copies: u32,
    one_kernel: bool,
) -> Vec<(&'static str, OpKind)> {
    let mut groups: Vec<((u32, u32), u32)> = Vec::new();
    for &shape in seqs {
        match groups.iter_mut().find(|(s, _)| *s == shape) {
            Some((_, n)) => *n += copies,
            None => groups.push((shape, copies)),
        }
    }
    let rows: u64 = groups
        .iter()
        .map(|&((q, _), n)| u64::from(q) * u64::from(n))
        .sum();
    let d = DenseKernels::new(m, rows);
    let mut ops = Vec::with_capacity(12 + groups.len());
    ops.push(("ln1", d.norm));
    ops.push(("qkv_proj", d.qkv));
    if let Some(rope) = d.rope {
        ops.push(("rope", rope));
    }
    if one_kernel && groups.len() > 1 {
        ops.push((
            "attention",
            batch_attention_op(m, attention_batch_of(seqs, copies)),
        ));
    } else {
        for ((q_len, kv_len), batch) in groups {
            ops.push(("attention", attention_op(m, batch, q_len, kv_len)));
        }
    }
    ops.push(("out_proj", d.out));
    if let Some(ar) = d.allreduce {
        ops.push(("allreduce_attn", ar));
    }
    ops.push(("residual_attn", d.add));
    ops.push(("ln2", d.norm));
    match (ffn, &m.moe) {
        (LayerFfn::Moe, Some(moe)) => ops.extend(moe_ffn_ops(m, moe, rows)),
        _ => {
            ops.push(("ffn_up", d.up));
            ops.push(("ffn_act", d.act));
            ops.push(("ffn_down", d.down));
        }
    }
    if let Some(ar) = d.allreduce {
        ops.push(("allreduce_ffn", ar));
    }
    ops.push(("residual_ffn", d.add));
    ops
}

/// Distinct experts of one rank that `rows` tokens hit, as a GEMM batch: [`Moe::experts_hit`]
/// rounded, at least 1 and at most the rank's experts.
pub fn experts_hit_batch(moe: &Moe, rows: u64) -> u32 {
    let local = moe.local_experts().max(1);
    (moe.experts_hit(rows).round() as u32).clamp(1, local)
}

/// The FFN of a mixture-of-experts layer over `rows` tokens on one rank, as vLLM's fused MoE
/// path runs it (`vllm/model_executor/layers/fused_moe/`):
/// - `router`: the gate GEMM, `rows × hidden → experts` (replicated on every rank);
/// - `topk`: the router's softmax and top-k (`topk_softmax`) and `moe_align`: the tokens sorted
///   by expert and padded to the kernel's blocks (`moe_align_block_size`), two small kernels;
/// - `ffn_up`, `ffn_act`, `ffn_down`: the fused MoE GEMMs, tokens grouped per expert. The
///   weights read are those of the distinct experts hit: for `B` tokens each choosing `k` of
///   `E` experts uniformly, `E_hit = E_loc · (1 − (1 − k/E)^B)` on average ([`Moe::experts_hit`],
///   `E_loc` the rank's experts), so each GEMM is a batched [`OpKind::Gemm`] of `batch =
///   E_hit` (rounded, [`experts_hit_batch`]) GEMMs of `m = ⌈B · k · E_loc / E / E_hit⌉` rows
///   each: the cost model charges `batch × (weights + rows)` bytes and `batch` times the
///   tiles, so the bytes follow the distinct experts. The activation runs over the `B · k`
///   routed rows;
/// - `moe_sum`: the `k` experts' outputs of each token summed (none when `k = 1`: the down
///   GEMM writes the output);
/// - shared experts (Qwen2-MoE, Llama 4): `shared_up`, `shared_act`, `shared_down`, a dense
///   gated FFN of their width over every token, and `shared_add` adding it to the routed
///   output.
///
/// With one expert the router, top-k, alignment and sum are left out (there is nothing to
/// route): a 1-expert top-1 MoE is the dense FFN, op for op.
///
/// Tensor parallelism splits each expert's width ([`ModelSpec::sharded`]); expert parallelism
/// gives each rank `E / tp` whole experts ([`ModelSpec::sharded_with`]). Either way the layer
/// ends with the same all-reduce of the rows' hidden states (`allreduce_ffn`): with expert
/// parallelism and no data parallelism vLLM 0.15 keeps every token on every rank (as under
/// tensor parallelism), each rank runs the tokens routed to its experts, and the partial
/// outputs are all-reduced (`FusedMoE`'s `reduce_results`; its all-to-all dispatch and combine
/// kernels, `use_all2all_kernels`, need `data_parallel_size > 1`, which kvplan does not model).
pub fn moe_ffn_ops(m: &ModelSpec, moe: &Moe, rows: u64) -> Vec<(&'static str, OpKind)> {
    let p = m.dtype_bytes();
    let h = u64::from(m.hidden);
    let dt = m.dtype;
    let wf = m.weight_format();
    let r32 = u32::try_from(rows).unwrap_or(u32::MAX);
    let gated = if m.gated_ffn { 2 } else { 1 };
    let route = moe.experts > 1;
    let mut ops = Vec::with_capacity(12);
    if route {
        ops.push((
            "router",
            OpKind::Gemm {
                m: r32,
                n: moe.experts,
                k: m.hidden,
                batch: 1,
                dtype: dt,
                weights: WeightFormat::Dense,
            },
        ));
        // Logits read; top-k weights (fp32) and ids (int32) written.
        ops.push((
            "topk",
            OpKind::Elementwise {
                kind: ElemKind::Other,
                bytes: rows * (u64::from(moe.experts) * p + 8 * u64::from(moe.top_k)),
                rows: 0,
            },
        ));
        // Expert ids read, sorted token ids written.
        ops.push((
            "moe_align",
            OpKind::Elementwise {
                kind: ElemKind::Other,
                bytes: rows * 8 * u64::from(moe.top_k),
                rows: 0,
            },
        ));
    }
    let hit = experts_hit_batch(moe, rows);
    let routed = moe.routed_rows(rows);
    let per_expert = (routed / f64::from(hit)).ceil() as u32;
    let routed_rows = routed.round() as u64;
    let width = u64::from(moe.expert_ffn);
    ops.push((
        "ffn_up",
        OpKind::Gemm {
            m: per_expert,
            n: (gated * width) as u32,
            k: m.hidden,
            batch: hit,
            dtype: dt,
            weights: wf,
        },
    ));
    ops.push((
        "ffn_act",
        OpKind::Elementwise {
            kind: ElemKind::Activation,
            bytes: routed_rows * (gated + 1) * width * p,
            rows: u32::try_from(routed_rows).unwrap_or(u32::MAX),
        },
    ));
    ops.push((
        "ffn_down",
        OpKind::Gemm {
            m: per_expert,
            n: m.hidden,
            k: moe.expert_ffn,
            batch: hit,
            dtype: dt,
            weights: wf,
        },
    ));
    if route && moe.top_k > 1 {
        ops.push((
            "moe_sum",
            OpKind::Elementwise {
                kind: ElemKind::Add,
                bytes: rows * (u64::from(moe.top_k) + 1) * h * p,
                rows: r32,
            },
        ));
    }
    if moe.shared_ffn > 0 {
        let s = u64::from(moe.shared_ffn);
        let gemm = |n: u32, k: u32| OpKind::Gemm {
            m: r32,
            n,
            k,
            batch: 1,
            dtype: dt,
            weights: wf,
        };
        ops.push(("shared_up", gemm((gated * s) as u32, m.hidden)));
        ops.push((
            "shared_act",
            OpKind::Elementwise {
                kind: ElemKind::Activation,
                bytes: rows * (gated + 1) * s * p,
                rows: r32,
            },
        ));
        ops.push(("shared_down", gemm(m.hidden, moe.shared_ffn)));
        ops.push((
            "shared_add",
            OpKind::Elementwise {
                kind: ElemKind::Add,
                bytes: rows * elem_bytes_per_token(m, ElemKind::Add),
                rows: r32,
            },
        ));
    }
    ops
}

/// Attention of `batch` sequences, `q_len` queries each over `kv_len` keys.
pub fn attention_op(m: &ModelSpec, batch: u32, q_len: u32, kv_len: u32) -> OpKind {
    OpKind::Attention {
        batch,
        q_heads: m.num_heads as u16,
        kv_heads: m.num_kv_heads as u16,
        q_len,
        kv_len,
        head_dim: m.head_dim as u16,
        causal: q_len > 1,
        dtype: m.dtype,
        kv: m.kv_cache_dtype,
    }
}

/// Bytes per token each memory-bound kind of a layer reads plus writes (per tensor-parallel
/// rank): the norm reads and writes the hidden state; the residual add reads two and writes one;
/// rotary embedding reads and writes the queries and keys; the activation reads the up
/// projection's output and writes the FFN width; the embedding gather reads and writes one row.
pub fn elem_bytes_per_token(m: &ModelSpec, kind: ElemKind) -> u64 {
    let p = m.dtype_bytes();
    let h = u64::from(m.hidden);
    match kind {
        ElemKind::Norm | ElemKind::Embedding => 2 * h * p,
        ElemKind::Add => 3 * h * p,
        ElemKind::Rope => 2 * (m.q_dim() + m.kv_dim()) * p,
        ElemKind::Activation => (m.ffn_up_width() + u64::from(m.ffn_dim)) * p,
        ElemKind::Other => 0,
    }
}

/// The token-wise kernels of a layer over `rows` tokens.
struct DenseKernels {
    norm: OpKind,
    qkv: OpKind,
    rope: Option<OpKind>,
    out: OpKind,
    add: OpKind,
    up: OpKind,
    act: OpKind,
    down: OpKind,
    allreduce: Option<OpKind>,
}

impl DenseKernels {
    fn new(m: &ModelSpec, rows: u64) -> Self {
        let r32 = u32::try_from(rows).unwrap_or(u32::MAX);
        let elem = |kind| OpKind::Elementwise {
            kind,
            bytes: rows * elem_bytes_per_token(m, kind),
            rows: r32,
        };
        let h = m.hidden;
        let q = m.q_dim() as u32;
        let kv = m.kv_dim() as u32;
        let dt = m.dtype;
        let wf = m.weight_format();
        let gemm = |n: u32, k: u32| OpKind::Gemm {
            m: r32,
            n,
            k,
            batch: 1,
            dtype: dt,
            weights: wf,
        };
        DenseKernels {
            norm: elem(ElemKind::Norm),
            qkv: gemm(q + 2 * kv, h),
            rope: (m.learned_positions == 0).then(|| elem(ElemKind::Rope)),
            out: gemm(h, q),
            add: elem(ElemKind::Add),
            up: gemm(m.ffn_up_width() as u32, h),
            act: elem(ElemKind::Activation),
            down: gemm(h, m.ffn_dim),
            allreduce: (m.tensor_parallel > 1).then(|| OpKind::AllReduce {
                bytes: rows * u64::from(h) * m.dtype_bytes(),
                ranks: m.tensor_parallel as u16,
            }),
        }
    }
}

/// Seconds of a layer's kernels (excluding KVPR recomputation) on `cost`.
pub fn layer_compute_s(
    cost: &CostModel,
    m: &ModelSpec,
    batch: u32,
    q_len: u32,
    kv_len: u32,
) -> f64 {
    forward_ops(m, &[(q_len, kv_len)], batch)
        .iter()
        .map(|(_, k)| cost.duration(k))
        .sum()
}

/// The recompute GEMM for `l` tokens of a GPU batch: `X[0:l] @ [W_K | W_V]`.
pub fn recompute_gemm(m: &ModelSpec, batch: u32, l: u32) -> OpKind {
    OpKind::Gemm {
        m: batch * l,
        n: 2 * m.kv_dim() as u32,
        k: m.hidden,
        batch: 1,
        dtype: m.dtype,
        weights: m.weight_format(),
    }
}

/// The kernel placing recomputed K,V of `l` tokens next to the transferred part.
pub fn concat_kernel(m: &ModelSpec, batch: u32, l: u32) -> OpKind {
    OpKind::Elementwise {
        kind: ElemKind::Other,
        bytes: 2 * u64::from(batch) * u64::from(l) * m.kv_bytes_per_token_layer(),
        rows: 0,
    }
}

/// The token embedding of `batch × len` tokens (a gather, costed as reading and writing the
/// rows).
pub fn embed_op(m: &ModelSpec, batch: u32, len: u32) -> OpKind {
    OpKind::Elementwise {
        kind: ElemKind::Embedding,
        bytes: u64::from(batch) * u64::from(len) * elem_bytes_per_token(m, ElemKind::Embedding),
        rows: batch.saturating_mul(len),
    }
}

/// Final norm, LM head and sampling over `batch` token-producing rows.
pub fn head_ops(m: &ModelSpec, batch: u32) -> [(&'static str, OpKind); 3] {
    let b = u64::from(batch);
    [
        (
            "final_norm",
            OpKind::Elementwise {
                kind: ElemKind::Norm,
                bytes: b * elem_bytes_per_token(m, ElemKind::Norm),
                rows: batch,
            },
        ),
        (
            "lm_head",
            OpKind::Gemm {
                m: batch,
                n: m.vocab,
                k: m.hidden,
                batch: 1,
                dtype: m.dtype,
                weights: WeightFormat::Dense,
            },
        ),
        (
            "sample",
            OpKind::Elementwise {
                kind: ElemKind::Other,
                bytes: b * u64::from(m.vocab) * 4,
                rows: 0,
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ragged_batch_shares_token_wise_kernels_and_splits_attention() {
        let m = ModelSpec::preset("llama-2-7b").unwrap();
        // A 512-token prefill chunk next to three decode steps at different lengths.
        let ops = forward_ops(&m, &[(512, 512), (1, 100), (1, 300), (1, 100)], 1);
        let names: Vec<&str> = ops.iter().map(|o| o.0).collect();
        assert_eq!(
            names,
            [
                "ln1",
                "qkv_proj",
                "rope",
                "attention",
                "attention",
                "attention",
                "out_proj",
                "residual_attn",
                "ln2",
                "ffn_up",
                "ffn_act",
                "ffn_down",
                "residual_ffn"
            ]
        );
        // 515 rows through every projection.
        assert!(matches!(ops[1].1, OpKind::Gemm { m: 515, .. }));
        // The two decode steps at 100 keys share one attention op of batch 2.
        assert!(matches!(
            ops[4].1,
            OpKind::Attention {
                batch: 2,
                q_len: 1,
                kv_len: 100,
                causal: false,
                ..
            }
        ));
        assert!(matches!(
            ops[3].1,
            OpKind::Attention {
                batch: 1,
                q_len: 512,
                causal: true,
                ..
            }
        ));
    }

    #[test]
    fn uniform_batch_is_layer_kernels() {
        let m = ModelSpec::preset("opt-1.3b").unwrap();
        let ragged = forward_ops(&m, &[(16, 80)], 8);
        assert_eq!(ragged, layer_kernels(&m, 8, 16, 80));
    }

    #[test]
    fn tensor_parallel_ranks_split_the_gemms_and_all_reduce_twice() {
        let m = ModelSpec::preset("llama-2-7b").unwrap();
        let r = m.sharded(4).unwrap();
        let ops = forward_ops(&r, &[(1, 100)], 8);
        let gemm = |name: &str| ops.iter().find(|o| o.0 == name).unwrap().1;
        // Vidur's shapes at TP 4: QKV n = 3*4096/4, out k = 4096/4, up n = 2*11008/4.
        assert!(matches!(
            gemm("qkv_proj"),
            OpKind::Gemm {
                m: 8,
                n: 3072,
                k: 4096,
                ..
            }
        ));
        assert!(matches!(
            gemm("out_proj"),
            OpKind::Gemm {
                n: 4096,
                k: 1024,
                ..
            }
        ));
        assert!(matches!(
            gemm("ffn_up"),
            OpKind::Gemm {
                n: 5504,
                k: 4096,
                ..
            }
        ));
        assert!(matches!(
            gemm("ffn_down"),
            OpKind::Gemm {
                n: 4096,
                k: 2752,
                ..
            }
        ));
        let reduces: Vec<_> = ops
            .iter()
            .filter(|o| matches!(o.1, OpKind::AllReduce { .. }))
            .collect();
        assert_eq!(reduces.len(), 2);
        assert_eq!(
            reduces[0].1,
            OpKind::AllReduce {
                bytes: 8 * 4096 * 2,
                ranks: 4
            }
        );
        // One rank: no all-reduce; OPT (learned positions) has no rope.
        assert!(
            !forward_ops(&m, &[(1, 100)], 8)
                .iter()
                .any(|o| o.0.starts_with("allreduce"))
        );
        let opt = ModelSpec::preset("opt-1.3b").unwrap();
        assert!(
            !forward_ops(&opt, &[(1, 100)], 8)
                .iter()
                .any(|o| o.0 == "rope")
        );
        // GQA with fewer KV heads than ranks replicates them; uneven splits are errors.
        let l3 = ModelSpec::preset("llama-3-70b").unwrap();
        assert_eq!(l3.sharded(16).unwrap().num_kv_heads, 1);
        assert!(
            m.sharded(3)
                .unwrap_err()
                .to_string()
                .contains("32 query heads")
        );
        assert!(m.sharded(0).is_err());
    }
}
