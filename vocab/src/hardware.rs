//! Hardware profiles: GPU compute and memory, the host link, host RAM, the peer link.
//!
//! Presets live in `vocab/profiles/*.toml`, every number with its source in a comment
//! (the show option of `kvplan hardware` prints the file). A user's profile file either stands alone
//! or names a preset or another profile file in `base = "..."` (a path relative to the naming
//! file's directory) and overrides any subset of its fields. Every value must lie in the
//! physical ranges of [`limits`].

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::calibration::Calibration;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernel_model::{AttentionFit, KernelsSection};
use crate::serving::ServingSection;
use limits::Range;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
const GB: f64 = 1e9;

macro_rules! presets {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!("../profiles/", $name, ".toml")))),*]
    };
}

/// `(name, TOML text)` of every preset, in the order `kvplan hardware` lists them.
pub const PRESETS: &[(&str, &str)] = presets![
    "a100-40g-pcie4",
    "a100-80g-sxm",
    "h100-sxm",
    "h100-pcie",
    "h100-nvl",
    "h200",
    "b200",
    "mi300x",
    "l40s",
    "l4",
    "a10g",
    "rtx-pro-6000",
    "rtx-5090",
    "rtx-4090",
    "quadro-rtx-5000",
    "t4",
];

pub use crate::limits;

/// Whether the host link can copy both ways at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Duplex {
    /// Separate H2D and D2H copy engines run concurrently (every PCIe GPU with two copy engines).
    Full,
    /// One copy at a time.
    Half,
}

/// Peak dense FLOP/s per dtype.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct PeakFlops {
    /// FP16 (tensor cores where present).
    pub fp16: f64,
    /// BF16.
    pub bf16: f64,
    /// FP32.
    pub fp32: f64,
    /// FP8 tensor cores (dense), where the GPU has them: fp8-weight GEMMs run at it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fp8: Option<f64>,
}

impl PeakFlops {
    /// Peak FLOP/s for `dtype`.
    pub fn get(&self, dtype: DType) -> f64 {
        match dtype {
            DType::Fp16 => self.fp16,
            DType::Bf16 => self.bf16,
            DType::Fp32 => self.fp32,
        }
    }
}

/// The GPU.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gpu {
    /// Marketing / `nvidia-smi` name.
    pub name: String,
    /// Device memory, bytes.
    pub memory_bytes: u64,
    /// Memory a plan may not use (context, workspaces), bytes.
    pub reserved_bytes: u64,
    /// Device memory bandwidth, bytes/s.
    pub mem_bandwidth: f64,
    /// Peak FLOP/s per dtype.
    pub peak_flops: PeakFlops,
    /// CUDA compute capability as `major.minor` (`8.9`; ROCm GPUs as PyTorch reports them,
    /// MI300X `9.4`), what vLLM checks a quantisation against; `None`: not recorded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<f64>,
    /// Fixed cost added to every kernel, seconds.
    pub kernel_overhead_s: f64,
    /// What one GPU of this kind costs per hour, US dollars (`kvplan plan-deployment` prices
    /// candidates with it; `serve-capacity` gives dollars per million tokens). Every preset
    /// gives a public on-demand list price, except where none could be cited.
    pub price_usd_per_hour: Option<f64>,
    /// Where the price comes from: a provider and its page for a preset, `given in FILE` for a
    /// profile that sets a price without `price_source`, the caller's wording (the CLI's price
    /// option) for [`HardwareProfile::with_price`]. `Some` whenever the price is.
    pub price_source: Option<String>,
    /// When the price was quoted (`2026-05-07`, `2026-05`), as its source dates it.
    pub price_date: Option<String>,
    /// Board power (TDP), watts, where the vendor publishes it.
    pub power_watts: Option<f64>,
}

impl Gpu {
    /// Memory a plan may use: `memory - reserved`.
    pub fn usable_bytes(&self) -> u64 {
        self.memory_bytes.saturating_sub(self.reserved_bytes)
    }

    /// The fp8 tensor peak fp8-weight GEMMs run at: the profile's, on compute capability of
    /// at least 8.9 (or none recorded); `None` below, where vLLM runs fp8 weights through
    /// Marlin at the 16-bit rate.
    pub fn fp8_flops(&self) -> Option<f64> {
        match self.compute_capability {
            Some(cc) if cc + 1e-9 < 8.9 => None,
            _ => self.peak_flops.fp8,
        }
    }
}

/// Fractions of peak that kernels sustain (the roofline's efficiency factors).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Efficiency {
    /// Compute-bound GEMMs.
    pub gemm: f64,
    /// Compute-bound attention.
    pub attention: f64,
    /// Memory-bound kernels (fraction of peak memory bandwidth).
    pub memory: f64,
}

/// The host↔device link.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostLink {
    /// e.g. `PCIe 4.0 x16`.
    pub kind: String,
    /// Full or half duplex.
    pub duplex: Duplex,
    /// Pinned host→device bandwidth, bytes/s.
    pub h2d_pinned: f64,
    /// Pinned device→host bandwidth, bytes/s.
    pub d2h_pinned: f64,
    /// Pageable host→device bandwidth, bytes/s.
    pub h2d_pageable: f64,
    /// Pageable device→host bandwidth, bytes/s.
    pub d2h_pageable: f64,
    /// Per-transfer latency host→device, seconds.
    pub h2d_latency_s: f64,
    /// Per-transfer latency device→host, seconds.
    pub d2h_latency_s: f64,
    /// The part of each direction's latency that a chain of back-to-back copies pays once
    /// (the last copy's completion and its notification), seconds; the rest of the latency
    /// occupies the copy engine per copy (DMA setup). At most either latency. Used only with a
    /// host thread (an implementation profile), where copies are issued one by one; see
    /// [`crate::CostModel::copy_completion`].
    pub copy_completion_s: f64,
}

/// Host machine.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Host {
    /// Host RAM available for offloaded KV cache, activations and weights, bytes.
    pub ram_bytes: u64,
}

/// Device-to-device link (multi-GPU plans).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeerLink {
    /// e.g. `NVLink 4`.
    pub kind: String,
    /// One-direction bandwidth, bytes/s.
    pub bandwidth: f64,
    /// Per-transfer latency, seconds.
    pub latency_s: f64,
}

/// The network between GPUs of different servers, per GPU (`[interconnect]`): what a KV cache
/// crosses from a prefill replica to a decode replica (vLLM's NIXL connector reads it with
/// RDMA).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Interconnect {
    /// e.g. `InfiniBand NDR`.
    pub kind: String,
    /// One-direction bandwidth per GPU, bytes/s.
    pub bandwidth: f64,
    /// Latency of one transfer, seconds.
    pub latency_s: f64,
    /// Fixed cost of one transfer (posting it, its completion and notification), seconds.
    pub per_transfer_s: f64,
}

/// `[interconnect]` of a profile that gives none: one 400 Gb/s InfiniBand NDR NIC per GPU (a
/// ConnectX-7 per GPU, as in DGX H100 and HGX systems), 45 GB/s of RDMA reads of its 50 GB/s
/// line rate (an estimate: RDMA reads of MiB-sized descriptors reach ~90% of line rate), 5 us per
/// transfer and 20 us to post one and hear its notification (estimates; calibrate to replace).
impl Default for Interconnect {
    fn default() -> Self {
        Interconnect {
            kind: "InfiniBand NDR 400G (default)".into(),
            bandwidth: 45e9,
            latency_s: 5e-6,
            per_transfer_s: 20e-6,
        }
    }
}

