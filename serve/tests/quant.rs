//! `[serve]` quantization and kv_cache_dtype: the block budget, what fits, step times, refusals.

use kvplan_serve::scenario::RawServeScenario;
use kvplan_serve::{Config, Error, IterationShape, IterationTimer, simulate};
use kvplan_vocab::{CostModel, HardwareProfile, KvCacheDtype, ModelSpec, Quantization};
use kvplan_workloads::Request;

fn kv_fp8() -> Config {
    Config {
        kv_cache_dtype: KvCacheDtype::Fp8,
        ..Config::default()
    }
}

/// An fp8 cache holds twice the blocks of a 16-bit one in the same memory: a block is half the
/// bytes, so the count is `floor(budget / (block_bytes / 2))`, `2n` or `2n + 1` for a 16-bit
/// count `n` (the activation working set is the same: it holds no KV).
#[test]
fn fp8_kv_cache_holds_twice_the_blocks() {
    let m = ModelSpec::preset("llama-3-8b").unwrap();
    let hw = HardwareProfile::preset("h100-sxm").unwrap();
    let a = Config::default().validate(&m, &hw).unwrap();
    let f = kv_fp8().validate(&m, &hw).unwrap();
    assert_eq!(f.block_bytes * 2, a.block_bytes);
    assert_eq!(f.weights_bytes, a.weights_bytes);
    let budget =
        hw.gpu.usable_bytes() as f64 * 0.9 - f.weights_bytes as f64 - f.activation_bytes as f64;
    assert_eq!(f.gpu_blocks, (budget / f.block_bytes as f64).floor() as u32);
    assert!(
        f.gpu_blocks == 2 * a.gpu_blocks || f.gpu_blocks == 2 * a.gpu_blocks + 1,
        "{} vs {}",
        f.gpu_blocks,
        a.gpu_blocks
    );
}

fn requests(n: u64, prompt: u32, output: u32) -> Vec<Request> {
    (0..n)
        .map(|i| Request::new(i, i as f64 * 0.05, prompt, output))
        .collect()
}

/// Llama-3.1-70B on one H100 SXM: 141 GB of bf16 weights cannot fit 80 GB; in fp8 (about 72.7 GB:
/// the linear weights at a byte, embeddings and LM head bf16) it fits with a small KV cache and
/// serves.
#[test]
fn llama_70b_fits_one_h100_in_fp8_only() {
    let m = ModelSpec::preset("llama-3.1-70b").unwrap();
    let hw = HardwareProfile::preset("h100-sxm").unwrap();
    let short = |c: Config| Config {
        max_model_len: Some(4096),
        ..c
    };
    match short(Config::default()).validate(&m, &hw) {
        Err(Error::NoKvMemory { weights_bytes, .. }) => assert_eq!(weights_bytes, 2 * m.params()),
        other => panic!("bf16 70B fits one H100: {other:?}"),
    }
    let fp8 = short(Config {
        quantization: Some(Quantization::Fp8),
        ..Config::default()
    });
    let r = fp8.validate(&m, &hw).unwrap();
    let lin = m.linear_params();
    assert_eq!(r.weights_bytes, lin + 2 * (m.params() - lin));
    assert!(r.gpu_blocks > 256, "{}", r.gpu_blocks);
    let out = simulate(&m, &hw, &fp8, &requests(8, 512, 16)).unwrap();
    assert_eq!(out.summary.finished, 8);
    // AWQ leaves room for many more blocks.
    let awq = short(Config {
        quantization: Some(Quantization::Awq),
        ..Config::default()
    });
    assert!(awq.validate(&m, &hw).unwrap().gpu_blocks > 5 * r.gpu_blocks);
}

/// A decode step over long contexts reads the KV cache: an fp8 cache reads half the bytes and
/// the step is faster; swapping a block moves half the bytes.
#[test]
fn decode_step_is_faster_with_an_fp8_cache_at_long_context() {
    let m = ModelSpec::preset("llama-3-8b").unwrap();
    let f = m.clone().with_kv_cache_dtype(KvCacheDtype::Fp8);
    let hw = HardwareProfile::preset("h100-sxm").unwrap();
    let cost = CostModel::new(&hw);
    let mut it = IterationShape::default();
    for _ in 0..64 {
        it.seqs.push((1, 16_000));
    }
    it.logits = 64;
    let mut ta = IterationTimer::new(&m, &cost, 16, 64, true);
    let mut tf = IterationTimer::new(&f, &cost, 16, 64, true);
    let (a, b) = (ta.time(&it).total_s, tf.time(&it).total_s);
    assert!(b < 0.75 * a, "fp8 {b} vs auto {a}");
    let (oa, _) = ta.kv_block_s();
    let (of, _) = tf.kv_block_s();
    assert!(of < oa, "swap-out {of} vs {oa}");
    // Short contexts barely change.
    let mut short = IterationShape::default();
    short.seqs.push((1, 64));
    short.logits = 1;
    let (a, b) = (ta.time(&short).total_s, tf.time(&short).total_s);
    assert!(b <= a && b > 0.9 * a, "{b} vs {a}");
}

