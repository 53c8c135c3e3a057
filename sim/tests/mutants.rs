//! Checks written against mutants that survived `cargo mutants -p kvplan-sim` (docs/testing.md,
//! "Mutation testing"): the engine's small public pieces the larger tests pass through without
//! looking at them.

use kvplan_sim::engine::{EngineMap, host_issue, makespan, run, simulate};
use kvplan_vocab::hardware::Duplex;
use kvplan_vocab::host::Implementation;
use kvplan_vocab::schedule::{ElemKind, OpKind, Phase, StreamId, StreamKind, Tag};
use kvplan_vocab::{CostModel, HardwareProfile, ScheduleBuilder};

const TAG: Tag = Tag {
    step: 1,
    layer: 0,
    batch: 0,
    group: Tag::NONE,
    phase: Phase::Decode,
};

const OP: OpKind = OpKind::Elementwise {
    kind: ElemKind::Other,
    bytes: 1 << 20,
    rows: 0,
};

/// `makespan` is the simulated timeline's last end, not a constant.
#[test]
fn makespan_is_the_timelines_end() {
    let mut b = ScheduleBuilder::new();
    let c = b.stream(0, StreamKind::Compute, "gpu0.compute");
    let l = b.label("k");
    for _ in 0..3 {
        b.push(OP, c, l, TAG, &[]);
    }
    let s = b.build();
    let cost = CostModel::new(&HardwareProfile::preset("a100-40g-pcie4").unwrap());
    let m = makespan(&s, &cost).unwrap();
    assert!(m > 0.0);
    assert_eq!(m, simulate(&s, &cost).unwrap().makespan());
}

/// A half-duplex link shares one copy engine between a device's H2D and D2H streams, and only
/// that device's: two devices keep two engines.
#[test]
fn half_duplex_shares_an_engine_per_device_only() {
    let mut b = ScheduleBuilder::new();
    let h0 = b.stream(0, StreamKind::H2D, "gpu0.h2d");
    let h1 = b.stream(1, StreamKind::H2D, "gpu1.h2d");
    let d1 = b.stream(1, StreamKind::D2H, "gpu1.d2h");
    let d0 = b.stream(0, StreamKind::D2H, "gpu0.d2h");
    let s = b.build();
    let m = EngineMap::for_link(&s, Duplex::Half);
    let e = |id: StreamId| m.engine_of[usize::from(id.0)];
    assert_eq!(e(d0), e(h0));
    assert_eq!(e(d1), e(h1));
    assert_ne!(e(h0), e(h1));
    let full = EngineMap::for_link(&s, Duplex::Full);
    assert_ne!(
        full.engine_of[usize::from(d0.0)],
        full.engine_of[usize::from(h0.0)]
    );
}

/// Durations are checked one by one: a NaN, an infinity or a negative time is refused.
#[test]
fn run_refuses_each_kind_of_bad_duration() {
    let mut b = ScheduleBuilder::new();
    let c = b.stream(0, StreamKind::Compute, "gpu0.compute");
    let l = b.label("k");
    b.push(OP, c, l, TAG, &[]);
    let s = b.build();
    let engines = EngineMap::one_per_stream(&s);
    for bad in [f64::NAN, f64::INFINITY, -1.0] {
        assert!(run(&s, &[bad], &engines).is_err(), "{bad} accepted");
    }
    assert!(run(&s, &[1e-3], &engines).is_ok());
}

/// The host's cost of a kernel follows the op's phase: vLLM 0.4 replays decode steps as CUDA
/// graphs and launches prefill eagerly, so a decode kernel costs the host less.
#[test]
fn host_issue_reads_the_phase() {
    let mut b = ScheduleBuilder::new();
    let c = b.stream(0, StreamKind::Compute, "gpu0.compute");
    let l = b.label("k");
    b.push(OP, c, l, TAG, &[]);
    b.push(
        OP,
        c,
        l,
        Tag {
            phase: Phase::Prefill,
            ..TAG
        },
        &[],
    );
    let s = b.build();
    let p = Implementation::VllmV0.profile();
    let mut issue = host_issue(&s, &p);
    let (decode, prefill) = (issue(0).issue_s, issue(1).issue_s);
    assert!(decode < prefill, "decode {decode} vs prefill {prefill}");
    assert_eq!(prefill, p.module_us(false) * 1e-6);
}

