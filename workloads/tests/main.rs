//! Integration tests of kvplan-workloads: one binary, a module per feature.

#[path = "../../tests/support/props.rs"]
mod props;

mod compat;
mod conversation;
mod determinism;
mod diurnal;
mod errors;
mod prefix;
mod shared_prefix;
mod stats;
mod trace;

use std::path::PathBuf;

use kvplan_workloads::{WorkloadConfig, WorkloadSpec};

/// The small trace fixture shipped with the crate.
pub fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tiny.csv")
}

/// `data/traces/NAME` of the repository.
pub fn shared_trace(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../data/traces")
        .join(name)
}

/// Writes `contents` to a fresh file under Cargo's per-target temporary directory.
pub fn temp_file(name: &str, contents: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kvplan-workloads-tests");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

/// A `[workload]` table (with its subtables) from TOML text.
pub fn workload(toml_text: &str) -> WorkloadConfig {
    toml::from_str(toml_text).unwrap_or_else(|e| panic!("{toml_text}: {e}"))
}

/// The message of the error `validate` gives for the `[workload]` table in `toml_text`.
pub fn validate_err(toml_text: &str) -> String {
    match workload(toml_text).validate() {
        Ok(spec) => panic!("{toml_text}: expected an error, got {spec:?}"),
        Err(e) => e.to_string(),
    }
}

/// A synthetic spec from spec strings.
pub fn synthetic(
    arrivals: &str,
    qps: Option<f64>,
    prompt: &str,
    output: &str,
    n: u64,
) -> WorkloadSpec {
    WorkloadConfig {
        arrivals: Some(arrivals.into()),
        qps,
        prompt_lengths: Some(prompt.into()),
        output_lengths: Some(output.into()),
        requests: Some(n),
        ..Default::default()
    }
    .validate()
    .unwrap_or_else(|e| panic!("{arrivals} {prompt} {output}: {e}"))
}
