//! What a KV-Runahead plan is asked (options) and what it decided (details): plain data, so
//! the plan types can hold them without importing the planner.

use serde::Serialize;

use crate::types::{Details, NoteData};

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
    /// Devices offered (`runahead.devices`, capped at the context length). The `even_chain` and
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

impl Details for RunaheadDetails {
    fn key(&self) -> &'static str {
        "runahead"
    }

    fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("KV-Runahead's decisions serialise to JSON")
    }
}

/// How the chosen partition was found (for its note).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionFound {
    /// The exact Pareto DP over `grid_cells` cells of `cell_tokens` tokens (`exact`: every
    /// partition; else refined to single tokens).
    Grid {
        /// Cells of the grid.
        grid_cells: u32,
        /// Tokens per cell.
        cell_tokens: u32,
        /// Whether the grid is every token.
        exact: bool,
    },
    /// The cap-balanced construction, polished over windows of `window` tokens.
    Constructed {
        /// The polishing window, tokens.
        window: u32,
    },
    /// A neighbouring device count's best, with a one-token device added or merged away.
    Neighbour,
    /// The whole context on one device.
    OneDevice,
    /// Equal chunks (no better one found).
    Even,
}

/// What the KV-Runahead planner notes.
#[derive(Debug, Clone, PartialEq)]
pub enum RunaheadNote {
    /// More devices would cut the TTFT by less than `min_gain`: the prompt stays on one device.
    StaysOnOneDevice {
        /// The fastest device count.
        best_devices: usize,
        /// TTFT on one device, seconds.
        single_s: f64,
        /// TTFT on the fastest count, seconds.
        best_s: f64,
        /// The least relative gain worth more devices.
        min_gain: f64,
    },
    /// Fewer devices than the fastest count, within `tolerance` of it.
    FewerDevices {
        /// Devices used.
        used: usize,
        /// Devices offered.
        offered: u32,
        /// The fastest device count.
        best_devices: usize,
        /// TTFT on the fastest count, seconds.
        best_s: f64,
        /// TTFT chosen, seconds.
        chosen_s: f64,
        /// The relative tolerance.
        tolerance: f64,
    },
    /// The plan's memory is that of `device`, the fullest.
    FullestDevice {
        /// The device.
        device: u32,
    },
    /// The single-device baseline does not fit one GPU (its TTFT is reported anyway).
    SingleDeviceDoesNotFit,
    /// A context longer than the model was trained for.
    PastTrainedLength {
        /// Context tokens.
        context: u32,
        /// The model.
        model: String,
        /// Its `max_position_embeddings`.
        max_position: u32,
    },
    /// The decode steps run on the last device of the chain.
    DecodeOnLastDevice {
        /// Decode steps.
        steps: u32,
        /// The device.
        device: u32,
    },
    /// How the partition was found.
    Partition(PartitionFound),
}

impl NoteData for RunaheadNote {
    fn render(&self, _: &dyn Fn(&str) -> String) -> String {
        match self {
            RunaheadNote::StaysOnOneDevice {
                best_devices,
                single_s,
                best_s,
                min_gain,
            } => format!(
                "{} devices would cut TTFT by only {:.1}% ({:.3} ms -> {:.3} ms; less than {:.0}%): the prompt stays on one device",
                best_devices,
                100.0 * (1.0 - best_s / single_s),
                single_s * 1e3,
                best_s * 1e3,
                100.0 * min_gain
            ),
            RunaheadNote::FewerDevices {
                used,
                offered,
                best_devices,
                best_s,
                chosen_s,
                tolerance,
            } => format!(
                "{used} of {offered} devices used: the best, {best_devices} devices, would give {:.3} ms against {:.3} ms ({:+.2}%, within {:.0}%)",
                best_s * 1e3,
                chosen_s * 1e3,
                100.0 * (best_s / chosen_s - 1.0),
                100.0 * tolerance
            ),
            RunaheadNote::FullestDevice { device } => format!(
                "memory is device {device}'s, the fullest: every device holds the weights, device i the K,V of tokens 0..s_i + c_i of every layer"
            ),
            RunaheadNote::SingleDeviceDoesNotFit => "the single-device baseline would not fit in one GPU's memory (its TTFT is reported anyway)".into(),
            RunaheadNote::PastTrainedLength {
                context,
                model,
                max_position,
            } => format!(
                "context {context} exceeds {model}'s max_position_embeddings ({max_position}); planned anyway"
            ),
            RunaheadNote::DecodeOnLastDevice { steps, device } => format!(
                "TTFT is the prefill; the {steps} decode steps run on device {device}, the last of the chain, which holds the whole KV cache"
            ),
            RunaheadNote::Partition(found) => match *found {
                PartitionFound::Grid {
                    grid_cells,
                    cell_tokens,
                    exact,
                } => format!(
                    "partition by exact Pareto DP over {grid_cells} grid cells of {cell_tokens} token{}{}",
                    if cell_tokens == 1 { "" } else { "s" },
                    if exact {
                        " (every partition)"
                    } else {
                        ", refined to single tokens"
                    }
                ),
                PartitionFound::Constructed { window } => format!(
                    "partition by the cap-balanced construction (every device up to a common cap on layer time and sends, searched over the last chunk and the front's budget), polished by exact Pareto DP over windows of +-{window} tokens"
                ),
                PartitionFound::Neighbour => "partition from a neighbouring device count's best, with a one-token device added or merged away".into(),
                PartitionFound::OneDevice => "the whole context on one device".into(),
                PartitionFound::Even => "partition: equal chunks (no better one found)".into(),
            },
        }
    }
}
