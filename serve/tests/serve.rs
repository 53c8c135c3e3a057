//! The serving simulator against the op-level engine, closed forms and the published study.

use kvplan_planner::plan::{Options, Shape, Strategy as PlanStrategy, plan};
use kvplan_serve::iteration::{EngineCosts, HybridResume};
use kvplan_serve::{
    Config, FinishReason, IterationShape, IterationTimer, Preemption, RejectReason, SchedulerKind,
    ServeReport, Status, simulate, simulate_with,
};
use kvplan_sim::engine::makespan;
use kvplan_vocab::layers::head_ops;
use kvplan_vocab::schedule::OpKind;
use kvplan_vocab::timeline::{Window, metrics};
use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};
use kvplan_workloads::Request;
use proptest::prelude::*;

fn setup(model: &str, hw: &str) -> (ModelSpec, HardwareProfile, CostModel) {
    let m = ModelSpec::preset(model).unwrap();
    let h = HardwareProfile::preset(hw).unwrap();
    let c = CostModel::new(&h);
    (m, h, c)
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-300)
}

/// What a step runs, each kind generated on purpose (a quarter of the cases each): nothing;
/// decode only (every sequence one new token after up to 4000 cached: vLLM's uniform decode
/// step, 1 to 64 sequences); prefill only (whole prompts, nothing cached); mixed (decodes and
/// prefill chunks with cached prefixes together). `(q_len, kv_len)` per sequence.
fn batch() -> impl Strategy<Value = Vec<(u32, u32)>> {
    let decode = prop::collection::vec((1u32..4000).prop_map(|kv| (1, kv)), 1..64);
    let prefill = prop::collection::vec((1u32..600).prop_map(|q| (q, q)), 1..8);
    let chunk = prop::collection::vec((2u32..300, 0u32..2000).prop_map(|(q, c)| (q, q + c)), 1..6);
    prop_oneof![
        Just(Vec::new()),
        decode.clone(),
        prefill,
        (decode, chunk).prop_map(|(mut d, c)| {
            d.extend(c);
            d
        }),
    ]
}

