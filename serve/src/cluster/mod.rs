//! Replicas behind a router, on one clock: the driver that runs every engine of a cluster (one,
//! for a plain `serve`), routes each request when the client sends it, and moves KV between a
//! prefill and a decode pool.
//!
//! Events run in time order: the router's (a load scrape, a request sent, a closed-loop
//! follower released) before an engine's pass at the same instant, engines in index order. A
//! request is routed when it is sent, with what the router sees then ([`crate::router`]), and
//! reaches its replica's engine after the router's own latency and the replica's frontend hop
//! (`[serving] frontend_us`), so its TTFT includes both.
//!
//! Disaggregated (`cluster.prefill_replicas` P, `cluster.decode_replicas` D), a request follows
//! vLLM's disaggregated serving with the NIXL connector (v0.15.1, `nixl_connector.py` and the
//! toy proxy): the router sends it to a prefill replica with `max_tokens=1`; when that finishes,
//! the proxy sends it to a decode replica (routed then), which allocates blocks for the prompt
//! past its own prefix hit and reads them from the prefill replica's GPU (one RDMA read per
//! request, on both replicas' network links: `[interconnect]`), then recomputes the prompt's
//! last token and generates. The prefill replica keeps the blocks until the read is done
//! (back-pressure). With `kv_transfer = "layerwise"` the prefill replica pushes each step's KV
//! layer by layer as it computes it (DistServe, Mooncake), to a decode replica chosen when the
//! request is sent; the decode replica takes it once the last layer has arrived.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use kvplan_vocab::hardware::Interconnect;
use kvplan_vocab::{Progress, Silent};
use kvplan_workloads::{Request, RequestStream};
use rand::SeedableRng;
use rand::rngs::ChaCha8Rng;
use rustc_hash::FxHashMap;

use crate::config::Resolved;
use crate::engine::{Delivery, Engine, Outbox, Part};
use crate::error::Error;
use crate::iteration::IterationTimer;
use crate::output::{RequestRecord, ServeReport, Status, SummaryAcc, Totals};
use crate::record::MAX_RECORDED_REQUESTS;
use crate::router::{
    KvIndex, KvView, Metrics, Needs, Routed, Router, RouterKind, Setup, View, Weights,
};
use crate::tier::{CpuTier, TierStats};

pub mod autoscale;
/// An autoscaler's settings (moved to [`crate::scaling`]; this path still names them).
pub use crate::scaling;
pub mod scenario;

pub use crate::output::cluster::{Binding, ClusterOutput, PoolStats, ReplicaOutput, TransferStats};
pub use crate::roles::{KvTransfer, Role};

/// What a cluster run reports beside its summary (`crate::output::cluster`).
pub mod output {
    pub use crate::output::cluster::*;
}

/// One replica, ready to run.
#[derive(Debug)]
pub struct ReplicaPlan {
    /// Its name in outputs (`r0`, `p0`, `d1`, ...).
    pub name: String,
    /// Its place.
    pub role: Role,
    /// The GPU profile's name.
    pub hardware: String,
    /// Tensor-parallel GPUs.
    pub tensor_parallel_size: u32,
    /// Its step timer.
    pub timer: IterationTimer,
    /// Its checked settings.
    pub resolved: Resolved,
    /// Client to engine, seconds.
    pub frontend_s: f64,
    /// Its network link.
    pub interconnect: Interconnect,
    /// Its CPU tier, if any.
    pub tier: Option<CpuTier>,
}

/// A cluster, ready to run.
pub struct ClusterPlan {
    /// The replicas (prefill ones first when disaggregated).
    pub replicas: Vec<ReplicaPlan>,
    /// The router.
    pub router: RouterKind,
    /// How much older than the router's own rules the load and KV events it sees are, seconds.
    pub staleness_s: f64,
    /// The router's time per request, seconds.
    pub router_latency_s: f64,
    /// The `llm-d` router's scorer weights.
    pub weights: Weights,
    /// Seed of the router's draws.
    pub seed: u64,
    /// How KV moves from prefill to decode replicas.
    pub transfer: KvTransfer,
    /// Whether the model is a mixture of experts.
    pub moe: bool,
    /// Whether to build the per-replica outputs.
    pub per_replica: bool,
    /// The autoscaler of a colocated pool (the replicas are then its slots).
    pub autoscale: Option<autoscale::Autoscale>,
}

impl std::fmt::Debug for ClusterPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterPlan")
            .field("replicas", &self.replicas.len())
            .field("router", &self.router)
            .finish()
    }
}

/// Runs `requests` (sorted by arrival) on `plan`'s cluster.
pub fn simulate_cluster(plan: ClusterPlan, requests: &[Request]) -> Result<ServeReport, Error> {
    check_arrivals(requests)?;
    let n = requests.len() as u64;
    let closed = ClosedLoop::of(requests);
    run(plan, requests.iter().cloned(), n, closed, &Silent)
}

/// [`simulate_cluster`] on a stream drawn as the engines take it.
pub fn simulate_cluster_stream(
    plan: ClusterPlan,
    requests: RequestStream,
    progress: &dyn Progress,
) -> Result<ServeReport, Error> {
    let n = requests.len();
    if plan
        .replicas
        .iter()
        .any(|r| r.resolved.config.record_requests)
        && n > MAX_RECORDED_REQUESTS
    {
        return Err(Error::TooManyRecords {
            requests: n,
            max: MAX_RECORDED_REQUESTS,
        });
    }
    if requests.closed_loop() {
        let held = match requests.into_held() {
            Ok(v) => v,
            Err(_) => unreachable!("a closed-loop stream holds its requests"),
        };
        check_arrivals(&held)?;
        let closed = ClosedLoop::of(&held);
        return run(plan, held.into_iter(), n, closed, progress);
    }
    run(plan, requests, n, None, progress)
}

