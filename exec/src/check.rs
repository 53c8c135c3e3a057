//! Backend-independent correctness checks, run through the same GEMM, copy, strided-copy and
//! attention routines the timed executors use.
//!
//! [`kvpr_attention_equivalence`] verifies KVPR's claim — attention is exact when a prefix of
//! K,V is recomputed from the layer inputs `X` on the device and the rest is transferred — on a
//! backend's real kernels:
//!
//! 1. "prefill": `X [s', b, h]` and `W = [W_K | W_V] [h, 2*kv_dim]` go to the device, the backend's
//!    GEMM computes `X·W`, the `kv_concat` scatter lays the rows out as the KV cache, and the cache
//!    is copied back to host memory (the offloaded cache);
//! 2. full transfer: the whole cache is copied host→device and attended over;
//! 3. KVPR with split `l`: `X[0:l]` is copied host→device, the same GEMM recomputes `K,V[0:l]`, the
//!    scatter places them at the front of an empty KV buffer, `KV[l:s']` is copied host→device
//!    behind them, and the same attention kernel runs.
//!
//! The cache is token-major, `[token][K|V][batch][kv_head][head_dim]` (FlexGen keeps its cache
//! token-major too), so `X[0:l]` and `KV[l:s']` are each one contiguous copy, as in the schedule.
//!
//! [`headinfer_attention_equivalence`] verifies HeadInfer's claim — attention heads are
//! independent, so attention computed one head group at a time from an offloaded cache equals
//! attention over all heads at once — on the same kernels:
//!
//! 1. the full K,V `[kv_len][2][batch][kv_heads][head_dim]` and Q are on the device; the full
//!    attention is the reference;
//! 2. write-back: each group's K,V heads are gathered (exact strided copy) into a contiguous
//!    `[kv_len][2][batch][g][head_dim]` block and copied device→host, so the host cache is
//!    head-group-major (each group's cache is one contiguous copy, as HeadInfer keeps it);
//! 3. head-wise: for group `i`, its block is copied host→device into ping-pong buffer `i % 2`, the
//!    group's query heads are gathered, the attention kernel runs with the group's `g` KV heads
//!    and `g·Hq/Hkv` query heads, and its output is scattered into the group's head slots of a
//!    zeroed output (a group that is lost shows as a difference).
//!
//! On the CPU backend the two outputs are bit-identical for every `l` (the GEMM's rows do not
//! depend on how many rows are computed, and the scatter is `x * 1 + (-0)`, an exact identity).
//! On CUDA (fp16 storage, fp32 accumulation) cuBLAS may choose different kernels for different
//! row counts, so the outputs agree within [`CUDA_FP16_ATOL`]. The head-wise check is
//! bit-identical on the CPU too (each (sequence, head) is computed by the same GEMMs whatever the
//! number of heads in the call; only strides differ); on CUDA it is held to the same tolerance.

use crate::backend::{BackendKind, ExecOptions};
use crate::error::Error;
use crate::kernel::{AttentionShape, CopyAt, Device, Strided, reference_attention};
use crate::{cpu, cuda, data};

/// Largest absolute difference accepted between CUDA attention outputs computed from the same
/// inputs along different paths, or between a CUDA kernel and the f64 reference, for data of the
/// checks' scale (inputs uniform in `[-1, 1)`, outputs well below 1): about 8 fp16 ulps at 0.5.
pub const CUDA_FP16_ATOL: f64 = 2e-3;

/// Rejects attention shapes a check cannot run: a zero size, query heads that are not a multiple
/// of the KV heads, or buffers too large for a check.
fn validate_shape(shape: &AttentionShape) -> Result<(), Error> {
    if shape.batch == 0
        || shape.q_heads == 0
        || shape.kv_heads == 0
        || shape.q_len == 0
        || shape.kv_len == 0
        || shape.head_dim == 0
    {
        return Err(Error::InvalidInput(format!(
            "attention shape {shape:?}: every size must be at least 1"
        )));
    }
    if !shape.q_heads.is_multiple_of(shape.kv_heads) {
        return Err(Error::InvalidInput(format!(
            "attention shape {shape:?}: q_heads must be a multiple of kv_heads"
        )));
    }
    let elems = (shape.q_elems() as u128).max(shape.kv_elems() as u128);
    if elems > 1 << 31 {
        return Err(Error::InvalidInput(format!(
            "attention shape {shape:?}: too large for a check"
        )));
    }
    Ok(())
}

