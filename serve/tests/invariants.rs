//! The engine's invariants on random loads, checked at every step through the engine's test
//! probe (`kvplan_serve::probe`), for every scheduler (`vllm-v1` with chunked prefill, prefix
//! caching and asynchronous scheduling each on and off; `vllm-v0`, `mixed` and `chunked`,
//! synchronous and asynchronous) and every preemption mode each implements (recompute; swap and
//! hybrid, with a swap space from none to plenty):
//!
//! - a step's scheduled tokens fit the token budget (`max_num_batched_tokens`; on the 0.4
//!   schedulers without chunking, a resumed request longer than the budget runs alone rather
//!   than never, `sched/v0.rs`) and its sequences `max_num_seqs`;
//! - the KV blocks the requests' block tables hold are the pool's blocks in use, never more than
//!   the pool, and cover every computed token;
//! - no request computes or generates past `max_model_len` or past its output length;
//! - a prefix hit is whole blocks and leaves the last prompt token to compute (vLLM's
//!   `get_computed_blocks` caps a hit at `num_tokens - 1`, `kv_cache.rs`), so a request's cached
//!   tokens are fewer than its prompt and every scheduled request computes at least one token;
//! - every request ends exactly once (finished, or rejected at arrival), and its record says so.
//!
//! Loads are small (up to 28 requests on opt-125m, a few KV blocks) so that preemption,
//! rejections, prefix hits, repeated requests, conversations and chunking all happen within a
//! few hundred steps: 512 cases per test take about a second in a debug build on 2 cores.
//! The probe panics at the first invariant broken, naming the step, the request and the
//! figures (`invariant broken at step 21: 39 tokens scheduled, over the budget of 28`).

use std::cell::RefCell;
use std::collections::HashSet;
use std::rc::Rc;
use std::sync::Arc;

use kvplan_serve::probe::{Probe, watch};
use kvplan_serve::sched::{Place, State, Step};
use kvplan_serve::{
    Config, FinishReason, Preemption, RejectReason, SchedulerKind, ServeReport, Status, simulate,
};
use kvplan_vocab::{HardwareProfile, ModelSpec};
use kvplan_workloads::{Follows, Request, Segment};
use proptest::prelude::*;

/// What the probe counted: steps, and how often each request ended (and whether it finished,
/// the last time).
#[derive(Debug, Default)]
struct Log {
    ended: Vec<(u32, bool)>,
    steps: u64,
}

/// The probe: checks the state at every launched and completed step, and panics at the first
/// invariant broken (proptest reports the panic's message with the case).
struct Checker {
    log: Rc<RefCell<Log>>,
}

impl Checker {
    /// Stops the run at the first broken invariant: the case fails with `msg`, before the
    /// engine goes on from a state it should never reach (and perhaps panics on it).
    fn fail(&self, msg: String) {
        let step = self.log.borrow().steps;
        panic!("invariant broken at step {step}: {msg}");
    }

