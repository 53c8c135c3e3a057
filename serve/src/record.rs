//! A request's outcome, the record every output is built from: a leaf that imports nothing of
//! the crate.

use serde::Serialize;

/// Most requests a run keeps a [`RequestRecord`] of each for ([`Config::record_requests`](crate::config::Config::record_requests)): the
/// outputs that list every request (a per-request CSV, latency CDFs, a measured comparison)
/// hold them all until the run ends. Without them a run's memory does not grow with its
/// request count.
pub const MAX_RECORDED_REQUESTS: u64 = 10_000_000;

/// Why a request was not served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RejectReason {
    /// The prompt has `max_model_len` tokens or more: no room for one output token (vLLM's
    /// input processor refuses it).
    PromptTooLong,
    /// Prompt + output tokens exceed the model's context (no longer produced: generation
    /// stops at `max_model_len` instead; kept for older outputs).
    ExceedsContext,
    /// Its KV at full length needs more blocks than the GPU has (less the watermark).
    ExceedsKvCapacity,
    /// Its prompt exceeds `max_num_batched_tokens` and the scheduler does not chunk.
    ExceedsBatchTokens,
    /// Zero prompt or output tokens.
    EmptyRequest,
}

impl RejectReason {
    /// The kebab-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::PromptTooLong => "prompt-too-long",
            RejectReason::ExceedsContext => "exceeds-context",
            RejectReason::ExceedsKvCapacity => "exceeds-kv-capacity",
            RejectReason::ExceedsBatchTokens => "exceeds-batch-tokens",
            RejectReason::EmptyRequest => "empty-request",
        }
    }
}

/// A request's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case", tag = "status", content = "reason")]
pub enum Status {
    /// Served to the last token.
    Finished,
    /// Not served.
    Rejected(RejectReason),
}

/// Why a served request stopped (vLLM's finish reasons).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FinishReason {
    /// It produced all its output tokens.
    Stop,
    /// Generation stopped at `max_model_len` (vLLM's `FINISHED_LENGTH_CAPPED`).
    Length,
}

impl FinishReason {
    /// The name vLLM reports.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
        }
    }
}

/// One request's timings (seconds from its arrival; NaN / empty in CSV when rejected).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestRecord {
    /// Request id.
    pub id: u64,
    /// Arrival time.
    pub arrival_s: f64,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Output tokens: generated when served (fewer than asked when cut at `max_model_len`),
    /// asked for when rejected.
    pub output_tokens: u32,
    /// Outcome.
    pub status: Status,
    /// Why it stopped (served requests).
    pub finish_reason: Option<FinishReason>,
    /// Prompt tokens found in the prefix cache when it was first scheduled.
    pub cached_tokens: u32,
    /// Reaching the engine (arrival plus the frontend latency) to first scheduled.
    pub queue_s: f64,
    /// Arrival to first token.
    pub ttft_s: f64,
    /// Mean time per output token after the first.
    pub tpot_s: f64,
    /// Arrival to last token.
    pub e2e_s: f64,
    /// Times preempted.
    pub preemptions: u32,
    /// Tokens swapped out (summed over preemptions).
    pub swapped_tokens: u64,
    /// Tokens dropped for recomputation (summed over preemptions).
    pub recomputed_tokens: u64,
    /// The replica that served it (a cluster's; 0 on one engine).
    #[serde(skip_serializing_if = "is_zero_u32")]
    pub replica: u32,
    /// The prefill replica, in a disaggregated cluster.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_replica: Option<u32>,
    /// Seconds from the decode replica posting the read of its KV to the KV being there
    /// (disaggregated; NaN otherwise).
    pub kv_transfer_s: f64,
    /// Prompt tokens a KV connector loaded (a CPU tier's hit, or a remote prefill's).
    pub external_tokens: u32,
    /// Seconds its connector load took, to its being schedulable (0: none).
    pub kv_load_s: f64,
}

fn is_zero_u32(x: &u32) -> bool {
    *x == 0
}
