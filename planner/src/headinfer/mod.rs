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
//! [`plan`] chooses the KV heads per offload group and the prefill chunk, then emits the
//! schedule ([`build_schedule`]): per chunk and layer, per head group, prefetch of the group's
//! KV of the earlier chunks (H2D, two buffers: the prefetch into a buffer waits for the
//! attention that last read it), attention of the chunk over its prefix for the group's heads,
//! and write-back of the chunk's new K,V (D2H); decode fetches each group's whole cache per
//! layer and writes back the new token.
//!
//! ## Decision rule
//!
//! **The fastest candidate on the simulated schedule; ties to the smaller peak memory.**
//!
//! - Candidates: every group size that divides `Hkv` ([`group_grid`]; the schedule's groups are
//!   equal) × the chunks of [`chunk_grid`] — the powers of two from 128 to 65,536, the paper's
//!   10,240, the roofline chunk ([`roofline_chunk`]: the smallest chunk for which offloaded
//!   attention is compute-bound) and the context itself, capped at the context. A fixed
//!   `headinfer.heads_per_group` or `headinfer.chunk` pins its axis.
//! - Feasible: the plan's peak GPU memory ([`memory()`] for `prompt + gen` tokens) fits the
//!   usable memory, and the schedule has at most [`MAX_OPS`] ops.
//! - Time: the makespan of the candidate's whole prefill and decode schedule on the discrete-event
//!   engine ([`kvplan_sim::engine::makespan`], what `kvplan simulate` runs), as [`predicted_seconds`]
//!   computes it; the fastest wins, and times within [`TIE`] (relative) go to the smaller peak
//!   GPU memory ([`choose`]).
//!
//! The search is fast (about 0.4 s for Llama-3-8B at 1M tokens in release) without skipping
//! a candidate that could win: a lower bound ([`busy_seconds`]) rules candidates out without
//! building their schedules, and the others are timed on their full schedules (see the
//! optimiser's docs: `planner/src/headinfer/optimiser.rs`). Tests hold the choice within 1% of
//! a brute force over full schedules (in practice equal to it).
//!
//! What comes out resembles the paper's adaptive policy — large groups at short contexts,
//! smaller as the context grows and the ping-pong buffers compete with the chunk's working set —
//! but it trades group against chunk by time: at 1M tokens on the RTX 4090 two heads per group
//! with 32K-token chunks (less prefetch traffic) beat the paper's four heads with 10K chunks.
//! [`adaptive_heads_per_group`] keeps the paper's policy (the largest group that fits) for
//! comparison.
//!
//! Layout: `memory` (the memory model and capacity), `input` (a capacity question as a front
//! end writes it, checked: [`RawCapacity`]), `schedule` (the schedule builder and its busy-time
//! bound), `optimiser` (the choice), this module (options, details, [`plan`]); each imports only
//! the ones before it.

mod input;
mod memory;
mod optimiser;
mod schedule;

use crate::strategy::{Defaults, Input, Planner};
use crate::types::{Decisions, Options, Order, Plan, PlanNote, Shape, Strategy};
use kvplan_vocab::cost::CostModel;
use kvplan_vocab::error::{Error, Result};
use kvplan_vocab::hardware::HardwareProfile;
use kvplan_vocab::model::ModelSpec;

pub use input::{CapacityInput, CapacityInputError, RawCapacity};
pub use kvplan_vocab::memory::WorkingSet;
pub use memory::{
    BindingLimit, CAPACITY_SEARCH_LIMIT, CapacityOptions, CapacityReport, DEFAULT_CHUNK_TOKENS,
    MemStrategy, MemoryBreakdown, MemoryConfig, RUNTIME_RESERVE_BYTES, StrategyCapacity, capacity,
    capacity_report, divisors, memory,
};
use memory::{heads_error, plan_memory};
pub mod details;
pub use details::{HeadInferDetails, HeadInferNote, HeadInferOptions, LargerGroup};
pub use optimiser::{
    Candidate, Choice, MAX_CHUNK_TOKENS, MIN_CHUNK_TOKENS, TIE, adaptive_heads_per_group, choose,
    chunk_grid, group_grid, predicted_seconds, roofline_chunk,
};
pub use schedule::{Busy, Layout, MAX_OPS, build_schedule, busy_seconds, estimated_ops};

/// HeadInfer's planner (`headinfer`): one long-context sequence unless told otherwise.
#[derive(Debug, Clone, Copy)]
pub struct HeadInferPlanner;

