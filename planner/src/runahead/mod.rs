//! KV-Runahead (METHODS.md section 3): parallel prefill over `P` devices with an uneven context
//! partition and a point-to-point KV chain.
//!
//! # The schedule
//!
//! Device `i` holds the chunk `[s_i, s_i + c_i)` of the context. Per layer `j` it runs, on its
//! compute stream, `ln1` and `qkv_proj` of its `c_i` rows (no dependency on other devices), then
//! the causal attention of its `c_i` queries over `s_i + c_i` keys, which waits for the
//! accumulated K,V of chunks `< i` of layer `j` sent by device `i - 1`, then `out_proj` and the
//! FFN. On its peer stream (to `i + 1`) it sends the accumulated K,V of chunks `<= i` of layer `j`
//! (`s_i + c_i` tokens) once its own `qkv_proj` of layer `j` is done and device `i - 1`'s send of
//! layer `j` has arrived; sends are asynchronous and overlap compute. The last device runs the
//! final norm, LM head and sampling: the end of `sample` is the TTFT. Non-last devices skip the
//! attention and FFN of the last layer (their outputs feed nothing: the first token needs only
//! the last position, and the cache needs only K,V), so the prefill makespan equals the TTFT.
//! With `gen > 1`, decode runs on the last device, which holds the whole KV cache.
//!
//! # Closed form (equal to simulating the schedule)
//!
//! Every layer of a device costs the same: `e_i` (embedding), `a_i` (`ln1 + qkv_proj`), `t_i`
//! (attention), `g_i` (`out_proj` .. `ffn_down`), `w_i = a_i + t_i + g_i`, and the send
//! `x_i = latency + (s_i + c_i) K,V bytes / bandwidth`. The schedule is a DAG whose ops each
//! have their own stream (one engine per stream), so every op starts at the longest path to it.
//! A path to the end crosses each device `k..=D` it visits once through its peer stream (one
//! `x_i` each), starts at some device `k` with `e_k + a_k`, ends with `t_D + g_D + h`, and makes
//! exactly `L - 1` layer steps, each along one device's compute chain (`w_i`) or peer chain
//! (`x_i`). A maximal path puts every step on the slowest chain it visits, so
//!
//! ```text
//! TTFT = h + max_k [ e_k + a_k + U_k + (L - 1) rho_k ]
//! U_k   = t_D + g_D + sum_{i=k}^{D-1} x_i          (the fill: one layer through the chain)
//! rho_k = max( w_k..w_D, x_k..x_{D-1} )            (the slowest chain from k on)
//! ```
//!
//! `D + 1` devices, `h` = final norm + LM head + sample. [`ttft`] evaluates this in `O(P)`;
//! [`ttft_by_layers`] runs the per-layer recurrence; tests hold both to the simulator.
//!
//! # The optimiser
//!
//! Placing devices from the last to the first, a partial partition (devices `k..=D`, chunk `k`
//! starting at `s_k`) is summarised by `(U_k, rho_k, Z_k)` with `Z_k = max_{k' >= k} term_k'`.
//! The devices still to be placed see the suffix only through `U_k` and `rho_k`, every later
//! term is non-decreasing in both (`U_{k-1} = U_k + x_{k-1}`, `rho_{k-1} = max(rho_k, ..)`), and
//! the TTFT is `h + max(Z_k, later terms)`: a summary no larger in all three coordinates than
//! another at the same boundary is never worse, so keeping the whole Pareto front of
//! `(U, rho, Z)` per (device count, boundary) loses nothing. [`optimise`] runs this DP on a grid
//! of at most [`GRID_CELLS`] cells for up to [`GRID_DEVICES`] devices; it is **exact over every
//! partition whose boundaries lie on the grid**, i.e. over every partition (and for every device
//! count) when the context has at most [`GRID_CELLS`] tokens (tested against brute force over
//! all compositions, at token and at block granularity). States that cannot beat the
//! equal-chunk incumbent are dropped (a valid bound: later terms only add). Longer contexts are
//! then refined by the same exact DP over windows of `±`[`WINDOW`] steps around every boundary,
//! all boundaries moving at once, the step shrinking 4x per round down to one token (a round
//! whose optimum reaches a window's edge is repeated at the same step; rounds at one token
//! repeat while they improve): optimal on the grid, and against every simultaneous move of all
//! boundaries by up to `WINDOW` tokens. Tests check that 48 coarse cells plus refinement reach
//! the same TTFT as 128 and 160 cells (to 1e-6 and 1e-5) and beat the exact 512-token block
//! optimum.
//!
//! With more devices the grid is coarser than the chunks and a refinement round moves a
//! boundary by at most `WINDOW` steps, so the refinement walks for dozens of rounds into local
//! optima. Every count from two devices on therefore also gets a direct construction of the
//! shape optimal partitions have: every device but the first few and the last at one common
//! layer time, the first few balancing their terms.
//!
//! - **Greedy chain.** For a cap `R` on layer times and sends and a budget `B` on
//!   `embed + pre + U`, place devices from the back after a last chunk of `c` tokens, each
//!   taking the largest chunk within both; the first takes what is left. For fixed `(R, B, c)`
//!   no partition within those limits covers the context with fewer devices: by induction each
//!   boundary the chain places is at or before the matching boundary of any other (a chunk
//!   ending earlier costs no more), and so is each fill (a send's cost depends only on where its
//!   chunk ends). Every such partition has TTFT at most `h + (L-1) R + B`.
//! - **Cap.** For `p` devices and given `c` and `B`, the least `R` with which the chain covers
//!   the context: regula falsi on the first device's excess over the limits (non-increasing in
//!   `R`). When even the least `R` (the last device's layer time, or its incoming send) leaves
//!   devices idle, they go in front with one token each.
//! - **Last chunk and budget.** Golden-section search on `ln c` with no budget (around the
//!   previous count's `c`), plus the largest last chunk within the best partition's cap until
//!   that is a fixed point (the objective is jagged in whole tokens and often least where the
//!   last device just reaches the cap); then golden-section search on `B` below the partition's
//!   largest `embed + pre + U` (front devices shrink to balance their terms, the cap rising to
//!   make room; link-bound chains on many devices need this).
//! - **Polish.** The exact windowed DP at one token over `±`[`POLISH_WINDOW`] tokens, at most
//!   four rounds.
//!
//! Each trial costs `O(p)` chunk searches of a few cost-model calls (the length-only parts of a
//! chunk's cost are memoised by [`ModelCosts`]). The better of the grid search and the
//! construction is kept (equal chunks are always a candidate). Both are local searches, so each
//! count is then compared with its neighbours (a one-token device added to count `p - 1`'s best
//! in front; one merged away from count `p + 1`'s): the TTFT of `p + 1` devices is never above
//! that of `p` devices with a one-token device in front. The paper's hierarchical grid search
//! has none of these guarantees and samples the TTFT by running the model.
//!
//! For the plan, [`optimise_for_choice`] prunes: a count whose lower bound
//! ([`ttft_lower_bound`]: `h + (L-1) R_lo + ` the least fill, with `R_lo` a layer-time cap no
//! partition of that many devices stays under, by bisection on the greedy chain) is above
//! `(1 + DEVICE_TOLERANCE)` times the best TTFT found can neither be chosen nor be the best, so
//! it skips the grid DP and the polish and keeps its constructed partition (the best found, not
//! necessarily the best there is; reported as such in `ttft_by_devices_s`). If the best found
//! does not fit in memory the pruning rested on a non-candidate, and [`plan`] searches in full.
//!
//! # The device count
//!
//! Each count's partition that fits in memory is a candidate, and its TTFT `t_p` is taken by
//! simulating its chain schedule on the discrete-event engine ([`kvplan_sim::engine`]) with the
//! plan's [`CostModel`]. With `t* = min_p t_p`, the plan uses the fewest devices `p` with
//! `t_p <= (1 + DEVICE_TOLERANCE) t*` ([`DEVICE_TOLERANCE`] = 1%), except that it uses one
//! device when one fits and `t_p > (1 - MIN_GAIN) t_1` ([`MIN_GAIN`] = 10%): more devices
//! must cut the TTFT by at least 10%. Neither threshold is an option. [`choose_devices`]
//! applies the rule.
//!
//! # The link
//!
//! Peer sends take the [`CostModel`]'s peer link, both in the optimiser ([`ModelCosts`]) and on
//! the engine. `runahead.link_gbps` / `runahead.link_latency_us` are applied once, where the hardware is
//! resolved ([`with_link_override`]), so the plan and `kvplan_sim::simulate` use one link.
//!
//! # Memory
//!
//! The last device holds the weights and the K,V of the whole context (plus decoded tokens):
//! when that alone exceeds the GPU, [`plan`] fails with [`Error::DoesNotFit`] before searching.

