//! The kernel model's pieces against closed forms worked by hand (`vocab/src/kernel_model.rs`):
//! written against mutants that survived `cargo mutants` on it (docs/testing.md, "Mutation
//! testing"), since the crates that use the model see it only through whole plans.

use kvplan_vocab::WeightFormat;
use kvplan_vocab::attention::AttentionWork;
use kvplan_vocab::kernel_model::{
    AllReduceFit, AttentionFit, GemmFit, KernelModel, KernelTable, KernelsSection, KvAppend,
    MemFit, TableKind, token_grid,
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

/// The work-unit model: a unit streams at its SM's share of HBM (1e12 x 0.5 / 100 = 5 GB/s) and
/// computes at 1e-14 x 100 / 0.5 = 2e-12 s per FLOP. A mean unit: 1 us + max(5e6 B / 5 GB/s,
/// 1e8 x 2e-12) = 1.001 ms; the longest: 1 us + 1e7 / 5e9 = 2.001 ms.
#[test]
fn work_units_run_in_rounds_or_wait_for_the_longest() {
    let f = fit();
    // 250 units on 100 SMs: 2.5 rounds plus half a round of tail = 3 mean units (3.003 ms),
    // longer than the longest unit; + 2 us floor + 3 us for the split-KV combine.
    let t = f.device_seconds(&work(250.0, 2), SPF, HBM);
    assert!(near(t, 3.008e-3), "{t}");
    // Without splits, no combine.
    let t = f.device_seconds(&work(250.0, 1), SPF, HBM);
    assert!(near(t, 3.005e-3), "{t}");
    // 50 units: 0.5 + 0.5 x 0.5 = 0.75 rounds (0.751 ms); the longest unit (2.001 ms) decides.
    let t = f.device_seconds(&work(50.0, 1), SPF, HBM);
    assert!(near(t, 2.003e-3), "{t}");
    // A compute-bound unit: 1e9 FLOPs x 2e-12 s = 2 ms (more than its 1 ms of bytes), 3
    // rounds of 2.001 ms.
    let mut w = work(250.0, 1);
    w.unit_flops = 1e9;
    let t = f.device_seconds(&w, SPF, HBM);
    assert!(near(t, 6.005e-3), "{t}");
    // No units (an empty batch): the floor alone.
    let t = f.device_seconds(&work(0.0, 1), SPF, HBM);
    assert!(near(t, 2e-6), "{t}");
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
    assert!(near(t, 4.210e-3), "{t}");
    // 50 units: 0.75 x 1.401 ms = 1.051 ms < the longest's 2.801 ms.
    let t = f.device_seconds_appending(&work(50.0, 1), SPF, HBM, Some(&a));
    assert!(near(t, 2.805e-3), "{t}");
}

/// Without an SM count, the roofline: max(1e9 FLOPs x 1e-14 / 0.5, 5e7 B / (1e12 x 0.5)) =
/// max(20 us, 100 us), plus the floor.
#[test]
fn without_sms_attention_is_the_roofline() {
    let f = AttentionFit::roofline(2.0, 0.5, 0.5);
    let t = f.device_seconds(&work(250.0, 1), SPF, HBM);
    assert!(near(t, 1.02e-4), "{t}");
}

/// Every figure of an attention fit is range-checked, and the error names it.
#[test]
fn attention_fit_checks_name_the_bad_field() {
    assert!(fit().check("p.toml", "kernels.attention").is_ok());
    type Set = fn(&mut AttentionFit);
    let bad: [(Set, &str); 7] = [
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

// ---------------------------------------------------------------------------------------------
// The evaluated model: GEMMs, memory-bound kernels, all-reduce
// ---------------------------------------------------------------------------------------------

const PEAK: f64 = 1e14; // 1e-14 s per FLOP

fn roofline_gemm() -> GemmFit {
    GemmFit {
        floor_us: 1.0,
        latency_us: 2.0,
        memory_efficiency: 0.5,
        compute_efficiency: 0.5,
        tile_exponent: None,
        sms: None,
        blend: None,
    }
}

fn table(kind: TableKind, n: u32, k: u32, width: u64, points: &[(u32, f64)]) -> KernelTable {
    KernelTable {
        kind,
        dtype: DType::Fp16,
        n,
        k,
        width,
        points: points.to_vec(),
    }
}

fn model(gemm: GemmFit, tables: Vec<KernelTable>, hbm: f64) -> KernelModel {
    let mut s = section();
    s.gemm = gemm;
    s.tables = tables;
    s.norm = MemFit {
        floor_us: 2.0,
        efficiency: 0.5,
    };
    s.allreduce = AllReduceFit {
        latency_us: 5.0,
        bus_gbps: 100.0,
    };
    KernelModel::new(s, [PEAK; DType::COUNT], hbm)
}

fn near(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs()
}

/// Without an SM count, a GEMM is its floor plus the larger of the memory term (latency plus
/// fp16 bytes of A, B and C at half of HBM) and the compute term (2mnk FLOPs at half of peak);
/// `blend` takes their p-norm instead; a batch multiplies the bytes and FLOPs.
#[test]
fn gemm_model_is_the_floor_plus_the_roofline() {
    let km = model(roofline_gemm(), vec![], HBM);
    let mem = |m: f64, n: f64, k: f64, b: f64| 2e-6 + (m * k + k * n + m * n) * 2.0 * b / 5e11;
    let comp = |m: f64, n: f64, k: f64, b: f64| 2.0 * m * n * k * b * 1e-14 / 0.5;
    // Decode: memory-bound.
    let t = km.gemm_model(1, 4096, 4096, 1, DType::Fp16);
    assert!(near(t, 1e-6 + mem(1.0, 4096.0, 4096.0, 1.0)), "{t}");
    assert!(mem(1.0, 4096.0, 4096.0, 1.0) > comp(1.0, 4096.0, 4096.0, 1.0));
    let t = km.gemm_model(1, 4096, 4096, 3, DType::Fp16);
    assert!(near(t, 1e-6 + mem(1.0, 4096.0, 4096.0, 3.0)), "{t}");
    // Prefill: compute-bound.
    let t = km.gemm_model(4096, 4096, 4096, 1, DType::Fp16);
    assert!(near(t, 1e-6 + comp(4096.0, 4096.0, 4096.0, 1.0)), "{t}");
    let t = km.gemm_model(4096, 4096, 4096, 2, DType::Fp16);
    assert!(near(t, 1e-6 + comp(4096.0, 4096.0, 4096.0, 2.0)), "{t}");
    // A p-norm of 2.
    let km = model(
        GemmFit {
            blend: Some(2.0),
            ..roofline_gemm()
        },
        vec![],
        HBM,
    );
    let (a, b) = (
        mem(4096.0, 4096.0, 4096.0, 1.0),
        comp(4096.0, 4096.0, 4096.0, 1.0),
    );
    let t = km.gemm_model(4096, 4096, 4096, 1, DType::Fp16);
    assert!(near(t, 1e-6 + (a * a + b * b).sqrt()), "{t}");
}

/// With an SM count, the compute term is the best tile's waves: `m = 128, n = 256` on 2 SMs
/// fits two 128 x 128 tiles in one wave, `2 x 128 x 128 x k` FLOPs per SM at 2 x 1e-14 s per
/// FLOP (one SM's share of the peak) and half efficiency; a larger tile exponent makes the
/// larger tiles more efficient, `(harmonic(128, 128) / 32)^1 = 2`; a batch of two needs two
/// waves.
#[test]
fn gemm_model_quantises_waves_of_tiles() {
    let fit = GemmFit {
        latency_us: 0.0,
        memory_efficiency: 1.0,
        sms: Some(2),
        ..roofline_gemm()
    };
    let one_wave = 2.0 * 128.0 * 128.0 * 8192.0 * 2e-14 / 0.5;
    let km = model(fit, vec![], 1e13);
    let t = km.gemm_model(128, 256, 8192, 1, DType::Fp16);
    assert!(near(t, 1e-6 + one_wave), "{t}");
    let t = km.gemm_model(128, 256, 8192, 2, DType::Fp16);
    assert!(near(t, 1e-6 + 2.0 * one_wave), "{t}");
    let km = model(
        GemmFit {
            tile_exponent: Some(1.0),
            ..fit
        },
        vec![],
        1e13,
    );
    let t = km.gemm_model(128, 256, 8192, 1, DType::Fp16);
    assert!(near(t, 1e-6 + one_wave / 2.0), "{t}");
}

/// Fp8 weights compute at the fp8 peak where the GPU has one (twice the 16-bit rate here) and
/// at the 16-bit rate where it has none (a peak of 0 is none).
#[test]
fn fp8_weights_use_the_fp8_peak_only_where_there_is_one() {
    let comp16 = 1e-6 + 2.0 * 4096f64.powi(3) * 1e-14 / 0.5;
    let km = model(roofline_gemm(), vec![], HBM);
    let t = km.gemm_model_with(4096, 4096, 4096, 1, DType::Fp16, WeightFormat::Fp8);
    assert!(near(t, comp16), "{t}");
    let km = model(roofline_gemm(), vec![], HBM).with_fp8_peak(Some(0.0));
    let t = km.gemm_model_with(4096, 4096, 4096, 1, DType::Fp16, WeightFormat::Fp8);
    assert!(near(t, comp16), "{t}");
    let km = model(roofline_gemm(), vec![], HBM).with_fp8_peak(Some(2e14));
    let t = km.gemm_model_with(4096, 4096, 4096, 1, DType::Fp16, WeightFormat::Fp8);
    assert!(near(t, 1e-6 + 2.0 * 4096f64.powi(3) * 5e-15 / 0.5), "{t}");
}

/// A measured shape reads its table, log-log between rows (10 us at 1 row, 20 us at 64: 8 rows
/// is 10 x 2^(3/6) us), its first point below it, and beyond its last row the model's growth;
/// a batched GEMM takes the model; another shape takes the model times the nearest tables'
/// measured / model ratios, weighted by inverse distance in (log n, log k); another dtype has
/// no tables.
#[test]
fn gemm_device_reads_tables_and_corrects_the_model_elsewhere() {
    let tables = vec![
        table(TableKind::Gemm, 4096, 4096, 0, &[(1, 10.0), (64, 20.0)]),
        table(TableKind::Gemm, 4096, 16384, 0, &[(1, 40.0), (64, 90.0)]),
    ];
    let km = model(roofline_gemm(), tables, HBM);
    let dev = |m, n, k| km.gemm_device(m, n, k, 1, DType::Fp16);
    let md = |m, n, k| km.gemm_model(m, n, k, 1, DType::Fp16);
    assert!(
        near(dev(8, 4096, 4096), 10e-6 * 2f64.sqrt()),
        "{}",
        dev(8, 4096, 4096)
    );
    assert!(near(dev(1, 4096, 4096), 10e-6));
    assert!(near(dev(0, 4096, 4096), 10e-6));
    let beyond = 20e-6 * md(1024, 4096, 4096) / md(64, 4096, 4096);
    assert!(
        near(dev(1024, 4096, 4096), beyond),
        "{}",
        dev(1024, 4096, 4096)
    );
    let batched = km.gemm_device(8, 4096, 4096, 2, DType::Fp16);
    assert!(near(batched, km.gemm_model(8, 4096, 4096, 2, DType::Fp16)));
    // Unmeasured k = 6000 between the two: weights 1 / |ln(6000 / 4096)| and
    // 1 / |ln(16384 / 6000)|.
    let (w0, w1) = (
        1.0 / (6000f64 / 4096.0).ln(),
        1.0 / (16384f64 / 6000.0).ln(),
    );
    let r0 = (10e-6 * 2f64.sqrt() / md(8, 4096, 4096)).ln();
    let r1 = (40e-6 * (90f64 / 40.0).powf(0.5) / md(8, 4096, 16384)).ln();
    let want = md(8, 4096, 6000) * ((w0 * r0 + w1 * r1) / (w0 + w1)).exp();
    assert!(
        near(dev(8, 4096, 6000), want),
        "{} vs {want}",
        dev(8, 4096, 6000)
    );
    // The same the other way round in the table list: the nearest comes first by distance.
    let tables = vec![
        table(TableKind::Gemm, 4096, 16384, 0, &[(1, 40.0), (64, 90.0)]),
        table(TableKind::Gemm, 4096, 4096, 0, &[(1, 10.0), (64, 20.0)]),
    ];
    let km2 = model(roofline_gemm(), tables, HBM);
    assert!(near(km2.gemm_device(8, 4096, 6000, 1, DType::Fp16), want));
    // A third, farther shape (n = 16384: distance ln 4 + 0.38) is left out, wherever it
    // sits in the list.
    let far = table(TableKind::Gemm, 16384, 4096, 0, &[(1, 80.0), (64, 300.0)]);
    let t1 = table(TableKind::Gemm, 4096, 4096, 0, &[(1, 10.0), (64, 20.0)]);
    let t2 = table(TableKind::Gemm, 4096, 16384, 0, &[(1, 40.0), (64, 90.0)]);
    for order in [
        vec![far.clone(), t1.clone(), t2.clone()],
        vec![t1.clone(), far.clone(), t2.clone()],
        vec![t2.clone(), t1.clone(), far.clone()],
        vec![t1.clone(), t2.clone(), far.clone()],
    ] {
        let k3 = model(roofline_gemm(), order, HBM);
        let t = k3.gemm_device(8, 4096, 6000, 1, DType::Fp16);
        assert!(near(t, want), "{t} vs {want}");
    }
    // Three shapes at the same distance from (8192, 8192) (ln 2 + ln 2 each): the first two
    // listed are used, with equal weights.
    let k3 = model(
        roofline_gemm(),
        vec![t1.clone(), t2.clone(), far.clone()],
        HBM,
    );
    let r = |c: &KernelTable, rows: f64| {
        let (a, b) = (c.points[0].1, c.points[1].1);
        (a * 1e-6 * (b / a).powf(rows.ln() / 64f64.ln()) / md(8, c.n, c.k)).ln()
    };
    let want3 = md(8, 8192, 8192) * ((r(&t1, 8.0) + r(&t2, 8.0)) / 2.0).exp();
    let t = k3.gemm_device(8, 8192, 8192, 1, DType::Fp16);
    assert!(near(t, want3), "{t} vs {want3}");
    // One table only: its ratio alone.
    let km1 = model(
        roofline_gemm(),
        vec![table(
            TableKind::Gemm,
            4096,
            4096,
            0,
            &[(1, 10.0), (64, 20.0)],
        )],
        HBM,
    );
    let want = md(8, 8192, 4096) * (10e-6 * 2f64.sqrt() / md(8, 4096, 4096));
    assert!(near(km1.gemm_device(8, 8192, 4096, 1, DType::Fp16), want));
    // Bf16 has no tables: the model.
    let bf = km.gemm_device(8, 4096, 4096, 1, DType::Bf16);
    assert!(near(bf, km.gemm_model(8, 4096, 4096, 1, DType::Bf16)));
}

/// Memory-bound kernels: the fit is `floor + bytes / (hbm x efficiency)` (2 us + bytes at 0.5
/// TB/s); a kind with tables reads the table nearest in bytes per row (or the widest without a
/// row count) at the rows that move the bytes, log-log between rows; below one row the model,
/// no more than the first row's time; beyond the last row the model's growth.
#[test]
fn mem_device_reads_the_nearest_width_at_its_rows() {
    let tables = vec![
        table(TableKind::Norm, 0, 0, 1000, &[(1, 3.0), (100, 30.0)]),
        table(
            TableKind::Norm,
            0,
            0,
            4000,
            &[(1, 5.0), (100, 50.0), (400, 100.0)],
        ),
    ];
    let km = model(roofline_gemm(), tables, HBM);
    let mm = |b: f64| 2e-6 + b / 5e11;
    assert!(near(km.mem_model(ElemKind::Norm, 1e6), 4e-6));
    assert!(near(km.mem_device(ElemKind::Norm, 0, Some(1)), mm(0.0)));
    assert!(near(
        km.mem_device(ElemKind::Add, 10_000, Some(10)),
        km.mem_model(ElemKind::Add, 1e4)
    ));
    // 10 rows of 1000 bytes: 3 us x 10^(1/2).
    let t = km.mem_device(ElemKind::Norm, 10_000, Some(10));
    assert!(near(t, 3e-6 * 10f64.sqrt()), "{t}");
    // 2 rows of 4000 bytes, and the widest table without a row count.
    let t = km.mem_device(ElemKind::Norm, 8000, Some(2));
    assert!(near(t, 5e-6 * 2f64.sqrt()), "{t}");
    let t = km.mem_device(ElemKind::Norm, 10_000, None);
    assert!(near(t, 5e-6 * 2.5f64.sqrt()), "{t}");
    // A row count of 0 says nothing either: the widest table (listed second).
    let t = km.mem_device(ElemKind::Norm, 10_000, Some(0));
    assert!(near(t, 5e-6 * 2.5f64.sqrt()), "{t}");
    // 200 rows of 4000 bytes: between the table's second and third rows, 50 us x 2^(1/2).
    let t = km.mem_device(ElemKind::Norm, 800_000, Some(200));
    assert!(near(t, 50e-6 * 2f64.sqrt()), "{t}");
    // Half a row of the 1000-byte table: the model (2.001 us), below the first row's 3 us.
    let t = km.mem_device(ElemKind::Norm, 500, Some(1));
    assert!(near(t, mm(500.0)), "{t}");
    // 200 rows: the last row's 30 us grown as the model grows.
    let t = km.mem_device(ElemKind::Norm, 200_000, Some(200));
    assert!(near(t, 30e-6 * mm(2e5) / mm(1e5)), "{t}");
}

/// A ring all-reduce: `latency + 2 (p - 1) / p x bytes / bus bandwidth`; nothing on one rank or
/// for no bytes.
#[test]
fn allreduce_is_the_ring_closed_form() {
    let km = model(roofline_gemm(), vec![], HBM);
    assert!(near(
        km.allreduce(1_000_000_000, 4),
        5e-6 + 1.5 * 1e9 / 1e11
    ));
    assert_eq!(km.allreduce(1_000_000_000, 1), 0.0);
    assert_eq!(km.allreduce(0, 4), 0.0);
}

/// The model's attention of a batch is its fit's time for the batch's work, cut for the fit's
/// SM count; the model hands out the rates it was built with.
#[test]
fn attention_of_a_batch_is_the_fits_time_at_the_models_rates() {
    use kvplan_vocab::AttentionBatch;
    use kvplan_vocab::attention::Heads;
    let km = model(roofline_gemm(), vec![], HBM);
    assert_eq!(km.hbm(), HBM);
    assert_eq!(km.secs_per_flop(DType::Fp16), 1.0 / PEAK);
    let heads = Heads {
        q_heads: 32,
        kv_heads: 8,
        head_dim: 128,
        dtype: DType::Fp16,
        kv: kvplan_vocab::KvCacheDtype::Auto,
    };
    let batch = AttentionBatch::uniform(4, 1, 2048, false);
    let fit = km.section().attention;
    let w = AttentionWork::new(&batch, &heads, fit.sms);
    let t = km.attention_batch_device(&batch, &heads);
    assert!(t > 0.0);
    assert_eq!(t, fit.device_seconds(&w, 1.0 / PEAK, HBM));
}
