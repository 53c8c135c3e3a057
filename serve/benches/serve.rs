//! 10,000 and 100,000 requests of the Splitwise conversation trace (tiled past its end) on
//! llama-2-7b / a100-80g-sxm: vLLM V1 (chunked prefill, prefix caching, CUDA graphs,
//! asynchronous scheduling, `max_model_len` 4096) and vLLM 0.4's prefill-first engine.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kvplan_serve::{Config, simulate};
use kvplan_vocab::{HardwareProfile, ModelSpec};
use kvplan_workloads::{Request, Trace};

/// The trace's rows, tiled (shifted by the trace's span plus a second) until `n` requests.
fn trace(n: usize) -> Vec<Request> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../data/traces/splitwise_conv.csv"
    );
    let trace = Trace::from_path(path).expect("data/traces/splitwise_conv.csv");
    let rows = trace.rows();
    let span = rows[rows.len() - 1].arrived_at + 1.0;
    (0..n)
        .map(|i| {
            let r = &rows[i % rows.len()];
            Request::new(
                i as u64,
                r.arrived_at + span * (i / rows.len()) as f64,
                r.prompt_tokens,
                r.output_tokens,
            )
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let model = ModelSpec::preset("llama-2-7b").unwrap();
    let hw = HardwareProfile::preset("a100-80g-sxm").unwrap();
    let v1 = Config {
        max_model_len: Some(4096),
        record_timeseries: false,
        ..Config::default()
    };
    let v0 = Config {
        record_timeseries: false,
        ..Config::vllm_v0()
    };
    let mut g = c.benchmark_group("serve");
    g.sample_size(10);
    for n in [10_000usize, 100_000] {
        let reqs = trace(n);
        g.bench_function(format!("splitwise_conv_{n}_vllm_v1_prefix_caching"), |b| {
            b.iter(|| black_box(simulate(&model, &hw, &v1, black_box(&reqs)).unwrap()))
        });
        g.bench_function(format!("splitwise_conv_{n}_vllm_v0"), |b| {
            b.iter(|| black_box(simulate(&model, &hw, &v0, black_box(&reqs)).unwrap()))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
