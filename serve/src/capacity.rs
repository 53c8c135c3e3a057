//! SLO capacity: the highest request rate a serving configuration sustains under latency
//! objectives at steady state, by bisection on the serving simulator.
//!
//! An [`Slo`] is a list of terms `METRIC_PCT=LIMIT` (`ttft_p99=2s,tpot_p99=100ms`): metric
//! `ttft`, `tpot`, `e2e` or `queue`; percentile `p50`, `p90`, `p95` or `p99`; a limit in `s`,
//! `ms` or `us`. [`max_qps`] searches the scenario's arrival rate (`workload.qps`: a Poisson or
//! Gamma process, or a trace replay rescaled to that rate): halving from a start rate until a
//! rate meets the SLO, doubling until one does not, then bisecting until the two are within a
//! relative tolerance. Every evaluation serves the same seeded request stream at another rate,
//! so the search is deterministic.
//!
//! A rate is judged at steady state ([`SteadyState`], [`judge`]):
//! - the run is long enough to show a queue building: at least `min_requests` requests and
//!   `min_duration_s` seconds of arrivals;
//! - the first `warmup_fraction` of the arrival span is warm-up, left out of every figure;
//! - the service keeps up: the rate is at most `1 − headroom` of the configuration's service
//!   rate (its completion rate when always backlogged: the same request stream arriving at
//!   once, completions per second between the 20% and 80% marks, [`service_rate`]), and the
//!   queueing delay's least-squares trend across the measured requests adds at most
//!   `max(max_queue_growth_s, 10% of their mean queueing delay)` (a server slower than the
//!   arrivals adds delay in proportion to the run's length);
//! - rejected requests and requests cut at `max_model_len` count against every objective (as
//!   an infinite latency), so a percentile holds only if enough requests were served whole.
//!
//! Goodput is vLLM's (`bench serve`'s goodput): measured requests meeting every objective's
//! limit themselves, here as the offered rate times their share of the measured requests (vLLM
//! divides their count by its run's duration, the same in expectation; a Poisson stream's
//! realised rate differs from the offered one by chance, and this keeps goodput at most the
//! rate it was served at).

use crate::bands::{self, Band, BandSettings, CostSpread, Residuals, band};
use crate::iteration::CostScales;
use kvplan_vocab::{Progress, Silent};
use serde::Serialize;

use crate::output::{FinishReason, Percentiles, RequestRecord, ServeReport, Status, Summary};
use crate::scenario::{RawServeScenario, ScenarioError};

use crate::output::slo::round;
pub use crate::output::slo::{Metric, Pct, Slo, SloError, Term, show_seconds};

/// The percentiles of `metric` in a measured window.
fn metric_of(metric: Metric, s: &Window) -> &Percentiles {
    match metric {
        Metric::Ttft => &s.ttft_s,
        Metric::Tpot => &s.tpot_s,
        Metric::E2e => &s.e2e_s,
        Metric::Queue => &s.queue_s,
    }
}

impl Term {
    /// The term's value in a measured window, seconds.
    pub fn observed(&self, s: &Window) -> f64 {
        self.pct.of(metric_of(self.metric, s))
    }
}

