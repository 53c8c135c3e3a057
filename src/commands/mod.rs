//! The command line and its commands, one module each: the command's clap arguments next to
//! the code that loads the input, calls the libraries and renders the answer.

use kvplan_planner::plan::Strategy;
use kvplan_planner::scenario::{
    Note, RawHeadInfer, RawOffload, RawRunahead, RawScenario, RawWorkload, Scenario,
};

use crate::args::RunArgs;
use crate::error::CliError;

pub mod calibrate;
pub mod capacity;
pub mod claims;
mod cli;
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

pub use cli::{Cli, Command};

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
