//! Bad input: one line on stderr naming the field, exit code 2, nothing on stdout, no output file.

use std::process::Output;

use crate::common::{TempDir, run_in};

fn expect_input_error(out: &Output, needles: &[&str]) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(err.starts_with("error: "), "{err}");
    for n in needles {
        assert!(err.contains(n), "missing '{n}' in: {err}");
    }
    assert!(
        out.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    err
}

/// Runs a simulate that must fail in a fresh directory with `--trace`, and checks no file appears.
fn simulate_fails(name: &str, setup: &[(&str, &str)], args: &[&str], needles: &[&str]) {
    let dir = TempDir::new(name);
    for (f, text) in setup {
        std::fs::write(dir.path().join(f), text).unwrap();
    }
    let before = dir.files();
    let mut a = vec!["simulate"];
    a.extend_from_slice(args);
    a.extend(["--trace", "trace.json"]);
    let out = run_in(dir.path(), &a);
    expect_input_error(&out, needles);
    assert_eq!(dir.files(), before, "an output file was written");
}

const OK: [&str; 4] = ["--model", "opt-1.3b", "--hardware", "a100-40g-pcie4"];

fn with(extra: &[&'static str]) -> Vec<&'static str> {
    let mut v = OK.to_vec();
    v.extend_from_slice(extra);
    v
}

#[test]
fn unknown_model_lists_presets() {
    simulate_fails(
        "unk-model",
        &[],
        &["--model", "opt-7b", "--hardware", "t4"],
        &["unknown model 'opt-7b'", "opt-6.7b", "config.json"],
    );
}

#[test]
fn unknown_hardware_lists_presets() {
    simulate_fails(
        "unk-hw",
        &[],
        &["--model", "opt-125m", "--hardware", "a200"],
        &["unknown hardware 'a200'", "h100-sxm"],
    );
}

#[test]
fn missing_model_names_the_flag() {
    simulate_fails(
        "no-model",
        &[],
        &["--hardware", "t4"],
        &["--model is required"],
    );
}

#[test]
fn zero_and_negative_sizes() {
    simulate_fails(
        "zero-batch",
        &[],
        &with(&["--batch", "0"]),
        &["--batch", "got 0"],
    );
    simulate_fails(
        "neg-prompt",
        &[],
        &with(&["--prompt", "-5"]),
        &["--prompt", "got -5"],
    );
    simulate_fails("zero-gen", &[], &with(&["--gen", "0"]), &["--gen"]);
    simulate_fails(
        "zero-k",
        &[],
        &with(&["--gpu-batches", "0"]),
        &["--gpu-batches"],
    );
    simulate_fails("word-batch", &[], &with(&["--batch", "many"]), &["--batch"]);
}

#[test]
fn unknown_choices() {
    simulate_fails(
        "bad-strategy",
        &[],
        &with(&["--strategy", "magic"]),
        &["--strategy", "magic", "full-transfer"],
    );
    simulate_fails(
        "bad-weights",
        &[],
        &with(&["--weights", "cpu"]),
        &["--weights", "auto, gpu or offload"],
    );
    simulate_fails("bad-split", &[], &with(&["--split", "-3"]), &["--split"]);
    simulate_fails(
        "bad-dtype",
        &[],
        &with(&["--dtype", "fp8"]),
        &["--dtype", "fp8"],
    );
    simulate_fails(
        "bad-flag",
        &[],
        &with(&["--batchsize", "4"]),
        &["--batchsize"],
    );
}

/// `kvplan capacity`: each input the planner refuses, named by its flag.
#[test]
fn capacity_inputs_name_their_flags() {
    let dir = TempDir::new("capacity-inputs");
    let fails = |extra: &[&str], needles: &[&str]| {
        let mut a = vec![
            "capacity",
            "--model",
            "llama-3-8b",
            "--hardware",
            "rtx-4090",
        ];
        a.extend_from_slice(extra);
        expect_input_error(&run_in(dir.path(), &a), needles);
    };
    let slo = "(or --slo SPEC";
    let missing = run_in(dir.path(), &["capacity", "--hardware", "rtx-4090"]);
    expect_input_error(&missing, &["error: --model: required", slo]);
    fails(
        &["--dtype", "fp8"],
        &["error: --dtype: unknown dtype 'fp8'"],
    );
    fails(
        &["--strategy", "magic"],
        &["error: --strategy: ", "headinfer"],
    );
    fails(&["--batch", "0"], &["error: --batch: ", "got 0"]);
    fails(&["--chunk", "-1"], &["error: --chunk: ", "got -1"]);
    fails(
        &["--heads-per-group", "3"],
        &["error: --heads-per-group: ", "1, 2, 4, 8"],
    );
    fails(
        &["--host-ram", "0"],
        &["error: --host-ram ", "more than 0", "got 0"],
    );
    // An absurd size is refused with the accepted range, not clamped silently.
    fails(
        &["--host-ram", "1e308"],
        &[
            "error: --host-ram (capacity.host_ram): must be more than 0 and at most 1048576 GiB (more than 0, at most 1 PiB) (got 1e308)",
        ],
    );
    fails(
        &["--runtime-reserve", "-1"],
        &["error: --runtime-reserve ", "got -1"],
    );
}

#[test]
fn malformed_scenario_toml() {
    simulate_fails(
        "bad-scn",
        &[("s.toml", "model = \"opt-125m\"\n[workload\nbatch = 1\n")],
        &["s.toml"],
        &["s.toml", "line 2"],
    );
    simulate_fails(
        "unk-field",
        &[(
            "s.toml",
            "model = \"opt-125m\"\nhardware = \"t4\"\n[workload]\nbatchsize = 1\n",
        )],
        &["s.toml"],
        &["s.toml", "batchsize"],
    );
    simulate_fails(
        "neg-scn",
        &[(
            "s.toml",
            "model = \"opt-125m\"\nhardware = \"t4\"\n[workload]\nbatch = -2\n",
        )],
        &["s.toml"],
        &["workload.batch", "got -2"],
    );
    simulate_fails("no-scn", &[], &["missing.toml"], &["missing.toml"]);
}

#[test]
fn malformed_config_json() {
    simulate_fails(
        "bad-json",
        &[("config.json", "{\"model_type\": \"llama\",")],
        &["--model", "config.json", "--hardware", "t4"],
        &["config.json"],
    );
    simulate_fails(
        "bert",
        &[("config.json", "{\"model_type\": \"bert\"}")],
        &["--model", "config.json", "--hardware", "t4"],
        &["unsupported model_type 'bert'"],
    );
    simulate_fails(
        "no-field",
        &[(
            "config.json",
            "{\"model_type\":\"opt\",\"hidden_size\":64,\"num_attention_heads\":4,\"num_hidden_layers\":2,\"vocab_size\":100,\"max_position_embeddings\":64}",
        )],
        &["--model", "config.json", "--hardware", "t4"],
        &["missing field `ffn_dim`"],
    );
    // A mixture of experts without its experts per token; DeepSeek's latent attention.
    simulate_fails(
        "no-topk",
        &[(
            "config.json",
            "{\"model_type\":\"mixtral\",\"hidden_size\":64,\"num_attention_heads\":4,\"num_hidden_layers\":2,\"intermediate_size\":128,\"num_local_experts\":4,\"vocab_size\":100,\"max_position_embeddings\":64}",
        )],
        &["--model", "config.json", "--hardware", "t4"],
        &[
            "missing field `num_experts_per_tok`",
            "required for a mixtral model",
        ],
    );
    simulate_fails(
        "mla",
        &[(
            "config.json",
            "{\"model_type\":\"deepseek_v3\",\"hidden_size\":64,\"num_attention_heads\":4,\"num_hidden_layers\":2,\"intermediate_size\":128,\"n_routed_experts\":8,\"num_experts_per_tok\":2,\"moe_intermediate_size\":32,\"kv_lora_rank\":16,\"vocab_size\":100,\"max_position_embeddings\":64}",
        )],
        &["--model", "config.json", "--hardware", "t4"],
        &["kv_lora_rank", "multi-head latent attention (MLA"],
    );
}

#[test]
fn malformed_profile_toml() {
    simulate_fails(
        "bad-prof",
        &[("p.toml", "base = \"t4\"\n[link\n")],
        &["--model", "opt-125m", "--hardware", "p.toml"],
        &["p.toml", "line 2"],
    );
    simulate_fails(
        "neg-prof",
        &[("p.toml", "base = \"t4\"\n[gpu]\nhbm_gbps = -1\n")],
        &["--model", "opt-125m", "--hardware", "p.toml"],
        &["gpu.hbm_gbps", "from 0.001 to 100000 GB/s"],
    );
    simulate_fails(
        "unk-prof",
        &[("p.toml", "base = \"t4\"\n[gpu]\nhbm = 1\n")],
        &["--model", "opt-125m", "--hardware", "p.toml"],
        &["hbm"],
    );
}

#[test]
fn profile_values_outside_physical_ranges() {
    let model = ["--model", "opt-125m", "--hardware", "p.toml"];
    for (name, section, line, needles) in [
        (
            "tiny-link",
            "link",
            "h2d_pinned_gbps = 1e-300",
            &[
                "p.toml: link.h2d_pinned_gbps",
                "0.001 to 100000 GB/s",
                "got 1e-300",
            ][..],
        ),
        (
            "slow-latency",
            "link",
            "d2h_latency_us = 1e30",
            &["p.toml: link.d2h_latency_us", "0 to 1 s", "got 1e30"][..],
        ),
        (
            "tiny-peak",
            "gpu.peak_tflops",
            "fp16 = 1e-300",
            &["p.toml: gpu.peak_tflops.fp16", "TFLOP/s"][..],
        ),
        (
            "eff-above-1",
            "efficiency",
            "gemm = 1.5",
            &["p.toml: efficiency.gemm", "at most 1"][..],
        ),
        (
            "eff-zero",
            "efficiency",
            "memory = 0.0",
            &["p.toml: efficiency.memory", "more than 0"][..],
        ),
        (
            "nan-peer",
            "peer",
            "gbps = nan",
            &["p.toml: peer.gbps", "got NaN"][..],
        ),
        (
            "huge-ram",
            "host",
            "ram_gib = 1e9",
            &["p.toml: host.ram_gib", "1 PiB"][..],
        ),
        (
            "zero-price",
            "gpu",
            "price_usd_per_hour = 0.0",
            &["p.toml: gpu.price_usd_per_hour", "more than 0", "got 0"][..],
        ),
        (
            "negative-price",
            "gpu",
            "price_usd_per_hour = -1.0",
            &[
                "p.toml: gpu.price_usd_per_hour",
                "price_usd_per_hour = 2.5",
                "got -1",
            ][..],
        ),
        (
            "zero-power",
            "gpu",
            "power_watts = 0.0",
            &["p.toml: gpu.power_watts", "more than 0"][..],
        ),
    ] {
        let text = format!("base = \"t4\"\n[{section}]\n{line}\n");
        simulate_fails(name, &[("p.toml", &text)], &model, needles);
    }
    // The peer-link overrides take the profile's ranges too.
    simulate_fails(
        "tiny-link-flag",
        &[],
        &with(&["--strategy", "runahead", "--link-gbps", "1e-300"]),
        &["--link-gbps", "got 1e-300"],
    );
}

/// `kvplan hardware FILE` checks the file as every command does: a price of 0 or less is one
/// line naming the field, exit 2.
#[test]
fn hardware_refuses_a_price_of_nothing() {
    let dir = TempDir::new("hw-price");
    for (file, usd) in [("zero.toml", "0"), ("neg.toml", "-1.0")] {
        std::fs::write(
            dir.path().join(file),
            format!("base = \"h100-sxm\"\n[gpu]\nprice_usd_per_hour = {usd}\n"),
        )
        .unwrap();
        let out = run_in(dir.path(), &["hardware", file]);
        expect_input_error(
            &out,
            &[&format!("{file}: gpu.price_usd_per_hour"), "more than 0"],
        );
    }
}

#[test]
fn profile_base_cycles_and_missing_bases() {
    let model = ["--model", "opt-125m", "--hardware", "a.toml"];
    simulate_fails(
        "base-cycle",
        &[
            ("a.toml", "base = \"b.toml\"\n"),
            ("b.toml", "base = \"a.toml\"\n"),
        ],
        &model,
        &["include cycle", "a.toml -> ", "b.toml -> "],
    );
    simulate_fails(
        "base-missing",
        &[("a.toml", "base = \"gone.toml\"\n")],
        &model,
        &["a.toml: base", "gone.toml"],
    );
}

#[test]
fn config_json_heads_that_do_not_divide_hidden() {
    simulate_fails(
        "bad-heads",
        &[(
            "config.json",
            r#"{"model_type":"llama","hidden_size":100,"num_attention_heads":3,"num_hidden_layers":2,"intermediate_size":256,"vocab_size":1000,"max_position_embeddings":512}"#,
        )],
        &["--model", "config.json", "--hardware", "t4"],
        &[
            "config.json: hidden_size",
            "num_attention_heads (3)",
            "head_dim",
        ],
    );
}

#[test]
fn model_directory_without_config_json() {
    let dir = TempDir::new("model-dir");
    std::fs::create_dir(dir.path().join("tiny")).unwrap();
    let out = run_in(
        dir.path(),
        &["simulate", "--model", "tiny", "--hardware", "t4"],
    );
    expect_input_error(
        &out,
        &["tiny/config.json", "directory without a config.json"],
    );
}

#[test]
fn gpu_that_cannot_fit() {
    simulate_fails(
        "gpu-nofit",
        &[],
        &[
            "--model",
            "opt-30b",
            "--hardware",
            "a100-40g-pcie4",
            "--strategy",
            "gpu-only",
            "--batch",
            "64",
            "--prompt",
            "512",
        ],
        &["does not fit", "GPU memory", "short by", "--strategy kvpr"],
    );
    simulate_fails(
        "weights-nofit",
        &[],
        &[
            "--model",
            "llama-3-70b",
            "--hardware",
            "a100-40g-pcie4",
            "--weights",
            "gpu",
            "--batch",
            "1",
        ],
        &["does not fit", "--weights offload"],
    );
}

#[test]
fn host_that_cannot_fit() {
    simulate_fails(
        "host-nofit",
        &[(
            "small.toml",
            "base = \"a100-40g-pcie4\"\n[host]\nram_gib = 4.0\n",
        )],
        &[
            "--model",
            "opt-6.7b",
            "--hardware",
            "small.toml",
            "--batch",
            "64",
            "--prompt",
            "512",
        ],
        &["does not fit", "host RAM", "short by", "host.ram_gib"],
    );
}

#[test]
fn unwritable_trace_path() {
    let dir = TempDir::new("unwritable");
    let out = run_in(
        dir.path(),
        &[
            "simulate",
            "--model",
            "opt-125m",
            "--hardware",
            "t4",
            "--gen",
            "2",
            "--trace",
            "no/such/dir/t.json",
        ],
    );
    expect_input_error(&out, &["--trace", "no/such/dir/t.json"]);
}

#[test]
fn runahead_impossible_requests() {
    let base = [
        "--model",
        "llama-2-7b",
        "--hardware",
        "a100-80g-sxm",
        "--strategy",
        "runahead",
    ];
    // `extra` sets the context unless it is the field under test.
    let with = |extra: &[&'static str]| {
        let mut v = base.to_vec();
        if !extra.contains(&"--context") {
            v.extend_from_slice(&["--context", "4096"]);
        }
        v.extend_from_slice(extra);
        v
    };
    simulate_fails(
        "ra-zero-dev",
        &[],
        &with(&["--devices", "0"]),
        &["--devices"],
    );
    simulate_fails(
        "ra-zero-link",
        &[],
        &with(&["--link-gbps", "0"]),
        &["--link-gbps", "0.001 to 100000 GB/s"],
    );
    simulate_fails(
        "ra-neg-link",
        &[],
        &with(&["--link-gbps", "-3"]),
        &["--link-gbps"],
    );
    simulate_fails(
        "ra-zero-ctx",
        &[],
        &with(&["--context", "0"]),
        &["--context (workload.prompt)", "got 0"],
    );
    // A context whose KV fits no device (memory per device).
    simulate_fails(
        "ra-huge",
        &[],
        &with(&["--context", "4000000"]),
        &["does not fit"],
    );
}

#[test]
fn headinfer_context_that_fits_nowhere() {
    simulate_fails(
        "hi-nofit",
        &[],
        &[
            "--model",
            "llama-3-8b",
            "--hardware",
            "rtx-4090",
            "--strategy",
            "headinfer",
            "--context",
            "20000000",
        ],
        // Even one KV head's ping-pong buffers outgrow the GPU: the error says how far to go.
        &["does not fit", "1 KV head per group", "at most"],
    );
}

/// A scenario file says what it is (`kind`): the other command refuses it by name, with exit 2,
/// before reading its fields; an unknown kind names the accepted ones.
#[test]
fn a_scenario_of_the_other_kind_is_refused_by_name() {
    let dir = TempDir::new("kind");
    let serve = dir.path().join("serve.toml");
    std::fs::write(
        &serve,
        "kind = \"serve\"\nmodel = \"llama-2-7b\"\nhardware = \"a100-80g-sxm\"\n[serve]\nmax_num_seqs = 8\n",
    )
    .unwrap();
    let out = run_in(dir.path(), &["simulate", "serve.toml"]);
    expect_input_error(
        &out,
        &["serve.toml", "kind = \"serve\"", "serving simulator"],
    );
    std::fs::write(
        dir.path().join("sim.toml"),
        "kind = \"simulate\"\nmodel = \"opt-1.3b\"\nhardware = \"a100-40g-pcie4\"\n[offload]\nweights = \"auto\"\n",
    )
    .unwrap();
    let out = run_in(dir.path(), &["serve", "sim.toml"]);
    expect_input_error(
        &out,
        &["sim.toml", "kind = \"simulate\"", "op-level simulator"],
    );
    std::fs::write(
        dir.path().join("odd.toml"),
        "kind = \"batch\"\nmodel = \"opt-1.3b\"\n",
    )
    .unwrap();
    let out = run_in(dir.path(), &["simulate", "odd.toml"]);
    expect_input_error(
        &out,
        &[
            "odd.toml",
            "kind: unknown scenario kind \"batch\"",
            "kind = \"serve\"",
        ],
    );
}

/// How the binary names a scenario field in an error, for both kinds of scenario: a field
/// with its flag and path (`--batch (workload.batch)`, `--qps (workload.qps)`), a product of
/// two fields by their flags, a missing model with a preset of the command's kind, a
/// planner's field by its flag alone, a serving field with flag and path.
#[test]
fn scenario_errors_name_flag_and_field_for_both_kinds() {
    let dir = TempDir::new("flag-and-field");
    let fails = |args: &[&str], whole: &str| {
        let args = match args[0] {
            "simulate" | "serve" => args.to_vec(),
            _ => [&["simulate"][..], args].concat(),
        };
        let err = expect_input_error(&run_in(dir.path(), &args), &[]);
        assert!(err.starts_with(whole), "{args:?}: {err}");
    };
    fails(
        &with(&["--batch", "0"]),
        "error: --batch (workload.batch): ",
    );
    fails(
        &with(&["--batch", "70000", "--prompt", "70000"]),
        "error: --batch x --prompt: must stay below 2^32",
    );
    fails(
        &["simulate", "--hardware", "t4"],
        "error: --model is required (a preset such as opt-6.7b",
    );
    fails(&with(&["--gpu-batches", "0"]), "error: --gpu-batches");
    let serve = [
        "serve",
        "--model",
        "llama-2-7b",
        "--hardware",
        "h100-sxm",
        "--lengths",
        "64",
        "--requests",
        "2",
    ];
    fn serving<'a>(serve: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        [serve, extra].concat()
    }
    fails(
        &serving(&serve, &["--arrivals", "all-at-once", "--block-size", "0"]),
        "error: --block-size (serve.block_size): ",
    );
    fails(
        &serving(&serve, &["--arrivals", "poisson", "--qps", "-1"]),
        "error: --qps (workload.qps): ",
    );
    fails(
        &serving(
            &serve,
            &["--arrivals", "all-at-once", "--tensor-parallel-size", "3"],
        ),
        "error: --tensor-parallel-size (serve.tensor_parallel_size)",
    );
    fails(
        &["serve", "--hardware", "h100-sxm"],
        "error: --model is required (a preset such as llama-2-7b",
    );
}

/// The serving-capacity search takes `kvplan serve`'s workload flags, but not a rate (it
/// chooses the rates), and the context-capacity command refuses them without `--slo`.
#[test]
fn capacity_workload_flags_need_the_search_and_leave_it_the_rate() {
    let dir = TempDir::new("capacity-workload");
    let base = ["--model", "llama-2-7b", "--hardware", "h100-sxm"];
    let cmd = |first: &[&'static str], extra: &[&'static str]| [first, &base[..], extra].concat();
    let out = run_in(
        dir.path(),
        &cmd(&["capacity"], &["--arrivals", "poisson", "--lengths", "64"]),
    );
    expect_input_error(&out, &["--slo: required with a serving workload"]);
    for rate in ["--qps", "--time-scale"] {
        let out = run_in(
            dir.path(),
            &cmd(&["serve-capacity", "--slo", "ttft_p99=2s"], &[rate, "2"]),
        );
        expect_input_error(&out, &[rate, "the search chooses the request rate"]);
    }
}

/// A quantisation the GPU cannot run (vLLM's minimum compute capability) and an unknown KV cache
/// element type: one line naming the flag and the field, exit 2.
#[test]
fn quantisation_the_gpu_cannot_run_and_unknown_kv_cache_dtype() {
    let dir = TempDir::new("quant");
    // A pre-Turing GPU (Volta, compute capability 7.0): AWQ needs 7.5.
    std::fs::write(
        dir.path().join("v100.toml"),
        "name = \"v100\"\nbase = \"t4\"\n[gpu]\ncompute_capability = 7.0\n",
    )
    .unwrap();
    let serve = |hw: &'static str, extra: &[&'static str]| {
        let mut a = vec![
            "serve",
            "--model",
            "llama-2-7b",
            "--hardware",
            hw,
            "--arrivals",
            "all-at-once",
            "--lengths",
            "64",
            "--requests",
            "2",
        ];
        a.extend_from_slice(extra);
        run_in(dir.path(), &a)
    };
    let err = expect_input_error(
        &serve("v100.toml", &["--quantization", "awq"]),
        &["compute capability >= 7.5", "7.0"],
    );
    assert!(
        err.starts_with("error: --quantization (serve.quantization): "),
        "{err}"
    );
    expect_input_error(
        &serve("t4", &["--quantization", "fp8"]),
        &["--quantization (serve.quantization)", ">= 8.0", "7.5"],
    );
    expect_input_error(
        &serve("t4", &["--kv-cache-dtype", "fp9"]),
        &["--kv-cache-dtype"],
    );
    std::fs::write(
        dir.path().join("s.toml"),
        "model = \"llama-2-7b\"\nhardware = \"t4\"\n[workload]\narrivals = \"all-at-once\"\n\
         requests = 2\nprompt_lengths = \"64\"\n[serve]\nkv_cache_dtype = \"fp9\"\n",
    )
    .unwrap();
    expect_input_error(
        &run_in(dir.path(), &["serve", "s.toml"]),
        &["s.toml", "kv_cache_dtype", "auto, fp8"],
    );
}

