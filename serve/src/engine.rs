//! The event loop: arrivals and iteration ends on a heap ordered by (time, sequence number);
//! at each iteration end the scheduler forms the next batch.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use kvplan_planner::{CostModel, HardwareProfile, ModelSpec};
use kvplan_workloads::Request;

use crate::Error;
use crate::config::{Config, Preemption, Resolved, SchedulerKind};
use crate::iteration::{HybridResume, IterationShape, IterationTimer};
use crate::output::{IterationRecord, Output, RejectReason, RequestRecord, Status, Summary};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Arrival(usize),
    IterationEnd,
}

#[derive(Debug, Clone, Copy)]
struct Event {
    time: f64,
    seq: u64,
    kind: Kind,
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    /// Reversed so the std max-heap pops the earliest (time, seq) first.
    fn cmp(&self, o: &Self) -> Ordering {
        o.time
            .total_cmp(&self.time)
            .then_with(|| o.seq.cmp(&self.seq))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    Pending,
    Waiting,
    Running,
    Swapped,
    Done,
}

#[derive(Debug, Clone)]
struct Seq {
    prompt: u32,
    output: u32,
    arrival: f64,
    /// Tokens with KV in the cache.
    computed: u32,
    generated: u32,
    blocks: u32,
    /// Host bytes held while swapped (KV and activations).
    host_bytes: u64,
    /// Activation blocks stored on host (hybrid).
    act_blocks: u32,
    place: Where,
    chunk: u32,
    first_sched: f64,
    first_token: f64,
    finish: f64,
    preemptions: u32,
    swapped_tokens: u64,
    recomputed_tokens: u64,
}

impl Seq {
    fn len(&self) -> u32 {
        self.prompt + self.generated
    }
    fn pending(&self) -> u32 {
        self.len() - self.computed
    }
}

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
    );
    simulate_with(timer, resolved, requests)
}

/// [`simulate`] with a prepared timer and resolved settings.
pub fn simulate_with(
    timer: IterationTimer,
    resolved: Resolved,
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
    let mut e = Engine::new(timer, resolved, requests);
    e.run()?;
    Ok(e.finish())
}

struct Engine<'a> {
    timer: IterationTimer,
    r: Resolved,
    reqs: &'a [Request],
    seqs: Vec<Seq>,
    status: Vec<Status>,
    heap: BinaryHeap<Event>,
    next_seq: u64,
    next_arrival: usize,
    waiting: VecDeque<usize>,
    running: Vec<usize>,
    kept: Vec<usize>,
    swapped: VecDeque<usize>,
    free_blocks: u32,
    host_used: u64,
    busy: bool,
    shape: IterationShape,
    batch: Vec<usize>,
    series: Vec<IterationRecord>,
    now: f64,
    compute_s: f64,
    iterations: u64,
    preemptions: u64,
    swap_out_bytes: u64,
    swap_in_bytes: u64,
    kv_token_bytes: u64,
}

impl<'a> Engine<'a> {
    fn new(timer: IterationTimer, r: Resolved, reqs: &'a [Request]) -> Self {
        let kv_token_bytes = timer.model().kv_bytes_per_token();
        Engine {
            free_blocks: r.gpu_blocks,
            timer,
            r,
            reqs,
            seqs: reqs
                .iter()
                .map(|q| Seq {
                    prompt: q.prompt_tokens,
                    output: q.output_tokens,
                    arrival: q.arrival_s,
                    computed: 0,
                    generated: 0,
                    blocks: 0,
                    host_bytes: 0,
                    act_blocks: 0,
                    place: Where::Pending,
                    chunk: 0,
                    first_sched: f64::NAN,
                    first_token: f64::NAN,
                    finish: f64::NAN,
                    preemptions: 0,
                    swapped_tokens: 0,
                    recomputed_tokens: 0,
                })
                .collect(),
            status: vec![Status::Finished; reqs.len()],
            heap: BinaryHeap::new(),
            next_seq: 0,
            next_arrival: 0,
            waiting: VecDeque::new(),
            running: Vec::new(),
            kept: Vec::new(),
            swapped: VecDeque::new(),
            host_used: 0,
            busy: false,
            shape: IterationShape::default(),
            batch: Vec::new(),
            series: Vec::new(),
            now: 0.0,
            compute_s: 0.0,
            iterations: 0,
            preemptions: 0,
            swap_out_bytes: 0,
            swap_in_bytes: 0,
            kv_token_bytes,
        }
    }

    fn push(&mut self, time: f64, kind: Kind) {
        self.heap.push(Event {
            time,
            seq: self.next_seq,
            kind,
        });
        self.next_seq += 1;
    }