    /// The token budget and the sequence limit of one step.
    fn budget(&self, st: &State<'_>, step: &Step) {
        let r = st.r;
        let tokens: u64 = step.members.iter().map(|&(_, n, _)| u64::from(n)).sum();
        let shape: u64 = step.shape.seqs.iter().map(|&(q, _)| u64::from(q)).sum();
        if shape != tokens || step.shape.seqs.len() != step.members.len() {
            self.fail(format!(
                "the step's shape ({shape} tokens, {} sequences) is not its batch ({tokens} \
                 tokens, {} sequences)",
                step.shape.seqs.len(),
                step.members.len()
            ));
        }
        if tokens > u64::from(r.max_num_batched_tokens) {
            // vLLM 0.4's schedulers without chunking run a resumed (recomputed) request whose
            // tokens exceed the budget alone rather than never (`sched/v0.rs`
            // `schedule_waiting`); nothing else may exceed it.
            let alone = r.config.scheduler != SchedulerKind::VllmV1
                && !r.chunked_prefill
                && step.members.len() == 1
                && st.seqs[step.members[0].0].preemptions > 0;
            if !alone {
                self.fail(format!(
                    "{tokens} tokens scheduled, over the budget of {} (max_num_batched_tokens); \
                     batch {:?}",
                    r.max_num_batched_tokens, step.members
                ));
            }
        }
        if step.members.len() as u32 > r.max_num_seqs {
            self.fail(format!(
                "{} sequences in one step, over max_num_seqs {}",
                step.members.len(),
                r.max_num_seqs
            ));
        }
        if st.running.len() as u32 > r.max_num_seqs {
            self.fail(format!(
                "{} sequences running, over max_num_seqs {}",
                st.running.len(),
                r.max_num_seqs
            ));
        }
        let mut seen = HashSet::new();
        for &(v, n, _) in &step.members {
            let s = &st.seqs[v];
            if n == 0 {
                self.fail(format!(
                    "request {v} scheduled for no token (computed {}, known {}, cached {:?})",
                    s.computed,
                    s.known(),
                    s.cached_tokens
                ));
            }
            if !seen.insert(v) {
                self.fail(format!("request {v} twice in one step"));
            }
            if s.place != Place::Running || !st.running.contains(&v) {
                self.fail(format!(
                    "request {v} scheduled while {:?} (running list {:?})",
                    s.place, st.running
                ));
            }
        }
    }

    /// Every request's tokens: computed, generated, cached.
    fn tokens(&self, st: &State<'_>) {
        let r = st.r;
        let bs = r.config.block_size;
        let mml = r.max_model_len;
        for v in st.seqs.start()..st.seqs.end() {
            let s = &st.seqs[v];
            let q = &st.reqs[v];
            if s.place == Place::Pending || matches!(st.status[v], Status::Rejected(_)) {
                continue;
            }
            if s.target > q.output_tokens || s.prompt + s.target > mml {
                self.fail(format!(
                    "request {v}: target {} tokens after a prompt of {} (asked {}, \
                     max_model_len {mml})",
                    s.target, s.prompt, q.output_tokens
                ));
            }
            if s.generated + s.placeholders > s.target {
                self.fail(format!(
                    "request {v}: {} tokens generated and {} in flight, past its output length \
                     {} (asked {}, prompt {}, max_model_len {mml})",
                    s.generated, s.placeholders, s.target, q.output_tokens, s.prompt
                ));
            }
            if s.prompt + s.generated > mml {
                self.fail(format!(
                    "request {v}: {} tokens generated after a prompt of {}, past max_model_len \
                     {mml}",
                    s.generated, s.prompt
                ));
            }
            // The last token sampled is never fed back: at most prompt + target − 1 tokens
            // have KV, and never more than are known.
            if s.computed > s.known() || s.computed >= s.prompt + s.target {
                self.fail(format!(
                    "request {v}: {} tokens computed of {} known (prompt {}, target {})",
                    s.computed,
                    s.known(),
                    s.prompt,
                    s.target
                ));
            }
            if let Some(c) = s.cached_tokens
                && (c >= s.prompt || c % bs != 0)
            {
                self.fail(format!(
                    "request {v}: {c} cached tokens of a {}-token prompt (blocks of {bs}): a \
                     hit is whole blocks and leaves the last prompt token",
                    s.prompt
                ));
            }
            if s.place == Place::Done && s.generated < s.target && st.status[v] == Status::Finished
            {
                self.fail(format!(
                    "request {v} done after {} of {} tokens",
                    s.generated, s.target
                ));
            }
        }
    }

