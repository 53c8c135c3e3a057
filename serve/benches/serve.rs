//! 10,000 and 100,000 requests of the Splitwise conversation trace (tiled past its end) on
//! llama-2-7b / a100-80g-sxm with prefill-first scheduling.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kvplan_planner::{HardwareProfile, ModelSpec};
use kvplan_serve::{Config, simulate};
use kvplan_workloads::Request;

/// `arrived_at,num_prefill_tokens,num_decode_tokens` rows, tiled (shifted by the trace's span)
/// until `n` requests.
fn trace(n: usize) -> Vec<Request> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/traces/splitwise_conv.csv"
    );
    let text = std::fs::read_to_string(path)
        .or_else(|_| std::fs::read_to_string("/work/shared/traces/splitwise_conv.csv"))
        .expect("splitwise_conv.csv");
    let rows: Vec<(f64, u32, u32)> = text
        .lines()
        .skip(1)
        .filter_map(|l| {
            let mut f = l.split(',');
            Some((
                f.next()?.trim().parse().ok()?,
                f.next()?.trim().parse().ok()?,
                f.next()?.trim().parse().ok()?,
            ))
        })
        .collect();
    let span = rows.last().map_or(0.0, |r| r.0) + 1.0;
    (0..n)
        .map(|i| {
            let (t, p, o) = rows[i % rows.len()];
            Request {
                id: i as u64,
                arrival_s: t + span * (i / rows.len()) as f64,
                prompt_tokens: p,
                output_tokens: o,
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let model = ModelSpec::preset("llama-2-7b").unwrap();
    let hw = HardwareProfile::preset("a100-80g-sxm").unwrap();
    let cfg = Config::default();
    let mut g = c.benchmark_group("serve");
    g.sample_size(10);
    for n in [10_000usize, 100_000] {
        let reqs = trace(n);
        g.bench_function(format!("splitwise_conv_{n}"), |b| {
            b.iter(|| black_box(simulate(&model, &hw, &cfg, black_box(&reqs)).unwrap()))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
