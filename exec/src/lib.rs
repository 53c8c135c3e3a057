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
//! Modules, each using only modules listed after it (and this root's types): [`check`] (runs the
//! correctness checks), `cpu` and `cuda` (the backends; `fake`, with the `fake-cuda` feature, is
//! the CUDA executor on a simulated driver, for tests without a GPU), `sched` (schedule scan, stream threads),
//! `data` (seeded inputs), `kernel` (the kernel types the backends and the checks share: attention
//! shape, strided copy, the checks' device interface, the f64 reference attention).
//!
//! Besides timing, [`check`] verifies KVPR's central claim on a backend's real kernels: attention
//! over partially recomputed K,V equals attention over fully transferred K,V.
#![warn(missing_docs)]
#![deny(unsafe_code)]

use kvplan_vocab::{Schedule, Timeline};

pub mod check;
mod cpu;
mod cuda;
mod data;
mod kernel;
mod sched;

pub use check::{
    Accuracy, AttentionCase, CUDA_FP16_ATOL, Equivalence, attention_accuracy,
    kvpr_attention_equivalence,
};
#[cfg(feature = "fake-cuda")]
pub use cuda::fake;
pub use kernel::AttentionShape;

/// Bytes of this host's RAM (`MemTotal` in `/proc/meminfo`), if the OS says (Linux).
pub fn host_ram_bytes() -> Option<u64> {
    sched::host_total_bytes()
}

/// Which backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// Host CPU, real arithmetic in f32.
    Cpu,
    /// NVIDIA GPU through cudarc.
    Cuda,
}

impl BackendKind {
    /// `cpu` or `cuda`.
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Cpu => "cpu",
            BackendKind::Cuda => "cuda",
        }
    }

    /// Parses `cpu` / `cuda`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "cpu" => Some(BackendKind::Cpu),
            "cuda" => Some(BackendKind::Cuda),
            _ => None,
        }
    }
}

/// What a backend runs on (recorded as calibration provenance).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Backend.
    pub backend: BackendKind,
    /// Device name, e.g. `NVIDIA H100 80GB HBM3` or the CPU model.
    pub name: String,
    /// Driver version (CUDA) or kernel/OS description (CPU).
    pub driver: String,
    /// Device memory in bytes (GPU) or host RAM (CPU), if known.
    pub memory_bytes: Option<u64>,
    /// Worker threads (CPU) or SMs (CUDA), if known.
    pub parallelism: Option<u32>,
}

/// Executor options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOptions {
    /// CUDA device ordinal of schedule device 0 (schedule device `i` maps to `device + i`).
    pub device: usize,
    /// Seed of the synthetic data.
    pub seed: u64,
    /// Untimed runs of the whole schedule before the measured one (warms caches, JIT, clocks).
    pub warmup_runs: u32,
}

impl Default for ExecOptions {
    fn default() -> Self {
        ExecOptions {
            device: 0,
            seed: 0x6b76_706c_616e,
            warmup_runs: 1,
        }
    }
}

/// Executor errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `libcuda` could not be loaded.
    #[error(
        "no CUDA driver found (libcuda could not be loaded); use `backend` cpu, or run on a machine with an NVIDIA driver"
    )]
    NoCudaDriver,
    /// The driver loaded but reports no (or too few) devices.
    #[error("no CUDA device{0}")]
    NoCudaDevice(String),
    /// A CUDA library other than the driver (cuBLAS, NVRTC) could not be loaded.
    #[error(
        "CUDA library {0} could not be loaded; install the CUDA toolkit libraries or set LD_LIBRARY_PATH"
    )]
    MissingLibrary(&'static str),
    /// A CUDA call failed.
    #[error("CUDA error in {context}: {message}")]
    Cuda {
        /// What was being done.
        context: String,
        /// The driver's message.
        message: String,
    },
    /// The schedule's buffers do not fit the device.
    #[error("the schedule needs {need} bytes of {what} but {have} are available")]
    OutOfMemory {
        /// Device or host memory.
        what: &'static str,
        /// Bytes needed.
        need: u64,
        /// Bytes available.
        have: u64,
    },
    /// Host memory that could not be allocated (a memory limit such as `ulimit -v`, or not
    /// enough memory), found when allocating rather than by the check before it.
    #[error(
        "cannot allocate {bytes} bytes of host memory for the schedule's buffers (a memory limit, or not enough memory)"
    )]
    AllocFailed {
        /// Bytes asked for.
        bytes: u64,
    },
    /// A worker thread could not be started (a thread or memory limit).
    #[error("cannot start a stream worker thread: {0}")]
    Spawn(std::io::Error),
    /// Something this backend cannot run (e.g. more devices than present).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A worker thread failed.
    #[error("executor failure: {0}")]
    Internal(String),
    /// The schedule breaks an IR rule (only possible for hand-made or deserialised schedules).
    #[error("invalid schedule: {0}")]
    InvalidSchedule(#[from] kvplan_vocab::Error),
    /// An argument of a correctness check is out of range.
    #[error("invalid input: {0}")]
    InvalidInput(String),
}

/// Runs schedules for real.
pub trait Executor {
    /// The device.
    fn info(&self) -> &DeviceInfo;

    /// Executes every op of `schedule` (after the configured warm-up runs) and returns the
    /// measured span of each op, in seconds from the start of the measured run.
    fn run(&mut self, schedule: &Schedule) -> Result<Timeline, Error>;

    /// [`run`](Self::run), telling `progress` how many ops have run (warm-up runs included).
    /// Backends that cannot say run as [`run`](Self::run) and report nothing.
    fn run_with(
        &mut self,
        schedule: &Schedule,
        progress: &dyn kvplan_vocab::Progress,
    ) -> Result<Timeline, Error> {
        let _ = progress;
        self.run(schedule)
    }

    /// Host seconds of one synchronisation with a device that has nothing left to run, the
    /// median of `reps` (what a loop that waits for the device at each step pays beyond the
    /// work): on CUDA a `cuStreamSynchronize` of an idle stream; on the CPU backend, where the
    /// host runs the ops itself, a stream's wait for an op that has finished.
    fn idle_sync_s(&mut self, reps: u32) -> Result<f64, Error>;
}

/// Opens a backend. `cuda` fails with [`Error::NoCudaDriver`] / [`Error::NoCudaDevice`] where
/// there is no GPU — never a panic.
pub fn open(kind: BackendKind, options: &ExecOptions) -> Result<Box<dyn Executor>, Error> {
    match kind {
        BackendKind::Cpu => Ok(Box::new(cpu::CpuExecutor::new(options))),
        BackendKind::Cuda => Ok(Box::new(cuda::CudaExecutor::open(options)?)),
    }
}
