//! The simulated server loop: vLLM's engine-core busy loop as one host thread and one GPU stream.
//!
//! Each pass of the loop (`EngineCore.run_busy_loop`, `vllm/v1/engine/core.py`): take the
//! requests that have reached the engine, schedule a step with the policy, spend the host time
//! to prepare and launch it (the GPU starts it when both the launch and the previous step are
//! done), then — synchronously, or with asynchronous scheduling only once two steps are in
//! flight (`step_with_batch_queue`, queue depth 2) — wait for the oldest step's output and
//! process it: tokens are emitted at that moment, finished requests free their blocks. With
//! asynchronous scheduling the host schedules step `k + 1` while the GPU runs step `k`, so a
//! step's period is `max(GPU, host)`, and a request that arrives during step `k` is first
//! scheduled after step `k`'s output is processed.
//!
//! The loop only advances time; the scheduling rules live in [`crate::sched`], the step's time
//! in [`crate::iteration`], the blocks in [`crate::kv_cache`].

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec, Progress, Silent};
use kvplan_workloads::{Request, RequestStream};

use crate::Error;
use crate::config::{Config, Preemption, Resolved};
use crate::iteration::{EngineCosts, IterationTimer};
use crate::output::{IterationRecord, RequestRecord, ServeReport, Status, SummaryAcc};
use crate::sched::{Place, Policy, State, Step, Window, v0, v1};

/// The policy of a scheduler kind.
fn policy(kind: crate::SchedulerKind) -> Box<dyn Policy> {
    match kind {
        crate::SchedulerKind::VllmV1 => Box::new(v1::V1),
        crate::SchedulerKind::PrefillFirst => Box::new(v0::PrefillFirst),
        crate::SchedulerKind::Mixed => Box::new(v0::Mixed),
        crate::SchedulerKind::Chunked => Box::new(v0::Chunked),
    }
}

/// Runs `requests` (sorted by arrival) through the serving engine.
pub fn simulate(
    model: &ModelSpec,
    hw: &HardwareProfile,
    config: &Config,
    requests: &[Request],
) -> Result<ServeReport, Error> {
    let (timer, resolved) = prepare(model, hw, config)?;
    simulate_with(timer, resolved, hw.serving.frontend_us * 1e-6, requests)
}

/// The iteration timer and resolved settings of `config` for `model` on `hw`.
pub(crate) fn prepare(
    model: &ModelSpec,
    hw: &HardwareProfile,
    config: &Config,
) -> Result<(IterationTimer, Resolved), Error> {
    let resolved = config.validate(model, hw)?;
    let model = &config.apply(model);
    let cost = match config.implementation {
        Some(i) => CostModel::new(hw).with_host(i.profile_on(hw)),
        None => CostModel::new(hw),
    };
    let timer = IterationTimer::new(
        model,
        &cost,
        config.block_size,
        resolved.copies_per_block,
        config.pinned,
    )
    .with_engine(EngineCosts {
        cudagraph_sizes: resolved.cudagraph_sizes.clone(),
        full_graph_max_seqs: resolved.max_num_seqs,
        serving: hw.serving.clone(),
    });
    Ok((timer, resolved))
}

/// [`simulate`] with a prepared timer, resolved settings and the frontend latency (seconds
/// between a client's send and the engine seeing the request).
pub fn simulate_with(
    timer: IterationTimer,
    resolved: Resolved,
    frontend_s: f64,
    requests: &[Request],
) -> Result<ServeReport, Error> {
    check_arrivals(requests)?;
    let closed = ClosedLoop::of(requests);
    run_engine(
        timer,
        resolved,
        frontend_s,
        requests.iter().cloned(),
        requests.len() as u64,
        closed,
        &Silent,
    )
}

/// [`simulate_with`] on a stream of requests drawn as the engine takes them: memory follows
/// the requests in flight (and the records [`Config::record_requests`] keeps), not the
/// request count. `progress` hears how many requests have been served. A closed-loop stream
/// (some request follows another) holds its requests already and runs as [`simulate_with`].
pub fn simulate_stream(
    timer: IterationTimer,
    resolved: Resolved,
    frontend_s: f64,
    requests: RequestStream,
    progress: &dyn Progress,
) -> Result<ServeReport, Error> {
    let n = requests.len();
    if resolved.config.record_requests && n > crate::MAX_RECORDED_REQUESTS {
        return Err(Error::TooManyRecords {
            requests: n,
            max: crate::MAX_RECORDED_REQUESTS,
        });
    }
    if requests.closed_loop() {
        let held = match requests.into_held() {
            Ok(v) => v,
            Err(_) => unreachable!("a closed-loop stream holds its requests"),
        };
        check_arrivals(&held)?;
        let closed = ClosedLoop::of(&held);
        return run_engine(
            timer,
            resolved,
            frontend_s,
            held.into_iter(),
            n,
            closed,
            progress,
        );
    }
    run_engine(timer, resolved, frontend_s, requests, n, None, progress)
}

