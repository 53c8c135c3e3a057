//! KVPR's split decision: for one decode step, how many leading tokens `l` of the cached
//! sequence to recompute on the GPU from their activations instead of transferring their KV.
//!
//! Per layer (METHODS.md section 1), with `X[0:l]` sent first, then `KV[l:s']` streaming while the
//! GPU recomputes `K,V[0:l]`:
//!
//! ```text
//! t(l) = max( link(l), compute(l) )
//! link(l)    = W + k * ( X(l) + KV(s' - l) )                  one H2D engine, FIFO
//! compute(l) = W_kv + X(l) + k * ( R(l) + main )              recompute waits for W_K,W_V and X
//! ```
//!
//! `X(l)`, `KV(n)` are copy times (latency + bytes / bandwidth), `R(l)` the recompute GEMM's
//! roofline time (`max` of its compute and memory terms) plus the concatenation kernel, `main`
//! the rest of the layer's kernels, `W` / `W_kv` the layer's (or only `W_K`,`W_V`'s) weight copy
//! when weights are offloaded, `k` the GPU batches sharing one weight load (column-by-column).
//! With `k = 1`, no weight copy and `main = 0` this is exactly the paper's
//! `t(l) = X/B + max(flops/F, KV/B)`.
//!
//! `t` is convex and piecewise linear in `l` except for the per-copy latency that disappears at
//! `l = 0` (no activation copy) and `l = s'` (no KV copy). The continuous problem is solved as a
//! linear program (good_lp, microlp backend); the integer optimum is then the best of `0`, `s'`
//! and the floor and ceiling of the LP solution, compared with the exact cost. That equals the
//! brute-force integer optimum (convexity), which the property tests check.

use good_lp::{ProblemVariables, Solution, SolverModel, constraint, microlp, variable};
use serde::Serialize;

use kvplan_vocab::error::{Error, Result};

/// Per-layer cost terms of one decode step, in seconds (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SplitProblem {
    /// Cached tokens `s'` whose K,V the layer needs.
    pub seq_len: u32,
    /// GPU batches per weight load (`k`).
    pub gpu_batches: u32,
    /// Weight copy time per layer (0 when weights are resident).
    pub weights_s: f64,
    /// Part of `weights_s` that must arrive before recomputation (W_K, W_V).
    pub weights_kv_s: f64,
    /// Per-copy latency of the H2D engine.
    pub copy_latency_s: f64,
    /// Seconds per token of activations `X` (one GPU batch).
    pub act_s_per_token: f64,
    /// Seconds per token of K and V (one GPU batch).
    pub kv_s_per_token: f64,
    /// Fixed cost of the recompute kernels (launch overheads).
    pub recompute_overhead_s: f64,
    /// Compute-bound seconds per recomputed token (FLOPs over sustained FLOP/s).
    pub recompute_flop_s_per_token: f64,
    /// Memory-bound fixed seconds (reading W_K, W_V).
    pub recompute_mem_fixed_s: f64,
    /// Memory-bound seconds per recomputed token.
    pub recompute_mem_s_per_token: f64,
    /// Seconds per token of the concatenation kernel (not part of the roofline max).
    pub concat_s_per_token: f64,
    /// The layer's other kernels, per GPU batch.
    pub main_compute_s: f64,
    /// Whether the compute path waits for `W_K,W_V` and `X[0:l]` of the same layer before it
    /// can recompute (`true`: the paper's Eq. 10, which charges the activation copy in series;
    /// `false`: the emitted schedule, which prefetches both during the previous layer, so they
    /// cost link time only).
    pub serial_prefetch: bool,
}

/// Which side bounds a layer's time at the chosen split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Bound {
    /// The H2D link (transfers take longer than compute).
    Link,
    /// The GPU (recomputation plus the layer's kernels take longer than transfers).
    Compute,
    /// Link and GPU within [`BALANCE_TOLERANCE`] of each other.
    Balanced,
}

/// Relative difference under which link and compute time count as balanced.
pub const BALANCE_TOLERANCE: f64 = 0.02;

/// Why the split is what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// A token's activations cost at least as much to send as its K and V (GQA/MQA): `l = 0`.
    ActivationsNotCheaper,
    /// The GPU is already the bottleneck without recomputation: `l = 0`.
    ComputeBoundWithoutRecompute,
    /// Every token is recomputed: the link would otherwise be the bottleneck even at `l = s'`.
    RecomputeAll,
    /// Recomputation and transfer balanced at an interior split.
    Balanced,
    /// The split was fixed by the user.
    Fixed,
    /// Nothing is cached yet (`s' = 0`): nothing to transfer or recompute.
    NothingCached,
}

