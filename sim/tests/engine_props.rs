//! Property tests of the discrete-event engine (`kvplan_sim::run`, `run_with`, `simulate`).
//!
//! Reference models: with one engine per stream the engine must reproduce
//! `reference_spans` (the closed-form earliest start of every op) bit for bit; with shared
//! engines every span must respect dependencies, stream order and engine exclusivity, the engine
//! must never idle while one of its streams has a ready op, and the makespan is bounded below by
//! the critical path and by each engine's total work.

use kvplan_planner::plan::{Options, Shape, Strategy as PlanStrategy, WeightsPlacement, plan};
use kvplan_sim::{EngineMap, reference_spans, run, run_with, simulate};
use kvplan_vocab::hardware::Duplex;
use kvplan_vocab::schedule::{
    ElemKind, HostMemory, OpId, OpKind, Payload, Phase, Schedule, ScheduleBuilder, StreamId,
    StreamKind, Tag,
};
use kvplan_vocab::timeline::{Run, Span, Timeline, write_chrome_trace, write_csv};
use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};
use proptest::prelude::*;

// ---------------------------------------------------------------------------------------------
// Random schedules
// ---------------------------------------------------------------------------------------------

/// A stream of a random schedule: `(device, kind)`.
type StreamSpec = (u16, StreamKind);

/// A random op: stream selector, dependency selectors (reduced modulo the op's index), duration.
type OpSpec = (usize, Vec<usize>, f64);

fn stream_kind() -> impl Strategy<Value = StreamKind> {
    prop_oneof![
        3 => Just(StreamKind::Compute),
        2 => Just(StreamKind::H2D),
        2 => Just(StreamKind::D2H),
        1 => (0u16..2).prop_map(|to| StreamKind::Peer { to }),
    ]
}

/// 2..=6 streams; the first two are compute streams on devices 0 and 1 so every schedule has
/// several compute streams, the rest are of any kind on either device.
fn streams() -> impl Strategy<Value = Vec<StreamSpec>> {
    prop::collection::vec((0u16..2, stream_kind()), 0..=4).prop_map(|rest| {
        let mut v = vec![(0, StreamKind::Compute), (1, StreamKind::Compute)];
        v.extend(rest);
        v
    })
}

/// Durations with many zeros and exact ties: zero, a multiple of 1/4 (sums of these are exact,
/// so different paths end at bit-identical instants), or an arbitrary value.
fn duration() -> impl Strategy<Value = f64> {
    prop_oneof![
        1 => Just(0.0),
        3 => (0u32..8).prop_map(|q| f64::from(q) * 0.25),
        2 => 0.0..5.0f64,
    ]
}

fn op_specs() -> impl Strategy<Value = Vec<OpSpec>> {
    prop::collection::vec(
        (
            any::<usize>(),
            prop::collection::vec(any::<usize>(), 0..=3),
            duration(),
        ),
        1..=400,
    )
}

fn tag(step: u32) -> Tag {
    Tag {
        step,
        layer: 0,
        batch: 0,
        group: Tag::NONE,
        phase: Phase::Decode,
    }
}

fn op_for(kind: StreamKind) -> OpKind {
    match kind {
        StreamKind::Compute => OpKind::Elementwise {
            kind: ElemKind::Other,
            bytes: 1,
            rows: 0,
        },
        StreamKind::H2D => OpKind::H2D {
            bytes: 1,
            payload: Payload::Cache,
            host: HostMemory::Pinned,
        },
        StreamKind::D2H => OpKind::D2H {
            bytes: 1,
            payload: Payload::Cache,
            host: HostMemory::Pinned,
        },
        StreamKind::Peer { .. } => OpKind::PeerSend { bytes: 1 },
    }
}

