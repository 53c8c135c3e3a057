//! Request traces: reading `arrived_at,num_prefill_tokens,num_decode_tokens` CSV files (with the
//! optional token-identity columns `prefix`, `output_id`, `follows`, `think_s`) and replaying them
//! with time or rate scaling.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::Arc;

use crate::columns::{COLUMNS, EXPECTED_HEADER, TRACE_HEADER, TRACE_OPTIONAL_COLUMNS};
use crate::error::{Error, Result};
use crate::limits::{MAX_ARRIVAL_S, check_qps, check_requests};
use crate::lines::{LineTracker, track};
use crate::request::{Follows, Request};
use crate::segment::{NAME_FORMS, Segment, parse_chain, parse_id};

/// One row of a trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TraceRow {
    /// Arrival time, seconds from the start of the trace (≥ 0, non-decreasing).
    pub arrived_at: f64,
    /// Prompt tokens (≥ 1).
    pub prompt_tokens: u32,
    /// Output tokens (≥ 1).
    pub output_tokens: u32,
    /// The `prefix` column: the prompt's shared segments (rows with the same cell share one
    /// allocation).
    pub prefix: Option<Arc<[Segment]>>,
    /// The `output_id` column.
    pub output_segment: Option<u64>,
    /// The `follows` and `think_s` columns; `request` is the 0-based data row of the request
    /// followed (earlier than this row).
    pub follows: Option<Follows>,
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
        // Lines from byte offsets: the parser's own count is a line early after a `\r\n`.
        let (reader, lines) = track(reader);
        let at = Place {
            name,
            lines: &lines,
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
            Some(r) => r.map_err(|e| at.read_err(e))?,
        };
        let mut parser = RowParser::new(header, &at)?;
        let mut rows: Vec<TraceRow> = Vec::new();
        for rec in records {
            let rec = rec.map_err(|e| at.read_err(e))?;
            let line = at.line_of(&rec, 0);
            rows.push(parser.row(&rec, line, rows.len())?);
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
    /// `max_requests` of them, arriving at `(arrived_at - start_s) * factor`, ids `0..n`, with
    /// their prefixes and output segments. A row that follows another follows its replayed
    /// request, with the think time multiplied by the same factor; when the row it follows is
    /// before `start_s`, it is not a follow-up (it arrives at its own time).
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
        let last = (rows[rows.len() - 1].arrived_at - options.start_s) * factor;
        if last > MAX_ARRIVAL_S {
            let (field, fix) = match options.scale {
                TimeScale::Original => (
                    "start_s",
                    "replay from a start_s near the trace's first arrival (absolute timestamps?)",
                ),
                TimeScale::Factor(_) => ("time_scale", "a smaller time_scale"),
                TimeScale::TargetQps(_) => ("qps", "a higher qps"),
            };
            return Err(Error::Conflict {
                field,
                why: format!(
                    "the last replayed request of `{}` would arrive at {last:.3e} s, past {MAX_ARRIVAL_S} s, where simulated time loses its microseconds; give {fix}",
                    self.name
                ),
            });
        }
        Ok(rows
            .iter()
            .enumerate()
            .map(|(i, r)| Request {
                prefix: r.prefix.clone(),
                output_segment: r.output_segment,
                follows: r.follows.and_then(|f| {
                    let row = f.request.checked_sub(first as u64)?;
                    Some(Follows {
                        request: row,
                        think_s: f.think_s * factor,
                    })
                }),
                ..Request::new(
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

/// Where in a trace a fault lies: the file's name and its line breaks.
struct Place<'a> {
    name: &'a str,
    lines: &'a LineTracker,
}

impl Place<'_> {
    /// A bad line's error.
    fn row_err(&self, line: u64, message: String) -> Error {
        Error::TraceRow {
            path: self.name.to_string(),
            line,
            message,
        }
    }

    /// The 1-based line of a record (`default` when the parser gives no position).
    fn line_of(&self, rec: &csv::StringRecord, default: u64) -> u64 {
        rec.position()
            .map_or(default, |p| self.lines.line_at(p.byte()))
    }

    /// A record the CSV parser could not read: at its line, or the file's read error.
    fn read_err(&self, e: csv::Error) -> Error {
        match e.position().map(|p| self.lines.line_at(p.byte())) {
            Some(line) => self.row_err(line, e.to_string()),
            None => match e.into_kind() {
                csv::ErrorKind::Io(source) => Error::Io {
                    path: self.name.to_string(),
                    source,
                },
                other => self.row_err(0, format!("{other:?}")),
            },
        }
    }
}

/// Reads a trace's data rows, once its header has told where each column is.
struct RowParser<'a> {
    at: &'a Place<'a>,
    header: csv::StringRecord,
    header_line: u64,
    /// The required columns' positions, in [`COLUMNS`] order.
    idx: [usize; 3],
    /// The optional columns' positions, in [`TRACE_OPTIONAL_COLUMNS`] order.
    optional: [Option<usize>; 4],
    /// Fields a row needs to reach every named column.
    needed: usize,
    /// Rows with the same prefix cell share one chain (and its length).
    chains: HashMap<String, (Arc<[Segment]>, u64)>,
    /// The previous row's arrival time.
    prev: f64,
}

impl<'a> RowParser<'a> {
    /// Finds the columns in `header`: every required one must be there.
    fn new(header: csv::StringRecord, at: &'a Place<'a>) -> Result<Self> {
        let header_line = at.line_of(&header, 1);
        let mut idx = [0usize; 3];
        for (slot, col) in idx.iter_mut().zip(COLUMNS) {
            *slot = header.iter().position(|h| h == col).ok_or_else(|| {
                at.row_err(
                    header_line,
                    format!(
                        "missing column `{col}` in the header `{}`; expected {EXPECTED_HEADER}",
                        header.iter().collect::<Vec<_>>().join(",")
                    ),
                )
            })?;
        }
        let optional = TRACE_OPTIONAL_COLUMNS.map(|col| header.iter().position(|h| h == col));
        let needed = idx
            .iter()
            .chain(optional.iter().flatten())
            .max()
            .map_or(0, |m| m + 1);
        Ok(RowParser {
            at,
            header,
            header_line,
            idx,
            optional,
            needed,
            chains: HashMap::new(),
            prev: 0.0,
        })
    }

    /// Data row `row` (0-based), at `line` of the file.
    fn row(&mut self, rec: &csv::StringRecord, line: u64, row: usize) -> Result<TraceRow> {
        self.check_width(rec, line)?;
        let arrived_at = self.arrival(rec, line)?;
        let prompt_tokens = self.tokens(rec, line, 1)?;
        let [prefix_col, output_col, follows_col, think_col] = self.optional;
        let cell = |col: Option<usize>| col.map_or("", |i| &rec[i]);
        let prefix = self.prefix(cell(prefix_col), line, prompt_tokens)?;
        let output_segment = self.output_segment(cell(output_col), line)?;
        let follows = self.follows(cell(follows_col), cell(think_col), line, row)?;
        Ok(TraceRow {
            arrived_at,
            prompt_tokens,
            output_tokens: self.tokens(rec, line, 2)?,
            prefix,
            output_segment,
            follows,
        })
    }

    /// A row must reach every named column and hold no cell past the header's.
    fn check_width(&self, rec: &csv::StringRecord, line: u64) -> Result<()> {
        let needed = self.needed;
        if rec.len() < needed {
            return Err(self.at.row_err(
                line,
                format!(
                    "{} field(s), but the header needs {needed} (`{TRACE_HEADER}`)",
                    rec.len()
                ),
            ));
        }
        // A cell past the header's columns belongs to no column: a shifted row, an unquoted
        // comma, or a column the header lacks, not to be dropped unread.
        if rec.len() > self.header.len() {
            return Err(self.at.row_err(
                line,
                format!(
                    "{} fields, but the header (line {}) has {}: `{}`; quote a cell that holds \
                     a comma, or name every column in the header",
                    rec.len(),
                    self.header_line,
                    self.header.len(),
                    self.header.iter().collect::<Vec<_>>().join(",")
                ),
            ));
        }
        Ok(())
    }

    /// The `arrived_at` cell: finite, ≥ 0 and not before the previous row's.
    fn arrival(&mut self, rec: &csv::StringRecord, line: u64) -> Result<f64> {
        let t_raw = &rec[self.idx[0]];
        let t: f64 = t_raw.parse().map_err(|_| {
            self.at.row_err(
                line,
                format!("arrived_at: `{t_raw}` is not a number of seconds"),
            )
        })?;
        if !t.is_finite() || t < 0.0 {
            return Err(self.at.row_err(
                line,
                format!("arrived_at: `{t_raw}` must be a finite time in seconds ≥ 0"),
            ));
        }
        let prev = self.prev;
        if t < prev {
            return Err(self.at.row_err(
                line,
                format!(
                    "arrived_at: {t} is earlier than the previous row's {prev}; rows must be sorted by arrival time"
                ),
            ));
        }
        self.prev = t;
        Ok(t)
    }

    /// The token count in required column `col` (1: prompt, 2: output): at least 1.
    fn tokens(&self, rec: &csv::StringRecord, line: u64, col: usize) -> Result<u32> {
        let raw = &rec[self.idx[col]];
        match raw.parse::<u32>() {
            Ok(0) => Err(self.at.row_err(
                line,
                format!("{}: 0 tokens; lengths must be at least 1", COLUMNS[col]),
            )),
            Ok(v) => Ok(v),
            Err(_) => Err(self.at.row_err(
                line,
                format!(
                    "{}: `{raw}` is not a whole number of tokens from 1 to 4294967295",
                    COLUMNS[col]
                ),
            )),
        }
    }

    /// The `prefix` cell: a chain whose lengths sum to at most the prompt.
    fn prefix(
        &mut self,
        text: &str,
        line: u64,
        prompt_tokens: u32,
    ) -> Result<Option<Arc<[Segment]>>> {
        if text.is_empty() {
            return Ok(None);
        }
        let (chain, sum) = match self.chains.get(text) {
            Some((chain, sum)) => (Arc::clone(chain), *sum),
            None => {
                let chain: Arc<[Segment]> = parse_chain(text)
                    .map_err(|why| {
                        self.at.row_err(
                            line,
                            format!("prefix: {why}; fix the cell or leave it empty"),
                        )
                    })?
                    .into();
                let sum = chain.iter().map(|s| u64::from(s.len)).sum();
                self.chains
                    .insert(text.to_string(), (Arc::clone(&chain), sum));
                (chain, sum)
            }
        };
        if sum > u64::from(prompt_tokens) {
            return Err(self.at.row_err(
                line,
                format!(
                    "prefix: the segments of `{text}` sum to {sum} tokens, more than num_prefill_tokens = {prompt_tokens}; shorten the segments or raise num_prefill_tokens"
                ),
            ));
        }
        Ok(Some(chain))
    }

    /// The `output_id` cell: a segment name, or empty.
    fn output_segment(&self, text: &str, line: u64) -> Result<Option<u64>> {
        if text.is_empty() {
            return Ok(None);
        }
        parse_id(text).map(Some).map_err(|why| {
            self.at.row_err(
                line,
                format!("output_id: `{text}`: {why}; give {NAME_FORMS}, or leave it empty"),
            )
        })
    }

    /// The `follows` and `think_s` cells of data row `row`: both empty, or an earlier row and
    /// a think time.
    fn follows(&self, f: &str, th: &str, line: u64, row: usize) -> Result<Option<Follows>> {
        match (f, th) {
            ("", "") => Ok(None),
            (f, "") => Err(self.at.row_err(
                line,
                format!(
                    "think_s: missing; a row that follows another (follows = `{f}`) needs the seconds between that request's end and this one (≥ 0)"
                ),
            )),
            ("", th) => Err(self.at.row_err(
                line,
                format!(
                    "follows: missing; think_s = `{th}` needs the 0-based data row of the earlier request this one follows (or leave think_s empty)"
                ),
            )),
            (f, th) => {
                let request = f
                    .parse::<u64>()
                    .ok()
                    .filter(|&r| r < row as u64)
                    .ok_or_else(|| {
                        self.at.row_err(
                            line,
                            format!("follows: `{f}` is not an earlier row; give the 0-based data row of an earlier request (this row is {row})"),
                        )
                    })?;
                let think_s = th
                    .parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite() && *v >= 0.0)
                    .ok_or_else(|| {
                        self.at.row_err(
                            line,
                            format!("think_s: `{th}` must be a finite number of seconds ≥ 0"),
                        )
                    })?;
                Ok(Some(Follows { request, think_s }))
            }
        }
    }
}
