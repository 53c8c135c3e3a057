//! The CUDA backend: cudarc with the driver, cuBLAS and NVRTC loaded at run time.
//!
//! - Libraries: before any other cudarc call, [`check_libraries`] looks for libcuda, libcublas
//!   and libnvrtc (cudarc panics when a library it calls into is missing); "no device" and an
//!   ordinal out of range are ordinary errors. Every other cudarc failure becomes
//!   [`Error::Cuda`], and a panic inside cudarc (e.g. a symbol missing from an older library)
//!   becomes [`Error::Internal`] through [`guarded`].
//! - Contexts: one primary context per schedule device (device `i` → ordinal
//!   `options.device + i`), with cudarc's event tracking disabled before anything is allocated:
//!   the executor orders streams itself.
//! - Streams: each schedule stream is a CUDA stream of its device, driven by its own host thread
//!   ([`crate::sched::drive`]). Before issuing an op the thread waits (on the host) until the end
//!   events of the op's dependencies on other streams have been *recorded*, then issues
//!   `cuStreamWaitEvent` on them, records the op's start event, issues the op and records its
//!   end event. A pageable copy, which the driver performs synchronously with respect to the
//!   host, therefore blocks only its own stream's thread.
//! - Timing: two timing events per op (pooled across runs). Each run first launches a spin kernel
//!   on the lead stream (a head start, so the host can queue ops before the GPU drains them),
//!   records a reference event, and makes every other stream wait on it; after the run all
//!   streams are synchronised and each op's span is `cuEventElapsedTime(reference, start/end)`.
//!   On further devices the reference is recorded after waiting on device 0's reference, so
//!   their clocks are aligned to within the cross-device signalling latency (microseconds).
//! - Kernels: GEMMs are cuBLAS (`cublasGemmEx`, fp32 accumulation; row-major via the transposed
//!   column-major product); attention, the elementwise/strided-copy kernel and the data fill are
//!   CUDA C compiled once per architecture with NVRTC (a cubin for `sm_XY`; PTX for `compute_XY`
//!   as a fallback).
//! - Host memory: pinned buffers are portable, not write-combined page-locked memory (what
//!   `torch.Tensor.pin_memory()` gives the systems being modelled, and readable by the CPU);
//!   pageable ones are ordinary `Vec<u8>`s, which the driver stages itself.

#![allow(unsafe_code)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use cudarc::cublas::{self, CudaBlas};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaSlice, CudaStream, DevicePtr, DriverError, result as drv, sys,
};
use cudarc::nvrtc::{self, Ptx};

use crate::{BackendKind, DeviceInfo, Error};

mod check;
mod executor;
mod launch;

pub(crate) use check::CheckDevice;
pub(crate) use executor::CudaExecutor;
use launch::{Kernels, compile};

trait OrCuda<T> {
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

fn internal(msg: impl Into<String>) -> Error {
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
fn device_count() -> Result<usize, Error> {
    match drv::init() {
        Ok(()) => {}
        Err(DriverError(sys::CUresult::CUDA_ERROR_NO_DEVICE)) => return Ok(0),
        Err(e) => return Err(e).ctx("cuInit"),
    }
    let n = drv::device::get_count().ctx("cuDeviceGetCount")?;
    Ok(usize::try_from(n).unwrap_or(0))
}

fn check_ordinal(ordinal: usize, count: usize) -> Result<(), Error> {
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
fn driver_version() -> String {
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
            let i = words.iter().position(|w| *w == "Module")?;
            words.get(i + 1).map(|w| w.to_string())
        });
    match module {
        Some(m) => format!("{cuda} (driver {m})"),
        None => cuda,
    }
}

fn dev_ptr<T>(s: &CudaSlice<T>) -> u64 {
    // Event tracking is off in every context this backend creates, so the returned guard
    // records nothing.
    let (p, _guard) = s.device_ptr(s.stream());
    p
}

/// One device: its context, kernels, stream pool and timing events.
struct Dev {
    ctx: Arc<CudaContext>,
    k: Kernels,
    /// Streams reused across runs; schedule stream `j` of this device uses `streams[j]`.
    streams: Vec<Arc<CudaStream>>,
    /// cuBLAS handles, one per pooled stream that runs GEMMs.
    blas: Vec<Option<CudaBlas>>,
    /// This device's reference event of a run.
    reference: CudaEvent,
    /// Two timing events per op of a run on this device (start, end), reused across runs.
    events: Vec<CudaEvent>,
}

impl Dev {
    fn open(ordinal: usize, images: &mut Vec<((i32, i32), Ptx)>) -> Result<Dev, Error> {
        let ctx = CudaContext::new(ordinal)
            .ctx(&format!("creating a context on CUDA device {ordinal}"))?;
        // SAFETY: called before anything is allocated in this context; the executor and the
        // checks order every cross-stream use of a buffer with explicit events or stream
        // synchronisation, and free buffers only when their streams are idle.
        unsafe { ctx.disable_event_tracking() };
        let cc = ctx
            .compute_capability()
            .ctx("reading the compute capability")?;
        let ptx = match images.iter().find(|(c, _)| *c == cc) {
            Some((_, p)) => p.clone(),
            None => {
                let p = compile(cc)?;
                images.push((cc, p.clone()));
                p
            }
        };
        let module = ctx.load_module(ptx).ctx("loading the kernels")?;
        let sms = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .ctx("reading the SM count")?;
        let optin = ctx
            .attribute(
                sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
            )
            .unwrap_or(48 * 1024);
        let k = Kernels::load(&module, sms.max(1) as u32, optin.max(0) as usize)?;
        let reference = ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .ctx("creating an event")?;
        Ok(Dev {
            ctx,
            k,
            streams: Vec::new(),
            blas: Vec::new(),
            reference,
            events: Vec::new(),
        })
    }

    fn info(&self) -> Result<DeviceInfo, Error> {
        Ok(DeviceInfo {
            backend: BackendKind::Cuda,
            name: self.ctx.name().ctx("reading the device name")?,
            driver: driver_version(),
            memory_bytes: self.ctx.total_mem().ok().map(|b| b as u64),
            parallelism: Some(self.k.sms),
        })
    }

    fn ensure_streams(&mut self, n: usize) -> Result<(), Error> {
        while self.streams.len() < n {
            self.streams
                .push(self.ctx.new_stream().ctx("creating a stream")?);
            self.blas.push(None);
        }
        Ok(())
    }

    fn ensure_blas(&mut self, slot: usize) -> Result<(), Error> {
        if self.blas[slot].is_none() {
            self.blas[slot] =
                Some(CudaBlas::new(self.streams[slot].clone()).ctx("creating a cuBLAS handle")?);
        }
        Ok(())
    }

    fn ensure_events(&mut self, n: usize) -> Result<(), Error> {
        while self.events.len() < n {
            self.events.push(
                self.ctx
                    .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
                    .ctx("creating timing events")?,
            );
        }
        Ok(())
    }
}
