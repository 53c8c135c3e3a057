//! The host thread as a resource: what issuing each op costs the CPU thread that drives the GPU,
//! and where each tensor class lives in host memory, per *implementation* (the software stack
//! that runs a plan: eager Hugging Face Transformers, FlexGen, vLLM, kvplan's own executor).
//!
//! The engine (`kvplan_sim::engine`) issues a schedule's ops from one host thread in submission
//! order. Each op occupies the host for its issue cost ([`HostIssue`]): a kernel launch (eager
//! dispatch, or one kernel of a replayed CUDA graph), a `cudaMemcpyAsync` issue, a peer send. An op
//! cannot start on its stream before the host has issued it, so kernels shorter than their launch
//! cost leave the GPU waiting on the host (host-bound), and long kernels hide the host. A copy
//! from or to pageable memory stages through the driver's pinned bounce buffer: the call returns
//! only when the copy is done, so it blocks the host for the whole transfer, as the CUDA runtime
//! does (`cudaMemcpyAsync` with pageable memory is synchronous with respect to the host). A
//! generation loop that reads the sampled token back each step synchronises the device at each
//! step boundary ([`SyncPoint::Step`]).
//!
//! The figures and their sources: `calibrate/data/host_costs/` (measured by the project on an
//! H100 and an H200 host with PyTorch 2.11 / CUDA 13: eager kernel launch 6.5-10.7 us, eager
//! `linear` dispatch 21-26 us, one kernel of a replayed CUDA graph 0.03-0.05 us, `synchronize`
//! 8.6-9.4 us, `cudaMemcpyAsync` issue 4-8 us from PyTorch and 2.9-4.8 us through the raw
//! runtime), kvplan's calibrated executor profiles (`launch_us` 5.2-5.6 us), and each system's
//! documented memory use (cited per profile). The H100 host's figures are used; the H200 host is
//! ~1.2-1.6x slower.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use crate::schedule::{HostMemory, OpKind, Payload};

/// The software stack that runs a plan, with its host costs and memory kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Implementation {
    /// Hugging Face Transformers (4.46) in eager PyTorch, as the KVPR paper runs it: every
    /// kernel a module call, pinned weights and activations, the KV cache in pageable memory.
    EagerHf,
    /// FlexGen (Sheng et al. 2023): eager PyTorch, every offloaded tensor pinned.
    Flexgen,
    /// vLLM 0.4 (V0): CUDA graphs for decode steps, eager prefill, pinned CPU swap space, one
    /// raw `cudaMemcpyAsync` per block per layer (`swap_blocks`, C++).
    VllmV0,
    /// vLLM V1 with full CUDA graphs: every step replayed as a graph, pinned memory.
    VllmV1Cudagraph,
    /// kvplan's own CUDA executor (cudarc, raw driver launches, pinned buffers).
    KvplanExec,
}

impl Implementation {
    /// Every implementation, in listing order.
    pub const ALL: [Implementation; 5] = [
        Implementation::EagerHf,
        Implementation::Flexgen,
        Implementation::VllmV0,
        Implementation::VllmV1Cudagraph,
        Implementation::KvplanExec,
    ];

