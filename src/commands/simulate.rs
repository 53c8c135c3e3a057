//! `kvplan simulate`: a scenario planned and run on the discrete-event simulator.

use std::path::PathBuf;

use clap::Args;

use crate::args::*;
use crate::error::CliError;
use kvplan_planner::plan::Strategy;
use kvplan_planner::run::{COMPARED, SimulatedRun, compare, simulate_scenario};
use kvplan_report as report;
use kvplan_report::files::write_trace;

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
    pub run: StrategyRunArgs,
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

/// `kvplan simulate`.
pub fn simulate(args: &SimulateArgs) -> Result<String, CliError> {
    let compared: &[Strategy] = if args.compare { &COMPARED } else { &[] };
    let sc = args.run.run.resolve(args.run.strategy.clone(), compared)?;
    let (trace, format) = (args.trace.as_deref(), args.output.format);
    if !args.compare {
        let s = simulate_scenario(&sc)?;
        if let Some(path) = trace {
            write_trace(path, "--trace", &[s.as_run()])?;
        }
        return Ok(report::planner::simulated_run(&s, trace, format)?);
    }
    // --compare: the library's rules pick the strategies and skip those that cannot run.
    let c = compare(&sc)?;
    if let Some(path) = trace {
        let runs: Vec<_> = c.runs.iter().map(SimulatedRun::as_run).collect();
        write_trace(path, "--trace", &runs)?;
    }
    Ok(report::planner::comparison(&sc, &c, trace, format)?)
}
