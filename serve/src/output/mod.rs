//! Results as data: per-request records, a summary, a per-iteration time series, and writers
//! for CSV, JSON and a Chrome trace (Perfetto). Numbers are plain (seconds, bytes, tokens).

use std::collections::BTreeMap;
use std::io::{self, Write};

use serde::Serialize;

use crate::config::Resolved;
use crate::error::Error;
use crate::kv_cache::CacheStats;

pub mod autoscale;
pub mod bands;
pub mod cluster;
pub mod slo;

pub use crate::figures::{Counters, Percentiles};
pub use crate::itl;
pub use crate::record::{FinishReason, RejectReason, RequestRecord, Status};

/// The run's summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// The vLLM release the engine followed (`0.15.1`; a cluster whose engines follow several:
    /// each, oldest first, `0.13.0, 0.15.1`).
    pub vllm_version: String,
    /// Requests given.
    pub requests: u64,
    /// Requests served.
    pub finished: u64,
    /// Requests rejected.
    pub rejected: u64,
    /// Rejected requests by reason (kebab-case names).
    pub rejected_by_reason: BTreeMap<&'static str, u64>,
    /// The reasons of [`rejected_by_reason`](Self::rejected_by_reason) in the order the first
    /// request of each was given (not in the JSON).
    #[serde(skip)]
    pub rejected_order: Vec<&'static str>,
    /// Served requests whose generation stopped at `max_model_len` (finish reason `length`).
    pub truncated: u64,
    /// Time of the last event (seconds from 0).
    pub makespan_s: f64,
    /// Output tokens of finished requests per second of makespan.
    #[serde(rename = "output_tok_s")]
    pub output_tokens_per_s: f64,
    /// Prompt + output tokens of finished requests per second.
    #[serde(rename = "total_tok_s")]
    pub total_tokens_per_s: f64,
    /// Finished requests per second.
    pub requests_per_s: f64,
    /// Time to first token.
    pub ttft_s: Percentiles,
    /// Time per output token.
    pub tpot_s: Percentiles,
    /// Inter-token latency: every gap between two consecutive tokens of a request, pooled
    /// (vLLM's `benchmarks/serve.py` ITL; [`itl`]).
    pub itl_s: Percentiles,
    /// End to end.
    pub e2e_s: Percentiles,
    /// Queueing in the engine (reaching it to first scheduled).
    pub queue_s: Percentiles,
    /// Preemptions.
    pub preemptions: u64,
    /// Bytes copied to host (KV and stored activations).
    pub swap_out_bytes: u64,
    /// Bytes copied back.
    pub swap_in_bytes: u64,
    /// Prompt tokens of finished requests found in the prefix cache when first scheduled.
    pub cached_prompt_tokens: u64,
    /// Prefix-cache hit rate of new requests: tokens found over tokens looked up (vLLM's
    /// `prefix_cache_hits / prefix_cache_queries`, which leave out requests resumed after a
    /// preemption since 0.11.2); 0 without prefix caching or lookups.
    pub prefix_cache_hit_rate: f64,
    /// The hit rate of lookups by requests resumed after a preemption (vLLM's `preempted_hits
    /// / preempted_queries`; mostly their own blocks, not yet evicted); `None` (null) when no
    /// preempted request looked up.
    pub preempted_prefix_cache_hit_rate: Option<f64>,
    /// Kernel time over makespan.
    #[serde(rename = "gpu_busy_fraction")]
    pub gpu_busy: f64,
    /// Iterations run.
    pub iterations: u64,
    /// GPU KV blocks.
    pub gpu_blocks: u32,
    /// Host swap space, bytes.
    pub host_bytes: u64,
    /// A freshly started server's first-use kernel compilations ([`crate::warmup`]); absent
    /// when the run modelled a server that had already served its load.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_use_compilation: Option<Compilation>,
    /// The queueing delay's trend (not in the JSON; [`ServeReport::overload`] reads it).
    #[serde(skip)]
    pub queue_trend: QueueTrend,
}

/// What a freshly started server compiled on first use ([`crate::warmup`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Compilation {
    /// Fused-MoE kernels compiled while serving (every engine's).
    pub kernels: u64,
    /// Seconds steps waited on them (every engine's).
    pub stall_s: f64,
}

