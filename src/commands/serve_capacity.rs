//! `kvplan serve-capacity` (also `kvplan capacity --slo`): the highest request rate each serving
//! configuration sustains under latency objectives. The search and the hardware x
//! tensor-parallel grid are `kvplan_serve::capacity`'s; sizing a deployment for a rate is
//! `kvplan plan-deployment`'s.

use std::path::PathBuf;

use clap::Args;
use kvplan_serve::capacity::{
    CapacityError, SearchOptions, Slo, compare_configurations, configurations, search_base,
};
use kvplan_serve::scenario::RawServeScenario;

use crate::args::{Format, OutputArgs, RequestsArgs};
use crate::error::CliError;
use crate::messages::{flag_of, serve_error};

/// `--help`'s long text (`src/help/serve-capacity.txt`).
pub const SERVE_CAPACITY_LONG: &str = include_str!("../help/serve-capacity.txt").trim_ascii_end();

/// `--model` and `--hardware` of the capacity commands.
#[derive(Debug, Args)]
pub struct CapacityTargetArgs {
    /// Model preset or config.json
    #[arg(long, value_name = "NAME|PATH")]
    pub model: Option<String>,
    /// Hardware preset or profile TOML (alias --profile); with --slo, a comma-separated list of
    /// configurations to compare
    #[arg(long, visible_alias = "profile", value_name = "NAME|PATH")]
    pub hardware: Option<String>,
}

/// The serving-capacity search: objectives, grid and workload.
#[derive(Debug, Args)]
pub struct SloArgs {
    /// SLO mode: a serving scenario TOML (as `kvplan serve FILE` reads it); flags override it
    #[arg(value_name = "SERVE_SCENARIO", requires = "slo")]
    pub scenario: Option<PathBuf>,
    /// SLO mode: latency objectives, all of which must hold, e.g. ttft_p99=2s,tpot_p99=100ms
    /// (metrics ttft, tpot, e2e, queue; percentiles p50, p90, p99; units s, ms, us)
    #[arg(long, value_name = "SPEC")]
    pub slo: Option<String>,
    /// Retired: sizing for a rate is `kvplan plan-deployment --qps Q`, which simulates the
    /// whole cluster (refused with that pointer)
    #[arg(long, value_name = "QPS", hide = true, allow_negative_numbers = true)]
    pub target_qps: Option<f64>,
    /// SLO mode: tensor-parallel sizes to compare, comma-separated [default: the scenario's, or 1]
    #[arg(long, value_name = "N[,N]", requires = "slo")]
    pub tensor_parallel_size: Option<String>,
    /// SLO mode: the requests served at each rate tried, as `kvplan serve` takes them (a trace
    /// is rescaled to each rate) [default: the scenario's, or 1000 Poisson requests]
    #[command(flatten)]
    pub requests: RequestsArgs,
    /// SLO mode: stop the search when the passing and failing rates are within this fraction
    #[arg(
        long,
        value_name = "FRACTION",
        default_value_t = 0.02,
        requires = "slo"
    )]
    pub qps_tolerance: f64,
    /// SLO mode: an error band on each sustainable rate at this coverage (alone: 0.8): the
    /// search run again with the kernel costs perturbed by the cost model's calibration
    /// residuals, widened by the residuals of the real vLLM runs kvplan is validated on
    #[arg(
        long,
        value_name = "C",
        num_args = 0..=1,
        default_missing_value = "0.8",
        requires = "slo"
    )]
    pub confidence: Option<f64>,
    /// SLO mode: searches with perturbed costs behind --confidence's bands
    #[arg(long, value_name = "N", default_value_t = 8, requires = "confidence")]
    pub band_draws: u32,
}

