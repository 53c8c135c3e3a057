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

use serde::Serialize;

use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::hardware::HardwareProfile;
use crate::memory::MemoryPlan;
use crate::model::ModelSpec;
use crate::plan::{Options, Order, Plan, Shape, Strategy, WeightsPlacement, layer_kernels};
use crate::schedule::{
    HostMemory, LabelId, OpId, OpKind, Payload, Phase, Schedule, ScheduleBuilder, StreamKind, Tag,
};

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// The paper's prefill chunk: 10K tokens, with K = 1024 (the activation cell of Table 10,
/// 0.625 GB for Llama-3-8B, is `10240 · (h + 2·ffn) · 2` bytes).
pub const DEFAULT_CHUNK_TOKENS: u32 = 10_240;
/// Smallest chunk the planner chooses by itself (only when nothing larger fits, e.g. a large
/// batch: the working set grows with `batch x chunk` rows).
pub const MIN_CHUNK_TOKENS: u32 = 128;
/// Largest chunk the planner chooses by itself.
pub const MAX_CHUNK_TOKENS: u32 = 65_536;
/// Most ops a HeadInfer schedule may have (about 2.5 GiB of schedule and timeline).
pub const MAX_OPS: u64 = 20_000_000;

/// GPU memory an eager PyTorch/Hugging Face process cannot give to tensors, beyond the
/// profile's `reserved` (CUDA context, cuBLAS workspace): 2.65 GiB.
///
/// What it stands for: the caching allocator's reserved-but-unallocated blocks (long-context
/// prefill frees and re-allocates multi-GiB, S-sized activations in every layer, and the KV
/// tensors allocated between them pin the holes), framework buffers, and the display a desktop
/// card drives. None of that is measured here. The value is fitted: it is the one that centres
/// the capacity model on the HeadInfer paper's Table 11 (Llama-3-8B, RTX 4090): with it the
/// standard, chunked, 4-bit and layer-offload maxima land at -2.1%, +5.8%, -10.8% and +10.7% of
/// the paper's 25K, 30K, 45K and 45K tokens (K = 1024). The 4-bit and layer-offload errors
/// cannot both shrink: the paper reports the same 45K for both although their per-token costs
/// differ by 28 KiB (36 vs 8 KiB of KV next to the same 108 KiB working set), so a shared budget
/// puts them about 10% either side. Without the reserve every maximum is 30-70% above the
/// paper's. The paper's own totals at those maxima
/// (18.3-19.8 GB of a 24 GB card) already say the runs could not use about 4 GB; this
/// reserve plus the working-set terms the paper leaves out account for it.
pub const RUNTIME_RESERVE_BYTES: u64 = 2_845_415_834; // 2.65 GiB

/// Quantisation group of the 4-bit KV cache (Hugging Face `QuantizedCacheConfig.q_group_size`).
const KV_QUANT_GROUP: u64 = 64;

// ---- memory model ----------------------------------------------------------------------------

/// An inference strategy of the paper's memory comparison (Tables 10 and 11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum MemStrategy {
    /// Everything on the GPU, the prompt in one forward pass.
    #[serde(rename = "standard")]
    Standard,
    /// Everything on the GPU, the prompt in chunks.
    #[serde(rename = "chunked-prefill")]
    ChunkedPrefill,
    /// KV cache quantised to 4 bits on the GPU, the prompt in one pass.
    #[serde(rename = "kv-quant-4bit")]
    KvQuant4bit,
    /// KV cache on the host; two layers of it on the GPU; the prompt in one pass.
    #[serde(rename = "layer-offload")]
    LayerOffload,
    /// KV cache on the host; two buffers of one head group on the GPU; chunked prefill.
    #[serde(rename = "headinfer")]
    HeadInfer,
}

impl MemStrategy {
    /// All five, in the paper's order.
    pub const ALL: [MemStrategy; 5] = [
        MemStrategy::Standard,
        MemStrategy::ChunkedPrefill,
        MemStrategy::KvQuant4bit,
        MemStrategy::LayerOffload,
        MemStrategy::HeadInfer,
    ];

    /// The command-line name.
    pub fn as_str(self) -> &'static str {
        match self {
            MemStrategy::Standard => "standard",
            MemStrategy::ChunkedPrefill => "chunked-prefill",
            MemStrategy::KvQuant4bit => "kv-quant-4bit",
            MemStrategy::LayerOffload => "layer-offload",
            MemStrategy::HeadInfer => "headinfer",
        }
    }

    /// Parses a command-line name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.as_str() == s)
    }

    /// Whether the KV cache lives on the host.
    pub fn offloads_kv(self) -> bool {
        matches!(self, MemStrategy::LayerOffload | MemStrategy::HeadInfer)
    }

    /// Whether the prefill runs in chunks.
    pub fn chunked(self) -> bool {
        matches!(self, MemStrategy::ChunkedPrefill | MemStrategy::HeadInfer)
    }
}