/// A run that did not keep up with its arrivals.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Overload {
    /// Requests per second offered: requests over the arrival span.
    pub offered_rps: f64,
    /// Requests per second finished: finished requests over the makespan.
    pub served_rps: f64,
    /// How much the queueing delay grew from the first arrival to the last, s.
    pub queue_growth_s: f64,
}

/// The queue growth across the arrivals past which a run is overloaded: a second, or a tenth
/// of the mean queueing delay (the capacity search's steady-state test,
/// `capacity::SteadyState`).
pub const OVERLOAD_QUEUE_GROWTH_S: f64 = 1.0;

/// Values of one latency metric, kept for its percentiles: in memory up to [`SPILL_VALUES`],
/// beyond that written to an unnamed temporary file and read back once, whole, for sorting.
struct Column {
    mem: Vec<f64>,
    file: Option<std::io::BufWriter<std::fs::File>>,
    spilled: u64,
    /// Values held in memory before they go to the file.
    spill_at: usize,
}

impl Default for Column {
    fn default() -> Self {
        Column {
            mem: Vec::new(),
            file: None,
            spilled: 0,
            spill_at: SPILL_VALUES,
        }
    }
}

/// Values of one metric held in memory before they go to a temporary file (8 MiB).
pub const SPILL_VALUES: usize = 1 << 20;

fn oom(what: &'static str, values: u64) -> Error {
    Error::OutOfMemory {
        what,
        bytes: values.saturating_mul(8),
    }
}

impl Column {
    fn push(&mut self, x: f64) -> Result<(), Error> {
        if self.mem.len() == self.spill_at {
            let f = match &mut self.file {
                Some(f) => f,
                None => self.file.insert(std::io::BufWriter::new(
                    spill_file().map_err(|source| Error::Spill { source })?,
                )),
            };
            for v in &self.mem {
                f.write_all(&v.to_le_bytes())
                    .map_err(|source| Error::Spill { source })?;
            }
            self.spilled += self.mem.len() as u64;
            self.mem.clear();
        }
        self.mem
            .try_reserve(1)
            .map_err(|_| oom("latency values", self.mem.len() as u64 + 1))?;
        self.mem.push(x);
        Ok(())
    }

    /// All values, in the order pushed.
    fn into_values(self) -> Result<Vec<f64>, Error> {
        let Some(f) = self.file else {
            return Ok(self.mem);
        };
        let total = self.spilled + self.mem.len() as u64;
        let mut v: Vec<f64> = Vec::new();
        usize::try_from(total)
            .ok()
            .and_then(|n| v.try_reserve_exact(n).ok())
            .ok_or_else(|| oom("latency values for percentiles", total))?;
        let spill = |source| Error::Spill { source };
        let mut f = f.into_inner().map_err(|e| spill(e.into_error()))?;
        use std::io::{Read, Seek};
        f.seek(std::io::SeekFrom::Start(0)).map_err(spill)?;
        let mut r = std::io::BufReader::new(f);
        let mut b = [0u8; 8];
        for _ in 0..self.spilled {
            r.read_exact(&mut b).map_err(spill)?;
            v.push(f64::from_le_bytes(b));
        }
        v.extend_from_slice(&self.mem);
        Ok(v)
    }
}

/// A new temporary file, already unlinked where the system allows (nothing is left behind when
/// the process ends, however it ends).
fn spill_file() -> io::Result<std::fs::File> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir();
    loop {
        let n = N.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("kvplan-serve-{}-{n}.tmp", std::process::id()));
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(f) => {
                let _ = std::fs::remove_file(&path);
                return Ok(f);
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1 << 20 => continue,
            Err(e) => {
                return Err(io::Error::new(e.kind(), format!("{}: {e}", dir.display())));
            }
        }
    }
}

/// Engine-wide totals a summary reports, summed over a cluster's engines.
#[derive(Debug, Clone, Default)]
pub(crate) struct Totals {
    /// Inter-token gaps.
    pub itl: itl::ItlHistogram,
    pub counters: Counters,
    pub cache: CacheStats,
    pub gpu_blocks: u32,
    pub host_bytes: u64,
    pub iterations: u64,
    /// The releases the engines follow, one bit each by their place in
    /// [`crate::versions::RELEASES`].
    pub versions: u32,
    /// Whether any engine started cold ([`crate::Config::cold_start`]).
    pub cold_start: bool,
}

