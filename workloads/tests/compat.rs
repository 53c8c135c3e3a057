//! Today's synthetic and trace workloads generate exactly the requests they generated before
//! requests gained token identity (prefix segments, output segments, follow-ups).
//!
//! Each digest is FNV-1a 64 over every request's `id`, `arrival_s` bits, `prompt_tokens` and
//! `output_tokens` (little-endian), computed here rather than with the crate's own hash so a
//! change in the crate cannot move both sides. The expected values were computed by this same
//! test on the unmodified generator (commit cc337ed, before `Request` had a prefix) and pasted in.

use kvplan_workloads::{Request, WorkloadConfig, generate, write_csv};

use crate::{fixture, synthetic};

fn fnv(h: &mut u64, bytes: &[u8]) {
    for b in bytes {
        *h ^= u64::from(*b);
        *h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
}

fn digest(r: &[Request]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for q in r {
        fnv(&mut h, &q.id.to_le_bytes());
        fnv(&mut h, &q.arrival_s.to_bits().to_le_bytes());
        fnv(&mut h, &q.prompt_tokens.to_le_bytes());
        fnv(&mut h, &q.output_tokens.to_le_bytes());
    }
    h
}

/// The digest of the trace CSV `write_csv` writes for `r`.
fn csv_digest(r: &[Request]) -> u64 {
    let mut out = Vec::new();
    write_csv(r, &mut out).unwrap();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    fnv(&mut h, &out);
    h
}

#[test]
fn todays_workloads_are_unchanged() {
    let trace = format!("trace:{}", fixture().display());
    let replay = |requests: Option<u64>, qps: Option<f64>, time_scale: Option<f64>, start_s| {
        WorkloadConfig {
            trace: Some(fixture()),
            requests,
            qps,
            time_scale,
            start_s,
            ..Default::default()
        }
        .validate()
        .unwrap()
    };
    // (name, spec, seed, requests, digest of the requests, digest of their CSV)
    let cases = [
        (
            "poisson zipf uniform",
            synthetic(
                "poisson",
                Some(4.0),
                "zipf:512:2048",
                "uniform:16:256",
                2000,
            ),
            7,
            2000,
            4343536624026569676u64,
            16132934222389648728u64,
        ),
        (
            "gamma lognormal zipf",
            synthetic(
                "gamma:3",
                Some(10.0),
                "lognormal:1024:0.8",
                "zipf:1:512:1.2",
                2000,
            ),
            42,
            2000,
            8902301099389925181u64,
            12228035205919950764u64,
        ),
        (
            "all-at-once fixed",
            synthetic("all-at-once", None, "512", "fixed:64", 100),
            1,
            100,
            9825823384213394621u64,
            14035673229356330196u64,
        ),
        (
            "poisson, whole trace rows",
            synthetic("poisson", Some(1.0), &trace, &trace, 500),
            7,
            500,
            4813379982758416470u64,
            3346821289052942543u64,
        ),
        (
            "gamma, trace prompts",
            synthetic("gamma:0.5", Some(1.0), &trace, "uniform:1:8", 500),
            3,
            500,
            13062711426211703683u64,
            15175745628500400111u64,
        ),
        (
            "replay",
            replay(None, None, None, None),
            0,
            5,
            4414813983617251681u64,
            11787513325840881053u64,
        ),
        (
            "replay scaled",
            replay(Some(4), Some(2.0), None, Some(1.0)),
            0,
            4,
            11126225690256200477u64,
            12881206385529152964u64,
        ),
        (
            "replay factor",
            replay(None, None, Some(0.5), None),
            0,
            5,
            13080946747346921665u64,
            6024055857776412275u64,
        ),
    ];
    for (name, spec, seed, n, want, want_csv) in cases {
        let r = generate(&spec, seed).unwrap();
        assert_eq!(r.len(), n, "{name}");
        assert_eq!(digest(&r), want, "{name}: the requests changed");
        assert_eq!(csv_digest(&r), want_csv, "{name}: the CSV bytes changed");
        assert!(
            r.iter()
                .all(|q| q.prefix.is_none() && q.output_segment.is_none() && q.follows.is_none()),
            "{name}: no token identity in today's workloads"
        );
    }
}
