//! Serving scenarios: the raw form a TOML file or CLI flags fill (`model`, `hardware`, a
//! `[workload]` table and a `[serve]` table), [`RawServeScenario::overlay`] (flags over a file)
//! and one [`RawServeScenario::resolve`] that checks everything and returns a [`ServeScenario`]
//! ready to [`run`](ServeScenario::run).
//!
//! ```toml
//! model = "llama-2-7b"
//! hardware = "a100-80g-sxm"
//! [workload]                 # kvplan_workloads::WorkloadConfig
//! trace = "splitwise_conv.csv"
//! requests = 1000
//! [serve]                    # kvplan_serve::Config fields, each optional
//! scheduler = "chunked"
//! preemption = "swap"
//! block_size = 16
//! ```
//!
//! Errors name scenario fields (`workload.qps`, `serve.block_size`); front ends map them to
//! their own words (flags).

use std::path::PathBuf;

use kvplan_vocab::Progress;
use kvplan_vocab::overlay_fields;
use kvplan_vocab::{HardwareProfile, ModelSpec};
use kvplan_workloads::{Request, RequestStream, WorkloadConfig, WorkloadSpec, generate};
use serde::{Deserialize, Serialize};

use crate::cluster::scenario::{ClusterScenario, RawCluster};
pub use crate::config::RawConfig;
use crate::config::{Config, Preemption, Resolved};
use crate::output::ServeReport;

pub use crate::error::ScenarioError;

/// ServeReport lengths of a synthetic workload that gives none (tokens).
pub const DEFAULT_OUTPUT_LENGTHS: &str = "128";

/// Most requests a capacity search serves at one rate.
pub const MAX_STEADY_REQUESTS: u64 = 1_000_000;

/// A serving scenario as written: a TOML file, or flags.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawServeScenario {
    /// Model preset or config.json path.
    pub model: Option<String>,
    /// Hardware preset or profile TOML path.
    pub hardware: Option<String>,
    /// The requests.
    #[serde(default)]
    pub workload: WorkloadConfig,
    /// Engine settings.
    #[serde(default)]
    pub serve: RawConfig,
    /// Replicas, router, prefill/decode pools.
    #[serde(default, skip_serializing_if = "RawCluster::is_empty")]
    pub cluster: RawCluster,
}

impl RawServeScenario {
    /// Overlays `other` (flags) on `self` (a file): any field `other` sets wins. Choosing
    /// another kind of workload (a trace, a shared-prefix or a conversation workload, or plain
    /// synthetic arrivals with prompt lengths) replaces the file's workload but for `requests`
    /// and `seed`; `qps` and `time_scale` replace each other; the shared-prefix and conversation
    /// tables merge field by field.
    pub fn overlay(mut self, other: RawServeScenario) -> Self {
        overlay_fields!(self, other; model, hardware);
        let (w, o) = (&mut self.workload, other.workload);
        let kind = |c: &WorkloadConfig| {
            if c.trace.is_some() {
                Some(1)
            } else if c.shared_prefix.is_some() {
                Some(2)
            } else if c.conversation.is_some() {
                Some(3)
            } else if c.arrivals.is_some() || c.prompt_lengths.is_some() {
                Some(0)
            } else {
                None
            }
        };
        let switching = match (kind(w), kind(&o)) {
            (Some(a), Some(b)) => a != b && !(a != 1 && b == 0 && o.prompt_lengths.is_none()),
            _ => false,
        };
        if switching {
            *w = WorkloadConfig {
                requests: w.requests,
                seed: w.seed,
                ..Default::default()
            };
        }
        if o.qps.is_some() {
            w.time_scale = None;
        }
        if o.time_scale.is_some() {
            w.qps = None;
        }
        overlay_fields!(w, o; arrivals, qps, cv, prompt_lengths, output_lengths, requests, seed,
            trace, time_scale, start_s);
        if let Some(op) = o.shared_prefix {
            let sp = w.shared_prefix.get_or_insert_with(Default::default);
            overlay_fields!(sp, op; groups, users_per_group, system_prompt_len, question_len);
        }
        if let Some(oc) = o.conversation {
            let c = w.conversation.get_or_insert_with(Default::default);
            overlay_fields!(c, oc; conversations, turns, first_message_len, message_len,
                think_time_s, max_context);
        }
        self.serve = self.serve.overlay(other.serve);
        self.cluster = self.cluster.overlay(other.cluster);
        self
    }

