//! The serving simulator's errors, a leaf every module may use: the engine's [`Error`], and
//! [`ScenarioError`], why a serving scenario cannot run, each named by the scenario's own words
//! (`workload.qps`, `serve.block_size`, `cluster.router`), which the scenario's parts (the
//! `[cluster]` table among them) share without importing the scenario itself.

use crate::record::RequestRecord;

/// Serving simulator errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting out of range.
    #[error("{field}: expected {expect} (got {value})")]
    InvalidConfig {
        /// The setting.
        field: &'static str,
        /// Its value.
        value: String,
        /// The accepted range (or why the value cannot run here).
        expect: std::borrow::Cow<'static, str>,
    },
    /// Weights and activations leave no room for a single KV block.
    #[error(
        "no GPU memory left for the KV cache: {usable_bytes} bytes usable, weights {weights_bytes}, activations {activation_bytes}"
    )]
    NoKvMemory {
        /// GPU bytes the engine may use.
        usable_bytes: u64,
        /// Model weights.
        weights_bytes: u64,
        /// Activation working set.
        activation_bytes: u64,
    },
    /// `max_model_len` longer than the KV cache holds: such a request could never be scheduled.
    #[error(
        "max_model_len: {max_model_len} tokens do not fit the KV cache ({kv_tokens} tokens); lower max_model_len, or raise gpu_memory_utilization or num_gpu_blocks_override"
    )]
    MaxModelLenTooLong {
        /// The limit.
        max_model_len: u32,
        /// Tokens the usable blocks hold.
        kv_tokens: u64,
    },
    /// Requests not sorted by arrival.
    #[error("request {index} arrives before the one before it")]
    UnsortedRequests {
        /// Index of the first out-of-order request.
        index: usize,
    },
    /// A negative or non-finite arrival time.
    #[error("request {index}: arrival time must be finite and non-negative")]
    BadArrival {
        /// Index of the request.
        index: usize,
    },
    /// An allocation the run needs could not be made (a memory limit, or not enough memory).
    #[error(
        "out of memory: cannot hold {what} ({bytes} bytes could not be allocated); ask for fewer requests or fewer outputs"
    )]
    OutOfMemory {
        /// What was being held.
        what: &'static str,
        /// Bytes asked for.
        bytes: u64,
    },
    /// The latency values of a long run could not be written to or read from their temporary
    /// file.
    #[error("cannot keep the latency values in a temporary file: {source}")]
    Spill {
        /// The cause.
        source: std::io::Error,
    },
    /// More requests than per-request records may be held for (the outputs that list every
    /// request need them all at the end).
    #[error(
        "requests: {requests} is more than the {max} requests whose records can be kept for per-request outputs (about {gib} GiB); ask for fewer requests or drop the per-request outputs",
        gib = (*max as f64 * std::mem::size_of::<RequestRecord>() as f64 / (1u64 << 30) as f64).round()
    )]
    TooManyRecords {
        /// Requests in the run.
        requests: u64,
        /// The ceiling ([`MAX_RECORDED_REQUESTS`](crate::record::MAX_RECORDED_REQUESTS)).
        max: u64,
    },
    /// The scheduler could make no progress (an engine bug, reported instead of looping).
    #[error("scheduler stalled at {time_s} s with {waiting} waiting and {swapped} swapped")]
    Stalled {
        /// Simulated time.
        time_s: f64,
        /// Waiting sequences.
        waiting: usize,
        /// Swapped sequences.
        swapped: usize,
    },
}

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
    Serve(#[from] Error),
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
        source: Error,
    },
}