/// Engines touched at one instant choose in ascending engine order, so a zero-length op started
/// by a lower-numbered engine readies its dependent for a higher-numbered engine at that
/// instant. Engine 1 (streams b0, b1) frees at t = 1 before engine 0 does (its op started
/// earlier); engine 0 then starts the zero-length `z`, and engine 1 takes `y` (which waits for
/// `z`, and has a lower index than the ready `w`) at t = 1. Choosing in the order the engines
/// were touched would give engine 1 `w` first and `y` only at t = 2.
#[test]
fn engines_at_one_instant_choose_in_engine_order() {
    let mut b = ScheduleBuilder::new();
    let c0 = b.stream(0, StreamKind::Compute, "c0"); // engine 2
    let b0 = b.stream(0, StreamKind::Compute, "b0"); // engine 1
    let a0 = b.stream(0, StreamKind::Compute, "a0"); // engine 0
    let b1 = b.stream(0, StreamKind::Compute, "b1"); // engine 1
    let l = b.label("k");
    let x = b.push(OP, c0, l, TAG, &[]); // [0, 0.5]
    b.push(OP, b0, l, TAG, &[]); // p: [0, 1]
    b.push(OP, a0, l, TAG, &[Some(x)]); // r: [0.5, 1]
    let z = b.push(OP, a0, l, TAG, &[]); // zero-length, at 1
    let y = b.push(OP, b0, l, TAG, &[Some(z)]);
    let w = b.push(OP, b1, l, TAG, &[]);
    let s = b.build();
    let engines = EngineMap {
        engine_of: vec![2, 1, 0, 1],
    };
    let spans = run(&s, &[0.5, 1.0, 0.5, 0.0, 1.0, 1.0], &engines).unwrap();
    assert_eq!(spans[z.index()].start, 1.0);
    assert_eq!(spans[y.index()].start, 1.0, "y runs as soon as z ends");
    assert_eq!(spans[w.index()].start, 2.0, "w waits for y");
}

/// Runs `s` with the host thread on the engines `engine_of`: each op's (duration, occupancy)
/// and the host's non-blocking issue time. Returns the ops' spans and the host's.
fn issued(
    s: &kvplan_vocab::Schedule,
    engine_of: Vec<u32>,
    timing: &[(f64, f64)],
    issue: &[f64],
) -> (
    Vec<kvplan_vocab::timeline::Span>,
    Vec<kvplan_vocab::timeline::Span>,
) {
    kvplan_sim::engine::run_hosted_occupying(
        s,
        &EngineMap { engine_of },
        |i| timing[i],
        |i| kvplan_vocab::host::HostIssue {
            issue_s: issue[i],
            blocking: false,
            sync_before_s: None,
        },
    )
    .unwrap()
}

/// An issue that ends at the same instant as an op the host issued before that op started is
/// applied first (events at one instant in the order they were created), and the engines choose
/// right after it: `b`, issued at 0.85, takes the engine that `a` (a lower index, waiting for
/// `d`, which also ends at 0.85 but started after `b`'s issue began) would take once `d`'s end
/// is applied. Pinned: processing `d`'s end first would run `a` first.
#[test]
fn a_host_issue_and_an_end_at_one_instant_go_in_creation_order() {
    let mut b = ScheduleBuilder::new();
    let f = b.stream(0, StreamKind::Compute, "f"); // engine 1
    let s0 = b.stream(0, StreamKind::Compute, "s0"); // engine 0
    let s1 = b.stream(0, StreamKind::Compute, "s1"); // engine 0
    let l = b.label("k");
    b.push(OP, f, l, TAG, &[]); // p: issued 0.125, [0.125, 0.75]
    let d = b.push(OP, f, l, TAG, &[]); // issued 0.25, [0.75, 0.875]
    let a = b.push(OP, s0, l, TAG, &[Some(d)]); // issued 0.375
    let bb = b.push(OP, s1, l, TAG, &[]); // issue begins 0.375, ends 0.875
    let s = b.build();
    let timing = [(0.625, 0.625), (0.125, 0.125), (1.0, 1.0), (1.0, 1.0)];
    let (spans, host) = issued(&s, vec![1, 0, 0], &timing, &[0.125, 0.125, 0.125, 0.5]);
    assert_eq!(spans[d.index()].end, 0.875);
    assert_eq!(host[bb.index()].end, 0.875);
    assert_eq!(spans[bb.index()].start, 0.875, "b takes the engine");
    assert_eq!(spans[a.index()].start, 1.875, "a waits for b");
}

