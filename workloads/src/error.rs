//! The crate's errors: each names the field (or the trace file and its line) at fault.

use crate::columns::TRACE_HEADER;

/// Workload errors. Each names the field (or the trace file and its 1-based line) and what is
/// accepted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A size out of range.
    #[error("{field}: must be at least 1 (got {value})")]
    NonPositive {
        /// The field.
        field: &'static str,
        /// The value.
        value: u64,
    },
    /// A spec string that matches none of the accepted forms.
    #[error("{field}: cannot parse `{got}`; accepted forms: {expected}")]
    BadSpec {
        /// The field (`arrivals`, `prompt_lengths`, ...).
        field: &'static str,
        /// What was given.
        got: String,
        /// The accepted forms.
        expected: &'static str,
    },
    /// A number that parsed but lies outside the accepted range (or is not a number at all).
    #[error("{field}: `{got}` is out of range; expected {expected}")]
    OutOfRange {
        /// The field (`qps`, `cv`, `prompt_lengths`, ...).
        field: &'static str,
        /// What was given.
        got: String,
        /// The accepted range.
        expected: String,
    },
    /// A required field that was not given.
    #[error("{field}: required ({why})")]
    Missing {
        /// The field.
        field: &'static str,
        /// When it is required and what it takes.
        why: &'static str,
    },
    /// A field given where it has no meaning, or two fields that contradict each other.
    #[error("{field}: {why}")]
    Conflict {
        /// The field.
        field: &'static str,
        /// Why it is refused.
        why: String,
    },
    /// A bad segment name or prefix chain.
    #[error("{field}: `{got}`: {why}")]
    BadSegment {
        /// The field (`prefix`, `segment`).
        field: &'static str,
        /// What was given.
        got: String,
        /// What is wrong and what is accepted.
        why: String,
    },
    /// A trace file that could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A trace with no header or no requests.
    #[error("{path}: empty trace ({why}); expected a header `{header}` and at least one row", header = TRACE_HEADER)]
    TraceEmpty {
        /// The file.
        path: String,
        /// What is missing.
        why: &'static str,
    },
    /// Requests that must be held in memory (a conversation workload is drawn whole, to sort
    /// its turns by arrival) and do not fit.
    #[error(
        "requests: cannot hold {count} requests in memory ({bytes} bytes could not be allocated); ask for fewer"
    )]
    TooMany {
        /// Requests to hold.
        count: u64,
        /// Bytes asked for.
        bytes: u64,
    },
    /// A trace file named by a field (`trace`, `prompt_lengths = "trace:FILE"`) that could not
    /// be read or does not parse: the field, then the file's own error.
    #[error("{field}: {source}")]
    TraceFile {
        /// The field that names the file.
        field: &'static str,
        /// What went wrong with the file ([`Error::Io`], [`Error::TraceEmpty`], [`Error::TraceRow`]).
        source: Box<Error>,
    },
    /// A bad line in a trace file.
    #[error("{path}:{line}: {message}")]
    TraceRow {
        /// The file.
        path: String,
        /// The 1-based line.
        line: u64,
        /// What is wrong with it.
        message: String,
    },
}

/// Results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