/// A KVPR attention case: a decode step's attention over `seq_len` cached tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionCase {
    /// Sequences.
    pub batch: usize,
    /// Hidden size (the width of the layer input `X`).
    pub hidden: usize,
    /// Query heads.
    pub q_heads: usize,
    /// Key/value heads (divides `q_heads`).
    pub kv_heads: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// Cached tokens `s'`.
    pub seq_len: usize,
}

impl AttentionCase {
    fn shape(&self) -> AttentionShape {
        AttentionShape {
            batch: self.batch,
            q_heads: self.q_heads,
            kv_heads: self.kv_heads,
            q_len: 1,
            kv_len: self.seq_len,
            head_dim: self.head_dim,
            causal: false,
        }
    }

    fn validate(&self) -> Result<(), Error> {
        if self.hidden == 0 {
            return Err(Error::InvalidInput("hidden must be at least 1".into()));
        }
        validate_shape(&self.shape())?;
        let x = self.seq_len as u128 * self.batch as u128 * self.hidden as u128;
        let w = self.hidden as u128 * 2 * (self.kv_heads * self.head_dim) as u128;
        if x.max(w) > 1 << 31 {
            return Err(Error::InvalidInput(format!(
                "{self:?} is too large for a check"
            )));
        }
        Ok(())
    }
}

/// How the KVPR output with one split compares with the full-transfer output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Equivalence {
    /// Recomputed tokens `l`.
    pub recompute: u32,
    /// Largest absolute difference.
    pub max_abs_diff: f64,
    /// `max_abs_diff` over the largest absolute value of the full-transfer output.
    pub max_rel_diff: f64,
    /// Every element has the same bits.
    pub bit_identical: bool,
}

/// How a backend's attention compares with an f64 reference on the same (rounded) inputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Accuracy {
    /// Largest absolute difference.
    pub max_abs_diff: f64,
    /// `max_abs_diff` over the largest absolute reference value.
    pub max_rel_diff: f64,
    /// Largest absolute reference value.
    pub max_abs_reference: f64,
}

/// Runs [`AttentionCase`] on backend `kind` once with full transfer and once per split `l` in
/// `recompute` (each `0 <= l <= seq_len`), and compares each KVPR output with the full-transfer
/// output. Data is seeded by `options.seed`; the CUDA check runs on device `options.device` in
/// fp16 with the executor's cuBLAS GEMM and NVRTC kernels.
pub fn kvpr_attention_equivalence(
    kind: BackendKind,
    options: &ExecOptions,
    case: &AttentionCase,
    recompute: &[u32],
) -> Result<Vec<Equivalence>, Error> {
    case.validate()?;
    if let Some(&l) = recompute.iter().find(|&&l| l as usize > case.seq_len) {
        return Err(Error::InvalidInput(format!(
            "cannot recompute {l} of {} cached tokens",
            case.seq_len
        )));
    }
    match kind {
        BackendKind::Cpu => {
            equivalence(&mut cpu::CheckDevice::new(), options.seed, case, recompute)
        }
        BackendKind::Cuda => cuda::guarded(|| {
            let mut dev = cuda::CheckDevice::open(options)?;
            equivalence(&mut dev, options.seed, case, recompute)
        }),
    }
}

/// How head-wise attention with one group size compares with full attention.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HeadwiseEquivalence {
    /// KV heads per group.
    pub heads_per_group: usize,
    /// Groups (`kv_heads / heads_per_group`).
    pub groups: usize,
    /// Largest absolute difference.
    pub max_abs_diff: f64,
    /// `max_abs_diff` over the largest absolute value of the full-attention output.
    pub max_rel_diff: f64,
    /// Whether every output element has the same bits.
    pub bit_identical: bool,
}

