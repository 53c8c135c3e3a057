//! The Schedule IR: a DAG of sized ops on streams — the one contract between planners, the
//! simulator and the executor.
//!
//! Rules (checked by [`Schedule::validate`]):
//! - ops are stored in submission order; an op's dependencies are earlier ops, so every schedule
//!   is a DAG by construction and its index order is a topological order;
//! - each op runs on one stream; ops on one stream run one at a time in submission order (CUDA
//!   stream semantics), so same-stream order needs no explicit dependency;
//! - an op's kind must suit its stream (copies on copy engines, kernels on compute streams).

use serde::{Deserialize, Serialize};

pub use crate::attention::attention_pairs;
use crate::attention::{AttentionBatch, Heads};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::quant::{KvCacheDtype, WeightFormat};

/// Index of an op in its schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OpId(pub u32);

impl OpId {
    /// As a `usize` index.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Index of a stream in its schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct StreamId(pub u16);

impl StreamId {
    /// As a `usize` index.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// Index into a schedule's label table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct LabelId(pub u16);

/// What a stream executes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum StreamKind {
    /// Kernels: GEMMs, attention, elementwise.
    Compute,
    /// Host→device copy engine.
    #[serde(rename = "h2d")]
    H2D,
    /// Device→host copy engine.
    #[serde(rename = "d2h")]
    D2H,
    /// Device→device link to device `to`.
    Peer {
        /// Receiving device.
        to: u16,
    },
}

/// A FIFO stream on one device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stream {
    /// Device index (0 for single-GPU plans).
    pub device: u16,
    /// What it runs.
    pub kind: StreamKind,
    /// Track name in timelines, e.g. `gpu0.compute`.
    pub name: String,
}

/// Host memory kind of a copy's host buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HostMemory {
    /// Page-locked: full DMA bandwidth, asynchronous.
    Pinned,
    /// Ordinary pageable memory: staged through a driver buffer.
    Pageable,
}

/// What a copy carries (KVPR's six transfer kinds, with direction from the op).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Payload {
    /// Layer weights.
    Weights,
    /// KV cache.
    Cache,
    /// Hidden states between layers (offloaded activations).
    Activation,
    /// Layer inputs `X` kept for KV recomputation (KVPR).
    RecomputeActivation,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

/// The kind of a memory-bound kernel: each has its own bytes-per-token shape, efficiency and
/// device floor in the cost model (`[kernels]` of a profile).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ElemKind {
    /// RMSNorm / LayerNorm: read and write the hidden state.
    Norm,
    /// The FFN activation (SiLU-and-multiply for gated MLPs).
    Activation,
    /// Rotary position embedding of queries and keys.
    Rope,
    /// The residual add.
    Add,
    /// The token-embedding gather.
    Embedding,
    /// Anything else: copies inside the GPU (KVPR's concat), sampling.
    #[default]
    Other,
}

impl ElemKind {
    /// Every kind, in table order.
    pub const ALL: [ElemKind; 6] = [
        ElemKind::Norm,
        ElemKind::Activation,
        ElemKind::Rope,
        ElemKind::Add,
        ElemKind::Embedding,
        ElemKind::Other,
    ];

    /// Snake-case name, as in profiles and timelines.
    pub fn as_str(self) -> &'static str {
        match self {
            ElemKind::Norm => "norm",
            ElemKind::Activation => "activation",
            ElemKind::Rope => "rope",
            ElemKind::Add => "add",
            ElemKind::Embedding => "embedding",
            ElemKind::Other => "other",
        }
    }

    /// Position in [`ElemKind::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    fn is_other(&self) -> bool {
        *self == ElemKind::Other
    }
}

