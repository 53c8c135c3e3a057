//! One engine step's work and its time, behind the [`IterationModel`] trait: how long the GPU
//! runs the step, and how long the host spends before, while and after it (the engine composes
//! them, synchronously or overlapped as vLLM V1's asynchronous scheduling does).
//!
//! [`IterationTimer`] is the model on kvplan's cost model:
//! - **Kernels as vLLM runs a batch.** Per layer, the token-wise kernels over all the step's
//!   tokens ([`forward_ops`]) and one attention kernel for the whole ragged batch (FlashAttention
//!   varlen: prefill chunks and decodes in one call, its floor paid once). Then the LM head and
//!   sampling over the rows that produce a token.
//! - **CUDA graphs** (vLLM v0.15.1's `FULL_AND_PIECEWISE`, `vllm/v1/cudagraph_dispatcher.py`): a
//!   step of at most the largest capture size runs as graphs padded to the next capture size: a
//!   uniform decode step (every request one token, at most `max_num_seqs`) as one full graph, any
//!   other as piecewise graphs with attention launched eagerly between them. Inside a graph a
//!   kernel takes its device time; launched eagerly it takes at least the launch interval.
//!   Larger steps run eagerly. LM head and sampling run outside the graphs.
//! - **Host time** from the profile's `[serving]` section: scheduling and input preparation
//!   before the GPU can start (per step, request and token), launching (one graph, a launch per
//!   layer for piecewise steps, every kernel when eager), output processing after. When the cost
//!   model carries a host thread (`CostModel::with_host`, an implementation profile), launching
//!   is that one model's instead: every eager kernel at its launch cost, every replayed one at
//!   its graph cost, and the swap copies are issued from it (below).
//! - **Swap copies through the host thread.** With a host profile, `n` copies of `c` seconds
//!   issued at `i` each, each holding the copy engine for its occupancy `o` (DMA setup and
//!   bytes, [`CostModel::occupancy`]; the rest of `c` is the completion a chain pays once), take
//!   `n max(i, o) + min(i, o) + (c - o)` from pinned memory (host and copy engine pipeline: the
//!   issue rate binds at small blocks, the link at large ones) and `n (i + c)` from pageable
//!   memory (each copy holds the host); the D2H copies are issued before the H2D ones, so the
//!   H2D run starts when the host has issued them. The engine running
//!   [`IterationTimer::schedule`] with the same host agrees on swaps (`serve/tests/host.rs`).
//! - **Swap and hybrid copies** (vLLM 0.4 schedulers) before the forward pass, as below.
//!
//! [`IterationTimer::new`] gives the plain model: everything eager, no host costs; its time is
//! the closed form of [`IterationTimer::schedule`], the op-level schedule of the step (one
//! compute stream, an H2D and a D2H copy stream), which the property tests hold equal on the
//! planner's engine:
//! - D2H: every swap-out copy (KV blocks, then hybrid's stored activations), one op per copy;
//! - H2D: the stored activations `X` of hybrid resumes, then every swap-in KV copy;
//! - compute: hybrid's recompute GEMM and concatenation per layer (after the last `X` copy),
//!   then the forward pass (after every copy: swapped-out blocks are reused by this iteration,
//!   swapped-in blocks are read by it): `embed`, per layer [`forward_ops`] of the ragged batch,
//!   then `final_norm` over every row, `lm_head` and `sample` over the rows that produce a token.
//!
//! Cache copies block the forward pass, as in vLLM 0.4: its worker runs `cache_swap` and then the
//! model, and `swap_blocks` issues its `cudaMemcpyAsync`s on the compute stream, so neither the
//! swap-out nor the swap-in overlaps a forward pass. Hybrid (no serving system has it) overlaps
//! its recomputation with its own H2D copies, as KVPR does. With a full-duplex link the forward
//! pass starts at `max(D, H, X + R)` (`D`, `H` the copy streams' totals, `X` the activation
//! copies, `R` the recomputation); half duplex serves the D2H copies first, so `H` and `X` start
//! after `D`.

use kvplan_vocab::AttentionBatch;
use kvplan_vocab::ModelSpec;
use kvplan_vocab::cost::CostModel;
use kvplan_vocab::hardware::Duplex;
use kvplan_vocab::layers::{
    batch_attention_op, concat_kernel, embed_op, forward_ops, forward_ops_batched_for,
    forward_ops_for, head_ops, recompute_gemm,
};
use kvplan_vocab::model::LayerFfn;
use kvplan_vocab::schedule::{
    HostMemory, OpId, OpKind, Payload, Phase, Schedule, ScheduleBuilder, StreamKind, Tag,
};
use kvplan_vocab::serving::ServingSection;
use serde::Serialize;

