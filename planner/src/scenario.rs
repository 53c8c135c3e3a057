//! Scenarios: what to plan or simulate, from a TOML file, from a front end's settings (a CLI's
//! flags, a sweep's grid point), or both. Two stages, as in ripgrep: [`RawScenario`] holds what
//! was written, every field optional; [`RawScenario::resolve`] checks it once, applies the
//! strategy defaults and the peer-link override, and produces a [`Scenario`] nothing downstream
//! re-checks.
//!
//! Errors ([`ScenarioError`]) and [`Note`]s name scenario **fields** ([`Field`]:
//! `workload.batch`, `offload.split`); a front end maps them to its own names (a CLI's flags).
//!
//! ```
//! use kvplan_planner::plan::splits;
//! use kvplan_planner::scenario::{RawScenario, RawWorkload};
//!
//! let raw = RawScenario {
//!     model: Some("opt-1.3b".into()),
//!     hardware: Some("a100-40g-pcie4".into()),
//!     workload: RawWorkload { batch: Some(8), gen_len: Some(4), ..Default::default() },
//!     ..Default::default()
//! };
//! let scenario = raw.resolve()?;
//! assert_eq!((scenario.shape.batch, scenario.shape.prompt), (8, 128));
//! let plan = scenario.plan()?;
//! assert_eq!(splits(&plan.decisions).len(), 3);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;

use serde::Deserialize;

use crate::headinfer::HeadInferOptions;
use crate::link::{LinkOverride, with_link_override};
use crate::plan::{
    KvprOptions, Options, Plan, Shape, SplitModel, SplitPolicy, Strategy, WeightsPlacement, plan,
};
use crate::registry;
use crate::runahead::RunaheadOptions;
use crate::strategy::{Defaults, Planner};
use kvplan_vocab::host::Implementation;
use kvplan_vocab::limits;
use kvplan_vocab::schedule::HostMemory;
use kvplan_vocab::{CostModel, DType, HardwareProfile, KvCacheDtype, ModelSpec, Quantization};

/// The default workload: the KVPR paper's latency setting (Table 3, first row).
pub const DEFAULT_BATCH: u32 = Defaults::LATENCY.batch;
/// Default prompt length.
pub const DEFAULT_PROMPT: u32 = 128;
/// Default generation length.
pub const DEFAULT_GEN: u32 = Defaults::LATENCY.gen_len;
/// The most devices a KV-Runahead scenario may offer.
pub const MAX_DEVICES: u32 = 64;

// ---- raw input -------------------------------------------------------------------------------

/// A scenario as written. Every field is optional: another source (flags) may supply it.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScenario {
    /// Preset name or path to a Hugging Face config.json (or a model directory).
    pub model: Option<String>,
    /// Preset name or path to a profile TOML.
    pub hardware: Option<String>,
    /// `kvpr`, `full-transfer`, `gpu-only`, `headinfer`, `runahead`.
    pub strategy: Option<String>,
    /// Serving dtype override.
    pub dtype: Option<String>,
    /// Quantised weights (vLLM's `quantization`: `fp8`, `awq`, `gptq`; `none`).
    pub quantization: Option<String>,
    /// KV cache element type (vLLM's `kv_cache_dtype`: `auto`, `fp8`).
    pub kv_cache_dtype: Option<String>,
    /// The software stack whose host thread and memory kinds are modelled (`eager-hf`,
    /// `flexgen`, `vllm-v0`, `vllm-v1-cudagraph`, `kvplan-exec`); absent: no host thread, one
    /// memory kind (`offload.host_memory`) for every tensor.
    pub implementation: Option<String>,
    /// The batch.
    #[serde(default)]
    pub workload: RawWorkload,
    /// Offload options.
    #[serde(default)]
    pub offload: RawOffload,
    /// HeadInfer options.
    #[serde(default)]
    pub headinfer: RawHeadInfer,
    /// KV-Runahead options.
    #[serde(default)]
    pub runahead: RawRunahead,
}

/// `[workload]` of a scenario.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWorkload {
    /// Sequences per GPU batch.
    pub batch: Option<i64>,
    /// GPU batches per weight load.
    pub gpu_batches: Option<i64>,
    /// Prompt tokens.
    pub prompt: Option<i64>,
    /// Generated tokens.
    #[serde(rename = "gen")]
    pub gen_len: Option<i64>,
}

