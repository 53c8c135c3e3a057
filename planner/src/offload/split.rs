//! KVPR's split for every decode step: the per-step [`SplitProblem`] read from the cost model,
//! and the search that times candidate splits on the emitted schedule.

use super::kvpr::{Split, SplitProblem};
use kvplan_vocab::cost::CostModel;
use kvplan_vocab::error::{Error, Result};
use kvplan_vocab::host::MemoryKinds;
use kvplan_vocab::model::ModelSpec;
use kvplan_vocab::schedule::OpKind;
use kvplan_vocab::timeline::last_kernel_end;

use super::options::{SplitModel, SplitPolicy, StepSplit};
use super::schedule::{Layout, build_schedule};
use crate::types::{Shape, Strategy};
use kvplan_vocab::layers::{layer_compute_s, recompute_gemm};

/// The split problem of decode step `step` (cost terms from `cost`).
pub fn split_problem(
    cost: &CostModel,
    m: &ModelSpec,
    shape: &Shape,
    weights_on_gpu: bool,
    memory: MemoryKinds,
    step: u32,
    model: SplitModel,
) -> SplitProblem {
    let b = shape.batch;
    let s = shape.cached_at(step);
    // Each class's copies at its memory kind's link cost (the weights', activations' and KV's).
    let link = cost.h2d(memory.weights);
    let act_link = cost.h2d(memory.activations);
    let kv_link = cost.h2d(memory.kv);
    let p = m.dtype_bytes() as f64;
    let w = m.layer_weights();
    let paper = model == SplitModel::Paper;
    let (weights_s, weights_kv_s) = if weights_on_gpu || paper {
        (0.0, 0.0)
    } else {
        (
            link.time(w.kv_proj) + link.time(w.q_o_proj) + link.time(w.ffn),
            link.time(w.kv_proj),
        )
    };
    // Recompute GEMM roofline terms, scaled by the calibrated ratio at this step's size.
    let rc = recompute_gemm(m, b, s);
    let ratio = match rc {
        OpKind::Gemm {
            m: rows,
            n,
            k,
            dtype,
            ..
        } => cost.gemm_ratio(rows, n, k, dtype),
        _ => 1.0,
    };
    let g0 = cost.gemm_cost(m.dtype);
    let g = kvplan_vocab::cost::KernelCost {
        overhead_s: g0.overhead_s * ratio,
        secs_per_flop: g0.secs_per_flop * ratio,
        secs_per_byte: g0.secs_per_byte * ratio,
    };
    let bf = f64::from(b);
    let h = f64::from(m.hidden);
    let kvd = m.kv_dim() as f64;
    let e = cost.elementwise_cost();
    SplitProblem {
        seq_len: s,
        gpu_batches: shape.gpu_batches,
        weights_s,
        weights_kv_s,
        copy_latency_s: kv_link.latency_s,
        act_s_per_token: bf * m.act_bytes_per_token_layer() as f64 * act_link.secs_per_byte,
        kv_s_per_token: bf * m.kv_bytes_per_token_layer() as f64 * kv_link.secs_per_byte,
        recompute_overhead_s: g.overhead_s + e.overhead_s,
        recompute_flop_s_per_token: 2.0 * bf * 2.0 * kvd * h * g.secs_per_flop,
        recompute_mem_fixed_s: h * 2.0 * kvd * p * g.secs_per_byte,
        recompute_mem_s_per_token: bf * (h + 2.0 * kvd) * p * g.secs_per_byte,
        concat_s_per_token: 2.0 * bf * m.kv_bytes_per_token_layer() as f64 * e.secs_per_byte,
        main_compute_s: if paper {
            0.0
        } else {
            layer_compute_s(cost, m, b, 1, s + 1)
        },
        serial_prefetch: paper,
    }
}

