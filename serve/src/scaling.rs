//! An autoscaler's settings: `[cluster.autoscale]` as written and resolved (the fleet that
//! follows them is `crate::cluster::autoscale`'s, what it reports per hour `crate::output::autoscale`'s).
//!
//! ```toml
//! [cluster.autoscale]
//! min_replicas = 1
//! max_replicas = 8
//! metric = "concurrency"     # or "queue", "kv"
//! target = 16                # per replica: requests in flight, waiting, or a KV fraction
//! interval_s = 15            # how often it evaluates (the HPA's sync period)
//! scale_up_delay_s = 300     # provisioning and model load: ordered at t, serves from t + delay
//! cooldown_s = 300           # scale down only to the highest recommendation of this window
//! ```
//!
//! The rule is the Kubernetes Horizontal Pod Autoscaler's (`desiredReplicas =
//! ceil[currentReplicas × currentMetricValue / desiredMetricValue]`, no change within a 10%
//! tolerance; kubernetes.io, "Horizontal Pod Autoscaling", algorithm details), on the metric an
//! LLM deployment scales on: requests in flight per replica (`concurrency`, Knative/KServe's
//! default autoscaling metric), requests waiting per replica (`queue`, vLLM's
//! `num_requests_waiting` gauge) or the KV cache's used fraction (`kv`, vLLM's
//! `kv_cache_usage_perc`). `currentReplicas` counts the replicas ordered (in service or
//! starting up); the metric is summed over the replicas in service, so a replica still starting
//! counts as idle (the HPA's rule for pods not yet ready when it scales up), and the desired
//! count is `ceil(sum / target)`. It scales up at once; it scales down only to the highest
//! recommendation of the last `cooldown_s` (the HPA's `scaleDown.stabilizationWindowSeconds`,
//! default 300 s). Within `[min_replicas, max_replicas]`.
//!
//! A replica ordered at `t` costs from `t` and serves from `t + scale_up_delay_s`. Scaling down
//! first cancels replicas still starting (newest first), then drains the newest in service: the
//! router stops sending to it, it finishes what it holds and stops costing when empty. A
//! scale-up while a replica drains takes it back at once (it is still loaded). A replica
//! started again keeps its engine's state (its prefix cache is not emptied).

use serde::{Deserialize, Serialize};

use crate::error::ScenarioError;

/// Default smallest fleet.
pub const DEFAULT_MIN_REPLICAS: u32 = 1;
/// Default largest fleet.
pub const DEFAULT_MAX_REPLICAS: u32 = 8;
/// Default evaluation period, seconds (the HPA controller's
/// horizontal-pod-autoscaler-sync-period option).
pub const DEFAULT_INTERVAL_S: f64 = 15.0;
/// Default provisioning and model load, seconds.
pub const DEFAULT_SCALE_UP_DELAY_S: f64 = 300.0;
/// Default scale-down window, seconds (the HPA's default scale-down stabilization window).
pub const DEFAULT_COOLDOWN_S: f64 = 300.0;
/// The HPA's tolerance: no change while the metric is within 10% of the target.
pub const TOLERANCE: f64 = 0.1;

/// What the autoscaler measures, per replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AutoscaleMetric {
    /// Requests in flight (waiting and running) per replica: Knative/KServe's concurrency.
    #[default]
    Concurrency,
    /// Requests waiting per replica (vLLM's `num_requests_waiting`).
    Queue,
    /// Fraction of the KV cache in use (vLLM's `kv_cache_usage_perc`).
    Kv,
}

impl AutoscaleMetric {
    /// Its name in files and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            AutoscaleMetric::Concurrency => "concurrency",
            AutoscaleMetric::Queue => "queue",
            AutoscaleMetric::Kv => "kv",
        }
    }

    /// The default target of this metric: 16 requests in flight, 4 waiting, 70% of the KV.
    pub fn default_target(self) -> f64 {
        match self {
            AutoscaleMetric::Concurrency => 16.0,
            AutoscaleMetric::Queue => 4.0,
            AutoscaleMetric::Kv => 0.7,
        }
    }
}

