//! The serving simulator's reports as the command line prints them: a run's summary (`serve`),
//! predicted against measured (a measured run, or a table of load stages), and the serving
//! capacity of each configuration.

use std::fmt::Write as _;
use std::path::Path;

use kvplan_serve::ServeReport;
use kvplan_serve::capacity::{CapacityComparison, ConfigCapacity, SearchOptions, Slo};
use kvplan_serve::runs::{Comparison, MeasuredRun, StageComparison};
use kvplan_serve::scenario::ServeScenario;

use crate::error::Error;
use crate::render::*;

/// Files written, each with its label (the command line's flag) and path.
pub type Written<'a> = [(&'a str, &'a Path)];

/// A run's summary: the summary JSON, the per-request CSV, or the table followed by one line per
/// file written. `goodput_as` names the goodput the table's goodput line counts as vLLM's
/// benchmark does, in the words of vLLM's command line.
pub fn serve_report(
    sc: &ServeScenario,
    out: &ServeReport,
    written: &Written,
    goodput_as: &str,
    format: Format,
) -> Result<String, Error> {
    let text = |f: Writer| -> Result<String, Error> {
        let mut buf = Vec::new();
        f(out, &mut buf).map_err(|e| Error::Failure(format!("cannot render output: {e}")))?;
        Ok(String::from_utf8(buf).expect("the serving outputs are UTF-8"))
    };
    match format {
        Format::Json => text(|o, w| o.write_summary_json(w)),
        Format::Csv => text(|o, w| o.write_requests_csv(w)),
        Format::Table => {
            let mut s = table(sc, out);
            if let Some(g) = &out.goodput {
                let _ = writeln!(
                    s,
                    "goodput under {}: {:.3} req/s ({} of {} requests meet every objective, {:.1}%; {goodput_as}){}",
                    g.objectives,
                    g.goodput_rps,
                    g.good,
                    g.requests,
                    100.0 * g.attainment,
                    if g.misses.is_empty() {
                        String::new()
                    } else {
                        format!("; missed: {}", g.misses.join(", "))
                    }
                );
            }
            for (what, p) in written {
                let _ = writeln!(s, "{what}: written to {}", p.display());
            }
            Ok(s)
        }
    }
}

/// One of a serving report's writers (`ServeReport::write_requests_csv`, ...).
pub type Writer = fn(&ServeReport, &mut dyn std::io::Write) -> std::io::Result<()>;

/// A file a serving run can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServeFile {
    /// One CSV row per request.
    RequestsCsv,
    /// One CSV row per iteration.
    TimeseriesCsv,
    /// The summary JSON.
    SummaryJson,
    /// A Chrome trace, one slice per iteration.
    ChromeTrace,
    /// The SVG of KV blocks and queues against time.
    TimeseriesPlot,
    /// The SVG of the latency CDFs.
    CdfPlot,
}

/// Writes `files` of `out` (each with the label the caller's messages use for it), in order,
/// and returns them as written. Plots are drawn before any file is written, so a plot that
/// cannot be drawn (no request finished) leaves no file behind.
pub fn write_files<'a>(
    out: &ServeReport,
    title: &str,
    files: &[(ServeFile, &'a Path, &'a str)],
) -> Result<Vec<(&'a str, &'a Path)>, Error> {
    let mut svgs = Vec::new();
    for &(file, _, what) in files {
        svgs.push(match file {
            ServeFile::TimeseriesPlot => Some(crate::plots::serve_timeseries(out, title, what)?),
            ServeFile::CdfPlot => Some(crate::plots::serve_cdf(
                out,
                &format!("{title}: latency CDF"),
                what,
            )?),
            _ => None,
        });
    }
    for (&(file, path, what), svg) in files.iter().zip(&svgs) {
        crate::files::write_output(path, what, |w| match (file, svg) {
            (_, Some(svg)) => w.write_all(svg.as_bytes()),
            (ServeFile::RequestsCsv, _) => out.write_requests_csv(w),
            (ServeFile::TimeseriesCsv, _) => out.write_timeseries_csv(w),
            (ServeFile::SummaryJson, _) => out.write_summary_json(w),
            _ => out.write_chrome_trace(w),
        })?;
    }
    Ok(files.iter().map(|&(_, p, what)| (what, p)).collect())
}

