//! Inter-token latency as vLLM's `benchmarks/serve.py` (v0.15.1) counts it: every gap between
//! two consecutive tokens of a request as its client receives them (its `itl` list), the gaps of
//! every request pooled. A run of 10,000 requests of 1,000 tokens has ten million gaps, so they
//! are counted in logarithmic buckets 0.1% wide ([`ItlHistogram`]) instead of kept: the mean is
//! exact, a percentile is its bucket's geometric middle (within 0.05% of the value), clamped to
//! the smallest and largest gap.

use crate::figures::Percentiles;

/// The smallest gap a bucket separates, seconds (smaller gaps share the first bucket).
const FLOOR_S: f64 = 1e-7;
/// Each bucket's upper edge over its lower.
const RATIO: f64 = 1.001;
/// The most buckets: gaps up to about 10^5 s, beyond which they share the last.
const MAX_BUCKETS: usize = 27_700;

/// Pooled inter-token gaps in logarithmic buckets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ItlHistogram {
    counts: Vec<u64>,
    n: u64,
    sum: f64,
    min: f64,
    max: f64,
    /// The last gap counted and its bucket: the requests running through a step share their
    /// gap, so most gaps repeat the one before (no logarithm).
    last: Option<(f64, usize)>,
}

impl ItlHistogram {
    /// Counts one gap of `s` seconds (a gap that is not a finite time of 0 or more is skipped).
    pub fn add(&mut self, s: f64) {
        self.add_n(s, 1);
    }

    /// Counts `n` gaps of `s` seconds each.
    pub fn add_n(&mut self, s: f64, n: u64) {
        if !(s.is_finite() && s >= 0.0) || n == 0 {
            return;
        }
        let i = match self.last {
            Some((g, i)) if g == s => i,
            _ => {
                let i = if s <= FLOOR_S {
                    0
                } else {
                    (((s / FLOOR_S).ln() / RATIO.ln()) as usize).min(MAX_BUCKETS - 1)
                };
                self.last = Some((s, i));
                i
            }
        };
        if i >= self.counts.len() {
            self.counts.resize(i + 1, 0);
        }
        self.counts[i] += n;
        if self.n == 0 {
            (self.min, self.max) = (s, s);
        } else {
            self.min = self.min.min(s);
            self.max = self.max.max(s);
        }
        self.n += n;
        self.sum += s * n as f64;
    }

    /// Adds another engine's gaps.
    pub fn merge(&mut self, other: &ItlHistogram) {
        if other.n == 0 {
            return;
        }
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        if self.n == 0 {
            (self.min, self.max) = (other.min, other.max);
        } else {
            self.min = self.min.min(other.min);
            self.max = self.max.max(other.max);
        }
        self.n += other.n;
        self.sum += other.sum;
    }

    /// Gaps counted.
    pub fn count(&self) -> u64 {
        self.n
    }

    /// Mean and nearest-rank percentiles (as [`Percentiles::of`] ranks them); [`Percentiles::NONE`] when
    /// empty.
    pub fn percentiles(&self) -> Percentiles {
        if self.n == 0 {
            return Percentiles::NONE;
        }
        let at = |p: f64| {
            let rank = ((p * self.n as f64).ceil() as u64).clamp(1, self.n);
            let mut seen = 0;
            for (i, &c) in self.counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    // The first and last buckets are open-ended: their smallest and largest gap.
                    if i == 0 {
                        return self.min;
                    }
                    if i == MAX_BUCKETS - 1 {
                        return self.max;
                    }
                    let mid = FLOOR_S * RATIO.powf(i as f64 + 0.5);
                    return mid.clamp(self.min, self.max);
                }
            }
            self.max
        };
        Percentiles {
            mean: self.sum / self.n as f64,
            p50: at(0.5),
            p90: at(0.9),
            p95: at(0.95),
            p99: at(0.99),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_within_a_bucket_of_the_exact_ones() {
        // Gaps from 1 ms to 100 ms, spread unevenly.
        let gaps: Vec<f64> = (1..=5000)
            .map(|i| 1e-3 * (1.0 + 99.0 * (f64::from(i) / 5000.0).powi(3)))
            .collect();
        let mut h = ItlHistogram::default();
        for &g in &gaps {
            h.add(g);
        }
        let exact = Percentiles::of(&mut gaps.clone());
        let got = h.percentiles();
        assert_eq!(h.count(), 5000);
        assert!((got.mean - exact.mean).abs() < 1e-12);
        for (a, b) in [
            (got.p50, exact.p50),
            (got.p90, exact.p90),
            (got.p95, exact.p95),
            (got.p99, exact.p99),
        ] {
            assert!((a / b - 1.0).abs() < 6e-4, "{a} vs {b}");
        }
    }

    #[test]
    fn merging_is_adding_the_same_gaps() {
        let (mut a, mut b, mut all) = (
            ItlHistogram::default(),
            ItlHistogram::default(),
            ItlHistogram::default(),
        );
        for i in 0..100 {
            let g = 1e-3 * f64::from(i % 7 + 1);
            if i % 3 == 0 { &mut a } else { &mut b }.add(g);
            all.add(g);
        }
        a.merge(&b);
        let (x, y) = (a.percentiles(), all.percentiles());
        assert_eq!((x.p50, x.p90, x.p95, x.p99), (y.p50, y.p90, y.p95, y.p99));
        // The sums add in another order.
        assert!((x.mean - y.mean).abs() < 1e-15);
        assert_eq!(a.count(), 100);
    }

    #[test]
    fn odd_gaps_are_skipped_and_an_empty_histogram_is_zeros() {
        let mut h = ItlHistogram::default();
        h.add(f64::NAN);
        h.add(-1.0);
        assert!(!h.percentiles().measured());
        h.add(0.0);
        h.add(1e9);
        let p = h.percentiles();
        assert_eq!((p.p50, p.p99), (0.0, 1e9));
    }
}
