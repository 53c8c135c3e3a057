//! A serving scenario's `[cluster]` table: how many replicas, of what, behind which router,
//! and whether prefill and decode run in pools of their own.
//!
//! ```toml
//! [cluster]
//! data_parallel_size = 4          # vLLM's data_parallel_size (alias `replicas`)
//! router = "prefix-aware"         # see kvplan_serve::router
//! router_staleness_s = 0.0        # the router sees load and KV events this much later
//! router_latency_us = 0.0         # the router's time per request
//! # or replicas that differ, each with its own GPU and [serve] settings:
//! # [[cluster.replica]]
//! # count = 2
//! # hardware = "a100-80g-sxm"
//! # serve = { tensor_parallel_size = 2, quantization = "fp8" }
//! # or prefill/decode disaggregation:
//! # prefill_replicas = 2
//! # decode_replicas = 4
//! # kv_transfer = "pull"          # or "layerwise"
//! # [cluster.prefill]             # the prefill pool's GPU and settings
//! # hardware = "h100-sxm"
//! # serve = { tensor_parallel_size = 2 }
//! # [cluster.interconnect]        # overrides the profile's [interconnect]
//! # gbps = 25.0
//! # or a fleet that follows its load (colocated replicas; see super::autoscale):
//! # [cluster.autoscale]
//! # min_replicas = 1
//! # max_replicas = 8
//! ```

use std::borrow::Cow;

use kvplan_vocab::hardware::Interconnect;
use kvplan_vocab::overlay::Overlay;
use kvplan_vocab::overlay_fields;
use kvplan_vocab::{HardwareProfile, ModelSpec};
use serde::{Deserialize, Serialize};

use super::autoscale::{Autoscale, RawAutoscale};
use super::{ClusterPlan, KvTransfer, ReplicaPlan, Role};
use crate::config::RawConfig;
use crate::config::{Config, Resolved};
use crate::error::ScenarioError;
use crate::router::{RouterKind, Weights};

pub use crate::roles::MAX_REPLICAS;

/// `[cluster]` as written: every field optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    /// Identical replicas behind the router (vLLM's `data_parallel_size`).
    #[serde(alias = "replicas")]
    pub data_parallel_size: Option<u32>,
    /// The router (default `vllm-dp`, vLLM's own).
    pub router: Option<RouterKind>,
    /// Extra delay on everything the router learns from the replicas, seconds (default 0).
    pub router_staleness_s: Option<f64>,
    /// The router's time per request, microseconds (default 0).
    pub router_latency_us: Option<f64>,
    /// The `llm-d` router's scorer weights.
    pub router_weights: Option<Weights>,
    /// Prefill replicas of a disaggregated cluster.
    pub prefill_replicas: Option<u32>,
    /// Decode replicas of a disaggregated cluster.
    pub decode_replicas: Option<u32>,
    /// How prefill KV reaches decode replicas (default `pull`).
    pub kv_transfer: Option<KvTransfer>,
    /// The prefill pool's GPU and settings.
    pub prefill: Option<RawPool>,
    /// The decode pool's GPU and settings.
    pub decode: Option<RawPool>,
    /// Replicas that differ from one another (each group: a count, a GPU, settings).
    #[serde(default, rename = "replica", skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<RawReplica>,
    /// The network between replicas, over the profiles' `[interconnect]`.
    pub interconnect: Option<RawInterconnect>,
    /// A fleet that follows its load (`[cluster.autoscale]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<RawAutoscale>,
}

/// A pool's (or a group of replicas') GPU and engine settings over the scenario's.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawPool {
    /// Hardware preset or profile.
    pub hardware: Option<String>,
    /// `[serve]` fields over the scenario's.
    #[serde(default)]
    pub serve: RawConfig,
}

/// `[[cluster.replica]]`: `count` replicas of one GPU and settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawReplica {
    /// How many (default 1).
    pub count: Option<u32>,
    /// Hardware preset or profile.
    pub hardware: Option<String>,
    /// `[serve]` fields over the scenario's.
    #[serde(default)]
    pub serve: RawConfig,
}

/// `[cluster.interconnect]`: the network over the profiles'.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInterconnect {
    /// e.g. `RoCE 200G`.
    pub kind: Option<String>,
    /// One direction per GPU, GB/s.
    pub gbps: Option<f64>,
    /// Microseconds per transfer.
    pub latency_us: Option<f64>,
    /// Microseconds to post a transfer and hear its completion.
    pub per_transfer_us: Option<f64>,
}

impl RawCluster {
    /// Whether it asks for nothing (one engine).
    pub fn is_empty(&self) -> bool {
        *self == RawCluster::default()
    }

