//! The CUDA executor (`exec/src/cuda/executor.rs`) on the fake driver (`kvplan_exec::fake`):
//! real plans run through the executor's stream placement, events, buffers, copies and launches
//! without a GPU, and what the fake saw is checked against the schedule — placement, per-stream
//! order, sizes, a closed-form timeline of the dependencies, buffer hazards and driver misuse.

use std::collections::BTreeMap;

use kvplan_exec::fake::{self, Call, FakeGpu, FakeLog, FakeStream, Work, WorkKind};
use kvplan_exec::{AttentionShape, Error, ExecOptions, Executor};
use kvplan_planner::plan::{Options, Shape, Strategy, plan};
use kvplan_planner::runahead::RunaheadOptions;
use kvplan_vocab::schedule::{HostMemory, OpId, OpKind, Schedule, StreamKind};
use kvplan_vocab::timeline::Timeline;
use kvplan_vocab::{CostModel, DType, HardwareProfile, ModelSpec};

use super::common::{assert_valid, every_kind, opt125m, opt125m_recomputing};
use super::headinfer::headinfer_schedule;

fn open(gpu: &FakeGpu, warmup_runs: u32) -> (Box<dyn Executor>, FakeLog) {
    let options = ExecOptions {
        warmup_runs,
        ..ExecOptions::default()
    };
    fake::open(&options, gpu).unwrap()
}

/// The work the executor must issue for `op` on a stream of `kind` (none for an empty op).
fn expected(kind: &OpKind, stream: StreamKind, device: usize) -> Option<WorkKind> {
    match *kind {
        OpKind::H2D { bytes, host, .. } => (bytes > 0).then_some(WorkKind::H2D {
            bytes,
            pinned: host == HostMemory::Pinned,
        }),
        OpKind::D2H { bytes, host, .. } => (bytes > 0).then_some(WorkKind::D2H {
            bytes,
            pinned: host == HostMemory::Pinned,
        }),
        OpKind::PeerSend { bytes } => (bytes > 0).then_some(WorkKind::Peer {
            bytes,
            to: match stream {
                StreamKind::Peer { to } => usize::from(to),
                _ => device,
            },
        }),
        OpKind::Gemm {
            m,
            n,
            k,
            batch,
            dtype,
            ..
        } => (m > 0 && n > 0 && batch > 0).then_some(WorkKind::Gemm {
            m: m as usize,
            n: n as usize,
            k: k as usize,
            batch: batch as usize,
            dtype,
        }),
        OpKind::Attention {
            batch,
            q_len,
            kv_len,
            causal,
            dtype,
            ..
        } => {
            let h = kind.attention_heads().unwrap();
            let shape = AttentionShape {
                batch: batch as usize,
                q_heads: usize::from(h.q_heads),
                kv_heads: usize::from(h.kv_heads),
                q_len: q_len as usize,
                kv_len: kv_len as usize,
                head_dim: usize::from(h.head_dim),
                causal,
            };
            (shape.q_elems() > 0).then_some(WorkKind::Attention { shape, dtype })
        }
        OpKind::Elementwise { bytes, .. } => (bytes / 4 > 0).then_some(WorkKind::Elementwise {
            elems: bytes / 4,
            dtype: DType::Fp16,
        }),
        OpKind::AllReduce { .. } | OpKind::BatchAttention { .. } => {
            panic!("the executor refuses {kind:?}")
        }
    }
}

fn setup(w: &Work) -> bool {
    matches!(w.kind, WorkKind::Spin { .. } | WorkKind::Fill { .. })
}

/// A name per kind of work, to count them.
fn kind_name(w: &WorkKind) -> &'static str {
    match w {
        WorkKind::Spin { .. } => "spin",
        WorkKind::Fill { .. } => "fill",
        WorkKind::H2D { .. } => "h2d",
        WorkKind::D2H { .. } => "d2h",
        WorkKind::Peer { .. } => "peer",
        WorkKind::Gemm { .. } => "gemm",
        WorkKind::Attention { .. } => "attention",
        WorkKind::Elementwise { .. } => "elementwise",
    }
}

/// The fake stream the executor must place schedule stream `j` on: its device's ordinal and
/// its rank among the schedule's streams of that device.
fn placement(s: &Schedule) -> Vec<FakeStream> {
    let mut next: BTreeMap<u16, usize> = BTreeMap::new();
    s.streams()
        .iter()
        .map(|st| {
            let slot = next.entry(st.device).or_default();
            *slot += 1;
            FakeStream {
                device: usize::from(st.device),
                index: *slot - 1,
            }
        })
        .collect()
}

