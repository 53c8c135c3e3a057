//! Generation plans for one fixed batch: KVPR, plain KV offload (`full-transfer`) and
//! everything-resident (`gpu-only`), all emitted as [`Schedule`]s on one engine.
//!
//! Shape of the emitted schedule (FlexGen's loops):
//! - row-by-row (`gpu_batches = 1`): for each step, for each layer, one batch;
//! - column-by-column (`gpu_batches = k > 1`): for each step, for each layer, `k` GPU batches
//!   reuse one weight load.
//!
//! Streams: `gpu0.compute`, `gpu0.h2d`, `gpu0.d2h`. The KV cache (and for KVPR the layer inputs
//! `X`) of every (layer, GPU batch) lives on the host and is double-buffered on the GPU: the
//! copies for unit `u` wait for the attention of unit `u - 2`, which last read that buffer.
//! Offloaded weights are double-buffered per layer the same way, loaded `W_K,W_V` first so KVPR
//! recomputation starts while `W_Q, W_O` and the FFN still arrive (the fine-grained MHA pipeline).

use serde::Serialize;

use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::hardware::HardwareProfile;
use crate::kvpr::{Split, SplitProblem};
use crate::memory::MemoryPlan;
use crate::model::ModelSpec;
use crate::schedule::{
    HostMemory, LabelId, OpId, OpKind, Payload, Phase, Schedule, ScheduleBuilder, StreamId,
    StreamKind, Tag,
};

/// Most ops a single plan may emit (about 6 GiB of schedule and timeline).
pub const MAX_OPS: u64 = 50_000_000;

/// How the KV cache is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// KV cache on the host; per step, recompute a prefix from activations, transfer the rest.
    Kvpr,
    /// KV cache on the host, all of it transferred every step (FlexGen / HF Accelerate offload).
    FullTransfer,
    /// Everything resident on the GPU.
    GpuOnly,
    /// HeadInfer: KV offloaded per head group, chunked prefill (long contexts).
    HeadInfer,
    /// KV-Runahead: prefill split across devices with a point-to-point KV chain (TTFT).
    Runahead,
}

impl Strategy {
    /// The KV-offload strategies `--compare` runs side by side.
    pub const ALL: [Strategy; 3] = [Strategy::Kvpr, Strategy::FullTransfer, Strategy::GpuOnly];

    /// Every strategy, for parsing and help text.
    pub const NAMES: [Strategy; 5] = [
        Strategy::Kvpr,
        Strategy::FullTransfer,
        Strategy::GpuOnly,
        Strategy::HeadInfer,
        Strategy::Runahead,
    ];

    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Kvpr => "kvpr",
            Strategy::FullTransfer => "full-transfer",
            Strategy::GpuOnly => "gpu-only",
            Strategy::HeadInfer => "headinfer",
            Strategy::Runahead => "runahead",
        }
    }

    /// Parses a command-line name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::NAMES.into_iter().find(|x| x.as_str() == s)
    }

    fn offloads_kv(self) -> bool {
        matches!(self, Strategy::Kvpr | Strategy::FullTransfer)
    }
}

/// Where the weights live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightsPlacement {
    /// On the GPU when they fit next to everything else, else offloaded.
    Auto,
    /// Resident on the GPU.
    Gpu,
    /// On the host, loaded layer by layer.
    Offload,
}

/// How the KVPR split is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase", tag = "policy", content = "value")]
pub enum SplitPolicy {
    /// The LP optimum per step.
    Auto,
    /// A fixed number of recomputed tokens (clamped to the cached length).
    Tokens(u32),
}

/// Which per-layer time the KVPR split minimises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SplitModel {
    /// The emitted schedule's steady state (default): activations and `W_K,W_V` are prefetched
    /// during the previous layer, so they cost link time only; the split is then checked on the
    /// simulated schedule itself (see [`kvpr_splits`]).
    #[default]
    Schedule,
    /// The KVPR paper's Eq. 10, `X(l) + max(R(l), KV(s'-l))` per GPU batch: the activation copy
    /// is charged in series before recomputation, weights and the layer's other kernels are
    /// left out. Kept for comparison with the paper.
    Paper,
}

impl SplitModel {
    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            SplitModel::Schedule => "schedule",
            SplitModel::Paper => "paper",
        }
    }
}

/// The batch being generated: `gpu_batches` GPU batches of `batch` sequences, each with a
/// `prompt`-token prompt, generating `gen` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Shape {
    /// Sequences per GPU batch.
    pub batch: u32,
    /// GPU batches sharing one weight load per layer (1 = row-by-row).
    pub gpu_batches: u32,
    /// Prompt tokens per sequence.
    pub prompt: u32,
    /// Tokens generated per sequence (the first comes from prefill).
    #[serde(rename = "gen")]
    pub gen_len: u32,
}

impl Shape {
    /// Checks every size is at least 1.
    pub fn validate(&self) -> Result<()> {
        for (f, v) in [
            ("--batch", self.batch),
            ("--gpu-batches", self.gpu_batches),
            ("--prompt", self.prompt),
            ("--gen", self.gen_len),
        ] {
            if v == 0 {
                return Err(Error::invalid(f, v, "must be at least 1"));
            }
        }
        if u64::from(self.batch) * u64::from(self.prompt) > u64::from(u32::MAX) {
            return Err(Error::invalid(
                "--batch x --prompt",
                u64::from(self.batch) * u64::from(self.prompt),
                "must stay below 2^32 tokens per GPU batch",
            ));
        }
        Ok(())
    }

