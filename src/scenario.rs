//! Scenarios: what to plan or simulate, from a TOML file, command-line flags, or both (flags
//! override the file). Two stages, as in ripgrep: [`RawScenario`] holds what was written,
//! [`RawScenario::resolve`] checks it once and produces a [`Scenario`] nothing downstream
//! re-checks.

use std::path::{Path, PathBuf};

use kvplan_planner::plan::{Options, Shape, SplitPolicy, Strategy, WeightsPlacement};
use kvplan_planner::schedule::HostMemory;
use kvplan_planner::{DType, HardwareProfile, ModelSpec};
use serde::Deserialize;

use crate::error::CliError;

/// The default workload: the KVPR paper's latency setting (Table 3, first row).
pub const DEFAULT_BATCH: u32 = 64;
/// Default prompt length.
pub const DEFAULT_PROMPT: u32 = 128;
/// Default generation length.
pub const DEFAULT_GEN: u32 = 32;

/// A scenario file as written. Every field is optional: flags may supply it.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawScenario {
    /// Preset name or path to a Hugging Face config.json.
    pub model: Option<String>,
    /// Preset name or path to a profile TOML.
    pub hardware: Option<String>,
    /// `kvpr`, `full-transfer`, `gpu-only`.
    pub strategy: Option<String>,
    /// Serving dtype override.
    pub dtype: Option<String>,
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

/// `[headinfer]` of a scenario file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHeadInfer {
    /// KV heads per offload group (else the fastest simulated that fits).
    pub heads_per_group: Option<i64>,
    /// Prefill chunk tokens (else the fastest simulated that fits).
    pub chunk: Option<i64>,
}

/// `[runahead]` of a scenario file.
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

/// `[workload]` of a scenario file.
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

/// `[offload]` of a scenario file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOffload {
    /// `auto`, `gpu`, `offload`.
    pub weights: Option<String>,
    /// `pinned`, `pageable`.
    pub host_memory: Option<String>,
    /// `auto` or a token count.
    pub split: Option<toml::Value>,
}

/// A checked scenario.
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
}

