//! vLLM V1's scheduler, `Scheduler.schedule()` of vLLM v0.15.1
//! (`vllm/v1/core/sched/scheduler.py`, lines 313-890 at commit 1892993bc):
//!
//! 1. One token budget, `max_num_batched_tokens`.
//! 2. Running requests first, in list order: each gets `min(known − computed, threshold, budget,
//!    max_model_len − 1 − computed)` tokens (a decode is one; an unfinished prefill the next
//!    chunk). When its blocks cannot be allocated, the last running request is preempted
//!    (`self.running.pop()`: freed, computed reset to 0, put at the front of the waiting queue)
//!    until they can; if the request itself is the victim, the running pass stops.
//! 3. Only if nothing was preempted: waiting requests in order while `running < max_num_seqs`
//!    and budget remains. A new (or preempted) request first takes its prefix-cache hits
//!    (whole blocks, at most `known − 1` tokens); its remaining tokens are chunked to the budget
//!    (or, with chunked prefill off, it waits when they do not fit). A waiting request whose
//!    blocks cannot be allocated stops the pass: waiting requests never preempt.

use super::{Load, Place, Policy, Source, State, Step};
use crate::config::Resolved;

/// vLLM V1's scheduling policy (first come, first served).
#[derive(Debug, Clone, Copy, Default)]
pub struct V1;

impl Policy for V1 {
    fn schedule(&mut self, st: &mut State<'_>, step: &mut Step, now: f64) {
        let mut budget = st.r.max_num_batched_tokens;
        if schedule_running(st, step, now, &mut budget) {
            return;
        }
        schedule_waiting(st, step, now, budget);
    }
}

/// The running requests first, in list order (step 2 of the module docs), each its next
/// tokens out of `budget`; whether one was preempted (then no waiting request is scheduled).
fn schedule_running(st: &mut State<'_>, step: &mut Step, now: f64, budget: &mut u32) -> bool {
    let r = st.r;
    let mml = r.max_model_len;
    let threshold = r.config.long_prefill_token_threshold;
    let mut preempted = false;
    let mut i = 0;
    'running: while i < st.running.len() && *budget > 0 {
        let v = st.running[i];
        let s = &st.seqs[v];
        if s.done_sampling() {
            // Its last token is in flight (vLLM's placeholder check): nothing to add.
            i += 1;
            continue;
        }
        let known = s.known();
        let mut n = known - s.computed;
        if threshold > 0 && n > threshold {
            n = threshold;
        }
        n = n.min(*budget).min((mml - 1).saturating_sub(s.computed));
        if n == 0 {
            i += 1;
            continue;
        }
        loop {
            let s = &mut st.seqs[v];
            let layout = match st.layouts.get(v) {
                Some(Some(l)) => l,
                _ => &super::EMPTY_LAYOUT,
            };
            if st
                .kv
                .allocate_slots(&mut s.kv, layout, s.computed, n, &[], known, mml)
            {
                break;
            }
            let victim = st.running.pop().expect("the request itself is running");
            super::preempt::preempt(st, step, victim);
            preempted = true;
            if victim == v {
                break 'running;
            }
        }
        st.schedule_tokens(step, v, n, now);
        *budget -= n;
        i += 1;
    }
    preempted
}

/// What became of the waiting request at the front of the queue.
enum Admit {
    /// Running, with this many tokens scheduled (taken off the queue).
    Scheduled(u32),
    /// Waits for its KV (a load issued, or a hit block being loaded): set aside for the
    /// front of the queue after the pass.
    Aside,
    /// It cannot be had this step: the pass stops.
    Stop,
}

