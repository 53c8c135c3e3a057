//! The router: which replica of a pool serves a request, decided with what a real router sees
//! (its own bookkeeping of what it sent where, the replicas' load as they last reported it, the
//! blocks they cached as their KV events told it), on the cluster's clock.
//!
//! One file per router, one line each in [`ROUTERS`]. A router declares what it needs
//! ([`Needs`]: the request's block hashes, periodic load reports, KV events) and gets it in a
//! [`View`]; the driver ([`crate::cluster`]) keeps the view's reports as old as the router's
//! own reporting rules and `router_staleness_s` make them.
//!
//! | name | after | sees | picks |
//! |---|---|---|---|
//! | `vllm-dp` | vLLM v0.15.1's internal DP load balancer | `[waiting, running]` published every 100 ms (dense models: never, zeros every 5 s) + its own increments | min `4 waiting + running` |
//! | `random` | Vidur `random` | nothing | uniform |
//! | `round-robin` | production-stack / Vidur | its counter | next in turn |
//! | `least-requests` | least outstanding requests (Envoy, the routing benchmark's "least-loaded") | its own in-flight count | min, lowest index on ties |
//! | `least-kv` | llm-d's kv-cache-utilization scorer alone | KV usage scraped every 50 ms | min usage, random ties |
//! | `session` | production-stack `SessionRouter` | the session key | consistent hash; none: least QPS |
//! | `prefix-aware` | production-stack `PrefixAwareRouter` | its own trie of routed prompts | longest match, random among them |
//! | `llm-d` | llm-d / GIE's default profile | queue and KV scraped every 50 ms, its own prefix LRU | max `2 queue + 2 kv + 3 prefix` |
//! | `kv-aware` | Dynamo's KV router | KV events, its own active blocks | min `prefill blocks + decode blocks` |

use kvplan_workloads::Request;
use rand::rngs::ChaCha8Rng;

mod kv_aware;
mod llm_d;
mod load;
mod prefix_aware;
mod session;
mod vllm_dp;

pub use load::{KvIndex, KvView, Metrics};

/// What a router needs the driver to keep for it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Needs {
    /// The request's block hashes at this many tokens per block (its own chunking, or the
    /// replicas' block size when `0`).
    pub hash_block: Option<u32>,
    /// Load reports scraped at this period, seconds.
    pub scrape_s: Option<f64>,
    /// The replicas' KV events (blocks cached and evicted).
    pub kv_events: bool,
    /// First-token notices (a router that counts prefill work until the first token).
    pub first_tokens: bool,
    /// The replicas must cache prefixes (`enable_prefix_caching`).
    pub prefix_caching: bool,
    /// Each request's session ([`Routed::session`]).
    pub sessions: bool,
}

impl Needs {
    /// Nothing: a router that sees only its own bookkeeping.
    pub const NONE: Needs = Needs {
        hash_block: None,
        scrape_s: None,
        kv_events: false,
        first_tokens: false,
        prefix_caching: false,
        sessions: false,
    };
}

/// A request being routed.
#[derive(Debug)]
pub struct Routed<'a> {
    /// Its position in the run's input.
    pub index: usize,
    /// The request.
    pub request: &'a Request,
    /// Its prompt's full-block hashes at [`Needs::hash_block`] tokens per block (empty when
    /// the router needs none).
    pub hashes: &'a [u64],
    /// Its session (a conversation, a user of a shared-prefix load), if it has one and the
    /// router asks for sessions.
    pub session: Option<u64>,
}

/// What the router sees of a pool's replicas when it decides.
#[derive(Debug)]
pub struct View<'a> {
    /// Decision time (cluster clock).
    pub now: f64,
    /// Per replica: requests the router sent there that have not ended (its own count).
    pub in_flight: &'a [u64],
    /// Per replica: the load as last scraped ([`Needs::scrape_s`]; zeros for a router that
    /// scrapes nothing).
    pub metrics: &'a [Metrics],
    /// Per replica: KV blocks that hold KV (for utilisation).
    pub capacity_blocks: &'a [u32],
    /// Per replica: tokens per KV block.
    pub block_size: &'a [u32],
    /// The replicas' cached blocks as their KV events reported them (routers with
    /// [`Needs::kv_events`]).
    pub kv: Option<KvView<'a>>,
    /// Per replica: whether it is in service (an autoscaled pool: replicas still starting up,
    /// draining or stopped are not); `None`: all are. Only the routers in [`AUTOSCALE_ROUTERS`]
    /// read it.
    pub up: Option<&'a [bool]>,
}

