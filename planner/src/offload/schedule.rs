//! The schedule of a fixed-batch offload plan (KVPR, full transfer, everything on the GPU).
//!
//! Shape (FlexGen's loops):
//! - row-by-row (`gpu_batches = 1`): for each step, for each layer, one batch;
//! - column-by-column (`gpu_batches = k > 1`): for each step, for each layer, `k` GPU batches
//!   reuse one weight load.
//!
//! Streams: `gpu0.compute`, `gpu0.h2d`, `gpu0.d2h`. The KV cache (and for KVPR the layer inputs
//! `X`) of every (layer, GPU batch) lives on the host and is double-buffered on the GPU: the
//! copies for unit `u` wait for the attention of unit `u - 2`, which last read that buffer.
//! Offloaded weights are double-buffered per layer the same way, loaded `W_K,W_V` first so KVPR
//! recomputation starts while `W_Q, W_O` and the FFN still arrive (the fine-grained MHA pipeline).

use kvplan_vocab::host::MemoryKinds;
use kvplan_vocab::model::ModelSpec;
use kvplan_vocab::schedule::{
    ElemKind, LabelId, OpId, OpKind, Payload, Phase, Ring, Schedule, ScheduleBuilder, StreamId,
    StreamKind, Tag,
};

use crate::types::{Shape, Strategy};
use kvplan_vocab::layers::{
    attention_index, concat_kernel, elem_bytes_per_token, embed_op, layer_kernels, recompute_gemm,
};

struct Labels {
    embed: LabelId,
    kernels: Vec<LabelId>,
    recompute: LabelId,
    concat: LabelId,
    final_norm: LabelId,
    lm_head: LabelId,
    sample: LabelId,
    w_kv: LabelId,
    w_qo: LabelId,
    w_ffn: LabelId,
    load_x: LabelId,
    load_kv: LabelId,
    store_kv: LabelId,
    store_x: LabelId,
}

/// What a fixed-batch offload schedule is built from (everything but the steps and splits).
#[derive(Debug, Clone, Copy)]
pub struct Layout<'a> {
    /// The model.
    pub model: &'a ModelSpec,
    /// The batch.
    pub shape: &'a Shape,
    /// KVPR, full transfer or gpu-only.
    pub strategy: Strategy,
    /// Weights resident on the GPU (else loaded layer by layer).
    pub weights_on_gpu: bool,
    /// KVPR stores every layer's input `X` for later recomputation.
    pub keeps_x: bool,
    /// Host memory kind of each class of offloaded data.
    pub memory: MemoryKinds,
}

