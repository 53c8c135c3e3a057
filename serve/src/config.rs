//! Engine settings (vLLM's names and defaults) and the KV block budget they imply.

use kvplan_planner::memory::{AttentionImpl, PrefillPass, prefill_working_set};
use kvplan_planner::{HardwareProfile, ModelSpec};
use serde::{Deserialize, Serialize};

use crate::Error;

/// Which sequences an iteration runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SchedulerKind {
    /// vLLM's default: admit waiting prompts whole when they fit; prefill-only iterations take
    /// priority; otherwise decode every running sequence.
    PrefillFirst,
    /// Decode every running sequence and admit whole waiting prompts into the same iteration.
    Mixed,
    /// Sarathi-style chunked prefill: decodes first, then prefill chunks filling the token
    /// budget (`max_num_batched_tokens`).
    Chunked,
}

/// What happens to a preempted sequence's KV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preemption {
    /// Drop its blocks; on resume re-prefill prompt + generated tokens.
    Recompute,
    /// Copy its blocks to host memory; copy them back on resume. Falls back to recompute when
    /// the host swap space is full.
    Swap,
    /// Swap out the layer inputs `X` of its first `l` tokens (half their K,V bytes on MHA) and
    /// the K,V of the rest; on resume recompute K,V[0:l] from `X` while the rest is swapped in
    /// (KVPR's split balance applied to a resume, at block granularity; see
    /// [`crate::IterationTimer::hybrid_split`]). Where `X` costs no less than K,V on the link
    /// (GQA with equal copy counts) `l = 0` and this is swap.
    Hybrid,
}

/// Engine settings. Build with [`Config::default`] and overwrite fields; [`Config::validate`]
/// checks them against a model and a GPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Tokens per KV block (vLLM `--block-size`, default 16).
    pub block_size: u32,
    /// Fraction of the GPU's usable memory the engine may use (default 0.9).
    pub gpu_memory_utilization: f64,
    /// Fraction of GPU blocks kept free when admitting a prompt (default 0.01).
    pub watermark: f64,
    /// Host memory for swapped-out KV (and hybrid's stored activations), GiB (default 4).
    pub swap_space_gib: f64,
    /// Whether the swap space is pinned (default true; pageable copies use the slower curve).
    pub pinned: bool,
    /// Scheduler (default prefill-first).
    pub scheduler: SchedulerKind,
    /// Preemption mode (default recompute).
    pub preemption: Preemption,
    /// Most sequences in one iteration (default 256).
    pub max_num_seqs: u32,
    /// Most tokens in one iteration; `None`: 2048 for chunked, else `max(2048, max_position)`.
    pub max_num_batched_tokens: Option<u32>,
    /// Copies per KV block on swap; `None`: `2 * num_layers` (vLLM keeps one K and one V cache
    /// tensor per layer and issues one `cudaMemcpyAsync` per block per tensor).
    pub swap_copies_per_block: Option<u32>,
    /// Keep the per-iteration time series (default true).
    pub record_timeseries: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            block_size: 16,
            gpu_memory_utilization: 0.9,
            watermark: 0.01,
            swap_space_gib: 4.0,
            pinned: true,
            scheduler: SchedulerKind::PrefillFirst,
            preemption: Preemption::Recompute,
            max_num_seqs: 256,
            max_num_batched_tokens: None,
            swap_copies_per_block: None,
            record_timeseries: true,
        }
    }
}

/// Checked settings and the block budget derived from them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resolved {
    /// The settings as given.
    pub config: Config,
    /// `max_num_batched_tokens` after defaults.
    pub max_num_batched_tokens: u32,
    /// KV blocks on the GPU.
    pub gpu_blocks: u32,
    /// Blocks kept free on admission.
    pub watermark_blocks: u32,
    /// Host swap space, bytes.
    pub host_bytes: u64,
    /// Bytes of one KV block (all layers).
    pub block_bytes: u64,
    /// Copies per KV block when swapping.
    pub copies_per_block: u32,
    /// GPU memory items: weights, activation working set, KV blocks (bytes).
    pub weights_bytes: u64,
    /// Activation working set of a `max_num_batched_tokens` pass.
    pub activation_bytes: u64,
}

fn check(field: &'static str, ok: bool, value: String, expect: &'static str) -> Result<(), Error> {
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidConfig {
            field,
            value,
            expect,
        })
    }
}

impl Config {
    /// Checks every setting and derives the GPU block count from memory accounting:
    /// `(usable × utilization − weights − working set of a max_num_batched_tokens pass) /
    /// (block_size × KV bytes per token of all layers)`.
    pub fn validate(&self, model: &ModelSpec, hw: &HardwareProfile) -> Result<Resolved, Error> {
        check(
            "block_size",
            (1..=1024).contains(&self.block_size),
            self.block_size.to_string(),
            "1..=1024",
        )?;
        let u = self.gpu_memory_utilization;
        check(
            "gpu_memory_utilization",
            u > 0.0 && u <= 1.0,
            u.to_string(),
            "in (0, 1]",
        )?;
        let w = self.watermark;
        check(
            "watermark",
            (0.0..1.0).contains(&w),
            w.to_string(),
            "in [0, 1)",
        )?;
        let s = self.swap_space_gib;
        check(
            "swap_space_gib",
            s.is_finite() && s >= 0.0,
            s.to_string(),
            "a non-negative number",
        )?;
        check(
            "max_num_seqs",
            self.max_num_seqs >= 1,
            self.max_num_seqs.to_string(),
            "at least 1",
        )?;
        let default_tokens = match self.scheduler {
            SchedulerKind::Chunked => 2048,
            _ => 2048.max(model.max_position),
        };
        let tokens = self.max_num_batched_tokens.unwrap_or(default_tokens);
        check(
            "max_num_batched_tokens",
            tokens >= 1,
            tokens.to_string(),
            "at least 1",
        )?;
        let copies = self
            .swap_copies_per_block
            .unwrap_or(2 * model.num_layers)
            .max(1);
        let block_bytes = u64::from(self.block_size) * model.kv_bytes_per_token();
        let weights = model.weight_bytes();
        let act = prefill_working_set(
            model,
            &PrefillPass {
                batch: 1,
                q_tokens: u64::from(tokens),
                context: u64::from(tokens),
                attention: AttentionImpl::Fused,
                logits_rows: u64::from(self.max_num_seqs.min(tokens)),
            },
        )
        .peak;
        let budget = hw.gpu.usable_bytes() as f64 * u - weights as f64 - act as f64;
        let blocks = (budget / block_bytes as f64).floor();
        if blocks < 1.0 {
            return Err(Error::NoKvMemory {
                usable_bytes: (hw.gpu.usable_bytes() as f64 * u) as u64,
                weights_bytes: weights,
                activation_bytes: act,
            });
        }
        let gpu_blocks = blocks.min(f64::from(u32::MAX)) as u32;
        Ok(Resolved {
            config: self.clone(),
            max_num_batched_tokens: tokens,
            gpu_blocks,
            watermark_blocks: (w * f64::from(gpu_blocks)) as u32,
            host_bytes: (s * (1u64 << 30) as f64) as u64,
            block_bytes,
            copies_per_block: copies,
            weights_bytes: weights,
            activation_bytes: act,
        })
    }
}