/// Errors of the SLO search.
#[derive(Debug, thiserror::Error)]
pub enum CapacityError {
    /// A malformed SLO term.
    #[error(transparent)]
    Slo(#[from] SloError),
    /// The workload cannot be run at another rate.
    #[error("{0}")]
    Workload(String),
    /// A search setting out of range.
    #[error("{field}: {why}")]
    Setting {
        /// The setting by its dotted path: a [`SearchOptions`] field (`capacity.rel_tol`) or the
        /// tensor-parallel sizes (`serve.tensor_parallel_size`).
        field: &'static str,
        /// What is wrong.
        why: String,
    },
    /// The scenario does not resolve or run.
    #[error(transparent)]
    Scenario(#[from] Box<ScenarioError>),
    /// No configuration to compare: no hardware given and none in the scenario.
    #[error("no hardware to compare")]
    NoHardware,
    /// A hardware profile that does not load.
    #[error(transparent)]
    Hardware(#[from] kvplan_vocab::Error),
}

impl Slo {
    /// Whether `s` meets every term, was stable, and some request was served whole.
    pub fn met(&self, s: &Window) -> bool {
        s.served > 0 && s.stable && self.0.iter().all(|t| t.observed(s) <= t.limit_s)
    }

    /// What `s` misses: the terms, as `ttft_p99 2.4s > 2s`, and `queue grows` when the service
    /// did not keep up.
    pub fn misses(&self, s: &Window) -> Vec<String> {
        let mut v: Vec<String> = self
            .0
            .iter()
            .filter(|t| t.observed(s) > t.limit_s)
            .map(|t| {
                format!(
                    "{} {} > {}",
                    t.name(),
                    show_seconds(t.observed(s)),
                    show_seconds(t.limit_s)
                )
            })
            .collect();
        if !s.stable {
            if s.service_rps > 0.0 && s.offered_rps > s.stable_limit_rps {
                v.push(format!(
                    "{} req/s is above {} req/s, {:.0}% of the service rate",
                    round(s.offered_rps),
                    round(s.stable_limit_rps),
                    100.0 * s.stable_limit_rps / s.service_rps
                ));
            } else {
                v.push(format!(
                    "queue delay grows {} over the run",
                    show_seconds(s.queue_growth_s)
                ));
            }
        }
        v
    }
}

/// How long a rate is served and how it is judged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SteadyState {
    /// At least this many requests per rate.
    pub min_requests: u64,
    /// At least this many seconds of arrivals per rate.
    pub min_duration_s: f64,
    /// Leading fraction of the arrival span left out as warm-up.
    pub warmup_fraction: f64,
    /// The queueing delay may grow by at most this much across the measured requests (or a
    /// tenth of their mean queueing delay, whichever is larger), seconds.
    pub max_queue_growth_s: f64,
    /// A rate must stay this fraction below the service rate.
    pub headroom: f64,
}

impl Default for SteadyState {
    fn default() -> Self {
        SteadyState {
            min_requests: 2000,
            min_duration_s: 300.0,
            warmup_fraction: 0.1,
            max_queue_growth_s: 1.0,
            headroom: 0.03,
        }
    }
}

impl SteadyState {
    /// Requests to serve at `qps`.
    pub fn requests_at(&self, qps: f64) -> u64 {
        let by_time = (qps * self.min_duration_s).ceil();
        (by_time.min(crate::scenario::MAX_STEADY_REQUESTS as f64) as u64).max(self.min_requests)
    }
}

/// A rate's measured requests (after warm-up): percentiles with rejected and truncated requests
/// counted as infinite, goodput, and whether the service kept up.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Window {
    /// Requests arriving after the warm-up.
    pub measured: u64,
    /// Of those, served whole (finished, not cut at `max_model_len`).
    pub served: u64,
    /// Of those, rejected.
    pub rejected: u64,
    /// Of those, cut at `max_model_len`.
    pub truncated: u64,
    /// Seconds from the first to the last measured arrival.
    pub span_s: f64,
    /// Served requests per second of the span.
    pub requests_per_s: f64,
    /// Output tokens of served requests per second of the span.
    pub output_tokens_per_s: f64,
    /// Prompt + output tokens of served requests per second of the span.
    pub total_tokens_per_s: f64,
    /// Requests meeting every objective per second (vLLM's goodput).
    pub goodput_rps: f64,
    /// Time to first token.
    pub ttft_s: Percentiles,
    /// Time per output token.
    pub tpot_s: Percentiles,
    /// End to end.
    pub e2e_s: Percentiles,
    /// Queueing in the engine.
    pub queue_s: Percentiles,
    /// The queueing delay's trend across the span: slope × span, seconds.
    pub queue_growth_s: f64,
    /// The rate offered, requests/s (0 when not known).
    pub offered_rps: f64,
    /// The configuration's service rate, requests/s (0 when not measured).
    pub service_rps: f64,
    /// The highest rate judged stable: `(1 − headroom) × service_rps`.
    pub stable_limit_rps: f64,
    /// Whether the service kept up (within the headroom, growth within the allowance).
    pub stable: bool,
}

/// Judges a run offered at `offered_rps` on a configuration serving at most `service_rps`
/// (either 0 when not known): the requests arriving after the warm-up (see the module docs).
pub fn judge(
    out: &ServeReport,
    slo: &Slo,
    steady: &SteadyState,
    offered_rps: f64,
    service_rps: f64,
) -> Window {
    let reqs = &out.requests;
    let (first, last) = match (reqs.first(), reqs.last()) {
        (Some(a), Some(b)) => (a.arrival_s, b.arrival_s),
        _ => (0.0, 0.0),
    };
    let cut = first + steady.warmup_fraction * (last - first);
    let window: Vec<&RequestRecord> = reqs.iter().filter(|r| r.arrival_s >= cut).collect();
    let start = window.first().map_or(0.0, |r| r.arrival_s);
    let end = window.last().map_or(0.0, |r| r.arrival_s);
    let span = end - start;
    let whole = |r: &RequestRecord| {
        r.status == Status::Finished && r.finish_reason != Some(FinishReason::Length)
    };
    let col = |m: Metric| {
        // A request that was not served whole ranks as infinitely slow; a served one with one
        // output token has no TPOT to rank (vLLM's benchmark ranks TPOT over `output_len > 1`).
        let mut v: Vec<f64> = window
            .iter()
            .filter(|r| !(m == Metric::Tpot && whole(r) && r.output_tokens <= 1))
            .map(|r| {
                if whole(r) {
                    m.of_request(r)
                } else {
                    f64::INFINITY
                }
            })
            .collect();
        Percentiles::of(&mut v)
    };
    let served: Vec<&&RequestRecord> = window.iter().filter(|r| whole(r)).collect();
    let per_s = |x: f64| if span > 0.0 { x / span } else { 0.0 };
    let out_tok: u64 = served.iter().map(|r| u64::from(r.output_tokens)).sum();
    let in_tok: u64 = served.iter().map(|r| u64::from(r.prompt_tokens)).sum();
    let good = window.iter().filter(|r| slo.request_ok(r)).count();
    // Least-squares slope of the queueing delay over arrival time (served requests).
    let n = served.len() as f64;
    let growth = if served.len() >= 2 && span > 0.0 {
        let mx = served.iter().map(|r| r.arrival_s).sum::<f64>() / n;
        let my = served.iter().map(|r| r.queue_s).sum::<f64>() / n;
        let (mut sxy, mut sxx) = (0.0, 0.0);
        for r in &served {
            let dx = r.arrival_s - mx;
            sxy += dx * (r.queue_s - my);
            sxx += dx * dx;
        }
        if sxx > 0.0 { sxy / sxx * span } else { 0.0 }
    } else {
        0.0
    };
    let mean_queue = if n > 0.0 {
        served.iter().map(|r| r.queue_s).sum::<f64>() / n
    } else {
        0.0
    };
    Window {
        measured: window.len() as u64,
        served: served.len() as u64,
        rejected: window
            .iter()
            .filter(|r| r.status != Status::Finished)
            .count() as u64,
        truncated: window
            .iter()
            .filter(|r| r.finish_reason == Some(FinishReason::Length))
            .count() as u64,
        span_s: span,
        requests_per_s: per_s(served.len() as f64),
        output_tokens_per_s: per_s(out_tok as f64),
        total_tokens_per_s: per_s((out_tok + in_tok) as f64),
        // Good requests per second of the offered rate: a Poisson stream's realised rate
        // differs from the offered one by chance, and goodput above the rate it was served at
        // would read as a bug (vLLM divides by its run's duration: the same in expectation).
        goodput_rps: if offered_rps > 0.0 && !window.is_empty() {
            offered_rps * good as f64 / window.len() as f64
        } else {
            per_s(good as f64)
        },
        ttft_s: col(Metric::Ttft),
        tpot_s: col(Metric::Tpot),
        e2e_s: col(Metric::E2e),
        queue_s: col(Metric::Queue),
        queue_growth_s: growth,
        offered_rps,
        service_rps,
        stable_limit_rps: (1.0 - steady.headroom) * service_rps,
        stable: growth <= steady.max_queue_growth_s.max(0.1 * mean_queue)
            && (service_rps <= 0.0 || offered_rps <= (1.0 - steady.headroom) * service_rps),
    }
}

/// The configuration's service rate for `base`'s requests: the stream arriving all at once (at
/// least `min_requests` requests and eight times `max_num_seqs`), completions per second
/// between the 20% and 80% marks of the completion order.
pub fn service_rate(base: &RawServeScenario, steady: &SteadyState) -> Result<f64, CapacityError> {
    service_rate_with(base, steady, CostScales::default(), &Silent)
}

/// [`service_rate`], telling `progress` how far the run has come.
fn service_rate_with(
    base: &RawServeScenario,
    steady: &SteadyState,
    scales: CostScales,
    progress: &dyn Progress,
) -> Result<f64, CapacityError> {
    let mut raw = base.clone();
    if raw.workload.trace.is_some() {
        raw.workload.qps = None;
        raw.workload.time_scale = Some(1e-9);
    } else {
        raw.workload.arrivals = Some("all-at-once".into());
        raw.workload.qps = None;
        raw.workload.cv = None;
        raw.workload.requests = Some(steady.min_requests);
        let seqs = raw
            .clone()
            .resolve()
            .map_err(Box::new)?
            .resolved
            .max_num_seqs;
        let n = steady
            .min_requests
            .max(8 * u64::from(seqs))
            .max(base.workload.requests.unwrap_or(0));
        raw.workload.requests = Some(n);
    }
    let stage = Stage {
        inner: progress,
        label: "arriving all at once (the service rate)".into(),
    };
    let out = run_quiet(raw, scales, &stage)?;
    Ok(completion_rate(&out))
}

/// Completions per second between the 20% and 80% marks of a run's completion order (0 with
/// fewer than ten requests finished): a backlogged run's service rate.
pub fn completion_rate(out: &ServeReport) -> f64 {
    let mut done: Vec<f64> = out
        .requests
        .iter()
        .filter(|r| r.status == Status::Finished)
        .map(|r| r.arrival_s + r.e2e_s)
        .collect();
    if done.len() < 10 {
        return 0.0;
    }
    done.sort_unstable_by(f64::total_cmp);
    let (a, b) = (done.len() / 5, done.len() * 4 / 5);
    let span = done[b] - done[a];
    if span > 0.0 {
        (b - a) as f64 / span
    } else {
        0.0
    }
}

/// Settings of the search.
#[derive(Debug, Clone, Copy)]
pub struct SearchOptions {
    /// The first rate tried, requests/s.
    pub start_qps: f64,
    /// Stop when the passing and failing rates are within this fraction of each other.
    pub rel_tol: f64,
    /// The lowest rate tried before giving up, requests/s.
    pub min_qps: f64,
    /// The highest rate tried, requests/s.
    pub max_qps: f64,
    /// How each rate is served and judged.
    pub steady: SteadyState,
    /// Multipliers on the kernel times (1: the cost model as it is; an error band's draw).
    pub scales: CostScales,
    /// An error band on each sustainable rate: the search run again once per draw
    /// (`None`: no band).
    pub bands: Option<BandSettings>,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            start_qps: 1.0,
            rel_tol: 0.02,
            min_qps: 1.0 / 1024.0,
            max_qps: 1e5,
            steady: SteadyState::default(),
            scales: CostScales::default(),
            bands: None,
        }
    }
}

