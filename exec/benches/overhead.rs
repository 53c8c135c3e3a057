//! The CPU backend's own overhead per op.
//!
//! A schedule of N tiny ops (`Elementwise { bytes: 64 }`: 8 f32 in, 8 out) where op `i` runs on
//! stream `i % 3` and depends on op `i - 1`, so every op hands over to another thread; and, for
//! comparison, the same ops on one stream without dependencies. Two figures per schedule, each
//! reported by criterion as time per op:
//! - `gap`: (measured makespan − sum of op durations) / N — what the executor adds between ops
//!   inside the measured timeline (dependency wake-ups, bookkeeping);
//! - `wall`: wall time of `Executor::run` / N — everything, including thread start-up and
//!   turning the measurements into a timeline.
//!
//! `cargo bench -p kvplan-exec --bench overhead`

use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use kvplan_exec::{BackendKind, ExecOptions};
use kvplan_vocab::schedule::{
    ElemKind, OpId, OpKind, Phase, Schedule, ScheduleBuilder, StreamKind, Tag,
};

const N: usize = 2000;

const TAG: Tag = Tag {
    step: 0,
    layer: 0,
    batch: 0,
    group: Tag::NONE,
    phase: Phase::Decode,
};

fn tiny_ops(streams: usize, chained: bool) -> Schedule {
    let mut b = ScheduleBuilder::with_capacity(N, N);
    let s: Vec<_> = (0..streams)
        .map(|i| b.stream(0, StreamKind::Compute, format!("s{i}")))
        .collect();
    let l = b.label("tiny");
    let mut prev: Option<OpId> = None;
    for i in 0..N {
        let dep = if chained { prev } else { None };
        prev = Some(b.push(
            OpKind::Elementwise {
                kind: ElemKind::Other,
                bytes: 64,
                rows: 0,
            },
            s[i % streams],
            l,
            TAG,
            &[dep],
        ));
    }
    b.build()
}

fn bench(c: &mut Criterion) {
    let options = ExecOptions {
        warmup_runs: 0,
        ..ExecOptions::default()
    };
    let mut ex = kvplan_exec::open(BackendKind::Cpu, &options).expect("the CPU backend opens");
    let mut g = c.benchmark_group("cpu_overhead_per_op");
    for (name, schedule) in [
        ("chain_3_streams", tiny_ops(3, true)),
        ("one_stream", tiny_ops(1, false)),
    ] {
        ex.run(&schedule).expect("warm-up run");
        g.bench_function(format!("{name}/gap"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t = ex.run(&schedule).expect("run");
                    let busy: f64 = t.spans.iter().map(|s| s.duration()).sum();
                    let gap = (t.makespan() - busy).max(0.0) / N as f64;
                    total += Duration::from_secs_f64(gap);
                }
                total
            })
        });
        g.bench_function(format!("{name}/wall"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let t0 = Instant::now();
                    ex.run(&schedule).expect("run");
                    total += t0.elapsed() / N as u32;
                }
                total
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
