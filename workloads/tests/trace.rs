//! Trace reading and replay: the shipped fixture, and the real Splitwise conversation trace.

use kvplan_workloads::{
    ReplayOptions, TimeScale, Trace, TraceRow, WorkloadConfig, WorkloadSpec, generate,
};

use crate::{fixture, shared_trace};

fn arrivals(r: &[kvplan_workloads::Request]) -> Vec<f64> {
    r.iter().map(|q| q.arrival_s).collect()
}

fn measured_qps(r: &[kvplan_workloads::Request]) -> f64 {
    (r.len() - 1) as f64 / (r[r.len() - 1].arrival_s - r[0].arrival_s)
}

#[test]
fn fixture_reads() {
    let t = Trace::from_path(fixture()).unwrap();
    assert_eq!(t.len(), 5);
    assert_eq!(
        t.rows()[1],
        TraceRow {
            arrived_at: 1.5,
            prompt_tokens: 396,
            output_tokens: 109,
            ..Default::default()
        }
    );
    assert_eq!(t.mean_qps(), Some(0.4));
}

#[test]
fn replay_scales_caps_and_offsets() {
    let t = Trace::from_path(fixture()).unwrap();
    let original = t.replay(&ReplayOptions::default()).unwrap();
    assert_eq!(arrivals(&original), [0.0, 1.5, 1.5, 4.0, 10.0]);
    assert_eq!(
        original.iter().map(|q| q.id).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4]
    );
    assert_eq!(
        (original[4].prompt_tokens, original[4].output_tokens),
        (2048, 1)
    );

    let slow = t
        .replay(&ReplayOptions {
            scale: TimeScale::Factor(2.0),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(arrivals(&slow), [0.0, 3.0, 3.0, 8.0, 20.0]);

    let fast = t
        .replay(&ReplayOptions {
            scale: TimeScale::TargetQps(2.0),
            ..Default::default()
        })
        .unwrap();
    for (got, want) in arrivals(&fast).iter().zip([0.0, 0.3, 0.3, 0.8, 2.0]) {
        assert!((got - want).abs() < 1e-12, "{got} vs {want}");
    }

    let capped = t
        .replay(&ReplayOptions {
            max_requests: Some(2),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(arrivals(&capped), [0.0, 1.5]);

    // Start at trace time 1.0: rows from 1.5 on, t = 0 at trace time 1.0.
    let late = t
        .replay(&ReplayOptions {
            start_s: 1.0,
            max_requests: Some(3),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(arrivals(&late), [0.5, 0.5, 3.0]);
    assert_eq!(late[0].id, 0);
    assert_eq!(late[0].prompt_tokens, 396);

    // Rate scaling measures the rate of the replayed rows only: 1.5..10 over 3 gaps.
    let r = t
        .replay(&ReplayOptions {
            start_s: 1.0,
            scale: TimeScale::TargetQps(1.0),
            ..Default::default()
        })
        .unwrap();
    assert!((measured_qps(&r) - 1.0).abs() < 1e-12, "{r:?}");
}

#[test]
fn replay_through_the_config() {
    let config: WorkloadConfig = toml::from_str(&format!(
        "trace = '{}'\nrequests = 3\ntime_scale = 0.5\nseed = 4",
        fixture().display()
    ))
    .unwrap();
    let spec = config.validate().unwrap();
    assert!(matches!(spec, WorkloadSpec::Replay { .. }));
    let r = generate(&spec, config.seed()).unwrap();
    assert_eq!(arrivals(&r), [0.0, 0.75, 0.75]);
    // Replay ignores the seed.
    assert_eq!(r, generate(&spec, 12345).unwrap());
}

/// The real Splitwise conversation trace in the repository's `data/traces/`.
#[test]
fn splitwise_conv_replays() {
    let path = shared_trace("splitwise_conv.csv");
    let t = Trace::from_path(&path).unwrap();
    assert_eq!(t.len(), 19_366);
    let first: Vec<_> = t.rows()[..3]
        .iter()
        .map(|r| (r.arrived_at, r.prompt_tokens, r.output_tokens))
        .collect();
    assert_eq!(
        first,
        [(0.0, 374, 44), (4.314579, 396, 109), (4.541877, 879, 55)]
    );

    for qps in [1.0, 5.0, 40.0] {
        let r = t
            .replay(&ReplayOptions {
                scale: TimeScale::TargetQps(qps),
                max_requests: Some(10_000),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(r.len(), 10_000);
        let got = measured_qps(&r);
        assert!(
            (got - qps).abs() <= 0.01 * qps,
            "target {qps} req/s, got {got}"
        );
        assert!(r.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
    }

    // Resampling its lengths with synthetic arrivals.
    let src = format!("trace:{}", path.display());
    let spec = WorkloadConfig {
        arrivals: Some("poisson".into()),
        qps: Some(5.0),
        prompt_lengths: Some(src.clone()),
        output_lengths: Some(src),
        requests: Some(1000),
        ..Default::default()
    }
    .validate()
    .unwrap();
    let r = generate(&spec, 1).unwrap();
    assert_eq!(r.len(), 1000);
    assert!(r.iter().all(|q| {
        t.rows()
            .iter()
            .any(|row| row.prompt_tokens == q.prompt_tokens)
    }));
}

#[test]
fn toml_workload_table_parses() {
    #[derive(serde::Deserialize)]
    struct Scenario {
        workload: WorkloadConfig,
    }
    let s: Scenario = toml::from_str(
        r#"
[workload]
arrivals = "gamma:2"
qps = 8.0
prompt_lengths = "zipf:512:2048"
output_lengths = "lognormal:128:0.8"
requests = 100
seed = 7
"#,
    )
    .unwrap();
    assert_eq!(s.workload.seed(), 7);
    let r = generate(&s.workload.validate().unwrap(), s.workload.seed()).unwrap();
    assert_eq!(r.len(), 100);
    let text = toml::to_string(&s.workload).unwrap();
    let back: WorkloadConfig = toml::from_str(&text).unwrap();
    assert_eq!(back, s.workload);
}
