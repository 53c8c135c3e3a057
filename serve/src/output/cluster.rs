//! What a cluster run reports beside the cluster's summary: each replica's summary and series,
//! the router's spread of requests, and for a disaggregated cluster the KV transfers and which
//! of the prefill pool, the decode pool and the network binds.

use serde::Serialize;

use super::{IterationRecord, Summary};
use crate::roles::{KvTransfer, Role};
use crate::tier::TierStats;

/// One replica's share of a cluster run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplicaOutput {
    /// Its name (`r0`, `p0`, `d0`, ...).
    pub name: String,
    /// Its place.
    pub role: Role,
    /// Its GPU profile.
    pub hardware: String,
    /// Tensor-parallel GPUs.
    pub tensor_parallel_size: u32,
    /// Requests the router sent it.
    pub routed: u64,
    /// Kernel time over the cluster's makespan.
    #[serde(rename = "gpu_busy_fraction")]
    pub gpu_busy: f64,
    /// Network link time (KV transfers) over the makespan.
    #[serde(rename = "network_busy_fraction")]
    pub network_busy: f64,
    /// KV blocks in use over the run, as a fraction of its blocks.
    pub kv_occupancy: f64,
    /// Prompt tokens its prefix cache gave back.
    pub prefix_hit_tokens: u64,
    /// Its summary over the requests (or prefills) it served.
    pub summary: Option<Summary>,
    /// Its per-step series (when recorded).
    #[serde(skip)]
    pub iterations: Vec<IterationRecord>,
    /// Its CPU tier, if any.
    pub tier: Option<TierStats>,
}

/// How a router spread the requests of one pool.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolStats {
    /// Replicas (indices in [`ClusterOutput::replicas`]).
    pub replicas: Vec<usize>,
    /// Requests routed to each.
    pub routed: Vec<u64>,
    /// The most routed to one replica over the mean (1: even).
    pub imbalance: f64,
}

impl PoolStats {
    /// The stats of `routed` over `replicas`.
    pub fn of(replicas: &[usize], routed: &[u64]) -> Self {
        let total: u64 = routed.iter().sum();
        let mean = total as f64 / routed.len().max(1) as f64;
        let max = routed.iter().copied().max().unwrap_or(0) as f64;
        PoolStats {
            replicas: replicas.to_vec(),
            routed: routed.to_vec(),
            imbalance: if mean > 0.0 { max / mean } else { 1.0 },
        }
    }
}

/// The KV moved from prefill to decode replicas.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct TransferStats {
    /// Pull (NIXL) or layer-wise push.
    pub mode: KvTransfer,
    /// Transfers.
    pub transfers: u64,
    /// Bytes moved (all ranks).
    pub bytes: u64,
    /// From a read being posted to its KV being there, summed, seconds.
    pub seconds: f64,
    /// Of that, waiting for a busy network link, seconds.
    pub wait_s: f64,
}

/// What binds a disaggregated cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Binding {
    /// The prefill pool's GPUs are the busiest.
    PrefillPool,
    /// The decode pool's GPUs are.
    DecodePool,
    /// A network link is.
    Network,
}

impl Binding {
    /// The words in a report.
    pub fn as_str(self) -> &'static str {
        match self {
            Binding::PrefillPool => "the prefill pool",
            Binding::DecodePool => "the decode pool",
            Binding::Network => "the KV transfer link",
        }
    }
}

/// The pressure on each part of a disaggregated cluster, each a fraction of its capacity:
/// the prefill pool's mean GPU time (a prefill replica computes only while it has prompts), the
/// decode pool's mean KV occupancy (a decode replica's GPU runs whenever it holds a request, so
/// its busy time says little; its blocks fill as its load nears what it can hold, and then
/// requests wait for them) and the busiest network link's time.
pub fn pressures(replicas: &[ReplicaOutput]) -> (f64, f64, f64) {
    let mean = |role: Role, f: fn(&ReplicaOutput) -> f64| {
        let v: Vec<f64> = (replicas.iter())
            .filter(|r| r.role == role)
            .map(f)
            .collect();
        v.iter().sum::<f64>() / v.len().max(1) as f64
    };
    let net = replicas.iter().map(|r| r.network_busy).fold(0.0, f64::max);
    (
        mean(Role::Prefill, |r| r.gpu_busy),
        mean(Role::Decode, |r| r.kv_occupancy),
        net,
    )
}

/// A cluster run's per-replica and router outputs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClusterOutput {
    /// The replicas.
    pub replicas: Vec<ReplicaOutput>,
    /// The router's pools (one; prefill and decode when disaggregated).
    pub pools: Vec<PoolStats>,
    /// KV transfers (disaggregated).
    pub transfer: Option<TransferStats>,
    /// What binds (disaggregated): the highest of the prefill pool's GPU time, the decode pool's
    /// KV occupancy and the busiest network link, each a fraction of its capacity.
    pub binding: Option<Binding>,
    /// The autoscaler's fleet, per hour (an autoscaled cluster).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscale: Option<super::autoscale::AutoscaleOutput>,
}

impl ClusterOutput {
    /// The outputs, with what binds.
    pub fn new(
        replicas: Vec<ReplicaOutput>,
        pools: Vec<PoolStats>,
        transfer: Option<TransferStats>,
    ) -> Self {
        let binding = transfer.map(|_| {
            let (p, d, net) = pressures(&replicas);
            if net >= p && net >= d {
                Binding::Network
            } else if p >= d {
                Binding::PrefillPool
            } else {
                Binding::DecodePool
            }
        });
        ClusterOutput {
            replicas,
            pools,
            transfer,
            binding,
            autoscale: None,
        }
    }
}