    /// Fields `o` sets win; `o`'s replica groups replace these.
    pub fn overlay(mut self, o: RawCluster) -> Self {
        overlay_fields!(self, o; data_parallel_size, router, router_staleness_s,
            router_latency_us, router_weights, prefill_replicas, decode_replicas, kv_transfer);
        for (mine, theirs) in [(&mut self.prefill, o.prefill), (&mut self.decode, o.decode)] {
            if let Some(t) = theirs {
                let m = mine.get_or_insert_with(RawPool::default);
                m.hardware.overlay(t.hardware);
                m.serve = std::mem::take(&mut m.serve).overlay(t.serve);
            }
        }
        if !o.replicas.is_empty() {
            self.replicas = o.replicas;
        }
        if let Some(t) = o.autoscale {
            self.autoscale = Some(self.autoscale.take().unwrap_or_default().overlay(t));
        }
        if let Some(t) = o.interconnect {
            let m = self
                .interconnect
                .get_or_insert_with(RawInterconnect::default);
            overlay_fields!(m, t; kind, gbps, latency_us, per_transfer_us);
        }
        self
    }
}

/// One replica of a resolved cluster.
#[derive(Debug, Clone)]
pub struct ReplicaScenario {
    /// Its name.
    pub name: String,
    /// Its place.
    pub role: Role,
    /// The model as it serves it (one rank's shapes, its quantisation).
    pub model: ModelSpec,
    /// Its GPU.
    pub hardware: HardwareProfile,
    /// Its settings.
    pub config: Config,
    /// Its settings checked.
    pub resolved: Resolved,
    /// Tensor-parallel GPUs.
    pub tensor_parallel_size: u32,
}

/// A checked `[cluster]`.
#[derive(Debug, Clone)]
pub struct ClusterScenario {
    /// The replicas (prefill ones first when disaggregated).
    pub replicas: Vec<ReplicaScenario>,
    /// The router.
    pub router: RouterKind,
    /// Extra delay on what the router learns, seconds.
    pub staleness_s: f64,
    /// The router's time per request, seconds.
    pub router_latency_s: f64,
    /// The `llm-d` router's weights.
    pub weights: Weights,
    /// Prefill/decode transfer.
    pub transfer: KvTransfer,
    /// Whether prefill and decode run in pools of their own.
    pub disaggregated: bool,
    /// The network override.
    pub interconnect: Option<RawInterconnect>,
    /// The autoscaler: [`replicas`](Self::replicas) are then its `max_replicas` slots.
    pub autoscale: Option<Autoscale>,
}

impl ClusterScenario {
    /// GPUs in all.
    pub fn gpus(&self) -> u32 {
        self.replicas.iter().map(|r| r.tensor_parallel_size).sum()
    }

    /// The plan the driver runs, its router's draws seeded with `seed`.
    pub fn plan(&self, seed: u64, per_replica: bool) -> ClusterPlan {
        let moe = self.replicas.iter().any(|r| r.model.moe.is_some());
        ClusterPlan {
            replicas: self
                .replicas
                .iter()
                .map(|r| {
                    let timer = crate::setup::timer(&r.model, &r.hardware, &r.config, &r.resolved);
                    let resolved = r.resolved.clone();
                    let tier =
                        crate::setup::cpu_tier(&resolved, timer.model(), r.tensor_parallel_size);
                    ReplicaPlan {
                        name: r.name.clone(),
                        role: r.role,
                        hardware: r.hardware.name.clone(),
                        tensor_parallel_size: r.tensor_parallel_size,
                        timer,
                        resolved,
                        frontend_s: r.hardware.serving.frontend_us * 1e-6,
                        interconnect: self.interconnect_of(&r.hardware),
                        tier,
                    }
                })
                .collect(),
            router: self.router,
            staleness_s: self.staleness_s,
            router_latency_s: self.router_latency_s,
            weights: self.weights,
            seed,
            transfer: self.transfer,
            moe,
            per_replica,
            autoscale: self.autoscale.clone(),
        }
    }

    fn interconnect_of(&self, hw: &HardwareProfile) -> Interconnect {
        let mut n = hw.interconnect.clone();
        if let Some(o) = &self.interconnect {
            if let Some(k) = &o.kind {
                n.kind = k.clone();
            }
            if let Some(g) = o.gbps {
                n.bandwidth = g * 1e9;
            }
            if let Some(l) = o.latency_us {
                n.latency_s = l * 1e-6;
            }
            if let Some(p) = o.per_transfer_us {
                n.per_transfer_s = p * 1e-6;
            }
        }
        n
    }
}

