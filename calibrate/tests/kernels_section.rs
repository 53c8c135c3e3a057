//! The `[kernels]` section of a calibrated profile, measured with the CPU backend on a tiny
//! model and a reduced token grid (the CUDA backend runs the same code on the full grid).

use kvplan_calibrate::kernels::{self, GEMMS, MEM_KINDS};
use kvplan_calibrate::{Measurements, Plan, build_profile};
use kvplan_exec::{BackendKind, DeviceInfo, ExecOptions};
use kvplan_vocab::calibration::{CopyTables, Curve};
use kvplan_vocab::kernel_model::{KernelTable, TableKind};
use kvplan_vocab::layers::elem_bytes_per_token;
use kvplan_vocab::layers::forward_ops;
use kvplan_vocab::schedule::OpKind;
use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};

/// A Llama-shaped model small enough for real CPU arithmetic in a test.
fn tiny() -> ModelSpec {
    let mut m = ModelSpec::preset("llama-3-8b").unwrap();
    m.name = "tiny-llama".into();
    m.num_layers = 2;
    m.hidden = 64;
    m.num_heads = 4;
    m.num_kv_heads = 2;
    m.head_dim = 16;
    m.ffn_dim = 96;
    m.vocab = 256;
    m
}

const GRID: [u32; 5] = [1, 2, 4, 8, 16];

/// Measurements with synthetic copies, attention and elementwise sweeps, and `kernels`.
const GIB: f64 = (1u64 << 30) as f64;

pub(crate) fn synthetic(kernels: Vec<KernelTable>) -> Measurements {
    let curve = |lat: f64, gbps: f64| {
        Curve(
            [4096u64, 1 << 20, 64 << 20]
                .iter()
                .map(|&b| (b, lat + b as f64 / (gbps * 1e9)))
                .collect(),
        )
    };
    let mut attention = Vec::new();
    for b in [1e5, 1e6, 1e7] {
        attention.push((b * 0.5, b, 2e-6 + b / 20e9, false));
    }
    for f in [1e8, 1e9, 1e10] {
        attention.push((f, 1e5, 2e-6 + f / 50e9, true));
    }
    Measurements {
        info: DeviceInfo {
            backend: BackendKind::Cpu,
            name: "test CPU".into(),
            driver: "test".into(),
            memory_bytes: Some(16 << 30),
            parallelism: Some(2),
        },
        host_ram_bytes: None,
        copy: CopyTables {
            h2d_pinned: curve(1e-6, 10.0),
            d2h_pinned: curve(1e-6, 10.0),
            h2d_pageable: curve(2e-6, 5.0),
            d2h_pageable: curve(2e-6, 5.0),
        },
        duplex_check: (10e9, 12e9),
        gemm: vec![],
        attention,
        elementwise: [1u64 << 12, 1 << 16, 1 << 20, 1 << 24]
            .iter()
            .map(|&b| (b as f64, 1e-6 + b as f64 / 20e9))
            .collect(),
        op_overhead_s: 1e-6,
        host: kvplan_vocab::calibration::HostCosts {
            launch_us: 5.0,
            copy_issue_us: 3.0,
            sync_us: 8.0,
        },
        kernels: Some(kernels),
    }
}

/// Every GEMM of the layer and every memory-bound kind has one table over exactly `grid`.
fn check_tables(m: &ModelSpec, tables: &[KernelTable], grid: &[u32]) {
    let ops = forward_ops(m, &[(1, 1)], 1);
    for name in GEMMS {
        let (_, op) = ops.iter().find(|(n, _)| *n == name).unwrap();
        let OpKind::Gemm { n, k, dtype, .. } = *op else {
            panic!("{name} is not a GEMM")
        };
        let t: Vec<&KernelTable> = tables
            .iter()
            .filter(|t| t.kind == TableKind::Gemm && t.n == n && t.k == k && t.dtype == dtype)
            .collect();
        assert_eq!(t.len(), 1, "{name}: {tables:?}");
        let tokens: Vec<u32> = t[0].points.iter().map(|p| p.0).collect();
        assert_eq!(tokens, grid, "{name}");
    }
    for kind in MEM_KINDS {
        let width = elem_bytes_per_token(m, kind.elem().unwrap());
        let t: Vec<&KernelTable> = tables
            .iter()
            .filter(|t| t.kind == kind && t.width == width)
            .collect();
        assert_eq!(t.len(), 1, "{kind:?}: {tables:?}");
        let tokens: Vec<u32> = t[0].points.iter().map(|p| p.0).collect();
        assert_eq!(tokens, grid, "{kind:?}");
    }
    assert_eq!(tables.len(), GEMMS.len() + MEM_KINDS.len());
    for t in tables {
        assert!(t.points.iter().all(|p| p.1 > 0.0), "{t:?}");
    }
}

