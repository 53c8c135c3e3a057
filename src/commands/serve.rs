//! `kvplan serve`: a serving scenario (file and flags) → the serving simulator → summary and
//! files. The scenario's resolution lives in `kvplan_serve::scenario`.

use std::path::{Path, PathBuf};

use clap::Args;

use crate::args::*;
use crate::error::CliError;
use crate::messages::serve_error;
use kvplan_report as report;
use kvplan_serve::cluster::autoscale::RawAutoscale;
use kvplan_serve::cluster::scenario::{RawCluster, RawInterconnect, RawPool, RawReplica};
use kvplan_serve::scenario::{RawConfig, RawServeScenario};
use kvplan_serve::{Preemption, SchedulerKind};
use kvplan_vocab::{KvCacheDtype, Quantization};

/// `--help`'s long text (`src/help/serve.txt`).
pub const SERVE_LONG: &str = include_str!("../help/serve.txt").trim_ascii_end();

/// `kvplan serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Serving scenario TOML file; flags given as well override its fields
    #[arg(value_name = "SCENARIO")]
    pub scenario: Option<PathBuf>,
    /// Model and hardware
    #[command(flatten)]
    pub target: TargetArgs,
    /// The requests
    #[command(flatten)]
    pub requests: RequestsArgs,
    /// Scheduler [default: vllm-v1]
    #[arg(long, value_enum)]
    pub scheduler: Option<SchedulerKind>,
    /// The vLLM release whose defaults and rules the engine follows (batch sizes, chunked
    /// prefill, asynchronous scheduling, CUDA graphs): 0.8.5, 0.9.2, 0.10.2, 0.11.0, 0.13.0 or
    /// 0.15.1 with vllm-v1, 0.4.2 with the 0.4 schedulers; `v0.15.1` and `0.15` read too
    /// [default: 0.15.1 for vllm-v1, 0.4.2 for the others]
    #[arg(long, value_name = "VERSION")]
    pub vllm_version: Option<kvplan_serve::config::VllmVersion>,
    /// What happens to a preempted sequence's KV (vllm-v1: recompute only) [default: recompute]
    #[arg(long, value_enum)]
    pub preemption: Option<Preemption>,
    /// Automatic prefix caching: reuse cached full KV blocks of a shared prompt prefix
    /// [default: on for vllm-v1, off for the vLLM 0.4 schedulers]
    #[arg(long, overrides_with = "no_enable_prefix_caching")]
    pub enable_prefix_caching: bool,
    /// Turn automatic prefix caching off
    #[arg(long, overrides_with = "enable_prefix_caching")]
    pub no_enable_prefix_caching: bool,
    /// vllm-v1: split long prompts into chunks within the token budget [default: on]
    #[arg(long, overrides_with = "no_enable_chunked_prefill")]
    pub enable_chunked_prefill: bool,
    /// vllm-v1: a prompt waits until its uncached tokens fit one step's budget
    #[arg(long, overrides_with = "enable_chunked_prefill")]
    pub no_enable_chunked_prefill: bool,
    /// Schedule the next step while the GPU runs this one [default: on for vllm-v1]
    #[arg(long, overrides_with = "no_async_scheduling")]
    pub async_scheduling: bool,
    /// Schedule each step after the previous one's output is processed
    #[arg(long, overrides_with = "async_scheduling")]
    pub no_async_scheduling: bool,
    /// No CUDA graphs: every kernel launched from the host
    #[arg(long)]
    pub enforce_eager: bool,
    /// A freshly started server: a mixture of experts' first eager steps wait while Triton
    /// compiles the fused-MoE kernels vLLM's start-up did not reach (the profile's
    /// kernel_compile_us each). Default: a server that has already served its load
    #[arg(long)]
    pub cold_start: bool,
    /// Largest CUDA-graph batch in tokens [default: min(2 x max-num-seqs, 512,
    /// max-num-batched-tokens)]
    #[arg(long, value_name = "TOKENS")]
    pub max_cudagraph_capture_size: Option<u32>,
    /// Longest request, prompt plus output tokens: longer prompts are rejected, generation stops
    /// here (finish reason `length`) [default: the model's context]
    #[arg(long, value_name = "TOKENS")]
    pub max_model_len: Option<u32>,
    /// Use this many GPU KV blocks (a count measured on the real server) instead of kvplan's
    /// memory accounting; vllm-v1 keeps one as the null block, as vLLM does
    #[arg(long, value_name = "N")]
    pub num_gpu_blocks_override: Option<u32>,
    /// vllm-v1: most tokens of one request's prefill chunk per step (0: no cap) [default: 0]
    #[arg(long, value_name = "TOKENS")]
    pub long_prefill_token_threshold: Option<u32>,
    /// Tokens per KV block [default: 16]
    #[arg(long, value_name = "TOKENS")]
    pub block_size: Option<u32>,
    /// Fraction of usable GPU memory for weights, activations and KV blocks [default: 0.9]
    #[arg(long, value_name = "FRACTION", allow_negative_numbers = true)]
    pub gpu_memory_utilization: Option<f64>,
    /// Host memory for swapped-out KV, GiB [default: 4]
    #[arg(long, value_name = "GIB", allow_negative_numbers = true)]
    pub swap_space_gib: Option<f64>,
    /// Most sequences running at once [default: vllm-v1 as vLLM 0.15's API server: 1024 on
    /// GPUs of 70 GiB or more other than A100, else 256; 256 for the vLLM 0.4 schedulers]
    #[arg(long, value_name = "N")]
    pub max_num_seqs: Option<u32>,
    /// Most tokens in one step [default: vllm-v1: 8192 on GPUs of 70 GiB or more other than
    /// A100, else 2048; chunked 2048; vllm-v0 and mixed max(2048, max-model-len)]
    #[arg(long, value_name = "N")]
    pub max_num_batched_tokens: Option<u32>,
    /// Tensor-parallel GPUs (vLLM's flag): one rank is simulated with 1/N of the heads, FFN
    /// and KV cache, and two all-reduces per layer over the profile's peer link [default: 1]
    #[arg(long, value_name = "N")]
    pub tensor_parallel_size: Option<u32>,
    /// Mixture-of-experts models: divide the routed experts among the tensor-parallel GPUs
    /// whole (vLLM's flag) instead of splitting every expert's width; dense models ignore it
    #[arg(long)]
    pub enable_expert_parallel: bool,
    /// Quantised weights (vLLM's flag): the decoder layers' linear weights in fp8 (1 byte) or
    /// 4 bits with group-128 scales (awq, gptq); embeddings, norms and LM head stay 16-bit
    /// [default: none]
    #[arg(long, value_enum)]
    pub quantization: Option<Quantization>,
    /// Weights' and activations' element type (vLLM's flag): auto serves the model's own where
    /// the GPU has it (a bfloat16 model below compute capability 8.0 runs in float16, as vLLM
    /// falls back); bfloat16 there is refused, as vLLM refuses it [default: auto]
    #[arg(long, value_enum)]
    pub dtype: Option<kvplan_serve::config::ServeDtype>,
    /// KV cache element type (vLLM's flag): fp8 stores one byte per element [default: auto,
    /// the model's dtype]
    #[arg(long, value_enum)]
    pub kv_cache_dtype: Option<KvCacheDtype>,
    /// A CPU tier for the KV cache (vLLM's flag), GiB of pinned host memory in all (over the
    /// tensor-parallel GPUs): full blocks are copied out, a prefix found there is loaded back
    /// [default: none]
    #[arg(long, value_name = "GIB", allow_negative_numbers = true)]
    pub kv_offloading_size: Option<f64>,
    /// How the CPU tier moves blocks (vLLM's flag) [default: native]
    #[arg(long, value_enum)]
    pub kv_offloading_backend: Option<kvplan_serve::tier::BackendKind>,
    /// Which block the CPU tier gives up when full [default: lru]
    #[arg(long, value_enum)]
    pub kv_offloading_eviction: Option<kvplan_serve::tier::EvictionKind>,
    /// How a CPU-tier hit comes back [default: transfer]
    #[arg(long, value_enum)]
    pub kv_reload: Option<kvplan_serve::tier::Reload>,
    /// Replicas, router, prefill/decode pools
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Replay a measured run and report predicted against measured per metric: a per-request
    /// CSV (arrival_s, prompt_tokens, output_tokens, ttft_s, e2e_s; kvplan's own --requests-csv
    /// reads back) or `vllm bench serve --save-detailed` result JSON; the requests come from FILE
    #[arg(long, value_name = "FILE")]
    pub compare_to: Option<PathBuf>,
    /// Write one CSV row per request
    #[arg(long, value_name = "FILE")]
    pub requests_csv: Option<PathBuf>,
    /// Write one CSV row per iteration
    #[arg(long, value_name = "FILE")]
    pub timeseries_csv: Option<PathBuf>,
    /// Write the summary JSON
    #[arg(long, value_name = "FILE")]
    pub summary_json: Option<PathBuf>,
    /// Write a Chrome trace, one slice per iteration (open in https://ui.perfetto.dev)
    #[arg(long, value_name = "FILE")]
    pub trace_json: Option<PathBuf>,
    /// Plot KV blocks on GPU and host, and running / waiting / swapped sequences, against time
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Plot the TTFT, TPOT and E2E latency CDFs
    #[arg(long, value_name = "FILE.svg")]
    pub plot_cdf: Option<PathBuf>,
    /// Latency objectives, e.g. ttft_p99=2s,tpot_p99=100ms (metrics ttft, tpot, e2e, queue;
    /// p50, p90, p95, p99): the run's goodput as vLLM's --goodput counts it, and an autoscaled
    /// run judged per hour of arrivals
    #[arg(long, value_name = "SPEC")]
    pub slo: Option<String>,
    /// Error bands on the headline figures at this coverage (alone: 0.8): the run served again
    /// with the kernel costs perturbed by the cost model's calibration residuals, each figure
    /// widened by the residuals of the real vLLM runs kvplan is validated on
    #[arg(long, value_name = "C", num_args = 0..=1, default_missing_value = "0.8")]
    pub confidence: Option<f64>,
    /// Perturbed runs behind --confidence's bands
    #[arg(long, value_name = "N", default_value_t = kvplan_serve::bands::DEFAULT_DRAWS)]
    pub band_draws: u32,
    /// Serve the same load on a fixed fleet of N replicas as well (N omitted: the
    /// autoscaler's max) and compare GPU-hours, cost and the hours that miss --slo
    #[arg(
        long,
        value_name = "N",
        num_args = 0..=1,
        default_missing_value = "0",
        requires = "slo"
    )]
    pub compare_fixed: Option<u32>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

