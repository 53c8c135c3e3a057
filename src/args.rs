//! Command-line arguments (clap derive). Option groups shared by several commands are separate
//! structs flattened into each command.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use kvplan_planner::plan::Strategy;
use kvplan_planner::scenario::{
    Note, RawHeadInfer, RawOffload, RawRunahead, RawScenario, RawWorkload, Scenario,
};

const ABOUT: &str = "Plan and simulate KV-cache offload and recomputation for LLM inference";

const LONG_ABOUT: &str = "\
kvplan answers, before you spend GPU-hours, how to move and recompute the KV cache of a model
whose cache does not fit GPU memory: it plans KVPR (recompute part of the cache from activations
while the rest crosses PCIe), plain KV offload and all-on-GPU, runs the plans on a calibrated
discrete-event simulator, and reports latency, throughput, utilisation and traffic.

Start with:
  kvplan simulate --model opt-6.7b --hardware a100-40g-pcie4 --compare
  kvplan plan kvpr --model opt-6.7b --hardware a100-40g-pcie4 --batch 64 --prompt 128 --gen 32
  kvplan models        (model presets)      kvplan hardware      (GPU profiles)";

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
    Models(ModelsArgs),
    /// List hardware presets, or print one preset's TOML with the source of every number
    Hardware(HardwareArgs),
    /// Show a planner's decisions (without simulating)
    Plan {
        /// Which planner.
        #[command(subcommand)]
        planner: PlanCommand,
    },
    /// Simulate a generation and report latency, throughput, GPU utilisation and PCIe traffic
    #[command(long_about = SIMULATE_LONG)]
    Simulate(SimulateArgs),
    /// The longest context each HeadInfer-study strategy fits in GPU memory and host RAM; with
    /// --slo, the highest request rate each serving configuration sustains under latency goals
    #[command(long_about = CAPACITY_LONG)]
    Capacity(CapacityArgs),
    /// Run the same plan for real (CUDA GPU or CPU) and report measured figures, like simulate
    #[command(long_about = EXEC_LONG)]
    Exec(ExecArgs),
    /// Measure this machine (copies, GEMMs, attention, launch overhead) and write a profile
    #[command(long_about = CALIBRATE_LONG)]
    Calibrate(CalibrateArgs),
    /// Simulate and execute one scenario; report how far prediction and measurement differ
    #[command(long_about = VALIDATE_LONG)]
    Validate(ValidateArgs),
    /// Serve many requests over time (continuous batching, paged KV, preemption) and report
    /// throughput, TTFT/TPOT/E2E percentiles, preemptions and swap traffic
    #[command(long_about = SERVE_LONG)]
    Serve(Box<ServeArgs>),
    /// Run a grid of scenarios (a base and axes) in parallel; one CSV or JSONL row per point
    #[command(long_about = SWEEP_LONG)]
    Sweep(SweepArgs),
    /// Join the outputs of `sweep --shard` runs into the unsharded run's file
    #[command(long_about = MERGE_LONG)]
    Merge(MergeArgs),
    /// Compare two outputs of kvplan (report JSON, CSV table, timeline CSV) metric by metric;
    /// exit 1 when a metric regressed past --tolerance
    #[command(long_about = DIFF_LONG)]
    Diff(DiffArgs),
    /// Plot a metric against an axis from a kvplan CSV table (one line per series) as SVG
    #[command(long_about = PLOT_LONG)]
    Plot(PlotArgs),
    /// Rerun a directory of scenarios and compare them with their golden outputs
    Regress {
        /// check or update
        #[command(subcommand)]
        action: RegressCommand,
    },
}

const DIFF_LONG: &str = "\
Compare two outputs of kvplan of the same kind, detected from content:
  report JSON   simulate --format json (one strategy or --compare), serve --format json /
                --summary-json, or any JSON (numeric leaves by dotted path: ttft_s.p99)
  CSV table     --format csv outputs and sweep tables; rows matched by key: the `point`
                column when it comes first, else the leading columns before the first
                metric column (strategy,model,...,gen), else every non-numeric column
  timeline CSV  --trace FILE.csv: per run, the makespan, the op count, and duration_s summed
                by label and by category (and bytes by category)
For each metric: A, B, B-A, (B-A)/|A| and a verdict. Which way is worse comes from the metric's
name (kvplan_diff::direction::RULES): latencies, times (*_s), bytes, idle time, preemptions:
higher is worse; throughputs (*throughput*, *tok_s*, *_per_s), speed-ups: lower is worse;
anything else (counts, fractions) is reported as `changed` and never fails.
Exit 0 when nothing regressed past --tolerance, 1 when something did, 2 on bad input
(different kinds, rows in one file only, malformed JSON or CSV).
  kvplan diff before.json after.json --tolerance 2%";

/// `kvplan diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The baseline output
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The output compared with it
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Largest relative change that is not a regression: a fraction (0.01) or a percentage (1%)
    #[arg(long, value_name = "FRACTION|PERCENT", default_value = "1%")]
    pub tolerance: String,
    /// Table rows: all metrics, or only those beyond the tolerance [default: all]
    #[arg(long)]
    pub changed_only: bool,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

