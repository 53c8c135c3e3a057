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
#![warn(missing_docs)]

use kvplan_planner::{Schedule, Timeline};

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
    #[error("no CUDA driver found (libcuda could not be loaded); use --backend cpu, or run on a machine with an NVIDIA driver")]
    NoCudaDriver,
    /// The driver loaded but reports no (or too few) devices.
    #[error("no CUDA device{0}")]
    NoCudaDevice(String),
    /// A CUDA library other than the driver (cuBLAS, NVRTC) could not be loaded.
    #[error("CUDA library {0} could not be loaded; install the CUDA toolkit libraries or set LD_LIBRARY_PATH")]
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
    /// Something this backend cannot run (e.g. more devices than present).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// A worker thread failed.
    #[error("executor failure: {0}")]
    Internal(String),
}

/// Runs schedules for real.
pub trait Executor {
    /// The device.
    fn info(&self) -> &DeviceInfo;

    /// Executes every op of `schedule` (after the configured warm-up runs) and returns the
    /// measured span of each op, in seconds from the start of the measured run.
    fn run(&mut self, schedule: &Schedule) -> Result<Timeline, Error>;
}

/// Opens a backend. `cuda` fails with [`Error::NoCudaDriver`] / [`Error::NoCudaDevice`] where
/// there is no GPU — never a panic.
pub fn open(kind: BackendKind, options: &ExecOptions) -> Result<Box<dyn Executor>, Error> {
    let _ = options;
    Err(Error::Unsupported(format!("the {} backend is not built yet", kind.as_str())))
}
