//! The serving simulator against references computed here, from the model's shapes and the GPU
//! profile's datasheet numbers alone: no `CostModel`, no `IterationTimer`, no kernel model. A
//! bug that scales a decode step (the shared cost model's attention, the serving iteration's
//! batched or decode-only steps) moves the simulator away from these, whatever the goldens say.

use kvplan_serve::{Config, ServeReport, Status, simulate, simulate_with};
use kvplan_vocab::dtype::DType;
use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};
use kvplan_workloads::Request;

/// Parameters of a Llama-style decoder (gated FFN, RMSNorm, no biases), counted here from the
/// config's shapes: per layer Q and O (`h × q_dim` each), K and V (`h × kv_dim` each), the
/// gated FFN (`3 × h × ffn`) and two norms (`h` each); the embedding and LM head (`vocab × h`
/// each unless tied) and the final norm. Returns (all parameters, the decoder layers' linear
/// ones, the LM head's).
pub(crate) fn llama_params(m: &ModelSpec) -> (f64, f64, f64) {
    assert!(m.gated_ffn && !m.qkv_bias && !m.proj_bias && m.moe.is_none());
    let h = f64::from(m.hidden);
    let q = f64::from(m.num_heads * m.head_dim);
    let kv = f64::from(m.num_kv_heads * m.head_dim);
    let layer_linear = 2.0 * h * q + 2.0 * h * kv + 3.0 * h * f64::from(m.ffn_dim);
    let linear = f64::from(m.num_layers) * layer_linear;
    let lm_head = f64::from(m.vocab) * h;
    let embed = if m.tied_embeddings { 0.0 } else { lm_head };
    let norms = f64::from(m.num_layers) * 2.0 * h + h;
    (linear + lm_head + embed + norms, linear, lm_head)
}

/// The roofline of one forward pass over `seqs` (`(q_len, kv_len)` each) with `logits` rows
/// through the LM head, at the profile's datasheet peaks: `max(bytes / HBM bandwidth, FLOPs /
/// peak)`. Bytes: the decoder layers' weights once, the LM head's when a row produces a token,
/// and every sequence's K and V (`2 × layers × kv_heads × head_dim × 2 bytes` a token, read or
/// written). FLOPs: `2 × rows × linear parameters`, `2 × logits × LM head parameters`, and
/// attention's `4 × q_dim × layers` per attended (query, key) pair, causal within the new tokens.
/// Embedding rows, norms and activations are left out: a lower bound on any implementation.
pub(crate) fn step_roofline(
    m: &ModelSpec,
    hw: &HardwareProfile,
    seqs: &[(u32, u32)],
    logits: u32,
) -> f64 {
    if seqs.is_empty() {
        return 0.0;
    }
    let bytes_per = 2.0;
    assert!(matches!(m.dtype, DType::Fp16 | DType::Bf16) && m.quantization.is_none());
    let (_, linear, lm_head) = llama_params(m);
    let layers = f64::from(m.num_layers);
    let kv_token = 2.0 * layers * f64::from(m.num_kv_heads * m.head_dim) * bytes_per;
    let rows: f64 = seqs.iter().map(|&(q, _)| f64::from(q)).sum();
    let kv_tokens: f64 = seqs.iter().map(|&(_, kv)| f64::from(kv)).sum();
    let pairs: f64 = seqs
        .iter()
        .map(|&(q, kv)| {
            let (q, kv) = (f64::from(q), f64::from(kv));
            q * (kv - q) + q * (q + 1.0) / 2.0
        })
        .sum();
    let head = if logits > 0 { lm_head } else { 0.0 };
    let bytes = (linear + head) * bytes_per + kv_tokens * kv_token;
    let flops = 2.0 * rows * linear
        + 2.0 * f64::from(logits) * lm_head
        + 4.0 * pairs * f64::from(m.num_heads * m.head_dim) * layers;
    let peak = match m.dtype {
        DType::Bf16 => hw.gpu.peak_flops.bf16,
        _ => hw.gpu.peak_flops.fp16,
    };
    (bytes / hw.gpu.mem_bandwidth).max(flops / peak)
}

/// One decode step of `batch` sequences attending `ctx` tokens each.
fn decode_step_roofline(m: &ModelSpec, hw: &HardwareProfile, batch: u32, ctx: u32) -> f64 {
    step_roofline(m, hw, &vec![(1, ctx); batch as usize], batch)
}

