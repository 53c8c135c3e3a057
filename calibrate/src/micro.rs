//! Microbenchmarks: each is a small [`Schedule`](kvplan_vocab::Schedule) run on the executor;
//! the measured op spans are the data. Repetitions of one op run back to back on one stream and
//! the median is kept (`bench.rs`).

use kvplan_exec::{BackendKind, Executor};
use kvplan_vocab::calibration::{CopyTables, GemmPoint, HostCosts};
use kvplan_vocab::layers::layer_kernels;
use kvplan_vocab::schedule::{ElemKind, HostMemory, OpKind, Payload, ScheduleBuilder, StreamKind};
use kvplan_vocab::{DType, ModelSpec};

use crate::bench::{TAG, median_of, medians, repeated};
use crate::error::Error;
use crate::fit::monotone_curve;
use crate::plan::{Measurements, Plan, Progress};

fn copy_op(dir: StreamKind, host: HostMemory, bytes: u64) -> OpKind {
    match dir {
        StreamKind::H2D => OpKind::H2D {
            bytes,
            payload: Payload::Cache,
            host,
        },
        _ => OpKind::D2H {
            bytes,
            payload: Payload::Cache,
            host,
        },
    }
}

/// The distinct GEMM shapes `(n, k, dtype)` of a model's layers (and LM head for decode).
fn gemm_shapes(m: &ModelSpec) -> Vec<(u32, u32, DType)> {
    let mut v: Vec<(u32, u32, DType)> = layer_kernels(m, 1, 1, 1)
        .iter()
        .filter_map(|(_, k)| match *k {
            OpKind::Gemm { n, k, dtype, .. } => Some((n, k, dtype)),
            _ => None,
        })
        .collect();
    // KVPR's recompute GEMM: X @ [W_K | W_V].
    v.push((2 * m.kv_dim() as u32, m.hidden, m.dtype));
    v.sort_unstable();
    v.dedup();
    v
}

/// Runs every microbenchmark of `plan`.
pub fn measure_all(
    exec: &mut dyn Executor,
    plan: &Plan,
    progress: Progress,
) -> Result<Measurements, Error> {
    let info = exec.info().clone();
    let total = if plan.kernel_grid.is_empty() { 9 } else { 10 };
    let mut step = 0;
    let mut tick = |what: &str| {
        step += 1;
        progress(step, total, what);
    };
    let copy = measure_copies(exec, plan, &mut tick)?;
    tick("copies in both directions at once");
    let duplex_check = measure_duplex(exec, plan, &copy)?;
    tick("GEMMs at the models' shapes");
    let gemm = measure_gemms(exec, plan)?;
    tick("attention (decode, prefill, chunk after prefix)");
    let attention = measure_attention(exec, plan, info.backend)?;
    tick("memory-bound kernels");
    let elementwise = measure_elementwise(exec, plan)?;
    tick("kernel launch overhead and the host's issue costs");
    let (op_overhead_s, host) = measure_overheads(exec)?;
    // The `[kernels]` tables: the layer's GEMMs and memory-bound kinds over the token grid.
    let kernels = if plan.kernel_grid.is_empty() {
        None
    } else {
        tick("kernel tables over the token grid");
        Some(crate::kernels::measure(
            exec,
            &plan.models,
            &plan.kernel_grid,
            plan.kernel_reps,
        )?)
    };
    Ok(Measurements {
        info,
        host_ram_bytes: kvplan_exec::host_ram_bytes(),
        copy,
        duplex_check,
        gemm,
        attention,
        elementwise,
        op_overhead_s,
        host,
        kernels,
    })
}

/// Copies: one schedule per direction and host memory kind, every size `reps` times (one
/// progress step each).
fn measure_copies(
    exec: &mut dyn Executor,
    plan: &Plan,
    tick: &mut impl FnMut(&str),
) -> Result<CopyTables, Error> {
    let mut curves = Vec::new();
    for (dir, host, what) in [
        (
            StreamKind::H2D,
            HostMemory::Pinned,
            "copies host->device, pinned",
        ),
        (
            StreamKind::D2H,
            HostMemory::Pinned,
            "copies device->host, pinned",
        ),
        (
            StreamKind::H2D,
            HostMemory::Pageable,
            "copies host->device, pageable",
        ),
        (
            StreamKind::D2H,
            HostMemory::Pageable,
            "copies device->host, pageable",
        ),
    ] {
        tick(what);
        let ops: Vec<OpKind> = plan
            .copy_sizes
            .iter()
            .map(|&b| copy_op(dir, host, b))
            .collect();
        let t = exec.run(&repeated(dir, &ops, plan.reps))?;
        let med = medians(&t, ops.len(), plan.reps);
        curves.push(monotone_curve(
            plan.copy_sizes.iter().copied().zip(med).collect(),
        ));
    }
    Ok(CopyTables {
        h2d_pinned: curves[0].clone(),
        d2h_pinned: curves[1].clone(),
        h2d_pageable: curves[2].clone(),
        d2h_pageable: curves[3].clone(),
    })
}

