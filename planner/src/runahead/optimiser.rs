//! The partition optimiser (see the module docs of [`crate::runahead`]): an exact Pareto DP over
//! a grid of boundaries refined to single tokens for small device counts, and for every count a
//! direct construction of the cap-balanced partition, polished by the same exact DP over small
//! windows.

use super::costs::{ChunkCost, ChunkCosts, even_partition, starts, ttft};

/// Most cells of the coarse grid of [`optimise`] (contexts up to this many tokens are searched
/// exactly, token by token).
pub const GRID_CELLS: u32 = 48;

/// Device counts up to this many get the coarse-grid DP and its refinement (above it the grid
/// is too coarse for the chunks, and the refinement walks for long); every count from two gets
/// the construction. Contexts of at most [`GRID_CELLS`] tokens get the exact DP for every
/// count and no construction.
pub const GRID_DEVICES: usize = 16;

/// Finer steps on each side of a boundary in a refinement round of [`optimise`].
pub const WINDOW: u32 = 6;

/// Tokens on each side of a boundary in a polishing round of a constructed partition.
pub const POLISH_WINDOW: u32 = 2;

/// Most polishing rounds per constructed partition.
const POLISH_ROUNDS: u32 = 4;

/// Step reduction per refinement round of [`optimise`].
const REFINE: u32 = 4;

/// Most refinement rounds per device count.
const MAX_ROUNDS: u32 = 64;

/// A Pareto point of the DP: the summary `(U, rho, Z)` of a suffix of devices and where it came
/// from.
#[derive(Debug, Clone, Copy)]
struct Pt {
    u: f64,
    rho: f64,
    z: f64,
    from_pos: u32,
    from_pt: u32,
}

/// One level of the DP: `m` devices placed from the end; per left boundary, the Pareto front.
struct Level {
    positions: Vec<u32>,
    fronts: Vec<Vec<Pt>>,
}

/// Keeps the points no other point beats in all of `u`, `rho`, `z` (ties keep one), in
/// `(u, rho, z)` order; `c` is left empty (its buffer is reused).
fn pareto(c: &mut Vec<Pt>, stair: &mut Vec<(f64, f64)>) -> Vec<Pt> {
    c.sort_unstable_by(|a, b| {
        a.u.total_cmp(&b.u)
            .then(a.rho.total_cmp(&b.rho))
            .then(a.z.total_cmp(&b.z))
    });
    let mut out = Vec::new();
    // (rho ascending, z strictly descending) of the points kept so far.
    stair.clear();
    for p in c.drain(..) {
        let i = stair.partition_point(|e| e.0 <= p.rho);
        if i > 0 && stair[i - 1].1 <= p.z {
            continue;
        }
        out.push(p);
        let j = stair.partition_point(|e| e.0 < p.rho);
        let mut k = j;
        while k < stair.len() && stair[k].1 >= p.z {
            k += 1;
        }
        if k == j + 1 {
            stair[j] = (p.rho, p.z);
        } else {
            stair.splice(j..k, [(p.rho, p.z)]);
        }
    }
    out
}

/// The DP of the module docs. `positions[m - 1]`: candidate left boundaries of the `m`-th
/// device from the end (0 closes a partition of `m` devices). `zmax[m - 1]`: states whose lower
/// bound on the TTFT exceeds it cannot beat an incumbent and are dropped; the bound of an open
/// state at boundary `p > 0` is `max(Z, U + x(p) + R + (L-1) max(rho, x(p)))`, `x(p)` the send
/// into it and `R` the sends of the levels still to come at their leftmost positions (a device
/// before `p` pays at least that fill and that rate). Returns the levels (for reconstruction)
/// and the number of states kept.
fn run_dp<C: ChunkCosts + ?Sized>(
    costs: &C,
    n: u32,
    positions: &[Vec<u32>],
    zmax: &[f64],
    cache: &mut dyn FnMut(u32, u32) -> (ChunkCost, f64),
) -> (Vec<Level>, u64) {
    let l1 = f64::from(costs.layers().saturating_sub(1));
    let mut levels: Vec<Level> = Vec::with_capacity(positions.len() + 1);
    levels.push(Level {
        positions: vec![n],
        fronts: vec![vec![Pt {
            u: 0.0,
            rho: 0.0,
            z: f64::NEG_INFINITY,
            from_pos: 0,
            from_pt: 0,
        }]],
    });
    // rest[m]: the sends of levels after m at their leftmost positions (0 sends nothing).
    let mut rest = vec![0.0; positions.len()];
    for m in (0..positions.len().saturating_sub(1)).rev() {
        let lo = positions[m + 1].iter().copied().min().unwrap_or(0);
        rest[m] = rest[m + 1] + if lo == 0 { 0.0 } else { costs.link(lo) };
    }
    let mut states = 0u64;
    let mut cand = Vec::new();
    let mut stair = Vec::new();
    for (m, pos) in positions.iter().enumerate() {
        let prev = &levels[m];
        let last = m == 0;
        let mut fronts = Vec::with_capacity(pos.len());
        for &p in pos {
            let xp = if p == 0 { 0.0 } else { costs.link(p) };
            for (qi, &q) in prev.positions.iter().enumerate() {
                if q <= p || (q == 0 && !last) || prev.fronts[qi].is_empty() {
                    continue;
                }
                let (cc, x) = cache(p, q);
                let e = cc.embed + cc.pre;
                for (pi, pt) in prev.fronts[qi].iter().enumerate() {
                    let (u, rho) = if last {
                        (cc.attn + cc.post, cc.layer())
                    } else {
                        (pt.u + x, pt.rho.max(cc.layer()).max(x))
                    };
                    let z = pt.z.max(e + u + l1 * rho);
                    let bound = if p == 0 {
                        z
                    } else {
                        z.max(u + xp + rest[m] + l1 * rho.max(xp))
                    };
                    if bound > zmax[m] {
                        continue;
                    }
                    cand.push(Pt {
                        u,
                        rho,
                        z,
                        from_pos: qi as u32,
                        from_pt: pi as u32,
                    });
                }
            }
            let f = if p == 0 {
                // A closed partition: only its TTFT matters.
                let f = cand
                    .iter()
                    .min_by(|a, b| a.z.total_cmp(&b.z))
                    .into_iter()
                    .copied()
                    .collect();
                cand.clear();
                f
            } else {
                pareto(&mut cand, &mut stair)
            };
            states += f.len() as u64;
            fronts.push(f);
        }
        levels.push(Level {
            positions: pos.clone(),
            fronts,
        });
    }
    (levels, states)
}

