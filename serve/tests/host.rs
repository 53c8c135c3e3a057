//! The serving simulator on the engine's host model (issue 18): a swap's copies are issued one by
//! one from the host thread, so at small blocks the issue rate sets the time and at large ones the
//! link does; the per-iteration launch time is the same host profile's.

use kvplan_serve::iteration::{IterationShape, IterationTimer, Launch};
use kvplan_vocab::host::Implementation;
use kvplan_vocab::schedule::{HostMemory, OpKind, Payload};
use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};

/// a100-40g-pcie4 with a short per-copy latency (1 us): a copy engine that keeps up with small
/// copies, as the H200's back-to-back swap copies do (calibrate/data/host_costs).
fn fast_link() -> HardwareProfile {
    HardwareProfile::from_toml_str(
        "base = \"a100-40g-pcie4\"\n[link]\nh2d_latency_us = 1.0\nd2h_latency_us = 1.0\n",
        "fast-link",
    )
    .unwrap()
}

fn swap_in(blocks: u32) -> IterationShape {
    IterationShape {
        swap_in_blocks: blocks,
        ..IterationShape::default()
    }
}

/// Swap-in of 1024 evicted tokens of Llama-2-7B against the block size, vLLM 0.4's way (one
/// `cudaMemcpyAsync` per block per layer for K and for V, issued from the host at 3.4 us each).
/// Closed form for `n` copies of `c` seconds each issued at `i`: `n max(i, c) + min(i, c)`; the
/// engine running the iteration's op-level schedule agrees. At block 1 (8 KiB copies) the host
/// binds: `n i`; at block 128 (1 MiB) the link does: `bytes / bandwidth + n latency`.
#[test]
fn swap_cost_follows_the_issue_rate_at_small_blocks_and_the_link_at_large_ones() {
    let m = ModelSpec::preset("llama-2-7b").unwrap();
    let hw = fast_link();
    let profile = Implementation::VllmV0.profile();
    let cost = CostModel::new(&hw).with_host(profile.clone());
    let i = profile.copy_issue_us * 1e-6;
    let tokens = 1024u32;
    let mut per_token = Vec::new();
    for block in [1u32, 2, 4, 8, 16, 32, 64, 128] {
        let mut timer = IterationTimer::new(&m, &cost, block, 2 * m.num_layers, true);
        let it = swap_in(tokens / block);
        let t = timer.time(&it).total_s;
        let n = f64::from(tokens / block * 2 * m.num_layers);
        let bytes = u64::from(block) * m.kv_bytes_per_token() / u64::from(2 * m.num_layers);
        let c = cost.duration(&OpKind::H2D {
            bytes,
            payload: Payload::Cache,
            host: HostMemory::Pinned,
        });
        let closed = n * i.max(c) + i.min(c);
        assert!(
            (t - closed).abs() <= 1e-9 * closed,
            "block {block}: {t} vs {closed}"
        );
        // The engine, with the same host thread, on the iteration's schedule.
        let tl = kvplan_sim::simulate(&timer.schedule(&it), &cost).unwrap();
        assert!(
            (tl.makespan() - closed).abs() <= 1e-9 * closed,
            "block {block}: engine {} vs {closed}",
            tl.makespan()
        );
        if block == 1 {
            assert!(i > c, "8 KiB copies are host-bound");
            assert!((t - n * i).abs() / t < 0.01);
        }
        if block == 128 {
            assert!(c > i, "1 MiB copies are link-bound");
            let link = tokens as f64 * m.kv_bytes_per_token() as f64 / 24.5e9 + n * 1e-6;
            assert!((t - link).abs() / t < 0.01, "{t} vs {link}");
        }
        per_token.push(t / f64::from(tokens));
    }
    // Per token: halving with each doubling of the block while the issue rate binds (the
    // copies per token halve), nearly flat at bytes / bandwidth once the link binds.
    println!("swap-in seconds per token, blocks 1..128: {per_token:?}");
    assert!((per_token[0] / per_token[1] - 2.0).abs() < 0.01);
    assert!(per_token[6] / per_token[7] < 1.05);
}

/// Swap-out and swap-in in one iteration: the host issues every D2H copy first, so the H2D run
/// starts when it is done issuing them (full duplex: the copy engines are separate). The closed
/// form and the engine agree, pinned and pageable, at a host-bound and a link-bound block.
#[test]
fn swap_out_then_in_matches_the_engine() {
    let m = ModelSpec::preset("llama-2-7b").unwrap();
    let cost = CostModel::new(&fast_link()).with_host(Implementation::VllmV0.profile());
    for (block, pinned) in [(1, true), (64, true), (16, false)] {
        let mut timer = IterationTimer::new(&m, &cost, block, 2 * m.num_layers, pinned);
        let it = IterationShape {
            swap_out_blocks: 3,
            swap_in_blocks: 5,
            ..IterationShape::default()
        };
        let t = timer.time(&it).total_s;
        let tl = kvplan_sim::simulate(&timer.schedule(&it), &cost).unwrap();
        assert!(
            (tl.makespan() - t).abs() <= 1e-9 * t,
            "block {block} pinned {pinned}: engine {} vs {t}",
            tl.makespan()
        );
    }
}

