//! Quantised weights and an fp8 KV cache: the bytes the model holds and the kernels read.

use kvplan_vocab::layers::{attention_op, forward_ops};
use kvplan_vocab::schedule::OpKind;
use kvplan_vocab::{CostModel, DType, HardwareProfile, KvCacheDtype, ModelSpec, Quantization};

fn llama70() -> ModelSpec {
    ModelSpec::preset("llama-3.1-70b").unwrap()
}

#[test]
fn linear_weights_are_everything_but_embeddings_head_and_norms() {
    let m = llama70();
    // Llama has no biases: what is not a linear weight is the embeddings, the LM head, the final
    // norm and two RMSNorms per layer.
    let norms = u64::from(m.num_layers) * 2 * u64::from(m.hidden);
    assert_eq!(m.params() - m.linear_params(), m.embedding_params() + norms);
}

#[test]
fn awq_and_fp8_weight_bytes_follow_the_parameter_split() {
    let m = llama70();
    let (p, lin) = (m.params(), m.linear_params());
    let dense = m.weight_bytes();
    assert_eq!(dense, 2 * p);
    let awq = m.clone().with_quantization(Some(Quantization::Awq));
    // 4 bits per weight, a 16-bit scale and a 4-bit zero per 128: 133/256 bytes per parameter.
    let expected = (lin * 133).div_ceil(256) + 2 * (p - lin);
    assert_eq!(awq.weight_bytes(), expected);
    let ratio = awq.weight_bytes() as f64 / dense as f64;
    let exact = (lin as f64 * 133.0 / 256.0 + 2.0 * (p - lin) as f64) / (2.0 * p as f64);
    assert!((ratio - exact).abs() < 1e-9, "{ratio} vs {exact}");
    assert!((0.27..0.29).contains(&ratio), "{ratio}");
    let gptq = m.clone().with_quantization(Some(Quantization::Gptq));
    assert_eq!(gptq.weight_bytes(), awq.weight_bytes());
    let fp8 = m.clone().with_quantization(Some(Quantization::Fp8));
    assert_eq!(fp8.weight_bytes(), lin + 2 * (p - lin));
    // 141 GB in bf16, about 72.7 GB in fp8 (the 4.2 GB of embeddings and head stay bf16).
    assert!((140e9..142e9).contains(&(dense as f64)), "{dense}");
    assert!((72e9..73.5e9).contains(&(fp8.weight_bytes() as f64)));
    // The per-layer split adds up to the layers' share.
    let lw = fp8.layer_weights();
    assert_eq!(
        lw.total() * u64::from(m.num_layers) + 2 * m.embedding_params(),
        fp8.weight_bytes()
    );
}

#[test]
fn fp8_kv_cache_halves_the_bytes_per_token() {
    let m = ModelSpec::preset("llama-3-8b").unwrap();
    let f = m.clone().with_kv_cache_dtype(KvCacheDtype::Fp8);
    assert_eq!(m.kv_bytes_per_element(), 2);
    assert_eq!(f.kv_bytes_per_element(), 1);
    assert_eq!(2 * f.kv_bytes_per_token(), m.kv_bytes_per_token());
    // Activations stay 16-bit.
    assert_eq!(f.act_bytes_per_token_layer(), m.act_bytes_per_token_layer());
    // Decode attention reads K and V at one byte, Q and O at two.
    let (a, b) = (
        attention_op(&m, 8, 1, 8192).mem_bytes(),
        attention_op(&f, 8, 1, 8192).mem_bytes(),
    );
    let d = f64::from(m.head_dim) * 8.0;
    let qo = 2.0 * f64::from(m.num_heads) * d * 2.0;
    assert_eq!(a - qo, 2.0 * (b - qo));
    let hw = HardwareProfile::preset("h100-sxm").unwrap();
    let c = CostModel::new(&hw);
    let (ta, tb) = (
        c.duration(&attention_op(&m, 64, 1, 8192)),
        c.duration(&attention_op(&f, 64, 1, 8192)),
    );
    assert!(tb < 0.6 * ta, "fp8 {tb} vs bf16 {ta}");
}

