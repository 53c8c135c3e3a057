//! HeadInfer (METHODS.md section 2): head-wise KV offload for long contexts — the memory model of
//! five inference strategies, the capacity search on it, the head-group and chunk planner, and
//! the prefill/decode schedules.
//!
//! # Memory model
//!
//! [`memory`] returns two accountings of one strategy at one context length:
//!
//! - **The paper's accounting** (HeadInfer Tables 10 and 11): `weights + kv_gpu + activations =
//!   total_gpu`, with the paper's formulas — KV `2·L·Hkv·d·p` per token (128 KiB for
//!   Llama-3-8B), activations `S·h + 2·S·ffn` elements unchunked or `chunk·h + 2·chunk·ffn`
//!   chunked, layer offload keeping two layers of KV, HeadInfer two ping-pong buffers of one head
//!   group (`2·g·S·d·2·p`), 4-bit KV at a quarter of the bytes. This reproduces the published
//!   tables.
//! - **The peak that must fit** (`peak_gpu`), which [`capacity`] and the planner use: the stored
//!   KV (with the 4-bit cache's scales), the *working set* of the prefill forward pass as an
//!   eager PyTorch/Hugging Face runtime allocates it, and a runtime reserve. The paper's
//!   activation formula counts one hidden state and two FFN intermediates; the runtime holds
//!   more at its peak (see [`WorkingSet`]): in the gated MLP the residual, the normed input and
//!   the model's input embeddings (`3h`) live next to `act(gate)`, `up` and their product
//!   (`3·ffn`) — 108 KiB per token for Llama-3-8B instead of 64. Chunked prefill through
//!   Hugging Face attends with an explicit 4-D causal mask (`chunk × S` elements, built once per
//!   forward) over K,V expanded from the KV heads to the query heads (`repeat_kv`, one layer)
//!   after a `torch.cat` that holds the old and new cache of one layer at once. HeadInfer's own
//!   kernels (FlashAttention with native GQA and a causal offset) need none of the three.
//!
//! The runtime reserve ([`RUNTIME_RESERVE_BYTES`]) is the one fitted number: memory the PyTorch
//! process cannot give to tensors beyond the profile's `reserved` (CUDA context, cuBLAS) — the
//! caching allocator's reserved-but-unallocated blocks left by the S-sized activations freed and
//! re-allocated in every layer, and the display of a desktop card. It is not measured; it is set
//! so that the model's maximum contexts centre on the paper's Table 11 (see its docs).
//!
//! # Planner
//!
//! [`plan`] picks the prefill chunk (the paper's 10,240 tokens unless the roofline needs more:
//! [`roofline_chunk`] is the smallest chunk for which offloaded attention is compute-bound) and
//! the KV heads per offload group (the largest divisor of `Hkv` whose ping-pong buffers fit next
//! to everything else: large groups at short contexts, smaller as the context grows), then emits
//! the schedule ([`build_schedule`]): per chunk and layer, per head group, prefetch of the
//! group's KV of the earlier chunks (H2D, two buffers: the prefetch into a buffer waits for the
//! attention that last read it), attention of the chunk over its prefix for the group's heads,
//! and write-back of the chunk's new K,V (D2H); decode fetches each group's whole cache per
//! layer and writes back the new token.

mod memory;
mod optimiser;
mod schedule;

use serde::Serialize;

use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::hardware::HardwareProfile;
use crate::model::ModelSpec;
use crate::plan::{Options, Order, Plan, Shape, Strategy, WeightsPlacement};

pub use memory::{
    BindingLimit, CAPACITY_SEARCH_LIMIT, CapacityOptions, CapacityReport, DEFAULT_CHUNK_TOKENS,
    MemStrategy, MemoryBreakdown, MemoryConfig, RUNTIME_RESERVE_BYTES, StrategyCapacity,
    WorkingSet, capacity, capacity_report, divisors, memory,
};
use memory::{GIB, heads_error, plan_memory};
use optimiser::chunk_candidates;
pub use optimiser::{MAX_CHUNK_TOKENS, MIN_CHUNK_TOKENS, adaptive_heads_per_group, roofline_chunk};
pub use schedule::{Layout, MAX_OPS, build_schedule, estimated_ops};

/// HeadInfer options (all optional: the planner chooses).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HeadInferOptions {
    /// KV heads per offload group (fixed), or the adaptive policy when `None`.
    pub heads_per_group: Option<u32>,
    /// Prefill chunk tokens (fixed), or chosen from the roofline when `None`.
    pub chunk_tokens: Option<u32>,
}

/// The decisions of a HeadInfer plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeadInferDetails {
    /// KV heads per offload group.
    pub heads_per_group: u32,
    /// Prefill chunk tokens.
    pub chunk_tokens: u32,
    /// Offload groups per layer (`num_kv_heads / heads_per_group`).
    pub groups_per_layer: u32,
    /// Prefill chunks.
    pub prefill_chunks: u32,
    /// Whether the group size came from the adaptive policy.
    pub adaptive: bool,
    /// Smallest chunk for which offloaded attention is compute-bound on this profile.
    pub roofline_chunk_tokens: u32,
    /// GPU bytes of the two ping-pong buffers.
    pub kv_buffer_bytes: u64,
}

