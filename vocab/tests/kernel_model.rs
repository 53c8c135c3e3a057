//! The kernel model's pieces against closed forms worked by hand (`vocab/src/kernel_model.rs`):
//! written against mutants that survived `cargo mutants` on it (docs/testing.md, "Mutation
//! testing"), since the crates that use the model see it only through whole plans.

use kvplan_vocab::attention::AttentionWork;
use kvplan_vocab::kernel_model::{
    AttentionFit, KernelTable, KernelsSection, KvAppend, TableKind, token_grid,
};
use kvplan_vocab::schedule::ElemKind;
use kvplan_vocab::{DType, HardwareProfile};

/// The grid as its documentation states it, computed another way (powers, not repeated
/// products): 1, 2, 4, 8, 16, then 16 x 1.25^n rounded to multiples of 8 up to 1024, of 16 up to
/// 2048 and of 32 up to 4096, with 24, 512 and 4096 added.
#[test]
fn token_grid_is_the_documented_grid() {
    let mut want = vec![1u32, 2, 4, 8, 16];
    for n in 1.. {
        let x = 16.0 * 1.25f64.powi(n);
        if x > 4096.0 {
            break;
        }
        let q = if x <= 1024.0 {
            8.0
        } else if x <= 2048.0 {
            16.0
        } else {
            32.0
        };
        want.push(((x / q).round() * q) as u32);
    }
    want.extend([24, 512, 4096]);
    want.sort_unstable();
    want.dedup();
    let grid = token_grid();
    assert_eq!(grid, want);
    // Spot values: 16 x 1.25^6 = 61.04 rounds to 64 (to a multiple of 8), 16 x 1.25^9 = 119.2
    // to 120 (of 8, not of 16), and 16 x 1.25^22 = 2168.4 to 2176 (of 32).
    for v in [64, 120, 2176] {
        assert!(grid.contains(&v), "{v}: {grid:?}");
    }
    assert!(grid.windows(2).all(|w| w[0] < w[1]));
    assert_eq!(grid.last(), Some(&4096));
}

fn fit() -> AttentionFit {
    AttentionFit {
        floor_us: 2.0,
        prefill_efficiency: 0.5,
        decode_efficiency: 0.5,
        sms: Some(100),
        unit_us: Some(1.0),
        tail: Some(0.5),
        split_us: Some(3.0),
    }
}

fn work(units: f64, splits: u32) -> AttentionWork {
    AttentionWork {
        flops: 1e9,
        bytes: 5e7,
        dtype: DType::Fp16,
        units,
        splits,
        unit_flops: 1e8,
        unit_bytes: 5e6,
        long_flops: 0.0,
        long_bytes: 1e7,
    }
}

const SPF: f64 = 1e-14; // 100 TFLOP/s
const HBM: f64 = 1e12; // 1 TB/s

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * b.abs().max(1e-9)
}

/// The work-unit model: a unit streams at its SM's share of HBM (1e12 x 0.5 / 100 = 5 GB/s) and
/// computes at 1e-14 x 100 / 0.5 = 2e-12 s per FLOP. A mean unit: 1 us + max(5e6 B / 5 GB/s,
/// 1e8 x 2e-12) = 1.001 ms; the longest: 1 us + 1e7 / 5e9 = 2.001 ms.
#[test]
fn work_units_run_in_rounds_or_wait_for_the_longest() {
    let f = fit();
    // 250 units on 100 SMs: 2.5 rounds plus half a round of tail = 3 mean units (3.003 ms),
    // longer than the longest unit; + 2 us floor + 3 us for the split-KV combine.
    let t = f.device_seconds(&work(250.0, 2), SPF, HBM);
    assert!(close(t, 3.008e-3), "{t}");
    // Without splits, no combine.
    let t = f.device_seconds(&work(250.0, 1), SPF, HBM);
    assert!(close(t, 3.005e-3), "{t}");
    // 50 units: 0.5 + 0.5 x 0.5 = 0.75 rounds (0.751 ms); the longest unit (2.001 ms) decides.
    let t = f.device_seconds(&work(50.0, 1), SPF, HBM);
    assert!(close(t, 2.003e-3), "{t}");
    // No units (an empty batch): the floor alone.
    let t = f.device_seconds(&work(0.0, 1), SPF, HBM);
    assert!(close(t, 2e-6), "{t}");
}

/// Appending the new tokens' K and V: each unit also copies its share (1e6 B of 2.5e8 over 250
/// units) at a quarter of its SM's HBM share (2.5 GB/s): +0.4 ms a mean unit, +0.8 ms the
/// longest (2e6 B); and 2 ns per token and query head, 1,000 of them.
#[test]
fn appending_kv_adds_copies_per_unit_and_a_time_per_token() {
    let f = fit();
    let a = KvAppend {
        bytes: 2.5e8,
        long_bytes: 2e6,
        efficiency: 0.25,
        tokens: 1000.0,
        token_ns: 2.0,
    };
    // 3 rounds x 1.401 ms = 4.203 ms (the longest, 2.801 ms, is shorter) + 2 us floor + 2 us
    // of tokens + 3 us combine.
    let t = f.device_seconds_appending(&work(250.0, 2), SPF, HBM, Some(&a));
    assert!(close(t, 4.210e-3), "{t}");
    // 50 units: 0.75 x 1.401 ms = 1.051 ms < the longest's 2.801 ms.
    let t = f.device_seconds_appending(&work(50.0, 1), SPF, HBM, Some(&a));
    assert!(close(t, 2.805e-3), "{t}");
}

