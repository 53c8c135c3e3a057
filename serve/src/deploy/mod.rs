//! The deployment planner: the cheapest cluster that serves a load under latency objectives,
//! found by simulating candidate clusters (not one replica multiplied).
//!
//! A **shape** is one point of the search space: a GPU, a tensor-parallel size, a layout
//! (colocated replicas, or prefill and decode pools in a ratio `P:D`), a router and engine
//! settings (quantisation, KV dtype, `max_num_seqs`, `max_num_batched_tokens`, a CPU KV tier).
//! A **candidate** is a shape with a number of units (a unit: one colocated replica, or `P`
//! prefill and `D` decode replicas). For every shape the planner finds the fewest units that meet
//! the objectives ([`Shape`], [`plan_shape`]):
//!
//! 1. **Memory.** The shape is resolved as `kvplan serve` resolves a scenario; one that does not
//!    run (weights that leave no room for KV blocks, a tensor-parallel size the heads do not
//!    divide, a quantisation the GPU lacks) is pruned, not simulated, with vLLM's reason.
//! 2. **Roofline.** An upper bound on a unit's request rate from the datasheet alone
//!    ([`unit_rate_bound`]): decode steps read the active decoder weights once per step and
//!    carry at most `max_num_seqs` sequences, and every output token costs two FLOPs per active
//!    linear parameter at the GPU's peak. Fewer units than `ceil(rate / bound)` cannot carry the
//!    load and are pruned; a shape whose bound needs more GPUs than `max_gpus` is pruned whole.
//! 3. **Simulation.** From the roofline's count, the candidate cluster serves the workload (the
//!    same seeded requests for every candidate) and is judged at steady state as
//!    [`crate::capacity`] judges a rate: warm-up left out, rejected and truncated requests as
//!    infinite latency, the queueing delay's trend bounded. A failing count is followed by a
//!    count estimated from the completion rate it showed (or double), and once one passes the
//!    gap is bisected, so the answer is the fewest units that pass — assuming more units never
//!    hurt, which holds for the load-balancing routers here but not strictly for every router.
//!    A shape whose latency terms stop improving while its queue is stable is given up
//!    (`latency floor`: more replicas do not help).
//!
//! Cost: each GPU's on-demand price per hour (its profile's `gpu.price_usd_per_hour`, or an
//! override); a candidate costs its GPUs times that. The plan reports every candidate (pruned,
//! failed and why, met), the cheapest that meets the objectives, and the Pareto frontier of
//! cost against p99 TTFT and p99 TPOT over the candidates that met them, each with its binding
//! constraint: the objective closest to its limit.

use std::collections::BTreeMap;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::capacity::{Slo, SteadyState, Window, completion_rate, judge, usd_per_million_tokens};
use crate::cluster::scenario::RawCluster;
use crate::config::RawConfig;
use crate::router::RouterKind;
use crate::scenario::{RawServeScenario, ScenarioError};

mod bound;
mod confidence;
pub mod frontier;

pub use bound::{RateBound, unit_rate_bound};
pub use confidence::{ObjectiveBand, PlanConfidence, confidence};
pub use frontier::{Binding, Frontier, frontier};

/// Most GPUs a candidate may have unless `max_gpus` says otherwise.
pub const DEFAULT_MAX_GPUS: u32 = 64;

/// How the replicas of a unit are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub enum Layout {
    /// One replica serving prefill and decode.
    Colocated,
    /// `prefill` prefill replicas and `decode` decode replicas (vLLM's disaggregated serving).
    Disaggregated {
        /// Prefill replicas per unit.
        prefill: u32,
        /// Decode replicas per unit.
        decode: u32,
    },
}

impl Layout {
    /// Replicas in one unit.
    pub fn replicas(self) -> u32 {
        match self {
            Layout::Colocated => 1,
            Layout::Disaggregated { prefill, decode } => prefill + decode,
        }
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Layout::Colocated => f.write_str("colocated"),
            Layout::Disaggregated { prefill, decode } => write!(f, "{prefill}:{decode}"),
        }
    }
}

impl From<Layout> for String {
    fn from(l: Layout) -> String {
        l.to_string()
    }
}

impl TryFrom<String> for Layout {
    type Error = String;
    fn try_from(s: String) -> Result<Layout, String> {
        s.parse()
    }
}

impl std::str::FromStr for Layout {
    type Err = String;
    fn from_str(s: &str) -> Result<Layout, String> {
        let s = s.trim();
        if s.eq_ignore_ascii_case("colocated") {
            return Ok(Layout::Colocated);
        }
        let form = "write `colocated` or a prefill:decode ratio such as 1:2";
        let (p, d) = s
            .split_once(':')
            .ok_or_else(|| format!("'{s}' is not a layout; {form}"))?;
        let count = |t: &str| {
            t.trim()
                .parse::<u32>()
                .ok()
                .filter(|&n| (1..=64).contains(&n))
        };
        match (count(p), count(d)) {
            (Some(prefill), Some(decode)) => Ok(Layout::Disaggregated { prefill, decode }),
            _ => Err(format!(
                "'{s}': each side of a ratio is a replica count from 1 to 64; {form}"
            )),
        }
    }
}

