//! Messages that name the right option and say what is wrong, notes for settings that are
//! ignored or near a limit (held until the run succeeds), and the validate CSV's signed errors
//! (issue 17, items 10 and 11).

use crate::common::{TempDir, run_in};

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn refused(d: &TempDir, args: &[&str]) -> String {
    let o = run_in(d.path(), args);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
    assert_eq!(e.lines().count(), 1, "{args:?}: {e}");
    e
}

const SLO: [&str; 12] = [
    "capacity",
    "--slo",
    "ttft_p99=2s",
    "--model",
    "opt-125m",
    "--hardware",
    "h100-sxm",
    "--arrivals",
    "poisson",
    "--lengths",
    "32",
    "--output-lengths",
];

#[test]
fn the_search_tolerance_is_named_by_its_flag() {
    let d = TempDir::new("msg-tolerance");
    let mut args = SLO.to_vec();
    args.extend(["4", "--qps-tolerance", "0"]);
    let e = refused(&d, &args);
    assert!(e.starts_with("error: --qps-tolerance: 0 must be"), "{e}");
}

/// A directory or a device given as a profile or model says so (it said "no such file").
#[test]
fn a_directory_or_a_device_is_not_a_profile() {
    let d = TempDir::new("msg-notafile");
    std::fs::create_dir(d.path().join("dir")).unwrap();
    let e = refused(
        &d,
        &["simulate", "--model", "opt-1.3b", "--hardware", "dir/"],
    );
    assert_eq!(
        e.trim_end(),
        "error: --hardware: a directory; expected a hardware profile (a TOML file) (got dir/)"
    );
    let e = refused(
        &d,
        &["simulate", "--model", "opt-1.3b", "--hardware", "/dev/null"],
    );
    assert!(
        e.starts_with("error: --hardware: not a regular file; expected a hardware profile"),
        "{e}"
    );
    let e = refused(
        &d,
        &["simulate", "--model", "/dev/null", "--hardware", "t4"],
    );
    assert!(e.starts_with("error: --model: not a regular file"), "{e}");
    let e = refused(
        &d,
        &[
            "serve",
            "--model",
            "llama-2-7b",
            "--hardware",
            "dir",
            "--arrivals",
            "poisson",
            "--qps",
            "1",
            "--lengths",
            "8",
        ],
    );
    assert!(e.starts_with("error: --hardware: a directory"), "{e}");
}

/// Absurd numbers print in scientific notation, and a budget no deployment could have is
/// refused at once.
#[test]
fn absurd_numbers_read_as_numbers_and_impossible_sizes_are_errors() {
    let d = TempDir::new("msg-numbers");
    let e = refused(
        &d,
        &[
            "plan-deployment",
            "--model",
            "llama-2-7b",
            "--hardware",
            "a100-80g-sxm",
            "--slo",
            "ttft_p99=2s",
            "--qps",
            "1",
            "--max-gpus",
            "0",
        ],
    );
    assert_eq!(e.trim_end(), "error: --max-gpus: 0 must be from 1 to 4096");
    let e = refused(
        &d,
        &[
            "serve",
            "--model",
            "llama-2-7b",
            "--hardware",
            "a100-80g-sxm",
            "--arrivals",
            "poisson",
            "--qps",
            "1",
            "--lengths",
            "8",
            "--requests",
            "2",
            "--gpu-memory-utilization",
            "1e300",
        ],
    );
    assert!(e.ends_with("(got 1e300)\n"), "{e}");
}

/// The option is named as it was typed: `--context` is `--prompt`'s alias.
#[test]
fn an_alias_is_named_as_typed() {
    let d = TempDir::new("msg-alias");
    let e = refused(
        &d,
        &[
            "simulate",
            "--model",
            "opt-1.3b",
            "--hardware",
            "t4",
            "--context",
            "0",
        ],
    );
    assert!(e.starts_with("error: --context (workload.prompt):"), "{e}");
    let e = refused(
        &d,
        &[
            "simulate",
            "--model",
            "opt-1.3b",
            "--hardware",
            "t4",
            "--prompt",
            "0",
        ],
    );
    assert!(e.starts_with("error: --prompt (workload.prompt):"), "{e}");
}

const SWAP: [&str; 16] = [
    "serve",
    "--model",
    "llama-2-7b",
    "--hardware",
    "a100-80g-sxm",
    "--arrivals",
    "poisson",
    "--qps",
    "5",
    "--lengths",
    "1000",
    "--output-lengths",
    "500",
    "--requests",
    "50",
    "--scheduler=vllm-v0",
];

