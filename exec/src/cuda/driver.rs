//! Loading the CUDA libraries, counting devices, and turning cudarc's failures (errors and
//! panics) into this crate's [`Error`]. The leaf of the CUDA backend: it uses no sibling module.

use std::panic::{AssertUnwindSafe, catch_unwind};

use cudarc::cublas;
use cudarc::driver::{CudaSlice, DevicePtr, DriverError, result as drv, sys};
use cudarc::nvrtc;

use crate::error::Error;

pub(super) trait OrCuda<T> {
    fn ctx(self, what: &str) -> Result<T, Error>;
}

impl<T, E: std::fmt::Display> OrCuda<T> for Result<T, E> {
    fn ctx(self, what: &str) -> Result<T, Error> {
        self.map_err(|e| Error::Cuda {
            context: what.to_string(),
            message: e.to_string(),
        })
    }
}

pub(super) fn internal(msg: impl Into<String>) -> Error {
    Error::Internal(msg.into())
}

/// Runs `f`, turning a panic inside cudarc into [`Error::Internal`].
pub(crate) fn guarded<T>(f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| {
        let msg = p
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(internal(format!("the CUDA backend panicked: {msg}")))
    })
}

/// Checks that libcuda, libcublas and libnvrtc can be loaded. Must precede every other cudarc
/// call: cudarc panics when it calls into a library it cannot load.
pub(crate) fn check_libraries() -> Result<(), Error> {
    // SAFETY: only tries to dlopen the driver library under its usual names and closes it again;
    // nothing in it is called.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::NoCudaDriver);
    }
    // SAFETY: as above, for libcublas.
    if !unsafe { cublas::sys::is_culib_present() } {
        return Err(Error::MissingLibrary("cuBLAS (libcublas)"));
    }
    // SAFETY: as above, for libnvrtc.
    if !unsafe { nvrtc::sys::is_culib_present() } {
        return Err(Error::MissingLibrary("NVRTC (libnvrtc)"));
    }
    Ok(())
}

/// Initialises the driver and counts devices (0 when the driver reports none).
pub(super) fn device_count() -> Result<usize, Error> {
    match drv::init() {
        Ok(()) => {}
        Err(DriverError(sys::CUresult::CUDA_ERROR_NO_DEVICE)) => return Ok(0),
        Err(e) => return Err(e).ctx("cuInit"),
    }
    let n = drv::device::get_count().ctx("cuDeviceGetCount")?;
    Ok(usize::try_from(n).unwrap_or(0))
}

pub(super) fn check_ordinal(ordinal: usize, count: usize) -> Result<(), Error> {
    if count == 0 {
        return Err(Error::NoCudaDevice(
            "s: the driver loaded but reports none".into(),
        ));
    }
    if ordinal >= count {
        return Err(Error::NoCudaDevice(format!(
            " with ordinal {ordinal} (the driver reports {count})"
        )));
    }
    Ok(())
}

/// `CUDA 13.0 (driver 580.65.06)`.
pub(super) fn driver_version() -> String {
    let mut v: i32 = 0;
    // SAFETY: cuDriverGetVersion writes one int through a valid pointer.
    let cuda = match unsafe { sys::cuDriverGetVersion(&mut v) }.result() {
        Ok(()) => format!("CUDA {}.{}", v / 1000, (v % 1000) / 10),
        Err(_) => "CUDA (unknown version)".to_string(),
    };
    let module = std::fs::read_to_string("/proc/driver/nvidia/version")
        .ok()
        .and_then(|t| {
            let line = t.lines().next()?.to_string();
            let words: Vec<&str> = line.split_whitespace().collect();
            // "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05 ..." or
            // "... Open Kernel Module for x86_64  580.159.04 ...": the first number after "Module".
            let i = words.iter().position(|w| *w == "Module")?;
            words[i + 1..]
                .iter()
                .find(|w| w.starts_with(|c: char| c.is_ascii_digit()))
                .map(|w| w.to_string())
        });
    match module {
        Some(m) => format!("{cuda} (driver {m})"),
        None => cuda,
    }
}

pub(super) fn dev_ptr<T>(s: &CudaSlice<T>) -> u64 {
    // Event tracking is off in every context this backend creates, so the returned guard
    // records nothing.
    let (p, _guard) = s.device_ptr(s.stream());
    p
}