impl Reason {
    /// A sentence for reports about `split` of problem `p`.
    pub fn explain(self, p: &SplitProblem, split: &Split) -> String {
        let l = split.recompute_tokens;
        match self {
            Reason::ActivationsNotCheaper => format!(
                "sending one token's activations ({:.1} us) costs at least as much as sending its K,V ({:.1} us), as with grouped-query or multi-query attention; recomputation cannot pay, so l = 0 (plain transfer)",
                p.act_s_per_token * 1e6,
                p.kv_s_per_token * 1e6
            ),
            Reason::ComputeBoundWithoutRecompute => {
                "the GPU is already busier than the link without recomputation, so l = 0".into()
            }
            Reason::RecomputeAll => {
                "recomputing every cached token is still cheaper than transferring any KV, so l = s'"
                    .into()
            }
            Reason::Balanced => format!(
                "recomputing {l} of {} cached tokens ({:.1}%) balances the link (activations + remaining KV: {:.3} ms per layer) against the GPU (recomputation + layer kernels: {:.3} ms), {:.1}% less than transferring all KV ({:.3} ms)",
                p.seq_len,
                100.0 * f64::from(l) / f64::from(p.seq_len.max(1)),
                p.link_s(l) * 1e3,
                p.compute_s(l) * 1e3,
                if split.transfer_only_s > 0.0 {
                    100.0 * (1.0 - split.layer_s / split.transfer_only_s)
                } else {
                    0.0
                },
                split.transfer_only_s * 1e3
            ),
            Reason::Fixed => "split fixed by the user".into(),
            Reason::NothingCached => "no cached tokens yet: nothing to transfer or recompute".into(),
        }
    }
}

/// A split decision.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Split {
    /// Tokens recomputed (`0..=seq_len`).
    pub recompute_tokens: u32,
    /// Predicted per-layer time at the split, seconds.
    pub layer_s: f64,
    /// Predicted per-layer time with `l = 0` (plain transfer).
    pub transfer_only_s: f64,
    /// Link or compute bound.
    pub bound: Bound,
    /// Why.
    pub reason: Reason,
}

impl SplitProblem {
    /// Link time at `l` (exact: no copy is issued for zero bytes).
    pub fn link_s(&self, l: u32) -> f64 {
        let n = self.seq_len;
        let k = f64::from(self.gpu_batches);
        self.weights_s + k * (self.act_copy_s(l) + self.kv_copy_s(n - l))
    }

    /// Compute-side time at `l` (exact).
    pub fn compute_s(&self, l: u32) -> f64 {
        let k = f64::from(self.gpu_batches);
        let waits = if self.serial_prefetch {
            self.weights_kv_s + self.act_copy_s(l)
        } else {
            0.0
        };
        waits + k * (self.recompute_s(l) + self.main_compute_s)
    }

    /// Per-layer time `t(l)` (exact).
    pub fn eval(&self, l: u32) -> f64 {
        self.link_s(l).max(self.compute_s(l))
    }

    fn act_copy_s(&self, l: u32) -> f64 {
        if l == 0 {
            0.0
        } else {
            self.copy_latency_s + f64::from(l) * self.act_s_per_token
        }
    }

    fn kv_copy_s(&self, n: u32) -> f64 {
        if n == 0 {
            0.0
        } else {
            self.copy_latency_s + f64::from(n) * self.kv_s_per_token
        }
    }

    /// Recompute kernels' time for `l` tokens (0 when `l = 0`).
    pub fn recompute_s(&self, l: u32) -> f64 {
        if l == 0 {
            return 0.0;
        }
        let l = f64::from(l);
        self.recompute_overhead_s
            + (l * self.recompute_flop_s_per_token)
                .max(self.recompute_mem_fixed_s + l * self.recompute_mem_s_per_token)
            + l * self.concat_s_per_token
    }

    /// The split for a user-fixed `l` (clamped to `s'`).
    pub fn fixed(&self, l: u32) -> Split {
        let l = l.min(self.seq_len);
        self.decision(l, Reason::Fixed)
    }

    fn decision(&self, l: u32, reason: Reason) -> Split {
        Split {
            recompute_tokens: l,
            layer_s: self.eval(l),
            transfer_only_s: self.eval(0),
            bound: {
                let (link, comp) = (self.link_s(l), self.compute_s(l));
                if (link - comp).abs() <= BALANCE_TOLERANCE * link.max(comp) {
                    Bound::Balanced
                } else if link > comp {
                    Bound::Link
                } else {
                    Bound::Compute
                }
            },
            reason,
        }
    }

    /// Solves the continuous relaxation with the LP solver; returns `l*` in `[0, s']`.
    pub fn solve_lp(&self) -> Result<f64> {
        let n = f64::from(self.seq_len);
        let k = f64::from(self.gpu_batches);
        let lat = self.copy_latency_s;
        let serial = if self.serial_prefetch { 1.0 } else { 0.0 };
        let mut vars = ProblemVariables::new();
        let t = vars.add(variable().min(0.0));
        let l = vars.add(variable().min(0.0).max(n));
        let r = vars.add(variable().min(0.0));
        // Scale seconds to milliseconds so coefficients stay near 1 for the simplex.
        let s = 1e3;
        let problem = vars
            .minimise(t)
            .using(microlp)
            .with(constraint!(
                t >= s * (self.weights_s + k * (2.0 * lat + self.kv_s_per_token * n))
                    + s * k * (self.act_s_per_token - self.kv_s_per_token) * l
            ))
            .with(constraint!(
                t >= s
                    * (serial * (self.weights_kv_s + lat)
                        + k * (self.recompute_overhead_s + self.main_compute_s))
                    + s * (serial * self.act_s_per_token + k * self.concat_s_per_token) * l
                    + k * r
            ))
            .with(constraint!(r >= s * self.recompute_flop_s_per_token * l))
            .with(constraint!(
                r >= s * self.recompute_mem_fixed_s + s * self.recompute_mem_s_per_token * l
            ));
        let sol = problem.solve().map_err(|e| Error::Solver {
            what: format!("the KVPR split at s' = {}", self.seq_len),
            message: e.to_string(),
        })?;
        Ok(sol.value(l).clamp(0.0, n))
    }