proptest! {
    #![proptest_config(crate::props::config(48))]
    /// The closed-form iteration time equals the planner engine's makespan of the iteration's
    /// schedule (ragged batch, swap-out / swap-in copies, hybrid recomputation), on a
    /// full-duplex and a half-duplex profile.
    #[test]
    fn iteration_time_equals_engine_makespan(
        seqs in batch(),
        logits_frac in 0.0f64..1.0,
        out_blocks in 0u32..4,
        act_out in 0u32..3,
        in_blocks in 0u32..4,
        hybrid in prop::collection::vec((0u32..3, 0u32..40), 0..2),
        half in any::<bool>(),
        copies in 1u32..8,
    ) {
        let (m, mut hw, _) = setup("opt-125m", "a100-40g-pcie4");
        if half {
            hw.link.duplex = kvplan_vocab::hardware::Duplex::Half;
        }
        let cost = CostModel::new(&hw);
        let mut timer = IterationTimer::new(&m, &cost, 16, copies, true);
        let mut it = IterationShape::default();
        it.seqs.clone_from(&seqs);
        it.logits = (logits_frac * seqs.len() as f64).round() as u32;
        it.swap_out_blocks = out_blocks;
        it.act_out_blocks = act_out;
        it.swap_in_blocks = in_blocks;
        for &(a, r) in &hybrid {
            it.hybrid.push(HybridResume { act_blocks: a, recompute_tokens: r });
        }
        let fast = timer.time(&it).total_s;
        let sched = timer.schedule(&it);
        let slow = makespan(&sched, &cost).unwrap();
        // Relative 1e-9: both sum the same op durations, in different orders (closed form vs
        // event loop), so only rounding separates them.
        prop_assert!(rel(fast, slow) < 1e-9 || (fast == 0.0 && slow == 0.0), "fast {fast} engine {slow}");
    }

    /// The same for a mixture of experts that keeps some layers dense (a Qwen2-MoE-style model
    /// with a shared expert, tensor-parallel or not): the closed form costs each layer as its
    /// kind, and the schedule emits each layer's own ops.
    #[test]
    fn moe_iteration_time_equals_engine_makespan(
        seqs in batch().prop_filter("a step with work", |s| !s.is_empty()),
        tp in prop::sample::select(vec![1u32, 2]),
        step in 1u32..4,
    ) {
        let m = moe_model(step).sharded(tp).unwrap();
        prop_assert!(m.moe_layers() > 0);
        let cost = CostModel::new(&HardwareProfile::preset("h100-sxm").unwrap());
        let mut timer = IterationTimer::new(&m, &cost, 16, 1, true);
        let mut it = IterationShape::default();
        it.seqs.clone_from(&seqs);
        it.logits = seqs.len() as u32;
        let fast = timer.time(&it).total_s;
        let sched = timer.schedule(&it);
        let slow = makespan(&sched, &cost).unwrap();
        prop_assert!(rel(fast, slow) < 1e-9, "fast {fast} engine {slow}");
        // Each dense layer's FFN is one up projection; each MoE layer's a router and experts.
        let label = |name: &str| sched.ops().iter().filter(|o| sched.label(o) == name).count();
        prop_assert_eq!(label("router"), m.moe_layers() as usize);
        prop_assert_eq!(label("ffn_up"), m.num_layers as usize);
    }

    /// A dense model at tensor-parallel sizes 1, 2 and 4: the closed-form step equals the
    /// engine's makespan of its schedule, the schedule all-reduces each layer's attention and
    /// FFN output (the rows' hidden states over the ranks; none on one GPU), and the step takes
    /// its other kernels plus exactly those all-reduces. Dropping the all-reduce from the serving
    /// iteration (its closed form, or the layer's ops) fails here; the MoE test above is the
    /// only other that shards a model.
    #[test]
    fn dense_iteration_time_includes_the_tensor_parallel_all_reduce(
        seqs in batch().prop_filter("a step with work", |s| !s.is_empty()),
        tp in prop::sample::select(vec![1u32, 2, 4]),
    ) {
        let m = ModelSpec::preset("llama-2-7b").unwrap().sharded(tp).unwrap();
        prop_assert!(m.moe.is_none());
        let cost = CostModel::new(&HardwareProfile::preset("h100-sxm").unwrap());
        let mut timer = IterationTimer::new(&m, &cost, 16, 1, true);
        let mut it = IterationShape::default();
        it.seqs.clone_from(&seqs);
        it.logits = seqs.len() as u32;
        let fast = timer.time(&it).total_s;
        let sched = timer.schedule(&it);
        let slow = makespan(&sched, &cost).unwrap();
        prop_assert!(rel(fast, slow) < 1e-9, "tp {tp}: fast {fast} engine {slow}");
        let is_ar = |k: &OpKind| matches!(k, OpKind::AllReduce { .. });
        let ars: Vec<&OpKind> = sched.ops().iter().map(|o| &o.kind).filter(|k| is_ar(k)).collect();
        if tp == 1 {
            prop_assert!(ars.is_empty(), "an all-reduce on one GPU");
            return Ok(());
        }
        let rows: u64 = seqs.iter().map(|&(q, _)| u64::from(q)).sum();
        let bytes = rows * u64::from(m.hidden) * m.dtype_bytes();
        prop_assert_eq!(ars.len(), 2 * m.num_layers as usize, "two all-reduces per layer");
        for k in &ars {
            prop_assert_eq!(**k, OpKind::AllReduce { bytes, ranks: tp as u16 });
        }
        let each = cost.allreduce(bytes, tp as u16);
        prop_assert!(each > 0.0);
        // One compute stream, no copies: the step is the sum of its kernels.
        let others: f64 = (sched.ops().iter())
            .filter(|o| !is_ar(&o.kind))
            .map(|o| cost.duration(&o.kind))
            .sum();
        let with = others + 2.0 * f64::from(m.num_layers) * each;
        prop_assert!(
            rel(fast, with) < 1e-9,
            "tp {tp}: step {fast} s, its other kernels {others} s + {} all-reduces of {each} s = {with} s",
            2 * m.num_layers
        );
    }
}

proptest! {
    #![proptest_config(crate::props::config(64))]
    /// No step is faster than its roofline (`roofline::step_roofline`, computed from the model's
    /// shapes and the profile's datasheet peaks, not the cost model), whatever its kind: decode
    /// only, prefill only or mixed; eager on the plain timer and with vLLM V1's CUDA graphs and
    /// host costs. A cost model that halved a kernel, or skipped a layer, would cross it.
    #[test]
    fn no_step_beats_its_roofline(
        seqs in batch().prop_filter("a step with work", |s| !s.is_empty()),
        hw in prop::sample::select(vec!["a100-80g-sxm", "a100-40g-pcie4", "h100-sxm"]),
        model in prop::sample::select(vec!["llama-2-7b", "llama-3-8b"]),
    ) {
        let (m, h, cost) = setup(model, hw);
        let resolved = Config::default().validate(&m, &h).unwrap();
        let mut plain = IterationTimer::new(&m, &cost, 16, 1, true);
        let mut graphs = IterationTimer::new(&m, &cost, 16, 1, true).with_engine(EngineCosts {
            cudagraph_sizes: resolved.cudagraph_sizes.clone(),
            full_graph_max_seqs: resolved.max_num_seqs,
            serving: h.serving.clone(),
        });
        let mut it = IterationShape::default();
        it.seqs.clone_from(&seqs);
        it.logits = seqs.len() as u32;
        let roof = crate::roofline::step_roofline(&m, &h, &seqs, it.logits);
        for t in [plain.time(&it).total_s, graphs.time(&it).total_s] {
            prop_assert!(t >= roof, "{model} {hw} {seqs:?}: {t} s under the roofline {roof} s");
        }
    }
}

