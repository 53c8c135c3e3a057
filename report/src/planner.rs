//! The planner's reports as the command line prints them: plans (`plan kvpr|headinfer|runahead`),
//! simulated and measured runs (`simulate`, `exec`), `simulate`'s comparison, validation and context capacity.

use std::fmt::Write as _;
use std::path::Path;

use kvplan_calibrate::Comparison as Validation;
use kvplan_planner::headinfer::{CapacityReport, HeadInferDetails};
use kvplan_planner::plan::{KvprOptions, Plan, split_problem, splits};
use kvplan_planner::report::{RunReport, recompute_fraction, saved_fraction, ttft_speedups};
use kvplan_planner::run::{Comparison, SimulatedRun};
use kvplan_planner::runahead::{RunaheadDetails, RunaheadOptions};
use kvplan_planner::scenario::Scenario;
use kvplan_vocab::schedule::Category;
use serde_json::json;

use crate::error::Error;
use crate::render::*;

/// One line on a plan: model, hardware, batch, order, where the weights live.
pub fn describe(p: &Plan) -> String {
    format!(
        "{} on {}: batch {}{}, prompt {}, gen {} ({}, weights {}, {} host memory)",
        p.model,
        p.hardware,
        p.shape.batch,
        if p.shape.gpu_batches > 1 {
            format!(" x {} GPU batches", p.shape.gpu_batches)
        } else {
            String::new()
        },
        p.shape.prompt,
        p.shape.gen_len,
        match p.order {
            kvplan_planner::plan::Order::RowByRow => "row-by-row",
            kvplan_planner::plan::Order::ColumnByColumn => "column-by-column",
        },
        if p.weights_on_gpu {
            "on GPU"
        } else {
            "offloaded"
        },
        match p.host_memory {
            kvplan_vocab::schedule::HostMemory::Pinned => "pinned",
            kvplan_vocab::schedule::HostMemory::Pageable => "pageable",
        }
    )
}

/// `plan kvpr`: the split of every decode step, and why step 1's is what it is (its split
/// problem on the scenario's cost model, explained by the planner's reason).
pub fn kvpr_plan(sc: &Scenario, p: &Plan, format: Format) -> Result<String, Error> {
    let why = splits(&p.decisions).first().map(|s| {
        let (gpu, memory, model) = (
            p.weights_on_gpu,
            sc.options.memory_kinds(),
            sc.options.get::<KvprOptions>().split_model,
        );
        let problem = split_problem(
            &sc.cost_model(),
            &sc.model,
            &sc.shape,
            gpu,
            memory,
            1,
            model,
        );
        s.split.reason.explain(&problem, &s.split)
    });
    let steps: Vec<serde_json::Value> = splits(&p.decisions)
        .iter()
        .map(|s| {
            json!({
                "step": s.step,
                "seq_len": s.seq_len,
                "recompute_tokens": s.split.recompute_tokens,
                "recompute_fraction": recompute_fraction(s),
                "layer_s": s.split.layer_s,
                "transfer_only_layer_s": s.split.transfer_only_s,
                "bound": s.split.bound,
                "reason": s.split.reason,
            })
        })
        .collect();
    match format {
        Format::Json => json_line(&json!({
            "strategy": "kvpr",
            "model": p.model,
            "hardware": p.hardware,
            "batch": p.shape.batch,
            "gpu_batches": p.shape.gpu_batches,
            "prompt": p.shape.prompt,
            "gen": p.shape.gen_len,
            "order": p.order,
            "weights_on_gpu": p.weights_on_gpu,
            "host_memory": p.host_memory,
            "act_bytes_per_token_layer": sc.model.act_bytes_per_token_layer(),
            "kv_bytes_per_token_layer": sc.model.kv_bytes_per_token_layer(),
            "explanation": why,
            "memory": p.memory,
            "peak_gpu_bytes": p.memory.gpu_bytes(),
            "peak_host_bytes": p.memory.host_bytes(),
            "steps": steps,
            "notes": p.notes,
        })),
        Format::Csv => csv_text(
            &[
                "step",
                "seq_len",
                "recompute_tokens",
                "recompute_fraction",
                "layer_s",
                "transfer_only_layer_s",
                "bound",
                "reason",
            ],
            &splits(&p.decisions)
                .iter()
                .map(|s| {
                    vec![
                        s.step.to_string(),
                        s.seq_len.to_string(),
                        s.split.recompute_tokens.to_string(),
                        recompute_fraction(s).to_string(),
                        s.split.layer_s.to_string(),
                        s.split.transfer_only_s.to_string(),
                        serde_json::to_value(s.split.bound)
                            .unwrap()
                            .as_str()
                            .unwrap()
                            .to_string(),
                        serde_json::to_value(s.split.reason)
                            .unwrap()
                            .as_str()
                            .unwrap()
                            .to_string(),
                    ]
                })
                .collect::<Vec<_>>(),
        ),
        Format::Table => {
            let mut out = String::new();
            let _ = writeln!(out, "KVPR plan: {}", describe(p));
            let _ = writeln!(
                out,
                "per token and layer: activations {} B, K+V {} B (GQA group {})",
                sc.model.act_bytes_per_token_layer(),
                sc.model.kv_bytes_per_token_layer(),
                sc.model.gqa_group()
            );
            if let Some(why) = &why {
                let _ = writeln!(out, "why (step 1): {why}");
            }
            memory_and_notes(&mut out, p);
            out.push('\n');
            let mut t = Table::new(&[
                "step",
                "s'",
                "recompute l",
                "l/s'",
                "layer time",
                "transfer-only",
                "saved",
                "bound",
            ]);
            for s in splits(&p.decisions) {
                t.row(&[
                    s.step.to_string(),
                    s.seq_len.to_string(),
                    s.split.recompute_tokens.to_string(),
                    pct(recompute_fraction(s)),
                    secs(s.split.layer_s),
                    secs(s.split.transfer_only_s),
                    pct(saved_fraction(s)),
                    serde_json::to_value(s.split.bound)
                        .unwrap()
                        .as_str()
                        .unwrap()
                        .to_string(),
                ]);
            }
            out.push_str(&t.render());
            Ok(out)
        }
    }
}

