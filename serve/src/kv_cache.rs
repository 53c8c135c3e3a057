//! The KV cache manager of vLLM V1 (`vllm/v1/core/kv_cache_manager.py`) over a
//! [`BlockPool`]: each request's block table, the prefix-cache lookup of a new request
//! ([`KvCacheManager::computed_blocks`]), slot allocation with the blocks it made full cached at
//! once ([`KvCacheManager::allocate_slots`]), and freeing in reverse order
//! ([`KvCacheManager::free`]).
//!
//! A request's tokens are described by [`Layout`], a chain of segments (shared prefix segments,
//! the rest of the prompt, the output). A full block's hash chains its parent block's hash with
//! the pieces of segments it covers (segment id, offset, length), so two requests whose prompts
//! start with the same segments get the same hashes for the blocks inside them, as vLLM's hash
//! of the token ids would be equal; a block that ends inside a unique part is unique.

use kvplan_workloads::Request;

use crate::block_pool::BlockPool;

/// One run of tokens: a segment id and how many of its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Piece {
    /// Segment id (a shared prefix segment, or a request's own unique tokens).
    pub id: u64,
    /// Tokens.
    pub len: u32,
}

/// Tag of a request's unique prompt remainder and output (mixed with its id).
const UNIQUE_PROMPT: u64 = 0x9e37_79b9_7f4a_7c15;
const UNIQUE_OUTPUT: u64 = 0xc2b2_ae3d_27d4_eb4f;

#[inline]
fn mix(h: u64, x: u64) -> u64 {
    // FxHash's combining step followed by a murmur3 finaliser: cheap and well spread.
    let mut z = (h.rotate_left(5) ^ x).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    z ^= z >> 33;
    z = z.wrapping_mul(0xff51_afd7_ed55_8ccd);
    z ^ (z >> 33)
}

/// A request's token stream as segments: its prefix segments, the rest of the prompt (unique to
/// it), then its output (its `output_segment`, or unique).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    pieces: Vec<Piece>,
}

impl Layout {
    /// The layout of `r`.
    pub fn of(r: &Request) -> Self {
        let mut pieces = Vec::new();
        let mut shared = 0u32;
        for s in r.prefix.iter().flat_map(|p| p.iter()) {
            if s.len == 0 || shared >= r.prompt_tokens {
                continue;
            }
            let len = s.len.min(r.prompt_tokens - shared);
            pieces.push(Piece { id: s.id, len });
            shared += len;
        }
        if r.prompt_tokens > shared {
            pieces.push(Piece {
                id: mix(UNIQUE_PROMPT, r.id),
                len: r.prompt_tokens - shared,
            });
        }
        pieces.push(Piece {
            id: r.output_segment.unwrap_or_else(|| mix(UNIQUE_OUTPUT, r.id)),
            len: u32::MAX,
        });
        Layout { pieces }
    }

    /// A layout with no pieces (for requests that are never hashed).
    pub const fn empty() -> Self {
        Layout { pieces: Vec::new() }
    }
}

/// A request's KV state: its block table and its full blocks' hashes.
#[derive(Debug, Clone, Default)]
pub struct ReqKv {
    /// Block table, in token order.
    pub blocks: Vec<u32>,
    /// Leading blocks of `blocks` already entered in the prefix cache.
    cached: u32,
    /// Hashes of the request's first full blocks (computed on demand, in order).
    hashes: Vec<u64>,
    /// Where hashing resumes: piece index and offset in it.
    cursor: (u32, u32),
}

impl ReqKv {
    /// Drops the hashes (a finished request's) to return their memory.
    pub fn clear(&mut self) {
        *self = ReqKv::default();
    }

    /// Hashes of the first `n` full blocks (computing the missing ones).
    pub(crate) fn hashes_upto(&mut self, layout: &Layout, n: usize, block_size: u32) -> &[u64] {
        while self.hashes.len() < n {
            let parent = self.hashes.last().copied().unwrap_or(0);
            let mut h = mix(parent, u64::from(block_size));
            let mut need = block_size;
            let (mut i, mut off) = self.cursor;
            while need > 0 {
                let p = layout.pieces[i as usize];
                let take = need.min(p.len - off);
                h = mix(mix(mix(h, p.id), u64::from(off)), u64::from(take));
                need -= take;
                off += take;
                if off == p.len {
                    i += 1;
                    off = 0;
                }
            }
            self.cursor = (i, off);
            self.hashes.push(h);
        }
        &self.hashes[..n]
    }
}

