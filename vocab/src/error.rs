//! The planner's typed errors. Only the binary turns them into messages and exit codes.

use std::path::PathBuf;

/// Everything that can go wrong while loading inputs or planning.
///
/// Each variant names the field or file at fault and, where there is one, the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A model name that is neither a preset nor a readable file.
    #[error("unknown model '{name}'; known models: {}; or pass the path of a Hugging Face config.json or model directory", known.join(", "))]
    UnknownModel {
        /// What the user asked for.
        name: String,
        /// The preset names.
        known: Vec<String>,
    },
    /// A hardware name that is neither a preset nor a readable file.
    #[error("unknown hardware '{name}'; known profiles: {}; or pass the path of a profile TOML file", known.join(", "))]
    UnknownHardware {
        /// What the user asked for.
        name: String,
        /// The preset names.
        known: Vec<String>,
    },
    /// A file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not valid JSON / TOML, or has a field of the wrong type.
    #[error("{origin}: {message}")]
    Parse {
        /// The file (or preset) being parsed.
        origin: String,
        /// What the parser said, on one line.
        message: String,
    },
    /// A required field is absent.
    #[error("{origin}: missing field `{field}`{}", hint.as_deref().map(|h| format!(" ({h})")).unwrap_or_default())]
    MissingField {
        /// The file (or preset) being read.
        origin: String,
        /// The missing field.
        field: String,
        /// What it should hold.
        hint: Option<String>,
    },
    /// A Hugging Face config of an architecture kvplan does not model.
    #[error("{origin}: unsupported model_type '{model_type}'; supported: {}", supported.join(", "))]
    UnsupportedArchitecture {
        /// The config file.
        origin: String,
        /// Its `model_type`.
        model_type: String,
        /// The model types kvplan reads.
        supported: Vec<String>,
    },
    /// A value out of its accepted range.
    #[error("{field}: {message} (got {value})")]
    InvalidValue {
        /// The field, as the user wrote it (`--batch`, `workload.batch`, `link.h2d_pinned_gbps`).
        field: String,
        /// The value given.
        value: String,
        /// What is accepted.
        message: String,
    },
    /// A plan needs more memory than the device or host has.
    #[error(
        "{what} does not fit: needs {need_gib:.2} GiB ({breakdown}) but {resource} offers {have_gib:.2} GiB, short by {short_gib:.2} GiB; {advice}"
    )]
    DoesNotFit {
        /// The strategy or plan that does not fit.
        what: String,
        /// `GPU memory of a100-40g-pcie4`, `host RAM of ...`.
        resource: String,
        /// Bytes needed, in GiB.
        need_gib: f64,
        /// Bytes available, in GiB.
        have_gib: f64,
        /// `need - have`, in GiB.
        short_gib: f64,
        /// The largest items, e.g. `weights 12.4 GiB, KV 30.0 GiB`.
        breakdown: String,
        /// What to change.
        advice: String,
    },
    /// The LP solver failed (should not happen for a well-formed split problem).
    #[error("linear program for {what} failed: {message}")]
    Solver {
        /// Which decision.
        what: String,
        /// The solver's message.
        message: String,
    },
    /// A schedule that breaks an IR rule (a dependency on a later op, an unknown stream).
    #[error("invalid schedule: {0}")]
    InvalidSchedule(String),
}

impl Error {
    /// Shorthand for [`Error::InvalidValue`].
    pub fn invalid(
        field: impl Into<String>,
        value: impl ToString,
        message: impl Into<String>,
    ) -> Self {
        Error::InvalidValue {
            field: field.into(),
            value: value.to_string(),
            message: message.into(),
        }
    }

    /// True for errors caused by the user's input (the CLI maps them to exit code 2).
    pub fn is_input_error(&self) -> bool {
        !matches!(self, Error::Solver { .. } | Error::InvalidSchedule(_))
    }
}

/// The planner's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Collapses a multi-line parser message into one line.
pub(crate) fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.chars().all(|c| c == '|' || c == '^' || c == ' '))
        .collect::<Vec<_>>()
        .join(" ")
}
