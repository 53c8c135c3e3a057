//! Property tests of KVPR's split decision (`kvpr::SplitProblem`, `plan::split_problem`).
//!
//! The reference model is brute force: evaluate the exact per-layer cost `eval(l)` at every
//! integer `l` in `0..=s'` and take the minimum. `solve()` must reach that minimum. Costs are
//! compared with a relative tolerance of 1e-12: both sides call the same `eval`, so an optimal
//! `solve()` gives a bit-identical cost; the tolerance only forgives a different `l` whose cost
//! ties with the brute-force optimum up to the last bits of rounding. A suboptimal split on
//! realistic coefficients differs by far more (one token of transfer is ~1e-6 of a layer).

use kvplan_planner::offload::kvpr::{Reason, Split, SplitProblem};
use kvplan_planner::plan::{Shape, SplitModel, split_problem};
use kvplan_vocab::schedule::HostMemory;
use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};
use proptest::prelude::*;

/// Relative tolerance for comparing two evaluations of the same f64 cost function.
const REL_TOL: f64 = 1e-12;

/// The brute-force optimum: the smallest `l` reaching the minimum of `eval` and that minimum.
fn brute_force(p: &SplitProblem) -> (u32, f64) {
    let mut best = (0u32, p.eval(0));
    for l in 1..=p.seq_len {
        let t = p.eval(l);
        if t < best.1 {
            best = (l, t);
        }
    }
    best
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= REL_TOL * a.abs().max(b.abs())
}

/// Checks everything `solve()` promises about one problem; returns the split.
fn check_optimal(p: &SplitProblem) -> Result<Split, TestCaseError> {
    let s = p.solve().map_err(|e| TestCaseError::fail(e.to_string()))?;
    let l = s.recompute_tokens;
    prop_assert!(l <= p.seq_len, "l = {l} > s' = {}", p.seq_len);
    let t = p.eval(l);
    prop_assert_eq!(s.layer_s, t, "layer_s is not eval(l)");
    prop_assert_eq!(
        s.transfer_only_s,
        p.eval(0),
        "transfer_only_s is not eval(0)"
    );
    prop_assert!(t <= p.eval(0), "eval({l}) = {t} > eval(0) = {}", p.eval(0));
    prop_assert!(
        t <= p.eval(p.seq_len),
        "eval({l}) = {t} > eval(s') = {}",
        p.eval(p.seq_len)
    );
    let (bl, bt) = brute_force(p);
    prop_assert!(
        close(t, bt),
        "solve() chose l = {l} (t = {t:e}), brute force l = {bl} (t = {bt:e}); lp = {:?}; {p:?}",
        p.solve_lp()
    );
    // A different l only when the costs tie.
    if l != bl {
        prop_assert!(close(t, bt), "l = {l} vs {bl} without a tie");
    }
    // The reason names what happened.
    if p.seq_len > 0 {
        let expect = if l == 0 {
            if p.act_s_per_token >= p.kv_s_per_token {
                Reason::ActivationsNotCheaper
            } else {
                Reason::ComputeBoundWithoutRecompute
            }
        } else if l == p.seq_len {
            Reason::RecomputeAll
        } else {
            Reason::Balanced
        };
        prop_assert_eq!(s.reason, expect, "l = {}, s' = {}", l, p.seq_len);
    }
    // Sending activations that cost at least as much as the KV can never pay.
    if p.act_s_per_token >= p.kv_s_per_token {
        prop_assert_eq!(l, 0, "act >= kv but l = {}", l);
    }
    Ok(s)
}

/// Log-uniform in `[lo, hi]`.
fn log_uniform(lo: f64, hi: f64) -> impl Strategy<Value = f64> {
    (lo.ln()..hi.ln()).prop_map(f64::exp)
}

/// Zero or a log-uniform value (each about half the time).
fn zero_or(lo: f64, hi: f64) -> impl Strategy<Value = f64> {
    prop_oneof![Just(0.0), log_uniform(lo, hi)]
}

