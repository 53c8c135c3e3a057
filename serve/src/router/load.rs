//! What replicas report to routers: their load ([`Metrics`], vLLM's `num_requests_waiting`,
//! `num_requests_running` and `kv_cache_usage_perc` gauges, updated every engine step) and the
//! blocks they cache ([`KvIndex`], built from KV events: a block stored under a hash, a hash
//! evicted).

use rustc_hash::FxHashMap;

use crate::block_pool::BlockPool;

/// The replicas' cached blocks as a router learns them from KV events: through an index the
/// events built (when they reach it late), or, when they reach it at once, the replicas' own
/// prefix caches, which hold exactly what those events said.
#[derive(Debug)]
pub enum KvView<'a> {
    /// The index of the events seen so far.
    Index(&'a KvIndex),
    /// Each replica's block pool.
    Live(Vec<&'a BlockPool>),
}

impl KvView<'_> {
    /// [`KvIndex::matches`].
    pub fn matches(&self, hashes: &[u64], out: &mut Vec<u32>) {
        match self {
            KvView::Index(k) => k.matches(hashes, out),
            KvView::Live(pools) => {
                out.clear();
                out.resize(pools.len(), 0);
                for &h in hashes {
                    let mut any = false;
                    for (r, p) in pools.iter().enumerate() {
                        if p.cached_block(h).is_some() {
                            out[r] += 1;
                            any = true;
                        }
                    }
                    if !any {
                        break;
                    }
                }
            }
        }
    }

    /// Blocks replica `r` caches.
    pub fn cached_blocks(&self, r: usize) -> u64 {
        match self {
            KvView::Index(k) => k.cached_blocks(r),
            KvView::Live(pools) => pools[r].num_cached() as u64,
        }
    }
}

/// One replica's load as it reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Metrics {
    /// Requests waiting in the scheduler (vLLM's `num_requests_waiting`).
    pub waiting: u32,
    /// Requests running (`num_requests_running`).
    pub running: u32,
    /// KV blocks in use (`kv_cache_usage_perc` times the blocks).
    pub kv_used: u32,
}

/// The blocks each replica caches, as its KV events told the router: for each block hash, the
/// replicas holding it (a bit set), and each replica's count of cached blocks.
#[derive(Debug, Clone, Default)]
pub struct KvIndex {
    words: usize,
    /// Per (hash, word of 64 replicas): the bits of the replicas holding it.
    holders: FxHashMap<u64, u64>,
    cached: Vec<u64>,
}

/// The map key of hash `h` in word `w` (`h` itself for the first 64 replicas).
#[inline]
fn key(h: u64, w: usize) -> u64 {
    if w == 0 {
        h
    } else {
        let mut z = h ^ (w as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 31)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z ^ (z >> 29)
    }
}

impl KvIndex {
    /// An empty index of `replicas` replicas.
    pub fn new(replicas: usize) -> Self {
        KvIndex {
            words: replicas.div_ceil(64).max(1),
            holders: FxHashMap::default(),
            cached: vec![0; replicas],
        }
    }

    /// Replica `r` cached a block under hash `h` (`stored`) or evicted it.
    pub fn apply(&mut self, r: usize, h: u64, stored: bool) {
        let key = key(h, r / 64);
        let bit = 1u64 << (r % 64);
        let e = self.holders.entry(key).or_insert(0);
        if stored {
            if *e & bit == 0 {
                *e |= bit;
                self.cached[r] += 1;
            }
        } else if *e & bit != 0 {
            *e &= !bit;
            self.cached[r] -= 1;
            if *e == 0 {
                self.holders.remove(&key);
            }
        }
    }

    /// Blocks replica `r` caches.
    pub fn cached_blocks(&self, r: usize) -> u64 {
        self.cached[r]
    }

    /// For each replica, how many of `hashes` it holds, walking them in order until one no
    /// replica holds (the radix-tree match of Dynamo's indexer and GIE's prefix scorer: every
    /// holder of a matched block counts it).
    pub fn matches(&self, hashes: &[u64], out: &mut Vec<u32>) {
        let n = self.cached.len();
        out.clear();
        out.resize(n, 0);
        for &h in hashes {
            let mut any = false;
            for w in 0..self.words {
                let mut bits = self.holders.get(&key(h, w)).copied().unwrap_or(0);
                any |= bits != 0;
                while bits != 0 {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    if w * 64 + b < n {
                        out[w * 64 + b] += 1;
                    }
                }
            }
            if !any {
                break;
            }
        }
    }

    /// For each replica, how many of `hashes` it holds from the first on, consecutively.
    pub fn overlaps(&self, hashes: &[u64], out: &mut Vec<u32>) {
        let n = self.cached.len();
        out.clear();
        out.resize(n, 0);
        for w in 0..self.words {
            let mut live = u64::MAX;
            for &h in hashes {
                live &= self.holders.get(&key(h, w)).copied().unwrap_or(0);
                if live == 0 {
                    break;
                }
                let mut bits = live;
                while bits != 0 {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    let r = w * 64 + b;
                    if r < n {
                        out[r] += 1;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlaps_count_leading_blocks_per_replica() {
        let mut k = KvIndex::new(70);
        for h in [1, 2, 3] {
            k.apply(0, h, true);
        }
        k.apply(65, 1, true);
        k.apply(65, 3, true);
        k.apply(2, 2, true);
        let mut out = Vec::new();
        k.overlaps(&[1, 2, 3, 4], &mut out);
        assert_eq!((out[0], out[2], out[65]), (3, 0, 1));
        k.apply(0, 2, false);
        k.overlaps(&[1, 2, 3], &mut out);
        assert_eq!(out[0], 1);
        assert_eq!((k.cached_blocks(0), k.cached_blocks(65)), (2, 2));
        // Applying an event twice changes nothing.
        k.apply(0, 1, true);
        assert_eq!(k.cached_blocks(0), 2);
    }
}
