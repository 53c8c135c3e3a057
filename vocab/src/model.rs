//! Transformer model shapes: presets and Hugging Face `config.json` import.
//!
//! Every preset is stored as the architecture fields of the model's public `config.json`
//! (`vocab/models/*.json`) and read by the same importer a user's file goes through, so the
//! presets and the importer cannot drift apart.

use std::path::Path;

use serde::Serialize;
use serde_json::{Map, Value};

use crate::dtype::DType;
use crate::error::{Error, Result, one_line};
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
    const LISTED: usize = 11;

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

    fn from_model_type(t: &str) -> Option<Self> {
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
    /// Element type of the KV cache (vLLM's `--kv-cache-dtype`; `auto`: [`ModelSpec::dtype`]).
    #[serde(default, skip_serializing_if = "KvCacheDtype::is_auto")]
    pub kv_cache_dtype: KvCacheDtype,
    /// Weight quantisation of the decoder layers' linear weights (vLLM's `--quantization`;
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
    /// `--enable-expert-parallel`): each rank holds `experts / expert_parallel` whole experts.
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

/// Published parameter counts used to check the shape arithmetic.
///
/// Sources: OPT paper (Zhang et al. 2022) Table 1 for OPT; the Hugging Face model pages'
/// safetensors parameter counts for the others; Falcon paper (Almazrouei et al. 2023) for Falcon;
/// the model cards' "Number of Parameters" for Qwen2.5 and Qwen3, Mistral AI's Mistral NeMo
/// announcement (12B) and the Gemma 2 report's 27B for those; Mistral AI's Mixtral
/// announcements (46.7B total for 8x7B; 141B for 8x22B, whose safetensors count is 140.6B) and
/// Qwen3-30B-A3B's model card (30.5B total) for the mixtures of experts, every expert counted.
pub const PUBLISHED_PARAMS: &[(&str, f64)] = &[
    ("opt-125m", 125e6),
    ("opt-1.3b", 1.3e9),
    ("opt-6.7b", 6.7e9),
    ("opt-13b", 13e9),
    ("opt-30b", 30e9),
    ("llama-2-7b", 6.74e9),
    ("llama-2-13b", 13.0e9),
    ("llama-3-8b", 8.03e9),
    ("llama-3.1-8b", 8.03e9),
    ("llama-3-70b", 70.6e9),
    ("llama-3.1-70b", 70.6e9),
    ("llama-3.1-405b", 405.9e9),
    ("llama-3.2-1b", 1.24e9),
    ("llama-3.2-3b", 3.21e9),
    ("mistral-7b", 7.24e9),
    ("qwen2-7b", 7.62e9),
    ("qwen2.5-7b", 7.61e9),
    ("qwen2.5-14b", 14.7e9),
    ("qwen2.5-32b", 32.5e9),
    ("qwen2.5-72b", 72.7e9),
    ("qwen3-8b", 8.2e9),
    ("qwen3-14b", 14.8e9),
    ("qwen3-32b", 32.8e9),
    ("mistral-nemo-12b", 12.2e9),
    ("yi-34b", 34.4e9),
    ("gemma-2-9b", 9.24e9),
    ("gemma-2-27b", 27.2e9),
    ("falcon-7b", 7.0e9),
    ("yarn-llama-2-7b", 6.74e9),
    ("mixtral-8x7b", 46.7e9),
    ("mixtral-8x22b", 140.6e9),
    ("qwen3-30b-a3b", 30.5e9),
];

macro_rules! presets {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../models/", $name, ".json")))),*]
    };
}

