//! `kvplan sweep` and `kvplan merge`: rows in point order at any thread count, error rows for
//! points that cannot run, shards merged into the unsharded file byte for byte, `--resume` after
//! a kill, and bad sweep files refused with one line before anything is written.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{TempDir, bin, ok, run_in};

/// 9 points: two models x two strategies x two batches (opt-30b does not fit gpu-only: two
/// error rows), and an explicit point with a column of its own.
const SWEEP: &str = r#"kind = "simulate"
[base]
hardware = "a100-40g-pcie4"
workload = { prompt = 64, gen = 3 }
[axes]
model = ["opt-1.3b", "opt-30b"]
strategy = ["kvpr", "gpu-only"]
"workload.batch" = [2, 4]
[[points]]
model = "opt-1.3b"
"offload.split" = 10
"#;

fn dir_with(name: &str, sweep: &str) -> TempDir {
    let d = TempDir::new(name);
    std::fs::write(d.path().join("s.toml"), sweep).unwrap();
    d
}

fn read(dir: &TempDir, f: &str) -> String {
    std::fs::read_to_string(dir.path().join(f)).unwrap()
}

fn with_threads(dir: &Path, threads: &str, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .current_dir(dir)
        .env("RAYON_NUM_THREADS", threads)
        .output()
        .unwrap()
}

/// Exit code 2, one line on stderr containing every `needles`, nothing on stdout.
fn refused(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    for n in needles {
        assert!(err.contains(n), "'{n}' not in: {err}");
    }
    assert!(out.stdout.is_empty());
}

#[test]
fn rows_are_in_point_order_at_any_thread_count_with_error_rows() {
    let d = dir_with("sweep-threads", SWEEP);
    let one = with_threads(d.path(), "1", &["sweep", "s.toml"]);
    let two = with_threads(d.path(), "2", &["sweep", "s.toml"]);
    let text = ok(&one);
    assert_eq!(text, ok(&two));
    let err = String::from_utf8_lossy(&one.stderr);
    assert!(err.contains("2 of 9 points could not run"), "{err}");
    let mut r = csv::Reader::from_reader(text.as_bytes());
    let h: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(
        &h[..5],
        [
            "point",
            "model",
            "strategy",
            "workload.batch",
            "offload.split"
        ]
    );
    assert_eq!(&h[h.len() - 2..], ["status", "reason"]);
    let rows: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 9);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row[0], i.to_string());
        let error = row[1] == *"opt-30b" && row[2] == *"gpu-only";
        assert_eq!(&row[h.len() - 2], if error { "error" } else { "ok" });
        if error {
            assert!(row[h.len() - 1].contains("does not fit"), "{row:?}");
            assert!(row.iter().skip(5).take(12).all(str::is_empty), "{row:?}");
        } else {
            // Plain numbers in every metric column.
            for cell in row.iter().skip(5).take(12) {
                assert!(
                    cell.parse::<f64>().is_ok_and(f64::is_finite) && !cell.contains(['e', 'E']),
                    "{row:?}"
                );
            }
        }
    }
    assert_eq!(
        (&rows[8][1], &rows[8][3], &rows[8][4]),
        ("opt-1.3b", "", "10")
    );
    // JSONL: the same rows.
    let jsonl = ok(&with_threads(
        d.path(),
        "2",
        &["sweep", "s.toml", "--format", "jsonl"],
    ));
    let lines: Vec<serde_json::Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 9);
    assert_eq!(lines[6]["status"], "error");
    assert_eq!(lines[6]["decode_latency_s"], serde_json::Value::Null);
    assert_eq!(lines[8]["offload.split"], 10);
}