impl ServeArgs {
    /// The files the run writes, with the flag that names each.
    pub fn outputs(&self) -> Vec<(report::serve::ServeFile, &Path, &'static str)> {
        use report::serve::ServeFile as F;
        [
            (F::RequestsCsv, &self.requests_csv, "--requests-csv"),
            (F::TimeseriesCsv, &self.timeseries_csv, "--timeseries-csv"),
            (F::SummaryJson, &self.summary_json, "--summary-json"),
            (F::ChromeTrace, &self.trace_json, "--trace-json"),
            (F::TimeseriesPlot, &self.plot, "--plot"),
            (F::CdfPlot, &self.plot_cdf, "--plot-cdf"),
        ]
        .into_iter()
        .filter_map(|(f, p, what)| Some((f, p.as_deref()?, what)))
        .collect()
    }

    /// These flags as a raw serving scenario, to overlay on a scenario file's; a malformed
    /// `--replica` or `--router-weights` is an error naming the flag.
    pub fn to_raw(&self) -> Result<RawServeScenario, CliError> {
        Ok(RawServeScenario {
            cluster: self.cluster.to_raw()?,
            model: self.target.model.clone(),
            hardware: self.target.hardware.clone(),
            workload: self.requests.to_config(),
            serve: RawConfig {
                block_size: self.block_size,
                gpu_memory_utilization: self.gpu_memory_utilization,
                swap_space_gib: self.swap_space_gib,
                scheduler: self.scheduler,
                vllm_version: self.vllm_version,
                preemption: self.preemption,
                max_num_seqs: self.max_num_seqs,
                max_num_batched_tokens: self.max_num_batched_tokens,
                tensor_parallel_size: self.tensor_parallel_size,
                enable_expert_parallel: self.enable_expert_parallel.then_some(true),
                quantization: self.quantization,
                dtype: self.dtype,
                kv_cache_dtype: self.kv_cache_dtype,
                kv_offloading_size_gib: self.kv_offloading_size,
                kv_offloading_backend: self.kv_offloading_backend,
                kv_offloading_eviction: self.kv_offloading_eviction,
                kv_reload: self.kv_reload,
                enable_prefix_caching: on_off(
                    self.enable_prefix_caching,
                    self.no_enable_prefix_caching,
                ),
                enable_chunked_prefill: on_off(
                    self.enable_chunked_prefill,
                    self.no_enable_chunked_prefill,
                ),
                async_scheduling: on_off(self.async_scheduling, self.no_async_scheduling),
                enforce_eager: self.enforce_eager.then_some(true),
                cold_start: self.cold_start.then_some(true),
                max_cudagraph_capture_size: self.max_cudagraph_capture_size,
                max_model_len: self.max_model_len,
                num_gpu_blocks_override: self.num_gpu_blocks_override,
                long_prefill_token_threshold: self.long_prefill_token_threshold,
                // The per-iteration series costs memory on long runs: keep it only when a file
                // needs it.
                record_timeseries: Some(
                    self.timeseries_csv.is_some()
                        || self.trace_json.is_some()
                        || self.plot.is_some(),
                ),
                // So do the per-request records: without an output that lists every request,
                // memory follows the requests in flight.
                record_requests: Some(
                    self.requests_csv.is_some()
                        || self.plot_cdf.is_some()
                        || self.slo.is_some()
                        || self.compare_to.is_some()
                        || matches!(self.output.format, Format::Csv),
                ),
                ..RawConfig::default()
            },
        })
    }
}

