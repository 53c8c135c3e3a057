//! `kv-aware`: NVIDIA Dynamo's KV router (dynamo-llm 1.0.0 `src/kv_router/scheduler.rs`
//! `DefaultWorkerSelector::select_worker`, `sequence.rs` `ActiveSequences`; the same formula in
//! 0.8.0 and, at its defaults, in dynamo-kv-router 1.6.1). For each worker
//!
//! `logit = w · (active_prefill_tokens + isl - overlap · block_size) / block_size + decode_blocks`
//!
//! with `w = overlap_score_weight = 1`, `overlap` the prompt's blocks the worker caches (from its
//! KV events: every worker present at a matched node counts it, walking until no worker holds
//! the block), `active_prefill_tokens` the router's own count of prefill work routed there and
//! not yet past its first token, and `decode_blocks` the distinct prompt blocks of the requests
//! routed there and not finished, plus this request's blocks not among them. Temperature 0: the
//! smallest logit; ties to the worker caching the fewest blocks, then uniformly at random.

use rand::rngs::ChaCha8Rng;
use rustc_hash::FxHashMap;

use super::{Needs, Routed, Router, RouterSpec, Setup, View, pick_best};

/// Dynamo's `overlap_score_weight` default.
pub const OVERLAP_WEIGHT: f64 = 1.0;

pub(super) const SPEC: RouterSpec = RouterSpec {
    name: "kv-aware",
    about: "Cached-block overlap against load from KV events: min prefill blocks + active \
            blocks (NVIDIA Dynamo's KV router)",
    needs: Needs {
        hash_block: Some(0),
        kv_events: true,
        first_tokens: true,
        prefix_caching: true,
        ..Needs::NONE
    },
    new: |s: &Setup| {
        Box::new(KvAware {
            prefill_tokens: vec![0; s.replicas],
            active: (0..s.replicas).map(|_| FxHashMap::default()).collect(),
            active_bits: FxHashMap::default(),
            requests: FxHashMap::default(),
            overlap: Vec::new(),
            chosen_prefill: 0,
        })
    },
};

struct Active {
    replica: usize,
    prefill: u64,
    hashes: Vec<u64>,
}

struct KvAware {
    prefill_tokens: Vec<u64>,
    /// Per worker: active block hash -> requests holding it.
    active: Vec<FxHashMap<u64, u32>>,
    /// Per active block hash: the workers (of the first 64) holding it.
    active_bits: FxHashMap<u64, u64>,
    requests: FxHashMap<usize, Active>,
    overlap: Vec<u32>,
    chosen_prefill: u64,
}

impl Router for KvAware {
    fn pick(&mut self, q: &Routed<'_>, view: &View<'_>, rng: &mut ChaCha8Rng) -> usize {
        let n = view.in_flight.len();
        match &view.kv {
            Some(kv) => kv.matches(q.hashes, &mut self.overlap),
            None => {
                self.overlap.clear();
                self.overlap.resize(n, 0);
            }
        }
        let isl = f64::from(q.request.prompt_tokens);
        let logits: Vec<f64> = (0..n)
            .map(|w| {
                let bs = f64::from(view.block_size[w].max(1));
                let prefill = self.prefill_tokens[w] as f64 + isl - f64::from(self.overlap[w]) * bs;
                let active = &self.active[w];
                let new = q.hashes.iter().filter(|h| !active.contains_key(h)).count();
                OVERLAP_WEIGHT * prefill.max(0.0) / bs + (active.len() + new) as f64
            })
            .collect();
        let best = logits.iter().copied().fold(f64::INFINITY, f64::min);
        let cached = |w: usize| view.kv.as_ref().map_or(0, |k| k.cached_blocks(w)) as f64;
        let chosen = pick_best(n, false, rng, |w| {
            if logits[w] == best {
                cached(w)
            } else {
                f64::INFINITY
            }
        });
        let bs = u64::from(view.block_size[chosen].max(1));
        self.chosen_prefill =
            u64::from(q.request.prompt_tokens).saturating_sub(u64::from(self.overlap[chosen]) * bs);
        chosen
    }

    fn routed(&mut self, q: &Routed<'_>, replica: usize) {
        self.prefill_tokens[replica] += self.chosen_prefill;
        let active = &mut self.active[replica];
        for &h in q.hashes {
            let c = active.entry(h).or_insert(0);
            *c += 1;
            if *c == 1 && replica < 64 {
                *self.active_bits.entry(h).or_insert(0) |= 1 << replica;
            }
        }
        self.requests.insert(
            q.index,
            Active {
                replica,
                prefill: self.chosen_prefill,
                hashes: q.hashes.to_vec(),
            },
        );
    }

    fn first_token(&mut self, index: usize, _: usize) {
        if let Some(a) = self.requests.get_mut(&index) {
            self.prefill_tokens[a.replica] -= a.prefill;
            a.prefill = 0;
        }
    }

    fn ended(&mut self, index: usize, _: usize) {
        if let Some(a) = self.requests.remove(&index) {
            self.prefill_tokens[a.replica] -= a.prefill;
            let active = &mut self.active[a.replica];
            for h in a.hashes {
                if let Some(c) = active.get_mut(&h) {
                    *c -= 1;
                    if *c == 0 {
                        active.remove(&h);
                        if a.replica < 64
                            && let Some(bits) = self.active_bits.get_mut(&h)
                        {
                            *bits &= !(1 << a.replica);
                            if *bits == 0 {
                                self.active_bits.remove(&h);
                            }
                        }
                    }
                }
            }
        }
    }
}