/// A hybrid resume: `recompute_tokens` tokens recomputed from stored activations
/// (`act_blocks` blocks of `X` copied in first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HybridResume {
    /// Blocks of activations copied in.
    pub act_blocks: u32,
    /// Tokens whose K,V are recomputed.
    pub recompute_tokens: u32,
}

/// What one iteration does. The engine reuses these (no allocation per iteration).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IterationShape {
    /// `(q_len, kv_len)` per scheduled sequence: new tokens and tokens attended.
    pub seqs: Vec<(u32, u32)>,
    /// Rows producing a token.
    pub logits: u32,
    /// KV blocks copied out.
    pub swap_out_blocks: u32,
    /// Activation blocks copied out (hybrid).
    pub act_out_blocks: u32,
    /// KV blocks copied in.
    pub swap_in_blocks: u32,
    /// Hybrid resumes.
    pub hybrid: Vec<HybridResume>,
    /// Seconds of a KV connector's loads the step waits for before its forward pass (LMCache
    /// loads in the step).
    pub connector_in_s: f64,
    /// Seconds of a KV connector's stores after the forward pass (LMCache's `wait_for_save`).
    pub connector_out_s: f64,
    /// Seconds of GPU work before the forward pass (recomputation of reloaded K and V).
    pub extra_gpu_s: f64,
}

impl IterationShape {
    /// Empties it for reuse.
    pub fn clear(&mut self) {
        self.seqs.clear();
        self.logits = 0;
        self.swap_out_blocks = 0;
        self.act_out_blocks = 0;
        self.swap_in_blocks = 0;
        self.hybrid.clear();
        self.connector_in_s = 0.0;
        self.connector_out_s = 0.0;
        self.extra_gpu_s = 0.0;
    }

    /// Tokens run through the model.
    pub fn tokens(&self) -> u64 {
        self.seqs.iter().map(|&(q, _)| u64::from(q)).sum()
    }

    /// Every sequence decodes one token (vLLM's uniform decode batch).
    pub fn uniform_decode(&self) -> bool {
        !self.seqs.is_empty() && self.seqs.iter().all(|&(q, _)| q == 1)
    }
}

/// A copy of `bytes` of KV cache to the host (`out`) or from it.
fn cache_copy(bytes: u64, out: bool, host: HostMemory) -> OpKind {
    let payload = Payload::Cache;
    if out {
        OpKind::D2H {
            bytes,
            payload,
            host,
        }
    } else {
        OpKind::H2D {
            bytes,
            payload,
            host,
        }
    }
}

/// One copy of a run of equal copies on one stream, issued by the cost model's host thread:
/// `(period, fill, host time)`, the run of `n` taking `n period + fill`. From pinned memory the
/// host and the copy engine pipeline, each copy holding the engine for its occupancy `o`
/// (`CostModel::occupancy`: setup and bytes), `n max(i, o) + min(i, o) + (c - o)` for copies of
/// `c` issued at `i`; a pageable copy holds the host to its end, `n (i + c)`. Without a host
/// thread: `n c`.
fn copy_costs(cost: &CostModel, kind: &OpKind) -> (f64, f64, f64) {
    let c = cost.duration(kind);
    match cost.host() {
        None => (c, 0.0, 0.0),
        Some(h) => {
            let issue = h.issue(kind, true, false);
            let i = issue.issue_s;
            if issue.blocking {
                (i + c, 0.0, i + c)
            } else {
                // Back to back, a copy holds its engine for its occupancy `o`; the run pays the
                // rest of a copy's time (its completion) once.
                let o = cost.occupancy(kind);
                (i.max(o), i.min(o) + (c - o), i)
            }
        }
    }
}

/// The time of a run of equal copies: `n period + fill` for `n > 0`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CopyRun {
    /// Seconds per copy in a run.
    pub period_s: f64,
    /// Seconds a run pays once.
    pub fill_s: f64,
}

impl CopyRun {
    /// Seconds for `n` copies.
    pub fn time(&self, n: u64) -> f64 {
        if n == 0 {
            0.0
        } else {
            n as f64 * self.period_s + self.fill_s
        }
    }
}

/// How a step's kernels are launched.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Launch {
    /// Every kernel launched from the host.
    #[default]
    Eager,
    /// One full CUDA graph, padded to `tokens`.
    Full {
        /// The capture size used.
        tokens: u32,
    },
    /// Piecewise CUDA graphs padded to `tokens`, attention launched between them.
    Piecewise {
        /// The capture size used.
        tokens: u32,
    },
}

