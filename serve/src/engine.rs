//! One engine: vLLM's engine-core busy loop (`EngineCore.run_busy_loop`, `vllm/v1/engine/core.py`)
//! as one host thread and one GPU stream, advanced one pass at a time by its driver
//! ([`crate::cluster`]), which delivers requests and runs the passes of every engine of a
//! cluster in time order.
//!
//! Each pass, at the engine's host clock: take the requests that have reached the engine, schedule
//! a step with the policy, spend the host time to prepare and launch it (the GPU starts it when
//! both the launch and the previous step are done), then — synchronously, or with asynchronous
//! scheduling only once two steps are in flight (`step_with_batch_queue`, queue depth 2) — wait
//! for the oldest step's output and process it: tokens are emitted at that moment, finished
//! requests free their blocks. With asynchronous scheduling the host schedules step `k + 1` while
//! the GPU runs step `k`, so a step's period is `max(GPU, host)`, and a request that arrives
//! during step `k` is first scheduled after step `k`'s output is processed.
//!
//! A pass happens at one instant: a wait for the GPU ends the pass ([`Host::Blocked`]) and the
//! output is processed at the start of the next, so whatever the driver does between two passes
//! (a router reading the engine's load) sees the engine as it is at that time.
//!
//! **Stretches of decode-only steps.** Between events, a V1 engine's passes are deterministic:
//! each processes the oldest step's output (one token per request) and schedules one token for
//! every running request. Such a pass is run without the scheduler, the arrivals, the releases
//! and the retirements, and the engine runs every such pass before the driver's horizon in one
//! call of [`Engine::pass`] (the driver sees none of them: they report nothing). A pass is one
//! of a stretch only when it provably does what the full pass would:
//! - before the horizon ([`Engine::set_horizon`]: the next router event, when a request may be
//!   sent to the engine or its load or prefix cache read; `-inf`, no stretch, where the router
//!   sees every pass: load kept per pass for a stale view, KV events stamped with their pass,
//!   a disaggregated cluster's hand-overs) and before the next delivery reaches the engine;
//! - nothing to settle: no block release pending, no blocks held for a pull, no GPU time owed,
//!   no load in progress;
//! - the output it processes gives no request its first token and finishes none (the stretch
//!   ends before the first completion);
//! - the step it schedules is decode-only and needs no decision
//!   ([`crate::sched::State::decode_only`]): nothing waiting or swapped, every running request
//!   that samples has one token to compute below `max_model_len`, within the token budget, and
//!   the blocks its block boundaries take are free (no preemption);
//! - the engine is V1's (the vLLM 0.4 schedulers always run the full pass), without a CPU tier,
//!   hybrid preemption, remote prefills or recorded KV events.
//!
//! Such a pass makes the same calls in the same order as the full pass (the step's blocks
//! allocated request by request, the block made full entered in the prefix cache, the step timed
//! by the same [`IterationTimer::time`], the clocks, the KV-use integral and the kernel time
//! advanced by the same operations), so its results are the full pass's to the bit, with or
//! without a per-step series. What it saves is the driver's round trip and the scheduler's
//! work, not the step's timing: [`Engine::iterations`] counts every step, [`Engine::passes`]
//! the passes that ran the scheduler. [`crate::config::Resolved::step_by_step`] turns stretches off.
//!
//! The engine only advances time; the scheduling rules live in [`crate::sched`], the step's time
//! in [`crate::iteration`], the blocks in [`crate::kv_cache`].

use std::collections::VecDeque;

use kvplan_workloads::Request;
use rustc_hash::FxHashMap;

use crate::config::Resolved;
use crate::error::Error;
use crate::iteration::{CopyRun, IterationTimer};
use crate::kv_cache::ReqKv;
use crate::output::{IterationRecord, RequestRecord, Status};
use crate::sched::{Load, Place, Policy, Seq, Source, State, Step, Window};
use crate::tier::{CpuTier, Reload};

/// A request handed to an engine: the request, its position in the run's input, when the
/// client sent it and when it reaches the engine (its send plus routing and the frontend).
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The request.
    pub request: Request,
    /// Its position in the run's input.
    pub index: usize,
    /// When the client sent it.
    pub sent_s: f64,
    /// When the engine sees it.
    pub at_s: f64,
    /// What part it plays in a disaggregated cluster.
    pub role: Part,
}

/// A request's part on this engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Part {
    /// The whole request.
    #[default]
    Whole,
    /// Its prefill only (one token, `max_tokens=1`), its KV held until pulled; `push`: pushed
    /// layer by layer as it is computed.
    Prefill {
        /// Layer-wise push.
        push: bool,
    },
    /// Its decode, the prompt's KV pulled from prefill replica `from`.
    Decode {
        /// The prefill replica (the cluster's engine index).
        from: u32,
    },
}

