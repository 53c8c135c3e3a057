//! `kvplan plan-deployment`: the cheapest cluster serving a load under latency objectives, by
//! simulating candidate clusters (`kvplan_serve::deploy`), with the Pareto frontier, every
//! candidate as CSV/JSON and the frontier as SVG; shards and their merge.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};

use clap::Args;
use kvplan_serve::capacity::Slo;
use kvplan_serve::deploy::{
    DEFAULT_MAX_GPUS, Knob, Layout, Plan, PlanError, PlanOptions, Space, check_knob,
};
use kvplan_serve::router::RouterKind;
use kvplan_serve::scenario::RawServeScenario;

use crate::args::{OutputArgs, RequestsArgs};
use crate::error::CliError;
use crate::messages::serve_error;

/// `--help`'s long text (`src/help/plan-deployment.txt`).
pub const PLAN_DEPLOYMENT_LONG: &str = include_str!("../help/plan-deployment.txt").trim_ascii_end();

/// Requests per candidate unless the workload says otherwise.
pub const DEFAULT_REQUESTS: u64 = 10_000;

/// `kvplan plan-deployment`.
#[derive(Debug, Args)]
pub struct PlanDeploymentArgs {
    /// A serving scenario TOML (as `kvplan serve FILE` reads it): model, workload, engine
    /// settings; flags override it
    #[arg(value_name = "SERVE_SCENARIO")]
    pub scenario: Option<PathBuf>,
    /// Model preset or config.json
    #[arg(long, value_name = "NAME|PATH")]
    pub model: Option<String>,
    /// Latency objectives, all of which must hold, e.g. ttft_p99=2s,tpot_p99=100ms (metrics
    /// ttft, tpot, e2e, queue; percentiles p50, p90, p95, p99)
    #[arg(long, value_name = "SPEC")]
    pub slo: Option<String>,
    /// GPUs to consider, comma-separated presets or profile files [default: the scenario's]
    #[arg(long, value_name = "LIST")]
    pub hardware: Option<String>,
    /// Tensor-parallel sizes, comma-separated [default: the scenario's, or 1]
    #[arg(long, value_name = "LIST")]
    pub tensor_parallel_size: Option<String>,
    /// Layouts: colocated, and prefill:decode ratios such as 1:1,1:2 [default: colocated]
    #[arg(long, value_name = "LIST")]
    pub layouts: Option<String>,
    /// Routers, comma-separated (see `kvplan serve --help`) [default: the scenario's, or
    /// vllm-dp]
    #[arg(long, value_name = "LIST")]
    pub routers: Option<String>,
    /// Weight quantisations to try: none, fp8, awq, gptq [default: the scenario's]
    #[arg(long, value_name = "LIST")]
    pub quantization: Option<String>,
    /// KV cache dtypes to try: auto, fp8 [default: the scenario's]
    #[arg(long, value_name = "LIST")]
    pub kv_cache_dtype: Option<String>,
    /// max_num_seqs values to try [default: the scenario's, or vLLM's]
    #[arg(long, value_name = "LIST")]
    pub max_num_seqs: Option<String>,
    /// max_num_batched_tokens values to try [default: the scenario's, or vLLM's]
    #[arg(long, value_name = "LIST")]
    pub max_num_batched_tokens: Option<String>,
    /// max_model_len values to try (a long model context may not fit a small GPU's KV cache:
    /// vLLM refuses to start) [default: the scenario's, or the model's]
    #[arg(long, value_name = "LIST")]
    pub max_model_len: Option<String>,
    /// CPU KV tier sizes per replica to try, GiB (0: none) [default: the scenario's]
    #[arg(long, value_name = "LIST")]
    pub kv_offloading_size: Option<String>,
    /// Most GPUs a candidate may have
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_GPUS)]
    pub max_gpus: u32,
    /// Prices per GPU-hour over the profiles', US dollars: NAME=USD[,NAME=USD]
    #[arg(long, value_name = "SPEC")]
    pub price: Option<String>,
    /// The load: `kvplan serve`'s workload flags; --qps is the rate to serve [default: 10000
    /// Poisson requests]
    #[command(flatten)]
    pub requests: RequestsArgs,
    /// Search only the shapes with index % N == I (0-based), e.g. --shard 0/4; prints the
    /// shard as JSON for --merge
    #[arg(long, value_name = "I/N", conflicts_with = "merge")]
    pub shard: Option<String>,
    /// Error bands on the cheapest deployment's objectives at this coverage (alone: 0.8): its
    /// cluster served again --band-draws times with the kernel costs perturbed by the cost
    /// model's calibration residuals, each objective widened by the residuals of the real vLLM
    /// runs kvplan is validated on; says where a band crosses its limit
    #[arg(
        long,
        value_name = "C",
        num_args = 0..=1,
        default_missing_value = "0.8",
        conflicts_with_all = ["shard", "merge"]
    )]
    pub confidence: Option<f64>,
    /// Perturbed runs behind --confidence
    #[arg(long, value_name = "N", default_value_t = 8, requires = "confidence")]
    pub band_draws: u32,
    /// Join shard outputs (JSON of --shard runs) into the unsharded answer, byte for byte
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub merge: Vec<PathBuf>,
    /// Write the frontier (cost against p99 TTFT) as SVG to this file
    #[arg(long, value_name = "PATH")]
    pub svg: Option<PathBuf>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

