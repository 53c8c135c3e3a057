//! The vLLM releases kvplan models: one [`Release`] per [`VllmVersion`], each with the engine
//! defaults and rules that changed between releases, read from that release's Python source
//! (the `vllm` wheel of the release) and cited per field. A run follows one release
//! ([`crate::Config::vllm_version`]; unset, the newest of its scheduler's engine): the
//! release's defaults apply only where a setting is left unset, and a setting the release does
//! not have is refused.
//!
//! What changed, by release (the V1 engine; the OpenAI server's defaults):
//!
//! | release | batch defaults | chunked prefill | async scheduling | CUDA graphs | capture sizes |
//! |---|---|---|---|---|---|
//! | 0.8.5 | 8192 / 1024 at ≥ 70 GiB | always on | none | piecewise | 8-steps to 512 |
//! | 0.9.2 | the same, A100s excepted | always on | none | piecewise | 8-steps to 512 |
//! | 0.10.2 | as 0.9.2 | always on | off | piecewise | 8-steps to min(2 × seqs, 512) |
//! | 0.11.0 | as 0.9.2 | always on | off | full and piecewise | as 0.10.2 |
//! | 0.13.0 | as 0.9.2 | on, can be off | off | full and piecewise | 16-steps from 256 |
//! | 0.15.1 | as 0.9.2 | on, can be off | on | full and piecewise | as 0.13.0 |
//!
//! Automatic prefix caching is on by default in every V1 release (`_set_default_args_v1` from
//! 0.8 to 0.11.0, `get_chunked_prefill_prefix_caching_defaults` /
//! `_set_default_chunked_prefill_and_prefix_caching_args` after); the V1 scheduler's rules that
//! kvplan models (one token budget, running requests first, recompute preemption of the last
//! running request, waiting requests only when nothing was preempted) are the same in all of
//! them (`vllm/v1/core/sched/scheduler.py`). vLLM 0.8.5 caps a running request's tokens at
//! `max_model_len − computed` where later releases cap at one less; the two differ only under
//! speculative decoding, which kvplan does not model.
//!
//! Settings vLLM refuses are refused here by the same rules, read from each release:
//! `block_size` is one of the release's [`Release::block_sizes`] (8, 16, 32 in 0.4.2; 1 to 128
//! from 0.8.5; 256 too from 0.13.0), and `SchedulerConfig`'s two checks, the same in every
//! release (`_verify_args`, `vllm/config.py` in 0.4.2 to 0.9.2, `vllm/config/scheduler.py` in
//! 0.10.2 and 0.11.0; `verify_max_model_len`, `vllm/config/scheduler.py`, in 0.13.0 and
//! 0.15.1): `max_num_batched_tokens` at least `max_num_seqs`, and at least `max_model_len`
//! unless chunked prefill is on. Where `max_num_seqs` is left unset, releases from 0.10.2
//! lower its default to the token budget ([`Release::caps_default_seqs`]); older ones refuse.

use std::fmt;
use std::str::FromStr;

use kvplan_vocab::HardwareProfile;

/// A setting a scheduler or release has on, off, or not at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Modelled; on unless turned off.
    DefaultOn,
    /// Modelled; off unless turned on.
    DefaultOff,
    /// Always on: the scheduler cannot run without it (or the release turns it on whatever is
    /// asked).
    Always,
    /// Not modelled for this scheduler, or not in the release: asking for it is an error.
    No,
}

impl Support {
    /// The setting after `asked` (unset: the default); `None` when it cannot be had.
    pub fn resolve(self, asked: Option<bool>) -> Option<bool> {
        match (self, asked) {
            (Support::DefaultOn, a) => Some(a.unwrap_or(true)),
            (Support::DefaultOff, a) => Some(a.unwrap_or(false)),
            (Support::Always, None | Some(true)) => Some(true),
            (Support::No, None | Some(false)) => Some(false),
            _ => None,
        }
    }
}

/// Which engine a release's scheduler belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// vLLM 0.4's engine (the `vllm-v0`, `mixed` and `chunked` schedulers).
    V0,
    /// vLLM's V1 engine (the `vllm-v1` scheduler).
    V1,
}