/// Runs attention of `shape` on backend `kind` once over all heads and once head group by head
/// group from an offloaded, head-group-major cache through two ping-pong buffers (module docs),
/// for each group size in `heads_per_group` (each must divide `shape.kv_heads`), and compares.
pub fn headinfer_attention_equivalence(
    kind: BackendKind,
    options: &ExecOptions,
    shape: &AttentionShape,
    heads_per_group: &[usize],
) -> Result<Vec<HeadwiseEquivalence>, Error> {
    validate_shape(shape)?;
    if let Some(&g) = heads_per_group
        .iter()
        .find(|&&g| g == 0 || !shape.kv_heads.is_multiple_of(g))
    {
        return Err(Error::InvalidInput(format!(
            "{g} heads per group does not divide {} KV heads",
            shape.kv_heads
        )));
    }
    match kind {
        BackendKind::Cpu => headwise(
            &mut cpu::CheckDevice::new(),
            options.seed,
            shape,
            heads_per_group,
        ),
        BackendKind::Cuda => cuda::guarded(|| {
            let mut dev = cuda::CheckDevice::open(options)?;
            headwise(&mut dev, options.seed, shape, heads_per_group)
        }),
    }
}

/// Exact copy of `width` contiguous elements from each of `rows` rows: source row `r` at
/// `src_at + r * src_stride`, destination row `r` at `dst_at + r * dst_stride`.
fn rows_copy(
    rows: usize,
    width: usize,
    (src_at, src_stride): (usize, usize),
    (dst_at, dst_stride): (usize, usize),
) -> Strided {
    Strided {
        outer: rows,
        middle: 1,
        inner: width,
        src_at,
        src_outer: src_stride,
        src_middle: 0,
        dst_at,
        dst_outer: dst_stride,
        dst_middle: 0,
    }
}

/// The head-wise equivalence procedure on one device (see the module docs).
pub(crate) fn headwise<D: Device<Error = Error>>(
    dev: &mut D,
    seed: u64,
    shape: &AttentionShape,
    heads_per_group: &[usize],
) -> Result<Vec<HeadwiseEquivalence>, Error> {
    let d = shape.head_dim;
    let gqa = shape.q_heads / shape.kv_heads;
    let q = data::random_f32(shape.q_elems(), data::derive(seed, 21), 1.0);
    let kv = data::random_f32(shape.kv_elems(), data::derive(seed, 22), 1.0);
    let (q_host, kv_host) = (dev.host(&q)?, dev.host(&kv)?);
    let mut q_dev = dev.dev_zeroed(q.len())?;
    dev.h2d(&mut q_dev, &q_host, CopyAt::first(q.len()))?;
    let mut kv_dev = dev.dev_zeroed(kv.len())?;
    dev.h2d(&mut kv_dev, &kv_host, CopyAt::first(kv.len()))?;
    let out_len = shape.q_elems();
    let mut out_host = dev.host_zeroed(out_len)?;
    let reference = {
        let mut out = dev.dev_zeroed(out_len)?;
        dev.attention(shape, &q_dev, &kv_dev, &mut out)?;
        dev.d2h(&mut out_host, &out, CopyAt::first(out_len))?;
        dev.read(&out_host)?
    };
    // K,V rows are (token, K|V, sequence); query rows are (query, sequence).
    let kv_rows = shape.kv_len * 2 * shape.batch;
    let q_rows = shape.q_len * shape.batch;
    let mut result = Vec::with_capacity(heads_per_group.len());
    for &g in heads_per_group {
        let groups = shape.kv_heads / g;
        let gq = g * gqa;
        let gshape = AttentionShape {
            q_heads: gq,
            kv_heads: g,
            ..*shape
        };
        let block = gshape.kv_elems();
        // Write-back: gather each group's heads, copy the block to its place in the host cache.
        let mut cache = dev.host_zeroed(groups * block)?;
        {
            let mut stage = dev.dev_zeroed(block)?;
            for i in 0..groups {
                let gather = rows_copy(kv_rows, g * d, (i * g * d, shape.kv_heads * d), (0, g * d));
                dev.strided(&gather, &kv_dev, &mut stage, 1.0, -0.0)?;
                dev.d2h(
                    &mut cache,
                    &stage,
                    CopyAt {
                        dst_at: i * block,
                        src_at: 0,
                        len: block,
                    },
                )?;
            }
        }
        // Head-wise attention through two ping-pong buffers.
        let mut buffers = [dev.dev_zeroed(block)?, dev.dev_zeroed(block)?];
        let mut qg = dev.dev_zeroed(q_rows * gq * d)?;
        let mut og = dev.dev_zeroed(q_rows * gq * d)?;
        let mut out = dev.dev_zeroed(out_len)?;
        for i in 0..groups {
            let buf = &mut buffers[i % 2];
            dev.h2d(
                buf,
                &cache,
                CopyAt {
                    dst_at: 0,
                    src_at: i * block,
                    len: block,
                },
            )?;
            let gather = rows_copy(q_rows, gq * d, (i * gq * d, shape.q_heads * d), (0, gq * d));
            dev.strided(&gather, &q_dev, &mut qg, 1.0, -0.0)?;
            dev.attention(&gshape, &qg, buf, &mut og)?;
            let scatter = rows_copy(q_rows, gq * d, (0, gq * d), (i * gq * d, shape.q_heads * d));
            dev.strided(&scatter, &og, &mut out, 1.0, -0.0)?;
        }
        dev.d2h(&mut out_host, &out, CopyAt::first(out_len))?;
        let got = dev.read(&out_host)?;
        let (max_abs_diff, max_rel_diff, bit_identical) = compare(&got, &reference);
        result.push(HeadwiseEquivalence {
            heads_per_group: g,
            groups,
            max_abs_diff,
            max_rel_diff,
            bit_identical,
        });
    }
    Ok(result)
}

