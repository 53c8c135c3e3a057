//! Each command's output files, checked against its inputs and locked before it runs
//! (`kvplan_report::outputs::claim`): the one hook `run` calls. Inputs that are names rather
//! than files (a model preset) are passed too; a path that does not exist is skipped.

use std::path::{Path, PathBuf};

use kvplan_report::outputs::{Claim, claim};
use kvplan_serve::scenario::RawServeScenario;

use super::cli::Command;
use crate::args::RunArgs;
use crate::error::CliError;
use crate::messages::flag_of;

/// Files by the flag (or argument) that names each; `None` where it is not given.
type Named = Vec<(&'static str, Option<PathBuf>)>;

/// The files a planner run reads: its scenario file and a model or profile given as a path.
fn run_inputs(r: &RunArgs) -> Named {
    let (sc, path) = (&r.scenario, |s: &Option<String>| {
        s.as_ref().map(PathBuf::from)
    });
    vec![
        ("SCENARIO", sc.scenario.clone()),
        ("--model", path(&sc.target.model)),
        ("--hardware", path(&sc.target.hardware)),
    ]
}

/// The inputs and outputs of `command`; `serve` is the serving scenario as the run will see
/// it (the file's, with the flags over it), where it could be read.
fn files(command: &Command, serve: Option<&RawServeScenario>) -> (Named, Named) {
    let planner = |r, trace: &Option<PathBuf>| (run_inputs(r), vec![("--trace", trace.clone())]);
    match command {
        Command::Simulate(a) => planner(&a.run.run, &a.trace),
        Command::Exec(a) => planner(&a.run.run, &a.trace),
        Command::Validate(a) => planner(&a.run.run, &a.trace),
        Command::Serve(a) => {
            let mut inputs = vec![
                ("SCENARIO", a.scenario.clone()),
                ("--compare-to", a.compare_to.clone()),
            ];
            let traces = serve.into_iter().flat_map(|raw| raw.workload.input_files());
            inputs.extend(traces.map(|(field, p)| (flag_of(field).unwrap_or(field), Some(p))));
            let outputs = a.outputs().into_iter().map(|(_, p, l)| (l, Some(p.into())));
            (inputs, outputs.collect())
        }
        Command::Sweep(a) => {
            let inputs = kvplan_sweep::file::input_files(&a.file).into_iter();
            let outputs = vec![("--out", a.out.clone()), ("--plot", a.plot.clone())];
            (inputs.map(|p| ("SWEEP", Some(p))).collect(), outputs)
        }
        Command::Calibrate(a) => {
            let mut inputs = vec![
                ("--from-table", a.from_table.clone()),
                ("--from-runs", a.from_runs.clone()),
                ("--base", a.base.as_ref().map(PathBuf::from)),
            ];
            inputs.extend(a.models.iter().map(|m| ("--model", Some(m.into()))));
            (inputs, vec![("--out", a.out.clone())])
        }
        Command::Merge(a) => {
            let (out, inputs) = a.output_and_inputs();
            let inputs = inputs.iter().map(|p| ("SHARD", Some(p.clone())));
            (inputs.collect(), vec![("OUT", out.map(Path::to_path_buf))])
        }
        Command::PlanDeployment(a) => {
            let mut inputs = vec![("SERVE_SCENARIO", a.scenario.clone())];
            inputs.extend(a.merge.iter().map(|p| ("--merge", Some(p.clone()))));
            inputs.push(("--requests-trace", a.requests.requests_trace.clone()));
            (inputs, vec![("--svg", a.svg.clone())])
        }
        Command::ValidateServing(a) => {
            // A folder's files are inputs as much as the files named.
            let inputs = a.inputs.iter().flat_map(|p| {
                kvplan_serve::fidelity::expand_inputs(std::slice::from_ref(p))
                    .unwrap_or_else(|_| vec![p.clone()])
            });
            (
                inputs.map(|p| ("FILE_OR_DIR", Some(p))).collect(),
                vec![("--out", a.out.clone()), ("--svg", a.svg.clone())],
            )
        }
        Command::Plot(a) => (
            vec![("CSV", Some(a.csv.clone()))],
            vec![("--out", a.out.clone())],
        ),
        _ => (Vec::new(), Vec::new()),
    }
}

/// Checks and locks `command`'s outputs ([`claim`]); they stay locked until the result is
/// dropped, after the command has run. `serve` is `kvplan serve`'s scenario, already read
/// (`None`: another command, or one that could not be read and will fail for it).
pub fn claim_outputs(
    command: &Command,
    serve: Option<&RawServeScenario>,
) -> Result<Claim, CliError> {
    let (inputs, outputs) = files(command, serve);
    Ok(claim(&given(&inputs), &given(&outputs))?)
}

/// The files given, as [`claim`] takes them.
fn given(v: &Named) -> Vec<(&str, &Path)> {
    v.iter()
        .filter_map(|(l, p)| Some((*l, p.as_deref()?)))
        .collect()
}