    /// Sequences in all GPU batches.
    pub fn total_batch(&self) -> u64 {
        u64::from(self.batch) * u64::from(self.gpu_batches)
    }

    /// Longest sequence the KV cache must hold (`prompt + gen`, as FlexGen and KVPR size it).
    pub fn max_len(&self) -> u64 {
        u64::from(self.prompt) + u64::from(self.gen_len)
    }

    /// Decode steps (`gen - 1`: the first token comes from prefill).
    pub fn decode_steps(&self) -> u32 {
        self.gen_len - 1
    }

    /// Cached tokens at decode step `i` (1-based): `prompt + i - 1`.
    pub fn cached_at(&self, step: u32) -> u32 {
        self.prompt + step - 1
    }
}

/// Options of a plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Options {
    /// Where weights live.
    pub weights: WeightsPlacement,
    /// Host memory kind of the offloaded KV cache, activations and weights.
    pub host_memory: HostMemory,
    /// KVPR split policy.
    pub split: SplitPolicy,
    /// What the automatic KVPR split minimises.
    pub split_model: SplitModel,
    /// HeadInfer options.
    pub headinfer: crate::headinfer::HeadInferOptions,
    /// KV-Runahead options.
    pub runahead: crate::runahead::RunaheadOptions,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            weights: WeightsPlacement::Auto,
            host_memory: HostMemory::Pinned,
            split: SplitPolicy::Auto,
            split_model: SplitModel::Schedule,
            headinfer: Default::default(),
            runahead: Default::default(),
        }
    }
}

/// The split decision of one decode step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepSplit {
    /// Decode step (1-based).
    pub step: u32,
    /// Cached tokens `s'`.
    pub seq_len: u32,
    /// The decision.
    #[serde(flatten)]
    pub split: Split,
}

/// Loop order of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    /// One GPU batch goes through all layers (latency workloads).
    RowByRow,
    /// Each layer runs all GPU batches before the next (throughput workloads).
    ColumnByColumn,
}

/// A plan: the decisions, the memory it needs, and the schedule that carries it out.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Strategy.
    pub strategy: Strategy,
    /// Model name.
    pub model: String,
    /// Hardware profile name.
    pub hardware: String,
    /// The batch.
    pub shape: Shape,
    /// Loop order.
    pub order: Order,
    /// Whether the weights are resident on the GPU.
    pub weights_on_gpu: bool,
    /// Host memory kind of offloaded data.
    pub host_memory: HostMemory,
    /// Peak memory.
    pub memory: MemoryPlan,
    /// KVPR split per decode step (empty for other strategies).
    pub splits: Vec<StepSplit>,
    /// HeadInfer decisions (HeadInfer plans only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub headinfer: Option<crate::headinfer::HeadInferDetails>,
    /// KV-Runahead decisions (KV-Runahead plans only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runahead: Option<crate::runahead::RunaheadDetails>,
    /// Things the user should know (auto decisions, warnings).
    pub notes: Vec<String>,
    /// The schedule.
    #[serde(skip)]
    pub schedule: Schedule,
}

