//! Reports that add up: the decode window's breakdown is time inside the window, so no
//! category on one device's engine exceeds the decode latency (a prefetch issued during prefill
//! is prefill time; a prefill store draining after the first token is decode time), and
//! TTFT + decode latency is the makespan.

use kvplan_planner::plan::{Options, Shape, Strategy, WeightsPlacement, plan};
use kvplan_planner::report::RunReport;
use kvplan_sim::engine::simulate;
use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};

fn check(model: &str, hw: &str, shape: Shape, strategy: Strategy, weights: WeightsPlacement) {
    let m = ModelSpec::preset(model).unwrap();
    let mut hw = HardwareProfile::preset(hw).unwrap();
    hw.host.ram_bytes = 1 << 41;
    let cost = CostModel::new(&hw);
    let options = Options {
        weights,
        ..Options::default()
    };
    let p = plan(&m, &hw, &cost, &shape, strategy, &options).unwrap();
    let t = simulate(&p.schedule, &cost).unwrap();
    let r = RunReport::new(&p, &t);
    let what = format!("{model} {strategy:?} {shape:?}");
    let eps = 1e-12 * r.total_latency_s.max(1.0);
    assert!(
        (r.prefill_latency_s + r.decode_latency_s - r.total_latency_s).abs() <= eps,
        "{what}"
    );
    let b = &r.decode_breakdown;
    let d = r.decode_latency_s + eps;
    // One compute stream; one H2D engine carries weights, cache and activations; one D2H engine
    // carries both stores (a half-duplex link shares one engine for all five).
    assert!(b.compute_s <= d, "{what}: compute {} > {d}", b.compute_s);
    let loads = b.load_weight_s + b.load_cache_s + b.load_activation_s;
    assert!(loads <= d, "{what}: loads {loads} > {d}");
    let stores = b.store_cache_s + b.store_activation_s;
    assert!(stores <= d, "{what}: stores {stores} > {d}");
    for (name, busy) in &r.stream_busy_fraction {
        assert!(*busy <= 1.0 + 1e-9, "{what}: {name} busy {busy}");
    }
}

#[test]
fn decode_breakdown_never_exceeds_decode_latency() {
    let s = |batch, k, prompt, gen_len| Shape {
        batch,
        gpu_batches: k,
        prompt,
        gen_len,
    };
    // The README's scenario: prefetches of step 1 start during prefill.
    for strategy in [Strategy::KVPR, Strategy::FULL_TRANSFER, Strategy::GPU_ONLY] {
        check(
            "opt-6.7b",
            "a100-40g-pcie4",
            s(64, 1, 128, 32),
            strategy,
            WeightsPlacement::Auto,
        );
    }
    // Column-by-column with offloaded weights, a half-duplex-free link, short decode.
    for strategy in [Strategy::KVPR, Strategy::FULL_TRANSFER] {
        check(
            "opt-30b",
            "a100-40g-pcie4",
            s(32, 4, 256, 4),
            strategy,
            WeightsPlacement::Offload,
        );
    }
    // Tiny decode after a long prefill: the window is short, the drains are long.
    check(
        "opt-1.3b",
        "t4",
        s(16, 1, 1024, 2),
        Strategy::KVPR,
        WeightsPlacement::Gpu,
    );
}
