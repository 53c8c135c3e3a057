//! HeadInfer: the memory model against the paper's Tables 10 and 11, the capacity search, the
//! head-group planner, simulated prefill latency against Table 6, errors, and property tests.
//!
//! Units: the paper's tables are in GB that are GiB (2^30 bytes), and its "K" is 1024 tokens
//! (25K = 25,600 tokens, 10K = 10,240): 25,600 tokens x 128 KiB = 3.125 GiB is the table's 3.13,
//! and 4M = 4,000K = 4,096,000 tokens x 128 KiB = 500 GiB its 500. Context columns are converted
//! with `tokens = context / 1000 x 1024` (1,000,000 -> 1,024,000; "1M" -> 1,024,000).

use kvplan_planner::headinfer::{
    self, BindingLimit, CapacityInputError, CapacityOptions, DEFAULT_CHUNK_TOKENS, Layout,
    MemStrategy, MemoryConfig, RawCapacity, capacity, capacity_report, memory,
};
use kvplan_planner::plan::{Options, Shape, Strategy, plan};
use kvplan_vocab::schedule::{HostMemory, OpKind, Payload, Schedule};
use kvplan_vocab::timeline::Timeline;
use kvplan_vocab::{CostModel, Error, HardwareProfile, ModelSpec};
use proptest::prelude::*;

const GIB: f64 = (1u64 << 30) as f64;
const MEMORY_CSV: &str =
    include_str!("../../data/validation/published/headinfer_llama3_8b_memory.csv");
const PREFILL_CSV: &str =
    include_str!("../../data/validation/published/headinfer_llama3_8b_prefill_rtx4090.csv");

/// The paper's token convention: `context` in its thousands ("K" = 1024 tokens).
fn paper_tokens(context: u64) -> u64 {
    context / 1000 * 1024
}

fn llama() -> ModelSpec {
    ModelSpec::preset("llama-3-8b").unwrap()
}

/// The RTX 4090 with the host KV budget of the paper's 4M-token run (512 GB).
fn rtx4090_512() -> HardwareProfile {
    let mut hw = HardwareProfile::preset("rtx-4090").unwrap();
    hw.host.ram_bytes = 512 << 30;
    hw
}

fn rows(csv: &str) -> Vec<Vec<String>> {
    csv.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| l.split(',').map(|c| c.trim().to_string()).collect())
        .collect()
}

fn strategy_of(method: &str) -> MemStrategy {
    match method {
        "standard" => MemStrategy::Standard,
        "chunked_prefill" => MemStrategy::ChunkedPrefill,
        "kv_quant_4bit" => MemStrategy::KvQuant4bit,
        "layer_offload" => MemStrategy::LayerOffload,
        "headinfer" => MemStrategy::HeadInfer,
        other => panic!("unknown method {other}"),
    }
}

#[test]
fn memory_model_reproduces_tables_10_and_11_within_3_percent() {
    let m = llama();
    // The paper's rows are one sequence, 10K chunks and (HeadInfer) one KV head per group.
    let cfg = MemoryConfig::default();
    let table = rows(MEMORY_CSV);
    assert_eq!(
        table[0],
        [
            "method",
            "context_tokens",
            "weights_gb",
            "kv_gpu_gb",
            "activation_gb",
            "total_gpu_gb",
            "total_kv_gb"
        ]
    );
    let mut cells = 0;
    for row in &table[1..] {
        let s = strategy_of(&row[0]);
        let tokens = paper_tokens(row[1].parse().unwrap());
        let x = memory(&m, s, tokens, &cfg);
        let got = [x.weights, x.kv_gpu, x.activations, x.total_gpu, x.total_kv];
        for (i, &g) in got.iter().enumerate() {
            let want: f64 = row[2 + i].parse().unwrap();
            let g = g as f64 / GIB;
            let err = (g - want).abs() / want;
            assert!(
                err <= 0.03,
                "{} at {tokens} tokens, {}: {g:.3} vs {want} ({:.1}%)",
                row[0],
                table[0][2 + i],
                100.0 * err
            );
            cells += 1;
        }
    }
    assert_eq!(cells, 50);
}

#[test]
fn peak_adds_the_working_set_and_the_reserve_to_the_papers_total() {
    let m = llama();
    let cfg = MemoryConfig::default();
    for s in MemStrategy::ALL {
        let x = memory(&m, s, 50_000, &cfg);
        assert_eq!(
            x.peak_gpu,
            x.weights + x.kv_gpu + x.kv_quant_scales + x.working_set.peak + x.runtime_reserve
        );
        assert!(x.working_set.peak >= x.activations, "{s:?}");
        assert_eq!(x.memory_plan().gpu_bytes(), x.peak_gpu);
        assert_eq!(x.memory_plan().host_bytes(), x.kv_host);
    }
    // Quantisation scales: one bf16 scale and zero point per 64 values, an eighth of 4-bit KV.
    let q = memory(&m, MemStrategy::KvQuant4bit, 1000, &cfg);
    assert_eq!(q.kv_quant_scales * 8, q.kv_gpu);
    // HeadInfer's buffers scale with the group: two buffers of g heads.
    for g in [1u32, 2, 4, 8] {
        let x = memory(
            &m,
            MemStrategy::HeadInfer,
            1000,
            &MemoryConfig {
                heads_per_group: g,
                ..cfg
            },
        );
        assert_eq!(x.kv_gpu, 2 * u64::from(g) * 1000 * 128 * 2 * 2);
    }
}

/// Table 11's maximum contexts (K = 1024 tokens; 4M = 4,096,000 with a 512 GB host KV budget),
/// each with its tolerance: the paper gives them in steps of 5K tokens, so half a step of the
/// figure (10% at 25K, 8% at 30K, 6% at 45K); the 4M row is "~4M" (3%: 4,096,000 vs 2^22).
/// The four GPU-bound rows are not independent checks: the memory model's 2.65 GiB runtime
/// reserve was fitted to centre them (`RUNTIME_RESERVE_BYTES`); the HeadInfer row, bound by the
/// host's 512 GB, does not depend on it.
const TABLE_11: [(MemStrategy, u64, f64); 5] = [
    (MemStrategy::Standard, 25_600, 0.10),
    (MemStrategy::ChunkedPrefill, 30_720, 0.083),
    (MemStrategy::KvQuant4bit, 46_080, 0.056),
    (MemStrategy::LayerOffload, 46_080, 0.056),
    (MemStrategy::HeadInfer, 4_096_000, 0.03),
];