/// `(name, config.json text)` of every preset, in the order `kvplan models` lists them.
pub const PRESETS: &[(&str, &str)] = presets![
    "opt-125m",
    "opt-1.3b",
    "opt-6.7b",
    "opt-13b",
    "opt-30b",
    "llama-2-7b",
    "llama-2-13b",
    "llama-3-8b",
    "llama-3.1-8b",
    "llama-3-70b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "llama-3.2-1b",
    "llama-3.2-3b",
    "mistral-7b",
    "mistral-nemo-12b",
    "qwen2-7b",
    "qwen2.5-7b",
    "qwen2.5-14b",
    "qwen2.5-32b",
    "qwen2.5-72b",
    "qwen3-8b",
    "qwen3-14b",
    "qwen3-32b",
    "yi-34b",
    "gemma-2-9b",
    "gemma-2-27b",
    "falcon-7b",
    "yarn-llama-2-7b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "qwen3-30b-a3b",
];

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
    /// Names of the embedded presets.
    pub fn preset_names() -> Vec<String> {
        PRESETS.iter().map(|(n, _)| n.to_string()).collect()
    }

    /// Every embedded preset, in [`preset_names`](Self::preset_names) order.
    pub fn presets() -> Result<Vec<Self>> {
        PRESETS.iter().map(|(n, _)| Self::preset(n)).collect()
    }

    /// The Hugging Face model id a preset's `config.json` was taken from (the repository in its
    /// `_source` URL, e.g. `meta-llama/Llama-2-7b-hf` for `llama-2-7b`).
    pub fn preset_hf_id(name: &str) -> Option<&'static str> {
        PRESETS
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, text)| hf_id_of(text))
    }

    /// The preset whose name or Hugging Face id is `name` (both case-insensitive).
    fn find_preset(name: &str) -> Option<(&'static str, &'static str)> {
        let name = name.trim().trim_end_matches('/');
        PRESETS
            .iter()
            .find(|(n, text)| {
                n.eq_ignore_ascii_case(name)
                    || hf_id_of(text).is_some_and(|id| id.eq_ignore_ascii_case(name))
            })
            .copied()
    }

    fn unknown(name: &str) -> Error {
        let known = Self::preset_names();
        let mut candidates = known.clone();
        candidates.extend(
            PRESETS
                .iter()
                .filter_map(|(_, t)| hf_id_of(t).map(String::from)),
        );
        let mut close = crate::error::close_matches(name, &candidates);
        // An HF id suggestion stands for its preset: name the preset once.
        for c in &mut close {
            if let Some((n, _)) = Self::find_preset(c) {
                *c = n.to_string();
            }
        }
        let mut seen = Vec::new();
        close.retain(|c| {
            let new = !seen.contains(c);
            seen.push(c.clone());
            new
        });
        Error::UnknownModel {
            name: name.to_string(),
            close,
            known,
        }
    }

    /// A preset by name (`opt-6.7b`, `llama-3-8b`, ...) or by the Hugging Face id of the model
    /// it was taken from (`meta-llama/Llama-2-7b-hf`, `Qwen/Qwen3-8B`), case-insensitive.
    pub fn preset(name: &str) -> Result<Self> {
        let (n, text) = Self::find_preset(name).ok_or_else(|| Self::unknown(name))?;
        Self::from_hf_config_str(text, n, &format!("preset {n}"))
    }

    /// A preset name or Hugging Face id of a preset (these first), or else a path to a Hugging
    /// Face `config.json` or to a model directory holding one (`DIR/config.json`, as
    /// `save_pretrained` and the Hub lay it out), or else an id of a variant of a preset's model
    /// (`meta-llama/Llama-2-13b-chat-hf`, see [`ModelSpec::preset_for_hf_id`]).
    pub fn resolve(name_or_path: &str) -> Result<Self> {
        if Self::find_preset(name_or_path).is_some() {
            return Self::preset(name_or_path);
        }
        let looks_like_path = name_or_path.contains('/')
            || name_or_path.contains('\\')
            || name_or_path.ends_with(".json");
        let path = Path::new(name_or_path);
        if path.is_file() {
            return Self::from_hf_config_file(path);
        }
        if path.is_dir() {
            return Self::from_model_dir(path);
        }
        if let Some(e) = crate::error::not_a_file(
            path,
            "model",
            "a model (a config.json or a folder holding one)",
        ) {
            return Err(e);
        }
        // A Hugging Face model id (`meta-llama/Llama-2-13b-chat-hf`) of a variant of a preset.
        if let Some(preset) = Self::preset_for_hf_id(name_or_path) {
            return Self::preset(preset);
        }
        let hf_id = name_or_path.matches('/').count() == 1
            && !name_or_path.starts_with(['.', '/'])
            && !name_or_path.ends_with(".json");
        if looks_like_path && !hf_id {
            return Err(Error::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            });
        }
        Err(Self::unknown(name_or_path))
    }

    /// The preset of a Hugging Face model id, if one matches: a preset's own id
    /// ([`ModelSpec::preset_hf_id`], case-insensitive), or else the id's last part, lower case,
    /// without a `meta-` prefix and without `-hf`, `-instruct`, `-chat`, `-it`, `-base` or a
    /// version suffix (`-v0.1`), equals a preset's name (`meta-llama/Llama-2-7b-hf` →
    /// `llama-2-7b`, `meta-llama/Meta-Llama-3.1-8B-Instruct` → `llama-3.1-8b`,
    /// `mistralai/Mistral-7B-v0.1` → `mistral-7b`).
    pub fn preset_for_hf_id(id: &str) -> Option<&'static str> {
        if id.contains('/')
            && let Some((n, _)) = Self::find_preset(id)
        {
            return Some(n);
        }
        let last = id.trim().rsplit('/').next()?.to_ascii_lowercase();
        let mut name = last.strip_prefix("meta-").unwrap_or(&last).to_string();
        loop {
            let before = name.clone();
            for suffix in ["-hf", "-instruct", "-chat", "-it", "-base"] {
                if let Some(s) = name.strip_suffix(suffix) {
                    name = s.to_string();
                }
            }
            if let Some(i) = name.rfind("-v")
                && name[i + 2..]
                    .chars()
                    .all(|c| c.is_ascii_digit() || c == '.')
                && name.len() > i + 2
            {
                name.truncate(i);
            }
            if name == before {
                break;
            }
        }
        PRESETS
            .iter()
            .map(|(n, _)| *n)
            .find(|n| n.eq_ignore_ascii_case(&name))
    }

    /// Reads a Hugging Face `config.json` file.
    pub fn from_hf_config_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let origin = path.display().to_string();
        Self::from_hf_config_str(&text, &origin, &origin)
    }

    /// Reads `dir/config.json` (a Hugging Face model directory). The model is named after the
    /// directory.
    pub fn from_model_dir(dir: &Path) -> Result<Self> {
        let config = dir.join("config.json");
        if !config.is_file() {
            return Err(Error::Io {
                path: config,
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!(
                        "{} is a directory without a config.json; pass a Hugging Face model directory or the config.json itself",
                        dir.display()
                    ),
                ),
            });
        }
        let text = std::fs::read_to_string(&config).map_err(|source| Error::Io {
            path: config.clone(),
            source,
        })?;
        let name = dir.display().to_string();
        Self::from_hf_config_str(
            &text,
            name.trim_end_matches(['/', '\\']),
            &config.display().to_string(),
        )
    }

    /// Parses the text of a Hugging Face `config.json`. `name` becomes [`ModelSpec::name`];
    /// `origin` prefixes error messages.
    pub fn from_hf_config_str(text: &str, name: &str, origin: &str) -> Result<Self> {
        let value: Value = serde_json::from_str(text).map_err(|e| Error::Parse {
            origin: origin.to_string(),
            message: one_line(&e.to_string()),
        })?;
        let Value::Object(map) = value else {
            return Err(Error::Parse {
                origin: origin.to_string(),
                message: "expected a JSON object at the top level".into(),
            });
        };
        let cfg = Cfg { map: &map, origin };
        let model_type = cfg.string("model_type", "the architecture, e.g. \"llama\"")?;
        if matches!(model_type.as_str(), "deepseek_v2" | "deepseek_v3") {
            return deepseek(&cfg, &model_type);
        }
        // Llama 4's checkpoints nest the text model's fields in `text_config`.
        let text_origin;
        let text_cfg = match (model_type.as_str(), map.get("text_config")) {
            ("llama4", Some(Value::Object(text))) => {
                text_origin = format!("{origin} (text_config)");
                Some(Cfg {
                    map: text,
                    origin: &text_origin,
                })
            }
            _ => None,
        };
        let family =
            Family::from_model_type(&model_type).ok_or_else(|| Error::UnsupportedArchitecture {
                origin: origin.to_string(),
                model_type: model_type.clone(),
                supported: Family::MODEL_TYPES[..Family::LISTED]
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
            })?;
        let spec = match family {
            Family::Opt => opt(&cfg, name)?,
            Family::Llama | Family::Mistral | Family::Qwen2 | Family::Qwen3 | Family::Gemma2 => {
                llama_like(&cfg, name, family)?
            }
            Family::Falcon => falcon(&cfg, name)?,
            Family::Mixtral | Family::Qwen2Moe | Family::Qwen3Moe | Family::Llama4 => {
                let c = text_cfg.as_ref().unwrap_or(&cfg);
                let mut spec = llama_like(c, name, family)?;
                if text_cfg.is_some() && c.get(&["torch_dtype", "dtype"]).is_none() {
                    // A multimodal checkpoint may give its dtype at the top level only.
                    spec.dtype = cfg.dtype(family)?;
                }
                let (moe, dense_ffn) = moe_of(c, family, spec.num_layers)?;
                if let Some(ffn) = dense_ffn {
                    spec.ffn_dim = ffn;
                }
                spec.moe = Some(moe);
                spec
            }
        };
        let origin = text_cfg.as_ref().map_or(origin, |c| c.origin);
        spec.validate(origin)?;
        Ok(spec)
    }

    fn validate(&self, origin: &str) -> Result<()> {
        let checks = [
            ("num_hidden_layers", self.num_layers),
            ("hidden_size", self.hidden),
            ("num_attention_heads", self.num_heads),
            ("num_key_value_heads", self.num_kv_heads),
            ("head_dim", self.head_dim),
            ("ffn size", self.ffn_dim),
            ("vocab_size", self.vocab),
        ];
        for (field, v) in checks {
            if v == 0 {
                return Err(Error::invalid(
                    format!("{origin}: {field}"),
                    v,
                    "must be at least 1",
                ));
            }
        }
        // The context the model was trained for: at least a prompt token and an output token
        // (a zero here would be blamed on `--max-model-len`, which defaults to it).
        if self.max_position < 2 {
            return Err(Error::invalid(
                format!("{origin}: max_position_embeddings"),
                self.max_position,
                "must be at least 2 (the longest sequence the model takes: a prompt token and an \
                 output token at the least)",
            ));
        }
        for (field, v) in [
            ("num_hidden_layers", self.num_layers),
            ("num_attention_heads", self.num_heads),
            ("head_dim", self.head_dim),
        ] {
            if v >= u32::from(u16::MAX) {
                return Err(Error::invalid(
                    format!("{origin}: {field}"),
                    v,
                    "must be below 65535",
                ));
            }
        }
        if !self.num_heads.is_multiple_of(self.num_kv_heads) {
            return Err(Error::invalid(
                format!("{origin}: num_key_value_heads"),
                self.num_kv_heads,
                format!("must divide num_attention_heads ({})", self.num_heads),
            ));
        }
        if let Some(moe) = &self.moe {
            let (experts_field, width_field) = match self.family {
                Family::Mixtral | Family::Llama4 => ("num_local_experts", "intermediate_size"),
                _ => ("num_experts", "moe_intermediate_size"),
            };
            if moe.experts == 0 {
                return Err(Error::invalid(
                    format!("{origin}: {experts_field}"),
                    0,
                    "must be at least 1",
                ));
            }
            if moe.experts > u32::from(u16::MAX) {
                return Err(Error::invalid(
                    format!("{origin}: {experts_field}"),
                    moe.experts,
                    "must be below 65536",
                ));
            }
            if moe.top_k == 0 || moe.top_k > moe.experts {
                return Err(Error::invalid(
                    format!("{origin}: num_experts_per_tok"),
                    moe.top_k,
                    format!("must be from 1 to {experts_field} ({})", moe.experts),
                ));
            }
            if moe.expert_ffn == 0 {
                return Err(Error::invalid(
                    format!("{origin}: {width_field}"),
                    0,
                    "must be at least 1 (the width of one expert)",
                ));
            }
            if let Some(&l) = moe.dense_layers.iter().find(|&&l| l >= self.num_layers) {
                return Err(Error::invalid(
                    format!("{origin}: dense layers"),
                    l,
                    format!("must be layers of the model (0 to {})", self.num_layers - 1),
                ));
            }
        }
        Ok(())
    }

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

    /// The per-rank shapes of Megatron-style tensor parallelism over `tp` GPUs, as vLLM shards
    /// a model: query heads, the FFN width and the vocabulary are split `tp` ways; KV heads are
    /// split when `tp` divides them and replicated (one per rank) when they divide `tp`. The
    /// hidden size (the residual stream every rank keeps whole) does not change; each layer then
    /// all-reduces its attention and FFN outputs ([`crate::layers::forward_ops`]).
    ///
    /// A mixture of experts is split as vLLM splits it without expert parallelism: every rank
    /// holds every expert, each expert's (and the shared experts') width split `tp` ways
    /// ([`ModelSpec::sharded_with`] for expert parallelism).
    pub fn sharded(&self, tp: u32) -> Result<Self> {
        self.sharded_with(tp, false)
    }

    /// [`ModelSpec::sharded`], with the routed experts divided among the `tp` ranks whole when
    /// `expert_parallel` is set (vLLM's `--enable-expert-parallel`: `experts / tp` experts per
    /// rank at full width; the shared experts and the rest of the layer stay tensor-parallel).
    /// A dense model ignores `expert_parallel`, as vLLM does.
    pub fn sharded_with(&self, tp: u32, expert_parallel: bool) -> Result<Self> {
        if tp == 0 || tp > 1024 {
            return Err(Error::invalid(
                "tensor_parallel",
                tp,
                "must be from 1 to 1024 GPUs",
            ));
        }
        if self.tensor_parallel != 1 {
            return Err(Error::invalid(
                "tensor_parallel",
                tp,
                format!(
                    "{} is already sharded {} ways",
                    self.name, self.tensor_parallel
                ),
            ));
        }
        if tp == 1 {
            return Ok(self.clone());
        }
        let divides = |what: &str, n: u32| {
            if n.is_multiple_of(tp) {
                Ok(n / tp)
            } else {
                Err(Error::invalid(
                    "tensor_parallel",
                    tp,
                    format!(
                        "{} has {n} {what}, which {tp} GPUs cannot share evenly; use a divisor of {n}",
                        self.name
                    ),
                ))
            }
        };
        let heads = divides("query heads", self.num_heads)?;
        // An all-MoE model never runs its dense width: it need not divide.
        let ffn = if self.moe.is_some() && self.moe_layers() == self.num_layers {
            self.ffn_dim.div_ceil(tp)
        } else {
            divides("FFN columns", self.ffn_dim)?
        };
        let moe = match &self.moe {
            None => None,
            Some(m) => Some(Moe {
                expert_ffn: if expert_parallel {
                    m.expert_ffn
                } else {
                    divides("FFN columns per expert", m.expert_ffn)?
                },
                shared_ffn: if m.shared_ffn == 0 {
                    0
                } else {
                    divides("shared-expert FFN columns", m.shared_ffn)?
                },
                expert_parallel: if expert_parallel {
                    divides("routed experts", m.experts)?;
                    tp
                } else {
                    1
                },
                ..m.clone()
            }),
        };
        let kv_heads = if self.num_kv_heads.is_multiple_of(tp) {
            self.num_kv_heads / tp
        } else if tp.is_multiple_of(self.num_kv_heads) {
            1
        } else {
            return Err(Error::invalid(
                "tensor_parallel",
                tp,
                format!(
                    "{} has {} KV heads: {tp} GPUs must divide them or be a multiple of them",
                    self.name, self.num_kv_heads
                ),
            ));
        };
        Ok(ModelSpec {
            num_heads: heads,
            num_kv_heads: kv_heads,
            ffn_dim: ffn,
            vocab: self.vocab.div_ceil(tp),
            tensor_parallel: tp,
            moe,
            ..self.clone()
        })
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

    /// Returns a copy with the KV cache in `kv` (vLLM's `--kv-cache-dtype`).
    pub fn with_kv_cache_dtype(mut self, kv: KvCacheDtype) -> Self {
        self.kv_cache_dtype = kv;
        self
    }

    /// Returns a copy with its linear weights quantised as `q` (vLLM's `--quantization`).
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

    /// Bytes of `params` parameters of which `linear` are quantisable linear weights (the
    /// rest, biases and norms, stay in the serving dtype).
    fn bytes_of(&self, params: u64, linear: u64) -> u64 {
        match self.quantization {
            None => params * self.dtype_bytes(),
            Some(q) => q.bytes(linear) + (params - linear) * self.dtype_bytes(),
        }
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

    /// Parameters of one decoder layer of the model's main kind ([`ModelSpec::main_ffn`]),
    /// split as [`LayerWeights`] (in elements).
    fn layer_param_parts(&self) -> (u64, u64, u64) {
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

struct Cfg<'a> {
    map: &'a Map<String, Value>,
    origin: &'a str,
}

impl Cfg<'_> {
    fn get(&self, keys: &[&str]) -> Option<&Value> {
        keys.iter()
            .find_map(|k| self.map.get(*k).filter(|v| !v.is_null()))
    }

    fn missing(&self, field: &str, hint: &str) -> Error {
        Error::MissingField {
            origin: self.origin.to_string(),
            field: field.to_string(),
            hint: Some(hint.to_string()),
        }
    }

    fn string(&self, field: &str, hint: &str) -> Result<String> {
        match self.get(&[field]) {
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(self.wrong_type(field, "a string", other)),
            None => Err(self.missing(field, hint)),
        }
    }

    fn wrong_type(&self, field: &str, expected: &str, got: &Value) -> Error {
        Error::Parse {
            origin: self.origin.to_string(),
            message: format!("field `{field}` must be {expected}, got {got}"),
        }
    }

    fn opt_u32(&self, keys: &[&str]) -> Result<Option<u32>> {
        self.opt_u32_in(keys, 0..=u32::MAX, "")
    }

    /// The first of `keys` present, a whole number in `range`; otherwise an error naming the
    /// file, the field, the value and the range (`what` the field holds, for the message).
    fn opt_u32_in(
        &self,
        keys: &[&str],
        range: std::ops::RangeInclusive<u32>,
        what: &str,
    ) -> Result<Option<u32>> {
        let Some((key, v)) = keys
            .iter()
            .find_map(|k| self.map.get(*k).filter(|v| !v.is_null()).map(|v| (*k, v)))
        else {
            return Ok(None);
        };
        match v.as_u64().and_then(|n| u32::try_from(n).ok()) {
            Some(n) if range.contains(&n) => Ok(Some(n)),
            _ => {
                let shown = match v {
                    Value::Number(n) => n
                        .as_f64()
                        .filter(|_| !n.is_u64() && !n.is_i64())
                        .map_or_else(|| n.to_string(), crate::limits::show),
                    other => other.to_string(),
                };
                let what = if what.is_empty() {
                    String::new()
                } else {
                    format!(": {what}")
                };
                Err(Error::invalid(
                    format!("{}: {key}", self.origin),
                    shown,
                    format!(
                        "must be a whole number from {} to {}{what}",
                        range.start(),
                        range.end()
                    ),
                ))
            }
        }
    }

    /// A list of layer indices (`mlp_only_layers`, `moe_layers`), `None` when absent.
    fn u32_list(&self, key: &str) -> Result<Option<Vec<u32>>> {
        let Some(v) = self.get(&[key]) else {
            return Ok(None);
        };
        let bad = || self.wrong_type(key, "a list of non-negative integers", v);
        let Value::Array(items) = v else {
            return Err(bad());
        };
        items
            .iter()
            .map(|i| {
                i.as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(bad)
            })
            .collect::<Result<Vec<u32>>>()
            .map(Some)
    }

    fn u32(&self, keys: &[&str], hint: &str) -> Result<u32> {
        self.opt_u32(keys)?
            .ok_or_else(|| self.missing(keys[0], hint))
    }

    /// `hidden / heads` for a config without `head_dim`: Hugging Face derives the head size this
    /// way and rejects a width the heads do not divide, so a remainder is an error (a config
    /// whose heads are not `hidden / heads` wide must say `head_dim`). Zero heads are left to
    /// [`ModelSpec::validate`], which names the field.
    fn implied_head_dim(
        &self,
        hidden: u32,
        heads: u32,
        hidden_field: &str,
        heads_field: &str,
    ) -> Result<u32> {
        match hidden.checked_div(heads) {
            None => Ok(0),
            Some(d) if d * heads == hidden => Ok(d),
            Some(_) => Err(Error::invalid(
                format!("{}: {hidden_field}", self.origin),
                hidden,
                format!(
                    "must be a multiple of {heads_field} ({heads}) when the config has no \
                     head_dim; add \"head_dim\" if the heads are not {hidden_field} / \
                     {heads_field} wide"
                ),
            )),
        }
    }

    fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.get(&[key]) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(other) => Err(self.wrong_type(key, "true or false", other)),
        }
    }

    /// Serving dtype from `torch_dtype`, following vLLM's `--dtype auto`: fp16 and bf16 are
    /// kept; fp32 checkpoints are served in half precision (bf16 for Gemma 2, whose activations
    /// overflow fp16; fp16 otherwise). Absent → fp16.
    fn dtype(&self, family: Family) -> Result<DType> {
        let Some(v) = self.get(&["torch_dtype", "dtype"]) else {
            return Ok(DType::Fp16);
        };
        let s = v
            .as_str()
            .ok_or_else(|| self.wrong_type("torch_dtype", "a string", v))?;
        let d = DType::parse(s).ok_or_else(|| {
            Error::invalid(
                format!("{}: torch_dtype", self.origin),
                s,
                "expected float16, bfloat16 or float32",
            )
        })?;
        Ok(match (d, family) {
            (DType::Fp32, Family::Gemma2) => DType::Bf16,
            (DType::Fp32, _) => DType::Fp16,
            (d, _) => d,
        })
    }
}

