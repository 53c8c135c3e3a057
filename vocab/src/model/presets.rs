//! The embedded presets: every model's `config.json` (`vocab/models/*.json`), found by name or
//! by Hugging Face id, and their published parameter counts.

use std::path::Path;

use super::spec::ModelSpec;
use crate::error::{Error, Result};

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
        &[$(($name, include_str!(concat!("../../models/", $name, ".json")))),*]
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
}

/// The `owner/name` repository of a preset's `_source` URL (`https://huggingface.co/OWNER/NAME/...`).
fn hf_id_of(text: &'static str) -> Option<&'static str> {
    let rest = &text[text.find("\"_source\"")?..];
    let rest = &rest[rest.find("huggingface.co/")? + "huggingface.co/".len()..];
    let end = rest.find("/blob/")?;
    let id = &rest[..end];
    (id.matches('/').count() == 1).then_some(id)
}