/// A validated hardware profile. Construct with [`HardwareProfile::resolve`],
/// [`HardwareProfile::preset`] or [`HardwareProfile::from_toml_str`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HardwareProfile {
    /// Profile name.
    pub name: String,
    /// One line for listings.
    pub description: String,
    /// The GPU.
    pub gpu: Gpu,
    /// Roofline efficiency factors.
    pub efficiency: Efficiency,
    /// Host link.
    pub link: HostLink,
    /// Host machine.
    pub host: Host,
    /// Device-to-device link.
    pub peer: PeerLink,
    /// The network to GPUs of other servers (`[interconnect]`, or [`Interconnect::default`]).
    pub interconnect: Interconnect,
    /// The kernel model by shape (`[kernels]`); `None`: derived from `gpu` and `efficiency`
    /// (see [`crate::cost::derived_kernels`]).
    pub kernels: Option<KernelsSection>,
    /// `[attention]`: the attention kernel's model for a profile without `[kernels]`, whose
    /// other kernels stay on the roofline (with `[kernels]`, `[kernels.attention]` holds it).
    pub attention: Option<AttentionFit>,
    /// Measured tables (calibrated profiles only).
    pub calibration: Option<Calibration>,
    /// Host-side costs of a serving engine (`[serving]`, or the built-in defaults).
    pub serving: ServingSection,
}

// ---- file format -----------------------------------------------------------------------------

/// A profile file as written (units as in the file: GiB, GB/s, TFLOP/s, microseconds).
/// [`HardwareProfile`] is its checked form; `kvplan calibrate` writes one of these.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileFile {
    /// Profile name.
    pub name: String,
    /// One line for listings.
    #[serde(default)]
    pub description: String,
    /// `[gpu]`.
    pub gpu: GpuSection,
    /// `[efficiency]`.
    pub efficiency: EfficiencySection,
    /// `[link]`.
    pub link: LinkSection,
    /// `[host]`.
    pub host: HostSection,
    /// `[peer]`.
    pub peer: PeerSection,
    /// `[interconnect]`: the network to other servers' GPUs (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interconnect: Option<InterconnectSection>,
    /// `[kernels]`: the kernel model by shape, when fitted or calibrated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernels: Option<KernelsSection>,
    /// `[attention]`: the attention kernel's model (as `[kernels.attention]`) for a profile
    /// without `[kernels]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attention: Option<AttentionFit>,
    /// `[calibration]`: measured tables, when the profile was calibrated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Calibration>,
    /// `[serving]`: a serving engine's host-side costs, when given or fitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<ServingSection>,
}

/// `[gpu]` of a profile file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSection {
    /// Device name.
    pub name: String,
    /// Device memory, GiB.
    pub memory_gib: f64,
    /// Memory a plan may not use, GiB.
    pub reserved_gib: f64,
    /// Memory bandwidth, GB/s.
    pub hbm_gbps: f64,
    /// Fixed cost per kernel, microseconds.
    pub kernel_overhead_us: f64,
    /// Peak dense TFLOP/s per dtype.
    pub peak_tflops: PeakSection,
    /// CUDA compute capability, `major.minor` (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<f64>,
    /// Price of one GPU per hour, US dollars (optional; your contract's or your cloud's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_usd_per_hour: Option<f64>,
    /// Where the price comes from (provider and page). A file that sets `price_usd_per_hour`
    /// over a `base` without its own `price_source` does not inherit the base's source or date:
    /// its source becomes `given in FILE`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_source: Option<String>,
    /// When the price was quoted, as its source dates it (`2026-05-07`, `2026-05`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price_date: Option<String>,
    /// Board power (TDP), watts (optional; the vendor's datasheet figure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_watts: Option<f64>,
}

/// `[gpu.peak_tflops]` of a profile file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeakSection {
    /// FP16.
    pub fp16: f64,
    /// BF16.
    pub bf16: f64,
    /// FP32.
    pub fp32: f64,
    /// FP8 tensor (dense), where the GPU has it (optional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fp8: Option<f64>,
}

/// `[efficiency]` of a profile file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EfficiencySection {
    /// GEMM fraction of peak.
    pub gemm: f64,
    /// Attention fraction of peak.
    pub attention: f64,
    /// Memory-bound fraction of peak bandwidth.
    pub memory: f64,
}

/// `[link]` of a profile file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSection {
    /// e.g. `PCIe 4.0 x16`.
    pub kind: String,
    /// `full` or `half`.
    pub duplex: Duplex,
    /// GB/s.
    pub h2d_pinned_gbps: f64,
    /// GB/s.
    pub d2h_pinned_gbps: f64,
    /// GB/s.
    pub h2d_pageable_gbps: f64,
    /// GB/s.
    pub d2h_pageable_gbps: f64,
    /// Microseconds.
    pub h2d_latency_us: f64,
    /// Microseconds.
    pub d2h_latency_us: f64,
    /// Microseconds: the one-off part of a copy's latency (completion and notification), paid
    /// once per chain of back-to-back copies; absent: [`DEFAULT_COPY_COMPLETION_US`], at most
    /// either latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_completion_us: Option<f64>,
}

/// The one-off part of a copy's latency when a profile does not give `[link]
/// copy_completion_us`, microseconds: on the H200 host (PCIe 5.0, pinned) one copy timed alone
/// takes 4.5-4.6 us (`calibrate/profiles/h200-kvplan-exec.toml`, the calibrated curves' smallest
/// copies) while back-to-back copies occupy the copy engine 2.2 us each plus their bytes
/// (`calibrate/data/host_costs/swap_blocks_h200.csv`): the 2.3 us between is the completion a
/// chain pays once.
pub const DEFAULT_COPY_COMPLETION_US: f64 = 2.3;

/// `[host]` of a profile file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSection {
    /// Host RAM, GiB.
    pub ram_gib: f64,
}

/// `[peer]` of a profile file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerSection {
    /// e.g. `NVLink 4`.
    pub kind: String,
    /// One direction, GB/s.
    pub gbps: f64,
    /// Microseconds.
    pub latency_us: f64,
}

/// `[interconnect]` of a profile file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterconnectSection {
    /// e.g. `InfiniBand NDR`, `RoCE 400G`, `NVLink 4`.
    pub kind: String,
    /// One direction per GPU, GB/s.
    pub gbps: f64,
    /// Microseconds per transfer.
    pub latency_us: f64,
    /// Microseconds to post a transfer and hear its completion.
    #[serde(default)]
    pub per_transfer_us: f64,
}

impl ProfileFile {
    /// The file as TOML text.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("a profile serializes to TOML")
    }

    /// Checks the file and converts it to a [`HardwareProfile`]; `origin` prefixes errors.
    pub fn validate(self, origin: &str) -> Result<HardwareProfile> {
        validate(self, origin)
    }
}

struct Check<'a> {
    origin: &'a str,
}

impl Check<'_> {
    /// `v` (in the file's unit, `scale` SI units each) converted to SI units, if inside `range`.
    fn range(&self, field: &str, v: f64, scale: f64, unit: &str, range: Range) -> Result<f64> {
        range.check(format!("{}: {field}", self.origin), v, scale, unit)
    }

    fn non_negative(&self, field: &str, v: f64) -> Result<f64> {
        if v.is_finite() && v >= 0.0 {
            Ok(v)
        } else {
            Err(Error::invalid(
                format!("{}: {field}", self.origin),
                v,
                "must be zero or more",
            ))
        }
    }
}