/// One engine setting the search varies: its `[serve]` field and the values tried (each as a
/// TOML value, `"fp8"` or `256`; `None`: the scenario's own).
#[derive(Debug, Clone, PartialEq)]
pub struct Knob {
    /// The `[serve]` field (`quantization`, `kv_cache_dtype`, `max_num_seqs`, ...).
    pub field: &'static str,
    /// The values tried.
    pub values: Vec<Option<String>>,
}

/// What the search varies.
#[derive(Debug, Clone, PartialEq)]
pub struct Space {
    /// GPU presets or profile files.
    pub hardware: Vec<String>,
    /// Tensor-parallel sizes.
    pub tensor_parallel: Vec<u32>,
    /// Layouts.
    pub layouts: Vec<Layout>,
    /// Routers.
    pub routers: Vec<RouterKind>,
    /// Engine settings, every combination tried.
    pub knobs: Vec<Knob>,
}

/// A point of the search space (see the module docs).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Shape {
    /// Its position in the space's order.
    pub index: usize,
    /// The GPU (as given).
    pub hardware: String,
    /// Tensor-parallel GPUs per replica.
    pub tensor_parallel_size: u32,
    /// The layout.
    pub layout: Layout,
    /// The router.
    pub router: RouterKind,
    /// Engine settings over the scenario's, `field=value` (empty: the scenario's).
    pub settings: Vec<(String, String)>,
}

impl Shape {
    /// GPUs per unit.
    pub fn gpus_per_unit(&self) -> u32 {
        self.layout.replicas() * self.tensor_parallel_size
    }

    /// `h100-sxm TP2 1:2 round-robin max_num_seqs=256`.
    pub fn label(&self) -> String {
        let mut s = format!(
            "{} TP{} {} {}",
            self.hardware, self.tensor_parallel_size, self.layout, self.router
        );
        for (k, v) in &self.settings {
            s.push_str(&format!(" {k}={v}"));
        }
        s
    }

    /// The scenario of `units` units of this shape over `base`.
    pub fn scenario(
        &self,
        base: &RawServeScenario,
        units: u32,
    ) -> Result<RawServeScenario, PlanError> {
        let mut raw = base.clone();
        raw.hardware = Some(self.hardware.clone());
        raw.serve.tensor_parallel_size = Some(self.tensor_parallel_size);
        if !self.settings.is_empty() {
            let over = serve_settings("serve", &self.settings)?;
            raw.serve = std::mem::take(&mut raw.serve).overlay(over);
        }
        // The scenario's router settings and network stay; its sizes, pools and groups are the
        // shape's to set.
        let c = &base.cluster;
        raw.cluster = RawCluster {
            router: Some(self.router),
            router_staleness_s: c.router_staleness_s,
            router_latency_us: c.router_latency_us,
            router_weights: c.router_weights,
            kv_transfer: c
                .kv_transfer
                .filter(|_| matches!(self.layout, Layout::Disaggregated { .. })),
            interconnect: c.interconnect.clone(),
            ..RawCluster::default()
        };
        match self.layout {
            Layout::Colocated => raw.cluster.data_parallel_size = Some(units),
            Layout::Disaggregated { prefill, decode } => {
                raw.cluster.prefill_replicas = Some(prefill * units);
                raw.cluster.decode_replicas = Some(decode * units);
            }
        }
        Ok(raw)
    }
}

/// Errors of the planner.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// A search setting out of range or empty.
    #[error("{field}: {why}")]
    Setting {
        /// The setting (`plan.hardware`, `plan.max_gpus`, ...).
        field: &'static str,
        /// What is wrong and the fix.
        why: String,
    },
    /// A GPU without a price.
    #[error(
        "{hardware} has no price per GPU-hour: give one with `plan.prices` {hardware}=USD or gpu.price_usd_per_hour in its profile"
    )]
    NoPrice {
        /// The GPU.
        hardware: String,
    },
    /// The base scenario does not resolve or run.
    #[error(transparent)]
    Scenario(#[from] Box<ScenarioError>),
    /// A hardware profile that does not load.
    #[error(transparent)]
    Hardware(#[from] kvplan_vocab::Error),
}

/// Settings of a plan.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    /// Most GPUs a candidate may have.
    pub max_gpus: u32,
    /// How a candidate's run is judged.
    pub steady: SteadyState,
    /// Price per GPU-hour by hardware name as given, US dollars.
    pub prices: BTreeMap<String, f64>,
    /// Evaluate only the shapes with `index % n == i` (`plan.shard` i/n).
    pub shard: Option<(usize, usize)>,
}

/// What became of a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Simulated and met every objective.
    Met,
    /// Simulated and missed.
    Missed,
    /// Not simulated: does not run (memory, parallelism, quantisation).
    PrunedMemory,
    /// Not simulated: its roofline cannot carry the rate.
    PrunedRoofline,
    /// Not simulated: more GPUs than allowed.
    PrunedMaxGpus,
    /// Not simulated: more units stopped improving the latency (a floor).
    PrunedFloor,
}