/// An op and its sizes. Durations come from a cost model (simulator) or a clock (executor).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "op")]
pub enum OpKind {
    /// Host→device copy.
    #[serde(rename = "h2d")]
    H2D {
        /// Bytes moved.
        bytes: u64,
        /// What is moved.
        payload: Payload,
        /// Host buffer kind.
        host: HostMemory,
    },
    /// Device→host copy.
    #[serde(rename = "d2h")]
    D2H {
        /// Bytes moved.
        bytes: u64,
        /// What is moved.
        payload: Payload,
        /// Host buffer kind.
        host: HostMemory,
    },
    /// `batch` GEMMs of `[m, k] x [k, n]`.
    Gemm {
        /// Rows of the output.
        m: u32,
        /// Columns of the output.
        n: u32,
        /// Inner dimension.
        k: u32,
        /// Independent GEMMs of this shape.
        batch: u32,
        /// Element type.
        dtype: DType,
        /// How the `[k, n]` weight operand is stored (dense: in `dtype`; quantised weights
        /// change its bytes and, for fp8, the tensor rate).
        #[serde(default, skip_serializing_if = "WeightFormat::is_dense")]
        weights: WeightFormat,
    },
    /// Scaled dot-product attention of `q_len` queries against `kv_len` keys per sequence.
    Attention {
        /// Sequences.
        batch: u32,
        /// Query heads.
        q_heads: u16,
        /// Key/value heads.
        kv_heads: u16,
        /// Query tokens per sequence (1 in decode).
        q_len: u32,
        /// Key tokens per sequence.
        kv_len: u32,
        /// Head dimension.
        head_dim: u16,
        /// Causal mask (query `i` sees keys up to `kv_len - q_len + i`).
        causal: bool,
        /// Element type.
        dtype: DType,
        /// Element type of the K and V read from the cache (`auto`: `dtype`).
        #[serde(default, skip_serializing_if = "KvCacheDtype::is_auto")]
        kv: KvCacheDtype,
    },
    /// One attention kernel over a ragged batch (prefill chunks and decode steps of different
    /// lengths together, as vLLM runs them): the batch's statistics, not its sequences.
    BatchAttention {
        /// The sequences' sums and maxima.
        batch: AttentionBatch,
        /// Query heads.
        q_heads: u16,
        /// Key/value heads.
        kv_heads: u16,
        /// Head dimension.
        head_dim: u16,
        /// Element type.
        dtype: DType,
        /// Element type of the K and V read from the cache (`auto`: `dtype`).
        #[serde(default, skip_serializing_if = "KvCacheDtype::is_auto")]
        kv: KvCacheDtype,
    },
    /// A memory-bound kernel touching `bytes` of device memory (norms, activations, rotary
    /// embedding, residual adds, the embedding gather, copies inside the GPU, sampling).
    Elementwise {
        /// Which kernel: each kind has its own fitted efficiency and device floor.
        #[serde(default, skip_serializing_if = "ElemKind::is_other")]
        kind: ElemKind,
        /// Bytes read plus written.
        bytes: u64,
        /// Rows (tokens) it processes, when known (0: unknown): with `bytes` it gives the row
        /// width, which picks the measured table of that width.
        #[serde(default, skip_serializing_if = "is_zero")]
        rows: u32,
    },
    /// A tensor-parallel all-reduce of `bytes` (per rank) across `ranks` GPUs, run by the
    /// collective library on the compute stream.
    AllReduce {
        /// Bytes of the reduced tensor on each rank.
        bytes: u64,
        /// GPUs taking part.
        ranks: u16,
    },
    /// Device→device copy on a peer stream.
    PeerSend {
        /// Bytes moved.
        bytes: u64,
    },
}

/// Device-memory bytes of `batch` GEMMs `[m,k] x [k,n]` in `dtype` with weights stored as
/// `weights`: `(mk + kn + mn)` elements each, the `kn` weights at their own bytes.
#[inline]
pub fn gemm_bytes(m: u32, n: u32, k: u32, batch: u32, dtype: DType, weights: WeightFormat) -> f64 {
    let (m, n, k) = (f64::from(m), f64::from(n), f64::from(k));
    if weights.is_dense() {
        (m * k + k * n + m * n) * f64::from(batch) * dtype.bytes() as f64
    } else {
        ((m * k + m * n) * dtype.bytes() as f64 + k * n * weights.bytes_per_elem(dtype))
            * f64::from(batch)
    }
}

impl OpKind {
    /// Bytes crossing a link (host or peer), zero for kernels.
    pub fn link_bytes(&self) -> u64 {
        match *self {
            OpKind::H2D { bytes, .. } | OpKind::D2H { bytes, .. } | OpKind::PeerSend { bytes } => {
                bytes
            }
            _ => 0,
        }
    }

    /// The heads of an attention op, uniform or batched; `None` for every other op.
    pub fn attention_heads(&self) -> Option<Heads> {
        match *self {
            OpKind::Attention {
                q_heads,
                kv_heads,
                head_dim,
                dtype,
                kv,
                ..
            }
            | OpKind::BatchAttention {
                q_heads,
                kv_heads,
                head_dim,
                dtype,
                kv,
                ..
            } => Some(Heads {
                q_heads,
                kv_heads,
                head_dim,
                dtype,
                kv,
            }),
            _ => None,
        }
    }

