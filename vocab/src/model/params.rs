//! Parameter counting: each decoder layer's parameters (split the way the KVPR pipeline loads
//! them), the embeddings', the active parameters of a mixture of experts, and the bytes they
//! take in the serving dtype or quantised.

use super::spec::{LayerFfn, LayerWeights, ModelSpec, Moe};

impl ModelSpec {
    /// Bytes of `params` parameters of which `linear` are quantisable linear weights (the
    /// rest, biases and norms, stay in the serving dtype).
    fn bytes_of(&self, params: u64, linear: u64) -> u64 {
        match self.quantization {
            None => params * self.dtype_bytes(),
            Some(q) => q.bytes(linear) + (params - linear) * self.dtype_bytes(),
        }
    }

    /// Parameters of one decoder layer of the model's main kind ([`ModelSpec::main_ffn`]),
    /// split as [`LayerWeights`] (in elements).
    pub(super) fn layer_param_parts(&self) -> (u64, u64, u64) {
        self.layer_param_parts_of(self.main_ffn())
    }

    /// Parameters of the FFN of an MoE layer on one rank (in elements, without the FFN's
    /// norm): every local routed expert (gate, up and down), the router (`hidden × experts`,
    /// on every rank) and the shared experts.
    fn moe_ffn_params(&self, m: &Moe) -> u64 {
        let h = u64::from(self.hidden);
        let mats = if self.gated_ffn { 3 } else { 2 };
        let experts = u64::from(m.local_experts()) * mats * h * u64::from(m.expert_ffn);
        let router = h * u64::from(m.experts);
        let shared = mats * h * u64::from(m.shared_ffn);
        experts + router + shared
    }

    /// [`ModelSpec::layer_param_parts`] of a layer running `ffn`.
    fn layer_param_parts_of(&self, ffn_kind: LayerFfn) -> (u64, u64, u64) {
        let h = u64::from(self.hidden);
        let q = self.q_dim();
        let kv = self.kv_dim();
        let ffn = u64::from(self.ffn_dim);
        let norm = if self.layer_norm_bias { 2 * h } else { h };
        let norms = u64::from(self.norms_per_layer) * norm;
        // Attention-side norms go with the Q/O group, FFN-side norms with the FFN.
        let attn_norms = norms - norms / 2;
        let ffn_norms = norms / 2;
        let kv_proj = 2 * h * kv + if self.qkv_bias { 2 * kv } else { 0 };
        let q_o = h * q
            + q * h
            + if self.qkv_bias { q } else { 0 }
            + if self.proj_bias { h } else { 0 }
            + attn_norms;
        let mats = if self.gated_ffn { 3 } else { 2 };
        let ffn_p = match (ffn_kind, &self.moe) {
            (LayerFfn::Moe, Some(m)) => self.moe_ffn_params(m) + ffn_norms,
            _ => mats * h * ffn + if self.proj_bias { ffn + h } else { 0 } + ffn_norms,
        };
        (kv_proj, q_o, ffn_p)
    }

    /// The linear-layer weights of [`ModelSpec::layer_param_parts_of`] (in elements): the
    /// matrices a quantisation stores quantised, without biases, norms or a router (vLLM keeps
    /// MoE gates unquantised).
    fn layer_linear_parts_of(&self, ffn_kind: LayerFfn) -> (u64, u64, u64) {
        let h = u64::from(self.hidden);
        let mats = if self.gated_ffn { 3 } else { 2 };
        let ffn = match (ffn_kind, &self.moe) {
            (LayerFfn::Moe, Some(m)) => {
                mats * h
                    * (u64::from(m.local_experts()) * u64::from(m.expert_ffn)
                        + u64::from(m.shared_ffn))
            }
            _ => mats * h * u64::from(self.ffn_dim),
        };
        (2 * h * self.kv_dim(), 2 * h * self.q_dim(), ffn)
    }