/// `[offload]` of a scenario.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOffload {
    /// `auto`, `gpu`, `offload`.
    pub weights: Option<String>,
    /// `pinned`, `pageable`.
    pub host_memory: Option<String>,
    /// `"auto"`, or a token count (an integer, or a string of digits as a flag gives it).
    pub split: Option<toml::Value>,
    /// `schedule`, `paper`.
    pub split_model: Option<String>,
}

/// `[headinfer]` of a scenario.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHeadInfer {
    /// KV heads per offload group (else the fastest simulated that fits).
    pub heads_per_group: Option<i64>,
    /// Prefill chunk tokens (else the fastest simulated that fits).
    pub chunk: Option<i64>,
}

/// `[runahead]` of a scenario.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawRunahead {
    /// Devices.
    pub devices: Option<i64>,
    /// Device-to-device bandwidth, GB/s.
    pub link_gbps: Option<f64>,
    /// Device-to-device latency, microseconds.
    pub link_latency_us: Option<f64>,
}

// ---- fields, errors, notes -------------------------------------------------------------------

/// A field of a scenario, named as the scenario file writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Field {
    /// `model`.
    Model,
    /// `hardware`.
    Hardware,
    /// `strategy`.
    Strategy,
    /// `dtype`.
    Dtype,
    /// `quantization`.
    Quantization,
    /// `kv_cache_dtype`.
    KvCacheDtype,
    /// `implementation`.
    Implementation,
    /// `workload.batch`.
    WorkloadBatch,
    /// `workload.gpu_batches`.
    WorkloadGpuBatches,
    /// `workload.prompt`.
    WorkloadPrompt,
    /// `workload.gen`.
    WorkloadGen,
    /// `offload.weights`.
    OffloadWeights,
    /// `offload.host_memory`.
    OffloadHostMemory,
    /// `offload.split`.
    OffloadSplit,
    /// `offload.split_model`.
    OffloadSplitModel,
    /// `headinfer.heads_per_group`.
    HeadInferHeadsPerGroup,
    /// `headinfer.chunk`.
    HeadInferChunk,
    /// `runahead.devices`.
    RunaheadDevices,
    /// `runahead.link_gbps`.
    RunaheadLinkGbps,
    /// `runahead.link_latency_us`.
    RunaheadLinkLatencyUs,
}

impl Field {
    /// Every field, in file order.
    pub const ALL: [Field; 20] = [
        Field::Model,
        Field::Hardware,
        Field::Strategy,
        Field::Dtype,
        Field::Quantization,
        Field::KvCacheDtype,
        Field::Implementation,
        Field::WorkloadBatch,
        Field::WorkloadGpuBatches,
        Field::WorkloadPrompt,
        Field::WorkloadGen,
        Field::OffloadWeights,
        Field::OffloadHostMemory,
        Field::OffloadSplit,
        Field::OffloadSplitModel,
        Field::HeadInferHeadsPerGroup,
        Field::HeadInferChunk,
        Field::RunaheadDevices,
        Field::RunaheadLinkGbps,
        Field::RunaheadLinkLatencyUs,
    ];

    /// The dotted name, e.g. `workload.batch`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Field::Model => "model",
            Field::Hardware => "hardware",
            Field::Strategy => "strategy",
            Field::Dtype => "dtype",
            Field::Quantization => "quantization",
            Field::KvCacheDtype => "kv_cache_dtype",
            Field::Implementation => "implementation",
            Field::WorkloadBatch => "workload.batch",
            Field::WorkloadGpuBatches => "workload.gpu_batches",
            Field::WorkloadPrompt => "workload.prompt",
            Field::WorkloadGen => "workload.gen",
            Field::OffloadWeights => "offload.weights",
            Field::OffloadHostMemory => "offload.host_memory",
            Field::OffloadSplit => "offload.split",
            Field::OffloadSplitModel => "offload.split_model",
            Field::HeadInferHeadsPerGroup => "headinfer.heads_per_group",
            Field::HeadInferChunk => "headinfer.chunk",
            Field::RunaheadDevices => "runahead.devices",
            Field::RunaheadLinkGbps => "runahead.link_gbps",
            Field::RunaheadLinkLatencyUs => "runahead.link_latency_us",
        }
    }
}

