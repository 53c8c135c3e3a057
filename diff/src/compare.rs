//! Reading kvplan outputs, telling their kinds apart, and comparing two of the same kind.

use std::collections::BTreeMap;
use std::path::Path;

use kvplan_workloads::lines::LineCounter;
use serde::Serialize;
use serde_json::Value;

use crate::direction::{Direction, direction};
use crate::error::{Error, Result};
pub use crate::kind::Kind;

/// The columns of a timeline CSV (a `simulate` trace written as CSV), in order.
pub const TIMELINE_COLUMNS: [&str; 16] = kvplan_vocab::timeline::CSV_COLUMNS;

/// One row's figures: numbers by metric name, and text fields (compared for notes only).
#[derive(Debug, Clone, Default)]
struct Row {
    numbers: BTreeMap<String, Option<f64>>,
    texts: BTreeMap<String, String>,
}

/// A parsed output: its kind and its rows (a single unnamed row for JSON).
#[derive(Debug, Clone)]
pub struct Input {
    /// Where it came from (messages).
    pub name: String,
    /// What it is.
    pub kind: Kind,
    /// For CSV tables: the key columns; for timelines: `run`.
    pub key_columns: Vec<String>,
    rows: Vec<(String, Row)>,
    /// For timelines, whether a metric missing on one side counts as zero.
    zero_fill: bool,
}

impl Input {
    /// Reads and parses the file at `path`.
    pub fn read(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&path.display().to_string(), &text)
    }

    /// Parses `text` (named `name` in messages), detecting its kind.
    pub fn parse(name: &str, text: &str) -> Result<Self> {
        let t = text.trim_start_matches('\u{feff}').trim_start();
        if t.starts_with('{') || t.starts_with('[') {
            return parse_json(name, t);
        }
        let header = t.lines().next().unwrap_or("");
        if t.is_empty() || !header.contains(',') {
            return Err(Error::UnknownKind {
                path: name.to_string(),
            });
        }
        parse_csv(name, t)
    }

    /// Number of rows (1 for JSON).
    pub fn rows(&self) -> usize {
        self.rows.len()
    }
}

fn parse_json(name: &str, text: &str) -> Result<Input> {
    let v: Value = serde_json::from_str(text).map_err(|e| Error::Json {
        path: name.to_string(),
        line: e.line(),
        message: e.to_string(),
    })?;
    let has = |k: &str| v.get(k).is_some();
    let kind = if has("strategy") && has("decode_latency_s") {
        Kind::SimulateReport
    } else if v.get("results").is_some_and(Value::is_array) {
        Kind::SimulateCompare
    } else if has("requests") && has("ttft_s") {
        Kind::ServeSummary
    } else {
        Kind::Json
    };
    let mut row = Row::default();
    flatten("", &v, &mut row);
    Ok(Input {
        name: name.to_string(),
        kind,
        key_columns: Vec::new(),
        rows: vec![(String::new(), row)],
        zero_fill: false,
    })
}

/// The numeric and text leaves of `v` under dotted paths. Arrays of objects that all carry a
/// distinct `strategy` (or `name`) string are keyed by it (`results.kvpr.decode_latency_s`),
/// other arrays by index.
fn flatten(prefix: &str, v: &Value, row: &mut Row) {
    let join = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                flatten(&join(k), x, row);
            }
        }
        Value::Array(items) => {
            let keys = array_keys(items);
            for (i, x) in items.iter().enumerate() {
                let k = keys
                    .as_ref()
                    .map_or_else(|| i.to_string(), |k| k[i].clone());
                flatten(&join(&k), x, row);
            }
        }
        Value::Number(n) => {
            row.numbers.insert(prefix.to_string(), n.as_f64());
        }
        Value::String(s) => {
            row.texts.insert(prefix.to_string(), s.clone());
        }
        Value::Bool(b) => {
            row.texts.insert(prefix.to_string(), b.to_string());
        }
        Value::Null => {}
    }
}