impl Outcome {
    /// The name outputs use.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Met => "met",
            Outcome::Missed => "missed",
            Outcome::PrunedMemory => "pruned_memory",
            Outcome::PrunedRoofline => "pruned_roofline",
            Outcome::PrunedMaxGpus => "pruned_max_gpus",
            Outcome::PrunedFloor => "pruned_floor",
        }
    }

    /// Whether it was simulated.
    pub fn simulated(self) -> bool {
        matches!(self, Outcome::Met | Outcome::Missed)
    }
}

/// One candidate: a shape with a unit count, and what its run showed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// The shape's index.
    pub shape: usize,
    /// Units (0 when the shape was pruned whole).
    pub units: u32,
    /// Replicas in all.
    pub replicas: u32,
    /// GPUs in all.
    pub gpus: u32,
    /// What became of it.
    pub outcome: Outcome,
    /// Why it missed or was pruned.
    pub why: String,
    /// Price of its GPUs per hour, US dollars.
    pub usd_per_hour: f64,
    /// Its measured figures (simulated candidates only).
    pub figures: Option<Figures>,
}

/// A simulated candidate's figures over the measured window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    /// TTFT p99, seconds (infinite when a request was rejected or cut).
    pub ttft_p99_s: f64,
    /// TPOT p99, seconds.
    pub tpot_p99_s: f64,
    /// E2E p99, seconds.
    pub e2e_p99_s: f64,
    /// Requests meeting every objective per second (vLLM's goodput).
    pub goodput_rps: f64,
    /// Served requests per second.
    pub requests_per_s: f64,
    /// Prompt tokens of served requests per second.
    #[serde(rename = "input_tok_s", alias = "input_tokens_per_s")]
    pub input_tokens_per_s: f64,
    /// Output tokens of served requests per second.
    #[serde(rename = "output_tok_s", alias = "output_tokens_per_s")]
    pub output_tokens_per_s: f64,
    /// Whether the queue kept up.
    pub stable: bool,
    /// Measured requests rejected or cut at `max_model_len` (more units do not serve them).
    pub refused: u64,
    /// Per objective (in the SLO's order): observed / limit (above 1: missed).
    pub ratios: Vec<f64>,
    /// Dollars per million input tokens (the whole cost charged to them).
    pub usd_per_m_input: Option<f64>,
    /// Dollars per million output tokens (the whole cost charged to them).
    pub usd_per_m_output: Option<f64>,
    /// Dollars per million tokens, input and output together.
    pub usd_per_m_tokens: Option<f64>,
    /// Tokens (input and output) per second per GPU.
    #[serde(rename = "tok_s_per_gpu", alias = "tokens_per_s_per_gpu")]
    pub tokens_per_s_per_gpu: f64,
    /// Tokens per dollar.
    pub tokens_per_usd: Option<f64>,
    /// Board power of its GPUs at their datasheet TDP, watts (where the profile gives it): an
    /// upper bound on what they draw.
    pub watts: Option<f64>,
    /// Joules per token (input and output) at that power.
    pub joules_per_token: Option<f64>,
    /// Engine steps simulated.
    pub steps: u64,
}

impl Figures {
    /// The largest observed / limit ratio (the objective closest to, or furthest past, its
    /// limit); infinite when the queue did not keep up.
    pub fn worst(&self) -> f64 {
        if !self.stable {
            return f64::INFINITY;
        }
        self.ratios.iter().copied().fold(0.0, f64::max)
    }
}

/// A shape's search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShapeResult {
    /// The shape.
    pub shape: Shape,
    /// Price per GPU-hour, US dollars.
    pub usd_per_gpu_hour: f64,
    /// The roofline bound on a unit's request rate (0 when pruned before it).
    pub unit_rate_bound: f64,
    /// Its candidates in the order tried (pruned counts first, as one row each).
    pub candidates: Vec<Candidate>,
    /// The fewest units that met the objectives.
    pub best_units: Option<u32>,
}

/// The load the plan serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Load {
    /// Requests per candidate run.
    pub requests: u64,
    /// Mean arrival rate, requests/s.
    pub rate_rps: f64,
    /// Mean prompt tokens.
    pub mean_input_tokens: f64,
    /// Mean output tokens.
    pub mean_output_tokens: f64,
    /// Mean of prompt tokens times output tokens (the prompt's KV a request's decode steps
    /// read, in all).
    pub mean_prompt_x_output: f64,
}

/// A GPU's price as the plan used it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// The GPU (as given).
    pub hardware: String,
    /// US dollars per GPU-hour.
    pub usd_per_gpu_hour: f64,
    /// Where it comes from (the profile's `gpu.price_source`, or `` `plan.prices` ``: the
    /// override, which a front end words as its own option).
    pub source: String,
    /// When it was quoted, where known.
    pub date: Option<String>,
}

/// A plan (or one shard of it, `shapes` then holding that shard's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    /// The objectives, as written.
    pub slo: String,
    /// The model.
    pub model: String,
    /// The load.
    pub load: Load,
    /// Shapes in the whole space.
    pub space_size: usize,
    /// Most GPUs per candidate.
    pub max_gpus: u32,
    /// The prices used, in the order the GPUs were given.
    pub prices: Vec<Price>,
    /// The shard this holds (`None`: every shape).
    pub shard: Option<(usize, usize)>,
    /// Each shape's search, in the space's order.
    pub shapes: Vec<ShapeResult>,
}

