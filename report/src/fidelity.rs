//! A fidelity report over many measured runs (`kvplan_serve::fidelity`): a table per file, the
//! summary by model, GPU, tensor-parallel size, load level and metric; the runs as CSV (one row
//! per run and metric), the summary as CSV, all of it as JSON; predicted against measured as
//! SVG.

use std::fmt::Write as _;

use kvplan_serve::fidelity::{Fidelity, GroupSummary, RunKind, RunRow};
use kvplan_serve::runs::MetricError;
use serde::Serialize;

use crate::error::Error;
use crate::render::*;

/// What a missing figure prints as (a statistic of no error, a band not yet given).
pub const NONE: &str = "—";

/// A stage left out, worded by the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedStage {
    /// The file.
    pub file: String,
    /// The stage.
    pub stage: String,
    /// Why, one line.
    pub why: String,
}

/// The report in `format`: tables (one per file, then the summary), the runs' CSV, or JSON;
/// `what` names the command in the first line.
pub fn render(
    what: &str,
    f: &Fidelity,
    skipped: &[SkippedStage],
    format: Format,
) -> Result<String, Error> {
    match format {
        Format::Json => {
            #[derive(Serialize)]
            struct Report<'a> {
                #[serde(flatten)]
                fidelity: &'a Fidelity,
                skipped: &'a [SkippedStage],
            }
            json_line(&Report {
                fidelity: f,
                skipped,
            })
        }
        Format::Csv => runs_csv(f),
        Format::Table => Ok(tables(what, f, skipped)),
    }
}

fn opt_bool(b: Option<bool>) -> String {
    b.map_or(String::new(), |b| b.to_string())
}

/// One row per run and metric: the run's keys, predicted, measured, error, and whether the
/// error is in the summary's statistics.
pub fn runs_csv(f: &Fidelity) -> Result<String, Error> {
    let header = [
        "file",
        "run",
        "kind",
        "model",
        "gpu",
        "tp",
        "rate_rps",
        "load",
        "load_fraction",
        "metric",
        "predicted",
        "measured",
        "error",
        "counted",
        "overloaded_predicted",
        "overloaded_measured",
    ];
    let mut rows = Vec::new();
    for r in &f.runs {
        for m in &r.metrics {
            rows.push(vec![
                r.file.clone(),
                r.run.clone(),
                kind(r.kind).into(),
                r.model.clone(),
                r.gpu.clone(),
                r.tp.to_string(),
                csv_number(r.rate_rps),
                r.load.to_string(),
                csv_number(r.load_fraction),
                m.metric.to_string(),
                csv_number(m.predicted),
                csv_number(m.measured),
                csv_number(m.error),
                r.counts(m).to_string(),
                opt_bool(r.overloaded_predicted),
                opt_bool(r.overloaded_measured),
            ]);
        }
    }
    csv_text(&header, &rows)
}

/// The summary, one row per group (`all` in a key the group spans); statistics of no error
/// and band coverage not given are empty cells.
pub fn summary_csv(f: &Fidelity) -> Result<String, Error> {
    let header = [
        "model",
        "gpu",
        "tp",
        "load",
        "metric",
        "runs",
        "count",
        "median_abs_error",
        "p90_abs_error",
        "bias",
        "overload_agree",
        "overload_judged",
        "band_coverage",
    ];
    let num = |x: Option<f64>| x.map_or(String::new(), csv_number);
    let rows: Vec<Vec<String>> = (f.summary.iter())
        .map(|g| {
            let (model, gpu, tp, load) = keys(g);
            vec![
                model,
                gpu,
                tp,
                load,
                g.metric.to_string(),
                g.runs.to_string(),
                g.count.to_string(),
                num(g.median_abs_error),
                num(g.p90_abs_error),
                num(g.bias),
                g.overload_agree.to_string(),
                g.overload_judged.to_string(),
                num(g.band_coverage),
            ]
        })
        .collect();
    csv_text(&header, &rows)
}

