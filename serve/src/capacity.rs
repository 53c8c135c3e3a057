//! SLO capacity: the highest request rate a serving configuration sustains under latency
//! objectives, by bisection on the serving simulator.
//!
//! An [`Slo`] is a list of terms `METRIC_PCT=LIMIT` (`ttft_p99=2s,tpot_p99=100ms`): metric
//! `ttft`, `tpot`, `e2e` or `queue`; percentile `p50`, `p90` or `p99`; a limit in `s`, `ms` or
//! `us`. A rate meets the SLO when every term's percentile over the finished requests is within
//! its limit and at least one request finished. [`max_qps`] searches the scenario's arrival rate
//! (`workload.qps`: a Poisson or Gamma process, or a trace replay rescaled to that rate):
//! halving from a start rate until a rate meets the SLO, doubling until one does not, then
//! bisecting until the two are within a relative tolerance. Every evaluation serves the same
//! seeded requests at another rate, so the search is deterministic.

use std::fmt;

use crate::output::{Percentiles, Summary};
use crate::scenario::{RawServeScenario, ScenarioError};

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
    fn name(self) -> &'static str {
        match self {
            Metric::Ttft => "ttft",
            Metric::Tpot => "tpot",
            Metric::E2e => "e2e",
            Metric::Queue => "queue",
        }
    }

    fn of(self, s: &Summary) -> &Percentiles {
        match self {
            Metric::Ttft => &s.ttft_s,
            Metric::Tpot => &s.tpot_s,
            Metric::E2e => &s.e2e_s,
            Metric::Queue => &s.queue_s,
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
    /// 99th percentile.
    P99,
}

impl Pct {
    fn name(self) -> &'static str {
        match self {
            Pct::P50 => "p50",
            Pct::P90 => "p90",
            Pct::P99 => "p99",
        }
    }

    fn of(self, p: &Percentiles) -> f64 {
        match self {
            Pct::P50 => p.p50,
            Pct::P90 => p.p90,
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

    /// The term's value in a summary, seconds.
    pub fn observed(&self, s: &Summary) -> f64 {
        self.pct.of(self.metric.of(s))
    }
}

/// Latency objectives (all must hold).
#[derive(Debug, Clone, PartialEq)]
pub struct Slo(pub Vec<Term>);

/// Errors of the SLO search.
#[derive(Debug, thiserror::Error)]
pub enum CapacityError {
    /// A malformed `--slo` term.
    #[error("--slo: '{term}': {why}")]
    Slo {
        /// The term as written.
        term: String,
        /// What is wrong and how to write it.
        why: String,
    },
    /// The workload cannot be run at another rate.
    #[error("{0}")]
    Workload(String),
    /// A search setting out of range.
    #[error("{field}: {why}")]
    Setting {
        /// The flag.
        field: &'static str,
        /// What is wrong.
        why: String,
    },
    /// The scenario does not resolve or run.
    #[error(transparent)]
    Scenario(#[from] Box<ScenarioError>),
}

const FORM: &str = "write METRIC_PCT=LIMIT with METRIC ttft, tpot, e2e or queue, PCT p50, p90 or p99, \
                    and LIMIT in s, ms or us, e.g. ttft_p99=2s,tpot_p99=100ms";

impl std::str::FromStr for Slo {
    type Err = CapacityError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bad = |term: &str, why: String| CapacityError::Slo {
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
    if s >= 1.0 {
        format!("{}s", round(s))
    } else if s >= 1e-3 {
        format!("{}ms", round(s * 1e3))
    } else {
        format!("{}us", round(s * 1e6))
    }
}

/// Three decimals at most (`103.61`, `2.088`, `100`).
fn round(v: f64) -> f64 {
    (v * 1e3).round() / 1e3
}

impl Slo {
    /// Whether `s` meets every term (and some request finished).
    pub fn met(&self, s: &Summary) -> bool {
        s.finished > 0 && self.0.iter().all(|t| t.observed(s) <= t.limit_s)
    }

    /// The terms `s` misses, as `ttft_p99 2.4s > 2s`.
    pub fn misses(&self, s: &Summary) -> Vec<String> {
        self.0
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
            .collect()
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
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            start_qps: 1.0,
            rel_tol: 0.02,
            min_qps: 1.0 / 1024.0,
            max_qps: 1e5,
        }
    }
}

/// One rate the search served.
#[derive(Debug, Clone)]
pub struct Probe {
    /// Requests/s offered.
    pub qps: f64,
    /// Whether it met the SLO.
    pub met: bool,
    /// Its summary.
    pub summary: Summary,
}

/// The result of [`max_qps`].
#[derive(Debug, Clone)]
pub struct Capacity {
    /// The highest rate found that meets the SLO (`None`: not even `min_qps`).
    pub max_qps: Option<f64>,
    /// The summary at that rate (or at the lowest rate tried when none met).
    pub at: Summary,
    /// The lowest rate found that misses it (`None`: `max_qps` itself met it).
    pub fails_at: Option<f64>,
    /// Every rate served, in order.
    pub probes: Vec<Probe>,
}

/// The highest arrival rate `base` sustains under `slo` (see the module docs).
pub fn max_qps(
    base: &RawServeScenario,
    slo: &Slo,
    opts: SearchOptions,
) -> Result<Capacity, CapacityError> {
    check(base, opts)?;
    let mut probes: Vec<Probe> = Vec::new();
    let mut serve = |qps: f64| -> Result<(bool, Summary), CapacityError> {
        let mut raw = base.clone();
        raw.workload.qps = Some(qps);
        let sc = raw.resolve().map_err(Box::new)?;
        let requests = sc
            .requests()
            .map_err(|e| Box::new(ScenarioError::from(e)))?;
        let out = sc
            .run(&requests)
            .map_err(|e| Box::new(ScenarioError::from(e)))?;
        let met = slo.met(&out.summary);
        probes.push(Probe {
            qps,
            met,
            summary: out.summary.clone(),
        });
        Ok((met, out.summary))
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
    })
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
            field: "--tolerance",
            why: format!("{} must be a fraction above 0 and below 1", opts.rel_tol),
        });
    }
    if !(opts.start_qps.is_finite() && opts.start_qps > 0.0 && opts.start_qps <= opts.max_qps) {
        return Err(CapacityError::Setting {
            field: "--start-qps",
            why: format!(
                "{} must be more than 0 and at most {}",
                opts.start_qps, opts.max_qps
            ),
        });
    }
    Ok(())
}