/// The knobs of the memory model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MemoryConfig {
    /// Sequences.
    pub batch: u32,
    /// Prefill chunk tokens (chunked strategies).
    pub chunk_tokens: u32,
    /// KV heads per offload group (HeadInfer).
    pub heads_per_group: u32,
    /// Runtime reserve added to the peak (see [`RUNTIME_RESERVE_BYTES`]).
    pub runtime_reserve: u64,
}

impl Default for MemoryConfig {
    /// The paper's setting: one sequence, 10K-token chunks, one KV head per group, the runtime
    /// reserve.
    fn default() -> Self {
        MemoryConfig {
            batch: 1,
            chunk_tokens: DEFAULT_CHUNK_TOKENS,
            heads_per_group: 1,
            runtime_reserve: RUNTIME_RESERVE_BYTES,
        }
    }
}

/// The prefill forward pass's transient memory at its peak, beyond the stored KV (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WorkingSet {
    /// Per-row tensors of the attention block: residual, normed input, input embeddings
    /// (`3h`), Q and the attention output (`2·q_dim`), this layer's new K,V (`2·kv_dim`).
    pub attention_rows: u64,
    /// Per-row tensors of the MLP: `3h` as above plus `act(gate)`, `up` and their product
    /// (`3·ffn`; `2·ffn` for an ungated FFN).
    pub mlp_rows: u64,
    /// Hugging Face's 4-D additive causal mask of a chunk over its prefix (`chunk × S`,
    /// materialised when a chunk attends over earlier chunks; lives for the whole forward).
    pub causal_mask: u64,
    /// K,V of one layer expanded from KV heads to query heads for SDPA (`repeat_kv`, GQA only),
    /// plus the old copy of the layer's cache while `torch.cat` appends the chunk (chunked only).
    pub attention_prefix: u64,
    /// The peak: `causal_mask + max(attention_rows + attention_prefix, mlp_rows)`.
    pub peak: u64,
}

/// GPU and host memory of one strategy at one context length (bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MemoryBreakdown {
    /// Strategy.
    pub strategy: MemStrategy,
    /// Tokens per sequence.
    pub context_tokens: u64,
    /// The settings used.
    pub config: MemoryConfig,
    /// Weights (all resident on the GPU).
    pub weights: u64,
    /// KV on the GPU by the paper's formula: all of it (standard, chunked), a quarter
    /// (4-bit), two layers (layer offload), two head-group buffers (HeadInfer).
    pub kv_gpu: u64,
    /// Activations by the paper's formula: `(h + 2·ffn)·p` per row, over the context or a chunk.
    pub activations: u64,
    /// `weights + kv_gpu + activations`: the paper's GPU total (Tables 10 and 11).
    pub total_gpu: u64,
    /// The 4-bit cache's scales and zero points (one pair per 64 values, in the model dtype).
    pub kv_quant_scales: u64,
    /// The prefill's working set as the runtime allocates it (replaces `activations` in the
    /// peak).
    pub working_set: WorkingSet,
    /// The runtime reserve counted in the peak.
    pub runtime_reserve: u64,
    /// What must fit the GPU: `weights + kv_gpu + kv_quant_scales + working_set.peak +
    /// runtime_reserve`.
    pub peak_gpu: u64,
    /// KV on the host (offloading strategies: all of it).
    pub kv_host: u64,
    /// KV counted over GPU and host as the paper does (offloaded: the host copy; 4-bit: the
    /// quantised cache).
    pub total_kv: u64,
}

impl MemoryBreakdown {
    /// The GPU side as named allocations (what a plan's [`MemoryPlan`] holds).
    pub fn memory_plan(&self) -> MemoryPlan {
        let mut m = MemoryPlan::default();
        m.gpu("weights", self.weights);
        let kv_name = match self.strategy {
            MemStrategy::Standard | MemStrategy::ChunkedPrefill => "kv cache",
            MemStrategy::KvQuant4bit => "kv cache (4-bit)",
            MemStrategy::LayerOffload => "kv buffers (2 layers)",
            MemStrategy::HeadInfer => "kv ping-pong buffers (2 head groups)",
        };
        m.gpu(kv_name, self.kv_gpu);
        m.gpu("kv quantisation scales", self.kv_quant_scales);
        m.gpu("prefill working set", self.working_set.peak);
        m.gpu("runtime reserve", self.runtime_reserve);
        m.host("kv cache", self.kv_host);
        m
    }
}

