//! Runs that end with nothing to report say so and exit non-zero, and no output prints a number
//! it did not measure (issue 30, items 3 to 5 and the output vocabulary of item 8).

use crate::common::{TempDir, ok, run, run_in};

/// Stdout and stderr as text.
fn texts(out: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const SERVE: [&str; 5] = ["serve", "--model", "llama-2-7b", "--hardware", "h100-sxm"];

fn serve(extra: &[&str]) -> std::process::Output {
    let mut a: Vec<&str> = SERVE.to_vec();
    a.extend_from_slice(extra);
    run(&a)
}

/// Every prompt longer than `max_model_len`: nothing finished. The table is printed with `-`
/// for every latency, the error names the reason and the flag, exit 2; the JSON has `null`s.
#[test]
fn serve_with_nothing_finished_fails_and_shows_no_latency() {
    let load = [
        "--arrivals",
        "poisson",
        "--qps",
        "5",
        "--requests",
        "20",
        "--lengths",
        "512",
        "--max-model-len",
        "100",
    ];
    let out = serve(&load);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no request finished: all 20 rejected (20 prompt-too-long)")
            && stderr.contains("--max-model-len (now 100)"),
        "{stderr}"
    );
    for metric in ["TTFT", "TPOT", "ITL", "E2E", "queueing"] {
        let line = (stdout.lines())
            .find(|l| l.starts_with(metric))
            .unwrap_or_else(|| panic!("no {metric} row in {stdout}"));
        assert!(line.trim_end().ends_with(" -"), "{line}");
        assert!(!line.contains(" us"), "{line}");
    }
    let mut json_args = load.to_vec();
    json_args.extend(["--format", "json"]);
    let out = serve(&json_args);
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the JSON is printed");
    for m in ["ttft_s", "tpot_s", "itl_s", "e2e_s", "queue_s"] {
        for q in ["mean", "p50", "p99"] {
            assert!(v[m][q].is_null(), "{m}.{q} = {}", v[m][q]);
        }
    }
    assert_eq!(v["finished"], 0);
}

