//! vLLM 0.4's scheduler (`vllm-v0`, alias `prefill-first`) and the two variants kvplan modelled
//! before V1 (`mixed`, `chunked`), with recompute, swap and hybrid preemption. Steps are
//! synchronous: each is scheduled after the previous one's output was processed.
//!
//! - `vllm-v0`: when nothing is swapped out, admit waiting prompts whole while they fit the
//!   token budget, the sequence limit and the free blocks above the watermark; a step with
//!   prompts runs only prompts. Otherwise decode every running sequence (preempting the latest
//!   when blocks run out), then swap sequences back in if nothing was preempted.
//! - `mixed`: decodes first, then swapped sequences, then whole waiting prompts in the same step.
//! - `chunked`: as `mixed` with prefill chunks filling the token budget (Sarathi-Serve).

use super::preempt::preempt;
use super::{Place, Policy, State, Step};
use crate::iteration::HybridResume;

/// vLLM 0.4's default (prefill-first) scheduler.
#[derive(Debug, Clone, Copy, Default)]
pub struct PrefillFirst;

/// Decodes and whole prompts in one step.
#[derive(Debug, Clone, Copy, Default)]
pub struct Mixed;

/// Decodes first, then prefill chunks up to the token budget.
#[derive(Debug, Clone, Copy, Default)]
pub struct Chunked;

impl Policy for PrefillFirst {
    fn schedule(&mut self, st: &mut State<'_>, step: &mut Step, now: f64) {
        let mut budget = st.r.max_num_batched_tokens;
        if st.swapped.is_empty() {
            schedule_waiting(st, step, &mut budget, false, now);
        }
        if step.members.is_empty() {
            let preempted = schedule_running(st, step, &mut budget, now);
            if !preempted {
                schedule_swapped(st, step, &mut budget, now);
            }
        }
    }
}

impl Policy for Mixed {
    fn schedule(&mut self, st: &mut State<'_>, step: &mut Step, now: f64) {
        decodes_then_prompts(st, step, false, now);
    }
}

impl Policy for Chunked {
    fn schedule(&mut self, st: &mut State<'_>, step: &mut Step, now: f64) {
        decodes_then_prompts(st, step, true, now);
    }
}

fn decodes_then_prompts(st: &mut State<'_>, step: &mut Step, chunked: bool, now: f64) {
    let mut budget = st.r.max_num_batched_tokens;
    let preempted = schedule_running(st, step, &mut budget, now);
    if !preempted {
        schedule_swapped(st, step, &mut budget, now);
    }
    if st.swapped.is_empty() {
        schedule_waiting(st, step, &mut budget, chunked, now);
    }
}

/// Allocates blocks for `v` to hold `tokens` tokens (the caller checked they are free).
fn grow(st: &mut State<'_>, v: usize, tokens: u32) {
    let s = &mut st.seqs[v];
    let have = s.kv.blocks.len() as u32 * st.r.config.block_size;
    if tokens > have {
        let ok = st.kv.allocate_slots(
            &mut s.kv,
            &super::EMPTY_LAYOUT,
            have,
            tokens - have,
            &[],
            tokens,
            u32::MAX,
        );
        debug_assert!(ok, "the caller checked the free blocks");
    }
}

/// Resumes a swapped sequence: copies its K,V back and, for hybrid, its stored `X`, from which
/// the first tokens' K,V are recomputed.
fn swap_in(st: &mut State<'_>, step: &mut Step, v: usize) {
    let bs = st.r.config.block_size;
    let s = &st.seqs[v];
    let computed = s.computed;
    let blocks = computed.div_ceil(bs);
    let act_blocks = s.act_blocks.min(blocks);
    let kv_blocks = blocks - act_blocks;
    if act_blocks > 0 {
        step.shape.hybrid.push(HybridResume {
            act_blocks,
            recompute_tokens: (act_blocks * bs).min(computed),
        });
    }
    step.shape.swap_in_blocks += kv_blocks;
    st.counters.swap_in_bytes += s.host_bytes;
    let s = &mut st.seqs[v];
    st.host_used -= s.host_bytes;
    s.host_bytes = 0;
    s.act_blocks = 0;
    s.place = Place::Running;
    grow(st, v, computed);
}

/// Running sequences continue (decode, or the next prefill chunk), preempting the latest
/// running sequence when blocks run out. Returns whether any was preempted.
fn schedule_running(st: &mut State<'_>, step: &mut Step, budget: &mut u32, now: f64) -> bool {
    let mut preempted = false;
    let mut i = 0;
    let mut running = std::mem::take(&mut st.running);
    let mut kept = std::mem::take(&mut st.scratch);
    kept.clear();
    while i < running.len() {
        let v = running[i];
        let s = &st.seqs[v];
        let chunk = if s.done_sampling() {
            0
        } else {
            (s.known() - s.computed).min(*budget)
        };
        if chunk == 0 || kept.len() as u32 >= st.r.max_num_seqs {
            kept.push(v);
            i += 1;
            continue;
        }
        let need = st.blocks_for(s.computed + chunk) - s.kv.blocks.len() as u32;
        let mut self_preempted = false;
        while st.kv.num_free() < need {
            preempted = true;
            if running.len() > i + 1 {
                let victim = running.pop().expect("a later sequence");
                preempt(st, step, victim);
            } else {
                preempt(st, step, v);
                self_preempted = true;
                break;
            }
        }
        if self_preempted {
            break;
        }
        let target = st.seqs[v].computed + chunk;
        grow(st, v, target);
        st.schedule_tokens(step, v, chunk, now);
        *budget -= chunk;
        kept.push(v);
        i += 1;
    }
    st.running = kept;
    st.scratch = running;
    preempted
}

fn schedule_swapped(st: &mut State<'_>, step: &mut Step, budget: &mut u32, now: f64) {
    while let Some(&v) = st.swapped.front() {
        let s = &st.seqs[v];
        let blocks = st.blocks_for(s.computed + 1);
        if st.running.len() as u32 >= st.r.max_num_seqs
            || *budget == 0
            || st.kv.num_free() < blocks + st.r.watermark_blocks
        {
            break;
        }
        st.swapped.pop_front();
        swap_in(st, step, v);
        let target = st.seqs[v].computed + 1;
        grow(st, v, target);
        st.schedule_tokens(step, v, 1, now);
        *budget -= 1;
        st.running.push(v);
    }
}

/// Admits waiting sequences (whole, or a chunk for chunked).
fn schedule_waiting(
    st: &mut State<'_>,
    step: &mut Step,
    budget: &mut u32,
    chunked: bool,
    now: f64,
) {
    while let Some(&v) = st.waiting.front() {
        let s = &st.seqs[v];
        let pending = s.known() - s.computed;
        let alone = step.members.is_empty() && st.running.is_empty();
        let chunk = if chunked {
            pending.min(*budget)
        } else if pending <= *budget || alone {
            // A resumed sequence longer than the budget runs alone rather than never.
            pending
        } else {
            break;
        };
        let need = st.blocks_for(s.computed + chunk);
        if chunk == 0
            || st.running.len() as u32 >= st.r.max_num_seqs
            || st.kv.num_free() < need + st.r.watermark_blocks
        {
            break;
        }
        st.waiting.pop_front();
        st.seqs[v].place = Place::Running;
        let target = st.seqs[v].computed + chunk;
        grow(st, v, target);
        st.schedule_tokens(step, v, chunk, now);
        *budget = budget.saturating_sub(chunk);
        st.running.push(v);
    }
}