mod costs;
pub mod details;
mod memory;
mod optimiser;
mod schedule;

pub use crate::link::{LinkOverride, link_of, with_link_override};
pub use costs::{Blocks, ChunkCost, ChunkCosts, ModelCosts, even_partition, ttft, ttft_by_layers};
pub use details::{
    PartitionFound, RunaheadDetails, RunaheadNote, RunaheadOptions, SearchInfo, TtftByMethod,
};
pub use optimiser::{
    DeviceOptimum, GRID_CELLS, GRID_DEVICES, Method, Optimum, POLISH_WINDOW, WINDOW, optimise,
    optimise_for_choice, optimise_on_grid, ttft_lower_bound,
};
pub use schedule::{chain_schedule, chunk_schedule, tensor_parallel_schedule};

use crate::strategy::{Defaults, Input, Planner};
use crate::types::{Decisions, Options, Order, Plan, PlanNote, Shape, Strategy};
use kvplan_sim::engine::{self, EngineMap};
use kvplan_vocab::cost::CostModel;
use kvplan_vocab::error::{Error, Result};
use kvplan_vocab::hardware::HardwareProfile;
use kvplan_vocab::model::ModelSpec;
use kvplan_vocab::schedule::{OpId, Schedule};

/// Device-count rule, closeness to the best: the plan uses the fewest devices whose simulated
/// TTFT is at most `(1 + DEVICE_TOLERANCE)` times the best over all device counts.
pub const DEVICE_TOLERANCE: f64 = 0.01;