/// The hashes of the first full blocks of `r`'s prompt at `block_size` tokens per block, at
/// most `max_blocks` of them, into `out`: the hashes the engine's prefix cache gives those
/// blocks (a router hashing the prompt as the engine does).
pub fn prompt_hashes(r: &Request, block_size: u32, max_blocks: usize, out: &mut Vec<u64>) {
    out.clear();
    let bs = block_size.max(1);
    let n = ((r.prompt_tokens / bs) as usize).min(max_blocks);
    let layout = Layout::of(r);
    let mut kv = ReqKv::default();
    out.extend_from_slice(kv.hashes_upto(&layout, n, bs));
}

/// Prefix-cache counters (vLLM's `PrefixCacheStats`, v0.15.1 `vllm/v1/metrics/stats.py`: a
/// request scheduled again after a preemption is counted apart, as vLLM counts it since 0.11.2,
/// so the hit rate says what requests found of each other's prompts, not of their own KV).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CacheStats {
    /// Lookups of new requests.
    pub lookups: u64,
    /// Tokens new requests looked up (their lengths).
    pub queried_tokens: u64,
    /// Tokens new requests found cached.
    pub hit_tokens: u64,
    /// Lookups of requests resumed after a preemption (`preempted_requests`).
    pub preempted_lookups: u64,
    /// Tokens they looked up (`preempted_queries`).
    pub preempted_queried_tokens: u64,
    /// Tokens they found cached, mostly their own blocks not yet evicted (`preempted_hits`).
    pub preempted_hit_tokens: u64,
}

/// Block tables over a [`BlockPool`], with vLLM V1's prefix caching, and the tier below it: a
/// CPU tier of blocks in host memory ([`crate::tier`]), when the engine has one.
#[derive(Debug)]
pub struct KvCacheManager {
    pool: BlockPool,
    block_size: u32,
    stats: CacheStats,
    scratch: Vec<u32>,
    /// The CPU tier (vLLM's KV offloading), if any.
    pub tier: Option<crate::tier::CpuTier>,
}

impl KvCacheManager {
    /// `num_blocks` GPU blocks (block 0 reserved) of `block_size` tokens; `caching`: automatic
    /// prefix caching.
    pub fn new(num_blocks: u32, block_size: u32, caching: bool) -> Self {
        KvCacheManager {
            pool: BlockPool::new(num_blocks, caching),
            block_size,
            stats: CacheStats::default(),
            scratch: Vec::new(),
            tier: None,
        }
    }

    /// The pool.
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// Blocks free or evictable.
    pub fn num_free(&self) -> u32 {
        self.pool.num_free()
    }

    /// Prefix-cache counters.
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// vLLM's `get_computed_blocks`: the cached blocks that begin a request of `num_tokens`
    /// tokens (prompt plus any generated), longest first match, whole blocks, at most
    /// `num_tokens - 1` tokens (the last token is always computed, for its logits). Puts the
    /// blocks in `out` and returns the tokens they hold. Without caching: none. `preempted`:
    /// the request is being scheduled again after a preemption (counted apart).
    pub fn computed_blocks(
        &mut self,
        kv: &mut ReqKv,
        layout: &Layout,
        num_tokens: u32,
        preempted: bool,
        out: &mut Vec<u32>,
    ) -> u32 {
        out.clear();
        if !self.pool.caching() {
            return 0;
        }
        let max_blocks = (num_tokens.saturating_sub(1) / self.block_size) as usize;
        let hashes = kv.hashes_upto(layout, max_blocks, self.block_size);
        for &h in hashes {
            match self.pool.cached_block(h) {
                Some(b) => out.push(b),
                None => break,
            }
        }
        let hit = out.len() as u32 * self.block_size;
        let s = &mut self.stats;
        let (lookups, queried, hits) = if preempted {
            (
                &mut s.preempted_lookups,
                &mut s.preempted_queried_tokens,
                &mut s.preempted_hit_tokens,
            )
        } else {
            (&mut s.lookups, &mut s.queried_tokens, &mut s.hit_tokens)
        };
        *lookups += 1;
        *queried += u64::from(num_tokens);
        *hits += u64::from(hit);
        hit
    }

