//! An autoscaler for a colocated cluster: `[cluster.autoscale]`, the fleet it runs on the
//! cluster's clock, and what it reports per hour of the run.
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

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::scenario::error::ScenarioError;

/// Default smallest fleet.
pub const DEFAULT_MIN_REPLICAS: u32 = 1;
/// Default largest fleet.
pub const DEFAULT_MAX_REPLICAS: u32 = 8;
/// Default evaluation period, seconds (the HPA controller's `--horizontal-pod-autoscaler-sync-period`).
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
        let max_all = super::scenario::MAX_REPLICAS;
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
        // An evaluation reads every replica's load: at least a second apart (the HPA's sync
        // period is 15 s).
        let secs = |field: &'static str, v: Option<f64>, default: f64, interval: bool| {
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
        };
        Ok(Autoscale {
            min_replicas: min,
            max_replicas: max,
            initial_replicas: initial,
            metric,
            target,
            interval_s: secs(
                "cluster.autoscale.interval_s",
                self.interval_s,
                DEFAULT_INTERVAL_S,
                true,
            )?,
            scale_up_delay_s: secs(
                "cluster.autoscale.scale_up_delay_s",
                self.scale_up_delay_s,
                DEFAULT_SCALE_UP_DELAY_S,
                false,
            )?,
            cooldown_s: secs(
                "cluster.autoscale.cooldown_s",
                self.cooldown_s,
                DEFAULT_COOLDOWN_S,
                false,
            )?,
            price_usd_per_gpu_hour: None,
        })
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

/// A change of the fleet's size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ScaleEvent {
    /// When it was decided, seconds.
    pub time_s: f64,
    /// Replicas ordered before (in service or starting).
    pub from: u32,
    /// Replicas ordered after.
    pub to: u32,
    /// The metric per ordered replica that decided it.
    pub metric: f64,
}

/// One hour of an autoscaled run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Hour {
    /// Its index from 0 (hour `h` is `[3600h, 3600(h + 1))` seconds).
    pub hour: u32,
    /// Requests that arrived in it.
    pub arrivals: u64,
    /// Mean replicas in service.
    pub replicas: f64,
    /// Mean GPUs paid for (in service, starting or draining).
    pub gpus: f64,
    /// GPU-hours paid for in it.
    pub gpu_hours: f64,
    /// Their cost, when the profile gives a price.
    pub cost_usd: Option<f64>,
    /// Whether a replica was ordered and not yet in service at some time in it.
    pub scale_up_pending: bool,
    /// Its requests judged against the SLO (when one is given).
    pub slo: Option<HourSlo>,
}

/// An hour's requests against the SLO.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HourSlo {
    /// Requests that arrived in the hour.
    pub requests: u64,
    /// Of those, the ones meeting every objective (vLLM's goodput rule).
    pub ok: u64,
    /// `ok / requests` (1 with no request).
    pub attainment: f64,
    /// Whether every percentile term holds over the hour's requests.
    pub met: bool,
    /// The terms missed, as `ttft_p99 2.4s > 2s`.
    pub misses: Vec<String>,
}

/// What an autoscaled cluster reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AutoscaleOutput {
    /// The settings.
    pub settings: Autoscale,
    /// Per hour of the run.
    pub hours: Vec<Hour>,
    /// Each change of the fleet.
    pub events: Vec<ScaleEvent>,
    /// GPU-hours paid for in all.
    pub gpu_hours: f64,
    /// Their cost, when the profile gives a price.
    pub cost_usd: Option<f64>,
    /// Most replicas in service at once.
    pub peak_replicas: u32,
    /// The SLO the hours were judged against, if any.
    pub slo: Option<String>,
    /// Hours whose requests miss a percentile term of the SLO.
    pub missed_hours: Vec<u32>,
    /// Of those, the hours in which a scale-up was pending: misses because of the scale-up
    /// delay.
    pub missed_while_scaling_up: Vec<u32>,
}

impl AutoscaleOutput {
    /// Judges each hour's requests (by arrival) against `slo`: the fraction meeting every
    /// objective, and whether each percentile term holds over the hour.
    pub fn judge(&mut self, requests: &[crate::output::RequestRecord], slo: &crate::capacity::Slo) {
        let mut by_hour: Vec<Vec<&crate::output::RequestRecord>> =
            vec![Vec::new(); self.hours.len()];
        for r in requests {
            let h = ((r.arrival_s / 3600.0) as usize).min(self.hours.len().saturating_sub(1));
            if let Some(v) = by_hour.get_mut(h) {
                v.push(r);
            }
        }
        self.missed_hours.clear();
        self.missed_while_scaling_up.clear();
        for (hour, reqs) in self.hours.iter_mut().zip(&by_hour) {
            let ok = reqs.iter().filter(|r| slo.request_ok(r)).count() as u64;
            let misses = slo.misses_of(reqs);
            let met = misses.is_empty();
            if !met {
                self.missed_hours.push(hour.hour);
                if hour.scale_up_pending {
                    self.missed_while_scaling_up.push(hour.hour);
                }
            }
            hour.slo = Some(HourSlo {
                requests: reqs.len() as u64,
                ok,
                attainment: if reqs.is_empty() {
                    1.0
                } else {
                    ok as f64 / reqs.len() as f64
                },
                met,
                misses,
            });
        }
        self.slo = Some(slo.to_string());
    }
}

