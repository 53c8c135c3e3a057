//! One rate at steady state: a configuration served at an offered rate, its measured window
//! judged against the objectives ([`judge`]), and its service rate when always backlogged.

use kvplan_vocab::{Progress, Silent};
use serde::Serialize;

use super::error::CapacityError;
use crate::iteration::CostScales;
use crate::output::slo::{Metric, Slo, Term, round, show_seconds};
use crate::output::{FinishReason, Percentiles, RequestRecord, ServeReport, Status, Summary};
use crate::scenario::{RawServeScenario, ScenarioError};

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
pub(super) fn service_rate_with(
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

pub(super) fn serve_at_with(
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
/// at most [`MAX_STEADY_REQUESTS`](crate::scenario::MAX_STEADY_REQUESTS) of them).
pub(super) fn run_quiet(
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
pub(super) struct Stage<'a> {
    pub(super) inner: &'a dyn Progress,
    pub(super) label: String,
}

impl Progress for Stage<'_> {
    fn start(&self, total: u64, what: &str) {
        self.inner.start(total, &format!("{what} {}", self.label));
    }
    fn set(&self, done: u64) {
        self.inner.set(done);
    }
}