/// A KV pull a decode engine started, for the driver to time on the network.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pull {
    /// The engine position of the request.
    pub pos: usize,
    /// Its input position.
    pub index: usize,
    /// The prefill replica.
    pub from: u32,
    /// Blocks read.
    pub blocks: u32,
    /// When the read is posted.
    pub at_s: f64,
}

/// A chunk of prefill KV a prefill engine computed in a step (layer-wise push).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Push {
    /// The request's input position.
    pub index: usize,
    /// Tokens computed.
    pub tokens: u32,
    /// The step's GPU start and end.
    pub gpu: (f64, f64),
}

/// What the host thread does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    /// Runs a pass at its clock.
    Ready,
    /// Waits until its clock for the oldest step in flight, then processes its output.
    Blocked,
    /// Nothing to do until a request is delivered.
    Idle,
}

struct InFlight {
    step: Step,
    gpu_end: f64,
    cpu_after: f64,
}

/// What a pass reports to the driver.
#[derive(Debug, Default)]
pub struct Outbox {
    /// Requests (input positions) that ended, with the time and whether they finished:
    /// finished (their last token processed) or rejected (at their send time).
    pub ended: Vec<(usize, f64, bool)>,
    /// Requests whose first token was processed.
    pub first: Vec<usize>,
    /// Requests retired in this pass, with their input positions.
    pub retired: Vec<(usize, RequestRecord)>,
    /// KV pulls started.
    pub pulls: Vec<Pull>,
    /// Prefill chunks computed for a layer-wise push.
    pub pushes: Vec<Push>,
}

impl Outbox {
    /// Whether there is nothing in it.
    pub fn is_empty(&self) -> bool {
        self.ended.is_empty()
            && self.first.is_empty()
            && self.retired.is_empty()
            && self.pulls.is_empty()
            && self.pushes.is_empty()
    }
}

/// Copy costs of a CPU tier's units.
#[derive(Debug, Clone, Copy, Default)]
struct UnitCopies {
    kv_in: CopyRun,
    kv_out: CopyRun,
    x_in: CopyRun,
    x_out: CopyRun,
}

/// One engine (a replica's engine core).
pub struct Engine<'a> {
    timer: IterationTimer,
    policy: Box<dyn Policy>,
    /// The requests, queues and KV cache.
    pub st: State<'a>,
    /// The per-step series (when recorded).
    pub series: Vec<IterationRecord>,
    /// Kernel time spent.
    pub compute_s: f64,
    /// Steps run.
    pub iterations: u64,
    /// The host thread's clock.
    now: f64,
    host: Host,
    gpu_free: f64,
    inflight: VecDeque<InFlight>,
    spare: Vec<Step>,
    depth: usize,
    /// Requests delivered and not yet taken, in order of arrival at the engine.
    inbox: VecDeque<Delivery>,
    /// Per engine position: the client's send time.
    sent: Window<f64>,
    /// Per engine position: when it reached the engine.
    arrived: Window<f64>,
    /// Per engine position: the input position.
    index: Window<usize>,
    /// When the host link is next free, to the GPU and from it (one value on a half-duplex
    /// link).
    link_free: [f64; 2],
    half_duplex: bool,
    copies: UnitCopies,
    /// Blocks held for a pull, by input position.
    held: FxHashMap<usize, ReqKv>,
    /// Blocks to free at a time.
    releases: Vec<(f64, ReqKv)>,
    /// GPU time owed by reloads' recomputation, paid by the next step.
    gpu_debt: f64,
    /// Tier units being loaded, per engine position.
    loaded: FxHashMap<usize, Vec<u64>>,
    /// Scratch.
    scratch: Vec<u64>,
    /// KV blocks in use integrated over time (block-seconds), and when it was last added to.
    kv_area: f64,
    kv_area_at: f64,
    /// Whether stretches of decode-only steps are fast-forwarded (not [`Resolved::step_by_step`]
    /// and a V1 engine without a CPU tier or hybrid preemption, not a replica whose passes the
    /// router sees one by one).
    fast_forward: bool,
    /// The driver's horizon: no pass of a stretch runs at or after it.
    horizon: f64,
    /// Passes that ran the scheduler.
    passes: u64,
    /// A freshly started engine's fused-MoE kernels ([`crate::warmup`]; `None`: warm, or a
    /// model they do not apply to).
    jit: Option<crate::warmup::FusedMoeJit>,
    /// Seconds one kernel compilation holds a step.
    compile_s: f64,
}

