//! An autoscaler for a colocated cluster: the fleet it runs on the cluster's clock, its
//! settings (`[cluster.autoscale]`, [`super::scaling`]) and its hourly report
//! (`crate::output::autoscale`). The rule is the Kubernetes HPA's; see [`super::scaling`].

use std::collections::VecDeque;

pub use crate::output::autoscale::*;
pub use crate::scaling::*;

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
        let ordered = self.in_service() + self.pending();
        let per = self.metric_per_replica(loads, ordered);
        let new = self.recommend(t, ordered, per);
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
            self.scale_up(new - ordered, t);
        } else {
            self.scale_down(ordered - new, t, loads);
        }
    }

    /// The metric summed over the replicas in service, per replica `ordered` (in service and
    /// starting).
    fn metric_per_replica(&self, loads: &[Load], ordered: u32) -> f64 {
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
        sum / f64::from(ordered.max(1))
    }

    /// The replica count to order at `t` from `ordered` with `per` of the metric each: the
    /// HPA's desired count (within the tolerance, no change), bounded; a scale-down no lower
    /// than the highest recommendation within the cooldown.
    fn recommend(&mut self, t: f64, ordered: u32, per: f64) -> u32 {
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
        if desired >= ordered {
            desired
        } else {
            let highest = self
                .recommendations
                .iter()
                .map(|r| r.1)
                .max()
                .unwrap_or(desired);
            highest.min(ordered)
        }
    }

    /// `k` more replicas at `t`: draining ones first (still loaded, back at once), then
    /// slots off, which start up.
    fn scale_up(&mut self, mut k: u32, t: f64) {
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
    }

    /// `k` fewer replicas at `t`: those still starting, newest first, then replicas in
    /// service from the last, a busy one draining.
    fn scale_down(&mut self, mut k: u32, t: f64, loads: &[Load]) {
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