const PLOT_LONG: &str = "\
Plot column --y against column --x of a CSV table that kvplan wrote (a sweep's output: axis
columns first, then metrics; serve --format csv or --requests-csv; --timeseries-csv), one line
per distinct value of the --series columns, as an SVG file. Rows whose x or y is not a number
(error rows, empty cells) are skipped and counted in a note on stderr. Axis labels are the
column names with the unit their suffix implies (_s seconds, _bytes bytes, _tok_s tokens/s,
_fraction fraction). Exit 2, writing nothing, on an unknown column, an empty table or a column
with no number.
  kvplan serve --model llama-2-7b --hardware a100-80g-sxm --arrivals poisson --qps 4 \\
      --lengths 512 --output-lengths 64 --requests 200 --format csv > requests.csv
  kvplan plot requests.csv --x arrival_s --y e2e_s --out e2e.svg";

/// `kvplan plot`.
#[derive(Debug, Args)]
pub struct PlotArgs {
    /// The CSV table (header row first)
    #[arg(value_name = "CSV")]
    pub csv: PathBuf,
    /// Column on the x axis
    #[arg(long, value_name = "COLUMN")]
    pub x: String,
    /// Column on the y axis
    #[arg(long, value_name = "COLUMN")]
    pub y: String,
    /// Columns whose distinct values make one line each [default: one line]
    #[arg(long, value_name = "COLUMN[,COLUMN]", value_delimiter = ',')]
    pub series: Vec<String>,
    /// Title [default: Y against X]
    #[arg(long, value_name = "TEXT")]
    pub title: Option<String>,
    /// The SVG file to write [default: the SVG on stdout]
    #[arg(long, value_name = "FILE.svg")]
    pub out: Option<PathBuf>,
}

/// `kvplan regress`.
#[derive(Debug, Subcommand)]
pub enum RegressCommand {
    /// Rerun every scenario in DIR and compare with DIR/golden/ (exit 1 on a regression or a
    /// missing golden)
    Check(RegressCheckArgs),
    /// Rerun every scenario in DIR and rewrite its goldens in DIR/golden/
    Update(RegressUpdateArgs),
}