/// Counts of a plan.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    /// Shapes searched.
    pub shapes: usize,
    /// Candidates simulated.
    pub simulated: usize,
    /// Of those, met.
    pub met: usize,
    /// Shapes pruned whole because they do not run.
    pub pruned_memory: usize,
    /// Unit counts pruned by the roofline (below the bound's count), summed over shapes.
    pub pruned_roofline: usize,
    /// Shapes pruned whole by `max_gpus`.
    pub pruned_max_gpus: usize,
    /// Shapes given up at a latency floor.
    pub pruned_floor: usize,
}

impl Plan {
    /// Counts of candidates by outcome.
    pub fn counts(&self) -> Counts {
        let mut c = Counts {
            shapes: self.shapes.len(),
            ..Counts::default()
        };
        for s in &self.shapes {
            for k in &s.candidates {
                match k.outcome {
                    Outcome::Met => {
                        c.simulated += 1;
                        c.met += 1;
                    }
                    Outcome::Missed => c.simulated += 1,
                    Outcome::PrunedMemory => c.pruned_memory += 1,
                    Outcome::PrunedRoofline => c.pruned_roofline += k.units as usize,
                    Outcome::PrunedMaxGpus => c.pruned_max_gpus += 1,
                    Outcome::PrunedFloor => c.pruned_floor += 1,
                }
            }
        }
        c
    }

    /// Every simulated candidate with its shape.
    pub fn simulated(&self) -> impl Iterator<Item = (&ShapeResult, &Candidate)> {
        self.shapes.iter().flat_map(|s| {
            s.candidates
                .iter()
                .filter(|c| c.outcome.simulated())
                .map(move |c| (s, c))
        })
    }

    /// The cheapest candidate that met the objectives: lowest $/hour, then fewest GPUs, then
    /// the lower worst ratio, then the space's order.
    pub fn cheapest(&self) -> Option<(&ShapeResult, &Candidate)> {
        self.simulated()
            .filter(|(_, c)| c.outcome == Outcome::Met)
            .min_by(|a, b| {
                a.1.usd_per_hour
                    .total_cmp(&b.1.usd_per_hour)
                    .then(a.1.gpus.cmp(&b.1.gpus))
                    .then(worst(a.1).total_cmp(&worst(b.1)))
                    .then(a.0.shape.index.cmp(&b.0.shape.index))
            })
    }

    /// The missed candidate closest to meeting the objectives (the lowest worst ratio; a queue
    /// that did not keep up counts last), for an answer with none met.
    pub fn nearest_miss(&self) -> Option<(&ShapeResult, &Candidate)> {
        self.simulated()
            .filter(|(_, c)| c.outcome == Outcome::Missed)
            .min_by(|a, b| {
                worst(a.1)
                    .total_cmp(&worst(b.1))
                    .then(a.1.usd_per_hour.total_cmp(&b.1.usd_per_hour))
                    .then(a.0.shape.index.cmp(&b.0.shape.index))
            })
    }

    /// Joins shard plans into the plan the unsharded search gives: the same settings, every
    /// shape once.
    pub fn merge(parts: Vec<(String, Plan)>) -> Result<Plan, PlanError> {
        let mut it = parts.into_iter();
        let Some((first_name, first)) = it.next() else {
            return Err(PlanError::Setting {
                field: "merge",
                why: "no inputs: give the shard outputs (`format` json of each `plan.shard` run)"
                    .into(),
            });
        };
        let mut shapes: BTreeMap<usize, (String, ShapeResult)> = BTreeMap::new();
        let key = |p: &Plan| {
            (
                p.slo.clone(),
                p.model.clone(),
                p.load.clone(),
                p.space_size,
                p.max_gpus,
                p.prices.clone(),
            )
        };
        let want = key(&first);
        for (name, p) in std::iter::once((first_name.clone(), first)).chain(it) {
            if key(&p) != want {
                return Err(PlanError::Setting {
                    field: "merge",
                    why: format!(
                        "{name}: another search than {first_name}'s (objectives, model, load, space, `plan.max_gpus` or prices differ); merge only the shards of one search"
                    ),
                });
            }
            for s in p.shapes {
                if let Some((other, _)) = shapes.get(&s.shape.index) {
                    return Err(PlanError::Setting {
                        field: "merge",
                        why: format!(
                            "shape {} is in both {other} and {name}; give each shard once",
                            s.shape.index
                        ),
                    });
                }
                shapes.insert(s.shape.index, (name.clone(), s));
            }
        }
        let (slo, model, load, space_size, max_gpus, prices) = want;
        if let Some(missing) = (0..space_size).find(|i| !shapes.contains_key(i)) {
            return Err(PlanError::Setting {
                field: "merge",
                why: format!(
                    "shape {missing} is missing ({} of {space_size} given): add the missing shard outputs",
                    shapes.len()
                ),
            });
        }
        Ok(Plan {
            slo,
            model,
            load,
            space_size,
            max_gpus,
            prices,
            shard: None,
            shapes: shapes.into_values().map(|(_, s)| s).collect(),
        })
    }
}

