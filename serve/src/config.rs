//! Engine settings (vLLM's names and defaults) and what they resolve to against a model and a
//! GPU: the KV block budget, the token and sequence limits, CUDA-graph capture sizes.
//!
//! Defaults follow a vLLM release ([`Config::vllm_version`], [`crate::versions`]); for
//! `vllm-v1` the newest, v0.15.1 (the V1 engine): `EngineArgs.get_batch_defaults`
//! (`vllm/engine/arg_utils.py`) gives the OpenAI server 8192 batched tokens and 1024 sequences on
//! GPUs with at least 70 GiB that are not A100s, 2048 and 256 on the rest; chunked prefill,
//! prefix caching and asynchronous scheduling are on; CUDA graphs (full for uniform decode
//! steps, piecewise for the rest) are captured for `[1, 2, 4, 8, 16, .., 248, 256, 272, ..,
//! 512]` tokens, capped at `min(2 × max_num_seqs, 512, max_num_batched_tokens)`
//! (`VllmConfig._set_cudagraph_sizes`, `vllm/config/vllm.py`). Older V1 releases change some of
//! these (see the release table). The older schedulers (`vllm-v0`, `mixed`, `chunked`) keep
//! vLLM 0.4's defaults (256 sequences, synchronous steps, a free-block watermark, swap space).

use kvplan_vocab::memory::{AttentionImpl, PrefillPass, prefill_working_set};
use kvplan_vocab::{DType, HardwareProfile, KvCacheDtype, ModelSpec, Quantization};
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::schedulers::SchedulerSpec;
pub use crate::schedulers::{Preemption, SchedulerKind};
use crate::versions::Support;
pub use crate::versions::{CudagraphMode, VllmVersion};
use crate::versions::{Engine, Release};

/// `a, b or c`.
fn names<'a>(v: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = v.collect();
    match v.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        Some((last, _)) => (*last).to_string(),
        None => String::new(),
    }
}

/// The numbers of the releases that `keep` holds for, oldest first.
fn releases_where(keep: impl Fn(&Release) -> bool) -> impl Iterator<Item = &'static str> {
    crate::versions::RELEASES
        .iter()
        .filter(move |r| keep(r))
        .map(|r| r.name)
}

