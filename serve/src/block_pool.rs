//! The GPU's KV blocks as vLLM V1 keeps them (`vllm/v1/core/block_pool.py`): a reference count
//! per block, a free queue in least-recently-used order, and the map from a full block's hash to
//! the block holding it (the prefix cache).
//!
//! - A free block stays in the cache (keeps its hash) until it is handed out again: freeing only
//!   appends it to the tail of the free queue; [`BlockPool::get_new_blocks`] pops from the head
//!   and evicts the hash of the block it takes.
//! - A cache hit on a free block ([`BlockPool::touch`]) takes it out of the free queue wherever
//!   it is and raises its reference count, so it cannot be evicted while in use.
//! - Block 0 is vLLM's null block (a placeholder for skipped positions): taken out of the queue
//!   at construction, never handed out, so `num_blocks - 1` blocks hold KV.
//!
//! The free queue is a doubly linked list over block indices (two `u32` arrays), so every
//! operation is O(1) and the pool allocates nothing after construction but the hash map's
//! entries.

use rustc_hash::FxHashMap;

const NONE: u32 = u32::MAX;

/// The GPU KV blocks, their reference counts, the LRU free queue and the prefix cache.
#[derive(Debug, Clone)]
pub struct BlockPool {
    ref_cnt: Vec<u32>,
    /// The block's hash while it is cached (`Some` only if it is in `cached`).
    hash: Vec<Option<u64>>,
    prev: Vec<u32>,
    next: Vec<u32>,
    head: u32,
    tail: u32,
    num_free: u32,
    cached: FxHashMap<u64, u32>,
    caching: bool,
    evictions: u64,
    /// KV events since the last drain, when recorded: `(hash, stored)`.
    events: Option<Vec<(u64, bool)>>,
}

impl BlockPool {
    /// A pool of `num_blocks` blocks (block 0 reserved as the null block); `caching`: keep full
    /// blocks' hashes for prefix reuse.
    pub fn new(num_blocks: u32, caching: bool) -> Self {
        let n = num_blocks as usize;
        let mut pool = BlockPool {
            ref_cnt: vec![0; n],
            hash: vec![None; n],
            prev: (0..num_blocks)
                .map(|i| if i == 0 { NONE } else { i - 1 })
                .collect(),
            next: (0..num_blocks)
                .map(|i| if i + 1 == num_blocks { NONE } else { i + 1 })
                .collect(),
            head: if n > 0 { 0 } else { NONE },
            tail: if n > 0 { num_blocks - 1 } else { NONE },
            num_free: num_blocks,
            cached: FxHashMap::default(),
            caching,
            evictions: 0,
            events: None,
        };
        if n > 0 {
            // The null block.
            pool.unlink(0);
            pool.ref_cnt[0] = 1;
        }
        pool
    }

    /// Blocks that hold KV (all but the null block).
    pub fn capacity(&self) -> u32 {
        self.ref_cnt.len().saturating_sub(1) as u32
    }

    /// Blocks in the free queue (free, or cached and evictable).
    pub fn num_free(&self) -> u32 {
        self.num_free
    }

    /// Blocks in use by some request.
    pub fn num_used(&self) -> u32 {
        self.capacity() - self.num_free
    }

    /// Blocks holding a cached hash.
    pub fn num_cached(&self) -> usize {
        self.cached.len()
    }

    /// Cached blocks whose hash was evicted to hand the block out again.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    /// Whether full blocks are kept for reuse.
    pub fn caching(&self) -> bool {
        self.caching
    }

