//! A model's shape: the [`ModelSpec`] the planners use, its family, its mixture of experts, and
//! the sizes that follow directly from its fields (head widths, KV bytes, FFN widths).

use serde::Serialize;

use crate::dtype::DType;
use crate::quant::{KvCacheDtype, Quantization, WeightFormat};

/// Model families kvplan models; each fixes the layer layout used for parameter counting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// Meta OPT: learned positions, LayerNorm with bias, biased projections, 2-matrix ReLU FFN.
    Opt,
    /// Llama 2/3: RMSNorm, no biases, gated SiLU FFN (3 matrices), GQA in Llama 3.
    Llama,
    /// Mistral: Llama layout with sliding-window attention.
    Mistral,
    /// Qwen2 and Qwen2.5: Llama layout with biases on the Q, K, V projections.
    Qwen2,
    /// Qwen3: Llama layout (no biases) with an explicit head_dim and RMSNorms on each head's
    /// query and key. kvplan leaves out those two norms (2 x head_dim weights per layer, about
    /// 0.0003% of Qwen3-8B) and their kernels; everything else is counted as for Llama.
    Qwen3,
    /// Gemma 2: four RMSNorms per layer, head_dim independent of hidden, tied embeddings.
    Gemma2,
    /// Falcon: parallel attention/MLP, multi-query (7B) or grouped KV, 2-matrix GELU FFN.
    Falcon,
    /// Mixtral: Mistral's layout with a mixture-of-experts FFN in every layer ([`Moe`]).
    Mixtral,
    /// Qwen2-MoE: Qwen2's layout (biased Q, K, V) with routed experts and a shared expert.
    #[serde(rename = "qwen2_moe")]
    Qwen2Moe,
    /// Qwen3-MoE: Qwen3's layout (explicit head_dim, no biases) with routed experts.
    #[serde(rename = "qwen3_moe")]
    Qwen3Moe,
    /// Llama 4 (the text model): Llama's layout with routed experts and one shared expert in
    /// the MoE layers, dense FFNs (`intermediate_size_mlp`) in the others. kvplan leaves out
    /// its chunked attention, its layers without rotary embedding and its weightless QK norm
    /// (every layer is costed as full attention with rope).
    Llama4,
}

impl Family {
    /// The Hugging Face `model_type` values this family reads.
    pub const MODEL_TYPES: &'static [&'static str] = &[
        "opt",
        "llama",
        "mistral",
        "qwen2",
        "qwen3",
        "gemma2",
        "falcon",
        "mixtral",
        "qwen2_moe",
        "qwen3_moe",
        "llama4",
        "llama4_text",
        "RefinedWeb",
        "RefinedWebModel",
    ];

    /// The `model_type`s an unsupported-architecture error lists (the aliases left out).
    pub(super) const LISTED: usize = 11;

    /// The family's name in listings and JSON (`llama`, `qwen3_moe`).
    pub fn as_str(self) -> &'static str {
        match self {
            Family::Opt => "opt",
            Family::Llama => "llama",
            Family::Mistral => "mistral",
            Family::Qwen2 => "qwen2",
            Family::Qwen3 => "qwen3",
            Family::Gemma2 => "gemma2",
            Family::Falcon => "falcon",
            Family::Mixtral => "mixtral",
            Family::Qwen2Moe => "qwen2_moe",
            Family::Qwen3Moe => "qwen3_moe",
            Family::Llama4 => "llama4",
        }
    }

    pub(super) fn from_model_type(t: &str) -> Option<Self> {
        Some(match t {
            "opt" => Family::Opt,
            "llama" => Family::Llama,
            "mistral" => Family::Mistral,
            "qwen2" => Family::Qwen2,
            "qwen3" => Family::Qwen3,
            "gemma2" => Family::Gemma2,
            "falcon" | "RefinedWeb" | "RefinedWebModel" => Family::Falcon,
            "mixtral" => Family::Mixtral,
            "qwen2_moe" => Family::Qwen2Moe,
            "qwen3_moe" => Family::Qwen3Moe,
            "llama4" | "llama4_text" => Family::Llama4,
            _ => return None,
        })
    }
}

fn is_one(v: &u32) -> bool {
    *v == 1
}

