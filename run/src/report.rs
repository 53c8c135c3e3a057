//! What a run gives: the report of either kind, its metric columns (the one list every front
//! end's table uses), its JSON and its timeline.

use kvplan_planner::run::SimulatedRun;
use kvplan_serve::ServeReport;
use kvplan_vocab::RunKind;
use kvplan_vocab::timeline::write_csv;

/// One metric of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Metric {
    /// Seconds, fractions, rates (written in plain decimal; empty / null when not finite).
    Float(f64),
    /// Bytes and counts.
    Int(u64),
}

/// Op-level metrics, in column order (units in the names).
pub const SIMULATE_METRICS: [&str; 12] = [
    "prefill_latency_s",
    "decode_latency_s",
    "total_latency_s",
    "decode_throughput_tok_s",
    "gpu_busy_fraction",
    "gpu_idle_s",
    "peak_gpu_bytes",
    "peak_host_bytes",
    "h2d_bytes",
    "d2h_bytes",
    "mean_recompute_fraction",
    "ops",
];

/// Serving metrics, in column order.
pub const SERVE_METRICS: [&str; 28] = [
    "requests",
    "finished",
    "rejected",
    "output_tok_s",
    "total_tok_s",
    "requests_per_s",
    "ttft_p50_s",
    "ttft_p90_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p90_s",
    "tpot_p99_s",
    "e2e_p50_s",
    "e2e_p90_s",
    "e2e_p99_s",
    "queue_p50_s",
    "queue_p90_s",
    "queue_p99_s",
    "preemptions",
    "swap_out_bytes",
    "swap_in_bytes",
    "gpu_busy_fraction",
    "makespan_s",
    "iterations",
    "gpu_blocks",
    "truncated",
    "cached_prompt_tokens",
    "prefix_cache_hit_rate",
];

/// The metric columns of `kind`, in the order of [`Report::metrics`].
pub fn columns(kind: RunKind) -> &'static [&'static str] {
    match kind {
        RunKind::Simulate => &SIMULATE_METRICS,
        RunKind::Serve => &SERVE_METRICS,
    }
}

/// A run's result, of either kind.
#[derive(Debug, Clone)]
pub enum Report {
    /// The plan, its simulated timeline and its report.
    Simulate(Box<SimulatedRun>),
    /// The served requests, the per-step series and the summary.
    Serve(Box<ServeReport>),
}

impl Report {
    /// Which kind of run gave it.
    pub fn kind(&self) -> RunKind {
        match self {
            Report::Simulate(_) => RunKind::Simulate,
            Report::Serve(_) => RunKind::Serve,
        }
    }

    /// The metrics, in [`columns`] order.
    pub fn metrics(&self) -> Vec<Metric> {
        use Metric::{Float as F, Int as I};
        match self {
            Report::Simulate(run) => {
                let r = &run.report;
                vec![
                    F(r.prefill_latency_s),
                    F(r.decode_latency_s),
                    F(r.total_latency_s),
                    F(r.decode_throughput_tok_s),
                    F(r.gpu_busy_fraction),
                    F(r.gpu_idle_s),
                    I(r.peak_gpu_bytes),
                    I(r.peak_host_bytes),
                    I(r.h2d_bytes),
                    I(r.d2h_bytes),
                    F(r.mean_recompute_fraction),
                    I(r.ops as u64),
                ]
            }
            Report::Serve(out) => {
                let s = &out.summary;
                let mut v = vec![
                    I(s.requests),
                    I(s.finished),
                    I(s.rejected),
                    F(s.output_tokens_per_s),
                    F(s.total_tokens_per_s),
                    F(s.requests_per_s),
                ];
                for p in [s.ttft_s, s.tpot_s, s.e2e_s, s.queue_s] {
                    v.extend([F(p.p50), F(p.p90), F(p.p99)]);
                }
                v.extend([
                    I(s.preemptions),
                    I(s.swap_out_bytes),
                    I(s.swap_in_bytes),
                    F(s.gpu_busy),
                    F(s.makespan_s),
                    I(s.iterations),
                    I(u64::from(s.gpu_blocks)),
                    I(s.truncated),
                    I(s.cached_prompt_tokens),
                    F(s.prefix_cache_hit_rate),
                ]);
                v
            }
        }
    }

    /// The JSON `kvplan simulate|serve` prints in its JSON format: the op-level report, or the
    /// serving summary (pretty-printed, one trailing newline).
    pub fn json(&self) -> String {
        match self {
            Report::Simulate(run) => {
                let mut json =
                    serde_json::to_string_pretty(&run.report).expect("a report serialises to JSON");
                json.push('\n');
                json
            }
            Report::Serve(out) => {
                let mut json = Vec::new();
                out.write_summary_json(&mut json)
                    .expect("writing to memory does not fail");
                String::from_utf8(json).expect("the summary is UTF-8")
            }
        }
    }

    /// What the planner decided, for an op-level run: `{"strategy": ..., "splits": [...]}` and
    /// `headinfer` or `runahead` for those plans (the plan's [`Decisions`] as
    /// `kvplan plan` names them in its JSON format), pretty-printed with one trailing newline. A
    /// serving run has none (its decisions, preemptions and prefix cache hits, are in its
    /// summary).
    ///
    /// [`Decisions`]: kvplan_planner::plan::Decisions
    pub fn decisions_json(&self) -> Option<String> {
        let Report::Simulate(s) = self else {
            return None;
        };
        let mut v = serde_json::json!({ "strategy": s.plan.strategy.as_str() });
        let decisions =
            serde_json::to_value(&s.plan.decisions).expect("decisions serialise to JSON");
        if let (Some(v), serde_json::Value::Object(d)) = (v.as_object_mut(), decisions) {
            v.extend(d);
        }
        let mut json = serde_json::to_string_pretty(&v).expect("a JSON value prints");
        json.push('\n');
        Some(json)
    }

    /// The timeline CSV of an op-level run (what `kvplan simulate` writes as its trace); a
    /// serving run has none.
    pub fn timeline_csv(&self) -> Option<String> {
        let Report::Simulate(s) = self else {
            return None;
        };
        let mut csv = Vec::new();
        write_csv(&[s.as_run()], &mut csv).expect("writing to memory does not fail");
        Some(String::from_utf8(csv).expect("the timeline is UTF-8"))
    }
}