fn array_keys(items: &[Value]) -> Option<Vec<String>> {
    for field in ["strategy", "name"] {
        let keys: Option<Vec<String>> = items
            .iter()
            .map(|x| x.get(field).and_then(Value::as_str).map(String::from))
            .collect();
        if let Some(keys) = keys {
            let mut sorted = keys.clone();
            sorted.sort();
            sorted.dedup();
            if !keys.is_empty() && sorted.len() == keys.len() {
                return Some(keys);
            }
        }
    }
    None
}

fn csv_error(name: &str, e: &csv::Error, lines: &mut LineCounter) -> Error {
    let line = e.position().map(|p| lines.line_at(p.byte()));
    let message = match e.kind() {
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!("{len} fields where the header has {expected_len}"),
        _ => e.to_string(),
    };
    Error::Csv {
        path: name.to_string(),
        line,
        message,
    }
}

fn parse_number(cell: &str) -> Option<f64> {
    cell.trim().parse::<f64>().ok()
}

fn parse_csv(name: &str, text: &str) -> Result<Input> {
    let mut r = csv::ReaderBuilder::new().from_reader(text.as_bytes());
    let mut lines = LineCounter::new(text);
    let header: Vec<String> = r
        .headers()
        .map_err(|e| csv_error(name, &e, &mut lines))?
        .iter()
        .map(|h| h.trim().to_string())
        .collect();
    let mut records = Vec::new();
    for rec in r.records() {
        let rec = rec.map_err(|e| csv_error(name, &e, &mut lines))?;
        let line = rec.position().map_or(0, |p| lines.line_at(p.byte()));
        records.push((line, rec.iter().map(String::from).collect::<Vec<_>>()));
    }
    if header == TIMELINE_COLUMNS {
        return timeline(name, &header, &records);
    }
    table(name, header, &records)
}

/// A timeline's per-run figures: makespan (last end − first start), op count, and the summed
/// `duration_s` by label and by category, and summed `bytes` by category.
fn timeline(name: &str, header: &[String], records: &[(u64, Vec<String>)]) -> Result<Input> {
    let col = |c: &str| header.iter().position(|h| h == c).expect("timeline column");
    let (run, label, category) = (col("run"), col("label"), col("category"));
    let (start, end, dur, bytes) = (
        col("start_s"),
        col("end_s"),
        col("duration_s"),
        col("bytes"),
    );
    let mut runs: Vec<(String, Row, f64, f64)> = Vec::new();
    for (line, rec) in records {
        let num = |i: usize| -> Result<f64> {
            let cell = rec[i].trim();
            if cell.is_empty() {
                return Ok(0.0);
            }
            parse_number(cell).ok_or_else(|| Error::Csv {
                path: name.to_string(),
                line: Some(*line),
                message: format!("column {}: '{}' is not a number", header[i], rec[i]),
            })
        };
        let (s, e, d, b) = (num(start)?, num(end)?, num(dur)?, num(bytes)?);
        let i = match runs.iter().position(|(r, ..)| *r == rec[run]) {
            Some(i) => i,
            None => {
                runs.push((rec[run].clone(), Row::default(), f64::INFINITY, 0.0));
                runs.len() - 1
            }
        };
        let (_, row, first, last) = &mut runs[i];
        *first = first.min(s);
        *last = last.max(e);
        let mut add = |k: String, x: f64| {
            *row.numbers.entry(k).or_insert(Some(0.0)).get_or_insert(0.0) += x;
        };
        add("ops".into(), 1.0);
        add(format!("label.{}.duration_s", rec[label]), d);
        add(format!("category.{}.duration_s", rec[category]), d);
        add(format!("category.{}.bytes", rec[category]), b);
    }
    let rows = runs
        .into_iter()
        .map(|(name, mut row, first, last)| {
            row.numbers.insert("makespan_s".into(), Some(last - first));
            (name, row)
        })
        .collect();
    Ok(Input {
        name: name.to_string(),
        kind: Kind::Timeline,
        key_columns: vec!["run".into()],
        rows,
        zero_fill: true,
    })
}