/// The architecture numbers of a decoder-only transformer, as the planner uses them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelSpec {
    /// Preset name, or the file it came from.
    pub name: String,
    /// Layer layout.
    pub family: Family,
    /// Decoder layers `L`.
    pub num_layers: u32,
    /// Hidden size `h` (the residual stream width).
    pub hidden: u32,
    /// Query heads `H`.
    pub num_heads: u32,
    /// Key/value heads `Hkv` (`< H` for GQA, 1 for multi-query).
    pub num_kv_heads: u32,
    /// Head dimension `d` (usually `h / H`; Gemma 2 sets it separately).
    pub head_dim: u32,
    /// FFN inner width of a dense layer (a mixture-of-experts layer's widths are in
    /// [`ModelSpec::moe`]).
    pub ffn_dim: u32,
    /// Vocabulary size.
    pub vocab: u32,
    /// Maximum context the model was trained for (`max_position_embeddings`).
    pub max_position: u32,
    /// Input embedding and LM head share one matrix.
    pub tied_embeddings: bool,
    /// Serving dtype of weights, activations and (with `kv_cache_dtype = auto`) the KV cache.
    pub dtype: DType,
    /// Element type of the KV cache (vLLM's KV cache dtype option; `auto`: [`ModelSpec::dtype`]).
    #[serde(default, skip_serializing_if = "KvCacheDtype::is_auto")]
    pub kv_cache_dtype: KvCacheDtype,
    /// Weight quantisation of the decoder layers' linear weights (vLLM's quantization option;
    /// `None`: every weight in [`ModelSpec::dtype`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<Quantization>,
    /// Gated FFN (three matrices: gate, up, down) rather than two.
    pub gated_ffn: bool,
    /// Bias vectors on the Q, K, V projections.
    pub qkv_bias: bool,
    /// Bias vectors on the attention output projection and the FFN matrices.
    pub proj_bias: bool,
    /// LayerNorm (weight and bias) rather than RMSNorm (weight only).
    pub layer_norm_bias: bool,
    /// Norm layers per decoder layer.
    pub norms_per_layer: u32,
    /// Rows of a learned position-embedding table (0 for rotary models).
    pub learned_positions: u32,
    /// Projection between a narrower embedding and the hidden size (OPT-350m style), else 0.
    pub embed_proj_dim: u32,
    /// Tensor-parallel ranks this spec's per-rank shapes are for (1: the whole model on one
    /// GPU). Set by [`ModelSpec::sharded`].
    #[serde(skip_serializing_if = "is_one")]
    pub tensor_parallel: u32,
    /// The mixture-of-experts FFN, for models that have one (`None`: every layer is dense).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moe: Option<Moe>,
}

/// A mixture-of-experts FFN (Mixtral, Qwen2-MoE, Qwen3-MoE, Llama 4): a router picks
/// `top_k` of `experts` gated FFNs for every token; shared experts, if any, run for every
/// token too. Layers listed in `dense_layers` run the dense FFN ([`ModelSpec::ffn_dim`]) instead.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Moe {
    /// Routed experts per MoE layer, in the whole model.
    pub experts: u32,
    /// Experts each token is routed to (top-k).
    pub top_k: u32,
    /// FFN inner width of one routed expert (per tensor-parallel rank once
    /// [`ModelSpec::sharded`]).
    pub expert_ffn: u32,
    /// FFN inner width of the shared expert(s) every token runs as well (0: none; several
    /// shared experts are one FFN of their summed width, as vLLM runs them).
    pub shared_ffn: u32,
    /// 0-based indices of the layers whose FFN is dense; empty: every layer is MoE.
    pub dense_layers: Vec<u32>,
    /// Ranks the routed experts are divided among (expert parallelism, vLLM's
    /// expert-parallel option): each rank holds `experts / expert_parallel` whole experts.
    /// 1: every rank holds every expert (tensor parallelism splits their widths).
    #[serde(skip_serializing_if = "is_one")]
    pub expert_parallel: u32,
}

impl Moe {
    /// Routed experts on one rank.
    pub fn local_experts(&self) -> u32 {
        self.experts / self.expert_parallel.max(1)
    }

    /// The expected number of distinct experts of one rank that `tokens` tokens hit, each
    /// choosing `top_k` of `experts` uniformly: `E_loc · (1 − (1 − k/E)^B)`, the experts whose
    /// weights a fused MoE kernel reads. Not rounded.
    pub fn experts_hit(&self, tokens: u64) -> f64 {
        let e = f64::from(self.experts.max(1));
        let k = f64::from(self.top_k.min(self.experts)).max(0.0);
        let miss = (1.0 - k / e).max(0.0);
        let b = i32::try_from(tokens).unwrap_or(i32::MAX);
        f64::from(self.local_experts()) * (1.0 - miss.powi(b))
    }

    /// Expected (token, expert) pairs of `tokens` tokens that land on one rank's experts:
    /// `B · k · E_loc / E`.
    pub fn routed_rows(&self, tokens: u64) -> f64 {
        tokens as f64 * f64::from(self.top_k) * f64::from(self.local_experts())
            / f64::from(self.experts.max(1))
    }
}

/// Which FFN a decoder layer runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LayerFfn {
    /// The dense FFN, [`ModelSpec::ffn_dim`] wide.
    Dense,
    /// The mixture of experts, [`ModelSpec::moe`].
    Moe,
}

/// Per-layer weight bytes split the way the KVPR fine-grained pipeline loads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LayerWeights {
    /// `W_K`, `W_V` (and their biases): what recomputation needs first.
    pub kv_proj: u64,
    /// `W_Q`, `W_O` (and biases) and the attention norm.
    pub q_o_proj: u64,
    /// FFN matrices, biases and the FFN norm.
    pub ffn: u64,
}

