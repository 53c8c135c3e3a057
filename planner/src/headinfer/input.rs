//! The capacity question as a front end writes it ([`RawCapacity`]: names and numbers, nothing
//! checked) and its one check ([`RawCapacity::resolve`]) into what [`capacity_report`] takes.
//! Errors ([`CapacityInputError`]) name the field at fault by its path (`model`, `strategy`,
//! `workload.batch`, `headinfer.chunk`, `capacity.host_ram`), never a front end's names.

use kvplan_vocab::error::Error;
use kvplan_vocab::hardware::HardwareProfile;
use kvplan_vocab::model::ModelSpec;
use kvplan_vocab::{DType, Result};

use super::memory::{
    CapacityOptions, CapacityReport, DEFAULT_CHUNK_TOKENS, GIB, MemStrategy, MemoryConfig,
    capacity_report,
};

/// A capacity question as written; each field's doc starts with its path.
#[derive(Debug, Clone, PartialEq)]
pub struct RawCapacity {
    /// `model`: a preset name, or a Hugging Face config.json (or its directory).
    pub model: Option<String>,
    /// `hardware`: a preset name, or a profile TOML.
    pub hardware: Option<String>,
    /// `dtype`: the serving dtype (`fp16`, `bf16`, `fp32`), overriding the model's.
    pub dtype: Option<String>,
    /// `strategy`: the strategies to size, by [`MemStrategy::as_str`] name; empty: all five.
    pub strategies: Vec<String>,
    /// `workload.batch`: sequences per batch.
    pub batch: i64,
    /// `headinfer.chunk`: prefill chunk tokens of the chunked strategies.
    pub chunk: i64,
    /// `headinfer.heads_per_group`: KV heads per HeadInfer offload group.
    pub heads_per_group: i64,
    /// `capacity.host_ram`: host RAM for the offloaded KV cache, GiB; `None`: the profile's.
    pub host_ram_gib: Option<f64>,
    /// `capacity.runtime_reserve`: memory the runtime keeps beyond the model's tensors, GiB
    /// (zero for the bare model).
    pub runtime_reserve_gib: f64,
}

impl Default for RawCapacity {
    /// No model or hardware; all five strategies, one sequence, the paper's 10K-token chunks,
    /// one KV head per group, the profile's host RAM and a 2.65 GiB runtime reserve.
    fn default() -> Self {
        RawCapacity {
            model: None,
            hardware: None,
            dtype: None,
            strategies: Vec::new(),
            batch: 1,
            chunk: i64::from(DEFAULT_CHUNK_TOKENS),
            heads_per_group: 1,
            host_ram_gib: None,
            runtime_reserve_gib: 2.65,
        }
    }
}

/// A checked capacity question: what [`capacity_report`] takes.
#[derive(Debug, Clone)]
pub struct CapacityInput {
    /// The model, with the dtype asked for.
    pub model: ModelSpec,
    /// The hardware profile.
    pub hardware: HardwareProfile,
    /// The strategies to size (empty: all five).
    pub strategies: Vec<MemStrategy>,
    /// Host RAM and the memory model's settings.
    pub options: CapacityOptions,
}

/// Why a [`RawCapacity`] does not resolve: each variant names the field at fault by its path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CapacityInputError {
    /// `model` or `hardware` is absent.
    #[error("{field}: required")]
    Missing {
        /// The field.
        field: &'static str,
    },
    /// A `dtype` or `strategy` that is not one of the accepted names.
    #[error("{field}: unknown {field} '{value}'; use {accepted}")]
    UnknownChoice {
        /// The field.
        field: &'static str,
        /// The name given.
        value: String,
        /// The accepted names in words.
        accepted: String,
    },
    /// A number out of range ([`Error::InvalidValue`], its field a path such as
    /// `workload.batch` or `capacity.host_ram`), or a model or hardware that does not load.
    #[error(transparent)]
    Invalid(#[from] Error),
}

impl RawCapacity {
    /// Checks the question in field order: the model (and its dtype), the hardware, the
    /// strategies, then the numbers: whole numbers of at least 1, a host RAM of more than zero
    /// GiB and a runtime reserve of zero or more.
    pub fn resolve(&self) -> Result<CapacityInput, CapacityInputError> {
        let required =
            |v: &Option<String>, field| v.clone().ok_or(CapacityInputError::Missing { field });
        let mut model = ModelSpec::resolve(&required(&self.model, "model")?)?;
        if let Some(d) = &self.dtype {
            let dt = DType::parse(d).ok_or_else(|| unknown("dtype", d, "fp16, bf16 or fp32"))?;
            model = model.with_dtype(dt);
        }
        let hardware = HardwareProfile::resolve(&required(&self.hardware, "hardware")?)?;
        let all = format!(
            "one of {}",
            MemStrategy::ALL.map(MemStrategy::as_str).join(", ")
        );
        let strategies = self
            .strategies
            .iter()
            .map(|s| MemStrategy::parse(s).ok_or_else(|| unknown("strategy", s, &all)))
            .collect::<Result<Vec<_>, _>>()?;
        let host_ram = self
            .host_ram_gib
            .map(|g| gib_bytes("capacity.host_ram", g, false));
        let options = CapacityOptions {
            host_ram_bytes: host_ram.transpose()?,
            config: MemoryConfig {
                batch: whole("workload.batch", self.batch)?,
                chunk_tokens: whole("headinfer.chunk", self.chunk)?,
                heads_per_group: whole("headinfer.heads_per_group", self.heads_per_group)?,
                runtime_reserve: gib_bytes(
                    "capacity.runtime_reserve",
                    self.runtime_reserve_gib,
                    true,
                )?,
            },
        };
        Ok(CapacityInput {
            model,
            hardware,
            strategies,
            options,
        })
    }
}

impl CapacityInput {
    /// The capacity of each strategy ([`capacity_report`]).
    pub fn report(&self) -> Result<CapacityReport> {
        capacity_report(&self.model, &self.hardware, &self.strategies, &self.options)
    }
}

fn unknown(field: &'static str, value: &str, accepted: &str) -> CapacityInputError {
    CapacityInputError::UnknownChoice {
        field,
        value: value.to_string(),
        accepted: accepted.to_string(),
    }
}

/// A whole number from 1 to `u32::MAX`.
fn whole(field: &str, v: i64) -> Result<u32> {
    let at_least_1 = "must be a whole number of at least 1";
    u32::try_from(v)
        .ok()
        .filter(|&x| x >= 1)
        .ok_or_else(|| Error::invalid(field, v, at_least_1))
}

/// `v` GiB in bytes: more than zero (or zero, where `zero_ok`), and finite.
fn gib_bytes(field: &str, v: f64, zero_ok: bool) -> Result<u64> {
    // Host memory's physical range (more than 0, at most 1 PiB): an absurd size is refused,
    // not clamped to what a byte count holds.
    let range = kvplan_vocab::limits::Range {
        min: 0.0,
        min_exclusive: !zero_ok,
        label: if zero_ok {
            "0 to 1 PiB"
        } else {
            kvplan_vocab::limits::MEMORY.label
        },
        ..kvplan_vocab::limits::MEMORY
    };
    range.check(field, v, GIB, "GiB").map(|b| b as u64)
}
