//! `calibrate --from-runs` recovers what a profile gets wrong about serving: starting from an
//! H100 profile whose decode attention reads the KV cache at 60% of HBM bandwidth and whose
//! frontend takes 1 ms, a fit to two real stages (vLLM 0.15.1, Llama-2-7B, 5 and 20 req/s)
//! brings the errors of TPOT, E2E and TTFT down and the bandwidth back above 90%.

use std::path::PathBuf;

use kvplan_calibrate::runs::fit_stages_with;
use kvplan_serve::runs::StageRun;
use kvplan_vocab::HardwareProfile;

#[test]
fn a_fit_to_real_runs_recovers_the_decode_bandwidth_and_the_frontend() {
    let table = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../data/validation/real_vllm/vllm_h100_llama2-7b_mixtral-8x7b.csv");
    let stages: Vec<StageRun> = StageRun::read(&table)
        .unwrap()
        .into_iter()
        .filter(|s| {
            s.model_hf.contains("Llama-2-7b")
                && ((s.name.contains("codegen") && s.stage == 0)
                    || (s.name.contains("general") && s.stage == 1))
        })
        .collect();
    assert_eq!(stages.len(), 2);
    let dir = std::env::temp_dir().join(format!("kvplan-from-runs-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("off.toml");
    std::fs::write(
        &path,
        "base = \"h100-sxm\"\n[kernels.attention]\ndecode_efficiency = 0.6\n[serving]\nfrontend_us = 1000.0\n",
    )
    .unwrap();
    let base = HardwareProfile::resolve(path.to_str().unwrap()).unwrap();
    let fit = fit_stages_with(&stages, &base, path.to_str().unwrap(), 1200, 40).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let worst = |rows: &[kvplan_serve::runs::StageComparison]| {
        rows.iter()
            .flat_map(|r| [r.tpot_error.abs(), r.e2e_error.abs(), r.ttft_error.abs()])
            .fold(0.0f64, f64::max)
    };
    let (before, after) = (worst(&fit.before), worst(&fit.after));
    eprintln!(
        "worst |error| {before:.3} -> {after:.3}; decode {:.3}, frontend {:.0} us, host x{:.2}",
        fit.decode_efficiency, fit.frontend_us, fit.host_scale
    );
    assert!(
        before > 0.3,
        "the perturbed profile should be far off: {before}"
    );
    assert!(after < 0.15, "{after}");
    assert!(fit.decode_efficiency > 0.9, "{}", fit.decode_efficiency);
    assert!(fit.frontend_us > 3000.0, "{}", fit.frontend_us);
}
