//! `kvplan diff` and `kvplan regress`: wiring of `kvplan_diff` (comparison and suites) to the
//! command line, rendering and golden files.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};

use crate::args::*;
use crate::error::CliError;
use crate::error::EXIT_FAILURE;
use crate::output::write_output;
use crate::render::*;
use kvplan_diff::Error as DiffError;
use kvplan_diff::compare::{Comparison, Input, MetricDiff, Status, compare, parse_tolerance};
use kvplan_diff::suite::{self, CaseCheck};
use serde_json::json;

pub const DIFF_LONG: &str = "\
Compare two outputs of kvplan of the same kind, detected from content:
  report JSON   simulate --format json (one strategy or --compare), serve --format json /
                --summary-json, or any JSON (numeric leaves by dotted path: ttft_s.p99)
  CSV table     --format csv outputs and sweep tables; rows matched by key: the `point`
                column when it comes first, else the leading columns before the first
                metric column (strategy,model,...,gen), else every non-numeric column
  timeline CSV  --trace FILE.csv: per run, the makespan, the op count, and duration_s summed
                by label and by category (and bytes by category)
For each metric: A, B, B-A, (B-A)/|A| and a verdict. Which way is worse comes from the metric's
name (kvplan_diff::direction::RULES): latencies, times (*_s), bytes, idle time, preemptions:
higher is worse; throughputs (*throughput*, *tok_s*, *_per_s), speed-ups: lower is worse;
anything else (counts, fractions) is reported as `changed` and never fails.
Exit 0 when nothing regressed past --tolerance, 1 when something did, 2 on bad input
(different kinds, rows in one file only, malformed JSON or CSV).
  kvplan diff before.json after.json --tolerance 2%";

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
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `kvplan regress`.
#[derive(Debug, Subcommand)]
pub enum RegressCommand {
    /// Rerun every scenario in DIR and compare with DIR/golden/ (exit 1 on a regression or a
    /// missing golden)
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
        DiffError::Simulate { case, source } => prefixed(&case, (*source).into()),
        DiffError::Serve { case, source } => prefixed(&case, crate::messages::serve_error(*source)),
        DiffError::Tolerance { value, message } => {
            CliError::input(format!("--tolerance: {message} (got '{value}')"))
        }
        other if other.is_input_error() => CliError::input(other.to_string()),
        other => CliError::failure(other.to_string()),
    }
}

/// A number for a table: integers whole, others with 6 significant digits.
fn num(x: Option<f64>) -> String {
    match x {
        None => "-".into(),
        Some(x) if x == x.trunc() && x.abs() < 1e15 => format!("{x:.0}"),
        Some(x) if x.abs() >= 1e-3 && x.abs() < 1e6 => {
            let digits = (5 - x.abs().log10().floor() as i64).clamp(0, 9) as usize;
            format!("{x:.digits$}")
        }
        Some(x) => format!("{x:.4e}"),
    }
}

fn rel(m: &MetricDiff) -> String {
    match (m.relative_delta, m.a, m.b) {
        (Some(r), ..) => format!("{:+.2}%", r * 100.0),
        (None, Some(_), Some(_)) => "from 0".into(),
        _ => "-".into(),
    }
}

fn pct(t: f64) -> String {
    let p = format!("{:.4}", t * 100.0);
    format!("{}%", p.trim_end_matches('0').trim_end_matches('.'))
}

/// `row metric +x.xx%`, for one-line summaries.
fn short(m: &MetricDiff) -> String {
    let name = if m.row.is_empty() {
        m.metric.clone()
    } else {
        format!("{} {}", m.row, m.metric)
    };
    format!("{name} {}", rel(m))
}

fn metric_table(c: &Comparison, changed_only: bool) -> String {
    let rows = c.metrics.iter().any(|m| !m.row.is_empty());
    let row_name = if c.key_columns.is_empty() {
        "row".to_string()
    } else {
        c.key_columns.join("/")
    };
    let mut header = vec![];
    if rows {
        header.push(row_name.as_str());
    }
    header.extend(["metric", "A", "B", "delta", "rel", "status"]);
    let mut t = Table::new(&header);
    for m in &c.metrics {
        if changed_only && m.status == Status::Ok {
            continue;
        }
        let mut r = vec![];
        if rows {
            r.push(m.row.clone());
        }
        r.extend([
            m.metric.clone(),
            num(m.a),
            num(m.b),
            num(m.delta),
            rel(m),
            m.status.as_str().to_string(),
        ]);
        t.row(&r);
    }
    t.render()
}