/// A vLLM release kvplan models.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum VllmVersion {
    /// vLLM 0.4.2: the engine of the `vllm-v0`, `mixed` and `chunked` schedulers.
    V0_4_2,
    /// vLLM 0.8.5: V1 by default, piecewise CUDA graphs, no asynchronous scheduling.
    V0_8_5,
    /// vLLM 0.9.2: the large batch defaults no longer on A100s.
    V0_9_2,
    /// vLLM 0.10.2: asynchronous scheduling (off by default), capture sizes from
    /// `max_num_seqs`.
    V0_10_2,
    /// vLLM 0.11.0: full CUDA graphs for uniform decode steps (`FULL_AND_PIECEWISE`).
    V0_11_0,
    /// vLLM 0.13.0: chunked prefill can be turned off; capture sizes every 16 from 256.
    V0_13_0,
    /// vLLM 0.15.1: asynchronous scheduling on by default (the newest modelled, the default).
    V0_15_1,
}

/// How a release captures CUDA graphs by default (`CompilationConfig.cudagraph_mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CudagraphMode {
    /// No graphs (`enforce_eager`, or no capture size).
    None,
    /// Piecewise graphs around attention for every step up to the largest capture size.
    Piecewise,
    /// Full graphs for uniform decode steps of up to `max_num_seqs` requests, piecewise ones
    /// for the rest.
    FullAndPiecewise,
}

impl CudagraphMode {
    /// vLLM's name.
    pub fn as_str(self) -> &'static str {
        match self {
            CudagraphMode::None => "NONE",
            CudagraphMode::Piecewise => "PIECEWISE",
            CudagraphMode::FullAndPiecewise => "FULL_AND_PIECEWISE",
        }
    }
}

/// How a release lists its CUDA-graph capture sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaptureRule {
    /// `[1, 2, 4]` and every 8 up to 512, whatever `max_num_seqs` (vLLM 0.8.5
    /// `VllmConfig._set_cudagraph_sizes`, `vllm/config.py`; 0.9.2's `cuda_graph_sizes`
    /// defaults to `[512]`, `SchedulerConfig`, `vllm/config.py`).
    EveryEightTo512,
    /// `[1, 2, 4]` and every 8 up to `min(2 × max_num_seqs, 512)` (vLLM 0.10.2
    /// `SchedulerConfig.__post_init__`, `vllm/config/scheduler.py`, and
    /// `VllmConfig._set_cudagraph_sizes`, `vllm/config/__init__.py`; the same in 0.11.0).
    EveryEight,
    /// `[1, 2, 4]`, every 8 below 256, then every 16, up to `min(2 × max_num_seqs, 512)`
    /// (vLLM 0.13.0 and 0.15.1 `VllmConfig._set_cudagraph_sizes`, `vllm/config/vllm.py`).
    EverySixteenFrom256,
}

impl CaptureRule {
    /// The largest capture size when none is given, before the token budget caps it.
    pub fn default_max(self, max_num_seqs: u32) -> u32 {
        match self {
            CaptureRule::EveryEightTo512 => 512,
            CaptureRule::EveryEight | CaptureRule::EverySixteenFrom256 => {
                max_num_seqs.saturating_mul(2).min(512)
            }
        }
    }

    /// The capture sizes up to `max`, ascending.
    pub fn sizes(self, max: u32) -> Vec<u32> {
        let mut v: Vec<u32> = [1, 2, 4].into_iter().filter(|&s| s <= max).collect();
        match self {
            CaptureRule::EveryEightTo512 | CaptureRule::EveryEight => {
                v.extend((8..=max).step_by(8));
            }
            CaptureRule::EverySixteenFrom256 => {
                if max >= 8 {
                    v.extend((8..(max + 1).min(256)).step_by(8));
                }
                if max >= 256 {
                    v.extend((256..=max).step_by(16));
                }
            }
        }
        v
    }
}