#[test]
fn cpu_tables_round_trip_and_the_cost_model_reads_them_back() {
    let m = tiny();
    let mut exec = kvplan_exec::open(BackendKind::Cpu, &ExecOptions::default()).unwrap();
    let tables = kernels::measure(exec.as_mut(), std::slice::from_ref(&m), &GRID, 3).unwrap();
    check_tables(&m, &tables, &GRID);

    let meas = synthetic(tables.clone());
    let file = build_profile(&meas, "cpu-kernels", None, true).unwrap();
    let section = file.kernels.as_ref().expect("a [kernels] section");
    assert_eq!(section.tables, tables);
    assert!(
        section.source.contains("kvplan calibrate"),
        "{}",
        section.source
    );
    assert_eq!(section.launch_us, 1.0);
    assert_eq!(section.gemm.sms, None, "the CPU backend has no SMs");
    // The [calibration] section is still written.
    assert!(file.calibration.is_some());

    let text = file.to_toml();
    assert!(
        text.contains("[kernels]") && text.contains("[[kernels.tables]]"),
        "{text}"
    );
    let hw = HardwareProfile::from_toml_str(&text, "test").unwrap();
    assert_eq!(hw.kernels.as_ref(), Some(section));
    assert!(hw.calibration.is_some());

    // At every measured point the cost model returns the measured time (or the launch
    // interval, which no kernel on a stream beats).
    let cost = CostModel::new(&hw);
    let launch = section.launch_us * 1e-6;
    for t in &tables {
        for &(tokens, us) in &t.points {
            let op = kernels::table_op(t, tokens);
            let got = cost.duration(&op);
            let want = (us * 1e-6).max(launch);
            assert!(
                (got - want).abs() <= 1e-9 * want,
                "{:?} n={} k={} width={} at {tokens}: {got} vs {want}",
                t.kind,
                t.n,
                t.k,
                t.width
            );
        }
    }
}

#[test]
fn synthetic_cuda_tables_fit_and_record_the_sm_count() {
    let m = ModelSpec::preset("llama-3-8b").unwrap();
    let grid = kvplan_vocab::kernel_model::token_grid();
    // Times from a smooth model: 5 us floor, 2 TB/s and 500 TFLOP/s effective.
    let tables: Vec<KernelTable> = kernels::tables(std::slice::from_ref(&m))
        .into_iter()
        .map(|mut t| {
            t.points = grid
                .iter()
                .map(|&g| {
                    let op = kernels::table_op(&t, g);
                    (
                        g,
                        5.0 + 1e6 * (op.flops() / 500e12).max(op.mem_bytes() / 2e12),
                    )
                })
                .collect();
            t
        })
        .collect();
    check_tables(&m, &tables, &grid);
    let mut meas = synthetic(tables);
    meas.info.backend = BackendKind::Cuda;
    meas.info.parallelism = Some(132);
    let base = HardwareProfile::preset("h100-sxm").unwrap();
    let file = build_profile(&meas, "h100-cal", Some(&base), false).unwrap();
    // Host RAM not measured: the base's datasheet. Measured: the machine's.
    assert_eq!(file.host.ram_gib, base.host.ram_bytes as f64 / GIB);
    meas.host_ram_bytes = Some(96 << 30);
    let measured = build_profile(&meas, "h100-cal", Some(&base), false).unwrap();
    assert_eq!(measured.host.ram_gib, 96.0);
    assert_ne!(base.host.ram_bytes, 96 << 30);
    let k = file.kernels.unwrap();
    assert_eq!(k.gemm.sms, Some(132));
    for kind in kvplan_vocab::schedule::ElemKind::ALL {
        let f = k.mem(kind);
        assert!(
            f.floor_us > 0.0 && f.floor_us <= 5.0 + 1e-9,
            "{kind:?} {f:?}"
        );
        if kind != kvplan_vocab::schedule::ElemKind::Other {
            let want = 2e12 / base.gpu.mem_bandwidth;
            assert!((f.efficiency - want).abs() < 0.02 * want, "{kind:?} {f:?}");
        }
    }
    let a = k.attention;
    assert!(a.prefill_efficiency > 0.0 && a.prefill_efficiency <= 1.0);
    assert!(a.decode_efficiency > 0.0 && a.decode_efficiency <= 1.0);
    assert!((a.floor_us - 2.0).abs() < 0.01, "{a:?}");
}

