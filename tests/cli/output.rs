//! Output files (`--trace`, `--out`): symlinks are written through, FIFOs and devices are written
//! in place and never replaced, regular files are replaced whole.

use std::path::Path;
use std::process::Output;

use crate::common::{TempDir, ok, run_in};

/// A small simulate whose timeline goes to `trace` (CSV when it ends in `.csv`).
fn simulate_to(dir: &Path, trace: &str) -> Output {
    run_in(
        dir,
        &[
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
            trace,
        ],
    )
}

/// The timeline the run above writes, read from a plain file.
fn expected_trace(dir: &Path, name: &str) -> Vec<u8> {
    ok(&simulate_to(dir, name));
    let bytes = std::fs::read(dir.join(name)).unwrap();
    std::fs::remove_file(dir.join(name)).unwrap();
    assert!(bytes.len() > 100);
    bytes
}

#[cfg(unix)]
#[test]
fn trace_through_a_symlink_writes_its_target() {
    use std::os::unix::fs::symlink;
    let dir = TempDir::new("out-symlink");
    let d = dir.path();
    let want = expected_trace(d, "plain.json");
    std::fs::create_dir(d.join("real")).unwrap();
    // An existing target, replaced whole through the link.
    std::fs::write(d.join("real/t.json"), "old content").unwrap();
    symlink("real/t.json", d.join("link.json")).unwrap();
    ok(&simulate_to(d, "link.json"));
    assert!(
        std::fs::read(d.join("real/t.json")).unwrap() == want,
        "real/t.json differs"
    );
    // A dangling link: its target is created.
    symlink("real/new.json", d.join("dangling.json")).unwrap();
    ok(&simulate_to(d, "dangling.json"));
    assert!(
        std::fs::read(d.join("real/new.json")).unwrap() == want,
        "real/new.json differs"
    );
    for l in ["link.json", "dangling.json"] {
        let m = std::fs::symlink_metadata(d.join(l)).unwrap();
        assert!(m.file_type().is_symlink(), "{l} is no longer a symlink");
    }
    // Nothing else appeared (no temporary files left next to the link or the target).
    assert_eq!(dir.files(), ["dangling.json", "link.json", "real"]);
    let mut real: Vec<String> = std::fs::read_dir(d.join("real"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    real.sort();
    assert_eq!(real, ["new.json", "t.json"]);
}

#[cfg(unix)]
#[test]
fn trace_to_a_fifo_is_written_in_place() {
    use std::io::Read;
    use std::os::unix::fs::FileTypeExt;
    use std::time::Duration;
    let dir = TempDir::new("out-fifo");
    let d = dir.path();
    let want = expected_trace(d, "plain.csv");
    let fifo = d.join("t.csv");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(made.success());
    // The reader blocks until kvplan opens the FIFO and reads until kvplan closes it. If kvplan
    // replaced the FIFO instead, the reader would wait forever: bound the wait.
    let (tx, rx) = std::sync::mpsc::channel();
    let path = fifo.clone();
    std::thread::spawn(move || {
        let mut got = Vec::new();
        let r = std::fs::File::open(&path).and_then(|mut f| f.read_to_end(&mut got));
        let _ = tx.send(r.map(|_| got));
    });
    ok(&simulate_to(d, "t.csv"));
    let got = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the reader got an end of file: kvplan wrote the FIFO and closed it")
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&got),
        String::from_utf8_lossy(&want)
    );
    let m = std::fs::symlink_metadata(&fifo).unwrap();
    assert!(m.file_type().is_fifo(), "the FIFO was replaced: {m:?}");
    assert_eq!(dir.files(), ["t.csv"]);
}

/// A private copy of a kernel character device in the test's directory, so that a regression
/// (replacing the node with a regular file) cannot harm the real `/dev/full` or `/dev/null`.
/// Device nodes need root and `mknod`: the tests that make them are `#[ignore]`d with that
/// reason (so `cargo test` lists them as ignored instead of passing them unchecked), and
/// fail when run without it. That the library writes a character device in place rather than
/// replacing it is checked everywhere on the real `/dev/null` and `/dev/full`, without writing
/// them (`kvplan_report::files`' `character_devices_are_written_in_place`).
#[cfg(unix)]
fn char_device(dir: &Path, name: &str, major_minor: (&str, &str)) -> std::path::PathBuf {
    let p = dir.join(name);
    let made = std::process::Command::new("mknod")
        .arg(&p)
        .args(["c", major_minor.0, major_minor.1])
        .status()
        .expect("mknod runs");
    assert!(
        made.success(),
        "cannot make a character device here: this test needs root and mknod"
    );
    p
}

#[cfg(unix)]
fn is_char_device(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_char_device())
}

#[cfg(unix)]
#[test]
#[ignore = "needs root and mknod (a private device node): cargo test --test cli output::trace_to_a_ -- --ignored"]
fn trace_to_a_full_device_fails_and_keeps_the_device() {
    let dir = TempDir::new("out-devfull");
    // Linux's /dev/full is character device 1:7 (every write fails with ENOSPC).
    let full = char_device(dir.path(), "full", ("1", "7"));
    let out = simulate_to(dir.path(), "full");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(err.starts_with("error: --trace: cannot write"), "{err}");
    assert!(err.contains("'full'"), "the path is not named: {err}");
    assert!(err.contains("character device"), "{err}");
    assert!(out.stdout.is_empty());
    assert!(is_char_device(&full), "the device node was replaced");
    assert_eq!(dir.files(), ["full"]);
}

#[cfg(unix)]
#[test]
#[ignore = "needs root and mknod (a private device node): cargo test --test cli output::trace_to_a_ -- --ignored"]
fn trace_to_a_null_device_succeeds_and_keeps_the_device() {
    let dir = TempDir::new("out-devnull");
    // Linux's /dev/null is character device 1:3.
    let null = char_device(dir.path(), "null", ("1", "3"));
    ok(&simulate_to(dir.path(), "null"));
    assert!(is_char_device(&null), "the device node was replaced");
    assert_eq!(dir.files(), ["null"]);
}

#[test]
fn trace_to_a_directory_is_an_input_error() {
    let dir = TempDir::new("out-dir");
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    let out = simulate_to(dir.path(), "sub");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(err.contains("'sub' is a directory"), "{err}");
    assert_eq!(dir.files(), ["sub"]);
}

/// `/dev/stdout` is a symlink into /proc that, on a pipe, names no path: it is written through,
/// and the trace arrives on stdout ahead of the report. Every Linux system has both links (the
/// kernel's /proc, and /dev's standard symlink to it): the test fails, rather than passes, where
/// one is missing.
#[cfg(target_os = "linux")]
#[test]
fn trace_to_dev_stdout_on_a_pipe() {
    let dir = TempDir::new("out-stdout");
    let want = String::from_utf8(expected_trace(dir.path(), "plain.json")).unwrap();
    for stdout in ["/dev/stdout", "/proc/self/fd/1"] {
        assert!(Path::new(stdout).exists(), "no {stdout} on this system");
        let out = ok(&simulate_to(dir.path(), stdout));
        assert!(
            out.starts_with(&want),
            "{stdout}: stdout does not start with the trace: {}",
            &out[..out.len().min(200)]
        );
        assert!(
            out[want.len()..].contains("(simulated)"),
            "{stdout}: the report is missing"
        );
        assert!(dir.files().is_empty(), "{:?}", dir.files());
    }
}
