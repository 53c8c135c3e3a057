//! HeadInfer on the executor: head-wise attention equals full attention on the backends' real
//! kernels, and a HeadInfer plan's schedule (ping-pong buffers, prefetch and write-back streams)
//! runs for real, its prefetches overlapping attention.

use kvplan_exec::check::{CUDA_FP16_ATOL, headinfer_attention_equivalence};
use kvplan_exec::{AttentionShape, BackendKind, Error, ExecOptions};
use kvplan_planner::headinfer::HeadInferOptions;
use kvplan_planner::plan::{Options, Shape, Strategy, plan};
use kvplan_vocab::schedule::{OpKind, Payload, Schedule};
use kvplan_vocab::timeline::Timeline;
use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};

use super::common::{assert_valid, open};

/// Decode and chunked-prefill attention, MHA and GQA.
const SHAPES: [AttentionShape; 4] = [
    AttentionShape {
        batch: 2,
        q_heads: 8,
        kv_heads: 8,
        q_len: 1,
        kv_len: 57,
        head_dim: 16,
        causal: false,
    },
    AttentionShape {
        batch: 1,
        q_heads: 16,
        kv_heads: 4,
        q_len: 1,
        kv_len: 300,
        head_dim: 32,
        causal: false,
    },
    // A chunk of 24 queries over a 40-token prefix plus itself.
    AttentionShape {
        batch: 2,
        q_heads: 8,
        kv_heads: 4,
        q_len: 24,
        kv_len: 64,
        head_dim: 16,
        causal: true,
    },
    // The first chunk: no prefix.
    AttentionShape {
        batch: 1,
        q_heads: 4,
        kv_heads: 4,
        q_len: 33,
        kv_len: 33,
        head_dim: 8,
        causal: true,
    },
];

fn divisors(n: usize) -> Vec<usize> {
    (1..=n).filter(|d| n.is_multiple_of(*d)).collect()
}

#[test]
fn headwise_attention_is_bit_identical_to_full_attention_on_the_cpu() {
    for shape in SHAPES {
        let groups = divisors(shape.kv_heads);
        let r = headinfer_attention_equivalence(
            BackendKind::Cpu,
            &ExecOptions::default(),
            &shape,
            &groups,
        )
        .unwrap();
        assert_eq!(r.len(), groups.len());
        for (e, &g) in r.iter().zip(&groups) {
            assert_eq!((e.heads_per_group, e.groups), (g, shape.kv_heads / g));
            assert!(
                e.bit_identical && e.max_abs_diff == 0.0,
                "{shape:?}, {g} heads per group: {e:?}"
            );
        }
    }
}

#[test]
fn headwise_check_rejects_a_group_that_does_not_divide_the_heads() {
    let e = headinfer_attention_equivalence(
        BackendKind::Cpu,
        &ExecOptions::default(),
        &SHAPES[1],
        &[3],
    )
    .unwrap_err();
    assert!(matches!(e, Error::InvalidInput(_)), "{e}");
}

/// A small Llama-style model (3 layers, 4 heads of 64) so the CPU runs a 2K-token context
/// quickly (the softmax runs unoptimised in debug builds).
fn tiny() -> ModelSpec {
    ModelSpec::from_hf_config_str(
        r#"{"model_type": "llama", "hidden_size": 256, "intermediate_size": 768,
            "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 3,
            "vocab_size": 2000, "max_position_embeddings": 4096, "torch_dtype": "bfloat16",
            "tie_word_embeddings": false, "rms_norm_eps": 1e-5}"#,
        "tiny-llama",
        "tiny-llama",
    )
    .unwrap()
}