/// One release: its engine and the defaults and rules kvplan follows from it.
#[derive(Debug)]
pub struct Release {
    /// The release.
    pub version: VllmVersion,
    /// Its number, `0.15.1`.
    pub name: &'static str,
    /// The engine whose schedulers follow it.
    pub engine: Engine,
    /// The OpenAI server's `(max_num_batched_tokens, max_num_seqs)` on a GPU, before the rule
    /// for chunking off (the longest prompt must fit one step).
    pub batch_defaults: fn(&HardwareProfile) -> (u32, u32),
    /// Automatic prefix caching.
    pub prefix_caching: Support,
    /// Chunked prefill as a setting ([`Support::Always`]: the engine turns it on whatever is
    /// asked).
    pub chunked_prefill: Support,
    /// Asynchronous scheduling ([`Support::No`]: the release has none).
    pub async_scheduling: Support,
    /// The CUDA-graph mode when graphs are captured.
    pub cudagraph_mode: CudagraphMode,
    /// How the capture sizes are listed.
    pub capture: CaptureRule,
    /// Has vLLM's own CPU offloading connector (`OffloadingConnector`, the `native` backend).
    pub native_offloading: bool,
    /// The CPU tier can evict by ARC (`kv_offload/arc_manager.py`, from vLLM 0.11.1).
    pub arc_eviction: bool,
    /// The block sizes `block_size` accepts: vLLM 0.4.2's `choices=[8, 16, 32]`
    /// (`EngineArgs.add_cli_args`, `vllm/engine/arg_utils.py`); from 0.8.5 the choices of
    /// `CacheConfig.block_size: BlockSize` (`literal_to_kwargs`/`get_kwargs` turn the `Literal`
    /// into argparse `choices`): `Literal[1, 8, 16, 32, 64, 128]` in 0.8.5 and 0.9.2
    /// (`vllm/config.py`), 0.10.2 and 0.11.0 (`vllm/config/cache.py`), with 256 from 0.13.0
    /// (`vllm/config/cache.py`, the same in 0.15.1).
    pub block_sizes: &'static [u32],
    /// A `max_num_seqs` left unset is lowered to `max_num_batched_tokens` when the token budget
    /// is smaller (`EngineArgs._set_default_args`, from 0.10.2: `min(default_max_num_seqs,
    /// max_num_batched_tokens)`; from 0.13.0 `_set_default_max_num_seqs_and_batched_tokens_args`,
    /// `vllm/engine/arg_utils.py`); before, the default stands and `SchedulerConfig` refuses the
    /// pair.
    pub caps_default_seqs: bool,
}

/// `block_size` choices of vLLM 0.4.2 (`vllm/engine/arg_utils.py`).
const BLOCK_SIZES_0_4: &[u32] = &[8, 16, 32];
/// `BlockSize` of vLLM 0.8.5 to 0.11.0 (`vllm/config.py`, from 0.10 `vllm/config/cache.py`).
const BLOCK_SIZES_0_8: &[u32] = &[1, 8, 16, 32, 64, 128];
/// `BlockSize` of vLLM 0.13.0 and 0.15.1 (`vllm/config/cache.py`).
const BLOCK_SIZES_0_13: &[u32] = &[1, 8, 16, 32, 64, 128, 256];

/// vLLM 0.8.5's OpenAI-server defaults (`EngineArgs._set_default_args_v1`,
/// `vllm/engine/arg_utils.py`): GPUs with at least 70 GiB get 8192 batched tokens and 1024
/// sequences, the rest 2048 and 256.
fn large_at_70_gib(hw: &HardwareProfile) -> (u32, u32) {
    if gib(hw) >= 70.0 {
        (8192, 1024)
    } else {
        (2048, 256)
    }
}

/// vLLM 0.9.0 to 0.15.1's OpenAI-server defaults (`EngineArgs._set_default_args_v1`, from
/// 0.11.2 `EngineArgs.get_batch_defaults`, `vllm/engine/arg_utils.py`): GPUs with at least
/// 70 GiB that are not A100s get 8192 batched tokens and 1024 sequences, the rest 2048 and 256
/// ("Setting large `max_num_batched_tokens` for A100 reduces throughput", PR #17885).
fn large_but_a100(hw: &HardwareProfile) -> (u32, u32) {
    let a100 = hw.gpu.name.contains("A100") || hw.name.starts_with("a100");
    if gib(hw) >= 70.0 && !a100 {
        (8192, 1024)
    } else {
        (2048, 256)
    }
}