/// `kvplan serve-capacity`.
#[derive(Debug, Args)]
pub struct ServeCapacityArgs {
    /// Model and hardware
    #[command(flatten)]
    pub target: CapacityTargetArgs,
    /// The search
    #[command(flatten)]
    pub slo: SloArgs,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `kvplan serve-capacity`.
pub fn serve_capacity(args: &ServeCapacityArgs) -> Result<String, CliError> {
    slo_capacity(&args.target, &args.slo, args.output.format)
}

impl SloArgs {
    /// Without `--slo` (`kvplan capacity`'s context capacity) the search's settings mean
    /// nothing: refuse them rather than ignore them.
    pub fn refuse_without_slo(&self) -> Result<(), CliError> {
        if self.slo.is_none() && self.requests != RequestsArgs::default() {
            return Err(CliError::input(
                "--slo: required with a serving workload (--arrivals, --lengths, --requests-trace, ...): the serving capacity under latency objectives",
            ));
        }
        Ok(())
    }
}

/// A capacity error with the flag it concerns (a setting's through the one table).
fn capacity_error(e: CapacityError) -> CliError {
    match e {
        CapacityError::Scenario(s) => serve_error(*s),
        CapacityError::Hardware(h) => h.into(),
        CapacityError::Slo(_) => CliError::input(format!("--slo: {e}")),
        CapacityError::NoHardware => CliError::input(
            "--hardware: give one or more presets or profile files, comma-separated (e.g. a100-80g-sxm,h100-sxm)",
        ),
        CapacityError::Setting { field, ref why } => {
            CliError::input(format!("{}: {why}", flag_of(field).unwrap_or(field)))
        }
        other => CliError::input(other.to_string()),
    }
}

/// The highest request rate each configuration sustains under the latency objectives.
pub fn slo_capacity(
    target: &CapacityTargetArgs,
    slo_args: &SloArgs,
    format: Format,
) -> Result<String, CliError> {
    if slo_args.target_qps.is_some() {
        return Err(CliError::input(
            "--target-qps: sizing a deployment for a rate is `kvplan plan-deployment --qps Q` now: it simulates the candidate clusters (replicas, routers, prefill/decode pools) and prices them, instead of multiplying one replica",
        ));
    }
    let Some(slo) = &slo_args.slo else {
        return Err(CliError::input(
            "--slo: required: the latency objectives, e.g. ttft_p99=2s,tpot_p99=100ms",
        ));
    };
    let slo: Slo = slo.parse::<Slo>().map_err(|e| capacity_error(e.into()))?;
    let rate = &slo_args.requests;
    if let Some(flag) = [(rate.qps, "--qps"), (rate.time_scale, "--time-scale")]
        .into_iter()
        .find_map(|(v, flag)| v.map(|_| flag))
    {
        return Err(CliError::input(format!(
            "{flag}: the search chooses the request rate; to size a deployment for a rate use `kvplan plan-deployment --qps Q`"
        )));
    }
    let base = slo_args
        .scenario
        .as_deref()
        .map(super::serve::read_scenario);
    // Flags given override the scenario's fields, by `kvplan serve`'s rules.
    let base = base
        .transpose()?
        .unwrap_or_default()
        .overlay(RawServeScenario {
            model: target.model.clone(),
            workload: slo_args.requests.to_config(),
            ..Default::default()
        });
    let tps = slo_args.tensor_parallel_size.as_deref();
    let (hardware, tps) =
        configurations(target.hardware.as_deref(), tps).map_err(capacity_error)?;
    let bands = crate::messages::band_settings(slo_args.confidence, slo_args.band_draws)?;
    let opts = SearchOptions {
        rel_tol: slo_args.qps_tolerance,
        bands,
        ..SearchOptions::default()
    };
    let base = search_base(base);
    let bar = kvplan_report::progress::bar();
    let cmp = compare_configurations(&base, &hardware, &tps, &slo, opts, bar.as_ref())
        .map_err(capacity_error)?;
    drop(bar);
    let requests = base.workload.requests.unwrap_or(0);
    let sizing = "kvplan plan-deployment --qps Q";
    let text = kvplan_report::serve::capacity(&slo, &cmp, &opts, requests, sizing, format)?;
    if cmp.rows.iter().any(|r| r.max_qps.is_some()) {
        return Ok(text);
    }
    // No configuration has an answer: say so, after the table that shows how far each missed.
    let misses: Vec<String> = (cmp.rows.iter())
        .map(|r| {
            format!(
                "{} TP {} misses {} at {} req/s",
                r.hardware,
                r.tensor_parallel_size,
                if r.limited_by.is_empty() {
                    "the SLO".to_string()
                } else {
                    r.limited_by.join(", ")
                },
                r.fails_at_qps.map_or("-".into(), |q| format!("{q:.4}"))
            )
        })
        .collect();
    Err(CliError::no_answer(
        text,
        format!(
            "--slo: no configuration meets {slo} at any rate tried ({}); loosen the objectives or give larger --hardware / --tensor-parallel-size",
            misses.join("; ")
        ),
    ))
}
