//! The SLO search: the highest arrival rate a configuration sustains under its objectives,
//! halving, doubling and then bisecting over rates judged at steady state.

use kvplan_vocab::{Progress, Silent};

use super::error::CapacityError;
use super::steady::{Stage, SteadyState, Window, serve_at_with, service_rate_with};
use crate::bands::BandSettings;
use crate::iteration::CostScales;
use crate::output::Summary;
use crate::output::slo::{Slo, round};
use crate::scenario::RawServeScenario;

/// Settings of the search.
#[derive(Debug, Clone, Copy)]
pub struct SearchOptions {
    /// The first rate tried, requests/s.
    pub start_qps: f64,
    /// Stop when the passing and failing rates are within this fraction of each other.
    pub rel_tol: f64,
    /// The lowest rate tried before giving up, requests/s.
    pub min_qps: f64,
    /// The highest rate tried, requests/s.
    pub max_qps: f64,
    /// How each rate is served and judged.
    pub steady: SteadyState,
    /// Multipliers on the kernel times (1: the cost model as it is; an error band's draw).
    pub scales: CostScales,
    /// An error band on each sustainable rate: the search run again once per draw
    /// (`None`: no band).
    pub bands: Option<BandSettings>,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            start_qps: 1.0,
            rel_tol: 0.02,
            min_qps: 1.0 / 1024.0,
            max_qps: 1e5,
            steady: SteadyState::default(),
            scales: CostScales::default(),
            bands: None,
        }
    }
}

/// One rate the search served.
#[derive(Debug, Clone)]
pub struct Probe {
    /// Requests/s offered.
    pub qps: f64,
    /// Requests served at it.
    pub requests: u64,
    /// Whether it met the SLO.
    pub met: bool,
    /// Its measured window.
    pub window: Window,
    /// Its whole-run summary.
    pub summary: Summary,
}

/// The result of [`max_qps`].
#[derive(Debug, Clone)]
pub struct Capacity {
    /// The highest rate found that meets the SLO (`None`: not even `min_qps`).
    pub max_qps: Option<f64>,
    /// The measured window at that rate (or at the lowest rate tried when none met).
    pub at: Window,
    /// The lowest rate found that misses it (`None`: `max_qps` itself met it).
    pub fails_at: Option<f64>,
    /// Every rate served, in order.
    pub probes: Vec<Probe>,
    /// The configuration's service rate ([`service_rate`]), requests/s.
    pub service_rps: f64,
}

/// The highest arrival rate `base` sustains under `slo` (see the module docs).
pub fn max_qps(
    base: &RawServeScenario,
    slo: &Slo,
    opts: SearchOptions,
) -> Result<Capacity, CapacityError> {
    max_qps_with(base, slo, opts, &Silent)
}

/// [`max_qps`], telling `progress` how far each rate's run has come.
pub fn max_qps_with(
    base: &RawServeScenario,
    slo: &Slo,
    opts: SearchOptions,
    progress: &dyn Progress,
) -> Result<Capacity, CapacityError> {
    check(base, opts)?;
    let service_rps = service_rate_with(base, &opts.steady, opts.scales, progress)?;
    let mut probes: Vec<Probe> = Vec::new();
    let mut serve = |qps: f64| -> Result<(bool, Window), CapacityError> {
        let stage = Stage {
            inner: progress,
            label: format!("at {} req/s", round(qps)),
        };
        let (window, summary, requests) = serve_at_with(
            base,
            slo,
            &opts.steady,
            qps,
            service_rps,
            opts.scales,
            &stage,
        )?;
        let met = slo.met(&window);
        probes.push(Probe {
            qps,
            requests,
            met,
            window: window.clone(),
            summary,
        });
        Ok((met, window))
    };
    // A passing rate: the start, else halve.
    let mut lo = opts.start_qps;
    let (mut ok, mut at) = serve(lo)?;
    while !ok {
        let next = lo / 2.0;
        if next < opts.min_qps {
            return Ok(Capacity {
                max_qps: None,
                at,
                fails_at: Some(lo),
                probes,
                service_rps,
            });
        }
        lo = next;
        (ok, at) = serve(lo)?;
    }
    // A failing rate above it: double.
    let mut hi = lo * 2.0;
    loop {
        if hi > opts.max_qps {
            return Ok(Capacity {
                max_qps: Some(lo),
                at,
                fails_at: None,
                probes,
                service_rps,
            });
        }
        let (m, s) = serve(hi)?;
        if !m {
            break;
        }
        (lo, at) = (hi, s);
        hi *= 2.0;
    }
    // Bisect (geometric midpoint: rates span decades).
    while hi / lo - 1.0 > opts.rel_tol {
        let mid = (lo * hi).sqrt();
        let (m, s) = serve(mid)?;
        if m {
            lo = mid;
            at = s;
        } else {
            hi = mid;
        }
    }
    Ok(Capacity {
        max_qps: Some(lo),
        at,
        fails_at: Some(hi),
        probes,
        service_rps,
    })
}

fn check(base: &RawServeScenario, opts: SearchOptions) -> Result<(), CapacityError> {
    if let Some(a) = &base.workload.arrivals
        && a.trim() == "all-at-once"
    {
        return Err(CapacityError::Workload(
            "workload.arrivals: all-at-once has no rate to search; use poisson or gamma:CV \
             (or a trace, replayed at each rate)"
                .into(),
        ));
    }
    if !(opts.rel_tol.is_finite() && opts.rel_tol > 0.0 && opts.rel_tol < 1.0) {
        return Err(CapacityError::Setting {
            field: "capacity.rel_tol",
            why: format!("{} must be a fraction above 0 and below 1", opts.rel_tol),
        });
    }
    if !(opts.start_qps.is_finite() && opts.start_qps > 0.0 && opts.start_qps <= opts.max_qps) {
        return Err(CapacityError::Setting {
            field: "capacity.start_qps",
            why: format!(
                "{} must be more than 0 and at most {}",
                opts.start_qps, opts.max_qps
            ),
        });
    }
    Ok(())
}