    /// Floating-point operations (multiply-add = 2), zero for copies.
    pub fn flops(&self) -> f64 {
        match *self {
            OpKind::Gemm { m, n, k, batch, .. } => {
                2.0 * f64::from(m) * f64::from(n) * f64::from(k) * f64::from(batch)
            }
            OpKind::Attention {
                batch,
                q_heads,
                q_len,
                kv_len,
                head_dim,
                causal,
                ..
            } => {
                4.0 * f64::from(batch)
                    * f64::from(q_heads)
                    * f64::from(head_dim)
                    * attention_pairs(q_len, kv_len, causal)
            }
            OpKind::BatchAttention {
                batch,
                q_heads,
                head_dim,
                ..
            } => batch.flops(q_heads, head_dim),
            _ => 0.0,
        }
    }

    /// Device-memory bytes a kernel reads and writes (copies: 0): GEMM `(mk + kn + mn)` elements
    /// per batch; attention (uniform or batched) Q and O per query head plus K and V per KV head;
    /// elementwise as given.
    #[inline]
    pub fn mem_bytes(&self) -> f64 {
        match *self {
            OpKind::Gemm {
                m,
                n,
                k,
                batch,
                dtype,
                weights,
            } => gemm_bytes(m, n, k, batch, dtype, weights),
            OpKind::Attention {
                batch,
                q_heads,
                kv_heads,
                q_len,
                kv_len,
                head_dim,
                dtype,
                kv,
                ..
            } => {
                let (b, d) = (f64::from(batch), f64::from(head_dim));
                if kv.is_auto() {
                    b * d
                        * (2.0 * f64::from(q_heads) * f64::from(q_len)
                            + 2.0 * f64::from(kv_heads) * f64::from(kv_len))
                        * dtype.bytes() as f64
                } else {
                    b * d
                        * (2.0 * f64::from(q_heads) * f64::from(q_len) * dtype.bytes() as f64
                            + 2.0
                                * f64::from(kv_heads)
                                * f64::from(kv_len)
                                * kv.bytes(dtype) as f64)
                }
            }
            OpKind::BatchAttention {
                batch,
                q_heads,
                kv_heads,
                head_dim,
                dtype,
                kv,
            } => batch.mem_bytes_kv(q_heads, kv_heads, head_dim, dtype, kv),
            OpKind::Elementwise { bytes, .. } => bytes as f64,
            _ => 0.0,
        }
    }

    /// The category KVPR's breakdown reports.
    pub fn category(&self) -> Category {
        match *self {
            OpKind::H2D { payload, .. } => match payload {
                Payload::Weights => Category::LoadWeight,
                Payload::Cache => Category::LoadCache,
                Payload::Activation | Payload::RecomputeActivation => Category::LoadActivation,
            },
            OpKind::D2H { payload, .. } => match payload {
                Payload::Cache => Category::StoreCache,
                Payload::Weights | Payload::Activation | Payload::RecomputeActivation => {
                    Category::StoreActivation
                }
            },
            OpKind::PeerSend { .. } => Category::PeerTransfer,
            OpKind::Gemm { .. }
            | OpKind::Attention { .. }
            | OpKind::BatchAttention { .. }
            | OpKind::Elementwise { .. }
            | OpKind::AllReduce { .. } => Category::Compute,
        }
    }

    /// The stream kind this op may run on (`Peer` matches any peer stream).
    fn fits(&self, stream: StreamKind) -> bool {
        matches!(
            (self, stream),
            (OpKind::H2D { .. }, StreamKind::H2D)
                | (OpKind::D2H { .. }, StreamKind::D2H)
                | (OpKind::PeerSend { .. }, StreamKind::Peer { .. })
                | (
                    OpKind::Gemm { .. }
                        | OpKind::Attention { .. }
                        | OpKind::BatchAttention { .. }
                        | OpKind::Elementwise { .. }
                        | OpKind::AllReduce { .. },
                    StreamKind::Compute
                )
        )
    }
}

/// Reporting categories: KVPR's six plus peer transfers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Category {
    /// Weights host→device.
    LoadWeight,
    /// KV cache host→device.
    LoadCache,
    /// Activations (incl. recompute inputs) host→device.
    LoadActivation,
    /// Kernels.
    Compute,
    /// KV cache device→host.
    StoreCache,
    /// Activations device→host.
    StoreActivation,
    /// Device→device.
    PeerTransfer,
}