/// Requests sorted by arrival, arrivals finite and non-negative.
pub(crate) fn check_arrivals(requests: &[Request]) -> Result<(), Error> {
    for (i, w) in requests.windows(2).enumerate() {
        if w[1].arrival_s.total_cmp(&w[0].arrival_s) == Ordering::Less {
            return Err(Error::UnsortedRequests { index: i + 1 });
        }
    }
    if let Some(i) = requests
        .iter()
        .position(|r| !r.arrival_s.is_finite() || r.arrival_s < 0.0)
    {
        return Err(Error::BadArrival { index: i });
    }
    Ok(())
}

/// Closed-loop bookkeeping, for inputs where some request follows another.
pub(crate) struct ClosedLoop {
    /// Request id to index.
    index_of: FxHashMap<u64, usize>,
    /// Requests waiting for each request to end.
    followers: Vec<Vec<usize>>,
    /// When each request ended: finished or rejected (NaN: not yet).
    ended: Vec<f64>,
}

impl ClosedLoop {
    pub(crate) fn of(requests: &[Request]) -> Option<ClosedLoop> {
        requests
            .iter()
            .any(|r| r.follows.is_some())
            .then(|| ClosedLoop {
                index_of: requests
                    .iter()
                    .enumerate()
                    .map(|(i, r)| (r.id, i))
                    .collect(),
                followers: vec![Vec::new(); requests.len()],
                ended: vec![f64::NAN; requests.len()],
            })
    }
}

/// A request sent at `time` (client clock), ordered earliest first, then by index.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Release {
    time: f64,
    index: usize,
}

impl Eq for Release {}
impl PartialOrd for Release {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Release {
    /// Reversed: the std max-heap pops the earliest first.
    fn cmp(&self, o: &Self) -> Ordering {
        o.time
            .total_cmp(&self.time)
            .then_with(|| o.index.cmp(&self.index))
    }
}

/// Requests served between two progress reports.
const PROGRESS_EVERY: u64 = 4096;

/// A pool of replicas one router serves.
struct Pool {
    /// Engine indices.
    members: Vec<usize>,
    router: Box<dyn Router>,
    needs: Needs,
    hash_block: u32,
    in_flight: Vec<u64>,
    /// The load as last scraped.
    metrics: Vec<Metrics>,
    next_scrape: f64,
    /// Per member: `(time, load)` after each pass, kept when the router sees load late.
    history: Option<Vec<VecDeque<(f64, Metrics)>>>,
    kv: Option<KvIndex>,
    /// The router reads the replicas' prefix caches for their KV events.
    live_kv: bool,
    /// KV events not yet seen by the router: `(time, member, hash, stored)`.
    kv_queue: VecDeque<(f64, usize, u64, bool)>,
    capacity_blocks: Vec<u32>,
    block_size: Vec<u32>,
    routed: Vec<u64>,
}

/// Where a request is, for the router's bookkeeping and the disaggregated hand-over.
#[derive(Debug, Clone, Copy)]
struct Placed {
    pool: usize,
    member: usize,
    /// Decode replica chosen up front (layer-wise push).
    decode: Option<usize>,
}

/// A transfer of one request's KV.
#[derive(Debug, Clone, Copy, Default)]
struct Transfer {
    /// When the pushes end (layer-wise).
    pushed: f64,
    /// Seconds of the pull or the tail of the pushes after the prefill.
    seconds: f64,
}

struct Driver<'a, I> {
    engines: Vec<Engine<'a>>,
    plans: Vec<ReplicaMeta>,
    pools: Vec<Pool>,
    /// Per engine: its pool and its place in it.
    place: Vec<(usize, usize)>,
    disaggregated: bool,
    transfer: KvTransfer,
    staleness_s: f64,
    router_latency_s: f64,
    rng: ChaCha8Rng,
    input: I,
    peeked: Option<Request>,
    last_arrival: f64,
    next_index: usize,
    closed: Option<ClosedLoop>,
    /// Followers released, by send time.
    released: BinaryHeap<Release>,
    /// Requests held while they wait for their predecessor, by input position.
    parked: FxHashMap<usize, Request>,
    /// Requests routed and not ended.
    placed: FxHashMap<usize, Placed>,
    /// Requests handed to a decode replica: the request and its original send.
    handoff: FxHashMap<usize, (Request, f64)>,
    transfers: FxHashMap<usize, Transfer>,
    /// The prefill replica of each request handed over, until it is reported.
    prefill_of: FxHashMap<usize, u32>,
    sessions: Option<FxHashMap<u64, u64>>,
    /// Per engine: when its network link is next free (reads into it, reads from it).
    nic_free: Vec<[f64; 2]>,
    nic_busy: Vec<f64>,
    acc: SummaryAcc,
    replica_acc: Option<Vec<SummaryAcc>>,
    records: Option<Vec<RequestRecord>>,
    record_index: Vec<usize>,
    retired: u64,
    progress: &'a dyn Progress,
    outbox: Outbox,
    events: Vec<(u64, bool)>,
    hashes: Vec<u64>,
    transfer_stats: TransferStats,
    /// The autoscaled fleet (a colocated pool whose members are its slots).
    fleet: Option<autoscale::Fleet>,
}