/// A 6-layer mixture of experts whose every `step`-th layer is MoE (and layer 5 dense).
fn moe_model(step: u32) -> ModelSpec {
    ModelSpec::from_hf_config_str(
        &format!(
            r#"{{"model_type":"qwen2_moe","hidden_size":512,"num_attention_heads":8,
            "num_key_value_heads":4,"num_hidden_layers":6,"vocab_size":4000,
            "max_position_embeddings":4096,"torch_dtype":"bfloat16","intermediate_size":1024,
            "num_experts":16,"num_experts_per_tok":4,"moe_intermediate_size":128,
            "shared_expert_intermediate_size":512,"decoder_sparse_step":{step},
            "mlp_only_layers":[5]}}"#
        ),
        "tiny-moe",
        "tiny-moe",
    )
    .unwrap()
}

/// One request alone on a plain engine (every kernel launched eagerly, no host time, vLLM
/// 0.4's synchronous steps): TTFT is the gpu-only plan's prefill end and E2E its makespan, the
/// serving iteration emitting the planner's ops per step. One difference is by design: the
/// serving step runs the final norm over every token of a prefill (vLLM's `LlamaModel` normalises
/// all hidden states), the planner over the one row that produces a token; the test adds that
/// difference from the cost model.
#[test]
fn one_request_equals_gpu_only_plan() {
    let (m, hw, cost) = setup("llama-2-7b", "a100-80g-sxm");
    for (prompt, gen_len) in [(512u32, 32u32), (100, 1), (1500, 7)] {
        let shape = Shape {
            batch: 1,
            gpu_batches: 1,
            prompt,
            gen_len,
        };
        let p = plan(
            &m,
            &hw,
            &cost,
            &shape,
            PlanStrategy::GPU_ONLY,
            &Options::default(),
        )
        .unwrap();
        let tl = kvplan_sim::engine::simulate(&p.schedule, &cost).unwrap();
        let mt = metrics(&p.schedule, &tl, Window::Whole);
        let reqs = [Request::new(0, 0.0, prompt, gen_len)];
        let cfg = Config::vllm_v0();
        let resolved = cfg.validate(&m, &hw).unwrap();
        let timer = IterationTimer::new(&m, &cost, 16, resolved.copies_per_block, true);
        let out = simulate_with(timer, resolved, 0.0, &reqs).unwrap();
        let r = &out.requests[0];
        assert_eq!(r.status, Status::Finished);
        let norm = |rows| cost.duration(&head_ops(&m, rows)[0].1);
        let extra = norm(prompt) - norm(1);
        // Relative 1e-6: the same op durations summed per iteration here and per op on the
        // planner's timeline (up to 32 steps of a few hundred ops each), so only rounding
        // separates them.
        let ttft = mt.prefill_end_s + extra;
        assert!(
            rel(r.ttft_s, ttft) < 1e-6,
            "ttft {} vs plan {ttft}",
            r.ttft_s
        );
        let e2e = mt.makespan_s + extra;
        assert!(rel(r.e2e_s, e2e) < 1e-6, "e2e {} vs plan {e2e}", r.e2e_s);
        assert_eq!(r.queue_s, 0.0);
    }
}

/// Deterministic Poisson-like arrivals (a tiny LCG, no dependency on workloads' generators).
fn poisson(n: usize, qps: f64, prompt: u32, output: u32, seed: u64) -> Vec<Request> {
    let mut x = seed;
    let mut t = 0.0;
    (0..n)
        .map(|id| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let u = ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
            t += -u.ln() / qps;
            Request::new(id as u64, t, prompt, output)
        })
        .collect()
}

/// An M/D/1-like light load (one request takes ~0.2 s; 0.2 QPS is ~4% utilisation) barely
/// queues: mean queueing under 1% of mean E2E.
#[test]
fn light_load_has_no_queueing() {
    let (m, hw, _) = setup("llama-2-7b", "a100-80g-sxm");
    let reqs = poisson(200, 0.2, 256, 16, 7);
    let out = simulate(&m, &hw, &Config::default(), &reqs).unwrap();
    let s = &out.summary;
    assert_eq!(s.finished, 200);
    assert!(
        s.queue_s.mean < 0.01 * s.e2e_s.mean,
        "queue {} e2e {}",
        s.queue_s.mean,
        s.e2e_s.mean
    );
}

