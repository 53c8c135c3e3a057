//! The discrete-event engine that runs a [`Schedule`] on modelled resources and returns a
//! [`Timeline`]. It lives in the planner so that planners can time the schedules they choose
//! between on the very engine that `kvplan_sim::simulate` runs (the KVPR split, HeadInfer's
//! group and chunk, Runahead's device count); `kvplan-sim` re-exports it.
//!
//! Model: every stream is a FIFO queue (CUDA stream semantics); each stream is served by one
//! *engine* (a compute stream by the GPU's SMs, an H2D stream by the H2D copy engine, ...), and an
//! engine runs one op at a time. With a full-duplex host link the H2D and D2H streams have their
//! own engines; with a half-duplex link they share one. An op starts when it is at the head of
//! its stream, all its dependencies have finished, and its engine is free; its duration comes
//! from the [`CostModel`].
//!
//! The host thread (when the cost model has a [`HostProfile`]): one more resource, which issues
//! the ops in submission order, each for its [`HostIssue`] cost. An op starts only after the host
//! has issued it; a blocking op (a pageable copy) holds the host until it ends, and a
//! synchronisation waits for every op issued so far. Without a host profile every op counts as
//! issued at time 0 and the engine is exactly the one above.
//!
//! Copies issued one by one (with the host thread): a host↔device copy occupies its copy engine
//! for its [`CostModel::occupancy`] (DMA setup and bytes) and ends its [`CostModel::duration`]
//! after it starts; the engine, and the copy behind it on its stream, are free at the end of the
//! occupancy, while the ops that depend on the copy (and a host waiting for it) see its end. So a
//! chain of back-to-back copies pays the completion part of the latency once, not per copy.
//!
//! Determinism: events are ordered by (time, insertion sequence); all completions at one instant
//! are applied before any engine picks its next op; an engine with several ready streams takes
//! the op submitted first. Same schedule and cost model give the same timeline, bit for bit.

use kvplan_vocab::CostModel;
use kvplan_vocab::hardware::Duplex;
use kvplan_vocab::host::{HostIssue, HostProfile};
use kvplan_vocab::schedule::Phase;
use kvplan_vocab::schedule::{Op, OpId, Schedule, StreamId, StreamKind};
use kvplan_vocab::timeline::{Source, Span, Timeline};

/// Simulator errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The schedule breaks an IR rule.
    #[error(transparent)]
    InvalidSchedule(#[from] kvplan_vocab::Error),
    /// `durations` does not have one entry per op, or one is negative or not finite.
    #[error("durations: {0}")]
    InvalidDurations(String),
    /// The engine map does not give every stream an engine, or names more engines than streams.
    #[error("engine map: {0}")]
    InvalidEngineMap(String),
    /// No op could start although some had not run (cannot happen for a valid schedule).
    #[error("simulation stalled with {remaining} ops not run")]
    Stalled {
        /// Ops that never started.
        remaining: usize,
    },
}

/// Which engine serves each stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineMap {
    /// `engine_of[stream]`.
    pub engine_of: Vec<u32>,
}

impl EngineMap {
    /// One engine per stream.
    pub fn one_per_stream(schedule: &Schedule) -> Self {
        EngineMap {
            engine_of: (0..schedule.streams().len() as u32).collect(),
        }
    }

    /// One engine per stream, except that with a half-duplex link each device's H2D and D2H
    /// streams share one copy engine.
    pub fn for_link(schedule: &Schedule, duplex: Duplex) -> Self {
        let mut map = Self::one_per_stream(schedule);
        if duplex == Duplex::Half {
            let streams = schedule.streams();
            for (i, s) in streams.iter().enumerate() {
                if s.kind == StreamKind::D2H
                    && let Some(h) = streams
                        .iter()
                        .position(|o| o.kind == StreamKind::H2D && o.device == s.device)
                {
                    map.engine_of[i] = map.engine_of[h];
                }
            }
        }
        map
    }
}

