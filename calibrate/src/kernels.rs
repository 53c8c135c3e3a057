//! The `[kernels]` section of a calibrated profile: the layer's GEMMs and memory-bound kernels
//! timed over the dense token grid ([`token_grid`]) the cost model's tables are keyed by, and the
//! fitted models ([`GemmFit`], one [`MemFit`] per kind) from the same measurements.
//!
//! For every model of the plan, each GEMM of [`forward_ops`] (`qkv_proj`, `out_proj`, `ffn_up`,
//! `ffn_down`) is timed at every grid token count, and each memory-bound kind (norm, activation,
//! rope, add, embedding) as an `Elementwise { kind, bytes: tokens * elem_bytes_per_token }` op.
//! Shapes shared by several models are measured once. Each table is one schedule of `reps`
//! back-to-back repetitions of every grid point (the median is kept), run after the executor's
//! warm-up run(s) of the same schedule.
//!
//! # Budget (CUDA, H100)
//!
//! The full GPU plan (seven 7B-30B models) has 22 distinct GEMM shapes and 23 memory-bound
//! tables: 45 tables x 30 grid points x 10 repetitions = 13,500 timed kernels, each table's
//! schedule run twice (one warm-up run). The H100 preset's cost model puts one pass over all
//! points at about 0.13 s of device time (the GEMMs at 4096 tokens dominate); with every launch
//! costing the host at least 5 us the sweep is about 3 s ([`estimate_seconds`]; a test keeps the
//! estimate under 30 s), next to the copy sweep's minutes. A quick run (two models, 5
//! repetitions) takes well under half of that.

use kvplan_exec::Executor;
use kvplan_vocab::kernel_model::{
    GemmFit, KernelModel, KernelTable, KernelsSection, MemFit, TableKind, token_grid,
};
use kvplan_vocab::layers::elem_bytes_per_token;
use kvplan_vocab::layers::forward_ops;
use kvplan_vocab::schedule::{ElemKind, OpKind, StreamKind};
use kvplan_vocab::{CostModel, DType, ModelSpec};

use crate::bench::{medians, repeated};
use crate::error::Error;

/// The GEMMs of a layer the sweep times.
pub const GEMMS: [&str; 4] = ["qkv_proj", "out_proj", "ffn_up", "ffn_down"];

/// The memory-bound kinds the sweep times, as table kinds.
pub const MEM_KINDS: [TableKind; 5] = [
    TableKind::Norm,
    TableKind::Activation,
    TableKind::Rope,
    TableKind::Add,
    TableKind::Embedding,
];

/// The grid the sweep measures: [`token_grid`] on a GPU; on a CPU, whose GEMMs are real
/// arithmetic at a few tens of GFLOP/s, its counts up to 64 (`quick`) or 1024 (beyond the last
/// measured count the cost model continues a table with the fitted model's growth).
pub fn grid(gpu: bool, quick: bool) -> Vec<u32> {
    let cap = match (gpu, quick) {
        (true, _) => u32::MAX,
        (false, true) => 64,
        (false, false) => 1024,
    };
    token_grid().into_iter().filter(|&t| t <= cap).collect()
}

/// `(n, k, dtype)` of each GEMM of a layer of `m`, in [`GEMMS`] order.
pub fn gemm_shapes(m: &ModelSpec) -> Vec<(u32, u32, DType)> {
    let ops = forward_ops(m, &[(1, 1)], 1);
    GEMMS
        .iter()
        .filter_map(|name| {
            ops.iter()
                .find(|(n, _)| n == name)
                .and_then(|(_, k)| match *k {
                    OpKind::Gemm { n, k, dtype, .. } => Some((n, k, dtype)),
                    _ => None,
                })
        })
        .collect()
}

/// The tables the sweep fills (points empty): each distinct GEMM shape of `models`, then each
/// distinct (kind, width) of the memory-bound kinds.
pub fn tables(models: &[ModelSpec]) -> Vec<KernelTable> {
    let mut out: Vec<KernelTable> = Vec::new();
    for m in models {
        for (n, k, dtype) in gemm_shapes(m) {
            if !out
                .iter()
                .any(|t| t.kind == TableKind::Gemm && t.n == n && t.k == k && t.dtype == dtype)
            {
                out.push(KernelTable {
                    kind: TableKind::Gemm,
                    dtype,
                    n,
                    k,
                    width: 0,
                    points: Vec::new(),
                });
            }
        }
    }
    for m in models {
        for kind in MEM_KINDS {
            let elem = kind.elem().expect("a memory-bound kind");
            let width = elem_bytes_per_token(m, elem);
            if width > 0 && !out.iter().any(|t| t.kind == kind && t.width == width) {
                out.push(KernelTable {
                    kind,
                    dtype: m.dtype,
                    n: 0,
                    k: 0,
                    width,
                    points: Vec::new(),
                });
            }
        }
    }
    out
}

