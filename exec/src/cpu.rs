//! The CPU backend: one OS thread per stream on host memory, real arithmetic in f32.
//!
//! Every op does real work of its real size, so the plan → execute → compare path runs anywhere:
//! - copies are memcpys between the stream's "host" and "device" buffers; pinned host memory is
//!   one copy, pageable memory is staged through a 2 MiB buffer the way the CUDA driver stages
//!   it (two copies per chunk), so pageable is honestly slower;
//! - GEMMs run `matrixmultiply`'s single-threaded sgemm; attention and elementwise kernels are
//!   plain loops. Everything computes in **f32 whatever the op's dtype** (CPUs have no fast fp16),
//!   so an fp16 op here does the FLOPs of the op but moves twice its bytes.
//!
//! Data does not flow between ops: each stream owns scratch buffers sized (once, by
//! [`crate::sched::needs`]) for its largest op of each role, and every op reads and writes the
//! first elements of them. Buffers are kept across runs and grown when a schedule needs more.

use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::time::Instant;

use kvplan_vocab::schedule::{HostMemory, OpId, OpKind, Schedule, StreamId};
use kvplan_vocab::timeline::{Source, Timeline};

use crate::backend::{BackendKind, DeviceInfo, ExecOptions, Executor};
use crate::data;
use crate::error::Error;
use crate::kernel::{AttentionShape, CHECK_HOST, CopyAt, Device, Strided};
use crate::sched::{self, Progress, StreamNeeds, Worker};

/// The staging buffer of pageable copies (the CUDA driver's is of this order).
pub(crate) const STAGING_BYTES: usize = 2 << 20;

/// Row-major `c[m, n] = a[m, k] · b[k, n]` in f32, single-threaded. The value of each output row
/// depends only on its row of `a` (not on `m`), which KVPR's exactness check relies on.
pub(crate) fn gemm(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    if k == 0 {
        c[..m * n].fill(0.0);
        return;
    }
    sgemm(m, k, n, 1.0, (a, k, 1), (b, n, 1), (c, n, 1));
}

/// One past the last element of a `rows x cols` matrix with strides `rs`, `cs`.
fn extent(rows: usize, cols: usize, rs: usize, cs: usize) -> usize {
    (rows - 1) * rs + (cols - 1) * cs + 1
}

/// `c = alpha · a · b` for `a` `[m, k]`, `b` `[k, n]`, `c` `[m, n]`, each given as (slice, row
/// stride, column stride) in elements: matrixmultiply's single-threaded sgemm.
#[allow(unsafe_code)]
fn sgemm(
    m: usize,
    k: usize,
    n: usize,
    alpha: f32,
    (a, rsa, csa): (&[f32], usize, usize),
    (b, rsb, csb): (&[f32], usize, usize),
    (c, rsc, csc): (&mut [f32], usize, usize),
) {
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    assert!(
        extent(m, k, rsa, csa) <= a.len()
            && extent(k, n, rsb, csb) <= b.len()
            && extent(m, n, rsc, csc) <= c.len(),
        "sgemm operands out of bounds"
    );
    assert!(
        rsc >= n * csc || csc >= m * rsc,
        "sgemm output elements overlap"
    );
    // SAFETY: the asserts keep every element matrixmultiply reads or writes inside the three
    // slices; `c` is a unique borrow (so it aliases neither input) and its strides map distinct
    // (row, column) pairs to distinct elements. Strides are below isize::MAX (slice lengths).
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.as_ptr(),
            rsa as isize,
            csa as isize,
            b.as_ptr(),
            rsb as isize,
            csb as isize,
            0.0,
            c.as_mut_ptr(),
            rsc as isize,
            csc as isize,
        );
    }
}

/// Queries per block of the CPU attention: scores are `ATTN_BLOCK x kv_len`.
pub(crate) const ATTN_BLOCK: usize = 32;

