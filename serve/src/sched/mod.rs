//! Scheduling: the engine's request state ([`State`]) and one policy per scheduler kind, each
//! forming the next step's batch ([`Step`]) from it.
//!
//! - [`v1::V1`]: vLLM V1's `Scheduler.schedule()` (v0.15.1).
//! - [`v0::PrefillFirst`], [`v0::Mixed`], [`v0::Chunked`]: vLLM 0.4's default scheduler and the two
//!   variants kvplan modelled before V1, with swap and hybrid preemption.
//!
//! Token accounting follows V1: a request's `computed` tokens advance when a step is scheduled;
//! a step that completes a request's known tokens will sample one, counted as a placeholder until
//! the step's output is processed ([`State::complete`]), so with asynchronous scheduling the next
//! step can already decode the request (vLLM's `num_output_placeholders`).

use std::collections::VecDeque;

use kvplan_workloads::Request;

use crate::config::Resolved;
use crate::figures::Counters;
use crate::iteration::IterationShape;
use crate::kv_cache::{KvCacheManager, Layout, ReqKv};
use crate::record::{FinishReason, RejectReason, Status};

pub mod preempt;
pub mod registry;
pub mod v0;
pub mod v1;
/// The vLLM releases (moved to [`crate::versions`]; this path still names them).
pub use crate::versions;

/// Where a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Not arrived yet.
    Pending,
    /// In the waiting queue (new, or preempted for recompute).
    Waiting,
    /// In the running list.
    Running,
    /// Swapped out to host memory (vLLM 0.4 schedulers).
    Swapped,
    /// Finished or rejected.
    Done,
}

/// A KV connector's load in progress (vLLM's `WAITING_FOR_REMOTE_KVS`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Load {
    /// None.
    None,
    /// Issued; its end is not known yet (a remote pull the driver times, a recomputation not yet
    /// placed on the GPU).
    Pending,
    /// Done at this time (engine clock).
    Until(f64),
}

/// Where a request's prompt KV comes from besides its own computation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Source {
    /// Computed here (or found in this engine's tiers).
    #[default]
    Local,
    /// Computed by a prefill replica (the cluster's engine `from`) and pulled from it.
    Remote {
        /// The prefill replica.
        from: u32,
    },
}

/// One request's state in the engine.
#[derive(Debug, Clone)]
pub struct Seq {
    /// Prompt tokens.
    pub prompt: u32,
    /// Output tokens it will generate: the request's, cut at `max_model_len`.
    pub target: u32,
    /// Tokens with KV (scheduled, this step's included).
    pub computed: u32,
    /// Tokens generated and processed.
    pub generated: u32,
    /// Tokens sampled by steps in flight, not yet processed.
    pub placeholders: u32,
    /// Block table and hashes.
    pub kv: ReqKv,
    /// Host bytes held while swapped (KV and activations).
    pub host_bytes: u64,
    /// Activation blocks stored on host (hybrid).
    pub act_blocks: u32,
    /// Where it is.
    pub place: Place,
    /// First scheduled (engine time).
    pub first_sched: f64,
    /// First token processed.
    pub first_token: f64,
    /// The latest token processed.
    pub last_token: f64,
    /// Last token processed.
    pub finish: f64,
    /// Times preempted.
    pub preemptions: u32,
    /// Tokens swapped out, summed over preemptions.
    pub swapped_tokens: u64,
    /// Tokens dropped for recomputation, summed over preemptions.
    pub recomputed_tokens: u64,
    /// Prompt tokens found in the prefix cache when first scheduled (`None`: not looked up yet).
    pub cached_tokens: Option<u32>,
    /// Why it stopped.
    pub finish_reason: FinishReason,
    /// Where its prompt KV comes from.
    pub source: Source,
    /// Keep its blocks when it finishes, until the cluster releases them (a prefill replica's
    /// request whose KV a decode replica will pull).
    pub hold_kv: bool,
    /// Push its KV layer by layer as its prefill runs (a prefill replica in layer-wise mode).
    pub push_kv: bool,
    /// A connector's load in progress.
    pub load: Load,
    /// Tokens loaded by a connector (a CPU tier's hit, a remote prefill), when first scheduled.
    pub external_tokens: u32,
    /// When its load started (NaN: none).
    pub load_start: f64,
    /// Seconds its load took, to its being schedulable again.
    pub load_s: f64,
    /// CPU tier: the next unit of its chain to store.
    pub next_store: u32,
    /// CPU tier: when its store copies end.
    pub store_end: f64,
    /// CPU tier with hybrid reload: units of its chain stored as layer inputs.
    pub x_units: u32,
}