impl fmt::Display for Field {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a scenario could not be read or resolved. Each variant names the file or the field.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// A field every scenario needs (`model`, `hardware`) is absent.
    #[error("{field} is required (a preset name, or a file path)")]
    Missing {
        /// The field.
        field: Field,
    },
    /// A name that is not one of the accepted choices.
    #[error("{field}: unknown {what} '{value}'; use {accepted}")]
    UnknownChoice {
        /// The field.
        field: Field,
        /// What the field names (`strategy`, `placement`, `dtype`).
        what: &'static str,
        /// The value given.
        value: String,
        /// The accepted values in words (`auto, gpu or offload`, `one of kvpr, ...`).
        accepted: String,
    },
    /// A value outside its accepted range.
    #[error("{field}: {expected} (got {value})")]
    OutOfRange {
        /// The field.
        field: Field,
        /// The value given, as written (strings quoted).
        value: String,
        /// What is accepted (`must be a whole number from 1 to 4294967295`).
        expected: String,
    },
    /// `workload.batch × workload.prompt` tokens do not fit a 32-bit token index.
    #[error(
        "{} x {}: must stay below 2^32 tokens per GPU batch (got {tokens})",
        Field::WorkloadBatch,
        Field::WorkloadPrompt
    )]
    TokensPerBatch {
        /// `batch * prompt`.
        tokens: u64,
    },
    /// Loading the model or the hardware (or planning, for [`Scenario::plan`]) failed.
    #[error(transparent)]
    Planner(#[from] kvplan_vocab::Error),
}

impl ScenarioError {
    /// True for errors caused by the input (all but planner failures that are not).
    pub fn is_input_error(&self) -> bool {
        match self {
            ScenarioError::Planner(e) => e.is_input_error(),
            _ => true,
        }
    }

    /// The scenario field at fault, if the error names one.
    pub fn field(&self) -> Option<Field> {
        match self {
            ScenarioError::Missing { field }
            | ScenarioError::UnknownChoice { field, .. }
            | ScenarioError::OutOfRange { field, .. } => Some(*field),
            _ => None,
        }
    }
}

/// A field that was accepted but clamped or ignored (not an error).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Note {
    /// A fixed KVPR split longer than the cache at some decode steps: clamped to the cached
    /// length there (the planner recomputes at most what is cached).
    SplitClamped {
        /// The `offload.split` asked for.
        tokens: u32,
        /// Cached tokens at the first decode step.
        first_len: u32,
        /// Cached tokens at the last decode step.
        last_len: u32,
        /// Decode steps (from the first) whose cache is shorter than `tokens`.
        clamped_steps: u32,
        /// Decode steps in all.
        steps: u32,
    },
    /// A fixed KVPR split with no decode step to apply it to (`workload.gen = 1`).
    SplitWithoutDecode {
        /// The `offload.split` asked for.
        tokens: u32,
    },
    /// A setting only another strategy reads.
    Ignored {
        /// The field.
        setting: Field,
        /// The strategy in use.
        strategy: Strategy,
        /// The strategy that reads the setting.
        read_by: Strategy,
    },
}

impl Note {
    /// Whether a fixed split is clamped at every decode step (not only the first few).
    pub fn clamped_everywhere(&self) -> bool {
        matches!(self, Note::SplitClamped { clamped_steps, steps, .. } if clamped_steps == steps)
    }

    /// The note in one line, each field named by `name(path, value)`: the field at `path`
    /// (`offload.split`, `strategy`) with the value it has, where the note gives one. A front
    /// end names fields in its own words this way (the command line by their flags); the
    /// [`Display`](fmt::Display) of a note names them `path = value`.
    pub fn render(&self, name: impl Fn(&str, Option<&dyn fmt::Display>) -> String) -> String {
        let split = |tokens: &u32| name(Field::OffloadSplit.as_str(), Some(tokens));
        match self {
            Note::SplitClamped {
                tokens,
                first_len,
                last_len,
                ..
            } if self.clamped_everywhere() => format!(
                "{} is more than the cached length at every decode step ({first_len}..{last_len} tokens): it is clamped to the cached length at each step, so every step recomputes its whole cache",
                split(tokens)
            ),
            Note::SplitClamped {
                tokens,
                first_len,
                clamped_steps,
                ..
            } => format!(
                "{} is more than the cached length at decode steps 1..{clamped_steps} ({first_len}..{} tokens): it is clamped to the cached length at those steps",
                split(tokens),
                first_len + clamped_steps - 1
            ),
            Note::SplitWithoutDecode { tokens } => format!(
                "{} has no effect with {}: there is no decode step to split",
                split(tokens),
                name(Field::WorkloadGen.as_str(), Some(&1))
            ),
            Note::Ignored {
                setting,
                strategy,
                read_by,
            } => format!(
                "{} is ignored with {}: only {} reads it",
                name(setting.as_str(), None),
                name(Field::Strategy.as_str(), Some(&strategy.as_str())),
                read_by.as_str()
            ),
        }
    }
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(|path, value| match value {
            Some(v) => format!("{path} = {v}"),
            None => path.to_string(),
        }))
    }
}

