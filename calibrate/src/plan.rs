//! What to measure ([`Plan`]) and what was measured ([`Measurements`]).

use kvplan_exec::DeviceInfo;
use kvplan_vocab::ModelSpec;
use kvplan_vocab::calibration::CopyTables;

use crate::error::Error;
use crate::kernels;

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
