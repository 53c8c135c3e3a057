//! No lost or mixed data (issue 17): an output that is an input is refused, an output another
//! kvplan is writing is refused naming it, rows of another sweep are refused by `--resume` and
//! `merge`, every output is checked before the run, an interrupted run keeps the old file and
//! leaves no temporary file, `regress check` fails on a metric that vanished, and sweep axes
//! are checked like flags.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::common::{TempDir, bin, ok, run_in};

/// Exit code 2, one line on stderr containing every `needles`.
fn refused(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    for n in needles {
        assert!(err.contains(n), "'{n}' not in: {err}");
    }
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap()
}

const SCENARIO: &str = "model = \"opt-1.3b\"\nhardware = \"a100-40g-pcie4\"\n";

const SWEEP: &str = "kind = \"simulate\"\n[base]\nmodel = \"opt-1.3b\"\nhardware = \"a100-40g-pcie4\"\nworkload = { prompt = 128, gen = 3 }\n[axes]\n\"workload.batch\" = [1, 2, 3, 4]\n";

const SERVE: [&str; 10] = [
    "serve",
    "--model",
    "llama-2-7b",
    "--hardware",
    "h100-sxm",
    "--arrivals",
    "all-at-once",
    "--lengths",
    "32",
    "--requests",
];

#[test]
fn an_output_that_is_an_input_is_refused_and_the_input_kept() {
    let d = TempDir::new("safety-input");
    let p = d.path();
    write(p, "my.toml", SCENARIO);
    write(p, "s.toml", SWEEP);
    write(
        p,
        "t.csv",
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,32,4\n",
    );
    write(p, "m.csv", "gpu,op,time_s\n");
    std::os::unix::fs::symlink("my.toml", p.join("link.toml")).unwrap();
    let before = d.files();
    let cases: [(&[&str], &str, [&str; 2]); 6] = [
        (
            &["simulate", "my.toml", "--trace", "my.toml"],
            "my.toml",
            ["--trace", "SCENARIO"],
        ),
        (
            &["simulate", "my.toml", "--trace", "./my.toml"],
            "my.toml",
            ["--trace", "SCENARIO"],
        ),
        (
            &["simulate", "my.toml", "--trace", "link.toml"],
            "my.toml",
            ["--trace", "SCENARIO"],
        ),
        (
            &["sweep", "s.toml", "--out", "s.toml"],
            "s.toml",
            ["--out", "SWEEP"],
        ),
        (
            &[
                "serve",
                "--model",
                "llama-2-7b",
                "--hardware",
                "h100-sxm",
                "--requests-trace",
                "t.csv",
                "--requests-csv",
                "t.csv",
            ],
            "t.csv",
            ["--requests-csv", "--requests-trace"],
        ),
        (
            &[
                "calibrate",
                "--from-table",
                "m.csv",
                "--base",
                "h100-sxm",
                "--out",
                "m.csv",
            ],
            "m.csv",
            ["--out", "--from-table"],
        ),
    ];
    for (args, input, flags) in cases {
        let text = read(p, input);
        let out = run_in(p, args);
        refused(&out, &flags);
        assert!(out.stdout.is_empty(), "{args:?}");
        assert_eq!(read(p, input), text, "{args:?}");
        assert_eq!(d.files(), before, "{args:?}");
    }
}

#[test]
fn a_second_writer_is_refused_naming_the_holder() {
    let d = TempDir::new("safety-lock");
    let p = d.path();
    write(p, "s.toml", SWEEP);
    write(p, "rows.csv", "old\n");
    // This process holds rows.csv as a running kvplan would.
    let held = kvplan_report::outputs::claim(&[], &[("--out", &p.join("rows.csv"))]).unwrap();
    let out = run_in(p, &["sweep", "s.toml", "--out", "rows.csv"]);
    let pid = std::process::id().to_string();
    refused(&out, &["--out", "rows.csv", "being written by", &pid]);
    assert_eq!(read(p, "rows.csv"), "old\n");
    drop(held);
    ok(&run_in(p, &["sweep", "s.toml", "--out", "rows.csv"]));
    assert!(read(p, "rows.csv").starts_with("point,workload.batch,"));
    // No lock file is left behind.
    assert_eq!(d.files(), ["rows.csv", "rows.csv.fingerprint", "s.toml"]);
}

