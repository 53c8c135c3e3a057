//! Request workloads for kvplan: the fixed batches that offload planning (KVPR, FlexGen-style)
//! evaluates, and the seeded request streams the serving simulator consumes.
//!
//! A workload is described in two stages. The raw form is strings and options, as they come from
//! CLI flags or a TOML `[workload]` table ([`WorkloadConfig`]); [`WorkloadConfig::validate`] turns
//! it into a checked [`WorkloadSpec`], and [`generate`] (or [`Workload`]) turns a spec and a seed
//! into `Vec<Request>`, sorted by arrival time then id, ids `0..n`.
//!
//! # Spec grammar
//!
//! Arrivals ([`ArrivalKind`], with `qps` and `cv` given beside it):
//!
//! | form | meaning |
//! |---|---|
//! | `all-at-once` | every request arrives at t = 0 |
//! | `poisson` | exponential inter-arrival times with mean `1/qps` |
//! | `gamma:CV` or `gamma` (with `cv`) | Gamma inter-arrival times, mean `1/qps`, coefficient of variation CV (bursty when CV > 1; CV = 1 is Poisson) |
//!
//! Lengths ([`LengthSpec`], prompt and output separately; token counts are whole numbers from 1
//! to 4294967295):
//!
//! | form | meaning |
//! |---|---|
//! | `N` or `fixed:N` | always N |
//! | `uniform:LO:HI` | uniform over the integers LO..=HI |
//! | `zipf:LO:HI[:THETA]` | Zipf over the integers LO..=HI: LO has rank 1, LO+k rank k+1, P(rank r) ∝ r^-THETA; THETA ≥ 0, default 1.0 (0 is uniform) |
//! | `lognormal:MEDIAN:SIGMA[:MAX]` | log-normal with that median and log-space sigma, rounded and clamped to 1..=MAX (default MAX 1048576) |
//! | `trace:FILE` | resampled from a trace CSV's column (`num_prefill_tokens` for prompts, `num_decode_tokens` for outputs); when prompts and outputs name the same file, whole rows are resampled so the two lengths keep their correlation |
//!
//! Trace replay ([`Trace`], [`ReplayOptions`]) reads CSV files with the header
//! `arrived_at,num_prefill_tokens,num_decode_tokens` (seconds, tokens, tokens).
//!
//! # Determinism
//!
//! Every random draw comes from ChaCha8 ([`rand::rngs::ChaCha8Rng`]) keyed by the seed's
//! little-endian bytes and a stream number (arrivals, prompt lengths and output lengths draw from
//! separate streams, so changing the length spec leaves arrival times as they were). The same seed,
//! spec and dependency versions (pinned by `Cargo.lock`) give byte-identical requests.
//!
//! # Example
//!
//! ```
//! use kvplan_workloads::{generate, WorkloadConfig};
//!
//! let config: WorkloadConfig = WorkloadConfig {
//!     arrivals: Some("poisson".into()),
//!     qps: Some(4.0),
//!     prompt_lengths: Some("zipf:512:2048".into()),
//!     output_lengths: Some("uniform:16:256".into()),
//!     requests: Some(1000),
//!     ..Default::default()
//! };
//! let spec = config.validate()?;
//! let requests = generate(&spec, config.seed())?;
//! assert_eq!(requests.len(), 1000);
//! assert!(requests.windows(2).all(|w| w[0].arrival_s <= w[1].arrival_s));
//! assert!(requests.iter().all(|r| (512..=2048).contains(&r.prompt_tokens)));
//! // Same seed, same requests.
//! assert_eq!(requests, generate(&spec, config.seed())?);
//! # Ok::<(), kvplan_workloads::Error>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

mod generate;
mod spec;
mod trace;

pub use generate::{Workload, generate, write_csv};
pub use spec::{
    ArrivalKind, Arrivals, DEFAULT_LOGNORMAL_MAX, DEFAULT_SEED, DEFAULT_ZIPF_THETA, LengthSpec,
    MAX_CV, MAX_REQUESTS, SyntheticSpec, WorkloadConfig, WorkloadSpec,
};
pub use trace::{ReplayOptions, TRACE_HEADER, TimeScale, Trace, TraceRow};