/// Bytes/s of one direction alone (from `copy`) and of both directions at once, at the
/// largest size: full duplex moves about twice the bytes.
fn measure_duplex(
    exec: &mut dyn Executor,
    plan: &Plan,
    copy: &CopyTables,
) -> Result<(f64, f64), Error> {
    let big = *plan.copy_sizes.last().expect("copy sizes");
    let mut b = ScheduleBuilder::new();
    let h = b.stream(0, StreamKind::H2D, "h2d");
    let d = b.stream(0, StreamKind::D2H, "d2h");
    let l = b.label("bench");
    for _ in 0..plan.reps {
        b.push(
            copy_op(StreamKind::H2D, HostMemory::Pinned, big),
            h,
            l,
            TAG,
            &[],
        );
        b.push(
            copy_op(StreamKind::D2H, HostMemory::Pinned, big),
            d,
            l,
            TAG,
            &[],
        );
    }
    let t = exec.run(&b.build())?;
    let both = 2.0 * f64::from(plan.reps) * big as f64 / t.makespan();
    // One direction alone at the same size.
    let one_way = big as f64 / copy.h2d_pinned.time(big).min(copy.d2h_pinned.time(big));
    Ok((one_way, both))
}

/// GEMMs at the models' layer shapes, decode and prefill rows.
fn measure_gemms(exec: &mut dyn Executor, plan: &Plan) -> Result<Vec<GemmPoint>, Error> {
    let mut shapes: Vec<(u32, u32, u32, DType)> = Vec::new();
    for m in &plan.models {
        for (n, k, dt) in gemm_shapes(m) {
            for &rows in plan.decode_m.iter().chain(&plan.prefill_m) {
                shapes.push((rows, n, k, dt));
            }
        }
        // The LM head runs on the last position only: decode rows.
        for &rows in &plan.decode_m {
            shapes.push((rows, m.vocab, m.hidden, m.dtype));
        }
    }
    shapes.sort_unstable();
    shapes.dedup();
    let ops: Vec<OpKind> = shapes
        .iter()
        .map(|&(m, n, k, dtype)| OpKind::Gemm {
            m,
            n,
            k,
            batch: 1,
            dtype,
            weights: kvplan_vocab::WeightFormat::Dense,
        })
        .collect();
    let t = exec.run(&repeated(StreamKind::Compute, &ops, plan.reps))?;
    Ok(shapes
        .iter()
        .zip(medians(&t, ops.len(), plan.reps))
        .map(|(&(m, n, k, dtype), seconds)| GemmPoint {
            dtype,
            m,
            n,
            k,
            seconds: seconds.max(1e-9),
        })
        .collect())
}

/// Attention points `(flops, bytes, seconds, is_prefill)`: decode over batch x context, causal
/// prefill over length, and chunks attending to a prefix (KV-Runahead's per-device prefill).
fn measure_attention(
    exec: &mut dyn Executor,
    plan: &Plan,
    backend: BackendKind,
) -> Result<Vec<(f64, f64, f64, bool)>, Error> {
    let mut att_ops = Vec::new();
    for m in &plan.models {
        let a = |batch, q_len, kv_len, causal| OpKind::Attention {
            batch,
            q_heads: m.num_heads as u16,
            kv_heads: m.num_kv_heads as u16,
            q_len,
            kv_len,
            head_dim: m.head_dim as u16,
            causal,
            dtype: m.dtype,
            kv: kvplan_vocab::KvCacheDtype::Auto,
        };
        for &bs in &plan.attention_batches {
            for &kv in &plan.attention_kv_lens {
                att_ops.push((a(bs, 1, kv, false), false));
            }
        }
        for &len in &plan.prefill_lens {
            att_ops.push((a(1, len, len, true), true));
        }
    }
    let ops: Vec<OpKind> = att_ops.iter().map(|(o, _)| *o).collect();
    let t = exec.run(&repeated(StreamKind::Compute, &ops, plan.reps))?;
    let mut attention: Vec<(f64, f64, f64, bool)> = att_ops
        .iter()
        .zip(medians(&t, ops.len(), plan.reps))
        .map(|((op, prefill), secs)| (op.flops(), op.mem_bytes(), secs, *prefill))
        .collect();
    // Chunk-after-prefix points are compute-bound like causal prefill: they join the prefill
    // points that fix the fitted FLOP rate.
    let shapes = chunk_prefix_shapes(backend, plan.quick);
    for p in measure_chunk_prefix(exec, &plan.models, &shapes, plan.reps)? {
        attention.push((p.flops, p.bytes, p.seconds, true));
    }
    Ok(attention)
}

/// Memory-bound kernels over size: `(bytes, seconds)`.
fn measure_elementwise(exec: &mut dyn Executor, plan: &Plan) -> Result<Vec<(f64, f64)>, Error> {
    let ops: Vec<OpKind> = plan
        .elementwise_sizes
        .iter()
        .map(|&bytes| OpKind::Elementwise {
            kind: ElemKind::Other,
            bytes,
            rows: 0,
        })
        .collect();
    let t = exec.run(&repeated(StreamKind::Compute, &ops, plan.reps))?;
    Ok(plan
        .elementwise_sizes
        .iter()
        .map(|&b| b as f64)
        .zip(medians(&t, ops.len(), plan.reps))
        .collect())
}

