//! Request workloads for kvplan: the fixed batches that offload planning (KVPR, FlexGen-style)
//! evaluates, and the seeded request streams the serving simulator consumes.
//!
//! A workload is described in two stages. The raw form is strings and options, as they come from
//! CLI flags or a TOML `[workload]` table ([`WorkloadConfig`]); [`WorkloadConfig::validate`] turns
//! it into a checked [`WorkloadSpec`], and [`generate`] (or [`Workload`]) turns a spec and a seed
//! into `Vec<Request>`, sorted by arrival time then id, ids `0..n`. Four kinds:
//!
//! | kind | `[workload]` fields | requests |
//! |---|---|---|
//! | synthetic | `arrivals`, `qps`, `cv`, `prompt_lengths`, `output_lengths`, `requests` | independent prompts |
//! | replay | `trace`, optional `requests` (cap), `qps` or `time_scale`, `start_s` | a trace file's rows |
//! | shared prefix | `[workload.shared_prefix]` + `arrivals`, `qps`, `cv`, `output_lengths`, `requests` | inference-perf's system prompts × users ([`SharedPrefixSpec`]) |
//! | conversations | `[workload.conversation]` + `arrivals`, `qps`, `cv`, `output_lengths`, optional `requests` (cap) | multi-turn chats, closed loop ([`ConversationSpec`]) |
//!
//! # Token identity
//!
//! A [`Request`] carries lengths and, optionally, which of its tokens it shares with others, for
//! a serving engine's prefix cache:
//! - [`Request::prefix`]: the prompt's leading [`Segment`]s (`id`, `len`: the first `len` tokens
//!   of the token sequence named `id`); the rest of the prompt is unique to the request;
//! - [`Request::output_segment`]: the id under which its generated tokens appear in later
//!   prompts (a conversation's next turn);
//! - [`Request::follows`]: released `think_s` after an earlier request finishes (closed loop);
//!   its `arrival_s` is then the nominal, earliest release.
//!
//! Segment ids are [`fnv1a_64`] hashes of names of ASCII letters, digits, `.`, `_` and `-`;
//! `#` followed by 16 hex digits is a raw id ([`segment_id`], [`format_segment_id`]). A prefix
//! chain is written `ID:LEN` segments joined by `/`: `s3:105/u17:488` ([`parse_prefix`]).
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
//! Lengths ([`LengthSpec`]: prompt and output lengths, and `shared_prefix.system_prompt_len`,
//! `shared_prefix.question_len`, `conversation.turns`, `conversation.first_message_len`,
//! `conversation.message_len`; token counts are whole numbers from 1 to 4294967295):
//!
//! | form | meaning |
//! |---|---|
//! | `N` or `fixed:N` | always N |
//! | `uniform:LO:HI` | uniform over the integers LO..=HI |
//! | `zipf:LO:HI[:THETA]` | Zipf over the integers LO..=HI: LO has rank 1, LO+k rank k+1, P(rank r) ∝ r^-THETA; THETA ≥ 0, default 1.0 (0 is uniform) |
//! | `lognormal:MEDIAN:SIGMA[:MAX]` | log-normal with that median and log-space sigma, rounded and clamped to 1..=MAX (default MAX 1048576) |
//! | `trace:FILE` | resampled from a trace CSV's column (`num_prefill_tokens` for prompts, questions and messages, `num_decode_tokens` for outputs); when prompts and outputs name the same file, whole rows are resampled so the two lengths keep their correlation; not for `conversation.turns` |
//!
//! Think times ([`ThinkTime`], `conversation.think_time_s`, seconds):
//!
//! | form | meaning |
//! |---|---|
//! | `S` or `fixed:S` | always S ≥ 0 |
//! | `exp:MEAN` or `exponential:MEAN` | exponential with mean MEAN > 0 |
//! | `uniform:LO:HI` | uniform over [LO, HI], 0 ≤ LO ≤ HI |
//!
//! `[workload.shared_prefix]` ([`SharedPrefixConfig`]): `groups` (system prompts), `users_per_group`,
//! `system_prompt_len` (drawn per group), `question_len` (drawn per user); each user's output
//! length is drawn once from `output_lengths`. `[workload.conversation]` ([`ConversationConfig`]):
//! `conversations`, `turns`, `first_message_len`, `message_len`, `think_time_s`, optional
//! `max_context` (tokens of a turn's prompt plus output; the conversation ends before a turn that
//! would exceed it). Errors name these fields as `shared_prefix.groups`, `conversation.turns`, ….
//!
//! Every arrival must come within [`MAX_ARRIVAL_S`] (2^32 s) of time 0, where simulated time
//! (`f64` seconds) still resolves a microsecond: `requests / qps` (or `conversations / qps`) at
//! most that, think times at most [`MAX_THINK_S`], and a replay's last arrival after `start_s` and
//! scaling at most that (absolute Unix timestamps of today fit). Past it the error names `qps`,
//! `think_time_s`, `time_scale` or `start_s`.
//!
//! # Trace files
//!
//! Trace replay ([`Trace`], [`ReplayOptions`]) reads CSV files with the header
//! `arrived_at,num_prefill_tokens,num_decode_tokens` (seconds, tokens, tokens), columns in any
//! order, and the optional columns ([`TRACE_OPTIONAL_COLUMNS`]; an empty cell means none):
//!
//! | column | meaning |
//! |---|---|
//! | `prefix` | the prompt's prefix chain, `ID:LEN/ID:LEN…`; the lengths sum to at most `num_prefill_tokens` |
//! | `output_id` | the segment name of the generated tokens |
//! | `follows` | the 0-based data row of an earlier request this one follows |
//! | `think_s` | seconds from that request's end to this one's release (with `follows` only) |
//!
//! [`write_csv`] writes `prefix,output_id` only when some request has a prefix or an output
//! segment, and `follows,think_s` only when some request follows another, so traces without
//! token identity keep their bytes; the trace reader reads back exactly the requests written.
//!
//! # Determinism
//!
//! Every random draw comes from ChaCha8 ([`rand::rngs::ChaCha8Rng`]) keyed by the seed's
//! little-endian bytes and a stream number, one per quantity: arrivals (1), prompt lengths (2),
//! output lengths (3), resampled trace rows (4), system prompt lengths (5), question lengths (6),
//! the shared-prefix order (7), turns (8), message lengths (9), think times (10). Changing one
//! spec leaves the other quantities' draws as they were, and a new quantity takes a new stream,
//! so existing workloads keep their requests. The same seed, spec and dependency versions
//! (pinned by `Cargo.lock`) give byte-identical requests.
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
//!
//! Shared prefixes, from a scenario's TOML (inference-perf's 11 system prompts × 4 users):
//!
//! ```
//! use kvplan_workloads::{generate, WorkloadConfig};
//!
//! let config: WorkloadConfig = toml::from_str(
//!     r#"
//! arrivals = "poisson"
//! qps = 5.0
//! output_lengths = "300"
//! requests = 100
//! [shared_prefix]
//! groups = 11
//! users_per_group = 4
//! system_prompt_len = "100"
//! question_len = "466"
//! "#,
//! )
//! .unwrap();
//! let requests = generate(&config.validate()?, config.seed())?;
//! // Each prompt is its group's system prompt plus its user's question, repeating every 44.
//! assert!(requests.iter().all(|r| r.prefix_tokens() == 566 && r.segments()[0].len == 100));
//! assert_eq!(requests[3].prefix, requests[3 + 44].prefix);
//! # Ok::<(), kvplan_workloads::Error>(())
//! ```
#![warn(missing_docs)]
#![forbid(unsafe_code)]