impl ClusterArgs {
    /// These flags as the scenario's `[cluster]`.
    fn to_raw(&self) -> Result<RawCluster, CliError> {
        let pool = |hardware: &Option<String>, tp: Option<u32>| {
            (hardware.is_some() || tp.is_some()).then(|| RawPool {
                hardware: hardware.clone(),
                serve: RawConfig {
                    tensor_parallel_size: tp,
                    ..RawConfig::default()
                },
            })
        };
        let interconnect = (self.interconnect_gbps.is_some()
            || self.interconnect_latency_us.is_some())
        .then(|| RawInterconnect {
            gbps: self.interconnect_gbps,
            latency_us: self.interconnect_latency_us,
            ..RawInterconnect::default()
        });
        Ok(RawCluster {
            data_parallel_size: self.data_parallel_size,
            router: self.router,
            router_staleness_s: self.router_staleness,
            router_latency_us: self.router_latency_us,
            router_weights: self.router_weights.as_deref().map(weights).transpose()?,
            prefill_replicas: self.prefill_replicas,
            decode_replicas: self.decode_replicas,
            kv_transfer: self.kv_transfer,
            prefill: pool(&self.prefill_hardware, self.prefill_tp),
            decode: pool(&self.decode_hardware, self.decode_tp),
            replicas: self
                .replica
                .iter()
                .map(|s| replica(s))
                .collect::<Result<_, _>>()?,
            interconnect,
            autoscale: self.autoscale.as_deref().map(autoscale).transpose()?,
        })
    }
}

