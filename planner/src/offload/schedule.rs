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

use super::options::kv_on_host;
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
    let n_steps = (steps.end() + 1).saturating_sub(*steps.start()) as usize;
    let mut b = Builder::new(layout, n_steps);
    for step in steps {
        b.step(step, split_of);
    }
    b.sb.build()
}

/// The schedule as it is built: streams, labels, and what the next ops wait for.
struct Builder<'a> {
    layout: Layout<'a>,
    sb: ScheduleBuilder,
    c: StreamId,
    h2d: Option<StreamId>,
    d2h: Option<StreamId>,
    lb: Labels,
    /// Each (layer, GPU batch) unit's last KV store, which its next load waits for.
    last_store_kv: Vec<Option<OpId>>,
    /// Each unit's last store of `X`.
    last_store_x: Vec<Option<OpId>>,
    /// The two KV (and `X`) buffers: a load waits for the attention that last read its buffer.
    kv_ring: Ring,
    /// The two weight buffers: a layer's load waits for the kernels that last used its buffer.
    w_ring: Ring,
}

/// One step's constants.
struct StepShape {
    step: u32,
    phase: Phase,
    decode: bool,
    /// Query tokens per sequence (1 in decode).
    q_len: u32,
    /// Cached tokens before the step.
    cached: u32,
    /// Tokens KVPR recomputes (0 but at its decode steps).
    l: u32,
    /// One layer's kernels at this step.
    kernels: Vec<(&'static str, OpKind)>,
    /// The attention kernel's index in `kernels`.
    attention: usize,
}

impl StepShape {
    fn tag(&self, layer: u16, batch: u16) -> Tag {
        Tag {
            phase: self.phase,
            step: self.step,
            layer,
            batch,
            group: Tag::NONE,
        }
    }
}

/// A layer's offloaded weight loads (and KVPR's first `X` load between them).
#[derive(Default)]
struct LayerLoads {
    w_kv: Option<OpId>,
    w_qo: Option<OpId>,
    w_ffn: Option<OpId>,
    first_x: Option<OpId>,
}

impl<'a> Builder<'a> {
    fn new(layout: &Layout<'a>, n_steps: usize) -> Self {
        let (m, shape) = (layout.model, layout.shape);
        let layers = m.num_layers as usize;
        let k = shape.gpu_batches as usize;
        let per_unit = 14;
        let est = n_steps * (layers * k * per_unit + 3 * layers + 4 * k);
        let mut sb = ScheduleBuilder::with_capacity(est, est);
        let c = sb.stream(0, StreamKind::Compute, "gpu0.compute");
        let uses_link = kv_on_host(layout.strategy) || !layout.weights_on_gpu;
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
        Builder {
            layout: *layout,
            sb,
            c,
            h2d,
            d2h,
            lb,
            last_store_kv: vec![None; layers * k],
            last_store_x: vec![None; layers * k],
            kv_ring: Ring::default(),
            w_ring: Ring::default(),
        }
    }

    fn h2d_op(&self, bytes: u64, payload: Payload) -> OpKind {
        OpKind::H2D {
            bytes,
            payload,
            host: self.layout.memory.of(payload),
        }
    }

    fn d2h_op(&self, bytes: u64, payload: Payload) -> OpKind {
        OpKind::D2H {
            bytes,
            payload,
            host: self.layout.memory.of(payload),
        }
    }

    /// Step `step` (0 is prefill): the embeddings, every layer, and the head.
    fn step(&mut self, step: u32, split_of: &dyn Fn(u32) -> u32) {
        let (m, shape) = (self.layout.model, self.layout.shape);
        let decode = step > 0;
        let q_len = if decode { 1 } else { shape.prompt };
        let cached = if decode { shape.cached_at(step) } else { 0 };
        let kvpr = self.layout.strategy == Strategy::KVPR;
        let kernels = layer_kernels(m, shape.batch, q_len, cached + q_len);
        let st = StepShape {
            step,
            phase: if decode {
                Phase::Decode
            } else {
                Phase::Prefill
            },
            decode,
            q_len,
            cached,
            l: if decode && kvpr { split_of(step) } else { 0 },
            attention: attention_index(&kernels),
            kernels,
        };
        let k = shape.gpu_batches as u16;
        for g in 0..k {
            let op = embed_op(m, shape.batch, q_len);
            self.sb
                .push(op, self.c, self.lb.embed, st.tag(Tag::NONE, g), &[]);
        }
        for j in 0..m.num_layers as usize {
            let loads = self.layer_loads(&st, j);
            let mut last_kernel = None;
            for g in 0..k as usize {
                last_kernel = Some(self.unit(&st, j, g, &loads));
            }
            if !self.layout.weights_on_gpu {
                self.w_ring
                    .push(last_kernel.expect("at least one GPU batch"));
            }
        }
        for g in 0..k {
            self.head(&st, g);
        }
    }

    /// Loads `X` of GPU batch `g` of layer `j` for recomputation, after `deps`.
    fn load_x(&mut self, st: &StepShape, j: usize, g: usize, deps: [Option<OpId>; 2]) -> OpId {
        let (m, bu) = (self.layout.model, u64::from(self.layout.shape.batch));
        let bytes = bu * u64::from(st.l) * u64::from(m.hidden) * m.dtype_bytes();
        let op = self.h2d_op(bytes, Payload::RecomputeActivation);
        let h2d = self.h2d.expect("recomputation loads over a link");
        let tag = st.tag(j as u16, g as u16);
        self.sb.push(op, h2d, self.lb.load_x, tag, &deps)
    }