fn bad(
    field: &'static str,
    value: impl ToString,
    expect: impl Into<Cow<'static, str>>,
) -> ScenarioError {
    ScenarioError::Cluster {
        field,
        value: value.to_string(),
        expect: expect.into(),
    }
}

/// A group of replicas to resolve: how many, its role, its GPU and settings, where it is
/// written.
struct Group {
    count: u32,
    role: Role,
    hardware: String,
    serve: RawConfig,
    path: &'static str,
}

/// Resolves `[cluster]` over the scenario's `model`, `hardware` and `[serve]`; `None` when it
/// asks for one engine.
pub fn resolve(
    raw: &RawCluster,
    model: &ModelSpec,
    hardware: &str,
    serve: &RawConfig,
) -> Result<Option<ClusterScenario>, ScenarioError> {
    if raw.is_empty() {
        return Ok(None);
    }
    let disaggregated = raw.prefill_replicas.is_some() || raw.decode_replicas.is_some();
    let autoscale = resolve_autoscale(raw, disaggregated, hardware)?;
    let groups = if disaggregated {
        pool_groups(raw, hardware, serve)?
    } else {
        colocated_groups(raw, hardware, serve, autoscale.as_ref())?
    };
    let (staleness, latency, weights) = router_settings(raw)?;
    check_interconnect(raw)?;
    let router = router_of(raw, autoscale.as_ref())?;
    let replicas = replicas_of(&groups, model, disaggregated)?;
    check_router(router, &replicas)?;
    Ok(Some(ClusterScenario {
        replicas,
        router,
        staleness_s: staleness,
        router_latency_s: latency * 1e-6,
        weights,
        transfer: raw.kv_transfer.unwrap_or_default(),
        disaggregated,
        interconnect: raw.interconnect.clone(),
        autoscale,
    }))
}

/// `[cluster.autoscale]` checked against the rest of the table, priced at `hardware`'s GPU.
fn resolve_autoscale(
    raw: &RawCluster,
    disaggregated: bool,
    hardware: &str,
) -> Result<Option<Autoscale>, ScenarioError> {
    let Some(a) = &raw.autoscale else {
        return Ok(None);
    };
    if disaggregated {
        return Err(bad(
            "cluster.autoscale",
            "a disaggregated cluster",
            "a colocated cluster: autoscaling prefill and decode pools is not modelled \
             (give data_parallel_size, or drop prefill_replicas and decode_replicas)",
        ));
    }
    if !raw.replicas.is_empty() {
        return Err(bad(
            "cluster.autoscale",
            "[[cluster.replica]] groups",
            "identical replicas: an autoscaled fleet adds and removes copies of the \
             scenario's engine (drop [[cluster.replica]])",
        ));
    }
    let mut a = a.resolve(raw.data_parallel_size)?;
    a.price_usd_per_gpu_hour = HardwareProfile::resolve(hardware)?.gpu.price_usd_per_hour;
    Ok(Some(a))
}

/// The prefill and decode pools of a disaggregated cluster, each over the scenario's
/// `hardware` and `serve` unless its table says otherwise.
fn pool_groups(
    raw: &RawCluster,
    hardware: &str,
    serve: &RawConfig,
) -> Result<Vec<Group>, ScenarioError> {
    if raw.data_parallel_size.is_some() || !raw.replicas.is_empty() {
        return Err(bad(
            "cluster.data_parallel_size",
            raw.data_parallel_size.unwrap_or(0),
            "unset with prefill_replicas and decode_replicas (a disaggregated cluster's \
             size is its two pools')",
        ));
    }
    let mut groups = Vec::new();
    for (field, n, pool, role, path) in [
        (
            "cluster.prefill_replicas",
            raw.prefill_replicas,
            &raw.prefill,
            Role::Prefill,
            "cluster.prefill.serve",
        ),
        (
            "cluster.decode_replicas",
            raw.decode_replicas,
            &raw.decode,
            Role::Decode,
            "cluster.decode.serve",
        ),
    ] {
        let n = n.ok_or_else(|| {
            bad(
                field,
                "unset",
                "a number of replicas: a disaggregated cluster needs both pools",
            )
        })?;
        if !(1..=MAX_REPLICAS).contains(&n) {
            return Err(bad(field, n, format!("1 to {MAX_REPLICAS} replicas")));
        }
        let pool = pool.clone().unwrap_or_default();
        groups.push(Group {
            count: n,
            role,
            hardware: pool.hardware.unwrap_or_else(|| hardware.to_string()),
            serve: serve.clone().overlay(pool.serve),
            path,
        });
    }
    Ok(groups)
}

