//! What a KVPR plan is asked (its options) and what it decided (its per-step splits): plain
//! data, read by the planner, the scenario and the reports.

use serde::Serialize;

use super::kvpr::Split;
use crate::types::Details;

/// How the KVPR split is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "lowercase", tag = "policy", content = "value")]
pub enum SplitPolicy {
    /// The LP optimum per step.
    Auto,
    /// A fixed number of recomputed tokens (clamped to the cached length).
    Tokens(u32),
}

/// Which per-layer time the KVPR split minimises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SplitModel {
    /// The emitted schedule's steady state (default): activations and `W_K,W_V` are prefetched
    /// during the previous layer, so they cost link time only; the split is then checked on the
    /// simulated schedule itself (see [`kvpr_splits`](super::split::kvpr_splits)).
    #[default]
    Schedule,
    /// The KVPR paper's Eq. 10, `X(l) + max(R(l), KV(s'-l))` per GPU batch: the activation copy
    /// is charged in series before recomputation, weights and the layer's other kernels are
    /// left out. Kept for comparison with the paper.
    Paper,
}

impl SplitModel {
    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            SplitModel::Schedule => "schedule",
            SplitModel::Paper => "paper",
        }
    }
}

/// KVPR's own options.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct KvprOptions {
    /// How the split is chosen.
    pub split: SplitPolicy,
    /// What the automatic split minimises.
    pub split_model: SplitModel,
}

impl Default for KvprOptions {
    fn default() -> Self {
        KvprOptions {
            split: SplitPolicy::Auto,
            split_model: SplitModel::Schedule,
        }
    }
}

/// The split decision of one decode step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepSplit {
    /// Decode step (1-based).
    pub step: u32,
    /// Cached tokens `s'`.
    pub seq_len: u32,
    /// The decision.
    #[serde(flatten)]
    pub split: Split,
}

/// KVPR's decisions: the split of every decode step (a plan's `splits`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Splits(pub Vec<StepSplit>);

impl Details for Splits {
    fn key(&self) -> &'static str {
        "splits"
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(&self.0).expect("splits serialise to JSON")
    }
}

/// KVPR's per-step splits in `decisions` (empty for a plan of another strategy).
pub fn splits(decisions: &crate::types::Decisions) -> &[StepSplit] {
    decisions.get::<Splits>().map_or(&[], |s| &s.0)
}

/// Whether `strategy` keeps the KV cache on the host (KVPR, full transfer); gpu-only keeps it
/// on the GPU.
pub fn kv_on_host(strategy: crate::types::Strategy) -> bool {
    use crate::types::Strategy;
    strategy == Strategy::KVPR || strategy == Strategy::FULL_TRANSFER
}

/// What the offload planner notes.
#[derive(Debug, Clone, PartialEq)]
pub enum OffloadNote {
    /// `offload.weights` auto: the weights did not fit beside the rest and are offloaded.
    WeightsOffloaded {
        /// The weights' bytes.
        weight_bytes: u64,
    },
    /// KVPR with no decode step recomputing: plain KV transfer, no activations kept.
    NoRecompute,
}

impl crate::types::NoteData for OffloadNote {
    fn render(&self, name: &dyn Fn(&str) -> String) -> String {
        match self {
            OffloadNote::WeightsOffloaded { weight_bytes } => format!(
                "weights ({:.1} GiB) do not fit next to the KV buffers and activations: offloaded layer by layer ({} auto)",
                *weight_bytes as f64 / (1u64 << 30) as f64,
                name("offload.weights")
            ),
            OffloadNote::NoRecompute => "no decode step recomputes (l = 0 throughout): KVPR is plain KV transfer here, and no activations are kept for recomputation".into(),
        }
    }
}
