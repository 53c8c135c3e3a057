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