/// Load stages replayed each with its own settings, against their measurements; `what` and
/// `path` name the stage table in the first line.
pub fn stage_comparisons(
    what: &str,
    path: &Path,
    rows: &[StageComparison],
    skipped: &[(String, String)],
    format: Format,
) -> Result<String, Error> {
    match format {
        Format::Json => {
            #[derive(serde::Serialize)]
            struct Report<'a> {
                stages: &'a [StageComparison],
                skipped: &'a [(String, String)],
            }
            json_line(&Report {
                stages: rows,
                skipped,
            })
        }
        _ => {
            let mut text = format!(
                "{what} {}: {} stage(s) replayed with their settings\n",
                path.display(),
                rows.len()
            );
            text.push_str(&stage_table(rows));
            for (stage, why) in skipped {
                let _ = writeln!(text, "skipped {stage}: {why}");
            }
            Ok(text)
        }
    }
}

/// A measured run replayed: predicted against measured, per metric; `what` names the
/// comparison in the first line, followed by one line per file written.
pub fn measured_comparison(
    what: &str,
    sc: &ServeScenario,
    run: &MeasuredRun,
    cmp: &Comparison,
    written: &Written,
    format: Format,
) -> Result<String, Error> {
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
                "{what} {}: {} on {} ({} scheduler) replaying {} measured requests\n",
                run.name,
                sc.model.name,
                sc.hardware.name,
                sc.config.scheduler.as_str(),
                run.requests.len()
            );
            let mut t = Table::new(&["metric", "predicted", "measured", "error"]);
            for m in &cmp.metrics {
                t.row(&[
                    m.metric.to_string(),
                    metric_value(m.metric, m.predicted),
                    metric_value(m.metric, m.measured),
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

/// `value (lo-hi)` of a band, each shown by `show`; `-` without one.
pub fn banded(b: Option<&kvplan_serve::bands::Band>, show: impl Fn(f64) -> String) -> String {
    match b {
        Some(b) => format!("{} ({}-{})", show(b.value), show(b.lo), show(b.hi)),
        None => "-".into(),
    }
}

/// The rows of a run's bands: means and p99s of TTFT, TPOT and E2E, and throughput.
fn band_rows(t: &mut Table, b: &kvplan_serve::bands::ServeBands) {
    use kvplan_serve::bands::Metric as M;
    let pct = format!("{:.0}% band", 100.0 * b.coverage);
    for (name, mean, p99) in [
        ("TTFT", M::TtftMean, M::TtftP99),
        ("TPOT", M::TpotMean, M::TpotP99),
        ("E2E", M::E2eMean, M::E2eP99),
    ] {
        t.row(&[
            format!("{name} mean / p99, {pct}"),
            format!(
                "{} / {}",
                banded(b.get(mean), secs),
                banded(b.get(p99), secs)
            ),
        ]);
    }
    t.row(&[
        format!("throughput, {pct}"),
        format!(
            "{} tok/s output, {} req/s",
            banded(b.get(M::OutputTokensPerS), |x| format!("{x:.1}")),
            banded(b.get(M::RequestsPerS), |x| format!("{x:.3}"))
        ),
    ]);
}

fn three(p: &kvplan_serve::output::Percentiles) -> String {
    if !p.p50.is_finite() {
        return "-".into();
    }
    format!("{} / {} / {}", secs(p.p50), secs(p.p90), secs(p.p99))
}

/// `, awq weights, fp8 KV cache` where the model is quantised or its cache is fp8 (nothing for
/// the model's own dtype throughout).
fn precision(m: &kvplan_vocab::ModelSpec) -> String {
    let mut s = String::new();
    if let Some(q) = m.quantization {
        let _ = write!(s, ", {q} weights");
    }
    if m.kv_cache_dtype != kvplan_vocab::KvCacheDtype::Auto {
        let _ = write!(s, ", {} KV cache", m.kv_cache_dtype);
    }
    s
}

fn table(sc: &ServeScenario, out: &ServeReport) -> String {
    let mut text = headline(sc, out);
    let mut t = summary_table(sc, out);
    if let Some(b) = &out.bands {
        band_rows(&mut t, b);
    }
    text.push_str(&t.render());
    after_table(&mut text, out);
    if let (Some(c), Some(cs)) = (&out.cluster, &sc.cluster) {
        text.push_str(&cluster_tables(c, cs));
    }
    text
}

/// The run's first line: what was served where, with which workload and engine settings.
fn headline(sc: &ServeScenario, out: &ServeReport) -> String {
    let s = &out.summary;
    let c = &sc.config;
    let workload = match sc.trace() {
        Some(p) => format!("trace {}", p.display()),
        None => format!("synthetic, seed {}", sc.seed),
    };
    let r = &sc.resolved;
    format!(
        "serve (simulated): {} on {}{}, {workload}, vLLM {}, {} scheduler, {} preemption, block {} tokens, {} GPU blocks, max_model_len {}, {} seqs / {} tokens per step{}{}\n",
        sc.model.name,
        served_on(sc),
        precision(&sc.model),
        s.vllm_version,
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
        match r.cudagraph_mode {
            kvplan_serve::config::CudagraphMode::None => ", eager",
            kvplan_serve::config::CudagraphMode::Piecewise => ", piecewise CUDA graphs",
            kvplan_serve::config::CudagraphMode::FullAndPiecewise => ", CUDA graphs",
        },
    )
}

/// Where the run was served: the GPU, or the cluster's replicas, GPUs and router.
fn served_on(sc: &ServeScenario) -> String {
    let role = |c: &kvplan_serve::cluster::scenario::ClusterScenario, role| {
        c.replicas.iter().filter(|r| r.role == role).count()
    };
    match &sc.cluster {
        None => sc.hardware.name.clone(),
        Some(c) if c.disaggregated => format!(
            "{} prefill + {} decode replicas ({} GPUs, {} KV transfer, {} router)",
            role(c, kvplan_serve::cluster::Role::Prefill),
            role(c, kvplan_serve::cluster::Role::Decode),
            c.gpus(),
            c.transfer.as_str(),
            c.router,
        ),
        Some(c) => format!(
            "{} replicas ({} GPUs, {} router)",
            c.replicas.len(),
            c.gpus(),
            c.router
        ),
    }
}

/// The run's figures, one metric a row: requests, throughput, latency percentiles, then
/// the caches and tiers the run used, and the time it took.
fn summary_table(sc: &ServeScenario, out: &ServeReport) -> Table {
    let s = &out.summary;
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
    t.row(&["ITL p50 / p90 / p99".to_string(), three(&s.itl_s)]);
    t.row(&["E2E p50 / p90 / p99".to_string(), three(&s.e2e_s)]);
    t.row(&["queueing p50 / p90 / p99".to_string(), three(&s.queue_s)]);
    if s.truncated > 0 {
        t.row(&[
            "cut at max_model_len".to_string(),
            format!("{} (finish reason length)", s.truncated),
        ]);
    }
    t.row(&["preemptions".to_string(), s.preemptions.to_string()]);
    cache_rows(&mut t, sc, out);
    t.row(&["GPU busy".to_string(), pct(s.gpu_busy)]);
    t.row(&["makespan".to_string(), secs(s.makespan_s)]);
    t.row(&["iterations".to_string(), s.iterations.to_string()]);
    if let Some(c) = &s.first_use_compilation {
        t.row(&[
            "first-use compilation".to_string(),
            format!(
                "{} fused-MoE kernels, steps held {} (a freshly started server)",
                c.kernels,
                secs(c.stall_s)
            ),
        ]);
    }
    t
}

/// The rows of the KV caches the run used: the prefix cache, swap, the CPU KV tier.
fn cache_rows(t: &mut Table, sc: &ServeScenario, out: &ServeReport) {
    let s = &out.summary;
    if sc.resolved.prefix_caching {
        t.row(&[
            "prefix cache".to_string(),
            format!(
                "{} hit rate, {} prompt tokens cached{}",
                pct(s.prefix_cache_hit_rate),
                s.cached_prompt_tokens,
                match s.preempted_prefix_cache_hit_rate {
                    Some(r) => format!(
                        " (new requests); {} hit rate of preempted requests resuming",
                        pct(r)
                    ),
                    None => String::new(),
                }
            ),
        ]);
    }
    if (sc.config.scheduler.spec().preemption).contains(&kvplan_serve::Preemption::Swap) {
        t.row(&[
            "swap out / in".to_string(),
            format!("{} / {}", gib(s.swap_out_bytes), gib(s.swap_in_bytes)),
        ]);
    }
    if let Some(tier) = &out.tier {
        tier_rows(t, tier);
    }
}

/// The CPU KV tier's hits, traffic and (hybrid reload) recomputed tokens.
fn tier_rows(t: &mut Table, tier: &kvplan_serve::tier::TierStats) {
    let mean_load = if tier.loads > 0 {
        secs(tier.load_s / tier.loads as f64)
    } else {
        "-".into()
    };
    t.row(&[
        "CPU KV tier hits".to_string(),
        format!(
            "{} hit rate, {} tokens in {} loads, mean load {mean_load}",
            pct(if tier.queried_tokens > 0 {
                tier.hit_tokens as f64 / tier.queried_tokens as f64
            } else {
                0.0
            }),
            tier.hit_tokens,
            tier.loads,
        ),
    ]);
    t.row(&[
        "CPU KV tier traffic".to_string(),
        format!(
            "{} out, {} in, peak {} of {}",
            gib(tier.stored_bytes),
            gib(tier.loaded_bytes),
            gib(tier.peak_bytes),
            gib(tier.capacity_bytes),
        ),
    ]);
    if tier.recomputed_tokens > 0 {
        t.row(&[
            "hybrid reload".to_string(),
            format!(
                "{} tokens' K and V recomputed from stored layer inputs",
                tier.recomputed_tokens
            ),
        ]);
    }
}

/// The lines under the table: how the bands were drawn, the rejected requests by reason, and
/// a warning where the run was overloaded.
fn after_table(text: &mut String, out: &ServeReport) {
    let s = &out.summary;
    if let Some(b) = &out.bands {
        let _ = writeln!(
            text,
            "bands: {:.0}% coverage: {} runs with the kernel costs perturbed by the calibration residuals (sd {:.1}% token-wise, {:.1}% attention), each figure times the residuals of {} served real vLLM stages (docs/DESIGN.md, \"Error bands\")",
            100.0 * b.coverage,
            b.draws,
            100.0 * b.spread.dense,
            100.0 * b.spread.attention,
            b.residual_stages
        );
    }
    // In the order the first request of each reason was given.
    for why in &s.rejected_order {
        let n = s.rejected_by_reason.get(why).copied().unwrap_or(0);
        let _ = writeln!(text, "rejected: {n} ({why})");
    }
    if let Some(o) = out.overload() {
        let _ = writeln!(
            text,
            "warning: overloaded: {:.3} req/s served of {:.3} offered; the queueing delay grew by {} across the arrivals, so the percentiles above depend on how long the run is (the highest rate this configuration sustains: kvplan serve-capacity)",
            o.served_rps,
            o.offered_rps,
            secs(o.queue_growth_s)
        );
    }
}

/// A cluster's per-replica table, the router's spread and, disaggregated, the transfers and
/// what binds.
fn cluster_tables(
    c: &kvplan_serve::cluster::ClusterOutput,
    cs: &kvplan_serve::cluster::scenario::ClusterScenario,
) -> String {
    let disagg = c.transfer.is_some();
    let mut text = replica_table(c);
    for (i, pool) in c.pools.iter().enumerate() {
        let what = match (disagg, i) {
            (false, _) => "",
            (true, 0) => " (prefill pool)",
            (true, _) => " (decode pool)",
        };
        let _ = writeln!(
            text,
            "router {}{what}: {} requests over {} replicas, imbalance {:.2} (most routed to one \
             replica over the mean)",
            cs.router,
            pool.routed.iter().sum::<u64>(),
            pool.routed.len(),
            pool.imbalance
        );
    }
    if let Some(a) = &c.autoscale {
        text.push_str(&autoscale_tables(a));
    }
    if let (Some(tr), Some(b)) = (&c.transfer, c.binding) {
        let n = tr.transfers.max(1) as f64;
        let _ = writeln!(
            text,
            "KV transfer ({}): {} transfers, {}, mean {} from the read posted to the KV there \
             ({} of it waiting for a busy link)",
            tr.mode.as_str(),
            tr.transfers,
            gib(tr.bytes),
            secs(tr.seconds / n),
            secs(tr.wait_s / n),
        );
        let (p, d, link) = kvplan_serve::cluster::output::pressures(&c.replicas);
        let _ = writeln!(
            text,
            "binds: {} (prefill GPUs {} busy, decode KV blocks {} full on average, busiest \
             link {} busy)",
            b.as_str(),
            pct(p),
            pct(d),
            pct(link),
        );
    }
    text
}

/// One row per replica of a cluster: its role, GPU, requests routed, latencies, how busy it
/// was and (disaggregated) how busy its link was.
fn replica_table(c: &kvplan_serve::cluster::ClusterOutput) -> String {
    let disagg = c.transfer.is_some();
    let mut head = vec![
        "replica",
        "role",
        "GPU",
        "TP",
        "routed",
        "TTFT p50",
        "TTFT p99",
        "TPOT p50",
        "TPOT p99",
        "GPU busy",
        "KV used",
        "prefix hits",
    ];
    if disagg {
        head.push("link busy");
    }
    let mut t = Table::new(&head);
    for r in &c.replicas {
        let prefill = r.role == kvplan_serve::cluster::Role::Prefill;
        let p = |f: fn(&kvplan_serve::Summary) -> f64| {
            r.summary.as_ref().map_or("-".into(), |s| secs(f(s)))
        };
        // A prefill replica makes one token per request: no time per output token.
        let tpot = |f: fn(&kvplan_serve::Summary) -> f64| if prefill { "-".into() } else { p(f) };
        let mut row = vec![
            r.name.clone(),
            r.role.as_str().to_string(),
            r.hardware.clone(),
            r.tensor_parallel_size.to_string(),
            r.routed.to_string(),
            p(|s| s.ttft_s.p50),
            p(|s| s.ttft_s.p99),
            tpot(|s| s.tpot_s.p50),
            tpot(|s| s.tpot_s.p99),
            pct(r.gpu_busy),
            pct(r.kv_occupancy),
            r.prefix_hit_tokens.to_string(),
        ];
        if disagg {
            row.push(pct(r.network_busy));
        }
        t.row(&row);
    }
    t.render()
}

/// The kebab-case name serde gives an enum variant.
fn kebab<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

/// The serving capacity of each configuration. `sizing` is the command that sizes a
/// deployment for a rate, as the command line spells it; the table's last line points to it.
pub fn capacity(
    slo: &Slo,
    cmp: &CapacityComparison,
    opts: &SearchOptions,
    base_requests: u64,
    sizing: &str,
    format: Format,
) -> Result<String, Error> {
    let rows = &cmp.rows;
    match format {
        Format::Json => {
            #[derive(serde::Serialize)]
            struct Report<'a> {
                slo: String,
                configurations: &'a [ConfigCapacity],
            }
            json_line(&Report {
                slo: slo.to_string(),
                configurations: rows,
            })
        }
        Format::Csv => csv_text(
            &capacity_csv_header(opts),
            &rows
                .iter()
                .map(|r| capacity_csv_row(r, opts))
                .collect::<Vec<_>>(),
        ),
        Format::Table => {
            let mut out = capacity_table(slo, rows, opts, base_requests);
            capacity_notes(&mut out, rows, opts);
            let _ = writeln!(
                out,
                "to size a deployment for a rate (replicas, routers, prefill/decode pools, cost), \
                 simulated as a cluster: {sizing}"
            );
            Ok(out)
        }
    }
}

/// The capacity CSV's columns: the figures of each configuration, then its band's where
/// bands were asked for.
fn capacity_csv_header(opts: &SearchOptions) -> Vec<&'static str> {
    [
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
        "usd_per_m_output_tokens",
        "usd_per_m_tokens",
    ]
    .into_iter()
    .chain(
        opts.bands
            .map(|_| ["max_qps_lo", "max_qps_hi", "coverage"])
            .into_iter()
            .flatten(),
    )
    .collect()
}

/// One configuration's CSV row.
fn capacity_csv_row(r: &ConfigCapacity, opts: &SearchOptions) -> Vec<String> {
    let num = |v: Option<f64>| v.map_or(String::new(), csv_number);
    let n = csv_number;
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
        num(r.usd_per_m_output_tokens),
        num(r.usd_per_m_tokens),
    ]);
    if let Some(settings) = &opts.bands {
        let b = r.max_qps_band.as_ref();
        row.extend([
            num(b.map(|b| b.lo)),
            num(b.map(|b| b.hi)),
            n(settings.coverage),
        ]);
    }
    row
}