// ---- the checked scenario --------------------------------------------------------------------

/// A checked scenario: loaded model and hardware (peer link override applied), the strategy,
/// the batch and every planner's options.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The model.
    pub model: ModelSpec,
    /// The hardware.
    pub hardware: HardwareProfile,
    /// The strategy (for single runs).
    pub strategy: Strategy,
    /// The batch.
    pub shape: Shape,
    /// Plan options.
    pub options: Options,
    /// What resolution clamped or ignored (not errors); a front end shows each.
    pub notes: Vec<Note>,
    /// The implementation whose host thread is modelled (`None`: no host thread).
    pub implementation: Option<Implementation>,
}

impl Scenario {
    /// The cost model of the scenario's hardware.
    pub fn cost_model(&self) -> CostModel {
        let cost = CostModel::new(&self.hardware);
        match self.implementation {
            Some(i) => cost.with_host(i.profile_on(&self.hardware)),
            None => cost,
        }
    }

    /// Plans the scenario with its own strategy.
    pub fn plan(&self) -> kvplan_vocab::Result<Plan> {
        self.plan_with(&self.cost_model(), self.strategy)
    }

    /// Plans the scenario with `strategy` on `cost` (the scenario's [`Scenario::cost_model`]).
    pub fn plan_with(&self, cost: &CostModel, strategy: Strategy) -> kvplan_vocab::Result<Plan> {
        plan(
            &self.model,
            &self.hardware,
            cost,
            &self.shape,
            strategy,
            &self.options,
        )
    }
}

impl RawScenario {
    /// Overlays `other` on `self`: any field `other` sets wins (flags over a file).
    pub fn overlay(mut self, other: RawScenario) -> Self {
        kvplan_vocab::overlay_fields!(self, other;
            model, hardware, strategy, dtype, quantization, kv_cache_dtype, implementation,
            workload.batch, workload.gpu_batches, workload.prompt, workload.gen_len,
            offload.weights, offload.host_memory, offload.split, offload.split_model,
            headinfer.heads_per_group, headinfer.chunk,
            runahead.devices, runahead.link_gbps, runahead.link_latency_us,
        );
        self
    }

    /// Checks every field, applies the strategy's defaults, loads the model and hardware and
    /// applies the peer-link override.
    pub fn resolve(self) -> Result<Scenario, ScenarioError> {
        let model_name = self.model.as_ref().ok_or(ScenarioError::Missing {
            field: Field::Model,
        })?;
        let hw_name = self.hardware.as_ref().ok_or(ScenarioError::Missing {
            field: Field::Hardware,
        })?;
        let model = self.model(model_name)?;
        let hardware = HardwareProfile::resolve(hw_name)?;
        let model = self.quantized(model, &hardware)?;
        let strategy = self.strategy()?;
        let shape = self
            .workload
            .shape(registry::planner(strategy).defaults())?;
        let weights = self.offload.weights()?;
        let implementation = self.implementation()?;
        let mut options = self.offload.memory(weights, implementation)?;
        options.strategy.set(self.offload.kvpr()?);
        options.strategy.set(self.headinfer.options()?);
        let (runahead, link) = self.runahead.options()?;
        options.strategy.set(runahead);
        // The link override replaces the profile's peer link once, here: the planner, the
        // simulator and the executor get the same link.
        let hardware = if link.is_some() {
            with_link_override(&hardware, &link)?
        } else {
            hardware
        };
        Ok(Scenario {
            notes: notes(strategy, &shape, &options, &self.given()),
            model,
            hardware,
            strategy,
            shape,
            options,
            implementation,
        })
    }

    /// The model `name` with its serving dtype (`dtype`).
    fn model(&self, name: &str) -> Result<ModelSpec, ScenarioError> {
        let mut model = ModelSpec::resolve(name)?;
        if let Some(d) = &self.dtype {
            let dt = DType::parse(d).ok_or_else(|| ScenarioError::UnknownChoice {
                field: Field::Dtype,
                what: "dtype",
                value: d.clone(),
                accepted: "fp16, bf16 or fp32".into(),
            })?;
            model = model.with_dtype(dt);
        }
        Ok(model)
    }