/// `kvplan regress check`.
#[derive(Debug, Args)]
pub struct RegressCheckArgs {
    /// The suite: scenario files (*.toml with a `model` key) and golden/
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Largest relative change that is not a regression: a fraction (0.01) or a percentage (1%)
    #[arg(long, value_name = "FRACTION|PERCENT", default_value = "1%")]
    pub tolerance: String,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `kvplan regress update`.
#[derive(Debug, Args)]
pub struct RegressUpdateArgs {
    /// The suite: scenario files (*.toml with a `model` key) and golden/
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

const CAPACITY_LONG: &str = "\
The longest context (tokens per sequence) each strategy fits, by binary search on the memory
model, with the limit that binds (GPU memory or host RAM):
  standard         everything on the GPU, the prompt in one forward pass
  chunked-prefill  everything on the GPU, the prompt in chunks
  kv-quant-4bit    the KV cache quantised to 4 bits on the GPU
  layer-offload    the KV cache on the host, two layers of it on the GPU
  headinfer        the KV cache on the host, ping-pong buffers of one head group on the GPU
The GPU side counts weights, stored KV, the prefill pass's working set and a runtime reserve
(--runtime-reserve, default 2.65 GiB: fitted to the HeadInfer paper's measured maxima on an RTX
4090; 0 for the bare model). E.g. the HeadInfer paper's Table 11:
  kvplan capacity --model llama-3-8b --hardware rtx-4090 --host-ram 512

With --slo, the serving capacity instead: for each configuration (--hardware list x
--tensor-parallel-size list) the highest request rate whose latencies meet every objective,
found on the serving simulator (the workload served at a rate: halve from 1 req/s until one
passes, double until one fails, bisect to --qps-tolerance; each rate serves the same seeded
requests, so the answer is deterministic). With --target-qps, each configuration is sized
(replicas = ceil(target / max rate), GPUs = replicas x TP) and the cheapest that meets the
target is named: by price when every profile gives gpu.price_usd_per_hour (add it in a profile
file: base = \"h100-sxm\" then [gpu] price_usd_per_hour = 4.0), else by GPU count.
  kvplan capacity --slo ttft_p99=2s,tpot_p99=100ms --model llama-2-7b --hardware a100-80g-sxm,h100-sxm --lengths 512 --output-lengths 128 --target-qps 20
  kvplan capacity --slo ttft_p99=2s scenarios/llama-2-7b-a100-serve.toml --tensor-parallel-size 1,2";

const EXEC_LONG: &str = "\
Plan a scenario exactly as `simulate` does, then run the schedule for real and report the
measured timeline with the same fields (and --trace) as `simulate`.

  --backend cuda  NVIDIA GPU through cudarc (driver, cuBLAS and NVRTC loaded at run time): copy
                  engines on their own streams, cuBLAS GEMMs, NVRTC attention kernels, events
                  for dependencies and timing. Fails with one line where there is no GPU.
  --backend cpu   one thread per stream on host memory with real f32 arithmetic; runs anywhere.

Weights, activations and the KV cache are synthetic (seeded random) at the model's real shapes:
timing does not depend on values, and nothing is downloaded. The --hardware profile still
decides the plan (memory checks, KVPR split); pass a calibrated profile of the machine you run
on for a plan that fits it.";

const CALIBRATE_LONG: &str = "\
Measure the machine through the executor and write a hardware profile whose [calibration] and
[kernels] sections the simulator then uses instead of datasheet figures:
  copies        time vs size, 4 KiB to 1 GiB (--quick: less), host->device and device->host,
                pinned and pageable, and both directions at once (full or half duplex)
  GEMMs         the layer shapes of the model presets (or --model ...), decode and prefill rows
  attention     decode over batch x context, causal prefill over length (fitted roofline)
  kernels       memory-bound kernels over size, and the per-op launch overhead
  [kernels]     tables over the cost model's token grid (30 counts, 1..4096; on a CPU up to
                1024, --quick 64) of each GEMM of the models' layers (qkv_proj, out_proj, ffn_up,
                ffn_down) and each memory-bound kind (norm, activation, rope, add, embedding),
                with the GEMM and per-kind models fitted to them. Budget on an H100: the full
                plan's 45 tables x 30 points x 10 repetitions = 13,500 kernels, about 0.13 s of
                device time per pass, about 3 s in all with warm-up and launches (--quick: 5
                repetitions, two models)
Provenance (device, driver, date, backend) is recorded in the file, which is a valid --hardware
file for every other command. A full GPU run takes a few minutes (the [kernels] sweep adds
seconds of that); --quick is for CI and CPUs.

--from-table FILE fits the kernel model from measurements someone else took, without a GPU:
a CSV in Vidur's profiling format, one row per model shape x token count x tensor-parallel
degree with the median device time of each op in milliseconds (emb, input_layernorm,
attn_pre_proj, attn_rope, attn_post_proj, post_attention_layernorm, mlp_up_proj, mlp_act,
mlp_down_proj, add). Each column is costed as the kernel kvplan emits for that op (the same
GEMM shapes and bytes), then
  models   the GEMM model (tile/wave quantisation with --sms, memory/compute blend, floors)
           and each memory-bound kind's floor and bandwidth, fitted to minimise the median
           plus half the p90 of |log(predicted/measured)| per op and token bucket
  tables   one per GEMM shape and memory-bound kind x row width on the 30-point token grid,
           each point the median of the measurements within half a grid step
The --base profile (preset or file) is written with the fitted [kernels] section; attention
and all-reduce figures (not in the table) come from the base's [kernels], else its roofline.
The per-op x token-bucket error (median, p90) of the result is printed on stdout.
  kvplan calibrate --from-table a100_Llama-2-7b-hf.csv --base a100-80g-sxm --out a100.toml

An attention table (detected by its header phase,batch_size,query_tokens_per_seq,
kv_tokens_per_seq,median_ms_per_layer: one row per decode batch or prefill chunk of one layer,
Vidur's attention profiling) fits [kernels.attention] instead: the work-unit model of one
attention kernel per batch (--sms fixed; floor, per-unit cost, HBM and tensor efficiency per SM,
tail, per-row and split-combine costs), with the heads of --model [default: the preset the file
name contains, e.g. llama-2-7b]. The measured calls appended the new tokens' K,V to the cache
inside the kernel (flash_attn_with_kvcache with k, v: every query block copies the keys it
attends); the fit models that copy and leaves it out of the profile (vLLM writes the cache in a
separate kernel). The base must have a [kernels] section; the decode and prefill errors (median,
p90) by batch x context and chunk x cached-token bucket are printed on stdout.
  kvplan calibrate --from-table a100_Llama-2-7b-hf_attention.csv --base a100-80g-sxm";

const VALIDATE_LONG: &str = "\
Simulate a scenario with a (calibrated) profile and execute the same schedule on a backend, then
report the end-to-end error of the makespan, the error per decode step (median, p90), per op
kind and per category. Exits with code 1 when the end-to-end error exceeds --max-error.";

const SIMULATE_LONG: &str = "\
Simulate one batch generation (prefill, then gen-1 decode steps) with a strategy:
  kvpr           KV cache on the host; each step recomputes a prefix of it on the GPU from
                 activations while the rest is transferred (split from a linear program)
  full-transfer  KV cache on the host, all of it transferred every step (FlexGen, HF Accelerate)
  gpu-only       everything resident on the GPU (fails if it does not fit)
  headinfer      long context: KV offloaded per head group, chunked prefill, ping-pong
                 prefetch and write-back (--heads-per-group, --chunk; batch defaults to 1)
  runahead       time to first token: the prompt split over --devices with a point-to-point
                 KV chain (--link-gbps, --link-latency-us; batch and gen default to 1)

--gpu-batches k > 1 gives FlexGen's column-by-column order (k GPU batches share one weight load
per layer; the effective batch is batch x k). --compare runs every strategy side by side.

The JSON object (--format json) has at least: strategy, decode_latency_s,
decode_throughput_tok_s (= batch*gpu_batches*(gen-1)/decode_latency_s, as the KVPR paper reports
it), gpu_busy_fraction (decode phase), h2d_bytes, d2h_bytes, peak_gpu_bytes, peak_host_bytes.

A scenario TOML file can replace the flags (flags override it):
  model = \"opt-6.7b\"
  hardware = \"a100-40g-pcie4\"
  strategy = \"kvpr\"
  [workload]
  batch = 64
  prompt = 128
  gen = 32
  [offload]
  weights = \"auto\"       # auto | gpu | offload
  host_memory = \"pinned\" # pinned | pageable
  split = \"auto\"         # auto | recomputed tokens per step
  [headinfer]
  heads_per_group = 2    # else the fastest simulated
  chunk = 10240          # else the fastest simulated
  [runahead]
  devices = 4
  link_gbps = 10.0       # else the profile's [peer] link
  link_latency_us = 5.0";

/// Planners.
#[derive(Debug, Subcommand)]
pub enum PlanCommand {
    /// KVPR: the recompute/transfer split for every decode step, and why
    Kvpr(PlanArgs),
    /// HeadInfer: heads per offload group, prefill chunk size and memory for a long context
    Headinfer(PlanArgs),
    /// KV-Runahead: the context partition over devices, TTFT per method and the speed-up
    Runahead(PlanArgs),
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned text for people.
    Table,
    /// One JSON document for programs and notebooks.
    Json,
    /// CSV with a header row.
    Csv,
}

/// `--format`.
#[derive(Debug, Args)]
pub struct OutputArgs {
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
}

/// `--model` and `--hardware`, shared by the planner commands and `serve`.
#[derive(Debug, Args)]
pub struct TargetArgs {
    /// Model preset (see `kvplan models`), path to a Hugging Face config.json, or a model
    /// directory holding one
    #[arg(long, value_name = "NAME|PATH")]
    pub model: Option<String>,
    /// Hardware preset (see `kvplan hardware`) or path to a profile TOML (alias --profile)
    #[arg(long, visible_alias = "profile", value_name = "NAME|PATH")]
    pub hardware: Option<String>,
}

/// The model, the hardware and an optional scenario file.
#[derive(Debug, Args)]
pub struct ScenarioArgs {
    /// Scenario TOML file; flags given as well override its fields
    #[arg(value_name = "SCENARIO")]
    pub scenario: Option<PathBuf>,
    /// Model and hardware
    #[command(flatten)]
    pub target: TargetArgs,
    /// Serving dtype, overriding the model's (fp16, bf16, fp32)
    #[arg(long, value_name = "DTYPE")]
    pub dtype: Option<String>,
}

/// The batch being generated.
#[derive(Debug, Args)]
pub struct WorkloadArgs {
    /// Sequences per GPU batch [default: 64; 1 for headinfer and runahead]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub batch: Option<i64>,
    /// GPU batches sharing one weight load per layer (>1: column-by-column order) [default: 1]
    #[arg(long, value_name = "K", allow_negative_numbers = true)]
    pub gpu_batches: Option<i64>,
    /// Prompt tokens per sequence (the context, for headinfer and runahead) [default: 128]
    #[arg(
        long,
        visible_alias = "context",
        value_name = "TOKENS",
        allow_negative_numbers = true
    )]
    pub prompt: Option<i64>,
    /// Tokens generated per sequence, the first by prefill [default: 32; 1 for runahead]
    #[arg(long = "gen", value_name = "TOKENS", allow_negative_numbers = true)]
    pub gen_len: Option<i64>,
}

