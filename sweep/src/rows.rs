//! Rows as text: CSV (a header, then one line per point) or JSONL (one object per line, keys in
//! column order). Columns: `point` (always, so shards can be merged), the point's values by
//! dotted path, the metrics, `status` (`ok` or `error`) and `reason`. Numbers are plain (no
//! exponent in CSV; empty / null where undefined). Every row is exactly one line (values and
//! reasons hold no line breaks), which is what [`resume`](Sweep::resume_rows), [`merge`] and
//! [`sort_rows`] rely on.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::PathBuf;

use toml::Value;

use crate::file::Sweep;
use crate::run::Row;
use kvplan_run::{Metric, columns};

/// The output format (with the `clap` feature, a `clap::ValueEnum`: `csv`, `jsonl`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[non_exhaustive]
pub enum Format {
    /// CSV with a header row.
    Csv,
    /// One JSON object per line.
    Jsonl,
}

/// Why a resumed run cannot continue the existing file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ResumeError {
    /// The file's columns are not this sweep's.
    #[error(
        "its columns are not this sweep's (found: {found}; this sweep writes: {expected}); give another `sweep.out` file, or delete it to start over"
    )]
    Header {
        /// This sweep's columns.
        expected: String,
        /// The file's.
        found: String,
    },
    /// A row holds a point this run does not write (another shard's, or past the last), or
    /// no point index at all.
    #[error(
        "line {line} holds {found}, which this sweep (and `sweep.shard`) does not write: the file is not this run's output; give another `sweep.out` file, or delete it to start over"
    )]
    NotThisRun {
        /// 1-based line.
        line: usize,
        /// What the line holds (`point N`, or `no point index`).
        found: String,
    },
    /// A point's row is in the file twice.
    #[error(
        "line {line} holds point {point} a second time: the file is not one run's output; give another `sweep.out` file, or delete it to start over"
    )]
    Duplicate {
        /// 1-based line.
        line: usize,
        /// The point.
        point: u64,
    },
    /// A line names a point of this run but is not its row: its values differ from the
    /// point's, or it has the wrong number of columns.
    #[error(
        "line {line} is not point {point}'s row of this sweep ({why}); give another `sweep.out` file, or delete it to start over"
    )]
    NotARow {
        /// 1-based line.
        line: usize,
        /// The point it names.
        point: u64,
        /// What differs.
        why: String,
    },
}

/// Why shard outputs cannot be merged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MergeError {
    /// Some inputs are CSV and some JSONL.
    #[error("{other} is {}, {first} is {}; merge outputs of one format", fmt_name(*other_format), fmt_name(*first_format))]
    MixedFormats {
        /// The first input.
        first: String,
        /// Its format.
        first_format: Format,
        /// The input that differs.
        other: String,
        /// Its format.
        other_format: Format,
    },
    /// Inputs with different columns (outputs of different sweeps).
    #[error(
        "{other}: columns differ from {first}'s (found: {found}; expected: {expected}); merge only the shards of one sweep"
    )]
    Header {
        /// The first input.
        first: String,
        /// The input that differs.
        other: String,
        /// The first input's columns.
        expected: String,
        /// The other's.
        found: String,
    },
    /// An input's last line is cut off (its run was killed mid-write).
    #[error(
        "{input}: the last line is incomplete (killed mid-write?); finish its shard with `kvplan sweep FILE `sweep.shard` I/N `sweep.resume` `sweep.out` {input}`"
    )]
    Incomplete {
        /// The input.
        input: String,
    },
    /// A row without a readable `point` index.
    #[error("{input}:{line}: no point index in this row; is it a `kvplan sweep` output?")]
    BadRow {
        /// The input.
        input: String,
        /// 1-based line.
        line: usize,
    },
    /// A point in two inputs (the same shard given twice, or overlapping shards).
    #[error("point {point} is in both {first} and {second}; give each shard once")]
    Duplicate {
        /// The point.
        point: u64,
        /// The first input holding it.
        first: String,
        /// The second.
        second: String,
    },
    /// Points no input holds.
    #[error(
        "{} missing ({count} in all): add the missing shard outputs, or finish them with `sweep.resume`",
        list(points)
    )]
    Missing {
        /// The first missing points.
        points: Vec<u64>,
        /// How many are missing.
        count: u64,
    },
    /// No inputs.
    #[error("no inputs: give the shard outputs to merge")]
    NoInputs,
}

fn fmt_name(f: Format) -> &'static str {
    match f {
        Format::Csv => "CSV",
        Format::Jsonl => "JSONL",
    }
}