/// Requests sorted by arrival, arrivals finite and non-negative.
fn check_arrivals(requests: &[Request]) -> Result<(), Error> {
    for (i, w) in requests.windows(2).enumerate() {
        if w[1].arrival_s.total_cmp(&w[0].arrival_s) == Ordering::Less {
            return Err(Error::UnsortedRequests { index: i + 1 });
        }
    }
    if let Some(i) = requests
        .iter()
        .position(|r| !r.arrival_s.is_finite() || r.arrival_s < 0.0)
    {
        return Err(Error::BadArrival { index: i });
    }
    Ok(())
}

/// Closed-loop bookkeeping, for inputs where some request follows another.
struct ClosedLoop {
    /// Request id to index.
    index_of: std::collections::HashMap<u64, usize>,
    /// Requests waiting for each request to end.
    followers: Vec<Vec<usize>>,
    /// When each request ended: finished or rejected (NaN: not yet).
    ended: Vec<f64>,
}

impl ClosedLoop {
    fn of(requests: &[Request]) -> Option<ClosedLoop> {
        requests
            .iter()
            .any(|r| r.follows.is_some())
            .then(|| ClosedLoop {
                index_of: requests
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (r.id, i))
                    .collect(),
                followers: vec![Vec::new(); requests.len()],
                ended: vec![f64::NAN; requests.len()],
            })
    }
}

/// Requests served between two progress reports.
const PROGRESS_EVERY: u64 = 4096;

fn run_engine<I: Iterator<Item = Request>>(
    timer: IterationTimer,
    resolved: Resolved,
    frontend_s: f64,
    input: I,
    total: u64,
    closed: Option<ClosedLoop>,
    progress: &dyn Progress,
) -> Result<ServeReport, Error> {
    let mut st = State::new(&resolved);
    if resolved.config.preemption == Preemption::Hybrid {
        st.hybrid = Some(timer.clone());
        st.act_block_bytes = u64::from(resolved.config.block_size)
            * timer.model().act_bytes_per_token_layer()
            * u64::from(timer.model().num_layers);
    }
    let records = if resolved.config.record_requests {
        let mut v = Vec::new();
        // Held to the end: reserved whole, so the run fails now rather than after hours.
        usize::try_from(total)
            .ok()
            .and_then(|n| v.try_reserve_exact(n).ok())
            .ok_or(Error::OutOfMemory {
                what: "one record per request",
                bytes: total.saturating_mul(std::mem::size_of::<RequestRecord>() as u64),
            })?;
        Some(v)
    } else {
        None
    };
    progress.start(total, "requests served");
    let (index_of, followers, ended) = match closed {
        Some(c) => (c.index_of, c.followers, c.ended),
        None => Default::default(),
    };
    let mut e = Server {
        timer,
        policy: policy(resolved.config.scheduler),
        st,
        frontend_s: frontend_s.max(0.0),
        series: Vec::new(),
        compute_s: 0.0,
        iterations: 0,
        input,
        peeked: None,
        last_arrival: 0.0,
        now: 0.0,
        sent: Window::default(),
        index_of,
        followers,
        released: BinaryHeap::new(),
        ended,
        acc: SummaryAcc::default(),
        records,
        retired: 0,
        progress,
    };
    e.pull()?;
    e.run()?;
    e.finish()
}

struct InFlight {
    step: Step,
    gpu_end: f64,
    cpu_after: f64,
}

/// A closed-loop request released at `time` (engine time), ordered earliest first, then by
/// index.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Release {
    time: f64,
    index: usize,
}