/// HeadInfer for a 2,048-token context in 512-token chunks, one KV head per group (4 groups per
/// layer), 3 tokens generated.
pub fn headinfer_schedule() -> Schedule {
    let model = tiny();
    let hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
    let cost = CostModel::new(&hw);
    let shape = Shape {
        batch: 1,
        gpu_batches: 1,
        prompt: 2048,
        gen_len: 3,
    };
    let options = Options::default().with(HeadInferOptions {
        heads_per_group: Some(1),
        chunk_tokens: Some(512),
    });
    let p = plan(&model, &hw, &cost, &shape, Strategy::HEADINFER, &options).unwrap();
    let d = p
        .decisions
        .get::<kvplan_planner::headinfer::HeadInferDetails>()
        .cloned()
        .unwrap();
    assert_eq!(
        (d.heads_per_group, d.groups_per_layer, d.prefill_chunks),
        (1, 4, 4)
    );
    p.schedule
}

/// Prefetch ops, attention ops, and the largest overlap in time between a prefetch and an
/// attention; checks the ping-pong discipline on the way (a prefetch into a buffer starts after
/// the attention two group-units earlier, which last read it, has ended).
fn prefetch_overlap(s: &Schedule, t: &Timeline, slack: f64) -> (usize, usize, f64) {
    let (mut loads, mut attns) = (Vec::new(), Vec::new());
    for (i, op) in s.ops().iter().enumerate() {
        match op.kind {
            OpKind::H2D {
                payload: Payload::Cache,
                ..
            } => {
                if attns.len() >= 2 {
                    let prev: usize = attns[attns.len() - 2];
                    assert!(
                        t.spans[i].start + slack >= t.spans[prev].end,
                        "prefetch {i} starts before attention {prev} (same buffer) ends"
                    );
                }
                loads.push(i);
            }
            OpKind::Attention { .. } => attns.push(i),
            _ => {}
        }
    }
    let mut best = 0.0f64;
    for &l in &loads {
        for &a in &attns {
            let (x, y) = (t.spans[l], t.spans[a]);
            best = best.max(x.end.min(y.end) - x.start.max(y.start));
        }
    }
    (loads.len(), attns.len(), best)
}

#[test]
fn cpu_runs_a_headinfer_plan_with_prefetch() {
    headinfer_on_the_cpu(false);
}

#[test]
#[ignore = "wall-clock check: measured times depend on machine load; run with `cargo test -- --ignored wall_clock`"]
fn cpu_runs_a_headinfer_plan_with_prefetch_overlapping_attention_wall_clock() {
    headinfer_on_the_cpu(true);
}

fn headinfer_on_the_cpu(timing: bool) {
    let s = headinfer_schedule();
    let mut ex = open(BackendKind::Cpu, 0);
    let t = ex.run(&s).unwrap();
    assert_valid(&s, &t, "cpu", 0.0);
    let (loads, attns, overlap) = prefetch_overlap(&s, &t, 0.0);
    // 3 layers x 4 groups: prefill chunks 1..3 prefetch, chunk 0 does not; 2 decode steps.
    assert_eq!((loads, attns), (3 * 12 + 2 * 12, 4 * 12 + 2 * 12));
    // Whether two threads' ops overlap in time depends on the machine's load.
    if timing {
        assert!(overlap > 0.0, "no prefetch overlapped an attention");
    }
    let stores = s
        .ops()
        .iter()
        .filter(|o| matches!(o.kind, OpKind::D2H { .. }))
        .count();
    assert_eq!(stores, attns, "one write-back per group attention");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn headwise_attention_matches_full_attention_on_cuda() {
    for shape in SHAPES {
        let groups = divisors(shape.kv_heads);
        let r = headinfer_attention_equivalence(
            BackendKind::Cuda,
            &ExecOptions::default(),
            &shape,
            &groups,
        )
        .unwrap();
        for e in r {
            assert!(e.max_abs_diff <= CUDA_FP16_ATOL, "{shape:?}: {e:?}");
            eprintln!("{shape:?}: {e:?}");
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn cuda_runs_a_headinfer_plan_with_prefetch_overlapping_attention() {
    let s = headinfer_schedule();
    let mut ex = open(BackendKind::Cuda, 1);
    let t = ex.run(&s).unwrap();
    assert_valid(&s, &t, "cuda", 2e-6);
    let (_, _, overlap) = prefetch_overlap(&s, &t, 2e-6);
    assert!(overlap > 0.0, "no prefetch overlapped an attention");
}
