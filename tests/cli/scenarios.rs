//! Every preset scenario in `scenarios/`: KVPR's automatic split is within 1% of the best fixed
//! split on the simulated schedule (brute force over a 17-point grid of `l`, the rule of
//! `planner/tests/kvpr_vs_simulator.rs` for large cases), and no worse than plain transfer.

use kvplan_planner::plan::{KvprOptions, SplitPolicy, Strategy};
use kvplan_planner::run::simulate_strategy;
use kvplan_planner::scenario::Scenario;

use crate::common::root;

fn decode_latency(sc: &Scenario, split: SplitPolicy) -> f64 {
    let mut sc = sc.clone();
    let kvpr = sc.options.get::<KvprOptions>();
    sc.options.strategy.set(KvprOptions { split, ..kvpr });
    let cost = sc.cost_model();
    simulate_strategy(&sc, &cost, Strategy::KVPR)
        .unwrap()
        .report
        .decode_latency_s
}

/// What a file in `scenarios/` is, from its own top-level fields: a sweep (`axes`), a hardware
/// profile (`base` naming a profile, or `[gpu]`), a serving scenario (`kind = "serve"`), or a
/// simulate scenario (everything else).
#[derive(Debug, PartialEq)]
enum FileKind {
    Sweep,
    Profile,
    Serve,
    Simulate,
}

fn file_kind(path: &std::path::Path) -> FileKind {
    let text = std::fs::read_to_string(path).unwrap();
    let table: toml::Table = text
        .parse()
        .unwrap_or_else(|e| panic!("{}: not TOML: {e}", path.display()));
    if table.contains_key("axes") {
        FileKind::Sweep
    } else if table.get("base").is_some_and(toml::Value::is_str) || table.contains_key("gpu") {
        FileKind::Profile
    } else if table.get("kind").and_then(toml::Value::as_str) == Some("serve") {
        FileKind::Serve
    } else {
        FileKind::Simulate
    }
}

/// Every simulate scenario in `scenarios/` reads and resolves (a preset that stops parsing fails
/// here instead of being skipped), and each KVPR one picks its split within 1% of the best.
#[test]
fn auto_split_is_within_one_percent_of_the_best_fixed_split_on_every_preset_scenario() {
    let mut checked = 0;
    let mut kinds = Vec::new();
    for entry in std::fs::read_dir(root().join("scenarios")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let kind = file_kind(&path);
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if kind == FileKind::Serve {
            kvplan_run::RawScenario::read_serve(&path).unwrap_or_else(|e| panic!("{e}"));
        }
        if kind != FileKind::Simulate {
            kinds.push((name, kind));
            continue;
        }
        // (a reader's error names the file and line)
        let raw = kvplan_run::RawScenario::read_simulate(&path).unwrap_or_else(|e| panic!("{e}"));
        let sc = raw
            .resolve()
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        kinds.push((name, kind));
        if sc.strategy != Strategy::KVPR {
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
    println!("{kinds:?}");
    assert!(checked >= 2, "checked {checked} scenarios");
    // Every kind is present, so a misclassified file shows as a missing kind.
    for k in [
        FileKind::Sweep,
        FileKind::Profile,
        FileKind::Serve,
        FileKind::Simulate,
    ] {
        assert!(kinds.iter().any(|x| x.1 == k), "no {k:?} in {kinds:?}");
    }
}