/// The best closed partition of `m` devices in `levels` (level `m` must hold position 0).
fn closed(levels: &[Level], m: usize, head: f64) -> Option<(f64, Vec<u32>)> {
    let lv = &levels[m];
    let pi = lv.positions.iter().position(|&p| p == 0)?;
    let best = lv.fronts[pi].first()?;
    let mut bounds = vec![0u32];
    let (mut pos, mut pt) = (best.from_pos as usize, best.from_pt as usize);
    for l in (1..m).rev() {
        bounds.push(levels[l].positions[pos]);
        let p = levels[l].fronts[pos][pt];
        pos = p.from_pos as usize;
        pt = p.from_pt as usize;
    }
    bounds.push(levels[0].positions[0]);
    Some((
        head + best.z,
        bounds.windows(2).map(|w| w[1] - w[0]).collect(),
    ))
}

/// How a device count's partition was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// Equal chunks: nothing better was found.
    Even,
    /// The exact DP on the coarse grid, refined to single tokens when the grid is coarser.
    Grid,
    /// The cap-balanced construction, polished by the DP over windows of
    /// [`POLISH_WINDOW`] tokens.
    Constructed,
    /// A neighbouring count's best with a one-token device added in front, or one merged away.
    Neighbour,
}

/// The best partition found for one device count.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceOptimum {
    /// Tokens per device, in chain order.
    pub partition: Vec<u32>,
    /// Its TTFT ([`ttft`]), seconds.
    pub ttft_s: f64,
    /// Refinement (or polishing) rounds run.
    pub refine_rounds: u32,
    /// Whether the last refinement round (at one token) found no better partition: no
    /// simultaneous move of the boundaries by up to [`WINDOW`] tokens ([`POLISH_WINDOW`] for a
    /// constructed partition) improves it. Always true when the coarse grid is every token.
    pub local_optimum: bool,
    /// How the partition was found.
    pub method: Method,
    /// Whether the search of this count was cut short (no grid DP, no polish) because a lower
    /// bound on its TTFT is above the tolerance of [`optimise_for_choice`] over the best found:
    /// its partition is a valid one, the best found, not the best there is.
    pub pruned: bool,
}

impl DeviceOptimum {
    fn new(partition: Vec<u32>, ttft_s: f64, method: Method) -> Self {
        DeviceOptimum {
            partition,
            ttft_s,
            refine_rounds: 0,
            local_optimum: false,
            method,
            pruned: false,
        }
    }
}

/// What [`optimise`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Optimum {
    /// Best partition found for `1, 2, ..., max_devices` devices.
    pub by_devices: Vec<DeviceOptimum>,
    /// Cells of the coarse grid.
    pub grid_cells: u32,
    /// Tokens per coarse cell (the largest cell).
    pub cell_tokens: u32,
    /// Whether the coarse grid is every token (the search is exact).
    pub exact: bool,
    /// Pareto states kept by the coarse DP.
    pub states: u64,
}

/// Finds the TTFT-minimising partition of `context` tokens for every device count
/// `1..=max_devices` (capped at `context`), as in the module docs: for up to [`GRID_DEVICES`]
/// devices the exact DP on a grid, refined to token resolution; for every count the
/// cap-balanced construction, polished; the better of the two. Both are local searches, so each
/// count's result is then also compared with its neighbours' (a one-token device added to count
/// `p - 1`'s best, and one removed from count `p + 1`'s when it has a one-token chunk): the TTFT
/// of `p + 1` devices is never above that of `p` devices plus one front device of one token.
///
/// # Panics
/// If `context` or `max_devices` is 0.
pub fn optimise<C: ChunkCosts + ?Sized>(costs: &C, context: u32, max_devices: u32) -> Optimum {
    search(costs, context, max_devices, GRID_CELLS, None)
}

/// [`optimise`] with a coarse grid of at most `grid_cells` cells (exact for contexts of at most
/// `grid_cells` tokens; larger grids cost about `cells^3`).
///
/// # Panics
/// If `context`, `max_devices` or `grid_cells` is 0.
pub fn optimise_on_grid<C: ChunkCosts + ?Sized>(
    costs: &C,
    context: u32,
    max_devices: u32,
    grid_cells: u32,
) -> Optimum {
    search(costs, context, max_devices, grid_cells, None)
}

