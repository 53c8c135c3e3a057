//! KV-Runahead (METHODS.md section 3): parallel prefill over `P` devices with an uneven context
//! partition and a point-to-point KV chain.
//!
//! # The schedule
//!
//! Device `i` holds the chunk `[s_i, s_i + c_i)` of the context. Per layer `j` it runs, on its
//! compute stream, `ln1` and `qkv_proj` of its `c_i` rows (no dependency on other devices), then
//! the causal attention of its `c_i` queries over `s_i + c_i` keys, which waits for the
//! accumulated K,V of chunks `< i` of layer `j` sent by device `i - 1`, then `out_proj` and the
//! FFN. On its peer stream (to `i + 1`) it sends the accumulated K,V of chunks `<= i` of layer `j`
//! (`s_i + c_i` tokens) once its own `qkv_proj` of layer `j` is done and device `i - 1`'s send of
//! layer `j` has arrived; sends are asynchronous and overlap compute. The last device runs the
//! final norm, LM head and sampling: the end of `sample` is the TTFT. Non-last devices skip the
//! attention and FFN of the last layer (their outputs feed nothing: the first token needs only
//! the last position, and the cache needs only K,V), so the prefill makespan equals the TTFT.
//! With `gen > 1`, decode runs on the last device, which holds the whole KV cache.
//!
//! # Closed form (equal to simulating the schedule)
//!
//! Every layer of a device costs the same: `e_i` (embedding), `a_i` (`ln1 + qkv_proj`), `t_i`
//! (attention), `g_i` (`out_proj` .. `ffn_down`), `w_i = a_i + t_i + g_i`, and the send
//! `x_i = latency + (s_i + c_i) K,V bytes / bandwidth`. The schedule is a DAG whose ops each
//! have their own stream (one engine per stream), so every op starts at the longest path to it.
//! A path to the end crosses each device `k..=D` it visits once through its peer stream (one
//! `x_i` each), starts at some device `k` with `e_k + a_k`, ends with `t_D + g_D + h`, and makes
//! exactly `L - 1` layer steps, each along one device's compute chain (`w_i`) or peer chain
//! (`x_i`). A maximal path puts every step on the slowest chain it visits, so
//!
//! ```text
//! TTFT = h + max_k [ e_k + a_k + U_k + (L - 1) rho_k ]
//! U_k   = t_D + g_D + sum_{i=k}^{D-1} x_i          (the fill: one layer through the chain)
//! rho_k = max( w_k..w_D, x_k..x_{D-1} )            (the slowest chain from k on)
//! ```
//!
//! `D + 1` devices, `h` = final norm + LM head + sample. [`ttft`] evaluates this in `O(P)`;
//! [`ttft_by_layers`] runs the per-layer recurrence; tests hold both to the simulator.
//!
//! # The optimiser
//!
//! Placing devices from the last to the first, a partial partition (devices `k..=D`, chunk `k`
//! starting at `s_k`) is summarised by `(U_k, rho_k, Z_k)` with `Z_k = max_{k' >= k} term_k'`.
//! The devices still to be placed see the suffix only through `U_k` and `rho_k`, every later
//! term is non-decreasing in both (`U_{k-1} = U_k + x_{k-1}`, `rho_{k-1} = max(rho_k, ..)`), and
//! the TTFT is `h + max(Z_k, later terms)`: a summary no larger in all three coordinates than
//! another at the same boundary is never worse, so keeping the whole Pareto front of
//! `(U, rho, Z)` per (device count, boundary) loses nothing. [`optimise`] runs this DP on a grid
//! of at most [`GRID_CELLS`] cells; it is **exact over every partition whose boundaries lie on
//! the grid**, i.e. over every partition when the context has at most [`GRID_CELLS`] tokens
//! (tested against brute force over all compositions, at token and at block granularity). States
//! that cannot beat the equal-chunk incumbent are dropped (a valid bound: later terms only add).
//! Longer contexts are then refined by the same exact DP over windows of `±`[`WINDOW`] steps
//! around every boundary, all boundaries moving at once, the step shrinking 4x per round down to
//! one token (a round whose optimum reaches a window's edge is repeated at the same step; rounds
//! at one token repeat while they improve). The result is therefore optimal on the grid, no
//! worse than the grid optimum, and optimal against every simultaneous move of all boundaries
//! by up to `WINDOW` tokens; the equal-chunk partition is always a candidate, so it is never
//! worse than even chunks. Tests check that 48 coarse cells plus refinement reach the same TTFT
//! as a 128-cell exact grid (to 1e-6), and beat the exact 512-token block optimum.
//! The paper's hierarchical grid search has none of these guarantees and samples the TTFT by
//! running the model; here each candidate costs `O(1)` cost-model calls.
//!
//! One DP pass yields the best partition for every device count `1..=P`. The plan uses the
//! fewest devices within [`DEVICE_TOLERANCE`] of the best (never worse than the even chain), and
//! one device when the best multi-device plan gains less than [`MIN_GAIN`] over it.

use serde::Serialize;

use crate::cost::{CostModel, LinkCost};
use crate::error::{Error, Result};
use crate::hardware::HardwareProfile;
use crate::memory::MemoryPlan;
use crate::model::ModelSpec;
use crate::plan::{Options, Order, Plan, Shape, Strategy, WeightsPlacement, layer_kernels};
use crate::schedule::{OpId, OpKind, Phase, Schedule, ScheduleBuilder, StreamId, StreamKind, Tag};

/// Most cells of the coarse grid of [`optimise`] (contexts up to this many tokens are searched
/// exactly, token by token).
pub const GRID_CELLS: u32 = 48;

/// Finer steps on each side of a boundary in a refinement round of [`optimise`].
pub const WINDOW: u32 = 6;

/// Step reduction per refinement round of [`optimise`].
const REFINE: u32 = 4;

/// Most refinement rounds per device count.
const MAX_ROUNDS: u32 = 64;

/// An extra device must cut the TTFT by at least this fraction of the best plan's TTFT to be
/// used (fewer devices within this margin are preferred).
pub const DEVICE_TOLERANCE: f64 = 0.01;

/// A multi-device plan must beat one device by at least this fraction of the single-device
/// TTFT, or the prompt stays on one device: a few percent of TTFT is not worth tying up more
/// GPUs and a chain of peer transfers (the published behaviour: short prompts on a slow link
/// stay on one GPU).
pub const MIN_GAIN: f64 = 0.10;