/// The `owner/name` repository of a preset's `_source` URL (`https://huggingface.co/OWNER/NAME/...`).
fn hf_id_of(text: &'static str) -> Option<&'static str> {
    let rest = &text[text.find("\"_source\"")?..];
    let rest = &rest[rest.find("huggingface.co/")? + "huggingface.co/".len()..];
    let end = rest.find("/blob/")?;
    let id = &rest[..end];
    (id.matches('/').count() == 1).then_some(id)
}

fn opt(c: &Cfg, name: &str) -> Result<ModelSpec> {
    let hidden = c.u32(&["hidden_size"], "the model width, e.g. 4096")?;
    let heads = c.u32(&["num_attention_heads"], "query heads")?;
    let head_dim = c.implied_head_dim(hidden, heads, "hidden_size", "num_attention_heads")?;
    let embed_proj = c.opt_u32(&["word_embed_proj_dim"])?.unwrap_or(hidden);
    let max_pos = c.u32(&["max_position_embeddings"], "e.g. 2048")?;
    let bias = c.bool_or("enable_bias", true)?;
    Ok(ModelSpec {
        name: name.to_string(),
        family: Family::Opt,
        num_layers: c.u32(&["num_hidden_layers"], "decoder layers")?,
        hidden,
        num_heads: heads,
        num_kv_heads: heads,
        head_dim,
        ffn_dim: c.u32(&["ffn_dim"], "the FFN inner width, e.g. 16384")?,
        vocab: c.u32(&["vocab_size"], "e.g. 50272")?,
        max_position: max_pos,
        tied_embeddings: c.bool_or("tie_word_embeddings", true)?,
        dtype: c.dtype(Family::Opt)?,
        kv_cache_dtype: KvCacheDtype::Auto,
        quantization: None,
        gated_ffn: false,
        qkv_bias: bias,
        proj_bias: bias,
        layer_norm_bias: true,
        norms_per_layer: 2,
        // OPT's learned position table has two extra rows (its padding offset).
        learned_positions: max_pos + 2,
        embed_proj_dim: if embed_proj == hidden { 0 } else { embed_proj },
        tensor_parallel: 1,
        moe: None,
    })
}

fn llama_like(c: &Cfg, name: &str, family: Family) -> Result<ModelSpec> {
    let hidden = c.u32(&["hidden_size"], "the model width, e.g. 4096")?;
    let heads = c.u32(&["num_attention_heads"], "query heads")?;
    let kv_heads = c.opt_u32(&["num_key_value_heads"])?.unwrap_or(heads);
    let head_dim = match c.opt_u32(&["head_dim"])? {
        Some(d) => d,
        None if family == Family::Gemma2 => {
            return Err(c.missing("head_dim", "Gemma 2 sets it explicitly, e.g. 256"));
        }
        None => c.implied_head_dim(hidden, heads, "hidden_size", "num_attention_heads")?,
    };
    let (qkv_bias, proj_bias) = match family {
        Family::Qwen2 | Family::Qwen2Moe => (true, false),
        Family::Llama | Family::Qwen3 => (
            c.bool_or("attention_bias", false)?,
            c.bool_or("mlp_bias", false)?,
        ),
        _ => (false, false),
    };
    Ok(ModelSpec {
        name: name.to_string(),
        family,
        num_layers: c.u32(&["num_hidden_layers"], "decoder layers")?,
        hidden,
        num_heads: heads,
        num_kv_heads: kv_heads,
        head_dim,
        ffn_dim: c.u32(&["intermediate_size"], "the FFN inner width, e.g. 14336")?,
        vocab: c.u32(&["vocab_size"], "e.g. 128256")?,
        max_position: c.u32(&["max_position_embeddings"], "e.g. 8192")?,
        tied_embeddings: c.bool_or("tie_word_embeddings", family == Family::Gemma2)?,
        dtype: c.dtype(family)?,
        kv_cache_dtype: KvCacheDtype::Auto,
        quantization: None,
        gated_ffn: true,
        qkv_bias,
        proj_bias,
        layer_norm_bias: false,
        norms_per_layer: if family == Family::Gemma2 { 4 } else { 2 },
        learned_positions: 0,
        embed_proj_dim: 0,
        tensor_parallel: 1,
        moe: None,
    })
}

/// The mixture of experts of a `family` config with `layers` layers, and the dense layers' FFN
/// width where it is not `intermediate_size` (Llama 4's `intermediate_size_mlp`). Every field a
/// family needs is required: a missing one is an error naming it.
fn moe_of(c: &Cfg, family: Family, layers: u32) -> Result<(Moe, Option<u32>)> {
    let need = |field: &str, what: &str| {
        // The routed experts: 1 to 65535 ([`ModelSpec::validate`]); other counts and widths
        // at least 1.
        let range = if matches!(field, "num_local_experts" | "num_experts") {
            1..=u32::from(u16::MAX)
        } else {
            1..=u32::MAX
        };
        c.opt_u32_in(&[field], range, what)?
            .ok_or_else(|| Error::MissingField {
                origin: c.origin.to_string(),
                field: field.to_string(),
                hint: Some(format!("required for a {} model: {what}", family.as_str())),
            })
    };
    let moe = |experts, top_k, expert_ffn, shared_ffn, is_moe: &dyn Fn(u32) -> bool| Moe {
        experts,
        top_k,
        expert_ffn,
        shared_ffn,
        dense_layers: (0..layers).filter(|&l| !is_moe(l)).collect(),
        expert_parallel: 1,
    };
    Ok(match family {
        Family::Mixtral => {
            let experts = need("num_local_experts", "the routed experts per layer")?;
            let top_k = need("num_experts_per_tok", "the experts each token is routed to")?;
            let width = need("intermediate_size", "the FFN width of one expert")?;
            (moe(experts, top_k, width, 0, &|_| true), None)
        }
        Family::Qwen2Moe | Family::Qwen3Moe => {
            let experts = need("num_experts", "the routed experts per layer")?;
            let top_k = need("num_experts_per_tok", "the experts each token is routed to")?;
            let width = need("moe_intermediate_size", "the FFN width of one expert")?;
            let shared = if family == Family::Qwen2Moe {
                need(
                    "shared_expert_intermediate_size",
                    "the FFN width of the shared expert",
                )?
            } else {
                0
            };
            let step = c.opt_u32(&["decoder_sparse_step"])?.unwrap_or(1);
            if step == 0 {
                return Err(Error::invalid(
                    format!("{}: decoder_sparse_step", c.origin),
                    0,
                    "must be at least 1 (every step-th layer is MoE)",
                ));
            }
            let mlp_only = c.u32_list("mlp_only_layers")?.unwrap_or_default();
            // Hugging Face's rule: `(i not in mlp_only_layers) and num_experts > 0 and (i + 1) %
            // decoder_sparse_step == 0`.
            let is_moe = |l: u32| !mlp_only.contains(&l) && (l + 1).is_multiple_of(step);
            (moe(experts, top_k, width, shared, &is_moe), None)
        }
        Family::Llama4 => {
            let experts = need("num_local_experts", "the routed experts per layer")?;
            let top_k = need("num_experts_per_tok", "the experts each token is routed to")?;
            let width = need("intermediate_size", "the FFN width of one expert")?;
            let listed = c.u32_list("moe_layers")?;
            let step = c.opt_u32(&["interleave_moe_layer_step"])?.unwrap_or(1);
            if step == 0 && listed.is_none() {
                return Err(Error::invalid(
                    format!("{}: interleave_moe_layer_step", c.origin),
                    0,
                    "must be at least 1 (every step-th layer is MoE)",
                ));
            }
            // Hugging Face's rule: `moe_layers`, else every `interleave_moe_layer_step`-th layer
            // from layer `step - 1`.
            let is_moe = |l: u32| match &listed {
                Some(v) => v.contains(&l),
                None => (l + 1).is_multiple_of(step),
            };
            // One shared expert of the routed experts' width.
            let m = moe(experts, top_k, width, width, &is_moe);
            let dense = if m.dense_layers.is_empty() {
                c.opt_u32(&["intermediate_size_mlp"])?
            } else {
                Some(need(
                    "intermediate_size_mlp",
                    "the FFN width of the dense layers",
                )?)
            };
            (m, dense)
        }
        _ => unreachable!("moe_of is called for mixture-of-experts families"),
    })
}

/// DeepSeek-V2 / V3 (`deepseek_v2`, `deepseek_v3`): refused for their attention before any
/// other field is asked for. Every one of them uses multi-head latent attention (MLA,
/// `kv_lora_rank`), whose compressed KV cache and absorbed projections kvplan does not model.
fn deepseek(c: &Cfg, model_type: &str) -> Result<ModelSpec> {
    let rank = c
        .get(&["kv_lora_rank"])
        .map_or_else(|| "absent".to_string(), |r| r.to_string());
    Err(Error::invalid(
        format!("{}: kv_lora_rank", c.origin),
        rank,
        format!(
            "unsupported attention: {model_type} uses multi-head latent attention (MLA: a \
             compressed KV cache of kv_lora_rank + qk_rope_head_dim per token), which kvplan does \
             not model; it models multi-head, grouped-query and multi-query attention \
             (num_key_value_heads)"
        ),
    ))
}

fn falcon(c: &Cfg, name: &str) -> Result<ModelSpec> {
    let hidden = c.u32(&["hidden_size", "n_embd"], "the model width, e.g. 4544")?;
    let heads = c.u32(&["num_attention_heads", "n_head"], "query heads")?;
    let new_arch = c.bool_or("new_decoder_architecture", false)?;
    let kv_heads = if new_arch {
        c.u32(
            &["num_kv_heads", "n_head_kv"],
            "KV heads of the new decoder architecture",
        )?
    } else if c.bool_or("multi_query", true)? {
        1
    } else {
        heads
    };
    let head_dim = match c.opt_u32(&["head_dim"])? {
        Some(d) => d,
        None => c.implied_head_dim(hidden, heads, "hidden_size", "num_attention_heads")?,
    };
    let parallel = c.bool_or("parallel_attn", true)?;
    let bias = c.bool_or("bias", false)?;
    let ffn = c.opt_u32(&["ffn_hidden_size"])?.unwrap_or(4 * hidden);
    let norms = if new_arch || !parallel { 2 } else { 1 };
    Ok(ModelSpec {
        name: name.to_string(),
        family: Family::Falcon,
        num_layers: c.u32(&["num_hidden_layers", "n_layer"], "decoder layers")?,
        hidden,
        num_heads: heads,
        num_kv_heads: kv_heads,
        head_dim,
        ffn_dim: ffn,
        vocab: c.u32(&["vocab_size"], "e.g. 65024")?,
        max_position: c.opt_u32(&["max_position_embeddings"])?.unwrap_or(2048),
        tied_embeddings: c.bool_or("tie_word_embeddings", true)?,
        dtype: c.dtype(Family::Falcon)?,
        kv_cache_dtype: KvCacheDtype::Auto,
        quantization: None,
        gated_ffn: false,
        qkv_bias: bias,
        proj_bias: bias,
        layer_norm_bias: true,
        norms_per_layer: norms,
        learned_positions: 0,
        embed_proj_dim: 0,
        tensor_parallel: 1,
        moe: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hugging_face_ids_find_their_presets() {
        for (id, preset) in [
            ("meta-llama/Llama-2-7b-hf", Some("llama-2-7b")),
            ("meta-llama/Llama-2-13b-chat-hf", Some("llama-2-13b")),
            (
                "meta-llama/Meta-Llama-3.1-8B-Instruct",
                Some("llama-3.1-8b"),
            ),
            ("mistralai/Mistral-7B-v0.1", Some("mistral-7b")),
            ("Qwen/Qwen2-7B", Some("qwen2-7b")),
            ("facebook/opt-6.7b", Some("opt-6.7b")),
            ("mistralai/Mixtral-8x7B-v0.1", Some("mixtral-8x7b")),
            ("mistralai/Mixtral-8x7B-Instruct-v0.1", Some("mixtral-8x7b")),
            ("Qwen/Qwen3-30B-A3B", Some("qwen3-30b-a3b")),
            ("deepseek-ai/DeepSeek-V3", None),
        ] {
            assert_eq!(ModelSpec::preset_for_hf_id(id), preset, "{id}");
        }
        let m = ModelSpec::resolve("meta-llama/Llama-2-7b-hf").unwrap();
        assert_eq!(m.name, "llama-2-7b");
    }

    /// Every preset answers to the Hugging Face id its config came from, in any case, through
    /// `preset` and `resolve` alike, and even when a directory of that name could exist.
    #[test]
    fn every_preset_answers_to_its_hugging_face_id() {
        for (name, _) in PRESETS {
            let id = ModelSpec::preset_hf_id(name).unwrap_or_else(|| panic!("{name}: no HF id"));
            for asked in [
                id.to_string(),
                id.to_ascii_lowercase(),
                id.to_ascii_uppercase(),
            ] {
                assert_eq!(ModelSpec::preset(&asked).unwrap().name, *name, "{asked}");
                assert_eq!(ModelSpec::resolve(&asked).unwrap().name, *name, "{asked}");
                assert_eq!(ModelSpec::preset_for_hf_id(&asked), Some(*name), "{asked}");
            }
        }
        for (id, preset) in [
            ("Qwen/Qwen3-8B", "qwen3-8b"),
            ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
            ("mistralai/Mistral-Nemo-Base-2407", "mistral-nemo-12b"),
            ("google/gemma-2-27b-it", "gemma-2-27b"),
            ("meta-llama/Llama-3.2-1B-Instruct", "llama-3.2-1b"),
            ("01-ai/Yi-34B", "yi-34b"),
        ] {
            assert_eq!(ModelSpec::resolve(id).unwrap().name, preset, "{id}");
        }
    }

    #[test]
    fn a_misspelt_model_suggests_the_preset() {
        for (asked, want) in [
            ("lama-3-8b", "llama-3-8b"),
            ("qwen3-7b", "qwen3-8b"),
            ("gemma2-27b", "gemma-2-27b"),
            ("Qwen/Qwen3-7B", "qwen3-8b"),
            ("mistral-nemo", "mistral-nemo-12b"),
        ] {
            let e = ModelSpec::resolve(asked).unwrap_err();
            let Error::UnknownModel { close, .. } = &e else {
                panic!("{asked}: {e}")
            };
            assert!(close.iter().any(|c| c == want), "{asked}: {close:?}");
            let msg = e.to_string();
            let (head, list) = msg.split_once("; known models:").unwrap();
            assert!(
                head.contains("did you mean") && head.contains(want),
                "{msg}"
            );
            assert!(list.contains("opt-125m"), "{msg}");
        }
    }

    #[test]
    fn qwen3_reads_as_llama_with_explicit_head_dim() {
        let m = ModelSpec::preset("qwen3-32b").unwrap();
        assert_eq!(m.family, Family::Qwen3);
        assert_eq!((m.head_dim, m.q_dim(), m.hidden), (128, 8192, 5120));
        assert!(!m.qkv_bias && !m.tied_embeddings);
        let q = ModelSpec::preset("qwen2.5-7b").unwrap();
        assert!(q.qkv_bias && q.family == Family::Qwen2);
        let n = ModelSpec::preset("mistral-nemo-12b").unwrap();
        assert_eq!((n.head_dim, n.q_dim(), n.hidden), (128, 4096, 5120));
        let g = ModelSpec::preset("gemma-2-27b").unwrap();
        assert_eq!(
            (g.head_dim, g.num_kv_heads, g.dtype),
            (128, 16, DType::Bf16)
        );
    }

    /// One test per preset: the shape arithmetic lands within 2% of the published count.
    macro_rules! param_tests {
        ($($fn:ident => $name:literal),* $(,)?) => {$(
            #[test]
            fn $fn() {
                let spec = ModelSpec::preset($name).unwrap();
                let published = PUBLISHED_PARAMS.iter().find(|(n, _)| *n == $name).unwrap().1;
                let got = spec.params() as f64;
                let rel = (got - published).abs() / published;
                assert!(rel <= 0.02, "{}: {got:.4e} params vs published {published:.4e} ({:.2}% off)", $name, rel * 100.0);
            }
        )*};
    }

    param_tests! {
        params_opt_125m => "opt-125m",
        params_opt_1_3b => "opt-1.3b",
        params_opt_6_7b => "opt-6.7b",
        params_opt_13b => "opt-13b",
        params_opt_30b => "opt-30b",
        params_llama_2_7b => "llama-2-7b",
        params_llama_2_13b => "llama-2-13b",
        params_llama_3_8b => "llama-3-8b",
        params_llama_3_1_8b => "llama-3.1-8b",
        params_llama_3_70b => "llama-3-70b",
        params_llama_3_1_70b => "llama-3.1-70b",
        params_llama_3_1_405b => "llama-3.1-405b",
        params_llama_3_2_1b => "llama-3.2-1b",
        params_llama_3_2_3b => "llama-3.2-3b",
        params_mistral_7b => "mistral-7b",
        params_mistral_nemo_12b => "mistral-nemo-12b",
        params_qwen2_7b => "qwen2-7b",
        params_qwen2_5_7b => "qwen2.5-7b",
        params_qwen2_5_14b => "qwen2.5-14b",
        params_qwen2_5_32b => "qwen2.5-32b",
        params_qwen2_5_72b => "qwen2.5-72b",
        params_qwen3_8b => "qwen3-8b",
        params_qwen3_14b => "qwen3-14b",
        params_qwen3_32b => "qwen3-32b",
        params_yi_34b => "yi-34b",
        params_gemma_2_9b => "gemma-2-9b",
        params_gemma_2_27b => "gemma-2-27b",
        params_falcon_7b => "falcon-7b",
        params_yarn_llama_2_7b => "yarn-llama-2-7b",
        params_mixtral_8x7b => "mixtral-8x7b",
        params_mixtral_8x22b => "mixtral-8x22b",
        params_qwen3_30b_a3b => "qwen3-30b-a3b",
    }

    #[test]
    fn every_preset_has_a_published_count() {
        for (name, _) in PRESETS {
            assert!(
                PUBLISHED_PARAMS.iter().any(|(n, _)| n == name),
                "{name} lacks a published parameter count"
            );
        }
    }

    /// Exact counts for models whose safetensors totals are well known, as a tighter check of the
    /// per-family layout than the 2% band.
    #[test]
    fn exact_counts_of_known_layouts() {
        let exact = [
            ("opt-6.7b", 6_658_473_984u64),
            ("llama-2-7b", 6_738_415_616),
            ("llama-3-8b", 8_030_261_248),
            ("mistral-7b", 7_241_732_096),
            ("qwen2-7b", 7_615_616_512),
            ("gemma-2-9b", 9_241_705_984),
            ("llama-3.1-70b", 70_553_706_496),
            ("llama-3.2-1b", 1_235_814_400),
            ("llama-3.2-3b", 3_212_749_824),
        ];
        for (name, n) in exact {
            assert_eq!(ModelSpec::preset(name).unwrap().params(), n, "{name}");
        }
    }

    #[test]
    fn kv_bytes_match_methods_digest() {
        // METHODS.md: Llama-3-8B KV per token per layer 4 KiB, per token 128 KiB.
        let m = ModelSpec::preset("llama-3-8b").unwrap();
        assert_eq!(m.kv_bytes_per_token_layer(), 4096);
        assert_eq!(m.kv_bytes_per_token(), 128 * 1024);
        assert_eq!(m.gqa_group(), 4);
        // OPT-6.7B: 2*h*p = 16 KiB per token per layer.
        let o = ModelSpec::preset("opt-6.7b").unwrap();
        assert_eq!(o.kv_bytes_per_token_layer(), 2 * 4096 * 2);
    }

    #[test]
    fn falcon_is_multi_query_and_gemma_has_wide_heads() {
        let f = ModelSpec::preset("falcon-7b").unwrap();
        assert_eq!((f.num_kv_heads, f.head_dim, f.ffn_dim), (1, 64, 4 * 4544));
        let g = ModelSpec::preset("gemma-2-9b").unwrap();
        assert_eq!((g.head_dim, g.q_dim(), g.dtype), (256, 4096, DType::Bf16));
        assert!(g.tied_embeddings);
    }

    #[test]
    fn unknown_preset_lists_known_names() {
        let e = ModelSpec::resolve("opt-7b").unwrap_err().to_string();
        assert!(
            e.contains("unknown model 'opt-7b'") && e.contains("opt-6.7b"),
            "{e}"
        );
    }

    #[test]
    fn unsupported_architecture_and_missing_field() {
        let e = ModelSpec::from_hf_config_str(r#"{"model_type":"bert"}"#, "x", "x.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unsupported model_type 'bert'") && e.contains("llama"),
            "{e}"
        );
        let e = ModelSpec::from_hf_config_str(
            r#"{"model_type":"llama","hidden_size":4096,"num_attention_heads":32,"num_hidden_layers":32,"vocab_size":32000,"max_position_embeddings":4096}"#,
            "x",
            "x.json",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("missing field `intermediate_size`"), "{e}");
        let e = ModelSpec::from_hf_config_str("{not json", "x", "x.json")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("x.json:"), "{e}");
        let e = ModelSpec::from_hf_config_str(
            r#"{"model_type":"llama","hidden_size":-4,"num_attention_heads":32}"#,
            "x",
            "x.json",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("x.json: hidden_size: must be a whole number from 0 to 4294967295")
                && e.ends_with("(got -4)"),
            "{e}"
        );
    }

    #[test]
    fn zero_sizes_are_rejected() {
        let e = ModelSpec::from_hf_config_str(
            r#"{"model_type":"opt","hidden_size":0,"num_attention_heads":1,"num_hidden_layers":1,"ffn_dim":4,"vocab_size":4,"max_position_embeddings":8}"#,
            "x",
            "x.json",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("hidden_size") && e.contains("at least 1"), "{e}");
    }

    const LLAMA_TINY: &str = r#""model_type":"llama","num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":256,"vocab_size":1000,"max_position_embeddings":512"#;

    #[test]
    fn hidden_not_divisible_by_heads_needs_an_explicit_head_dim() {
        // 100 / 3: Hugging Face would reject this config; so does kvplan, naming the fix.
        for model_type in ["llama", "mistral", "qwen2"] {
            let text = format!(
                r#"{{"model_type":"{model_type}","hidden_size":100,"num_attention_heads":3,"num_hidden_layers":2,"intermediate_size":256,"vocab_size":1000,"max_position_embeddings":512}}"#
            );
            let e = ModelSpec::from_hf_config_str(&text, "x", "x.json")
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("x.json: hidden_size")
                    && e.contains("multiple of num_attention_heads (3)")
                    && e.contains("head_dim")
                    && e.contains("got 100"),
                "{model_type}: {e}"
            );
        }
        let e = ModelSpec::from_hf_config_str(
            r#"{"model_type":"opt","hidden_size":100,"num_attention_heads":3,"num_hidden_layers":2,"ffn_dim":400,"vocab_size":1000,"max_position_embeddings":512}"#,
            "x",
            "x.json",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("hidden_size") && e.contains("multiple"), "{e}");
        let e = ModelSpec::from_hf_config_str(
            r#"{"model_type":"falcon","hidden_size":100,"num_attention_heads":3,"num_hidden_layers":2,"vocab_size":1000}"#,
            "x",
            "x.json",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("hidden_size") && e.contains("multiple"), "{e}");
        // Divisible: head_dim = hidden / heads, q_dim = hidden.
        let m = ModelSpec::from_hf_config_str(
            &format!(r#"{{{LLAMA_TINY},"hidden_size":128}}"#),
            "x",
            "x.json",
        )
        .unwrap();
        assert_eq!((m.head_dim, m.q_dim(), m.kv_dim()), (32, 128, 64));
    }

    #[test]
    fn explicit_head_dim_wins_and_q_dim_may_differ_from_hidden() {
        // hidden 100 is not 4 heads x 32, but head_dim says so: Q is 128 wide, K and V 64 each.
        let m = ModelSpec::from_hf_config_str(
            &format!(r#"{{{LLAMA_TINY},"hidden_size":100,"head_dim":32}}"#),
            "x",
            "x.json",
        )
        .unwrap();
        assert_eq!(
            (m.hidden, m.head_dim, m.q_dim(), m.kv_dim()),
            (100, 32, 128, 64)
        );
        // Parameters: W_Q (h x q), W_O (q x h), W_K and W_V (h x kv each) use the right widths.
        let (kv_proj, q_o, _) = m.layer_param_parts();
        assert_eq!(kv_proj, 2 * 100 * 64);
        assert_eq!(q_o, 100 * 128 + 128 * 100 + 100);
        // The KV cache follows kv_dim, the recompute activations follow hidden.
        assert_eq!(m.kv_bytes_per_token_layer(), 2 * 64 * 2);
        assert_eq!(m.act_bytes_per_token_layer(), 100 * 2);
        // Falcon reads head_dim too.
        let f = ModelSpec::from_hf_config_str(
            r#"{"model_type":"falcon","hidden_size":100,"num_attention_heads":4,"head_dim":32,"num_hidden_layers":2,"vocab_size":1000}"#,
            "x",
            "x.json",
        )
        .unwrap();
        assert_eq!((f.head_dim, f.q_dim()), (32, 128));
    }

    fn temp_dir(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("kvplan-model-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_model_directory_reads_its_config_json() {
        let d = temp_dir("dir");
        let model = d.join("tiny-llama");
        std::fs::create_dir_all(&model).unwrap();
        std::fs::write(
            model.join("config.json"),
            format!(r#"{{{LLAMA_TINY},"hidden_size":128}}"#),
        )
        .unwrap();
        let from_dir = ModelSpec::resolve(&model.display().to_string()).unwrap();
        let from_file =
            ModelSpec::resolve(&model.join("config.json").display().to_string()).unwrap();
        assert_eq!(from_dir.name, model.display().to_string());
        assert_eq!(
            ModelSpec {
                name: from_file.name.clone(),
                ..from_dir
            },
            from_file
        );
        // With a trailing slash too.
        assert!(ModelSpec::resolve(&format!("{}/", model.display())).is_ok());
        // A directory without config.json: the error names the path it looked for.
        let empty = d.join("empty");
        std::fs::create_dir_all(&empty).unwrap();
        let e = ModelSpec::resolve(&empty.display().to_string())
            .unwrap_err()
            .to_string();
        let want = empty.join("config.json").display().to_string();
        assert!(
            e.contains(&want) && e.contains("directory without a config.json"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }
}
