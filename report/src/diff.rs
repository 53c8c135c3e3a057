//! `kvplan_diff`'s comparisons and regression suites as the command line prints them, and a
//! suite's goldens written.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;

use kvplan_diff::compare::{Comparison, MetricDiff, Status};
use kvplan_diff::suite::{Case, CaseCheck, Outputs};
use serde_json::json;

use crate::error::Error;
use crate::files::write_text;
use crate::render::Format;
use crate::render::{Table, csv_number, csv_text, json_line};

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

pub fn pct(t: f64) -> String {
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
    // Decisions only where there are some: a comparison without any reads as it always did.
    let mut decisions = String::new();
    for (status, what) in [
        (Status::DecisionChanged, "decisions changed"),
        (Status::Accepted, "accepted"),
    ] {
        let n = c.count(status);
        if n > 0 {
            decisions.push_str(&format!(", {n} {what}"));
        }
    }
    format!(
        "{} metrics: {} regressed{decisions}, {} improved, {} changed (neutral) beyond {}; {} within; {} added, {} removed",
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

/// Two outputs compared, metric by metric (`changed_only`: table rows beyond the tolerance only).
/// `words` gives the command line's words for the fields the outputs' kind names
/// ([`Kind::as_str`](kvplan_diff::compare::Kind::as_str)).
pub fn comparison(
    c: &Comparison,
    changed_only: bool,
    words: fn(&str) -> String,
    format: Format,
) -> Result<String, Error> {
    Ok(match format {
        Format::Json => json_line(&json!({
            "kind": c.kind,
            "a": c.a,
            "b": c.b,
            "key_columns": c.key_columns,
            "tolerance": c.tolerance,
            "regressed": c.count(Status::Regressed),
            "decisions_changed": c.count(Status::DecisionChanged),
            "accepted": c.count(Status::Accepted),
            "metrics": c.metrics.iter().map(|m| {
                let mut v = serde_json::to_value(m).expect("a metric serialises");
                v["regressed"] = json!(m.regressed());
                v["failed"] = json!(m.failed());
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
                words(c.kind.as_str()),
                c.a,
                c.b,
                pct(c.tolerance)
            );
            out.push_str(&metric_table(c, changed_only));
            let _ = writeln!(out, "{}", summary(c));
            text_notes(c, &mut out);
            out
        }
    })
}

/// `a -> b`, for a decision (a change of any size).
fn moved(m: &MetricDiff) -> String {
    let name = if m.row.is_empty() {
        m.metric.clone()
    } else {
        format!("{} {}", m.row, m.metric)
    };
    format!("{name} {} -> {}", num(m.a), num(m.b))
}

/// The first three of `items`, `, ...` when there are more.
fn first_three(items: &[&MetricDiff], show: fn(&MetricDiff) -> String) -> String {
    let mut s = items
        .iter()
        .take(3)
        .map(|m| show(m))
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > 3 {
        s.push_str(", ...");
    }
    s
}

/// The one-line message of the failures, if there are any: the metrics that regressed beyond
/// `tolerance` and the decisions that changed (`accept` names the option that accepts an
/// intended change, in the caller's words).
pub fn failures(c: &Comparison, tolerance: f64, accept: &str) -> Option<String> {
    let regressed: Vec<&MetricDiff> = c.regressions().collect();
    let decided: Vec<&MetricDiff> = c
        .metrics
        .iter()
        .filter(|m| m.status == Status::DecisionChanged)
        .collect();
    let mut parts = Vec::new();
    if !regressed.is_empty() {
        parts.push(format!(
            "{} metric{} regressed beyond {}: {}",
            regressed.len(),
            if regressed.len() == 1 { "" } else { "s" },
            pct(tolerance),
            first_three(&regressed, short)
        ));
    }
    if !decided.is_empty() {
        parts.push(format!(
            "{} decision{} changed: {} (`{accept} METRIC` accepts an intended change)",
            decided.len(),
            if decided.len() == 1 { "" } else { "s" },
            first_three(&decided, moved)
        ));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// The worst metric of a case: the largest relative move in the bad direction, else the
/// largest move of any kind.
fn worst(check: &CaseCheck) -> Option<&MetricDiff> {
    let all = || check.comparisons.iter().flat_map(|c| c.metrics.iter());
    let size = |m: &MetricDiff| m.relative_delta.map_or(f64::INFINITY, f64::abs);
    all()
        .filter(|m| m.failed())
        .max_by(|x, y| size(x).total_cmp(&size(y)))
        .or_else(|| {
            all()
                .filter(|m| m.status != Status::Ok && m.relative_delta.is_some())
                .max_by(|x, y| size(x).total_cmp(&size(y)))
        })
}

/// A suite in `dir` checked against its goldens; `update` is the command that writes them,
/// `words` the command line's words for the fields the outputs' kinds name.
pub fn regress_check(
    dir: &Path,
    tolerance: f64,
    checks: &[CaseCheck],
    update: &str,
    words: fn(&str) -> String,
    format: Format,
) -> Result<String, Error> {
    Ok(match format {
        Format::Json => json_line(&json!({
            "dir": dir,
            "tolerance": tolerance,
            "passed": checks.iter().all(CaseCheck::passed),
            "cases": checks,
        }))?,
        Format::Csv => {
            let mut rows = Vec::new();
            for ch in checks {
                for c in &ch.comparisons {
                    for m in &c.metrics {
                        let mut r = vec![ch.case.clone(), words(c.kind.as_str())];
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
                dir.display(),
                checks.len(),
                pct(tolerance)
            );
            out.push_str(&case_table(checks));
            for ch in checks {
                case_lines(&mut out, ch, update);
            }
            out
        }
    })
}

/// One row per case: its command, how many metrics it compared and regressed, its largest
/// change and its status.
fn case_table(checks: &[CaseCheck]) -> String {
    let mut t = Table::new(&[
        "case",
        "command",
        "metrics",
        "regressed",
        "largest change",
        "status",
    ]);
    for ch in checks {
        let metrics: usize = ch.comparisons.iter().map(|c| c.metrics.len()).sum();
        let count = |s: Status| -> usize { ch.comparisons.iter().map(|c| c.count(s)).sum() };
        let regressed = count(Status::Regressed);
        let decided = count(Status::DecisionChanged);
        t.row(&[
            ch.case.clone(),
            ch.kind.as_str().to_string(),
            metrics.to_string(),
            regressed.to_string(),
            worst(ch).map_or("-".into(), short),
            if !ch.missing.is_empty() {
                "NO GOLDEN".to_string()
            } else if !ch.vanished().is_empty() {
                "METRIC GONE".to_string()
            } else if regressed > 0 {
                "REGRESSED".to_string()
            } else if decided > 0 {
                "DECISION CHANGED".to_string()
            } else {
                "ok".to_string()
            },
        ]);
    }
    t.render()
}

/// The lines under the table for one case: its missing goldens (`update` writes them), the
/// metrics its goldens have and its output lacks, and every metric that regressed, changed a
/// decision or was accepted.
fn case_lines(out: &mut String, ch: &CaseCheck, update: &str) {
    for p in &ch.missing {
        let _ = writeln!(
            out,
            "{}: golden {} missing (`{update}` writes it)",
            ch.case,
            p.display()
        );
    }
    for v in ch.vanished() {
        let _ = writeln!(
            out,
            "{}: {} is in golden {} but not in this build's output",
            ch.case,
            if v.row.is_empty() {
                v.metric.to_string()
            } else {
                format!("{} {}", v.row, v.metric)
            },
            v.golden
        );
    }
    for c in &ch.comparisons {
        for m in c.metrics.iter().filter(|m| {
            matches!(
                m.status,
                Status::Regressed | Status::DecisionChanged | Status::Accepted
            )
        }) {
            let _ = writeln!(
                out,
                "{}: {} {} -> {} ({}) {}",
                ch.case,
                if m.row.is_empty() {
                    m.metric.clone()
                } else {
                    format!("{} {}", m.row, m.metric)
                },
                num(m.a),
                num(m.b),
                rel(m),
                match m.status {
                    Status::Regressed => "REGRESSED",
                    Status::DecisionChanged => "DECISION CHANGED",
                    _ => "accepted",
                }
            );
        }
    }
}

/// The one-line message of the cases that failed, if any did (`update` is the command that
/// writes missing goldens, `accept` the option that accepts an intended change).
pub fn regress_failures(checks: &[CaseCheck], update: &str, accept: &str) -> Option<String> {
    let failed: Vec<String> = checks
        .iter()
        .filter(|c| !c.passed())
        .map(|c| {
            let vanished = c.vanished();
            if !c.missing.is_empty() {
                format!("{} (golden missing)", c.case)
            } else if !vanished.is_empty() {
                let names: Vec<&str> = vanished.iter().map(|v| v.metric).collect();
                format!(
                    "{} ({} gone from the output: {})",
                    c.case,
                    if names.len() == 1 {
                        "metric"
                    } else {
                        "metrics"
                    },
                    names.join(", ")
                )
            } else {
                let n: usize = c
                    .comparisons
                    .iter()
                    .map(|x| x.count(Status::Regressed))
                    .sum();
                let decided: Vec<&MetricDiff> = c
                    .comparisons
                    .iter()
                    .flat_map(|x| x.metrics.iter())
                    .filter(|m| m.status == Status::DecisionChanged)
                    .collect();
                let mut why = Vec::new();
                if n > 0 {
                    why.push(format!(
                        "{} metric{} regressed, worst {}",
                        n,
                        if n == 1 { "" } else { "s" },
                        worst(c).map_or("-".into(), short)
                    ));
                }
                if !decided.is_empty() {
                    why.push(format!(
                        "{} decision{} changed: {}",
                        decided.len(),
                        if decided.len() == 1 { "" } else { "s" },
                        first_three(&decided, moved)
                    ));
                }
                format!("{} ({})", c.case, why.join("; "))
            }
        })
        .collect();
    if failed.is_empty() {
        return None;
    }
    let missing = checks.iter().any(|c| !c.missing.is_empty());
    let decided = checks.iter().any(|c| {
        c.comparisons
            .iter()
            .any(|x| x.count(Status::DecisionChanged) > 0)
    });
    let mut hint = String::new();
    if missing {
        hint.push_str(&format!("; run `{update}` to write missing goldens"));
    }
    if decided {
        hint.push_str(&format!(
            "; `{accept} METRIC` accepts an intended change of a decision"
        ));
    }
    Some(format!(
        "{} of {} cases failed: {}{hint}",
        failed.len(),
        checks.len(),
        failed.join("; "),
    ))
}

/// Rewrites the goldens of a suite in `dir`: each case of `cases` run by `run`, its outputs
/// written to `dir/golden/` (created if need be) before the next case runs; the table of what
/// was written, one row per case (name, command, files).
pub fn regress_update<E: From<Error>>(
    dir: &Path,
    cases: &[Case],
    mut run: impl FnMut(&Case) -> Result<Outputs, E>,
) -> Result<String, E> {
    let golden = dir.join("golden");
    fs::create_dir_all(&golden)
        .map_err(|e| Error::Input(format!("{}: cannot create: {e}", golden.display())))?;
    let mut t = Table::new(&["case", "command", "written"]);
    for case in cases {
        let mut written = Vec::new();
        for g in case.goldens(dir, run(case)?) {
            write_text(&g.path, "regress update", &g.text)?;
            written.push(
                g.path
                    .strip_prefix(dir)
                    .unwrap_or(&g.path)
                    .display()
                    .to_string(),
            );
        }
        t.row(&[
            case.name.clone(),
            case.kind.as_str().to_string(),
            written.join(", "),
        ]);
    }
    let mut out = format!(
        "regress update: {} ({} cases)\n",
        dir.display(),
        cases.len()
    );
    out.push_str(&t.render());
    Ok(out)
}
