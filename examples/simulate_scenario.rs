//! Runs a scenario file of either kind through the library's one scenario layer and prints its
//! metric columns: what `kvplan simulate scenarios/opt-6.7b-a100-latency.toml` (or `kvplan
//! serve FILE` for a file that says `kind = "serve"`) computes, without the CLI.
//!
//!     cargo run --example simulate_scenario [SCENARIO.toml]

use std::path::PathBuf;

use kvplan_run::{Metric, RawScenario, RunKind, columns};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/opt-6.7b-a100-latency.toml")
        });
    // A file without a `kind` key is an op-level scenario.
    let scenario = RawScenario::read(&path, RunKind::Simulate)?.resolve()?;
    let report = kvplan_run::run(&scenario)?;
    println!("{} ({}):", path.display(), report.kind());
    for (name, value) in columns(report.kind()).iter().zip(report.metrics()) {
        match value {
            Metric::Float(x) => println!("{name:<24} {x:.6}"),
            Metric::Int(n) => println!("{name:<24} {n}"),
        }
    }
    Ok(())
}