impl View<'_> {
    /// Whether replica `i` may be picked.
    pub fn serves(&self, i: usize) -> bool {
        self.up.is_none_or(|u| u[i])
    }
}

/// The routers that pick only among the replicas in service ([`View::up`]), so the ones an
/// autoscaled pool may use: the others keep state per replica that assumes a fixed pool.
pub const AUTOSCALE_ROUTERS: &[&str] = &["least-requests", "round-robin", "random", "least-kv"];

/// A routing policy. `pick` returns a position in the pool (`0..view.in_flight.len()`).
pub trait Router: Send {
    /// The replica for `q`.
    fn pick(&mut self, q: &Routed<'_>, view: &View<'_>, rng: &mut ChaCha8Rng) -> usize;
    /// `q` was sent to `replica` (the router's own bookkeeping).
    fn routed(&mut self, _q: &Routed<'_>, _replica: usize) {}
    /// Request `index` on `replica` produced its first token.
    fn first_token(&mut self, _index: usize, _replica: usize) {}
    /// Request `index` on `replica` ended.
    fn ended(&mut self, _index: usize, _replica: usize) {}
    /// A scrape of the replicas' load at `now` ([`Needs::scrape_s`]).
    fn scrape(&mut self, _now: f64, _metrics: &[Metrics]) {}
}

/// What a router is made from.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Replicas in the pool.
    pub replicas: usize,
    /// Per replica: KV blocks that hold KV.
    pub capacity_blocks: Vec<u32>,
    /// Whether the model is a mixture of experts (vLLM v0.15.1's DP ranks report their load
    /// only then).
    pub moe: bool,
    /// Weights of the `llm-d` scorers (queue, KV utilisation, prefix).
    pub weights: Weights,
}

/// Scorer weights of the `llm-d` router (GIE's default profile: queue 2, KV utilisation 2,
/// prefix 3).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Weights {
    /// queue-scorer.
    pub queue: f64,
    /// kv-cache-utilization-scorer.
    pub kv: f64,
    /// prefix-cache-scorer.
    pub prefix: f64,
}

impl Default for Weights {
    fn default() -> Self {
        Weights {
            queue: 2.0,
            kv: 2.0,
            prefix: 3.0,
        }
    }
}

/// One router: its name, what it follows, what it needs and its factory.
pub struct RouterSpec {
    /// The name in files and flags.
    pub name: &'static str,
    /// One line for a command line's help.
    pub about: &'static str,
    /// What it needs.
    pub needs: Needs,
    /// A new router.
    pub new: fn(&Setup) -> Box<dyn Router>,
}

impl std::fmt::Debug for RouterSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RouterSpec")
            .field("name", &self.name)
            .finish()
    }
}

/// Every router, one line each.
pub static ROUTERS: &[RouterSpec] = &[
    vllm_dp::SPEC,
    simple::RANDOM,
    simple::ROUND_ROBIN,
    simple::LEAST_REQUESTS,
    simple::LEAST_KV,
    session::SPEC,
    prefix_aware::SPEC,
    llm_d::SPEC,
    kv_aware::SPEC,
];

mod simple;

crate::named::registry_kind!(
    /// A router by name ([`ROUTERS`]); the default is `vllm-dp`, vLLM's own.
    RouterKind,
    RouterSpec,
    ROUTERS,
    ROUTER_KINDS
);

/// The position of the smallest `score` (lowest position on ties).
pub(crate) fn argmin_first(n: usize, mut score: impl FnMut(usize) -> f64) -> usize {
    let mut best = (f64::INFINITY, 0);
    for i in 0..n {
        let s = score(i);
        if s < best.0 {
            best = (s, i);
        }
    }
    best.1
}

/// A uniformly random position among those whose score equals the best (`max` or min).
pub(crate) fn pick_best(
    n: usize,
    max: bool,
    rng: &mut ChaCha8Rng,
    mut score: impl FnMut(usize) -> f64,
) -> usize {
    use rand::RngExt;
    let scores: Vec<f64> = (0..n).map(&mut score).collect();
    let best = scores.iter().copied().fold(
        if max {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        },
        |a, b| if max { a.max(b) } else { a.min(b) },
    );
    let ties: Vec<usize> = (0..n).filter(|&i| scores[i] == best).collect();
    match ties.len() {
        0 => 0,
        1 => ties[0],
        k => ties[rng.random_range(0..k)],
    }
}
