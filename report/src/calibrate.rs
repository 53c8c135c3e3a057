//! Calibration reports as the command line prints them: a measured machine's summary and the
//! fit of serving figures to real runs.

use std::fmt::Write as _;
use std::path::Path;

use kvplan_calibrate::inputs::RunsFitted;
use kvplan_calibrate::runs::RunsFit;
use kvplan_calibrate::{Measurements, Plan};
use kvplan_serve::runs::StageComparison;
use kvplan_vocab::calibration::Calibration;
use kvplan_vocab::hardware::ProfileFile;
use serde_json::json;

use crate::error::Error;
use crate::files::{write_or_print, write_text};
use crate::render::*;

/// A machine measured (`m`, by `plan`, in `elapsed` seconds) into the profile `file` named `name`
/// and written to `out_path`.
pub fn measurement(
    m: &Measurements,
    plan: &Plan,
    file: &ProfileFile,
    name: &str,
    out_path: &Path,
    elapsed: f64,
    format: Format,
) -> Result<String, Error> {
    let cal = file.calibration.as_ref().expect("calibrated");
    match format {
        Format::Json => measurement_json(m, plan, file, name, out_path, elapsed),
        Format::Csv => copy_csv(cal),
        Format::Table => {
            let mut out = String::new();
            let _ = writeln!(
                out,
                "calibrated {} ({} backend, {}) in {elapsed:.1} s -> {}",
                m.info.name,
                m.info.backend.as_str(),
                m.info.driver,
                out_path.display()
            );
            out.push_str(&copy_table(cal));
            fit_lines(&mut out, m, plan, file);
            Ok(out)
        }
    }
}

/// The best GEMM throughput measured at decode rows (`decode`) or at prefill rows, TFLOP/s.
fn best_tflops(cal: &Calibration, plan: &Plan, decode: bool) -> f64 {
    cal.gemm
        .iter()
        .filter(|g| plan.decode_m.contains(&g.m) == decode)
        .map(|g| g.tflops())
        .fold(0.0, f64::max)
}

/// The measurement as one JSON document: the machine, the copy curves, the fits and the
/// tables measured.
fn measurement_json(
    m: &Measurements,
    plan: &Plan,
    file: &ProfileFile,
    name: &str,
    out_path: &Path,
    elapsed: f64,
) -> Result<String, Error> {
    let cal = file.calibration.as_ref().expect("calibrated");
    json_line(&json!({
        "out": out_path.display().to_string(),
        "name": name,
        "backend": m.info.backend.as_str(),
        "device": m.info.name,
        "driver": m.info.driver,
        "seconds": elapsed,
        "copy_gbps": {
            "h2d_pinned": cal.copy.h2d_pinned.gbps().map(|(b, g)| json!([b, g])).collect::<Vec<_>>(),
            "d2h_pinned": cal.copy.d2h_pinned.gbps().map(|(b, g)| json!([b, g])).collect::<Vec<_>>(),
            "h2d_pageable": cal.copy.h2d_pageable.gbps().map(|(b, g)| json!([b, g])).collect::<Vec<_>>(),
            "d2h_pageable": cal.copy.d2h_pageable.gbps().map(|(b, g)| json!([b, g])).collect::<Vec<_>>(),
        },
        "duplex": file.link.duplex,
        "gemm_best_tflops_decode": best_tflops(cal, plan, true),
        "gemm_best_tflops_prefill": best_tflops(cal, plan, false),
        "gemm": cal.gemm,
        "attention": cal.attention,
        "elementwise": cal.elementwise,
        "op_overhead_us": m.op_overhead_s * 1e6,
        "host": m.host,
        "kernels": file.kernels.as_ref().map(|k| json!({
            "tables": k.tables.len(),
            "token_grid": plan.kernel_grid,
            "launch_us": k.launch_us,
            "gemm": k.gemm,
        })),
    }))
}

/// The copy curves as CSV: one row per table and size.
fn copy_csv(cal: &Calibration) -> Result<String, Error> {
    csv_text(
        &["table", "size_bytes", "seconds", "gbps"],
        &[
            ("h2d_pinned", &cal.copy.h2d_pinned),
            ("d2h_pinned", &cal.copy.d2h_pinned),
            ("h2d_pageable", &cal.copy.h2d_pageable),
            ("d2h_pageable", &cal.copy.d2h_pageable),
        ]
        .iter()
        .flat_map(|(n, c)| {
            c.0.iter().zip(c.gbps()).map(move |(&(b, t), (_, g))| {
                vec![n.to_string(), b.to_string(), t.to_string(), g.to_string()]
            })
        })
        .collect::<Vec<_>>(),
    )
}