impl Totals {
    /// Adds one engine's.
    pub(crate) fn add(&mut self, c: &Counters, cache: CacheStats, r: &Resolved) {
        self.counters.preemptions += c.preemptions;
        self.counters.swap_out_bytes += c.swap_out_bytes;
        self.counters.swap_in_bytes += c.swap_in_bytes;
        self.counters.kernel_compiles += c.kernel_compiles;
        self.counters.compile_stall_s += c.compile_stall_s;
        self.cold_start |= r.config.cold_start;
        self.cache.lookups += cache.lookups;
        self.cache.queried_tokens += cache.queried_tokens;
        self.cache.hit_tokens += cache.hit_tokens;
        self.cache.preempted_lookups += cache.preempted_lookups;
        self.cache.preempted_queried_tokens += cache.preempted_queried_tokens;
        self.cache.preempted_hit_tokens += cache.preempted_hit_tokens;
        self.gpu_blocks = self.gpu_blocks.saturating_add(r.gpu_blocks);
        self.host_bytes = self.host_bytes.saturating_add(r.host_bytes);
        let i = crate::versions::RELEASES
            .iter()
            .position(|x| x.version == r.vllm_version)
            .expect("every version is in the release table");
        self.versions |= 1 << i;
    }

    /// The releases of [`Totals::versions`], oldest first: `0.15.1`, `0.13.0, 0.15.1`.
    fn vllm_version(&self) -> String {
        let names: Vec<&str> = (crate::versions::RELEASES.iter().enumerate())
            .filter(|&(i, _)| self.versions & (1 << i) != 0)
            .map(|(_, r)| r.name)
            .collect();
        names.join(", ")
    }
}

/// The summary built one request at a time, as requests retire: counts and sums as they come,
/// the latency values kept for exact percentiles (the same [`Percentiles::of`] over the same
/// values as a summary of the whole list, so the same bytes).
#[derive(Default)]
pub struct SummaryAcc {
    requests: u64,
    finished: u64,
    rejected_by_reason: BTreeMap<&'static str, u64>,
    rejected_order: Vec<&'static str>,
    truncated: u64,
    out: u64,
    inp: u64,
    cached: u64,
    /// TTFT, TPOT, E2E, queue.
    cols: [Column; 4],
    trend: QueueTrendAcc,
}

/// The queueing delay's least-squares trend over arrival time, accumulated one finished request
/// at a time (centred sums: no cancellation over long runs), and the arrival span of every
/// request.
#[derive(Debug, Clone, Copy, Default)]
struct QueueTrendAcc {
    n: f64,
    mean_x: f64,
    mean_y: f64,
    sxx: f64,
    sxy: f64,
    first: Option<f64>,
    last: f64,
}

impl QueueTrendAcc {
    fn arrival(&mut self, x: f64) {
        self.first = Some(self.first.map_or(x, |f| f.min(x)));
        self.last = self.last.max(x);
    }

    fn add(&mut self, x: f64, y: f64) {
        self.n += 1.0;
        let dx = x - self.mean_x;
        self.mean_x += dx / self.n;
        self.mean_y += (y - self.mean_y) / self.n;
        self.sxx += dx * (x - self.mean_x);
        self.sxy += dx * (y - self.mean_y);
    }

    fn finish(&self) -> QueueTrend {
        let span = self.first.map_or(0.0, |f| self.last - f);
        QueueTrend {
            growth_s: if self.n >= 2.0 && self.sxx > 0.0 {
                self.sxy / self.sxx * span
            } else {
                0.0
            },
            mean_queue_s: self.mean_y,
            arrival_span_s: span,
        }
    }
}

/// How the queueing delay moved across the arrivals: what says a run did not keep up.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct QueueTrend {
    /// The least-squares slope of the served requests' queueing delay over their arrival time,
    /// times the arrival span: how much the queue grew from the first arrival to the last, s.
    pub growth_s: f64,
    /// The served requests' mean queueing delay, s.
    pub mean_queue_s: f64,
    /// Seconds from the first arrival to the last (every request).
    pub arrival_span_s: f64,
}

