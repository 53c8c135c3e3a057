//! `calibrate`, `exec` and `validate` on the CPU backend (CI has no GPU), and the CUDA backend's
//! behaviour where there is none.

use serde_json::Value;

use crate::common::{TempDir, ok, run_in};

/// Whether this machine has a CUDA driver (then the no-GPU checks do not apply).
fn has_cuda_driver() -> bool {
    [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/lib64/libcuda.so.1",
        "/usr/local/nvidia/lib64/libcuda.so.1",
    ]
    .iter()
    .any(|p| std::path::Path::new(p).exists())
}

#[test]
fn cuda_backend_without_a_gpu_fails_with_one_line() {
    if has_cuda_driver() {
        return;
    }
    let dir = TempDir::new("nocuda");
    let out = run_in(
        dir.path(),
        &[
            "exec",
            "--model",
            "opt-6.7b",
            "--hardware",
            "h100-sxm",
            "--backend",
            "cuda",
            "--strategy",
            "kvpr",
            "--batch",
            "32",
            "--prompt",
            "512",
            "--gen",
            "8",
            "--trace",
            "t.json",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no CUDA driver found"), "{err}");
    assert!(out.stdout.is_empty());
    assert!(dir.files().is_empty(), "no trace may be written");
    let out = run_in(
        dir.path(),
        &["calibrate", "--backend", "cuda", "--out", "gpu.toml"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no CUDA driver found"));
    assert!(dir.files().is_empty());
}

#[test]
fn unknown_backend_is_bad_input() {
    let dir = TempDir::new("badbackend");
    let out = run_in(
        dir.path(),
        &[
            "exec",
            "--model",
            "opt-125m",
            "--hardware",
            "t4",
            "--backend",
            "tpu",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--backend"));
}

/// The contract, end to end on the CPU: calibrate (quick) -> exec -> validate.
#[test]
fn calibrate_exec_validate_on_the_cpu() {
    let dir = TempDir::new("cpu-e2e");
    let out = run_in(
        dir.path(),
        &[
            "calibrate",
            "--backend",
            "cpu",
            "--quick",
            "--out",
            "cpu.toml",
        ],
    );
    let text = ok(&out);
    assert!(
        text.contains("calibrated") && text.contains("cpu.toml"),
        "{text}"
    );
    let profile = std::fs::read_to_string(dir.path().join("cpu.toml")).unwrap();
    for needle in [
        "[calibration]",
        "backend = \"cpu\"",
        "date = \"20",
        "h2d_pinned = [",
        "[[calibration.gemm]]",
    ] {
        assert!(
            profile.contains(needle),
            "{needle} missing from the profile:\n{profile}"
        );
    }
    // The calibrated profile is a valid --hardware file for every other command.
    let hw: Value = serde_json::from_str(&ok(&run_in(
        dir.path(),
        &["hardware", "cpu.toml", "--format", "json"],
    )))
    .unwrap();
    assert_eq!(hw["calibration"]["backend"], "cpu");
    ok(&run_in(
        dir.path(),
        &[
            "simulate",
            "--model",
            "opt-125m",
            "--hardware",
            "cpu.toml",
            "--gen",
            "3",
            "--batch",
            "4",
            "--prompt",
            "64",
        ],
    ));

    let exec: Value = serde_json::from_str(&ok(&run_in(
        dir.path(),
        &[
            "exec",
            "--model",
            "opt-125m",
            "--hardware",
            "cpu.toml",
            "--backend",
            "cpu",
            "--strategy",
            "kvpr",
            "--batch",
            "4",
            "--prompt",
            "128",
            "--gen",
            "4",
            "--format",
            "json",
            "--trace",
            "measured.json",
        ],
    )))
    .unwrap();
    for f in [
        "strategy",
        "decode_latency_s",
        "decode_throughput_tok_s",
        "gpu_busy_fraction",
        "h2d_bytes",
        "d2h_bytes",
        "peak_gpu_bytes",
        "peak_host_bytes",
    ] {
        assert!(exec.get(f).is_some(), "exec JSON lacks {f}");
    }
    assert_eq!(exec["source"], "measured");
    assert_eq!(exec["backend"], "cpu");
    assert!(exec["decode_latency_s"].as_f64().unwrap() > 0.0);
    let trace: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("measured.json")).unwrap()).unwrap();
    assert!(trace["traceEvents"].as_array().unwrap().len() > 100);

    let out = run_in(
        dir.path(),
        &[
            "validate",
            "--model",
            "opt-125m",
            "--hardware",
            "cpu.toml",
            "--backend",
            "cpu",
            "--strategy",
            "kvpr",
            "--batch",
            "4",
            "--prompt",
            "128",
            "--gen",
            "4",
            "--format",
            "json",
            "--max-error",
            "0.25",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let v: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{e}: {text} / {}", String::from_utf8_lossy(&out.stderr)));
    for f in [
        "simulated_s",
        "measured_s",
        "end_to_end_error",
        "per_kind",
        "per_category",
        "median_step_error",
    ] {
        assert!(v.get(f).is_some(), "validate JSON lacks {f}");
    }
    let err = v["end_to_end_error"].as_f64().unwrap();
    // CPU fidelity target (issue 3): within 25% after a quick calibration. What limits it: the
    // OS schedules the copy and compute threads on shared cores, caches are shared, and the
    // quick calibration measures few sizes and shapes.
    assert!(err <= 0.25, "end-to-end error {err}: {text}");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        v["per_kind"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "attention")
    );
}

#[test]
fn validate_fails_with_code_1_above_max_error_but_prints_the_report() {
    // An uncalibrated datasheet profile (an H100) cannot predict a CPU run: the error is huge.
    let dir = TempDir::new("validate-fail");
    let out = run_in(
        dir.path(),
        &[
            "validate",
            "--model",
            "opt-125m",
            "--hardware",
            "h100-sxm",
            "--backend",
            "cpu",
            "--batch",
            "2",
            "--prompt",
            "32",
            "--gen",
            "2",
            "--format",
            "json",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("exceeds --max-error 10.0%"), "{err}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["passed"], false);
}
