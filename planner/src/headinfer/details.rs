//! What a HeadInfer plan is asked (options) and what it decided (details): plain data, so
//! the plan types can hold them without importing the planner.

use serde::Serialize;

/// HeadInfer options (all optional: the planner chooses).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct HeadInferOptions {
    /// KV heads per offload group (fixed), or chosen by simulated time when `None`.
    pub heads_per_group: Option<u32>,
    /// Prefill chunk tokens (fixed), or chosen by simulated time when `None`.
    pub chunk_tokens: Option<u32>,
}

/// The decisions of a HeadInfer plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HeadInferDetails {
    /// KV heads per offload group.
    pub heads_per_group: u32,
    /// Prefill chunk tokens.
    pub chunk_tokens: u32,
    /// Offload groups per layer (`num_kv_heads / heads_per_group`).
    pub groups_per_layer: u32,
    /// Prefill chunks.
    pub prefill_chunks: u32,
    /// Whether the group size was chosen by the planner (not fixed by the options).
    pub adaptive: bool,
    /// Smallest chunk for which offloaded attention is compute-bound on this profile.
    pub roofline_chunk_tokens: u32,
    /// GPU bytes of the two ping-pong buffers.
    pub kv_buffer_bytes: u64,
    /// Simulated makespan of the plan's schedule (prefill and decode), seconds, as the
    /// optimiser predicted it.
    pub predicted_seconds: f64,
    /// (group, chunk) candidates that fit memory and the op limit.
    pub candidates_fit: u32,
    /// Candidates timed on the schedule (the others were ruled out by their lower bound).
    pub candidates_timed: u32,
}
