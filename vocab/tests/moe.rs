//! Mixtures of experts: the config.json of each family with experts, the presets' shapes and
//! sharding, and the cost of an MoE layer (`layers::moe_ffn_ops`): the expert GEMMs read the
//! weights of the distinct experts a batch hits, `E_hit = E · (1 − (1 − k/E)^B)`, and a dense
//! model written as a 1-expert top-1 MoE costs what the dense model does.

use kvplan_vocab::layers::{experts_hit_batch, forward_ops, forward_ops_for, moe_ffn_ops};
use kvplan_vocab::model::{Family, LayerFfn, Moe};
use kvplan_vocab::schedule::OpKind;
use kvplan_vocab::{CostModel, Error, HardwareProfile, ModelSpec};

fn cost(hw: &str) -> CostModel {
    CostModel::new(&HardwareProfile::preset(hw).unwrap())
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs()
}

fn op<'a>(ops: &'a [(&'static str, OpKind)], name: &str) -> &'a OpKind {
    &ops.iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no {name} op in {ops:?}"))
        .1
}

fn parse(json: &str) -> Result<ModelSpec, Error> {
    ModelSpec::from_hf_config_str(json, "x", "x.json")
}

/// The attention and vocabulary fields every inline config below shares.
const BASE: &str = r#""hidden_size":256,"num_attention_heads":4,"num_key_value_heads":2,"num_hidden_layers":4,"vocab_size":1000,"max_position_embeddings":512,"torch_dtype":"bfloat16""#;

#[test]
fn decode_expert_gemms_read_the_distinct_experts_hit() {
    // Mixtral-8x7B on one GPU (8 experts, top-2) and Qwen3-30B-A3B (128 experts, top-8).
    let hw = HardwareProfile::preset("h100-sxm").unwrap();
    let c = CostModel::new(&hw);
    for name in ["mixtral-8x7b", "qwen3-30b-a3b"] {
        let m = ModelSpec::preset(name).unwrap();
        let moe = m.moe.clone().unwrap();
        let (e, k) = (f64::from(moe.experts), f64::from(moe.top_k));
        let p = m.dtype_bytes() as f64;
        let (h, w) = (f64::from(m.hidden), f64::from(moe.expert_ffn));
        let mut last = (0.0, 0u32);
        for b in [1u32, 2, 4, 8, 16, 32, 64] {
            // The closed form, written out.
            let hit = e * (1.0 - (1.0 - k / e).powi(b as i32));
            let batch = (hit.round() as u32).clamp(1, moe.experts);
            let rows = (f64::from(b) * k / f64::from(batch)).ceil() as u32;
            assert_eq!(experts_hit_batch(&moe, u64::from(b)), batch, "{name} B={b}");
            let ops = forward_ops(&m, &[(1, 512)], b);
            let (up, down) = (op(&ops, "ffn_up"), op(&ops, "ffn_down"));
            assert_eq!(
                *up,
                OpKind::Gemm {
                    m: rows,
                    n: 2 * moe.expert_ffn,
                    k: m.hidden,
                    batch,
                    dtype: m.dtype,
                    weights: kvplan_vocab::WeightFormat::Dense,
                },
                "{name} B={b}"
            );
            assert!(
                matches!(*down, OpKind::Gemm { m: r, n, k: kk, batch: bb, .. }
                    if r == rows && n == m.hidden && kk == moe.expert_ffn && bb == batch),
                "{name} B={b}: {down:?}"
            );
            // Bytes: the distinct experts' weights plus each expert's rows in and out.
            let rf = f64::from(rows);
            let want_up = f64::from(batch) * (rf * h + h * 2.0 * w + rf * 2.0 * w) * p;
            assert_eq!(up.mem_bytes(), want_up, "{name} B={b}");
            let want_down = f64::from(batch) * (rf * w + w * h + rf * h) * p;
            assert_eq!(down.mem_bytes(), want_down, "{name} B={b}");
            // The weights dominate a decode step's expert GEMMs: their time follows the
            // distinct-expert count, within the kernel floor's share.
            let t = c.device_duration(up) + c.device_duration(down);
            let weights = f64::from(batch) * 3.0 * h * w * p;
            let t_weights = weights / hw.gpu.mem_bandwidth;
            assert!(
                t >= t_weights && t <= 1.35 * t_weights + 20e-6,
                "{name} B={b}: {t} s for {batch} experts ({t_weights} s of weights at full HBM bandwidth)"
            );
            if batch > last.1 {
                assert!(t > last.0, "{name} B={b}: more experts hit, no more time");
            } else {
                assert!(
                    rel(t, last.0) < 0.1,
                    "{name} B={b}: same experts, other time"
                );
            }
            last = (t, batch);
        }
        // Enough tokens hit every expert.
        assert_eq!(experts_hit_batch(&moe, 4096), moe.experts, "{name}");
    }
}

#[test]
fn a_batched_gemm_costs_every_gemm_of_the_batch() {
    // Memory-bound decode shapes on a roofline profile: `floor + latency + batch × bytes / bw`,
    // so each GEMM of the batch adds the same time, its weights and rows.
    let c = cost("rtx-4090");
    let t = |batch| {
        c.device_duration(&OpKind::Gemm {
            m: 2,
            n: 2 * 7168,
            k: 4096,
            batch,
            dtype: kvplan_vocab::DType::Bf16,
            weights: kvplan_vocab::WeightFormat::Dense,
        })
    };
    let step = t(2) - t(1);
    assert!(step > 0.0);
    for b in 2..8 {
        assert!(rel(t(b + 1) - t(b), step) < 1e-9, "batch {b}");
    }
    // On the fitted H100 model (tiles, waves, the blend of memory and compute) too, eight
    // experts' weights cost eight times one's, within the floor.
    let h = cost("h100-sxm");
    let g = |batch| {
        h.device_duration(&OpKind::Gemm {
            m: 2,
            n: 2 * 7168,
            k: 4096,
            batch,
            dtype: kvplan_vocab::DType::Bf16,
            weights: kvplan_vocab::WeightFormat::Dense,
        })
    };
    let per = g(8) - g(7);
    assert!(
        rel(g(4) - g(2), 2.0 * per) < 0.05,
        "{} vs {}",
        g(4) - g(2),
        2.0 * per
    );
}

#[test]
fn a_dense_model_as_one_expert_top_1_costs_the_same() {
    for (name, hw) in [
        ("llama-2-7b", "h100-sxm"),
        ("qwen3-8b", "a100-80g-sxm"),
        ("mistral-7b", "t4"),
        ("qwen2.5-7b", "h100-sxm"),
    ] {
        let c = cost(hw);
        let dense = ModelSpec::preset(name).unwrap();
        let one = ModelSpec {
            moe: Some(Moe {
                experts: 1,
                top_k: 1,
                expert_ffn: dense.ffn_dim,
                shared_ffn: 0,
                dense_layers: Vec::new(),
                expert_parallel: 1,
            }),
            ..dense.clone()
        };
        assert_eq!(one.main_ffn(), LayerFfn::Moe);
        for tp in [1, 2] {
            let (d, o) = (dense.sharded(tp).unwrap(), one.sharded(tp).unwrap());
            for seqs in [
                vec![(1u32, 300u32)],
                vec![(512, 512), (1, 100), (1, 900)],
                vec![(37, 1000)],
            ] {
                for copies in [1, 8, 64] {
                    let t = |m: &ModelSpec| -> Vec<(&str, f64)> {
                        forward_ops(m, &seqs, copies)
                            .iter()
                            .map(|(n, k)| (*n, c.duration(k)))
                            .collect()
                    };
                    let (td, to) = (t(&d), t(&o));
                    assert_eq!(
                        td.iter().map(|x| x.0).collect::<Vec<_>>(),
                        to.iter().map(|x| x.0).collect::<Vec<_>>(),
                        "{name}"
                    );
                    for ((n, a), (_, b)) in td.iter().zip(&to) {
                        assert!(rel(*b, *a) <= 1e-9, "{name} tp {tp} {n}: {a} vs {b}");
                    }
                    let sum = |v: &[(&str, f64)]| v.iter().map(|x| x.1).sum::<f64>();
                    assert!(rel(sum(&to), sum(&td)) <= 1e-9, "{name} tp {tp}");
                }
            }
        }
    }
}

#[test]
fn an_moe_layer_routes_sums_and_adds_its_shared_expert() {
    let m = parse(&format!(
        r#"{{"model_type":"qwen2_moe",{BASE},"intermediate_size":512,"num_experts":16,"num_experts_per_tok":4,"moe_intermediate_size":64,"shared_expert_intermediate_size":256}}"#
    ))
    .unwrap();
    let names: Vec<&str> = forward_ops(&m, &[(1, 10)], 3).iter().map(|o| o.0).collect();
    assert_eq!(
        names,
        [
            "ln1",
            "qkv_proj",
            "rope",
            "attention",
            "out_proj",
            "residual_attn",
            "ln2",
            "router",
            "topk",
            "moe_align",
            "ffn_up",
            "ffn_act",
            "ffn_down",
            "moe_sum",
            "shared_up",
            "shared_act",
            "shared_down",
            "shared_add",
            "residual_ffn"
        ]
    );
    let ops = moe_ffn_ops(&m, m.moe.as_ref().unwrap(), 3);
    assert!(matches!(
        *op(&ops, "router"),
        OpKind::Gemm {
            m: 3,
            n: 16,
            k: 256,
            batch: 1,
            ..
        }
    ));
    assert!(matches!(
        *op(&ops, "shared_up"),
        OpKind::Gemm {
            m: 3,
            n: 512,
            k: 256,
            batch: 1,
            ..
        }
    ));
    // Tensor parallel 2: the router stays whole, every width halves, one all-reduce after the
    // experts.
    let r = m.sharded(2).unwrap();
    let ops = forward_ops(&r, &[(1, 10)], 3);
    assert!(matches!(*op(&ops, "router"), OpKind::Gemm { n: 16, .. }));
    assert!(matches!(*op(&ops, "ffn_up"), OpKind::Gemm { n: 64, .. }));
    assert!(matches!(
        *op(&ops, "shared_down"),
        OpKind::Gemm { k: 128, .. }
    ));
    assert_eq!(ops.iter().filter(|o| o.0 == "allreduce_ffn").count(), 1);
}

#[test]
fn expert_parallelism_gives_each_rank_whole_experts() {
    let m = ModelSpec::preset("mixtral-8x7b").unwrap();
    let tp = m.sharded(2).unwrap();
    let ep = m.sharded_with(2, true).unwrap();
    let (t, e) = (tp.moe.as_ref().unwrap(), ep.moe.as_ref().unwrap());
    assert_eq!((t.local_experts(), t.expert_ffn), (8, 7168));
    assert_eq!(
        (e.local_experts(), e.expert_ffn, e.expert_parallel),
        (4, 14336, 2)
    );
    // The same weights per rank either way; the attention is split the same.
    assert_eq!(tp.params(), ep.params());
    assert_eq!((tp.num_heads, ep.num_heads), (16, 16));
    // A decode batch of 64 hits every expert: the same bytes, half as many GEMMs twice as wide.
    let (ot, oe) = (
        forward_ops(&tp, &[(1, 100)], 64),
        forward_ops(&ep, &[(1, 100)], 64),
    );
    assert!(matches!(
        *op(&ot, "ffn_up"),
        OpKind::Gemm {
            batch: 8,
            m: 16,
            n: 14336,
            ..
        }
    ));
    assert!(matches!(
        *op(&oe, "ffn_up"),
        OpKind::Gemm {
            batch: 4,
            m: 16,
            n: 28672,
            ..
        }
    ));
    // Each rank's share of the routed rows: B·k·E_loc/E.
    assert_eq!(e.routed_rows(64), 64.0);
    assert_eq!(t.routed_rows(64), 128.0);
    // The collective is the same all-reduce of the rows' hidden states.
    assert_eq!(op(&ot, "allreduce_ffn"), op(&oe, "allreduce_ffn"));
    // Experts must divide among the ranks; a dense model ignores the setting.
    let e = m.sharded_with(16, true).unwrap_err().to_string();
    assert!(
        e.contains("8 routed experts") && e.contains("16 GPUs"),
        "{e}"
    );
    let d = ModelSpec::preset("llama-2-7b").unwrap();
    assert_eq!(d.sharded_with(2, true).unwrap(), d.sharded(2).unwrap());
}

#[test]
fn mixture_of_experts_presets_have_the_published_shapes() {
    let m = ModelSpec::preset("mistralai/Mixtral-8x7B-v0.1").unwrap();
    assert_eq!(m.name, "mixtral-8x7b");
    assert_eq!(m.family, Family::Mixtral);
    assert_eq!(
        (
            m.hidden,
            m.num_layers,
            m.num_heads,
            m.num_kv_heads,
            m.vocab,
            m.max_position
        ),
        (4096, 32, 32, 8, 32000, 32768)
    );
    assert_eq!(
        m.moe,
        Some(Moe {
            experts: 8,
            top_k: 2,
            expert_ffn: 14336,
            shared_ffn: 0,
            dense_layers: Vec::new(),
            expert_parallel: 1,
        })
    );
    // Every expert is in the weights; a token passes through about 12.9B of the 46.7B.
    assert!((m.active_params() as f64 / 12.9e9 - 1.0).abs() < 0.01);
    assert_eq!(m.weight_bytes(), m.params() * 2);
    let q = ModelSpec::preset("qwen3-30b-a3b").unwrap();
    assert_eq!(
        (q.family, q.head_dim, q.num_kv_heads),
        (Family::Qwen3Moe, 128, 4)
    );
    let qm = q.moe.as_ref().unwrap();
    assert_eq!((qm.experts, qm.top_k, qm.expert_ffn), (128, 8, 768));
    assert!((q.active_params() as f64 / 3.3e9 - 1.0).abs() < 0.03);
    let x = ModelSpec::preset("mixtral-8x22b").unwrap();
    assert_eq!((x.hidden, x.num_layers, x.vocab), (6144, 56, 32768));
}

#[test]
fn mixtral_config() {
    let m = parse(&format!(
        r#"{{"model_type":"mixtral",{BASE},"intermediate_size":512,"num_local_experts":8,"num_experts_per_tok":2}}"#
    ))
    .unwrap();
    assert_eq!(m.family, Family::Mixtral);
    assert_eq!(m.moe_layers(), 4);
    let moe = m.moe.as_ref().unwrap();
    assert_eq!(
        (moe.experts, moe.top_k, moe.expert_ffn, moe.shared_ffn),
        (8, 2, 512, 0)
    );
    // Layers: attention (Q, O 256x256; K, V 256x128), 8 experts of 3 x 256 x 512, the router
    // 256 x 8, two norms.
    let attn = 2 * 256 * 256 + 2 * 256 * 128;
    let layer = attn + 8 * 3 * 256 * 512 + 256 * 8 + 2 * 256;
    assert_eq!(m.layer_params(), layer);
    assert_eq!(m.params(), 4 * layer + 2 * 1000 * 256 + 256);
    for field in ["num_local_experts", "num_experts_per_tok"] {
        let text = format!(
            r#"{{"model_type":"mixtral",{BASE},"intermediate_size":512,"num_local_experts":8,"num_experts_per_tok":2}}"#
        )
        .replace(&format!(r#","{field}":"#), r#","unused":"#);
        let e = parse(&text).unwrap_err().to_string();
        assert!(
            e.contains(&format!("missing field `{field}`"))
                && e.contains("required for a mixtral model"),
            "{e}"
        );
    }
    let e = parse(&format!(
        r#"{{"model_type":"mixtral",{BASE},"intermediate_size":512,"num_local_experts":8,"num_experts_per_tok":9}}"#
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("num_experts_per_tok") && e.contains("from 1 to num_local_experts (8)"),
        "{e}"
    );
}

#[test]
fn qwen_moe_configs_and_their_dense_layers() {
    // Qwen2-MoE: a shared expert, every second layer sparse, layer 3 forced dense.
    let m = parse(&format!(
        r#"{{"model_type":"qwen2_moe",{BASE},"intermediate_size":512,"num_experts":16,"num_experts_per_tok":4,"moe_intermediate_size":64,"shared_expert_intermediate_size":256,"decoder_sparse_step":2,"mlp_only_layers":[3]}}"#
    ))
    .unwrap();
    assert_eq!(m.family, Family::Qwen2Moe);
    assert!(m.qkv_bias);
    let moe = m.moe.as_ref().unwrap();
    // (i + 1) % 2 == 0 and i not in [3]: only layer 1.
    assert_eq!(moe.dense_layers, vec![0, 2, 3]);
    assert_eq!(m.moe_layers(), 1);
    assert_eq!(
        (0..4).map(|l| m.layer_ffn(l)).collect::<Vec<_>>(),
        [
            LayerFfn::Dense,
            LayerFfn::Moe,
            LayerFfn::Dense,
            LayerFfn::Dense
        ]
    );
    assert_eq!((moe.shared_ffn, m.ffn_dim), (256, 512));
    // Dense layers count the dense FFN; the MoE layer its experts, router and shared expert.
    let dense = m.layer_params_of(LayerFfn::Dense);
    let sparse = m.layer_params_of(LayerFfn::Moe);
    assert_eq!(
        sparse - dense,
        (16 * 3 * 256 * 64 + 256 * 16 + 3 * 256 * 256) - 3 * 256 * 512
    );
    assert_eq!(m.params(), 3 * dense + sparse + 2 * 1000 * 256 + 256);
    // The dense layers run the dense FFN.
    let d = forward_ops_for(&m, LayerFfn::Dense, &[(1, 10)], 2);
    assert!(!d.iter().any(|o| o.0 == "router"));
    assert!(matches!(
        *op(&d, "ffn_up"),
        OpKind::Gemm {
            n: 1024,
            batch: 1,
            ..
        }
    ));
    let e = parse(&format!(
        r#"{{"model_type":"qwen2_moe",{BASE},"intermediate_size":512,"num_experts":16,"num_experts_per_tok":4,"moe_intermediate_size":64}}"#
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("missing field `shared_expert_intermediate_size`"),
        "{e}"
    );
    // Qwen3-MoE: no shared expert, explicit head_dim.
    let q = parse(&format!(
        r#"{{"model_type":"qwen3_moe",{BASE},"head_dim":128,"intermediate_size":512,"num_experts":16,"num_experts_per_tok":4,"moe_intermediate_size":64,"decoder_sparse_step":1,"mlp_only_layers":[]}}"#
    ))
    .unwrap();
    assert_eq!(
        (q.family, q.head_dim, q.moe_layers()),
        (Family::Qwen3Moe, 128, 4)
    );
    assert_eq!(q.moe.as_ref().unwrap().shared_ffn, 0);
    let e = parse(&format!(
        r#"{{"model_type":"qwen3_moe",{BASE},"intermediate_size":512,"num_experts_per_tok":4,"moe_intermediate_size":64}}"#
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("x.json: missing field `num_experts`")
            && e.contains("required for a qwen3_moe model"),
        "{e}"
    );
    let e = parse(&format!(
        r#"{{"model_type":"qwen3_moe",{BASE},"intermediate_size":512,"num_experts":16,"num_experts_per_tok":4,"moe_intermediate_size":64,"mlp_only_layers":"none"}}"#
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("mlp_only_layers") && e.contains("list"), "{e}");
}

#[test]
fn llama4_text_config_nested_or_not() {
    let text = format!(
        r#"{BASE},"head_dim":64,"intermediate_size":128,"intermediate_size_mlp":512,"num_local_experts":16,"num_experts_per_tok":1,"interleave_moe_layer_step":2"#
    );
    let nested = parse(&format!(
        r#"{{"model_type":"llama4","torch_dtype":"bfloat16","text_config":{{"model_type":"llama4_text",{text}}}}}"#
    ))
    .unwrap();
    let flat = parse(&format!(r#"{{"model_type":"llama4_text",{text}}}"#)).unwrap();
    assert_eq!(nested, flat);
    assert_eq!(flat.family, Family::Llama4);
    let moe = flat.moe.as_ref().unwrap();
    // Every second layer from layer 1 is MoE; the others run the 512-wide dense FFN.
    assert_eq!(moe.dense_layers, vec![0, 2]);
    assert_eq!((moe.experts, moe.top_k, moe.expert_ffn), (16, 1, 128));
    // One shared expert as wide as the routed ones.
    assert_eq!((moe.shared_ffn, flat.ffn_dim), (128, 512));
    // Top-1: no sum of the experts' outputs.
    let ops = forward_ops(&flat, &[(1, 10)], 4);
    assert!(!ops.iter().any(|o| o.0 == "moe_sum") && ops.iter().any(|o| o.0 == "shared_add"));
    // Dense layers need their width; a missing expert count is named inside text_config.
    let e = parse(&format!(
        r#"{{"model_type":"llama4_text",{BASE},"intermediate_size":128,"num_local_experts":16,"num_experts_per_tok":1,"interleave_moe_layer_step":2}}"#
    ))
    .unwrap_err()
    .to_string();
    assert!(e.contains("missing field `intermediate_size_mlp`"), "{e}");
    let e = parse(&format!(
        r#"{{"model_type":"llama4","text_config":{{{BASE},"intermediate_size":128,"num_experts_per_tok":1}}}}"#
    ))
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("(text_config)")
            && e.contains("missing field `num_local_experts`")
            && e.contains("required for a llama4 model"),
        "{e}"
    );
}

#[test]
fn deepseek_is_refused_for_its_attention_before_any_other_field() {
    let full = format!(
        r#"{{"model_type":"deepseek_v3",{BASE},"intermediate_size":512,"n_routed_experts":16,"n_shared_experts":1,"num_experts_per_tok":4,"moe_intermediate_size":64,"first_k_dense_replace":1,"kv_lora_rank":512,"q_lora_rank":1536}}"#
    );
    let mla = |e: &str, got: &str| {
        assert!(
            e.starts_with("x.json: kv_lora_rank: unsupported attention:")
                && e.contains("multi-head latent attention (MLA")
                && e.contains("does not model")
                && e.ends_with(&format!("(got {got})")),
            "{e}"
        );
    };
    mla(&parse(&full).unwrap_err().to_string(), "512");
    // A missing expert field is not asked for: the attention is refused whatever else is there.
    let e = parse(&full.replace(r#""n_routed_experts":16,"#, ""))
        .unwrap_err()
        .to_string();
    mla(&e, "512");
    let e = parse(
        &full
            .replace("deepseek_v3", "deepseek_v2")
            .replace(r#""num_experts_per_tok":4,"#, "")
            .replace(r#","kv_lora_rank":512"#, ""),
    )
    .unwrap_err()
    .to_string();
    mla(&e, "absent");
}
