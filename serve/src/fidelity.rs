//! Fidelity over many measured runs (`kvplan validate-serving`): every run of every file
//! replayed, predicted against measured run by run and metric by metric, and a summary by model,
//! GPU, tensor-parallel size, load level and metric.
//!
//! - **Inputs** ([`expand_inputs`]): files, and folders standing for their `*.csv` and `*.json`
//!   files (not those of folders inside), sorted by name. Each file is a stage table or a
//!   per-request run ([`Measured::open`]); every file is read before anything is replayed.
//! - **Replays** run in parallel (rayon), one per stage of a stage table (with the row's own
//!   settings, [`crate::runs::replay_stage`]; a row naming a model or GPU kvplan does not know
//!   is refused when the file is read, [`check_stage_names`]) and one per per-request run (on the base
//!   scenario's model, GPU and engine settings; a `vllm bench serve` JSON's `model_id` stands
//!   for a model not given). Results keep the order of the inputs: the same inputs give the
//!   same report, byte for byte, however the work was scheduled.
//! - **Metrics**: a stage's TTFT mean, TPOT, E2E mean and throughput (`ttft_mean_s`,
//!   `tpot_mean_s`, `e2e_mean_s`, `requests_per_s`, the names of a per-request run's figures);
//!   a per-request run's every figure of [`compare`] (means, p50/p90/p99, requests and output
//!   tokens per second) but the count served. Errors are relative, `predicted / measured − 1`.
//! - **Load level** ([`LoadLevel`]): a stage's offered rate against the highest rate offered in
//!   the same experiment (the table's `exp_name`): `light` below half of it, `medium` from half
//!   up to below it, `top` at it, `only` for an experiment of one rate (and for a per-request
//!   run, one load by itself). It says where a stage stands in its own experiment's ramp, not
//!   how close the server was to its capacity, which the tables do not measure.
//! - **Summary** ([`summarize`]): for each model, GPU, TP, load level and metric, and for each
//!   metric over everything (`None` keys), the count of errors, the median and p90 of |error|
//!   (linear interpolation between ranks: the median of an even count is the mean of the middle
//!   two, as `serve`'s compare-to median line has it), the signed bias (the median error), and
//!   the overload agreement (runs whose predicted and measured overload agree, of those with
//!   both). A stage the real server could not keep up with (measured overloaded) is left out of
//!   the latency statistics, as `serve`'s compare-to medians leave it out (its latencies lack
//!   the requests that failed), but its throughput counts and its overload verdict counts. A
//!   stage predicted overloaded but served counts in full: that is the prediction's error. An
//!   error that is not a number (a measurement of 0, a table without throughput) counts in none.
//! - **Band coverage**: the share of measurements inside the prediction's error band, once
//!   predictions carry bands; `None` until then, never estimated here.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rayon::prelude::*;
use serde::Serialize;

use crate::output::ServeReport;
use crate::runs::{
    Measured, MeasuredRun, MetricError, ReplayError, RunsError, StageRun, StageSkip,
    check_stage_names, compare,
};
use crate::scenario::{RawServeScenario, ScenarioError};