fn kind(k: RunKind) -> &'static str {
    match k {
        RunKind::Stage => "stage",
        RunKind::Requests => "requests",
    }
}

/// A group's keys as text (`all` where it spans every value).
fn keys(g: &GroupSummary) -> (String, String, String, String) {
    let all = || "all".to_string();
    (
        g.model.clone().unwrap_or_else(all),
        g.gpu.clone().unwrap_or_else(all),
        g.tp.map_or_else(all, |t| t.to_string()),
        g.load.map_or_else(all, |l| l.to_string()),
    )
}

/// `pred / meas unit (+err%)` of one metric, in ms for TTFT and TPOT, s for E2E, req/s for
/// throughput; a figure that is not a number as `-`.
fn cell(m: Option<&MetricError>) -> String {
    let Some(m) = m else {
        return "-".into();
    };
    let (k, unit, digits) = match m.metric {
        "e2e_mean_s" => (1.0, "s", 1),
        "requests_per_s" => (1.0, "req/s", 2),
        _ => (1e3, "ms", 1),
    };
    let show = |x: f64| {
        if x.is_finite() {
            format!("{:.*}", digits, x * k)
        } else {
            "-".into()
        }
    };
    let err = if m.error.is_finite() {
        format!(" ({:+.0}%)", m.error * 100.0)
    } else {
        String::new()
    };
    format!("{} / {} {unit}{err}", show(m.predicted), show(m.measured))
}

fn on(r: &RunRow) -> String {
    format!("{}, {}, TP {}", r.model, r.gpu, r.tp)
}

/// A percentage of a fraction, `—` for none.
fn pct_or_none(x: Option<f64>, signed: bool) -> String {
    match x {
        Some(x) if signed => format!("{:+.1}%", x * 100.0),
        Some(x) => pct(x),
        None => NONE.into(),
    }
}

fn tables(what: &str, f: &Fidelity, skipped: &[SkippedStage]) -> String {
    let stages = f.runs.iter().filter(|r| r.kind == RunKind::Stage).count();
    let requests = f.runs.len() - stages;
    let plural =
        |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let kinds: Vec<String> = [
        (stages, plural(stages, "stage", "stages")),
        (
            requests,
            plural(requests, "per-request run", "per-request runs"),
        ),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(_, s)| s)
    .collect();
    let mut text = format!(
        "{what}: {} from {} replayed ({})\n",
        plural(f.runs.len(), "run", "runs"),
        plural(f.files.len(), "file", "files"),
        kinds.join(", "),
    );
    for file in &f.files {
        let rows: Vec<&RunRow> = f.runs.iter().filter(|r| r.file == *file).collect();
        let _ = writeln!(text);
        match rows.as_slice() {
            [r] if r.kind == RunKind::Requests => text.push_str(&requests_table(r)),
            _ => text.push_str(&stages_table(file, &rows)),
        }
    }
    let _ = writeln!(
        text,
        "\nsummary: |error| median and p90, bias (median signed error), overloads agreeing; latencies leave out stages measured overloaded"
    );
    let mut t = Table::new(&[
        "model",
        "GPU",
        "TP",
        "load",
        "metric",
        "n",
        "median |err|",
        "p90 |err|",
        "bias",
        "overload",
        "band coverage",
    ]);
    for g in &f.summary {
        let (model, gpu, tp, load) = keys(g);
        t.row(&[
            model,
            gpu,
            tp,
            load,
            g.metric.to_string(),
            g.count.to_string(),
            pct_or_none(g.median_abs_error, false),
            pct_or_none(g.p90_abs_error, false),
            pct_or_none(g.bias, true),
            if g.overload_judged > 0 {
                format!("{}/{}", g.overload_agree, g.overload_judged)
            } else {
                NONE.into()
            },
            pct_or_none(g.band_coverage, false),
        ]);
    }
    text.push_str(&t.render());
    for s in skipped {
        let _ = writeln!(text, "skipped {}: {}: {}", s.file, s.stage, s.why);
    }
    text
}

