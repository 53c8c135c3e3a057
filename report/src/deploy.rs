//! `kvplan plan-deployment`'s answer: the cheapest deployment meeting the objectives, the
//! Pareto frontier, every shape's answer, and every candidate as CSV or JSON; the frontier as
//! an SVG.

use std::fmt::Write as _;

use kvplan_serve::capacity::Slo;
use kvplan_serve::deploy::{Candidate, Counts, Frontier, Outcome, Plan, ShapeResult, frontier};
use serde::Serialize;

use crate::error::Error;
use crate::render::Format;
use crate::render::{Table, csv_number, csv_text, json_line, secs};

/// Columns of the candidate CSV.
pub const CSV_HEADER: &[&str] = &[
    "shape",
    "hardware",
    "tensor_parallel_size",
    "layout",
    "router",
    "settings",
    "units",
    "replicas",
    "gpus",
    "outcome",
    "why",
    "usd_per_gpu_hour",
    "usd_per_hour",
    "ttft_p99_s",
    "tpot_p99_s",
    "e2e_p99_s",
    "goodput_rps",
    "input_tok_s",
    "output_tok_s",
    "usd_per_m_input_tokens",
    "usd_per_m_output_tokens",
    "usd_per_m_tokens",
    "tok_s_per_gpu",
    "tokens_per_usd",
    "watts",
    "joules_per_token",
    "worst_ratio",
    "engine_steps",
    "cheapest",
    "on_frontier",
];

fn settings(s: &ShapeResult) -> String {
    s.shape
        .settings
        .iter()
        .map(|(k, v)| format!("{k}={}", v.trim_matches('"')))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `3 x h100-sxm TP1 colocated vllm-dp` (units of the shape).
pub fn deployment(s: &ShapeResult, c: &Candidate) -> String {
    let sh = &s.shape;
    let what = match sh.layout {
        kvplan_serve::deploy::Layout::Colocated => {
            format!(
                "{} x {} TP{} colocated",
                c.units, sh.hardware, sh.tensor_parallel_size
            )
        }
        kvplan_serve::deploy::Layout::Disaggregated { prefill, decode } => format!(
            "{} prefill + {} decode x {} TP{}",
            prefill * c.units,
            decode * c.units,
            sh.hardware,
            sh.tensor_parallel_size
        ),
    };
    let set = settings(s);
    let sep = if set.is_empty() { "" } else { " " };
    format!("{what}, {}{sep}{set}", sh.router)
}

fn money(v: f64) -> String {
    if v >= 100.0 {
        format!("${v:.0}")
    } else {
        format!("${v:.2}")
    }
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or("-".into(), f)
}

/// Renders `plan` (complete, not a shard) under `slo`. `max_gpus` names the setting that caps
/// a candidate's GPUs, as the command line spells it (the table's counts name it).
pub fn render(
    plan: &Plan,
    slo: &Slo,
    confidence: Option<&kvplan_serve::deploy::PlanConfidence>,
    max_gpus: &str,
    format: Format,
) -> Result<String, Error> {
    let front = frontier(plan, slo);
    match format {
        Format::Json => render_json(plan, &front, confidence),
        Format::Csv => {
            let mut rows = Vec::new();
            for s in &plan.shapes {
                for c in &s.candidates {
                    rows.push(candidate_row(plan, &front, s, c));
                }
            }
            csv_text(CSV_HEADER, &rows)
        }
        Format::Table => {
            let mut text = table(plan, slo, &front, max_gpus);
            if let Some(c) = confidence {
                text.push_str(&confidence_lines(c));
            }
            Ok(text)
        }
    }
}

/// The plan as one JSON document: the plan itself, its counts, the cheapest candidate, the
/// frontier and (where asked for) the cheapest's bands.
fn render_json(
    plan: &Plan,
    front: &[Frontier],
    confidence: Option<&kvplan_serve::deploy::PlanConfidence>,
) -> Result<String, Error> {
    #[derive(Serialize)]
    struct Report<'a> {
        #[serde(flatten)]
        plan: &'a Plan,
        counts: Counts,
        cheapest: Option<Chosen>,
        frontier: &'a [Frontier],
        #[serde(skip_serializing_if = "Option::is_none")]
        confidence: Option<&'a kvplan_serve::deploy::PlanConfidence>,
    }
    #[derive(Serialize)]
    struct Chosen {
        shape: usize,
        units: u32,
        deployment: String,
        usd_per_hour: f64,
    }
    json_line(&Report {
        plan,
        counts: plan.counts(),
        cheapest: plan.cheapest().map(|(s, c)| Chosen {
            shape: s.shape.index,
            units: c.units,
            deployment: deployment(s, c),
            usd_per_hour: c.usd_per_hour,
        }),
        frontier: front,
        confidence,
    })
}

