//! kvplan's serving simulator: many requests over time on one GPU or a cluster of them,
//! iteration by iteration, on the vocabulary's models, hardware profiles, cost model and memory
//! accounting (`kvplan-vocab`; the planner is not a dependency).
//!
//! Shaped like vLLM's engine (v0.15.1, the V1 engine, with vLLM 0.4's schedulers kept for the
//! swap-versus-recompute studies):
//! - [`config`]: vLLM's settings and defaults, and what they resolve to (block budget, limits,
//!   CUDA-graph capture sizes).
//! - [`block_pool`]: the GPU blocks, reference counts, the LRU free queue and the prefix cache.
//! - [`kv_cache`]: per-request block tables and block hashes, prefix lookup, slot allocation.
//! - [`sched`]: the request state and one scheduling policy per kind (V1, and the 0.4 family).
//! - [`iteration`]: a step's GPU and host time behind the [`IterationModel`] trait.
//! - [`server`]: the simulated server loop (vLLM's EngineCore) that only advances time (host thread, GPU stream, asynchronous
//!   scheduling).
//! - [`output`]: per-request records, summary, time series and their CSV / JSON / trace writers.
//!
//! ```
//! use kvplan_vocab::{HardwareProfile, ModelSpec};
//! use kvplan_serve::{Config, simulate};
//! use kvplan_workloads::Request;
//!
//! let model = ModelSpec::preset("llama-2-7b")?;
//! let hw = HardwareProfile::preset("a100-80g-sxm")?;
//! let reqs: Vec<Request> = (0..4)
//!     .map(|id| Request::new(id, 0.1 * id as f64, 256, 32))
//!     .collect();
//! let out = simulate(&model, &hw, &Config::default(), &reqs)?;
//! assert_eq!(out.summary.finished, 4);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod bands;
pub mod block_pool;
pub mod capacity;
pub mod cluster;
pub mod config;
pub mod day;
pub mod deploy;
pub mod engine;
pub mod fidelity;
pub mod iteration;
pub mod kv_cache;
pub(crate) mod lru;
mod named;
pub mod output;
#[doc(hidden)]
pub mod probe;
pub mod router;
pub mod runs;
pub mod scenario;
pub mod sched;
pub mod server;
pub mod tier;

pub use config::{Config, Preemption, Resolved, SchedulerKind};
pub use iteration::{IterationModel, IterationShape, IterationTimer};
pub use output::{FinishReason, RejectReason, RequestRecord, ServeReport, Status, Summary};
pub use server::{simulate, simulate_stream, simulate_with};

/// Most requests a run keeps a [`RequestRecord`] of each for ([`Config::record_requests`]): the
/// outputs that list every request (a per-request CSV, latency CDFs, a measured comparison)
/// hold them all until the run ends. Without them a run's memory does not grow with its
/// request count.
pub const MAX_RECORDED_REQUESTS: u64 = 10_000_000;

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
        /// The ceiling ([`MAX_RECORDED_REQUESTS`]).
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