    fn blocks_for(&self, tokens: u32) -> u32 {
        tokens.div_ceil(self.r.config.block_size)
    }

    fn run(&mut self) -> Result<(), Error> {
        if !self.reqs.is_empty() {
            self.push(self.reqs[0].arrival_s, Kind::Arrival(0));
        }
        while let Some(ev) = self.heap.pop() {
            self.now = ev.time;
            match ev.kind {
                Kind::Arrival(i) => {
                    if i < self.next_arrival {
                        continue;
                    }
                    self.take_arrivals();
                }
                Kind::IterationEnd => {
                    self.end_iteration();
                    self.busy = false;
                    self.take_arrivals();
                }
            }
            if !self.busy {
                self.start_iteration()?;
            }
        }
        Ok(())
    }

    /// Moves every request that has arrived by now into the waiting queue (or rejects it), and
    /// schedules the next arrival.
    fn take_arrivals(&mut self) {
        while self.next_arrival < self.reqs.len()
            && self.reqs[self.next_arrival].arrival_s <= self.now
        {
            let i = self.next_arrival;
            self.next_arrival += 1;
            match self.reject_reason(i) {
                Some(reason) => {
                    self.status[i] = Status::Rejected(reason);
                    self.seqs[i].place = Where::Done;
                }
                None => {
                    self.seqs[i].place = Where::Waiting;
                    self.waiting.push_back(i);
                }
            }
        }
        if self.next_arrival < self.reqs.len() {
            let i = self.next_arrival;
            self.push(self.reqs[i].arrival_s, Kind::Arrival(i));
        }
    }

    fn reject_reason(&self, i: usize) -> Option<RejectReason> {
        let s = &self.seqs[i];
        let total = u64::from(s.prompt) + u64::from(s.output);
        if s.prompt == 0 || s.output == 0 {
            return Some(RejectReason::EmptyRequest);
        }
        if total > u64::from(self.timer.model().max_position) {
            return Some(RejectReason::ExceedsContext);
        }
        let total = total as u32;
        if self.blocks_for(total) > self.r.gpu_blocks - self.r.watermark_blocks {
            return Some(RejectReason::ExceedsKvCapacity);
        }
        if self.r.config.scheduler != SchedulerKind::Chunked
            && s.prompt > self.r.max_num_batched_tokens
        {
            return Some(RejectReason::ExceedsBatchTokens);
        }
        None
    }

    /// Frees a victim's GPU blocks: swapped out when host space allows, else dropped for
    /// recomputation. Hybrid stores the layer inputs `X` of the first `l` tokens (hybrid's
    /// split, decided now since it fixes what is stored) and K,V of the rest; with no room for
    /// that it falls back to plain swap, then to recompute.
    fn preempt(&mut self, v: usize) {
        self.preemptions += 1;
        let mode = self.r.config.preemption;
        let block_bytes = self.r.block_bytes;
        let act_block_bytes = self.act_block_bytes();
        let s = &self.seqs[v];
        let blocks = s.blocks;
        let kv_bytes = u64::from(blocks) * block_bytes;
        let free_host = self.r.host_bytes - self.host_used;
        // A sequence whose prompt is still being prefilled (chunked) is recomputed: vLLM swaps
        // only decoding sequences.
        let decoding = s.pending() == 1;
        let hybrid = if mode == Preemption::Hybrid && decoding {
            let h = self.timer.hybrid_split(s.computed);
            let lb = h.act_blocks.min(blocks);
            let bytes = u64::from(blocks - lb) * block_bytes + u64::from(lb) * act_block_bytes;
            (bytes <= free_host).then_some(h)
        } else {
            None
        };
        let swap = match mode {
            Preemption::Recompute => false,
            Preemption::Swap | Preemption::Hybrid => {
                decoding && (hybrid.is_some() || kv_bytes <= free_host)
            }
        };
        self.free_blocks += blocks;
        let s = &mut self.seqs[v];
        s.blocks = 0;
        s.preemptions += 1;
        if swap {
            let h = hybrid.unwrap_or_default();
            let act_blocks = h.act_blocks.min(blocks);
            let kv_blocks = blocks - act_blocks;
            let held = u64::from(kv_blocks) * block_bytes + u64::from(act_blocks) * act_block_bytes;
            s.host_bytes = held;
            s.act_blocks = act_blocks;
            s.place = Where::Swapped;
            s.recomputed_tokens += u64::from(h.recompute_tokens);
            s.swapped_tokens += u64::from(s.computed - h.recompute_tokens);
            self.host_used += held;
            self.swap_out_bytes += held;
            self.shape.swap_out_blocks += kv_blocks;
            self.shape.act_out_blocks += act_blocks;
            self.swapped.push_back(v);
        } else {
            s.recomputed_tokens += u64::from(s.computed);
            s.computed = 0;
            s.place = Where::Waiting;
            self.waiting.push_front(v);
        }
    }

