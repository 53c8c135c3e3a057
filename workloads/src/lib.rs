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

mod columns;
mod error;
mod generate;
mod limits;
pub mod lines;
mod request;
mod segment;
mod spec;
mod trace;

pub use columns::{TRACE_HEADER, TRACE_OPTIONAL_COLUMNS};
pub use error::{Error, Result};
pub use generate::{RequestStream, Workload, generate, stream_requests, write_csv};
pub use limits::MAX_ARRIVAL_S;
pub use request::{FixedBatch, Follows, Request};
pub use segment::{Segment, fnv1a_64, format_prefix, format_segment_id, parse_prefix, segment_id};
pub use spec::{
    ArrivalKind, Arrivals, ConversationConfig, ConversationSpec, DEFAULT_LOGNORMAL_MAX,
    DEFAULT_SEED, DEFAULT_ZIPF_THETA, LengthSpec, MAX_CV, MAX_REQUESTS, MAX_THINK_S, MAX_TURNS,
    SharedPrefixConfig, SharedPrefixSpec, SyntheticSpec, ThinkTime, WorkloadConfig, WorkloadSpec,
};
pub use trace::{ReplayOptions, TimeScale, Trace, TraceRow};