/// An iteration's time split into its parts.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct IterationTime {
    /// GPU time: from the step's start to its last op's end (copies, recomputation, forward).
    pub total_s: f64,
    /// Kernel time on the compute stream (forward pass and recomputation).
    pub compute_s: f64,
    /// When the forward pass can start (copies and recomputation done).
    pub forward_start_s: f64,
    /// Host time before the GPU can start: scheduling, input preparation, the first launch.
    pub cpu_before_s: f64,
    /// Host time issuing launches while the GPU runs (the GPU cannot finish before it ends).
    pub cpu_launch_s: f64,
    /// Host time after the GPU's output: bookkeeping, `update_from_output`, outputs.
    pub cpu_after_s: f64,
    /// How the kernels were launched.
    pub launch: Launch,
}

/// Times an engine step.
pub trait IterationModel {
    /// The time of one step.
    fn time(&mut self, it: &IterationShape) -> IterationTime;
}

/// The engine settings the timer needs beyond the model and the GPU.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EngineCosts {
    /// CUDA-graph capture sizes in tokens, ascending (empty: everything eager).
    pub cudagraph_sizes: Vec<u32>,
    /// Uniform decode steps up to this many requests run as full graphs (vLLM's FULL keys stop
    /// at `max_num_seqs`).
    pub full_graph_max_seqs: u32,
    /// Host costs (`[serving]`).
    pub serving: ServingSection,
}

/// Times iterations on a cost model. Token-wise kernels are cached per row count, so a step
/// costs O(batch) with no allocation.
#[derive(Debug, Clone)]
pub struct IterationTimer {
    model: ModelSpec,
    cost: CostModel,
    layers: f64,
    duplex: Duplex,
    host: HostMemory,
    engine: Option<EngineCosts>,
    /// Kernels per layer and outside the layers (for eager launch counts).
    kernels_per_layer: f64,
    /// Per row count: embed + L × (token-wise layer kernels) + final norm, launched eagerly;
    /// NaN when not computed yet.
    dense_eager: Vec<f64>,
    /// The same in device time (inside a CUDA graph).
    dense_graph: Vec<f64>,
    /// Per logits row count: LM head + sample (eager).
    head: Vec<f64>,
    kv_copy_bytes: u64,
    kv_copies: u32,
    act_copy_bytes: u64,
    act_copies: u32,
    kv_out_block_s: f64,
    kv_in_block_s: f64,
    act_out_block_s: f64,
    act_in_block_s: f64,
    /// With the cost model's host thread: the one-off part of a run of copies, per direction
    /// (the first issue before the engine starts, or the last copy after the host is done).
    out_fill_s: f64,
    in_fill_s: f64,
    /// Host seconds to issue one KV / activation copy out and in (0 without a host thread; a
    /// blocking, pageable copy holds the host for its whole transfer).
    kv_out_host_s: f64,
    act_out_host_s: f64,
    block_size: u32,
    /// Multipliers on the forward pass's kernel times (1: the cost model as it is).
    scales: CostScales,
}

/// Multipliers on a step's kernel times, by class: how an error-band draw perturbs the cost
/// model ([`crate::bands`]). `1.0` leaves a time as the cost model gives it, bit for bit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CostScales {
    /// Token-wise kernels: GEMMs (dense and expert), norms, activations, the all-reduces, the
    /// embedding, the LM head and sampling.
    pub dense: f64,
    /// Attention kernels.
    pub attention: f64,
}

impl Default for CostScales {
    fn default() -> Self {
        CostScales {
            dense: 1.0,
            attention: 1.0,
        }
    }
}

