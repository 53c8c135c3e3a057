//! The library path a sweep or server takes (and `examples/simulate_scenario.rs` shows): a
//! scenario file read, resolved and run by the scenario layer (`kvplan_run`), or compared by
//! `kvplan_planner::run`, gives the figures the CLI prints.

use kvplan_planner::plan::Strategy;
use kvplan_planner::run::{compare, compared, simulate_scenario};

use crate::common::{ok, root, run};

const SCENARIO: &str = "scenarios/opt-6.7b-a100-latency.toml";

#[test]
fn example_scenario_through_the_library_matches_the_cli() {
    // The calls of examples/simulate_scenario.rs: the one scenario layer.
    let path = root().join(SCENARIO);
    let scenario = kvplan_run::RawScenario::read(&path, kvplan_run::RunKind::Simulate)
        .unwrap()
        .resolve()
        .unwrap();
    let report = kvplan_run::run(&scenario).unwrap();
    let kvplan_run::Report::Simulate(sim) = &report else {
        panic!("an op-level scenario gives an op-level report")
    };
    let r = &sim.report;
    assert_eq!((r.strategy.as_str(), r.batch, r.gen_len), ("kvpr", 64, 32));
    assert!(r.decode_latency_s > 0.0 && r.decode_throughput_tok_s > 0.0);
    // The planner's own path gives the same report.
    let direct = kvplan_run::RawScenario::read_simulate(&path)
        .unwrap()
        .resolve()
        .unwrap();
    assert_eq!(
        serde_json::to_string(&simulate_scenario(&direct).unwrap().report).unwrap(),
        serde_json::to_string(r).unwrap()
    );

    // Byte for byte: the CLI's JSON is this report, pretty-printed.
    let cli = ok(&run(&["simulate", SCENARIO, "--format", "json"]));
    assert_eq!(cli, report.json());
}

#[test]
fn compare_through_the_library_matches_the_cli() {
    let scenario = kvplan_run::RawScenario::read_simulate(&root().join(SCENARIO))
        .unwrap()
        .resolve()
        .unwrap();
    let c = compare(&scenario).unwrap();
    assert_eq!(c.runs.len() + c.skipped.len(), compared().len());
    let kvpr = &c.get(Strategy::KVPR).unwrap().report;
    let full = &c.get(Strategy::FULL_TRANSFER).unwrap().report;
    let ratios = c.kvpr_vs_full_transfer.unwrap();
    assert_eq!(
        ratios.decode_latency_ratio,
        kvpr.decode_latency_s / full.decode_latency_s
    );

    let cli: serde_json::Value = serde_json::from_str(&ok(&run(&[
        "simulate",
        SCENARIO,
        "--compare",
        "--format",
        "json",
    ])))
    .unwrap();
    // Parsed on both sides (the parser may round the last digit, the same way each time).
    let reports: Vec<_> = c.runs.iter().map(|s| &s.report).collect();
    assert_eq!(cli["results"], parsed(&reports));
    assert_eq!(cli["kvpr_vs_full_transfer"], parsed(&ratios));
}

/// `v` as JSON text parsed back, as the CLI's output is read.
fn parsed<T: serde::Serialize>(v: &T) -> serde_json::Value {
    serde_json::from_str(&serde_json::to_string(v).unwrap()).unwrap()
}