    /// Layer `j`'s offloaded weights: `W_K,W_V` first, then (KVPR) the first GPU batch's
    /// activations, then `W_Q,W_O` and the FFN. Nothing when the weights are resident.
    fn layer_loads(&mut self, st: &StepShape, j: usize) -> LayerLoads {
        let mut loads = LayerLoads::default();
        if self.layout.weights_on_gpu {
            return loads;
        }
        let (w, k) = (
            self.layout.model.layer_weights(),
            self.layout.shape.gpu_batches as usize,
        );
        let h2d = self.h2d.expect("offloaded weights need a link");
        let dep = self.w_ring.reuse_dep();
        let tag = st.tag(j as u16, 0);
        let op = self.h2d_op(w.kv_proj, Payload::Weights);
        loads.w_kv = Some(self.sb.push(op, h2d, self.lb.w_kv, tag, &[dep]));
        if st.l > 0 {
            let deps = [self.kv_ring.reuse_dep(), self.last_store_x[j * k]];
            loads.first_x = Some(self.load_x(st, j, 0, deps));
        }
        let op = self.h2d_op(w.q_o_proj, Payload::Weights);
        loads.w_qo = Some(self.sb.push(op, h2d, self.lb.w_qo, tag, &[dep]));
        let op = self.h2d_op(w.ffn, Payload::Weights);
        loads.w_ffn = Some(self.sb.push(op, h2d, self.lb.w_ffn, tag, &[dep]));
        loads
    }

    /// GPU batch `g` of layer `j`: its cache loads (offloaded KV at decode), its kernels (with
    /// KVPR's recomputation) and its stores; the id of its last kernel.
    fn unit(&mut self, st: &StepShape, j: usize, g: usize, loads: &LayerLoads) -> OpId {
        let Layout {
            model: m,
            shape,
            strategy,
            keeps_x,
            ..
        } = self.layout;
        let (bu, kv_tok) = (u64::from(shape.batch), m.kv_bytes_per_token_layer());
        let gt = st.tag(j as u16, g as u16);
        let unit = j * shape.gpu_batches as usize + g;
        let (l, cached, c) = (st.l, st.cached, self.c);
        let mut x = None;
        let mut kv = None;
        if st.decode && kv_on_host(strategy) {
            let h2d = self.h2d.expect("offloaded KV needs a link");
            let dep = self.kv_ring.reuse_dep();
            if l > 0 {
                x = if g == 0 && loads.first_x.is_some() {
                    loads.first_x
                } else {
                    Some(self.load_x(st, j, g, [dep, self.last_store_x[unit]]))
                };
            }
            if l < cached {
                let op = self.h2d_op(bu * u64::from(cached - l) * kv_tok, Payload::Cache);
                let deps = [dep, self.last_store_kv[unit]];
                kv = Some(self.sb.push(op, h2d, self.lb.load_kv, gt, &deps));
            }
        }
        let ln1 = self
            .sb
            .push(st.kernels[0].1, c, self.lb.kernels[0], gt, &[]);
        if l > 0 {
            let deps = [x, loads.w_kv];
            self.sb.push(
                recompute_gemm(m, shape.batch, l),
                c,
                self.lb.recompute,
                gt,
                &deps,
            );
            self.sb
                .push(concat_kernel(m, shape.batch, l), c, self.lb.concat, gt, &[]);
        }
        // The new K,V are ready after the projection (and rotary embedding).
        let mut new_kv = ln1;
        let mut attn = ln1;
        let mut last_kernel = ln1;
        for (i, ((name, op), &label)) in st.kernels.iter().zip(&self.lb.kernels).enumerate().skip(1)
        {
            let deps: &[Option<OpId>] = match *name {
                "qkv_proj" => &[loads.w_kv, loads.w_qo],
                "attention" => &[kv],
                "ffn_up" => &[loads.w_ffn],
                _ => &[],
            };
            let id = self.sb.push(*op, c, label, gt, deps);
            if i < st.attention {
                new_kv = id;
            } else if i == st.attention {
                attn = id;
            }
            last_kernel = id;
        }
        if st.decode && kv_on_host(strategy) {
            self.kv_ring.push(attn);
        }
        if let Some(d2h) = self.d2h.filter(|_| kv_on_host(strategy)) {
            let new = u64::from(st.q_len) * bu;
            let op = self.d2h_op(new * kv_tok, Payload::Cache);
            self.last_store_kv[unit] =
                Some(self.sb.push(op, d2h, self.lb.store_kv, gt, &[Some(new_kv)]));
            if keeps_x {
                let op = self.d2h_op(
                    new * u64::from(m.hidden) * m.dtype_bytes(),
                    Payload::RecomputeActivation,
                );
                self.last_store_x[unit] =
                    Some(self.sb.push(op, d2h, self.lb.store_x, gt, &[Some(ln1)]));
            }
        }
        last_kernel
    }

    /// The final norm, LM head and sampling of GPU batch `g`.
    fn head(&mut self, st: &StepShape, g: u16) {
        let (m, b) = (self.layout.model, self.layout.shape.batch);
        let (bu, c, t) = (u64::from(b), self.c, st.tag(Tag::NONE, g));
        let norm = OpKind::Elementwise {
            kind: ElemKind::Norm,
            bytes: bu * elem_bytes_per_token(m, ElemKind::Norm),
            rows: b,
        };
        self.sb.push(norm, c, self.lb.final_norm, t, &[]);
        let lm_head = OpKind::Gemm {
            m: b,
            n: m.vocab,
            k: m.hidden,
            batch: 1,
            dtype: m.dtype,
            weights: kvplan_vocab::WeightFormat::Dense,
        };
        self.sb.push(lm_head, c, self.lb.lm_head, t, &[]);
        let sample = OpKind::Elementwise {
            kind: ElemKind::Other,
            bytes: bu * u64::from(m.vocab) * 4,
            rows: 0,
        };
        self.sb.push(sample, c, self.lb.sample, t, &[]);
    }
}