/// Runs `s` on a fresh fake executor and checks everything the fake recorded; returns the
/// measured timeline and the log.
fn run_and_check(s: &Schedule, gpu: &FakeGpu, warmup_runs: u32) -> (Timeline, FakeLog) {
    let (mut ex, log) = open(gpu, warmup_runs);
    let t = ex.run(s).unwrap_or_else(|e| panic!("{e}"));
    check(s, &t, &log, warmup_runs + 1);
    (t, log)
}

/// Checks the fake's record of `runs` runs of `s` (the last one measured as `t`).
fn check(s: &Schedule, t: &Timeline, log: &FakeLog, runs: u32) {
    let runs = runs as usize;
    assert_eq!(log.faults(), Vec::<String>::new(), "driver misuse");
    assert_eq!(log.hazards(), Vec::<String>::new(), "buffer hazards");
    // Ops start after their dependencies and their stream predecessors, exactly (the fake's
    // clocks are exact; f32 milliseconds round monotonically).
    assert_valid(s, t, "cuda", 0.0);

    let place = placement(s);
    let streams = s.streams();
    let work = log.work();
    let mut on: BTreeMap<FakeStream, Vec<&Work>> = BTreeMap::new();
    for w in &work {
        on.entry(w.stream).or_default().push(w);
    }
    // One head-start spin per run, on one stream.
    let spins: Vec<&Work> = work
        .iter()
        .filter(|w| matches!(w.kind, WorkKind::Spin { .. }))
        .collect();
    assert_eq!(spins.len(), runs, "one head-start kernel per run");
    assert!(spins.iter().all(|w| w.stream == spins[0].stream));

    // Per schedule stream: its ops' work, in order, once per run, on the stream the executor
    // assigns it — and nothing else there.
    let mut expected_counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut op_work: Vec<Option<&Work>> = vec![None; s.len()];
    for (j, st) in streams.iter().enumerate() {
        let fs = place[j];
        let ops: Vec<(usize, WorkKind)> = s
            .ops()
            .iter()
            .enumerate()
            .filter(|(_, o)| o.stream.index() == j)
            .filter_map(|(i, o)| expected(&o.kind, st.kind, fs.device).map(|w| (i, w)))
            .collect();
        for (_, w) in &ops {
            *expected_counts.entry(kind_name(w)).or_default() += 1;
        }
        let got: Vec<&Work> = on
            .get(&fs)
            .map(|v| v.iter().copied().filter(|w| !setup(w)).collect())
            .unwrap_or_default();
        assert_eq!(
            got.len(),
            runs * ops.len(),
            "schedule stream {j} ({:?}) on {fs:?}",
            st.kind
        );
        for (r, chunk) in got.chunks(ops.len().max(1)).enumerate() {
            for ((i, want), w) in ops.iter().zip(chunk) {
                assert_eq!(&w.kind, want, "run {r}, op {i} ({})", s.label(&s.ops()[*i]));
                // Copies on copy streams, kernels on compute streams.
                let ok = match w.kind {
                    WorkKind::H2D { .. } => st.kind == StreamKind::H2D,
                    WorkKind::D2H { .. } => st.kind == StreamKind::D2H,
                    WorkKind::Peer { .. } => matches!(st.kind, StreamKind::Peer { .. }),
                    _ => st.kind == StreamKind::Compute,
                };
                assert!(ok, "op {i}: {:?} on a {:?} stream", w.kind, st.kind);
                if r + 1 == runs {
                    op_work[*i] = Some(w);
                }
            }
        }
    }
    // No work on a stream the schedule does not use.
    for (fs, v) in &on {
        assert!(
            place.contains(fs) || v.iter().all(|w| setup(w)),
            "work on unassigned {fs:?}"
        );
    }
    // Op count and kinds of the last run match the schedule.
    let mut got_counts: BTreeMap<&str, usize> = BTreeMap::new();
    for w in op_work.iter().flatten() {
        *got_counts.entry(kind_name(&w.kind)).or_default() += 1;
    }
    assert_eq!(got_counts, expected_counts);

    // Causal order, whatever the timing: the driver orders each op's work (by stream order,
    // events or host synchronisation) after the work of every dependency (through ops that
    // issue no work, to the work they wait for).
    let mut implies: Vec<Vec<usize>> = vec![Vec::new(); s.len()];
    for i in 0..s.len() {
        let mut need: Vec<usize> = Vec::new();
        for d in s.deps(OpId(i as u32)) {
            match op_work[d.index()] {
                Some(_) => need.push(d.index()),
                None => need.extend(&implies[d.index()]),
            }
        }
        need.sort_unstable();
        need.dedup();
        match op_work[i] {
            Some(w) => {
                for &p in &need {
                    assert!(
                        w.happens_after(op_work[p].unwrap()),
                        "op {i} ({}) is not ordered after its dependency {p} ({})",
                        s.label(&s.ops()[i]),
                        s.label(&s.ops()[p])
                    );
                }
                implies[i] = vec![i];
            }
            None => implies[i] = need,
        }
    }

    // The measured run against the closed form of the schedule's dependencies: each op starts
    // when its stream predecessor and its dependencies have ended, from the reference (the end
    // of the run's head-start kernel), not a nanosecond earlier or later.
    let reference = spins[runs - 1].end_ns;
    let mut end = vec![0u64; s.len()];
    let mut stream_end = vec![reference; streams.len()];
    for (i, op) in s.ops().iter().enumerate() {
        let j = op.stream.index();
        let start = s
            .deps(OpId(i as u32))
            .iter()
            .map(|d| end[d.index()])
            .fold(stream_end[j], u64::max);
        end[i] = match op_work[i] {
            Some(w) => {
                assert_eq!(
                    w.start_ns,
                    start,
                    "op {i} ({}) starts at {} ns, its dependencies allow {} ns",
                    s.label(op),
                    w.start_ns,
                    start
                );
                w.end_ns
            }
            None => start,
        };
        stream_end[j] = end[i];
        // The executor's timeline is the same, through f32 milliseconds.
        let close = |got: f64, want_ns: u64| {
            let want = (want_ns - reference) as f64 * 1e-9;
            (got - want).abs() <= 1e-9 + 1e-6 * want
        };
        let span = t.spans[i];
        assert!(
            close(span.start, start) && close(span.end, end[i]),
            "op {i}: timeline {span:?}, fake [{start}, {}] ns from {reference}",
            end[i]
        );
    }
}

