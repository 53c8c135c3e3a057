//! `kvplan serve-capacity` (also `kvplan capacity --slo`): the highest request rate each serving
//! configuration sustains under latency objectives. The search, the hardware x tensor-parallel
//! grid, the sizing and the cheapest pick are `kvplan_serve::capacity`'s.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;
use kvplan_serve::capacity::{
    CapacityError, ConfigCapacity, RankedBy, SearchOptions, Slo, compare_configurations,
    search_base,
};
use kvplan_serve::scenario::RawServeScenario;

use crate::args::{Format, OutputArgs};
use crate::error::CliError;
use crate::messages::serve_error;
use crate::render::{Table, csv_number, csv_text, json_line, secs};

pub const SERVE_CAPACITY_LONG: &str = "\
For each serving configuration (--hardware list x
--tensor-parallel-size list) the highest request rate whose latencies meet every objective,
found on the serving simulator (the workload served at a rate: halve from 1 req/s until one
passes, double until one fails, bisect to --qps-tolerance; each rate serves the same seeded
requests, so the answer is deterministic). With --target-qps, each configuration is sized
(replicas = ceil(target / max rate), GPUs = replicas x TP) and the cheapest that meets the
target is named: by price when every profile gives gpu.price_usd_per_hour (add it in a profile
file: base = \"h100-sxm\" then [gpu] price_usd_per_hour = 4.0), else by GPU count.
  kvplan serve-capacity --slo ttft_p99=2s,tpot_p99=100ms --model llama-2-7b --hardware a100-80g-sxm,h100-sxm --lengths 512 --output-lengths 128 --target-qps 20
  kvplan serve-capacity --slo ttft_p99=2s scenarios/llama-2-7b-a100-serve.toml --tensor-parallel-size 1,2
`kvplan capacity --slo ...` (the older spelling) runs the same search.";

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
    /// SLO mode: the request rate to serve; sizes each configuration (replicas, GPUs, price per
    /// hour from the profile's gpu.price_usd_per_hour) and names the cheapest
    #[arg(long, value_name = "QPS", requires = "slo")]
    pub target_qps: Option<f64>,
    /// SLO mode: tensor-parallel sizes to compare, comma-separated [default: the scenario's, or 1]
    #[arg(long, value_name = "N[,N]", requires = "slo")]
    pub tensor_parallel_size: Option<String>,
    /// SLO mode: arrival process (poisson, gamma:CV) [default: the scenario's, or poisson]
    #[arg(long, value_name = "KIND", requires = "slo")]
    pub arrivals: Option<String>,
    /// SLO mode: prompt lengths (N, uniform:LO:HI, zipf:..., lognormal:..., trace:FILE)
    #[arg(long, value_name = "SPEC", requires = "slo")]
    pub lengths: Option<String>,
    /// SLO mode: output lengths [default: the scenario's, or 128]
    #[arg(long, value_name = "SPEC", requires = "slo")]
    pub output_lengths: Option<String>,
    /// SLO mode: replay a request trace CSV, rescaled to each rate tried
    #[arg(long, alias = "trace", value_name = "FILE", requires = "slo")]
    pub requests_trace: Option<PathBuf>,
    /// SLO mode: requests served at each rate tried [default: the scenario's, or 1000]
    #[arg(long, value_name = "N", requires = "slo")]
    pub requests: Option<u64>,
    /// SLO mode: workload seed [default: the scenario's, or 0]
    #[arg(long, value_name = "N", requires = "slo")]
    pub seed: Option<u64>,
    /// SLO mode: stop the search when the passing and failing rates are within this fraction
    #[arg(
        long,
        value_name = "FRACTION",
        default_value_t = 0.02,
        requires = "slo"
    )]
    pub qps_tolerance: f64,
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
    if args.slo.slo.is_none() {
        return Err(CliError::input(
            "--slo: required: the latency objectives, e.g. ttft_p99=2s,tpot_p99=100ms",
        ));
    }
    slo_capacity(&args.target, &args.slo, args.output.format)
}