/// The kernels of one decoder layer for `rows` tokens attending over `kv_len` keys.
pub fn layer_kernels(
    m: &ModelSpec,
    batch: u32,
    q_len: u32,
    kv_len: u32,
) -> [(&'static str, OpKind); 8] {
    let p = m.dtype_bytes();
    let rows = batch * q_len;
    let r = u64::from(rows);
    let h = m.hidden;
    let q = m.q_dim() as u32;
    let kv = m.kv_dim() as u32;
    let ffn_up = m.ffn_up_width() as u32;
    let dt = m.dtype;
    let gemm = |m_: u32, n: u32, k: u32| OpKind::Gemm {
        m: m_,
        n,
        k,
        batch: 1,
        dtype: dt,
    };
    [
        // Residual add + norm: read residual and branch, write normed input.
        (
            "ln1",
            OpKind::Elementwise {
                bytes: 3 * r * u64::from(h) * p,
            },
        ),
        ("qkv_proj", gemm(rows, q + 2 * kv, h)),
        (
            "attention",
            OpKind::Attention {
                batch,
                q_heads: m.num_heads as u16,
                kv_heads: m.num_kv_heads as u16,
                q_len,
                kv_len,
                head_dim: m.head_dim as u16,
                causal: q_len > 1,
                dtype: dt,
            },
        ),
        ("out_proj", gemm(rows, h, q)),
        (
            "ln2",
            OpKind::Elementwise {
                bytes: 3 * r * u64::from(h) * p,
            },
        ),
        ("ffn_up", gemm(rows, ffn_up, h)),
        (
            "ffn_act",
            OpKind::Elementwise {
                bytes: r * (u64::from(ffn_up) + u64::from(m.ffn_dim)) * p,
            },
        ),
        ("ffn_down", gemm(rows, h, m.ffn_dim)),
    ]
}

/// Seconds of a layer's kernels (excluding KVPR recomputation) on `cost`.
pub fn layer_compute_s(
    cost: &CostModel,
    m: &ModelSpec,
    batch: u32,
    q_len: u32,
    kv_len: u32,
) -> f64 {
    layer_kernels(m, batch, q_len, kv_len)
        .iter()
        .map(|(_, k)| cost.duration(k))
        .sum()
}

/// The recompute GEMM for `l` tokens of a GPU batch: `X[0:l] @ [W_K | W_V]`.
pub fn recompute_gemm(m: &ModelSpec, batch: u32, l: u32) -> OpKind {
    OpKind::Gemm {
        m: batch * l,
        n: 2 * m.kv_dim() as u32,
        k: m.hidden,
        batch: 1,
        dtype: m.dtype,
    }
}

/// The kernel placing recomputed K,V of `l` tokens next to the transferred part.
pub fn concat_kernel(m: &ModelSpec, batch: u32, l: u32) -> OpKind {
    OpKind::Elementwise {
        bytes: 2 * u64::from(batch) * u64::from(l) * m.kv_bytes_per_token_layer(),
    }
}

/// The split problem of decode step `step` (cost terms from `cost`).
pub fn split_problem(
    cost: &CostModel,
    m: &ModelSpec,
    shape: &Shape,
    weights_on_gpu: bool,
    host: HostMemory,
    step: u32,
    model: SplitModel,
) -> SplitProblem {
    let b = shape.batch;
    let s = shape.cached_at(step);
    let link = cost.h2d(host);
    let p = m.dtype_bytes() as f64;
    let w = m.layer_weights();
    let paper = model == SplitModel::Paper;
    let (weights_s, weights_kv_s) = if weights_on_gpu || paper {
        (0.0, 0.0)
    } else {
        (
            link.time(w.kv_proj) + link.time(w.q_o_proj) + link.time(w.ffn),
            link.time(w.kv_proj),
        )
    };
    // Recompute GEMM roofline terms, scaled by the calibrated ratio at this step's size.
    let rc = recompute_gemm(m, b, s);
    let ratio = match rc {
        OpKind::Gemm {
            m: rows,
            n,
            k,
            dtype,
            ..
        } => cost.gemm_ratio(rows, n, k, dtype),
        _ => 1.0,
    };
    let g0 = cost.gemm_cost(m.dtype);
    let g = crate::cost::KernelCost {
        overhead_s: g0.overhead_s * ratio,
        secs_per_flop: g0.secs_per_flop * ratio,
        secs_per_byte: g0.secs_per_byte * ratio,
    };
    let bf = f64::from(b);
    let h = f64::from(m.hidden);
    let kvd = m.kv_dim() as f64;
    let e = cost.elementwise_cost();
    SplitProblem {
        seq_len: s,
        gpu_batches: shape.gpu_batches,
        weights_s,
        weights_kv_s,
        copy_latency_s: link.latency_s,
        act_s_per_token: bf * m.act_bytes_per_token_layer() as f64 * link.secs_per_byte,
        kv_s_per_token: bf * m.kv_bytes_per_token_layer() as f64 * link.secs_per_byte,
        recompute_overhead_s: g.overhead_s + e.overhead_s,
        recompute_flop_s_per_token: 2.0 * bf * 2.0 * kvd * h * g.secs_per_flop,
        recompute_mem_fixed_s: h * 2.0 * kvd * p * g.secs_per_byte,
        recompute_mem_s_per_token: bf * (h + 2.0 * kvd) * p * g.secs_per_byte,
        concat_s_per_token: 2.0 * bf * m.kv_bytes_per_token_layer() as f64 * e.secs_per_byte,
        main_compute_s: if paper {
            0.0
        } else {
            layer_compute_s(cost, m, b, 1, s + 1)
        },
        serial_prefetch: paper,
    }
}

/// KVPR splits for every decode step.
///
/// `SplitModel::Paper` takes each step's LP optimum of the paper's Eq. 10. `SplitModel::Schedule`
/// (the default) chooses what the simulator will run fastest: each step's candidate splits are
/// timed on the discrete-event engine ([`crate::engine`]) in a two-step probe of the very
/// schedule [`plan`] emits (see [`probe_step_s`]); the LP optimum of the schedule's steady-state
/// model seeds the search. See [`search_split`] for the candidates and the anchors.
pub fn kvpr_splits(
    cost: &CostModel,
    m: &ModelSpec,
    shape: &Shape,
    weights_on_gpu: bool,
    host: HostMemory,
    policy: SplitPolicy,
    model: SplitModel,
) -> Result<Vec<StepSplit>> {
    let steps = shape.decode_steps();
    let problems: Vec<SplitProblem> = (1..=steps)
        .map(|step| split_problem(cost, m, shape, weights_on_gpu, host, step, model))
        .collect();
    let chosen: Vec<Split> = match (policy, model) {
        (SplitPolicy::Tokens(l), _) => problems.iter().map(|p| p.fixed(l)).collect(),
        (SplitPolicy::Auto, SplitModel::Paper) => {
            problems.iter().map(|p| p.solve()).collect::<Result<_>>()?
        }
        (SplitPolicy::Auto, SplitModel::Schedule) => {
            let probe = Probe {
                cost,
                m,
                shape,
                weights_on_gpu,
                host,
            };
            let anchors = anchor_steps(steps);
            let mut at_anchor = Vec::with_capacity(anchors.len());
            // Probes with activations stored (any recomputation needs them at every step),
            // against plain transfer without them.
            let (mut with_x, mut without_x) = (0.0, 0.0);
            for &step in &anchors {
                let p = &problems[(step - 1) as usize];
                let seed = p.solve()?.recompute_tokens;
                let (l, t) = search_split(&probe, step, p.seq_len, seed)?;
                at_anchor.push(l);
                with_x += t;
                without_x += probe_step_s(&probe, step, 0, false)?;
            }
            if without_x <= with_x {
                at_anchor.iter_mut().for_each(|l| *l = 0);
            }
            (1..=steps)
                .map(|step| {
                    let p = &problems[(step - 1) as usize];
                    p.chosen(interpolate(&anchors, &at_anchor, step).min(p.seq_len))
                })
                .collect()
        }
    };
    Ok(problems
        .iter()
        .zip(chosen)
        .enumerate()
        .map(|(i, (p, split))| StepSplit {
            step: i as u32 + 1,
            seq_len: p.seq_len,
            split,
        })
        .collect())
}

/// Decode steps whose split is searched on the simulator: all of them up to
/// [`MAX_SEARCHED_STEPS`], else that many evenly spaced from the first to the last (the optimum
/// moves smoothly with `s'`; steps between anchors interpolate).
fn anchor_steps(steps: u32) -> Vec<u32> {
    if steps <= MAX_SEARCHED_STEPS {
        return (1..=steps).collect();
    }
    let n = u64::from(MAX_SEARCHED_STEPS - 1);
    let mut v: Vec<u32> = (0..=n)
        .map(|i| 1 + (i * u64::from(steps - 1) / n) as u32)
        .collect();
    v.dedup();
    v
}

/// Most decode steps searched one by one (see [`anchor_steps`]).
pub const MAX_SEARCHED_STEPS: u32 = 12;

/// The split at `step`: the anchors' splits, linearly interpolated between anchors.
fn interpolate(anchors: &[u32], values: &[u32], step: u32) -> u32 {
    match anchors.binary_search(&step) {
        Ok(i) => values[i],
        Err(i) => {
            let (a0, a1) = (anchors[i - 1], anchors[i]);
            let (v0, v1) = (f64::from(values[i - 1]), f64::from(values[i]));
            let t = f64::from(step - a0) / f64::from(a1 - a0);
            (v0 + t * (v1 - v0)).round().max(0.0) as u32
        }
    }
}

/// What a probe needs to build and time decode steps of one plan.
struct Probe<'a> {
    cost: &'a CostModel,
    m: &'a ModelSpec,
    shape: &'a Shape,
    weights_on_gpu: bool,
    host: HostMemory,
}