/// Simulates `schedule` with op durations from `cost` and engines from the profile's duplex;
/// with a host profile on `cost`, the host thread issues the ops ([`run_hosted`]) and the
/// timeline carries its track.
pub fn simulate(schedule: &Schedule, cost: &CostModel) -> Result<Timeline, Error> {
    let ops = schedule.ops();
    let engines = EngineMap::for_link(schedule, cost.duplex());
    let (spans, host) = match cost.host() {
        None => (
            run_with(schedule, &engines, |i| cost.duration(&ops[i].kind))?,
            Vec::new(),
        ),
        Some(h) => run_hosted_occupying(
            schedule,
            &engines,
            |i| {
                let k = &ops[i].kind;
                (cost.duration(k), cost.occupancy(k))
            },
            host_issue(schedule, h),
        )?,
    };
    Ok(Timeline {
        source: Source::Simulated {
            hardware: cost.hardware().to_string(),
        },
        spans,
        host,
    })
}

/// The simulated makespan of `schedule` on `cost` (what planners compare candidates by).
pub fn makespan(schedule: &Schedule, cost: &CostModel) -> Result<f64, Error> {
    let spans = simulate(schedule, cost)?.spans;
    Ok(spans.iter().map(|s| s.end).fold(0.0, f64::max))
}

/// Each op's host cost under `profile`: a step's first op after another step's ops is a step
/// boundary (the profile may synchronise there).
pub fn host_issue(schedule: &Schedule, profile: &HostProfile) -> impl FnMut(usize) -> HostIssue {
    let ops = schedule.ops();
    move |i| {
        let op = &ops[i];
        let new_step = i > 0 && ops[i - 1].tag.step != op.tag.step;
        profile.issue(&op.kind, op.tag.phase == Phase::Decode, new_step)
    }
}

const NONE: u32 = u32::MAX;

/// Runs the discrete-event simulation with given durations (one per op, seconds).
pub fn run(
    schedule: &Schedule,
    durations: &[f64],
    engines: &EngineMap,
) -> Result<Vec<Span>, Error> {
    if durations.len() != schedule.len() {
        return Err(Error::InvalidDurations(format!(
            "{} durations for {} ops",
            durations.len(),
            schedule.len()
        )));
    }
    if let Some(i) = durations.iter().position(|d| !d.is_finite() || *d < 0.0) {
        return Err(Error::InvalidDurations(format!(
            "op {i} has duration {}",
            durations[i]
        )));
    }
    run_with(schedule, engines, |i| durations[i])
}

/// Runs the discrete-event simulation, asking `duration(op index)` for each op as it starts
/// (finite and non-negative).
///
/// Each stream keeps its head op; a head whose dependencies have not all finished records the
/// first unfinished one and is looked at again when that op completes, so the engine needs no
/// dependents index and does work proportional to ops plus dependency edges.
pub fn run_with(
    schedule: &Schedule,
    engines: &EngineMap,
    duration: impl FnMut(usize) -> f64,
) -> Result<Vec<Span>, Error> {
    let mut duration = duration;
    run_core(
        schedule,
        engines,
        |i| {
            let d = duration(i);
            (d, d)
        },
        None::<fn(usize) -> HostIssue>,
    )
    .map(|(s, _)| s)
}

/// [`run_with`] with the host thread: `host(op index)` gives what issuing each op costs it
/// (see the module docs). Returns the ops' spans and the host's span on each op.
pub fn run_hosted(
    schedule: &Schedule,
    engines: &EngineMap,
    duration: impl FnMut(usize) -> f64,
    host: impl FnMut(usize) -> HostIssue,
) -> Result<(Vec<Span>, Vec<Span>), Error> {
    let mut duration = duration;
    run_core(
        schedule,
        engines,
        |i| {
            let d = duration(i);
            (d, d)
        },
        Some(host),
    )
}