/// Runs one attention call of `shape` on backend `kind` with seeded inputs and compares it with
/// an f64 reference computed from the inputs as the backend stores them (fp16 on CUDA).
pub fn attention_accuracy(
    kind: BackendKind,
    options: &ExecOptions,
    shape: &AttentionShape,
) -> Result<Accuracy, Error> {
    validate_shape(shape)?;
    match kind {
        BackendKind::Cpu => accuracy(&mut cpu::CheckDevice::new(), options.seed, shape),
        BackendKind::Cuda => cuda::guarded(|| {
            let mut dev = cuda::CheckDevice::open(options)?;
            accuracy(&mut dev, options.seed, shape)
        }),
    }
}

/// Scatters GEMM rows `[tokens * batch, 2 * kv_dim]` (row `t * batch + s` holds K then V of token
/// `t` of sequence `s`) into the front of a KV buffer `[token][2][batch][kv_dim]`.
pub(crate) fn kv_concat<D: Device<Error = Error>>(
    dev: &mut D,
    tokens: usize,
    batch: usize,
    kv_dim: usize,
    rows: &D::Dev,
    kv: &mut D::Dev,
) -> Result<(), Error> {
    for part in 0..2 {
        let s = Strided {
            outer: tokens,
            middle: batch,
            inner: kv_dim,
            src_at: part * kv_dim,
            src_outer: batch * 2 * kv_dim,
            src_middle: 2 * kv_dim,
            dst_at: part * batch * kv_dim,
            dst_outer: 2 * batch * kv_dim,
            dst_middle: kv_dim,
        };
        // x * 1 + (-0) == x exactly for every x (also -0 and with a fused multiply-add).
        dev.strided(&s, rows, kv, 1.0, -0.0)?;
    }
    Ok(())
}

fn compare(got: &[f32], reference: &[f32]) -> (f64, f64, bool) {
    let mut max_abs = 0.0f64;
    let mut max_ref = 0.0f64;
    let mut same = got.len() == reference.len();
    for (&g, &r) in got.iter().zip(reference) {
        let d = (f64::from(g) - f64::from(r)).abs();
        max_abs = if d.is_nan() {
            f64::INFINITY
        } else {
            max_abs.max(d)
        };
        max_ref = max_ref.max(f64::from(r).abs());
        same &= g.to_bits() == r.to_bits();
    }
    (max_abs, max_abs / max_ref.max(1e-30), same)
}