    /// vLLM's `allocate_slots`: room for `num_new_tokens` more tokens after `num_computed`
    /// (which include the `new_computed` prefix-hit blocks being added now), or `false` when the
    /// free queue (less the evictable hits it would lose) cannot provide the blocks. On success
    /// the hits are taken, new blocks appended, and every block made full by the tokens up to
    /// `min(num_computed + num_new_tokens, num_tokens)` entered in the cache (vLLM caches at
    /// scheduling, before the forward pass runs).
    #[allow(clippy::too_many_arguments)]
    pub fn allocate_slots(
        &mut self,
        kv: &mut ReqKv,
        layout: &Layout,
        num_computed: u32,
        num_new_tokens: u32,
        new_computed: &[u32],
        num_tokens: u32,
        max_model_len: u32,
    ) -> bool {
        let bs = self.block_size;
        let need_tokens = (num_computed + num_new_tokens).min(max_model_len.max(1));
        let have = kv.blocks.len() as u32 + new_computed.len() as u32;
        let evictable = new_computed
            .iter()
            .filter(|&&b| self.pool.is_free(b))
            .count() as u32;
        let to_allocate = need_tokens.div_ceil(bs).saturating_sub(have) + evictable;
        if to_allocate > self.pool.num_free() {
            return false;
        }
        for &b in new_computed {
            self.pool.touch(b);
        }
        kv.blocks.extend_from_slice(new_computed);
        let new = need_tokens
            .div_ceil(bs)
            .saturating_sub(kv.blocks.len() as u32);
        self.pool.get_new_blocks(new, &mut kv.blocks);
        if self.pool.caching() {
            let full = ((num_computed + num_new_tokens).min(num_tokens) / bs) as usize;
            let full = full.min(kv.blocks.len());
            if full > kv.cached as usize {
                kv.hashes_upto(layout, full, bs);
                for i in kv.cached as usize..full {
                    self.pool.cache_block(kv.blocks[i], kv.hashes[i]);
                }
                kv.cached = full as u32;
            }
        }
        true
    }

    /// Whether [`KvCacheManager::allocate_slots`] of one decode token past `num_computed`
    /// (with `num_computed + 1` tokens known, below `max_model_len`) would change nothing: the
    /// token's block is allocated and no block becomes full. Then a stretch of decode-only steps
    /// skips the call.
    #[inline]
    pub fn decode_slot_ready(&self, kv: &ReqKv, num_computed: u32) -> bool {
        let bs = self.block_size;
        let tokens = num_computed + 1;
        tokens.div_ceil(bs) <= kv.blocks.len() as u32
            && (!self.pool.caching()
                || ((tokens / bs) as usize).min(kv.blocks.len()) <= kv.cached as usize)
    }

    /// `allocate_slots` for tokens that will come from outside the GPU (a KV connector's load):
    /// the prefix hits taken and blocks for `num_external` more tokens after `num_computed`
    /// allocated, none of them entered in the prefix cache until their KV has arrived
    /// ([`KvCacheManager::cache_upto`]; vLLM's `delay_cache_blocks`). `false` (changing
    /// nothing) when the free queue cannot provide them.
    pub fn allocate_uncached(
        &mut self,
        kv: &mut ReqKv,
        num_computed: u32,
        num_external: u32,
        new_computed: &[u32],
    ) -> bool {
        let bs = self.block_size;
        let need = (num_computed + num_external).div_ceil(bs);
        let have = kv.blocks.len() as u32 + new_computed.len() as u32;
        let evictable = new_computed
            .iter()
            .filter(|&&b| self.pool.is_free(b))
            .count() as u32;
        if need.saturating_sub(have) + evictable > self.pool.num_free() {
            return false;
        }
        for &b in new_computed {
            self.pool.touch(b);
        }
        kv.blocks.extend_from_slice(new_computed);
        let new = need.saturating_sub(kv.blocks.len() as u32);
        self.pool.get_new_blocks(new, &mut kv.blocks);
        true
    }

    /// Enters the full blocks of a request's first `tokens` tokens in the prefix cache (vLLM's
    /// `cache_blocks` once a connector's load is done).
    pub fn cache_upto(&mut self, kv: &mut ReqKv, layout: &Layout, tokens: u32) {
        if !self.pool.caching() {
            return;
        }
        let full = ((tokens / self.block_size) as usize).min(kv.blocks.len());
        if full > kv.cached as usize {
            kv.hashes_upto(layout, full, self.block_size);
            for i in kv.cached as usize..full {
                self.pool.cache_block(kv.blocks[i], kv.hashes[i]);
            }
            kv.cached = full as u32;
        }
    }

    /// The pool, to record its KV events.
    pub fn pool_mut(&mut self) -> &mut BlockPool {
        &mut self.pool
    }