fn validate(file: ProfileFile, origin: &str) -> Result<HardwareProfile> {
    use limits::{BANDWIDTH, EFFICIENCY, FLOPS, LATENCY, MEMORY};
    let s = file;
    let c = Check { origin };
    if let Some(cal) = &s.calibration {
        cal.check(origin)?;
    }
    if let Some(k) = &s.kernels {
        k.check(origin)?;
    }
    if let Some(sv) = &s.serving {
        sv.check(origin)?;
    }
    if let Some(a) = &s.attention {
        if s.kernels.is_some() {
            return Err(Error::invalid(
                format!("{origin}: attention"),
                "[attention] next to [kernels]",
                "a profile with [kernels] gives its attention model in [kernels.attention]; \
                 move the table there",
            ));
        }
        a.check(origin, "attention")?;
    }
    let memory = c.range("gpu.memory_gib", s.gpu.memory_gib, GIB, "GiB", MEMORY)?;
    let reserved = c.non_negative("gpu.reserved_gib", s.gpu.reserved_gib)? * GIB;
    if reserved >= memory {
        return Err(Error::invalid(
            format!("{origin}: gpu.reserved_gib"),
            s.gpu.reserved_gib,
            format!("must be less than gpu.memory_gib ({})", s.gpu.memory_gib),
        ));
    }
    let gbps = |field: &str, v: f64| c.range(field, v, GB, "GB/s", BANDWIDTH);
    let tflops = |field: &str, v: f64| c.range(field, v, 1e12, "TFLOP/s", FLOPS);
    let micros = |field: &str, v: f64| c.range(field, v, 1e-6, "us", LATENCY);
    let fraction = |field: &str, v: f64| c.range(field, v, 1.0, "of peak", EFFICIENCY);
    // The latencies first: the one-off part of a copy's latency is checked against them.
    let h2d_latency_s = micros("link.h2d_latency_us", s.link.h2d_latency_us)?;
    let d2h_latency_s = micros("link.d2h_latency_us", s.link.d2h_latency_us)?;
    let copy_completion_s = copy_completion(&c, &s.link)?;
    let (price_usd_per_hour, price_source, price_date) = price(&c, &s.gpu)?;
    Ok(HardwareProfile {
        name: s.name,
        description: s.description,
        gpu: Gpu {
            name: s.gpu.name,
            memory_bytes: memory as u64,
            reserved_bytes: reserved as u64,
            mem_bandwidth: gbps("gpu.hbm_gbps", s.gpu.hbm_gbps)?,
            peak_flops: PeakFlops {
                fp16: tflops("gpu.peak_tflops.fp16", s.gpu.peak_tflops.fp16)?,
                bf16: tflops("gpu.peak_tflops.bf16", s.gpu.peak_tflops.bf16)?,
                fp32: tflops("gpu.peak_tflops.fp32", s.gpu.peak_tflops.fp32)?,
                fp8: match s.gpu.peak_tflops.fp8 {
                    Some(v) => Some(tflops("gpu.peak_tflops.fp8", v)?),
                    None => None,
                },
            },
            compute_capability: match s.gpu.compute_capability {
                Some(cc) if !(cc.is_finite() && (1.0..=20.0).contains(&cc)) => {
                    return Err(Error::invalid(
                        format!("{origin}: gpu.compute_capability"),
                        limits::show(cc),
                        "must be a CUDA compute capability major.minor from 1.0 to 20.0 (8.9)",
                    ));
                }
                cc => cc,
            },
            kernel_overhead_s: micros("gpu.kernel_overhead_us", s.gpu.kernel_overhead_us)?,
            price_usd_per_hour,
            price_source,
            price_date,
            power_watts: match s.gpu.power_watts {
                Some(w) => Some(c.range("gpu.power_watts", w, 1.0, "W", limits::POWER)?),
                None => None,
            },
        },
        efficiency: Efficiency {
            gemm: fraction("efficiency.gemm", s.efficiency.gemm)?,
            attention: fraction("efficiency.attention", s.efficiency.attention)?,
            memory: fraction("efficiency.memory", s.efficiency.memory)?,
        },
        link: HostLink {
            kind: s.link.kind,
            duplex: s.link.duplex,
            h2d_pinned: gbps("link.h2d_pinned_gbps", s.link.h2d_pinned_gbps)?,
            d2h_pinned: gbps("link.d2h_pinned_gbps", s.link.d2h_pinned_gbps)?,
            h2d_pageable: gbps("link.h2d_pageable_gbps", s.link.h2d_pageable_gbps)?,
            d2h_pageable: gbps("link.d2h_pageable_gbps", s.link.d2h_pageable_gbps)?,
            h2d_latency_s,
            d2h_latency_s,
            copy_completion_s,
        },
        host: Host {
            ram_bytes: c.range("host.ram_gib", s.host.ram_gib, GIB, "GiB", MEMORY)? as u64,
        },
        peer: PeerLink {
            kind: s.peer.kind,
            bandwidth: gbps("peer.gbps", s.peer.gbps)?,
            latency_s: micros("peer.latency_us", s.peer.latency_us)?,
        },
        interconnect: match s.interconnect {
            None => Interconnect::default(),
            Some(i) => Interconnect {
                kind: i.kind,
                bandwidth: gbps("interconnect.gbps", i.gbps)?,
                latency_s: micros("interconnect.latency_us", i.latency_us)?,
                per_transfer_s: c
                    .non_negative("interconnect.per_transfer_us", i.per_transfer_us)?
                    * 1e-6,
            },
        },
        kernels: s.kernels,
        attention: s.attention,
        calibration: s.calibration,
        serving: s.serving.unwrap_or_default(),
    })
}

/// `[gpu]`'s price, its source and its date, checked: a price more than 0 ([`limits::PRICE`]),
/// and a source and a date, if given, that say something and come with a price.
fn price(c: &Check, gpu: &GpuSection) -> Result<(Option<f64>, Option<String>, Option<String>)> {
    let field = |f: &str| format!("{}: gpu.{f}", c.origin);
    let usd = match gpu.price_usd_per_hour {
        Some(p) if !limits::PRICE.contains(p) => {
            return Err(Error::invalid(
                field("price_usd_per_hour"),
                limits::show(p),
                "must be more than 0 and at most 10000 US dollars per GPU-hour: one GPU's \
                 hourly price, e.g. price_usd_per_hour = 2.5",
            ));
        }
        p => p,
    };
    for (name, v) in [
        ("price_source", &gpu.price_source),
        ("price_date", &gpu.price_date),
    ] {
        match v {
            Some(t) if t.trim().is_empty() => {
                return Err(Error::invalid(
                    field(name),
                    "\"\"",
                    "must say something: where the price comes from (provider and page) and when it was quoted",
                ));
            }
            Some(t) if usd.is_none() => {
                return Err(Error::invalid(
                    field(name),
                    format!("{t:?}"),
                    "cites a price the profile does not give: add gpu.price_usd_per_hour",
                ));
            }
            _ => {}
        }
    }
    let source = match (&gpu.price_source, usd) {
        (Some(s), _) => Some(s.trim().to_string()),
        (None, Some(_)) => Some(format!("given in {}", c.origin)),
        (None, None) => None,
    };
    Ok((
        usd,
        source,
        gpu.price_date.as_ref().map(|d| d.trim().to_string()),
    ))
}