/// The op a table times at `tokens` rows.
pub fn table_op(t: &KernelTable, tokens: u32) -> OpKind {
    match t.kind.elem() {
        None => OpKind::Gemm {
            m: tokens,
            n: t.n,
            k: t.k,
            batch: 1,
            dtype: t.dtype,
            weights: kvplan_vocab::WeightFormat::Dense,
        },
        Some(kind) => OpKind::Elementwise {
            kind,
            bytes: u64::from(tokens) * t.width,
            rows: tokens,
        },
    }
}

/// Kernels the sweep times (not counting warm-up runs).
pub fn count(models: &[ModelSpec], grid: &[u32], reps: u32) -> usize {
    tables(models).len() * grid.len() * reps as usize
}

/// Estimated wall seconds of the sweep on the device `cost` models: `(1 + warmup)` runs of every
/// table's schedule, each op its modelled duration plus `host_us` of host work per launch.
pub fn estimate_seconds(
    cost: &CostModel,
    models: &[ModelSpec],
    grid: &[u32],
    reps: u32,
    warmup: u32,
    host_us: f64,
) -> f64 {
    let pass: f64 = tables(models)
        .iter()
        .flat_map(|t| grid.iter().map(move |&g| table_op(t, g)))
        .map(|op| cost.duration(&op).max(host_us * 1e-6))
        .sum();
    pass * f64::from(reps) * f64::from(1 + warmup)
}

/// Measures every table of `models` at every count of `grid`, `reps` times each (median kept).
/// Times are microseconds, as [`KernelTable::points`] holds them.
pub fn measure(
    exec: &mut dyn Executor,
    models: &[ModelSpec],
    grid: &[u32],
    reps: u32,
) -> Result<Vec<KernelTable>, Error> {
    let reps = reps.max(1);
    let mut grid = grid.to_vec();
    grid.sort_unstable();
    grid.dedup();
    let mut out = tables(models);
    for t in &mut out {
        let ops: Vec<OpKind> = grid.iter().map(|&g| table_op(t, g)).collect();
        let timeline = exec.run(&repeated(StreamKind::Compute, &ops, reps))?;
        t.points = grid
            .iter()
            .zip(medians(&timeline, ops.len(), reps))
            .map(|(&g, s)| (g, (s * 1e6).max(1e-3)))
            .collect();
    }
    Ok(out)
}

/// Minimises `f` over `x` in the box `[lo, hi]` by a deterministic pattern search (each
/// coordinate tried a step up and down; the step halves when nothing improves).
fn minimise(x0: &[f64], lo: &[f64], hi: &[f64], f: impl Fn(&[f64]) -> f64) -> Vec<f64> {
    let clamp = |x: &mut Vec<f64>| {
        for i in 0..x.len() {
            x[i] = x[i].clamp(lo[i], hi[i]);
        }
    };
    let mut x = x0.to_vec();
    clamp(&mut x);
    let mut best = f(&x);
    let mut step = 2.0f64;
    let mut evals = 0;
    while step > 1e-7 && evals < 20_000 {
        let mut improved = false;
        for i in 0..x.len() {
            for dir in [1.0, -1.0] {
                let mut y = x.clone();
                y[i] += dir * step;
                clamp(&mut y);
                let v = f(&y);
                evals += 1;
                if v < best {
                    best = v;
                    x = y;
                    improved = true;
                    break;
                }
            }
        }
        if !improved {
            step *= 0.5;
        }
    }
    x
}

/// Sum of squared log errors of `model` against `(x, seconds)` points.
fn log_error(points: &[(f64, f64)], model: impl Fn(f64) -> f64) -> f64 {
    points
        .iter()
        .map(|&(x, t)| {
            let m = model(x).max(1e-15);
            let e = m.ln() - t.ln();
            e * e
        })
        .sum()
}

fn positive(points: &[(f64, f64)]) -> Vec<(f64, f64)> {
    points
        .iter()
        .copied()
        .filter(|(x, t)| x.is_finite() && t.is_finite() && *x > 0.0 && *t > 0.0)
        .collect()
}