fn mul(a: u64, b: u64) -> u64 {
    a.saturating_mul(b)
}

/// The memory of `strategy` for `context` tokens per sequence of `model` (see the module docs).
/// Pure arithmetic, no allocation: the capacity search calls it ~40 times.
pub fn memory(
    model: &ModelSpec,
    strategy: MemStrategy,
    context: u64,
    cfg: &MemoryConfig,
) -> MemoryBreakdown {
    let p = model.dtype_bytes();
    let b = u64::from(cfg.batch);
    let s = context;
    let tokens = mul(b, s);
    let h = u64::from(model.hidden);
    let q = model.q_dim();
    let kvd = model.kv_dim();
    let ffn = u64::from(model.ffn_dim);
    let kv_layer = model.kv_bytes_per_token_layer();
    let full_kv = mul(tokens, model.kv_bytes_per_token());
    let chunk = u64::from(cfg.chunk_tokens.max(1)).min(s);
    let rows = if strategy.chunked() {
        mul(b, chunk)
    } else {
        tokens
    };
    let paper_act = mul(rows, (h + 2 * ffn) * p);
    let g = u64::from(cfg.heads_per_group.clamp(1, model.num_kv_heads));
    let (kv_gpu, kv_quant_scales) = match strategy {
        MemStrategy::Standard | MemStrategy::ChunkedPrefill => (full_kv, 0),
        MemStrategy::KvQuant4bit => {
            // 4 bits per value; a scale and a zero point per group of 64 values.
            let values = mul(tokens, 2 * kvd * u64::from(model.num_layers));
            (values / 2, mul(values / KV_QUANT_GROUP, 2 * p))
        }
        MemStrategy::LayerOffload => (
            mul(tokens, kv_layer * u64::from(model.num_layers.min(2))),
            0,
        ),
        MemStrategy::HeadInfer => (mul(tokens, 2 * g * 2 * u64::from(model.head_dim) * p), 0),
    };
    // The working set of the runtime's prefill forward pass.
    let ffn_live = if model.gated_ffn { 3 } else { 2 };
    let attn_row = (3 * h + 2 * q + 2 * kvd) * p;
    let mlp_row = (3 * h + ffn_live * ffn) * p;
    let gqa_expand = if q > kvd { 2 * q * p } else { 0 };
    let (causal_mask, attention_prefix) = match strategy {
        // One pass with `is_causal` (no mask); SDPA gets K,V expanded to the query heads.
        MemStrategy::Standard | MemStrategy::KvQuant4bit | MemStrategy::LayerOffload => {
            (0, mul(tokens, gqa_expand))
        }
        MemStrategy::ChunkedPrefill => {
            if s > chunk {
                (
                    mul(mul(b, chunk), mul(s, p)),
                    mul(tokens, gqa_expand).saturating_add(mul(mul(b, s - chunk), kv_layer)),
                )
            } else {
                (0, mul(tokens, gqa_expand))
            }
        }
        // FlashAttention: native GQA, causal offset for the chunk; K,V in the group buffers.
        MemStrategy::HeadInfer => (0, 0),
    };
    let attention_rows = mul(rows, attn_row);
    let mlp_rows = mul(rows, mlp_row);
    let peak = causal_mask.saturating_add(
        attention_rows
            .saturating_add(attention_prefix)
            .max(mlp_rows),
    );
    let working_set = WorkingSet {
        attention_rows,
        mlp_rows,
        causal_mask,
        attention_prefix,
        peak,
    };
    let weights = model.weight_bytes();
    let kv_host = if strategy.offloads_kv() { full_kv } else { 0 };
    let total_kv = match strategy {
        MemStrategy::KvQuant4bit => kv_gpu,
        _ => full_kv,
    };
    MemoryBreakdown {
        strategy,
        context_tokens: s,
        config: *cfg,
        weights,
        kv_gpu,
        activations: paper_act,
        total_gpu: weights.saturating_add(kv_gpu).saturating_add(paper_act),
        kv_quant_scales,
        working_set,
        runtime_reserve: cfg.runtime_reserve,
        peak_gpu: weights
            .saturating_add(kv_gpu)
            .saturating_add(kv_quant_scales)
            .saturating_add(peak)
            .saturating_add(cfg.runtime_reserve),
        kv_host,
        total_kv,
    }
}

// ---- capacity --------------------------------------------------------------------------------

