//! `kvplan capacity` for one model x strategy: the binary search on the HeadInfer memory model
//! for Llama-3-8B on the RTX 4090 profile (512 GiB of host RAM for the offloaded KV cache), each
//! of the five strategies. Target (issue): at most 10 ms per model x strategy.
//!
//! Run: `cargo bench -p kvplan-planner --bench capacity`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kvplan_planner::headinfer::{CapacityOptions, MemStrategy, capacity, capacity_report};
use kvplan_vocab::{HardwareProfile, ModelSpec};

fn capacity_search(c: &mut Criterion) {
    let model = ModelSpec::preset("llama-3-8b").unwrap();
    let hw = HardwareProfile::preset("rtx-4090").unwrap();
    let options = CapacityOptions {
        host_ram_bytes: Some(512 << 30),
        ..CapacityOptions::default()
    };
    let mut group = c.benchmark_group("capacity llama-3-8b rtx-4090");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for s in MemStrategy::ALL {
        group.bench_with_input(BenchmarkId::from_parameter(s.as_str()), &s, |b, &s| {
            b.iter(|| capacity(black_box(&model), black_box(&hw), s, black_box(&options)).unwrap())
        });
    }
    // The whole `kvplan capacity` answer (five strategies and the notes).
    group.bench_function("all five (report)", |b| {
        b.iter(|| capacity_report(black_box(&model), black_box(&hw), &[], &options).unwrap())
    });
    group.finish();
}

criterion_group!(benches, capacity_search);
criterion_main!(benches);
