//! The driver boundary: every call the CUDA executor makes into a driver — devices, streams,
//! events, memory, copies and kernel launches — as one trait. Two implementations: `real`
//! (cudarc: the CUDA driver, cuBLAS and NVRTC loaded at run time) and `fake` (streams and events
//! simulated on the CPU with virtual clocks, for tests without a GPU). The executor and its
//! device pools are generic over it; `kvplan_exec::open` gives the real one.
//!
//! Handles are the driver's own types. Device memory is addressed by raw device pointers (`u64`)
//! and host memory by raw addresses (`usize`), as the executor hands them to CUDA; the calls that
//! take them are `unsafe`, their callers vouching for the allocations.

use kvplan_vocab::DType;

use crate::backend::DeviceInfo;
use crate::error::Error;
use crate::kernel::{AttentionShape, Strided};

/// The driver calls of the CUDA executor.
pub(crate) trait Driver: Sync {
    /// One device: its context and loaded kernels.
    type Device: Send + Sync;
    /// A stream of one device.
    type Stream: Send + Sync;
    /// A timing event of one device.
    type Event: Send + Sync;
    /// A GEMM handle bound to one stream.
    type Blas: Send + Sync;
    /// A device allocation; dropping it frees it, ordered on the stream it was allocated on.
    type Buffer: Send + Sync;
    /// Portable page-locked host memory.
    type Pinned: Send + Sync;

    // --- devices ---

    /// Devices the driver reports (0 when it reports none).
    fn device_count(&mut self) -> Result<usize, Error>;
    /// Opens device `ordinal`: creates its context (stream synchronisation left to the caller)
    /// and loads the kernels.
    fn open(&mut self, ordinal: usize) -> Result<Self::Device, Error>;
    /// What the device is.
    fn info(&self, d: &Self::Device) -> Result<DeviceInfo, Error>;
    /// Its streaming multiprocessors (sizes the attention workspace).
    fn sms(&self, d: &Self::Device) -> u32;
    /// Device memory free now, in bytes.
    fn free_memory(&self, d: &Self::Device) -> Result<u64, Error>;
    /// Lets `from` access `to`'s memory where the hardware can (a no-op where it cannot).
    fn enable_peer(&self, from: &Self::Device, to: &Self::Device) -> Result<(), Error>;
    /// Makes the device's context current on the calling thread.
    fn bind(&self, d: &Self::Device) -> Result<(), Error>;
    /// A deferred (asynchronous) error of the device, if any.
    fn check_err(&self, d: &Self::Device) -> Result<(), Error>;

    // --- streams and events ---

    /// A new stream of `d`.
    fn new_stream(&self, d: &Self::Device) -> Result<Self::Stream, Error>;
    /// A GEMM handle that launches on `s`.
    fn new_blas(&self, d: &Self::Device, s: &Self::Stream) -> Result<Self::Blas, Error>;
    /// A new timing event of `d`.
    fn new_event(&self, d: &Self::Device) -> Result<Self::Event, Error>;
    /// Records `e` on `s` (a stream of the event's device); a later record replaces it.
    fn record(&self, e: &Self::Event, s: &Self::Stream) -> Result<(), Error>;
    /// Makes `s`'s later work wait for `e`'s latest record (at the time of this call).
    fn wait(&self, s: &Self::Stream, e: &Self::Event) -> Result<(), Error>;
    /// Blocks the calling thread until `s` has done all its work.
    fn synchronize(&self, s: &Self::Stream) -> Result<(), Error>;
    /// Milliseconds from `from` to `to`, both recorded and completed.
    fn elapsed_ms(&self, from: &Self::Event, to: &Self::Event) -> Result<f32, Error>;

    // --- memory ---