/// Device-count rule, gain over one device: a multi-device plan is used only when its simulated
/// TTFT is at least this fraction lower than one device's (`t_P <= (1 - MIN_GAIN) t_1`), else
/// the prompt stays on one device: a few percent of TTFT is not worth tying up more GPUs and a
/// chain of peer transfers (the published behaviour: short prompts on a slow link stay on one
/// GPU). Not an option: the rule is fixed.
pub const MIN_GAIN: f64 = 0.10;

// ---- evaluation on the engine ---------------------------------------------------------------

/// The end of `op` when `schedule` runs on the discrete-event engine with durations from `cost`
/// (peer sends from its peer link): what `kvplan_sim::simulate` gives.
fn simulated_end(schedule: &Schedule, cost: &CostModel, op: OpId) -> Result<f64> {
    let ops = schedule.ops();
    let engines = EngineMap::for_link(schedule, cost.duplex());
    let spans = engine::run_with(schedule, &engines, |i| cost.duration(&ops[i].kind))
        .map_err(|e| Error::InvalidSchedule(e.to_string()))?;
    Ok(spans[op.index()].end)
}

/// Simulated TTFT of the chain over `partition` (prefill only).
fn simulated_ttft(
    model: &ModelSpec,
    batch: u32,
    partition: &[u32],
    cost: &CostModel,
) -> Result<f64> {
    let (s, sample) = chain_schedule(model, batch, partition, 1);
    simulated_end(&s, cost, sample)
}

