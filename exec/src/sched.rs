//! Backend-independent execution machinery.
//!
//! - [`needs`]: one scan of a schedule sizes the scratch buffers of every stream (per role, per
//!   element type), so a run allocates once and every op touches buffers of its own real size.
//! - [`drive`]: one OS thread per stream walks that stream's ops in FIFO order and, before each
//!   op, waits until the op's dependencies have been marked in a shared [`Progress`]. The CPU
//!   backend marks an op when it has *finished*; the CUDA backend when its end event has been
//!   *recorded* (the device then orders the streams with events).

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::Instant;

use kvplan_vocab::DType;
use kvplan_vocab::schedule::{HostMemory, OpId, OpKind, Schedule, StreamId};
use kvplan_vocab::timeline::Span;

use crate::error::Error;
use crate::kernel::AttentionShape;

/// Largest GEMM operands of one element type on one stream, in elements.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GemmNeed {
    /// `batch * m * k`.
    pub a: u64,
    /// `batch * k * n`.
    pub b: u64,
    /// `batch * m * n`.
    pub c: u64,
    /// Largest inner dimension (scales the synthetic `B` like `1/sqrt(k)`).
    pub k_max: u64,
}

/// Largest attention operands of one element type on one stream, in elements.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct AttnNeed {
    /// Q (and O): `q_len * batch * q_heads * head_dim`.
    pub q: u64,
    /// K and V: `kv_len * 2 * batch * kv_heads * head_dim`.
    pub kv: u64,
    /// Backend workspace in f32 elements (CUDA's split-K partials).
    pub ws: u64,
    /// Longest key sequence (the CPU's score row).
    pub kv_len: u64,
}

/// What one stream's ops need.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct StreamNeeds {
    /// Largest copy in bytes (host and device side of copies; source and destination of peer sends).
    pub copy: u64,
    /// Largest copy from or to pinned host memory.
    pub pinned: u64,
    /// Largest copy from or to pageable host memory.
    pub pageable: u64,
    /// GEMM operands per element type ([`DType::index`]).
    pub gemm: [GemmNeed; DType::COUNT],
    /// Attention operands per element type ([`DType::index`]).
    pub attn: [AttnNeed; DType::COUNT],
    /// Largest elementwise op in bytes (it reads half and writes half).
    pub elementwise: u64,
}

fn prod(op: usize, xs: &[u64]) -> Result<u64, Error> {
    xs.iter()
        .try_fold(1u64, |acc, &x| acc.checked_mul(x))
        .ok_or_else(|| Error::Unsupported(format!("op {op}: its sizes overflow 64 bits")))
}

/// The attention shape of an op (sizes as `usize`), checked for GQA consistency.
pub(crate) fn attention_shape(op: usize, kind: &OpKind) -> Result<Option<AttentionShape>, Error> {
    let OpKind::Attention {
        batch,
        q_len,
        kv_len,
        causal,
        ..
    } = *kind
    else {
        return Ok(None);
    };
    let heads = kind.attention_heads().expect("an attention op has heads");
    let s = AttentionShape {
        batch: batch as usize,
        q_heads: usize::from(heads.q_heads),
        kv_heads: usize::from(heads.kv_heads),
        q_len: q_len as usize,
        kv_len: kv_len as usize,
        head_dim: usize::from(heads.head_dim),
        causal,
    };
    if s.kv_heads == 0 || !s.q_heads.is_multiple_of(s.kv_heads) {
        return Err(Error::Unsupported(format!(
            "op {op}: attention with {} query heads and {} key/value heads (the query heads must be a multiple of the key/value heads)",
            s.q_heads, s.kv_heads
        )));
    }
    Ok(Some(s))
}

