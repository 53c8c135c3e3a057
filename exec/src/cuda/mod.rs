//! The CUDA backend: cudarc with the driver, cuBLAS and NVRTC loaded at run time.
//!
//! - Libraries: before any other cudarc call, [`driver::check_libraries`] looks for libcuda, libcublas
//!   and libnvrtc (cudarc panics when a library it calls into is missing); "no device" and an
//!   ordinal out of range are ordinary errors. Every other cudarc failure becomes
//!   [`crate::Error::Cuda`], and a panic inside cudarc (e.g. a symbol missing from an older library)
//!   becomes [`crate::Error::Internal`] through [`driver::guarded`].
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
//! - The driver boundary: the executor makes every driver call through one trait
//!   ([`api::Driver`]: devices, streams, events, memory, copies, kernel launches) and is generic
//!   over it. `real` implements it on cudarc (what [`crate::open`] uses); `fake` simulates it on
//!   the CPU — a virtual clock per stream, events, allocations, and a record of every call — so
//!   the executor's stream placement, event ordering, buffers, copies and launches are tested
//!   without a GPU (`kvplan_exec::fake`, with the `fake-cuda` feature the crate's tests turn on).
//! - Modules, each using only those listed after it: `check` and `executor` (the two users of a
//!   device), `device` (one device's stream pool and events, on any driver), `fake` (the
//!   simulated driver), `real` (the cudarc driver: a device's context and kernels), `launch`
//!   (kernel compilation and launches, cuBLAS GEMMs), `driver` (library loading, device count,
//!   errors), `api` (the driver trait).

#![allow(unsafe_code)]

mod api;
mod check;
mod device;
mod driver;
mod executor;
#[cfg(feature = "fake-cuda")]
pub mod fake;
mod launch;
mod real;

pub(crate) use check::CheckDevice;
pub(crate) use driver::guarded;
pub(crate) use executor::CudaExecutor;