/// The device-count rule of the module docs over `candidates` (index `i`: `i + 1` devices;
/// `None`: not a candidate). Returns the chosen index and whether the gain rule sent the prompt
/// back to one device.
///
/// # Panics
/// If no candidate is `Some`.
pub fn choose_devices(candidates: &[Option<f64>]) -> (usize, bool) {
    let best = candidates
        .iter()
        .flatten()
        .copied()
        .fold(f64::INFINITY, f64::min);
    assert!(best.is_finite(), "at least one candidate");
    let limit = best * (1.0 + DEVICE_TOLERANCE);
    let chosen = candidates
        .iter()
        .position(|t| t.is_some_and(|t| t <= limit))
        .expect("the best is within the limit");
    match candidates[0] {
        Some(one) if chosen > 0 && candidates[chosen].expect("chosen") > (1.0 - MIN_GAIN) * one => {
            (0, true)
        }
        _ => (chosen, false),
    }
}

// ---- the plan -------------------------------------------------------------------------------

/// KV-Runahead's planner (`runahead`): one sequence's prefill (time to first token) unless
/// told otherwise.
#[derive(Debug, Clone, Copy)]
pub struct RunaheadPlanner;

impl Planner for RunaheadPlanner {
    fn name(&self) -> &'static str {
        "runahead"
    }

    fn defaults(&self) -> Defaults {
        Defaults {
            batch: 1,
            gen_len: 1,
        }
    }

    fn reads(&self) -> &'static [&'static str] {
        &[
            "runahead.devices",
            "runahead.link_gbps",
            "runahead.link_latency_us",
        ]
    }

    fn plan(&self, i: &Input<'_>) -> Result<Plan> {
        plan(i.model, i.hw, i.cost, i.shape, i.options)
    }
}

/// Plans KV-Runahead for `shape` (`shape.prompt` is the context length; `shape.batch`
/// sequences; `shape.gen_len - 1` decode steps follow on the last device) on `cost`, whose peer
/// link is the one assumed (apply `runahead.link_gbps` / `runahead.link_latency_us` with
/// [`with_link_override`] when resolving `hw`, and simulate with the same cost model).
///
/// Fails with [`Error::DoesNotFit`] before any search when the last device cannot hold the
/// whole context's K,V and the weights however many devices are offered. The partition
/// minimises the TTFT for each device count ([`optimise`]); the device count follows the rule
/// of the module docs ([`choose_devices`]).
pub fn plan(
    model: &ModelSpec,
    hw: &HardwareProfile,
    cost: &CostModel,
    shape: &Shape,
    options: &Options,
) -> Result<Plan> {
    let offered = check_request(shape, options)?;
    let ctx = Context {
        model,
        hw,
        cost,
        shape,
        costs: ModelCosts::new(model, cost, shape.batch),
        offered,
    };
    ctx.check_floor()?;
    let (opt, simulated) = ctx.search()?;
    if simulated.iter().all(Option::is_none) {
        return Err(ctx.least_memory_error(&opt));
    }
    let (ci, stayed) = choose_devices(&simulated);
    let chosen = &opt.by_devices[ci];
    let runahead = simulated[ci].expect("a candidate");
    let single = match simulated[0] {
        Some(t) => t,
        None => simulated_ttft(model, shape.batch, &[shape.prompt], cost)?,
    };
    let mut notes: Vec<PlanNote> = (ctx.device_note(&simulated, ci, stayed, single, runahead))
        .map(PlanNote::new)
        .into_iter()
        .collect();
    let n = shape.prompt;
    let even_chain = simulated_ttft(model, shape.batch, &even_partition(n, offered), cost)?;
    let (tp_sched, tp_sample) = tensor_parallel_schedule(model, shape.batch, n, offered);
    let tensor_parallel = simulated_end(&tp_sched, cost, tp_sample)?;
    ctx.check_ops(&chosen.partition)?;
    let (schedule, _) = chain_schedule(model, shape.batch, &chosen.partition, shape.gen_len);
    let (memory, dev) = memory::device_memory(model, shape.batch, &chosen.partition, shape.gen_len);
    notes.push(PlanNote::new(RunaheadNote::FullestDevice {
        device: dev as u32,
    }));
    memory.check(
        hw,
        &format!("{}, device {dev}", ctx.what(chosen.partition.len())),
        ADVICE,
        "",
    )?;
    debug_assert!({
        let t = ttft(&ctx.costs, &chosen.partition);
        (t - runahead).abs() <= 1e-9 * runahead
    });
    let notes_on_context =
        ctx.context_notes(simulated[0].is_none(), chosen.partition.len() as u32 - 1);
    notes.extend(notes_on_context.into_iter().map(PlanNote::new));
    notes.push(PlanNote::new(RunaheadNote::Partition(partition_found(
        &opt, chosen,
    ))));
    let ttft_s = TtftByMethod {
        runahead,
        single_device: single,
        even_chain,
        tensor_parallel,
    };
    let details = ctx.details(&opt, chosen, simulated, ttft_s, &schedule, &tp_sched);
    Ok(Plan {
        strategy: Strategy::RUNAHEAD,
        model: model.name.clone(),
        hardware: hw.name.clone(),
        shape: *shape,
        order: Order::RowByRow,
        weights_on_gpu: true,
        host_memory: options.host_memory,
        memory,
        decisions: Decisions::new(details),
        notes,
        schedule,
    })
}

