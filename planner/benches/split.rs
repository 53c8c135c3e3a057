//! One KVPR split decision: `SplitProblem::solve()` (LP plus exact integer rounding) for
//! OPT-6.7B, batch 64, A100 PCIe 4.0, weights resident, pinned host memory, at three context
//! lengths. Target (issue): at most 20 us per decision.
//!
//! Also the whole per-step search on the simulated schedule (`kvpr split search`).
//!
//! Run: `cargo bench -p kvplan-planner --bench split`.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kvplan_planner::plan::{Shape, SplitModel, SplitPolicy, kvpr_splits, split_problem};
use kvplan_vocab::schedule::HostMemory;
use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};

fn split_decision(c: &mut Criterion) {
    let model = ModelSpec::preset("opt-6.7b").unwrap();
    let hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
    let cost = CostModel::new(&hw);
    let mut group = c.benchmark_group("one split decision");
    group
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    for seq_len in [256u32, 1024, 4096] {
        // Decode step 1 attends over exactly `prompt` cached tokens: s' = prompt.
        let shape = Shape {
            batch: 64,
            gpu_batches: 1,
            prompt: seq_len,
            gen_len: 2,
        };
        let problem = split_problem(
            &cost,
            &model,
            &shape,
            true,
            kvplan_vocab::host::MemoryKinds::uniform(HostMemory::Pinned),
            1,
            SplitModel::Schedule,
        );
        assert_eq!(problem.seq_len, seq_len);
        group.bench_with_input(
            BenchmarkId::new("opt-6.7b b64 a100-40g-pcie4", format!("s'={seq_len}")),
            &problem,
            |b, p| b.iter(|| black_box(p).solve().unwrap()),
        );
    }
    group.finish();
}

/// Every decode step's split chosen on the simulated schedule (`kvpr_splits`, the default
/// `--split-model schedule`): the README scenario (32 steps, all searched through 12 anchors) and
/// the OPT-30B throughput shape (8 GPU batches, weights offloaded).
fn split_search(c: &mut Criterion) {
    let mut group = c.benchmark_group("kvpr split search");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let cases = [
        ("opt-6.7b", "a100-40g-pcie4", 64, 1, 128, 32, true),
        ("opt-30b", "a100-40g-pcie4", 32, 8, 512, 32, false),
    ];
    for (m, h, batch, k, prompt, gen_len, weights_on_gpu) in cases {
        let model = ModelSpec::preset(m).unwrap();
        let hw = HardwareProfile::preset(h).unwrap();
        let cost = CostModel::new(&hw);
        let shape = Shape {
            batch,
            gpu_batches: k,
            prompt,
            gen_len,
        };
        group.bench_function(
            BenchmarkId::new(m, format!("b{batch}x{k} p{prompt} g{gen_len}")),
            |b| {
                b.iter(|| {
                    kvpr_splits(
                        &cost,
                        &model,
                        black_box(&shape),
                        weights_on_gpu,
                        kvplan_vocab::host::MemoryKinds::uniform(HostMemory::Pinned),
                        SplitPolicy::Auto,
                        SplitModel::Schedule,
                    )
                    .unwrap()
                })
            },
        );
    }
    group.finish();
}

criterion_group!(benches, split_decision, split_search);
criterion_main!(benches);