fn list(points: &[u64]) -> String {
    let s: Vec<String> = points.iter().map(u64::to_string).collect();
    format!(
        "point{} {}",
        if points.len() == 1 { "" } else { "s" },
        s.join(", ")
    )
}

/// A float in plain decimal (Rust never writes an exponent), empty when not finite.
fn plain(x: f64) -> String {
    if x.is_finite() {
        x.to_string()
    } else {
        String::new()
    }
}

fn csv_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Integer(n) => n.to_string(),
        Value::Float(x) => plain(*x),
        Value::Boolean(b) => b.to_string(),
        Value::Datetime(d) => d.to_string(),
        other => other.to_string(),
    }
}

fn json_value(v: &Value) -> String {
    match v {
        Value::Float(x) if !x.is_finite() => "null".into(),
        Value::Datetime(d) => json_str(&d.to_string()),
        other => serde_json::to_string(other).unwrap_or_else(|_| "null".into()),
    }
}

fn json_str(s: &str) -> String {
    serde_json::to_string(s).expect("a string serialises")
}

fn csv_line(cells: &[String]) -> String {
    let mut w = csv::WriterBuilder::new()
        .buffer_capacity(256)
        .from_writer(Vec::new());
    w.write_record(cells).expect("writing to memory");
    String::from_utf8(w.into_inner().expect("writing to memory")).expect("UTF-8 cells")
}

/// Columns of the lines of a JSONL text, for messages.
fn json_keys(line: &str) -> Option<BTreeSet<String>> {
    match serde_json::from_str::<serde_json::Value>(line).ok()? {
        serde_json::Value::Object(m) => Some(m.keys().cloned().collect()),
        _ => None,
    }
}

fn json_point(line: &str) -> Option<u64> {
    serde_json::from_str::<serde_json::Value>(line)
        .ok()?
        .get("point")?
        .as_u64()
}

fn csv_point(line: &str) -> Option<u64> {
    line.split(',').next()?.parse().ok()
}

fn joined(keys: &BTreeSet<String>) -> String {
    keys.iter().cloned().collect::<Vec<_>>().join(",")
}

impl Sweep {
    /// Every column, in order: `point`, the values' paths, the metrics, `status`, `reason`.
    pub fn header_columns(&self) -> Vec<String> {
        let mut h = vec!["point".to_string()];
        h.extend(self.columns().iter().cloned());
        h.extend(columns(self.kind()).iter().map(|s| s.to_string()));
        h.extend(["status".to_string(), "reason".to_string()]);
        h
    }

    /// The text before the first row: the CSV header line; nothing for JSONL.
    pub fn header(&self, format: Format) -> String {
        match format {
            Format::Csv => csv_line(&self.header_columns()),
            Format::Jsonl => String::new(),
        }
    }

    /// One row as one line (with its line break).
    pub fn format_row(&self, row: &Row, format: Format) -> String {
        let values = self.values(row.point);
        let n_metrics = columns(self.kind()).len();
        let metrics: Vec<Option<Metric>> = match &row.outcome {
            Ok(m) => m.iter().copied().map(Some).collect(),
            Err(_) => vec![None; n_metrics],
        };
        let (status, reason) = match &row.outcome {
            Ok(_) => ("ok", None),
            Err(r) => ("error", Some(r.as_str())),
        };
        match format {
            Format::Csv => {
                let mut cells = vec![row.point.to_string()];
                cells.extend(values.iter().map(|v| v.map(csv_value).unwrap_or_default()));
                cells.extend(metrics.iter().map(|m| match m {
                    Some(Metric::Float(x)) => plain(*x),
                    Some(Metric::Int(n)) => n.to_string(),
                    None => String::new(),
                }));
                cells.push(status.into());
                cells.push(reason.unwrap_or_default().into());
                csv_line(&cells)
            }
            Format::Jsonl => {
                let header = self.header_columns();
                let mut cells = vec![row.point.to_string()];
                cells.extend(values.iter().map(|v| v.map_or("null".into(), json_value)));
                cells.extend(metrics.iter().map(|m| match m {
                    Some(Metric::Float(x)) if x.is_finite() => {
                        serde_json::to_string(x).expect("a finite float serialises")
                    }
                    Some(Metric::Int(n)) => n.to_string(),
                    _ => "null".into(),
                }));
                cells.push(json_str(status));
                cells.push(reason.map_or("null".into(), json_str));
                let mut s = String::from("{");
                for (i, (k, v)) in header.iter().zip(&cells).enumerate() {
                    if i > 0 {
                        s.push(',');
                    }
                    let _ = write!(s, "{}:{v}", json_str(k));
                }
                s.push_str("}\n");
                s
            }
        }
    }

