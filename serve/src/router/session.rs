//! `session`: production-stack's `SessionRouter` (`src/vllm_router/routers/routing_logic.py`,
//! tag vllm-stack-0.1.12): a request with a session key goes where consistent hashing of the key
//! puts it (`uhashring`, 160 virtual nodes per endpoint), whatever the load; one without goes to
//! an endpoint it has never routed to, else to the one with the fewest requests routed in the
//! last 60 s (`_qps_routing`, a request-stats-window of 60), first in list order on ties.
//!
//! The session of a request is its conversation (the first turn's id) or, in a shared-prefix
//! load, its user (the last segment of its prefix). The ring hashes with kvplan's own mix, not
//! md5: the same spread, other positions.

use std::collections::VecDeque;

use rand::rngs::ChaCha8Rng;

use super::{Needs, Routed, Router, RouterSpec, Setup, View};

/// Virtual nodes per endpoint on the ring (uhashring's default).
const VNODES: u64 = 160;
/// The QPS window, seconds.
const WINDOW_S: f64 = 60.0;

pub(super) const SPEC: RouterSpec = RouterSpec {
    name: "session",
    about: "Consistent hashing of the session (conversation or user); none: fewest requests \
            routed in the last 60 s (production-stack's session router)",
    needs: Needs {
        sessions: true,
        ..Needs::NONE
    },
    new: |s: &Setup| Box::new(Session::new(s.replicas)),
};

struct Session {
    /// `(position on the ring, replica)`, sorted.
    ring: Vec<(u64, usize)>,
    /// Per replica: when requests were routed there (the last 60 s).
    recent: Vec<VecDeque<f64>>,
    seen: Vec<bool>,
    now: f64,
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Session {
    fn new(n: usize) -> Self {
        let mut ring: Vec<(u64, usize)> = (0..n)
            .flat_map(|r| (0..VNODES).map(move |v| (mix((r as u64) << 20 | v), r)))
            .collect();
        ring.sort_unstable();
        Session {
            ring,
            recent: vec![VecDeque::new(); n],
            seen: vec![false; n],
            now: 0.0,
        }
    }
}

impl Router for Session {
    fn pick(&mut self, q: &Routed<'_>, view: &View<'_>, _: &mut ChaCha8Rng) -> usize {
        self.now = view.now;
        if let Some(s) = q.session {
            let h = mix(s ^ 0x5e55_1011);
            let i = self.ring.partition_point(|&(p, _)| p < h) % self.ring.len();
            return self.ring[i].1;
        }
        if let Some(r) = self.seen.iter().position(|&s| !s) {
            return r;
        }
        for r in &mut self.recent {
            while r.front().is_some_and(|&t| t < view.now - WINDOW_S) {
                r.pop_front();
            }
        }
        super::argmin_first(self.recent.len(), |i| self.recent[i].len() as f64)
    }

    fn routed(&mut self, q: &Routed<'_>, replica: usize) {
        self.seen[replica] = true;
        let _ = q;
        self.recent[replica].push_back(self.now);
    }
}