/// Scaled-dot-product attention in f32 (layouts in [`AttentionShape`]); `scores` holds at least
/// `ATTN_BLOCK * kv_len` values. Per (sequence, query head) and block of up to 32 queries:
/// `S = scale · Q Kᵀ` and `O = P V` with the GEMM above (K and V read in place through their
/// token stride), a max-subtracted softmax in between; no allocation.
pub(crate) fn attention(
    s: &AttentionShape,
    q: &[f32],
    kv: &[f32],
    out: &mut [f32],
    scores: &mut [f32],
) {
    let d = s.head_dim;
    if d == 0 || s.kv_heads == 0 || s.q_heads == 0 {
        return;
    }
    let group = s.q_heads / s.kv_heads;
    let scale = 1.0 / (d as f32).sqrt();
    let (tok, voff) = (s.token_stride(), s.v_offset());
    let qs = s.batch * s.q_heads * d; // between a head's consecutive queries
    let mut sums = [0.0f32; ATTN_BLOCK];
    for b in 0..s.batch {
        for h in 0..s.q_heads {
            let base = (b * s.kv_heads + h / group) * d;
            let mut q0 = 0;
            while q0 < s.q_len {
                let nq = ATTN_BLOCK.min(s.q_len - q0);
                let row0 = ((q0 * s.batch + b) * s.q_heads + h) * d;
                // Keys the block's last (most seeing) query sees.
                let kmax = s.visible(q0 + nq - 1);
                if kmax > 0 {
                    let sc = &mut scores[..nq * kmax];
                    sgemm(
                        nq,
                        d,
                        kmax,
                        scale,
                        (&q[row0..], qs, 1),
                        (&kv[base..], 1, tok),
                        (&mut *sc, kmax, 1),
                    );
                    for (r, row) in sc.chunks_exact_mut(kmax).enumerate() {
                        let vis = s.visible(q0 + r);
                        let (seen, masked) = row.split_at_mut(vis);
                        masked.fill(0.0);
                        let mx = seen.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
                        let mut sum = 0.0f32;
                        for x in seen.iter_mut() {
                            *x = (*x - mx).exp();
                            sum += *x;
                        }
                        sums[r] = sum;
                    }
                    sgemm(
                        nq,
                        kmax,
                        d,
                        1.0,
                        (&*sc, kmax, 1),
                        (&kv[base + voff..], tok, 1),
                        (&mut out[row0..], qs, 1),
                    );
                } else {
                    sums[..nq].fill(0.0);
                }
                for (r, &sum) in sums[..nq].iter().enumerate() {
                    let o = &mut out[row0 + r * qs..row0 + r * qs + d];
                    if sum > 0.0 {
                        let inv = 1.0 / sum;
                        o.iter_mut().for_each(|x| *x *= inv);
                    } else {
                        o.fill(0.0); // a query that sees no key
                    }
                }
                q0 += nq;
            }
        }
    }
}

/// `dst = src * a + b` over `s`.
pub(crate) fn strided(s: &Strided, src: &[f32], dst: &mut [f32], a: f32, b: f32) {
    for o in 0..s.outer {
        for m in 0..s.middle {
            let si = s.src_at + o * s.src_outer + m * s.src_middle;
            let di = s.dst_at + o * s.dst_outer + m * s.dst_middle;
            for (y, &x) in dst[di..di + s.inner].iter_mut().zip(&src[si..si + s.inner]) {
                *y = x * a + b;
            }
        }
    }
}

/// A host↔device copy: one memcpy from pinned memory, or staged through `staging` in chunks of
/// its length from pageable memory (the driver's bounce buffer: two memcpys per chunk).
pub(crate) fn copy<T: Copy>(dst: &mut [T], src: &[T], host: HostMemory, staging: &mut [T]) {
    match host {
        HostMemory::Pageable if !staging.is_empty() => {
            let c = staging.len();
            for (d, s) in dst.chunks_mut(c).zip(src.chunks(c)) {
                let st = &mut staging[..s.len()];
                st.copy_from_slice(s);
                d.copy_from_slice(st);
            }
        }
        _ => dst.copy_from_slice(src),
    }
}

