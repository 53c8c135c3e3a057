//! The cost model: how long one op takes on one hardware profile.
//!
//! Roofline with efficiency factors for kernels (`overhead + max(flops / (peak * eff),
//! bytes / (bandwidth * eff_mem))`), latency plus bytes over bandwidth for copies. Planners
//! optimise with this model and the simulator predicts with it, so what a planner minimises is
//! what the simulator reports.

use crate::dtype::DType;
use crate::hardware::{Duplex, HardwareProfile};
use crate::schedule::{HostMemory, OpKind, attention_pairs};

/// A copy's cost as an affine function of its size: `latency + bytes * secs_per_byte`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkCost {
    /// Fixed cost per transfer, seconds.
    pub latency_s: f64,
    /// Inverse bandwidth, seconds per byte.
    pub secs_per_byte: f64,
}

impl LinkCost {
    /// Seconds to move `bytes` (zero bytes cost nothing: no transfer is issued).
    #[inline]
    pub fn time(&self, bytes: u64) -> f64 {
        if bytes == 0 {
            0.0
        } else {
            self.latency_s + bytes as f64 * self.secs_per_byte
        }
    }
}

/// A kernel's roofline terms for one dtype.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelCost {
    /// Fixed cost per kernel, seconds.
    pub overhead_s: f64,
    /// Seconds per floating-point operation at sustained throughput.
    pub secs_per_flop: f64,
    /// Seconds per byte of device memory traffic at sustained bandwidth.
    pub secs_per_byte: f64,
}

impl KernelCost {
    /// `overhead + max(flops * secs_per_flop, bytes * secs_per_byte)`.
    #[inline]
    pub fn time(&self, flops: f64, bytes: f64) -> f64 {
        self.overhead_s + (flops * self.secs_per_flop).max(bytes * self.secs_per_byte)
    }
}

/// Op durations on one hardware profile.
#[derive(Debug, Clone)]
pub struct CostModel {
    hardware: String,
    h2d: [LinkCost; 2],
    d2h: [LinkCost; 2],
    peer: LinkCost,
    gemm: [KernelCost; 3],
    attention: [KernelCost; 3],
    elementwise: KernelCost,
    duplex: Duplex,
}

fn dtype_index(d: DType) -> usize {
    match d {
        DType::Fp16 => 0,
        DType::Bf16 => 1,
        DType::Fp32 => 2,
    }
}

fn host_index(h: HostMemory) -> usize {
    match h {
        HostMemory::Pinned => 0,
        HostMemory::Pageable => 1,
    }
}

impl CostModel {
    /// The cost model of `hw`.
    pub fn new(hw: &HardwareProfile) -> Self {
        let l = &hw.link;
        let link = |lat: f64, bw: f64| LinkCost {
            latency_s: lat,
            secs_per_byte: 1.0 / bw,
        };
        let mem = 1.0 / (hw.gpu.mem_bandwidth * hw.efficiency.memory);
        let kernel = |peak: f64, eff: f64| KernelCost {
            overhead_s: hw.gpu.kernel_overhead_s,
            secs_per_flop: 1.0 / (peak * eff),
            secs_per_byte: mem,
        };
        let dtypes = [DType::Fp16, DType::Bf16, DType::Fp32];
        let peaks = dtypes.map(|d| hw.gpu.peak_flops.get(d));
        CostModel {
            hardware: hw.name.clone(),
            h2d: [
                link(l.h2d_latency_s, l.h2d_pinned),
                link(l.h2d_latency_s, l.h2d_pageable),
            ],
            d2h: [
                link(l.d2h_latency_s, l.d2h_pinned),
                link(l.d2h_latency_s, l.d2h_pageable),
            ],
            peer: link(hw.peer.latency_s, hw.peer.bandwidth),
            gemm: peaks.map(|p| kernel(p, hw.efficiency.gemm)),
            attention: peaks.map(|p| kernel(p, hw.efficiency.attention)),
            elementwise: KernelCost {
                overhead_s: hw.gpu.kernel_overhead_s,
                secs_per_flop: 0.0,
                secs_per_byte: mem,
            },
            duplex: l.duplex,
        }
    }

    /// Name of the hardware profile this model was built from.
    pub fn hardware(&self) -> &str {
        &self.hardware
    }

    /// Whether H2D and D2H copies may overlap.
    pub fn duplex(&self) -> Duplex {
        self.duplex
    }

    /// Host→device copy cost.
    #[inline]
    pub fn h2d(&self, host: HostMemory) -> LinkCost {
        self.h2d[host_index(host)]
    }

