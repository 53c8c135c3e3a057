//! `kvplan serve`: a serving scenario (file and flags) → the serving simulator → summary and
//! files. The scenario's resolution lives in `kvplan_serve::scenario`.

use std::fmt::Write as _;
use std::io::IsTerminal;
use std::path::Path;
use std::time::Duration;

use kvplan_serve::scenario::{RawServeScenario, ServeScenario};
use kvplan_serve::{Output as ServeOutput, Status};

use crate::args::{Format, ServeArgs};
use crate::commands::Output;
use crate::error::CliError;
use crate::messages::serve_error;
use crate::output::write_output;
use crate::render::{Table, gib, pct, secs};

/// Runs longer than this many requests show a spinner when stderr is a terminal.
const PROGRESS_REQUESTS: usize = 20_000;

fn read_scenario(path: &Path) -> Result<RawServeScenario, CliError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CliError::input(format!("{}: cannot read: {e}", path.display())))?;
    let mut raw: RawServeScenario = toml::from_str(&text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        let at = line.map(|l| format!(":{l}")).unwrap_or_default();
        CliError::input(format!(
            "{}{at}: {}",
            path.display(),
            e.message().trim().replace('\n', " ")
        ))
    })?;
    raw.rebase(path.parent().unwrap_or(Path::new("")));
    Ok(raw)
}

/// `kvplan serve`.
pub fn serve(args: &ServeArgs) -> Result<Output, CliError> {
    let base = match &args.scenario {
        Some(p) => read_scenario(p)?,
        None => RawServeScenario::default(),
    };
    let mut raw = base.overlay(args.to_raw());
    if let Some(path) = &args.compare_to {
        let head = std::fs::read_to_string(path).map_err(|e| {
            CliError::input(format!(
                "--compare-to: {}: cannot read: {e}",
                path.display()
            ))
        })?;
        if kvplan_serve::runs::is_stage_table(head.lines().next().unwrap_or("")) {
            return compare_stages(&raw, path, args.output.format);
        }
    }
    let measured = match &args.compare_to {
        Some(path) => {
            let w = &raw.workload;
            if w.trace.is_some() || w.arrivals.is_some() || w.prompt_lengths.is_some() {
                return Err(CliError::input(format!(
                    "--compare-to: {} gives the requests; drop the workload (--trace, \
                     --arrivals, --lengths, or the scenario's [workload])",
                    path.display()
                )));
            }
            let run = kvplan_serve::runs::MeasuredRun::from_path(path)
                .map_err(|e| CliError::input(format!("--compare-to: {e}")))?;
            // A placeholder workload: the requests come from the run.
            raw.workload = kvplan_workloads::WorkloadConfig {
                arrivals: Some("all-at-once".into()),
                prompt_lengths: Some("1".into()),
                output_lengths: Some("1".into()),
                requests: Some(1),
                ..Default::default()
            };
            Some(run)
        }
        None => None,
    };
    let sc = raw.resolve().map_err(serve_error)?;
    let requests = match &measured {
        Some(run) => run.to_requests(),
        None => sc.requests().map_err(|e| serve_error(e.into()))?,
    };
    let bar = (requests.len() > PROGRESS_REQUESTS && std::io::stderr().is_terminal()).then(|| {
        let bar = indicatif::ProgressBar::new_spinner();
        bar.set_message(format!("serving {} requests", requests.len()));
        bar.enable_steady_tick(Duration::from_millis(120));
        bar
    });
    let out = sc.run(&requests);
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let out = out.map_err(|e| serve_error(e.into()))?;

    // The plots are drawn before any file is written: a plot that cannot be drawn (no request
    // finished) leaves no file behind.
    let title = format!("{} on {}", sc.model.name, sc.hardware.name);
    let mut plots = Vec::new();
    if let Some(p) = &args.plot {
        plots.push(("--plot", p, crate::plot::serve_timeseries(&out, &title)?));
    }
    if let Some(p) = &args.plot_cdf {
        plots.push((
            "--plot-cdf",
            p,
            crate::plot::serve_cdf(&out, &format!("{title}: latency CDF"))?,
        ));
    }

    let files: [(&Option<std::path::PathBuf>, &str, Writer); 4] = [
        (&args.requests_csv, "--requests-csv", |o, w| {
            o.write_requests_csv(w)
        }),
        (&args.timeseries_csv, "--timeseries-csv", |o, w| {
            o.write_timeseries_csv(w)
        }),
        (&args.summary_json, "--summary-json", |o, w| {
            o.write_summary_json(w)
        }),
        (&args.trace_json, "--trace-json", |o, w| {
            o.write_chrome_trace(w)
        }),
    ];
    let mut written = Vec::new();
    for (path, what, write) in files {
        if let Some(p) = path {
            write_output(p, what, |w| write(&out, w))?;
            written.push((what, p));
        }
    }
    for (what, p, svg) in &plots {
        write_output(p, what, |w| w.write_all(svg.as_bytes()))?;
        written.push((what, p));
    }

    if let Some(run) = &measured {
        let cmp = kvplan_serve::runs::compare(run, &out);
        return comparison_output(&sc, run, &cmp, args.output.format, &written);
    }

    let text = |f: Writer| -> Result<Output, CliError> {
        let mut buf = Vec::new();
        f(&out, &mut buf).map_err(|e| CliError::failure(format!("cannot render output: {e}")))?;
        Ok(String::from_utf8(buf).expect("the serving outputs are UTF-8"))
    };
    match args.output.format {
        Format::Json => text(|o, w| o.write_summary_json(w)),
        Format::Csv => text(|o, w| o.write_requests_csv(w)),
        Format::Table => {
            let mut s = table(&sc, &out);
            for (what, p) in written {
                let _ = writeln!(s, "{what}: written to {}", p.display());
            }
            Ok(s)
        }
    }
}