impl Planner for HeadInferPlanner {
    fn name(&self) -> &'static str {
        "headinfer"
    }

    fn defaults(&self) -> Defaults {
        Defaults {
            batch: 1,
            ..Defaults::LATENCY
        }
    }

    fn reads(&self) -> &'static [&'static str] {
        &["headinfer.heads_per_group", "headinfer.chunk"]
    }

    fn plan(&self, i: &Input<'_>) -> Result<Plan> {
        plan(i.model, i.hw, i.cost, i.shape, i.options)
    }
}

/// Plans HeadInfer for `shape` (`shape.prompt` is the context length).
pub fn plan(
    model: &ModelSpec,
    hw: &HardwareProfile,
    cost: &CostModel,
    shape: &Shape,
    options: &Options,
) -> Result<Plan> {
    shape.check_one_batch_resident_weights(
        options,
        "headinfer runs one GPU batch (row by row)",
        "headinfer keeps the weights on the GPU and offloads the KV cache",
    )?;
    let hi = &options.get::<HeadInferOptions>();
    if let Some(g) = hi.heads_per_group
        && (g == 0 || !model.num_kv_heads.is_multiple_of(g))
    {
        return Err(heads_error(model, g));
    }
    if hi.chunk_tokens == Some(0) {
        return Err(Error::invalid("headinfer.chunk", 0, "must be at least 1"));
    }
    let host = options.host_memory;
    let roofline = roofline_chunk(model, cost, host);
    let chunks: Vec<u32> = match hi.chunk_tokens {
        Some(c) => vec![c.min(shape.prompt)],
        None => chunk_grid(roofline, shape.prompt),
    };
    let groups = group_grid(model, hi.heads_per_group);
    let budget = hw.gpu.usable_bytes();
    let what = format!(
        "headinfer plan for {} on {} (context {} tokens, batch {})",
        model.name, hw.name, shape.prompt, shape.batch
    );
    // The least memory on the grid: the smallest group with the smallest chunk.
    let (c0, g0) = (chunks[0], groups[0]);
    let least = plan_memory(model, shape, c0, g0);
    if least.peak_gpu > budget {
        return Err(does_not_fit(model, hw, shape, hi, (g0, c0), &what));
    }
    // The host holds the whole cache whatever the group and chunk: check it before timing.
    least.memory_plan().check(
        hw,
        &what,
        "reduce `workload.prompt`",
        "reduce `workload.prompt` or `workload.batch`, or raise host.ram_gib in a profile file",
    )?;
    let Some(choice) = choose(model, hw, cost, shape, host, &groups, &chunks)? else {
        return Err(over_the_op_limit(
            model, shape, &groups, &chunks, budget, host,
        ));
    };
    let best = choice.best;
    let (g, chunk) = (best.heads_per_group, best.chunk_tokens);
    let mem = plan_memory(model, shape, chunk, g);
    let adaptive = hi.heads_per_group.is_none();
    let groups_per_layer = model.num_kv_heads / g;
    let fit = choice.candidates.len();
    let timed = choice.timed();
    let seconds = best.seconds.unwrap_or(f64::NAN);
    let mut notes = choice_notes(model, hw, shape, hi, (g, chunk), roofline, &choice);
    notes.extend(shape.max_position_note(model));
    let layout = Layout {
        chunk_tokens: chunk,
        heads_per_group: Some(g),
    };
    let schedule = build_schedule(model, shape, &layout, host)?;
    Ok(Plan {
        strategy: Strategy::HEADINFER,
        model: model.name.clone(),
        hardware: hw.name.clone(),
        shape: *shape,
        order: Order::RowByRow,
        weights_on_gpu: true,
        host_memory: host,
        memory: mem.memory_plan(),
        decisions: Decisions::new(HeadInferDetails {
            heads_per_group: g,
            chunk_tokens: chunk,
            groups_per_layer,
            prefill_chunks: shape.prompt.div_ceil(chunk),
            adaptive,
            roofline_chunk_tokens: roofline,
            kv_buffer_bytes: mem.kv_gpu,
            predicted_seconds: seconds,
            candidates_fit: fit as u32,
            candidates_timed: timed as u32,
        }),
        notes,
        schedule,
    })
}