impl SummaryAcc {
    /// Counts one request.
    pub(crate) fn add(&mut self, q: &RequestRecord) -> Result<(), Error> {
        self.requests += 1;
        self.trend.arrival(q.arrival_s);
        match q.status {
            Status::Finished => {
                self.finished += 1;
                self.trend.add(q.arrival_s, q.queue_s);
                if q.finish_reason == Some(FinishReason::Length) {
                    self.truncated += 1;
                }
                self.out += u64::from(q.output_tokens);
                self.inp += u64::from(q.prompt_tokens);
                self.cached += u64::from(q.cached_tokens);
                for (i, (c, x)) in self
                    .cols
                    .iter_mut()
                    .zip([q.ttft_s, q.tpot_s, q.e2e_s, q.queue_s])
                    .enumerate()
                {
                    // TPOT is ranked over requests with a second token only, as vLLM's
                    // benchmark ranks it (v0.15.1, `vllm/benchmarks/serve.py`,
                    // `calculate_metrics`: `if output_len > 1: tpots.append(tpot)`).
                    if i == 1 && q.output_tokens <= 1 {
                        continue;
                    }
                    c.push(x)?;
                }
            }
            Status::Rejected(why) => {
                let n = self.rejected_by_reason.entry(why.as_str()).or_insert(0);
                if *n == 0 {
                    self.rejected_order.push(why.as_str());
                }
                *n += 1;
            }
        }
        Ok(())
    }

    /// The summary.
    pub(crate) fn finish(
        self,
        makespan_s: f64,
        compute_s: f64,
        totals: &Totals,
    ) -> Result<Summary, Error> {
        let (counters, cache) = (&totals.counters, totals.cache);
        let per_s = |x: f64| {
            if makespan_s > 0.0 {
                x / makespan_s
            } else {
                0.0
            }
        };
        let mut p = [Percentiles::default(); 4];
        for (p, c) in p.iter_mut().zip(self.cols) {
            // One metric's values at a time.
            *p = Percentiles::of(&mut c.into_values()?);
        }
        let [ttft_s, tpot_s, e2e_s, queue_s] = p;
        let done = self.finished;
        Ok(Summary {
            queue_trend: self.trend.finish(),
            vllm_version: totals.vllm_version(),
            requests: self.requests,
            finished: done,
            rejected: self.requests - done,
            rejected_by_reason: self.rejected_by_reason,
            rejected_order: self.rejected_order,
            truncated: self.truncated,
            makespan_s,
            output_tokens_per_s: per_s(self.out as f64),
            total_tokens_per_s: per_s((self.out + self.inp) as f64),
            requests_per_s: per_s(done as f64),
            ttft_s,
            tpot_s,
            itl_s: totals.itl.percentiles(),
            e2e_s,
            queue_s,
            preemptions: counters.preemptions,
            swap_out_bytes: counters.swap_out_bytes,
            swap_in_bytes: counters.swap_in_bytes,
            cached_prompt_tokens: self.cached,
            prefix_cache_hit_rate: if cache.queried_tokens > 0 {
                cache.hit_tokens as f64 / cache.queried_tokens as f64
            } else {
                0.0
            },
            preempted_prefix_cache_hit_rate: (cache.preempted_queried_tokens > 0)
                .then(|| cache.preempted_hit_tokens as f64 / cache.preempted_queried_tokens as f64),
            gpu_busy: per_s(compute_s),
            iterations: totals.iterations,
            gpu_blocks: totals.gpu_blocks,
            host_bytes: totals.host_bytes,
            first_use_compilation: totals.cold_start.then_some(Compilation {
                kernels: counters.kernel_compiles,
                stall_s: counters.compile_stall_s,
            }),
        })
    }
}

/// The engine's state at the start of one iteration (after scheduling it).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct IterationRecord {
    /// Start time.
    pub t_s: f64,
    /// Duration (copies, recomputation and forward pass).
    pub duration_s: f64,
    /// GPU KV blocks held.
    pub gpu_blocks_used: u32,
    /// Host blocks held (swap space in use over the block size, rounded up).
    pub host_blocks_used: u32,
    /// Running sequences.
    pub running: u32,
    /// Waiting sequences.
    pub waiting: u32,
    /// Swapped-out sequences.
    pub swapped: u32,
    /// Tokens through the model.
    pub batch_tokens: u32,
    /// KV bytes attention reads from the cache (all layers).
    pub kv_bytes_read: u64,
    /// KV bytes written to the cache (all layers).
    pub kv_bytes_written: u64,
}