/// Largest cached length searched exhaustively; longer ones start from a 17-point grid.
const EXHAUSTIVE_UP_TO: u32 = 32;

/// The split of one decode step that the simulated probe runs fastest: every `l` in `0..=s'`
/// for short contexts, else a 17-point grid plus the LP `seed`, then a ternary search between
/// the best point's neighbours. Ties go to the smaller `l` (fewer activations stored).
fn search_split(probe: &Probe, step: u32, seq_len: u32, seed: u32) -> Result<(u32, f64)> {
    let mut cache: std::collections::BTreeMap<u32, f64> = Default::default();
    let mut eval = |l: u32| -> Result<f64> {
        if let Some(&t) = cache.get(&l) {
            return Ok(t);
        }
        let t = probe_step_s(probe, step, l, true)?;
        cache.insert(l, t);
        Ok(t)
    };
    let mut grid: Vec<u32> = if seq_len <= EXHAUSTIVE_UP_TO {
        (0..=seq_len).collect()
    } else {
        (0..=16u64)
            .map(|i| (i * u64::from(seq_len) / 16) as u32)
            .collect()
    };
    grid.push(seed.min(seq_len));
    grid.sort_unstable();
    grid.dedup();
    let mut best = (f64::INFINITY, 0u32);
    for &l in &grid {
        let t = eval(l)?;
        if t < best.0 {
            best = (t, l);
        }
    }
    if seq_len > EXHAUSTIVE_UP_TO {
        let i = grid.binary_search(&best.1).expect("best is a grid point");
        let (mut lo, mut hi) = (grid[i.saturating_sub(1)], grid[(i + 1).min(grid.len() - 1)]);
        while hi - lo > 2 {
            let a = lo + (hi - lo) / 3;
            let b = hi - (hi - lo) / 3;
            if eval(a)? <= eval(b)? {
                hi = b;
            } else {
                lo = a;
            }
        }
        for l in lo..=hi {
            let t = eval(l)?;
            if t < best.0 || (t == best.0 && l < best.1) {
                best = (t, l);
            }
        }
    }
    Ok((best.1, best.0))
}

