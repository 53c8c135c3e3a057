//! Measured serving runs, replayed and compared with the simulator's prediction.
//!
//! Two per-request formats ([`MeasuredRun::from_path`] tells them apart by content):
//! - **CSV**, one row per request, header names in any order (others ignored): the arrival
//!   (`arrival_s` or `arrived_at`, seconds), the prompt (`prompt_tokens`, `num_prefill_tokens` or
//!   `input_tokens`), the output (`output_tokens` or `num_decode_tokens`), and what the client
//!   measured: `ttft_s` or `ttft_ms`, `e2e_s`, `e2e_ms` or `latency_s`. Optional: `status` (a
//!   row whose status is not `finished`/`ok`/`success` is a failed request: replayed, left out
//!   of the measured figures), `prefix` (the trace prefix chain). The per-request CSV kvplan's
//!   `serve` writes is such a file.
//! - **`vllm bench serve` result JSON** saved with its save-detailed option (vLLM 0.15,
//!   `vllm/benchmarks/serve.py`): `input_lens`, `output_lens`, `ttfts`, `itls` (E2E = TTFT plus
//!   the inter-token gaps), `start_times` (the send times, `time.perf_counter()`; taken relative
//!   to the first) and `errors` (non-empty: failed). Without `start_times` (a file saved without
//!   the save-detailed option has no per-request data at all) the file is refused, naming the
//!   option.
//!
//! [`compare`] sets a prediction against the measurement metric by metric (TTFT, TPOT, E2E:
//! mean and percentiles; throughput) and request by request (median relative error of E2E and
//! TTFT over requests both served).

use std::path::Path;

use kvplan_workloads::Request;
use serde::Serialize;

use crate::output::{Percentiles, ServeReport, Status};

/// Errors reading a measured run. Each names the file (and line or field).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunsError {
    /// The file could not be read.
    #[error("{path}: cannot read: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A malformed file.
    #[error("{path}: {message}")]
    Format {
        /// The file (with `:line` for CSV rows).
        path: String,
        /// What is wrong and what is expected.
        message: String,
    },
    /// A stage table's row names a model kvplan cannot load (`model_hf`).
    #[error("{path}:{line}: model_hf: `{value}` {}", unknown_model(source))]
    UnknownModel {
        /// The file.
        path: String,
        /// The row's line (the header is line 1).
        line: u64,
        /// The model as written.
        value: String,
        /// Why it does not load.
        source: Box<kvplan_vocab::Error>,
    },
    /// A stage table's row names a GPU with no hardware preset (`hardware`).
    #[error(
        "{path}:{line}: hardware: `{value}` has no hardware preset (write a preset's name, such as h100-sxm, or H100, H200, A100, A100 40GB, RTX 4090, T4)"
    )]
    UnknownGpu {
        /// The file.
        path: String,
        /// The row's line (the header is line 1).
        line: u64,
        /// The GPU as written.
        value: String,
    },
}

/// Why a stage's model does not load, after its name: not a name kvplan knows (with the
/// nearest, if any), or the load's own error (a config.json that cannot be read).
fn unknown_model(e: &kvplan_vocab::Error) -> String {
    match e {
        kvplan_vocab::Error::UnknownModel { close, .. } => format!(
            "is no model kvplan knows{} (write a preset's name, a preset's Hugging Face id, or a config.json path)",
            match close.as_slice() {
                [] => String::new(),
                c => format!("; did you mean {}?", c.join(", ")),
            }
        ),
        other => format!("does not load: {other}"),
    }
}

impl RunsError {
    /// The stage table's column at fault when a row names a model or GPU kvplan does not know
    /// (`model_hf`, `hardware`); `None` for any other error.
    pub fn unknown_column(&self) -> Option<&'static str> {
        match self {
            RunsError::UnknownModel { .. } => Some("model_hf"),
            RunsError::UnknownGpu { .. } => Some("hardware"),
            _ => None,
        }
    }
}

/// One request as a client measured it.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredRequest {
    /// Send time, seconds from the run's first request.
    pub arrival_s: f64,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Output tokens.
    pub output_tokens: u32,
    /// Time to first token, seconds (NaN when failed).
    pub ttft_s: f64,
    /// End to end, seconds (NaN when failed).
    pub e2e_s: f64,
    /// Whether the request was served.
    pub ok: bool,
    /// The prompt's shared prefix, when the file gives one.
    pub prefix: Option<std::sync::Arc<[kvplan_workloads::Segment]>>,
}

/// A measured run: its requests in arrival order.
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredRun {
    /// Where it came from.
    pub name: String,
    /// The model the file names, as written (a `vllm bench serve` JSON's `model_id`; a CSV
    /// names none).
    pub model: Option<String>,
    /// The requests, sorted by arrival.
    pub requests: Vec<MeasuredRequest>,
}

/// A row with cells past the header's columns: they belong to no column (a shifted row, an
/// unquoted comma), and are refused rather than dropped unread.
fn wider_than_header(name: &str, line: u64, fields: usize, header: usize) -> RunsError {
    format_err(
        &format!("{name}:{line}"),
        format!(
            "{fields} fields, but the header has {header}; quote a cell that holds a comma, or \
             name every column in the header"
        ),
    )
}

/// A CSV reader's error, its row named by its line ([`kvplan_workloads::lines`]) and a row of
/// the wrong width in words.
fn csv_err(
    name: &str,
    e: &csv::Error,
    lines: &mut kvplan_workloads::lines::LineCounter,
    header: usize,
) -> RunsError {
    let line = e.position().map(|p| lines.line_at(p.byte()));
    match (e.kind(), line) {
        (csv::ErrorKind::UnequalLengths { len, .. }, Some(line)) => {
            let len = *len as usize;
            if len > header {
                wider_than_header(name, line, len, header)
            } else {
                format_err(
                    &format!("{name}:{line}"),
                    format!("{len} fields, but the header has {header}"),
                )
            }
        }
        (_, Some(line)) => format_err(&format!("{name}:{line}"), e.to_string()),
        (_, None) => format_err(name, e.to_string()),
    }
}

fn format_err(path: &str, message: impl Into<String>) -> RunsError {
    RunsError::Format {
        path: path.to_string(),
        message: message.into(),
    }
}

/// A measured run to compare with: load stages of shared-prefix runs (a stage table), or one
/// run's requests (a per-request CSV or a `vllm bench serve` JSON).
#[derive(Debug, Clone)]
pub enum Measured {
    /// A stage table: each stage replayed with its own settings ([`replay_stages`]).
    Stages(Vec<StageRun>),
    /// One run: its requests replayed on the scenario's model, hardware and engine.
    Run(MeasuredRun),
}

impl Measured {
    /// Reads `path`, telling a stage table by its header from a single run's file. A JSON file
    /// (by its first character, or a `.json` name) is read as it streams, never held whole.
    pub fn open(path: &Path) -> Result<Measured, RunsError> {
        let name = path.display().to_string();
        if is_json_file(path, &name)? {
            return Ok(Measured::Run(MeasuredRun::from_json_path(path, &name)?));
        }
        let text = read_text(path, &name)?;
        if is_stage_table(text.lines().next().unwrap_or("")) {
            Ok(Measured::Stages(StageRun::parse(&text, &name)?))
        } else {
            Ok(Measured::Run(MeasuredRun::from_csv(&text, &name)?))
        }
    }
}

fn read_text(path: &Path, name: &str) -> Result<String, RunsError> {
    std::fs::read_to_string(path).map_err(|source| RunsError::Io {
        path: name.to_string(),
        source,
    })
}

/// What a measured run's file may be, in words, for a file that is neither.
const EITHER: &str = "expected a per-request CSV (a header with arrival_s, prompt_tokens, \
                      output_tokens, ttft_s and e2e_s) or a `vllm bench serve --save-detailed` \
                      result JSON";

/// What a `vllm bench serve` result must be, for a JSON file that is not one.
const BENCH_OBJECT: &str = "expected the JSON object `vllm bench serve --save-detailed` writes, \
                            with the arrays input_lens, output_lens, ttfts, itls, start_times \
                            (and errors)";

/// Whether the file at `path` is JSON: its first character other than white space is `{` or
/// `[`, or its name ends in `.json`. An empty file is refused here, naming what is expected.
fn is_json_file(path: &Path, name: &str) -> Result<bool, RunsError> {
    use std::io::Read;
    let io = |source| RunsError::Io {
        path: name.to_string(),
        source,
    };
    let mut file = std::fs::File::open(path).map_err(io)?;
    let mut buf = [0u8; 4096];
    let first = loop {
        let n = file.read(&mut buf).map_err(io)?;
        if n == 0 {
            break None;
        }
        if let Some(&b) = buf[..n].iter().find(|b| !b.is_ascii_whitespace()) {
            break Some(b);
        }
    };
    let json_name = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    match first {
        None => Err(format_err(
            name,
            format!(
                "is empty; {}",
                if json_name { BENCH_OBJECT } else { EITHER }
            ),
        )),
        Some(b) => Ok(b == b'{' || b == b'[' || json_name),
    }
}

/// That the JSON `open` gives starts as an object, its first character other than white space
/// a `{`: an empty file, an array or another value is refused, naming what is expected.
fn check_json_object<R: std::io::Read>(
    open: &impl Fn() -> Result<R, RunsError>,
    name: &str,
) -> Result<(), RunsError> {
    let first = {
        let mut r = open()?;
        let mut byte = [0u8; 1];
        loop {
            match r.read(&mut byte) {
                Ok(0) => break None,
                Ok(_) if byte[0].is_ascii_whitespace() => {}
                Ok(_) => break Some(byte[0]),
                Err(source) => {
                    return Err(RunsError::Io {
                        path: name.to_string(),
                        source,
                    });
                }
            }
        }
    };
    match first {
        Some(b'{') => Ok(()),
        None => Err(format_err(name, format!("is empty; {BENCH_OBJECT}"))),
        Some(b'[') => Err(format_err(name, format!("is a JSON array; {BENCH_OBJECT}"))),
        Some(_) => Err(format_err(
            name,
            format!("is not a JSON object; {BENCH_OBJECT}"),
        )),
    }
}

