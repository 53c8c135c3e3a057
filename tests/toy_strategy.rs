//! A strategy added from this one file: a toy planner ("stream-weights": every layer's weights
//! copied to the GPU before its kernels, every step; the KV cache stays on the GPU) registered
//! at run time, then planned, simulated and reported through the command line's own parsing and
//! commands (`kvplan::run`), as `kvplan plan stream-weights` and `kvplan simulate --strategy
//! stream-weights` run it. Nothing else in the repository names it: this file is the whole of
//! what adding a strategy takes.

use std::sync::Once;

use clap::Parser;
use kvplan_planner::plan::{Decisions, Details, Input, Order, Plan, PlanNote, Planner, Strategy};
use kvplan_planner::registry;
use kvplan_vocab::Result;
use kvplan_vocab::memory::{MemoryKind, MemoryPlan};
use kvplan_vocab::schedule::{
    HostMemory, OpKind, Payload, Phase, ScheduleBuilder, StreamKind, Tag,
};
use serde::Serialize;

/// The toy's planner.
struct StreamWeights;

/// What it decided: how many bytes of weights cross the link per step.
#[derive(Debug, Clone, Serialize)]
struct Streamed {
    bytes_per_step: u64,
}

impl Details for Streamed {
    fn key(&self) -> &'static str {
        "stream_weights"
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap()
    }
}

impl Planner for StreamWeights {
    fn name(&self) -> &'static str {
        "stream-weights"
    }

    fn plan(&self, i: &Input<'_>) -> Result<Plan> {
        let (m, shape) = (i.model, i.shape);
        let layer_bytes = m.layer_weights().total();
        let mut b = ScheduleBuilder::new();
        let copy = b.stream(0, StreamKind::H2D, "gpu0.h2d");
        let compute = b.stream(0, StreamKind::Compute, "gpu0.compute");
        let (load, gemm) = (b.label("load_weights"), b.label("layer"));
        let mut last = None;
        for step in 0..shape.gen_len {
            let (phase, tokens) = match step {
                0 => (Phase::Prefill, shape.batch * shape.prompt),
                _ => (Phase::Decode, shape.batch),
            };
            for layer in 0..m.num_layers {
                let tag = Tag {
                    step,
                    layer: layer as u16,
                    batch: 0,
                    group: Tag::NONE,
                    phase,
                };
                let bytes = layer_bytes;
                let host = HostMemory::Pinned;
                let payload = Payload::Weights;
                let w = b.push(
                    OpKind::H2D {
                        bytes,
                        payload,
                        host,
                    },
                    copy,
                    load,
                    tag,
                    &[],
                );
                let kind = OpKind::Gemm {
                    m: tokens,
                    n: 12 * m.hidden,
                    k: m.hidden,
                    batch: 1,
                    dtype: m.dtype,
                    weights: Default::default(),
                };
                last = Some(b.push(kind, compute, gemm, tag, &[Some(w), last]));
            }
        }
        let mut memory = MemoryPlan::default();
        memory.gpu(MemoryKind::WeightBuffers, 2 * layer_bytes);
        let kv = shape.total_batch() * shape.max_len() * u64::from(m.num_layers);
        memory.gpu(MemoryKind::KvCache, kv * m.kv_bytes_per_token_layer());
        memory.host(MemoryKind::Weights, m.weight_bytes());
        memory.check(i.hw, "stream-weights plan", "reduce `workload.batch`", "")?;
        Ok(Plan {
            strategy: self.strategy(),
            model: m.name.clone(),
            hardware: i.hw.name.clone(),
            shape: *shape,
            order: Order::RowByRow,
            weights_on_gpu: false,
            host_memory: i.options.host_memory,
            memory,
            decisions: Decisions::new(Streamed {
                bytes_per_step: layer_bytes * u64::from(m.num_layers),
            }),
            notes: vec![PlanNote::text("a toy: weights streamed every step")],
            schedule: b.build(),
        })
    }
}

static STREAM_WEIGHTS: StreamWeights = StreamWeights;

fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| registry::register(&STREAM_WEIGHTS).unwrap());
}

/// The command line's answer to `args` (after `kvplan`), as the binary would print it.
fn kvplan(args: &str) -> std::result::Result<String, String> {
    register();
    let words = std::iter::once("kvplan").chain(args.split_whitespace());
    let cli = kvplan::Cli::try_parse_from(words).map_err(|e| e.to_string())?;
    kvplan::run(&cli).map_err(|e| kvplan::messages::flags_in_text(&e.message))
}