impl Category {
    /// All categories in reporting order.
    pub const ALL: [Category; 7] = [
        Category::LoadWeight,
        Category::LoadCache,
        Category::LoadActivation,
        Category::Compute,
        Category::StoreCache,
        Category::StoreActivation,
        Category::PeerTransfer,
    ];

    /// Kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::LoadWeight => "load-weight",
            Category::LoadCache => "load-cache",
            Category::LoadActivation => "load-activation",
            Category::Compute => "compute",
            Category::StoreCache => "store-cache",
            Category::StoreActivation => "store-activation",
            Category::PeerTransfer => "peer-transfer",
        }
    }
}

/// Phase of generation an op belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Prompt processing.
    Prefill,
    /// Token generation.
    Decode,
}

/// Where an op sits in the computation, for reporting. `NONE` marks fields that do not apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Tag {
    /// Decode step (0 = prefill).
    pub step: u32,
    /// Layer, or [`Tag::NONE`].
    pub layer: u16,
    /// GPU batch (column-by-column schedules), or 0.
    pub batch: u16,
    /// Head group / chunk / device-specific index, or [`Tag::NONE`].
    pub group: u16,
    /// Phase.
    pub phase: Phase,
}

impl Tag {
    /// Marks a field that does not apply.
    pub const NONE: u16 = u16::MAX;
}

/// One op of a schedule.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Op {
    /// Kind and sizes.
    pub kind: OpKind,
    /// Stream it runs on.
    pub stream: StreamId,
    /// Name in timelines.
    pub label: LabelId,
    /// Position in the computation.
    pub tag: Tag,
}

/// A DAG of ops that upholds the IR rules: built by [`ScheduleBuilder`] (which checks each op as
/// it is pushed) or read with serde (which runs [`Schedule::validate`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "RawSchedule")]
pub struct Schedule {
    streams: Vec<Stream>,
    labels: Vec<String>,
    ops: Vec<Op>,
    /// `deps[dep_start[i]..dep_start[i+1]]` are op `i`'s dependencies.
    dep_start: Vec<u32>,
    deps: Vec<OpId>,
    /// The op after `i` on the same stream, or `u32::MAX`.
    #[serde(skip)]
    next_in_stream: Vec<u32>,
    /// The first op of each stream, or `u32::MAX`.
    #[serde(skip)]
    first_in_stream: Vec<u32>,
}

/// The serialized form of a [`Schedule`], checked on the way in.
#[derive(Deserialize)]
struct RawSchedule {
    streams: Vec<Stream>,
    labels: Vec<String>,
    ops: Vec<Op>,
    dep_start: Vec<u32>,
    deps: Vec<OpId>,
}

impl TryFrom<RawSchedule> for Schedule {
    type Error = Error;

    fn try_from(r: RawSchedule) -> Result<Self> {
        let (next_in_stream, first_in_stream) = stream_links(&r.ops, r.streams.len());
        let s = Schedule {
            streams: r.streams,
            labels: r.labels,
            ops: r.ops,
            dep_start: r.dep_start,
            deps: r.deps,
            next_in_stream,
            first_in_stream,
        };
        s.validate()?;
        Ok(s)
    }
}

/// Successor links per stream (ops with an out-of-range stream are skipped; validate reports them).
fn stream_links(ops: &[Op], n_streams: usize) -> (Vec<u32>, Vec<u32>) {
    let mut next = vec![u32::MAX; ops.len()];
    let mut first = vec![u32::MAX; n_streams];
    for i in (0..ops.len()).rev() {
        if let Some(f) = first.get_mut(ops[i].stream.index()) {
            next[i] = *f;
            *f = i as u32;
        }
    }
    (next, first)
}

impl Schedule {
    /// Streams, indexed by [`StreamId`].
    pub fn streams(&self) -> &[Stream] {
        &self.streams
    }

    /// Ops in submission (topological) order, indexed by [`OpId`].
    #[inline]
    pub fn ops(&self) -> &[Op] {
        &self.ops
    }

    /// Number of ops.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when there are no ops.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Explicit dependencies of `op`.
    #[inline]
    pub fn deps(&self, op: OpId) -> &[OpId] {
        let i = op.index();
        &self.deps[self.dep_start[i] as usize..self.dep_start[i + 1] as usize]
    }