/// Scans `schedule` once and returns the scratch needs of each stream. `workspace(stream, shape)`
/// gives the backend's attention workspace (f32 elements) for a shape on a stream.
pub(crate) fn needs(
    schedule: &Schedule,
    workspace: impl Fn(usize, &AttentionShape) -> u64,
) -> Result<Vec<StreamNeeds>, Error> {
    let mut out = vec![StreamNeeds::default(); schedule.streams().len()];
    for (i, op) in schedule.ops().iter().enumerate() {
        let n = &mut out[op.stream.index()];
        match op.kind {
            OpKind::H2D { bytes, host, .. } | OpKind::D2H { bytes, host, .. } => {
                n.copy = n.copy.max(bytes);
                match host {
                    HostMemory::Pinned => n.pinned = n.pinned.max(bytes),
                    HostMemory::Pageable => n.pageable = n.pageable.max(bytes),
                }
            }
            OpKind::PeerSend { bytes } => n.copy = n.copy.max(bytes),
            OpKind::Gemm {
                m,
                n: cols,
                k,
                batch,
                dtype,
                ..
            } => {
                let (m, cols, k, batch) = (
                    u64::from(m),
                    u64::from(cols),
                    u64::from(k),
                    u64::from(batch),
                );
                let g = &mut n.gemm[dtype.index()];
                g.a = g.a.max(prod(i, &[batch, m, k])?);
                g.b = g.b.max(prod(i, &[batch, k, cols])?);
                g.c = g.c.max(prod(i, &[batch, m, cols])?);
                g.k_max = g.k_max.max(k);
            }
            OpKind::Attention { dtype, .. } => {
                let s = attention_shape(i, &op.kind)?.expect("an attention op");
                let a = &mut n.attn[dtype.index()];
                let (b, hq, hkv, lq, lkv, d) = (
                    s.batch as u64,
                    s.q_heads as u64,
                    s.kv_heads as u64,
                    s.q_len as u64,
                    s.kv_len as u64,
                    s.head_dim as u64,
                );
                a.q = a.q.max(prod(i, &[lq, b, hq, d])?);
                a.kv = a.kv.max(prod(i, &[lkv, 2, b, hkv, d])?);
                a.ws = a.ws.max(workspace(op.stream.index(), &s));
                a.kv_len = a.kv_len.max(lkv);
            }
            OpKind::Elementwise { bytes, .. } => n.elementwise = n.elementwise.max(bytes),
            OpKind::AllReduce { ranks, .. } => {
                return Err(Error::Unsupported(format!(
                    "op {i}: an all-reduce across {ranks} tensor-parallel GPUs; the executor runs \
                     single-GPU schedules (plan with tensor parallelism 1)"
                )));
            }
            OpKind::BatchAttention { batch, .. } => {
                return Err(Error::Unsupported(format!(
                    "op {i}: one attention kernel over a ragged batch of {} sequences (a serving \
                     schedule); the executor runs attention of uniform batches only (execute a \
                     planner's schedule)",
                    batch.seqs
                )));
            }
        }
    }
    Ok(out)
}

/// Ops marked so far in one run, shared by the stream threads.
///
/// Waiting spins briefly (the dependency is often about to finish on the other core), then
/// yields, then blocks on a condition variable; marking wakes the blocked threads only when there
/// are some, so a run without contention makes no system call per op.
pub(crate) struct Progress {
    done: Vec<AtomicBool>,
    waiters: AtomicUsize,
    lock: Mutex<()>,
    cv: Condvar,
    aborted: AtomicBool,
}

/// Spin iterations before yielding, and yields before blocking.
const SPINS: u32 = 64;
const YIELDS: u32 = 16;

impl Progress {
    /// Nothing marked, for `ops` ops.
    pub fn new(ops: usize) -> Self {
        Progress {
            done: (0..ops).map(|_| AtomicBool::new(false)).collect(),
            waiters: AtomicUsize::new(0),
            lock: Mutex::new(()),
            cv: Condvar::new(),
            aborted: AtomicBool::new(false),
        }
    }

    /// Clears every mark (between runs; no thread may be using it).
    pub fn reset(&mut self) {
        for d in &mut self.done {
            *d.get_mut() = false;
        }
        *self.aborted.get_mut() = false;
    }

    /// True once [`Progress::abort`] has been called.
    pub fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }

    /// Waits until `op` is marked; false if the run was aborted first.
    pub fn wait(&self, op: usize) -> bool {
        let flag = &self.done[op];
        if flag.load(Ordering::Acquire) {
            return true;
        }
        for i in 0..SPINS + YIELDS {
            if i < SPINS {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
            if flag.load(Ordering::Acquire) {
                return true;
            }
        }
        let mut guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.waiters.fetch_add(1, Ordering::SeqCst);
        let ok = loop {
            if flag.load(Ordering::SeqCst) {
                break true;
            }
            if self.aborted.load(Ordering::SeqCst) {
                break false;
            }
            guard = self.cv.wait(guard).unwrap_or_else(PoisonError::into_inner);
        };
        self.waiters.fetch_sub(1, Ordering::SeqCst);
        ok
    }

    /// Marks `op` and wakes the threads waiting for it.
    pub fn mark(&self, op: usize) {
        self.done[op].store(true, Ordering::SeqCst);
        // A waiter registers under the lock before its last check of the flag, so either it sees
        // the flag or this load sees it registered (both are SeqCst).
        if self.waiters.load(Ordering::SeqCst) > 0 {
            let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
            self.cv.notify_all();
        }
    }

    /// Stops the run: every waiter returns false.
    pub fn abort(&self) {
        self.aborted.store(true, Ordering::SeqCst);
        let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.cv.notify_all();
    }
}

/// Aborts the run if its thread unwinds, so no other stream waits forever.
struct AbortOnPanic<'a>(&'a Progress);

