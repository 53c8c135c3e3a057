//! kvplan's calibration: measures a machine through the executor, fits the measurements into a
//! [`ProfileFile`] (tables with interpolation, not one number each), and compares a simulated
//! timeline with a measured one.
//!
//! Every microbenchmark is a small [`Schedule`](kvplan_vocab::Schedule) run by an [`Executor`], so calibration measures
//! exactly the code path that `kvplan exec` and `kvplan validate` time.
#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod attention;
mod bench;
pub mod compare;
pub mod copies;
pub mod fit;
pub mod inputs;
pub mod kernels;
pub mod micro;
pub mod runs;
pub mod table;

use kvplan_exec::{DeviceInfo, Executor};
use kvplan_vocab::HardwareProfile;
use kvplan_vocab::calibration::{Calibration, CopyTables, Curve};
use kvplan_vocab::cost::derived_kernels;
use kvplan_vocab::hardware::{
    Duplex, EfficiencySection, GpuSection, HostSection, LinkSection, PeakSection, PeerSection,
    ProfileFile,
};
use kvplan_vocab::kernel_model::{AttentionFit, KernelTable, KernelsSection, TableKind};
use kvplan_vocab::schedule::ElemKind;
use kvplan_vocab::{DType, ModelSpec};

pub use compare::{Comparison, compare};

/// Calibration errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The executor failed.
    #[error(transparent)]
    Exec(#[from] kvplan_exec::Error),
    /// Planner-side failure (a model that cannot be loaded, an invalid profile).
    #[error(transparent)]
    Planner(#[from] kvplan_vocab::Error),
    /// A malformed measured table (`origin:line: column: why`).
    #[error("{origin}:{line}: {}{why}", if column.is_empty() { String::new() } else { format!("column {column}: ") })]
    Table {
        /// The file.
        origin: String,
        /// 1-based line (0: the file as a whole).
        line: u64,
        /// The column, where one is at fault.
        column: String,
        /// What is wrong.
        why: String,
    },
    /// Bad input: a file that cannot be read, a base or model that cannot be told, a count out
    /// of range (the message names the option by the caller's label).
    #[error("{0}")]
    Input(String),
    /// A measurement that cannot be fitted (e.g. no positive times).
    #[error("cannot fit {what}: {why}")]
    Fit {
        /// The table.
        what: String,
        /// Why.
        why: String,
    },
}

/// How thoroughly to measure.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// `quick` (CI, CPU) or `full`.
    pub quick: bool,
    /// Copy sizes, bytes.
    pub copy_sizes: Vec<u64>,
    /// Models whose layer shapes the GEMM and attention sweeps use.
    pub models: Vec<ModelSpec>,
    /// Decode GEMM rows (batch sizes).
    pub decode_m: Vec<u32>,
    /// Prefill GEMM rows (tokens per forward pass).
    pub prefill_m: Vec<u32>,
    /// Decode attention batches.
    pub attention_batches: Vec<u32>,
    /// Decode attention context lengths.
    pub attention_kv_lens: Vec<u32>,
    /// Prefill attention lengths (causal, q_len = kv_len).
    pub prefill_lens: Vec<u32>,
    /// Elementwise sizes, bytes.
    pub elementwise_sizes: Vec<u64>,
    /// Repetitions per measurement (the median is kept).
    pub reps: u32,
    /// Token counts of the `[kernels]` tables ([`kernels::grid`]; empty: no `[kernels]` sweep).
    pub kernel_grid: Vec<u32>,
    /// Repetitions per `[kernels]` table point (the median is kept).
    pub kernel_reps: u32,
}

fn pow4_sizes(from: u64, to: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = from;
    while s <= to {
        v.push(s);
        s *= 4;
    }
    v
}