    /// Bytes of one block of stored layer inputs `X` (all layers).
    fn act_block_bytes(&self) -> u64 {
        u64::from(self.r.config.block_size)
            * self.timer.model().act_bytes_per_token_layer()
            * u64::from(self.timer.model().num_layers)
    }

    /// Resumes a swapped sequence: copies its K,V back and, for hybrid, its stored `X`, from
    /// which the first tokens' K,V are recomputed.
    fn swap_in(&mut self, v: usize) {
        let s = &self.seqs[v];
        let blocks = self.blocks_for(s.computed);
        let act_blocks = s.act_blocks.min(blocks);
        let kv_blocks = blocks - act_blocks;
        if act_blocks > 0 {
            self.shape.hybrid.push(HybridResume {
                act_blocks,
                recompute_tokens: (act_blocks * self.r.config.block_size).min(s.computed),
            });
        }
        self.shape.swap_in_blocks += kv_blocks;
        self.swap_in_bytes += s.host_bytes;
        let s = &mut self.seqs[v];
        self.host_used -= s.host_bytes;
        s.host_bytes = 0;
        s.act_blocks = 0;
        s.blocks = blocks;
        s.place = Where::Running;
        self.free_blocks -= blocks;
    }

    /// Schedules `v` for `chunk` tokens, allocating its blocks (caller checked they fit).
    fn schedule(&mut self, v: usize, chunk: u32) {
        let need = self.blocks_for(self.seqs[v].computed + chunk);
        let s = &mut self.seqs[v];
        self.free_blocks -= need - s.blocks;
        s.blocks = need;
        s.chunk = chunk;
        if s.first_sched.is_nan() {
            s.first_sched = self.now;
        }
        let kv = s.computed + chunk;
        if chunk == s.pending() {
            self.shape.logits += 1;
        }
        self.shape.seqs.push((chunk, kv));
        self.batch.push(v);
    }

    /// Running sequences continue (decode, or the next prefill chunk for chunked), preempting
    /// the latest-arrived running sequence when blocks run out. Returns whether any was
    /// preempted and the tokens used.
    fn schedule_running(&mut self, budget: &mut u32) -> bool {
        let mut preempted = false;
        let mut i = 0;
        let mut running = std::mem::take(&mut self.running);
        let mut kept = std::mem::take(&mut self.kept);
        kept.clear();
        while i < running.len() {
            let v = running[i];
            let s = &self.seqs[v];
            let chunk = s.pending().min(*budget);
            if chunk == 0 || kept.len() as u32 >= self.r.config.max_num_seqs {
                kept.push(v);
                i += 1;
                continue;
            }
            let need = self.blocks_for(s.computed + chunk) - s.blocks;
            let mut self_preempted = false;
            while self.free_blocks < need {
                preempted = true;
                if running.len() > i + 1 {
                    let victim = running.pop().expect("a later sequence");
                    self.preempt(victim);
                } else {
                    self.preempt(v);
                    self_preempted = true;
                    break;
                }
            }
            if self_preempted {
                break;
            }
            self.schedule(v, chunk);
            *budget -= chunk;
            kept.push(v);
            i += 1;
        }
        self.running = kept;
        self.kept = running;
        preempted
    }

    fn schedule_swapped(&mut self, budget: &mut u32) {
        while let Some(&v) = self.swapped.front() {
            let s = &self.seqs[v];
            let blocks = self.blocks_for(s.computed + 1);
            if self.running.len() as u32 >= self.r.config.max_num_seqs
                || *budget == 0
                || self.free_blocks < blocks + self.r.watermark_blocks
            {
                break;
            }
            self.swapped.pop_front();
            self.swap_in(v);
            self.schedule(v, 1);
            *budget -= 1;
            self.running.push(v);
        }
    }

    /// Admits waiting sequences (whole, or a chunk for chunked).
    fn schedule_waiting(&mut self, budget: &mut u32, chunked: bool) {
        while let Some(&v) = self.waiting.front() {
            let s = &self.seqs[v];
            let pending = s.pending();
            let alone = self.batch.is_empty() && self.running.is_empty();
            let chunk = if chunked {
                pending.min(*budget)
            } else if pending <= *budget || alone {
                // A resumed sequence longer than the budget runs alone rather than never.
                pending
            } else {
                break;
            };
            let need = self.blocks_for(s.computed + chunk);
            if chunk == 0
                || self.running.len() as u32 >= self.r.config.max_num_seqs
                || self.free_blocks < need + self.r.watermark_blocks
            {
                break;
            }
            self.waiting.pop_front();
            self.seqs[v].place = Where::Running;
            self.schedule(v, chunk);
            *budget = budget.saturating_sub(chunk);
            self.running.push(v);
        }
    }