/// What stops a longer context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum BindingLimit {
    /// The GPU's usable memory.
    #[serde(rename = "gpu memory")]
    GpuMemory,
    /// Host RAM (the offloaded KV cache).
    #[serde(rename = "host memory")]
    HostMemory,
    /// Nothing below the search's ceiling ([`CAPACITY_SEARCH_LIMIT`] tokens).
    #[serde(rename = "search limit")]
    SearchLimit,
}

impl BindingLimit {
    /// `gpu memory`, `host memory` or `search limit`.
    pub fn as_str(self) -> &'static str {
        match self {
            BindingLimit::GpuMemory => "gpu memory",
            BindingLimit::HostMemory => "host memory",
            BindingLimit::SearchLimit => "search limit",
        }
    }
}

/// The capacity search looks no further than 2^40 tokens.
pub const CAPACITY_SEARCH_LIMIT: u64 = 1 << 40;

/// Options of the capacity search.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CapacityOptions {
    /// Host RAM for the offloaded KV cache (`--host-ram`), bytes; `None`: the profile's.
    pub host_ram_bytes: Option<u64>,
    /// Memory-model settings (batch, chunk, heads per group, reserve). HeadInfer's capacity uses
    /// `heads_per_group` as given (1, the default, reaches furthest).
    pub config: MemoryConfig,
}

/// The longest context of one strategy.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StrategyCapacity {
    /// Strategy.
    pub strategy: MemStrategy,
    /// Longest context (tokens per sequence) that fits GPU and host; 0 when nothing fits.
    pub max_context_tokens: u64,
    /// What a longer context runs out of.
    pub binding_limit: BindingLimit,
    /// Peak GPU bytes at that context.
    pub gpu_bytes: u64,
    /// Host bytes at that context.
    pub host_bytes: u64,
    /// The memory breakdown at that context.
    #[serde(skip)]
    pub breakdown: MemoryBreakdown,
    /// Usable GPU bytes searched against (`memory - reserved`).
    #[serde(skip)]
    pub gpu_budget: u64,
    /// Host bytes searched against.
    #[serde(skip)]
    pub host_budget: u64,
    /// Whether the answer exceeds the model's `max_position_embeddings` (not capped: a
    /// RoPE-scaled variant of the model runs longer; this is about memory).
    #[serde(skip)]
    pub exceeds_max_position: bool,
}

/// Capacity of several strategies (`kvplan capacity --format json`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityReport {
    /// Model name.
    pub model: String,
    /// Hardware profile name.
    pub hardware: String,
    /// One entry per strategy.
    pub strategies: Vec<StrategyCapacity>,
    /// Things to know (printed by the table renderer; not part of the JSON contract).
    #[serde(skip)]
    pub notes: Vec<String>,
}

/// Longest context of `strategy` whose peak fits the usable GPU memory and whose host KV fits
/// host RAM: a binary search on [`memory`] (monotone in the context).
pub fn capacity(
    model: &ModelSpec,
    hw: &HardwareProfile,
    strategy: MemStrategy,
    options: &CapacityOptions,
) -> Result<StrategyCapacity> {
    let cfg = &options.config;
    if cfg.batch == 0 {
        return Err(Error::invalid("--batch", 0, "must be at least 1"));
    }
    if cfg.chunk_tokens == 0 {
        return Err(Error::invalid("--chunk", 0, "must be at least 1"));
    }
    if cfg.heads_per_group == 0 || model.num_kv_heads % cfg.heads_per_group != 0 {
        return Err(heads_error(model, cfg.heads_per_group));
    }
    let gpu_budget = hw.gpu.usable_bytes();
    let host_budget = options.host_ram_bytes.unwrap_or(hw.host.ram_bytes);
    let gpu_ok = |s: u64| memory(model, strategy, s, cfg).peak_gpu <= gpu_budget;
    let host_ok = |s: u64| memory(model, strategy, s, cfg).kv_host <= host_budget;
    let fits = |s: u64| gpu_ok(s) && host_ok(s);
    let (max, binding) = if fits(CAPACITY_SEARCH_LIMIT) {
        (CAPACITY_SEARCH_LIMIT, BindingLimit::SearchLimit)
    } else {
        // Invariant: fits(lo) or lo == 0; !fits(hi).
        let (mut lo, mut hi) = (0u64, CAPACITY_SEARCH_LIMIT);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let limit = if !gpu_ok(hi) {
            BindingLimit::GpuMemory
        } else {
            BindingLimit::HostMemory
        };
        let lo = if fits(lo) { lo } else { 0 };
        (lo, limit)
    };
    let breakdown = memory(model, strategy, max, cfg);
    Ok(StrategyCapacity {
        strategy,
        max_context_tokens: max,
        binding_limit: binding,
        gpu_bytes: breakdown.peak_gpu,
        host_bytes: breakdown.kv_host,
        breakdown,
        gpu_budget,
        host_budget,
        exceeds_max_position: max > u64::from(model.max_position),
    })
}

