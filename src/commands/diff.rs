//! `kvplan diff` and `kvplan regress`: wiring of `kvplan_diff` (comparison and suites) to the
//! command line; rendering and golden files are `kvplan_report::diff`'s.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use crate::args::*;
use crate::error::{CliError, EXIT_FAILURE};
use kvplan_diff::Error as DiffError;
use kvplan_diff::compare::{Input, compare, parse_tolerance};
use kvplan_diff::suite;
use kvplan_report as report;

/// `--help`'s long text (`src/help/diff.txt`).
pub const DIFF_LONG: &str = include_str!("../help/diff.txt").trim_ascii_end();

/// `kvplan diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The baseline output
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The output compared with it
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Largest relative change that is not a regression: a fraction (0.01) or a percentage (1%)
    #[arg(long, value_name = "FRACTION|PERCENT", default_value = "1%")]
    pub tolerance: String,
    /// Table rows: all metrics, or only those beyond the tolerance [default: all]
    #[arg(long)]
    pub changed_only: bool,
    /// A metric whose change is intended: a changed decision (split, recompute share, head
    /// groups, partition, prefix cache hit rate) or a regression of it does not fail. A name, a
    /// `*` glob (splits.*.recompute_tokens) or a dotted prefix (headinfer); repeatable
    #[arg(long, value_name = "METRIC")]
    pub accept: Vec<String>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `kvplan regress`.
#[derive(Debug, Subcommand)]
pub enum RegressCommand {
    /// Rerun every scenario in DIR and compare with DIR/golden/ (exit 1 on a regression, a
    /// changed decision or a missing golden)
    Check(RegressCheckArgs),
    /// Rerun every scenario in DIR and rewrite its goldens in DIR/golden/
    Update(RegressUpdateArgs),
}

/// `kvplan regress check`.
#[derive(Debug, Args)]
pub struct RegressCheckArgs {
    /// The suite: scenario files (*.toml with a `model` key) and golden/
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Largest relative change that is not a regression: a fraction (0.01) or a percentage (1%)
    #[arg(long, value_name = "FRACTION|PERCENT", default_value = "1%")]
    pub tolerance: String,
    /// A metric whose change is intended: a changed decision (split, recompute share, head
    /// groups, partition, prefix cache hit rate) or a regression of it does not fail. A name, a
    /// `*` glob (splits.*.recompute_tokens) or a dotted prefix (headinfer); repeatable
    #[arg(long, value_name = "METRIC")]
    pub accept: Vec<String>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `kvplan regress update`.
#[derive(Debug, Args)]
pub struct RegressUpdateArgs {
    /// The suite: scenario files (*.toml with a `model` key) and golden/
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

fn diff_error(e: DiffError) -> CliError {
    let prefixed = |case: &str, mut c: CliError| {
        c.message = format!("case {case}: {}", c.message);
        c
    };
    match e {
        DiffError::Scenario { case, source } => prefixed(&case, (*source).into()),
        DiffError::Tolerance { value, message } => {
            CliError::input(format!("--tolerance: {message} (got '{value}')"))
        }
        other => CliError::new(other.is_input_error(), other.to_string()),
    }
}

/// The report `out`, or, where the command `failed` (a regression), an error (exit code 1) that
/// still prints it.
pub(crate) fn verdict(out: String, failed: Option<String>) -> Result<String, CliError> {
    match failed {
        None => Ok(out),
        Some(message) => Err(CliError {
            code: EXIT_FAILURE,
            message,
            stdout: Some(out),
        }),
    }
}

/// `kvplan diff`.
pub fn diff(args: &DiffArgs) -> Result<String, CliError> {
    let tolerance = parse_tolerance(&args.tolerance).map_err(diff_error)?;
    let a = Input::read(&args.a).map_err(diff_error)?;
    let b = Input::read(&args.b).map_err(diff_error)?;
    let mut c = compare(&a, &b, tolerance).map_err(diff_error)?;
    c.accept(&args.accept);
    let words = crate::messages::flags_in_text;
    let out = report::diff::comparison(&c, args.changed_only, words, args.output.format)?;
    // Two outputs with no metric in common compared nothing: not a pass.
    if !c.metrics.is_empty() && c.metrics.iter().all(|m| m.a.is_none() || m.b.is_none()) {
        let only_a = c.metrics.iter().filter(|m| m.b.is_none()).count();
        return Err(CliError::no_answer(
            out,
            format!(
                "{} and {} share no metric ({only_a} only in the first, {} only in the second): give two outputs of the same command",
                args.a.display(),
                args.b.display(),
                c.metrics.len() - only_a
            ),
        ));
    }
    verdict(out, report::diff::failures(&c, tolerance, "--accept"))
}

/// `kvplan regress check|update`.
pub fn regress(action: &RegressCommand) -> Result<String, CliError> {
    let args = match action {
        RegressCommand::Check(a) => a,
        RegressCommand::Update(a) => {
            let cases = suite::discover(&a.dir).map_err(diff_error)?;
            return report::diff::regress_update(&a.dir, &cases, |c| c.run().map_err(diff_error));
        }
    };
    let tolerance = parse_tolerance(&args.tolerance).map_err(diff_error)?;
    let cases = suite::discover(&args.dir).map_err(diff_error)?;
    let checks = cases
        .iter()
        .map(|c| suite::check(&args.dir, c, tolerance, &args.accept))
        .collect::<Result<Vec<_>, _>>()
        .map_err(diff_error)?;
    let update = format!("kvplan regress update {}", args.dir.display());
    let format = args.output.format;
    let words = crate::messages::flags_in_text;
    let out = report::diff::regress_check(&args.dir, tolerance, &checks, &update, words, format)?;
    verdict(
        out,
        report::diff::regress_failures(&checks, &update, "--accept"),
    )
}
