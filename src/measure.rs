//! The commands that touch real hardware: `exec`, `validate`, `calibrate`.

use std::fmt::Write as _;
use std::path::Path;

use kvplan_calibrate::{Comparison, Plan as CalPlan};
use kvplan_exec::{BackendKind, ExecOptions, Executor};
use kvplan_planner::report::RunReport;
use kvplan_planner::run::{SimulatedRun, simulate_scenario};
use kvplan_vocab::timeline::{Run, write_chrome_trace, write_csv};
use kvplan_vocab::{HardwareProfile, ModelSpec};
use serde_json::json;

use crate::args::{BackendArgs, CalibrateArgs, ExecArgs, Format, ValidateArgs};
use crate::commands::{
    CSV_FIELDS, Output, csv_number, csv_row, csv_text, describe, json_line, metric_rows,
    split_summary,
};
use crate::error::CliError;
use crate::output::write_output;
use crate::render::{Table, gib, pct, secs};

fn open_backend(b: &BackendArgs) -> Result<Box<dyn Executor>, CliError> {
    let kind = BackendKind::parse(&b.backend).ok_or_else(|| {
        CliError::input(format!(
            "--backend: unknown backend '{}'; use cuda or cpu",
            b.backend
        ))
    })?;
    let opts = ExecOptions {
        device: b.device,
        seed: b.seed,
        warmup_runs: b.warmup,
    };
    Ok(kvplan_exec::open(kind, &opts)?)
}

fn write_runs(path: &Path, runs: &[Run]) -> Result<(), CliError> {
    let csv = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"));
    write_output(path, "--trace", |w| {
        if csv {
            write_csv(runs, w)
        } else {
            write_chrome_trace(runs, w)
        }
    })
}

