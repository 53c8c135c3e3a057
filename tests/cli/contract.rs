//! The invocations other tools rely on (issue: "these exact invocations must work").

use crate::common::{TempDir, ok, root, run, run_in};
use serde_json::Value;

const REQUIRED: [&str; 8] = [
    "strategy",
    "decode_latency_s",
    "decode_throughput_tok_s",
    "gpu_busy_fraction",
    "h2d_bytes",
    "d2h_bytes",
    "peak_gpu_bytes",
    "peak_host_bytes",
];

fn check_report(v: &Value, strategy: &str, batch: f64, gen_len: f64) {
    for f in REQUIRED {
        assert!(v.get(f).is_some(), "missing field {f} in {v}");
    }
    assert_eq!(v["strategy"], strategy);
    let lat = v["decode_latency_s"].as_f64().unwrap();
    let tput = v["decode_throughput_tok_s"].as_f64().unwrap();
    assert!(lat > 0.0);
    // Throughput as the KVPR paper reports it: batch * (gen - 1) / decode latency.
    assert!(
        (tput - batch * (gen_len - 1.0) / lat).abs() / tput < 1e-12,
        "{tput} vs {lat}"
    );
    let busy = v["gpu_busy_fraction"].as_f64().unwrap();
    assert!((0.0..=1.0).contains(&busy));
    assert!(v["peak_gpu_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn kvpr_and_full_transfer_json_on_the_paper_setting() {
    let base = [
        "simulate",
        "--model",
        "opt-6.7b",
        "--hardware",
        "a100-40g-pcie4",
        "--batch",
        "64",
        "--prompt",
        "128",
        "--gen",
        "32",
        "--format",
        "json",
    ];
    let mut k = base.to_vec();
    k.extend(["--strategy", "kvpr"]);
    let kv: Value = serde_json::from_str(&ok(&run(&k))).unwrap();
    check_report(&kv, "kvpr", 64.0, 32.0);
    let mut f = base.to_vec();
    f.extend(["--strategy", "full-transfer"]);
    let ft: Value = serde_json::from_str(&ok(&run(&f))).unwrap();
    check_report(&ft, "full-transfer", 64.0, 32.0);
    // KVPR moves fewer bytes host->device and is faster on this MHA model.
    assert!(kv["h2d_bytes"].as_u64() < ft["h2d_bytes"].as_u64());
    assert!(kv["decode_latency_s"].as_f64() < ft["decode_latency_s"].as_f64());
    // ... and keeps activations on the host for recomputation.
    assert!(kv["peak_host_bytes"].as_u64() > ft["peak_host_bytes"].as_u64());
}

#[test]
fn config_json_and_profile_file_with_trace() {
    let dir = TempDir::new("contract3");
    std::fs::copy(
        root().join("vocab/models/llama-2-7b.json"),
        dir.path().join("config.json"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("my-profile.toml"),
        "base = \"a100-40g-pcie4\"\n[link]\nh2d_pinned_gbps = 20.0\n",
    )
    .unwrap();
    let out = run_in(
        dir.path(),
        &[
            "simulate",
            "--model",
            "./config.json",
            "--hardware",
            "my-profile.toml",
            "--strategy",
            "kvpr",
            "--batch",
            "8",
            "--prompt",
            "512",
            "--gen",
            "16",
            "--trace",
            "out.json",
        ],
    );
    let text = ok(&out);
    assert!(
        text.contains("kvpr (simulated): ./config.json on my-profile"),
        "{text}"
    );
    let trace: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("out.json")).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    // Metadata names the three streams; every op is a complete event with a duration.
    let threads: Vec<&str> = events
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(threads, ["gpu0.compute", "gpu0.h2d", "gpu0.d2h"]);
    let ops: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert!(ops.len() > 1000);
    assert!(
        ops.iter()
            .all(|e| e["dur"].as_f64().unwrap() >= 0.0 && e["ts"].as_f64().unwrap() >= 0.0)
    );
    assert!(ops.iter().any(|e| e["name"] == "recompute_kv"));
    // Only out.json and the two inputs: no temporary file left behind.
    assert_eq!(dir.files(), ["config.json", "my-profile.toml", "out.json"]);
}

#[test]
fn compare_json_lists_every_strategy_and_the_ratio() {
    let out = run(&[
        "simulate",
        "scenarios/opt-6.7b-a100-latency.toml",
        "--compare",
        "--format",
        "json",
    ]);
    let v: Value = serde_json::from_str(&ok(&out)).unwrap();
    let names: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["kvpr", "full-transfer", "gpu-only"]);
    let ratio = v["kvpr_vs_full_transfer"]["decode_latency_ratio"]
        .as_f64()
        .unwrap();
    let k = v["results"][0]["decode_latency_s"].as_f64().unwrap();
    let f = v["results"][1]["decode_latency_s"].as_f64().unwrap();
    assert!((ratio - k / f).abs() < 1e-12);
}

#[test]
fn compare_reports_strategies_that_do_not_fit_without_failing() {
    let out = run(&[
        "simulate",
        "scenarios/opt-30b-a100-throughput.toml",
        "--compare",
        "--gen",
        "3",
        "--format",
        "json",
    ]);
    let v: Value = serde_json::from_str(&ok(&out)).unwrap();
    assert_eq!(v["results"].as_array().unwrap().len(), 2);
    assert_eq!(v["skipped"][0]["strategy"], "gpu-only");
    assert!(
        v["skipped"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("short by")
    );
    // Weights offloaded and 8 GPU batches: throughput counts all of them.
    let r = &v["results"][0];
    assert_eq!(r["weights_on_gpu"], false);
    assert_eq!(r["order"], "column-by-column");
    let tput = r["decode_throughput_tok_s"].as_f64().unwrap();
    let lat = r["decode_latency_s"].as_f64().unwrap();
    assert!((tput - 32.0 * 8.0 * 2.0 / lat).abs() / tput < 1e-12);
}

#[test]
fn plan_kvpr_explains_mha_and_gqa() {
    let mha: Value = serde_json::from_str(&ok(&run(&[
        "plan",
        "kvpr",
        "--model",
        "opt-6.7b",
        "--hardware",
        "a100-40g-pcie4",
        "--gen",
        "5",
        "--format",
        "json",
    ])))
    .unwrap();
    let steps = mha["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 4);
    for s in steps {
        let l = s["recompute_tokens"].as_u64().unwrap();
        assert!(l > 0 && l < s["seq_len"].as_u64().unwrap());
        assert!(s["layer_s"].as_f64() < s["transfer_only_layer_s"].as_f64());
    }
    let gqa = ok(&run(&[
        "plan",
        "kvpr",
        "--model",
        "llama-3-8b",
        "--hardware",
        "a100-40g-pcie4",
        "--gen",
        "3",
    ]));
    assert!(
        gqa.contains("grouped-query") && gqa.contains("l = 0"),
        "{gqa}"
    );
    assert!(gqa.contains("note: no decode step recomputes"), "{gqa}");
}

#[test]
fn csv_trace_and_csv_output() {
    let dir = TempDir::new("csvtrace");
    let trace = dir.path().join("t.csv");
    let out = run(&[
        "simulate",
        "--model",
        "opt-125m",
        "--hardware",
        "t4",
        "--batch",
        "2",
        "--prompt",
        "16",
        "--gen",
        "3",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "csv",
    ]);
    let text = ok(&out);
    let mut rdr = csv::Reader::from_reader(text.as_bytes());
    let header: Vec<String> = rdr.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(header[0], "strategy");
    let records: Vec<csv::StringRecord> = rdr.records().map(Result::unwrap).collect();
    assert_eq!(records.len(), 1);
    let ops_col = header.iter().position(|h| h == "decode_latency_s").unwrap();
    assert!(records[0][ops_col].parse::<f64>().unwrap() > 0.0);
    let json: Value = serde_json::from_str(&ok(&run(&[
        "simulate",
        "--model",
        "opt-125m",
        "--hardware",
        "t4",
        "--batch",
        "2",
        "--prompt",
        "16",
        "--gen",
        "3",
        "--format",
        "json",
    ])))
    .unwrap();
    let mut t = csv::Reader::from_path(&trace).unwrap();
    let h: Vec<String> = t.headers().unwrap().iter().map(String::from).collect();
    assert_eq!(&h[..4], ["run", "op", "stream", "device"]);
    let rows: Vec<csv::StringRecord> = t.records().map(Result::unwrap).collect();
    // One row per op of the schedule, ops numbered 0.. in order.
    assert_eq!(rows.len() as u64, json["ops"].as_u64().unwrap());
    assert!(rows.iter().enumerate().all(|(i, r)| r[1] == i.to_string()));
    let (start, end) = (
        h.iter().position(|c| c == "start_s").unwrap(),
        h.iter().position(|c| c == "end_s").unwrap(),
    );
    assert!(
        rows.iter()
            .all(|r| r[start].parse::<f64>().unwrap() <= r[end].parse::<f64>().unwrap())
    );
}

#[test]
fn models_and_hardware_listings() {
    let m = ok(&run(&["models"]));
    for name in [
        "opt-6.7b",
        "llama-3-70b",
        "gemma-2-9b",
        "falcon-7b",
        "yarn-llama-2-7b",
    ] {
        assert!(m.contains(name), "{name} missing from `kvplan models`");
    }
    let j: Value =
        serde_json::from_str(&ok(&run(&["models", "llama-3-8b", "--format", "json"]))).unwrap();
    assert_eq!(j["num_kv_heads"], 8);
    assert_eq!(j["params"], 8_030_261_248u64);
    assert!(j.get("moe").is_none() && j.get("active_params").is_none());
    // A mixture of experts: its experts in the table and in JSON.
    let x = ok(&run(&["models", "mixtral-8x7b"]));
    assert!(
        x.contains("8x14336 top2")
            && x.contains("mixture of experts: 8 routed experts 14336 wide, 2 per token")
            && x.contains("active parameters per token: 12.88B of 46.70B"),
        "{x}"
    );
    let j: Value = serde_json::from_str(&ok(&run(&[
        "models",
        "Qwen/Qwen3-30B-A3B",
        "--format",
        "json",
    ])))
    .unwrap();
    assert_eq!(j["family"], "qwen3_moe");
    assert_eq!(
        (j["moe"]["experts"].as_u64(), j["moe"]["top_k"].as_u64()),
        (Some(128), Some(8))
    );
    assert!(j["active_params"].as_u64().unwrap() < j["params"].as_u64().unwrap() / 8);
    let h = ok(&run(&["hardware"]));
    assert!(h.contains("a100-40g-pcie4") && h.contains("quadro-rtx-5000"));
    let toml_text = ok(&run(&["hardware", "a100-40g-pcie4"]));
    assert!(toml_text.contains("h2d_pinned_gbps = 24.5") && toml_text.contains("vLLM"));
}

/// Every price cites its source: the list shows each preset's price per GPU-hour and power,
/// `kvplan hardware NAME` the price with its source and date, as TOML and as JSON.
#[test]
fn hardware_shows_prices_with_their_source() {
    let list = ok(&run(&["hardware"]));
    let header = list.lines().next().unwrap();
    assert!(
        header.contains("$/GPU-h") && header.contains("power W"),
        "{header}"
    );
    let row = list.lines().find(|l| l.starts_with("h100-sxm ")).unwrap();
    assert!(row.ends_with(" 700     3.78"), "{row}");
    let toml_text = ok(&run(&["hardware", "h100-sxm"]));
    for needle in [
        "price_usd_per_hour = 3.78",
        "price_source = \"Lambda on-demand",
        "https://techbytes.app/",
        "price_date = \"2026-05-07\"",
        "power_watts = 700.0",
    ] {
        assert!(toml_text.contains(needle), "{needle} missing:\n{toml_text}");
    }
    let v: Value =
        serde_json::from_str(&ok(&run(&["hardware", "h100-sxm", "--format", "json"]))).unwrap();
    let gpu = &v["gpu"];
    assert_eq!(gpu["price_usd_per_hour"], 3.78);
    assert!(gpu["price_source"].as_str().unwrap().contains("Lambda"));
    assert_eq!(gpu["price_date"], "2026-05-07");
    assert_eq!(gpu["power_watts"], 700.0);
    // A profile file with a price of its own says so under its row, and cites itself.
    let dir = TempDir::new("hw-price-show");
    std::fs::write(
        dir.path().join("mine.toml"),
        "base = \"h100-sxm\"\n[gpu]\nprice_usd_per_hour = 2.0\n",
    )
    .unwrap();
    let mine = ok(&run_in(dir.path(), &["hardware", "mine.toml"]));
    assert!(
        mine.ends_with("\nprice: $2.00 per GPU-hour, given in mine.toml\n"),
        "{mine}"
    );
    // A preset with no citable price says how to give one.
    std::fs::write(dir.path().join("nvl.toml"), "base = \"h100-nvl\"\n").unwrap();
    let nvl = ok(&run_in(dir.path(), &["hardware", "nvl.toml"]));
    assert!(
        nvl.contains("price: none; give gpu.price_usd_per_hour"),
        "{nvl}"
    );
}

#[test]
fn capacity_json_contract_and_table11() {
    let v: Value = serde_json::from_str(&ok(&run(&[
        "capacity",
        "--model",
        "llama-3-8b",
        "--hardware",
        "rtx-4090",
        "--host-ram",
        "512",
        "--format",
        "json",
    ])))
    .unwrap();
    assert_eq!(v["model"], "llama-3-8b");
    assert_eq!(v["hardware"], "rtx-4090");
    let s = v["strategies"].as_array().unwrap();
    let names: Vec<&str> = s.iter().map(|x| x["strategy"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "standard",
            "chunked-prefill",
            "kv-quant-4bit",
            "layer-offload",
            "headinfer"
        ]
    );
    for x in s {
        for f in [
            "max_context_tokens",
            "binding_limit",
            "gpu_bytes",
            "host_bytes",
        ] {
            assert!(x.get(f).is_some(), "{f} missing in {x}");
        }
    }
    // HeadInfer paper, Table 11 (K = 1024 tokens: 25K, 30K, 45K, 45K, ~4M = 4000K), within 15%
    // as the issue asks; planner/tests/headinfer.rs checks the model itself in more detail.
    let paper = [25.0, 30.0, 45.0, 45.0, 4000.0];
    for (x, k) in s.iter().zip(paper) {
        let got = x["max_context_tokens"].as_f64().unwrap();
        let want = k * 1024.0;
        assert!(
            (got - want).abs() / want <= 0.15,
            "{}: {got} vs {want}",
            x["strategy"]
        );
    }
    assert_eq!(s[0]["binding_limit"], "gpu memory");
    assert_eq!(s[4]["binding_limit"], "host memory");
    // One strategy on request; a bad name is bad input.
    let one: Value = serde_json::from_str(&ok(&run(&[
        "capacity",
        "--model",
        "llama-3-8b",
        "--hardware",
        "rtx-4090",
        "--strategy",
        "headinfer",
        "--format",
        "json",
    ])))
    .unwrap();
    assert_eq!(one["strategies"].as_array().unwrap().len(), 1);
    let bad = run(&[
        "capacity",
        "--model",
        "llama-3-8b",
        "--hardware",
        "rtx-4090",
        "--strategy",
        "magic",
    ]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("kv-quant-4bit"));
}

#[test]
fn plan_headinfer_adapts_groups_to_the_context() {
    let group = |context: &str| {
        let v: Value = serde_json::from_str(&ok(&run(&[
            "plan",
            "headinfer",
            "--model",
            "llama-3-8b",
            "--hardware",
            "rtx-4090",
            "--context",
            context,
            "--gen",
            "2",
            "--format",
            "json",
        ])))
        .unwrap();
        assert!(v["peak_gpu_bytes"].as_u64().unwrap() <= 24 << 30);
        v["details"]["heads_per_group"].as_u64().unwrap()
    };
    // Large groups while memory allows, smaller as the context grows (the paper's policy).
    let (short, long) = (group("100000"), group("1000000"));
    assert_eq!(short, 8);
    assert!(long < short, "{long} vs {short}");
}

#[test]
fn plan_runahead_json_contract() {
    let v: Value = serde_json::from_str(&ok(&run(&[
        "plan",
        "runahead",
        "--model",
        "llama-2-7b",
        "--hardware",
        "a100-80g-sxm",
        "--devices",
        "4",
        "--link-gbps",
        "10",
        "--context",
        "16384",
        "--format",
        "json",
    ])))
    .unwrap();
    let used = v["devices_used"].as_u64().unwrap();
    assert!((1..=4).contains(&used));
    let partition: Vec<u64> = v["partition"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect();
    assert_eq!(
        partition.iter().sum::<u64>(),
        16384,
        "the partition covers the context exactly"
    );
    assert_eq!(partition.len() as u64, used);
    let t = &v["ttft_s"];
    let runahead = t["runahead"].as_f64().unwrap();
    for m in ["single_device", "even_chain", "tensor_parallel"] {
        assert!(t[m].as_f64().unwrap() > 0.0, "{m}");
    }
    assert!(
        runahead <= t["even_chain"].as_f64().unwrap(),
        "never worse than equal chunks"
    );
    let speedup = v["speedup"].as_f64().unwrap();
    assert!((speedup - t["single_device"].as_f64().unwrap() / runahead).abs() < 1e-9);
    assert!(speedup > 1.0);
    // The timeline of the same plan: simulate --strategy runahead reports the same TTFT.
    let sim: Value = serde_json::from_str(&ok(&run(&[
        "simulate",
        "--model",
        "llama-2-7b",
        "--hardware",
        "a100-80g-sxm",
        "--strategy",
        "runahead",
        "--devices",
        "4",
        "--link-gbps",
        "10",
        "--context",
        "16384",
        "--format",
        "json",
    ])))
    .unwrap();
    let ttft = sim["prefill_latency_s"].as_f64().unwrap();
    assert!(
        (ttft - runahead).abs() / runahead < 1e-9,
        "{ttft} vs {runahead}"
    );
}
