//! Loads a scenario file through the library, simulates it, prints decode latency and
//! throughput: what `kvplan simulate scenarios/opt-6.7b-a100-latency.toml` does, without the CLI.
//!
//!     cargo run --example simulate_scenario [SCENARIO.toml]

use std::path::PathBuf;

use kvplan_planner::run::simulate_scenario;
use kvplan_planner::scenario::RawScenario;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scenarios/opt-6.7b-a100-latency.toml")
        });
    let scenario = RawScenario::from_file(&path)?.resolve()?;
    let run = simulate_scenario(&scenario)?;
    let r = &run.report;
    println!("{} on {} ({}):", r.model, r.hardware, r.strategy);
    println!("decode latency     {:.6} s", r.decode_latency_s);
    println!("decode throughput  {:.1} tok/s", r.decode_throughput_tok_s);
    Ok(())
}