    /// `model` with its quantisation (`quantization`, checked against `hw`'s GPU) and KV cache
    /// dtype (`kv_cache_dtype`).
    fn quantized(
        &self,
        mut model: ModelSpec,
        hw: &HardwareProfile,
    ) -> Result<ModelSpec, ScenarioError> {
        if let Some(q) = &self.quantization {
            let quantization =
                Quantization::parse(q).ok_or_else(|| ScenarioError::UnknownChoice {
                    field: Field::Quantization,
                    what: "quantization",
                    value: q.clone(),
                    accepted: format!("{} or none", Quantization::NAMES),
                })?;
            if let Some(method) = quantization {
                let cc = hw.gpu.compute_capability;
                method
                    .check_gpu(&hw.name, cc)
                    .map_err(|why| ScenarioError::OutOfRange {
                        field: Field::Quantization,
                        value: format!("\"{q}\""),
                        expected: format!("a method this GPU can run: {why}"),
                    })?;
            }
            model = model.with_quantization(quantization);
        }
        if let Some(k) = &self.kv_cache_dtype {
            let kv = KvCacheDtype::parse_checked(k).map_err(|why| ScenarioError::OutOfRange {
                field: Field::KvCacheDtype,
                value: format!("\"{k}\""),
                expected: why,
            })?;
            if kv == KvCacheDtype::Fp8 && model.dtype == DType::Fp32 {
                return Err(ScenarioError::OutOfRange {
                    field: Field::KvCacheDtype,
                    value: format!("\"{k}\""),
                    expected: "auto for an fp32 model (kvplan models an fp8 cache under fp16 or \
                               bf16 only)"
                        .into(),
                });
            }
            model = model.with_kv_cache_dtype(kv);
        }
        Ok(model)
    }

    /// The strategy (`strategy`; KVPR when absent), any registered one.
    fn strategy(&self) -> Result<Strategy, ScenarioError> {
        match self.strategy.as_deref() {
            None => Ok(Strategy::KVPR),
            Some(s) => registry::parse(s).ok_or_else(|| ScenarioError::UnknownChoice {
                field: Field::Strategy,
                what: "strategy",
                value: s.into(),
                accepted: format!("one of {}", registry::names().join(", ")),
            }),
        }
    }

    /// The implementation whose host thread is modelled (`implementation`), if any.
    fn implementation(&self) -> Result<Option<Implementation>, ScenarioError> {
        self.implementation
            .as_deref()
            .map(|name| {
                Implementation::from_name(name).ok_or_else(|| {
                    unknown(
                        Field::Implementation,
                        "implementation",
                        name,
                        &Implementation::names(),
                    )
                })
            })
            .transpose()
    }

    /// Which strategy-specific settings were given (for the notes on those another strategy
    /// ignores).
    fn given(&self) -> Vec<Field> {
        let (h, r) = (&self.headinfer, &self.runahead);
        [
            (self.offload.split.is_some(), Field::OffloadSplit),
            (h.heads_per_group.is_some(), Field::HeadInferHeadsPerGroup),
            (h.chunk.is_some(), Field::HeadInferChunk),
            (r.devices.is_some(), Field::RunaheadDevices),
            (r.link_gbps.is_some(), Field::RunaheadLinkGbps),
            (r.link_latency_us.is_some(), Field::RunaheadLinkLatencyUs),
        ]
        .into_iter()
        .filter_map(|(set, f)| set.then_some(f))
        .collect()
    }
}

impl RawWorkload {
    /// The batch, with `defaults` (the strategy's) for what is not given.
    fn shape(&self, defaults: Defaults) -> Result<Shape, ScenarioError> {
        let shape = Shape {
            batch: whole(Field::WorkloadBatch, self.batch)?.unwrap_or(defaults.batch),
            gpu_batches: whole(Field::WorkloadGpuBatches, self.gpu_batches)?.unwrap_or(1),
            prompt: whole(Field::WorkloadPrompt, self.prompt)?.unwrap_or(DEFAULT_PROMPT),
            gen_len: whole(Field::WorkloadGen, self.gen_len)?.unwrap_or(defaults.gen_len),
        };
        let tokens = u64::from(shape.batch) * u64::from(shape.prompt);
        if tokens > u64::from(u32::MAX) {
            return Err(ScenarioError::TokensPerBatch { tokens });
        }
        shape.validate()?;
        Ok(shape)
    }
}