fn gib(hw: &HardwareProfile) -> f64 {
    hw.gpu.memory_bytes as f64 / (1u64 << 30) as f64
}

/// vLLM 0.4's defaults: 2048 batched tokens, 256 sequences.
fn v0_defaults(_: &HardwareProfile) -> (u32, u32) {
    (2048, 256)
}

/// vLLM 0.8.5, the first V1 release modelled: chunked prefill forced on and prefix caching on
/// (`_set_default_args_v1`, `vllm/engine/arg_utils.py`), piecewise CUDA graphs
/// (`CompilationLevel.PIECEWISE` for V1, `VllmConfig.__post_init__`, `vllm/config.py`), no
/// `async_scheduling`, no CPU offloading connector.
const V0_8_5: Release = Release {
    version: VllmVersion::V0_8_5,
    name: "0.8.5",
    engine: Engine::V1,
    batch_defaults: large_at_70_gib,
    prefix_caching: Support::DefaultOn,
    chunked_prefill: Support::Always,
    async_scheduling: Support::No,
    cudagraph_mode: CudagraphMode::Piecewise,
    capture: CaptureRule::EveryEightTo512,
    native_offloading: false,
    arc_eviction: false,
    block_sizes: BLOCK_SIZES_0_8,
    caps_default_seqs: false,
};