/// `kvplan exec`.
pub fn exec(args: &ExecArgs) -> Result<Output, CliError> {
    let sc = args.run.resolve(args.strategy.clone())?;
    let p = sc.plan()?;
    let mut ex = open_backend(&args.backend)?;
    let timeline = ex.run(&p.schedule)?;
    if let Some(path) = &args.trace {
        write_runs(
            path,
            &[Run {
                name: "measured",
                schedule: &p.schedule,
                timeline: &timeline,
            }],
        )?;
    }
    let r = RunReport::new(&p, &timeline);
    match args.output.format {
        Format::Json => json_line(&r),
        Format::Csv => csv_text(&CSV_FIELDS, &[csv_row(&r)]),
        Format::Table => {
            let mut out = String::new();
            let _ = writeln!(
                out,
                "{} (measured on {}, {} backend): {}",
                r.strategy,
                r.device,
                r.backend,
                describe(&p)
            );
            let mut t = Table::new(&["metric", "value"]);
            for (k, v) in metric_rows(&r) {
                t.row(&[k.to_string(), v]);
            }
            out.push_str(&t.render());
            if let Some(line) = split_summary(&p) {
                let _ = writeln!(out, "{line}");
            }
            for n in &r.notes {
                let _ = writeln!(out, "note: {n}");
            }
            Ok(out)
        }
    }
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
pub fn validate(args: &ValidateArgs) -> Result<Output, CliError> {
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

/// `kvplan calibrate`.
pub fn calibrate(args: &CalibrateArgs) -> Result<Output, CliError> {
    if let Some(runs) = &args.from_runs {
        return crate::calibrate_runs::calibrate_from_runs(args, runs);
    }
    if let Some(table) = &args.from_table {
        return calibrate_from_table(args, table);
    }
    let out_path = args
        .out
        .as_ref()
        .ok_or_else(|| CliError::input("--out FILE is required"))?;
    let models: Option<Vec<ModelSpec>> = if args.models.is_empty() {
        None
    } else {
        Some(
            args.models
                .iter()
                .map(|m| ModelSpec::resolve(m))
                .collect::<Result<_, _>>()?,
        )
    };
    let base = match &args.base {
        Some(b) => Some(HardwareProfile::resolve(b)?),
        None => None,
    };
    let name = match &args.name {
        Some(n) => n.clone(),
        None => out_path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .ok_or_else(|| {
                CliError::input(format!(
                    "--out: '{}' is not a file path",
                    out_path.display()
                ))
            })?,
    };
    let mut ex = open_backend(&args.backend)?;
    let gpu = ex.info().backend == BackendKind::Cuda;
    // Without --base, a preset whose GPU name matches the device keeps its datasheet fields.
    let base = base.or_else(|| {
        HardwareProfile::preset_names()
            .iter()
            .filter_map(|n| HardwareProfile::preset(n).ok())
            .find(|p| gpu && p.gpu.name == ex.info().name)
    });
    let plan = CalPlan::new(args.quick, gpu, models)?;
    let bar = indicatif::ProgressBar::new(9);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "calibrating [{bar:30}] {pos}/{len} {msg} ({elapsed})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let started = std::time::Instant::now();
    let m = kvplan_calibrate::measure(ex.as_mut(), &plan, &mut |i, total, what| {
        bar.set_length(total as u64);
        bar.set_position(i as u64 - 1);
        bar.set_message(what.to_string());
    });
    bar.finish_and_clear();
    let m = m?;
    let file = kvplan_calibrate::build_profile(&m, &name, base.as_ref(), args.quick)?;
    let header = format!(
        "# kvplan calibrated profile: {} backend on {} ({}), {}.\n# Written by `kvplan calibrate`{}; the [calibration] and [kernels] tables override the datasheet fields\n# in the cost model. Valid as --hardware for every kvplan command.\n",
        m.info.backend.as_str(),
        m.info.name,
        m.info.driver,
        kvplan_calibrate::today(),
        if args.quick { " --quick" } else { "" }
    );
    write_output(out_path, "--out", |w| {
        w.write_all(header.as_bytes())?;
        w.write_all(file.to_toml().as_bytes())
    })?;
    let cal = file.calibration.as_ref().expect("calibrated");
    let elapsed = started.elapsed().as_secs_f64();
    let best_tflops = |decode: bool| {
        cal.gemm
            .iter()
            .filter(|g| plan.decode_m.contains(&g.m) == decode)
            .map(|g| g.tflops())
            .fold(0.0, f64::max)
    };
    match args.output.format {
        Format::Json => json_line(&json!({
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
            "gemm_best_tflops_decode": best_tflops(true),
            "gemm_best_tflops_prefill": best_tflops(false),
            "gemm": cal.gemm,
            "attention": cal.attention,
            "elementwise": cal.elementwise,
            "op_overhead_us": m.op_overhead_s * 1e6,
            "kernels": file.kernels.as_ref().map(|k| json!({
                "tables": k.tables.len(),
                "token_grid": plan.kernel_grid,
                "launch_us": k.launch_us,
                "gemm": k.gemm,
            })),
        })),
        Format::Csv => csv_text(
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
        ),
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
            out.push_str(&t.render());
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
                best_tflops(true),
                plan.decode_m,
                best_tflops(false),
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
            Ok(out)
        }
    }
}

/// `kvplan calibrate --from-table FILE`: the base profile with a `[kernels]` section fitted to a
/// measured table.
fn calibrate_from_table(args: &CalibrateArgs, table: &std::path::Path) -> Result<Output, CliError> {
    use kvplan_calibrate::table::{
        FitOptions, MeasuredTable, error_report, fit_kernels, kernel_model, kernels_toml,
        replace_kernels,
    };
    let file_name = table
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| table.display().to_string());
    let text = std::fs::read_to_string(table)
        .map_err(|e| CliError::input(format!("--from-table {}: {e}", table.display())))?;
    if kvplan_calibrate::attention::is_attention_table(&text) {
        return calibrate_attention_from_table(args, table, &file_name, &text);
    }
    if let Some(m) = args.models.first() {
        return Err(CliError::input(format!(
            "--model {m}: a kernel table carries its model sizes in its rows; --model names the \
             model of an attention table (header {})",
            kvplan_calibrate::attention::COLUMNS.join(",")
        )));
    }
    let (_, base, base_text, sms) = table_base(args, &file_name)?;
    let measured = MeasuredTable::parse(&text, &table.display().to_string())
        .map_err(|e| CliError::input(e.to_string()))?;
    let source = format!(
        "fitted by `kvplan calibrate --from-table {file_name}` from Vidur's public profiling \
         data (MIT, commit 7d47513), Llama-2-7B shapes, TP 1/2/4/8"
    );
    let opts = FitOptions::from_base(&base, sms, source);
    let section = fit_kernels(&measured.samples, &base, &opts)?;
    let report = error_report(&kernel_model(&section, &base), &measured.samples);
    let kernels = kernels_toml(
        &section,
        &format!("fitted by `kvplan calibrate --from-table {file_name}`"),
    );
    let profile = replace_kernels(&base_text, &kernels);
    HardwareProfile::from_toml_str(&profile, "the fitted profile")?;
    let out = format!(
        "fitted {} rows of {file_name} ({} samples), sms {sms}; device-time error of the fitted \
         [kernels]:\n\n{report}",
        measured.samples.len() / 10,
        measured.samples.len()
    );
    write_or_print(out, args.out.as_deref(), &profile, &kernels)
}

