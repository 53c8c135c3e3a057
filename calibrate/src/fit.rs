//! Fitting measurements into the profile's kernel models.

use kvplan_vocab::calibration::{Curve, KernelFit};

use crate::error::Error;

/// Least squares `t = a + c x` with `a >= 0` and `c > 0`. Falls back to a line through the origin
/// when the intercept comes out negative, and to the median `t / x` when the slope is not
/// positive (too few or too noisy points).
pub fn line(points: &[(f64, f64)]) -> Option<(f64, f64)> {
    let pts: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|(x, t)| x.is_finite() && t.is_finite() && *x > 0.0 && *t > 0.0)
        .collect();
    if pts.is_empty() {
        return None;
    }
    let n = pts.len() as f64;
    let (sx, st) = pts.iter().fold((0.0, 0.0), |(a, b), (x, t)| (a + x, b + t));
    let (mx, mt) = (sx / n, st / n);
    let (sxx, sxt) = pts.iter().fold((0.0, 0.0), |(a, b), (x, t)| {
        (a + (x - mx) * (x - mx), b + (x - mx) * (t - mt))
    });
    let mut c = if sxx > 0.0 { sxt / sxx } else { 0.0 };
    let mut a = mt - c * mx;
    if a < 0.0 {
        a = 0.0;
        let (xx, xt) = pts
            .iter()
            .fold((0.0, 0.0), |(p, q), (x, t)| (p + x * x, q + x * t));
        c = xt / xx;
    }
    if c <= 0.0 {
        let mut r: Vec<f64> = pts.iter().map(|(x, t)| t / x).collect();
        r.sort_by(f64::total_cmp);
        c = r[r.len() / 2];
        a = 0.0;
    }
    Some((a, c))
}

/// Memory-bound kernels: `t = overhead + bytes / rate` from `(bytes, seconds)` points.
pub fn elementwise(points: &[(f64, f64)]) -> Result<KernelFit, Error> {
    let (a, c) = line(points).ok_or_else(|| Error::Fit {
        what: "elementwise kernels".into(),
        why: "no positive measurements".into(),
    })?;
    Ok(KernelFit {
        overhead_us: a * 1e6,
        tflops: 0.0,
        gbps: 1.0 / c / 1e9,
    })
}

/// Attention: `t = overhead + max(flops / flop_rate, bytes / byte_rate)` from
/// `(flops, bytes, seconds, is_prefill)` points. Decode points (one query per sequence, bound by
/// reading K and V) fix the overhead and byte rate; causal prefill points (compute-bound) fix the
/// FLOP rate, net of the overhead.
pub fn attention(points: &[(f64, f64, f64, bool)]) -> Result<KernelFit, Error> {
    let fail = |why: &str| Error::Fit {
        what: "attention".into(),
        why: why.into(),
    };
    let decode: Vec<(f64, f64)> = points.iter().filter(|p| !p.3).map(|p| (p.1, p.2)).collect();
    let prefill: Vec<(f64, f64)> = points.iter().filter(|p| p.3).map(|p| (p.0, p.2)).collect();
    let (a, c_b) = line(&decode).ok_or_else(|| fail("no decode measurements"))?;
    let net: Vec<(f64, f64)> = prefill
        .iter()
        .map(|(f, t)| (*f, (t - a).max(t * 0.5)))
        .collect();
    let c_f = match line(&net) {
        // Through the origin: the overhead is already removed.
        Some(_) => {
            let (xx, xt) = net
                .iter()
                .fold((0.0, 0.0), |(p, q), (x, t)| (p + x * x, q + x * t));
            xt / xx
        }
        None => return Err(fail("no prefill measurements")),
    };
    Ok(KernelFit {
        overhead_us: a * 1e6,
        tflops: 1.0 / c_f / 1e12,
        gbps: 1.0 / c_b / 1e9,
    })
}