/// One rate the search served.
#[derive(Debug, Clone)]
pub struct Probe {
    /// Requests/s offered.
    pub qps: f64,
    /// Requests served at it.
    pub requests: u64,
    /// Whether it met the SLO.
    pub met: bool,
    /// Its measured window.
    pub window: Window,
    /// Its whole-run summary.
    pub summary: Summary,
}

/// The result of [`max_qps`].
#[derive(Debug, Clone)]
pub struct Capacity {
    /// The highest rate found that meets the SLO (`None`: not even `min_qps`).
    pub max_qps: Option<f64>,
    /// The measured window at that rate (or at the lowest rate tried when none met).
    pub at: Window,
    /// The lowest rate found that misses it (`None`: `max_qps` itself met it).
    pub fails_at: Option<f64>,
    /// Every rate served, in order.
    pub probes: Vec<Probe>,
    /// The configuration's service rate ([`service_rate`]), requests/s.
    pub service_rps: f64,
}

/// The highest arrival rate `base` sustains under `slo` (see the module docs).
pub fn max_qps(
    base: &RawServeScenario,
    slo: &Slo,
    opts: SearchOptions,
) -> Result<Capacity, CapacityError> {
    max_qps_with(base, slo, opts, &Silent)
}

/// [`max_qps`], telling `progress` how far each rate's run has come.
pub fn max_qps_with(
    base: &RawServeScenario,
    slo: &Slo,
    opts: SearchOptions,
    progress: &dyn Progress,
) -> Result<Capacity, CapacityError> {
    check(base, opts)?;
    let service_rps = service_rate_with(base, &opts.steady, opts.scales, progress)?;
    let mut probes: Vec<Probe> = Vec::new();
    let mut serve = |qps: f64| -> Result<(bool, Window), CapacityError> {
        let stage = Stage {
            inner: progress,
            label: format!("at {} req/s", round(qps)),
        };
        let (window, summary, requests) = serve_at_with(
            base,
            slo,
            &opts.steady,
            qps,
            service_rps,
            opts.scales,
            &stage,
        )?;
        let met = slo.met(&window);
        probes.push(Probe {
            qps,
            requests,
            met,
            window: window.clone(),
            summary,
        });
        Ok((met, window))
    };
    // A passing rate: the start, else halve.
    let mut lo = opts.start_qps;
    let (mut ok, mut at) = serve(lo)?;
    while !ok {
        let next = lo / 2.0;
        if next < opts.min_qps {
            return Ok(Capacity {
                max_qps: None,
                at,
                fails_at: Some(lo),
                probes,
                service_rps,
            });
        }
        lo = next;
        (ok, at) = serve(lo)?;
    }
    // A failing rate above it: double.
    let mut hi = lo * 2.0;
    loop {
        if hi > opts.max_qps {
            return Ok(Capacity {
                max_qps: Some(lo),
                at,
                fails_at: None,
                probes,
                service_rps,
            });
        }
        let (m, s) = serve(hi)?;
        if !m {
            break;
        }
        (lo, at) = (hi, s);
        hi *= 2.0;
    }
    // Bisect (geometric midpoint: rates span decades).
    while hi / lo - 1.0 > opts.rel_tol {
        let mid = (lo * hi).sqrt();
        let (m, s) = serve(mid)?;
        if m {
            lo = mid;
            at = s;
        } else {
            hi = mid;
        }
    }
    Ok(Capacity {
        max_qps: Some(lo),
        at,
        fails_at: Some(hi),
        probes,
        service_rps,
    })
}