/// The requests of a `vllm bench serve` result of `n` requests (its shape checked), each
/// latency checked; arrivals are the send times less the first.
fn bench_requests(
    v: &bench::Bench,
    n: usize,
    name: &str,
) -> Result<Vec<MeasuredRequest>, RunsError> {
    let t0 = v
        .start_times
        .iter()
        .filter_map(bench::Cell::as_f64)
        .fold(f64::INFINITY, f64::min);
    let mut requests = Vec::with_capacity(n);
    for i in 0..n {
        let bad = |key: &str| format_err(name, format!("`{key}[{i}]` is not a number"));
        let tok = |a: &[bench::Cell], key: &str| {
            a[i].as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .ok_or_else(|| bad(key))
        };
        let start = v.start_times[i]
            .as_f64()
            .ok_or_else(|| bad("start_times"))?;
        let ttft = v.ttfts[i].as_f64().ok_or_else(|| bad("ttfts"))?;
        let Some(gaps) = &v.itls[i].0 else {
            return Err(bad("itls"));
        };
        let negative = |key: &str, v: f64| {
            format_err(
                name,
                format!("`{key}[{i}]` is {v}: a latency is a time of 0 or more"),
            )
        };
        if ttft.is_nan() || ttft < 0.0 {
            return Err(negative("ttfts", ttft));
        }
        if let Some(g) = gaps.bad {
            return Err(negative("itls", g));
        }
        let failed = (v.errors.0.as_ref()).is_some_and(|e| e.0.get(i).copied() == Some(true));
        let output = tok(&v.output_lens, "output_lens")?;
        let ok = !failed && output > 0;
        requests.push(MeasuredRequest {
            arrival_s: start - t0,
            prompt_tokens: tok(&v.input_lens, "input_lens")?,
            output_tokens: output.max(1),
            ttft_s: if ok { ttft } else { f64::NAN },
            e2e_s: if ok { ttft + gaps.sum } else { f64::NAN },
            ok,
            prefix: None,
        });
    }
    Ok(requests)
}

/// Where a per-request CSV's columns stand (see the module docs), and the unit of each
/// latency (1 for seconds, 1e-3 for milliseconds).
struct CsvColumns {
    arrival: usize,
    prompt: usize,
    output: usize,
    ttft: usize,
    ttft_scale: f64,
    e2e: usize,
    e2e_scale: f64,
    status: Option<usize>,
    prefix: Option<usize>,
}

impl CsvColumns {
    /// The columns of `header`, or an error naming the first one missing.
    fn find(header: &csv::StringRecord, name: &str) -> Result<CsvColumns, RunsError> {
        let find = |names: &[&str]| {
            names
                .iter()
                .find_map(|n| header.iter().position(|h| h == *n))
        };
        let expected = "a header with arrival_s (or arrived_at), prompt_tokens (or \
                        num_prefill_tokens), output_tokens (or num_decode_tokens), ttft_s (or \
                        ttft_ms) and e2e_s (or e2e_ms, latency_s)";
        let need = |names: &[&str], what: &str| {
            find(names).ok_or_else(|| {
                format_err(
                    name,
                    format!(
                        "no {what} column ({}); expected {expected}",
                        names.join(" or ")
                    ),
                )
            })
        };
        let arrival = need(&["arrival_s", "arrived_at"], "arrival")?;
        let prompt = need(
            &["prompt_tokens", "num_prefill_tokens", "input_tokens"],
            "prompt",
        )?;
        let output = need(&["output_tokens", "num_decode_tokens"], "output")?;
        let (ttft, ttft_scale) = match (find(&["ttft_s"]), find(&["ttft_ms"])) {
            (Some(i), _) => (i, 1.0),
            (None, Some(i)) => (i, 1e-3),
            _ => return Err(need(&["ttft_s", "ttft_ms"], "TTFT").unwrap_err()),
        };
        let (e2e, e2e_scale) = match (find(&["e2e_s", "latency_s"]), find(&["e2e_ms"])) {
            (Some(i), _) => (i, 1.0),
            (None, Some(i)) => (i, 1e-3),
            _ => return Err(need(&["e2e_s", "e2e_ms", "latency_s"], "E2E").unwrap_err()),
        };
        Ok(CsvColumns {
            arrival,
            prompt,
            output,
            ttft,
            ttft_scale,
            e2e,
            e2e_scale,
            status: find(&["status"]),
            prefix: find(&["prefix"]),
        })
    }

    /// The request of one row, its cells checked; errors name the row as `at` (`file:line`)
    /// and the column.
    fn request(
        &self,
        header: &csv::StringRecord,
        rec: &csv::StringRecord,
        at: &str,
    ) -> Result<MeasuredRequest, RunsError> {
        let err = |field: &str, msg: String| format_err(at, format!("{field}: {msg}"));
        let cell = |i: usize| rec.get(i).unwrap_or("");
        let num = |i: usize, field: &str| -> Result<f64, RunsError> {
            let c = cell(i);
            if c.is_empty() {
                return Ok(f64::NAN);
            }
            match c.parse::<f64>() {
                // `nan` parses, but a measurement is a number or an empty cell.
                Ok(v) if v.is_nan() => Err(err(
                    field,
                    format!("`{c}` is not a number; leave the cell empty for a failed request"),
                )),
                Ok(v) => Ok(v),
                Err(_) => Err(err(field, format!("`{c}` is not a number"))),
            }
        };
        let tokens = |i: usize| -> Result<u32, RunsError> {
            let c = cell(i);
            c.parse::<u32>()
                .map_err(|_| err(&header[i], format!("`{c}` is not a whole number of tokens")))
        };
        let (arrival, ttft, e2e) = (self.arrival, self.ttft, self.e2e);
        let arrival_s = num(arrival, &header[arrival])?;
        if !(arrival_s.is_finite() && arrival_s >= 0.0) {
            return Err(err(
                &header[arrival],
                "must be a time in seconds, 0 or more".into(),
            ));
        }
        let ok = self.status.is_none_or(|i| {
            matches!(
                cell(i).to_ascii_lowercase().as_str(),
                "finished" | "ok" | "success" | "served"
            )
        });
        let ttft_s = num(ttft, &header[ttft])? * self.ttft_scale;
        let e2e_s = num(e2e, &header[e2e])? * self.e2e_scale;
        self.check_latencies(header, rec, at, (ttft_s, e2e_s))?;
        let ok = ok && ttft_s.is_finite() && e2e_s.is_finite();
        let prefix = match self.prefix.map(cell).filter(|c| !c.is_empty()) {
            Some(c) => Some(
                kvplan_workloads::parse_prefix(c)
                    .map_err(|e| err("prefix", e.to_string()))?
                    .into(),
            ),
            None => None,
        };
        Ok(MeasuredRequest {
            arrival_s,
            prompt_tokens: tokens(self.prompt)?,
            output_tokens: tokens(self.output)?,
            ttft_s: if ok { ttft_s } else { f64::NAN },
            e2e_s: if ok { e2e_s } else { f64::NAN },
            ok,
            prefix,
        })
    }

    /// A row's TTFT and E2E, seconds: each measured (a time, 0 or more) or left empty for a
    /// request that failed (NaN); the first token before the last. Errors name the row as
    /// `at` and the column.
    fn check_latencies(
        &self,
        header: &csv::StringRecord,
        rec: &csv::StringRecord,
        at: &str,
        (ttft_s, e2e_s): (f64, f64),
    ) -> Result<(), RunsError> {
        let err = |field: &str, msg: String| format_err(at, format!("{field}: {msg}"));
        let cell = |i: usize| rec.get(i).unwrap_or("");
        let (ttft, e2e) = (self.ttft, self.e2e);
        for (i, v) in [(ttft, ttft_s), (e2e, e2e_s)] {
            if v.is_infinite() || v < 0.0 {
                return Err(err(
                    &header[i],
                    format!(
                        "`{}` is not a latency: a time of 0 or more, or empty for a failed request",
                        cell(i)
                    ),
                ));
            }
        }
        if ttft_s > e2e_s {
            return Err(err(
                &header[ttft],
                format!(
                    "`{}` is above {} `{}`: the first token cannot come after the last",
                    cell(ttft),
                    &header[e2e],
                    cell(e2e)
                ),
            ));
        }
        Ok(())
    }
}

impl MeasuredRun {
    /// Reads a per-request CSV or a `vllm bench serve` JSON (by its first non-blank character,
    /// or a `.json` name).
    pub fn from_path(path: &Path) -> Result<MeasuredRun, RunsError> {
        let name = path.display().to_string();
        if is_json_file(path, &name)? {
            return MeasuredRun::from_json_path(path, &name);
        }
        MeasuredRun::from_csv(&read_text(path, &name)?, &name)
    }

    /// [`MeasuredRun::from_path`] from text; `name` stands for the file in errors.
    pub fn from_text(text: &str, name: &str) -> Result<MeasuredRun, RunsError> {
        let t = text.trim_start();
        if t.starts_with(['{', '[']) || name.to_ascii_lowercase().ends_with(".json") {
            MeasuredRun::from_vllm_json(text, name)
        } else if t.is_empty() {
            Err(format_err(name, format!("is empty; {EITHER}")))
        } else {
            MeasuredRun::from_csv(text, name)
        }
    }

