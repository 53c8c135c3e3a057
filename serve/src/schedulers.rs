//! The schedulers kvplan models and what each can do: one [`SchedulerSpec`] per
//! [`SchedulerKind`] in [`SCHEDULERS`] (its name, the vLLM engine whose releases it follows,
//! its capabilities), in the spirit of vLLM's `SchedulerInterface` implementations and Vidur's
//! `ReplicaSchedulerRegistry`. Settings are checked against a spec's capabilities
//! ([`crate::config`]), never against a kind. Each kind's policy is made in
//! [`crate::sched::registry::policy`]: adding a scheduler is a variant here with its entry in
//! [`SCHEDULERS`], a policy file under `sched/` and one arm there.
//!
//! A leaf of the crate: it takes only [`crate::versions`], so the settings and the policies
//! both read it.

use serde::{Deserialize, Serialize};

use crate::versions::Engine;

/// Which sequences an iteration runs.
///
/// With the `clap` feature, a `clap::ValueEnum` whose values are the file's names, each with a
/// one-line description for a command line's help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum SchedulerKind {
    /// vLLM's V1 scheduler (v0.15.1, the default): one token budget, running requests first
    /// (decodes and unfinished prefill chunks), then waiting ones; preemption by recompute of
    /// the most recently scheduled request; prefix caching; asynchronous scheduling.
    #[cfg_attr(
        feature = "clap",
        value(help = "vLLM V1 (0.15): one token budget, running \
        requests first, then waiting ones; prefix caching, chunked prefill, recompute \
        preemption, asynchronous scheduling")
    )]
    VllmV1,
    /// vLLM 0.4's default scheduler: admit waiting prompts whole when they fit; prefill-only
    /// iterations take priority; otherwise decode every running sequence.
    #[serde(rename = "vllm-v0", alias = "prefill-first")]
    #[cfg_attr(
        feature = "clap",
        value(
            name = "vllm-v0",
            alias = "prefill-first",
            help = "vLLM 0.4's default: whole prompts first, then decode every running sequence"
        )
    )]
    PrefillFirst,
    /// Decode every running sequence and admit whole waiting prompts into the same iteration.
    #[cfg_attr(
        feature = "clap",
        value(help = "Decode the running sequences and admit whole prompts in the same iteration")
    )]
    Mixed,
    /// Sarathi-style chunked prefill: decodes first, then prefill chunks filling the token
    /// budget (`max_num_batched_tokens`).
    #[cfg_attr(
        feature = "clap",
        value(help = "Sarathi chunked prefill: decodes, then prompt \
        chunks filling the token budget")
    )]
    Chunked,
}

impl SchedulerKind {
    /// The name in files and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            SchedulerKind::VllmV1 => "vllm-v1",
            SchedulerKind::PrefillFirst => "vllm-v0",
            SchedulerKind::Mixed => "mixed",
            SchedulerKind::Chunked => "chunked",
        }
    }
}

/// What happens to a preempted sequence's KV (with the `clap` feature, a `clap::ValueEnum` as
/// [`SchedulerKind`] is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Preemption {
    /// Drop its blocks; on resume re-prefill prompt + generated tokens (with prefix caching, the
    /// dropped blocks stay cached until reused, so a resume can hit its own blocks).
    #[cfg_attr(
        feature = "clap",
        value(help = "Drop the KV; re-prefill prompt and generated tokens on resume")
    )]
    Recompute,
    /// Copy its blocks to host memory; copy them back on resume. Falls back to recompute when
    /// the host swap space is full. vLLM 0.4 schedulers only.
    #[cfg_attr(
        feature = "clap",
        value(help = "Copy the KV blocks to host memory and back")
    )]
    Swap,
    /// Swap out the layer inputs `X` of its first `l` tokens (half their K,V bytes on MHA) and
    /// the K,V of the rest; on resume recompute `K,V[0:l]` from `X` while the rest is swapped in
    /// (KVPR's split balance applied to a resume, at block granularity; see
    /// [`crate::IterationTimer::hybrid_split`]). Where `X` costs no less than K,V on the link
    /// (GQA with equal copy counts) `l = 0` and this is swap. vLLM 0.4 schedulers only.
    #[cfg_attr(
        feature = "clap",
        value(help = "Swap, and on resume recompute the first tokens' KV from stored activations")
    )]
    Hybrid,
}

impl Preemption {
    /// The name in files and flags.
    pub fn as_str(self) -> &'static str {
        match self {
            Preemption::Recompute => "recompute",
            Preemption::Swap => "swap",
            Preemption::Hybrid => "hybrid",
        }
    }
}

/// One scheduler kind: what it is and what it can do. The defaults that changed
/// between vLLM releases (batch sizes, prefix caching, chunked prefill, asynchronous
/// scheduling, CUDA graphs) are the release's it follows ([`crate::versions::Release`]).
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
    },
    V0,
    // vLLM 0.4.2's engine, decodes and whole prompts in one step.
    SchedulerSpec {
        kind: SchedulerKind::Mixed,
        ..V0
    },
    // vLLM 0.4.2's engine with Sarathi-Serve's chunked prefill.
    SchedulerSpec {
        kind: SchedulerKind::Chunked,
        always_chunks: true,
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
}
