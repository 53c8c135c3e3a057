use super::*;
use crate::dtype::DType;
use crate::error::Error;

#[test]
fn hugging_face_ids_find_their_presets() {
    for (id, preset) in [
        ("meta-llama/Llama-2-7b-hf", Some("llama-2-7b")),
        ("meta-llama/Llama-2-13b-chat-hf", Some("llama-2-13b")),
        (
            "meta-llama/Meta-Llama-3.1-8B-Instruct",
            Some("llama-3.1-8b"),
        ),
        ("mistralai/Mistral-7B-v0.1", Some("mistral-7b")),
        ("Qwen/Qwen2-7B", Some("qwen2-7b")),
        ("facebook/opt-6.7b", Some("opt-6.7b")),
        ("mistralai/Mixtral-8x7B-v0.1", Some("mixtral-8x7b")),
        ("mistralai/Mixtral-8x7B-Instruct-v0.1", Some("mixtral-8x7b")),
        ("Qwen/Qwen3-30B-A3B", Some("qwen3-30b-a3b")),
        ("deepseek-ai/DeepSeek-V3", None),
    ] {
        assert_eq!(ModelSpec::preset_for_hf_id(id), preset, "{id}");
    }
    let m = ModelSpec::resolve("meta-llama/Llama-2-7b-hf").unwrap();
    assert_eq!(m.name, "llama-2-7b");
}

/// Every preset answers to the Hugging Face id its config came from, in any case, through
/// `preset` and `resolve` alike, and even when a directory of that name could exist.
#[test]
fn every_preset_answers_to_its_hugging_face_id() {
    for (name, _) in PRESETS {
        let id = ModelSpec::preset_hf_id(name).unwrap_or_else(|| panic!("{name}: no HF id"));
        for asked in [
            id.to_string(),
            id.to_ascii_lowercase(),
            id.to_ascii_uppercase(),
        ] {
            assert_eq!(ModelSpec::preset(&asked).unwrap().name, *name, "{asked}");
            assert_eq!(ModelSpec::resolve(&asked).unwrap().name, *name, "{asked}");
            assert_eq!(ModelSpec::preset_for_hf_id(&asked), Some(*name), "{asked}");
        }
    }
    for (id, preset) in [
        ("Qwen/Qwen3-8B", "qwen3-8b"),
        ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b"),
        ("mistralai/Mistral-Nemo-Base-2407", "mistral-nemo-12b"),
        ("google/gemma-2-27b-it", "gemma-2-27b"),
        ("meta-llama/Llama-3.2-1B-Instruct", "llama-3.2-1b"),
        ("01-ai/Yi-34B", "yi-34b"),
    ] {
        assert_eq!(ModelSpec::resolve(id).unwrap().name, preset, "{id}");
    }
}

#[test]
fn a_misspelt_model_suggests_the_preset() {
    for (asked, want) in [
        ("lama-3-8b", "llama-3-8b"),
        ("qwen3-7b", "qwen3-8b"),
        ("gemma2-27b", "gemma-2-27b"),
        ("Qwen/Qwen3-7B", "qwen3-8b"),
        ("mistral-nemo", "mistral-nemo-12b"),
    ] {
        let e = ModelSpec::resolve(asked).unwrap_err();
        let Error::UnknownModel { close, .. } = &e else {
            panic!("{asked}: {e}")
        };
        assert!(close.iter().any(|c| c == want), "{asked}: {close:?}");
        let msg = e.to_string();
        let (head, list) = msg.split_once("; known models:").unwrap();
        assert!(
            head.contains("did you mean") && head.contains(want),
            "{msg}"
        );
        assert!(list.contains("opt-125m"), "{msg}");
    }
}