/// Builds the schedule and its durations.
fn build(streams: &[StreamSpec], ops: &[OpSpec]) -> (Schedule, Vec<f64>) {
    let mut b = ScheduleBuilder::new();
    let ids: Vec<StreamId> = streams
        .iter()
        .enumerate()
        .map(|(i, &(dev, kind))| b.stream(dev, kind, format!("s{i}")))
        .collect();
    let label = b.label("op");
    let mut durations = Vec::with_capacity(ops.len());
    for (i, (s, deps, d)) in ops.iter().enumerate() {
        let s = s % streams.len();
        let deps: Vec<Option<OpId>> = if i == 0 {
            Vec::new()
        } else {
            deps.iter().map(|x| Some(OpId((x % i) as u32))).collect()
        };
        b.push(op_for(streams[s].1), ids[s], label, tag(i as u32), &deps);
        durations.push(*d);
    }
    (b.build(), durations)
}

/// Engine maps: how streams share engines.
#[derive(Debug, Clone)]
enum MapSpec {
    OnePerStream,
    /// `EngineMap::for_link(.., Duplex::Half)`: H2D and D2H of a device share one engine.
    HalfDuplex,
    /// Every stream on one engine.
    AllShared,
    /// `engine_of[s] = sel[s] % streams` (random sharing, unused engine numbers allowed).
    Random(Vec<usize>),
}

fn map_spec() -> impl Strategy<Value = MapSpec> {
    prop_oneof![
        1 => Just(MapSpec::OnePerStream),
        1 => Just(MapSpec::HalfDuplex),
        1 => Just(MapSpec::AllShared),
        3 => prop::collection::vec(any::<usize>(), 6).prop_map(MapSpec::Random),
    ]
}