/// Workload errors. Each names the field (or the trace file and its 1-based line) and what is
/// accepted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A size out of range.
    #[error("{field}: must be at least 1 (got {value})")]
    NonPositive {
        /// The field.
        field: &'static str,
        /// The value.
        value: u64,
    },
    /// A spec string that matches none of the accepted forms.
    #[error("{field}: cannot parse `{got}`; accepted forms: {expected}")]
    BadSpec {
        /// The field (`arrivals`, `prompt_lengths`, ...).
        field: &'static str,
        /// What was given.
        got: String,
        /// The accepted forms.
        expected: &'static str,
    },
    /// A number that parsed but lies outside the accepted range (or is not a number at all).
    #[error("{field}: `{got}` is out of range; expected {expected}")]
    OutOfRange {
        /// The field (`qps`, `cv`, `prompt_lengths`, ...).
        field: &'static str,
        /// What was given.
        got: String,
        /// The accepted range.
        expected: String,
    },
    /// A required field that was not given.
    #[error("{field}: required ({why})")]
    Missing {
        /// The field.
        field: &'static str,
        /// When it is required and what it takes.
        why: &'static str,
    },
    /// A field given where it has no meaning, or two fields that contradict each other.
    #[error("{field}: {why}")]
    Conflict {
        /// The field.
        field: &'static str,
        /// Why it is refused.
        why: String,
    },
    /// A trace file that could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// A trace with no header or no requests.
    #[error("{path}: empty trace ({why}); expected a header `{header}` and at least one row", header = TRACE_HEADER)]
    TraceEmpty {
        /// The file.
        path: String,
        /// What is missing.
        why: &'static str,
    },
    /// A bad line in a trace file.
    #[error("{path}:{line}: {message}")]
    TraceRow {
        /// The file.
        path: String,
        /// The 1-based line.
        line: u64,
        /// What is wrong with it.
        message: String,
    },
}

/// Results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A run of shared prompt tokens (TEMPORARY stand-in until the workloads branch lands).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Segment {
    /// Segment id.
    pub id: u64,
    /// Tokens.
    pub len: u32,
}

/// One inference request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Position in the workload.
    pub id: u64,
    /// Arrival time, seconds from the start.
    pub arrival_s: f64,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Tokens to generate.
    pub output_tokens: u32,
    /// Shared prefix segments.
    #[serde(skip)]
    pub prefix: Option<std::sync::Arc<[Segment]>>,
    /// Output segment id.
    #[serde(skip)]
    pub output_segment: Option<u64>,
    /// Closed-loop dependency.
    #[serde(skip)]
    pub follows: Option<Follows>,
}

/// A closed-loop dependency (TEMPORARY stand-in).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Follows {
    /// The earlier request.
    pub request: u64,
    /// Seconds after it finishes.
    pub think_s: f64,
}

/// Parses a prefix chain (TEMPORARY stand-in).
pub fn parse_prefix(s: &str) -> Result<Vec<Segment>> {
    Err(Error::Missing {
        field: "prefix",
        why: "not supported yet",
    })
    .map(|()| {
        let _ = s;
        Vec::new()
    })
}

impl Request {
    /// A request with no shared tokens.
    pub fn new(id: u64, arrival_s: f64, prompt_tokens: u32, output_tokens: u32) -> Self {
        Request {
            id,
            arrival_s,
            prompt_tokens,
            output_tokens,
            prefix: None,
            output_segment: None,
            follows: None,
        }
    }
}

/// `batch` requests, all present at time 0, each with the same prompt and output length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixedBatch {
    /// Requests.
    pub batch: u32,
    /// Prompt tokens per request.
    pub prompt: u32,
    /// Output tokens per request.
    pub gen_len: u32,
}

impl FixedBatch {
    /// A checked fixed batch.
    pub fn new(batch: u32, prompt: u32, gen_len: u32) -> Result<Self, Error> {
        for (field, v) in [("batch", batch), ("prompt", prompt), ("gen", gen_len)] {
            if v == 0 {
                return Err(Error::NonPositive { field, value: 0 });
            }
        }
        Ok(FixedBatch {
            batch,
            prompt,
            gen_len,
        })
    }

    /// The requests, in id order.
    pub fn requests(&self) -> impl Iterator<Item = Request> + '_ {
        (0..u64::from(self.batch)).map(|id| Request::new(id, 0.0, self.prompt, self.gen_len))
    }

    /// Total tokens the KV cache must hold at the end (`batch * (prompt + gen)`).
    pub fn kv_tokens(&self) -> u64 {
        u64::from(self.batch) * (u64::from(self.prompt) + u64::from(self.gen_len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_batch_is_equal_length_and_checked() {
        let w = FixedBatch::new(4, 128, 32).unwrap();
        let r: Vec<Request> = w.requests().collect();
        assert_eq!(r.len(), 4);
        assert!(
            r.iter()
                .all(|q| q.prompt_tokens == 128 && q.output_tokens == 32 && q.arrival_s == 0.0)
        );
        assert_eq!(w.kv_tokens(), 4 * 160);
        let e = FixedBatch::new(4, 0, 1).unwrap_err().to_string();
        assert!(e.contains("prompt") && e.contains("at least 1"), "{e}");
    }
}
