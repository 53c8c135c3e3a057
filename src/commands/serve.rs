//! `kvplan serve`: a serving scenario (file and flags) → the serving simulator → summary and
//! files. The scenario's resolution lives in `kvplan_serve::scenario`.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};

use crate::args::*;
use crate::error::CliError;
use crate::messages::serve_error;
use kvplan_report as report;
use kvplan_serve::scenario::RawServeScenario;

pub const SERVE_LONG: &str = "\
Simulate an LLM server step by step as vLLM runs it: requests arrive over time (a trace replayed,
or generated), the engine batches them continuously over a paged KV cache with prefix caching,
preempts when blocks run out, and a client sees TTFT, TPOT and E2E.

Workload (one of):
  --requests-trace FILE
                      replay a CSV `arrived_at,num_prefill_tokens,num_decode_tokens` (optional
                      columns prefix, output_id, follows, think_s; --time-scale F or --qps Q
                      rescale time, --start S skips to S seconds, --requests N caps the count)
  --arrivals KIND     all-at-once | poisson | gamma:CV, with --qps Q (not for all-at-once),
                      --lengths SPEC (prompts), --output-lengths SPEC [default: 128],
                      --requests N and --seed N
  --prefix-groups G   shared prefixes (inference-perf's load): G system prompts of
                      --system-prompt-len SPEC, each shared by --users-per-group U users with one
                      fixed question of --question-len SPEC; users take turns (a whole prompt
                      repeats every G x U requests); with --arrivals, --qps, --output-lengths
  --conversations N   multi-turn chats: each turn's prompt is the conversation so far plus a new
                      message (--turns, --first-message-len, --message-len SPEC), the next turn
                      sent --think-time after the answer; --qps starts conversations
  --compare-to FILE   a measured run: its requests replayed and the prediction compared with the
                      measurement metric by metric (per-request CSV, `vllm bench serve
                      --save-detailed` JSON, or a stage table of shared-prefix runs)
  Length specs: N, uniform:LO:HI, zipf:LO:HI[:THETA], lognormal:MEDIAN:SIGMA[:MAX], trace:FILE

Engine (vLLM's flags and defaults): --scheduler vllm-v1 (vLLM 0.15's V1 engine, the default:
one token budget, running requests first, chunked prefill, preemption by recompute of the
latest request, automatic prefix caching, asynchronous scheduling, CUDA graphs up to 512
tokens); vllm-v0 (alias prefill-first: vLLM 0.4's whole-prompt scheduler), mixed, chunked
(Sarathi) keep the 0.4 engine, with --preemption recompute | swap (blocks to host memory and
back) | hybrid (swap, and on resume recompute the first tokens' KV from stored activations).
--max-model-len (longer prompts rejected, generation stops there with finish reason length),
--num-gpu-blocks-override (a measured block count), --max-num-seqs, --max-num-batched-tokens,
--gpu-memory-utilization, --block-size, --tensor-parallel-size, --enable-expert-parallel
(mixture-of-experts models: whole experts per GPU), --enforce-eager, --quantization fp8 | awq |
gptq (quantised linear weights: fewer bytes to hold and read; fp8 GEMMs at the GPU's fp8 rate),
--kv-cache-dtype auto | fp8 (one byte per KV element: about twice the KV blocks).

Output: a summary table (--format json: the summary JSON; --format csv: one row per request).
Files: --requests-csv (per request: arrival, status, finish reason, cached tokens, queue, TTFT,
TPOT, E2E, preemptions), --timeseries-csv (per step: KV blocks, running / waiting / swapped,
batch tokens, KV bytes read and written), --summary-json, --trace-json (one slice per step; open
in https://ui.perfetto.dev), --plot (SVG of KV blocks and queues against time), --plot-cdf (SVG:
TTFT, TPOT and E2E CDFs).

A scenario TOML file can replace the flags (flags override it; relative paths are relative to
the file):
  model = \"llama-2-7b\"
  hardware = \"h100-sxm\"
  [workload]
  arrivals = \"poisson\"
  qps = 5.0
  output_lengths = \"247\"
  requests = 3000
  [workload.shared_prefix]
  groups = 11
  users_per_group = 4
  system_prompt_len = \"105\"
  question_len = \"487\"
  [serve]
  scheduler = \"vllm-v1\"      # vllm-v1 | vllm-v0 | mixed | chunked
  max_num_seqs = 128
  max_num_batched_tokens = 2048
  max_model_len = 4096
  num_gpu_blocks_override = 7463";

/// Serving scheduler (`--scheduler`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SchedulerArg {
    /// vLLM V1 (0.15): one token budget, running requests first, then waiting ones; prefix
    /// caching, chunked prefill, recompute preemption, asynchronous scheduling
    #[value(name = "vllm-v1")]
    VllmV1,
    /// vLLM 0.4's default: whole prompts first, then decode every running sequence
    #[value(name = "vllm-v0", alias = "prefill-first")]
    PrefillFirst,
    /// Decode the running sequences and admit whole prompts in the same iteration
    Mixed,
    /// Sarathi chunked prefill: decodes, then prompt chunks filling the token budget
    Chunked,
}

/// Preemption mode (`--preemption`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PreemptionArg {
    /// Drop the KV; re-prefill prompt and generated tokens on resume
    Recompute,
    /// Copy the KV blocks to host memory and back
    Swap,
    /// Swap, and on resume recompute the first tokens' KV from stored activations
    Hybrid,
}

/// Weight quantisation (`--quantization`, vLLM's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum QuantizationArg {
    /// 8-bit float weights (fp8 tensor cores on compute capability 8.9+, else weight-only)
    Fp8,
    /// AWQ 4-bit weights, group 128
    Awq,
    /// GPTQ 4-bit weights, group 128
    Gptq,
}

/// KV cache element type (`--kv-cache-dtype`, vLLM's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KvCacheDtypeArg {
    /// The model's dtype
    Auto,
    /// One byte per element (e4m3)
    #[value(alias = "fp8_e4m3")]
    Fp8,
}

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
    pub scheduler: Option<SchedulerArg>,
    /// What happens to a preempted sequence's KV (vllm-v1: recompute only) [default: recompute]
    #[arg(long, value_enum)]
    pub preemption: Option<PreemptionArg>,
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
    pub quantization: Option<QuantizationArg>,
    /// KV cache element type (vLLM's flag): fp8 stores one byte per element [default: auto,
    /// the model's dtype]
    #[arg(long, value_enum)]
    pub kv_cache_dtype: Option<KvCacheDtypeArg>,
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
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

