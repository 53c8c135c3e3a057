//! `kvplan serve`: outputs, files, determinism, scenario files, bad input.

use crate::common::{TempDir, fails_with, ok, run_in};

const TRACE: &str = "arrived_at,num_prefill_tokens,num_decode_tokens
0.0,300,20
0.05,120,40
0.1,800,10
0.4,64,64
0.45,2000,5
0.9,500,30
";

const MODEL: [&str; 4] = ["--model", "llama-2-7b", "--hardware", "a100-80g-sxm"];

fn dir_with_trace(name: &str) -> TempDir {
    let d = TempDir::new(name);
    std::fs::write(d.path().join("t.csv"), TRACE).unwrap();
    d
}

fn serve(d: &TempDir, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["serve"];
    args.extend(MODEL);
    args.extend(extra);
    run_in(d.path(), &args)
}

#[test]
fn table_json_and_csv_of_a_small_trace() {
    let d = dir_with_trace("serve-formats");
    let table = ok(&serve(&d, &["--requests-trace", "t.csv"]));
    for want in [
        "llama-2-7b on a100-80g-sxm",
        "requests",
        "6 (6 finished, 0 rejected)",
        "tok/s output",
        "req/s",
        "TTFT p50 / p90 / p99",
        "TPOT",
        "E2E",
        "preemptions",
        "prefix cache",
        "GPU busy",
        "makespan",
    ] {
        assert!(table.contains(want), "missing {want:?} in\n{table}");
    }
    let json: serde_json::Value = serde_json::from_str(&ok(&serve(
        &d,
        &["--requests-trace", "t.csv", "--format", "json"],
    )))
    .unwrap();
    assert_eq!(json["finished"], 6);
    assert!(json["ttft_s"]["p99"].as_f64().unwrap() > 0.0);
    assert!(json["output_tok_s"].as_f64().unwrap() > 0.0);
    let csv = ok(&serve(
        &d,
        &["--requests-trace", "t.csv", "--format", "csv"],
    ));
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), 7, "{csv}");
    assert!(lines[0].starts_with("id,arrival_s,prompt_tokens,output_tokens,status"));
    assert!(lines[1].starts_with("0,0,300,20,finished"), "{}", lines[1]);
}

const FILES: [(&str, &str); 4] = [
    ("--requests-csv", "requests.csv"),
    ("--timeseries-csv", "series.csv"),
    ("--summary-json", "summary.json"),
    ("--trace-json", "trace.json"),
];

fn run_with_files(d: &TempDir, sub: &str, workload: &[&str]) -> Vec<Vec<u8>> {
    std::fs::create_dir_all(d.path().join(sub)).unwrap();
    let paths: Vec<String> = FILES.iter().map(|(_, f)| format!("{sub}/{f}")).collect();
    let mut args: Vec<&str> = workload.to_vec();
    for ((flag, _), p) in FILES.iter().zip(&paths) {
        args.extend([*flag, p.as_str()]);
    }
    let out = ok(&serve(d, &args));
    assert!(out.contains("--trace-json: written to"), "{out}");
    paths
        .iter()
        .map(|p| std::fs::read(d.path().join(p)).unwrap())
        .collect()
}

#[test]
fn files_are_written_and_same_seed_gives_the_same_bytes() {
    let d = dir_with_trace("serve-files");
    let synthetic = [
        "--arrivals",
        "gamma:2",
        "--qps",
        "20",
        "--lengths",
        "zipf:64:1024",
        "--output-lengths",
        "uniform:8:64",
        "--requests",
        "40",
        "--seed",
        "7",
        "--scheduler",
        "vllm-v0",
        "--preemption",
        "swap",
    ];
    let a = run_with_files(&d, "a", &synthetic);
    let b = run_with_files(&d, "b", &synthetic);
    assert_eq!(a, b, "same seed, different bytes");
    let requests = String::from_utf8(a[0].clone()).unwrap();
    assert_eq!(requests.lines().count(), 41);
    let series = String::from_utf8(a[1].clone()).unwrap();
    assert!(series.starts_with("t_s,duration_s,gpu_blocks_used"));
    assert!(series.lines().count() > 2);
    let summary: serde_json::Value = serde_json::from_slice(&a[2]).unwrap();
    assert_eq!(summary["requests"], 40);
    let trace: serde_json::Value = serde_json::from_slice(&a[3]).unwrap();
    assert!(!trace["traceEvents"].as_array().unwrap().is_empty());
    let other = ["--seed", "8"];
    let c = ok(&serve(
        &d,
        &[&synthetic[..10], &other[..], &["--format", "csv"]].concat(),
    ));
    assert_ne!(
        c.as_bytes(),
        &a[0][..],
        "a different seed gave the same requests"
    );
    // The trace replay too.
    assert_eq!(
        run_with_files(&d, "c", &["--requests-trace", "t.csv"]),
        run_with_files(&d, "d", &["--requests-trace", "t.csv"])
    );
}

