//! The vocabulary of a plan: strategy, batch shape, options and the plan itself.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;

use kvplan_vocab::error::{Error, Result};
use kvplan_vocab::host::MemoryKinds;
use kvplan_vocab::memory::MemoryPlan;
use kvplan_vocab::schedule::{HostMemory, Schedule};

/// Most ops a single plan may emit (about 6 GiB of schedule and timeline).
pub const MAX_OPS: u64 = 50_000_000;

/// A strategy: how the KV cache is handled, by the name its [`Planner`](crate::strategy::Planner)
/// is registered under ([`crate::registry`]). A small copyable handle: the built-in strategies are
/// its constants, and [`registry::find`](crate::registry::find) gives the handle of any
/// registered one.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Strategy(&'static str);

impl Strategy {
    /// KV cache on the host; per step, recompute a prefix from activations, transfer the rest.
    pub const KVPR: Strategy = Strategy("kvpr");
    /// KV cache on the host, all of it transferred every step (FlexGen / HF Accelerate offload).
    pub const FULL_TRANSFER: Strategy = Strategy("full-transfer");
    /// Everything resident on the GPU.
    pub const GPU_ONLY: Strategy = Strategy("gpu-only");
    /// HeadInfer: KV offloaded per head group, chunked prefill (long contexts).
    pub const HEADINFER: Strategy = Strategy("headinfer");
    /// KV-Runahead: prefill split across devices with a point-to-point KV chain (TTFT).
    pub const RUNAHEAD: Strategy = Strategy("runahead");

    /// The handle of a strategy named `name` (the registry makes these; see
    /// [`registry::find`](crate::registry::find) to look a name up).
    pub(crate) const fn named(name: &'static str) -> Self {
        Strategy(name)
    }

    /// The name used on the command line and in scenario files.
    pub fn as_str(self) -> &'static str {
        self.0
    }
}

impl fmt::Debug for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl Serialize for Strategy {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
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
    pub fn max_position_note(&self, model: &kvplan_vocab::ModelSpec) -> Option<PlanNote> {
        (self.max_len() > u64::from(model.max_position)).then(|| {
            PlanNote::new(PastTrainedLength {
                tokens: self.max_len(),
                model: model.name.clone(),
                max_position: model.max_position,
            })
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

/// Options of a plan: where the weights and the host's copies live, which every planner reads,
/// and each strategy's own options ([`StrategyOptions`]), which only that strategy reads.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where weights live.
    pub weights: WeightsPlacement,
    /// Host memory kind of the offloaded KV cache, activations and weights.
    pub host_memory: HostMemory,
    /// Host memory kind per tensor class (an implementation profile's), replacing
    /// `host_memory` for the offload plans' copies when set.
    pub memory: Option<MemoryKinds>,
    /// Each strategy's own options, by type (KVPR's split, HeadInfer's group and chunk,
    /// KV-Runahead's devices): a strategy reads its own with [`StrategyOptions::get`].
    pub strategy: StrategyOptions,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            weights: WeightsPlacement::Auto,
            host_memory: HostMemory::Pinned,
            memory: None,
            strategy: StrategyOptions::default(),
        }
    }
}

impl Options {
    /// The memory kind of each tensor class: `memory`, or `host_memory` for every class.
    pub fn memory_kinds(&self) -> MemoryKinds {
        self.memory
            .unwrap_or_else(|| MemoryKinds::uniform(self.host_memory))
    }

    /// These options with a strategy's own options set to `value` (see [`StrategyOptions`]).
    pub fn with<T: Any + fmt::Debug + Clone + Send + Sync>(mut self, value: T) -> Self {
        self.strategy.set(value);
        self
    }

    /// A strategy's own options of type `T`: those set, or `T`'s default.
    pub fn get<T: Any + Default + Clone>(&self) -> T {
        self.strategy.get::<T>()
    }
}

/// Each strategy's own options, one value per type: the strategy's folder defines the type
/// (`HeadInferOptions`, `RunaheadOptions`, `KvprOptions`) and reads it back; the plan types know
/// none of them. A type never set reads as its `Default`.
#[derive(Clone, Default)]
pub struct StrategyOptions(Vec<Arc<dyn StrategyOption>>);

/// What a strategy's options type is: any cloneable, printable value.
pub trait StrategyOption: Any + fmt::Debug + Send + Sync {}
impl<T: Any + fmt::Debug + Send + Sync> StrategyOption for T {}

impl StrategyOptions {
    /// Sets the options of type `T` (replacing any set before).
    pub fn set<T: Any + fmt::Debug + Clone + Send + Sync>(&mut self, value: T) {
        self.0.retain(|v| !(v.as_ref() as &dyn Any).is::<T>());
        self.0.push(Arc::new(value));
    }

    /// The options of type `T`, if set.
    pub fn find<T: Any>(&self) -> Option<&T> {
        self.0
            .iter()
            .find_map(|v| (v.as_ref() as &dyn Any).downcast_ref::<T>())
    }