/// [`capacity`] of each strategy in `strategies` (all five when empty), with notes.
pub fn capacity_report(
    model: &ModelSpec,
    hw: &HardwareProfile,
    strategies: &[MemStrategy],
    options: &CapacityOptions,
) -> Result<CapacityReport> {
    let list: Vec<MemStrategy> = if strategies.is_empty() {
        MemStrategy::ALL.to_vec()
    } else {
        strategies.to_vec()
    };
    let mut out = Vec::with_capacity(list.len());
    let mut notes = Vec::new();
    let mut beyond_position: Vec<&'static str> = Vec::new();
    for s in list {
        let c = capacity(model, hw, s, options)?;
        if c.max_context_tokens == 0 {
            notes.push(format!(
                "{}: not even one token fits: the weights ({:.2} GiB) and the runtime reserve ({:.2} GiB) leave no room in {:.2} GiB",
                s.as_str(),
                model.weight_bytes() as f64 / GIB,
                options.config.runtime_reserve as f64 / GIB,
                c.gpu_budget as f64 / GIB
            ));
        } else if c.exceeds_max_position {
            beyond_position.push(s.as_str());
        }
        out.push(c);
    }
    if !beyond_position.is_empty() {
        notes.push(format!(
            "{}: the answer exceeds {}'s max_position_embeddings ({}); memory allows it, the position encoding needs a long-context (RoPE-scaled) variant",
            beyond_position.join(", "),
            model.name,
            model.max_position
        ));
    }
    notes.push(format!(
        "peak GPU memory includes the prefill working set and a {:.2} GiB runtime reserve; usable GPU memory {:.2} GiB, host RAM for the KV cache {:.2} GiB",
        options.config.runtime_reserve as f64 / GIB,
        hw.gpu.usable_bytes() as f64 / GIB,
        options.host_ram_bytes.unwrap_or(hw.host.ram_bytes) as f64 / GIB
    ));
    Ok(CapacityReport {
        model: model.name.clone(),
        hardware: hw.name.clone(),
        strategies: out,
        notes,
    })
}

fn heads_error(model: &ModelSpec, g: u32) -> Error {
    let divisors: Vec<String> = divisors(model.num_kv_heads)
        .iter()
        .map(u32::to_string)
        .collect();
    Error::invalid(
        "--heads-per-group",
        g,
        format!(
            "must divide {}'s {} KV heads: one of {}",
            model.name,
            model.num_kv_heads,
            divisors.join(", ")
        ),
    )
}

/// Divisors of `n`, ascending.
pub fn divisors(n: u32) -> Vec<u32> {
    (1..=n).filter(|d| n % d == 0).collect()
}

// ---- planner ---------------------------------------------------------------------------------

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

/// Smallest prefill chunk for which offloaded attention is compute-bound on `cost`: attention
/// of a `c`-token chunk over a `P`-token prefix costs `4·(Hq/Hkv)·d·c·P` FLOPs per KV head
/// (plus the chunk's own triangle), its prefetch `2·d·p·P` bytes per KV head, so compute covers
/// the copy when `c >= p·t_byte / (2·(Hq/Hkv)·t_flop)` — independent of `P` and of the group
/// size. 1,425 tokens for Llama-3-8B on the RTX 4090 profile.
pub fn roofline_chunk(model: &ModelSpec, cost: &CostModel, host: HostMemory) -> u32 {
    let t_flop = cost.attention_cost(model.dtype).secs_per_flop;
    let t_byte = cost.h2d(host).secs_per_byte;
    let gqa = f64::from(model.gqa_group().max(1));
    let c = model.dtype_bytes() as f64 * t_byte / (2.0 * gqa * t_flop);
    if c.is_finite() && c > 0.0 {
        c.ceil().min(f64::from(u32::MAX)) as u32
    } else {
        MAX_CHUNK_TOKENS
    }
}

/// The chunks the planner tries, largest first: the paper's 10,240 (or the roofline minimum
/// rounded up to 1,024 when larger, at most 65,536), halving down to 128; never above the
/// context.
fn chunk_candidates(roofline: u32, context: u32) -> Vec<u32> {
    let first = DEFAULT_CHUNK_TOKENS
        .max(roofline.div_ceil(1024).saturating_mul(1024))
        .min(MAX_CHUNK_TOKENS);
    let mut v = vec![first.min(context)];
    let mut c = first;
    while c > MIN_CHUNK_TOKENS {
        c = (c / 2).max(MIN_CHUNK_TOKENS);
        if v.last().is_some_and(|&l| c < l) {
            v.push(c);
        }
    }
    v
}

