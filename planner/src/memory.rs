//! Memory accounting: what a plan keeps on the GPU and on the host, and whether it fits.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::hardware::HardwareProfile;

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// One named allocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryItem {
    /// What it holds, e.g. `weights`, `kv cache`.
    pub name: String,
    /// Bytes at the plan's peak.
    pub bytes: u64,
}

/// Peak memory of a plan on the GPU and on the host.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MemoryPlan {
    /// GPU allocations.
    pub gpu: Vec<MemoryItem>,
    /// Host allocations.
    pub host: Vec<MemoryItem>,
}

fn total(items: &[MemoryItem]) -> u64 {
    items.iter().map(|i| i.bytes).sum()
}

fn breakdown(items: &[MemoryItem]) -> String {
    let mut v: Vec<&MemoryItem> = items.iter().filter(|i| i.bytes > 0).collect();
    v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then(a.name.cmp(&b.name)));
    v.iter()
        .map(|i| {
            let g = i.bytes as f64 / GIB;
            if g >= 0.1 {
                format!("{} {g:.2} GiB", i.name)
            } else {
                format!("{} {:.1} MiB", i.name, i.bytes as f64 / (1024.0 * 1024.0))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl MemoryPlan {
    /// Adds a GPU allocation (zero-byte items are kept out).
    pub fn gpu(&mut self, name: &str, bytes: u64) {
        if bytes > 0 {
            self.gpu.push(MemoryItem {
                name: name.into(),
                bytes,
            });
        }
    }

    /// Adds a host allocation (zero-byte items are kept out).
    pub fn host(&mut self, name: &str, bytes: u64) {
        if bytes > 0 {
            self.host.push(MemoryItem {
                name: name.into(),
                bytes,
            });
        }
    }

    /// Peak GPU bytes.
    pub fn gpu_bytes(&self) -> u64 {
        total(&self.gpu)
    }

    /// Peak host bytes.
    pub fn host_bytes(&self) -> u64 {
        total(&self.host)
    }

    /// Bytes of the item called `name` on the GPU (0 if absent).
    pub fn gpu_item(&self, name: &str) -> u64 {
        self.gpu
            .iter()
            .filter(|i| i.name == name)
            .map(|i| i.bytes)
            .sum()
    }

    /// Bytes of the item called `name` on the host (0 if absent).
    pub fn host_item(&self, name: &str) -> u64 {
        self.host
            .iter()
            .filter(|i| i.name == name)
            .map(|i| i.bytes)
            .sum()
    }

    /// Fails with [`Error::DoesNotFit`] when the GPU or host side exceeds `hw`. `what` names the
    /// plan; `gpu_advice` / `host_advice` say what to change.
    pub fn check(
        &self,
        hw: &HardwareProfile,
        what: &str,
        gpu_advice: &str,
        host_advice: &str,
    ) -> Result<()> {
        let need = self.gpu_bytes();
        let have = hw.gpu.usable_bytes();
        if need > have {
            return Err(Error::DoesNotFit {
                what: what.into(),
                resource: format!(
                    "GPU memory of {} ({:.1} GiB less {:.1} GiB reserved)",
                    hw.name,
                    hw.gpu.memory_bytes as f64 / GIB,
                    hw.gpu.reserved_bytes as f64 / GIB
                ),
                need_gib: need as f64 / GIB,
                have_gib: have as f64 / GIB,
                short_gib: (need - have) as f64 / GIB,
                breakdown: breakdown(&self.gpu),
                advice: gpu_advice.into(),
            });
        }
        let need = self.host_bytes();
        let have = hw.host.ram_bytes;
        if need > have {
            return Err(Error::DoesNotFit {
                what: what.into(),
                resource: format!("host RAM of {}", hw.name),
                need_gib: need as f64 / GIB,
                have_gib: have as f64 / GIB,
                short_gib: (need - have) as f64 / GIB,
                breakdown: breakdown(&self.host),
                advice: host_advice.into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_reports_the_shortfall_and_the_largest_items() {
        let hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
        let mut m = MemoryPlan::default();
        m.gpu("weights", 12 << 30);
        m.gpu("kv cache", 30 << 30);
        let e = m
            .check(&hw, "gpu-only plan", "offload the KV cache", "")
            .unwrap_err()
            .to_string();
        assert!(e.contains("needs 42.00 GiB"), "{e}");
        assert!(
            e.contains("offers 39.00 GiB") && e.contains("short by 3.00 GiB"),
            "{e}"
        );
        assert!(e.contains("kv cache 30.00 GiB, weights 12.00 GiB"), "{e}");
        assert!(e.ends_with("offload the KV cache"), "{e}");
        let mut ok = MemoryPlan::default();
        ok.gpu("weights", 1 << 30);
        ok.host("kv cache", 1 << 30);
        assert!(ok.check(&hw, "x", "", "").is_ok());
    }
}
