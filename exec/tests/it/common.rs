//! Helpers shared by the test modules.

use kvplan_exec::{BackendKind, ExecOptions, Executor};
use kvplan_planner::plan::{Options, Shape, SplitPolicy, Strategy, plan};
use kvplan_vocab::schedule::{
    ElemKind, HostMemory, OpId, OpKind, Payload, Phase, Schedule, ScheduleBuilder, StreamKind, Tag,
};
use kvplan_vocab::timeline::{Source, Timeline};
use kvplan_vocab::{CostModel, DType, HardwareProfile, ModelSpec};

pub const TAG: Tag = Tag {
    step: 0,
    layer: 0,
    batch: 0,
    group: Tag::NONE,
    phase: Phase::Decode,
};

/// The opt-125m plan of the brief: batch 4, prompt 64, gen 3 on the A100 PCIe 4 profile.
pub fn opt125m(strategy: Strategy) -> Schedule {
    opt125m_with(strategy, &Options::default())
}

/// The same with a fixed KVPR split of `tokens` recomputed tokens per decode step (the auto
/// split of this small model is 0, so the recompute ops appear only this way).
pub fn opt125m_recomputing(tokens: u32) -> Schedule {
    let options = Options::default().with(kvplan_planner::plan::KvprOptions {
        split: SplitPolicy::Tokens(tokens),
        ..Default::default()
    });
    let s = opt125m_with(Strategy::KVPR, &options);
    for label in ["recompute_kv", "kv_concat", "load_x", "store_x"] {
        assert!(
            s.ops().iter().any(|o| s.label(o) == label),
            "the plan has {label} ops"
        );
    }
    s
}

fn opt125m_with(strategy: Strategy, options: &Options) -> Schedule {
    let model = ModelSpec::preset("opt-125m").unwrap();
    let hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
    let cost = CostModel::new(&hw);
    let shape = Shape {
        batch: 4,
        gpu_batches: 1,
        prompt: 64,
        gen_len: 3,
    };
    plan(&model, &hw, &cost, &shape, strategy, options)
        .unwrap()
        .schedule
}

pub fn options(warmup_runs: u32) -> ExecOptions {
    ExecOptions {
        warmup_runs,
        ..ExecOptions::default()
    }
}

/// Checks the measured timeline of `s`: one finite, non-negative span per op; every op starts
/// after its dependencies and its stream predecessor end (`slack` seconds of clock granularity
/// allowed), so no two ops of a stream overlap.
pub fn assert_valid(s: &Schedule, t: &Timeline, backend: &str, slack: f64) {
    assert_eq!(t.spans.len(), s.len(), "one span per op");
    match &t.source {
        Source::Measured { backend: b, device } => {
            assert_eq!(b, backend);
            assert!(!device.is_empty());
        }
        other => panic!("not a measured timeline: {other:?}"),
    }
    let mut stream_end = vec![0.0f64; s.streams().len()];
    for (i, op) in s.ops().iter().enumerate() {
        let span = t.spans[i];
        assert!(
            span.start.is_finite() && span.end.is_finite() && span.start >= 0.0,
            "op {i}: {span:?}"
        );
        assert!(span.end >= span.start, "op {i}: {span:?}");
        for d in s.deps(OpId(i as u32)) {
            let dep = t.spans[d.index()];
            assert!(
                span.start + slack >= dep.end,
                "op {i} ({}) starts at {} before its dependency {} ends at {}",
                s.label(op),
                span.start,
                d.0,
                dep.end
            );
        }
        let st = op.stream.index();
        assert!(
            span.start + slack >= stream_end[st],
            "op {i} ({}) overlaps its stream predecessor",
            s.label(op)
        );
        stream_end[st] = span.end;
    }
}

/// A schedule of `ops` (kind, stream index) over streams `kinds`, without dependencies.
pub fn schedule(kinds: &[StreamKind], ops: &[(OpKind, usize)]) -> Schedule {
    let mut b = ScheduleBuilder::new();
    let streams: Vec<_> = kinds
        .iter()
        .enumerate()
        .map(|(i, k)| b.stream(0, *k, format!("s{i}")))
        .collect();
    let l = b.label("op");
    for (k, s) in ops {
        b.push(*k, streams[*s], l, TAG, &[]);
    }
    b.build()
}

pub fn h2d(bytes: u64, host: HostMemory) -> OpKind {
    OpKind::H2D {
        bytes,
        payload: Payload::Cache,
        host,
    }
}

pub fn d2h(bytes: u64, host: HostMemory) -> OpKind {
    OpKind::D2H {
        bytes,
        payload: Payload::Cache,
        host,
    }
}

pub fn gemm(m: u32, n: u32, k: u32, dtype: DType) -> OpKind {
    OpKind::Gemm {
        m,
        n,
        k,
        batch: 1,
        dtype,
        weights: kvplan_vocab::WeightFormat::Dense,
    }
}

/// One op of every kind (and every dtype, both host memory kinds, batched GEMMs, decode and
/// causal prefill attention with GQA) on compute, H2D and D2H streams, with cross-stream deps.
pub fn every_kind() -> Schedule {
    let mut b = ScheduleBuilder::new();
    let c = b.stream(0, StreamKind::Compute, "c");
    let h = b.stream(0, StreamKind::H2D, "h");
    let d = b.stream(0, StreamKind::D2H, "d");
    let l = b.label("op");
    let x = b.push(h2d(1 << 20, HostMemory::Pinned), h, l, TAG, &[]);
    let y = b.push(h2d(1 << 19, HostMemory::Pageable), h, l, TAG, &[]);
    let mut last = None;
    for dtype in DType::ALL {
        last = Some(b.push(
            OpKind::Gemm {
                m: 33,
                n: 65,
                k: 47,
                batch: 3,
                dtype,
                weights: kvplan_vocab::WeightFormat::Dense,
            },
            c,
            l,
            TAG,
            &[Some(x)],
        ));
        for (q_len, kv_len, causal) in [(1, 300, false), (24, 40, true)] {
            last = Some(b.push(
                OpKind::Attention {
                    batch: 2,
                    q_heads: 8,
                    kv_heads: 2,
                    q_len,
                    kv_len,
                    head_dim: 64,
                    causal,
                    dtype,
                    kv: kvplan_vocab::KvCacheDtype::Auto,
                },
                c,
                l,
                TAG,
                &[Some(y)],
            ));
        }
    }
    let e = b.push(
        OpKind::Elementwise {
            kind: ElemKind::Other,
            bytes: 100_000,
            rows: 0,
        },
        c,
        l,
        TAG,
        &[last],
    );
    b.push(d2h(1 << 20, HostMemory::Pinned), d, l, TAG, &[Some(e)]);
    b.push(d2h(1 << 18, HostMemory::Pageable), d, l, TAG, &[Some(e)]);
    b.build()
}

pub fn open(kind: BackendKind, warmup_runs: u32) -> Box<dyn Executor> {
    kvplan_exec::open(kind, &options(warmup_runs)).unwrap()
}