/// KVPR splits for every decode step.
///
/// `SplitModel::Paper` takes each step's LP optimum of the paper's Eq. 10. `SplitModel::Schedule`
/// (the default) chooses what the simulator will run fastest: each step's candidate splits are
/// timed on the discrete-event engine ([`kvplan_sim::engine`]) in a two-step probe of the very
/// schedule [`plan`](crate::plan::plan) emits (see `probe_step_s`); the LP optimum of the schedule's steady-state
/// model seeds the search. `search_split` picks the candidates; `anchor_steps` the steps searched.
pub fn kvpr_splits(
    cost: &CostModel,
    m: &ModelSpec,
    shape: &Shape,
    weights_on_gpu: bool,
    memory: MemoryKinds,
    policy: SplitPolicy,
    model: SplitModel,
) -> Result<Vec<StepSplit>> {
    let steps = shape.decode_steps();
    let problems: Vec<SplitProblem> = (1..=steps)
        .map(|step| split_problem(cost, m, shape, weights_on_gpu, memory, step, model))
        .collect();
    let chosen: Vec<Split> = match (policy, model) {
        (SplitPolicy::Tokens(l), _) => problems.iter().map(|p| p.fixed(l)).collect(),
        (SplitPolicy::Auto, SplitModel::Paper) => {
            problems.iter().map(|p| p.solve()).collect::<Result<_>>()?
        }
        (SplitPolicy::Auto, SplitModel::Schedule) => {
            let probe = Probe {
                cost,
                m,
                shape,
                weights_on_gpu,
                memory,
            };
            let anchors = anchor_steps(steps);
            let mut at_anchor = Vec::with_capacity(anchors.len());
            // Probes with activations stored (any recomputation needs them at every step),
            // against plain transfer without them.
            let (mut with_x, mut without_x) = (0.0, 0.0);
            for &step in &anchors {
                let p = &problems[(step - 1) as usize];
                let seed = p.solve()?.recompute_tokens;
                let (l, t) = search_split(&probe, step, p.seq_len, seed)?;
                at_anchor.push(l);
                with_x += t;
                without_x += probe_step_s(&probe, step, 0, false)?;
            }
            if without_x <= with_x {
                at_anchor.iter_mut().for_each(|l| *l = 0);
            }
            (1..=steps)
                .map(|step| {
                    let p = &problems[(step - 1) as usize];
                    p.chosen(interpolate(&anchors, &at_anchor, step).min(p.seq_len))
                })
                .collect()
        }
    };
    Ok(problems
        .iter()
        .zip(chosen)
        .enumerate()
        .map(|(i, (p, split))| StepSplit {
            step: i as u32 + 1,
            seq_len: p.seq_len,
            split,
        })
        .collect())
}

/// Decode steps whose split is searched on the simulator: all of them up to
/// [`MAX_SEARCHED_STEPS`], else that many evenly spaced from the first to the last (the optimum
/// moves smoothly with `s'`; steps between anchors interpolate).
fn anchor_steps(steps: u32) -> Vec<u32> {
    if steps <= MAX_SEARCHED_STEPS {
        return (1..=steps).collect();
    }
    let n = u64::from(MAX_SEARCHED_STEPS - 1);
    let mut v: Vec<u32> = (0..=n)
        .map(|i| 1 + (i * u64::from(steps - 1) / n) as u32)
        .collect();
    v.dedup();
    v
}

/// Most decode steps searched one by one (the rest interpolate between them).
pub const MAX_SEARCHED_STEPS: u32 = 12;

/// The split at `step`: the anchors' splits, linearly interpolated between anchors.
fn interpolate(anchors: &[u32], values: &[u32], step: u32) -> u32 {
    match anchors.binary_search(&step) {
        Ok(i) => values[i],
        Err(i) => {
            let (a0, a1) = (anchors[i - 1], anchors[i]);
            let (v0, v1) = (f64::from(values[i - 1]), f64::from(values[i]));
            let t = f64::from(step - a0) / f64::from(a1 - a0);
            (v0 + t * (v1 - v0)).round().max(0.0) as u32
        }
    }
}

/// What a probe needs to build and time decode steps of one plan.
struct Probe<'a> {
    cost: &'a CostModel,
    m: &'a ModelSpec,
    shape: &'a Shape,
    weights_on_gpu: bool,
    memory: MemoryKinds,
}