fn worst(c: &Candidate) -> f64 {
    c.figures.as_ref().map_or(f64::INFINITY, Figures::worst)
}

/// The shapes of `space` in its order: hardware, then TP, layout, router, then each knob's
/// values (the last knob varying fastest).
pub fn shapes(space: &Space) -> Result<Vec<Shape>, PlanError> {
    let empty = |field: &'static str, flag: &str| PlanError::Setting {
        field,
        why: format!("the search space is empty: give at least one value ({flag})"),
    };
    if space.hardware.is_empty() || space.hardware.iter().any(|h| h.trim().is_empty()) {
        return Err(empty(
            "plan.hardware",
            "e.g. `hardware` h100-sxm,a100-80g-sxm",
        ));
    }
    if space.tensor_parallel.is_empty() {
        return Err(empty(
            "plan.tensor_parallel_size",
            "e.g. `serve.tensor_parallel_size` 1,2",
        ));
    }
    if space.layouts.is_empty() {
        return Err(empty("plan.layouts", "e.g. `plan.layouts` colocated,1:2"));
    }
    if space.routers.is_empty() {
        return Err(empty("plan.routers", "e.g. `plan.routers` round-robin"));
    }
    if let Some(k) = space.knobs.iter().find(|k| k.values.is_empty()) {
        return Err(PlanError::Setting {
            field: k.field,
            why: "the search space is empty: give at least one value".into(),
        });
    }
    let mut settings: Vec<Vec<(String, String)>> = vec![Vec::new()];
    for k in &space.knobs {
        let mut next = Vec::new();
        for s in &settings {
            for v in &k.values {
                let mut s = s.clone();
                if let Some(v) = v {
                    s.push((k.field.to_string(), v.clone()));
                }
                next.push(s);
            }
        }
        settings = next;
    }
    let mut out = Vec::new();
    for h in &space.hardware {
        for &tp in &space.tensor_parallel {
            for &layout in &space.layouts {
                for &router in &space.routers {
                    for s in &settings {
                        out.push(Shape {
                            index: out.len(),
                            hardware: h.trim().to_string(),
                            tensor_parallel_size: tp,
                            layout,
                            router,
                            settings: s.clone(),
                        });
                    }
                }
            }
        }
    }
    Ok(out)
}

/// The load `base` serves: its requests' count, rate and mean lengths.
pub fn load_of(base: &RawServeScenario) -> Result<Load, PlanError> {
    let mut w = base.workload.clone();
    if w.trace.is_none() && w.output_lengths.is_none() {
        w.output_lengths = Some(crate::scenario::DEFAULT_OUTPUT_LENGTHS.into());
    }
    let seed = w.seed();
    let spec = w.validate().map_err(|e| Box::new(ScenarioError::from(e)))?;
    let reqs =
        kvplan_workloads::generate(&spec, seed).map_err(|e| Box::new(ScenarioError::from(e)))?;
    let n = reqs.len();
    if n < 2 {
        return Err(PlanError::Setting {
            field: "workload.requests",
            why: format!("{n} request(s): a load needs at least 2 (10000 by default)"),
        });
    }
    let span = reqs[n - 1].arrival_s - reqs[0].arrival_s;
    if span.is_nan() || span <= 0.0 {
        return Err(PlanError::Setting {
            field: "workload.arrivals",
            why: "every request arrives at once: a deployment is planned for a rate; give `workload.qps` with poisson or gamma arrivals, or a trace".into(),
        });
    }
    let mean = |f: fn(&kvplan_workloads::Request) -> u32| {
        reqs.iter().map(|r| f64::from(f(r))).sum::<f64>() / n as f64
    };
    Ok(Load {
        requests: n as u64,
        rate_rps: (n - 1) as f64 / span,
        mean_input_tokens: mean(|r| r.prompt_tokens),
        mean_output_tokens: mean(|r| r.output_tokens),
        mean_prompt_x_output: reqs
            .iter()
            .map(|r| f64::from(r.prompt_tokens) * f64::from(r.output_tokens))
            .sum::<f64>()
            / n as f64,
    })
}

/// Plans a deployment of `base` (model and workload) over `space` under `slo`: every shape
/// searched (in parallel), in the space's order. `done` hears each shape as it finishes.
pub fn plan(
    base: &RawServeScenario,
    space: &Space,
    slo: &Slo,
    opts: &PlanOptions,
    done: &(dyn Fn(usize) + Sync),
) -> Result<Plan, PlanError> {
    check_options(opts)?;
    let all = shapes(space)?;
    let (price, prices) = gpu_prices(space, opts)?;
    let load = load_of(base)?;
    let mine: Vec<&Shape> = all
        .iter()
        .filter(|s| opts.shard.is_none_or(|(i, n)| s.index % n == i))
        .collect();
    let results: Vec<Result<ShapeResult, PlanError>> = mine
        .par_iter()
        .map(|s| {
            let r = plan_shape(base, s, slo, opts, price[&s.hardware], &load);
            done(s.index);
            r
        })
        .collect();
    Ok(Plan {
        slo: slo.to_string(),
        model: base.model.clone().unwrap_or_default(),
        load,
        space_size: all.len(),
        max_gpus: opts.max_gpus,
        prices,
        shard: opts.shard,
        shapes: results.into_iter().collect::<Result<_, _>>()?,
    })
}