    /// The blocks the tables hold are the pool's blocks in use.
    fn blocks(&self, st: &State<'_>) {
        let pool = st.kv.pool();
        let bs = st.r.config.block_size;
        if pool.capacity() > st.r.usable_blocks || pool.num_used() > pool.capacity() {
            self.fail(format!(
                "{} blocks used of a pool of {} ({} usable)",
                pool.num_used(),
                pool.capacity(),
                st.r.usable_blocks
            ));
        }
        let mut held = HashSet::new();
        for v in st.seqs.start()..st.seqs.end() {
            let s = &st.seqs[v];
            let own: HashSet<u32> = s.kv.blocks.iter().copied().collect();
            if own.len() != s.kv.blocks.len() || own.contains(&0) {
                self.fail(format!(
                    "request {v}'s block table {:?} repeats a block or holds the null block",
                    s.kv.blocks
                ));
            }
            if s.place != Place::Running && !s.kv.blocks.is_empty() {
                self.fail(format!(
                    "request {v} ({:?}) still holds blocks {:?}",
                    s.place, s.kv.blocks
                ));
            }
            if s.place == Place::Running && (s.kv.blocks.len() as u32) * bs < s.computed {
                self.fail(format!(
                    "request {v}: {} tokens computed in {} blocks of {bs}",
                    s.computed,
                    s.kv.blocks.len()
                ));
            }
            held.extend(own);
        }
        if held.len() as u32 != pool.num_used() {
            self.fail(format!(
                "the block tables hold {} distinct blocks, the pool counts {} in use (of {})",
                held.len(),
                pool.num_used(),
                pool.capacity()
            ));
        }
        if st.host_used > st.r.host_bytes {
            self.fail(format!(
                "{} bytes swapped out, over the swap space of {}",
                st.host_used, st.r.host_bytes
            ));
        }
    }
}

impl Probe for Checker {
    fn launched(&mut self, st: &State<'_>, step: &Step) {
        self.log.borrow_mut().steps += 1;
        self.budget(st, step);
        self.tokens(st);
        self.blocks(st);
    }

    fn completed(&mut self, st: &State<'_>, step: &Step) {
        self.tokens(st);
        self.blocks(st);
        for &(v, _, emits) in &step.members {
            let s = &st.seqs[v];
            let done = s.generated >= s.target;
            if emits && done != (s.place == Place::Done) {
                self.fail(format!(
                    "request {v}: {} of {} tokens generated, yet {:?}",
                    s.generated, s.target, s.place
                ));
            }
        }
    }

    fn ended(&mut self, index: usize, finished: bool) {
        let mut log = self.log.borrow_mut();
        if log.ended.len() <= index {
            log.ended.resize(index + 1, (0, false));
        }
        let e = &mut log.ended[index];
        *e = (e.0 + 1, finished);
    }
}

/// An engine to run a load on.
#[derive(Debug, Clone, Copy)]
struct Engine {
    scheduler: SchedulerKind,
    preemption: Preemption,
    chunked: Option<bool>,
    prefix: Option<bool>,
    async_scheduling: bool,
    /// `long_prefill_token_threshold` (V1).
    threshold: u32,
    /// Swap space in KV blocks (swap and hybrid).
    swap_blocks: u32,
    /// vLLM 0.4's watermark (0: none).
    watermark: f64,
}

/// A load: requests and the engine's limits.
#[derive(Debug, Clone)]
struct Load {
    requests: Vec<Request>,
    block_size: u32,
    max_model_len: u32,
    /// KV blocks (`num_gpu_blocks_override`), before the V1 engine's minimum.
    blocks: u32,
    max_num_seqs: u32,
    /// `max_num_batched_tokens` (`None`: the release's default).
    budget: Option<u32>,
}

fn model() -> (ModelSpec, HardwareProfile) {
    (
        ModelSpec::preset("opt-125m").unwrap(),
        HardwareProfile::preset("a100-40g-pcie4").unwrap(),
    )
}

/// Shared prefix segments: a request's chain starts with 0, 1 or 2 of them.
fn prefix() -> impl Strategy<Value = Option<Arc<[Segment]>>> {
    prop_oneof![
        1 => Just(None),
        3 => prop::collection::vec((1u64..4, 1u32..80), 1..3).prop_map(|v| {
            Some(Arc::from(
                v.into_iter()
                    .map(|(id, len)| Segment { id, len })
                    .collect::<Vec<_>>(),
            ))
        }),
    ]
}

