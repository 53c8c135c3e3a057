//! `kvplan models`: the model presets, or one model in detail.

use clap::Args;

use crate::args::*;
use crate::error::CliError;
use kvplan_report as report;
use kvplan_vocab::ModelSpec;

/// `kvplan models`.
#[derive(Debug, Args)]
pub struct ModelsArgs {
    /// A preset name or config.json path to show in detail
    pub model: Option<String>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `kvplan models`.
pub fn models(args: &ModelsArgs) -> Result<String, CliError> {
    let asked = args.model.as_deref();
    let specs = match asked {
        Some(m) => vec![ModelSpec::resolve(m)?],
        None => ModelSpec::presets()?,
    };
    let footer = "\nAny Hugging Face config.json of the llama, mistral, qwen2, qwen3, gemma2, opt or falcon\nfamilies, or of the mixtral, qwen2_moe, qwen3_moe or llama4 mixtures of experts, works too:\n--model path/to/config.json (or the directory holding it)\n";
    let format = args.output.format;
    Ok(report::listings::models(&specs, asked, format, footer)?)
}
