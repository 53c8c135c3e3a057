//! What every backend is: its kind, the device it runs on, the options it opens with, and the
//! [`Executor`] trait it implements.

use kvplan_vocab::{Schedule, Timeline};

use crate::error::Error;

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