/// The key columns of a CSV table: the first column alone when it is `point` (sweep tables);
/// else the leading columns before the first metric column (a column whose name has a
/// direction, e.g. `decode_latency_s`); else, when the first column is a metric, every column
/// that is not numeric; else none (rows matched by position).
pub fn key_columns(header: &[String], numeric: &[bool]) -> Vec<usize> {
    if header.first().is_some_and(|h| h == "point") {
        return vec![0];
    }
    let lead: Vec<usize> = (0..header.len())
        .take_while(|&i| direction(&header[i]) == Direction::Neutral)
        .collect();
    if !lead.is_empty() && lead.len() < header.len() {
        return lead;
    }
    (0..header.len()).filter(|&i| !numeric[i]).collect()
}

fn table(name: &str, header: Vec<String>, records: &[(u64, Vec<String>)]) -> Result<Input> {
    let numeric: Vec<bool> = (0..header.len())
        .map(|i| {
            records
                .iter()
                .all(|(_, r)| r[i].trim().is_empty() || parse_number(&r[i]).is_some())
        })
        .collect();
    let keys = key_columns(&header, &numeric);
    let mut rows: Vec<(String, Row)> = Vec::new();
    let mut seen: BTreeMap<String, u64> = BTreeMap::new();
    for (n, (line, rec)) in records.iter().enumerate() {
        let key = if keys.is_empty() {
            format!("#{}", n + 1)
        } else {
            keys.iter()
                .map(|&i| rec[i].trim())
                .collect::<Vec<_>>()
                .join("/")
        };
        if let Some(first) = seen.insert(key.clone(), *line) {
            return Err(Error::DuplicateKey {
                path: name.to_string(),
                key,
                columns: keys.iter().map(|&i| header[i].clone()).collect(),
                first,
                second: *line,
            });
        }
        let mut row = Row::default();
        for (i, cell) in rec.iter().enumerate() {
            if keys.contains(&i) {
                continue;
            }
            if numeric[i] {
                row.numbers.insert(header[i].clone(), parse_number(cell));
            } else {
                row.texts.insert(header[i].clone(), cell.clone());
            }
        }
        rows.push((key, row));
    }
    Ok(Input {
        name: name.to_string(),
        kind: Kind::CsvTable,
        key_columns: keys.iter().map(|&i| header[i].clone()).collect(),
        rows,
        zero_fill: false,
    })
}

/// A tolerance: `0.01` or `1%` (a fraction in [0, 1), or a percentage in [0, 100]).
pub fn parse_tolerance(s: &str) -> Result<f64> {
    let bad = |message: &str| Error::Tolerance {
        value: s.to_string(),
        message: message.to_string(),
    };
    let t = s.trim();
    let (num, scale) = match t.strip_suffix('%') {
        Some(n) => (n.trim(), 0.01),
        None => (t, 1.0),
    };
    let x: f64 = num
        .parse()
        .map_err(|_| bad("expected a fraction such as 0.01 or a percentage such as 1%"))?;
    if !x.is_finite() || x < 0.0 {
        return Err(bad("must be zero or more"));
    }
    if scale == 1.0 && x >= 1.0 {
        return Err(bad(
            "a bare number is a fraction below 1; write a percentage as 5%",
        ));
    }
    if x * scale > 1.0 {
        return Err(bad("must be at most 100%"));
    }
    Ok(x * scale)
}

/// How one metric moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// Equal, or within the tolerance.
    Ok,
    /// Beyond the tolerance in the good direction.
    Improved,
    /// Beyond the tolerance in the bad direction.
    Regressed,
    /// A neutral metric beyond the tolerance.
    Changed,
    /// A decision ([`Direction::Decision`]) that differs beyond [`DECISION_TOLERANCE`]: a
    /// failure, like a regression.
    DecisionChanged,
    /// A regression or a changed decision that the comparison was told to expect
    /// ([`Comparison::accept`]): reported, not a failure.
    Accepted,
    /// Only in B.
    Added,
    /// Only in A.
    Removed,
}