/// Per-op cost of a chain of tiny kernels (launch overhead plus the executor's own gap), and
/// what issuing them, small copies and a synchronisation cost the host.
fn measure_overheads(exec: &mut dyn Executor) -> Result<(f64, HostCosts), Error> {
    let n = 200;
    let t = exec.run(&repeated(
        StreamKind::Compute,
        &[OpKind::Elementwise {
            kind: ElemKind::Other,
            bytes: 64,
            rows: 0,
        }],
        n,
    ))?;
    let op_overhead_s = t.makespan() / f64::from(n);
    let copies = exec.run(&repeated(
        StreamKind::H2D,
        &[copy_op(
            StreamKind::H2D,
            HostMemory::Pinned,
            HOST_COPY_BYTES,
        )],
        n,
    ))?;
    // Microseconds to the nanosecond (the clock's resolution at best).
    let us = |s: f64| (s * 1e9).round() / 1e3;
    let host = HostCosts {
        launch_us: us(host_issue_median(&t, "kernel launch")?),
        copy_issue_us: us(host_issue_median(&copies, "copy issue")?),
        sync_us: us(exec.idle_sync_s(n)?),
    };
    Ok((op_overhead_s, host))
}

/// Bytes of each copy of the host's copy-issue chain: small, so the issue and not the link
/// is what the host spans show.
pub const HOST_COPY_BYTES: u64 = 4096;

/// The median host issue span of a chain's ops, the first left out (it pays the run's start:
/// thread start, first-touch of buffers).
pub fn host_issue_median(t: &kvplan_vocab::Timeline, what: &str) -> Result<f64, Error> {
    median_of(t.host.iter().skip(1).map(|s| s.duration()).collect()).ok_or_else(|| Error::Fit {
        what: format!("the host's {what} cost"),
        why: "the executor recorded no host issue spans".into(),
    })
}

/// `(chunk, prefix)` shapes of the chunk-after-prefix attention sweep: a device of a KV-Runahead
/// chain runs the causal attention of its `chunk` queries over `prefix + chunk` keys. A prefix of
/// 0 is the causal prefill sweep (`Plan::prefill_lens`), measured already.
pub fn chunk_prefix_shapes(backend: BackendKind, quick: bool) -> Vec<(u32, u32)> {
    let (chunks, prefixes): (&[u32], &[u32]) = match (backend, quick) {
        (BackendKind::Cuda, true) => (&[512, 2048], &[4096, 16384]),
        (BackendKind::Cuda, false) => (&[512, 1024, 2048, 4096], &[1024, 4096, 16384]),
        (BackendKind::Cpu, true) => (&[16, 64], &[64, 256]),
        (BackendKind::Cpu, false) => (&[16, 64, 128], &[64, 256, 1024]),
    };
    chunks
        .iter()
        .flat_map(|&c| prefixes.iter().map(move |&p| (c, p)))
        .collect()
}

/// The attention of a `chunk`-token chunk after a `prefix`-token prefix of `m` (one sequence):
/// `q_len = chunk`, `kv_len = prefix + chunk`, causal — the kernel
/// the attention of [`layer_kernels`]`(m, 1, chunk, prefix + chunk)`, as planned for a KV-Runahead device.
pub fn chunk_prefix_attention(m: &ModelSpec, chunk: u32, prefix: u32) -> OpKind {
    kvplan_vocab::layers::attention_op(m, 1, chunk, prefix + chunk)
}

/// One measured chunk-after-prefix attention.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkPoint {
    /// Model whose head shape was measured.
    pub model: String,
    /// Query tokens (the chunk).
    pub chunk: u32,
    /// Keys before the chunk.
    pub prefix: u32,
    /// FLOPs of the kernel (the causal triangle counted exactly).
    pub flops: f64,
    /// Device-memory bytes of the kernel.
    pub bytes: f64,
    /// Median measured seconds.
    pub seconds: f64,
}

/// Measures the chunk-after-prefix attention of every model at every `(chunk, prefix)` shape,
/// `reps` times each back to back on one stream (the median is kept).
pub fn measure_chunk_prefix(
    exec: &mut dyn Executor,
    models: &[ModelSpec],
    shapes: &[(u32, u32)],
    reps: u32,
) -> Result<Vec<ChunkPoint>, Error> {
    let mut points = Vec::new();
    let mut ops = Vec::new();
    for m in models {
        for &(chunk, prefix) in shapes {
            let op = chunk_prefix_attention(m, chunk, prefix);
            points.push(ChunkPoint {
                model: m.name.clone(),
                chunk,
                prefix,
                flops: op.flops(),
                bytes: op.mem_bytes(),
                seconds: 0.0,
            });
            ops.push(op);
        }
    }
    if ops.is_empty() {
        return Ok(points);
    }
    let t = exec.run(&repeated(StreamKind::Compute, &ops, reps.max(1)))?;
    for (p, secs) in points.iter_mut().zip(medians(&t, ops.len(), reps.max(1))) {
        p.seconds = secs.max(1e-9);
    }
    Ok(points)
}
