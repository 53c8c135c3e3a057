//! What an autoscaled fleet reports: its scaling events and, per hour of the run, arrivals,
//! replicas in service, GPU-hours, cost and SLO attainment (`crate::cluster::autoscale` runs
//! the fleet).

use serde::Serialize;

use super::RequestRecord;
use super::slo::Slo;
use crate::scaling::Autoscale;

/// A change of the fleet's size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ScaleEvent {
    /// When it was decided, seconds.
    pub time_s: f64,
    /// Replicas ordered before (in service or starting).
    pub from: u32,
    /// Replicas ordered after.
    pub to: u32,
    /// The metric per ordered replica that decided it.
    pub metric: f64,
}

/// One hour of an autoscaled run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hour {
    /// Its index from 0 (hour `h` is `[3600h, 3600(h + 1))` seconds).
    pub hour: u32,
    /// Requests that arrived in it.
    pub arrivals: u64,
    /// Mean replicas in service.
    pub replicas: f64,
    /// Mean GPUs paid for (in service, starting or draining).
    pub gpus: f64,
    /// GPU-hours paid for in it.
    pub gpu_hours: f64,
    /// Their cost, when the profile gives a price.
    pub cost_usd: Option<f64>,
    /// Whether a replica was ordered and not yet in service at some time in it.
    pub scale_up_pending: bool,
    /// Its requests judged against the SLO (when one is given).
    pub slo: Option<HourSlo>,
}

/// An hour's requests against the SLO.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HourSlo {
    /// Requests that arrived in the hour.
    pub requests: u64,
    /// Of those, the ones meeting every objective (vLLM's goodput rule).
    pub ok: u64,
    /// `ok / requests` (1 with no request).
    pub attainment: f64,
    /// Whether every percentile term holds over the hour's requests.
    pub met: bool,
    /// The terms missed, as `ttft_p99 2.4s > 2s`.
    pub misses: Vec<String>,
}

/// What an autoscaled cluster reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AutoscaleOutput {
    /// The settings.
    pub settings: Autoscale,
    /// Per hour of the run.
    pub hours: Vec<Hour>,
    /// Each change of the fleet.
    pub events: Vec<ScaleEvent>,
    /// GPU-hours paid for in all.
    pub gpu_hours: f64,
    /// Their cost, when the profile gives a price.
    pub cost_usd: Option<f64>,
    /// Most replicas in service at once.
    pub peak_replicas: u32,
    /// The SLO the hours were judged against, if any.
    pub slo: Option<String>,
    /// Hours whose requests miss a percentile term of the SLO.
    pub missed_hours: Vec<u32>,
    /// Of those, the hours in which a scale-up was pending: misses because of the scale-up
    /// delay.
    pub missed_while_scaling_up: Vec<u32>,
}

impl AutoscaleOutput {
    /// Judges each hour's requests (by arrival) against `slo`: the fraction meeting every
    /// objective, and whether each percentile term holds over the hour.
    pub fn judge(&mut self, requests: &[RequestRecord], slo: &Slo) {
        let mut by_hour: Vec<Vec<&RequestRecord>> = vec![Vec::new(); self.hours.len()];
        for r in requests {
            let h = ((r.arrival_s / 3600.0) as usize).min(self.hours.len().saturating_sub(1));
            if let Some(v) = by_hour.get_mut(h) {
                v.push(r);
            }
        }
        self.missed_hours.clear();
        self.missed_while_scaling_up.clear();
        for (hour, reqs) in self.hours.iter_mut().zip(&by_hour) {
            let ok = reqs.iter().filter(|r| slo.request_ok(r)).count() as u64;
            let misses = slo.misses_of(reqs);
            let met = misses.is_empty();
            if !met {
                self.missed_hours.push(hour.hour);
                if hour.scale_up_pending {
                    self.missed_while_scaling_up.push(hour.hour);
                }
            }
            hour.slo = Some(HourSlo {
                requests: reqs.len() as u64,
                ok,
                attainment: if reqs.is_empty() {
                    1.0
                } else {
                    ok as f64 / reqs.len() as f64
                },
                met,
                misses,
            });
        }
        self.slo = Some(slo.to_string());
    }
}
