//! The CPU backend.

use kvplan_exec::{BackendKind, Error, ExecOptions};
use kvplan_planner::plan::Strategy;
use kvplan_vocab::DType;
use kvplan_vocab::schedule::{ElemKind, HostMemory, OpKind, Payload, ScheduleBuilder, StreamKind};
use kvplan_vocab::timeline::Span;

use super::common::{
    TAG, assert_valid, every_kind, gemm, h2d, open, opt125m, opt125m_recomputing, schedule,
};

#[test]
fn runs_a_kvpr_plan_with_valid_spans() {
    let s = opt125m(Strategy::KVPR);
    let mut ex = open(BackendKind::Cpu, 1);
    assert_eq!(ex.info().backend, BackendKind::Cpu);
    let t = ex.run(&s).unwrap();
    assert_valid(&s, &t, "cpu", 0.0);
    assert!(t.makespan() > 0.0);
    let s = opt125m_recomputing(32);
    let t = ex.run(&s).unwrap();
    assert_valid(&s, &t, "cpu", 0.0);
}

/// The CPU backend's host spans are its dispatch: each op's ends exactly where the op starts and
/// begins where its stream's previous op ended (the first op's is empty); an idle
/// synchronisation (a wait for a finished op) is timed.
#[test]
fn host_dispatch_spans_run_from_the_previous_op_to_the_next() {
    let s = opt125m(Strategy::KVPR);
    let mut ex = open(BackendKind::Cpu, 1);
    let t = ex.run(&s).unwrap();
    assert_eq!(t.host.len(), s.len());
    for (i, _) in s.streams().iter().enumerate() {
        let mut prev: Option<kvplan_vocab::schedule::OpId> = None;
        let mut cur = s.first_in_stream(kvplan_vocab::schedule::StreamId(i as u16));
        while let Some(op) = cur {
            let (h, span) = (t.host[op.index()], t.spans[op.index()]);
            assert_eq!(h.end, span.start, "op {}", op.0);
            match prev {
                Some(p) => assert_eq!(h.start, t.spans[p.index()].end, "op {}", op.0),
                None => assert_eq!(h.start, h.end, "op {}", op.0),
            }
            prev = Some(op);
            cur = s.next_in_stream(op);
        }
    }
    let sync = ex.idle_sync_s(100).unwrap();
    assert!(sync.is_finite() && (0.0..1e-3).contains(&sync), "{sync}");
}

#[test]
fn runs_a_full_transfer_plan_with_valid_spans() {
    let s = opt125m(Strategy::FULL_TRANSFER);
    let t = open(BackendKind::Cpu, 1).run(&s).unwrap();
    assert_valid(&s, &t, "cpu", 0.0);
}

#[test]
fn runs_every_op_kind_and_reuses_buffers_across_runs() {
    let mut ex = open(BackendKind::Cpu, 0);
    let big = every_kind();
    let small = schedule(&[StreamKind::Compute], &[(gemm(2, 2, 2, DType::Fp16), 0)]);
    for s in [&small, &big, &small, &big] {
        let t = ex.run(s).unwrap();
        assert_valid(s, &t, "cpu", 0.0);
    }
    let empty = ScheduleBuilder::new().build();
    assert!(ex.run(&empty).unwrap().spans.is_empty());
}

#[test]
fn peer_sends_run_on_a_two_device_schedule() {
    let mut b = ScheduleBuilder::new();
    let c0 = b.stream(0, StreamKind::Compute, "gpu0.compute");
    let p = b.stream(0, StreamKind::Peer { to: 1 }, "gpu0->gpu1");
    let c1 = b.stream(1, StreamKind::Compute, "gpu1.compute");
    let l = b.label("op");
    let a = b.push(
        OpKind::Elementwise {
            kind: ElemKind::Other,
            bytes: 4096,
            rows: 0,
        },
        c0,
        l,
        TAG,
        &[],
    );
    let s = b.push(OpKind::PeerSend { bytes: 1 << 20 }, p, l, TAG, &[Some(a)]);
    b.push(
        OpKind::Elementwise {
            kind: ElemKind::Other,
            bytes: 4096,
            rows: 0,
        },
        c1,
        l,
        TAG,
        &[Some(s)],
    );
    let s = b.build();
    let t = open(BackendKind::Cpu, 1).run(&s).unwrap();
    assert_valid(&s, &t, "cpu", 0.0);
}