/// The other side of the same rule: when the earliest-created event at an instant is an op's
/// end, every op end at that instant is applied and the engines choose before the host's issue.
/// `e` (started at 0.25, before `b`'s issue began at 0.5) and `d` (started at 0.75) both end at
/// 0.875 with `b`'s issue: `a`, readied by `d`, takes the engine, and `b` waits. Both ways of
/// numbering the engines, so the earliest-created end is found by its creation order, not by
/// where its engine sits in the scan.
#[test]
fn an_end_created_before_the_host_issue_goes_first_with_every_end_at_that_instant() {
    for (f_engine, g_engine) in [(1, 2), (2, 1)] {
        let mut b = ScheduleBuilder::new();
        let f = b.stream(0, StreamKind::Compute, "f");
        let g = b.stream(0, StreamKind::Compute, "g");
        let s0 = b.stream(0, StreamKind::Compute, "s0");
        let s1 = b.stream(0, StreamKind::Compute, "s1");
        let l = b.label("k");
        b.push(OP, f, l, TAG, &[]); // p: issued 0.125, [0.125, 0.75]
        let e = b.push(OP, g, l, TAG, &[]); // issued 0.25, [0.25, 0.875]
        let d = b.push(OP, f, l, TAG, &[]); // issued 0.375, [0.75, 0.875]
        let a = b.push(OP, s0, l, TAG, &[Some(d)]); // issued 0.5
        let bb = b.push(OP, s1, l, TAG, &[]); // issue 0.5 to 0.875
        let s = b.build();
        let timing = [
            (0.625, 0.625),
            (0.625, 0.625),
            (0.125, 0.125),
            (1.0, 1.0),
            (1.0, 1.0),
        ];
        let issue = [0.125, 0.125, 0.125, 0.125, 0.375];
        let (spans, host) = issued(&s, vec![f_engine, g_engine, 0, 0], &timing, &issue);
        let why = format!("f on engine {f_engine}, g on {g_engine}");
        assert_eq!(spans[e.index()].end, 0.875, "{why}");
        assert_eq!(spans[d.index()].end, 0.875, "{why}");
        assert_eq!(host[bb.index()].end, 0.875, "{why}");
        assert_eq!(spans[a.index()].start, 0.875, "{why}: a takes the engine");
        assert_eq!(spans[bb.index()].start, 1.875, "{why}: b waits for a");
    }
}

/// A completion (a copy that freed its engine at 0.375 and ends at 1.125) created before a host
/// issue that ends at the same instant goes first: `a`, waiting for the copy, takes the engine
/// before `b`, whose issue began at 0.625.
#[test]
fn a_completion_created_before_a_host_issue_goes_first() {
    let mut b = ScheduleBuilder::new();
    let f = b.stream(0, StreamKind::Compute, "f");
    let s0 = b.stream(0, StreamKind::Compute, "s0");
    let s1 = b.stream(0, StreamKind::Compute, "s1");
    let l = b.label("k");
    let c = b.push(OP, f, l, TAG, &[]); // issued 0.125, [0.125, 1.125], engine free at 0.375
    let a = b.push(OP, s0, l, TAG, &[Some(c)]); // issued 0.625
    let bb = b.push(OP, s1, l, TAG, &[]); // issue 0.625 to 1.125
    let s = b.build();
    let timing = [(1.0, 0.25), (1.0, 1.0), (1.0, 1.0)];
    let (spans, host) = issued(&s, vec![1, 0, 0], &timing, &[0.125, 0.5, 0.5]);
    assert_eq!(spans[c.index()].end, 1.125);
    assert_eq!(host[bb.index()].end, 1.125);
    assert_eq!(spans[a.index()].start, 1.125, "a takes the engine");
    assert_eq!(spans[bb.index()].start, 2.125, "b waits for a");
}