/// The replicas of a colocated cluster: identical copies of the scenario's engine (as many as
/// `autoscale` may run), or the `[[cluster.replica]]` groups.
fn colocated_groups(
    raw: &RawCluster,
    hardware: &str,
    serve: &RawConfig,
    autoscale: Option<&Autoscale>,
) -> Result<Vec<Group>, ScenarioError> {
    if raw.prefill.is_some() || raw.decode.is_some() || raw.kv_transfer.is_some() {
        return Err(bad(
            "cluster.prefill_replicas",
            "unset",
            "prefill_replicas and decode_replicas with [cluster.prefill], [cluster.decode] \
             or kv_transfer (they describe a disaggregated cluster)",
        ));
    }
    if raw.replicas.is_empty() {
        let n = match autoscale {
            Some(a) => a.max_replicas,
            None => raw.data_parallel_size.unwrap_or(1),
        };
        if !(1..=MAX_REPLICAS).contains(&n) {
            return Err(bad(
                "cluster.data_parallel_size",
                n,
                format!("1 to {MAX_REPLICAS} replicas"),
            ));
        }
        return Ok(vec![Group {
            count: n,
            role: Role::Colocated,
            hardware: hardware.to_string(),
            serve: serve.clone(),
            path: "serve",
        }]);
    }
    let mut groups = Vec::new();
    let mut total = 0u32;
    for r in &raw.replicas {
        let c = r.count.unwrap_or(1);
        if c == 0 || c > MAX_REPLICAS {
            return Err(bad(
                "cluster.replica.count",
                c,
                format!("1 to {MAX_REPLICAS} replicas in each [[cluster.replica]]"),
            ));
        }
        total = total.saturating_add(c);
        groups.push(Group {
            count: c,
            role: Role::Colocated,
            hardware: r.hardware.clone().unwrap_or_else(|| hardware.to_string()),
            serve: serve.clone().overlay(r.serve.clone()),
            path: "cluster.replica.serve",
        });
    }
    if total > MAX_REPLICAS {
        return Err(bad(
            "cluster.replica.count",
            total,
            format!("at most {MAX_REPLICAS} replicas in all"),
        ));
    }
    if let Some(n) = raw.data_parallel_size
        && n != total
    {
        return Err(bad(
            "cluster.data_parallel_size",
            n,
            format!("{total}, the replicas [[cluster.replica]] lists (or leave it unset)"),
        ));
    }
    Ok(groups)
}

/// The router's staleness (s), latency (µs) and `llm-d` weights, checked.
fn router_settings(raw: &RawCluster) -> Result<(f64, f64, Weights), ScenarioError> {
    let show = kvplan_vocab::limits::show;
    let staleness = raw.router_staleness_s.unwrap_or(0.0);
    if !(staleness.is_finite() && (0.0..=3600.0).contains(&staleness)) {
        return Err(bad(
            "cluster.router_staleness_s",
            show(staleness),
            "0 to 3600 seconds",
        ));
    }
    let latency = raw.router_latency_us.unwrap_or(0.0);
    if !(latency.is_finite() && (0.0..=1e7).contains(&latency)) {
        return Err(bad(
            "cluster.router_latency_us",
            show(latency),
            "0 to 10,000,000 microseconds",
        ));
    }
    let weights = raw.router_weights.unwrap_or_default();
    for (w, name) in [
        (weights.queue, "queue"),
        (weights.kv, "kv"),
        (weights.prefix, "prefix"),
    ] {
        if !(w.is_finite() && (0.0..=1e6).contains(&w)) {
            return Err(bad(
                "cluster.router_weights",
                format!("{name} = {}", show(w)),
                "weights from 0 to 1,000,000",
            ));
        }
    }
    Ok((staleness, latency, weights))
}

/// The `[cluster.interconnect]` overrides, each in range.
fn check_interconnect(raw: &RawCluster) -> Result<(), ScenarioError> {
    let show = kvplan_vocab::limits::show;
    let Some(i) = &raw.interconnect else {
        return Ok(());
    };
    for (field, v, what) in [
        (
            "cluster.interconnect.gbps",
            i.gbps,
            "more than 0 and at most 100,000 GB/s",
        ),
        (
            "cluster.interconnect.latency_us",
            i.latency_us,
            "0 to 1,000,000 microseconds",
        ),
        (
            "cluster.interconnect.per_transfer_us",
            i.per_transfer_us,
            "0 to 1,000,000 microseconds",
        ),
    ] {
        if let Some(v) = v {
            let ok = if field.ends_with("gbps") {
                v.is_finite() && v > 0.0 && v <= 1e5
            } else {
                v.is_finite() && (0.0..=1e6).contains(&v)
            };
            if !ok {
                return Err(bad(field, show(v), what));
            }
        }
    }
    Ok(())
}

