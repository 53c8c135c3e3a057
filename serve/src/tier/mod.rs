//! A CPU tier for the KV cache: vLLM's KV offloading (`kv_offloading_size` in GiB,
//! `kv_offloading_backend` native or lmcache), as v0.15.1 runs it.
//!
//! The tier holds blocks by their prefix-cache hash in pinned host memory. What is stored and
//! when, how a hit is loaded back and what the copies cost are the backend's ([`Backend`], one
//! line each in [`BACKENDS`]); which block leaves when the tier is full is the eviction
//! policy's ([`Eviction`], one file each: [`lru`], [`arc`], registered in [`EVICTIONS`]).
//!
//! Rules of the `native` backend (vLLM's `OffloadingConnector`,
//! `vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py` and
//! `vllm/v1/kv_offload/`, read from the v0.15.1 release):
//! - Capacity: `floor(size / (one block's K and V over all layers and tensor-parallel ranks))`
//!   blocks (`kv_offload/cpu.py`): the size is the total over the ranks.
//! - Stores: in every step, each scheduled request's blocks that become full in that step and
//!   are not in the tier yet are planned (slots reserved, blocks evicted) at scheduling; if the
//!   tier cannot make room the store is skipped and retried next step. The copies start at the
//!   next step's start after the step's compute, on their own stream, in order per direction
//!   (one `cudaMemcpyAsync` per block, all layers' K and V in one copy with the cross-layer
//!   layout). A stored block becomes a hit (and evictable) only when its request has finished
//!   and its copies are done; until then the request's GPU blocks stay allocated.
//! - Loads: only for a request with nothing computed (new, or preempted), for the consecutive
//!   tier blocks after its GPU prefix hit. Its GPU blocks are allocated, it waits
//!   (`WAITING_FOR_REMOTE_KVS`) without using the token budget while the copies run, and is
//!   scheduled once the load is seen done, with its last token recomputed when the load covers
//!   it. A request whose hit blocks are being loaded for another request waits a step.
//!
//! The `lmcache` backend (vLLM's `LMCacheConnectorV1`, `lmcache_integration/
//! vllm_v1_adapter.py`): chunks of 256 tokens, the prompt only (`save_decode_cache` off), a
//! request's whole chunks stored as its prefill reaches them, in the step (`wait_for_save`
//! blocks); a hit loaded in the step that schedules the request (`load_kv_async` is false), so
//! the copies hold that step's forward pass. Capacity per rank is the size over the ranks.

use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

pub mod arc;
pub mod lru;

/// How a backend moves blocks.
#[derive(Debug)]
pub struct Backend {
    /// The name in files and flags.
    pub name: &'static str,
    /// One line for a command line's help.
    pub about: &'static str,
    /// Tokens per stored unit, given the engine's block size.
    pub unit_tokens: fn(u32) -> u32,
    /// Loads run while the request waits, beside the engine's steps (`native`); otherwise in
    /// the step that schedules the request, before its forward pass (`lmcache`).
    pub async_load: bool,
    /// Stores run beside the engine's steps, from the next step's start (`native`); otherwise
    /// in the step, after its forward pass (`lmcache`).
    pub async_store: bool,
    /// Blocks of generated tokens are stored too.
    pub store_output: bool,
}

/// Every backend, one line each.
pub static BACKENDS: &[Backend] = &[
    Backend {
        name: "native",
        about: "vLLM's OffloadingConnector: blocks stored and loaded beside the steps",
        unit_tokens: |bs| bs,
        async_load: true,
        async_store: true,
        store_output: true,
    },
    Backend {
        name: "lmcache",
        about: "LMCache's CPU backend: 256-token chunks of the prompt, copied in the steps",
        unit_tokens: |bs| 256u32.div_ceil(bs.max(1)) * bs.max(1),
        async_load: false,
        async_store: false,
        store_output: false,
    },
];

crate::named::registry_kind!(
    /// A backend by name ([`BACKENDS`]; default `native`).
    BackendKind,
    Backend,
    BACKENDS,
    BACKEND_KINDS
);