/// Why a fidelity report could not be made. Each names the file (or folder) at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FidelityError {
    /// No file or folder given.
    #[error("no measured runs given")]
    NoInputs,
    /// A folder that cannot be listed, or a path that does not exist.
    #[error("{path}: cannot read: {source}")]
    Unreadable {
        /// The path as given.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A folder without a `.csv` or `.json` file.
    #[error("{path}: no .csv or .json file in the folder")]
    EmptyFolder {
        /// The folder as given.
        path: String,
    },
    /// A file that cannot be read or is not a measured run (the message names the file, and
    /// the line or field).
    #[error(transparent)]
    Runs(#[from] RunsError),
    /// A per-request run replays on a model and GPU that neither the file nor the base scenario
    /// names.
    #[error("{path}: a per-request run does not name the {field} it ran on")]
    NoTarget {
        /// The file.
        path: String,
        /// `model` or `hardware`.
        field: &'static str,
    },
    /// A per-request run's scenario has requests of its own (the message names its fields).
    #[error("{path}: {message}")]
    Workload {
        /// The file.
        path: String,
        /// What to drop.
        message: String,
    },
    /// A run whose scenario does not resolve, or whose simulation failed.
    #[error("{path}: {run}: {source}")]
    Replay {
        /// The file.
        path: String,
        /// The run (a stage's name, or the file's).
        run: String,
        /// The cause.
        source: Box<ScenarioError>,
    },
    /// A stage table none of whose stages could be replayed: each stage with why.
    #[error("{path}: no stage could be replayed ({})", first_skip(skipped))]
    NoStage {
        /// The file.
        path: String,
        /// The stages, each with why.
        skipped: Vec<(String, StageSkip)>,
    },
}

fn first_skip(skipped: &[(String, StageSkip)]) -> String {
    match skipped.first() {
        Some((name, why)) if skipped.len() == 1 => format!("{name}: {why}"),
        Some((name, why)) => format!("{name}: {why}; and {} more", skipped.len() - 1),
        None => "no stage rows".into(),
    }
}

/// The files `inputs` stand for, in order: a file as it is, a folder as its `*.csv` and `*.json`
/// files (extension in any case), sorted by name. No input, a path that does not exist, a
/// folder that cannot be listed or has no such file: an error naming it.
pub fn expand_inputs(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, FidelityError> {
    if inputs.is_empty() {
        return Err(FidelityError::NoInputs);
    }
    let mut files = Vec::new();
    for p in inputs {
        let unreadable = |source| FidelityError::Unreadable {
            path: p.display().to_string(),
            source,
        };
        let meta = std::fs::metadata(p).map_err(unreadable)?;
        if !meta.is_dir() {
            files.push(p.clone());
            continue;
        }
        let mut found = Vec::new();
        for e in std::fs::read_dir(p).map_err(unreadable)? {
            let path = e.map_err(unreadable)?.path();
            let measured = (path.extension().and_then(|x| x.to_str()))
                .is_some_and(|x| x.eq_ignore_ascii_case("csv") || x.eq_ignore_ascii_case("json"));
            if measured && path.is_file() {
                found.push(path);
            }
        }
        if found.is_empty() {
            return Err(FidelityError::EmptyFolder {
                path: p.display().to_string(),
            });
        }
        found.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
        files.extend(found);
    }
    Ok(files)
}

/// Where a stage stands in its experiment's ramp of offered rates (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoadLevel {
    /// Below half the experiment's highest rate.
    Light,
    /// From half the highest rate to below it.
    Medium,
    /// The experiment's highest rate, of several.
    Top,
    /// The experiment's one rate (a one-stage experiment, a per-request run).
    Only,
}

impl LoadLevel {
    /// The level of a stage offered `rate` in an experiment whose highest rate is `top` and
    /// which offers `rates` distinct rates.
    pub fn of(rate: f64, top: f64, rates: usize) -> LoadLevel {
        if rates <= 1 {
            LoadLevel::Only
        } else if rate >= top {
            LoadLevel::Top
        } else if rate >= 0.5 * top {
            LoadLevel::Medium
        } else {
            LoadLevel::Light
        }
    }

    /// Its name in outputs.
    pub fn as_str(self) -> &'static str {
        match self {
            LoadLevel::Light => "light",
            LoadLevel::Medium => "medium",
            LoadLevel::Top => "top",
            LoadLevel::Only => "only",
        }
    }
}

impl std::fmt::Display for LoadLevel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What kind of measurement a run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunKind {
    /// One load stage of a stage table (the client's means).
    Stage,
    /// A per-request run (a per-request CSV or a `vllm bench serve` JSON).
    Requests,
}

/// One run replayed: predicted against measured, metric by metric.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRow {
    /// The file, as given (a folder's files as the folder joined with their names).
    pub file: String,
    /// The run: a stage's name (`exp_name stage N`), or the file's for a per-request run.
    pub run: String,
    /// Stage or per-request run.
    pub kind: RunKind,
    /// The model replayed (its preset or config name).
    pub model: String,
    /// The GPU replayed (its profile's name).
    pub gpu: String,
    /// Tensor-parallel GPUs.
    pub tp: u32,
    /// Offered rate, requests/s: a stage's; a per-request run's sends after the first over the
    /// time to the last send (NaN for a single send).
    pub rate_rps: f64,
    /// The load level.
    pub load: LoadLevel,
    /// `rate_rps` over the experiment's highest rate (1 for [`LoadLevel::Only`]).
    pub load_fraction: f64,
    /// Whether the simulator found the load too much (`None`: not judged, a per-request run).
    pub overloaded_predicted: Option<bool>,
    /// Whether the real server did not keep up (`None`: the file does not say).
    pub overloaded_measured: Option<bool>,
    /// Metric by metric.
    pub metrics: Vec<MetricError>,
    /// A per-request run's median over requests served in both of |E2E error|.
    pub median_request_e2e_error: Option<f64>,
    /// The same for TTFT.
    pub median_request_ttft_error: Option<f64>,
}