/// Everything a run produces.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServeReport {
    /// Per request, in input order.
    pub requests: Vec<RequestRecord>,
    /// The summary.
    pub summary: Summary,
    /// Engine passes that ran the scheduler, summed over the engines: the steps
    /// ([`Summary::iterations`]) less those fast-forwarded in stretches of decode-only steps
    /// (`crate::engine`). How much work the simulation did, not a result: never serialized.
    #[serde(skip)]
    pub passes: u64,
    /// Per iteration (empty when not recorded; a cluster's are its replicas').
    pub iterations: Vec<IterationRecord>,
    /// A cluster's replicas, router and transfers (`None`: one engine).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<Box<cluster::ClusterOutput>>,
    /// The CPU tiers' counters, summed (`None`: no tier).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<crate::tier::TierStats>,
    /// The run judged against objectives (the slo option of `serve`; `None`: none given).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goodput: Option<slo::Goodput>,
    /// Error bands on the headline figures (`None`: none asked for; [`crate::bands`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bands: Option<bands::ServeBands>,
}

fn num(w: &mut impl Write, x: f64) -> io::Result<()> {
    if x.is_finite() {
        write!(w, "{x}")
    } else {
        Ok(())
    }
}

/// A run that served no request to its end: every latency is unmeasured, so the run has no
/// answer to give (what [`ServeReport::nothing_finished`] returns).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no request finished: {}", self.why())]
pub struct NothingFinished {
    /// Requests given.
    pub requests: u64,
    /// Rejected requests by reason, in the order the first of each was given.
    pub rejected: Vec<(&'static str, u64)>,
}

impl NothingFinished {
    fn why(&self) -> String {
        if self.requests == 0 {
            return "the workload gave no request".into();
        }
        let reasons: Vec<String> = (self.rejected.iter())
            .map(|(why, n)| format!("{n} {why}"))
            .collect();
        format!("all {} rejected ({})", self.requests, reasons.join(", "))
    }
}

impl ServeReport {
    /// `Some` when no request finished: nothing was measured, and a caller must not report the
    /// run's latencies as an answer (they are [`Percentiles::NONE`]).
    pub fn nothing_finished(&self) -> Option<NothingFinished> {
        let s = &self.summary;
        (s.finished == 0).then(|| NothingFinished {
            requests: s.requests,
            rejected: (s.rejected_order.iter())
                .map(|why| (*why, s.rejected_by_reason.get(why).copied().unwrap_or(0)))
                .collect(),
        })
    }

    /// Whether the run did not keep up with its arrivals: its queueing delay grew across the
    /// arrivals by more than [`OVERLOAD_QUEUE_GROWTH_S`] and a tenth of its mean (the capacity
    /// search's steady-state test on the whole run); `None` when it kept up, or when everything
    /// arrived at once (a queue is then the workload's, not a load the server fails).
    pub fn overload(&self) -> Option<Overload> {
        let s = &self.summary;
        let t = &s.queue_trend;
        if t.arrival_span_s.is_nan()
            || t.arrival_span_s <= 0.0
            || t.growth_s <= OVERLOAD_QUEUE_GROWTH_S.max(0.1 * t.mean_queue_s)
        {
            return None;
        }
        Some(Overload {
            offered_rps: (s.requests.saturating_sub(1)) as f64 / t.arrival_span_s,
            served_rps: s.requests_per_s,
            queue_growth_s: t.growth_s,
        })
    }