use std::sync::Arc;

use serde::{Deserialize, Serialize};

mod generate;
mod limits;
pub mod lines;
mod segment;
mod spec;
mod trace;

pub use generate::{RequestStream, Workload, generate, stream_requests, write_csv};
pub use limits::MAX_ARRIVAL_S;
pub use segment::{Segment, fnv1a_64, format_prefix, format_segment_id, parse_prefix, segment_id};
pub use spec::{
    ArrivalKind, Arrivals, ConversationConfig, ConversationSpec, DEFAULT_LOGNORMAL_MAX,
    DEFAULT_SEED, DEFAULT_ZIPF_THETA, LengthSpec, MAX_CV, MAX_REQUESTS, MAX_THINK_S, MAX_TURNS,
    SharedPrefixConfig, SharedPrefixSpec, SyntheticSpec, ThinkTime, WorkloadConfig, WorkloadSpec,
};
pub use trace::{ReplayOptions, TRACE_HEADER, TRACE_OPTIONAL_COLUMNS, TimeScale, Trace, TraceRow};

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
    /// A bad segment name or prefix chain.
    #[error("{field}: `{got}`: {why}")]
    BadSegment {
        /// The field (`prefix`, `segment`).
        field: &'static str,
        /// What was given.
        got: String,
        /// What is wrong and what is accepted.
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
    /// Requests that must be held in memory (a conversation workload is drawn whole, to sort
    /// its turns by arrival) and do not fit.
    #[error(
        "requests: cannot hold {count} requests in memory ({bytes} bytes could not be allocated); ask for fewer"
    )]
    TooMany {
        /// Requests to hold.
        count: u64,
        /// Bytes asked for.
        bytes: u64,
    },
    /// A trace file named by a field (`trace`, `prompt_lengths = "trace:FILE"`) that could not
    /// be read or does not parse: the field, then the file's own error.
    #[error("{field}: {source}")]
    TraceFile {
        /// The field that names the file.
        field: &'static str,
        /// What went wrong with the file ([`Error::Io`], [`Error::TraceEmpty`], [`Error::TraceRow`]).
        source: Box<Error>,
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

/// One inference request.
///
/// Its prompt is `prompt_tokens` tokens: first the [`prefix`](Self::prefix) chain of shared
/// segments (their lengths sum to at most `prompt_tokens`), then tokens unique to the request.
/// Its generated tokens are unique unless [`output_segment`](Self::output_segment) names them,
/// so that a later request's prefix (the next turn of a conversation) can contain them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// Position in the workload.
    pub id: u64,
    /// Arrival time, seconds from the start. For a request that [`follows`](Self::follows)
    /// another this is its nominal (open-loop) arrival, a lower bound: an engine that honours
    /// `follows` may release it later.
    pub arrival_s: f64,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Tokens to generate.
    pub output_tokens: u32,
    /// The prompt's leading shared segments; `None` when the whole prompt is unique. Requests
    /// whose chains start with the same segments share those tokens (see [`Segment`]). Many
    /// requests hold the same chain, so it is shared, not copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<Arc<[Segment]>>,
    /// The segment id under which this request's generated tokens (`output_tokens` of them) may
    /// appear in a later request's prefix; `None` when its output is unique.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_segment: Option<u64>,
    /// A closed-loop follow-up: the request is sent `think_s` seconds after the earlier request
    /// `request` *finishes* (the next turn of a conversation). `None`: it arrives at `arrival_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follows: Option<Follows>,
}