    /// Frees a request's blocks, last block first (so a request's tail is evicted before its
    /// head, as vLLM's `free` orders them), keeping its hashes for a later lookup.
    pub fn free(&mut self, kv: &mut ReqKv) {
        self.scratch.clear();
        self.scratch.extend(kv.blocks.iter().rev());
        self.pool.free_blocks(self.scratch.iter().copied());
        kv.blocks.clear();
        kv.cached = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvplan_workloads::Segment;
    use std::sync::Arc;

    fn req(id: u64, prompt: u32, prefix: &[(u64, u32)]) -> Request {
        let mut r = Request::new(id, 0.0, prompt, 8);
        if !prefix.is_empty() {
            r.prefix = Some(Arc::from(
                prefix
                    .iter()
                    .map(|&(id, len)| Segment { id, len })
                    .collect::<Vec<_>>(),
            ));
        }
        r
    }

    #[test]
    fn shared_segments_give_equal_hashes_until_the_first_difference() {
        let a = Layout::of(&req(0, 100, &[(1, 40), (2, 50)]));
        let b = Layout::of(&req(1, 100, &[(1, 40), (3, 50)]));
        let (mut ka, mut kb) = (ReqKv::default(), ReqKv::default());
        let ha = ka.hashes_upto(&a, 6, 16).to_vec();
        let hb = kb.hashes_upto(&b, 6, 16).to_vec();
        // Blocks 0 and 1 (tokens 0..32) lie inside segment 1; block 2 (32..48) reaches into the
        // second segment, which differs.
        assert_eq!(ha[..2], hb[..2]);
        assert!(ha[2..].iter().zip(&hb[2..]).all(|(x, y)| x != y));
        // Computing in two steps gives the same hashes.
        let mut kc = ReqKv::default();
        kc.hashes_upto(&a, 2, 16);
        assert_eq!(kc.hashes_upto(&a, 6, 16), &ha[..]);
    }

    #[test]
    fn a_second_request_hits_the_first_ones_full_blocks_but_not_its_last_token() {
        let mut m = KvCacheManager::new(64, 16, true);
        let a = req(0, 64, &[(9, 64)]);
        let la = Layout::of(&a);
        let mut ka = ReqKv::default();
        let mut hits = Vec::new();
        assert_eq!(m.computed_blocks(&mut ka, &la, 64, false, &mut hits), 0);
        assert!(m.allocate_slots(&mut ka, &la, 0, 64, &hits, 64, 4096));
        assert_eq!(ka.blocks.len(), 4);
        // The same 64-token prompt: at most 63 tokens may hit, so three whole blocks.
        let b = req(1, 64, &[(9, 64)]);
        let lb = Layout::of(&b);
        let mut kb = ReqKv::default();
        assert_eq!(m.computed_blocks(&mut kb, &lb, 64, false, &mut hits), 48);
        assert_eq!(hits, ka.blocks[..3]);
        let free_before = m.num_free();
        assert!(m.allocate_slots(&mut kb, &lb, 48, 16, &hits.clone(), 64, 4096));
        // The hits were in use: only the fourth block is new.
        assert_eq!(m.num_free(), free_before - 1);
        // Freed, the blocks stay cached and a third request still hits them.
        m.free(&mut ka);
        m.free(&mut kb);
        let mut kc = ReqKv::default();
        let c = req(2, 80, &[(9, 64)]);
        assert_eq!(
            m.computed_blocks(&mut kc, &Layout::of(&c), 80, false, &mut hits),
            64
        );
        let s = m.stats();
        assert_eq!((s.lookups, s.queried_tokens, s.hit_tokens), (3, 208, 112));
    }

    #[test]
    fn allocation_fails_when_hits_would_have_to_be_evicted() {
        // 4 usable blocks. A fills and frees two cached blocks; B takes the other two.
        let mut m = KvCacheManager::new(5, 16, true);
        let a = req(0, 32, &[(5, 32)]);
        let la = Layout::of(&a);
        let mut ka = ReqKv::default();
        assert!(m.allocate_slots(&mut ka, &la, 0, 32, &[], 32, 4096));
        m.free(&mut ka);
        let mut kb = ReqKv::default();
        let lb = Layout::of(&req(1, 32, &[]));
        assert!(m.allocate_slots(&mut kb, &lb, 0, 32, &[], 32, 4096));
        // C hits A's first block (cap 47 tokens of 48 -> 2 blocks, but only block 0 of A
        // survived: B's allocation evicted the least recently freed, A's tail, first... both of
        // A's blocks were free; B took the queue head (the never-used blocks 3 and 4).
        let c = req(2, 48, &[(5, 32)]);
        let lc = Layout::of(&c);
        let mut kc = ReqKv::default();
        let mut hits = Vec::new();
        assert_eq!(m.computed_blocks(&mut kc, &lc, 48, false, &mut hits), 32);
        // 3 blocks for 48 tokens: the two hits (evictable, so they count) and one new: 3 > 2
        // free blocks in all.
        assert!(!m.allocate_slots(&mut kc, &lc, 32, 16, &hits.clone(), 48, 4096));
        m.free(&mut kb);
        assert!(m.allocate_slots(&mut kc, &lc, 32, 16, &hits, 48, 4096));
        assert_eq!(kc.blocks[..2], hits[..]);
    }
}