/// [`optimise`] for a caller that only needs the counts that can come within `tolerance` of the
/// best TTFT (the device-count rule): a count whose TTFT lower bound ([`ttft_lower_bound`]) is
/// above `(1 + tolerance)` times the best TTFT found over all counts skips the grid DP and the
/// polish, and keeps its constructed partition (marked [`DeviceOptimum::pruned`]). Counts that
/// can still matter are searched exactly as by [`optimise`].
///
/// # Panics
/// If `context` or `max_devices` is 0.
pub fn optimise_for_choice<C: ChunkCosts + ?Sized>(
    costs: &C,
    context: u32,
    max_devices: u32,
    tolerance: f64,
) -> Optimum {
    search(costs, context, max_devices, GRID_CELLS, Some(tolerance))
}

fn search<C: ChunkCosts + ?Sized>(
    costs: &C,
    context: u32,
    max_devices: u32,
    grid_cells: u32,
    tolerance: Option<f64>,
) -> Optimum {
    assert!(
        context > 0 && max_devices > 0 && grid_cells > 0,
        "a context, a device and a grid"
    );
    let n = context;
    let pmax = max_devices.min(n) as usize;
    let head = costs.head();
    let g = n.min(grid_cells);
    let grid: Vec<u32> = (0..=g)
        .map(|i| ((u64::from(i) * u64::from(n)) / u64::from(g)) as u32)
        .collect();
    let cell_tokens = grid.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(1);
    let exact = cell_tokens == 1;
    // Equal chunks for every device count: the first candidates.
    let even: Vec<f64> = (1..=pmax as u32)
        .map(|p| ttft(costs, &even_partition(n, p)))
        .collect();
    let mut by_devices: Vec<DeviceOptimum> = even
        .iter()
        .enumerate()
        .map(|(i, &t)| DeviceOptimum::new(even_partition(n, i as u32 + 1), t, Method::Even))
        .collect();
    by_devices[0].local_optimum = true;
    // The construction, for every count from two devices (the grid DP is exact on its own when
    // the grid is every token). Counts in increasing order, each starting from the last.
    if !exact {
        let mut warm = Warm::default();
        let mut last = None;
        for m in 2..=pmax {
            if let Some((t, part, c)) = construct(costs, n, m, last, &mut warm) {
                last = Some(c);
                let best = &mut by_devices[m - 1];
                if t < best.ttft_s {
                    *best = DeviceOptimum::new(part, t, Method::Constructed);
                }
            }
        }
    }
    // Counts that cannot come within the tolerance of the best found skip the rest.
    if let Some(tol) = tolerance.filter(|_| !exact) {
        let best = by_devices
            .iter()
            .map(|d| d.ttft_s)
            .fold(f64::INFINITY, f64::min);
        for (i, d) in by_devices.iter_mut().enumerate().skip(1) {
            d.pruned = ttft_lower_bound(costs, n, i + 1) > best * (1.0 + tol);
        }
    }
    // The grid DP for the counts up to GRID_DEVICES still searched (every count when exact).
    // Its incumbents are equal chunks: a state that cannot beat the worst of those of the
    // device counts it can still close at is dropped.
    let levels = (1..=if exact { pmax } else { pmax.min(GRID_DEVICES) })
        .filter(|&m| !by_devices[m - 1].pruned)
        .max()
        .unwrap_or(1);
    let mut states = 0;
    if levels > 1 {
        let mut zmax = vec![0.0; levels];
        let mut worst = f64::NEG_INFINITY;
        for m in (0..levels).rev() {
            worst = worst.max(even[m]);
            zmax[m] = (worst - head) * (1.0 + 1e-12) + 1e-15;
        }
        // Coarse level: every grid point for every device count; 0 closes.
        let interior: Vec<u32> = grid[..g as usize].to_vec(); // 0 and the interior points
        let positions: Vec<Vec<u32>> = (0..levels)
            .map(|m| {
                if m + 1 == levels {
                    vec![0]
                } else {
                    interior.clone()
                }
            })
            .collect();
        let gi = |t: u32| grid.binary_search(&t).expect("a grid point");
        let mut table: Vec<Option<(ChunkCost, f64)>> = vec![None; grid.len() * grid.len()];
        let mut cache = |p: u32, q: u32| {
            let idx = gi(p) * grid.len() + gi(q);
            *table[idx].get_or_insert_with(|| (costs.chunk(q - p, p), costs.link(q)))
        };
        let (lv, st) = run_dp(costs, n, &positions, &zmax, &mut cache);
        states = st;
        for m in 2..=levels {
            let Some((t, part)) = closed(&lv, m, head) else {
                continue;
            };
            let mut found = DeviceOptimum::new(part, t, Method::Grid);
            found.local_optimum = true;
            if !exact && !by_devices[m - 1].pruned {
                found.local_optimum = false;
                refine(
                    costs,
                    n,
                    (cell_tokens / REFINE).max(1),
                    WINDOW,
                    MAX_ROUNDS,
                    &mut found,
                );
            }
            if found.ttft_s <= by_devices[m - 1].ttft_s {
                found.pruned = by_devices[m - 1].pruned;
                by_devices[m - 1] = found;
            }
        }
    }
    // Polish the constructed partitions still searched.
    for d in &mut by_devices {
        if d.method == Method::Constructed && !d.pruned {
            refine(costs, n, 1, POLISH_WINDOW, POLISH_ROUNDS, d);
        }
    }
    // One device more than the previous count's best can do what it did, with a one-token
    // chunk in front: never accept worse (the searches are local).
    for m in 1..pmax {
        let more = with_one_more(&by_devices[m - 1].partition);
        take_if_better(costs, &mut by_devices[m], more);
    }
    // And one device fewer than the next count's best can do what it did without a one-token
    // chunk (merged into its neighbour), when that is better.
    for m in (1..pmax).rev() {
        let fewer = with_one_fewer(&by_devices[m].partition);
        take_if_better(costs, &mut by_devices[m - 1], fewer);
    }
    Optimum {
        by_devices,
        grid_cells: g,
        cell_tokens,
        exact,
        states,
    }
}

