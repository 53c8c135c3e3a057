//! The cost model: how long one op takes on one hardware profile.
//!
//! Kernels come from the profile's kernel model by shape ([`crate::kernel_model`]: a fitted
//! GEMM model with tile/wave quantisation, per-kind memory-bound kernels with their own device
//! floors, attention, the tensor-parallel all-reduce, and measured tables over a dense token
//! grid where the profile has them); a kernel occupies its stream at least the profile's launch
//! interval. Copies cost latency plus bytes over bandwidth, or follow measured curves in a
//! calibrated profile. Planners optimise with this model and the simulator predicts with it, so
//! what a planner minimises is what the simulator reports.
//!
//! The affine views ([`CostModel::h2d`], [`CostModel::gemm_cost`]) that planners' linear
//! programs use are linearisations: a copy curve's asymptotic bandwidth with its smallest-copy
//! time as latency, and the GEMM model's straight roofline scaled by [`CostModel::gemm_ratio`].

use crate::attention::{AttentionBatch, AttentionWork, Heads};
use crate::calibration::CopyTables;
use crate::dtype::DType;
use crate::hardware::{Duplex, HardwareProfile};
use crate::host::HostProfile;
use crate::kernel_model::{
    AllReduceFit, AttentionFit, GemmFit, KernelModel, KernelTable, KernelsSection, MemFit,
    TableKind,
};
use crate::quant::{KvCacheDtype, WeightFormat};
use crate::schedule::{ElemKind, HostMemory, OpKind};

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
    gemm: [KernelCost; DType::COUNT],
    attention: [KernelCost; DType::COUNT],
    elementwise: KernelCost,
    duplex: Duplex,
    copy_curves: Option<Box<CopyTables>>,
    kernels: KernelModel,
    launch_s: f64,
    host: Option<Box<HostProfile>>,
    /// The one-off part of a copy's latency (`[link] copy_completion_us`), seconds.
    copy_completion_s: f64,
}

fn host_index(h: HostMemory) -> usize {
    match h {
        HostMemory::Pinned => 0,
        HostMemory::Pageable => 1,
    }
}

/// The `[kernels]` section a profile without one stands for: the plain roofline of its `[gpu]`
/// and `[efficiency]` figures (every kernel `overhead + max(flops / (peak * eff), bytes / (hbm *
/// eff))`), or a `[calibration]`'s fitted attention and memory-bound kernels and measured GEMMs;
/// its `[attention]`, when it has one, replaces the attention.
pub fn derived_kernels(hw: &HardwareProfile) -> KernelsSection {
    let overhead_us = hw.gpu.kernel_overhead_s * 1e6;
    let e = &hw.efficiency;
    let mem = MemFit {
        floor_us: overhead_us,
        efficiency: e.memory,
    };
    let mut section = KernelsSection {
        source: "roofline of [gpu] and [efficiency]".into(),
        launch_us: 0.0,
        gemm: GemmFit {
            floor_us: overhead_us,
            latency_us: 0.0,
            memory_efficiency: e.memory,
            compute_efficiency: e.gemm,
            tile_exponent: None,
            sms: None,
            blend: None,
        },
        norm: mem,
        activation: mem,
        rope: mem,
        add: mem,
        embedding: mem,
        other: mem,
        attention: AttentionFit::roofline(overhead_us, e.attention, e.memory),
        allreduce: AllReduceFit {
            // A ring all-reduce over the peer link: two passes of its latency, its bandwidth.
            latency_us: 2.0 * hw.peer.latency_s * 1e6,
            bus_gbps: hw.peer.bandwidth / 1e9,
        },
        tables: Vec::new(),
    };
    if let Some(cal) = &hw.calibration {
        section.source = format!("[calibration] of {} ({})", cal.device, cal.date);
        let fp16 = hw.gpu.peak_flops.get(DType::Fp16);
        let a = &cal.attention;
        section.attention = AttentionFit::roofline(
            a.overhead_us,
            (a.tflops * 1e12 / fp16).min(1.0),
            (a.gbps * 1e9 / hw.gpu.mem_bandwidth).min(1.0),
        );
        let el = MemFit {
            floor_us: cal.elementwise.overhead_us,
            efficiency: cal.elementwise.gbps * 1e9 / hw.gpu.mem_bandwidth,
        };
        for kind in ElemKind::ALL {
            *section.mem_mut(kind) = el;
        }
        section.tables = gemm_tables(&cal.gemm);
    }
    if let Some(a) = hw.attention {
        section.attention = a;
        section.source.push_str(", attention from [attention]");
    }
    section
}

