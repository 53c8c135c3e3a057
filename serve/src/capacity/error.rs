//! Why a capacity search or comparison cannot answer.

use crate::output::slo::SloError;
use crate::scenario::ScenarioError;

/// Errors of the SLO search.
#[derive(Debug, thiserror::Error)]
pub enum CapacityError {
    /// A malformed SLO term.
    #[error(transparent)]
    Slo(#[from] SloError),
    /// The workload cannot be run at another rate.
    #[error("{0}")]
    Workload(String),
    /// A search setting out of range.
    #[error("{field}: {why}")]
    Setting {
        /// The setting by its dotted path: a [`SearchOptions`] field (`capacity.rel_tol`) or the
        /// tensor-parallel sizes (`serve.tensor_parallel_size`).
        field: &'static str,
        /// What is wrong.
        why: String,
    },
    /// The scenario does not resolve or run.
    #[error(transparent)]
    Scenario(#[from] Box<ScenarioError>),
    /// No configuration to compare: no hardware given and none in the scenario.
    #[error("no hardware to compare")]
    NoHardware,
    /// A hardware profile that does not load.
    #[error(transparent)]
    Hardware(#[from] kvplan_vocab::Error),
}
