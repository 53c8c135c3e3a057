//! One attention kernel over a ragged batch: the batch's statistics ([`AttentionBatch`]) and the
//! work units a FlashAttention-style kernel cuts it into ([`AttentionWork`]), which the kernel
//! model ([`crate::kernel_model::AttentionFit`]) times.
//!
//! vLLM runs one attention kernel per layer for the whole batch (FlashAttention's varlen / paged
//! kernels), so a batch is described by sums and maxima over its sequences, not by a list: the
//! serving simulator extends an [`AttentionBatch`] sequence by sequence in O(1) without
//! allocating.
//!
//! The work units are FlashAttention-2's thread blocks: one per (sequence, query head, block of
//! [`BLOCK_Q`] query rows), times the split-KV count of [`flash_splits`]; a decode batch (one
//! query per sequence) packs the query heads of one KV head into a unit's rows, as
//! FlashAttention does for grouped-query attention.

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::model::ModelSpec;
use crate::quant::KvCacheDtype;

/// Query rows of one work unit: FlashAttention-2's split-KV kernel (the paged-KV kernel vLLM's
/// FlashAttention backend runs) tiles queries in blocks of 64 rows (`kBlockM`).
pub const BLOCK_Q: u32 = 64;

/// Query-key pairs of one head of one sequence of `q_len` queries over `kv_len` keys (the keys
/// include the new tokens'). Causal: query `i` (0-based) sees `kv_len - q_len + i + 1` keys.
pub fn attention_pairs(q_len: u32, kv_len: u32, causal: bool) -> f64 {
    let q = f64::from(q_len);
    let kv = f64::from(kv_len);
    if causal {
        q * (kv - q) + q * (q + 1.0) / 2.0
    } else {
        q * kv
    }
}

/// Pairs of one head of one sequence with the query rows padded to whole [`BLOCK_Q`] blocks,
/// each block seeing the keys its last row sees: what a kernel's tensor cores compute.
fn block_pairs(q_len: u32, kv_len: u32, causal: bool) -> f64 {
    let blocks = f64::from(q_len.div_ceil(BLOCK_Q));
    let m = f64::from(BLOCK_Q);
    if causal {
        let (q, kv) = (f64::from(q_len), f64::from(kv_len));
        // Block j sees kv - q + min((j + 1) m, q) keys.
        m * (blocks * (kv - q) + m * blocks * (blocks - 1.0) / 2.0 + q)
    } else {
        m * blocks * f64::from(kv_len)
    }
}

/// Statistics of the sequences one attention kernel serves: enough to time the kernel without
/// the list of sequences. `Copy`, extended in O(1) by [`AttentionBatch::add`].
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionBatch {
    /// Sequences.
    pub seqs: u32,
    /// Longest query length (new tokens of one sequence).
    pub max_q: u32,
    /// Longest key length (keys one sequence attends, its new tokens included).
    pub max_kv: u32,
    /// Query tokens, summed over sequences.
    pub q_tokens: u64,
    /// Keys attended, summed over sequences (the K/V tokens the kernel reads).
    pub kv_tokens: u64,
    /// Blocks of [`BLOCK_Q`] query rows, summed over sequences (`ceil(q_len / 64)` each).
    pub q_blocks: u64,
    /// Attended (query, key) pairs of one head, summed over sequences (causal for new tokens).
    pub pairs: f64,
    /// [`AttentionBatch::pairs`] with query rows padded to whole blocks.
    pub block_pairs: f64,
}

impl AttentionBatch {
    /// No sequences.
    pub const fn new() -> Self {
        AttentionBatch {
            seqs: 0,
            max_q: 0,
            max_kv: 0,
            q_tokens: 0,
            kv_tokens: 0,
            q_blocks: 0,
            pairs: 0.0,
            block_pairs: 0.0,
        }
    }