/// Largest cached length searched exhaustively; longer ones start from a 17-point grid.
const EXHAUSTIVE_UP_TO: u32 = 32;

/// The split of one decode step that the simulated probe runs fastest: every `l` in `0..=s'`
/// for short contexts, else a 17-point grid plus the LP `seed`, then a ternary search between
/// the best point's neighbours. Ties go to the smaller `l` (fewer activations stored).
fn search_split(probe: &Probe, step: u32, seq_len: u32, seed: u32) -> Result<(u32, f64)> {
    search_min(seq_len, seed, |l| probe_step_s(probe, step, l, true))
}

/// The `l` in `0..=seq_len` where `time` is least, as [`search_split`] describes, each `l`
/// timed at most once. Apart from the probe, so that its rules (the grid, the bracket around the
/// grid's best, ties to the smaller `l`) are tested on step times written in the tests.
fn search_min(
    seq_len: u32,
    seed: u32,
    mut time: impl FnMut(u32) -> Result<f64>,
) -> Result<(u32, f64)> {
    let mut cache: std::collections::BTreeMap<u32, f64> = Default::default();
    let mut eval = |l: u32| -> Result<f64> {
        if let Some(&t) = cache.get(&l) {
            return Ok(t);
        }
        let t = time(l)?;
        cache.insert(l, t);
        Ok(t)
    };
    let mut grid: Vec<u32> = if seq_len <= EXHAUSTIVE_UP_TO {
        (0..=seq_len).collect()
    } else {
        (0..=16u64)
            .map(|i| (i * u64::from(seq_len) / 16) as u32)
            .collect()
    };
    grid.push(seed.min(seq_len));
    grid.sort_unstable();
    grid.dedup();
    let mut best = (f64::INFINITY, 0u32);
    for &l in &grid {
        let t = eval(l)?;
        if t < best.0 {
            best = (t, l);
        }
    }
    if seq_len > EXHAUSTIVE_UP_TO {
        let i = grid.binary_search(&best.1).expect("best is a grid point");
        let (mut lo, mut hi) = (grid[i.saturating_sub(1)], grid[(i + 1).min(grid.len() - 1)]);
        while hi - lo > 2 {
            let a = lo + (hi - lo) / 3;
            let b = hi - (hi - lo) / 3;
            if eval(a)? <= eval(b)? {
                hi = b;
            } else {
                lo = a;
            }
        }
        for l in lo..=hi {
            let t = eval(l)?;
            if t < best.0 || (t == best.0 && l < best.1) {
                best = (t, l);
            }
        }
    }
    Ok((best.1, best.0))
}

