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

mod compare;
mod error;
mod search;
mod steady;

pub use crate::output::slo::{Metric, Pct, Slo, SloError, Term, show_seconds};
pub use compare::{
    CapacityComparison, ConfigCapacity, compare_configurations, configurations, rate_band,
    search_base, usd_per_million_tokens,
};
pub use error::CapacityError;
pub use search::{Capacity, Probe, SearchOptions, max_qps, max_qps_with};
pub use steady::{SteadyState, Window, completion_rate, judge, serve_at, service_rate};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::RawServeScenario;
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