    /// `batch` sequences of `q_len` queries over `kv_len` keys each (`causal`: the queries are
    /// the last `q_len` of the keys).
    pub fn uniform(batch: u32, q_len: u32, kv_len: u32, causal: bool) -> Self {
        if batch == 0 {
            return Self::new();
        }
        let b = u64::from(batch);
        let bf = f64::from(batch);
        AttentionBatch {
            seqs: batch,
            max_q: q_len,
            max_kv: kv_len,
            q_tokens: b * u64::from(q_len),
            kv_tokens: b * u64::from(kv_len),
            q_blocks: b * u64::from(q_len.div_ceil(BLOCK_Q)),
            pairs: bf * attention_pairs(q_len, kv_len, causal),
            block_pairs: bf * block_pairs(q_len, kv_len, causal),
        }
    }

    /// Adds a sequence of `q_len` new tokens attending `kv_len` keys (its new tokens included),
    /// causally: what continuous batching runs for a prefill chunk or a decode step.
    #[inline]
    pub fn add(&mut self, q_len: u32, kv_len: u32) {
        self.add_with_mask(q_len, kv_len, q_len > 1);
    }

    /// Adds a sequence, with a causal mask or without.
    #[inline]
    pub fn add_with_mask(&mut self, q_len: u32, kv_len: u32, causal: bool) {
        self.seqs = self.seqs.saturating_add(1);
        self.max_q = self.max_q.max(q_len);
        self.max_kv = self.max_kv.max(kv_len);
        self.q_tokens += u64::from(q_len);
        self.kv_tokens += u64::from(kv_len);
        self.q_blocks += u64::from(q_len.div_ceil(BLOCK_Q));
        self.pairs += attention_pairs(q_len, kv_len, causal);
        self.block_pairs += block_pairs(q_len, kv_len, causal);
    }

    /// Adds every sequence of `other`.
    pub fn merge(&mut self, other: &AttentionBatch) {
        self.seqs = self.seqs.saturating_add(other.seqs);
        self.max_q = self.max_q.max(other.max_q);
        self.max_kv = self.max_kv.max(other.max_kv);
        self.q_tokens += other.q_tokens;
        self.kv_tokens += other.kv_tokens;
        self.q_blocks += other.q_blocks;
        self.pairs += other.pairs;
        self.block_pairs += other.block_pairs;
    }

    /// True when no sequence was added.
    pub fn is_empty(&self) -> bool {
        self.seqs == 0
    }

    /// FLOPs (multiply-add = 2) of the attended pairs: `4 * q_heads * head_dim * pairs`.
    pub fn flops(&self, q_heads: u16, head_dim: u16) -> f64 {
        4.0 * f64::from(q_heads) * f64::from(head_dim) * self.pairs
    }

    /// Device-memory bytes: Q and O per query head and token, K and V per KV head and key.
    pub fn mem_bytes(&self, q_heads: u16, kv_heads: u16, head_dim: u16, dtype: DType) -> f64 {
        f64::from(head_dim)
            * (2.0 * f64::from(q_heads) * self.q_tokens as f64
                + 2.0 * f64::from(kv_heads) * self.kv_tokens as f64)
            * dtype.bytes() as f64
    }

    /// [`AttentionBatch::mem_bytes`] with K and V in the cache's element type `kv`.
    pub fn mem_bytes_kv(
        &self,
        q_heads: u16,
        kv_heads: u16,
        head_dim: u16,
        dtype: DType,
        kv: KvCacheDtype,
    ) -> f64 {
        if kv.is_auto() {
            return self.mem_bytes(q_heads, kv_heads, head_dim, dtype);
        }
        f64::from(head_dim)
            * (2.0 * f64::from(q_heads) * self.q_tokens as f64 * dtype.bytes() as f64
                + 2.0 * f64::from(kv_heads) * self.kv_tokens as f64 * kv.bytes(dtype) as f64)
    }
}

/// `count` lengths spread evenly over `mean * (1 - spread) ..= mean * (1 + spread)`, with exactly
/// the total of `count` sequences of `mean` (the offsets are symmetric): the uneven batch to hold
/// against a uniform one of the same total, e.g. `spread_lengths(128, 600, 1.0 / 6.0)` spans
/// 500..=700.
pub fn spread_lengths(count: u32, mean: u32, spread: f64) -> impl Iterator<Item = u32> {
    let half = spread * f64::from(mean);
    (0..count).map(move |i| {
        let x = if count > 1 {
            2.0 * f64::from(i) / f64::from(count - 1) - 1.0
        } else {
            0.0
        };
        (i64::from(mean) + (half * x).round() as i64).max(0) as u32
    })
}

