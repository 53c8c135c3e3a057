//! The command line and its commands, one module each: the command's clap arguments next to
//! the code that loads the input, calls the libraries and renders the answer.

use clap::{Parser, Subcommand};

use kvplan_planner::plan::Strategy;
use kvplan_planner::scenario::{
    Note, RawHeadInfer, RawOffload, RawRunahead, RawScenario, RawWorkload, Scenario,
};

use crate::args::RunArgs;
use crate::error::CliError;

pub mod calibrate;
pub mod capacity;
pub mod claims;
pub mod diff;
pub mod exec;
pub mod hardware;
pub mod models;
pub mod plan;
pub mod plan_deployment;
pub mod plot;
pub mod serve;
pub mod serve_capacity;
pub mod simulate;
pub mod sweep;
pub mod validate;
pub mod validate_serving;

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

impl RunArgs {
    /// These flags as a raw scenario (`strategy`: the command's `--strategy`, or the planner a
    /// `plan` subcommand fixes), to overlay on a scenario file's.
    pub fn to_raw(&self, strategy: Option<String>) -> RawScenario {
        let (sc, workload, offload, planner) =
            (&self.scenario, &self.workload, &self.offload, &self.planner);
        RawScenario {
            model: sc.target.model.clone(),
            hardware: sc.target.hardware.clone(),
            strategy,
            dtype: sc.dtype.clone(),
            quantization: sc.quantization.clone(),
            kv_cache_dtype: sc.kv_cache_dtype.clone(),
            implementation: sc.implementation.clone(),
            workload: RawWorkload {
                batch: workload.batch,
                gpu_batches: workload.gpu_batches,
                prompt: workload.prompt,
                gen_len: workload.gen_len,
            },
            offload: RawOffload {
                weights: offload.weights.clone(),
                host_memory: offload.host_memory.clone(),
                split: offload.split.clone().map(toml::Value::String),
                split_model: offload.split_model.clone(),
            },
            headinfer: RawHeadInfer {
                heads_per_group: planner.heads_per_group,
                chunk: planner.chunk,
            },
            runahead: RawRunahead {
                devices: planner.devices,
                link_gbps: planner.link_gbps,
                link_latency_us: planner.link_latency_us,
            },
        }
    }

    /// [`resolve`](Self::resolve) for the executor (`exec`, `validate`), which runs 16-bit
    /// weights and KV cache only: a quantised plan is refused, not run as something else.
    pub fn resolve_executed(&self, strategy: Option<String>) -> Result<Scenario, CliError> {
        let sc = self.resolve(strategy, &[])?;
        if sc.model.quantization.is_some() || !sc.model.kv_cache_dtype.is_auto() {
            return Err(CliError::input(
                "--quantization, --kv-cache-dtype: the executor runs 16-bit weights and KV cache only; simulate such a plan with `kvplan simulate`",
            ));
        }
        Ok(sc)
    }

    /// The scenario file (if any) overlaid with these flags, resolved by the planner; its notes
    /// go to stderr, but for a setting that `also_run` (`--compare`'s strategies) reads.
    pub fn resolve(
        &self,
        strategy: Option<String>,
        also_run: &[Strategy],
    ) -> Result<Scenario, CliError> {
        let file = (self.scenario.scenario.as_deref()).map(kvplan_run::RawScenario::read_simulate);
        let base = file.transpose()?.unwrap_or_default();
        let scenario = base.overlay(self.to_raw(strategy)).resolve()?;
        // Clamped or ignored settings are not errors: say so on stderr, leave stdout alone.
        let read_by_another =
            |n: &&Note| matches!(n, Note::Ignored { read_by, .. } if also_run.contains(read_by));
        for note in scenario.notes.iter().filter(|n| !read_by_another(n)) {
            crate::messages::hold_note(crate::messages::note(note));
        }
        Ok(scenario)
    }
}

impl From<kvplan_report::Error> for CliError {
    fn from(e: kvplan_report::Error) -> Self {
        CliError::new(e.is_input(), e.message())
    }
}

/// Runs the command line's command; the text for stdout.
pub fn run(cli: &Cli) -> Result<String, CliError> {
    // A serving scenario is read once: its claims and its run see the same one.
    let serve_scenario = match &cli.command {
        Command::Serve(a) => Some(serve::raw_scenario(a)),
        _ => None,
    };
    // Every output checked against the inputs and locked before anything runs.
    let read = serve_scenario.as_ref().and_then(|r| r.as_ref().ok());
    let outputs = claims::claim_outputs(&cli.command, read)?;
    // What claiming cleaned up after a run killed outright (a stale lock, a temporary file).
    for note in outputs.notes() {
        crate::messages::hold_note(note.clone());
    }
    match &cli.command {
        Command::Models(a) => models::models(a),
        Command::Hardware(a) => hardware::hardware(a),
        Command::Plan { planner } => plan::plan(planner),
        Command::Simulate(a) => simulate::simulate(a),
        Command::Capacity(a) => capacity::capacity(a),
        Command::ServeCapacity(a) => serve_capacity::serve_capacity(a),
        Command::PlanDeployment(a) => plan_deployment::plan_deployment(a),
        Command::Exec(a) => exec::exec(a),
        Command::Calibrate(a) => calibrate::calibrate(a),
        Command::Validate(a) => validate::validate(a),
        Command::Serve(a) => serve::serve(a, serve_scenario.expect("read above")?),
        Command::ValidateServing(a) => validate_serving::validate_serving(a),
        Command::Diff(a) => diff::diff(a),
        Command::Plot(a) => plot::plot(a),
        Command::Regress { action } => diff::regress(action),
        Command::Sweep(a) => sweep::sweep(a),
        Command::Merge(a) => sweep::merge(a),
    }
}