/// `len` copies of `x`, or [`Error::AllocFailed`] where the memory cannot be had.
fn alloc<T: Clone>(len: usize, x: T) -> Result<Vec<T>, Error> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| Error::AllocFailed {
        bytes: (len as u64).saturating_mul(std::mem::size_of::<T>() as u64),
    })?;
    v.resize(len, x);
    Ok(v)
}

/// Scratch buffers of one stream.
#[derive(Default)]
struct Bufs {
    /// Host side of copies (for a peer stream: the receiving device's buffer).
    host: Vec<u8>,
    /// Device side of copies.
    dev: Vec<u8>,
    /// Pageable copies' bounce buffer.
    staging: Vec<u8>,
    a: Vec<f32>,
    b: Vec<f32>,
    c: Vec<f32>,
    q: Vec<f32>,
    o: Vec<f32>,
    kv: Vec<f32>,
    scores: Vec<f32>,
    src: Vec<f32>,
    dst: Vec<f32>,
}

/// Element counts of [`Bufs`] for one schedule (f32 for the compute buffers).
#[derive(Debug, Default, Clone, Copy)]
struct Sizes {
    host: usize,
    dev: usize,
    staging: usize,
    a: usize,
    b: usize,
    c: usize,
    q: usize,
    kv: usize,
    scores: usize,
    elem: usize,
    b_scale: f32,
}

impl Sizes {
    fn of(n: &StreamNeeds) -> Self {
        let max = |f: &dyn Fn(usize) -> u64| (0..3).map(f).max().unwrap_or(0) as usize;
        let k_max = max(&|d| n.gemm[d].k_max);
        Sizes {
            host: n.copy as usize,
            dev: n.copy as usize,
            staging: (n.pageable as usize).min(STAGING_BYTES),
            a: max(&|d| n.gemm[d].a),
            b: max(&|d| n.gemm[d].b),
            c: max(&|d| n.gemm[d].c),
            q: max(&|d| n.attn[d].q),
            kv: max(&|d| n.attn[d].kv),
            scores: ATTN_BLOCK * max(&|d| n.attn[d].kv_len),
            // The elementwise op reads half its bytes and writes half, as f32.
            elem: (n.elementwise / 8) as usize,
            b_scale: 1.0 / (k_max.max(1) as f32).sqrt(),
        }
    }

    fn bytes(&self) -> u64 {
        let floats = [
            self.a,
            self.b,
            self.c,
            2 * self.q,
            self.kv,
            self.scores,
            2 * self.elem,
        ];
        let f = floats
            .iter()
            .fold(0u64, |t, &x| t.saturating_add((x as u64).saturating_mul(4)));
        [self.host, self.dev, self.staging]
            .iter()
            .fold(f, |t, &x| t.saturating_add(x as u64))
    }
}

impl Bufs {
    fn bytes(&self) -> u64 {
        let f = [
            &self.a,
            &self.b,
            &self.c,
            &self.q,
            &self.o,
            &self.kv,
            &self.scores,
            &self.src,
            &self.dst,
        ]
        .iter()
        .map(|v| v.len())
        .sum::<usize>();
        (self.host.len() + self.dev.len() + self.staging.len() + 4 * f) as u64
    }

