//! Every CSV the tool writes holds plain numbers (bytes as integers, seconds and fractions as
//! decimals) with the unit in the column header; formatted values ("0.23 GiB", "12.5%",
//! "4.226 s") belong to the tables for people.

use crate::common::{TempDir, run_in};

/// Header suffixes that promise a number in every row.
const NUMERIC_SUFFIXES: [&str; 9] = [
    "_bytes",
    "_s",
    "_gbps",
    "_tflops",
    "_fraction",
    "_tokens",
    "_tok_s",
    "_token",
    "_error",
];

/// Headers without a unit suffix that are counts or dimensions.
const NUMERIC_NAMES: [&str; 22] = [
    "batch",
    "gpu_batches",
    "prompt",
    "gen",
    "context",
    "step",
    "seq_len",
    "device",
    "tokens",
    "heads_per_group",
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "head_dim",
    "ffn",
    "vocab",
    "params",
    "op",
    "seconds",
    "gbps",
    "flops",
];

/// Checks one CSV text; `what` names it in failures.
fn check_plain(what: &str, text: &str) {
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    assert!(!header.is_empty(), "{what}: no header");
    for h in &header {
        assert!(
            !h.is_empty()
                && h.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "{what}: header '{h}' is not a snake_case name"
        );
    }
    let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
    assert!(!rows.is_empty(), "{what}: no rows");
    for row in &rows {
        for (h, cell) in header.iter().zip(row.iter()) {
            let numeric = NUMERIC_NAMES.contains(&h.as_str())
                || NUMERIC_SUFFIXES.iter().any(|s| h.ends_with(s));
            let looks_numeric = cell
                .trim_start_matches('-')
                .starts_with(|c: char| c.is_ascii_digit() || c == '.');
            let lower = cell.to_ascii_lowercase();
            assert!(
                !["inf", "-inf", "nan"].contains(&lower.as_str()),
                "{what}: column {h} holds '{cell}'"
            );
            // A date (`price_date`: `2026-05-07`, `2026-05`) is a date, not a number.
            if h.ends_with("_date") {
                continue;
            }
            if numeric || looks_numeric {
                // Empty is allowed only where a value is undefined (an error against zero).
                if cell.is_empty() && h.ends_with("error") {
                    continue;
                }
                assert!(
                    cell.parse::<f64>().is_ok_and(f64::is_finite) && !cell.contains(['e', 'E']),
                    "{what}: column {h} holds '{cell}', not a plain number"
                );
            }
        }
    }
}

fn stdout_of(dir: &TempDir, args: &[&str], expect_code: i32) -> String {
    let out = run_in(dir.path(), args);
    assert_eq!(
        out.status.code(),
        Some(expect_code),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn every_csv_output_has_plain_numbers() {
    let dir = TempDir::new("csv-plain");
    let csv = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend(["--format", "csv"]);
        let text = stdout_of(&dir, &a, 0);
        check_plain(&args.join(" "), &text);
    };
    csv(&["models"]);
    csv(&["models", "opt-1.3b"]);
    csv(&["hardware"]);
    csv(&["hardware", "t4"]);
    let small = [
        "--model",
        "opt-1.3b",
        "--hardware",
        "a100-40g-pcie4",
        "--batch",
        "8",
        "--prompt",
        "64",
        "--gen",
        "3",
    ];
    csv(&[&["plan", "kvpr"][..], &small].concat());
    csv(&[&["simulate"][..], &small].concat());
    csv(&[&["simulate", "--compare"][..], &small].concat());
    csv(&[
        "plan",
        "headinfer",
        "--model",
        "llama-3-8b",
        "--hardware",
        "rtx-4090",
        "--context",
        "100000",
        "--gen",
        "2",
    ]);
    csv(&[
        "plan",
        "runahead",
        "--model",
        "llama-2-7b",
        "--hardware",
        "a100-80g-sxm",
        "--devices",
        "4",
        "--context",
        "16384",
    ]);
    csv(&[
        "capacity",
        "--model",
        "llama-3-8b",
        "--hardware",
        "rtx-4090",
    ]);
    // The timeline export.
    stdout_of(
        &dir,
        &[&["simulate"][..], &small, &["--trace", "t.csv"]].concat(),
        0,
    );
    check_plain(
        "--trace t.csv",
        &std::fs::read_to_string(dir.path().join("t.csv")).unwrap(),
    );
}

#[test]
fn measured_csv_outputs_have_plain_numbers() {
    let dir = TempDir::new("csv-measured");
    let cpu = [
        "--model",
        "opt-125m",
        "--hardware",
        "t4",
        "--backend",
        "cpu",
        "--batch",
        "2",
        "--prompt",
        "32",
        "--gen",
        "3",
        "--format",
        "csv",
    ];
    let exec = stdout_of(&dir, &[&["exec"][..], &cpu].concat(), 0);
    check_plain("exec", &exec);
    // An uncalibrated profile misses a CPU run by far: exit code 1, the comparison still printed.
    let validate = stdout_of(&dir, &[&["validate"][..], &cpu].concat(), 1);
    check_plain("validate", &validate);
    assert!(validate.contains("\nstep:2,"), "{validate}");
    let cal = stdout_of(
        &dir,
        &[
            "calibrate",
            "--backend",
            "cpu",
            "--quick",
            "--out",
            "cpu.toml",
            "--format",
            "csv",
        ],
        0,
    );
    check_plain("calibrate", &cal);
}
