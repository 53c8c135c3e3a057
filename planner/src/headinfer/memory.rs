//! The memory model of five inference strategies (HeadInfer Tables 10 and 11) and the capacity
//! search on it (see the parent module's docs for the two accountings).

use serde::Serialize;

use crate::types::Shape;
use kvplan_vocab::error::{Error, Result};
use kvplan_vocab::hardware::HardwareProfile;
use kvplan_vocab::memory::{
    AttentionImpl, MemoryKind, MemoryPlan, PrefillPass, WorkingSet, prefill_working_set,
};
use kvplan_vocab::model::ModelSpec;

pub(crate) const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// The paper's prefill chunk: 10K tokens, with K = 1024 (the activation cell of Table 10,
/// 0.625 GB for Llama-3-8B, is `10240 · (h + 2·ffn) · 2` bytes).
pub const DEFAULT_CHUNK_TOKENS: u32 = 10_240;

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
        m.gpu(MemoryKind::Weights, self.weights);
        let kv = match self.strategy {
            MemStrategy::Standard | MemStrategy::ChunkedPrefill => MemoryKind::KvCache,
            MemStrategy::KvQuant4bit => MemoryKind::KvCache4bit,
            MemStrategy::LayerOffload => MemoryKind::KvLayerBuffers,
            MemStrategy::HeadInfer => MemoryKind::KvGroupBuffers,
        };
        m.gpu(kv, self.kv_gpu);
        m.gpu(MemoryKind::KvQuantScales, self.kv_quant_scales);
        m.gpu(MemoryKind::Activations, self.working_set.peak);
        m.gpu(MemoryKind::RuntimeReserve, self.runtime_reserve);
        m.host(MemoryKind::KvCache, self.kv_host);
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
    let attention = match strategy {
        // One pass with `is_causal` (no mask); SDPA gets K,V expanded to the query heads.
        MemStrategy::Standard | MemStrategy::KvQuant4bit | MemStrategy::LayerOffload => {
            AttentionImpl::Sdpa
        }
        MemStrategy::ChunkedPrefill => AttentionImpl::ChunkedSdpa,
        // FlashAttention: native GQA, causal offset for the chunk; K,V in the group buffers.
        MemStrategy::HeadInfer => AttentionImpl::Fused,
    };
    let working_set = prefill_working_set(
        model,
        &PrefillPass {
            batch: b,
            q_tokens: if strategy.chunked() { chunk } else { s },
            context: s,
            attention,
            logits_rows: 0,
        },
    );
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
            .saturating_add(working_set.peak)
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
    /// Host RAM for the offloaded KV cache (`capacity.host_ram`), bytes; `None`: the profile's.
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

/// Capacity of several strategies (`kvplan capacity`'s JSON).
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
        return Err(Error::invalid("workload.batch", 0, "must be at least 1"));
    }
    if cfg.chunk_tokens == 0 {
        return Err(Error::invalid("headinfer.chunk", 0, "must be at least 1"));
    }
    if cfg.heads_per_group == 0 || !model.num_kv_heads.is_multiple_of(cfg.heads_per_group) {
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

pub(crate) fn heads_error(model: &ModelSpec, g: u32) -> Error {
    let divisors: Vec<String> = divisors(model.num_kv_heads)
        .iter()
        .map(u32::to_string)
        .collect();
    Error::invalid(
        "headinfer.heads_per_group",
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
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

/// The memory of a HeadInfer plan: buffers sized for `prompt + gen` tokens.
pub(crate) fn plan_memory(model: &ModelSpec, shape: &Shape, chunk: u32, g: u32) -> MemoryBreakdown {
    let cfg = MemoryConfig {
        batch: shape.batch,
        chunk_tokens: chunk,
        heads_per_group: g,
        runtime_reserve: RUNTIME_RESERVE_BYTES,
    };
    memory(model, MemStrategy::HeadInfer, shape.max_len(), &cfg)
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
}