/// Plans HeadInfer for `shape` (`shape.prompt` is the context length).
pub fn plan(
    model: &ModelSpec,
    hw: &HardwareProfile,
    cost: &CostModel,
    shape: &Shape,
    options: &Options,
) -> Result<Plan> {
    shape.validate()?;
    if shape.gpu_batches != 1 {
        return Err(Error::invalid(
            "--gpu-batches",
            shape.gpu_batches,
            "headinfer runs one GPU batch (row by row); use --gpu-batches 1",
        ));
    }
    if options.weights == WeightsPlacement::Offload {
        return Err(Error::invalid(
            "--weights",
            "offload",
            "headinfer keeps the weights on the GPU and offloads the KV cache; use --weights auto or gpu",
        ));
    }
    let hi = &options.headinfer;
    if let Some(g) = hi.heads_per_group
        && (g == 0 || model.num_kv_heads % g != 0)
    {
        return Err(heads_error(model, g));
    }
    if hi.chunk_tokens == Some(0) {
        return Err(Error::invalid("--chunk", 0, "must be at least 1"));
    }
    let host = options.host_memory;
    let roofline = roofline_chunk(model, cost, host);
    let chunks: Vec<u32> = match hi.chunk_tokens {
        Some(c) => vec![c.min(shape.prompt)],
        None => chunk_candidates(roofline, shape.prompt),
    };
    let groups: Vec<u32> = match hi.heads_per_group {
        Some(g) => vec![g],
        None => divisors(model.num_kv_heads).into_iter().rev().collect(),
    };
    let budget = hw.gpu.usable_bytes();
    let what = format!(
        "headinfer plan for {} on {} (context {} tokens, batch {})",
        model.name, hw.name, shape.prompt, shape.batch
    );
    let mut notes = Vec::new();
    // The paper's order of preference: keep the chunk, shrink the groups; shrink the chunk only
    // when even the smallest group does not fit.
    let choice = chunks.iter().find_map(|&c| {
        groups
            .iter()
            .find(|&&g| plan_memory(model, shape, c, g).peak_gpu <= budget)
            .map(|&g| (c, g))
    });
    let Some((chunk, g)) = choice else {
        let (c, g) = (
            *chunks.last().expect("a chunk"),
            *groups.last().expect("a group"),
        );
        let mem = plan_memory(model, shape, c, g);
        let cap = capacity(
            model,
            hw,
            MemStrategy::HeadInfer,
            &CapacityOptions {
                host_ram_bytes: None,
                config: mem.config,
            },
        )
        .map(|c| {
            c.max_context_tokens
                .saturating_sub(u64::from(shape.gen_len))
        })
        .unwrap_or(0);
        let advice = if mem.weights.saturating_add(mem.runtime_reserve) >= budget {
            "the weights alone do not fit: HeadInfer keeps them on the GPU; use a GPU with more memory or a smaller model".to_string()
        } else if hi.heads_per_group.is_some_and(|x| x > 1) || hi.chunk_tokens.is_some() {
            format!(
                "use fewer heads per group (--heads-per-group 1) or a smaller --chunk, reduce --prompt (--context) to at most {cap} tokens, or use a GPU with more memory"
            )
        } else {
            format!(
                "the context does not fit even with {g} KV head per group and a {c}-token chunk: reduce --prompt (--context) to at most {cap} tokens (`kvplan capacity`), or use a GPU with more memory"
            )
        };
        mem.memory_plan().check(hw, &what, &advice, "")?;
        // check() must have failed: the GPU side did not fit.
        return Err(Error::invalid(
            "--prompt",
            shape.prompt,
            "does not fit GPU memory",
        ));
    };
    let mem = plan_memory(model, shape, chunk, g);
    mem.memory_plan().check(
        hw,
        &what,
        "reduce --prompt (--context)",
        "reduce --prompt (--context) or --batch, or raise host.ram_gib in a profile file (kvplan capacity --host-ram GB shows what fits)",
    )?;
    let adaptive = hi.heads_per_group.is_none();
    let groups_per_layer = model.num_kv_heads / g;
    if adaptive {
        let bigger = divisors(model.num_kv_heads).into_iter().find(|&x| x > g);
        notes.push(match bigger {
            Some(b) => format!(
                "adaptive head groups: {g} KV heads per group ({groups_per_layer} groups per layer); {b} per group would need {:.2} GiB of {:.2} GiB usable",
                plan_memory(model, shape, chunk, b).peak_gpu as f64 / GIB,
                budget as f64 / GIB
            ),
            None => format!(
                "adaptive head groups: all {g} KV heads of a layer in one group (fits at this context)"
            ),
        });
    }
    if hi.chunk_tokens.is_none() {
        notes.push(if chunk < roofline {
            format!(
                "prefill chunk {chunk} tokens: below the {roofline}-token minimum for compute-bound offloaded attention (memory); prefill will wait on PCIe"
            )
        } else {
            format!(
                "prefill chunk {chunk} tokens (offloaded attention is compute-bound from {roofline} tokens on {})",
                hw.name
            )
        });
    }
    if shape.max_len() > u64::from(model.max_position) {
        notes.push(format!(
            "prompt + gen = {} exceeds {}'s max_position_embeddings ({}); simulated anyway",
            shape.max_len(),
            model.name,
            model.max_position
        ));
    }
    let layout = Layout {
        chunk_tokens: chunk,
        heads_per_group: Some(g),
    };
    let schedule = build_schedule(model, shape, &layout, host)?;
    Ok(Plan {
        strategy: Strategy::HeadInfer,
        model: model.name.clone(),
        hardware: hw.name.clone(),
        shape: *shape,
        order: Order::RowByRow,
        weights_on_gpu: true,
        host_memory: host,
        memory: mem.memory_plan(),
        splits: vec![],
        headinfer: Some(HeadInferDetails {
            heads_per_group: g,
            chunk_tokens: chunk,
            groups_per_layer,
            prefill_chunks: shape.prompt.div_ceil(chunk),
            adaptive,
            roofline_chunk_tokens: roofline,
            kv_buffer_bytes: mem.kv_gpu,
        }),
        runahead: None,
        notes,
        schedule,
    })
}