type Writer = fn(&ServeOutput, &mut dyn std::io::Write) -> std::io::Result<()>;

/// `serve --compare-to STAGES.csv`: every stage of a stage table replayed with its own settings
/// (the model and GPU its row names, unless --model / --hardware say otherwise).
fn compare_stages(raw: &RawServeScenario, path: &Path, format: Format) -> Result<Output, CliError> {
    use kvplan_serve::runs::{StageComparison, StageRun};
    let stages = StageRun::read(path).map_err(|e| CliError::input(format!("--compare-to: {e}")))?;
    let mut rows: Vec<StageComparison> = Vec::new();
    let mut skipped = Vec::new();
    for st in &stages {
        let sc = st
            .scenario(raw.model.as_deref(), raw.hardware.as_deref())
            .map_err(|e| e.to_string())
            .and_then(|r| r.resolve().map_err(|e| serve_error(e).message));
        let sc = match sc {
            Ok(sc) => sc,
            Err(why) => {
                skipped.push((st.name.clone(), why));
                continue;
            }
        };
        let reqs = sc.requests().map_err(|e| serve_error(e.into()))?;
        let out = sc.run(&reqs).map_err(|e| serve_error(e.into()))?;
        rows.push(StageComparison::new(st, &out));
    }
    if rows.is_empty() {
        return Err(CliError::input(format!(
            "--compare-to {}: no stage could be replayed ({})",
            path.display(),
            skipped
                .iter()
                .map(|(n, w)| format!("{n}: {w}"))
                .collect::<Vec<_>>()
                .join("; ")
        )));
    }
    match format {
        Format::Json => {
            #[derive(serde::Serialize)]
            struct Report<'a> {
                stages: &'a [StageComparison],
                skipped: &'a [(String, String)],
            }
            crate::commands::json_line(&Report {
                stages: &rows,
                skipped: &skipped,
            })
        }
        _ => {
            let mut text = format!(
                "serve --compare-to {}: {} stage(s) replayed with their settings\n",
                path.display(),
                rows.len()
            );
            text.push_str(&crate::render::stage_table(&rows));
            for (stage, why) in &skipped {
                let _ = writeln!(text, "skipped {stage}: {why}");
            }
            Ok(text)
        }
    }
}

