//! One CUDA device: its context, compiled kernels, stream pool, cuBLAS handles and events.

use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaContext, CudaEvent, CudaStream, sys};
use cudarc::nvrtc::Ptx;

use super::driver::{OrCuda, driver_version};
use super::launch::{Kernels, compile};
use crate::{BackendKind, DeviceInfo, Error};

/// One device: its context, kernels, stream pool and timing events.
pub(super) struct Dev {
    pub(super) ctx: Arc<CudaContext>,
    pub(super) k: Kernels,
    /// Streams reused across runs; schedule stream `j` of this device uses `streams[j]`.
    pub(super) streams: Vec<Arc<CudaStream>>,
    /// cuBLAS handles, one per pooled stream that runs GEMMs.
    pub(super) blas: Vec<Option<CudaBlas>>,
    /// This device's reference event of a run.
    pub(super) reference: CudaEvent,
    /// Two timing events per op of a run on this device (start, end), reused across runs.
    pub(super) events: Vec<CudaEvent>,
}

impl Dev {
    pub(super) fn open(ordinal: usize, images: &mut Vec<((i32, i32), Ptx)>) -> Result<Dev, Error> {
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

    pub(super) fn info(&self) -> Result<DeviceInfo, Error> {
        Ok(DeviceInfo {
            backend: BackendKind::Cuda,
            name: self.ctx.name().ctx("reading the device name")?,
            driver: driver_version(),
            memory_bytes: self.ctx.total_mem().ok().map(|b| b as u64),
            parallelism: Some(self.k.sms),
        })
    }

    pub(super) fn ensure_streams(&mut self, n: usize) -> Result<(), Error> {
        while self.streams.len() < n {
            self.streams
                .push(self.ctx.new_stream().ctx("creating a stream")?);
            self.blas.push(None);
        }
        Ok(())
    }

    pub(super) fn ensure_blas(&mut self, slot: usize) -> Result<(), Error> {
        if self.blas[slot].is_none() {
            self.blas[slot] =
                Some(CudaBlas::new(self.streams[slot].clone()).ctx("creating a cuBLAS handle")?);
        }
        Ok(())
    }

    pub(super) fn ensure_events(&mut self, n: usize) -> Result<(), Error> {
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
