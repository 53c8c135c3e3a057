//! A freshly started server's first-use compilation of the fused-MoE kernel, a leaf.
//!
//! vLLM v0.15.1 runs an unquantised mixture of experts on CUDA through Triton's fused-MoE GEMM
//! (`TritonExperts`, `vllm/model_executor/layers/fused_moe/oracle/unquantized.py`). Triton
//! compiles a kernel the first time it is launched with a new combination of:
//! - its compile-time parameters: the launch configuration (`BLOCK_SIZE_M/N/K`, `GROUP_SIZE_M`,
//!   warps, stages), which `try_get_optimal_moe_config` (`fused_moe/fused_moe.py`) takes from
//!   the tuned table's key nearest the step's token count `M` (the keys of
//!   `configs/E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json`: 1, 2, 4, 8, 16, 24, 32, 48,
//!   64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096; a tie takes the smaller), and
//!   `top_k` and `MUL_ROUTED_WEIGHT`, which differ between the two GEMMs (w13: `top_k` k, w2:
//!   1 and the routing weights), so each GEMM is a kernel of its own;
//! - the specialisation of its plain integer arguments (`N, K, EM, num_valid_tokens` and the
//!   strides; `fused_moe_kernel` lists none in `do_not_specialize`): Triton 3.5 treats an
//!   integer equal to 1, and one divisible by 16, as different kernels
//!   (`triton/runtime/jit.py`, `triton/backends/compiler.py`). `num_valid_tokens` is `M · k`
//!   and `EM` (`sorted_token_ids`' length, `moe_align_block_size.py`) is `M · k + E ·
//!   (BLOCK_SIZE_M − 1)`, so for Mixtral (k 2, E 8) three classes of `M` (`M ≡ 0`, `M ≡ 4`,
//!   the rest, mod 8) are three kernels per configuration. The weights' `N`, `K` and strides
//!   are fixed by the model.
//!
//! Start-up reaches only some of them (`vllm/v1/worker/gpu_worker.py`
//! `compile_or_warm_up_model`, `gpu_model_runner.py`): the memory profile's pass of
//! `max_num_batched_tokens` tokens (and FlashInfer's autotuning pass of the same size), one
//! warm-up and one capture per CUDA-graph size, and the sampler's pass of
//! `min(max_num_seqs, max_num_batched_tokens)`. No Triton MoE warm-up exists in 0.15.1
//! (`model_executor/warmup/kernel_warmup.py` warms DeepGEMM and FlashInfer). A step within the
//! capture sizes replays a graph, whose kernels were compiled when it was captured; a larger
//! step runs eagerly at its own `M` (`cudagraph_dispatcher.py`) and may meet a kernel no
//! pass compiled. Triton then compiles it on the worker's thread while the step waits, and
//! every rank waits with it (each layer's all-reduce). vLLM issue #11056 (December 2024) and PR
//! #55268 (2026) describe these compilations; the time one takes is the host's
//! (`[serving] kernel_compile_us`).
//!
//! [`FusedMoeJit`] keeps which kernels one engine has compiled, starting from what start-up
//! compiled, and counts the new ones each eager step meets. A server that has already served
//! its load has compiled them all: this applies to a freshly started one
//! ([`crate::Config::cold_start`]).

use kvplan_vocab::ModelSpec;
use rustc_hash::FxHashSet;

/// The token counts of vLLM's tuned fused-MoE configurations (the keys of its tables under
/// `fused_moe/configs/`, e.g. `E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json`).
pub const CONFIG_KEYS: [u32; 18] = [
    1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096,
];

/// `BLOCK_SIZE_M` of a configuration (the H100 table for Mixtral's shapes: 64 up to 512
/// tokens, 128 from 1024). It enters only `EM`'s divisibility by 16, `M · k + E · (BLOCK_M −
/// 1)`, where 63 and 127 leave the same remainder, so another table's sizes give the same
/// kernels.
fn block_m(key: u32) -> u64 {
    if key <= 512 { 64 } else { 128 }
}

