//! Running points: one point's scenario through the same library path as the single-run
//! command (`kvplan simulate`: [`kvplan_planner::run::simulate_scenario`]; `kvplan serve`: the
//! serving scenario's requests and engine), and many points in parallel with their rows handed
//! over in point order.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use kvplan_planner::scenario::RawScenario;
use kvplan_serve::scenario::{RawServeScenario, ScenarioError as ServeError};
use toml::Value;

use crate::file::{Kind, Sweep};

/// One metric of a point.
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

/// The metric columns of `kind`.
pub fn metric_names(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::Simulate => &SIMULATE_METRICS,
        Kind::Serve => &SERVE_METRICS,
    }
}

/// A point's outcome: its metrics (in [`metric_names`] order), or the one-line reason it could
/// not run (it does not fit, an invalid combination of settings, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The point's index.
    pub point: u64,
    /// Metrics, or why there are none.
    pub outcome: Result<Vec<Metric>, String>,
}

fn simulate(table: toml::Table) -> Result<Vec<Metric>, String> {
    let raw: RawScenario = Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| e.message().to_string())?;
    let sc = raw.resolve().map_err(|e| e.to_string())?;
    let r = kvplan_planner::run::simulate_scenario(&sc)
        .map_err(|e| e.to_string())?
        .report;
    use Metric::{Float as F, Int as I};
    Ok(vec![
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
    ])
}

/// A serving error's message with its field named by its scenario path (`workload.qps`,
/// `serve.block_size`), as a sweep's columns name it.
fn serve_message(e: ServeError) -> String {
    use kvplan_workloads::Error as W;
    let (table, field) = match &e {
        ServeError::Workload(
            W::NonPositive { field, .. }
            | W::BadSpec { field, .. }
            | W::OutOfRange { field, .. }
            | W::Missing { field, .. }
            | W::Conflict { field, .. },
        ) => ("workload", Some(*field)),
        ServeError::Serve(kvplan_serve::Error::InvalidConfig { field, .. }) => {
            ("serve", Some(*field))
        }
        _ => ("", None),
    };
    let text = e.to_string();
    match field {
        Some(f) if text.starts_with(&format!("{f}:")) => format!("{table}.{text}"),
        _ => text,
    }
}

fn serve(table: toml::Table) -> Result<Vec<Metric>, String> {
    let mut raw: RawServeScenario = Value::Table(table)
        .try_into()
        .map_err(|e: toml::de::Error| e.message().to_string())?;
    // A sweep reports the summary only: no per-iteration series.
    raw.serve.record_timeseries = Some(false);
    let sc = raw.resolve().map_err(serve_message)?;
    let requests = sc.requests().map_err(|e| serve_message(e.into()))?;
    let out = sc.run(&requests).map_err(|e| serve_message(e.into()))?;
    let s = out.summary;
    use Metric::{Float as F, Int as I};
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
    Ok(v)
}

impl Sweep {
    /// Runs point `index`. A point that cannot run is a row with the reason, not an error; a
    /// panic in the engine (a bug) is reported the same way, so one bad point does not end a
    /// long sweep.
    pub fn run_point(&self, index: u64) -> Row {
        let kind = self.kind();
        let outcome = self.scenario(index).and_then(|t| {
            catch_unwind(AssertUnwindSafe(|| match kind {
                Kind::Simulate => simulate(t),
                Kind::Serve => serve(t),
            }))
            .unwrap_or_else(|p| {
                let what = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                Err(format!("internal error (a bug; please report it): {what}"))
            })
        });
        Row {
            point: index,
            outcome: outcome.map_err(|m| m.trim().replace(['\n', '\r'], " ")),
        }
    }

    /// Runs `indices` on rayon's pool (`RAYON_NUM_THREADS` threads) and calls `emit` with each
    /// row in the order of `indices`, as soon as it and every row before it are done: a sweep
    /// killed midway has written a prefix. Points are handed to threads in order, so at most
    /// about one row per thread waits for an earlier one (more only behind a slow point). The
    /// first error from `emit` stops the sweep and is returned.
    pub fn run_ordered<E>(
        &self,
        indices: &[u64],
        mut emit: impl FnMut(Row) -> Result<(), E>,
    ) -> Result<(), E> {
        let next = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let threads = rayon::current_num_threads().clamp(1, indices.len().max(1));
        let (tx, rx) = mpsc::channel::<(usize, Row)>();
        std::thread::scope(|s| {
            let (next, stop) = (&next, &stop);
            s.spawn(move || {
                rayon::scope(|rs| {
                    for _ in 0..threads {
                        let tx = tx.clone();
                        rs.spawn(move |_| {
                            while !stop.load(Ordering::Relaxed) {
                                let k = next.fetch_add(1, Ordering::Relaxed);
                                if k >= indices.len() {
                                    break;
                                }
                                if tx.send((k, self.run_point(indices[k]))).is_err() {
                                    break;
                                }
                            }
                        });
                    }
                });
            });
            let mut pending = BTreeMap::new();
            let mut want = 0usize;
            for (k, row) in rx {
                pending.insert(k, row);
                while let Some(row) = pending.remove(&want) {
                    want += 1;
                    if let Err(e) = emit(row) {
                        stop.store(true, Ordering::Relaxed);
                        return Err(e);
                    }
                }
            }
            Ok(())
        })
    }
}