/// A configuration's cost to serve `target_qps`: replicas of `gpus_per_replica` GPUs, each
/// sustaining `max_qps`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sizing {
    /// Replicas needed: `ceil(target / max_qps)`.
    pub replicas: u64,
    /// GPUs in all.
    pub gpus: u64,
    /// Price of those GPUs per hour, when the profile gives one.
    pub usd_per_hour: Option<f64>,
}

/// Replicas and GPUs to serve `target_qps` with configurations of `max_qps` each.
pub fn size_for(
    target_qps: f64,
    max_qps: f64,
    gpus_per_replica: u32,
    usd_per_gpu_hour: Option<f64>,
) -> Sizing {
    let replicas = (target_qps / max_qps).ceil().max(1.0) as u64;
    let gpus = replicas * u64::from(gpus_per_replica);
    Sizing {
        replicas,
        gpus,
        usd_per_hour: usd_per_gpu_hour.map(|p| p * gpus as f64),
    }
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
            ("ttft_p95=2s", "unknown percentile 'p95'"),
            ("itl_p99=2s", "unknown metric 'itl'"),
            ("ttft_p99=2", "needs a unit"),
            ("ttft_p99=-1s", "more than 0"),
            ("ttft_p99=xs", "not a number"),
            ("ttft_p99", "no '='"),
            ("ttft_p99=1s,ttft_p99=2s", "given twice"),
            ("", "empty term"),
        ] {
            let e = bad.parse::<Slo>().unwrap_err().to_string();
            assert!(e.starts_with("--slo: ") && e.contains(needle), "{bad}: {e}");
        }
    }

    fn scenario(requests: u64) -> RawServeScenario {
        RawServeScenario {
            model: Some("llama-2-7b".into()),
            hardware: Some("a100-80g-sxm".into()),
            workload: WorkloadConfig {
                arrivals: Some("poisson".into()),
                prompt_lengths: Some("512".into()),
                output_lengths: Some("64".into()),
                requests: Some(requests),
                seed: Some(3),
                ..Default::default()
            },
            serve: Default::default(),
        }
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
            let mut raw = scenario(300);
            raw.workload.qps = Some(qps);
            let sc = raw.resolve().unwrap();
            sc.run(&sc.requests().unwrap()).unwrap().summary
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

    #[test]
    fn sizing_rounds_replicas_up() {
        let s = size_for(10.0, 3.0, 2, Some(4.0));
        assert_eq!((s.replicas, s.gpus), (4, 8));
        assert_eq!(s.usd_per_hour, Some(32.0));
        assert_eq!(size_for(1.0, 3.0, 1, None).replicas, 1);
    }
}