    /// `bytes` of uninitialised device memory of `d`, allocated on (and later freed on) `s`.
    fn alloc(&self, d: &Self::Device, s: &Self::Stream, bytes: u64) -> Result<Self::Buffer, Error>;
    /// The buffer's device address.
    fn buffer_ptr(&self, b: &Self::Buffer) -> u64;
    /// The buffer's size in bytes.
    fn buffer_len(&self, b: &Self::Buffer) -> u64;
    /// `bytes` of portable pinned host memory, every page touched.
    fn alloc_pinned(&self, d: &Self::Device, bytes: u64) -> Result<Self::Pinned, Error>;
    /// The pinned buffer's host address.
    fn pinned_ptr(&self, h: &Self::Pinned) -> Result<usize, Error>;
    /// The pinned buffer's size in bytes.
    fn pinned_len(&self, h: &Self::Pinned) -> u64;

    // --- copies (all asynchronous on `s`; none is issued for zero bytes) ---

    /// Host to device.
    ///
    /// # Safety
    /// `src` is a live host allocation and `dst` a live device allocation of `s`'s device, each
    /// of at least `bytes` bytes, until `s` is synchronised.
    unsafe fn h2d(&self, s: &Self::Stream, dst: u64, src: usize, bytes: u64) -> Result<(), Error>;
    /// Device to host.
    ///
    /// # Safety
    /// As for [`Driver::h2d`], in the other direction.
    unsafe fn d2h(&self, s: &Self::Stream, dst: usize, src: u64, bytes: u64) -> Result<(), Error>;
    /// Device to device: from `src` on `from` (the device of `s`) to `dst` on `to` (a peer copy
    /// when `to` is another device).
    ///
    /// # Safety
    /// `src` and `dst` are live allocations of at least `bytes` bytes on `from` and `to`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn peer(
        &self,
        s: &Self::Stream,
        from: &Self::Device,
        src: u64,
        to: &Self::Device,
        dst: u64,
        bytes: u64,
    ) -> Result<(), Error>;

    // --- kernels (all launched asynchronously on a stream of `d`) ---

    /// A kernel that spins for `ns` nanoseconds and touches no memory.
    fn spin(&self, d: &Self::Device, s: &Self::Stream, ns: u64) -> Result<(), Error>;
    /// Fills `n` elements of dtype index `dt` at `ptr` with seeded values in `[-scale, scale)`.
    ///
    /// # Safety
    /// `ptr` is a live allocation of `d` of at least `n` elements of the dtype.
    #[allow(clippy::too_many_arguments)]
    unsafe fn fill(
        &self,
        d: &Self::Device,
        s: &Self::Stream,
        dt: usize,
        ptr: u64,
        n: u64,
        seed: u64,
        scale: f32,
    ) -> Result<(), Error>;
    /// Row-major `C = A · B`, `batch` contiguous products, on the handle's stream.
    ///
    /// # Safety
    /// `a`, `b`, `c` are live allocations of at least `batch*m*k`, `batch*k*n` and `batch*m*n`
    /// elements of `dtype`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn gemm(
        &self,
        blas: &Self::Blas,
        dtype: DType,
        m: usize,
        n: usize,
        k: usize,
        batch: usize,
        a: u64,
        b: u64,
        c: u64,
    ) -> Result<(), Error>;
    /// Attention of `shape` in dtype index `dt`: reads Q and KV, writes O, and uses an f32
    /// workspace of `ws_elems` elements for split keys.
    ///
    /// # Safety
    /// `q`, `out` hold `shape.q_elems()` and `kv` `shape.kv_elems()` elements; `ws` holds
    /// `ws_elems` f32s (at least the workspace the shape needs on `d`).
    #[allow(clippy::too_many_arguments)]
    unsafe fn attention(
        &self,
        d: &Self::Device,
        s: &Self::Stream,
        dt: usize,
        shape: &AttentionShape,
        q: u64,
        kv: u64,
        out: u64,
        ws: u64,
        ws_elems: u64,
    ) -> Result<(), Error>;
    /// `dst = src * a + c` over `strided` (element offsets) in dtype index `dt`.
    ///
    /// # Safety
    /// `src` and `dst` hold the extents of `strided`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn axpb(
        &self,
        d: &Self::Device,
        s: &Self::Stream,
        dt: usize,
        strided: &Strided,
        src: u64,
        dst: u64,
        a: f32,
        c: f32,
    ) -> Result<(), Error>;
}