/// Seconds of `v`, a number with an optional unit (`s`, `m`, `h`).
fn duration(v: &str) -> Option<f64> {
    let (n, scale) = if let Some(n) = v.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = v.strip_suffix('h') {
        (n, 3600.0)
    } else if let Some(n) = v.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = v.strip_suffix('s') {
        (n, 1.0)
    } else {
        (v, 1.0)
    };
    n.trim().parse::<f64>().ok().map(|x| x * scale)
}

/// `--autoscale min=1,max=8,metric=concurrency,target=16,interval=15s,delay=300s,cooldown=300s`.
fn autoscale(spec: &str) -> Result<RawAutoscale, CliError> {
    const KEYS: &str = "min, max, initial, metric, target, interval, delay, cooldown";
    let mut a = RawAutoscale::default();
    let bad = |k: &str, v: &str, what: &str| {
        CliError::input(format!("--autoscale {spec}: {k}={v}: `{v}` is not {what}"))
    };
    for (k, v) in pairs("--autoscale", spec)? {
        let count = || v.parse::<u32>().map_err(|_| bad(k, v, "a whole number"));
        let secs = || duration(v).ok_or_else(|| bad(k, v, "a duration (30s, 5m, 1h)"));
        match k {
            "min" => a.min_replicas = Some(count()?),
            "max" => a.max_replicas = Some(count()?),
            "initial" => a.initial_replicas = Some(count()?),
            "metric" => {
                a.metric =
                    Some(v.parse().map_err(|e: String| {
                        CliError::input(format!("--autoscale: metric: {e}"))
                    })?)
            }
            "target" => a.target = Some(v.parse().map_err(|_| bad(k, v, "a number"))?),
            "interval" => a.interval_s = Some(secs()?),
            "delay" => a.scale_up_delay_s = Some(secs()?),
            "cooldown" => a.cooldown_s = Some(secs()?),
            _ => {
                return Err(CliError::input(format!(
                    "--autoscale {spec}: unknown key `{k}` ({KEYS})"
                )));
            }
        }
    }
    Ok(a)
}

