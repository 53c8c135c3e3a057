//! The serving simulator on the engine's host model (issue 18): a swap's copies are issued one by
//! one from the host thread, so at small blocks the issue rate sets the time and at large ones the
//! link does; a copy holds its copy engine for its occupancy (DMA setup and bytes) and a chain of
//! back-to-back copies pays the completion part of the latency once. Checked against vLLM 0.4's
//! swap measured on an H200 (`calibrate/data/host_costs/swap_blocks_h200.csv`) and vLLM 0.4.2's
//! resume table on an A100; the per-iteration launch time is the same host profile's.

use kvplan_serve::iteration::{IterationShape, IterationTimer, Launch};
use kvplan_vocab::host::Implementation;
use kvplan_vocab::schedule::{HostMemory, OpKind, Payload};
use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};

/// a100-40g-pcie4 with a short per-copy latency (1 us, all of it the completion a chain pays
/// once: the default `copy_completion_us` is capped at the latency): a copy engine that keeps up
/// with small copies.
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
/// `cudaMemcpyAsync` per block per layer for K and for V, issued from the host at 2.46 us each).
/// Closed form for `n` copies of `c` seconds each, holding the copy engine `o` each
/// (`CostModel::occupancy`), issued at `i`: `n max(i, o) + min(i, o) + (c - o)`; the engine
/// running the iteration's op-level schedule agrees. At block 1 (8 KiB copies) the host binds:
/// `n i`; at block 128 (1 MiB) the link does: `bytes / bandwidth`, the latency paid once.
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
        let o = cost.occupancy(&OpKind::H2D {
            bytes,
            payload: Payload::Cache,
            host: HostMemory::Pinned,
        });
        assert!(o < c, "the completion is not occupancy");
        let closed = n * i.max(o) + i.min(o) + (c - o);
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
            let link = tokens as f64 * m.kv_bytes_per_token() as f64 / 24.5e9 + 1e-6;
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

/// One row of `calibrate/data/host_costs/swap_blocks_h200.csv`.
struct SwapRow {
    out: bool,
    tokens: u32,
    block: u32,
    copies: f64,
    wall_s: f64,
}

fn swap_rows() -> Vec<SwapRow> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../calibrate/data/host_costs/swap_blocks_h200.csv"
    ))
    .unwrap();
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("direction"))
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            SwapRow {
                out: f[0] == "d2h",
                tokens: f[1].parse().unwrap(),
                block: f[2].parse().unwrap(),
                copies: f[3].parse().unwrap(),
                wall_s: f[6].parse().unwrap(),
            }
        })
        .collect()
}

/// The H200's profile as calibrated through kvplan's executor.
fn h200() -> HardwareProfile {
    HardwareProfile::resolve(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../calibrate/profiles/h200-kvplan-exec.toml"
    ))
    .unwrap()
}

/// The swap's seconds for `row` on `cost` (vLLM 0.4: K and V copied per block per layer).
fn swap_s(m: &ModelSpec, cost: &CostModel, row: &SwapRow) -> f64 {
    let mut timer = IterationTimer::new(m, cost, row.block, 2 * m.num_layers, true);
    let blocks = row.tokens / row.block;
    let it = if row.out {
        IterationShape {
            swap_out_blocks: blocks,
            ..IterationShape::default()
        }
    } else {
        swap_in(blocks)
    };
    timer.time(&it).total_s
}

