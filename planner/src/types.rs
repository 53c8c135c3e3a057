//! The vocabulary of a plan: strategy, batch shape, options and the plan itself.

use serde::Serialize;

use crate::headinfer::details::{HeadInferDetails, HeadInferOptions};
use crate::offload::kvpr::Split;
use crate::runahead::details::{RunaheadDetails, RunaheadOptions};
use kvplan_vocab::error::{Error, Result};
use kvplan_vocab::host::MemoryKinds;
use kvplan_vocab::memory::MemoryPlan;
use kvplan_vocab::schedule::{HostMemory, Schedule};

/// Most ops a single plan may emit (about 6 GiB of schedule and timeline).
pub const MAX_OPS: u64 = 50_000_000;

/// How the KV cache is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// KV cache on the host; per step, recompute a prefix from activations, transfer the rest.
    Kvpr,
    /// KV cache on the host, all of it transferred every step (FlexGen / HF Accelerate offload).
    FullTransfer,
    /// Everything resident on the GPU.
    GpuOnly,
    /// HeadInfer: KV offloaded per head group, chunked prefill (long contexts).
    HeadInfer,
    /// KV-Runahead: prefill split across devices with a point-to-point KV chain (TTFT).
    Runahead,
}

impl Strategy {
    /// The KV-offload strategies `--compare` runs side by side.
    pub const ALL: [Strategy; 3] = [Strategy::Kvpr, Strategy::FullTransfer, Strategy::GpuOnly];

    /// Every strategy, for parsing and help text.
    pub const NAMES: [Strategy; 5] = [
        Strategy::Kvpr,
        Strategy::FullTransfer,
        Strategy::GpuOnly,
        Strategy::HeadInfer,
        Strategy::Runahead,
    ];

    /// The name used on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Kvpr => "kvpr",
            Strategy::FullTransfer => "full-transfer",
            Strategy::GpuOnly => "gpu-only",
            Strategy::HeadInfer => "headinfer",
            Strategy::Runahead => "runahead",
        }
    }

    /// Parses a command-line name.
    pub fn parse(s: &str) -> Option<Self> {
        Self::NAMES.into_iter().find(|x| x.as_str() == s)
    }

    /// Whether the KV cache lives on the host (KVPR, full transfer).
    pub fn offloads_kv(self) -> bool {
        matches!(self, Strategy::Kvpr | Strategy::FullTransfer)
    }
}

/// Where the weights live.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightsPlacement {
    /// On the GPU when they fit next to everything else, else offloaded.
    Auto,
    /// Resident on the GPU.
    Gpu,
    /// On the host, loaded layer by layer.
    Offload,
}

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

/// The batch being generated: `gpu_batches` GPU batches of `batch` sequences, each with a
/// `prompt`-token prompt, generating `gen` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Shape {
    /// Sequences per GPU batch.
    pub batch: u32,
    /// GPU batches sharing one weight load per layer (1 = row-by-row).
    pub gpu_batches: u32,
    /// Prompt tokens per sequence.
    pub prompt: u32,
    /// Tokens generated per sequence (the first comes from prefill).
    #[serde(rename = "gen")]
    pub gen_len: u32,
}

impl Shape {
    /// The note a plan carries when prompt plus generation passes the model's trained context
    /// (`max_position_embeddings`): simulated anyway, but said.
    pub fn max_position_note(&self, model: &kvplan_vocab::ModelSpec) -> Option<String> {
        (self.max_len() > u64::from(model.max_position)).then(|| {
            format!(
                "prompt + gen = {} exceeds {}'s max_position_embeddings ({}); simulated anyway",
                self.max_len(),
                model.name,
                model.max_position
            )
        })
    }

    /// Checks every size is at least 1.
    pub fn validate(&self) -> Result<()> {
        for (f, v) in [
            ("workload.batch", self.batch),
            ("workload.gpu_batches", self.gpu_batches),
            ("workload.prompt", self.prompt),
            ("workload.gen", self.gen_len),
        ] {
            if v == 0 {
                return Err(Error::invalid(f, v, "must be at least 1"));
            }
        }
        if u64::from(self.batch) * u64::from(self.prompt) > u64::from(u32::MAX) {
            return Err(Error::invalid(
                "workload.batch x workload.prompt",
                u64::from(self.batch) * u64::from(self.prompt),
                "must stay below 2^32 tokens per GPU batch",
            ));
        }
        Ok(())
    }

    /// The preconditions of the planners that run one GPU batch with the weights resident
    /// (HeadInfer, KV-Runahead): a valid shape, one GPU batch, weights not offloaded. `one_batch`
    /// and `resident` say why, in the planner's words.
    pub(crate) fn check_one_batch_resident_weights(
        &self,
        options: &Options,
        one_batch: &str,
        resident: &str,
    ) -> Result<()> {
        self.validate()?;
        if self.gpu_batches != 1 {
            return Err(Error::invalid(
                "workload.gpu_batches",
                self.gpu_batches,
                format!("{one_batch}; use `workload.gpu_batches` 1"),
            ));
        }
        if options.weights == WeightsPlacement::Offload {
            return Err(Error::invalid(
                "offload.weights",
                "offload",
                format!("{resident}; use `offload.weights` auto or gpu"),
            ));
        }
        Ok(())
    }