    /// A `vllm bench serve` JSON read from `path` as it streams: first its shape (which arrays
    /// it holds, how long), every value skipped unread, then, if the shape is one, its values.
    /// A malformed or misshapen file of any size fails after the first pass, in constant
    /// memory; a good one holds its requests' figures, not the text or a document tree.
    fn from_json_path(path: &Path, name: &str) -> Result<MeasuredRun, RunsError> {
        let open = || {
            std::fs::File::open(path)
                .map(|f| std::io::BufReader::with_capacity(1 << 16, f))
                .map_err(|source| RunsError::Io {
                    path: name.to_string(),
                    source,
                })
        };
        MeasuredRun::from_json_reader(open, name)
    }

    /// Reads the per-request CSV format (see the module docs).
    pub fn from_csv(text: &str, name: &str) -> Result<MeasuredRun, RunsError> {
        let mut rdr = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .flexible(true)
            .from_reader(text.as_bytes());
        let header = rdr
            .headers()
            .map_err(|e| format_err(name, e.to_string()))?
            .clone();
        let cols = CsvColumns::find(&header, name)?;
        let mut requests = Vec::new();
        let mut lines = kvplan_workloads::lines::LineCounter::new(text);
        for rec in rdr.records() {
            let rec = rec.map_err(|e| csv_err(name, &e, &mut lines, header.len()))?;
            let line = rec.position().map_or(0, |p| lines.line_at(p.byte()));
            if rec.len() > header.len() {
                return Err(wider_than_header(name, line, rec.len(), header.len()));
            }
            requests.push(cols.request(&header, &rec, &format!("{name}:{line}"))?);
        }
        MeasuredRun::checked(name, requests)
    }

    /// Reads the result JSON of vLLM's `bench serve` with its save-detailed option.
    pub fn from_vllm_json(text: &str, name: &str) -> Result<MeasuredRun, RunsError> {
        MeasuredRun::from_json_reader(|| Ok(text.as_bytes()), name)
    }

    /// A `vllm bench serve` JSON from the reader `open` gives (called once per pass).
    fn from_json_reader<R: std::io::Read>(
        open: impl Fn() -> Result<R, RunsError>,
        name: &str,
    ) -> Result<MeasuredRun, RunsError> {
        check_json_object(&open, name)?;
        let json_err = |e: serde_json::Error| {
            format_err(
                name,
                if e.is_syntax() || e.is_eof() {
                    format!("not JSON: {e}")
                } else {
                    format!("not a `vllm bench serve` result: {e}")
                },
            )
        };
        // Pass 1: the shape, in constant memory.
        let shape: bench::Shape = serde_json::from_reader(open()?).map_err(json_err)?;
        let n = shape.check().map_err(|m| format_err(name, m))?;
        // Pass 2: the values of a file of the right shape.
        let v: bench::Bench = serde_json::from_reader(open()?).map_err(json_err)?;
        let lens = [
            v.input_lens.len(),
            v.output_lens.len(),
            v.ttfts.len(),
            v.itls.len(),
            v.start_times.len(),
        ];
        if lens.iter().any(|&l| l != n) {
            return Err(format_err(name, "changed while it was read; read it again"));
        }
        let requests = bench_requests(&v, n, name)?;
        let mut run = MeasuredRun::checked(name, requests)?;
        run.model = (v.model_id.as_str())
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(String::from);
        Ok(run)
    }

    fn checked(name: &str, mut requests: Vec<MeasuredRequest>) -> Result<MeasuredRun, RunsError> {
        if requests.is_empty() {
            return Err(format_err(name, "no requests"));
        }
        // A run in which no request succeeded measured no latency: nothing to compare with.
        if !requests.iter().any(|r| r.ok) {
            return Err(format_err(
                name,
                format!(
                    "no request succeeded (all {} failed or without latencies): nothing measured to compare with",
                    requests.len()
                ),
            ));
        }
        requests.sort_by(|a, b| a.arrival_s.total_cmp(&b.arrival_s));
        let t0 = requests[0].arrival_s;
        for r in &mut requests {
            r.arrival_s -= t0;
        }
        Ok(MeasuredRun {
            name: name.to_string(),
            model: None,
            requests,
        })
    }

    /// The requests to replay, ids in arrival order.
    pub fn to_requests(&self) -> Vec<Request> {
        self.requests
            .iter()
            .enumerate()
            .map(|(i, m)| {
                let mut r = Request::new(i as u64, m.arrival_s, m.prompt_tokens, m.output_tokens);
                r.prefix = m.prefix.clone();
                r
            })
            .collect()
    }

    /// The measured figures, over served requests.
    pub fn figures(&self) -> Figures {
        Figures::from_served(
            self.requests
                .iter()
                .filter(|r| r.ok)
                .map(|r| (r.arrival_s, r.output_tokens, r.ttft_s, r.e2e_s)),
        )
    }
}

/// Time per output token after the first (vLLM bench's TPOT; 0 for one token).
fn tpot(e2e: f64, ttft: f64, out: u32) -> f64 {
    if out > 1 {
        (e2e - ttft) / f64::from(out - 1)
    } else {
        0.0
    }
}

/// A served request's `(arrival, output tokens, TTFT, E2E)`, seconds and tokens.
pub type Served = (f64, u32, f64, f64);

/// A run's figures: latency percentiles over served requests, throughput over the run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Figures {
    /// Requests served.
    pub served: u64,
    /// Time to first token.
    pub ttft_s: Percentiles,
    /// Time per output token.
    pub tpot_s: Percentiles,
    /// End to end.
    pub e2e_s: Percentiles,
    /// Served requests per second, first send to last completion.
    pub requests_per_s: f64,
    /// Output tokens per second, the same span.
    pub output_tokens_per_s: f64,
}

impl Figures {
    /// The figures of served requests given as `(arrival, output tokens, TTFT, E2E)`.
    pub fn from_served(served: impl Iterator<Item = Served>) -> Figures {
        let v: Vec<Served> = served.collect();
        let pct = |f: &dyn Fn(&Served) -> f64| {
            let mut x: Vec<f64> = v.iter().map(f).collect();
            Percentiles::of(&mut x)
        };
        let end = v.iter().map(|r| r.0 + r.3).fold(0.0f64, f64::max);
        let per_s = |x: f64| if end > 0.0 { x / end } else { 0.0 };
        Figures {
            served: v.len() as u64,
            ttft_s: pct(&|r| r.2),
            tpot_s: pct(&|r| tpot(r.3, r.2, r.1)),
            e2e_s: pct(&|r| r.3),
            requests_per_s: per_s(v.len() as f64),
            output_tokens_per_s: per_s(v.iter().map(|r| f64::from(r.1)).sum::<f64>()),
        }
    }

    /// The same figures of a simulated run (served requests, same definitions).
    pub fn of(out: &ServeReport) -> Figures {
        Figures::from_served(
            out.requests
                .iter()
                .filter(|r| r.status == Status::Finished)
                .map(|r| (r.arrival_s, r.output_tokens, r.ttft_s, r.e2e_s)),
        )
    }

    /// `(name, value)` of every figure, in report order.
    pub fn named(&self) -> Vec<(&'static str, f64)> {
        let mut v = vec![("served", self.served as f64)];
        for (m, p) in [
            ("ttft", &self.ttft_s),
            ("tpot", &self.tpot_s),
            ("e2e", &self.e2e_s),
        ] {
            for (q, x) in [
                ("mean", p.mean),
                ("p50", p.p50),
                ("p90", p.p90),
                ("p99", p.p99),
            ] {
                v.push((metric_name(m, q), x));
            }
        }
        v.push(("requests_per_s", self.requests_per_s));
        v.push(("output_tok_s", self.output_tokens_per_s));
        v
    }
}

fn metric_name(m: &str, q: &str) -> &'static str {
    match (m, q) {
        ("ttft", "mean") => "ttft_mean_s",
        ("ttft", "p50") => "ttft_p50_s",
        ("ttft", "p90") => "ttft_p90_s",
        ("ttft", "p99") => "ttft_p99_s",
        ("tpot", "mean") => "tpot_mean_s",
        ("tpot", "p50") => "tpot_p50_s",
        ("tpot", "p90") => "tpot_p90_s",
        ("tpot", "p99") => "tpot_p99_s",
        ("e2e", "mean") => "e2e_mean_s",
        ("e2e", "p50") => "e2e_p50_s",
        ("e2e", "p90") => "e2e_p90_s",
        _ => "e2e_p99_s",
    }
}

/// One metric, predicted against measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricError {
    /// The metric (`ttft_mean_s`, …).
    pub metric: &'static str,
    /// The simulator's value.
    pub predicted: f64,
    /// The measurement.
    pub measured: f64,
    /// `predicted / measured − 1`.
    pub error: f64,
    /// The prediction's error band, when one was drawn ([`crate::bands`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub band: Option<crate::bands::Band>,
}

/// A prediction set against a measurement.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// The measured run.
    pub run: String,
    /// Metric by metric.
    pub metrics: Vec<MetricError>,
    /// Median over requests served in both of `|predicted E2E / measured E2E − 1|`.
    pub median_request_e2e_error: f64,
    /// The same for TTFT.
    pub median_request_ttft_error: f64,
}

/// Relative error `p / m − 1` (0 when both are 0).
pub fn rel_error(p: f64, m: f64) -> f64 {
    if m == 0.0 {
        if p == 0.0 { 0.0 } else { f64::INFINITY }
    } else {
        p / m - 1.0
    }
}