/// `plan <strategy>` for a strategy with no report of its own: the plan, its decisions (JSON
/// under their key; the table prints them as JSON too), memory and notes.
pub fn any_plan(p: &Plan, format: Format) -> Result<String, Error> {
    let decisions = p.decisions.details().map(|d| (d.key(), d.to_json()));
    let fields = [
        ("strategy", json!(p.strategy)),
        ("model", json!(p.model)),
        ("hardware", json!(p.hardware)),
        ("batch", json!(p.shape.batch)),
        ("gpu_batches", json!(p.shape.gpu_batches)),
        ("prompt", json!(p.shape.prompt)),
        ("gen", json!(p.shape.gen_len)),
        ("order", json!(p.order)),
        ("weights_on_gpu", json!(p.weights_on_gpu)),
        ("host_memory", json!(p.host_memory)),
        ("peak_gpu_bytes", json!(p.memory.gpu_bytes())),
        ("peak_host_bytes", json!(p.memory.host_bytes())),
    ];
    match format {
        Format::Json => {
            let mut v: serde_json::Map<String, serde_json::Value> = fields
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect();
            v.insert("memory".into(), json!(p.memory));
            v.insert("notes".into(), json!(p.notes));
            if let Some((key, d)) = decisions {
                v.insert(key.into(), d);
            }
            json_line(&v)
        }
        Format::Csv => {
            let cell = |v: &serde_json::Value| match v {
                serde_json::Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            csv_text(
                &fields.each_ref().map(|(k, _)| *k),
                &[fields.iter().map(|(_, v)| cell(v)).collect::<Vec<_>>()],
            )
        }
        Format::Table => {
            let mut out = String::new();
            let _ = writeln!(out, "{} plan: {}", p.strategy, describe(p));
            if let Some((key, d)) = decisions {
                let _ = writeln!(out, "{key}: {d}");
            }
            memory_and_notes(&mut out, p);
            Ok(out)
        }
    }
}

/// The table's last lines of every plan: its memory (GPU by kind, host) and its notes.
fn memory_and_notes(out: &mut String, p: &Plan) {
    let _ = writeln!(
        out,
        "memory: GPU {} ({}), host {}",
        gib(p.memory.gpu_bytes()),
        p.memory
            .gpu
            .iter()
            .map(|i| format!("{} {}", i.kind.name(), gib(i.bytes)))
            .collect::<Vec<_>>()
            .join(", "),
        gib(p.memory.host_bytes())
    );
    for n in &p.notes {
        let _ = writeln!(out, "note: {n}");
    }
}

/// The JSON of a plan of one context (`plan runahead`, `plan headinfer`): what both say —
/// strategy, model, hardware, context, the planner's `details`, memory and notes — with the
/// strategy's own `fields`.
fn context_plan_json(
    strategy: &str,
    sc: &Scenario,
    p: &Plan,
    details: &impl serde::Serialize,
    fields: serde_json::Value,
) -> Result<String, Error> {
    let mut v = json!({
        "strategy": strategy,
        "model": p.model,
        "hardware": p.hardware,
        "context": sc.shape.prompt,
        "details": details,
        "memory": p.memory,
        "notes": p.notes,
    });
    if let (Some(v), serde_json::Value::Object(fields)) = (v.as_object_mut(), fields) {
        v.extend(fields);
    }
    json_line(&v)
}

/// `plan runahead`: the context partition and TTFT per method.
pub fn runahead_plan(sc: &Scenario, p: &Plan, format: Format) -> Result<String, Error> {
    let d = p
        .decisions
        .get::<RunaheadDetails>()
        .ok_or_else(|| Error::Failure("the KV-Runahead planner returned no decisions".into()))?;
    match format {
        Format::Json => context_plan_json(
            "runahead",
            sc,
            p,
            d,
            json!({
                "devices": sc.options.get::<RunaheadOptions>().devices,
                "devices_used": d.devices_used,
                "partition": d.partition,
                "ttft_s": d.ttft_s,
                "speedup": d.speedup,
            }),
        ),
        Format::Csv => csv_text(
            &["device", "tokens"],
            &d.partition
                .iter()
                .enumerate()
                .map(|(i, t)| vec![i.to_string(), t.to_string()])
                .collect::<Vec<_>>(),
        ),
        Format::Table => {
            let mut out = String::new();
            let _ = writeln!(
                out,
                "KV-Runahead plan: {} on {}, context {} tokens, {} devices offered, {} used",
                p.model,
                p.hardware,
                sc.shape.prompt,
                sc.options.get::<RunaheadOptions>().devices,
                d.devices_used
            );
            let _ = writeln!(
                out,
                "partition (tokens per device, in chain order): {:?}",
                d.partition
            );
            let mut t = Table::new(&["method", "TTFT", "vs one device"]);
            for (method, v, speedup) in ttft_speedups(&d.ttft_s) {
                let name = match method {
                    "runahead" => "runahead (chosen)",
                    "single_device" => "single device",
                    "even_chain" => "even chunks, same chain",
                    "tensor_parallel" => "tensor parallel + all-gather",
                    other => other,
                };
                t.row(&[name.to_string(), secs(v), format!("x{speedup:.3}")]);
            }
            out.push_str(&t.render());
            let _ = writeln!(out, "speed-up over one device: x{:.3}", d.speedup);
            let _ = writeln!(
                out,
                "decode device: {} (holds the whole KV cache); peer link traffic {} ({:.1} GB/s): {:?} bytes sent per device",
                d.decode_device,
                gib(d.peer_bytes),
                d.link_gbps,
                d.peer_bytes_by_device
            );
            memory_and_notes(&mut out, p);
            Ok(out)
        }
    }
}

/// `plan headinfer`: head groups, chunk and memory.
pub fn headinfer_plan(sc: &Scenario, p: &Plan, format: Format) -> Result<String, Error> {
    let d = p
        .decisions
        .get::<HeadInferDetails>()
        .ok_or_else(|| Error::Failure("the HeadInfer planner returned no decisions".into()))?;
    match format {
        Format::Json => context_plan_json(
            "headinfer",
            sc,
            p,
            d,
            json!({
                "peak_gpu_bytes": p.memory.gpu_bytes(),
                "peak_host_bytes": p.memory.host_bytes(),
                "ops": p.schedule.len(),
            }),
        ),
        Format::Csv => csv_text(
            &[
                "context",
                "heads_per_group",
                "chunk_tokens",
                "peak_gpu_bytes",
                "peak_host_bytes",
            ],
            &[vec![
                sc.shape.prompt.to_string(),
                d.heads_per_group.to_string(),
                d.chunk_tokens.to_string(),
                p.memory.gpu_bytes().to_string(),
                p.memory.host_bytes().to_string(),
            ]],
        ),
        Format::Table => {
            let mut out = String::new();
            let _ = writeln!(
                out,
                "HeadInfer plan: {} on {}, context {} tokens, batch {}, gen {}",
                p.model, p.hardware, sc.shape.prompt, sc.shape.batch, sc.shape.gen_len
            );
            let _ = writeln!(
                out,
                "KV heads per offload group: {} ({} groups per layer); prefill chunk: {} tokens",
                d.heads_per_group, d.groups_per_layer, d.chunk_tokens
            );
            memory_and_notes(&mut out, p);
            Ok(out)
        }
    }
}

/// One line on the planner's decisions: KVPR's split across the decode steps, HeadInfer's
/// head groups and chunk, KV-Runahead's partition and TTFT.
pub fn split_summary(p: &Plan) -> Option<String> {
    if let Some(d) = p.decisions.get::<RunaheadDetails>() {
        return Some(format!(
            "runahead: {} devices used, partition {:?}; TTFT runahead {}, one device {}, even chain {}, tensor parallel {} (x{:.3} over one device)",
            d.devices_used,
            d.partition,
            secs(d.ttft_s.runahead),
            secs(d.ttft_s.single_device),
            secs(d.ttft_s.even_chain),
            secs(d.ttft_s.tensor_parallel),
            d.speedup
        ));
    }
    if let Some(d) = p.decisions.get::<HeadInferDetails>() {
        return Some(format!(
            "headinfer: {} KV heads per offload group, prefill chunk {} tokens",
            d.heads_per_group, d.chunk_tokens
        ));
    }
    let (first, last) = (splits(&p.decisions).first()?, splits(&p.decisions).last()?);
    let frac = |s| pct(recompute_fraction(s));
    Some(format!(
        "kvpr split: recompute {} of {} cached tokens per layer at step {} ({}) .. {} of {} at step {} ({}); `kvplan plan kvpr` shows every step and why",
        first.split.recompute_tokens,
        first.seq_len,
        first.step,
        frac(first),
        last.split.recompute_tokens,
        last.seq_len,
        last.step,
        frac(last)
    ))
}

pub const CSV_FIELDS: [&str; 24] = [
    "strategy",
    "model",
    "hardware",
    "source",
    "batch",
    "gpu_batches",
    "prompt",
    "gen",
    "weights_on_gpu",
    "prefill_latency_s",
    "decode_latency_s",
    "decode_throughput_tok_s",
    "total_latency_s",
    "gpu_busy_fraction",
    "gpu_idle_s",
    "h2d_bytes",
    "d2h_bytes",
    "peak_gpu_bytes",
    "peak_host_bytes",
    "mean_recompute_fraction",
    "load_weight_s",
    "load_cache_s",
    "load_activation_s",
    "compute_s",
];

pub fn csv_row(r: &RunReport) -> Vec<String> {
    let b = &r.decode_breakdown;
    vec![
        r.strategy.clone(),
        r.model.clone(),
        r.hardware.clone(),
        r.source.clone(),
        r.batch.to_string(),
        r.gpu_batches.to_string(),
        r.prompt.to_string(),
        r.gen_len.to_string(),
        r.weights_on_gpu.to_string(),
        r.prefill_latency_s.to_string(),
        r.decode_latency_s.to_string(),
        r.decode_throughput_tok_s.to_string(),
        r.total_latency_s.to_string(),
        r.gpu_busy_fraction.to_string(),
        r.gpu_idle_s.to_string(),
        r.h2d_bytes.to_string(),
        r.d2h_bytes.to_string(),
        r.peak_gpu_bytes.to_string(),
        r.peak_host_bytes.to_string(),
        r.mean_recompute_fraction.to_string(),
        b.load_weight_s.to_string(),
        b.load_cache_s.to_string(),
        b.load_activation_s.to_string(),
        b.compute_s.to_string(),
    ]
}

pub fn metric_rows(r: &RunReport) -> Vec<(&'static str, String)> {
    let b = &r.decode_breakdown;
    let mut v = vec![
        ("prefill latency (TTFT)", secs(r.prefill_latency_s)),
        ("decode latency", secs(r.decode_latency_s)),
        (
            "decode throughput",
            format!("{:.1} tok/s", r.decode_throughput_tok_s),
        ),
        ("GPU busy (decode)", pct(r.gpu_busy_fraction)),
        ("GPU idle (decode)", secs(r.gpu_idle_s)),
        (
            "H2D link busy (decode)",
            r.stream_busy_fraction
                .get("gpu0.h2d")
                .map_or("-".into(), |f| pct(*f)),
        ),
        ("recomputed (mean l/s')", pct(r.mean_recompute_fraction)),
        ("H2D traffic", gib(r.h2d_bytes)),
        ("D2H traffic", gib(r.d2h_bytes)),
        ("peak GPU memory", gib(r.peak_gpu_bytes)),
        ("peak host memory", gib(r.peak_host_bytes)),
    ];
    for c in Category::ALL {
        let secs_ = b.get(c);
        if secs_ > 0.0 || matches!(c, Category::Compute) {
            let name: &'static str = match c {
                Category::LoadWeight => "decode load-weight",
                Category::LoadCache => "decode load-cache",
                Category::LoadActivation => "decode load-activation",
                Category::Compute => "decode compute",
                Category::StoreCache => "decode store-cache",
                Category::StoreActivation => "decode store-activation",
                Category::PeerTransfer => "decode peer-transfer",
            };
            v.push((name, secs(secs_)));
        }
    }
    v.push(("schedule ops", r.ops.to_string()));
    v
}

