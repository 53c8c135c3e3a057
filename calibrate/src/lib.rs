//! kvplan's calibration: measures a machine through the executor, fits the measurements into a
//! [`ProfileFile`](kvplan_vocab::hardware::ProfileFile) (tables with interpolation, not one number each), and compares a simulated
//! timeline with a measured one.
//!
//! Every microbenchmark is a small [`Schedule`](kvplan_vocab::Schedule) run by an [`Executor`], so calibration measures
//! exactly the code path that `kvplan exec` and `kvplan validate` time.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod attention;
mod bench;
pub mod compare;
pub mod copies;
mod error;
pub mod fit;
pub mod inputs;
pub mod kernels;
pub mod micro;
mod plan;
mod profile;
pub mod runs;
pub mod table;

use kvplan_exec::Executor;

pub use compare::{Comparison, compare};
pub use error::Error;
pub use fit::monotone_curve;
pub use plan::{Measurements, Plan, Progress};
pub use profile::{build_profile, today};

/// Runs every microbenchmark of `plan` on `exec`.
pub fn measure(
    exec: &mut dyn Executor,
    plan: &Plan,
    progress: Progress,
) -> Result<Measurements, Error> {
    micro::measure_all(exec, plan, progress)
}
