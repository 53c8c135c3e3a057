//! A sweep's throughput: op-level points (planner + simulator) and serving points, on rayon's
//! pool (`RAYON_NUM_THREADS` threads).

use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use kvplan_sweep::{Format, Sweep};

fn run_all(s: &Sweep) -> usize {
    let indices: Vec<u64> = (0..s.len()).collect();
    let mut bytes = 0;
    s.run_ordered(&indices, |r| {
        bytes += s.format_row(&r, Format::Csv).len();
        Ok::<(), ()>(())
    })
    .unwrap();
    bytes
}

fn bench(c: &mut Criterion) {
    let op = Sweep::parse(
        "kind = \"simulate\"\n[base]\nmodel = \"opt-6.7b\"\nhardware = \"a100-40g-pcie4\"\nworkload = { prompt = 128, gen = 8 }\n[axes]\nstrategy = [\"kvpr\", \"full-transfer\"]\n\"workload.batch\" = [8, 16, 32, 64]\n\"offload.host_memory\" = [\"pinned\", \"pageable\"]\n",
        Path::new("bench.toml"),
    )
    .unwrap();
    let serve = Sweep::parse(
        "kind = \"serve\"\n[base]\nmodel = \"llama-2-7b\"\nhardware = \"a100-80g-sxm\"\n[base.workload]\narrivals = \"poisson\"\nprompt_lengths = \"zipf:64:2048\"\noutput_lengths = \"uniform:16:256\"\nrequests = 1000\n[axes]\n\"workload.qps\" = [4, 8]\n\"serve.scheduler\" = [\"prefill-first\", \"chunked\"]\n",
        Path::new("bench.toml"),
    )
    .unwrap();
    let mut g = c.benchmark_group("sweep");
    g.sample_size(10);
    g.throughput(criterion::Throughput::Elements(op.len()));
    g.bench_function("op-level, 16 points", |b| b.iter(|| run_all(&op)));
    g.throughput(criterion::Throughput::Elements(serve.len()));
    g.bench_function("serving, 4 points x 1000 requests", |b| {
        b.iter(|| run_all(&serve))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