/// A pageable swap holds the host for each whole copy: `n (i + c)`, no pipelining.
#[test]
fn a_pageable_swap_serialises_issue_and_copy() {
    let m = ModelSpec::preset("llama-2-7b").unwrap();
    let profile = Implementation::VllmV0.profile();
    let cost = CostModel::new(&fast_link()).with_host(profile.clone());
    let mut timer = IterationTimer::new(&m, &cost, 16, 2 * m.num_layers, false);
    let it = swap_in(8);
    let c = cost.duration(&OpKind::H2D {
        bytes: 16 * m.kv_bytes_per_token() / u64::from(2 * m.num_layers),
        payload: Payload::Cache,
        host: HostMemory::Pageable,
    });
    let n = f64::from(8 * 2 * m.num_layers);
    let t = timer.time(&it).total_s;
    let closed = n * (profile.copy_issue_us * 1e-6 + c);
    assert!((t - closed).abs() <= 1e-9 * closed, "{t} vs {closed}");
    let tl = kvplan_sim::simulate(&timer.schedule(&it), &cost).unwrap();
    assert!((tl.makespan() - closed).abs() <= 1e-9 * closed);
}

/// The given table's block (16) on a100-40g-pcie4 with vLLM 0.4's host: each 128 KiB copy's
/// link time (10 us latency + 5.3 us) exceeds its 3.4 us issue, so the swap stays the link's
/// and within the table's per-row bounds (`serve::STUDY_TOLERANCE` and `STUDY_KNOWN_MISSES`,
/// which `serve::study_resume_costs_per_row` holds without the host thread).
#[test]
fn block_16_swap_stays_in_the_tables_band_with_the_host_thread() {
    let m = ModelSpec::preset("yarn-llama-2-7b").unwrap();
    let hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
    let cost = CostModel::new(&hw).with_host(Implementation::VllmV0.profile());
    let table = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../data/validation/serving_swap_vs_recompute_a100.csv"
    ))
    .unwrap();
    for line in table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("evicted"))
    {
        let f: Vec<f64> = line.split(',').map(|x| x.trim().parse().unwrap()).collect();
        let n = f[0] as u32;
        let mut timer = IterationTimer::new(&m, &cost, 16, 2 * m.num_layers, true);
        let swap = timer.time(&swap_in(n.div_ceil(16))).total_s;
        let err = (swap - f[2]).abs() / f[2];
        let bound = crate::serve::STUDY_KNOWN_MISSES
            .iter()
            .find(|x| x.0 == n && x.1 == "swap")
            .map_or(crate::serve::STUDY_TOLERANCE.1, |x| x.2);
        assert!(err <= bound, "{n}: swap {swap} vs {} ({err})", f[2]);
    }
}

/// The per-iteration launch time is the host profile's: an eager step launches every kernel at
/// the profile's launch cost, a full CUDA graph replays them at the graph cost.
#[test]
fn iteration_launch_time_comes_from_the_host_profile() {
    let m = ModelSpec::preset("opt-125m").unwrap();
    let hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
    let p = Implementation::VllmV0.profile();
    let cost = CostModel::new(&hw).with_host(p.clone());
    let mut timer = IterationTimer::new(&m, &cost, 16, 2 * m.num_layers, true);
    let it = IterationShape {
        seqs: vec![(1, 100); 8],
        logits: 8,
        ..IterationShape::default()
    };
    let t = timer.time(&it);
    assert_eq!(t.launch, Launch::Eager);
    let kernels = timer.schedule(&it).len() as f64;
    assert!(
        (t.cpu_launch_s - kernels * p.launch_us * 1e-6).abs() < 1e-12,
        "{} vs {kernels} kernels",
        t.cpu_launch_s
    );
    // A decode step whose kernels are shorter than their launch is host-bound.
    assert!(t.cpu_launch_s > t.compute_s, "{t:?}");
    let graphed = IterationTimer::new(&m, &cost, 16, 2 * m.num_layers, true).with_engine(
        kvplan_serve::iteration::EngineCosts {
            cudagraph_sizes: vec![8, 16],
            full_graph_max_seqs: 16,
            serving: Default::default(),
        },
    );
    let mut graphed = graphed;
    let g = graphed.time(&it);
    assert!(matches!(g.launch, Launch::Full { .. }));
    let expect = 2.0 * p.launch_us + (kernels - 2.0) * p.graph_kernel_us;
    assert!((g.cpu_launch_s - expect * 1e-6).abs() < 1e-12);
    assert!(
        g.cpu_launch_s < g.compute_s,
        "the graph removes the bound: {g:?}"
    );
}

/// `serve.implementation` selects the host thread for a whole serving run: an eager engine
/// serving a small model launches ~150 kernels a step at 21.2 us each, longer than the GPU's
/// work, so its steps are host-bound and the run's decode slows; without it, the same run keeps
/// the profile's launch interval (0 on this preset).
#[test]
fn an_eager_serving_run_is_host_bound_with_the_implementation() {
    use kvplan_serve::{Config, simulate};
    use kvplan_workloads::Request;
    let m = ModelSpec::preset("opt-125m").unwrap();
    let hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
    let reqs: Vec<Request> = (0..16).map(|id| Request::new(id, 0.0, 128, 32)).collect();
    let run = |implementation| {
        let cfg = Config {
            enforce_eager: true,
            implementation,
            ..Config::vllm_v0()
        };
        simulate(&m, &hw, &cfg, &reqs).unwrap().summary
    };
    let plain = run(None);
    let hosted = run(Some(Implementation::VllmV0));
    assert!(
        hosted.makespan_s > 1.5 * plain.makespan_s,
        "{} vs {}",
        hosted.makespan_s,
        plain.makespan_s
    );
}