/// [`run_hosted`] where each op may free its engine before it ends: `timing(op index)` gives
/// its duration and its occupancy of the engine (at most the duration; see the module docs on
/// copies). The engine, and the next op of the op's stream, may start at the end of the
/// occupancy; dependents, synchronisations and a host waiting on the op see its end.
pub fn run_hosted_occupying(
    schedule: &Schedule,
    engines: &EngineMap,
    timing: impl FnMut(usize) -> (f64, f64),
    host: impl FnMut(usize) -> HostIssue,
) -> Result<(Vec<Span>, Vec<Span>), Error> {
    run_core(schedule, engines, timing, Some(host))
}

/// What the host thread is doing.
#[derive(Clone, Copy, PartialEq)]
enum HostState {
    /// Issuing `op` (its event is pending); whether the op blocks the host until it ends.
    Issuing(u32, bool),
    /// Waiting for `op` (a blocking op it issued) to end.
    WaitingOp(u32),
    /// Waiting for every issued op to end before synchronising and issuing `op`.
    WaitingAll(u32),
    /// Every op issued.
    Done,
}

/// Starts issuing op `k` at `t` (`outstanding` ops issued and unfinished): the host's state and
/// its pending event. An op after a synchronisation point waits for every issued op first.
fn begin_issue<H: FnMut(usize) -> HostIssue>(
    host: &mut H,
    n: usize,
    k: usize,
    t: f64,
    outstanding: usize,
    seq: &mut u64,
    host_spans: &mut [Span],
) -> (HostState, (f64, u64)) {
    if k >= n {
        return (HostState::Done, (f64::INFINITY, u64::MAX));
    }
    let issue = host(k);
    if issue.sync_before_s.is_some() && outstanding > 0 {
        return (HostState::WaitingAll(k as u32), (f64::INFINITY, u64::MAX));
    }
    let end = t + issue.sync_before_s.unwrap_or(0.0) + issue.issue_s;
    host_spans[k] = Span { start: t, end };
    let ev = (end, *seq);
    *seq += 1;
    (HostState::Issuing(k as u32, issue.blocking), ev)
}

/// An event of the engine loop.
#[derive(Clone, Copy)]
enum Event {
    /// The op running on this engine ends its occupancy.
    Engine(usize),
    /// The pending completion at this index ends.
    Completion(usize),
}

/// The smallest (time, sequence) event at or before `until` (`+inf`: any) among the engines'
/// and the pending completions'.
fn next_event(
    event: &[(f64, u64)],
    completions: &[(f64, u64, u32)],
    until: f64,
) -> Option<(Event, (f64, u64))> {
    let mut best: Option<(Event, (f64, u64))> = None;
    let earlier = |ev: (f64, u64), best: &Option<(Event, (f64, u64))>| {
        ev.0 <= until
            && ev.0 < f64::INFINITY
            && best.is_none_or(|(_, b)| ev.0 < b.0 || (ev.0 == b.0 && ev.1 < b.1))
    };
    for (e, &ev) in event.iter().enumerate() {
        if earlier(ev, &best) {
            best = Some((Event::Engine(e), ev));
        }
    }
    for (j, &(t, q, _)) in completions.iter().enumerate() {
        if earlier((t, q), &best) {
            best = Some((Event::Completion(j), (t, q)));
        }
    }
    best
}

/// Checks that the engine map gives every stream an engine below the stream count, and returns
/// the number of engines.
fn engine_count(schedule: &Schedule, engines: &EngineMap) -> Result<usize, Error> {
    let n_streams = schedule.streams().len();
    if engines.engine_of.len() != n_streams {
        return Err(Error::InvalidEngineMap(format!(
            "{} entries for {n_streams} streams",
            engines.engine_of.len()
        )));
    }
    // Engine ids index per-engine state: keep them below the stream count (at most one engine
    // per stream is ever needed).
    if let Some(&e) = engines.engine_of.iter().find(|&&e| e as usize >= n_streams) {
        return Err(Error::InvalidEngineMap(format!(
            "engine id {e} is not below the stream count {n_streams}"
        )));
    }
    Ok(engines
        .engine_of
        .iter()
        .map(|&e| e as usize + 1)
        .max()
        .unwrap_or(0))
}

