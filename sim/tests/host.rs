//! The host thread as a resource of the engine: closed forms for a chain of kernels issued one by
//! one, in both regimes (kernels longer than their launch hide the host; shorter ones are bound
//! by it), CUDA-graph replay removing the bound, a pageable copy blocking the host, and a step
//! synchronisation.

use kvplan_sim::engine::{EngineMap, host_issue, run_hosted, run_hosted_occupying, run_with};
use kvplan_vocab::host::{HostIssue, Implementation};
use kvplan_vocab::schedule::{ElemKind, HostMemory, OpKind, Payload, Phase, StreamKind, Tag};
use kvplan_vocab::{CostModel, HardwareProfile, Schedule, ScheduleBuilder};

const TAG: Tag = Tag {
    step: 1,
    layer: 0,
    batch: 0,
    group: Tag::NONE,
    phase: Phase::Decode,
};

/// `n` kernels in a chain on one compute stream.
fn chain(n: usize) -> Schedule {
    let mut b = ScheduleBuilder::new();
    let c = b.stream(0, StreamKind::Compute, "gpu0.compute");
    let l = b.label("k");
    for _ in 0..n {
        let op = OpKind::Elementwise {
            kind: ElemKind::Other,
            bytes: 1,
            rows: 0,
        };
        b.push(op, c, l, TAG, &[]);
    }
    b.build()
}

fn makespan(s: &Schedule, device_s: f64, launch_s: f64) -> f64 {
    let engines = EngineMap::one_per_stream(s);
    let issue = |_| HostIssue {
        issue_s: launch_s,
        blocking: false,
        sync_before_s: None,
    };
    let (spans, host) = run_hosted(s, &engines, |_| device_s, issue).unwrap();
    // The host issues back to back: op i's issue ends at (i + 1) * launch.
    for (i, h) in host.iter().enumerate() {
        assert!((h.end - (i + 1) as f64 * launch_s).abs() < 1e-12);
        // No op starts before the host has issued it.
        assert!(spans[i].start >= h.end - 1e-15);
    }
    spans.iter().map(|s| s.end).fold(0.0, f64::max)
}

/// Closed form for `n` kernels of device time `d` launched at `L` each: the first starts at `L`;
/// when `d >= L` the GPU never waits again (`L + n d`), else every kernel waits for its launch
/// and the last ends at `n L + d`. So `makespan = L + (n - 1) max(d, L) + d`.
#[test]
fn a_kernel_chain_is_bound_by_the_host_or_the_gpu_as_the_closed_form_says() {
    let n = 100;
    let s = chain(n);
    // Long kernels (decode GEMMs of a large batch): the host hides.
    let (d, l) = (50e-6, 21.2e-6);
    let t = makespan(&s, d, l);
    assert!((t - (l + n as f64 * d)).abs() < 1e-12, "{t}");
    // Short kernels (decode of a small batch): host-bound.
    let (d, l) = (3e-6, 21.2e-6);
    let t = makespan(&s, d, l);
    assert!((t - (n as f64 * l + d)).abs() < 1e-12, "{t}");
    // The same kernels replayed from a CUDA graph: the GPU bound again.
    let g = 0.034e-6;
    let t = makespan(&s, d, g);
    assert!((t - (g + n as f64 * d)).abs() < 1e-12, "{t}");
    // Without the host the chain is the GPU's sum.
    let spans = run_with(&s, &EngineMap::one_per_stream(&s), |_| d).unwrap();
    assert!((spans[n - 1].end - n as f64 * d).abs() < 1e-12);
}