/// The memory of a HeadInfer plan: buffers sized for `prompt + gen` tokens.
fn plan_memory(model: &ModelSpec, shape: &Shape, chunk: u32, g: u32) -> MemoryBreakdown {
    let cfg = MemoryConfig {
        batch: shape.batch,
        chunk_tokens: chunk,
        heads_per_group: g,
        runtime_reserve: RUNTIME_RESERVE_BYTES,
    };
    memory(model, MemStrategy::HeadInfer, shape.max_len(), &cfg)
}

/// The adaptive group size for a fixed chunk: the largest divisor of `Hkv` whose plan fits the
/// usable GPU memory, or `None`.
pub fn adaptive_heads_per_group(
    model: &ModelSpec,
    hw: &HardwareProfile,
    shape: &Shape,
    chunk: u32,
) -> Option<u32> {
    divisors(model.num_kv_heads)
        .into_iter()
        .rev()
        .find(|&g| plan_memory(model, shape, chunk, g).peak_gpu <= hw.gpu.usable_bytes())
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

// ---- schedules -------------------------------------------------------------------------------

/// The loop structure of a prefill/decode schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Layout {
    /// Prefill chunk tokens (`>= prompt`: one pass).
    pub chunk_tokens: u32,
    /// KV heads per offload group; `None` keeps the KV cache on the GPU (no copies).
    pub heads_per_group: Option<u32>,
}

impl Layout {
    /// The schedule shape of a memory-model strategy at `context` tokens: standard and 4-bit
    /// (its kernels modelled as standard ones) one pass, chunked prefill `chunk`-token chunks,
    /// layer offload one pass with whole-layer groups, HeadInfer `chunk`-token chunks with
    /// `heads_per_group`.
    pub fn of(
        model: &ModelSpec,
        strategy: MemStrategy,
        context: u32,
        chunk: u32,
        heads_per_group: u32,
    ) -> Layout {
        match strategy {
            MemStrategy::Standard | MemStrategy::KvQuant4bit => Layout {
                chunk_tokens: context,
                heads_per_group: None,
            },
            MemStrategy::ChunkedPrefill => Layout {
                chunk_tokens: chunk,
                heads_per_group: None,
            },
            MemStrategy::LayerOffload => Layout {
                chunk_tokens: context,
                heads_per_group: Some(model.num_kv_heads),
            },
            MemStrategy::HeadInfer => Layout {
                chunk_tokens: chunk,
                heads_per_group: Some(heads_per_group),
            },
        }
    }
}

/// A two-slot ring: the op that last used each of the two buffers.
#[derive(Default)]
struct Ring {
    slots: [Option<OpId>; 2],
    next: usize,
}

impl Ring {
    fn reuse_dep(&self) -> Option<OpId> {
        self.slots[self.next]
    }

    fn push(&mut self, op: OpId) {
        self.slots[self.next] = Some(op);
        self.next ^= 1;
    }
}

struct Labels {
    embed: LabelId,
    kernels: [LabelId; 8],
    prefetch: LabelId,
    append: LabelId,
    store: LabelId,
    final_norm: LabelId,
    lm_head: LabelId,
    sample: LabelId,
}

/// Ops a schedule of `layout` will have.
pub fn estimated_ops(model: &ModelSpec, shape: &Shape, layout: &Layout) -> u64 {
    let chunk = layout.chunk_tokens.clamp(1, shape.prompt.max(1));
    let passes = u64::from(shape.prompt.div_ceil(chunk)) + u64::from(shape.gen_len) - 1;
    let groups = layout
        .heads_per_group
        .map_or(0, |g| u64::from(model.num_kv_heads / g.max(1)));
    let per_layer = if groups > 0 { 7 + 4 * groups } else { 8 };
    passes * (u64::from(model.num_layers) * per_layer + 4)
}