/// The state of one simulation: the streams' heads, what each engine runs and when it is
/// free, the host thread's progress, and the spans so far.
struct Run<'a> {
    schedule: &'a Schedule,
    ops: &'a [Op],
    engine_of: &'a [u32],
    /// head[s]: the op at the front of stream s.
    head: Vec<u32>,
    /// blocked_on[s]: an unfinished dependency of head[s]; cursor[s]: deps before it are done.
    blocked_on: Vec<u32>,
    cursor: Vec<usize>,
    engine_streams: Vec<Vec<u32>>,
    /// The pending event of each engine: its running op and (end time, start sequence). An
    /// engine runs one op at a time, so the event set is one slot per engine; the next event is
    /// the smallest (end, sequence) — the order a priority queue keyed that way would give.
    running: Vec<u32>,
    event: Vec<(f64, u64)>,
    spans: Vec<Span>,
    seq: u64,
    started: usize,
    /// Engines to let choose their next op.
    touched: Vec<u32>,
    now: f64,
    /// The host thread: issued[i] once op i has been issued (all at once without a host model).
    hosted: bool,
    issued: Vec<bool>,
    host_spans: Vec<Span>,
    host_state: HostState,
    host_event: (f64, u64),
    /// Ops issued and not yet finished (what a synchronisation waits for).
    outstanding: usize,
    /// Ops that freed their engine before their end: (end, sequence, op).
    completions: Vec<(f64, u64, u32)>,
}

impl<'a> Run<'a> {
    /// Every stream at its first op, every engine idle, nothing issued (everything issued when
    /// not `hosted`).
    fn new(schedule: &'a Schedule, engines: &'a EngineMap, n_engines: usize, hosted: bool) -> Self {
        let n = schedule.ops().len();
        let n_streams = schedule.streams().len();
        let head = (0..n_streams)
            .map(|s| {
                schedule
                    .first_in_stream(StreamId(s as u16))
                    .map_or(NONE, |o| o.0)
            })
            .collect();
        let mut engine_streams: Vec<Vec<u32>> = vec![Vec::new(); n_engines];
        for (s, &e) in engines.engine_of.iter().enumerate() {
            engine_streams[e as usize].push(s as u32);
        }
        let unstarted = Span {
            start: f64::INFINITY,
            end: f64::INFINITY,
        };
        Run {
            schedule,
            ops: schedule.ops(),
            engine_of: &engines.engine_of,
            head,
            blocked_on: vec![NONE; n_streams],
            cursor: vec![0usize; n_streams],
            engine_streams,
            running: vec![NONE; n_engines],
            event: vec![(f64::INFINITY, u64::MAX); n_engines],
            spans: vec![unstarted; n],
            seq: 0,
            started: 0,
            touched: (0..n_engines as u32).collect(),
            now: 0.0,
            hosted,
            issued: vec![!hosted; if hosted { n } else { 0 }],
            host_spans: vec![unstarted; if hosted { n } else { 0 }],
            host_state: HostState::Done,
            host_event: (f64::INFINITY, u64::MAX),
            outstanding: 0,
            completions: Vec::new(),
        }
    }

    /// Lets every touched engine pick its next op at `now` and start it.
    #[inline]
    fn start_ready_ops(&mut self, timing: &mut impl FnMut(usize) -> (f64, f64)) {
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        touched.dedup();
        for &e in &touched {
            let e = e as usize;
            if self.running[e] != NONE {
                continue;
            }
            let best = self.ready_op(e);
            if best != NONE {
                self.start(e, best, timing);
            }
        }
        touched.clear();
        self.touched = touched;
    }

