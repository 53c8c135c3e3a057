//! `kvplan plan kvpr|headinfer|runahead`: a planner's decisions, without simulating.

use std::fmt::Write as _;

use clap::{Args, Subcommand};

use crate::args::*;
use crate::error::CliError;
use crate::render::*;
use kvplan_planner::plan::{Plan, Strategy};
use kvplan_planner::report::{recompute_fraction, saved_fraction, ttft_speedups};
use kvplan_planner::scenario::Scenario;
use serde_json::json;

/// Planners.
#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// KVPR: the recompute/transfer split for every decode step, and why
    Kvpr(PlanArgs),
    /// HeadInfer: heads per offload group, prefill chunk size and memory for a long context
    Headinfer(PlanArgs),
    /// KV-Runahead: the context partition over devices, TTFT per method and the speed-up
    Runahead(PlanArgs),
}

/// `kvplan plan ...`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// What to plan
    #[command(flatten)]
    pub run: RunArgs,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

pub(crate) fn describe(p: &Plan) -> String {
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

/// `kvplan plan kvpr`.
pub fn plan_kvpr(args: &PlanArgs) -> Result<String, CliError> {
    let sc = args.run.resolve(Some(Strategy::Kvpr.as_str().into()))?;
    let cost = sc.cost_model();
    let p = sc.plan_with(&cost, Strategy::Kvpr)?;
    let problem0 = kvplan_planner::plan::split_problem(
        &cost,
        &sc.model,
        &sc.shape,
        p.weights_on_gpu,
        p.host_memory,
        1,
        sc.options.split_model,
    );
    let steps: Vec<serde_json::Value> = p
        .decisions
        .splits()
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
    match args.output.format {
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
            "explanation": p.decisions.splits().first().map(|s| s.split.reason.explain(&problem0, &s.split)),
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
            &p.decisions
                .splits()
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
            let _ = writeln!(out, "KVPR plan: {}", describe(&p));
            let _ = writeln!(
                out,
                "per token and layer: activations {} B, K+V {} B (GQA group {})",
                sc.model.act_bytes_per_token_layer(),
                sc.model.kv_bytes_per_token_layer(),
                sc.model.gqa_group()
            );
            if let Some(s) = p.decisions.splits().first() {
                let _ = writeln!(
                    out,
                    "why (step 1): {}",
                    s.split.reason.explain(&problem0, &s.split)
                );
            }
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
            for s in p.decisions.splits() {
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

/// Resolves a `plan <planner>` command's scenario with the strategy fixed.
fn plan_for(args: &PlanArgs, strategy: Strategy) -> Result<(Scenario, Plan), CliError> {
    let sc = args.run.resolve(Some(strategy.as_str().into()))?;
    let p = sc.plan_with(&sc.cost_model(), strategy)?;
    Ok((sc, p))
}

fn memory_line(p: &Plan) -> String {
    format!(
        "memory: GPU {} ({}), host {}",
        gib(p.memory.gpu_bytes()),
        p.memory
            .gpu
            .iter()
            .map(|i| format!("{} {}", i.kind.name(), gib(i.bytes)))
            .collect::<Vec<_>>()
            .join(", "),
        gib(p.memory.host_bytes())
    )
}

/// `kvplan plan runahead`.
pub fn plan_runahead(args: &PlanArgs) -> Result<String, CliError> {
    let (sc, p) = plan_for(args, Strategy::Runahead)?;
    let d = p
        .decisions
        .runahead()
        .ok_or_else(|| CliError::failure("the KV-Runahead planner returned no decisions"))?;
    match args.output.format {
        Format::Json => json_line(&json!({
            "strategy": "runahead",
            "model": p.model,
            "hardware": p.hardware,
            "context": sc.shape.prompt,
            "devices": sc.options.runahead.devices,
            "devices_used": d.devices_used,
            "partition": d.partition,
            "ttft_s": d.ttft_s,
            "speedup": d.speedup,
            "details": d,
            "memory": p.memory,
            "notes": p.notes,
        })),
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
                p.model, p.hardware, sc.shape.prompt, sc.options.runahead.devices, d.devices_used
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
            let _ = writeln!(out, "{}", memory_line(&p));
            for n in &p.notes {
                let _ = writeln!(out, "note: {n}");
            }
            Ok(out)
        }
    }
}

/// `kvplan plan headinfer`.
pub fn plan_headinfer(args: &PlanArgs) -> Result<String, CliError> {
    let (sc, p) = plan_for(args, Strategy::HeadInfer)?;
    let d = p
        .decisions
        .headinfer()
        .ok_or_else(|| CliError::failure("the HeadInfer planner returned no decisions"))?;
    match args.output.format {
        Format::Json => json_line(&json!({
            "strategy": "headinfer",
            "model": p.model,
            "hardware": p.hardware,
            "context": sc.shape.prompt,
            "details": d,
            "memory": p.memory,
            "peak_gpu_bytes": p.memory.gpu_bytes(),
            "peak_host_bytes": p.memory.host_bytes(),
            "ops": p.schedule.len(),
            "notes": p.notes,
        })),
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
            let _ = writeln!(out, "{}", memory_line(&p));
            for n in &p.notes {
                let _ = writeln!(out, "note: {n}");
            }
            Ok(out)
        }
    }
}

/// `kvplan plan <planner>`.
pub fn plan(planner: &PlanCommand) -> Result<String, CliError> {
    match planner {
        PlanCommand::Kvpr(a) => plan_kvpr(a),
        PlanCommand::Headinfer(a) => plan_headinfer(a),
        PlanCommand::Runahead(a) => plan_runahead(a),
    }
}
