//! Measured tables from `kvplan calibrate`, stored in a profile's `[calibration]` section and
//! used by the [`CostModel`](crate::CostModel) in place of the datasheet roofline.
//!
//! - copies: seconds vs bytes per direction and host memory kind, interpolated piecewise
//!   linearly (a straight line between measured sizes is latency + bytes / bandwidth locally);
//! - GEMMs: measured seconds at model shapes; other shapes scale the roofline by the measured /
//!   roofline ratio of the nearest measured (n, k), interpolated in log m;
//! - attention and elementwise kernels: fitted roofline parameters (overhead, FLOP/s, bytes/s).

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::error::{Error, Result};

/// Copy time vs size: `[bytes, seconds]` points, sizes strictly increasing, times non-decreasing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Curve(pub Vec<(u64, f64)>);

impl Curve {
    fn check(&self, field: &str) -> Result<()> {
        let pts = &self.0;
        if pts.len() < 2 {
            return Err(Error::invalid(
                field,
                pts.len(),
                "needs at least 2 [bytes, seconds] points",
            ));
        }
        for (i, &(b, t)) in pts.iter().enumerate() {
            if b == 0 || !(t.is_finite() && t > 0.0) {
                return Err(Error::invalid(
                    format!("{field}[{i}]"),
                    format!("[{b}, {t}]"),
                    "bytes and seconds must be positive",
                ));
            }
            if i > 0 && (b <= pts[i - 1].0 || t < pts[i - 1].1) {
                return Err(Error::invalid(
                    format!("{field}[{i}]"),
                    format!("[{b}, {t}]"),
                    "sizes must increase and times must not decrease",
                ));
            }
        }
        Ok(())
    }

    /// Seconds to copy `bytes` (0 for 0 bytes; the smallest measured time below the smallest
    /// size; the last segment's bandwidth beyond the largest).
    pub fn time(&self, bytes: u64) -> f64 {
        if bytes == 0 {
            return 0.0;
        }
        let pts = &self.0;
        let (b0, t0) = pts[0];
        if bytes <= b0 {
            return t0;
        }
        let i = pts.partition_point(|&(b, _)| b < bytes);
        let (lo, hi) = if i >= pts.len() {
            (pts[pts.len() - 2], pts[pts.len() - 1])
        } else {
            (pts[i - 1], pts[i])
        };
        let slope = self.segment_slope(lo, hi);
        lo.1 + (bytes - lo.0) as f64 * slope
    }

    fn segment_slope(&self, lo: (u64, f64), hi: (u64, f64)) -> f64 {
        let s = (hi.1 - lo.1) / (hi.0 - lo.0) as f64;
        if s > 0.0 { s } else { hi.1 / hi.0 as f64 }
    }

    /// Asymptotic seconds per byte (the largest segment's slope).
    pub fn secs_per_byte(&self) -> f64 {
        let n = self.0.len();
        self.segment_slope(self.0[n - 2], self.0[n - 1])
    }

    /// The measured time of the smallest copy (a floor: the per-transfer cost).
    pub fn latency_s(&self) -> f64 {
        self.0[0].1
    }

    /// Highest bandwidth over the measured sizes, bytes/s.
    pub fn best_bandwidth(&self) -> f64 {
        self.0
            .iter()
            .map(|&(b, t)| b as f64 / t)
            .fold(0.0, f64::max)
    }
}

/// Copy curves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CopyTables {
    /// Pinned host→device.
    pub h2d_pinned: Curve,
    /// Pinned device→host.
    pub d2h_pinned: Curve,
    /// Pageable host→device.
    pub h2d_pageable: Curve,
    /// Pageable device→host.
    pub d2h_pageable: Curve,
}

/// One measured GEMM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmPoint {
    /// Element type.
    pub dtype: DType,
    /// Rows.
    pub m: u32,
    /// Columns.
    pub n: u32,
    /// Inner dimension.
    pub k: u32,
    /// Measured seconds of one GEMM.
    pub seconds: f64,
}

/// A fitted kernel roofline: `overhead + max(flops / flops_rate, bytes / byte_rate)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelFit {
    /// Fixed cost per kernel, microseconds.
    pub overhead_us: f64,
    /// Sustained compute rate, TFLOP/s (0 for memory-only kernels).
    #[serde(default)]
    pub tflops: f64,
    /// Sustained memory rate, GB/s.
    pub gbps: f64,
}

impl KernelFit {
    fn check(&self, field: &str, needs_flops: bool) -> Result<()> {
        let ok = |v: f64| v.is_finite() && v >= 0.0;
        if !ok(self.overhead_us) {
            return Err(Error::invalid(
                format!("{field}.overhead_us"),
                self.overhead_us,
                "must be zero or more",
            ));
        }
        if !(self.gbps.is_finite() && self.gbps > 0.0) {
            return Err(Error::invalid(
                format!("{field}.gbps"),
                self.gbps,
                "must be positive",
            ));
        }
        if needs_flops && !(self.tflops.is_finite() && self.tflops > 0.0) {
            return Err(Error::invalid(
                format!("{field}.tflops"),
                self.tflops,
                "must be positive",
            ));
        }
        Ok(())
    }
}

/// The `[calibration]` section: provenance and measured tables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    /// `cuda` or `cpu`.
    pub backend: String,
    /// Device name.
    pub device: String,
    /// Driver / OS description.
    pub driver: String,
    /// Date of the measurement (YYYY-MM-DD, UTC).
    pub date: String,
    /// kvplan version that measured.
    pub kvplan_version: String,
    /// `quick` or `full`.
    pub mode: String,
    /// Copy curves.
    pub copy: CopyTables,
    /// Fitted attention kernel.
    pub attention: KernelFit,
    /// Fitted memory-bound kernel.
    pub elementwise: KernelFit,
    /// Measured GEMMs.
    #[serde(default)]
    pub gemm: Vec<GemmPoint>,
}