    /// Grows every buffer to `s`, writing every page now rather than inside a timed op: copy
    /// buffers get a constant byte (their contents do not matter), compute buffers seeded values.
    /// A buffer that cannot be allocated is an error (a memory limit), not an abort.
    fn grow(&mut self, s: &Sizes, seed: u64) -> Result<(), Error> {
        let bytes = |v: &mut Vec<u8>, len: usize| {
            if v.len() < len {
                *v = Vec::new();
                *v = alloc(len, 0xA5u8)?;
            }
            Ok::<(), Error>(())
        };
        bytes(&mut self.host, s.host)?;
        bytes(&mut self.dev, s.dev)?;
        bytes(&mut self.staging, s.staging)?;
        let floats = |v: &mut Vec<f32>, len: usize, tag: u64, scale: f32| {
            if v.len() < len {
                *v = Vec::new();
                let mut n = alloc(len, 0.0f32)?;
                data::fill_f32_tiled(&mut n, data::derive(seed, tag), scale);
                *v = n;
            }
            Ok::<(), Error>(())
        };
        floats(&mut self.a, s.a, 4, 1.0)?;
        floats(&mut self.b, s.b, 5, s.b_scale)?;
        floats(&mut self.c, s.c, 6, 1.0)?;
        floats(&mut self.q, s.q, 7, 1.0)?;
        floats(&mut self.o, s.q, 8, 1.0)?;
        floats(&mut self.kv, s.kv, 9, 1.0)?;
        floats(&mut self.scores, s.scores, 10, 1.0)?;
        floats(&mut self.src, s.elem, 11, 1.0)?;
        floats(&mut self.dst, s.elem, 12, 1.0)?;
        Ok(())
    }

    /// Runs one op on these buffers.
    fn run(&mut self, kind: &OpKind) {
        match *kind {
            OpKind::H2D { bytes, host, .. } => {
                let n = bytes as usize;
                copy(&mut self.dev[..n], &self.host[..n], host, &mut self.staging);
            }
            OpKind::D2H { bytes, host, .. } => {
                let n = bytes as usize;
                copy(&mut self.host[..n], &self.dev[..n], host, &mut self.staging);
            }
            OpKind::PeerSend { bytes } => {
                let n = bytes as usize;
                self.host[..n].copy_from_slice(&self.dev[..n]);
            }
            OpKind::Gemm { m, n, k, batch, .. } => {
                let (m, n, k) = (m as usize, n as usize, k as usize);
                for i in 0..batch as usize {
                    gemm(
                        m,
                        n,
                        k,
                        &self.a[i * m * k..],
                        &self.b[i * k * n..],
                        &mut self.c[i * m * n..],
                    );
                }
            }
            OpKind::Attention { .. } => {
                if let Ok(Some(s)) = sched::attention_shape(0, kind) {
                    attention(&s, &self.q, &self.kv, &mut self.o, &mut self.scores);
                }
            }
            OpKind::Elementwise { bytes, .. } => {
                let n = (bytes / 8) as usize;
                strided(
                    &Strided::contiguous(n),
                    &self.src,
                    &mut self.dst,
                    1.0001,
                    0.5,
                );
            }
            // `sched::needs` rejects all-reduces and batched attention before a run starts.
            OpKind::AllReduce { .. } | OpKind::BatchAttention { .. } => {}
        }
    }
}

struct CpuWorker<'a> {
    stream: StreamId,
    schedule: &'a Schedule,
    bufs: &'a mut Bufs,
    /// (op, start, end) of every op run, in stream order.
    times: Vec<(u32, Instant, Instant)>,
    /// (op, start, end) of the host's dispatch of every op: from when this thread was done
    /// with its stream's previous op (its waits for other streams' ops and the executor's
    /// bookkeeping) to the op's start; the first op's is empty. The op itself runs on the same
    /// thread (its span in `times`).
    host: Vec<(u32, Instant, Instant)>,
    /// When this thread finished its previous op.
    free_since: Option<Instant>,
    /// Ops run by every worker, this run and the warm-up runs before it.
    ran: &'a AtomicU64,
    report: &'a dyn kvplan_vocab::Progress,
}

/// Ops run between two progress reports.
const REPORT_EVERY: u64 = 64;

