//! The partition optimiser: an exact Pareto DP over a grid of boundaries, refined to single
//! tokens (see the module docs of [`crate::runahead`]).

use super::costs::{ChunkCost, ChunkCosts, even_partition, starts, ttft};

/// Most cells of the coarse grid of [`optimise`] (contexts up to this many tokens are searched
/// exactly, token by token).
pub const GRID_CELLS: u32 = 48;

/// Finer steps on each side of a boundary in a refinement round of [`optimise`].
pub const WINDOW: u32 = 6;

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

/// The best partition found for one device count.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceOptimum {
    /// Tokens per device, in chain order.
    pub partition: Vec<u32>,
    /// Its TTFT ([`ttft`]), seconds.
    pub ttft_s: f64,
    /// Refinement rounds run.
    pub refine_rounds: u32,
    /// Whether the last refinement round (at one token) found no better partition: no
    /// simultaneous move of the boundaries by up to [`WINDOW`] tokens improves it. Always true
    /// when the coarse grid is every token.
    pub local_optimum: bool,
}

/// What [`optimise`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Optimum {
    /// Best partition for `1, 2, ..., max_devices` devices.
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
/// `1..=max_devices` (capped at `context`): exact DP on a grid, refined to token resolution
/// (module docs). The refinement is a local search, so each count's result is then also
/// compared with its neighbours' (a one-token device added to count `p - 1`'s best, and one
/// removed from count `p + 1`'s when it has a one-token chunk): the TTFT of `p + 1` devices is
/// never above that of `p` devices plus one front device of one token.
///
/// # Panics
/// If `context` or `max_devices` is 0.
pub fn optimise<C: ChunkCosts + ?Sized>(costs: &C, context: u32, max_devices: u32) -> Optimum {
    optimise_on_grid(costs, context, max_devices, GRID_CELLS)
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
    // Incumbents: equal chunks for every device count; a state that cannot beat the worst
    // incumbent of the device counts it can still close at is dropped.
    let even: Vec<f64> = (1..=pmax as u32)
        .map(|p| ttft(costs, &even_partition(n, p)))
        .collect();
    let mut zmax = vec![0.0; pmax];
    let mut worst = f64::NEG_INFINITY;
    for m in (0..pmax).rev() {
        worst = worst.max(even[m]);
        zmax[m] = (worst - head) * (1.0 + 1e-12) + 1e-15;
    }
    // Coarse level: every grid point for every device count; 0 closes.
    let interior: Vec<u32> = grid[..g as usize].to_vec(); // 0 and the interior points
    let positions: Vec<Vec<u32>> = (0..pmax)
        .map(|m| {
            if m + 1 == pmax {
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
    let (levels, states) = run_dp(costs, n, &positions, &zmax, &mut cache);
    let mut by_devices: Vec<DeviceOptimum> = Vec::with_capacity(pmax);
    for m in 1..=pmax {
        let mut best = match closed(&levels, m, head) {
            Some((t, part)) => DeviceOptimum {
                partition: part,
                ttft_s: t,
                refine_rounds: 0,
                local_optimum: true,
            },
            None => DeviceOptimum {
                partition: even_partition(n, m as u32),
                ttft_s: even[m - 1],
                refine_rounds: 0,
                local_optimum: true,
            },
        };
        if cell_tokens > 1 && m > 1 {
            best.local_optimum = false;
            refine(costs, n, cell_tokens, &mut best);
        }
        let e = even_partition(n, m as u32);
        if even[m - 1] < best.ttft_s {
            best.partition = e;
            best.ttft_s = even[m - 1];
            best.local_optimum = false;
        }
        // One device more than the previous count's best can do what it did, with a one-token
        // chunk in front: never accept worse (the refinement is a local search).
        if let Some(prev) = by_devices.last() {
            take_if_better(costs, &mut best, with_one_more(&prev.partition));
        }
        by_devices.push(best);
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
        exact: cell_tokens == 1,
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
        }
    }
}

/// Refines `best` by the exact DP over windows of [`WINDOW`] steps on each side of every
/// boundary: the step starts at a quarter of a coarse cell and shrinks 4x per round down to one
/// token; a round whose best partition reaches the edge of a window is repeated at the same
/// step (the optimum may lie further out), and rounds at one token repeat while they improve.
fn refine<C: ChunkCosts + ?Sized>(costs: &C, n: u32, cell: u32, best: &mut DeviceOptimum) {
    let m = best.partition.len();
    let head = costs.head();
    let mut fine = (cell / REFINE).max(1);
    let mut repeats = 0;
    for _ in 0..MAX_ROUNDS {
        let bounds: Vec<u32> = starts(&best.partition)[1..].to_vec(); // s_1 .. s_D
        let d = bounds.len();
        // Level k (1-based from the end) places the left boundary s_{d+1-k}.
        let mut positions: Vec<Vec<u32>> = Vec::with_capacity(m);
        for lvl in 1..m {
            let b = bounds[d - lvl];
            let idx = (d - lvl + 1) as i64; // boundary index (s_1 is index 1)
            let lo = idx; // room for idx devices before it
            let hi = i64::from(n) - (m as i64 - idx); // room for the devices after it
            let v: Vec<u32> = (-(WINDOW as i64)..=WINDOW as i64)
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
                    .any(|(&a, &b)| a.abs_diff(b) >= (WINDOW - 1) * fine);
                best.partition = part;
                best.ttft_s = t;
                moved = true;
            }
        }
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