#[test]
fn flags_override_the_scenario_file() {
    let d = dir_with_trace("serve-toml");
    std::fs::write(
        d.path().join("s.toml"),
        "model = \"llama-2-7b\"\nhardware = \"a100-80g-sxm\"\n[workload]\ntrace = \"t.csv\"\nrequests = 4\n[serve]\nscheduler = \"chunked\"\nblock_size = 32\n",
    )
    .unwrap();
    let from_file = ok(&run_in(d.path(), &["serve", "s.toml"]));
    assert!(from_file.contains("4 (4 finished"), "{from_file}");
    assert!(from_file.contains("chunked scheduler"), "{from_file}");
    assert!(from_file.contains("block 32 tokens"), "{from_file}");
    let over = ok(&run_in(
        d.path(),
        &[
            "serve",
            "s.toml",
            "--requests",
            "6",
            "--scheduler",
            "mixed",
            "--block-size",
            "16",
        ],
    ));
    assert!(over.contains("6 (6 finished"), "{over}");
    assert!(over.contains("mixed scheduler"), "{over}");
    assert!(over.contains("block 16 tokens"), "{over}");
    // A synthetic workload on the command line replaces the file's trace.
    let synth = ok(&run_in(
        d.path(),
        &[
            "serve",
            "s.toml",
            "--arrivals",
            "all-at-once",
            "--lengths",
            "100",
        ],
    ));
    assert!(synth.contains("synthetic, seed 0"), "{synth}");
    assert!(synth.contains("4 (4 finished"), "{synth}");
}

#[test]
fn bad_input_is_one_line_and_exit_2() {
    let d = dir_with_trace("serve-errors");
    std::fs::write(
        d.path().join("neg.csv"),
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0.0,10,10\n-1.5,10,10\n",
    )
    .unwrap();
    std::fs::write(
        d.path().join("bad.toml"),
        "model = \"llama-2-7b\"\nhardware = \"a100-80g-sxm\"\n[serve]\nscheduler = \"fifo\"\n",
    )
    .unwrap();
    // A valid synthetic run with `extra` replacing or adding flags.
    let synth = |extra: &[&str]| -> Vec<String> {
        let mut flags = vec![
            ("--arrivals", "poisson"),
            ("--qps", "2"),
            ("--lengths", "100"),
            ("--requests", "4"),
        ];
        for kv in extra.chunks(2) {
            match flags.iter_mut().find(|(k, _)| *k == kv[0]) {
                Some(f) => f.1 = kv[1],
                None => flags.push((kv[0], kv[1])),
            }
        }
        let mut v: Vec<String> = ["serve"]
            .iter()
            .chain(MODEL.iter())
            .map(|s| s.to_string())
            .collect();
        for (k, val) in flags {
            v.extend([k.to_string(), val.to_string()]);
        }
        v
    };
    let cases: Vec<(Vec<String>, Vec<&str>)> = vec![
        (
            [&["serve"][..], &MODEL, &["--requests-trace", "neg.csv"]]
                .concat()
                .iter()
                .map(|s| s.to_string())
                .collect(),
            vec![
                "--requests-trace (workload.trace)",
                "neg.csv:3",
                "arrived_at",
            ],
        ),
        (
            [&["serve"][..], &MODEL, &["--requests-trace", "missing.csv"]]
                .concat()
                .iter()
                .map(|s| s.to_string())
                .collect(),
            vec!["--requests-trace (workload.trace): missing.csv"],
        ),
        (
            synth(&["--lengths", "trace:missing.csv"]),
            vec!["--lengths (workload.prompt_lengths): missing.csv"],
        ),
        (synth(&["--qps", "0"]), vec!["--qps", "> 0"]),
        (
            synth(&["--qps", "1e-300"]),
            vec!["--qps", "`1e-300`", "4294967296 s", "at least 9.313e-10"],
        ),
        (
            synth(&["--block-size", "0"]),
            vec!["--block-size", "one of 1, 8, 16, 32, 64, 128 or 256"],
        ),
        (
            synth(&["--lengths", "zipf:10:5"]),
            vec!["--lengths", "LO ≤ HI"],
        ),
        (synth(&["--scheduler", "fifo"]), vec!["--scheduler", "fifo"]),
        (synth(&["--preemption", "evict"]), vec!["--preemption"]),
        (
            vec![
                "serve",
                "--model",
                "opt-13b",
                "--hardware",
                "t4",
                "--arrivals",
                "all-at-once",
                "--lengths",
                "100",
                "--requests",
                "2",
            ]
            .into_iter()
            .map(String::from)
            .collect(),
            vec!["KV cache", "more memory"],
        ),
        (
            vec!["serve".into(), "bad.toml".into()],
            vec!["bad.toml: line 4", "fifo"],
        ),
        (
            synth(&["--requests-trace", "t.csv"]),
            vec!["--arrivals (workload.arrivals)"],
        ),
    ];
    for (args, words) in &cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        fails_with(&d, &args, words);
    }
}

#[test]
fn help_lists_schedulers_and_preemptions() {
    let d = TempDir::new("serve-help");
    let help = ok(&run_in(d.path(), &["serve", "--help"]));
    for w in [
        "vllm-v1",
        "vllm-v0",
        "prefill-first",
        "mixed",
        "chunked",
        "--enable-prefix-caching",
        "--max-model-len",
        "--num-gpu-blocks-override",
        "--compare-to",
        "--prefix-groups",
        "recompute",
        "swap",
        "hybrid",
        "--requests-trace",
        "--arrivals",
        "--trace-json",
    ] {
        assert!(help.contains(w), "{w} not in --help");
    }
}

