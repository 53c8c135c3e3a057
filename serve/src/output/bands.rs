//! Error bands as data: a figure's band, the figures that get one, the cost spread they are
//! drawn from and a run's bands; drawn by [`crate::bands`].

use std::collections::BTreeMap;

use serde::Serialize;

/// A figure with its band: `{"value", "lo", "hi", "coverage"}` in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Band {
    /// The prediction (the nominal cost model's run).
    pub value: f64,
    /// The band's low end.
    pub lo: f64,
    /// The band's high end.
    pub hi: f64,
    /// The probability the band is meant to hold the measurement with.
    pub coverage: f64,
}

impl Band {
    /// Whether `x` lies in the band.
    pub fn covers(&self, x: f64) -> bool {
        self.lo <= x && x <= self.hi
    }
}

/// The figures a band is given for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// TTFT mean.
    TtftMean,
    /// TTFT 99th percentile.
    TtftP99,
    /// Time per output token, mean.
    TpotMean,
    /// Time per output token, 99th percentile.
    TpotP99,
    /// E2E mean.
    E2eMean,
    /// E2E 99th percentile.
    E2eP99,
    /// Finished requests per second.
    RequestsPerS,
    /// Output tokens per second.
    OutputTokensPerS,
}

impl Metric {
    /// Every metric, in report order.
    pub const ALL: [Metric; 8] = [
        Metric::TtftMean,
        Metric::TtftP99,
        Metric::TpotMean,
        Metric::TpotP99,
        Metric::E2eMean,
        Metric::E2eP99,
        Metric::RequestsPerS,
        Metric::OutputTokensPerS,
    ];

    /// The metric's name in outputs (`ttft_mean`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Metric::TtftMean => "ttft_mean",
            Metric::TtftP99 => "ttft_p99",
            Metric::TpotMean => "tpot_mean",
            Metric::TpotP99 => "tpot_p99",
            Metric::E2eMean => "e2e_mean",
            Metric::E2eP99 => "e2e_p99",
            Metric::RequestsPerS => "requests_per_s",
            Metric::OutputTokensPerS => "output_tok_s",
        }
    }
}

/// The spread of the cost model's calibration residuals, `ln(predicted / measured)`, by kernel
/// class: the root mean square over the measured kernel tables' rows (its bias included: a
/// systematic miss is as much an error as a scattered one).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CostSpread {
    /// A layer's token-wise kernels (GEMMs, norms, activation, add; one sum per table row).
    pub dense: f64,
    /// Attention kernels (decode and prefill).
    pub attention: f64,
}

impl CostSpread {
    /// The presets' spread, as `calibrate/tests/measured_tables.rs` measures it on the kernel
    /// tables (it fails when these drift from what the tables give).
    pub fn builtin() -> CostSpread {
        CostSpread {
            dense: BUILTIN_DENSE_SIGMA,
            attention: BUILTIN_ATTENTION_SIGMA,
        }
    }
}

/// [`CostSpread::dense`] of the presets.
pub const BUILTIN_DENSE_SIGMA: f64 = 0.0398;
/// [`CostSpread::attention`] of the presets.
pub const BUILTIN_ATTENTION_SIGMA: f64 = 0.0823;

/// Bands on a serving run's headline figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServeBands {
    /// The bands' coverage.
    pub coverage: f64,
    /// Perturbed runs drawn.
    pub draws: u32,
    /// The cost spread drawn from.
    pub spread: CostSpread,
    /// Validation stages whose residuals widen the bands.
    pub residual_stages: usize,
    /// Per metric, its band; a metric with no band (nothing finished) is left out.
    #[serde(flatten)]
    pub bands: BTreeMap<Metric, Band>,
}

impl ServeBands {
    /// The band of `metric`.
    pub fn get(&self, metric: Metric) -> Option<&Band> {
        self.bands.get(&metric)
    }
}