/// The mean roofline over a closed batch's decode steps: the step producing token `s + 1`
/// attends `prompt + s` tokens.
fn mean_roofline(m: &ModelSpec, hw: &HardwareProfile, batch: u32, prompt: u32, output: u32) -> f64 {
    let steps = output - 1;
    (1..=steps)
        .map(|s| decode_step_roofline(m, hw, batch, prompt + s))
        .sum::<f64>()
        / f64::from(steps)
}

/// A closed batch: `batch` requests of `prompt` tokens and `output` tokens, all at time 0, on
/// vLLM 0.4's prefill-first scheduler with a token budget that prefills them in one step, so
/// every request then decodes in lockstep. Returns the run and its time per output token, read
/// from the requests' own records (the engine's clock).
fn closed_batch(model: &str, hw: &str, batch: u32, prompt: u32, output: u32) -> (ServeReport, f64) {
    let m = ModelSpec::preset(model).unwrap();
    let h = HardwareProfile::preset(hw).unwrap();
    let reqs: Vec<Request> = (0..batch)
        .map(|i| Request::new(u64::from(i), 0.0, prompt, output))
        .collect();
    // vLLM 0.4 without chunked prefill refuses a budget below max_model_len: the requests'
    // own length is the model length.
    let cfg = Config {
        max_num_batched_tokens: Some((batch * prompt).max(4096).max(prompt + output)),
        max_model_len: Some(prompt + output),
        ..Config::vllm_v0()
    };
    let out = simulate(&m, &h, &cfg, &reqs).unwrap();
    let r0 = &out.requests[0];
    // Lockstep: one prefill step, then every request decodes together (no preemption).
    for r in &out.requests {
        assert_eq!(
            (r.status, r.output_tokens, r.preemptions),
            (Status::Finished, output, 0)
        );
        assert_eq!(
            (r.ttft_s, r.e2e_s),
            (r0.ttft_s, r0.e2e_s),
            "{model} {hw} b{batch}"
        );
    }
    let tpot = r0.tpot_s;
    (out, tpot)
}

/// Cases where a decode step is memory-bound on the weights and the KV cache (Llama-2-7B MHA,
/// Llama-3-8B GQA, Llama-2-13B; fitted-kernel and datasheet-roofline profiles; batch 1 to 32).
const CASES: &[(&str, &str, u32, u32)] = &[
    ("llama-2-7b", "a100-80g-sxm", 1, 512),
    ("llama-2-7b", "a100-80g-sxm", 8, 512),
    ("llama-2-7b", "a100-80g-sxm", 32, 256),
    ("llama-2-7b", "a100-40g-pcie4", 16, 512),
    ("llama-2-7b", "h100-sxm", 16, 1024),
    ("llama-3-8b", "h100-sxm", 1, 256),
    ("llama-3-8b", "h100-sxm", 32, 1024),
    ("llama-2-13b", "a100-80g-sxm", 8, 1024),
];

/// A closed batch's time per output token lies between the roofline and twice it.
/// - At least 1x: no step can read its weights and KV faster than the datasheet bandwidth.
/// - At most 2x: the profiles reach 80-90% of HBM bandwidth on the weight GEMMs and their
///   attention kernels 70-90% on decode (1.1-1.25x), every kernel pays a floor of a few
///   microseconds (~400 kernels a step: 1-2 ms on a 7-13B model's 7-25 ms step), and vLLM
///   0.4's synchronous host work adds ~1 ms a step. Measured 1.4-1.8x on these cases when
///   written. A doubled decode step (any batch size) lands at 2.7x or more and fails.
#[test]
fn closed_batch_tpot_lies_between_one_and_two_rooflines() {
    let mut report = String::new();
    let mut bad = Vec::new();
    for &(model, hw, batch, prompt) in CASES {
        let output = 33;
        let (_, tpot) = closed_batch(model, hw, batch, prompt, output);
        let m = ModelSpec::preset(model).unwrap();
        let h = HardwareProfile::preset(hw).unwrap();
        let roof = mean_roofline(&m, &h, batch, prompt, output);
        let ratio = tpot / roof;
        let line = format!(
            "{model} {hw} batch {batch} prompt {prompt}: tpot {:.3} ms, roofline {:.3} ms, {ratio:.3}x\n",
            tpot * 1e3,
            roof * 1e3
        );
        if !(1.0..=2.0).contains(&ratio) {
            bad.push(line.clone());
        }
        report += &line;
    }
    eprintln!("{report}");
    assert!(
        bad.is_empty(),
        "outside [1, 2] rooflines:\n{}",
        bad.concat()
    );
}

