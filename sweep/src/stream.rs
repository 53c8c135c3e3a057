//! A sweep run as the front end drives it: which points this run takes ([`Shard`], [`Resume`]
//! of a file already written, both in [`Points`], which also sums up the run), the rows streamed
//! to a writer one whole row at a time ([`Sweep::stream`]), and what a plot of the rows draws
//! ([`PlotSpec`]), checked before anything runs.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::file::{Kind, Sweep};
use crate::rows::Format;
use crate::run::Row;

/// One shard of a sweep: the points with index % `count` == `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// This shard (0-based).
    pub index: u64,
    /// Shards in all.
    pub count: u64,
}

impl std::str::FromStr for Shard {
    type Err = String;

    /// `I/N` with 0 <= I < N.
    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || format!("expected I/N with 0 <= I < N, e.g. 0/4 (got '{s}')");
        let (i, n) = s.split_once('/').ok_or_else(bad)?;
        let (index, count) = (
            i.trim().parse::<u64>().map_err(|_| bad())?,
            n.trim().parse::<u64>().map_err(|_| bad())?,
        );
        if count == 0 || index >= count {
            return Err(bad());
        }
        Ok(Shard { index, count })
    }
}

/// What a resumed run keeps of its output file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resume {
    /// Bytes of the file to keep (the whole rows; 0 for a file started afresh).
    pub keep: u64,
    /// Points those rows hold (dropped from the run's indices).
    pub kept: usize,
}

impl Sweep {
    /// The indices of the points a run of `shard` (all points without one) takes, in order.
    pub fn indices(&self, shard: Option<Shard>) -> Vec<u64> {
        let (first, step) = shard.map_or((0, 1), |s| (s.index, s.count));
        (first..self.len()).step_by(step as usize).collect()
    }

    /// Resuming into the output file `out`: the whole rows it already holds of `indices`
    /// ([`resume_rows`](Self::resume_rows)), which are dropped from `indices`. A path where
    /// nothing is yet keeps nothing (`keep` 0: the file is started afresh, and rows are written
    /// to it as they finish); a FIFO or device is not resumed (`None`). Errors are one line,
    /// `label` (the option that asked for it) first.
    pub fn resume(
        &self,
        out: &Path,
        format: Format,
        indices: &mut Vec<u64>,
        label: &str,
    ) -> Result<Option<Resume>, String> {
        match std::fs::metadata(out) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Some(Resume { keep: 0, kept: 0 }));
            }
            Err(e) => return Err(format!("{label}: cannot read '{}': {e}", out.display())),
        }
        let existing = std::fs::read(out)
            .map_err(|e| format!("{label}: cannot read '{}': {e}", out.display()))?;
        if !existing.is_empty() {
            self.check_fingerprint(out)
                .map_err(|e| format!("{label}: {e}"))?;
        }
        let (bytes, done) = self
            .resume_rows(&existing, format, indices)
            .map_err(|e| format!("{label}: {}: {e}", out.display()))?;
        let done: std::collections::BTreeSet<u64> = done.into_iter().collect();
        indices.retain(|i| !done.contains(i));
        Ok(Some(Resume {
            keep: bytes as u64,
            kept: done.len(),
        }))
    }

    /// The points a run takes: those of `shard` (all points without one) less, when it resumes
    /// into the file `resume` (see [`resume`](Self::resume), `label` naming the option), the
    /// rows that file already holds.
    pub fn points(
        &self,
        shard: Option<Shard>,
        resume: Option<&Path>,
        format: Format,
        label: &str,
    ) -> Result<Points, String> {
        let mut indices = self.indices(shard);
        let kept = match resume {
            Some(out) => self.resume(out, format, &mut indices, label)?,
            None => None,
        };
        Ok(Points {
            indices,
            kept,
            resuming: resume.is_some(),
        })
    }

    /// Runs the points `indices` and writes their rows to `sink`, the header first when
    /// `header`; one write and a flush per row, so a run killed midway leaves whole rows (and
    /// at most one cut-off line, which [`resume`](Self::resume) drops). With `ordered` the rows
    /// are written in point order ([`run_ordered`](Self::run_ordered): stdout, a file replaced
    /// whole); without it, as each point finishes ([`run_unordered`](Self::run_unordered): a
    /// resumable file, which loses only the rows still running when it is killed and is put in
    /// point order by [`sort_rows`](crate::rows::sort_rows) once complete). `on_row` is called
    /// once per row (a progress bar). Returns the rows that are errors, or `None` when the
    /// reader went away (a closed pipe): the run stops quietly.
    pub fn stream(
        &self,
        indices: &[u64],
        format: Format,
        header: bool,
        ordered: bool,
        sink: &mut dyn Write,
        mut on_row: impl FnMut(),
    ) -> std::io::Result<Option<u64>> {
        let quiet = |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                Ok(None)
            } else {
                Err(e)
            }
        };
        if header
            && let Err(e) = sink
                .write_all(self.header(format).as_bytes())
                .and_then(|()| sink.flush())
        {
            return quiet(e);
        }
        let mut errors = 0u64;
        let emit = |row: Row| {
            errors += u64::from(row.outcome.is_err());
            on_row();
            sink.write_all(self.format_row(&row, format).as_bytes())?;
            sink.flush()
        };
        let result = if ordered {
            self.run_ordered(indices, emit)
        } else {
            self.run_unordered(indices, emit)
        };
        match result {
            Ok(()) => Ok(Some(errors)),
            Err(e) => quiet(e),
        }
    }
}