    /// Its name, as scenario files write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Implementation::EagerHf => "eager-hf",
            Implementation::Flexgen => "flexgen",
            Implementation::VllmV0 => "vllm-v0",
            Implementation::VllmV1Cudagraph => "vllm-v1-cudagraph",
            Implementation::KvplanExec => "kvplan-exec",
        }
    }

    /// The implementation named `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|i| i.as_str() == name)
    }

    /// The names, comma-separated (for messages).
    pub fn names() -> String {
        Self::ALL.map(Implementation::as_str).join(", ")
    }

    /// Its host profile on `hw`: [`Implementation::profile`], except that kvplan's executor on a
    /// profile calibrated through it takes what the calibration measured: the host costs of
    /// `[calibration.host]` where the calibration measured them, else the launch of `[kernels]
    /// launch_us` (the per-op interval of a chain of tiny kernels).
    pub fn profile_on(self, hw: &crate::hardware::HardwareProfile) -> HostProfile {
        let mut p = self.profile();
        if self != Implementation::KvplanExec {
            return p;
        }
        let Some(cal) = hw.calibration.as_ref() else {
            return p;
        };
        if let Some(h) = cal.host {
            p.launch_us = h.launch_us;
            p.copy_issue_us = h.copy_issue_us;
            p.peer_issue_us = h.copy_issue_us;
            p.sync_us = h.sync_us;
            p.source = Cow::Owned(format!(
                "kvplan's executor as its calibration measured it ([calibration.host]: {} \
                 backend on {}, {}): launch {:.2} us, copy issue {:.2} us, idle \
                 synchronisation {:.2} us; pinned buffers",
                cal.backend, cal.device, cal.date, h.launch_us, h.copy_issue_us, h.sync_us
            ));
        } else if let Some(k) = hw.kernels.as_ref().filter(|k| k.launch_us > 0.0) {
            p.launch_us = k.launch_us;
            p.source = Cow::Borrowed(
                "kvplan's CUDA executor: the launch its calibration measured (the \
                 profile's [kernels] launch_us), a raw cudaMemcpyAsync 3.4 us \
                 (calibrate/data/host_costs), pinned buffers",
            );
        }
        p
    }

    /// Its host profile.
    pub fn profile(self) -> HostProfile {
        // Measured on the H100 host (calibrate/data/host_costs/host_costs_h100.csv).
        const TORCH_MODULE_US: f64 = 21.2; // eager_linear_1x4096x4096: one module call
        const TORCH_COPY_US: f64 = 5.2; // h2d_pinned (torch) at 4 KiB: one cudaMemcpyAsync issue
        const RAW_COPY_US: f64 = 3.4; // h2d_pinned (cupy-runtime): the raw runtime's issue
        // swap_blocks_h200.csv: host_s / copies at 1-token blocks, the mean over both directions
        // and both lengths (2.34-2.59 us): the raw runtime's issue rate back to back, as
        // vLLM's C++ swap loop issues them (the Python loop's own 0.05 us included).
        const SWAP_COPY_US: f64 = 2.46;
        const GRAPH_KERNEL_US: f64 = 0.034; // graph_replay_per_kernel_of_100
        // hf_decode_h200.csv (H200 host, Transformers 5.17): an eager OPT-6.7B decode step
        // launches 829 kernels where kvplan models 324 ops (32 layers x 10 + embedding, final
        // norm, LM head, sampling), and is host-bound at batch 1-16 (13.1-15.8 ms of wall for
        // 5.2-6.8 ms of GPU work): 17.9 us of host time per kernel, the rows' mean.
        const HF_KERNELS_PER_MODULE: f64 = 829.0 / 324.0;
        const HF_KERNEL_US: f64 = 17.93;
        const SYNC_US: f64 = 8.6; // synchronize_idle
        let pinned = MemoryKinds::uniform(HostMemory::Pinned);
        match self {
            Implementation::EagerHf => HostProfile {
                implementation: self,
                launch_us: HF_KERNEL_US,
                launches_per_module: HF_KERNELS_PER_MODULE,
                graphs: Graphs::Never,
                graph_kernel_us: GRAPH_KERNEL_US,
                copy_issue_us: TORCH_COPY_US,
                peer_issue_us: TORCH_COPY_US,
                sync_us: SYNC_US,
                sync: SyncPoint::Step,
                memory: MemoryKinds {
                    weights: HostMemory::Pinned,
                    activations: HostMemory::Pinned,
                    kv: HostMemory::Pageable,
                },
                source: Cow::Borrowed(
                    "Transformers in eager PyTorch: 829 kernels per OPT-6.7B decode step \
                         where kvplan models 324 ops (2.56 launches per module) at 17.9 us of \
                         host time each (hf_decode_h200.csv, H200 host), cudaMemcpyAsync issue \
                         5.2 us, synchronize 8.6 us (calibrate/data/host_costs, H100 host); \
                         Transformers' generate reads each step's token back (a sync per step); \
                         KVPR paper: pinned memory for the recomputed activations and the \
                         weights only, the KV cache pageable",
                ),
            },
            Implementation::Flexgen => HostProfile {
                implementation: self,
                launch_us: TORCH_MODULE_US,
                launches_per_module: 1.0,
                graphs: Graphs::Never,
                graph_kernel_us: GRAPH_KERNEL_US,
                copy_issue_us: TORCH_COPY_US,
                peer_issue_us: TORCH_COPY_US,
                sync_us: SYNC_US,
                sync: SyncPoint::Step,
                memory: pinned,
                source: Cow::Borrowed(
                    "eager PyTorch dispatch 21.2 us per kernel, cudaMemcpyAsync issue 5.2 us, \
                         synchronize 8.6 us (calibrate/data/host_costs, H100 host); FlexGen \
                         allocates its CPU tensors with pin_memory (flexgen/pytorch_backend.py)",
                ),
            },
            Implementation::VllmV0 => HostProfile {
                implementation: self,
                launch_us: TORCH_MODULE_US,
                launches_per_module: 1.0,
                graphs: Graphs::Decode,
                graph_kernel_us: GRAPH_KERNEL_US,
                copy_issue_us: SWAP_COPY_US,
                peer_issue_us: RAW_COPY_US,
                sync_us: SYNC_US,
                sync: SyncPoint::Step,
                memory: pinned,
                source: Cow::Borrowed(
                    "vLLM 0.4: decode steps replayed as CUDA graphs (0.034 us per kernel), \
                         eager prefill at 21.2 us per kernel, swap_blocks issues one raw \
                         cudaMemcpyAsync per block per layer from C++ (2.46 us each back to \
                         back: swap_blocks_h200.csv at 1-token blocks), synchronize 8.6 us \
                         (calibrate/data/host_costs, H100 host); the CPU swap space is pinned \
                         (vllm/worker/cache_engine.py)",
                ),
            },
            Implementation::VllmV1Cudagraph => HostProfile {
                implementation: self,
                launch_us: TORCH_MODULE_US,
                launches_per_module: 1.0,
                graphs: Graphs::Always,
                graph_kernel_us: GRAPH_KERNEL_US,
                copy_issue_us: RAW_COPY_US,
                peer_issue_us: RAW_COPY_US,
                sync_us: SYNC_US,
                sync: SyncPoint::Step,
                memory: pinned,
                source: Cow::Borrowed(
                    "vLLM V1 with full CUDA graphs: 0.034 us per replayed kernel, raw \
                         cudaMemcpyAsync 3.4 us, synchronize 8.6 us (calibrate/data/host_costs, \
                         H100 host); pinned memory",
                ),
            },
            Implementation::KvplanExec => HostProfile {
                implementation: self,
                launch_us: 5.6,
                launches_per_module: 1.0,
                graphs: Graphs::Never,
                graph_kernel_us: GRAPH_KERNEL_US,
                copy_issue_us: RAW_COPY_US,
                peer_issue_us: RAW_COPY_US,
                sync_us: SYNC_US,
                sync: SyncPoint::None,
                memory: pinned,
                source: Cow::Borrowed(
                    "kvplan's CUDA executor: a raw driver launch 5.6 us (launch_us of \
                         calibrate/profiles/h100-sxm-kvplan-exec.toml; CuPy's raw launch 5.7 us), \
                         a raw cudaMemcpyAsync 3.4 us (calibrate/data/host_costs), pinned \
                         buffers, one synchronisation at the end",
                ),
            },
        }
    }
}

