//! `kvplan_planner::run`: the rules of `compare`, and `simulate_scenario` against the plain calls.

use kvplan_planner::plan::Strategy;
use kvplan_planner::report::RunReport;
use kvplan_planner::run::{RunError, compare, simulate_scenario};
use kvplan_planner::scenario::{RawScenario, RawWorkload, Scenario};

fn scenario(model: &str, hardware: &str, batch: i64, prompt: i64, gen_len: i64) -> Scenario {
    RawScenario {
        model: Some(model.into()),
        hardware: Some(hardware.into()),
        workload: RawWorkload {
            batch: Some(batch),
            prompt: Some(prompt),
            gen_len: Some(gen_len),
            ..RawWorkload::default()
        },
        ..RawScenario::default()
    }
    .resolve()
    .unwrap()
}

#[test]
fn simulate_scenario_is_plan_then_simulate() {
    let sc = scenario("opt-1.3b", "a100-40g-pcie4", 8, 64, 4);
    let run = simulate_scenario(&sc).unwrap();
    let p = sc.plan().unwrap();
    let t = kvplan_sim::simulate(&p.schedule, &sc.cost_model()).unwrap();
    assert_eq!(run.report, RunReport::new(&p, &t));
    assert_eq!(run.plan.strategy, Strategy::KVPR);
}

#[test]
fn compare_skips_what_does_not_fit_and_keeps_the_order() {
    // OPT-30B's weights alone overflow a T4: gpu-only cannot run, the offloading strategies can.
    let sc = scenario("opt-30b", "t4", 4, 64, 3);
    let c = compare(&sc).unwrap();
    let ran: Vec<Strategy> = c.runs.iter().map(|r| r.plan.strategy).collect();
    assert_eq!(ran, [Strategy::KVPR, Strategy::FULL_TRANSFER]);
    assert_eq!(c.skipped.len(), 1);
    assert_eq!(c.skipped[0].strategy, Strategy::GPU_ONLY);
    assert!(c.skipped[0].error.is_input_error());
    let r = c.kvpr_vs_full_transfer.unwrap();
    let (k, f) = (&c.runs[0].report, &c.runs[1].report);
    assert_eq!(
        r.decode_latency_ratio,
        k.decode_latency_s / f.decode_latency_s
    );
    assert_eq!(
        r.throughput_ratio,
        k.decode_throughput_tok_s / f.decode_throughput_tok_s
    );
}

#[test]
fn compare_without_decode_has_no_ratio() {
    let c = compare(&scenario("opt-125m", "a100-40g-pcie4", 2, 16, 1)).unwrap();
    assert_eq!(c.runs.len(), 3);
    assert!(c.kvpr_vs_full_transfer.is_none());
}

#[test]
fn compare_with_nothing_that_fits_is_an_input_error() {
    // A cache of hundreds of TB fits neither the GPU nor host RAM.
    let e = compare(&scenario("opt-6.7b", "t4", 4096, 100_000, 2)).unwrap_err();
    assert!(e.is_input_error());
    let RunError::NothingRuns { skipped } = &e else {
        panic!("{e}")
    };
    assert_eq!(skipped.len(), 3);
    assert!(
        e.to_string()
            .starts_with("no strategy can run this scenario; kvpr: "),
        "{e}"
    );
}

/// The op-level scenario takes vLLM's `quantization` and `kv_cache_dtype`: an fp8 cache halves
/// the KV bytes every step moves, so plain offload decodes faster; quantised weights shrink
/// what a resident model holds; a method the GPU cannot run, or an unknown one, names its field.
#[test]
fn quantised_weights_and_an_fp8_cache_in_the_op_level_scenario() {
    use kvplan_planner::scenario::{Field, RawScenario, RawWorkload, ScenarioError};
    let raw = |hardware: &str, q: Option<&str>, kv: Option<&str>, strategy: &str| RawScenario {
        model: Some("opt-1.3b".into()),
        hardware: Some(hardware.into()),
        strategy: Some(strategy.into()),
        quantization: q.map(str::to_string),
        kv_cache_dtype: kv.map(str::to_string),
        workload: RawWorkload {
            batch: Some(16),
            prompt: Some(512),
            gen_len: Some(8),
            ..Default::default()
        },
        ..Default::default()
    };
    let run = |r: RawScenario| {
        let sc = r.resolve().unwrap();
        kvplan_planner::run::simulate_scenario(&sc).unwrap().report
    };
    let a100 = "a100-40g-pcie4";
    let kv16 = raw(a100, None, None, "full-transfer").resolve().unwrap();
    let kv8 = raw(a100, None, Some("fp8"), "full-transfer")
        .resolve()
        .unwrap();
    assert_eq!(
        2 * kv8.model.kv_bytes_per_token_layer(),
        kv16.model.kv_bytes_per_token_layer()
    );
    let (t16, t8) = (
        run(raw(a100, None, None, "full-transfer")),
        run(raw(a100, None, Some("fp8"), "full-transfer")),
    );
    assert!(
        t8.h2d_bytes < t16.h2d_bytes,
        "{} {}",
        t8.h2d_bytes,
        t16.h2d_bytes
    );
    assert!(t8.decode_latency_s < t16.decode_latency_s);
    let (w16, w4) = (
        run(raw(a100, None, None, "gpu-only")),
        run(raw(a100, Some("awq"), None, "gpu-only")),
    );
    assert!(w4.peak_gpu_bytes < w16.peak_gpu_bytes);
    // t4 (compute capability 7.5) cannot run fp8; `int3` is no method.
    for (hw, q) in [("t4", "fp8"), (a100, "int3")] {
        let e = raw(hw, Some(q), None, "gpu-only").resolve().unwrap_err();
        assert_eq!(e.field(), Some(Field::Quantization), "{e}");
        assert!(e.to_string().starts_with("quantization: "), "{e}");
    }
    let e = raw(a100, None, Some("fp8_e5m2"), "gpu-only")
        .resolve()
        .unwrap_err();
    assert!(
        matches!(
            e,
            ScenarioError::OutOfRange {
                field: Field::KvCacheDtype,
                ..
            }
        ),
        "{e}"
    );
}