impl std::str::FromStr for AutoscaleMetric {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "concurrency" => Ok(AutoscaleMetric::Concurrency),
            "queue" => Ok(AutoscaleMetric::Queue),
            "kv" | "utilization" => Ok(AutoscaleMetric::Kv),
            _ => Err(format!("one of concurrency, queue, kv (got `{s}`)")),
        }
    }
}

/// `[cluster.autoscale]` as written: every field optional.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawAutoscale {
    /// Fewest replicas (default 1).
    pub min_replicas: Option<u32>,
    /// Most replicas (default 8).
    pub max_replicas: Option<u32>,
    /// Replicas in service at t = 0 (default `cluster.data_parallel_size`, else the minimum).
    pub initial_replicas: Option<u32>,
    /// What it measures (default `concurrency`).
    pub metric: Option<AutoscaleMetric>,
    /// The metric's target per replica (default: 16 in flight, 4 waiting, 0.7 of the KV).
    pub target: Option<f64>,
    /// Seconds between evaluations (default 15).
    pub interval_s: Option<f64>,
    /// Seconds from ordering a replica to its serving (default 300).
    pub scale_up_delay_s: Option<f64>,
    /// Scale-down window, seconds (default 300).
    pub cooldown_s: Option<f64>,
}

fn pick<T>(a: &mut Option<T>, b: Option<T>) {
    if b.is_some() {
        *a = b;
    }
}

impl RawAutoscale {
    /// Fields `o` sets win.
    pub fn overlay(mut self, o: RawAutoscale) -> Self {
        pick(&mut self.min_replicas, o.min_replicas);
        pick(&mut self.max_replicas, o.max_replicas);
        pick(&mut self.initial_replicas, o.initial_replicas);
        pick(&mut self.metric, o.metric);
        pick(&mut self.target, o.target);
        pick(&mut self.interval_s, o.interval_s);
        pick(&mut self.scale_up_delay_s, o.scale_up_delay_s);
        pick(&mut self.cooldown_s, o.cooldown_s);
        self
    }

    /// A fleet of `n` replicas that never changes: the fixed fleet a day is compared with.
    pub fn fixed(n: u32) -> Self {
        RawAutoscale {
            min_replicas: Some(n),
            max_replicas: Some(n),
            initial_replicas: Some(n),
            ..RawAutoscale::default()
        }
    }

    /// Checks the fields; `data_parallel_size` is the cluster's, the initial fleet when
    /// `initial_replicas` is not given.
    pub fn resolve(&self, data_parallel_size: Option<u32>) -> Result<Autoscale, ScenarioError> {
        let (min, max, initial) = self.replica_bounds(data_parallel_size)?;
        let (metric, target) = self.metric_target()?;
        Ok(Autoscale {
            min_replicas: min,
            max_replicas: max,
            initial_replicas: initial,
            metric,
            target,
            interval_s: seconds(
                "cluster.autoscale.interval_s",
                self.interval_s,
                DEFAULT_INTERVAL_S,
                true,
            )?,
            scale_up_delay_s: seconds(
                "cluster.autoscale.scale_up_delay_s",
                self.scale_up_delay_s,
                DEFAULT_SCALE_UP_DELAY_S,
                false,
            )?,
            cooldown_s: seconds(
                "cluster.autoscale.cooldown_s",
                self.cooldown_s,
                DEFAULT_COOLDOWN_S,
                false,
            )?,
            price_usd_per_gpu_hour: None,
        })
    }

