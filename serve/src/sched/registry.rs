//! The scheduler registry: one [`SchedulerSpec`] per [`SchedulerKind`] (its name, the vLLM
//! release whose rules it follows, its defaults, what it can do and the factory of its policy),
//! in the spirit of vLLM's `SchedulerInterface` implementations and Vidur's
//! `ReplicaSchedulerRegistry`. Settings are checked against a spec's capabilities, never against
//! a kind: adding a scheduler is a policy file and one line in [`SCHEDULERS`].

use kvplan_vocab::HardwareProfile;

use super::{Policy, v0, v1};
use crate::{Preemption, SchedulerKind};

/// A setting a scheduler has on, off, or not at all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Modelled; on unless turned off.
    DefaultOn,
    /// Modelled; off unless turned on.
    DefaultOff,
    /// Always on: the scheduler cannot run without it.
    Always,
    /// Not modelled for this scheduler: asking for it is an error.
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

/// One scheduler kind: what it is, what it can do, its defaults and its policy.
#[derive(Debug)]
pub struct SchedulerSpec {
    /// The kind.
    pub kind: SchedulerKind,
    /// The release whose rules it follows.
    pub follows: &'static str,
    /// The engine's name in messages.
    pub engine: &'static str,
    /// Automatic prefix caching.
    pub prefix_caching: Support,
    /// Chunked prefill as a setting (`enable_chunked_prefill`): [`Support::No`] where the
    /// scheduler decides itself ([`SchedulerSpec::always_chunks`]).
    pub chunked_prefill: Support,
    /// Chunks prompts whatever the settings say (Sarathi's `chunked`).
    pub always_chunks: bool,
    /// Asynchronous scheduling by default.
    pub async_default: bool,
    /// The preemption modes it implements.
    pub preemption: &'static [Preemption],
    /// Keeps block 0 as the null block (vLLM V1's block pool).
    pub null_block: bool,
    /// Keeps a watermark of free blocks on admission (vLLM 0.4's block manager).
    pub watermark: bool,
    /// Refuses at arrival a request that could never fit the KV cache or one step (vLLM 0.4);
    /// otherwise only prompts of `max_model_len` tokens or more are refused.
    pub rejects_unfittable: bool,
    /// Takes KV from outside the GPU (vLLM's KV connectors: a CPU tier, a remote prefill):
    /// requests may wait for their KV to arrive before they are scheduled.
    pub kv_connector: bool,
    /// Default `(max_num_batched_tokens, max_num_seqs)` on a GPU, before the rule for
    /// chunking off (the longest prompt must fit one step).
    pub batch_defaults: fn(&HardwareProfile) -> (u32, u32),
    /// A new policy.
    pub policy: fn() -> Box<dyn Policy>,
}

/// vLLM v0.15.1's OpenAI-server defaults (`EngineArgs.get_batch_defaults`): GPUs with at least
/// 70 GiB that are not A100s get 8192 batched tokens and 1024 sequences, the rest 2048 and 256.
fn v1_defaults(hw: &HardwareProfile) -> (u32, u32) {
    let gib = hw.gpu.memory_bytes as f64 / (1u64 << 30) as f64;
    let a100 = hw.gpu.name.contains("A100") || hw.name.starts_with("a100");
    if gib >= 70.0 && !a100 {
        (8192, 1024)
    } else {
        (2048, 256)
    }
}

/// vLLM 0.4's defaults: 2048 batched tokens, 256 sequences.
fn v0_defaults(_: &HardwareProfile) -> (u32, u32) {
    (2048, 256)
}

const ALL_PREEMPTION: &[Preemption] =
    &[Preemption::Recompute, Preemption::Swap, Preemption::Hybrid];

/// vLLM 0.4's engine: no prefix caching (here), whole prompts unless the policy chunks,
/// every preemption mode, synchronous steps, a free-block watermark, requests that can never
/// fit refused at arrival.
const V0: SchedulerSpec = SchedulerSpec {
    kind: SchedulerKind::PrefillFirst,
    follows: "vLLM 0.4.2",
    engine: "vLLM 0.4",
    prefix_caching: Support::No,
    chunked_prefill: Support::No,
    always_chunks: false,
    async_default: false,
    preemption: ALL_PREEMPTION,
    null_block: false,
    watermark: true,
    rejects_unfittable: true,
    kv_connector: false,
    batch_defaults: v0_defaults,
    policy: || Box::new(v0::PrefillFirst),
};

/// Every scheduler, one entry each.
pub static SCHEDULERS: &[SchedulerSpec] = &[
    SchedulerSpec {
        kind: SchedulerKind::VllmV1,
        follows: "vLLM v0.15.1 (V1 engine)",
        engine: "vLLM V1",
        prefix_caching: Support::DefaultOn,
        chunked_prefill: Support::DefaultOn,
        always_chunks: false,
        async_default: true,
        preemption: &[Preemption::Recompute],
        null_block: true,
        watermark: false,
        rejects_unfittable: false,
        kv_connector: true,
        batch_defaults: v1_defaults,
        policy: || Box::new(v1::V1),
    },
    V0,
    SchedulerSpec {
        kind: SchedulerKind::Mixed,
        follows: "vLLM 0.4.2, decodes and whole prompts in one step",
        policy: || Box::new(v0::Mixed),
        ..V0
    },
    SchedulerSpec {
        kind: SchedulerKind::Chunked,
        follows: "vLLM 0.4.2 with Sarathi-Serve's chunked prefill",
        always_chunks: true,
        policy: || Box::new(v0::Chunked),
        ..V0
    },
];

impl SchedulerKind {
    /// Its entry in [`SCHEDULERS`].
    pub fn spec(self) -> &'static SchedulerSpec {
        SCHEDULERS
            .iter()
            .find(|s| s.kind == self)
            .expect("every scheduler kind is registered")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_is_registered_once() {
        for s in SCHEDULERS {
            assert_eq!(s.kind.spec().kind, s.kind);
            assert_eq!(SCHEDULERS.iter().filter(|t| t.kind == s.kind).count(), 1);
            assert!(s.preemption.contains(&Preemption::Recompute));
        }
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