/// `simulate`: one simulated run (`trace`: where its timeline was written).
pub fn simulated_run(
    s: &SimulatedRun,
    trace: Option<&Path>,
    format: Format,
) -> Result<String, Error> {
    let r = &s.report;
    match format {
        Format::Json => json_line(r),
        Format::Csv => csv_text(&CSV_FIELDS, &[csv_row(r)]),
        Format::Table => {
            let mut out = String::new();
            let _ = writeln!(out, "{} (simulated): {}", r.strategy, describe(&s.plan));
            let mut t = Table::new(&["metric", "value"]);
            for (k, v) in metric_rows(r) {
                t.row(&[k.to_string(), v]);
            }
            out.push_str(&t.render());
            if let Some(line) = split_summary(&s.plan) {
                let _ = writeln!(out, "{line}");
            }
            for n in &r.notes {
                let _ = writeln!(out, "note: {n}");
            }
            if let Some(path) = trace {
                let _ = writeln!(
                    out,
                    "timeline written to {} (open in https://ui.perfetto.dev)",
                    path.display()
                );
            }
            Ok(out)
        }
    }
}

/// `simulate`'s comparison: the strategies side by side (`trace`: where the timelines were written).
pub fn comparison(
    sc: &Scenario,
    c: &Comparison,
    trace: Option<&Path>,
    format: Format,
) -> Result<String, Error> {
    let (done, skipped) = (&c.runs, &c.skipped);
    match format {
        Format::Json => json_line(&json!({
            "model": sc.model.name,
            "hardware": sc.hardware.name,
            "batch": sc.shape.batch,
            "gpu_batches": sc.shape.gpu_batches,
            "prompt": sc.shape.prompt,
            "gen": sc.shape.gen_len,
            "results": done.iter().map(|s| &s.report).collect::<Vec<_>>(),
            "skipped": skipped.iter().map(|s| json!({"strategy": s.strategy.as_str(), "reason": s.error.to_string()})).collect::<Vec<_>>(),
            "kvpr_vs_full_transfer": c.kvpr_vs_full_transfer,
        })),
        Format::Csv => csv_text(
            &CSV_FIELDS,
            &done.iter().map(|s| csv_row(&s.report)).collect::<Vec<_>>(),
        ),
        Format::Table => {
            let mut out = String::new();
            let _ = writeln!(
                out,
                "compare (simulated): {}",
                describe(&done[0].plan).replacen(
                    if done[0].plan.weights_on_gpu {
                        ", weights on GPU"
                    } else {
                        ", weights offloaded"
                    },
                    "",
                    1
                )
            );
            let mut header = vec!["metric".to_string()];
            header.extend(done.iter().map(|s| s.report.strategy.clone()));
            let mut t = Table::new(&header);
            let columns: Vec<Vec<(&str, String)>> =
                done.iter().map(|s| metric_rows(&s.report)).collect();
            let mut names: Vec<&str> = Vec::new();
            for c in &columns {
                for (k, _) in c {
                    if !names.contains(k) {
                        names.push(k);
                    }
                }
            }
            let weights_row: Vec<String> = std::iter::once("weights".to_string())
                .chain(done.iter().map(|s| {
                    if s.plan.weights_on_gpu {
                        "GPU".into()
                    } else {
                        "offloaded".into()
                    }
                }))
                .collect();
            t.row(&weights_row);
            for name in names {
                let mut row = vec![name.to_string()];
                for c in &columns {
                    row.push(
                        c.iter()
                            .find(|(k, _)| *k == name)
                            .map(|(_, v)| v.clone())
                            .unwrap_or_else(|| "-".into()),
                    );
                }
                t.row(&row);
            }
            out.push_str(&t.render());
            if let Some(r) = c.kvpr_vs_full_transfer {
                let (l, tp) = (r.decode_latency_ratio, r.throughput_ratio);
                let _ = writeln!(
                    out,
                    "kvpr vs full-transfer: decode latency x{l:.3} ({} lower), throughput x{tp:.3}",
                    pct(1.0 - l)
                );
            }
            if let Some(line) = done.iter().find_map(|s| split_summary(&s.plan)) {
                let _ = writeln!(out, "{line}");
            }
            for s in skipped {
                let _ = writeln!(out, "{}: not run: {}", s.strategy.as_str(), s.error);
            }
            for s in done {
                for n in &s.report.notes {
                    let _ = writeln!(out, "note ({}): {n}", s.report.strategy);
                }
            }
            if let Some(path) = trace {
                let _ = writeln!(
                    out,
                    "timelines written to {} (one process per strategy; open in https://ui.perfetto.dev)",
                    path.display()
                );
            }
            Ok(out)
        }
    }
}