/// Measured GEMM points as one table per `(dtype, n, k)`, sorted by rows (times of at least
/// 1 ns, the tables' resolution).
pub fn gemm_tables(points: &[crate::calibration::GemmPoint]) -> Vec<KernelTable> {
    let mut tables: Vec<KernelTable> = Vec::new();
    for p in points {
        let point = (p.m, (p.seconds * 1e6).max(1e-3));
        match tables
            .iter_mut()
            .find(|t| t.dtype == p.dtype && t.n == p.n && t.k == p.k)
        {
            Some(t) => t.points.push(point),
            None => tables.push(KernelTable {
                kind: TableKind::Gemm,
                dtype: p.dtype,
                n: p.n,
                k: p.k,
                width: 0,
                points: vec![point],
            }),
        }
    }
    for t in &mut tables {
        t.points.sort_by_key(|p| p.0);
        t.points.dedup_by_key(|p| p.0);
    }
    tables
}

impl CostModel {
    /// The cost model of `hw`.
    pub fn new(hw: &HardwareProfile) -> Self {
        let l = &hw.link;
        let link = |lat: f64, bw: f64| LinkCost {
            latency_s: lat,
            secs_per_byte: 1.0 / bw,
        };
        let section = hw.kernels.clone().unwrap_or_else(|| derived_kernels(hw));
        let peaks = DType::ALL.map(|d| hw.gpu.peak_flops.get(d));
        let hbm = hw.gpu.mem_bandwidth;
        let g = section.gemm;
        let a = section.attention;
        let o = section.other;
        let mut model = CostModel {
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
            gemm: peaks.map(|p| KernelCost {
                overhead_s: g.floor_us * 1e-6 + g.latency_us * 1e-6,
                secs_per_flop: 1.0 / (p * g.compute_efficiency),
                secs_per_byte: 1.0 / (hbm * g.memory_efficiency),
            }),
            attention: peaks.map(|p| KernelCost {
                overhead_s: a.floor_us * 1e-6,
                secs_per_flop: 1.0 / (p * a.prefill_efficiency),
                secs_per_byte: 1.0 / (hbm * a.decode_efficiency),
            }),
            elementwise: KernelCost {
                overhead_s: o.floor_us * 1e-6,
                secs_per_flop: 0.0,
                secs_per_byte: 1.0 / (hbm * o.efficiency),
            },
            duplex: l.duplex,
            copy_curves: None,
            launch_s: section.launch_us * 1e-6,
            kernels: KernelModel::new(section, peaks, hbm).with_fp8_peak(hw.gpu.fp8_flops()),
            host: None,
            copy_completion_s: l.copy_completion_s,
        };
        if let Some(cal) = &hw.calibration {
            let affine = |c: &crate::calibration::Curve| LinkCost {
                latency_s: c.latency_s(),
                secs_per_byte: c.secs_per_byte(),
            };
            let cp = &cal.copy;
            model.h2d = [affine(&cp.h2d_pinned), affine(&cp.h2d_pageable)];
            model.d2h = [affine(&cp.d2h_pinned), affine(&cp.d2h_pageable)];
            model.copy_curves = Some(Box::new(cal.copy.clone()));
        }
        model
    }

    /// The model with the host thread of `profile`: the engine charges each op's issue on the
    /// host ([`HostProfile::issue`]) and a kernel takes its device time on its stream (the
    /// host's launch replaces the launch interval).
    pub fn with_host(mut self, profile: HostProfile) -> Self {
        self.host = Some(Box::new(profile));
        self
    }

    /// The host profile, when the host thread is modelled.
    pub fn host(&self) -> Option<&HostProfile> {
        self.host.as_deref()
    }

    /// Name of the hardware profile this model was built from.
    pub fn hardware(&self) -> &str {
        &self.hardware
    }