/// Simulated seconds of decode step `step` with split `l`, in context: the schedule [`plan`]
/// emits for the step before it (prefill at step 1) and the step itself, both recomputing `l`
/// tokens, timed on the engine; the step's time runs from the last kernel of the step before to
/// its own last kernel, so prefetches into it overlap the step before as they do in the whole
/// run, and stores draining after a step's kernels are charged only where they delay a kernel.
fn probe_step_s(probe: &Probe, step: u32, l: u32, keeps_x: bool) -> Result<f64> {
    let (a, b) = (step - 1, step);
    let l_at = |st: u32| l.min(probe.shape.cached_at(st.max(1)));
    let schedule = build_schedule(
        probe.m,
        probe.shape,
        Strategy::Kvpr,
        probe.weights_on_gpu,
        keeps_x,
        probe.host,
        a..=b,
        &l_at,
    );
    let ops = schedule.ops();
    let engines = crate::engine::EngineMap::for_link(&schedule, probe.cost.duplex());
    let spans = crate::engine::run_with(&schedule, &engines, |i| probe.cost.duration(&ops[i].kind))
        .map_err(|e| Error::Solver {
            what: format!("the KVPR split probe at step {step}"),
            message: e.to_string(),
        })?;
    // Each step ends with its last kernel; stores may still drain into the next step.
    let streams = schedule.streams();
    let kernels_end = |step: u32| {
        ops.iter()
            .zip(&spans)
            .filter(|(o, _)| {
                o.tag.step == step && streams[o.stream.index()].kind == StreamKind::Compute
            })
            .map(|(_, s)| s.end)
            .fold(0.0, f64::max)
    };
    Ok(kernels_end(b) - kernels_end(a))
}

/// Peak memory of a strategy. `recompute_activations`: KVPR keeps layer inputs for
/// recomputation (only when some step recomputes).
pub fn memory_plan(
    m: &ModelSpec,
    shape: &Shape,
    strategy: Strategy,
    weights_on_gpu: bool,
    recompute_activations: bool,
) -> MemoryPlan {
    let p = m.dtype_bytes();
    let b = u64::from(shape.batch);
    let k = u64::from(shape.gpu_batches);
    let s = u64::from(shape.prompt);
    let len = shape.max_len();
    let h = u64::from(m.hidden);
    let layers = u64::from(m.num_layers);
    let kv_tok = m.kv_bytes_per_token_layer();
    let mut mem = MemoryPlan::default();
    if weights_on_gpu {
        mem.gpu("weights", m.weight_bytes());
    } else {
        mem.gpu(
            "weights (embeddings + 2 layer buffers)",
            m.embedding_bytes() + 2 * m.layer_weights().total(),
        );
        mem.host("weights", m.weight_bytes());
    }
    if strategy.offloads_kv() {
        mem.gpu("kv buffers (2 layers x 1 GPU batch)", 2 * b * len * kv_tok);
        mem.host("kv cache", shape.total_batch() * len * layers * kv_tok);
    } else {
        mem.gpu("kv cache", shape.total_batch() * len * layers * kv_tok);
    }
    if recompute_activations {
        mem.gpu(
            "recompute activation buffers (2 x 1 GPU batch)",
            2 * b * len * h * p,
        );
        mem.host(
            "recompute activations",
            shape.total_batch() * len * layers * h * p,
        );
    }
    // Prefill of one GPU batch is the activation peak: residual, normed input, QKV, attention
    // output, FFN intermediate and its activation; plus fp32 logits of the last position.
    let per_token =
        h + h + m.q_dim() + 2 * m.kv_dim() + m.q_dim() + m.ffn_up_width() + u64::from(m.ffn_dim);
    let act = b * s * per_token * p + b * u64::from(m.vocab) * 4;
    mem.gpu("activations (prefill peak)", act);
    if k > 1 {
        mem.gpu("hidden states of all GPU batches", k * b * h * p);
    }
    mem
}

fn fits(mem: &MemoryPlan, hw: &HardwareProfile) -> bool {
    mem.gpu_bytes() <= hw.gpu.usable_bytes()
}