/// Builds the prefill and decode schedule of `layout` (see the module docs). Streams
/// `gpu0.compute`, and with offload `gpu0.h2d` (prefetch) and `gpu0.d2h` (write-back).
///
/// Prefill, per chunk `[start, start + n)` and layer: `ln1`, `qkv_proj` (n rows); per head group
/// `i`: `prefetch_kv` of the group's `start` earlier tokens (H2D; waits for the attention two
/// group-units earlier, which last read the buffer, and for the group's last write-back),
/// `kv_append` of the chunk's new K,V behind them, `attention` of the group's query heads
/// (`q_len = n`, `kv_len = start + n`, causal), `store_kv` of the chunk's K,V (D2H after
/// `qkv_proj`); then `out_proj`, `ln2`, `ffn_up`, `ffn_act`, `ffn_down`. Without offload one
/// attention over all heads. Decode steps fetch each group's whole cache and store one token.
pub fn build_schedule(
    model: &ModelSpec,
    shape: &Shape,
    layout: &Layout,
    host: HostMemory,
) -> Result<Schedule> {
    shape.validate()?;
    if let Some(g) = layout.heads_per_group
        && (g == 0 || model.num_kv_heads % g != 0)
    {
        return Err(heads_error(model, g));
    }
    let est = estimated_ops(model, shape, layout);
    if est > MAX_OPS {
        return Err(Error::invalid(
            "--prompt",
            shape.prompt,
            format!(
                "the schedule would have about {est} ops (limit {MAX_OPS}); use a larger --chunk, more --heads-per-group, or a smaller --gen"
            ),
        ));
    }
    let mut sb = ScheduleBuilder::with_capacity(est as usize, 2 * est as usize);
    let c = sb.stream(0, StreamKind::Compute, "gpu0.compute");
    let links = layout.heads_per_group.map(|_| {
        (
            sb.stream(0, StreamKind::H2D, "gpu0.h2d"),
            sb.stream(0, StreamKind::D2H, "gpu0.d2h"),
        )
    });
    let names = layer_kernels(model, 1, 1, 1).map(|(n, _)| n);
    let lb = Labels {
        embed: sb.label("embed"),
        kernels: names.map(|n| sb.label(n)),
        prefetch: sb.label("prefetch_kv"),
        append: sb.label("kv_append"),
        store: sb.label("store_kv"),
        final_norm: sb.label("final_norm"),
        lm_head: sb.label("lm_head"),
        sample: sb.label("sample"),
    };
    let layers = model.num_layers as usize;
    let (g, groups) = match layout.heads_per_group {
        Some(g) => (g, (model.num_kv_heads / g) as usize),
        None => (model.num_kv_heads, 0),
    };
    let p = model.dtype_bytes();
    let b = shape.batch;
    let bu = u64::from(b);
    let h = u64::from(model.hidden);
    // K and V of one token of one group.
    let group_tok = 2 * u64::from(g) * u64::from(model.head_dim) * p;
    let q_heads = (g * model.gqa_group()) as u16;
    let mut ring = Ring::default();
    let mut last_store: Vec<Option<OpId>> = vec![None; layers * groups];
    let chunk = layout.chunk_tokens.clamp(1, shape.prompt);

    // (phase, step, start, n): prefill chunks, then decode steps.
    let prefill = (0..shape.prompt.div_ceil(chunk)).map(|k| {
        let start = k * chunk;
        (Phase::Prefill, 0, start, chunk.min(shape.prompt - start))
    });
    let decode = (1..shape.gen_len).map(|t| (Phase::Decode, t, shape.cached_at(t), 1));
    for (phase, step, start, n) in prefill.chain(decode) {
        let tag = |layer: u16, group: u16| Tag {
            phase,
            step,
            layer,
            batch: 0,
            group,
        };
        let kernels = layer_kernels(model, b, n, start + n);
        sb.push(
            OpKind::Elementwise {
                bytes: 2 * bu * u64::from(n) * h * p,
            },
            c,
            lb.embed,
            tag(Tag::NONE, Tag::NONE),
            &[],
        );
        for j in 0..layers {
            let t = tag(j as u16, Tag::NONE);
            sb.push(kernels[0].1, c, lb.kernels[0], t, &[]);
            let qkv = sb.push(kernels[1].1, c, lb.kernels[1], t, &[]);
            match links {
                None => {
                    sb.push(kernels[2].1, c, lb.kernels[2], t, &[]);
                }
                Some((h2d, d2h)) => {
                    for i in 0..groups {
                        let gt = tag(j as u16, i as u16);
                        let unit = j * groups + i;
                        let load = (start > 0).then(|| {
                            sb.push(
                                OpKind::H2D {
                                    bytes: bu * u64::from(start) * group_tok,
                                    payload: Payload::Cache,
                                    host,
                                },
                                h2d,
                                lb.prefetch,
                                gt,
                                &[ring.reuse_dep(), last_store[unit]],
                            )
                        });
                        sb.push(
                            OpKind::Elementwise {
                                bytes: 2 * bu * u64::from(n) * group_tok,
                            },
                            c,
                            lb.append,
                            gt,
                            &[],
                        );
                        let attn = sb.push(
                            OpKind::Attention {
                                batch: b,
                                q_heads,
                                kv_heads: g as u16,
                                q_len: n,
                                kv_len: start + n,
                                head_dim: model.head_dim as u16,
                                causal: n > 1,
                                dtype: model.dtype,
                            },
                            c,
                            lb.kernels[2],
                            gt,
                            &[load],
                        );
                        ring.push(attn);
                        last_store[unit] = Some(sb.push(
                            OpKind::D2H {
                                bytes: bu * u64::from(n) * group_tok,
                                payload: Payload::Cache,
                                host,
                            },
                            d2h,
                            lb.store,
                            gt,
                            &[Some(qkv)],
                        ));
                    }
                }
            }
            for (k, label) in kernels.iter().zip(lb.kernels).skip(3) {
                sb.push(k.1, c, label, t, &[]);
            }
        }
        let t = tag(Tag::NONE, Tag::NONE);
        sb.push(
            OpKind::Elementwise {
                bytes: 2 * bu * h * p,
            },
            c,
            lb.final_norm,
            t,
            &[],
        );
        // Only the last position's logits (prefill) or the new token's (decode).
        if phase == Phase::Decode || start + n == shape.prompt {
            sb.push(
                OpKind::Gemm {
                    m: b,
                    n: model.vocab,
                    k: model.hidden,
                    batch: 1,
                    dtype: model.dtype,
                },
                c,
                lb.lm_head,
                t,
                &[],
            );
            sb.push(
                OpKind::Elementwise {
                    bytes: bu * u64::from(model.vocab) * 4,
                },
                c,
                lb.sample,
                t,
                &[],
            );
        }
    }
    Ok(sb.build())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn llama() -> ModelSpec {
        ModelSpec::preset("llama-3-8b").unwrap()
    }

    #[test]
    fn names_round_trip() {
        for s in MemStrategy::ALL {
            assert_eq!(MemStrategy::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_value(s).unwrap(),
                serde_json::json!(s.as_str())
            );
        }
        assert_eq!(MemStrategy::parse("kvpr"), None);
    }

    #[test]
    fn llama3_kv_is_128_kib_per_token_and_working_set_108() {
        let m = llama();
        assert_eq!(m.kv_bytes_per_token(), 128 << 10);
        let x = memory(&m, MemStrategy::Standard, 1, &MemoryConfig::default());
        assert_eq!(x.activations, 64 << 10);
        assert_eq!(x.working_set.mlp_rows, 108 << 10);
        assert_eq!(x.working_set.peak, 108 << 10);
    }

    #[test]
    fn chunk_candidates_halve_and_respect_the_context() {
        assert_eq!(
            chunk_candidates(1429, 1 << 30),
            vec![10240, 5120, 2560, 1280, 640, 320, 160, 128]
        );
        assert_eq!(
            chunk_candidates(1429, 3000),
            vec![3000, 2560, 1280, 640, 320, 160, 128]
        );
        assert_eq!(chunk_candidates(1429, 500), vec![500, 320, 160, 128]);
        assert_eq!(chunk_candidates(1429, 100), vec![100]);
        assert_eq!(chunk_candidates(40_000, 1 << 30)[0], 40_960);
        assert_eq!(chunk_candidates(200_000, 1 << 30)[0], MAX_CHUNK_TOKENS);
    }

    #[test]
    fn a_schedule_beyond_the_op_limit_is_an_error_naming_the_fix() {
        let shape = Shape {
            batch: 1,
            gpu_batches: 1,
            prompt: 100_000_000,
            gen_len: 1,
        };
        let layout = Layout {
            chunk_tokens: 128,
            heads_per_group: Some(1),
        };
        let e = build_schedule(&llama(), &shape, &layout, HostMemory::Pinned)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--prompt:") && e.contains("limit 20000000") && e.contains("--chunk"),
            "{e}"
        );
    }

    #[test]
    fn schedule_op_count_matches_the_estimate() {
        let m = ModelSpec::preset("opt-125m").unwrap();
        let shape = Shape {
            batch: 2,
            gpu_batches: 1,
            prompt: 1000,
            gen_len: 3,
        };
        for layout in [
            Layout {
                chunk_tokens: 256,
                heads_per_group: Some(3),
            },
            Layout {
                chunk_tokens: 1000,
                heads_per_group: None,
            },
        ] {
            let s = build_schedule(&m, &shape, &layout, HostMemory::Pinned).unwrap();
            s.validate().unwrap();
            let est = estimated_ops(&m, &shape, &layout);
            assert!(
                s.len() as u64 <= est && s.len() as u64 + 64 >= est,
                "{} vs {est}",
                s.len()
            );
        }
    }
}
