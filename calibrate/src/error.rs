//! Calibration errors.

/// Calibration errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The executor failed.
    #[error(transparent)]
    Exec(#[from] kvplan_exec::Error),
    /// Planner-side failure (a model that cannot be loaded, an invalid profile).
    #[error(transparent)]
    Planner(#[from] kvplan_vocab::Error),
    /// A malformed measured table (`origin:line: column: why`).
    #[error("{origin}:{line}: {}{why}", if column.is_empty() { String::new() } else { format!("column {column}: ") })]
    Table {
        /// The file.
        origin: String,
        /// 1-based line (0: the file as a whole).
        line: u64,
        /// The column, where one is at fault.
        column: String,
        /// What is wrong.
        why: String,
    },
    /// Bad input: a file that cannot be read, a base or model that cannot be told, a count out
    /// of range (the message names the option by the caller's label).
    #[error("{0}")]
    Input(String),
    /// A measurement that cannot be fitted (e.g. no positive times).
    #[error("cannot fit {what}: {why}")]
    Fit {
        /// The table.
        what: String,
        /// Why.
        why: String,
    },
}
