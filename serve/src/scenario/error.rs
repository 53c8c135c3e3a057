//! Why a serving scenario cannot run: one error for its fields, each named by the scenario's
//! own words (`workload.qps`, `serve.block_size`, `cluster.router`); a leaf, so the scenario's
//! parts (the `[cluster]` table among them) share it without importing the scenario itself.

/// Why a serving scenario cannot run. Each names the scenario field.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// `model` or `hardware` not given.
    #[error("{field}: required")]
    Missing {
        /// The field.
        field: &'static str,
    },
    /// The model or hardware could not be resolved.
    #[error(transparent)]
    Planner(#[from] kvplan_vocab::Error),
    /// A bad `[workload]` field or trace file (fields are named without the `workload.` prefix).
    #[error(transparent)]
    Workload(#[from] kvplan_workloads::Error),
    /// A bad `[serve]` setting, or no room for the KV cache (fields without the `serve.` prefix).
    #[error(transparent)]
    Serve(#[from] crate::Error),
    /// A bad `[cluster]` setting (the field by its dotted path).
    #[error("{field}: expected {expect} (got {value})")]
    Cluster {
        /// The field, `cluster.data_parallel_size`.
        field: &'static str,
        /// Its value.
        value: String,
        /// What it should be.
        expect: std::borrow::Cow<'static, str>,
    },
    /// A replica group's or pool's engine settings (`cluster.prefill.serve`) are bad.
    #[error("{path}.{source}")]
    Replica {
        /// The table the settings are in.
        path: &'static str,
        /// What is wrong.
        source: crate::Error,
    },
}