/// Offload options.
#[derive(Debug, Args)]
pub struct OffloadArgs {
    /// Where the weights live: auto (GPU if they fit), gpu, offload [default: auto]
    #[arg(long, value_name = "PLACE")]
    pub weights: Option<String>,
    /// Host memory of the offloaded data: pinned or pageable [default: pinned]
    #[arg(long, value_name = "KIND")]
    pub host_memory: Option<String>,
    /// KVPR split: auto (optimum per step) or a fixed number of recomputed tokens [default: auto]
    #[arg(long, value_name = "auto|TOKENS", allow_hyphen_values = true)]
    pub split: Option<String>,
    /// What the auto split minimises: schedule (the emitted schedule's steady state, checked on
    /// the simulator; within 1% of the best fixed split) or paper (the KVPR paper's Eq. 10,
    /// activation copy in series; for comparison) [default: schedule]
    #[arg(long, value_name = "MODEL")]
    pub split_model: Option<String>,
}

/// What to run: model, hardware or scenario file, the batch, and every planner's options.
/// Shared by `plan`, `simulate`, `exec` and `validate`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Model, hardware, scenario
    #[command(flatten)]
    pub scenario: ScenarioArgs,
    /// Workload
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Offload options
    #[command(flatten)]
    pub offload: OffloadArgs,
    /// HeadInfer / KV-Runahead options
    #[command(flatten)]
    pub planner: PlannerArgs,
}

/// HeadInfer and KV-Runahead options.
#[derive(Debug, Args)]
pub struct PlannerArgs {
    /// HeadInfer: KV heads per offload group [default: the fastest simulated that fits]
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub heads_per_group: Option<i64>,
    /// HeadInfer: prefill chunk tokens [default: the fastest simulated that fits]
    #[arg(long, value_name = "TOKENS", allow_negative_numbers = true)]
    pub chunk: Option<i64>,
    /// KV-Runahead: devices to split the prefill over [default: 4]
    #[arg(long, value_name = "P", allow_negative_numbers = true)]
    pub devices: Option<i64>,
    /// KV-Runahead: device-to-device bandwidth in GB/s [default: the profile's peer link]
    #[arg(long, value_name = "GBPS", allow_negative_numbers = true)]
    pub link_gbps: Option<f64>,
    /// KV-Runahead: device-to-device latency in microseconds [default: the profile's]
    #[arg(long, value_name = "US", allow_negative_numbers = true)]
    pub link_latency_us: Option<f64>,
}