/// KV-to-activation cost ratio: exactly 1 (the tie, which must still give `l = 0`), exactly 2
/// (MHA), or anything in 0.1..2.5.
fn kv_ratio() -> impl Strategy<Value = f64> {
    prop_oneof![1 => Just(1.0), 1 => Just(2.0), 4 => 0.1..2.5f64]
}

/// Random problems with coefficients in realistic ranges (seconds):
/// - per-token activation copy 1e-9..1e-4 s (batch 1..256, hidden 768..16384, 10..64 GB/s);
/// - KV per token = activations x ratio in 0.1..2.5 (ratio <= 1 is GQA/MQA, 2 is MHA, see
///   [`kv_ratio`]);
/// - recompute FLOP time per token 1e-10..1e-5 s, memory terms up to 200 us fixed;
/// - weights (offloaded) 0 or 0.1..100 ms, of which W_K,W_V a fraction;
/// - the layer's other kernels 0 or 1 us..1 s (large values make the layer compute-bound).
fn any_problem() -> impl Strategy<Value = SplitProblem> {
    (
        (0u32..3000, 1u32..=8, zero_or(1e-4, 0.1), 0.0..=1.0f64),
        (zero_or(1e-6, 2e-5), log_uniform(1e-9, 1e-4), kv_ratio()),
        (
            zero_or(1e-6, 1e-5),
            log_uniform(1e-10, 1e-5),
            zero_or(1e-7, 2e-4),
            zero_or(1e-11, 1e-6),
            zero_or(1e-12, 1e-7),
        ),
        zero_or(1e-6, 1.0),
    )
        .prop_map(
            |((seq_len, k, w, w_frac), (lat, act, ratio), (ovh, flop, memf, memt, cat), main)| {
                SplitProblem {
                    seq_len,
                    gpu_batches: k,
                    weights_s: w,
                    weights_kv_s: w * w_frac,
                    copy_latency_s: lat,
                    act_s_per_token: act,
                    kv_s_per_token: act * ratio,
                    recompute_overhead_s: ovh,
                    recompute_flop_s_per_token: flop,
                    recompute_mem_fixed_s: memf,
                    recompute_mem_s_per_token: memt,
                    concat_s_per_token: cat,
                    main_compute_s: main,
                    serial_prefetch: false,
                }
            },
        )
}

proptest! {
    #![proptest_config(crate::props::config(256))]

    /// 1a: on arbitrary realistic coefficients, `solve()` is the brute-force integer optimum.
    #[test]
    fn solve_matches_brute_force(p in any_problem()) {
        check_optimal(&p)?;
    }

    /// 1a, GQA half: whenever activations cost at least as much as KV, `l = 0`.
    #[test]
    fn gqa_like_problems_never_recompute(
        p in any_problem(),
        ratio in prop_oneof![Just(1.0), 0.1..1.0f64],
    ) {
        let p = SplitProblem { kv_s_per_token: p.act_s_per_token * ratio, ..p };
        let s = check_optimal(&p)?;
        prop_assert_eq!(s.recompute_tokens, 0);
        if p.seq_len > 0 {
            prop_assert_eq!(s.reason, Reason::ActivationsNotCheaper);
        }
    }
}

const ALL_MODELS: [&str; 8] = [
    "opt-6.7b",
    "opt-13b",
    "opt-30b",
    "llama-2-7b",
    "llama-3-8b",
    "mistral-7b",
    "gemma-2-9b",
    "falcon-7b",
];

/// Grouped-query (`g = 4, 7, 8`) and multi-query (falcon) presets with `h * p >= 2 * Hkv * d * p`.
const GQA_MODELS: [&str; 5] = [
    "llama-3-8b",
    "mistral-7b",
    "qwen2-7b",
    "falcon-7b",
    "llama-3-70b",
];

const SOME_GPUS: [&str; 5] = ["a100-40g-pcie4", "h100-pcie", "h200", "rtx-4090", "t4"];

fn host_memory() -> impl Strategy<Value = HostMemory> {
    prop_oneof![Just(HostMemory::Pinned), Just(HostMemory::Pageable)]
}