impl ServeArgs {
    /// These flags as a raw serving scenario, to overlay on a scenario file's.
    pub fn to_raw(&self) -> kvplan_serve::scenario::RawServeScenario {
        use kvplan_serve::scenario::{RawConfig, RawServeScenario};
        use kvplan_serve::{Preemption, SchedulerKind};
        RawServeScenario {
            model: self.target.model.clone(),
            hardware: self.target.hardware.clone(),
            workload: self.requests.to_config(),
            serve: RawConfig {
                block_size: self.block_size,
                gpu_memory_utilization: self.gpu_memory_utilization,
                swap_space_gib: self.swap_space_gib,
                scheduler: self.scheduler.map(|s| match s {
                    SchedulerArg::VllmV1 => SchedulerKind::VllmV1,
                    SchedulerArg::PrefillFirst => SchedulerKind::PrefillFirst,
                    SchedulerArg::Mixed => SchedulerKind::Mixed,
                    SchedulerArg::Chunked => SchedulerKind::Chunked,
                }),
                preemption: self.preemption.map(|p| match p {
                    PreemptionArg::Recompute => Preemption::Recompute,
                    PreemptionArg::Swap => Preemption::Swap,
                    PreemptionArg::Hybrid => Preemption::Hybrid,
                }),
                max_num_seqs: self.max_num_seqs,
                max_num_batched_tokens: self.max_num_batched_tokens,
                tensor_parallel_size: self.tensor_parallel_size,
                enable_expert_parallel: self.enable_expert_parallel.then_some(true),
                quantization: self.quantization.map(|q| match q {
                    QuantizationArg::Fp8 => kvplan_vocab::Quantization::Fp8,
                    QuantizationArg::Awq => kvplan_vocab::Quantization::Awq,
                    QuantizationArg::Gptq => kvplan_vocab::Quantization::Gptq,
                }),
                kv_cache_dtype: self.kv_cache_dtype.map(|k| match k {
                    KvCacheDtypeArg::Auto => kvplan_vocab::KvCacheDtype::Auto,
                    KvCacheDtypeArg::Fp8 => kvplan_vocab::KvCacheDtype::Fp8,
                }),
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
                        || self.compare_to.is_some()
                        || matches!(self.output.format, Format::Csv),
                ),
                ..RawConfig::default()
            },
        }
    }
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