/// The router: the one asked for, or the default (least-requests for an autoscaled fleet,
/// which may run only a router that keeps no per-replica state).
fn router_of(raw: &RawCluster, autoscale: Option<&Autoscale>) -> Result<RouterKind, ScenarioError> {
    Ok(match (autoscale, raw.router) {
        (None, r) => r.unwrap_or_default(),
        // An autoscaled fleet sits behind a gateway, not vLLM's own data-parallel balancer.
        (Some(_), None) => RouterKind::from_name("least-requests").expect("a router"),
        (Some(_), Some(r)) => {
            if !crate::router::AUTOSCALE_ROUTERS.contains(&r.as_str()) {
                return Err(bad(
                    "cluster.router",
                    r.as_str(),
                    format!(
                        "with [cluster.autoscale], one of {} (the default is least-requests; \
                         the others keep per-replica state that assumes a fixed pool)",
                        crate::router::AUTOSCALE_ROUTERS.join(", ")
                    ),
                ));
            }
            r
        }
    })
}

/// Every replica of `groups`: `model` sharded and served as each group's settings say, the
/// settings checked against its GPU, named `r0`, `p0`, `d0` ... by role.
fn replicas_of(
    groups: &[Group],
    model: &ModelSpec,
    disaggregated: bool,
) -> Result<Vec<ReplicaScenario>, ScenarioError> {
    let mut replicas = Vec::new();
    let mut counters = [0u32; 3];
    for g in groups {
        let hw = HardwareProfile::resolve(&g.hardware)?;
        let tp = g.serve.tensor_parallel_size.unwrap_or(1);
        let m = model
            .sharded_with(tp, g.serve.enable_expert_parallel.unwrap_or(false))
            .map_err(|e| match e {
                kvplan_vocab::Error::InvalidValue { value, message, .. } => {
                    kvplan_vocab::Error::InvalidValue {
                        field: format!("{}.tensor_parallel_size", g.path),
                        value,
                        message,
                    }
                }
                other => other,
            })?;
        let config = g.serve.to_config();
        let resolved = config
            .validate(&m, &hw)
            .map_err(|e| ScenarioError::Replica {
                path: g.path,
                source: e,
            })?;
        if disaggregated && !config.scheduler.spec().kv_connector {
            return Err(ScenarioError::Replica {
                path: g.path,
                source: crate::error::Error::InvalidConfig {
                    field: "scheduler",
                    value: config.scheduler.as_str().into(),
                    expect: "vllm-v1 in a disaggregated cluster (vLLM hands KV between \
                             instances with V1 engine connectors)"
                        .into(),
                },
            });
        }
        let model = config.apply(&m, &hw);
        for _ in 0..g.count {
            let k = match g.role {
                Role::Colocated => 0,
                Role::Prefill => 1,
                Role::Decode => 2,
            };
            let prefix = ["r", "p", "d"][k];
            replicas.push(ReplicaScenario {
                name: format!("{prefix}{}", counters[k]),
                role: g.role,
                model: model.clone(),
                hardware: hw.clone(),
                config: config.clone(),
                resolved: resolved.clone(),
                tensor_parallel_size: tp,
            });
            counters[k] += 1;
        }
    }
    Ok(replicas)
}

/// What the router needs of the replicas of each pool it serves.
fn check_router(router: RouterKind, replicas: &[ReplicaScenario]) -> Result<(), ScenarioError> {
    let needs = router.spec().needs;
    for role in [Role::Colocated, Role::Prefill, Role::Decode] {
        let pool: Vec<&ReplicaScenario> = replicas.iter().filter(|r| r.role == role).collect();
        if pool.len() < 2 {
            continue;
        }
        if needs.prefix_caching && pool.iter().any(|r| !r.resolved.prefix_caching) {
            return Err(bad(
                "cluster.router",
                router.as_str(),
                format!(
                    "a router that needs no prefix cache: {} routes by cached prefixes and the {} \
                     replicas do not cache them (turn serve.enable_prefix_caching on, or route \
                     with round-robin, least-requests or vllm-dp)",
                    router.as_str(),
                    role.as_str()
                ),
            ));
        }
        if needs.hash_block == Some(0)
            && pool
                .iter()
                .any(|r| r.config.block_size != pool[0].config.block_size)
        {
            return Err(bad(
                "cluster.router",
                router.as_str(),
                format!(
                    "replicas of one block size: {} matches the engines' block hashes",
                    router.as_str()
                ),
            ));
        }
    }
    Ok(())
}