/// `key=value,...` pairs of a flag's value.
fn pairs<'a>(flag: &str, spec: &'a str) -> Result<Vec<(&'a str, &'a str)>, CliError> {
    spec.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.trim(), v.trim()))
                .ok_or_else(|| {
                    CliError::input(format!(
                        "{flag} {spec}: `{p}` is not key=value (write e.g. {})",
                        match flag {
                            "--replica" => "count=2,hardware=a100-80g-sxm,tp=2",
                            "--autoscale" => "min=1,max=8,metric=queue,target=4,delay=300s",
                            _ => "queue=2,kv=2,prefix=3",
                        }
                    ))
                })
        })
        .collect()
}

/// `--router-weights queue=2,kv=2,prefix=3`.
fn weights(spec: &str) -> Result<kvplan_serve::router::Weights, CliError> {
    let mut w = kvplan_serve::router::Weights::default();
    for (k, v) in pairs("--router-weights", spec)? {
        let x: f64 = v.parse().map_err(|_| {
            CliError::input(format!("--router-weights: {k}={v}: `{v}` is not a number"))
        })?;
        match k {
            "queue" => w.queue = x,
            "kv" => w.kv = x,
            "prefix" => w.prefix = x,
            _ => {
                return Err(CliError::input(format!(
                    "--router-weights: unknown scorer `{k}` (queue, kv or prefix)"
                )));
            }
        }
    }
    Ok(w)
}

/// `--replica count=2,hardware=a100-80g-sxm,tp=2,...`.
fn replica(spec: &str) -> Result<RawReplica, CliError> {
    let mut r = RawReplica::default();
    let num = |k: &str, v: &str| -> Result<u32, CliError> {
        v.parse().map_err(|_| {
            CliError::input(format!(
                "--replica {spec}: {k}={v}: `{v}` is not a whole number"
            ))
        })
    };
    for (k, v) in pairs("--replica", spec)? {
        match k {
            "count" => r.count = Some(num(k, v)?),
            "hardware" => r.hardware = Some(v.to_string()),
            "tp" | "tensor-parallel-size" => r.serve.tensor_parallel_size = Some(num(k, v)?),
            "max-num-seqs" => r.serve.max_num_seqs = Some(num(k, v)?),
            "max-num-batched-tokens" => r.serve.max_num_batched_tokens = Some(num(k, v)?),
            "quantization" | "kv-cache-dtype" => {
                let field = k.replace('-', "_");
                let table: toml::Table = [(field, toml::Value::String(v.to_string()))]
                    .into_iter()
                    .collect();
                let parsed: RawConfig = table.try_into().map_err(|e: toml::de::Error| {
                    CliError::input(format!("--replica {spec}: {k}={v}: {}", e.message().trim()))
                })?;
                if k == "quantization" {
                    r.serve.quantization = parsed.quantization;
                } else {
                    r.serve.kv_cache_dtype = parsed.kv_cache_dtype;
                }
            }
            _ => {
                return Err(CliError::input(format!(
                    "--replica {spec}: unknown key `{k}` (count, hardware, tp, quantization, \
                     kv-cache-dtype, max-num-seqs, max-num-batched-tokens)"
                )));
            }
        }
    }
    Ok(r)
}