/// How a hit is brought back to the GPU (`serve.kv_reload`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Reload {
    /// Copy the stored K and V back.
    #[default]
    #[cfg_attr(feature = "clap", value(help = "Copy the stored K and V back (vLLM)"))]
    Transfer,
    /// KVPR's split: keep the layer inputs `X` of a chain's first tokens instead of their K and
    /// V; on a hit recompute those tokens' K and V on the GPU while the rest is copied.
    #[cfg_attr(
        feature = "clap",
        value(
            help = "KVPR's split: store the first tokens' layer inputs, recompute their K and V \
                      on the GPU while the rest is copied"
        )
    )]
    Hybrid,
}

impl Reload {
    /// The name in files and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            Reload::Transfer => "transfer",
            Reload::Hybrid => "hybrid",
        }
    }
}

/// Which block an eviction policy gives up, and what a lookup refreshes.
pub trait Eviction: Send {
    /// Whether `h` is held.
    fn contains(&self, h: u64) -> bool;
    /// How many of `hashes` are held and ready, from the first on, and whether any of those is
    /// being loaded.
    fn lookup(&self, hashes: &[u64]) -> (usize, bool);
    /// A lookup's refresh of `hashes` (the first ends most recent).
    fn touch(&mut self, hashes: &[u64]);
    /// Reserves room for `new` (hash, bytes) entries, not ready until [`Eviction::ready`],
    /// evicting ready unpinned entries as the policy chooses into `evicted`; `false` (changing
    /// nothing) when they cannot be made room for.
    fn reserve(&mut self, new: &[(u64, u64)], evicted: &mut Vec<u64>) -> bool;
    /// Stores done: the entries become hits.
    fn ready(&mut self, hashes: &[u64]);
    /// Loads started (`+1`) or done (`-1`): a loading entry is not evicted.
    fn pin(&mut self, hashes: &[u64], delta: i32);
    /// Bytes held (reserved included).
    fn used_bytes(&self) -> u64;
    /// Bytes a reservation could have now: free, or held by entries it may evict.
    fn room(&self) -> u64;
    /// The stored size of `h`, if held.
    fn bytes_of(&self, h: u64) -> Option<u64>;
}

/// How many of `hashes` are held and ready (`refs >= 0`), from the first on, and whether any of
/// those is being loaded: the lookup every policy shares (vLLM's `lookup` stops at the first
/// block missing or not ready).
fn lookup<'a>(hashes: &[u64], get: impl Fn(u64) -> Option<&'a crate::lru::Entry>) -> (usize, bool) {
    let mut n = 0;
    let mut loading = false;
    for &h in hashes {
        match get(h) {
            Some(e) if e.refs >= 0 => {
                loading |= e.refs > 0;
                n += 1;
            }
            _ => break,
        }
    }
    (n, loading)
}

/// An eviction policy: its name and factory (capacity in bytes).
pub struct EvictionSpec {
    /// The name in files and flags.
    pub name: &'static str,
    /// One line for a command line's help.
    pub about: &'static str,
    /// A new policy of this capacity, bytes.
    pub new: fn(u64) -> Box<dyn Eviction>,
}

impl std::fmt::Debug for EvictionSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// Every eviction policy, one line each.
pub static EVICTIONS: &[EvictionSpec] = &[lru::SPEC, arc::SPEC];

crate::named::registry_kind!(
    /// An eviction policy by name ([`EVICTIONS`]: `lru`, vLLM's default; `arc`, since vLLM
    /// 0.11.1).
    EvictionKind,
    EvictionSpec,
    EVICTIONS,
    EVICTION_KINDS
);