/// A percentile that falls on a rejected or truncated request (ranked as infinitely slow) has
/// no time to show.
fn served(x: f64) -> String {
    if x == f64::INFINITY {
        "unserved".to_string()
    } else {
        secs(x)
    }
}

/// The capacity table: the first line says how each rate was served, then one row per
/// configuration (with its price per output token where any has one).
fn capacity_table(
    slo: &Slo,
    rows: &[ConfigCapacity],
    opts: &SearchOptions,
    base_requests: u64,
) -> String {
    let steady = opts.steady;
    let mut out = format!(
        "serving capacity under {slo} at steady state (each rate served for at least {} \
         requests and {} s of arrivals, the first {}% left out as warm-up; the queue must \
         not grow; rejected and truncated requests count as misses; rates within {}%)\n",
        base_requests.max(steady.min_requests),
        steady.min_duration_s,
        steady.warmup_fraction * 100.0,
        opts.rel_tol * 100.0
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
    let mut t = Table::new(&header);
    for r in rows {
        let three = |p: &kvplan_serve::output::Percentiles| {
            format!("{} / {} / {}", served(p.p50), served(p.p95), served(p.p99))
        };
        let mut cells = vec![
            r.hardware.clone(),
            r.tensor_parallel_size.to_string(),
            match (r.max_qps, &r.max_qps_band) {
                (None, _) => "none".to_string(),
                (Some(q), None) => format!("{q:.2}"),
                (Some(q), Some(b)) => format!("{q:.2} ({:.2}-{:.2})", b.lo, b.hi),
            },
            r.goodput_rps.map_or("-".into(), |g| format!("{g:.2}")),
            three(&r.ttft),
            three(&r.tpot),
            served(r.e2e_p99_s),
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
        t.row(&cells);
    }
    out.push_str(&t.render());
    out
}

/// The lines under the capacity table: unserved percentiles, configurations that meet the
/// SLO at no rate, the bands of those that do, and how the bands were drawn.
fn capacity_notes(out: &mut String, rows: &[ConfigCapacity], opts: &SearchOptions) {
    let unserved = rows.iter().any(|r| {
        [&r.ttft, &r.tpot, &r.e2e]
            .iter()
            .any(|p| [p.p50, p.p95, p.p99].contains(&f64::INFINITY))
    });
    if unserved {
        let _ = writeln!(
            out,
            "unserved: the percentile falls on a request rejected or cut at max_model_len (ranked as infinitely slow)"
        );
    }
    for r in rows.iter().filter(|r| r.max_qps.is_none()) {
        let _ = writeln!(
            out,
            "{} TP {}: no rate meets the SLO; its figures are at the lowest rate tried, {} req/s",
            r.hardware,
            r.tensor_parallel_size,
            r.fails_at_qps.map_or("-".into(), |q| format!("{q:.4}"))
        );
    }
    for r in rows {
        if let (Some(q), Some(b)) = (r.max_qps, &r.max_qps_band) {
            let _ = writeln!(
                out,
                "{} TP {} meets the SLO at {q:.2} req/s; at {:.0}% confidence between {:.2} and {:.2}{}",
                r.hardware,
                r.tensor_parallel_size,
                100.0 * b.coverage,
                b.lo,
                b.hi,
                if b.lo < q && q < b.hi {
                    ""
                } else {
                    " (the residuals of real runs lean the band off the prediction)"
                }
            );
        }
    }
    if let Some(settings) = &opts.bands {
        let _ = writeln!(
            out,
            "bands: the search run again {} times with the kernel costs perturbed by the calibration residuals, each rate times the inverted time-per-token residuals of the real vLLM stages (docs/DESIGN.md, \"Error bands\")",
            settings.draws
        );
    }
}

/// `$12.34`, or `-` without a price.
fn usd(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("${v:.2}"))
}

/// Hour numbers as `6, 10, 15` (`none` when empty).
fn hour_list(v: &[u32]) -> String {
    if v.is_empty() {
        "none".into()
    } else {
        v.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
    }
}

/// An autoscaled fleet per hour and in all.
fn autoscale_tables(a: &kvplan_serve::cluster::autoscale::AutoscaleOutput) -> String {
    let mut text = String::new();
    let s = &a.settings;
    let _ = writeln!(
        text,
        "autoscale: {}..{} replicas (from {}), {} target {} per replica, every {}, scale-up delay \
         {}, cool-down {}",
        s.min_replicas,
        s.max_replicas,
        s.initial_replicas,
        s.metric.as_str(),
        s.target,
        secs(s.interval_s),
        secs(s.scale_up_delay_s),
        secs(s.cooldown_s),
    );
    let slo = a.slo.is_some();
    let mut head = vec![
        "hour",
        "arrivals",
        "replicas",
        "GPUs",
        "GPU-hours",
        "cost",
        "scaling up",
    ];
    if slo {
        head.extend(["SLO attainment", "objectives"]);
    }
    let mut t = Table::new(&head);
    for h in &a.hours {
        let mut row = vec![
            h.hour.to_string(),
            h.arrivals.to_string(),
            format!("{:.2}", h.replicas),
            format!("{:.2}", h.gpus),
            format!("{:.2}", h.gpu_hours),
            usd(h.cost_usd),
            if h.scale_up_pending { "yes" } else { "-" }.to_string(),
        ];
        if let Some(j) = &h.slo {
            row.push(pct(j.attainment));
            row.push(if j.met {
                "met".to_string()
            } else {
                j.misses.join("; ")
            });
        }
        t.row(&row);
    }
    text.push_str(&t.render());
    let _ = writeln!(
        text,
        "fleet: {:.2} GPU-hours, cost {}, at most {} replicas in service, {} scaling decisions",
        a.gpu_hours,
        usd(a.cost_usd),
        a.peak_replicas,
        a.events.len()
    );
    if let Some(slo) = &a.slo {
        let _ = writeln!(
            text,
            "hours missing {slo}: {}; of those while a scale-up was pending (the scale-up delay): {}",
            hour_list(&a.missed_hours),
            hour_list(&a.missed_while_scaling_up)
        );
    }
    text
}

/// `kvplan serve` autoscaled, under objectives, compared with a fixed fleet: the autoscaled
/// fleet and the fixed one side by side (JSON: the whole [`DayReport`]; CSV: one row per hour).
pub fn day_report(r: &kvplan_serve::day::DayReport, format: Format) -> Result<String, Error> {
    match format {
        Format::Json => {
            let mut s = serde_json::to_string_pretty(r)
                .map_err(|e| Error::Failure(format!("cannot render output: {e}")))?;
            s.push('\n');
            Ok(s)
        }
        Format::Csv => Ok(day_csv(r)),
        Format::Table => {
            let (a, f) = (&r.autoscaled, &r.fixed);
            let mut text = String::new();
            let _ = writeln!(
                text,
                "{} requests: autoscaled ({}..{} replicas, {} target {}, scale-up delay \
                 {}, cool-down {}) against {} fixed replicas, judged hourly against {}",
                r.requests,
                a.settings.min_replicas,
                a.settings.max_replicas,
                a.settings.metric.as_str(),
                a.settings.target,
                secs(a.settings.scale_up_delay_s),
                secs(a.settings.cooldown_s),
                r.fixed_replicas,
                r.slo
            );
            text.push_str(&day_hours(r));
            text.push_str(&day_fleets(r));
            let _ = writeln!(
                text,
                "the autoscaler saves {:.2} of {:.2} GPU-hours; it misses the objectives in {} \
                 hour(s) ({}), {} of them while a scale-up was pending",
                r.gpu_hours_saved,
                f.gpu_hours,
                a.missed_hours.len(),
                hour_list(&a.missed_hours),
                a.missed_while_scaling_up.len()
            );
            if let Some(c) = r.cost_saved_usd {
                let _ = writeln!(text, "cost saved: ${c:.2} of {}", usd(f.cost_usd));
            }
            Ok(text)
        }
    }
}

/// An hour's SLO attainment and whether it met the objectives (full and met for an hour not
/// judged, or not there).
fn attainment(h: Option<&kvplan_serve::cluster::autoscale::Hour>) -> (f64, bool) {
    h.and_then(|h| h.slo.as_ref())
        .map_or((1.0, true), |s| (s.attainment, s.met))
}

/// The two fleets as CSV, one row per hour.
fn day_csv(r: &kvplan_serve::day::DayReport) -> String {
    let (a, f) = (&r.autoscaled, &r.fixed);
    let mut s = String::from(
        "hour,arrivals,autoscaled_replicas,autoscaled_gpu_hours,autoscaled_cost_usd,\
         scale_up_pending,autoscaled_attainment,autoscaled_met,fixed_replicas,\
         fixed_gpu_hours,fixed_cost_usd,fixed_attainment,fixed_met\n",
    );
    for (i, h) in a.hours.iter().enumerate() {
        let g = f.hours.get(i);
        let (aa, am) = attainment(Some(h));
        let (fa, fm) = attainment(g);
        let cost = |c: Option<f64>| c.map_or(String::new(), |v| format!("{v}"));
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            h.hour,
            h.arrivals,
            h.replicas,
            h.gpu_hours,
            cost(h.cost_usd),
            h.scale_up_pending,
            aa,
            am,
            g.map_or(0.0, |g| g.replicas),
            g.map_or(0.0, |g| g.gpu_hours),
            cost(g.and_then(|g| g.cost_usd)),
            fa,
            fm
        );
    }
    s
}

