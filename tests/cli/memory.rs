//! Memory: a serving run holds the requests in flight, not every request; what must be held has
//! a ceiling; an allocation that cannot be made is one line, never an abort (exit 134). The
//! limits are address-space limits (`ulimit -v`) on the real binary.

use std::process::{Command, Output};

use crate::common::{TempDir, bin};

/// Runs `kvplan args...` in `dir` under an address-space limit of `kib` KiB.
fn run_limited(dir: &std::path::Path, kib: u64, args: &[&str]) -> Output {
    Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -v {kib} && exec \"$0\" \"$@\""))
        .arg(bin())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("sh runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Two million short Poisson requests: held whole they take about 180 MB for the requests
/// alone (before this, the run aborted with exit 134 under this limit); drawn as they are
/// served the run needs a few tens of MB.
const MANY: [&str; 14] = [
    "serve",
    "--model",
    "opt-1.3b",
    "--hardware",
    "a100-80g-sxm",
    "--arrivals",
    "poisson",
    "--qps",
    "1000",
    "--lengths",
    "16",
    "--output-lengths",
    "1",
    "--requests",
];

#[test]
#[cfg(target_os = "linux")]
fn two_million_requests_stream_under_a_150_mb_limit() {
    let d = TempDir::new("mem-stream");
    let mut args = MANY.to_vec();
    args.push("2000000");
    let o = run_limited(d.path(), 150_000, &args);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("2000000 (2000000 finished, 0 rejected)"),
        "{out}"
    );
}

/// The records of every request are held for a per-request CSV: where they do not fit, one
/// line and exit 1 before the run, and no file.
#[test]
#[cfg(target_os = "linux")]
fn records_that_do_not_fit_are_one_line_not_an_abort() {
    let d = TempDir::new("mem-records");
    let mut args = MANY.to_vec();
    args.extend(["2000000", "--requests-csv", "r.csv"]);
    let o = run_limited(d.path(), 150_000, &args);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.starts_with("error: out of memory: cannot hold one record per request"),
        "{e}"
    );
    assert!(d.files().is_empty(), "{:?}", d.files());
}

/// Past the records' ceiling the run is refused at once, naming --requests.
#[test]
fn records_past_the_ceiling_are_refused_at_once() {
    let d = TempDir::new("mem-ceiling");
    let mut args = MANY.to_vec();
    args.extend(["100000000", "--requests-csv", "r.csv"]);
    let o = run_limited(d.path(), 3_000_000, &args);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.starts_with(
            "error: --requests (workload.requests): 100000000 is more than the 10000000 requests"
        ),
        "{e}"
    );
    assert!(d.files().is_empty());
}

/// The CPU executor's buffers for OPT-6.7B do not fit 1.5 GB: one line, exit 1 (it aborted
/// with "memory allocation of 134217728 bytes failed", exit 134).
#[test]
#[cfg(target_os = "linux")]
fn exec_under_a_memory_limit_is_one_line_not_an_abort() {
    let d = TempDir::new("mem-exec");
    let args = [
        "exec",
        "--backend",
        "cpu",
        "--model",
        "opt-6.7b",
        "--hardware",
        "a100-80g-sxm",
    ];
    let o = run_limited(d.path(), 1_500_000, &args);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(e.starts_with("error: cannot allocate "), "{e}");
}

/// A malformed `--compare-to` JSON is refused in constant memory: read as it streams, its shape
/// checked before any value is kept. Ten million numbers in a 20 MB file held as a JSON tree
/// took about 350 MB (a 140 MB one 2.3 GB); under this limit that aborted.
#[test]
#[cfg(target_os = "linux")]
fn a_large_malformed_compare_to_json_is_refused_under_a_100_mb_limit() {
    let d = TempDir::new("mem-json");
    let mut text = String::with_capacity(20_000_100);
    text.push_str("{\"input_lens\":[");
    text.push_str(&"1,".repeat(10_000_000));
    text.push('1');
    std::fs::write(d.path().join("big.json"), &text).unwrap();
    let o = run_limited(
        d.path(),
        100_000,
        &[
            "serve",
            "--model",
            "llama-2-7b",
            "--hardware",
            "a100-80g-sxm",
            "--compare-to",
            "big.json",
        ],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("big.json: not JSON: EOF while parsing a list"),
        "{err}"
    );
}
