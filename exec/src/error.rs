//! Executor errors.

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