/// Simulated seconds of decode step `step` with split `l`, in context: the schedule [`plan`](super::plan)
/// emits for the step before it (prefill at step 1) and the step itself, both recomputing `l`
/// tokens, timed on the engine; the step's time runs from the last kernel of the step before to
/// its own last kernel, so prefetches into it overlap the step before as they do in the whole
/// run, and stores draining after a step's kernels are charged only where they delay a kernel
/// (the last step runs until its stores have drained, as the whole run does).
fn probe_step_s(probe: &Probe, step: u32, l: u32, keeps_x: bool) -> Result<f64> {
    let (a, b) = (step - 1, step);
    let l_at = |st: u32| l.min(probe.shape.cached_at(st.max(1)));
    let layout = Layout {
        model: probe.m,
        shape: probe.shape,
        strategy: Strategy::KVPR,
        weights_on_gpu: probe.weights_on_gpu,
        keeps_x,
        memory: probe.memory,
    };
    let schedule = build_schedule(&layout, a..=b, &l_at);
    // On the engine the plan is simulated on: with the cost model's host thread, if it has one.
    let spans = kvplan_sim::simulate(&schedule, probe.cost)
        .map_err(|e| Error::Solver {
            what: format!("the KVPR split probe at step {step}"),
            message: e.to_string(),
        })?
        .spans;
    // Each step ends with its last kernel; stores may still drain into the next step. The last
    // step has no next one: the run ends when its stores have drained, and the report charges
    // them to decode.
    let end = |step: u32| last_kernel_end(&schedule, &spans, |t| t.step == step);
    let end_b = if b == probe.shape.decode_steps() {
        spans.iter().fold(end(b), |m, s| m.max(s.end))
    } else {
        end(b)
    };
    Ok(end_b - end(a))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvplan_vocab::HardwareProfile;
    use kvplan_vocab::schedule::HostMemory;

    /// Steps between anchors take the straight line between the anchors' splits, rounded.
    #[test]
    fn interpolation_between_anchors_is_linear() {
        let (anchors, values) = ([1, 11, 15], [0, 100, 20]);
        assert_eq!(interpolate(&anchors, &values, 1), 0);
        assert_eq!(interpolate(&anchors, &values, 6), 50);
        assert_eq!(interpolate(&anchors, &values, 8), 70);
        assert_eq!(interpolate(&anchors, &values, 11), 100);
        assert_eq!(interpolate(&anchors, &values, 14), 40);
        assert_eq!(anchor_steps(5), vec![1, 2, 3, 4, 5]);
        let a = anchor_steps(100);
        assert_eq!((a.len(), a[0], a[11]), (12, 1, 100));
    }

    /// A fixed split gives one decision per decode step, numbered from 1, each clamped to the
    /// step's cached length.
    #[test]
    fn fixed_splits_are_numbered_from_the_first_decode_step() {
        let m = ModelSpec::preset("opt-125m").unwrap();
        let cost = CostModel::new(&HardwareProfile::preset("a100-40g-pcie4").unwrap());
        let shape = Shape {
            batch: 2,
            gpu_batches: 1,
            prompt: 16,
            gen_len: 5,
        };
        let splits = kvpr_splits(
            &cost,
            &m,
            &shape,
            true,
            MemoryKinds::uniform(HostMemory::Pinned),
            SplitPolicy::Tokens(17),
            SplitModel::Schedule,
        )
        .unwrap();
        let steps: Vec<u32> = splits.iter().map(|s| s.step).collect();
        assert_eq!(steps, vec![1, 2, 3, 4]);
        for s in &splits {
            assert_eq!(s.seq_len, 16 + s.step - 1, "{s:?}");
            assert_eq!(s.split.recompute_tokens, 17.min(s.seq_len), "{s:?}");
        }
    }

    /// The recompute GEMM's memory terms: its weights `[h, 2 kv_dim]` once per layer, and per
    /// token a row of X in and a row of K,V out per sequence, so their ratio is
    /// `batch (h + 2 kv_dim) / (2 h kv_dim)` whatever the rates (OPT-6.7B: h = kv_dim = 4096).
    #[test]
    fn recompute_memory_terms_are_weights_once_and_rows_per_token() {
        let m = ModelSpec::preset("opt-6.7b").unwrap();
        let cost = CostModel::new(&HardwareProfile::preset("a100-40g-pcie4").unwrap());
        let shape = Shape {
            batch: 8,
            gpu_batches: 1,
            prompt: 512,
            gen_len: 8,
        };
        let mem = MemoryKinds::uniform(HostMemory::Pinned);
        let p = split_problem(&cost, &m, &shape, true, mem, 3, SplitModel::Schedule);
        let ratio = p.recompute_mem_s_per_token / p.recompute_mem_fixed_s;
        let want = 8.0 * (4096.0 + 2.0 * 4096.0) / (2.0 * 4096.0 * 4096.0);
        assert!((ratio - want).abs() <= 1e-12 * want, "{ratio} vs {want}");
    }

    /// Past the exhaustive range the search takes a grid and then refines around its best
    /// point; it finds the same fastest split as timing every split.
    #[test]
    fn the_refined_search_finds_the_fastest_split_of_a_long_context() {
        let m = ModelSpec::preset("opt-125m").unwrap();
        let cost = CostModel::new(&HardwareProfile::preset("a100-40g-pcie4").unwrap());
        for prompt in [70u32, 101] {
            let shape = Shape {
                batch: 16,
                gpu_batches: 1,
                prompt,
                gen_len: 3,
            };
            let probe = Probe {
                cost: &cost,
                m: &m,
                shape: &shape,
                weights_on_gpu: true,
                memory: MemoryKinds::uniform(HostMemory::Pinned),
            };
            let step = 2;
            let n = shape.cached_at(step);
            assert!(n > EXHAUSTIVE_UP_TO);
            let (l, t) = search_split(&probe, step, n, 0).unwrap();
            let mut best = (f64::INFINITY, 0);
            for c in 0..=n {
                let tc = probe_step_s(&probe, step, c, true).unwrap();
                if tc < best.0 {
                    best = (tc, c);
                }
            }
            assert_eq!((l, t), (best.1, best.0), "prompt {prompt}");
        }
    }

    /// The first `l` in `0..=n` with the least `f(l)`: the search's answer where it is exact.
    fn argmin(n: u32, f: impl Fn(u32) -> f64) -> (u32, f64) {
        (0..=n).fold(
            (0, f64::INFINITY),
            |b, l| if f(l) < b.1 { (l, f(l)) } else { b },
        )
    }

    #[test]
    fn the_search_finds_the_minimum_of_a_valley_on_and_off_the_grid() {
        // Short contexts: every split. Long ones: the grid, then the bracket around its best.
        // 5000 / 16 = 312.5 apart: 1234 lies left of the grid point 1250, 1260 right of it.
        for (n, at) in [
            (30u32, 23u32),
            (5000, 1234),
            (5000, 1260),
            (5000, 0),
            (5000, 5000),
            (160, 80),
        ] {
            let f = |l: u32| 1.0 + (f64::from(l) - f64::from(at)).powi(2);
            assert_eq!(
                search_min(n, 0, |l| Ok(f(l))).unwrap(),
                (at, 1.0),
                "n {n}, minimum at {at}"
            );
        }
    }

    #[test]
    fn ties_go_to_the_smallest_split_of_a_flat_minimum() {
        // Flat everywhere: split 0, on the exhaustive path and on the grid's.
        for n in [20u32, 100] {
            assert_eq!(search_min(n, 7, |_| Ok(1.0)).unwrap(), (0, 1.0), "n {n}");
        }
        // A plateau at 40..=60: the grid's first point on it is 43, the refinement reaches 40.
        let f = |l: u32| 1.0 + 0.01 * f64::from(40u32.saturating_sub(l).max(l.saturating_sub(60)));
        assert_eq!(argmin(100, f), (40, 1.0));
        assert_eq!(search_min(100, 0, |l| Ok(f(l))).unwrap(), (40, 1.0));
    }

    #[test]
    fn a_faster_grid_point_is_kept_when_the_bracket_holds_none() {
        // One fast split on the grid (160 / 16 = 10 apart) and flat elsewhere: the ternary search
        // walks off it into a flat stretch, which must not displace it.
        let f = |l: u32| if l == 80 { 0.5 } else { 1.0 };
        assert_eq!(search_min(160, 0, |l| Ok(f(l))).unwrap(), (80, 0.5));
    }

    #[test]
    fn the_search_times_each_split_once_and_few_of_a_long_context() {
        let mut timed = Vec::new();
        let (l, _) = search_min(100_000, 31_415, |l| {
            timed.push(l);
            Ok((f64::from(l) - 31_000.0).abs())
        })
        .unwrap();
        assert_eq!(l, 31_000);
        let mut unique = timed.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), timed.len(), "a split timed twice");
        // 17 grid points, the seed, two per ternary round (log1.5 of 12,500), the last three.
        assert!(timed.len() < 70, "{} splits timed", timed.len());
        assert!(timed.contains(&31_415), "the seed is a candidate");
    }

    #[test]
    fn a_failed_probe_fails_the_search() {
        let r = search_min(100, 0, |l| {
            if l == 50 {
                Err(Error::Solver {
                    what: "probe".into(),
                    message: "boom".into(),
                })
            } else {
                Ok(1.0)
            }
        });
        assert!(matches!(r, Err(Error::Solver { .. })), "{r:?}");
    }
}