#[test]
fn a_quantisation_the_gpu_cannot_run_names_the_field() {
    let m = ModelSpec::preset("llama-2-7b").unwrap();
    let t4 = HardwareProfile::preset("t4").unwrap();
    let c = Config {
        quantization: Some(Quantization::Fp8),
        ..Config::default()
    };
    let e = c.validate(&m, &t4).unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidConfig {
                field: "quantization",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().starts_with("quantization: "), "{e}");
    assert!(e.to_string().contains(">= 8.0"), "{e}");
    // AWQ needs 7.5: Turing runs it.
    let awq = Config {
        quantization: Some(Quantization::Awq),
        max_model_len: Some(2048),
        ..Config::default()
    };
    assert!(awq.validate(&m, &t4).is_ok());
}

#[test]
fn unknown_kv_cache_dtype_and_quantization_name_the_field() {
    let e = toml::from_str::<RawServeScenario>("[serve]\nkv_cache_dtype = \"fp9\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("kv_cache_dtype: must be one of auto, fp8"),
        "{e}"
    );
    let e = toml::from_str::<RawServeScenario>("[serve]\nquantization = \"int3\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("quantization: must be one of fp8, awq, gptq"),
        "{e}"
    );
    let ok = toml::from_str::<RawServeScenario>(
        "[serve]\nkv_cache_dtype = \"fp8_e4m3\"\nquantization = \"gptq\"\n",
    )
    .unwrap();
    let c = ok.serve.to_config();
    assert_eq!(
        (c.kv_cache_dtype, c.quantization),
        (KvCacheDtype::Fp8, Some(Quantization::Gptq))
    );
}

/// `--dtype` as vLLM v0.15.1 resolves it (`vllm/config/model.py` `_resolve_auto_dtype`,
/// `vllm/platforms/cuda.py` `supported_dtypes` and `check_if_supports_dtype`): auto keeps a
/// bfloat16 model's dtype from compute capability 8.0, falls back to float16 below it, sends a
/// float32 model to the GPU's first dtype and Gemma 2 (kept off float16) to float32 on Turing;
/// an explicit bfloat16 below 8.0 and float16 for Gemma 2 are refused, naming the field.
#[test]
fn dtype_follows_vllm_on_each_gpu() {
    use kvplan_serve::config::ServeDtype;
    use kvplan_vocab::DType;
    let llama = ModelSpec::preset("llama-3.1-8b").unwrap();
    let gemma = ModelSpec::preset("gemma-2-9b").unwrap();
    let mut fp32 = llama.clone();
    fp32.dtype = DType::Fp32;
    let a100 = HardwareProfile::preset("a100-80g-sxm").unwrap();
    let t4 = HardwareProfile::preset("t4").unwrap();
    let served = |d: ServeDtype, m: &ModelSpec, hw: &HardwareProfile| d.served(m, hw);
    assert_eq!(llama.dtype, DType::Bf16);
    assert_eq!(served(ServeDtype::Auto, &llama, &a100), Ok(DType::Bf16));
    assert_eq!(served(ServeDtype::Auto, &llama, &t4), Ok(DType::Fp16));
    assert_eq!(served(ServeDtype::Auto, &fp32, &a100), Ok(DType::Bf16));
    assert_eq!(served(ServeDtype::Auto, &fp32, &t4), Ok(DType::Fp16));
    assert_eq!(served(ServeDtype::Auto, &gemma, &t4), Ok(DType::Fp32));
    assert_eq!(served(ServeDtype::Half, &llama, &a100), Ok(DType::Fp16));
    assert_eq!(served(ServeDtype::Float32, &llama, &t4), Ok(DType::Fp32));
    assert!(served(ServeDtype::Bfloat16, &llama, &t4).is_err());
    assert!(served(ServeDtype::Float16, &gemma, &a100).is_err());
    // Through the engine settings: the refusal names the field and the fix, and the model
    // served on the T4 is float16 (its decode step then runs at the fp16 tensor rate: faster
    // than float32).
    let c = Config {
        dtype: ServeDtype::Bfloat16,
        max_model_len: Some(2048),
        ..Config::default()
    };
    let small = ModelSpec::preset("llama-3.2-1b").unwrap();
    let e = c.validate(&small, &t4).unwrap_err();
    assert!(
        matches!(e, Error::InvalidConfig { field: "dtype", .. })
            && e.to_string().contains("`serve.dtype` half"),
        "{e}"
    );
    let step = |d: ServeDtype| {
        let c = Config {
            dtype: d,
            max_model_len: Some(2048),
            ..Config::default()
        };
        c.validate(&small, &t4).unwrap();
        let m = c.apply(&small, &t4);
        let cost = kvplan_vocab::CostModel::new(&t4);
        let mut t = kvplan_serve::IterationTimer::new(&m, &cost, 16, 2 * m.num_layers, true);
        let mut s = IterationShape::default();
        s.seqs.push((512, 512));
        s.logits = 1;
        (m.dtype, t.time(&s).total_s)
    };
    let (auto_dtype, auto_s) = step(ServeDtype::Auto);
    let (f32_dtype, f32_s) = step(ServeDtype::Float32);
    assert_eq!((auto_dtype, f32_dtype), (DType::Fp16, DType::Fp32));
    assert!(auto_s < f32_s, "{auto_s} vs {f32_s}");
}
