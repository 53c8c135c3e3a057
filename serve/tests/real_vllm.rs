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
/// load as the Llama runs: the bands, 15% for E2E mean and TPOT and 30% for TTFT mean,
/// and TTFT's signed bias (the median signed error) within 8%. The profile and host figures
/// are the Llama fit's; what the MoE adds is its mechanism (the expert GEMMs reading the
/// distinct experts hit, the router, the two all-reduces of tensor parallelism) and, in each
/// run's first stage (a freshly started server), the fused-MoE kernels Triton compiles on
/// first use (`kvplan_serve::warmup`), whose one figure, the compile time, is fitted to those
/// three stages ([`first_stage_compile_time_is_the_fit`]). Before that mechanism: TTFT 17.2%
/// median |error|, bias -17%; with it (when this was written): 2.3%, bias -2%; E2E 2.4% and
/// TPOT 2.3% either way. The 20 req/s stage stays 19% low: its measured mean carries requests
/// that found 128 in flight (`max_num_seqs`), which the simulated server reaches far less often.
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
    let mut signed: Vec<f64> = served.iter().map(|r| r.ttft_error).collect();
    let bias = median(&mut signed);
    assert!(bias.abs() < 0.08, "TTFT bias {bias}\n{report}");
    check_load(&rows, &report);
}

/// `[serving] kernel_compile_us` is the fit: over the three Mixtral runs' first stages (each a
/// freshly started server, replayed cold), the squared TTFT-mean errors sum to less at the
/// built-in figure than at three quarters or five quarters of it, and their mean signed error
/// is within 5% (a scan from 0.3 to 0.7 s in 25-50 ms steps found the least sum at 0.6 s; one
/// stage moves by up to 5% between neighbouring figures, as the kernels a run meets, and
/// when, move with its timing). Nothing else is fitted to these stages.
#[test]
fn first_stage_compile_time_is_the_fit() {
    use kvplan_vocab::serving::KERNEL_COMPILE_US;
    let stages: Vec<StageRun> = table()
        .into_iter()
        .filter(|s| s.model_hf == "mistralai/Mixtral-8x7B-v0.1" && s.stage == 0 && !s.overloaded)
        .collect();
    assert_eq!(stages.len(), 3);
    let errors = |scale: f64| -> Vec<f64> {
        use rayon::prelude::*;
        (stages.par_iter())
            .map(|st| {
                let mut sc = st.scenario(None, None).unwrap().resolve().unwrap();
                assert!(sc.config.cold_start, "a first stage replays a fresh server");
                sc.hardware.serving.kernel_compile_us = KERNEL_COMPILE_US * scale;
                let reqs = sc.requests().unwrap();
                let out = sc.run(&reqs).unwrap();
                let c = out.summary.first_use_compilation.expect("cold");
                assert!(c.kernels > 0, "{}: nothing compiled", st.name);
                StageComparison::new(st, &out).ttft_error
            })
            .collect()
    };
    let sse = |e: &[f64]| e.iter().map(|x| x * x).sum::<f64>();
    let at = errors(1.0);
    let (lo, hi) = (errors(0.75), errors(1.25));
    eprintln!("TTFT errors at 0.75x {lo:?}, 1x {at:?}, 1.25x {hi:?}");
    assert!(
        sse(&at) < sse(&lo) && sse(&at) < sse(&hi),
        "{lo:?} {at:?} {hi:?}"
    );
    let mean = at.iter().sum::<f64>() / at.len() as f64;
    assert!(mean.abs() < 0.05, "mean signed TTFT error {mean}");
}

/// Replays every stage of the table: each stage with its serving report.
fn replay_all(
    stages: &[StageRun],
) -> Vec<(
    kvplan_serve::scenario::ServeScenario,
    Vec<kvplan_workloads::Request>,
    kvplan_serve::ServeReport,
)> {
    use rayon::prelude::*;
    stages
        .par_iter()
        .map(|st| {
            let sc = st.scenario(None, None).unwrap().resolve().unwrap();
            let reqs = sc.requests().unwrap();
            let out = sc.run(&reqs).unwrap();
            (sc, reqs, out)
        })
        .collect()
}