impl RunRow {
    /// Whether `metric`'s error of this run enters the statistics: a number, and for a latency
    /// a run the real server kept up with.
    pub fn counts(&self, m: &MetricError) -> bool {
        m.error.is_finite() && !(is_latency(m.metric) && self.overloaded_measured == Some(true))
    }

    /// Whether predicted and measured overload agree (`None`: one is not known).
    pub fn overload_agrees(&self) -> Option<bool> {
        Some(self.overloaded_predicted? == self.overloaded_measured?)
    }
}

/// Whether `metric` is a latency (seconds), not a rate.
pub fn is_latency(metric: &str) -> bool {
    metric.ends_with("_s") && !metric.ends_with("_per_s") && !metric.ends_with("_tok_s")
}

/// One group of the summary: a model, GPU, TP and load level (each `None` in the totals over
/// every run) and one metric.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GroupSummary {
    /// The model (`None`: every model).
    pub model: Option<String>,
    /// The GPU (`None`: every GPU).
    pub gpu: Option<String>,
    /// Tensor-parallel GPUs (`None`: every size).
    pub tp: Option<u32>,
    /// The load level (`None`: every level).
    pub load: Option<LoadLevel>,
    /// The metric.
    pub metric: &'static str,
    /// Runs of the group with this metric.
    pub runs: usize,
    /// Errors in the statistics (see [`RunRow::counts`]).
    pub count: usize,
    /// Median |error| (`None` when `count` is 0).
    pub median_abs_error: Option<f64>,
    /// 90th percentile of |error|.
    pub p90_abs_error: Option<f64>,
    /// Signed bias: the median error (above 0: predicted high).
    pub bias: Option<f64>,
    /// Runs of the group whose predicted and measured overload agree.
    pub overload_agree: usize,
    /// Runs of the group with both verdicts.
    pub overload_judged: usize,
    /// Share of the counted measurements inside their prediction's error band (`None`: no band
    /// drawn; the confidence option of `validate-serving`).
    pub band_coverage: Option<f64>,
}

/// The `q` quantile (0 to 1) of `v` by linear interpolation between ranks (`None` when empty).
pub fn quantile(v: &[f64], q: f64) -> Option<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        return None;
    }
    let pos = q.clamp(0.0, 1.0) * (n - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    Some(s[lo] + (s[hi] - s[lo]) * (pos - lo as f64))
}

/// The order metrics are listed in: a run's figures' order ([`crate::runs::Figures::named`]).
const METRIC_ORDER: [&str; 14] = [
    "ttft_mean_s",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "tpot_mean_s",
    "tpot_p50_s",
    "tpot_p90_s",
    "tpot_p99_s",
    "e2e_mean_s",
    "e2e_p50_s",
    "e2e_p90_s",
    "e2e_p99_s",
    "requests_per_s",
    "output_tok_s",
];

fn metric_rank(m: &str) -> usize {
    METRIC_ORDER
        .iter()
        .position(|x| *x == m)
        .unwrap_or(METRIC_ORDER.len())
}

/// The statistics of one group's `rows` for `metric`.
fn group(
    key: (
        Option<String>,
        Option<String>,
        Option<u32>,
        Option<LoadLevel>,
    ),
    metric: &'static str,
    rows: &[&RunRow],
) -> GroupSummary {
    let mut runs = 0;
    let mut errors = Vec::new();
    let (mut banded, mut covered) = (0usize, 0usize);
    for r in rows {
        for m in r.metrics.iter().filter(|m| m.metric == metric) {
            runs += 1;
            if r.counts(m) {
                errors.push(m.error);
                if let Some(b) = &m.band {
                    banded += 1;
                    covered += usize::from(b.covers(m.measured));
                }
            }
        }
    }
    let abs: Vec<f64> = errors.iter().map(|e| e.abs()).collect();
    let verdicts: Vec<bool> = rows.iter().filter_map(|r| r.overload_agrees()).collect();
    GroupSummary {
        model: key.0,
        gpu: key.1,
        tp: key.2,
        load: key.3,
        metric,
        runs,
        count: errors.len(),
        median_abs_error: quantile(&abs, 0.5),
        p90_abs_error: quantile(&abs, 0.9),
        bias: quantile(&errors, 0.5),
        overload_agree: verdicts.iter().filter(|a| **a).count(),
        overload_judged: verdicts.len(),
        band_coverage: (banded > 0).then(|| covered as f64 / banded as f64),
    }
}