impl IterationTimer {
    /// A timer for `model` on `cost`, every kernel launched eagerly and no host costs: KV
    /// blocks of `block_size` tokens are copied as `kv_copies_per_block` equal copies;
    /// activation blocks as one copy per layer.
    pub fn new(
        model: &ModelSpec,
        cost: &CostModel,
        block_size: u32,
        kv_copies_per_block: u32,
        pinned: bool,
    ) -> Self {
        let host = if pinned {
            HostMemory::Pinned
        } else {
            HostMemory::Pageable
        };
        let kv_block = u64::from(block_size) * model.kv_bytes_per_token();
        let kv_copies = kv_copies_per_block.max(1);
        let kv_copy_bytes = kv_block.div_ceil(u64::from(kv_copies));
        let act_copies = model.num_layers;
        let act_copy_bytes = u64::from(block_size) * model.act_bytes_per_token_layer();
        let t = |bytes, copies, out: bool| {
            // Per copy of a run: (period, fill, host time).
            let (period, fill, host) = copy_costs(cost, &cache_copy(bytes, out, host));
            (f64::from(copies) * period, fill, f64::from(copies) * host)
        };
        let (kv_out_block_s, out_fill_s, kv_out_host_s) = t(kv_copy_bytes, kv_copies, true);
        let (kv_in_block_s, in_fill_s, _) = t(kv_copy_bytes, kv_copies, false);
        let (act_out_block_s, _, act_out_host_s) = t(act_copy_bytes, act_copies, true);
        let (act_in_block_s, _, _) = t(act_copy_bytes, act_copies, false);
        let kernels_per_layer = match &model.moe {
            None => forward_ops(model, &[(1, 1)], 1).len() as f64,
            // The mean over the layers of a model mixing dense and MoE layers.
            Some(_) => {
                let moe = f64::from(model.moe_layers());
                let dense = f64::from(model.num_layers) - moe;
                let n = |ffn| forward_ops_for(model, ffn, &[(1, 1)], 1).len() as f64;
                (moe * n(LayerFfn::Moe) + dense * n(LayerFfn::Dense)) / f64::from(model.num_layers)
            }
        };
        IterationTimer {
            model: model.clone(),
            cost: cost.clone(),
            layers: f64::from(model.num_layers),
            duplex: cost.duplex(),
            host,
            engine: None,
            kernels_per_layer,
            dense_eager: Vec::new(),
            dense_graph: Vec::new(),
            head: Vec::new(),
            kv_copy_bytes,
            kv_copies,
            act_copy_bytes,
            act_copies,
            kv_out_block_s,
            kv_in_block_s,
            act_out_block_s,
            act_in_block_s,
            out_fill_s,
            in_fill_s,
            kv_out_host_s,
            act_out_host_s,
            block_size: block_size.max(1),
            scales: CostScales::default(),
        }
    }

    /// Multiplies the forward pass's kernel times by `scales` from now on.
    pub fn set_scales(&mut self, scales: CostScales) {
        self.scales = scales;
    }

    /// Seconds Triton takes to compile one kernel on this engine's host (`[serving]
    /// kernel_compile_us`; the built-in figure without engine costs).
    pub fn kernel_compile_s(&self) -> f64 {
        self.engine
            .as_ref()
            .map_or(kvplan_vocab::serving::KERNEL_COMPILE_US, |e| {
                e.serving.kernel_compile_us
            })
            * 1e-6
    }

    /// The timer with CUDA graphs and host costs.
    pub fn with_engine(mut self, engine: EngineCosts) -> Self {
        self.engine = Some(engine);
        self
    }

    /// The model.
    pub fn model(&self) -> &ModelSpec {
        &self.model
    }

    /// The cost model.
    pub fn cost(&self) -> &CostModel {
        &self.cost
    }

    /// A run of `n` copies of `bytes` each in one direction (`out`: device to host), issued
    /// one after another as vLLM's `swap_blocks` issues them (one `cudaMemcpyAsync` each):
    /// `(period, fill)`, the run taking `n period + fill`.
    pub fn copy_run(&self, bytes: u64, out: bool) -> CopyRun {
        let (period_s, fill_s, _) = copy_costs(&self.cost, &cache_copy(bytes, out, self.host));
        CopyRun { period_s, fill_s }
    }

    /// Seconds to swap one KV block out / in.
    pub fn kv_block_s(&self) -> (f64, f64) {
        (self.kv_out_block_s, self.kv_in_block_s)
    }

    /// Seconds of hybrid's recomputation of `tokens` tokens' K,V over all layers.
    pub fn recompute_s(&self, tokens: u32) -> f64 {
        if tokens == 0 {
            return 0.0;
        }
        let m = &self.model;
        self.layers
            * (self.cost.duration(&recompute_gemm(m, 1, tokens))
                + self.cost.duration(&concat_kernel(m, 1, tokens)))
    }

    /// Seconds from a resume's start until the forward pass may run, for `tokens` cached tokens
    /// of which the first `act_blocks` blocks were stored as layer inputs `X` and the rest as
    /// K,V: `max(X + KV_rest, X + R(l))` (one H2D stream, `X` first; the recomputation waits for
    /// `X`), or the plain swap-in `KV_all` when `act_blocks = 0`. As [`IterationTimer::time`].
    pub fn hybrid_resume_s(&self, tokens: u32, act_blocks: u32) -> f64 {
        let blocks = tokens.div_ceil(self.block_size);
        let lb = act_blocks.min(blocks);
        let kv = f64::from(blocks - lb) * self.kv_in_block_s;
        if lb == 0 {
            return kv;
        }
        let x = f64::from(lb) * self.act_in_block_s;
        let r = self.recompute_s((lb * self.block_size).min(tokens));
        (x + kv).max(x + r)
    }