/// The plan's own settings in range: `max_gpus` and the shard.
fn check_options(opts: &PlanOptions) -> Result<(), PlanError> {
    if opts.max_gpus == 0 || opts.max_gpus > crate::cluster::scenario::MAX_REPLICAS {
        return Err(PlanError::Setting {
            field: "plan.max_gpus",
            why: format!(
                "{} must be from 1 to {}",
                opts.max_gpus,
                crate::cluster::scenario::MAX_REPLICAS
            ),
        });
    }
    if let Some((i, n)) = opts.shard
        && (n == 0 || i >= n)
    {
        return Err(PlanError::Setting {
            field: "plan.shard",
            why: format!("{i}/{n}: write I/N with 0 <= I < N, e.g. `plan.shard` 0/4"),
        });
    }
    Ok(())
}

/// The price per GPU-hour of each GPU searched, by name, and as the plan reports them (the
/// given price, or the profile's with its source and date); a GPU without one, or a price
/// that is none, refused.
fn gpu_prices(
    space: &Space,
    opts: &PlanOptions,
) -> Result<(BTreeMap<String, f64>, Vec<Price>), PlanError> {
    let mut price = BTreeMap::new();
    let mut prices = Vec::new();
    for h in &space.hardware {
        let h = h.trim();
        if price.contains_key(h) {
            continue;
        }
        let profile = kvplan_vocab::HardwareProfile::resolve(h)?;
        let given = opts
            .prices
            .get(h)
            .or_else(|| opts.prices.get(&profile.name));
        let (p, source, date) = match (given, profile.gpu.price_usd_per_hour) {
            (Some(&p), _) => (p, "`plan.prices`".to_string(), None),
            (None, Some(p)) => (
                p,
                profile.gpu.price_source.clone().unwrap_or_default(),
                profile.gpu.price_date.clone(),
            ),
            (None, None) => {
                return Err(PlanError::NoPrice {
                    hardware: h.to_string(),
                });
            }
        };
        if !(p.is_finite() && p > 0.0) {
            return Err(PlanError::Setting {
                field: "gpu.price_usd_per_hour",
                why: format!("{h}: {p} must be a price above 0 (US dollars per GPU-hour)"),
            });
        }
        price.insert(h.to_string(), p);
        prices.push(Price {
            hardware: h.to_string(),
            usd_per_gpu_hour: p,
            source,
            date,
        });
    }
    Ok((price, prices))
}

/// One shape's search (see the module docs): the fewest units that meet `slo`.
pub fn plan_shape(
    base: &RawServeScenario,
    shape: &Shape,
    slo: &Slo,
    opts: &PlanOptions,
    usd_per_gpu_hour: f64,
    load: &Load,
) -> Result<ShapeResult, PlanError> {
    let gpus_per_unit = shape.gpus_per_unit();
    let mut search = ShapeSearch {
        base,
        shape,
        slo,
        opts,
        load,
        gpus_per_unit,
        max_units: opts.max_gpus / gpus_per_unit.max(1),
        result: ShapeResult {
            shape: shape.clone(),
            usd_per_gpu_hour,
            unit_rate_bound: 0.0,
            candidates: Vec::new(),
            best_units: None,
        },
    };
    let Some(first) = search.roofline_start()? else {
        return Ok(search.result);
    };
    if let Some((lo, hi)) = search.climb(first)? {
        search.result.best_units = Some(search.bisect(lo, hi)?);
    }
    Ok(search.result)
}

/// One shape's search in progress: what it searches over, and its result so far.
struct ShapeSearch<'a> {
    base: &'a RawServeScenario,
    shape: &'a Shape,
    slo: &'a Slo,
    opts: &'a PlanOptions,
    load: &'a Load,
    gpus_per_unit: u32,
    /// The most units `opts.max_gpus` allows.
    max_units: u32,
    result: ShapeResult,
}

/// What one candidate's run showed, as the search needs it.
struct Trial {
    /// The objectives met.
    met: bool,
    /// The worst objective's share of its limit.
    worst: f64,
    /// The queue kept up.
    stable: bool,
    /// The completion rate the run showed (requests/s).
    service: f64,
    /// Measured requests refused or cut.
    refused: u64,
}