    /// Checks everything: model and hardware, the workload (a synthetic workload without output
    /// lengths gets [`DEFAULT_OUTPUT_LENGTHS`]), the engine settings against the model and GPU
    /// (the weights must leave room for KV blocks).
    pub fn resolve(self) -> Result<ServeScenario, ScenarioError> {
        let whole = ModelSpec::resolve(
            self.model
                .as_deref()
                .ok_or(ScenarioError::Missing { field: "model" })?,
        )?;
        let model = whole
            .sharded_with(
                self.serve.tensor_parallel_size.unwrap_or(1),
                self.serve.enable_expert_parallel.unwrap_or(false),
            )
            .map_err(|e| match e {
                kvplan_vocab::Error::InvalidValue { value, message, .. } => {
                    kvplan_vocab::Error::InvalidValue {
                        field: "serve.tensor_parallel_size".into(),
                        value,
                        message,
                    }
                }
                other => other,
            })?;
        let hardware_name = self
            .hardware
            .as_deref()
            .ok_or(ScenarioError::Missing { field: "hardware" })?;
        let hardware = HardwareProfile::resolve(hardware_name)?;
        let mut w = self.workload;
        if w.trace.is_none() && w.output_lengths.is_none() {
            w.output_lengths = Some(DEFAULT_OUTPUT_LENGTHS.into());
        }
        let workload = w.validate()?;
        let config = self.serve.to_config();
        let resolved = config.validate(&model, &hardware)?;
        let tp = self.serve.tensor_parallel_size.unwrap_or(1);
        let mut notes = swap_space_notes(&config, &hardware, tp)?;
        if config.preemption != Preemption::Recompute && resolved.host_bytes < resolved.block_bytes
        {
            notes.push(Note::NoSwapSpace {
                preemption: config.preemption,
                host_bytes: resolved.host_bytes,
                block_bytes: resolved.block_bytes,
            });
        }
        if config.kv_reload == crate::tier::Reload::Hybrid {
            let m = config.apply(&model, &hardware);
            let (x, kv) = (m.act_bytes_per_token_layer(), m.kv_bytes_per_token_layer());
            if x >= kv {
                notes.push(Note::HybridNoGain {
                    model: m.name.clone(),
                    x_bytes: x,
                    kv_bytes: kv,
                });
            }
        }
        let cluster =
            crate::cluster::scenario::resolve(&self.cluster, &whole, hardware_name, &self.serve)?;
        let model = config.apply(&model, &hardware);
        Ok(ServeScenario {
            model,
            hardware,
            workload,
            seed: w.seed(),
            config,
            resolved,
            notes,
            cluster,
            tensor_parallel_size: tp,
        })
    }
}

/// A checked serving scenario.
#[derive(Debug, Clone)]
pub struct ServeScenario {
    /// The model.
    pub model: ModelSpec,
    /// The GPU and host.
    pub hardware: HardwareProfile,
    /// The requests' description.
    pub workload: WorkloadSpec,
    /// Seed of a synthetic workload.
    pub seed: u64,
    /// Engine settings.
    pub config: Config,
    /// The settings checked, with the block budget.
    pub resolved: Resolved,
    /// Settings that have no effect or are close to a limit, for the front end to show.
    pub notes: Vec<Note>,
    /// Replicas behind a router, or prefill and decode pools (`None`: one engine).
    pub cluster: Option<ClusterScenario>,
    /// Tensor-parallel GPUs of the one engine (`serve.tensor_parallel_size`).
    pub tensor_parallel_size: u32,
}

/// Fraction of host RAM (all tensor-parallel GPUs' swap space together) above which vLLM
/// refuses the swap space: `CacheConfig.verify_with_parallel_config` raises "Too large swap
/// space" (`vllm/config.py` in the 0.4 series, `vllm/config/cache.py` since; the same rule).
pub const SWAP_SPACE_MAX_FRACTION: f64 = 0.7;

/// Fraction of host RAM above which vLLM warns "Possibly too large swap space".
pub const SWAP_SPACE_WARN_FRACTION: f64 = 0.4;

/// A setting that has no effect, or is near a limit: not an error, said beside the result.
/// Each names its scenario field in backquotes (`` `serve.swap_space_gib` ``), so a front end
/// can name its own option instead.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Note {
    /// Swap or hybrid preemption with less swap space than one KV block: nothing can be
    /// swapped, so every preemption recomputes.
    #[error(
        "`serve.swap_space_gib` leaves {host_bytes} bytes of swap space, less than one KV block ({block_bytes} bytes): `serve.preemption` {} cannot swap, so every preemption recomputes",
        preemption.as_str()
    )]
    NoSwapSpace {
        /// The preemption mode asked for.
        preemption: Preemption,
        /// Swap space, bytes.
        host_bytes: u64,
        /// One KV block, bytes.
        block_bytes: u64,
    },
    /// Hybrid reload asked for where it cannot gain: a token's layer input is no smaller than
    /// its K and V (grouped-query attention), so the tier keeps K and V (a plain transfer).
    #[error(
        "`serve.kv_reload` hybrid gains nothing on {model}: a token's layer input ({x_bytes} bytes per layer) is no smaller than its K and V ({kv_bytes} bytes, grouped-query attention), so the CPU tier keeps K and V and reloads them as `transfer` does"
    )]
    HybridNoGain {
        /// The model.
        model: String,
        /// Layer-input bytes per token and layer (one rank).
        x_bytes: u64,
        /// K and V bytes per token and layer (one rank).
        kv_bytes: u64,
    },
    /// A swap space above [`SWAP_SPACE_WARN_FRACTION`] of host RAM (vLLM's warning).
    #[error(
        "`serve.swap_space_gib` {gib} GiB per GPU on {tp} tensor-parallel GPU(s) is {:.0}% of the host's {ram_gib} GiB of RAM (vLLM warns above 40% and refuses above 70%)",
        100.0 * gib * f64::from(*tp) / ram_gib
    )]
    LargeSwapSpace {
        /// Swap space per GPU, GiB.
        gib: f64,
        /// Tensor-parallel GPUs.
        tp: u32,
        /// Host RAM, GiB.
        ram_gib: f64,
    },
}