/// Compares the simulated replay `out` of `run` (requests in the same order) with it.
pub fn compare(run: &MeasuredRun, out: &ServeReport) -> Comparison {
    let measured = run.figures();
    let predicted = Figures::of(out);
    let metrics = predicted
        .named()
        .into_iter()
        .zip(measured.named())
        .map(|((metric, p), (_, m))| MetricError {
            band: None,
            metric,
            predicted: p,
            measured: m,
            error: rel_error(p, m),
        })
        .collect();
    let mut e2e = Vec::new();
    let mut ttft = Vec::new();
    for (m, p) in run.requests.iter().zip(&out.requests) {
        if m.ok && p.status == Status::Finished {
            e2e.push(rel_error(p.e2e_s, m.e2e_s).abs());
            ttft.push(rel_error(p.ttft_s, m.ttft_s).abs());
        }
    }
    Comparison {
        run: run.name.clone(),
        metrics,
        median_request_e2e_error: Percentiles::of(&mut e2e).p50,
        median_request_ttft_error: Percentiles::of(&mut ttft).p50,
    }
}

/// Why a stage of a stage table was not replayed.
#[derive(Debug, thiserror::Error)]
pub enum StageSkip {
    /// Its scenario does not resolve (a setting out of range, a model that does not fit the
    /// GPU). A model or GPU kvplan does not know is not skipped: it is refused
    /// ([`ReplayError::Refused`]).
    #[error(transparent)]
    Resolve(crate::scenario::ScenarioError),
}

/// Why a stage table could not be replayed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReplayError {
    /// A row names a model or GPU kvplan does not know ([`check_stage_names`]).
    #[error(transparent)]
    Refused(RunsError),
    /// A replay failed.
    #[error(transparent)]
    Scenario(#[from] crate::scenario::ScenarioError),
}

/// Refuses the first stage (in order) whose row names a model or GPU kvplan does not know:
/// `model_hf` neither a preset (by name or Hugging Face id, [`kvplan_vocab::ModelSpec::preset_for_hf_id`])
/// nor a model that loads (a config.json path), unless `model` replaces every row's;
/// `hardware` without a preset ([`hardware_preset`]), unless `hardware` replaces every row's.
/// The error names the file, the row's line, the column and the value.
pub fn check_stage_names(
    stages: &[StageRun],
    model: Option<&str>,
    hardware: Option<&str>,
) -> Result<(), RunsError> {
    // Each model is loaded once: a table repeats its models row after row.
    let mut loaded: Vec<&str> = Vec::new();
    for st in stages {
        if model.is_none() && !loaded.contains(&st.model_hf.as_str()) {
            st.model_loads()?;
            loaded.push(&st.model_hf);
        }
        if hardware.is_none() {
            st.gpu_preset()?;
        }
    }
    Ok(())
}

/// A stage table replayed: one comparison per stage that ran, and the stages skipped by name.
#[derive(Debug)]
pub struct StageReplay {
    /// Predicted against measured, stage by stage.
    pub rows: Vec<StageComparison>,
    /// The stages that could not be replayed, with why.
    pub skipped: Vec<(String, StageSkip)>,
}

/// Replays every stage with its own settings (the model and GPU its row names, unless `model`
/// / `hardware` say otherwise), in parallel. A row naming a model or GPU kvplan does not know is refused
/// before any stage runs ([`check_stage_names`]); a stage whose scenario does not resolve is
/// skipped; a replay that fails is an error.
pub fn replay_stages(
    stages: &[StageRun],
    model: Option<&str>,
    hardware: Option<&str>,
) -> Result<StageReplay, ReplayError> {
    check_stage_names(stages, model, hardware).map_err(ReplayError::Refused)?;
    let mut replay = StageReplay {
        rows: Vec::new(),
        skipped: Vec::new(),
    };
    // In parallel, collected in the table's order (the first failure in that order is the
    // error), so the report is the serial one's.
    let outcomes: Vec<_> = {
        use rayon::prelude::*;
        (stages.par_iter())
            .map(|st| replay_stage(st, model, hardware).map(|r| r.map(|(_, row)| row)))
            .collect()
    };
    for (st, outcome) in stages.iter().zip(outcomes) {
        match outcome? {
            Ok(row) => replay.rows.push(row),
            Err(why) => replay.skipped.push((st.name.clone(), why)),
        }
    }
    Ok(replay)
}

/// One stage of [`replay_stages`]: the scenario it was replayed on and its comparison, or why
/// its scenario does not resolve (`Ok(Err(_))`); a row naming a model or GPU kvplan does not
/// know is refused, a replay that fails is an error.
pub fn replay_stage(
    stage: &StageRun,
    model: Option<&str>,
    hardware: Option<&str>,
) -> Result<Result<(crate::scenario::ServeScenario, StageComparison), StageSkip>, ReplayError> {
    let raw = stage
        .scenario(model, hardware)
        .map_err(ReplayError::Refused)?;
    let sc = match raw.resolve() {
        Ok(sc) => sc,
        Err(why) => return Ok(Err(StageSkip::Resolve(why))),
    };
    let reqs = sc
        .requests()
        .map_err(crate::scenario::ScenarioError::from)?;
    let out = sc
        .run(&reqs)
        .map_err(crate::scenario::ScenarioError::from)?;
    let row = StageComparison::new(stage, &out);
    Ok(Ok((sc, row)))
}

impl MeasuredRun {
    /// The workload of a scenario that replays this run, in place of the scenario's `given` one:
    /// the requests come from the run, so a workload of its own (a trace, arrivals, prompt
    /// lengths) is refused, naming those fields in backquotes; else a placeholder (one request,
    /// all at once) that the run's requests replace.
    pub fn replay_workload(
        &self,
        given: &kvplan_workloads::WorkloadConfig,
    ) -> Result<kvplan_workloads::WorkloadConfig, String> {
        if given.trace.is_some() || given.arrivals.is_some() || given.prompt_lengths.is_some() {
            return Err(format!(
                "{} gives the requests; drop the workload (`workload.trace`, `workload.arrivals`, \
                 `workload.prompt_lengths`, or the scenario's [workload])",
                self.name
            ));
        }
        Ok(kvplan_workloads::WorkloadConfig {
            arrivals: Some("all-at-once".into()),
            prompt_lengths: Some("1".into()),
            output_lengths: Some("1".into()),
            requests: Some(1),
            ..Default::default()
        })
    }
}

/// The parts of a `vllm bench serve` result JSON kvplan reads, deserialised as the file
/// streams: no field holds more than its requests' figures (a request's gaps are summed as
/// they are read), and every other field is skipped unread.
mod bench {
    use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use std::fmt;

    /// The arrays a result must hold, by length, every value skipped (pass 1).
    #[derive(serde::Deserialize)]
    pub(super) struct Shape {
        input_lens: Option<Array<Count>>,
        output_lens: Option<Array<Count>>,
        ttfts: Option<Array<Count>>,
        itls: Option<Array<Count>>,
        start_times: Option<Array<Count>>,
    }

    impl Shape {
        /// The number of requests, or what is missing or uneven.
        pub(super) fn check(&self) -> Result<usize, String> {
            let arrays = [
                ("input_lens", &self.input_lens),
                ("output_lens", &self.output_lens),
                ("ttfts", &self.ttfts),
                ("itls", &self.itls),
                ("start_times", &self.start_times),
            ];
            let mut lens = Vec::with_capacity(arrays.len());
            for (key, a) in arrays {
                match a {
                    Some(Array(Some(Count(n)))) => lens.push((key, *n)),
                    _ => {
                        return Err(format!(
                            "no `{key}` array: a `vllm bench serve` result saved with \
                             --save-detailed carries input_lens, output_lens, ttfts, itls, \
                             start_times and errors"
                        ));
                    }
                }
            }
            let n = lens[0].1;
            if let Some((key, len)) = lens[1..].iter().find(|(_, len)| *len != n) {
                return Err(format!("`{key}` has {len} entries, `input_lens` {n}"));
            }
            usize::try_from(n).map_err(|_| format!("{n} requests are too many"))
        }
    }

    /// The values kvplan reads (pass 2, after [`Shape::check`]).
    #[derive(serde::Deserialize)]
    pub(super) struct Bench {
        pub(super) input_lens: Vec<Cell>,
        pub(super) output_lens: Vec<Cell>,
        pub(super) ttfts: Vec<Cell>,
        pub(super) itls: Vec<Array<Gaps>>,
        pub(super) start_times: Vec<Cell>,
        #[serde(default)]
        pub(super) errors: Array<Failed>,
        #[serde(default)]
        pub(super) model_id: Cell,
    }

    /// One value: a number, a string, or anything else (skipped unread).
    #[derive(Default)]
    pub(super) enum Cell {
        U(u64),
        I(i64),
        F(f64),
        Str(String),
        #[default]
        Other,
    }

    impl Cell {
        pub(super) fn as_u64(&self) -> Option<u64> {
            match *self {
                Cell::U(u) => Some(u),
                _ => None,
            }
        }

        pub(super) fn as_f64(&self) -> Option<f64> {
            match *self {
                Cell::U(u) => Some(u as f64),
                Cell::I(i) => Some(i as f64),
                Cell::F(f) => Some(f),
                _ => None,
            }
        }

        pub(super) fn as_str(&self) -> Option<&str> {
            match self {
                Cell::Str(s) => Some(s),
                _ => None,
            }
        }
    }