impl Drop for AbortOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.abort();
        }
    }
}

/// The per-stream side of a backend.
pub(crate) trait Worker: Send {
    /// The stream this worker runs.
    fn stream(&self) -> StreamId;

    /// Called on the worker's thread before the run starts (e.g. to bind a CUDA context).
    fn begin(&mut self) -> Result<(), Error> {
        Ok(())
    }

    /// Runs (or issues) one op; its dependencies are marked.
    fn op(&mut self, op: OpId) -> Result<(), Error>;
}

fn panic_text(p: &(dyn Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Runs every worker on its own thread; all start together (after a barrier). Returns the first
/// error; a panic in a worker becomes [`Error::Internal`].
pub(crate) fn drive<W: Worker>(
    schedule: &Schedule,
    progress: &Progress,
    workers: &mut [W],
) -> Result<(), Error> {
    if workers.is_empty() {
        return Ok(());
    }
    let barrier = Gate::new(workers.len());
    std::thread::scope(|scope| {
        let mut spawn_failed = None;
        let handles: Vec<_> = workers
            .iter_mut()
            .map_while(|w| {
                let barrier = &barrier;
                let spawned = std::thread::Builder::new().spawn_scoped(scope, move || {
                    let _guard = AbortOnPanic(progress);
                    // Every thread reaches the barrier, even when `begin` fails or panics.
                    let began = catch_unwind(AssertUnwindSafe(|| w.begin())).unwrap_or_else(|p| {
                        Err(Error::Internal(format!(
                            "stream worker failed to start: {}",
                            panic_text(p.as_ref())
                        )))
                    });
                    barrier.wait();
                    let result = began.and_then(|()| {
                        let mut cur = schedule.first_in_stream(w.stream());
                        while let Some(op) = cur {
                            for d in schedule.deps(op) {
                                if !progress.wait(d.index()) {
                                    return Ok(());
                                }
                            }
                            if progress.is_aborted() {
                                return Ok(());
                            }
                            w.op(op)?;
                            progress.mark(op.index());
                            cur = schedule.next_in_stream(op);
                        }
                        Ok(())
                    });
                    if result.is_err() {
                        progress.abort();
                    }
                    result
                });
                match spawned {
                    Ok(h) => Some(h),
                    Err(e) => {
                        // The threads started return at once: the gate opens, the run aborts.
                        spawn_failed = Some(e);
                        progress.abort();
                        barrier.open();
                        None
                    }
                }
            })
            .collect();
        let mut first: Result<(), Error> = match spawn_failed {
            Some(e) => Err(Error::Spawn(e)),
            None => Ok(()),
        };
        for h in handles {
            let r = h.join().unwrap_or_else(|p| {
                Err(Error::Internal(format!(
                    "stream worker panicked: {}",
                    panic_text(p.as_ref())
                )))
            });
            if first.is_ok() {
                first = r;
            }
        }
        first
    })
}

/// A barrier that can also be opened early (a worker thread that could not be started).
struct Gate {
    state: Mutex<(usize, bool)>,
    cv: Condvar,
    n: usize,
}

impl Gate {
    fn new(n: usize) -> Self {
        Gate {
            state: Mutex::new((0, false)),
            cv: Condvar::new(),
            n,
        }
    }

    /// Waits until `n` threads wait, or the gate is opened.
    fn wait(&self) {
        let mut g = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        g.0 += 1;
        if g.0 >= self.n {
            g.1 = true;
            self.cv.notify_all();
        }
        while !g.1 {
            g = self.cv.wait(g).unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Lets every waiter through.
    fn open(&self) {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).1 = true;
        self.cv.notify_all();
    }
}

/// Spans of `n` ops from the `(op, start, end)` instants each worker recorded, in seconds from
/// the earliest start; an op no worker recorded (a run that stopped early) is `0..0`. Empty
/// when nothing was recorded.
pub(crate) fn spans_from<'a>(
    n: usize,
    times: impl Iterator<Item = &'a [(u32, Instant, Instant)]> + Clone,
) -> Vec<Span> {
    let Some(t0) = times.clone().flat_map(|t| t.iter().map(|x| x.1)).min() else {
        return Vec::new();
    };
    let mut spans = vec![
        Span {
            start: 0.0,
            end: 0.0
        };
        n
    ];
    for &(op, s, e) in times.flatten() {
        spans[op as usize] = Span {
            start: s.duration_since(t0).as_secs_f64(),
            end: e.duration_since(t0).as_secs_f64(),
        };
    }
    spans
}

/// The median of `reps` timings of `f` (host seconds), `f`'s first error stopping it.
pub(crate) fn median_time(
    reps: u32,
    mut f: impl FnMut() -> Result<(), Error>,
) -> Result<f64, Error> {
    let mut t = Vec::with_capacity(reps.max(1) as usize);
    for _ in 0..reps.max(1) {
        let start = Instant::now();
        f()?;
        t.push(start.elapsed().as_secs_f64());
    }
    t.sort_by(f64::total_cmp);
    Ok(t[t.len() / 2])
}

/// Bytes of host memory the kernel reports as available (`MemAvailable`), if readable.
pub(crate) fn host_available_bytes() -> Option<u64> {
    meminfo_kib("MemAvailable:").map(|k| k.saturating_mul(1024))
}

/// Bytes of host memory (`MemTotal`), if readable.
pub(crate) fn host_total_bytes() -> Option<u64> {
    meminfo_kib("MemTotal:").map(|k| k.saturating_mul(1024))
}

fn meminfo_kib(key: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvplan_vocab::ScheduleBuilder;
    use kvplan_vocab::schedule::{Payload, Phase, StreamKind, Tag};

    const TAG: Tag = Tag {
        step: 0,
        layer: 0,
        batch: 0,
        group: Tag::NONE,
        phase: Phase::Decode,
    };

    #[test]
    fn needs_take_the_largest_op_per_stream_and_dtype() {
        let mut b = ScheduleBuilder::new();
        let c = b.stream(0, StreamKind::Compute, "c");
        let h = b.stream(0, StreamKind::H2D, "h");
        let l = b.label("x");
        let gemm = |m, n, k, dtype| OpKind::Gemm {
            m,
            n,
            k,
            batch: 1,
            dtype,
            weights: kvplan_vocab::WeightFormat::Dense,
        };
        b.push(gemm(2, 3, 4, DType::Fp16), c, l, TAG, &[]);
        b.push(gemm(5, 1, 2, DType::Fp16), c, l, TAG, &[]);
        b.push(gemm(1, 1, 1, DType::Fp32), c, l, TAG, &[]);
        for (bytes, host) in [(10, HostMemory::Pinned), (30, HostMemory::Pageable)] {
            b.push(
                OpKind::H2D {
                    bytes,
                    payload: Payload::Cache,
                    host,
                },
                h,
                l,
                TAG,
                &[],
            );
        }
        let n = needs(&b.build(), |_, _| 0).unwrap();
        assert_eq!(
            n[0].gemm[0],
            GemmNeed {
                a: 10,
                b: 12,
                c: 6,
                k_max: 4
            }
        );
        assert_eq!(n[0].gemm[2].c, 1);
        assert_eq!(n[0].gemm[1], GemmNeed::default());
        assert_eq!((n[1].copy, n[1].pinned, n[1].pageable), (30, 10, 30));
    }

    #[test]
    fn overflowing_sizes_are_an_error_not_a_panic() {
        let mut b = ScheduleBuilder::new();
        let c = b.stream(0, StreamKind::Compute, "c");
        let l = b.label("x");
        b.push(
            OpKind::Gemm {
                m: u32::MAX,
                n: u32::MAX,
                k: u32::MAX,
                batch: u32::MAX,
                dtype: DType::Fp16,
                weights: kvplan_vocab::WeightFormat::Dense,
            },
            c,
            l,
            TAG,
            &[],
        );
        assert!(matches!(
            needs(&b.build(), |_, _| 0),
            Err(Error::Unsupported(_))
        ));
    }

    #[test]
    fn batched_attention_is_refused_with_a_typed_error() {
        let mut b = ScheduleBuilder::new();
        let c = b.stream(0, StreamKind::Compute, "c");
        let l = b.label("attention");
        let mut batch = kvplan_vocab::AttentionBatch::new();
        batch.add(1, 100);
        batch.add(1, 300);
        b.push(
            OpKind::BatchAttention {
                batch,
                q_heads: 32,
                kv_heads: 8,
                head_dim: 128,
                dtype: DType::Fp16,
                kv: kvplan_vocab::KvCacheDtype::Auto,
            },
            c,
            l,
            TAG,
            &[],
        );
        match needs(&b.build(), |_, _| 0) {
            Err(Error::Unsupported(m)) => {
                assert!(m.contains("op 0") && m.contains("2 sequences"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn progress_wakes_a_blocked_waiter() {
        let p = Progress::new(2);
        std::thread::scope(|s| {
            let h = s.spawn(|| p.wait(1));
            std::thread::sleep(std::time::Duration::from_millis(20));
            p.mark(1);
            assert!(h.join().unwrap());
        });
        let q = Progress::new(1);
        std::thread::scope(|s| {
            let h = s.spawn(|| q.wait(0));
            std::thread::sleep(std::time::Duration::from_millis(20));
            q.abort();
            assert!(!h.join().unwrap());
        });
    }
}
