//! `diurnal:PEAK:TROUGH:PERIOD` arrivals: the hourly counts follow the sinusoid (trough at
//! t = 0, peak at PERIOD/2), the count defaults to one period, and bad shapes name the field.

use kvplan_workloads::{Arrivals, WorkloadConfig, WorkloadSpec, generate};

use crate::validate_err;

fn diurnal(spec: &str, requests: Option<u64>) -> WorkloadConfig {
    WorkloadConfig {
        arrivals: Some(spec.into()),
        prompt_lengths: Some("64".into()),
        output_lengths: Some("16".into()),
        requests,
        ..Default::default()
    }
}

/// Expected arrivals in `[a, b)` of the rate `m - amp cos(2πt/P)`.
fn expected(m: f64, amp: f64, p: f64, a: f64, b: f64) -> f64 {
    let w = std::f64::consts::TAU / p;
    m * (b - a) - amp / w * ((w * b).sin() - (w * a).sin())
}

#[test]
fn hourly_counts_follow_the_shape() {
    // 2 req/s at the peak, 0.2 at the trough, over a day: 95,040 requests on average.
    let spec = diurnal("diurnal:2:0.2:24h", None).validate().unwrap();
    let WorkloadSpec::Synthetic(s) = &spec else {
        panic!("{spec:?}")
    };
    assert_eq!(s.requests, 95_040, "one period at the mean rate 1.1 req/s");
    let reqs = generate(&spec, 7).unwrap();
    let mut bins = [0u64; 24];
    for r in &reqs {
        let h = (r.arrival_s / 3600.0) as usize;
        if h < 24 {
            bins[h] += 1;
        }
    }
    for (h, &got) in bins.iter().enumerate() {
        let want = expected(
            1.1,
            0.9,
            86_400.0,
            h as f64 * 3600.0,
            (h + 1) as f64 * 3600.0,
        );
        // Poisson: standard deviation sqrt(want); allow 4 of them (the last hours also lose the
        // requests past the count, at most a few standard deviations of the total).
        let tol = 4.0 * want.sqrt() + if h >= 22 { 4.0 * 95_040f64.sqrt() } else { 0.0 };
        assert!(
            (got as f64 - want).abs() <= tol,
            "hour {h}: {got} arrivals, expected {want:.0} ± {tol:.0}"
        );
    }
    // The trough hours hold far fewer than the peak hours.
    assert!(bins[0] * 5 < bins[12], "{bins:?}");
    // Deterministic.
    assert_eq!(reqs, generate(&spec, 7).unwrap());
}

#[test]
fn a_given_count_wins_and_periods_take_units() {
    let spec = diurnal("diurnal:4:1:30m", Some(100)).validate().unwrap();
    let WorkloadSpec::Synthetic(s) = &spec else {
        panic!("{spec:?}")
    };
    assert_eq!(s.requests, 100);
    assert_eq!(
        s.arrivals,
        Arrivals::Diurnal {
            peak: 4.0,
            trough: 1.0,
            period_s: 1800.0
        }
    );
    for (p, secs) in [
        ("86400s", 86_400.0),
        ("24h", 86_400.0),
        ("1d", 86_400.0),
        ("90", 90.0),
    ] {
        let spec = diurnal(&format!("diurnal:1:1:{p}"), None)
            .validate()
            .unwrap();
        let WorkloadSpec::Synthetic(s) = &spec else {
            panic!()
        };
        assert_eq!(s.requests, secs as u64, "{p}");
    }
}

#[test]
fn bad_shapes_name_the_field() {
    for (toml, words) in [
        (
            "arrivals = \"diurnal:1:2:24h\"\nprompt_lengths = \"8\"",
            &["arrivals", "PEAK = 1 < TROUGH = 2"][..],
        ),
        (
            "arrivals = \"diurnal:2:0:24h\"\nprompt_lengths = \"8\"",
            &["arrivals", "TROUGH = 0"],
        ),
        (
            "arrivals = \"diurnal:2:1:0h\"\nprompt_lengths = \"8\"",
            &["arrivals", "PERIOD"],
        ),
        (
            "arrivals = \"diurnal:2:1\"\nprompt_lengths = \"8\"",
            &["arrivals", "diurnal:PEAK:TROUGH:PERIOD"],
        ),
        (
            "arrivals = \"diurnal:2:1:24x\"\nprompt_lengths = \"8\"",
            &["arrivals", "unit"],
        ),
        (
            "arrivals = \"diurnal:2:1:24h\"\nqps = 3.0\nprompt_lengths = \"8\"",
            &["qps", "diurnal"],
        ),
    ] {
        let e = validate_err(toml);
        for w in words {
            assert!(e.contains(w), "{toml}: {e} should say {w}");
        }
        assert!(!e.contains('\n'), "one line: {e}");
    }
}