/// vLLM's check of the swap space against host RAM: an error above
/// [`SWAP_SPACE_MAX_FRACTION`], a note above [`SWAP_SPACE_WARN_FRACTION`].
fn swap_space_notes(
    config: &Config,
    hardware: &HardwareProfile,
    tp: u32,
) -> Result<Vec<Note>, crate::error::Error> {
    let gib = (1u64 << 30) as f64;
    let ram = hardware.host.ram_bytes as f64;
    let usage = config.swap_space_gib * gib * f64::from(tp);
    let show = kvplan_vocab::limits::show;
    if usage > SWAP_SPACE_MAX_FRACTION * ram {
        return Err(crate::error::Error::InvalidConfig {
            field: "swap_space_gib",
            value: show(config.swap_space_gib),
            expect: format!(
                "at most {} GiB per GPU: vLLM refuses a swap space above 70% of host RAM ({} GiB on {}, {tp} tensor-parallel GPU(s))",
                show((SWAP_SPACE_MAX_FRACTION * ram / f64::from(tp) / gib * 100.0).floor() / 100.0),
                show(ram / gib),
                hardware.name,
            )
            .into(),
        });
    }
    Ok(if usage > SWAP_SPACE_WARN_FRACTION * ram {
        vec![Note::LargeSwapSpace {
            gib: config.swap_space_gib,
            tp,
            ram_gib: ram / gib,
        }]
    } else {
        Vec::new()
    })
}

impl ServeScenario {
    /// The trace file replayed, if any.
    pub fn trace(&self) -> Option<&PathBuf> {
        match &self.workload {
            WorkloadSpec::Replay { path, .. } => Some(path),
            WorkloadSpec::Synthetic(_)
            | WorkloadSpec::SharedPrefix(_)
            | WorkloadSpec::Conversation(_) => None,
        }
    }

    /// The requests: the trace replayed, or generated with the seed.
    pub fn requests(&self) -> Result<Vec<Request>, kvplan_workloads::Error> {
        generate(&self.workload, self.seed)
    }

    /// The requests as a stream drawn while they are served (the same requests as
    /// [`requests`](Self::requests)).
    pub fn request_stream(&self) -> Result<RequestStream, kvplan_workloads::Error> {
        kvplan_workloads::stream_requests(&self.workload, self.seed)
    }

    /// Serves `requests` (from [`requests`](Self::requests)).
    pub fn run(&self, requests: &[Request]) -> Result<ServeReport, crate::error::Error> {
        crate::cluster::simulate_cluster(self.plan(), requests)
    }

    /// [`run`](Self::run) with every engine's kernel times multiplied by `scales` (one draw of
    /// an error band, [`crate::bands`]).
    pub fn run_scaled(
        &self,
        requests: &[Request],
        scales: crate::iteration::CostScales,
    ) -> Result<ServeReport, crate::error::Error> {
        let mut plan = self.plan();
        for r in &mut plan.replicas {
            r.timer.set_scales(scales);
        }
        crate::cluster::simulate_cluster(plan, requests)
    }

    /// The cluster to run: the scenario's, or its one engine. Every engine steps one pass at a
    /// time when [`Resolved::step_by_step`] is set on [`ServeScenario::resolved`].
    fn plan(&self) -> crate::cluster::ClusterPlan {
        let mut plan = match &self.cluster {
            Some(c) => c.plan(self.seed, true),
            None => {
                // The settings as resolved, but for what the run records: a caller may change
                // that after resolving ([`Config::record_requests`],
                // [`Config::record_timeseries`]), and nothing that was checked depends on it.
                let mut resolved = self.resolved.clone();
                resolved.config.record_requests = self.config.record_requests;
                resolved.config.record_timeseries = self.config.record_timeseries;
                let timer =
                    crate::setup::timer(&self.model, &self.hardware, &self.config, &resolved);
                let tier = crate::setup::cpu_tier(&resolved, timer.model(), self.tp());
                self.one(timer, resolved, tier)
            }
        };
        for r in &mut plan.replicas {
            r.resolved.step_by_step |= self.resolved.step_by_step;
        }
        plan
    }