    /// The start of point `index`'s row, up to the first metric: the point and its values,
    /// exactly as [`format_row`](Self::format_row) writes them (with the separator after them).
    fn row_start(&self, index: u64, format: Format) -> String {
        let values = self.values(index);
        match format {
            Format::Csv => {
                let mut cells = vec![index.to_string()];
                cells.extend(values.iter().map(|v| v.map(csv_value).unwrap_or_default()));
                let mut line = csv_line(&cells);
                line.truncate(line.trim_end_matches(['\r', '\n']).len());
                line.push(',');
                line
            }
            Format::Jsonl => {
                let mut s = format!("{{\"point\":{index}");
                for (k, v) in self.columns().iter().zip(&values) {
                    let v = v.map_or("null".into(), json_value);
                    let _ = write!(s, ",{}:{v}", json_str(k));
                }
                s.push(',');
                s
            }
        }
    }

    /// What a resumed run keeps of `existing` (the output file as a killed run left it), for a run
    /// that writes the points `indices`: the number of bytes to keep (whole lines; a cut-off
    /// last line is dropped) and the points those lines hold, in the order they are written
    /// (a resumable run writes its rows as they finish, not in point order). An empty file, or
    /// one holding only part of the header, keeps nothing.
    ///
    /// Every kept line is checked: the header is this sweep's, and each row is one of
    /// `indices`, given once, starting with that point's values and holding every column; a
    /// file that is not this run's output is an error, not rows to keep.
    pub fn resume_rows(
        &self,
        existing: &[u8],
        format: Format,
        indices: &[u64],
    ) -> Result<(usize, Vec<u64>), ResumeError> {
        let keep = existing
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let text = String::from_utf8_lossy(&existing[..keep]);
        let mut lines = text.lines().enumerate().peekable();
        if lines.peek().is_none() {
            return Ok((0, Vec::new()));
        }
        let header = self.header_columns();
        let expected_keys: BTreeSet<String> = header.iter().cloned().collect();
        if format == Format::Csv {
            let (_, first) = lines.next().expect("peeked");
            let want = self.header(Format::Csv);
            if first != want.trim_end() {
                return Err(ResumeError::Header {
                    expected: want.trim_end().into(),
                    found: first.into(),
                });
            }
        }
        let wanted: BTreeSet<u64> = indices.iter().copied().collect();
        let mut seen = BTreeSet::new();
        let mut done = Vec::new();
        for (i, line) in lines {
            let point = match format {
                Format::Csv => csv_point(line),
                Format::Jsonl => {
                    let keys = json_keys(line);
                    if keys.as_ref() != Some(&expected_keys) {
                        return Err(ResumeError::Header {
                            expected: joined(&expected_keys),
                            found: keys.map_or_else(|| "not a JSON object".into(), |k| joined(&k)),
                        });
                    }
                    json_point(line)
                }
            };
            let Some(point) = point.filter(|p| wanted.contains(p)) else {
                return Err(ResumeError::NotThisRun {
                    line: i + 1,
                    found: point.map_or("no point index".into(), |p| format!("point {p}")),
                });
            };
            if !seen.insert(point) {
                return Err(ResumeError::Duplicate { line: i + 1, point });
            }
            let not_row = |why: String| ResumeError::NotARow {
                line: i + 1,
                point,
                why,
            };
            if !line.starts_with(&self.row_start(point, format)) {
                return Err(not_row("its values are not the point's".into()));
            }
            if format == Format::Csv {
                let cells = csv::ReaderBuilder::new()
                    .has_headers(false)
                    .from_reader(line.as_bytes())
                    .records()
                    .next()
                    .and_then(Result::ok)
                    .map_or(0, |r| r.len());
                if cells != header.len() {
                    return Err(not_row(format!("{cells} columns, not {}", header.len())));
                }
            }
            done.push(point);
        }
        Ok((keep, done))
    }
}