/// `exec`: one measured run.
pub fn measured_run(p: &Plan, r: &RunReport, format: Format) -> Result<String, Error> {
    match format {
        Format::Json => json_line(r),
        Format::Csv => csv_text(&CSV_FIELDS, &[csv_row(r)]),
        Format::Table => {
            let mut out = String::new();
            let _ = writeln!(
                out,
                "{} (measured on {}, {} backend): {}",
                r.strategy,
                r.device,
                r.backend,
                describe(p)
            );
            let mut t = Table::new(&["metric", "value"]);
            for (k, v) in metric_rows(r) {
                t.row(&[k.to_string(), v]);
            }
            out.push_str(&t.render());
            if let Some(line) = split_summary(p) {
                let _ = writeln!(out, "{line}");
            }
            for n in &r.notes {
                let _ = writeln!(out, "note: {n}");
            }
            Ok(out)
        }
    }
}

fn comparison_table(c: &Validation) -> String {
    let mut out = String::new();
    let mut t = Table::new(&["", "simulated", "measured", "error"]);
    let e = |r: f64| {
        if r.is_finite() {
            format!("{:+.1}%", r * 100.0)
        } else {
            "-".into()
        }
    };
    t.row(&[
        "end to end".to_string(),
        secs(c.simulated_s),
        secs(c.measured_s),
        pct(c.end_to_end_error),
    ]);
    t.row(&[
        "decode".to_string(),
        secs(c.simulated_decode_s),
        secs(c.measured_decode_s),
        e(c.decode_error()),
    ]);
    t.row(&[
        "per step: median |error|".to_string(),
        String::new(),
        String::new(),
        pct(c.median_step_error),
    ]);
    t.row(&[
        "per step: p90 |error|".to_string(),
        String::new(),
        String::new(),
        pct(c.p90_step_error),
    ]);
    for r in &c.per_category {
        t.row(&[
            format!("category {}", r.name),
            secs(r.simulated_s),
            secs(r.measured_s),
            e(r.error),
        ]);
    }
    for r in &c.per_kind {
        t.row(&[
            format!("op {}", r.name),
            secs(r.simulated_s),
            secs(r.measured_s),
            e(r.error),
        ]);
    }
    out.push_str(&t.render());
    out
}