/// The summary of `rows`: one group per model, GPU, TP, load level and metric (sorted by those,
/// metrics in a run's figures' order), then one per metric over every run.
pub fn summarize(rows: &[RunRow]) -> Vec<GroupSummary> {
    type Key = (String, String, u32, LoadLevel);
    let mut groups: BTreeMap<Key, Vec<&RunRow>> = BTreeMap::new();
    let mut metrics: Vec<&'static str> = Vec::new();
    for r in rows {
        let key = (r.model.clone(), r.gpu.clone(), r.tp, r.load);
        groups.entry(key).or_default().push(r);
        for m in &r.metrics {
            if !metrics.contains(&m.metric) {
                metrics.push(m.metric);
            }
        }
    }
    metrics.sort_by_key(|m| (metric_rank(m), *m));
    let mut out = Vec::new();
    for ((model, gpu, tp, load), members) in &groups {
        for &metric in &metrics {
            if members
                .iter()
                .any(|r| r.metrics.iter().any(|m| m.metric == metric))
            {
                let key = (
                    Some(model.clone()),
                    Some(gpu.clone()),
                    Some(*tp),
                    Some(*load),
                );
                out.push(group(key, metric, members));
            }
        }
    }
    let all: Vec<&RunRow> = rows.iter().collect();
    for &metric in &metrics {
        out.push(group((None, None, None, None), metric, &all));
    }
    out
}

/// A stage left out: its scenario could not be built (see [`StageSkip`]).
#[derive(Debug)]
pub struct Skipped {
    /// The file.
    pub file: String,
    /// The stage.
    pub stage: String,
    /// Why.
    pub why: StageSkip,
}

/// Every run of every file replayed: run by run, the summary, and the stages left out.
#[derive(Debug, Serialize)]
pub struct Fidelity {
    /// The files read, in order.
    pub files: Vec<String>,
    /// The runs, in the files' order and each file's.
    pub runs: Vec<RunRow>,
    /// The summary ([`summarize`]).
    pub summary: Vec<GroupSummary>,
    /// Stages whose scenario could not be built, in order.
    #[serde(skip)]
    pub skipped: Vec<Skipped>,
}

/// One replay to run.
enum Job {
    Stage {
        file: usize,
        stage: Box<StageRun>,
        load: LoadLevel,
        fraction: f64,
    },
    Run {
        file: usize,
        run: MeasuredRun,
        model: String,
    },
}

/// What one replay gave.
enum Outcome {
    Row(Box<RunRow>),
    Skip(Skipped),
}

/// Load level and fraction of every stage of one table, by experiment.
fn load_levels(stages: &[StageRun]) -> Vec<(LoadLevel, f64)> {
    let mut ramps: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for s in stages {
        let r = ramps.entry(&s.experiment).or_default();
        if !r.contains(&s.rate_rps) {
            r.push(s.rate_rps);
        }
    }
    stages
        .iter()
        .map(|s| {
            let rates = &ramps[s.experiment.as_str()];
            let top = rates.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let level = LoadLevel::of(s.rate_rps, top, rates.len());
            let fraction = if level == LoadLevel::Only {
                1.0
            } else {
                s.rate_rps / top
            };
            (level, fraction)
        })
        .collect()
}