/// Makes a measured curve usable as a table: sizes strictly increasing, times non-decreasing
/// (a later, larger copy measured faster than a smaller one is noise: it takes the running max).
pub fn monotone_curve(mut points: Vec<(u64, f64)>) -> Curve {
    points.sort_by_key(|p| p.0);
    points.dedup_by_key(|p| p.0);
    let mut best = 0.0f64;
    for p in &mut points {
        best = best.max(p.1);
        p.1 = best;
    }
    Curve(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotone_curve_sorts_and_takes_running_max() {
        let c = monotone_curve(vec![(4096, 2e-5), (1024, 1e-5), (16384, 1.5e-5)]);
        assert_eq!(c.0, vec![(1024, 1e-5), (4096, 2e-5), (16384, 2e-5)]);
    }

    #[test]
    fn line_recovers_intercept_and_slope() {
        let pts: Vec<(f64, f64)> = (1..10)
            .map(|i| (f64::from(i) * 1e6, 5e-6 + f64::from(i) * 1e6 / 1e9))
            .collect();
        let (a, c) = line(&pts).unwrap();
        assert!(
            (a - 5e-6).abs() < 1e-12 && (c - 1e-9).abs() < 1e-18,
            "{a} {c}"
        );
        let e = elementwise(&pts).unwrap();
        assert!((e.gbps - 1.0).abs() < 1e-6 && (e.overhead_us - 5.0).abs() < 1e-6);
    }

    #[test]
    fn attention_fit_separates_the_regimes() {
        // overhead 4 us, 500 GB/s memory, 100 TFLOP/s compute.
        let t = |f: f64, b: f64| 4e-6 + (f / 100e12).max(b / 500e9);
        let mut pts = Vec::new();
        for b in [1e6, 1e7, 1e8] {
            pts.push((b * 0.5, b, t(b * 0.5, b), false));
        }
        for f in [1e11, 1e12, 4e12] {
            pts.push((f, 1e6, t(f, 1e6), true));
        }
        let fit = attention(&pts).unwrap();
        assert!((fit.gbps - 500.0).abs() / 500.0 < 1e-6, "{fit:?}");
        assert!((fit.tflops - 100.0).abs() / 100.0 < 1e-6, "{fit:?}");
        assert!((fit.overhead_us - 4.0).abs() < 1e-6, "{fit:?}");
        assert!(attention(&pts[..3]).is_err());
    }

    #[test]
    fn attention_fit_predicts_chunk_after_prefix_points() {
        // Synthetic "measurements" of llama-3-8b head shapes from a known roofline (5 us,
        // 1600 GB/s, 180 TFLOP/s) with a deterministic +-3% wobble: decode, causal prefill, and
        // chunks of c queries after a prefix of P keys (KV-Runahead's per-device attention).
        use kvplan_vocab::schedule::OpKind;
        let truth = |op: &OpKind| 5e-6 + (op.flops() / 180e12).max(op.mem_bytes() / 1600e9);
        let att = |batch, q_len, kv_len, causal| OpKind::Attention {
            batch,
            q_heads: 32,
            kv_heads: 8,
            q_len,
            kv_len,
            head_dim: 128,
            causal,
            dtype: kvplan_vocab::DType::Bf16,
            kv: kvplan_vocab::KvCacheDtype::Auto,
        };
        let mut ops = Vec::new();
        for b in [8, 64] {
            for kv in [256, 2048] {
                ops.push((att(b, 1, kv, false), false));
            }
        }
        for len in [512, 2048] {
            ops.push((att(1, len, len, true), true));
        }
        let chunks: Vec<OpKind> = [(512u32, 4096u32), (512, 16384), (2048, 4096), (2048, 16384)]
            .iter()
            .map(|&(c, p)| att(1, c, p + c, true))
            .collect();
        for op in &chunks {
            ops.push((*op, true));
        }
        let points: Vec<(f64, f64, f64, bool)> = ops
            .iter()
            .enumerate()
            .map(|(i, (op, prefill))| {
                let wobble = 1.0 + 0.03 * [1.0, -1.0, 0.5, -0.5, 0.0][i % 5];
                (op.flops(), op.mem_bytes(), truth(op) * wobble, *prefill)
            })
            .collect();
        let fit = attention(&points).unwrap();
        let predict = |op: &OpKind| {
            fit.overhead_us * 1e-6
                + (op.flops() / (fit.tflops * 1e12)).max(op.mem_bytes() / (fit.gbps * 1e9))
        };
        // Stated tolerance: 6% (the 3% wobble plus the fit's own error).
        for op in &chunks {
            let (p, t) = (predict(op), truth(op));
            assert!((p - t).abs() <= 0.06 * t, "{op:?}: predicted {p} vs {t}");
        }
        assert!((fit.tflops - 180.0).abs() / 180.0 < 0.05, "{fit:?}");
    }
}

/// Minimises `f` over unconstrained `x` with the Nelder–Mead simplex method (reflection 1,
/// expansion 2, contraction 1/2, shrink 1/2), restarted `restarts` times around the best point
/// so far with a fresh simplex of `step` per coordinate. Deterministic: no randomness, and ties
/// keep the earlier vertex. Returns the best point and its value.
pub fn nelder_mead(
    f: &dyn Fn(&[f64]) -> f64,
    x0: &[f64],
    step: f64,
    iterations: usize,
    restarts: usize,
) -> (Vec<f64>, f64) {
    let n = x0.len();
    let mut best = x0.to_vec();
    let mut best_v = f(&best);
    for _ in 0..=restarts {
        let mut simplex: Vec<(Vec<f64>, f64)> = Vec::with_capacity(n + 1);
        simplex.push((best.clone(), best_v));
        for i in 0..n {
            let mut x = best.clone();
            x[i] += step;
            let v = f(&x);
            simplex.push((x, v));
        }
        for _ in 0..iterations {
            simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
            let spread = simplex[n].1 - simplex[0].1;
            if spread.abs() <= 1e-12 * simplex[0].1.abs().max(1e-12) {
                break;
            }
            let centroid: Vec<f64> = (0..n)
                .map(|j| simplex[..n].iter().map(|p| p.0[j]).sum::<f64>() / n as f64)
                .collect();
            let towards = |t: f64| -> Vec<f64> {
                (0..n)
                    .map(|j| centroid[j] + t * (simplex[n].0[j] - centroid[j]))
                    .collect()
            };
            let xr = towards(-1.0);
            let vr = f(&xr);
            if vr < simplex[0].1 {
                let xe = towards(-2.0);
                let ve = f(&xe);
                simplex[n] = if ve < vr { (xe, ve) } else { (xr, vr) };
            } else if vr < simplex[n - 1].1 {
                simplex[n] = (xr, vr);
            } else {
                let (xc, vc) = if vr < simplex[n].1 {
                    let x = towards(-0.5);
                    let v = f(&x);
                    (x, v)
                } else {
                    let x = towards(0.5);
                    let v = f(&x);
                    (x, v)
                };
                if vc < simplex[n].1.min(vr) {
                    simplex[n] = (xc, vc);
                } else {
                    let x0 = simplex[0].0.clone();
                    for p in simplex.iter_mut().skip(1) {
                        for (v, &o) in p.0.iter_mut().zip(&x0) {
                            *v = o + 0.5 * (*v - o);
                        }
                        p.1 = f(&p.0);
                    }
                }
            }
        }
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        if simplex[0].1 < best_v {
            best = simplex[0].0.clone();
            best_v = simplex[0].1;
        }
    }
    (best, best_v)
}

#[cfg(test)]
mod nm_tests {
    use super::*;

    #[test]
    fn nelder_mead_finds_a_quadratic_minimum() {
        let f = |x: &[f64]| (x[0] - 1.0).powi(2) + 10.0 * (x[1] + 2.0).powi(2);
        let (x, v) = nelder_mead(&f, &[0.0, 0.0], 0.5, 500, 1);
        assert!(v < 1e-10 && (x[0] - 1.0).abs() < 1e-4 && (x[1] + 2.0).abs() < 1e-4);
    }
}