fn decode_tokens_per_s(batch: u32) -> f64 {
    let (m, hw, _) = setup("llama-2-7b", "a100-80g-sxm");
    let reqs: Vec<Request> = (0..batch)
        .map(|id| Request::new(u64::from(id), 0.0, 128, 129))
        .collect();
    let out = simulate(&m, &hw, &Config::default(), &reqs).unwrap();
    // Decode iterations only: batch tokens = running sequences, all decoding.
    let dec: Vec<_> = out
        .iterations
        .iter()
        .filter(|r| r.batch_tokens == r.running && r.running == batch)
        .collect();
    assert!(!dec.is_empty());
    let toks: f64 = dec.iter().map(|r| f64::from(r.batch_tokens)).sum();
    let secs: f64 = dec.iter().map(|r| r.duration_s).sum();
    toks / secs
}

/// Decode throughput grows with batch and flattens (memory-bound weights amortised, then the
/// GEMMs turn compute-bound).
#[test]
fn decode_throughput_grows_and_saturates() {
    let t: Vec<f64> = [1, 8, 64, 256]
        .iter()
        .map(|&b| decode_tokens_per_s(b))
        .collect();
    // Batch 1 -> 8: decode at small batch is bound by reading the weights once per step, so
    // the ideal is 8x; at least 4x (half of it) leaves room for the KV reads and the per-row
    // GEMM terms the preset cost model adds. A direction check, not a fitted number.
    assert!(t[1] > 4.0 * t[0], "{t:?}");
    assert!(t[2] > t[1] && t[3] > t[2], "{t:?}");
    // Gains shrink: 8 -> 64 is 8x more sequences, 64 -> 256 only 4x; per-doubling gain falls.
    let g1 = (t[2] / t[1]).ln() / 3.0;
    let g2 = (t[3] / t[2]).ln() / 2.0;
    assert!(g2 < g1, "{t:?}");
}

/// Chunked prefill with a small token budget splits every prompt into many short forward
/// passes: lower throughput than prefill-first on the same prompt-heavy load.
#[test]
fn chunked_prefill_lowers_throughput_when_passes_are_short() {
    let (m, hw, _) = setup("llama-2-7b", "a100-80g-sxm");
    let reqs: Vec<Request> = (0..64).map(|id| Request::new(id, 0.0, 2048, 4)).collect();
    let base = simulate(&m, &hw, &Config::vllm_v0(), &reqs).unwrap();
    let chunked = Config {
        scheduler: SchedulerKind::Chunked,
        max_num_batched_tokens: Some(128),
        // vLLM refuses a budget below max_num_seqs (0.4.2's default is 256).
        max_num_seqs: Some(128),
        ..Config::vllm_v0()
    };
    let ch = simulate(&m, &hw, &chunked, &reqs).unwrap();
    assert_eq!(ch.summary.finished, 64);
    // At least 5% lower: each 2048-token prompt becomes 16 passes of 128 tokens, each reading
    // the weights again. The margin only keeps the direction clear of rounding; not fitted.
    assert!(
        ch.summary.total_tokens_per_s < 0.95 * base.summary.total_tokens_per_s,
        "chunked {} prefill-first {}",
        ch.summary.total_tokens_per_s,
        base.summary.total_tokens_per_s
    );
}

/// Study table (vLLM 0.4.2, A100-40GB, Yarn-Llama-2-7B, block 16, pinned): the resume cost of
/// evicted tokens. Recompute: the prefill of the evicted tokens (the re-prefill iteration less
/// the decode step it replaces). Swap: the swap-in copies (2 × layers copies per block, vLLM's
/// per-layer K and V caches). Computed from the preset cost model, nothing fitted to these rows.
/// Tolerance per column (the table gives milliseconds, 0.1-0.7% of a row):
/// - swap 5%: bytes over the profile's pinned bandwidth and one latency a copy, the same link's
///   measured figures (seen: 1-3% from 2048 tokens);
/// - recompute 10%: a prefill on the datasheet-roofline preset, whose attention efficiency is
///   one number for every length (seen: 0-9% at 2048-4096 tokens).
///
/// The rows outside are in [`STUDY_KNOWN_MISSES`].
pub(crate) const STUDY_TOLERANCE: (f64, f64) = (0.10, 0.05);

/// Study cells outside their column's tolerance (evicted tokens, column, bound met). Each must
/// still miss (a cell that comes within its tolerance leaves the list):
/// - 1024 tokens, both columns: the model is 6-11 ms under the measured 68-69 ms, a fixed cost
///   per resume in vLLM 0.4's Python (block tables and 2 × 32 × 64 copy descriptors, or the
///   re-scheduled prompt) the model does not count; it matters only at the shortest row.
/// - recompute at 8192 and 16384 tokens: the model's prefill is 15% and 22% slow, its
///   attention's cost growing with the square of the length faster than vLLM 0.4.2's
///   FlashAttention kernel did on the A100 (its efficiency rises with length; the preset's is
///   one number).
pub(crate) const STUDY_KNOWN_MISSES: &[(u32, &str, f64)] = &[
    (1024, "recompute", 0.18),
    (1024, "swap", 0.10),
    (8192, "recompute", 0.17),
    (16384, "recompute", 0.25),
];