/// A `--flag` / `--no-flag` pair as an optional setting (neither: the default).
fn on_off(on: bool, off: bool) -> Option<bool> {
    match (on, off) {
        (true, _) => Some(true),
        (_, true) => Some(false),
        _ => None,
    }
}

pub(crate) fn read_scenario(path: &Path) -> Result<RawServeScenario, CliError> {
    Ok(kvplan_run::RawScenario::read_serve(path)?)
}

/// `kvplan serve`'s scenario as the run sees it: the file's (if any), with the flags over it.
pub fn raw_scenario(args: &ServeArgs) -> Result<RawServeScenario, CliError> {
    let base = args.scenario.as_deref().map(read_scenario).transpose()?;
    Ok(base.unwrap_or_default().overlay(args.to_raw()?))
}

/// `kvplan serve` of `raw`, its scenario as [`raw_scenario`] read it.
pub fn serve(args: &ServeArgs, mut raw: RawServeScenario) -> Result<String, CliError> {
    use kvplan_serve::runs::Measured;
    let measured = match args.compare_to.as_deref().map(Measured::open).transpose() {
        Err(e) => return Err(CliError::input(format!("--compare-to: {e}"))),
        Ok(Some(Measured::Stages(stages))) => {
            let path = args.compare_to.as_deref().expect("a stage table was read");
            return compare_stages(&raw, path, &stages, args.output.format);
        }
        Ok(Some(Measured::Run(run))) => {
            raw.workload = (run.replay_workload(&raw.workload))
                .map_err(|e| CliError::input(format!("--compare-to: {e}")))?;
            Some(run)
        }
        Ok(None) => None,
    };
    let slo = (args.slo.as_deref())
        .map(|t| t.parse::<kvplan_serve::capacity::Slo>())
        .transpose()
        .map_err(|e| CliError::input(format!("--slo: {e}")))?;
    if let (Some(n), Some(slo)) = (args.compare_fixed, &slo) {
        if measured.is_some() {
            return Err(CliError::input(
                "--compare-fixed: not with --compare-to (it serves the scenario's own load twice)",
            ));
        }
        if let Some((_, _, flag)) = args.outputs().first() {
            return Err(CliError::input(format!(
                "--compare-fixed: writes no files (it prints the two fleets side by side; \
                 --format json gives both): run without it for {flag}"
            )));
        }
        let fixed = (n > 0).then_some(n);
        let r = kvplan_serve::day::day(&raw, &RawAutoscale::default(), slo, fixed)
            .map_err(serve_error)?;
        return Ok(report::serve::day_report(&r, args.output.format)?);
    }
    let bands = crate::messages::band_settings(args.confidence, args.band_draws)?;
    let sc = kvplan_run::RawScenario::Serve(Box::new(raw)).resolve()?;
    if let kvplan_run::Scenario::Serve(s) = &sc {
        for n in &s.notes {
            crate::messages::hold_note(crate::messages::flags_in_text(&n.to_string()));
        }
    }
    let work = sc.prepare(measured.as_ref().map(|run| run.to_requests()))?;
    let bar = kvplan_report::progress::bar();
    let out = work.run_with(bar.as_ref());
    drop(bar);
    let (kvplan_run::Scenario::Serve(sc), kvplan_run::Report::Serve(mut out)) = (&sc, out?) else {
        unreachable!("a serving scenario gives a serving report")
    };
    if let Some(settings) = bands {
        out.bands = Some(serve_bands(sc, &out, measured.as_ref(), &settings)?);
    }
    if let Some(slo) = &slo {
        match out.cluster.as_mut().and_then(|c| c.autoscale.as_mut()) {
            Some(a) => a.judge(&out.requests, slo),
            None => out.goodput = Some(slo.goodput(&out.requests)),
        }
    }
    let files = args.outputs();
    let title = format!("{} on {}", sc.model.name, sc.hardware.name);
    let written = report::serve::write_files(&out, &title, &files)?;
    let format = args.output.format;
    let text = match &measured {
        Some(run) => {
            let cmp = kvplan_serve::runs::compare(run, &out);
            let what = "serve --compare-to";
            report::serve::measured_comparison(what, sc, run, &cmp, &written, format)?
        }
        None => report::serve::serve_report(sc, &out, &written, "vLLM's --goodput", format)?,
    };
    match out.nothing_finished() {
        Some(n) => Err(crate::messages::nothing_finished(&n, &sc.resolved, text)),
        None => Ok(text),
    }
}

