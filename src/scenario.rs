//! Scenarios: what to plan or simulate, from a TOML file, command-line flags, or both (flags
//! override the file). Two stages, as in ripgrep: [`RawScenario`] holds what was written,
//! [`RawScenario::resolve`] checks it once and produces a [`Scenario`] nothing downstream
//! re-checks.

use std::path::{Path, PathBuf};

use kvplan_planner::hardware::limits;
use kvplan_planner::plan::{Options, Shape, SplitModel, SplitPolicy, Strategy, WeightsPlacement};
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
    pub split_model: Option<String>,
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
    /// What resolution clamped or ignored (not errors); the CLI prints each on stderr.
    pub notes: Vec<Note>,
}

/// A flag or scenario field that was accepted but clamped or ignored.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Note {
    /// A fixed KVPR split longer than the cache at some decode steps: clamped to the cached
    /// length there (the planner recomputes at most what is cached).
    SplitClamped {
        /// The `--split` asked for.
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
    /// A fixed KVPR split with no decode step to apply it to (`--gen 1`).
    SplitWithoutDecode {
        /// The `--split` asked for.
        tokens: u32,
    },
    /// A setting only another strategy reads.
    Ignored {
        /// The flag and scenario field, e.g. `--split (offload.split)`.
        setting: &'static str,
        /// The strategy in use.
        strategy: Strategy,
        /// The strategy that reads the setting.
        read_by: Strategy,
    },
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Note::SplitClamped {
                tokens,
                first_len,
                last_len,
                clamped_steps,
                steps,
            } if clamped_steps == steps => write!(
                f,
                "--split {tokens} (offload.split) is more than the cached length at every decode step ({first_len}..{last_len} tokens): it is clamped to the cached length at each step, so every step recomputes its whole cache"
            ),
            Note::SplitClamped {
                tokens,
                first_len,
                clamped_steps,
                ..
            } => write!(
                f,
                "--split {tokens} (offload.split) is more than the cached length at decode steps 1..{clamped_steps} ({first_len}..{} tokens): it is clamped to the cached length at those steps",
                first_len + clamped_steps - 1
            ),
            Note::SplitWithoutDecode { tokens } => write!(
                f,
                "--split {tokens} (offload.split) has no effect with --gen 1: there is no decode step to split"
            ),
            Note::Ignored {
                setting,
                strategy,
                read_by,
            } => write!(
                f,
                "{setting} is ignored with --strategy {}: only {} reads it",
                strategy.as_str(),
                read_by.as_str()
            ),
        }
    }
}