impl Calibration {
    /// Checks every table (field names are prefixed with `calibration.`).
    pub fn check(&self, origin: &str) -> Result<()> {
        let f = |s: &str| format!("{origin}: calibration.{s}");
        self.copy.h2d_pinned.check(&f("copy.h2d_pinned"))?;
        self.copy.d2h_pinned.check(&f("copy.d2h_pinned"))?;
        self.copy.h2d_pageable.check(&f("copy.h2d_pageable"))?;
        self.copy.d2h_pageable.check(&f("copy.d2h_pageable"))?;
        self.attention.check(&f("attention"), true)?;
        self.elementwise.check(&f("elementwise"), false)?;
        for (i, g) in self.gemm.iter().enumerate() {
            if g.m == 0 || g.n == 0 || g.k == 0 || !(g.seconds.is_finite() && g.seconds > 0.0) {
                return Err(Error::invalid(
                    f(&format!("gemm[{i}]")),
                    format!("m={} n={} k={} seconds={}", g.m, g.n, g.k, g.seconds),
                    "sizes and seconds must be positive",
                ));
            }
        }
        Ok(())
    }
}

/// Measured / roofline ratios of one `(dtype, n, k)` as `(ln m, ratio)` points sorted by m.
#[derive(Debug, Clone)]
struct GemmGroup {
    dtype: DType,
    n: u32,
    k: u32,
    points: Vec<(f64, f64)>,
}

/// GEMM correction factors grouped by (dtype, n, k): measured / roofline as a function of m.
#[derive(Debug, Clone, Default)]
pub(crate) struct GemmTable {
    groups: Vec<GemmGroup>,
}

impl GemmTable {
    /// Builds the table; `roofline(m, n, k, dtype)` is the uncalibrated time.
    pub(crate) fn new(
        points: &[GemmPoint],
        roofline: impl Fn(u32, u32, u32, DType) -> f64,
    ) -> Self {
        let mut groups: Vec<GemmGroup> = Vec::new();
        for p in points {
            let ratio = p.seconds / roofline(p.m, p.n, p.k, p.dtype);
            let entry = (f64::from(p.m).ln(), ratio);
            match groups
                .iter_mut()
                .find(|g| g.dtype == p.dtype && g.n == p.n && g.k == p.k)
            {
                Some(g) => g.points.push(entry),
                None => groups.push(GemmGroup {
                    dtype: p.dtype,
                    n: p.n,
                    k: p.k,
                    points: vec![entry],
                }),
            }
        }
        for g in &mut groups {
            g.points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        GemmTable { groups }
    }

    /// The measured/roofline ratio for a shape, or `None` if this dtype was not measured.
    pub(crate) fn ratio(&self, m: u32, n: u32, k: u32, dtype: DType) -> Option<f64> {
        let (ln, lk) = (f64::from(n).ln(), f64::from(k).ln());
        let distance =
            |g: &GemmGroup| (f64::from(g.n).ln() - ln).abs() + (f64::from(g.k).ln() - lk).abs();
        let group = self
            .groups
            .iter()
            .filter(|g| g.dtype == dtype)
            .min_by(|a, b| distance(a).total_cmp(&distance(b)))?;
        let pts = &group.points;
        let x = f64::from(m.max(1)).ln();
        let i = pts.partition_point(|p| p.0 < x);
        Some(if i == 0 {
            pts[0].1
        } else if i >= pts.len() {
            pts[pts.len() - 1].1
        } else {
            let (a, b) = (pts[i - 1], pts[i]);
            a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn curve_interpolates_and_extrapolates() {
        let c = Curve(vec![(1000, 1e-5), (2000, 1.5e-5), (4000, 2.5e-5)]);
        assert_eq!(c.time(0), 0.0);
        assert_eq!(c.time(10), 1e-5);
        assert!((c.time(1500) - 1.25e-5).abs() < 1e-15);
        // Beyond the last point: the last segment's slope (5e-9 s/byte).
        assert!((c.time(8000) - (2.5e-5 + 4000.0 * 5e-9)).abs() < 1e-15);
        assert!((c.secs_per_byte() - 5e-9).abs() < 1e-20);
        assert!(c.check("c").is_ok());
        let bad = Curve(vec![(1000, 2e-5), (2000, 1e-5)]);
        assert!(
            bad.check("copy.h2d")
                .unwrap_err()
                .to_string()
                .contains("must not decrease")
        );
    }

    #[test]
    fn gemm_ratio_interpolates_in_log_m_and_uses_nearest_shape() {
        let pts = [
            GemmPoint {
                dtype: DType::Fp16,
                m: 16,
                n: 4096,
                k: 4096,
                seconds: 2.0,
            },
            GemmPoint {
                dtype: DType::Fp16,
                m: 256,
                n: 4096,
                k: 4096,
                seconds: 4.0,
            },
        ];
        let t = GemmTable::new(&pts, |_, _, _, _| 1.0);
        assert_eq!(t.ratio(16, 4096, 4096, DType::Fp16), Some(2.0));
        // m = 64 is halfway between 16 and 256 in log space.
        assert!((t.ratio(64, 4096, 4096, DType::Fp16).unwrap() - 3.0).abs() < 1e-12);
        assert_eq!(t.ratio(4096, 5000, 4000, DType::Fp16), Some(4.0));
        assert_eq!(t.ratio(64, 4096, 4096, DType::Bf16), None);
    }
}
