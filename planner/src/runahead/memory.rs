//! Per-device memory of a KV-Runahead partition, and the floor no partition can go below.

use super::costs::starts;
use kvplan_vocab::memory::{
    AttentionImpl, MemoryKind, MemoryPlan, PrefillPass, prefill_working_set,
};
use kvplan_vocab::model::ModelSpec;

/// One device's memory: the weights, the K,V of `kv_tokens` tokens of every layer (`batch`
/// sequences), and the prefill activations of a `chunk`-token chunk.
fn one_device(m: &ModelSpec, batch: u32, kv_tokens: u64, chunk: u32) -> MemoryPlan {
    // The chunk attends over its prefix with a causal offset (FlashAttention-style), and the
    // last device ends with one row of logits per sequence.
    let act = prefill_working_set(
        m,
        &PrefillPass {
            batch: u64::from(batch),
            q_tokens: u64::from(chunk),
            context: kv_tokens.max(u64::from(chunk)),
            attention: AttentionImpl::Fused,
            logits_rows: u64::from(batch),
        },
    )
    .peak;
    let mut mem = MemoryPlan::default();
    mem.gpu(MemoryKind::Weights, m.weight_bytes());
    mem.gpu(
        MemoryKind::KvCache,
        kv_tokens * m.kv_bytes_per_token() * u64::from(batch),
    );
    mem.gpu(MemoryKind::Activations, act);
    mem
}

/// Per-device memory of `partition` (every device holds the weights; device `i` keeps the K,V of
/// chunks `<= i` of every layer, the last device the whole context plus `gen_len` decoded
/// tokens, as caches are sized for prompt + gen; activations of its own chunk): the fullest
/// device's plan (items `weights`, `kv cache`, `activations (prefill peak)`) and its index.
pub(crate) fn device_memory(
    m: &ModelSpec,
    batch: u32,
    partition: &[u32],
    gen_len: u32,
) -> (MemoryPlan, usize) {
    let st = starts(partition);
    let last = partition.len() - 1;
    let mut best: Option<(u64, MemoryPlan, usize)> = None;
    for (i, (&c, &s)) in partition.iter().zip(&st).enumerate() {
        let tokens = u64::from(s + c) + if i == last { u64::from(gen_len) } else { 0 };
        let mem = one_device(m, batch, tokens, c);
        let total = mem.gpu_bytes();
        if best.as_ref().is_none_or(|b| total > b.0) {
            best = Some((total, mem, i));
        }
    }
    let (_, mem, i) = best.expect("a device");
    (mem, i)
}

/// The least memory the fullest device needs over every partition of `context` tokens, however
/// many devices: the last device holds the weights and the K,V of the whole context plus the
/// decoded tokens, and the activations of at least one token. A context whose floor exceeds
/// the GPU cannot be planned, so the plan fails before any search.
pub(crate) fn floor(m: &ModelSpec, batch: u32, context: u32, gen_len: u32) -> MemoryPlan {
    one_device(m, batch, u64::from(context) + u64::from(gen_len), 1)
}