/// One candidate's CSV row ([`CSV_HEADER`]).
fn candidate_row(plan: &Plan, front: &[Frontier], s: &ShapeResult, c: &Candidate) -> Vec<String> {
    let on_front = front
        .iter()
        .any(|f| f.shape == s.shape.index && f.units == c.units);
    let is_cheapest = plan
        .cheapest()
        .is_some_and(|(cs, cc)| cs.shape.index == s.shape.index && cc.units == c.units);
    let n = |v: Option<f64>| v.map_or(String::new(), csv_number);
    let f = c.figures.as_ref();
    vec![
        s.shape.index.to_string(),
        s.shape.hardware.clone(),
        s.shape.tensor_parallel_size.to_string(),
        s.shape.layout.to_string(),
        s.shape.router.to_string(),
        settings(s),
        c.units.to_string(),
        c.replicas.to_string(),
        c.gpus.to_string(),
        c.outcome.as_str().to_string(),
        c.why.clone(),
        csv_number(s.usd_per_gpu_hour),
        csv_number(c.usd_per_hour),
        n(f.map(|f| f.ttft_p99_s)),
        n(f.map(|f| f.tpot_p99_s)),
        n(f.map(|f| f.e2e_p99_s)),
        n(f.map(|f| f.goodput_rps)),
        n(f.map(|f| f.input_tokens_per_s)),
        n(f.map(|f| f.output_tokens_per_s)),
        n(f.and_then(|f| f.usd_per_m_input)),
        n(f.and_then(|f| f.usd_per_m_output)),
        n(f.and_then(|f| f.usd_per_m_tokens)),
        n(f.map(|f| f.tokens_per_s_per_gpu)),
        n(f.and_then(|f| f.tokens_per_usd)),
        n(f.and_then(|f| f.watts)),
        n(f.and_then(|f| f.joules_per_token)),
        n(f.map(|f| f.worst())),
        f.map_or(String::new(), |f| f.steps.to_string()),
        is_cheapest.to_string(),
        on_front.to_string(),
    ]
}

fn table(plan: &Plan, slo: &Slo, front: &[Frontier], max_gpus: &str) -> String {
    let mut out = searched(plan, max_gpus);
    out.push('\n');
    answer(&mut out, plan, slo);
    out.push('\n');
    if !front.is_empty() {
        out.push_str(&frontier_table(plan, front));
        out.push('\n');
    }
    out.push_str(&shapes_table(plan));
    out
}

/// What was searched: the load, the shapes and what became of them, and the prices used.
fn searched(plan: &Plan, max_gpus: &str) -> String {
    let l = &plan.load;
    let k = plan.counts();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "deployment plan for {} at {:.3} req/s ({} requests per candidate; mean prompt {:.0}, \
         output {:.0} tokens) under {}",
        plan.model, l.rate_rps, l.requests, l.mean_input_tokens, l.mean_output_tokens, plan.slo
    );
    let _ = writeln!(
        out,
        "searched {} shapes: {} candidates simulated ({} met); not simulated: {} shapes that do \
         not run, {} unit counts below the roofline, {} shapes above {max_gpus} {}, {} shapes \
         at a latency floor",
        k.shapes,
        k.simulated,
        k.met,
        k.pruned_memory,
        k.pruned_roofline,
        k.pruned_max_gpus,
        plan.max_gpus,
        k.pruned_floor
    );
    for p in &plan.prices {
        let _ = writeln!(
            out,
            "price of {}: ${}/GPU-hour ({}{})",
            p.hardware,
            p.usd_per_gpu_hour,
            p.source,
            p.date
                .as_deref()
                .map_or(String::new(), |d| format!(", {d}"))
        );
    }
    out
}