/// `serve --compare-to`: predicted against measured, per metric.
fn comparison_output(
    sc: &ServeScenario,
    run: &kvplan_serve::runs::MeasuredRun,
    cmp: &kvplan_serve::runs::Comparison,
    format: Format,
    written: &[(&str, &std::path::PathBuf)],
) -> Result<Output, CliError> {
    use crate::commands::{csv_number, csv_text, json_line};
    match format {
        Format::Json => json_line(cmp),
        Format::Csv => csv_text(
            &["metric", "predicted", "measured", "error"],
            &cmp.metrics
                .iter()
                .map(|m| {
                    vec![
                        m.metric.to_string(),
                        csv_number(m.predicted),
                        csv_number(m.measured),
                        csv_number(m.error),
                    ]
                })
                .collect::<Vec<_>>(),
        ),
        Format::Table => {
            let mut text = format!(
                "serve --compare-to {}: {} on {} ({} scheduler) replaying {} measured requests\n",
                run.name,
                sc.model.name,
                sc.hardware.name,
                sc.config.scheduler.as_str(),
                run.requests.len()
            );
            let mut t = Table::new(&["metric", "predicted", "measured", "error"]);
            for m in &cmp.metrics {
                let show = |x: f64| {
                    if m.metric.ends_with("_s") && !m.metric.ends_with("_per_s") {
                        secs(x)
                    } else {
                        format!("{x:.3}")
                    }
                };
                t.row(&[
                    m.metric.to_string(),
                    show(m.predicted),
                    show(m.measured),
                    format!("{:+.1}%", m.error * 100.0),
                ]);
            }
            text.push_str(&t.render());
            let _ = writeln!(
                text,
                "per request, median |error|: E2E {:.1}%, TTFT {:.1}%",
                cmp.median_request_e2e_error * 100.0,
                cmp.median_request_ttft_error * 100.0
            );
            for (what, p) in written {
                let _ = writeln!(text, "{what}: written to {}", p.display());
            }
            Ok(text)
        }
    }
}

fn three(p: &kvplan_serve::output::Percentiles) -> String {
    if !p.p50.is_finite() {
        return "-".into();
    }
    format!("{} / {} / {}", secs(p.p50), secs(p.p90), secs(p.p99))
}