/// The error when even the least memory on the candidate grid (group `g0`, chunk `c0`) is
/// over the GPU's: what does not fit, and how far the context would have to shrink.
fn does_not_fit(
    model: &ModelSpec,
    hw: &HardwareProfile,
    shape: &Shape,
    hi: &HeadInferOptions,
    (g0, c0): (u32, u32),
    what: &str,
) -> Error {
    let least = plan_memory(model, shape, c0, g0);
    let budget = hw.gpu.usable_bytes();
    let cap = capacity(
        model,
        hw,
        MemStrategy::HeadInfer,
        &CapacityOptions {
            host_ram_bytes: None,
            config: least.config,
        },
    )
    .map(|c| {
        c.max_context_tokens
            .saturating_sub(u64::from(shape.gen_len))
    })
    .unwrap_or(0);
    let advice = if least.weights.saturating_add(least.runtime_reserve) >= budget {
        "the weights alone do not fit: HeadInfer keeps them on the GPU; use a GPU with more memory or a smaller model".to_string()
    } else if hi.heads_per_group.is_some_and(|x| x > 1) || hi.chunk_tokens.is_some() {
        format!(
            "use fewer heads per group (`headinfer.heads_per_group` 1) or a smaller `headinfer.chunk`, reduce `workload.prompt` to at most {cap} tokens, or use a GPU with more memory"
        )
    } else {
        format!(
            "the context does not fit even with {g0} KV head per group and a {c0}-token chunk: reduce `workload.prompt` to at most {cap} tokens (the capacity of this model and GPU), or use a GPU with more memory"
        )
    };
    match least.memory_plan().check(hw, what, &advice, "") {
        Err(e) => e,
        // check() must fail: the GPU side did not fit.
        Ok(()) => Error::invalid("workload.prompt", shape.prompt, "does not fit GPU memory"),
    }
}

/// The error when something fits memory but every schedule that fits is over the op limit:
/// that of the one with the fewest ops (its builder's error names the fix).
fn over_the_op_limit(
    model: &ModelSpec,
    shape: &Shape,
    groups: &[u32],
    chunks: &[u32],
    budget: u64,
    host: kvplan_vocab::schedule::HostMemory,
) -> Error {
    let fewest = (groups.iter())
        .flat_map(|&g| {
            chunks.iter().map(move |&c| Layout {
                chunk_tokens: c,
                heads_per_group: Some(g),
            })
        })
        .filter(|l| {
            let (c, g) = (l.chunk_tokens, l.heads_per_group.unwrap_or(1));
            plan_memory(model, shape, c, g).peak_gpu <= budget
        })
        .min_by_key(|l| estimated_ops(model, shape, l))
        .expect("the least-memory candidate fits");
    match build_schedule(model, shape, &fewest, host) {
        Err(e) => e,
        Ok(_) => Error::invalid("workload.prompt", shape.prompt, "no schedule fits"),
    }
}

/// The notes on the choice of group `g` and chunk `chunk`: why that group (when the planner
/// chose it), what was timed, and where the chunk stands against the `roofline` chunk.
fn choice_notes(
    model: &ModelSpec,
    hw: &HardwareProfile,
    shape: &Shape,
    hi: &HeadInferOptions,
    (g, chunk): (u32, u32),
    roofline: u32,
    choice: &Choice,
) -> Vec<PlanNote> {
    let mut notes = Vec::new();
    if hi.heads_per_group.is_none() {
        let bigger = divisors(model.num_kv_heads).into_iter().find(|&x| x > g);
        let larger = match bigger {
            Some(heads) => {
                let need_bytes = plan_memory(model, shape, chunk, heads).peak_gpu;
                let usable_bytes = hw.gpu.usable_bytes();
                if need_bytes > usable_bytes {
                    LargerGroup::DoesNotFit {
                        heads,
                        need_bytes,
                        usable_bytes,
                    }
                } else {
                    LargerGroup::NotFaster { heads }
                }
            }
            None => LargerGroup::AllHeads,
        };
        notes.push(PlanNote::new(HeadInferNote::AdaptiveGroups {
            heads_per_group: g,
            groups_per_layer: model.num_kv_heads / g,
            larger,
        }));
    }
    notes.push(PlanNote::new(HeadInferNote::Chosen {
        heads_per_group: g,
        chunk_tokens: chunk,
        seconds: choice.best.seconds.unwrap_or(f64::NAN),
        fit: choice.candidates.len(),
        timed: choice.timed(),
    }));
    if hi.chunk_tokens.is_none() {
        notes.push(PlanNote::new(HeadInferNote::Chunk {
            chunk_tokens: chunk,
            roofline_tokens: roofline,
            hardware: hw.name.clone(),
        }));
    }
    notes
}