/// The same through the cost model's implementation profiles: an eager decode step of short
/// kernels is host-bound, the CUDA-graph profile removes the bound.
#[test]
fn implementation_profiles_bind_short_kernels_on_the_host_and_graphs_free_them() {
    let hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
    let s = chain(50);
    let d = CostModel::new(&hw).device_duration(&s.ops()[0].kind);
    for (imp, host_bound) in [
        (Implementation::EagerHf, true),
        (Implementation::VllmV1Cudagraph, false),
    ] {
        let cost = CostModel::new(&hw).with_host(imp.profile());
        let tl = kvplan_sim::simulate(&s, &cost).unwrap();
        let launch = imp.profile().module_us(false) * 1e-6;
        let expect = if host_bound {
            50.0 * launch + d
        } else {
            imp.profile().graph_kernel_us * 1e-6 + 50.0 * d
        };
        assert!(
            (tl.makespan() - expect).abs() < 1e-12,
            "{imp:?}: {} vs {expect}",
            tl.makespan()
        );
        assert_eq!(tl.host.len(), 50, "the host track");
    }
    // The host track reaches the Perfetto export.
    let cost = CostModel::new(&hw).with_host(Implementation::EagerHf.profile());
    let tl = kvplan_sim::simulate(&s, &cost).unwrap();
    let mut out = Vec::new();
    let run = kvplan_vocab::timeline::Run {
        name: "r",
        schedule: &s,
        timeline: &tl,
    };
    kvplan_vocab::timeline::write_chrome_trace(&[run], &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("\"name\":\"host\""), "a host track");
    assert!(text.contains("\"launch k\""), "launch events");
}

/// A pageable copy holds the host until it ends: a kernel pushed after it cannot start before
/// the copy ends, though it does not depend on it; from pinned memory the kernel overlaps.
#[test]
fn a_pageable_copy_blocks_the_host_and_a_pinned_one_does_not() {
    let hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
    for host_mem in [HostMemory::Pinned, HostMemory::Pageable] {
        let mut b = ScheduleBuilder::new();
        let c = b.stream(0, StreamKind::Compute, "gpu0.compute");
        let h = b.stream(0, StreamKind::H2D, "gpu0.h2d");
        let l = b.label("x");
        let copy = OpKind::H2D {
            bytes: 64 << 20,
            payload: Payload::Cache,
            host: host_mem,
        };
        b.push(copy, h, l, TAG, &[]);
        let k = OpKind::Elementwise {
            kind: ElemKind::Other,
            bytes: 1 << 20,
            rows: 0,
        };
        b.push(k, c, l, TAG, &[]);
        let s = b.build();
        let profile = Implementation::EagerHf.profile();
        let cost = CostModel::new(&hw).with_host(profile.clone());
        let tl = kvplan_sim::simulate(&s, &cost).unwrap();
        let issue = profile.copy_issue_us * 1e-6;
        let launch = profile.module_us(false) * 1e-6;
        let copy_s = cost.duration(&copy);
        assert!((tl.spans[0].end - (issue + copy_s)).abs() < 1e-12);
        let kernel_start = match host_mem {
            HostMemory::Pinned => issue + launch,
            HostMemory::Pageable => issue + copy_s + launch,
        };
        assert!(
            (tl.spans[1].start - kernel_start).abs() < 1e-12,
            "{host_mem:?}: {} vs {kernel_start}",
            tl.spans[1].start
        );
        let host_free = match host_mem {
            HostMemory::Pinned => issue,
            HostMemory::Pageable => tl.spans[0].end,
        };
        assert!((tl.host[0].end - host_free).abs() < 1e-15);
    }
}

/// A step boundary synchronises: the next step's first launch waits for every op issued before
/// it and pays the synchronisation.
#[test]
fn a_step_boundary_waits_for_the_device() {
    let mut b = ScheduleBuilder::new();
    let c = b.stream(0, StreamKind::Compute, "gpu0.compute");
    let l = b.label("k");
    let op = OpKind::Elementwise {
        kind: ElemKind::Other,
        bytes: 1,
        rows: 0,
    };
    b.push(op, c, l, TAG, &[]);
    b.push(op, c, l, Tag { step: 2, ..TAG }, &[]);
    let s = b.build();
    let p = Implementation::EagerHf.profile();
    let d = 1e-3;
    let (spans, host) = run_hosted(
        &s,
        &EngineMap::one_per_stream(&s),
        |_| d,
        host_issue(&s, &p),
    )
    .unwrap();
    let (launch, sync) = (p.module_us(false) * 1e-6, p.sync_us * 1e-6);
    assert!((spans[0].end - (launch + d)).abs() < 1e-12);
    assert!(
        (host[1].start - spans[0].end).abs() < 1e-12,
        "waits for step 1"
    );
    assert!((spans[1].start - (spans[0].end + sync + launch)).abs() < 1e-12);
}