/// Without an SM count, the roofline: max(1e9 FLOPs x 1e-14 / 0.5, 5e7 B / (1e12 x 0.5)) =
/// max(20 us, 100 us), plus the floor.
#[test]
fn without_sms_attention_is_the_roofline() {
    let f = AttentionFit::roofline(2.0, 0.5, 0.5);
    let t = f.device_seconds(&work(250.0, 1), SPF, HBM);
    assert!(close(t, 1.02e-4), "{t}");
}

/// Every figure of an attention fit is range-checked, and the error names it.
#[test]
fn attention_fit_checks_name_the_bad_field() {
    assert!(fit().check("p.toml", "kernels.attention").is_ok());
    let bad: [(fn(&mut AttentionFit), &str); 7] = [
        (|f| f.floor_us = -1.0, "floor_us"),
        (|f| f.floor_us = f64::NAN, "floor_us"),
        (|f| f.prefill_efficiency = 1.5, "prefill_efficiency"),
        (|f| f.decode_efficiency = 0.0, "decode_efficiency"),
        (|f| f.sms = Some(0), "sms"),
        (|f| f.sms = Some(10_001), "sms"),
        (|f| f.unit_us = Some(-1.0), "unit_us"),
    ];
    for (set, field) in bad {
        let mut f = fit();
        set(&mut f);
        let e = f
            .check("p.toml", "kernels.attention")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with(&format!("p.toml: kernels.attention.{field}")),
            "{field}: {e}"
        );
    }
    // The largest SM count allowed.
    let mut f = fit();
    f.sms = Some(10_000);
    assert!(f.check("p.toml", "kernels.attention").is_ok());
}

fn section() -> KernelsSection {
    let mut s = kvplan_vocab::cost::derived_kernels(&HardwareProfile::preset("h100-sxm").unwrap());
    s.tables = vec![
        KernelTable {
            kind: TableKind::Gemm,
            dtype: DType::Fp16,
            n: 4096,
            k: 4096,
            width: 0,
            points: vec![(1, 10.0), (64, 12.0)],
        },
        KernelTable {
            kind: TableKind::Norm,
            dtype: DType::Fp16,
            n: 0,
            k: 0,
            width: 16384,
            points: vec![(1, 2.0), (4096, 3.6e9)],
        },
    ];
    s
}

/// Every figure of a `[kernels]` section is checked at its bounds, and the error names it.
#[test]
fn kernels_section_checks_each_bound_and_names_the_field() {
    assert!(section().check("p.toml").is_ok());
    // The largest values allowed.
    let mut s = section();
    s.gemm.tile_exponent = Some(2.0);
    s.gemm.sms = Some(10_000);
    s.gemm.blend = Some(64.0);
    s.norm.efficiency = 4.0;
    assert!(s.check("p.toml").is_ok(), "{:?}", s.check("p.toml"));
    type Set = fn(&mut KernelsSection);
    let bad: [(Set, &str); 14] = [
        (|s| s.launch_us = -1.0, "kernels.launch_us"),
        (
            |s| s.gemm.tile_exponent = Some(2.5),
            "kernels.gemm.tile_exponent",
        ),
        (
            |s| s.gemm.tile_exponent = Some(f64::NAN),
            "kernels.gemm.tile_exponent",
        ),
        (|s| s.gemm.sms = Some(0), "kernels.gemm.sms"),
        (|s| s.gemm.sms = Some(10_001), "kernels.gemm.sms"),
        (|s| s.gemm.blend = Some(0.5), "kernels.gemm.blend"),
        (|s| s.gemm.blend = Some(f64::INFINITY), "kernels.gemm.blend"),
        (|s| s.rope.efficiency = 4.5, "kernels.rope.efficiency"),
        (|s| s.add.efficiency = 0.0, "kernels.add.efficiency"),
        (|s| s.tables[0].n = 0, "kernels.tables[0]"),
        (|s| s.tables[1].width = 0, "kernels.tables[1]"),
        (|s| s.tables[1].points.clear(), "kernels.tables[1].points"),
        (
            |s| s.tables[0].points[1].0 = 1,
            "kernels.tables[0].points[1]",
        ),
        (
            |s| s.tables[1].points[1].1 = 3.7e9,
            "kernels.tables[1].points[1]",
        ),
    ];
    for (set, field) in bad {
        let mut s = section();
        set(&mut s);
        let e = s
            .check("p.toml")
            .map(|()| "accepted".to_string())
            .unwrap_or_else(|e| e.to_string());
        assert!(e.starts_with(&format!("p.toml: {field}")), "{field}: {e}");
    }
    // A memory-bound table's n and k, and a GEMM table's width, are not its fields: zero is
    // fine there (and a zero-duration point is not).
    let mut s = section();
    s.tables[0].points[0].1 = 0.0;
    assert!(s.check("p.toml").is_err());
}

/// A memory-bound table names its kind; a GEMM table has none. The zero fields of each are not
/// written to the profile.
#[test]
fn tables_map_to_their_kinds_and_leave_out_zero_fields() {
    for (t, e) in [
        (TableKind::Gemm, None),
        (TableKind::Norm, Some(ElemKind::Norm)),
        (TableKind::Activation, Some(ElemKind::Activation)),
        (TableKind::Rope, Some(ElemKind::Rope)),
        (TableKind::Add, Some(ElemKind::Add)),
        (TableKind::Embedding, Some(ElemKind::Embedding)),
    ] {
        assert_eq!(t.elem(), e, "{t:?}");
    }
    let s = section();
    let gemm = toml::to_string(&s.tables[0]).unwrap();
    assert!(
        gemm.contains("n = 4096") && !gemm.contains("width"),
        "{gemm}"
    );
    let norm = toml::to_string(&s.tables[1]).unwrap();
    assert!(norm.contains("width = 16384"), "{norm}");
    assert!(!norm.contains("n = ") && !norm.contains("k = "), "{norm}");
}
