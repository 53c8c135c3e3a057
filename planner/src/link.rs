//! The peer-link override (`runahead.link_gbps`, `runahead.link_latency_us`): a replacement for
//! a hardware profile's `[peer]` link, applied to the hardware once, where a scenario is
//! resolved, so that every strategy's planner, the simulator and the executor see one link.
//! KV-Runahead's chain is what the link times today, but the override is the hardware's, not a
//! strategy's.

use serde::Serialize;

use kvplan_vocab::cost::LinkCost;
use kvplan_vocab::error::{Error, Result};
use kvplan_vocab::hardware::HardwareProfile;

/// A replacement for a profile's `[peer]` link (`runahead.link_gbps`, `runahead.link_latency_us`). It is
/// applied once, where the hardware is resolved ([`with_link_override`]); the planner and the
/// simulator then take the link from the same
/// [`CostModel`](kvplan_vocab::cost::CostModel).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct LinkOverride {
    /// Device-to-device bandwidth, GB/s (else the profile's).
    pub gbps: Option<f64>,
    /// Device-to-device latency, microseconds (else the profile's).
    pub latency_us: Option<f64>,
}

impl LinkOverride {
    /// Whether it replaces anything.
    pub fn is_some(&self) -> bool {
        self.gbps.is_some() || self.latency_us.is_some()
    }
}

/// The peer link of `hw` with `link`'s replacements.
pub fn link_of(hw: &HardwareProfile, link: &LinkOverride) -> Result<LinkCost> {
    let bw = match link.gbps {
        Some(g) if g.is_finite() && g > 0.0 => g * 1e9,
        Some(g) => {
            return Err(Error::invalid(
                "runahead.link_gbps",
                g,
                "must be a positive device-to-device bandwidth in GB/s (e.g. 300 for NVLink 3, 10 or 1 for a slow link)",
            ));
        }
        None => hw.peer.bandwidth,
    };
    let lat = match link.latency_us {
        Some(l) if l.is_finite() && l >= 0.0 => l * 1e-6,
        Some(l) => {
            return Err(Error::invalid(
                "runahead.link_latency_us",
                l,
                "must be zero or more microseconds",
            ));
        }
        None => hw.peer.latency_s,
    };
    Ok(LinkCost {
        latency_s: lat,
        secs_per_byte: 1.0 / bw,
    })
}

/// `hw` with its `[peer]` link replaced by `link`: the one place a link override is applied.
/// Resolve the hardware with it once and build the
/// [`CostModel`](kvplan_vocab::cost::CostModel) that both the planner
/// ([`crate::plan::plan`]) and the simulator get, so the simulator's peer sends take exactly what the planner assumed.
pub fn with_link_override(hw: &HardwareProfile, link: &LinkOverride) -> Result<HardwareProfile> {
    let l = link_of(hw, link)?;
    let mut out = hw.clone();
    out.peer.bandwidth = 1.0 / l.secs_per_byte;
    out.peer.latency_s = l.latency_s;
    if link.is_some() {
        out.peer.kind = format!("{} (overridden)", hw.peer.kind);
    }
    Ok(out)
}