/// What a tier did, for the report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct TierStats {
    /// Lookups (requests with nothing computed asking the tier).
    pub lookups: u64,
    /// Prompt tokens asked of the tier (beyond the GPU's hits).
    pub queried_tokens: u64,
    /// Tokens found in the tier and loaded.
    pub hit_tokens: u64,
    /// Bytes copied to host (all tensor-parallel ranks).
    pub stored_bytes: u64,
    /// Bytes copied back (all ranks).
    pub loaded_bytes: u64,
    /// Stores skipped for want of room.
    pub skipped_stores: u64,
    /// Blocks evicted.
    pub evictions: u64,
    /// Loads.
    pub loads: u64,
    /// Seconds from a load's start to its request being schedulable, summed.
    pub load_s: f64,
    /// Tokens recomputed from stored layer inputs (hybrid reload).
    pub recomputed_tokens: u64,
    /// Most host bytes held at once (all ranks).
    pub peak_bytes: u64,
    /// The tier's size, bytes (all ranks).
    pub capacity_bytes: u64,
}

impl TierStats {
    /// Adds another tier's.
    pub fn add(&mut self, o: &TierStats) {
        self.lookups += o.lookups;
        self.queried_tokens += o.queried_tokens;
        self.hit_tokens += o.hit_tokens;
        self.stored_bytes += o.stored_bytes;
        self.loaded_bytes += o.loaded_bytes;
        self.skipped_stores += o.skipped_stores;
        self.evictions += o.evictions;
        self.loads += o.loads;
        self.load_s += o.load_s;
        self.recomputed_tokens += o.recomputed_tokens;
        self.peak_bytes += o.peak_bytes;
        self.capacity_bytes += o.capacity_bytes;
    }
}

/// The CPU tier of one engine.
pub struct CpuTier {
    /// The backend.
    pub backend: &'static Backend,
    /// Tokens per stored unit.
    pub unit: u32,
    /// Bytes of one unit's K and V on this rank.
    pub kv_bytes: u64,
    /// Bytes of one unit's layer inputs on this rank (hybrid reload).
    pub x_bytes: u64,
    /// Tensor-parallel ranks (each holds its shard).
    pub ranks: u64,
    /// The eviction policy.
    pub eviction: Box<dyn Eviction>,
    /// Stores planned and not yet done, per engine position: the hashes.
    pub pending: FxHashMap<usize, Vec<u64>>,
    /// Counters.
    pub stats: TierStats,
    /// Scratch.
    pub evicted: Vec<u64>,
    /// Units whose first `x_units` of a chain are stored as `X` (hybrid reload), per request
    /// being stored: decided when its first store is planned.
    pub reload: Reload,
    /// Scratch for reservations.
    pub scratch: Vec<(u64, u64)>,
    /// Finished stores waiting for their copies: `(done at, hashes)`.
    pub finishing: Vec<(f64, Vec<u64>)>,
}

impl std::fmt::Debug for CpuTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuTier")
            .field("backend", &self.backend.name)
            .field("unit", &self.unit)
            .field("stats", &self.stats)
            .finish()
    }
}