    /// Hybrid's split for a sequence of `tokens` cached tokens, decided when it is swapped out
    /// (what it stores depends on it): KVPR's balance at block granularity. Recomputing `l`
    /// tokens from `X` costs `X(l)` on the link before `R(l)` on the GPU, while the other
    /// `KV(s - l)` streams in; `t(l) = X(l) + max(KV(s - l), R(l))`. When a block of `X` costs
    /// at least a block of K,V on the link (GQA / MQA: `h >= 2 * kv_dim`) every `l > 0` is
    /// worse than plain swap, so `l = 0`. Otherwise `t` falls until `R(l)` reaches `KV(s - l)`
    /// and rises after; the balance block is found by bisection on `R(l) >= KV(s - l)` and `t`
    /// is compared exactly at it, the block before it and `l = 0` (so hybrid never resumes
    /// slower than swap).
    pub fn hybrid_split(&self, tokens: u32) -> HybridResume {
        let bs = self.block_size;
        let blocks = tokens.div_ceil(bs);
        if blocks == 0 || self.act_in_block_s >= self.kv_in_block_s {
            return HybridResume::default();
        }
        let kv_in = self.kv_in_block_s;
        let (mut lo, mut hi) = (0u32, blocks);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.recompute_s((mid * bs).min(tokens)) >= f64::from(blocks - mid) * kv_in {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        let mut best = (self.hybrid_resume_s(tokens, 0), 0u32);
        for lb in [lo.saturating_sub(1), lo] {
            let t = self.hybrid_resume_s(tokens, lb);
            if t < best.0 {
                best = (t, lb);
            }
        }
        HybridResume {
            act_blocks: best.1,
            recompute_tokens: (best.1 * bs).min(tokens),
        }
    }

    /// Embedding, L × token-wise layer kernels and the final norm over `rows` rows, launched
    /// eagerly (`graph = false`) or inside a CUDA graph (device time).
    fn dense_s(&mut self, rows: u32, graph: bool) -> f64 {
        let i = rows as usize;
        let cache = if graph {
            &mut self.dense_graph
        } else {
            &mut self.dense_eager
        };
        if i >= cache.len() {
            cache.resize(i + 1, f64::NAN);
        }
        if cache[i].is_nan() {
            let cost = &self.cost;
            let d = |k: &OpKind| {
                if graph {
                    cost.device_duration(k)
                } else {
                    cost.duration(k)
                }
            };
            let layer = |ffn| -> f64 {
                forward_ops_for(&self.model, ffn, &[(rows, rows)], 1)
                    .iter()
                    .filter(|(_, k)| !is_attention(k))
                    .map(|(_, k)| d(k))
                    .sum()
            };
            // Every layer of a dense model alike; a mixture of experts' MoE and dense layers
            // each as themselves.
            let layers = match &self.model.moe {
                None => self.layers * layer(LayerFfn::Dense),
                Some(_) => {
                    let moe = f64::from(self.model.moe_layers());
                    let dense = self.layers - moe;
                    let mut t = moe * layer(LayerFfn::Moe);
                    if dense > 0.0 {
                        t += dense * layer(LayerFfn::Dense);
                    }
                    t
                }
            };
            let norm = head_ops(&self.model, rows)[0].1;
            cache[i] = d(&embed_op(&self.model, 1, rows)) + layers + d(&norm);
        }
        cache[i]
    }

    /// LM head and sampling over `rows` token-producing rows (eager).
    fn head_s(&mut self, rows: u32) -> f64 {
        let i = rows as usize;
        if i >= self.head.len() {
            self.head.resize(i + 1, f64::NAN);
        }
        if self.head[i].is_nan() {
            self.head[i] = if rows == 0 {
                0.0
            } else {
                head_ops(&self.model, rows)[1..]
                    .iter()
                    .map(|(_, k)| self.cost.duration(k))
                    .sum()
            };
        }
        self.head[i]
    }

    /// One layer's attention over the ragged batch `seqs`: one kernel for the whole batch
    /// (its statistics gathered in O(batch), no allocation), launched eagerly or inside a graph.
    fn attention_s(&self, seqs: &[(u32, u32)], graph: bool) -> f64 {
        let mut b = AttentionBatch::new();
        for &(q, kv) in seqs {
            b.add(q, kv);
        }
        let op = batch_attention_op(&self.model, b);
        if graph {
            self.cost.device_duration(&op)
        } else {
            self.cost.duration(&op)
        }
    }

    /// How a step of `shape` is launched (vLLM's CUDA-graph dispatch).
    pub fn launch(&self, shape: &IterationShape) -> Launch {
        let Some(e) = &self.engine else {
            return Launch::Eager;
        };
        let tokens = shape.tokens();
        let Some(&size) = e.cudagraph_sizes.iter().find(|&&s| u64::from(s) >= tokens) else {
            return Launch::Eager;
        };
        if shape.uniform_decode() && size <= e.full_graph_max_seqs {
            Launch::Full { tokens: size }
        } else {
            Launch::Piecewise { tokens: size }
        }
    }

    /// Seconds of the forward pass of `seqs` with `logits` token-producing rows, launched as
    /// `launch` says.
    pub fn forward_launched(&mut self, seqs: &[(u32, u32)], logits: u32, launch: Launch) -> f64 {
        if seqs.is_empty() {
            return 0.0;
        }
        let rows: u64 = seqs.iter().map(|&(q, _)| u64::from(q)).sum();
        let rows = u32::try_from(rows).unwrap_or(u32::MAX);
        let (dense, attn) = match launch {
            Launch::Eager => (self.dense_s(rows, false), self.attention_s(seqs, false)),
            Launch::Full { tokens } => (self.dense_s(tokens, true), self.attention_s(seqs, true)),
            Launch::Piecewise { tokens } => {
                (self.dense_s(tokens, true), self.attention_s(seqs, false))
            }
        };
        let s = self.scales;
        dense * s.dense + self.layers * attn * s.attention + self.head_s(logits) * s.dense
    }

    /// Seconds of the forward pass of `seqs` with `logits` token-producing rows, every kernel
    /// launched eagerly (the planner's gpu-only plan, step for step).
    pub fn forward_s(&mut self, seqs: &[(u32, u32)], logits: u32) -> f64 {
        self.forward_launched(seqs, logits, Launch::Eager)
    }

    /// Host seconds around a step: before the GPU may start, issuing launches, and after.
    /// Launches come from the cost model's host thread when it has one (the engine's model:
    /// eager kernels at the profile's launch cost, replayed ones at its graph cost; the LM head
    /// and sampling, and a piecewise step's attention, launched eagerly), else from the
    /// `[serving]` section; scheduling and output processing from `[serving]`.
    fn host_s(&self, shape: &IterationShape, launch: Launch) -> (f64, f64, f64) {
        let kernels = self.layers * self.kernels_per_layer + 4.0;
        let hosted = self.cost.host().map(|h| {
            let (eager, graphed) = match launch {
                Launch::Eager => (kernels, 0.0),
                Launch::Full { .. } => (2.0, kernels - 2.0),
                Launch::Piecewise { .. } => (self.layers + 2.0, kernels - self.layers - 2.0),
            };
            eager * h.module_us(false) + graphed * h.module_us(true)
        });
        let Some(e) = &self.engine else {
            return (0.0, hosted.unwrap_or(0.0) * 1e-6, 0.0);
        };
        let s = &e.serving;
        let n = shape.seqs.len() as f64;
        let tokens = shape.tokens() as f64;
        let before = s.schedule_us + s.schedule_per_seq_us * n + s.schedule_per_token_us * tokens;
        let launching = hosted.unwrap_or(match launch {
            Launch::Full { .. } => s.graph_launch_us,
            Launch::Piecewise { .. } => s.graph_launch_us + self.layers * s.piecewise_layer_us,
            // Eager launches already bound the GPU's kernels (`max(launch, device)`); the host
            // is busy issuing them meanwhile.
            Launch::Eager => kernels * self.cost.kernels().launch_s() * 1e6,
        });
        let after = s.update_us + s.update_per_seq_us * n;
        (before * 1e-6, launching * 1e-6, after * 1e-6)
    }

    /// The op-level schedule of an iteration, every kernel launched eagerly (see the module
    /// docs).
    pub fn schedule(&self, it: &IterationShape) -> Schedule {
        let m = &self.model;
        let mut sb = ScheduleBuilder::new();
        let c = sb.stream(0, StreamKind::Compute, "gpu0.compute");
        let h2d = sb.stream(0, StreamKind::H2D, "gpu0.h2d");
        let d2h = sb.stream(0, StreamKind::D2H, "gpu0.d2h");
        let tag = Tag {
            phase: Phase::Decode,
            step: 0,
            layer: Tag::NONE,
            batch: 0,
            group: Tag::NONE,
        };
        let host = self.host;
        let swap_label = sb.label("swap_out");
        let act_out_label = sb.label("store_x");
        let swap_in_label = sb.label("swap_in");
        let load_x = sb.label("load_x");
        let recompute = sb.label("recompute_kv");
        let concat = sb.label("kv_concat");
        let mut last_d2h: Option<OpId> = None;
        let d2h_op = |bytes, payload| OpKind::D2H {
            bytes,
            payload,
            host,
        };
        let h2d_op = |bytes, payload| OpKind::H2D {
            bytes,
            payload,
            host,
        };
        for _ in 0..u64::from(it.swap_out_blocks) * u64::from(self.kv_copies) {
            last_d2h = Some(sb.push(
                d2h_op(self.kv_copy_bytes, Payload::Cache),
                d2h,
                swap_label,
                tag,
                &[],
            ));
        }
        for _ in 0..u64::from(it.act_out_blocks) * u64::from(self.act_copies) {
            last_d2h = Some(sb.push(
                d2h_op(self.act_copy_bytes, Payload::RecomputeActivation),
                d2h,
                act_out_label,
                tag,
                &[],
            ));
        }
        let mut last_h2d: Option<OpId> = None;
        for h in &it.hybrid {
            for _ in 0..u64::from(h.act_blocks) * u64::from(self.act_copies) {
                last_h2d = Some(sb.push(
                    h2d_op(self.act_copy_bytes, Payload::RecomputeActivation),
                    h2d,
                    load_x,
                    tag,
                    &[],
                ));
            }
        }
        let last_x = last_h2d;
        for _ in 0..u64::from(it.swap_in_blocks) * u64::from(self.kv_copies) {
            last_h2d = Some(sb.push(
                h2d_op(self.kv_copy_bytes, Payload::Cache),
                h2d,
                swap_in_label,
                tag,
                &[],
            ));
        }
        for h in &it.hybrid {
            if h.recompute_tokens == 0 {
                continue;
            }
            for _ in 0..m.num_layers {
                sb.push(
                    recompute_gemm(m, 1, h.recompute_tokens),
                    c,
                    recompute,
                    tag,
                    &[last_x],
                );
                sb.push(concat_kernel(m, 1, h.recompute_tokens), c, concat, tag, &[]);
            }
        }
        if !it.seqs.is_empty() {
            let rows: u32 = it.seqs.iter().map(|&(q, _)| q).sum();
            let embed = sb.label("embed");
            sb.push(embed_op(m, 1, rows), c, embed, tag, &[last_h2d, last_d2h]);
            // Each layer's own kind (a mixture of experts may keep some layers dense).
            let kinds = [LayerFfn::Dense, LayerFfn::Moe].map(|ffn| {
                let ops = forward_ops_batched_for(m, ffn, &it.seqs, 1);
                let labels: Vec<_> = ops.iter().map(|(n, _)| sb.label(n)).collect();
                (ops, labels)
            });
            for layer in 0..m.num_layers {
                let (ops, labels) = &kinds[usize::from(m.layer_ffn(layer) == LayerFfn::Moe)];
                for ((_, k), l) in ops.iter().zip(labels) {
                    sb.push(*k, c, *l, tag, &[]);
                }
            }
            // The final norm runs over every row (inside the model, as vLLM's `LlamaModel`
            // does); the LM head and sampling over the rows that produce a token.
            let norm = head_ops(m, rows)[0];
            let l = sb.label(norm.0);
            sb.push(norm.1, c, l, tag, &[]);
            if it.logits > 0 {
                for (n, k) in &head_ops(m, it.logits)[1..] {
                    let l = sb.label(n);
                    sb.push(*k, c, l, tag, &[]);
                }
            }
        }
        sb.build()
    }
}

fn is_attention(k: &OpKind) -> bool {
    matches!(k, OpKind::Attention { .. } | OpKind::BatchAttention { .. })
}

impl IterationModel for IterationTimer {
    /// The step's time. Without engine costs (eager, no host time) `total_s` is the closed form
    /// of [`IterationTimer::schedule`] on the engine.
    fn time(&mut self, it: &IterationShape) -> IterationTime {
        let out_blocks = it.swap_out_blocks + it.act_out_blocks;
        let d = f64::from(it.swap_out_blocks) * self.kv_out_block_s
            + f64::from(it.act_out_blocks) * self.act_out_block_s
            + if out_blocks > 0 { self.out_fill_s } else { 0.0 };
        // One host thread issues the D2H copies before the H2D ones (0 without a host thread).
        let host_out = f64::from(it.swap_out_blocks) * self.kv_out_host_s
            + f64::from(it.act_out_blocks) * self.act_out_host_s;
        let mut x = 0.0;
        let mut r = 0.0;
        for h in &it.hybrid {
            x += f64::from(h.act_blocks) * self.act_in_block_s;
            r += self.recompute_s(h.recompute_tokens);
        }
        let in_blocks = it.swap_in_blocks + it.hybrid.iter().map(|h| h.act_blocks).sum::<u32>();
        let kv_in = f64::from(it.swap_in_blocks) * self.kv_in_block_s
            + if in_blocks > 0 { self.in_fill_s } else { 0.0 };
        let h2d_start = if self.duplex == Duplex::Half {
            d
        } else {
            host_out
        };
        let x_done = h2d_start + x;
        let h_done = x_done + kv_in;
        // Recomputation waits for the last activation copy (none: it starts at once).
        let x_wait = if it.hybrid.iter().any(|h| h.act_blocks > 0) {
            x_done
        } else {
            0.0
        };
        let recompute_done = if r > 0.0 { x_wait + r } else { 0.0 };
        let start = d
            .max(h_done)
            .max(recompute_done)
            .max(it.connector_in_s)
            .max(recompute_done.max(0.0) + it.extra_gpu_s);
        let launch = self.launch(it);
        let fwd = self.forward_launched(&it.seqs, it.logits, launch);
        let (before, launching, after) = self.host_s(it, launch);
        IterationTime {
            total_s: start + fwd + it.connector_out_s,
            compute_s: r + fwd + it.extra_gpu_s,
            forward_start_s: start,
            cpu_before_s: before,
            cpu_launch_s: launching,
            cpu_after_s: after,
            launch,
        }
    }
}

impl IterationTimer {
    /// The step's time ([`IterationModel::time`]).
    pub fn time(&mut self, it: &IterationShape) -> IterationTime {
        IterationModel::time(self, it)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvplan_vocab::HardwareProfile;

    /// On an exact tie between plain swap and a hybrid split, hybrid keeps the swap (nothing
    /// recomputed, no activations stored); a hybrid split a hair faster is taken.
    #[test]
    fn a_tie_with_plain_swap_keeps_the_swap() {
        let m = ModelSpec::preset("yarn-llama-2-7b").unwrap();
        let cost = CostModel::new(&HardwareProfile::preset("a100-40g-pcie4").unwrap());
        let mut t = IterationTimer::new(&m, &cost, 16, 2 * m.num_layers, true);
        // One block of 16 tokens: swap takes one block of K,V; hybrid one block of X and then
        // the recompute. Make the two equal to the last bit.
        let r = t.recompute_s(16);
        t.kv_in_block_s = t.act_in_block_s + r;
        assert_eq!(t.hybrid_resume_s(16, 1), t.hybrid_resume_s(16, 0));
        assert_eq!(t.hybrid_split(16), HybridResume::default());
        t.kv_in_block_s = (t.act_in_block_s + r).next_up();
        assert_eq!(
            t.hybrid_split(16),
            HybridResume {
                act_blocks: 1,
                recompute_tokens: 16
            }
        );
    }

    /// Where the swap-ins of a step start. Half duplex: after the swap-outs, and at once when
    /// there are none (no pipeline fill of copies that do not run, in or out). Full duplex with
    /// a host thread: once the host has issued every swap-out, each kind at its own issue cost.
    #[test]
    fn swap_ins_start_after_what_holds_the_link_or_the_host() {
        use kvplan_vocab::host::Implementation;
        let m = ModelSpec::preset("llama-2-7b").unwrap();
        let mut hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
        hw.link.duplex = Duplex::Half;
        let host = || Implementation::VllmV0.profile();
        let cost = CostModel::new(&hw).with_host(host());
        let mut t = IterationTimer::new(&m, &cost, 16, 2 * m.num_layers, true);
        let it = IterationShape {
            seqs: vec![(1, 100)],
            logits: 1,
            swap_in_blocks: 3,
            ..Default::default()
        };
        let kv_in = 3.0 * t.kv_in_block_s + t.in_fill_s;
        assert!(t.out_fill_s > 0.0);
        assert_eq!(t.time(&it).forward_start_s, kv_in);
        // Swap-outs alone: the step waits for them, with no fill of swap-ins that do not run.
        let out = IterationShape {
            swap_out_blocks: 2,
            swap_in_blocks: 0,
            ..it.clone()
        };
        assert!(t.in_fill_s > 0.0);
        let d = 2.0 * t.kv_out_block_s + t.out_fill_s;
        assert_eq!(t.time(&out).forward_start_s, d);

        hw.link.duplex = Duplex::Full;
        let cost = CostModel::new(&hw).with_host(host());
        let mut t = IterationTimer::new(&m, &cost, 16, 2 * m.num_layers, true);
        assert!(t.kv_out_host_s > 0.0 && t.act_out_host_s > 0.0);
        let it = IterationShape {
            swap_out_blocks: 2,
            act_out_blocks: 1,
            swap_in_blocks: 40,
            ..it
        };
        let host_out = 2.0 * t.kv_out_host_s + t.act_out_host_s;
        let d = 2.0 * t.kv_out_block_s + t.act_out_block_s + t.out_fill_s;
        let h_done = host_out + 40.0 * t.kv_in_block_s + t.in_fill_s;
        assert!(h_done > d, "the swap-ins hold the step: {h_done} vs {d}");
        assert_eq!(t.time(&it).forward_start_s, h_done);
    }
}