    fn start_iteration(&mut self) -> Result<(), Error> {
        self.shape.clear();
        self.batch.clear();
        let mut budget = self.r.max_num_batched_tokens;
        match self.r.config.scheduler {
            SchedulerKind::PrefillFirst => {
                if self.swapped.is_empty() {
                    self.schedule_waiting(&mut budget, false);
                }
                if self.batch.is_empty() {
                    let preempted = self.schedule_running(&mut budget);
                    if !preempted {
                        self.schedule_swapped(&mut budget);
                    }
                }
            }
            SchedulerKind::Mixed | SchedulerKind::Chunked => {
                let chunked = self.r.config.scheduler == SchedulerKind::Chunked;
                let preempted = self.schedule_running(&mut budget);
                if !preempted {
                    self.schedule_swapped(&mut budget);
                }
                if self.swapped.is_empty() {
                    self.schedule_waiting(&mut budget, chunked);
                }
            }
        }
        if self.batch.is_empty() && self.shape.swap_out_blocks == 0 {
            if self.waiting.is_empty() && self.swapped.is_empty() && self.running.is_empty() {
                return Ok(());
            }
            return Err(Error::Stalled {
                time_s: self.now,
                waiting: self.waiting.len(),
                swapped: self.swapped.len(),
            });
        }
        let t = self.timer.time(&self.shape);
        self.compute_s += t.compute_s;
        self.iterations += 1;
        if self.r.config.record_timeseries {
            let mut read = 0u64;
            let mut written = 0u64;
            for &(q, kv) in &self.shape.seqs {
                read += u64::from(kv - q);
                written += u64::from(q);
            }
            self.series.push(IterationRecord {
                t_s: self.now,
                duration_s: t.total_s,
                gpu_blocks_used: self.r.gpu_blocks - self.free_blocks,
                host_blocks_used: self.host_used.div_ceil(self.r.block_bytes) as u32,
                running: self.running.len() as u32,
                waiting: self.waiting.len() as u32,
                swapped: self.swapped.len() as u32,
                batch_tokens: written as u32,
                kv_bytes_read: read * self.kv_token_bytes,
                kv_bytes_written: written * self.kv_token_bytes,
            });
        }
        self.busy = true;
        let end = self.now + t.total_s;
        self.push(end, Kind::IterationEnd);
        Ok(())
    }

    fn end_iteration(&mut self) {
        let now = self.now;
        let mut finished = false;
        for k in 0..self.batch.len() {
            let v = self.batch[k];
            let s = &mut self.seqs[v];
            let emits = s.chunk == s.pending();
            s.computed += s.chunk;
            s.chunk = 0;
            if emits {
                s.generated += 1;
                if s.first_token.is_nan() {
                    s.first_token = now;
                }
                if s.generated >= s.output {
                    s.finish = now;
                    s.place = Where::Done;
                    self.free_blocks += s.blocks;
                    s.blocks = 0;
                    finished = true;
                }
            }
        }
        if finished {
            let seqs = &self.seqs;
            self.running.retain(|&v| seqs[v].place != Where::Done);
        }
    }

    fn finish(self) -> Output {
        let mut records = Vec::with_capacity(self.seqs.len());
        for (i, (s, q)) in self.seqs.iter().zip(self.reqs).enumerate() {
            let status = self.status[i];
            let done = status == Status::Finished;
            let nan = f64::NAN;
            let (queue, ttft, e2e) = if done {
                (
                    s.first_sched - s.arrival,
                    s.first_token - s.arrival,
                    s.finish - s.arrival,
                )
            } else {
                (nan, nan, nan)
            };
            let tpot = if done && s.output > 1 {
                (s.finish - s.first_token) / f64::from(s.output - 1)
            } else if done {
                0.0
            } else {
                nan
            };
            records.push(RequestRecord {
                id: q.id,
                arrival_s: q.arrival_s,
                prompt_tokens: q.prompt_tokens,
                output_tokens: q.output_tokens,
                status,
                queue_s: queue,
                ttft_s: ttft,
                tpot_s: tpot,
                e2e_s: e2e,
                preemptions: s.preemptions,
                swapped_tokens: s.swapped_tokens,
                recomputed_tokens: s.recomputed_tokens,
            });
        }
        let makespan = self.now;
        let summary = Summary::new(
            &records,
            makespan,
            self.compute_s,
            self.iterations,
            self.preemptions,
            self.swap_out_bytes,
            self.swap_in_bytes,
            &self.r,
        );
        Output {
            requests: records,
            summary,
            iterations: self.series,
        }
    }
}