/// Duration of `op` alone (one measured run after a warm-up).
fn alone(op: OpKind, stream: StreamKind) -> f64 {
    let s = schedule(&[stream], &[(op, 0)]);
    open(BackendKind::Cpu, 1).run(&s).unwrap().spans[0].duration()
}

fn overlap(a: Span, b: Span) -> f64 {
    a.end.min(b.end) - a.start.max(b.start)
}

/// A GEMM and a copy on two streams run and give valid spans (whether they overlap depends on
/// the machine's load: `streams_run_concurrently_wall_clock`).
#[test]
fn streams_run_concurrently() {
    let g = gemm(256, 256, 64, DType::Fp16);
    let c = h2d(8 << 20, HostMemory::Pinned);
    let s = schedule(&[StreamKind::Compute, StreamKind::H2D], &[(g, 0), (c, 1)]);
    let t = open(BackendKind::Cpu, 1).run(&s).unwrap();
    assert_valid(&s, &t, "cpu", 0.0);
}

#[test]
#[ignore = "wall-clock check: measured times depend on machine load; run with `cargo test -- --ignored wall_clock`"]
fn streams_run_concurrently_wall_clock() {
    let mut k = 64u32;
    let mut g = gemm(256, 256, k, DType::Fp16);
    let mut bytes = 8u64 << 20;
    let mut c = h2d(bytes, HostMemory::Pinned);
    // Size a GEMM and a copy to about 40 ms each here (debug or release), then run them on two
    // streams without dependencies: their spans must overlap.
    let target = 0.04;
    for _ in 0..4 {
        let d = alone(g, StreamKind::Compute);
        if d >= target {
            break;
        }
        k = ((f64::from(k) * (1.2 * target / d.max(1e-6))).ceil() as u32).clamp(k + 1, 1 << 16);
        g = gemm(256, 256, k, DType::Fp16);
    }
    for _ in 0..4 {
        let d = alone(c, StreamKind::H2D);
        if d >= target {
            break;
        }
        bytes = ((bytes as f64 * (1.2 * target / d.max(1e-6))) as u64).clamp(bytes + 1, 1 << 30);
        c = h2d(bytes, HostMemory::Pinned);
    }
    let s = schedule(&[StreamKind::Compute, StreamKind::H2D], &[(g, 0), (c, 1)]);
    let t = open(BackendKind::Cpu, 1).run(&s).unwrap();
    assert_valid(&s, &t, "cpu", 0.0);
    let (a, b) = (t.spans[0], t.spans[1]);
    let shorter = a.duration().min(b.duration());
    assert!(
        overlap(a, b) > 0.5 * shorter,
        "the GEMM {a:?} and the copy {b:?} should overlap"
    );
}

/// Pinned and pageable copies run and give valid spans.
#[test]
fn pageable_and_pinned_copies_run() {
    pageable_and_pinned(false);
}

#[test]
#[ignore = "wall-clock check: measured times depend on machine load; run with `cargo test -- --ignored wall_clock`"]
fn pageable_copies_are_slower_than_pinned_ones_wall_clock() {
    pageable_and_pinned(true);
}

fn pageable_and_pinned(timing: bool) {
    let mib64 = 64u64 << 20;
    let mut ops = Vec::new();
    for _ in 0..3 {
        ops.push((h2d(mib64, HostMemory::Pinned), 0));
        ops.push((h2d(mib64, HostMemory::Pageable), 0));
    }
    let s = schedule(&[StreamKind::H2D], &ops);
    let t = open(BackendKind::Cpu, 1).run(&s).unwrap();
    assert_valid(&s, &t, "cpu", 0.0);
    if !timing {
        return;
    }
    let best = |parity: usize| {
        t.spans
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 2 == parity)
            .map(|(_, s)| s.duration())
            .fold(f64::INFINITY, f64::min)
    };
    let (pinned, pageable) = (best(0), best(1));
    assert!(
        pinned < pageable,
        "pinned {pinned:.4} s should beat pageable {pageable:.4} s"
    );
}