/// Back-to-back copies on one copy stream, each holding its copy engine `o` of its `c` seconds
/// (the rest its completion): the next copy starts under the previous one's completion, so the
/// chain pays it once, `n max(i, o) + min(i, o) + (c - o)`; a kernel that depends on the last copy
/// waits for its end, not for its occupancy. Through the cost model: `CostModel::occupancy` on the
/// a100-40g-pcie4 preset (10 us latency, 2.3 us of it the completion).
#[test]
fn a_chain_of_copies_pays_the_completion_once() {
    let n = 20;
    let mut b = ScheduleBuilder::new();
    let h = b.stream(0, StreamKind::H2D, "gpu0.h2d");
    let c = b.stream(0, StreamKind::Compute, "gpu0.compute");
    let l = b.label("swap");
    let copy = OpKind::H2D {
        bytes: 128 << 10,
        payload: Payload::Cache,
        host: HostMemory::Pinned,
    };
    let mut last = None;
    for _ in 0..n {
        last = Some(b.push(copy, h, l, TAG, &[]));
    }
    let k = OpKind::Elementwise {
        kind: ElemKind::Other,
        bytes: 1,
        rows: 0,
    };
    b.push(k, c, l, TAG, &[last]);
    let s = b.build();
    let nf = n as f64;
    for (c_s, o_s, i_s) in [(15e-6, 10e-6, 2.5e-6), (5e-6, 2e-6, 2.5e-6)] {
        let (spans, _) = run_hosted_occupying(
            &s,
            &EngineMap::one_per_stream(&s),
            |j| if j < n { (c_s, o_s) } else { (1e-6, 1e-6) },
            |_| HostIssue {
                issue_s: i_s,
                blocking: false,
                sync_before_s: None,
            },
        )
        .unwrap();
        let chain = nf * f64::max(i_s, o_s) + f64::min(i_s, o_s) + (c_s - o_s);
        assert!(
            (spans[n - 1].end - chain).abs() < 1e-12,
            "{}",
            spans[n - 1].end
        );
        // Each copy starts when the previous one frees the engine or the host issues it.
        for j in 1..n {
            let free = spans[j - 1].start + o_s;
            let issued = (j + 1) as f64 * i_s;
            assert!((spans[j].start - free.max(issued)).abs() < 1e-12);
        }
        // The kernel waits for the last copy's end (its launch was issued long before).
        assert!((spans[n].start - chain).abs() < 1e-12);
    }
    // Through the cost model and the vLLM 0.4 host.
    let hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
    let profile = Implementation::VllmV0.profile();
    let cost = CostModel::new(&hw).with_host(profile.clone());
    let (c_s, o_s) = (cost.duration(&copy), cost.occupancy(&copy));
    assert!((c_s - o_s - 2.3e-6).abs() < 1e-15);
    let i_s = profile.copy_issue_us * 1e-6;
    let tl = kvplan_sim::simulate(&s, &cost).unwrap();
    let chain = nf * f64::max(i_s, o_s) + f64::min(i_s, o_s) + (c_s - o_s);
    assert!((tl.spans[n - 1].end - chain).abs() < 1e-12);
    // Without the host thread every copy holds its engine its whole duration, as before.
    let plain = kvplan_sim::simulate(&s, &CostModel::new(&hw)).unwrap();
    assert!((plain.spans[n - 1].end - nf * c_s).abs() < 1e-12);
}
