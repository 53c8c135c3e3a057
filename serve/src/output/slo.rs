//! Latency objectives: an [`Slo`] is a list of terms `METRIC_PCT=LIMIT`
//! (`ttft_p99=2s,tpot_p99=100ms`): metric `ttft`, `tpot`, `e2e` or `queue`; percentile `p50`,
//! `p90`, `p95` or `p99`; a limit in `s`, `ms` or `us`. Judged per request (vLLM's goodput rule)
//! and over a set of requests here; over a measured steady-state window in
//! [`crate::capacity`]. A leaf of the outputs, so the autoscaler's hourly report and the
//! capacity search share it without importing each other.

use std::fmt;

use super::{FinishReason, Percentiles, RequestRecord, Status};

/// A latency metric of the serving summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Time to first token.
    Ttft,
    /// Time per output token.
    Tpot,
    /// End-to-end latency.
    E2e,
    /// Time waiting before the first iteration.
    Queue,
}

impl Metric {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Metric::Ttft => "ttft",
            Metric::Tpot => "tpot",
            Metric::E2e => "e2e",
            Metric::Queue => "queue",
        }
    }

    pub(crate) fn of_request(self, r: &RequestRecord) -> f64 {
        match self {
            Metric::Ttft => r.ttft_s,
            Metric::Tpot => r.tpot_s,
            Metric::E2e => r.e2e_s,
            Metric::Queue => r.queue_s,
        }
    }
}

/// A percentile of the summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pct {
    /// Median.
    P50,
    /// 90th percentile.
    P90,
    /// 95th percentile.
    P95,
    /// 99th percentile.
    P99,
}

impl Pct {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Pct::P50 => "p50",
            Pct::P90 => "p90",
            Pct::P95 => "p95",
            Pct::P99 => "p99",
        }
    }

    pub(crate) fn of(self, p: &Percentiles) -> f64 {
        match self {
            Pct::P50 => p.p50,
            Pct::P90 => p.p90,
            Pct::P95 => p.p95,
            Pct::P99 => p.p99,
        }
    }
}

/// One objective: `metric` at `pct` within `limit_s` seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Term {
    /// The metric.
    pub metric: Metric,
    /// The percentile.
    pub pct: Pct,
    /// The limit, seconds.
    pub limit_s: f64,
}

impl Term {
    /// `ttft_p99`.
    pub fn name(&self) -> String {
        format!("{}_{}", self.metric.name(), self.pct.name())
    }
}

/// Latency objectives (all must hold).
#[derive(Debug, Clone, PartialEq)]
pub struct Slo(pub Vec<Term>);

/// A malformed SLO term.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("'{term}': {why}")]
pub struct SloError {
    /// The term as written.
    pub term: String,
    /// What is wrong and how to write it.
    pub why: String,
}

const FORM: &str = "write METRIC_PCT=LIMIT with METRIC ttft, tpot, e2e or queue, PCT p50, p90, p95 or p99, \
                    and LIMIT in s, ms or us, e.g. ttft_p99=2s,tpot_p99=100ms";

impl std::str::FromStr for Slo {
    type Err = SloError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = |term: &str, why: String| SloError {
            term: term.to_string(),
            why,
        };
        let mut terms: Vec<Term> = Vec::new();
        for raw in text.split(',').map(str::trim) {
            if raw.is_empty() {
                return Err(bad(raw, format!("an empty term; {FORM}")));
            }
            let (name, limit) = raw
                .split_once('=')
                .ok_or_else(|| bad(raw, format!("no '='; {FORM}")))?;
            let (metric, pct) = name
                .trim()
                .split_once('_')
                .ok_or_else(|| bad(raw, format!("no percentile; {FORM}")))?;
            let metric = match metric {
                "ttft" => Metric::Ttft,
                "tpot" => Metric::Tpot,
                "e2e" => Metric::E2e,
                "queue" => Metric::Queue,
                m => return Err(bad(raw, format!("unknown metric '{m}'; {FORM}"))),
            };
            let pct = match pct {
                "p50" => Pct::P50,
                "p90" => Pct::P90,
                "p95" => Pct::P95,
                "p99" => Pct::P99,
                p => return Err(bad(raw, format!("unknown percentile '{p}'; {FORM}"))),
            };
            let limit = limit.trim();
            let (number, scale) = if let Some(n) = limit.strip_suffix("ms") {
                (n, 1e-3)
            } else if let Some(n) = limit.strip_suffix("us") {
                (n, 1e-6)
            } else if let Some(n) = limit.strip_suffix('s') {
                (n, 1.0)
            } else {
                return Err(bad(raw, format!("the limit needs a unit; {FORM}")));
            };
            let value: f64 = number
                .trim()
                .parse()
                .map_err(|_| bad(raw, format!("'{number}' is not a number; {FORM}")))?;
            if !(value.is_finite() && value > 0.0 && value * scale <= 86_400.0) {
                return Err(bad(
                    raw,
                    "the limit must be more than 0 and at most a day".to_string(),
                ));
            }
            let term = Term {
                metric,
                pct,
                limit_s: value * scale,
            };
            if terms
                .iter()
                .any(|t| t.metric == term.metric && t.pct == term.pct)
            {
                return Err(bad(raw, format!("{} is given twice", term.name())));
            }
            terms.push(term);
        }
        Ok(Slo(terms))
    }
}