/// Serves `base` at `qps` for a steady-state run ([`SteadyState::requests_at`] requests unless
/// the scenario replays a trace, which gives its own) and judges it.
pub fn serve_at(
    base: &RawServeScenario,
    slo: &Slo,
    steady: &SteadyState,
    qps: f64,
    service_rps: f64,
) -> Result<(Window, Summary, u64), CapacityError> {
    serve_at_with(
        base,
        slo,
        steady,
        qps,
        service_rps,
        CostScales::default(),
        &Silent,
    )
}

fn serve_at_with(
    base: &RawServeScenario,
    slo: &Slo,
    steady: &SteadyState,
    qps: f64,
    service_rps: f64,
    scales: CostScales,
    progress: &dyn Progress,
) -> Result<(Window, Summary, u64), CapacityError> {
    let mut raw = base.clone();
    raw.workload.qps = Some(qps);
    if raw.workload.trace.is_none() {
        let n = steady
            .requests_at(qps)
            .max(raw.workload.requests.unwrap_or(0));
        raw.workload.requests = Some(n);
    }
    let out = run_quiet(raw, scales, progress)?;
    let n = out.requests.len() as u64;
    Ok((judge(&out, slo, steady, qps, service_rps), out.summary, n))
}

/// Resolves and serves `raw` without the per-step series (the per-request records are judged:
/// at most [`MAX_STEADY_REQUESTS`] of them).
fn run_quiet(
    raw: RawServeScenario,
    scales: CostScales,
    progress: &dyn Progress,
) -> Result<ServeReport, CapacityError> {
    let mut sc = raw.resolve().map_err(Box::new)?;
    sc.config.record_timeseries = false;
    let requests = sc
        .request_stream()
        .map_err(|e| Box::new(ScenarioError::from(e)))?;
    sc.run_stream_scaled(requests, progress, scales)
        .map_err(|e| CapacityError::Scenario(Box::new(ScenarioError::from(e))))
}

