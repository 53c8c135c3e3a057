//! Running points: one point's scenario through the scenario layer ([`kvplan_run::run`], the
//! path of the single-run commands), and many points in parallel with their rows handed over in
//! point order.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;

use kvplan_run::{Metric, RawScenario};
use toml::Table;

use crate::file::Sweep;

/// A point's outcome: its metrics (in [`kvplan_run::columns`] order), or the one-line reason it could
/// not run (it does not fit, an invalid combination of settings, ...).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The point's index.
    pub point: u64,
    /// Metrics, or why there are none.
    pub outcome: Result<Vec<Metric>, String>,
}

/// One point's scenario table run through the scenario layer, as the single-run command runs
/// it; a sweep keeps the summary only (no per-iteration series or per-request records of a
/// serving run).
fn run_table(table: Table, kind: kvplan_run::RunKind) -> Result<Vec<Metric>, String> {
    let mut raw = RawScenario::from_table(table, kind).map_err(|e| e.to_string())?;
    if let RawScenario::Serve(r) = &mut raw {
        r.serve.record_timeseries = Some(false);
        r.serve.record_requests = Some(false);
    }
    let sc = raw.resolve().map_err(|e| e.to_string())?;
    let report = kvplan_run::run(&sc).map_err(|e| e.to_string())?;
    // A serving point where no request finished measured no latency: a row of them would read
    // as the best of the grid.
    if let kvplan_run::Report::Serve(out) = &report
        && let Some(n) = out.nothing_finished()
    {
        return Err(n.to_string());
    }
    Ok(report.metrics())
}

impl Sweep {
    /// Runs point `index`. A point that cannot run is a row with the reason, not an error; a
    /// panic in the engine (a bug) is reported the same way, so one bad point does not end a
    /// long sweep.
    pub fn run_point(&self, index: u64) -> Row {
        let kind = self.kind();
        let outcome = self.scenario(index).and_then(|t| {
            catch_unwind(AssertUnwindSafe(|| run_table(t, kind))).unwrap_or_else(|p| {
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
        emit: impl FnMut(Row) -> Result<(), E>,
    ) -> Result<(), E> {
        self.run_points(indices, true, emit)
    }

    /// Runs `indices` as [`run_ordered`](Self::run_ordered) does, but calls `emit` with each
    /// row as soon as it is done, in the order the points finish: no finished row waits behind
    /// a slower one, so a sweep killed midway has handed over every row but those still
    /// running. Which rows come first depends on the threads' timing; the rows themselves do
    /// not.
    pub fn run_unordered<E>(
        &self,
        indices: &[u64],
        emit: impl FnMut(Row) -> Result<(), E>,
    ) -> Result<(), E> {
        self.run_points(indices, false, emit)
    }

    /// [`run_ordered`](Self::run_ordered) (`ordered`) or [`run_unordered`](Self::run_unordered).
    fn run_points<E>(
        &self,
        indices: &[u64],
        ordered: bool,
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
            let fail = |e| {
                stop.store(true, Ordering::Relaxed);
                Err(e)
            };
            for (k, row) in rx {
                if !ordered {
                    if let Err(e) = emit(row) {
                        return fail(e);
                    }
                    continue;
                }
                pending.insert(k, row);
                while let Some(row) = pending.remove(&want) {
                    want += 1;
                    if let Err(e) = emit(row) {
                        return fail(e);
                    }
                }
            }
            Ok(())
        })
    }
}
