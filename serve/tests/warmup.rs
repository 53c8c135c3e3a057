//! A freshly started server (`[serve] cold_start`): the fused-MoE kernels Triton compiles on
//! first use hold the steps that meet them (`kvplan_serve::warmup`).

use kvplan_serve::{Config, ServeReport, simulate};
use kvplan_vocab::{HardwareProfile, ModelSpec};
use kvplan_workloads::Request;

/// Requests 3 s apart, each finished long before the next arrives, so every prefill step holds
/// one prompt and nothing else: `prompts[i]` tokens.
fn spaced(prompts: &[u32]) -> Vec<Request> {
    (prompts.iter().enumerate())
        .map(|(i, &p)| Request::new(i as u64, 3.0 * i as f64, p, 4))
        .collect()
}

fn run(model: &str, cold: bool, eager: bool, reqs: &[Request]) -> ServeReport {
    let m = ModelSpec::preset(model).unwrap();
    let hw = HardwareProfile::preset("h100-sxm").unwrap();
    let config = Config {
        cold_start: cold,
        enforce_eager: eager,
        max_num_seqs: Some(128),
        max_num_batched_tokens: Some(2048),
        enable_prefix_caching: Some(false),
        ..Config::default()
    };
    simulate(&m, &hw, &config, reqs).unwrap()
}

fn ttfts(out: &ServeReport) -> Vec<f64> {
    out.requests.iter().map(|r| r.ttft_s).collect()
}

/// Qwen3-30B-A3B (128 experts, top-8) on one H100: a 600-token step runs eagerly (above the
/// 256-token capture size) and needs configuration 512's two GEMMs, which start-up never
/// compiled; a 601-token step the other class of `num_valid_tokens` and `EM` (`8M` and `8M +
/// 128 × 63` are divisible by 16 exactly when `M` is even). So 4 kernels, each holding its step
/// the profile's compile time, and only the first 600- and 601-token requests wait.
#[test]
fn the_first_steps_of_each_kernel_wait_for_its_compilation() {
    let prompts = [600, 600, 601, 600, 601, 601];
    let reqs = spaced(&prompts);
    let warm = run("qwen3-30b-a3b", false, false, &reqs);
    let cold = run("qwen3-30b-a3b", true, false, &reqs);
    assert!(warm.summary.first_use_compilation.is_none());
    let c = cold
        .summary
        .first_use_compilation
        .expect("a cold run says so");
    assert_eq!(c.kernels, 4);
    let compile = HardwareProfile::preset("h100-sxm")
        .unwrap()
        .serving
        .kernel_compile_us
        * 1e-6;
    assert!((c.stall_s - 4.0 * compile).abs() < 1e-9, "{c:?}");
    let (w, k) = (ttfts(&warm), ttfts(&cold));
    for (i, (w, k)) in w.iter().zip(&k).enumerate() {
        let waited = k - w;
        let expected = if i == 0 || i == 2 { 2.0 * compile } else { 0.0 };
        assert!(
            (waited - expected).abs() < 1e-6,
            "request {i}: waited {waited} s, expected {expected} s"
        );
    }
}

/// Steps within the CUDA-graph sizes replay graphs captured at start-up: nothing to compile,
/// and the run is the warm one to the bit. A dense model has no fused-MoE kernel at all.
#[test]
fn graph_steps_and_dense_models_compile_nothing() {
    let short = spaced(&[200, 201, 202, 203]);
    let warm = run("qwen3-30b-a3b", false, false, &short);
    let cold = run("qwen3-30b-a3b", true, false, &short);
    assert_eq!(cold.summary.first_use_compilation.unwrap().kernels, 0);
    assert_eq!(ttfts(&warm), ttfts(&cold));
    let long = spaced(&[600, 601, 1500]);
    let warm = run("llama-3-8b", false, false, &long);
    let cold = run("llama-3-8b", true, false, &long);
    let c = cold.summary.first_use_compilation.unwrap();
    assert_eq!((c.kernels, c.stall_s), (0, 0.0));
    assert_eq!(ttfts(&warm), ttfts(&cold));
}

/// Without CUDA graphs start-up runs only the profile's 2048 tokens and the sampler's 128:
/// a 200-token prefill (configuration 256) and the one-token decode steps meet new kernels.
#[test]
fn without_graphs_every_unseen_size_compiles() {
    let reqs = spaced(&[200]);
    let cold = run("qwen3-30b-a3b", true, true, &reqs);
    let c = cold.summary.first_use_compilation.unwrap();
    // 200 tokens: configuration 256, one class; 1 token: configuration 1, `num_valid_tokens`
    // 8, `EM` clamped to 1 x 8 x 64.
    assert_eq!(c.kernels, 4, "{c:?}");
    let warm = run("qwen3-30b-a3b", false, true, &reqs);
    assert!(cold.requests[0].e2e_s > warm.requests[0].e2e_s + 3.0 * 0.1);
}

/// A stage table's first stage met a freshly started server; the later ones the same server,
/// warm.
#[test]
fn a_stage_tables_first_stage_replays_cold() {
    use kvplan_serve::runs::StageRun;
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../data/validation/real_vllm/vllm_h100_llama2-7b_mixtral-8x7b.csv");
    let stages = StageRun::read(&path).unwrap();
    assert!(stages.iter().any(|s| s.stage == 1));
    for st in &stages {
        let raw = st.scenario(None, None).unwrap();
        assert_eq!(raw.serve.cold_start, Some(st.stage == 0), "{}", st.name);
    }
}