/// The configuration key vLLM picks for `m` tokens: the nearest, the smaller on a tie.
pub fn config_key(m: u64) -> u32 {
    // `min_by_key` keeps the first of equals: the keys ascend, so a tie takes the smaller.
    (CONFIG_KEYS.into_iter())
        .min_by_key(|&k| m.abs_diff(u64::from(k)))
        .expect("keys")
}

/// How Triton specialises one integer argument: equal to 1, divisible by 16, or neither.
fn class(v: u64) -> u8 {
    if v == 1 {
        1
    } else if v.is_multiple_of(16) {
        16
    } else {
        0
    }
}

/// One compiled fused-MoE kernel: the configuration key, the specialisation of `EM` and of
/// `num_valid_tokens`, and which GEMM (0: w13, 1: w2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Kernel {
    /// Configuration key ([`config_key`]).
    pub key: u32,
    /// `EM`'s class (1, 16 or 0).
    pub em: u8,
    /// `num_valid_tokens`' class (1, 16 or 0).
    pub valid: u8,
    /// 0 for the w13 GEMM, 1 for w2.
    pub gemm: u8,
}

/// The kernels a fused-MoE layer launches for a step of `m` tokens with `experts` routed
/// experts of which each token takes `top_k`.
pub fn kernels(m: u64, experts: u32, top_k: u32) -> [Kernel; 2] {
    let key = config_key(m);
    let valid = m * u64::from(top_k);
    let mut em = valid + u64::from(experts) * (block_m(key) - 1);
    // `invoke_fused_moe_triton_kernel`: a step of fewer tokens than a block clamps `EM`.
    if m < block_m(key) {
        em = em.min(valid * block_m(key));
    }
    let k = |gemm| Kernel {
        key,
        em: class(em),
        valid: class(valid),
        gemm,
    };
    [k(0), k(1)]
}

/// The fused-MoE kernels one engine has compiled (see the module docs).
#[derive(Debug, Clone)]
pub struct FusedMoeJit {
    experts: u32,
    top_k: u32,
    compiled: FxHashSet<Kernel>,
}

impl FusedMoeJit {
    /// For `model` on a freshly started engine whose start-up ran passes of each of
    /// `startup_tokens`: `None` for a model without routed experts or with quantised weights
    /// (other MoE kernels, not modelled here).
    pub fn new(model: &ModelSpec, startup_tokens: impl IntoIterator<Item = u64>) -> Option<Self> {
        let moe = model.moe.as_ref()?;
        if model.quantization.is_some() || model.moe_layers() == 0 || moe.experts <= 1 {
            return None;
        }
        let mut jit = FusedMoeJit {
            experts: moe.experts,
            top_k: moe.top_k,
            compiled: FxHashSet::default(),
        };
        for m in startup_tokens {
            if m > 0 {
                jit.compiled.extend(kernels(m, jit.experts, jit.top_k));
            }
        }
        Some(jit)
    }

    /// The token counts vLLM 0.15.1's start-up runs through the model: every CUDA-graph size,
    /// the memory profile's `max_num_batched_tokens` and the sampler's `min(max_num_seqs,
    /// max_num_batched_tokens)`.
    pub fn startup_tokens(
        cudagraph_sizes: &[u32],
        max_num_batched_tokens: u32,
        max_num_seqs: u32,
    ) -> Vec<u64> {
        let mut v: Vec<u64> = cudagraph_sizes.iter().map(|&s| u64::from(s)).collect();
        v.push(u64::from(max_num_batched_tokens));
        v.push(u64::from(max_num_seqs.min(max_num_batched_tokens)));
        v
    }

