//! `kvplan validate-serving`: many measured runs (stage tables, per-request runs, folders of
//! them) replayed in parallel (`kvplan_serve::fidelity`), a table per file, the summary by
//! model, GPU, TP, load level and metric, as CSV or JSON, and predicted against measured as SVG.

use std::path::PathBuf;

use clap::Args;
use kvplan_report::fidelity::SkippedStage;
use kvplan_serve::fidelity::{FidelityError, validate_serving as replay_all};
use kvplan_serve::runs::StageSkip;
use kvplan_serve::scenario::RawServeScenario;

use crate::args::OutputArgs;
use crate::error::CliError;
use crate::messages::serve_error;

/// `--help`'s long text (`src/help/validate-serving.txt`).
pub const VALIDATE_SERVING_LONG: &str =
    include_str!("../help/validate-serving.txt").trim_ascii_end();

/// `kvplan validate-serving`.
#[derive(Debug, Args)]
pub struct ValidateServingArgs {
    /// Measured runs: stage tables, per-request CSVs, `vllm bench serve --save-detailed` JSONs,
    /// or folders of them (a folder's *.csv and *.json files, by name)
    #[arg(value_name = "FILE_OR_DIR", required = true)]
    pub inputs: Vec<PathBuf>,
    /// Model for every run, over each stage's own (a preset or config.json); per-request runs
    /// replay on it [default: a stage's `model_hf`; a vllm bench JSON's `model_id`]
    #[arg(long, value_name = "NAME|PATH")]
    pub model: Option<String>,
    /// GPU for every run, over each stage's own (a preset or profile TOML); per-request runs
    /// replay on it [default: a stage's `hardware`]
    #[arg(long, value_name = "NAME|PATH")]
    pub hardware: Option<String>,
    /// Write predicted against measured as SVG (a panel per metric, log axes, the line y = x)
    #[arg(long, value_name = "FILE.svg")]
    pub svg: Option<PathBuf>,
    /// Write the summary (one row per model, GPU, TP, load level and metric) as CSV
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Draw each stage's error bands at this coverage (alone: 0.8) and report how many
    /// measurements they hold (the band_coverage column): each stage served again --band-draws
    /// times with perturbed kernel costs. The built-in residuals come from the given real runs,
    /// so on those runs the coverage is in-sample
    #[arg(long, value_name = "C", num_args = 0..=1, default_missing_value = "0.8")]
    pub confidence: Option<f64>,
    /// Perturbed runs per stage behind --confidence
    #[arg(long, value_name = "N", default_value_t = 8, requires = "confidence")]
    pub band_draws: u32,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// A stage's reason for being left out: the library's words, which name the scenario's field
/// (`serve.tensor_parallel_size`), set from the row's column, not by a flag of this command.
fn skip_text(why: StageSkip) -> String {
    why.to_string()
}

/// A fidelity error in the command line's words: one line naming the file.
fn fidelity_error(e: FidelityError) -> CliError {
    match e {
        FidelityError::NoTarget { path, field } => CliError::input(match field {
            "model" => format!(
                "{path}: a per-request run names no model: give --model NAME|PATH (a vllm bench serve JSON's model_id stands for it)"
            ),
            _ => format!(
                "{path}: a per-request run names no GPU: give --hardware NAME|PATH, the GPU it ran on"
            ),
        }),
        FidelityError::Replay { path, run, source } => {
            let e = serve_error(*source);
            let run = if run == path {
                String::new()
            } else {
                format!("{run}: ")
            };
            CliError::new(
                e.code == crate::error::EXIT_INPUT,
                format!("{path}: {run}{}", e.message),
            )
        }
        FidelityError::NoStage { path, skipped } => {
            let n = skipped.len();
            let first = skipped
                .into_iter()
                .next()
                .map(|(stage, why)| format!("{stage}: {}", skip_text(why)))
                .unwrap_or_else(|| "no stage rows".into());
            let more = if n > 1 {
                format!("; and {} more", n - 1)
            } else {
                String::new()
            };
            CliError::input(format!(
                "{path}: no stage could be replayed ({first}{more})"
            ))
        }
        FidelityError::Runs(e) => CliError::input(super::serve::refused_row(&e)),
        other => CliError::input(other.to_string()),
    }
}

/// `kvplan validate-serving`.
pub fn validate_serving(args: &ValidateServingArgs) -> Result<String, CliError> {
    let base = RawServeScenario {
        model: args.model.clone(),
        hardware: args.hardware.clone(),
        ..RawServeScenario::default()
    };
    let bands = crate::messages::band_settings(args.confidence, args.band_draws)?;
    let bar = kvplan_report::progress::bar();
    let f = replay_all(&args.inputs, &base, bands.as_ref(), bar.as_ref());
    drop(bar);
    let mut f = f.map_err(fidelity_error)?;
    let skipped: Vec<SkippedStage> = (std::mem::take(&mut f.skipped).into_iter())
        .map(|s| SkippedStage {
            file: s.file,
            stage: s.stage,
            why: skip_text(s.why),
        })
        .collect();
    let format = args.output.format;
    let mut text = kvplan_report::fidelity::render("validate-serving", &f, &skipped, format)?;
    // Everything drawn before anything is written: a plot that cannot be drawn leaves no file.
    let svg = args
        .svg
        .as_ref()
        .map(|p| Ok::<_, CliError>((p, kvplan_report::fidelity::parity_svg(&f)?)))
        .transpose()?;
    let mut written = Vec::new();
    if let Some(out) = &args.out {
        let csv = kvplan_report::fidelity::summary_csv(&f)?;
        kvplan_report::files::write_text(out, "--out", &csv)?;
        written.push(("--out", out));
    }
    if let Some((path, svg)) = svg {
        kvplan_report::files::write_text(path, "--svg", &svg)?;
        written.push(("--svg", path));
    }
    if format == kvplan_report::Format::Table {
        for (what, p) in written {
            text.push_str(&format!("{what}: written to {}\n", p.display()));
        }
    }
    Ok(text)
}