fn table(sc: &ServeScenario, out: &ServeOutput) -> String {
    let s = &out.summary;
    let c = &sc.config;
    let mut text = String::new();
    let workload = match sc.trace() {
        Some(p) => format!("trace {}", p.display()),
        None => format!("synthetic, seed {}", sc.seed),
    };
    let r = &sc.resolved;
    let _ = writeln!(
        text,
        "serve (simulated): {} on {}, {workload}, {} scheduler, {} preemption, block {} tokens, {} GPU blocks, max_model_len {}, {} seqs / {} tokens per step{}{}",
        sc.model.name,
        sc.hardware.name,
        kebab(&c.scheduler),
        kebab(&c.preemption),
        c.block_size,
        s.gpu_blocks,
        r.max_model_len,
        r.max_num_seqs,
        r.max_num_batched_tokens,
        if r.async_scheduling {
            ", async scheduling"
        } else {
            ""
        },
        if r.cudagraph_sizes.is_empty() {
            ", eager"
        } else {
            ", CUDA graphs"
        },
    );
    let mut t = Table::new(&["metric", "value"]);
    t.row(&[
        "requests".to_string(),
        format!(
            "{} ({} finished, {} rejected)",
            s.requests, s.finished, s.rejected
        ),
    ]);
    t.row(&[
        "throughput".to_string(),
        format!(
            "{:.1} tok/s output, {:.1} tok/s total, {:.3} req/s",
            s.output_tokens_per_s, s.total_tokens_per_s, s.requests_per_s
        ),
    ]);
    t.row(&["TTFT p50 / p90 / p99".to_string(), three(&s.ttft_s)]);
    t.row(&["TPOT p50 / p90 / p99".to_string(), three(&s.tpot_s)]);
    t.row(&["E2E p50 / p90 / p99".to_string(), three(&s.e2e_s)]);
    t.row(&["queueing p50 / p90 / p99".to_string(), three(&s.queue_s)]);
    if s.truncated > 0 {
        t.row(&[
            "cut at max_model_len".to_string(),
            format!("{} (finish reason length)", s.truncated),
        ]);
    }
    t.row(&["preemptions".to_string(), s.preemptions.to_string()]);
    if sc.resolved.prefix_caching {
        t.row(&[
            "prefix cache".to_string(),
            format!(
                "{} hit rate, {} prompt tokens cached",
                pct(s.prefix_cache_hit_rate),
                s.cached_prompt_tokens
            ),
        ]);
    }
    if sc.config.scheduler != kvplan_serve::SchedulerKind::VllmV1 {
        t.row(&[
            "swap out / in".to_string(),
            format!("{} / {}", gib(s.swap_out_bytes), gib(s.swap_in_bytes)),
        ]);
    }
    t.row(&["GPU busy".to_string(), pct(s.gpu_busy)]);
    t.row(&["makespan".to_string(), secs(s.makespan_s)]);
    t.row(&["iterations".to_string(), s.iterations.to_string()]);
    text.push_str(&t.render());
    let mut reasons: Vec<(&str, u64)> = Vec::new();
    for r in &out.requests {
        if let Status::Rejected(why) = r.status {
            match reasons.iter_mut().find(|(w, _)| *w == why.as_str()) {
                Some((_, n)) => *n += 1,
                None => reasons.push((why.as_str(), 1)),
            }
        }
    }
    for (why, n) in reasons {
        let _ = writeln!(text, "rejected: {n} ({why})");
    }
    text
}

/// The kebab-case name serde gives an enum variant.
fn kebab<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

/// One configuration's answer in `kvplan capacity --slo`.
#[derive(Debug, serde::Serialize)]
struct SloRow {
    hardware: String,
    tensor_parallel_size: u32,
    /// `None`: not even the lowest rate tried meets the SLO.
    max_qps: Option<f64>,
    /// The lowest rate found that misses it (`None`: the highest rate tried met it).
    fails_at_qps: Option<f64>,
    /// Why the next rate up fails (the terms it misses).
    limited_by: Vec<String>,
    /// Requests per second meeting every objective at `max_qps` (vLLM's goodput).
    goodput_rps: Option<f64>,
    /// Percentiles at `max_qps` over the measured requests (rejected and truncated ones
    /// counted as infinite).
    ttft: kvplan_serve::output::Percentiles,
    tpot: kvplan_serve::output::Percentiles,
    e2e: kvplan_serve::output::Percentiles,
    ttft_p99_s: f64,
    tpot_p99_s: f64,
    e2e_p99_s: f64,
    output_tok_s: f64,
    /// Measured requests at `max_qps` that were rejected / cut at max_model_len.
    rejected: u64,
    truncated: u64,
    measured_requests: u64,
    requests_per_rate: u64,
    rates_served: usize,
    replicas: Option<u64>,
    gpus: Option<u64>,
    usd_per_hour: Option<f64>,
    /// Price per million output tokens / all tokens at `max_qps`, when the profile has one.
    usd_per_m_output_tokens: Option<f64>,
    usd_per_m_tokens: Option<f64>,
}