#[test]
fn quick_cpu_calibration_writes_kernels_on_a_reduced_grid() {
    let mut plan = Plan::new(true, false, Some(vec![tiny()])).unwrap();
    assert_eq!(plan.kernel_grid, kernels::grid(false, true));
    plan.kernel_grid = GRID.to_vec();
    plan.copy_sizes.truncate(3);
    let mut exec = kvplan_exec::open(BackendKind::Cpu, &ExecOptions::default()).unwrap();
    let mut steps = Vec::new();
    let meas = kvplan_calibrate::measure(exec.as_mut(), &plan, &mut |i, n, what| {
        steps.push((i, n, what.to_string()))
    })
    .unwrap();
    assert_eq!(
        steps.last().map(|s| (s.0, s.1)),
        Some((10, 10)),
        "{steps:?}"
    );
    let tables = meas.kernels.clone().expect("kernel tables");
    check_tables(&tiny(), &tables, &GRID);
    let file = build_profile(&meas, "cpu", None, true).unwrap();
    // This machine's RAM, as the OS reports it (Linux: always).
    let ram = kvplan_exec::host_ram_bytes();
    assert!(cfg!(not(target_os = "linux")) || ram.is_some());
    assert_eq!(meas.host_ram_bytes, ram);
    if let Some(b) = ram {
        assert_eq!(file.host.ram_gib, b as f64 / GIB);
    }
    let text = file.to_toml();
    let hw = HardwareProfile::from_toml_str(&text, "test").unwrap();
    // The host's side of the CPU executor, measured: its dispatch between two ops and a wait
    // for a finished op, each well under a millisecond (a clock coarser than the dispatch can
    // read 0). The profile carries them, and kvplan's executor on that profile issues at them.
    let h = meas.host;
    for v in [h.launch_us, h.copy_issue_us, h.sync_us] {
        assert!((0.0..1000.0).contains(&v), "{h:?}");
    }
    assert_eq!(hw.calibration.as_ref().and_then(|c| c.host), Some(h));
    assert!(text.contains("[calibration.host]"), "{text}");
    let exec_host = kvplan_vocab::host::Implementation::KvplanExec.profile_on(&hw);
    assert_eq!(
        (
            exec_host.launch_us,
            exec_host.copy_issue_us,
            exec_host.sync_us
        ),
        (h.launch_us, h.copy_issue_us, h.sync_us)
    );
    assert!(
        exec_host.source.contains("[calibration.host]: cpu backend"),
        "{}",
        exec_host.source
    );
    let written = hw.kernels.unwrap().tables;
    // The grid tables first, then the [calibration] GEMM shapes the grid does not cover (the LM
    // head and KVPR's recompute GEMM) at their measured rows.
    assert_eq!(written[..tables.len()], tables[..]);
    assert!(written.len() > tables.len());
    for t in &written[tables.len()..] {
        assert_eq!(t.kind, TableKind::Gemm);
        assert!(!tables.iter().any(|g| (g.n, g.k) == (t.n, t.k)), "{t:?}");
        let rows: Vec<u32> = meas
            .gemm
            .iter()
            .filter(|p| (p.n, p.k, p.dtype) == (t.n, t.k, t.dtype))
            .map(|p| p.m)
            .collect();
        let mut rows = rows;
        rows.sort_unstable();
        rows.dedup();
        assert_eq!(t.points.iter().map(|p| p.0).collect::<Vec<_>>(), rows);
    }
}