#[test]
fn quantised_gemms_read_fewer_bytes_and_fp8_runs_at_the_fp8_rate() {
    let m = ModelSpec::preset("llama-3-8b").unwrap();
    let fp8 = m.clone().with_quantization(Some(Quantization::Fp8));
    let awq = m.clone().with_quantization(Some(Quantization::Awq));
    let ffn_up = |m: &ModelSpec, rows: u32| {
        forward_ops(m, &[(rows, rows)], 1)
            .into_iter()
            .find(|(n, _)| *n == "ffn_up")
            .unwrap()
            .1
    };
    let h100 = CostModel::new(&HardwareProfile::preset("h100-sxm").unwrap());
    let a100 = CostModel::new(&HardwareProfile::preset("a100-80g-sxm").unwrap());
    // Decode (one row): weight bytes dominate; on the H100 profile's fitted GEMM model the
    // padded tiles' tensor work keeps 4-bit above its 0.26 share of the bytes (about 0.47).
    let t = |c: &CostModel, m: &ModelSpec, r| c.duration(&ffn_up(m, r));
    let (d, f, q) = (t(&h100, &m, 1), t(&h100, &fp8, 1), t(&h100, &awq, 1));
    assert!(q < f && f < 0.6 * d, "bf16 {d}, fp8 {f}, awq {q}");
    let (d, q) = (t(&a100, &m, 1), t(&a100, &awq, 1));
    assert!(q < 0.7 * d, "A100 bf16 {d}, awq {q}");
    // A large prefill is compute-bound: fp8 at H100's fp8 peak (twice bf16's); on A100 (no fp8
    // tensor cores: Marlin W8A16) at the 16-bit rate; 4-bit a little slower than 16-bit.
    let (d, f, q) = (
        t(&h100, &m, 8192),
        t(&h100, &fp8, 8192),
        t(&h100, &awq, 8192),
    );
    assert!(f < 0.6 * d, "H100 bf16 {d}, fp8 {f}");
    assert!(q > d, "awq {q} vs bf16 {d}");
    let (d, f) = (t(&a100, &m, 8192), t(&a100, &fp8, 8192));
    assert!(f > 0.9 * d && f <= d, "A100 bf16 {d}, fp8 {f}");
    // The LM head stays 16-bit; a dense op's JSON carries no weight format.
    let head = kvplan_vocab::layers::head_ops(&fp8, 1)[1].1;
    assert_eq!(head, kvplan_vocab::layers::head_ops(&m, 1)[1].1);
    let json = serde_json::to_string(&ffn_up(&m, 1)).unwrap();
    assert!(!json.contains("weights"), "{json}");
    let json = serde_json::to_string(&ffn_up(&fp8, 1)).unwrap();
    assert!(json.contains("\"weights\":\"fp8\""), "{json}");
    assert!(matches!(
        ffn_up(&m, 1),
        OpKind::Gemm {
            dtype: DType::Bf16,
            ..
        }
    ));
}

#[test]
fn presets_record_compute_capability_and_fp8_peaks() {
    for name in HardwareProfile::preset_names() {
        let hw = HardwareProfile::preset(&name).unwrap();
        let cc = hw
            .gpu
            .compute_capability
            .unwrap_or_else(|| panic!("{name}"));
        if let Some(f) = hw.gpu.peak_flops.fp8 {
            assert!(cc >= 8.9, "{name}: fp8 peak on cc {cc}");
            assert!(f >= 1.9 * hw.gpu.peak_flops.bf16, "{name}");
        }
    }
    let t4 = HardwareProfile::preset("t4").unwrap();
    assert!(
        Quantization::Fp8
            .check_gpu("t4", t4.gpu.compute_capability)
            .is_err()
    );
    assert!(
        Quantization::Awq
            .check_gpu("t4", t4.gpu.compute_capability)
            .is_ok()
    );
}
