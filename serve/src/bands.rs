//! Error bands: how sure a prediction is.
//!
//! A band comes from two measured sources, combined by simulation:
//! 1. **The cost model's calibration residuals.** The presets' kernels miss the measured kernel
//!    tables (`calibrate/data/measured_kernels/`: Vidur's Llama-2-7B profiles on A100 and H100,
//!    TP 1-8, and FlashAttention's A100 attention table) by a spread of [`CostSpread`] in
//!    `ln(predicted / measured)`. A band's draw scales every token-wise kernel and every
//!    attention kernel of the run by `exp(σ z)` (one standard normal `z` per class and draw,
//!    [`CostScales`]) and serves the same requests again: near saturation a few per cent of cost
//!    become tens of per cent of latency, and the band widens as the run does.
//! 2. **The engine's validation residuals.** What the simulator, run with the nominal costs,
//!    still misses on real vLLM runs: `ln(measured / predicted)` per metric over the served
//!    stages of `data/validation/real_vllm/` ([`Residuals::builtin`]; overloaded stages are left
//!    out, as the comparison's summary leaves them out). Each draw's figure is multiplied by
//!    every residual in turn.
//!
//! The band at coverage `c` is the `(1 − c)/2` and `(1 + c)/2` quantiles of those
//! draws × residuals. Both sources hold the cost model's error on the calibrated GPUs, so the
//! two overlap there and the band leans wide; on a GPU or model nobody measured the residuals
//! are the only word on the engine, and the band cannot know what they do not show.
//! `serve/tests/real_vllm.rs` checks the coverage held apart (bands from half of the stages'
//! residuals, judged on the other half) and that the built-in residuals are the replay's.

use rand::SeedableRng;
use rand::rngs::ChaCha8Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::Serialize;

use crate::iteration::CostScales;
use crate::output::ServeReport;

pub use crate::output::bands::{
    BUILTIN_ATTENTION_SIGMA, BUILTIN_DENSE_SIGMA, Band, CostSpread, Metric, ServeBands,
};

impl Metric {
    /// The run's figure.
    pub fn of(self, out: &ServeReport) -> f64 {
        let s = &out.summary;
        match self {
            Metric::TtftMean => s.ttft_s.mean,
            Metric::TtftP99 => s.ttft_s.p99,
            Metric::TpotMean => s.tpot_s.mean,
            Metric::TpotP99 => s.tpot_s.p99,
            Metric::E2eMean => s.e2e_s.mean,
            Metric::E2eP99 => s.e2e_s.p99,
            Metric::RequestsPerS => s.requests_per_s,
            Metric::OutputTokensPerS => s.output_tokens_per_s,
        }
    }

    /// The validation residuals it borrows: a stage table measures TPOT as a mean only, so
    /// TPOT p99 takes TPOT's, and output tokens per second the request rate's (every stage's
    /// requests generate a fixed length).
    fn residual_source(self) -> ResidualKind {
        match self {
            Metric::TtftMean => ResidualKind::TtftMean,
            Metric::TtftP99 => ResidualKind::TtftP99,
            Metric::TpotMean | Metric::TpotP99 => ResidualKind::Tpot,
            Metric::E2eMean => ResidualKind::E2eMean,
            Metric::E2eP99 => ResidualKind::E2eP99,
            Metric::RequestsPerS | Metric::OutputTokensPerS => ResidualKind::Throughput,
        }
    }
}

/// The measured figures of a stage table residuals are taken on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ResidualKind {
    TtftMean,
    TtftP99,
    Tpot,
    E2eMean,
    E2eP99,
    Throughput,
}

/// One served stage's residuals `ln(measured / predicted)`: TTFT mean and p99, TPOT, E2E mean
/// and p99, throughput (`NaN` where the table does not measure the figure).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StageResiduals {
    /// The stage.
    pub name: &'static str,
    /// `[ttft_mean, ttft_p99, tpot, e2e_mean, e2e_p99, throughput]`.
    pub values: [f64; 6],
}

/// The engine's validation residuals, one set per served stage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Residuals {
    /// Per stage.
    pub stages: Vec<StageResiduals>,
}

impl Residuals {
    /// The residuals of the served stages of `data/validation/real_vllm/` replayed by this
    /// simulator (`serve/tests/real_vllm.rs` replays them and fails when these drift).
    pub fn builtin() -> Residuals {
        Residuals {
            stages: BUILTIN_RESIDUALS.to_vec(),
        }
    }

    /// The residuals of `metric` over the stages that measured it.
    pub fn of(&self, metric: Metric) -> Vec<f64> {
        let i = residual_index(metric.residual_source());
        (self.stages.iter())
            .map(|s| s.values[i])
            .filter(|v| v.is_finite())
            .collect()
    }
}

fn residual_index(k: ResidualKind) -> usize {
    match k {
        ResidualKind::TtftMean => 0,
        ResidualKind::TtftP99 => 1,
        ResidualKind::Tpot => 2,
        ResidualKind::E2eMean => 3,
        ResidualKind::E2eP99 => 4,
        ResidualKind::Throughput => 5,
    }
}