/// What the driver keeps of a replica's plan besides its engine.
struct ReplicaMeta {
    name: String,
    role: Role,
    hardware: String,
    tp: u32,
    frontend_s: f64,
    interconnect: Interconnect,
    /// K and V bytes per token, all ranks.
    kv_token_bytes: u64,
    block_size: u32,
    layers: u32,
}

fn run<I: Iterator<Item = Request>>(
    plan: ClusterPlan,
    input: I,
    total: u64,
    closed: Option<ClosedLoop>,
    progress: &dyn Progress,
) -> Result<ServeReport, Error> {
    let ClusterPlan {
        replicas,
        router,
        staleness_s,
        router_latency_s,
        weights,
        seed,
        transfer,
        moe,
        per_replica,
        autoscale,
    } = plan;
    let fleet = autoscale.map(|a| {
        autoscale::Fleet::new(a, replicas.iter().map(|r| r.tensor_parallel_size).collect())
    });
    let resolved: Vec<Resolved> = replicas.iter().map(|r| r.resolved.clone()).collect();
    let disaggregated = replicas.iter().any(|r| r.role != Role::Colocated);
    let (mut engines, metas) = build_engines(replicas, &resolved);
    let records = reserve_records(&resolved, total)?;
    let spec = router.spec();
    let pools = PoolSettings {
        router,
        staleness_s,
        moe,
        weights,
    }
    .build(disaggregated, &metas, &resolved, &mut engines);
    progress.start(total, "requests served");
    let n_engines = engines.len();
    let place = places(&pools, n_engines);
    let mut d = Driver {
        replica_acc: (per_replica && n_engines > 1)
            .then(|| (0..n_engines).map(|_| SummaryAcc::default()).collect()),
        engines,
        plans: metas,
        pools,
        place,
        disaggregated,
        transfer,
        staleness_s,
        router_latency_s,
        rng: ChaCha8Rng::seed_from_u64(seed ^ 0x726f_7574_6572),
        input,
        peeked: None,
        last_arrival: 0.0,
        next_index: 0,
        closed,
        released: BinaryHeap::new(),
        parked: FxHashMap::default(),
        placed: FxHashMap::default(),
        handoff: FxHashMap::default(),
        transfers: FxHashMap::default(),
        prefill_of: FxHashMap::default(),
        sessions: spec.needs.sessions.then(FxHashMap::default),
        nic_free: vec![[0.0; 2]; n_engines],
        nic_busy: vec![0.0; n_engines],
        acc: SummaryAcc::default(),
        records,
        record_index: Vec::new(),
        retired: 0,
        progress,
        outbox: Outbox::default(),
        events: Vec::new(),
        hashes: Vec::new(),
        transfer_stats: TransferStats::default(),
        fleet,
    };
    d.pull()?;
    d.run()?;
    d.finish(&resolved)
}

/// Per engine (of `n_engines`): its pool and its place in it.
fn places(pools: &[Pool], n_engines: usize) -> Vec<(usize, usize)> {
    let mut place = vec![(0, 0); n_engines];
    for (p, pool) in pools.iter().enumerate() {
        for (m, &i) in pool.members.iter().enumerate() {
            place[i] = (p, m);
        }
    }
    place
}

/// Each replica's engine (on its checked settings in `resolved`, in the same order) and what
/// the driver keeps of its plan.
fn build_engines<'a>(
    replicas: Vec<ReplicaPlan>,
    resolved: &'a [Resolved],
) -> (Vec<Engine<'a>>, Vec<ReplicaMeta>) {
    let mut engines = Vec::with_capacity(replicas.len());
    let mut metas = Vec::with_capacity(replicas.len());
    for (r, res) in replicas.into_iter().zip(resolved) {
        let m = r.timer.model();
        metas.push(ReplicaMeta {
            name: r.name,
            role: r.role,
            hardware: r.hardware,
            tp: r.tensor_parallel_size,
            frontend_s: r.frontend_s.max(0.0),
            interconnect: r.interconnect,
            kv_token_bytes: m.kv_bytes_per_token() * u64::from(r.tensor_parallel_size.max(1)),
            block_size: res.config.block_size,
            layers: m.num_layers,
        });
        let mut e = Engine::new(r.timer, res);
        if let Some(t) = r.tier {
            e = e.with_tier(t);
        }
        if r.role == Role::Decode {
            e = e.with_remote();
        }
        engines.push(e);
    }
    (engines, metas)
}

/// Room for one record per request where any replica keeps them (`None` where none does):
/// held to the end, so reserved whole, and the run fails now rather than after hours.
fn reserve_records(resolved: &[Resolved], total: u64) -> Result<Option<Vec<RequestRecord>>, Error> {
    if !resolved.iter().any(|r| r.config.record_requests) {
        return Ok(None);
    }
    let mut v = Vec::new();
    usize::try_from(total)
        .ok()
        .and_then(|n| v.try_reserve_exact(n).ok())
        .ok_or(Error::OutOfMemory {
            what: "one record per request",
            bytes: total.saturating_mul(std::mem::size_of::<RequestRecord>() as u64),
        })?;
    Ok(Some(v))
}

