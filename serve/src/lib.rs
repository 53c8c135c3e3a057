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
pub mod error;
pub mod fidelity;
pub mod figures;
pub mod iteration;
pub mod itl;
pub mod kv_cache;
pub(crate) mod lru;
mod named;
pub mod output;
#[doc(hidden)]
pub mod probe;
pub mod record;
pub(crate) mod roles;
pub mod router;
pub mod runs;
pub mod scaling;
pub mod scenario;
pub mod sched;
pub mod schedulers;
pub mod server;
pub mod setup;
pub mod tier;
pub mod versions;
pub mod warmup;

pub use config::{Config, Preemption, Resolved, SchedulerKind};
pub use error::Error;
pub use iteration::{IterationModel, IterationShape, IterationTimer};
pub use output::{FinishReason, RejectReason, RequestRecord, ServeReport, Status, Summary};
pub use record::MAX_RECORDED_REQUESTS;
pub use server::{simulate, simulate_stream, simulate_with};
