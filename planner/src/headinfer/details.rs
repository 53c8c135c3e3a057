//! What a HeadInfer plan is asked (options) and what it decided (details): plain data, so
//! the plan types can hold them without importing the planner.

use serde::Serialize;

use super::memory::GIB;
use crate::types::{Details, NoteData};

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

impl Details for HeadInferDetails {
    fn key(&self) -> &'static str {
        "headinfer"
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("HeadInfer's decisions serialise to JSON")
    }
}

/// Why the planner's head group is not larger.
#[derive(Debug, Clone, PartialEq)]
pub enum LargerGroup {
    /// The next larger group would need `need_bytes` of GPU memory, over `usable_bytes`.
    DoesNotFit {
        /// KV heads per group of the larger group.
        heads: u32,
        /// The GPU memory it needs, bytes.
        need_bytes: u64,
        /// The GPU memory usable, bytes.
        usable_bytes: u64,
    },
    /// The next larger group fits but is not faster.
    NotFaster {
        /// KV heads per group of the larger group.
        heads: u32,
    },
    /// The group holds all KV heads of a layer.
    AllHeads,
}

/// What the HeadInfer planner notes.
#[derive(Debug, Clone, PartialEq)]
pub enum HeadInferNote {
    /// The group size the planner chose, and why not larger.
    AdaptiveGroups {
        /// KV heads per group.
        heads_per_group: u32,
        /// Groups per layer.
        groups_per_layer: u32,
        /// Why not larger.
        larger: LargerGroup,
    },
    /// The (group, chunk) chosen by simulated time among the candidates.
    Chosen {
        /// KV heads per group.
        heads_per_group: u32,
        /// Prefill chunk tokens.
        chunk_tokens: u32,
        /// Simulated prefill and decode, seconds.
        seconds: f64,
        /// Candidates that fit.
        fit: usize,
        /// Candidates timed on their schedules.
        timed: usize,
    },
    /// The chunk the planner chose against the roofline chunk of `hardware`.
    Chunk {
        /// Prefill chunk tokens.
        chunk_tokens: u32,
        /// The smallest chunk for which offloaded attention is compute-bound.
        roofline_tokens: u32,
        /// The hardware profile.
        hardware: String,
    },
}

impl NoteData for HeadInferNote {
    fn render(&self, _: &dyn Fn(&str) -> String) -> String {
        match self {
            HeadInferNote::AdaptiveGroups {
                heads_per_group: g,
                groups_per_layer,
                larger,
            } => {
                let why = match larger {
                    LargerGroup::DoesNotFit {
                        heads,
                        need_bytes,
                        usable_bytes,
                    } => format!(
                        "{heads} per group would need {:.2} GiB of {:.2} GiB usable",
                        *need_bytes as f64 / GIB,
                        *usable_bytes as f64 / GIB
                    ),
                    LargerGroup::NotFaster { heads } => {
                        format!("{heads} per group fits but is not faster")
                    }
                    LargerGroup::AllHeads => "all KV heads of a layer in one group".to_string(),
                };
                format!(
                    "adaptive head groups: {g} KV heads per group ({groups_per_layer} groups per layer); {why}"
                )
            }
            HeadInferNote::Chosen {
                heads_per_group: g,
                chunk_tokens: chunk,
                seconds,
                fit,
                timed,
            } => format!(
                "chosen by simulated time: {g} KV heads per group, {chunk}-token chunks, {seconds:.3} s (prefill and decode); fastest of {fit} (group, chunk) candidates that fit ({timed} timed, the rest ruled out by a lower bound)"
            ),
            HeadInferNote::Chunk {
                chunk_tokens: chunk,
                roofline_tokens: roofline,
                hardware,
            } => {
                if chunk < roofline {
                    format!(
                        "prefill chunk {chunk} tokens: below the {roofline}-token minimum for compute-bound offloaded attention; prefill waits on PCIe (larger chunks do not fit or are slower)"
                    )
                } else {
                    format!(
                        "prefill chunk {chunk} tokens (offloaded attention is compute-bound from {roofline} tokens on {hardware})"
                    )
                }
            }
        }
    }
}