/// Replays every run of the files `inputs` stand for ([`expand_inputs`]) and reports predicted
/// against measured (see the module docs). `base` gives the model and GPU over every stage's
/// own (as `serve`'s compare-to reads a stage table) and the scenario per-request runs replay
/// on; `progress` hears each replay end.
pub fn validate_serving(
    inputs: &[PathBuf],
    base: &RawServeScenario,
    bands: Option<&crate::bands::BandSettings>,
    progress: &dyn kvplan_vocab::Progress,
) -> Result<Fidelity, FidelityError> {
    let files = expand_inputs(inputs)?;
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let mut jobs = Vec::new();
    for (i, f) in files.iter().enumerate() {
        match Measured::open(f)? {
            Measured::Stages(stages) => {
                // A row naming a model or GPU kvplan does not know is refused now, before any
                // replay.
                check_stage_names(&stages, base.model.as_deref(), base.hardware.as_deref())?;
                let levels = load_levels(&stages);
                for (stage, (load, fraction)) in stages.into_iter().zip(levels) {
                    jobs.push(Job::Stage {
                        file: i,
                        stage: Box::new(stage),
                        load,
                        fraction,
                    });
                }
            }
            Measured::Run(run) => {
                let no = |field| FidelityError::NoTarget {
                    path: names[i].clone(),
                    field,
                };
                let model = (base.model.clone())
                    .or_else(|| run.model.clone())
                    .ok_or_else(|| no("model"))?;
                if base.hardware.is_none() {
                    return Err(no("hardware"));
                }
                jobs.push(Job::Run {
                    file: i,
                    run,
                    model,
                });
            }
        }
    }
    progress.start(jobs.len() as u64, "runs replayed");
    let outcomes: Vec<Result<Outcome, FidelityError>> = jobs
        .par_iter()
        .map(|job| {
            let r = replay(job, base, bands, &names);
            progress.advance();
            r
        })
        .collect();
    let mut runs = Vec::new();
    let mut skipped = Vec::new();
    let mut replayed = vec![0usize; files.len()];
    let mut tables = vec![false; files.len()];
    for (job, outcome) in jobs.iter().zip(outcomes) {
        let file = match job {
            Job::Stage { file, .. } => {
                tables[*file] = true;
                *file
            }
            Job::Run { file, .. } => *file,
        };
        match outcome? {
            Outcome::Row(row) => {
                replayed[file] += 1;
                runs.push(*row);
            }
            Outcome::Skip(s) => skipped.push(s),
        }
    }
    if let Some(i) = (0..files.len()).find(|&i| tables[i] && replayed[i] == 0) {
        let path = names[i].clone();
        let skipped = (skipped.into_iter())
            .filter(|s| s.file == path)
            .map(|s| (s.stage, s.why))
            .collect();
        return Err(FidelityError::NoStage { path, skipped });
    }
    let summary = summarize(&runs);
    Ok(Fidelity {
        files: names,
        runs,
        summary,
        skipped,
    })
}