impl Worker for CpuWorker<'_> {
    fn stream(&self) -> StreamId {
        self.stream
    }

    fn op(&mut self, op: OpId) -> Result<(), Error> {
        let kind = &self.schedule.ops()[op.index()].kind;
        let start = Instant::now();
        self.bufs.run(kind);
        let end = Instant::now();
        self.times.push((op.0, start, end));
        self.host
            .push((op.0, self.free_since.unwrap_or(start), start));
        self.free_since = Some(end);
        let n = self.ran.fetch_add(1, AtomicOrdering::Relaxed) + 1;
        if n.is_multiple_of(REPORT_EVERY) {
            self.report.set(n);
        }
        Ok(())
    }
}

/// The CPU executor.
pub(crate) struct CpuExecutor {
    info: DeviceInfo,
    options: ExecOptions,
    /// Scratch buffers per schedule stream index, kept across runs.
    cache: Vec<Bufs>,
}

impl CpuExecutor {
    pub fn new(options: &ExecOptions) -> Self {
        CpuExecutor {
            info: cpu_info(),
            options: options.clone(),
            cache: Vec::new(),
        }
    }

    /// Checks host memory and grows the per-stream buffers for `sizes`.
    fn reserve(&mut self, sizes: &[Sizes]) -> Result<(), Error> {
        if self.cache.len() < sizes.len() {
            self.cache.resize_with(sizes.len(), Bufs::default);
        }
        let held: u64 = self.cache.iter().map(Bufs::bytes).sum();
        let need: u64 = sizes
            .iter()
            .zip(&self.cache)
            .map(|(s, b)| s.bytes().max(b.bytes()))
            .sum::<u64>()
            + self.cache[sizes.len()..]
                .iter()
                .map(Bufs::bytes)
                .sum::<u64>();
        if let Some(avail) = sched::host_available_bytes()
            && need > held
            && need - held > avail
        {
            return Err(Error::OutOfMemory {
                what: "host memory",
                need,
                have: avail + held,
            });
        }
        for (i, (b, s)) in self.cache.iter_mut().zip(sizes).enumerate() {
            b.grow(s, data::derive(self.options.seed, 100 + i as u64))?;
        }
        Ok(())
    }
}

impl Executor for CpuExecutor {
    fn info(&self) -> &DeviceInfo {
        &self.info
    }

    fn run(&mut self, schedule: &Schedule) -> Result<Timeline, Error> {
        self.run_with(schedule, &kvplan_vocab::Silent)
    }

    fn idle_sync_s(&mut self, reps: u32) -> Result<f64, Error> {
        let done = Progress::new(1);
        done.mark(0);
        sched::median_time(reps, || {
            std::hint::black_box(done.wait(0));
            Ok(())
        })
    }

    fn run_with(
        &mut self,
        schedule: &Schedule,
        report: &dyn kvplan_vocab::Progress,
    ) -> Result<Timeline, Error> {
        schedule.validate()?;
        let needs = sched::needs(schedule, |_, _| 0)?;
        let sizes: Vec<Sizes> = needs.iter().map(Sizes::of).collect();
        self.reserve(&sizes)?;
        let mut per_stream = vec![0usize; needs.len()];
        for op in schedule.ops() {
            per_stream[op.stream.index()] += 1;
        }
        let mut progress = Progress::new(schedule.len());
        let (mut spans, mut host) = (Vec::new(), Vec::new());
        let ran = AtomicU64::new(0);
        let runs = u64::from(self.options.warmup_runs) + 1;
        report.start(runs * schedule.len() as u64, "ops run (warm-up runs first)");
        for run in 0..=self.options.warmup_runs {
            progress.reset();
            let mut workers: Vec<CpuWorker> = self
                .cache
                .iter_mut()
                .enumerate()
                .take(needs.len())
                .filter(|(s, _)| per_stream[*s] > 0)
                .map(|(s, bufs)| CpuWorker {
                    stream: StreamId(s as u16),
                    schedule,
                    bufs,
                    times: Vec::with_capacity(per_stream[s]),
                    host: Vec::with_capacity(per_stream[s]),
                    free_since: None,
                    ran: &ran,
                    report,
                })
                .collect();
            sched::drive(schedule, &progress, &mut workers)?;
            if run == self.options.warmup_runs {
                spans =
                    sched::spans_from(schedule.len(), workers.iter().map(|w| w.times.as_slice()));
                host = sched::spans_from(schedule.len(), workers.iter().map(|w| w.host.as_slice()));
            }
        }
        report.set(ran.load(AtomicOrdering::Relaxed));
        Ok(Timeline {
            source: Source::Measured {
                backend: BackendKind::Cpu.as_str().to_string(),
                device: self.info.name.clone(),
            },
            spans,
            host,
        })
    }
}

