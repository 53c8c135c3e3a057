//! Request traces: reading `arrived_at,num_prefill_tokens,num_decode_tokens` CSV files and
//! replaying them with time or rate scaling.

use std::io;
use std::path::Path;

use crate::spec::{check_qps, check_requests};
use crate::{Error, Request, Result};

/// The header a trace CSV carries (columns may come in any order; others are ignored).
pub const TRACE_HEADER: &str = "arrived_at,num_prefill_tokens,num_decode_tokens";

const COLUMNS: [&str; 3] = ["arrived_at", "num_prefill_tokens", "num_decode_tokens"];

/// One row of a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceRow {
    /// Arrival time, seconds from the start of the trace (≥ 0, non-decreasing).
    pub arrived_at: f64,
    /// Prompt tokens (≥ 1).
    pub prompt_tokens: u32,
    /// Output tokens (≥ 1).
    pub output_tokens: u32,
}

/// A checked trace: at least one row, times finite, non-negative and sorted, lengths ≥ 1.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    name: String,
    rows: Vec<TraceRow>,
}

/// How replay scales time.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum TimeScale {
    /// The trace's own times.
    #[default]
    Original,
    /// Multiply every inter-arrival time by this factor (> 0; 2 halves the rate).
    Factor(f64),
    /// Scale inter-arrival times so the replayed requests' mean rate, `(n - 1) / (last - first)`,
    /// is this many requests per second.
    TargetQps(f64),
}

/// Options of [`Trace::replay`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ReplayOptions {
    /// Time or rate scaling.
    pub scale: TimeScale,
    /// Replay at most this many requests (≥ 1); all when `None`.
    pub max_requests: Option<u64>,
    /// Skip rows that arrive before this trace time (seconds, ≥ 0); it becomes t = 0 of the
    /// replay, so a request arrives at `(arrived_at - start_s) * factor`.
    pub start_s: f64,
}

impl ReplayOptions {
    /// Checks the options (factor and target rate finite and > 0, cap ≥ 1, start finite ≥ 0).
    pub fn check(&self) -> Result<()> {
        match self.scale {
            TimeScale::Original => {}
            TimeScale::Factor(f) => {
                if !(f.is_finite() && f > 0.0) {
                    return Err(Error::OutOfRange {
                        field: "time_scale",
                        got: f.to_string(),
                        expected: "a finite factor > 0 on inter-arrival times".into(),
                    });
                }
            }
            TimeScale::TargetQps(q) => check_qps(q)?,
        }
        if let Some(n) = self.max_requests {
            check_requests(n)?;
        }
        if !(self.start_s.is_finite() && self.start_s >= 0.0) {
            return Err(Error::OutOfRange {
                field: "start_s",
                got: self.start_s.to_string(),
                expected: "a finite trace time in seconds ≥ 0".into(),
            });
        }
        Ok(())
    }
}

fn csv_line(e: &csv::Error) -> Option<u64> {
    e.position().map(|p| p.line())
}