const OPT: &str = "--model opt-1.3b --hardware a100-40g-pcie4 --batch 4 --prompt 64 --gen 3";

#[test]
fn the_toy_strategy_is_registered_once_and_known_by_name() {
    register();
    let s = registry::parse("stream-weights").expect("registered");
    assert_eq!(s.as_str(), "stream-weights");
    assert!(registry::names().contains(&"stream-weights"));
    assert_ne!(s, Strategy::KVPR);
    // A second strategy of the same name is refused; the built-ins are untouched.
    assert!(registry::register(&STREAM_WEIGHTS).is_err());
    assert_eq!(
        &registry::names()[..5],
        ["kvpr", "full-transfer", "gpu-only", "headinfer", "runahead"]
    );
    // Not compared unless it asks to be.
    assert!(!registry::compared().contains(&s));
}

#[test]
fn the_toy_strategy_plans_through_the_command_line() {
    let out = kvplan(&format!("plan stream-weights {OPT} --format json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["strategy"], "stream-weights");
    assert_eq!((v["batch"].as_u64(), v["gen"].as_u64()), (Some(4), Some(3)));
    let streamed = v["stream_weights"]["bytes_per_step"].as_u64().unwrap();
    let weights = v["peak_host_bytes"].as_u64().unwrap();
    // Every layer's weights cross each step: all of them but the embeddings.
    assert!(
        streamed > weights / 2 && streamed <= weights,
        "{streamed} of {weights}"
    );
    assert_eq!(v["notes"][0], "a toy: weights streamed every step");
    let table = kvplan(&format!("plan stream-weights {OPT}")).unwrap();
    assert!(
        table.starts_with("stream-weights plan: opt-1.3b on a100-40g-pcie4"),
        "{table}"
    );
    // Its flags are the planner commands' flags, checked the same way.
    let e = kvplan("plan stream-weights --model opt-1.3b --hardware a100-40g-pcie4 --batch 0");
    assert_eq!(
        e.unwrap_err(),
        "--batch (workload.batch): must be a whole number from 1 to 4294967295 (got 0)"
    );
    let e = kvplan("plan stream-weight --model opt-1.3b --hardware a100-40g-pcie4").unwrap_err();
    assert!(
        e.contains("unknown strategy 'stream-weight'") && e.contains("stream-weights"),
        "{e}"
    );
}

#[test]
fn the_toy_strategy_simulates_and_reports_through_the_command_line() {
    let json = kvplan(&format!(
        "simulate --strategy stream-weights {OPT} --format json"
    ))
    .unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["strategy"], "stream-weights");
    assert_eq!(v["source"], "simulated");
    let (prefill, decode) = (
        v["prefill_latency_s"].as_f64().unwrap(),
        v["decode_latency_s"].as_f64().unwrap(),
    );
    assert!(prefill > 0.0 && decode > 0.0, "{v}");
    // The simulator timed the toy's copies: the link carried every layer's weights each step.
    let h2d = v["h2d_bytes"].as_u64().unwrap();
    let streamed = serde_json::from_str::<serde_json::Value>(
        &kvplan(&format!("plan stream-weights {OPT} --format json")).unwrap(),
    )
    .unwrap()["stream_weights"]["bytes_per_step"]
        .as_u64()
        .unwrap();
    assert_eq!(h2d, 3 * streamed);
    // Streaming the weights is slower than keeping them, on the same model, GPU and batch.
    let gpu_only = kvplan(&format!("simulate --strategy gpu-only {OPT} --format json")).unwrap();
    let g: serde_json::Value = serde_json::from_str(&gpu_only).unwrap();
    assert!(decode > g["decode_latency_s"].as_f64().unwrap());
    let table = kvplan(&format!("simulate --strategy stream-weights {OPT}")).unwrap();
    assert!(table.contains("stream-weights"), "{table}");
    // A scenario file names it like any strategy.
    let dir = std::env::temp_dir().join(format!("kvplan-toy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("toy.toml");
    std::fs::write(&file, "model = \"opt-1.3b\"\nhardware = \"t4\"\nstrategy = \"stream-weights\"\n[workload]\nbatch = 2\ngen = 2\n").unwrap();
    let out = kvplan(&format!("simulate {} --format json", file.display())).unwrap();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["strategy"].as_str(), v["hardware"].as_str()),
        (Some("stream-weights"), Some("t4"))
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