impl Seq {
    /// Tokens known: prompt, generated and in flight.
    #[inline]
    pub fn known(&self) -> u32 {
        self.prompt + self.generated + self.placeholders
    }

    /// Whether every output token is generated or in flight.
    #[inline]
    pub fn done_sampling(&self) -> bool {
        self.generated + self.placeholders >= self.target
    }
}

/// One step's batch: the shape the iteration model times and who gets what.
#[derive(Debug, Clone, Default)]
pub struct Step {
    /// What the step runs.
    pub shape: IterationShape,
    /// `(request, tokens, samples a token)` in batch order.
    pub members: Vec<(usize, u32, bool)>,
}

impl Step {
    /// Empties it for reuse.
    pub fn clear(&mut self) {
        self.shape.clear();
        self.members.clear();
    }

    /// Whether the step does nothing (no tokens, no copies).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.shape.swap_out_blocks == 0 && self.shape.act_out_blocks == 0
    }
}

/// Per-request values indexed by the request's position in the input, holding only the
/// requests from the oldest one not yet retired to the latest one taken from the input: the
/// engine's memory follows what is in flight, not how many requests a run has.
#[derive(Debug, Clone)]
pub struct Window<T> {
    base: usize,
    items: VecDeque<T>,
}

impl<T> Default for Window<T> {
    fn default() -> Self {
        Window {
            base: 0,
            items: VecDeque::new(),
        }
    }
}

impl<T> Window<T> {
    /// The index the next value pushed takes (one past the latest).
    pub fn end(&self) -> usize {
        self.base + self.items.len()
    }

    /// The index of the oldest value held.
    pub fn start(&self) -> usize {
        self.base
    }

    /// Adds the value of the next index; an allocation that cannot be made is an error.
    pub fn push(&mut self, v: T) -> Result<(), std::collections::TryReserveError> {
        self.items.try_reserve(1)?;
        self.items.push_back(v);
        Ok(())
    }

    /// The oldest value held.
    pub fn front(&self) -> Option<&T> {
        self.items.front()
    }

    /// Removes the oldest value.
    pub fn pop_front(&mut self) -> Option<T> {
        let v = self.items.pop_front()?;
        self.base += 1;
        Some(v)
    }

    /// The value of index `i`, if held.
    pub fn get(&self, i: usize) -> Option<&T> {
        self.items.get(i.checked_sub(self.base)?)
    }

    /// The value of index `i`, if held.
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.items.get_mut(i.checked_sub(self.base)?)
    }
}

impl<T> std::ops::Index<usize> for Window<T> {
    type Output = T;
    fn index(&self, i: usize) -> &T {
        self.get(i).expect("a request in the engine's window")
    }
}

impl<T> std::ops::IndexMut<usize> for Window<T> {
    fn index_mut(&mut self, i: usize) -> &mut T {
        self.get_mut(i).expect("a request in the engine's window")
    }
}