impl ShapeSearch<'_> {
    /// A row of `units` units that was not simulated (or one whose figures come later).
    fn row(&self, units: u32, outcome: Outcome, why: String) -> Candidate {
        Candidate {
            shape: self.shape.index,
            units,
            replicas: units * self.shape.layout.replicas(),
            gpus: units * self.gpus_per_unit,
            outcome,
            why,
            usd_per_hour: f64::from(units * self.gpus_per_unit) * self.result.usd_per_gpu_hour,
            figures: None,
        }
    }

    /// The first unit count worth simulating, from one unit's settings and the roofline
    /// bound: `None` where the shape is pruned (a unit above `max_gpus`, settings that do not
    /// run, a roofline count above `max_gpus`), with the row that says why.
    fn roofline_start(&mut self) -> Result<Option<u32>, PlanError> {
        let (gpus_per_unit, max_gpus) = (self.gpus_per_unit, self.opts.max_gpus);
        if self.max_units == 0 {
            let row = self.row(
                0,
                Outcome::PrunedMaxGpus,
                format!("one unit is {gpus_per_unit} GPUs, above `plan.max_gpus` {max_gpus}"),
            );
            self.result.candidates.push(row);
            return Ok(None);
        }
        // Memory and settings: one unit resolved.
        let one = self.shape.scenario(self.base, 1)?;
        let resolved = match one.resolve() {
            Ok(sc) => sc,
            Err(e) => {
                let row = self.row(0, Outcome::PrunedMemory, e.to_string());
                self.result.candidates.push(row);
                return Ok(None);
            }
        };
        let bound = unit_rate_bound(&resolved, self.shape.layout, self.load);
        self.result.unit_rate_bound = bound.requests_per_s;
        let need = (self.load.rate_rps / bound.requests_per_s).ceil().max(1.0);
        if need > f64::from(self.max_units) {
            let row = self.row(
                0,
                Outcome::PrunedMaxGpus,
                format!(
                    "the roofline ({}) needs at least {} units ({} GPUs), above `plan.max_gpus` {}",
                    bound.why,
                    need,
                    need * f64::from(gpus_per_unit),
                    max_gpus
                ),
            );
            self.result.candidates.push(row);
            return Ok(None);
        }
        let first = need as u32;
        if first > 1 {
            let row = self.row(
                first - 1,
                Outcome::PrunedRoofline,
                format!(
                    "1 to {} units cannot carry {:.3} req/s: at most {:.3} req/s per unit ({})",
                    first - 1,
                    self.load.rate_rps,
                    bound.requests_per_s,
                    bound.why
                ),
            );
            self.result.candidates.push(row);
        }
        Ok(Some(first))
    }

    /// Simulates and judges `units` units, adding its row.
    fn trial(&mut self, units: u32) -> Result<Trial, PlanError> {
        let raw = self.shape.scenario(self.base, units)?;
        let (c, service) = evaluate(
            &raw,
            self.slo,
            &self.opts.steady,
            self.load,
            units,
            self.gpus_per_unit,
            self.result.usd_per_gpu_hour,
            self.shape.index,
        )?;
        let trial = Trial {
            met: c.outcome == Outcome::Met,
            worst: worst(&c),
            stable: c.figures.as_ref().is_some_and(|f| f.stable),
            service,
            refused: c.figures.as_ref().map_or(0, |f| f.refused),
        };
        self.result.candidates.push(c);
        Ok(trial)
    }

    /// Upward from the roofline's count `first` until a count passes: the most units known to
    /// fail (or pruned) and the fewest that passed, or `None` where none passes (`max_units`
    /// reached, or a floor more units cannot lower, with its row).
    fn climb(&mut self, first: u32) -> Result<Option<(u32, u32)>, PlanError> {
        let mut lo = first - 1; // the most units known to fail (or pruned)
        let mut k = first;
        let mut prev: Option<(f64, bool)> = None;
        loop {
            let t = self.trial(k)?;
            if t.met {
                return Ok(Some((lo, k)));
            }
            lo = k;
            if k >= self.max_units {
                return Ok(None);
            }
            if let Some(why) = self.floor(k, &t, prev) {
                let row = self.row(0, Outcome::PrunedFloor, why);
                self.result.candidates.push(row);
                return Ok(None);
            }
            prev = Some((t.worst, t.stable));
            k = self.next_try(k, &t);
        }
    }

    /// Why more units than `k` are not tried after its trial `t` (`prev`: the worst objective
    /// and stability of the count before): measured requests every replica refuses, or a
    /// latency floor (no better than fewer units); `None` to go on.
    fn floor(&self, k: u32, t: &Trial, prev: Option<(f64, bool)>) -> Option<String> {
        if t.stable && t.refused > 0 {
            return Some(format!(
                "{} measured requests rejected or cut at max_model_len whatever the units (each replica refuses them); more units are not tried",
                t.refused
            ));
        }
        if let Some((pw, pstable)) = prev
            && t.stable
            && pstable
            && t.worst > 0.95 * pw
        {
            return Some(format!(
                "a latency floor: {} units did no better than fewer (worst objective at {:.0}% of its limit); more units are not tried",
                k,
                100.0 * t.worst
            ));
        }
        None
    }

    /// The count to try after `k` failed (`k < max_units`): sized by the completion rate an
    /// overloaded run showed, per unit, or else twice `k`; above `k`, at most `max_units`.
    fn next_try(&self, k: u32, t: &Trial) -> u32 {
        let guess = if !t.stable && t.service > 0.0 {
            let per_unit = t.service / f64::from(k);
            ((self.load.rate_rps / (per_unit * (1.0 - self.opts.steady.headroom))).ceil()) as u32
        } else {
            0
        };
        // (`k < max_units` here, so the range is not empty.)
        if guess > 0 {
            guess
        } else {
            k.saturating_mul(2)
        }
        .clamp(k + 1, self.max_units)
    }

    /// Bisects between the most units that failed (`lo`) and the fewest that passed (`hi`;
    /// every count tried on the way up below it failed): the fewest that pass.
    fn bisect(&mut self, mut lo: u32, mut hi: u32) -> Result<u32, PlanError> {
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if self.trial(mid)?.met {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        Ok(hi)
    }
}

