//! Fitting measurements into a profile file: the datasheet sections, the `[calibration]` tables
//! and the `[kernels]` section.

use kvplan_vocab::DType;
use kvplan_vocab::HardwareProfile;
use kvplan_vocab::calibration::{Calibration, CopyTables, Curve};
use kvplan_vocab::cost::derived_kernels;
use kvplan_vocab::hardware::{
    Duplex, EfficiencySection, GpuSection, HostSection, Interconnect, InterconnectSection,
    LinkSection, PeakSection, PeerSection, ProfileFile,
};
use kvplan_vocab::kernel_model::{AttentionFit, KernelTable, KernelsSection, TableKind};
use kvplan_vocab::schedule::ElemKind;

use crate::error::Error;
use crate::plan::Measurements;
use crate::{fit, kernels};

/// Today's date (UTC) as YYYY-MM-DD, from the system clock.
pub fn today() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Fits measurements into a profile file named `name`. Datasheet fields of `base` (if given)
/// are kept where nothing was measured; measured summaries replace the rest.
pub fn build_profile(
    m: &Measurements,
    name: &str,
    base: Option<&HardwareProfile>,
    quick: bool,
) -> Result<ProfileFile, Error> {
    let attention = fit::attention(&m.attention)?;
    let elementwise = fit::elementwise(&m.elementwise)?;
    let link = link_section(m, base);
    let file = ProfileFile {
        name: name.to_string(),
        description: format!(
            "calibrated with the {} backend on {} ({})",
            m.info.backend.as_str(),
            m.info.name,
            today()
        ),
        gpu: gpu_section(m, base, elementwise.gbps),
        efficiency: efficiency_section(base),
        host: host_section(m, base),
        peer: peer_section(base, &link),
        link,
        // The base's network, written out when it gives one.
        interconnect: base.and_then(interconnect_section),
        kernels: None,
        // Attention comes from the measurements ([calibration], then [kernels]).
        attention: None,
        calibration: Some(Calibration {
            backend: m.info.backend.as_str().into(),
            device: m.info.name.clone(),
            driver: m.info.driver.clone(),
            date: today(),
            kvplan_version: env!("CARGO_PKG_VERSION").into(),
            mode: if quick { "quick" } else { "full" }.into(),
            copy: CopyTables {
                h2d_pinned: m.copy.h2d_pinned.clone(),
                d2h_pinned: m.copy.d2h_pinned.clone(),
                h2d_pageable: m.copy.h2d_pageable.clone(),
                d2h_pageable: m.copy.d2h_pageable.clone(),
            },
            attention,
            elementwise,
            gemm: m.gemm.clone(),
            host: Some(m.host),
        }),
        serving: None,
    };
    // The result must be a valid hardware profile file for every other command.
    let origin = format!("calibrated profile {name}");
    let hw = file.clone().validate(&origin)?;
    let mut file = file;
    if let Some(tables) = &m.kernels {
        file.kernels = Some(kernels_section(m, tables, &hw, base)?);
        file.clone().validate(&origin)?;
    }
    Ok(file)
}

const GIB: f64 = (1u64 << 30) as f64;

/// The device's memory in bytes: what it reports, else 16 GiB.
fn memory_bytes(m: &Measurements) -> u64 {
    m.info.memory_bytes.unwrap_or(16 << 30)
}

/// The best measured GEMM rate in `d`, TFLOP/s (0 when none was measured).
fn best_gemm_tflops(m: &Measurements, d: DType) -> f64 {
    m.gemm
        .iter()
        .filter(|p| p.dtype == d)
        .map(|p| 2.0 * f64::from(p.m) * f64::from(p.n) * f64::from(p.k) / p.seconds / 1e12)
        .fold(0.0, f64::max)
}