impl LayerWeights {
    /// Sum of the three parts.
    pub fn total(&self) -> u64 {
        self.kv_proj + self.q_o_proj + self.ffn
    }
}

impl ModelSpec {
    /// Which FFN layer `layer` (0-based) runs.
    pub fn layer_ffn(&self, layer: u32) -> LayerFfn {
        match &self.moe {
            Some(m) if !m.dense_layers.contains(&layer) => LayerFfn::Moe,
            _ => LayerFfn::Dense,
        }
    }

    /// Layers whose FFN is a mixture of experts (0 for a dense model).
    pub fn moe_layers(&self) -> u32 {
        match &self.moe {
            Some(m) => self.num_layers - m.dense_layers.len() as u32,
            None => 0,
        }
    }

    /// The FFN of the model's layers where the planners take every layer to be alike: the
    /// mixture of experts when any layer has one, else the dense FFN. (A model mixing dense and
    /// MoE layers is costed exactly by the serving simulator, layer by layer; the op-level
    /// planners cost every layer as this one.)
    pub fn main_ffn(&self) -> LayerFfn {
        if self.moe_layers() > 0 {
            LayerFfn::Moe
        } else {
            LayerFfn::Dense
        }
    }

    /// Returns a copy served in another dtype.
    pub fn with_dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }

    /// Bytes per element of the serving dtype.
    pub fn dtype_bytes(&self) -> u64 {
        self.dtype.bytes()
    }

    /// Returns a copy with the KV cache in `kv` (vLLM's KV cache dtype option).
    pub fn with_kv_cache_dtype(mut self, kv: KvCacheDtype) -> Self {
        self.kv_cache_dtype = kv;
        self
    }

    /// Returns a copy with its linear weights quantised as `q` (vLLM's quantization option).
    pub fn with_quantization(mut self, q: Option<Quantization>) -> Self {
        self.quantization = q;
        self
    }

    /// Bytes of one K or V element in the cache: the serving dtype's, or 1 for an fp8 cache.
    pub fn kv_bytes_per_element(&self) -> u64 {
        self.kv_cache_dtype.bytes(self.dtype)
    }

    /// How the decoder layers' linear weights are stored ([`WeightFormat::Dense`] unquantised).
    pub fn weight_format(&self) -> WeightFormat {
        self.quantization
            .map_or(WeightFormat::Dense, Quantization::weights)
    }

    /// Width of the query projection output, `H * d`.
    pub fn q_dim(&self) -> u64 {
        u64::from(self.num_heads) * u64::from(self.head_dim)
    }

    /// Width of one of K or V, `Hkv * d`.
    pub fn kv_dim(&self) -> u64 {
        u64::from(self.num_kv_heads) * u64::from(self.head_dim)
    }

    /// Query heads per KV head (`g`; 1 for MHA).
    pub fn gqa_group(&self) -> u32 {
        self.num_heads / self.num_kv_heads
    }

    /// K and V bytes of one token in one layer: `2 * Hkv * d * p_kv`
    /// ([`ModelSpec::kv_bytes_per_element`]).
    pub fn kv_bytes_per_token_layer(&self) -> u64 {
        2 * self.kv_dim() * self.kv_bytes_per_element()
    }

    /// K and V bytes of one token across all layers.
    pub fn kv_bytes_per_token(&self) -> u64 {
        self.kv_bytes_per_token_layer() * u64::from(self.num_layers)
    }

    /// Activation (layer input) bytes of one token in one layer: `h * p`.
    pub fn act_bytes_per_token_layer(&self) -> u64 {
        u64::from(self.hidden) * self.dtype_bytes()
    }

    /// Width of the first FFN GEMM's output (`2 * ffn` for gated FFNs: gate and up fused).
    pub fn ffn_up_width(&self) -> u64 {
        u64::from(self.ffn_dim) * if self.gated_ffn { 2 } else { 1 }
    }

    /// Elements per token the FFN holds at its peak besides the hidden states: a dense FFN's
    /// `act(gate)`, `up` and their product (`3 · ffn`; `2 · ffn` ungated); an MoE layer's the
    /// same for each of its `top_k` experts plus the experts' outputs before they are summed
    /// (`k · (3 · expert_ffn + hidden)`, vLLM's fused-MoE intermediate caches) and the shared
    /// experts'; the larger of the two kinds in a mixed model.
    pub fn ffn_live_elems(&self) -> u64 {
        let live = if self.gated_ffn { 3 } else { 2 };
        let dense = live * u64::from(self.ffn_dim);
        match &self.moe {
            None => dense,
            Some(m) => {
                let moe = u64::from(m.top_k)
                    * (live * u64::from(m.expert_ffn) + u64::from(self.hidden))
                    + live * u64::from(m.shared_ffn);
                if self.moe_layers() < self.num_layers {
                    moe.max(dense)
                } else {
                    moe
                }
            }
        }
    }
}