    /// Device→host copy cost.
    #[inline]
    pub fn d2h(&self, host: HostMemory) -> LinkCost {
        self.d2h[host_index(host)]
    }

    /// Device→device copy cost.
    pub fn peer(&self) -> LinkCost {
        self.peer
    }

    /// GEMM roofline terms.
    pub fn gemm_cost(&self, dtype: DType) -> KernelCost {
        self.gemm[dtype_index(dtype)]
    }

    /// Attention roofline terms.
    pub fn attention_cost(&self, dtype: DType) -> KernelCost {
        self.attention[dtype_index(dtype)]
    }

    /// Memory-bound kernel terms.
    pub fn elementwise_cost(&self) -> KernelCost {
        self.elementwise
    }

    /// Seconds for `batch` GEMMs `[m,k] x [k,n]`.
    #[inline]
    pub fn gemm(&self, m: u32, n: u32, k: u32, batch: u32, dtype: DType) -> f64 {
        let (m, n, k, b) = (f64::from(m), f64::from(n), f64::from(k), f64::from(batch));
        let flops = 2.0 * m * n * k * b;
        let bytes = (m * k + k * n + m * n) * b * dtype.bytes() as f64;
        self.gemm_cost(dtype).time(flops, bytes)
    }

    /// Seconds for one attention kernel (see [`OpKind::Attention`]).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn attention(
        &self,
        batch: u32,
        q_heads: u16,
        kv_heads: u16,
        q_len: u32,
        kv_len: u32,
        head_dim: u16,
        causal: bool,
        dtype: DType,
    ) -> f64 {
        let b = f64::from(batch);
        let d = f64::from(head_dim);
        let flops = 4.0 * b * f64::from(q_heads) * d * attention_pairs(q_len, kv_len, causal);
        // Q read and O written per query head; K and V read once per KV head.
        let elems = b
            * d
            * (2.0 * f64::from(q_heads) * f64::from(q_len)
                + 2.0 * f64::from(kv_heads) * f64::from(kv_len));
        self.attention_cost(dtype)
            .time(flops, elems * dtype.bytes() as f64)
    }

    /// Seconds for a memory-bound kernel touching `bytes`.
    #[inline]
    pub fn elementwise(&self, bytes: u64) -> f64 {
        self.elementwise.time(0.0, bytes as f64)
    }

    /// Duration of any op.
    #[inline]
    pub fn duration(&self, kind: &OpKind) -> f64 {
        match *kind {
            OpKind::H2D { bytes, host, .. } => self.h2d(host).time(bytes),
            OpKind::D2H { bytes, host, .. } => self.d2h(host).time(bytes),
            OpKind::PeerSend { bytes } => self.peer.time(bytes),
            OpKind::Gemm {
                m,
                n,
                k,
                batch,
                dtype,
            } => self.gemm(m, n, k, batch, dtype),
            OpKind::Attention {
                batch,
                q_heads,
                kv_heads,
                q_len,
                kv_len,
                head_dim,
                causal,
                dtype,
            } => self.attention(
                batch, q_heads, kv_heads, q_len, kv_len, head_dim, causal, dtype,
            ),
            OpKind::Elementwise { bytes } => self.elementwise(bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::Payload;

    #[test]
    fn copies_are_latency_plus_bytes_over_bandwidth() {
        let hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
        let c = CostModel::new(&hw);
        let t = c.duration(&OpKind::H2D {
            bytes: 24_500_000_000,
            payload: Payload::Cache,
            host: HostMemory::Pinned,
        });
        assert!((t - (1.0 + 10e-6)).abs() < 1e-12, "{t}");
        let t = c.d2h(HostMemory::Pageable).time(12_000_000);
        assert!((t - (1e-3 + 10e-6)).abs() < 1e-12, "{t}");
        assert_eq!(c.h2d(HostMemory::Pinned).time(0), 0.0);
    }

    #[test]
    fn gemm_roofline_switches_from_memory_to_compute_bound() {
        let hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
        let c = CostModel::new(&hw);
        let small = c.gemm(1, 4096, 4096, 1, DType::Fp16);
        // m = 1: reading the 32 MiB weight at 80% of 1555 GB/s dominates.
        let mem = (4096.0 * 4096.0 + 2.0 * 4096.0) * 2.0 / (1555e9 * 0.8) + 4e-6;
        assert!((small - mem).abs() / mem < 1e-9);
        let big = c.gemm(8192, 8192, 8192, 1, DType::Fp16);
        let comp = 2.0 * 8192f64.powi(3) / (312e12 * 0.7) + 4e-6;
        assert!((big - comp).abs() / comp < 1e-9);
    }
}
