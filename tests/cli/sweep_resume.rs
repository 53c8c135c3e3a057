//! `kvplan sweep --out FILE --resume` killed for real: a child kvplan interrupted (SIGINT,
//! SIGTERM) or killed outright (SIGKILL) at a seeded moment after some rows have finished, then
//! run again with `--resume`: the rows it kept are counted, and the file it ends with is the
//! uninterrupted run's, byte for byte. Also what a killed run leaves behind (a stale lock file,
//! a temporary file) and a base that makes every point fail.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use crate::common::{TempDir, bin, fails_with, ok, run_in};

/// 48 serving points, slow (5,000 requests) and fast (500) in turn, so that two threads finish
/// them out of order: about 2 s in a debug build.
const SLOW: &str = r#"kind = "serve"
[base]
model = "llama-2-7b"
hardware = "a100-80g-sxm"
[base.workload]
arrivals = "poisson"
qps = 20
prompt_lengths = "uniform:64:512"
output_lengths = "uniform:16:128"
[axes]
"workload.seed" = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24]
"workload.requests" = [5000, 500]
"#;

const POINTS: usize = 48;

fn read(p: &Path, f: &str) -> String {
    std::fs::read_to_string(p.join(f)).unwrap()
}

/// The uninterrupted run's file (in point order, written whole), computed once.
fn reference() -> &'static str {
    static REFERENCE: OnceLock<String> = OnceLock::new();
    REFERENCE.get_or_init(|| {
        let d = TempDir::new("resume-reference");
        std::fs::write(d.path().join("s.toml"), SLOW).unwrap();
        ok(&run_in(d.path(), &["sweep", "s.toml", "--out", "ref.csv"]));
        let text = read(d.path(), "ref.csv");
        assert_eq!(text.lines().count(), POINTS + 1);
        text
    })
}

/// A small seeded generator (SplitMix64): the moment of the kill varies with the seed, and the
/// seed is in every message, so a failure can be replayed (`KVPLAN_TEST_SEED`).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    }
}

/// Whole rows in a CSV output (lines after the header that end in a line break).
fn whole_rows(text: &str) -> usize {
    text.matches('\n').count().saturating_sub(1)
}