/// A run of the search, named in the progress it reports.
struct Stage<'a> {
    inner: &'a dyn Progress,
    label: String,
}

impl Progress for Stage<'_> {
    fn start(&self, total: u64, what: &str) {
        self.inner.start(total, &format!("{what} {}", self.label));
    }
    fn set(&self, done: u64) {
        self.inner.set(done);
    }
}

fn check(base: &RawServeScenario, opts: SearchOptions) -> Result<(), CapacityError> {
    if let Some(a) = &base.workload.arrivals
        && a.trim() == "all-at-once"
    {
        return Err(CapacityError::Workload(
            "workload.arrivals: all-at-once has no rate to search; use poisson or gamma:CV \
             (or a trace, replayed at each rate)"
                .into(),
        ));
    }
    if !(opts.rel_tol.is_finite() && opts.rel_tol > 0.0 && opts.rel_tol < 1.0) {
        return Err(CapacityError::Setting {
            field: "capacity.rel_tol",
            why: format!("{} must be a fraction above 0 and below 1", opts.rel_tol),
        });
    }
    if !(opts.start_qps.is_finite() && opts.start_qps > 0.0 && opts.start_qps <= opts.max_qps) {
        return Err(CapacityError::Setting {
            field: "capacity.start_qps",
            why: format!(
                "{} must be more than 0 and at most {}",
                opts.start_qps, opts.max_qps
            ),
        });
    }
    Ok(())
}