/// Every release modelled, oldest first; the last is the default of the V1 scheduler.
pub static RELEASES: &[Release] = &[
    // vLLM 0.4.2: the 0.4 schedulers' release. Its settings are kvplan's as before: no prefix
    // caching or chunked prefill setting (the `chunked` scheduler always chunks), asynchronous
    // steps as a what-if, and the V1 engine's CUDA graphs.
    Release {
        version: VllmVersion::V0_4_2,
        name: "0.4.2",
        engine: Engine::V0,
        batch_defaults: v0_defaults,
        prefix_caching: Support::No,
        chunked_prefill: Support::No,
        async_scheduling: Support::DefaultOff,
        cudagraph_mode: CudagraphMode::FullAndPiecewise,
        capture: CaptureRule::EverySixteenFrom256,
        native_offloading: false,
        arc_eviction: false,
        block_sizes: BLOCK_SIZES_0_4,
        caps_default_seqs: false,
    },
    V0_8_5,
    // vLLM 0.9.2: A100s keep the small batch defaults (`_set_default_args_v1`: `"a100" not in
    // device_name`, from 0.9.0); `cuda_graph_sizes` defaults to `[512]` (`SchedulerConfig`,
    // `vllm/config.py`), the 0.8.5 list.
    Release {
        version: VllmVersion::V0_9_2,
        name: "0.9.2",
        batch_defaults: large_but_a100,
        ..V0_8_5
    },
    // vLLM 0.10.2: `async_scheduling`, off by default (`SchedulerConfig.async_scheduling:
    // bool = False`, `vllm/config/scheduler.py`; the flag came in 0.10.0); `cuda_graph_sizes`
    // defaults to `[min(max_num_seqs * 2, 512)]` (`SchedulerConfig.__post_init__`); still
    // `CUDAGraphMode.PIECEWISE` by default (`VllmConfig.__post_init__`,
    // `vllm/config/__init__.py`).
    Release {
        version: VllmVersion::V0_10_2,
        name: "0.10.2",
        batch_defaults: large_but_a100,
        async_scheduling: Support::DefaultOff,
        capture: CaptureRule::EveryEight,
        caps_default_seqs: true,
        ..V0_8_5
    },
    // vLLM 0.11.0: `CUDAGraphMode.FULL_AND_PIECEWISE` by default ("default to full and
    // piecewise for most models", `VllmConfig.__post_init__`, `vllm/config/__init__.py`); full
    // graphs for uniform decode batches up to `max_num_seqs` (`CudagraphDispatcher`,
    // `vllm/v1/cudagraph_dispatcher.py`); the `OffloadingConnector`
    // (`vllm/distributed/kv_transfer/kv_connector/v1/offloading_connector.py`).
    Release {
        version: VllmVersion::V0_11_0,
        name: "0.11.0",
        batch_defaults: large_but_a100,
        async_scheduling: Support::DefaultOff,
        cudagraph_mode: CudagraphMode::FullAndPiecewise,
        capture: CaptureRule::EveryEight,
        native_offloading: true,
        caps_default_seqs: true,
        ..V0_8_5
    },
    // vLLM 0.13.0: chunked prefill on by default but no longer forced
    // (`EngineArgs._set_default_chunked_prefill_and_prefix_caching_args`: `if
    // self.enable_chunked_prefill is None`, `vllm/engine/arg_utils.py`; 0.11.2's
    // `_set_default_args` already); capture sizes every 16 from 256
    // (`VllmConfig._set_cudagraph_sizes`, `vllm/config/vllm.py`); the CPU tier's ARC eviction.
    Release {
        version: VllmVersion::V0_13_0,
        name: "0.13.0",
        batch_defaults: large_but_a100,
        chunked_prefill: Support::DefaultOn,
        async_scheduling: Support::DefaultOff,
        cudagraph_mode: CudagraphMode::FullAndPiecewise,
        capture: CaptureRule::EverySixteenFrom256,
        native_offloading: true,
        arc_eviction: true,
        block_sizes: BLOCK_SIZES_0_13,
        caps_default_seqs: true,
        ..V0_8_5
    },
    // vLLM 0.15.1: asynchronous scheduling on unless something is incompatible
    // (`SchedulerConfig.async_scheduling = Field(default=None)`,
    // `vllm/config/scheduler.py`; "Enable async scheduling unless there is an incompatible
    // option", `VllmConfig.__post_init__`, `vllm/config/vllm.py`; from 0.14.0).
    Release {
        version: VllmVersion::V0_15_1,
        name: "0.15.1",
        batch_defaults: large_but_a100,
        chunked_prefill: Support::DefaultOn,
        async_scheduling: Support::DefaultOn,
        cudagraph_mode: CudagraphMode::FullAndPiecewise,
        capture: CaptureRule::EverySixteenFrom256,
        native_offloading: true,
        arc_eviction: true,
        block_sizes: BLOCK_SIZES_0_13,
        caps_default_seqs: true,
        ..V0_8_5
    },
];

impl VllmVersion {
    /// The newest release modelled: the V1 scheduler's default.
    pub const NEWEST: VllmVersion = VllmVersion::V0_15_1;

    /// Its entry in [`RELEASES`].
    pub fn release(self) -> &'static Release {
        RELEASES
            .iter()
            .find(|r| r.version == self)
            .expect("every version is in the release table")
    }

    /// Its number, `0.15.1`.
    pub fn as_str(self) -> &'static str {
        self.release().name
    }

    /// The release an engine follows when none is named: the newest of that engine.
    pub fn default_for(engine: Engine) -> VllmVersion {
        RELEASES
            .iter()
            .rev()
            .find(|r| r.engine == engine)
            .expect("every engine has a release")
            .version
    }

    /// The releases of `engine`, oldest first, by number.
    pub fn names_of(engine: Engine) -> Vec<&'static str> {
        RELEASES
            .iter()
            .filter(|r| r.engine == engine)
            .map(|r| r.name)
            .collect()
    }

    /// Every release modelled, by number, as one line: `0.4.2 (the 0.4 schedulers), 0.8.5, ..,
    /// 0.15.1 (the default)`.
    pub fn listing() -> String {
        let v0 = VllmVersion::names_of(Engine::V0).join(", ");
        let v1 = VllmVersion::names_of(Engine::V1);
        let (newest, older) = v1.split_last().expect("a V1 release");
        format!(
            "{}, {newest} (the default) with scheduler vllm-v1; {v0} with vllm-v0, mixed or \
             chunked",
            older.join(", ")
        )
    }
}

