//! KVPR's automatic split against brute force over the simulated schedule.
//!
//! The rule (docs/DESIGN.md, "KVPR"): the per-step split `plan` chooses must give a simulated
//! decode latency within 1% of the best *fixed* split (`--split l` for every step), found by
//! brute force over `l in 0..=s'` (the longest cached length) for small cases and over a grid of
//! 17 evenly spaced points for large ones. Both sides run on the one discrete-event engine
//! (`kvplan_sim::engine`), the same one `kvplan simulate` uses.

use kvplan_planner::plan::{
    Options, Shape, SplitModel, SplitPolicy, Strategy as PlanStrategy, WeightsPlacement,
};
use kvplan_sim::engine::simulate;
use kvplan_vocab::hardware::Duplex;
use kvplan_vocab::schedule::HostMemory;
use kvplan_vocab::timeline::{Window, metrics};
use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};
use proptest::prelude::*;

/// The tolerance the issue sets: 1% of the best fixed split's decode latency.
const TOLERANCE: f64 = 0.01;

#[derive(Debug, Clone)]
struct Case {
    model: ModelSpec,
    hw: HardwareProfile,
    shape: Shape,
    weights: WeightsPlacement,
    host: HostMemory,
}

fn decode_latency(c: &Case, split: SplitPolicy, model: SplitModel) -> f64 {
    let cost = CostModel::new(&c.hw);
    let options = Options {
        weights: c.weights,
        host_memory: c.host,
        ..Options::default()
    }
    .with(kvplan_planner::plan::KvprOptions {
        split,
        split_model: model,
    });
    let p = kvplan_planner::plan::plan(
        &c.model,
        &c.hw,
        &cost,
        &c.shape,
        PlanStrategy::KVPR,
        &options,
    )
    .expect("the case fits");
    let t = simulate(&p.schedule, &cost).unwrap();
    let m = metrics(&p.schedule, &t, Window::Whole);
    m.makespan_s - m.prefill_end_s
}

/// Candidate fixed splits: every `l` up to the longest cached length when that is small,
/// else 17 evenly spaced points (both ends included).
fn candidates(shape: &Shape) -> Vec<u32> {
    let top = shape.cached_at(shape.decode_steps());
    if top <= 64 {
        (0..=top).collect()
    } else {
        (0..=16u64)
            .map(|i| (i * u64::from(top) / 16) as u32)
            .collect()
    }
}

/// (auto, best fixed, its l).
fn compare(c: &Case) -> (f64, f64, u32) {
    let auto = decode_latency(c, SplitPolicy::Auto, SplitModel::Schedule);
    let mut best = (f64::INFINITY, 0);
    for l in candidates(&c.shape) {
        let t = decode_latency(c, SplitPolicy::Tokens(l), SplitModel::Schedule);
        if t < best.0 {
            best = (t, l);
        }
    }
    (auto, best.0, best.1)
}

fn case(model: &str, hw: &str, batch: u32, k: u32, prompt: u32, gen_len: u32) -> Case {
    Case {
        model: ModelSpec::preset(model).unwrap(),
        hw: HardwareProfile::preset(hw).unwrap(),
        shape: Shape {
            batch,
            gpu_batches: k,
            prompt,
            gen_len,
        },
        weights: WeightsPlacement::Auto,
        host: HostMemory::Pinned,
    }
}

fn assert_within(c: &Case, what: &str) {
    let (auto, best, l) = compare(c);
    assert!(
        auto <= best * (1.0 + TOLERANCE),
        "{what}: auto split {auto:.6} s vs best fixed split l = {l}: {best:.6} s ({:+.2}%)",
        100.0 * (auto / best - 1.0)
    );
}

/// The README's scenario (`scenarios/opt-6.7b-a100-latency.toml`): auto gave 4.226 s while
/// `--split 128` gave 3.465 s before the split modelled the schedule's prefetching.
#[test]
fn readme_scenario_is_within_one_percent_of_the_best_fixed_split() {
    assert_within(
        &case("opt-6.7b", "a100-40g-pcie4", 64, 1, 128, 32),
        "opt-6.7b latency",
    );
}

/// The second example: opt-13b on a100-80g-sxm, batch 32, prompt 512, gen 16 (auto
/// 5.791 s against 5.042 s at `--split 512`).
#[test]
fn opt13b_long_prompt_is_within_one_percent() {
    assert_within(
        &case("opt-13b", "a100-80g-sxm", 32, 1, 512, 16),
        "opt-13b prompt 512",
    );
}

