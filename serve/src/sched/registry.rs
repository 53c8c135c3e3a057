//! The scheduler registry: one [`SchedulerSpec`] per [`SchedulerKind`] (its name, the vLLM
//! engine whose releases it follows, what it can do and the factory of its policy),
//! in the spirit of vLLM's `SchedulerInterface` implementations and Vidur's
//! `ReplicaSchedulerRegistry`. Settings are checked against a spec's capabilities, never against
//! a kind: adding a scheduler is a policy file and one line in [`SCHEDULERS`].

use super::versions::Engine;
pub use super::versions::Support;
use super::{Policy, v0, v1};
use crate::config::{Preemption, SchedulerKind};

/// One scheduler kind: what it is, what it can do and its policy. The defaults that changed
/// between vLLM releases (batch sizes, prefix caching, chunked prefill, asynchronous
/// scheduling, CUDA graphs) are the release's it follows ([`super::versions::Release`]).
#[derive(Debug)]
pub struct SchedulerSpec {
    /// The kind.
    pub kind: SchedulerKind,
    /// The engine whose releases it follows.
    pub generation: Engine,
    /// The engine's name in messages.
    pub engine: &'static str,
    /// Chunks prompts whatever the settings say (Sarathi's `chunked`).
    pub always_chunks: bool,
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
    /// A new policy.
    pub policy: fn() -> Box<dyn Policy>,
}

const ALL_PREEMPTION: &[Preemption] =
    &[Preemption::Recompute, Preemption::Swap, Preemption::Hybrid];

/// vLLM 0.4's engine: whole prompts unless the policy chunks, every preemption mode, a
/// free-block watermark, requests that can never fit refused at arrival.
const V0: SchedulerSpec = SchedulerSpec {
    kind: SchedulerKind::PrefillFirst,
    generation: Engine::V0,
    engine: "vLLM 0.4",
    always_chunks: false,
    preemption: ALL_PREEMPTION,
    null_block: false,
    watermark: true,
    rejects_unfittable: true,
    kv_connector: false,
    policy: || Box::new(v0::PrefillFirst),
};

/// Every scheduler, one entry each.
pub static SCHEDULERS: &[SchedulerSpec] = &[
    SchedulerSpec {
        kind: SchedulerKind::VllmV1,
        generation: Engine::V1,
        engine: "vLLM V1",
        always_chunks: false,
        preemption: &[Preemption::Recompute],
        null_block: true,
        watermark: false,
        rejects_unfittable: false,
        kv_connector: true,
        policy: || Box::new(v1::V1),
    },
    V0,
    // vLLM 0.4.2's engine, decodes and whole prompts in one step.
    SchedulerSpec {
        kind: SchedulerKind::Mixed,
        policy: || Box::new(v0::Mixed),
        ..V0
    },
    // vLLM 0.4.2's engine with Sarathi-Serve's chunked prefill.
    SchedulerSpec {
        kind: SchedulerKind::Chunked,
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