/// `partition` with a one-token chunk taken from the front of its first chunk of two tokens or
/// more (the new device sends the K,V of a few tokens; no chunk grows). `None` when every chunk
/// has one token.
fn with_one_more(partition: &[u32]) -> Option<Vec<u32>> {
    let j = partition.iter().position(|&c| c >= 2)?;
    let mut p = partition.to_vec();
    p[j] -= 1;
    p.insert(j, 1);
    Some(p)
}

/// `partition` with its first one-token chunk merged into the next chunk. `None` when there is
/// none (or only the last chunk has one token).
fn with_one_fewer(partition: &[u32]) -> Option<Vec<u32>> {
    let j = partition[..partition.len().saturating_sub(1)]
        .iter()
        .position(|&c| c == 1)?;
    let mut p = partition.to_vec();
    p.remove(j);
    p[j] += 1;
    Some(p)
}

/// Replaces `best` by `part` when `part` has a lower TTFT.
fn take_if_better<C: ChunkCosts + ?Sized>(
    costs: &C,
    best: &mut DeviceOptimum,
    part: Option<Vec<u32>>,
) {
    if let Some(part) = part {
        let t = ttft(costs, &part);
        if t < best.ttft_s {
            best.partition = part;
            best.ttft_s = t;
            best.local_optimum = false;
            best.method = Method::Neighbour;
        }
    }
}

/// Refines `best` by the exact DP over windows of `window` steps on each side of every
/// boundary: the step starts at `step` tokens and shrinks 4x per round down to one token; a
/// round whose best partition reaches the edge of a window is repeated at the same step (the
/// optimum may lie further out), and rounds at one token repeat while they improve; at most
/// `rounds` rounds.
fn refine<C: ChunkCosts + ?Sized>(
    costs: &C,
    n: u32,
    step: u32,
    window: u32,
    rounds: u32,
    best: &mut DeviceOptimum,
) {
    let m = best.partition.len();
    if m < 2 {
        best.local_optimum = true;
        return;
    }
    let head = costs.head();
    let mut fine = step.max(1);
    let mut repeats = 0;
    for _ in 0..rounds {
        let bounds: Vec<u32> = starts(&best.partition)[1..].to_vec(); // s_1 .. s_D
        let d = bounds.len();
        // Level k (1-based from the end) places the left boundary s_{d+1-k}.
        let mut positions: Vec<Vec<u32>> = Vec::with_capacity(m);
        for lvl in 1..m {
            let b = bounds[d - lvl];
            let idx = (d - lvl + 1) as i64; // boundary index (s_1 is index 1)
            let lo = idx; // room for idx devices before it
            let hi = i64::from(n) - (m as i64 - idx); // room for the devices after it
            let v: Vec<u32> = (-(window as i64)..=window as i64)
                .map(|j| i64::from(b) + j * i64::from(fine))
                .filter(|&t| t >= lo && t <= hi)
                .map(|t| t as u32)
                .collect();
            positions.push(v);
        }
        positions.push(vec![0]);
        let zmax = vec![(best.ttft_s - head) * (1.0 + 1e-12) + 1e-15; m];
        let mut cache = |p: u32, q: u32| (costs.chunk(q - p, p), costs.link(q));
        let (levels, _) = run_dp(costs, n, &positions, &zmax, &mut cache);
        best.refine_rounds += 1;
        let mut edge = false;
        let mut moved = false;
        if let Some((_, part)) = closed(&levels, m, head) {
            let t = ttft(costs, &part);
            // Move only for a real improvement (ties would wander).
            if t < best.ttft_s * (1.0 - 1e-12) {
                let nb = starts(&part);
                edge = nb[1..]
                    .iter()
                    .zip(&bounds)
                    .any(|(&a, &b)| a.abs_diff(b) >= (window - 1) * fine);
                best.partition = part;
                best.ttft_s = t;
                moved = true;
            }
        }
        best.local_optimum = false;
        if edge && repeats < 8 {
            repeats += 1;
            continue;
        }
        if fine == 1 {
            if !moved {
                best.local_optimum = true;
                break;
            }
            continue;
        }
        fine = (fine / REFINE).max(1);
        repeats = 0;
    }
}

// ---- the construction -------------------------------------------------------------------------