/// The waiting requests in order while there is room and `budget` (step 3 of the module docs).
/// Requests whose KV a connector is loading wait without using the budget; they go back to the
/// front of the queue after the pass (vLLM's `skipped_waiting_requests`).
fn schedule_waiting(st: &mut State<'_>, step: &mut Step, now: f64, mut budget: u32) {
    let mut skipped = std::mem::take(&mut st.scratch);
    skipped.clear();
    while budget > 0 && (st.running.len() as u32) < st.r.max_num_seqs {
        let Some(&v) = st.waiting.front() else {
            break;
        };
        let admitted = if st.seqs[v].load != Load::None {
            Admit::Aside
        } else {
            admit(st, step, v, budget, now)
        };
        match admitted {
            Admit::Scheduled(n) => budget -= n,
            Admit::Aside => {
                st.waiting.pop_front();
                skipped.push(v);
            }
            Admit::Stop => break,
        }
    }
    for &v in skipped.iter().rev() {
        st.waiting.push_front(v);
    }
    st.scratch = skipped;
}

/// The waiting request `v`: its prefix-cache hits, what a KV connector offers past them, and
/// its first chunk out of `budget`.
fn admit(st: &mut State<'_>, step: &mut Step, v: usize, budget: u32, now: f64) -> Admit {
    let s = &mut st.seqs[v];
    let known = s.known();
    let layout = match st.layouts.get(v) {
        Some(Some(l)) => l,
        _ => &super::EMPTY_LAYOUT,
    };
    let hit = if s.computed == 0 {
        st.kv
            .computed_blocks(&mut s.kv, layout, known, s.preemptions > 0, &mut st.hits)
    } else {
        st.hits.clear();
        0
    };
    if st.seqs[v].computed == 0 {
        match external(st, v, hit, known) {
            External::None => {}
            External::Skip => return Admit::Aside,
            External::Async(n) => return load_async(st, v, hit, n, now),
            External::Sync(n) => return admit_loaded(st, step, v, hit, n, budget, now),
        }
    }
    admit_computed(st, step, v, hit, budget, now)
}

/// Issues the load of `n` tokens past the `hit` of `v`, which waits for them (vLLM's
/// `load_kv_async`).
fn load_async(st: &mut State<'_>, v: usize, hit: u32, n: u32, now: f64) -> Admit {
    let s = &mut st.seqs[v];
    if !st.kv.allocate_uncached(&mut s.kv, hit, n, &st.hits) {
        return Admit::Stop;
    }
    if s.cached_tokens.is_none() {
        s.cached_tokens = Some(hit);
    }
    s.computed = 0;
    s.external_tokens = n;
    st.count_tier_query();
    let s = &mut st.seqs[v];
    s.load = Load::Pending;
    s.load_start = now;
    st.new_loads.push(v);
    st.loading.push(v);
    Admit::Aside
}

/// Loads `n` tokens past the `hit` of `v` in this step, before its forward pass: scheduled at
/// once past the loaded tokens (the last token recomputed).
fn admit_loaded(
    st: &mut State<'_>,
    step: &mut Step,
    v: usize,
    hit: u32,
    n: u32,
    budget: u32,
    now: f64,
) -> Admit {
    let r = st.r;
    let mml = r.max_model_len;
    let s = &mut st.seqs[v];
    let known = s.known();
    let computed = (hit + n).min(known - 1);
    let Some(m) = first_chunk(r, known - computed, budget) else {
        return Admit::Stop;
    };
    if !st
        .kv
        .allocate_uncached(&mut s.kv, hit, computed - hit, &st.hits)
    {
        return Admit::Stop;
    }
    let layout = match st.layouts.get(v) {
        Some(Some(l)) => l,
        _ => &super::EMPTY_LAYOUT,
    };
    st.kv.cache_upto(&mut s.kv, layout, computed);
    if !st
        .kv
        .allocate_slots(&mut s.kv, layout, computed, m, &[], known, mml)
    {
        // The loaded blocks stay with it; it runs when blocks free up.
        s.computed = computed;
        s.external_tokens = computed - hit;
        s.cached_tokens = Some(hit);
        st.new_loads.push(v);
        return Admit::Stop;
    }
    st.waiting.pop_front();
    s.computed = computed;
    s.external_tokens = computed - hit;
    if s.cached_tokens.is_none() {
        s.cached_tokens = Some(hit);
    }
    st.count_tier_query();
    st.new_loads.push(v);
    let s = &mut st.seqs[v];
    s.place = Place::Running;
    st.running.push(v);
    st.schedule_tokens(step, v, m, now);
    Admit::Scheduled(m)
}