/// `validate`: simulated (`rs`) against measured (`rm`), with the comparison `c` and the
/// largest end-to-end error that passes.
pub fn validation(
    p: &Plan,
    rs: &RunReport,
    rm: &RunReport,
    c: &Validation,
    max_error: f64,
    format: Format,
) -> Result<String, Error> {
    Ok(match format {
        Format::Json => json_line(&json!({
            "strategy": p.strategy.as_str(),
            "model": p.model,
            "hardware": p.hardware,
            "backend": rm.backend,
            "device": rm.device,
            "simulated_s": c.simulated_s,
            "measured_s": c.measured_s,
            "end_to_end_error": c.end_to_end_error,
            "max_error": max_error,
            "passed": c.end_to_end_error <= max_error,
            "simulated_decode_s": c.simulated_decode_s,
            "measured_decode_s": c.measured_decode_s,
            "median_step_error": c.median_step_error,
            "p90_step_error": c.p90_step_error,
            "per_category": c.per_category,
            "per_kind": c.per_kind,
            "per_step": c.per_step,
            "simulated": rs,
            "measured": rm,
        }))?,
        Format::Csv => {
            let mut rows: Vec<Vec<String>> = vec![vec![
                "end_to_end".into(),
                csv_number(c.simulated_s),
                csv_number(c.measured_s),
                // Signed, as every row below: simulated / measured - 1.
                csv_number(c.end_to_end_signed_error()),
            ]];
            for (prefix, list) in [
                ("category", &c.per_category),
                ("op", &c.per_kind),
                ("step", &c.per_step),
            ] {
                for r in list {
                    // `step:3`, not `step:step 3`.
                    let name = r.name.strip_prefix("step ").unwrap_or(&r.name);
                    rows.push(vec![
                        format!("{prefix}:{name}"),
                        csv_number(r.simulated_s),
                        csv_number(r.measured_s),
                        csv_number(r.error),
                    ]);
                }
            }
            csv_text(&["item", "simulated_s", "measured_s", "error"], &rows)?
        }
        Format::Table => {
            let mut out = String::new();
            let _ = writeln!(
                out,
                "validate {}: simulated with {} vs measured on {} ({} backend)",
                describe(p),
                p.hardware,
                rm.device,
                rm.backend
            );
            out.push_str(&comparison_table(c));
            let _ = writeln!(
                out,
                "decode throughput: simulated {:.1} tok/s, measured {:.1} tok/s",
                rs.decode_throughput_tok_s, rm.decode_throughput_tok_s
            );
            out
        }
    })
}

