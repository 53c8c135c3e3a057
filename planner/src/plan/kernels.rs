//! The kernels of a decoder layer and the KVPR recomputation, as [`OpKind`]s: what every
//! planner puts on a compute stream and what the cost model times.

use crate::cost::CostModel;
use crate::model::ModelSpec;
use crate::schedule::OpKind;

/// The kernels of one decoder layer for `batch` sequences of `q_len` new tokens each,
/// attending over `kv_len` keys: [`forward_ops`] of a uniform batch, as a fixed array.
pub fn layer_kernels(
    m: &ModelSpec,
    batch: u32,
    q_len: u32,
    kv_len: u32,
) -> [(&'static str, OpKind); 8] {
    let ops = forward_ops(m, &[(q_len, kv_len)], batch);
    let attention = ops[2].1;
    let [ln1, qkv, _, out, ln2, up, act, down] = dense_kernels(m, u64::from(batch * q_len));
    [ln1, qkv, ("attention", attention), out, ln2, up, act, down]
}

/// The kernels of one decoder layer for a ragged (mixed) batch: `copies` sequences of each
/// `(q_len, kv_len)` in `seqs` (prefill chunks and decode steps together, as continuous batching
/// runs them). The token-wise kernels (norms, projections, FFN) run once over all rows; attention
/// runs once per distinct `(q_len, kv_len)` (a varlen kernel's work is the sum of these), in the
/// order the shapes first appear. A uniform batch gives exactly [`layer_kernels`]' ops.
pub fn forward_ops(m: &ModelSpec, seqs: &[(u32, u32)], copies: u32) -> Vec<(&'static str, OpKind)> {
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
    let [ln1, qkv, _, out, ln2, up, act, down] = dense_kernels(m, rows);
    let mut ops = vec![ln1, qkv];
    for ((q_len, kv_len), batch) in groups {
        ops.push(("attention", attention_op(m, batch, q_len, kv_len)));
    }
    ops.extend([out, ln2, up, act, down]);
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
    }
}

/// The token-wise kernels of a layer over `rows` tokens, in layer order, with a placeholder
/// (an empty elementwise op) where attention goes.
fn dense_kernels(m: &ModelSpec, rows: u64) -> [(&'static str, OpKind); 8] {
    let p = m.dtype_bytes();
    let r = rows;
    let rows = u32::try_from(rows).unwrap_or(u32::MAX);
    let h = m.hidden;
    let q = m.q_dim() as u32;
    let kv = m.kv_dim() as u32;
    let ffn_up = m.ffn_up_width() as u32;
    let dt = m.dtype;
    let gemm = |m_: u32, n: u32, k: u32| OpKind::Gemm {
        m: m_,
        n,
        k,
        batch: 1,
        dtype: dt,
    };
    [
        // Residual add + norm: read residual and branch, write normed input.
        (
            "ln1",
            OpKind::Elementwise {
                bytes: 3 * r * u64::from(h) * p,
            },
        ),
        ("qkv_proj", gemm(rows, q + 2 * kv, h)),
        ("attention", OpKind::Elementwise { bytes: 0 }),
        ("out_proj", gemm(rows, h, q)),
        (
            "ln2",
            OpKind::Elementwise {
                bytes: 3 * r * u64::from(h) * p,
            },
        ),
        ("ffn_up", gemm(rows, ffn_up, h)),
        (
            "ffn_act",
            OpKind::Elementwise {
                bytes: r * (u64::from(ffn_up) + u64::from(m.ffn_dim)) * p,
            },
        ),
        ("ffn_down", gemm(rows, h, m.ffn_dim)),
    ]
}

/// Seconds of a layer's kernels (excluding KVPR recomputation) on `cost`.
pub fn layer_compute_s(
    cost: &CostModel,
    m: &ModelSpec,
    batch: u32,
    q_len: u32,
    kv_len: u32,
) -> f64 {
    layer_kernels(m, batch, q_len, kv_len)
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
    }
}

/// The kernel placing recomputed K,V of `l` tokens next to the transferred part.
pub fn concat_kernel(m: &ModelSpec, batch: u32, l: u32) -> OpKind {
    OpKind::Elementwise {
        bytes: 2 * u64::from(batch) * u64::from(l) * m.kv_bytes_per_token_layer(),
    }
}

/// The token embedding of `batch × len` tokens (a gather, costed as reading and writing the
/// rows).
pub fn embed_op(m: &ModelSpec, batch: u32, len: u32) -> OpKind {
    OpKind::Elementwise {
        bytes: 2 * u64::from(batch) * u64::from(len) * u64::from(m.hidden) * m.dtype_bytes(),
    }
}

/// Final norm, LM head and sampling over `batch` token-producing rows.
pub fn head_ops(m: &ModelSpec, batch: u32) -> [(&'static str, OpKind); 3] {
    let b = u64::from(batch);
    [
        (
            "final_norm",
            OpKind::Elementwise {
                bytes: 2 * b * u64::from(m.hidden) * m.dtype_bytes(),
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
            },
        ),
        (
            "sample",
            OpKind::Elementwise {
                bytes: b * u64::from(m.vocab) * 4,
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
                "attention",
                "attention",
                "attention",
                "out_proj",
                "ln2",
                "ffn_up",
                "ffn_act",
                "ffn_down"
            ]
        );
        // 515 rows through every projection.
        assert!(matches!(ops[1].1, OpKind::Gemm { m: 515, .. }));
        // The two decode steps at 100 keys share one attention op of batch 2.
        assert!(matches!(
            ops[3].1,
            OpKind::Attention {
                batch: 2,
                q_len: 1,
                kv_len: 100,
                causal: false,
                ..
            }
        ));
        assert!(matches!(
            ops[2].1,
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
        assert_eq!(ragged, layer_kernels(&m, 8, 16, 80).to_vec());
    }
}