/// A replica slot's state.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Slot {
    Off,
    Pending { ready: f64 },
    Up,
    Draining,
}

/// The fleet as the driver runs it: which replicas serve, when each was ordered and stopped.
#[derive(Debug)]
pub(crate) struct Fleet {
    cfg: Autoscale,
    slots: Vec<Slot>,
    since: Vec<f64>,
    /// Closed stretches: `(slot, from, to, state)`; every one is paid for.
    segments: Vec<(usize, f64, f64, Slot)>,
    /// Per slot: in service (what the router sees).
    pub(crate) up: Vec<bool>,
    tp: Vec<u32>,
    next_tick: f64,
    recommendations: VecDeque<(f64, u32)>,
    arrivals: Vec<u64>,
    events: Vec<ScaleEvent>,
    peak: u32,
}

/// What the autoscaler reads of one replica.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Load {
    pub waiting: u32,
    pub running: u32,
    pub kv_fraction: f64,
    pub busy: bool,
}

impl Fleet {
    /// `tp[i]`: GPUs of slot `i`; the first `initial_replicas` serve from t = 0.
    pub(crate) fn new(cfg: Autoscale, tp: Vec<u32>) -> Fleet {
        let n = tp.len();
        let initial = cfg.initial_replicas as usize;
        let slots: Vec<Slot> = (0..n)
            .map(|i| if i < initial { Slot::Up } else { Slot::Off })
            .collect();
        Fleet {
            up: slots.iter().map(|s| *s == Slot::Up).collect(),
            slots,
            since: vec![0.0; n],
            segments: Vec::new(),
            tp,
            next_tick: 0.0,
            recommendations: VecDeque::from([(0.0, cfg.initial_replicas)]),
            arrivals: Vec::new(),
            events: Vec::new(),
            peak: cfg.initial_replicas,
            cfg,
        }
    }

    /// The next time the fleet acts: an evaluation, or a replica coming into service.
    pub(crate) fn next_time(&self) -> f64 {
        let mut t = self.next_tick;
        for s in &self.slots {
            if let Slot::Pending { ready } = *s {
                t = t.min(ready);
            }
        }
        t
    }

    fn set(&mut self, i: usize, to: Slot, t: f64) {
        let from = self.slots[i];
        if from != Slot::Off {
            self.segments.push((i, self.since[i], t, from));
        }
        self.slots[i] = to;
        self.since[i] = t;
        self.up[i] = to == Slot::Up;
    }

    fn in_service(&self) -> u32 {
        self.slots.iter().filter(|s| **s == Slot::Up).count() as u32
    }

    fn pending(&self) -> u32 {
        (self.slots.iter())
            .filter(|s| matches!(s, Slot::Pending { .. }))
            .count() as u32
    }

    /// A request arrived at `t`.
    pub(crate) fn arrival(&mut self, t: f64) {
        let h = (t / 3600.0) as usize;
        if self.arrivals.len() <= h {
            self.arrivals.resize(h + 1, 0);
        }
        self.arrivals[h] += 1;
    }

    /// Whether an evaluation is due at `t`.
    pub(crate) fn tick_due(&self, t: f64) -> bool {
        self.next_tick <= t
    }

    /// Replicas whose start-up ends by `t` come into service.
    pub(crate) fn ready(&mut self, t: f64) {
        for i in 0..self.slots.len() {
            if let Slot::Pending { ready } = self.slots[i]
                && ready <= t
            {
                self.set(i, Slot::Up, ready);
            }
        }
        self.peak = self.peak.max(self.in_service());
    }