/// The two fleets hour by hour.
fn day_hours(r: &kvplan_serve::day::DayReport) -> String {
    let (a, f) = (&r.autoscaled, &r.fixed);
    let mut t = Table::new(&[
        "hour",
        "arrivals",
        "replicas",
        "GPU-hours",
        "scaling up",
        "SLO attainment",
        "fixed: GPU-hours",
        "fixed: SLO attainment",
    ]);
    for (i, h) in a.hours.iter().enumerate() {
        let g = f.hours.get(i);
        let (aa, am) = attainment(Some(h));
        let (fa, fm) = attainment(g);
        let mark = |ok: bool| if ok { "" } else { " (missed)" };
        t.row(&[
            h.hour.to_string(),
            h.arrivals.to_string(),
            format!("{:.2}", h.replicas),
            format!("{:.2}", h.gpu_hours),
            if h.scale_up_pending { "yes" } else { "-" }.to_string(),
            format!("{}{}", pct(aa), mark(am)),
            format!("{:.2}", g.map_or(0.0, |g| g.gpu_hours)),
            format!("{}{}", pct(fa), mark(fm)),
        ]);
    }
    t.render()
}

/// The two fleets over the day: GPU-hours, cost, and the hours each missed.
fn day_fleets(r: &kvplan_serve::day::DayReport) -> String {
    let mut t = Table::new(&[
        "fleet",
        "GPU-hours",
        "cost",
        "hours missed",
        "while scaling up",
    ]);
    for (name, o) in [("autoscaled", &r.autoscaled), ("fixed", &r.fixed)] {
        t.row(&[
            name.to_string(),
            format!("{:.2}", o.gpu_hours),
            usd(o.cost_usd),
            hour_list(&o.missed_hours),
            hour_list(&o.missed_while_scaling_up),
        ]);
    }
    t.render()
}