/// The bands of `out`, the run of `sc` (on `measured`'s requests when replaying a run): the
/// scenario served once per draw with perturbed kernel costs, in parallel.
fn serve_bands(
    sc: &kvplan_serve::scenario::ServeScenario,
    out: &kvplan_serve::ServeReport,
    measured: Option<&kvplan_serve::runs::MeasuredRun>,
    settings: &kvplan_serve::bands::BandSettings,
) -> Result<kvplan_serve::bands::ServeBands, CliError> {
    use kvplan_serve::bands::{CostSpread, Residuals, perturbed_runs, serve_bands};
    use kvplan_serve::scenario::ScenarioError;
    let requests = match measured {
        Some(run) => run.to_requests(),
        None => sc
            .requests()
            .map_err(|e| serve_error(ScenarioError::from(e)))?,
    };
    let spread = CostSpread::builtin();
    let settings = kvplan_serve::bands::BandSettings {
        seed: sc.seed,
        ..*settings
    };
    let drawn = perturbed_runs(sc, &requests, &spread, &settings)
        .map_err(|e| serve_error(ScenarioError::from(e)))?;
    Ok(serve_bands(
        out,
        &drawn,
        &Residuals::builtin(),
        spread,
        &settings,
    ))
}

/// `serve --compare-to STAGES.csv`: every stage of a stage table replayed with its own settings
/// (the model and GPU its row names, unless --model / --hardware say otherwise).
fn compare_stages(
    raw: &RawServeScenario,
    path: &Path,
    stages: &[kvplan_serve::runs::StageRun],
    format: report::Format,
) -> Result<String, CliError> {
    use kvplan_serve::runs::{ReplayError, StageSkip, replay_stages};
    let (model, hardware) = (raw.model.as_deref(), raw.hardware.as_deref());
    let replay = replay_stages(stages, model, hardware).map_err(|e| match e {
        ReplayError::Refused(e) => CliError::input(format!("--compare-to: {}", refused_row(&e))),
        ReplayError::Scenario(s) => serve_error(s),
        other => CliError::failure(other.to_string()),
    })?;
    let rows = replay.rows;
    let skipped: Vec<(String, String)> = (replay.skipped.into_iter())
        .map(|(name, why)| match why {
            StageSkip::Resolve(e) => (name, serve_error(e).message),
        })
        .collect();
    if rows.is_empty() {
        return Err(CliError::input(format!(
            "--compare-to {}: no stage could be replayed ({})",
            path.display(),
            skipped
                .iter()
                .map(|(n, w)| format!("{n}: {w}"))
                .collect::<Vec<_>>()
                .join("; ")
        )));
    }
    let (what, skipped) = ("serve --compare-to", &skipped);
    Ok(report::serve::stage_comparisons(
        what, path, &rows, skipped, format,
    )?)
}

/// A measured-run error, with the flag that replaces every stage row's model or GPU where a row
/// names one kvplan does not know.
pub(crate) fn refused_row(e: &kvplan_serve::runs::RunsError) -> String {
    match e.unknown_column() {
        Some("model_hf") => format!("{e}; or give --model NAME|PATH to replay every row on it"),
        Some(_) => format!("{e}; or give --hardware NAME|PATH to replay every row on it"),
        None => e.to_string(),
    }
}