fn plan_error(e: PlanError) -> CliError {
    match e {
        PlanError::Scenario(s) => serve_error(*s),
        PlanError::Hardware(h) => h.into(),
        PlanError::NoPrice { .. } => CliError::input(format!("--price: {e}")),
        PlanError::Setting { field, ref why } => {
            let flag = match field {
                "plan.hardware" => "--hardware",
                "plan.tensor_parallel_size" => "--tensor-parallel-size",
                "plan.layouts" => "--layouts",
                "plan.routers" => "--routers",
                "plan.max_gpus" => "--max-gpus",
                "plan.shard" => "--shard",
                "merge" => "--merge",
                "gpu.price_usd_per_hour" => "--price",
                "quantization" => "--quantization",
                "kv_cache_dtype" => "--kv-cache-dtype",
                "max_num_seqs" => "--max-num-seqs",
                "max_num_batched_tokens" => "--max-num-batched-tokens",
                "kv_offloading_size_gib" => "--kv-offloading-size",
                "max_model_len" => "--max-model-len",
                other => other,
            };
            CliError::input(format!("{flag}: {why}"))
        }
    }
}

fn items(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim)
}

/// `--price NAME=USD[,NAME=USD]` (`kvplan_vocab::hardware::parse_price_overrides`'s rules).
fn prices(spec: Option<&str>) -> Result<BTreeMap<String, f64>, CliError> {
    let Some(spec) = spec else {
        return Ok(BTreeMap::new());
    };
    let list = kvplan_vocab::hardware::parse_price_overrides(spec)
        .map_err(|e| CliError::input(crate::messages::flags_in_text(&e.to_string())))?;
    Ok(list.into_iter().collect())
}

/// A knob's values from its flag: each checked as its `[serve]` field reads it.
fn knob(
    field: &'static str,
    list: Option<&str>,
    quote: bool,
    none: &[&str],
) -> Result<Option<Knob>, CliError> {
    let Some(list) = list else { return Ok(None) };
    let mut values = Vec::new();
    for v in items(list) {
        if v.is_empty() {
            return Err(plan_error(PlanError::Setting {
                field,
                why: "an empty value; give a comma-separated list".into(),
            }));
        }
        if none.contains(&v) {
            values.push(None);
            continue;
        }
        let toml = if quote {
            format!("\"{v}\"")
        } else {
            v.to_string()
        };
        check_knob(field, &toml).map_err(plan_error)?;
        values.push(Some(toml));
    }
    Ok(Some(Knob { field, values }))
}