impl Status {
    /// Its name in tables and CSV.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Improved => "improved",
            Status::Regressed => "REGRESSED",
            Status::Changed => "changed",
            Status::DecisionChanged => "DECISION-CHANGED",
            Status::Accepted => "accepted",
            Status::Added => "added",
            Status::Removed => "removed",
        }
    }
}

/// One metric of one row, A against B.
#[derive(Debug, Clone, Serialize)]
pub struct MetricDiff {
    /// The row key (empty for JSON documents).
    pub row: String,
    /// The metric name (JSON path, CSV column, or timeline figure).
    pub metric: String,
    /// A's value.
    pub a: Option<f64>,
    /// B's value.
    pub b: Option<f64>,
    /// B − A.
    pub delta: Option<f64>,
    /// (B − A) / |A|; absent when A is zero and B is not.
    pub relative_delta: Option<f64>,
    /// Which way is worse.
    pub direction: Direction,
    /// The verdict.
    pub status: Status,
}

impl MetricDiff {
    /// True when the metric regressed past the tolerance.
    pub fn regressed(&self) -> bool {
        self.status == Status::Regressed
    }

    /// True when the metric fails the comparison: it regressed past the tolerance, or it is a
    /// decision that changed (and neither was accepted).
    pub fn failed(&self) -> bool {
        matches!(self.status, Status::Regressed | Status::DecisionChanged)
    }
}

/// The largest relative change of a [`Direction::Decision`] metric that is not a change of the
/// decision: decisions are compared exactly (this only absorbs the last digits of a float
/// printed on another platform), not at the comparison's tolerance.
pub const DECISION_TOLERANCE: f64 = 1e-9;

/// True when `pattern` (a name as the accept option of `diff` takes it) names `metric`: the metric's whole name,
/// a `*` glob over it (`splits.*.recompute_tokens`), or a dotted prefix of it (`headinfer`
/// names `headinfer.heads_per_group`). Matched in lower case.
pub fn names(pattern: &str, metric: &str) -> bool {
    let (p, m) = (pattern.to_ascii_lowercase(), metric.to_ascii_lowercase());
    crate::direction::glob(&p, &m) || m.strip_prefix(&p).is_some_and(|r| r.starts_with('.'))
}

/// A text field that differs (a note, never a regression).
#[derive(Debug, Clone, Serialize)]
pub struct TextDiff {
    /// The row key.
    pub row: String,
    /// The field.
    pub field: String,
    /// A's text (absent: only in B).
    pub a: Option<String>,
    /// B's text.
    pub b: Option<String>,
}

/// Two outputs compared.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// Their kind.
    pub kind: Kind,
    /// A's name.
    pub a: String,
    /// B's name.
    pub b: String,
    /// The key columns rows were matched by.
    pub key_columns: Vec<String>,
    /// The tolerance (a fraction).
    pub tolerance: f64,
    /// Every numeric metric.
    pub metrics: Vec<MetricDiff>,
    /// Text fields that differ.
    pub texts: Vec<TextDiff>,
}

impl Comparison {
    /// The metrics that regressed.
    pub fn regressions(&self) -> impl Iterator<Item = &MetricDiff> {
        self.metrics.iter().filter(|m| m.regressed())
    }

    /// The metrics that fail the comparison: regressions and changed decisions.
    pub fn failures(&self) -> impl Iterator<Item = &MetricDiff> {
        self.metrics.iter().filter(|m| m.failed())
    }

    /// Marks the failures named by any of `patterns` (see [`names`]) as
    /// [`Status::Accepted`]: a change the caller expects. Returns how many it accepted.
    pub fn accept(&mut self, patterns: &[String]) -> usize {
        let mut n = 0;
        for m in &mut self.metrics {
            if m.failed() && patterns.iter().any(|p| names(p, &m.metric)) {
                m.status = Status::Accepted;
                n += 1;
            }
        }
        n
    }

    /// How many metrics have `status`.
    pub fn count(&self, status: Status) -> usize {
        self.metrics.iter().filter(|m| m.status == status).count()
    }
}