/// KV-Runahead options.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunaheadOptions {
    /// Devices available (`P`).
    pub devices: u32,
    /// Device-to-device bandwidth override, GB/s (else the profile's peer link).
    pub link_gbps: Option<f64>,
    /// Device-to-device latency override, microseconds.
    pub link_latency_us: Option<f64>,
}

impl Default for RunaheadOptions {
    fn default() -> Self {
        RunaheadOptions {
            devices: 4,
            link_gbps: None,
            link_latency_us: None,
        }
    }
}

/// TTFT of each method, seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TtftByMethod {
    /// The chosen KV-Runahead partition.
    pub runahead: f64,
    /// All prefill on one device.
    pub single_device: f64,
    /// Equal chunks with the same chain.
    pub even_chain: f64,
    /// Tensor/sequence-parallel prefill with an all-gather of K, V.
    pub tensor_parallel: f64,
}

/// The decisions of a KV-Runahead plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunaheadDetails {
    /// Devices the chosen plan uses (may be fewer than offered).
    pub devices_used: u32,
    /// Context tokens per device, in chain order; sums to the context.
    pub partition: Vec<u32>,
    /// Predicted TTFT per method.
    pub ttft_s: TtftByMethod,
    /// `single_device / runahead`.
    pub speedup: f64,
    /// Devices offered (`--devices`, capped at the context length). The `even_chain` and
    /// `tensor_parallel` baselines use all of them.
    pub devices_offered: u32,
    /// `tensor_parallel / runahead` (the comparison the KV-Runahead paper reports).
    pub speedup_vs_tensor_parallel: f64,
    /// Best KV-Runahead TTFT with `1, 2, ..., devices_offered` devices, seconds.
    pub ttft_by_devices_s: Vec<f64>,
    /// Peer link used: bandwidth, GB/s.
    pub link_gbps: f64,
    /// Peer link used: per-transfer latency, microseconds.
    pub link_latency_us: f64,
    /// Bytes the chosen plan sends between devices (all layers).
    pub peer_bytes: u64,
    /// Bytes the tensor-parallel baseline sends between devices (all layers).
    pub tensor_parallel_peer_bytes: u64,
    /// What limits the chosen plan: `compute` (a device's layer work) or `link` (a send).
    pub bottleneck: &'static str,
    /// How the partition was found.
    pub search: SearchInfo,
}

/// How [`optimise`] searched.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchInfo {
    /// Cells of the coarse grid (the context when it has at most [`GRID_CELLS`] tokens).
    pub grid_cells: u32,
    /// Tokens per coarse cell (1: every partition was searched exactly).
    pub cell_tokens: u32,
    /// Whether the coarse search covered every partition (context <= [`GRID_CELLS`] tokens).
    pub exact: bool,
    /// Refinement rounds run for the chosen device count.
    pub refine_rounds: u32,
    /// Pareto states kept by the coarse DP (all device counts).
    pub states: u64,
    /// Whether the chosen partition is a local optimum at token resolution (see
    /// [`DeviceOptimum::local_optimum`]).
    pub local_optimum: bool,
}

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

/// [`ChunkCosts`] of a model on a [`CostModel`], with a peer link.
#[derive(Debug, Clone)]
pub struct ModelCosts<'a> {
    model: &'a ModelSpec,
    cost: &'a CostModel,
    batch: u32,
    link: LinkCost,
    head: f64,
}