    fn unlink(&mut self, b: u32) {
        let (p, n) = (self.prev[b as usize], self.next[b as usize]);
        if p == NONE {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NONE {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
        self.prev[b as usize] = NONE;
        self.next[b as usize] = NONE;
        self.num_free -= 1;
    }

    fn append(&mut self, b: u32) {
        self.prev[b as usize] = self.tail;
        self.next[b as usize] = NONE;
        if self.tail == NONE {
            self.head = b;
        } else {
            self.next[self.tail as usize] = b;
        }
        self.tail = b;
        self.num_free += 1;
    }

    /// Takes `n` blocks from the head of the free queue (the least recently freed), evicting
    /// their cached hashes, each with reference count 1, appended to `out`. The caller checked
    /// that `n <= num_free()`.
    pub fn get_new_blocks(&mut self, n: u32, out: &mut Vec<u32>) {
        assert!(
            n <= self.num_free,
            "get_new_blocks: {n} > {} free",
            self.num_free
        );
        for _ in 0..n {
            let b = self.head;
            self.unlink(b);
            if let Some(h) = self.hash[b as usize].take() {
                self.cached.remove(&h);
                self.evictions += 1;
                if let Some(e) = &mut self.events {
                    e.push((h, false));
                }
            }
            self.ref_cnt[b as usize] = 1;
            out.push(b);
        }
    }

    /// The block caching the content with hash `h`, if any.
    #[inline]
    pub fn cached_block(&self, h: u64) -> Option<u32> {
        self.cached.get(&h).copied()
    }

    /// Whether `b` is in the free queue (cached, unused: evictable).
    #[inline]
    pub fn is_free(&self, b: u32) -> bool {
        self.ref_cnt[b as usize] == 0
    }

    /// A cache hit on `b`: out of the free queue if it was there, one more reference.
    pub fn touch(&mut self, b: u32) {
        if self.ref_cnt[b as usize] == 0 {
            self.unlink(b);
        }
        self.ref_cnt[b as usize] += 1;
    }

    /// Drops one reference to each block, in the order given; a block left unreferenced goes
    /// to the tail of the free queue (keeping its hash: it stays a cache hit until reused).
    pub fn free_blocks(&mut self, blocks: impl IntoIterator<Item = u32>) {
        for b in blocks {
            let r = &mut self.ref_cnt[b as usize];
            debug_assert!(*r > 0, "block {b} freed twice");
            *r -= 1;
            if *r == 0 {
                self.append(b);
            }
        }
    }

    /// Records that `b` holds the full block with hash `h`. When another block already caches
    /// `h` (two requests computed the same block at once), `b` stays uncached, as the first
    /// copy serves every later hit.
    pub fn cache_block(&mut self, b: u32, h: u64) {
        if !self.caching || self.hash[b as usize].is_some() {
            return;
        }
        if let std::collections::hash_map::Entry::Vacant(e) = self.cached.entry(h) {
            e.insert(b);
            self.hash[b as usize] = Some(h);
            if let Some(e) = &mut self.events {
                e.push((h, true));
            }
        }
    }

    /// Records KV events from now on (vLLM's `BlockStored` / `BlockRemoved`, which a KV-aware
    /// router indexes).
    pub fn record_events(&mut self) {
        self.events.get_or_insert_with(Vec::new);
    }

    /// The KV events since the last call, `(hash, stored)` in order.
    pub fn drain_events(&mut self, out: &mut Vec<(u64, bool)>) {
        if let Some(e) = &mut self.events {
            out.append(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_queue_is_lru_and_null_block_is_reserved() {
        let mut p = BlockPool::new(5, true);
        assert_eq!((p.capacity(), p.num_free()), (4, 4));
        let mut a = Vec::new();
        p.get_new_blocks(3, &mut a);
        assert_eq!(a, [1, 2, 3]);
        p.cache_block(1, 11);
        p.cache_block(2, 22);
        // Freed tail first, as vLLM frees a request's blocks: 2 then 1.
        p.free_blocks([2, 1]);
        assert_eq!(p.num_free(), 3);
        // The queue is now 4, 2, 1: the never-used block first, then the freed ones in order.
        let mut b = Vec::new();
        p.get_new_blocks(2, &mut b);
        assert_eq!(b, [4, 2]);
        // Block 2's hash was evicted, block 1's is still a hit.
        assert_eq!(p.cached_block(22), None);
        assert_eq!(p.cached_block(11), Some(1));
        assert_eq!(p.evictions(), 1);
        // A hit on a free block takes it out of the queue.
        p.touch(1);
        assert_eq!(p.num_free(), 0);
        p.free_blocks([1]);
        assert!(p.is_free(1));
        assert_eq!(p.num_free(), 1);
    }

    #[test]
    fn shared_blocks_are_freed_when_the_last_user_frees_them() {
        let mut p = BlockPool::new(3, true);
        let mut a = Vec::new();
        p.get_new_blocks(1, &mut a);
        p.cache_block(a[0], 7);
        p.touch(a[0]);
        p.free_blocks([a[0]]);
        assert_eq!(p.num_free(), 1);
        p.free_blocks([a[0]]);
        assert_eq!(p.num_free(), 2);
        // A duplicate of a cached hash is not cached again.
        let mut b = Vec::new();
        p.get_new_blocks(1, &mut b);
        assert_ne!(b[0], a[0]);
        p.cache_block(b[0], 7);
        assert_eq!(p.cached_block(7), Some(a[0]));
    }

    #[test]
    fn without_caching_nothing_is_kept() {
        let mut p = BlockPool::new(3, false);
        let mut a = Vec::new();
        p.get_new_blocks(2, &mut a);
        p.cache_block(a[0], 5);
        assert_eq!(p.cached_block(5), None);
    }
}
