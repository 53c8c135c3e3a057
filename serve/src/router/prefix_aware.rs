//! `prefix-aware`: production-stack's `PrefixAwareRouter` (`src/vllm_router/routers/
//! routing_logic.py` with `src/vllm_router/prefix/hashtrie.py`, tag vllm-stack-0.1.12). The
//! router keeps its own trie of the prompts it routed, in chunks of 128 characters, each node
//! holding the endpoints whose prompts passed through it, never evicted. A request walks the
//! trie narrowing the endpoints to those sharing every chunk so far; it goes to one of the
//! endpoints of the longest match, uniformly at random, and with no match (the default minimum
//! match length is 0) to any endpoint, uniformly at random: load is never looked at. Its prompt
//! is then inserted under the chosen endpoint.
//!
//! Chunks here are 32 tokens (128 characters at llm-d's 4 characters per token), hashed as the
//! engine hashes blocks, so a chunk matches where the prompts' tokens are equal.

use rand::RngExt;
use rand::rngs::ChaCha8Rng;

use super::{KvIndex, Needs, Routed, Router, RouterSpec, Setup, View};

/// Tokens per trie chunk (128 characters).
pub const CHUNK_TOKENS: u32 = 32;

pub(super) const SPEC: RouterSpec = RouterSpec {
    name: "prefix-aware",
    about: "Longest prefix match in the router's own trie of routed prompts, random among the \
            matches; no match: random (production-stack's prefix-aware router)",
    needs: Needs {
        hash_block: Some(CHUNK_TOKENS),
        prefix_caching: true,
        ..Needs::NONE
    },
    new: |s: &Setup| {
        Box::new(PrefixAware {
            trie: KvIndex::new(s.replicas),
            overlap: Vec::new(),
            hits: 0,
        })
    },
};

struct PrefixAware {
    trie: KvIndex,
    overlap: Vec<u32>,
    hits: u64,
}

impl Router for PrefixAware {
    fn pick(&mut self, q: &Routed<'_>, view: &View<'_>, rng: &mut ChaCha8Rng) -> usize {
        let n = view.in_flight.len();
        self.trie.overlaps(q.hashes, &mut self.overlap);
        let best = self.overlap.iter().copied().max().unwrap_or(0);
        if best > 0 {
            self.hits += 1;
        }
        let matched: Vec<usize> = (0..n).filter(|&r| self.overlap[r] == best).collect();
        matched[rng.random_range(0..matched.len())]
    }

    fn routed(&mut self, q: &Routed<'_>, replica: usize) {
        for &h in q.hashes {
            self.trie.apply(replica, h, true);
        }
    }
}
