//! What a KV-Runahead plan is asked (options) and what it decided (details): plain data, so
//! the plan types can hold them without importing the planner.

use serde::Serialize;

/// KV-Runahead options.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunaheadOptions {
    /// Devices available (`P`).
    pub devices: u32,
}

impl Default for RunaheadOptions {
    fn default() -> Self {
        RunaheadOptions { devices: 4 }
    }
}

/// TTFT of each method, seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TtftByMethod {
    /// The chosen KV-Runahead partition.
    pub runahead: f64,
    /// All prefill on one device.
    pub single_device: f64,
    /// Equal chunks with the same chain.
    pub even_chain: f64,
    /// Tensor/sequence-parallel prefill with an all-gather of K, V.
    pub tensor_parallel: f64,
}

/// The decisions of a KV-Runahead plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunaheadDetails {
    /// Devices the chosen plan uses (may be fewer than offered).
    pub devices_used: u32,
    /// Context tokens per device, in chain order; sums to the context.
    pub partition: Vec<u32>,
    /// Predicted TTFT per method (simulated on the engine).
    pub ttft_s: TtftByMethod,
    /// `single_device / runahead`.
    pub speedup: f64,
    /// Devices offered (`--devices`, capped at the context length). The `even_chain` and
    /// `tensor_parallel` baselines use all of them.
    pub devices_offered: u32,
    /// `tensor_parallel / runahead` (the comparison the KV-Runahead paper reports).
    pub speedup_vs_tensor_parallel: f64,
    /// Simulated TTFT of the best partition found with `1, 2, ..., devices_offered` devices,
    /// seconds; `null` where that partition does not fit in memory (not a candidate).
    pub ttft_by_devices_s: Vec<Option<f64>>,
    /// The device (chain index) that holds the whole KV cache, samples the first token and runs
    /// the decode steps: the last of the chain.
    pub decode_device: u32,
    /// Peer link used (the cost model's): bandwidth, GB/s.
    pub link_gbps: f64,
    /// Peer link used: per-transfer latency, microseconds.
    pub link_latency_us: f64,
    /// Bytes the chosen plan sends over peer links (all layers, all devices).
    pub peer_bytes: u64,
    /// Bytes device `i` sends to device `i + 1` (all layers), in chain order; the decode device
    /// sends nothing and receives the last entry before it.
    pub peer_bytes_by_device: Vec<u64>,
    /// Bytes the tensor-parallel baseline sends between devices (all layers).
    pub tensor_parallel_peer_bytes: u64,
    /// What limits the chosen plan: `compute` (a device's layer work) or `link` (a send).
    pub bottleneck: &'static str,
    /// How the partition was found.
    pub search: SearchInfo,
}

/// How [`optimise`](super::optimise) searched.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchInfo {
    /// Cells of the coarse grid (the context when it has at most [`GRID_CELLS`](super::GRID_CELLS) tokens).
    pub grid_cells: u32,
    /// Tokens per coarse cell (1: every partition was searched exactly).
    pub cell_tokens: u32,
    /// Whether the coarse search covered every partition (context <= [`GRID_CELLS`](super::GRID_CELLS) tokens).
    pub exact: bool,
    /// Refinement rounds run for the chosen device count.
    pub refine_rounds: u32,
    /// Pareto states kept by the coarse DP (all device counts).
    pub states: u64,
    /// Whether the chosen partition is a local optimum at token resolution (see
    /// [`DeviceOptimum::local_optimum`](super::DeviceOptimum::local_optimum)).
    pub local_optimum: bool,
}