impl RawOffload {
    /// Where the weights live (`offload.weights`).
    fn weights(&self) -> Result<WeightsPlacement, ScenarioError> {
        match self.weights.as_deref() {
            None | Some("auto") => Ok(WeightsPlacement::Auto),
            Some("gpu") => Ok(WeightsPlacement::Gpu),
            Some("offload") => Ok(WeightsPlacement::Offload),
            Some(x) => Err(unknown(
                Field::OffloadWeights,
                "placement",
                x,
                "auto, gpu or offload",
            )),
        }
    }

    /// The options every planner reads: `weights`, and the host memory kinds (an
    /// implementation keeps each tensor class where it keeps it, unless `offload.host_memory`
    /// puts every class in one kind; the reported kind is the KV's).
    fn memory(
        &self,
        weights: WeightsPlacement,
        implementation: Option<Implementation>,
    ) -> Result<Options, ScenarioError> {
        let host_memory = match self.host_memory.as_deref() {
            None | Some("pinned") => HostMemory::Pinned,
            Some("pageable") => HostMemory::Pageable,
            Some(x) => {
                return Err(unknown(
                    Field::OffloadHostMemory,
                    "kind",
                    x,
                    "pinned or pageable",
                ));
            }
        };
        let memory = implementation
            .filter(|_| self.host_memory.is_none())
            .map(|i| i.profile().memory);
        Ok(Options {
            weights,
            host_memory: memory.map_or(host_memory, |m| m.kv),
            memory,
            ..Options::default()
        })
    }

    /// KVPR's options: the split and what it minimises.
    fn kvpr(&self) -> Result<KvprOptions, ScenarioError> {
        let split = split_policy(self.split.as_ref())?;
        let split_model = match self.split_model.as_deref() {
            None | Some("schedule") => SplitModel::Schedule,
            Some("paper") => SplitModel::Paper,
            Some(x) => {
                return Err(unknown(
                    Field::OffloadSplitModel,
                    "model",
                    x,
                    "schedule or paper",
                ));
            }
        };
        Ok(KvprOptions { split, split_model })
    }
}

impl RawHeadInfer {
    /// HeadInfer's options: a fixed group size or chunk, else the planner's choice.
    fn options(&self) -> Result<HeadInferOptions, ScenarioError> {
        Ok(HeadInferOptions {
            heads_per_group: whole(Field::HeadInferHeadsPerGroup, self.heads_per_group)?,
            chunk_tokens: whole(Field::HeadInferChunk, self.chunk)?,
        })
    }
}

impl RawRunahead {
    /// KV-Runahead's options and the peer-link override (which stands in for the profile's
    /// `[peer]` fields: the same ranges).
    fn options(&self) -> Result<(RunaheadOptions, LinkOverride), ScenarioError> {
        let devices = match self.devices {
            None => RunaheadOptions::default().devices,
            Some(d) if (1..=i64::from(MAX_DEVICES)).contains(&d) => d as u32,
            Some(d) => {
                return Err(ScenarioError::OutOfRange {
                    field: Field::RunaheadDevices,
                    value: d.to_string(),
                    expected: format!("must be from 1 to {MAX_DEVICES}"),
                });
            }
        };
        let link = LinkOverride {
            gbps: in_range(
                Field::RunaheadLinkGbps,
                self.link_gbps,
                1e9,
                "GB/s",
                limits::BANDWIDTH,
            )?,
            latency_us: in_range(
                Field::RunaheadLinkLatencyUs,
                self.link_latency_us,
                1e-6,
                "us",
                limits::LATENCY,
            )?,
        };
        Ok((RunaheadOptions { devices }, link))
    }
}

fn unknown(field: Field, what: &'static str, value: &str, accepted: &str) -> ScenarioError {
    ScenarioError::UnknownChoice {
        field,
        what,
        value: value.into(),
        accepted: accepted.into(),
    }
}

/// An optional whole number from 1 to `u32::MAX`.
fn whole(field: Field, v: Option<i64>) -> Result<Option<u32>, ScenarioError> {
    match v {
        None => Ok(None),
        Some(x) => u32::try_from(x)
            .ok()
            .filter(|&n| n >= 1)
            .map(Some)
            .ok_or_else(|| ScenarioError::OutOfRange {
                field,
                value: x.to_string(),
                expected: format!("must be a whole number from 1 to {}", u32::MAX),
            }),
    }
}