/// Column-by-column with offloaded weights (the throughput scenario's shape, fewer steps).
#[test]
fn column_schedule_with_offloaded_weights_is_within_one_percent() {
    let mut c = case("opt-30b", "a100-40g-pcie4", 32, 4, 256, 6);
    c.weights = WeightsPlacement::Offload;
    c.hw.host.ram_bytes = 1 << 40;
    assert_within(&c, "opt-30b column-by-column");
}

/// The paper's model is kept for comparison and is what loses here: it charges the
/// activation copy in series, so it recomputes too little.
#[test]
fn paper_model_is_reproducible_and_differs() {
    let c = case("opt-6.7b", "a100-40g-pcie4", 64, 1, 128, 8);
    let paper = decode_latency(&c, SplitPolicy::Auto, SplitModel::Paper);
    let schedule = decode_latency(&c, SplitPolicy::Auto, SplitModel::Schedule);
    assert!(schedule < paper, "schedule {schedule} vs paper {paper}");
}

/// The property: a case that fits has its automatic split within [`TOLERANCE`] of the best
/// fixed one (cases that do not fit, e.g. weights forced onto a too-small GPU, are skipped).
fn check_random(c: &Case) -> Result<(), TestCaseError> {
    let cost = CostModel::new(&c.hw);
    let options = Options {
        weights: c.weights,
        host_memory: c.host,
        ..Options::default()
    };
    prop_assume!(
        kvplan_planner::plan::plan(
            &c.model,
            &c.hw,
            &cost,
            &c.shape,
            PlanStrategy::KVPR,
            &options
        )
        .is_ok()
    );
    let (auto, best, l) = compare(c);
    prop_assert!(
        auto <= best * (1.0 + TOLERANCE),
        "auto {} s vs best fixed l = {} {} s",
        auto,
        l,
        best
    );
    Ok(())
}

fn any_case() -> impl Strategy<Value = Case> {
    (
        prop::sample::select(vec!["opt-125m", "opt-1.3b", "llama-2-7b"]),
        prop::sample::select(vec!["a100-40g-pcie4", "h100-sxm", "t4", "rtx-4090"]),
        1u32..=32,
        1u32..=3,
        1u32..=48,
        2u32..=5,
        prop::sample::select(vec![
            WeightsPlacement::Auto,
            WeightsPlacement::Gpu,
            WeightsPlacement::Offload,
        ]),
        prop::bool::ANY,
        prop::bool::ANY,
    )
        .prop_map(
            |(m, hw, batch, k, prompt, gen_len, weights, pageable, half)| Case {
                model: ModelSpec::preset(m).unwrap(),
                hw: {
                    let mut hw = HardwareProfile::preset(hw).unwrap();
                    if half {
                        // One copy engine for both directions: stores delay loads.
                        hw.link.duplex = Duplex::Half;
                    }
                    hw
                },
                shape: Shape {
                    batch,
                    gpu_batches: k,
                    prompt,
                    gen_len,
                },
                weights,
                host: if pageable {
                    HostMemory::Pageable
                } else {
                    HostMemory::Pinned
                },
            },
        )
}

proptest! {
    #![proptest_config(crate::props::config(48))]

    /// Random small cases: brute force over every `l` from 0 to the longest cached length.
    #[test]
    fn auto_split_is_within_one_percent_of_brute_force(c in any_case()) {
        check_random(&c)?;
    }
}

fn large_case() -> impl Strategy<Value = Case> {
    (
        prop::sample::select(vec!["opt-1.3b", "opt-6.7b", "llama-2-7b", "opt-13b"]),
        prop::sample::select(vec![
            "a100-40g-pcie4",
            "a100-80g-sxm",
            "h100-sxm",
            "rtx-4090",
        ]),
        prop::sample::select(vec![8u32, 16, 32, 64]),
        1u32..=2,
        prop::sample::select(vec![64u32, 128, 256, 512]),
        prop::sample::select(vec![4u32, 8, 24]),
    )
        .prop_map(|(m, hw, batch, k, prompt, gen_len)| {
            let mut c = case(m, hw, batch, k, prompt, gen_len);
            c.hw.host.ram_bytes = 1 << 40;
            c
        })
}

proptest! {
    #![proptest_config(crate::props::config(12))]

    /// Random realistic cases (long prompts, 7-13B models, anchors and interpolation past 12
    /// steps): brute force over a 17-point grid.
    #[test]
    fn auto_split_is_within_one_percent_on_realistic_cases(c in large_case()) {
        check_random(&c)?;
    }
}
