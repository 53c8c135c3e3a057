//! The command line: its commands, each the arguments of one module of this folder.

use clap::{Parser, Subcommand};

use super::{
    calibrate, capacity, diff, exec, hardware, models, plan, plan_deployment, plot, serve,
    serve_capacity, simulate, sweep, validate, validate_serving,
};

const ABOUT: &str = "Plan and simulate KV-cache offload and recomputation for LLM inference";

/// `--help`'s long text (`src/help/kvplan.txt`).
const LONG_ABOUT: &str = include_str!("../help/kvplan.txt").trim_ascii_end();

/// The command line.
#[derive(Debug, Parser)]
#[command(name = "kvplan", version, about = ABOUT, long_about = LONG_ABOUT)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List model presets, or show one model (preset or config.json) in detail
    Models(models::ModelsArgs),
    /// List hardware presets, or print one preset's TOML with the source of every number
    Hardware(hardware::HardwareArgs),
    /// Show a planner's decisions (without simulating)
    Plan {
        /// Which planner.
        #[command(subcommand)]
        planner: plan::PlanCommand,
    },
    /// Simulate a generation and report latency, throughput, GPU utilisation and PCIe traffic
    #[command(long_about = simulate::SIMULATE_LONG)]
    Simulate(simulate::SimulateArgs),
    /// The longest context each HeadInfer-study strategy fits in GPU memory and host RAM (context
    /// capacity; for serving capacity see serve-capacity)
    #[command(long_about = capacity::CAPACITY_LONG)]
    Capacity(capacity::CapacityArgs),
    /// The highest request rate each serving configuration (hardware x tensor-parallel size)
    /// sustains under latency objectives, and the cheapest for a target rate
    #[command(long_about = serve_capacity::SERVE_CAPACITY_LONG)]
    ServeCapacity(Box<serve_capacity::ServeCapacityArgs>),
    /// The cheapest cluster (GPU, TP, replicas, prefill/decode pools, router, engine settings)
    /// serving a load under latency objectives, by simulating candidate clusters; the Pareto
    /// frontier of cost against latency
    #[command(long_about = plan_deployment::PLAN_DEPLOYMENT_LONG)]
    PlanDeployment(Box<plan_deployment::PlanDeploymentArgs>),
    /// Run the same plan for real (CUDA GPU or CPU) and report measured figures, like simulate
    #[command(long_about = exec::EXEC_LONG)]
    Exec(exec::ExecArgs),
    /// Measure this machine (copies, GEMMs, attention, launch overhead) and write a profile
    #[command(long_about = calibrate::CALIBRATE_LONG)]
    Calibrate(calibrate::CalibrateArgs),
    /// Simulate and execute one scenario; report how far prediction and measurement differ
    #[command(long_about = validate::VALIDATE_LONG)]
    Validate(validate::ValidateArgs),
    /// Serve many requests over time (continuous batching, paged KV, preemption) and report
    /// throughput, TTFT/TPOT/E2E percentiles, preemptions and swap traffic
    #[command(long_about = serve::SERVE_LONG)]
    Serve(Box<serve::ServeArgs>),
    /// Replay many measured serving runs (stage tables, per-request runs, folders of them) and
    /// report how far prediction and measurement differ: per run, and by model, GPU, TP, load
    /// level and metric
    #[command(long_about = validate_serving::VALIDATE_SERVING_LONG)]
    ValidateServing(validate_serving::ValidateServingArgs),
    /// Run a grid of scenarios (a base and axes) in parallel; one CSV or JSONL row per point
    #[command(long_about = sweep::SWEEP_LONG)]
    Sweep(sweep::SweepArgs),
    /// Join the outputs of `sweep --shard` runs into the unsharded run's file
    #[command(long_about = sweep::MERGE_LONG)]
    Merge(sweep::MergeArgs),
    /// Compare two outputs of kvplan (report JSON, CSV table, timeline CSV) metric by metric;
    /// exit 1 when a metric regressed past --tolerance
    #[command(long_about = diff::DIFF_LONG)]
    Diff(diff::DiffArgs),
    /// Plot a metric against an axis from a kvplan CSV table (one line per series) as SVG
    #[command(long_about = plot::PLOT_LONG)]
    Plot(plot::PlotArgs),
    /// Rerun a directory of scenarios and compare them with their golden outputs
    Regress {
        /// check or update
        #[command(subcommand)]
        action: diff::RegressCommand,
    },
}