impl PlanDeploymentArgs {
    /// The search space from the flags over the scenario's.
    fn space(&self, base: &RawServeScenario) -> Result<Space, CliError> {
        let hardware: Vec<String> = match (&self.hardware, &base.hardware) {
            (Some(l), _) => items(l).map(String::from).collect(),
            (None, Some(h)) => vec![h.clone()],
            (None, None) => {
                return Err(CliError::input(
                    "--hardware: give the GPUs to consider, comma-separated (e.g. h100-sxm,a100-80g-sxm)",
                ));
            }
        };
        let tensor_parallel = match &self.tensor_parallel_size {
            Some(l) => items(l)
                .map(|t| {
                    t.parse::<u32>().ok().filter(|&n| (1..=64).contains(&n)).ok_or_else(|| {
                        CliError::input(format!(
                            "--tensor-parallel-size: '{t}' is not a GPU count from 1 to 64; give counts such as 1,2,4"
                        ))
                    })
                })
                .collect::<Result<_, _>>()?,
            None => vec![base.serve.tensor_parallel_size.unwrap_or(1)],
        };
        let layouts = match &self.layouts {
            Some(l) => items(l)
                .map(|s| {
                    s.parse::<Layout>()
                        .map_err(|e| CliError::input(format!("--layouts: {e}")))
                })
                .collect::<Result<_, _>>()?,
            None => vec![Layout::Colocated],
        };
        let routers = match &self.routers {
            Some(l) => items(l)
                .map(|s| {
                    s.parse::<RouterKind>().map_err(|_| {
                        CliError::input(format!(
                            "--routers: unknown router '{s}'; known: {}",
                            RouterKind::names().join(", ")
                        ))
                    })
                })
                .collect::<Result<_, _>>()?,
            None => vec![base.cluster.router.unwrap_or_default()],
        };
        let knobs = [
            knob(
                "quantization",
                self.quantization.as_deref(),
                true,
                &["none"],
            )?,
            knob("kv_cache_dtype", self.kv_cache_dtype.as_deref(), true, &[])?,
            knob("max_num_seqs", self.max_num_seqs.as_deref(), false, &[])?,
            knob(
                "max_num_batched_tokens",
                self.max_num_batched_tokens.as_deref(),
                false,
                &[],
            )?,
            knob("max_model_len", self.max_model_len.as_deref(), false, &[])?,
            knob(
                "kv_offloading_size_gib",
                self.kv_offloading_size.as_deref(),
                false,
                &["0"],
            )?,
        ];
        Ok(Space {
            hardware,
            tensor_parallel,
            layouts,
            routers,
            knobs: knobs.into_iter().flatten().collect(),
        })
    }
}