    /// The op engine `e` may start at `now` (`NONE`: none): of the heads of its streams that
    /// are issued and whose dependencies have all finished, the one submitted first. A head
    /// waiting on a dependency records it in `blocked_on`.
    #[inline]
    fn ready_op(&mut self, e: usize) -> u32 {
        let mut best = NONE;
        for &s in &self.engine_streams[e] {
            let s = s as usize;
            let h = self.head[s];
            if h == NONE || self.blocked_on[s] != NONE {
                continue;
            }
            // Not issued yet: the host touches this engine when it issues the op.
            if self.hosted && !self.issued[h as usize] {
                continue;
            }
            // Ready when every dependency has finished by `now` (unstarted ops end at +inf).
            let deps = self.schedule.deps(OpId(h));
            let mut c = self.cursor[s];
            while c < deps.len() && self.spans[deps[c].index()].end <= self.now {
                c += 1;
            }
            self.cursor[s] = c;
            if c < deps.len() {
                self.blocked_on[s] = deps[c].0;
            } else {
                best = best.min(h);
            }
        }
        best
    }

    /// Starts `op` on engine `e` at `now`.
    #[inline]
    fn start(&mut self, e: usize, op: u32, timing: &mut impl FnMut(usize) -> (f64, f64)) {
        let (d, occupancy) = timing(op as usize);
        let end = self.now + d;
        self.spans[op as usize] = Span {
            start: self.now,
            end,
        };
        self.running[e] = op;
        // The engine is free after the op's occupancy (its whole duration, except for a copy
        // followed by another).
        self.event[e] = (self.now + occupancy.min(d), self.seq);
        self.seq += 1;
        self.started += 1;
    }

    /// The host starts issuing op `k` at `now`.
    #[inline]
    fn begin_issue<H: FnMut(usize) -> HostIssue>(&mut self, host: &mut H, k: usize) {
        (self.host_state, self.host_event) = begin_issue(
            host,
            self.ops.len(),
            k,
            self.now,
            self.outstanding,
            &mut self.seq,
            &mut self.host_spans,
        );
    }

    /// The host's issue ends (its event is the next one): the op is issued and its engine may
    /// take it; the host goes on to the next op unless this one blocks it.
    fn end_issue<H: FnMut(usize) -> HostIssue>(&mut self, host: &mut Option<H>) {
        self.now = self.host_event.0;
        let HostState::Issuing(k, blocking) = self.host_state else {
            unreachable!("a host event while issuing")
        };
        let k = k as usize;
        self.issued[k] = true;
        self.outstanding += 1;
        self.touched
            .push(self.engine_of[self.ops[k].stream.index()]);
        if blocking {
            self.host_state = HostState::WaitingOp(k as u32);
            self.host_event = (f64::INFINITY, u64::MAX);
        } else if let Some(h) = host.as_mut() {
            self.begin_issue(h, k + 1);
        }
    }

    /// Applies event `at` at `now`: returns the op that ends now, unless it only freed its
    /// engine (its completion is then pending).
    #[inline]
    fn end_event(&mut self, at: Event) -> Option<u32> {
        match at {
            Event::Engine(pick) => {
                let op = self.running[pick];
                self.running[pick] = NONE;
                self.event[pick] = (f64::INFINITY, u64::MAX);
                self.touched.push(pick as u32);
                let s = self.ops[op as usize].stream.index();
                self.head[s] = self.schedule.next_in_stream(OpId(op)).map_or(NONE, |o| o.0);
                self.cursor[s] = 0;
                let end = self.spans[op as usize].end;
                if end > self.now {
                    self.completions.push((end, self.seq, op));
                    self.seq += 1;
                    None
                } else {
                    Some(op)
                }
            }
            Event::Completion(j) => Some(self.completions.swap_remove(j).2),
        }
    }