/// `[link] copy_completion_us` checked against the latencies it is part of, or its default.
fn copy_completion(c: &Check, link: &LinkSection) -> Result<f64> {
    let latency = link.h2d_latency_us.min(link.d2h_latency_us);
    let us = match link.copy_completion_us {
        None => DEFAULT_COPY_COMPLETION_US.min(latency),
        Some(v) => {
            let v = c.non_negative("link.copy_completion_us", v)?;
            if v > latency {
                return Err(Error::invalid(
                    format!("{}: link.copy_completion_us", c.origin),
                    v,
                    format!(
                        "must be at most link.h2d_latency_us and link.d2h_latency_us ({} us): \
                         it is the part of each copy's latency a chain of copies pays once",
                        limits::show(latency)
                    ),
                ));
            }
            v
        }
    };
    Ok(us * 1e-6)
}

/// Converts a `toml` error into a one-line [`Error::Parse`] with the line number.
pub(crate) fn toml_error(origin: &str, text: &str, e: &toml::de::Error) -> Error {
    let line = crate::error::toml_line(text, e);
    let message = crate::error::toml_message(e.message());
    Error::Parse {
        origin: origin.to_string(),
        message: match line {
            Some(l) => format!("line {l}: {message}"),
            None => message,
        },
    }
}

/// Whether a profile table sets `[gpu] price_usd_per_hour`; if it does without a
/// `price_source`, its source becomes `given in ORIGIN`, so that a price never cites a source
/// it did not come from (a base's, whose price it replaces).
fn cite_own_price(table: &mut toml::Table, origin: &str) -> bool {
    let Some(toml::Value::Table(gpu)) = table.get_mut("gpu") else {
        return false;
    };
    if !gpu.contains_key("price_usd_per_hour") {
        return false;
    }
    if !gpu.contains_key("price_source") {
        gpu.insert(
            "price_source".into(),
            toml::Value::String(format!("given in {origin}")),
        );
    }
    true
}

/// Recursively overlays `over` onto `base` (tables merge, everything else replaces).
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// Whether a hardware value (the `hardware` field or option) or a `base` names a file rather
/// than a preset.
fn looks_like_path(s: &str) -> bool {
    s.contains('/') || s.contains('\\') || s.ends_with(".toml")
}

fn file_stem(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "profile".into())
}

/// Checks a merged profile table and converts it; `text` is the top file's, for line numbers.
fn from_table(table: toml::Table, origin: &str, text: &str) -> Result<HardwareProfile> {
    let raw: ProfileFile = match table.clone().try_into() {
        Ok(raw) => raw,
        Err(e) => {
            // A merged table's error has no place, and a type or range error names no field
            // ("invalid type: string \"x\", expected f64"): the key it is about, and its line
            // where this file writes it.
            let message = crate::error::toml_message(e.message());
            let key = crate::error::toml_table_key::<ProfileFile>(&table);
            let line = key
                .as_deref()
                .and_then(|k| crate::error::toml_line_of(text, k));
            let named = |k: &str| {
                let last = k.rsplit('.').next().unwrap_or(k);
                message.contains(&format!("`{last}`"))
            };
            let message = match key {
                Some(k) if !named(&k) => format!("{k}: {message}"),
                _ => message,
            };
            return Err(Error::Parse {
                origin: origin.to_string(),
                message: match line {
                    Some(l) => format!("line {l}: {message}"),
                    None => message,
                },
            });
        }
    };
    validate(raw, origin)
}

/// A profile's TOML table with its `base` chain merged underneath. `dir` resolves a relative
/// `base` path (`None`: the current directory); `chain` holds the files being read (canonical
/// path, as shown), outermost first, so that a file that is its own base is an error.
fn merged_table(
    text: &str,
    origin: &str,
    default_name: &str,
    dir: Option<&Path>,
    chain: &mut Vec<(PathBuf, String)>,
) -> Result<toml::Table> {
    let mut table: toml::Table = toml::from_str(text).map_err(|e| toml_error(origin, text, &e))?;
    let sets_price = cite_own_price(&mut table, origin);
    if let Some(base) = table.remove("base") {
        let base = base.as_str().ok_or_else(|| Error::Parse {
            origin: origin.to_string(),
            message: "`base` must be a string: a preset name or the path of a profile file".into(),
        })?;
        let mut merged = base_table(base, origin, dir, chain)?;
        if !table.contains_key("name") {
            merged.insert("name".into(), toml::Value::String(default_name.to_string()));
        }
        if !table.contains_key("description") {
            let d = merged
                .get("description")
                .and_then(|v| v.as_str())
                .unwrap_or_default();
            merged.insert(
                "description".into(),
                toml::Value::String(format!("{d} (overrides from {origin})")),
            );
        }
        // Measurements of this machine (`[calibration]`, from an older `kvplan calibrate` that
        // wrote no `[kernels]`) outrank the base's kernel model: drop the inherited one so the
        // cost model derives kernels from the calibration.
        if table.contains_key("calibration") && !table.contains_key("kernels") {
            merged.remove("kernels");
        }
        // Likewise for an inherited `[attention]` (the roofline's attention override): this
        // file's own kernel model or measurements replace it.
        if (table.contains_key("calibration") || table.contains_key("kernels"))
            && !table.contains_key("attention")
        {
            merged.remove("attention");
        }
        // A price set here is this file's: the base's source and date cite another price.
        if sets_price && let Some(toml::Value::Table(gpu)) = merged.get_mut("gpu") {
            gpu.remove("price_source");
            gpu.remove("price_date");
        }
        merge(&mut merged, table);
        table = merged;
    } else if !table.contains_key("name") {
        table.insert("name".into(), toml::Value::String(default_name.to_string()));
    }
    Ok(table)
}

/// The table `base = "..."` of `origin` names: a preset, or a profile file (resolved like
/// the `hardware` option and the base option of `kvplan calibrate`), itself merged with its own base and checked as a
/// whole profile so that its errors name its file.
fn base_table(
    base: &str,
    origin: &str,
    dir: Option<&Path>,
    chain: &mut Vec<(PathBuf, String)>,
) -> Result<toml::Table> {
    let path = dir.map_or_else(|| PathBuf::from(base), |d| d.join(base));
    if !looks_like_path(base) {
        if let Ok(text) = HardwareProfile::preset_text(base) {
            let preset = format!("preset {base}");
            return merged_table(text, &preset, base, None, chain);
        }
        if !path.is_file() {
            return Err(HardwareProfile::unknown(base));
        }
    }
    let field = format!("{origin}: base");
    let canonical = path.canonicalize().map_err(|e| {
        Error::invalid(
            &field,
            base,
            format!(
                "cannot read {}: {e}; use a preset name or a profile path relative to {origin}",
                path.display()
            ),
        )
    })?;
    let shown = path.display().to_string();
    if let Some(i) = chain.iter().position(|(p, _)| *p == canonical) {
        let cycle: Vec<&str> = chain[i..]
            .iter()
            .map(|(_, s)| s.as_str())
            .chain([shown.as_str()])
            .collect();
        return Err(Error::invalid(
            &field,
            base,
            format!(
                "include cycle {}; a profile cannot be its own base",
                cycle.join(" -> ")
            ),
        ));
    }
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Io {
        path: path.clone(),
        source,
    })?;
    chain.push((canonical, shown.clone()));
    let table = merged_table(&text, &shown, &file_stem(&path), path.parent(), chain);
    chain.pop();
    let table = table?;
    from_table(table.clone(), &shown, &text)?;
    Ok(table)
}