    /// Tensor-parallel GPUs of the one engine.
    fn tp(&self) -> u32 {
        self.tensor_parallel_size.max(1)
    }

    /// The plan of the one engine.
    fn one(
        &self,
        timer: crate::iteration::IterationTimer,
        resolved: Resolved,
        tier: Option<crate::tier::CpuTier>,
    ) -> crate::cluster::ClusterPlan {
        crate::cluster::ClusterPlan {
            replicas: vec![crate::cluster::ReplicaPlan {
                name: "r0".into(),
                role: crate::cluster::Role::Colocated,
                hardware: self.hardware.name.clone(),
                tensor_parallel_size: self.tp(),
                timer,
                resolved,
                frontend_s: self.hardware.serving.frontend_us * 1e-6,
                interconnect: self.hardware.interconnect.clone(),
                tier,
            }],
            router: Default::default(),
            staleness_s: 0.0,
            router_latency_s: 0.0,
            weights: Default::default(),
            seed: self.seed,
            transfer: Default::default(),
            moe: self.model.moe.is_some(),
            per_replica: false,
            autoscale: None,
        }
    }

    /// [`run_stream`](Self::run_stream) with every engine's kernel times multiplied by
    /// `scales` (one draw of an error band, [`crate::bands`]).
    pub fn run_stream_scaled(
        &self,
        requests: RequestStream,
        progress: &dyn Progress,
        scales: crate::iteration::CostScales,
    ) -> Result<ServeReport, crate::error::Error> {
        let mut plan = self.plan();
        for r in &mut plan.replicas {
            r.timer.set_scales(scales);
        }
        crate::cluster::simulate_cluster_stream(plan, requests, progress)
    }

    /// Serves a stream of requests (from [`request_stream`](Self::request_stream), or a
    /// measured run's held in memory), telling `progress` how many have been served. The same
    /// report as [`run`](Self::run) on the same requests; without
    /// [`Config::record_requests`] memory follows the requests in flight.
    pub fn run_stream(
        &self,
        requests: RequestStream,
        progress: &dyn Progress,
    ) -> Result<ServeReport, crate::error::Error> {
        crate::cluster::simulate_cluster_stream(self.plan(), requests, progress)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::SchedulerKind;

    /// Llama-2-7B on an A100 80GB serving `workload`: the serving crate's test scenario.
    pub(crate) fn llama_on_a100(workload: WorkloadConfig) -> RawServeScenario {
        RawServeScenario {
            model: Some("llama-2-7b".into()),
            hardware: Some("a100-80g-sxm".into()),
            workload,
            ..Default::default()
        }
    }

    fn raw() -> RawServeScenario {
        llama_on_a100(WorkloadConfig {
            arrivals: Some("poisson".into()),
            qps: Some(2.0),
            prompt_lengths: Some("uniform:64:128".into()),
            requests: Some(8),
            ..Default::default()
        })
    }

    #[test]
    fn resolves_and_runs() {
        let s = raw().resolve().unwrap();
        let reqs = s.requests().unwrap();
        assert_eq!(reqs.len(), 8);
        assert!(reqs.iter().all(|r| r.output_tokens == 128));
        assert_eq!(s.run(&reqs).unwrap().summary.finished, 8);
    }

    #[test]
    fn flags_win_and_switch_the_workload_kind() {
        let mut file = raw();
        file.serve.block_size = Some(32);
        file.serve.scheduler = Some(SchedulerKind::Chunked);
        let flags = RawServeScenario {
            workload: WorkloadConfig {
                trace: Some("t.csv".into()),
                ..Default::default()
            },
            serve: RawConfig {
                block_size: Some(8),
                ..Default::default()
            },
            ..Default::default()
        };
        let m = file.overlay(flags);
        assert_eq!(m.serve.block_size, Some(8));
        assert_eq!(m.serve.scheduler, Some(SchedulerKind::Chunked));
        assert_eq!(m.workload.arrivals, None);
        assert_eq!(m.workload.qps, None);
        assert_eq!(m.workload.requests, Some(8));
        assert_eq!(m.workload.trace, Some("t.csv".into()));
    }

    #[test]
    fn errors_name_the_field() {
        let mut r = raw();
        r.serve.block_size = Some(0);
        let e = r.resolve().unwrap_err().to_string();
        assert!(e.starts_with("block_size:"), "{e}");
        let mut r = raw();
        r.model = None;
        assert!(matches!(
            r.resolve(),
            Err(ScenarioError::Missing { field: "model" })
        ));
    }
}