/// A max_model_len the KV cache cannot hold is the input's fault, as vLLM refuses it at start:
/// one line, exit 2.
#[test]
fn a_max_model_len_the_cache_cannot_hold_is_bad_input() {
    let dir = TempDir::new("max-model-len");
    let out = run_in(
        dir.path(),
        &[
            "serve",
            "--model",
            "llama-3.1-8b",
            "--hardware",
            "l4",
            "--arrivals",
            "all-at-once",
            "--lengths",
            "10",
            "--requests",
            "1",
        ],
    );
    expect_input_error(
        &out,
        &["max_model_len: 131072 tokens do not fit the KV cache"],
    );
}

/// `simulate` takes `--quantization` and `--kv-cache-dtype`, naming them when refused; the
/// executor, which runs 16-bit weights and KV only, refuses a quantised plan instead of running
/// something else.
#[test]
fn quantisation_flags_of_the_op_level_commands() {
    simulate_fails(
        "quant-unknown",
        &[],
        &with(&["--quantization", "int3"]),
        &["--quantization: unknown quantization 'int3'"],
    );
    simulate_fails(
        "quant-t4",
        &[],
        &[
            "--model",
            "opt-1.3b",
            "--hardware",
            "t4",
            "--quantization",
            "fp8",
        ],
        &["--quantization: a method this GPU can run", "t4 has 7.5"],
    );
    let dir = TempDir::new("quant-exec");
    let out = run_in(
        dir.path(),
        &[
            "exec",
            "--model",
            "opt-125m",
            "--hardware",
            "a100-40g-pcie4",
            "--backend",
            "cpu",
            "--kv-cache-dtype",
            "fp8",
        ],
    );
    expect_input_error(
        &out,
        &["the executor runs 16-bit weights and KV cache only"],
    );
}