impl<'a> Engine<'a> {
    /// An engine with `resolved`'s settings, timing steps with `timer`.
    pub fn new(timer: IterationTimer, resolved: &'a Resolved) -> Self {
        let mut st = State::new(resolved);
        if resolved.config.preemption == crate::config::Preemption::Hybrid {
            st.hybrid = Some(timer.clone());
            st.act_block_bytes = u64::from(resolved.config.block_size)
                * timer.model().act_bytes_per_token_layer()
                * u64::from(timer.model().num_layers);
        }
        let jit = if resolved.config.cold_start {
            crate::warmup::FusedMoeJit::new(
                timer.model(),
                crate::warmup::FusedMoeJit::startup_tokens(
                    &resolved.cudagraph_sizes,
                    resolved.max_num_batched_tokens,
                    resolved.max_num_seqs,
                ),
            )
        } else {
            None
        };
        Engine {
            jit,
            compile_s: timer.kernel_compile_s(),
            policy: crate::sched::registry::policy(resolved.config.scheduler),
            depth: if resolved.async_scheduling { 2 } else { 1 },
            timer,
            st,
            series: Vec::new(),
            compute_s: 0.0,
            iterations: 0,
            now: 0.0,
            host: Host::Idle,
            gpu_free: 0.0,
            inflight: VecDeque::new(),
            spare: Vec::new(),
            inbox: VecDeque::new(),
            sent: Window::default(),
            arrived: Window::default(),
            index: Window::default(),
            link_free: [0.0; 2],
            half_duplex: false,
            copies: UnitCopies::default(),
            held: FxHashMap::default(),
            releases: Vec::new(),
            gpu_debt: 0.0,
            loaded: FxHashMap::default(),
            scratch: Vec::new(),
            kv_area: 0.0,
            kv_area_at: 0.0,
            fast_forward: !resolved.step_by_step
                && resolved.config.scheduler == crate::config::SchedulerKind::VllmV1
                && resolved.config.preemption != crate::config::Preemption::Hybrid,
            horizon: f64::NEG_INFINITY,
            passes: 0,
        }
    }

    /// Sets the horizon of the next pass: the first time anything outside the engine could look
    /// at it or hand it something (the cluster's next router event). A stretch of decode-only
    /// steps runs only the passes before it; `-inf` (the default) runs no stretch, `inf` lets
    /// a stretch run to its own end.
    pub fn set_horizon(&mut self, t: f64) {
        self.horizon = t;
    }

    /// Passes that ran the scheduler (a stretch of decode-only steps is not one).
    /// [`Engine::iterations`] counts every step, those of stretches included.
    pub fn passes(&self) -> u64 {
        self.passes
    }

    /// KV blocks in use, averaged over `0..until` (the cluster's makespan).
    pub fn mean_kv_used(&self, until: f64) -> f64 {
        if until <= 0.0 {
            return 0.0;
        }
        let tail = f64::from(self.st.kv.pool().num_used()) * (until - self.kv_area_at).max(0.0);
        (self.kv_area + tail) / until
    }

    /// Gives the engine a CPU tier for its KV cache.
    pub fn with_tier(mut self, tier: CpuTier) -> Self {
        let t = &self.timer;
        self.copies = UnitCopies {
            kv_in: t.copy_run(tier.kv_bytes, false),
            kv_out: t.copy_run(tier.kv_bytes, true),
            x_in: t.copy_run(tier.x_bytes, false),
            x_out: t.copy_run(tier.x_bytes, true),
        };
        self.half_duplex = t.cost().duplex() == kvplan_vocab::hardware::Duplex::Half;
        self.st.kv.tier = Some(tier);
        self.fast_forward = false;
        self
    }

    /// Lets remote prefills hand requests to this engine (a decode replica).
    pub fn with_remote(mut self) -> Self {
        self.st.remote = true;
        self.fast_forward = false;
        self
    }

    /// Records the block pool's KV events (for a router that indexes them).
    pub fn record_kv_events(&mut self) {
        self.st.kv.pool_mut().record_events();
        // Each event is stamped with its pass's time.
        self.fast_forward = false;
    }

    /// The KV events since the last call.
    pub fn drain_kv_events(&mut self, out: &mut Vec<(u64, bool)>) {
        self.st.kv.pool_mut().drain_events(out);
    }

    /// The CPU tier, if any.
    pub fn tier(&self) -> Option<&CpuTier> {
        self.st.kv.tier.as_ref()
    }

    /// Blocks in use.
    pub fn kv_used(&self) -> u32 {
        self.st.kv.pool().num_used()
    }