    impl<'de> Deserialize<'de> for Cell {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Cell;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("any value")
                }
                fn visit_u64<E>(self, v: u64) -> Result<Cell, E> {
                    Ok(Cell::U(v))
                }
                fn visit_i64<E>(self, v: i64) -> Result<Cell, E> {
                    Ok(u64::try_from(v).map_or(Cell::I(v), Cell::U))
                }
                fn visit_f64<E>(self, v: f64) -> Result<Cell, E> {
                    Ok(Cell::F(v))
                }
                fn visit_str<E>(self, v: &str) -> Result<Cell, E> {
                    Ok(Cell::Str(v.to_string()))
                }
                fn visit_bool<E>(self, _: bool) -> Result<Cell, E> {
                    Ok(Cell::Other)
                }
                fn visit_unit<E>(self) -> Result<Cell, E> {
                    Ok(Cell::Other)
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Cell, A::Error> {
                    while seq.next_element::<IgnoredAny>()?.is_some() {}
                    Ok(Cell::Other)
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Cell, A::Error> {
                    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                    Ok(Cell::Other)
                }
            }
            d.deserialize_any(V)
        }
    }

    /// What an array folds to, element by element, as it is read.
    pub(super) trait Fold: Default {
        /// One element.
        type Item: for<'de> Deserialize<'de>;
        /// Takes one element in.
        fn push(&mut self, item: Self::Item);
    }

    /// An array folded by `F` as it is read; `None` for a value that is not an array
    /// (skipped unread).
    pub(super) struct Array<F>(pub(super) Option<F>);

    impl<F> Default for Array<F> {
        fn default() -> Self {
            Array(None)
        }
    }

    impl<'de, F: Fold> Deserialize<'de> for Array<F> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V<F>(std::marker::PhantomData<F>);
            impl<'de, F: Fold> Visitor<'de> for V<F> {
                type Value = Array<F>;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("any value")
                }
                fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Array<F>, A::Error> {
                    let mut folded = F::default();
                    while let Some(item) = seq.next_element::<F::Item>()? {
                        folded.push(item);
                    }
                    Ok(Array(Some(folded)))
                }
                fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Array<F>, A::Error> {
                    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                    Ok(Array(None))
                }
                fn visit_u64<E>(self, _: u64) -> Result<Array<F>, E> {
                    Ok(Array(None))
                }
                fn visit_i64<E>(self, _: i64) -> Result<Array<F>, E> {
                    Ok(Array(None))
                }
                fn visit_f64<E>(self, _: f64) -> Result<Array<F>, E> {
                    Ok(Array(None))
                }
                fn visit_str<E>(self, _: &str) -> Result<Array<F>, E> {
                    Ok(Array(None))
                }
                fn visit_bool<E>(self, _: bool) -> Result<Array<F>, E> {
                    Ok(Array(None))
                }
                fn visit_unit<E>(self) -> Result<Array<F>, E> {
                    Ok(Array(None))
                }
            }
            d.deserialize_any(V(std::marker::PhantomData))
        }
    }

    /// An array's length, its elements skipped unread.
    #[derive(Default)]
    pub(super) struct Count(u64);

    impl Fold for Count {
        type Item = IgnoredAny;
        fn push(&mut self, _: IgnoredAny) {
            self.0 += 1;
        }
    }

    /// A request's inter-token gaps: their sum (a value that is not a number counts 0) and the
    /// first that is not a latency (below 0).
    #[derive(Default)]
    pub(super) struct Gaps {
        pub(super) sum: f64,
        pub(super) bad: Option<f64>,
    }

    impl Fold for Gaps {
        type Item = Cell;
        fn push(&mut self, c: Cell) {
            let v = c.as_f64().unwrap_or(0.0);
            if (v.is_nan() || v < 0.0) && self.bad.is_none() {
                self.bad = Some(v);
            }
            self.sum += v;
        }
    }

    /// `errors`: per request, whether it failed (a non-empty string).
    #[derive(Default)]
    pub(super) struct Failed(pub(super) Vec<bool>);

    impl Fold for Failed {
        type Item = Cell;
        fn push(&mut self, c: Cell) {
            self.0.push(c.as_str().is_some_and(|e| !e.is_empty()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_with_milliseconds_and_failed_rows() {
        let text = "arrived_at,num_prefill_tokens,num_decode_tokens,ttft_ms,e2e_ms,status\n\
                    1.5,100,10,30,130,ok\n0.5,200,20,40,400,ok\n2.0,50,5,,,error\n";
        let run = MeasuredRun::from_csv(text, "m.csv").unwrap();
        assert_eq!(run.requests.len(), 3);
        // Sorted and shifted to the first send.
        assert_eq!(run.requests[0].arrival_s, 0.0);
        assert_eq!(run.requests[0].prompt_tokens, 200);
        assert!((run.requests[1].ttft_s - 0.03).abs() < 1e-12);
        assert!(!run.requests[2].ok);
        let f = run.figures();
        assert_eq!(f.served, 2);
        assert!((f.e2e_s.mean - 0.265).abs() < 1e-12);
        // TPOTs (0.13 - 0.03) / 9 and (0.4 - 0.04) / 19; the median is the lower (nearest rank).
        assert!((f.tpot_s.p50 - 0.1 / 9.0).abs() < 1e-12);
        assert!((f.tpot_s.p99 - 0.36 / 19.0).abs() < 1e-12);
    }

    #[test]
    fn csv_errors_name_the_column_and_line() {
        let e = MeasuredRun::from_csv("arrival_s,prompt_tokens,output_tokens\n", "x.csv")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("x.csv: no TTFT column"), "{e}");
        let e = MeasuredRun::from_csv(
            "arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n0,abc,3,0.1,0.2\n",
            "x.csv",
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("x.csv:2: prompt_tokens:"), "{e}");
    }

    #[test]
    fn vllm_bench_json_adds_inter_token_gaps() {
        let text = r#"{"duration": 3.0, "input_lens": [10, 20], "output_lens": [3, 0],
            "ttfts": [0.05, 0.0], "itls": [[0.01, 0.02], []], "start_times": [100.5, 100.0],
            "errors": ["", "timeout"]}"#;
        let run = MeasuredRun::from_vllm_json(text, "r.json").unwrap();
        assert_eq!(run.requests.len(), 2);
        let ok = run.requests.iter().find(|r| r.ok).unwrap();
        assert!((ok.arrival_s - 0.5).abs() < 1e-12);
        assert!((ok.e2e_s - 0.08).abs() < 1e-12);
        let e = MeasuredRun::from_vllm_json(r#"{"duration": 3.0}"#, "r.json")
            .unwrap_err()
            .to_string();
        // The hint names vLLM's `vllm bench serve` option that records per-request data.
        assert!(e.contains("save-detailed"), "{e}");
    }

    /// Impossible measurements are refused naming the file, the row and the field: negative,
    /// infinite latencies, a first token after the last; the same rows made possible read.
    #[test]
    fn impossible_per_request_measurements_are_refused() {
        let head = "arrival_s,prompt_tokens,output_tokens,ttft_s,e2e_s\n";
        for (row, needle) in [
            (
                "0,10,3,-0.1,0.2",
                "x.csv:2: ttft_s: `-0.1` is not a latency",
            ),
            ("0,10,3,0.1,-2", "x.csv:2: e2e_s: `-2` is not a latency"),
            ("0,10,3,inf,0.2", "x.csv:2: ttft_s: `inf` is not a latency"),
            (
                "0,10,3,0.5,0.2",
                "x.csv:2: ttft_s: `0.5` is above e2e_s `0.2`",
            ),
        ] {
            let e = MeasuredRun::from_csv(&format!("{head}{row}\n"), "x.csv")
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(needle), "{row}: {e}");
            assert_eq!(e.lines().count(), 1);
        }
        // Possible: the first token at the last (one output token), a failed request's empty
        // cells.
        let run =
            MeasuredRun::from_csv(&format!("{head}0,10,1,0.2,0.2\n1,10,3,,\n"), "x.csv").unwrap();
        assert_eq!(run.requests.iter().filter(|r| r.ok).count(), 1);
        let json = |ttft: &str, itl: &str| {
            format!(
                r#"{{"input_lens": [10], "output_lens": [3], "ttfts": [{ttft}],
                "itls": [[{itl}]], "start_times": [0.0]}}"#
            )
        };
        for (t, i, needle) in [
            ("-0.05", "0.01", "r.json: `ttfts[0]` is -0.05"),
            ("0.05", "-0.01", "r.json: `itls[0]` is -0.01"),
        ] {
            let e = MeasuredRun::from_vllm_json(&json(t, i), "r.json")
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(needle), "{e}");
        }
        assert!(MeasuredRun::from_vllm_json(&json("0.05", "0.01"), "r.json").is_ok());
    }

    /// A stage table's impossible rows: latencies out of order or negative, a rate of 0 or past
    /// a million, a memory fraction above 1, a vLLM release not modelled; each named by row and
    /// column. The given table reads.
    #[test]
    fn impossible_stage_rows_are_refused() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../data/validation/real_vllm/vllm_h100_llama2-7b_mixtral-8x7b.csv"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let first = &StageRun::parse(&text, "t.csv").unwrap()[0];
        // The optional percentiles are read: 45.9702 and 2188.8284 ms in the first row.
        assert!((first.ttft_p99_s.unwrap() - 0.0459702).abs() < 1e-9);
        assert!((first.e2e_p99_s.unwrap() - 2.1888284).abs() < 1e-9);
        let mut lines = text.lines();
        let header = lines.next().unwrap();
        let row = lines.next().unwrap();
        let cols: Vec<&str> = header.split(',').collect();
        let with = |col: &str, value: &str| {
            let i = cols.iter().position(|c| *c == col).unwrap();
            let mut cells: Vec<String> = row.split(',').map(String::from).collect();
            cells[i] = value.to_string();
            format!("{header}\n{}\n", cells.join(","))
        };
        for (col, value, needle) in [
            (
                "ttft_mean_ms",
                "-5",
                "t.csv:2: ttft_mean_ms: `-5` is not a latency",
            ),
            (
                "e2e_mean_ms",
                "NaN",
                "t.csv:2: e2e_mean_ms: `NaN` is not a latency",
            ),
            (
                "ttft_mean_ms",
                "99999",
                "t.csv:2: ttft_mean_ms: `99999` is above e2e_mean_ms",
            ),
            (
                "stage_rate_rps",
                "0",
                "t.csv:2: stage_rate_rps: `0` must be above 0",
            ),
            (
                "stage_rate_rps",
                "1e9",
                "t.csv:2: stage_rate_rps: `1e9` must be above 0",
            ),
            (
                "stage_duration_s",
                "-1",
                "t.csv:2: stage_duration_s: `-1` must be above 0",
            ),
            (
                "gpu_memory_utilization",
                "1.5",
                "t.csv:2: gpu_memory_utilization: `1.5` must be a fraction",
            ),
            (
                "gpu_memory_utilization",
                "0",
                "t.csv:2: gpu_memory_utilization: `0` must be a fraction",
            ),
            (
                "ttft_p99_ms",
                "-inf",
                "t.csv:2: ttft_p99_ms: `-inf` is not a latency",
            ),
            (
                "ttft_p99_ms",
                "1e9",
                "t.csv:2: ttft_p99_ms: `1e9` is above e2e_p99_ms",
            ),
            (
                "vllm_version",
                "v0.7.3",
                "t.csv:2: vllm_version: `v0.7.3` is not a vLLM release kvplan models: 0.8.5, \
                 0.9.2, 0.10.2, 0.11.0, 0.13.0, 0.15.1 (the default)",
            ),
            (
                "vllm_version",
                "0.4.2",
                "t.csv:2: vllm_version: `0.4.2` is vLLM's 0.4 engine; a stage table's runs are \
                 replayed on the V1 engine, whose releases kvplan models are 0.8.5, 0.9.2, \
                 0.10.2, 0.11.0, 0.13.0, 0.15.1",
            ),
        ] {
            let e = StageRun::parse(&with(col, value), "t.csv")
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(needle), "{col}={value}: {e}");
            assert_eq!(e.lines().count(), 1);
        }
    }

    /// A row naming a model or a GPU kvplan does not know is refused, naming the file, the line,
    /// the column and the value; an override of that column makes the row acceptable; a pooled
    /// row (never replayed) is not looked at.
    #[test]
    fn unknown_models_and_gpus_are_refused_unless_overridden() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../data/validation/real_vllm/vllm_h100_llama2-7b_mixtral-8x7b.csv"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let cols: Vec<&str> = lines[0].split(',').collect();
        // Lines 2 and 3: the codegen stages; line 4 its pooled row.
        let with = |line: usize, col: &str, value: &str| {
            let i = cols.iter().position(|c| *c == col).unwrap();
            let mut rows: Vec<String> = lines[..5].iter().map(|l| l.to_string()).collect();
            let mut cells: Vec<&str> = lines[line - 1].split(',').collect();
            cells[i] = value;
            rows[line - 1] = cells.join(",");
            StageRun::parse(&(rows.join("\n") + "\n"), "t.csv").unwrap()
        };
        assert!(check_stage_names(&with(3, "hardware", "H100"), None, None).is_ok());
        let stages = with(3, "model_hf", "acme/Nonexistent-7b");
        let e = check_stage_names(&stages, None, None).unwrap_err();
        assert!(
            matches!(e, RunsError::UnknownModel { line: 3, .. }),
            "{e:?}"
        );
        let e = e.to_string();
        assert!(
            e.starts_with("t.csv:3: model_hf: `acme/Nonexistent-7b` is no model kvplan knows"),
            "{e}"
        );
        assert_eq!(e.lines().count(), 1);
        assert!(check_stage_names(&stages, Some("llama-2-7b"), None).is_ok());
        // A near miss is named.
        let e = check_stage_names(&with(2, "model_hf", "meta-llama/Llama-2-7x-hf"), None, None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("t.csv:2: model_hf: ") && e.contains("llama-2-7b"),
            "{e}"
        );
        let stages = with(3, "hardware", "MI999");
        let e = check_stage_names(&stages, None, None).unwrap_err();
        assert!(matches!(e, RunsError::UnknownGpu { line: 3, .. }), "{e:?}");
        let e = e.to_string();
        assert!(
            e.starts_with("t.csv:3: hardware: `MI999` has no hardware preset"),
            "{e}"
        );
        assert!(!e.contains("--"), "a flag is the command line's word: {e}");
        assert!(check_stage_names(&stages, None, Some("h100-sxm")).is_ok());
        // The scenario of such a row is refused the same way; replaying the table stops there,
        // before any stage runs.
        assert!(matches!(
            stages[1].scenario(None, None),
            Err(RunsError::UnknownGpu { .. })
        ));
        assert!(matches!(
            replay_stages(&stages, None, None),
            Err(ReplayError::Refused(RunsError::UnknownGpu { line: 3, .. }))
        ));
        // A GPU named by its preset reads as that preset.
        assert_eq!(hardware_preset("L40S"), Some("l40s"));
        assert!(check_stage_names(&with(2, "hardware", "B200"), None, None).is_ok());
        // The pooled row is not replayed: what it names is not looked at.
        assert!(check_stage_names(&with(4, "hardware", "MI999"), None, None).is_ok());
    }
}

