//! A day of traffic: the same load served by an autoscaled fleet and by a fixed fleet sized
//! for the peak, side by side: GPU-hours, cost, each hour's SLO attainment and the hours that
//! miss, and of those the ones where a scale-up was pending (misses because of the scale-up
//! delay).

use serde::Serialize;

use crate::capacity::Slo;
use crate::cluster::autoscale::{AutoscaleOutput, RawAutoscale};
use crate::scenario::{RawServeScenario, ScenarioError};

/// The two fleets on one load.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DayReport {
    /// The SLO the hours were judged against.
    pub slo: String,
    /// Requests served (the same for both fleets).
    pub requests: u64,
    /// The autoscaled fleet.
    pub autoscaled: AutoscaleOutput,
    /// The fixed fleet (min = max = its size).
    pub fixed: AutoscaleOutput,
    /// Replicas of the fixed fleet.
    pub fixed_replicas: u32,
    /// GPU-hours the autoscaler saves (negative: it costs more).
    pub gpu_hours_saved: f64,
    /// Dollars it saves, when the profile gives a price.
    pub cost_saved_usd: Option<f64>,
}

/// Serves `scenario`'s requests (a colocated cluster: `model`, `hardware`, `[workload]`,
/// `[serve]`, `[cluster]`) twice: with `autoscale` over the scenario's own
/// `[cluster.autoscale]`, and on a fixed fleet of `fixed_replicas` (default: the autoscaler's
/// `max_replicas`); each hour judged against `slo`.
pub fn day(
    scenario: &RawServeScenario,
    autoscale: &RawAutoscale,
    slo: &Slo,
    fixed_replicas: Option<u32>,
) -> Result<DayReport, ScenarioError> {
    let mut raw = scenario.clone();
    raw.serve.record_requests = Some(true);
    let given = raw.cluster.autoscale.take().unwrap_or_default();
    raw.cluster.autoscale = Some(given.overlay(autoscale.clone()));
    let auto = raw.clone().resolve()?;
    let max = (auto.cluster.as_ref())
        .and_then(|c| c.autoscale.as_ref())
        .map_or(1, |a| a.max_replicas);
    let n = fixed_replicas.unwrap_or(max);
    let requests = auto.requests()?;
    let autoscaled = fleet_of(&auto, &requests, slo)?;
    let mut fixed_raw = raw;
    fixed_raw.cluster.data_parallel_size = None;
    fixed_raw.cluster.autoscale = Some(RawAutoscale::fixed(n));
    let fixed_sc = fixed_raw.resolve()?;
    let fixed = fleet_of(&fixed_sc, &requests, slo)?;
    Ok(DayReport {
        slo: slo.to_string(),
        requests: requests.len() as u64,
        gpu_hours_saved: fixed.gpu_hours - autoscaled.gpu_hours,
        cost_saved_usd: match (fixed.cost_usd, autoscaled.cost_usd) {
            (Some(a), Some(b)) => Some(a - b),
            _ => None,
        },
        autoscaled,
        fixed,
        fixed_replicas: n,
    })
}

fn fleet_of(
    s: &crate::scenario::ServeScenario,
    requests: &[kvplan_workloads::Request],
    slo: &Slo,
) -> Result<AutoscaleOutput, ScenarioError> {
    let report = s.run(requests)?;
    let mut out = report
        .cluster
        .and_then(|c| c.autoscale)
        .expect("an autoscaled scenario reports its fleet");
    out.judge(&report.requests, slo);
    Ok(out)
}