    /// The per-step series of the whole run: one engine's own, or a cluster's replicas' summed
    /// at each step of any replica (each replica counted at its last step before).
    pub fn series(&self) -> Vec<IterationRecord> {
        let Some(c) = &self.cluster else {
            return self.iterations.clone();
        };
        let mut all: Vec<(usize, &IterationRecord)> = (c.replicas.iter().enumerate())
            .flat_map(|(i, r)| r.iterations.iter().map(move |x| (i, x)))
            .collect();
        all.sort_by(|a, b| a.1.t_s.total_cmp(&b.1.t_s).then(a.0.cmp(&b.0)));
        let mut last = vec![None::<IterationRecord>; c.replicas.len()];
        let mut out = Vec::with_capacity(all.len());
        for (i, x) in all {
            last[i] = Some(*x);
            let mut t = IterationRecord {
                t_s: x.t_s,
                duration_s: x.duration_s,
                ..IterationRecord::default()
            };
            for r in last.iter().flatten() {
                t.gpu_blocks_used += r.gpu_blocks_used;
                t.host_blocks_used += r.host_blocks_used;
                t.running += r.running;
                t.waiting += r.waiting;
                t.swapped += r.swapped;
            }
            t.batch_tokens = x.batch_tokens;
            t.kv_bytes_read = x.kv_bytes_read;
            t.kv_bytes_written = x.kv_bytes_written;
            out.push(t);
        }
        out
    }

    /// Per-request CSV (header + one row per request; times empty for rejected requests). A
    /// cluster's adds `replica,prefill_replica,kv_transfer_s`, a run with a CPU tier
    /// `external_tokens,kv_load_s`.
    pub fn write_requests_csv(&self, mut w: impl Write) -> io::Result<()> {
        let (cluster, tier) = (self.cluster.is_some(), self.tier.is_some());
        write!(
            w,
            "id,arrival_s,prompt_tokens,output_tokens,status,reason,finish_reason,cached_tokens,queue_s,ttft_s,tpot_s,e2e_s,preemptions,swapped_tokens,recomputed_tokens"
        )?;
        if cluster {
            write!(w, ",replica,prefill_replica,kv_transfer_s")?;
        }
        if tier {
            write!(w, ",external_tokens,kv_load_s")?;
        }
        writeln!(w)?;
        for r in &self.requests {
            let (status, reason) = match r.status {
                Status::Finished => ("finished", ""),
                Status::Rejected(why) => ("rejected", why.as_str()),
            };
            write!(w, "{},", r.id)?;
            num(&mut w, r.arrival_s)?;
            write!(
                w,
                ",{},{},{status},{reason},{},{},",
                r.prompt_tokens,
                r.output_tokens,
                r.finish_reason.map_or("", FinishReason::as_str),
                r.cached_tokens
            )?;
            for x in [r.queue_s, r.ttft_s, r.tpot_s, r.e2e_s] {
                num(&mut w, x)?;
                write!(w, ",")?;
            }
            write!(
                w,
                "{},{},{}",
                r.preemptions, r.swapped_tokens, r.recomputed_tokens
            )?;
            if cluster {
                write!(w, ",{},", r.replica)?;
                if let Some(p) = r.prefill_replica {
                    write!(w, "{p}")?;
                }
                write!(w, ",")?;
                num(&mut w, r.kv_transfer_s)?;
            }
            if tier {
                write!(w, ",{},", r.external_tokens)?;
                num(&mut w, r.kv_load_s)?;
            }
            writeln!(w)?;
        }
        Ok(())
    }

    /// Per-iteration time series CSV (a cluster's: a `replica` column first, each replica's
    /// steps in turn).
    pub fn write_timeseries_csv(&self, mut w: impl Write) -> io::Result<()> {
        if self.cluster.is_some() {
            write!(w, "replica,")?;
        }
        writeln!(
            w,
            "t_s,duration_s,gpu_blocks_used,host_blocks_used,running,waiting,swapped,batch_tokens,kv_bytes_read,kv_bytes_written"
        )?;
        let one = [(String::new(), &self.iterations)];
        let replicas: Vec<(String, &Vec<IterationRecord>)> = match &self.cluster {
            Some(c) => (c.replicas.iter())
                .map(|r| (format!("{},", r.name), &r.iterations))
                .collect(),
            None => one.to_vec(),
        };
        for (name, r) in replicas
            .iter()
            .flat_map(|(n, v)| v.iter().map(move |r| (n, r)))
        {
            write!(w, "{name}")?;
            num(&mut w, r.t_s)?;
            write!(w, ",")?;
            num(&mut w, r.duration_s)?;
            writeln!(
                w,
                ",{},{},{},{},{},{},{},{}",
                r.gpu_blocks_used,
                r.host_blocks_used,
                r.running,
                r.waiting,
                r.swapped,
                r.batch_tokens,
                r.kv_bytes_read,
                r.kv_bytes_written
            )?;
        }
        Ok(())
    }

