//! The figures a run tallies as it goes, a leaf: the engine's counters, and a latency's mean and
//! percentiles.

use serde::Serialize;

/// Engine-wide counters the summary reports.
#[derive(Debug, Clone, Copy, Default)]
pub struct Counters {
    /// Preemptions.
    pub preemptions: u64,
    /// Bytes copied to host.
    pub swap_out_bytes: u64,
    /// Bytes copied back.
    pub swap_in_bytes: u64,
    /// Fused-MoE kernels compiled on first use ([`crate::warmup`]).
    pub kernel_compiles: u64,
    /// Seconds steps waited on those compilations.
    pub compile_stall_s: f64,
}

/// Percentiles of one metric over finished requests. A metric with no value to rank (no request
/// finished; no request with a second token, for TPOT and ITL) is [`Percentiles::NONE`]: NaN
/// throughout, `null` in JSON, empty in CSV, `-` in tables, never a number it did not measure.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Percentiles {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// Equal when every figure has the same bits: two runs that measured nothing are equal.
impl PartialEq for Percentiles {
    fn eq(&self, o: &Self) -> bool {
        [
            (self.mean, o.mean),
            (self.p50, o.p50),
            (self.p90, o.p90),
            (self.p95, o.p95),
            (self.p99, o.p99),
        ]
        .iter()
        .all(|(a, b)| a.to_bits() == b.to_bits())
    }
}

impl Default for Percentiles {
    fn default() -> Self {
        Percentiles::NONE
    }
}

impl Percentiles {
    /// Nothing measured: NaN throughout.
    pub const NONE: Percentiles = Percentiles {
        mean: f64::NAN,
        p50: f64::NAN,
        p90: f64::NAN,
        p95: f64::NAN,
        p99: f64::NAN,
    };

    /// Whether there were values to rank (false for [`Percentiles::NONE`]).
    pub fn measured(&self) -> bool {
        !self.mean.is_nan()
    }

    /// Nearest-rank percentiles of `v` (sorted here); [`Percentiles::NONE`] when empty.
    pub fn of(v: &mut [f64]) -> Self {
        if v.is_empty() {
            return Percentiles::NONE;
        }
        v.sort_unstable_by(f64::total_cmp);
        let at = |p: f64| {
            let rank = ((p * v.len() as f64).ceil() as usize).clamp(1, v.len());
            v[rank - 1]
        };
        Percentiles {
            mean: v.iter().sum::<f64>() / v.len() as f64,
            p50: at(0.5),
            p90: at(0.9),
            p95: at(0.95),
            p99: at(0.99),
        }
    }
}
