//! `llm-d`: the llm-d inference scheduler's weighted scorers on the Gateway API Inference
//! Extension's endpoint picker (llm-d-inference-scheduler v0.8.0, GIE v1.5.0,
//! `pkg/epp/scheduling/scheduler_profile.go`, `pkg/epp/framework/plugins/scheduling/scorer/`).
//! Each endpoint's score is `Σ weight · clamp(score, 0, 1)`; the max-score picker takes the
//! highest, ties uniformly at random. With GIE's default profile (`config/loader/defaults.go`):
//! - queue-scorer, weight 2: `(max q - q) / (max q - min q)` over the endpoints (1 when all
//!   equal), `q` the scraped `vllm:num_requests_waiting`;
//! - kv-cache-utilization-scorer, weight 2: `1 - kv_cache_usage_perc`;
//! - prefix-cache-scorer, weight 3: matched blocks over the prompt's blocks (at most 256),
//!   from the router's own index of what it routed: per endpoint an LRU of block hashes as
//!   large as its KV cache (autotuned to the engine's block size and block count), filled
//!   after each pick; matching walks the prompt's blocks until no endpoint holds one, each
//!   holder counting it (`approximateprefix/plugin.go`).
//!
//! Metrics are scraped every 50 ms (the EPP's refresh-metrics-interval option).

use rand::rngs::ChaCha8Rng;

use super::{KvIndex, Needs, Routed, Router, RouterSpec, Setup, View, Weights, pick_best};
use crate::lru::Lru;

/// Most blocks of a prompt the prefix scorer hashes (`maxPrefixBlocksToMatch`).
const MAX_BLOCKS: usize = 256;

pub(super) const SPEC: RouterSpec = RouterSpec {
    name: "llm-d",
    about: "Weighted scorers: 2 x queue + 2 x KV utilisation + 3 x prefix match, scraped every \
            50 ms (llm-d / Gateway API Inference Extension default profile)",
    needs: Needs {
        hash_block: Some(0),
        scrape_s: Some(0.05),
        prefix_caching: true,
        ..Needs::NONE
    },
    new: |s: &Setup| {
        Box::new(LlmD {
            weights: s.weights,
            holders: KvIndex::new(s.replicas),
            lru: (s.capacity_blocks.iter())
                .map(|&c| Lru::new(if c > 0 { c as usize } else { CAPACITY_DEFAULT }))
                .collect(),
            matched: vec![0; s.replicas],
            evicted: Vec::new(),
        })
    },
};

struct LlmD {
    weights: Weights,
    /// Which endpoints' LRUs hold each hash.
    holders: KvIndex,
    /// Per endpoint, its LRU (as many entries as its KV blocks).
    lru: Vec<Lru>,
    matched: Vec<u32>,
    evicted: Vec<u64>,
}

impl Router for LlmD {
    fn pick(&mut self, q: &Routed<'_>, view: &View<'_>, rng: &mut ChaCha8Rng) -> usize {
        let n = view.metrics.len();
        let hashes = &q.hashes[..q.hashes.len().min(MAX_BLOCKS)];
        self.holders.matches(hashes, &mut self.matched);
        let (mut lo, mut hi) = (u32::MAX, 0u32);
        for m in view.metrics {
            lo = lo.min(m.waiting);
            hi = hi.max(m.waiting);
        }
        let w = self.weights;
        let matched = &self.matched;
        pick_best(n, true, rng, |i| {
            let m = view.metrics[i];
            let queue = if hi == lo {
                1.0
            } else {
                f64::from(hi - m.waiting) / f64::from(hi - lo)
            };
            let usage = f64::from(m.kv_used) / f64::from(view.capacity_blocks[i].max(1));
            let kv = 1.0 - usage.clamp(0.0, 1.0);
            let prefix = if hashes.is_empty() {
                0.0
            } else {
                f64::from(matched[i]) / hashes.len() as f64
            };
            w.queue * queue + w.kv * kv + w.prefix * prefix.clamp(0.0, 1.0)
        })
    }

    fn routed(&mut self, q: &Routed<'_>, replica: usize) {
        let hashes = &q.hashes[..q.hashes.len().min(MAX_BLOCKS)];
        let lru = &mut self.lru[replica];
        for &h in hashes {
            if lru.insert(h, &mut self.evicted) {
                self.holders.apply(replica, h, true);
            }
            for e in self.evicted.drain(..) {
                self.holders.apply(replica, e, false);
            }
        }
    }
}

/// Entries per endpoint that reports no block count (`lruCapacityPerServer`).
const CAPACITY_DEFAULT: usize = 31_250;
