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
    let sc = base.overlay(args.to_raw()).resolve().map_err(serve_error)?;
    let requests = sc.requests().map_err(|e| serve_error(e.into()))?;
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
    let _ = writeln!(
        text,
        "serve (simulated): {} on {}, {workload}, {} scheduler, {} preemption, block {} tokens, {} GPU blocks",
        sc.model.name,
        sc.hardware.name,
        kebab(&c.scheduler),
        kebab(&c.preemption),
        c.block_size,
        s.gpu_blocks
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
    t.row(&["preemptions".to_string(), s.preemptions.to_string()]);
    t.row(&[
        "swap out / in".to_string(),
        format!("{} / {}", gib(s.swap_out_bytes), gib(s.swap_in_bytes)),
    ]);
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
