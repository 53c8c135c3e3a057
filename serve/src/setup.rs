//! What one engine is built from, its settings already checked against its model and GPU
//! ([`Config::validate`]): its iteration timer and its CPU tier.

use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};

use crate::config::{Config, CudagraphMode, Resolved};
use crate::iteration::{EngineCosts, IterationTimer};
use crate::tier::CpuTier;

/// The iteration timer of `config` for `model` on `hw`, with `resolved`, the settings already
/// checked ([`Config::validate`]).
pub fn timer(
    model: &ModelSpec,
    hw: &HardwareProfile,
    config: &Config,
    resolved: &Resolved,
) -> IterationTimer {
    let model = &config.apply(model, hw);
    let cost = match config.implementation {
        Some(i) => CostModel::new(hw).with_host(i.profile_on(hw)),
        None => CostModel::new(hw),
    };
    IterationTimer::new(
        model,
        &cost,
        config.block_size,
        resolved.copies_per_block,
        config.pinned,
    )
    .with_engine(EngineCosts {
        cudagraph_sizes: resolved.cudagraph_sizes.clone(),
        // Piecewise graphs only (vLLM before 0.11.0): no step runs as a full graph.
        full_graph_max_seqs: match resolved.cudagraph_mode {
            CudagraphMode::FullAndPiecewise => resolved.max_num_seqs,
            _ => 0,
        },
        serving: hw.serving.clone(),
    })
}

/// The CPU tier `resolved` asks for, for an engine serving `model` (one rank's shapes) on
/// `ranks` tensor-parallel GPUs; `None` without one.
pub fn cpu_tier(resolved: &Resolved, model: &ModelSpec, ranks: u32) -> Option<CpuTier> {
    if resolved.offload_bytes == 0 {
        return None;
    }
    let c = &resolved.config;
    let unit = (c.kv_offloading_backend.spec().unit_tokens)(c.block_size);
    Some(CpuTier::new(
        c.kv_offloading_backend,
        c.kv_offloading_eviction,
        c.kv_reload,
        resolved.offload_bytes,
        ranks,
        unit,
        u64::from(unit) * model.kv_bytes_per_token(),
        u64::from(unit) * model.act_bytes_per_token_layer() * u64::from(model.num_layers),
    ))
}
