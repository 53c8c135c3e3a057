//! Simulated vs measured: end-to-end, per decode step, per op kind.

use std::collections::BTreeMap;

use kvplan_vocab::Timeline;
use kvplan_vocab::schedule::{Category, Phase, Schedule};
use serde::Serialize;

/// One row of a per-kind or per-step comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// Op label, category or step.
    pub name: String,
    /// Simulated seconds.
    pub simulated_s: f64,
    /// Measured seconds.
    pub measured_s: f64,
    /// `(simulated - measured) / measured` (signed; 0 when both are 0).
    pub error: f64,
}

fn row(name: String, sim: f64, meas: f64) -> Row {
    Row {
        name,
        simulated_s: sim,
        measured_s: meas,
        error: if meas > 0.0 {
            (sim - meas) / meas
        } else if sim == 0.0 {
            0.0
        } else {
            f64::INFINITY
        },
    }
}

/// The comparison of two timelines of one schedule.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Simulated makespan.
    pub simulated_s: f64,
    /// Measured makespan.
    pub measured_s: f64,
    /// `|simulated - measured| / measured` of the makespan.
    pub end_to_end_error: f64,
    /// Simulated decode time (makespan minus prefill end).
    pub simulated_decode_s: f64,
    /// Measured decode time.
    pub measured_decode_s: f64,
    /// Median over decode steps of `|step error|`.
    pub median_step_error: f64,
    /// 90th percentile over decode steps of `|step error|`.
    pub p90_step_error: f64,
    /// Summed op time per category (KVPR's breakdown).
    pub per_category: Vec<Row>,
    /// Summed op time per op label (`qkv_proj`, `load_kv`, ...).
    pub per_kind: Vec<Row>,
    /// Per decode step (the step's end minus the previous step's end).
    pub per_step: Vec<Row>,
}

impl Comparison {
    /// Signed relative error of the makespan, `simulated / measured - 1`, as every row's
    /// `error` ([`end_to_end_error`](Self::end_to_end_error) is its magnitude).
    pub fn end_to_end_signed_error(&self) -> f64 {
        row(String::new(), self.simulated_s, self.measured_s).error
    }

    /// Signed relative error of the decode time, `(simulated - measured) / measured`.
    pub fn decode_error(&self) -> f64 {
        (self.simulated_decode_s - self.measured_decode_s) / self.measured_decode_s
    }
}

fn step_ends(schedule: &Schedule, t: &Timeline) -> BTreeMap<u32, f64> {
    let mut ends = BTreeMap::new();
    for (op, span) in schedule.ops().iter().zip(&t.spans) {
        let e = ends.entry(op.tag.step).or_insert(0.0f64);
        *e = e.max(span.end);
    }
    ends
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

/// Compares `simulated` and `measured` timelines of `schedule`.
pub fn compare(schedule: &Schedule, simulated: &Timeline, measured: &Timeline) -> Comparison {
    let (ms, mm) = (simulated.makespan(), measured.makespan());
    let prefill_end = |t: &Timeline| {
        schedule
            .ops()
            .iter()
            .zip(&t.spans)
            .filter(|(o, _)| o.tag.phase == Phase::Prefill)
            .fold(0.0f64, |m, (_, s)| m.max(s.end))
    };
    let mut cat: BTreeMap<Category, (f64, f64)> = BTreeMap::new();
    let mut kind: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for ((op, s), m) in schedule
        .ops()
        .iter()
        .zip(&simulated.spans)
        .zip(&measured.spans)
    {
        let c = cat.entry(op.kind.category()).or_default();
        c.0 += s.duration();
        c.1 += m.duration();
        let k = kind.entry(schedule.label(op).to_string()).or_default();
        k.0 += s.duration();
        k.1 += m.duration();
    }
    let (se, me) = (
        step_ends(schedule, simulated),
        step_ends(schedule, measured),
    );
    let mut per_step = Vec::new();
    let (mut prev_s, mut prev_m) = (None::<f64>, None::<f64>);
    for (step, &end_s) in &se {
        let end_m = me[step];
        if let (Some(ps), Some(pm)) = (prev_s, prev_m) {
            per_step.push(row(format!("step {step}"), end_s - ps, end_m - pm));
        }
        prev_s = Some(end_s);
        prev_m = Some(end_m);
    }
    let mut errs: Vec<f64> = per_step.iter().map(|r| r.error.abs()).collect();
    errs.sort_by(f64::total_cmp);
    Comparison {
        simulated_s: ms,
        measured_s: mm,
        end_to_end_error: if mm > 0.0 { (ms - mm).abs() / mm } else { 0.0 },
        simulated_decode_s: ms - prefill_end(simulated),
        measured_decode_s: mm - prefill_end(measured),
        median_step_error: percentile(&errs, 0.5),
        p90_step_error: percentile(&errs, 0.9),
        per_category: cat
            .into_iter()
            .map(|(c, (s, m))| row(c.as_str().into(), s, m))
            .collect(),
        per_kind: kind.into_iter().map(|(k, (s, m))| row(k, s, m)).collect(),
        per_step,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvplan_planner::plan::{Options, Shape, Strategy, plan};
    use kvplan_vocab::timeline::{Source, Span};
    use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};

    #[test]
    fn identical_timelines_have_zero_error_and_scaled_ones_the_scale() {
        let hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
        let cost = CostModel::new(&hw);
        let m = ModelSpec::preset("opt-125m").unwrap();
        let shape = Shape {
            batch: 4,
            gpu_batches: 1,
            prompt: 64,
            gen_len: 4,
        };
        let p = plan(
            &m,
            &hw,
            &cost,
            &shape,
            Strategy::FULL_TRANSFER,
            &Options::default(),
        )
        .unwrap();
        let sim = kvplan_sim::simulate(&p.schedule, &cost).unwrap();
        let same = compare(&p.schedule, &sim, &sim);
        assert_eq!(same.end_to_end_error, 0.0);
        assert_eq!(same.median_step_error, 0.0);
        assert_eq!(same.per_step.len(), 3);
        // A measurement 25% slower everywhere: every error is -20% (sim / meas = 0.8).
        let slow = Timeline {
            source: Source::Measured {
                backend: "test".into(),
                device: "x".into(),
            },
            spans: sim
                .spans
                .iter()
                .map(|s| Span {
                    start: s.start * 1.25,
                    end: s.end * 1.25,
                })
                .collect(),
            host: Vec::new(),
        };
        let c = compare(&p.schedule, &sim, &slow);
        assert!((c.end_to_end_error - 0.2).abs() < 1e-12);
        assert!((c.p90_step_error - 0.2).abs() < 1e-9);
        assert!(
            c.per_kind.iter().all(|r| (r.error + 0.2).abs() < 1e-9),
            "{:?}",
            c.per_kind
        );
        assert!(c.per_kind.iter().any(|r| r.name == "load_kv"));
    }
}
