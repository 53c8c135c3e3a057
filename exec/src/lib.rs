//! kvplan's executor: lowers a [`Schedule`] onto real hardware and measures it, returning the
//! same [`Timeline`] type the simulator predicts, so one comparator serves both.
//!
//! Two backends behind one trait, with the same semantics as the simulator's model: each stream
//! is a FIFO queue, an op starts when it heads its stream and its dependencies have finished.
//! - `cuda`: cudarc with the driver, cuBLAS and NVRTC loaded at run time (the crate builds on
//!   machines without CUDA); streams are CUDA streams, cross-stream dependencies are events, op
//!   times come from event pairs.
//! - `cpu`: one thread per stream on host memory with real arithmetic, so the whole
//!   plan → execute → compare path runs anywhere.
//!
//! Inputs are synthetic (seeded random) at the model's real shapes: timing does not depend on
//! values, and no model download is needed.
//!
//! A run: one scan of the schedule sizes each stream's scratch buffers (per role and element
//! type; data does not flow between ops, every op touches buffers of its own real size); they
//! are allocated and filled before anything is timed and kept across calls. Then
//! `warmup_runs` untimed runs of the whole schedule, then the measured one. Spans are seconds
//! from the start of the measured run (CPU: the first op's start; CUDA: a reference event that
//! every stream waits for). `unsafe` lives in the CUDA module and in the one call into
//! matrixmultiply's sgemm (`cpu.rs`), each block with its `SAFETY` argument.
//!
//! ```
//! use kvplan_exec::{BackendKind, ExecOptions};
//! use kvplan_vocab::ScheduleBuilder;
//! use kvplan_vocab::schedule::{ElemKind, HostMemory, OpKind, Payload, Phase, StreamKind, Tag};
//!
//! let mut b = ScheduleBuilder::new();
//! let h2d = b.stream(0, StreamKind::H2D, "gpu0.h2d");
//! let compute = b.stream(0, StreamKind::Compute, "gpu0.compute");
//! let label = b.label("op");
//! let tag = Tag { step: 1, layer: 0, batch: 0, group: Tag::NONE, phase: Phase::Decode };
//! let load = OpKind::H2D { bytes: 1 << 20, payload: Payload::Cache, host: HostMemory::Pinned };
//! let copy = b.push(load, h2d, label, tag, &[]);
//! b.push(OpKind::Elementwise { kind: ElemKind::Other, bytes: 1 << 16, rows: 0 }, compute, label, tag, &[Some(copy)]);
//! let schedule = b.build();
//!
//! let mut exec = kvplan_exec::open(BackendKind::Cpu, &ExecOptions::default())?;
//! let timeline = exec.run(&schedule)?;
//! assert_eq!(timeline.spans.len(), 2);
//! assert!(timeline.spans[1].start >= timeline.spans[0].end);
//! # Ok::<(), kvplan_exec::Error>(())
//! ```
//!
//! Modules, each using only modules listed after it: [`check`] (runs the correctness checks),
//! `cpu` and `cuda` (the backends; `fake`, with the `fake-cuda` feature, is the CUDA executor on
//! a simulated driver, for tests without a GPU), `sched` (schedule scan, stream threads), `data`
//! (seeded inputs), `kernel` (the kernel types the backends and the checks share: attention
//! shape, strided copy, the checks' device interface, the f64 reference attention), `backend`
//! (the backend kind, device, options and the [`Executor`] trait), `error`. This root only
//! names them and opens a backend.
//!
//! Besides timing, [`check`] verifies KVPR's central claim on a backend's real kernels: attention
//! over partially recomputed K,V equals attention over fully transferred K,V.
#![warn(missing_docs)]
#![deny(unsafe_code)]

mod backend;
pub mod check;
mod cpu;
mod cuda;
mod data;
mod error;
mod kernel;
mod sched;

pub use backend::{BackendKind, DeviceInfo, ExecOptions, Executor};
pub use check::{
    Accuracy, AttentionCase, CUDA_FP16_ATOL, Equivalence, attention_accuracy,
    kvpr_attention_equivalence,
};
#[cfg(feature = "fake-cuda")]
pub use cuda::fake;
pub use error::Error;
pub use kernel::AttentionShape;

/// Bytes of this host's RAM (`MemTotal` in `/proc/meminfo`), if the OS says (Linux).
pub fn host_ram_bytes() -> Option<u64> {
    sched::host_total_bytes()
}

/// Opens a backend. `cuda` fails with [`Error::NoCudaDriver`] / [`Error::NoCudaDevice`] where
/// there is no GPU — never a panic.
pub fn open(kind: BackendKind, options: &ExecOptions) -> Result<Box<dyn Executor>, Error> {
    match kind {
        BackendKind::Cpu => Ok(Box::new(cpu::CpuExecutor::new(options))),
        BackendKind::Cuda => Ok(Box::new(cuda::CudaExecutor::open(options)?)),
    }
}
