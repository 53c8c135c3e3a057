//! The CUDA side of the correctness checks.

use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::{CudaSlice, CudaStream, PinnedHostSlice, sys};
use kvplan_vocab::DType;

use super::driver::{OrCuda, check_libraries, check_ordinal, dev_ptr, device_count, internal};
use super::launch::{attention_workspace, gemm, launch_attention, launch_axpb};
use super::real::Context;
use crate::backend::ExecOptions;
use crate::error::Error;
use crate::kernel::{AttentionShape, CopyAt, Device, Strided};

/// The CUDA side of the correctness checks: fp16 buffers, one stream, and the executor's
/// kernels and cuBLAS GEMM.
pub(crate) struct CheckDevice {
    dev: Context,
    stream: Arc<CudaStream>,
    blas: CudaBlas,
    ws: Option<CudaSlice<f32>>,
}

impl CheckDevice {
    pub fn open(options: &ExecOptions) -> Result<Self, Error> {
        check_libraries()?;
        let count = device_count()?;
        check_ordinal(options.device, count)?;
        let dev = Context::open(options.device, &mut Vec::new())?;
        let stream = dev.ctx.new_stream().ctx("creating a stream")?;
        let blas = CudaBlas::new(stream.clone()).ctx("creating a cuBLAS handle")?;
        Ok(CheckDevice {
            dev,
            stream,
            blas,
            ws: None,
        })
    }

    fn range(len: usize, at: usize, n: usize, what: &str) -> Result<(), Error> {
        if at.checked_add(n).is_none_or(|e| e > len) {
            return Err(internal(format!(
                "{what}: {n} elements at {at} exceed a buffer of {len}"
            )));
        }
        Ok(())
    }
}

impl Device for CheckDevice {
    type Host = PinnedHostSlice<u16>;
    type Dev = CudaSlice<u16>;
    type Error = Error;

    fn round(&self, x: f32) -> f32 {
        half::f16::from_f32(x).to_f32()
    }

    fn host(&mut self, data: &[f32]) -> Result<Self::Host, Error> {
        let mut h = self.host_zeroed(data.len())?;
        let s = h.as_mut_slice().ctx("writing pinned host memory")?;
        for (d, &x) in s.iter_mut().zip(data) {
            *d = half::f16::from_f32(x).to_bits();
        }
        Ok(h)
    }

    fn host_zeroed(&mut self, len: usize) -> Result<Self::Host, Error> {
        // SAFETY: uninitialised page-locked memory, zeroed right below.
        let mut h = unsafe {
            self.dev
                .ctx
                .alloc_pinned_with_flags::<u16>(len.max(1), sys::CU_MEMHOSTALLOC_PORTABLE)
        }
        .ctx("allocating pinned host memory")?;
        h.as_mut_slice().ctx("writing pinned host memory")?.fill(0);
        Ok(h)
    }

    fn dev_zeroed(&mut self, len: usize) -> Result<Self::Dev, Error> {
        self.stream
            .alloc_zeros::<u16>(len.max(1))
            .ctx("allocating device memory")
    }

    fn h2d(&mut self, dst: &mut Self::Dev, src: &Self::Host, at: CopyAt) -> Result<(), Error> {
        Self::range(dst.len(), at.dst_at, at.len, "h2d destination")?;
        Self::range(src.len(), at.src_at, at.len, "h2d source")?;
        let s = src.as_ptr().ctx("reading pinned host memory")?;
        // SAFETY: both ranges were checked against the allocations; the pinned buffer outlives
        // the copy (the check reads results only after synchronising the stream).
        unsafe {
            sys::cuMemcpyHtoDAsync_v2(
                dev_ptr(dst) + 2 * at.dst_at as u64,
                s.add(at.src_at).cast(),
                2 * at.len,
                self.stream.cu_stream(),
            )
        }
        .result()
        .ctx("cuMemcpyHtoDAsync")
    }

    fn d2h(&mut self, dst: &mut Self::Host, src: &Self::Dev, at: CopyAt) -> Result<(), Error> {
        Self::range(dst.len(), at.dst_at, at.len, "d2h destination")?;
        Self::range(src.len(), at.src_at, at.len, "d2h source")?;
        let d = dst.as_mut_ptr().ctx("writing pinned host memory")?;
        // SAFETY: both ranges were checked; the host buffer is read only after the stream is
        // synchronised.
        unsafe {
            sys::cuMemcpyDtoHAsync_v2(
                d.add(at.dst_at).cast(),
                dev_ptr(src) + 2 * at.src_at as u64,
                2 * at.len,
                self.stream.cu_stream(),
            )
        }
        .result()
        .ctx("cuMemcpyDtoHAsync")
    }

    fn gemm(
        &mut self,
        m: usize,
        n: usize,
        k: usize,
        a: &Self::Dev,
        b: &Self::Dev,
        c: &mut Self::Dev,
    ) -> Result<(), Error> {
        Self::range(a.len(), 0, m * k, "GEMM A")?;
        Self::range(b.len(), 0, k * n, "GEMM B")?;
        Self::range(c.len(), 0, m * n, "GEMM C")?;
        gemm(
            &self.blas,
            DType::Fp16,
            m,
            n,
            k,
            1,
            dev_ptr(a),
            dev_ptr(b),
            dev_ptr(c),
        )
    }

    fn strided(
        &mut self,
        s: &Strided,
        src: &Self::Dev,
        dst: &mut Self::Dev,
        a: f32,
        b: f32,
    ) -> Result<(), Error> {
        let (se, de) = s.extents();
        Self::range(src.len(), 0, se, "strided source")?;
        Self::range(dst.len(), 0, de, "strided destination")?;
        launch_axpb(
            &self.dev.k,
            &self.stream,
            DType::Fp16.index(),
            s,
            dev_ptr(src),
            dev_ptr(dst),
            a,
            b,
        )
    }

    fn attention(
        &mut self,
        shape: &AttentionShape,
        q: &Self::Dev,
        kv: &Self::Dev,
        out: &mut Self::Dev,
    ) -> Result<(), Error> {
        Self::range(q.len(), 0, shape.q_elems(), "attention Q")?;
        Self::range(kv.len(), 0, shape.kv_elems(), "attention KV")?;
        Self::range(out.len(), 0, shape.q_elems(), "attention O")?;
        let need = attention_workspace(shape, self.dev.k.sms) as usize;
        if self.ws.as_ref().is_none_or(|w| w.len() < need.max(1)) {
            self.ws = Some(
                self.stream
                    .alloc_zeros::<f32>(need.max(1))
                    .ctx("allocating the attention workspace")?,
            );
        }
        let ws = self.ws.as_ref().expect("allocated above");
        launch_attention(
            &self.dev.k,
            &self.stream,
            DType::Fp16.index(),
            shape,
            dev_ptr(q),
            dev_ptr(kv),
            dev_ptr(out),
            dev_ptr(ws),
            ws.len() as u64,
        )
    }

    fn read(&mut self, h: &Self::Host) -> Result<Vec<f32>, Error> {
        self.stream.synchronize().ctx("synchronising the stream")?;
        let s = h.as_slice().ctx("reading pinned host memory")?;
        Ok(s.iter()
            .map(|&b| half::f16::from_bits(b).to_f32())
            .collect())
    }
}