#[test]
fn resume_and_merge_refuse_the_rows_of_another_sweep() {
    let d = TempDir::new("safety-fingerprint");
    let p = d.path();
    write(p, "s.toml", SWEEP);
    ok(&run_in(p, &["sweep", "s.toml", "--out", "full.csv"]));
    ok(&run_in(
        p,
        &["sweep", "s.toml", "--shard", "0/2", "--out", "a.csv"],
    ));
    // The same sweep resumes (a run cut after two rows).
    let full = read(p, "full.csv");
    let two = full.match_indices('\n').nth(2).unwrap().0 + 1;
    write(p, "part.csv", &full[..two]);
    std::fs::copy(
        p.join("full.csv.fingerprint"),
        p.join("part.csv.fingerprint"),
    )
    .unwrap();
    ok(&run_in(
        p,
        &["sweep", "s.toml", "--out", "part.csv", "--resume"],
    ));
    assert_eq!(read(p, "part.csv"), full);
    // The base changed (prompt 128 -> 1024): the same columns, another sweep.
    write(p, "s.toml", &SWEEP.replace("prompt = 128", "prompt = 1024"));
    write(p, "part.csv", &full[..two]);
    let out = run_in(p, &["sweep", "s.toml", "--out", "part.csv", "--resume"]);
    refused(&out, &["--resume", "part.csv", "another sweep", "sweep "]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("kvplan 0.").count(), 2, "both values: {err}");
    assert_eq!(read(p, "part.csv"), &full[..two]);
    // Shards of the two sweeps are not merged, with or without the sweep file.
    ok(&run_in(
        p,
        &["sweep", "s.toml", "--shard", "1/2", "--out", "b.csv"],
    ));
    let out = run_in(
        p,
        &["merge", "--sweep", "s.toml", "m.csv", "a.csv", "b.csv"],
    );
    refused(&out, &["merge", "a.csv", "another sweep", "s.toml"]);
    let out = run_in(p, &["merge", "m.csv", "a.csv", "b.csv"]);
    refused(&out, &["merge", "b.csv", "a.csv"]);
    assert!(!p.join("m.csv").exists());
}

#[test]
fn every_output_is_checked_before_the_run() {
    let d = TempDir::new("safety-check");
    let p = d.path();
    std::fs::create_dir(p.join("somedir")).unwrap();
    let mut args = SERVE.to_vec();
    args.extend(["3", "--requests-csv", "ok.csv", "--plot", "somedir"]);
    refused(&run_in(p, &args), &["--plot", "somedir", "directory"]);
    assert_eq!(d.files(), ["somedir"]);
    let qps = crate::common::root().join("scenarios/sweep-serve-qps.toml");
    let qps = qps.to_str().unwrap();
    let out = run_in(p, &["sweep", qps, "--out", "x.csv", "--plot", "x.svg"]);
    refused(
        &out,
        &["--plot-x", "serve.preemption", "text", "workload.qps"],
    );
    let out = run_in(p, &["sweep", qps, "--out", "a.csv", "--plot", "somedir"]);
    refused(&out, &["--plot", "somedir", "directory"]);
    assert_eq!(d.files(), ["somedir"]);
}

#[test]
fn sweep_axes_are_checked_like_flags() {
    let d = TempDir::new("safety-axes");
    let p = d.path();
    let base = SWEEP.split("[axes]").next().unwrap();
    let serve = "kind = \"serve\"\n[base]\nmodel = \"llama-2-7b\"\nhardware = \"h100-sxm\"\n[base.workload]\narrivals = \"poisson\"\nqps = 1.0\nprompt_lengths = \"32\"\noutput_lengths = \"4\"\nrequests = 3\n";
    for (sweep, axis, value) in [
        (
            base,
            "hardware = [\"a100-40g-pcie4\", \"h100-nope\"]",
            "h100-nope",
        ),
        (base, "model = [\"opt-1.3b\", \"opt-nope\"]", "opt-nope"),
        (base, "\"workload.batch\" = [2, -4]", "-4"),
        (base, "\"workload.batch\" = [2, 0]", "(0)"),
        (base, "\"workload.prompt\" = [64, nan]", "nan"),
        (serve, "\"workload.qps\" = [1.0, nan]", "nan"),
        (serve, "\"workload.qps\" = [1.0, -2.0]", "-2"),
        (
            serve,
            "hardware = [\"h100-sxm\", \"h100-nope\"]",
            "h100-nope",
        ),
    ] {
        write(p, "s.toml", &format!("{sweep}[axes]\n{axis}\n"));
        let out = run_in(p, &["sweep", "s.toml", "--out", "rows.csv"]);
        let name = axis.split(" = ").next().unwrap().trim_matches('"');
        refused(&out, &[&format!("axes.\"{name}\""), value]);
        assert_eq!(d.files(), ["s.toml"], "{axis}");
    }
}

