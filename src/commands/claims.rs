//! Each command's output files, checked against its inputs and locked before it runs
//! (`kvplan_report::outputs::claim`): the one hook `run` calls. Inputs that are names rather
//! than files (a model preset) are passed too; a path that does not exist is skipped.

use std::path::{Path, PathBuf};

use kvplan_report::outputs::{Claim, claim};

use super::Command;
use crate::args::RunArgs;
use crate::error::CliError;

/// The files a planner run reads: its scenario file and a model or profile given as a path.
fn run_inputs(r: &RunArgs) -> Vec<(&'static str, PathBuf)> {
    let sc = &r.scenario;
    let mut v = Vec::new();
    if let Some(p) = &sc.scenario {
        v.push(("SCENARIO", p.clone()));
    }
    if let Some(m) = &sc.target.model {
        v.push(("--model", m.into()));
    }
    if let Some(h) = &sc.target.hardware {
        v.push(("--hardware", h.into()));
    }
    v
}

/// The inputs and outputs of `command`, by the flag that names each.
type Files = (Vec<(&'static str, PathBuf)>, Vec<(&'static str, PathBuf)>);

fn files(command: &Command) -> Files {
    let opt = |label: &'static str, p: &Option<PathBuf>| p.clone().map(|p| (label, p));
    let planner = |r, trace| (run_inputs(r), opt("--trace", trace).into_iter().collect());
    match command {
        Command::Simulate(a) => planner(&a.run.run, &a.trace),
        Command::Exec(a) => planner(&a.run.run, &a.trace),
        Command::Validate(a) => planner(&a.run.run, &a.trace),
        Command::Serve(a) => {
            let mut inputs: Vec<_> = [
                opt("SCENARIO", &a.scenario),
                opt("--compare-to", &a.compare_to),
                opt("--requests-trace", &a.requests.requests_trace),
            ]
            .into_iter()
            .flatten()
            .collect();
            for (label, spec) in [
                ("--lengths", &a.requests.lengths),
                ("--output-lengths", &a.requests.output_lengths),
            ] {
                if let Some(f) = spec.as_deref().and_then(|s| s.strip_prefix("trace:")) {
                    inputs.push((label, f.into()));
                }
            }
            if let Some(trace) = (a.scenario.as_deref())
                .and_then(|p| kvplan_run::RawScenario::read_serve(p).ok())
                .and_then(|raw| raw.workload.trace)
            {
                inputs.push(("the scenario's workload.trace", trace));
            }
            let outputs = a.outputs().into_iter().map(|(_, p, l)| (l, p.into()));
            (inputs, outputs.collect())
        }
        Command::Sweep(a) => {
            let inputs = kvplan_sweep::file::input_files(&a.file)
                .into_iter()
                .map(|p| ("SWEEP", p))
                .collect();
            let outputs = [opt("--out", &a.out), opt("--plot", &a.plot)];
            (inputs, outputs.into_iter().flatten().collect())
        }
        Command::Calibrate(a) => {
            let mut inputs: Vec<_> = [
                opt("--from-table", &a.from_table),
                opt("--from-runs", &a.from_runs),
            ]
            .into_iter()
            .flatten()
            .collect();
            inputs.extend(a.base.as_ref().map(|b| ("--base", b.into())));
            inputs.extend(a.models.iter().map(|m| ("--model", m.into())));
            (inputs, opt("--out", &a.out).into_iter().collect())
        }
        Command::Merge(a) => {
            let (out, inputs) = a.output_and_inputs();
            let inputs = inputs.iter().map(|p| ("SHARD", p.clone())).collect();
            (
                inputs,
                out.map(|o| ("OUT", o.to_path_buf())).into_iter().collect(),
            )
        }
        Command::Plot(a) => (
            vec![("CSV", a.csv.clone())],
            opt("--out", &a.out).into_iter().collect(),
        ),
        _ => (Vec::new(), Vec::new()),
    }
}

/// Checks and locks `command`'s outputs ([`claim`]); they stay locked until the result is
/// dropped, after the command has run.
pub fn claim_outputs(command: &Command) -> Result<Claim, CliError> {
    let (inputs, outputs) = files(command);
    let i: Vec<(&str, &Path)> = inputs.iter().map(|(l, p)| (*l, p.as_path())).collect();
    let o: Vec<(&str, &Path)> = outputs.iter().map(|(l, p)| (*l, p.as_path())).collect();
    Ok(claim(&i, &o)?)
}