/// Rows of Table 11 outside their tolerance, with the bound they meet. Each must still miss
/// its tolerance (one that comes within it leaves this list). The paper gives the same 45K for
/// 4-bit KV and layer offload although a token costs them 36 and 8 KiB of KV next to the same
/// 108 KiB working set, so one memory budget puts them about 10% either side of 45K (model:
/// 41K, -10.8%, and 51K, +10.7%); the paper's own totals at its 45K (19.30 GB and 18.25 GB of
/// the 24 GB card) differ by a GB, so its runs did not stop at one budget.
const TABLE_11_KNOWN_MISSES: [(MemStrategy, f64); 2] = [
    (MemStrategy::LayerOffload, 0.12),
    (MemStrategy::KvQuant4bit, 0.12),
];

#[test]
fn capacity_matches_table_11_per_row() {
    let (m, hw) = (llama(), rtx4090_512());
    let r = capacity_report(&m, &hw, &[], &CapacityOptions::default()).unwrap();
    assert_eq!(r.strategies.len(), 5);
    let mut failures = Vec::new();
    for (c, (s, want, tol)) in r.strategies.iter().zip(TABLE_11) {
        assert_eq!(c.strategy, s);
        let err = c.max_context_tokens as f64 / want as f64 - 1.0;
        let miss = TABLE_11_KNOWN_MISSES.iter().find(|x| x.0 == s);
        let bound = miss.map_or(tol, |x| x.1);
        eprintln!(
            "{:16} {:>9} tokens vs {want:>9} ({:+.1}%, bound {:.1}%), bound by {}{}",
            s.as_str(),
            c.max_context_tokens,
            100.0 * err,
            100.0 * bound,
            c.binding_limit.as_str(),
            if miss.is_some() { " [known miss]" } else { "" }
        );
        if err.abs() > bound {
            failures.push(format!("{s:?}: {} vs {want}", c.max_context_tokens));
        }
        if miss.is_some() && err.abs() <= tol {
            failures.push(format!(
                "{s:?}: now within {:.1}%: remove it from TABLE_11_KNOWN_MISSES",
                100.0 * tol
            ));
        }
        let limit = if s == MemStrategy::HeadInfer {
            BindingLimit::HostMemory
        } else {
            BindingLimit::GpuMemory
        };
        assert_eq!(c.binding_limit, limit, "{s:?}");
    }
    assert!(failures.is_empty(), "{failures:#?}");
    // With the profile's 128 GiB host, HeadInfer is host-bound at 1M (= 2^20) tokens.
    let hw = HardwareProfile::preset("rtx-4090").unwrap();
    let c = capacity(&m, &hw, MemStrategy::HeadInfer, &CapacityOptions::default()).unwrap();
    assert_eq!(c.max_context_tokens, 1 << 20);
    assert_eq!(c.binding_limit, BindingLimit::HostMemory);
    // A --host-ram override beyond the GPU's reach makes the GPU bind.
    let c = capacity(
        &m,
        &hw,
        MemStrategy::HeadInfer,
        &CapacityOptions {
            host_ram_bytes: Some(4 << 40),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(c.binding_limit, BindingLimit::GpuMemory);
    assert!(c.max_context_tokens > 4_096_000, "{}", c.max_context_tokens);
}

#[test]
fn capacity_json_has_the_contract_fields() {
    let (m, hw) = (llama(), rtx4090_512());
    let r = capacity_report(&m, &hw, &[], &CapacityOptions::default()).unwrap();
    let v = serde_json::to_value(&r).unwrap();
    let keys = |o: &serde_json::Value| {
        let mut k: Vec<String> = o.as_object().unwrap().keys().cloned().collect();
        k.sort();
        k
    };
    assert_eq!(keys(&v), ["hardware", "model", "strategies"]);
    assert_eq!(v["model"], "llama-3-8b");
    assert_eq!(v["hardware"], "rtx-4090");
    let names: Vec<&str> = v["strategies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "standard",
            "chunked-prefill",
            "kv-quant-4bit",
            "layer-offload",
            "headinfer"
        ]
    );
    for s in v["strategies"].as_array().unwrap() {
        assert_eq!(
            keys(s),
            [
                "binding_limit",
                "gpu_bytes",
                "host_bytes",
                "max_context_tokens",
                "strategy"
            ]
        );
        assert!(s["max_context_tokens"].as_u64().unwrap() > 0);
        assert!(["gpu memory", "host memory"].contains(&s["binding_limit"].as_str().unwrap()));
    }
    // One strategy only.
    let r = capacity_report(&m, &hw, &[MemStrategy::LayerOffload], &Default::default()).unwrap();
    assert_eq!(r.strategies.len(), 1);
    // The note on max_position (8192 for Llama-3-8B) is there, the answer is not capped.
    assert!(
        r.notes.iter().any(|n| n.contains("max_position")),
        "{:?}",
        r.notes
    );
}

#[test]
fn a_model_whose_weights_do_not_fit_has_zero_capacity() {
    let m = ModelSpec::preset("llama-3-70b").unwrap();
    let hw = rtx4090_512();
    let r = capacity_report(&m, &hw, &[], &CapacityOptions::default()).unwrap();
    for c in &r.strategies {
        assert_eq!(c.max_context_tokens, 0);
        assert_eq!(c.binding_limit, BindingLimit::GpuMemory);
    }
    assert!(r.notes.iter().any(|n| n.contains("not even one token")));
}

/// A capacity question as a front end writes it: Llama-3-8B on the RTX 4090, the rest default.
fn raw_capacity() -> RawCapacity {
    RawCapacity {
        model: Some("llama-3-8b".into()),
        hardware: Some("rtx-4090".into()),
        ..Default::default()
    }
}

#[test]
fn a_raw_capacity_question_resolves_to_what_the_search_takes() {
    let input = raw_capacity().resolve().unwrap();
    assert_eq!(
        (input.model.name.as_str(), input.hardware.name.as_str()),
        ("llama-3-8b", "rtx-4090")
    );
    assert!(input.strategies.is_empty());
    let reserve = (2.65 * GIB) as u64;
    let config = MemoryConfig {
        runtime_reserve: reserve,
        ..Default::default()
    };
    assert_eq!(
        input.options,
        CapacityOptions {
            host_ram_bytes: None,
            config
        }
    );
    let direct = capacity_report(&llama(), &input.hardware, &[], &input.options).unwrap();
    assert_eq!(input.report().unwrap(), direct);
    // Every field given: the dtype applies to the model, strategies keep their order, GiB become
    // bytes and a zero reserve is the bare model.
    let input = RawCapacity {
        dtype: Some("fp32".into()),
        strategies: vec!["headinfer".into(), "standard".into()],
        batch: 2,
        chunk: 4096,
        heads_per_group: 2,
        host_ram_gib: Some(512.0),
        runtime_reserve_gib: 0.0,
        ..raw_capacity()
    }
    .resolve()
    .unwrap();
    assert_eq!(input.model.weight_bytes(), 2 * llama().weight_bytes());
    assert_eq!(
        input.strategies,
        [MemStrategy::HeadInfer, MemStrategy::Standard]
    );
    let config = MemoryConfig {
        batch: 2,
        chunk_tokens: 4096,
        heads_per_group: 2,
        runtime_reserve: 0,
    };
    assert_eq!(
        input.options,
        CapacityOptions {
            host_ram_bytes: Some(512 << 30),
            config
        }
    );
    let r = input.report().unwrap();
    assert_eq!(r.strategies.len(), 2);
    assert_eq!(r.strategies[0].strategy, MemStrategy::HeadInfer);
}

#[test]
fn a_raw_capacity_question_names_the_field_at_fault() {
    let fails = |edit: fn(&mut RawCapacity)| {
        let mut raw = raw_capacity();
        edit(&mut raw);
        raw.resolve().unwrap_err()
    };
    let e = fails(|r| r.model = None);
    assert!(
        matches!(e, CapacityInputError::Missing { field: "model" }),
        "{e}"
    );
    let e = fails(|r| r.hardware = None);
    assert!(
        matches!(e, CapacityInputError::Missing { field: "hardware" }),
        "{e}"
    );
    assert_eq!(e.to_string(), "hardware: required");
    // A name: the field, the name given and the accepted ones.
    assert_eq!(
        fails(|r| r.dtype = Some("fp8".into())).to_string(),
        "dtype: unknown dtype 'fp8'; use fp16, bf16 or fp32"
    );
    assert_eq!(
        fails(|r| r.strategies = vec!["standard".into(), "magic".into()]).to_string(),
        "strategy: unknown strategy 'magic'; use one of standard, chunked-prefill, kv-quant-4bit, layer-offload, headinfer"
    );
    // A model or hardware that does not load: the vocabulary's error.
    let e = fails(|r| r.model = Some("nope".into()));
    assert!(
        matches!(e, CapacityInputError::Invalid(Error::UnknownModel { .. })),
        "{e}"
    );
    // A number: the vocabulary's InvalidValue, by its field.
    let whole = "must be a whole number of at least 1";
    let (gib, reserve) = (
        "must be more than 0 and at most 1048576 GiB (more than 0, at most 1 PiB)",
        "must be from 0 to 1048576 GiB (0 to 1 PiB)",
    );
    type Edit = fn(&mut RawCapacity);
    let cases: [(Edit, &str, &str); 11] = [
        (|r| r.batch = 0, "workload.batch 0", whole),
        (|r| r.batch = -3, "workload.batch -3", whole),
        (|r| r.batch = 1 << 32, "workload.batch 4294967296", whole),
        (|r| r.chunk = 0, "headinfer.chunk 0", whole),
        (
            |r| r.heads_per_group = -1,
            "headinfer.heads_per_group -1",
            whole,
        ),
        (|r| r.host_ram_gib = Some(0.0), "capacity.host_ram 0", gib),
        (
            |r| r.host_ram_gib = Some(f64::NAN),
            "capacity.host_ram NaN",
            gib,
        ),
        (
            |r| r.runtime_reserve_gib = -1.0,
            "capacity.runtime_reserve -1",
            reserve,
        ),
        (
            |r| r.runtime_reserve_gib = f64::INFINITY,
            "capacity.runtime_reserve inf",
            reserve,
        ),
        // Absurd sizes are refused, not clamped to what a byte count holds.
        (
            |r| r.host_ram_gib = Some(1e308),
            "capacity.host_ram 1e308",
            gib,
        ),
        (
            |r| r.runtime_reserve_gib = 2e6,
            "capacity.runtime_reserve 2000000",
            reserve,
        ),
    ];
    for (edit, at, why) in cases {
        match fails(edit) {
            CapacityInputError::Invalid(Error::InvalidValue {
                field,
                value,
                message,
            }) => assert_eq!(
                (format!("{field} {value}").as_str(), message.as_str()),
                (at, why)
            ),
            e => panic!("{at}: {e}"),
        }
    }
    // Heads that do not divide the model's are the search's to refuse, by the same field.
    let mut three = raw_capacity();
    three.heads_per_group = 3;
    let e = three.resolve().unwrap().report().unwrap_err();
    assert!(
        matches!(&e, Error::InvalidValue { field, .. } if field == "headinfer.heads_per_group"),
        "{e}"
    );
}

fn shape(context: u32) -> Shape {
    Shape {
        batch: 1,
        gpu_batches: 1,
        prompt: context,
        gen_len: 1,
    }
}

#[test]
fn adaptive_groups_follow_the_papers_policy_on_the_4090() {
    // The paper: all heads fused up to 500K tokens, 2 groups to 1M, 4 to 2M, 8 to 4M.
    let (m, hw) = (llama(), rtx4090_512());
    let cost = CostModel::new(&hw);
    for (k, g) in [
        (1u32, 8u32),
        (100, 8),
        (400, 8),
        (500, 8),
        (1000, 4),
        (2000, 2),
        (4000, 1),
    ] {
        let s = k * 1024;
        let d = headinfer::adaptive_heads_per_group(&m, &hw, &shape(s), DEFAULT_CHUNK_TOKENS);
        assert_eq!(d, Some(g), "{k}K");
    }
    // The planner times the candidates instead: at 1M tokens 8 heads per group do not fit, and
    // the fastest is no larger a group than the paper's (smaller groups leave room for larger
    // chunks, which prefetch less), and no slower than the paper's choice (4, 10K).
    let s = shape(1_024_000);
    let p = plan(&m, &hw, &cost, &s, Strategy::HEADINFER, &Options::default()).unwrap();
    let d = p
        .decisions
        .get::<kvplan_planner::headinfer::HeadInferDetails>()
        .unwrap();
    assert!(d.heads_per_group <= 4, "{}", d.heads_per_group);
    assert_eq!(d.heads_per_group * d.groups_per_layer, 8);
    assert!(d.chunk_tokens >= DEFAULT_CHUNK_TOKENS, "{}", d.chunk_tokens);
    assert_eq!(d.prefill_chunks, 1_024_000_u32.div_ceil(d.chunk_tokens));
    assert!(d.adaptive);
    let papers = Layout {
        chunk_tokens: DEFAULT_CHUNK_TOKENS,
        heads_per_group: Some(4),
    };
    let t_papers =
        headinfer::predicted_seconds(&m, &s, &papers, HostMemory::Pinned, &cost).unwrap();
    assert!(
        d.predicted_seconds <= t_papers,
        "{} vs {t_papers}",
        d.predicted_seconds
    );
    // The roofline: offloaded attention is compute-bound from ~1.4K tokens (well below 10K).
    assert!(
        (1000..3000).contains(&d.roofline_chunk_tokens),
        "{}",
        d.roofline_chunk_tokens
    );
    assert!(
        p.weights_on_gpu
            && kvplan_planner::plan::splits(&p.decisions).is_empty()
            && p.decisions
                .get::<kvplan_planner::runahead::RunaheadDetails>()
                .is_none()
    );
    assert!(p.memory.gpu_bytes() <= hw.gpu.usable_bytes());
    assert_eq!(
        p.memory
            .host_item(kvplan_vocab::memory::MemoryKind::KvCache),
        1_024_001 * m.kv_bytes_per_token()
    );
    let names: Vec<&str> = p
        .schedule
        .streams()
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(names, ["gpu0.compute", "gpu0.h2d", "gpu0.d2h"]);
    assert!(p.notes.iter().any(|n| matches!(
        n.get(),
        Some(headinfer::HeadInferNote::AdaptiveGroups { .. })
    )));
}

#[test]
fn fixed_choices_are_kept_and_checked() {
    let (m, hw) = (llama(), rtx4090_512());
    let cost = CostModel::new(&hw);
    let opts = |g: Option<u32>, c: Option<u32>| {
        Options::default().with(headinfer::HeadInferOptions {
            heads_per_group: g,
            chunk_tokens: c,
        })
    };
    let p = plan(
        &m,
        &hw,
        &cost,
        &shape(100_000),
        Strategy::HEADINFER,
        &opts(Some(2), Some(4096)),
    )
    .unwrap();
    let d = p
        .decisions
        .get::<kvplan_planner::headinfer::HeadInferDetails>()
        .cloned()
        .unwrap();
    assert_eq!(
        (d.heads_per_group, d.chunk_tokens, d.adaptive),
        (2, 4096, false)
    );
    // 8 heads per group do not fit 1M tokens; the error says what to do.
    let e = plan(
        &m,
        &hw,
        &cost,
        &shape(1_024_000),
        Strategy::HEADINFER,
        &opts(Some(8), None),
    )
    .unwrap_err();
    assert!(matches!(e, Error::DoesNotFit { .. }), "{e}");
    assert!(
        e.to_string().contains("`headinfer.heads_per_group` 1"),
        "{e}"
    );
    // A group size that does not divide the KV heads.
    let e = plan(
        &m,
        &hw,
        &cost,
        &shape(1000),
        Strategy::HEADINFER,
        &opts(Some(3), None),
    )
    .unwrap_err();
    assert!(
        e.to_string().starts_with(
            "headinfer.heads_per_group: must divide llama-3-8b's 8 KV heads: one of 1, 2, 4, 8"
        ),
        "{e}"
    );
    // A chunk longer than the context is the context.
    let p = plan(
        &m,
        &hw,
        &cost,
        &shape(3000),
        Strategy::HEADINFER,
        &opts(None, Some(50_000)),
    )
    .unwrap();
    assert_eq!(
        p.decisions
            .get::<kvplan_planner::headinfer::HeadInferDetails>()
            .cloned()
            .unwrap()
            .chunk_tokens,
        3000
    );
}

#[test]
fn impossible_requests_are_clear_errors() {
    let (m, hw) = (llama(), rtx4090_512());
    let cost = CostModel::new(&hw);
    let run = |m: &ModelSpec, hw: &HardwareProfile, s: Shape| {
        plan(m, hw, &cost, &s, Strategy::HEADINFER, &Options::default())
            .unwrap_err()
            .to_string()
    };
    // Context 0.
    let e = run(&m, &hw, shape(0));
    assert!(e.starts_with("workload.prompt: must be at least 1"), "{e}");
    // 4.5M tokens: 549 GiB of KV, more than the 512 GiB host (the GPU side fits).
    let e = run(&m, &hw, shape(4_500_000));
    assert!(
        e.contains("does not fit") && e.contains("host RAM") && e.contains("`workload.prompt`"),
        "{e}"
    );
    // With a huge host the GPU runs out even with one head per group.
    let mut big = hw.clone();
    big.host.ram_bytes = 64 << 40;
    let e = run(&m, &big, shape(6_000_000));
    assert!(
        e.contains("does not fit")
            && e.contains("GPU memory")
            && e.contains("1 KV head per group")
            && e.contains("`workload.prompt`"),
        "{e}"
    );
    // Everything that fits memory is over the op limit (two million decode steps): the error
    // is the schedule builder's, naming the fix.
    let e = run(
        &ModelSpec::preset("opt-125m").unwrap(),
        &HardwareProfile::preset("a100-80g-sxm").unwrap(),
        Shape {
            gen_len: 2_000_000,
            ..shape(1000)
        },
    );
    assert!(
        e.contains("limit 20000000") && e.contains("`workload.gen`"),
        "{e}"
    );
    // Weights that do not fit the card.
    let e = run(&ModelSpec::preset("llama-3-70b").unwrap(), &hw, shape(1000));
    assert!(e.contains("weights alone do not fit"), "{e}");
    // Column-by-column and weight offload are not HeadInfer.
    let e = run(
        &m,
        &hw,
        Shape {
            gpu_batches: 2,
            ..shape(1000)
        },
    );
    assert!(e.starts_with("workload.gpu_batches"), "{e}");
}

// ---- simulated prefill latency against Table 6 ------------------------------------------------

/// A row of Table 6: method x heads per group.
fn layout_for(
    m: &ModelSpec,
    hw: &HardwareProfile,
    method: &str,
    g: Option<u32>,
    s: u32,
) -> Option<Schedule> {
    let cost = CostModel::new(hw);
    let fits = |st: MemStrategy, g: u32| {
        let cfg = MemoryConfig {
            heads_per_group: g,
            ..MemoryConfig::default()
        };
        let x = memory(m, st, u64::from(s) + 1, &cfg);
        x.peak_gpu <= hw.gpu.usable_bytes() && x.kv_host <= hw.host.ram_bytes
    };
    let build = |st: MemStrategy, g: u32| {
        fits(st, g).then(|| {
            let layout = Layout::of(m, st, s, DEFAULT_CHUNK_TOKENS, g);
            headinfer::build_schedule(m, &shape(s), &layout, HostMemory::Pinned).unwrap()
        })
    };
    match method {
        "standard" => build(MemStrategy::Standard, 8),
        "chunked_prefill" => build(MemStrategy::ChunkedPrefill, 8),
        "layer_offload" => build(MemStrategy::LayerOffload, 8),
        "headinfer" => build(MemStrategy::HeadInfer, g.unwrap()),
        "headinfer_adaptive" => plan(
            m,
            hw,
            &cost,
            &shape(s),
            Strategy::HEADINFER,
            &Options::default(),
        )
        .ok()
        .map(|p| p.schedule),
        other => panic!("unknown method {other}"),
    }
}

/// The cells the rtx-4090 profile's efficiencies were derived from: checked with their row's
/// band like the others, and labelled, as they are not independent checks.
const CALIBRATION_CELLS: [(&str, &str, &str); 2] =
    [("standard", "", "10K"), ("headinfer", "4", "1M")];

fn k_tokens(col: &str) -> u32 {
    match col.strip_suffix('M') {
        Some(mm) => mm.parse::<u32>().unwrap() * 1000,
        None => col.strip_suffix('K').unwrap().parse().unwrap(),
    }
}

/// Table 6's tolerance per row (method, heads per group), on the simulated prefill's error.
/// The source rounds to 2 decimals below 10 s and 3 significant digits above (at most 4.5% at
/// 0.11 s, 0.5% from 1 s on); each row's band is that rounding plus the model's error on the
/// row's cells between 10K and 2M tokens when the bands were set (largest seen in brackets):
/// - standard and chunked prefill are the model's plain prefill, what the profile's two
///   calibration cells fix: 3% (2.0%);
/// - HeadInfer with 8, 4 or 2 heads per group and the adaptive choice overlap the offload with
///   the compute as the paper does: 4% (3.1%);
/// - layer offload and HeadInfer with one head per group move 8x more, smaller copies a layer,
///   which the paper's implementation pays a little more for than the profile's one copy
///   latency (its times rise 3-6% from g = 8 to g = 1 at 20-100K, the model's by 0.1%): 6% (5.7%).
const TABLE_6_TOLERANCE: &[(&str, &str, f64)] = &[
    ("standard", "", 0.03),
    ("chunked_prefill", "", 0.03),
    ("layer_offload", "", 0.06),
    ("headinfer", "8", 0.04),
    ("headinfer", "4", 0.04),
    ("headinfer", "2", 0.04),
    ("headinfer", "1", 0.06),
    ("headinfer_adaptive", "", 0.04),
];

/// Cells of Table 6 outside their row's band, with the bound they do meet (method, heads per
/// group, context column, bound on |error|). Each must still miss its row's band (a cell that
/// comes within it leaves this list):
/// - 1K: the paper's times rise from 0.12 s to 0.21 s as the groups shrink from 8 heads to one,
///   a fixed cost per group and layer in its implementation (0.09 s over 32 layers x 8 groups,
///   ~0.35 ms each) that the model does not have: it stays at 0.11 s. The 2-decimal rounding
///   is worth 4-5% there.
/// - 4M: the paper's 4M is 3.40x its 2M, where the doubling before it (1M to 2M) is 3.91x and a
///   prefill whose attention is quadratic in the context approaches 4x (the model: 3.95x). A
///   single run, the table's longest (7.5 hours).
const TABLE_6_KNOWN_MISSES: &[(&str, &str, &str, f64)] = &[
    ("layer_offload", "", "1K", 0.09),
    ("headinfer", "8", "1K", 0.09),
    ("headinfer", "4", "1K", 0.16),
    ("headinfer", "2", "1K", 0.22),
    ("headinfer", "1", "1K", 0.48),
    ("headinfer_adaptive", "", "1K", 0.16),
    ("headinfer", "1", "4M", 0.16),
    ("headinfer_adaptive", "", "4M", 0.16),
];

#[test]
fn simulated_prefill_matches_table_6() {
    let (m, hw) = (llama(), rtx4090_512());
    let cost = CostModel::new(&hw);
    let table = rows(PREFILL_CSV);
    let header = &table[0];
    let (mut checked, mut failures, mut fit_disagreements) = (0, Vec::new(), Vec::new());
    let mut misses_seen = Vec::new();
    // Simulated latency per (context column, method, g) for the adaptive comparison.
    let mut sims: Vec<(usize, String, f64)> = Vec::new();
    for row in &table[1..] {
        let method = row[0].as_str();
        let g = row[1].parse::<u32>().ok();
        let band = TABLE_6_TOLERANCE
            .iter()
            .find(|t| t.0 == method && t.1 == row[1])
            .unwrap_or_else(|| panic!("no tolerance for Table 6 row {method},{}", &row[1]))
            .2;
        for (col, cell) in row.iter().enumerate().skip(2) {
            let k = k_tokens(&header[col]);
            let s = k * 1024;
            let schedule = layout_for(&m, &hw, method, g, s);
            let paper: Option<f64> = cell.parse().ok();
            if paper.is_some() != schedule.is_some() {
                fit_disagreements.push(format!("{method},{} at {}", row[1], header[col]));
                continue;
            }
            let (Some(paper), Some(schedule)) = (paper, schedule) else {
                continue;
            };
            let sim = kvplan_sim::simulate(&schedule, &cost).unwrap().makespan();
            let err = sim / paper - 1.0;
            let calibration = CALIBRATION_CELLS.contains(&(method, row[1].as_str(), &header[col]));
            let miss = TABLE_6_KNOWN_MISSES
                .iter()
                .find(|x| x.0 == method && x.1 == row[1] && x.2 == header[col]);
            let bound = miss.map_or(band, |x| x.3);
            eprintln!(
                "{method:18} {:>2} {:>4}: simulated {sim:10.3} s, paper {paper:9.2} s ({:+6.1}%, band {:.0}%){}",
                row[1],
                header[col],
                100.0 * err,
                100.0 * bound,
                if calibration {
                    " [calibration]"
                } else if miss.is_some() {
                    " [known miss]"
                } else {
                    ""
                }
            );
            sims.push((col, format!("{method}{}", row[1]), sim));
            checked += 1;
            if err.abs() > bound {
                failures.push(format!(
                    "{method},{} at {}: {:+.1}% (bound {:.0}%)",
                    row[1],
                    header[col],
                    100.0 * err,
                    100.0 * bound
                ));
            }
            if miss.is_some() {
                misses_seen.push((method, row[1].to_string(), header[col].to_string()));
                if err.abs() <= band {
                    failures.push(format!(
                        "{method},{} at {}: {:+.1}% is now within the row's {:.0}%: remove it from TABLE_6_KNOWN_MISSES",
                        row[1],
                        header[col],
                        100.0 * err,
                        100.0 * band
                    ));
                }
            }
        }
    }
    assert_eq!(checked, 54, "every filled cell of Table 6 is checked");
    assert_eq!(
        misses_seen.len(),
        TABLE_6_KNOWN_MISSES.len(),
        "every known miss names a filled cell: {misses_seen:?}"
    );
    assert!(failures.is_empty(), "{failures:#?}");
    // Every empty cell is one the model says does not fit, and every filled cell fits.
    assert!(fit_disagreements.is_empty(), "{fit_disagreements:?}");
    // The adaptive plan is never more than 5% slower than the best fixed group size.
    for (col, name) in header.iter().enumerate().skip(2) {
        let at = |name: &str| sims.iter().find(|x| x.0 == col && x.1 == name).map(|x| x.2);
        let Some(adaptive) = at("headinfer_adaptive") else {
            continue;
        };
        let best = ["headinfer8", "headinfer4", "headinfer2", "headinfer1"]
            .iter()
            .filter_map(|n| at(n))
            .fold(f64::INFINITY, f64::min);
        assert!(adaptive <= 1.05 * best, "{name}: {adaptive} vs {best}");
    }
}

// ---- the decision rule: the fastest candidate, within 1% of brute force ------------------------

/// The candidates of the decision rule, enumerated here independently of the planner: every
/// divisor of the KV heads × the chunks `2^7 ..= 2^16`, 10,240, the roofline chunk and the
/// context (each at most the context and 65,536), that fit the usable GPU memory and the op
/// limit. Returns `(g, chunk, full-schedule makespan)` for each.
fn brute_force(m: &ModelSpec, hw: &HardwareProfile, s: &Shape) -> Vec<(u32, u32, f64)> {
    let cost = CostModel::new(hw);
    let roofline = headinfer::roofline_chunk(m, &cost, HostMemory::Pinned);
    let mut chunks: Vec<u32> = (7..=16).map(|e| 1u32 << e).collect();
    chunks.extend([10_240, roofline, s.prompt]);
    let mut chunks: Vec<u32> = chunks
        .into_iter()
        .map(|c| c.min(s.prompt).min(65_536))
        .collect();
    chunks.sort_unstable();
    chunks.dedup();
    let mut out = Vec::new();
    for g in (1..=m.num_kv_heads).filter(|g| m.num_kv_heads.is_multiple_of(*g)) {
        for &c in &chunks {
            let cfg = MemoryConfig {
                batch: s.batch,
                chunk_tokens: c,
                heads_per_group: g,
                ..MemoryConfig::default()
            };
            if memory(m, MemStrategy::HeadInfer, s.max_len(), &cfg).peak_gpu > hw.gpu.usable_bytes()
            {
                continue;
            }
            let layout = Layout {
                chunk_tokens: c,
                heads_per_group: Some(g),
            };
            if headinfer::estimated_ops(m, s, &layout) > headinfer::MAX_OPS {
                continue;
            }
            let sched = headinfer::build_schedule(m, s, &layout, HostMemory::Pinned).unwrap();
            out.push((
                g,
                c,
                kvplan_sim::simulate(&sched, &cost).unwrap().makespan(),
            ));
        }
    }
    out
}

/// (model, hardware, GPU GiB override, context, gen): short and long contexts, GQA and MHA,
/// fast and slow links, and GPUs shrunk until memory decides between the candidates.
const RULE_CASES: [(&str, &str, Option<f64>, u32, u32); 9] = [
    ("llama-3-8b", "rtx-4090", None, 16_384, 1),
    ("llama-3-8b", "rtx-4090", None, 65_536, 2),
    ("llama-3-8b", "rtx-4090", Some(19.0), 60_000, 2),
    ("llama-3-8b", "t4", Some(19.5), 40_000, 1),
    ("qwen2-7b", "a100-40g-pcie4", None, 50_000, 3),
    ("mistral-7b", "h100-pcie", Some(18.5), 64_000, 1),
    ("opt-1.3b", "t4", None, 20_000, 2),
    ("opt-1.3b", "quadro-rtx-5000", Some(6.0), 30_000, 1),
    ("opt-125m", "a100-40g-pcie4", None, 3_000, 4),
];

#[test]
fn chosen_group_and_chunk_are_within_1_percent_of_brute_force() {
    for (mn, hn, gib, context, gen_len) in RULE_CASES {
        let m = ModelSpec::preset(mn).unwrap();
        let mut hw = HardwareProfile::preset(hn).unwrap();
        if let Some(g) = gib {
            hw.gpu.memory_bytes = (g * GIB) as u64;
        }
        let cost = CostModel::new(&hw);
        let s = Shape {
            batch: 1,
            gpu_batches: 1,
            prompt: context,
            gen_len,
        };
        let all = brute_force(&m, &hw, &s);
        assert!(!all.is_empty(), "{mn} on {hn}: nothing fits");
        let best = all.iter().map(|x| x.2).fold(f64::INFINITY, f64::min);
        let p = plan(&m, &hw, &cost, &s, Strategy::HEADINFER, &Options::default()).unwrap();
        let d = p
            .decisions
            .get::<kvplan_planner::headinfer::HeadInferDetails>()
            .unwrap();
        let chosen = kvplan_sim::simulate(&p.schedule, &cost).unwrap().makespan();
        let (worst_g, worst_c, worst) = all
            .iter()
            .fold((0, 0, 0.0), |a, x| if x.2 > a.2 { *x } else { a });
        eprintln!(
            "{mn} on {hn} ({:.1} GiB), {context} tokens, gen {gen_len}: chose g {} chunk {} ({chosen:.4} s, predicted {:.4}); best of {} {best:.4} s; worst g {worst_g} chunk {worst_c} {worst:.4} s; {} timed",
            hw.gpu.memory_bytes as f64 / GIB,
            d.heads_per_group,
            d.chunk_tokens,
            d.predicted_seconds,
            all.len(),
            d.candidates_timed,
        );
        assert!(
            chosen <= 1.01 * best,
            "{mn} on {hn} at {context}: chose {chosen} s, brute force {best} s"
        );
        // The planner saw the same candidates and predicted the chosen one's time.
        assert_eq!(d.candidates_fit as usize, all.len(), "{mn} on {hn}");
        assert!((d.predicted_seconds / chosen - 1.0).abs() < 1e-9);
    }
}

#[test]
fn predicted_seconds_equal_the_full_schedules_makespan() {
    let cases = [
        ("llama-3-8b", "rtx-4090", 300_000u32, 2u32, false),
        ("llama-3-8b", "h100-pcie", 50_000, 1, true),
        ("qwen2-7b", "a100-40g-pcie4", 100_000, 3, false),
        ("opt-1.3b", "t4", 20_000, 2, true),
        ("mistral-7b", "quadro-rtx-5000", 40_000, 1, false),
    ];
    for (mn, hn, context, gen_len, half) in cases {
        let m = ModelSpec::preset(mn).unwrap();
        let mut hw = HardwareProfile::preset(hn).unwrap();
        if half {
            hw.link.duplex = kvplan_vocab::hardware::Duplex::Half;
        }
        let cost = CostModel::new(&hw);
        let s = Shape {
            batch: 1,
            gpu_batches: 1,
            prompt: context,
            gen_len,
        };
        for g in headinfer::divisors(m.num_kv_heads) {
            for chunk in [1024u32, 1425, 4096, 10_240, 32_768] {
                let host = if half {
                    HostMemory::Pageable
                } else {
                    HostMemory::Pinned
                };
                let layout = Layout {
                    chunk_tokens: chunk,
                    heads_per_group: Some(g),
                };
                let sched = headinfer::build_schedule(&m, &s, &layout, host).unwrap();
                let full = kvplan_sim::simulate(&sched, &cost).unwrap().makespan();
                let predicted = headinfer::predicted_seconds(&m, &s, &layout, host, &cost).unwrap();
                assert!(
                    (predicted / full - 1.0).abs() < 1e-9,
                    "{mn} on {hn}, g {g}, chunk {chunk}: {predicted} vs {full}"
                );
                // The busy-time bound is the schedule's per-stream sums, and bounds it.
                let busy = headinfer::busy_seconds(&m, &s, &layout, host, &cost);
                let mut sums = [0.0f64; 3];
                for op in sched.ops() {
                    sums[op.stream.index()] += cost.duration(&op.kind);
                }
                for (got, want) in [busy.compute, busy.h2d, busy.d2h].iter().zip(sums) {
                    assert!(
                        (got - want).abs() <= 1e-9 * want.max(1e-12),
                        "{got} vs {want}"
                    );
                }
                assert!(busy.bound(hw.link.duplex) <= full * (1.0 + 1e-12));
            }
        }
    }
}

// ---- property tests --------------------------------------------------------------------------

/// Checks the ping-pong discipline of an offloading HeadInfer schedule on `t`: every prefetch
/// into a buffer starts after the attention that last read that buffer (two group-units
/// earlier) has ended, and every group attention starts after its own prefetch.
fn assert_ping_pong(s: &Schedule, t: &Timeline) {
    let mut attns: Vec<usize> = Vec::new();
    let mut pending: Option<usize> = None;
    for (i, op) in s.ops().iter().enumerate() {
        match op.kind {
            OpKind::H2D {
                payload: Payload::Cache,
                ..
            } => {
                let unit = attns.len();
                if unit >= 2 {
                    let prev = t.spans[attns[unit - 2]];
                    assert!(
                        t.spans[i].start >= prev.end,
                        "prefetch op {i} starts at {} before attention op {} (same buffer) ends at {}",
                        t.spans[i].start,
                        attns[unit - 2],
                        prev.end
                    );
                }
                pending = Some(i);
            }
            OpKind::Attention { .. } => {
                if let Some(l) = pending.take() {
                    assert!(
                        t.spans[i].start >= t.spans[l].end,
                        "attention {i} before its load"
                    );
                }
                attns.push(i);
            }
            _ => {}
        }
    }
}

const MODELS: [&str; 6] = [
    "opt-125m",
    "opt-1.3b",
    "llama-3-8b",
    "mistral-7b",
    "qwen2-7b",
    "llama-2-7b",
];
const GPUS: [&str; 4] = ["rtx-4090", "a100-40g-pcie4", "t4", "h100-pcie"];

proptest! {
    #![proptest_config(crate::props::config(48))]

    /// Any plan the planner emits fits the GPU and the host; anything it refuses is a
    /// does-not-fit error.
    #[test]
    fn emitted_plans_fit_their_budgets(
        mi in 0..MODELS.len(),
        gi in 0..GPUS.len(),
        log_ctx in 6.0f64..22.5,
        gpu_gib in 8.0f64..96.0,
        host_gib in 1.0f64..1024.0,
        gen_len in 1u32..3,
        batch in 1u32..3,
    ) {
        let m = ModelSpec::preset(MODELS[mi]).unwrap();
        let mut hw = HardwareProfile::preset(GPUS[gi]).unwrap();
        hw.gpu.memory_bytes = (gpu_gib * GIB) as u64;
        hw.host.ram_bytes = (host_gib * GIB) as u64;
        let cost = CostModel::new(&hw);
        let s = Shape { batch, gpu_batches: 1, prompt: log_ctx.exp2() as u32, gen_len };
        // Skip schedules too big to build quickly in a property test (not the property).
        match plan(&m, &hw, &cost, &s, Strategy::HEADINFER, &Options::default().with(
            headinfer::HeadInferOptions { heads_per_group: None, chunk_tokens: Some(1 << 16) },
        )) {
            Ok(p) => {
                prop_assert!(p.memory.gpu_bytes() <= hw.gpu.usable_bytes());
                prop_assert!(p.memory.host_bytes() <= hw.host.ram_bytes);
                let d = p.decisions.get::<kvplan_planner::headinfer::HeadInferDetails>().cloned().unwrap();
                prop_assert_eq!(m.num_kv_heads % d.heads_per_group, 0);
                // The adaptive choice is the fastest group that fits (the chunk is fixed here):
                // every other group either does not fit or is not faster.
                for b in headinfer::divisors(m.num_kv_heads) {
                    let other = memory(&m, MemStrategy::HeadInfer, s.max_len(), &MemoryConfig {
                        batch, chunk_tokens: d.chunk_tokens, heads_per_group: b, ..MemoryConfig::default()
                    });
                    if b == d.heads_per_group || other.peak_gpu > hw.gpu.usable_bytes() {
                        continue;
                    }
                    let layout = Layout { chunk_tokens: d.chunk_tokens, heads_per_group: Some(b) };
                    let t = headinfer::predicted_seconds(&m, &s, &layout, HostMemory::Pinned, &cost).unwrap();
                    prop_assert!(t >= d.predicted_seconds * (1.0 - headinfer::TIE), "{b}: {t} vs {}", d.predicted_seconds);
                }
            }
            Err(Error::DoesNotFit { .. }) => {}
            Err(e) => prop_assert!(false, "unexpected error {e}"),
        }
    }

    /// Capacity's answer fits and one more token does not (for the binding limit).
    #[test]
    fn capacity_is_the_largest_context_that_fits(
        mi in 0..MODELS.len(),
        si in 0..5usize,
        gpu_gib in 8.0f64..200.0,
        host_gib in 1.0f64..2048.0,
        batch in 1u32..4,
        gexp in 0u32..4,
    ) {
        let m = ModelSpec::preset(MODELS[mi]).unwrap();
        let mut hw = HardwareProfile::preset("rtx-4090").unwrap();
        hw.gpu.memory_bytes = (gpu_gib * GIB) as u64;
        let g = (1u32 << gexp).min(m.num_kv_heads);
        let g = if m.num_kv_heads.is_multiple_of(g) { g } else { 1 };
        let opts = CapacityOptions {
            host_ram_bytes: Some((host_gib * GIB) as u64),
            config: MemoryConfig { batch, heads_per_group: g, ..MemoryConfig::default() },
        };
        let st = MemStrategy::ALL[si];
        let c = capacity(&m, &hw, st, &opts).unwrap();
        let at = |s: u64| memory(&m, st, s, &opts.config);
        let gpu = hw.gpu.usable_bytes();
        let host = opts.host_ram_bytes.unwrap();
        let n = c.max_context_tokens;
        if n > 0 {
            prop_assert!(at(n).peak_gpu <= gpu && at(n).kv_host <= host);
            prop_assert_eq!(c.gpu_bytes, at(n).peak_gpu);
        }
        let next = at(n + 1);
        match c.binding_limit {
            BindingLimit::GpuMemory => prop_assert!(next.peak_gpu > gpu),
            BindingLimit::HostMemory => prop_assert!(next.kv_host > host && next.peak_gpu <= gpu),
            BindingLimit::SearchLimit => prop_assert!(false, "no limit found"),
        }
    }

    /// The ping-pong discipline holds in the simulated timeline of any offloading schedule.
    #[test]
    fn ping_pong_holds_in_the_simulated_timeline(
        mi in 0..3usize,
        gi in 0..GPUS.len(),
        prompt in 1u32..6000,
        chunk in 64u32..2048,
        gexp in 0u32..4,
        gen_len in 1u32..4,
        pageable in any::<bool>(),
    ) {
        let m = ModelSpec::preset(["opt-125m", "llama-3-8b", "qwen2-7b"][mi]).unwrap();
        let hw = HardwareProfile::preset(GPUS[gi]).unwrap();
        let cost = CostModel::new(&hw);
        let g = 1u32 << gexp;
        let g = if m.num_kv_heads.is_multiple_of(g) { g } else { 1 };
        let host = if pageable { HostMemory::Pageable } else { HostMemory::Pinned };
        let s = Shape { batch: 1, gpu_batches: 1, prompt, gen_len };
        let layout = Layout { chunk_tokens: chunk, heads_per_group: Some(g) };
        let sched = headinfer::build_schedule(&m, &s, &layout, host).unwrap();
        sched.validate().unwrap();
        let t = kvplan_sim::simulate(&sched, &cost).unwrap();
        assert_ping_pong(&sched, &t);
        // The copies move exactly the KV the chunks and steps need.
        let kv_group_tok = 2 * u64::from(g) * u64::from(m.head_dim) * m.dtype_bytes();
        let groups = u64::from(m.num_kv_heads / g);
        let layers = u64::from(m.num_layers);
        let stored: u64 = sched.ops().iter().map(|o| match o.kind {
            OpKind::D2H { bytes, .. } => bytes, _ => 0 }).sum();
        prop_assert_eq!(stored, (u64::from(prompt) + u64::from(gen_len) - 1) * kv_group_tok * groups * layers);
    }
}