    /// The options of type `T`: those set, or `T`'s default.
    pub fn get<T: Any + Default + Clone>(&self) -> T {
        self.find::<T>().cloned().unwrap_or_default()
    }
}

impl fmt::Debug for StrategyOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.0.iter()).finish()
    }
}

/// What a strategy's planner decided, as data its folder defines (KVPR's per-step splits,
/// HeadInfer's group and chunk, KV-Runahead's partition): the plan types know none of them.
/// A front end reads a strategy's decisions back with [`Decisions::get`].
pub trait Details: Any + fmt::Debug + Send + Sync {
    /// The key the decisions take in a plan's JSON (`splits`, `headinfer`, `runahead`).
    fn key(&self) -> &'static str;
    /// The decisions as JSON.
    fn to_json(&self) -> serde_json::Value;
}

/// A plan's decisions: nothing beyond the weight placement (full transfer, gpu-only), or its
/// strategy's [`Details`].
#[derive(Debug, Clone, Default)]
pub struct Decisions(Option<Arc<dyn Details>>);

impl Decisions {
    /// No decisions beyond the weight placement.
    pub fn none() -> Self {
        Decisions(None)
    }

    /// The decisions `details`.
    pub fn new(details: impl Details) -> Self {
        Decisions(Some(Arc::new(details)))
    }

    /// The decisions, if they are a `T`.
    pub fn get<T: Details>(&self) -> Option<&T> {
        self.0
            .as_deref()
            .and_then(|d| (d as &dyn Any).downcast_ref::<T>())
    }

    /// The decisions, if any.
    pub fn details(&self) -> Option<&dyn Details> {
        self.0.as_deref()
    }
}

/// Serialises as a map to flatten into [`Plan`]: `splits` always (empty unless the strategy's
/// decisions are its splits, as scripts read it), and the decisions under their key.
impl Serialize for Decisions {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        let details = self.details().map(|d| (d.key(), d.to_json()));
        if !matches!(details, Some(("splits", _))) {
            map.serialize_entry("splits", &[] as &[()])?;
        }
        if let Some((key, value)) = &details {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// What a note on a plan is: data its strategy's folder defines (which decision, which limit
/// bound, by how much), worded by [`NoteData::render`] with each scenario field named as the
/// front end names it.
pub trait NoteData: Any + fmt::Debug + Send + Sync {
    /// The note in one line, each scenario field (`offload.weights`) named by `name` (a command
    /// line gives the option that sets it).
    fn render(&self, name: &dyn Fn(&str) -> String) -> String;
}

/// A note on a plan: a decision the user should know of, or a warning. [`PlanNote::get`] reads
/// its data back; `Display` (and JSON) word it with each field as `` `offload.weights` ``, and a
/// front end words it in its own names with [`PlanNote::worded`].
#[derive(Debug, Clone)]
pub struct PlanNote(Arc<dyn NoteData>);

impl PlanNote {
    /// The note of `data`.
    pub fn new(data: impl NoteData) -> Self {
        PlanNote(Arc::new(data))
    }

    /// A note that is only text (already worded).
    pub fn text(text: impl Into<String>) -> Self {
        PlanNote::new(Worded(text.into()))
    }

    /// The note's data, if it is a `T`.
    pub fn get<T: NoteData>(&self) -> Option<&T> {
        (self.0.as_ref() as &dyn Any).downcast_ref::<T>()
    }

    /// The note in one line, each field named by `name`.
    pub fn render(&self, name: &dyn Fn(&str) -> String) -> String {
        self.0.render(name)
    }

    /// The note worded once with `name`: what a front end hands its reports.
    pub fn worded(&self, name: &dyn Fn(&str) -> String) -> Self {
        PlanNote::text(self.render(name))
    }
}

/// A note already worded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worded(pub String);

impl NoteData for Worded {
    fn render(&self, _: &dyn Fn(&str) -> String) -> String {
        self.0.clone()
    }
}

impl fmt::Display for PlanNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(&|field| format!("`{field}`")))
    }
}

/// Two notes are equal when they read the same.
impl PartialEq for PlanNote {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Serialize for PlanNote {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A shape longer than the model was trained for: planned anyway, but said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PastTrainedLength {
    /// `prompt + gen`.
    pub tokens: u64,
    /// The model.
    pub model: String,
    /// Its `max_position_embeddings`.
    pub max_position: u32,
}

impl NoteData for PastTrainedLength {
    fn render(&self, _: &dyn Fn(&str) -> String) -> String {
        format!(
            "prompt + gen = {} exceeds {}'s max_position_embeddings ({}); simulated anyway",
            self.tokens, self.model, self.max_position
        )
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
    pub notes: Vec<PlanNote>,
    /// The schedule.
    #[serde(skip)]
    pub schedule: Schedule,
}