/// One request: a prompt mostly shorter than half the context, sometimes anything up to past
/// it (rejected), sometimes empty; an output mostly short, sometimes none; a shared prefix; an
/// output another request may reuse; sometimes the follow-up of an earlier request, or the same
/// request as an earlier one.
#[allow(clippy::type_complexity)]
fn request(
    mml: u32,
) -> impl Strategy<
    Value = (
        f64,
        u32,
        u32,
        Option<Arc<[Segment]>>,
        bool,
        Option<(u64, f64)>,
        Option<u64>,
    ),
> {
    (
        0.0f64..0.004,
        prop_oneof![12 => 1..=mml / 2, 2 => 0..=mml + 8],
        prop_oneof![8 => 1u32..24, 2 => 0u32..80],
        prefix(),
        prop::bool::weighted(0.2),
        prop::option::weighted(0.15, (0u64..1000, 0.0f64..0.005)),
        prop::option::weighted(0.1, 0u64..1000),
    )
}

fn load() -> impl Strategy<Value = Load> {
    (
        // Block sizes every release modelled accepts (vLLM 0.4.2: 8, 16, 32).
        prop::sample::select(vec![8u32, 16, 32]),
        16u32..=256,
        0u32..=3,
        1u32..=12,
        prop::option::weighted(0.8, 1u32..=600),
        1usize..=28,
    )
        .prop_flat_map(|(bs, mml, extra, seqs, budget, n)| {
            let min_blocks = mml.div_ceil(bs);
            (
                Just((bs, mml, seqs, budget)),
                // From half a request of max_model_len to a few.
                (min_blocks / 2).max(2)..=min_blocks * (1 + extra) + 1,
                prop::collection::vec(request(mml), n),
            )
        })
        .prop_map(
            |((block_size, max_model_len, max_num_seqs, budget), blocks, rs)| {
                let mut t = 0.0;
                let mut requests: Vec<Request> = Vec::with_capacity(rs.len());
                for (i, (gap, prompt, output, prefix, own_output, follows, repeat)) in
                    rs.into_iter().enumerate()
                {
                    t += gap;
                    let id = i as u64;
                    let mut q = Request::new(id, t, prompt, output);
                    q.prefix = prefix;
                    if own_output {
                        // A conversation's output, reused by a later request's prefix.
                        q.output_segment = Some(1000 + id);
                    }
                    if let Some(back) = repeat
                        && id > 0
                    {
                        // The same request again, answered the same: its blocks are the
                        // earlier one's, its output's included.
                        let j = (id - 1 - back % id) as usize;
                        let first = &mut requests[j];
                        let answer = *first.output_segment.get_or_insert(1000 + j as u64);
                        // Its whole prompt a shared segment chain (a prompt's own tokens are
                        // unique to it).
                        let mut chain = first.prefix.as_deref().unwrap_or(&[]).to_vec();
                        let shared: u32 = chain.iter().map(|g| g.len).sum();
                        if shared < first.prompt_tokens {
                            chain.push(Segment {
                                id: 3000 + j as u64,
                                len: first.prompt_tokens - shared,
                            });
                            first.prefix = Some(Arc::from(chain));
                        }
                        q.prompt_tokens = first.prompt_tokens;
                        q.output_tokens = first.output_tokens;
                        q.prefix = first.prefix.clone();
                        q.output_segment = Some(answer);
                    }
                    if let Some((back, think_s)) = follows
                        && id > 0
                    {
                        let request = id - 1 - back % id;
                        q.follows = Some(Follows { request, think_s });
                        if q.prefix.is_some() {
                            let mut chain: Vec<Segment> = q.prefix.as_deref().unwrap().to_vec();
                            chain.insert(
                                0,
                                Segment {
                                    id: 1000 + request,
                                    len: 8,
                                },
                            );
                            q.prefix = Some(Arc::from(chain));
                        }
                    }
                    requests.push(q);
                }
                Load {
                    requests,
                    block_size,
                    max_model_len,
                    blocks,
                    max_num_seqs,
                    budget,
                }
            },
        )
}