fn replay(
    job: &Job,
    base: &RawServeScenario,
    bands: Option<&crate::bands::BandSettings>,
    names: &[String],
) -> Result<Outcome, FidelityError> {
    match job {
        Job::Stage {
            file,
            stage,
            load,
            fraction,
        } => {
            let path = &names[*file];
            let (model, hardware) = (base.model.as_deref(), base.hardware.as_deref());
            let replayed =
                crate::runs::replay_stage(stage, model, hardware).map_err(|e| match e {
                    ReplayError::Refused(e) => FidelityError::Runs(e),
                    ReplayError::Scenario(source) => FidelityError::Replay {
                        path: path.clone(),
                        run: stage.name.clone(),
                        source: Box::new(source),
                    },
                })?;
            let (sc, c) = match replayed {
                Ok(r) => r,
                Err(why) => {
                    return Ok(Outcome::Skip(Skipped {
                        file: path.clone(),
                        stage: stage.name.clone(),
                        why,
                    }));
                }
            };
            let metric = |metric, p: f64, m: f64, error| MetricError {
                band: None,
                metric,
                predicted: p,
                measured: m,
                error,
            };
            let (p, m) = (&c.predicted, &c.measured);
            let mut metrics = vec![
                metric("ttft_mean_s", p.ttft_mean_s, m.ttft_mean_s, c.ttft_error),
                metric("tpot_mean_s", p.tpot_s, m.tpot_s, c.tpot_error),
                metric("e2e_mean_s", p.e2e_mean_s, m.e2e_mean_s, c.e2e_error),
                metric(
                    "requests_per_s",
                    p.throughput_rps,
                    m.throughput_rps,
                    c.throughput_error,
                ),
            ];
            if let Some(settings) = bands {
                let failed = |source: ScenarioError| FidelityError::Replay {
                    path: path.clone(),
                    run: stage.name.clone(),
                    source: Box::new(source),
                };
                let reqs = sc.requests().map_err(|e| failed(e.into()))?;
                let spread = crate::bands::CostSpread::builtin();
                let drawn = crate::bands::perturbed_runs(&sc, &reqs, &spread, settings)
                    .map_err(|e| failed(e.into()))?;
                let residuals = crate::bands::Residuals::builtin();
                for me in &mut metrics {
                    use crate::bands::Metric as B;
                    let b = match me.metric {
                        "ttft_mean_s" => B::TtftMean,
                        "tpot_mean_s" => B::TpotMean,
                        "e2e_mean_s" => B::E2eMean,
                        _ => B::RequestsPerS,
                    };
                    let draws: Vec<f64> = drawn.iter().map(|o| b.of(o)).collect();
                    me.band = crate::bands::band(
                        me.predicted,
                        &draws,
                        &residuals.of(b),
                        settings.coverage,
                    );
                }
            }
            Ok(Outcome::Row(Box::new(RunRow {
                file: path.clone(),
                run: c.name.clone(),
                kind: RunKind::Stage,
                model: sc.model.name.clone(),
                gpu: sc.hardware.name.clone(),
                tp: sc.tensor_parallel_size.max(1),
                rate_rps: c.rate_rps,
                load: *load,
                load_fraction: *fraction,
                overloaded_predicted: Some(p.overloaded),
                overloaded_measured: Some(m.overloaded),
                metrics,
                median_request_e2e_error: None,
                median_request_ttft_error: None,
            })))
        }
        Job::Run { file, run, model } => {
            let path = &names[*file];
            let failed = |source: ScenarioError| FidelityError::Replay {
                path: path.clone(),
                run: run.name.clone(),
                source: Box::new(source),
            };
            let mut raw = base.clone();
            raw.model = Some(model.clone());
            raw.workload =
                run.replay_workload(&base.workload)
                    .map_err(|message| FidelityError::Workload {
                        path: path.clone(),
                        message,
                    })?;
            raw.serve.record_requests = Some(true);
            raw.serve.record_timeseries = Some(false);
            let sc = raw.resolve().map_err(failed)?;
            let out = sc
                .run(&run.to_requests())
                .map_err(|e| failed(ScenarioError::Serve(e)))?;
            let cmp = compare(run, &out);
            Ok(Outcome::Row(Box::new(RunRow {
                file: path.clone(),
                run: run.name.clone(),
                kind: RunKind::Requests,
                model: sc.model.name.clone(),
                gpu: sc.hardware.name.clone(),
                tp: sc.tensor_parallel_size.max(1),
                rate_rps: offered_rate(run),
                load: LoadLevel::Only,
                load_fraction: 1.0,
                overloaded_predicted: None,
                overloaded_measured: None,
                metrics: cmp
                    .metrics
                    .into_iter()
                    .filter(|m| m.metric != "served")
                    .collect(),
                median_request_e2e_error: Some(cmp.median_request_e2e_error),
                median_request_ttft_error: Some(cmp.median_request_ttft_error),
            })))
        }
    }
}

/// A per-request run's offered rate: the sends after the first over the time to the last.
fn offered_rate(run: &MeasuredRun) -> f64 {
    let n = run.requests.len();
    let span = run.requests.last().map_or(0.0, |r| r.arrival_s);
    if n > 1 && span > 0.0 {
        (n - 1) as f64 / span
    } else {
        f64::NAN
    }
}