/// Serves `raw` (a candidate of `units` units) and judges it; returns the candidate and the
/// completion rate its run showed between the 20% and 80% marks (requests/s), which sizes the
/// next try when the queue did not keep up.
#[allow(clippy::too_many_arguments)]
fn evaluate(
    raw: &RawServeScenario,
    slo: &Slo,
    steady: &SteadyState,
    load: &Load,
    units: u32,
    gpus_per_unit: u32,
    usd_per_gpu_hour: f64,
    shape: usize,
) -> Result<(Candidate, f64), PlanError> {
    let mut sc = raw.clone().resolve().map_err(Box::new)?;
    sc.config.record_timeseries = false;
    let requests = sc
        .request_stream()
        .map_err(|e| Box::new(ScenarioError::from(e)))?;
    let out = sc
        .run_stream(requests, &kvplan_vocab::Silent)
        .map_err(|e| Box::new(ScenarioError::from(e)))?;
    let window = judge(&out, slo, steady, load.rate_rps, 0.0);
    let met = slo.met(&window);
    let gpus = units * gpus_per_unit;
    let usd_per_hour = f64::from(gpus) * usd_per_gpu_hour;
    let figures = figures(
        &window,
        slo,
        usd_per_gpu_hour,
        gpus,
        sc.hardware.gpu.power_watts,
        &out,
    );
    let why = if met {
        String::new()
    } else {
        let mut m = slo.misses(&window);
        if window.rejected + window.truncated > 0 {
            m.push(format!(
                "{} rejected and {} cut at max_model_len of {} measured requests (each an infinite latency)",
                window.rejected, window.truncated, window.measured
            ));
        }
        if window.served == 0 {
            m.push("no request served whole".into());
        }
        m.join("; ")
    };
    let candidate = Candidate {
        shape,
        units,
        replicas: out.cluster.as_ref().map_or(1, |c| c.replicas.len() as u32),
        gpus,
        outcome: if met { Outcome::Met } else { Outcome::Missed },
        why,
        usd_per_hour,
        figures: Some(figures),
    };
    Ok((candidate, completion_rate(&out)))
}

fn figures(
    w: &Window,
    slo: &Slo,
    usd_per_gpu_hour: f64,
    gpus: u32,
    gpu_watts: Option<f64>,
    out: &crate::ServeReport,
) -> Figures {
    let usd_per_hour = f64::from(gpus) * usd_per_gpu_hour;
    let watts = gpu_watts.map(|w| w * f64::from(gpus));
    let input = w.total_tokens_per_s - w.output_tokens_per_s;
    let per_m = |tok_s: f64| usd_per_million_tokens(usd_per_gpu_hour, gpus, tok_s);
    Figures {
        ttft_p99_s: w.ttft_s.p99,
        tpot_p99_s: w.tpot_s.p99,
        e2e_p99_s: w.e2e_s.p99,
        goodput_rps: w.goodput_rps,
        requests_per_s: w.requests_per_s,
        input_tokens_per_s: input,
        output_tokens_per_s: w.output_tokens_per_s,
        stable: w.stable,
        refused: w.rejected + w.truncated,
        ratios: slo.0.iter().map(|t| t.observed(w) / t.limit_s).collect(),
        usd_per_m_input: per_m(input),
        usd_per_m_output: per_m(w.output_tokens_per_s),
        usd_per_m_tokens: per_m(w.total_tokens_per_s),
        tokens_per_s_per_gpu: w.total_tokens_per_s / f64::from(gpus.max(1)),
        tokens_per_usd: (usd_per_hour > 0.0).then(|| w.total_tokens_per_s * 3600.0 / usd_per_hour),
        watts,
        joules_per_token: watts
            .filter(|_| w.total_tokens_per_s > 0.0)
            .map(|p| p / w.total_tokens_per_s),
        steps: out.summary.iterations,
    }
}

/// `[serve]` fields from `field = value` pairs (each value a TOML value: `"fp8"`, `256`), as a
/// scenario file would give them; an error names `field` (the knob, or `serve` for several).
pub fn serve_settings(
    field: &'static str,
    pairs: &[(String, String)],
) -> Result<RawConfig, PlanError> {
    let text: String = pairs.iter().map(|(k, v)| format!("{k} = {v}\n")).collect();
    toml::from_str(&text).map_err(|e| PlanError::Setting {
        field,
        why: format!("{}: {}", text.trim().replace('\n', ", "), e.message()),
    })
}

/// Checks that `value` (a TOML value: `"fp8"`, `256`) reads as `[serve]`'s `field`, before
/// the search.
pub fn check_knob(field: &'static str, value: &str) -> Result<(), PlanError> {
    serve_settings(field, &[(field.to_string(), value.to_string())]).map(|_| ())
}