/// `kvplan capacity`.
#[derive(Debug, Args)]
pub struct CapacityArgs {
    /// SLO mode: a serving scenario TOML (as `kvplan serve FILE` reads it); flags override it
    #[arg(value_name = "SERVE_SCENARIO", requires = "slo")]
    pub scenario: Option<PathBuf>,
    /// Model preset or config.json
    #[arg(long, value_name = "NAME|PATH")]
    pub model: Option<String>,
    /// Hardware preset or profile TOML (alias --profile); with --slo, a comma-separated list of
    /// configurations to compare
    #[arg(long, visible_alias = "profile", value_name = "NAME|PATH")]
    pub hardware: Option<String>,
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
    /// SLO mode: replay a trace CSV, rescaled to each rate tried
    #[arg(long, value_name = "FILE", requires = "slo")]
    pub trace: Option<PathBuf>,
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
    /// Strategies to size (repeatable): standard, chunked-prefill, kv-quant-4bit, layer-offload,
    /// headinfer [default: all five]
    #[arg(long = "strategy", value_name = "NAME")]
    pub strategies: Vec<String>,
    /// Host RAM for the offloaded KV cache, GiB [default: the profile's host.ram_gib]
    #[arg(long, value_name = "GIB", allow_negative_numbers = true)]
    pub host_ram: Option<f64>,
    /// Sequences per batch
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub batch: i64,
    /// Prefill chunk tokens of the chunked strategies
    #[arg(
        long,
        value_name = "TOKENS",
        default_value_t = 10240,
        allow_negative_numbers = true
    )]
    pub chunk: i64,
    /// HeadInfer: KV heads per offload group (1 reaches furthest)
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub heads_per_group: i64,
    /// Memory the inference runtime keeps beyond the model's tensors, GiB
    #[arg(
        long,
        value_name = "GIB",
        default_value_t = 2.65,
        allow_negative_numbers = true
    )]
    pub runtime_reserve: f64,
    /// Serving dtype, overriding the model's (fp16, bf16, fp32)
    #[arg(long, value_name = "DTYPE")]
    pub dtype: Option<String>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `kvplan models`.