impl Eq for Release {}
impl PartialOrd for Release {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Release {
    /// Reversed: the std max-heap pops the earliest first.
    fn cmp(&self, o: &Self) -> Ordering {
        o.time
            .total_cmp(&self.time)
            .then_with(|| o.index.cmp(&self.index))
    }
}

struct Server<'a, I> {
    timer: IterationTimer,
    policy: Box<dyn Policy>,
    st: State<'a>,
    frontend_s: f64,
    series: Vec<IterationRecord>,
    compute_s: f64,
    iterations: u64,
    /// The requests not yet taken.
    input: I,
    /// The next request of the input, drawn ahead to know when it arrives.
    peeked: Option<Request>,
    /// The latest arrival drawn.
    last_arrival: f64,
    /// The host thread's clock.
    now: f64,
    /// When each request in the engine's window was sent (its arrival, or a closed-loop
    /// follower's release).
    sent: Window<f64>,
    /// Request id to index (closed loop only).
    index_of: std::collections::HashMap<u64, usize>,
    /// Requests waiting for each request to end (closed loop only).
    followers: Vec<Vec<usize>>,
    /// Followers released, by engine time.
    released: BinaryHeap<Release>,
    /// When each request ended: finished or rejected (closed loop only; NaN: not yet).
    ended: Vec<f64>,
    /// The summary, built as requests retire.
    acc: SummaryAcc,
    /// One record per request, in input order (when kept).
    records: Option<Vec<RequestRecord>>,
    /// Requests retired.
    retired: u64,
    progress: &'a dyn Progress,
}

