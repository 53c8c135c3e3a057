//! Rendering helpers: aligned text tables, unit formatting, and output files written whole or
//! not at all.

use std::io::Write;
use std::path::Path;

use crate::error::CliError;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// A plain text table; the first column is left-aligned, the others right-aligned.
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with a header row.
    pub fn new<S: ToString>(header: &[S]) -> Self {
        Table {
            rows: vec![header.iter().map(|s| s.to_string()).collect()],
        }
    }

    /// Adds a row.
    pub fn row<S: ToString>(&mut self, cells: &[S]) {
        self.rows
            .push(cells.iter().map(|s| s.to_string()).collect());
    }

    /// Renders with two spaces between columns and a rule under the header.
    pub fn render(&self) -> String {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let mut width = vec![0usize; cols];
        for r in &self.rows {
            for (i, c) in r.iter().enumerate() {
                width[i] = width[i].max(c.chars().count());
            }
        }
        let mut out = String::new();
        for (n, r) in self.rows.iter().enumerate() {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate() {
                let pad = width[i] - c.chars().count();
                if i > 0 {
                    line.push_str("  ");
                    line.push_str(&" ".repeat(pad));
                    line.push_str(c);
                } else {
                    line.push_str(c);
                    line.push_str(&" ".repeat(pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
            if n == 0 {
                let total: usize = width.iter().sum::<usize>() + 2 * cols.saturating_sub(1);
                out.push_str(&"-".repeat(total));
                out.push('\n');
            }
        }
        out
    }
}

/// Bytes as GiB with two decimals.
pub fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / GIB)
}

/// Seconds with an adaptive unit.
pub fn secs(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.1} us", s * 1e6)
    }
}

/// A fraction as a percentage.
pub fn pct(f: f64) -> String {
    format!("{:.1}%", f * 100.0)
}

/// Writes `path` through a temporary file in the same directory and renames it into place, so
/// a failure leaves no partial file behind.
pub fn write_atomically(
    path: &Path,
    what: &str,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<(), CliError> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().ok_or_else(|| {
        CliError::input(format!("{what}: '{}' is not a file path", path.display()))
    })?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| -> std::io::Result<()> {
        let f = std::fs::File::create(&tmp)?;
        let mut w = std::io::BufWriter::new(f);
        fill(&mut w)?;
        w.flush()?;
        w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        CliError::input(format!("{what}: cannot write {}: {e}", path.display()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let mut t = Table::new(&["name", "value"]);
        t.row(&["a", "1"]);
        t.row(&["long name", "12345"]);
        let r = t.render();
        let lines: Vec<&str> = r.lines().collect();
        assert_eq!(lines[0], "name       value");
        assert_eq!(lines[2], "a              1");
        assert_eq!(lines[3], "long name  12345");
    }

    #[test]
    fn failed_write_leaves_nothing() {
        let dir = std::env::temp_dir().join(format!("kvplan-render-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("out.json");
        let e = write_atomically(&target, "--trace", |w| {
            w.write_all(b"partial")?;
            Err(std::io::Error::other("boom"))
        })
        .unwrap_err();
        assert!(e.message.contains("boom"));
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