/// The complete output `text` of a run (CSV or JSONL, its rows in any order, as a resumable run
/// writes them) with its rows in point order, the CSV header first: the bytes an uninterrupted
/// run writes. `None` when the rows are in point order already. Lines without a point index
/// (none in a file [`Sweep::resume_rows`] accepts) go last, in the order given.
pub fn sort_rows(text: &str, format: Format) -> Option<String> {
    let (header, rows) = match format {
        Format::Csv => match text.find('\n') {
            Some(i) => text.split_at(i + 1),
            None => return None,
        },
        Format::Jsonl => ("", text),
    };
    let point = |line: &str| match format {
        Format::Csv => csv_point(line),
        Format::Jsonl => json_point(line),
    };
    let mut lines: Vec<(u64, &str)> = rows
        .split_inclusive('\n')
        .map(|l| (point(l.trim_end()).unwrap_or(u64::MAX), l))
        .collect();
    if lines.is_sorted_by_key(|(p, _)| *p) {
        return None;
    }
    lines.sort_by_key(|(p, _)| *p);
    let mut out = String::with_capacity(text.len());
    out.push_str(header);
    for (_, l) in lines {
        out.push_str(l);
    }
    Some(out)
}

/// The shard outputs at `paths` as [`merge`] takes them: `(name, text)`, the name the path as
/// given. An unreadable file is a one-line error naming it.
pub fn read_inputs(paths: &[PathBuf]) -> Result<Vec<(String, String)>, String> {
    paths
        .iter()
        .map(|p| {
            let name = p.display().to_string();
            match std::fs::read_to_string(p) {
                Ok(text) => Ok((name, text)),
                Err(e) => Err(format!("{name}: cannot read: {e}")),
            }
        })
        .collect()
}

/// Joins shard outputs (`(name, text)`, CSV or JSONL, each as a shard of `kvplan sweep` wrote it)
/// into the output of the unsharded run: one header, rows in point order. Errors on mixed
/// formats, different columns, a cut-off last line, a point given twice, or missing points:
/// gaps below the largest point, and with `points` (the sweep's size, when known) the points
/// after it.
pub fn merge(inputs: &[(String, String)], points: Option<u64>) -> Result<String, MergeError> {
    let format_of = |text: &str| {
        if text.trim_start().starts_with('{') || text.trim().is_empty() {
            Format::Jsonl
        } else {
            Format::Csv
        }
    };
    // An empty input is an empty JSONL shard or (headerless) nothing: it fits either format.
    let first = inputs.first().ok_or(MergeError::NoInputs)?;
    let non_empty: Vec<&(String, String)> = inputs.iter().filter(|(_, t)| !t.is_empty()).collect();
    let format = non_empty
        .first()
        .map_or(Format::Jsonl, |(_, t)| format_of(t));
    let reference = non_empty.first().map_or(&first.0, |(n, _)| n);
    let mut header: Option<(String, String)> = None; // (columns, input)
    let mut rows: BTreeMap<u64, (&str, &str)> = BTreeMap::new(); // point -> (line, input)
    for (name, text) in inputs {
        if text.is_empty() {
            continue;
        }
        if format_of(text) != format {
            return Err(MergeError::MixedFormats {
                first: reference.clone(),
                first_format: format,
                other: name.clone(),
                other_format: format_of(text),
            });
        }
        if !text.ends_with('\n') {
            return Err(MergeError::Incomplete {
                input: name.clone(),
            });
        }
        collect_rows(name, text, format, &mut header, &mut rows)?;
    }
    check_all_points(&rows, points)?;
    let mut out = String::new();
    if let (Format::Csv, Some((h, _))) = (format, &header) {
        out.push_str(h);
        out.push('\n');
    }
    for (line, _) in rows.values() {
        out.push_str(line);
        out.push('\n');
    }
    Ok(out)
}

/// The rows of the shard output `name` (`text`, in `format`, complete) added to `rows` (point ->
/// (line, input)), its columns checked against `header` (the first input's, with its name).
fn collect_rows<'a>(
    name: &'a str,
    text: &'a str,
    format: Format,
    header: &mut Option<(String, String)>,
    rows: &mut BTreeMap<u64, (&'a str, &'a str)>,
) -> Result<(), MergeError> {
    let mut lines = text.lines().enumerate();
    let mut check_header = |cols: String| match &*header {
        None => {
            *header = Some((cols, name.to_string()));
            Ok(())
        }
        Some((h, first)) if *h != cols => Err(MergeError::Header {
            first: first.clone(),
            other: name.to_string(),
            expected: h.clone(),
            found: cols,
        }),
        Some(_) => Ok(()),
    };
    if format == Format::Csv {
        let (_, h) = lines.next().expect("a non-empty text has a line");
        check_header(h.to_string())?;
    }
    for (i, line) in lines {
        let point = match format {
            Format::Csv => csv_point(line),
            Format::Jsonl => {
                let keys = json_keys(line).ok_or_else(|| MergeError::BadRow {
                    input: name.to_string(),
                    line: i + 1,
                })?;
                check_header(joined(&keys))?;
                json_point(line)
            }
        };
        let point = point.ok_or_else(|| MergeError::BadRow {
            input: name.to_string(),
            line: i + 1,
        })?;
        if let Some((_, other)) = rows.insert(point, (line, name)) {
            return Err(MergeError::Duplicate {
                point,
                first: other.to_string(),
                second: name.to_string(),
            });
        }
    }
    Ok(())
}