impl RawScenario {
    /// Reads a scenario file. Relative model/hardware paths in it are taken relative to the
    /// file's directory.
    pub fn from_file(path: &Path) -> Result<Self, CliError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            CliError::input(format!("cannot read scenario {}: {e}", path.display()))
        })?;
        let mut raw: RawScenario = toml::from_str(&text).map_err(|e| {
            let line = e
                .span()
                .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            CliError::input(format!(
                "{}{}: {}",
                path.display(),
                line.map(|l| format!(": line {l}")).unwrap_or_default(),
                e.message().trim().replace('\n', " ")
            ))
        })?;
        let dir = path.parent().unwrap_or(Path::new(""));
        let rebase = |v: &mut Option<String>| {
            if let Some(s) = v.as_mut()
                && (s.contains('/') || s.ends_with(".json") || s.ends_with(".toml"))
                && Path::new(s.as_str()).is_relative()
            {
                *s = dir.join(PathBuf::from(s.as_str())).display().to_string();
            }
        };
        rebase(&mut raw.model);
        rebase(&mut raw.hardware);
        Ok(raw)
    }

    /// Overlays `other` (flags) on `self` (file): any field `other` sets wins.
    pub fn overlay(mut self, other: RawScenario) -> Self {
        fn pick<T>(a: &mut Option<T>, b: Option<T>) {
            if b.is_some() {
                *a = b;
            }
        }
        pick(&mut self.model, other.model);
        pick(&mut self.hardware, other.hardware);
        pick(&mut self.strategy, other.strategy);
        pick(&mut self.dtype, other.dtype);
        pick(&mut self.workload.batch, other.workload.batch);
        pick(&mut self.workload.gpu_batches, other.workload.gpu_batches);
        pick(&mut self.workload.prompt, other.workload.prompt);
        pick(&mut self.workload.gen_len, other.workload.gen_len);
        pick(&mut self.offload.weights, other.offload.weights);
        pick(&mut self.offload.host_memory, other.offload.host_memory);
        pick(&mut self.offload.split, other.offload.split);
        pick(
            &mut self.headinfer.heads_per_group,
            other.headinfer.heads_per_group,
        );
        pick(&mut self.headinfer.chunk, other.headinfer.chunk);
        pick(&mut self.runahead.devices, other.runahead.devices);
        pick(&mut self.runahead.link_gbps, other.runahead.link_gbps);
        pick(
            &mut self.runahead.link_latency_us,
            other.runahead.link_latency_us,
        );
        self
    }

    /// Checks every field and loads the model and hardware.
    pub fn resolve(self) -> Result<Scenario, CliError> {
        let model_name = self.model.ok_or_else(|| {
            CliError::input("--model is required (a preset such as opt-6.7b, or a config.json path; `kvplan models` lists presets)")
        })?;
        let hw_name = self.hardware.ok_or_else(|| {
            CliError::input("--hardware is required (a preset such as a100-40g-pcie4, or a profile TOML path; `kvplan hardware` lists presets)")
        })?;
        let mut model = ModelSpec::resolve(&model_name)?;
        if let Some(d) = &self.dtype {
            let dt = DType::parse(d).ok_or_else(|| {
                CliError::input(format!(
                    "--dtype: unknown dtype '{d}'; use fp16, bf16 or fp32"
                ))
            })?;
            model = model.with_dtype(dt);
        }
        let hardware = HardwareProfile::resolve(&hw_name)?;
        let strategy = match self.strategy.as_deref() {
            None => Strategy::Kvpr,
            Some(s) => Strategy::parse(s).ok_or_else(|| {
                CliError::input(format!(
                    "--strategy: unknown strategy '{s}'; use one of {}",
                    Strategy::NAMES.map(Strategy::as_str).join(", ")
                ))
            })?,
        };
        let size = |field: &str, v: Option<i64>, default: u32| -> Result<u32, CliError> {
            match v {
                None => Ok(default),
                Some(x) if x >= 1 && x <= i64::from(u32::MAX) => Ok(x as u32),
                Some(x) => Err(CliError::input(format!(
                    "{field}: must be a whole number from 1 to {} (got {x})",
                    u32::MAX
                ))),
            }
        };
        let w = &self.workload;
        // Long-context planners size one sequence unless told otherwise.
        let default_batch = match strategy {
            Strategy::HeadInfer | Strategy::Runahead => 1,
            _ => DEFAULT_BATCH,
        };
        let shape = Shape {
            batch: size("--batch (workload.batch)", w.batch, default_batch)?,
            gpu_batches: size("--gpu-batches (workload.gpu_batches)", w.gpu_batches, 1)?,
            prompt: size("--prompt (workload.prompt)", w.prompt, DEFAULT_PROMPT)?,
            // KV-Runahead is about time to first token: prefill only unless asked.
            gen_len: size(
                "--gen (workload.gen)",
                w.gen_len,
                if strategy == Strategy::Runahead {
                    1
                } else {
                    DEFAULT_GEN
                },
            )?,
        };
        shape.validate()?;
        let o = &self.offload;
        let weights = match o.weights.as_deref() {
            None | Some("auto") => WeightsPlacement::Auto,
            Some("gpu") => WeightsPlacement::Gpu,
            Some("offload") => WeightsPlacement::Offload,
            Some(x) => {
                return Err(CliError::input(format!(
                    "--weights (offload.weights): unknown placement '{x}'; use auto, gpu or offload"
                )));
            }
        };
        let host_memory = match o.host_memory.as_deref() {
            None | Some("pinned") => HostMemory::Pinned,
            Some("pageable") => HostMemory::Pageable,
            Some(x) => {
                return Err(CliError::input(format!(
                    "--host-memory (offload.host_memory): unknown kind '{x}'; use pinned or pageable"
                )));
            }
        };
        let split = match &o.split {
            None => SplitPolicy::Auto,
            Some(toml::Value::String(s)) if s == "auto" => SplitPolicy::Auto,
            Some(toml::Value::String(s)) => match s.parse::<i64>() {
                Ok(n) if n >= 0 && n <= i64::from(u32::MAX) => SplitPolicy::Tokens(n as u32),
                _ => {
                    return Err(CliError::input(format!(
                        "--split (offload.split): expected 'auto' or a token count >= 0 (got '{s}')"
                    )));
                }
            },
            Some(toml::Value::Integer(n)) if *n >= 0 && *n <= i64::from(u32::MAX) => {
                SplitPolicy::Tokens(*n as u32)
            }
            Some(v) => {
                return Err(CliError::input(format!(
                    "--split (offload.split): expected 'auto' or a token count >= 0 (got {v})"
                )));
            }
        };
        let opt_size = |field: &str, v: Option<i64>| -> Result<Option<u32>, CliError> {
            match v {
                None => Ok(None),
                Some(x) if x >= 1 && x <= i64::from(u32::MAX) => Ok(Some(x as u32)),
                Some(x) => Err(CliError::input(format!(
                    "{field}: must be a whole number from 1 to {} (got {x})",
                    u32::MAX
                ))),
            }
        };
        let positive =
            |field: &str, v: Option<f64>, zero_ok: bool| -> Result<Option<f64>, CliError> {
                match v {
                    None => Ok(None),
                    Some(x) if x.is_finite() && (x > 0.0 || (zero_ok && x == 0.0)) => Ok(Some(x)),
                    Some(x) => Err(CliError::input(format!(
                        "{field}: must be {} (got {x})",
                        if zero_ok {
                            "zero or more"
                        } else {
                            "a positive number"
                        }
                    ))),
                }
            };
        let headinfer = kvplan_planner::headinfer::HeadInferOptions {
            heads_per_group: opt_size(
                "--heads-per-group (headinfer.heads_per_group)",
                self.headinfer.heads_per_group,
            )?,
            chunk_tokens: opt_size("--chunk (headinfer.chunk)", self.headinfer.chunk)?,
        };
        let r = &self.runahead;
        let runahead = kvplan_planner::runahead::RunaheadOptions {
            devices: match r.devices {
                None => kvplan_planner::runahead::RunaheadOptions::default().devices,
                Some(d) if (1..=64).contains(&d) => d as u32,
                Some(d) => {
                    return Err(CliError::input(format!(
                        "--devices (runahead.devices): must be from 1 to 64 (got {d})"
                    )));
                }
            },
            link_gbps: positive("--link-gbps (runahead.link_gbps)", r.link_gbps, false)?,
            link_latency_us: positive(
                "--link-latency-us (runahead.link_latency_us)",
                r.link_latency_us,
                true,
            )?,
        };
        // --link-gbps / --link-latency-us replace the profile's peer link for every command, so the
        // planner, the simulator and the executor see the same link.
        let hardware = if runahead.link_gbps.is_some() || runahead.link_latency_us.is_some() {
            kvplan_planner::runahead::with_link_override(&hardware, &runahead)?
        } else {
            hardware
        };
        Ok(Scenario {
            model,
            hardware,
            strategy,
            shape,
            options: Options {
                weights,
                host_memory,
                split,
                headinfer,
                runahead,
            },
        })
    }
}