/// Starts `kvplan sweep --out rows.csv --resume` on two threads, waits until `rows` rows have
/// finished (and a seeded few milliseconds more), sends `signal`, and reruns with --resume.
fn killed_then_resumed(signal: &str, default_seed: u64) {
    let seed = std::env::var("KVPLAN_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default_seed);
    let mut rng = Rng(seed);
    let rows = 2 + rng.below(7) as usize;
    let extra = Duration::from_millis(rng.below(40));
    let at = format!("{signal}, seed {seed}: killed after {rows} rows and {extra:?}");
    let want = reference();
    let d = TempDir::new(&format!("resume{signal}"));
    let p = d.path();
    std::fs::write(p.join("s.toml"), SLOW).unwrap();
    let args = ["sweep", "s.toml", "--out", "rows.csv", "--resume"];
    let mut child = Command::new(bin())
        .args(args)
        .current_dir(p)
        .env("RAYON_NUM_THREADS", "2")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Poll the output itself while the run goes on: the rows are in it as they finish (a
    // bounded number of polls).
    let mut seen = 0;
    for _ in 0..10_000 {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        seen = std::fs::read_to_string(p.join("rows.csv")).map_or(0, |t| whole_rows(&t));
        if seen >= rows {
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        seen >= rows,
        "{at}: only {seen} rows were in rows.csv while the run went on (files: {:?})",
        d.files()
    );
    std::thread::sleep(extra);
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let mut partial = read(p, "rows.csv");
    let kept = whole_rows(&partial);
    assert!(
        kept >= rows && kept < POINTS,
        "{at}: {kept} of {POINTS} rows in rows.csv: the run was not stopped midway"
    );
    match signal {
        "-KILL" => {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(out.status.signal(), Some(9), "{at}: {err}");
            // Killed outright: its lock file stays, to be taken over.
            assert!(d.files().contains(&".rows.csv.lock".to_string()), "{at}");
        }
        _ => {
            let code = if signal == "-INT" { 130 } else { 143 };
            assert_eq!(out.status.code(), Some(code), "{at}: {err}");
            assert!(
                err.contains("interrupted; the rows finished so far are in rows.csv"),
                "{at}: {err}"
            );
        }
    }
    if signal == "-KILL" {
        // As if it had been killed in the middle of writing a row: the cut-off line goes.
        let row = want.lines().nth(1 + POINTS / 2).unwrap();
        partial.push_str(&row[..row.len() / 2]);
        std::fs::write(p.join("rows.csv"), &partial).unwrap();
    }
    let again = run_in(p, &args);
    let said = ok(&again);
    assert!(
        said.contains(&format!(
            "{} ok, 0 error), {kept} kept from the previous run",
            POINTS - kept
        )),
        "{at}: {said}"
    );
    assert!(
        read(p, "rows.csv") == want,
        "{at}: not the uninterrupted run's bytes"
    );
    assert_eq!(
        d.files(),
        ["rows.csv", "rows.csv.fingerprint", "s.toml"],
        "{at}"
    );
    if signal == "-KILL" {
        let err = String::from_utf8_lossy(&again.stderr);
        assert!(
            err.contains("took over the stale lock file") && err.contains(&pid),
            "{at}: {err}"
        );
    }
}

#[test]
fn a_resumed_sweep_interrupted_by_sigint_finishes_with_the_same_bytes() {
    killed_then_resumed("-INT", 1);
}

#[test]
fn a_resumed_sweep_interrupted_by_sigterm_finishes_with_the_same_bytes() {
    killed_then_resumed("-TERM", 2);
}

#[test]
fn a_resumed_sweep_killed_outright_finishes_with_the_same_bytes() {
    killed_then_resumed("-KILL", 3);
}

/// The id of a process that has exited (and been reaped).
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    pid
}

#[test]
fn a_stale_lock_and_temporary_files_of_a_killed_run_are_taken_over_and_removed() {
    let d = TempDir::new("resume-stale");
    let p = d.path();
    let sweep = "kind = \"simulate\"\n[base]\nmodel = \"opt-1.3b\"\nhardware = \"a100-40g-pcie4\"\nworkload = { prompt = 64, gen = 3 }\n[axes]\n\"workload.batch\" = [1, 2]\n";
    std::fs::write(p.join("s.toml"), sweep).unwrap();
    // What a run killed outright during its final write leaves: its lock file, and the
    // temporary files of the rows and of their fingerprint.
    let pid = dead_pid();
    std::fs::write(p.join(".o.csv.lock"), format!("{pid}\n")).unwrap();
    let tmp = format!(".o.csv.{pid}.0.tmp");
    let sidecar_tmp = format!(".o.csv.fingerprint.{pid}.0.tmp");
    std::fs::write(p.join(&tmp), "point,workload.batch\n0,1,").unwrap();
    std::fs::write(p.join(&sidecar_tmp), "# kvplan").unwrap();
    // Not a leftover of this output: another file's temporary file, a name that only looks
    // like one.
    std::fs::write(p.join(format!(".other.csv.{pid}.0.tmp")), "x").unwrap();
    std::fs::write(p.join(".o.csv.x.0.tmp"), "x").unwrap();
    let out = run_in(p, &["sweep", "s.toml", "--out", "o.csv"]);
    assert!(ok(&out).contains("o.csv: 2 points run (2 ok, 0 error)"));
    let err = String::from_utf8_lossy(&out.stderr);
    for said in [
        format!(".o.csv.lock of process {pid}, which is no longer running"),
        format!("{tmp}, left by a run that was killed while writing 'o.csv'"),
        format!("{sidecar_tmp}, left by a run that was killed while writing"),
    ] {
        assert!(err.contains(&said), "{said:?} not in: {err}");
    }
    assert_eq!(err.lines().count(), 3, "{err}");
    assert_eq!(
        d.files(),
        [
            ".o.csv.x.0.tmp".to_string(),
            format!(".other.csv.{pid}.0.tmp"),
            "o.csv".into(),
            "o.csv.fingerprint".into(),
            "s.toml".into()
        ]
    );
}

#[test]
fn a_base_that_every_point_fails_on_is_one_line_naming_the_field() {
    let d = TempDir::new("resume-base");
    // No prompt lengths: every point of the grid would be an error row with the same reason.
    let sweep = "kind = \"serve\"\n[base]\nmodel = \"llama-2-7b\"\nhardware = \"a100-80g-sxm\"\n[base.workload]\narrivals = \"poisson\"\nqps = 4\noutput_lengths = \"uniform:8:64\"\nrequests = 50\n[axes]\n\"workload.seed\" = [1, 2]\n\"serve.preemption\" = [\"recompute\", \"swap\"]\n";
    std::fs::write(d.path().join("s.toml"), sweep).unwrap();
    for resume in [false, true] {
        let mut args = vec!["sweep", "s.toml", "--out", "o.csv"];
        if resume {
            args.push("--resume");
        }
        fails_with(
            &d,
            &args,
            &[
                "s.toml: base: workload.prompt_lengths: required",
                "every point of the sweep fails this way",
            ],
        );
        assert_eq!(d.files(), ["s.toml"], "something was written");
    }
    // A point-specific failure stays a row: one axis value that does not fit.
    let sweep = "kind = \"simulate\"\n[base]\nhardware = \"a100-40g-pcie4\"\nstrategy = \"gpu-only\"\nworkload = { prompt = 64, gen = 3, batch = 2 }\n[axes]\nmodel = [\"opt-1.3b\", \"opt-30b\"]\n";
    std::fs::write(d.path().join("s.toml"), sweep).unwrap();
    let out = run_in(d.path(), &["sweep", "s.toml", "--out", "o.csv"]);
    assert!(ok(&out).contains("2 points run (1 ok, 1 error)"));
    // So does a sweep whose base is completed by an axis.
    let sweep = "kind = \"serve\"\n[base]\nmodel = \"llama-2-7b\"\nhardware = \"a100-80g-sxm\"\n[base.workload]\narrivals = \"poisson\"\nqps = 4\noutput_lengths = \"uniform:8:64\"\nrequests = 20\n[axes]\n\"workload.prompt_lengths\" = [\"64\", \"128\"]\n";
    std::fs::write(d.path().join("s.toml"), sweep).unwrap();
    let out = run_in(d.path(), &["sweep", "s.toml", "--out", "o.csv"]);
    assert!(ok(&out).contains("2 points run (2 ok, 0 error)"));
}