/// Swap preemption without swap space recomputes; the run says so.
#[test]
fn swap_without_swap_space_is_noted() {
    let d = TempDir::new("note-swap0");
    let mut args = SWAP.to_vec();
    args.extend(["--preemption", "swap", "--swap-space-gib", "0"]);
    let o = run_in(d.path(), &args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "note: --swap-space-gib leaves 0 bytes of swap space, less than one KV block (8388608 bytes): --preemption swap cannot swap, so every preemption recomputes\n"
    );
}

/// vLLM's rule (`CacheConfig.verify_with_parallel_config`): above 70% of host RAM refused,
/// above 40% a note.
#[test]
fn swap_space_beyond_host_ram_is_refused_by_vllms_rule() {
    let d = TempDir::new("note-swapbig");
    let mut args = SWAP.to_vec();
    args.extend(["--swap-space-gib", "1e20"]);
    let e = refused(&d, &args);
    assert!(
        e.starts_with("error: --swap-space-gib (serve.swap_space_gib): expected at most 716.8 GiB per GPU: vLLM refuses a swap space above 70% of host RAM (1024 GiB on a100-80g-sxm"),
        "{e}"
    );
    assert!(e.ends_with("(got 1e20)\n"), "{e}");
    let mut args = SWAP.to_vec();
    args.extend(["--swap-space-gib", "500"]);
    let o = run_in(d.path(), &args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("note: --swap-space-gib 500 GiB per GPU on 1 tensor-parallel GPU(s) is 49% of the host's 1024 GiB of RAM"),
        "{}",
        stderr(&o)
    );
}

/// A note about a setting is held until the run succeeds: a run that fails later prints its
/// error alone (the note came first, then the error).
#[test]
fn notes_wait_for_the_run_to_succeed() {
    let d = TempDir::new("note-held");
    let mut args = SWAP.to_vec();
    args.extend([
        "--preemption",
        "swap",
        "--swap-space-gib",
        "0",
        "--summary-json",
        "no/such/dir/s.json",
    ]);
    let o = run_in(d.path(), &args);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.starts_with("error: "), "{e}");
    // The planner's note of a split without decode steps, then a trace that cannot be written.
    let e = refused(
        &d,
        &[
            "simulate",
            "--model",
            "opt-1.3b",
            "--hardware",
            "t4",
            "--strategy",
            "kvpr",
            "--split",
            "10",
            "--gen",
            "1",
            "--trace",
            "no/such/dir/t.csv",
        ],
    );
    assert!(e.starts_with("error: --trace: "), "{e}");
    // With the trace written, the note is printed.
    let o = run_in(
        d.path(),
        &[
            "simulate",
            "--model",
            "opt-1.3b",
            "--hardware",
            "t4",
            "--strategy",
            "kvpr",
            "--split",
            "10",
            "--gen",
            "1",
        ],
    );
    assert!(o.status.success());
    assert!(stderr(&o).starts_with("note: --split 10 (offload.split) has no effect"));
}

/// `capacity --slo` sizes serving capacity: the context-capacity options it does not read are
/// noted.
#[test]
fn capacity_slo_notes_the_options_it_ignores() {
    let d = TempDir::new("note-slo");
    let mut args = SLO.to_vec();
    args.extend([
        "4",
        "--qps-tolerance",
        "0.5",
        "--strategy",
        "headinfer",
        "--batch",
        "4",
    ]);
    let o = run_in(d.path(), &args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stderr(&o),
        "note: --strategy, --batch are ignored with --slo: the search serves the workload on vLLM's engine, which forms its own batches; these options size the longest context, without --slo\n"
    );
}

/// Every row of validate's CSV has the signed error `simulated / measured - 1`, the first
/// (end to end) included (it was the absolute error).
#[test]
fn validate_csv_errors_are_all_signed() {
    let d = TempDir::new("validate-signed");
    let o = run_in(
        d.path(),
        &[
            "validate",
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
        ],
    );
    let csv = String::from_utf8_lossy(&o.stdout).into_owned();
    let mut rows = 0;
    for line in csv.lines().skip(1) {
        let f: Vec<&str> = line.split(',').collect();
        let (s, m, e): (f64, f64, f64) = (
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
            f[3].parse().unwrap(),
        );
        assert!((e - (s / m - 1.0)).abs() < 1e-9, "{line}");
        rows += 1;
    }
    let e2e = csv.lines().nth(1).unwrap();
    assert!(e2e.starts_with("end_to_end,"), "{csv}");
    // A T4 simulated is faster than this CPU measured: the error is negative.
    assert!(e2e.split(',').nth(3).unwrap().starts_with('-'), "{csv}");
    assert!(rows > 3, "{csv}");
}