/// The notes for settings `strategy` clamps or ignores (`devices_set`: `--devices` was given;
/// its resolved value always holds the default).
fn notes(
    strategy: Strategy,
    shape: &Shape,
    options: &Options,
    devices_set: bool,
    link: &kvplan_planner::runahead::LinkOverride,
) -> Vec<Note> {
    let mut notes = Vec::new();
    let mut ignored = |set: bool, setting: &'static str, read_by: Strategy| {
        if set && strategy != read_by {
            notes.push(Note::Ignored {
                setting,
                strategy,
                read_by,
            });
        }
    };
    let fixed_split = match options.split {
        SplitPolicy::Tokens(n) => Some(n),
        SplitPolicy::Auto => None,
    };
    ignored(
        fixed_split.is_some(),
        "--split (offload.split)",
        Strategy::Kvpr,
    );
    let h = &options.headinfer;
    ignored(
        h.heads_per_group.is_some(),
        "--heads-per-group (headinfer.heads_per_group)",
        Strategy::HeadInfer,
    );
    ignored(
        h.chunk_tokens.is_some(),
        "--chunk (headinfer.chunk)",
        Strategy::HeadInfer,
    );
    ignored(
        devices_set,
        "--devices (runahead.devices)",
        Strategy::Runahead,
    );
    ignored(
        link.gbps.is_some(),
        "--link-gbps (runahead.link_gbps)",
        Strategy::Runahead,
    );
    ignored(
        link.latency_us.is_some(),
        "--link-latency-us (runahead.link_latency_us)",
        Strategy::Runahead,
    );
    if let (Some(tokens), Strategy::Kvpr) = (fixed_split, strategy) {
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
        pick(&mut self.offload.split_model, other.offload.split_model);
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
        let split_model = match o.split_model.as_deref() {
            None | Some("schedule") => SplitModel::Schedule,
            Some("paper") => SplitModel::Paper,
            Some(x) => {
                return Err(CliError::input(format!(
                    "--split-model (offload.split_model): unknown model '{x}'; use schedule or paper"
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
        // The peer-link overrides stand in for the profile's [peer] fields: the same ranges.
        let in_range = |field: &str,
                        v: Option<f64>,
                        scale: f64,
                        unit: &str,
                        range: limits::Range|
         -> Result<Option<f64>, CliError> {
            match v {
                None => Ok(None),
                Some(x) if range.contains(x * scale) => Ok(Some(x)),
                Some(x) => Err(CliError::input(format!(
                    "{field}: {} (got {})",
                    range.describe(scale, unit),
                    limits::show(x)
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
        };
        let link = kvplan_planner::runahead::LinkOverride {
            gbps: in_range(
                "--link-gbps (runahead.link_gbps)",
                r.link_gbps,
                1e9,
                "GB/s",
                limits::BANDWIDTH,
            )?,
            latency_us: in_range(
                "--link-latency-us (runahead.link_latency_us)",
                r.link_latency_us,
                1e-6,
                "us",
                limits::LATENCY,
            )?,
        };
        // --link-gbps / --link-latency-us replace the profile's peer link once, here, for every
        // command: the planner, the simulator and the executor get the same link.
        let hardware = if link.is_some() {
            kvplan_planner::runahead::with_link_override(&hardware, &link)?
        } else {
            hardware
        };
        let options = Options {
            weights,
            host_memory,
            split,
            split_model,
            headinfer,
            runahead,
        };
        Ok(Scenario {
            notes: notes(
                strategy,
                &shape,
                &options,
                self.runahead.devices.is_some(),
                &link,
            ),
            model,
            hardware,
            strategy,
            shape,
            options,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvplan_planner::runahead::LinkOverride;

    const NO_LINK: LinkOverride = LinkOverride {
        gbps: None,
        latency_us: None,
    };

    fn shape(prompt: u32, gen_len: u32) -> Shape {
        Shape {
            batch: 1,
            gpu_batches: 1,
            prompt,
            gen_len,
        }
    }

    fn split(tokens: u32) -> Options {
        Options {
            split: SplitPolicy::Tokens(tokens),
            ..Options::default()
        }
    }

    #[test]
    fn split_notes_count_the_clamped_steps() {
        // Cached lengths 128..=130 over 3 decode steps.
        let s = shape(128, 4);
        assert!(notes(Strategy::Kvpr, &s, &split(128), false, &NO_LINK).is_empty());
        assert!(notes(Strategy::Kvpr, &s, &Options::default(), false, &NO_LINK).is_empty());
        assert_eq!(
            notes(Strategy::Kvpr, &s, &split(130), false, &NO_LINK),
            [Note::SplitClamped {
                tokens: 130,
                first_len: 128,
                last_len: 130,
                clamped_steps: 2,
                steps: 3
            }]
        );
        let all = notes(Strategy::Kvpr, &s, &split(100_000), false, &NO_LINK);
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
            notes(Strategy::Kvpr, &shape(128, 1), &split(5), false, &NO_LINK),
            [Note::SplitWithoutDecode { tokens: 5 }]
        );
    }

    #[test]
    fn settings_of_other_strategies_are_noted_as_ignored() {
        let s = shape(128, 4);
        let n = notes(Strategy::GpuOnly, &s, &split(100_000), false, &NO_LINK);
        // Ignored, so not also clamped.
        assert_eq!(
            n,
            [Note::Ignored {
                setting: "--split (offload.split)",
                strategy: Strategy::GpuOnly,
                read_by: Strategy::Kvpr
            }]
        );
        let mut o = Options::default();
        let link = LinkOverride {
            gbps: Some(10.0),
            latency_us: Some(5.0),
        };
        o.headinfer.chunk_tokens = Some(64);
        let n = notes(Strategy::FullTransfer, &s, &o, true, &link);
        assert_eq!(n.len(), 4, "{n:?}");
        assert!(n.iter().all(|x| matches!(x, Note::Ignored { .. })));
        assert!(
            notes(
                Strategy::Runahead,
                &s,
                &{
                    let mut o = o.clone();
                    o.headinfer.chunk_tokens = None;
                    o
                },
                true,
                &link
            )
            .is_empty()
        );
        assert_eq!(notes(Strategy::HeadInfer, &s, &o, false, &link).len(), 2);
    }
}
