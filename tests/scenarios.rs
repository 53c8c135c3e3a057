//! Every preset scenario in `scenarios/`: KVPR's automatic split is within 1% of the best fixed
//! split on the simulated schedule (brute force over a 17-point grid of `l`, the rule of
//! `planner/tests/kvpr_vs_simulator.rs` for large cases), and no worse than plain transfer.

use kvplan_planner::plan::{SplitPolicy, Strategy};
use kvplan_planner::run::simulate_strategy;
use kvplan_planner::scenario::Scenario;

use crate::common::root;

fn decode_latency(sc: &Scenario, split: SplitPolicy) -> f64 {
    let mut sc = sc.clone();
    sc.options.split = split;
    let cost = sc.cost_model();
    simulate_strategy(&sc, &cost, Strategy::Kvpr)
        .unwrap()
        .report
        .decode_latency_s
}

#[test]
fn auto_split_is_within_one_percent_of_the_best_fixed_split_on_every_preset_scenario() {
    let mut checked = 0;
    for entry in std::fs::read_dir(root().join("scenarios")).unwrap() {
        let path = entry.unwrap().path();
        let Ok(raw) = kvplan_run::RawScenario::read_simulate(&path) else {
            continue; // a hardware profile, not a scenario
        };
        let Ok(sc) = raw.resolve() else { continue };
        if sc.strategy != Strategy::Kvpr {
            continue;
        }
        let auto = decode_latency(&sc, SplitPolicy::Auto);
        let top = sc.shape.cached_at(sc.shape.decode_steps());
        let best = (0..=16u64)
            .map(|i| (i * u64::from(top) / 16) as u32)
            .map(|l| (decode_latency(&sc, SplitPolicy::Tokens(l)), l))
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .unwrap();
        println!(
            "{}: auto {auto:.4} s, best fixed l = {} {:.4} s",
            path.display(),
            best.1,
            best.0
        );
        assert!(
            auto <= best.0 * 1.01,
            "{}: auto {auto} s vs best fixed l = {} {} s",
            path.display(),
            best.1,
            best.0
        );
        checked += 1;
    }
    assert!(checked >= 2, "checked {checked} scenarios");
}
