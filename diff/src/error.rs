//! The crate's one error. A leaf but for the kinds of output it names: it imports nothing
//! else of the crate.

use crate::kind::Kind;

/// Why two outputs cannot be compared, or a suite cannot run. (The scenario errors of a suite's
/// cases are boxed: they are much larger than the rest.)
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A file cannot be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A suite directory cannot be listed.
    #[error("{path}: cannot list: {source}")]
    ReadDir {
        /// The directory.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Malformed JSON.
    #[error("{path}:{line}: malformed JSON: {message}")]
    Json {
        /// The file.
        path: String,
        /// The line of the error.
        line: usize,
        /// serde_json's message.
        message: String,
    },
    /// Malformed CSV (ragged rows, a non-number in a timeline's number column).
    #[error("{path}{}: malformed CSV: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
    Csv {
        /// The file.
        path: String,
        /// The line, where known.
        line: Option<u64>,
        /// What is wrong.
        message: String,
    },
    /// Neither JSON nor CSV.
    #[error("{path}: not a kvplan output (expected report JSON, a CSV table or a timeline CSV)")]
    UnknownKind {
        /// The file.
        path: String,
    },
    /// Two outputs of different kinds.
    #[error("cannot compare {a_kind} ({a}) with {b_kind} ({b})")]
    KindMismatch {
        /// A's name.
        a: String,
        /// A's kind.
        a_kind: Kind,
        /// B's name.
        b: String,
        /// B's kind.
        b_kind: Kind,
    },
    /// Two CSV tables keyed by different columns.
    #[error("cannot match rows: {a} is keyed by {a_keys}, {b} by {b_keys}")]
    KeyMismatch {
        /// A's name.
        a: String,
        /// A's key columns.
        a_keys: String,
        /// B's name.
        b: String,
        /// B's key columns.
        b_keys: String,
    },
    /// Rows in one table and not the other.
    #[error("unmatched rows:{}{}", rows_only(a, only_a), rows_only(b, only_b))]
    UnmatchedRows {
        /// A's name.
        a: String,
        /// Keys of the rows only in A.
        only_a: Vec<String>,
        /// B's name.
        b: String,
        /// Keys of the rows only in B.
        only_b: Vec<String>,
    },
    /// Two rows with the same key.
    #[error("{path}: rows at lines {first} and {second} have the same key '{key}' (columns {})", columns.join(","))]
    DuplicateKey {
        /// The file.
        path: String,
        /// The key.
        key: String,
        /// The key columns.
        columns: Vec<String>,
        /// The first row's line.
        first: u64,
        /// The second row's line.
        second: u64,
    },
    /// A bad tolerance (the comparison's `tolerance` input).
    #[error("tolerance: {message} (got '{value}')")]
    Tolerance {
        /// As given.
        value: String,
        /// What is wrong.
        message: String,
    },
    /// A suite directory without cases.
    #[error("{path}: no scenarios (*.toml files with a `model` key)")]
    NoCases {
        /// The directory.
        path: String,
    },
    /// A scenario file that is not TOML.
    #[error("{path}: {message}")]
    Toml {
        /// The file.
        path: String,
        /// The TOML parser's message.
        message: String,
    },
    /// A golden file that is not what its case writes (bad JSON or CSV, keys missing, another
    /// kind of output).
    #[error("{path}: malformed golden: {message}")]
    Golden {
        /// The golden file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A case whose scenario cannot be read, resolved or run.
    #[error("case {case}: {source}")]
    Scenario {
        /// The case.
        case: String,
        /// Why.
        source: Box<kvplan_run::ScenarioError>,
    },
}

fn rows_only(name: &str, rows: &[String]) -> String {
    const SHOWN: usize = 5;
    if rows.is_empty() {
        return String::new();
    }
    let mut s = format!(
        " only in {name}: {}",
        rows.iter()
            .take(SHOWN)
            .map(|r| format!("'{r}'"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if rows.len() > SHOWN {
        s.push_str(&format!(" and {} more", rows.len() - SHOWN));
    }
    s.push(';');
    s
}

impl Error {
    /// True for errors caused by the input (every error but a failed simulation).
    pub fn is_input_error(&self) -> bool {
        match self {
            Error::Scenario { source, .. } => source.is_input_error(),
            _ => true,
        }
    }
}

/// This crate's result.
pub type Result<T> = std::result::Result<T, Error>;