/// Fits `floor + bytes / (hbm * efficiency)` to `(bytes, seconds)` points by least squares on
/// the log error (relative error counts the same at 1 KiB and at 1 GiB). Starts from the linear
/// least-squares line; the floor stays within `[1 ns, smallest time]`, the efficiency within
/// `(0, 4]` (above 1 when the data stays in cache).
pub fn fit_mem(points: &[(f64, f64)], hbm: f64) -> Option<MemFit> {
    let pts = positive(points);
    if pts.is_empty() || !hbm.is_finite() || hbm <= 0.0 {
        return None;
    }
    let t_min = pts.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
    let (a, c) = crate::fit::line(&pts)?;
    let x0 = [
        a.clamp(t_min * 1e-3, t_min).max(1e-9).ln(),
        (1.0 / (c * hbm)).clamp(1e-6, 4.0).ln(),
    ];
    let lo = [1e-9f64.ln().min(t_min.ln()), 1e-6f64.ln()];
    let hi = [t_min.ln(), 4.0f64.ln()];
    let x = minimise(&x0, &lo, &hi, |x| {
        let (floor, rate) = (x[0].exp(), hbm * x[1].exp());
        log_error(&pts, |b| floor + b / rate)
    });
    Some(MemFit {
        floor_us: x[0].exp() * 1e6,
        efficiency: x[1].exp(),
    })
}

/// A section holding `gemm` and nothing measured, for evaluating the GEMM model.
fn with_gemm(base: &KernelsSection, gemm: GemmFit) -> KernelsSection {
    KernelsSection {
        gemm,
        tables: Vec::new(),
        ..base.clone()
    }
}

/// Fits the GEMM model's floor, memory efficiency and compute efficiency (latency 0, no tile
/// exponent, the hard roofline maximum; `sms` from the device when known) to the GEMM tables by
/// least squares on the log error, evaluating [`KernelModel::gemm_model`] itself. `peaks[d]` is
/// the profile's peak FLOP/s of dtype `d`, `hbm` its bytes/s; `base` supplies the other fields.
pub fn fit_gemm(
    tables: &[KernelTable],
    peaks: [f64; DType::COUNT],
    hbm: f64,
    sms: Option<u32>,
    base: &KernelsSection,
) -> Option<GemmFit> {
    let pts: Vec<(u32, u32, u32, DType, f64)> = tables
        .iter()
        .filter(|t| t.kind == TableKind::Gemm)
        .flat_map(|t| {
            t.points
                .iter()
                .filter(|p| p.1 > 0.0 && p.1.is_finite())
                .map(move |&(m, us)| (m, t.n, t.k, t.dtype, us * 1e-6))
        })
        .collect();
    if pts.is_empty() {
        return None;
    }
    let t_min = pts.iter().map(|p| p.4).fold(f64::INFINITY, f64::min);
    let fit = |x: &[f64]| GemmFit {
        floor_us: x[0].exp() * 1e6,
        latency_us: 0.0,
        memory_efficiency: x[1].exp(),
        compute_efficiency: x[2].exp(),
        tile_exponent: None,
        sms,
        blend: None,
    };
    let x0 = [(0.5 * t_min).max(1e-9).ln(), 0.7f64.ln(), 0.7f64.ln()];
    let lo = [1e-9f64.ln().min(t_min.ln()), 1e-6f64.ln(), 1e-6f64.ln()];
    let hi = [t_min.ln(), 0.0, 0.0];
    let x = minimise(&x0, &lo, &hi, |x| {
        let model = KernelModel::new(with_gemm(base, fit(x)), peaks, hbm);
        pts.iter()
            .map(|&(m, n, k, dt, t)| {
                let e = model.gemm_model(m, n, k, 1, dt).max(1e-15).ln() - t.ln();
                e * e
            })
            .sum()
    });
    Some(fit(&x))
}