    /// The kernel model by shape (device times, before the launch interval).
    pub fn kernels(&self) -> &KernelModel {
        &self.kernels
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

    /// GEMM roofline terms: the affine view planners' linear programs use (device floor,
    /// compute and memory rates of the fitted model, without wave quantisation).
    pub fn gemm_cost(&self, dtype: DType) -> KernelCost {
        self.gemm[dtype.index()]
    }

    /// Attention roofline terms.
    pub fn attention_cost(&self, dtype: DType) -> KernelCost {
        self.attention[dtype.index()]
    }

    /// Terms of memory-bound kernels of kind `other` (copies inside the GPU).
    pub fn elementwise_cost(&self) -> KernelCost {
        self.elementwise
    }

    /// A kernel of `device_s` seconds on the GPU occupies its stream at least the launch
    /// interval (with a host profile, its device time: the host's launch bounds it instead).
    #[inline]
    fn kernel(&self, device_s: f64) -> f64 {
        if self.host.is_some() {
            device_s
        } else {
            device_s.max(self.launch_s)
        }
    }

    /// GEMM time / its affine view ([`CostModel::gemm_cost`]) at this shape: how far tiles,
    /// waves and measured tables move the shape from the straight roofline.
    #[inline]
    pub fn gemm_ratio(&self, m: u32, n: u32, k: u32, dtype: DType) -> f64 {
        let op = OpKind::Gemm {
            m,
            n,
            k,
            batch: 1,
            dtype,
            weights: WeightFormat::Dense,
        };
        let affine = self.gemm_cost(dtype).time(op.flops(), op.mem_bytes());
        self.gemm(m, n, k, 1, dtype) / affine
    }

    /// Seconds for `batch` GEMMs `[m,k] x [k,n]`.
    #[inline]
    pub fn gemm(&self, m: u32, n: u32, k: u32, batch: u32, dtype: DType) -> f64 {
        self.kernel(self.kernels.gemm_device(m, n, k, batch, dtype))
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
        self.duration(&OpKind::Attention {
            batch,
            q_heads,
            kv_heads,
            q_len,
            kv_len,
            head_dim,
            causal,
            dtype,
            kv: KvCacheDtype::Auto,
        })
    }

    /// Device seconds of the attention op `kind` (uniform or batched) over the sequences
    /// `stats`: the batch model of the statistics, with the op's own FLOPs and bytes (for a
    /// uniform op, the roofline exactly as before the batch model).
    #[inline]
    fn attention_device(&self, kind: &OpKind, stats: &AttentionBatch) -> f64 {
        let heads = kind.attention_heads().expect("an attention op");
        let w = AttentionWork::with_totals(
            stats,
            &heads,
            self.kernels.section().attention.sms,
            kind.flops(),
            kind.mem_bytes(),
        );
        self.kernels.attention_work_device(&w)
    }

    /// Seconds of ONE attention kernel over a ragged batch (see
    /// [`crate::kernel_model::AttentionFit`]): the floor paid once, the work of every sequence
    /// cut into the kernel's units. A uniform batch costs what [`CostModel::attention`] gives.
    #[inline]
    pub fn attention_batch(&self, batch: &AttentionBatch, heads: &Heads) -> f64 {
        self.kernel(self.kernels.attention_batch_device(batch, heads))
    }

    /// Seconds for a memory-bound kernel of `kind` touching `bytes`.
    #[inline]
    pub fn elementwise_kind(&self, kind: ElemKind, bytes: u64) -> f64 {
        self.kernel(self.kernels.mem_device(kind, bytes, None))
    }

    /// Seconds for a memory-bound kernel (kind `other`) touching `bytes`.
    #[inline]
    pub fn elementwise(&self, bytes: u64) -> f64 {
        self.elementwise_kind(ElemKind::Other, bytes)
    }

    /// Seconds of an all-reduce of `bytes` per rank over `ranks` GPUs.
    #[inline]
    pub fn allreduce(&self, bytes: u64, ranks: u16) -> f64 {
        if ranks <= 1 || bytes == 0 {
            return 0.0;
        }
        self.kernel(self.kernels.allreduce(bytes, ranks))
    }

    /// Duration of any op on its stream: a kernel takes at least the launch interval
    /// ([`CostModel::device_duration`] is the time on the device alone).
    #[inline]
    pub fn duration(&self, kind: &OpKind) -> f64 {
        match *kind {
            OpKind::H2D { bytes, host, .. } => match &self.copy_curves {
                Some(c) => match host {
                    HostMemory::Pinned => c.h2d_pinned.time(bytes),
                    HostMemory::Pageable => c.h2d_pageable.time(bytes),
                },
                None => self.h2d(host).time(bytes),
            },
            OpKind::D2H { bytes, host, .. } => match &self.copy_curves {
                Some(c) => match host {
                    HostMemory::Pinned => c.d2h_pinned.time(bytes),
                    HostMemory::Pageable => c.d2h_pageable.time(bytes),
                },
                None => self.d2h(host).time(bytes),
            },
            OpKind::PeerSend { bytes } => self.peer.time(bytes),
            OpKind::AllReduce { bytes, ranks } => self.allreduce(bytes, ranks),
            OpKind::Gemm { .. }
            | OpKind::Attention { .. }
            | OpKind::BatchAttention { .. }
            | OpKind::Elementwise { .. } => self.kernel(self.device_duration(kind)),
        }
    }

    /// Seconds a host↔device copy occupies its copy engine when another copy follows it back to
    /// back: its setup (its latency less the profile's one-off completion, `[link]
    /// copy_completion_us`) plus its bytes at the link's sustained bandwidth (the affine view,
    /// [`CostModel::h2d`] / [`CostModel::d2h`]), at most its [`CostModel::duration`]. The rest of
    /// its duration is its completion and notification: the next copy on the engine starts
    /// under it, so a chain of `n` copies pays it once. Other ops: their duration.
    ///
    /// The engine uses it only with a host thread (`CostModel::with_host`), where copies are
    /// issued one by one (vLLM 0.4's swap: one `cudaMemcpyAsync` per block per layer); without
    /// one a copy occupies its engine for its whole duration, as before.
    pub fn occupancy(&self, kind: &OpKind) -> f64 {
        let d = self.duration(kind);
        let (affine, bytes) = match *kind {
            OpKind::H2D { bytes, host, .. } => (self.h2d(host), bytes),
            OpKind::D2H { bytes, host, .. } => (self.d2h(host), bytes),
            _ => return d,
        };
        if bytes == 0 {
            return d;
        }
        let setup = (affine.latency_s - self.copy_completion_s).max(0.0);
        d.min(setup + bytes as f64 * affine.secs_per_byte)
    }

    /// Time of an op on the device alone: a kernel's device time without the launch interval
    /// [`CostModel::duration`] clamps it to (kernels replayed inside a CUDA graph are not
    /// launched one by one); copies as [`CostModel::duration`].
    pub fn device_duration(&self, kind: &OpKind) -> f64 {
        match *kind {
            OpKind::H2D { .. } | OpKind::D2H { .. } | OpKind::PeerSend { .. } => {
                self.duration(kind)
            }
            OpKind::Gemm {
                m,
                n,
                k,
                batch,
                dtype,
                weights,
            } => self
                .kernels
                .gemm_device_weights(m, n, k, batch, dtype, weights),
            OpKind::Attention {
                batch,
                q_len,
                kv_len,
                causal,
                ..
            } => {
                self.attention_device(kind, &AttentionBatch::uniform(batch, q_len, kv_len, causal))
            }
            OpKind::BatchAttention { batch, .. } => self.attention_device(kind, &batch),
            OpKind::Elementwise { kind, bytes, rows } => {
                self.kernels.mem_device(kind, bytes, Some(rows))
            }
            OpKind::AllReduce { bytes, ranks } => self.kernels.allreduce(bytes, ranks),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_copy_occupies_its_engine_for_its_setup_and_bytes() {
        use crate::schedule::Payload;
        let hw = crate::HardwareProfile::preset("a100-40g-pcie4").unwrap();
        let cost = CostModel::new(&hw);
        let copy = OpKind::H2D {
            bytes: 1 << 20,
            payload: Payload::Cache,
            host: HostMemory::Pinned,
        };
        // 10 us latency, 2.3 us of it the completion: 7.7 us setup + 1 MiB at 24.5 GB/s.
        let d = cost.duration(&copy);
        let o = cost.occupancy(&copy);
        assert!((d - o - 2.3e-6).abs() < 1e-15, "{d} {o}");
        assert!((o - (7.7e-6 + (1u64 << 20) as f64 / 24.5e9)).abs() < 1e-15);
        // Kernels and empty copies hold their engine their whole duration.
        let k = OpKind::Elementwise {
            kind: ElemKind::Other,
            bytes: 1 << 20,
            rows: 0,
        };
        assert_eq!(cost.occupancy(&k), cost.duration(&k));
        let empty = OpKind::D2H {
            bytes: 0,
            payload: Payload::Cache,
            host: HostMemory::Pinned,
        };
        assert_eq!(cost.occupancy(&empty), 0.0);
    }

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

    fn calibrated() -> HardwareProfile {
        HardwareProfile::from_toml_str(
            r#"
base = "a100-40g-pcie4"
[calibration]
backend = "cuda"
device = "test"
driver = "test"
date = "2026-11-22"
kvplan_version = "0.1.0"
mode = "quick"
attention = { overhead_us = 5.0, tflops = 100.0, gbps = 1000.0 }
elementwise = { overhead_us = 3.0, gbps = 1200.0 }
[calibration.copy]
h2d_pinned = [[4096, 1.0e-5], [1048576, 6.0e-5], [67108864, 2.8e-3]]
d2h_pinned = [[4096, 1.0e-5], [67108864, 2.6e-3]]
h2d_pageable = [[4096, 2.0e-5], [67108864, 4.0e-3]]
d2h_pageable = [[4096, 2.0e-5], [67108864, 6.0e-3]]
[[calibration.gemm]]
dtype = "fp16"
m = 64
n = 12288
k = 4096
seconds = 1.5e-4
"#,
            "cal.toml",
        )
        .unwrap()
    }

    #[test]
    fn calibrated_tables_replace_the_roofline() {
        let hw = calibrated();
        let c = CostModel::new(&hw);
        // A measured GEMM shape takes exactly its measured time.
        let t = c.gemm(64, 12288, 4096, 1, DType::Fp16);
        assert!((t - 1.5e-4).abs() < 1e-15, "{t}");
        // Copies follow the curve, including between measured sizes.
        let op = |bytes| OpKind::H2D {
            bytes,
            payload: Payload::Cache,
            host: HostMemory::Pinned,
        };
        assert_eq!(c.duration(&op(1048576)), 6.0e-5);
        let mid = c.duration(&op(34_078_720));
        assert!(mid > 6.0e-5 && mid < 2.8e-3);
        // The affine view for planners: the last segment's bandwidth, the smallest copy's time.
        let a = c.h2d(HostMemory::Pinned);
        assert_eq!(a.latency_s, 1.0e-5);
        assert!((1.0 / a.secs_per_byte - 66060288.0 / 2.74e-3).abs() < 1.0);
        // Attention from the fitted roofline: 5 us + max(flops / 100 TFLOP/s, bytes / 1000 GB/s).
        let t = c.attention(1, 1, 1, 1, 1_000_000, 128, false, DType::Fp16);
        let bytes = 2.0 * (2.0 * 128.0 + 2.0 * 128.0 * 1e6);
        assert!((t - (5e-6 + bytes / 1e12)).abs() < 1e-12, "{t}");
        // An unmeasured dtype keeps the roofline.
        let uncal = CostModel::new(&HardwareProfile::preset("a100-40g-pcie4").unwrap());
        assert_eq!(
            c.gemm(64, 4096, 4096, 1, DType::Bf16),
            uncal.gemm(64, 4096, 4096, 1, DType::Bf16)
        );
    }

    #[test]
    fn calibrated_profile_round_trips_through_toml() {
        let hw = calibrated();
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/profiles/a100-40g-pcie4.toml"
        ))
        .unwrap();
        let mut file: crate::hardware::ProfileFile = toml::from_str(&text).unwrap();
        file.calibration = hw.calibration.clone();
        let back = HardwareProfile::from_toml_str(&file.to_toml(), "written").unwrap();
        assert_eq!(back.calibration, hw.calibration);
        assert_eq!(back.link, hw.link);
    }

    #[test]
    fn bad_calibration_tables_name_the_field() {
        let e = HardwareProfile::from_toml_str(
            "base = \"t4\"\n[calibration]\nbackend=\"cpu\"\ndevice=\"x\"\ndriver=\"x\"\ndate=\"x\"\nkvplan_version=\"x\"\nmode=\"quick\"\nattention = { overhead_us = 1.0, tflops = 1.0, gbps = 1.0 }\nelementwise = { overhead_us = 1.0, gbps = 1.0 }\n[calibration.copy]\nh2d_pinned = [[4096, 1e-5]]\nd2h_pinned = [[1, 1e-5], [2, 2e-5]]\nh2d_pageable = [[1, 1e-5], [2, 2e-5]]\nd2h_pageable = [[1, 1e-5], [2, 2e-5]]\n",
            "cal.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("calibration.copy.h2d_pinned") && e.contains("at least 2"),
            "{e}"
        );
    }
}