/// `"auto"`, a token count, or a string of digits (as a flag passes it).
fn split_policy(v: Option<&toml::Value>) -> Result<SplitPolicy, ScenarioError> {
    let bad = |value: String| ScenarioError::OutOfRange {
        field: Field::OffloadSplit,
        value,
        expected: "expected 'auto' or a token count >= 0".into(),
    };
    match v {
        None => Ok(SplitPolicy::Auto),
        Some(toml::Value::String(s)) if s == "auto" => Ok(SplitPolicy::Auto),
        Some(toml::Value::String(s)) => s
            .parse::<i64>()
            .ok()
            .and_then(|n| u32::try_from(n).ok())
            .map(SplitPolicy::Tokens)
            .ok_or_else(|| bad(format!("'{s}'"))),
        Some(toml::Value::Integer(n)) => u32::try_from(*n)
            .map(SplitPolicy::Tokens)
            .map_err(|_| bad(n.to_string())),
        Some(v) => Err(bad(v.to_string())),
    }
}

/// An optional number whose `scale`-fold lies in `range` (a peer-link override).
fn in_range(
    field: Field,
    v: Option<f64>,
    scale: f64,
    unit: &str,
    range: limits::Range,
) -> Result<Option<f64>, ScenarioError> {
    match v {
        None => Ok(None),
        Some(x) if range.contains(x * scale) => Ok(Some(x)),
        Some(x) => Err(ScenarioError::OutOfRange {
            field,
            value: limits::show(x),
            expected: range.describe(scale, unit),
        }),
    }
}

