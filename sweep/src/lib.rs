//! kvplan's parameter sweeps: a base scenario (op-level, as `kvplan simulate` reads it, or
//! serving, as `kvplan serve` reads it) and axes, expanded into points, each run through the
//! same library path as the single-run command, and written one row per point.
//!
//! - [`file`]: the sweep file ([`Sweep::from_file`]): `kind`, `[base]` or `base_file`, `[axes]`
//!   (a cartesian product, first axis outermost) and `[[points]]`; each point's values are
//!   overlaid on the base as TOML at their dotted paths and deserialised through the scenario's
//!   raw types, so an unknown field is an error naming it.
//! - [`run`]: one point → a [`Row`] (its metrics, or the one-line reason it cannot run), and
//!   [`Sweep::run_ordered`]: points in parallel (rayon), rows handed over in point order.
//! - [`rows`]: the CSV / JSONL text of a row, the header, what a resumed run keeps of a file
//!   ([`Sweep::resume_rows`], [`rows::sort_rows`]), and [`rows::merge`] of shard outputs.
//! - [`fingerprint`]: which sweep (and kvplan version) wrote a file of rows, kept beside it, so
//!   that a resumed run and merge refuse another sweep's rows.
//!
//! ```
//! use kvplan_sweep::{Format, Sweep};
//!
//! let text = r#"
//! kind = "simulate"
//! [base]
//! model = "opt-1.3b"
//! hardware = "a100-40g-pcie4"
//! workload = { prompt = 64, gen = 3 }
//! [axes]
//! "workload.batch" = [4, 8]
//! strategy = ["kvpr", "full-transfer"]
//! "#;
//! let sweep = Sweep::parse(text, std::path::Path::new("sweep.toml"))?;
//! assert_eq!(sweep.len(), 4);
//! let mut out = sweep.header(Format::Csv);
//! sweep.run_ordered(&[0, 1, 2, 3], |row| {
//!     out.push_str(&sweep.format_row(&row, Format::Csv));
//!     Ok::<(), ()>(())
//! }).unwrap();
//! assert!(out.starts_with("point,workload.batch,strategy,prefill_latency_s,"));
//! assert_eq!(out.lines().count(), 5);
//! # Ok::<(), kvplan_sweep::SweepError>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod file;
pub mod fingerprint;
pub mod rows;
pub mod run;
pub mod stream;

pub use file::{Kind, Sweep, SweepError};
pub use fingerprint::Fingerprint;
pub use kvplan_run::Metric;
pub use rows::{Format, MergeError, ResumeError};
pub use run::Row;
pub use stream::{PlotLabels, PlotSpec, Resume, Shard};

/// Sweeps larger than this many points need an explicit confirmation from the front end
/// (`kvplan sweep`'s yes option).
pub const DEFAULT_MAX_POINTS: u64 = 100_000;