/// vLLM 0.4's swap measured on an H200 (`swap_blocks_h200.csv`: Llama-2-7B's cache shape, pinned,
/// 1,024 and 4,096 evicted tokens, blocks of 1-128 tokens, both directions) against the serving
/// simulator on the calibrated H200 profile with the `vllm-v0` host: within 10% on every one of
/// the 32 rows (the largest errors: +7.5% D2H at 2-token blocks, -8.2% H2D at 2-4). The
/// issue-bound regime at small blocks (copies x 2.46 us), the link at large ones (setup + bytes
/// per copy, the completion once), so block 2 -> 64 falls 6.95x where 7.41x was measured (H2D,
/// 1,024 tokens), not the ~11x of a whole latency per copy.
/// Charging each copy its whole single-copy latency as occupancy (completion 0, what the engine
/// did before) misses the small blocks by ~2x.
#[test]
fn swap_matches_the_h200_measurement_across_block_sizes() {
    let m = ModelSpec::preset("llama-2-7b").unwrap();
    let hw = h200();
    let cost = CostModel::new(&hw).with_host(Implementation::VllmV0.profile());
    let i = Implementation::VllmV0.profile().copy_issue_us * 1e-6;
    let mut worst: f64 = 0.0;
    for row in swap_rows() {
        let t = swap_s(&m, &cost, &row);
        let err = t / row.wall_s - 1.0;
        println!(
            "{} {} tokens, block {:>3}: {:.4} s vs {:.4} s measured ({:+.1}%)",
            if row.out { "d2h" } else { "h2d" },
            row.tokens,
            row.block,
            t,
            row.wall_s,
            100.0 * err
        );
        assert!(
            err.abs() <= 0.10,
            "block {}: {t} vs {}",
            row.block,
            row.wall_s
        );
        worst = worst.max(err.abs());
        // 1-token blocks: the host's issue rate sets the time.
        if row.block == 1 {
            assert!(
                (t / (row.copies * i) - 1.0).abs() < 0.01,
                "issue-bound: {t}"
            );
        }
    }
    println!("worst error {:.1}%", 100.0 * worst);
    // The fall from block 2 to block 64, as measured (H2D, 1,024 tokens: 0.0906 / 0.0122 s).
    let rows = swap_rows();
    let at = |b| {
        rows.iter()
            .find(|r| !r.out && r.tokens == 1024 && r.block == b)
            .unwrap()
    };
    let modelled = swap_s(&m, &cost, at(2)) / swap_s(&m, &cost, at(64));
    let measured = at(2).wall_s / at(64).wall_s;
    println!("block 2 -> 64: {modelled:.2}x modelled, {measured:.2}x measured");
    assert!((modelled / measured - 1.0).abs() < 0.10);
    // The whole latency as occupancy: every copy holds the engine 4.5 us, twice the measured.
    let whole = HardwareProfile::from_toml_str(
        &format!(
            "base = \"{}\"\n[link]\ncopy_completion_us = 0.0\n",
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../calibrate/profiles/h200-kvplan-exec.toml"
            )
        ),
        "whole-latency",
    )
    .unwrap();
    let old = CostModel::new(&whole).with_host(Implementation::VllmV0.profile());
    let t = swap_s(&m, &old, at(1));
    assert!(t > 1.6 * at(1).wall_s, "{t} vs {}", at(1).wall_s);
}