#[test]
fn shards_merge_into_the_unsharded_file() {
    let d = dir_with("sweep-shards", SWEEP);
    for (format, ext) in [("csv", "csv"), ("jsonl", "jsonl")] {
        let full = format!("full.{ext}");
        ok(&run_in(
            d.path(),
            &["sweep", "s.toml", "--format", format, "--out", &full],
        ));
        let mut shards = Vec::new();
        for i in 0..3 {
            let f = format!("shard{i}.{ext}");
            let shard = format!("{i}/3");
            ok(&run_in(
                d.path(),
                &[
                    "sweep", "s.toml", "--format", format, "--shard", &shard, "--out", &f,
                ],
            ));
            shards.push(f);
        }
        let merged = format!("merged.{ext}");
        let mut args = vec!["merge", &merged];
        args.extend(shards.iter().map(String::as_str));
        ok(&run_in(d.path(), &args));
        assert_eq!(read(&d, &merged), read(&d, &full), "{format}");
        // --out form, inputs in any order, with the sweep file to check the tail.
        let mut args = vec!["merge", "--out", "again", "--sweep", "s.toml"];
        args.extend(shards.iter().rev().map(String::as_str));
        ok(&run_in(d.path(), &args));
        assert_eq!(read(&d, "again"), read(&d, &full), "{format}");
        // A missing shard, a shard given twice.
        let out = run_in(
            d.path(),
            &["merge", "--sweep", "s.toml", "m", &shards[0], &shards[1]],
        );
        refused(&out, &["points 2, 5, 8 missing"]);
        let out = run_in(
            d.path(),
            &["merge", "m", &shards[0], &shards[1], &shards[1]],
        );
        refused(&out, &["point 1 is in both"]);
    }
    // Outputs of different sweeps.
    let out = run_in(d.path(), &["merge", "m", "shard0.csv", "full.jsonl"]);
    refused(&out, &["merge outputs of one format"]);
}

#[test]
fn resume_after_a_kill_gives_the_same_file() {
    let d = dir_with("sweep-resume", SWEEP);
    for format in ["csv", "jsonl"] {
        ok(&run_in(
            d.path(),
            &["sweep", "s.toml", "--format", format, "--out", "full"],
        ));
        let full = read(&d, "full");
        // Killed inside a row, right after a row, inside the first line, before anything.
        let third = full.match_indices('\n').nth(2).unwrap().0 + 1;
        for cut in [third + 9, third, 5, 0] {
            std::fs::write(d.path().join("part"), &full[..cut]).unwrap();
            ok(&run_in(
                d.path(),
                &[
                    "sweep", "s.toml", "--format", format, "--out", "part", "--resume",
                ],
            ));
            assert_eq!(read(&d, "part"), full, "{format}, cut at {cut}");
        }
        // Uninterrupted, into a file that does not exist yet: the same bytes (its rows written
        // as they finish, then put in point order).
        std::fs::remove_file(d.path().join("part")).unwrap();
        let said = ok(&run_in(
            d.path(),
            &[
                "sweep", "s.toml", "--format", format, "--out", "part", "--resume",
            ],
        ));
        assert!(said.contains("0 kept from the previous run"), "{said}");
        assert_eq!(read(&d, "part"), full, "{format}, from nothing");
        // A shard resumes its own rows.
        ok(&run_in(
            d.path(),
            &[
                "sweep", "s.toml", "--format", format, "--shard", "1/2", "--out", "s1",
            ],
        ));
        let s1 = read(&d, "s1");
        std::fs::write(d.path().join("part"), &s1[..s1.len() - 3]).unwrap();
        ok(&run_in(
            d.path(),
            &[
                "sweep", "s.toml", "--format", format, "--shard", "1/2", "--out", "part",
                "--resume",
            ],
        ));
        assert_eq!(read(&d, "part"), s1);
    }
    // Another sweep's file is refused, untouched.
    std::fs::write(
        d.path().join("other.csv"),
        "point,x,status,reason\n0,1,ok,\n",
    )
    .unwrap();
    let out = run_in(
        d.path(),
        &["sweep", "s.toml", "--out", "other.csv", "--resume"],
    );
    refused(
        &out,
        &["other.csv", "not this sweep's", "delete it to start over"],
    );
    assert_eq!(read(&d, "other.csv"), "point,x,status,reason\n0,1,ok,\n");
}