/// The requests, queues and KV cache a policy schedules.
pub struct State<'a> {
    /// Settings.
    pub r: &'a Resolved,
    /// The requests taken from the input and not yet retired, by input position.
    pub reqs: Window<Request>,
    /// Their state.
    pub seqs: Window<Seq>,
    /// Outcome per request.
    pub status: Window<Status>,
    /// Token layouts (prefix caching only; built when a request arrives).
    pub layouts: Window<Option<Layout>>,
    /// Waiting queue (front first).
    pub waiting: VecDeque<usize>,
    /// Running list, in scheduling order.
    pub running: Vec<usize>,
    /// Swapped out (vLLM 0.4 schedulers).
    pub swapped: VecDeque<usize>,
    /// The GPU blocks.
    pub kv: KvCacheManager,
    /// Host swap space in use, bytes.
    pub host_used: u64,
    /// Counters.
    pub counters: Counters,
    /// Inter-token gaps of the tokens processed.
    pub itl: crate::itl::ItlHistogram,
    /// Scratch for prefix-hit blocks.
    pub hits: Vec<u32>,
    /// Scratch list.
    pub scratch: Vec<usize>,
    /// The iteration model, for hybrid preemption's split (vLLM 0.4 schedulers).
    pub hybrid: Option<crate::iteration::IterationTimer>,
    /// Bytes of one block of stored layer inputs `X`, all layers (hybrid).
    pub act_block_bytes: u64,
    /// Requests that finished in the last [`State::complete`] (the engine releases their
    /// closed-loop followers).
    pub just_finished: Vec<usize>,
    /// Requests whose first token the last [`State::complete`] processed.
    pub just_first: Vec<usize>,
    /// Finished requests whose blocks are kept (held for a pull, or stores in flight), for the
    /// engine to release.
    pub kept: Vec<(usize, ReqKv)>,
    /// Whether remote prefills may hand requests over (a decode replica).
    pub remote: bool,
    /// Loads the last schedule issued, for the engine to time.
    pub new_loads: Vec<usize>,
    /// Requests with a load in progress.
    pub loading: Vec<usize>,
    /// Scratch for a request's unit hashes.
    pub unit_hashes: Vec<u64>,
    /// The tokens the last CPU-tier lookup asked for, counted when its request is scheduled.
    pub tier_query: Option<u32>,
}

static EMPTY_LAYOUT: Layout = Layout::empty();

impl<'a> State<'a> {
    /// The state before any arrival.
    pub fn new(r: &'a Resolved) -> Self {
        State {
            reqs: Window::default(),
            seqs: Window::default(),
            status: Window::default(),
            layouts: Window::default(),
            waiting: VecDeque::new(),
            running: Vec::new(),
            swapped: VecDeque::new(),
            // The pool reserves its block 0 (vLLM V1's null block): V1's usable blocks are the
            // rest, as vLLM counts them; the 0.4 engines have no null block, and every one of
            // their blocks is usable (`usable_blocks`, what their admission rule counts).
            kv: KvCacheManager::new(r.usable_blocks + 1, r.config.block_size, r.prefix_caching),
            host_used: 0,
            counters: Counters::default(),
            itl: Default::default(),
            hits: Vec::new(),
            scratch: Vec::new(),
            hybrid: None,
            act_block_bytes: 0,
            just_finished: Vec::new(),
            just_first: Vec::new(),
            kept: Vec::new(),
            remote: false,
            new_loads: Vec::new(),
            loading: Vec::new(),
            unit_hashes: Vec::new(),
            tier_query: None,
            r,
        }
    }

    /// Takes request `q` from the input (not arrived yet); its index is [`Window::end`] before
    /// the call.
    pub fn push(&mut self, q: Request) -> Result<(), std::collections::TryReserveError> {
        self.seqs.push(Seq {
            prompt: q.prompt_tokens,
            target: q.output_tokens,
            computed: 0,
            generated: 0,
            placeholders: 0,
            kv: ReqKv::default(),
            host_bytes: 0,
            act_blocks: 0,
            place: Place::Pending,
            first_sched: f64::NAN,
            first_token: f64::NAN,
            last_token: f64::NAN,
            finish: f64::NAN,
            preemptions: 0,
            swapped_tokens: 0,
            recomputed_tokens: 0,
            cached_tokens: None,
            finish_reason: FinishReason::Stop,
            source: Source::Local,
            hold_kv: false,
            push_kv: false,
            load: Load::None,
            external_tokens: 0,
            load_start: f64::NAN,
            load_s: 0.0,
            next_store: 0,
            store_end: f64::NEG_INFINITY,
            x_units: u32::MAX,
        })?;
        self.status.push(Status::Finished)?;
        self.layouts.push(None)?;
        self.reqs.push(q)
    }

    /// Counts the last CPU-tier lookup (its request was scheduled or its load issued).
    pub fn count_tier_query(&mut self) {
        if let (Some(t), Some(q)) = (&mut self.kv.tier, self.tier_query.take()) {
            t.stats.lookups += 1;
            t.stats.queried_tokens += u64::from(q);
        }
    }