fn cpu_info() -> DeviceInfo {
    let name = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| "cpu".to_string());
    let mut driver = format!("{} {}", std::env::consts::OS, std::env::consts::ARCH);
    if let Ok(r) = std::fs::read_to_string("/proc/sys/kernel/osrelease") {
        driver = format!("{driver} (kernel {})", r.trim());
    }
    DeviceInfo {
        backend: BackendKind::Cpu,
        name,
        driver,
        memory_bytes: sched::host_total_bytes(),
        parallelism: std::thread::available_parallelism()
            .ok()
            .map(|n| n.get() as u32),
    }
}

/// The CPU side of the correctness checks: host and "device" buffers are `Vec<f32>`, and every
/// operation is the executor's own routine.
pub(crate) struct CheckDevice {
    staging: Vec<f32>,
    scores: Vec<f32>,
    /// A fault injected into every strided copy, to show that the checks catch a planner that
    /// gets one wrong: the copy it makes instead (`None`: none).
    #[cfg(test)]
    fault: Option<fn(&Strided) -> Option<Strided>>,
}

impl CheckDevice {
    pub fn new() -> Self {
        CheckDevice {
            staging: vec![0.0; STAGING_BYTES / 4],
            scores: Vec::new(),
            #[cfg(test)]
            fault: None,
        }
    }

    /// The device with `fault` injected into its strided copy.
    #[cfg(test)]
    pub fn faulty(fault: fn(&Strided) -> Option<Strided>) -> Self {
        CheckDevice {
            fault: Some(fault),
            ..CheckDevice::new()
        }
    }
}

impl Device for CheckDevice {
    type Host = Vec<f32>;
    type Dev = Vec<f32>;
    type Error = Error;

    fn round(&self, x: f32) -> f32 {
        x
    }

    fn host(&mut self, data: &[f32]) -> Result<Vec<f32>, Error> {
        Ok(data.to_vec())
    }

    fn host_zeroed(&mut self, len: usize) -> Result<Vec<f32>, Error> {
        Ok(vec![0.0; len])
    }

    fn dev_zeroed(&mut self, len: usize) -> Result<Vec<f32>, Error> {
        Ok(vec![0.0; len])
    }

    fn h2d(&mut self, dst: &mut Vec<f32>, src: &Vec<f32>, at: CopyAt) -> Result<(), Error> {
        copy(
            &mut dst[at.dst()],
            &src[at.src()],
            CHECK_HOST,
            &mut self.staging,
        );
        Ok(())
    }

    fn d2h(&mut self, dst: &mut Vec<f32>, src: &Vec<f32>, at: CopyAt) -> Result<(), Error> {
        // On the CPU both directions are the same memcpy.
        self.h2d(dst, src, at)
    }

    fn gemm(
        &mut self,
        m: usize,
        n: usize,
        k: usize,
        a: &Vec<f32>,
        b: &Vec<f32>,
        c: &mut Vec<f32>,
    ) -> Result<(), Error> {
        gemm(m, n, k, a, b, c);
        Ok(())
    }

