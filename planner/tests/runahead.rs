//! KV-Runahead: the closed form against the simulator, the optimiser against brute force, the
//! plan's contract and errors, and the published behaviour (METHODS.md section 3).

use kvplan_planner::plan::{Options, Shape, Strategy, WeightsPlacement, plan};
use kvplan_planner::runahead::{
    self, Blocks, ChunkCosts, LinkOverride, Method, ModelCosts, RunaheadDetails, RunaheadOptions,
    even_partition, optimise, optimise_for_choice, optimise_on_grid, ttft, ttft_by_layers,
    ttft_lower_bound,
};
use kvplan_vocab::layers::attention_index;
use kvplan_vocab::layers::layer_kernels;
use kvplan_vocab::schedule::{OpKind, StreamKind};
use kvplan_vocab::timeline::{Window, metrics};
use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};
use proptest::prelude::*;
use proptest::strategy::Strategy as _;

fn shape(context: u32) -> Shape {
    Shape {
        batch: 1,
        gpu_batches: 1,
        prompt: context,
        gen_len: 1,
    }
}

fn opts(devices: u32) -> Options {
    Options::default().with(RunaheadOptions { devices })
}

/// `hw` with its peer link at `gbps` (else the profile's), as the scenario resolves it.
fn linked(hw: &HardwareProfile, gbps: Option<f64>) -> HardwareProfile {
    runahead::with_link_override(
        hw,
        &LinkOverride {
            gbps,
            latency_us: None,
        },
    )
    .unwrap()
}

fn run(m: &ModelSpec, hw: &str, devices: u32, gbps: Option<f64>, context: u32) -> RunaheadDetails {
    let hw = linked(&HardwareProfile::preset(hw).unwrap(), gbps);
    let cost = CostModel::new(&hw);
    plan(
        m,
        &hw,
        &cost,
        &shape(context),
        Strategy::RUNAHEAD,
        &opts(devices),
    )
    .unwrap()
    .decisions
    .get::<kvplan_planner::runahead::RunaheadDetails>()
    .cloned()
    .unwrap()
}

/// Ends of every op by the engine's closed form for one engine per stream.
fn reference_end(
    s: &kvplan_vocab::Schedule,
    cost: &CostModel,
    op: kvplan_vocab::schedule::OpId,
) -> f64 {
    let d: Vec<f64> = s.ops().iter().map(|o| cost.duration(&o.kind)).collect();
    kvplan_sim::engine::reference_spans(s, &d)[op.index()].end
}

fn details(model: &str, devices: u32, gbps: Option<f64>, context: u32) -> RunaheadDetails {
    run(
        &ModelSpec::preset(model).unwrap(),
        "a100-80g-sxm",
        devices,
        gbps,
        context,
    )
}

/// Every composition of `n` into `p` positive parts.
fn compositions(n: u32, p: usize, f: &mut dyn FnMut(&[u32])) {
    fn rec(left: u32, p: usize, cur: &mut Vec<u32>, f: &mut dyn FnMut(&[u32])) {
        if p == 1 {
            cur.push(left);
            f(cur);
            cur.pop();
            return;
        }
        for c in 1..=left.saturating_sub(p as u32 - 1) {
            cur.push(c);
            rec(left - c, p - 1, cur, f);
            cur.pop();
        }
    }
    if n as usize >= p {
        rec(n, p, &mut Vec::new(), f);
    }
}

fn brute<C: ChunkCosts>(costs: &C, n: u32, p: usize) -> (f64, Vec<u32>) {
    let mut best = (f64::INFINITY, Vec::new());
    compositions(n, p, &mut |c| {
        let t = ttft(costs, c);
        if t < best.0 {
            best = (t, c.to_vec());
        }
    });
    best
}

// ---- the timing model is the simulator's ----------------------------------------------------

#[test]
fn memoised_chunk_costs_are_the_layer_kernels() {
    // `ModelCosts` memoises the length-only parts of a chunk's cost in a direct-mapped table:
    // whatever else was looked up before (lengths that collide included), a chunk costs exactly
    // what `layer_kernels` gives, and what a fresh `ModelCosts` gives.
    let hw = HardwareProfile::preset("h200").unwrap();
    let cost = CostModel::new(&hw);
    for (model, batch) in [("llama-2-7b", 1u32), ("llama-3-8b", 3)] {
        let m = ModelSpec::preset(model).unwrap();
        let shared = ModelCosts::new(&m, &cost, batch);
        let mut x = 12345u64;
        for i in 0..3000u32 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let len = 1 + (x >> 33) as u32 % if i % 3 == 0 { 64 } else { 40000 };
            let start = (x >> 13) as u32 % 100_000;
            let got = shared.chunk(len, start);
            let fresh = ModelCosts::new(&m, &cost, batch).chunk(len, start);
            assert_eq!(got, fresh, "{model} b{batch} ({len}, {start})");
            let k = layer_kernels(&m, batch, len, start + len);
            let a = attention_index(&k);
            let d = |ops: &[(&str, _)]| {
                ops.iter()
                    .map(|o: &(&str, _)| cost.duration(&o.1))
                    .sum::<f64>()
            };
            assert_eq!(got.pre, d(&k[..a]));
            assert_eq!(got.attn, cost.duration(&k[a].1));
            assert_eq!(got.post, d(&k[a + 1..]));
        }
    }
}

