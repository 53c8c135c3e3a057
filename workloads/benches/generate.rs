//! Generation speed: 100,000 Poisson + Zipf requests, 100,000 shared-prefix requests (11 groups ×
//! 4 users, and 1,000 × 100), about 100,000 conversation turns, and reading and replaying the
//! Splitwise conversation trace (19,366 rows).

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kvplan_workloads::{
    ConversationConfig, ReplayOptions, SharedPrefixConfig, TimeScale, Trace, Workload,
    WorkloadConfig,
};

fn generate(c: &mut Criterion) {
    let spec = WorkloadConfig {
        arrivals: Some("poisson".into()),
        qps: Some(10.0),
        prompt_lengths: Some("zipf:512:2048".into()),
        output_lengths: Some("zipf:16:512".into()),
        requests: Some(100_000),
        ..Default::default()
    }
    .validate()
    .unwrap();
    let w = Workload::new(&spec).unwrap();
    let mut g = c.benchmark_group("generate");
    g.throughput(Throughput::Elements(100_000));
    g.bench_function("poisson_zipf_100k", |b| {
        b.iter(|| black_box(w.generate(black_box(1))))
    });
    for (groups, users) in [(11, 4), (1000, 100)] {
        let spec = WorkloadConfig {
            arrivals: Some("poisson".into()),
            qps: Some(10.0),
            output_lengths: Some("300".into()),
            requests: Some(100_000),
            shared_prefix: Some(SharedPrefixConfig {
                groups: Some(groups),
                users_per_group: Some(users),
                system_prompt_len: Some("100".into()),
                question_len: Some("uniform:100:900".into()),
            }),
            ..Default::default()
        }
        .validate()
        .unwrap();
        let w = Workload::new(&spec).unwrap();
        g.bench_function(format!("shared_prefix_{groups}x{users}_100k"), |b| {
            b.iter(|| black_box(w.generate(black_box(1))))
        });
    }
    let spec = WorkloadConfig {
        arrivals: Some("poisson".into()),
        qps: Some(10.0),
        output_lengths: Some("lognormal:200:0.6:2048".into()),
        conversation: Some(ConversationConfig {
            conversations: Some(20_000),
            turns: Some("uniform:1:9".into()),
            first_message_len: Some("lognormal:400:0.8:4096".into()),
            message_len: Some("lognormal:60:0.8:1024".into()),
            think_time_s: Some("exp:5".into()),
            max_context: None,
        }),
        ..Default::default()
    }
    .validate()
    .unwrap();
    let w = Workload::new(&spec).unwrap();
    g.bench_function("conversation_20k_x_1to9_turns", |b| {
        b.iter(|| black_box(w.generate(black_box(1))))
    });
    g.finish();
}

fn trace(c: &mut Criterion) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/traces/splitwise_conv.csv");
    let bytes = std::fs::read(&path).unwrap();
    let rows = Trace::from_reader(bytes.as_slice(), "splitwise_conv.csv")
        .unwrap()
        .len();
    let mut g = c.benchmark_group("trace");
    g.throughput(Throughput::Elements(rows as u64));
    g.bench_function("parse_splitwise_conv", |b| {
        b.iter(|| {
            black_box(
                Trace::from_reader(black_box(bytes.as_slice()), "splitwise_conv.csv").unwrap(),
            )
        })
    });
    g.bench_function("read_and_replay_splitwise_conv_at_5qps", |b| {
        let opts = ReplayOptions {
            scale: TimeScale::TargetQps(5.0),
            ..Default::default()
        };
        b.iter(|| black_box(Trace::from_path(&path).unwrap().replay(&opts).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, generate, trace);
criterion_main!(benches);