fn v1_engine() -> impl Strategy<Value = Engine> {
    (
        prop::option::of(any::<bool>()),
        prop::option::of(any::<bool>()),
        any::<bool>(),
        prop_oneof![3 => Just(0u32), 1 => 1u32..64],
    )
        .prop_map(|(chunked, prefix, async_scheduling, threshold)| Engine {
            scheduler: SchedulerKind::VllmV1,
            preemption: Preemption::Recompute,
            chunked,
            prefix,
            async_scheduling,
            threshold,
            swap_blocks: 0,
            watermark: 0.0,
        })
}

fn v0_engine() -> impl Strategy<Value = Engine> {
    (
        prop::sample::select(vec![
            SchedulerKind::PrefillFirst,
            SchedulerKind::Mixed,
            SchedulerKind::Chunked,
        ]),
        prop::sample::select(vec![
            Preemption::Recompute,
            Preemption::Swap,
            Preemption::Hybrid,
        ]),
        prop::bool::weighted(0.25),
        prop_oneof![Just(0u32), 1u32..6, Just(100_000)],
        prop::sample::select(vec![0.0, 0.01, 0.1]),
    )
        .prop_map(
            |(scheduler, preemption, async_scheduling, swap_blocks, watermark)| Engine {
                scheduler,
                preemption,
                chunked: None,
                prefix: None,
                async_scheduling,
                threshold: 0,
                swap_blocks,
                watermark,
            },
        )
}

/// The settings of `e` for `load`, made valid: V1's KV cache holds one request of
/// `max_model_len` (plus the null block), and its budget holds one without chunking.
fn config(e: &Engine, load: &Load, m: &ModelSpec) -> Config {
    let v1 = e.scheduler == SchedulerKind::VllmV1;
    let mml = load.max_model_len;
    let mut blocks = load.blocks;
    let mut budget = load.budget;
    if v1 {
        blocks = blocks.max(mml.div_ceil(load.block_size) + 1);
    }
    // Budgets vLLM refuses are refused (`Config::validate`): at least one token per sequence,
    // and a whole prompt of max_model_len where prompts are not chunked.
    let chunks = if v1 {
        e.chunked != Some(false)
    } else {
        e.scheduler == SchedulerKind::Chunked
    };
    budget = budget.map(|b| b.max(load.max_num_seqs));
    if !chunks {
        budget = budget.map(|b| b.max(mml));
    }
    let block_bytes = u64::from(load.block_size) * m.kv_bytes_per_token();
    Config {
        scheduler: e.scheduler,
        preemption: e.preemption,
        block_size: load.block_size,
        num_gpu_blocks_override: Some(blocks),
        max_num_seqs: Some(load.max_num_seqs),
        max_num_batched_tokens: budget,
        max_model_len: Some(mml),
        enable_prefix_caching: e.prefix,
        enable_chunked_prefill: e.chunked,
        async_scheduling: Some(e.async_scheduling),
        long_prefill_token_threshold: e.threshold,
        watermark: e.watermark,
        swap_space_gib: if v1 {
            4.0
        } else {
            (e.swap_blocks as f64 * block_bytes as f64 + 1.0) / (1u64 << 30) as f64
        },
        record_timeseries: false,
        ..Config::default()
    }
}

/// Runs `load` on `e` under the checker (which panics at the first invariant broken), then
/// checks the ends and records: the report.
fn run(e: &Engine, load: &Load) -> Result<ServeReport, TestCaseError> {
    let (m, hw) = model();
    let cfg = config(e, load, &m);
    let log = Rc::new(RefCell::new(Log::default()));
    let probe = Checker { log: log.clone() };
    let out = watch(Box::new(probe), || simulate(&m, &hw, &cfg, &load.requests));
    let log = log.borrow();
    let out = match out {
        Ok(o) => o,
        Err(err) => return Err(TestCaseError::fail(format!("{e:?}: the run failed: {err}"))),
    };
    ends_once(&log, load, &out)?;
    records(&cfg, load, &out)?;
    Ok(out)
}