impl Plan {
    /// The default plan for a backend: `full` sweeps 4 KiB..1 GiB copies and the layer shapes of
    /// every MHA and GQA family; `quick` keeps CI-sized runs (small models, up to 64 MiB).
    /// `models` overrides the models whose shapes are measured.
    pub fn new(quick: bool, gpu: bool, models: Option<Vec<ModelSpec>>) -> Result<Self, Error> {
        let names: &[&str] = match (quick, gpu) {
            (true, false) => &["opt-125m"],
            (false, false) => &["opt-125m", "opt-1.3b"],
            (true, true) => &["opt-6.7b", "llama-3-8b"],
            (false, true) => &[
                "opt-6.7b",
                "opt-13b",
                "opt-30b",
                "llama-2-7b",
                "llama-3-8b",
                "mistral-7b",
                "qwen2-7b",
            ],
        };
        let models = match models {
            Some(m) => m,
            None => names
                .iter()
                .map(|n| ModelSpec::preset(n))
                .collect::<Result<_, _>>()?,
        };
        Ok(if gpu {
            Plan {
                quick,
                copy_sizes: pow4_sizes(4 << 10, if quick { 256 << 20 } else { 1 << 30 }),
                models,
                decode_m: if quick {
                    vec![1, 16, 64, 256]
                } else {
                    vec![1, 4, 16, 32, 64, 128, 256, 512]
                },
                prefill_m: if quick {
                    vec![2048, 8192]
                } else {
                    vec![1024, 2048, 4096, 8192, 16384, 32768]
                },
                attention_batches: if quick {
                    vec![8, 64]
                } else {
                    vec![1, 8, 32, 64]
                },
                attention_kv_lens: if quick {
                    vec![256, 2048]
                } else {
                    vec![128, 512, 2048, 8192]
                },
                prefill_lens: if quick {
                    vec![512, 2048]
                } else {
                    vec![512, 1024, 2048, 4096]
                },
                elementwise_sizes: pow4_sizes(4 << 10, 256 << 20),
                reps: if quick { 3 } else { 5 },
                kernel_grid: kernels::grid(true, quick),
                kernel_reps: if quick { 5 } else { 10 },
            }
        } else {
            Plan {
                quick,
                copy_sizes: pow4_sizes(4 << 10, if quick { 16 << 20 } else { 256 << 20 }),
                models,
                decode_m: if quick {
                    vec![1, 4, 16]
                } else {
                    vec![1, 4, 16, 64]
                },
                prefill_m: if quick {
                    vec![128, 512]
                } else {
                    vec![128, 512, 2048]
                },
                attention_batches: if quick { vec![1, 4] } else { vec![1, 4, 16] },
                attention_kv_lens: if quick {
                    vec![64, 256]
                } else {
                    vec![64, 256, 1024]
                },
                prefill_lens: if quick {
                    vec![64, 128]
                } else {
                    vec![64, 128, 256]
                },
                elementwise_sizes: pow4_sizes(4 << 10, if quick { 4 << 20 } else { 64 << 20 }),
                reps: 3,
                kernel_grid: kernels::grid(false, quick),
                kernel_reps: 3,
            }
        })
    }
}

/// Progress callback: `(step, total, what)`.
pub type Progress<'a> = &'a mut dyn FnMut(usize, usize, &str);

/// Everything measured, before fitting into a profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurements {
    /// The device.
    pub info: DeviceInfo,
    /// This host's RAM in bytes, if the OS says (the profile's `[host] ram_gib`).
    pub host_ram_bytes: Option<u64>,
    /// Copy curves.
    pub copy: CopyTables,
    /// Bytes/s of one direction alone and of both directions at once at the largest size.
    pub duplex_check: (f64, f64),
    /// GEMM points.
    pub gemm: Vec<kvplan_vocab::calibration::GemmPoint>,
    /// Attention points `(flops, bytes, seconds, is_prefill)`.
    pub attention: Vec<(f64, f64, f64, bool)>,
    /// Elementwise points `(bytes, seconds)`.
    pub elementwise: Vec<(f64, f64)>,
    /// Per-op overhead of a chain of tiny kernels, seconds.
    pub op_overhead_s: f64,
    /// What issuing a kernel, issuing a copy and synchronising cost the host (medians).
    pub host: kvplan_vocab::calibration::HostCosts,
    /// The `[kernels]` tables over the token grid (microseconds); `None`: not measured (the
    /// profile then has no `[kernels]` section).
    pub kernels: Option<Vec<kvplan_vocab::kernel_model::KernelTable>>,
}