/// The notes for settings `strategy` clamps or ignores (`given`: the strategy-specific fields
/// the scenario sets).
fn notes(strategy: Strategy, shape: &Shape, options: &Options, given: &[Field]) -> Vec<Note> {
    let reads = |p: &dyn Planner, f: Field| p.reads().contains(&f.as_str());
    let mut notes: Vec<Note> = given
        .iter()
        .filter(|&&f| !reads(registry::planner(strategy), f))
        .filter_map(|&setting| {
            let read_by = registry::all().into_iter().find(|p| reads(*p, setting))?;
            Some(Note::Ignored {
                setting,
                strategy,
                read_by: read_by.strategy(),
            })
        })
        .collect();
    let fixed_split = match options.get::<KvprOptions>().split {
        SplitPolicy::Tokens(n) => Some(n),
        SplitPolicy::Auto => None,
    };
    if let (Some(tokens), Strategy::KVPR) = (fixed_split, strategy) {
        let steps = shape.decode_steps();
        if steps == 0 {
            notes.push(Note::SplitWithoutDecode { tokens });
        } else if tokens > shape.cached_at(1) {
            // Cached length at step i is prompt + i - 1: shorter than `tokens` for
            // i <= tokens - prompt.
            notes.push(Note::SplitClamped {
                tokens,
                first_len: shape.cached_at(1),
                last_len: shape.cached_at(steps),
                clamped_steps: (tokens - shape.prompt).min(steps),
                steps,
            });
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(prompt: u32, gen_len: u32) -> Shape {
        Shape {
            batch: 1,
            gpu_batches: 1,
            prompt,
            gen_len,
        }
    }

    fn split(tokens: u32) -> Options {
        Options::default().with(KvprOptions {
            split: SplitPolicy::Tokens(tokens),
            ..KvprOptions::default()
        })
    }

    const SPLIT: &[Field] = &[Field::OffloadSplit];

    #[test]
    fn split_notes_count_the_clamped_steps() {
        // Cached lengths 128..=130 over 3 decode steps.
        let s = shape(128, 4);
        assert!(notes(Strategy::KVPR, &s, &split(128), SPLIT).is_empty());
        assert!(notes(Strategy::KVPR, &s, &Options::default(), &[]).is_empty());
        assert_eq!(
            notes(Strategy::KVPR, &s, &split(130), SPLIT),
            [Note::SplitClamped {
                tokens: 130,
                first_len: 128,
                last_len: 130,
                clamped_steps: 2,
                steps: 3
            }]
        );
        let all = notes(Strategy::KVPR, &s, &split(100_000), SPLIT);
        assert_eq!(
            all,
            [Note::SplitClamped {
                tokens: 100_000,
                first_len: 128,
                last_len: 130,
                clamped_steps: 3,
                steps: 3
            }]
        );
        assert!(
            all[0]
                .to_string()
                .contains("every decode step (128..130 tokens)")
        );
        assert_eq!(
            notes(Strategy::KVPR, &shape(128, 1), &split(5), SPLIT),
            [Note::SplitWithoutDecode { tokens: 5 }]
        );
    }

    #[test]
    fn settings_of_other_strategies_are_noted_as_ignored() {
        let s = shape(128, 4);
        let n = notes(Strategy::GPU_ONLY, &s, &split(100_000), SPLIT);
        // Ignored, so not also clamped.
        assert_eq!(
            n,
            [Note::Ignored {
                setting: Field::OffloadSplit,
                strategy: Strategy::GPU_ONLY,
                read_by: Strategy::KVPR
            }]
        );
        // Set: a chunk (HeadInfer's), devices and both link fields (KV-Runahead's).
        let given = [
            Field::HeadInferChunk,
            Field::RunaheadDevices,
            Field::RunaheadLinkGbps,
            Field::RunaheadLinkLatencyUs,
        ];
        let o = Options::default();
        let n = notes(Strategy::FULL_TRANSFER, &s, &o, &given);
        assert_eq!(n.len(), 4, "{n:?}");
        assert!(n.iter().all(|x| matches!(x, Note::Ignored { .. })));
        assert!(notes(Strategy::RUNAHEAD, &s, &o, &given[1..]).is_empty());
        let n = notes(Strategy::HEADINFER, &s, &o, &given[1..]);
        assert_eq!(n.len(), 3);
        assert!(
            n.iter().all(
                |x| matches!(x, Note::Ignored { read_by, .. } if *read_by == Strategy::RUNAHEAD)
            )
        );
        assert_eq!(notes(Strategy::HEADINFER, &s, &o, &given[..1]), []);
    }

    fn raw() -> RawScenario {
        RawScenario {
            model: Some("opt-125m".into()),
            hardware: Some("t4".into()),
            ..RawScenario::default()
        }
    }

    #[test]
    fn errors_name_fields() {
        let err = |r: RawScenario| r.resolve().unwrap_err();
        let mut r = raw();
        r.workload.batch = Some(0);
        let e = err(r);
        assert_eq!(e.field(), Some(Field::WorkloadBatch));
        assert_eq!(
            e.to_string(),
            "workload.batch: must be a whole number from 1 to 4294967295 (got 0)"
        );
        let mut r = raw();
        r.offload.split = Some(toml::Value::String("-3".into()));
        assert_eq!(
            err(r).to_string(),
            "offload.split: expected 'auto' or a token count >= 0 (got '-3')"
        );
        let mut r = raw();
        r.offload.weights = Some("cpu".into());
        assert_eq!(
            err(r).to_string(),
            "offload.weights: unknown placement 'cpu'; use auto, gpu or offload"
        );
        let mut r = raw();
        r.runahead.devices = Some(65);
        assert_eq!(err(r).field(), Some(Field::RunaheadDevices));
        let mut r = raw();
        r.runahead.link_gbps = Some(1e-300);
        assert_eq!(err(r).field(), Some(Field::RunaheadLinkGbps));
        let mut r = raw();
        r.workload.batch = Some(1 << 20);
        r.workload.prompt = Some(1 << 20);
        assert!(matches!(err(r), ScenarioError::TokensPerBatch { tokens } if tokens == 1 << 40));
        let e = err(RawScenario::default());
        assert!(matches!(
            e,
            ScenarioError::Missing {
                field: Field::Model
            }
        ));
        assert!(e.is_input_error());
    }

    #[test]
    fn strategy_defaults_and_overlay() {
        let sc = raw().resolve().unwrap();
        assert_eq!(sc.strategy, Strategy::KVPR);
        assert_eq!(
            (sc.shape.batch, sc.shape.prompt, sc.shape.gen_len),
            (DEFAULT_BATCH, DEFAULT_PROMPT, DEFAULT_GEN)
        );
        let flags = RawScenario {
            strategy: Some("runahead".into()),
            workload: RawWorkload {
                prompt: Some(4096),
                ..RawWorkload::default()
            },
            ..RawScenario::default()
        };
        let mut file = raw();
        file.workload.prompt = Some(64);
        file.runahead.link_gbps = Some(10.0);
        let sc = file.overlay(flags).resolve().unwrap();
        assert_eq!(sc.strategy, Strategy::RUNAHEAD);
        assert_eq!(
            (sc.shape.batch, sc.shape.prompt, sc.shape.gen_len),
            (1, 4096, 1)
        );
        // The peer link is overridden once, in the resolved hardware.
        assert_eq!(sc.hardware.peer.bandwidth, 10e9);
        assert!(sc.notes.is_empty());
    }
}