    /// The evaluation at `t` with each slot's load.
    pub(crate) fn tick(&mut self, t: f64, loads: &[Load]) {
        let at = self.next_tick;
        self.next_tick = at + self.cfg.interval_s;
        let sum: f64 = (0..self.slots.len())
            .filter(|&i| self.slots[i] == Slot::Up)
            .map(|i| {
                let l = loads[i];
                match self.cfg.metric {
                    AutoscaleMetric::Concurrency => f64::from(l.waiting + l.running),
                    AutoscaleMetric::Queue => f64::from(l.waiting),
                    AutoscaleMetric::Kv => l.kv_fraction,
                }
            })
            .sum();
        let ordered = self.in_service() + self.pending();
        let per = sum / f64::from(ordered.max(1));
        let ratio = per / self.cfg.target;
        let desired = if (ratio - 1.0).abs() <= TOLERANCE {
            ordered
        } else {
            (f64::from(ordered) * ratio).ceil() as u32
        }
        .clamp(self.cfg.min_replicas, self.cfg.max_replicas);
        self.recommendations.push_back((t, desired));
        while self
            .recommendations
            .front()
            .is_some_and(|r| r.0 < t - self.cfg.cooldown_s)
        {
            self.recommendations.pop_front();
        }
        let new = if desired >= ordered {
            desired
        } else {
            let highest = self
                .recommendations
                .iter()
                .map(|r| r.1)
                .max()
                .unwrap_or(desired);
            highest.min(ordered)
        };
        if new == ordered {
            return;
        }
        self.events.push(ScaleEvent {
            time_s: t,
            from: ordered,
            to: new,
            metric: per,
        });
        if new > ordered {
            let mut k = new - ordered;
            // Draining replicas first: still loaded, back at once.
            for i in (0..self.slots.len()).rev() {
                if k > 0 && self.slots[i] == Slot::Draining {
                    self.set(i, Slot::Up, t);
                    k -= 1;
                }
            }
            for i in 0..self.slots.len() {
                if k > 0 && self.slots[i] == Slot::Off {
                    let to = if self.cfg.scale_up_delay_s > 0.0 {
                        Slot::Pending {
                            ready: t + self.cfg.scale_up_delay_s,
                        }
                    } else {
                        Slot::Up
                    };
                    self.set(i, to, t);
                    k -= 1;
                }
            }
            self.peak = self.peak.max(self.in_service());
        } else {
            let mut k = ordered - new;
            // Replicas still starting, newest first.
            while k > 0 {
                let newest = (0..self.slots.len())
                    .filter_map(|i| match self.slots[i] {
                        Slot::Pending { ready } => Some((ready, i)),
                        _ => None,
                    })
                    .max_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                let Some((_, i)) = newest else { break };
                self.set(i, Slot::Off, t);
                k -= 1;
            }
            for i in (0..self.slots.len()).rev() {
                if k > 0 && self.slots[i] == Slot::Up {
                    let to = if loads[i].busy {
                        Slot::Draining
                    } else {
                        Slot::Off
                    };
                    self.set(i, to, t);
                    k -= 1;
                }
            }
        }
    }

    /// Whether slot `i` is draining.
    pub(crate) fn draining(&self, i: usize) -> bool {
        self.slots[i] == Slot::Draining
    }

    /// Slot `i` finished draining at `t`.
    pub(crate) fn drained(&mut self, i: usize, t: f64) {
        if self.slots[i] == Slot::Draining {
            self.set(i, Slot::Off, t);
        }
    }

    /// The report of a run that ended at `end`.
    pub(crate) fn finish(mut self, end: f64) -> AutoscaleOutput {
        for i in 0..self.slots.len() {
            if self.slots[i] != Slot::Off {
                let from = self.since[i].min(end);
                self.set(i, Slot::Off, end.max(from));
            }
        }
        let hours = ((end / 3600.0).ceil() as usize)
            .max(self.arrivals.len())
            .max(1);
        let mut service = vec![0.0; hours];
        let mut gpu_s = vec![0.0; hours];
        let mut pending = vec![false; hours];
        for &(i, from, to, state) in &self.segments {
            let is_pending = matches!(state, Slot::Pending { .. });
            let from = from.min(end);
            let to = to.min(end);
            if to <= from {
                if is_pending && from < end {
                    pending[((from / 3600.0) as usize).min(hours - 1)] = true;
                }
                continue;
            }
            let first = (from / 3600.0) as usize;
            let last = (((to / 3600.0).ceil() as usize).max(first + 1)).min(hours);
            for h in first..last {
                let (a, b) = (h as f64 * 3600.0, (h + 1) as f64 * 3600.0);
                let o = (to.min(b) - from.max(a)).max(0.0);
                if o <= 0.0 {
                    continue;
                }
                gpu_s[h] += o * f64::from(self.tp[i]);
                if is_pending {
                    pending[h] = true;
                } else if state == Slot::Up {
                    service[h] += o;
                }
            }
        }
        let price = self.cfg.price_usd_per_gpu_hour;
        let hours: Vec<Hour> = (0..hours)
            .map(|h| {
                // The last hour may be partial: means over the part the run covers.
                let span = (end - h as f64 * 3600.0).clamp(1e-9, 3600.0);
                let gh = gpu_s[h] / 3600.0;
                Hour {
                    hour: h as u32,
                    arrivals: self.arrivals.get(h).copied().unwrap_or(0),
                    replicas: service[h] / span,
                    gpus: gpu_s[h] / span,
                    gpu_hours: gh,
                    cost_usd: price.map(|p| gh * p),
                    scale_up_pending: pending[h],
                    slo: None,
                }
            })
            .collect();
        let gpu_hours: f64 = hours.iter().map(|h| h.gpu_hours).sum();
        AutoscaleOutput {
            cost_usd: price.map(|p| gpu_hours * p),
            gpu_hours,
            hours,
            events: self.events,
            peak_replicas: self.peak,
            slo: None,
            missed_hours: Vec::new(),
            missed_while_scaling_up: Vec::new(),
            settings: self.cfg,
        }
    }
}
