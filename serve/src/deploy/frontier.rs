//! The Pareto frontier of cost against latency over the candidates that met the objectives:
//! a candidate is on it when no other is at most as expensive and at most as slow in both p99
//! TTFT and p99 TPOT, and better in one of the three. Each point names its binding constraint:
//! the objective closest to its limit (what a cheaper deployment would break first).

use serde::Serialize;

use crate::capacity::Slo;
use crate::deploy::{Outcome, Plan};

/// The objective closest to its limit.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Binding {
    /// The objective (`ttft_p99`).
    pub term: String,
    /// Observed / limit (at most 1 on the frontier).
    pub ratio: f64,
}

/// A point of the frontier.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Frontier {
    /// The shape's index.
    pub shape: usize,
    /// Units.
    pub units: u32,
    /// Price per hour, US dollars.
    pub usd_per_hour: f64,
    /// TTFT p99, seconds.
    pub ttft_p99_s: f64,
    /// TPOT p99, seconds.
    pub tpot_p99_s: f64,
    /// Its binding constraint.
    pub binding: Binding,
}

/// The frontier of `plan`'s met candidates, cheapest first (ties: the space's order, then
/// fewer units).
pub fn frontier(plan: &Plan, slo: &Slo) -> Vec<Frontier> {
    let met: Vec<Frontier> =
        plan.simulated()
            .filter(|(_, c)| c.outcome == Outcome::Met)
            .filter_map(|(s, c)| {
                let f = c.figures.as_ref()?;
                let (i, ratio) = f.ratios.iter().copied().enumerate().fold(
                    (0, f64::NEG_INFINITY),
                    |a, (i, r)| if r > a.1 { (i, r) } else { a },
                );
                Some(Frontier {
                    shape: s.shape.index,
                    units: c.units,
                    usd_per_hour: c.usd_per_hour,
                    ttft_p99_s: f.ttft_p99_s,
                    tpot_p99_s: f.tpot_p99_s,
                    binding: Binding {
                        term: slo.0.get(i).map(|t| t.name()).unwrap_or_default(),
                        ratio,
                    },
                })
            })
            .collect();
    let dominates = |a: &Frontier, b: &Frontier| {
        a.usd_per_hour <= b.usd_per_hour
            && a.ttft_p99_s <= b.ttft_p99_s
            && a.tpot_p99_s <= b.tpot_p99_s
            && (a.usd_per_hour < b.usd_per_hour
                || a.ttft_p99_s < b.ttft_p99_s
                || a.tpot_p99_s < b.tpot_p99_s)
    };
    let mut front: Vec<Frontier> = met
        .iter()
        .filter(|b| !met.iter().any(|a| dominates(a, b)))
        .cloned()
        .collect();
    front.sort_by(|a, b| {
        a.usd_per_hour
            .total_cmp(&b.usd_per_hour)
            .then(a.shape.cmp(&b.shape))
            .then(a.units.cmp(&b.units))
    });
    front.dedup_by(|a, b| {
        a.usd_per_hour == b.usd_per_hour
            && a.ttft_p99_s == b.ttft_p99_s
            && a.tpot_p99_s == b.tpot_p99_s
    });
    front
}
