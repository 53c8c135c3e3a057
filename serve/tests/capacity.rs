//! `capacity --slo` finds a rate that holds at steady state: served again for ten times as many
//! requests (and ten times as long), it still meets the objectives; 2% above it, it does not.

use kvplan_serve::capacity::{SearchOptions, Slo, SteadyState, max_qps, serve_at};
use kvplan_serve::scenario::RawServeScenario;
use kvplan_workloads::WorkloadConfig;

fn scenario() -> RawServeScenario {
    RawServeScenario {
        model: Some("llama-2-7b".into()),
        hardware: Some("h100-sxm".into()),
        workload: WorkloadConfig {
            arrivals: Some("poisson".into()),
            prompt_lengths: Some("512".into()),
            output_lengths: Some("128".into()),
            seed: Some(3),
            ..Default::default()
        },
        serve: Default::default(),
        cluster: Default::default(),
    }
}

#[test]
fn the_rate_found_holds_ten_times_longer_and_two_percent_more_fails() {
    // The example: a TTFT objective loose enough that only a growing queue breaks it.
    for slo in ["ttft_p99=20s,tpot_p99=200ms", "ttft_p99=1s,tpot_p99=50ms"] {
        let slo: Slo = slo.parse().unwrap();
        let opts = SearchOptions::default();
        let c = max_qps(&scenario(), &slo, opts).unwrap();
        let q = c.max_qps.expect("a rate meets the SLO");
        let long = SteadyState {
            min_requests: 10 * opts.steady.min_requests,
            min_duration_s: 10.0 * opts.steady.min_duration_s,
            ..opts.steady
        };
        let (w, _, n) = serve_at(&scenario(), &slo, &long, q, c.service_rps).unwrap();
        eprintln!(
            "{slo}: {q:.2} req/s (service {:.2}); x10 ({n} requests): ttft p99 {:.3} s, tpot p99 \
             {:.4} s, growth {:.3} s, goodput {:.2}",
            c.service_rps, w.ttft_s.p99, w.tpot_s.p99, w.queue_growth_s, w.goodput_rps
        );
        assert!(slo.met(&w), "{slo} at {q} x10: {:?}", slo.misses(&w));
        let (above, _, _) =
            serve_at(&scenario(), &slo, &opts.steady, q * 1.02, c.service_rps).unwrap();
        assert!(!slo.met(&above), "{slo} at {} still met", q * 1.02);
        // Goodput at the found rate is close to the rate: nearly every request meets every
        // objective itself.
        assert!(c.at.goodput_rps > 0.9 * q, "{} vs {q}", c.at.goodput_rps);
    }
}

#[test]
fn configurations_come_from_comma_separated_lists() {
    use kvplan_serve::capacity::{CapacityError, configurations};
    let (hw, tps) = configurations(Some(" a100-80g-sxm , h100-sxm"), Some("1, 2,4")).unwrap();
    assert_eq!(hw, ["a100-80g-sxm", "h100-sxm"]);
    assert_eq!(tps, [1, 2, 4]);
    let (hw, tps) = configurations(None, None).unwrap();
    assert!(hw.is_empty() && tps.is_empty(), "the scenario's own");
    // An empty hardware name is kept for the comparison to refuse.
    assert_eq!(configurations(Some(","), None).unwrap().0, ["", ""]);
    for bad in ["0", "1, two", "-1", ""] {
        let Err(CapacityError::Setting { field, why }) = configurations(None, Some(bad)) else {
            panic!("{bad} is not a list of GPU counts");
        };
        assert_eq!(field, "serve.tensor_parallel_size");
        assert!(
            why.ends_with("is not a GPU count; give counts such as 1,2,4"),
            "{why}"
        );
    }
    let Err(CapacityError::Setting { why, .. }) = configurations(None, Some("1, two")) else {
        unreachable!()
    };
    assert!(why.starts_with("' two'"), "the count as written: {why}");
}
