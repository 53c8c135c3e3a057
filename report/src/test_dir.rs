//! A scratch directory for the crate's unit tests, removed when dropped.

use std::fs;
use std::path::PathBuf;

pub(crate) struct Dir(pub(crate) PathBuf);

impl Dir {
    /// `PREFIX-PID-NAME` under the system's temporary directory, empty.
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        let d = std::env::temp_dir().join(format!("{prefix}-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    /// The names in the directory, sorted.
    pub(crate) fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(&self.0)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}