#[test]
fn closed_form_equals_the_simulated_schedule() {
    let hw = HardwareProfile::preset("a100-80g-sxm").unwrap();
    for (model, gbps, partition, gen_len) in [
        ("llama-2-7b", Some(10.0), vec![4096], 1),
        ("llama-2-7b", Some(10.0), vec![2000, 1500, 596], 1),
        ("llama-2-7b", None, vec![1, 1, 3000, 95], 3),
        ("llama-3-8b", Some(1.0), vec![300, 3796], 1),
        ("llama-3-8b", None, vec![1103, 1045, 996, 952], 2),
        ("opt-1.3b", Some(30.0), vec![7, 700, 70, 7000, 13], 1),
    ] {
        let m = ModelSpec::preset(model).unwrap();
        let ro = LinkOverride {
            gbps,
            latency_us: Some(7.0),
        };
        let hwo = runahead::with_link_override(&hw, &ro).unwrap();
        let cost = CostModel::new(&hwo);
        let costs = ModelCosts::new(&m, &cost, 1);
        let closed = ttft(&costs, &partition);
        let layers = ttft_by_layers(&costs, &partition);
        let (schedule, sample) = runahead::chain_schedule(&m, 1, &partition, gen_len);
        let tl = kvplan_sim::simulate(&schedule, &cost).unwrap();
        let simulated = tl.span(sample).end;
        for (what, v) in [("closed form", closed), ("layer recurrence", layers)] {
            assert!(
                (v - simulated).abs() <= 1e-9 * simulated,
                "{model} {partition:?}: {what} {v} vs simulated {simulated}"
            );
        }
        // The prefill ends with the first token (non-last devices skip dead work).
        let met = metrics(&schedule, &tl, Window::Whole);
        assert!((met.prefill_end_s - simulated).abs() <= 1e-12 * simulated);
        let reference = reference_end(&schedule, &cost, sample);
        assert!((reference - simulated).abs() <= 1e-12 * simulated);
    }
}

#[test]
fn one_chunk_runs_alone_as_a_single_device_schedule() {
    // What `exec` runs on one GPU to measure a device's per-chunk prefill for real.
    let hw = HardwareProfile::preset("a100-80g-sxm").unwrap();
    let cost = CostModel::new(&hw);
    let m = ModelSpec::preset("llama-3-8b").unwrap();
    let costs = ModelCosts::new(&m, &cost, 1);
    let s = runahead::chunk_schedule(&m, 1, 2048, 6144);
    assert_eq!(s.streams().len(), 1);
    let sim = kvplan_sim::simulate(&s, &cost).unwrap().makespan();
    let c = costs.chunk(2048, 6144);
    let want = c.embed + f64::from(m.num_layers) * c.layer();
    assert!((sim - want).abs() <= 1e-9 * want, "{sim} vs {want}");
    let att = s
        .ops()
        .iter()
        .find(|o| matches!(o.kind, OpKind::Attention { .. }))
        .unwrap();
    assert!(matches!(
        att.kind,
        OpKind::Attention {
            q_len: 2048,
            kv_len: 8192,
            causal: true,
            ..
        }
    ));
}

#[test]
fn tensor_parallel_reference_equals_the_simulator() {
    let hw = HardwareProfile::preset("a100-80g-sxm").unwrap();
    let m = ModelSpec::preset("llama-2-7b").unwrap();
    let cost = CostModel::new(&linked(&hw, Some(10.0)));
    let (s, sample) = runahead::tensor_parallel_schedule(&m, 1, 4099, 4);
    let sim = kvplan_sim::simulate(&s, &cost).unwrap().span(sample).end;
    let reference = reference_end(&s, &cost, sample);
    assert!(
        (sim - reference).abs() <= 1e-12 * sim,
        "{sim} vs {reference}"
    );
    // A ring all-gather: every device sends the three chunks it does not own... per layer,
    // (P - 1) / P of the K,V of the context in all.
    let sent: u64 = s.ops().iter().map(|o| o.kind.link_bytes()).sum();
    let kv = 4099 * m.kv_bytes_per_token_layer() * u64::from(m.num_layers);
    assert_eq!(sent, 3 * kv);
}

// ---- the optimiser ----------------------------------------------------------------------------

#[test]
fn optimiser_equals_brute_force_on_small_cases() {
    // Block granularity: a unit is `unit` real tokens, so per-unit costs are large and the
    // integer structure matters; contexts up to 20 units are searched exactly by the DP.
    let hw = HardwareProfile::preset("a100-80g-sxm").unwrap();
    let mut checked = 0;
    for model in ["llama-2-7b", "llama-3-8b"] {
        let m = ModelSpec::preset(model).unwrap();
        for gbps in [300.0, 10.0, 3.0, 1.0] {
            let cost = CostModel::new(&linked(&hw, Some(gbps)));
            for (unit, n) in [(64u32, 20u32), (1024, 17), (3277, 20)] {
                let costs = Blocks {
                    inner: ModelCosts::new(&m, &cost, 1),
                    unit,
                };
                let opt = optimise(&costs, n, 4);
                assert!(opt.exact);
                for p in 1..=4usize {
                    let (bt, bp) = brute(&costs, n, p);
                    let got = &opt.by_devices[p - 1];
                    assert!(
                        (got.ttft_s - bt).abs() <= 1e-12 * bt,
                        "{model} {gbps} GB/s unit {unit} n {n} p {p}: dp {:?} {} vs brute {bp:?} {bt}",
                        got.partition,
                        got.ttft_s
                    );
                    assert_eq!(got.partition.iter().sum::<u32>(), n);
                    checked += 1;
                }
            }
        }
    }
    assert_eq!(checked, 2 * 4 * 3 * 4);
}

#[test]
fn token_refinement_never_loses_to_the_exact_block_optimum() {
    // 16384 tokens in 512-token blocks (32 units: the block search is exact); the token-level
    // search (48 coarse cells of 342 tokens, then refined) must do at least as well, and match a
    // much finer exact grid.
    let hw = HardwareProfile::preset("a100-80g-sxm").unwrap();
    for (model, gbps) in [
        ("llama-2-7b", 300.0),
        ("llama-2-7b", 10.0),
        ("llama-3-8b", 1.0),
    ] {
        let m = ModelSpec::preset(model).unwrap();
        let cost = CostModel::new(&linked(&hw, Some(gbps)));
        let tokens = ModelCosts::new(&m, &cost, 1);
        let blocks = Blocks {
            inner: tokens.clone(),
            unit: 512,
        };
        let coarse = optimise(&blocks, 32, 4);
        let fine = optimise(&tokens, 16384, 4);
        let finer = optimise_on_grid(&tokens, 16384, 4, 128);
        for p in 0..4 {
            let (b, t, f) = (
                coarse.by_devices[p].ttft_s,
                fine.by_devices[p].ttft_s,
                finer.by_devices[p].ttft_s,
            );
            assert!(
                t <= b * (1.0 + 1e-12),
                "{model} {gbps} p={}: {t} > block {b}",
                p + 1
            );
            assert!(
                (t - f).abs() <= 1e-6 * f,
                "{model} {gbps} p={}: 48-cell {t} vs 128-cell {f}",
                p + 1
            );
            assert!(
                (ttft(&tokens, &fine.by_devices[p].partition) - t).abs() <= 1e-12 * t,
                "reported TTFT is the partition's"
            );
        }
    }
}