    /// A pull for the request at engine position `pos` ends at `t`.
    pub fn pulled(&mut self, pos: usize, t: f64) {
        if let Some(s) = self.st.seqs.get_mut(pos)
            && s.load == Load::Pending
        {
            s.load = Load::Until(t);
        }
    }

    /// The blocks held for request `index` (input position) are freed at `t`.
    pub fn release(&mut self, index: usize, t: f64) {
        if let Some(kv) = self.held.remove(&index) {
            self.releases.push((t, kv));
        }
    }

    /// Whether the engine waits for nothing it can time itself (held blocks, pulls not timed
    /// yet) and has work.
    fn waits_on_cluster(&self) -> bool {
        !self.held.is_empty()
            || self
                .st
                .loading
                .iter()
                .any(|&v| self.st.seqs[v].load == Load::Pending)
    }

    /// The earliest time something the engine waits for happens by itself.
    fn next_own_event(&self) -> Option<f64> {
        let loads = self
            .st
            .loading
            .iter()
            .filter_map(|&v| match self.st.seqs[v].load {
                Load::Until(t) => Some(t),
                _ => None,
            });
        let releases = self.releases.iter().map(|r| r.0);
        loads.chain(releases).min_by(f64::total_cmp)
    }

    /// The host clock: the time of the last pass (or of the next, when [`Host::Ready`] or
    /// [`Host::Blocked`]).
    pub fn now(&self) -> f64 {
        self.now
    }

    /// Requests waiting (delivered or queued, not running).
    pub fn waiting(&self) -> usize {
        self.st.waiting.len() + self.st.swapped.len() + self.inbox.len()
    }

    /// Requests running.
    pub fn running(&self) -> usize {
        self.st.running.len()
    }

    /// Hands request `d` to the engine. Deliveries come in order of [`Delivery::at_s`].
    pub fn deliver(&mut self, d: Delivery) -> Result<(), Error> {
        self.inbox.try_reserve(1).map_err(|_| Error::OutOfMemory {
            what: "the requests in flight",
            bytes: std::mem::size_of::<Delivery>() as u64,
        })?;
        debug_assert!(self.inbox.back().is_none_or(|b| b.at_s <= d.at_s));
        self.inbox.push_back(d);
        Ok(())
    }