/// `[gpu]`: the base's datasheet with the device's own memory and the measured launch
/// overhead; without a base, the measured GEMM peaks and `hbm_gbps` (the elementwise sweep's
/// bandwidth).
fn gpu_section(m: &Measurements, base: Option<&HardwareProfile>, hbm_gbps: f64) -> GpuSection {
    match base {
        Some(b) => GpuSection {
            name: m.info.name.clone(),
            // A GPU's own figure (what the device reports, e.g. 81,559 MiB on an H100 80GB)
            // over the base's datasheet one; a CPU run measures the host, not the base's GPU.
            memory_gib: match (m.info.backend, m.info.memory_bytes) {
                (kvplan_exec::BackendKind::Cuda, Some(bytes)) => bytes as f64 / GIB,
                _ => b.gpu.memory_bytes as f64 / GIB,
            },
            reserved_gib: b.gpu.reserved_bytes as f64 / GIB,
            hbm_gbps: b.gpu.mem_bandwidth / 1e9,
            kernel_overhead_us: m.op_overhead_s * 1e6,
            peak_tflops: PeakSection {
                fp16: b.gpu.peak_flops.fp16 / 1e12,
                bf16: b.gpu.peak_flops.bf16 / 1e12,
                fp32: b.gpu.peak_flops.fp32 / 1e12,
                fp8: b.gpu.peak_flops.fp8.map(|f| f / 1e12),
            },
            compute_capability: b.gpu.compute_capability,
            price_usd_per_hour: b.gpu.price_usd_per_hour,
            price_source: b.gpu.price_source.clone(),
            price_date: b.gpu.price_date.clone(),
            power_watts: b.gpu.power_watts,
        },
        None => {
            let measured_peak = DType::ALL
                .map(|d| best_gemm_tflops(m, d))
                .into_iter()
                .fold(0.0, f64::max);
            let peak = |d: DType| {
                let v = best_gemm_tflops(m, d);
                if v > 0.0 { v } else { measured_peak.max(1e-3) }
            };
            let memory_bytes = memory_bytes(m);
            GpuSection {
                name: m.info.name.clone(),
                memory_gib: memory_bytes as f64 / GIB,
                reserved_gib: (memory_bytes as f64 / GIB * 0.05).min(1.0),
                hbm_gbps,
                kernel_overhead_us: m.op_overhead_s * 1e6,
                peak_tflops: PeakSection {
                    fp16: peak(DType::Fp16),
                    bf16: peak(DType::Bf16),
                    fp32: peak(DType::Fp32),
                    fp8: None,
                },
                compute_capability: None,
                price_usd_per_hour: None,
                price_source: None,
                price_date: None,
                power_watts: None,
            }
        }
    }
}

/// `[efficiency]`: the base's; measured peaks are achieved rates, so without a base 1.
fn efficiency_section(base: Option<&HardwareProfile>) -> EfficiencySection {
    match base {
        Some(b) => EfficiencySection {
            gemm: b.efficiency.gemm,
            attention: b.efficiency.attention,
            memory: b.efficiency.memory,
        },
        None => EfficiencySection {
            gemm: 1.0,
            attention: 1.0,
            memory: 1.0,
        },
    }
}

/// `[link]`: summary bandwidths and latencies of the measured copy curves, the duplex the
/// both-directions check found, the base's link kind.
fn link_section(m: &Measurements, base: Option<&HardwareProfile>) -> LinkSection {
    let (one_way, both) = m.duplex_check;
    let duplex = if both >= 1.5 * one_way {
        Duplex::Full
    } else {
        Duplex::Half
    };
    let c = &m.copy;
    // Summary bandwidths at the largest measured size (cache-resident small copies can look
    // faster than the link sustains); the curves hold the whole picture.
    let large = |curve: &Curve| {
        let &(b, t) = curve.0.last().expect("a checked curve has points");
        b as f64 / t / 1e9
    };
    LinkSection {
        kind: match base {
            Some(b) => b.link.kind.clone(),
            None => format!("{} memcpy", m.info.backend.as_str()),
        },
        duplex,
        h2d_pinned_gbps: large(&c.h2d_pinned),
        d2h_pinned_gbps: large(&c.d2h_pinned),
        h2d_pageable_gbps: large(&c.h2d_pageable),
        d2h_pageable_gbps: large(&c.d2h_pageable),
        h2d_latency_us: c.h2d_pinned.latency_s() * 1e6,
        d2h_latency_us: c.d2h_pinned.latency_s() * 1e6,
        // Each measured copy ends with an event, so its latency is seen whole: the one-off
        // part cannot be told from the per-copy part here (the default applies).
        copy_completion_us: None,
    }
}

/// `[host]`: the machine measured, where it says; else the base's datasheet or, on the CPU,
/// its memory.
fn host_section(m: &Measurements, base: Option<&HardwareProfile>) -> HostSection {
    HostSection {
        ram_gib: match (m.host_ram_bytes, base) {
            (Some(b), _) => b as f64 / GIB,
            (None, Some(b)) => b.host.ram_bytes as f64 / GIB,
            (None, None) => memory_bytes(m) as f64 / GIB,
        },
    }
}

/// `[peer]`: the base's; without one, the host copies of `link`.
fn peer_section(base: Option<&HardwareProfile>, link: &LinkSection) -> PeerSection {
    match base {
        Some(b) => PeerSection {
            kind: b.peer.kind.clone(),
            gbps: b.peer.bandwidth / 1e9,
            latency_us: b.peer.latency_s * 1e6,
        },
        None => PeerSection {
            kind: "memcpy (measured as host copies)".into(),
            gbps: link.h2d_pinned_gbps,
            latency_us: link.h2d_latency_us,
        },
    }
}

