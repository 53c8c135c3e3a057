//! Replays the real vLLM v0.15.1 runs on H100 (`data/validation/real_vllm/`, inference-perf's
//! shared-prefix load) with their settings and load, and holds the prediction to them:
//! - over the Llama-2-7B stages the real server served (not overloaded), the median |error| of
//!   E2E mean and of time per output token is at most 10%, of TTFT mean at most 25% (the
//!   issue's bands; TTFT is a few steps plus the client's HTTP and tokenisation overhead, which
//!   the profile's `serving.frontend_us` models as one figure);
//! - over the Mixtral-8x7B stages (two GPUs, tensor parallel), at most 15% for E2E mean and
//!   TPOT and 30% for TTFT mean (the mixture-of-experts issue's bands);
//! - no stage the real server served without a queue is predicted to queue or overload;
//! - the overloaded run is predicted overloaded.
//!
//! Other real runs (models, GPUs, workloads) are checked separately: these rows are not fitted
//! one by one; the mechanisms are (batched attention, CUDA graphs, asynchronous scheduling, prefix
//! caching, the V1 scheduler) and the fitted figures are in the profiles with their sources.

use std::path::PathBuf;

use kvplan_serve::runs::{StageComparison, StageRun};

fn table() -> Vec<StageRun> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../data/validation/real_vllm/vllm_h100_llama2-7b_mixtral-8x7b.csv");
    StageRun::read(&path).unwrap()
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Replays `stages` and prints predicted against measured; returns the comparisons and the
/// report.
fn replay(stages: &[StageRun]) -> (Vec<StageComparison>, String) {
    let mut rows: Vec<StageComparison> = Vec::new();
    for st in stages {
        let sc = st.scenario(None, None).unwrap().resolve().unwrap();
        let reqs = sc.requests().unwrap();
        let out = sc.run(&reqs).unwrap();
        rows.push(StageComparison::new(st, &out));
    }
    let mut report = format!(
        "{:<48} {:>5} | {:>17} | {:>17} | {:>17} | {:>15} | {}\n",
        "stage",
        "req/s",
        "TTFT ms p/m/err",
        "TPOT ms p/m/err",
        "E2E s p/m/err",
        "req/s p/m",
        "overloaded p/m"
    );
    for r in &rows {
        report += &format!(
            "{:<48} {:>5} | {:>5.1} {:>5.1} {:>+5.0}% | {:>5.2} {:>5.2} {:>+5.0}% | {:>5.2} {:>5.2} {:>+5.0}% | {:>6.2} {:>6.2} | {} {}\n",
            r.name,
            r.rate_rps,
            r.predicted.ttft_mean_s * 1e3,
            r.measured.ttft_mean_s * 1e3,
            r.ttft_error * 100.0,
            r.predicted.tpot_s * 1e3,
            r.measured.tpot_s * 1e3,
            r.tpot_error * 100.0,
            r.predicted.e2e_mean_s,
            r.measured.e2e_mean_s,
            r.e2e_error * 100.0,
            r.predicted.throughput_rps,
            r.measured.throughput_rps,
            r.predicted.overloaded,
            r.measured.overloaded,
        );
    }
    eprintln!("{report}");
    (rows, report)
}

/// The median |error| of E2E mean, TPOT and TTFT mean over the served stages.
fn medians(served: &[&StageComparison]) -> (f64, f64, f64) {
    let med = |f: fn(&StageComparison) -> f64| {
        let mut v: Vec<f64> = served.iter().map(|r| f(r).abs()).collect();
        median(&mut v)
    };
    let m = (
        med(|r| r.e2e_error),
        med(|r| r.tpot_error),
        med(|r| r.ttft_error),
    );
    eprintln!(
        "median |error|: E2E {:.1}%, TPOT {:.1}%, TTFT {:.1}%",
        m.0 * 100.0,
        m.1 * 100.0,
        m.2 * 100.0
    );
    m
}

/// No served stage is predicted to overload or queue; every overloaded one is predicted so.
fn check_load(rows: &[StageComparison], report: &str) {
    for r in rows.iter().filter(|r| !r.measured.overloaded) {
        assert!(
            !r.predicted.overloaded,
            "{} predicted overloaded\n{report}",
            r.name
        );
        // The real server's TTFT stayed under 75 ms: a predicted queue of a second or more
        // would be a queue it did not have.
        assert!(
            r.predicted_queue_mean_s < 1.0,
            "{} predicted to queue {} s\n{report}",
            r.name,
            r.predicted_queue_mean_s
        );
    }
    for r in rows.iter().filter(|r| r.measured.overloaded) {
        assert!(
            r.predicted.overloaded,
            "{} not predicted overloaded\n{report}",
            r.name
        );
    }
}

#[test]
fn llama_2_7b_on_h100_within_the_bands() {
    let stages: Vec<StageRun> = table()
        .into_iter()
        .filter(|s| s.model_hf == "meta-llama/Llama-2-7b-hf")
        .collect();
    assert_eq!(stages.len(), 6, "5 served stages and the overloaded one");
    let (rows, report) = replay(&stages);
    let served: Vec<&StageComparison> = rows.iter().filter(|r| !r.measured.overloaded).collect();
    assert_eq!(served.len(), 5);
    let (e2e, tpot, ttft) = medians(&served);
    assert!(e2e <= 0.10, "E2E median |error| {e2e}\n{report}");
    assert!(tpot <= 0.10, "TPOT median |error| {tpot}\n{report}");
    assert!(ttft <= 0.25, "TTFT median |error| {ttft}\n{report}");
    check_load(&rows, &report);
}

/// Mixtral-8x7B (8 experts, top-2) on two H100s, tensor parallel, with the same settings and
/// load as the Llama runs: the bands, 15% for E2E mean and TPOT and 30% for TTFT mean.
/// Nothing here is fitted to these rows: the profile and host figures are the Llama fit's; what
/// the MoE adds is its mechanism (the expert GEMMs reading the distinct experts hit, the router,
/// the two all-reduces of tensor parallelism). Reached when this was written: E2E 2.4%, TPOT
/// 2.3%, TTFT 17.2%, TTFT low in every stage (6-19%): the measured means carry a tail (p99 of
/// 380-480 ms in two stages whose p90 sits below their mean) that nothing here predicts, and
/// the multiprocess executor's per-step messages between the engine and its two workers,
/// which delay a token's way out but not the steps' rate, are not modelled.
#[test]
fn mixtral_8x7b_tp2_on_h100_within_the_bands() {
    let stages: Vec<StageRun> = table()
        .into_iter()
        .filter(|s| s.model_hf == "mistralai/Mixtral-8x7B-v0.1")
        .collect();
    assert_eq!(stages.len(), 6, "5 served stages and the overloaded one");
    assert!(stages.iter().all(|s| s.tp == 2));
    let (rows, report) = replay(&stages);
    let served: Vec<&StageComparison> = rows.iter().filter(|r| !r.measured.overloaded).collect();
    assert_eq!(served.len(), 5);
    let (e2e, tpot, ttft) = medians(&served);
    assert!(e2e <= 0.15, "E2E median |error| {e2e}\n{report}");
    assert!(tpot <= 0.15, "TPOT median |error| {tpot}\n{report}");
    assert!(ttft <= 0.30, "TTFT median |error| {ttft}\n{report}");
    check_load(&rows, &report);
}
