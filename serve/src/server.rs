//! The simulated server: one engine ([`crate::engine`]) driven on its own by the cluster
//! driver ([`crate::cluster`]), which feeds it the requests as clients send them (and releases
//! closed-loop followers when their predecessors end).
//!
//! Each pass of the engine's loop (`EngineCore.run_busy_loop`, `vllm/v1/engine/core.py`) takes
//! the requests that have reached it, schedules a step, spends the host time to launch it, and
//! waits for the oldest step's output (with asynchronous scheduling, once two are in flight):
//! a step's period is `max(GPU, host)`; see [`crate::engine`].

use kvplan_vocab::{HardwareProfile, ModelSpec, Progress};
use kvplan_workloads::{Request, RequestStream};

use crate::cluster::{ClusterPlan, ReplicaPlan, Role, simulate_cluster, simulate_cluster_stream};
use crate::config::{Config, Resolved};
use crate::error::Error;
use crate::iteration::IterationTimer;
use crate::output::ServeReport;

/// Runs `requests` (sorted by arrival) through the serving engine.
pub fn simulate(
    model: &ModelSpec,
    hw: &HardwareProfile,
    config: &Config,
    requests: &[Request],
) -> Result<ServeReport, Error> {
    let (timer, resolved) = prepare(model, hw, config)?;
    simulate_with(timer, resolved, hw.serving.frontend_us * 1e-6, requests)
}

/// The iteration timer and resolved settings of `config` for `model` on `hw`.
pub(crate) fn prepare(
    model: &ModelSpec,
    hw: &HardwareProfile,
    config: &Config,
) -> Result<(IterationTimer, Resolved), Error> {
    let resolved = config.validate(model, hw)?;
    Ok((crate::setup::timer(model, hw, config, &resolved), resolved))
}

/// [`simulate`] with a prepared timer, resolved settings and the frontend latency (seconds
/// between a client's send and the engine seeing the request).
pub fn simulate_with(
    timer: IterationTimer,
    resolved: Resolved,
    frontend_s: f64,
    requests: &[Request],
) -> Result<ServeReport, Error> {
    simulate_cluster(one(timer, resolved, frontend_s), requests)
}

/// [`simulate_with`] on a stream of requests drawn as the engine takes them: memory follows
/// the requests in flight (and the records [`Config::record_requests`] keeps), not the
/// request count. `progress` hears how many have been served. A closed-loop stream (some
/// request follows another) holds its requests already and runs as [`simulate_with`].
pub fn simulate_stream(
    timer: IterationTimer,
    resolved: Resolved,
    frontend_s: f64,
    requests: RequestStream,
    progress: &dyn Progress,
) -> Result<ServeReport, Error> {
    simulate_cluster_stream(one(timer, resolved, frontend_s), requests, progress)
}

/// A cluster of one engine.
fn one(timer: IterationTimer, resolved: Resolved, frontend_s: f64) -> ClusterPlan {
    let tier = crate::setup::cpu_tier(&resolved, timer.model(), 1);
    ClusterPlan {
        replicas: vec![ReplicaPlan {
            name: "r0".into(),
            role: Role::Colocated,
            hardware: String::new(),
            tensor_parallel_size: 1,
            timer,
            resolved,
            frontend_s,
            interconnect: Default::default(),
            tier,
        }],
        router: Default::default(),
        staleness_s: 0.0,
        router_latency_s: 0.0,
        weights: Default::default(),
        seed: 0,
        transfer: Default::default(),
        moe: false,
        per_replica: false,
        autoscale: None,
    }
}
