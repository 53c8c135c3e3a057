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

use super::{Place, Policy, State, Step};

/// vLLM V1's scheduling policy (first come, first served).
#[derive(Debug, Clone, Copy, Default)]
pub struct V1;

impl Policy for V1 {
    fn schedule(&mut self, st: &mut State<'_>, step: &mut Step, now: f64) {
        let r = st.r;
        let mml = r.max_model_len;
        let threshold = r.config.long_prefill_token_threshold;
        let mut budget = r.max_num_batched_tokens;
        let mut preempted = false;
        let mut i = 0;
        'running: while i < st.running.len() && budget > 0 {
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
            n = n.min(budget).min((mml - 1).saturating_sub(s.computed));
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
                preempt(st, victim);
                preempted = true;
                if victim == v {
                    break 'running;
                }
            }
            st.schedule_tokens(step, v, n, now);
            budget -= n;
            i += 1;
        }
        if preempted {
            return;
        }
        while budget > 0 && (st.running.len() as u32) < r.max_num_seqs {
            let Some(&v) = st.waiting.front() else {
                break;
            };
            let s = &mut st.seqs[v];
            let known = s.known();
            let layout = match st.layouts.get(v) {
                Some(Some(l)) => l,
                _ => &super::EMPTY_LAYOUT,
            };
            let hit = if s.computed == 0 {
                st.kv
                    .computed_blocks(&mut s.kv, layout, known, &mut st.hits)
            } else {
                st.hits.clear();
                0
            };
            let mut n = known - s.computed.max(hit);
            if threshold > 0 && n > threshold {
                n = threshold;
            }
            if !r.chunked_prefill && n > budget {
                break;
            }
            n = n.min(budget);
            let computed = s.computed.max(hit);
            if !st
                .kv
                .allocate_slots(&mut s.kv, layout, computed, n, &st.hits, known, mml)
            {
                break;
            }
            st.waiting.pop_front();
            s.computed = computed;
            if s.cached_tokens.is_none() {
                s.cached_tokens = Some(hit);
            }
            s.place = Place::Running;
            st.running.push(v);
            st.schedule_tokens(step, v, n, now);
            budget -= n;
        }
    }
}

/// Preempts `v` by recompute: its blocks freed (they stay cached until reused), its computed
/// tokens dropped, first in the waiting queue.
fn preempt(st: &mut State<'_>, v: usize) {
    st.counters.preemptions += 1;
    let s = &mut st.seqs[v];
    st.kv.free(&mut s.kv);
    s.recomputed_tokens += u64::from(s.computed);
    s.computed = 0;
    s.preemptions += 1;
    s.place = Place::Waiting;
    st.waiting.push_front(v);
}