    /// Sequences in all GPU batches.
    pub fn total_batch(&self) -> u64 {
        u64::from(self.batch) * u64::from(self.gpu_batches)
    }

    /// Longest sequence the KV cache must hold (`prompt + gen`, as FlexGen and KVPR size it).
    pub fn max_len(&self) -> u64 {
        u64::from(self.prompt) + u64::from(self.gen_len)
    }

    /// Decode steps (`gen - 1`: the first token comes from prefill).
    pub fn decode_steps(&self) -> u32 {
        self.gen_len - 1
    }

    /// Cached tokens at decode step `i` (1-based): `prompt + i - 1`.
    pub fn cached_at(&self, step: u32) -> u32 {
        self.prompt + step - 1
    }
}

/// Options of a plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Options {
    /// Where weights live.
    pub weights: WeightsPlacement,
    /// Host memory kind of the offloaded KV cache, activations and weights.
    pub host_memory: HostMemory,
    /// Host memory kind per tensor class (an implementation profile's), replacing
    /// `host_memory` for the offload plans' copies when set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryKinds>,
    /// KVPR split policy.
    pub split: SplitPolicy,
    /// What the automatic KVPR split minimises.
    pub split_model: SplitModel,
    /// HeadInfer options.
    pub headinfer: HeadInferOptions,
    /// KV-Runahead options.
    pub runahead: RunaheadOptions,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            weights: WeightsPlacement::Auto,
            host_memory: HostMemory::Pinned,
            memory: None,
            split: SplitPolicy::Auto,
            split_model: SplitModel::Schedule,
            headinfer: Default::default(),
            runahead: Default::default(),
        }
    }
}

impl Options {
    /// The memory kind of each tensor class: `memory`, or `host_memory` for every class.
    pub fn memory_kinds(&self) -> MemoryKinds {
        self.memory
            .unwrap_or_else(|| MemoryKinds::uniform(self.host_memory))
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

/// What a strategy's planner decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Decisions {
    /// Full transfer and gpu-only: nothing beyond the weight placement.
    None,
    /// KVPR: the split of every decode step.
    Kvpr(Vec<StepSplit>),
    /// HeadInfer: the head group and prefill chunk.
    HeadInfer(HeadInferDetails),
    /// KV-Runahead: the partition and device count.
    Runahead(RunaheadDetails),
}

impl Decisions {
    /// KVPR's per-step splits (empty for other strategies).
    pub fn splits(&self) -> &[StepSplit] {
        match self {
            Decisions::Kvpr(s) => s,
            _ => &[],
        }
    }

    /// HeadInfer's decisions, for a HeadInfer plan.
    pub fn headinfer(&self) -> Option<&HeadInferDetails> {
        match self {
            Decisions::HeadInfer(d) => Some(d),
            _ => None,
        }
    }

    /// KV-Runahead's decisions, for a KV-Runahead plan.
    pub fn runahead(&self) -> Option<&RunaheadDetails> {
        match self {
            Decisions::Runahead(d) => Some(d),
            _ => None,
        }
    }
}

/// Serialises as a map to flatten into [`Plan`]: `splits` always (empty unless KVPR, as scripts
/// read it), `headinfer` / `runahead` for those plans.
impl Serialize for Decisions {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("splits", self.splits())?;
        match self {
            Decisions::HeadInfer(d) => map.serialize_entry("headinfer", d)?,
            Decisions::Runahead(d) => map.serialize_entry("runahead", d)?,
            Decisions::None | Decisions::Kvpr(_) => {}
        }
        map.end()
    }
}

/// Loop order of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    /// One GPU batch goes through all layers (latency workloads).
    RowByRow,
    /// Each layer runs all GPU batches before the next (throughput workloads).
    ColumnByColumn,
}

/// A plan: the decisions, the memory it needs, and the schedule that carries it out.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// Strategy.
    pub strategy: Strategy,
    /// Model name.
    pub model: String,
    /// Hardware profile name.
    pub hardware: String,
    /// The batch.
    pub shape: Shape,
    /// Loop order.
    pub order: Order,
    /// Whether the weights are resident on the GPU.
    pub weights_on_gpu: bool,
    /// Host memory kind of offloaded data.
    pub host_memory: HostMemory,
    /// Peak memory.
    pub memory: MemoryPlan,
    /// What the strategy's planner decided (serialised flat: `splits`, and `headinfer` or
    /// `runahead` when present).
    #[serde(flatten)]
    pub decisions: Decisions,
    /// Things the user should know (auto decisions, warnings).
    pub notes: Vec<String>,
    /// The schedule.
    #[serde(skip)]
    pub schedule: Schedule,
}