/// `kvplan serve`.
pub fn serve(args: &ServeArgs) -> Result<String, CliError> {
    use kvplan_serve::runs::{Measured, placeholder_workload};
    let base = match &args.scenario {
        Some(p) => read_scenario(p)?,
        None => RawServeScenario::default(),
    };
    let mut raw = base.overlay(args.to_raw());
    let measured = match args.compare_to.as_deref().map(Measured::open).transpose() {
        Err(e) => return Err(CliError::input(format!("--compare-to: {e}"))),
        Ok(Some(Measured::Stages(stages))) => {
            let path = args.compare_to.as_deref().expect("a stage table was read");
            return compare_stages(&raw, path, &stages, args.output.format.into());
        }
        Ok(Some(Measured::Run(run))) => {
            let w = &raw.workload;
            if w.trace.is_some() || w.arrivals.is_some() || w.prompt_lengths.is_some() {
                return Err(CliError::input(format!(
                    "--compare-to: {} gives the requests; drop the workload (--requests-trace, \
                     --arrivals, --lengths, or the scenario's [workload])",
                    run.name
                )));
            }
            raw.workload = placeholder_workload(); // the requests come from the run
            Some(run)
        }
        Ok(None) => None,
    };
    let sc = kvplan_run::RawScenario::Serve(Box::new(raw)).resolve()?;
    if let kvplan_run::Scenario::Serve(s) = &sc {
        for n in &s.notes {
            crate::messages::hold_note(crate::messages::flags_in_text(&n.to_string()));
        }
    }
    let work = sc.prepare(measured.as_ref().map(|run| run.to_requests()))?;
    let bar = crate::progress::bar();
    let out = work.run_with(bar.as_ref());
    drop(bar);
    let (kvplan_run::Scenario::Serve(sc), kvplan_run::Report::Serve(out)) = (&sc, out?) else {
        unreachable!("a serving scenario gives a serving report")
    };
    use kvplan_report::serve::ServeFile as F;
    let files: Vec<_> = [
        (F::RequestsCsv, &args.requests_csv, "--requests-csv"),
        (F::TimeseriesCsv, &args.timeseries_csv, "--timeseries-csv"),
        (F::SummaryJson, &args.summary_json, "--summary-json"),
        (F::ChromeTrace, &args.trace_json, "--trace-json"),
        (F::TimeseriesPlot, &args.plot, "--plot"),
        (F::CdfPlot, &args.plot_cdf, "--plot-cdf"),
    ]
    .into_iter()
    .filter_map(|(f, p, what)| Some((f, p.as_deref()?, what)))
    .collect();
    let title = format!("{} on {}", sc.model.name, sc.hardware.name);
    let written = report::serve::write_files(&out, &title, &files)?;
    let format = args.output.format.into();
    Ok(match &measured {
        Some(run) => {
            let cmp = kvplan_serve::runs::compare(run, &out);
            let what = "serve --compare-to";
            report::serve::measured_comparison(what, sc, run, &cmp, &written, format)?
        }
        None => report::serve::serve_report(sc, &out, &written, format)?,
    })
}

/// `serve --compare-to STAGES.csv`: every stage of a stage table replayed with its own settings
/// (the model and GPU its row names, unless --model / --hardware say otherwise).
fn compare_stages(
    raw: &RawServeScenario,
    path: &Path,
    stages: &[kvplan_serve::runs::StageRun],
    format: report::Format,
) -> Result<String, CliError> {
    use kvplan_serve::runs::{StageSkip, replay_stages};
    let (model, hardware) = (raw.model.as_deref(), raw.hardware.as_deref());
    let replay = replay_stages(stages, model, hardware).map_err(serve_error)?;
    let rows = replay.rows;
    let skipped: Vec<(String, String)> = (replay.skipped.into_iter())
        .map(|(name, why)| match why {
            StageSkip::Scenario(e) => (name, e.to_string()),
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
