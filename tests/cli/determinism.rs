//! Same inputs, byte-identical outputs.

use crate::common::{TempDir, ok, run_in};

#[test]
fn same_inputs_give_identical_json_and_traces() {
    let dir = TempDir::new("determinism");
    let args = |trace: &'static str| {
        vec![
            "simulate",
            "--model",
            "opt-1.3b",
            "--hardware",
            "a100-40g-pcie4",
            "--batch",
            "16",
            "--prompt",
            "256",
            "--gen",
            "6",
            "--compare",
            "--format",
            "json",
            "--trace",
            trace,
        ]
    };
    let a = ok(&run_in(dir.path(), &args("a.json")));
    let b = ok(&run_in(dir.path(), &args("b.json")));
    assert_eq!(a, b);
    let ta = std::fs::read(dir.path().join("a.json")).unwrap();
    let tb = std::fs::read(dir.path().join("b.json")).unwrap();
    assert!(ta.len() > 10_000);
    assert!(ta == tb, "traces differ");
    let ca = ok(&run_in(
        dir.path(),
        &[
            "plan",
            "kvpr",
            "--model",
            "opt-13b",
            "--hardware",
            "h100-pcie",
            "--format",
            "csv",
        ],
    ));
    let cb = ok(&run_in(
        dir.path(),
        &[
            "plan",
            "kvpr",
            "--model",
            "opt-13b",
            "--hardware",
            "h100-pcie",
            "--format",
            "csv",
        ],
    ));
    assert_eq!(ca, cb);
}