fn engine_map(spec: &MapSpec, schedule: &Schedule) -> EngineMap {
    let n = schedule.streams().len();
    match spec {
        MapSpec::OnePerStream => EngineMap::one_per_stream(schedule),
        MapSpec::HalfDuplex => EngineMap::for_link(schedule, Duplex::Half),
        MapSpec::AllShared => EngineMap {
            engine_of: vec![0; n],
        },
        MapSpec::Random(sel) => EngineMap {
            engine_of: (0..n).map(|s| (sel[s] % n) as u32).collect(),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Invariants
// ---------------------------------------------------------------------------------------------

/// The op before each op on its stream.
fn stream_predecessors(schedule: &Schedule) -> Vec<Option<usize>> {
    let mut last = vec![None; schedule.streams().len()];
    schedule
        .ops()
        .iter()
        .enumerate()
        .map(|(i, op)| last[op.stream.index()].replace(i))
        .collect()
}

/// Checks every property a valid simulation of `schedule` with `durations` on `engines` has.
fn check_invariants(
    schedule: &Schedule,
    durations: &[f64],
    engines: &EngineMap,
    spans: &[Span],
) -> Result<(), TestCaseError> {
    let ops = schedule.ops();
    prop_assert_eq!(spans.len(), ops.len());
    let pred = stream_predecessors(schedule);
    // Earliest time each op could start if it had its engine to itself.
    let mut ready = vec![0.0f64; ops.len()];
    // Critical path through dependency and stream-order edges, computed independently of the
    // library's reference model.
    let mut path = vec![0.0f64; ops.len()];
    for (i, span) in spans.iter().enumerate() {
        prop_assert!(
            span.start.is_finite() && span.start >= 0.0,
            "op {i}: {span:?}"
        );
        // The engine computes `end = start + duration`; `end - start` can differ from the
        // duration by rounding, so the exact statement is about the sum.
        prop_assert_eq!(
            span.end,
            span.start + durations[i],
            "op {} does not last its duration",
            i
        );
        let mut r = 0.0f64;
        let mut p = 0.0f64;
        for d in schedule.deps(OpId(i as u32)) {
            let dep = spans[d.index()];
            prop_assert!(
                span.start >= dep.end,
                "op {i} starts at {} before its dependency {} ends at {}",
                span.start,
                d.0,
                dep.end
            );
            r = r.max(dep.end);
            p = p.max(path[d.index()]);
        }
        if let Some(q) = pred[i] {
            prop_assert!(
                span.start >= spans[q].end,
                "op {i} starts at {} before op {q} on its stream ends at {}",
                span.start,
                spans[q].end
            );
            r = r.max(spans[q].end);
            p = p.max(path[q]);
        }
        ready[i] = r;
        path[i] = p + durations[i];
    }
    // Engine exclusivity and work conservation.
    let n_engines = engines
        .engine_of
        .iter()
        .map(|&e| e as usize + 1)
        .max()
        .unwrap_or(0);
    let mut by_engine: Vec<Vec<usize>> = vec![Vec::new(); n_engines];
    for (i, op) in ops.iter().enumerate() {
        by_engine[engines.engine_of[op.stream.index()] as usize].push(i);
    }
    let mut max_work = 0.0f64;
    for (e, list) in by_engine.iter_mut().enumerate() {
        list.sort_by(|&a, &b| {
            spans[a]
                .start
                .total_cmp(&spans[b].start)
                .then(spans[a].end.total_cmp(&spans[b].end))
        });
        for w in list.windows(2) {
            let (a, b) = (spans[w[0]], spans[w[1]]);
            prop_assert!(
                b.start >= a.end,
                "engine {e}: op {} [{}, {}] overlaps op {} [{}, {}]",
                w[0],
                a.start,
                a.end,
                w[1],
                b.start,
                b.end
            );
        }
        max_work = max_work.max(list.iter().map(|&i| durations[i]).sum());
        // Busy segments of the engine (back-to-back ops merge).
        let mut busy: Vec<(f64, f64)> = Vec::new();
        for &i in list.iter() {
            let s = spans[i];
            match busy.last_mut() {
                Some(last) if s.start <= last.1 => last.1 = last.1.max(s.end),
                _ => busy.push((s.start, s.end)),
            }
        }
        // An op that waited past its ready time waited for its engine: the engine was busy
        // without a gap from the ready time to the op's start.
        for &i in list.iter() {
            if spans[i].start > ready[i] {
                prop_assert!(
                    busy.iter()
                        .any(|&(a, b)| a <= ready[i] && spans[i].start <= b),
                    "engine {e} idled while op {i} was ready at {} (started {})",
                    ready[i],
                    spans[i].start
                );
            }
        }
    }
    let makespan = spans.iter().fold(0.0f64, |m, s| m.max(s.end));
    let critical = path.iter().fold(0.0f64, |m, &x| m.max(x));
    prop_assert!(
        makespan >= critical,
        "makespan {makespan} < critical path {critical}"
    );
    // Summing one engine's durations can round differently from the chain of `start + d`
    // additions that produced the makespan, so allow a few ulps here (relative 1e-12).
    prop_assert!(
        makespan >= max_work * (1.0 - 1e-12),
        "makespan {makespan} < busiest engine's work {max_work}"
    );
    Ok(())
}

fn bits(spans: &[Span]) -> Vec<(u64, u64)> {
    spans
        .iter()
        .map(|s| (s.start.to_bits(), s.end.to_bits()))
        .collect()
}

proptest! {
    #![proptest_config(crate::props::config(128))]

    /// 2a: one engine per stream reproduces the closed-form reference bit for bit.
    #[test]
    fn one_engine_per_stream_matches_reference(streams in streams(), ops in op_specs()) {
        let (schedule, durations) = build(&streams, &ops);
        let engines = EngineMap::one_per_stream(&schedule);
        let spans = run(&schedule, &durations, &engines).unwrap();
        let reference = reference_spans(&schedule, &durations);
        if bits(&spans) != bits(&reference) {
            let i = (0..spans.len())
                .find(|&i| spans[i].start.to_bits() != reference[i].start.to_bits()
                    || spans[i].end.to_bits() != reference[i].end.to_bits())
                .unwrap();
            prop_assert!(false, "op {i}: engine {:?}, reference {:?}", spans[i], reference[i]);
        }
        check_invariants(&schedule, &durations, &engines, &spans)?;
    }

    /// 2b: with any sharing of engines the timeline obeys every scheduling rule; 2c: running
    /// twice gives identical spans, and `run_with` agrees with `run`.
    #[test]
    fn shared_engines_obey_the_rules(streams in streams(), ops in op_specs(), map in map_spec()) {
        let (schedule, durations) = build(&streams, &ops);
        let engines = engine_map(&map, &schedule);
        let spans = run(&schedule, &durations, &engines).unwrap();
        check_invariants(&schedule, &durations, &engines, &spans)?;
        let again = run(&schedule, &durations, &engines).unwrap();
        prop_assert_eq!(bits(&spans), bits(&again));
        let with = run_with(&schedule, &engines, |i| durations[i]).unwrap();
        prop_assert_eq!(bits(&spans), bits(&with));
    }
}

// ---------------------------------------------------------------------------------------------
// Tie-breaking (2d)
// ---------------------------------------------------------------------------------------------

/// The engine's tie-breaking order, pinned:
/// 1. two streams on one engine with both heads ready at t = 0: the lower op index runs first,
///    whatever the stream order;
/// 2. completions at one instant are all applied before any engine dispatches: two ops end at
///    t = 1 — `a` (started first, so its completion is processed first) releases op `d`, `b`
///    releases op `c` with a lower index; both `c` and `d` wait on one shared engine. Applying
///    all completions first makes `c` (lower index) run at 1 and `d` at 2; dispatching after
///    `a`'s completion alone would run `d` first.
#[test]
fn tie_breaking_order_is_pinned() {
    // Case 1: op 0 on stream 1, op 1 on stream 0, one shared engine.
    let mut b = ScheduleBuilder::new();
    let s0 = b.stream(0, StreamKind::H2D, "h2d");
    let s1 = b.stream(0, StreamKind::D2H, "d2h");
    let l = b.label("x");
    let d2h = op_for(StreamKind::D2H);
    let h2d = op_for(StreamKind::H2D);
    b.push(d2h, s1, l, tag(0), &[]);
    b.push(h2d, s0, l, tag(0), &[]);
    b.push(h2d, s0, l, tag(0), &[]);
    let schedule = b.build();
    let shared = EngineMap::for_link(&schedule, Duplex::Half);
    assert_eq!(shared.engine_of, vec![0, 0]);
    let spans = run(&schedule, &[1.0, 1.0, 1.0], &shared).unwrap();
    let starts: Vec<f64> = spans.iter().map(|s| s.start).collect();
    assert_eq!(starts, vec![0.0, 1.0, 2.0]);
    // With separate engines both streams start at once.
    let spans = run(
        &schedule,
        &[1.0, 1.0, 1.0],
        &EngineMap::one_per_stream(&schedule),
    )
    .unwrap();
    let starts: Vec<f64> = spans.iter().map(|s| s.start).collect();
    assert_eq!(starts, vec![0.0, 0.0, 1.0]);

    // Case 2.
    let mut b = ScheduleBuilder::new();
    let x = b.stream(0, StreamKind::Compute, "x"); // engine 0
    let y = b.stream(1, StreamKind::Compute, "y"); // engine 1
    let s1 = b.stream(0, StreamKind::H2D, "s1"); // engine 2
    let s2 = b.stream(0, StreamKind::D2H, "s2"); // engine 2
    let l = b.label("x");
    let k = op_for(StreamKind::Compute);
    let a = b.push(k, x, l, tag(0), &[]);
    let bb = b.push(k, y, l, tag(0), &[]);
    let c = b.push(d2h, s2, l, tag(0), &[Some(bb)]);
    let d = b.push(h2d, s1, l, tag(0), &[Some(a)]);
    let schedule = b.build();
    let engines = EngineMap {
        engine_of: vec![0, 1, 2, 2],
    };
    let spans = run(&schedule, &[1.0; 4], &engines).unwrap();
    assert_eq!(
        spans[a.index()],
        Span {
            start: 0.0,
            end: 1.0
        }
    );
    assert_eq!(
        spans[bb.index()],
        Span {
            start: 0.0,
            end: 1.0
        }
    );
    assert_eq!(
        spans[c.index()],
        Span {
            start: 1.0,
            end: 2.0
        },
        "c runs first"
    );
    assert_eq!(
        spans[d.index()],
        Span {
            start: 2.0,
            end: 3.0
        },
        "d waits for c"
    );
    // The same with zero-length releasing ops: everything ends at t = 0.
    let spans = run(&schedule, &[0.0, 0.0, 1.0, 1.0], &engines).unwrap();
    assert_eq!(spans[c.index()].start, 0.0);
    assert_eq!(spans[d.index()].start, 1.0);
}

// ---------------------------------------------------------------------------------------------
// Real plans (2c, 2e)
// ---------------------------------------------------------------------------------------------

fn setup(model: &str) -> (ModelSpec, HardwareProfile, CostModel) {
    let m = ModelSpec::preset(model).unwrap();
    let hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
    let cost = CostModel::new(&hw);
    (m, hw, cost)
}

fn exports(schedule: &Schedule, timeline: &Timeline) -> (Vec<u8>, Vec<u8>) {
    let runs = [Run {
        name: "kvpr",
        schedule,
        timeline,
    }];
    let mut json = Vec::new();
    write_chrome_trace(&runs, &mut json).unwrap();
    let mut csv = Vec::new();
    write_csv(&runs, &mut csv).unwrap();
    (json, csv)
}

/// 2c: planning and simulating twice gives byte-identical Chrome traces and CSV, for each
/// strategy; `simulate` is `run` with the cost model's durations and the profile's engines.
#[test]
fn real_plans_simulate_deterministically() {
    for (model, strategy) in [
        ("opt-125m", PlanStrategy::KVPR),
        ("opt-1.3b", PlanStrategy::KVPR),
        ("opt-1.3b", PlanStrategy::FULL_TRANSFER),
    ] {
        let (m, hw, cost) = setup(model);
        let shape = Shape {
            batch: 8,
            gpu_batches: 2,
            prompt: 64,
            gen_len: 4,
        };
        let opts = Options::default();
        let p1 = plan(&m, &hw, &cost, &shape, strategy, &opts).unwrap();
        let p2 = plan(&m, &hw, &cost, &shape, strategy, &opts).unwrap();
        assert_eq!(p1.schedule, p2.schedule);
        let t1 = simulate(&p1.schedule, &cost).unwrap();
        let t2 = simulate(&p2.schedule, &cost).unwrap();
        let (j1, c1) = exports(&p1.schedule, &t1);
        let (j2, c2) = exports(&p2.schedule, &t2);
        assert!(j1 == j2, "{model}: Chrome traces differ");
        assert!(c1 == c2, "{model}: CSVs differ");
        assert!(j1.len() > 1000 && c1.len() > 1000);
        let durations: Vec<f64> = p1
            .schedule
            .ops()
            .iter()
            .map(|o| cost.duration(&o.kind))
            .collect();
        let engines = EngineMap::for_link(&p1.schedule, cost.duplex());
        let spans = run(&p1.schedule, &durations, &engines).unwrap();
        assert_eq!(bits(&spans), bits(&t1.spans));
        check_invariants(&p1.schedule, &durations, &engines, &spans).unwrap();
        // A half-duplex link on the same plan still obeys every rule.
        let half = EngineMap::for_link(&p1.schedule, Duplex::Half);
        let spans = run(&p1.schedule, &durations, &half).unwrap();
        check_invariants(&p1.schedule, &durations, &half, &spans).unwrap();
    }
}

/// `(step, layer, GPU batch)`: one unit of work in a plan.
type Unit = (u32, u16, u16);

fn unit(tag: &Tag) -> Unit {
    (tag.step, tag.layer, tag.batch)
}

/// 2e: in a simulated KVPR plan with an interior split, every `load_kv` / `load_x` ends before
/// the kernel that consumes it starts (attention / recompute of the same unit), and the
/// attention of each unit starts after both loads of that unit. Row-by-row and
/// column-by-column (two GPU batches), weights resident, a fixed interior split.
#[test]
fn kvpr_loads_finish_before_their_consumers() {
    use std::collections::BTreeMap;
    for gpu_batches in [1, 2] {
        let (m, hw, cost) = setup("opt-1.3b");
        let shape = Shape {
            batch: 64,
            gpu_batches,
            prompt: 256,
            gen_len: 4,
        };
        // A fixed interior split (the automatic one recomputes everything at this size).
        let opts = Options {
            weights: WeightsPlacement::Gpu,
            ..Options::default()
        }
        .with(kvplan_planner::plan::KvprOptions {
            split: kvplan_planner::plan::SplitPolicy::Tokens(100),
            ..Default::default()
        });
        let p = plan(&m, &hw, &cost, &shape, PlanStrategy::KVPR, &opts).unwrap();
        assert!(
            kvplan_planner::plan::splits(&p.decisions)
                .iter()
                .all(|s| 0 < s.split.recompute_tokens && s.split.recompute_tokens < s.seq_len),
            "the test needs interior splits: {:?}",
            kvplan_planner::plan::splits(&p.decisions)
        );
        let t = simulate(&p.schedule, &cost).unwrap();
        let s = &p.schedule;
        let mut by_label: BTreeMap<(&str, Unit), Vec<usize>> = BTreeMap::new();
        for (i, op) in s.ops().iter().enumerate() {
            by_label
                .entry((s.label(op), unit(&op.tag)))
                .or_default()
                .push(i);
        }
        let one = |label: &str, u: Unit| -> usize {
            let v = &by_label[&(label, u)];
            assert_eq!(v.len(), 1, "{label} of {u:?}");
            v[0]
        };
        let mut checked = 0;
        for step in 1..shape.gen_len {
            for layer in 0..m.num_layers as u16 {
                for g in 0..gpu_batches as u16 {
                    let u = (step, layer, g);
                    let load_kv = one("load_kv", u);
                    let load_x = one("load_x", u);
                    let recompute = one("recompute_kv", u);
                    let attention = one("attention", u);
                    assert!(matches!(
                        s.ops()[load_kv].kind,
                        OpKind::H2D {
                            payload: Payload::Cache,
                            ..
                        }
                    ));
                    assert!(matches!(
                        s.ops()[load_x].kind,
                        OpKind::H2D {
                            payload: Payload::RecomputeActivation,
                            ..
                        }
                    ));
                    // The schedule names the right producers...
                    assert!(
                        s.deps(OpId(attention as u32))
                            .contains(&OpId(load_kv as u32)),
                        "{u:?}"
                    );
                    assert!(
                        s.deps(OpId(recompute as u32))
                            .contains(&OpId(load_x as u32)),
                        "{u:?}"
                    );
                    // ...and the simulated timeline honours them.
                    let span = |i: usize| t.spans[i];
                    assert!(span(load_kv).end <= span(attention).start, "{u:?}");
                    assert!(span(load_x).end <= span(recompute).start, "{u:?}");
                    assert!(span(load_x).end <= span(attention).start, "{u:?}");
                    assert!(span(recompute).end <= span(attention).start, "{u:?}");
                    checked += 1;
                }
            }
        }
        assert_eq!(
            checked,
            (shape.gen_len - 1) as usize * m.num_layers as usize * gpu_batches as usize
        );
    }
}

/// An engine map with the wrong number of streams is rejected, but as
/// `Error::InvalidDurations`, so the message reads "durations: engine map does not cover every
/// stream" and callers matching on the variant blame the durations.
#[test]
fn engine_map_mismatch_is_not_a_durations_error() {
    let mut b = ScheduleBuilder::new();
    let c = b.stream(0, StreamKind::Compute, "c");
    let l = b.label("x");
    b.push(op_for(StreamKind::Compute), c, l, tag(0), &[]);
    let schedule = b.build();
    let bad = EngineMap {
        engine_of: vec![0, 1],
    };
    let e = run(&schedule, &[1.0], &bad).unwrap_err();
    assert!(
        !matches!(e, kvplan_sim::Error::InvalidDurations(_)),
        "engine map error reported as a durations error: {e}"
    );
    // An engine id far beyond the streams is refused, not allocated for.
    let huge = EngineMap {
        engine_of: vec![u32::MAX],
    };
    let e = run(&schedule, &[1.0], &huge).unwrap_err();
    assert!(matches!(e, kvplan_sim::Error::InvalidEngineMap(_)), "{e}");
}

// ---------------------------------------------------------------------------------------------
// The host thread and early-freed engines: an independent reference (issue 19)
// ---------------------------------------------------------------------------------------------

/// What one op of a hosted run costs: its duration, its occupancy of the engine (at most the
/// duration: a copy frees its engine before its completion), and its issue by the host.
#[derive(Debug, Clone, Copy)]
struct HostedOp {
    d: f64,
    occ: f64,
    issue: f64,
    blocking: bool,
    sync: Option<f64>,
}

/// Continuous values (no zeros, no quarter steps), so two paths meet at one instant only where
/// the rules make them (an op's end and the host's resumption after it), never by accident:
/// the reference below applies everything at an instant before the engines pick, and the
/// engine's order among events at one instant (its sequence numbers) is pinned separately
/// (`tie_breaking_order_is_pinned`).
fn hosted_ops() -> impl Strategy<Value = Vec<(usize, Vec<usize>, HostedOp)>> {
    let op = (
        0.01..5.0f64,
        prop_oneof![1 => Just(1.0f64), 1 => 0.05..1.0f64],
        0.001..2.0f64,
        prop::bool::weighted(0.15),
        prop::option::weighted(0.1, 0.01..1.0f64),
    )
        .prop_map(|(d, frac, issue, blocking, sync)| HostedOp {
            d,
            occ: d * frac,
            issue,
            blocking,
            sync,
        });
    prop::collection::vec(
        (
            any::<usize>(),
            prop::collection::vec(any::<usize>(), 0..=3),
            op,
        ),
        1..=60,
    )
}

/// The hosted engine's rules, written as a plain time-stepped simulation: at each instant the
/// host first (an issue that ends makes its op issued; the host is then free, or waits for a
/// blocking op's end; before an op after a synchronisation point it waits for every op issued
/// so far to end, then pays the synchronisation and the issue), then every free engine starts
/// the lowest-numbered op among its streams' heads that is issued and whose dependencies have
/// ended (a stream's next op is its head once the previous one freed the engine); then time
/// moves to the next instant anything happens. Returns the ops' spans and the host's spans.
fn reference_hosted(
    schedule: &Schedule,
    engines: &EngineMap,
    ops: &[HostedOp],
) -> (Vec<Span>, Vec<Span>) {
    let n = ops.len();
    let preds = stream_predecessors(schedule);
    let mut start: Vec<Option<f64>> = vec![None; n];
    let end = |start: &[Option<f64>], i: usize| start[i].map(|s| s + ops[i].d);
    let free = |start: &[Option<f64>], i: usize| start[i].map(|s| s + ops[i].occ.min(ops[i].d));
    let mut issued_at: Vec<Option<f64>> = vec![None; n];
    let inf = Span {
        start: f64::INFINITY,
        end: f64::INFINITY,
    };
    let mut host = vec![inf; n];
    let mut next = 0usize;
    let mut idle_at = Some(0.0f64);
    let mut issuing: Option<(usize, f64)> = None;
    let mut waiting: Option<usize> = None;
    let engine_of = |i: usize| engines.engine_of[schedule.ops()[i].stream.index()];
    let mut t = 0.0f64;
    loop {
        // The host at `t`.
        loop {
            if let Some((j, he)) = issuing
                && he <= t
            {
                issued_at[j] = Some(he);
                issuing = None;
                if ops[j].blocking {
                    waiting = Some(j);
                } else {
                    idle_at = Some(he);
                }
            }
            if let Some(j) = waiting
                && let Some(e) = end(&start, j)
                && e <= t
            {
                host[j].end = e;
                waiting = None;
                idle_at = Some(e);
            }
            if let Some(h0) = idle_at
                && next < n
            {
                let k = next;
                let s0 = match ops[k].sync {
                    None => Some(h0),
                    Some(_) => (0..k)
                        .map(|j| end(&start, j).filter(|&e| e <= t))
                        .try_fold(h0, |m, e| e.map(|e| m.max(e))),
                };
                if let Some(s0) = s0 {
                    let he = s0 + ops[k].sync.unwrap_or(0.0) + ops[k].issue;
                    host[k] = Span { start: s0, end: he };
                    issuing = Some((k, he));
                    idle_at = None;
                    next += 1;
                    continue;
                }
            }
            break;
        }
        // The engines at `t`.
        let mut busy: Vec<u32> = (0..n)
            .filter(|&i| start[i].is_some_and(|s| s <= t) && free(&start, i).is_some_and(|f| f > t))
            .map(engine_of)
            .collect();
        for i in 0..n {
            let ready = start[i].is_none()
                && issued_at[i].is_some_and(|a| a <= t)
                && preds[i].is_none_or(|p| free(&start, p).is_some_and(|f| f <= t))
                && schedule
                    .deps(OpId(i as u32))
                    .iter()
                    .all(|d| end(&start, d.index()).is_some_and(|e| e <= t));
            // Ops are looked at in index order, so the first ready op of a free engine is its
            // lowest-numbered one.
            if ready && !busy.contains(&engine_of(i)) {
                start[i] = Some(t);
                busy.push(engine_of(i));
            }
        }
        // The next instant.
        let later = |x: Option<f64>| x.filter(|&v| v > t);
        let mut candidates: Vec<f64> = (0..n)
            .flat_map(|i| [later(end(&start, i)), later(free(&start, i))])
            .flatten()
            .collect();
        candidates.extend(later(issuing.map(|(_, he)| he)));
        match candidates.into_iter().reduce(f64::min) {
            Some(nt) => t = nt,
            None => break,
        }
    }
    let spans = (0..n)
        .map(|i| {
            let s = start[i].expect("every op starts");
            Span {
                start: s,
                end: s + ops[i].d,
            }
        })
        .collect();
    (spans, host)
}

proptest! {
    #![proptest_config(crate::props::config(256))]

    /// The engine with a host thread and engines freed before an op's end agrees with the
    /// time-stepped reference on every op's span and every host span, for any sharing of
    /// engines, blocking copies and synchronisation points.
    #[test]
    fn hosted_engine_matches_a_time_stepped_reference(
        streams in streams(),
        ops in hosted_ops(),
        map in map_spec(),
    ) {
        let specs: Vec<OpSpec> = ops.iter().map(|(s, d, _)| (*s, d.clone(), 0.0)).collect();
        let (schedule, _) = build(&streams, &specs);
        let costs: Vec<HostedOp> = ops.iter().map(|o| o.2).collect();
        let engines = engine_map(&map, &schedule);
        let (spans, host) = kvplan_sim::engine::run_hosted_occupying(
            &schedule,
            &engines,
            |i| (costs[i].d, costs[i].occ),
            |i| kvplan_vocab::host::HostIssue {
                issue_s: costs[i].issue,
                blocking: costs[i].blocking,
                sync_before_s: costs[i].sync,
            },
        )
        .unwrap();
        let (want, want_host) = reference_hosted(&schedule, &engines, &costs);
        let close = |a: &Span, b: &Span| {
            (a.start - b.start).abs() <= 1e-9 * (1.0 + b.start.abs())
                && (a.end - b.end).abs() <= 1e-9 * (1.0 + b.end.abs())
        };
        for i in 0..costs.len() {
            prop_assert!(close(&spans[i], &want[i]), "op {i}: engine {:?}, reference {:?}", spans[i], want[i]);
            prop_assert!(close(&host[i], &want_host[i]), "op {i}: host {:?}, reference {:?}", host[i], want_host[i]);
        }
    }
}
