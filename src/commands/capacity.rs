//! `kvplan capacity`: the longest context each strategy fits in GPU memory and host RAM.

use clap::Args;

use crate::args::*;
use crate::error::CliError;
use kvplan_planner::headinfer::{CapacityOptions, MemStrategy, MemoryConfig, capacity_report};
use kvplan_report as report;
use kvplan_vocab::{DType, Error, HardwareProfile, ModelSpec};

use super::serve_capacity::{CapacityTargetArgs, SloArgs, slo_capacity};

pub const CAPACITY_LONG: &str = "\
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

With --slo, the serving capacity instead: the same as `kvplan serve-capacity` (see its --help).";

/// `kvplan capacity`.
#[derive(Debug, Args)]
pub struct CapacityArgs {
    /// Model and hardware
    #[command(flatten)]
    pub target: CapacityTargetArgs,
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
    /// The serving capacity (`kvplan serve-capacity`), kept under `capacity --slo`
    #[command(flatten)]
    pub slo: SloArgs,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `kvplan capacity`.
pub fn capacity(args: &CapacityArgs) -> Result<String, CliError> {
    if args.slo.slo.is_some() {
        return slo_capacity(&args.target, &args.slo, args.output.format);
    }
    args.slo.refuse_without_slo()?;
    let required = |v: &Option<String>, flag: &str| {
        v.clone().ok_or_else(|| {
            CliError::input(format!(
                "{flag}: required (or --slo SPEC for the serving capacity under latency objectives)"
            ))
        })
    };
    let mut model = ModelSpec::resolve(&required(&args.target.model, "--model")?)?;
    if let Some(d) = &args.dtype {
        let dt = DType::parse(d).ok_or_else(|| {
            CliError::input(format!(
                "--dtype: unknown dtype '{d}'; use fp16, bf16 or fp32"
            ))
        })?;
        model = model.with_dtype(dt);
    }
    let hw = HardwareProfile::resolve(&required(&args.target.hardware, "--hardware")?)?;
    let strategies = args
        .strategies
        .iter()
        .map(|s| {
            MemStrategy::parse(s).ok_or_else(|| {
                let all = MemStrategy::ALL.map(MemStrategy::as_str).join(", ");
                CliError::input(format!(
                    "--strategy: unknown strategy '{s}'; use one of {all}"
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let whole = |flag: &str, v: i64| {
        let at_least_1 = "must be a whole number of at least 1";
        u32::try_from(v)
            .ok()
            .filter(|&x| x >= 1)
            .ok_or_else(|| Error::invalid(flag, v, at_least_1))
    };
    let gib_bytes = |flag: &str, v: f64, zero_ok: bool| {
        let ok = v.is_finite() && (v > 0.0 || (zero_ok && v == 0.0));
        let accepted = if zero_ok {
            "zero or more"
        } else {
            "a positive number of"
        };
        ok.then_some((v * (1u64 << 30) as f64) as u64)
            .ok_or_else(|| Error::invalid(flag, v, format!("must be {accepted} GiB")))
    };
    let host_ram = args.host_ram.map(|g| gib_bytes("--host-ram", g, false));
    let options = CapacityOptions {
        host_ram_bytes: host_ram.transpose()?,
        config: MemoryConfig {
            batch: whole("--batch", args.batch)?,
            chunk_tokens: whole("--chunk", args.chunk)?,
            heads_per_group: whole("--heads-per-group", args.heads_per_group)?,
            runtime_reserve: gib_bytes("--runtime-reserve", args.runtime_reserve, true)?,
        },
    };
    let r = capacity_report(&model, &hw, &strategies, &options)?;
    let format = args.output.format.into();
    Ok(report::planner::capacity(&r, options.config.batch, format)?)
}