/// The engine running the iteration's op-level schedule on the H200 profile agrees with the
/// closed form, in both regimes and both directions.
#[test]
fn the_engine_agrees_with_the_swap_closed_form_on_the_h200() {
    let m = ModelSpec::preset("llama-2-7b").unwrap();
    let cost = CostModel::new(&h200()).with_host(Implementation::VllmV0.profile());
    for (block, out) in [(2, false), (16, true), (128, false)] {
        let row = SwapRow {
            out,
            tokens: 256,
            block,
            copies: 0.0,
            wall_s: 0.0,
        };
        let t = swap_s(&m, &cost, &row);
        let timer = IterationTimer::new(&m, &cost, block, 2 * m.num_layers, true);
        let it = if out {
            IterationShape {
                swap_out_blocks: 256 / block,
                ..IterationShape::default()
            }
        } else {
            swap_in(256 / block)
        };
        let tl = kvplan_sim::simulate(&timer.schedule(&it), &cost).unwrap();
        assert!(
            (tl.makespan() - t).abs() <= 1e-9 * t,
            "block {block}: engine {} vs {t}",
            tl.makespan()
        );
    }
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

/// The given table's block (16) on a100-40g-pcie4 with vLLM 0.4's host: each 128 KiB copy holds
/// the copy engine 13 us (10 us latency less the 2.3 us completion a chain pays once, + 5.3 us of
/// bytes), well over its 2.46 us issue, so the swap stays the link's. Without the host thread each
/// copy holds the engine its whole 15.3 us and the rows meet `serve::study_resume_costs_per_row`'s
/// per-row bounds; with it they come out 14-23% fast (the table's 16.8 us per copy says the
/// A100 machine's per-copy cost is larger than the H200's measured 2.3 us setup, and that setup was
/// never measured on an A100), so this holds the table's own 25% band.
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
        println!(
            "{n} tokens: swap {swap:.4} s vs {} s ({:+.1}%)",
            f[2],
            100.0 * (swap / f[2] - 1.0)
        );
        assert!(err <= 0.25, "{n}: swap {swap} vs {} ({err})", f[2]);
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

/// The launch time of each kind of step, as the host profile gives it and, without one, as the
/// `[serving]` section does: a piecewise step launches its layers' attention and the LM head and
/// sampling eagerly and replays the rest; without a host profile an eager step launches every
/// kernel at the profile's launch interval, a full graph costs `graph_launch_us` and a
/// piecewise one also `piecewise_layer_us` per layer. Before and after the GPU, `[serving]`'s
/// per-step, per-sequence and per-token costs.
#[test]
fn each_kind_of_step_launches_at_its_closed_form() {
    use kvplan_serve::iteration::EngineCosts;
    use kvplan_vocab::serving::ServingSection;
    let m = ModelSpec::preset("opt-125m").unwrap();
    let layers = f64::from(m.num_layers);
    let hw = HardwareProfile::preset("a100-80g-sxm").unwrap();
    let serving = ServingSection {
        schedule_us: 100.0,
        schedule_per_seq_us: 10.0,
        schedule_per_token_us: 1.0,
        update_us: 50.0,
        update_per_seq_us: 5.0,
        graph_launch_us: 30.0,
        piecewise_layer_us: 7.0,
        ..ServingSection::default()
    };
    let engine = EngineCosts {
        cudagraph_sizes: vec![8, 64],
        full_graph_max_seqs: 8,
        serving: serving.clone(),
    };
    // A mixed step (one 40-token prefill chunk and 8 decodes: 48 tokens) is piecewise at 64.
    let mixed = IterationShape {
        seqs: [vec![(40, 40)], vec![(1, 100); 8]].concat(),
        logits: 9,
        ..IterationShape::default()
    };
    let decode = IterationShape {
        seqs: vec![(1, 100); 8],
        logits: 8,
        ..IterationShape::default()
    };
    let big = IterationShape {
        seqs: vec![(200, 200)],
        logits: 1,
        ..IterationShape::default()
    };
    let p = Implementation::VllmV0.profile();
    let hosted = CostModel::new(&hw).with_host(p.clone());
    let mut timer =
        IterationTimer::new(&m, &hosted, 16, 2 * m.num_layers, true).with_engine(engine.clone());
    let kernels = timer.schedule(&mixed).len() as f64;
    let t = timer.time(&mixed);
    assert_eq!(t.launch, Launch::Piecewise { tokens: 64 });
    let expect = (layers + 2.0) * p.launch_us + (kernels - layers - 2.0) * p.graph_kernel_us;
    assert!(
        (t.cpu_launch_s - expect * 1e-6).abs() < 1e-12,
        "{t:?} vs {expect} us"
    );
    // [serving]'s host time around the step: 9 sequences, 48 tokens.
    assert!(
        (t.cpu_before_s - (100.0 + 90.0 + 48.0) * 1e-6).abs() < 1e-12,
        "{t:?}"
    );
    assert!(
        (t.cpu_after_s - (50.0 + 45.0) * 1e-6).abs() < 1e-12,
        "{t:?}"
    );

    // Without a host profile: [serving] and the profile's launch interval (4 us here).
    let plain = CostModel::new(&hw);
    let launch_us = plain.kernels().launch_s() * 1e6;
    assert!(launch_us > 0.0);
    let mut timer = IterationTimer::new(&m, &plain, 16, 2 * m.num_layers, true).with_engine(engine);
    let t = timer.time(&mixed);
    assert!(
        (t.cpu_launch_s - (30.0 + layers * 7.0) * 1e-6).abs() < 1e-12,
        "{t:?}"
    );
    let t = timer.time(&decode);
    assert_eq!(t.launch, Launch::Full { tokens: 8 });
    assert!((t.cpu_launch_s - 30.0e-6).abs() < 1e-12, "{t:?}");
    let t = timer.time(&big);
    assert_eq!(
        t.launch,
        Launch::Eager,
        "200 tokens: above every capture size"
    );
    let eager = timer.schedule(&big).len() as f64;
    assert!(
        (t.cpu_launch_s - eager * launch_us * 1e-6).abs() < 1e-12,
        "{t:?}"
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