/// One load stage of a shared-prefix serving run (inference-perf's "shared prefix" data against
/// a vLLM server), as one row of a stage table such as
/// `data/validation/real_vllm/vllm_h100_llama2-7b_mixtral-8x7b.csv`: the server's settings, the
/// load, and what the client measured (means and percentiles in ms, throughput in req/s).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageRun {
    /// `exp_name` and the stage index.
    pub name: String,
    /// `exp_name`: the experiment whose load stages these are.
    pub experiment: String,
    /// The stage table it was read from, as named to [`StageRun::parse`].
    pub file: String,
    /// Its line in that file (the header is line 1).
    pub line: u64,
    /// Hugging Face model id (`model_hf`).
    pub model_hf: String,
    /// GPU as written (`hardware`, e.g. `H100`).
    pub hardware: String,
    /// Tensor-parallel GPUs.
    pub tp: u32,
    /// The vLLM release the server ran (`vllm_version`: `v0.15.1`, `0.15.1`; empty: not
    /// recorded, replayed as the newest modelled): the replay follows its defaults and rules.
    pub vllm_version: Option<crate::config::VllmVersion>,
    /// `max_model_len`.
    pub max_model_len: u32,
    /// `max_num_batched_tokens`.
    pub max_num_batched_tokens: u32,
    /// `max_num_seqs`.
    pub max_num_seqs: u32,
    /// `gpu_memory_utilization`.
    pub gpu_memory_utilization: f64,
    /// Automatic prefix caching on.
    pub prefix_caching: bool,
    /// Chunked prefill on.
    pub chunked_prefill: bool,
    /// GPU KV blocks the server reported, when known.
    pub kv_blocks_gpu: Option<u32>,
    /// The CPU offloading connector's size, GiB (optional `cpu_offload` column: `yes (8 GiB
    /// OffloadingConnector)`, `no`).
    pub cpu_offload_gib: Option<f64>,
    /// System prompts.
    pub num_groups: u32,
    /// Users per system prompt.
    pub users_per_group: u32,
    /// System prompt tokens as configured.
    pub system_prompt_len: u32,
    /// Question tokens as configured.
    pub question_len: u32,
    /// Output tokens of every request.
    pub output_len: u32,
    /// Stage index.
    pub stage: i64,
    /// Offered rate, requests/s.
    pub rate_rps: f64,
    /// Stage duration, s.
    pub duration_s: f64,
    /// Requests sent.
    pub requests_sent: u64,
    /// Measured prompt length after tokenisation, mean.
    pub prompt_len_mean: f64,
    /// Measured TTFT mean, s.
    pub ttft_mean_s: f64,
    /// Measured E2E mean, s.
    pub e2e_mean_s: f64,
    /// Measured TTFT 99th percentile, s (`ttft_p99_ms`, when given).
    pub ttft_p99_s: Option<f64>,
    /// Measured E2E 99th percentile, s (`e2e_p99_ms`, when given).
    pub e2e_p99_s: Option<f64>,
    /// Measured time per output token `(E2E mean − TTFT mean) / (output − 1)`, s.
    pub tpot_s: f64,
    /// Measured throughput, requests/s.
    pub throughput_rps: f64,
    /// Whether the server could not keep up (`status = overloaded`).
    pub overloaded: bool,
}

/// The columns a stage table must have.
pub const STAGE_COLUMNS: [&str; 25] = [
    "exp_name",
    "model_hf",
    "hardware",
    "tp",
    "vllm_version",
    "max_model_len",
    "max_num_batched_tokens",
    "max_num_seqs",
    "gpu_memory_utilization",
    "prefix_caching",
    "chunked_prefill",
    "kv_blocks_gpu",
    "num_groups",
    "users_per_group",
    "system_prompt_len",
    "question_len",
    "output_len",
    "stage_index",
    "stage_rate_rps",
    "stage_duration_s",
    "requests_sent",
    "prompt_len_mean",
    "ttft_mean_ms",
    "e2e_mean_ms",
    "status",
];

/// The highest stage rate a stage table may give, requests/s: a million, beyond any measured
/// deployment (a rate past it is a unit slip or a corrupt cell).
pub const MAX_STAGE_RATE_RPS: f64 = 1e6;