/// A request's closed-loop dependency on an earlier request ([`Request::follows`]).
///
/// A serving engine that honours it releases the request at `finish(request) + think_s` (never
/// before its `arrival_s`, which generators set to the earlier request's arrival plus `think_s`,
/// so the two agree when the earlier request finishes instantly). An engine that ignores it
/// replays the workload open-loop at the `arrival_s` times.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Follows {
    /// The id of the earlier request (always smaller than the follower's id).
    pub request: u64,
    /// Seconds between that request's end and this one's release (≥ 0).
    pub think_s: f64,
}

impl Request {
    /// A request with a unique prompt and output and no follow-up dependency.
    pub fn new(id: u64, arrival_s: f64, prompt_tokens: u32, output_tokens: u32) -> Request {
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

    /// The prefix chain's segments (empty when there is none).
    pub fn segments(&self) -> &[Segment] {
        self.prefix.as_deref().unwrap_or(&[])
    }

    /// Tokens of the prompt covered by the prefix chain (the sum of its lengths, at most
    /// `prompt_tokens` in requests from this crate; saturates at `u32::MAX`).
    pub fn prefix_tokens(&self) -> u32 {
        let sum: u64 = self.segments().iter().map(|s| u64::from(s.len)).sum();
        u32::try_from(sum).unwrap_or(u32::MAX)
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