fn summary(c: &Comparison) -> String {
    format!(
        "{} metrics: {} regressed, {} improved, {} changed (neutral) beyond {}; {} within; {} added, {} removed",
        c.metrics.len(),
        c.count(Status::Regressed),
        c.count(Status::Improved),
        c.count(Status::Changed),
        pct(c.tolerance),
        c.count(Status::Ok),
        c.count(Status::Added),
        c.count(Status::Removed),
    )
}

fn text_notes(c: &Comparison, out: &mut String) {
    for t in &c.texts {
        let at = if t.row.is_empty() {
            t.field.clone()
        } else {
            format!("{} {}", t.row, t.field)
        };
        let show = |s: &Option<String>| s.clone().unwrap_or_else(|| "(absent)".into());
        let _ = writeln!(out, "note: {at}: '{}' -> '{}'", show(&t.a), show(&t.b));
    }
}

const CSV_HEADER: [&str; 8] = [
    "row",
    "metric",
    "a",
    "b",
    "delta",
    "relative_delta",
    "direction",
    "status",
];

fn csv_cells(m: &MetricDiff) -> Vec<String> {
    let n = |x: Option<f64>| x.map(csv_number).unwrap_or_default();
    vec![
        m.row.clone(),
        m.metric.clone(),
        n(m.a),
        n(m.b),
        n(m.delta),
        n(m.relative_delta),
        m.direction.as_str().to_string(),
        m.status.as_str().to_ascii_lowercase(),
    ]
}

/// `kvplan diff`.
pub fn diff(args: &DiffArgs) -> Result<String, CliError> {
    let tolerance = parse_tolerance(&args.tolerance).map_err(diff_error)?;
    let a = Input::read(&args.a).map_err(diff_error)?;
    let b = Input::read(&args.b).map_err(diff_error)?;
    let c = compare(&a, &b, tolerance).map_err(diff_error)?;
    let out = match args.output.format {
        Format::Json => json_line(&json!({
            "kind": c.kind,
            "a": c.a,
            "b": c.b,
            "key_columns": c.key_columns,
            "tolerance": c.tolerance,
            "regressed": c.count(Status::Regressed),
            "metrics": c.metrics.iter().map(|m| {
                let mut v = serde_json::to_value(m).expect("a metric serialises");
                v["regressed"] = json!(m.regressed());
                v
            }).collect::<Vec<_>>(),
            "texts": c.texts,
        }))?,
        Format::Csv => csv_text(
            &CSV_HEADER,
            &c.metrics.iter().map(csv_cells).collect::<Vec<_>>(),
        )?,
        Format::Table => {
            let mut out = format!(
                "diff ({}): A {} -> B {}, tolerance {}\n",
                c.kind,
                c.a,
                c.b,
                pct(c.tolerance)
            );
            out.push_str(&metric_table(&c, args.changed_only));
            let _ = writeln!(out, "{}", summary(&c));
            text_notes(&c, &mut out);
            out
        }
    };
    let regressed: Vec<&MetricDiff> = c.regressions().collect();
    if regressed.is_empty() {
        return Ok(out);
    }
    Err(CliError {
        code: EXIT_FAILURE,
        message: format!(
            "{} metric{} regressed beyond {}: {}{}",
            regressed.len(),
            if regressed.len() == 1 { "" } else { "s" },
            pct(tolerance),
            regressed
                .iter()
                .take(3)
                .map(|m| short(m))
                .collect::<Vec<_>>()
                .join(", "),
            if regressed.len() > 3 { ", ..." } else { "" }
        ),
        stdout: Some(out),
    })
}

/// The worst metric of a case: the largest relative move in the bad direction, else the
/// largest move of any kind.
fn worst(check: &CaseCheck) -> Option<&MetricDiff> {
    let all = || check.comparisons.iter().flat_map(|c| c.metrics.iter());
    let size = |m: &MetricDiff| m.relative_delta.map_or(f64::INFINITY, f64::abs);
    all()
        .filter(|m| m.regressed())
        .max_by(|x, y| size(x).total_cmp(&size(y)))
        .or_else(|| {
            all()
                .filter(|m| m.status != Status::Ok && m.relative_delta.is_some())
                .max_by(|x, y| size(x).total_cmp(&size(y)))
        })
}