/// Every request ended exactly once, and the report has one record per request.
fn ends_once(log: &Log, load: &Load, out: &ServeReport) -> Result<(), TestCaseError> {
    let n = load.requests.len();
    for i in 0..n {
        let (times, _) = log.ended.get(i).copied().unwrap_or_default();
        prop_assert_eq!(times, 1, "request {} ended {} times", i, times);
    }
    prop_assert!(
        log.ended.len() <= n,
        "an end reported for a request not in the input"
    );
    prop_assert_eq!(out.requests.len(), n, "records");
    let ids: HashSet<u64> = out.requests.iter().map(|r| r.id).collect();
    prop_assert_eq!(ids.len(), n, "a request recorded twice");
    for r in &out.requests {
        let finished = log.ended[r.id as usize].1;
        prop_assert_eq!(finished, r.status == Status::Finished, "{:?}", r);
    }
    let s = &out.summary;
    prop_assert_eq!((s.requests, s.finished + s.rejected), (n as u64, n as u64));
    Ok(())
}

/// Each record: served to its output length (cut at `max_model_len`), or rejected for a
/// reason its request has.
fn records(cfg: &Config, load: &Load, out: &ServeReport) -> Result<(), TestCaseError> {
    let mml = load.max_model_len;
    for r in &out.requests {
        let q = &load.requests[r.id as usize];
        prop_assert!(r.cached_tokens < q.prompt_tokens.max(1), "{r:?}");
        match r.status {
            Status::Finished => {
                let room = mml - q.prompt_tokens;
                prop_assert_eq!(r.output_tokens, q.output_tokens.min(room), "{:?}", r);
                let reason = if q.output_tokens > room {
                    FinishReason::Length
                } else {
                    FinishReason::Stop
                };
                prop_assert_eq!(r.finish_reason, Some(reason), "{:?}", r);
                prop_assert!(r.prompt_tokens + r.output_tokens <= mml);
            }
            Status::Rejected(why) => {
                let ok = match why {
                    RejectReason::EmptyRequest => q.prompt_tokens == 0 || q.output_tokens == 0,
                    RejectReason::PromptTooLong => q.prompt_tokens >= mml,
                    RejectReason::ExceedsKvCapacity | RejectReason::ExceedsBatchTokens => {
                        cfg.scheduler != SchedulerKind::VllmV1
                    }
                    RejectReason::ExceedsContext => false,
                };
                prop_assert!(ok, "{r:?} for {q:?}");
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(crate::props::config(512))]

    /// vLLM V1's scheduler, chunked prefill, prefix caching and asynchronous scheduling each on
    /// or off, with or without a long-prefill threshold.
    #[test]
    fn v1_engine_keeps_its_invariants(load in load(), e in v1_engine()) {
        run(&e, &load)?;
    }

    /// vLLM 0.4's schedulers (prefill-first, mixed, chunked) under recompute, swap and hybrid
    /// preemption, with no swap space, a few blocks' worth or plenty, and watermarks.
    #[test]
    fn v0_engines_keep_their_invariants(load in load(), e in v0_engine()) {
        run(&e, &load)?;
    }
}

/// The vLLM 0.4 engines admit a request whose KV at full length fits `usable_blocks` (all
/// `num_gpu_blocks`, less the watermark); their block pool kept vLLM V1's null block and held
/// one block fewer, so a request that needed every block could never be scheduled and the run
/// stalled (or, on `chunked`, preempted itself for ever). Found by
/// `v0_engines_keep_their_invariants` (a request of 85 + 1 tokens in 22 blocks of 4; here, with
/// vLLM 0.4's smallest block size, 86 tokens in 11 blocks of 8).
#[test]
fn v0_pool_holds_what_its_admission_rule_counts() {
    let (m, hw) = model();
    let cfg = Config {
        block_size: 8,
        num_gpu_blocks_override: Some(11),
        max_model_len: Some(177),
        ..Config::vllm_v0()
    };
    let r = cfg.validate(&m, &hw).unwrap();
    assert_eq!((r.usable_blocks, r.watermark_blocks), (11, 0));
    let out = simulate(&m, &hw, &cfg, &[Request::new(0, 0.0, 85, 1)]);
    assert_eq!(out.map(|o| o.summary.finished).ok(), Some(1));
}