/// The error bands' built-in residuals (`kvplan_serve::bands::BUILTIN_RESIDUALS`) are this
/// replay's, to four decimals: when the simulator changes, the bands follow on purpose (paste
/// the printed table).
#[test]
fn the_bands_residuals_are_the_replays() {
    use kvplan_serve::bands::BUILTIN_RESIDUALS;
    use kvplan_serve::fidelity::stage_residuals;
    let stages = table();
    let runs = replay_all(&stages);
    let mut table = String::new();
    let mut got = Vec::new();
    for (st, (_, _, out)) in stages.iter().zip(&runs) {
        if let Some(r) = stage_residuals(st, out) {
            let r = r.map(|x| (x * 1e4).round() / 1e4);
            table += &format!(
                "    StageResiduals {{\n        name: \"{}\",\n        values: [{}],\n    }},\n",
                st.name,
                r.iter()
                    .map(|x| if x.is_nan() {
                        "f64::NAN".to_string()
                    } else {
                        format!("{x:?}")
                    })
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            got.push((st.name.clone(), r));
        }
    }
    assert_eq!(got.len(), 10, "the ten served stages");
    let same = got.len() == BUILTIN_RESIDUALS.len()
        && got.iter().zip(BUILTIN_RESIDUALS).all(|((n, v), b)| {
            n == b.name
                && v.iter()
                    .zip(&b.values)
                    .all(|(x, y)| (x.is_nan() && y.is_nan()) || x == y)
        });
    assert!(same, "set BUILTIN_RESIDUALS to\n{table}");
}

/// Held apart: bands drawn with the residuals of half of the served stages (every other one,
/// in table order, so each half holds both models and both loads) are judged on the other
/// half, both ways round: the measured TTFT mean and p99, TPOT, E2E mean and p99 and
/// throughput of each stage against its 80% bands. Reached when this was written: 47 of 60
/// (77%); the test holds the count to 60-95% (a band much too narrow or too wide fails) and
/// every band to a width above zero.
#[test]
fn bands_cover_held_apart_stages_at_about_their_coverage() {
    use kvplan_serve::bands::{
        BandSettings, CostSpread, Metric, Residuals, perturbed_runs, serve_bands,
    };
    use kvplan_serve::fidelity::stage_residuals;
    let stages = table();
    let runs = replay_all(&stages);
    let served: Vec<usize> = (0..stages.len())
        .filter(|&i| stage_residuals(&stages[i], &runs[i].2).is_some())
        .collect();
    assert_eq!(served.len(), 10);
    let settings = BandSettings {
        draws: 8,
        ..BandSettings::default()
    };
    let spread = CostSpread::builtin();
    let (mut covered, mut checked) = (0, 0);
    let mut report = String::new();
    for half in 0..2 {
        let fit = Residuals {
            stages: (served.iter().enumerate())
                .filter(|(k, _)| k % 2 == half)
                .map(|(_, &i)| kvplan_serve::bands::StageResiduals {
                    name: "fit",
                    values: stage_residuals(&stages[i], &runs[i].2).unwrap(),
                })
                .collect(),
        };
        for (_, &i) in served.iter().enumerate().filter(|(k, _)| k % 2 != half) {
            let (st, (sc, reqs, out)) = (&stages[i], &runs[i]);
            let drawn = perturbed_runs(sc, reqs, &spread, &settings).unwrap();
            let bands = serve_bands(out, &drawn, &fit, spread, &settings);
            let measured = [
                (Metric::TtftMean, Some(st.ttft_mean_s)),
                (Metric::TtftP99, st.ttft_p99_s),
                (Metric::TpotMean, Some(st.tpot_s)),
                (Metric::E2eMean, Some(st.e2e_mean_s)),
                (Metric::E2eP99, st.e2e_p99_s),
                (Metric::RequestsPerS, Some(st.throughput_rps)),
            ];
            for (m, x) in measured {
                let x = x.unwrap();
                let b = bands.get(m).unwrap();
                assert!(
                    b.hi > b.lo,
                    "{} {}: zero-width band {b:?}",
                    st.name,
                    m.as_str()
                );
                checked += 1;
                let hit = b.covers(x);
                covered += usize::from(hit);
                report += &format!(
                    "{:<58} {:<14} {:>12.4} in [{:.4}, {:.4}] (value {:.4}): {}\n",
                    st.name,
                    m.as_str(),
                    x,
                    b.lo,
                    b.hi,
                    b.value,
                    if hit { "covered" } else { "missed" }
                );
            }
        }
    }
    eprintln!("{report}covered {covered} of {checked}");
    assert_eq!(checked, 60);
    let share = covered as f64 / checked as f64;
    assert!(
        (0.6..=0.95).contains(&share),
        "80% bands covered {covered} of {checked}\n{report}"
    );
}
