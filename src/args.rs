//! Argument groups shared by several commands, flattened into each command's own args struct
//! (which lives next to its code in `commands/`). Declarations only.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

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

impl From<Format> for kvplan_report::Format {
    fn from(f: Format) -> Self {
        match f {
            Format::Table => kvplan_report::Format::Table,
            Format::Json => kvplan_report::Format::Json,
            Format::Csv => kvplan_report::Format::Csv,
        }
    }
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
