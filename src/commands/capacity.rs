//! `kvplan capacity`: the longest context each strategy fits in GPU memory and host RAM.

use clap::Args;

use crate::args::*;
use crate::error::CliError;
use kvplan_planner::headinfer::RawCapacity;
use kvplan_report as report;

use super::serve_capacity::{CapacityTargetArgs, SloArgs, slo_capacity};

/// `--help`'s long text (`src/help/capacity.txt`).
pub const CAPACITY_LONG: &str = include_str!("../help/capacity.txt").trim_ascii_end();

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
        crate::messages::note_ignored(
            &[
                "--strategy",
                "--batch",
                "--chunk",
                "--heads-per-group",
                "--host-ram",
                "--runtime-reserve",
                "--dtype",
            ],
            "--slo",
            "the search serves the workload on vLLM's engine, which forms its own batches; \
             these options size the longest context, without --slo",
        );
        return slo_capacity(&args.target, &args.slo, args.output.format);
    }
    args.slo.refuse_without_slo()?;
    let input = RawCapacity {
        model: args.target.model.clone(),
        hardware: args.target.hardware.clone(),
        dtype: args.dtype.clone(),
        strategies: args.strategies.clone(),
        batch: args.batch,
        chunk: args.chunk,
        heads_per_group: args.heads_per_group,
        host_ram_gib: args.host_ram,
        runtime_reserve_gib: args.runtime_reserve,
    }
    .resolve()?;
    let (r, format) = (input.report()?, args.output.format);
    let text = report::planner::capacity(&r, input.options.config.batch, format)?;
    if r.strategies.iter().any(|s| s.max_context_tokens > 0) {
        return Ok(text);
    }
    // No strategy holds even one token: the answer is that nothing fits.
    Err(CliError::no_answer(
        text,
        format!(
            "no strategy fits even one token of {} on {}: the weights and the runtime reserve fill its GPU memory; give a GPU with more memory (--hardware), a smaller model, or a smaller --runtime-reserve",
            r.model, r.hardware
        ),
    ))
}
