//! Argument groups shared by several commands, flattened into each command's own args struct
//! (which lives next to its code in `commands/`). Declarations only.

use std::path::PathBuf;

use clap::Args;
pub use kvplan_report::Format;

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
    /// Quantised weights, vLLM's names: fp8, awq, gptq (refused on a GPU that cannot run them)
    #[arg(long, value_name = "METHOD")]
    pub quantization: Option<String>,
    /// KV cache element type: auto (the model's dtype) or fp8 (one byte: half the KV bytes
    /// moved and stored)
    #[arg(long, value_name = "DTYPE")]
    pub kv_cache_dtype: Option<String>,
    /// The software stack whose host thread (launch, copy-issue and synchronisation costs) and
    /// memory kinds are modelled: eager-hf, flexgen, vllm-v0, vllm-v1-cudagraph, kvplan-exec
    /// [default: none: no host thread, --host-memory for every tensor]
    #[arg(long, value_name = "NAME")]
    pub implementation: Option<String>,
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

/// A run of any strategy (`simulate`, `exec`, `validate`): what to run and `--strategy`, declared
/// once (the `plan` subcommands fix the strategy and flatten [`RunArgs`] alone).
#[derive(Debug, Args)]
pub struct StrategyRunArgs {
    /// What to run
    #[command(flatten)]
    pub run: RunArgs,
    /// Strategy: kvpr, full-transfer, gpu-only, headinfer, runahead [default: kvpr]
    #[arg(long, value_name = "NAME")]
    pub strategy: Option<String>,
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

/// A serving workload (`serve`, `serve-capacity`): a request trace replayed, or requests
/// generated (synthetic arrivals, shared prefixes, multi-turn conversations).
#[derive(Debug, Default, PartialEq, Args)]
pub struct RequestsArgs {
    /// Replay this request trace CSV (`arrived_at,num_prefill_tokens,num_decode_tokens`)
    #[arg(long, value_name = "FILE")]
    pub requests_trace: Option<PathBuf>,
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
}

impl RequestsArgs {
    /// These flags as the scenario's `[workload]`, to overlay on a scenario file's.
    pub fn to_config(&self) -> kvplan_workloads::WorkloadConfig {
        kvplan_workloads::WorkloadConfig {
            arrivals: self.arrivals.clone(),
            qps: self.qps,
            cv: None,
            prompt_lengths: self.lengths.clone(),
            output_lengths: self.output_lengths.clone(),
            requests: self.requests,
            seed: self.seed,
            trace: self.requests_trace.clone(),
            time_scale: self.time_scale,
            start_s: self.start,
            shared_prefix: given(kvplan_workloads::SharedPrefixConfig {
                groups: self.prefix_groups,
                users_per_group: self.users_per_group,
                system_prompt_len: self.system_prompt_len.clone(),
                question_len: self.question_len.clone(),
            }),
            conversation: given(kvplan_workloads::ConversationConfig {
                conversations: self.conversations,
                turns: self.turns.clone(),
                first_message_len: self.first_message_len.clone(),
                message_len: self.message_len.clone(),
                think_time_s: self.think_time.clone(),
                max_context: self.max_context,
            }),
        }
    }
}

/// A group of settings where any of them is given.
fn given<T: Default + PartialEq>(group: T) -> Option<T> {
    (group != T::default()).then_some(group)
}

/// Replicas behind a router, prefill/decode pools (`serve`): the scenario's `[cluster]`.
#[derive(Debug, Default, Args)]
pub struct ClusterArgs {
    /// Identical replicas of the engine behind the router (vLLM's --data-parallel-size), each
    /// with its own KV blocks and prefix cache [default: 1]
    #[arg(long, visible_alias = "replicas", value_name = "N")]
    pub data_parallel_size: Option<u32>,
    /// How requests are spread over the replicas [default: vllm-dp]
    #[arg(long, value_enum, value_name = "ROUTER")]
    pub router: Option<kvplan_serve::router::RouterKind>,
    /// Seconds by which the load and KV events the router sees are older than its own rules
    /// make them [default: 0]
    #[arg(long, value_name = "S", allow_negative_numbers = true)]
    pub router_staleness: Option<f64>,
    /// The router's time per request, microseconds (part of TTFT) [default: 0]
    #[arg(long, value_name = "US", allow_negative_numbers = true)]
    pub router_latency_us: Option<f64>,
    /// The llm-d router's scorer weights [default: queue=2,kv=2,prefix=3]
    #[arg(long, value_name = "queue=W,kv=W,prefix=W")]
    pub router_weights: Option<String>,
    /// A group of replicas that differ from the scenario's (repeat for more groups):
    /// count=N,hardware=NAME,tp=N,quantization=fp8|awq|gptq,kv-cache-dtype=auto|fp8,
    /// max-num-seqs=N,max-num-batched-tokens=N
    #[arg(long = "replica", value_name = "SPEC")]
    pub replica: Vec<String>,
    /// Disaggregated serving: replicas that only prefill (with --decode-replicas)
    #[arg(long, value_name = "P")]
    pub prefill_replicas: Option<u32>,
    /// Disaggregated serving: replicas that decode, reading each prompt's KV from a prefill
    /// replica
    #[arg(long, value_name = "D")]
    pub decode_replicas: Option<u32>,
    /// The prefill pool's GPU [default: --hardware]
    #[arg(long, value_name = "NAME|PATH")]
    pub prefill_hardware: Option<String>,
    /// The prefill pool's tensor-parallel GPUs per replica [default: --tensor-parallel-size]
    #[arg(long, value_name = "N")]
    pub prefill_tp: Option<u32>,
    /// The decode pool's GPU [default: --hardware]
    #[arg(long, value_name = "NAME|PATH")]
    pub decode_hardware: Option<String>,
    /// The decode pool's tensor-parallel GPUs per replica [default: --tensor-parallel-size]
    #[arg(long, value_name = "N")]
    pub decode_tp: Option<u32>,
    /// How a prompt's KV reaches the decode replica [default: pull]
    #[arg(long, value_enum)]
    pub kv_transfer: Option<kvplan_serve::cluster::KvTransfer>,
    /// The network between replicas, one direction per GPU, GB/s [default: the profile's
    /// [interconnect], else 45 (InfiniBand NDR 400G)]
    #[arg(long, value_name = "GBPS", allow_negative_numbers = true)]
    pub interconnect_gbps: Option<f64>,
    /// The network's latency per transfer, microseconds [default: the profile's, else 5]
    #[arg(long, value_name = "US", allow_negative_numbers = true)]
    pub interconnect_latency_us: Option<f64>,
    /// A fleet that follows its load (colocated replicas; the router defaults to
    /// least-requests): min=1,max=8,metric=concurrency|queue|kv,target=X,interval=15s,
    /// delay=300s,cooldown=300s,initial=N [defaults as shown; target 16 in flight, 4 waiting or
    /// 0.7 of the KV]
    #[arg(long, value_name = "SPEC")]
    pub autoscale: Option<String>,
}
