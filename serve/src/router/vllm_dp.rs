//! `vllm-dp`: vLLM's internal data-parallel load balancer, as v0.15.1 runs it (the default for
//! `data_parallel_size`; `vllm/v1/engine/core_client.py` `DPLBAsyncMPClient`,
//! `vllm/v1/engine/coordinator.py`, read from the v0.15.1 release).
//!
//! 1. There are as many API servers as replicas (`vllm/entrypoints/cli/serve.py`:
//!    `api_server_count = data_parallel_size`); the kernel spreads connections over them (here:
//!    each request to one uniformly at random). Each keeps its own `[waiting, running]` per
//!    engine.
//! 2. A server scans the engines from its start index `n_engines * client_index //
//!    client_count` and takes the first with the smallest `4 * waiting + running` (strict `<`),
//!    then adds `client_count` to that engine's waiting count (`get_core_engine_for_request`).
//!    Nothing is ever subtracted locally.
//! 3. The coordinator replaces every server's counts with the engines' reported
//!    `[len(waiting), len(running)]`, at most every 100 ms while they change and every 5 s
//!    otherwise (`DPCoordinatorProc`: `stats_update_interval_ms = 100`, a 5,000 ms heartbeat).
//! 4. In v0.15.1 only mixture-of-experts ranks (`DPEngineCoreProc`) send their counts; dense
//!    models' ranks are independent engines that never do (vLLM PR #49204 fixed this after
//!    0.15.1), so every 5 s the servers receive zeros and in between route round-robin from their
//!    start index.
//!
//! Not modelled: the one-step lag of the coordinator's point-in-time snapshot.

use rand::RngExt;
use rand::rngs::ChaCha8Rng;

use super::{Metrics, Needs, Routed, Router, RouterSpec, Setup, View};

/// The coordinator's publish period while counts change, seconds.
pub const PUBLISH_S: f64 = 0.1;
/// Its heartbeat when they do not, seconds.
pub const HEARTBEAT_S: f64 = 5.0;

pub(super) const SPEC: RouterSpec = RouterSpec {
    name: "vllm-dp",
    about: "vLLM's own data-parallel load balancer (v0.15.1): min 4 x waiting + running as \
            published every 100 ms, plus the API server's own increments",
    needs: Needs {
        scrape_s: Some(PUBLISH_S),
        ..Needs::NONE
    },
    new: |s: &Setup| Box::new(VllmDp::new(s.replicas, s.moe)),
};

struct VllmDp {
    /// Per API server, per engine: `[waiting, running]`.
    counts: Vec<Vec<[u64; 2]>>,
    /// What the coordinator last published, and when.
    published: Vec<[u64; 2]>,
    last_publish: f64,
    moe: bool,
}

impl VllmDp {
    fn new(n: usize, moe: bool) -> Self {
        VllmDp {
            counts: vec![vec![[0, 0]; n]; n],
            published: vec![[0, 0]; n],
            last_publish: 0.0,
            moe,
        }
    }
}

impl Router for VllmDp {
    fn pick(&mut self, _: &Routed<'_>, _: &View<'_>, rng: &mut ChaCha8Rng) -> usize {
        let n = self.counts.len();
        let client = if n > 1 { rng.random_range(0..n) } else { 0 };
        // `n_engines * client_index // client_count`, with as many API servers as engines.
        let start = client;
        let counts = &mut self.counts[client];
        let mut best = (u64::MAX, start);
        for i in 0..n {
            let idx = (start + i) % n;
            let [waiting, running] = counts[idx];
            let score = waiting * 4 + running;
            if score < best.0 {
                best = (score, idx);
            }
        }
        counts[best.1][0] += n as u64;
        best.1
    }

    fn scrape(&mut self, now: f64, metrics: &[Metrics]) {
        let moe = self.moe;
        let fresh: Vec<[u64; 2]> = if moe {
            metrics
                .iter()
                .map(|m| [u64::from(m.waiting), u64::from(m.running)])
                .collect()
        } else {
            vec![[0, 0]; metrics.len()]
        };
        let changed = moe && fresh != self.published;
        if changed || now - self.last_publish >= HEARTBEAT_S - 1e-9 {
            for c in &mut self.counts {
                c.clone_from(&fresh);
            }
            self.published = fresh;
            self.last_publish = now;
        }
    }
}
