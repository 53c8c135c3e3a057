//! Fuzzing of every parser that reads a user's file: byte mutations (bits flipped, bytes and
//! tricky tokens inserted, runs deleted or duplicated, the file truncated) of a valid seed file
//! from the repository, handed to the library's own parse function, not to the binary. Any
//! result is fine, an error most of all; a panic is a failure, and proptest shrinks it to the
//! fewest mutations that still panic.
//!
//! The default suite runs a bounded number of cases per target from a fixed seed (the same
//! inputs every run); `KVPLAN_FUZZ_CASES` sets the cases per round, `KVPLAN_FUZZ_SEED` the
//! seed, and `KVPLAN_FUZZ_SECONDS` keeps starting new rounds (the next seed each) until that
//! many seconds have passed. `docs/testing.md` ("Fuzzing") has the commands.
//!
//! Parse and check only: a scenario is read and resolved, not run (a mutated size could ask for
//! hours of simulation, which is not a parser's bug).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestRng, TestRunner};

use crate::common::{TempDir, root};

/// Cases per target and round in the default suite.
const DEFAULT_CASES: u32 = 96;

/// Tokens worth inserting whole: numbers at the edges of the integer and float types, the
/// characters that open or close a structure in TOML, JSON or CSV.
const TOKENS: [&str; 24] = [
    "0",
    "-1",
    "-0",
    "4294967296",
    "18446744073709551616",
    "1e309",
    "-1e309",
    "nan",
    "inf",
    "0.0",
    "1e-320",
    "\"",
    "'",
    ",",
    "\n",
    "=",
    "[",
    "]",
    "{",
    "}",
    "[[a]]",
    "\u{feff}",
    "\r\n",
    ":",
];

/// One edit of a seed. Positions are taken modulo the length at the time of the edit (so they
/// shrink towards the start).
#[derive(Debug, Clone)]
enum Mutation {
    /// Flip one bit of the byte at the position.
    Flip(usize, u8),
    /// Insert a byte.
    Insert(usize, u8),
    /// Insert one of [`TOKENS`].
    Token(usize, usize),
    /// Delete up to `n` bytes.
    Delete(usize, usize),
    /// Repeat up to `n` bytes after themselves.
    Duplicate(usize, usize),
    /// Cut the file at the position.
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = 0usize..1 << 20;
    prop_oneof![
        3 => (at.clone(), 0u8..8).prop_map(|(i, b)| Mutation::Flip(i, b)),
        2 => (at.clone(), any::<u8>()).prop_map(|(i, b)| Mutation::Insert(i, b)),
        4 => (at.clone(), 0..TOKENS.len()).prop_map(|(i, t)| Mutation::Token(i, t)),
        2 => (at.clone(), 1usize..64).prop_map(|(i, n)| Mutation::Delete(i, n)),
        1 => (at.clone(), 1usize..64).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
        1 => at.prop_map(Mutation::Truncate),
    ]
}

fn apply(seed: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for m in mutations {
        let at = |i: usize, len: usize| if len == 0 { 0 } else { i % (len + 1) };
        match *m {
            Mutation::Flip(i, bit) if !b.is_empty() => {
                let i = i % b.len();
                b[i] ^= 1 << bit;
            }
            Mutation::Flip(..) => {}
            Mutation::Insert(i, x) => b.insert(at(i, b.len()), x),
            Mutation::Token(i, t) => {
                let i = at(i, b.len());
                b.splice(i..i, TOKENS[t].bytes());
            }
            Mutation::Delete(i, n) => {
                let i = at(i, b.len());
                let end = (i + n).min(b.len());
                b.drain(i..end);
            }
            Mutation::Duplicate(i, n) => {
                let i = at(i, b.len());
                let end = (i + n).min(b.len());
                let run: Vec<u8> = b[i..end].to_vec();
                b.splice(end..end, run);
            }
            Mutation::Truncate(i) => b.truncate(at(i, b.len())),
        }
    }
    b
}

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v}: expected a whole number")),
    )
}

