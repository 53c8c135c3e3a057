//! The kernels of a decoder layer and the KVPR recomputation, as [`OpKind`]s: what every
//! planner puts on a compute stream and what the cost model times.

use crate::cost::CostModel;
use crate::model::ModelSpec;
use crate::schedule::OpKind;

/// The kernels of one decoder layer for `rows` tokens attending over `kv_len` keys.
pub fn layer_kernels(
    m: &ModelSpec,
    batch: u32,
    q_len: u32,
    kv_len: u32,
) -> [(&'static str, OpKind); 8] {
    let p = m.dtype_bytes();
    let rows = batch * q_len;
    let r = u64::from(rows);
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
        (
            "attention",
            OpKind::Attention {
                batch,
                q_heads: m.num_heads as u16,
                kv_heads: m.num_kv_heads as u16,
                q_len,
                kv_len,
                head_dim: m.head_dim as u16,
                causal: q_len > 1,
                dtype: dt,
            },
        ),
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