/// A waiting request's first chunk of its `n` uncomputed tokens out of `budget`: at most
/// `long_prefill_token_threshold` (when set), and none when it does not fit whole without
/// chunked prefill.
fn first_chunk(r: &Resolved, n: u32, budget: u32) -> Option<u32> {
    let threshold = r.config.long_prefill_token_threshold;
    let n = if threshold > 0 { n.min(threshold) } else { n };
    (r.chunked_prefill || n <= budget).then(|| n.min(budget))
}

/// Schedules `v` past its `hit` (or what it has computed): its next chunk out of `budget`,
/// chunked to it only with chunked prefill.
fn admit_computed(
    st: &mut State<'_>,
    step: &mut Step,
    v: usize,
    hit: u32,
    budget: u32,
    now: f64,
) -> Admit {
    let r = st.r;
    let mml = r.max_model_len;
    let s = &mut st.seqs[v];
    let known = s.known();
    let layout = match st.layouts.get(v) {
        Some(Some(l)) => l,
        _ => &super::EMPTY_LAYOUT,
    };
    let Some(n) = first_chunk(r, known - s.computed.max(hit), budget) else {
        return Admit::Stop;
    };
    let computed = s.computed.max(hit);
    if !st
        .kv
        .allocate_slots(&mut s.kv, layout, computed, n, &st.hits, known, mml)
    {
        return Admit::Stop;
    }
    st.waiting.pop_front();
    s.computed = computed;
    if s.cached_tokens.is_none() {
        s.cached_tokens = Some(hit);
    }
    s.place = Place::Running;
    st.count_tier_query();
    st.running.push(v);
    st.schedule_tokens(step, v, n, now);
    Admit::Scheduled(n)
}

/// What a KV connector offers a request with nothing computed, past its `hit` GPU tokens.
enum External {
    /// Nothing: compute it.
    None,
    /// Wait a step (a hit block is being loaded for another request).
    Skip,
    /// Load this many tokens while the request waits (vLLM's `load_kv_async`).
    Async(u32),
    /// Load this many tokens in the step that schedules it.
    Sync(u32),
}

/// vLLM's `get_num_new_matched_tokens`: a remote prefill's prompt past the local hit, or the
/// CPU tier's consecutive ready units past it.
fn external(st: &mut State<'_>, v: usize, hit: u32, known: u32) -> External {
    let s = &mut st.seqs[v];
    if let Source::Remote { .. } = s.source {
        // Every prompt token past the local hit (NIXL's `get_num_new_matched_tokens`).
        let n = s.prompt.saturating_sub(hit);
        return if n > 0 {
            External::Async(n)
        } else {
            External::None
        };
    }
    let Some(tier) = &mut st.kv.tier else {
        return External::None;
    };
    let unit = tier.unit;
    let bs = st.r.config.block_size;
    let layout = match st.layouts.get(v) {
        Some(Some(l)) => l,
        _ => return External::None,
    };
    // The request's full units (of its known tokens).
    let units = (known / unit) as usize;
    let hashes = &mut st.unit_hashes;
    hashes.clear();
    let mut kv = super::super::kv_cache::ReqKv::default();
    let per = (unit / bs.max(1)) as usize;
    let blocks = kv.hashes_upto(layout, units * per, bs);
    // A unit is named by its last block's hash (vLLM's offloaded block hash).
    hashes.extend((0..units).map(|u| blocks[u * per + per - 1]));
    tier.eviction.touch(hashes);
    // Counted once the request is scheduled or its load issued (a request that waits for
    // blocks asks again next step).
    st.tier_query = Some(known.saturating_sub(hit));
    let start = (hit / unit) as usize;
    if start >= units {
        return External::None;
    }
    let (found, loading) = tier.eviction.lookup(&hashes[start..]);
    let tokens = (unit * (start + found) as u32).saturating_sub(hit);
    if found == 0 || tokens < unit {
        return External::None;
    }
    if loading && st.r.prefix_caching {
        return External::Skip;
    }
    if tier.backend.async_load {
        External::Async(tokens)
    } else {
        External::Sync(tokens)
    }
}