#[test]
fn qwen3_reads_as_llama_with_explicit_head_dim() {
    let m = ModelSpec::preset("qwen3-32b").unwrap();
    assert_eq!(m.family, Family::Qwen3);
    assert_eq!((m.head_dim, m.q_dim(), m.hidden), (128, 8192, 5120));
    assert!(!m.qkv_bias && !m.tied_embeddings);
    let q = ModelSpec::preset("qwen2.5-7b").unwrap();
    assert!(q.qkv_bias && q.family == Family::Qwen2);
    let n = ModelSpec::preset("mistral-nemo-12b").unwrap();
    assert_eq!((n.head_dim, n.q_dim(), n.hidden), (128, 4096, 5120));
    let g = ModelSpec::preset("gemma-2-27b").unwrap();
    assert_eq!(
        (g.head_dim, g.num_kv_heads, g.dtype),
        (128, 16, DType::Bf16)
    );
}

/// One test per preset: the shape arithmetic lands within 2% of the published count.
macro_rules! param_tests {
    ($($fn:ident => $name:literal),* $(,)?) => {$(
        #[test]
        fn $fn() {
            let spec = ModelSpec::preset($name).unwrap();
            let published = PUBLISHED_PARAMS.iter().find(|(n, _)| *n == $name).unwrap().1;
            let got = spec.params() as f64;
            let rel = (got - published).abs() / published;
            assert!(rel <= 0.02, "{}: {got:.4e} params vs published {published:.4e} ({:.2}% off)", $name, rel * 100.0);
        }
    )*};
}

param_tests! {
    params_opt_125m => "opt-125m",
    params_opt_1_3b => "opt-1.3b",
    params_opt_6_7b => "opt-6.7b",
    params_opt_13b => "opt-13b",
    params_opt_30b => "opt-30b",
    params_llama_2_7b => "llama-2-7b",
    params_llama_2_13b => "llama-2-13b",
    params_llama_3_8b => "llama-3-8b",
    params_llama_3_1_8b => "llama-3.1-8b",
    params_llama_3_70b => "llama-3-70b",
    params_llama_3_1_70b => "llama-3.1-70b",
    params_llama_3_1_405b => "llama-3.1-405b",
    params_llama_3_2_1b => "llama-3.2-1b",
    params_llama_3_2_3b => "llama-3.2-3b",
    params_mistral_7b => "mistral-7b",
    params_mistral_nemo_12b => "mistral-nemo-12b",
    params_qwen2_7b => "qwen2-7b",
    params_qwen2_5_7b => "qwen2.5-7b",
    params_qwen2_5_14b => "qwen2.5-14b",
    params_qwen2_5_32b => "qwen2.5-32b",
    params_qwen2_5_72b => "qwen2.5-72b",
    params_qwen3_8b => "qwen3-8b",
    params_qwen3_14b => "qwen3-14b",
    params_qwen3_32b => "qwen3-32b",
    params_yi_34b => "yi-34b",
    params_gemma_2_9b => "gemma-2-9b",
    params_gemma_2_27b => "gemma-2-27b",
    params_falcon_7b => "falcon-7b",
    params_yarn_llama_2_7b => "yarn-llama-2-7b",
    params_mixtral_8x7b => "mixtral-8x7b",
    params_mixtral_8x22b => "mixtral-8x22b",
    params_qwen3_30b_a3b => "qwen3-30b-a3b",
}

#[test]
fn every_preset_has_a_published_count() {
    for (name, _) in PRESETS {
        assert!(
            PUBLISHED_PARAMS.iter().any(|(n, _)| n == name),
            "{name} lacks a published parameter count"
        );
    }
}

/// Exact counts for models whose safetensors totals are well known, as a tighter check of the
/// per-family layout than the 2% band.
#[test]
fn exact_counts_of_known_layouts() {
    let exact = [
        ("opt-6.7b", 6_658_473_984u64),
        ("llama-2-7b", 6_738_415_616),
        ("llama-3-8b", 8_030_261_248),
        ("mistral-7b", 7_241_732_096),
        ("qwen2-7b", 7_615_616_512),
        ("gemma-2-9b", 9_241_705_984),
        ("llama-3.1-70b", 70_553_706_496),
        ("llama-3.2-1b", 1_235_814_400),
        ("llama-3.2-3b", 3_212_749_824),
    ];
    for (name, n) in exact {
        assert_eq!(ModelSpec::preset(name).unwrap().params(), n, "{name}");
    }
}