    fn strided(
        &mut self,
        s: &Strided,
        src: &Vec<f32>,
        dst: &mut Vec<f32>,
        a: f32,
        b: f32,
    ) -> Result<(), Error> {
        #[cfg(test)]
        if let Some(fault) = self.fault {
            if let Some(s) = fault(s) {
                strided(&s, src, dst, a, b);
            }
            return Ok(());
        }
        strided(s, src, dst, a, b);
        Ok(())
    }

    fn attention(
        &mut self,
        shape: &AttentionShape,
        q: &Vec<f32>,
        kv: &Vec<f32>,
        out: &mut Vec<f32>,
    ) -> Result<(), Error> {
        if self.scores.len() < ATTN_BLOCK * shape.kv_len {
            self.scores.resize(ATTN_BLOCK * shape.kv_len, 0.0);
        }
        attention(shape, q, kv, out, &mut self.scores);
        Ok(())
    }

    fn read(&mut self, h: &Vec<f32>) -> Result<Vec<f32>, Error> {
        Ok(h.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_rows_do_not_depend_on_the_row_count() {
        // KVPR's CPU exactness rests on this: recomputing the first l rows gives the same bits
        // as computing all rows.
        for (rows, n, k) in [(148usize, 128usize, 64usize), (37, 33, 17), (300, 96, 200)] {
            let a = data::random_f32(rows * k, 1, 1.0);
            let b = data::random_f32(k * n, 2, 0.1);
            let mut full = vec![0.0; rows * n];
            gemm(rows, n, k, &a, &b, &mut full);
            for l in [1, 2, 7, 8, 9, 16, rows / 2, rows - 1] {
                let mut part = vec![0.0; l * n];
                gemm(l, n, k, &a, &b, &mut part);
                assert!(
                    part.iter()
                        .zip(&full)
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "rows {rows} n {n} k {k}: the first {l} rows differ"
                );
            }
        }
    }

    #[test]
    fn gemm_matches_a_naive_product() {
        let (m, n, k) = (5, 7, 9);
        let a = data::random_f32(m * k, 3, 1.0);
        let b = data::random_f32(k * n, 4, 1.0);
        let mut c = vec![0.0; m * n];
        gemm(m, n, k, &a, &b, &mut c);
        for i in 0..m {
            for j in 0..n {
                let r: f32 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
                assert!((r - c[i * n + j]).abs() < 1e-5);
            }
        }
    }

    #[test]
    fn staged_copy_equals_direct_copy() {
        let src: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let mut a = vec![0u8; src.len()];
        let mut b = vec![0u8; src.len()];
        let mut staging = vec![0u8; 999];
        copy(&mut a, &src, HostMemory::Pageable, &mut staging);
        copy(&mut b, &src, HostMemory::Pinned, &mut staging);
        assert_eq!(a, src);
        assert_eq!(b, src);
    }

    #[test]
    fn causal_attention_of_the_first_query_is_its_first_value() {
        let s = AttentionShape {
            batch: 1,
            q_heads: 2,
            kv_heads: 1,
            q_len: 3,
            kv_len: 3,
            head_dim: 4,
            causal: true,
        };
        let q = data::random_f32(s.q_elems(), 1, 1.0);
        let kv = data::random_f32(s.kv_elems(), 2, 1.0);
        let mut out = vec![0.0; s.q_elems()];
        let mut scores = vec![0.0; ATTN_BLOCK * 3];
        attention(&s, &q, &kv, &mut out, &mut scores);
        // Query 0 sees key 0 only: its output is V[0] exactly (both heads share KV head 0).
        let v0 = &kv[s.v_offset()..s.v_offset() + 4];
        assert_eq!(&out[0..4], v0);
        assert_eq!(&out[4..8], v0);
        let r = crate::kernel::reference_attention(&s, &q, &kv);
        for (a, b) in out.iter().zip(&r) {
            assert!((a - b).abs() < 1e-6);
        }
    }
}