/// The split problem of a preset model on a preset GPU at one decode step.
#[allow(clippy::too_many_arguments)]
fn preset_problem(
    model: &str,
    gpu: &str,
    batch: u32,
    gpu_batches: u32,
    prompt: u32,
    step: u32,
    weights_on_gpu: bool,
    host: HostMemory,
) -> SplitProblem {
    let m = ModelSpec::preset(model).unwrap();
    let hw = HardwareProfile::preset(gpu).unwrap();
    let cost = CostModel::new(&hw);
    let shape = Shape {
        batch,
        gpu_batches,
        prompt,
        gen_len: step + 1,
    };
    split_problem(
        &cost,
        &m,
        &shape,
        weights_on_gpu,
        kvplan_vocab::host::MemoryKinds::uniform(host),
        step,
        SplitModel::Schedule,
    )
}

proptest! {
    #![proptest_config(crate::props::config(128))]

    /// 1b: problems built from real presets are solved to the brute-force optimum.
    #[test]
    fn preset_problems_match_brute_force(
        model in prop::sample::select(&ALL_MODELS[..]),
        gpu in prop::sample::select(&SOME_GPUS[..]),
        batch in 1u32..=128,
        gpu_batches in 1u32..=8,
        prompt in 1u32..=2048,
        step in 1u32..=256,
        weights_on_gpu in any::<bool>(),
        host in host_memory(),
    ) {
        let p = preset_problem(model, gpu, batch, gpu_batches, prompt, step, weights_on_gpu, host);
        prop_assert_eq!(p.seq_len, prompt + step - 1);
        check_optimal(&p)?;
    }

    /// 1c: grouped-query and multi-query models never recompute, and say why.
    #[test]
    fn gqa_presets_get_zero_split(
        model in prop::sample::select(&GQA_MODELS[..]),
        gpu in prop::sample::select(&SOME_GPUS[..]),
        batch in 1u32..=128,
        gpu_batches in 1u32..=8,
        prompt in 1u32..=4096,
        step in 1u32..=256,
        weights_on_gpu in any::<bool>(),
        host in host_memory(),
    ) {
        let p = preset_problem(model, gpu, batch, gpu_batches, prompt, step, weights_on_gpu, host);
        prop_assert!(p.act_s_per_token >= p.kv_s_per_token, "{model}: {p:?}");
        let s = p.solve().unwrap();
        prop_assert_eq!(s.recompute_tokens, 0);
        prop_assert_eq!(s.reason, Reason::ActivationsNotCheaper);
        prop_assert_eq!(s.layer_s, s.transfer_only_s);
    }
}

/// 1c: the paper's latency setting (MHA OPT, batch 64, A100 PCIe 4.0, weights resident, pinned)
/// under the paper's Eq. 10 (`--split-model paper`) balances recomputation and transfer at an
/// interior split that beats plain transfer, for every context length from 32 to 4096 tokens.
/// The schedule's steady-state model (activations prefetched during the previous layer) also
/// recomputes and beats plain transfer.
#[test]
fn mha_opt_presets_get_an_interior_split() {
    for model in ["opt-1.3b", "opt-6.7b", "opt-13b", "opt-30b"] {
        for prompt in [32, 128, 512, 1024, 2048, 4096] {
            let m = ModelSpec::preset(model).unwrap();
            let hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
            let cost = CostModel::new(&hw);
            let shape = Shape {
                batch: 64,
                gpu_batches: 1,
                prompt,
                gen_len: 2,
            };
            let problem = |sm| {
                split_problem(
                    &cost,
                    &m,
                    &shape,
                    true,
                    kvplan_vocab::host::MemoryKinds::uniform(HostMemory::Pinned),
                    1,
                    sm,
                )
            };
            let p = problem(SplitModel::Paper);
            let s = p.solve().unwrap();
            let l = s.recompute_tokens;
            assert!(
                0 < l && l < p.seq_len,
                "{model} s' = {prompt}: l = {l} is not interior"
            );
            assert_eq!(s.reason, Reason::Balanced, "{model} s' = {prompt}");
            assert!(
                s.layer_s < s.transfer_only_s,
                "{model} s' = {prompt}: {} >= {}",
                s.layer_s,
                s.transfer_only_s
            );
            let q = problem(SplitModel::Schedule);
            let t = q.solve().unwrap();
            assert!(t.recompute_tokens > 0, "{model} s' = {prompt}");
            assert!(t.layer_s < t.transfer_only_s, "{model} s' = {prompt}");
        }
    }
}

