//! `kvplan calibrate --from-runs`: fit the serving figures of a profile to real serving runs and
//! report the errors before and after.

use std::fmt::Write as _;
use std::path::Path;

use kvplan_serve::runs::{StageComparison, StageRun};
use kvplan_vocab::HardwareProfile;

use crate::args::{CalibrateArgs, Format};
use crate::commands::Output;
use crate::error::CliError;
use crate::output::write_output;
use crate::render::stage_table;

/// `kvplan calibrate --from-runs FILE`.
pub fn calibrate_from_runs(args: &CalibrateArgs, runs: &Path) -> Result<Output, CliError> {
    let stages = StageRun::read(runs).map_err(|e| CliError::input(format!("--from-runs: {e}")))?;
    let base_name = match &args.base {
        Some(b) => b.clone(),
        None => {
            let mut names: Vec<&str> = stages
                .iter()
                .filter_map(|s| kvplan_serve::runs::hardware_preset(&s.hardware))
                .collect();
            names.dedup();
            match names.as_slice() {
                [one] => one.to_string(),
                _ => {
                    return Err(CliError::input(
                        "--from-runs: the runs name several GPUs (or none with a preset); pass \
                         --base PRESET|FILE for the one to fit",
                    ));
                }
            }
        }
    };
    let base = HardwareProfile::resolve(&base_name)?;
    if args.fit_requests == 0 {
        return Err(CliError::input(
            "--fit-requests: at least 1 request per stage",
        ));
    }
    let fit = kvplan_calibrate::runs::fit_stages(&stages, &base, &base_name, args.fit_requests)
        .map_err(|e| CliError::input(format!("--from-runs: {e}")))?;
    let file_name = runs.file_name().map_or_else(
        || runs.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let name = args.name.clone().unwrap_or_else(|| {
        args.out.as_ref().and_then(|p| p.file_stem()).map_or_else(
            || format!("{}-fitted", base.name),
            |s| s.to_string_lossy().into_owned(),
        )
    });
    let s = &fit.profile.serving;
    let toml = format!(
        "# Fitted by `kvplan calibrate --from-runs {file_name} --base {base_name}`: the decode \
         attention's\n# KV bandwidth, the engine's host time and the frontend latency, to the \
         served stages of\n# real runs (see the error table it printed).\nbase = \"{base_name}\"\n\
         name = \"{name}\"\n\n[kernels.attention]\ndecode_efficiency = {:.4}\n{}\n[serving]\n\
         source = \"{}\"\nschedule_us = {:.2}\nschedule_per_seq_us = {:.3}\n\
         schedule_per_token_us = {:.4}\nupdate_us = {:.2}\nupdate_per_seq_us = {:.3}\n\
         graph_launch_us = {:.2}\npiecewise_layer_us = {:.3}\nfrontend_us = {:.1}\n",
        fit.decode_efficiency,
        fit.unit_us
            .map_or(String::new(), |u| format!("unit_us = {u:.4}\n")),
        s.source.replace('"', "'"),
        s.schedule_us,
        s.schedule_per_seq_us,
        s.schedule_per_token_us,
        s.update_us,
        s.update_per_seq_us,
        s.graph_launch_us,
        s.piecewise_layer_us,
        s.frontend_us,
    );
    if args.output.format == Format::Json {
        #[derive(serde::Serialize)]
        struct Report<'a> {
            base: &'a str,
            decode_efficiency: f64,
            unit_us: Option<f64>,
            host_scale: f64,
            frontend_us: f64,
            before: &'a [StageComparison],
            after: &'a [StageComparison],
            skipped: &'a [(String, String)],
        }
        if let Some(path) = &args.out {
            write_output(path, "--out", |w| w.write_all(toml.as_bytes()))?;
        }
        return crate::commands::json_line(&Report {
            base: &base.name,
            decode_efficiency: fit.decode_efficiency,
            unit_us: fit.unit_us,
            host_scale: fit.host_scale,
            frontend_us: fit.frontend_us,
            before: &fit.before,
            after: &fit.after,
            skipped: &fit.skipped,
        });
    }
    let mut out = format!(
        "calibrate --from-runs {file_name} on {}: fitted decode attention at {:.1}% of HBM \
         bandwidth{}, host time x{:.2}, frontend {:.1} ms\n\nbefore (the base profile):\n{}\n\
         after:\n{}",
        base.name,
        fit.decode_efficiency * 100.0,
        fit.unit_us.map_or(String::new(), |u| format!(
            " and {u:.2} us per thread block"
        )),
        fit.host_scale,
        fit.frontend_us / 1e3,
        stage_table(&fit.before),
        stage_table(&fit.after),
    );
    for (stage, why) in &fit.skipped {
        let _ = writeln!(out, "skipped {stage}: {why}");
    }
    crate::measure::write_or_print(out, args.out.as_deref(), &toml, &toml)
}