#[test]
fn unsupported_attention_is_an_error_not_a_panic() {
    let op = OpKind::Attention {
        batch: 1,
        q_heads: 3,
        kv_heads: 2,
        q_len: 1,
        kv_len: 4,
        head_dim: 8,
        causal: false,
        dtype: DType::Fp16,
        kv: kvplan_vocab::KvCacheDtype::Auto,
    };
    let s = schedule(&[StreamKind::Compute], &[(op, 0)]);
    let e = open(BackendKind::Cpu, 0).run(&s).unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
}

#[test]
fn absurd_sizes_are_an_error_not_a_panic() {
    let huge_copy = OpKind::H2D {
        bytes: u64::MAX,
        payload: Payload::Weights,
        host: HostMemory::Pinned,
    };
    let huge_gemm = gemm(u32::MAX, u32::MAX, u32::MAX, DType::Fp32);
    for (op, kind) in [
        (huge_copy, StreamKind::H2D),
        (
            OpKind::Elementwise {
                kind: ElemKind::Other,
                bytes: u64::MAX,
                rows: 0,
            },
            StreamKind::Compute,
        ),
        (huge_gemm, StreamKind::Compute),
    ] {
        let s = schedule(&[kind], &[(op, 0)]);
        let e = open(BackendKind::Cpu, 0).run(&s).unwrap_err();
        assert!(
            matches!(e, Error::OutOfMemory { .. } | Error::Unsupported(_)),
            "{e}"
        );
    }
}

#[test]
fn device_info_describes_the_host() {
    let ex = kvplan_exec::open(BackendKind::Cpu, &ExecOptions::default()).unwrap();
    let i = ex.info();
    assert!(!i.name.is_empty() && !i.driver.is_empty());
    assert!(i.parallelism.unwrap_or(1) >= 1);
}

/// A small mixture of experts (Mixtral's layout, 4 experts, top-2) planned gpu-only runs on the
/// CPU backend: its expert GEMMs are batched GEMMs (one per distinct expert hit), which both
/// backends run (`cublasGemmStridedBatchedEx` on CUDA).
#[test]
fn runs_a_mixture_of_experts_plan() {
    use kvplan_planner::plan::{Options, Shape, plan};
    use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};
    let model = ModelSpec::from_hf_config_str(
        r#"{"model_type": "mixtral", "hidden_size": 128, "intermediate_size": 256,
            "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
            "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 1000,
            "max_position_embeddings": 512, "torch_dtype": "bfloat16"}"#,
        "tiny-mixtral",
        "tiny-mixtral",
    )
    .unwrap();
    let hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
    let shape = Shape {
        batch: 4,
        gpu_batches: 1,
        prompt: 32,
        gen_len: 3,
    };
    let s = plan(
        &model,
        &hw,
        &CostModel::new(&hw),
        &shape,
        Strategy::GPU_ONLY,
        &Options::default(),
    )
    .unwrap()
    .schedule;
    let experts = s
        .ops()
        .iter()
        .filter(|o| s.label(o) == "ffn_up")
        .map(|o| match o.kind {
            OpKind::Gemm { batch, .. } => batch,
            _ => 0,
        })
        .max();
    // Prefill's 128 rows hit all 4 experts; the router picks among them.
    assert_eq!(experts, Some(4));
    assert!(s.ops().iter().any(|o| s.label(o) == "router"));
    let t = open(BackendKind::Cpu, 0).run(&s).unwrap();
    assert_valid(&s, &t, "cpu", 0.0);
}

/// Records what a run reports.
#[derive(Default)]
struct Heard(std::sync::Mutex<(u64, u64, String)>);

impl kvplan_vocab::Progress for Heard {
    fn start(&self, total: u64, what: &str) {
        let mut h = self.0.lock().unwrap();
        h.0 = total;
        h.2 = what.to_string();
    }
    fn set(&self, done: u64) {
        let mut h = self.0.lock().unwrap();
        assert!(done >= h.1 && done <= h.0, "{done} of {}", h.0);
        h.1 = done;
    }
}

/// A run reports every op of the warm-up runs and the measured one, ending at the total.
#[test]
fn a_run_reports_its_progress() {
    let s = opt125m(Strategy::KVPR);
    let heard = Heard::default();
    open(BackendKind::Cpu, 1).run_with(&s, &heard).unwrap();
    let h = heard.0.lock().unwrap();
    assert_eq!(h.0, 2 * s.len() as u64);
    assert_eq!(h.1, h.0);
    assert_eq!(h.2, "ops run (warm-up runs first)");
}