/// clap's own errors stay one line and keep what clap listed under its first line: the
/// required arguments not given, the accepted values.
#[test]
fn flag_errors_name_what_is_missing_or_accepted() {
    let dir = TempDir::new("clap-errors");
    let sweep = crate::common::root().join("scenarios/sweep-kvpr-batch.toml");
    let sweep = sweep.to_str().unwrap();
    let out = run_in(dir.path(), &["sweep", sweep, "--plot", "p.svg"]);
    expect_input_error(
        &out,
        &["required arguments were not provided: --out <FILE>"],
    );
    let out = run_in(dir.path(), &["serve", "--scheduler", "fifo"]);
    expect_input_error(&out, &["'fifo'", "possible values: vllm-v1"]);
}

/// A cluster's bad settings, each one line naming its flag and field, exit 2, no file: a router
/// that needs the prefix cache with it off, an empty pool, a network of no bandwidth, a CPU tier
/// larger than the host's RAM, a malformed replica group.
#[test]
fn cluster_settings_name_their_flags() {
    let dir = TempDir::new("cluster-errors");
    let base = [
        "serve",
        "--model",
        "llama-2-7b",
        "--hardware",
        "h100-sxm",
        "--arrivals",
        "poisson",
        "--qps",
        "2",
        "--lengths",
        "64",
        "--requests",
        "4",
        "--requests-csv",
        "out.csv",
    ];
    let fails = |extra: &[&str], needles: &[&str]| {
        let before = dir.files();
        let args: Vec<&str> = [&base[..], extra].concat();
        expect_input_error(&run_in(dir.path(), &args), needles);
        assert_eq!(dir.files(), before, "an output file was written: {extra:?}");
    };
    fails(
        &[
            "--data-parallel-size",
            "2",
            "--router",
            "prefix-aware",
            "--no-enable-prefix-caching",
        ],
        &["error: --router (cluster.router): ", "prefix cach"],
    );
    fails(
        &["--prefill-replicas", "0", "--decode-replicas", "2"],
        &[
            "error: --prefill-replicas (cluster.prefill_replicas): ",
            "got 0",
        ],
    );
    fails(
        &["--prefill-replicas", "2", "--decode-replicas", "0"],
        &["error: --decode-replicas (cluster.decode_replicas): "],
    );
    fails(
        &["--prefill-replicas", "1"],
        &[
            "error: --decode-replicas (cluster.decode_replicas): ",
            "both pools",
        ],
    );
    fails(
        &[
            "--prefill-replicas",
            "1",
            "--decode-replicas",
            "1",
            "--interconnect-gbps",
            "0",
        ],
        &[
            "error: --interconnect-gbps (cluster.interconnect.gbps): ",
            "got 0",
        ],
    );
    fails(
        &["--kv-offloading-size", "5000"],
        &[
            "error: --kv-offloading-size (serve.kv_offloading_size_gib): ",
            "RAM",
        ],
    );
    fails(
        &["--data-parallel-size", "0"],
        &["error: --data-parallel-size (cluster.data_parallel_size): "],
    );
    fails(
        &["--replica", "count=two"],
        &["error: --replica count=two: count=two: `two` is not a whole number"],
    );
    fails(
        &["--replica", "gpus=2"],
        &["error: --replica gpus=2: unknown key `gpus`"],
    );
    fails(
        &["--data-parallel-size", "2", "--router-weights", "queue=x"],
        &["error: --router-weights: queue=x: `x` is not a number"],
    );
    fails(
        &["--kv-reload", "hybrid"],
        &[
            "error: --kv-reload (serve.kv_reload): ",
            "kv_offloading_size_gib",
        ],
    );
}