impl Trace {
    /// Reads and checks a trace file.
    pub fn from_path(path: impl AsRef<Path>) -> Result<Trace> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|source| Error::Io {
            path: name.clone(),
            source,
        })?;
        Trace::from_reader(io::BufReader::new(file), &name)
    }

    /// Reads and checks a trace from any reader; `name` stands for the file in errors.
    pub fn from_reader<R: io::Read>(reader: R, name: &str) -> Result<Trace> {
        let row_err = |line: u64, message: String| Error::TraceRow {
            path: name.to_string(),
            line,
            message,
        };
        let read_err = |e: csv::Error| match csv_line(&e) {
            Some(line) => row_err(line, e.to_string()),
            None => match e.into_kind() {
                csv::ErrorKind::Io(source) => Error::Io {
                    path: name.to_string(),
                    source,
                },
                other => row_err(0, format!("{other:?}")),
            },
        };
        let mut rdr = csv::ReaderBuilder::new()
            .has_headers(false)
            .flexible(true)
            .trim(csv::Trim::All)
            .from_reader(reader);
        let mut records = rdr.records();
        let header = match records.next() {
            None => {
                return Err(Error::TraceEmpty {
                    path: name.to_string(),
                    why: "no header",
                });
            }
            Some(r) => r.map_err(read_err)?,
        };
        let header_line = header.position().map_or(1, |p| p.line());
        let mut idx = [0usize; 3];
        for (slot, col) in idx.iter_mut().zip(COLUMNS) {
            *slot = header.iter().position(|h| h == col).ok_or_else(|| {
                row_err(
                    header_line,
                    format!(
                        "missing column `{col}` in the header `{}`; expected `{TRACE_HEADER}`",
                        header.iter().collect::<Vec<_>>().join(",")
                    ),
                )
            })?;
        }
        let needed = idx.iter().max().map_or(0, |m| m + 1);
        let mut rows = Vec::new();
        let mut prev = 0.0f64;
        for rec in records {
            let rec = rec.map_err(read_err)?;
            let line = rec.position().map_or(0, |p| p.line());
            if rec.len() < needed {
                return Err(row_err(
                    line,
                    format!(
                        "{} field(s), but the header needs {needed} (`{TRACE_HEADER}`)",
                        rec.len()
                    ),
                ));
            }
            let t_raw = &rec[idx[0]];
            let t: f64 = t_raw.parse().map_err(|_| {
                row_err(
                    line,
                    format!("arrived_at: `{t_raw}` is not a number of seconds"),
                )
            })?;
            if !t.is_finite() || t < 0.0 {
                return Err(row_err(
                    line,
                    format!("arrived_at: `{t_raw}` must be a finite time in seconds ≥ 0"),
                ));
            }
            if t < prev {
                return Err(row_err(
                    line,
                    format!(
                        "arrived_at: {t} is earlier than the previous row's {prev}; rows must be sorted by arrival time"
                    ),
                ));
            }
            prev = t;
            let tokens = |col: usize| -> Result<u32> {
                let raw = &rec[idx[col]];
                match raw.parse::<u32>() {
                    Ok(0) => Err(row_err(
                        line,
                        format!("{}: 0 tokens; lengths must be at least 1", COLUMNS[col]),
                    )),
                    Ok(v) => Ok(v),
                    Err(_) => Err(row_err(
                        line,
                        format!(
                            "{}: `{raw}` is not a whole number of tokens from 1 to 4294967295",
                            COLUMNS[col]
                        ),
                    )),
                }
            };
            rows.push(TraceRow {
                arrived_at: t,
                prompt_tokens: tokens(1)?,
                output_tokens: tokens(2)?,
            });
        }
        if rows.is_empty() {
            return Err(Error::TraceEmpty {
                path: name.to_string(),
                why: "no rows after the header",
            });
        }
        Ok(Trace {
            name: name.to_string(),
            rows,
        })
    }

    /// The name given for the trace (its path when read from a file).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The rows, in arrival order.
    pub fn rows(&self) -> &[TraceRow] {
        &self.rows
    }

    /// Number of rows (at least 1).
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Always false: a checked trace has at least one row.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Mean arrival rate over the trace, `(n - 1) / (last - first)`, or `None` when every row
    /// arrives at the same time.
    pub fn mean_qps(&self) -> Option<f64> {
        mean_qps(&self.rows)
    }

    /// The requests of the trace under `options`: rows at or after `start_s`, at most
    /// `max_requests` of them, arriving at `(arrived_at - start_s) * factor`, ids `0..n`.
    pub fn replay(&self, options: &ReplayOptions) -> Result<Vec<Request>> {
        options.check()?;
        let first = self
            .rows
            .partition_point(|r| r.arrived_at < options.start_s);
        let rows = &self.rows[first..];
        if rows.is_empty() {
            return Err(Error::Conflict {
                field: "start_s",
                why: format!(
                    "no requests at or after {} s (the trace `{}` ends at {} s)",
                    options.start_s,
                    self.name,
                    self.rows[self.rows.len() - 1].arrived_at
                ),
            });
        }
        let take = options
            .max_requests
            .map_or(rows.len(), |n| usize::try_from(n).unwrap_or(usize::MAX))
            .min(rows.len());
        let rows = &rows[..take];
        let factor = match options.scale {
            TimeScale::Original => 1.0,
            TimeScale::Factor(f) => f,
            TimeScale::TargetQps(q) => {
                let observed = mean_qps(rows).ok_or_else(|| Error::Conflict {
                    field: "qps",
                    why: format!(
                        "cannot scale to a rate: the {} replayed request(s) of `{}` all arrive at {} s",
                        rows.len(),
                        self.name,
                        rows[0].arrived_at
                    ),
                })?;
                observed / q
            }
        };
        Ok(rows
            .iter()
            .enumerate()
            .map(|(i, r)| {
                Request::new(
                    i as u64,
                    (r.arrived_at - options.start_s) * factor,
                    r.prompt_tokens,
                    r.output_tokens,
                )
            })
            .collect())
    }
}

fn mean_qps(rows: &[TraceRow]) -> Option<f64> {
    let span = rows.last()?.arrived_at - rows.first()?.arrived_at;
    (rows.len() >= 2 && span > 0.0).then(|| (rows.len() - 1) as f64 / span)
}