impl CpuTier {
    /// A tier of `size_bytes` over `ranks` ranks, units of `unit` tokens of `kv_bytes` (K and
    /// V on one rank; `x_bytes` the same unit's layer inputs).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        backend: BackendKind,
        eviction: EvictionKind,
        reload: Reload,
        size_bytes: u64,
        ranks: u32,
        unit: u32,
        kv_bytes: u64,
        x_bytes: u64,
    ) -> Self {
        let ranks = u64::from(ranks.max(1));
        CpuTier {
            backend: backend.spec(),
            unit,
            kv_bytes,
            x_bytes,
            ranks,
            eviction: (eviction.spec().new)(size_bytes / ranks),
            pending: FxHashMap::default(),
            stats: TierStats {
                capacity_bytes: size_bytes,
                ..TierStats::default()
            },
            evicted: Vec::new(),
            reload,
            scratch: Vec::new(),
            finishing: Vec::new(),
        }
    }

    /// Plans the store of `hashes` (units of one request, in chain order from unit `first`),
    /// the first `x_units` of the chain as layer inputs: reserves room for those not held yet.
    /// Returns how many units to copy as layer inputs and as K and V, or `None` when the tier
    /// cannot make room.
    pub fn plan_store(
        &mut self,
        pos: usize,
        first: usize,
        hashes: &[u64],
        x_units: usize,
    ) -> Option<(u64, u64)> {
        self.scratch.clear();
        for (i, &h) in hashes.iter().enumerate() {
            // A chain's hashes are distinct: no unit repeats within one request.
            if !self.eviction.contains(h) {
                let bytes = if first + i < x_units {
                    self.x_bytes
                } else {
                    self.kv_bytes
                };
                self.scratch.push((h, bytes));
            }
        }
        if self.scratch.is_empty() {
            return Some((0, 0));
        }
        if !self.eviction.reserve(&self.scratch, &mut self.evicted) {
            self.stats.skipped_stores += 1;
            return None;
        }
        self.stats.evictions += self.evicted.len() as u64;
        self.evicted.clear();
        let bytes: u64 = self.scratch.iter().map(|&(_, b)| b).sum();
        let x = (self.scratch.iter())
            .filter(|&&(_, b)| b == self.x_bytes && b != self.kv_bytes)
            .count() as u64;
        self.pending
            .entry(pos)
            .or_default()
            .extend(self.scratch.iter().map(|&(h, _)| h));
        self.stats.stored_bytes += bytes * self.ranks;
        self.stats.peak_bytes =
            (self.stats.peak_bytes).max(self.eviction.used_bytes() * self.ranks);
        Some((x, self.scratch.len() as u64 - x))
    }

    /// Request `pos`'s stores are done (at `at`, or now when `at` is `None`): its units become
    /// hits.
    pub fn finish_stores(&mut self, pos: usize, at: Option<f64>) {
        if let Some(h) = self.pending.remove(&pos) {
            match at {
                None => self.eviction.ready(&h),
                Some(t) => self.finishing.push((t, h)),
            }
        }
    }

    /// Completes the finished requests' stores whose copies are done by `now`.
    pub fn settle(&mut self, now: f64) {
        let mut i = 0;
        while i < self.finishing.len() {
            if self.finishing[i].0 <= now {
                let (_, h) = self.finishing.swap_remove(i);
                self.eviction.ready(&h);
            } else {
                i += 1;
            }
        }
    }
}

/// The time to bring back `n` units of which the first `l` were stored as layer inputs: the
/// inputs cross the link first (`x(l)`), then the K and V of the rest (`kv(n - l)`); the GPU
/// recomputes the first `l` units' K and V (`r(l)`) once their inputs have arrived and it has
/// finished the `busy` seconds of work it has. `l = 0` is the plain transfer `kv(n)`.
pub fn reload_time(
    n: u64,
    l: u64,
    busy: f64,
    x: &impl Fn(u64) -> f64,
    kv: &impl Fn(u64) -> f64,
    r: &impl Fn(u64) -> f64,
) -> f64 {
    let l = l.min(n);
    let xl = x(l);
    let copies = xl + kv(n - l);
    if l == 0 {
        copies
    } else {
        copies.max(xl.max(busy) + r(l))
    }
}

/// KVPR's balance for a reload of `n` units ([`reload_time`]): the `l` that brings them back
/// soonest, the smallest on ties, so never slower than the plain transfer (`l = 0`). Where a
/// unit's layer inputs cost no less than its K and V on the link (grouped-query attention) it is
/// 0. Otherwise the recomputation's side rises with `l` and the copies' side falls; the
/// crossing is found by bisection and `l = 0`, the crossing and the unit before it compared.
pub fn reload_split(
    n: u64,
    busy: f64,
    x: impl Fn(u64) -> f64,
    kv: impl Fn(u64) -> f64,
    r: impl Fn(u64) -> f64,
) -> u64 {
    if n == 0 || x(1) >= kv(1) {
        return 0;
    }
    let (mut lo, mut hi) = (1u64, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if x(mid).max(busy) + r(mid) >= x(mid) + kv(n - mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    let mut best = (reload_time(n, 0, busy, &x, &kv, &r), 0);
    for l in [lo.saturating_sub(1), lo] {
        let t = reload_time(n, l, busy, &x, &kv, &r);
        if t < best.0 {
            best = (t, l);
        }
    }
    best.1
}