    /// When the engine next runs a pass: its clock when ready or blocked, the next delivery's
    /// arrival when idle, or never.
    pub fn next_time(&self) -> Option<f64> {
        match self.host {
            Host::Ready | Host::Blocked => Some(self.now),
            Host::Idle => {
                let inbox = self.inbox.front().map(|d| d.at_s);
                let own = if self.st.has_work() || !self.releases.is_empty() {
                    self.next_own_event()
                } else {
                    None
                };
                match (inbox, own) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                }
                .map(|t| t.max(self.now))
            }
        }
    }

    /// Runs one pass at [`Engine::next_time`], reporting ended and retired requests in `out`;
    /// or, when the passes from there are a stretch of decode-only steps, every pass of it
    /// before the horizon ([`Engine::set_horizon`]).
    pub fn pass(&mut self, out: &mut Outbox) -> Result<(), Error> {
        if self.fast_forward && self.stretch_pass(out)? {
            while self.stretch_pass(out)? {}
            return Ok(());
        }
        self.passes += 1;
        match self.host {
            Host::Idle => match self.next_time() {
                Some(t) => self.now = t,
                None => return Ok(()),
            },
            Host::Blocked => {
                let f = self.inflight.pop_front().expect("a step in flight");
                self.st.complete(&f.step, self.now);
                crate::probe::with(|p| p.completed(&self.st, &f.step));
                for &v in &self.st.just_finished {
                    out.ended.push((self.index[v], self.now, true));
                }
                for &v in &self.st.just_first {
                    out.first.push(self.index[v]);
                }
                self.keep_finished();
                self.spare.push(f.step);
                self.retire(out)?;
            }
            Host::Ready => {}
        }
        self.host = Host::Ready;
        let used = f64::from(self.st.kv.pool().num_used());
        self.kv_area += used * (self.now - self.kv_area_at).max(0.0);
        self.kv_area_at = self.kv_area_at.max(self.now);
        self.settle();
        self.take_arrivals(out)?;
        self.retire(out)?;
        if self.st.has_work() {
            let mut step = self.spare.pop().unwrap_or_default();
            step.clear();
            self.policy.schedule(&mut self.st, &mut step, self.now);
            self.issue_loads(&mut step, out);
            let stores = self.plan_stores(&mut step);
            if step.is_empty() {
                self.spare.push(step);
            } else if self.launch(step, &stores, out)? {
                return Ok(());
            }
        }
        self.wait()
    }

    /// The pass of a stretch of decode-only steps at the engine's clock, when it is one
    /// (before the horizon, no delivery reached, nothing to settle; the step in flight whose
    /// output it processes gives no first token and finishes nothing; the step it schedules is
    /// [`State::decode_only`]): the same pass as [`Engine::pass`] without the scheduler, the
    /// arrivals, the releases and the retirements, none of which has anything to do in it.
    /// Whether it ran.
    ///
    /// [`State::decode_only`]: crate::sched::State::decode_only
    fn stretch_pass(&mut self, out: &mut Outbox) -> Result<bool, Error> {
        if self.host == Host::Idle
            || self.now >= self.horizon
            || self.inbox.front().is_some_and(|d| d.at_s <= self.now)
            || !self.releases.is_empty()
            || !self.held.is_empty()
            || self.gpu_debt != 0.0
        {
            return Ok(false);
        }
        if self.host == Host::Blocked {
            let f = self.inflight.front().expect("a step in flight");
            for &(v, _, emits) in &f.step.members {
                let s = &self.st.seqs[v];
                if emits
                    && (s.place != Place::Running
                        || s.first_token.is_nan()
                        || s.generated + 1 >= s.target)
                {
                    return Ok(false);
                }
            }
        }
        // Processing the step in flight changes neither a request's known and computed tokens
        // nor whether it still samples: the next step is decided now.
        if !self.st.decode_only() {
            return Ok(false);
        }
        if self.host == Host::Blocked {
            let f = self.inflight.pop_front().expect("a step in flight");
            self.st.complete(&f.step, self.now);
            crate::probe::with(|p| p.completed(&self.st, &f.step));
            debug_assert!(self.st.just_finished.is_empty() && self.st.just_first.is_empty());
            self.spare.push(f.step);
        }
        self.host = Host::Ready;
        let used = f64::from(self.st.kv.pool().num_used());
        self.kv_area += used * (self.now - self.kv_area_at).max(0.0);
        self.kv_area_at = self.kv_area_at.max(self.now);
        let mut step = self.spare.pop().unwrap_or_default();
        step.clear();
        self.st.schedule_decodes(&mut step, self.now);
        if !self.launch(step, &[], out)? {
            self.wait()?;
        }
        debug_assert!(out.is_empty());
        Ok(true)
    }

    /// Times and launches a step at the engine's clock. Whether the host goes on to schedule
    /// the next step before waiting (asynchronous scheduling with one step in flight, still
    /// running).
    fn launch(
        &mut self,
        mut step: Step,
        stores: &[(usize, u64, u64)],
        out: &mut Outbox,
    ) -> Result<bool, Error> {
        step.shape.extra_gpu_s = std::mem::take(&mut self.gpu_debt);
        crate::probe::with(|p| p.launched(&self.st, &step));
        let mut t = self.timer.time(&step.shape);
        if let (Some(jit), crate::iteration::Launch::Eager) = (&mut self.jit, t.launch) {
            // Triton compiles on the worker's thread before the kernel runs: the step waits.
            let n = jit.eager_step(step.shape.tokens());
            if n > 0 {
                let stall = f64::from(n) * self.compile_s;
                t.total_s += stall;
                self.st.counters.kernel_compiles += u64::from(n);
                self.st.counters.compile_stall_s += stall;
            }
        }
        let launch_at = self.now + t.cpu_before_s;
        let start = launch_at.max(self.gpu_free);
        let end = (start + t.total_s).max(launch_at + t.cpu_launch_s);
        self.gpu_free = end;
        self.copy_stores(stores, end);
        self.report_pushes(&step, start, end, out);
        self.now = launch_at + t.cpu_launch_s;
        self.compute_s += t.compute_s;
        self.iterations += 1;
        if self.st.r.config.record_timeseries {
            self.record(&step, start, end - start)?;
        }
        self.inflight.push_back(InFlight {
            step,
            gpu_end: end,
            cpu_after: t.cpu_after_s,
        });
        // Asynchronous scheduling: schedule the next step before waiting, while fewer than two
        // are in flight and the oldest is still running.
        Ok(self.inflight.len() < self.depth
            && self.inflight.front().is_some_and(|f| f.gpu_end > self.now))
    }

    /// The end of a pass: wait for the oldest step in flight, or go idle.
    fn wait(&mut self) -> Result<(), Error> {
        match self.inflight.front() {
            Some(f) => {
                self.now = self.now.max(f.gpu_end) + f.cpu_after;
                self.host = Host::Blocked;
            }
            None if self.st.has_work()
                && self.next_own_event().is_none()
                && !self.waits_on_cluster() =>
            {
                return Err(Error::Stalled {
                    time_s: self.now,
                    waiting: self.st.waiting.len(),
                    swapped: self.st.swapped.len(),
                });
            }
            None => self.host = Host::Idle,
        }
        Ok(())
    }

    /// Whether the engine has requests it has not finished (queued, running, loading).
    pub fn has_work(&self) -> bool {
        self.st.has_work() || !self.inbox.is_empty()
    }

    /// Frees blocks whose time has come, completes the tier's finished stores and sees loads
    /// that are done.
    fn settle(&mut self) {
        let now = self.now;
        let mut i = 0;
        while i < self.releases.len() {
            if self.releases[i].0 <= now {
                let (_, mut kv) = self.releases.swap_remove(i);
                self.st.kv.free(&mut kv);
            } else {
                i += 1;
            }
        }
        if let Some(t) = &mut self.st.kv.tier {
            t.settle(now);
        }
        let mut k = 0;
        while k < self.st.loading.len() {
            let v = self.st.loading[k];
            match self.st.seqs[v].load {
                Load::Until(t) if t <= now => {
                    self.st.loading.swap_remove(k);
                    self.observe_load(v);
                }
                _ => k += 1,
            }
        }
    }

    /// A load is seen done (vLLM's `_update_waiting_for_remote_kv`): the request has its
    /// allocated blocks' tokens computed, less its last token when they cover it.
    fn observe_load(&mut self, v: usize) {
        let bs = self.st.r.config.block_size;
        let now = self.now;
        let s = &mut self.st.seqs[v];
        s.load = Load::None;
        let known = s.known();
        let mut computed = (s.kv.blocks.len() as u32 * bs).min(known);
        if computed == known {
            computed -= 1;
        }
        s.computed = computed;
        s.load_s = now - s.load_start;
        let layout = match self.st.layouts.get(v) {
            Some(Some(l)) => l,
            _ => &crate::kv_cache::Layout::empty(),
        };
        self.st.kv.cache_upto(&mut s.kv, layout, computed);
        if let Some(t) = &mut self.st.kv.tier
            && let Some(h) = self.loaded.remove(&v)
        {
            // A load from the tier (a remote prefill's pull is the cluster's to count).
            t.stats.load_s += s.load_s;
            t.eviction.pin(&h, -1);
        }
    }

    /// Finished requests whose blocks are kept: held for a pull, or freed once their stores
    /// are copied.
    fn keep_finished(&mut self) {
        for (v, kv) in std::mem::take(&mut self.st.kept) {
            let s = &self.st.seqs[v];
            if s.hold_kv {
                self.held.insert(self.index[v], kv);
            } else {
                self.releases.push((s.store_end, kv));
            }
        }
    }

    /// Starts the loads the schedule asked for: a tier's copies (beside the steps, or in this
    /// step), a remote prefill's pull (timed by the driver).
    fn issue_loads(&mut self, step: &mut Step, out: &mut Outbox) {
        if self.st.new_loads.is_empty() {
            return;
        }
        let bs = self.st.r.config.block_size;
        for v in std::mem::take(&mut self.st.new_loads) {
            let s = &self.st.seqs[v];
            if let Source::Remote { from } = s.source {
                let hit = s.cached_tokens.unwrap_or(0);
                out.pulls.push(Pull {
                    pos: v,
                    index: self.index[v],
                    from,
                    blocks: s.kv.blocks.len() as u32 - hit / bs,
                    at_s: self.now,
                });
                continue;
            }
            let Some(tier) = &mut self.st.kv.tier else {
                continue;
            };
            let unit = tier.unit;
            let per = (unit / bs) as usize;
            let hit = s.cached_tokens.unwrap_or(0);
            let first = (hit / unit) as usize;
            let n = (s.external_tokens.div_ceil(unit)) as usize;
            let layout = match self.st.layouts.get(v) {
                Some(Some(l)) => l,
                _ => continue,
            };
            let s = &mut self.st.seqs[v];
            let blocks = s.kv.hashes_upto(layout, (first + n) * per, bs);
            self.scratch.clear();
            self.scratch
                .extend((first..first + n).map(|u| blocks[u * per + per - 1]));
            let (mut x, mut k) = (0u64, 0u64);
            for &h in &self.scratch {
                match tier.eviction.bytes_of(h) {
                    Some(b) if b == tier.x_bytes && b != tier.kv_bytes => x += 1,
                    _ => k += 1,
                }
            }
            let c = self.copies;
            tier.stats.loads += 1;
            tier.stats.hit_tokens += u64::from(s.external_tokens);
            tier.stats.loaded_bytes += (x * tier.x_bytes + k * tier.kv_bytes) * tier.ranks;
            let x_s = c.x_in.time(x);
            let kv_s = c.kv_in.time(k);
            if !tier.backend.async_load {
                // In this step, before its forward pass.
                step.shape.connector_in_s += x_s + kv_s;
                continue;
            }
            let lane = 0;
            let start = self.now.max(self.link_free[lane]);
            let x_end = start + x_s;
            let kv_end = x_end + kv_s;
            self.link_free[lane] = kv_end;
            let mut end = kv_end;
            if x > 0 {
                let tokens = (x as u32 * unit).min(s.external_tokens);
                let r = self.timer.recompute_s(tokens);
                let rec_end = x_end.max(self.gpu_free) + r;
                end = end.max(rec_end);
                self.gpu_debt += r;
                self.compute_s += r;
                tier.stats.recomputed_tokens += u64::from(tokens);
            }
            tier.eviction.pin(&self.scratch, 1);
            self.loaded.insert(v, self.scratch.clone());
            s.load = Load::Until(end);
        }
    }

    /// Plans the tier's stores of the units the step's requests fill: slots reserved now.
    /// Returns, per request, the units to copy `(v, x units, kv units)`; LMCache's copies go
    /// into the step.
    fn plan_stores(&mut self, step: &mut Step) -> Vec<(usize, u64, u64)> {
        let mut out = Vec::new();
        let Some(tier) = &mut self.st.kv.tier else {
            return out;
        };
        let bs = self.st.r.config.block_size;
        let unit = tier.unit;
        let per = (unit / bs) as usize;
        let busy = self.gpu_free - self.now;
        for &(v, _, _) in &step.members {
            let s = &mut self.st.seqs[v];
            let limit = if tier.backend.store_output {
                s.computed
            } else {
                s.computed.min(s.prompt)
            };
            let full = (limit / unit) as usize;
            let from = s.next_store as usize;
            if full <= from {
                continue;
            }
            if tier.eviction.room() < tier.kv_bytes.min(tier.x_bytes) {
                // Full of blocks still being stored or loaded: no store can be planned (vLLM
                // tries again next step, as this does).
                tier.stats.skipped_stores += 1;
                continue;
            }
            let layout = match self.st.layouts.get(v) {
                Some(Some(l)) => l,
                _ => continue,
            };
            let blocks = s.kv.hashes_upto(layout, full * per, bs);
            self.scratch.clear();
            self.scratch
                .extend((0..full).map(|u| blocks[u * per + per - 1]));
            if s.x_units == u32::MAX {
                s.x_units = match tier.reload {
                    Reload::Transfer => 0,
                    Reload::Hybrid => {
                        let (c, t) = (self.copies, &self.timer);
                        crate::tier::reload_split(
                            u64::from(s.prompt / unit),
                            busy.max(0.0),
                            |l| c.x_in.time(l),
                            |k| c.kv_in.time(k),
                            |l| t.recompute_s((l as u32) * unit),
                        ) as u32
                    }
                };
            }
            let Some((x, k)) = tier.plan_store(v, from, &self.scratch[from..], s.x_units as usize)
            else {
                continue;
            };
            s.next_store = full as u32;
            tier.eviction.touch(&self.scratch[..full]);
            if !tier.backend.async_store {
                step.shape.connector_out_s +=
                    self.copies.x_out.time(x) + self.copies.kv_out.time(k);
                s.store_end = s.store_end.max(self.now);
            } else if x + k > 0 {
                out.push((v, x, k));
            }
        }
        out
    }

    /// Times the stores planned in a step ending at `end`: from the next step's start, after
    /// this step's compute, in order on the link.
    fn copy_stores(&mut self, stores: &[(usize, u64, u64)], end: f64) {
        let lane = usize::from(!self.half_duplex);
        for &(v, x, k) in stores {
            let start = end.max(self.link_free[lane]);
            let done = start + self.copies.x_out.time(x) + self.copies.kv_out.time(k);
            self.link_free[lane] = done;
            let s = &mut self.st.seqs[v];
            s.store_end = s.store_end.max(done);
        }
    }

    /// A layer-wise pushing prefill replica's chunks of this step.
    fn report_pushes(&self, step: &Step, start: f64, end: f64, out: &mut Outbox) {
        for &(v, n, _) in &step.members {
            if self.st.seqs[v].push_kv {
                out.pushes.push(Push {
                    index: self.index[v],
                    tokens: n,
                    gpu: (start, end),
                });
            }
        }
    }

    /// Moves every delivered request that has reached the engine by now into the waiting queue
    /// (or rejects it).
    fn take_arrivals(&mut self, out: &mut Outbox) -> Result<(), Error> {
        while self.inbox.front().is_some_and(|d| d.at_s <= self.now) {
            let d = self.inbox.pop_front().expect("a delivery");
            let i = self.st.reqs.end();
            let oom = |_| Error::OutOfMemory {
                what: "the requests in flight",
                bytes: std::mem::size_of::<Request>() as u64,
            };
            self.sent.push(d.sent_s).map_err(oom)?;
            self.arrived.push(d.at_s).map_err(oom)?;
            self.index.push(d.index).map_err(oom)?;
            self.st.push(d.request).map_err(oom)?;
            match d.role {
                Part::Whole => {}
                Part::Prefill { push } => {
                    let s = &mut self.st.seqs[i];
                    s.target = s.target.min(1);
                    s.hold_kv = true;
                    s.push_kv = push;
                }
                Part::Decode { from } => self.st.seqs[i].source = Source::Remote { from },
            }
            self.st.arrive(i);
            if self.st.seqs[i].place == Place::Done {
                // Rejected: it ends now.
                out.ended.push((d.index, d.sent_s, false));
            }
        }
        Ok(())
    }

    fn record(&mut self, step: &Step, start: f64, duration: f64) -> Result<(), Error> {
        self.series.try_reserve(1).map_err(|_| Error::OutOfMemory {
            what: "the per-step time series",
            bytes: ((self.series.len() + 1) * std::mem::size_of::<IterationRecord>()) as u64,
        })?;
        let mut read = 0u64;
        let mut written = 0u64;
        for &(q, kv) in &step.shape.seqs {
            read += u64::from(kv - q);
            written += u64::from(q);
        }
        let kv_token_bytes = self.timer.model().kv_bytes_per_token();
        let st = &self.st;
        self.series.push(IterationRecord {
            t_s: start,
            duration_s: duration,
            gpu_blocks_used: st.kv.pool().num_used(),
            host_blocks_used: st.host_used.div_ceil(st.r.block_bytes) as u32,
            running: st.running.len() as u32,
            waiting: st.waiting.len() as u32,
            swapped: st.swapped.len() as u32,
            batch_tokens: written as u32,
            kv_bytes_read: read * kv_token_bytes,
            kv_bytes_written: written * kv_token_bytes,
        });
        Ok(())
    }

    /// Retires the oldest requests while they are done: their records to `out`, their state
    /// dropped.
    fn retire(&mut self, out: &mut Outbox) -> Result<(), Error> {
        while let Some((q, s, status)) = self.st.retire() {
            self.emit(q, s, status, out)?;
        }
        Ok(())
    }

    fn emit(&mut self, q: Request, s: Seq, status: Status, out: &mut Outbox) -> Result<(), Error> {
        let sent = self.sent.pop_front().expect("a send time per request");
        let arrived = self.arrived.pop_front().expect("an arrival per request");
        let index = self
            .index
            .pop_front()
            .expect("an input position per request");
        let done = status == Status::Finished && s.place == Place::Done;
        let nan = f64::NAN;
        let (queue, ttft, e2e) = if done {
            (
                s.first_sched - arrived,
                s.first_token - sent,
                s.finish - sent,
            )
        } else {
            (nan, nan, nan)
        };
        let tpot = if done && s.generated > 1 {
            (s.finish - s.first_token) / f64::from(s.generated - 1)
        } else if done {
            0.0
        } else {
            nan
        };
        out.retired.try_reserve(1).map_err(|_| Error::OutOfMemory {
            what: "one record per request",
            bytes: std::mem::size_of::<RequestRecord>() as u64,
        })?;
        out.retired.push((
            index,
            RequestRecord {
                id: q.id,
                arrival_s: sent,
                prompt_tokens: q.prompt_tokens,
                output_tokens: if done { s.generated } else { q.output_tokens },
                status,
                finish_reason: done.then_some(s.finish_reason),
                cached_tokens: s.cached_tokens.unwrap_or(0),
                queue_s: queue,
                ttft_s: ttft,
                tpot_s: tpot,
                e2e_s: e2e,
                preemptions: s.preemptions,
                swapped_tokens: s.swapped_tokens,
                recomputed_tokens: s.recomputed_tokens,
                replica: 0,
                prefill_replica: None,
                kv_transfer_s: f64::NAN,
                external_tokens: s.external_tokens,
                kv_load_s: s.load_s,
            },
        ));
        Ok(())
    }

    /// Retires whatever is left (nothing, after a run that ends normally), in engine order.
    pub fn drain(&mut self, out: &mut Outbox) -> Result<(), Error> {
        while let Some((q, s, status)) = self.st.retire_any() {
            self.emit(q, s, status, out)?;
        }
        Ok(())
    }
}