fn shard(spec: &str) -> Result<(usize, usize), CliError> {
    let bad = || {
        CliError::input(format!(
            "--shard: '{spec}': write I/N with 0 <= I < N, e.g. --shard 0/4"
        ))
    };
    let (i, n) = spec.split_once('/').ok_or_else(bad)?;
    let (i, n): (usize, usize) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// `kvplan plan-deployment`.
/// `plan` as this command line words it: the fields its prices' sources and its candidates'
/// reasons name (`plan.prices`, `plan.max_gpus`) as their flags.
fn worded(mut plan: Plan) -> Plan {
    use crate::messages::flags_in_text;
    for p in &mut plan.prices {
        p.source = flags_in_text(&p.source);
    }
    for c in plan.shapes.iter_mut().flat_map(|s| &mut s.candidates) {
        c.why = flags_in_text(&c.why);
    }
    plan
}

pub fn plan_deployment(args: &PlanDeploymentArgs) -> Result<String, CliError> {
    let Some(slo_text) = &args.slo else {
        return Err(CliError::input(
            "--slo: required: the latency objectives, e.g. ttft_p99=2s,tpot_p99=100ms",
        ));
    };
    let slo: Slo = slo_text
        .parse()
        .map_err(|e| CliError::input(format!("--slo: {e}")))?;
    let bands = crate::messages::band_settings(args.confidence, args.band_draws)?;
    let mut confidence = None;
    let plan = if args.merge.is_empty() {
        let (plan, base) = search(args, &slo)?;
        if let Some(settings) = &bands {
            confidence =
                kvplan_serve::deploy::confidence(&base, &plan, &slo, &Default::default(), settings)
                    .map_err(plan_error)?;
        }
        plan
    } else {
        let mut parts = Vec::new();
        for p in &args.merge {
            let text = std::fs::read_to_string(p).map_err(|e| {
                CliError::input(format!("--merge: cannot read {}: {e}", p.display()))
            })?;
            let part: Plan = serde_json::from_str(&text).map_err(|e| {
                CliError::input(format!(
                    "--merge: {} is not the JSON of a `plan-deployment --shard` run: {e}",
                    p.display()
                ))
            })?;
            if part.slo != slo.to_string() {
                return Err(CliError::input(format!(
                    "--merge: {} searched under {}, not {}; give the same --slo",
                    p.display(),
                    part.slo,
                    slo
                )));
            }
            parts.push((p.display().to_string(), part));
        }
        Plan::merge(parts).map_err(plan_error)?
    };
    let plan = worded(plan);
    if plan.shard.is_some() {
        return Ok(kvplan_report::json_line(&plan)?);
    }
    let format = args.output.format;
    let out =
        kvplan_report::deploy::render(&plan, &slo, confidence.as_ref(), "--max-gpus", format)?;
    if plan.cheapest().is_none() {
        let miss = match plan.nearest_miss() {
            Some((s, c)) => format!(
                "; nearest miss: {} at ${:.2}/hour: {}{}",
                kvplan_report::deploy::deployment(s, c),
                c.usd_per_hour,
                c.why,
                match c.figures.as_ref().map(|f| f.worst()) {
                    Some(w) if w.is_finite() =>
                        format!(" (its worst objective at {:.0}% of its limit)", 100.0 * w),
                    _ => String::new(),
                }
            ),
            None => {
                "; no candidate could be simulated (see the table for why each was pruned)".into()
            }
        };
        return Err(CliError {
            stdout: Some(out),
            ..CliError::input(format!("--slo: no candidate meets {slo}{miss}"))
        });
    }
    if let Some(path) = &args.svg {
        let svg = kvplan_report::deploy::frontier_svg(&plan, &slo)?;
        kvplan_report::files::write_text(path, "--svg", &svg)?;
    }
    Ok(out)
}

/// The plan, and the base scenario its candidates were built over.
fn search(args: &PlanDeploymentArgs, slo: &Slo) -> Result<(Plan, RawServeScenario), CliError> {
    let r = &args.requests;
    if r.time_scale.is_some() && r.qps.is_some() {
        return Err(CliError::input(
            "--qps, --time-scale: give one: the rate to serve, or a trace's time scale",
        ));
    }
    let file = args
        .scenario
        .as_deref()
        .map(super::serve::read_scenario)
        .transpose()?;
    let mut base = file.unwrap_or_default().overlay(RawServeScenario {
        model: args.model.clone(),
        workload: r.to_config(),
        ..Default::default()
    });
    let w = &mut base.workload;
    if w.trace.is_none() {
        if w.arrivals.is_none() {
            w.arrivals = Some("poisson".into());
        }
        if w.requests.is_none() {
            w.requests = Some(DEFAULT_REQUESTS);
        }
    }
    let mut space = args.space(&base)?;
    // A setting with one value is the base's, not an axis: it stays out of every label.
    let mut fixed = Vec::new();
    space.knobs.retain(|k| match k.values.as_slice() {
        [Some(v)] => {
            fixed.push((k.field.to_string(), v.clone()));
            false
        }
        _ => true,
    });
    if !fixed.is_empty() {
        let over = kvplan_serve::deploy::serve_settings("serve", &fixed).map_err(plan_error)?;
        base.serve = std::mem::take(&mut base.serve).overlay(over);
    }
    let opts = PlanOptions {
        max_gpus: args.max_gpus,
        steady: Default::default(),
        prices: prices(args.price.as_deref())?,
        shard: args.shard.as_deref().map(shard).transpose()?,
    };
    let shapes = kvplan_serve::deploy::shapes(&space).map_err(plan_error)?;
    for name in opts.prices.keys() {
        if !space.hardware.iter().any(|h| h == name) {
            return Err(CliError::input(format!(
                "--price: {name} is not among the GPUs searched ({}); name one of them",
                space.hardware.join(", ")
            )));
        }
    }
    let bar = kvplan_report::progress::bar();
    bar.start(shapes.len() as u64, "shapes searched");
    let done = AtomicU64::new(0);
    let plan = kvplan_serve::deploy::plan(&base, &space, slo, &opts, &|_| {
        bar.set(done.fetch_add(1, Ordering::Relaxed) + 1);
    })
    .map_err(plan_error)?;
    drop(bar);
    Ok((plan, base))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_parse_and_refuse_nonsense() {
        let p = prices(Some("h100-sxm=2.5, a100-80g-sxm=1.2")).unwrap();
        assert_eq!(p["h100-sxm"], 2.5);
        for bad in [
            "h100-sxm=0",
            "h100-sxm=-1",
            "h100-sxm",
            "h100-sxm=x",
            "h100-sxm=1,h100-sxm=2",
        ] {
            let e = prices(Some(bad)).unwrap_err();
            assert_eq!(e.code, 2, "{bad}");
            assert!(e.message.starts_with("--price"), "{bad}: {}", e.message);
        }
    }
}