#[derive(Debug, Args)]
pub struct ModelsArgs {
    /// A preset name or config.json path to show in detail
    pub model: Option<String>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `kvplan hardware`.
#[derive(Debug, Args)]
pub struct HardwareArgs {
    /// A preset name or profile TOML path to show (a preset prints as commented TOML)
    pub hardware: Option<String>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `kvplan plan ...`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// What to plan
    #[command(flatten)]
    pub run: RunArgs,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `kvplan simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// What to run
    #[command(flatten)]
    pub run: RunArgs,
    /// Strategy: kvpr, full-transfer, gpu-only, headinfer, runahead [default: kvpr]
    #[arg(long, value_name = "NAME")]
    pub strategy: Option<String>,
    /// Run kvpr, full-transfer and gpu-only and print them side by side (ignores --strategy)
    #[arg(long)]
    pub compare: bool,
    /// Write the simulated timeline: Chrome trace JSON for Perfetto / chrome://tracing, or CSV
    /// when FILE ends in .csv (one track per stream; with --compare, one process per strategy)
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
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

    /// The scenario file (if any) overlaid with these flags, resolved by the planner; its notes
    /// go to stderr.
    pub fn resolve(&self, strategy: Option<String>) -> Result<Scenario, crate::error::CliError> {
        self.resolve_running(strategy, &[])
    }

    /// [`resolve`](Self::resolve) for a command that also runs `also_run` (`--compare`): a
    /// setting one of them reads is not noted as ignored.
    pub fn resolve_running(
        &self,
        strategy: Option<String>,
        also_run: &[Strategy],
    ) -> Result<Scenario, crate::error::CliError> {
        let base = match &self.scenario.scenario {
            Some(p) => RawScenario::from_file(p)?,
            None => RawScenario::default(),
        };
        let scenario = base.overlay(self.to_raw(strategy)).resolve()?;
        // Clamped or ignored settings are not errors: say so on stderr, leave stdout alone.
        for note in &scenario.notes {
            if let Note::Ignored { read_by, .. } = note
                && also_run.contains(read_by)
            {
                continue;
            }
            eprintln!("note: {}", crate::messages::note(note));
        }
        Ok(scenario)
    }
}

/// Which executor backend, on which device.
#[derive(Debug, Args)]
pub struct BackendArgs {
    /// Executor backend: cuda (NVIDIA GPU) or cpu
    #[arg(long, value_name = "cuda|cpu", default_value = "cuda")]
    pub backend: String,
    /// CUDA device ordinal of schedule device 0
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub device: usize,
    /// Untimed runs of the whole schedule before the measured one
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub warmup: u32,
    /// Seed of the synthetic weights and activations
    #[arg(long, value_name = "SEED", default_value_t = 0x6b76_706c_616e)]
    pub seed: u64,
}

/// `kvplan exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// What to run
    #[command(flatten)]
    pub run: RunArgs,
    /// Strategy: kvpr, full-transfer, gpu-only, headinfer, runahead [default: kvpr]
    #[arg(long, value_name = "NAME")]
    pub strategy: Option<String>,
    /// Backend
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Write the measured timeline (Chrome trace JSON, or CSV when FILE ends in .csv)
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `kvplan validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// What to run (--hardware is the profile to validate)
    #[command(flatten)]
    pub run: RunArgs,
    /// Strategy: kvpr, full-transfer, gpu-only, headinfer, runahead [default: kvpr]
    #[arg(long, value_name = "NAME")]
    pub strategy: Option<String>,
    /// Backend
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Largest acceptable end-to-end relative error of the makespan
    #[arg(long, value_name = "FRACTION", default_value_t = 0.10)]
    pub max_error: f64,
    /// Write both timelines into one Chrome trace (processes `simulated` and `measured`)
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `kvplan calibrate`.
#[derive(Debug, Args)]
pub struct CalibrateArgs {
    /// Backend
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Where to write the profile TOML (with --from-table and --from-runs: optional, else the
    /// fitted section is printed after the error table)
    #[arg(long, value_name = "FILE", required_unless_present_any = ["from_table", "from_runs"])]
    pub out: Option<PathBuf>,
    /// Fewer sizes and shapes: seconds on a CPU, for CI
    #[arg(long)]
    pub quick: bool,
    /// Preset or profile file whose fields the profile keeps where nothing is measured
    /// [default: the preset whose GPU name matches, if any; with --from-table: a100-80g-sxm
    /// or h100-sxm from the file name]
    #[arg(long, value_name = "PRESET|FILE")]
    pub base: Option<String>,
    /// Fit the [kernels] section from a measured table (Vidur's profiling CSV: model sizes,
    /// num_tokens, num_tensor_parallel_workers, one *_ms column per op), or [kernels.attention]
    /// from a measured attention table (header phase,batch_size,query_tokens_per_seq,
    /// kv_tokens_per_seq,median_ms_per_layer), instead of measuring
    #[arg(long, value_name = "FILE", conflicts_with = "quick")]
    pub from_table: Option<PathBuf>,
    /// Fit the serving figures (decode attention's KV bandwidth, the engine's host time, the
    /// frontend latency) to real serving runs: a stage table of shared-prefix runs (one row per
    /// load stage with the server's settings and the measured TTFT / E2E; see
    /// data/validation/real_vllm/); --base names the GPU's profile
    #[arg(long, value_name = "FILE", conflicts_with_all = ["quick", "models", "from_table"])]
    pub from_runs: Option<PathBuf>,
    /// With --from-runs: requests of each stage replayed while fitting (the report replays all)
    #[arg(long, value_name = "N", default_value_t = 3000, requires = "from_runs")]
    pub fit_requests: u64,
    /// Streaming multiprocessors of the GPU (the GEMM model's wave quantisation; with
    /// --from-table) [default: from the base's GPU name: A100 108, H100/H200 SXM 132]
    #[arg(long, value_name = "N", requires = "from_table")]
    pub sms: Option<u32>,
    /// Profile name [default: the --out file's stem]
    #[arg(long, value_name = "NAME")]
    pub name: Option<String>,
    /// Models whose layer shapes to measure (repeatable) [default: depends on backend and
    /// --quick]; with an attention table, the model it was measured on [default: the preset the
    /// file name contains]
    #[arg(long = "model", value_name = "NAME|PATH")]
    pub models: Vec<String>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

const SERVE_LONG: &str = "\
Simulate an LLM server step by step as vLLM runs it: requests arrive over time (a trace replayed,
or generated), the engine batches them continuously over a paged KV cache with prefix caching,
preempts when blocks run out, and a client sees TTFT, TPOT and E2E.

Workload (one of):
  --trace FILE        replay a CSV `arrived_at,num_prefill_tokens,num_decode_tokens` (optional
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
--gpu-memory-utilization, --block-size, --tensor-parallel-size, --enforce-eager.

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

/// `kvplan serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Serving scenario TOML file; flags given as well override its fields
    #[arg(value_name = "SCENARIO")]
    pub scenario: Option<PathBuf>,
    /// Model and hardware
    #[command(flatten)]
    pub target: TargetArgs,
    /// Replay this trace CSV (`arrived_at,num_prefill_tokens,num_decode_tokens`)
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Trace replay: multiply every inter-arrival time by F (2 halves the rate)
    #[arg(long, value_name = "F", allow_negative_numbers = true)]
    pub time_scale: Option<f64>,
    /// Trace replay: start at this trace time, seconds (it becomes t = 0)
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    pub start: Option<f64>,
    /// Arrival process: all-at-once, poisson, gamma:CV (CV > 1 is burstier than Poisson)
    #[arg(long, value_name = "KIND")]
    pub arrivals: Option<String>,
    /// Mean requests per second (synthetic), or the rate a trace is rescaled to
    #[arg(long, value_name = "Q", allow_negative_numbers = true)]
    pub qps: Option<f64>,
    /// Prompt lengths: N, uniform:LO:HI, zipf:LO:HI[:THETA], lognormal:MEDIAN:SIGMA[:MAX],
    /// trace:FILE
    #[arg(long, visible_alias = "prompt-lengths", value_name = "SPEC")]
    pub lengths: Option<String>,
    /// Output lengths, same forms as --lengths [default: 128]
    #[arg(long, value_name = "SPEC")]
    pub output_lengths: Option<String>,
    /// Requests to generate, or the most to replay from a trace
    #[arg(long, value_name = "N")]
    pub requests: Option<u64>,
    /// Seed of the synthetic workload's random streams [default: 0]
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Shared-prefix workload (inference-perf's): system prompts, each shared by a group of
    /// users; with --users-per-group, --system-prompt-len, --question-len, --output-lengths
    #[arg(long, value_name = "N")]
    pub prefix_groups: Option<u64>,
    /// Shared-prefix workload: users per system prompt, each with one fixed question
    #[arg(long, value_name = "N")]
    pub users_per_group: Option<u64>,
    /// Shared-prefix workload: system prompt length (a length spec, drawn once per group)
    #[arg(long, value_name = "SPEC")]
    pub system_prompt_len: Option<String>,
    /// Shared-prefix workload: question length (a length spec, drawn once per user)
    #[arg(long, value_name = "SPEC")]
    pub question_len: Option<String>,
    /// Multi-turn workload: conversations (started by --arrivals at --qps conversations/s); each
    /// turn's prompt is the conversation so far plus a new message
    #[arg(long, value_name = "N")]
    pub conversations: Option<u64>,
    /// Multi-turn workload: turns per conversation (a length spec)
    #[arg(long, value_name = "SPEC")]
    pub turns: Option<String>,
    /// Multi-turn workload: first message length (a length spec)
    #[arg(long, value_name = "SPEC")]
    pub first_message_len: Option<String>,
    /// Multi-turn workload: later messages' length (a length spec)
    #[arg(long, value_name = "SPEC")]
    pub message_len: Option<String>,
    /// Multi-turn workload: seconds between an answer's end and the next turn (S, exp:MEAN,
    /// uniform:LO:HI); the next turn is sent only after the answer (closed loop)
    #[arg(long, value_name = "SPEC")]
    pub think_time: Option<String>,
    /// Multi-turn workload: end a conversation before a turn whose prompt plus output would pass
    /// this many tokens
    #[arg(long, value_name = "TOKENS")]
    pub max_context: Option<u64>,
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
        use kvplan_workloads::WorkloadConfig;
        RawServeScenario {
            model: self.target.model.clone(),
            hardware: self.target.hardware.clone(),
            workload: WorkloadConfig {
                arrivals: self.arrivals.clone(),
                qps: self.qps,
                cv: None,
                prompt_lengths: self.lengths.clone(),
                output_lengths: self.output_lengths.clone(),
                requests: self.requests,
                seed: self.seed,
                trace: self.trace.clone(),
                time_scale: self.time_scale,
                start_s: self.start,
                shared_prefix: (self.prefix_groups.is_some()
                    || self.users_per_group.is_some()
                    || self.system_prompt_len.is_some()
                    || self.question_len.is_some())
                .then(|| kvplan_workloads::SharedPrefixConfig {
                    groups: self.prefix_groups,
                    users_per_group: self.users_per_group,
                    system_prompt_len: self.system_prompt_len.clone(),
                    question_len: self.question_len.clone(),
                }),
                conversation: (self.conversations.is_some()
                    || self.turns.is_some()
                    || self.first_message_len.is_some()
                    || self.message_len.is_some()
                    || self.think_time.is_some()
                    || self.max_context.is_some())
                .then(|| kvplan_workloads::ConversationConfig {
                    conversations: self.conversations,
                    turns: self.turns.clone(),
                    first_message_len: self.first_message_len.clone(),
                    message_len: self.message_len.clone(),
                    think_time_s: self.think_time.clone(),
                    max_context: self.max_context,
                }),
            },
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

const SWEEP_LONG: &str = "\
Run every point of a sweep file through the same path as `kvplan simulate FILE` (kind =
\"simulate\": planner and discrete-event simulator) or `kvplan serve FILE` (kind = \"serve\":
the serving simulator), in parallel (RAYON_NUM_THREADS threads; a progress bar on a terminal),
and write one row per point in point order, whatever the thread count.

  kind = \"simulate\"               # or \"serve\"
  [base]                          # a scenario exactly as `kvplan simulate FILE` reads it
  model = \"opt-6.7b\"              #   (or, instead of [base]: base_file = \"scenarios/x.toml\",
  hardware = \"a100-40g-pcie4\"     #   relative to the sweep file)
  [base.workload]
  prompt = 128
  gen = 32
  [axes]                          # cartesian product; first axis outermost, last fastest
  hardware = [\"a100-40g-pcie4\", \"h100-pcie\"]
  \"workload.batch\" = [8, 16, 32]   # any scenario field by its dotted path
  strategy = [\"kvpr\", \"full-transfer\"]
  [[points]]                      # optional explicit points, after the grid
  \"workload.batch\" = 64
  \"offload.split\" = 100

Any field works (model, hardware, strategy, dtype, workload.*, offload.*, headinfer.*,
runahead.*; for serve: workload.qps / arrivals / prompt_lengths / output_lengths / trace /
requests / seed, serve.scheduler / preemption / block_size / tensor_parallel_size, ...): each
point's values are set at their paths in the base and read as the scenario, so an unknown field
or a value of the wrong type stops the sweep before it starts, naming the axis. Relative paths
are relative to the file that writes them.

Columns: point, the axes' paths (then fields only [[points]] set), the metrics
(simulate: prefill_latency_s, decode_latency_s, total_latency_s, decode_throughput_tok_s,
gpu_busy_fraction, gpu_idle_s, peak_gpu_bytes, peak_host_bytes, h2d_bytes, d2h_bytes,
mean_recompute_fraction, ops; serve: requests, finished, rejected, output_tok_s, total_tok_s,
requests_per_s, ttft/tpot/e2e/queue p50/p90/p99 in seconds, preemptions, swap_out_bytes,
swap_in_bytes, gpu_busy_fraction, makespan_s, iterations, gpu_blocks), then status (ok or error)
and reason: a point that cannot run (it does not fit, an invalid combination) is a row with
status error and why, not a failure.

Large and distributed sweeps:
  --out FILE --resume   continue a killed run: whole rows already in FILE are kept (a cut-off
                        last line is recomputed), the rest appended; the result is the same
                        bytes as an uninterrupted run
  --shard I/N           run only points with index % N == I (0-based); then
                        `kvplan merge OUT SHARD...` gives the unsharded file byte for byte
  --yes                 needed above --max-points (default 100000) points
  --plot FILE.svg       after the run, --plot-y against --plot-x, one line per value of the
                        other axes (--plot-series to choose); needs --out in CSV";

const MERGE_LONG: &str = "\
Join the outputs of `kvplan sweep FILE --shard I/N` (CSV or JSONL) into the file the unsharded
run writes, byte for byte: one header, rows in point order. Fails, naming the file or point, on
different columns (outputs of different sweeps), a point in two inputs, a missing point, or a cut-off
last line. Gaps below the largest point are always found; give --sweep FILE to check the points
after it too.
  kvplan merge all.csv shard-0.csv shard-1.csv shard-2.csv
  kvplan merge --out all.csv --sweep sweep.toml shard-*.csv";

/// Row format of `kvplan sweep`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SweepFormat {
    /// CSV with a header row
    Csv,
    /// One JSON object per line
    Jsonl,
}

/// `--shard I/N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard (0-based).
    pub index: u64,
    /// Shards in all.
    pub count: u64,
}

fn parse_shard(s: &str) -> Result<Shard, String> {
    let bad = || format!("expected I/N with 0 <= I < N, e.g. 0/4 (got '{s}')");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (index, count) = (
        i.trim().parse::<u64>().map_err(|_| bad())?,
        n.trim().parse::<u64>().map_err(|_| bad())?,
    );
    if count == 0 || index >= count {
        return Err(bad());
    }
    Ok(Shard { index, count })
}

/// `kvplan sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Sweep TOML file (kind, [base] or base_file, [axes], [[points]]; see above)
    #[arg(value_name = "SWEEP")]
    pub file: PathBuf,
    /// Write the rows to FILE (streamed as points finish) instead of stdout
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Row format
    #[arg(long, value_enum, default_value_t = SweepFormat::Csv)]
    pub format: SweepFormat,
    /// Keep the rows already in --out and run only the rest
    #[arg(long, requires = "out")]
    pub resume: bool,
    /// Run only the points with index % N == I (0-based), e.g. --shard 0/4
    #[arg(long, value_name = "I/N", value_parser = parse_shard)]
    pub shard: Option<Shard>,
    /// Refuse sweeps of more points than this without --yes
    #[arg(long, value_name = "N", default_value_t = kvplan_sweep::DEFAULT_MAX_POINTS)]
    pub max_points: u64,
    /// Run a sweep of more than --max-points points
    #[arg(long)]
    pub yes: bool,
    /// After the run, draw --plot-y against --plot-x as an SVG line chart, one line per value
    /// of the --plot-series columns (needs --out in CSV; with --shard, plot the merged file
    /// with `kvplan plot`)
    #[arg(long, value_name = "FILE.svg", requires = "out")]
    pub plot: Option<PathBuf>,
    /// Column for the plot's x axis [default: the last axis]
    #[arg(long, value_name = "COLUMN", requires = "plot")]
    pub plot_x: Option<String>,
    /// Column for the plot's y axis [default: decode_latency_s for simulate sweeps, ttft_p99_s
    /// for serve sweeps]
    #[arg(long, value_name = "COLUMN", requires = "plot")]
    pub plot_y: Option<String>,
    /// Comma-separated columns whose values make the series [default: the other axes]
    #[arg(long, value_name = "COLUMN[,COLUMN]", requires = "plot")]
    pub plot_series: Option<String>,
}

/// `kvplan merge`.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// OUT then the shard outputs (or only the shard outputs, with --out)
    #[arg(value_name = "FILE", required = true)]
    pub paths: Vec<PathBuf>,
    /// The merged file (else the first FILE)
    #[arg(long, value_name = "OUT")]
    pub out: Option<PathBuf>,
    /// The sweep file the shards ran: also checks that no point after the last one given is
    /// missing
    #[arg(long, value_name = "SWEEP")]
    pub sweep: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse() {
        assert_eq!(parse_shard("2/3"), Ok(Shard { index: 2, count: 3 }));
        for bad in ["3/3", "0/0", "1", "-1/2", "a/b", "1/2/3"] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
    }
}