    /// An eager step of `m` tokens: how many kernels it compiles first.
    pub fn eager_step(&mut self, m: u64) -> u32 {
        if m == 0 {
            return 0;
        }
        let mut new = 0;
        for k in kernels(m, self.experts, self.top_k) {
            if self.compiled.insert(k) {
                new += 1;
            }
        }
        new
    }

    /// Kernels compiled so far, start-up's included.
    pub fn compiled(&self) -> usize {
        self.compiled.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_keys_follow_the_nearest_rule() {
        // The buckets of vLLM 0.15.1's nearest-key rule between 256 and 2048.
        for (m, key) in [
            (257, 256),
            (384, 256),
            (385, 512),
            (768, 512),
            (769, 1024),
            (1280, 1024),
            (1281, 1536),
            (1792, 1536),
            (1793, 2048),
            (2048, 2048),
            (1, 1),
            (3, 2),
            (20, 16),
            (5000, 4096),
        ] {
            assert_eq!(config_key(m), key, "M = {m}");
        }
    }

    /// The (`EM`, `num_valid_tokens`) classes of 600..680-token steps.
    fn classes(experts: u32, top_k: u32) -> FxHashSet<(u8, u8)> {
        (600..680u64)
            .map(|m| {
                let k = kernels(m, experts, top_k)[0];
                (k.em, k.valid)
            })
            .collect()
    }

    #[test]
    fn mixtral_has_three_kernels_per_configuration_and_gemm() {
        // k 2, E 8: EM = 2M + 8 (BLOCK_M - 1) is divisible by 16 only for M = 4 mod 8,
        // num_valid_tokens = 2M only for M = 0 mod 8.
        assert_eq!(classes(8, 2).len(), 3, "{:?}", classes(8, 2));
        let [a, b] = kernels(604, 8, 2);
        assert_eq!((a.em, a.valid), (16, 0));
        assert_eq!((a.gemm, b.gemm), (0, 1));
        assert_eq!(kernels(608, 8, 2)[0].valid, 16);
        assert_eq!(kernels(601, 8, 2)[0].em, 0);
        // With 64 experts EM's remainder is M k's: two classes.
        assert_eq!(classes(64, 8).len(), 2, "{:?}", classes(64, 8));
    }

    #[test]
    fn startup_covers_graph_sizes_and_the_profile_pass_only() {
        let m = ModelSpec::preset("mixtral-8x7b").unwrap();
        let sizes = crate::config::cudagraph_sizes(256);
        let mut jit = FusedMoeJit::new(&m, FusedMoeJit::startup_tokens(&sizes, 2048, 128))
            .expect("an unquantised MoE");
        // Every graph size and the profile pass: nothing to compile.
        for &s in &sizes {
            assert_eq!(jit.eager_step(u64::from(s)), 0, "size {s}");
        }
        assert_eq!(jit.eager_step(2048), 0);
        // A 600-token step: configuration 512, never reached at start-up.
        assert_eq!(jit.eager_step(600), 2);
        assert_eq!(jit.eager_step(608), 0, "same key and classes as 600");
        assert_eq!(jit.eager_step(604), 2);
        assert_eq!(jit.eager_step(601), 2);
        assert_eq!(
            jit.eager_step(761),
            0,
            "M = 1 mod 8, configuration 512 again"
        );
        assert_eq!(jit.eager_step(777), 2, "configuration 1024");
        // The 2048 configuration was compiled for M = 0 mod 8 only.
        assert_eq!(jit.eager_step(2000), 0);
        assert_eq!(jit.eager_step(1999), 2);
    }

    #[test]
    fn only_unquantised_mixtures_of_experts_compile() {
        let dense = ModelSpec::preset("llama-2-7b").unwrap();
        assert!(FusedMoeJit::new(&dense, [2048]).is_none());
        let mut q = ModelSpec::preset("mixtral-8x7b").unwrap();
        q.quantization = Some(kvplan_vocab::Quantization::Fp8);
        assert!(FusedMoeJit::new(&q, [2048]).is_none());
    }
}