/// US dollars per million tokens for `gpus` GPUs at `usd_per_gpu_hour` producing
/// `tokens_per_s` tokens per second.
pub fn usd_per_million_tokens(usd_per_gpu_hour: f64, gpus: u32, tokens_per_s: f64) -> Option<f64> {
    (tokens_per_s > 0.0).then(|| usd_per_gpu_hour * f64::from(gpus) / 3600.0 / tokens_per_s * 1e6)
}

/// One configuration's answer in a capacity comparison ([`compare_configurations`]).
#[derive(Debug, Clone, Serialize)]
pub struct ConfigCapacity {
    /// The hardware profile's name.
    pub hardware: String,
    /// Tensor-parallel GPUs per replica.
    pub tensor_parallel_size: u32,
    /// `None`: not even the lowest rate tried meets the SLO.
    pub max_qps: Option<f64>,
    /// The lowest rate found that misses it (`None`: the highest rate tried met it).
    pub fails_at_qps: Option<f64>,
    /// Why the next rate up fails (the terms it misses).
    pub limited_by: Vec<String>,
    /// Requests per second meeting every objective at `max_qps` (vLLM's goodput).
    pub goodput_rps: Option<f64>,
    /// TTFT percentiles at `max_qps` over the measured requests (rejected and truncated ones
    /// counted as infinite).
    pub ttft: Percentiles,
    /// TPOT percentiles at `max_qps`.
    pub tpot: Percentiles,
    /// E2E percentiles at `max_qps`.
    pub e2e: Percentiles,
    /// TTFT p99 at `max_qps`, seconds.
    pub ttft_p99_s: f64,
    /// TPOT p99 at `max_qps`, seconds.
    pub tpot_p99_s: f64,
    /// E2E p99 at `max_qps`, seconds.
    pub e2e_p99_s: f64,
    /// Output tokens per second at `max_qps`.
    pub output_tok_s: f64,
    /// Measured requests at `max_qps` that were rejected.
    pub rejected: u64,
    /// Measured requests at `max_qps` cut at max_model_len.
    pub truncated: u64,
    /// Requests in the measured window.
    pub measured_requests: u64,
    /// Requests served at `max_qps`.
    pub requests_per_rate: u64,
    /// Rates the search served.
    pub rates_served: usize,
    /// Price per million output tokens at `max_qps`, when the profile has one.
    pub usd_per_m_output_tokens: Option<f64>,
    /// Price per million tokens (prompt and output) at `max_qps`.
    pub usd_per_m_tokens: Option<f64>,
    /// The error band of `max_qps` (`None`: none asked for, or no rate met the SLO).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_qps_band: Option<Band>,
}

/// The error band of `value`, the highest rate `raw` sustains under `slo`: the search run once
/// per draw of `settings` with the kernel costs perturbed ([`crate::bands`]; in parallel), each
/// rate times the engine's validation residuals of time per output token, inverted (at
/// saturation the rate a server sustains goes as one over its time per token). A draw in which
/// no rate met the SLO counts as the lowest rate tried.
pub fn rate_band(
    raw: &RawServeScenario,
    slo: &Slo,
    opts: SearchOptions,
    settings: &BandSettings,
    value: f64,
) -> Result<Option<Band>, CapacityError> {
    use rayon::prelude::*;
    let spread = CostSpread::builtin();
    let draws: Vec<f64> = (settings.scales(&spread).par_iter())
        .map(|&scales| {
            let o = SearchOptions {
                scales,
                bands: None,
                ..opts
            };
            max_qps(raw, slo, o).map(|c| c.max_qps.unwrap_or(opts.min_qps))
        })
        .collect::<Result<_, _>>()?;
    let residuals: Vec<f64> = (Residuals::builtin().of(bands::Metric::TpotMean).iter())
        .map(|r| -r)
        .collect();
    Ok(band(value, &draws, &residuals, settings.coverage))
}

/// The answer of [`compare_configurations`].
#[derive(Debug, Clone)]
pub struct CapacityComparison {
    /// One row per hardware x tensor-parallel size, in the order given.
    pub rows: Vec<ConfigCapacity>,
}

/// The scenario a capacity comparison serves: `base` with the search's defaults (Poisson
/// arrivals unless it replays a trace; at least one request per rate).
pub fn search_base(mut base: RawServeScenario) -> RawServeScenario {
    let w = &mut base.workload;
    if w.trace.is_none() && w.arrivals.is_none() {
        w.arrivals = Some("poisson".into());
    }
    if let Some(n) = w.requests {
        w.requests = Some(n.max(1));
    }
    base
}

