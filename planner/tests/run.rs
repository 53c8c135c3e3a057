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
    assert_eq!(run.plan.strategy, Strategy::Kvpr);
}

#[test]
fn compare_skips_what_does_not_fit_and_keeps_the_order() {
    // OPT-30B's weights alone overflow a T4: gpu-only cannot run, the offloading strategies can.
    let sc = scenario("opt-30b", "t4", 4, 64, 3);
    let c = compare(&sc).unwrap();
    let ran: Vec<Strategy> = c.runs.iter().map(|r| r.plan.strategy).collect();
    assert_eq!(ran, [Strategy::Kvpr, Strategy::FullTransfer]);
    assert_eq!(c.skipped.len(), 1);
    assert_eq!(c.skipped[0].strategy, Strategy::GpuOnly);
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