/// FNV-1a of the target's name: each target its own stream of inputs.
fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Runs `check` on mutations of every seed of `target`: `KVPLAN_FUZZ_CASES` cases (default
/// [`DEFAULT_CASES`]) per round from a fixed seed, rounds until `KVPLAN_FUZZ_SECONDS` have
/// passed (one round without it). A panic fails the test with the shrunk input.
fn fuzz(target: &str, seeds: &[(String, Vec<u8>)], check: impl Fn(&[u8])) {
    assert!(!seeds.is_empty());
    let cases = env_u64("KVPLAN_FUZZ_CASES").map_or(DEFAULT_CASES, |c| c as u32);
    let base = env_u64("KVPLAN_FUZZ_SEED").unwrap_or(0);
    let budget = env_u64("KVPLAN_FUZZ_SECONDS").map(Duration::from_secs);
    let start = Instant::now();
    let strategy = (0..seeds.len(), proptest::collection::vec(mutation(), 1..8));
    let mut round = 0u64;
    loop {
        let seed = name_hash(target) ^ base.wrapping_add(round);
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        let config = Config {
            cases,
            failure_persistence: None,
            max_shrink_iters: 4096,
            ..Config::default()
        };
        let mut runner =
            TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &key));
        let result = runner.run(&strategy, |(i, mutations)| {
            let input = apply(&seeds[i].1, &mutations);
            check(&input);
            Ok::<(), TestCaseError>(())
        });
        if let Err(e) = result {
            let detail = match &e {
                proptest::test_runner::TestError::Fail(why, (i, mutations)) => {
                    let input = apply(&seeds[*i].1, mutations);
                    format!(
                        "{why}\nseed file {}, mutations {mutations:?}\ninput: {:?}",
                        seeds[*i].0,
                        String::from_utf8_lossy(&input)
                    )
                }
                other => other.to_string(),
            };
            panic!(
                "fuzz target {target} (KVPLAN_FUZZ_SEED={}, round {round}): a parser panicked: {detail}",
                base.wrapping_add(round)
            );
        }
        round += 1;
        if budget.is_none_or(|b| start.elapsed() >= b) {
            break;
        }
    }
    if budget.is_some() {
        // A long run says how much it did, for the record in docs/testing.md.
        eprintln!(
            "fuzz target {target}: {round} rounds of {cases} cases ({} inputs) in {:.0} s, no panic",
            round * u64::from(cases),
            start.elapsed().as_secs_f64()
        );
    }
}