/// The schedule of `steps` (0 is prefill) of `layout`, recomputing `split_of(step)` tokens at
/// each KVPR decode step. The whole plan is `0..=gen - 1`; the split search builds two steps.
pub fn build_schedule(
    layout: &Layout,
    steps: std::ops::RangeInclusive<u32>,
    split_of: &dyn Fn(u32) -> u32,
) -> Schedule {
    let Layout {
        model: m,
        shape,
        strategy,
        weights_on_gpu,
        keeps_x,
        memory,
    } = *layout;
    let layers = m.num_layers as usize;
    let k = shape.gpu_batches as usize;
    let per_unit = 14;
    let n_steps = (steps.end() + 1).saturating_sub(*steps.start()) as usize;
    let est = n_steps * (layers * k * per_unit + 3 * layers + 4 * k);
    let mut sb = ScheduleBuilder::with_capacity(est, est);
    let c = sb.stream(0, StreamKind::Compute, "gpu0.compute");
    let uses_link = strategy.offloads_kv() || !weights_on_gpu;
    let (h2d, d2h) = if uses_link {
        (
            Some(sb.stream(0, StreamKind::H2D, "gpu0.h2d")),
            Some(sb.stream(0, StreamKind::D2H, "gpu0.d2h")),
        )
    } else {
        (None, None)
    };
    let kernels = layer_kernels(m, 1, 1, 1);
    let lb = Labels {
        embed: sb.label("embed"),
        kernels: kernels.iter().map(|(name, _)| sb.label(name)).collect(),
        recompute: sb.label("recompute_kv"),
        concat: sb.label("kv_concat"),
        final_norm: sb.label("final_norm"),
        lm_head: sb.label("lm_head"),
        sample: sb.label("sample"),
        w_kv: sb.label("load_w_kv"),
        w_qo: sb.label("load_w_qo"),
        w_ffn: sb.label("load_w_ffn"),
        load_x: sb.label("load_x"),
        load_kv: sb.label("load_kv"),
        store_kv: sb.label("store_kv"),
        store_x: sb.label("store_x"),
    };
    let p = m.dtype_bytes();
    let b = shape.batch;
    let bu = u64::from(b);
    let h = u64::from(m.hidden);
    let kv_tok = m.kv_bytes_per_token_layer();
    let w = m.layer_weights();
    let kvpr = strategy == Strategy::Kvpr;
    let mut last_store_kv: Vec<Option<OpId>> = vec![None; layers * k];
    let mut last_store_x: Vec<Option<OpId>> = vec![None; layers * k];
    let mut kv_ring = Ring::default();
    let mut w_ring = Ring::default();
    let h2d_op = |bytes: u64, payload| OpKind::H2D {
        bytes,
        payload,
        host: memory.of(payload),
    };
    let d2h_op = |bytes: u64, payload| OpKind::D2H {
        bytes,
        payload,
        host: memory.of(payload),
    };

    for step in steps {
        let decode = step > 0;
        let phase = if decode {
            Phase::Decode
        } else {
            Phase::Prefill
        };
        let q_len = if decode { 1 } else { shape.prompt };
        let cached = if decode { shape.cached_at(step) } else { 0 };
        let kv_len = cached + q_len;
        let l = if decode && kvpr { split_of(step) } else { 0 };
        let kernels = layer_kernels(m, b, q_len, kv_len);
        let attention = attention_index(&kernels);
        let tag = |layer: u16, batch: u16| Tag {
            phase,
            step,
            layer,
            batch,
            group: Tag::NONE,
        };
        for g in 0..k as u16 {
            sb.push(embed_op(m, b, q_len), c, lb.embed, tag(Tag::NONE, g), &[]);
        }
        for j in 0..layers {
            let lj = j as u16;
            // Weights of this layer (offloaded): W_K,W_V first, then (KVPR) the first GPU
            // batch's activations, then W_Q,W_O and the FFN.
            let mut w_kv = None;
            let mut w_qo = None;
            let mut w_ffn = None;
            let mut first_x = None;
            let load_x =
                |sb: &mut ScheduleBuilder, g: usize, deps: [Option<OpId>; 2], h2d: StreamId| {
                    sb.push(
                        h2d_op(bu * u64::from(l) * h * p, Payload::RecomputeActivation),
                        h2d,
                        lb.load_x,
                        tag(lj, g as u16),
                        &deps,
                    )
                };
            if !weights_on_gpu {
                let h2d = h2d.expect("offloaded weights need a link");
                let dep = w_ring.reuse_dep();
                w_kv = Some(sb.push(
                    h2d_op(w.kv_proj, Payload::Weights),
                    h2d,
                    lb.w_kv,
                    tag(lj, 0),
                    &[dep],
                ));
                if l > 0 {
                    first_x = Some(load_x(
                        &mut sb,
                        0,
                        [kv_ring.reuse_dep(), last_store_x[j * k]],
                        h2d,
                    ));
                }
                w_qo = Some(sb.push(
                    h2d_op(w.q_o_proj, Payload::Weights),
                    h2d,
                    lb.w_qo,
                    tag(lj, 0),
                    &[dep],
                ));
                w_ffn = Some(sb.push(
                    h2d_op(w.ffn, Payload::Weights),
                    h2d,
                    lb.w_ffn,
                    tag(lj, 0),
                    &[dep],
                ));
            }
            let mut last_kernel = None;
            for g in 0..k {
                let gt = tag(lj, g as u16);
                let unit = j * k + g;
                let mut x = None;
                let mut kv = None;
                if decode && strategy.offloads_kv() {
                    let h2d = h2d.expect("offloaded KV needs a link");
                    let dep = kv_ring.reuse_dep();
                    if l > 0 {
                        x = if g == 0 && first_x.is_some() {
                            first_x
                        } else {
                            Some(load_x(&mut sb, g, [dep, last_store_x[unit]], h2d))
                        };
                    }
                    if l < cached {
                        kv = Some(sb.push(
                            h2d_op(bu * u64::from(cached - l) * kv_tok, Payload::Cache),
                            h2d,
                            lb.load_kv,
                            gt,
                            &[dep, last_store_kv[unit]],
                        ));
                    }
                }
                let ln1 = sb.push(kernels[0].1, c, lb.kernels[0], gt, &[]);
                if l > 0 {
                    sb.push(recompute_gemm(m, b, l), c, lb.recompute, gt, &[x, w_kv]);
                    sb.push(concat_kernel(m, b, l), c, lb.concat, gt, &[]);
                }
                // The new K,V are ready after the projection (and rotary embedding).
                let mut new_kv = ln1;
                let mut attn = ln1;
                for (i, ((name, op), &label)) in kernels.iter().zip(&lb.kernels).enumerate().skip(1)
                {
                    let deps: &[Option<OpId>] = match *name {
                        "qkv_proj" => &[w_kv, w_qo],
                        "attention" => &[kv],
                        "ffn_up" => &[w_ffn],
                        _ => &[],
                    };
                    let id = sb.push(*op, c, label, gt, deps);
                    if i < attention {
                        new_kv = id;
                    } else if i == attention {
                        attn = id;
                    }
                    last_kernel = Some(id);
                }
                if decode && strategy.offloads_kv() {
                    kv_ring.push(attn);
                }
                if let Some(d2h) = d2h.filter(|_| strategy.offloads_kv()) {
                    let new = u64::from(q_len) * bu;
                    last_store_kv[unit] = Some(sb.push(
                        d2h_op(new * kv_tok, Payload::Cache),
                        d2h,
                        lb.store_kv,
                        gt,
                        &[Some(new_kv)],
                    ));
                    if keeps_x {
                        last_store_x[unit] = Some(sb.push(
                            d2h_op(new * h * p, Payload::RecomputeActivation),
                            d2h,
                            lb.store_x,
                            gt,
                            &[Some(ln1)],
                        ));
                    }
                }
            }
            if !weights_on_gpu {
                w_ring.push(last_kernel.expect("at least one GPU batch"));
            }
        }
        for g in 0..k as u16 {
            let t = tag(Tag::NONE, g);
            sb.push(
                OpKind::Elementwise {
                    kind: ElemKind::Norm,
                    bytes: bu * elem_bytes_per_token(m, ElemKind::Norm),
                    rows: b,
                },
                c,
                lb.final_norm,
                t,
                &[],
            );
            sb.push(
                OpKind::Gemm {
                    m: b,
                    n: m.vocab,
                    k: m.hidden,
                    batch: 1,
                    dtype: m.dtype,
                    weights: kvplan_vocab::WeightFormat::Dense,
                },
                c,
                lb.lm_head,
                t,
                &[],
            );
            sb.push(
                OpKind::Elementwise {
                    kind: ElemKind::Other,
                    bytes: bu * u64::from(m.vocab) * 4,
                    rows: 0,
                },
                c,
                lb.sample,
                t,
                &[],
            );
        }
    }
    sb.build()
}