impl HardwareProfile {
    /// Names of the embedded presets.
    pub fn preset_names() -> Vec<String> {
        PRESETS.iter().map(|(n, _)| n.to_string()).collect()
    }

    /// Every embedded preset, in [`preset_names`](Self::preset_names) order.
    pub fn presets() -> Result<Vec<Self>> {
        PRESETS.iter().map(|(n, _)| Self::preset(n)).collect()
    }

    fn unknown(name: &str) -> Error {
        let known = Self::preset_names();
        Error::UnknownHardware {
            name: name.to_string(),
            close: crate::error::close_matches(name, &known),
            known,
        }
    }

    /// The TOML text of a preset, with its source comments.
    pub fn preset_text(name: &str) -> Result<&'static str> {
        PRESETS
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, t)| *t)
            .ok_or_else(|| Self::unknown(name))
    }

    /// A preset by name.
    pub fn preset(name: &str) -> Result<Self> {
        let text = Self::preset_text(name)?;
        Self::from_toml_str(text, &format!("preset {name}"))
    }

    /// A preset name, or else a path to a profile TOML file.
    pub fn resolve(name_or_path: &str) -> Result<Self> {
        let looks_like_path = looks_like_path(name_or_path);
        if !looks_like_path && Self::preset_text(name_or_path).is_ok() {
            return Self::preset(name_or_path);
        }
        let path = Path::new(name_or_path);
        if path.is_file() {
            return Self::from_file(path);
        }
        if let Some(e) =
            crate::error::not_a_file(path, "hardware", "a hardware profile (a TOML file)")
        {
            return Err(e);
        }
        if looks_like_path {
            return Err(Error::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            });
        }
        Err(Self::unknown(name_or_path))
    }

    /// Reads a profile file. Its `name` defaults to the file stem; a relative `base` path is
    /// taken relative to the file's directory.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let origin = path.display().to_string();
        let mut chain = Vec::new();
        if let Ok(canonical) = path.canonicalize() {
            chain.push((canonical, origin.clone()));
        }
        let table = merged_table(&text, &origin, &file_stem(path), path.parent(), &mut chain)?;
        from_table(table, &origin, &text)
    }

    /// Parses profile TOML. `origin` prefixes errors; a relative `base` path is taken relative
    /// to the current directory.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Self> {
        let table = merged_table(text, origin, "profile", None, &mut Vec::new())?;
        from_table(table, origin, text)
    }

    /// Replaces the GPU's price with `usd` per GPU-hour from `source` (e.g. `given on the
    /// command line`); the profile's own source and date go with the price they cited. An error
    /// names the field `` `plan.prices` `` (a front end words it) unless `usd` lies in
    /// [`limits::PRICE`].
    pub fn with_price(&mut self, usd: f64, source: &str) -> Result<()> {
        check_price(PRICES, usd)?;
        self.gpu.price_usd_per_hour = Some(usd);
        self.gpu.price_source = Some(source.to_string());
        self.gpu.price_date = None;
        Ok(())
    }

    /// Host→device bandwidth (bytes/s) for pinned or pageable host memory.
    pub fn h2d_bandwidth(&self, pinned: bool) -> f64 {
        if pinned {
            self.link.h2d_pinned
        } else {
            self.link.h2d_pageable
        }
    }

    /// Device→host bandwidth (bytes/s) for pinned or pageable host memory.
    pub fn d2h_bandwidth(&self, pinned: bool) -> f64 {
        if pinned {
            self.link.d2h_pinned
        } else {
            self.link.d2h_pageable
        }
    }
}

/// The field of the price overrides, in backquotes: its messages name it so, and a front end
/// words it (the CLI as its price option).
const PRICES: &str = "`plan.prices`";

/// How the price overrides are written, for their error messages (fields in backquotes).
const PRICE_FORM: &str = "give NAME=USD[,NAME=USD...], NAME as `hardware` names it and USD one \
                          GPU's price per hour, e.g. `plan.prices` h100-sxm=2.5";

fn check_price(field: &str, usd: f64) -> Result<f64> {
    if limits::PRICE.contains(usd) {
        Ok(usd)
    } else {
        Err(Error::invalid(
            field,
            limits::show(usd),
            "must be more than 0 and at most 10000 US dollars per GPU-hour, e.g. `plan.prices` h100-sxm=2.5",
        ))
    }
}