proptest! {
    #![proptest_config(crate::props::config(256))]

    /// 1d: in the paper's formula case (`k = 1`, no weights, no other kernels, no latencies,
    /// overheads or memory terms) `t(l) = a*l + max(c*l, e*(s - l))` has its continuous optimum
    /// at `l* = e*s/(c + e)` when `a < e`. The LP must find it to 1e-6*s (simplex round-off on
    /// ms-scaled coefficients; a wrong vertex would be off by a large fraction of s), and the
    /// integer split must be the floor or the ceiling of it (within 1 token).
    #[test]
    fn paper_formula_matches_closed_form(
        s in 1u32..3000,
        e in log_uniform(1e-9, 1e-4),
        a_frac in 0.05..0.95f64,
        c_ratio in log_uniform(1e-3, 1e3),
    ) {
        let a = e * a_frac;
        let c = e * c_ratio;
        let p = SplitProblem {
            seq_len: s,
            gpu_batches: 1,
            weights_s: 0.0,
            weights_kv_s: 0.0,
            copy_latency_s: 0.0,
            act_s_per_token: a,
            kv_s_per_token: e,
            recompute_overhead_s: 0.0,
            recompute_flop_s_per_token: c,
            recompute_mem_fixed_s: 0.0,
            recompute_mem_s_per_token: 0.0,
            concat_s_per_token: 0.0,
            main_compute_s: 0.0,
            serial_prefetch: true,
        };
        let sf = f64::from(s);
        let closed = e * sf / (c + e);
        let lp = p.solve_lp().unwrap();
        prop_assert!((lp - closed).abs() <= 1e-6 * sf, "lp {lp} vs closed form {closed}");
        let split = check_optimal(&p)?;
        let l = f64::from(split.recompute_tokens);
        prop_assert!((l - closed).abs() <= 1.0, "l {l} vs closed form {closed}");
    }
}

/// With nothing cached (`s' = 0`, reachable through the public `SplitProblem` API though not
/// through `plan`, which always has `s' >= 1`), `solve()` returns `l = 0` labelled
/// `Reason::Balanced`, a reason documented as "balanced at an interior split", and the
/// explanation divides 0 by 0 ("NaN% less than transferring all KV") when the layer costs
/// nothing.
#[test]
fn empty_cache_is_not_reported_as_balanced() {
    let p = SplitProblem {
        seq_len: 0,
        gpu_batches: 1,
        weights_s: 0.0,
        weights_kv_s: 0.0,
        copy_latency_s: 10e-6,
        act_s_per_token: 1e-6,
        kv_s_per_token: 2e-6,
        recompute_overhead_s: 0.0,
        recompute_flop_s_per_token: 1e-7,
        recompute_mem_fixed_s: 0.0,
        recompute_mem_s_per_token: 0.0,
        concat_s_per_token: 0.0,
        main_compute_s: 0.0,
        serial_prefetch: true,
    };
    let s = p.solve().unwrap();
    assert_eq!(s.recompute_tokens, 0);
    assert_ne!(
        s.reason,
        Reason::Balanced,
        "l = 0 of s' = 0 is not an interior balance"
    );
    let text = s.reason.explain(&p, &s);
    assert!(!text.contains("NaN"), "{text}");
}