/// Synthetic monotone costs: per-token GEMM work with a memory floor, per-pair attention,
/// per-token links; coefficients over orders of magnitude (compute-, link- and
/// overhead-dominated cases).
#[derive(Debug, Clone)]
struct Synth {
    layers: u32,
    gemm: f64,
    floor: f64,
    pair: f64,
    post: f64,
    over: f64,
    x0: f64,
    x1: f64,
    head: f64,
}

impl ChunkCosts for Synth {
    fn layers(&self) -> u32 {
        self.layers
    }
    fn chunk(&self, len: u32, start: u32) -> runahead::ChunkCost {
        let c = f64::from(len);
        let s = f64::from(start);
        runahead::ChunkCost {
            embed: 0.01 * self.gemm * c,
            pre: self.over + (self.gemm * c).max(self.floor),
            attn: self.over + self.pair * c * (s + (c + 1.0) / 2.0),
            post: self.over + (self.post * c).max(3.0 * self.floor),
        }
    }
    fn link(&self, tokens: u32) -> f64 {
        if tokens == 0 {
            0.0
        } else {
            self.x0 + self.x1 * f64::from(tokens)
        }
    }
    fn head(&self) -> f64 {
        self.head
    }
}

fn synth() -> impl proptest::strategy::Strategy<Value = Synth> {
    let mag = |lo: f64, hi: f64| (lo.ln()..hi.ln()).prop_map(f64::exp);
    (
        1u32..40,
        mag(0.1, 10.0),
        mag(1e-3, 30.0),
        mag(1e-4, 1.0),
        mag(0.1, 10.0),
        mag(1e-3, 1.0),
        mag(1e-3, 3.0),
        mag(1e-3, 30.0),
        mag(1e-3, 10.0),
    )
        .prop_map(
            |(layers, gemm, floor, pair, post, over, x0, x1, head)| Synth {
                layers,
                gemm,
                floor,
                pair,
                post,
                over,
                x0,
                x1,
                head,
            },
        )
}

proptest! {
    #![proptest_config(crate::props::config(64))]

    /// The DP is exact: on contexts up to the grid size it finds the brute-force optimum over
    /// all compositions, for any monotone costs.
    #[test]
    fn optimiser_is_exact_for_any_monotone_costs(costs in synth(), n in 1u32..=16) {
        let opt = optimise(&costs, n, 4);
        prop_assert!(opt.exact);
        for p in 1..=4usize.min(n as usize) {
            let (bt, bp) = brute(&costs, n, p);
            let got = &opt.by_devices[p - 1];
            prop_assert!(
                (got.ttft_s - bt).abs() <= 1e-12 * bt,
                "p={}: dp {:?} {} vs brute {:?} {}", p, got.partition, got.ttft_s, bp, bt
            );
            prop_assert!((ttft(&costs, &got.partition) - got.ttft_s).abs() <= 1e-12 * bt);
            prop_assert!((ttft_by_layers(&costs, &got.partition) - got.ttft_s).abs() <= 1e-9 * bt);
        }
    }
}

proptest! {
    #![proptest_config(crate::props::config(64))]

    /// The lower bound the plan prunes device counts with is below every partition.
    #[test]
    fn lower_bound_is_below_every_partition(costs in synth(), n in 1u32..=14) {
        for p in 1..=4usize.min(n as usize) {
            let (bt, _) = brute(&costs, n, p);
            let lb = ttft_lower_bound(&costs, n, p);
            prop_assert!(lb <= bt * (1.0 + 1e-12), "p={}: bound {} above the optimum {}", p, lb, bt);
        }
    }
}

proptest! {
    #![proptest_config(crate::props::config(24))]

    /// The plan's partition covers the context exactly, and it is never worse than equal chunks
    /// over the offered devices, nor than one device.
    #[test]
    fn partition_covers_the_context_and_beats_equal_chunks(
        context in 1u32..20_000,
        devices in 1u32..=6,
        link in prop::sample::select(vec![None, Some(30.0), Some(10.0), Some(1.0)]),
        model in prop::sample::select(vec!["llama-2-7b", "llama-3-8b", "opt-1.3b"]),
    ) {
        let d = details(model, devices, link, context);
        prop_assert_eq!(d.partition.iter().sum::<u32>(), context);
        prop_assert_eq!(d.partition.len() as u32, d.devices_used);
        prop_assert!(d.partition.iter().all(|&c| c > 0));
        prop_assert!(d.devices_used <= devices.min(context));
        let t = &d.ttft_s;
        // The device-count rule: within 1% of the best count (which is never worse than equal
        // chunks over all offered devices), unless the prompt stays on one device because the
        // best gains less than 10%.
        prop_assert!(
            t.runahead <= t.even_chain * (1.0 + runahead::DEVICE_TOLERANCE) * (1.0 + 1e-12)
                || (d.devices_used == 1 && t.even_chain > (1.0 - runahead::MIN_GAIN) * t.single_device),
            "{:?}", d
        );
        prop_assert!(t.runahead <= t.single_device * (1.0 + 1e-12), "{:?}", d);
        prop_assert!((d.speedup - t.single_device / t.runahead).abs() < 1e-12);
        // Per device count, the optimiser is never worse than equal chunks of that count.
        let m = ModelSpec::preset(model).unwrap();
        let hw = HardwareProfile::preset("a100-80g-sxm").unwrap();
        let cost = CostModel::new(&linked(&hw, link));
        let costs = ModelCosts::new(&m, &cost, 1);
        for (i, best) in d.ttft_by_devices_s.iter().enumerate() {
            let even = ttft(&costs, &even_partition(context, i as u32 + 1));
            prop_assert!(best.unwrap() <= even * (1.0 + 1e-9));
        }
    }
}