/// The KVPR equivalence procedure on one device (see the module docs).
pub(crate) fn equivalence<D: Device<Error = Error>>(
    dev: &mut D,
    seed: u64,
    case: &AttentionCase,
    recompute: &[u32],
) -> Result<Vec<Equivalence>, Error> {
    let (b, h, s) = (case.batch, case.hidden, case.seq_len);
    let kvd = case.kv_heads * case.head_dim;
    let shape = case.shape();
    let tok_x = b * h; // X elements per token
    let tok_kv = 2 * b * kvd; // KV elements per token
    let x = data::random_f32(s * tok_x, data::derive(seed, 1), 1.0);
    let w = data::random_f32(h * 2 * kvd, data::derive(seed, 2), 1.0 / (h as f32).sqrt());
    let q = data::random_f32(shape.q_elems(), data::derive(seed, 3), 1.0);
    let x_host = dev.host(&x)?;
    let w_host = dev.host(&w)?;
    let q_host = dev.host(&q)?;
    let mut w_dev = dev.dev_zeroed(w.len())?;
    dev.h2d(&mut w_dev, &w_host, CopyAt::first(w.len()))?;
    let mut q_dev = dev.dev_zeroed(q.len())?;
    dev.h2d(&mut q_dev, &q_host, CopyAt::first(q.len()))?;

    // Prefill: K,V of every cached token on the device, then offloaded to the host.
    let mut x_dev = dev.dev_zeroed(x.len())?;
    dev.h2d(&mut x_dev, &x_host, CopyAt::first(x.len()))?;
    let mut rows = dev.dev_zeroed(s * b * 2 * kvd)?;
    dev.gemm(s * b, 2 * kvd, h, &x_dev, &w_dev, &mut rows)?;
    let mut kv_dev = dev.dev_zeroed(s * tok_kv)?;
    kv_concat(dev, s, b, kvd, &rows, &mut kv_dev)?;
    let mut cache = dev.host_zeroed(s * tok_kv)?;
    dev.d2h(&mut cache, &kv_dev, CopyAt::first(s * tok_kv))?;
    drop((x_dev, rows, kv_dev));

    // Full transfer.
    let out_len = shape.q_elems();
    let mut out_host = dev.host_zeroed(out_len)?;
    let reference = {
        let mut kv = dev.dev_zeroed(s * tok_kv)?;
        dev.h2d(&mut kv, &cache, CopyAt::first(s * tok_kv))?;
        let mut out = dev.dev_zeroed(out_len)?;
        dev.attention(&shape, &q_dev, &kv, &mut out)?;
        dev.d2h(&mut out_host, &out, CopyAt::first(out_len))?;
        dev.read(&out_host)?
    };

    let mut result = Vec::with_capacity(recompute.len());
    for &l32 in recompute {
        let l = l32 as usize;
        // A fresh zeroed buffer: a region the KVPR path failed to write shows as a difference.
        let mut kv = dev.dev_zeroed(s * tok_kv)?;
        if l > 0 {
            let mut xl = dev.dev_zeroed(l * tok_x)?;
            dev.h2d(&mut xl, &x_host, CopyAt::first(l * tok_x))?;
            let mut rows = dev.dev_zeroed(l * b * 2 * kvd)?;
            dev.gemm(l * b, 2 * kvd, h, &xl, &w_dev, &mut rows)?;
            kv_concat(dev, l, b, kvd, &rows, &mut kv)?;
        }
        if l < s {
            dev.h2d(
                &mut kv,
                &cache,
                CopyAt {
                    dst_at: l * tok_kv,
                    src_at: l * tok_kv,
                    len: (s - l) * tok_kv,
                },
            )?;
        }
        let mut out = dev.dev_zeroed(out_len)?;
        dev.attention(&shape, &q_dev, &kv, &mut out)?;
        dev.d2h(&mut out_host, &out, CopyAt::first(out_len))?;
        let got = dev.read(&out_host)?;
        let (max_abs_diff, max_rel_diff, bit_identical) = compare(&got, &reference);
        result.push(Equivalence {
            recompute: l32,
            max_abs_diff,
            max_rel_diff,
            bit_identical,
        });
    }
    Ok(result)
}