/// Growing a decode batch from 1 to `b` sequences costs what the roofline says, within 15%:
/// the step's efficiency factors (bandwidth fraction, per-kernel floors, host time) divide out
/// of the ratio, so only the shape of the cost is compared: weights read once per step, KV per
/// sequence. Measured within 9% when written (Llama-3-8B's small KV makes its step grow a
/// little faster than bytes alone as GEMMs leave the memory floor). A step of two or more
/// sequences doubled doubles this ratio and fails.
#[test]
fn decode_step_grows_with_batch_as_the_roofline_does() {
    let mut report = String::new();
    let mut worst: f64 = 0.0;
    for (model, hw) in [
        ("llama-2-7b", "a100-80g-sxm"),
        ("llama-2-7b", "a100-40g-pcie4"),
        ("llama-3-8b", "h100-sxm"),
    ] {
        let m = ModelSpec::preset(model).unwrap();
        let h = HardwareProfile::preset(hw).unwrap();
        let (prompt, output) = (256, 17);
        let (_, t1) = closed_batch(model, hw, 1, prompt, output);
        let r1 = mean_roofline(&m, &h, 1, prompt, output);
        for batch in [2u32, 8, 16, 32] {
            let (_, t) = closed_batch(model, hw, batch, prompt, output);
            let r = mean_roofline(&m, &h, batch, prompt, output);
            let (sim, roof) = (t / t1, r / r1);
            let err = sim / roof - 1.0;
            worst = worst.max(err.abs());
            report += &format!(
                "{model} {hw} batch {batch}: step x{sim:.3} of batch 1, roofline x{roof:.3} ({:+.1}%)\n",
                err * 100.0
            );
        }
    }
    eprintln!("{report}");
    assert!(worst <= 0.15, "{report}");
}

/// The marginal cost of context: the same decode batch at prompt 256 and at prompt 2048 differs
/// by the extra K and V it reads. Its time over the roofline's difference (the extra KV bytes
/// over the datasheet bandwidth, as nothing else changes) lies in [1, 1.5]: at least the bytes
/// at full bandwidth, at most 1.5x for an attention kernel reaching two thirds of HBM bandwidth
/// on decode (FlashAttention / paged attention decode kernels reach 70-90%). Measured
/// 1.10-1.29 when written. Doubling decode attention in the cost model doubles it and fails.
#[test]
fn decode_context_costs_its_kv_bytes_at_hbm_bandwidth() {
    let mut report = String::new();
    let mut bad = false;
    for (model, hw, batch) in [
        ("llama-2-7b", "a100-80g-sxm", 8u32),
        ("llama-2-7b", "a100-40g-pcie4", 8),
        ("llama-2-13b", "a100-80g-sxm", 8),
        ("llama-3-8b", "h100-sxm", 16),
    ] {
        let m = ModelSpec::preset(model).unwrap();
        let h = HardwareProfile::preset(hw).unwrap();
        let output = 17;
        let (_, short) = closed_batch(model, hw, batch, 256, output);
        let (_, long) = closed_batch(model, hw, batch, 2048, output);
        let roof =
            mean_roofline(&m, &h, batch, 2048, output) - mean_roofline(&m, &h, batch, 256, output);
        let ratio = (long - short) / roof;
        bad |= !(1.0..=1.5).contains(&ratio);
        report += &format!(
            "{model} {hw} batch {batch}: +{:.3} ms for 1792 more tokens of context, roofline +{:.3} ms, {ratio:.3}x\n",
            (long - short) * 1e3,
            roof * 1e3
        );
    }
    eprintln!("{report}");
    assert!(!bad, "outside [1, 1.5]:\n{report}");
}

/// The parameter counts above agree with the published ones (Hugging Face model cards /
/// `model.safetensors.index.json` totals), so the roofline's weight bytes are not the
/// simulator's own accounting.
#[test]
fn roofline_parameter_counts_match_the_published_ones() {
    for (model, published) in [
        ("llama-2-7b", 6_738_415_616.0),
        ("llama-2-13b", 13_015_864_320.0),
        ("llama-3-8b", 8_030_261_248.0),
    ] {
        let (p, _, _) = llama_params(&ModelSpec::preset(model).unwrap());
        assert_eq!(p, published, "{model}");
    }
}