/// Plans `strategy` for `shape` of `model` on `hw`.
pub fn plan(
    model: &ModelSpec,
    hw: &HardwareProfile,
    cost: &CostModel,
    shape: &Shape,
    strategy: Strategy,
    options: &Options,
) -> Result<Plan> {
    shape.validate()?;
    match strategy {
        Strategy::HeadInfer => return crate::headinfer::plan(model, hw, cost, shape, options),
        Strategy::Runahead => return crate::runahead::plan(model, hw, cost, shape, options),
        _ => {}
    }
    let mut notes = Vec::new();
    let steps = u64::from(shape.gen_len);
    let est_ops = steps * u64::from(model.num_layers) * u64::from(shape.gpu_batches) * 16;
    if est_ops > MAX_OPS {
        return Err(Error::invalid(
            "--gen",
            shape.gen_len,
            format!(
                "the schedule would have about {est_ops} ops (limit {MAX_OPS}); reduce --gen or --gpu-batches"
            ),
        ));
    }
    if shape.max_len() > u64::from(model.max_position) {
        notes.push(format!(
            "prompt + gen = {} exceeds {}'s max_position_embeddings ({}); simulated anyway",
            shape.max_len(),
            model.name,
            model.max_position
        ));
    }
    let what = format!(
        "{} plan for {} on {}",
        strategy.as_str(),
        model.name,
        hw.name
    );
    let kvpr = strategy == Strategy::Kvpr;
    // Splits, whether any step recomputes, and the memory that needs, for one weight placement.
    let decide = |weights_on_gpu: bool| -> Result<(Vec<StepSplit>, bool, MemoryPlan)> {
        let splits = if kvpr {
            kvpr_splits(
                cost,
                model,
                shape,
                weights_on_gpu,
                options.host_memory,
                options.split,
                options.split_model,
            )?
        } else {
            Vec::new()
        };
        let keeps_x = splits.iter().any(|s| s.split.recompute_tokens > 0);
        let memory = memory_plan(model, shape, strategy, weights_on_gpu, keeps_x);
        Ok((splits, keeps_x, memory))
    };
    let (weights_on_gpu, (splits, keeps_x, memory)) = match (strategy, options.weights) {
        (Strategy::GpuOnly, WeightsPlacement::Offload) => {
            return Err(Error::invalid(
                "--weights",
                "offload",
                "gpu-only keeps everything on the GPU; use --strategy kvpr or full-transfer to offload",
            ));
        }
        (Strategy::GpuOnly, _) | (_, WeightsPlacement::Gpu) => (true, decide(true)?),
        (_, WeightsPlacement::Offload) => (false, decide(false)?),
        (_, WeightsPlacement::Auto) => {
            let resident = decide(true)?;
            if fits(&resident.2, hw) {
                (true, resident)
            } else {
                notes.push(format!(
                    "weights ({:.1} GiB) do not fit next to the KV buffers and activations: offloaded layer by layer (--weights auto)",
                    model.weight_bytes() as f64 / (1u64 << 30) as f64
                ));
                (false, decide(false)?)
            }
        }
    };
    if kvpr && !keeps_x {
        notes.push(
            "no decode step recomputes (l = 0 throughout): KVPR is plain KV transfer here, and no activations are kept for recomputation"
                .into(),
        );
    }
    let gpu_advice = match (strategy, weights_on_gpu) {
        (Strategy::GpuOnly, _) => {
            "offload the KV cache (--strategy kvpr or full-transfer), or reduce --batch / --prompt / --gen"
        }
        (_, true) => {
            "offload the weights (--weights offload or auto), or reduce --batch / --prompt"
        }
        (_, false) => "reduce --batch or --prompt, or use a GPU with more memory",
    };
    memory.check(
        hw,
        &what,
        gpu_advice,
        "reduce --batch, --gpu-batches, --prompt or --gen, or raise host.ram_gib in a profile file",
    )?;
    let schedule = build_schedule(
        model,
        shape,
        strategy,
        weights_on_gpu,
        keeps_x,
        options.host_memory,
        0..=shape.gen_len - 1,
        &|step| splits[(step - 1) as usize].split.recompute_tokens,
    );
    Ok(Plan {
        strategy,
        model: model.name.clone(),
        hardware: hw.name.clone(),
        shape: *shape,
        order: if shape.gpu_batches > 1 {
            Order::ColumnByColumn
        } else {
            Order::RowByRow
        },
        weights_on_gpu,
        host_memory: options.host_memory,
        memory,
        splits,
        headinfer: None,
        runahead: None,
        notes,
        schedule,
    })
}

struct Labels {
    embed: LabelId,
    kernels: [LabelId; 8],
    recompute: LabelId,
    concat: LabelId,
    final_norm: LabelId,
    lm_head: LabelId,
    sample: LabelId,
    w_kv: LabelId,
    w_qo: LabelId,
    w_ffn: LabelId,
    load_x: LabelId,
    load_kv: LabelId,
    store_kv: LabelId,
    store_x: LabelId,
}

/// A two-slot ring: the op that last used each of two buffers.
#[derive(Default)]
struct Ring {
    slots: [Option<OpId>; 2],
    next: usize,
}

impl Ring {
    /// The op that must finish before the next use of the buffer about to be reused.
    fn reuse_dep(&self) -> Option<OpId> {
        self.slots[self.next]
    }

    fn push(&mut self, op: OpId) {
        self.slots[self.next] = Some(op);
        self.next ^= 1;
    }
}