#[test]
fn regress_check_fails_on_a_vanished_metric_and_names_a_malformed_golden() {
    let d = TempDir::new("safety-regress");
    let p = d.path();
    let src = crate::common::root().join("regress");
    std::fs::create_dir(p.join("golden")).unwrap();
    for f in [
        "opt-1.3b-kvpr.toml",
        "golden/opt-1.3b-kvpr.timeline.csv",
        "golden/opt-1.3b-kvpr.decisions.json",
    ] {
        std::fs::copy(src.join(f), p.join(f)).unwrap();
    }
    let golden = std::fs::read_to_string(src.join("golden/opt-1.3b-kvpr.json")).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&golden).unwrap();
    json["old_metric_s"] = serde_json::json!(1.5);
    write(p, "golden/opt-1.3b-kvpr.json", &json.to_string());
    let out = run_in(p, &["regress", "check", "."]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("old_metric_s"), "{err}");
    json.as_object_mut().unwrap().remove("old_metric_s");
    json.as_object_mut().unwrap().remove("decode_latency_s");
    write(p, "golden/opt-1.3b-kvpr.json", &json.to_string());
    let out = run_in(p, &["regress", "check", "."]);
    refused(
        &out,
        &[
            "golden/opt-1.3b-kvpr.json",
            "malformed golden",
            "decode_latency_s",
        ],
    );
    write(p, "golden/opt-1.3b-kvpr.json", "{\"strategy\": ");
    let out = run_in(p, &["regress", "check", "."]);
    refused(&out, &["golden/opt-1.3b-kvpr.json", "malformed golden"]);
}

/// A sweep far too long to finish before it is interrupted: 10,000 serving points of 2,000
/// requests (it is killed as soon as its first rows are written).
fn long_sweep() -> String {
    let values = (1..=100)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "kind = \"serve\"\n[base]\nmodel = \"llama-2-7b\"\nhardware = \"h100-sxm\"\n[base.workload]\narrivals = \"poisson\"\nprompt_lengths = \"uniform:32:512\"\noutput_lengths = \"uniform:8:64\"\nrequests = 2000\n[axes]\n\"workload.seed\" = [{values}]\n\"workload.qps\" = [{values}]\n"
    )
}

#[test]
fn an_interrupted_run_keeps_the_old_file_and_leaves_no_temporary_file() {
    for signal in ["-INT", "-TERM"] {
        let d = TempDir::new(&format!("safety-signal{signal}"));
        let p = d.path();
        write(p, "s.toml", &long_sweep());
        write(p, "rows.csv", "the old rows\n");
        let mut child = Command::new(bin())
            .args(["sweep", "s.toml", "--out", "rows.csv"])
            .current_dir(p)
            .env("RAYON_NUM_THREADS", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Wait (a bounded number of polls, not a timing) until rows are being written to the
        // temporary file: past the header line.
        let mut writing = false;
        for _ in 0..6000 {
            let rows = d
                .files()
                .into_iter()
                .filter(|f| f.ends_with(".tmp"))
                .any(|f| read(p, &f).lines().count() >= 2);
            if rows {
                writing = true;
                break;
            }
            assert!(child.try_wait().unwrap().is_none(), "the sweep ended early");
            std::thread::sleep(Duration::from_millis(10));
        }
        let pid = child.id().to_string();
        let sent = Command::new("kill").args([signal, &pid]).status().unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(writing, "no rows were written");
        assert!(sent.success());
        let err = String::from_utf8_lossy(&out.stderr);
        let code = if signal == "-INT" { 130 } else { 143 };
        assert_eq!(out.status.code(), Some(code), "{err}");
        assert_eq!(read(p, "rows.csv"), "the old rows\n");
        assert_eq!(d.files(), ["rows.csv", "s.toml"], "{signal}");
    }
}
