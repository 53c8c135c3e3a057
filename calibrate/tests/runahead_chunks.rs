//! Chunk-after-prefix attention (KV-Runahead's per-device prefill): measured through the
//! executor, fitted into the profile, and read back by the Runahead planner's per-chunk costs.

use kvplan_calibrate::micro::{chunk_prefix_attention, chunk_prefix_shapes, measure_chunk_prefix};
use kvplan_calibrate::{Measurements, build_profile};
use kvplan_exec::{BackendKind, DeviceInfo, ExecOptions};
use kvplan_planner::plan::{Options, Shape, Strategy, plan};
use kvplan_planner::runahead::{ChunkCosts, ModelCosts};
use kvplan_vocab::calibration::{CopyTables, Curve};
use kvplan_vocab::schedule::OpKind;
use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};

#[test]
fn chunk_after_prefix_is_measured_on_the_cpu() {
    chunk_after_prefix(false);
}

/// The same, with the wall-clock comparison.
#[test]
#[ignore = "wall-clock check: measured times depend on machine load; run with `cargo test -- --ignored wall_clock`"]
fn chunk_after_prefix_is_measured_on_the_cpu_wall_clock() {
    chunk_after_prefix(true);
}

fn chunk_after_prefix(timing: bool) {
    let mut exec = kvplan_exec::open(BackendKind::Cpu, &ExecOptions::default()).unwrap();
    let m = ModelSpec::preset("opt-125m").unwrap();
    let shapes = chunk_prefix_shapes(BackendKind::Cpu, true);
    assert_eq!(shapes, vec![(16, 64), (16, 256), (64, 64), (64, 256)]);
    let pts = measure_chunk_prefix(exec.as_mut(), std::slice::from_ref(&m), &shapes, 3).unwrap();
    assert_eq!(pts.len(), 4);
    for p in &pts {
        assert!(p.seconds > 0.0, "{p:?}");
        // Query i of the chunk sees prefix + i + 1 keys: 4 * heads * head_dim FLOPs per pair.
        let c = f64::from(p.chunk);
        let pairs = c * f64::from(p.prefix) + c * (c + 1.0) / 2.0;
        let want = 4.0 * f64::from(m.num_heads) * f64::from(m.head_dim) * pairs;
        assert_eq!(p.flops, want, "{p:?}");
        let op = chunk_prefix_attention(&m, p.chunk, p.prefix);
        assert!(matches!(
            op,
            OpKind::Attention { q_len, kv_len, causal: true, .. }
                if q_len == p.chunk && kv_len == p.prefix + p.chunk
        ));
    }
    // A 64-token chunk after 256 keys does 3x the work of one after 64 keys: a wall-clock
    // comparison, so only in the ignored `_wall_clock` test (the default `cargo test` is
    // deterministic).
    if timing {
        assert!(pts[3].seconds > pts[2].seconds, "{pts:?}");
    }
}

/// Synthetic measurements of a GPU whose attention follows a known roofline.
fn synthetic(attention: Vec<(f64, f64, f64, bool)>) -> Measurements {
    let curve = |lat: f64, gbps: f64| {
        Curve(
            [4096u64, 1 << 20, 64 << 20]
                .iter()
                .map(|&b| (b, lat + b as f64 / (gbps * 1e9)))
                .collect(),
        )
    };
    Measurements {
        info: DeviceInfo {
            backend: BackendKind::Cuda,
            name: "synthetic GPU".into(),
            driver: "test".into(),
            memory_bytes: Some(80 << 30),
            parallelism: None,
        },
        host_ram_bytes: None,
        copy: CopyTables {
            h2d_pinned: curve(1e-5, 24.0),
            d2h_pinned: curve(1e-5, 24.0),
            h2d_pageable: curve(2e-5, 12.0),
            d2h_pageable: curve(2e-5, 12.0),
        },
        duplex_check: (24e9, 48e9),
        gemm: vec![],
        attention,
        elementwise: [1u64 << 12, 1 << 20, 1 << 26]
            .iter()
            .map(|&b| (b as f64, 3e-6 + b as f64 / 1.6e12))
            .collect(),
        op_overhead_s: 4e-6,
        host: kvplan_vocab::calibration::HostCosts {
            launch_us: 5.0,
            copy_issue_us: 3.0,
            sync_us: 8.0,
        },
        kernels: None,
    }
}

#[test]
fn calibrated_chunk_costs_reach_the_runahead_planner() {
    let m = ModelSpec::preset("llama-2-7b").unwrap();
    // The "GPU": 5 us + max(flops / 150 TFLOP/s, bytes / 1500 GB/s), 2% slower on chunks.
    let truth = |op: &OpKind| 5e-6 + (op.flops() / 150e12).max(op.mem_bytes() / 1500e9);
    let att = |batch, q_len, kv_len, causal| OpKind::Attention {
        batch,
        q_heads: 32,
        kv_heads: 32,
        q_len,
        kv_len,
        head_dim: 128,
        causal,
        dtype: m.dtype,
        kv: kvplan_vocab::KvCacheDtype::Auto,
    };
    let mut points = Vec::new();
    for b in [8, 64] {
        for kv in [256, 2048] {
            let op = att(b, 1, kv, false);
            points.push((op.flops(), op.mem_bytes(), truth(&op), false));
        }
    }
    for len in [512, 2048] {
        let op = att(1, len, len, true);
        points.push((op.flops(), op.mem_bytes(), truth(&op), true));
    }
    let shapes = chunk_prefix_shapes(BackendKind::Cuda, true);
    for &(c, p) in &shapes {
        let op = chunk_prefix_attention(&m, c, p);
        points.push((op.flops(), op.mem_bytes(), truth(&op) * 1.02, true));
    }
    let base = HardwareProfile::preset("a100-80g-sxm").unwrap();
    let file = build_profile(&synthetic(points), "synthetic", Some(&base), true).unwrap();
    // Through the TOML file, as `--hardware calibrated.toml` reads it.
    let hw = HardwareProfile::from_toml_str(&file.to_toml(), "calibrated.toml").unwrap();
    let cost = CostModel::new(&hw);
    let costs = ModelCosts::new(&m, &cost, 1);
    // The planner's per-chunk attention is the fitted model: within 5% of the measured points.
    for &(c, p) in &shapes {
        let measured = truth(&chunk_prefix_attention(&m, c, p)) * 1.02;
        let planned = costs.chunk(c, p).attn;
        assert!(
            (planned - measured).abs() <= 0.05 * measured,
            "c={c} P={p}: planned {planned} vs measured {measured}"
        );
    }
    // And the plan on that profile is what its schedule simulates to.
    let shape = Shape {
        batch: 1,
        gpu_batches: 1,
        prompt: 16384,
        gen_len: 1,
    };
    let p = plan(
        &m,
        &hw,
        &cost,
        &shape,
        Strategy::RUNAHEAD,
        &Options::default(),
    )
    .unwrap();
    let d = p
        .decisions
        .get::<kvplan_planner::runahead::RunaheadDetails>()
        .cloned()
        .unwrap();
    let tl = kvplan_sim::simulate(&p.schedule, &cost).unwrap();
    let ttft = tl.makespan();
    assert!(
        (ttft - d.ttft_s.runahead).abs() <= 1e-9 * ttft,
        "{ttft} vs {d:?}"
    );
}