/// Where each tensor class lives in host memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MemoryKinds {
    /// Offloaded weights.
    pub weights: HostMemory,
    /// Activations (offloaded hidden states, KVPR's stored layer inputs).
    pub activations: HostMemory,
    /// The KV cache.
    pub kv: HostMemory,
}

impl MemoryKinds {
    /// Every class in `kind`.
    pub fn uniform(kind: HostMemory) -> Self {
        MemoryKinds {
            weights: kind,
            activations: kind,
            kv: kind,
        }
    }

    /// The memory of a copy carrying `payload`.
    pub fn of(&self, payload: Payload) -> HostMemory {
        match payload {
            Payload::Weights => self.weights,
            Payload::Cache => self.kv,
            Payload::Activation | Payload::RecomputeActivation => self.activations,
        }
    }

    /// One kind when every class has it.
    pub fn single(&self) -> Option<HostMemory> {
        (self.weights == self.activations && self.activations == self.kv).then_some(self.kv)
    }
}

/// Which kernels run inside a replayed CUDA graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Graphs {
    /// Every kernel launched eagerly.
    Never,
    /// Decode steps' kernels replayed (vLLM V0's decode graphs); prefill eager.
    Decode,
    /// Every kernel replayed.
    Always,
}

/// Where the host thread waits for the device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SyncPoint {
    /// Only blocking copies wait.
    None,
    /// Before the first op of each step, the host waits for every op issued so far (the
    /// generation loop reads the sampled token back) and pays `sync_us`.
    Step,
}

/// An implementation's host costs and memory kinds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HostProfile {
    /// Which implementation.
    pub implementation: Implementation,
    /// Host time to launch one kernel eagerly, microseconds.
    pub launch_us: f64,
    /// Kernels the implementation launches for each kernel op kvplan models (a module: a norm,
    /// a projection, the attention): 1 where its kernels are kvplan's (vLLM's fused kernels,
    /// kvplan's executor); more for an eager framework that runs a module as several small
    /// kernels (Transformers' OPT attention: the cache's concatenations, scaling, casts,
    /// transposes). Each launch costs `launch_us` (or `graph_kernel_us` inside a graph).
    pub launches_per_module: f64,
    /// Which kernels are replayed inside a CUDA graph.
    pub graphs: Graphs,
    /// Host time per kernel of a replayed CUDA graph, microseconds.
    pub graph_kernel_us: f64,
    /// Host time to issue one `cudaMemcpyAsync` (from or to pinned memory), microseconds.
    pub copy_issue_us: f64,
    /// Host time to issue one peer send, microseconds.
    pub peer_issue_us: f64,
    /// Host time of one device synchronisation, microseconds.
    pub sync_us: f64,
    /// Where the host waits for the device.
    pub sync: SyncPoint,
    /// Memory kind per tensor class.
    pub memory: MemoryKinds,
    /// Where the figures come from.
    pub source: Cow<'static, str>,
}

