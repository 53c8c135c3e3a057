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
//! Determinism: events are ordered by (time, insertion sequence); all completions at one instant
//! are applied before any engine picks its next op; an engine with several ready streams takes
//! the op submitted first. Same schedule and cost model give the same timeline, bit for bit.

use kvplan_vocab::CostModel;
use kvplan_vocab::hardware::Duplex;
use kvplan_vocab::host::{HostIssue, HostProfile};
use kvplan_vocab::schedule::Phase;
use kvplan_vocab::schedule::{OpId, Schedule, StreamId, StreamKind};
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
    let duration = |i: usize| cost.duration(&ops[i].kind);
    let (spans, host) = match cost.host() {
        None => (run_with(schedule, &engines, duration)?, Vec::new()),
        Some(h) => run_hosted(schedule, &engines, duration, host_issue(schedule, h))?,
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
    run_core(schedule, engines, duration, None::<fn(usize) -> HostIssue>).map(|(s, _)| s)
}

/// [`run_with`] with the host thread: `host(op index)` gives what issuing each op costs it
/// (see the module docs). Returns the ops' spans and the host's span on each op.
pub fn run_hosted(
    schedule: &Schedule,
    engines: &EngineMap,
    duration: impl FnMut(usize) -> f64,
    host: impl FnMut(usize) -> HostIssue,
) -> Result<(Vec<Span>, Vec<Span>), Error> {
    run_core(schedule, engines, duration, Some(host))
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

fn run_core<H: FnMut(usize) -> HostIssue>(
    schedule: &Schedule,
    engines: &EngineMap,
    mut duration: impl FnMut(usize) -> f64,
    mut host: Option<H>,
) -> Result<(Vec<Span>, Vec<Span>), Error> {
    let ops = schedule.ops();
    let n = ops.len();
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
    let n_engines = engines
        .engine_of
        .iter()
        .map(|&e| e as usize + 1)
        .max()
        .unwrap_or(0);

    // head[s]: the op at the front of stream s.
    let mut head: Vec<u32> = (0..n_streams)
        .map(|s| {
            schedule
                .first_in_stream(StreamId(s as u16))
                .map_or(NONE, |o| o.0)
        })
        .collect();
    // blocked_on[s]: an unfinished dependency of head[s]; cursor[s]: deps before it are done.
    let mut blocked_on = vec![NONE; n_streams];
    let mut cursor = vec![0usize; n_streams];
    let mut engine_streams: Vec<Vec<u32>> = vec![Vec::new(); n_engines];
    for (s, &e) in engines.engine_of.iter().enumerate() {
        engine_streams[e as usize].push(s as u32);
    }
    // The pending event of each engine: its running op and (end time, start sequence). An engine
    // runs one op at a time, so the event set is one slot per engine; the next event is the
    // smallest (end, sequence) — the order a priority queue keyed that way would give.
    let mut running = vec![NONE; n_engines];
    let mut event: Vec<(f64, u64)> = vec![(f64::INFINITY, u64::MAX); n_engines];
    let mut spans = vec![
        Span {
            start: f64::INFINITY,
            end: f64::INFINITY,
        };
        n
    ];
    let mut seq = 0u64;
    let mut started = 0usize;
    let mut touched: Vec<u32> = (0..n_engines as u32).collect();
    let mut now = 0.0f64;
    // The host thread: issued[i] once op i has been issued (all at once without a host model).
    let hosted = host.is_some();
    let mut issued = vec![!hosted; if hosted { n } else { 0 }];
    let mut host_spans = vec![
        Span {
            start: f64::INFINITY,
            end: f64::INFINITY,
        };
        if hosted { n } else { 0 }
    ];
    let mut host_state = HostState::Done;
    let mut host_event = (f64::INFINITY, u64::MAX);
    // Ops issued and not yet finished (what a synchronisation waits for).
    let mut outstanding = 0usize;
    if let Some(h) = host.as_mut() {
        (host_state, host_event) = begin_issue(h, n, 0, 0.0, 0, &mut seq, &mut host_spans);
    }
    loop {
        // Let every touched engine pick its next op at `now`.
        if touched.len() > 1 {
            touched.sort_unstable();
            touched.dedup();
        }
        for &e in &touched {
            let e = e as usize;
            if running[e] != NONE {
                continue;
            }
            let mut best = NONE;
            for &s in &engine_streams[e] {
                let s = s as usize;
                let h = head[s];
                if h == NONE || blocked_on[s] != NONE {
                    continue;
                }
                // Not issued yet: the host touches this engine when it issues the op.
                if hosted && !issued[h as usize] {
                    continue;
                }
                // Ready when every dependency has finished by `now` (unstarted ops end at +inf).
                let deps = schedule.deps(OpId(h));
                let mut c = cursor[s];
                while c < deps.len() && spans[deps[c].index()].end <= now {
                    c += 1;
                }
                cursor[s] = c;
                if c < deps.len() {
                    blocked_on[s] = deps[c].0;
                } else if h < best {
                    best = h;
                }
            }
            if best != NONE {
                let end = now + duration(best as usize);
                spans[best as usize] = Span { start: now, end };
                running[e] = best;
                event[e] = (end, seq);
                seq += 1;
                started += 1;
            }
        }
        touched.clear();
        // The next event: the smallest (end, start sequence). All completions at that instant
        // are applied before any engine picks again.
        let mut pick = usize::MAX;
        let mut best = (f64::INFINITY, u64::MAX);
        for (e, &ev) in event.iter().enumerate() {
            if ev.0 < best.0 || (ev.0 == best.0 && ev.1 < best.1) {
                best = ev;
                pick = e;
            }
        }
        // The host's issue ends first: the op is issued, its engine may take it.
        if host_event.0 < best.0 || (host_event.0 == best.0 && host_event.1 < best.1) {
            now = host_event.0;
            let HostState::Issuing(k, blocking) = host_state else {
                unreachable!("a host event while issuing")
            };
            let k = k as usize;
            issued[k] = true;
            outstanding += 1;
            touched.push(engines.engine_of[ops[k].stream.index()]);
            if blocking {
                host_state = HostState::WaitingOp(k as u32);
                host_event = (f64::INFINITY, u64::MAX);
            } else if let Some(h) = host.as_mut() {
                (host_state, host_event) =
                    begin_issue(h, n, k + 1, now, outstanding, &mut seq, &mut host_spans);
            }
            continue;
        }
        if pick == usize::MAX {
            break;
        }
        now = best.0;
        loop {
            let op = running[pick];
            running[pick] = NONE;
            event[pick] = (f64::INFINITY, u64::MAX);
            touched.push(pick as u32);
            let s = ops[op as usize].stream.index();
            head[s] = schedule.next_in_stream(OpId(op)).map_or(NONE, |o| o.0);
            cursor[s] = 0;
            for (t, b) in blocked_on.iter_mut().enumerate() {
                if *b == op {
                    *b = NONE;
                    touched.push(engines.engine_of[t]);
                }
            }
            if let Some(h) = host.as_mut() {
                outstanding -= 1;
                let next = match host_state {
                    HostState::WaitingOp(k) if k == op => {
                        host_spans[k as usize].end = now;
                        Some(k as usize + 1)
                    }
                    // The synchronisation's wait is over: it is paid now, then `k` is issued.
                    HostState::WaitingAll(k) if outstanding == 0 => Some(k as usize),
                    _ => None,
                };
                if let Some(k) = next {
                    (host_state, host_event) =
                        begin_issue(h, n, k, now, outstanding, &mut seq, &mut host_spans);
                }
            }
            // Another op ending at the same instant (rare: zero-length ops, exact ties)?
            pick = usize::MAX;
            let mut pick_seq = u64::MAX;
            for (e, &(t, q)) in event.iter().enumerate() {
                if t == now && q < pick_seq {
                    pick = e;
                    pick_seq = q;
                }
            }
            if pick == usize::MAX {
                break;
            }
        }
    }
    if started != n {
        return Err(Error::Stalled {
            remaining: n - started,
        });
    }
    Ok((spans, host_spans))
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
