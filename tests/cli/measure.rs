//! `exec`, `calibrate` and `validate` where there is no GPU, and their bad-input and failure
//! paths. The CPU-timing checks live in `tests/cpu_fidelity.rs`, a test binary of its own.

use serde_json::Value;

use crate::common::{TempDir, run_in};

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

/// Without a CUDA driver, `exec` and `calibrate` on the CUDA backend fail with the executor's
/// one line and write nothing. On a machine with a driver that line must not appear (the
/// driver is found; the run then succeeds or fails for another reason): the test asserts one or
/// the other, never nothing.
#[test]
fn cuda_backend_without_a_gpu_fails_with_one_line() {
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
    if has_cuda_driver() {
        assert!(
            !err.contains("no CUDA driver found"),
            "a driver is installed: {err}"
        );
        return;
    }
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

#[test]
fn calibrate_from_an_attention_table_prints_errors_and_the_preset_section() {
    // The header selects the attention fit; the model comes from the file name.
    let dir = TempDir::new("attention-table");
    let table = crate::common::root()
        .join("calibrate/data/measured_kernels/a100_Llama-2-7b-hf_attention.csv");
    let table = table.to_str().unwrap();
    let out = crate::common::ok(&run_in(
        dir.path(),
        &["calibrate", "--from-table", table, "--out", "a100.toml"],
    ));
    assert!(
        out.contains("llama-2-7b: 32 query / 32 KV heads of 128"),
        "{out}"
    );
    for row in [
        "decode batch 1-8, context 0-512",
        "prefill chunk 1025+, cached 2048+",
    ] {
        assert!(out.contains(row), "{row} missing:\n{out}");
    }
    // The written profile is the base with the fitted [kernels.attention]: a100-80g-sxm itself.
    let fitted = kvplan_vocab::HardwareProfile::from_file(&dir.path().join("a100.toml")).unwrap();
    let preset = kvplan_vocab::HardwareProfile::preset("a100-80g-sxm").unwrap();
    assert_eq!(fitted.kernels, preset.kernels);
    // --model belongs to attention tables; a base without [kernels] cannot take the section.
    let out = run_in(
        dir.path(),
        &[
            "calibrate",
            "--from-table",
            table,
            "--base",
            "a100-40g-pcie4",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--base") && err.contains("[kernels]"), "{err}");
    let gemm = dir.path().join("gemm.csv");
    std::fs::write(&gemm, "n_head,num_tokens\n1,2\n").unwrap();
    let out = run_in(
        dir.path(),
        &[
            "calibrate",
            "--from-table",
            gemm.to_str().unwrap(),
            "--base",
            "a100-80g-sxm",
            "--model",
            "llama-2-7b",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--model llama-2-7b") && err.contains("attention table"),
        "{err}"
    );
}

/// `scripts/gpu-check.sh` writes its report and tells plainly what it skipped: without a GPU the
/// first step fails with the executor's line and everything after it is skipped (exit 1); on a
/// GPU machine a zero budget skips every step (exit 0) instead of running minutes of checks here.
#[test]
fn gpu_check_reports_what_it_skipped() {
    let dir = TempDir::new("gpucheck");
    let bin_dir = crate::common::bin().parent().unwrap().to_path_buf();
    let gpu = has_cuda_driver();
    let mut cmd = std::process::Command::new("bash");
    cmd.arg(crate::common::root().join("scripts/gpu-check.sh"))
        .arg("--bin")
        .arg(&bin_dir)
        .arg("--out")
        .arg(dir.path());
    if gpu {
        cmd.args(["--budget", "0"]);
    }
    let out = cmd.output().unwrap();
    let report = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    let csv = std::fs::read_to_string(dir.path().join("validate.csv")).unwrap();
    assert_eq!(csv.trim(), "case,item,simulated_s,measured_s,error");
    assert!(report.starts_with("# kvplan GPU check"), "{report}");
    if gpu {
        assert!(out.status.success(), "{report}");
        assert!(
            report.contains("calibrate --backend cuda (budget of 0 s spent)"),
            "{report}"
        );
    } else {
        assert_eq!(out.status.code(), Some(1), "{report}");
        assert!(
            report.contains("**failed (exit 1)**: `error: no CUDA driver found"),
            "{report}"
        );
        for skipped in [
            "- calibrate --backend cuda (no CUDA GPU)",
            "- validation on the calibrated profile (no profile)",
        ] {
            assert!(report.contains(skipped), "{skipped} not in {report}");
        }
    }
    // Nothing but its outputs is left behind (no profile: nothing was calibrated).
    let mut files = dir.files();
    files.sort();
    assert_eq!(files, ["log.txt", "report.md", "validate.csv"]);
}