/// `[interconnect]`: the base's network, when it gives one.
fn interconnect_section(b: &HardwareProfile) -> Option<InterconnectSection> {
    (b.interconnect != Interconnect::default()).then(|| InterconnectSection {
        kind: b.interconnect.kind.clone(),
        gbps: b.interconnect.bandwidth / 1e9,
        latency_us: b.interconnect.latency_s * 1e6,
        per_transfer_us: b.interconnect.per_transfer_s * 1e6,
    })
}

/// The `[kernels]` section from the measured tables: the tables themselves (then, as tables of
/// their own, the `[calibration]` GEMM points of shapes the grid did not cover), a
/// [`GemmFit`](kvplan_vocab::kernel_model::GemmFit) and
/// one [`MemFit`](kvplan_vocab::kernel_model::MemFit) per kind fitted to them ([`kernels::fit_gemm`], [`kernels::fit_mem`]); kind
/// `other` fitted to the elementwise sweep; attention from the `[calibration]` attention fit
/// (its intercept as the floor, its rates as fractions of `hw`'s peak and HBM bandwidth); the
/// all-reduce of `base` (its `[kernels]`, else derived from it), else derived from `hw`; the
/// launch interval the measured per-op overhead. `hw` is the profile without `[kernels]`.
fn kernels_section(
    m: &Measurements,
    tables: &[KernelTable],
    hw: &HardwareProfile,
    base: Option<&HardwareProfile>,
) -> Result<KernelsSection, Error> {
    let fail = |what: &str| Error::Fit {
        what: what.into(),
        why: "no positive measurements".into(),
    };
    let derived = derived_kernels(hw);
    let hbm = hw.gpu.mem_bandwidth;
    let peaks = DType::ALL.map(|d| hw.gpu.peak_flops.get(d));
    let sms = match m.info.backend {
        kvplan_exec::BackendKind::Cuda => m.info.parallelism.filter(|&s| s > 0),
        _ => None,
    };
    let gemm =
        kernels::fit_gemm(tables, peaks, hbm, sms, &derived).ok_or_else(|| fail("GEMM tables"))?;
    let mut section = KernelsSection {
        source: format!(
            "kvplan calibrate, {} backend on {} ({})",
            m.info.backend.as_str(),
            m.info.name,
            today()
        ),
        launch_us: (m.op_overhead_s * 1e6).clamp(0.0, 1e5),
        gemm,
        tables: tables.to_vec(),
        ..derived.clone()
    };
    for kind in ElemKind::ALL {
        let pts = if kind == ElemKind::Other {
            m.elementwise.clone()
        } else {
            kernels::mem_points(tables, kind)
        };
        // A kind without a table (none in the sweep) keeps the elementwise sweep's fit.
        let pts = if pts.is_empty() {
            m.elementwise.clone()
        } else {
            pts
        };
        *section.mem_mut(kind) = kernels::fit_mem(&pts, hbm).ok_or_else(|| fail(kind.as_str()))?;
    }
    // GEMM shapes the `[calibration]` sweep measured and the grid did not (the LM head, KVPR's
    // recompute GEMM) keep their measured rows as tables of their own.
    let on_grid = |t: &KernelTable| {
        tables
            .iter()
            .any(|g| g.kind == TableKind::Gemm && g.dtype == t.dtype && g.n == t.n && g.k == t.k)
    };
    section.tables.extend(
        kvplan_vocab::cost::gemm_tables(&m.gemm)
            .into_iter()
            .filter(|t| !on_grid(t)),
    );
    let att = fit::attention(&m.attention)?;
    let smallest = m
        .attention
        .iter()
        .map(|p| p.2)
        .filter(|t| *t > 0.0)
        .fold(f64::INFINITY, f64::min);
    let frac = |v: f64| {
        if v.is_finite() && v > 0.0 {
            v.min(1.0)
        } else {
            1.0
        }
    };
    section.attention = AttentionFit::roofline(
        att.overhead_us.min(smallest * 1e6).max(0.0),
        frac(att.tflops * 1e12 / hw.gpu.peak_flops.get(DType::Fp16)),
        frac(att.gbps * 1e9 / hbm),
    );
    section.allreduce = match base {
        Some(b) => b
            .kernels
            .as_ref()
            .map_or_else(|| derived_kernels(b).allreduce, |k| k.allreduce),
        None => derived.allreduce,
    };
    Ok(section)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn date_is_iso() {
        let d = today();
        assert_eq!(d.len(), 10);
        assert!(d.starts_with("20"));
        assert_eq!(&d[4..5], "-");
    }
}
