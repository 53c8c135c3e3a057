//! The physical ranges a profile's values must fall in, in SI units (bytes, bytes/s, seconds,
//! FLOP/s), in one place. Values outside them are typos or unit mix-ups (GB/s written as B/s,
//! microseconds as seconds) that would make the KVPR LP ill-conditioned or print absurd times;
//! the bounds are wide enough for any real machine, from a laptop CPU to a rack-scale GPU.

use crate::error::{Error, Result};

/// An accepted interval of one quantity, in SI units.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Range {
    /// Lower bound.
    pub min: f64,
    /// Whether `min` itself is excluded (`(min, max]` rather than `[min, max]`).
    pub min_exclusive: bool,
    /// Upper bound (inclusive).
    pub max: f64,
    /// The range in words, for messages (`1 MB/s to 100 TB/s`).
    pub label: &'static str,
}

impl Range {
    /// Whether `v` is a finite number inside the range.
    pub fn contains(&self, v: f64) -> bool {
        v.is_finite()
            && (if self.min_exclusive {
                v > self.min
            } else {
                v >= self.min
            })
            && v <= self.max
    }

    /// What is accepted, in a file's unit (`scale` SI units per `unit`), e.g.
    /// `must be from 0.001 to 100000 GB/s (1 MB/s to 100 TB/s)`.
    pub fn describe(&self, scale: f64, unit: &str) -> String {
        let (lo, hi) = (tidy(self.min / scale), tidy(self.max / scale));
        if self.min_exclusive {
            format!(
                "must be more than {lo} and at most {hi} {unit} ({})",
                self.label
            )
        } else {
            format!("must be from {lo} to {hi} {unit} ({})", self.label)
        }
    }

    /// `v` (in a file's unit, `scale` SI units each) in SI units, if inside the range; else an
    /// error naming `field`, with `v` as written and what is accepted ([`Range::describe`]).
    pub fn check(&self, field: impl Into<String>, v: f64, scale: f64, unit: &str) -> Result<f64> {
        let si = v * scale;
        if self.contains(si) {
            Ok(si)
        } else {
            Err(Error::invalid(field, show(v), self.describe(scale, unit)))
        }
    }
}

/// A value for an error message: plain decimals for everyday magnitudes, scientific
/// notation for the absurd ones (`1e-300`, not three hundred zeros).
pub fn show(v: f64) -> String {
    let a = v.abs();
    if a != 0.0 && a.is_finite() && !(1e-4..1e15).contains(&a) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// `x` without the float noise of a unit conversion (`1000000`, not `999999.9999999999`).
fn tidy(x: f64) -> f64 {
    format!("{x:.9e}").parse().unwrap_or(x)
}

/// Host link, peer link, device memory and every calibrated or fitted bandwidth.
pub const BANDWIDTH: Range = Range {
    min: 1e6,
    min_exclusive: false,
    max: 1e14,
    label: "1 MB/s to 100 TB/s",
};

/// Per-transfer latencies and per-kernel overheads (a calibrated curve's smallest copy too).
pub const LATENCY: Range = Range {
    min: 0.0,
    min_exclusive: false,
    max: 1.0,
    label: "0 to 1 s",
};

/// Peak and fitted FLOP/s.
pub const FLOPS: Range = Range {
    min: 1e9,
    min_exclusive: false,
    max: 1e18,
    label: "1 GFLOP/s to 1 EFLOP/s",
};

/// FLOP/s measured by calibration: as [`FLOPS`] but down to 1 MFLOP/s, since the CPU executor's
/// attention, timed on a loaded 2-core machine, has come out at 0.6 GFLOP/s, and a measurement
/// is what the machine did, not a datasheet figure to sanity-check.
pub const MEASURED_FLOPS: Range = Range {
    min: 1e6,
    min_exclusive: false,
    max: 1e18,
    label: "1 MFLOP/s to 1 EFLOP/s",
};

/// Device memory and host RAM.
pub const MEMORY: Range = Range {
    min: 0.0,
    min_exclusive: true,
    max: (1u64 << 50) as f64,
    label: "more than 0, at most 1 PiB",
};

/// Roofline efficiency factors (fractions of peak).
pub const EFFICIENCY: Range = Range {
    min: 0.0,
    min_exclusive: true,
    max: 1.0,
    label: "a fraction of peak",
};

/// One measured op of a `[calibration]` table (a copy or a GEMM).
pub const MEASURED_SECONDS: Range = Range {
    min: 0.0,
    min_exclusive: true,
    max: 3600.0,
    label: "more than 0, at most an hour",
};

/// A GPU's price per hour, US dollars (`gpu.price_usd_per_hour`, or `NAME=USD` of the CLI's price option): more than
/// nothing, and no GPU rents for more than $10,000 an hour.
pub const PRICE: Range = Range {
    min: 0.0,
    min_exclusive: true,
    max: 1e4,
    label: "more than 0, at most 10000 US dollars per GPU-hour",
};

/// A GPU's board power, watts (`gpu.power_watts`): the largest boards draw about 1.2 kW.
pub const POWER: Range = Range {
    min: 0.0,
    min_exclusive: true,
    max: 5000.0,
    label: "more than 0, at most 5 kW",
};