#[test]
fn kvpr_with_a_partial_split_runs_on_the_fake_driver() {
    let s = opt125m_recomputing(32);
    let (t, log) = run_and_check(&s, &FakeGpu::default(), 1);
    assert!(t.makespan() > 0.0);
    // The recompute path overlaps the transfers: some H2D work runs while a kernel runs.
    let work = log.work();
    let overlap = work.iter().any(|a| {
        matches!(a.kind, WorkKind::H2D { .. })
            && work.iter().any(|b| {
                matches!(b.kind, WorkKind::Gemm { .. })
                    && a.start_ns < b.end_ns
                    && b.start_ns < a.end_ns
            })
    });
    assert!(overlap, "no transfer overlapped a GEMM");
}

#[test]
fn full_transfer_runs_on_the_fake_driver() {
    let s = opt125m(Strategy::FULL_TRANSFER);
    run_and_check(&s, &FakeGpu::default(), 0);
}

#[test]
fn headinfer_runs_on_the_fake_driver() {
    let s = headinfer_schedule();
    run_and_check(&s, &FakeGpu::default(), 0);
}

#[test]
fn every_op_kind_runs_on_the_fake_driver() {
    // Both host memory kinds, every dtype, batched GEMMs, decode and prefill attention.
    let s = every_kind();
    let (_, log) = run_and_check(&s, &FakeGpu::default(), 1);
    let pinned: Vec<bool> = log
        .work()
        .iter()
        .filter_map(|w| match w.kind {
            WorkKind::H2D { pinned, .. } | WorkKind::D2H { pinned, .. } => Some(pinned),
            _ => None,
        })
        .collect();
    assert!(pinned.contains(&true) && pinned.contains(&false));
}

/// KV-Runahead on three devices: peer streams, cross-device events, per-device references.
fn runahead_schedule() -> Schedule {
    let m = ModelSpec::preset("llama-2-7b").unwrap();
    let hw = HardwareProfile::preset("a100-80g-sxm").unwrap();
    let cost = CostModel::new(&hw);
    let shape = Shape {
        batch: 1,
        gpu_batches: 1,
        prompt: 8192,
        gen_len: 1,
    };
    let options = Options::default().with(RunaheadOptions { devices: 3 });
    let p = plan(&m, &hw, &cost, &shape, Strategy::RUNAHEAD, &options).unwrap();
    assert_eq!(
        p.decisions
            .get::<kvplan_planner::runahead::RunaheadDetails>()
            .unwrap()
            .devices_used,
        3
    );
    p.schedule
}