/// The copy bandwidths, one row per size, one column per direction and kind of host memory.
fn copy_table(cal: &Calibration) -> String {
    let mut t = Table::new(&[
        "copy size",
        "h2d pinned",
        "d2h pinned",
        "h2d pageable",
        "d2h pageable",
    ]);
    let bw = |c: &kvplan_vocab::calibration::Curve, i: usize| {
        let (_, g) = c.gbps().nth(i).expect("a point per size");
        format!("{g:.2} GB/s")
    };
    for (i, &(b, _)) in cal.copy.h2d_pinned.0.iter().enumerate() {
        let size = if b >= 1 << 20 {
            format!("{} MiB", b >> 20)
        } else {
            format!("{} KiB", b >> 10)
        };
        t.row(&[
            size,
            bw(&cal.copy.h2d_pinned, i),
            bw(&cal.copy.d2h_pinned, i),
            bw(&cal.copy.h2d_pageable, i),
            bw(&cal.copy.d2h_pageable, i),
        ]);
    }
    t.render()
}

/// The lines under the copy table: duplex, the GEMM, attention and memory-bound fits, the
/// executor's host costs, the kernel tables and the host RAM the profile records.
fn fit_lines(out: &mut String, m: &Measurements, plan: &Plan, file: &ProfileFile) {
    let cal = file.calibration.as_ref().expect("calibrated");
    let (one, both) = m.duplex_check;
    let _ = writeln!(
        out,
        "both directions at once: {:.2} GB/s vs {:.2} GB/s one way -> {:?} duplex",
        both / 1e9,
        one / 1e9,
        file.link.duplex
    );
    let _ = writeln!(
        out,
        "GEMM: {} shapes; best {:.3} TFLOP/s at decode rows (m in {:?}), {:.3} TFLOP/s at prefill rows (m in {:?})",
        cal.gemm.len(),
        best_tflops(cal, plan, true),
        plan.decode_m,
        best_tflops(cal, plan, false),
        plan.prefill_m
    );
    let _ = writeln!(
        out,
        "attention fit: {:.1} us + max(flops / {:.4} TFLOP/s, bytes / {:.1} GB/s)",
        cal.attention.overhead_us, cal.attention.tflops, cal.attention.gbps
    );
    let _ = writeln!(
        out,
        "memory-bound kernels: {:.1} us + bytes / {:.1} GB/s; back-to-back tiny op: {:.1} us",
        cal.elementwise.overhead_us,
        cal.elementwise.gbps,
        m.op_overhead_s * 1e6
    );
    let _ = writeln!(
        out,
        "host side of the executor: {:.2} us to launch a kernel, {:.2} us to issue a copy, {:.2} us to synchronise with an idle {} ([calibration.host]; kvplan-exec's host costs)",
        m.host.launch_us,
        m.host.copy_issue_us,
        m.host.sync_us,
        if m.info.backend.as_str() == "cuda" {
            "GPU"
        } else {
            "stream (the CPU backend runs ops on the host)"
        }
    );
    if let Some(k) = &file.kernels {
        let g = &k.gemm;
        let _ = writeln!(
            out,
            "[kernels]: {} tables over {} token counts ({}..{}); GEMM fit {:.1} us floor, {:.2} of HBM, {:.2} of peak{}",
            k.tables.len(),
            plan.kernel_grid.len(),
            plan.kernel_grid.first().copied().unwrap_or(0),
            plan.kernel_grid.last().copied().unwrap_or(0),
            g.floor_us,
            g.memory_efficiency,
            g.compute_efficiency,
            g.sms.map(|s| format!(", {s} SMs")).unwrap_or_default()
        );
    }
    let _ = writeln!(
        out,
        "host RAM in profile: {}",
        gib((file.host.ram_gib * (1u64 << 30) as f64) as u64)
    );
}

/// The serving figures fitted to real runs (`f`), written to `out` (the option `what`) if given;
/// `heading` names the fit in the text's first line. A text report without `out` ends with the
/// fitted profile; a JSON one is the report alone.
pub fn runs_fit(
    heading: &str,
    f: &RunsFitted,
    out: Option<&Path>,
    what: &str,
    format: Format,
) -> Result<String, Error> {
    let report = runs_report(heading, &f.base.name, &f.fit, format)?;
    match (format, out) {
        (Format::Json, Some(path)) => write_text(path, what, &f.toml).map(|()| report),
        (Format::Json, None) => Ok(report),
        _ => write_or_print(report, out, what, &f.toml, &f.toml),
    }
}

/// The report of [`runs_fit`] against the base profile `base`.
fn runs_report(heading: &str, base: &str, fit: &RunsFit, format: Format) -> Result<String, Error> {
    if format == Format::Json {
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
            #[serde(skip_serializing_if = "<[String]>::is_empty")]
            warnings: &'a [String],
        }
        return json_line(&Report {
            base,
            decode_efficiency: fit.decode_efficiency,
            unit_us: fit.unit_us,
            host_scale: fit.host_scale,
            frontend_us: fit.frontend_us,
            before: &fit.before,
            after: &fit.after,
            skipped: &fit.skipped,
            warnings: &fit.warnings,
        });
    }
    let mut out = format!(
        "{heading} on {}: fitted decode attention at {:.1}% of HBM \
         bandwidth{}, host time x{:.2}, frontend {:.1} ms\n\nbefore (the base profile):\n{}\n\
         after:\n{}",
        base,
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
    for w in &fit.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    Ok(out)
}