/// The built-in residuals (see [`Residuals::builtin`]).
pub const BUILTIN_RESIDUALS: &[StageResiduals] = &[
    StageResiduals {
        name: "20260217-155451-llama-2-7b-tp1-codegen stage 0",
        values: [-0.0005, 0.3746, -0.0202, -0.0199, 0.0618, 0.0015],
    },
    StageResiduals {
        name: "20260217-155451-llama-2-7b-tp1-codegen stage 1",
        values: [0.0132, 0.3297, -0.0195, -0.0191, 0.0097, 0.0112],
    },
    StageResiduals {
        name: "20260217-162547-llama-2-7b-tp1-roleplay stage 0",
        values: [-0.0022, 0.0991, -0.02, -0.0197, -0.0104, 0.0165],
    },
    StageResiduals {
        name: "20260217-231439-llama-2-7b-tp1-general stage 0",
        values: [-0.0037, 0.0786, -0.014, -0.0138, 0.0321, 0.001],
    },
    StageResiduals {
        name: "20260217-231439-llama-2-7b-tp1-general stage 1",
        values: [0.0321, 0.1227, -0.0525, -0.0515, 0.0084, 0.004],
    },
    StageResiduals {
        name: "20260218-120914-mixtral-8x7b-v0-1-tp2-codegen stage 0",
        values: [-0.0227, -0.2678, -0.0088, -0.009, 0.1881, 0.0018],
    },
    StageResiduals {
        name: "20260218-120914-mixtral-8x7b-v0-1-tp2-codegen stage 1",
        values: [0.0599, 0.0763, 0.0235, 0.0239, 0.0514, 0.0117],
    },
    StageResiduals {
        name: "20260218-130541-mixtral-8x7b-v0-1-tp2-general stage 0",
        values: [0.0135, 0.9631, 0.0363, 0.036, 0.3614, 0.0012],
    },
    StageResiduals {
        name: "20260218-130541-mixtral-8x7b-v0-1-tp2-general stage 1",
        values: [0.2152, 1.3283, 0.0278, 0.0302, 0.0673, 0.0029],
    },
    StageResiduals {
        name: "20260218-141024-mixtral-8x7b-v0-1-tp2-roleplay stage 0",
        values: [0.0217, 0.314, 0.0014, 0.0016, 0.0943, 0.0166],
    },
];

/// How a band is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct BandSettings {
    /// The band's coverage, in (0, 1).
    pub coverage: f64,
    /// Runs with perturbed costs.
    pub draws: u32,
    /// Seed of the perturbations.
    pub seed: u64,
}

/// The coverage of a band unless one is asked for.
pub const DEFAULT_COVERAGE: f64 = 0.8;
/// Perturbed runs of a band unless told otherwise.
pub const DEFAULT_DRAWS: u32 = 16;

impl Default for BandSettings {
    fn default() -> Self {
        BandSettings {
            coverage: DEFAULT_COVERAGE,
            draws: DEFAULT_DRAWS,
            seed: 0,
        }
    }
}

/// A band setting out of range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BandError {
    /// Coverage outside (0, 1).
    #[error("coverage: {0} must be above 0 and below 1 (0.8 is 80%)")]
    Coverage(f64),
    /// No draws.
    #[error("draws: {0} must be from 2 to 1000")]
    Draws(u32),
}

impl BandSettings {
    /// Checks the settings.
    pub fn check(&self) -> Result<(), BandError> {
        if !(self.coverage > 0.0 && self.coverage < 1.0) {
            return Err(BandError::Coverage(self.coverage));
        }
        if !(2..=1000).contains(&self.draws) {
            return Err(BandError::Draws(self.draws));
        }
        Ok(())
    }

    /// The cost multipliers of each draw: `exp(σ z)` per class, `z` standard normal from the
    /// seed (the same settings give the same draws).
    pub fn scales(&self, spread: &CostSpread) -> Vec<CostScales> {
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        (0..self.draws)
            .map(|_| {
                let z1: f64 = StandardNormal.sample(&mut rng);
                let z2: f64 = StandardNormal.sample(&mut rng);
                CostScales {
                    dense: (spread.dense * z1).exp(),
                    attention: (spread.attention * z2).exp(),
                }
            })
            .collect()
    }
}

/// The `q` quantile of sorted `v`, linearly interpolated between ranks.
fn quantile(v: &[f64], q: f64) -> f64 {
    let pos = q * (v.len() - 1) as f64;
    let (i, f) = (pos.floor() as usize, pos.fract());
    if i + 1 < v.len() {
        v[i] + f * (v[i + 1] - v[i])
    } else {
        v[v.len() - 1]
    }
}