/// The prices of `NAME=USD[,NAME=USD...]` (the CLI's price option), in the order given: each NAME a
/// preset or a profile path as a hardware list takes it, each USD one GPU's price per hour (more than 0, at most
/// [`limits::PRICE`]'s). A piece that is not `NAME=USD`, a price out of range and a NAME given
/// twice (presets case-insensitively) are errors naming the field that show the form.
///
/// ```
/// let p = kvplan_vocab::hardware::parse_price_overrides("h100-sxm=2.5, a100-80g-sxm=1.2")?;
/// assert_eq!(p, [("h100-sxm".to_string(), 2.5), ("a100-80g-sxm".to_string(), 1.2)]);
/// assert!(kvplan_vocab::hardware::parse_price_overrides("h100-sxm=0").is_err());
/// # Ok::<(), kvplan_vocab::Error>(())
/// ```
pub fn parse_price_overrides(text: &str) -> Result<Vec<(String, f64)>> {
    let mut out: Vec<(String, f64)> = Vec::new();
    if text.trim().is_empty() {
        return Err(Error::invalid(PRICES, "\"\"", PRICE_FORM));
    }
    for piece in text.split(',') {
        let piece = piece.trim();
        let Some((name, usd)) = piece.split_once('=') else {
            return Err(Error::invalid(PRICES, format!("{piece:?}"), PRICE_FORM));
        };
        let (name, usd) = (name.trim(), usd.trim());
        if name.is_empty() || usd.is_empty() {
            return Err(Error::invalid(PRICES, format!("{piece:?}"), PRICE_FORM));
        }
        let usd: f64 = usd
            .parse()
            .map_err(|_| Error::invalid(PRICES, format!("{piece:?}"), PRICE_FORM))?;
        check_price(&format!("{PRICES} {name}"), usd)?;
        let same = |n: &str| n == name || (!looks_like_path(name) && n.eq_ignore_ascii_case(name));
        if out.iter().any(|(n, _)| same(n)) {
            return Err(Error::invalid(
                PRICES,
                format!("{piece:?}"),
                format!("prices {name} twice; give each NAME once, e.g. {PRICES} h100-sxm=2.5"),
            ));
        }
        out.push((name.to_string(), usd));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_parses_and_cites_its_numbers() {
        for (name, text) in PRESETS {
            let p = HardwareProfile::preset(name).unwrap();
            assert_eq!(&p.name, name);
            // Every numeric assignment carries a source or reasoning comment on its own line,
            // or sits in a table whose header line names the source (e.g. `[gpu.peak_tflops]`).
            let mut header_cited = false;
            for line in text.lines() {
                let t = line.trim();
                if t.starts_with('[') {
                    header_cited = t.contains('#');
                } else if !t.starts_with('#') && t.contains('=') {
                    let value = t.split('=').nth(1).unwrap().trim();
                    let numeric = value.chars().next().is_some_and(|c| c.is_ascii_digit());
                    assert!(
                        !numeric || t.contains('#') || header_cited,
                        "{name}: uncited `{t}`"
                    );
                }
            }
        }
    }

    #[test]
    fn a100_link_figures_are_the_measured_ones() {
        let p = HardwareProfile::preset("a100-40g-pcie4").unwrap();
        assert_eq!(p.link.h2d_pinned, 24.5e9);
        assert_eq!(p.link.d2h_pinned, 26.1e9);
        assert_eq!(p.link.h2d_pageable, 19e9);
        assert_eq!(p.link.d2h_pageable, 12e9);
    }

    #[test]
    fn base_override_changes_only_named_fields() {
        let p = HardwareProfile::from_toml_str(
            "base = \"a100-40g-pcie4\"\n[link]\nh2d_pinned_gbps = 20.0\n",
            "my.toml",
        )
        .unwrap();
        let a = HardwareProfile::preset("a100-40g-pcie4").unwrap();
        assert_eq!(p.link.h2d_pinned, 20e9);
        assert_eq!(p.link.d2h_pinned, a.link.d2h_pinned);
        assert_eq!(p.gpu, a.gpu);
        assert_eq!(p.name, "profile");
    }

    #[test]
    fn bad_profiles_name_the_field() {
        let e = HardwareProfile::from_toml_str(
            "base = \"a100-40g-pcie4\"\n[link]\nh2d_pinned_gbps = -1.0\n",
            "my.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("link.h2d_pinned_gbps") && e.contains("must be from"),
            "{e}"
        );
        let e = HardwareProfile::from_toml_str(
            "base = \"a100-40g-pcie4\"\n[link]\nh2d_pinned_gbs = 1.0\n",
            "my.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("h2d_pinned_gbs"), "{e}");
        let e = HardwareProfile::from_toml_str("[gpu\nname=1", "my.toml")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("my.toml: line"), "{e}");
        let e = HardwareProfile::from_toml_str("name = \"x\"\n", "my.toml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field"), "{e}");
        let e = HardwareProfile::from_toml_str("base = \"a200\"\n", "my.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown hardware 'a200'") && e.contains("h100-sxm"),
            "{e}"
        );
    }

    fn with_override(section: &str, line: &str) -> String {
        HardwareProfile::from_toml_str(
            &format!("base = \"a100-40g-pcie4\"\n[{section}]\n{line}\n"),
            "my.toml",
        )
        .unwrap_err()
        .to_string()
    }

    #[test]
    fn copy_completion_defaults_to_the_measured_part_and_stays_within_the_latency() {
        let preset = HardwareProfile::preset("a100-40g-pcie4").unwrap();
        assert_eq!(
            preset.link.copy_completion_s,
            DEFAULT_COPY_COMPLETION_US * 1e-6
        );
        // Capped at the latency it is part of.
        let short = HardwareProfile::from_toml_str(
            "base = \"a100-40g-pcie4\"\n[link]\nd2h_latency_us = 1.5\n",
            "short.toml",
        )
        .unwrap();
        assert_eq!(short.link.copy_completion_s, 1.5e-6);
        let given = HardwareProfile::from_toml_str(
            "base = \"a100-40g-pcie4\"\n[link]\ncopy_completion_us = 0.0\n",
            "given.toml",
        )
        .unwrap();
        assert_eq!(given.link.copy_completion_s, 0.0);
        let e = with_override("link", "copy_completion_us = 12.0");
        assert!(
            e.starts_with("my.toml: link.copy_completion_us: must be at most")
                && e.contains("(10 us)"),
            "{e}"
        );
        let e = with_override("link", "copy_completion_us = -1.0");
        assert!(
            e.starts_with("my.toml: link.copy_completion_us: must be"),
            "{e}"
        );
    }

    #[test]
    fn absurd_values_are_range_errors_naming_field_and_range() {
        let cases = [
            (
                "link",
                "h2d_pinned_gbps = 1e-300",
                "link.h2d_pinned_gbps",
                "GB/s",
            ),
            (
                "link",
                "d2h_pageable_gbps = 2e5",
                "link.d2h_pageable_gbps",
                "100 TB/s",
            ),
            (
                "link",
                "h2d_latency_us = 1e30",
                "link.h2d_latency_us",
                "0 to 1 s",
            ),
            ("link", "d2h_latency_us = -1.0", "link.d2h_latency_us", "us"),
            ("peer", "gbps = nan", "peer.gbps", "GB/s"),
            ("peer", "latency_us = inf", "peer.latency_us", "us"),
            ("gpu", "hbm_gbps = 0.0", "gpu.hbm_gbps", "1 MB/s"),
            (
                "gpu",
                "kernel_overhead_us = 2e6",
                "gpu.kernel_overhead_us",
                "1000000 us",
            ),
            (
                "gpu.peak_tflops",
                "fp16 = 1e-300",
                "gpu.peak_tflops.fp16",
                "TFLOP/s",
            ),
            (
                "gpu.peak_tflops",
                "fp32 = 1e9",
                "gpu.peak_tflops.fp32",
                "1000000 TFLOP/s",
            ),
            ("gpu", "memory_gib = 2e6", "gpu.memory_gib", "1 PiB"),
            ("gpu", "memory_gib = 0.0", "gpu.memory_gib", "GiB"),
            ("host", "ram_gib = -inf", "host.ram_gib", "GiB"),
            ("efficiency", "gemm = 1.5", "efficiency.gemm", "at most 1"),
            (
                "efficiency",
                "attention = 0.0",
                "efficiency.attention",
                "more than 0",
            ),
            (
                "efficiency",
                "memory = nan",
                "efficiency.memory",
                "fraction",
            ),
        ];
        for (section, line, field, range) in cases {
            let e = with_override(section, line);
            assert!(
                e.starts_with(&format!("my.toml: {field}: must be")) && e.contains(range),
                "{line}: {e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
        // The message gives the range in the file's unit.
        let e = with_override("link", "h2d_pinned_gbps = 1e-300");
        assert!(
            e.contains("from 0.001 to 100000 GB/s (1 MB/s to 100 TB/s)"),
            "{e}"
        );
        // The bounds themselves are accepted.
        for (section, line) in [
            ("link", "h2d_pinned_gbps = 0.001"),
            ("link", "h2d_pinned_gbps = 100000.0"),
            ("link", "h2d_latency_us = 1000000.0"),
            ("gpu.peak_tflops", "fp32 = 0.001"),
            ("efficiency", "gemm = 1.0"),
        ] {
            HardwareProfile::from_toml_str(
                &format!("base = \"a100-40g-pcie4\"\n[{section}]\n{line}\n"),
                "ok.toml",
            )
            .unwrap_or_else(|e| panic!("{line}: {e}"));
        }
    }

    #[test]
    fn every_preset_lies_inside_the_limits_with_room() {
        // The limits are meant for typos, not for real machines: every preset is at least 10x
        // inside them.
        for name in HardwareProfile::preset_names() {
            let p = HardwareProfile::preset(&name).unwrap();
            for bw in [
                p.gpu.mem_bandwidth,
                p.link.h2d_pinned,
                p.link.d2h_pageable,
                p.peer.bandwidth,
            ] {
                assert!(bw >= 10.0 * limits::BANDWIDTH.min && bw * 10.0 <= limits::BANDWIDTH.max);
            }
            let f = p.gpu.peak_flops;
            for v in [f.fp16, f.bf16, f.fp32] {
                assert!(v >= 10.0 * limits::FLOPS.min && v * 10.0 <= limits::FLOPS.max);
            }
            assert!(p.link.h2d_latency_s * 10.0 <= limits::LATENCY.max);
        }
    }

    #[test]
    fn attention_tables_name_their_fields_and_yield_to_own_kernels() {
        let hw = |text: &str| HardwareProfile::from_toml_str(text, "my.toml");
        let err = |text: &str| hw(text).unwrap_err().to_string();
        // The work-unit fields need the SM count.
        let e = err(
            "base = \"t4\"\n[attention]\nfloor_us = 4.0\nprefill_efficiency = 0.5\ndecode_efficiency = 0.8\nunit_us = 3.0\n",
        );
        assert!(
            e.contains("my.toml: attention.unit_us") && e.contains("give sms"),
            "{e}"
        );
        let e = err(
            "base = \"t4\"\n[attention]\nfloor_us = 4.0\nprefill_efficiency = 0.5\ndecode_efficiency = 0.8\nsms = 0\n",
        );
        assert!(
            e.contains("attention.sms") && e.contains("from 1 to 10000"),
            "{e}"
        );
        let e = err(
            "base = \"a100-80g-sxm\"\n[kernels.attention]\nfloor_us = 4.0\nprefill_efficiency = 0.5\ndecode_efficiency = 0.8\nsms = 108\ntail = -1.0\n",
        );
        assert!(e.contains("kernels.attention.tail"), "{e}");
        // [attention] belongs to profiles without [kernels].
        let e = err(
            "base = \"a100-80g-sxm\"\n[attention]\nfloor_us = 4.0\nprefill_efficiency = 0.5\ndecode_efficiency = 0.8\n",
        );
        assert!(
            e.contains("my.toml: attention") && e.contains("[kernels.attention]"),
            "{e}"
        );
        // An inherited [attention] gives way to the file's own measurements.
        let base = HardwareProfile::preset("a100-40g-pcie4").unwrap();
        assert_eq!(base.attention.unwrap().sms, Some(108));
        let own = hw("base = \"a100-40g-pcie4\"\n[host]\nram_gib = 512.0\n").unwrap();
        assert_eq!(own.attention, base.attention);
        let cal = hw("base = \"a100-40g-pcie4\"\n[calibration]\nbackend = \"cuda\"\ndevice = \"x\"\ndriver = \"x\"\ndate = \"x\"\nkvplan_version = \"x\"\nmode = \"quick\"\nattention = { overhead_us = 5.0, tflops = 100.0, gbps = 1000.0 }\nelementwise = { overhead_us = 3.0, gbps = 1200.0 }\n[calibration.copy]\nh2d_pinned = [[4096, 1e-5], [67108864, 2.8e-3]]\nd2h_pinned = [[4096, 1e-5], [67108864, 2.8e-3]]\nh2d_pageable = [[4096, 1e-5], [67108864, 2.8e-3]]\nd2h_pageable = [[4096, 1e-5], [67108864, 2.8e-3]]\n").unwrap();
        assert_eq!(cal.attention, None);
        let kernels = hw("base = \"a100-40g-pcie4\"\n[kernels]\nsource = \"s\"\nlaunch_us = 0.0\ngemm = { floor_us = 4.0, memory_efficiency = 0.8, compute_efficiency = 0.7 }\nnorm = { floor_us = 4.0, efficiency = 0.8 }\nactivation = { floor_us = 4.0, efficiency = 0.8 }\nrope = { floor_us = 4.0, efficiency = 0.8 }\nadd = { floor_us = 4.0, efficiency = 0.8 }\nembedding = { floor_us = 4.0, efficiency = 0.8 }\nother = { floor_us = 4.0, efficiency = 0.8 }\nattention = { floor_us = 4.0, prefill_efficiency = 0.5, decode_efficiency = 0.8 }\nallreduce = { latency_us = 20.0, bus_gbps = 20.0 }\n").unwrap();
        assert_eq!(kernels.attention, None);
        // ... and is the cost model's attention where it stays.
        let k = crate::cost::derived_kernels(&base);
        assert_eq!(k.attention, base.attention.unwrap());
        assert!(k.source.contains("[attention]"));
    }

    /// A fresh directory for file tests.
    fn temp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kvplan-hw-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn base_may_be_a_profile_file_relative_to_the_including_file() {
        let d = temp_dir("base-file");
        std::fs::create_dir_all(d.join("site")).unwrap();
        // site/host.toml: a preset with more RAM; mine.toml: that file with a slower link.
        std::fs::write(
            d.join("site/host.toml"),
            "base = \"a100-40g-pcie4\"\nname = \"site\"\n[host]\nram_gib = 1024.0\n",
        )
        .unwrap();
        std::fs::write(
            d.join("mine.toml"),
            "base = \"site/host.toml\"\n[link]\nh2d_pinned_gbps = 20.0\n",
        )
        .unwrap();
        let p = HardwareProfile::from_file(&d.join("mine.toml")).unwrap();
        let a = HardwareProfile::preset("a100-40g-pcie4").unwrap();
        assert_eq!(p.name, "mine");
        assert_eq!(p.host.ram_bytes, 1024 << 30);
        assert_eq!(p.link.h2d_pinned, 20e9);
        assert_eq!(p.link.d2h_pinned, a.link.d2h_pinned);
        assert_eq!(p.gpu, a.gpu);
        // Same as --hardware PATH.
        let q = HardwareProfile::resolve(&d.join("mine.toml").display().to_string()).unwrap();
        assert_eq!(p, q);
        // A bad value in the base names the base file.
        std::fs::write(d.join("bad.toml"), "base = \"t4\"\n[peer]\ngbps = 1e-300\n").unwrap();
        std::fs::write(d.join("top.toml"), "base = \"bad.toml\"\n").unwrap();
        let e = HardwareProfile::from_file(&d.join("top.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("bad.toml: peer.gbps"), "{e}");
        // A missing base file names the field and the path it looked for.
        std::fs::write(d.join("lost.toml"), "base = \"nowhere/x.toml\"\n").unwrap();
        let e = HardwareProfile::from_file(&d.join("lost.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("lost.toml: base") && e.contains("nowhere/x.toml"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn base_cycles_are_errors() {
        let d = temp_dir("base-cycle");
        std::fs::write(d.join("a.toml"), "base = \"b.toml\"\n").unwrap();
        std::fs::write(d.join("b.toml"), "base = \"./a.toml\"\n").unwrap();
        std::fs::write(d.join("self.toml"), "base = \"self.toml\"\n").unwrap();
        let e = HardwareProfile::from_file(&d.join("a.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("include cycle") && e.contains("a.toml -> ") && e.contains("b.toml -> "),
            "{e}"
        );
        let e = HardwareProfile::from_file(&d.join("self.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("include cycle"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// The presets no public, dated on-demand price could be cited for (data/pricing/README.md).
    const UNPRICED: [&str; 2] = ["h100-nvl", "quadro-rtx-5000"];

    #[test]
    fn every_preset_cites_its_price_and_power() {
        // Each price is a row of data/pricing/gpu_prices.csv: its value, its date, its source.
        let csv = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../data/pricing/gpu_prices.csv"),
        )
        .unwrap();
        for p in HardwareProfile::presets().unwrap() {
            let g = &p.gpu;
            let watts = g
                .power_watts
                .unwrap_or_else(|| panic!("{}: no power_watts", p.name));
            assert!((50.0..=1500.0).contains(&watts), "{}: {watts} W", p.name);
            if UNPRICED.contains(&p.name.as_str()) {
                assert_eq!((g.price_usd_per_hour, &g.price_source), (None, &None));
                continue;
            }
            let usd = g
                .price_usd_per_hour
                .unwrap_or_else(|| panic!("{}: no price", p.name));
            let source = g.price_source.as_deref().unwrap_or_default();
            let date = g.price_date.as_deref().unwrap_or_default();
            assert!(
                !source.is_empty() && source.contains("web http"),
                "{}: {source}",
                p.name
            );
            assert!(date.starts_with("2026-"), "{}: {date}", p.name);
            let row = csv.lines().any(|l| {
                l.contains(&format!(",{usd},")) && l.contains(&format!(",{date},")) && {
                    let page = source
                        .split("web ")
                        .nth(1)
                        .unwrap()
                        .split(' ')
                        .next()
                        .unwrap();
                    l.contains(page)
                }
            });
            assert!(
                row,
                "{}: ${usd} of {date} is no row of gpu_prices.csv",
                p.name
            );
        }
    }

    #[test]
    fn a_price_set_over_a_base_cites_its_own_file() {
        let preset = HardwareProfile::preset("h100-sxm").unwrap();
        assert_eq!(preset.gpu.price_usd_per_hour, Some(3.78));
        assert!(
            preset
                .gpu
                .price_source
                .as_deref()
                .unwrap()
                .starts_with("Lambda")
        );
        // Overriding something else keeps the preset's price and citation.
        let other = HardwareProfile::from_toml_str(
            "base = \"h100-sxm\"\n[host]\nram_gib = 512.0\n",
            "my.toml",
        )
        .unwrap();
        assert_eq!(other.gpu, preset.gpu);
        // A price of one's own does not inherit the preset's source or date.
        let mine = HardwareProfile::from_toml_str(
            "base = \"h100-sxm\"\n[gpu]\nprice_usd_per_hour = 2.0\n",
            "my.toml",
        )
        .unwrap();
        assert_eq!(mine.gpu.price_usd_per_hour, Some(2.0));
        assert_eq!(mine.gpu.price_source.as_deref(), Some("given in my.toml"));
        assert_eq!(mine.gpu.price_date, None);
        assert_eq!(mine.gpu.power_watts, preset.gpu.power_watts);
        let cited = HardwareProfile::from_toml_str(
            "base = \"h100-sxm\"\n[gpu]\nprice_usd_per_hour = 2.0\nprice_source = \"our contract\"\n",
            "my.toml",
        )
        .unwrap();
        assert_eq!(cited.gpu.price_source.as_deref(), Some("our contract"));
        assert_eq!(cited.gpu.price_date, None);
        // Through a chain of files, the file that set the price is named.
        let d = temp_dir("price-chain");
        std::fs::write(
            d.join("mid.toml"),
            "base = \"h100-sxm\"\n[gpu]\nprice_usd_per_hour = 2.2\n",
        )
        .unwrap();
        std::fs::write(
            d.join("top.toml"),
            "base = \"mid.toml\"\n[host]\nram_gib = 256.0\n",
        )
        .unwrap();
        let top = HardwareProfile::from_file(&d.join("top.toml")).unwrap();
        let source = top.gpu.price_source.unwrap();
        assert!(
            source.starts_with("given in ") && source.ends_with("mid.toml"),
            "{source}"
        );
        let _ = std::fs::remove_dir_all(&d);
        // A profile of its own with no price has none; `--price` gives one.
        let mut t = HardwareProfile::from_toml_str("base = \"h100-nvl\"\n", "my.toml").unwrap();
        assert_eq!(t.gpu.price_usd_per_hour, None);
        t.with_price(2.5, "given on the command line").unwrap();
        assert_eq!(t.gpu.price_usd_per_hour, Some(2.5));
        assert_eq!(
            t.gpu.price_source.as_deref(),
            Some("given on the command line")
        );
        let mut p = preset.clone();
        p.with_price(2.5, "given on the command line").unwrap();
        assert_eq!(p.gpu.price_date, None);
        for bad in [0.0, -1.0, f64::NAN, 1e5] {
            let e = p.with_price(bad, "x").unwrap_err().to_string();
            assert!(e.starts_with("`plan.prices`: must be more than 0"), "{e}");
        }
    }

    #[test]
    fn bad_prices_and_power_name_the_field() {
        for (line, field, needle) in [
            (
                "price_usd_per_hour = 0.0",
                "gpu.price_usd_per_hour",
                "more than 0",
            ),
            (
                "price_usd_per_hour = -1.0",
                "gpu.price_usd_per_hour",
                "e.g. price_usd_per_hour = 2.5",
            ),
            (
                "price_usd_per_hour = nan",
                "gpu.price_usd_per_hour",
                "(got NaN)",
            ),
            (
                "price_usd_per_hour = 2e4",
                "gpu.price_usd_per_hour",
                "at most 10000",
            ),
            ("power_watts = 0.0", "gpu.power_watts", "more than 0"),
            ("power_watts = 7000.0", "gpu.power_watts", "5 kW"),
            (
                "price_source = \" \"",
                "gpu.price_source",
                "must say something",
            ),
            ("price_date = \"\"", "gpu.price_date", "must say something"),
        ] {
            let e = with_override("gpu", line);
            assert!(
                e.starts_with(&format!("my.toml: {field}: ")) && e.contains(needle),
                "{line}: {e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
        // A citation without a price (the a100 preset has one to inherit: use a file without).
        let text = HardwareProfile::preset_text("h100-nvl")
            .unwrap()
            .replace("[gpu]\n", "[gpu]\nprice_source = \"somewhere\"\n");
        let e = HardwareProfile::from_toml_str(&text, "nvl.toml")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("nvl.toml: gpu.price_source: cites a price"),
            "{e}"
        );
    }

    #[test]
    fn price_overrides_parse_and_refuse_what_they_should() {
        assert_eq!(
            parse_price_overrides("h100-sxm=2.5").unwrap(),
            [("h100-sxm".to_string(), 2.5)]
        );
        assert_eq!(
            parse_price_overrides(" h100-sxm = 2.5 ,my/a100.toml=1e0").unwrap(),
            [
                ("h100-sxm".to_string(), 2.5),
                ("my/a100.toml".to_string(), 1.0)
            ]
        );
        for (text, needle) in [
            ("", "`plan.prices` h100-sxm=2.5"),
            ("h100-sxm", "`plan.prices` h100-sxm=2.5"),
            ("h100-sxm=", "`plan.prices` h100-sxm=2.5"),
            ("=2.5", "`plan.prices` h100-sxm=2.5"),
            ("h100-sxm=2.5,", "`plan.prices` h100-sxm=2.5"),
            ("h100-sxm=$2.5", "`plan.prices` h100-sxm=2.5"),
            ("h100-sxm=two", "(got \"h100-sxm=two\")"),
            ("h100-sxm:2.5", "NAME=USD"),
            ("h100-sxm=0", "`plan.prices` h100-sxm: must be more than 0"),
            ("h100-sxm=-1", "`plan.prices` h100-sxm: must be more than 0"),
            ("h100-sxm=inf", "`plan.prices` h100-sxm: must be"),
            ("h100-sxm=2,H100-SXM=3", "prices H100-SXM twice"),
        ] {
            let e = parse_price_overrides(text).unwrap_err().to_string();
            assert!(
                e.starts_with("`plan.prices`") && e.contains(needle),
                "{text}: {e}"
            );
            assert!(!e.contains('\n'), "{e}");
        }
        // Two files that differ in case are two files.
        assert_eq!(
            parse_price_overrides("a/x.toml=1,a/X.toml=2")
                .unwrap()
                .len(),
            2
        );
    }
}
