//! kvplan's serving simulator: many requests over time on one GPU, iteration by iteration, on
//! the planner's models, hardware profiles, cost model and memory accounting.
//!
//! - [`config`]: vLLM's settings (block size, memory utilisation, watermark, swap space,
//!   scheduler, preemption, `max_num_seqs`, `max_num_batched_tokens`) and the GPU block budget.
//! - [`iteration`]: an iteration's time in closed form, and the op-level schedule it equals.
//! - [`engine`]: the event loop (arrivals and iteration ends ordered by (time, sequence)), the
//!   paged block accounting, the schedulers and preemption.
//! - [`output`]: per-request records, summary, time series and their CSV / JSON / trace writers.
//!
//! ```
//! use kvplan_planner::{HardwareProfile, ModelSpec};
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

pub mod capacity;
pub mod config;
pub mod engine;
pub mod iteration;
pub mod output;
pub mod scenario;

pub use config::{Config, Preemption, Resolved, SchedulerKind};
pub use engine::{simulate, simulate_with};
pub use iteration::{IterationShape, IterationTimer};
pub use output::{Output, RejectReason, RequestRecord, Status, Summary};

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
        /// The accepted range.
        expect: &'static str,
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
