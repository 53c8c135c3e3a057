//! The KV-Runahead partition for P = 8 devices and a 128K-token context: `optimise` (the best
//! partition for every device count 1..=8) on llama-2-7b, a100-80g-sxm, over NVLink and over a
//! 10 GB/s link; and the whole plan (partition, baselines, schedule, memory) on an H200, where
//! the 128K context's KV cache fits. Target (issue): at most 50 ms per partition.
//!
//! And P = 64 (`kvplan plan runahead --model llama-2-7b --hardware h200 --devices 64 --context
//! 131072`): the partitions of every count (`optimise`, and `optimise_for_choice`, the plan's
//! pruned search), and the whole plan, which also simulates every count's partition on the
//! engine. Target (issue): the CLI under 1 s (it took ~11 s before the construction).
//!
//! Run: `cargo bench -p kvplan-planner --bench runahead` (`-- 'P=64'` for the second part).

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kvplan_planner::plan::{Options, Shape, Strategy, plan};
use kvplan_planner::runahead::{
    self, LinkOverride, ModelCosts, RunaheadOptions, optimise, optimise_for_choice,
};
use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};

const CONTEXT: u32 = 128 * 1024;
const DEVICES: u32 = 8;

fn partition(c: &mut Criterion) {
    let model = ModelSpec::preset("llama-2-7b").unwrap();
    let hw = HardwareProfile::preset("a100-80g-sxm").unwrap();
    let mut group = c.benchmark_group("runahead partition P=8 128K");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(5));
    for gbps in [None, Some(10.0)] {
        let link = LinkOverride {
            gbps,
            latency_us: None,
        };
        let cost = CostModel::new(&runahead::with_link_override(&hw, &link).unwrap());
        let costs = ModelCosts::new(&model, &cost, 1);
        let label = match gbps {
            None => "nvlink 300 GB/s".to_string(),
            Some(g) => format!("{g} GB/s"),
        };
        group.bench_with_input(
            BenchmarkId::new("llama-2-7b a100-80g-sxm", label),
            &costs,
            |b, costs| b.iter(|| black_box(optimise(black_box(costs), CONTEXT, DEVICES))),
        );
    }
    group.finish();

    bench_plan(
        c,
        "runahead plan P=8 128K",
        "llama-2-7b h200 (partition, baselines, schedule)",
        DEVICES,
        20,
    );
}

/// The whole KV-Runahead plan of llama-2-7b on an H200 with `devices` offered, 128K tokens.
fn bench_plan(c: &mut Criterion, group_name: &str, name: &str, devices: u32, samples: usize) {
    let model = ModelSpec::preset("llama-2-7b").unwrap();
    let hw = HardwareProfile::preset("h200").unwrap();
    let cost = CostModel::new(&hw);
    let shape = Shape {
        batch: 1,
        gpu_batches: 1,
        prompt: CONTEXT,
        gen_len: 1,
    };
    let options = Options::default().with(RunaheadOptions { devices });
    let mut group = c.benchmark_group(group_name);
    group
        .sample_size(samples)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(if devices > 8 { 10 } else { 5 }));
    group.bench_function(name, |b| {
        b.iter(|| {
            black_box(
                plan(
                    &model,
                    &hw,
                    &cost,
                    &shape,
                    Strategy::RUNAHEAD,
                    black_box(&options),
                )
                .unwrap(),
            )
        })
    });
    group.finish();
}

/// The CLI case `kvplan plan runahead --model llama-2-7b --hardware h200 --devices 64 --context
/// 131072`: the partitions of every count, and the whole plan with 64 devices offered.
fn plan_64(c: &mut Criterion) {
    let model = ModelSpec::preset("llama-2-7b").unwrap();
    let hw = HardwareProfile::preset("h200").unwrap();
    let cost = CostModel::new(&hw);
    // A fresh `ModelCosts` per run, as the plan makes one (its memo starts empty).
    let mut group = c.benchmark_group("runahead partition P=64 128K");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(100))
        .measurement_time(Duration::from_secs(5));
    group.bench_function("llama-2-7b h200 optimise", |b| {
        b.iter(|| {
            let costs = ModelCosts::new(&model, &cost, 1);
            black_box(optimise(black_box(&costs), CONTEXT, 64))
        })
    });
    group.bench_function("llama-2-7b h200 optimise_for_choice", |b| {
        b.iter(|| {
            let costs = ModelCosts::new(&model, &cost, 1);
            black_box(optimise_for_choice(
                black_box(&costs),
                CONTEXT,
                64,
                runahead::DEVICE_TOLERANCE,
            ))
        })
    });
    group.finish();

    bench_plan(c, "runahead plan P=64 128K", "llama-2-7b h200", 64, 10);
}

criterion_group!(benches, partition, plan_64);
criterion_main!(benches);