#[test]
fn bad_sweep_files_are_refused_with_one_line_and_nothing_written() {
    let d = TempDir::new("sweep-bad");
    let base = "kind = \"simulate\"\n[base]\nmodel = \"opt-1.3b\"\nhardware = \"a100-40g-pcie4\"\n";
    let million = format!(
        "{base}[axes]\n{}",
        [
            "workload.batch",
            "workload.prompt",
            "workload.gen",
            "offload.split",
            "runahead.devices",
            "headinfer.chunk"
        ]
        .map(|a| format!("\"{a}\" = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n"))
        .concat()
    );
    let cases: [(&str, String, &[&str]); 6] = [
        (
            "unknown field",
            format!("{base}[axes]\n\"workload.batchh\" = [1, 2]\n"),
            &[
                "axes.\"workload.batchh\"",
                "unknown field `batchh`",
                "expected one of `batch`",
            ],
        ),
        (
            "empty axis",
            format!("{base}[axes]\nstrategy = []\n"),
            &["axes.\"strategy\": is empty", "give at least one value"],
        ),
        (
            "not an array",
            format!("{base}[axes]\nstrategy = \"kvpr\"\n"),
            &["must be an array", "strategy\" = [\"kvpr\"]"],
        ),
        ("malformed TOML", format!("{base}[axes\n"), &["s.toml:5:"]),
        (
            "unknown base field",
            format!("{base}colour = 1\n[axes]\nstrategy = [\"kvpr\"]\n"),
            &["base: unknown field `colour`"],
        ),
        (
            "a million points",
            million,
            &["1000000 points, more than --max-points 100000", "--yes"],
        ),
    ];
    for (what, text, needles) in cases {
        std::fs::write(d.path().join("s.toml"), text).unwrap();
        let out = run_in(d.path(), &["sweep", "s.toml", "--out", "o.csv"]);
        refused(&out, needles);
        assert_eq!(d.files(), ["s.toml"], "{what}: something was written");
    }
    std::fs::write(d.path().join("s.toml"), SWEEP).unwrap();
    for shard in ["3/3", "1", "x/2", "0/0"] {
        let out = run_in(
            d.path(),
            &["sweep", "s.toml", "--shard", shard, "--out", "o.csv"],
        );
        refused(&out, &["--shard", "expected I/N with 0 <= I < N"]);
    }
    assert_eq!(d.files(), ["s.toml"]);
}

#[test]
fn the_readme_sweeps_run_and_name_their_axes() {
    let root = crate::common::root();
    let out = ok(&run_in(
        &root,
        &["sweep", "scenarios/sweep-kvpr-batch.toml"],
    ));
    assert_eq!(out.lines().count(), 25);
    assert!(out.starts_with("point,hardware,strategy,workload.batch,"));
    let out = ok(&run_in(
        &root,
        &[
            "sweep",
            "scenarios/sweep-serve-qps.toml",
            "--format",
            "jsonl",
        ],
    ));
    assert_eq!(out.lines().count(), 8);
    assert!(out.starts_with("{\"point\":0,\"workload.qps\":2,\"serve.preemption\":\"recompute\","));
}

#[test]
fn plot_draws_a_metric_against_an_axis_one_line_per_series() {
    let d = dir_with("sweep-plot", SWEEP);
    let out = run_in(
        d.path(),
        &[
            "sweep",
            "s.toml",
            "--out",
            "rows.csv",
            "--plot",
            "p.svg",
            "--plot-x",
            "workload.batch",
            "--plot-y",
            "decode_throughput_tok_s",
        ],
    );
    assert!(ok(&out).contains("plot written to p.svg"));
    let svg = read(&d, "p.svg");
    // Axis labels with units, a title, and one legend entry per (model, strategy) series that
    // has numbers (opt-30b gpu-only does not fit: its rows are errors and drop out).
    for text in [
        "workload.batch",
        "decode_throughput_tok_s (tokens/s)",
        "model=opt-1.3b, strategy=kvpr",
        "model=opt-1.3b, strategy=gpu-only",
        "model=opt-30b, strategy=kvpr",
    ] {
        assert!(svg.contains(text), "{text} not in the plot");
    }
    assert!(!svg.contains("model=opt-30b, strategy=gpu-only"));
    // A column the sweep does not have: one line, exit 2, neither rows nor plot written.
    let out = run_in(
        d.path(),
        &[
            "sweep", "s.toml", "--out", "r2.csv", "--plot", "q.svg", "--plot-y", "nope",
        ],
    );
    refused(&out, &["--plot-y", "nope", "decode_latency_s"]);
    assert!(!d.path().join("r2.csv").exists() && !d.path().join("q.svg").exists());
}

#[cfg(unix)]
#[test]
fn a_device_gets_the_rows_and_no_fingerprint_beside_it() {
    let d = dir_with("sweep-device", SWEEP);
    let sidecar = Path::new("/dev/null.fingerprint");
    let before = std::fs::metadata(sidecar).and_then(|m| m.modified()).ok();
    for resume in [false, true] {
        let mut args = vec!["sweep", "s.toml", "--out", "/dev/null"];
        if resume {
            args.push("--resume");
        }
        let said = ok(&run_in(d.path(), &args));
        assert!(
            said.starts_with("/dev/null: 9 points run (7 ok, 2 error)"),
            "{said}"
        );
        let after = std::fs::metadata(sidecar).and_then(|m| m.modified()).ok();
        assert_eq!(before, after, "a fingerprint was written beside /dev/null");
    }
}