/// Keys per split-KV block of FlashAttention-2's split-KV kernel (`kBlockN`): 256 for head
/// dimensions up to 64, 128 up to 128, 64 above.
pub fn block_kv(head_dim: u16) -> u32 {
    if head_dim <= 64 {
        256
    } else if head_dim <= 128 {
        128
    } else {
        64
    }
}

/// FlashAttention-2's split-KV count (`num_splits_heuristic` in `flash_api.cpp`, called with
/// twice the SMs as `slots` since two 128-thread blocks share an SM): none when `units` thread
/// blocks nearly fill the slots (at least 0.8 of them); else the smallest split count whose wave
/// efficiency `w / ceil(w)` (`w = units * splits / slots`) is at least 0.85 of the best one's,
/// among the counts up to `max_splits` (128), `slots` and `n_blocks` that change the blocks per
/// split. Single precision, as FlashAttention computes it.
pub fn flash_splits(units: u64, slots: u64, n_blocks: u64, max_splits: u64) -> u32 {
    // A pure function asked the same question step after step (a decode batch's shape moves
    // by one key a step, its key blocks every 128): the last answer per thread is kept.
    thread_local! {
        static LAST: std::cell::Cell<Option<([u64; 4], u32)>> = const { std::cell::Cell::new(None) };
    }
    let key = [units, slots, n_blocks, max_splits];
    if let Some((k, v)) = LAST.get()
        && k == key
    {
        return v;
    }
    let v = flash_splits_of(units, slots, n_blocks, max_splits);
    LAST.set(Some((key, v)));
    v
}

fn flash_splits_of(units: u64, slots: u64, n_blocks: u64, max_splits: u64) -> u32 {
    if units == 0 || slots == 0 || units as f32 >= 0.8f32 * slots as f32 {
        return 1;
    }
    let max = max_splits.min(slots).min(n_blocks);
    let eligible = |s: u64| s == 1 || n_blocks.div_ceil(s) != n_blocks.div_ceil(s - 1);
    let efficiency = |s: u64| {
        let waves = (units * s) as f32 / slots as f32;
        waves / waves.ceil()
    };
    let best = (1..=max)
        .filter(|&s| eligible(s))
        .map(efficiency)
        .fold(0.0f32, f32::max);
    (1..=max)
        .find(|&s| eligible(s) && f64::from(efficiency(s)) >= 0.85 * f64::from(best))
        .map_or(1, |s| s as u32)
}

/// The heads one attention kernel runs: query and key/value heads of `head_dim` elements of
/// `dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    /// Query heads.
    pub q_heads: u16,
    /// Key/value heads.
    pub kv_heads: u16,
    /// Head dimension.
    pub head_dim: u16,
    /// Element type.
    pub dtype: DType,
    /// Element type of the cached K and V (`auto`: `dtype`).
    pub kv: KvCacheDtype,
}

impl Heads {
    /// The heads of one tensor-parallel rank of `m`.
    pub fn of(m: &ModelSpec) -> Self {
        Heads {
            q_heads: m.num_heads as u16,
            kv_heads: m.num_kv_heads as u16,
            head_dim: m.head_dim as u16,
            dtype: m.dtype,
            kv: m.kv_cache_dtype,
        }
    }
}

/// An attention kernel cut into work units: totals for the roofline and, with a GPU's SM count,
/// the units' mean and longest work for the wave model of
/// [`crate::kernel_model::AttentionFit`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionWork {
    /// FLOPs of the attended pairs.
    pub flops: f64,
    /// Device-memory bytes (Q, O, K, V once).
    pub bytes: f64,
    /// Element type (the peak it runs at).
    pub dtype: DType,
    /// Work units (thread blocks, splits included); 0 without an SM count or an empty batch.
    pub units: f64,
    /// Split-KV count ([`flash_splits`]; 1: none).
    pub splits: u32,
    /// Mean FLOPs of a unit, query rows padded to whole blocks.
    pub unit_flops: f64,
    /// Mean device-memory bytes of a unit (the batch's bytes over the units).
    pub unit_bytes: f64,
    /// FLOPs of the longest unit (the longest sequence's last block, one split).
    pub long_flops: f64,
    /// K and V bytes the longest unit reads.
    pub long_bytes: f64,
}