/// Calls the macro `$then` with [`Config`]'s fields, each `name: Type = default` with its docs,
/// in their order: [`Config`] and its [`Default`] here, and the scenario's `[serve]` table
/// ([`crate::scenario::RawConfig`], every field optional), are declared from this one list.
macro_rules! config_fields {
    ($then:ident) => {
        $then! {
            /// Tokens per KV block (vLLM's `block_size`, default 16).
            block_size: u32 = 16,
            /// Fraction of the GPU's usable memory the engine may use (default 0.9).
            gpu_memory_utilization: f64 = 0.9,
            /// Fraction of GPU blocks kept free when admitting a prompt (vLLM 0.4 schedulers;
            /// default 0.01; V1 has no watermark).
            watermark: f64 = 0.01,
            /// Host memory for swapped-out KV (and hybrid's stored activations), GiB (default 4).
            swap_space_gib: f64 = 4.0,
            /// Whether the swap space is pinned (default true; pageable copies use the slower
            /// curve).
            pinned: bool = true,
            /// Scheduler (default `vllm-v1`).
            scheduler: SchedulerKind = SchedulerKind::VllmV1,
            /// The vLLM release whose defaults and rules the engine follows
            /// ([`crate::versions`]): its batch defaults, prefix caching, chunked prefill,
            /// asynchronous scheduling, CUDA-graph mode and capture sizes, wherever a setting is
            /// left unset. Unset: the newest release of the scheduler's engine (0.15.1 for
            /// `vllm-v1`, 0.4.2 for the 0.4 schedulers).
            vllm_version: Option<VllmVersion> = None,
            /// Preemption mode (default recompute; `vllm-v1` recomputes only).
            preemption: Preemption = Preemption::Recompute,
            /// Most sequences running at once (vLLM's `max_num_seqs`).
            max_num_seqs: Option<u32> = None,
            /// Most tokens in one iteration (vLLM's `max_num_batched_tokens`).
            max_num_batched_tokens: Option<u32> = None,
            /// Longest request in tokens, prompt plus output (vLLM's `max_model_len`; default the
            /// model's context). Longer prompts are rejected; generation stops at it (finish reason
            /// `length`).
            max_model_len: Option<u32> = None,
            /// Use this many GPU KV blocks instead of the memory accounting's
            /// (vLLM's `num_gpu_blocks_override`; `vllm-v1` reserves one as the null block, as vLLM
            /// does).
            num_gpu_blocks_override: Option<u32> = None,
            /// Automatic prefix caching (vLLM's `enable_prefix_caching`; default on for
            /// `vllm-v1`, off for the vLLM 0.4 schedulers, which do not support it here).
            enable_prefix_caching: Option<bool> = None,
            /// Chunked prefill for `vllm-v1` (vLLM's `enable_chunked_prefill`, default on): off, a
            /// prompt whose uncached tokens exceed the remaining budget waits for a later step.
            enable_chunked_prefill: Option<bool> = None,
            /// `vllm-v1`: cap on one request's prefill chunk (vLLM's
            /// `long_prefill_token_threshold`, 0 = none).
            long_prefill_token_threshold: u32 = 0,
            /// Schedule the next step while the GPU runs this one (vLLM's `async_scheduling`;
            /// default on for `vllm-v1`, as in vLLM 0.15, off for the 0.4 schedulers).
            async_scheduling: Option<bool> = None,
            /// No CUDA graphs (vLLM's `enforce_eager`): every kernel launched from the host.
            enforce_eager: bool = false,
            /// A freshly started server (default off: one that has already served its load).
            /// Its first eager steps of a mixture of experts wait while Triton compiles the
            /// fused-MoE kernels start-up did not reach ([`crate::warmup`]), `[serving]
            /// kernel_compile_us` each. Dense models, quantised weights and steps within the
            /// CUDA-graph sizes are unaffected.
            cold_start: bool = false,
            /// Largest CUDA-graph batch in tokens (`max_cudagraph_capture_size`); default `min(2 ×
            /// max_num_seqs, 512, max_num_batched_tokens)`.
            max_cudagraph_capture_size: Option<u32> = None,
            /// Copies per KV block on swap; `None`: `2 * num_layers` (vLLM keeps one K and one V
            /// cache tensor per layer and issues one `cudaMemcpyAsync` per block per tensor).
            swap_copies_per_block: Option<u32> = None,
            /// Keep the per-iteration time series (default true).
            record_timeseries: bool = true,
            /// Keep one [`crate::RequestRecord`] per request in the report (default true; at
            /// most [`crate::MAX_RECORDED_REQUESTS`]). Off, the report's `requests` is empty
            /// and the summary is built as requests finish: memory follows what is in flight.
            record_requests: bool = true,
            /// Expert parallelism for a mixture of experts (vLLM's `enable_expert_parallel`,
            /// default off): each tensor-parallel rank holds `experts / tensor_parallel_size` whole
            /// experts rather than every expert at `1 / tensor_parallel_size` of its width. The
            /// engine runs the model it is given: a scenario shards it accordingly
            /// ([`kvplan_vocab::ModelSpec::sharded_with`]); a dense model ignores the setting, as
            /// vLLM does.
            enable_expert_parallel: bool = false,
            /// Weight quantisation (vLLM's `quantization`: `fp8`, `awq`, `gptq`; default none): the
            /// decoder layers' linear weights at 1 byte (fp8) or 133/256 bytes (4-bit, group
            /// 128) per parameter, fp8 GEMMs at the GPU's fp8 rate where it has one
            /// ([`kvplan_vocab::quant`]). A GPU below vLLM's minimum compute capability for the
            /// method is refused.
            quantization: Option<Quantization> = None,
            /// The weights' and activations' element type (vLLM's `dtype`): `auto`, the
            /// model's own where the GPU supports it (a bf16 model on a GPU below compute
            /// capability 8.0 falls back to float16, a float32 one to the GPU's first), or
            /// `half`/`float16`, `bfloat16`, `float`/`float32` ([`ServeDtype`]).
            dtype: ServeDtype = ServeDtype::Auto,
            /// Element type of the KV cache (vLLM's `kv_cache_dtype`: `auto`, the model's dtype, or
            /// `fp8`, one byte per element): the block count, swap copies and attention's K and
            /// V reads follow.
            kv_cache_dtype: KvCacheDtype = KvCacheDtype::Auto,
            /// The implementation whose host thread is modelled (`vllm-v0`,
            /// `vllm-v1-cudagraph`, ...; [`kvplan_vocab::host`]): the launches of each step and
            /// the swap copies' issues come from its profile, each kernel takes its device time.
            /// Unset: the `[serving]` section's launch figures and copies without a host thread.
            /// The swap space's memory kind stays `pinned`'s.
            implementation: Option<kvplan_vocab::host::Implementation> = None,
            /// A CPU tier for the KV cache (vLLM's `kv_offloading_size`, GiB, the total over
            /// the tensor-parallel ranks): full blocks are stored to pinned host memory and a
            /// prefix found there is loaded back ([`crate::tier`]). Unset: none.
            kv_offloading_size_gib: Option<f64> = None,
            /// How the CPU tier moves blocks (vLLM's `kv_offloading_backend`: `native`, vLLM's
            /// OffloadingConnector, or `lmcache`).
            kv_offloading_backend: crate::tier::BackendKind = crate::tier::BackendKind::default(),
            /// Which block the CPU tier gives up when full (`lru`, vLLM's default, or `arc`).
            kv_offloading_eviction: crate::tier::EvictionKind = crate::tier::EvictionKind::default(),
            /// How a CPU-tier hit comes back (`transfer`: its K and V copied, as vLLM does;
            /// `hybrid`: KVPR's split, the first tokens' layer inputs stored instead and their K
            /// and V recomputed while the rest is copied).
            kv_reload: crate::tier::Reload = crate::tier::Reload::Transfer,
        }
    };
}
pub(crate) use config_fields;

/// vLLM's `dtype` (v0.15.1, `vllm/config/model.py` `_STR_DTYPE_TO_TORCH_DTYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum ServeDtype {
    /// The model's own where the GPU supports it (`_resolve_auto_dtype`).
    #[default]
    Auto,
    /// float16.
    Half,
    /// float16.
    Float16,
    /// bfloat16 (compute capability 8.0 and above).
    Bfloat16,
    /// float32.
    Float,
    /// float32.
    Float32,
}