fn build_schedule(
    m: &ModelSpec,
    shape: &Shape,
    strategy: Strategy,
    weights_on_gpu: bool,
    keeps_x: bool,
    host: HostMemory,
    steps: std::ops::RangeInclusive<u32>,
    split_of: &dyn Fn(u32) -> u32,
) -> Schedule {
    let layers = m.num_layers as usize;
    let k = shape.gpu_batches as usize;
    let per_unit = 14;
    let n_steps = (steps.end() + 1).saturating_sub(*steps.start()) as usize;
    let est = n_steps * (layers * k * per_unit + 3 * layers + 4 * k);
    let mut sb = ScheduleBuilder::with_capacity(est, est);
    let c = sb.stream(0, StreamKind::Compute, "gpu0.compute");
    let uses_link = strategy.offloads_kv() || !weights_on_gpu;
    let (h2d, d2h) = if uses_link {
        (
            Some(sb.stream(0, StreamKind::H2D, "gpu0.h2d")),
            Some(sb.stream(0, StreamKind::D2H, "gpu0.d2h")),
        )
    } else {
        (None, None)
    };
    let kernels = layer_kernels(m, 1, 1, 1);
    let lb = Labels {
        embed: sb.label("embed"),
        kernels: kernels.map(|(name, _)| sb.label(name)),
        recompute: sb.label("recompute_kv"),
        concat: sb.label("kv_concat"),
        final_norm: sb.label("final_norm"),
        lm_head: sb.label("lm_head"),
        sample: sb.label("sample"),
        w_kv: sb.label("load_w_kv"),
        w_qo: sb.label("load_w_qo"),
        w_ffn: sb.label("load_w_ffn"),
        load_x: sb.label("load_x"),
        load_kv: sb.label("load_kv"),
        store_kv: sb.label("store_kv"),
        store_x: sb.label("store_x"),
    };
    let p = m.dtype_bytes();
    let b = shape.batch;
    let bu = u64::from(b);
    let h = u64::from(m.hidden);
    let kv_tok = m.kv_bytes_per_token_layer();
    let w = m.layer_weights();
    let kvpr = strategy == Strategy::Kvpr;
    let mut last_store_kv: Vec<Option<OpId>> = vec![None; layers * k];
    let mut last_store_x: Vec<Option<OpId>> = vec![None; layers * k];
    let mut kv_ring = Ring::default();
    let mut w_ring = Ring::default();
    let h2d_op = |bytes: u64, payload| OpKind::H2D {
        bytes,
        payload,
        host,
    };
    let d2h_op = |bytes: u64, payload| OpKind::D2H {
        bytes,
        payload,
        host,
    };

    for step in steps {
        let decode = step > 0;
        let phase = if decode {
            Phase::Decode
        } else {
            Phase::Prefill
        };
        let q_len = if decode { 1 } else { shape.prompt };
        let cached = if decode { shape.cached_at(step) } else { 0 };
        let kv_len = cached + q_len;
        let l = if decode && kvpr { split_of(step) } else { 0 };
        let kernels = layer_kernels(m, b, q_len, kv_len);
        let tag = |layer: u16, batch: u16| Tag {
            phase,
            step,
            layer,
            batch,
            group: Tag::NONE,
        };
        for g in 0..k as u16 {
            sb.push(
                OpKind::Elementwise {
                    bytes: 2 * bu * u64::from(q_len) * h * p,
                },
                c,
                lb.embed,
                tag(Tag::NONE, g),
                &[],
            );
        }
        for j in 0..layers {
            let lj = j as u16;
            // Weights of this layer (offloaded): W_K,W_V first, then (KVPR) the first GPU
            // batch's activations, then W_Q,W_O and the FFN.
            let mut w_kv = None;
            let mut w_qo = None;
            let mut w_ffn = None;
            let mut first_x = None;
            let load_x =
                |sb: &mut ScheduleBuilder, g: usize, deps: [Option<OpId>; 2], h2d: StreamId| {
                    sb.push(
                        h2d_op(bu * u64::from(l) * h * p, Payload::RecomputeActivation),
                        h2d,
                        lb.load_x,
                        tag(lj, g as u16),
                        &deps,
                    )
                };
            if !weights_on_gpu {
                let h2d = h2d.expect("offloaded weights need a link");
                let dep = w_ring.reuse_dep();
                w_kv = Some(sb.push(
                    h2d_op(w.kv_proj, Payload::Weights),
                    h2d,
                    lb.w_kv,
                    tag(lj, 0),
                    &[dep],
                ));
                if l > 0 {
                    first_x = Some(load_x(
                        &mut sb,
                        0,
                        [kv_ring.reuse_dep(), last_store_x[j * k]],
                        h2d,
                    ));
                }
                w_qo = Some(sb.push(
                    h2d_op(w.q_o_proj, Payload::Weights),
                    h2d,
                    lb.w_qo,
                    tag(lj, 0),
                    &[dep],
                ));
                w_ffn = Some(sb.push(
                    h2d_op(w.ffn, Payload::Weights),
                    h2d,
                    lb.w_ffn,
                    tag(lj, 0),
                    &[dep],
                ));
            }
            let mut last_kernel = None;
            for g in 0..k {
                let gt = tag(lj, g as u16);
                let unit = j * k + g;
                let mut x = None;
                let mut kv = None;
                if decode && strategy.offloads_kv() {
                    let h2d = h2d.expect("offloaded KV needs a link");
                    let dep = kv_ring.reuse_dep();
                    if l > 0 {
                        x = if g == 0 && first_x.is_some() {
                            first_x
                        } else {
                            Some(load_x(&mut sb, g, [dep, last_store_x[unit]], h2d))
                        };
                    }
                    if l < cached {
                        kv = Some(sb.push(
                            h2d_op(bu * u64::from(cached - l) * kv_tok, Payload::Cache),
                            h2d,
                            lb.load_kv,
                            gt,
                            &[dep, last_store_kv[unit]],
                        ));
                    }
                }
                let ln1 = sb.push(kernels[0].1, c, lb.kernels[0], gt, &[]);
                if l > 0 {
                    sb.push(recompute_gemm(m, b, l), c, lb.recompute, gt, &[x, w_kv]);
                    sb.push(concat_kernel(m, b, l), c, lb.concat, gt, &[]);
                }
                let qkv = sb.push(kernels[1].1, c, lb.kernels[1], gt, &[w_kv, w_qo]);
                let attn = sb.push(kernels[2].1, c, lb.kernels[2], gt, &[kv]);
                sb.push(kernels[3].1, c, lb.kernels[3], gt, &[]);
                sb.push(kernels[4].1, c, lb.kernels[4], gt, &[]);
                sb.push(kernels[5].1, c, lb.kernels[5], gt, &[w_ffn]);
                sb.push(kernels[6].1, c, lb.kernels[6], gt, &[]);
                last_kernel = Some(sb.push(kernels[7].1, c, lb.kernels[7], gt, &[]));
                if decode && strategy.offloads_kv() {
                    kv_ring.push(attn);
                }
                if let Some(d2h) = d2h.filter(|_| strategy.offloads_kv()) {
                    let new = u64::from(q_len) * bu;
                    last_store_kv[unit] = Some(sb.push(
                        d2h_op(new * kv_tok, Payload::Cache),
                        d2h,
                        lb.store_kv,
                        gt,
                        &[Some(qkv)],
                    ));
                    if keeps_x {
                        last_store_x[unit] = Some(sb.push(
                            d2h_op(new * h * p, Payload::RecomputeActivation),
                            d2h,
                            lb.store_x,
                            gt,
                            &[Some(ln1)],
                        ));
                    }
                }
            }
            if !weights_on_gpu {
                w_ring.push(last_kernel.expect("at least one GPU batch"));
            }
        }
        for g in 0..k as u16 {
            let t = tag(Tag::NONE, g);
            sb.push(
                OpKind::Elementwise {
                    bytes: 2 * bu * h * p,
                },
                c,
                lb.final_norm,
                t,
                &[],
            );
            sb.push(
                OpKind::Gemm {
                    m: b,
                    n: m.vocab,
                    k: m.hidden,
                    batch: 1,
                    dtype: m.dtype,
                },
                c,
                lb.lm_head,
                t,
                &[],
            );
            sb.push(
                OpKind::Elementwise {
                    bytes: bu * u64::from(m.vocab) * 4,
                },
                c,
                lb.sample,
                t,
                &[],
            );
        }
    }
    sb.build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(model: &str, hw: &str) -> (ModelSpec, HardwareProfile, CostModel) {
        let m = ModelSpec::preset(model).unwrap();
        let hw = HardwareProfile::preset(hw).unwrap();
        let c = CostModel::new(&hw);
        (m, hw, c)
    }

    #[test]
    fn kvpr_plan_is_valid_and_splits_grow_with_context() {
        let (m, hw, c) = setup("opt-6.7b", "a100-40g-pcie4");
        let shape = Shape {
            batch: 64,
            gpu_batches: 1,
            prompt: 128,
            gen_len: 8,
        };
        let p = plan(&m, &hw, &c, &shape, Strategy::Kvpr, &Options::default()).unwrap();
        p.schedule.validate().unwrap();
        assert!(p.weights_on_gpu);
        assert_eq!(p.splits.len(), 7);
        assert!(
            p.splits
                .iter()
                .all(|s| s.split.recompute_tokens > 0 && s.split.recompute_tokens < s.seq_len)
        );
        assert!(
            p.splits
                .windows(2)
                .all(|w| w[0].split.recompute_tokens <= w[1].split.recompute_tokens)
        );
    }

    #[test]
    fn gqa_model_gets_zero_split_everywhere() {
        let (m, hw, c) = setup("llama-3-8b", "a100-40g-pcie4");
        let shape = Shape {
            batch: 8,
            gpu_batches: 1,
            prompt: 1024,
            gen_len: 4,
        };
        let p = plan(&m, &hw, &c, &shape, Strategy::Kvpr, &Options::default()).unwrap();
        assert!(p.splits.iter().all(|s| s.split.recompute_tokens == 0));
        assert!(
            p.splits
                .iter()
                .all(|s| s.split.reason == crate::kvpr::Reason::ActivationsNotCheaper)
        );
    }

    #[test]
    fn gpu_only_that_cannot_fit_says_by_how_much() {
        let (m, hw, c) = setup("opt-30b", "a100-40g-pcie4");
        let shape = Shape {
            batch: 64,
            gpu_batches: 1,
            prompt: 512,
            gen_len: 32,
        };
        let e = plan(&m, &hw, &c, &shape, Strategy::GpuOnly, &Options::default()).unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("short by") && s.contains("--strategy kvpr"),
            "{s}"
        );
    }

    #[test]
    fn column_schedule_loads_each_layer_once_per_step() {
        let (m, hw, c) = setup("opt-30b", "a100-40g-pcie4");
        let shape = Shape {
            batch: 8,
            gpu_batches: 4,
            prompt: 64,
            gen_len: 3,
        };
        let p = plan(&m, &hw, &c, &shape, Strategy::Kvpr, &Options::default()).unwrap();
        assert!(!p.weights_on_gpu);
        assert_eq!(p.order, Order::ColumnByColumn);
        let weight_loads = p
            .schedule
            .ops()
            .iter()
            .filter(|o| {
                matches!(
                    o.kind,
                    OpKind::H2D {
                        payload: Payload::Weights,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(weight_loads, 3 * 48 * 3);
        // Every decode (layer, GPU batch) unit fetches its cache as KV, as activations, or both.
        let mut units = std::collections::BTreeSet::new();
        for o in p.schedule.ops() {
            if let OpKind::H2D {
                payload: Payload::Cache | Payload::RecomputeActivation,
                ..
            } = o.kind
            {
                units.insert((o.tag.step, o.tag.layer, o.tag.batch));
            }
        }
        assert_eq!(units.len(), 2 * 48 * 4);
        // With weights crossing the link anyway, the GPU idles: recompute every cached token.
        assert!(
            p.splits
                .iter()
                .all(|s| s.split.recompute_tokens == s.seq_len)
        );
    }
}