/// Refuses the merge where a point below the last one held (or, given the sweep's size
/// `points`, below it) is in no input.
fn check_all_points<T>(rows: &BTreeMap<u64, T>, points: Option<u64>) -> Result<(), MergeError> {
    let end = match (points, rows.keys().next_back()) {
        (Some(n), _) => n,
        (None, Some(&last)) => last + 1,
        (None, None) => 0,
    };
    let mut missing = Vec::new();
    let mut count = 0u64;
    let mut have = rows.keys().copied().peekable();
    for p in 0..end {
        if have.peek() == Some(&p) {
            have.next();
        } else {
            count += 1;
            if missing.len() < 10 {
                missing.push(p);
            }
        }
    }
    if count > 0 {
        return Err(MergeError::Missing {
            points: missing,
            count,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn sweep() -> Sweep {
        Sweep::parse(
            "kind = \"simulate\"\n[base]\nmodel = \"opt-30b\"\nhardware = \"a100-40g-pcie4\"\nworkload = { prompt = 32, gen = 2 }\n[axes]\n\"workload.batch\" = [1, 2, 3]\nstrategy = [\"kvpr\", \"gpu-only\"]\n",
            Path::new("s.toml"),
        )
        .unwrap()
    }

    fn output(s: &Sweep, format: Format, indices: &[u64]) -> String {
        let mut out = s.header(format);
        s.run_ordered(indices, |r| {
            out.push_str(&s.format_row(&r, format));
            Ok::<(), ()>(())
        })
        .unwrap();
        out
    }

    #[test]
    fn inputs_are_read_by_the_names_given() {
        let dir = std::env::temp_dir().join(format!("kvplan-sweep-inputs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = dir.join("a.csv");
        std::fs::write(&a, "point\n0\n").unwrap();
        let texts = read_inputs(std::slice::from_ref(&a)).unwrap();
        assert_eq!(texts, [(a.display().to_string(), "point\n0\n".to_string())]);
        let missing = dir.join("missing.csv");
        let e = read_inputs(&[a, missing.clone()]).unwrap_err();
        assert!(
            e.starts_with(&format!("{}: cannot read: ", missing.display())),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rows_hold_values_metrics_and_reasons() {
        let s = sweep();
        let csv = output(&s, Format::Csv, &[0, 1]);
        let lines: Vec<&str> = csv.lines().collect();
        assert!(lines[0].starts_with("point,workload.batch,strategy,prefill_latency_s,"));
        assert!(lines[0].ends_with(",status,reason"));
        assert!(lines[1].starts_with("0,1,kvpr,2.") && lines[1].ends_with(",ok,"));
        assert!(lines[2].starts_with("1,1,gpu-only,,,"), "{}", lines[2]);
        assert!(
            lines[2].contains(",error,\"gpu-only plan for opt-30b on a100-40g-pcie4 does not fit"),
            "{}",
            lines[2]
        );
        let json = output(&s, Format::Jsonl, &[1]);
        assert!(json.starts_with(
            "{\"point\":1,\"workload.batch\":1,\"strategy\":\"gpu-only\",\"prefill_latency_s\":null,"
        ));
        assert!(json.contains("\"status\":\"error\",\"reason\":\"gpu-only plan for opt-30b on a100-40g-pcie4 does not fit: "), "{json}");
        assert!(json.ends_with("`workload.gen`\"}\n"), "{json}");
    }

    #[test]
    fn resume_keeps_whole_lines_of_this_sweep() {
        let s = sweep();
        let all: Vec<u64> = (0..6).collect();
        for format in [Format::Csv, Format::Jsonl] {
            let full = output(&s, format, &all);
            let cut = full.len() - 7; // inside the last line
            let (keep, done) = s
                .resume_rows(&full.as_bytes()[..cut], format, &all)
                .unwrap();
            assert_eq!(done, [0, 1, 2, 3, 4]);
            assert_eq!(
                &full[..keep],
                full.rsplit_once('\n')
                    .unwrap()
                    .0
                    .rsplit_once('\n')
                    .unwrap()
                    .0
                    .to_string()
                    + "\n"
            );
            assert_eq!(s.resume_rows(b"poi", format, &all).unwrap(), (0, vec![]));
            // A shard's rows are not another shard's.
            let e = s
                .resume_rows(full.as_bytes(), format, &[1, 3, 5])
                .unwrap_err();
            assert!(matches!(e, ResumeError::NotThisRun { .. }), "{e}");
        }
        let e = s.resume_rows(b"point,x\n", Format::Csv, &all).unwrap_err();
        assert!(e.to_string().contains("not this sweep's"), "{e}");
    }

    /// The header and the rows of a CSV output, each line with its line break.
    fn split_rows(text: &str) -> (&str, Vec<&str>) {
        let (h, rows) = text.split_at(text.find('\n').unwrap() + 1);
        (h, rows.split_inclusive('\n').collect())
    }

    #[test]
    fn resume_keeps_rows_in_the_order_they_finished_and_sorts_them_back() {
        let s = sweep();
        let all: Vec<u64> = (0..6).collect();
        let full = output(&s, Format::Csv, &all);
        let (header, rows) = split_rows(&full);
        assert_eq!(sort_rows(&full, Format::Csv), None);
        // Points 4, 1 and 5 finished first; 2 was being written when the run was killed.
        let partial = format!("{header}{}{}{}{}", rows[4], rows[1], rows[5], &rows[2][..9]);
        let (keep, done) = s
            .resume_rows(partial.as_bytes(), Format::Csv, &all)
            .unwrap();
        assert_eq!(done, [4, 1, 5]);
        assert_eq!(keep, partial.len() - 9);
        // The rest appended, in any order, sorts back into the uninterrupted run's bytes.
        let whole = format!("{}{}{}{}", &partial[..keep], rows[3], rows[0], rows[2]);
        assert_eq!(sort_rows(&whole, Format::Csv).unwrap(), full);
        let json = output(&s, Format::Jsonl, &all);
        let mut lines: Vec<&str> = json.split_inclusive('\n').collect();
        lines.reverse();
        assert_eq!(sort_rows(&lines.concat(), Format::Jsonl).unwrap(), json);
        // A row given twice, a row whose values are not its point's, a row cut short.
        let twice = format!("{header}{}{}", rows[1], rows[1]);
        let e = s
            .resume_rows(twice.as_bytes(), Format::Csv, &all)
            .unwrap_err();
        assert!(
            matches!(e, ResumeError::Duplicate { line: 3, point: 1 }),
            "{e}"
        );
        let other = format!("{header}{}", rows[1].replacen("1,", "2,", 1));
        let e = s
            .resume_rows(other.as_bytes(), Format::Csv, &all)
            .unwrap_err();
        assert!(e.to_string().contains("values are not the point's"), "{e}");
        let short = format!(
            "{header}{},ok,\n",
            rows[1].split(',').take(6).collect::<Vec<_>>().join(",")
        );
        let e = s
            .resume_rows(short.as_bytes(), Format::Csv, &all)
            .unwrap_err();
        assert!(e.to_string().contains("columns, not"), "{e}");
    }

    #[test]
    fn merge_orders_and_checks() {
        let s = sweep();
        for format in [Format::Csv, Format::Jsonl] {
            let full = output(&s, format, &(0..6).collect::<Vec<_>>());
            let shards: Vec<(String, String)> = (0..4u64)
                .map(|i| {
                    let idx: Vec<u64> = (i..6).step_by(4).collect();
                    (format!("s{i}"), output(&s, format, &idx))
                })
                .collect();
            assert_eq!(merge(&shards, Some(6)).unwrap(), full);
            let e = merge(&shards[..3], Some(6)).unwrap_err().to_string();
            assert_eq!(
                e,
                "point 3 missing (1 in all): add the missing shard outputs, or finish them with `sweep.resume`"
            );
            let mut twice = shards.clone();
            twice.push(shards[1].clone());
            assert!(
                merge(&twice, None)
                    .unwrap_err()
                    .to_string()
                    .contains("point 1 is in both s1 and s1")
            );
            let mut cut = shards.clone();
            cut[0].1.pop();
            assert!(matches!(
                merge(&cut, None),
                Err(MergeError::Incomplete { .. })
            ));
        }
    }
}