/// The configurations a comparison searches ([`compare_configurations`]) from comma-separated
/// lists: `hardware` (presets or profile files) and `tensor_parallel` sizes (`1,2,4`); a list
/// not given is empty (the scenario's).
pub fn configurations(
    hardware: Option<&str>,
    tensor_parallel: Option<&str>,
) -> Result<(Vec<String>, Vec<u32>), CapacityError> {
    fn items(list: Option<&str>) -> impl Iterator<Item = &str> {
        list.into_iter().flat_map(|l| l.split(','))
    }
    let hardware: Vec<String> = items(hardware).map(|h| h.trim().to_string()).collect();
    let tps = items(tensor_parallel)
        .map(|t| {
            t.trim()
                .parse::<u32>()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| CapacityError::Setting {
                    field: "serve.tensor_parallel_size",
                    why: format!("'{t}' is not a GPU count; give counts such as 1,2,4"),
                })
        })
        .collect::<Result<Vec<u32>, _>>()?;
    // A configuration given twice would be searched twice and shown twice.
    // (An empty name is left for the comparison to refuse as no hardware.)
    let named: Vec<&String> = hardware.iter().filter(|h| !h.is_empty()).collect();
    if let Some(h) = first_repeat(&named) {
        return Err(CapacityError::Setting {
            field: "hardware",
            why: format!("{h} is given twice; give each configuration once"),
        });
    }
    if let Some(t) = first_repeat(&tps) {
        return Err(CapacityError::Setting {
            field: "serve.tensor_parallel_size",
            why: format!("{t} is given twice; give each size once"),
        });
    }
    Ok((hardware, tps))
}

/// The first item that appears again later in `v`.
fn first_repeat<T: PartialEq>(v: &[T]) -> Option<&T> {
    v.iter()
        .enumerate()
        .find(|(i, x)| v[i + 1..].contains(x))
        .map(|(_, x)| x)
}