/// `kvplan regress check`.
pub fn regress_check(args: &RegressCheckArgs) -> Result<String, CliError> {
    let tolerance = parse_tolerance(&args.tolerance).map_err(diff_error)?;
    let cases = suite::discover(&args.dir).map_err(diff_error)?;
    let checks = cases
        .iter()
        .map(|c| suite::check(&args.dir, c, tolerance))
        .collect::<Result<Vec<_>, _>>()
        .map_err(diff_error)?;
    let update = format!("kvplan regress update {}", args.dir.display());
    let out = match args.output.format {
        Format::Json => json_line(&json!({
            "dir": args.dir,
            "tolerance": tolerance,
            "passed": checks.iter().all(CaseCheck::passed),
            "cases": checks,
        }))?,
        Format::Csv => {
            let mut rows = Vec::new();
            for ch in &checks {
                for c in &ch.comparisons {
                    for m in &c.metrics {
                        let mut r = vec![ch.case.clone(), c.kind.as_str().to_string()];
                        r.extend(csv_cells(m));
                        rows.push(r);
                    }
                }
            }
            let mut header = vec!["case", "output"];
            header.extend(CSV_HEADER);
            csv_text(&header, &rows)?
        }
        Format::Table => {
            let mut out = format!(
                "regress check: {} ({} cases, tolerance {})\n",
                args.dir.display(),
                checks.len(),
                pct(tolerance)
            );
            let mut t = Table::new(&[
                "case",
                "command",
                "metrics",
                "regressed",
                "largest change",
                "status",
            ]);
            for ch in &checks {
                let metrics: usize = ch.comparisons.iter().map(|c| c.metrics.len()).sum();
                let regressed: usize = ch
                    .comparisons
                    .iter()
                    .map(|c| c.count(Status::Regressed))
                    .sum();
                t.row(&[
                    ch.case.clone(),
                    ch.kind.as_str().to_string(),
                    metrics.to_string(),
                    regressed.to_string(),
                    worst(ch).map_or("-".into(), short),
                    if !ch.missing.is_empty() {
                        "NO GOLDEN".to_string()
                    } else if regressed > 0 {
                        "REGRESSED".to_string()
                    } else {
                        "ok".to_string()
                    },
                ]);
            }
            out.push_str(&t.render());
            for ch in &checks {
                for p in &ch.missing {
                    let _ = writeln!(
                        out,
                        "{}: golden {} missing (`{update}` writes it)",
                        ch.case,
                        p.display()
                    );
                }
                for c in &ch.comparisons {
                    for m in c.regressions() {
                        let _ = writeln!(
                            out,
                            "{}: {} {} -> {} ({}) REGRESSED",
                            ch.case,
                            if m.row.is_empty() {
                                m.metric.clone()
                            } else {
                                format!("{} {}", m.row, m.metric)
                            },
                            num(m.a),
                            num(m.b),
                            rel(m)
                        );
                    }
                }
            }
            out
        }
    };
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| !c.passed())
        .map(|c| {
            if !c.missing.is_empty() {
                format!("{} (golden missing)", c.case)
            } else {
                let n: usize = c
                    .comparisons
                    .iter()
                    .map(|x| x.count(Status::Regressed))
                    .sum();
                format!(
                    "{} ({} metric{} regressed, worst {})",
                    c.case,
                    n,
                    if n == 1 { "" } else { "s" },
                    worst(c).map_or("-".into(), short)
                )
            }
        })
        .collect();
    if failed.is_empty() {
        return Ok(out);
    }
    let missing = checks.iter().any(|c| !c.missing.is_empty());
    Err(CliError {
        code: EXIT_FAILURE,
        message: format!(
            "{} of {} cases failed: {}{}",
            failed.len(),
            checks.len(),
            failed.join("; "),
            if missing {
                format!("; run `{update}` to write missing goldens")
            } else {
                String::new()
            }
        ),
        stdout: Some(out),
    })
}

/// `kvplan regress update`.
pub fn regress_update(args: &RegressUpdateArgs) -> Result<String, CliError> {
    let cases = suite::discover(&args.dir).map_err(diff_error)?;
    let golden = args.dir.join("golden");
    std::fs::create_dir_all(&golden)
        .map_err(|e| CliError::input(format!("{}: cannot create: {e}", golden.display())))?;
    let mut t = Table::new(&["case", "command", "written"]);
    for case in &cases {
        let outputs = case.run().map_err(diff_error)?;
        let mut written = Vec::new();
        for g in case.goldens(&args.dir, outputs) {
            write_output(&g.path, "regress update", |w| {
                w.write_all(g.text.as_bytes())
            })?;
            written.push(display_rel(&g.path, &args.dir));
        }
        t.row(&[
            case.name.clone(),
            case.kind.as_str().to_string(),
            written.join(", "),
        ]);
    }
    let mut out = format!(
        "regress update: {} ({} cases)\n",
        args.dir.display(),
        cases.len()
    );
    out.push_str(&t.render());
    Ok(out)
}

fn display_rel(p: &Path, dir: &Path) -> String {
    p.strip_prefix(dir).unwrap_or(p).display().to_string()
}

/// `kvplan regress check|update`.
pub fn regress(action: &RegressCommand) -> Result<String, CliError> {
    match action {
        RegressCommand::Check(a) => regress_check(a),
        RegressCommand::Update(a) => regress_update(a),
    }
}
