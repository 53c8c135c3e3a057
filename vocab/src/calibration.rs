//! Measured tables from `kvplan calibrate`, stored in a profile's `[calibration]` section and
//! used by the [`CostModel`](crate::CostModel) in place of the datasheet roofline.
//!
//! - copies: seconds vs bytes per direction and host memory kind, interpolated piecewise
//!   linearly (a straight line between measured sizes is latency + bytes / bandwidth locally);
//! - GEMMs: measured seconds at model shapes, read as `[kernels]` tables (see
//!   [`crate::kernel_model`]): a measured shape interpolated in log-log over rows, other shapes
//!   the model times the nearest measured shape's ratio;
//! - attention and elementwise kernels: fitted roofline parameters (overhead, FLOP/s, bytes/s).

use serde::{Deserialize, Serialize};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::limits::{BANDWIDTH, FLOPS, LATENCY, MEASURED_FLOPS, MEASURED_SECONDS, Range, show};

/// Copy time vs size: `[bytes, seconds]` points, sizes strictly increasing, times non-decreasing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Curve(pub Vec<(u64, f64)>);

impl Curve {
    /// Each point's size in bytes with the bandwidth it achieved, GB/s.
    pub fn gbps(&self) -> impl Iterator<Item = (u64, f64)> + '_ {
        self.0.iter().map(|&(b, t)| (b, b as f64 / t / 1e9))
    }

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
            if b == 0 || !MEASURED_SECONDS.contains(t) {
                return Err(Error::invalid(
                    format!("{field}[{i}]"),
                    format!("[{b}, {}]", show(t)),
                    format!(
                        "bytes must be positive and seconds more than 0, at most {}",
                        MEASURED_SECONDS.max
                    ),
                ));
            }
            if i > 0 && (b <= pts[i - 1].0 || t < pts[i - 1].1) {
                return Err(Error::invalid(
                    format!("{field}[{i}]"),
                    format!("[{b}, {}]", show(t)),
                    "sizes must increase and times must not decrease",
                ));
            }
            if b as f64 / t > BANDWIDTH.max {
                return Err(Error::invalid(
                    format!("{field}[{i}]"),
                    format!("[{b}, {}]", show(t)),
                    format!(
                        "bytes / seconds is a bandwidth above {} GB/s ({})",
                        BANDWIDTH.max / 1e9,
                        BANDWIDTH.label
                    ),
                ));
            }
        }
        // The affine view planners use: the smallest copy's time as latency, the last segment's
        // bandwidth.
        let latency = self.latency_s();
        if !LATENCY.contains(latency) {
            return Err(Error::invalid(
                format!("{field}[0]"),
                format!("[{}, {}]", pts[0].0, show(latency)),
                format!(
                    "the smallest copy's time is the per-transfer latency: {}",
                    LATENCY.describe(1.0, "s")
                ),
            ));
        }
        let bandwidth = 1.0 / self.secs_per_byte();
        if !BANDWIDTH.contains(bandwidth) {
            return Err(Error::invalid(
                field.to_string(),
                format!("{} GB/s between the last two points", show(bandwidth / 1e9)),
                format!(
                    "the bandwidth of the largest copies {}",
                    BANDWIDTH.describe(1e9, "GB/s")
                ),
            ));
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
        if i >= pts.len() {
            // Beyond the largest size: the last segment's bandwidth.
            let (lo, hi) = (pts[pts.len() - 2], pts[pts.len() - 1]);
            return lo.1 + (bytes - lo.0) as f64 * self.segment_slope(lo, hi);
        }
        // Between two measured sizes: the straight line between them (flat where they took
        // the same time, so the curve never exceeds its next point).
        let (lo, hi) = (pts[i - 1], pts[i]);
        lo.1 + (bytes - lo.0) as f64 * ((hi.1 - lo.1) / (hi.0 - lo.0) as f64)
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

impl GemmPoint {
    /// The throughput it achieved, TFLOP/s (`2·m·n·k` FLOPs per GEMM).
    pub fn tflops(&self) -> f64 {
        2.0 * f64::from(self.m) * f64::from(self.n) * f64::from(self.k) / self.seconds / 1e12
    }
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
        let range = |name: &str, v: f64, scale: f64, unit: &str, r: Range| {
            if r.contains(v * scale) {
                Ok(())
            } else {
                Err(Error::invalid(
                    format!("{field}.{name}"),
                    show(v),
                    r.describe(scale, unit),
                ))
            }
        };
        range("overhead_us", self.overhead_us, 1e-6, "us", LATENCY)?;
        range("gbps", self.gbps, 1e9, "GB/s", BANDWIDTH)?;
        // Memory-only kernels leave the FLOP rate at 0 (unused).
        if needs_flops || self.tflops != 0.0 {
            range("tflops", self.tflops, 1e12, "TFLOP/s", MEASURED_FLOPS)?;
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
    /// `[calibration.host]`: what issuing work cost the host thread of the executor that
    /// measured (absent in profiles calibrated before it was measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostCosts>,
}

/// The host's side of the executor that calibrated, measured on the machine that ran it:
/// medians of its own issue spans (`Timeline::host`). On CUDA these are the driver calls of
/// kvplan's executor (a launch or copy with its two timing events); on the CPU backend, where
/// the host runs the ops itself, its dispatch between two ops.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostCosts {
    /// Host time to issue one small kernel, microseconds.
    pub launch_us: f64,
    /// Host time to issue one small copy from or to pinned memory, microseconds.
    pub copy_issue_us: f64,
    /// Host time of one synchronisation with an idle device, microseconds.
    pub sync_us: f64,
}

impl HostCosts {
    fn check(&self, field: &str) -> Result<()> {
        for (name, v) in [
            ("launch_us", self.launch_us),
            ("copy_issue_us", self.copy_issue_us),
            ("sync_us", self.sync_us),
        ] {
            if !LATENCY.contains(v * 1e-6) {
                return Err(Error::invalid(
                    format!("{field}.{name}"),
                    show(v),
                    LATENCY.describe(1e-6, "us"),
                ));
            }
        }
        Ok(())
    }
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
        if let Some(h) = &self.host {
            h.check(&f("host"))?;
        }
        for (i, g) in self.gemm.iter().enumerate() {
            let shape = format!("m={} n={} k={} seconds={}", g.m, g.n, g.k, show(g.seconds));
            if g.m == 0 || g.n == 0 || g.k == 0 || !MEASURED_SECONDS.contains(g.seconds) {
                return Err(Error::invalid(
                    f(&format!("gemm[{i}]")),
                    shape,
                    format!(
                        "sizes must be positive and seconds more than 0, at most {}",
                        MEASURED_SECONDS.max
                    ),
                ));
            }
            let flops = 2.0 * f64::from(g.m) * f64::from(g.n) * f64::from(g.k) / g.seconds;
            if flops > FLOPS.max {
                return Err(Error::invalid(
                    f(&format!("gemm[{i}].seconds")),
                    shape,
                    format!(
                        "2*m*n*k / seconds is above {} TFLOP/s ({})",
                        FLOPS.max / 1e12,
                        FLOPS.label
                    ),
                ));
            }
        }
        Ok(())
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
        // A flat stretch (small copies that all took the latency) stays flat: the curve is
        // monotone and never above its next point (it was once `lo + bytes * hi_s / hi_bytes`).
        let flat = Curve(vec![(4096, 4.6e-6), (65536, 4.6e-6), (262144, 8.6e-6)]);
        assert_eq!(flat.time(8192), 4.6e-6);
        assert!(flat.time(65537) >= flat.time(65536));
        let bad = Curve(vec![(1000, 2e-5), (2000, 1e-5)]);
        assert!(
            bad.check("copy.h2d")
                .unwrap_err()
                .to_string()
                .contains("must not decrease")
        );
    }

    fn table() -> Calibration {
        let curve = Curve(vec![(4096, 1.0e-5), (67_108_864, 2.8e-3)]);
        Calibration {
            backend: "cuda".into(),
            device: "test".into(),
            driver: "test".into(),
            date: "2026-01-01".into(),
            kvplan_version: "0.1.0".into(),
            mode: "quick".into(),
            copy: CopyTables {
                h2d_pinned: curve.clone(),
                d2h_pinned: curve.clone(),
                h2d_pageable: curve.clone(),
                d2h_pageable: curve,
            },
            attention: KernelFit {
                overhead_us: 5.0,
                tflops: 100.0,
                gbps: 1000.0,
            },
            elementwise: KernelFit {
                overhead_us: 3.0,
                tflops: 0.0,
                gbps: 1200.0,
            },
            gemm: vec![GemmPoint {
                dtype: DType::Fp16,
                m: 64,
                n: 12288,
                k: 4096,
                seconds: 1.5e-4,
            }],
            host: Some(HostCosts {
                launch_us: 5.2,
                copy_issue_us: 4.8,
                sync_us: 9.4,
            }),
        }
    }

    fn error(c: &Calibration) -> String {
        c.check("cal.toml").unwrap_err().to_string()
    }

    #[test]
    fn host_costs_out_of_range_name_their_field_and_absent_ones_are_fine() {
        for (set, field) in [
            (
                (|h: &mut HostCosts| h.launch_us = -1.0) as fn(&mut HostCosts),
                "calibration.host.launch_us",
            ),
            (
                |h| h.copy_issue_us = f64::NAN,
                "calibration.host.copy_issue_us",
            ),
            (|h| h.sync_us = 2e6, "calibration.host.sync_us"),
        ] {
            let mut c = table();
            set(c.host.as_mut().unwrap());
            let e = error(&c);
            assert!(e.starts_with(&format!("cal.toml: {field}")), "{e}");
        }
        let mut c = table();
        c.host = None;
        assert!(c.check("cal.toml").is_ok());
        // A profile written before host costs were measured reads without them, and one with
        // them keeps them through a round trip.
        let text = toml::to_string(&table()).unwrap();
        assert!(text.contains("[host]\nlaunch_us = 5.2"), "{text}");
        let back: Calibration = toml::from_str(&text).unwrap();
        assert_eq!(back, table());
        let without = toml::to_string(&c).unwrap();
        assert!(!without.contains("[host]"));
        assert_eq!(toml::from_str::<Calibration>(&without).unwrap().host, None);
    }

    #[test]
    fn absurd_tables_are_range_errors_naming_the_field() {
        assert!(table().check("cal.toml").is_ok());
        // A copy of 64 MiB in 1e-300 s: a bandwidth no link has.
        let mut c = table();
        c.copy.d2h_pinned = Curve(vec![(4096, 1e-5), (67_108_864, 1e-300)]);
        let e = error(&c);
        assert!(e.contains("calibration.copy.d2h_pinned[1]"), "{e}");
        let mut c = table();
        c.copy.h2d_pinned = Curve(vec![(4096, 1e-300), (8192, 2e-300)]);
        let e = error(&c);
        assert!(
            e.contains("calibration.copy.h2d_pinned[0]") && e.contains("100000 GB/s"),
            "{e}"
        );
        // Seconds of 1e30: absurd, whatever the size.
        let mut c = table();
        c.copy.h2d_pageable = Curve(vec![(4096, 1e-5), (8192, 1e30)]);
        let e = error(&c);
        assert!(
            e.contains("calibration.copy.h2d_pageable[1]") && e.contains("at most 3600"),
            "{e}"
        );
        // A smallest copy of 2 s is not a per-transfer latency.
        let mut c = table();
        c.copy.d2h_pageable = Curve(vec![(1 << 30, 2.0), (1 << 31, 4.0)]);
        let e = error(&c);
        assert!(
            e.contains("calibration.copy.d2h_pageable[0]") && e.contains("0 to 1 s"),
            "{e}"
        );
        // Large copies slower than 1 MB/s.
        let mut c = table();
        c.copy.d2h_pageable = Curve(vec![(1, 1e-5), (2, 2e-5)]);
        let e = error(&c);
        assert!(
            e.contains("calibration.copy.d2h_pageable:") && e.contains("1 MB/s"),
            "{e}"
        );
        // Fitted kernels.
        let mut c = table();
        c.attention.tflops = 1e-300;
        let e = error(&c);
        assert!(
            e.contains("calibration.attention.tflops") && e.contains("TFLOP/s"),
            "{e}"
        );
        // What the CPU executor's attention measured on a loaded machine is a measurement, kept.
        let mut c = table();
        c.attention.tflops = 0.0006;
        assert!(c.check("cal.toml").is_ok());
        let mut c = table();
        c.elementwise.gbps = f64::NAN;
        let e = error(&c);
        assert!(
            e.contains("calibration.elementwise.gbps") && e.contains("GB/s"),
            "{e}"
        );
        let mut c = table();
        c.elementwise.overhead_us = 1e30;
        let e = error(&c);
        assert!(e.contains("calibration.elementwise.overhead_us"), "{e}");
        let mut c = table();
        c.elementwise.tflops = -1.0;
        let e = error(&c);
        assert!(e.contains("calibration.elementwise.tflops"), "{e}");
        // GEMM points.
        let mut c = table();
        c.gemm[0].seconds = 1e-30;
        let e = error(&c);
        assert!(
            e.contains("calibration.gemm[0].seconds") && e.contains("TFLOP/s"),
            "{e}"
        );
        let mut c = table();
        c.gemm[0].seconds = f64::INFINITY;
        let e = error(&c);
        assert!(e.contains("calibration.gemm[0]"), "{e}");
    }
}