fn accuracy<D: Device<Error = Error>>(
    dev: &mut D,
    seed: u64,
    shape: &AttentionShape,
) -> Result<Accuracy, Error> {
    let q: Vec<f32> = data::random_f32(shape.q_elems(), data::derive(seed, 11), 1.0)
        .into_iter()
        .map(|x| dev.round(x))
        .collect();
    let kv: Vec<f32> = data::random_f32(shape.kv_elems(), data::derive(seed, 12), 1.0)
        .into_iter()
        .map(|x| dev.round(x))
        .collect();
    let (qh, kvh) = (dev.host(&q)?, dev.host(&kv)?);
    let mut qd = dev.dev_zeroed(q.len())?;
    dev.h2d(&mut qd, &qh, CopyAt::first(q.len()))?;
    let mut kvd = dev.dev_zeroed(kv.len())?;
    dev.h2d(&mut kvd, &kvh, CopyAt::first(kv.len()))?;
    let mut od = dev.dev_zeroed(q.len())?;
    dev.attention(shape, &qd, &kvd, &mut od)?;
    let mut oh = dev.host_zeroed(q.len())?;
    dev.d2h(&mut oh, &od, CopyAt::first(q.len()))?;
    let got = dev.read(&oh)?;
    let reference = reference_attention(shape, &q, &kv);
    let (max_abs_diff, max_rel_diff, _) = compare(&got, &reference);
    let max_abs_reference = reference
        .iter()
        .fold(0.0f64, |m, &x| m.max(f64::from(x).abs()));
    Ok(Accuracy {
        max_abs_diff,
        max_rel_diff,
        max_abs_reference,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Faults injected into the CPU device's strided copy (the scatter kernel): only the
    /// prefill scatter (all 9 tokens) works; a partial one (KVPR's recomputed rows) is lost.
    fn no_partial_scatter(s: &Strided) -> Option<Strided> {
        (s.outer == 9).then_some(*s)
    }

    /// Every scatter writes the first head slot (a planner that forgets where a group's output
    /// belongs).
    fn first_slot_only(s: &Strided) -> Option<Strided> {
        Some(Strided { dst_at: 0, ..*s })
    }

    #[test]
    fn a_kvpr_path_that_loses_the_recomputed_rows_is_caught() {
        let case = AttentionCase {
            batch: 2,
            hidden: 16,
            q_heads: 2,
            kv_heads: 2,
            head_dim: 8,
            seq_len: 9,
        };
        let r = equivalence(
            &mut cpu::CheckDevice::faulty(no_partial_scatter),
            5,
            &case,
            &[0, 3, 8],
        )
        .unwrap();
        assert!(r[0].bit_identical, "l = 0 recomputes nothing");
        assert!(
            !r[1].bit_identical && r[1].max_abs_diff > 1e-3,
            "{:?}",
            r[1]
        );
        assert!(
            !r[2].bit_identical && r[2].max_abs_diff > 1e-3,
            "{:?}",
            r[2]
        );
    }

    #[test]
    fn a_headwise_path_that_misplaces_group_outputs_is_caught() {
        let shape = AttentionShape {
            batch: 2,
            q_heads: 8,
            kv_heads: 4,
            q_len: 5,
            kv_len: 12,
            head_dim: 8,
            causal: true,
        };
        let r = headwise(
            &mut cpu::CheckDevice::faulty(first_slot_only),
            3,
            &shape,
            &[4, 1],
        )
        .unwrap();
        assert!(r[0].bit_identical, "one group: nothing to misplace");
        assert!(
            !r[1].bit_identical && r[1].max_abs_diff > 1e-3,
            "{:?}",
            r[1]
        );
        let ok = headwise(&mut cpu::CheckDevice::new(), 3, &shape, &[4, 2, 1]).unwrap();
        assert!(ok.iter().all(|e| e.bit_identical), "{ok:?}");
    }
}