#[test]
fn study_resume_costs_per_row() {
    let (m, _, cost) = setup("yarn-llama-2-7b", "a100-40g-pcie4");
    let mut timer = IterationTimer::new(&m, &cost, 16, 2 * m.num_layers, true);
    let table = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../data/validation/serving_swap_vs_recompute_a100.csv"
    ))
    .expect("data/validation/serving_swap_vs_recompute_a100.csv");
    let mut report = String::new();
    let mut failures = Vec::new();
    let mut rows = 0;
    for line in table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("evicted"))
    {
        let f: Vec<f64> = line.split(',').map(|x| x.trim().parse().unwrap()).collect();
        let n = f[0] as u32;
        let recompute = timer.forward_s(&[(n, n)], 1) - timer.forward_s(&[(1, n + 1)], 1);
        let swap = f64::from(n.div_ceil(16)) * timer.kv_block_s().1;
        for (column, got, want, tol) in [
            ("recompute", recompute, f[1], STUDY_TOLERANCE.0),
            ("swap", swap, f[2], STUDY_TOLERANCE.1),
        ] {
            let err = got / want - 1.0;
            let miss = STUDY_KNOWN_MISSES
                .iter()
                .find(|x| x.0 == n && x.1 == column);
            let bound = miss.map_or(tol, |x| x.2);
            report += &format!(
                "{n} {column}: {got:.4} s vs {want} s ({:+.0}%, bound {:.0}%){}\n",
                err * 100.0,
                bound * 100.0,
                if miss.is_some() { " [known miss]" } else { "" }
            );
            if err.abs() > bound {
                failures.push(format!("{n} {column}: {:+.1}%", err * 100.0));
            }
            if miss.is_some() && err.abs() <= tol {
                failures.push(format!(
                    "{n} {column}: {:+.1}% is within {:.0}%: remove it from STUDY_KNOWN_MISSES",
                    err * 100.0,
                    tol * 100.0
                ));
            }
        }
        rows += 1;
    }
    eprintln!("{report}");
    assert_eq!(rows, 5);
    assert!(failures.is_empty(), "{failures:#?}\n{report}");
}

fn run_mode(reqs: &[Request], util: f64, mode: Preemption, block: u32) -> ServeReport {
    let (m, hw, _) = setup("llama-2-7b", "a100-40g-pcie4");
    let cfg = Config {
        gpu_memory_utilization: util,
        preemption: mode,
        block_size: block,
        swap_space_gib: 64.0,
        ..Config::vllm_v0()
    };
    simulate(&m, &hw, &cfg, reqs).unwrap()
}

fn run_on(model: &str, hw: &str, reqs: &[Request], mode: Preemption) -> ServeReport {
    let (m, hw, _) = setup(model, hw);
    let cfg = Config {
        preemption: mode,
        swap_space_gib: 128.0,
        ..Config::vllm_v0()
    };
    simulate(&m, &hw, &cfg, reqs).unwrap()
}

fn same(n: u64, prompt: u32, output: u32) -> Vec<Request> {
    (0..n)
        .map(|id| Request::new(id, 0.0, prompt, output))
        .collect()
}

/// The study's direction: swap beats recompute when spare KV memory is small and loses when it
/// is large. Swap pays the swap-out and the swap-in (vLLM 0.4 issues both on the compute
/// stream, so neither overlaps a forward pass); recompute pays the re-prefill, whose attention
/// grows quadratically. On Yarn-Llama-2-7B / A100 the model puts the crossover near 32K evicted
/// tokens (32K: recompute 3.8 s vs swap 2.0 + 2.0 s; 48K: 7.1 s vs 6.0 s), which the study's
/// A100-40GB cannot reach (its cache holds ~35K tokens), so the scarce case runs on the 80 GB
/// A100 (~108K tokens).
/// - Scarce: four 58K-token requests; the cache holds fewer than two, so spare memory is less
///   than one request and every preemption evicts a ~50K-token context: swap wins
///   (measured 1037.6 s vs 1045.9 s, 3 preemptions, on the preset's fitted [kernels]).
/// - Spare: sixty-four 2K-token requests; the cache holds ~54 at once, so spare memory is many
///   requests and the few preemptions evict 1-2K tokens, where the copies' per-block latency
///   and the doubled transfer lose to a short re-prefill: recompute wins (61.1 s vs 62.1 s,
///   10 preemptions).
#[test]
fn swap_beats_recompute_when_spare_memory_is_small_and_loses_when_large() {
    let (model, hw) = ("yarn-llama-2-7b", "a100-80g-sxm");
    let scarce = same(4, 50000, 8000);
    let r = run_on(model, hw, &scarce, Preemption::Recompute);
    let s = run_on(model, hw, &scarce, Preemption::Swap);
    eprintln!(
        "scarce: recompute {} swap {} (preemptions {} {})",
        r.summary.makespan_s, s.summary.makespan_s, r.summary.preemptions, s.summary.preemptions
    );
    assert_eq!((r.summary.finished, s.summary.finished), (4, 4));
    assert!(r.summary.preemptions > 0 && s.summary.preemptions > 0);
    assert!(s.summary.makespan_s < r.summary.makespan_s);
    let spare = same(64, 1000, 1000);
    let r = run_on(model, hw, &spare, Preemption::Recompute);
    let s = run_on(model, hw, &spare, Preemption::Swap);
    eprintln!(
        "spare: recompute {} swap {} (preemptions {} {})",
        r.summary.makespan_s, s.summary.makespan_s, r.summary.preemptions, s.summary.preemptions
    );
    assert!(r.summary.preemptions > 0 && s.summary.preemptions > 0);
    assert!(r.summary.makespan_s < s.summary.makespan_s);
}

