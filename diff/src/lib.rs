//! Comparing kvplan's outputs, and regression suites built on that comparison.
//!
//! [`compare`] reads two outputs of the same kind (report JSON, CSV tables, timeline CSV;
//! detected from content), matches their rows by key and reports, per metric, A, B, the delta,
//! the relative delta and whether it regressed past a tolerance, in the direction the
//! [`direction::RULES`] table gives the metric's name. [`suite`] reruns a directory of
//! scenarios and compares each with its golden outputs.
//!
//! ```
//! use kvplan_diff::compare::{Input, Status, compare};
//!
//! let a = Input::parse("a.json", r#"{"strategy": "kvpr", "decode_latency_s": 1.00}"#)?;
//! let b = Input::parse("b.json", r#"{"strategy": "kvpr", "decode_latency_s": 1.02}"#)?;
//! let c = compare(&a, &b, 0.01)?;
//! assert_eq!(c.metrics[0].status, Status::Regressed);
//! # Ok::<(), kvplan_diff::Error>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod compare;
pub mod direction;
mod error;
mod kind;
pub mod suite;

pub use error::{Error, Result};