/// The verdict on `a` → `b` under `direction` and `tolerance` (a decision's under
/// [`DECISION_TOLERANCE`] instead).
pub fn judge(a: f64, b: f64, dir: Direction, tolerance: f64) -> (Option<f64>, Status) {
    let tolerance = if dir == Direction::Decision {
        DECISION_TOLERANCE
    } else {
        tolerance
    };
    let delta = b - a;
    let rel = if delta == 0.0 {
        Some(0.0)
    } else if a == 0.0 {
        None
    } else {
        Some(delta / a.abs())
    };
    let beyond = rel.is_none_or(|r| r.abs() > tolerance);
    let status = if !beyond {
        Status::Ok
    } else {
        match dir {
            Direction::Neutral => Status::Changed,
            Direction::Decision => Status::DecisionChanged,
            Direction::LowerIsBetter if delta > 0.0 => Status::Regressed,
            Direction::HigherIsBetter if delta < 0.0 => Status::Regressed,
            _ => Status::Improved,
        }
    };
    (rel, status)
}

/// Compares `a` (the baseline) with `b` under `tolerance` (a fraction).
///
/// Both must be of the same [`Kind`] and, for CSV tables and timelines, have the same rows (by
/// key; else [`Error::UnmatchedRows`] names them). A metric present on one side only is
/// `added`/`removed` (never a regression), except in timelines, where a label or category
/// missing on one side counts as zero time.
pub fn compare(a: &Input, b: &Input, tolerance: f64) -> Result<Comparison> {
    check_comparable(a, b)?;
    let b_rows: BTreeMap<&str, &Row> = b.rows.iter().map(|(k, r)| (k.as_str(), r)).collect();
    let mut metrics = Vec::new();
    let mut texts = Vec::new();
    for (key, ra) in &a.rows {
        let rb = b_rows[key.as_str()];
        metrics.extend(row_metrics(key, ra, rb, a.zero_fill, tolerance));
        let mut fields: Vec<&String> = ra.texts.keys().collect();
        fields.extend(rb.texts.keys().filter(|k| !ra.texts.contains_key(*k)));
        for f in fields {
            let (ta, tb) = (ra.texts.get(f), rb.texts.get(f));
            if ta != tb {
                texts.push(TextDiff {
                    row: key.clone(),
                    field: f.clone(),
                    a: ta.cloned(),
                    b: tb.cloned(),
                });
            }
        }
    }
    Ok(Comparison {
        kind: a.kind,
        a: a.name.clone(),
        b: b.name.clone(),
        key_columns: a.key_columns.clone(),
        tolerance,
        metrics,
        texts,
    })
}

/// Refuses two inputs of different kinds, keyed by different columns, or whose rows do not
/// match one to one.
fn check_comparable(a: &Input, b: &Input) -> Result<()> {
    if a.kind != b.kind {
        return Err(Error::KindMismatch {
            a: a.name.clone(),
            a_kind: a.kind,
            b: b.name.clone(),
            b_kind: b.kind,
        });
    }
    if a.key_columns != b.key_columns {
        return Err(Error::KeyMismatch {
            a: a.name.clone(),
            a_keys: a.key_columns.join(","),
            b: b.name.clone(),
            b_keys: b.key_columns.join(","),
        });
    }
    let only = |x: &Input, y: &Input| -> Vec<String> {
        x.rows
            .iter()
            .filter(|(k, _)| !y.rows.iter().any(|(j, _)| j == k))
            .map(|(k, _)| k.clone())
            .collect()
    };
    let (only_a, only_b) = (only(a, b), only(b, a));
    if !only_a.is_empty() || !only_b.is_empty() {
        return Err(Error::UnmatchedRows {
            a: a.name.clone(),
            only_a,
            b: b.name.clone(),
            only_b,
        });
    }
    Ok(())
}

