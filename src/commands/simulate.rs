//! `kvplan simulate`: a scenario planned and run on the discrete-event simulator.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;

use super::plan::describe;
use crate::args::*;
use crate::error::CliError;
use crate::output::write_output;
use crate::render::*;
use kvplan_planner::plan::{Plan, Strategy};
use kvplan_planner::report::{RunReport, recompute_fraction};
use kvplan_planner::run::{COMPARED, SimulatedRun, compare, simulate_scenario};
use kvplan_vocab::schedule::Category;
use kvplan_vocab::timeline::{Run, write_chrome_trace, write_csv};
use serde_json::json;

pub const SIMULATE_LONG: &str = "\
Simulate one batch generation (prefill, then gen-1 decode steps) with a strategy:
  kvpr           KV cache on the host; each step recomputes a prefix of it on the GPU from
                 activations while the rest is transferred (split from a linear program)
  full-transfer  KV cache on the host, all of it transferred every step (FlexGen, HF Accelerate)
  gpu-only       everything resident on the GPU (fails if it does not fit)
  headinfer      long context: KV offloaded per head group, chunked prefill, ping-pong
                 prefetch and write-back (--heads-per-group, --chunk; batch defaults to 1)
  runahead       time to first token: the prompt split over --devices with a point-to-point
                 KV chain (--link-gbps, --link-latency-us; batch and gen default to 1)

--gpu-batches k > 1 gives FlexGen's column-by-column order (k GPU batches share one weight load
per layer; the effective batch is batch x k). --compare runs every strategy side by side.

The JSON object (--format json) has at least: strategy, decode_latency_s,
decode_throughput_tok_s (= batch*gpu_batches*(gen-1)/decode_latency_s, as the KVPR paper reports
it), gpu_busy_fraction (decode phase), h2d_bytes, d2h_bytes, peak_gpu_bytes, peak_host_bytes.

A scenario TOML file can replace the flags (flags override it):
  model = \"opt-6.7b\"
  hardware = \"a100-40g-pcie4\"
  strategy = \"kvpr\"
  [workload]
  batch = 64
  prompt = 128
  gen = 32
  [offload]
  weights = \"auto\"       # auto | gpu | offload
  host_memory = \"pinned\" # pinned | pageable
  split = \"auto\"         # auto | recomputed tokens per step
  [headinfer]
  heads_per_group = 2    # else the fastest simulated
  chunk = 10240          # else the fastest simulated
  [runahead]
  devices = 4
  link_gbps = 10.0       # else the profile's [peer] link
  link_latency_us = 5.0";

/// `kvplan simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// What to run
    #[command(flatten)]
    pub run: RunArgs,
    /// Strategy: kvpr, full-transfer, gpu-only, headinfer, runahead [default: kvpr]
    #[arg(long, value_name = "NAME")]
    pub strategy: Option<String>,
    /// Run kvpr, full-transfer and gpu-only and print them side by side (ignores --strategy)
    #[arg(long)]
    pub compare: bool,
    /// Write the simulated timeline: Chrome trace JSON for Perfetto / chrome://tracing, or CSV
    /// when FILE ends in .csv (one track per stream; with --compare, one process per strategy)
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// One line on the planner's decisions: KVPR's split across the decode steps, HeadInfer's
/// head groups and chunk, KV-Runahead's partition and TTFT.
pub(crate) fn split_summary(p: &Plan) -> Option<String> {
    if let Some(d) = p.decisions.runahead() {
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
    if let Some(d) = p.decisions.headinfer() {
        return Some(format!(
            "headinfer: {} KV heads per offload group, prefill chunk {} tokens",
            d.heads_per_group, d.chunk_tokens
        ));
    }
    let (first, last) = (p.decisions.splits().first()?, p.decisions.splits().last()?);
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

pub(crate) const CSV_FIELDS: [&str; 24] = [
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

pub(crate) fn csv_row(r: &RunReport) -> Vec<String> {
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

pub(crate) fn metric_rows(r: &RunReport) -> Vec<(&'static str, String)> {
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

fn write_trace(path: &Path, runs: &[&SimulatedRun]) -> Result<(), CliError> {
    let runs: Vec<Run> = runs
        .iter()
        .map(|s| Run {
            name: s.plan.strategy.as_str(),
            schedule: &s.plan.schedule,
            timeline: &s.timeline,
        })
        .collect();
    let csv = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    write_output(path, "--trace", |w| {
        if csv {
            write_csv(&runs, w)
        } else {
            write_chrome_trace(&runs, w)
        }
    })
}

/// `kvplan simulate`.
pub fn simulate(args: &SimulateArgs) -> Result<String, CliError> {
    let compared: &[Strategy] = if args.compare { &COMPARED } else { &[] };
    let sc = args.run.resolve_running(args.strategy.clone(), compared)?;
    if !args.compare {
        let s = simulate_scenario(&sc)?;
        if let Some(path) = &args.trace {
            write_trace(path, &[&s])?;
        }
        let r = &s.report;
        return match args.output.format {
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
                if let Some(path) = &args.trace {
                    let _ = writeln!(
                        out,
                        "timeline written to {} (open in https://ui.perfetto.dev)",
                        path.display()
                    );
                }
                Ok(out)
            }
        };
    }

    // --compare: the library's rules pick the strategies and skip those that cannot run.
    let c = compare(&sc)?;
    let (done, skipped) = (&c.runs, &c.skipped);
    if let Some(path) = &args.trace {
        write_trace(path, &done.iter().collect::<Vec<_>>())?;
    }
    match args.output.format {
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
            if let Some(path) = &args.trace {
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