impl AttentionWork {
    /// The work of `batch` on `heads`; `sms`: the GPU's streaming multiprocessors (`None`:
    /// totals only, for the roofline).
    pub fn new(batch: &AttentionBatch, heads: &Heads, sms: Option<u32>) -> Self {
        let flops = batch.flops(heads.q_heads, heads.head_dim);
        let bytes = batch.mem_bytes_kv(
            heads.q_heads,
            heads.kv_heads,
            heads.head_dim,
            heads.dtype,
            heads.kv,
        );
        Self::with_totals(batch, heads, sms, flops, bytes)
    }

    /// As [`AttentionWork::new`] with the totals given (an op's own `flops()` and `mem_bytes()`,
    /// so that the roofline stays bit for bit what the op computes).
    pub fn with_totals(
        batch: &AttentionBatch,
        heads: &Heads,
        sms: Option<u32>,
        flops: f64,
        bytes: f64,
    ) -> Self {
        let Heads {
            q_heads,
            kv_heads,
            head_dim,
            dtype,
            kv,
        } = *heads;
        let mut w = AttentionWork {
            flops,
            bytes,
            dtype,
            units: 0.0,
            splits: 1,
            unit_flops: 0.0,
            unit_bytes: 0.0,
            long_flops: 0.0,
            long_bytes: 0.0,
        };
        let Some(sms) = sms.filter(|&s| s > 0) else {
            return w;
        };
        if batch.seqs == 0 || q_heads == 0 {
            return w;
        }
        let kv_heads = kv_heads.max(1);
        let d = f64::from(head_dim);
        // Decode (one query per sequence): the query heads of a KV head share its units' rows.
        let packed = batch.max_q <= 1;
        let group_blocks = u64::from(q_heads.div_ceil(kv_heads)).div_ceil(u64::from(BLOCK_Q));
        let (base_units, padded_flops, long_rows) = if packed {
            let rows = (group_blocks * u64::from(BLOCK_Q)) as f64;
            (
                u64::from(batch.seqs) * u64::from(kv_heads) * group_blocks,
                4.0 * d * f64::from(kv_heads) * rows * batch.kv_tokens as f64,
                rows,
            )
        } else {
            (
                u64::from(q_heads) * batch.q_blocks,
                4.0 * d * f64::from(q_heads) * batch.block_pairs,
                f64::from(BLOCK_Q),
            )
        };
        let block = block_kv(head_dim);
        let n_blocks = u64::from(batch.max_kv.div_ceil(block));
        let splits = flash_splits(base_units, 2 * u64::from(sms), n_blocks, 128);
        let units = (base_units * u64::from(splits)) as f64;
        // The longest unit: the longest sequence's last query block, over one split's keys.
        let long_keys = u64::from(batch.max_kv)
            .min(n_blocks.div_ceil(u64::from(splits)) * u64::from(block))
            as f64;
        w.units = units;
        w.splits = splits;
        w.unit_flops = padded_flops / units;
        w.unit_bytes = bytes / units;
        w.long_flops = 4.0 * d * long_rows * long_keys;
        w.long_bytes = 2.0 * d * long_keys * kv.bytes(dtype) as f64;
        w
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causal_pairs_count_the_triangle() {
        assert_eq!(attention_pairs(4, 4, true), 10.0);
        assert_eq!(attention_pairs(1, 9, true), 9.0);
        assert_eq!(attention_pairs(2, 5, true), 3.0 * 2.0 + 3.0);
        assert_eq!(attention_pairs(3, 5, false), 15.0);
    }

    #[test]
    fn block_pairs_pad_rows_to_whole_blocks() {
        // One decode row computes a whole 64-row tile.
        assert_eq!(block_pairs(1, 100, true), 6400.0);
        // 65 queries after 35 cached keys: block 0 sees 35 + 64 keys, block 1 all 100.
        assert_eq!(block_pairs(65, 100, true), 64.0 * (99.0 + 100.0));
        assert_eq!(block_pairs(65, 100, false), 64.0 * 200.0);
        assert!(block_pairs(512, 2048, true) >= attention_pairs(512, 2048, true));
    }

    #[test]
    fn adding_sequences_equals_the_uniform_batch() {
        let mut b = AttentionBatch::new();
        for _ in 0..7 {
            b.add(96, 1000);
        }
        assert_eq!(b, AttentionBatch::uniform(7, 96, 1000, true));
        let mut m = AttentionBatch::uniform(3, 1, 500, false);
        m.merge(&b);
        assert_eq!(m.seqs, 10);
        assert_eq!((m.max_q, m.max_kv), (96, 1000));
        assert_eq!(m.q_tokens, 3 + 7 * 96);
        assert_eq!(m.q_blocks, 3 + 7 * 2);
        assert_eq!(
            AttentionBatch::uniform(0, 5, 5, true),
            AttentionBatch::new()
        );
    }

    #[test]
    fn flash_splits_follow_flash_attention() {
        // 108 SMs (216 slots), 32 heads: hand-evaluated from the heuristic.
        // One sequence of 2048 keys (16 blocks of 128): 6 splits (efficiency 0.89).
        assert_eq!(flash_splits(32, 216, 16, 128), 6);
        // Three sequences: 2 splits; four: 3; five: 4; six fill 0.8 of the slots: none.
        assert_eq!(flash_splits(96, 216, 16, 128), 2);
        assert_eq!(flash_splits(128, 216, 16, 128), 3);
        assert_eq!(flash_splits(160, 216, 16, 128), 4);
        assert_eq!(flash_splits(192, 216, 16, 128), 1);
        // A single key block cannot split.
        assert_eq!(flash_splits(32, 216, 1, 128), 1);
        assert_eq!(flash_splits(0, 216, 16, 128), 1);
    }

    #[test]
    fn spread_lengths_keep_the_total() {
        for count in [1u32, 2, 3, 7, 128, 255] {
            let v: Vec<u32> = spread_lengths(count, 600, 1.0 / 6.0).collect();
            assert_eq!(v.len(), count as usize);
            assert_eq!(
                v.iter().map(|&l| u64::from(l)).sum::<u64>(),
                600 * u64::from(count)
            );
            assert!(v.iter().all(|&l| (500..=700).contains(&l)), "{v:?}");
        }
        let v: Vec<u32> = spread_lengths(3, 600, 1.0 / 6.0).collect();
        assert_eq!(v, [500, 600, 700]);
    }

    /// Llama-3-8B-like GQA: 32 query heads over 8 KV heads.
    const LLAMA_3_8B: Heads = Heads {
        q_heads: 32,
        kv_heads: 8,
        head_dim: 128,
        dtype: DType::Bf16,
        kv: KvCacheDtype::Auto,
    };

    #[test]
    fn decode_packs_query_heads_of_a_kv_head() {
        // 16 decode rows of 1000 keys.
        let b = AttentionBatch::uniform(16, 1, 1000, false);
        let w = AttentionWork::new(&b, &LLAMA_3_8B, Some(132));
        assert_eq!(w.units, 16.0 * 8.0 * w.splits as f64);
        // The same rows as a prefill-shaped batch (two query tokens) are not packed.
        let p = AttentionBatch::uniform(16, 2, 1000, true);
        let wp = AttentionWork::new(&p, &LLAMA_3_8B, Some(132));
        assert_eq!(wp.units, 16.0 * 32.0 * wp.splits as f64);
        // Without an SM count: totals only.
        let r = AttentionWork::new(&b, &LLAMA_3_8B, None);
        assert_eq!(r.units, 0.0);
        assert_eq!(r.flops, w.flops);
        assert_eq!(r.bytes, b.mem_bytes(32, 8, 128, DType::Bf16));
    }
}
