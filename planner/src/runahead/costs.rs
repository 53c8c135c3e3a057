//! The timing model shared by the optimiser and the schedules: per-chunk costs ([`ChunkCosts`],
//! [`ModelCosts`]) and the closed form of the chain's TTFT ([`ttft`]; derivation in the module
//! docs of [`crate::runahead`]).

use std::cell::Cell;

use kvplan_vocab::cost::{CostModel, LinkCost};
use kvplan_vocab::layers::layer_kernels;
use kvplan_vocab::layers::{attention_index, embed_op, head_ops};
use kvplan_vocab::model::ModelSpec;
use kvplan_vocab::schedule::OpKind;

/// Per-layer costs of one device's chunk, seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChunkCost {
    /// Embedding of the chunk (once).
    pub embed: f64,
    /// `ln1 + qkv_proj` of one layer (needs nothing from other devices).
    pub pre: f64,
    /// Attention of one layer (waits for the predecessor's K,V of that layer).
    pub attn: f64,
    /// `out_proj`, `ln2` and the FFN of one layer.
    pub post: f64,
}

impl ChunkCost {
    /// One layer: `pre + attn + post`.
    pub fn layer(&self) -> f64 {
        self.pre + self.attn + self.post
    }
}

/// Costs the optimiser and the closed form need. Implemented by [`ModelCosts`] (the model on a
/// cost model); tests implement it for synthetic costs. Costs must not decrease when a chunk
/// grows at either end, when it starts later, or when a send carries more tokens.
pub trait ChunkCosts {
    /// Decoder layers `L`.
    fn layers(&self) -> u32;
    /// The costs of chunk `[start, start + len)`.
    fn chunk(&self, len: u32, start: u32) -> ChunkCost;
    /// One send of the K,V of `tokens` tokens of one layer (0 tokens: 0).
    fn link(&self, tokens: u32) -> f64;
    /// Final norm, LM head and sampling on the last device.
    fn head(&self) -> f64;
}

/// [`ChunkCosts`] of a model on a [`CostModel`]; sends take the cost model's peer link
/// ([`CostModel::peer`]), the very link the simulator gives a `PeerSend`.
///
/// The parts of a chunk's cost that depend on its length only (embedding, the kernels before
/// attention, those after it, and the attention op's shape) are memoised by length, so the optimiser's many
/// probes cost one attention roofline each; the values are exactly [`layer_kernels`]'.
#[derive(Debug, Clone)]
pub struct ModelCosts<'a> {
    model: &'a ModelSpec,
    cost: &'a CostModel,
    batch: u32,
    link: LinkCost,
    head: f64,
    memo: LengthMemo,
}

/// Length-only chunk costs: the embedding, `pre`, `post`, and the chunk's attention op (its key
/// length is set per call).
#[derive(Debug, Clone, Copy)]
struct LengthCosts {
    len: u32,
    embed: f64,
    pre: f64,
    post: f64,
    attention: OpKind,
}

/// A direct-mapped memo of [`LengthCosts`] by chunk length: a slot holds the latest length that
/// hashed to it (`None`: empty). Its cells make a `ModelCosts` single-threaded (not `Sync`).
#[derive(Clone)]
struct LengthMemo(Vec<Cell<Option<LengthCosts>>>);

impl std::fmt::Debug for LengthMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LengthMemo({} slots)", self.0.len())
    }
}

/// Slots of the length memo (a power of two).
const MEMO_SLOTS: usize = 1 << 12;

impl<'a> ModelCosts<'a> {
    /// Costs of `batch` sequences of `model` on `cost` (peer link included).
    pub fn new(model: &'a ModelSpec, cost: &'a CostModel, batch: u32) -> Self {
        let head = head_ops(model, batch)
            .iter()
            .map(|(_, k)| cost.duration(k))
            .sum();
        ModelCosts {
            model,
            cost,
            batch,
            link: cost.peer(),
            head,
            memo: LengthMemo(vec![Cell::new(None); MEMO_SLOTS]),
        }
    }

    /// The length-only costs of a chunk of `len` tokens (memoised).
    fn length_costs(&self, len: u32) -> LengthCosts {
        let slot = &self.memo.0[(len.wrapping_mul(0x9E37_79B9) >> 20) as usize % MEMO_SLOTS];
        if let Some(e) = slot.get().filter(|e| e.len == len) {
            return e;
        }
        let k = layer_kernels(self.model, self.batch, len, len);
        let a = attention_index(&k);
        let d = |ops: &[(&str, OpKind)]| ops.iter().map(|o| self.cost.duration(&o.1)).sum();
        let e = LengthCosts {
            len,
            embed: self.cost.duration(&embed_op(self.model, self.batch, len)),
            pre: d(&k[..a]),
            post: d(&k[a + 1..]),
            attention: k[a].1,
        };
        slot.set(Some(e));
        e
    }

    /// The peer link.
    pub fn link_cost(&self) -> LinkCost {
        self.link
    }

