//! Helpers: run the binary, temporary directories.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The built `kvplan` binary.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_kvplan"))
}

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `kvplan args...` in `dir`.
pub fn run_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("kvplan runs")
}

/// Runs `kvplan args...` in the repository root.
pub fn run(args: &[&str]) -> Output {
    run_in(&root(), args)
}

/// Stdout as text, asserting success and an empty stderr.
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "kvplan failed with {:?}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("UTF-8 stdout")
}

/// A fresh empty directory under the target dir, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        let p = std::env::temp_dir().join(format!("kvplan-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    /// Names of the files in the directory, sorted.
    pub fn files(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs `args` in `d` and holds it to a refusal: exit 2, nothing on stdout, one line on stderr
/// holding each of `words`.
pub fn fails_with(d: &TempDir, args: &[&str], words: &[&str]) {
    let out = run_in(d.path(), args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    assert!(out.stdout.is_empty(), "{args:?} printed {:?}", out.stdout);
    assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
    for w in words {
        assert!(err.contains(w), "{args:?}: {w:?} not in {err}");
    }
}