/// `plan-deployment`: an empty search space, a price of 0 or below, a malformed layout, a
/// router that does not exist, a bad shard: one line naming the flag, exit 2, no SVG written.
/// An objective no candidate meets exits 2 too, naming the nearest miss and how far it was.
#[test]
fn plan_deployment_refuses_bad_input_and_unmet_objectives() {
    let dir = TempDir::new("plan-deployment-errors");
    let base = [
        "plan-deployment",
        "--model",
        "llama-3.2-1b",
        "--qps",
        "4",
        "--lengths",
        "64",
        "--output-lengths",
        "16",
        "--requests",
        "200",
        "--svg",
        "front.svg",
    ];
    let fails = |extra: &[&str], needles: &[&str]| {
        let mut args: Vec<&str> = [&base[..], extra].concat();
        for (flag, value) in [("--hardware", "l4"), ("--price", "l4=0.8")] {
            if !extra.contains(&flag) {
                args.extend([flag, value]);
            }
        }
        expect_input_error(&run_in(dir.path(), &args), needles);
        assert!(dir.files().is_empty(), "a file was written: {extra:?}");
    };
    fails(
        &["--slo", "ttft_p99=1s", "--tensor-parallel-size", ""],
        &["error: --tensor-parallel-size: "],
    );
    fails(
        &["--slo", "ttft_p99=1s", "--hardware", ""],
        &["error: --hardware: ", "empty"],
    );
    fails(
        &["--slo", "ttft_p99=1s", "--price", "l4=0"],
        &["error: --price l4: ", "more than 0"],
    );
    fails(
        &["--slo", "ttft_p99=1s", "--price", "l4=-2"],
        &["error: --price l4: ", "more than 0"],
    );
    fails(
        &["--slo", "ttft_p99=1s", "--layouts", "1:0"],
        &["error: --layouts: ", "1 to 64"],
    );
    fails(
        &["--slo", "ttft_p99=1s", "--routers", "fastest"],
        &["error: --routers: ", "round-robin"],
    );
    fails(
        &["--slo", "ttft_p99=1s", "--shard", "3/2"],
        &["error: --shard: "],
    );
    fails(
        &["--slo", "ttft_p99=1s", "--quantization", "fp3"],
        &["error: --quantization: "],
    );
    fails(&[], &["error: --slo: required"]);
    // No candidate meets 10 us TPOT: exit 2, the nearest miss named with its figures; the
    // candidates still go to stdout (a whole report), the SVG is not written.
    let out = run_in(
        dir.path(),
        &[
            &base[..],
            &[
                "--slo",
                "tpot_p99=10us",
                "--hardware",
                "l4",
                "--price",
                "l4=0.8",
            ],
        ]
        .concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: --slo: no candidate meets tpot_p99=10us; nearest miss: ")
            && err.contains("tpot_p99 ")
            && err.contains("> 10us"),
        "{err}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("no candidate meets"));
    assert!(dir.files().is_empty(), "{:?}", dir.files());
}

/// An autoscaled fleet's bad settings, and diurnal arrivals' bad shapes: each one line naming its
/// flag and field, exit 2, no file.
#[test]
fn autoscale_and_diurnal_settings_name_their_flags() {
    let dir = TempDir::new("autoscale-errors");
    let base = [
        "serve",
        "--model",
        "llama-2-7b",
        "--hardware",
        "h100-sxm",
        "--lengths",
        "64",
        "--requests",
        "4",
        "--requests-csv",
        "out.csv",
    ];
    let fails = |extra: &[&str], needles: &[&str]| {
        let before = dir.files();
        let args: Vec<&str> = [&base[..], extra].concat();
        expect_input_error(&run_in(dir.path(), &args), needles);
        assert_eq!(dir.files(), before, "an output file was written: {extra:?}");
    };
    let poisson = ["--arrivals", "poisson", "--qps", "2"];
    let with = |extra: &[&'static str]| -> Vec<&'static str> { [&poisson[..], extra].concat() };
    fails(
        &with(&["--autoscale", "min=4,max=2"]),
        &[
            "error: --autoscale min=N (cluster.autoscale.min_replicas): ",
            "at most max_replicas (2)",
        ],
    );
    fails(
        &with(&["--autoscale", "target=0"]),
        &["error: --autoscale target=X (cluster.autoscale.target): "],
    );
    fails(
        &with(&[
            "--autoscale",
            "max=4",
            "--prefill-replicas",
            "1",
            "--decode-replicas",
            "1",
        ]),
        &["error: --autoscale (cluster.autoscale): ", "colocated"],
    );
    fails(
        &with(&["--autoscale", "max=4", "--router", "vllm-dp"]),
        &["error: --router (cluster.router): ", "least-requests"],
    );
    fails(
        &with(&["--autoscale", "delay=soon"]),
        &["error: --autoscale delay=soon: delay=soon: `soon` is not a duration"],
    );
    fails(
        &with(&["--autoscale", "metric=gpu"]),
        &["error: --autoscale: metric: one of concurrency, queue, kv"],
    );
    // `--slo` alone is plain serving's goodput now (tests/cli/serve.rs); a malformed one fails.
    fails(
        &with(&["--slo", "ttft=1s"]),
        &["error: --slo: ", "no percentile"],
    );
    fails(
        &["--arrivals", "diurnal:1:2:24h"],
        &[
            "error: --arrivals (workload.arrivals): ",
            "PEAK = 1 < TROUGH = 2",
        ],
    );
    fails(
        &["--arrivals", "diurnal:2:1:24h", "--qps", "3"],
        &["error: --qps (workload.qps): ", "diurnal"],
    );
}

/// An impossible measurement given to compare with (a first token after the last, a negative
/// latency): one line naming the file, the row and the field, exit 2.
#[test]
fn impossible_measurements_name_file_row_and_field() {
    let dir = TempDir::new("measured-errors");
    for (body, needle) in [
        (
            "0,100,10,0.5,0.2\n",
            "run.csv:2: ttft_s: `0.5` is above e2e_s `0.2`",
        ),
        (
            "0,100,10,-0.1,0.2\n",
            "run.csv:2: ttft_s: `-0.1` is not a latency",
        ),
    ] {
        std::fs::write(
            dir.path().join("run.csv"),
            format!("arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n{body}"),
        )
        .unwrap();
        let out = run_in(
            dir.path(),
            &[
                "serve",
                "--model",
                "llama-2-7b",
                "--hardware",
                "a100-80g-sxm",
                "--compare-to",
                "run.csv",
            ],
        );
        expect_input_error(&out, &["error: --compare-to: ", needle]);
    }
}

/// A stage table's row naming a model or a GPU kvplan does not know is refused, not skipped:
/// one line naming the file, the row, the field and the value, and the flag that replaces
/// every row's (which makes the row acceptable); `calibrate --from-runs` and
/// `validate-serving` read the same table and refuse the same.
#[test]
fn a_stage_row_naming_an_unknown_model_or_gpu_is_refused() {
    let dir = TempDir::new("stage-unknown-names");
    let table = std::fs::read_to_string(
        crate::common::root()
            .join("data/validation/real_vllm/vllm_h100_llama2-7b_mixtral-8x7b.csv"),
    )
    .unwrap();
    let lines: Vec<&str> = table.lines().collect();
    let cols: Vec<&str> = lines[0].split(',').collect();
    // The codegen run's two stages (lines 2 and 3); the second names `value` in `col`.
    let write = |file: &str, col: &str, value: &str| {
        let i = cols.iter().position(|c| *c == col).unwrap();
        let mut cells: Vec<&str> = lines[2].split(',').collect();
        cells[i] = value;
        let text = format!("{}\n{}\n{}\n", lines[0], lines[1], cells.join(","));
        std::fs::write(dir.path().join(file), text).unwrap();
    };
    write("model.csv", "model_hf", "acme/Nonexistent-7b");
    write("gpu.csv", "hardware", "MI999");
    let run = |args: &[&str]| run_in(dir.path(), args);
    let model = "model.csv:3: model_hf: `acme/Nonexistent-7b`";
    let gpu = "gpu.csv:3: hardware: `MI999`";
    expect_input_error(
        &run(&["serve", "--compare-to", "model.csv"]),
        &[&format!("error: --compare-to: {model}"), "--model"],
    );
    expect_input_error(
        &run(&["serve", "--compare-to", "gpu.csv"]),
        &[&format!("error: --compare-to: {gpu}"), "--hardware"],
    );
    for (file, needle) in [("model.csv", model), ("gpu.csv", gpu)] {
        expect_input_error(
            &run(&["calibrate", "--from-runs", file, "--base", "h100-sxm"]),
            &[&format!("error: --from-runs: {needle}")],
        );
        expect_input_error(
            &run(&["validate-serving", file]),
            &[&format!("error: {needle}")],
        );
    }
    // The flag over every row's makes the row one kvplan replays: both stages, none skipped.
    for (file, flag, value) in [
        ("gpu.csv", "--hardware", "h100-sxm"),
        ("model.csv", "--model", "llama-2-7b"),
    ] {
        let out = run(&["serve", "--compare-to", file, flag, value]);
        let text = crate::common::ok(&out);
        assert!(text.contains("2 stage(s) replayed"), "{text}");
        assert!(!text.contains("skipped"), "{text}");
    }
}

/// `--dtype bfloat16` on a GPU below compute capability 8.0 is refused as vLLM refuses it,
/// naming the fix; float16 for Gemma 2 likewise.
#[test]
fn a_dtype_the_gpu_or_model_cannot_serve_names_the_fix() {
    let dir = TempDir::new("dtype-errors");
    let base = [
        "serve",
        "--arrivals",
        "poisson",
        "--qps",
        "1",
        "--requests",
        "4",
        "--lengths",
        "64",
        "--max-model-len",
        "2048",
    ];
    for (extra, needles) in [
        (
            [
                "--model",
                "llama-3.2-1b",
                "--hardware",
                "t4",
                "--dtype",
                "bfloat16",
            ],
            ["error: --dtype (serve.dtype): ", "use --dtype half"],
        ),
        (
            [
                "--model",
                "gemma-2-9b",
                "--hardware",
                "a100-80g-sxm",
                "--dtype",
                "half",
            ],
            ["error: --dtype (serve.dtype): ", "bfloat16 or float32"],
        ),
    ] {
        let args: Vec<&str> = [&base[..], &extra[..]].concat();
        expect_input_error(&run_in(dir.path(), &args), &needles);
    }
}

/// `--vllm-version` names a release kvplan models, of the scheduler's engine, with the settings
/// that release has: otherwise one line naming the flag and the releases modelled, exit 2.
#[test]
fn a_vllm_release_not_modelled_or_not_fitting_is_one_line() {
    let dir = TempDir::new("vllm-version-errors");
    let base = [
        "serve",
        "--model",
        "llama-2-7b",
        "--hardware",
        "h100-sxm",
        "--arrivals",
        "poisson",
        "--qps",
        "1",
        "--requests",
        "4",
        "--lengths",
        "64",
    ];
    let cases: [(&[&str], &[&str]); 5] = [
        (
            &["--vllm-version", "0.12.0"],
            &[
                "--vllm-version",
                "`0.12.0` is not a vLLM release kvplan models: 0.8.5, 0.9.2, 0.10.2, 0.11.0, \
                 0.13.0, 0.15.1 (the default) with scheduler vllm-v1; 0.4.2 with vllm-v0, mixed \
                 or chunked",
            ],
        ),
        (
            &["--vllm-version", "0.15.1", "--scheduler", "vllm-v0"],
            &[
                "error: --vllm-version (serve.vllm_version): ",
                "use scheduler vllm-v1",
            ],
        ),
        (
            &["--vllm-version", "0.4"],
            &[
                "error: --vllm-version (serve.vllm_version): ",
                "0.4.2 is the 0.4 engine",
            ],
        ),
        (
            &["--vllm-version", "0.9.2", "--async-scheduling"],
            &[
                "error: --async-scheduling (serve.async_scheduling): ",
                "came in vLLM 0.10.0",
            ],
        ),
        (
            &["--vllm-version", "0.10.2", "--no-enable-chunked-prefill"],
            &[
                "error: --no-enable-chunked-prefill (serve.enable_chunked_prefill): ",
                "always chunks prefills",
            ],
        ),
    ];
    for (extra, needles) in cases {
        let args: Vec<&str> = [&base[..], extra].concat();
        expect_input_error(&run_in(dir.path(), &args), needles);
    }
}

/// Settings vLLM itself refuses are refused, naming the flag and what the release accepts:
/// `--block-size` outside the release's choices (`CacheConfig.BlockSize`, 0.4.2's
/// `--block-size` choices), a token budget below `--max-num-seqs` or, with chunked prefill off,
/// below `max_model_len` (`SchedulerConfig`'s checks, the same in every release).
#[test]
fn settings_vllm_refuses_are_refused_by_release() {
    let dir = TempDir::new("vllm-refuses");
    let base = [
        "serve",
        "--model",
        "llama-2-7b",
        "--hardware",
        "h100-sxm",
        "--arrivals",
        "poisson",
        "--qps",
        "1",
        "--requests",
        "4",
        "--lengths",
        "64",
    ];
    let cases: [(&[&str], &[&str]); 7] = [
        (
            &["--block-size", "7"],
            &[
                "error: --block-size (serve.block_size): ",
                "one of 1, 8, 16, 32, 64, 128 or 256: the block sizes vLLM 0.15.1 accepts (got 7)",
            ],
        ),
        (
            &["--block-size", "256", "--vllm-version", "0.11.0"],
            &["one of 1, 8, 16, 32, 64 or 128", "vLLM 0.11.0", "(got 256)"],
        ),
        (
            &["--block-size", "64", "--scheduler", "vllm-v0"],
            &["one of 8, 16 or 32", "vLLM 0.4.2", "(got 64)"],
        ),
        (
            &["--max-num-batched-tokens", "64", "--max-num-seqs", "128"],
            &[
                "error: --max-num-batched-tokens (serve.max_num_batched_tokens): ",
                "at least max_num_seqs (128)",
                "raise --max-num-batched-tokens or lower --max-num-seqs",
                "(got 64)",
            ],
        ),
        (
            // Before 0.10 the default max_num_seqs is not lowered to a smaller budget.
            &["--max-num-batched-tokens", "100", "--vllm-version", "0.9.2"],
            &[
                "error: --max-num-batched-tokens (serve.max_num_batched_tokens): ",
                "at least max_num_seqs (1024, vLLM 0.9.2's default on this GPU)",
            ],
        ),
        (
            &["--max-num-seqs", "10000"],
            &[
                "error: --max-num-seqs (serve.max_num_seqs): ",
                "at most max_num_batched_tokens (8192, vLLM 0.15.1's default on this GPU)",
            ],
        ),
        (
            &["--scheduler", "vllm-v0", "--max-num-batched-tokens", "1024"],
            &[
                "error: --max-num-batched-tokens (serve.max_num_batched_tokens): ",
                "at least max_model_len (4096) when chunked prefill is off",
                "vLLM 0.4.2",
            ],
        ),
    ];
    for (extra, needles) in cases {
        let args: Vec<&str> = [&base[..], extra].concat();
        expect_input_error(&run_in(dir.path(), &args), needles);
    }
    // What vLLM accepts runs: 0.15.1's own 256, and a default max_num_seqs above a small
    // budget, lowered to it from vLLM 0.10.
    for extra in [
        &["--block-size", "256"][..],
        &["--max-num-batched-tokens", "100"],
    ] {
        let args: Vec<&str> = [&base[..], extra].concat();
        crate::common::ok(&run_in(dir.path(), &args));
    }
}

/// A bad cell is reported at its own line whatever the file's line ends: `\r\n` files (the
/// stage tables in data/ are saved so) were named a line early (row 2 of a runs file at
/// `:1`), a row after blank lines at the first blank one.
#[test]
fn measured_rows_are_named_by_their_line_in_crlf_files() {
    let dir = TempDir::new("crlf-lines");
    let run = |args: &[&str]| run_in(dir.path(), args);
    std::fs::write(
        dir.path().join("r3.csv"),
        "arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\r\n0,100,10,0.1,0.2\r\n1,100,10,abc,0.2\r\n",
    )
    .unwrap();
    let serve = [
        "serve",
        "--model",
        "llama-2-7b",
        "--hardware",
        "a100-80g-sxm",
    ];
    expect_input_error(
        &run(&[&serve[..], &["--compare-to", "r3.csv"]].concat()),
        &["error: --compare-to: r3.csv:3: ttft_s: `abc` is not a number"],
    );
    std::fs::write(
        dir.path().join("blank.csv"),
        "arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n0,100,10,0.1,0.2\n\n\n1,1x0,10,0.1,0.2\n",
    )
    .unwrap();
    expect_input_error(
        &run(&[&serve[..], &["--compare-to", "blank.csv"]].concat()),
        &["blank.csv:5: prompt_tokens: `1x0`"],
    );
    // A stage table as data/ holds it (`\r\n`), its second stage's cell spoilt.
    let table = std::fs::read_to_string(
        crate::common::root()
            .join("data/validation/real_vllm/vllm_h100_llama2-7b_mixtral-8x7b.csv"),
    )
    .unwrap();
    assert!(
        table.contains("\r\n"),
        "the stage table is saved with \\r\\n"
    );
    let rows: Vec<&str> = table.split("\r\n").take(3).collect();
    let spoilt = rows[2].replacen(",591.6300,", ",5x1.6300,", 1);
    std::fs::write(
        dir.path().join("stages.csv"),
        format!("{}\r\n{}\r\n{spoilt}\r\n", rows[0], rows[1]),
    )
    .unwrap();
    expect_input_error(
        &run(&["serve", "--compare-to", "stages.csv"]),
        &["stages.csv:3: prompt_len_mean: `5x1.6300` is not a number"],
    );
    // A trace.
    std::fs::write(
        dir.path().join("trace.csv"),
        "arrived_at,num_prefill_tokens,num_decode_tokens\r\n0,10,5\r\n1,x,5\r\n",
    )
    .unwrap();
    expect_input_error(
        &run(&[
            "serve",
            "--model",
            "llama-2-7b",
            "--hardware",
            "h100-sxm",
            "--requests-trace",
            "trace.csv",
        ]),
        &["trace.csv:3: num_prefill_tokens: `x`"],
    );
}

/// A config.json value out of range names the file, the field and what is accepted; a
/// `max_position_embeddings` of 0 is the config's, not `--max-model-len`'s (which defaults
/// to it); a DeepSeek config is refused for its attention (MLA) before any expert field is
/// asked for.
#[test]
fn config_json_values_name_their_field_and_range() {
    let dir = TempDir::new("config-json-fields");
    let llama = "\"hidden_size\":4096,\"num_attention_heads\":32,\"num_key_value_heads\":8,\"num_hidden_layers\":32,\"intermediate_size\":14336,\"vocab_size\":32000";
    let files = [
        (
            "moe.json",
            format!(
                "{{\"model_type\":\"mixtral\",{llama},\"max_position_embeddings\":32768,\"num_local_experts\":1e12,\"num_experts_per_tok\":2}}"
            ),
        ),
        (
            "heads.json",
            format!(
                "{{\"model_type\":\"llama\",{llama},\"max_position_embeddings\":4096,\"head_dim\":-3}}"
            ),
        ),
        (
            "mp0.json",
            format!("{{\"model_type\":\"llama\",{llama},\"max_position_embeddings\":0}}"),
        ),
        // No expert fields at all: the attention is what is refused.
        (
            "ds.json",
            format!(
                "{{\"model_type\":\"deepseek_v3\",{llama},\"max_position_embeddings\":163840,\"kv_lora_rank\":512,\"q_lora_rank\":1536}}"
            ),
        ),
    ];
    for (name, text) in &files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let serve = |model: &str| {
        run_in(
            dir.path(),
            &[
                "serve",
                "--model",
                model,
                "--hardware",
                "h100-sxm",
                "--arrivals",
                "poisson",
                "--qps",
                "1",
                "--requests",
                "4",
                "--lengths",
                "64",
            ],
        )
    };
    expect_input_error(
        &serve("moe.json"),
        &[
            "error: moe.json: num_local_experts: must be a whole number from 1 to 65535: the routed experts per layer (got 1000000000000)",
        ],
    );
    expect_input_error(
        &serve("heads.json"),
        &["error: heads.json: head_dim: must be a whole number from 0 to 4294967295 (got -3)"],
    );
    let mp0 = "error: mp0.json: max_position_embeddings: must be at least 2";
    let err = expect_input_error(&serve("mp0.json"), &[mp0]);
    assert!(!err.contains("--max-model-len"), "{err}");
    // The op-level commands, which ran it with a note, refuse it too.
    for cmd in [
        &["simulate", "--model", "mp0.json", "--hardware", "h100-sxm"][..],
        &["capacity", "--model", "mp0.json", "--hardware", "h100-sxm"],
    ] {
        expect_input_error(&run_in(dir.path(), cmd), &[mp0]);
    }
    let err = expect_input_error(
        &serve("ds.json"),
        &[
            "error: ds.json: kv_lora_rank: unsupported attention: deepseek_v3 uses multi-head latent attention (MLA",
            "(got 512)",
        ],
    );
    assert!(!err.contains("n_routed_experts"), "{err}");
}

/// A value of the wrong type or out of a field's range in a TOML file (a scenario, a sweep's
/// base, base file or point, a hardware profile) names the field and its line, in words: not
/// the bare "invalid value: integer `-1`, expected u32".
#[test]
fn toml_values_of_the_wrong_type_name_their_field() {
    let dir = TempDir::new("toml-fields");
    let workload = "[workload]\narrivals = \"poisson\"\nqps = 1\nrequests = 4\nprompt_lengths = \"64\"\noutput_lengths = \"16\"\n";
    let files = [
        (
            "scenario.toml",
            format!("[serve]\nmax_num_seqs = -1\n{workload}"),
        ),
        (
            "sweep.toml",
            format!(
                "kind = \"serve\"\n[base]\nmodel = \"llama-2-7b\"\nhardware = \"h100-sxm\"\n[base.serve]\nmax_num_seqs = -1\n[base.{}[axes]\n\"workload.qps\" = [1, 2]\n",
                &workload[1..]
            ),
        ),
        (
            "base-file.toml",
            "kind = \"serve\"\nbase_file = \"scenario.toml\"\n[axes]\n\"workload.qps\" = [1, 2]\n"
                .to_string(),
        ),
        (
            "points.toml",
            format!(
                "kind = \"serve\"\n[base]\nmodel = \"llama-2-7b\"\nhardware = \"h100-sxm\"\n[base.{}[[points]]\n\"workload.qps\" = 2\n\"serve.max_num_seqs\" = -1\n",
                &workload[1..]
            ),
        ),
        (
            "gpu.toml",
            "base = \"h100-sxm\"\n\n[host]\nram_gib = \"lots\"\n".to_string(),
        ),
    ];
    for (name, text) in &files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    let words = "invalid value: integer `-1`, expected a whole number from 0 to 4294967295";
    let run = |args: &[&str]| run_in(dir.path(), args);
    let serve = [
        "serve",
        "scenario.toml",
        "--model",
        "llama-2-7b",
        "--hardware",
        "h100-sxm",
    ];
    expect_input_error(
        &run(&serve),
        &[&format!(
            "error: scenario.toml: line 2: serve.max_num_seqs: {words}"
        )],
    );
    expect_input_error(
        &run(&["sweep", "sweep.toml", "--out", "o.csv"]),
        &[&format!(
            "error: sweep.toml:6: base.serve.max_num_seqs: {words}"
        )],
    );
    expect_input_error(
        &run(&["sweep", "base-file.toml", "--out", "o.csv"]),
        &[&format!(
            "error: scenario.toml:2: serve.max_num_seqs: {words}"
        )],
    );
    expect_input_error(
        &run(&["sweep", "points.toml", "--out", "o.csv"]),
        &[&format!(
            "error: points.toml: points[0]: serve.max_num_seqs (-1): {words}"
        )],
    );
    expect_input_error(
        &run(&["simulate", "--model", "opt-1.3b", "--hardware", "gpu.toml"]),
        &[
            "error: gpu.toml: line 4: host.ram_gib: invalid type: string \"lots\", expected a number",
        ],
    );
    assert!(!dir.path().join("o.csv").exists());
}

/// A `--compare-to` file that is empty, a JSON array or another JSON value is refused saying
/// what is expected (a `vllm bench serve` result object, or a per-request CSV), not with the
/// CSV header's message.
#[test]
fn compare_to_json_of_the_wrong_shape_says_what_is_expected() {
    let dir = TempDir::new("compare-json-shape");
    let object = "expected the JSON object `vllm bench serve --save-detailed` writes";
    for (file, text, words) in [
        ("empty.json", "", &["empty.json: is empty; ", object][..]),
        (
            "list.json",
            "[]\n",
            &["list.json: is a JSON array; ", object],
        ),
        (
            "numbers.json",
            " [1, 2]",
            &["numbers.json: is a JSON array; "],
        ),
        (
            "null.json",
            "null",
            &["null.json: is not a JSON object; ", object],
        ),
        (
            "other.json",
            "{\"duration\": 3}",
            &["other.json: no `input_lens` array"],
        ),
        (
            "blank.csv",
            " \n\n",
            &[
                "blank.csv: is empty; expected a per-request CSV",
                "or a `vllm bench serve",
            ],
        ),
    ] {
        std::fs::write(dir.path().join(file), text).unwrap();
        let out = run_in(
            dir.path(),
            &[
                "serve",
                "--model",
                "llama-2-7b",
                "--hardware",
                "a100-80g-sxm",
                "--compare-to",
                file,
            ],
        );
        let err = expect_input_error(&out, &[&["error: --compare-to: "][..], words].concat());
        assert!(!err.contains("no arrival column"), "{err}");
    }
}

/// A row with more fields than its header is refused, naming the file, the line and both
/// counts: a trace (read before only up to its columns), a per-request runs CSV (the extra
/// cells were dropped: `1,000` read as two cells shifted every column after it) and a stage
/// table (the csv crate's "found record with 42 fields" at the wrong line).
#[test]
fn rows_wider_than_their_header_are_refused() {
    let dir = TempDir::new("wide-rows");
    let run = |args: &[&str]| run_in(dir.path(), args);
    std::fs::write(
        dir.path().join("trace.csv"),
        "arrived_at,num_prefill_tokens,num_decode_tokens\n0,10,5\n1,10,5,7\n",
    )
    .unwrap();
    expect_input_error(
        &run(&[
            "serve",
            "--model",
            "llama-2-7b",
            "--hardware",
            "h100-sxm",
            "--requests-trace",
            "trace.csv",
        ]),
        &["trace.csv:3: 4 fields, but the header (line 1) has 3"],
    );
    std::fs::write(
        dir.path().join("run.csv"),
        "arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n0,100,10,0.1,0.2\n1,1,000,10,0.1,0.2\n",
    )
    .unwrap();
    let serve = [
        "serve",
        "--model",
        "llama-2-7b",
        "--hardware",
        "a100-80g-sxm",
    ];
    expect_input_error(
        &run(&[&serve[..], &["--compare-to", "run.csv"]].concat()),
        &["error: --compare-to: run.csv:3: 6 fields, but the header has 5; quote a cell"],
    );
    let table = std::fs::read_to_string(
        crate::common::root()
            .join("data/validation/real_vllm/vllm_h100_llama2-7b_mixtral-8x7b.csv"),
    )
    .unwrap();
    let rows: Vec<&str> = table.split("\r\n").take(3).collect();
    std::fs::write(
        dir.path().join("stages.csv"),
        format!("{}\r\n{}\r\n{},extra\r\n", rows[0], rows[1], rows[2]),
    )
    .unwrap();
    expect_input_error(
        &run(&["serve", "--compare-to", "stages.csv"]),
        &["error: --compare-to: stages.csv:3: 42 fields, but the header has 41"],
    );
}