/// The `--base` profile of `--from-table` (named, or from the table's file name), its TOML text
/// and the GPU's streaming multiprocessors (`--sms`, else from its name).
fn table_base(
    args: &CalibrateArgs,
    file_name: &str,
) -> Result<(String, HardwareProfile, String, u32), CliError> {
    use kvplan_calibrate::table::default_sms;
    let base_name = match &args.base {
        Some(b) => b.clone(),
        None => {
            let lower = file_name.to_ascii_lowercase();
            if lower.starts_with("a100") {
                "a100-80g-sxm".to_string()
            } else if lower.starts_with("h100") {
                "h100-sxm".to_string()
            } else {
                return Err(CliError::input(format!(
                    "--from-table {file_name}: which GPU? pass --base PRESET|FILE (e.g. \
                     a100-80g-sxm)"
                )));
            }
        }
    };
    let base = HardwareProfile::resolve(&base_name)?;
    let base_text = match HardwareProfile::preset_text(&base_name) {
        Ok(t) if !base_name.contains(['/', '.']) => t.to_string(),
        _ => std::fs::read_to_string(&base_name)
            .map_err(|e| CliError::input(format!("--base {base_name}: {e}")))?,
    };
    let sms = match args.sms.or_else(|| default_sms(&base.gpu.name)) {
        Some(s) if s > 0 => s,
        _ => {
            return Err(CliError::input(format!(
                "--sms: the streaming multiprocessors of '{}' are not known; pass --sms N",
                base.gpu.name
            )));
        }
    };
    Ok((base_name, base, base_text, sms))
}

/// `kvplan calibrate --from-table FILE` on an attention table: the base profile with its
/// `[kernels.attention]` fitted to the table.
fn calibrate_attention_from_table(
    args: &CalibrateArgs,
    table: &std::path::Path,
    file_name: &str,
    text: &str,
) -> Result<Output, CliError> {
    use kvplan_calibrate::attention::{
        AttentionTable, Heads, attention_toml, error_report, fit_attention, predicted,
        replace_attention,
    };
    let model = match args.models.as_slice() {
        [m] => ModelSpec::resolve(m)?,
        [] => {
            // The preset whose name the file name contains (Vidur names tables after the model).
            let lower = file_name.to_ascii_lowercase();
            ModelSpec::preset_names()
                .into_iter()
                .filter(|n| lower.contains(n.as_str()))
                .max_by_key(|n| n.len())
                .map(|n| ModelSpec::preset(&n))
                .transpose()?
                .ok_or_else(|| {
                    CliError::input(format!(
                        "--model: an attention table has no head shape and {file_name} names no \
                         model preset; pass --model NAME|PATH (the model it was measured on)"
                    ))
                })?
        }
        more => {
            return Err(CliError::input(format!(
                "--model: an attention table is measured on one model; {} given",
                more.len()
            )));
        }
    };
    let (_, base, base_text, sms) = table_base(args, file_name)?;
    let no_kernels = || {
        CliError::input(format!(
            "--base: {} has no [kernels] section to put the fitted [kernels.attention] in; \
             pass a --base with one (a100-80g-sxm, h100-sxm, or a profile written by \
             `kvplan calibrate`)",
            base.name
        ))
    };
    if base.kernels.is_none() {
        return Err(no_kernels());
    }
    let measured = AttentionTable::parse(text, &table.display().to_string())
        .map_err(|e| CliError::input(e.to_string()))?;
    let heads = Heads::of(&model);
    let fit = fit_attention(&measured.samples, &base, &heads, sms)?;
    let pred = predicted(
        &fit.attention,
        &fit.append,
        &measured.samples,
        &base,
        &heads,
    );
    let report = error_report(&measured.samples, &pred);
    let cite = format!("fitted by `kvplan calibrate --from-table {file_name}`");
    let attention = attention_toml(&fit.attention, &cite);
    let profile = replace_attention(&base_text, &attention).ok_or_else(no_kernels)?;
    HardwareProfile::from_toml_str(&profile, "the fitted profile")?;
    let out = format!(
        "fitted {} rows of {file_name} ({}: {} query / {} KV heads of {}), sms {sms}; the \
         measured kernel also appended the new tokens' K,V to the cache (every query block \
         copying the keys it attends: {} of HBM bandwidth, {} ns per new token and query head), \
         which the profile leaves out (vLLM writes the cache in a separate kernel); \
         device-time error of the fit, append included:\n\n{report}",
        measured.samples.len(),
        model.name,
        heads.q_heads,
        heads.kv_heads,
        heads.head_dim,
        fit.append.efficiency,
        fit.append.token_ns,
    );
    write_or_print(out, args.out.as_deref(), &profile, &attention)
}

/// Ends a fit's report: writes `file` to `--out` and says so, or, without `--out`, prints
/// `section` (the fitted part of the profile) after the report.
pub(crate) fn write_or_print(
    mut out: String,
    path: Option<&std::path::Path>,
    file: &str,
    section: &str,
) -> Result<Output, CliError> {
    match path {
        Some(path) => {
            write_output(path, "--out", |w| w.write_all(file.as_bytes()))?;
            let _ = writeln!(out, "\nwrote {}", path.display());
        }
        None => {
            out.push('\n');
            out.push_str(section);
        }
    }
    Ok(out)
}