#[test]
fn a_runahead_chain_runs_on_three_fake_devices() {
    let s = runahead_schedule();
    let gpu = FakeGpu {
        devices: 3,
        ..FakeGpu::default()
    };
    let (_, log) = run_and_check(&s, &gpu, 0);
    let calls = log.calls();
    for (from, to) in [(0, 1), (1, 2)] {
        assert!(calls.contains(&Call::EnablePeer { from, to }));
        assert!(log.work().iter().any(|w| w.stream.device == from
            && matches!(w.kind, WorkKind::Peer { to: t, .. } if t == to)));
    }
    // Devices 1 and 2 take their reference from device 0's: a stream of each waits on an event
    // of device 0.
    for d in [1, 2] {
        assert!(calls.iter().any(|c| matches!(c,
            Call::Wait { stream, event, .. } if stream.device == d && event.device == 0)));
    }
    // Fewer devices than the schedule uses: a typed error, not a panic.
    let (mut ex, _) = open(
        &FakeGpu {
            devices: 2,
            ..FakeGpu::default()
        },
        0,
    );
    let e = ex.run(&s).unwrap_err();
    assert!(
        matches!(e, Error::Unsupported(ref m) if m.contains("3 devices")),
        "{e}"
    );
}

#[test]
fn the_fake_timeline_is_deterministic() {
    let s = opt125m_recomputing(32);
    let a = run_and_check(&s, &FakeGpu::default(), 1);
    let b = run_and_check(&s, &FakeGpu::default(), 1);
    // The device spans are the fake's clocks; the host's issue spans are real wall time.
    assert_eq!(a.0.spans, b.0.spans);
    assert_eq!(a.0.host.len(), b.0.host.len());
    assert_eq!(a.1.work(), b.1.work());
}

/// One executor runs several schedules: buffers are kept, grown and freed between runs, never
/// while a stream still uses them.
#[test]
fn buffers_are_reused_and_reallocated_across_schedules_without_hazards() {
    let (mut ex, log) = open(&FakeGpu::default(), 1);
    let schedules = [
        opt125m(Strategy::FULL_TRANSFER),
        every_kind(),
        opt125m_recomputing(32),
        opt125m(Strategy::FULL_TRANSFER),
    ];
    let mut freed = 0;
    for s in &schedules {
        log.clear_calls();
        let t = ex.run(s).unwrap();
        freed += log
            .calls()
            .iter()
            .filter(|c| matches!(c, Call::Free { .. }))
            .count();
        check(s, &t, &log, 2);
    }
    assert!(freed > 0, "no buffer was reallocated");
}

/// The host's issue of every op is timed (its waits, events and launch or copy call): one span
/// per op, in each stream's order, never overlapping on one stream's thread; and an idle
/// synchronisation is a real `synchronize` call, timed.
#[test]
fn the_host_issue_of_every_op_is_timed_in_stream_order() {
    let s = opt125m_recomputing(32);
    let (t, _) = run_and_check(&s, &FakeGpu::default(), 1);
    assert_eq!(t.host.len(), s.len());
    for (i, _) in s.streams().iter().enumerate() {
        let mut prev: Option<OpId> = None;
        let mut cur = s.first_in_stream(kvplan_vocab::schedule::StreamId(i as u16));
        while let Some(op) = cur {
            let h = t.host[op.index()];
            assert!(h.start >= 0.0 && h.end >= h.start, "op {}: {h:?}", op.0);
            if let Some(p) = prev {
                assert!(
                    h.start >= t.host[p.index()].end,
                    "op {} issued before op {}",
                    op.0,
                    p.0
                );
            }
            prev = Some(op);
            cur = s.next_in_stream(op);
        }
    }
    let (mut ex, log) = open(&FakeGpu::default(), 0);
    let before = log.calls().len();
    let sync = ex.idle_sync_s(10).unwrap();
    assert!(sync.is_finite() && sync >= 0.0, "{sync}");
    let syncs = log.calls()[before..]
        .iter()
        .filter(|c| matches!(c, Call::Synchronize { .. }))
        .count();
    // One to drain the stream, then the ten timed.
    assert_eq!(syncs, 11);
}