impl<'a> ModelCosts<'a> {
    /// Costs of `batch` sequences of `model` on `cost` with the peer link `link`.
    pub fn new(model: &'a ModelSpec, cost: &'a CostModel, batch: u32, link: LinkCost) -> Self {
        let head = head_ops(model, batch)
            .iter()
            .map(|(_, k)| cost.duration(k))
            .sum();
        ModelCosts {
            model,
            cost,
            batch,
            link,
            head,
        }
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
        let k = layer_kernels(self.model, self.batch, len, start + len);
        let d = |i: usize| self.cost.duration(&k[i].1);
        ChunkCost {
            embed: self.cost.duration(&embed_op(self.model, self.batch, len)),
            pre: d(0) + d(1),
            attn: d(2),
            post: d(3) + d(4) + d(5) + d(6) + d(7),
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

fn embed_op(m: &ModelSpec, batch: u32, len: u32) -> OpKind {
    OpKind::Elementwise {
        bytes: 2 * u64::from(batch) * u64::from(len) * u64::from(m.hidden) * m.dtype_bytes(),
    }
}

fn head_ops(m: &ModelSpec, batch: u32) -> [(&'static str, OpKind); 3] {
    let b = u64::from(batch);
    [
        (
            "final_norm",
            OpKind::Elementwise {
                bytes: 2 * b * u64::from(m.hidden) * m.dtype_bytes(),
            },
        ),
        (
            "lm_head",
            OpKind::Gemm {
                m: batch,
                n: m.vocab,
                k: m.hidden,
                batch: 1,
                dtype: m.dtype,
            },
        ),
        (
            "sample",
            OpKind::Elementwise {
                bytes: b * u64::from(m.vocab) * 4,
            },
        ),
    ]
}

// ---- the closed form ------------------------------------------------------------------------

/// Start token of each chunk.
fn starts(partition: &[u32]) -> Vec<u32> {
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
/// of the module docs: equal to simulating [`chain_schedule`] of it.
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

// ---- the optimiser --------------------------------------------------------------------------

/// A Pareto point of the DP: the summary `(U, rho, Z)` of a suffix of devices and where it came
/// from.
#[derive(Debug, Clone, Copy)]
struct Pt {
    u: f64,
    rho: f64,
    z: f64,
    from_pos: u32,
    from_pt: u32,
}

/// One level of the DP: `m` devices placed from the end; per left boundary, the Pareto front.
struct Level {
    positions: Vec<u32>,
    fronts: Vec<Vec<Pt>>,
}

/// Keeps the points no other point beats in all of `u`, `rho`, `z` (ties keep one).
fn pareto(mut c: Vec<Pt>) -> Vec<Pt> {
    c.sort_by(|a, b| {
        a.u.total_cmp(&b.u)
            .then(a.rho.total_cmp(&b.rho))
            .then(a.z.total_cmp(&b.z))
    });
    let mut out = Vec::new();
    // (rho ascending, z strictly descending) of the points kept so far.
    let mut stair: Vec<(f64, f64)> = Vec::new();
    for p in c {
        let i = stair.partition_point(|e| e.0 <= p.rho);
        if i > 0 && stair[i - 1].1 <= p.z {
            continue;
        }
        out.push(p);
        let j = stair.partition_point(|e| e.0 < p.rho);
        let mut k = j;
        while k < stair.len() && stair[k].1 >= p.z {
            k += 1;
        }
        stair.splice(j..k, [(p.rho, p.z)]);
    }
    out
}

/// The DP of the module docs. `positions[m - 1]`: candidate left boundaries of the `m`-th
/// device from the end (0 closes a partition of `m` devices). `zmax[m - 1]`: states whose
/// `max(Z, U + (L-1) rho)` exceeds it cannot beat an incumbent and are dropped. Returns the
/// levels (for reconstruction) and the number of states kept.
fn run_dp<C: ChunkCosts + ?Sized>(
    costs: &C,
    n: u32,
    positions: &[Vec<u32>],
    zmax: &[f64],
    cache: &mut dyn FnMut(u32, u32) -> (ChunkCost, f64),
) -> (Vec<Level>, u64) {
    let l1 = f64::from(costs.layers().saturating_sub(1));
    let mut levels: Vec<Level> = Vec::with_capacity(positions.len() + 1);
    levels.push(Level {
        positions: vec![n],
        fronts: vec![vec![Pt {
            u: 0.0,
            rho: 0.0,
            z: f64::NEG_INFINITY,
            from_pos: 0,
            from_pt: 0,
        }]],
    });
    let mut states = 0u64;
    for (m, pos) in positions.iter().enumerate() {
        let prev = &levels[m];
        let last = m == 0;
        let mut fronts = Vec::with_capacity(pos.len());
        for &p in pos {
            let mut cand = Vec::new();
            for (qi, &q) in prev.positions.iter().enumerate() {
                if q <= p || (q == 0 && !last) || prev.fronts[qi].is_empty() {
                    continue;
                }
                let (cc, x) = cache(p, q);
                let e = cc.embed + cc.pre;
                for (pi, pt) in prev.fronts[qi].iter().enumerate() {
                    let (u, rho) = if last {
                        (cc.attn + cc.post, cc.layer())
                    } else {
                        (pt.u + x, pt.rho.max(cc.layer()).max(x))
                    };
                    let z = pt.z.max(e + u + l1 * rho);
                    let bound = if p == 0 { z } else { z.max(u + l1 * rho) };
                    if bound > zmax[m] {
                        continue;
                    }
                    cand.push(Pt {
                        u,
                        rho,
                        z,
                        from_pos: qi as u32,
                        from_pt: pi as u32,
                    });
                }
            }
            let f = if p == 0 {
                // A closed partition: only its TTFT matters.
                cand.into_iter()
                    .min_by(|a, b| a.z.total_cmp(&b.z))
                    .into_iter()
                    .collect()
            } else {
                pareto(cand)
            };
            states += f.len() as u64;
            fronts.push(f);
        }
        levels.push(Level {
            positions: pos.clone(),
            fronts,
        });
    }
    (levels, states)
}

/// The best closed partition of `m` devices in `levels` (level `m` must hold position 0).
fn closed(levels: &[Level], m: usize, head: f64) -> Option<(f64, Vec<u32>)> {
    let lv = &levels[m];
    let pi = lv.positions.iter().position(|&p| p == 0)?;
    let best = lv.fronts[pi].first()?;
    let mut bounds = vec![0u32];
    let (mut pos, mut pt) = (best.from_pos as usize, best.from_pt as usize);
    for l in (1..m).rev() {
        bounds.push(levels[l].positions[pos]);
        let p = levels[l].fronts[pos][pt];
        pos = p.from_pos as usize;
        pt = p.from_pt as usize;
    }
    bounds.push(levels[0].positions[0]);
    Some((
        head + best.z,
        bounds.windows(2).map(|w| w[1] - w[0]).collect(),
    ))
}

/// The best partition found for one device count.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceOptimum {
    /// Tokens per device, in chain order.
    pub partition: Vec<u32>,
    /// Its TTFT ([`ttft`]), seconds.
    pub ttft_s: f64,
    /// Refinement rounds run.
    pub refine_rounds: u32,
    /// Whether the last refinement round (at one token) found no better partition: no
    /// simultaneous move of the boundaries by up to [`WINDOW`] tokens improves it. Always true
    /// when the coarse grid is every token.
    pub local_optimum: bool,
}

/// What [`optimise`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Optimum {
    /// Best partition for `1, 2, ..., max_devices` devices.
    pub by_devices: Vec<DeviceOptimum>,
    /// Cells of the coarse grid.
    pub grid_cells: u32,
    /// Tokens per coarse cell (the largest cell).
    pub cell_tokens: u32,
    /// Whether the coarse grid is every token (the search is exact).
    pub exact: bool,
    /// Pareto states kept by the coarse DP.
    pub states: u64,
}

/// Finds the TTFT-minimising partition of `context` tokens for every device count
/// `1..=max_devices` (capped at `context`): exact DP on a grid, refined to token resolution
/// (module docs).
///
/// # Panics
/// If `context` or `max_devices` is 0.
pub fn optimise<C: ChunkCosts + ?Sized>(costs: &C, context: u32, max_devices: u32) -> Optimum {
    optimise_on_grid(costs, context, max_devices, GRID_CELLS)
}

/// [`optimise`] with a coarse grid of at most `grid_cells` cells (exact for contexts of at most
/// `grid_cells` tokens; larger grids cost about `cells^3`).
///
/// # Panics
/// If `context`, `max_devices` or `grid_cells` is 0.
pub fn optimise_on_grid<C: ChunkCosts + ?Sized>(
    costs: &C,
    context: u32,
    max_devices: u32,
    grid_cells: u32,
) -> Optimum {
    assert!(
        context > 0 && max_devices > 0 && grid_cells > 0,
        "a context, a device and a grid"
    );
    let n = context;
    let pmax = max_devices.min(n) as usize;
    let head = costs.head();
    let g = n.min(grid_cells);
    let grid: Vec<u32> = (0..=g)
        .map(|i| ((u64::from(i) * u64::from(n)) / u64::from(g)) as u32)
        .collect();
    let cell_tokens = grid.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(1);
    // Incumbents: equal chunks for every device count; a state that cannot beat the worst
    // incumbent of the device counts it can still close at is dropped.
    let even: Vec<f64> = (1..=pmax as u32)
        .map(|p| ttft(costs, &even_partition(n, p)))
        .collect();
    let mut zmax = vec![0.0; pmax];
    let mut worst = f64::NEG_INFINITY;
    for m in (0..pmax).rev() {
        worst = worst.max(even[m]);
        zmax[m] = (worst - head) * (1.0 + 1e-12) + 1e-15;
    }
    // Coarse level: every grid point for every device count; 0 closes.
    let interior: Vec<u32> = grid[..g as usize].to_vec(); // 0 and the interior points
    let positions: Vec<Vec<u32>> = (0..pmax)
        .map(|m| {
            if m + 1 == pmax {
                vec![0]
            } else {
                interior.clone()
            }
        })
        .collect();
    let gi = |t: u32| grid.binary_search(&t).expect("a grid point");
    let mut table: Vec<Option<(ChunkCost, f64)>> = vec![None; grid.len() * grid.len()];
    let mut cache = |p: u32, q: u32| {
        let idx = gi(p) * grid.len() + gi(q);
        *table[idx].get_or_insert_with(|| (costs.chunk(q - p, p), costs.link(q)))
    };
    let (levels, states) = run_dp(costs, n, &positions, &zmax, &mut cache);
    let mut by_devices = Vec::with_capacity(pmax);
    for m in 1..=pmax {
        let mut best = match closed(&levels, m, head) {
            Some((t, part)) => DeviceOptimum {
                partition: part,
                ttft_s: t,
                refine_rounds: 0,
                local_optimum: true,
            },
            None => DeviceOptimum {
                partition: even_partition(n, m as u32),
                ttft_s: even[m - 1],
                refine_rounds: 0,
                local_optimum: true,
            },
        };
        if cell_tokens > 1 && m > 1 {
            best.local_optimum = false;
            refine(costs, n, cell_tokens, &mut best);
        }
        let e = even_partition(n, m as u32);
        if even[m - 1] < best.ttft_s {
            best.partition = e;
            best.ttft_s = even[m - 1];
            best.local_optimum = false;
        }
        by_devices.push(best);
    }
    Optimum {
        by_devices,
        grid_cells: g,
        cell_tokens,
        exact: cell_tokens == 1,
        states,
    }
}

/// Refines `best` by the exact DP over windows of [`WINDOW`] steps on each side of every
/// boundary: the step starts at a quarter of a coarse cell and shrinks 4x per round down to one
/// token; a round whose best partition reaches the edge of a window is repeated at the same
/// step (the optimum may lie further out), and rounds at one token repeat while they improve.
fn refine<C: ChunkCosts + ?Sized>(costs: &C, n: u32, cell: u32, best: &mut DeviceOptimum) {
    let m = best.partition.len();
    let head = costs.head();
    let mut fine = (cell / REFINE).max(1);
    let mut repeats = 0;
    for _ in 0..MAX_ROUNDS {
        let bounds: Vec<u32> = starts(&best.partition)[1..].to_vec(); // s_1 .. s_D
        let d = bounds.len();
        // Level k (1-based from the end) places the left boundary s_{d+1-k}.
        let mut positions: Vec<Vec<u32>> = Vec::with_capacity(m);
        for lvl in 1..m {
            let b = bounds[d - lvl];
            let idx = (d - lvl + 1) as i64; // boundary index (s_1 is index 1)
            let lo = idx; // room for idx devices before it
            let hi = i64::from(n) - (m as i64 - idx); // room for the devices after it
            let v: Vec<u32> = (-(WINDOW as i64)..=WINDOW as i64)
                .map(|j| i64::from(b) + j * i64::from(fine))
                .filter(|&t| t >= lo && t <= hi)
                .map(|t| t as u32)
                .collect();
            positions.push(v);
        }
        positions.push(vec![0]);
        let zmax = vec![(best.ttft_s - head) * (1.0 + 1e-12) + 1e-15; m];
        let mut cache = |p: u32, q: u32| (costs.chunk(q - p, p), costs.link(q));
        let (levels, _) = run_dp(costs, n, &positions, &zmax, &mut cache);
        best.refine_rounds += 1;
        let mut edge = false;
        let mut moved = false;
        if let Some((_, part)) = closed(&levels, m, head) {
            let t = ttft(costs, &part);
            // Move only for a real improvement (ties would wander).
            if t < best.ttft_s * (1.0 - 1e-12) {
                let nb = starts(&part);
                edge = nb[1..]
                    .iter()
                    .zip(&bounds)
                    .any(|(&a, &b)| a.abs_diff(b) >= (WINDOW - 1) * fine);
                best.partition = part;
                best.ttft_s = t;
                moved = true;
            }
        }
        if edge && repeats < 8 {
            repeats += 1;
            continue;
        }
        if fine == 1 {
            if !moved {
                best.local_optimum = true;
                break;
            }
            continue;
        }
        fine = (fine / REFINE).max(1);
        repeats = 0;
    }
}

// ---- schedules ------------------------------------------------------------------------------

struct Labels {
    embed: crate::schedule::LabelId,
    kernels: [crate::schedule::LabelId; 8],
    send: crate::schedule::LabelId,
    head: [crate::schedule::LabelId; 3],
}

fn labels(sb: &mut ScheduleBuilder, m: &ModelSpec) -> Labels {
    let k = layer_kernels(m, 1, 1, 1);
    let h = head_ops(m, 1);
    Labels {
        embed: sb.label("embed"),
        kernels: k.map(|(name, _)| sb.label(name)),
        send: sb.label("kv_send"),
        head: h.map(|(name, _)| sb.label(name)),
    }
}

fn tag(phase: Phase, step: u32, layer: u16, device: u16) -> Tag {
    Tag {
        phase,
        step,
        layer,
        batch: 0,
        group: device,
    }
}

/// The KV-Runahead schedule of `partition` (module docs): one compute stream per device
/// (`gpu{i}.compute`), one peer stream per link (`gpu{i}.peer{i+1}`), ops tagged with the device
/// in `group`; with `gen_len > 1`, `gen_len - 1` decode steps on the last device. Returns the
/// schedule and the `sample` op of the prefill, whose end is the TTFT.
///
/// # Panics
/// If `partition` is empty or has a zero chunk.
pub fn chain_schedule(
    m: &ModelSpec,
    batch: u32,
    partition: &[u32],
    gen_len: u32,
) -> (Schedule, OpId) {
    assert!(!partition.is_empty() && partition.iter().all(|&c| c > 0));
    let p = partition.len();
    let layers = m.num_layers as usize;
    let est = p * (layers * 9 + 4) + gen_len as usize * (layers * 8 + 3);
    let mut sb = ScheduleBuilder::with_capacity(est, est * 2);
    let lb = labels(&mut sb, m);
    let mut compute: Vec<StreamId> = Vec::with_capacity(p);
    let mut peer: Vec<StreamId> = Vec::with_capacity(p);
    for i in 0..p {
        compute.push(sb.stream(i as u16, StreamKind::Compute, format!("gpu{i}.compute")));
        if i + 1 < p {
            peer.push(sb.stream(
                i as u16,
                StreamKind::Peer { to: (i + 1) as u16 },
                format!("gpu{i}.peer{}", i + 1),
            ));
        }
    }
    let kv_tok = m.kv_bytes_per_token_layer();
    let st = starts(partition);
    let mut arrive: Vec<Option<OpId>> = vec![None; layers];
    let mut sample = OpId(0);
    for i in 0..p {
        let c = compute[i];
        let dev = i as u16;
        let last = i + 1 == p;
        let k = layer_kernels(m, batch, partition[i], st[i] + partition[i]);
        sb.push(
            embed_op(m, batch, partition[i]),
            c,
            lb.embed,
            tag(Phase::Prefill, 0, Tag::NONE, dev),
            &[],
        );
        let bytes = u64::from(batch) * u64::from(st[i] + partition[i]) * kv_tok;
        let mut sends = vec![None; layers];
        for j in 0..layers {
            let t = tag(Phase::Prefill, 0, j as u16, dev);
            sb.push(k[0].1, c, lb.kernels[0], t, &[]);
            let qkv = sb.push(k[1].1, c, lb.kernels[1], t, &[]);
            if !last {
                sends[j] = Some(sb.push(
                    OpKind::PeerSend { bytes },
                    peer[i],
                    lb.send,
                    t,
                    &[Some(qkv), arrive[j]],
                ));
            }
            if last || j + 1 < layers {
                sb.push(k[2].1, c, lb.kernels[2], t, &[arrive[j]]);
                for (x, label) in k.iter().zip(lb.kernels).skip(3) {
                    sb.push(x.1, c, label, t, &[]);
                }
            }
        }
        if last {
            for ((_, op), label) in head_ops(m, batch).iter().zip(lb.head) {
                sample = sb.push(*op, c, label, tag(Phase::Prefill, 0, Tag::NONE, dev), &[]);
            }
        }
        arrive = sends;
    }
    let n = st[p - 1] + partition[p - 1];
    let c = compute[p - 1];
    let dev = (p - 1) as u16;
    for step in 1..gen_len {
        let k = layer_kernels(m, batch, 1, n + step);
        for j in 0..layers {
            let t = tag(Phase::Decode, step, j as u16, dev);
            for (x, label) in k.iter().zip(lb.kernels) {
                sb.push(x.1, c, label, t, &[]);
            }
        }
        for ((_, op), label) in head_ops(m, batch).iter().zip(lb.head) {
            sb.push(*op, c, label, tag(Phase::Decode, step, Tag::NONE, dev), &[]);
        }
    }
    (sb.build(), sample)
}

/// One device's share of a KV-Runahead prefill as a single-device schedule: the embedding of
/// tokens `[start, start + len)` and, per layer, `ln1`, `qkv_proj`, the causal attention of the
/// `len` queries over `start + len` keys, `out_proj` and the FFN, on `gpu0.compute` with nothing
/// to wait for. Running it on one GPU (`exec`, `validate`) measures the per-chunk prefill cost
/// the planner uses: its simulated makespan is `embed + L * layer()` of
/// [`ModelCosts::chunk`]`(len, start)`.
pub fn chunk_schedule(m: &ModelSpec, batch: u32, len: u32, start: u32) -> Schedule {
    assert!(len > 0, "a chunk has at least one token");
    let layers = m.num_layers as usize;
    let mut sb = ScheduleBuilder::with_capacity(layers * 8 + 1, 0);
    let lb = labels(&mut sb, m);
    let c = sb.stream(0, StreamKind::Compute, "gpu0.compute");
    sb.push(
        embed_op(m, batch, len),
        c,
        lb.embed,
        tag(Phase::Prefill, 0, Tag::NONE, 0),
        &[],
    );
    let k = layer_kernels(m, batch, len, start + len);
    for j in 0..layers {
        let t = tag(Phase::Prefill, 0, j as u16, 0);
        for (x, label) in k.iter().zip(lb.kernels) {
            sb.push(x.1, c, label, t, &[]);
        }
    }
    sb.build()
}

/// The tensor/sequence-parallel baseline: `devices` equal chunks; per layer every device
/// computes its chunk's Q,K,V, then K,V are all-gathered over a ring (`devices - 1` steps, each
/// device forwarding the chunk it received last; about twice the chain's traffic), then each
/// device runs the causal attention of its chunk over the prefix and its FFN; the next layer's
/// all-gather needs every device. The last device samples. Returns the schedule and the
/// `sample` op.
pub fn tensor_parallel_schedule(
    m: &ModelSpec,
    batch: u32,
    context: u32,
    devices: u32,
) -> (Schedule, OpId) {
    let part = even_partition(context, devices);
    let p = part.len();
    if p == 1 {
        return chain_schedule(m, batch, &part, 1);
    }
    let layers = m.num_layers as usize;
    let est = p * layers * (9 + p) + 8;
    let mut sb = ScheduleBuilder::with_capacity(est, est * 2);
    let lb = labels(&mut sb, m);
    let mut compute = Vec::with_capacity(p);
    let mut peer = Vec::with_capacity(p);
    for i in 0..p {
        compute.push(sb.stream(i as u16, StreamKind::Compute, format!("gpu{i}.compute")));
    }
    for i in 0..p {
        let to = (i + 1) % p;
        peer.push(sb.stream(
            i as u16,
            StreamKind::Peer { to: to as u16 },
            format!("gpu{i}.peer{to}"),
        ));
    }
    let kv_tok = m.kv_bytes_per_token_layer();
    let st = starts(&part);
    let kernels: Vec<_> = (0..p)
        .map(|i| layer_kernels(m, batch, part[i], st[i] + part[i]))
        .collect();
    for i in 0..p {
        sb.push(
            embed_op(m, batch, part[i]),
            compute[i],
            lb.embed,
            tag(Phase::Prefill, 0, Tag::NONE, i as u16),
            &[],
        );
    }
    for j in 0..layers {
        let qkv: Vec<OpId> = (0..p)
            .map(|i| {
                let t = tag(Phase::Prefill, 0, j as u16, i as u16);
                sb.push(kernels[i][0].1, compute[i], lb.kernels[0], t, &[]);
                sb.push(kernels[i][1].1, compute[i], lb.kernels[1], t, &[])
            })
            .collect();
        // Ring all-gather: at step s device i sends chunk (i - s) mod p to i + 1.
        let mut prev: Vec<OpId> = qkv.clone();
        for s in 0..p - 1 {
            let mut cur = Vec::with_capacity(p);
            for i in 0..p {
                let chunk = (i + p - s) % p;
                let dep = if s == 0 {
                    qkv[i]
                } else {
                    prev[(i + p - 1) % p]
                };
                let bytes = u64::from(batch) * u64::from(part[chunk]) * kv_tok;
                cur.push(sb.push(
                    OpKind::PeerSend { bytes },
                    peer[i],
                    lb.send,
                    tag(Phase::Prefill, 0, j as u16, i as u16),
                    &[Some(dep)],
                ));
            }
            prev = cur;
        }
        for i in 0..p {
            let t = tag(Phase::Prefill, 0, j as u16, i as u16);
            // The gather into device i is complete when the last send from i - 1 has arrived.
            let got = prev[(i + p - 1) % p];
            sb.push(kernels[i][2].1, compute[i], lb.kernels[2], t, &[Some(got)]);
            for (x, label) in kernels[i].iter().zip(lb.kernels).skip(3) {
                sb.push(x.1, compute[i], label, t, &[]);
            }
        }
    }
    let mut sample = OpId(0);
    for ((_, op), label) in head_ops(m, batch).iter().zip(lb.head) {
        sample = sb.push(
            *op,
            compute[p - 1],
            label,
            tag(Phase::Prefill, 0, Tag::NONE, (p - 1) as u16),
            &[],
        );
    }
    (sb.build(), sample)
}

/// End times of every op when each stream has its own engine (the simulator's reference
/// model for such schedules: start = max(previous op on the stream, dependencies)), with
/// durations from `cost` except peer sends, which take `link`.
pub fn reference_ends(schedule: &Schedule, cost: &CostModel, link: LinkCost) -> Vec<f64> {
    let mut stream_end = vec![0.0f64; schedule.streams().len()];
    let mut ends: Vec<f64> = Vec::with_capacity(schedule.len());
    for (i, op) in schedule.ops().iter().enumerate() {
        let s = op.stream.index();
        let mut start = stream_end[s];
        for d in schedule.deps(OpId(i as u32)) {
            start = start.max(ends[d.index()]);
        }
        let dur = match op.kind {
            OpKind::PeerSend { bytes } => link.time(bytes),
            ref k => cost.duration(k),
        };
        let end = start + dur;
        stream_end[s] = end;
        ends.push(end);
    }
    ends
}

fn peer_bytes(schedule: &Schedule) -> u64 {
    schedule.ops().iter().map(|o| o.kind.link_bytes()).sum()
}

// ---- the plan -------------------------------------------------------------------------------

/// The peer link `options` ask for: the overrides, else the profile's `[peer]`.
pub fn link_of(hw: &HardwareProfile, options: &RunaheadOptions) -> Result<LinkCost> {
    let bw = match options.link_gbps {
        Some(g) if g.is_finite() && g > 0.0 => g * 1e9,
        Some(g) => {
            return Err(Error::invalid(
                "--link-gbps",
                g,
                "must be a positive device-to-device bandwidth in GB/s (e.g. 300 for NVLink 3, 10 or 1 for a slow link)",
            ));
        }
        None => hw.peer.bandwidth,
    };
    let lat = match options.link_latency_us {
        Some(l) if l.is_finite() && l >= 0.0 => l * 1e-6,
        Some(l) => {
            return Err(Error::invalid(
                "--link-latency-us",
                l,
                "must be zero or more microseconds",
            ));
        }
        None => hw.peer.latency_s,
    };
    Ok(LinkCost {
        latency_s: lat,
        secs_per_byte: 1.0 / bw,
    })
}

/// `hw` with its `[peer]` link replaced by the overrides of `options`: build the
/// [`CostModel`] that simulates a KV-Runahead schedule from this profile, so the simulator's
/// peer sends take what the planner assumed.
pub fn with_link_override(
    hw: &HardwareProfile,
    options: &RunaheadOptions,
) -> Result<HardwareProfile> {
    let link = link_of(hw, options)?;
    let mut out = hw.clone();
    out.peer.bandwidth = 1.0 / link.secs_per_byte;
    out.peer.latency_s = link.latency_s;
    if options.link_gbps.is_some() || options.link_latency_us.is_some() {
        out.peer.kind = format!("{} (overridden)", hw.peer.kind);
    }
    Ok(out)
}

/// Per-device memory of `partition` (every device holds the weights; device `i` keeps the K,V of
/// chunks `<= i` of every layer, the last device the whole context plus `gen_len` decoded
/// tokens, as caches are sized for prompt + gen; activations of its own chunk): the fullest
/// device's plan (items `weights`, `kv cache`, `activations (prefill peak)`) and its index.
fn device_memory(
    m: &ModelSpec,
    batch: u32,
    partition: &[u32],
    gen_len: u32,
) -> (MemoryPlan, usize) {
    let st = starts(partition);
    let last = partition.len() - 1;
    let kv_tok = m.kv_bytes_per_token() * u64::from(batch);
    let mut best: Option<(u64, MemoryPlan, usize)> = None;
    for (i, (&c, &s)) in partition.iter().zip(&st).enumerate() {
        let tokens = u64::from(s + c) + if i == last { u64::from(gen_len) } else { 0 };
        let shape = Shape {
            batch,
            gpu_batches: 1,
            prompt: c,
            gen_len: 1,
        };
        let act = crate::plan::memory_plan(m, &shape, Strategy::GpuOnly, true, false)
            .gpu_item("activations (prefill peak)");
        let mut mem = MemoryPlan::default();
        mem.gpu("weights", m.weight_bytes());
        mem.gpu("kv cache", tokens * kv_tok);
        mem.gpu("activations (prefill peak)", act);
        let total = mem.gpu_bytes();
        if best.as_ref().is_none_or(|b| total > b.0) {
            best = Some((total, mem, i));
        }
    }
    let (_, mem, i) = best.expect("a device");
    (mem, i)
}

/// Plans KV-Runahead for `shape` (`shape.prompt` is the context length; `shape.batch`
/// sequences; `shape.gen_len - 1` decode steps follow on the last device).
///
/// The partition minimises the TTFT for every device count up to `options.runahead.devices`
/// ([`optimise`]); the plan uses the fewest devices within [`DEVICE_TOLERANCE`] of the best, and
/// one device unless the best beats it by [`MIN_GAIN`] (and beats the even chain). With a link
/// override the costs come from [`with_link_override`] of `hw` (simulate with the same profile).
pub fn plan(
    model: &ModelSpec,
    hw: &HardwareProfile,
    cost: &CostModel,
    shape: &Shape,
    options: &Options,
) -> Result<Plan> {
    let ro = &options.runahead;
    if ro.devices == 0 {
        return Err(Error::invalid(
            "--devices",
            0,
            "must be at least 1: the number of GPUs to split the prefill over",
        ));
    }
    let link = link_of(hw, ro)?;
    if shape.prompt == 0 {
        return Err(Error::invalid(
            "--context (--prompt)",
            0,
            "must be at least 1 token",
        ));
    }
    if shape.batch == 0 || shape.gen_len == 0 {
        return Err(Error::invalid(
            if shape.batch == 0 { "--batch" } else { "--gen" },
            0,
            "must be at least 1",
        ));
    }
    if u64::from(shape.batch) * u64::from(shape.prompt) > u64::from(u32::MAX) {
        return Err(Error::invalid(
            "--batch x --context",
            u64::from(shape.batch) * u64::from(shape.prompt),
            "must stay below 2^32 tokens",
        ));
    }
    if shape.gpu_batches != 1 {
        return Err(Error::invalid(
            "--gpu-batches",
            shape.gpu_batches,
            "KV-Runahead prefills one batch; use --gpu-batches 1",
        ));
    }
    if options.weights == WeightsPlacement::Offload {
        return Err(Error::invalid(
            "--weights",
            "offload",
            "KV-Runahead keeps a replica of the weights on every device; use --weights auto or gpu",
        ));
    }
    let overridden;
    let cost = if ro.link_gbps.is_some() || ro.link_latency_us.is_some() {
        overridden = CostModel::new(&with_link_override(hw, ro)?);
        &overridden
    } else {
        cost
    };
    let n = shape.prompt;
    let b = shape.batch;
    let costs = ModelCosts::new(model, cost, b, link);
    let offered = ro.devices.min(n);
    let opt = optimise(&costs, n, offered);
    let single = opt.by_devices[0].ttft_s;
    let even_chain = ttft(&costs, &even_partition(n, offered));
    let (tp_sched, tp_sample) = tensor_parallel_schedule(model, b, n, offered);
    let tensor_parallel = reference_ends(&tp_sched, cost, link)[tp_sample.index()];
    let what = |p: usize| {
        format!(
            "runahead plan for {} on {} ({} device{})",
            model.name,
            hw.name,
            p,
            if p == 1 { "" } else { "s" }
        )
    };
    let advice = "reduce --context (--prompt), --batch or --gen: the last device keeps the whole context's KV cache, so more --devices only shrink the activations; or use a GPU with more memory";
    // Device counts by preference: fewest within the tolerance of the best that fit.
    let fits = |d: &DeviceOptimum| {
        let (mem, _) = device_memory(model, b, &d.partition, shape.gen_len);
        mem.gpu_bytes() <= hw.gpu.usable_bytes()
    };
    let fitting: Vec<&DeviceOptimum> = opt.by_devices.iter().filter(|d| fits(d)).collect();
    let Some(best) = fitting
        .iter()
        .min_by(|a, c| a.ttft_s.total_cmp(&c.ttft_s))
        .copied()
    else {
        // Nothing fits: report the plan that needs least memory.
        let d = opt
            .by_devices
            .iter()
            .min_by_key(|d| {
                device_memory(model, b, &d.partition, shape.gen_len)
                    .0
                    .gpu_bytes()
            })
            .expect("one device count");
        let (mem, i) = device_memory(model, b, &d.partition, shape.gen_len);
        let weights_alone = model.weight_bytes() > hw.gpu.usable_bytes();
        let advice = if weights_alone {
            "the weights alone exceed one GPU and KV-Runahead keeps a replica on every device; use a GPU with more memory"
        } else {
            advice
        };
        let what = format!("{}, device {i}", what(d.partition.len()));
        return Err(mem.check(hw, &what, advice, "").err().unwrap_or_else(|| {
            Error::invalid("--context (--prompt)", n, "does not fit in GPU memory")
        }));
    };
    let mut notes = Vec::new();
    // Never worse than the even chain over all offered devices (the plan it replaces).
    let limit = (best.ttft_s * (1.0 + DEVICE_TOLERANCE)).min(even_chain.max(best.ttft_s));
    let mut chosen = fitting
        .iter()
        .find(|d| d.ttft_s <= limit)
        .copied()
        .expect("the best is within the limit");
    let gain = 1.0 - chosen.ttft_s / single;
    if chosen.partition.len() > 1
        && fits(&opt.by_devices[0])
        && gain < MIN_GAIN
        && single <= even_chain
    {
        notes.push(format!(
            "{} devices would cut TTFT by only {:.1}% ({:.3} ms -> {:.3} ms; less than {:.0}%): the prompt stays on one device",
            chosen.partition.len(),
            100.0 * gain,
            single * 1e3,
            chosen.ttft_s * 1e3,
            100.0 * MIN_GAIN
        ));
        chosen = &opt.by_devices[0];
    } else if chosen.partition.len() < offered as usize {
        let full = &opt.by_devices[offered as usize - 1];
        notes.push(format!(
            "{} of {offered} devices used: {offered} would give {:.3} ms against {:.3} ms ({:+.2}%)",
            chosen.partition.len(),
            full.ttft_s * 1e3,
            chosen.ttft_s * 1e3,
            100.0 * (full.ttft_s / chosen.ttft_s - 1.0)
        ));
    }
    let est_ops = chosen.partition.len() as u64 * (u64::from(model.num_layers) * 9 + 4)
        + u64::from(shape.gen_len) * (u64::from(model.num_layers) * 8 + 3);
    if est_ops > crate::plan::MAX_OPS {
        return Err(Error::invalid(
            "--gen",
            shape.gen_len,
            format!(
                "the schedule would have about {est_ops} ops (limit {}); reduce --gen",
                crate::plan::MAX_OPS
            ),
        ));
    }
    let (schedule, sample) = chain_schedule(model, b, &chosen.partition, shape.gen_len);
    let (memory, dev) = device_memory(model, b, &chosen.partition, shape.gen_len);
    notes.push(format!(
        "memory is device {dev}'s, the fullest: every device holds the weights, device i the K,V of tokens 0..s_i + c_i of every layer"
    ));
    memory.check(
        hw,
        &format!("{}, device {dev}", what(chosen.partition.len())),
        advice,
        "",
    )?;
    let runahead = chosen.ttft_s;
    debug_assert!({
        let t = reference_ends(&schedule, cost, link)[sample.index()];
        (t - runahead).abs() <= 1e-9 * runahead
    });
    if !fits(&opt.by_devices[0]) {
        notes.push(
            "the single-device baseline would not fit in one GPU's memory (its TTFT is reported anyway)".into(),
        );
    }
    if shape.prompt > model.max_position {
        notes.push(format!(
            "context {} exceeds {}'s max_position_embeddings ({}); planned anyway",
            shape.prompt, model.name, model.max_position
        ));
    }
    if shape.gen_len > 1 {
        notes.push(format!(
            "TTFT is the prefill; the {} decode steps run on the last device, which holds the whole KV cache",
            shape.gen_len - 1
        ));
    }
    let bottleneck = {
        let part = &chosen.partition;
        let st = starts(part);
        let (mut w, mut x) = (0.0f64, 0.0f64);
        for (i, (&c, &s)) in part.iter().zip(&st).enumerate() {
            w = w.max(costs.chunk(c, s).layer());
            if i + 1 < part.len() {
                x = x.max(costs.link(s + c));
            }
        }
        if x > w { "link" } else { "compute" }
    };
    notes.push(format!(
        "partition by exact Pareto DP over {} grid cells of {} token{}{}",
        opt.grid_cells,
        opt.cell_tokens,
        if opt.cell_tokens == 1 { "" } else { "s" },
        if opt.exact {
            " (every partition)"
        } else {
            ", refined to single tokens"
        }
    ));
    let details = RunaheadDetails {
        devices_used: chosen.partition.len() as u32,
        partition: chosen.partition.clone(),
        ttft_s: TtftByMethod {
            runahead,
            single_device: single,
            even_chain,
            tensor_parallel,
        },
        speedup: single / runahead,
        devices_offered: offered,
        speedup_vs_tensor_parallel: tensor_parallel / runahead,
        ttft_by_devices_s: opt.by_devices.iter().map(|d| d.ttft_s).collect(),
        link_gbps: 1e-9 / link.secs_per_byte,
        link_latency_us: link.latency_s * 1e6,
        peer_bytes: peer_bytes(&schedule),
        tensor_parallel_peer_bytes: peer_bytes(&tp_sched),
        bottleneck,
        search: SearchInfo {
            grid_cells: opt.grid_cells,
            cell_tokens: opt.cell_tokens,
            exact: opt.exact,
            refine_rounds: chosen.refine_rounds,
            states: opt.states,
            local_optimum: chosen.local_optimum,
        },
    };
    Ok(Plan {
        strategy: Strategy::Runahead,
        model: model.name.clone(),
        hardware: hw.name.clone(),
        shape: *shape,
        order: Order::RowByRow,
        weights_on_gpu: true,
        host_memory: options.host_memory,
        memory,
        splits: vec![],
        headinfer: None,
        runahead: Some(details),
        notes,
        schedule,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Synthetic costs: per-token GEMM work, per-pair attention, per-token link.
    struct Toy;
    impl ChunkCosts for Toy {
        fn layers(&self) -> u32 {
            4
        }
        fn chunk(&self, len: u32, start: u32) -> ChunkCost {
            let c = f64::from(len);
            let s = f64::from(start);
            ChunkCost {
                embed: 0.01 * c,
                pre: 0.1 + 0.3 * c,
                attn: 0.1 + 0.02 * c * (s + (c + 1.0) / 2.0),
                post: 0.1 + 0.7 * c,
            }
        }
        fn link(&self, tokens: u32) -> f64 {
            if tokens == 0 {
                0.0
            } else {
                0.05 + 0.2 * f64::from(tokens)
            }
        }
        fn head(&self) -> f64 {
            0.5
        }
    }

    #[test]
    fn closed_form_matches_the_layer_recurrence() {
        for part in [
            vec![10],
            vec![5, 5],
            vec![1, 9],
            vec![7, 2, 1],
            vec![3, 3, 3, 3],
        ] {
            let a = ttft(&Toy, &part);
            let b = ttft_by_layers(&Toy, &part);
            assert!((a - b).abs() <= 1e-12 * b, "{part:?}: {a} vs {b}");
        }
    }

    #[test]
    fn pareto_keeps_exactly_the_undominated() {
        let p = |u, rho, z| Pt {
            u,
            rho,
            z,
            from_pos: 0,
            from_pt: 0,
        };
        let f = pareto(vec![
            p(1.0, 3.0, 5.0),
            p(2.0, 2.0, 5.0),
            p(2.0, 3.0, 5.0), // dominated by the first
            p(3.0, 1.0, 9.0),
            p(1.0, 3.0, 5.0), // duplicate
            p(0.5, 4.0, 4.0),
        ]);
        assert_eq!(f.len(), 4, "{f:?}");
    }

    #[test]
    fn small_contexts_match_brute_force() {
        for n in [1u32, 2, 5, 9, 14] {
            let opt = optimise(&Toy, n, 3);
            assert!(opt.exact);
            for (i, d) in opt.by_devices.iter().enumerate() {
                let p = i + 1;
                let mut best = f64::INFINITY;
                compositions(n, p, &mut |c| best = best.min(ttft(&Toy, c)));
                assert!(
                    (d.ttft_s - best).abs() <= 1e-12 * best,
                    "n={n} p={p}: {} vs {best}",
                    d.ttft_s
                );
                assert_eq!(d.partition.iter().sum::<u32>(), n);
            }
        }
    }

    fn compositions(n: u32, p: usize, f: &mut dyn FnMut(&[u32])) {
        fn rec(left: u32, p: usize, cur: &mut Vec<u32>, f: &mut dyn FnMut(&[u32])) {
            if p == 1 {
                cur.push(left);
                f(cur);
                cur.pop();
                return;
            }
            for c in 1..=left.saturating_sub(p as u32 - 1) {
                cur.push(c);
                rec(left - c, p - 1, cur, f);
                cur.pop();
            }
        }
        if n as usize >= p {
            rec(n, p, &mut Vec::new(), f);
        }
    }
}
