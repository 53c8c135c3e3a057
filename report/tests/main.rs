//! kvplan-report's integration tests: one binary, one module per area (`cargo test -p
//! kvplan-report`; one area: `cargo test -p kvplan-report --test report <module>::`). The
//! renderers' own unit tests stay next to them.

mod files;
mod goldens;
mod runs_fit;

use std::path::{Path, PathBuf};

/// A fresh temporary directory, removed when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        let d = std::env::temp_dir().join(format!("kvplan-report-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