/// On the study's A100-40GB the evicted contexts stay under the ~32K-token crossover, and
/// recompute edges out swap (469.1 s vs 470.6 s on six 18K-token requests, 3 preemptions);
/// hybrid, which stores `X` for most tokens and so moves fewer bytes both ways, beats both.
fn run_long(reqs: &[Request], mode: Preemption) -> ServeReport {
    run_on("yarn-llama-2-7b", "a100-40g-pcie4", reqs, mode)
}

/// Hybrid finishes, and on an MHA model is not slower than swap or recompute end to end.
#[test]
fn hybrid_finishes_and_is_not_slower_than_swap() {
    let long = same(6, 12000, 6000);
    let r = run_long(&long, Preemption::Recompute);
    let s = run_long(&long, Preemption::Swap);
    let h = run_long(&long, Preemption::Hybrid);
    eprintln!(
        "recompute {} swap {} hybrid {}",
        r.summary.makespan_s, s.summary.makespan_s, h.summary.makespan_s
    );
    assert_eq!(h.summary.finished, 6);
    assert!(h.summary.preemptions > 0);
    assert!(h.summary.makespan_s < s.summary.makespan_s);
    assert!(h.summary.makespan_s < r.summary.makespan_s);
    // Fewer bytes both ways: X is half a token's K,V on MHA.
    assert!(h.summary.swap_out_bytes < s.summary.swap_out_bytes);
    assert!(h.summary.swap_in_bytes < s.summary.swap_in_bytes);
}

/// Hybrid's resume (X[0:l] in, K,V[0:l] recomputed while KV[l:] streams in) costs no more than
/// swap-in or the re-prefill on an MHA model at 4K-16K evicted tokens; on a GQA model a token's
/// X (h = 4096) is larger than its K,V (2 x 1024), so with equal copy counts the split is
/// l = 0 and hybrid is swap.
#[test]
fn hybrid_resume_is_cheapest_on_mha_and_swap_on_gqa() {
    let (m, _, cost) = setup("yarn-llama-2-7b", "a100-40g-pcie4");
    let mut timer = IterationTimer::new(&m, &cost, 16, 2 * m.num_layers, true);
    for n in [4096u32, 8192, 16384] {
        let blocks = n.div_ceil(16);
        let split = timer.hybrid_split(n);
        assert!(split.act_blocks > 0 && split.act_blocks <= blocks);
        let decode = timer.forward_s(&[(1, n + 1)], 1);
        let resume = |timer: &mut IterationTimer, kv: u32, h: Option<HybridResume>| {
            let mut it = IterationShape::default();
            it.seqs.push((1, n + 1));
            it.logits = 1;
            it.swap_in_blocks = kv;
            it.hybrid.extend(h);
            timer.time(&it).total_s - decode
        };
        let hybrid = resume(&mut timer, blocks - split.act_blocks, Some(split));
        let swap = resume(&mut timer, blocks, None);
        let recompute = timer.forward_s(&[(n, n)], 1) - decode;
        eprintln!(
            "{n}: hybrid {hybrid:.4} (l = {}) swap {swap:.4} recompute {recompute:.4}",
            split.recompute_tokens
        );
        // Relative 1e-9: the closed form and the iteration timer sum the same terms; rounding.
        assert!(rel(hybrid, timer.hybrid_resume_s(n, split.act_blocks)) < 1e-9);
        assert!(hybrid <= swap.min(recompute), "{n}");
    }
    let (g, hw, cost) = setup("llama-3-8b", "a100-80g-sxm");
    // With vLLM's layout (2 x layers copies per KV block) a block of K,V costs more copies
    // than a block of X (one per layer), and at 16 tokens per block the per-copy latency
    // outweighs X's larger bytes: the model gives l > 0 there (reported, not asserted).
    let vllm = IterationTimer::new(&g, &cost, 16, 2 * g.num_layers, true);
    for n in [4096u32, 16384] {
        let h = vllm.hybrid_split(n);
        eprintln!(
            "gqa, 2L copies per block, {n}: l = {} resume {:.4} vs swap {:.4}",
            h.recompute_tokens,
            vllm.hybrid_resume_s(n, h.act_blocks),
            vllm.hybrid_resume_s(n, 0)
        );
    }
    // With as many copies per KV block as per X block (K and V of a layer in one tensor),
    // only bytes differ, X's are larger, and hybrid is swap.
    let timer = IterationTimer::new(&g, &cost, 16, g.num_layers, true);
    for n in [4096u32, 8192, 16384] {
        assert_eq!(timer.hybrid_split(n), HybridResume::default(), "{n}");
    }
    let reqs = poisson(300, 40.0, 700, 300, 3);
    let cfg = |mode| Config {
        preemption: mode,
        swap_copies_per_block: Some(g.num_layers),
        gpu_memory_utilization: 0.3,
        swap_space_gib: 64.0,
        ..Config::vllm_v0()
    };
    let s = simulate(&g, &hw, &cfg(Preemption::Swap), &reqs).unwrap();
    let h = simulate(&g, &hw, &cfg(Preemption::Hybrid), &reqs).unwrap();
    assert!(s.summary.preemptions > 0);
    assert_eq!(s.summary.makespan_s, h.summary.makespan_s);
    assert_eq!(s.summary.swap_out_bytes, h.summary.swap_out_bytes);
}

