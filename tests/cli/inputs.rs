//! Input that is accepted: clamped or ignored settings (a `note:` on stderr, stdout as without
//! them), profile files that build on other files, model directories.

use std::process::Output;

use crate::common::{TempDir, ok, root, run, run_in};

/// Stdout of a successful run whose stderr is exactly `notes` (each prefixed `note: `).
fn with_notes(out: &Output, notes: &[&str]) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "stderr: {err}");
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), notes.len(), "stderr: {err}");
    for (line, want) in lines.iter().zip(notes) {
        assert!(
            line.starts_with("note: ") && line.contains(want),
            "missing '{want}' in: {line}"
        );
    }
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// `simulate` of OPT-1.3B on a T4, 4 tokens unless `extra` sets `--gen`.
fn simulate(extra: &[&str]) -> Output {
    let mut a = vec!["simulate", "--model", "opt-1.3b", "--hardware", "t4"];
    if !extra.contains(&"--gen") {
        a.extend(["--gen", "4"]);
    }
    a.extend_from_slice(extra);
    run(&a)
}

#[test]
fn split_longer_than_the_cache_is_clamped_with_a_note() {
    // Cached lengths 128, 129, 130 over the 3 decode steps: 100000 is clamped to each, which is
    // what --split 130 does too (with a note for the first two steps).
    let huge = with_notes(
        &simulate(&["--split", "100000"]),
        &[
            "--split 100000 (offload.split) is more than the cached length at every decode step (128..130 tokens): it is clamped to the cached length at each step",
        ],
    );
    let last = with_notes(
        &simulate(&["--split", "130"]),
        &[
            "--split 130 (offload.split) is more than the cached length at decode steps 1..2 (128..129 tokens)",
        ],
    );
    assert_eq!(huge, last);
    assert!(
        huge.contains("recompute 128 of 128 cached tokens"),
        "{huge}"
    );
    // Within the cache: no note.
    ok(&simulate(&["--split", "128"]));
    // No decode step at all.
    with_notes(
        &simulate(&["--split", "5", "--gen", "1"]),
        &["--split 5 (offload.split) has no effect with --gen 1"],
    );
    // `plan kvpr` resolves the same scenario.
    let out = run(&[
        "plan",
        "kvpr",
        "--model",
        "opt-1.3b",
        "--hardware",
        "t4",
        "--gen",
        "4",
        "--split",
        "100000",
    ]);
    with_notes(&out, &["clamped to the cached length at each step"]);
}

#[test]
fn settings_another_strategy_reads_are_ignored_with_a_note() {
    for strategy in ["full-transfer", "gpu-only"] {
        let plain = ok(&simulate(&["--strategy", strategy]));
        let split = with_notes(
            &simulate(&["--strategy", strategy, "--split", "50"]),
            &[&format!(
                "--split (offload.split) is ignored with --strategy {strategy}: only kvpr reads it"
            )],
        );
        assert_eq!(split, plain, "{strategy}");
    }
    let plain = ok(&simulate(&[]));
    let link = with_notes(
        &simulate(&["--link-gbps", "10", "--link-latency-us", "5"]),
        &[
            "--link-gbps (runahead.link_gbps) is ignored with --strategy kvpr: only runahead reads it",
            "--link-latency-us (runahead.link_latency_us) is ignored with --strategy kvpr",
        ],
    );
    assert_eq!(link, plain);
    let others = with_notes(
        &simulate(&["--devices", "2", "--chunk", "64", "--heads-per-group", "1"]),
        &[
            "--heads-per-group (headinfer.heads_per_group) is ignored",
            "--chunk (headinfer.chunk) is ignored",
            "--devices (runahead.devices) is ignored",
        ],
    );
    assert_eq!(others, plain);
    // From a scenario file too, named by its field.
    let dir = TempDir::new("note-scenario");
    std::fs::write(
        dir.path().join("s.toml"),
        "model = \"opt-1.3b\"\nhardware = \"t4\"\nstrategy = \"gpu-only\"\n[workload]\ngen = 4\n[offload]\nsplit = 7\n",
    )
    .unwrap();
    let out = run_in(dir.path(), &["simulate", "s.toml"]);
    with_notes(
        &out,
        &["(offload.split) is ignored with --strategy gpu-only"],
    );
    // The strategy that reads them: no note.
    ok(&run(&[
        "simulate",
        "--model",
        "llama-2-7b",
        "--hardware",
        "a100-80g-sxm",
        "--strategy",
        "runahead",
        "--devices",
        "2",
        "--link-gbps",
        "10",
        "--context",
        "4096",
    ]));
}

#[test]
fn profile_base_may_be_another_profile_file() {
    let dir = TempDir::new("base-file");
    std::fs::create_dir(dir.path().join("site")).unwrap();
    std::fs::write(
        dir.path().join("site/big-host.toml"),
        "base = \"a100-40g-pcie4\"\n[host]\nram_gib = 1024.0\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("mine.toml"),
        "base = \"site/big-host.toml\"\n[link]\nh2d_pinned_gbps = 20.0\n",
    )
    .unwrap();
    // Resolved relative to mine.toml's directory, whatever the working directory.
    let path = dir.path().join("mine.toml").display().to_string();
    let out = ok(&run(&["hardware", &path, "--format", "json"]));
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["name"], "mine");
    assert_eq!(v["host"]["ram_bytes"], 1024u64 << 30);
    assert_eq!(v["link"]["h2d_pinned"], 20e9);
    assert_eq!(v["link"]["d2h_pinned"], 26.1e9);
    ok(&run(&[
        "simulate",
        "--model",
        "opt-125m",
        "--hardware",
        &path,
        "--gen",
        "2",
    ]));
}

#[test]
fn model_directory_reads_its_config_json() {
    let dir = TempDir::new("model-dir-ok");
    let model = dir.path().join("opt-tiny");
    std::fs::create_dir(&model).unwrap();
    std::fs::copy(
        root().join("vocab/models/opt-125m.json"),
        model.join("config.json"),
    )
    .unwrap();
    let args = |m: &str| {
        run_in(
            dir.path(),
            &[
                "simulate",
                "--model",
                m,
                "--hardware",
                "t4",
                "--gen",
                "2",
                "--format",
                "json",
            ],
        )
    };
    let from_dir: serde_json::Value = serde_json::from_str(&ok(&args("opt-tiny"))).unwrap();
    let from_file: serde_json::Value =
        serde_json::from_str(&ok(&args("opt-tiny/config.json"))).unwrap();
    assert_eq!(from_dir["total_latency_s"], from_file["total_latency_s"]);
    assert!(from_dir["total_latency_s"].as_f64().unwrap() > 0.0);
}

/// `--compare` runs kvpr too, so a `--split` next to another `--strategy` is read, not ignored.
#[test]
fn compare_reads_the_split_so_no_ignored_note() {
    let alone = simulate(&["--strategy", "gpu-only", "--split", "64"]);
    with_notes(
        &alone,
        &["--split (offload.split) is ignored with --strategy gpu-only"],
    );
    let compared = simulate(&["--strategy", "gpu-only", "--split", "64", "--compare"]);
    let out = with_notes(&compared, &[]);
    let kvpr_at_64 = with_notes(&simulate(&["--split", "64", "--compare"]), &[]);
    assert_eq!(out, kvpr_at_64);
}