/// The router's settings every pool is built with.
struct PoolSettings {
    router: RouterKind,
    staleness_s: f64,
    moe: bool,
    weights: Weights,
}

impl PoolSettings {
    /// The pools a router serves: one of every replica, or (`disaggregated`) the prefill
    /// replicas and the decode ones; each with the router's state for its members. Engines
    /// whose KV events the router sees late are set to record them.
    fn build(
        self,
        disaggregated: bool,
        metas: &[ReplicaMeta],
        resolved: &[Resolved],
        engines: &mut [Engine<'_>],
    ) -> Vec<Pool> {
        let roles: Vec<Vec<usize>> = if disaggregated {
            [Role::Prefill, Role::Decode]
                .iter()
                .map(|&role| {
                    (0..metas.len())
                        .filter(|&i| metas[i].role == role)
                        .collect()
                })
                .collect()
        } else {
            vec![(0..metas.len()).collect()]
        };
        roles
            .into_iter()
            .map(|members| self.pool(members, metas, resolved, engines))
            .collect()
    }

    /// The pool of `members` (engine indices).
    fn pool(
        &self,
        members: Vec<usize>,
        metas: &[ReplicaMeta],
        resolved: &[Resolved],
        engines: &mut [Engine<'_>],
    ) -> Pool {
        let spec = self.router.spec();
        let staleness_s = self.staleness_s;
        let n = members.len();
        let capacity_blocks: Vec<u32> =
            members.iter().map(|&i| resolved[i].usable_blocks).collect();
        let block_size: Vec<u32> = members.iter().map(|&i| metas[i].block_size).collect();
        let setup = Setup {
            replicas: n,
            capacity_blocks: capacity_blocks.clone(),
            moe: self.moe,
            weights: self.weights,
        };
        // One replica needs no router: nothing is kept for it.
        let needs = if n > 1 { spec.needs } else { Needs::NONE };
        // KV events that reach the router at once say what the engines' prefix caches hold:
        // it reads those instead (the same answers, without keeping an index).
        let events = needs.kv_events && staleness_s > 0.0;
        if events {
            for &i in &members {
                engines[i].record_kv_events();
            }
        }
        let hash_block = match needs.hash_block {
            Some(0) => block_size[0],
            Some(b) => b,
            None => 0,
        };
        Pool {
            router: (spec.new)(&setup),
            needs,
            hash_block,
            in_flight: vec![0; n],
            metrics: vec![Metrics::default(); n],
            next_scrape: 0.0,
            history: (needs.scrape_s.is_some() && staleness_s > 0.0)
                .then(|| vec![VecDeque::from([(f64::NEG_INFINITY, Metrics::default())]); n]),
            kv: events.then(|| KvIndex::new(n)),
            live_kv: needs.kv_events && !events,
            kv_queue: VecDeque::new(),
            capacity_blocks,
            block_size,
            routed: vec![0; n],
            members,
        }
    }
}

impl<I: Iterator<Item = Request>> Driver<'_, I> {
    /// Draws the next request of the input into `peeked`, checking its arrival time.
    fn pull(&mut self) -> Result<(), Error> {
        self.peeked = self.input.next();
        if let Some(q) = &self.peeked {
            let index = self.next_index;
            if !q.arrival_s.is_finite() || q.arrival_s < 0.0 {
                return Err(Error::BadArrival { index });
            }
            if index > 0 && q.arrival_s.total_cmp(&self.last_arrival) == Ordering::Less {
                return Err(Error::UnsortedRequests { index });
            }
            self.last_arrival = q.arrival_s;
        }
        Ok(())
    }

    /// The next router event's time: a scrape, a request sent, a follower released.
    fn next_router_time(&self) -> Option<f64> {
        let mut t = self.peeked.as_ref().map(|q| q.arrival_s);
        if let Some(r) = self.released.peek() {
            t = Some(t.map_or(r.time, |a| a.min(r.time)));
        }
        // Scrapes and the autoscaler only matter while requests may still be routed.
        if t.is_some()
            && let Some(f) = &self.fleet
        {
            t = t.map(|a| a.min(f.next_time()));
        }
        if t.is_some() {
            for p in &self.pools {
                if p.needs.scrape_s.is_some() {
                    t = Some(t.map_or(p.next_scrape, |a: f64| a.min(p.next_scrape)));
                }
            }
        }
        t
    }

    fn run(&mut self) -> Result<(), Error> {
        loop {
            let router = self.next_router_time();
            let mut engine: Option<(usize, f64)> = None;
            for (i, e) in self.engines.iter().enumerate() {
                if let Some(t) = e.next_time()
                    && engine.is_none_or(|(_, b)| t < b)
                {
                    engine = Some((i, t));
                }
            }
            match (router, engine) {
                (Some(a), Some((_, b))) if a <= b => self.router_event(a)?,
                (Some(a), None) => self.router_event(a)?,
                (_, Some((i, _))) => self.engine_pass(i)?,
                (None, None) => break,
            }
        }
        if let Some(e) = self.engines.iter().find(|e| e.has_work()) {
            return Err(Error::Stalled {
                time_s: e.now(),
                waiting: e.waiting(),
                swapped: 0,
            });
        }
        Ok(())
    }

    /// The router's event at `t`: scrapes first, then a request sent from the stream, then a
    /// released follower (ties: the stream first).
    fn router_event(&mut self, t: f64) -> Result<(), Error> {
        if self.fleet.as_ref().is_some_and(|f| f.next_time() <= t) {
            self.fleet_event(t);
            return Ok(());
        }
        for p in 0..self.pools.len() {
            if let Some(period) = self.pools[p].needs.scrape_s
                && self.pools[p].next_scrape <= t
            {
                let at = self.pools[p].next_scrape;
                self.scrape(p, at);
                self.pools[p].next_scrape = if period > 0.0 {
                    at + period
                } else {
                    f64::INFINITY
                };
                return Ok(());
            }
        }
        let stream = self.peeked.as_ref().map(|q| q.arrival_s);
        let released = self.released.peek().map(|r| r.time);
        match (stream, released) {
            (Some(a), Some(b)) if b < a => self.send_released(),
            (None, Some(_)) => self.send_released(),
            (Some(_), _) => self.send_from_stream(),
            (None, None) => Ok(()),
        }
    }

    /// The autoscaler at `t`: replicas done starting come into service, then an evaluation if
    /// one is due, on the replicas' load as they report it now.
    fn fleet_event(&mut self, t: f64) {
        let Some(f) = &mut self.fleet else {
            return;
        };
        f.ready(t);
        if f.tick_due(t) {
            let loads: Vec<autoscale::Load> = (self.engines.iter().enumerate())
                .map(|(i, e)| autoscale::Load {
                    waiting: e.waiting() as u32,
                    running: e.running() as u32,
                    kv_fraction: f64::from(e.kv_used())
                        / f64::from(self.pools[0].capacity_blocks[i].max(1)),
                    busy: e.has_work(),
                })
                .collect();
            f.tick(t, &loads);
        }
    }

    fn send_released(&mut self) -> Result<(), Error> {
        let r = self.released.pop().expect("a released request");
        let q = self.parked.remove(&r.index).expect("a parked follower");
        self.send(r.index, q, r.time)
    }

    /// The next request of the stream: sent now, or (a follower) released later.
    fn send_from_stream(&mut self) -> Result<(), Error> {
        let q = self.peeked.take().expect("a request drawn");
        let i = self.next_index;
        self.next_index += 1;
        self.pull()?;
        if let Some(c) = &mut self.closed
            && let Some(f) = q.follows
            && let Some(&p) = c.index_of.get(&f.request)
            && p != i
        {
            if c.ended[p].is_nan() {
                c.followers[p].push(i);
                self.parked.insert(i, q);
                return Ok(());
            }
            let t = (c.ended[p] + f.think_s).max(q.arrival_s);
            if t > q.arrival_s {
                self.parked.insert(i, q);
                self.released.push(Release { time: t, index: i });
                return Ok(());
            }
        }
        let t = q.arrival_s;
        self.send(i, q, t)
    }

    /// Request `index` is sent at `t`: routed and delivered.
    fn send(&mut self, index: usize, q: Request, t: f64) -> Result<(), Error> {
        if let Some(f) = &mut self.fleet {
            f.arrival(t);
        }
        let session = self.session_of(&q);
        let member = self.route(0, index, &q, session, t);
        let engine = self.pools[0].members[member];
        let decode = if self.disaggregated && self.transfer == KvTransfer::Layerwise {
            Some(self.route(1, index, &q, session, t))
        } else {
            None
        };
        self.placed.insert(
            index,
            Placed {
                pool: 0,
                member,
                decode,
            },
        );
        let part = if self.disaggregated {
            self.handoff.insert(index, (q.clone(), t));
            Part::Prefill {
                push: self.transfer == KvTransfer::Layerwise,
            }
        } else {
            Part::Whole
        };
        let at = t + self.plans[engine].frontend_s + self.router_latency_s;
        self.engines[engine].deliver(Delivery {
            request: q,
            index,
            sent_s: t,
            at_s: at,
            role: part,
        })
    }

    fn session_of(&mut self, q: &Request) -> Option<u64> {
        let sessions = self.sessions.as_mut()?;
        let s = match q.follows {
            Some(f) => sessions.get(&f.request).copied(),
            None => None,
        }
        .or_else(|| q.prefix.as_ref().and_then(|p| p.last()).map(|s| s.id));
        if let Some(s) = s {
            sessions.insert(q.id, s);
        }
        s
    }

    /// Picks a member of pool `p` for request `index` at `t`.
    fn route(
        &mut self,
        p: usize,
        index: usize,
        q: &Request,
        session: Option<u64>,
        t: f64,
    ) -> usize {
        let n = self.pools[p].members.len();
        let member = if n == 1 {
            0
        } else {
            self.catch_up(p, t);
            let up = match &self.fleet {
                Some(f) if p == 0 => Some(f.up.as_slice()),
                _ => None,
            };
            let pool = &mut self.pools[p];
            if pool.hash_block > 0 {
                crate::kv_cache::prompt_hashes(q, pool.hash_block, usize::MAX, &mut self.hashes);
            } else {
                self.hashes.clear();
            }
            let routed = Routed {
                index,
                request: q,
                hashes: &self.hashes,
                session,
            };
            let kv = match (&pool.kv, pool.live_kv) {
                (Some(k), _) => Some(KvView::Index(k)),
                (None, true) => Some(KvView::Live(
                    pool.members
                        .iter()
                        .map(|&i| self.engines[i].st.kv.pool())
                        .collect(),
                )),
                (None, false) => None,
            };
            let view = View {
                now: t,
                in_flight: &pool.in_flight,
                metrics: &pool.metrics,
                capacity_blocks: &pool.capacity_blocks,
                block_size: &pool.block_size,
                kv,
                up,
            };
            let m = pool.router.pick(&routed, &view, &mut self.rng).min(n - 1);
            pool.router.routed(&routed, m);
            m
        };
        let pool = &mut self.pools[p];
        pool.in_flight[member] += 1;
        pool.routed[member] += 1;
        member
    }

    /// Brings pool `p`'s view of KV events up to `t` less the staleness.
    fn catch_up(&mut self, p: usize, t: f64) {
        let limit = t - self.staleness_s;
        let pool = &mut self.pools[p];
        if let Some(kv) = &mut pool.kv {
            while pool.kv_queue.front().is_some_and(|e| e.0 <= limit) {
                let (_, m, h, stored) = pool.kv_queue.pop_front().expect("an event");
                kv.apply(m, h, stored);
            }
        }
    }

    /// Pool `p`'s scrape at `at`: the load as it was `staleness` earlier.
    fn scrape(&mut self, p: usize, at: f64) {
        let limit = at - self.staleness_s;
        let pool = &mut self.pools[p];
        match &mut pool.history {
            Some(h) => {
                for (k, q) in h.iter_mut().enumerate() {
                    while q.len() > 1 && q[1].0 <= limit {
                        q.pop_front();
                    }
                    pool.metrics[k] = q.front().map_or(Metrics::default(), |e| e.1);
                }
            }
            None => {
                for (k, &i) in pool.members.iter().enumerate() {
                    pool.metrics[k] = metrics_of(&self.engines[i]);
                }
            }
        }
        let metrics = pool.metrics.clone();
        pool.router.scrape(at, &metrics);
    }

    /// The pool of engine `engine` and its place in it.
    fn pool_of(&self, engine: usize) -> (usize, usize) {
        self.place[engine]
    }

    fn engine_pass(&mut self, i: usize) -> Result<(), Error> {
        let before = self.engines[i].next_time().unwrap_or(0.0);
        let mut out = std::mem::take(&mut self.outbox);
        let (p, m) = self.pool_of(i);
        // A stretch of decode-only steps runs up to the next router event (a request sent, a
        // scrape, a follower released), where the router may read the engine or hand it a
        // request; never where the router sees each pass (load kept per pass for a stale view,
        // KV events stamped with their pass) or replicas hand requests over.
        let pool = &self.pools[p];
        let horizon = if self.disaggregated || pool.history.is_some() || pool.kv.is_some() {
            f64::NEG_INFINITY
        } else {
            self.next_router_time().unwrap_or(f64::INFINITY)
        };
        self.engines[i].set_horizon(horizon);
        self.engines[i].pass(&mut out)?;
        // What the routers see of this pass.
        if self.pools[p].kv.is_some() {
            self.events.clear();
            self.engines[i].drain_kv_events(&mut self.events);
            let pool = &mut self.pools[p];
            for &(h, stored) in &self.events {
                pool.kv_queue.push_back((before, m, h, stored));
            }
        }
        if let Some(h) = &mut self.pools[p].history {
            let now = metrics_of(&self.engines[i]);
            if h[m].back().is_none_or(|b| b.1 != now) {
                h[m].push_back((before, now));
            }
        }
        if !out.is_empty() {
            self.handle(i, p, m, before, &mut out)?;
        }
        self.outbox = out;
        if let Some(f) = &mut self.fleet
            && f.draining(i)
            && !self.engines[i].has_work()
        {
            f.drained(i, self.engines[i].now());
        }
        Ok(())
    }

    /// What a pass of engine `i` (member `m` of pool `p`) at `at` reported.
    fn handle(
        &mut self,
        i: usize,
        p: usize,
        m: usize,
        at: f64,
        out: &mut Outbox,
    ) -> Result<(), Error> {
        let role = self.plans[i].role;
        if role != Role::Prefill && self.pools[p].needs.first_tokens {
            for &index in &out.first {
                self.pools[p].router.first_token(index, m);
            }
        }
        out.first.clear();
        for push in out.pushes.drain(..) {
            self.push(i, push);
        }
        for pull in out.pulls.drain(..) {
            self.pull_kv(i, pull);
        }
        for (index, t, finished) in std::mem::take(&mut out.ended) {
            crate::probe::with(|p| p.ended(index, finished));
            if role == Role::Prefill && finished {
                self.pools[p].in_flight[m] -= 1;
                self.pools[p].router.ended(index, m);
                self.hand_over(i, index, t)?;
                continue;
            }
            if role == Role::Decode
                && !finished
                && let Some(&p) = self.prefill_of.get(&index)
            {
                // Refused by its decode replica: nothing will read the prefill's blocks.
                self.engines[p as usize].release(index, t);
            }
            if let Some(pl) = self.placed.remove(&index) {
                let pool = &mut self.pools[pl.pool];
                pool.in_flight[pl.member] -= 1;
                pool.router.ended(index, pl.member);
                if let (0, Some(d)) = (pl.pool, pl.decode) {
                    // Rejected by its prefill replica: the decode replica chosen up front
                    // never sees it.
                    self.pools[1].in_flight[d] -= 1;
                    self.pools[1].router.ended(index, d);
                }
            }
            self.handoff.remove(&index);
            self.ended_at(index, t, at);
        }
        for (index, mut record) in out.retired.drain(..) {
            if let Some(acc) = &mut self.replica_acc {
                acc[i].add(&record)?;
            }
            if role == Role::Prefill && record.status == Status::Finished {
                continue;
            }
            record.replica = i as u32;
            record.prefill_replica = self.prefill_of.remove(&index);
            if let Some(tr) = self.transfers.remove(&index) {
                record.kv_transfer_s = tr.seconds;
            }
            self.emit(index, record)?;
        }
        Ok(())
    }

    fn emit(&mut self, index: usize, record: RequestRecord) -> Result<(), Error> {
        self.acc.add(&record)?;
        if let Some(v) = &mut self.records {
            v.try_reserve(1).map_err(|_| Error::OutOfMemory {
                what: "one record per request",
                bytes: std::mem::size_of::<RequestRecord>() as u64,
            })?;
            v.push(record);
            self.record_index.push(index);
        }
        self.retired += 1;
        if self.retired.is_multiple_of(PROGRESS_EVERY) {
            self.progress.set(self.retired);
        }
        Ok(())
    }

    /// Request `index` ended at `t`, reported at `at`: release the followers waiting for it,
    /// never before `at` (a request rejected by its engine ends at its send, and the driver
    /// hears of it only at the engine's pass: a follower released before that would be sent
    /// in the past, behind requests already delivered).
    fn ended_at(&mut self, index: usize, t: f64, at: f64) {
        let Some(c) = &mut self.closed else {
            return;
        };
        c.ended[index] = t;
        for f in std::mem::take(&mut c.followers[index]) {
            let Some(q) = self.parked.get(&f) else {
                continue;
            };
            let think = q.follows.map_or(0.0, |x| x.think_s);
            let send = (t + think).max(q.arrival_s).max(at);
            self.released.push(Release {
                time: send,
                index: f,
            });
        }
    }

    /// A prefill finished on engine `i` at `t`: the proxy sends the request to a decode
    /// replica.
    fn hand_over(&mut self, i: usize, index: usize, t: f64) -> Result<(), Error> {
        let Some((q, sent)) = self.handoff.remove(&index) else {
            return Ok(());
        };
        let session = self.session_of(&q);
        let decode = match self.placed.get(&index).and_then(|p| p.decode) {
            Some(m) => m,
            None => self.route(1, index, &q, session, t),
        };
        self.placed.insert(
            index,
            Placed {
                pool: 1,
                member: decode,
                decode: None,
            },
        );
        let engine = self.pools[1].members[decode];
        self.prefill_of.insert(index, i as u32);
        let at = t + self.plans[engine].frontend_s + self.router_latency_s;
        self.engines[engine].deliver(Delivery {
            request: q,
            index,
            sent_s: sent,
            at_s: at,
            role: Part::Decode { from: i as u32 },
        })
    }

    /// Seconds to move `bytes` (all ranks) from engine `from` to engine `to`, and the link
    /// time it occupies.
    fn wire_s(&self, from: usize, to: usize, bytes: u64) -> f64 {
        let (a, b) = (&self.plans[from], &self.plans[to]);
        let per_rank =
            |m: &ReplicaMeta| bytes as f64 / f64::from(m.tp.max(1)) / m.interconnect.bandwidth;
        per_rank(a).max(per_rank(b))
    }

    /// A decode engine `d` posts the read of `pull.blocks` blocks from the prefill replica.
    fn pull_kv(&mut self, d: usize, pull: crate::engine::Pull) {
        let from = pull.from as usize;
        let meta = &self.plans[d];
        let bytes = u64::from(pull.blocks) * u64::from(meta.block_size) * meta.kv_token_bytes;
        let net = &meta.interconnect;
        let fixed = net.latency_s + net.per_transfer_s;
        let pushed = self.transfers.get(&pull.index).map(|t| t.pushed);
        let end = match pushed {
            // Layer-wise: the KV is there once the pushes are done.
            Some(p) if self.transfer == KvTransfer::Layerwise => pull.at_s.max(p) + fixed,
            _ => {
                let wire = self.wire_s(from, d, bytes);
                let start = pull
                    .at_s
                    .max(self.nic_free[d][0])
                    .max(self.nic_free[from][1]);
                let end = start + wire + fixed;
                self.nic_free[d][0] = start + wire;
                self.nic_free[from][1] = start + wire;
                self.nic_busy[d] += wire;
                self.nic_busy[from] += wire;
                self.transfer_stats.wait_s += start - pull.at_s;
                end
            }
        };
        self.engines[d].pulled(pull.pos, end);
        self.engines[from].release(pull.index, end);
        let tr = self.transfers.entry(pull.index).or_default();
        tr.seconds = end - pull.at_s;
        self.transfer_stats.transfers += 1;
        self.transfer_stats.bytes += bytes;
        self.transfer_stats.seconds += end - pull.at_s;
    }

    /// Prefill engine `p` computed a chunk of a request's KV in a step: it pushes each layer as
    /// it is done, to the decode replica chosen for it.
    fn push(&mut self, p: usize, push: crate::engine::Push) {
        let Some(decode) = self.placed.get(&push.index).and_then(|x| x.decode) else {
            return;
        };
        let d = self.pools[1].members[decode];
        let meta = &self.plans[p];
        let bytes = u64::from(push.tokens) * meta.kv_token_bytes;
        let layers = f64::from(meta.layers.max(1));
        let wire = self.wire_s(p, d, bytes);
        let (s, e) = push.gpu;
        let first_layer = s + (e - s) / layers;
        let start = first_layer
            .max(self.nic_free[p][1])
            .max(self.nic_free[d][0]);
        let end = (start + wire).max(e + wire / layers);
        self.nic_free[p][1] = end;
        self.nic_free[d][0] = end;
        self.nic_busy[p] += wire;
        self.nic_busy[d] += wire;
        let tr = self.transfers.entry(push.index).or_default();
        tr.pushed = tr.pushed.max(end);
    }

    fn finish(mut self, resolved: &[Resolved]) -> Result<ServeReport, Error> {
        let mut out = std::mem::take(&mut self.outbox);
        for i in 0..self.engines.len() {
            self.engines[i].drain(&mut out)?;
            let (p, m) = self.pool_of(i);
            let at = self.engines[i].now();
            self.handle(i, p, m, at, &mut out)?;
        }
        self.progress.set(self.retired);
        let makespan = self.engines.iter().map(|e| e.now()).fold(0.0f64, f64::max);
        let mut totals = Totals::default();
        let mut compute = 0.0;
        for (e, r) in self.engines.iter().zip(resolved) {
            totals.add(&e.st.counters, e.st.kv.stats(), r);
            totals.itl.merge(&e.st.itl);
            compute += e.compute_s;
            totals.iterations += e.iterations;
        }
        let n = self.engines.len() as f64;
        // The cluster's GPUs' mean busy fraction (one engine: its own).
        let summary = std::mem::take(&mut self.acc).finish(makespan, compute / n, &totals)?;
        let requests = match self.records.take() {
            Some(mut v) => {
                if self.record_index.windows(2).any(|w| w[0] > w[1]) {
                    let mut order: Vec<usize> = (0..v.len()).collect();
                    order.sort_by_key(|&k| self.record_index[k]);
                    let mut slots: Vec<Option<RequestRecord>> = v.drain(..).map(Some).collect();
                    v.extend(
                        order
                            .iter()
                            .map(|&k| slots[k].take().expect("each record once")),
                    );
                }
                v
            }
            None => Vec::new(),
        };
        let tiers = self.tier_stats();
        if self.engines.len() == 1 && self.fleet.is_none() {
            let e = self.engines.pop().expect("one engine");
            return Ok(ServeReport {
                requests,
                summary,
                passes: e.passes(),
                iterations: e.series,
                cluster: None,
                tier: tiers,
                goodput: None,
                bands: None,
            });
        }
        let passes = self.engines.iter().map(|e| e.passes()).sum();
        let cluster = self.cluster_output(resolved, makespan)?;
        Ok(ServeReport {
            requests,
            summary,
            passes,
            iterations: Vec::new(),
            cluster: Some(Box::new(cluster)),
            tier: tiers,
            goodput: None,
            bands: None,
        })
    }

    fn tier_stats(&self) -> Option<TierStats> {
        let mut any = false;
        let mut s = TierStats::default();
        for e in &self.engines {
            if let Some(t) = e.tier() {
                any = true;
                s.add(&t.stats);
            }
        }
        any.then_some(s)
    }

    fn cluster_output(
        &mut self,
        resolved: &[Resolved],
        makespan: f64,
    ) -> Result<ClusterOutput, Error> {
        let accs = self.replica_acc.take();
        let mut replicas = Vec::new();
        for (i, r) in resolved.iter().enumerate() {
            let (p, m) = self.pool_of(i);
            let e = &mut self.engines[i];
            let meta = &self.plans[i];
            replicas.push(ReplicaOutput {
                name: meta.name.clone(),
                role: meta.role,
                hardware: meta.hardware.clone(),
                tensor_parallel_size: meta.tp,
                routed: self.pools[p].routed[m],
                gpu_busy: if makespan > 0.0 {
                    e.compute_s / makespan
                } else {
                    0.0
                },
                network_busy: if makespan > 0.0 {
                    self.nic_busy[i] / makespan
                } else {
                    0.0
                },
                kv_occupancy: e.mean_kv_used(makespan) / f64::from(r.usable_blocks.max(1)),
                prefix_hit_tokens: e.st.kv.stats().hit_tokens,
                summary: None,
                iterations: std::mem::take(&mut e.series),
                tier: e.tier().map(|t| t.stats),
            });
        }
        if let Some(accs) = accs {
            for (i, acc) in accs.into_iter().enumerate() {
                let e = &self.engines[i];
                let mut t = Totals::default();
                t.add(&e.st.counters, e.st.kv.stats(), &resolved[i]);
                t.itl.merge(&e.st.itl);
                t.iterations = e.iterations;
                replicas[i].summary = Some(acc.finish(makespan, e.compute_s, &t)?);
            }
        }
        let pools = (self.pools.iter())
            .map(|p| PoolStats::of(&p.members, &p.routed))
            .collect();
        let transfer = self.disaggregated.then(|| {
            let mut t = self.transfer_stats;
            t.mode = self.transfer;
            t
        });
        let mut out = ClusterOutput::new(replicas, pools, transfer);
        out.autoscale = self.fleet.take().map(|f| f.finish(makespan));
        Ok(out)
    }
}

fn metrics_of(e: &Engine<'_>) -> Metrics {
    Metrics {
        waiting: (e.st.waiting.len() + e.st.swapped.len()) as u32,
        running: e.running() as u32,
        kv_used: e.kv_used(),
    }
}