/// The file at `path` (relative to the repository), whole or its first `lines` lines.
fn seed(path: &str, lines: Option<usize>) -> (String, Vec<u8>) {
    let text = std::fs::read_to_string(root().join(path)).unwrap();
    let text = match lines {
        Some(n) => text.lines().take(n).map(|l| format!("{l}\n")).collect(),
        None => text,
    };
    (path.to_string(), text.into_bytes())
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A file in `dir` holding `bytes` (for the readers that take a path).
fn file(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

/// Every seed parses as it is: the mutations start from a file that reaches the deep checks.
fn seeds_parse(seeds: &[(String, Vec<u8>)], parse: impl Fn(&[u8]) -> Result<(), String>) {
    for (name, bytes) in seeds {
        if let Err(e) = parse(bytes) {
            panic!("seed {name} does not parse: {e}");
        }
    }
}

fn scenario_seeds(kind: &str) -> Vec<(String, Vec<u8>)> {
    let mut seeds: Vec<(String, Vec<u8>)> = [
        "regress/opt-1.3b-kvpr.toml",
        "regress/opt-1.3b-t4-column.toml",
        "regress/opt-1.3b-t4-split.toml",
        "regress/llama-3-8b-headinfer.toml",
        "regress/llama-2-7b-runahead.toml",
        "scenarios/opt-6.7b-a100-latency.toml",
        "regress/llama-2-7b-serve-prefix.toml",
        "regress/llama-2-7b-serve.toml",
        "scenarios/llama-2-7b-a100-serve.toml",
        "scenarios/cluster-prefix-routers.toml",
        "scenarios/cluster-disaggregated.toml",
    ]
    .into_iter()
    .map(|p| seed(p, None))
    .filter(|(_, b)| text(b).contains("kind = \"serve\"") == (kind == "serve"))
    .collect();
    // A trace path that resolves from the temporary directory: the small fixture trace.
    let trace = root().join("workloads/tests/fixtures/tiny.csv");
    for (_, b) in &mut seeds {
        *b = text(b)
            .replace(
                "\"../data/traces/splitwise_conv.csv\"",
                &format!("{:?}", trace.display().to_string()),
            )
            .into_bytes();
    }
    seeds
}

fn fuzz_scenarios(kind: kvplan_vocab::RunKind, name: &str) {
    let dir = TempDir::new(&format!("fuzz-{name}"));
    let seeds = scenario_seeds(kind.as_str());
    let read = |b: &[u8]| {
        let path = file(dir.path(), "scenario.toml", b);
        kvplan_run::RawScenario::read(&path, kind).and_then(kvplan_run::RawScenario::resolve)
    };
    seeds_parse(&seeds, |b| read(b).map(|_| ()).map_err(|e| e.to_string()));
    fuzz(name, &seeds, |b| {
        let _ = read(b);
    });
}

#[test]
fn scenario_toml_simulate() {
    fuzz_scenarios(kvplan_vocab::RunKind::Simulate, "scenario-simulate");
}

#[test]
fn scenario_toml_serve() {
    fuzz_scenarios(kvplan_vocab::RunKind::Serve, "scenario-serve");
}

#[test]
fn hardware_profile_toml() {
    let seeds = [
        seed("vocab/profiles/t4.toml", None),
        seed("vocab/profiles/a100-80g-sxm.toml", None),
        seed("vocab/profiles/mi300x.toml", None),
        seed("calibrate/profiles/h100-sxm-kvplan-exec.toml", None),
        seed("scenarios/a100-40g-1tb-host.toml", None),
    ];
    let parse = |b: &[u8]| kvplan_vocab::HardwareProfile::from_toml_str(&text(b), "fuzz.toml");
    seeds_parse(&seeds, |b| parse(b).map(|_| ()).map_err(|e| e.to_string()));
    fuzz("hardware-profile", &seeds, |b| {
        let _ = parse(b);
    });
}

#[test]
fn sweep_toml() {
    let seeds = [
        seed("scenarios/sweep-kvpr-batch.toml", None),
        seed("scenarios/sweep-serve-qps.toml", None),
    ];
    let path = root().join("scenarios/fuzz-sweep.toml");
    let parse = |b: &[u8]| kvplan_sweep::Sweep::parse(&text(b), &path);
    seeds_parse(&seeds, |b| parse(b).map(|_| ()).map_err(|e| e.to_string()));
    fuzz("sweep", &seeds, |b| {
        let _ = parse(b);
    });
}

#[test]
fn hf_config_json() {
    let seeds = [
        seed("vocab/models/llama-3-8b.json", None),
        seed("vocab/models/opt-1.3b.json", None),
        seed("vocab/models/mixtral-8x7b.json", None),
        seed("vocab/models/qwen3-30b-a3b.json", None),
        seed("vocab/models/gemma-2-9b.json", None),
        seed("vocab/models/falcon-7b.json", None),
        seed("vocab/models/yarn-llama-2-7b.json", None),
    ];
    let parse = |b: &[u8]| kvplan_vocab::ModelSpec::from_hf_config_str(&text(b), "fuzz", "fuzz");
    seeds_parse(&seeds, |b| parse(b).map(|_| ()).map_err(|e| e.to_string()));
    fuzz("hf-config", &seeds, |b| {
        let _ = parse(b);
    });
}

#[test]
fn request_trace_csv() {
    let seeds = [
        seed("workloads/tests/fixtures/tiny.csv", None),
        seed("data/traces/splitwise_conv.csv", Some(40)),
    ];
    let parse = |b: &[u8]| kvplan_workloads::Trace::from_reader(b, "fuzz.csv");
    seeds_parse(&seeds, |b| parse(b).map(|_| ()).map_err(|e| e.to_string()));
    fuzz("trace", &seeds, |b| {
        let _ = parse(b);
    });
}

#[test]
fn measured_kernel_tables_csv() {
    let gemm = [seed(
        "calibrate/data/measured_kernels/a100_Llama-2-7b-hf.csv",
        Some(60),
    )];
    let parse = |b: &[u8]| {
        kvplan_calibrate::table::MeasuredTable::parse(&text(b), "fuzz.csv")
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    seeds_parse(&gemm, parse);
    fuzz("kernel-table", &gemm, |b| {
        let _ = parse(b);
    });
    let attention = [seed(
        "calibrate/data/measured_kernels/a100_Llama-2-7b-hf_attention.csv",
        Some(60),
    )];
    let parse = |b: &[u8]| {
        kvplan_calibrate::attention::AttentionTable::parse(&text(b), "fuzz.csv")
            .map(|_| ())
            .map_err(|e| e.to_string())
    };
    seeds_parse(&attention, parse);
    fuzz("attention-table", &attention, |b| {
        let _ = parse(b);
    });
}

#[test]
fn measured_runs_vllm_json_and_csv() {
    use kvplan_serve::runs::{MeasuredRun, StageRun};
    let runs = [
        seed("tests/fixtures/fuzz-vllm-bench-serve.json", None),
        seed("tests/fixtures/fuzz-requests.csv", None),
    ];
    let parse = |b: &[u8]| MeasuredRun::from_text(&text(b), "fuzz");
    seeds_parse(&runs, |b| parse(b).map(|_| ()).map_err(|e| e.to_string()));
    fuzz("measured-run", &runs, |b| {
        let _ = parse(b);
    });
    let stages = [seed(
        "data/validation/real_vllm/vllm_h100_llama2-7b_mixtral-8x7b.csv",
        Some(12),
    )];
    let parse = |b: &[u8]| StageRun::parse(&text(b), "fuzz.csv");
    seeds_parse(&stages, |b| parse(b).map(|_| ()).map_err(|e| e.to_string()));
    fuzz("stage-table", &stages, |b| {
        let _ = parse(b);
    });
}

/// The mutations themselves: each kind edits as described, and positions wrap.
#[test]
fn mutations_edit_the_seed() {
    let s = b"abcdef";
    assert_eq!(apply(s, &[Mutation::Flip(0, 0)]), b"`bcdef");
    assert_eq!(apply(s, &[Mutation::Insert(7, b'x')]), b"xabcdef");
    assert_eq!(apply(s, &[Mutation::Token(6, 11)]), b"abcdef\"");
    assert_eq!(apply(s, &[Mutation::Delete(1, 2)]), b"adef");
    assert_eq!(apply(s, &[Mutation::Duplicate(4, 9)]), b"abcdefef");
    assert_eq!(apply(s, &[Mutation::Truncate(3)]), b"abc");
    assert_eq!(apply(b"", &[Mutation::Flip(3, 1)]), b"");
}