/// What to change when a plan does not fit: the last device keeps the whole context's KV cache.
const ADVICE: &str = "reduce `workload.prompt`, `workload.batch` or `workload.gen`: the last device keeps the whole context's KV cache, so more `runahead.devices` only shrink the activations; or use a GPU with more memory";

/// Checks the request KV-Runahead can plan (devices offered, one GPU batch, resident weights);
/// the devices offered, capped at the context length.
fn check_request(shape: &Shape, options: &Options) -> Result<u32> {
    let ro = options.get::<RunaheadOptions>();
    if ro.devices == 0 {
        return Err(Error::invalid(
            "runahead.devices",
            0,
            "must be at least 1: the number of GPUs to split the prefill over",
        ));
    }
    shape.check_one_batch_resident_weights(
        options,
        "KV-Runahead prefills one batch",
        "KV-Runahead keeps a replica of the weights on every device",
    )?;
    Ok(ro.devices.min(shape.prompt))
}

/// One plan's inputs, for the phases of [`plan`].
struct Context<'a> {
    model: &'a ModelSpec,
    hw: &'a HardwareProfile,
    cost: &'a CostModel,
    shape: &'a Shape,
    costs: ModelCosts<'a>,
    offered: u32,
}

impl Context<'_> {
    /// The plan's name in memory errors, with `p` devices.
    fn what(&self, p: usize) -> String {
        format!(
            "runahead plan for {} on {} ({} device{})",
            self.model.name,
            self.hw.name,
            p,
            if p == 1 { "" } else { "s" }
        )
    }

    /// Fails fast: no partition over any number of devices can go below the last device's
    /// floor (the whole context's K,V and the weights).
    fn check_floor(&self) -> Result<()> {
        let (model, hw, shape) = (self.model, self.hw, self.shape);
        let floor = memory::floor(model, shape.batch, shape.prompt, shape.gen_len);
        if floor.gpu_bytes() <= hw.gpu.usable_bytes() {
            return Ok(());
        }
        let advice = if model.weight_bytes() > hw.gpu.usable_bytes() {
            "the weights alone exceed one GPU and KV-Runahead keeps a replica on every device; use a GPU with more memory"
        } else {
            ADVICE
        };
        let what = format!(
            "{}, last device, with any partition",
            self.what(self.offered as usize)
        );
        floor.check(hw, &what, advice, "")
    }

    /// Whether `part` fits one GPU's memory on its fullest device.
    fn fits(&self, part: &[u32]) -> bool {
        let s = self.shape;
        memory::device_memory(self.model, s.batch, part, s.gen_len)
            .0
            .gpu_bytes()
            <= self.hw.gpu.usable_bytes()
    }

    /// Every device count's best partition found, and its TTFT simulated on the engine where it
    /// fits (`None` where it does not). Counts that cannot come within the tolerance of the best
    /// are pruned; if the best does not fit in memory, the pruning rested on a candidate that is
    /// not one, and the search runs in full.
    fn search(&self) -> Result<(Optimum, Vec<Option<f64>>)> {
        let (n, b) = (self.shape.prompt, self.shape.batch);
        let simulate_all = |opt: &Optimum| -> Result<Vec<Option<f64>>> {
            opt.by_devices
                .iter()
                .map(|d| {
                    self.fits(&d.partition)
                        .then(|| simulated_ttft(self.model, b, &d.partition, self.cost))
                        .transpose()
                })
                .collect()
        };
        let mut opt = optimise_for_choice(&self.costs, n, self.offered, DEVICE_TOLERANCE);
        let mut simulated = simulate_all(&opt)?;
        let best_found = opt
            .by_devices
            .iter()
            .map(|d| d.ttft_s)
            .fold(f64::INFINITY, f64::min);
        let best_fitting = simulated
            .iter()
            .flatten()
            .copied()
            .fold(f64::INFINITY, f64::min);
        if opt.by_devices.iter().any(|d| d.pruned) && best_fitting > best_found * (1.0 + 1e-9) {
            opt = optimise(&self.costs, n, self.offered);
            simulated = simulate_all(&opt)?;
        }
        Ok((opt, simulated))
    }

    /// Above the floor, yet no partition found fits: the error of the one needing least memory.
    fn least_memory_error(&self, opt: &Optimum) -> Error {
        let (model, s) = (self.model, self.shape);
        let d = opt
            .by_devices
            .iter()
            .min_by_key(|d| {
                memory::device_memory(model, s.batch, &d.partition, s.gen_len)
                    .0
                    .gpu_bytes()
            })
            .expect("one device count");
        let (mem, i) = memory::device_memory(model, s.batch, &d.partition, s.gen_len);
        let what = format!("{}, device {i}", self.what(d.partition.len()));
        mem.check(self.hw, &what, ADVICE, "")
            .err()
            .unwrap_or_else(|| {
                Error::invalid("workload.prompt", s.prompt, "does not fit in GPU memory")
            })
    }

    /// The note on the device count chosen (`ci`, 0-based) when it is not the fastest that
    /// fits: the prompt stayed on one device (`stayed`), or a count within the tolerance of the
    /// best was preferred.
    fn device_note(
        &self,
        simulated: &[Option<f64>],
        ci: usize,
        stayed: bool,
        single: f64,
        runahead: f64,
    ) -> Option<RunaheadNote> {
        let best = simulated
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.map(|t| (i, t)))
            .min_by(|a, c| a.1.total_cmp(&c.1));
        if stayed {
            let (bi, bt) = best.expect("a candidate");
            return Some(RunaheadNote::StaysOnOneDevice {
                best_devices: bi + 1,
                single_s: single,
                best_s: bt,
                min_gain: MIN_GAIN,
            });
        }
        let (bi, bt) = best.filter(|&(bi, _)| bi != ci)?;
        Some(RunaheadNote::FewerDevices {
            used: ci + 1,
            offered: self.offered,
            best_devices: bi + 1,
            best_s: bt,
            chosen_s: runahead,
            tolerance: DEVICE_TOLERANCE,
        })
    }

    /// Refuses a schedule of more than [`MAX_OPS`](crate::types::MAX_OPS) ops for `part`.
    fn check_ops(&self, part: &[u32]) -> Result<()> {
        let (layers, gen_len) = (u64::from(self.model.num_layers), self.shape.gen_len);
        let est_ops = part.len() as u64 * (layers * 9 + 4) + u64::from(gen_len) * (layers * 8 + 3);
        if est_ops > crate::types::MAX_OPS {
            return Err(Error::invalid(
                "workload.gen",
                gen_len,
                format!(
                    "the schedule would have about {est_ops} ops (limit {}); reduce `workload.gen`",
                    crate::types::MAX_OPS
                ),
            ));
        }
        Ok(())
    }

    /// The notes on the context: the single-device baseline that does not fit
    /// (`single_unfit`), a context past the model's trained length, the decode steps on
    /// `decode_device`.
    fn context_notes(&self, single_unfit: bool, decode_device: u32) -> Vec<RunaheadNote> {
        let (model, shape) = (self.model, self.shape);
        let mut notes = Vec::new();
        if single_unfit {
            notes.push(RunaheadNote::SingleDeviceDoesNotFit);
        }
        if shape.prompt > model.max_position {
            notes.push(RunaheadNote::PastTrainedLength {
                context: shape.prompt,
                model: model.name.clone(),
                max_position: model.max_position,
            });
        }
        if shape.gen_len > 1 {
            notes.push(RunaheadNote::DecodeOnLastDevice {
                steps: shape.gen_len - 1,
                device: decode_device,
            });
        }
        notes
    }

    /// The decisions of the chosen partition: its TTFT against the baselines, the peer link and
    /// its bytes, what limits it, and how it was found.
    fn details(
        &self,
        opt: &Optimum,
        chosen: &DeviceOptimum,
        simulated: Vec<Option<f64>>,
        ttft_s: TtftByMethod,
        schedule: &Schedule,
        tp_sched: &Schedule,
    ) -> RunaheadDetails {
        let (costs, part) = (&self.costs, &chosen.partition);
        let layers = u64::from(self.model.num_layers);
        let st = costs::starts(part);
        let peer_bytes_by_device: Vec<u64> = part
            .iter()
            .zip(&st)
            .enumerate()
            .map(|(i, (&c, &s))| {
                if i + 1 < part.len() {
                    costs.kv_bytes(s + c) * layers
                } else {
                    0
                }
            })
            .collect();
        let bottleneck = {
            let (mut w, mut x) = (0.0f64, 0.0f64);
            for (i, (&c, &s)) in part.iter().zip(&st).enumerate() {
                w = w.max(costs.chunk(c, s).layer());
                if i + 1 < part.len() {
                    x = x.max(costs.link(s + c));
                }
            }
            if x > w { "link" } else { "compute" }
        };
        let peer_bytes = schedule::peer_bytes(schedule);
        debug_assert_eq!(peer_bytes, peer_bytes_by_device.iter().sum::<u64>());
        let link = self.cost.peer();
        RunaheadDetails {
            devices_used: part.len() as u32,
            partition: part.clone(),
            speedup: ttft_s.single_device / ttft_s.runahead,
            devices_offered: self.offered,
            speedup_vs_tensor_parallel: ttft_s.tensor_parallel / ttft_s.runahead,
            ttft_s,
            ttft_by_devices_s: simulated,
            decode_device: part.len() as u32 - 1,
            link_gbps: 1e-9 / link.secs_per_byte,
            link_latency_us: link.latency_s * 1e6,
            peer_bytes,
            peer_bytes_by_device,
            tensor_parallel_peer_bytes: schedule::peer_bytes(tp_sched),
            bottleneck,
            search: SearchInfo {
                grid_cells: opt.grid_cells,
                cell_tokens: opt.cell_tokens,
                exact: opt.exact,
                refine_rounds: chosen.refine_rounds,
                states: opt.states,
                local_optimum: chosen.local_optimum,
            },
        }
    }
}

/// How the chosen partition was found.
fn partition_found(opt: &Optimum, chosen: &DeviceOptimum) -> PartitionFound {
    match chosen.method {
        Method::Grid => PartitionFound::Grid {
            grid_cells: opt.grid_cells,
            cell_tokens: opt.cell_tokens,
            exact: opt.exact,
        },
        Method::Constructed => PartitionFound::Constructed {
            window: POLISH_WINDOW,
        },
        Method::Neighbour => PartitionFound::Neighbour,
        Method::Even if chosen.partition.len() == 1 => PartitionFound::OneDevice,
        Method::Even => PartitionFound::Even,
    }
}