/// The residuals `ln(measured / predicted)` of one stage replayed as `out`; `None` for a stage
/// the real server or the prediction overloaded (its latencies are not comparable).
pub fn stage_residuals(stage: &StageRun, out: &ServeReport) -> Option<[f64; 6]> {
    let cmp = crate::runs::StageComparison::new(stage, out);
    if cmp.measured.overloaded || cmp.predicted.overloaded {
        return None;
    }
    let r = |m: Option<f64>, p: f64| match m {
        Some(m) if m > 0.0 && p > 0.0 => (m / p).ln(),
        _ => f64::NAN,
    };
    let p = &cmp.predicted;
    let m = &cmp.measured;
    let s = &out.summary;
    Some([
        r(Some(m.ttft_mean_s), p.ttft_mean_s),
        r(stage.ttft_p99_s, s.ttft_s.p99),
        r(Some(m.tpot_s), p.tpot_s),
        r(Some(m.e2e_mean_s), p.e2e_mean_s),
        r(stage.e2e_p99_s, s.e2e_s.p99),
        r(
            Some(m.throughput_rps).filter(|t| t.is_finite()),
            p.throughput_rps,
        ),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(
        model: &str,
        load: LoadLevel,
        over: (bool, bool),
        errors: &[(&'static str, f64)],
    ) -> RunRow {
        RunRow {
            file: "t.csv".into(),
            run: format!("{model} {load}"),
            kind: RunKind::Stage,
            model: model.into(),
            gpu: "h100-sxm".into(),
            tp: 1,
            rate_rps: 1.0,
            load,
            load_fraction: 1.0,
            overloaded_predicted: Some(over.0),
            overloaded_measured: Some(over.1),
            metrics: errors
                .iter()
                .map(|&(metric, error)| MetricError {
                    band: None,
                    metric,
                    predicted: 1.0 + error,
                    measured: 1.0,
                    error,
                })
                .collect(),
            median_request_e2e_error: None,
            median_request_ttft_error: None,
        }
    }

    fn close(a: Option<f64>, b: f64) -> bool {
        a.is_some_and(|a| (a - b).abs() < 1e-12)
    }

    #[test]
    fn quantiles_interpolate_between_ranks() {
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[3.0], 0.9), Some(3.0));
        // An even count's median is the mean of the middle two, as `serve --compare-to` has it.
        assert!(close(quantile(&[4.0, 1.0, 3.0, 2.0], 0.5), 2.5));
        // p90 of 1..=10: rank 8.1 of 0..9 → 9.1.
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert!(close(quantile(&v, 0.9), 9.1));
        assert!(close(quantile(&[-0.3, 0.1, 0.2], 0.5), 0.1));
    }

    #[test]
    fn load_levels_are_relative_to_the_experiments_top_rate() {
        assert_eq!(LoadLevel::of(4.0, 4.0, 1), LoadLevel::Only);
        assert_eq!(LoadLevel::of(20.0, 20.0, 2), LoadLevel::Top);
        assert_eq!(LoadLevel::of(10.0, 20.0, 2), LoadLevel::Medium);
        assert_eq!(LoadLevel::of(9.99, 20.0, 2), LoadLevel::Light);
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../data/validation/real_vllm/vllm_h100_llama2-7b_mixtral-8x7b.csv"
        );
        let stages = StageRun::read(std::path::Path::new(path)).unwrap();
        let levels = load_levels(&stages);
        let of = |name: &str| {
            let i = stages.iter().position(|s| s.name == name).unwrap();
            levels[i]
        };
        // codegen: 5 then 10 req/s; general: 8 then 20; reasoning: 4 alone.
        assert_eq!(
            of("20260217-155451-llama-2-7b-tp1-codegen stage 0"),
            (LoadLevel::Medium, 0.5)
        );
        assert_eq!(
            of("20260217-155451-llama-2-7b-tp1-codegen stage 1"),
            (LoadLevel::Top, 1.0)
        );
        assert_eq!(
            of("20260217-231439-llama-2-7b-tp1-general stage 0"),
            (LoadLevel::Light, 0.4)
        );
        assert_eq!(
            of("20260217-170634-llama-2-7b-tp1-reasoning stage 0"),
            (LoadLevel::Only, 1.0)
        );
    }

    /// Groups by model, GPU, TP, load level and metric; a measured-overloaded run is out of the
    /// latency statistics but in throughput's and in the overload agreement; an error that is
    /// not a number counts nowhere; the totals span every group.
    #[test]
    fn summary_groups_and_statistics() {
        let rows = vec![
            row(
                "a",
                LoadLevel::Top,
                (false, false),
                &[("ttft_mean_s", 0.10), ("requests_per_s", -0.02)],
            ),
            row(
                "a",
                LoadLevel::Top,
                (false, false),
                &[("ttft_mean_s", -0.30), ("requests_per_s", 0.00)],
            ),
            row(
                "a",
                LoadLevel::Top,
                (false, false),
                &[("ttft_mean_s", 0.20), ("requests_per_s", f64::NAN)],
            ),
            // Measured overloaded, predicted served: its TTFT is left out, its throughput counts.
            row(
                "a",
                LoadLevel::Top,
                (false, true),
                &[("ttft_mean_s", 5.0), ("requests_per_s", 0.9)],
            ),
            row(
                "a",
                LoadLevel::Light,
                (true, false),
                &[("ttft_mean_s", f64::INFINITY), ("requests_per_s", 0.5)],
            ),
            row(
                "b",
                LoadLevel::Only,
                (true, true),
                &[("ttft_mean_s", -0.5), ("requests_per_s", -0.1)],
            ),
        ];
        let s = summarize(&rows);
        let keys: Vec<(Option<&str>, Option<LoadLevel>, &str)> = s
            .iter()
            .map(|g| (g.model.as_deref(), g.load, g.metric))
            .collect();
        assert_eq!(
            keys,
            [
                (Some("a"), Some(LoadLevel::Light), "ttft_mean_s"),
                (Some("a"), Some(LoadLevel::Light), "requests_per_s"),
                (Some("a"), Some(LoadLevel::Top), "ttft_mean_s"),
                (Some("a"), Some(LoadLevel::Top), "requests_per_s"),
                (Some("b"), Some(LoadLevel::Only), "ttft_mean_s"),
                (Some("b"), Some(LoadLevel::Only), "requests_per_s"),
                (None, None, "ttft_mean_s"),
                (None, None, "requests_per_s"),
            ]
        );
        let top_ttft = &s[2];
        assert_eq!((top_ttft.runs, top_ttft.count), (4, 3));
        assert!(close(top_ttft.median_abs_error, 0.2));
        assert!(close(top_ttft.p90_abs_error, 0.28));
        assert!(close(top_ttft.bias, 0.1));
        assert_eq!((top_ttft.overload_agree, top_ttft.overload_judged), (3, 4));
        assert_eq!(top_ttft.band_coverage, None);
        let top_tput = &s[3];
        assert_eq!((top_tput.runs, top_tput.count), (4, 3));
        assert!(close(top_tput.median_abs_error, 0.02));
        assert!(close(top_tput.bias, 0.0));
        // An infinite error alone: nothing to summarise, the run still counted.
        let light_ttft = &s[0];
        assert_eq!((light_ttft.runs, light_ttft.count), (1, 0));
        assert_eq!(light_ttft.median_abs_error, None);
        assert_eq!(
            (light_ttft.overload_agree, light_ttft.overload_judged),
            (0, 1)
        );
        let all_ttft = &s[6];
        assert_eq!((all_ttft.runs, all_ttft.count), (6, 3));
        assert_eq!((all_ttft.overload_agree, all_ttft.overload_judged), (4, 6));
        // b's -0.5 was measured overloaded: out. TTFT errors 0.1, -0.3, 0.2.
        assert!(close(all_ttft.bias, 0.1));
        let all_tput = &s[7];
        assert_eq!(all_tput.count, 5);
        assert!(close(all_tput.median_abs_error, 0.1));
    }

    /// Per-request runs have no overload verdict: they are out of the agreement, not counted
    /// as agreeing.
    #[test]
    fn rates_are_not_latencies() {
        for m in ["ttft_mean_s", "e2e_p99_s", "tpot_p50_s"] {
            assert!(is_latency(m), "{m}");
        }
        // Every rate a comparison names, in the one vocabulary (an overloaded run keeps them).
        for m in ["requests_per_s", "output_tok_s", "total_tok_s"] {
            assert!(!is_latency(m), "{m}");
        }
    }

    #[test]
    fn runs_without_verdicts_stay_out_of_the_agreement() {
        let mut r = row("a", LoadLevel::Only, (false, false), &[("e2e_p99_s", 0.1)]);
        r.overloaded_predicted = None;
        r.overloaded_measured = None;
        r.kind = RunKind::Requests;
        let s = summarize(&[r]);
        assert_eq!(s.len(), 2);
        assert_eq!((s[1].overload_agree, s[1].overload_judged), (0, 0));
        assert_eq!(s[1].count, 1);
    }

    #[test]
    fn folders_expand_to_their_measured_files_by_name() {
        let dir = std::env::temp_dir().join(format!("kvplan-fidelity-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("inner")).unwrap();
        for f in ["b.json", "a.CSV", "c.csv", "notes.txt", "inner/d.csv"] {
            std::fs::write(dir.join(f), "x").unwrap();
        }
        let one = dir.join("c.csv");
        let files = expand_inputs(&[one.clone(), dir.clone()]).unwrap();
        let names: Vec<String> = files
            .iter()
            .map(|f| f.strip_prefix(&dir).unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["c.csv", "a.CSV", "b.json", "c.csv"]);
        let e = expand_inputs(&[dir.join("inner").join("nothing")]).unwrap_err();
        assert!(matches!(e, FidelityError::Unreadable { .. }), "{e}");
        std::fs::remove_file(dir.join("inner/d.csv")).unwrap();
        let e = expand_inputs(&[dir.join("inner")]).unwrap_err();
        assert!(
            e.to_string()
                .ends_with("inner: no .csv or .json file in the folder"),
            "{e}"
        );
        assert!(matches!(expand_inputs(&[]), Err(FidelityError::NoInputs)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