/// What issuing one op costs the host thread.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HostIssue {
    /// Seconds the host spends issuing the op.
    pub issue_s: f64,
    /// The host waits for the op to finish before issuing the next (a pageable copy).
    pub blocking: bool,
    /// Before issuing, the host waits for every op issued so far and then spends this many
    /// seconds synchronising (`None`: no synchronisation).
    pub sync_before_s: Option<f64>,
}

impl HostProfile {
    /// Whether a kernel of `phase` runs inside a replayed graph.
    fn graphed(&self, decode: bool) -> bool {
        match self.graphs {
            Graphs::Never => false,
            Graphs::Decode => decode,
            Graphs::Always => true,
        }
    }

    /// Host microseconds to launch one kernel op (a module's kernels), eagerly or replayed in
    /// a graph.
    pub fn module_us(&self, graphed: bool) -> f64 {
        self.launches_per_module
            * if graphed {
                self.graph_kernel_us
            } else {
                self.launch_us
            }
    }

    /// What issuing `kind` costs the host; `decode` says whether the op belongs to a decode
    /// step, `new_step` whether it is the first op of a step after another step's ops.
    pub fn issue(&self, kind: &OpKind, decode: bool, new_step: bool) -> HostIssue {
        let us = match *kind {
            OpKind::H2D { .. } | OpKind::D2H { .. } => self.copy_issue_us,
            OpKind::PeerSend { .. } => self.peer_issue_us,
            OpKind::Gemm { .. }
            | OpKind::Attention { .. }
            | OpKind::BatchAttention { .. }
            | OpKind::Elementwise { .. }
            | OpKind::AllReduce { .. } => self.module_us(self.graphed(decode)),
        };
        let blocking = matches!(
            *kind,
            OpKind::H2D {
                host: HostMemory::Pageable,
                ..
            } | OpKind::D2H {
                host: HostMemory::Pageable,
                ..
            }
        );
        HostIssue {
            issue_s: us * 1e-6,
            blocking,
            sync_before_s: (new_step && self.sync == SyncPoint::Step)
                .then_some(self.sync_us * 1e-6),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;

    #[test]
    fn names_round_trip() {
        for i in Implementation::ALL {
            assert_eq!(Implementation::from_name(i.as_str()), Some(i));
            assert_eq!(i.profile().implementation, i);
        }
        assert_eq!(Implementation::from_name("eager"), None);
    }

    #[test]
    fn kvplan_exec_takes_its_calibrated_launch() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../calibrate/profiles/h100-sxm-kvplan-exec.toml"
        );
        let hw = crate::HardwareProfile::resolve(path).unwrap();
        let launch = hw.kernels.as_ref().unwrap().launch_us;
        assert!(launch > 1.0);
        assert_eq!(Implementation::KvplanExec.profile_on(&hw).launch_us, launch);
        // Other implementations, and an uncalibrated preset, keep their own figures.
        assert_eq!(Implementation::EagerHf.profile_on(&hw).launch_us, 17.93);
        let preset = crate::HardwareProfile::preset("h100-sxm").unwrap();
        assert_eq!(
            Implementation::KvplanExec.profile_on(&preset).launch_us,
            5.6
        );
    }

    #[test]
    fn pageable_copies_block_and_graphs_replay_cheaply() {
        let hf = Implementation::EagerHf.profile();
        let kv = OpKind::H2D {
            bytes: 1,
            payload: Payload::Cache,
            host: hf.memory.of(Payload::Cache),
        };
        assert!(hf.issue(&kv, true, false).blocking);
        let x = OpKind::H2D {
            bytes: 1,
            payload: Payload::RecomputeActivation,
            host: hf.memory.of(Payload::RecomputeActivation),
        };
        assert!(!hf.issue(&x, true, false).blocking);
        let gemm = OpKind::Gemm {
            m: 1,
            n: 1,
            k: 1,
            batch: 1,
            dtype: DType::Fp16,
            weights: crate::WeightFormat::Dense,
        };
        let close = |a: f64, b: f64| (a - b).abs() < 1e-15;
        // Transformers launches 829 kernels for kvplan's 324 ops of an OPT decode step.
        assert!(close(
            hf.issue(&gemm, true, false).issue_s,
            829.0 / 324.0 * 17.93e-6
        ));
        assert!(close(
            hf.issue(&gemm, true, true).sync_before_s.unwrap(),
            8.6e-6
        ));
        assert_eq!(hf.issue(&gemm, true, false).sync_before_s, None);
        let v0 = Implementation::VllmV0.profile();
        assert!(close(v0.issue(&gemm, true, false).issue_s, 0.034e-6));
        assert!(close(v0.issue(&gemm, false, false).issue_s, 21.2e-6));
    }
}
