//! What a kvplan output is, as the comparison detects it from its content. A
//! leaf: it imports nothing of the crate.

use std::fmt;

use serde::Serialize;

/// What a file holds, detected from its content.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// `simulate`'s JSON report (one strategy): an object with `strategy` and `decode_latency_s`.
    SimulateReport,
    /// `simulate`'s JSON report of strategies compared: an object with a `results` array.
    SimulateCompare,
    /// `serve`'s JSON report, or the summary file it writes: an object with `requests` and `ttft_s`.
    ServeSummary,
    /// Any other JSON document (compared by its numeric leaves).
    Json,
    /// A CSV table (a command's CSV format, sweep tables), rows matched by key.
    CsvTable,
    /// A timeline CSV (a `simulate` trace written as CSV): compared by per-op-kind breakdown and makespan.
    Timeline,
}

impl Kind {
    /// Its name in messages. The option that makes an output of a kind is named as a field in
    /// backquotes (`` `simulate.compare` ``), which a front end words as its own option.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::SimulateReport => "simulate report JSON",
            Kind::SimulateCompare => "simulate `simulate.compare` JSON",
            Kind::ServeSummary => "serve summary JSON",
            Kind::Json => "JSON",
            Kind::CsvTable => "CSV table",
            Kind::Timeline => "timeline CSV",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
