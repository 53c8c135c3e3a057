//! The one scenario layer: a scenario of either kind ([`RunKind`]: op-level `simulate`, or
//! `serve`) read from one file format, overlaid with a front end's settings, resolved with
//! errors that name the field as the file writes it, and run to one [`Report`] whose metric
//! columns ([`columns`]) every front end shares. The CLI's `simulate` and `serve`, sweeps and
//! the regression suite all come through here; what differs per kind is delegated to the
//! planner (`kvplan_planner::scenario`, `::run`) and the serving simulator
//! (`kvplan_serve::scenario`).
//!
//! ```
//! use kvplan_run::{RawScenario, RunKind};
//!
//! let text = r#"
//! kind = "serve"
//! model = "llama-2-7b"
//! hardware = "h100-sxm"
//! [workload]
//! arrivals = "poisson"
//! qps = 2.0
//! prompt_lengths = "64"
//! output_lengths = "8"
//! requests = 20
//! "#;
//! let table: toml::Table = toml::from_str(text).unwrap();
//! let raw = RawScenario::from_table(table, RunKind::Simulate)?;
//! assert_eq!(raw.kind(), RunKind::Serve); // the file's `kind` decides
//! let report = kvplan_run::run(&raw.resolve()?)?;
//! let metrics = report.metrics();
//! assert_eq!(metrics.len(), kvplan_run::columns(RunKind::Serve).len());
//! assert_eq!(metrics[0], kvplan_run::Metric::Int(20)); // requests
//! # Ok::<(), kvplan_run::ScenarioError>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod error;
mod read;
mod report;
mod scenario;

pub use error::ScenarioError;
pub use kvplan_vocab::RunKind;
pub use read::{FieldError, RawScenario, locate, rebase};
pub use report::{Metric, Report, SERVE_METRICS, SIMULATE_METRICS, columns};
pub use scenario::{Prepared, Scenario, run};