    /// Removes the oldest request when it is done (finished or rejected) and no step in flight
    /// samples a token for it: its request, state and outcome.
    pub fn retire(&mut self) -> Option<(Request, Seq, Status)> {
        let s = self.seqs.front()?;
        if s.place != Place::Done || s.placeholders > 0 {
            return None;
        }
        self.retire_any()
    }

    /// Removes the oldest request, done or not.
    pub fn retire_any(&mut self) -> Option<(Request, Seq, Status)> {
        let s = self.seqs.pop_front()?;
        self.layouts.pop_front();
        let st = self.status.pop_front()?;
        Some((self.reqs.pop_front()?, s, st))
    }

    /// The token layout of request `v` (empty without prefix caching: nothing is hashed).
    #[inline]
    pub fn layout(&self, v: usize) -> &Layout {
        match self.layouts.get(v) {
            Some(Some(l)) => l,
            _ => &EMPTY_LAYOUT,
        }
    }

    /// Blocks of `tokens` tokens.
    #[inline]
    pub fn blocks_for(&self, tokens: u32) -> u32 {
        tokens.div_ceil(self.r.config.block_size)
    }

    /// Whether there is anything to schedule.
    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty() || !self.swapped.is_empty()
    }

    /// Admits request `i` to the waiting queue, or rejects it.
    pub fn arrive(&mut self, i: usize) {
        if let Some(reason) = self.reject_reason(i) {
            self.status[i] = Status::Rejected(reason);
            self.seqs[i].place = Place::Done;
            return;
        }
        let mml = self.r.max_model_len;
        let s = &mut self.seqs[i];
        // vLLM's check_stop: the request stops once prompt + output reaches max_model_len.
        let room = mml - s.prompt;
        if s.target > room {
            s.target = room;
            s.finish_reason = FinishReason::Length;
        }
        s.place = Place::Waiting;
        if self.r.prefix_caching || self.kv.tier.is_some() {
            self.layouts[i] = Some(Layout::of(&self.reqs[i]));
        }
        self.waiting.push_back(i);
    }

    fn reject_reason(&self, i: usize) -> Option<RejectReason> {
        let s = &self.seqs[i];
        if s.prompt == 0 || s.target == 0 {
            return Some(RejectReason::EmptyRequest);
        }
        // vLLM's input processor: a prompt of max_model_len tokens or more leaves no room for
        // one output token.
        if s.prompt >= self.r.max_model_len {
            return Some(RejectReason::PromptTooLong);
        }
        if !self.r.config.scheduler.spec().rejects_unfittable {
            return None;
        }
        let total = (s.prompt + s.target).min(self.r.max_model_len);
        if self.blocks_for(total) > self.r.usable_blocks - self.r.watermark_blocks {
            return Some(RejectReason::ExceedsKvCapacity);
        }
        if !self.r.chunked_prefill && s.prompt > self.r.max_num_batched_tokens {
            return Some(RejectReason::ExceedsBatchTokens);
        }
        None
    }

    /// Schedules `n` tokens of request `v` in `step` (its blocks already allocated): advances
    /// its computed tokens and, when they reach its known tokens, counts a token being sampled.
    pub fn schedule_tokens(&mut self, step: &mut Step, v: usize, n: u32, now: f64) {
        let s = &mut self.seqs[v];
        s.computed += n;
        let emits = s.computed == s.known();
        if emits {
            s.placeholders += 1;
            step.shape.logits += 1;
        }
        if s.first_sched.is_nan() {
            s.first_sched = now;
        }
        step.shape.seqs.push((n, s.computed));
        step.members.push((v, n, emits));
    }

    /// Whether the next step vLLM V1's scheduler forms ([`v1::V1`]) is decode-only and needs
    /// no decision: nothing waiting, swapped or loading, and every running request that still
    /// samples has exactly one token to compute (`known − computed = 1`) with room for it below
    /// `max_model_len`, all of them within the token budget and their new blocks (at a block
    /// boundary) within the free blocks, so no request is preempted. Then the step is
    /// [`State::schedule_decodes`]'s. `false` when no request decodes.
    pub fn decode_only(&self) -> bool {
        if !self.waiting.is_empty()
            || !self.swapped.is_empty()
            || !self.loading.is_empty()
            || !self.new_loads.is_empty()
            || !self.kept.is_empty()
        {
            return false;
        }
        let bs = self.r.config.block_size;
        let mml = self.r.max_model_len;
        let mut decodes = 0u32;
        let mut blocks = 0u32;
        for &v in &self.running {
            let s = &self.seqs[v];
            if s.done_sampling() {
                continue;
            }
            if s.known() != s.computed + 1 || s.computed + 2 > mml || s.push_kv {
                return false;
            }
            decodes += 1;
            blocks += (s.computed + 1)
                .div_ceil(bs)
                .saturating_sub(s.kv.blocks.len() as u32);
        }
        decodes > 0
            && decodes <= self.r.max_num_batched_tokens
            && blocks <= self.kv.pool().num_free()
    }

    /// The decode-only step of [`State::decode_only`], as [`v1::V1`] forms it: every running
    /// request that still samples, in list order, its slot allocated (a new block at a block
    /// boundary, the block made full entered in the prefix cache; between them nothing to do, and
    /// the allocation is skipped) and one token scheduled.
    pub fn schedule_decodes(&mut self, step: &mut Step, now: f64) {
        let mml = self.r.max_model_len;
        for i in 0..self.running.len() {
            let v = self.running[i];
            let s = &mut self.seqs[v];
            if s.done_sampling() {
                continue;
            }
            if !self.kv.decode_slot_ready(&s.kv, s.computed) {
                let layout = match self.layouts.get(v) {
                    Some(Some(l)) => l,
                    _ => &EMPTY_LAYOUT,
                };
                let known = s.known();
                let ok = self
                    .kv
                    .allocate_slots(&mut s.kv, layout, s.computed, 1, &[], known, mml);
                debug_assert!(ok, "decode_only checked the free blocks");
            }
            self.schedule_tokens(step, v, 1, now);
        }
    }

    /// Processes a step's output at time `now`: sampled tokens become generated; requests with
    /// all their tokens finish and free their blocks.
    pub fn complete(&mut self, step: &Step, now: f64) {
        self.just_finished.clear();
        self.just_first.clear();
        let mut finished = false;
        // Inter-token gaps, counted in runs of equal gaps (the requests that ran through the
        // step before share theirs).
        let mut gap = (f64::NAN, 0u64);
        for &(v, _, emits) in &step.members {
            if !emits {
                continue;
            }
            let s = &mut self.seqs[v];
            s.placeholders -= 1;
            s.generated += 1;
            if s.first_token.is_nan() {
                s.first_token = now;
                self.just_first.push(v);
            } else {
                let g = now - s.last_token;
                if g == gap.0 {
                    gap.1 += 1;
                } else {
                    self.itl.add_n(gap.0, gap.1);
                    gap = (g, 1);
                }
            }
            s.last_token = now;
            if s.generated >= s.target && s.place != Place::Done {
                s.finish = now;
                let was = s.place;
                s.place = Place::Done;
                let mut kv = std::mem::take(&mut s.kv);
                if s.hold_kv || s.store_end > now {
                    // Held for a pull, or its stores are still being copied.
                    self.kept.push((v, kv));
                } else {
                    self.kv.free(&mut kv);
                    kv.clear();
                }
                if let Some(t) = &mut self.kv.tier {
                    t.finish_stores(v, Some(s.store_end.max(now)));
                }
                finished = true;
                self.just_finished.push(v);
                match was {
                    // Preempted while its last token was in flight.
                    Place::Waiting => self.waiting.retain(|&w| w != v),
                    // Swapped out while its last token was in flight (asynchronous steps on a
                    // vLLM 0.4 engine): its copy on the host is dropped.
                    Place::Swapped => {
                        self.swapped.retain(|&w| w != v);
                        self.host_used -= s.host_bytes;
                        s.host_bytes = 0;
                        s.act_blocks = 0;
                    }
                    _ => {}
                }
                if let Some(l) = self.layouts.get_mut(v) {
                    *l = None;
                }
            }
        }
        self.itl.add_n(gap.0, gap.1);
        if finished {
            let seqs = &self.seqs;
            self.running.retain(|&v| seqs[v].place != Place::Done);
        }
    }
}

/// A scheduling policy: forms the next step from the state.
pub trait Policy {
    /// Fills `step` (cleared by the caller) with the next step's batch at engine time `now`.
    fn schedule(&mut self, st: &mut State<'_>, step: &mut Step, now: f64);
}
