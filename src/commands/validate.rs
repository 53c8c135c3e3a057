//! `kvplan validate`: one scenario simulated and executed, and how far the two differ.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;

use super::exec::{open_backend, write_runs};
use super::plan::describe;
use crate::args::*;
use crate::error::CliError;
use crate::render::*;
use kvplan_calibrate::Comparison;
use kvplan_planner::report::RunReport;
use kvplan_planner::run::{SimulatedRun, simulate_scenario};
use kvplan_vocab::timeline::Run;
use serde_json::json;

pub const VALIDATE_LONG: &str = "\
Simulate a scenario with a (calibrated) profile and execute the same schedule on a backend, then
report the end-to-end error of the makespan, the error per decode step (median, p90), per op
kind and per category. Exits with code 1 when the end-to-end error exceeds --max-error.";

/// `kvplan validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// What to run (--hardware is the profile to validate)
    #[command(flatten)]
    pub run: RunArgs,
    /// Strategy: kvpr, full-transfer, gpu-only, headinfer, runahead [default: kvpr]
    #[arg(long, value_name = "NAME")]
    pub strategy: Option<String>,
    /// Backend
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Largest acceptable end-to-end relative error of the makespan
    #[arg(long, value_name = "FRACTION", default_value_t = 0.10)]
    pub max_error: f64,
    /// Write both timelines into one Chrome trace (processes `simulated` and `measured`)
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

fn comparison_table(c: &Comparison) -> String {
    let mut out = String::new();
    let mut t = Table::new(&["", "simulated", "measured", "error"]);
    let e = |r: f64| {
        if r.is_finite() {
            format!("{:+.1}%", r * 100.0)
        } else {
            "-".into()
        }
    };
    t.row(&[
        "end to end".to_string(),
        secs(c.simulated_s),
        secs(c.measured_s),
        pct(c.end_to_end_error),
    ]);
    t.row(&[
        "decode".to_string(),
        secs(c.simulated_decode_s),
        secs(c.measured_decode_s),
        e(c.decode_error()),
    ]);
    t.row(&[
        "per step: median |error|".to_string(),
        String::new(),
        String::new(),
        pct(c.median_step_error),
    ]);
    t.row(&[
        "per step: p90 |error|".to_string(),
        String::new(),
        String::new(),
        pct(c.p90_step_error),
    ]);
    for r in &c.per_category {
        t.row(&[
            format!("category {}", r.name),
            secs(r.simulated_s),
            secs(r.measured_s),
            e(r.error),
        ]);
    }
    for r in &c.per_kind {
        t.row(&[
            format!("op {}", r.name),
            secs(r.simulated_s),
            secs(r.measured_s),
            e(r.error),
        ]);
    }
    out.push_str(&t.render());
    out
}

/// `kvplan validate`.
pub fn validate(args: &ValidateArgs) -> Result<String, CliError> {
    if !(args.max_error.is_finite() && args.max_error > 0.0) {
        return Err(CliError::input(format!(
            "--max-error: must be a positive fraction such as 0.1 (got {})",
            args.max_error
        )));
    }
    let sc = args.run.resolve(args.strategy.clone())?;
    let SimulatedRun {
        plan: p,
        timeline: simulated,
        report: rs,
    } = simulate_scenario(&sc)?;
    let mut ex = open_backend(&args.backend)?;
    let measured = ex.run(&p.schedule)?;
    if let Some(path) = &args.trace {
        write_runs(
            path,
            &[
                Run {
                    name: "simulated",
                    schedule: &p.schedule,
                    timeline: &simulated,
                },
                Run {
                    name: "measured",
                    schedule: &p.schedule,
                    timeline: &measured,
                },
            ],
        )?;
    }
    let c = kvplan_calibrate::compare(&p.schedule, &simulated, &measured);
    let rm = RunReport::new(&p, &measured);
    let out = match args.output.format {
        Format::Json => json_line(&json!({
            "strategy": p.strategy.as_str(),
            "model": p.model,
            "hardware": p.hardware,
            "backend": rm.backend,
            "device": rm.device,
            "simulated_s": c.simulated_s,
            "measured_s": c.measured_s,
            "end_to_end_error": c.end_to_end_error,
            "max_error": args.max_error,
            "passed": c.end_to_end_error <= args.max_error,
            "simulated_decode_s": c.simulated_decode_s,
            "measured_decode_s": c.measured_decode_s,
            "median_step_error": c.median_step_error,
            "p90_step_error": c.p90_step_error,
            "per_category": c.per_category,
            "per_kind": c.per_kind,
            "per_step": c.per_step,
            "simulated": rs,
            "measured": rm,
        }))?,
        Format::Csv => {
            let mut rows: Vec<Vec<String>> = vec![vec![
                "end_to_end".into(),
                csv_number(c.simulated_s),
                csv_number(c.measured_s),
                csv_number(c.end_to_end_error),
            ]];
            for (prefix, list) in [
                ("category", &c.per_category),
                ("op", &c.per_kind),
                ("step", &c.per_step),
            ] {
                for r in list {
                    // `step:3`, not `step:step 3`.
                    let name = r.name.strip_prefix("step ").unwrap_or(&r.name);
                    rows.push(vec![
                        format!("{prefix}:{name}"),
                        csv_number(r.simulated_s),
                        csv_number(r.measured_s),
                        csv_number(r.error),
                    ]);
                }
            }
            csv_text(&["item", "simulated_s", "measured_s", "error"], &rows)?
        }
        Format::Table => {
            let mut out = String::new();
            let _ = writeln!(
                out,
                "validate {}: simulated with {} vs measured on {} ({} backend)",
                describe(&p),
                p.hardware,
                rm.device,
                rm.backend
            );
            out.push_str(&comparison_table(&c));
            let _ = writeln!(
                out,
                "decode throughput: simulated {:.1} tok/s, measured {:.1} tok/s",
                rs.decode_throughput_tok_s, rm.decode_throughput_tok_s
            );
            out
        }
    };
    if c.end_to_end_error > args.max_error {
        return Err(CliError {
            code: crate::error::EXIT_FAILURE,
            message: format!(
                "end-to-end error {:.1}% exceeds --max-error {:.1}%",
                c.end_to_end_error * 100.0,
                args.max_error * 100.0
            ),
            stdout: Some(out),
        });
    }
    Ok(out)
}