/// The points a run takes ([`Sweep::points`]) and what it keeps of its output file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Points {
    /// The points to run, in order.
    pub indices: Vec<u64>,
    /// What the run keeps of its output file (`None`: it starts the file afresh).
    pub kept: Option<Resume>,
    /// Whether the run resumes (into a file that may not have existed).
    pub resuming: bool,
}

impl Points {
    /// Bytes of the output file to keep, where the run writes it in place (`None`: the rows
    /// are not resumed, and replace the file whole once complete).
    pub fn keep(&self) -> Option<u64> {
        self.kept.map(|r| r.keep)
    }

    /// Whether the rows written start with the header (nothing of the file is kept).
    pub fn header(&self) -> bool {
        self.keep().unwrap_or(0) == 0
    }

    /// The one-line summary of this run into the file `out`, `errors` of its rows errors, with
    /// the plot drawn into `plot` if any: `out: N points run (K ok, E error), R kept from the
    /// previous run; plot written to FILE`.
    pub fn summary(&self, out: &Path, errors: u64, plot: Option<&Path>) -> String {
        let ran = self.indices.len();
        let kept = if self.resuming {
            let kept = self.kept.map_or(0, |r| r.kept);
            format!(", {kept} kept from the previous run")
        } else {
            String::new()
        };
        let plotted = plot.map_or_else(String::new, |p| {
            format!("; plot written to {}", p.display())
        });
        format!(
            "{}: {ran} points run ({} ok, {errors} error){kept}{plotted}\n",
            out.display(),
            ran as u64 - errors
        )
    }
}

/// What a plot of a sweep's rows draws: `y` against `x`, one line per value of the `series`
/// columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlotSpec {
    /// The SVG file.
    pub file: PathBuf,
    /// The x column.
    pub x: String,
    /// The y column.
    pub y: String,
    /// The columns whose values make the series.
    pub series: Vec<String>,
}

/// How the front end names the plot's settings, for messages.
#[derive(Debug, Clone, Copy)]
pub struct PlotLabels<'a> {
    /// The plot file.
    pub plot: &'a str,
    /// The x column.
    pub x: &'a str,
    /// The y column.
    pub y: &'a str,
    /// The series columns.
    pub series: &'a str,
    /// The advice when the rows are not CSV.
    pub not_csv: &'a str,
}

impl Sweep {
    /// The plot of this sweep's rows into `file`: `x` (default: the last axis) against `y`
    /// (default: `ttft_p99_s` for serve sweeps, `decode_latency_s` for simulate ones), one line
    /// per value of the comma-separated `series` (default: the other axes); every column checked
    /// against the sweep's header before anything runs.
    pub fn plot_spec(
        &self,
        file: &Path,
        format: Format,
        x: Option<&str>,
        y: Option<&str>,
        series: Option<&str>,
        l: PlotLabels,
    ) -> Result<PlotSpec, String> {
        if format != Format::Csv {
            return Err(format!("{}: {}", l.plot, l.not_csv));
        }
        let axes = self.columns();
        let header = self.header_columns();
        let x = match x {
            Some(x) => x.to_string(),
            None => axes.last().cloned().ok_or_else(|| {
                format!(
                    "{}: the sweep has no axis; name the column to plot against",
                    l.x
                )
            })?,
        };
        let y = y.map_or_else(
            || {
                if self.kind() == Kind::Serve {
                    "ttft_p99_s"
                } else {
                    "decode_latency_s"
                }
                .to_string()
            },
            str::to_string,
        );
        let series: Vec<String> = match series {
            Some(s) => s
                .split(',')
                .map(|c| c.trim().to_string())
                .filter(|c| !c.is_empty())
                .collect(),
            None => axes.iter().filter(|a| **a != x).cloned().collect(),
        };
        for (label, c) in [(l.x, &x), (l.y, &y)]
            .into_iter()
            .chain(series.iter().map(|c| (l.series, c)))
        {
            if !header.contains(c) {
                return Err(format!(
                    "{label}: no column '{c}' in this sweep; its columns are {}",
                    header.join(", ")
                ));
            }
        }
        // The axes are drawn on numbers: a column of text (an axis of names, status, reason)
        // is refused now, not after the run.
        for (label, c) in [(l.x, &x), (l.y, &y)] {
            if let Some(text) = self.text_value(c) {
                let numeric: Vec<&str> = header
                    .iter()
                    .filter(|h| self.text_value(h).is_none() && *h != "point")
                    .map(String::as_str)
                    .take(4)
                    .collect();
                return Err(format!(
                    "{label}: column '{c}' holds text ({text}), not numbers; name a numeric column with {label}, e.g. {}",
                    numeric.join(", ")
                ));
            }
        }
        Ok(PlotSpec {
            file: file.to_path_buf(),
            x,
            y,
            series,
        })
    }
}