#[test]
fn tensor_parallel_ranks_decode_faster_but_not_linearly() {
    // One rank of N: 1/N of the heads and FFN, two all-reduces per layer. Decode is bound by
    // reading the weights, so TP 2 nearly halves the time per output token; the all-reduces and
    // kernel floors keep it from halving exactly, and TP 8 is further from 1/8.
    let d = TempDir::new("serve-tp");
    let tpot = |tp: &str| {
        let out = serve(
            &d,
            &[
                "--arrivals",
                "poisson",
                "--qps",
                "4",
                "--lengths",
                "512",
                "--output-lengths",
                "64",
                "--requests",
                "100",
                "--format",
                "json",
                "--tensor-parallel-size",
                tp,
            ],
        );
        let v: serde_json::Value = serde_json::from_str(&ok(&out)).unwrap();
        v["tpot_s"]["p50"].as_f64().unwrap()
    };
    let (t1, t2, t8) = (tpot("1"), tpot("2"), tpot("8"));
    assert!(t2 < 0.75 * t1 && t2 > 0.5 * t1, "tp1 {t1} tp2 {t2}");
    assert!(t8 < t2 && t8 > t1 / 8.0, "tp2 {t2} tp8 {t8}");
    // 3 does not divide 32 heads: one line naming the flag.
    fails_with(
        &d,
        &[
            "serve",
            "--model",
            "llama-2-7b",
            "--hardware",
            "a100-80g-sxm",
            "--requests",
            "4",
            "--tensor-parallel-size",
            "3",
        ],
        &["--tensor-parallel-size", "32 query heads"],
    );
}

#[test]
fn a_mixture_of_experts_serves_tensor_or_expert_parallel() {
    // Mixtral-8x7B's 93 GB of weights need two H100s; a decode step of a few sequences reads
    // most of a rank's 47 GB, so TPOT is some 15-20 ms either way.
    let d = TempDir::new("serve-moe");
    let tpot = |extra: &[&str]| {
        let mut args = vec![
            "serve",
            "--model",
            "mixtral-8x7b",
            "--hardware",
            "h100-sxm",
            "--arrivals",
            "poisson",
            "--qps",
            "4",
            "--lengths",
            "512",
            "--output-lengths",
            "32",
            "--requests",
            "40",
            "--format",
            "json",
            "--tensor-parallel-size",
            "2",
        ];
        args.extend(extra);
        let v: serde_json::Value = serde_json::from_str(&ok(&run_in(d.path(), &args))).unwrap();
        v["tpot_s"]["p50"].as_f64().unwrap()
    };
    let (tp, ep) = (tpot(&[]), tpot(&["--enable-expert-parallel"]));
    for t in [tp, ep] {
        assert!(t > 0.010 && t < 0.025, "tp {tp} ep {ep}");
    }
    assert!((ep / tp - 1.0).abs() < 0.25, "tp {tp} ep {ep}");
    // One GPU cannot hold it; 16 ranks cannot share 8 experts.
    let base = [
        "serve",
        "--model",
        "mixtral-8x7b",
        "--hardware",
        "h100-sxm",
        "--arrivals",
        "all-at-once",
        "--lengths",
        "64",
        "--requests",
        "4",
    ];
    fails_with(&d, &base, &["no GPU memory left for the KV cache"]);
    let mut a = base.to_vec();
    a.extend(["--tensor-parallel-size", "16", "--enable-expert-parallel"]);
    fails_with(&d, &a, &["--tensor-parallel-size", "8 routed experts"]);
}