/// Runs every microbenchmark of `plan` on `exec`.
pub fn measure(
    exec: &mut dyn Executor,
    plan: &Plan,
    progress: Progress,
) -> Result<Measurements, Error> {
    micro::measure_all(exec, plan, progress)
}

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
    let gib = (1u64 << 30) as f64;
    let best_gemm_tflops = |d: DType| {
        m.gemm
            .iter()
            .filter(|p| p.dtype == d)
            .map(|p| 2.0 * f64::from(p.m) * f64::from(p.n) * f64::from(p.k) / p.seconds / 1e12)
            .fold(0.0, f64::max)
    };
    let measured_peak = DType::ALL
        .map(best_gemm_tflops)
        .into_iter()
        .fold(0.0, f64::max);
    let memory_bytes = m.info.memory_bytes.unwrap_or(16 << 30);
    let (one_way, both) = m.duplex_check;
    let duplex = if both >= 1.5 * one_way {
        Duplex::Full
    } else {
        Duplex::Half
    };
    let gpu = match base {
        Some(b) => GpuSection {
            name: m.info.name.clone(),
            // A GPU's own figure (what the device reports, e.g. 81,559 MiB on an H100 80GB)
            // over the base's datasheet one; a CPU run measures the host, not the base's GPU.
            memory_gib: match (m.info.backend, m.info.memory_bytes) {
                (kvplan_exec::BackendKind::Cuda, Some(bytes)) => bytes as f64 / gib,
                _ => b.gpu.memory_bytes as f64 / gib,
            },
            reserved_gib: b.gpu.reserved_bytes as f64 / gib,
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
            let peak = |d: DType| {
                let v = best_gemm_tflops(d);
                if v > 0.0 { v } else { measured_peak.max(1e-3) }
            };
            GpuSection {
                name: m.info.name.clone(),
                memory_gib: memory_bytes as f64 / gib,
                reserved_gib: (memory_bytes as f64 / gib * 0.05).min(1.0),
                hbm_gbps: elementwise.gbps,
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
    };
    let efficiency = match base {
        Some(b) => EfficiencySection {
            gemm: b.efficiency.gemm,
            attention: b.efficiency.attention,
            memory: b.efficiency.memory,
        },
        // Measured peaks are achieved rates: efficiency 1.
        None => EfficiencySection {
            gemm: 1.0,
            attention: 1.0,
            memory: 1.0,
        },
    };
    let c = &m.copy;
    // Summary bandwidths at the largest measured size (cache-resident small copies can look
    // faster than the link sustains); the curves hold the whole picture.
    let large = |curve: &Curve| {
        let &(b, t) = curve.0.last().expect("a checked curve has points");
        b as f64 / t / 1e9
    };
    let link = LinkSection {
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
    };
    let host = HostSection {
        // The machine measured, where it says; else the base's datasheet or, on the CPU, its
        // memory.
        ram_gib: match (m.host_ram_bytes, base) {
            (Some(b), _) => b as f64 / gib,
            (None, Some(b)) => b.host.ram_bytes as f64 / gib,
            (None, None) => memory_bytes as f64 / gib,
        },
    };
    let peer = match base {
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
    };
    let file = ProfileFile {
        name: name.to_string(),
        description: format!(
            "calibrated with the {} backend on {} ({})",
            m.info.backend.as_str(),
            m.info.name,
            today()
        ),
        gpu,
        efficiency,
        link,
        host,
        peer,
        // The base's network, written out when it gives one.
        interconnect: base.and_then(|b| {
            (b.interconnect != kvplan_vocab::hardware::Interconnect::default()).then(|| {
                kvplan_vocab::hardware::InterconnectSection {
                    kind: b.interconnect.kind.clone(),
                    gbps: b.interconnect.bandwidth / 1e9,
                    latency_us: b.interconnect.latency_s * 1e6,
                    per_transfer_us: b.interconnect.per_transfer_s * 1e6,
                }
            })
        }),
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
                h2d_pinned: c.h2d_pinned.clone(),
                d2h_pinned: c.d2h_pinned.clone(),
                h2d_pageable: c.h2d_pageable.clone(),
                d2h_pageable: c.d2h_pageable.clone(),
            },
            attention,
            elementwise,
            gemm: m.gemm.clone(),
            host: Some(m.host),
        }),
        serving: None,
    };
    // The result must be a valid --hardware file for every other command.
    let origin = format!("calibrated profile {name}");
    let hw = file.clone().validate(&origin)?;
    let mut file = file;
    if let Some(tables) = &m.kernels {
        file.kernels = Some(kernels_section(m, tables, &hw, base)?);
        file.clone().validate(&origin)?;
    }
    Ok(file)
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

/// Makes a measured curve usable as a table: sizes strictly increasing, times non-decreasing
/// (a later, larger copy measured faster than a smaller one is noise: it takes the running max).
pub fn monotone_curve(mut points: Vec<(u64, f64)>) -> Curve {
    points.sort_by_key(|p| p.0);
    points.dedup_by_key(|p| p.0);
    let mut best = 0.0f64;
    for p in &mut points {
        best = best.max(p.1);
        p.1 = best;
    }
    Curve(points)
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

    #[test]
    fn monotone_curve_sorts_and_takes_running_max() {
        let c = monotone_curve(vec![(4096, 2e-5), (1024, 1e-5), (16384, 1.5e-5)]);
        assert_eq!(c.0, vec![(1024, 1e-5), (4096, 2e-5), (16384, 2e-5)]);
    }
}