/// A release not modelled: what was asked and the releases that are.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{asked}` is not a vLLM release kvplan models: {}",
    VllmVersion::listing()
)]
pub struct UnknownVersion {
    /// The text asked for.
    pub asked: String,
}

impl FromStr for VllmVersion {
    type Err = UnknownVersion;

    /// `0.15.1`, `v0.15.1`, or a release series, `0.15` (the release modelled in it).
    fn from_str(s: &str) -> Result<Self, UnknownVersion> {
        let t = s.trim();
        let t = t.strip_prefix(['v', 'V']).unwrap_or(t);
        RELEASES
            .iter()
            .find(|r| {
                r.name == t
                    || r.name
                        .strip_prefix(t)
                        .is_some_and(|rest| rest.starts_with('.') && t.matches('.').count() == 1)
            })
            .map(|r| r.version)
            .ok_or_else(|| UnknownVersion { asked: s.into() })
    }
}

impl fmt::Display for VllmVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for VllmVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for VllmVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_version_is_listed_once_oldest_first() {
        for (i, r) in RELEASES.iter().enumerate() {
            assert_eq!(r.version.release().name, r.name);
            assert_eq!(
                RELEASES.iter().filter(|s| s.version == r.version).count(),
                1
            );
            if i > 0 {
                assert!(RELEASES[i - 1].version < r.version);
            }
        }
        assert_eq!(VllmVersion::default_for(Engine::V1), VllmVersion::NEWEST);
        assert_eq!(VllmVersion::default_for(Engine::V0), VllmVersion::V0_4_2);
    }

    #[test]
    fn versions_read_with_or_without_v_and_by_series() {
        for s in ["0.15.1", "v0.15.1", "0.15", "v0.15", " 0.15.1 "] {
            assert_eq!(s.parse::<VllmVersion>(), Ok(VllmVersion::V0_15_1), "{s}");
        }
        assert_eq!("0.10".parse::<VllmVersion>(), Ok(VllmVersion::V0_10_2));
        assert_eq!("0.4".parse::<VllmVersion>(), Ok(VllmVersion::V0_4_2));
        for s in [
            "0.14.1", "0.1", "0", "", "0.15.", "15.1", "0.15.1.2", "latest",
        ] {
            let e = s.parse::<VllmVersion>().unwrap_err().to_string();
            assert!(
                e.contains("0.8.5, 0.9.2, 0.10.2, 0.11.0, 0.13.0, 0.15.1 (the default)"),
                "{s}: {e}"
            );
        }
        assert_eq!(VllmVersion::V0_10_2.to_string(), "0.10.2");
    }

    #[test]
    fn capture_rules_follow_each_release() {
        let eight = CaptureRule::EveryEight.sizes(512);
        assert_eq!(eight.len(), 3 + 64);
        assert_eq!(*eight.last().unwrap(), 512);
        assert!(eight.contains(&264));
        let sixteen = CaptureRule::EverySixteenFrom256.sizes(512);
        assert_eq!(sixteen.len(), 51);
        assert!(!sixteen.contains(&264) && sixteen.contains(&272));
        assert_eq!(CaptureRule::EveryEight.sizes(6), vec![1, 2, 4]);
        assert_eq!(CaptureRule::EverySixteenFrom256.sizes(0), Vec::<u32>::new());
        assert_eq!(CaptureRule::EveryEightTo512.default_max(16), 512);
        assert_eq!(CaptureRule::EveryEight.default_max(16), 32);
        assert_eq!(CaptureRule::EverySixteenFrom256.default_max(1024), 512);
    }

    #[test]
    fn support_resolves_as_documented() {
        assert_eq!(Support::DefaultOn.resolve(None), Some(true));
        assert_eq!(Support::DefaultOn.resolve(Some(false)), Some(false));
        assert_eq!(Support::DefaultOff.resolve(None), Some(false));
        assert_eq!(Support::Always.resolve(Some(false)), None);
        assert_eq!(Support::No.resolve(Some(true)), None);
        assert_eq!(Support::No.resolve(Some(false)), Some(false));
    }
}