fn stages_table(file: &str, rows: &[&RunRow]) -> String {
    let mut text = format!(
        "{file}: {} replayed with their settings\n",
        match rows.len() {
            1 => "1 stage".to_string(),
            n => format!("{n} stages"),
        }
    );
    let mut t = Table::new(&[
        "run",
        "on",
        "req/s",
        "load",
        "TTFT mean pred / meas",
        "TPOT pred / meas",
        "E2E mean pred / meas",
        "throughput pred / meas",
        "overloaded pred / meas",
    ]);
    for r in rows {
        let m = |name: &str| r.metrics.iter().find(|m| m.metric == name);
        t.row(&[
            r.run.clone(),
            on(r),
            format!("{}", r.rate_rps),
            r.load.to_string(),
            cell(m("ttft_mean_s")),
            cell(m("tpot_mean_s")),
            cell(m("e2e_mean_s")),
            cell(m("requests_per_s")),
            format!(
                "{} / {}",
                r.overloaded_predicted.map_or("-".into(), |b| b.to_string()),
                r.overloaded_measured.map_or("-".into(), |b| b.to_string())
            ),
        ]);
    }
    text.push_str(&t.render());
    text
}

fn requests_table(r: &RunRow) -> String {
    let mut text = format!(
        "{}: a per-request run on {}, {:.3} req/s offered\n",
        r.file,
        on(r),
        r.rate_rps
    );
    let mut t = Table::new(&["metric", "predicted", "measured", "error"]);
    for m in &r.metrics {
        t.row(&[
            m.metric.to_string(),
            metric_value(m.metric, m.predicted),
            metric_value(m.metric, m.measured),
            if m.error.is_finite() {
                format!("{:+.1}%", m.error * 100.0)
            } else {
                "-".into()
            },
        ]);
    }
    text.push_str(&t.render());
    if let (Some(e2e), Some(ttft)) = (r.median_request_e2e_error, r.median_request_ttft_error) {
        let _ = writeln!(
            text,
            "per request, median |error|: E2E {:.1}%, TTFT {:.1}%",
            e2e * 100.0,
            ttft * 100.0
        );
    }
    text
}

/// The metrics the SVG shows: title and unit of each panel.
const PANELS: [(&str, &str, &str); 4] = [
    ("ttft_mean_s", "TTFT mean", "s"),
    ("tpot_mean_s", "TPOT mean", "s"),
    ("e2e_mean_s", "E2E mean", "s"),
    ("requests_per_s", "throughput", "req/s"),
];

/// Predicted against measured: a panel per metric (TTFT mean, TPOT mean, E2E mean, throughput),
/// one point per run, a colour per model, GPU and TP; runs the real server could not keep up
/// with in a series of their own.
pub fn parity_svg(f: &Fidelity) -> Result<String, Error> {
    use kvplan_plot::{ParityPanel, Series};
    let overloaded = "measured overloaded";
    let label = |r: &RunRow| {
        if r.overloaded_measured == Some(true) {
            overloaded.to_string()
        } else {
            on(r)
        }
    };
    let mut names: Vec<String> = f.runs.iter().map(label).collect();
    names.sort();
    names.dedup();
    if let Some(i) = names.iter().position(|n| n == overloaded) {
        let n = names.remove(i);
        names.push(n);
    }
    let panels: Vec<ParityPanel> = PANELS
        .iter()
        .map(|&(metric, title, unit)| ParityPanel {
            metric: title.into(),
            unit: unit.into(),
            series: (names.iter())
                .map(|name| {
                    let points = (f.runs.iter())
                        .filter(|r| label(r) == *name)
                        .flat_map(|r| r.metrics.iter().filter(|m| m.metric == metric))
                        .map(|m| (m.measured, m.predicted))
                        .filter(|(x, y)| x.is_finite() && y.is_finite())
                        .collect();
                    Series::scatter(name.clone(), points)
                })
                .collect(),
        })
        .collect();
    kvplan_plot::parity_chart(&panels, "predicted against measured")
        .map_err(|e| Error::Failure(format!("cannot draw predicted against measured: {e}")))
}
