//! The real driver: [`Driver`] on cudarc (the CUDA driver, cuBLAS and NVRTC, loaded at run time).

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{
    CudaContext, CudaEvent, CudaSlice, CudaStream, DriverError, PinnedHostSlice, result as drv, sys,
};
use cudarc::nvrtc::Ptx;
use kvplan_vocab::DType;

use super::api::Driver;
use super::driver::{OrCuda, check_libraries, dev_ptr, device_count, driver_version};
use super::launch::{
    Kernels, compile, config, gemm, launch, launch_attention, launch_axpb, launch_fill,
};
use crate::backend::{BackendKind, DeviceInfo};
use crate::error::Error;
use crate::kernel::{AttentionShape, Strided};

/// cudarc, with the kernels compiled once per compute capability.
pub(crate) struct Cudarc {
    images: Vec<((i32, i32), Ptx)>,
}

impl Cudarc {
    /// Checks that libcuda, libcublas and libnvrtc load (before any other cudarc call).
    pub(crate) fn load() -> Result<Self, Error> {
        check_libraries()?;
        Ok(Cudarc { images: Vec::new() })
    }
}

/// One device's context and kernels.
pub(crate) struct Context {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) k: Kernels,
}

impl Context {
    /// Creates the primary context of device `ordinal` with cudarc's event tracking disabled,
    /// and loads the kernels (compiled for its compute capability unless `images` has them).
    pub(super) fn open(
        ordinal: usize,
        images: &mut Vec<((i32, i32), Ptx)>,
    ) -> Result<Context, Error> {
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
        Ok(Context { ctx, k })
    }
}

impl Driver for Cudarc {
    type Device = Context;
    type Stream = Arc<CudaStream>;
    type Event = CudaEvent;
    type Blas = CudaBlas;
    type Buffer = CudaSlice<u8>;
    type Pinned = PinnedHostSlice<u8>;

    fn device_count(&mut self) -> Result<usize, Error> {
        device_count()
    }

    fn open(&mut self, ordinal: usize) -> Result<Context, Error> {
        Context::open(ordinal, &mut self.images)
    }

    fn info(&self, d: &Context) -> Result<DeviceInfo, Error> {
        Ok(DeviceInfo {
            backend: BackendKind::Cuda,
            name: d.ctx.name().ctx("reading the device name")?,
            driver: driver_version(),
            memory_bytes: d.ctx.total_mem().ok().map(|b| b as u64),
            parallelism: Some(d.k.sms),
        })
    }

    fn sms(&self, d: &Context) -> u32 {
        d.k.sms
    }

    fn free_memory(&self, d: &Context) -> Result<u64, Error> {
        let (free, _) = d.ctx.mem_get_info().ctx("cuMemGetInfo")?;
        Ok(free as u64)
    }

    fn enable_peer(&self, from: &Context, to: &Context) -> Result<(), Error> {
        let (a, b) = (&from.ctx, &to.ctx);
        let mut can: i32 = 0;
        // SAFETY: out-parameter of one int; both device handles come from live contexts.
        unsafe { sys::cuDeviceCanAccessPeer(&mut can, a.cu_device(), b.cu_device()) }
            .result()
            .ctx("cuDeviceCanAccessPeer")?;
        if can != 0 {
            a.bind_to_thread().ctx("binding a context")?;
            // SAFETY: `from`'s context is current; `b` is a live context of another device.
            match unsafe { sys::cuCtxEnablePeerAccess(b.cu_ctx(), 0) }.result() {
                Ok(())
                | Err(DriverError(sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)) => {}
                Err(e) => return Err(e).ctx("cuCtxEnablePeerAccess"),
            }
        }
        Ok(())
    }

    fn bind(&self, d: &Context) -> Result<(), Error> {
        d.ctx.bind_to_thread().ctx("binding a context")
    }

    fn check_err(&self, d: &Context) -> Result<(), Error> {
        d.ctx.check_err().ctx("a deferred CUDA error")
    }

    fn new_stream(&self, d: &Context) -> Result<Arc<CudaStream>, Error> {
        d.ctx.new_stream().ctx("creating a stream")
    }

    fn new_blas(&self, _d: &Context, s: &Arc<CudaStream>) -> Result<CudaBlas, Error> {
        CudaBlas::new(s.clone()).ctx("creating a cuBLAS handle")
    }

    fn new_event(&self, d: &Context) -> Result<CudaEvent, Error> {
        d.ctx
            .new_event(Some(sys::CUevent_flags::CU_EVENT_DEFAULT))
            .ctx("creating an event")
    }

    fn record(&self, e: &CudaEvent, s: &Arc<CudaStream>) -> Result<(), Error> {
        // SAFETY: a live event and a live stream; the caller records only on a stream of the
        // event's context.
        unsafe { drv::event::record(e.cu_event(), s.cu_stream()) }.ctx("cuEventRecord")
    }

    fn wait(&self, s: &Arc<CudaStream>, e: &CudaEvent) -> Result<(), Error> {
        // SAFETY: a live stream and a live event (of any context).
        unsafe { sys::cuStreamWaitEvent(s.cu_stream(), e.cu_event(), 0) }
            .result()
            .ctx("cuStreamWaitEvent")
    }

    fn synchronize(&self, s: &Arc<CudaStream>) -> Result<(), Error> {
        s.synchronize().ctx("synchronising a stream")
    }

