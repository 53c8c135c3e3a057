//! The engine loop: vLLM's engine-core busy loop as one host thread and one GPU stream.
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
use std::collections::VecDeque;

use kvplan_planner::{CostModel, HardwareProfile, ModelSpec};
use kvplan_workloads::Request;

use crate::Error;
use crate::config::{Config, Preemption, Resolved};
use crate::iteration::{EngineCosts, IterationTimer};
use crate::output::{IterationRecord, Output, RequestRecord, Status, Summary};
use crate::sched::{Place, State, Step, policy};

/// Runs `requests` (sorted by arrival) through the serving engine.
pub fn simulate(
    model: &ModelSpec,
    hw: &HardwareProfile,
    config: &Config,
    requests: &[Request],
) -> Result<Output, Error> {
    let resolved = config.validate(model, hw)?;
    let cost = CostModel::new(hw);
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
    simulate_with(timer, resolved, hw.serving.frontend_us * 1e-6, requests)
}

/// [`simulate`] with a prepared timer, resolved settings and the frontend latency (seconds
/// between a client's send and the engine seeing the request).
pub fn simulate_with(
    timer: IterationTimer,
    resolved: Resolved,
    frontend_s: f64,
    requests: &[Request],
) -> Result<Output, Error> {
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
    let mut st = State::new(&resolved, requests);
    if resolved.config.preemption == Preemption::Hybrid {
        st.hybrid = Some(timer.clone());
        st.act_block_bytes = u64::from(resolved.config.block_size)
            * timer.model().act_bytes_per_token_layer()
            * u64::from(timer.model().num_layers);
    }
    let mut e = Engine {
        timer,
        policy: policy(resolved.config.scheduler),
        st,
        frontend_s: frontend_s.max(0.0),
        series: Vec::new(),
        compute_s: 0.0,
        iterations: 0,
        next_arrival: 0,
        now: 0.0,
    };
    e.run()?;
    Ok(e.finish())
}

struct InFlight {
    step: Step,
    gpu_end: f64,
    cpu_after: f64,
}

struct Engine<'a> {
    timer: IterationTimer,
    policy: Box<dyn crate::sched::Policy>,
    st: State<'a>,
    frontend_s: f64,
    series: Vec<IterationRecord>,
    compute_s: f64,
    iterations: u64,
    next_arrival: usize,
    /// The host thread's clock.
    now: f64,
}

impl Engine<'_> {
    /// When request `i` reaches the engine.
    fn engine_arrival(&self, i: usize) -> f64 {
        self.st.reqs[i].arrival_s + self.frontend_s
    }

    /// Moves every request that has reached the engine by now into the waiting queue (or
    /// rejects it).
    fn take_arrivals(&mut self) {
        while self.next_arrival < self.st.reqs.len()
            && self.engine_arrival(self.next_arrival) <= self.now
        {
            self.st.arrive(self.next_arrival);
            self.next_arrival += 1;
        }
    }

    fn run(&mut self) -> Result<(), Error> {
        let depth = if self.st.r.async_scheduling { 2 } else { 1 };
        let mut inflight: VecDeque<InFlight> = VecDeque::new();
        let mut spare: Vec<Step> = Vec::new();
        let mut gpu_free = 0.0f64;
        loop {
            self.take_arrivals();
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
                        self.record(&step, start, end - start);
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
                    spare.push(f.step);
                }
                None if self.st.has_work() => {
                    return Err(Error::Stalled {
                        time_s: self.now,
                        waiting: self.st.waiting.len(),
                        swapped: self.st.swapped.len(),
                    });
                }
                None => {
                    if self.next_arrival >= self.st.reqs.len() {
                        break;
                    }
                    self.now = self.now.max(self.engine_arrival(self.next_arrival));
                }
            }
        }
        Ok(())
    }

    fn record(&mut self, step: &Step, start: f64, duration: f64) {
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
    }

    fn finish(self) -> Output {
        let st = self.st;
        let mut records = Vec::with_capacity(st.seqs.len());
        for (i, (s, q)) in st.seqs.iter().zip(st.reqs).enumerate() {
            let status = st.status[i];
            let done = status == Status::Finished && s.place == Place::Done;
            let nan = f64::NAN;
            let (queue, ttft, e2e) = if done {
                (
                    s.first_sched - (q.arrival_s + self.frontend_s),
                    s.first_token - q.arrival_s,
                    s.finish - q.arrival_s,
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
            records.push(RequestRecord {
                id: q.id,
                arrival_s: q.arrival_s,
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
            });
        }
        let summary = Summary::new(
            &records,
            self.now,
            self.compute_s,
            self.iterations,
            &st.counters,
            st.kv.stats(),
            st.r,
        );
        Output {
            requests: records,
            summary,
            iterations: self.series,
        }
    }
}
