//! One device of a run: the driver's device (context and kernels), its stream pool, GEMM handles
//! and timing events, on any [`Driver`].

use super::api::Driver;
use crate::error::Error;

/// One device: its context and kernels, stream pool and timing events.
pub(super) struct Dev<D: Driver> {
    pub(super) dev: D::Device,
    /// Streams reused across runs; schedule stream `j` of this device uses `streams[j]`.
    pub(super) streams: Vec<D::Stream>,
    /// GEMM handles, one per pooled stream that runs GEMMs.
    pub(super) blas: Vec<Option<D::Blas>>,
    /// This device's reference event of a run.
    pub(super) reference: D::Event,
    /// Two timing events per op of a run on this device (start, end), reused across runs.
    pub(super) events: Vec<D::Event>,
}

impl<D: Driver> Dev<D> {
    /// Opens device `ordinal` and creates its reference event.
    pub(super) fn open(drv: &mut D, ordinal: usize) -> Result<Self, Error> {
        let dev = drv.open(ordinal)?;
        let reference = drv.new_event(&dev)?;
        Ok(Dev {
            dev,
            streams: Vec::new(),
            blas: Vec::new(),
            reference,
            events: Vec::new(),
        })
    }

    pub(super) fn ensure_streams(&mut self, drv: &D, n: usize) -> Result<(), Error> {
        while self.streams.len() < n {
            self.streams.push(drv.new_stream(&self.dev)?);
            self.blas.push(None);
        }
        Ok(())
    }

    pub(super) fn ensure_blas(&mut self, drv: &D, slot: usize) -> Result<(), Error> {
        if self.blas[slot].is_none() {
            self.blas[slot] = Some(drv.new_blas(&self.dev, &self.streams[slot])?);
        }
        Ok(())
    }

    pub(super) fn ensure_events(&mut self, drv: &D, n: usize) -> Result<(), Error> {
        while self.events.len() < n {
            self.events.push(drv.new_event(&self.dev)?);
        }
        Ok(())
    }
}