/// The metrics of the row `key` in A (`ra`) and B (`rb`), A's first, then those only B has; a
/// metric one side lacks counts as 0 with `zero_fill`.
fn row_metrics(key: &str, ra: &Row, rb: &Row, zero_fill: bool, tolerance: f64) -> Vec<MetricDiff> {
    let mut names: Vec<&String> = ra.numbers.keys().collect();
    names.extend(rb.numbers.keys().filter(|k| !ra.numbers.contains_key(*k)));
    let mut metrics = Vec::new();
    for name in names {
        let get = |r: &Row| match r.numbers.get(name) {
            Some(v) => *v,
            None if zero_fill => Some(0.0),
            None => None,
        };
        let (va, vb) = (get(ra), get(rb));
        let dir = direction(name);
        let (delta, rel, status) = match (va, vb) {
            (Some(x), Some(y)) => {
                let (rel, s) = judge(x, y, dir, tolerance);
                (Some(y - x), rel, s)
            }
            (None, Some(_)) => (None, None, Status::Added),
            (Some(_), None) => (None, None, Status::Removed),
            (None, None) => continue,
        };
        metrics.push(MetricDiff {
            row: key.to_string(),
            metric: name.clone(),
            a: va,
            b: vb,
            delta,
            relative_delta: rel,
            direction: dir,
            status,
        });
    }
    metrics
}

#[cfg(test)]
mod tests {
    use super::*;