    fn elapsed_ms(&self, from: &CudaEvent, to: &CudaEvent) -> Result<f32, Error> {
        // SAFETY: two live events of one context; the caller has bound that context and
        // synchronised the streams they were recorded on.
        unsafe { drv::event::elapsed(from.cu_event(), to.cu_event()) }.ctx("cuEventElapsedTime")
    }

    fn alloc(&self, _d: &Context, s: &Arc<CudaStream>, bytes: u64) -> Result<CudaSlice<u8>, Error> {
        // SAFETY: uninitialised device memory; the executor fills it or only ever writes
        // (outputs) or copies (copy buffers) it — its values never matter for timing.
        unsafe { s.alloc::<u8>(bytes as usize) }.ctx("allocating device memory")
    }

    fn buffer_ptr(&self, b: &CudaSlice<u8>) -> u64 {
        dev_ptr(b)
    }

    fn buffer_len(&self, b: &CudaSlice<u8>) -> u64 {
        b.len() as u64
    }

    fn alloc_pinned(&self, d: &Context, bytes: u64) -> Result<PinnedHostSlice<u8>, Error> {
        // SAFETY: uninitialised page-locked memory, filled right below.
        let mut h = unsafe {
            d.ctx
                .alloc_pinned_with_flags::<u8>(bytes as usize, sys::CU_MEMHOSTALLOC_PORTABLE)
        }
        .ctx("allocating pinned host memory")?;
        // Touch every page now; a copy's bytes are bytes.
        h.as_mut_slice()
            .ctx("writing pinned host memory")?
            .fill(0xA5);
        Ok(h)
    }

    fn pinned_ptr(&self, h: &PinnedHostSlice<u8>) -> Result<usize, Error> {
        Ok(h.as_ptr().ctx("reading a pinned buffer")? as usize)
    }

    fn pinned_len(&self, h: &PinnedHostSlice<u8>) -> u64 {
        h.len() as u64
    }

    unsafe fn h2d(
        &self,
        s: &Arc<CudaStream>,
        dst: u64,
        src: usize,
        bytes: u64,
    ) -> Result<(), Error> {
        // SAFETY: the caller's: `src` is a live host allocation and `dst` a live device
        // allocation, both of at least `bytes` bytes.
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(dst, src as *const c_void, bytes as usize, s.cu_stream())
        }
        .result()
        .ctx("cuMemcpyHtoDAsync")
    }

    unsafe fn d2h(
        &self,
        s: &Arc<CudaStream>,
        dst: usize,
        src: u64,
        bytes: u64,
    ) -> Result<(), Error> {
        // SAFETY: as for `h2d`, in the other direction.
        unsafe { sys::cuMemcpyDtoHAsync_v2(dst as *mut c_void, src, bytes as usize, s.cu_stream()) }
            .result()
            .ctx("cuMemcpyDtoHAsync")
    }

    unsafe fn peer(
        &self,
        s: &Arc<CudaStream>,
        from: &Context,
        src: u64,
        to: &Context,
        dst: u64,
        bytes: u64,
    ) -> Result<(), Error> {
        if to.ctx.cu_ctx() != from.ctx.cu_ctx() {
            // SAFETY: the caller's: source and destination are device allocations of at least
            // `bytes` bytes in the given (live) contexts.
            unsafe {
                sys::cuMemcpyPeerAsync(
                    dst,
                    to.ctx.cu_ctx(),
                    src,
                    from.ctx.cu_ctx(),
                    bytes as usize,
                    s.cu_stream(),
                )
            }
            .result()
            .ctx("cuMemcpyPeerAsync")
        } else {
            // SAFETY: the caller's: two device allocations of at least `bytes` bytes in this
            // context.
            unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, bytes as usize, s.cu_stream()) }
                .result()
                .ctx("cuMemcpyDtoDAsync")
        }
    }

    fn spin(&self, d: &Context, s: &Arc<CudaStream>, ns: u64) -> Result<(), Error> {
        // SAFETY: kv_spin(u64 ns) takes one u64, passed as such; it touches no memory.
        unsafe {
            launch(
                s,
                &d.k.spin,
                config((1, 1, 1), 1, 0),
                &[ns],
                &[],
                &[],
                "launching the head-start kernel",
            )
        }
    }

    unsafe fn fill(
        &self,
        d: &Context,
        s: &Arc<CudaStream>,
        dt: usize,
        ptr: u64,
        n: u64,
        seed: u64,
        scale: f32,
    ) -> Result<(), Error> {
        launch_fill(&d.k, s, dt, ptr, n, seed, scale)
    }

    unsafe fn gemm(
        &self,
        blas: &CudaBlas,
        dtype: DType,
        m: usize,
        n: usize,
        k: usize,
        batch: usize,
        a: u64,
        b: u64,
        c: u64,
    ) -> Result<(), Error> {
        gemm(blas, dtype, m, n, k, batch, a, b, c)
    }

    unsafe fn attention(
        &self,
        d: &Context,
        s: &Arc<CudaStream>,
        dt: usize,
        shape: &AttentionShape,
        q: u64,
        kv: u64,
        out: u64,
        ws: u64,
        ws_elems: u64,
    ) -> Result<(), Error> {
        launch_attention(&d.k, s, dt, shape, q, kv, out, ws, ws_elems)
    }

    unsafe fn axpb(
        &self,
        d: &Context,
        s: &Arc<CudaStream>,
        dt: usize,
        strided: &Strided,
        src: u64,
        dst: u64,
        a: f32,
        c: f32,
    ) -> Result<(), Error> {
        launch_axpb(&d.k, s, dt, strided, src, dst, a, c)
    }
}
