//! Reading a Hugging Face `config.json` into a [`ModelSpec`]: one reader per family, and the
//! checks every spec passes.

use std::path::Path;

use serde_json::{Map, Value};

use super::spec::{Family, ModelSpec, Moe};
use crate::dtype::DType;
use crate::error::{Error, Result, one_line};
use crate::quant::KvCacheDtype;

impl ModelSpec {
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

    /// The checks every spec passes, whatever it was read from (`origin` prefixes errors).
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
        // (a zero here would be blamed on the maximum model length, which defaults to it).
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
            self.validate_moe(moe, origin)?;
        }
        Ok(())
    }

    /// The checks of a mixture of experts, naming the family's own fields.
    fn validate_moe(&self, moe: &Moe, origin: &str) -> Result<()> {
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
        Ok(())
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

    /// Serving dtype from `torch_dtype`, following vLLM's `auto` dtype: fp16 and bf16 are
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