/// Deterministic Poisson-like arrivals (a small LCG).
fn arrivals(n: usize, qps: f64, seed: u64) -> Vec<Request> {
    let mut x = seed;
    let mut t = 0.0;
    (0..n)
        .map(|id| {
            let mut u = || {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 11) as f64 + 0.5) / (1u64 << 53) as f64
            };
            t += -u().ln() / qps;
            let prompt = 16 + (u() * 900.0) as u32;
            let output = 1 + (u() * 200.0) as u32;
            Request::new(id as u64, t, prompt, output)
        })
        .collect()
}

/// Measure of the union of intervals.
fn union_len(mut iv: Vec<(f64, f64)>) -> f64 {
    iv.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut total = 0.0;
    let mut cur: Option<(f64, f64)> = None;
    for (s, e) in iv {
        match cur {
            Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
            Some((cs, ce)) => {
                total += ce - cs;
                cur = Some((s, e));
            }
            None => cur = Some((s, e)),
        }
    }
    total + cur.map_or(0.0, |(s, e)| e - s)
}

/// On a plain engine (no host time, no frontend hop) the engine runs an iteration whenever a
/// request is in the system and idles otherwise, so: iterations never overlap and start in
/// order; the makespan is the sum of iteration times plus the idle time; the idle time is the
/// time no request is in the system, computed here from the requests' own arrival and end
/// times; the busy time therefore equals the union of the requests' lifetimes. Checked on a
/// light load (much idle time) and a heavy one (preemptions, swapping), per scheduler.
/// Relative 1e-9: sums of the same durations in different orders.
#[test]
fn makespan_is_iteration_time_plus_idle_time() {
    let m = ModelSpec::preset("llama-2-7b").unwrap();
    let h = HardwareProfile::preset("a100-40g-pcie4").unwrap();
    let cost = CostModel::new(&h);
    for (qps, util) in [(0.5, 0.9), (30.0, 0.5)] {
        let reqs = arrivals(200, qps, 5);
        for (sched, mode) in [
            (
                kvplan_serve::SchedulerKind::PrefillFirst,
                kvplan_serve::Preemption::Swap,
            ),
            (
                kvplan_serve::SchedulerKind::Chunked,
                kvplan_serve::Preemption::Recompute,
            ),
            (
                kvplan_serve::SchedulerKind::VllmV1,
                kvplan_serve::Preemption::Recompute,
            ),
        ] {
            let cfg = Config {
                scheduler: sched,
                preemption: mode,
                gpu_memory_utilization: util,
                swap_space_gib: 64.0,
                async_scheduling: Some(false),
                ..Config::vllm_v0()
            };
            let resolved = cfg.validate(&m, &h).unwrap();
            let timer =
                kvplan_serve::IterationTimer::new(&m, &cost, 16, resolved.copies_per_block, true);
            let out = simulate_with(timer, resolved, 0.0, &reqs).unwrap();
            let it = &out.iterations;
            assert!(!it.is_empty());
            for w in it.windows(2) {
                assert!(
                    w[1].t_s >= w[0].t_s + w[0].duration_s - 1e-12,
                    "{sched:?}: overlap"
                );
            }
            let busy: f64 = it.iter().map(|r| r.duration_s).sum();
            let gaps: f64 = it
                .windows(2)
                .map(|w| w[1].t_s - (w[0].t_s + w[0].duration_s))
                .sum::<f64>()
                + it[0].t_s;
            let s = &out.summary;
            let label = format!("{sched:?} {mode:?} qps {qps}");
            let rel = |a: f64, b: f64| (a - b).abs() / b.abs().max(1e-300);
            assert!(
                rel(s.makespan_s, busy + gaps) < 1e-9,
                "{label}: makespan {} busy {busy} idle {gaps}",
                s.makespan_s
            );
            let lives: Vec<(f64, f64)> = out
                .requests
                .iter()
                .filter(|r| r.status == Status::Finished)
                .map(|r| (r.arrival_s, r.arrival_s + r.e2e_s))
                .collect();
            assert_eq!(lives.len(), reqs.len(), "{label}");
            let idle = s.makespan_s - union_len(lives);
            assert!(
                rel(gaps, idle) < 1e-9 || (gaps - idle).abs() < 1e-9,
                "{label}: gaps {gaps} idle {idle}"
            );
            assert!(rel(busy, s.makespan_s - idle) < 1e-9, "{label}");
            if qps < 1.0 {
                assert!(idle > 0.0, "{label}: a light load idles");
            } else {
                assert!(
                    s.preemptions > 0 || sched != kvplan_serve::SchedulerKind::PrefillFirst,
                    "{label}"
                );
            }
        }
    }
}