/// Whether `header` (a CSV's first line) is a stage table's.
pub fn is_stage_table(header: &str) -> bool {
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    STAGE_COLUMNS.iter().all(|c| cols.contains(c))
}

impl StageRun {
    /// Reads every stage row of a stage table (pooled rows, `stage_index` −1, are left out).
    pub fn read(path: &Path) -> Result<Vec<StageRun>, RunsError> {
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| RunsError::Io {
            path: name.clone(),
            source,
        })?;
        StageRun::parse(&text, &name)
    }

    /// [`StageRun::read`] from text; `name` stands for the file in errors.
    pub fn parse(text: &str, name: &str) -> Result<Vec<StageRun>, RunsError> {
        let mut rdr = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let header = rdr
            .headers()
            .map_err(|e| format_err(name, e.to_string()))?
            .clone();
        let idx = stage_columns(&header, name)?;
        let mut out = Vec::new();
        let mut lines = kvplan_workloads::lines::LineCounter::new(text);
        for rec in rdr.records() {
            let rec = rec.map_err(|e| csv_err(name, &e, &mut lines, header.len()))?;
            let line = rec.position().map_or(0, |p| lines.line_at(p.byte()));
            let row = StageRow {
                idx: &idx,
                rec: &rec,
                at: format!("{name}:{line}"),
            };
            if let Some(run) = row.to_run(name, line)? {
                out.push(run);
            }
        }
        if out.is_empty() {
            return Err(format_err(name, "no stage rows (stage_index 0 or more)"));
        }
        Ok(out)
    }
}

/// Where each column of a stage table stands in `header`: every one of [`STAGE_COLUMNS`] (or
/// an error naming the first missing), and the optional ones present.
fn stage_columns(
    header: &csv::StringRecord,
    name: &str,
) -> Result<std::collections::HashMap<&'static str, usize>, RunsError> {
    const OPTIONAL: [&str; 5] = [
        "tpot_true_ms",
        "throughput_rps",
        "cpu_offload",
        "ttft_p99_ms",
        "e2e_p99_ms",
    ];
    let mut idx = std::collections::HashMap::new();
    for c in STAGE_COLUMNS.iter().chain(OPTIONAL.iter()) {
        match header.iter().position(|h| h == *c) {
            Some(i) => {
                idx.insert(*c, i);
            }
            None if OPTIONAL.contains(c) => {}
            None => {
                return Err(format_err(
                    name,
                    format!(
                        "no `{c}` column: a stage table has {}",
                        STAGE_COLUMNS.join(",")
                    ),
                ));
            }
        }
    }
    Ok(idx)
}

/// One row of a stage table, its cells read by column name; its errors name the row
/// (`file:line`) and the column.
struct StageRow<'a> {
    idx: &'a std::collections::HashMap<&'static str, usize>,
    rec: &'a csv::StringRecord,
    at: String,
}

impl<'a> StageRow<'a> {
    /// The cell of column `c` (empty where the row or the table lacks it).
    fn get(&self, c: &str) -> &'a str {
        self.idx.get(c).and_then(|&i| self.rec.get(i)).unwrap_or("")
    }

    fn err(&self, message: String) -> RunsError {
        format_err(&self.at, message)
    }

    fn num(&self, c: &str) -> Result<f64, RunsError> {
        self.get(c)
            .parse::<f64>()
            .map_err(|_| self.err(format!("{c}: `{}` is not a number", self.get(c))))
    }

    fn whole(&self, c: &str) -> Result<u32, RunsError> {
        let v = self.num(c)?;
        if v >= 0.0 && v.fract() == 0.0 && v <= f64::from(u32::MAX) {
            Ok(v as u32)
        } else {
            Err(self.err(format!("{c}: `{}` is not a whole number", self.get(c))))
        }
    }

    fn on(&self, c: &str) -> bool {
        self.get(c).to_ascii_lowercase().starts_with("on")
    }

    /// The row's stage (`None` for a pooled row, `stage_index` −1), its figures checked.
    fn to_run(&self, name: &str, line: u64) -> Result<Option<StageRun>, RunsError> {
        let stage = self.num("stage_index")? as i64;
        if stage < 0 {
            return Ok(None);
        }
        let vllm_version = match self.get("vllm_version") {
            "" => None,
            v => Some(stage_version(v).map_err(|why| format_err(&self.at, why))?),
        };
        let output_len = self.whole("output_len")?;
        let ttft = self.num("ttft_mean_ms")? * 1e-3;
        let e2e = self.num("e2e_mean_ms")? * 1e-3;
        self.check_means(ttft, e2e)?;
        self.check_load()?;
        let (ttft_p99, e2e_p99) = self.percentiles()?;
        let tpot = match self.idx.get("tpot_true_ms") {
            Some(_) if !self.get("tpot_true_ms").is_empty() => self.num("tpot_true_ms")? * 1e-3,
            _ => (e2e - ttft) / f64::from(output_len.max(2) - 1),
        };
        let get = |c: &str| self.get(c).to_string();
        Ok(Some(StageRun {
            name: format!("{} stage {stage}", self.get("exp_name")),
            experiment: get("exp_name"),
            file: name.to_string(),
            line,
            model_hf: get("model_hf"),
            hardware: get("hardware"),
            tp: self.whole("tp")?.max(1),
            vllm_version,
            max_model_len: self.whole("max_model_len")?,
            max_num_batched_tokens: self.whole("max_num_batched_tokens")?,
            max_num_seqs: self.whole("max_num_seqs")?,
            gpu_memory_utilization: self.num("gpu_memory_utilization")?,
            prefix_caching: self.on("prefix_caching"),
            chunked_prefill: self.on("chunked_prefill"),
            kv_blocks_gpu: if self.get("kv_blocks_gpu").is_empty() {
                None
            } else {
                Some(self.whole("kv_blocks_gpu")?)
            },
            cpu_offload_gib: offload_gib(self.get("cpu_offload"))
                .map_err(|why| self.err(format!("cpu_offload: {why}")))?,
            num_groups: self.whole("num_groups")?,
            users_per_group: self.whole("users_per_group")?,
            system_prompt_len: self.whole("system_prompt_len")?,
            question_len: self.whole("question_len")?,
            output_len,
            stage,
            rate_rps: self.num("stage_rate_rps")?,
            duration_s: self.num("stage_duration_s")?,
            requests_sent: u64::from(self.whole("requests_sent")?),
            prompt_len_mean: self.num("prompt_len_mean")?,
            ttft_mean_s: ttft,
            e2e_mean_s: e2e,
            ttft_p99_s: ttft_p99,
            e2e_p99_s: e2e_p99,
            tpot_s: tpot,
            throughput_rps: match self.idx.get("throughput_rps") {
                Some(_) => self.num("throughput_rps")?,
                None => f64::NAN,
            },
            overloaded: self.get("status").eq_ignore_ascii_case("overloaded"),
        }))
    }

    /// Impossible mean latencies (`ttft`, `e2e` in seconds): one line naming the row and the
    /// field.
    fn check_means(&self, ttft: f64, e2e: f64) -> Result<(), RunsError> {
        for (c, v) in [("ttft_mean_ms", ttft), ("e2e_mean_ms", e2e)] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(self.err(format!(
                    "{c}: `{}` is not a latency: a time of 0 or more",
                    self.get(c)
                )));
            }
        }
        if ttft > e2e {
            return Err(self.err(format!(
                "ttft_mean_ms: `{}` is above e2e_mean_ms `{}`: the first token cannot come after the last",
                self.get("ttft_mean_ms"),
                self.get("e2e_mean_ms")
            )));
        }
        Ok(())
    }

    /// The stage's rate and duration, and the server's memory fraction, in range.
    fn check_load(&self) -> Result<(), RunsError> {
        for (c, max) in [
            ("stage_rate_rps", MAX_STAGE_RATE_RPS),
            ("stage_duration_s", 1e7),
        ] {
            let v = self.num(c)?;
            if !(v.is_finite() && v > 0.0 && v <= max) {
                return Err(self.err(format!(
                    "{c}: `{}` must be above 0 and at most {}",
                    self.get(c),
                    kvplan_vocab::limits::show(max)
                )));
            }
        }
        let mem = self.num("gpu_memory_utilization")?;
        if mem.is_nan() || mem <= 0.0 || mem > 1.0 {
            return Err(self.err(format!(
                "gpu_memory_utilization: `{}` must be a fraction above 0 and at most 1 (vLLM refuses more)",
                self.get("gpu_memory_utilization")
            )));
        }
        Ok(())
    }

    /// The 99th percentiles of TTFT and E2E, seconds, where the table gives them: a latency,
    /// and the E2E one at least the TTFT one.
    fn percentiles(&self) -> Result<(Option<f64>, Option<f64>), RunsError> {
        let p99 = |c: &str| -> Result<Option<f64>, RunsError> {
            if self.get(c).is_empty() {
                return Ok(None);
            }
            let v = self.num(c)? * 1e-3;
            if !(v.is_finite() && v >= 0.0) {
                return Err(self.err(format!(
                    "{c}: `{}` is not a latency: a time of 0 or more",
                    self.get(c)
                )));
            }
            Ok(Some(v))
        };
        let (ttft_p99, e2e_p99) = (p99("ttft_p99_ms")?, p99("e2e_p99_ms")?);
        if let (Some(t), Some(e)) = (ttft_p99, e2e_p99)
            && t > e
        {
            return Err(self.err(format!(
                "ttft_p99_ms: `{}` is above e2e_p99_ms `{}`: every first token comes before its last",
                self.get("ttft_p99_ms"),
                self.get("e2e_p99_ms")
            )));
        }
        Ok((ttft_p99, e2e_p99))
    }
}