/// With the weights offloaded, a layer's weight copies in the split problem are its three parts'
/// copies (`W_K,W_V`, then `W_Q,W_O`, then the FFN) at their link's cost, and the part recompute
/// waits for is `W_K,W_V`'s; with the weights on the GPU, or in the paper's model, there are
/// none.
#[test]
fn offloaded_weights_are_their_three_parts_copies() {
    let m = ModelSpec::preset("opt-6.7b").unwrap();
    let cost = CostModel::new(&HardwareProfile::preset("a100-40g-pcie4").unwrap());
    let w = m.layer_weights();
    let link = cost.h2d(HostMemory::Pinned);
    let p = preset_problem(
        "opt-6.7b",
        "a100-40g-pcie4",
        8,
        1,
        512,
        4,
        false,
        HostMemory::Pinned,
    );
    let want = link.time(w.kv_proj) + link.time(w.q_o_proj) + link.time(w.ffn);
    assert!(
        (p.weights_s - want).abs() <= 1e-12 * want,
        "{} vs {want}",
        p.weights_s
    );
    assert_eq!(p.weights_kv_s, link.time(w.kv_proj));
    assert!(p.weights_s > p.weights_kv_s);
    let on_gpu = preset_problem(
        "opt-6.7b",
        "a100-40g-pcie4",
        8,
        1,
        512,
        4,
        true,
        HostMemory::Pinned,
    );
    assert_eq!((on_gpu.weights_s, on_gpu.weights_kv_s), (0.0, 0.0));
}

/// The recompute GEMM's FLOPs per token: X's row `[b, h]` times `[h, 2 kv_dim]` is
/// `2 x b x h x 2 kv_dim` FLOPs, against its weights' `h x 2 kv_dim x 2` bytes read once: the
/// ratio of the two terms is `2 b x (s per FLOP) / (2 x s per byte)` at the GEMM's rates,
/// whatever the calibrated scaling (it scales both). The concatenation moves each token's K,V
/// twice.
#[test]
fn recompute_flops_per_token_are_the_gemms() {
    let p = preset_problem(
        "opt-6.7b",
        "a100-40g-pcie4",
        8,
        1,
        512,
        4,
        true,
        HostMemory::Pinned,
    );
    let cost = CostModel::new(&HardwareProfile::preset("a100-40g-pcie4").unwrap());
    let g = cost.gemm_cost(kvplan_vocab::DType::Fp16);
    let ratio = p.recompute_flop_s_per_token / p.recompute_mem_fixed_s;
    let want = 2.0 * 8.0 * g.secs_per_flop / (2.0 * g.secs_per_byte);
    assert!((ratio - want).abs() <= 1e-12 * want, "{ratio} vs {want}");
    // Concatenating the recomputed K,V into the cache reads and writes each token's K,V once
    // per sequence, at the memory-bound kernels' rate.
    let m = ModelSpec::preset("opt-6.7b").unwrap();
    let e = cost.elementwise_cost();
    let want = 2.0 * 8.0 * m.kv_bytes_per_token_layer() as f64 * e.secs_per_byte;
    assert!((p.concat_s_per_token - want).abs() <= 1e-12 * want);
}

/// Where a split leaves the step: transferring the whole cache of a long prompt is link-bound,
/// recomputing all of it is compute-bound.
#[test]
fn a_split_says_which_side_binds() {
    use kvplan_planner::offload::kvpr::Bound;
    let p = preset_problem(
        "opt-6.7b",
        "a100-40g-pcie4",
        32,
        1,
        2048,
        4,
        true,
        HostMemory::Pinned,
    );
    let n = p.seq_len;
    // At l = 0 the link carries the whole cache (44 ms against 1.1 ms of kernels); at l = n it
    // carries the activations, half the cache's bytes (22.0 ms), and recomputing every token
    // takes 23.0 ms: more than the 2% apart that counts as balanced.
    assert!(p.link_s(0) > 1.5 * p.compute_s(0));
    assert!(p.compute_s(n) > 1.03 * p.link_s(n));
    assert_eq!(p.fixed(0).bound, Bound::Link);
    assert_eq!(p.fixed(n).bound, Bound::Compute);
}

