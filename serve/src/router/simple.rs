//! Routers that need no index: `random` and `round-robin` (Vidur's global schedulers,
//! `vidur/scheduler/global_scheduler/`, and production-stack's `RoundRobinRouter`),
//! `least-requests` (fewest requests in flight as the router counts them) and `least-kv`
//! (llm-d's kv-cache-utilization scorer alone).

use rand::RngExt;
use rand::rngs::ChaCha8Rng;

use super::{Needs, Routed, Router, RouterSpec, Setup, View, pick_best};

/// `random`: uniform over the pool (Vidur's `RandomGlobalScheduler`: `randint(1, n) - 1`).
pub const RANDOM: RouterSpec = RouterSpec {
    name: "random",
    about: "Uniformly random replica (Vidur's random global scheduler)",
    needs: Needs::NONE,
    new: |_| Box::new(Random),
};

struct Random;

impl Router for Random {
    fn pick(&mut self, _: &Routed<'_>, view: &View<'_>, rng: &mut ChaCha8Rng) -> usize {
        match view.up {
            None => rng.random_range(0..view.in_flight.len()),
            Some(up) => {
                let live: Vec<usize> = (0..up.len()).filter(|&i| up[i]).collect();
                live[rng.random_range(0..live.len())]
            }
        }
    }
}

/// `round-robin`: each replica in turn (production-stack's `RoundRobinRouter`, a counter over
/// the sorted endpoints; Vidur's default).
pub const ROUND_ROBIN: RouterSpec = RouterSpec {
    name: "round-robin",
    about: "Each replica in turn (production-stack's and Vidur's round robin)",
    needs: Needs::NONE,
    new: |_| Box::new(RoundRobin(0)),
};

struct RoundRobin(usize);

impl Router for RoundRobin {
    fn pick(&mut self, _: &Routed<'_>, view: &View<'_>, _: &mut ChaCha8Rng) -> usize {
        let n = view.in_flight.len();
        let mut r = self.0 % n;
        self.0 = self.0.wrapping_add(1);
        // Past the replicas out of service (at least one is in).
        while !view.serves(r) {
            r = self.0 % n;
            self.0 = self.0.wrapping_add(1);
        }
        r
    }
}

/// `least-requests`: the replica with the fewest requests the router sent and has not seen end
/// (least outstanding requests as a proxy counts them: llm-d's active-request scorer, +1 when a
/// request is sent, -1 when its response completes, alone with the max-score picker, whose ties
/// go uniformly at random; the routing benchmark's "least-loaded (in-flight)"). Vidur's `lor`
/// counts only requests not yet admitted to a batch (a proxy cannot see that) and breaks ties to
/// the lowest index, which at light load sends the first replica more than its share.
pub const LEAST_REQUESTS: RouterSpec = RouterSpec {
    name: "least-requests",
    about: "Fewest requests in flight as the router counts them (least outstanding requests)",
    needs: Needs::NONE,
    new: |_| Box::new(LeastRequests),
};

struct LeastRequests;

impl Router for LeastRequests {
    fn pick(&mut self, _: &Routed<'_>, view: &View<'_>, rng: &mut ChaCha8Rng) -> usize {
        pick_best(view.in_flight.len(), false, rng, |i| {
            if view.serves(i) {
                view.in_flight[i] as f64
            } else {
                f64::INFINITY
            }
        })
    }
}

/// `least-kv`: the lowest KV-cache usage as scraped (llm-d's kv-cache-utilization scorer,
/// `1 - usage`, with the max-score picker's random tie-break; the EPP scrapes `/metrics` every
/// 50 ms: GIE v1.5.0's refresh-metrics-interval option).
pub const LEAST_KV: RouterSpec = RouterSpec {
    name: "least-kv",
    about: "Lowest KV-cache usage, scraped every 50 ms (llm-d's kv-cache-utilization scorer)",
    needs: Needs {
        scrape_s: Some(0.05),
        ..Needs::NONE
    },
    new: |_: &Setup| Box::new(LeastKv),
};

struct LeastKv;

impl Router for LeastKv {
    fn pick(&mut self, _: &Routed<'_>, view: &View<'_>, rng: &mut ChaCha8Rng) -> usize {
        pick_best(view.metrics.len(), false, rng, |i| {
            if view.serves(i) {
                f64::from(view.metrics[i].kv_used) / f64::from(view.capacity_blocks[i].max(1))
            } else {
                f64::INFINITY
            }
        })
    }
}