impl ServeDtype {
    /// The name vLLM takes.
    pub fn as_str(self) -> &'static str {
        match self {
            ServeDtype::Auto => "auto",
            ServeDtype::Half => "half",
            ServeDtype::Float16 => "float16",
            ServeDtype::Bfloat16 => "bfloat16",
            ServeDtype::Float => "float",
            ServeDtype::Float32 => "float32",
        }
    }

    /// The element type vLLM v0.15.1 serves `model` in on `hw`, or why it refuses:
    /// - the GPU's dtypes (`vllm/platforms/cuda.py` `supported_dtypes`): bf16, fp16, fp32 at
    ///   compute capability 8.0 and above (or none recorded), fp16 and fp32 from 6.0, else fp32;
    ///   less fp16 for the models vLLM keeps off it (`_FLOAT16_NOT_SUPPORTED_MODELS`: gemma2,
    ///   gemma3, glm4, plamo2, "numerical instability");
    /// - `auto` (`_resolve_auto_dtype`): a float32 model goes to the first of those, and a
    ///   dtype the GPU lacks falls back to it ("Falling back to ... for compatibility");
    /// - an explicit bfloat16 below 8.0 is refused (`check_if_supports_dtype`), as is float16
    ///   for the models above (`_check_valid_dtype`).
    pub fn served(self, model: &ModelSpec, hw: &HardwareProfile) -> Result<DType, String> {
        let cc = hw.gpu.compute_capability;
        let bf16_ok = cc.is_none_or(|c| c + 1e-9 >= 8.0);
        let fp16_ok_gpu = cc.is_none_or(|c| c + 1e-9 >= 6.0);
        // Of the families kvplan models, Gemma 2 is the one vLLM keeps off float16.
        let fp16_ok_model = model.family != kvplan_vocab::model::Family::Gemma2;
        let supported: Vec<DType> = [
            (DType::Bf16, bf16_ok),
            (DType::Fp16, fp16_ok_gpu && fp16_ok_model),
            (DType::Fp32, true),
        ]
        .into_iter()
        .filter_map(|(d, ok)| ok.then_some(d))
        .collect();
        let explicit = match self {
            ServeDtype::Auto => {
                let preferred = supported[0];
                let config = if model.dtype == DType::Fp32 {
                    preferred
                } else {
                    model.dtype
                };
                return Ok(if supported.contains(&config) {
                    config
                } else {
                    preferred
                });
            }
            ServeDtype::Half | ServeDtype::Float16 => DType::Fp16,
            ServeDtype::Bfloat16 => DType::Bf16,
            ServeDtype::Float | ServeDtype::Float32 => DType::Fp32,
        };
        if explicit == DType::Bf16 && !bf16_ok {
            return Err(format!(
                "float16 or float32 on {} (compute capability {}): vLLM runs bfloat16 only from 8.0; use `serve.dtype` half",
                hw.name,
                cc.map_or("none recorded".into(), |c| format!("{c:.1}"))
            ));
        }
        if explicit == DType::Fp16 && !fp16_ok_model {
            return Err(format!(
                "bfloat16 or float32 for {}: vLLM keeps Gemma 2 off float16 (numerical instability)",
                model.name
            ));
        }
        if explicit == DType::Fp16 && !fp16_ok_gpu {
            return Err(format!(
                "float32 on {}: vLLM has no float16 below compute capability 6.0",
                hw.name
            ));
        }
        Ok(explicit)
    }
}

