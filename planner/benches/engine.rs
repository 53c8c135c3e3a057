//! The discrete-event engine's speed on planned schedules (here, not in `kvplan-sim`, because it
//! needs the planner to make them).
//!
//! - "engine throughput": `kvplan_sim::run` on a precomputed schedule and durations, reported
//!   as ops/s (target: at least 5 M ops/s on one core). Two schedules: the OPT-30B
//!   column-by-column KVPR generation (batch 32 x 8 GPU batches, prompt 512, 128 tokens, weights
//!   offloaded) and a smaller OPT-6.7B row-by-row one (batch 64, prompt 512, 32 tokens, weights
//!   resident).
//! - "opt30b column generation: plan + simulate": `plan::plan` and `kvplan_sim::simulate` of
//!   that OPT-30B schedule end to end (target: at most 50 ms).
//!
//! Run: `cargo bench -p kvplan-planner --bench engine`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use kvplan_planner::plan::{Options, Shape, Strategy, WeightsPlacement, plan};
use kvplan_sim::EngineMap;
use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec, Schedule};

/// A100 PCIe 4.0 with 1 TiB of host RAM: the OPT-30B column schedule keeps ~400 GB of KV cache,
/// activations and weights on the host, more than the preset's 256 GiB.
fn big_host_a100() -> HardwareProfile {
    HardwareProfile::from_toml_str(
        "base = \"a100-40g-pcie4\"\n[host]\nram_gib = 1024.0\n",
        "bench",
    )
    .unwrap()
}

const OPT30B_COLUMN: Shape = Shape {
    batch: 32,
    gpu_batches: 8,
    prompt: 512,
    gen_len: 128,
};

fn opt30b_options() -> Options {
    Options {
        weights: WeightsPlacement::Offload,
        ..Options::default()
    }
}

/// `(name, schedule, cost model)` of the benchmarked schedules.
fn schedules() -> Vec<(&'static str, Schedule, CostModel)> {
    let hw = big_host_a100();
    let cost = CostModel::new(&hw);
    let m = ModelSpec::preset("opt-30b").unwrap();
    let big = plan(
        &m,
        &hw,
        &cost,
        &OPT30B_COLUMN,
        Strategy::KVPR,
        &opt30b_options(),
    )
    .unwrap();
    let m = ModelSpec::preset("opt-6.7b").unwrap();
    let small = plan(
        &m,
        &hw,
        &cost,
        &Shape {
            batch: 64,
            gpu_batches: 1,
            prompt: 512,
            gen_len: 32,
        },
        Strategy::KVPR,
        &Options {
            weights: WeightsPlacement::Gpu,
            ..Options::default()
        },
    )
    .unwrap();
    vec![
        ("opt-30b kvpr 32x8 p512 g128", big.schedule, cost.clone()),
        ("opt-6.7b kvpr 64x1 p512 g32", small.schedule, cost),
    ]
}

fn engine_throughput(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine throughput");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    for (name, schedule, cost) in schedules() {
        let durations: Vec<f64> = schedule
            .ops()
            .iter()
            .map(|o| cost.duration(&o.kind))
            .collect();
        let engines = EngineMap::for_link(&schedule, cost.duplex());
        group.throughput(Throughput::Elements(schedule.len() as u64));
        group.bench_with_input(
            BenchmarkId::new("run", format!("{name} ({} ops)", schedule.len())),
            &(schedule, durations, engines),
            |b, (s, d, e)| b.iter(|| kvplan_sim::run(black_box(s), black_box(d), e).unwrap()),
        );
    }
    group.finish();
}

fn plan_and_simulate(c: &mut Criterion) {
    let hw = big_host_a100();
    let cost = CostModel::new(&hw);
    let m = ModelSpec::preset("opt-30b").unwrap();
    let opts = opt30b_options();
    let mut group = c.benchmark_group("opt30b column generation: plan + simulate");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    group.bench_function("48 layers x 128 steps x 8 GPU batches", |b| {
        b.iter(|| {
            let p = plan(
                &m,
                &hw,
                &cost,
                black_box(&OPT30B_COLUMN),
                Strategy::KVPR,
                &opts,
            )
            .unwrap();
            kvplan_sim::simulate(&p.schedule, &cost).unwrap()
        })
    });
    group.finish();
}

criterion_group!(benches, engine_throughput, plan_and_simulate);
criterion_main!(benches);