    /// The summary as pretty JSON: the summary's fields, then a CPU tier's counters
    /// (`tier`) and a cluster's replicas, router pools and transfers where the run has them.
    pub fn write_summary_json(&self, mut w: impl Write) -> io::Result<()> {
        if self.cluster.is_none()
            && self.tier.is_none()
            && self.goodput.is_none()
            && self.bands.is_none()
            && self.overload().is_none()
        {
            serde_json::to_writer_pretty(&mut w, &self.summary)?;
            return writeln!(w);
        }
        #[derive(Serialize)]
        struct Full<'a> {
            #[serde(flatten)]
            summary: &'a Summary,
            #[serde(skip_serializing_if = "Option::is_none")]
            tier: Option<&'a crate::tier::TierStats>,
            #[serde(skip_serializing_if = "Option::is_none")]
            goodput: Option<&'a slo::Goodput>,
            #[serde(skip_serializing_if = "Option::is_none")]
            bands: Option<&'a bands::ServeBands>,
            #[serde(skip_serializing_if = "Option::is_none")]
            overload: Option<Overload>,
            #[serde(flatten, skip_serializing_if = "Option::is_none")]
            cluster: Option<&'a cluster::ClusterOutput>,
        }
        serde_json::to_writer_pretty(
            &mut w,
            &Full {
                summary: &self.summary,
                tier: self.tier.as_ref(),
                goodput: self.goodput.as_ref(),
                bands: self.bands.as_ref(),
                overload: self.overload(),
                cluster: self.cluster.as_deref(),
            },
        )?;
        writeln!(w)
    }

    /// A Chrome trace (open in Perfetto): one slice per iteration, microseconds; a cluster's
    /// replicas are one process each, named.
    pub fn write_chrome_trace(&self, mut w: impl Write) -> io::Result<()> {
        write!(w, "{{\"traceEvents\":[")?;
        let one = [(0usize, &self.iterations)];
        let tracks: Vec<(usize, &Vec<IterationRecord>)> = match &self.cluster {
            Some(c) => c
                .replicas
                .iter()
                .map(|r| &r.iterations)
                .enumerate()
                .collect(),
            None => one.to_vec(),
        };
        let mut first = true;
        if let Some(c) = &self.cluster {
            for (pid, r) in c.replicas.iter().enumerate() {
                if !first {
                    write!(w, ",")?;
                }
                first = false;
                write!(
                    w,
                    "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{pid},\"args\":{{\"name\":{}}}}}",
                    serde_json::to_string(&format!(
                        "{} ({}, {})",
                        r.name,
                        r.role.as_str(),
                        r.hardware
                    ))?
                )?;
            }
        }
        for (pid, series) in tracks {
            for r in series.iter() {
                if !first {
                    write!(w, ",")?;
                }
                first = false;
                write!(
                    w,
                    "{{\"name\":\"iteration\",\"ph\":\"X\",\"pid\":{pid},\"tid\":0,\"ts\":{},\"dur\":{},\"args\":{{\"batch_tokens\":{},\"running\":{},\"gpu_blocks_used\":{}}}}}",
                    r.t_s * 1e6,
                    r.duration_s * 1e6,
                    r.batch_tokens,
                    r.running,
                    r.gpu_blocks_used
                )?;
            }
        }
        writeln!(w, "]}}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values through a column that spills every 1000 come back in order: the percentiles (and
    /// their mean, summed in sorted order) are those of the values held in memory.
    #[test]
    fn a_spilled_column_gives_the_same_percentiles() {
        let values: Vec<f64> = (0..10_500u64)
            .map(|i| ((i * 7919) % 10_007) as f64 * 1e-3 + 1.0 / (i + 1) as f64)
            .collect();
        let mut c = Column {
            spill_at: 1000,
            ..Column::default()
        };
        for &x in &values {
            c.push(x).unwrap();
        }
        assert_eq!(c.spilled, 10_000);
        let back = c.into_values().unwrap();
        assert_eq!(back, values);
        let mut a = back;
        let mut b = values;
        assert_eq!(Percentiles::of(&mut a), Percentiles::of(&mut b));
    }
}