/// The highest rate under `slo` of every configuration `hardware` x `tensor_parallel` (empty:
/// the scenario's hardware; the scenario's tensor-parallel size, or 1), with dollars per million
/// tokens where the profile has a price. Sizing a deployment for a rate is
/// [`crate::deploy`]'s, which simulates the whole cluster. `base` is searched as
/// [`search_base`] gives it; `progress` hears how far each run of each search has come.
pub fn compare_configurations(
    base: &RawServeScenario,
    hardware: &[String],
    tensor_parallel: &[u32],
    slo: &Slo,
    opts: SearchOptions,
    progress: &dyn Progress,
) -> Result<CapacityComparison, CapacityError> {
    let hardware: Vec<String> = match (hardware, &base.hardware) {
        ([], Some(h)) => vec![h.clone()],
        (list, _) => list.to_vec(),
    };
    if hardware.is_empty() || hardware.iter().any(String::is_empty) {
        return Err(CapacityError::NoHardware);
    }
    let tps: Vec<u32> = match tensor_parallel {
        [] => vec![base.serve.tensor_parallel_size.unwrap_or(1)],
        list => list.to_vec(),
    };
    let mut rows = Vec::new();
    for h in &hardware {
        let profile = kvplan_vocab::HardwareProfile::resolve(h)?;
        for &tp in &tps {
            let mut raw = base.clone();
            raw.hardware = Some(h.clone());
            raw.serve.tensor_parallel_size = Some(tp);
            let stage = Stage {
                inner: progress,
                label: format!("on {} TP {tp}", profile.name),
            };
            let c = max_qps_with(&raw, slo, opts, &stage)?;
            let max_qps_band = match (opts.bands, c.max_qps) {
                (Some(settings), Some(value)) => rate_band(&raw, slo, opts, &settings, value)?,
                _ => None,
            };
            let limited_by = c
                .probes
                .iter()
                .find(|p| Some(p.qps) == c.fails_at)
                .map(|p| slo.misses(&p.window))
                .unwrap_or_default();
            let requests_per_rate = c
                .probes
                .iter()
                .find(|p| Some(p.qps) == c.max_qps)
                .map_or(0, |p| p.requests);
            let price = profile.gpu.price_usd_per_hour;
            let per_m = |tok_s: f64| price.and_then(|p| usd_per_million_tokens(p, tp, tok_s));
            let found = c.max_qps.is_some();
            rows.push(ConfigCapacity {
                hardware: profile.name.clone(),
                tensor_parallel_size: tp,
                max_qps: c.max_qps,
                fails_at_qps: c.fails_at,
                limited_by,
                goodput_rps: found.then_some(c.at.goodput_rps),
                ttft: c.at.ttft_s,
                tpot: c.at.tpot_s,
                e2e: c.at.e2e_s,
                ttft_p99_s: c.at.ttft_s.p99,
                tpot_p99_s: c.at.tpot_s.p99,
                e2e_p99_s: c.at.e2e_s.p99,
                output_tok_s: c.at.output_tokens_per_s,
                rejected: c.at.rejected,
                truncated: c.at.truncated,
                measured_requests: c.at.measured,
                requests_per_rate,
                rates_served: c.probes.len(),
                usd_per_m_output_tokens: found.then(|| per_m(c.at.output_tokens_per_s)).flatten(),
                usd_per_m_tokens: found.then(|| per_m(c.at.total_tokens_per_s)).flatten(),
                max_qps_band,
            });
        }
    }
    Ok(CapacityComparison { rows })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvplan_workloads::WorkloadConfig;

    #[test]
    fn slo_terms_parse_with_units_and_refuse_nonsense() {
        let s: Slo = "ttft_p99=2s, tpot_p99=100ms,e2e_p50=500us".parse().unwrap();
        assert_eq!(s.0.len(), 3);
        assert_eq!(s.0[1].metric, Metric::Tpot);
        assert!((s.0[1].limit_s - 0.1).abs() < 1e-15);
        assert!((s.0[2].limit_s - 5e-4).abs() < 1e-18);
        assert_eq!(s.to_string(), "ttft_p99=2s,tpot_p99=100ms,e2e_p50=500us");
        for (bad, needle) in [
            ("ttft=2s", "no percentile"),
            ("ttft_p97=2s", "unknown percentile 'p97'"),
            ("itl_p99=2s", "unknown metric 'itl'"),
            ("ttft_p99=2", "needs a unit"),
            ("ttft_p99=-1s", "more than 0"),
            ("ttft_p99=xs", "not a number"),
            ("ttft_p99", "no '='"),
            ("ttft_p99=1s,ttft_p99=2s", "given twice"),
            ("", "empty term"),
        ] {
            let e = bad.parse::<Slo>().unwrap_err().to_string();
            assert!(e.starts_with('\'') && e.contains(needle), "{bad}: {e}");
        }
    }

    fn scenario(requests: u64) -> RawServeScenario {
        crate::scenario::tests::llama_on_a100(WorkloadConfig {
            arrivals: Some("poisson".into()),
            prompt_lengths: Some("512".into()),
            output_lengths: Some("64".into()),
            requests: Some(requests),
            seed: Some(3),
            ..Default::default()
        })
    }

    #[test]
    fn the_rate_found_meets_the_slo_and_the_next_one_up_does_not() {
        let slo: Slo = "ttft_p99=500ms,tpot_p99=50ms".parse().unwrap();
        let c = max_qps(&scenario(300), &slo, SearchOptions::default()).unwrap();
        let q = c.max_qps.expect("some rate meets it");
        let hi = c.fails_at.expect("some rate misses it");
        assert!(hi / q - 1.0 <= 0.02 + 1e-12, "{q} .. {hi}");
        assert!(slo.met(&c.at));
        // Served again, independently: the bracket holds.
        let probe = |qps: f64| {
            serve_at(
                &scenario(300),
                &slo,
                &SearchOptions::default().steady,
                qps,
                c.service_rps,
            )
            .unwrap()
            .0
        };
        assert!(slo.met(&probe(q)));
        assert!(!slo.met(&probe(hi)));
        // A looser SLO sustains at least as much.
        let loose: Slo = "ttft_p99=5s,tpot_p99=200ms".parse().unwrap();
        let c2 = max_qps(&scenario(300), &loose, SearchOptions::default()).unwrap();
        assert!(c2.max_qps.unwrap() >= q, "{:?} vs {q}", c2.max_qps);
    }

    #[test]
    fn an_unreachable_slo_says_so_and_all_at_once_has_no_rate() {
        let slo: Slo = "tpot_p50=1us".parse().unwrap();
        let c = max_qps(&scenario(50), &slo, SearchOptions::default()).unwrap();
        assert!(c.max_qps.is_none());
        assert!(c.probes.iter().all(|p| !p.met));
        let mut raw = scenario(50);
        raw.workload.arrivals = Some("all-at-once".into());
        let e = max_qps(&raw, &slo, SearchOptions::default())
            .unwrap_err()
            .to_string();
        assert!(e.contains("all-at-once"), "{e}");
    }
}