/// The band of a figure predicted `value` by the nominal run and `draws` by the perturbed ones,
/// with `residuals` (`ln(measured / predicted)`); `None` when a figure is not a positive finite
/// number (nothing finished, say) or there are no residuals.
pub fn band(value: f64, draws: &[f64], residuals: &[f64], coverage: f64) -> Option<Band> {
    let ok = |x: f64| x.is_finite() && x > 0.0;
    if !ok(value) || residuals.is_empty() || !draws.iter().all(|&d| ok(d)) {
        return None;
    }
    let mut xs: Vec<f64> = std::iter::once(value)
        .chain(draws.iter().copied())
        .flat_map(|d| residuals.iter().map(move |r| d.ln() + r))
        .collect();
    xs.sort_unstable_by(f64::total_cmp);
    let tail = (1.0 - coverage) / 2.0;
    Some(Band {
        value,
        lo: quantile(&xs, tail).exp(),
        hi: quantile(&xs, 1.0 - tail).exp(),
        coverage,
    })
}

/// The bands of `nominal` from the perturbed runs `drawn` (one per draw of `settings`) and the
/// engine's `residuals`.
pub fn serve_bands(
    nominal: &ServeReport,
    drawn: &[ServeReport],
    residuals: &Residuals,
    spread: CostSpread,
    settings: &BandSettings,
) -> ServeBands {
    let bands = Metric::ALL
        .iter()
        .filter_map(|&m| {
            let draws: Vec<f64> = drawn.iter().map(|o| m.of(o)).collect();
            band(m.of(nominal), &draws, &residuals.of(m), settings.coverage).map(|b| (m, b))
        })
        .collect();
    ServeBands {
        coverage: settings.coverage,
        draws: drawn.len() as u32,
        spread,
        residual_stages: residuals.stages.len(),
        bands,
    }
}

/// Serves `requests` of `scenario` once per draw of `settings` (in parallel, collected in draw
/// order) with the cost model perturbed by `spread`.
pub fn perturbed_runs(
    scenario: &crate::scenario::ServeScenario,
    requests: &[kvplan_workloads::Request],
    spread: &CostSpread,
    settings: &BandSettings,
) -> Result<Vec<ServeReport>, crate::error::Error> {
    use rayon::prelude::*;
    let scales = settings.scales(spread);
    scales
        .par_iter()
        .map(|&s| scenario.run_scaled(requests, s))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_band_holds_the_quantiles_of_draws_times_residuals() {
        // Residuals ±10% around a value of 1 with no perturbation: 80% of the products lie
        // between the 10th and 90th percentiles of the residuals.
        let r: Vec<f64> = (0..=10).map(|i| (f64::from(i) - 5.0) * 0.02).collect();
        let b = band(1.0, &[1.0, 1.0], &r, 0.8).unwrap();
        assert!((b.lo - (-0.08f64).exp()).abs() < 1e-12, "{b:?}");
        assert!((b.hi - 0.08f64.exp()).abs() < 1e-12, "{b:?}");
        assert!(b.covers(1.0) && !b.covers(1.2));
        // A wider coverage gives a wider band; perturbed draws widen it further.
        let wide = band(1.0, &[1.0, 1.0], &r, 0.95).unwrap();
        assert!(wide.lo < b.lo && wide.hi > b.hi);
        let spread = band(1.0, &[0.7, 1.5], &r, 0.8).unwrap();
        assert!(spread.lo < b.lo && spread.hi > b.hi, "{spread:?}");
    }

    #[test]
    fn no_band_on_figures_that_are_not_positive() {
        assert_eq!(band(0.0, &[1.0], &[0.1], 0.8), None);
        assert_eq!(band(1.0, &[f64::INFINITY], &[0.1], 0.8), None);
        assert_eq!(band(1.0, &[1.0], &[], 0.8), None);
    }

    #[test]
    fn draws_follow_the_seed_and_the_spread() {
        let s = BandSettings::default();
        let spread = CostSpread {
            dense: 0.05,
            attention: 0.1,
        };
        let a = s.scales(&spread);
        assert_eq!(a, s.scales(&spread));
        assert_eq!(a.len(), DEFAULT_DRAWS as usize);
        let other = BandSettings { seed: 1, ..s }.scales(&spread);
        assert_ne!(a, other);
        // Some draws above 1 and some below, in both classes, none absurd.
        for f in [|c: &CostScales| c.dense, |c: &CostScales| c.attention] {
            assert!(a.iter().any(|c| f(c) > 1.0) && a.iter().any(|c| f(c) < 1.0));
            assert!(a.iter().all(|c| (0.5..2.0).contains(&f(c))));
        }
        let none = s.scales(&CostSpread {
            dense: 0.0,
            attention: 0.0,
        });
        assert!(none.iter().all(|c| *c == CostScales::default()));
    }

    #[test]
    fn settings_out_of_range_are_refused() {
        for c in [0.0, 1.0, -0.5, f64::NAN] {
            let s = BandSettings {
                coverage: c,
                ..Default::default()
            };
            assert!(matches!(s.check(), Err(BandError::Coverage(_))), "{c}");
        }
        let s = BandSettings {
            draws: 1,
            ..Default::default()
        };
        assert_eq!(s.check(), Err(BandError::Draws(1)));
        assert_eq!(BandSettings::default().check(), Ok(()));
    }
}