/// A capacity error with the flag it concerns.
fn capacity_error(e: CapacityError) -> CliError {
    match e {
        CapacityError::Scenario(s) => serve_error(*s),
        CapacityError::Hardware(h) => h.into(),
        CapacityError::Slo { .. } => CliError::input(format!("--slo: {e}")),
        CapacityError::NoHardware => CliError::input(
            "--hardware: give one or more presets or profile files, comma-separated (e.g. a100-80g-sxm,h100-sxm)",
        ),
        CapacityError::Setting { field, ref why } => {
            let flag = match field {
                "rel_tol" => "--qps-tolerance",
                "target_qps" => "--target-qps",
                other => other,
            };
            CliError::input(format!("{flag}: {why}"))
        }
        other => CliError::input(other.to_string()),
    }
}

/// The highest request rate each configuration sustains under the latency objectives, and with
/// `--target-qps` the cheapest configuration for that rate.
pub fn slo_capacity(
    target: &CapacityTargetArgs,
    slo_args: &SloArgs,
    format: Format,
) -> Result<String, CliError> {
    let slo: Slo = slo_args
        .slo
        .as_deref()
        .unwrap_or_default()
        .parse()
        .map_err(capacity_error)?;
    let mut base = match &slo_args.scenario {
        Some(p) => super::serve::read_scenario(p)?,
        None => RawServeScenario::default(),
    };
    let w = &mut base.workload;
    let pick = |a: &mut Option<String>, b: &Option<String>| {
        if b.is_some() {
            *a = b.clone();
        }
    };
    pick(&mut base.model, &target.model);
    pick(&mut w.arrivals, &slo_args.arrivals);
    pick(&mut w.prompt_lengths, &slo_args.lengths);
    pick(&mut w.output_lengths, &slo_args.output_lengths);
    if slo_args.requests_trace.is_some() {
        w.trace = slo_args.requests_trace.clone();
    }
    if slo_args.requests.is_some() {
        w.requests = slo_args.requests;
    }
    if slo_args.seed.is_some() {
        w.seed = slo_args.seed;
    }
    let hardware: Vec<String> = match &target.hardware {
        Some(list) => list.split(',').map(|h| h.trim().to_string()).collect(),
        None => Vec::new(),
    };
    let tps: Vec<u32> = match &slo_args.tensor_parallel_size {
        Some(list) => list
            .split(',')
            .map(|t| {
                t.trim().parse::<u32>().ok().filter(|&n| n >= 1).ok_or_else(|| {
                    CliError::input(format!(
                        "--tensor-parallel-size: '{t}' is not a GPU count; give counts such as 1,2,4"
                    ))
                })
            })
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    let opts = SearchOptions {
        rel_tol: slo_args.qps_tolerance,
        ..SearchOptions::default()
    };
    let base = search_base(base);
    let cmp = compare_configurations(&base, &hardware, &tps, &slo, opts, slo_args.target_qps)
        .map_err(capacity_error)?;
    let rows = &cmp.rows;
    let cheapest = cmp.cheapest.map(|i| &rows[i]);
    let by_price = cmp.ranked_by == Some(RankedBy::UsdPerHour);
    let steady = opts.steady;
    let num = |v: Option<f64>| v.map_or(String::new(), csv_number);
    match format {
        Format::Json => {
            #[derive(serde::Serialize)]
            struct Report<'a> {
                slo: String,
                target_qps: Option<f64>,
                cheapest: Option<String>,
                ranked_by: Option<&'static str>,
                configurations: &'a [ConfigCapacity],
            }
            json_line(&Report {
                slo: slo.to_string(),
                target_qps: slo_args.target_qps,
                cheapest: cheapest
                    .map(|r| format!("{} x TP {}", r.hardware, r.tensor_parallel_size)),
                ranked_by: cmp.ranked_by.map(RankedBy::as_str),
                configurations: rows,
            })
        }
        Format::Csv => csv_text(
            &[
                "hardware",
                "tensor_parallel_size",
                "max_qps",
                "fails_at_qps",
                "goodput_rps",
                "ttft_p50_s",
                "ttft_p90_s",
                "ttft_p95_s",
                "ttft_p99_s",
                "tpot_p50_s",
                "tpot_p90_s",
                "tpot_p95_s",
                "tpot_p99_s",
                "e2e_p50_s",
                "e2e_p90_s",
                "e2e_p95_s",
                "e2e_p99_s",
                "output_tok_s",
                "rejected",
                "truncated",
                "measured_requests",
                "replicas",
                "gpus",
                "usd_per_hour",
                "usd_per_m_output_tokens",
                "usd_per_m_tokens",
            ],
            &rows
                .iter()
                .map(|r| {
                    let n = csv_number;
                    let mut row = vec![
                        r.hardware.clone(),
                        r.tensor_parallel_size.to_string(),
                        num(r.max_qps),
                        num(r.fails_at_qps),
                        num(r.goodput_rps),
                    ];
                    for p in [&r.ttft, &r.tpot, &r.e2e] {
                        row.extend([n(p.p50), n(p.p90), n(p.p95), n(p.p99)]);
                    }
                    row.extend([
                        n(r.output_tok_s),
                        r.rejected.to_string(),
                        r.truncated.to_string(),
                        r.measured_requests.to_string(),
                        r.replicas.map_or(String::new(), |v| v.to_string()),
                        r.gpus.map_or(String::new(), |v| v.to_string()),
                        num(r.usd_per_hour),
                        num(r.usd_per_m_output_tokens),
                        num(r.usd_per_m_tokens),
                    ]);
                    row
                })
                .collect::<Vec<_>>(),
        ),
        Format::Table => {
            let mut out = format!(
                "serving capacity under {slo} at steady state (each rate served for at least {} \
                 requests and {} s of arrivals, the first {}% left out as warm-up; the queue must \
                 not grow; rejected and truncated requests count as misses; rates within {}%)\n",
                base.workload.requests.unwrap_or(0).max(steady.min_requests),
                steady.min_duration_s,
                steady.warmup_fraction * 100.0,
                slo_args.qps_tolerance * 100.0
            );
            let mut header = vec![
                "hardware",
                "TP",
                "max req/s",
                "goodput req/s",
                "TTFT p50 / p95 / p99",
                "TPOT p50 / p95 / p99",
                "E2E p99",
                "rejected",
                "output tok/s",
                "limited by",
            ];
            let priced = rows.iter().any(|r| r.usd_per_m_output_tokens.is_some());
            if priced {
                header.push("$/M output tok");
            }
            if slo_args.target_qps.is_some() {
                header.extend(["replicas", "GPUs", "$/hour"]);
            }
            let mut t = Table::new(&header);
            for r in rows {
                let three = |p: &kvplan_serve::output::Percentiles| {
                    format!("{} / {} / {}", secs(p.p50), secs(p.p95), secs(p.p99))
                };
                let mut cells = vec![
                    r.hardware.clone(),
                    r.tensor_parallel_size.to_string(),
                    r.max_qps.map_or("none".to_string(), |q| format!("{q:.2}")),
                    r.goodput_rps.map_or("-".into(), |g| format!("{g:.2}")),
                    three(&r.ttft),
                    three(&r.tpot),
                    secs(r.e2e_p99_s),
                    format!("{} of {}", r.rejected, r.measured_requests),
                    format!("{:.0}", r.output_tok_s),
                    r.limited_by.join(", "),
                ];
                if priced {
                    cells.push(
                        r.usd_per_m_output_tokens
                            .map_or("-".into(), |v| format!("{v:.3}")),
                    );
                }
                if slo_args.target_qps.is_some() {
                    cells.push(r.replicas.map_or("-".into(), |v| v.to_string()));
                    cells.push(r.gpus.map_or("-".into(), |v| v.to_string()));
                    cells.push(r.usd_per_hour.map_or("-".into(), |v| format!("{v:.2}")));
                }
                t.row(&cells);
            }
            out.push_str(&t.render());
            if let Some(target) = slo_args.target_qps {
                match cheapest {
                    Some(r) => {
                        let _ = writeln!(
                            out,
                            "cheapest for {target} req/s: {} x TP {} ({} replicas, {} GPUs{})",
                            r.hardware,
                            r.tensor_parallel_size,
                            r.replicas.unwrap_or_default(),
                            r.gpus.unwrap_or_default(),
                            match r.usd_per_hour {
                                Some(p) if by_price => format!(", ${p:.2}/hour"),
                                _ =>
                                    ", fewest GPUs: not every profile gives gpu.price_usd_per_hour"
                                        .into(),
                            }
                        );
                    }
                    None => {
                        let _ = writeln!(out, "no configuration meets the SLO at any rate tried");
                    }
                }
            }
            Ok(out)
        }
    }
}