/// Declares [`Config`] and its [`Default`] from [`config_fields`].
macro_rules! declare_config {
    ($($(#[doc = $doc:literal])* $name:ident: $ty:ty = $default:expr,)*) => {
        /// Engine settings. Build with [`Config::default`] and overwrite fields;
        /// [`Config::validate`] checks them against a model and a GPU. `None` means vLLM's
        /// default for the scheduler and GPU.
        #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        pub struct Config {
            $($(#[doc = $doc])* pub $name: $ty,)*
        }

        impl Default for Config {
            fn default() -> Self {
                Config {
                    $($name: $default,)*
                }
            }
        }
    };
}

config_fields!(declare_config);

/// Declares [`RawConfig`] from [`Config`]'s fields ([`crate::config::config_fields`]): each
/// optional, a field that is already an `Option` (vLLM's default for the scheduler and GPU) still
/// one. The fields are taken one at a time into the struct's fields and, per field, how
/// [`RawConfig::to_config`] fills it from the defaults (`unwrap_or`, or `or` for an `Option`).
macro_rules! raw_config {
    ([$($field:tt)*] [$($name:ident $fill:ident)*]) => {
        /// The `[serve]` table: every [`Config`] field, each optional (unset: the default).
        #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub struct RawConfig {
            $($field)*
            /// Tensor-parallel GPUs serving the model (vLLM's `tensor_parallel_size`): the
            /// engine simulates one rank, with the model's per-rank shapes
            /// ([`ModelSpec::sharded`]), its share of the weights and KV cache, and an all-reduce
            /// after each layer's attention and FFN.
            pub tensor_parallel_size: Option<u32>,
        }

        impl RawConfig {
            /// Fields `other` sets win.
            pub fn overlay(mut self, other: RawConfig) -> Self {
                $(pick(&mut self.$name, other.$name);)*
                pick(&mut self.tensor_parallel_size, other.tensor_parallel_size);
                self
            }

            /// The defaults with the given fields replaced.
            pub fn to_config(&self) -> Config {
                let d = Config::default();
                Config {
                    $($name: self.$name.$fill(d.$name),)*
                }
            }
        }
    };
    ([$($field:tt)*] [$($names:tt)*]
        $(#[doc = $doc:literal])* $name:ident: Option<$ty:ty> = None, $($rest:tt)*) => {
        raw_config! {
            [$($field)*
                #[doc = concat!("[`Config::", stringify!($name), "`].")]
                pub $name: Option<$ty>,]
            [$($names)* $name or]
            $($rest)*
        }
    };
    ([$($field:tt)*] [$($names:tt)*]
        $(#[doc = $doc:literal])* $name:ident: $ty:ty = $default:expr, $($rest:tt)*) => {
        raw_config! {
            [$($field)*
                #[doc = concat!("[`Config::", stringify!($name), "`].")]
                pub $name: Option<$ty>,]
            [$($names)* $name unwrap_or]
            $($rest)*
        }
    };
    ($($fields:tt)*) => {
        raw_config! { [] [] $($fields)* }
    };
}

crate::config::config_fields!(raw_config);

pub(crate) fn pick<T>(a: &mut Option<T>, b: Option<T>) {
    if b.is_some() {
        *a = b;
    }
}

impl Config {
    /// vLLM 0.4's engine (the `vllm-v0` scheduler) with its defaults.
    pub fn vllm_v0() -> Self {
        Config {
            scheduler: SchedulerKind::PrefillFirst,
            ..Config::default()
        }
    }
}

/// Checked settings and what they imply.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Resolved {
    /// The settings as given.
    pub config: Config,
    /// The vLLM release followed ([`Config::vllm_version`], or the scheduler's default).
    pub vllm_version: VllmVersion,
    /// `max_num_seqs` after defaults.
    pub max_num_seqs: u32,
    /// `max_num_batched_tokens` after defaults.
    pub max_num_batched_tokens: u32,
    /// `max_model_len` after defaults.
    pub max_model_len: u32,
    /// Prefix caching on.
    pub prefix_caching: bool,
    /// Chunked prefill on (`vllm-v1`; the `chunked` scheduler always chunks).
    pub chunked_prefill: bool,
    /// Asynchronous scheduling on.
    pub async_scheduling: bool,
    /// CUDA-graph capture sizes in tokens, ascending (empty: eager).
    pub cudagraph_sizes: Vec<u32>,
    /// How the graphs are used ([`CudagraphMode::None`] without capture sizes).
    pub cudagraph_mode: CudagraphMode,
    /// GPU KV blocks (vLLM's `num_gpu_blocks`).
    pub gpu_blocks: u32,
    /// Blocks that hold KV (`vllm-v1`: one less, the null block).
    pub usable_blocks: u32,
    /// Blocks kept free on admission (vLLM 0.4 schedulers).
    pub watermark_blocks: u32,
    /// Host swap space, bytes.
    pub host_bytes: u64,
    /// Bytes of one KV block (all layers).
    pub block_bytes: u64,
    /// Copies per KV block when swapping.
    pub copies_per_block: u32,
    /// Model weights on the GPU, bytes.
    pub weights_bytes: u64,
    /// Activation working set of a `max_num_batched_tokens` pass.
    pub activation_bytes: u64,
    /// The CPU tier's size, bytes over all ranks (0: none).
    pub offload_bytes: u64,
    /// Simulate every step as its own pass, never fast-forwarding a stretch of decode-only
    /// steps ([`crate::engine`]): the reference the fast path is tested against. Not a setting
    /// of the run (the results are the same), so never serialized.
    #[serde(skip)]
    pub step_by_step: bool,
}

fn check(field: &'static str, ok: bool, value: String, expect: &'static str) -> Result<(), Error> {
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidConfig {
            field,
            value,
            expect: expect.into(),
        })
    }
}

/// The features a scheduler runs with, as [`Config::validate`] resolves them.
struct Features {
    prefix_caching: bool,
    chunked_prefill: bool,
    async_scheduling: bool,
}

/// The request and step limits after defaults.
#[derive(Clone, Copy)]
struct Limits {
    max_model_len: u32,
    seqs: u32,
    tokens: u32,
}

/// What the memory accounting gives: the KV blocks and the bytes behind them.
struct KvMemory {
    gpu_blocks: u32,
    usable_blocks: u32,
    block_bytes: u64,
    copies_per_block: u32,
    weights_bytes: u64,
    activation_bytes: u64,
}

/// vLLM 0.15.1's capture sizes up to `max`: 1, 2, 4, then every 8 below 256, then every 16
/// ([`crate::versions::CaptureRule::EverySixteenFrom256`]).
pub fn cudagraph_sizes(max: u32) -> Vec<u32> {
    crate::versions::CaptureRule::EverySixteenFrom256.sizes(max)
}

impl Config {
    /// `model` as this engine serves it: with [`Config::quantization`] and an fp8
    /// [`Config::kv_cache_dtype`] where they are set (unset, the model's own).
    pub fn apply(&self, model: &ModelSpec, hw: &HardwareProfile) -> ModelSpec {
        let mut m = model.clone();
        if let Ok(d) = self.dtype.served(model, hw) {
            m.dtype = d;
        }
        if self.quantization.is_some() {
            m.quantization = self.quantization;
        }
        if !self.kv_cache_dtype.is_auto() {
            m.kv_cache_dtype = self.kv_cache_dtype;
        }
        m
    }

    /// Checks every setting and derives the limits and the GPU block count: from memory
    /// accounting, `(usable × utilization − weights − working set of a max_num_batched_tokens
    /// pass) / (block_size × KV bytes per token of all layers)`, or the override. The model is
    /// taken as [`Config::apply`] gives it (quantised weights, an fp8 KV cache).
    pub fn validate(&self, model: &ModelSpec, hw: &HardwareProfile) -> Result<Resolved, Error> {
        let model = &self.served_model(model, hw)?;
        let spec = self.scheduler.spec();
        let release = self.release()?;
        let offload_bytes = self.check_offloading(spec, release, hw)?;
        self.check_block_size(release)?;
        self.check_fractions()?;
        let features = self.resolve_features(spec, release)?;
        let limits = self.resolve_limits(model, hw, release, features.chunked_prefill)?;
        let graph_max = match self.max_cudagraph_capture_size {
            _ if self.enforce_eager => 0,
            Some(m) => m.min(limits.tokens),
            None => release.capture.default_max(limits.seqs).min(limits.tokens),
        };
        let cudagraph_sizes = release.capture.sizes(graph_max);
        let kv = self.kv_memory(model, hw, spec, &limits)?;
        Ok(Resolved {
            config: self.clone(),
            vllm_version: release.version,
            max_num_seqs: limits.seqs,
            max_num_batched_tokens: limits.tokens,
            max_model_len: limits.max_model_len,
            prefix_caching: features.prefix_caching,
            chunked_prefill: features.chunked_prefill,
            async_scheduling: features.async_scheduling,
            cudagraph_mode: if cudagraph_sizes.is_empty() {
                CudagraphMode::None
            } else {
                release.cudagraph_mode
            },
            cudagraph_sizes,
            gpu_blocks: kv.gpu_blocks,
            usable_blocks: kv.usable_blocks,
            watermark_blocks: if spec.watermark {
                (self.watermark * f64::from(kv.gpu_blocks)) as u32
            } else {
                0
            },
            host_bytes: (self.swap_space_gib * (1u64 << 30) as f64) as u64,
            block_bytes: kv.block_bytes,
            copies_per_block: kv.copies_per_block,
            weights_bytes: kv.weights_bytes,
            activation_bytes: kv.activation_bytes,
            offload_bytes,
            step_by_step: false,
        })
    }

    /// `model` as [`Config::apply`] serves it, once its element types are checked: a dtype the
    /// GPU runs, a quantisation method it can run, an fp8 cache only under a 16-bit model.
    fn served_model(&self, model: &ModelSpec, hw: &HardwareProfile) -> Result<ModelSpec, Error> {
        if let Err(why) = self.dtype.served(model, hw) {
            return Err(Error::InvalidConfig {
                field: "dtype",
                value: self.dtype.as_str().into(),
                expect: why.into(),
            });
        }
        let model = self.apply(model, hw);
        if let Some(q) = model.quantization
            && let Err(why) = q.check_gpu(&hw.name, hw.gpu.compute_capability)
        {
            return Err(Error::InvalidConfig {
                field: "quantization",
                value: q.as_str().into(),
                expect: format!("a method this GPU can run: {why}").into(),
            });
        }
        if model.kv_cache_dtype == KvCacheDtype::Fp8 && model.dtype == DType::Fp32 {
            return Err(Error::InvalidConfig {
                field: "kv_cache_dtype",
                value: "fp8".into(),
                expect: format!(
                    "auto for {}, served in fp32 (kvplan models an fp8 cache under a 16-bit \
                     model only: fp16 or bf16)",
                    model.name
                )
                .into(),
            });
        }
        Ok(model)
    }

    /// [`Config::block_size`] against vLLM's `block_size` choices, by release
    /// ([`Release::block_sizes`]).
    fn check_block_size(&self, release: &Release) -> Result<(), Error> {
        if release.block_sizes.contains(&self.block_size) {
            return Ok(());
        }
        let sizes: Vec<String> = release.block_sizes.iter().map(u32::to_string).collect();
        Err(Error::InvalidConfig {
            field: "block_size",
            value: self.block_size.to_string(),
            expect: format!(
                "one of {}: the block sizes vLLM {} accepts",
                names(sizes.iter().map(String::as_str)),
                release.name
            )
            .into(),
        })
    }

    /// The memory fractions and the swap space in range.
    fn check_fractions(&self) -> Result<(), Error> {
        let u = self.gpu_memory_utilization;
        check(
            "gpu_memory_utilization",
            u > 0.0 && u <= 1.0,
            kvplan_vocab::limits::show(u),
            "in (0, 1]",
        )?;
        let w = self.watermark;
        check(
            "watermark",
            (0.0..1.0).contains(&w),
            kvplan_vocab::limits::show(w),
            "in [0, 1)",
        )?;
        let s = self.swap_space_gib;
        check(
            "swap_space_gib",
            s.is_finite() && s >= 0.0,
            kvplan_vocab::limits::show(s),
            "a non-negative number",
        )
    }

    /// The scheduler's features as the release has them: its preemption modes, and whether
    /// prefix caching, chunked prefill and asynchronous scheduling are on (each setting refused
    /// where the release cannot have it).
    fn resolve_features(&self, spec: &SchedulerSpec, release: &Release) -> Result<Features, Error> {
        if !spec.preemption.contains(&self.preemption) {
            return Err(Error::InvalidConfig {
                field: "preemption",
                value: self.preemption.as_str().into(),
                expect: format!(
                    "{} with the {} scheduler ({} preempts by {}; swap and hybrid need \
                     scheduler vllm-v0, mixed or chunked)",
                    names(spec.preemption.iter().map(|p| p.as_str())),
                    self.scheduler.as_str(),
                    spec.engine,
                    names(spec.preemption.iter().map(|p| p.as_str())),
                )
                .into(),
            });
        }
        let Some(caching) = release.prefix_caching.resolve(self.enable_prefix_caching) else {
            return Err(Error::InvalidConfig {
                field: "enable_prefix_caching",
                value: "true".into(),
                expect: "false with the vLLM 0.4 schedulers (prefix caching is modelled for \
                         scheduler vllm-v1)"
                    .into(),
            });
        };
        if release.chunked_prefill == Support::No && self.enable_chunked_prefill.is_some() {
            return Err(Error::InvalidConfig {
                field: "enable_chunked_prefill",
                value: format!("{}", self.enable_chunked_prefill.unwrap_or_default()),
                expect: "unset except with scheduler vllm-v1 (choose scheduler chunked or \
                         vllm-v0 for the 0.4 engine's behaviour)"
                    .into(),
            });
        }
        let Some(chunking) = release.chunked_prefill.resolve(self.enable_chunked_prefill) else {
            return Err(Error::InvalidConfig {
                field: "enable_chunked_prefill",
                value: "false".into(),
                expect: format!(
                    "true or unset with vLLM {}: its V1 engine always chunks prefills \
                     (vllm/engine/arg_utils.py turns enable_chunked_prefill on); {} let it be \
                     turned off",
                    release.name,
                    names(releases_where(|r| r.chunked_prefill == Support::DefaultOn))
                )
                .into(),
            });
        };
        let Some(async_scheduling) = release.async_scheduling.resolve(self.async_scheduling) else {
            return Err(Error::InvalidConfig {
                field: "async_scheduling",
                value: "true".into(),
                expect: format!(
                    "false or unset with vLLM {}, which has no asynchronous scheduling (it came \
                     in vLLM 0.10.0: {})",
                    release.name,
                    names(releases_where(
                        |r| r.engine == Engine::V1 && r.async_scheduling != Support::No
                    ))
                )
                .into(),
            });
        };
        Ok(Features {
            prefix_caching: caching,
            chunked_prefill: spec.always_chunks || chunking,
            async_scheduling,
        })
    }

    /// The longest request, the sequence limit and the step's token budget after the release's
    /// defaults for this GPU, refused as vLLM's `SchedulerConfig` refuses them.
    fn resolve_limits(
        &self,
        model: &ModelSpec,
        hw: &HardwareProfile,
        release: &Release,
        chunked: bool,
    ) -> Result<Limits, Error> {
        let max_model_len = self.max_model_len.unwrap_or(model.max_position);
        check(
            "max_model_len",
            max_model_len >= 2,
            max_model_len.to_string(),
            "at least 2 tokens (a prompt of one token and one output token)",
        )?;
        let (default_tokens, default_seqs) = (release.batch_defaults)(hw);
        let seqs = self.max_num_seqs.unwrap_or(default_seqs);
        check("max_num_seqs", seqs >= 1, seqs.to_string(), "at least 1")?;
        let tokens = match self.max_num_batched_tokens {
            Some(t) => t,
            // Chunking off: a whole prompt of the longest length must fit one step.
            None if !chunked => default_tokens.max(max_model_len),
            None => default_tokens,
        };
        check(
            "max_num_batched_tokens",
            tokens >= 1,
            tokens.to_string(),
            "at least 1",
        )?;
        // vLLM's `SchedulerConfig` checks, the same in every release modelled (`_verify_args`,
        // `vllm/config.py` in 0.4.2 to 0.9.2, `vllm/config/scheduler.py` in 0.10.2 and 0.11.0;
        // `verify_max_model_len`, `vllm/config/scheduler.py`, in 0.13.0 and 0.15.1).
        if !chunked && tokens < max_model_len {
            return Err(Error::InvalidConfig {
                field: "max_num_batched_tokens",
                value: tokens.to_string(),
                expect: format!(
                    "at least max_model_len ({max_model_len}) when chunked prefill is off: vLLM \
                     {} refuses a step budget a prompt of max_model_len tokens could never fit \
                     (raise `serve.max_num_batched_tokens`, lower `serve.max_model_len`, or turn \
                     chunked prefill on)",
                    release.name
                )
                .into(),
            });
        }
        // A default `max_num_seqs` above the budget: lowered to it from vLLM 0.10.2
        // ([`Release::caps_default_seqs`]), refused before, as a given one always is.
        let seqs = match self.max_num_seqs {
            None if release.caps_default_seqs => seqs.min(tokens),
            _ => seqs,
        };
        if tokens < seqs {
            return Err(self.budget_below_seqs(release, tokens, seqs));
        }
        Ok(Limits {
            max_model_len,
            seqs,
            tokens,
        })
    }

    /// The error for a step budget of `tokens` below `seqs` running sequences, naming the
    /// setting given (the budget where both are given or neither's default is the culprit).
    fn budget_below_seqs(&self, release: &Release, tokens: u32, seqs: u32) -> Error {
        let default = |given: bool| {
            if given {
                String::new()
            } else {
                format!(", vLLM {}'s default on this GPU", release.name)
            }
        };
        let (field, value, bound) = if self.max_num_batched_tokens.is_some() {
            let d = default(self.max_num_seqs.is_some());
            (
                "max_num_batched_tokens",
                tokens,
                format!("at least max_num_seqs ({seqs}{d})"),
            )
        } else {
            let d = default(false);
            (
                "max_num_seqs",
                seqs,
                format!("at most max_num_batched_tokens ({tokens}{d})"),
            )
        };
        Error::InvalidConfig {
            field,
            value: value.to_string(),
            expect: format!(
                "{bound}: vLLM {} refuses a step budget below one token per running \
                 sequence (raise `serve.max_num_batched_tokens` or lower \
                 `serve.max_num_seqs`)",
                release.name
            )
            .into(),
        }
    }

    /// The memory accounting: the bytes of a block, of the weights and of a full step's working
    /// set, and the GPU blocks they leave (or the override), which must hold one request of
    /// `max_model_len` tokens unless the scheduler refuses such requests itself.
    fn kv_memory(
        &self,
        model: &ModelSpec,
        hw: &HardwareProfile,
        spec: &SchedulerSpec,
        limits: &Limits,
    ) -> Result<KvMemory, Error> {
        let Limits {
            max_model_len,
            seqs,
            tokens,
        } = *limits;
        let copies = self
            .swap_copies_per_block
            .unwrap_or(2 * model.num_layers)
            .max(1);
        let block_bytes = u64::from(self.block_size) * model.kv_bytes_per_token();
        let weights = model.weight_bytes();
        let act = prefill_working_set(
            model,
            &PrefillPass {
                batch: 1,
                q_tokens: u64::from(tokens),
                context: u64::from(tokens),
                attention: AttentionImpl::Fused,
                logits_rows: u64::from(seqs.min(tokens)),
            },
        )
        .peak;
        let usable_mem = hw.gpu.usable_bytes() as f64 * self.gpu_memory_utilization;
        let gpu_blocks = match self.num_gpu_blocks_override {
            Some(n) => {
                check(
                    "num_gpu_blocks_override",
                    n >= 2,
                    n.to_string(),
                    "at least 2 blocks (vLLM keeps one as the null block)",
                )?;
                n
            }
            None => {
                let budget = usable_mem - weights as f64 - act as f64;
                let blocks = (budget / block_bytes as f64).floor();
                if blocks < 2.0 {
                    return Err(Error::NoKvMemory {
                        usable_bytes: usable_mem as u64,
                        weights_bytes: weights,
                        activation_bytes: act,
                    });
                }
                blocks.min(f64::from(u32::MAX)) as u32
            }
        };
        let usable_blocks = if spec.null_block {
            gpu_blocks - 1
        } else {
            gpu_blocks
        };
        if !spec.rejects_unfittable
            && u64::from(usable_blocks) * u64::from(self.block_size) < u64::from(max_model_len)
        {
            return Err(Error::MaxModelLenTooLong {
                max_model_len,
                kv_tokens: u64::from(usable_blocks) * u64::from(self.block_size),
            });
        }
        Ok(KvMemory {
            gpu_blocks,
            usable_blocks,
            block_bytes,
            copies_per_block: copies,
            weights_bytes: weights,
            activation_bytes: act,
        })
    }

    /// The vLLM release the engine follows: [`Config::vllm_version`], which must be one of the
    /// scheduler's engine (a V1 release for `vllm-v1`, 0.4.2 for the 0.4 schedulers), or when
    /// unset the newest of that engine.
    pub fn release(&self) -> Result<&'static Release, Error> {
        let spec = self.scheduler.spec();
        let Some(v) = self.vllm_version else {
            return Ok(VllmVersion::default_for(spec.generation).release());
        };
        let r = v.release();
        if r.engine == spec.generation {
            return Ok(r);
        }
        let expect = match spec.generation {
            Engine::V1 => format!(
                "a V1 release with scheduler {} ({}); vLLM {} is the 0.4 engine of schedulers \
                 vllm-v0, mixed and chunked",
                self.scheduler.as_str(),
                names(VllmVersion::names_of(Engine::V1).into_iter()),
                r.name
            ),
            Engine::V0 => format!(
                "{} with scheduler {} (vLLM 0.4's engine); vLLM {} is a V1 release: use \
                 scheduler vllm-v1",
                names(VllmVersion::names_of(Engine::V0).into_iter()),
                self.scheduler.as_str(),
                r.name
            ),
        };
        Err(Error::InvalidConfig {
            field: "vllm_version",
            value: r.name.into(),
            expect: expect.into(),
        })
    }

    /// The CPU tier's settings: its size (bytes; 0 for none) against the host's RAM, a
    /// scheduler with KV connectors, a reload its backend can do.
    fn check_offloading(
        &self,
        spec: &SchedulerSpec,
        release: &Release,
        hw: &HardwareProfile,
    ) -> Result<u64, Error> {
        let gib = (1u64 << 30) as f64;
        let Some(g) = self.kv_offloading_size_gib else {
            if self.kv_reload == crate::tier::Reload::Hybrid {
                return Err(Error::InvalidConfig {
                    field: "kv_reload",
                    value: "hybrid".into(),
                    expect: "transfer without a CPU tier (hybrid reloads from the tier: set \
                             kv_offloading_size_gib)"
                        .into(),
                });
            }
            return Ok(0);
        };
        self.check_tier_size(g, hw)?;
        self.check_tier_support(g, spec, release)?;
        Ok((g * gib) as u64)
    }

    /// The CPU tier's size, `g` GiB: above 0, and pinned host memory the host's RAM holds.
    fn check_tier_size(&self, g: f64, hw: &HardwareProfile) -> Result<(), Error> {
        let show = kvplan_vocab::limits::show;
        let gib = (1u64 << 30) as f64;
        check(
            "kv_offloading_size_gib",
            g.is_finite() && g > 0.0,
            show(g),
            "more than 0 GiB (leave it unset for no CPU tier)",
        )?;
        let ram = hw.host.ram_bytes as f64;
        if g * gib > ram {
            return Err(Error::InvalidConfig {
                field: "kv_offloading_size_gib",
                value: show(g),
                expect: format!(
                    "at most the host's {} GiB of RAM ({}); the tier is pinned host memory",
                    show((ram / gib * 100.0).floor() / 100.0),
                    hw.name
                )
                .into(),
            });
        }
        Ok(())
    }

    /// A CPU tier of `g` GiB the scheduler and the release can run: a V1 engine's KV
    /// connector, the backend and the eviction the release has, a reload the backend can do.
    fn check_tier_support(
        &self,
        g: f64,
        spec: &SchedulerSpec,
        release: &Release,
    ) -> Result<(), Error> {
        let show = kvplan_vocab::limits::show;
        if !spec.kv_connector {
            return Err(Error::InvalidConfig {
                field: "kv_offloading_size_gib",
                value: show(g),
                expect: format!(
                    "unset with scheduler {} (vLLM's KV offloading is a V1 engine connector: use \
                     scheduler vllm-v1)",
                    self.scheduler.as_str()
                )
                .into(),
            });
        }
        if self.kv_offloading_backend.as_str() == "native" && !release.native_offloading {
            return Err(Error::InvalidConfig {
                field: "kv_offloading_backend",
                value: "native".into(),
                expect: format!(
                    "lmcache with vLLM {}: vLLM's own OffloadingConnector came in 0.11.0 \
                     (vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py); {} \
                     have it",
                    release.name,
                    names(releases_where(|r| r.native_offloading))
                )
                .into(),
            });
        }
        if self.kv_offloading_eviction.as_str() == "arc" && !release.arc_eviction {
            return Err(Error::InvalidConfig {
                field: "kv_offloading_eviction",
                value: "arc".into(),
                expect: format!(
                    "lru with vLLM {}: the CPU tier's ARC eviction came in 0.11.1 \
                     (vllm/v1/kv_offload/arc_manager.py); {} have it",
                    release.name,
                    names(releases_where(|r| r.arc_eviction))
                )
                .into(),
            });
        }
        if self.kv_reload == crate::tier::Reload::Hybrid
            && !self.kv_offloading_backend.spec().async_load
        {
            return Err(Error::InvalidConfig {
                field: "kv_reload",
                value: "hybrid".into(),
                expect: format!(
                    "transfer with kv_offloading_backend {} (hybrid overlaps the copies with the \
                     recomputation beside the steps, as the native backend loads)",
                    self.kv_offloading_backend.as_str()
                )
                .into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_sizes_follow_vllm() {
        let s = cudagraph_sizes(512);
        assert_eq!(s.len(), 51);
        assert_eq!(&s[..5], &[1, 2, 4, 8, 16]);
        assert!(s.contains(&248) && s.contains(&256) && s.contains(&272));
        assert_eq!(*s.last().unwrap(), 512);
        assert_eq!(cudagraph_sizes(0), Vec::<u32>::new());
        assert_eq!(cudagraph_sizes(6), vec![1, 2, 4]);
    }

    #[test]
    fn v1_defaults_depend_on_the_gpu_and_override_counts_the_null_block() {
        let m = ModelSpec::preset("llama-2-7b").unwrap();
        let h100 = HardwareProfile::preset("h100-sxm").unwrap();
        let a100 = HardwareProfile::preset("a100-80g-sxm").unwrap();
        let r = Config::default().validate(&m, &h100).unwrap();
        assert_eq!((r.max_num_batched_tokens, r.max_num_seqs), (8192, 1024));
        assert_eq!(*r.cudagraph_sizes.last().unwrap(), 512);
        assert!(r.prefix_caching && r.async_scheduling && r.chunked_prefill);
        let r = Config::default().validate(&m, &a100).unwrap();
        assert_eq!((r.max_num_batched_tokens, r.max_num_seqs), (2048, 256));
        let c = Config {
            num_gpu_blocks_override: Some(7463),
            max_num_seqs: Some(128),
            max_num_batched_tokens: Some(2048),
            ..Config::default()
        };
        let r = c.validate(&m, &h100).unwrap();
        assert_eq!((r.gpu_blocks, r.usable_blocks), (7463, 7462));
        assert_eq!(*r.cudagraph_sizes.last().unwrap(), 256);
    }

    #[test]
    fn bad_combinations_name_the_field() {
        let m = ModelSpec::preset("llama-2-7b").unwrap();
        let hw = HardwareProfile::preset("h100-sxm").unwrap();
        let e = |c: Config| c.validate(&m, &hw).unwrap_err().to_string();
        let s = e(Config {
            preemption: Preemption::Swap,
            ..Config::default()
        });
        assert!(s.starts_with("preemption:"), "{s}");
        let s = e(Config {
            scheduler: SchedulerKind::PrefillFirst,
            enable_prefix_caching: Some(true),
            ..Config::default()
        });
        assert!(s.starts_with("enable_prefix_caching:"), "{s}");
        let s = e(Config {
            num_gpu_blocks_override: Some(100),
            ..Config::default()
        });
        assert!(s.contains("max_model_len") && s.contains("1584"), "{s}");
        let s = e(Config {
            enable_chunked_prefill: Some(false),
            max_num_batched_tokens: Some(1024),
            ..Config::default()
        });
        assert!(s.starts_with("max_num_batched_tokens:"), "{s}");
    }
}
