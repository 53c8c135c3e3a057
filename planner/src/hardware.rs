//! Hardware profiles: GPU compute and memory, the host link, host RAM, the peer link.
//!
//! Presets live in `planner/profiles/*.toml`, every number with its source in a comment
//! (`kvplan hardware --show NAME` prints the file). A user's profile file either stands alone
//! or names a preset in `base = "..."` and overrides any subset of its fields.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::calibration::Calibration;
use crate::dtype::DType;
use crate::error::{Error, Result};

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
    "h200",
    "rtx-4090",
    "quadro-rtx-5000",
    "t4",
];

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
    /// Fixed cost added to every kernel, seconds.
    pub kernel_overhead_s: f64,
}

impl Gpu {
    /// Memory a plan may use: `memory - reserved`.
    pub fn usable_bytes(&self) -> u64 {
        self.memory_bytes.saturating_sub(self.reserved_bytes)
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
    /// Measured tables (calibrated profiles only).
    pub calibration: Option<Calibration>,
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
    /// `[calibration]`: measured tables, when the profile was calibrated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Calibration>,
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
}

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
    fn positive(&self, field: &str, v: f64) -> Result<f64> {
        if v.is_finite() && v > 0.0 {
            Ok(v)
        } else {
            Err(Error::invalid(
                format!("{}: {field}", self.origin),
                v,
                "must be a positive number",
            ))
        }
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

    fn fraction(&self, field: &str, v: f64) -> Result<f64> {
        if v.is_finite() && v > 0.0 && v <= 1.0 {
            Ok(v)
        } else {
            Err(Error::invalid(
                format!("{}: {field}", self.origin),
                v,
                "must be in (0, 1]",
            ))
        }
    }
}

fn validate(file: ProfileFile, origin: &str) -> Result<HardwareProfile> {
    {
        let s = file;
        let c = Check { origin };
        if let Some(cal) = &s.calibration {
            cal.check(origin)?;
        }
        let memory = c.positive("gpu.memory_gib", s.gpu.memory_gib)?;
        let reserved = c.non_negative("gpu.reserved_gib", s.gpu.reserved_gib)?;
        if reserved >= memory {
            return Err(Error::invalid(
                format!("{origin}: gpu.reserved_gib"),
                reserved,
                format!("must be less than gpu.memory_gib ({memory})"),
            ));
        }
        Ok(HardwareProfile {
            name: s.name,
            description: s.description,
            gpu: Gpu {
                name: s.gpu.name,
                memory_bytes: (memory * GIB) as u64,
                reserved_bytes: (reserved * GIB) as u64,
                mem_bandwidth: c.positive("gpu.hbm_gbps", s.gpu.hbm_gbps)? * GB,
                peak_flops: PeakFlops {
                    fp16: c.positive("gpu.peak_tflops.fp16", s.gpu.peak_tflops.fp16)? * 1e12,
                    bf16: c.positive("gpu.peak_tflops.bf16", s.gpu.peak_tflops.bf16)? * 1e12,
                    fp32: c.positive("gpu.peak_tflops.fp32", s.gpu.peak_tflops.fp32)? * 1e12,
                },
                kernel_overhead_s: c
                    .non_negative("gpu.kernel_overhead_us", s.gpu.kernel_overhead_us)?
                    * 1e-6,
            },
            efficiency: Efficiency {
                gemm: c.fraction("efficiency.gemm", s.efficiency.gemm)?,
                attention: c.fraction("efficiency.attention", s.efficiency.attention)?,
                memory: c.fraction("efficiency.memory", s.efficiency.memory)?,
            },
            link: HostLink {
                kind: s.link.kind,
                duplex: s.link.duplex,
                h2d_pinned: c.positive("link.h2d_pinned_gbps", s.link.h2d_pinned_gbps)? * GB,
                d2h_pinned: c.positive("link.d2h_pinned_gbps", s.link.d2h_pinned_gbps)? * GB,
                h2d_pageable: c.positive("link.h2d_pageable_gbps", s.link.h2d_pageable_gbps)? * GB,
                d2h_pageable: c.positive("link.d2h_pageable_gbps", s.link.d2h_pageable_gbps)? * GB,
                h2d_latency_s: c.non_negative("link.h2d_latency_us", s.link.h2d_latency_us)? * 1e-6,
                d2h_latency_s: c.non_negative("link.d2h_latency_us", s.link.d2h_latency_us)? * 1e-6,
            },
            host: Host {
                ram_bytes: (c.positive("host.ram_gib", s.host.ram_gib)? * GIB) as u64,
            },
            peer: PeerLink {
                kind: s.peer.kind,
                bandwidth: c.positive("peer.gbps", s.peer.gbps)? * GB,
                latency_s: c.non_negative("peer.latency_us", s.peer.latency_us)? * 1e-6,
            },
            calibration: s.calibration,
        })
    }
}

/// Converts a `toml` error into a one-line [`Error::Parse`] with the line number.
pub(crate) fn toml_error(origin: &str, text: &str, e: &toml::de::Error) -> Error {
    let line = e
        .span()
        .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
    let message = e.message().trim().replace('\n', " ");
    Error::Parse {
        origin: origin.to_string(),
        message: match line {
            Some(l) => format!("line {l}: {message}"),
            None => message,
        },
    }
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

impl HardwareProfile {
    /// Names of the embedded presets.
    pub fn preset_names() -> Vec<String> {
        PRESETS.iter().map(|(n, _)| n.to_string()).collect()
    }

    /// The TOML text of a preset, with its source comments.
    pub fn preset_text(name: &str) -> Result<&'static str> {
        PRESETS
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, t)| *t)
            .ok_or_else(|| Error::UnknownHardware {
                name: name.to_string(),
                known: Self::preset_names(),
            })
    }

    /// A preset by name.
    pub fn preset(name: &str) -> Result<Self> {
        let text = Self::preset_text(name)?;
        Self::from_toml_str(text, &format!("preset {name}"))
    }

    /// A preset name, or else a path to a profile TOML file.
    pub fn resolve(name_or_path: &str) -> Result<Self> {
        let looks_like_path = name_or_path.contains('/')
            || name_or_path.contains('\\')
            || name_or_path.ends_with(".toml");
        if !looks_like_path && Self::preset_text(name_or_path).is_ok() {
            return Self::preset(name_or_path);
        }
        let path = Path::new(name_or_path);
        if path.is_file() {
            return Self::from_file(path);
        }
        if looks_like_path {
            return Err(Error::Io {
                path: path.to_path_buf(),
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"),
            });
        }
        Err(Error::UnknownHardware {
            name: name_or_path.to_string(),
            known: Self::preset_names(),
        })
    }

    /// Reads a profile file. Its `name` defaults to the file stem.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "profile".into());
        Self::from_toml_str_named(&text, &path.display().to_string(), &stem)
    }

    /// Parses profile TOML. `origin` prefixes errors.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Self> {
        Self::from_toml_str_named(text, origin, "profile")
    }

    fn from_toml_str_named(text: &str, origin: &str, default_name: &str) -> Result<Self> {
        let mut table: toml::Table =
            toml::from_str(text).map_err(|e| toml_error(origin, text, &e))?;
        if let Some(base) = table.remove("base") {
            let base_name = base.as_str().ok_or_else(|| Error::Parse {
                origin: origin.to_string(),
                message: "`base` must be a preset name string".into(),
            })?;
            let base_text = Self::preset_text(base_name)?;
            let mut merged: toml::Table = toml::from_str(base_text)
                .map_err(|e| toml_error(&format!("preset {base_name}"), base_text, &e))?;
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
            merge(&mut merged, table);
            table = merged;
        } else if !table.contains_key("name") {
            table.insert("name".into(), toml::Value::String(default_name.to_string()));
        }
        let raw: ProfileFile = table
            .try_into()
            .map_err(|e: toml::de::Error| toml_error(origin, text, &e))?;
        validate(raw, origin)
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
            e.contains("link.h2d_pinned_gbps") && e.contains("positive"),
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
}