    /// K,V bytes of `tokens` tokens of one layer.
    pub fn kv_bytes(&self, tokens: u32) -> u64 {
        u64::from(self.batch) * u64::from(tokens) * self.model.kv_bytes_per_token_layer()
    }
}

impl ChunkCosts for ModelCosts<'_> {
    fn layers(&self) -> u32 {
        self.model.num_layers
    }

    fn chunk(&self, len: u32, start: u32) -> ChunkCost {
        let e = self.length_costs(len);
        let mut attention = e.attention;
        match &mut attention {
            OpKind::Attention { kv_len, .. } => *kv_len = start + len,
            _ => unreachable!("attention_index points at the attention op"),
        }
        ChunkCost {
            embed: e.embed,
            pre: e.pre,
            attn: self.cost.duration(&attention),
            post: e.post,
        }
    }

    fn link(&self, tokens: u32) -> f64 {
        self.link.time(self.kv_bytes(tokens))
    }

    fn head(&self) -> f64 {
        self.head
    }
}

/// [`ChunkCosts`] in units of `unit` tokens: unit `u` is tokens `[u * unit, (u + 1) * unit)`.
/// Searching a `n`-unit context is a search over partitions whose boundaries are multiples of
/// `unit` (block granularity), with the real costs.
#[derive(Debug, Clone)]
pub struct Blocks<C> {
    /// The token-level costs.
    pub inner: C,
    /// Tokens per unit.
    pub unit: u32,
}

impl<C: ChunkCosts> ChunkCosts for Blocks<C> {
    fn layers(&self) -> u32 {
        self.inner.layers()
    }

    fn chunk(&self, len: u32, start: u32) -> ChunkCost {
        self.inner.chunk(len * self.unit, start * self.unit)
    }

    fn link(&self, tokens: u32) -> f64 {
        self.inner.link(tokens * self.unit)
    }

    fn head(&self) -> f64 {
        self.inner.head()
    }
}

// ---- the closed form ------------------------------------------------------------------------

/// Start token of each chunk.
pub(crate) fn starts(partition: &[u32]) -> Vec<u32> {
    let mut s = 0;
    partition
        .iter()
        .map(|&c| {
            let st = s;
            s += c;
            st
        })
        .collect()
}

/// TTFT of `partition` (tokens per device, in chain order, each at least 1) by the closed form
/// of the module docs: equal to simulating [`chain_schedule`](super::chain_schedule) of it.
///
/// # Panics
/// If `partition` is empty or has a zero chunk.
pub fn ttft<C: ChunkCosts + ?Sized>(costs: &C, partition: &[u32]) -> f64 {
    assert!(
        !partition.is_empty() && partition.iter().all(|&c| c > 0),
        "a partition has at least one chunk and no empty chunk"
    );
    let l1 = f64::from(costs.layers().saturating_sub(1));
    let st = starts(partition);
    let last = partition.len() - 1;
    let (mut u, mut rho, mut z) = (0.0f64, 0.0f64, f64::NEG_INFINITY);
    for k in (0..=last).rev() {
        let cc = costs.chunk(partition[k], st[k]);
        if k == last {
            u = cc.attn + cc.post;
            rho = cc.layer();
        } else {
            let x = costs.link(st[k] + partition[k]);
            u += x;
            rho = rho.max(cc.layer()).max(x);
        }
        z = z.max(cc.embed + cc.pre + u + l1 * rho);
    }
    costs.head() + z
}

/// TTFT of `partition` by the per-layer recurrence (`O(P * L)`): the start of every op of the
/// schedule, layer by layer. Equal to [`ttft`]; kept as its independent check.
pub fn ttft_by_layers<C: ChunkCosts + ?Sized>(costs: &C, partition: &[u32]) -> f64 {
    let layers = costs.layers() as usize;
    let st = starts(partition);
    let last = partition.len() - 1;
    // Arrival of device i - 1's send of each layer (device 0 waits for nothing).
    let mut arrive: Vec<f64> = vec![0.0; layers];
    let mut out = 0.0;
    for i in 0..=last {
        let cc = costs.chunk(partition[i], st[i]);
        let x = if i < last {
            costs.link(st[i] + partition[i])
        } else {
            0.0
        };
        let mut compute = cc.embed;
        let mut peer = 0.0f64;
        let mut sends = Vec::with_capacity(layers);
        for (j, &recv) in arrive.iter().enumerate() {
            let q = compute + cc.pre;
            if i < last {
                peer = q.max(recv).max(peer) + x;
                sends.push(peer);
            }
            compute = if i == last || j + 1 < layers {
                q.max(recv) + cc.attn + cc.post
            } else {
                q
            };
        }
        if i == last {
            out = compute + costs.head();
        }
        arrive = sends;
    }
    out
}

/// `n` tokens in `p` chunks as equal as possible (earlier chunks get the remainder).
pub fn even_partition(n: u32, p: u32) -> Vec<u32> {
    let p = p.clamp(1, n.max(1));
    (0..p).map(|i| n / p + u32::from(i < n % p)).collect()
}