    /// The op after `op` on its stream.
    #[inline]
    pub fn next_in_stream(&self, op: OpId) -> Option<OpId> {
        let n = self.next_in_stream[op.index()];
        (n != u32::MAX).then_some(OpId(n))
    }

    /// The first op of `stream`.
    pub fn first_in_stream(&self, stream: StreamId) -> Option<OpId> {
        let n = self.first_in_stream[stream.index()];
        (n != u32::MAX).then_some(OpId(n))
    }

    /// Total explicit dependency edges.
    pub fn edge_count(&self) -> usize {
        self.deps.len()
    }

    /// An op's label text.
    pub fn label(&self, op: &Op) -> &str {
        &self.labels[usize::from(op.label.0)]
    }

    /// Checks the IR rules (see module docs). Builders uphold them; a schedule read from a file
    /// or built by hand may not.
    pub fn validate(&self) -> Result<()> {
        if self.dep_start.len() != self.ops.len() + 1
            || self.dep_start.first() != Some(&0)
            || self.dep_start.windows(2).any(|w| w[0] > w[1])
            || *self.dep_start.last().unwrap_or(&0) as usize != self.deps.len()
        {
            return Err(Error::InvalidSchedule(
                "dependency index is malformed".into(),
            ));
        }
        for (i, op) in self.ops.iter().enumerate() {
            let Some(stream) = self.streams.get(op.stream.index()) else {
                return Err(Error::InvalidSchedule(format!(
                    "op {i} names stream {} but there are {}",
                    op.stream.0,
                    self.streams.len()
                )));
            };
            if !op.kind.fits(stream.kind) {
                return Err(Error::InvalidSchedule(format!(
                    "op {i} ({}) cannot run on stream '{}'",
                    self.label(op),
                    stream.name
                )));
            }
            if usize::from(op.label.0) >= self.labels.len() {
                return Err(Error::InvalidSchedule(format!(
                    "op {i} has an unknown label"
                )));
            }
            for d in self.deps(OpId(i as u32)) {
                if d.index() >= i {
                    return Err(Error::InvalidSchedule(format!(
                        "op {i} depends on op {} which is not earlier",
                        d.0
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Builds a [`Schedule`] op by op; dependencies can only name ops already pushed.
#[derive(Debug, Default)]
pub struct ScheduleBuilder {
    streams: Vec<Stream>,
    labels: Vec<String>,
    ops: Vec<Op>,
    dep_start: Vec<u32>,
    deps: Vec<OpId>,
    next_in_stream: Vec<u32>,
    last_in_stream: Vec<u32>,
    first_in_stream: Vec<u32>,
}

impl ScheduleBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        ScheduleBuilder {
            dep_start: vec![0],
            ..Default::default()
        }
    }

    /// An empty builder with room for `ops` ops and `edges` dependencies.
    pub fn with_capacity(ops: usize, edges: usize) -> Self {
        let mut b = Self::new();
        b.ops.reserve(ops);
        b.dep_start.reserve(ops);
        b.next_in_stream.reserve(ops);
        b.deps.reserve(edges);
        b
    }

    /// Adds a stream.
    pub fn stream(&mut self, device: u16, kind: StreamKind, name: impl Into<String>) -> StreamId {
        assert!(
            self.streams.len() < usize::from(u16::MAX),
            "too many streams"
        );
        self.streams.push(Stream {
            device,
            kind,
            name: name.into(),
        });
        self.last_in_stream.push(u32::MAX);
        self.first_in_stream.push(u32::MAX);
        StreamId((self.streams.len() - 1) as u16)
    }

    /// Interns a label.
    pub fn label(&mut self, text: &str) -> LabelId {
        if let Some(i) = self.labels.iter().position(|l| l == text) {
            return LabelId(i as u16);
        }
        self.labels.push(text.to_string());
        LabelId((self.labels.len() - 1) as u16)
    }

    /// Number of ops pushed so far.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// True when no op has been pushed.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Appends an op after `deps` (all earlier ops; `None`s are skipped).
    ///
    /// # Panics
    /// On a planner bug: an unknown stream, an op kind that does not suit its stream, or a
    /// dependency that is not an earlier op. These checks keep every built schedule valid.
    pub fn push(
        &mut self,
        kind: OpKind,
        stream: StreamId,
        label: LabelId,
        tag: Tag,
        deps: &[Option<OpId>],
    ) -> OpId {
        let id = OpId(u32::try_from(self.ops.len()).expect("at most 2^32 - 1 ops"));
        assert!(
            kind.fits(self.streams[stream.index()].kind),
            "op kind does not fit its stream"
        );
        for d in deps.iter().flatten() {
            assert!(d.0 < id.0, "dependency on a later op");
            self.deps.push(*d);
        }
        let s = stream.index();
        match self.last_in_stream[s] {
            u32::MAX => self.first_in_stream[s] = id.0,
            last => self.next_in_stream[last as usize] = id.0,
        }
        self.last_in_stream[s] = id.0;
        self.next_in_stream.push(u32::MAX);
        self.ops.push(Op {
            kind,
            stream,
            label,
            tag,
        });
        self.dep_start.push(self.deps.len() as u32);
        id
    }

    /// Finishes the schedule.
    pub fn build(self) -> Schedule {
        Schedule {
            streams: self.streams,
            labels: self.labels,
            ops: self.ops,
            dep_start: self.dep_start,
            deps: self.deps,
            next_in_stream: self.next_in_stream,
            first_in_stream: self.first_in_stream,
        }
    }
}

/// A two-slot ring for double (ping-pong) buffering: the op that last used each of two buffers.
/// Uses alternate between the buffers; before a buffer is filled again, its previous user must
/// have finished ([`Ring::reuse_dep`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ring {
    slots: [Option<OpId>; 2],
    next: usize,
}

impl Ring {
    /// The op that must finish before the next use of the buffer about to be reused (`None`
    /// while that buffer has not been used).
    pub fn reuse_dep(&self) -> Option<OpId> {
        self.slots[self.next]
    }

    /// Records `op` as the user of the buffer about to be reused and turns to the other one.
    pub fn push(&mut self, op: OpId) {
        self.slots[self.next] = Some(op);
        self.next ^= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_alternates_and_depends_on_the_use_two_back() {
        let mut r = Ring::default();
        assert_eq!(r.reuse_dep(), None);
        r.push(OpId(1));
        assert_eq!(r.reuse_dep(), None);
        r.push(OpId(2));
        assert_eq!(r.reuse_dep(), Some(OpId(1)));
        r.push(OpId(3));
        assert_eq!(r.reuse_dep(), Some(OpId(2)));
    }

    /// A builder with one compute stream and `kind` pushed on it.
    fn one_op(kind: OpKind) -> ScheduleBuilder {
        let mut b = ScheduleBuilder::new();
        let c = b.stream(0, StreamKind::Compute, "c");
        let l = b.label("x");
        let tag = Tag {
            phase: Phase::Decode,
            step: 1,
            layer: 0,
            batch: 0,
            group: Tag::NONE,
        };
        b.push(kind, c, l, tag, &[]);
        b
    }

    fn one_op_json() -> serde_json::Value {
        let b = one_op(OpKind::Elementwise {
            kind: ElemKind::Other,
            bytes: 1,
            rows: 0,
        });
        serde_json::to_value(b.build()).unwrap()
    }

    #[test]
    fn reading_a_schedule_validates_it() {
        let ok: Schedule = serde_json::from_value(one_op_json()).unwrap();
        assert_eq!(ok.first_in_stream(StreamId(0)), Some(OpId(0)));
        assert_eq!(ok.next_in_stream(OpId(0)), None);
        let mut forward = one_op_json();
        forward["deps"] = serde_json::json!([0]);
        forward["dep_start"] = serde_json::json!([0, 1]);
        let e = serde_json::from_value::<Schedule>(forward)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not earlier"), "{e}");
        let mut wrong_stream = one_op_json();
        wrong_stream["ops"][0]["kind"] =
            serde_json::json!({"op": "h2d", "bytes": 1, "payload": "cache", "host": "pinned"});
        let e = serde_json::from_value::<Schedule>(wrong_stream)
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot run"), "{e}");
        let mut no_stream = one_op_json();
        no_stream["ops"][0]["stream"] = serde_json::json!(3);
        let e = serde_json::from_value::<Schedule>(no_stream)
            .unwrap_err()
            .to_string();
        assert!(e.contains("names stream 3"), "{e}");
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn builder_refuses_a_copy_on_a_compute_stream() {
        one_op(OpKind::D2H {
            bytes: 1,
            payload: Payload::Cache,
            host: HostMemory::Pinned,
        });
    }
}