    /// The fewest, the most and the initial replicas, checked against each other.
    fn replica_bounds(
        &self,
        data_parallel_size: Option<u32>,
    ) -> Result<(u32, u32, u32), ScenarioError> {
        let max_all = crate::roles::MAX_REPLICAS;
        let min = self.min_replicas.unwrap_or(DEFAULT_MIN_REPLICAS);
        if !(1..=max_all).contains(&min) {
            return Err(bad(
                "cluster.autoscale.min_replicas",
                min,
                format!("1 to {max_all} replicas"),
            ));
        }
        let max = self.max_replicas.unwrap_or(DEFAULT_MAX_REPLICAS.max(min));
        if !(1..=max_all).contains(&max) {
            return Err(bad(
                "cluster.autoscale.max_replicas",
                max,
                format!("1 to {max_all} replicas"),
            ));
        }
        if min > max {
            return Err(bad(
                "cluster.autoscale.min_replicas",
                min,
                format!("at most max_replicas ({max})"),
            ));
        }
        let (initial, field) = match (self.initial_replicas, data_parallel_size) {
            (Some(n), _) => (n, "cluster.autoscale.initial_replicas"),
            (None, Some(n)) => (n, "cluster.data_parallel_size"),
            (None, None) => (min, "cluster.autoscale.initial_replicas"),
        };
        if !(min..=max).contains(&initial) {
            return Err(bad(
                field,
                initial,
                format!("the replicas at t = 0, from min_replicas ({min}) to max_replicas ({max})"),
            ));
        }
        Ok((min, max, initial))
    }

    /// The metric and its target per replica, in the metric's range.
    fn metric_target(&self) -> Result<(AutoscaleMetric, f64), ScenarioError> {
        let metric = self.metric.unwrap_or_default();
        let target = self.target.unwrap_or(metric.default_target());
        let target_ok = match metric {
            AutoscaleMetric::Kv => target > 0.0 && target <= 1.0,
            _ => target.is_finite() && target > 0.0 && target <= 1e6,
        };
        if !target_ok {
            return Err(bad(
                "cluster.autoscale.target",
                kvplan_vocab::limits::show(target),
                match metric {
                    AutoscaleMetric::Kv => "a fraction of the KV cache more than 0 and at most 1",
                    _ => "more than 0 and at most 1,000,000 requests per replica",
                },
            ));
        }
        Ok((metric, target))
    }
}

/// A time setting `v` of `field` (unset: `default`), seconds: at most a day, and for the
/// `interval` at least a second (an evaluation reads every replica's load; the HPA's sync
/// period is 15 s).
fn seconds(
    field: &'static str,
    v: Option<f64>,
    default: f64,
    interval: bool,
) -> Result<f64, ScenarioError> {
    let v = v.unwrap_or(default);
    let ok = v.is_finite() && v <= 86_400.0 && if interval { v >= 1.0 } else { v >= 0.0 };
    if ok {
        Ok(v)
    } else {
        Err(bad(
            field,
            kvplan_vocab::limits::show(v),
            if interval {
                "1 to 86,400 seconds"
            } else {
                "0 to 86,400 seconds"
            },
        ))
    }
}

fn bad(
    field: &'static str,
    value: impl ToString,
    expect: impl Into<std::borrow::Cow<'static, str>>,
) -> ScenarioError {
    ScenarioError::Cluster {
        field,
        value: value.to_string(),
        expect: expect.into(),
    }
}

/// A checked `[cluster.autoscale]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Autoscale {
    /// Fewest replicas.
    pub min_replicas: u32,
    /// Most replicas.
    pub max_replicas: u32,
    /// Replicas in service at t = 0.
    pub initial_replicas: u32,
    /// What it measures.
    pub metric: AutoscaleMetric,
    /// The metric's target per replica.
    pub target: f64,
    /// Seconds between evaluations.
    pub interval_s: f64,
    /// Seconds from ordering a replica to its serving.
    pub scale_up_delay_s: f64,
    /// Scale-down window, seconds.
    pub cooldown_s: f64,
    /// What one GPU costs per hour (the profile's `gpu.price_usd_per_hour`), if it says.
    pub price_usd_per_gpu_hour: Option<f64>,
}