impl<I: Iterator<Item = Request>> Server<'_, I> {
    /// Draws the next request of the input into `peeked`, checking its arrival time.
    fn pull(&mut self) -> Result<(), Error> {
        self.peeked = self.input.next();
        if let Some(q) = &self.peeked {
            let index = self.st.reqs.end();
            if !q.arrival_s.is_finite() || q.arrival_s < 0.0 {
                return Err(Error::BadArrival { index });
            }
            if index > 0 && q.arrival_s.total_cmp(&self.last_arrival) == Ordering::Less {
                return Err(Error::UnsortedRequests { index });
            }
            self.last_arrival = q.arrival_s;
        }
        Ok(())
    }

    /// When the next request of the input (not a waiting follower) reaches the engine.
    fn engine_arrival(&self) -> Option<f64> {
        self.peeked.as_ref().map(|q| q.arrival_s + self.frontend_s)
    }

    /// The next time something reaches the engine, if anything will.
    fn next_event(&self) -> Option<f64> {
        let stream = self.engine_arrival();
        let released = self.released.peek().map(|r| r.time);
        match (stream, released) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Moves every request that has reached the engine by now into the waiting queue (or
    /// rejects it). A closed-loop follower whose predecessor has not ended waits for it.
    fn take_arrivals(&mut self) -> Result<(), Error> {
        loop {
            let stream = self.engine_arrival().filter(|&t| t <= self.now);
            let released = self
                .released
                .peek()
                .map(|r| r.time)
                .filter(|&t| t <= self.now);
            match (stream, released) {
                (None, None) => break,
                (Some(a), Some(b)) if b < a => self.admit_released(),
                (None, Some(_)) => self.admit_released(),
                (Some(_), _) => self.take_from_stream()?,
            }
        }
        Ok(())
    }

    /// Admits the earliest released follower.
    fn admit_released(&mut self) {
        let r = self.released.pop().expect("a released request");
        self.admit(r.index);
    }

    /// The next request of the arrival stream: admitted, or (a follower) released later.
    fn take_from_stream(&mut self) -> Result<(), Error> {
        let q = self.peeked.take().expect("a request drawn");
        let i = self.st.reqs.end();
        let oom = |_| Error::OutOfMemory {
            what: "the requests in flight",
            bytes: std::mem::size_of::<Request>() as u64,
        };
        self.sent.push(q.arrival_s).map_err(oom)?;
        self.st.push(q).map_err(oom)?;
        self.pull()?;
        if let Some(f) = self.st.reqs[i].follows
            && let Some(&p) = self.index_of.get(&f.request)
            && p != i
        {
            if self.ended[p].is_nan() {
                self.followers[p].push(i);
                return Ok(());
            }
            let t = (self.ended[p] + f.think_s).max(self.st.reqs[i].arrival_s);
            self.sent[i] = t;
            if t + self.frontend_s > self.now {
                self.released.push(Release {
                    time: t + self.frontend_s,
                    index: i,
                });
                return Ok(());
            }
        }
        self.admit(i);
        Ok(())
    }

    fn admit(&mut self, i: usize) {
        self.st.arrive(i);
        if self.st.seqs[i].place == Place::Done {
            // Rejected: it ends now.
            self.ended_at(i, self.sent[i]);
        }
    }

    /// Request `i` ended at client time `t`: release the followers waiting for it.
    fn ended_at(&mut self, i: usize, t: f64) {
        if self.ended.is_empty() {
            return;
        }
        self.ended[i] = t;
        for f in std::mem::take(&mut self.followers[i]) {
            let think = self.st.reqs[f].follows.map_or(0.0, |x| x.think_s);
            let send = (t + think).max(self.st.reqs[f].arrival_s);
            self.sent[f] = send;
            self.released.push(Release {
                time: send + self.frontend_s,
                index: f,
            });
        }
    }

    fn run(&mut self) -> Result<(), Error> {
        let depth = if self.st.r.async_scheduling { 2 } else { 1 };
        let mut inflight: VecDeque<InFlight> = VecDeque::new();
        let mut spare: Vec<Step> = Vec::new();
        let mut gpu_free = 0.0f64;
        loop {
            self.take_arrivals()?;
            self.retire()?;
            if self.st.has_work() {
                let mut step = spare.pop().unwrap_or_default();
                step.clear();
                self.policy.schedule(&mut self.st, &mut step, self.now);
                if step.is_empty() {
                    spare.push(step);
                } else {
                    let t = self.timer.time(&step.shape);
                    let launch_at = self.now + t.cpu_before_s;
                    let start = launch_at.max(gpu_free);
                    let end = (start + t.total_s).max(launch_at + t.cpu_launch_s);
                    gpu_free = end;
                    self.now = launch_at + t.cpu_launch_s;
                    self.compute_s += t.compute_s;
                    self.iterations += 1;
                    if self.st.r.config.record_timeseries {
                        self.record(&step, start, end - start)?;
                    }
                    inflight.push_back(InFlight {
                        step,
                        gpu_end: end,
                        cpu_after: t.cpu_after_s,
                    });
                    // Asynchronous scheduling: schedule the next step before waiting, while
                    // fewer than two are in flight and the oldest is still running.
                    if inflight.len() < depth
                        && inflight.front().is_some_and(|f| f.gpu_end > self.now)
                    {
                        continue;
                    }
                }
            }
            match inflight.pop_front() {
                Some(f) => {
                    self.now = self.now.max(f.gpu_end) + f.cpu_after;
                    self.st.complete(&f.step, self.now);
                    if !self.ended.is_empty() {
                        for k in 0..self.st.just_finished.len() {
                            let v = self.st.just_finished[k];
                            // The client sees the last token a frontend hop later.
                            self.ended_at(v, self.now);
                        }
                    }
                    spare.push(f.step);
                    self.retire()?;
                }
                None if self.st.has_work() => {
                    return Err(Error::Stalled {
                        time_s: self.now,
                        waiting: self.st.waiting.len(),
                        swapped: self.st.swapped.len(),
                    });
                }
                None => match self.next_event() {
                    Some(t) => self.now = self.now.max(t),
                    None => break,
                },
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

    /// Retires the oldest requests while they are done: their records to the summary (and
    /// the kept records), their state dropped.
    fn retire(&mut self) -> Result<(), Error> {
        while let Some((q, s, status)) = self.st.retire() {
            self.emit(q, s, status)?;
        }
        Ok(())
    }

    fn emit(&mut self, q: Request, s: crate::sched::Seq, status: Status) -> Result<(), Error> {
        let sent = self.sent.pop_front().expect("a send time per request");
        let done = status == Status::Finished && s.place == Place::Done;
        let nan = f64::NAN;
        let (queue, ttft, e2e) = if done {
            (
                s.first_sched - (sent + self.frontend_s),
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
        let record = RequestRecord {
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
        };
        self.acc.add(&record)?;
        if let Some(v) = &mut self.records {
            v.try_reserve(1).map_err(|_| Error::OutOfMemory {
                what: "one record per request",
                bytes: std::mem::size_of::<RequestRecord>() as u64,
            })?;
            v.push(record);
        }
        self.retired += 1;
        if self.retired.is_multiple_of(PROGRESS_EVERY) {
            self.progress.set(self.retired);
        }
        Ok(())
    }

    fn finish(mut self) -> Result<ServeReport, Error> {
        // Anything left (nothing, after a run that ends normally) in input order.
        while let Some((q, s, status)) = self.st.retire_any() {
            self.emit(q, s, status)?;
        }
        self.progress.set(self.retired);
        let st = self.st;
        let summary = self.acc.finish(
            self.now,
            self.compute_s,
            self.iterations,
            &st.counters,
            st.kv.stats(),
            st.r,
        )?;
        Ok(ServeReport {
            requests: self.records.unwrap_or_default(),
            summary,
            iterations: self.series,
        })
    }
}