#[test]
fn slo_capacity_finds_the_rate_of_each_configuration() {
    let d = TempDir::new("serve-slo");
    for (name, base, price) in [("a.toml", "a100-80g-sxm", 2.0), ("h.toml", "h100-sxm", 4.5)] {
        std::fs::write(
            d.path().join(name),
            format!("base = \"{base}\"\n[gpu]\nprice_usd_per_hour = {price}\n"),
        )
        .unwrap();
    }
    let args = [
        "capacity",
        "--slo",
        "ttft_p99=2s,tpot_p99=100ms",
        "--model",
        "llama-2-7b",
        "--hardware",
        "a.toml,h.toml",
        "--lengths",
        "512",
        "--output-lengths",
        "128",
        "--requests",
        "300",
    ];
    let mut json_args = args.to_vec();
    json_args.extend(["--format", "json"]);
    let v: serde_json::Value = serde_json::from_str(&ok(&run_in(d.path(), &json_args))).unwrap();
    let rows = v["configurations"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        // The bracket: a rate that meets the SLO within 2% of one that misses it, and the
        // latencies at the rate found inside the objectives.
        let (q, hi) = (
            r["max_qps"].as_f64().unwrap(),
            r["fails_at_qps"].as_f64().unwrap(),
        );
        assert!(hi > q && hi / q - 1.0 <= 0.02 + 1e-12, "{r}");
        assert!(r["ttft_p99_s"].as_f64().unwrap() <= 2.0);
        assert!(r["tpot_p99_s"].as_f64().unwrap() <= 0.1);
        assert!(!r["limited_by"].as_array().unwrap().is_empty());
        // Dollars per million output tokens at the rate found, from the profile's price.
        let price = if r["hardware"] == "a" { 2.0 } else { 4.5 };
        let per_m = price / 3600.0 / r["output_tok_s"].as_f64().unwrap() * 1e6;
        let got = r["usd_per_m_output_tokens"].as_f64().unwrap();
        assert!((got - per_m).abs() <= 1e-9 * per_m, "{got} vs {per_m}");
    }
    // The faster GPU sustains more.
    assert!(rows[1]["max_qps"].as_f64() > rows[0]["max_qps"].as_f64());
    // Sizing for a rate is plan-deployment's now: --target-qps says where to go.
    let mut sized = args.to_vec();
    sized.extend(["--target-qps", "40"]);
    let out = run_in(d.path(), &sized);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("kvplan plan-deployment --qps"));
    // Deterministic.
    assert_eq!(ok(&run_in(d.path(), &args)), ok(&run_in(d.path(), &args)));
    // Bad input: one line, exit 2.
    let slo_fails = |slo: &str, hw: &str, extra: &[&str], needles: &[&str]| {
        let mut a = vec![
            "capacity",
            "--slo",
            slo,
            "--model",
            "llama-2-7b",
            "--hardware",
            hw,
            "--lengths",
            "512",
        ];
        a.extend(extra);
        fails_with(&d, &a, needles);
    };
    slo_fails("ttft_p99=2", "a.toml", &[], &["--slo", "needs a unit"]);
    slo_fails(
        "ttft_p99=2s",
        "a.toml",
        &["--arrivals", "all-at-once"],
        &["all-at-once"],
    );
    slo_fails(
        "ttft_p99=2s",
        "a.toml",
        &["--tensor-parallel-size", "0"],
        &["--tensor-parallel-size"],
    );
    std::fs::write(
        d.path().join("bad.toml"),
        "base = \"h100-sxm\"\n[gpu]\nprice_usd_per_hour = -1.0\n",
    )
    .unwrap();
    slo_fails("ttft_p99=2s", "bad.toml", &[], &["gpu.price_usd_per_hour"]);
    fails_with(
        &d,
        &["capacity", "--model", "llama-2-7b"],
        &["--hardware: required"],
    );
}

/// The command, with vLLM's flags as a real run sets them, over a trace with the
/// optional `prefix` column; the requests CSV keeps `status`, `ttft_s`, `e2e_s`,
/// `output_tokens`, and requests sharing a prefix find it cached.
#[test]
fn vllm_flags_over_a_trace_with_prefixes() {
    let d = TempDir::new("serve-vllm-flags");
    let mut trace = String::from("arrived_at,num_prefill_tokens,num_decode_tokens,prefix\n");
    for i in 0..40 {
        let sys = i % 3;
        trace += &format!(
            "{},{},{},s{sys}:200/u{}:300\n",
            f64::from(i) * 0.1,
            520,
            30 + i % 7,
            i % 6
        );
    }
    // Prompts of 4096 tokens or more are rejected; one passing max_model_len is cut there.
    trace += "4.5,5000,10,\n4.6,4000,500,\n";
    std::fs::write(d.path().join("f.csv"), trace).unwrap();
    let args = [
        "serve",
        "--requests-trace",
        "f.csv",
        "--scheduler",
        "vllm-v1",
        "--enable-prefix-caching",
        "--max-model-len",
        "4096",
        "--num-gpu-blocks-override",
        "7463",
        "--max-num-batched-tokens",
        "2048",
        "--max-num-seqs",
        "128",
        "--gpu-memory-utilization",
        "0.9",
        "--tensor-parallel-size",
        "1",
        "--block-size",
        "16",
        "--model",
        "llama-2-7b",
        "--hardware",
        "h100-sxm",
        "--requests-csv",
        "r.csv",
        "--format",
        "json",
    ];
    let json: serde_json::Value = serde_json::from_str(&ok(&run_in(d.path(), &args))).unwrap();
    assert_eq!(json["finished"], 41);
    assert_eq!(json["rejected"], 1);
    assert_eq!(json["truncated"], 1);
    assert_eq!(json["gpu_blocks"], 7463);
    assert!(
        json["prefix_cache_hit_rate"].as_f64().unwrap() > 0.5,
        "{json}"
    );
    let csv = std::fs::read_to_string(d.path().join("r.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (status, ttft, e2e, out, reason, finish) = (
        col("status"),
        col("ttft_s"),
        col("e2e_s"),
        col("output_tokens"),
        col("reason"),
        col("finish_reason"),
    );
    let rows: Vec<Vec<&str>> = csv
        .lines()
        .skip(1)
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), 42);
    assert_eq!(rows[40][status], "rejected");
    assert_eq!(rows[40][reason], "prompt-too-long");
    assert_eq!(rows[41][status], "finished");
    assert_eq!(rows[41][finish], "length");
    assert_eq!(rows[41][out], "96");
    for r in &rows[..40] {
        assert_eq!(r[status], "finished");
        assert!(r[ttft].parse::<f64>().unwrap() > 0.0);
        assert!(r[e2e].parse::<f64>().unwrap() > r[ttft].parse::<f64>().unwrap());
    }
}