    /// Parameters of the decoder layers' linear weights, every layer (the part
    /// `quantization` stores quantised); [`ModelSpec::params`] less it stays in the dtype.
    pub fn linear_params(&self) -> u64 {
        let sum = |f| {
            let (a, b, c) = self.layer_linear_parts_of(f);
            a + b + c
        };
        if self.moe.is_none() {
            return sum(LayerFfn::Dense) * u64::from(self.num_layers);
        }
        let moe = u64::from(self.moe_layers());
        sum(LayerFfn::Moe) * moe + sum(LayerFfn::Dense) * (u64::from(self.num_layers) - moe)
    }

    /// Parameters of one decoder layer (of the main kind, [`ModelSpec::main_ffn`]).
    pub fn layer_params(&self) -> u64 {
        let (a, b, c) = self.layer_param_parts();
        a + b + c
    }

    /// Parameters of one decoder layer running `ffn`.
    pub fn layer_params_of(&self, ffn: LayerFfn) -> u64 {
        let (a, b, c) = self.layer_param_parts_of(ffn);
        a + b + c
    }

    /// Parameters a token passes through: every parameter of a dense model; of a mixture of
    /// experts, the router, `top_k` routed experts and the shared experts of each MoE layer
    /// instead of all its experts (Mixtral-8x7B's "12.9B active").
    pub fn active_params(&self) -> u64 {
        let Some(m) = &self.moe else {
            return self.params();
        };
        let h = u64::from(self.hidden);
        let mats = if self.gated_ffn { 3 } else { 2 };
        let idle = u64::from(m.local_experts().saturating_sub(m.top_k))
            * mats
            * h
            * u64::from(m.expert_ffn);
        self.params() - idle * u64::from(self.moe_layers())
    }

    /// Parameters outside the decoder layers: embeddings, position table, final norm, LM head.
    pub fn embedding_params(&self) -> u64 {
        let h = u64::from(self.hidden);
        let v = u64::from(self.vocab);
        let e = if self.embed_proj_dim > 0 {
            u64::from(self.embed_proj_dim)
        } else {
            h
        };
        let embed = v * e;
        let lm_head = if self.tied_embeddings { 0 } else { v * e };
        let proj = if self.embed_proj_dim > 0 && self.embed_proj_dim != self.hidden {
            2 * h * e
        } else {
            0
        };
        let pos = u64::from(self.learned_positions) * h;
        let final_norm = if self.layer_norm_bias { 2 * h } else { h };
        embed + lm_head + proj + pos + final_norm
    }

    /// Total parameter count from the shapes (of a mixture of experts: every expert, the
    /// routers and the shared experts; dense layers of a mixed model counted as dense).
    pub fn params(&self) -> u64 {
        if self.moe.is_none() {
            return self.layer_params() * u64::from(self.num_layers) + self.embedding_params();
        }
        let moe = u64::from(self.moe_layers());
        let dense = u64::from(self.num_layers) - moe;
        self.layer_params_of(LayerFfn::Moe) * moe
            + self.layer_params_of(LayerFfn::Dense) * dense
            + self.embedding_params()
    }

    /// Bytes of all weights: in the serving dtype, or with the decoder layers' linear weights
    /// quantised ([`ModelSpec::quantization`]; embeddings, norms, biases and the LM head stay
    /// in the dtype).
    pub fn weight_bytes(&self) -> u64 {
        match self.quantization {
            None => self.params() * self.dtype_bytes(),
            Some(_) => {
                let linear = self.linear_params();
                self.bytes_of(self.params(), linear)
            }
        }
    }

    /// Bytes of one decoder layer's weights, split for the fine-grained load order.
    pub fn layer_weights(&self) -> LayerWeights {
        let (a, b, c) = self.layer_param_parts();
        let (la, lb, lc) = self.layer_linear_parts_of(self.main_ffn());
        LayerWeights {
            kv_proj: self.bytes_of(a, la),
            q_o_proj: self.bytes_of(b, lb),
            ffn: self.bytes_of(c, lc),
        }
    }

    /// Bytes of the weights that stay on the GPU when layers are offloaded (embeddings, LM head).
    pub fn embedding_bytes(&self) -> u64 {
        self.embedding_params() * self.dtype_bytes()
    }
}