/// A stage table's `vllm_version` cell: a V1 release kvplan models (a stage table's runs are
/// of the V1 engine's OpenAI server), or why not.
fn stage_version(cell: &str) -> Result<crate::config::VllmVersion, String> {
    use crate::versions::Engine;
    let v = cell
        .parse::<crate::config::VllmVersion>()
        .map_err(|e| format!("vllm_version: {e}"))?;
    if v.release().engine == Engine::V1 {
        return Ok(v);
    }
    Err(format!(
        "vllm_version: `{cell}` is vLLM's 0.4 engine; a stage table's runs are replayed on the V1 \
         engine, whose releases kvplan models are {}",
        crate::config::VllmVersion::names_of(Engine::V1).join(", ")
    ))
}

/// A stage table's `cpu_offload` cell: `no` / empty (none), or `yes (N GiB ...)`.
fn offload_gib(cell: &str) -> Result<Option<f64>, String> {
    let c = cell.trim().to_ascii_lowercase();
    if c.is_empty() || c.starts_with("no") || c == "off" {
        return Ok(None);
    }
    let gib = c
        .split(|ch: char| !(ch.is_ascii_digit() || ch == '.'))
        .find(|t| !t.is_empty())
        .and_then(|t| t.parse::<f64>().ok())
        .filter(|g| g.is_finite() && *g > 0.0);
    match gib {
        Some(g) => Ok(Some(g)),
        None => Err(format!(
            "`{cell}` names no size: write `no`, or `yes (8 GiB ...)` with the size in GiB"
        )),
    }
}

/// The hardware preset a stage table's GPU name stands for (`H100` is the 80 GB SXM part the
/// published runs used; `A100` the 80 GB SXM one unless the name says 40 GB or PCIe; a preset's
/// own name, such as `l40s`, that preset).
pub fn hardware_preset(name: &str) -> Option<&'static str> {
    let n = name.to_ascii_lowercase();
    if n.contains("h200") {
        Some("h200")
    } else if n.contains("h100") {
        Some(if n.contains("pcie") {
            "h100-pcie"
        } else {
            "h100-sxm"
        })
    } else if n.contains("a100") {
        Some(if n.contains("40") || n.contains("pcie") {
            "a100-40g-pcie4"
        } else {
            "a100-80g-sxm"
        })
    } else if n.contains("4090") {
        Some("rtx-4090")
    } else if n == "t4" || n.contains("tesla t4") {
        Some("t4")
    } else {
        // A preset's own name (`l40s`, `b200`), in any case.
        (kvplan_vocab::hardware::PRESETS.iter())
            .find(|(p, _)| p.eq_ignore_ascii_case(n.trim()))
            .map(|(p, _)| *p)
    }
}

impl StageRun {
    /// The model this row names, as the scenario takes it (a preset's name, or `model_hf` as
    /// written where that loads: a config.json path); an error naming the row where it does
    /// not load.
    pub fn model_loads(&self) -> Result<String, RunsError> {
        let name = kvplan_vocab::ModelSpec::preset_for_hf_id(&self.model_hf)
            .map(String::from)
            .unwrap_or_else(|| self.model_hf.clone());
        match kvplan_vocab::ModelSpec::resolve(&name) {
            Ok(_) => Ok(name),
            Err(e) => Err(RunsError::UnknownModel {
                path: self.file.clone(),
                line: self.line,
                value: self.model_hf.clone(),
                source: Box::new(e),
            }),
        }
    }

    /// The hardware preset this row's GPU stands for ([`hardware_preset`]); an error naming
    /// the row where it has none.
    pub fn gpu_preset(&self) -> Result<&'static str, RunsError> {
        hardware_preset(&self.hardware).ok_or_else(|| RunsError::UnknownGpu {
            path: self.file.clone(),
            line: self.line,
            value: self.hardware.clone(),
        })
    }

    /// The serving scenario that replays this stage: the model and GPU named in the row (or
    /// the overrides), vLLM V1 with the row's settings and its release's rules and defaults
    /// (`vllm_version`), and inference-perf's shared-prefix load
    /// at the stage's rate: `rate × duration` Poisson requests, the system prompts and questions
    /// scaled to the measured mean prompt length (the row's lengths are before tokenisation).
    pub fn scenario(
        &self,
        model: Option<&str>,
        hardware: Option<&str>,
    ) -> Result<crate::scenario::RawServeScenario, RunsError> {
        let model = match model {
            Some(m) => m.to_string(),
            None => self.model_loads()?,
        };
        let hardware = match hardware {
            Some(h) => h.to_string(),
            None => self.gpu_preset()?.to_string(),
        };
        let configured = f64::from(self.system_prompt_len + self.question_len);
        let scale = if configured > 0.0 && self.prompt_len_mean > 0.0 {
            self.prompt_len_mean / configured
        } else {
            1.0
        };
        let len = |n: u32| ((f64::from(n) * scale).round() as u32).max(1).to_string();
        Ok(crate::scenario::RawServeScenario {
            model: Some(model),
            hardware: Some(hardware),
            workload: kvplan_workloads::WorkloadConfig {
                arrivals: Some("poisson".into()),
                qps: Some(self.rate_rps),
                output_lengths: Some(self.output_len.to_string()),
                requests: Some(self.requests_sent.max(1)),
                seed: Some(0),
                shared_prefix: Some(kvplan_workloads::SharedPrefixConfig {
                    groups: Some(u64::from(self.num_groups)),
                    users_per_group: Some(u64::from(self.users_per_group)),
                    system_prompt_len: Some(len(self.system_prompt_len)),
                    question_len: Some(len(self.question_len)),
                }),
                ..Default::default()
            },
            serve: crate::scenario::RawConfig {
                scheduler: Some(crate::SchedulerKind::VllmV1),
                vllm_version: self.vllm_version,
                max_model_len: Some(self.max_model_len),
                max_num_batched_tokens: Some(self.max_num_batched_tokens),
                max_num_seqs: Some(self.max_num_seqs),
                gpu_memory_utilization: Some(self.gpu_memory_utilization),
                enable_prefix_caching: Some(self.prefix_caching),
                enable_chunked_prefill: Some(self.chunked_prefill),
                num_gpu_blocks_override: self.kv_blocks_gpu,
                tensor_parallel_size: Some(self.tp),
                record_timeseries: Some(false),
                // The server's CPU offloading connector, as it ran (vLLM's native backend).
                kv_offloading_size_gib: self.cpu_offload_gib,
                // A run's stages follow one another on one server: the first met it freshly
                // started.
                cold_start: Some(self.stage == 0),
                ..Default::default()
            },
            cluster: Default::default(),
        })
    }
}

/// A stage's figures: predicted or measured.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct StageFigures {
    /// TTFT mean, s.
    pub ttft_mean_s: f64,
    /// Time per output token, `(E2E mean − TTFT mean) / (output − 1)`, s.
    pub tpot_s: f64,
    /// E2E mean, s.
    pub e2e_mean_s: f64,
    /// Served requests per second.
    pub throughput_rps: f64,
    /// Whether the server could not keep up.
    pub overloaded: bool,
}

/// A stage replayed: predicted against measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageComparison {
    /// The stage.
    pub name: String,
    /// Offered rate, requests/s.
    pub rate_rps: f64,
    /// The simulator's figures.
    pub predicted: StageFigures,
    /// The measurement.
    pub measured: StageFigures,
    /// Mean queueing in the engine, predicted, s.
    pub predicted_queue_mean_s: f64,
    /// Relative errors `predicted / measured − 1` of TTFT, TPOT, E2E and throughput.
    pub ttft_error: f64,
    /// See `ttft_error`.
    pub tpot_error: f64,
    /// See `ttft_error`.
    pub e2e_error: f64,
    /// See `ttft_error`.
    pub throughput_error: f64,
}

impl StageComparison {
    /// Compares the replay `out` of `stage`. The prediction is overloaded when the service did
    /// not keep up (the capacity search's steady-state test, [`crate::capacity::judge`]) or
    /// served less than 95% of the offered rate.
    pub fn new(stage: &StageRun, out: &ServeReport) -> StageComparison {
        use crate::capacity::{Slo, SteadyState, judge};
        let s = &out.summary;
        let out_len = f64::from(stage.output_len.max(2) - 1);
        let window = judge(
            out,
            &Slo(Vec::new()),
            &SteadyState::default(),
            stage.rate_rps,
            0.0,
        );
        let throughput = s.requests_per_s;
        let predicted = StageFigures {
            ttft_mean_s: s.ttft_s.mean,
            tpot_s: (s.e2e_s.mean - s.ttft_s.mean) / out_len,
            e2e_mean_s: s.e2e_s.mean,
            throughput_rps: throughput,
            overloaded: !window.stable || throughput < 0.95 * stage.rate_rps,
        };
        let measured = StageFigures {
            ttft_mean_s: stage.ttft_mean_s,
            tpot_s: stage.tpot_s,
            e2e_mean_s: stage.e2e_mean_s,
            throughput_rps: stage.throughput_rps,
            overloaded: stage.overloaded,
        };
        StageComparison {
            name: stage.name.clone(),
            rate_rps: stage.rate_rps,
            ttft_error: rel_error(predicted.ttft_mean_s, measured.ttft_mean_s),
            tpot_error: rel_error(predicted.tpot_s, measured.tpot_s),
            e2e_error: rel_error(predicted.e2e_mean_s, measured.e2e_mean_s),
            throughput_error: rel_error(predicted.throughput_rps, measured.throughput_rps),
            predicted_queue_mean_s: s.queue_s.mean,
            predicted,
            measured,
        }
    }
}