#[test]
fn kv_bytes_match_methods_digest() {
    // METHODS.md: Llama-3-8B KV per token per layer 4 KiB, per token 128 KiB.
    let m = ModelSpec::preset("llama-3-8b").unwrap();
    assert_eq!(m.kv_bytes_per_token_layer(), 4096);
    assert_eq!(m.kv_bytes_per_token(), 128 * 1024);
    assert_eq!(m.gqa_group(), 4);
    // OPT-6.7B: 2*h*p = 16 KiB per token per layer.
    let o = ModelSpec::preset("opt-6.7b").unwrap();
    assert_eq!(o.kv_bytes_per_token_layer(), 2 * 4096 * 2);
}

#[test]
fn falcon_is_multi_query_and_gemma_has_wide_heads() {
    let f = ModelSpec::preset("falcon-7b").unwrap();
    assert_eq!((f.num_kv_heads, f.head_dim, f.ffn_dim), (1, 64, 4 * 4544));
    let g = ModelSpec::preset("gemma-2-9b").unwrap();
    assert_eq!((g.head_dim, g.q_dim(), g.dtype), (256, 4096, DType::Bf16));
    assert!(g.tied_embeddings);
}

#[test]
fn unknown_preset_lists_known_names() {
    let e = ModelSpec::resolve("opt-7b").unwrap_err().to_string();
    assert!(
        e.contains("unknown model 'opt-7b'") && e.contains("opt-6.7b"),
        "{e}"
    );
}

#[test]
fn unsupported_architecture_and_missing_field() {
    let e = ModelSpec::from_hf_config_str(r#"{"model_type":"bert"}"#, "x", "x.json")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("unsupported model_type 'bert'") && e.contains("llama"),
        "{e}"
    );
    let e = ModelSpec::from_hf_config_str(
        r#"{"model_type":"llama","hidden_size":4096,"num_attention_heads":32,"num_hidden_layers":32,"vocab_size":32000,"max_position_embeddings":4096}"#,
        "x",
        "x.json",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("missing field `intermediate_size`"), "{e}");
    let e = ModelSpec::from_hf_config_str("{not json", "x", "x.json")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("x.json:"), "{e}");
    let e = ModelSpec::from_hf_config_str(
        r#"{"model_type":"llama","hidden_size":-4,"num_attention_heads":32}"#,
        "x",
        "x.json",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("x.json: hidden_size: must be a whole number from 0 to 4294967295")
            && e.ends_with("(got -4)"),
        "{e}"
    );
}

#[test]
fn zero_sizes_are_rejected() {
    let e = ModelSpec::from_hf_config_str(
        r#"{"model_type":"opt","hidden_size":0,"num_attention_heads":1,"num_hidden_layers":1,"ffn_dim":4,"vocab_size":4,"max_position_embeddings":8}"#,
        "x",
        "x.json",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("hidden_size") && e.contains("at least 1"), "{e}");
}

const LLAMA_TINY: &str = r#""model_type":"llama","num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"intermediate_size":256,"vocab_size":1000,"max_position_embeddings":512"#;