    /// `op` has ended at `now`: the streams waiting for it may go on, and a host waiting for it
    /// (or for every issued op) issues its next op.
    #[inline]
    fn op_ended<H: FnMut(usize) -> HostIssue>(&mut self, op: u32, host: &mut Option<H>) {
        for (t, b) in self.blocked_on.iter_mut().enumerate() {
            if *b == op {
                *b = NONE;
                self.touched.push(self.engine_of[t]);
            }
        }
        if let Some(h) = host.as_mut() {
            self.outstanding -= 1;
            let wake = match self.host_state {
                HostState::WaitingOp(k) if k == op => {
                    self.host_spans[k as usize].end = self.now;
                    Some(k as usize + 1)
                }
                // The synchronisation's wait is over: it is paid now, then `k` is issued.
                HostState::WaitingAll(k) if self.outstanding == 0 => Some(k as usize),
                _ => None,
            };
            if let Some(k) = wake {
                self.begin_issue(h, k);
            }
        }
    }

    /// The spans of the ops and of the host, once no event is left: an error if an op never
    /// started.
    fn finish(self) -> Result<(Vec<Span>, Vec<Span>), Error> {
        let n = self.ops.len();
        if self.started != n {
            return Err(Error::Stalled {
                remaining: n - self.started,
            });
        }
        Ok((self.spans, self.host_spans))
    }
}

fn run_core<H: FnMut(usize) -> HostIssue>(
    schedule: &Schedule,
    engines: &EngineMap,
    mut timing: impl FnMut(usize) -> (f64, f64),
    mut host: Option<H>,
) -> Result<(Vec<Span>, Vec<Span>), Error> {
    let n_engines = engine_count(schedule, engines)?;
    let mut run = Run::new(schedule, engines, n_engines, host.is_some());
    if let Some(h) = host.as_mut() {
        run.begin_issue(h, 0);
    }
    loop {
        run.start_ready_ops(&mut timing);
        // The next event: the smallest (time, sequence) over the engines (an op's occupancy
        // ends), the pending completions (an op that freed its engine early ends) and the
        // host; the sequence is the order the events were created in. If it is the host's
        // issue, the engines choose right after it, before other events at that instant
        // (tests/mutants.rs pins it); otherwise every op event at that instant is applied
        // before any engine chooses again.
        let mut next = next_event(&run.event, &run.completions, f64::INFINITY);
        let best = next.map_or((f64::INFINITY, u64::MAX), |(_, ev)| ev);
        let host_event = run.host_event;
        if host_event.0 < best.0 || (host_event.0 == best.0 && host_event.1 < best.1) {
            run.end_issue(&mut host);
            continue;
        }
        if next.is_none() {
            break;
        }
        run.now = best.0;
        while let Some((at, _)) = next {
            if let Some(op) = run.end_event(at) {
                run.op_ended(op, &mut host);
            }
            // Another event at the same instant (rare: zero-length ops, exact ties)?
            let now = run.now;
            next = next_event(&run.event, &run.completions, now).filter(|(_, ev)| ev.0 == now);
        }
    }
    run.finish()
}

/// Closed-form start times when every stream has its own engine: in submission order,
/// `start(i) = max(end of the previous op on i's stream, end of each dependency)`. The engine
/// must agree with this on such schedules (tested); it is the simulator's reference model.
pub fn reference_spans(schedule: &Schedule, durations: &[f64]) -> Vec<Span> {
    let mut stream_end = vec![0.0f64; schedule.streams().len()];
    let mut spans: Vec<Span> = Vec::with_capacity(schedule.len());
    for (i, op) in schedule.ops().iter().enumerate() {
        let s = op.stream.index();
        let mut start = stream_end[s];
        for d in schedule.deps(OpId(i as u32)) {
            start = start.max(spans[d.index()].end);
        }
        let end = start + durations[i];
        stream_end[s] = end;
        spans.push(Span { start, end });
    }
    spans
}
