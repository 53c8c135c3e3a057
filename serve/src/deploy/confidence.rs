//! How sure the cheapest deployment is: its cluster served again with the kernel costs
//! perturbed ([`crate::bands`]), each objective's observed value with its band, whether the band
//! crosses the limit, and in how many perturbed runs every objective held.

use rayon::prelude::*;
use serde::Serialize;

use super::{Plan, PlanError};
use crate::bands::{self, Band, BandSettings, CostSpread, Residuals};
use crate::capacity::{Slo, SteadyState, judge};
use crate::output::slo::{Metric, Pct};
use crate::scenario::{RawServeScenario, ScenarioError};

/// One objective of the cheapest candidate with its band.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ObjectiveBand {
    /// The objective (`ttft_p99`).
    pub objective: String,
    /// Its limit, seconds.
    pub limit_s: f64,
    /// The observed value and its band, seconds (`None` when a perturbed run did not keep
    /// up: its percentile is not a number).
    pub band: Option<Band>,
    /// Whether the band reaches past the limit.
    pub crosses: bool,
}

/// The cheapest candidate's bands.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PlanConfidence {
    /// The bands' coverage.
    pub coverage: f64,
    /// Perturbed runs.
    pub draws: u32,
    /// Of those, the runs that met every objective (and kept up).
    pub draws_met: u32,
    /// Per objective, in the SLO's order.
    pub objectives: Vec<ObjectiveBand>,
}

/// The validation residuals a term borrows ([`bands::Metric`]): a tail percentile (p90 and
/// up) the p99's, a median the mean's; the queueing delay none (no stage table measures it).
fn residual_metric(metric: Metric, pct: Pct) -> Option<bands::Metric> {
    let tail = !matches!(pct, Pct::P50);
    Some(match (metric, tail) {
        (Metric::Ttft, true) => bands::Metric::TtftP99,
        (Metric::Ttft, false) => bands::Metric::TtftMean,
        (Metric::Tpot, true) => bands::Metric::TpotP99,
        (Metric::Tpot, false) => bands::Metric::TpotMean,
        (Metric::E2e, true) => bands::Metric::E2eP99,
        (Metric::E2e, false) => bands::Metric::E2eMean,
        (Metric::Queue, _) => return None,
    })
}

/// The bands of `plan`'s cheapest candidate (`None`: none met the objectives), its cluster
/// built over `base` as the search built it and served once per draw of `settings`.
pub fn confidence(
    base: &RawServeScenario,
    plan: &Plan,
    slo: &Slo,
    steady: &SteadyState,
    settings: &BandSettings,
) -> Result<Option<PlanConfidence>, PlanError> {
    let Some((shape, candidate)) = plan.cheapest() else {
        return Ok(None);
    };
    let raw = shape.shape.scenario(base, candidate.units)?;
    let mut sc = raw.resolve().map_err(Box::new)?;
    sc.config.record_timeseries = false;
    let spread = CostSpread::builtin();
    let windows: Vec<_> = (settings.scales(&spread).par_iter())
        .map(|&scales| {
            let requests = sc
                .request_stream()
                .map_err(|e| Box::new(ScenarioError::from(e)))?;
            let out = sc
                .run_stream_scaled(requests, &kvplan_vocab::Silent, scales)
                .map_err(|e| Box::new(ScenarioError::from(e)))?;
            Ok(judge(&out, slo, steady, plan.load.rate_rps, 0.0))
        })
        .collect::<Result<_, PlanError>>()?;
    let residuals = Residuals::builtin();
    let ratios = candidate
        .figures
        .as_ref()
        .map(|f| f.ratios.clone())
        .unwrap_or_default();
    let objectives = (slo.0.iter().enumerate())
        .map(|(i, t)| {
            let value = ratios.get(i).copied().unwrap_or(f64::NAN) * t.limit_s;
            let draws: Vec<f64> = windows.iter().map(|w| t.observed(w)).collect();
            let r = residual_metric(t.metric, t.pct).map_or(vec![0.0], |m| residuals.of(m));
            let band = bands::band(value, &draws, &r, settings.coverage);
            ObjectiveBand {
                objective: t.name(),
                limit_s: t.limit_s,
                crosses: band.is_none_or(|b| b.hi > t.limit_s),
                band,
            }
        })
        .collect();
    let draws_met = windows.iter().filter(|w| w.stable && slo.met(w)).count() as u32;
    Ok(Some(PlanConfidence {
        coverage: settings.coverage,
        draws: settings.draws,
        draws_met,
        objectives,
    }))
}