/// Hybrid's split against brute force: the bisection's choice resumes as fast as the best of
/// every split `l = 0..=blocks` (the resume time falls and then rises in `l`, so the balance
/// block, the one before it and `l = 0` hold the minimum), on an MHA model where `l > 0` wins.
#[test]
fn hybrid_split_is_the_fastest_of_every_split() {
    let (m, _, cost) = setup("yarn-llama-2-7b", "a100-40g-pcie4");
    let timer = IterationTimer::new(&m, &cost, 16, 2 * m.num_layers, true);
    for n in [100u32, 1000, 4096, 8191, 16384] {
        let blocks = n.div_ceil(16);
        let split = timer.hybrid_split(n);
        let best = (0..=blocks)
            .map(|l| timer.hybrid_resume_s(n, l))
            .fold(f64::INFINITY, f64::min);
        let got = timer.hybrid_resume_s(n, split.act_blocks);
        assert!(
            rel(got, best) < 1e-12,
            "{n}: split {split:?} resumes in {got}, best {best}"
        );
        assert_eq!(
            split.recompute_tokens,
            (split.act_blocks * 16).min(n),
            "{n}"
        );
        assert!(
            split.act_blocks > 0,
            "{n}: on MHA some blocks are recomputed"
        );
    }
}

/// Prompts with no room for an output token, and empty requests, are rejected with a reason;
/// a request whose output would pass `max_model_len` (the model's 4096 here) is served and cut
/// there, finish reason `length`, as vLLM's `check_stop` does; on the 0.4 schedulers a request
/// longer than all KV memory is rejected.
#[test]
fn impossible_requests_are_rejected() {
    let (m, hw, _) = setup("llama-2-7b", "a100-80g-sxm");
    let reqs = [
        Request::new(0, 0.0, 4000, 200),
        Request::new(1, 0.0, 100, 10),
        Request::new(2, 0.1, 0, 10),
        Request::new(3, 0.1, 4096, 10),
        Request::new(4, 0.1, 4095, 10),
    ];
    for cfg in [Config::default(), Config::vllm_v0()] {
        let out = simulate(&m, &hw, &cfg, &reqs).unwrap();
        let r = &out.requests;
        assert_eq!(r[0].status, Status::Finished);
        assert_eq!(r[0].finish_reason, Some(FinishReason::Length));
        assert_eq!(r[0].output_tokens, 96);
        assert_eq!(r[1].status, Status::Finished);
        assert_eq!(r[1].finish_reason, Some(FinishReason::Stop));
        assert_eq!(r[1].output_tokens, 10);
        assert_eq!(r[2].status, Status::Rejected(RejectReason::EmptyRequest));
        assert_eq!(r[3].status, Status::Rejected(RejectReason::PromptTooLong));
        assert_eq!((r[4].status, r[4].output_tokens), (Status::Finished, 1));
        assert_eq!(out.summary.truncated, 2);
        assert_eq!(
            out.summary.rejected_by_reason.get("prompt-too-long"),
            Some(&1)
        );
    }
    let (m, hw, _) = setup("yarn-llama-2-7b", "a100-40g-pcie4");
    let big = [Request::new(0, 0.0, 60000, 100)];
    let cfg = Config {
        scheduler: SchedulerKind::Chunked,
        ..Config::vllm_v0()
    };
    let out = simulate(&m, &hw, &cfg, &big).unwrap();
    assert_eq!(
        out.requests[0].status,
        Status::Rejected(RejectReason::ExceedsKvCapacity)
    );
}