/// The memory-bound tables of `kind` as `(bytes, seconds)` points.
pub fn mem_points(tables: &[KernelTable], kind: ElemKind) -> Vec<(f64, f64)> {
    tables
        .iter()
        .filter(|t| t.kind.elem() == Some(kind))
        .flat_map(|t| {
            t.points
                .iter()
                .map(move |&(tokens, us)| (f64::from(tokens) * t.width as f64, us * 1e-6))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvplan_vocab::kernel_model::{AllReduceFit, AttentionFit};

    fn section() -> KernelsSection {
        let mem = MemFit {
            floor_us: 3.0,
            efficiency: 0.8,
        };
        KernelsSection {
            source: "test".into(),
            launch_us: 0.0,
            gemm: GemmFit {
                floor_us: 4.0,
                latency_us: 0.0,
                memory_efficiency: 0.8,
                compute_efficiency: 0.6,
                tile_exponent: None,
                sms: Some(132),
                blend: None,
            },
            norm: mem,
            activation: mem,
            rope: mem,
            add: mem,
            embedding: mem,
            other: mem,
            attention: AttentionFit::roofline(5.0, 0.5, 0.8),
            allreduce: AllReduceFit {
                latency_us: 10.0,
                bus_gbps: 300.0,
            },
            tables: Vec::new(),
        }
    }

    #[test]
    fn grids_are_prefixes_of_the_token_grid() {
        assert_eq!(grid(true, false), token_grid());
        assert_eq!(grid(true, true), token_grid());
        assert_eq!(grid(false, true).last(), Some(&64));
        assert!(grid(false, false).iter().all(|&t| t <= 1024));
    }

    #[test]
    fn tables_cover_each_gemm_and_kind_once() {
        let l = ModelSpec::preset("llama-3-8b").unwrap();
        let t = tables(&[l.clone(), l.clone()]);
        assert_eq!(t.len(), 9, "{t:?}");
        let shapes = gemm_shapes(&l);
        assert_eq!(
            shapes,
            vec![
                (4096 + 2 * 1024, 4096, l.dtype),
                (4096, 4096, l.dtype),
                (2 * 14336, 4096, l.dtype),
                (4096, 14336, l.dtype)
            ]
        );
        assert_eq!(count(&[l], &token_grid(), 10), 9 * token_grid().len() * 10);
    }

    #[test]
    fn the_full_gpu_sweep_fits_the_budget_on_an_h100() {
        let plan = crate::Plan::new(false, true, None).unwrap();
        let hw = kvplan_vocab::HardwareProfile::preset("h100-sxm").unwrap();
        let cost = CostModel::new(&hw);
        let t = tables(&plan.models);
        let gemms = t.iter().filter(|t| t.kind == TableKind::Gemm).count();
        let n = count(&plan.models, &plan.kernel_grid, plan.kernel_reps);
        let one_pass = estimate_seconds(&cost, &plan.models, &plan.kernel_grid, 1, 0, 0.0);
        // Every launch costs the host at least 5 us; one warm-up run.
        let secs = estimate_seconds(
            &cost,
            &plan.models,
            &plan.kernel_grid,
            plan.kernel_reps,
            1,
            5.0,
        );
        eprintln!(
            "{gemms} GEMM + {} memory tables, {n} kernels, one pass {one_pass:.3} s, sweep {secs:.1} s",
            t.len() - gemms
        );
        assert_eq!((gemms, t.len() - gemms), (22, 23));
        assert_eq!(n, 45 * 30 * 10);
        assert!(one_pass < 0.5, "{one_pass}");
        assert!(secs < 30.0, "{secs}");
        let quick = crate::Plan::new(true, true, None).unwrap();
        let q = estimate_seconds(
            &cost,
            &quick.models,
            &quick.kernel_grid,
            quick.kernel_reps,
            1,
            5.0,
        );
        assert!(q < secs / 2.0, "{q}");
    }

    #[test]
    fn fit_mem_recovers_floor_and_efficiency() {
        let hbm = 2e12;
        let pts: Vec<(f64, f64)> = token_grid()
            .iter()
            .map(|&t| {
                let b = f64::from(t) * 16384.0;
                (b, 3e-6 + b / (hbm * 0.7))
            })
            .collect();
        let f = fit_mem(&pts, hbm).unwrap();
        assert!((f.floor_us - 3.0).abs() < 0.01, "{f:?}");
        assert!((f.efficiency - 0.7).abs() < 0.002, "{f:?}");
        // Deterministic.
        assert_eq!(fit_mem(&pts, hbm), Some(f));
        assert_eq!(fit_mem(&[], hbm), None);
    }

    #[test]
    fn fit_gemm_recovers_a_known_model() {
        let mut truth = section();
        truth.gemm.floor_us = 6.0;
        truth.gemm.memory_efficiency = 0.75;
        truth.gemm.compute_efficiency = 0.55;
        let peaks = [989e12, 989e12, 67e12];
        let hbm = 3.35e12;
        let model = KernelModel::new(truth.clone(), peaks, hbm);
        let l = ModelSpec::preset("llama-3-8b").unwrap();
        let tabs: Vec<KernelTable> = tables(std::slice::from_ref(&l))
            .into_iter()
            .filter(|t| t.kind == TableKind::Gemm)
            .map(|mut t| {
                t.points = token_grid()
                    .iter()
                    .map(|&m| (m, model.gemm_model(m, t.n, t.k, 1, t.dtype) * 1e6))
                    .collect();
                t
            })
            .collect();
        let f = fit_gemm(&tabs, peaks, hbm, Some(132), &section()).unwrap();
        assert_eq!(f.sms, Some(132));
        assert!((f.floor_us - 6.0).abs() < 0.1, "{f:?}");
        assert!((f.memory_efficiency - 0.75).abs() < 0.01, "{f:?}");
        assert!((f.compute_efficiency - 0.55).abs() < 0.01, "{f:?}");
    }
}