#[test]
fn hidden_not_divisible_by_heads_needs_an_explicit_head_dim() {
    // 100 / 3: Hugging Face would reject this config; so does kvplan, naming the fix.
    for model_type in ["llama", "mistral", "qwen2"] {
        let text = format!(
            r#"{{"model_type":"{model_type}","hidden_size":100,"num_attention_heads":3,"num_hidden_layers":2,"intermediate_size":256,"vocab_size":1000,"max_position_embeddings":512}}"#
        );
        let e = ModelSpec::from_hf_config_str(&text, "x", "x.json")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("x.json: hidden_size")
                && e.contains("multiple of num_attention_heads (3)")
                && e.contains("head_dim")
                && e.contains("got 100"),
            "{model_type}: {e}"
        );
    }
    let e = ModelSpec::from_hf_config_str(
        r#"{"model_type":"opt","hidden_size":100,"num_attention_heads":3,"num_hidden_layers":2,"ffn_dim":400,"vocab_size":1000,"max_position_embeddings":512}"#,
        "x",
        "x.json",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("hidden_size") && e.contains("multiple"), "{e}");
    let e = ModelSpec::from_hf_config_str(
        r#"{"model_type":"falcon","hidden_size":100,"num_attention_heads":3,"num_hidden_layers":2,"vocab_size":1000}"#,
        "x",
        "x.json",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("hidden_size") && e.contains("multiple"), "{e}");
    // Divisible: head_dim = hidden / heads, q_dim = hidden.
    let m = ModelSpec::from_hf_config_str(
        &format!(r#"{{{LLAMA_TINY},"hidden_size":128}}"#),
        "x",
        "x.json",
    )
    .unwrap();
    assert_eq!((m.head_dim, m.q_dim(), m.kv_dim()), (32, 128, 64));
}

#[test]
fn explicit_head_dim_wins_and_q_dim_may_differ_from_hidden() {
    // hidden 100 is not 4 heads x 32, but head_dim says so: Q is 128 wide, K and V 64 each.
    let m = ModelSpec::from_hf_config_str(
        &format!(r#"{{{LLAMA_TINY},"hidden_size":100,"head_dim":32}}"#),
        "x",
        "x.json",
    )
    .unwrap();
    assert_eq!(
        (m.hidden, m.head_dim, m.q_dim(), m.kv_dim()),
        (100, 32, 128, 64)
    );
    // Parameters: W_Q (h x q), W_O (q x h), W_K and W_V (h x kv each) use the right widths.
    let (kv_proj, q_o, _) = m.layer_param_parts();
    assert_eq!(kv_proj, 2 * 100 * 64);
    assert_eq!(q_o, 100 * 128 + 128 * 100 + 100);
    // The KV cache follows kv_dim, the recompute activations follow hidden.
    assert_eq!(m.kv_bytes_per_token_layer(), 2 * 64 * 2);
    assert_eq!(m.act_bytes_per_token_layer(), 100 * 2);
    // Falcon reads head_dim too.
    let f = ModelSpec::from_hf_config_str(
        r#"{"model_type":"falcon","hidden_size":100,"num_attention_heads":4,"head_dim":32,"num_hidden_layers":2,"vocab_size":1000}"#,
        "x",
        "x.json",
    )
    .unwrap();
    assert_eq!((f.head_dim, f.q_dim()), (32, 128));
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("kvplan-model-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_model_directory_reads_its_config_json() {
    let d = temp_dir("dir");
    let model = d.join("tiny-llama");
    std::fs::create_dir_all(&model).unwrap();
    std::fs::write(
        model.join("config.json"),
        format!(r#"{{{LLAMA_TINY},"hidden_size":128}}"#),
    )
    .unwrap();
    let from_dir = ModelSpec::resolve(&model.display().to_string()).unwrap();
    let from_file = ModelSpec::resolve(&model.join("config.json").display().to_string()).unwrap();
    assert_eq!(from_dir.name, model.display().to_string());
    assert_eq!(
        ModelSpec {
            name: from_file.name.clone(),
            ..from_dir
        },
        from_file
    );
    // With a trailing slash too.
    assert!(ModelSpec::resolve(&format!("{}/", model.display())).is_ok());
    // A directory without config.json: the error names the path it looked for.
    let empty = d.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let e = ModelSpec::resolve(&empty.display().to_string())
        .unwrap_err()
        .to_string();
    let want = empty.join("config.json").display().to_string();
    assert!(
        e.contains(&want) && e.contains("directory without a config.json"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&d);
}
