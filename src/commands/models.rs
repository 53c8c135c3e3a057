//! `kvplan models`: the model presets, or one model in detail.

use clap::Args;

use crate::args::*;
use crate::error::CliError;
use kvplan_report as report;
use kvplan_vocab::ModelSpec;
use serde::Serialize;

/// `kvplan models`.
#[derive(Debug, Args)]
pub struct ModelsArgs {
    /// A preset name or config.json path to show in detail
    pub model: Option<String>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Serialize)]
struct ModelRow<'a> {
    #[serde(flatten)]
    spec: &'a ModelSpec,
    params: u64,
    weight_bytes: u64,
    kv_bytes_per_token: u64,
}

/// `kvplan models`.
pub fn models(args: &ModelsArgs) -> Result<String, CliError> {
    let specs: Vec<ModelSpec> = match &args.model {
        Some(m) => vec![ModelSpec::resolve(m)?],
        None => ModelSpec::preset_names()
            .iter()
            .map(|n| ModelSpec::preset(n))
            .collect::<Result<_, _>>()?,
    };
    let rows: Vec<ModelRow> = specs
        .iter()
        .map(|s| ModelRow {
            spec: s,
            params: s.params(),
            weight_bytes: s.weight_bytes(),
            kv_bytes_per_token: s.kv_bytes_per_token(),
        })
        .collect();
    let header = [
        "model", "family", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab",
        "dtype", "params", "weights", "kv/token",
    ];
    let csv_header = [
        "model",
        "family",
        "layers",
        "hidden",
        "heads",
        "kv_heads",
        "head_dim",
        "ffn",
        "vocab",
        "dtype",
        "params",
        "weight_bytes",
        "kv_bytes_per_token",
    ];
    let cells = |r: &ModelRow, plain: bool| -> Vec<String> {
        let s = r.spec;
        let mut v = vec![
            s.name.clone(),
            format!("{:?}", s.family).to_lowercase(),
            s.num_layers.to_string(),
            s.hidden.to_string(),
            s.num_heads.to_string(),
            s.num_kv_heads.to_string(),
            s.head_dim.to_string(),
            s.ffn_dim.to_string(),
            s.vocab.to_string(),
            s.dtype.to_string(),
        ];
        if plain {
            v.extend([
                r.params.to_string(),
                r.weight_bytes.to_string(),
                r.kv_bytes_per_token.to_string(),
            ]);
        } else {
            v.extend([
                format!("{:.2}B", r.params as f64 / 1e9),
                report::gib(r.weight_bytes),
                format!("{} KiB", r.kv_bytes_per_token / 1024),
            ]);
        }
        v
    };
    let footer = "\nAny Hugging Face config.json of the llama, mistral, qwen2, gemma2, opt or falcon\nfamilies works too: --model path/to/config.json (or the directory holding it)\n";
    Ok(report::listing(
        args.output.format.into(),
        &rows,
        &header,
        &csv_header,
        cells,
        args.model.is_none().then_some(footer),
    )?)
}