impl Sweep {
    /// A value of the column `c` that is not a number (`None` for a numeric column): the
    /// `status` and `reason` columns, and an axis or point column with a value that is text.
    fn text_value(&self, c: &str) -> Option<String> {
        if c == "status" || c == "reason" {
            return Some(format!("e.g. '{}'", if c == "status" { "ok" } else { "" }));
        }
        let col = self.columns().iter().position(|x| x == c)?;
        self.column_values(col)
            .find(|v| !matches!(v, toml::Value::Integer(_) | toml::Value::Float(_)))
            .map(|v| format!("e.g. {v}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sweep() -> Sweep {
        let text = "kind = \"simulate\"\n[base]\nmodel = \"opt-1.3b\"\nhardware = \"a100-40g-pcie4\"\n[axes]\n\"workload.batch\" = [1, 2, 3, 4, 5]\n";
        Sweep::parse(text, Path::new("s.toml")).unwrap()
    }

    #[test]
    fn points_are_the_shards_less_the_rows_a_resumed_file_holds() {
        let s = sweep();
        let shard = Some(Shard { index: 1, count: 2 });
        let p = s.points(shard, None, Format::Csv, "resume").unwrap();
        let want = Points {
            indices: vec![1, 3],
            kept: None,
            resuming: false,
        };
        assert_eq!(p, want);
        assert!(p.header() && p.keep().is_none());
        let dir = std::env::temp_dir().join(format!("kvplan-sweep-points-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let out = dir.join("rows.csv");
        // A file that does not exist yet keeps nothing, and is written in place from its
        // header on.
        let _ = std::fs::remove_file(&out);
        let p = s.points(None, Some(&out), Format::Csv, "resume").unwrap();
        let nothing = Some(Resume { keep: 0, kept: 0 });
        assert_eq!((p.indices.len(), p.kept, p.resuming), (5, nothing, true));
        assert!(p.header() && p.keep() == Some(0));
        // One holding the header and points 3 and 0 keeps them; the cut-off line after them
        // goes.
        let row = |i| s.format_row(&s.run_point(i), Format::Csv);
        let kept = format!("{}{}{}", s.header(Format::Csv), row(3), row(0));
        std::fs::write(&out, format!("{kept}1,2")).unwrap();
        let p = s.points(None, Some(&out), Format::Csv, "resume").unwrap();
        assert_eq!(p.indices, [1, 2, 4]);
        assert_eq!(p.keep(), Some(kept.len() as u64));
        assert_eq!(p.kept.map(|r| r.kept), Some(2));
        assert!(!p.header());
        // One that is not this sweep's output is an error naming the option.
        std::fs::write(&out, "a,b\n").unwrap();
        let e = s
            .points(None, Some(&out), Format::Csv, "resume")
            .unwrap_err();
        assert!(e.starts_with("resume: "), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_summary_counts_rows_kept_and_names_the_plot() {
        let out = Path::new("rows.csv");
        let p = Points {
            indices: vec![0, 1, 2],
            kept: None,
            resuming: false,
        };
        assert_eq!(
            p.summary(out, 1, None),
            "rows.csv: 3 points run (2 ok, 1 error)\n"
        );
        let resumed = Points {
            resuming: true,
            ..p.clone()
        };
        assert_eq!(
            resumed.summary(out, 0, Some(Path::new("p.svg"))),
            "rows.csv: 3 points run (3 ok, 0 error), 0 kept from the previous run; plot written to p.svg\n"
        );
        let kept = Points {
            kept: Some(Resume { keep: 10, kept: 2 }),
            ..resumed
        };
        assert_eq!(
            kept.summary(out, 0, None),
            "rows.csv: 3 points run (3 ok, 0 error), 2 kept from the previous run\n"
        );
    }

    #[test]
    fn shards_parse() {
        assert_eq!("2/3".parse(), Ok(Shard { index: 2, count: 3 }));
        for bad in ["3/3", "0/0", "1", "-1/2", "a/b", "1/2/3"] {
            assert!(bad.parse::<Shard>().is_err(), "{bad}");
        }
    }
}