/// The answer: the cheapest candidate with its figures against each objective, its costs and
/// what one unit fewer did; or, where none met the objectives, the nearest miss.
fn answer(out: &mut String, plan: &Plan, slo: &Slo) {
    let Some((s, c)) = plan.cheapest() else {
        let _ = writeln!(out, "no candidate meets {}", plan.slo);
        if let Some((s, c)) = plan.nearest_miss() {
            let _ = writeln!(
                out,
                "nearest miss: {} ({} GPU{}, {}/hour): {}",
                deployment(s, c),
                c.gpus,
                if c.gpus == 1 { "" } else { "s" },
                money(c.usd_per_hour),
                c.why
            );
        }
        return;
    };
    let f = c.figures.as_ref().expect("a met candidate has figures");
    let _ = writeln!(
        out,
        "cheapest: {} — {} GPU{}, {}/hour",
        deployment(s, c),
        c.gpus,
        if c.gpus == 1 { "" } else { "s" },
        money(c.usd_per_hour)
    );
    let terms: Vec<String> = slo
        .0
        .iter()
        .zip(&f.ratios)
        .map(|(t, r)| {
            format!(
                "{} {} ({:.0}% of {})",
                t.name(),
                secs(r * t.limit_s),
                100.0 * r,
                secs(t.limit_s)
            )
        })
        .collect();
    let _ = writeln!(out, "  {}", terms.join(", "));
    let _ = writeln!(
        out,
        "  ${}/M input tokens, ${}/M output tokens, ${}/M tokens; {:.0} tokens/s per GPU, \
         {} tokens per ${}",
        opt(f.usd_per_m_input, |v| format!("{v:.3}")),
        opt(f.usd_per_m_output, |v| format!("{v:.3}")),
        opt(f.usd_per_m_tokens, |v| format!("{v:.3}")),
        f.tokens_per_s_per_gpu,
        opt(f.tokens_per_usd, |v| format!("{v:.0}")),
        match (f.watts, f.joules_per_token) {
            (Some(w), Some(j)) => format!("; {w:.0} W of GPUs at TDP, {j:.3} J per token"),
            _ => String::new(),
        }
    );
    let fewer = s
        .candidates
        .iter()
        .find(|o| o.units == c.units - 1 && o.outcome != Outcome::Met);
    let _ = writeln!(
        out,
        "  one unit fewer: {}",
        match fewer {
            Some(o) if o.outcome == Outcome::Missed => format!("missed ({})", o.why),
            Some(o) => format!("not simulated ({})", o.why),
            None if c.units <= 1 => "none (one unit)".to_string(),
            None => "not tried".to_string(),
        }
    );
}

/// The Pareto frontier (cost against p99 TTFT and p99 TPOT), one met candidate a row.
fn frontier_table(plan: &Plan, front: &[Frontier]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Pareto frontier (cost against p99 TTFT and p99 TPOT, candidates that met the objectives):"
    );
    let mut t = Table::new(&[
        "deployment",
        "GPUs",
        "$/hour",
        "TTFT p99",
        "TPOT p99",
        "binding",
    ]);
    for p in front {
        let s = &plan.shapes[p.shape];
        let c = s
            .candidates
            .iter()
            .find(|c| c.units == p.units && c.outcome == Outcome::Met)
            .expect("a frontier point is a met candidate");
        t.row(&[
            deployment(s, c),
            c.gpus.to_string(),
            money(p.usd_per_hour),
            secs(p.ttft_p99_s),
            secs(p.tpot_p99_s),
            format!("{} at {:.0}%", p.binding.term, 100.0 * p.binding.ratio),
        ]);
    }
    out.push_str(&t.render());
    out
}