/// The largest chunk ending at `end` (at most `end` tokens) whose layer time is at most `r` and
/// whose `embed + pre` is at most `b`; 0 when not even one token fits. Both grow with the chunk
/// (it grows at its front), so the search gallops out from `guess` and then bisects.
fn max_chunk<C: ChunkCosts + ?Sized>(costs: &C, end: u32, r: f64, b: f64, guess: u32) -> u32 {
    let ok = |c: u32| {
        let k = costs.chunk(c, end - c);
        k.layer() <= r && k.embed + k.pre <= b
    };
    if end == 0 {
        return 0;
    }
    // ok(lo) (lo = 0: not even one token) and not ok(hi) (hi = end + 1: every length is).
    let (mut lo, mut hi);
    let g = guess.clamp(1, end);
    let mut step = 1u32;
    if ok(g) {
        (lo, hi) = (g, end + 1);
        while lo < end {
            let t = lo.saturating_add(step).min(end);
            if !ok(t) {
                hi = t;
                break;
            }
            lo = t;
            step = step.saturating_mul(2);
        }
    } else {
        (lo, hi) = (0, g);
        while hi > 1 {
            let t = hi.saturating_sub(step).max(1);
            if ok(t) {
                lo = t;
                break;
            }
            hi = t;
            step = step.saturating_mul(2);
        }
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Where a greedy chain ([`chain`]) stopped.
enum ChainEnd {
    /// It reached token 0.
    Covered,
    /// Tokens `[0, s)` are left after the allowed devices, whose first has fill `u`.
    Left { s: u32, u: f64 },
    /// A device could not take a single token, or a send is slower than the cap.
    Stuck,
}

/// What a device of a greedy chain may cost.
#[derive(Clone, Copy)]
struct Limits {
    /// Most layer time.
    rate: f64,
    /// Most send time.
    send: f64,
    /// Most `embed + pre + U`.
    budget: f64,
}

/// Places devices from the back, with tokens `[0, s)` left and fill `u` (the `U` of the device
/// after them): each takes the largest chunk within `lim`; at most `max` devices. Chunks are pushed onto
/// `out` (back to front); `hint[i]` guesses the chunk pushed at `out[i]`.
///
/// Under a fixed cap and budget no chain covers the prefix with fewer devices: by induction,
/// every boundary it places is at or before the matching boundary of any other chain (a chunk
/// ending earlier costs no more, so the largest chunk ending at an earlier point starts no
/// later), and so is every fill (a send's cost depends on where the chunk ends).
fn chain<C: ChunkCosts + ?Sized>(
    costs: &C,
    mut s: u32,
    mut u: f64,
    lim: Limits,
    max: usize,
    hint: &[u32],
    out: &mut Vec<u32>,
) -> ChainEnd {
    for _ in 0..max {
        if s == 0 {
            return ChainEnd::Covered;
        }
        let x = costs.link(s);
        if x > lim.send {
            return ChainEnd::Stuck;
        }
        let guess = hint.get(out.len()).or(out.last()).copied().unwrap_or(1);
        let c = max_chunk(costs, s, lim.rate, lim.budget - (u + x), guess);
        if c == 0 {
            return ChainEnd::Stuck;
        }
        u += x;
        out.push(c);
        s -= c;
    }
    if s == 0 {
        ChainEnd::Covered
    } else {
        ChainEnd::Left { s, u }
    }
}

/// What one construction hands the next: the latest chain (back to front, guesses for the chunk
/// searches) and its cap. Consecutive device counts and nearby last-chunk sizes have close
/// chains.
#[derive(Default)]
struct Warm {
    chunks: Vec<u32>,
    cap: Option<f64>,
}

/// The cap-balanced partition of `n` tokens over `p` devices, the last holding `last` tokens:
/// the least cap `R` such that a greedy chain covers the rest with `p - 1` devices, every one
/// taking the largest chunk whose layer time and send are at most `R` and whose
/// `embed + pre + U` is at most `budget`, the first what is left. Found by regula falsi on the
/// first device's excess over the cap. When even the least cap leaves devices idle they go in
/// front with one token each. `None` when no cap works (`last` too large, or the budget too
/// tight).
fn cap_balanced<C: ChunkCosts + ?Sized>(
    costs: &C,
    n: u32,
    p: usize,
    last: u32,
    budget: f64,
    warm: &mut Warm,
) -> Option<Vec<u32>> {
    if p < 2 || last == 0 || last as usize + (p - 1) > n as usize {
        return None;
    }
    let s0 = n - last;
    let kd = costs.chunk(last, s0);
    let u0 = kd.attn + kd.post;
    if kd.embed + kd.pre + u0 > budget {
        return None;
    }
    // No cap below the last device's layer time or the largest send works.
    let floor = kd.layer().max(costs.link(s0));
    let mut prev = std::mem::take(&mut warm.chunks);
    let mut cur = Vec::with_capacity(p);
    let mut best: Option<(f64, Vec<u32>)> = None;
    // How far the first device exceeds the cap (or the budget) when the `p - 2` devices between
    // it and the last take maximal chunks: non-increasing in the cap; <= 0 is feasible.
    let mut excess = |r: f64| -> f64 {
        cur.clear();
        cur.push(last);
        let lim = Limits {
            rate: r,
            send: r,
            budget,
        };
        let f = match chain(costs, s0, u0, lim, p - 2, &prev, &mut cur) {
            ChainEnd::Covered => -r,
            ChainEnd::Stuck => f64::INFINITY,
            ChainEnd::Left { s, u } => {
                cur.push(s);
                let k = costs.chunk(s, 0);
                let x = costs.link(s);
                (k.layer().max(x) - r).max(k.embed + k.pre + u + x - budget)
            }
        };
        if f <= 0.0 && best.as_ref().is_none_or(|b| r < b.0) {
            best = Some((r, cur.clone()));
        }
        std::mem::swap(&mut prev, &mut cur);
        f
    };
    // Bracket the least feasible cap, [lo, hi] with excess(lo) > 0 >= excess(hi), out from the
    // last cap found.
    let start = warm.cap.filter(|&c| c > floor).unwrap_or(floor);
    let f = excess(start);
    let (mut lo, mut f_lo, mut hi, mut f_hi);
    let mut d = 1e-3;
    if f <= 0.0 {
        (hi, f_hi) = (start, f);
        loop {
            if hi <= floor {
                (lo, f_lo) = (hi, f_hi);
                break;
            }
            let r = (start * (1.0 - d)).max(floor);
            let f = excess(r);
            if f > 0.0 {
                (lo, f_lo) = (r, f);
                break;
            }
            (hi, f_hi) = (r, f);
            d *= 8.0;
        }
    } else {
        (lo, f_lo) = (start, f);
        loop {
            if d > 1e6 {
                return None;
            }
            let r = start * (1.0 + d);
            let f = excess(r);
            if f <= 0.0 {
                (hi, f_hi) = (r, f);
                break;
            }
            (lo, f_lo) = (r, f);
            d *= 8.0;
        }
    }
    // Illinois regula falsi on the excess (a fine staircase), bisecting every fourth step.
    let mut side = 0i32;
    for it in 0..64 {
        if hi - lo <= 1e-8 * hi {
            break;
        }
        let mut r = if f_lo.is_finite() && it % 4 != 3 {
            hi - f_hi * (hi - lo) / (f_hi - f_lo)
        } else {
            0.5 * (lo + hi)
        };
        if !(r > lo && r < hi) {
            r = 0.5 * (lo + hi);
        }
        let f = excess(r);
        if f <= 0.0 {
            (hi, f_hi) = (r, f);
            if side == 1 {
                f_lo *= 0.5;
            }
            side = 1;
        } else {
            (lo, f_lo) = (r, f);
            if side == -1 {
                f_hi *= 0.5;
            }
            side = -1;
        }
    }
    let (cap, mut part) = best?;
    warm.cap = Some(cap);
    warm.chunks.clone_from(&part);
    part.reverse();
    while part.len() < p {
        part = with_one_more(&part)?;
    }
    Some(part)
}

/// The slowest layer time or send of `partition` (its `rho_0`).
fn rate<C: ChunkCosts + ?Sized>(costs: &C, partition: &[u32]) -> f64 {
    let st = starts(partition);
    let d = partition.len() - 1;
    (0..=d)
        .map(|k| {
            let w = costs.chunk(partition[k], st[k]).layer();
            if k < d {
                w.max(costs.link(st[k] + partition[k]))
            } else {
                w
            }
        })
        .fold(0.0, f64::max)
}

/// Golden-section search for the least `f` on `[a, b]`, down to width `tol`.
fn golden(mut a: f64, mut b: f64, tol: f64, f: &mut dyn FnMut(f64) -> f64) -> f64 {
    let g = 0.5 * (5f64.sqrt() - 1.0);
    let (mut x1, mut x2) = (b - g * (b - a), a + g * (b - a));
    let (mut f1, mut f2) = (f(x1), f(x2));
    while b - a > tol {
        if f1 <= f2 {
            (b, x2, f2) = (x2, x1, f1);
            x1 = b - g * (b - a);
            f1 = f(x1);
        } else {
            (a, x1, f1) = (x1, x2, f2);
            x2 = a + g * (b - a);
            f2 = f(x2);
        }
    }
    if f1 <= f2 { x1 } else { x2 }
}

/// The best cap-balanced partition of `p` devices ([`cap_balanced`]) found by golden-section
/// search on `ln(last)` with no budget (around the previous count's `last` when given, widened
/// while the optimum sits on an edge), then on the budget below the largest `embed + pre + U`
/// of that partition (front devices shrink to balance their terms, the cap rising to make
/// room). Returns the TTFT, the partition and its last chunk.
fn construct<C: ChunkCosts + ?Sized>(
    costs: &C,
    n: u32,
    p: usize,
    around: Option<u32>,
    warm: &mut Warm,
) -> Option<(f64, Vec<u32>, u32)> {
    let cmax = n - (p as u32 - 1);
    let top = f64::from(cmax).ln();
    let (mut a, mut b) = match around {
        Some(c) => (f64::from(c).ln() - 0.7, f64::from(c).ln() + 0.7),
        None => (0.0, top),
    };
    (a, b) = (a.max(0.0), b.min(top));
    type Tried = Vec<(u32, f64, Vec<u32>)>;
    let mut tried: Tried = Vec::new();
    let mut by_last = |tried: &mut Tried, c: u32| -> f64 {
        if let Some(e) = tried.iter().find(|e| e.0 == c) {
            return e.1;
        }
        let (t, part) = match cap_balanced(costs, n, p, c, f64::INFINITY, warm) {
            Some(part) => (ttft(costs, &part), part),
            None => (f64::INFINITY, Vec::new()),
        };
        tried.push((c, t, part));
        t
    };
    let mut by_ln = |x: f64| by_last(&mut tried, (x.exp().round() as u32).clamp(1, cmax));
    for _ in 0..4 {
        let x = golden(a, b, 0.01, &mut by_ln);
        if x - a < 0.02 && a > 0.0 {
            (a, b) = ((a - 1.4).max(0.0), a + 0.1);
        } else if b - x < 0.02 && b < top {
            (a, b) = (b - 0.1, (b + 1.4).min(top));
        } else {
            break;
        }
    }
    // The objective is jagged in `last` (whole tokens), with its least often where the last
    // device just reaches the cap (no interior balance): try the largest last chunk within the
    // best partition's cap, until that is a fixed point.
    let best_of = |tried: &[(u32, f64, Vec<u32>)]| {
        tried
            .iter()
            .filter(|e| e.1.is_finite())
            .min_by(|x, y| x.1.total_cmp(&y.1))
            .map(|e| (e.0, e.2.clone()))
    };
    for _ in 0..4 {
        let Some((last, part)) = best_of(&tried) else {
            break;
        };
        let c = max_chunk(costs, n, rate(costs, &part), f64::INFINITY, last).clamp(1, cmax);
        if tried.iter().any(|e| e.0 == c) {
            break;
        }
        by_last(&mut tried, c);
    }
    let (last, t, part) = tried
        .into_iter()
        .filter(|e| e.1.is_finite())
        .min_by(|x, y| x.1.total_cmp(&y.1))?;
    // The budget: below the largest `embed + pre + U`, by up to the largest `embed + pre`.
    let st = starts(&part);
    let d = part.len() - 1;
    let (mut u, mut b0, mut e0) = (0.0f64, f64::NEG_INFINITY, 0.0f64);
    for k in (0..=d).rev() {
        let cc = costs.chunk(part[k], st[k]);
        u += if k == d {
            cc.attn + cc.post
        } else {
            costs.link(st[k] + part[k])
        };
        b0 = b0.max(cc.embed + cc.pre + u);
        e0 = e0.max(cc.embed + cc.pre);
    }
    let mut tried: Vec<(f64, f64, Vec<u32>)> = vec![(0.0, t, part)];
    let mut by_budget = |slack: f64| -> f64 {
        if let Some(e) = tried.iter().find(|e| e.0 == slack) {
            return e.1;
        }
        let (t, part) = match cap_balanced(costs, n, p, last, b0 - slack, warm) {
            Some(part) => (ttft(costs, &part), part),
            None => (f64::INFINITY, Vec::new()),
        };
        tried.push((slack, t, part));
        t
    };
    golden(0.0, e0, 0.01 * e0, &mut by_budget);
    let (_, t, part) = tried
        .into_iter()
        .filter(|e| e.1.is_finite())
        .min_by(|x, y| x.1.total_cmp(&y.1))?;
    Some((t, part, last))
}

// ---- the lower bound --------------------------------------------------------------------------

/// A lower bound on the TTFT of every partition of `n` tokens over exactly `p` devices:
/// `h + (L - 1) R + U + e`, where `R` is a cap no partition of `p` devices keeps every layer time
/// under (the greedy chain of maximal chunks from the back needs more devices, and no chain
/// needs fewer; bisection), `U` the least fill (the last device's attention and FFN for one token
/// at the end, sends of `1, 2, .., p - 1` tokens) and `e` the first device's `embed + pre` for
/// one token: the first device's term is at least that.
///
/// # Panics
/// If `p` is 0 or above `n`.
pub fn ttft_lower_bound<C: ChunkCosts + ?Sized>(costs: &C, n: u32, p: usize) -> f64 {
    assert!(p >= 1 && p <= n as usize, "1 to n devices");
    let l1 = f64::from(costs.layers().saturating_sub(1));
    let (mut lo, mut hi) = (0.0f64, costs.chunk(n, 0).layer());
    let mut out = Vec::with_capacity(p);
    let mut hint = Vec::new();
    for _ in 0..48 {
        let r = 0.5 * (lo + hi);
        out.clear();
        let lim = Limits {
            rate: r,
            send: f64::INFINITY,
            budget: f64::INFINITY,
        };
        if matches!(
            chain(costs, n, 0.0, lim, p, &hint, &mut out),
            ChainEnd::Covered
        ) {
            hi = r;
        } else {
            lo = r;
        }
        std::mem::swap(&mut hint, &mut out);
    }
    let last = costs.chunk(1, n - 1);
    let first = costs.chunk(1, 0);
    let sends: f64 = (1..p as u32).map(|t| costs.link(t)).sum();
    costs.head() + l1 * lo + last.attn + last.post + sends + first.embed + first.pre
}

#[cfg(test)]
mod tests {
    use super::super::costs::ttft_by_layers;
    use super::*;

    /// Synthetic costs: per-token GEMM work, per-pair attention, per-token link.
    struct Toy;
    impl ChunkCosts for Toy {
        fn layers(&self) -> u32 {
            4
        }
        fn chunk(&self, len: u32, start: u32) -> ChunkCost {
            let c = f64::from(len);
            let s = f64::from(start);
            ChunkCost {
                embed: 0.01 * c,
                pre: 0.1 + 0.3 * c,
                attn: 0.1 + 0.02 * c * (s + (c + 1.0) / 2.0),
                post: 0.1 + 0.7 * c,
            }
        }
        fn link(&self, tokens: u32) -> f64 {
            if tokens == 0 {
                0.0
            } else {
                0.05 + 0.2 * f64::from(tokens)
            }
        }
        fn head(&self) -> f64 {
            0.5
        }
    }

    #[test]
    fn closed_form_matches_the_layer_recurrence() {
        for part in [
            vec![10],
            vec![5, 5],
            vec![1, 9],
            vec![7, 2, 1],
            vec![3, 3, 3, 3],
        ] {
            let a = ttft(&Toy, &part);
            let b = ttft_by_layers(&Toy, &part);
            assert!((a - b).abs() <= 1e-12 * b, "{part:?}: {a} vs {b}");
        }
    }

    #[test]
    fn pareto_keeps_exactly_the_undominated() {
        let p = |u, rho, z| Pt {
            u,
            rho,
            z,
            from_pos: 0,
            from_pt: 0,
        };
        let f = pareto(
            &mut vec![
                p(1.0, 3.0, 5.0),
                p(2.0, 2.0, 5.0),
                p(2.0, 3.0, 5.0), // dominated by the first
                p(3.0, 1.0, 9.0),
                p(1.0, 3.0, 5.0), // duplicate
                p(0.5, 4.0, 4.0),
            ],
            &mut Vec::new(),
        );
        assert_eq!(f.len(), 4, "{f:?}");
    }

    #[test]
    fn small_contexts_match_brute_force() {
        for n in [1u32, 2, 5, 9, 14] {
            let opt = optimise(&Toy, n, 3);
            assert!(opt.exact);
            for (i, d) in opt.by_devices.iter().enumerate() {
                let p = i + 1;
                let mut best = f64::INFINITY;
                compositions(n, p, &mut |c| best = best.min(ttft(&Toy, c)));
                assert!(
                    (d.ttft_s - best).abs() <= 1e-12 * best,
                    "n={n} p={p}: {} vs {best}",
                    d.ttft_s
                );
                assert_eq!(d.partition.iter().sum::<u32>(), n);
            }
        }
    }

    #[test]
    fn max_chunk_is_the_largest_within_the_limits() {
        for end in [1u32, 2, 7, 30, 100] {
            for r in [0.5, 1.0, 3.0, 10.0, 100.0] {
                for b in [0.2, 1.0, 5.0, f64::INFINITY] {
                    let want = (1..=end)
                        .rev()
                        .find(|&c| {
                            let k = Toy.chunk(c, end - c);
                            k.layer() <= r && k.embed + k.pre <= b
                        })
                        .unwrap_or(0);
                    for guess in [1, end / 2, end, end + 5] {
                        assert_eq!(max_chunk(&Toy, end, r, b, guess), want, "{end} {r} {b}");
                    }
                }
            }
        }
    }

    #[test]
    fn greedy_chain_needs_the_fewest_devices() {
        // Every composition of the tokens before a last chunk, checked against the limits the
        // chain keeps: none covers them with fewer devices than the chain.
        let n = 12;
        let mut counts = Vec::new();
        for last in [1u32, 3] {
            let k = Toy.chunk(last, n - last);
            let u0 = k.attn + k.post;
            for rate in [1.0, 2.0, 4.0, 8.0] {
                for budget in [3.0, 5.0, 8.0, f64::INFINITY] {
                    let lim = Limits {
                        rate,
                        send: rate,
                        budget,
                    };
                    let within = |front: &[u32]| {
                        let mut u = u0;
                        let mut end = n - last;
                        front.iter().rev().all(|&c| {
                            let k = Toy.chunk(c, end - c);
                            let x = Toy.link(end);
                            u += x;
                            end -= c;
                            k.layer() <= rate && x <= rate && k.embed + k.pre + u <= budget
                        })
                    };
                    let mut fewest = None;
                    for q in 1..=(n - last) as usize {
                        let mut found = false;
                        compositions(n - last, q, &mut |c| found |= within(c));
                        if found {
                            fewest = Some(q);
                            break;
                        }
                    }
                    let mut out = Vec::new();
                    let got = match chain(&Toy, n - last, u0, lim, n as usize, &[], &mut out) {
                        ChainEnd::Covered => Some(out.len()),
                        _ => None,
                    };
                    assert_eq!(got, fewest, "last {last} rate {rate} budget {budget}");
                    counts.push(got);
                }
            }
        }
        // Infeasible limits, two devices and more among the cases.
        assert!(
            counts.contains(&None) && counts.contains(&Some(2)),
            "{counts:?}"
        );
        assert!(
            counts.iter().any(|c| c.is_some_and(|c| c >= 3)),
            "{counts:?}"
        );
    }

    #[test]
    fn construction_gives_valid_partitions() {
        // 300 tokens: past the exact grid, so the construction runs; every count's partition
        // covers the context, and is no worse than equal chunks.
        let opt = optimise(&Toy, 300, 12);
        for (i, d) in opt.by_devices.iter().enumerate() {
            assert_eq!(d.partition.len(), i + 1);
            assert_eq!(d.partition.iter().sum::<u32>(), 300);
            assert!(d.partition.iter().all(|&c| c > 0));
            assert!((ttft(&Toy, &d.partition) - d.ttft_s).abs() <= 1e-12 * d.ttft_s);
            assert!(d.ttft_s <= ttft(&Toy, &even_partition(300, i as u32 + 1)));
            assert!(ttft_lower_bound(&Toy, 300, i + 1) <= d.ttft_s);
        }
        let mut warm = Warm::default();
        for p in 2..=12 {
            let (t, part, last) = construct(&Toy, 300, p, None, &mut warm).unwrap();
            assert_eq!(part.len(), p);
            assert_eq!(part.iter().sum::<u32>(), 300);
            assert_eq!(ttft(&Toy, &part), t);
            assert!(last >= 1);
        }
    }

    fn compositions(n: u32, p: usize, f: &mut dyn FnMut(&[u32])) {
        fn rec(left: u32, p: usize, cur: &mut Vec<u32>, f: &mut dyn FnMut(&[u32])) {
            if p == 1 {
                cur.push(left);
                f(cur);
                cur.pop();
                return;
            }
            for c in 1..=left.saturating_sub(p as u32 - 1) {
                cur.push(c);
                rec(left - c, p - 1, cur, f);
                cur.pop();
            }
        }
        if n as usize >= p {
            rec(n, p, &mut Vec::new(), f);
        }
    }
}