/// One output token per request: TPOT and ITL have nothing to rank (vLLM's benchmark ranks TPOT
/// over requests with a second token only), while TTFT and E2E are measured; the run succeeds.
#[test]
fn one_token_outputs_have_no_tpot() {
    let out = serve(&[
        "--arrivals",
        "poisson",
        "--qps",
        "5",
        "--requests",
        "20",
        "--lengths",
        "256",
        "--output-lengths",
        "1",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&ok(&out)).unwrap();
    assert!(v["tpot_s"]["p50"].is_null(), "{}", v["tpot_s"]);
    assert!(v["itl_s"]["p50"].is_null(), "{}", v["itl_s"]);
    assert!(v["ttft_s"]["p50"].as_f64().unwrap() > 0.0);
}

/// The summary speaks the sweep's and capacity's words: `output_tok_s`, `total_tok_s`,
/// `gpu_busy_fraction`; the old names are gone.
#[test]
fn serve_json_uses_one_vocabulary() {
    let out = serve(&[
        "--arrivals",
        "poisson",
        "--qps",
        "5",
        "--requests",
        "20",
        "--lengths",
        "256",
        "--format",
        "json",
    ]);
    let text = ok(&out);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    for k in ["output_tok_s", "total_tok_s", "gpu_busy_fraction"] {
        assert!(v[k].as_f64().is_some(), "{k} missing: {text}");
        assert!(kvplan_run::columns(kvplan_run::RunKind::Serve).contains(&k));
    }
    for old in ["output_tokens_per_s", "total_tokens_per_s", "\"gpu_busy\""] {
        assert!(!text.contains(old), "{old} in {text}");
    }
}

/// A workload without shared prefixes that preempts: new requests find nothing (0% hit rate,
/// 0 tokens cached), and what preempted requests find of their own KV is counted apart.
#[test]
fn preempted_lookups_are_not_prefix_hits() {
    let args = [
        "--arrivals",
        "poisson",
        "--qps",
        "50",
        "--requests",
        "120",
        "--lengths",
        "512",
        "--output-lengths",
        "512",
        "--num-gpu-blocks-override",
        "300",
    ];
    let table = ok(&serve(&args));
    let line = (table.lines())
        .find(|l| l.starts_with("prefix cache"))
        .expect("a prefix cache row");
    assert!(
        line.contains("0.0% hit rate, 0 prompt tokens cached (new requests);")
            && line.contains("hit rate of preempted requests resuming"),
        "{line}"
    );
    let mut json_args = args.to_vec();
    json_args.extend(["--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&ok(&serve(&json_args))).unwrap();
    assert!(v["preemptions"].as_u64().unwrap() > 0);
    assert_eq!(v["prefix_cache_hit_rate"], 0.0);
    assert!(v["preempted_prefix_cache_hit_rate"].as_f64().unwrap() > 0.0);
}

const CAPACITY: [&str; 9] = [
    "serve-capacity",
    "--model",
    "llama-2-7b",
    "--lengths",
    "512",
    "--output-lengths",
    "64",
    "--requests",
    "400",
];

/// No configuration meets the objectives: the table still shows how far each missed, the error
/// says no configuration meets them and names the miss, exit 2.
#[test]
fn serve_capacity_with_no_answer_fails() {
    let mut a = CAPACITY.to_vec();
    a.extend(["--hardware", "h100-sxm", "--slo", "ttft_p99=1ms"]);
    let out = run(&a);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no configuration meets ttft_p99=1ms")
            && stderr.contains("h100-sxm TP 1 misses ttft_p99"),
        "{stderr}"
    );
    assert!(
        stdout.contains(
            "h100-sxm TP 1: no rate meets the SLO; its figures are at the lowest rate tried"
        ),
        "{stdout}"
    );
}

/// A configuration given twice is refused, not searched twice.
#[test]
fn serve_capacity_refuses_a_repeated_configuration() {
    let d = TempDir::new("capacity-repeat");
    let mut a = CAPACITY.to_vec();
    a.extend([
        "--hardware",
        "h100-sxm,a100-80g-sxm,h100-sxm",
        "--slo",
        "ttft_p99=2s",
    ]);
    crate::common::fails_with(&d, &a, &["--hardware", "h100-sxm is given twice"]);
    let mut a = CAPACITY.to_vec();
    a.extend([
        "--hardware",
        "h100-sxm",
        "--tensor-parallel-size",
        "1,2,1",
        "--slo",
        "ttft_p99=2s",
    ]);
    crate::common::fails_with(&d, &a, &["--tensor-parallel-size", "1 is given twice"]);
}

/// Where a percentile falls on a rejected request the table says `unserved`, never `inf`, and
/// goodput never exceeds the rate it was served at.
#[test]
fn serve_capacity_shows_unserved_percentiles_and_goodput_within_the_rate() {
    let a = [
        "serve-capacity",
        "--model",
        "llama-2-7b",
        "--hardware",
        "h100-sxm",
        "--lengths",
        "uniform:100:4300",
        "--output-lengths",
        "64",
        "--requests",
        "400",
        "--slo",
        "ttft_p50=2s",
    ];
    let table = ok(&run(&a));
    assert!(!table.split_whitespace().any(|w| w == "inf"), "{table}");
    assert!(table.contains("unserved"), "{table}");
    let mut json_args = a.to_vec();
    json_args.extend(["--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&ok(&run(&json_args))).unwrap();
    let row = &v["configurations"][0];
    let (rate, goodput) = (
        row["max_qps"].as_f64().unwrap(),
        row["goodput_rps"].as_f64().unwrap(),
    );
    assert!(goodput <= rate, "goodput {goodput} above the rate {rate}");
    assert!(
        goodput < rate,
        "some requests are rejected: {goodput} = {rate}"
    );
}

/// A sweep point where no request finished is a row with status `error` and the reason, not an
/// `ok` row of zero latencies.
#[test]
fn sweep_point_with_nothing_finished_is_an_error_row() {
    let d = TempDir::new("sweep-nothing-finished");
    std::fs::write(
        d.path().join("s.toml"),
        "kind = \"serve\"\n[base]\nmodel = \"llama-2-7b\"\nhardware = \"h100-sxm\"\n\
         [base.workload]\narrivals = \"poisson\"\nqps = 5.0\nrequests = 20\nprompt_lengths = \"512\"\n\
         [axes]\n\"serve.max_model_len\" = [100, 2048]\n",
    )
    .unwrap();
    let out = run_in(d.path(), &["sweep", "s.toml"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let header: Vec<&str> = text.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.splitn(header.len(), ',').collect())
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert_eq!(rows[0][col("status")], "error", "{text}");
    assert!(
        rows[0][col("reason")].starts_with("no request finished: all 20 rejected"),
        "{text}"
    );
    assert_eq!(rows[0][col("ttft_p99_s")], "", "{text}");
    assert_eq!(rows[1][col("status")], "ok", "{text}");
}

/// `plot` without series on a table whose rows repeat an x value (a sweep over two axes) is
/// refused, naming the column that tells the lines apart, instead of one zig-zag line.
#[test]
fn plot_refuses_repeated_x_without_series() {
    let d = TempDir::new("plot-repeated-x");
    std::fs::write(
        d.path().join("t.csv"),
        "point,hardware,qps,ttft_p99_s,status,reason\n0,h100-sxm,1,0.1,ok,\n1,h100-sxm,2,0.2,ok,\n\
         2,a100-80g-sxm,1,0.3,ok,\n3,a100-80g-sxm,2,0.4,ok,\n",
    )
    .unwrap();
    crate::common::fails_with(
        &d,
        &["plot", "t.csv", "--x", "qps", "--y", "ttft_p99_s"],
        &["qps = 1 appears in 2 rows", "(hardware)"],
    );
    let svg = ok(&run_in(
        d.path(),
        &[
            "plot",
            "t.csv",
            "--x",
            "qps",
            "--y",
            "ttft_p99_s",
            "--series",
            "hardware",
        ],
    ));
    assert!(svg.contains("<svg"));
}

/// The context capacity of a model whose weights fill the GPU: every strategy shows `none`
/// without memory figures, and the command fails saying nothing fits; one that fits exits 0.
#[test]
fn context_capacity_with_nothing_fitting_fails() {
    let out = run(&["capacity", "--model", "llama-3.1-405b", "--hardware", "t4"]);
    let (stdout, stderr) = texts(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no strategy fits even one token of llama-3.1-405b on t4"),
        "{stderr}"
    );
    let standard = (stdout.lines())
        .find(|l| l.starts_with("standard"))
        .expect("a row per strategy");
    assert!(
        standard.contains("none") && !standard.contains("GiB"),
        "{standard}"
    );
    ok(&run(&[
        "capacity",
        "--model",
        "llama-3.1-8b",
        "--hardware",
        "h100-sxm",
    ]));
}

/// `diff` of two outputs with no metric in common compared nothing: exit 2 saying so, not a
/// pass; one shared metric is a comparison.
#[test]
fn diff_of_unrelated_outputs_fails() {
    let d = TempDir::new("diff-unrelated");
    std::fs::write(d.path().join("a.json"), "{\"a\": 1}").unwrap();
    std::fs::write(d.path().join("b.json"), "{\"b\": 2}").unwrap();
    std::fs::write(d.path().join("c.json"), "{\"a\": 1, \"b\": 2}").unwrap();
    let out = run_in(d.path(), &["diff", "a.json", "b.json"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "a.json and b.json share no metric (1 only in the first, 1 only in the second)"
        ),
        "{err}"
    );
    ok(&run_in(d.path(), &["diff", "a.json", "c.json"]));
}

/// A measured run in which no request succeeded measured nothing: `--compare-to` refuses it
/// (it printed `+inf%` and `NaN%` errors), and a literal `nan` latency is refused by its line.
#[test]
fn a_measured_run_with_nothing_measured_is_refused() {
    let d = TempDir::new("measured-nothing");
    let head = "arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n";
    std::fs::write(
        d.path().join("failed.csv"),
        format!("{head}0.0,100,10,,\n0.1,100,10,,\n"),
    )
    .unwrap();
    std::fs::write(
        d.path().join("nan.csv"),
        format!("{head}0.0,100,10,0.05,0.5\n0.1,100,10,nan,0.5\n"),
    )
    .unwrap();
    let base = [
        "serve",
        "--model",
        "llama-2-7b",
        "--hardware",
        "h100-sxm",
        "--compare-to",
    ];
    let mut a = base.to_vec();
    a.push("failed.csv");
    crate::common::fails_with(
        &d,
        &a,
        &["failed.csv", "no request succeeded (all 2 failed"],
    );
    let mut a = base.to_vec();
    a.push("nan.csv");
    crate::common::fails_with(&d, &a, &["nan.csv:3", "ttft_s", "`nan` is not a number"]);
}