    const REPORT: &str = r#"{"strategy": "kvpr", "decode_latency_s": 1.0,
        "decode_throughput_tok_s": 100.0, "gpu_busy_fraction": 0.5, "notes": []}"#;

    fn diff(a: &str, b: &str) -> Comparison {
        let (a, b) = (Input::parse("a", a).unwrap(), Input::parse("b", b).unwrap());
        compare(&a, &b, 0.01).unwrap()
    }

    fn status(c: &Comparison, metric: &str) -> Status {
        c.metrics
            .iter()
            .find(|m| m.metric == metric)
            .unwrap()
            .status
    }

    #[test]
    fn report_json_directions_and_tolerance() {
        let c = diff(REPORT, &REPORT.replace("1.0,", "1.02,"));
        assert_eq!(c.kind, Kind::SimulateReport);
        assert_eq!(status(&c, "decode_latency_s"), Status::Regressed);
        let c = diff(REPORT, &REPORT.replace("1.0,", "1.005,"));
        assert_eq!(status(&c, "decode_latency_s"), Status::Ok);
        let c = diff(REPORT, &REPORT.replace("100.0", "98.0"));
        assert_eq!(status(&c, "decode_throughput_tok_s"), Status::Regressed);
        let c = diff(REPORT, &REPORT.replace("0.5", "0.9"));
        assert_eq!(status(&c, "gpu_busy_fraction"), Status::Changed);
        assert_eq!(c.regressions().count(), 0);
        let c = diff(REPORT, &REPORT.replace("\"kvpr\"", "\"gpu-only\""));
        assert_eq!(c.texts.len(), 1);
    }

    #[test]
    fn csv_rows_are_matched_by_key_not_position() {
        let a = "strategy,batch,decode_latency_s\nkvpr,8,1.0\nfull,8,2.0\n";
        let b = "strategy,batch,decode_latency_s\nfull,8,2.0\nkvpr,8,1.03\n";
        let c = diff(a, b);
        assert_eq!(c.key_columns, ["strategy", "batch"]);
        let m = c.regressions().next().unwrap();
        assert_eq!(
            (m.row.as_str(), m.metric.as_str()),
            ("kvpr/8", "decode_latency_s")
        );
        let b = "strategy,batch,decode_latency_s\nfull,8,2.0\nkvpr,16,1.0\n";
        let (ia, ib) = (Input::parse("a", a).unwrap(), Input::parse("b", b).unwrap());
        let e = compare(&ia, &ib, 0.01).unwrap_err().to_string();
        assert!(e.contains("kvpr/8") && e.contains("kvpr/16"), "{e}");
    }

    #[test]
    fn point_column_is_the_key() {
        let a = "point,batch,decode_latency_s\n0,8,1.0\n1,16,2.0\n";
        let i = Input::parse("a", a).unwrap();
        assert_eq!(i.key_columns, ["point"]);
    }

    #[test]
    fn bad_inputs() {
        assert!(matches!(
            Input::parse("x", "{\"a\": "),
            Err(Error::Json { .. })
        ));
        assert!(matches!(
            Input::parse("x", "a,b\n1,2,3\n"),
            Err(Error::Csv { .. })
        ));
        assert!(matches!(
            Input::parse("x", "hello"),
            Err(Error::UnknownKind { .. })
        ));
        let (j, t) = (
            Input::parse("j", REPORT).unwrap(),
            Input::parse("t", "strategy,decode_latency_s\nkvpr,1\n").unwrap(),
        );
        assert!(matches!(
            compare(&j, &t, 0.01),
            Err(Error::KindMismatch { .. })
        ));
    }

    #[test]
    fn tolerances() {
        assert_eq!(parse_tolerance("1%").unwrap(), 0.01);
        assert_eq!(parse_tolerance("0.01").unwrap(), 0.01);
        assert_eq!(parse_tolerance("0").unwrap(), 0.0);
        for bad in ["5", "-1%", "x", "200%", "nan"] {
            assert!(parse_tolerance(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_changed_decision_fails_whatever_the_tolerance_unless_accepted() {
        let a = r#"{"strategy": "kvpr", "splits": [{"step": 1, "recompute_tokens": 121}],
            "mean_recompute_fraction": 0.47}"#;
        // One token more: 0.8%, within a 1% tolerance, and still a changed decision.
        let b = a.replace("121", "122");
        let (ia, ib) = (
            Input::parse("a", a).unwrap(),
            Input::parse("b", &b).unwrap(),
        );
        let mut c = compare(&ia, &ib, 0.5).unwrap();
        assert_eq!(
            status(&c, "splits.0.recompute_tokens"),
            Status::DecisionChanged
        );
        assert_eq!(status(&c, "mean_recompute_fraction"), Status::Ok);
        assert_eq!(c.failures().count(), 1);
        assert_eq!(c.regressions().count(), 0);
        // A pattern that names another metric accepts nothing.
        assert_eq!(c.accept(&["splits.*.seq_len".into()]), 0);
        assert_eq!(c.failures().count(), 1);
        assert_eq!(c.accept(&["splits.*.recompute_tokens".into()]), 1);
        assert_eq!(status(&c, "splits.0.recompute_tokens"), Status::Accepted);
        assert_eq!(c.failures().count(), 0);
        // A float decision: below DECISION_TOLERANCE is the same decision.
        let c = diff(
            r#"{"prefix_cache_hit_rate": 0.5}"#,
            r#"{"prefix_cache_hit_rate": 0.5000000000001}"#,
        );
        assert_eq!(status(&c, "prefix_cache_hit_rate"), Status::Ok);
        let c = diff(
            r#"{"prefix_cache_hit_rate": 0.5}"#,
            r#"{"prefix_cache_hit_rate": 0.501}"#,
        );
        assert_eq!(status(&c, "prefix_cache_hit_rate"), Status::DecisionChanged);
    }

    #[test]
    fn accept_names_a_metric_a_glob_or_a_dotted_prefix() {
        assert!(names("mean_recompute_fraction", "mean_recompute_fraction"));
        assert!(names(
            "splits.*.recompute_tokens",
            "splits.3.recompute_tokens"
        ));
        assert!(names("headinfer", "headinfer.heads_per_group"));
        assert!(names("RUNAHEAD.partition", "runahead.partition.0"));
        assert!(!names("head", "headinfer.heads_per_group"));
        assert!(!names("splits.*.recompute_tokens", "splits.3.seq_len"));
    }

    #[test]
    fn zero_baseline() {
        assert_eq!(
            judge(0.0, 0.0, Direction::LowerIsBetter, 0.01).1,
            Status::Ok
        );
        assert_eq!(
            judge(0.0, 1.0, Direction::LowerIsBetter, 0.01),
            (None, Status::Regressed)
        );
        assert_eq!(
            judge(0.0, 1.0, Direction::HigherIsBetter, 0.01).1,
            Status::Improved
        );
    }
}