/// The summary's first line says when weights are quantised or the KV cache is fp8, and the fp8
/// cache holds about twice the blocks.
#[test]
fn the_summary_names_quantised_weights_and_an_fp8_cache() {
    let d = dir_with_trace("serve-precision");
    let blocks = |text: &str| -> u64 {
        let head = text.lines().next().unwrap();
        let at = head.find(" GPU blocks").unwrap();
        head[..at].rsplit(' ').next().unwrap().parse().unwrap()
    };
    let plain = ok(&serve(&d, &["--requests-trace", "t.csv"]));
    let quant = ok(&serve(
        &d,
        &[
            "--requests-trace",
            "t.csv",
            "--quantization",
            "fp8",
            "--kv-cache-dtype",
            "fp8",
        ],
    ));
    assert!(
        !plain.lines().next().unwrap().contains("weights"),
        "{plain}"
    );
    assert!(
        quant
            .lines()
            .next()
            .unwrap()
            .contains("a100-80g-sxm, fp8 weights, fp8 KV cache, trace"),
        "{quant}"
    );
    // fp8 weights free memory too, so the fp8 cache holds at least twice the blocks.
    assert!(blocks(&quant) >= 2 * blocks(&plain), "{plain}\n{quant}");
}

/// `plan-deployment`: the answer names the cheapest deployment and the frontier; shards run
/// apart and merged print the unsharded answer byte for byte (table, CSV and JSON); the SVG
/// holds the frontier.
#[test]
fn plan_deployment_shards_merge_byte_for_byte() {
    let d = TempDir::new("plan-deployment");
    let base = [
        "plan-deployment",
        "--model",
        "llama-3.2-1b",
        "--hardware",
        "l4,a100-80g-sxm",
        "--price",
        "l4=0.8,a100-80g-sxm=1.5",
        "--tensor-parallel-size",
        "1,2",
        "--layouts",
        "colocated,1:1",
        "--qps",
        "30",
        "--lengths",
        "128",
        "--output-lengths",
        "32",
        "--requests",
        "600",
        "--slo",
        "ttft_p99=500ms,tpot_p99=30ms",
    ];
    let run = |extra: &[&str]| ok(&run_in(d.path(), &[&base[..], extra].concat()));
    let table = run(&["--svg", "front.svg"]);
    assert!(table.contains("cheapest: "), "{table}");
    assert!(table.contains("Pareto frontier"), "{table}");
    let svg = std::fs::read_to_string(d.path().join("front.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("frontier"), "{svg}");
    let csv = run(&["--format", "csv"]);
    assert!(csv.lines().any(|l| l.ends_with("true,true")), "{csv}");
    let json = run(&["--format", "json"]);
    for i in 0..2 {
        let part = run(&["--shard", &format!("{i}/2")]);
        std::fs::write(d.path().join(format!("s{i}.json")), part).unwrap();
    }
    let merge = |fmt: &str| {
        ok(&run_in(
            d.path(),
            &[
                "plan-deployment",
                "--slo",
                "ttft_p99=500ms,tpot_p99=30ms",
                "--format",
                fmt,
                "--merge",
                "s0.json",
                "s1.json",
            ],
        ))
    };
    assert_eq!(merge("table"), table);
    assert_eq!(merge("csv"), csv);
    assert_eq!(merge("json"), json);
}

/// `serve --slo` on one engine: vLLM's goodput (requests meeting every objective themselves,
/// per second from the first send to the last finish), checked against the per-request CSV;
/// loose objectives count every request, impossible ones none and name the percentile missed.
#[test]
fn serve_slo_gives_vllms_goodput() {
    let d = TempDir::new("serve-goodput");
    let base = [
        "serve",
        "--model",
        "llama-2-7b",
        "--hardware",
        "a100-80g-sxm",
        "--arrivals",
        "poisson",
        "--qps",
        "8",
        "--requests",
        "150",
        "--lengths",
        "512",
        "--output-lengths",
        "64",
    ];
    let json = |slo: &str| -> serde_json::Value {
        let args = [&base[..], &["--slo", slo, "--format", "json"]].concat();
        serde_json::from_str(&ok(&run_in(d.path(), &args))).unwrap()
    };
    let loose = json("ttft_p99=3600s,tpot_p99=3600s");
    assert_eq!(loose["goodput"]["good"], 150);
    assert!(loose["goodput"]["misses"].as_array().unwrap().is_empty());
    let none = json("tpot_p50=1us");
    assert_eq!(none["goodput"]["good"], 0);
    assert!(
        none["goodput"]["misses"][0]
            .as_str()
            .unwrap()
            .starts_with("tpot_p50 ")
    );
    // Against the requests themselves: TTFT within 150 ms.
    let csv = ok(&run_in(
        d.path(),
        &[&base[..], &["--format", "csv"]].concat(),
    ));
    let mut rdr = csv::Reader::from_reader(csv.as_bytes());
    let h = rdr.headers().unwrap().clone();
    let col = |n: &str| h.iter().position(|c| c == n).unwrap();
    let (ttft, status) = (col("ttft_s"), col("status"));
    let good = rdr
        .records()
        .map(|r| r.unwrap())
        .filter(|r| r[status] == *"finished" && r[ttft].parse::<f64>().unwrap() <= 0.15)
        .count();
    let mid = json("ttft_p99=150ms");
    assert_eq!(mid["goodput"]["good"].as_u64().unwrap() as usize, good);
    let table = ok(&run_in(
        d.path(),
        &[&base[..], &["--slo", "ttft_p99=150ms"]].concat(),
    ));
    assert!(table.contains("goodput under ttft_p99=150ms: "), "{table}");
}

/// `--confidence`: every headline figure gets `{"value", "lo", "hi", "coverage"}` with
/// `lo < hi` and the run's own figure as its value; a wider coverage widens every band; the
/// same seed gives the same bytes; the table prints `value (lo-hi)`; out-of-range settings are
/// one line naming the flag.
#[test]
fn serve_confidence_gives_bands_on_the_headline_figures() {
    let d = TempDir::new("serve-bands");
    let base = [
        "serve",
        "--model",
        "llama-2-7b",
        "--hardware",
        "a100-80g-sxm",
        "--arrivals",
        "poisson",
        "--qps",
        "6",
        "--requests",
        "200",
        "--lengths",
        "512",
        "--output-lengths",
        "64",
        "--band-draws",
        "6",
    ];
    let text = |extra: &[&str]| ok(&run_in(d.path(), &[&base[..], extra].concat()));
    let json = |extra: &[&str]| -> serde_json::Value {
        serde_json::from_str(&text(&[extra, &["--format", "json"]].concat())).unwrap()
    };
    let plain = json(&[]);
    assert!(plain.get("bands").is_none(), "bands only when asked for");
    let b80 = json(&["--confidence"]);
    let b95 = json(&["--confidence", "0.95"]);
    for (key, summary) in [
        ("ttft_mean", &plain["ttft_s"]["mean"]),
        ("ttft_p99", &plain["ttft_s"]["p99"]),
        ("tpot_mean", &plain["tpot_s"]["mean"]),
        ("e2e_p99", &plain["e2e_s"]["p99"]),
        ("requests_per_s", &plain["requests_per_s"]),
    ] {
        let (b, w) = (&b80["bands"][key], &b95["bands"][key]);
        assert_eq!(&b["value"], summary, "{key}: the value is the run's figure");
        assert_eq!(b["coverage"], 0.8);
        let f = |v: &serde_json::Value, k: &str| v[k].as_f64().unwrap();
        assert!(f(b, "lo") < f(b, "hi"), "{key}: {b}");
        assert!(
            f(w, "lo") <= f(b, "lo")
                && f(w, "hi") >= f(b, "hi")
                && f(w, "hi") - f(w, "lo") > f(b, "hi") - f(b, "lo"),
            "{key}: 95% {w} not wider than 80% {b}"
        );
    }
    assert_eq!(b80["bands"]["draws"], 6);
    assert_eq!(
        text(&["--confidence", "--format", "json"]),
        text(&["--confidence", "--format", "json"])
    );
    let table = text(&["--confidence"]);
    let row = table
        .lines()
        .find(|l| l.starts_with("TTFT mean / p99, 80% band"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains(" ms (") && row.contains(" ms-"), "{row}");
    assert!(table.contains("bands: 80% coverage: 6 runs"), "{table}");
    fails_with(
        &d,
        &[&base[..], &["--confidence", "1"]].concat(),
        &["--confidence", "below 1"],
    );
    fails_with(
        &d,
        &[&base[..3], &["--confidence", "0.8", "--band-draws", "1"]].concat(),
        &["--band-draws"],
    );
}

/// `serve-capacity --confidence`: the sustainable rate with its band (`lo < hi`, the coverage
/// asked for), the answer line saying where the band lies, and no band without the flag.
#[test]
fn slo_capacity_confidence_gives_a_band_on_the_rate() {
    let d = TempDir::new("serve-slo-bands");
    let args = [
        "serve-capacity",
        "--slo",
        "ttft_p99=2s,tpot_p99=100ms",
        "--model",
        "llama-2-7b",
        "--hardware",
        "a100-80g-sxm",
        "--lengths",
        "512",
        "--output-lengths",
        "128",
        "--requests",
        "300",
        "--qps-tolerance",
        "0.1",
    ];
    let json = |extra: &[&str]| -> serde_json::Value {
        let a = [&args[..], extra, &["--format", "json"]].concat();
        serde_json::from_str(&ok(&run_in(d.path(), &a))).unwrap()
    };
    let plain = json(&[]);
    assert!(plain["configurations"][0].get("max_qps_band").is_none());
    let v = json(&["--confidence", "0.9", "--band-draws", "3"]);
    let r = &v["configurations"][0];
    assert_eq!(r["max_qps"], plain["configurations"][0]["max_qps"]);
    let b = &r["max_qps_band"];
    let f = |k: &str| b[k].as_f64().unwrap();
    assert!(f("lo") < f("hi") && f("lo") > 0.0, "{b}");
    assert_eq!(f("coverage"), 0.9);
    assert_eq!(b["value"], r["max_qps"]);
    let table = ok(&run_in(
        d.path(),
        &[&args[..], &["--confidence", "--band-draws", "3"]].concat(),
    ));
    assert!(
        table.contains("a100-80g-sxm TP 1 meets the SLO at ")
            && table.contains("at 80% confidence between "),
        "{table}"
    );
}

/// A run that does not keep up says so (served against offered, the queue's growth) in the
/// table and the JSON; one that keeps up, or whose requests all arrive at once, does not.
#[test]
fn an_overloaded_run_says_so() {
    let d = TempDir::new("serve-overload");
    let run = |arrivals: &str, qps: &str, extra: &[&str]| {
        let a = [
            &[
                "serve",
                "--model",
                "llama-2-7b",
                "--hardware",
                "a100-80g-sxm",
                "--arrivals",
                arrivals,
                "--requests",
                "400",
                "--lengths",
                "1024",
                "--output-lengths",
                "128",
            ][..],
            &(if qps.is_empty() {
                vec![]
            } else {
                vec!["--qps", qps]
            }),
            extra,
        ]
        .concat();
        ok(&run_in(d.path(), &a))
    };
    let heavy = run("poisson", "60", &[]);
    let line = heavy
        .lines()
        .find(|l| l.starts_with("warning: overloaded: "))
        .unwrap_or_else(|| panic!("{heavy}"));
    assert!(
        line.contains("offered") && line.contains("grew by"),
        "{line}"
    );
    let v: serde_json::Value =
        serde_json::from_str(&run("poisson", "60", &["--format", "json"])).unwrap();
    let o = &v["overload"];
    let (served, offered) = (
        o["served_rps"].as_f64().unwrap(),
        o["offered_rps"].as_f64().unwrap(),
    );
    assert!(served < 0.8 * offered && offered > 40.0, "{o}");
    assert!(o["queue_growth_s"].as_f64().unwrap() > 1.0, "{o}");
    for (arrivals, qps) in [("poisson", "1"), ("all-at-once", "")] {
        let light = run(arrivals, qps, &[]);
        assert!(!light.contains("overloaded"), "{arrivals}: {light}");
        let v: serde_json::Value =
            serde_json::from_str(&run(arrivals, qps, &["--format", "json"])).unwrap();
        assert!(v.get("overload").is_none(), "{arrivals}: {v}");
    }
}

/// ITL pools every gap between consecutive tokens: with every request generating the same
/// length, its mean is the mean TPOT (each request's gaps sum to its last token less its
/// first), and its p99 is at least its p50; rows and JSON agree.
#[test]
fn itl_pools_the_gaps_between_tokens() {
    let d = TempDir::new("serve-itl");
    let args = [
        "serve",
        "--model",
        "llama-2-7b",
        "--hardware",
        "a100-80g-sxm",
        "--arrivals",
        "poisson",
        "--qps",
        "4",
        "--requests",
        "60",
        "--lengths",
        "800",
        "--output-lengths",
        "64",
    ];
    let v: serde_json::Value = serde_json::from_str(&ok(&run_in(
        d.path(),
        &[&args[..], &["--format", "json"]].concat(),
    )))
    .unwrap();
    let f = |k: &str, p: &str| v[k][p].as_f64().unwrap();
    assert!(
        (f("itl_s", "mean") / f("tpot_s", "mean") - 1.0).abs() < 1e-9,
        "{} vs {}",
        v["itl_s"],
        v["tpot_s"]
    );
    assert!(f("itl_s", "p99") >= f("itl_s", "p50") && f("itl_s", "p50") > 0.0);
    let table = ok(&run_in(d.path(), &args));
    assert!(
        table.lines().any(|l| l.starts_with("ITL p50 / p90 / p99")),
        "{table}"
    );
}

/// `--vllm-version`: the first line and the summary JSON name the release followed (0.15.1
/// unless told, 0.4.2 for the 0.4 schedulers); an older release changes what it changed
/// (0.10.2: piecewise graphs, no asynchronous scheduling) and is named too; a scenario's
/// `[serve] vllm_version` reads the same and the flag wins over it.
#[test]
fn serve_names_the_vllm_release_it_followed() {
    let d = dir_with_trace("serve-vllm-version");
    let head = |out: &std::process::Output| ok(out).lines().next().unwrap().to_string();
    let newest = head(&serve(&d, &["--requests-trace", "t.csv"]));
    assert!(
        newest.contains(", vLLM 0.15.1, vllm-v1 scheduler,")
            && newest.contains(", async scheduling, CUDA graphs"),
        "{newest}"
    );
    let old = head(&serve(
        &d,
        &["--requests-trace", "t.csv", "--vllm-version", "v0.10.2"],
    ));
    assert!(
        old.contains(", vLLM 0.10.2, vllm-v1 scheduler,")
            && !old.contains("async scheduling")
            && old.ends_with(", piecewise CUDA graphs"),
        "{old}"
    );
    let v0 = head(&serve(
        &d,
        &["--requests-trace", "t.csv", "--scheduler", "vllm-v0"],
    ));
    assert!(v0.contains(", vLLM 0.4.2, vllm-v0 scheduler,"), "{v0}");
    let json = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["--requests-trace", "t.csv", "--format", "json"];
        args.extend(extra);
        serde_json::from_str(&ok(&serve(&d, &args))).unwrap()
    };
    assert_eq!(json(&[])["vllm_version"], "0.15.1");
    assert_eq!(json(&["--vllm-version", "0.13"])["vllm_version"], "0.13.0");
    std::fs::write(
        d.path().join("s.toml"),
        "model = \"llama-2-7b\"\nhardware = \"a100-80g-sxm\"\n[workload]\ntrace = \"t.csv\"\n\
         [serve]\nvllm_version = \"0.11\"\n",
    )
    .unwrap();
    let file: serde_json::Value = serde_json::from_str(&ok(&run_in(
        d.path(),
        &["serve", "s.toml", "--format", "json"],
    )))
    .unwrap();
    assert_eq!(file["vllm_version"], "0.11.0");
    let flag: serde_json::Value = serde_json::from_str(&ok(&run_in(
        d.path(),
        &[
            "serve",
            "s.toml",
            "--format",
            "json",
            "--vllm-version",
            "0.9.2",
        ],
    )))
    .unwrap();
    assert_eq!(flag["vllm_version"], "0.9.2");
}

/// `plan-deployment --confidence`: the cheapest deployment's objectives with their bands
/// (`lo < hi`, the value the plan's own figure), whether each crosses its limit, and how many
/// perturbed runs met every objective; the table says the same; refused with --shard.
#[test]
fn plan_deployment_confidence_bands_the_cheapest() {
    let d = TempDir::new("plan-bands");
    let args = [
        "plan-deployment",
        "--model",
        "llama-3.1-8b",
        "--qps",
        "6",
        "--lengths",
        "512",
        "--output-lengths",
        "64",
        "--requests",
        "400",
        "--slo",
        "ttft_p99=500ms,tpot_p99=40ms",
        "--hardware",
        "h100-sxm",
        "--confidence",
        "--band-draws",
        "3",
    ];
    let v: serde_json::Value = serde_json::from_str(&ok(&run_in(
        d.path(),
        &[&args[..], &["--format", "json"]].concat(),
    )))
    .unwrap();
    let c = &v["confidence"];
    assert_eq!(c["draws"], 3);
    assert!(c["draws_met"].as_u64().unwrap() <= 3);
    let objectives = c["objectives"].as_array().unwrap();
    assert_eq!(objectives.len(), 2);
    for o in objectives {
        let b = &o["band"];
        let f = |k: &str| b[k].as_f64().unwrap();
        assert!(f("lo") < f("hi") && f("coverage") == 0.8, "{o}");
        let limit = o["limit_s"].as_f64().unwrap();
        assert_eq!(o["crosses"].as_bool().unwrap(), f("hi") > limit, "{o}");
    }
    let table = ok(&run_in(d.path(), &args));
    assert!(table.contains("confidence (80% bands, 3 runs"), "{table}");
    assert!(table.contains("perturbed runs"), "{table}");
    let out = run_in(d.path(), &[&args[..], &["--shard", "0/2"]].concat());
    assert_eq!(out.status.code(), Some(2));
}

/// `--cold-start` (or `[serve] cold_start`): a freshly started server's first eager steps of a
/// mixture of experts wait for Triton's compilations; the table says how many and how long,
/// the summary JSON has `first_use_compilation`; left out, neither appears.
#[test]
fn cold_start_reports_the_first_use_compilations() {
    let d = TempDir::new("serve-cold");
    let args = [
        "serve",
        "--model",
        "qwen3-30b-a3b",
        "--hardware",
        "h100-sxm",
        "--arrivals",
        "poisson",
        "--qps",
        "2",
        "--lengths",
        "600",
        "--output-lengths",
        "16",
        "--requests",
        "20",
        "--no-enable-prefix-caching",
    ];
    let warm = ok(&run_in(d.path(), &args));
    assert!(!warm.contains("first-use compilation"), "{warm}");
    let mut cold_args = args.to_vec();
    cold_args.extend(["--cold-start", "--summary-json", "s.json"]);
    let cold = ok(&run_in(d.path(), &cold_args));
    assert!(
        cold.contains("first-use compilation")
            && cold.contains("fused-MoE kernels, steps held")
            && cold.contains("a freshly started server"),
        "{cold}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(d.path().join("s.json")).unwrap()).unwrap();
    let c = &json["first_use_compilation"];
    assert!(c["kernels"].as_u64().unwrap() >= 2, "{c}");
    assert!(c["stall_s"].as_f64().unwrap() > 0.0, "{c}");
    // The same flag on a dense model: nothing to compile, the same latencies.
    let dense = |extra: &[&str]| {
        let mut a = args.to_vec();
        a[2] = "llama-3-8b";
        a.extend(extra);
        ok(&run_in(d.path(), &a))
    };
    let (w, c) = (dense(&[]), dense(&["--cold-start"]));
    assert!(c.contains("0 fused-MoE kernels"), "{c}");
    let ttft = |s: &str| {
        let line = s.lines().find(|l| l.starts_with("TTFT")).unwrap();
        line.split_whitespace().collect::<Vec<_>>().join(" ")
    };
    assert_eq!(ttft(&w), ttft(&c));
}