fn all_bytes(o: &ServeReport) -> Vec<u8> {
    let mut v = Vec::new();
    o.write_requests_csv(&mut v).unwrap();
    o.write_timeseries_csv(&mut v).unwrap();
    o.write_summary_json(&mut v).unwrap();
    o.write_chrome_trace(&mut v).unwrap();
    v
}

/// Same inputs, byte-identical outputs (with preemption and swapping in play).
#[test]
fn outputs_are_deterministic() {
    let reqs = poisson(300, 40.0, 700, 300, 3);
    for mode in [Preemption::Recompute, Preemption::Swap, Preemption::Hybrid] {
        let a = run_mode(&reqs, 0.5, mode, 16);
        let b = run_mode(&reqs, 0.5, mode, 16);
        assert_eq!(all_bytes(&a), all_bytes(&b));
        assert_eq!(a.summary.finished, 300);
    }
}

/// Every scheduler serves a bursty mixed load to completion and never over-commits blocks.
#[test]
fn schedulers_finish_and_respect_blocks() {
    let reqs = poisson(300, 50.0, 900, 200, 11);
    for sched in [
        SchedulerKind::VllmV1,
        SchedulerKind::PrefillFirst,
        SchedulerKind::Mixed,
        SchedulerKind::Chunked,
    ] {
        for mode in [Preemption::Recompute, Preemption::Swap, Preemption::Hybrid] {
            if sched == SchedulerKind::VllmV1 && mode != Preemption::Recompute {
                continue;
            }
            let (m, hw, _) = setup("llama-2-7b", "a100-40g-pcie4");
            let cfg = Config {
                scheduler: sched,
                preemption: mode,
                gpu_memory_utilization: 0.5,
                ..Config::vllm_v0()
            };
            let out = simulate(&m, &hw, &cfg, &reqs).unwrap();
            assert_eq!(out.summary.finished, 300, "{sched:?} {mode:?}");
            let cap = out.summary.gpu_blocks;
            assert!(out.iterations.iter().all(|r| r.gpu_blocks_used <= cap));
            assert!(out.iterations.iter().all(|r| r.running <= 256));
        }
    }
}

/// The regression file committed beside this test (`serve.proptest-regressions`) is what the
/// property tests read and replay first. Proptest's default would look under
/// `serve/proptest-regressions/`, since `tests/main.rs` makes `tests/` look like a crate root.
#[test]
fn committed_proptest_regressions_are_replayed() {
    let persistence = crate::props::config(1)
        .failure_persistence
        .expect("persisted");
    let seeds = persistence.load_persisted_failures2(Some(file!()));
    assert!(!seeds.is_empty(), "no seeds read for {}", file!());
}

/// Asynchronous steps on a vLLM 0.4 engine with swap: request 2 is swapped out (the victim of
/// request 0's next block) while the step sampling its last token is in flight. It finishes
/// once, leaves the swapped queue and gives its host copy back, instead of staying there to be
/// swapped in again (a token past its output length and a second end) or, once retired,
/// indexed out of the engine's window (a panic). Found by
/// `invariants::v0_engines_keep_their_invariants`.
#[test]
fn a_request_swapped_out_with_its_last_token_in_flight_ends_once() {
    let (m, hw, _) = setup("opt-125m", "a100-40g-pcie4");
    let reqs = [
        Request::new(0, 0.0, 3, 20),
        Request::new(1, 0.0, 9, 6),
        Request::new(2, 0.0, 1, 1),
    ];
    let cfg = Config {
        scheduler: SchedulerKind::Mixed,
        preemption: Preemption::Swap,
        async_scheduling: Some(true),
        block_size: 8,
        num_gpu_blocks_override: Some(3),
        watermark: 0.0,
        max_model_len: Some(64),
        ..Config::default()
    };
    let out = simulate(&m, &hw, &cfg, &reqs).unwrap();
    let s = &out.summary;
    assert!(s.preemptions > 0 && s.swap_out_bytes > 0, "{s:?}");
    assert_eq!(s.finished, 3);
    for (r, q) in out.requests.iter().zip(&reqs) {
        assert_eq!(
            (r.status, r.output_tokens),
            (Status::Finished, q.output_tokens)
        );
    }
}
