//! 10,000 and 100,000 requests of the Splitwise conversation trace (tiled past its end) on
//! llama-2-7b / a100-80g-sxm: vLLM V1 (chunked prefill, prefix caching, CUDA graphs,
//! asynchronous scheduling, `max_model_len` 4096) and vLLM 0.4's prefill-first engine; and the
//! same 100,000 requests arriving 8 times as fast on 8 V1 replicas behind a router
//! (round-robin, vLLM's DP balancer, and Dynamo's KV router, which indexes every replica's KV
//! events). And the fast-forward of decode-only stretches: 10,000 Poisson requests with the
//! trace's lengths at 1, 5 and 20 req/s on one V1 engine, fast-forwarded and step by step,
//! each printed once as "x real time" (simulated seconds per wall second, the best of three
//! runs) beside the passes and steps simulated.

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
    let mut g = c.benchmark_group("cluster");
    g.sample_size(10);
    let reqs: Vec<Request> = trace(100_000)
        .into_iter()
        .map(|mut r| {
            r.arrival_s /= 8.0;
            r
        })
        .collect();
    for router in ["round-robin", "vllm-dp", "kv-aware"] {
        let raw = kvplan_serve::scenario::RawServeScenario {
            model: Some("llama-2-7b".into()),
            hardware: Some("a100-80g-sxm".into()),
            workload: kvplan_workloads::WorkloadConfig {
                arrivals: Some("all-at-once".into()),
                prompt_lengths: Some("8".into()),
                requests: Some(1),
                ..Default::default()
            },
            serve: kvplan_serve::scenario::RawConfig {
                max_model_len: Some(4096),
                record_timeseries: Some(false),
                record_requests: Some(false),
                ..Default::default()
            },
            cluster: kvplan_serve::cluster::scenario::RawCluster {
                data_parallel_size: Some(8),
                router: Some(router.parse().unwrap()),
                ..Default::default()
            },
        };
        let sc = raw.resolve().unwrap();
        g.bench_function(format!("splitwise_conv_100000_8_replicas_{router}"), |b| {
            b.iter(|| black_box(sc.run(black_box(&reqs)).unwrap()))
        });
    }
    g.finish();
    deploy(c);
}

/// One shape of `kvplan plan-deployment`'s search, as its README example runs it: Llama-3.1-8B,
/// 10,000 Poisson requests at 20 req/s (1024-token prompts, 256-token outputs) under
/// `ttft_p99=2s,tpot_p99=100ms`, on H100 TP1 colocated and on A100 TP1 as 1:1 prefill:decode
/// units: the fewest units found, every candidate tried simulated.
fn deploy(c: &mut Criterion) {
    use kvplan_serve::deploy::{Layout, PlanOptions, Shape, load_of, plan_shape};
    let mut g = c.benchmark_group("deploy");
    g.sample_size(10);
    let base = kvplan_serve::scenario::RawServeScenario {
        model: Some("llama-3.1-8b".into()),
        workload: kvplan_workloads::WorkloadConfig {
            arrivals: Some("poisson".into()),
            qps: Some(20.0),
            prompt_lengths: Some("1024".into()),
            output_lengths: Some("256".into()),
            requests: Some(10_000),
            ..Default::default()
        },
        ..Default::default()
    };
    let load = load_of(&base).unwrap();
    let slo = "ttft_p99=2s,tpot_p99=100ms".parse().unwrap();
    let opts = PlanOptions {
        max_gpus: 64,
        steady: Default::default(),
        prices: Default::default(),
        shard: None,
    };
    for (name, hardware, layout) in [
        ("h100_tp1_colocated", "h100-sxm", Layout::Colocated),
        (
            "a100_tp1_1p1d",
            "a100-80g-sxm",
            Layout::Disaggregated {
                prefill: 1,
                decode: 1,
            },
        ),
    ] {
        let shape = Shape {
            index: 0,
            hardware: hardware.into(),
            tensor_parallel_size: 1,
            layout,
            router: "round-robin".parse().unwrap(),
            settings: Vec::new(),
        };
        g.bench_function(format!("shape_llama31_8b_20qps_10000_{name}"), |b| {
            b.iter(|| black_box(plan_shape(&base, &shape, &slo, &opts, 1.0, &load).unwrap()))
        });
    }
    g.finish();
}

/// The README's timing run (Poisson arrivals, the Splitwise conversation trace's lengths,
/// llama-2-7b / a100-80g-sxm, `max_model_len` 4096) at `qps` with `n` requests.
fn poisson_scenario(qps: f64, n: u64) -> kvplan_serve::scenario::ServeScenario {
    let trace = concat!(
        "trace:",
        env!("CARGO_MANIFEST_DIR"),
        "/../data/traces/splitwise_conv.csv"
    );
    kvplan_serve::scenario::RawServeScenario {
        model: Some("llama-2-7b".into()),
        hardware: Some("a100-80g-sxm".into()),
        workload: kvplan_workloads::WorkloadConfig {
            arrivals: Some("poisson".into()),
            qps: Some(qps),
            prompt_lengths: Some(trace.into()),
            output_lengths: Some(trace.into()),
            requests: Some(n),
            ..Default::default()
        },
        serve: kvplan_serve::scenario::RawConfig {
            max_model_len: Some(4096),
            record_timeseries: Some(false),
            record_requests: Some(false),
            ..Default::default()
        },
        cluster: Default::default(),
    }
    .resolve()
    .unwrap()
}

fn fast_forward(c: &mut Criterion) {
    let mut g = c.benchmark_group("fast_forward");
    g.sample_size(10);
    for qps in [1.0, 5.0, 20.0] {
        let mut sc = poisson_scenario(qps, 10_000);
        let reqs = sc.requests().unwrap();
        for step_by_step in [true, false] {
            sc.resolved.step_by_step = step_by_step;
            let mode = if step_by_step {
                "step_by_step"
            } else {
                "fast_forward"
            };
            let mut best = f64::INFINITY;
            let mut report = None;
            for _ in 0..3 {
                let t = std::time::Instant::now();
                let r = sc.run(&reqs).unwrap();
                best = best.min(t.elapsed().as_secs_f64());
                report = Some(r);
            }
            let r = report.unwrap();
            println!(
                "fast_forward/qps_{qps}_{mode}: {:.0} s simulated in {:.3} s: {:.0}x real time; {} steps, {} passes",
                r.summary.makespan_s,
                best,
                r.summary.makespan_s / best,
                r.summary.iterations,
                r.passes,
            );
            g.bench_function(format!("splitwise_conv_10000_qps_{qps}_{mode}"), |b| {
                b.iter(|| black_box(sc.run(black_box(&reqs)).unwrap()))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench, fast_forward);
criterion_main!(benches);