/// Each shape's fewest units meeting the objectives, or why none did.
fn shapes_table(plan: &Plan) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "each shape's fewest units meeting the objectives:");
    let mut t = Table::new(&[
        "shape",
        "units",
        "GPUs",
        "$/hour",
        "TTFT p99",
        "TPOT p99",
        "or why none",
    ]);
    for s in &plan.shapes {
        let label = s.shape.label();
        match s.best_units.and_then(|u| {
            s.candidates
                .iter()
                .find(|c| c.units == u && c.outcome == Outcome::Met)
        }) {
            Some(c) => {
                let f = c.figures.as_ref().expect("met has figures");
                t.row(&[
                    label,
                    c.units.to_string(),
                    c.gpus.to_string(),
                    money(c.usd_per_hour),
                    secs(f.ttft_p99_s),
                    secs(f.tpot_p99_s),
                    String::new(),
                ]);
            }
            None => {
                let why = s
                    .candidates
                    .iter()
                    .rev()
                    .find(|c| c.outcome != Outcome::PrunedRoofline)
                    .map_or(String::new(), |c| match c.outcome {
                        Outcome::Missed => format!("{} units missed: {}", c.units, c.why),
                        _ => c.why.clone(),
                    });
                t.row(&[
                    label,
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    "-".into(),
                    why,
                ]);
            }
        }
    }
    out.push_str(&t.render());
    out
}

/// The frontier as an SVG: every simulated candidate's $/hour against its p99 TTFT (met and
/// missed apart), the frontier joined.
pub fn frontier_svg(plan: &Plan, slo: &Slo) -> Result<String, Error> {
    use kvplan_plot::Series;
    let front = frontier(plan, slo);
    let pts = |met: bool| -> Vec<(f64, f64)> {
        plan.simulated()
            .filter(|(_, c)| (c.outcome == Outcome::Met) == met)
            .filter_map(|(_, c)| {
                let f = c.figures.as_ref()?;
                f.ttft_p99_s
                    .is_finite()
                    .then_some((c.usd_per_hour, f.ttft_p99_s))
            })
            .collect()
    };
    let mut series = vec![Series::new(
        "frontier",
        front
            .iter()
            .map(|p| (p.usd_per_hour, p.ttft_p99_s))
            .collect(),
    )];
    series.push(Series::scatter("met", pts(true)));
    series.push(Series::scatter("missed", pts(false)));
    series.retain(|s| !s.points.is_empty());
    kvplan_plot::line_chart(
        &series,
        "cost ($/hour)",
        "TTFT p99 (s)",
        &format!("{} under {}", plan.model, plan.slo),
    )
    .map_err(|e| Error::Failure(format!("cannot draw the frontier: {e}")))
}

/// The cheapest candidate's bands: each objective `value (lo-hi) of limit`, whether the band
/// crosses it, and how many perturbed runs met every objective.
fn confidence_lines(c: &kvplan_serve::deploy::PlanConfidence) -> String {
    let show = kvplan_serve::capacity::show_seconds;
    let mut text = format!(
        "confidence ({:.0}% bands, {} runs of the cheapest with the kernel costs perturbed; docs/DESIGN.md, \"Error bands\"):\n",
        100.0 * c.coverage,
        c.draws
    );
    for o in &c.objectives {
        let band = match &o.band {
            Some(b) => format!("{} ({}-{})", show(b.value), show(b.lo), show(b.hi)),
            None => "- (a perturbed run did not keep up)".into(),
        };
        text.push_str(&format!(
            "  {} {band} of {}: {}\n",
            o.objective,
            show(o.limit_s),
            if o.crosses {
                "the band crosses the limit"
            } else {
                "within the limit across the band"
            }
        ));
    }
    text.push_str(&format!(
        "  every objective held in {} of {} perturbed runs{}\n",
        c.draws_met,
        c.draws,
        if c.objectives.iter().any(|o| o.crosses) {
            "; one unit more, or a looser objective, for more certainty"
        } else {
            ""
        }
    ));
    text
}
