//! kvplan's rendering: each library report (the planner's runs, comparisons and plans, the
//! serving simulator's reports and capacity tables, calibration fits, diffs) turned into the text
//! the command line prints — aligned tables, CSV rows, JSON — and the output files written
//! safely (`files`). Renders, decides nothing, knows no flags: where a text names a flag, the
//! caller passes it in.
#![forbid(unsafe_code)]

pub mod calibrate;
pub mod cleanup;
pub mod deploy;
pub mod diff;
pub mod fidelity;
pub mod files;
pub mod listings;
pub mod outputs;
pub mod planner;
pub mod plots;
pub mod progress;
pub mod render;
pub mod serve;
#[cfg(test)]
mod test_dir;

pub use render::*;

/// Output format (with the `clap` feature, a `clap::ValueEnum`: `table`, `json`, `csv`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Format {
    /// Aligned text for people.
    Table,
    /// One JSON document for programs and notebooks.
    Json,
    /// CSV with a header row.
    Csv,
}

/// A rendering or output-file error: one line, and whether the input is at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Bad input (a path that is a directory, a missing parent directory, a symlink loop).
    Input(String),
    /// A failure that is not the input's fault (a full disk, a value that cannot be rendered).
    Failure(String),
}

impl Error {
    /// Whether the input is at fault.
    pub fn is_input(&self) -> bool {
        matches!(self, Error::Input(_))
    }

    /// The one-line message.
    pub fn message(&self) -> &str {
        match self {
            Error::Input(m) | Error::Failure(m) => m,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Error {}