/// On a profile with measured GEMM tables the recompute GEMM's terms are the roofline's scaled by
/// the measured / model ratio at this step's recompute shape, and the layer's other kernels are
/// timed at the context the decode token attends to: the `s` cached keys and its own.
#[test]
fn split_problem_scales_to_measured_gemms_and_times_the_step_at_its_context() {
    use kvplan_vocab::layers::{layer_compute_s, recompute_gemm};
    use kvplan_vocab::schedule::OpKind;
    let m = ModelSpec::preset("opt-6.7b").unwrap();
    let cost = CostModel::new(&HardwareProfile::preset("a100-80g-sxm").unwrap());
    let p = preset_problem(
        "opt-6.7b",
        "a100-80g-sxm",
        8,
        1,
        512,
        4,
        true,
        HostMemory::Pinned,
    );
    let s = p.seq_len;
    let OpKind::Gemm {
        m: rows,
        n,
        k,
        dtype,
        ..
    } = recompute_gemm(&m, 8, s)
    else {
        panic!("the recompute is a GEMM")
    };
    let ratio = cost.gemm_ratio(rows, n, k, dtype);
    assert!(
        (ratio - 1.0).abs() > 1e-3,
        "the tables move this shape: {ratio}"
    );
    let g = cost.gemm_cost(dtype);
    let want = 4096.0 * 2.0 * 4096.0 * 2.0 * g.secs_per_byte * ratio;
    assert!(
        (p.recompute_mem_fixed_s - want).abs() <= 1e-12 * want,
        "{} vs {want}",
        p.recompute_mem_fixed_s
    );
    // The launch and FLOP terms scale by the same ratio; the concatenation's launch is added.
    let e = cost.elementwise_cost();
    let (b, h, kvd) = (8.0, 4096.0, 4096.0);
    for (got, want) in [
        (p.recompute_overhead_s, g.overhead_s * ratio + e.overhead_s),
        (
            p.recompute_flop_s_per_token,
            2.0 * b * 2.0 * kvd * h * g.secs_per_flop * ratio,
        ),
        (
            p.recompute_mem_s_per_token,
            b * (h + 2.0 * kvd) * 2.0 * g.secs_per_byte * ratio,
        ),
    ] {
        assert!((got - want).abs() <= 1e-12 * want, "{got} vs {want}");
    }
    let main = layer_compute_s(&cost, &m, 8, 1, s + 1);
    assert!(
        (p.main_compute_s - main).abs() <= 1e-15,
        "{} vs {main}",
        p.main_compute_s
    );
    assert!(p.main_compute_s > layer_compute_s(&cost, &m, 8, 1, s - 1));
}

/// The recompute kernels' time: launch, the slower of FLOPs and memory (weights once plus rows
/// per token), and the K,V concatenation per token; nothing at `l = 0`. Worked by hand.
#[test]
fn recompute_time_is_launch_plus_the_slower_roofline_term_plus_concatenation() {
    let p = SplitProblem {
        seq_len: 1000,
        gpu_batches: 1,
        weights_s: 0.0,
        weights_kv_s: 0.0,
        copy_latency_s: 0.0,
        act_s_per_token: 1.0,
        kv_s_per_token: 2.0,
        recompute_overhead_s: 1.0,
        recompute_flop_s_per_token: 2.0,
        recompute_mem_fixed_s: 100.0,
        recompute_mem_s_per_token: 3.0,
        concat_s_per_token: 0.5,
        main_compute_s: 0.0,
        serial_prefetch: false,
    };
    assert_eq!(p.recompute_s(0), 0.0);
    // Memory-bound: max(2 l, 100 + 3 l) = 100 + 3 l.
    assert_eq!(p.recompute_s(10), 1.0 + 130.0 + 5.0);
    assert_eq!(p.recompute_s(100), 1.0 + 400.0 + 50.0);
    // FLOP-bound once the weights are small: max(2 l, 1 + l).
    let q = SplitProblem {
        recompute_mem_fixed_s: 1.0,
        recompute_mem_s_per_token: 1.0,
        ..p
    };
    assert_eq!(q.recompute_s(10), 1.0 + 20.0 + 5.0);
}