    /// The optimal integer split (see the module docs for why this is exact).
    pub fn solve(&self) -> Result<Split> {
        let n = self.seq_len;
        if n == 0 {
            return Ok(self.decision(0, Reason::NothingCached));
        }
        let lp = self.solve_lp()?;
        let lo = (lp.floor() as u32).min(n);
        let hi = (lp.ceil() as u32).min(n);
        let mut best = 0u32;
        let mut best_t = self.eval(0);
        // Candidates come in ascending order (0 <= lo <= hi <= n), so on a tie the one kept is
        // already the smaller.
        for c in [lo, hi, n] {
            let t = self.eval(c);
            if t < best_t {
                best = c;
                best_t = t;
            }
        }
        Ok(self.chosen(best))
    }

    /// The decision `l` taken as the optimum (by [`solve`](Self::solve) or by a search over the
    /// simulated schedule), with the reason that fits it.
    pub fn chosen(&self, l: u32) -> Split {
        let l = l.min(self.seq_len);
        let reason = if self.seq_len == 0 {
            Reason::NothingCached
        } else if l == 0 {
            if self.act_s_per_token >= self.kv_s_per_token {
                Reason::ActivationsNotCheaper
            } else {
                Reason::ComputeBoundWithoutRecompute
            }
        } else if l == self.seq_len {
            Reason::RecomputeAll
        } else {
            Reason::Balanced
        };
        self.decision(l, reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paper's setting: OPT-6.7B layer, batch 64, A100 PCIe 4.0 pinned, weights resident.
    fn opt67_like(seq_len: u32) -> SplitProblem {
        let b = 64.0;
        let h = 4096.0;
        let bw = 24.5e9;
        SplitProblem {
            seq_len,
            gpu_batches: 1,
            weights_s: 0.0,
            weights_kv_s: 0.0,
            copy_latency_s: 10e-6,
            act_s_per_token: b * h * 2.0 / bw,
            kv_s_per_token: 2.0 * b * h * 2.0 / bw,
            recompute_overhead_s: 4e-6,
            recompute_flop_s_per_token: 4.0 * b * h * h / (312e12 * 0.7),
            recompute_mem_fixed_s: 2.0 * h * h * 2.0 / (1555e9 * 0.8),
            recompute_mem_s_per_token: b * 3.0 * h * 2.0 / (1555e9 * 0.8),
            concat_s_per_token: 0.0,
            main_compute_s: 0.0,
            serial_prefetch: true,
        }
    }

    #[test]
    fn mha_split_is_interior_and_matches_closed_form() {
        let p = opt67_like(1000);
        let s = p.solve().unwrap();
        // Closed form at the crossing: c*l = e*(s'-l) => l = e*s'/(c+e) (latencies ignored).
        let c = p.recompute_flop_s_per_token;
        let e = p.kv_s_per_token;
        let closed = e * 1000.0 / (c + e);
        assert!(
            (f64::from(s.recompute_tokens) - closed).abs() <= 2.0,
            "{} vs {closed}",
            s.recompute_tokens
        );
        assert_eq!(s.reason, Reason::Balanced);
        assert_eq!(s.bound, Bound::Balanced);
        assert!(s.layer_s < s.transfer_only_s);
        assert!(
            Reason::Balanced
                .explain(&p, &s)
                .contains(&format!("recomputing {} of 1000", s.recompute_tokens))
        );
    }

    #[test]
    fn gqa_finds_zero_and_says_why() {
        let mut p = opt67_like(1000);
        // Llama-3-8B: KV per token is a quarter of 2*h*p, activations are h*p.
        p.kv_s_per_token = p.act_s_per_token / 2.0;
        let s = p.solve().unwrap();
        assert_eq!(s.recompute_tokens, 0);
        assert_eq!(s.reason, Reason::ActivationsNotCheaper);
        assert!(
            Reason::ActivationsNotCheaper
                .explain(&p, &s)
                .contains("grouped-query")
        );
    }

    #[test]
    fn compute_bound_layer_gets_no_recompute() {
        let mut p = opt67_like(100);
        p.main_compute_s = 1.0;
        let s = p.solve().unwrap();
        assert_eq!(s.recompute_tokens, 0);
        assert_eq!(s.reason, Reason::ComputeBoundWithoutRecompute);
        assert_eq!(s.bound, Bound::Compute);
    }
}
