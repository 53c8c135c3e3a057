//! Statistical checks of the generators, each with its tolerance stated. Seeds are fixed, so
//! these are deterministic; the tolerances are several standard errors wide.

use kvplan_workloads::{Request, generate};

use crate::{fixture, synthetic};

const N: u64 = 20_000;

fn gaps(r: &[Request]) -> Vec<f64> {
    r.windows(2)
        .map(|w| w[1].arrival_s - w[0].arrival_s)
        .collect()
}

fn mean_cv(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt() / mean)
}

fn within(got: f64, want: f64, rel: f64, what: &str) {
    assert!(
        (got - want).abs() <= rel * want.abs(),
        "{what}: expected {want} within {}%, got {got}",
        rel * 100.0
    );
}

/// Poisson: mean inter-arrival 1/qps within 5%, CV 1 within 5%, over 20k samples.
#[test]
fn poisson_mean_gap_is_one_over_qps() {
    for (qps, seed) in [(0.5, 1), (4.0, 2), (250.0, 3)] {
        let r = generate(&synthetic("poisson", Some(qps), "1", "1", N), seed).unwrap();
        let (mean, cv) = mean_cv(&gaps(&r));
        within(
            mean,
            1.0 / qps,
            0.05,
            &format!("poisson qps {qps} mean gap"),
        );
        within(cv, 1.0, 0.05, &format!("poisson qps {qps} gap CV"));
    }
}

/// Gamma: CV of inter-arrival times within 10% of the target, mean 1/qps within 5% (CV ≤ 2)
/// or 10% (CV 4, whose sample mean varies more), over 20k samples.
#[test]
fn gamma_cv_and_mean_match() {
    for (cv, mean_tol, seed) in [
        (0.5, 0.05, 4),
        (1.0, 0.05, 5),
        (2.0, 0.05, 6),
        (4.0, 0.10, 7),
    ] {
        let spec = synthetic(&format!("gamma:{cv}"), Some(8.0), "1", "1", N);
        let (mean, got_cv) = mean_cv(&gaps(&generate(&spec, seed).unwrap()));
        within(
            mean,
            1.0 / 8.0,
            mean_tol,
            &format!("gamma cv {cv} mean gap"),
        );
        within(got_cv, cv, 0.10, &format!("gamma cv {cv} CV"));
    }
}

/// Exact mean of Zipf over lo..=hi with exponent theta, value lo + r - 1 at rank r.
fn zipf_mean(lo: u32, hi: u32, theta: f64) -> f64 {
    let (mut z, mut s) = (0.0, 0.0);
    for r in 1..=(hi - lo + 1) {
        let w = f64::from(r).powf(-theta);
        z += w;
        s += w * f64::from(lo + r - 1);
    }
    s / z
}

/// Zipf: LO is the most frequent value, the first ranks' frequencies fall, every value in
/// range, mean within 3% of the exact mean (theta 1.0 and 1.2; theta 0 is uniform).
#[test]
fn zipf_favours_lo_and_has_the_expected_mean() {
    for (spec, lo, hi, theta) in [
        ("zipf:512:2048", 512, 2048, 1.0),
        ("zipf:512:2048:1.2", 512, 2048, 1.2),
        ("zipf:1:100:0", 1, 100, 0.0),
    ] {
        let r = generate(&synthetic("all-at-once", None, spec, "1", N), 11).unwrap();
        let mut counts = vec![0u32; (hi - lo + 1) as usize];
        for q in &r {
            assert!(
                (lo..=hi).contains(&q.prompt_tokens),
                "{spec}: {}",
                q.prompt_tokens
            );
            counts[(q.prompt_tokens - lo) as usize] += 1;
        }
        let mean = r.iter().map(|q| f64::from(q.prompt_tokens)).sum::<f64>() / N as f64;
        within(
            mean,
            zipf_mean(lo, hi, theta),
            0.03,
            &format!("{spec} mean"),
        );
        if theta > 0.0 {
            let max = *counts.iter().max().unwrap();
            assert_eq!(counts[0], max, "{spec}: LO must be the most frequent");
            assert!(
                counts[0] > counts[1] && counts[1] > counts[3] && counts[3] > counts[15],
                "{spec}: {:?}",
                &counts[..16]
            );
            // P(LO) = 1 / H(n, theta): within 10%.
            let h: f64 = (1..=(hi - lo + 1)).map(|r| f64::from(r).powf(-theta)).sum();
            within(
                f64::from(counts[0]) / N as f64,
                1.0 / h,
                0.10,
                &format!("{spec} P(LO)"),
            );
        }
    }
}

/// Lognormal: sample median within 3% of MEDIAN; clamping keeps values in 1..=MAX.
#[test]
fn lognormal_median_and_clamp() {
    for (median, sigma) in [(1024.0, 0.8), (128.0, 0.3), (40.0, 1.5)] {
        let spec = format!("lognormal:{median}:{sigma}");
        let r = generate(&synthetic("all-at-once", None, "1", &spec, N), 13).unwrap();
        let mut v: Vec<u32> = r.iter().map(|q| q.output_tokens).collect();
        v.sort_unstable();
        within(
            f64::from(v[v.len() / 2]),
            median,
            0.03,
            &format!("{spec} median"),
        );
    }
    let r = generate(
        &synthetic("all-at-once", None, "lognormal:1000:3:2000", "1", N),
        17,
    )
    .unwrap();
    assert!(r.iter().all(|q| (1..=2000).contains(&q.prompt_tokens)));
    assert!(r.iter().any(|q| q.prompt_tokens == 2000) && r.iter().any(|q| q.prompt_tokens == 1));
}

/// Uniform: within LO..=HI, both ends reached, mean (LO+HI)/2 within 2%.
#[test]
fn uniform_range_and_mean() {
    let r = generate(
        &synthetic("all-at-once", None, "uniform:128:1024", "1", N),
        19,
    )
    .unwrap();
    assert!(r.iter().all(|q| (128..=1024).contains(&q.prompt_tokens)));
    assert!(r.iter().any(|q| q.prompt_tokens == 128) && r.iter().any(|q| q.prompt_tokens == 1024));
    let mean = r.iter().map(|q| f64::from(q.prompt_tokens)).sum::<f64>() / N as f64;
    within(mean, 576.0, 0.02, "uniform:128:1024 mean");
}

/// Resampling a trace: every value comes from the trace's column; with the same file for both
/// lengths, every (prompt, output) pair is one of the trace's rows, and each row turns up.
#[test]
fn trace_resampling_draws_from_the_trace() {
    let t = kvplan_workloads::Trace::from_path(fixture()).unwrap();
    let rows: Vec<(u32, u32)> = t
        .rows()
        .iter()
        .map(|r| (r.prompt_tokens, r.output_tokens))
        .collect();
    let path = format!("trace:{}", fixture().display());
    let joint = generate(&synthetic("poisson", Some(1.0), &path, &path, 5000), 23).unwrap();
    for q in &joint {
        assert!(rows.contains(&(q.prompt_tokens, q.output_tokens)), "{q:?}");
    }
    for row in &rows {
        assert!(
            joint
                .iter()
                .any(|q| (q.prompt_tokens, q.output_tokens) == *row),
            "{row:?}"
        );
    }
    let prompts_only = generate(&synthetic("poisson", Some(1.0), &path, "7", 5000), 23).unwrap();
    assert!(
        prompts_only
            .iter()
            .all(|q| rows.iter().any(|r| r.0 == q.prompt_tokens) && q.output_tokens == 7)
    );
}