impl fmt::Display for Slo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|t| format!("{}={}", t.name(), show_seconds(t.limit_s)))
            .collect();
        write!(f, "{}", parts.join(","))
    }
}

/// `2s`, `100ms`, `50us`.
pub fn show_seconds(s: f64) -> String {
    if s.is_infinite() {
        "inf".into()
    } else if s >= 1.0 {
        format!("{}s", round(s))
    } else if s >= 1e-3 {
        format!("{}ms", round(s * 1e3))
    } else {
        format!("{}us", round(s * 1e6))
    }
}

/// Three decimals at most (`103.61`, `2.088`, `100`).
pub(crate) fn round(v: f64) -> f64 {
    (v * 1e3).round() / 1e3
}

impl Slo {
    /// The terms `requests` miss, as `ttft_p99 2.4s > 2s`: each percentile over the requests, a
    /// request not served whole counting as infinitely late (as `capacity::judge` counts it). None
    /// for no request.
    pub fn misses_of(&self, requests: &[&RequestRecord]) -> Vec<String> {
        if requests.is_empty() {
            return Vec::new();
        }
        let whole = |r: &RequestRecord| {
            r.status == Status::Finished && r.finish_reason != Some(FinishReason::Length)
        };
        (self.0.iter())
            .filter_map(|t| {
                let mut v: Vec<f64> = (requests.iter())
                    .map(|r| {
                        if whole(r) {
                            t.metric.of_request(r)
                        } else {
                            f64::INFINITY
                        }
                    })
                    .collect();
                let got = t.pct.of(&Percentiles::of(&mut v));
                (got > t.limit_s).then(|| {
                    format!(
                        "{} {} > {}",
                        t.name(),
                        show_seconds(got),
                        show_seconds(t.limit_s)
                    )
                })
            })
            .collect()
    }

    /// Whether one request meets every term's limit (vLLM's goodput rule, `<=`).
    pub fn request_ok(&self, r: &RequestRecord) -> bool {
        r.status == Status::Finished
            && r.finish_reason != Some(FinishReason::Length)
            && self.0.iter().all(|t| t.metric.of_request(r) <= t.limit_s)
    }
}

/// A run judged against objectives as vLLM's `bench serve` judges goodput (v0.15.1,
/// `vllm/benchmarks/serve.py`): a request is good when it finished and meets every objective's
/// limit itself; goodput is good requests per second of the run (first send to last finish).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Goodput {
    /// The objectives, as written.
    pub objectives: String,
    /// Requests in the run.
    pub requests: u64,
    /// Of those, good.
    pub good: u64,
    /// `good / requests`.
    pub attainment: f64,
    /// Seconds from the first send to the last finish.
    pub duration_s: f64,
    /// Good requests per second of it.
    pub goodput_rps: f64,
    /// The objectives the run's percentiles miss (`ttft_p99 2.4s > 2s`); empty when all hold.
    pub misses: Vec<String>,
}

impl Slo {
    /// `requests` judged against these objectives ([`Goodput`]).
    pub fn goodput(&self, requests: &[RequestRecord]) -> Goodput {
        let good = requests.iter().filter(|r| self.request_ok(r)).count() as u64;
        let start = requests
            .iter()
            .map(|r| r.arrival_s)
            .fold(f64::INFINITY, f64::min);
        let end = requests
            .iter()
            .filter(|r| r.status == Status::Finished && r.e2e_s.is_finite())
            .map(|r| r.arrival_s + r.e2e_s)
            .fold(f64::NEG_INFINITY, f64::max);
        let duration_s = if end > start { end - start } else { 0.0 };
        let n = requests.len() as u64;
        let refs: Vec<&RequestRecord> = requests.iter().collect();
        Goodput {
            objectives: self.to_string(),
            requests: n,
            good,
            attainment: if n > 0 { good as f64 / n as f64 } else { 0.0 },
            duration_s,
            goodput_rps: if duration_s > 0.0 {
                good as f64 / duration_s
            } else {
                0.0
            },
            misses: self.misses_of(&refs),
        }
    }
}
