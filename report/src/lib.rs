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
mod error;
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

pub use error::Error;
pub use render::*;