// ---- the plan -----------------------------------------------------------------------------

#[test]
fn contract_invocation_reports_every_method() {
    // kvplan plan runahead --model llama-2-7b --hardware a100-80g-sxm --devices 4
    //   --link-gbps 10 --context 16384 --format json
    let d = details("llama-2-7b", 4, Some(10.0), 16384);
    let v = serde_json::to_value(&d).unwrap();
    for key in ["devices_used", "partition", "ttft_s", "speedup"] {
        assert!(v.get(key).is_some(), "{key} missing: {v}");
    }
    for key in ["runahead", "single_device", "even_chain", "tensor_parallel"] {
        assert!(v["ttft_s"][key].as_f64().unwrap() > 0.0, "{key}: {v}");
    }
    assert_eq!(
        v["partition"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .sum::<u64>(),
        16384
    );
    let t = &d.ttft_s;
    assert!(t.runahead < t.even_chain && t.even_chain < t.tensor_parallel);
    assert!(t.tensor_parallel < t.single_device);
    assert!(
        d.speedup > 2.0 && d.speedup_vs_tensor_parallel > 1.4,
        "{d:?}"
    );
    // The fourth device would add under 1%, so three are used. With a100-80g-sxm's fitted
    // attention model the partition is [4608, 6464, 5312] (before: [5312, 6144, 4928], then
    // link-bound) and its slowest layer outlasts its slowest send: compute-bound.
    assert_eq!(d.devices_used, 3, "{d:?}");
    assert_eq!(d.bottleneck, "compute");
    assert!(d.tensor_parallel_peer_bytes > d.peer_bytes);
    assert!(d.search.local_optimum && !d.search.exact, "{:?}", d.search);
}

#[test]
fn schedule_has_the_chain_shape() {
    let m = ModelSpec::preset("llama-2-7b").unwrap();
    let hw = HardwareProfile::preset("a100-80g-sxm").unwrap();
    let cost = CostModel::new(&hw);
    let mut s = shape(8192);
    s.gen_len = 4;
    let p = plan(&m, &hw, &cost, &s, Strategy::RUNAHEAD, &opts(3)).unwrap();
    let d = p
        .decisions
        .get::<kvplan_planner::runahead::RunaheadDetails>()
        .unwrap();
    assert_eq!(d.devices_used, 3);
    let sched = &p.schedule;
    let streams = sched.streams();
    assert_eq!(
        streams
            .iter()
            .filter(|s| s.kind == StreamKind::Compute)
            .count(),
        3
    );
    let peers: Vec<_> = streams
        .iter()
        .filter_map(|s| match s.kind {
            StreamKind::Peer { to } => Some((s.device, to)),
            _ => None,
        })
        .collect();
    assert_eq!(peers, vec![(0, 1), (1, 2)]);
    // Device i sends the K,V of tokens 0..s_i + c_i once per layer.
    let kv_tok = m.kv_bytes_per_token_layer();
    let ends = [d.partition[0], d.partition[0] + d.partition[1]];
    let layers = u64::from(m.num_layers);
    let expect = (u64::from(ends[0]) + u64::from(ends[1])) * kv_tok * layers;
    assert_eq!(d.peer_bytes, expect);
    let sends = sched
        .ops()
        .iter()
        .filter(|o| matches!(o.kind, OpKind::PeerSend { .. }))
        .count();
    assert_eq!(sends, 2 * m.num_layers as usize);
    // The simulated TTFT (end of prefill) is the planned one; decode follows on the last
    // device only.
    let tl = kvplan_sim::simulate(sched, &cost).unwrap();
    let met = metrics(sched, &tl, Window::Whole);
    assert!((met.prefill_end_s - d.ttft_s.runahead).abs() <= 1e-9 * d.ttft_s.runahead);
    assert!(met.makespan_s > met.prefill_end_s);
    let decode_devices: std::collections::BTreeSet<u16> = sched
        .ops()
        .iter()
        .filter(|o| o.tag.phase == kvplan_vocab::schedule::Phase::Decode)
        .map(|o| streams[o.stream.index()].device)
        .collect();
    assert_eq!(decode_devices.into_iter().collect::<Vec<_>>(), vec![2]);
    // Memory: the last device holds the whole context's (and the decoded tokens') K,V.
    assert_eq!(
        p.memory.gpu_item(kvplan_vocab::memory::MemoryKind::KvCache),
        (8192 + 4) * m.kv_bytes_per_token()
    );
    assert_eq!(
        p.memory.gpu_item(kvplan_vocab::memory::MemoryKind::Weights),
        m.weight_bytes()
    );
    assert!(
        p.notes.iter().any(|n| matches!(
            n.get(),
            Some(kvplan_planner::runahead::RunaheadNote::DecodeOnLastDevice { .. })
        )),
        "{:?}",
        p.notes
    );
}

#[test]
fn errors_name_the_field_and_the_fix() {
    let m = ModelSpec::preset("llama-2-7b").unwrap();
    let hw = HardwareProfile::preset("a100-80g-sxm").unwrap();
    let cost = CostModel::new(&hw);
    let err = |s: Shape, o: Options| {
        runahead::plan(&m, &hw, &cost, &s, &o)
            .unwrap_err()
            .to_string()
    };
    let e = err(shape(1024), opts(0));
    assert!(
        e.contains("runahead.devices") && e.contains("at least 1"),
        "{e}"
    );
    // Link overrides are checked where the hardware is resolved.
    let over = |gbps, latency_us| {
        runahead::with_link_override(&hw, &LinkOverride { gbps, latency_us })
            .unwrap_err()
            .to_string()
    };
    for bad in [0.0, -5.0, f64::NAN, f64::INFINITY] {
        let e = over(Some(bad), None);
        assert!(
            e.contains("runahead.link_gbps") && e.contains("positive"),
            "{e}"
        );
    }
    let e = over(None, Some(-1.0));
    assert!(e.contains("runahead.link_latency_us"), "{e}");
    // The shape is checked as the other planners check it (`Shape::validate`).
    let e = err(shape(0), opts(4));
    assert!(
        e.contains("workload.prompt") && e.contains("at least 1"),
        "{e}"
    );
    // Through the shared planner the shape is checked first.
    let e = plan(&m, &hw, &cost, &shape(0), Strategy::RUNAHEAD, &opts(4))
        .unwrap_err()
        .to_string();
    assert!(e.contains("workload.prompt"), "{e}");
    let mut s = shape(1024);
    s.gpu_batches = 2;
    assert!(err(s, opts(4)).contains("workload.gpu_batches"));
    let mut o = opts(4);
    o.weights = WeightsPlacement::Offload;
    assert!(err(shape(1024), o).contains("offload.weights"));
    // A context whose KV cache cannot fit on the last device, whatever the partition.
    let e = err(shape(1 << 20), opts(8));
    assert!(
        e.contains("does not fit") && e.contains("short by") && e.contains("`workload.prompt`"),
        "{e}"
    );
}

#[test]
fn calibrated_costs_reach_the_planner() {
    // A calibrated profile's fitted attention (here: slower than the datasheet roofline) is what
    // the per-chunk costs, and so the partition and the TTFT, rest on.
    let base = HardwareProfile::preset("a100-80g-sxm").unwrap();
    let cal = HardwareProfile::from_toml_str(
        r#"
base = "a100-80g-sxm"
[calibration]
backend = "cuda"
device = "test"
driver = "test"
date = "2026-01-01"
kvplan_version = "0.1.0"
mode = "quick"
attention = { overhead_us = 6.0, tflops = 60.0, gbps = 1500.0 }
elementwise = { overhead_us = 3.0, gbps = 1500.0 }
[calibration.copy]
h2d_pinned = [[4096, 1.0e-5], [67108864, 2.8e-3]]
d2h_pinned = [[4096, 1.0e-5], [67108864, 2.6e-3]]
h2d_pageable = [[4096, 2.0e-5], [67108864, 4.0e-3]]
d2h_pageable = [[4096, 2.0e-5], [67108864, 6.0e-3]]
"#,
        "cal.toml",
    )
    .unwrap();
    let m = ModelSpec::preset("llama-2-7b").unwrap();
    let cost = CostModel::new(&cal);
    let costs = ModelCosts::new(&m, &cost, 1);
    // Chunk of 2048 queries after a 4096-token prefix: the fitted roofline, exactly.
    let c = costs.chunk(2048, 4096);
    let want = cost.attention(1, 32, 32, 2048, 6144, 128, true, m.dtype);
    assert_eq!(c.attn, want);
    let pairs = 2048.0 * 4096.0 + 2048.0 * 2049.0 / 2.0;
    let flops = 4.0 * 32.0 * 128.0 * pairs;
    assert!(
        (c.attn - (6e-6 + flops / 60e12)).abs() < 1e-12,
        "{}",
        c.attn
    );
    let p = |hw: &HardwareProfile| {
        plan(
            &m,
            hw,
            &CostModel::new(hw),
            &shape(16384),
            Strategy::RUNAHEAD,
            &opts(4),
        )
        .unwrap()
        .decisions
        .get::<kvplan_planner::runahead::RunaheadDetails>()
        .cloned()
        .unwrap()
    };
    let (datasheet, measured) = (p(&base), p(&cal));
    assert!(measured.ttft_s.single_device > datasheet.ttft_s.single_device);
    // Slower attention makes late tokens dearer still: the first chunk grows.
    assert!(measured.partition[0] > datasheet.partition[0]);
}

// ---- the device-count rule ----------------------------------------------------------------

#[test]
fn device_count_rule_on_given_ttfts() {
    use runahead::choose_devices;
    // Fewest within 1% of the best: 3 devices (0.505 <= 1.01 x 0.5).
    assert_eq!(
        choose_devices(&[Some(1.0), Some(0.6), Some(0.505), Some(0.5)]),
        (2, false)
    );
    // The best gains only 5% over one device: one device.
    assert_eq!(
        choose_devices(&[Some(1.0), Some(0.97), Some(0.95)]),
        (0, true)
    );
    // Exactly 10% is enough.
    assert_eq!(choose_devices(&[Some(1.0), Some(0.9)]), (1, false));
    // One device does not fit: the rule runs over the counts that do.
    assert_eq!(choose_devices(&[None, Some(0.97), Some(0.95)]), (2, false));
}

#[test]
fn chosen_count_is_within_one_percent_of_the_best_simulated() {
    // Every candidate's partition simulated on the engine: the chosen count is the fewest within
    // 1% of the best over all counts, and at least 10% faster than one device.
    for (model, gbps, devices, ctx) in [
        ("llama-2-7b", Some(10.0), 4, 16384),
        ("llama-2-7b", None, 8, 32768),
        ("llama-3-8b", Some(1.0), 6, 16384),
    ] {
        let m = ModelSpec::preset(model).unwrap();
        let hw = linked(&HardwareProfile::preset("a100-80g-sxm").unwrap(), gbps);
        let cost = CostModel::new(&hw);
        let p = plan(
            &m,
            &hw,
            &cost,
            &shape(ctx),
            Strategy::RUNAHEAD,
            &opts(devices),
        )
        .unwrap();
        let d = p
            .decisions
            .get::<kvplan_planner::runahead::RunaheadDetails>()
            .unwrap();
        let best = d
            .ttft_by_devices_s
            .iter()
            .flatten()
            .copied()
            .fold(f64::INFINITY, f64::min);
        let t = d.ttft_s.runahead;
        assert!(d.devices_used > 1, "{model}: {d:?}");
        assert!(
            t <= best * (1.0 + runahead::DEVICE_TOLERANCE),
            "{model}: {d:?}"
        );
        assert!(t <= (1.0 - runahead::MIN_GAIN) * d.ttft_s.single_device);
        for (i, c) in d
            .ttft_by_devices_s
            .iter()
            .enumerate()
            .take(d.devices_used as usize - 1)
        {
            assert!(
                c.unwrap() > best * (1.0 + runahead::DEVICE_TOLERANCE),
                "{model}: {} devices are within 1% too: {d:?}",
                i + 1
            );
        }
        // The reported TTFT is the engine's, for the schedule the plan returns.
        let tl = kvplan_sim::simulate(&p.schedule, &cost).unwrap();
        let met = metrics(&p.schedule, &tl, Window::Whole);
        assert!((met.prefill_end_s - t).abs() <= 1e-9 * t);
        // Reports: the decode device and the peer traffic per device.
        assert_eq!(d.decode_device, d.devices_used - 1);
        assert_eq!(d.peer_bytes_by_device.len(), d.devices_used as usize);
        assert_eq!(*d.peer_bytes_by_device.last().unwrap(), 0);
        assert_eq!(d.peer_bytes_by_device.iter().sum::<u64>(), d.peer_bytes);
    }
}

#[test]
fn gain_below_ten_percent_stays_on_one_device() {
    // 1 GB/s, 2K tokens: more devices gain something, but under 10%.
    let d = details("llama-2-7b", 4, Some(1.0), 2048);
    let best = d
        .ttft_by_devices_s
        .iter()
        .flatten()
        .copied()
        .fold(f64::INFINITY, f64::min);
    assert!(
        best > (1.0 - runahead::MIN_GAIN) * d.ttft_s.single_device,
        "{d:?}"
    );
    assert_eq!(d.devices_used, 1, "{d:?}");
    assert_eq!(d.ttft_s.runahead, d.ttft_s.single_device);
    assert_eq!(d.peer_bytes, 0);
    assert_eq!(d.decode_device, 0);
}

#[test]
fn kv_that_can_never_fit_fails_before_the_search() {
    // 1M tokens of llama-2-7b K,V (512 GiB) on the last device, whatever the device count.
    let m = ModelSpec::preset("llama-2-7b").unwrap();
    let hw = HardwareProfile::preset("a100-80g-sxm").unwrap();
    let cost = CostModel::new(&hw);
    let start = std::time::Instant::now();
    let e = runahead::plan(&m, &hw, &cost, &shape(1 << 20), &opts(64)).unwrap_err();
    assert!(matches!(e, kvplan_vocab::Error::DoesNotFit { .. }), "{e}");
    let e = e.to_string();
    assert!(
        e.contains("last device") && e.contains("any partition"),
        "{e}"
    );
    assert!(start.elapsed().as_secs_f64() < 1.0, "{:?}", start.elapsed());
}

// ---- published behaviour ------------------------------------------------------------------

#[test]
fn speedup_grows_with_context() {
    for link in [None, Some(10.0)] {
        let s: Vec<RunaheadDetails> = [1024, 4096, 16384]
            .iter()
            .map(|&c| details("llama-2-7b", 4, link, c))
            .collect();
        assert!(
            s[0].speedup < s[1].speedup && s[1].speedup < s[2].speedup,
            "{link:?}: {:?}",
            s.iter().map(|d| d.speedup).collect::<Vec<_>>()
        );
    }
    // Over the tensor-parallel baseline (the paper's comparison), on a fast link: ~1.1x at 1K,
    // growing with the context.
    let v: Vec<f64> = [1024, 4096, 16384, 32768]
        .iter()
        .map(|&c| details("llama-2-7b", 4, None, c).speedup_vs_tensor_parallel)
        .collect();
    assert!(v.windows(2).all(|w| w[0] < w[1]), "{v:?}");
    assert!(v[0] > 1.05 && v[0] < 1.2, "{v:?}");
    assert!(v[3] > 1.3, "{v:?}");
}

#[test]
fn slow_link_keeps_short_prompts_on_one_device() {
    // 1 GB/s: a 1K prompt stays on one GPU (extra devices would gain < 10%) ...
    let short = details("llama-2-7b", 4, Some(1.0), 1024);
    assert_eq!(short.devices_used, 1, "{short:?}");
    assert_eq!(short.partition, vec![1024]);
    assert_eq!(short.speedup, 1.0);
    assert_eq!(short.ttft_s.runahead, short.ttft_s.single_device);
    // ... a long one pays off: with MHA from about 48K tokens.
    let long = details("llama-2-7b", 4, Some(1.0), 65536);
    assert!(long.devices_used >= 2 && long.speedup > 1.1, "{long:?}");
    // Fewer devices than offered: the tail adds nothing on this link.
    assert!(long.devices_used < 4, "{long:?}");
    // With GQA, 4x less K,V per token: long prompts pay off at 16K.
    let gqa = details("llama-3-8b", 4, Some(1.0), 16384);
    assert!(gqa.devices_used >= 2 && gqa.speedup > 1.3, "{gqa:?}");
}

#[test]
fn fewer_kv_heads_favour_runahead() {
    // The same architecture with 8 KV heads instead of 32, and two real GQA models against
    // llama-2-7b: on links that matter, less K,V to send means more speed-up.
    let mha = ModelSpec::preset("llama-2-7b").unwrap();
    let mut gqa = mha.clone();
    gqa.num_kv_heads = 8;
    gqa.name = "llama-2-7b-kv8".into();
    for link in [Some(10.0), Some(1.0)] {
        for ctx in [1024, 16384] {
            let a = run(&mha, "a100-80g-sxm", 4, link, ctx);
            let b = run(&gqa, "a100-80g-sxm", 4, link, ctx);
            assert!(
                b.speedup > a.speedup,
                "{link:?} {ctx}: gqa {} vs mha {}",
                b.speedup,
                a.speedup
            );
            assert!(b.peer_bytes <= a.peer_bytes || b.devices_used > a.devices_used);
        }
    }
    let mha16 = details("llama-2-7b", 4, Some(10.0), 16384).speedup;
    for gqa in ["llama-3-8b", "mistral-7b"] {
        let s = details(gqa, 4, Some(10.0), 16384).speedup;
        assert!(s > mha16, "{gqa} {s} vs llama-2-7b {mha16}");
    }
}

#[test]
fn partition_is_uneven_earlier_devices_get_more() {
    // Fast link, compute-bound: late tokens attend to more keys, so chunks shrink along the chain.
    let d = details("llama-2-7b", 4, None, 16384);
    assert_eq!(d.devices_used, 4);
    assert!(d.partition.windows(2).all(|w| w[0] > w[1]), "{d:?}");
    assert!(
        f64::from(d.partition[0]) > 1.4 * f64::from(d.partition[3]),
        "{d:?}"
    );
    assert!(d.ttft_s.runahead < d.ttft_s.even_chain * 0.9, "{d:?}");
    assert_eq!(d.bottleneck, "compute");
}

/// The report's tables (printed with `--nocapture`), each row checked: the partition covers the
/// context over the devices used, the speedups are the TTFT ratios they name, and Runahead is
/// never slower than one device (it may use fewer devices) or the even chain.
#[test]
fn report_tables_are_consistent() {
    for (model, gbps) in [
        ("llama-2-7b", None),
        ("llama-3-8b", None),
        ("llama-2-7b", Some(10.0)),
        ("llama-3-8b", Some(10.0)),
        ("llama-2-7b", Some(1.0)),
        ("llama-3-8b", Some(1.0)),
    ] {
        println!("== {model}, link {gbps:?} GB/s (None: NVLink 300), 4 devices, a100-80g-sxm");
        println!(
            "context | used | partition | single ms | even ms | tp ms | runahead ms | speedup | vs tp"
        );
        for ctx in [1024u32, 2048, 4096, 8192, 16384, 32768, 65536] {
            let d = details(model, 4, gbps, ctx);
            let row = format!("{model} {gbps:?} {ctx}: {d:?}");
            assert_eq!(d.partition.len(), d.devices_used as usize, "{row}");
            assert_eq!(d.partition.iter().sum::<u32>(), ctx, "{row}");
            assert!((1..=4).contains(&d.devices_used), "{row}");
            let t = &d.ttft_s;
            assert!(
                (d.speedup - t.single_device / t.runahead).abs() <= 1e-9 * d.speedup,
                "{row}"
            );
            assert!(
                (d.speedup_vs_tensor_parallel - t.tensor_parallel / t.runahead).abs()
                    <= 1e-9 * d.speedup_vs_tensor_parallel,
                "{row}"
            );
            assert!(t.runahead <= t.single_device * (1.0 + 1e-9), "{row}");
            assert!(t.runahead <= t.even_chain * (1.0 + 1e-9), "{row}");
            println!(
                "{ctx} | {} | {:?} | {:.2} | {:.2} | {:.2} | {:.2} | {:.3} | {:.3}",
                d.devices_used,
                d.partition,
                d.ttft_s.single_device * 1e3,
                d.ttft_s.even_chain * 1e3,
                d.ttft_s.tensor_parallel * 1e3,
                d.ttft_s.runahead * 1e3,
                d.speedup,
                d.speedup_vs_tensor_parallel,
            );
        }
    }
}

/// Refinement quality at scale: 48 coarse cells plus refinement against 160 coarse cells plus
/// refinement, 3 models x 5 links x 4 contexts x 6 device counts (run in release; ~2 s).
#[test]
#[ignore = "slow in debug; run with --release -- --ignored"]
fn refinement_matches_a_finer_grid_at_scale() {
    let hw = HardwareProfile::preset("a100-80g-sxm").unwrap();
    let mut worst: f64 = 0.0;
    for model in ["llama-2-7b", "llama-3-8b", "opt-6.7b"] {
        let m = ModelSpec::preset(model).unwrap();
        for gbps in [300.0, 30.0, 10.0, 3.0, 1.0] {
            let cost = CostModel::new(&linked(&hw, Some(gbps)));
            let costs = ModelCosts::new(&m, &cost, 1);
            for n in [3001u32, 10007, 30011, 60013] {
                let a = optimise(&costs, n, 6);
                let b = optimise_on_grid(&costs, n, 6, 160);
                for p in 0..6 {
                    let (x, y) = (a.by_devices[p].ttft_s, b.by_devices[p].ttft_s);
                    worst = worst.max((x - y) / y);
                }
            }
        }
    }
    println!("worst relative excess of the 48-cell search over the 160-cell one: {worst:.3e}");
    assert!(worst < 1e-5, "{worst}");
}

/// One more device never makes the best partition worse than the previous count's best with a
/// one-token device in front (what one more device can always do), and one device fewer is
/// never worse than the next count's best with a leading one-token chunk merged away.
#[test]
fn more_devices_are_never_worse_than_one_front_token_more() {
    let hw = HardwareProfile::preset("a100-80g-sxm").unwrap();
    for (model, gbps, n, p) in [
        ("llama-2-7b", None, 3001u32, 12u32),
        ("llama-2-7b", Some(10.0), 5003, 10),
        ("llama-3-8b", Some(1.0), 2000, 8),
        // Past GRID_DEVICES: the construction, and counts beyond the useful ones.
        ("llama-2-7b", None, 16384, 40),
        ("llama-3-8b", Some(30.0), 30011, 24),
    ] {
        let m = ModelSpec::preset(model).unwrap();
        let cost = CostModel::new(&linked(&hw, gbps));
        let costs = ModelCosts::new(&m, &cost, 1);
        let opt = optimise(&costs, n, p);
        for w in opt.by_devices.windows(2) {
            let (a, b) = (&w[0], &w[1]);
            let j = a.partition.iter().position(|&c| c >= 2).unwrap();
            let mut more = a.partition.clone();
            more[j] -= 1;
            more.insert(j, 1);
            let bound = ttft(&costs, &more);
            assert!(
                b.ttft_s <= bound * (1.0 + 1e-12),
                "{model} {gbps:?} n={n}: {} devices {} > {} with one more front token device {bound}",
                b.partition.len(),
                b.ttft_s,
                a.partition.len()
            );
            assert!((ttft(&costs, &b.partition) - b.ttft_s).abs() <= 1e-12 * b.ttft_s);
        }
    }
}

/// The plan's pruned search decides as the full one: counts it prunes have a lower bound above
/// the tolerance (below their TTFT), and the device-count rule picks the same count at the same
/// TTFT.
#[test]
fn pruning_keeps_the_device_choice() {
    let mut any_pruned = false;
    for (model, hw, gbps, n, p) in [
        ("llama-2-7b", "h200", None, 16384u32, 40u32),
        ("llama-2-7b", "a100-80g-sxm", Some(10.0), 65536, 24),
        ("llama-3-8b", "a100-80g-sxm", Some(1.0), 65536, 12),
        ("opt-6.7b", "h200", None, 30011, 20),
    ] {
        let m = ModelSpec::preset(model).unwrap();
        let cost = CostModel::new(&linked(&HardwareProfile::preset(hw).unwrap(), gbps));
        let costs = ModelCosts::new(&m, &cost, 1);
        let full = optimise(&costs, n, p);
        let pruned = optimise_for_choice(&costs, n, p, runahead::DEVICE_TOLERANCE);
        any_pruned |= pruned.by_devices.iter().any(|d| d.pruned);
        let best = pruned
            .by_devices
            .iter()
            .map(|d| d.ttft_s)
            .fold(f64::INFINITY, f64::min);
        for (i, (f, q)) in full.by_devices.iter().zip(&pruned.by_devices).enumerate() {
            assert_eq!(q.partition.iter().sum::<u32>(), n);
            assert_eq!(q.partition.len(), i + 1);
            assert!((ttft(&costs, &q.partition) - q.ttft_s).abs() <= 1e-12 * q.ttft_s);
            if q.pruned {
                let lb = ttft_lower_bound(&costs, n, i + 1);
                assert!(lb > best * (1.0 + runahead::DEVICE_TOLERANCE));
                assert!(lb <= q.ttft_s && lb <= f.ttft_s, "{model} p={}", i + 1);
            }
        }
        let pick = |o: &runahead::Optimum| {
            let t: Vec<Option<f64>> = o.by_devices.iter().map(|d| Some(d.ttft_s)).collect();
            let (i, _) = runahead::choose_devices(&t);
            (i, o.by_devices[i].ttft_s)
        };
        assert_eq!(pick(&full), pick(&pruned), "{model} {hw} {gbps:?}");
    }
    assert!(any_pruned);
}

#[test]
fn sixty_four_devices_over_128k_tokens() {
    // kvplan plan runahead --model llama-2-7b --hardware h200 --devices 64 --context 131072:
    // the grid search and its refinement alone (before the construction) stopped in local
    // optima: 381.79 ms for the best count, with 60 devices used. The construction finds
    // 373.66 ms (64 devices) and uses 55 within 1%.
    let m = ModelSpec::preset("llama-2-7b").unwrap();
    let hw = HardwareProfile::preset("h200").unwrap();
    let cost = CostModel::new(&hw);
    let costs = ModelCosts::new(&m, &cost, 1);
    let p = plan(
        &m,
        &hw,
        &cost,
        &shape(131072),
        Strategy::RUNAHEAD,
        &opts(64),
    )
    .unwrap();
    let d = p
        .decisions
        .get::<kvplan_planner::runahead::RunaheadDetails>()
        .unwrap();
    let by: Vec<f64> = d.ttft_by_devices_s.iter().map(|t| t.unwrap()).collect();
    assert_eq!(by.len(), 64);
    let best = by.iter().copied().fold(f64::INFINITY, f64::min);
    // With rotary embedding and the residual adds in every layer (issue 9) the best was 374.91
    // ms and the plan 378.40 ms on 55 devices; before them, 373.66 and 377.0 ms. h200's attention
    // is now the work-unit model (h100-sxm's estimate at its HBM bandwidth) instead of the
    // roofline at 0.50 of peak: the best is 386.02 ms, the plan 388.96 ms on 55 devices.
    assert!(best < 0.3866, "{best}");
    assert!(d.ttft_s.runahead < 0.3896, "{d:?}");
    assert!((50..=60).contains(&d.devices_used), "{}", d.devices_used);
    for (i, &t) in by.iter().enumerate() {
        let lb = ttft_lower_bound(&costs, 131072, i + 1);
        assert!(lb <= t, "{} devices: bound {lb} above {t}", i + 1);
        let even = ttft(&costs, &even_partition(131072, i as u32 + 1));
        assert!(t <= even * (1.0 + 1e-9));
    }
    // From 17 devices on, every count beats its neighbour with one device fewer until the
    // useful count; the construction made the chosen partition.
    assert!(by[16..50].windows(2).all(|w| w[1] < w[0]), "{by:?}");
    assert!(
        p.notes.iter().any(|n| matches!(
            n.get(),
            Some(kvplan_planner::runahead::RunaheadNote::Partition(
                kvplan_planner::runahead::PartitionFound::Constructed { .. }
            ))
        )),
        "{:?}",
        p.notes
    );
    let opt = optimise_for_choice(&costs, 131072, 64, runahead::DEVICE_TOLERANCE);
    let chosen = &opt.by_devices[d.devices_used as usize - 1];
    assert_eq!(chosen.method, Method::Constructed);
    assert!(!chosen.pruned);
}