/// `kvplan capacity --slo`: the highest request rate each configuration sustains under the
/// latency objectives, and with `--target-qps` the cheapest configuration for that rate.
pub fn slo_capacity(args: &crate::args::CapacityArgs) -> Result<Output, CliError> {
    use kvplan_serve::capacity::{SearchOptions, Slo, max_qps, size_for};
    let slo: Slo = args
        .slo
        .as_deref()
        .unwrap_or_default()
        .parse()
        .map_err(|e: kvplan_serve::capacity::CapacityError| CliError::input(e.to_string()))?;
    if let Some(q) = args.target_qps
        && !(q.is_finite() && q > 0.0)
    {
        return Err(CliError::input(format!(
            "--target-qps: {q} must be a rate above 0 requests/s"
        )));
    }
    let mut base = match &args.scenario {
        Some(p) => read_scenario(p)?,
        None => RawServeScenario::default(),
    };
    let w = &mut base.workload;
    let pick = |a: &mut Option<String>, b: &Option<String>| {
        if b.is_some() {
            *a = b.clone();
        }
    };
    pick(&mut base.model, &args.model);
    pick(&mut w.arrivals, &args.arrivals);
    pick(&mut w.prompt_lengths, &args.lengths);
    pick(&mut w.output_lengths, &args.output_lengths);
    if args.trace.is_some() {
        w.trace = args.trace.clone();
    }
    if args.requests.is_some() {
        w.requests = args.requests;
    }
    if args.seed.is_some() {
        w.seed = args.seed;
    }
    if w.trace.is_none() && w.arrivals.is_none() {
        w.arrivals = Some("poisson".into());
    }
    let hardware: Vec<String> = match (&args.hardware, &base.hardware) {
        (Some(list), _) => list.split(',').map(|h| h.trim().to_string()).collect(),
        (None, Some(h)) => vec![h.clone()],
        (None, None) => Vec::new(),
    };
    if hardware.is_empty() || hardware.iter().any(String::is_empty) {
        return Err(CliError::input(
            "--hardware: give one or more presets or profile files, comma-separated (e.g. a100-80g-sxm,h100-sxm)",
        ));
    }
    let tps: Vec<u32> = match &args.tensor_parallel_size {
        Some(list) => list
            .split(',')
            .map(|t| {
                t.trim().parse::<u32>().ok().filter(|&n| n >= 1).ok_or_else(|| {
                    CliError::input(format!(
                        "--tensor-parallel-size: '{t}' is not a GPU count; give counts such as 1,2,4"
                    ))
                })
            })
            .collect::<Result<_, _>>()?,
        None => vec![base.serve.tensor_parallel_size.unwrap_or(1)],
    };
    let opts = SearchOptions {
        rel_tol: args.qps_tolerance,
        ..SearchOptions::default()
    };
    if let Some(n) = w.requests {
        base.workload.requests = Some(n.max(1));
    }
    let mut rows = Vec::new();
    for h in &hardware {
        let profile = kvplan_vocab::HardwareProfile::resolve(h)?;
        for &tp in &tps {
            let mut raw = base.clone();
            raw.hardware = Some(h.clone());
            raw.serve.tensor_parallel_size = Some(tp);
            let c = max_qps(&raw, &slo, opts).map_err(|e| match e {
                kvplan_serve::capacity::CapacityError::Scenario(s) => serve_error(*s),
                other => CliError::input(other.to_string()),
            })?;
            let limited_by = c
                .probes
                .iter()
                .find(|p| Some(p.qps) == c.fails_at)
                .map(|p| slo.misses(&p.window))
                .unwrap_or_default();
            let requests_per_rate = c
                .probes
                .iter()
                .find(|p| Some(p.qps) == c.max_qps)
                .map_or(0, |p| p.requests);
            let sizing = match (args.target_qps, c.max_qps) {
                (Some(t), Some(q)) => Some(size_for(t, q, tp, profile.gpu.price_usd_per_hour)),
                _ => None,
            };
            let price = profile.gpu.price_usd_per_hour;
            let per_m = |tok_s: f64| {
                price.and_then(|p| kvplan_serve::capacity::usd_per_million_tokens(p, tp, tok_s))
            };
            let found = c.max_qps.is_some();
            rows.push(SloRow {
                hardware: profile.name.clone(),
                tensor_parallel_size: tp,
                max_qps: c.max_qps,
                fails_at_qps: c.fails_at,
                limited_by,
                goodput_rps: found.then_some(c.at.goodput_rps),
                ttft: c.at.ttft_s,
                tpot: c.at.tpot_s,
                e2e: c.at.e2e_s,
                ttft_p99_s: c.at.ttft_s.p99,
                tpot_p99_s: c.at.tpot_s.p99,
                e2e_p99_s: c.at.e2e_s.p99,
                output_tok_s: c.at.output_tokens_per_s,
                rejected: c.at.rejected,
                truncated: c.at.truncated,
                measured_requests: c.at.measured,
                requests_per_rate,
                rates_served: c.probes.len(),
                replicas: sizing.map(|s| s.replicas),
                gpus: sizing.map(|s| s.gpus),
                usd_per_hour: sizing.and_then(|s| s.usd_per_hour),
                usd_per_m_output_tokens: found.then(|| per_m(c.at.output_tokens_per_s)).flatten(),
                usd_per_m_tokens: found.then(|| per_m(c.at.total_tokens_per_s)).flatten(),
            });
        }
    }
    // The cheapest that meets the target: by price when every sized row has one, else GPUs.
    let sized: Vec<&SloRow> = rows.iter().filter(|r| r.gpus.is_some()).collect();
    let by_price = !sized.is_empty() && sized.iter().all(|r| r.usd_per_hour.is_some());
    let cheapest = sized.iter().min_by(|a, b| {
        let key = |r: &SloRow| {
            if by_price {
                r.usd_per_hour.unwrap_or(f64::INFINITY)
            } else {
                r.gpus.unwrap_or(u64::MAX) as f64
            }
        };
        key(a).total_cmp(&key(b))
    });
    let num = |v: Option<f64>| v.map_or(String::new(), crate::commands::csv_number);
    match args.output.format {
        Format::Json => {
            #[derive(serde::Serialize)]
            struct Report<'a> {
                slo: String,
                target_qps: Option<f64>,
                cheapest: Option<String>,
                ranked_by: Option<&'static str>,
                configurations: &'a [SloRow],
            }
            crate::commands::json_line(&Report {
                slo: slo.to_string(),
                target_qps: args.target_qps,
                cheapest: cheapest
                    .map(|r| format!("{} x TP {}", r.hardware, r.tensor_parallel_size)),
                ranked_by: args
                    .target_qps
                    .map(|_| if by_price { "usd_per_hour" } else { "gpus" }),
                configurations: &rows,
            })
        }
        Format::Csv => crate::commands::csv_text(
            &[
                "hardware",
                "tensor_parallel_size",
                "max_qps",
                "fails_at_qps",
                "goodput_rps",
                "ttft_p50_s",
                "ttft_p90_s",
                "ttft_p95_s",
                "ttft_p99_s",
                "tpot_p50_s",
                "tpot_p90_s",
                "tpot_p95_s",
                "tpot_p99_s",
                "e2e_p50_s",
                "e2e_p90_s",
                "e2e_p95_s",
                "e2e_p99_s",
                "output_tok_s",
                "rejected",
                "truncated",
                "measured_requests",
                "replicas",
                "gpus",
                "usd_per_hour",
                "usd_per_m_output_tokens",
                "usd_per_m_tokens",
            ],
            &rows
                .iter()
                .map(|r| {
                    let n = crate::commands::csv_number;
                    let mut row = vec![
                        r.hardware.clone(),
                        r.tensor_parallel_size.to_string(),
                        num(r.max_qps),
                        num(r.fails_at_qps),
                        num(r.goodput_rps),
                    ];
                    for p in [&r.ttft, &r.tpot, &r.e2e] {
                        row.extend([n(p.p50), n(p.p90), n(p.p95), n(p.p99)]);
                    }
                    row.extend([
                        n(r.output_tok_s),
                        r.rejected.to_string(),
                        r.truncated.to_string(),
                        r.measured_requests.to_string(),
                        r.replicas.map_or(String::new(), |v| v.to_string()),
                        r.gpus.map_or(String::new(), |v| v.to_string()),
                        num(r.usd_per_hour),
                        num(r.usd_per_m_output_tokens),
                        num(r.usd_per_m_tokens),
                    ]);
                    row
                })
                .collect::<Vec<_>>(),
        ),
        Format::Table => {
            let steady = opts.steady;
            let mut out = format!(
                "serving capacity under {slo} at steady state (each rate served for at least {} \
                 requests and {} s of arrivals, the first {}% left out as warm-up; the queue must \
                 not grow; rejected and truncated requests count as misses; rates within {}%)\n",
                base.workload.requests.unwrap_or(0).max(steady.min_requests),
                steady.min_duration_s,
                steady.warmup_fraction * 100.0,
                args.qps_tolerance * 100.0
            );
            let mut header = vec![
                "hardware",
                "TP",
                "max req/s",
                "goodput req/s",
                "TTFT p50 / p95 / p99",
                "TPOT p50 / p95 / p99",
                "E2E p99",
                "rejected",
                "output tok/s",
                "limited by",
            ];
            let priced = rows.iter().any(|r| r.usd_per_m_output_tokens.is_some());
            if priced {
                header.push("$/M output tok");
            }
            if args.target_qps.is_some() {
                header.extend(["replicas", "GPUs", "$/hour"]);
            }
            let mut t = Table::new(&header);
            for r in &rows {
                let three = |p: &kvplan_serve::output::Percentiles| {
                    format!("{} / {} / {}", secs(p.p50), secs(p.p95), secs(p.p99))
                };
                let mut cells = vec![
                    r.hardware.clone(),
                    r.tensor_parallel_size.to_string(),
                    r.max_qps.map_or("none".to_string(), |q| format!("{q:.2}")),
                    r.goodput_rps.map_or("-".into(), |g| format!("{g:.2}")),
                    three(&r.ttft),
                    three(&r.tpot),
                    secs(r.e2e_p99_s),
                    format!("{} of {}", r.rejected, r.measured_requests),
                    format!("{:.0}", r.output_tok_s),
                    r.limited_by.join(", "),
                ];
                if priced {
                    cells.push(
                        r.usd_per_m_output_tokens
                            .map_or("-".into(), |v| format!("{v:.3}")),
                    );
                }
                if args.target_qps.is_some() {
                    cells.push(r.replicas.map_or("-".into(), |v| v.to_string()));
                    cells.push(r.gpus.map_or("-".into(), |v| v.to_string()));
                    cells.push(r.usd_per_hour.map_or("-".into(), |v| format!("{v:.2}")));
                }
                t.row(&cells);
            }
            out.push_str(&t.render());
            if let Some(target) = args.target_qps {
                match cheapest {
                    Some(r) => {
                        let _ = writeln!(
                            out,
                            "cheapest for {target} req/s: {} x TP {} ({} replicas, {} GPUs{})",
                            r.hardware,
                            r.tensor_parallel_size,
                            r.replicas.unwrap_or_default(),
                            r.gpus.unwrap_or_default(),
                            match r.usd_per_hour {
                                Some(p) if by_price => format!(", ${p:.2}/hour"),
                                _ =>
                                    ", fewest GPUs: not every profile gives gpu.price_usd_per_hour"
                                        .into(),
                            }
                        );
                    }
                    None => {
                        let _ = writeln!(out, "no configuration meets the SLO at any rate tried");
                    }
                }
            }
            Ok(out)
        }
    }
}