/// `capacity`: the longest context of each strategy (`batch`: the sequences it was sized for).
pub fn capacity(r: &CapacityReport, batch: u32, format: Format) -> Result<String, Error> {
    match format {
        Format::Json => json_line(&r),
        Format::Csv => csv_text(
            &[
                "strategy",
                "max_context_tokens",
                "binding_limit",
                "gpu_bytes",
                "host_bytes",
            ],
            &r.strategies
                .iter()
                .map(|s| {
                    vec![
                        s.strategy.as_str().to_string(),
                        s.max_context_tokens.to_string(),
                        s.binding_limit.as_str().to_string(),
                        s.gpu_bytes.to_string(),
                        s.host_bytes.to_string(),
                    ]
                })
                .collect::<Vec<_>>(),
        ),
        Format::Table => {
            let mut out = String::new();
            let _ = writeln!(
                out,
                "capacity: {} on {} (batch {})",
                r.model, r.hardware, batch
            );
            let mut t = Table::new(&[
                "strategy",
                "max context",
                "binding limit",
                "GPU at max",
                "host at max",
            ]);
            for s in &r.strategies {
                let k = s.max_context_tokens as f64 / 1024.0;
                if s.max_context_tokens == 0 {
                    // Nothing fits: no context, so no memory at it to show.
                    t.row(&[
                        s.strategy.as_str().to_string(),
                        "none".to_string(),
                        s.binding_limit.as_str().to_string(),
                        "-".to_string(),
                        "-".to_string(),
                    ]);
                    continue;
                }
                t.row(&[
                    s.strategy.as_str().to_string(),
                    if k >= 1024.0 {
                        format!("{} ({:.2}M)", s.max_context_tokens, k / 1024.0)
                    } else {
                        format!("{} ({:.1}K)", s.max_context_tokens, k)
                    },
                    s.binding_limit.as_str().to_string(),
                    gib(s.gpu_bytes),
                    gib(s.host_bytes),
                ]);
            }
            out.push_str(&t.render());
            let _ = writeln!(out, "(K = 1024 tokens, as the HeadInfer paper counts)");
            for n in &r.notes {
                let _ = writeln!(out, "note: {n}");
            }
            Ok(out)
        }
    }
}
