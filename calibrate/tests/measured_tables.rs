//! The measured kernel tables (Vidur's public profiling data, Llama-2-7B shapes, TP 1/2/4/8 on
//! A100-80GB SXM and H100 SXM): the presets' `[kernels]` reproduce them, and are what
//! `kvplan calibrate --from-table` fits from them.
//!
//! Run with `--nocapture` to see the error tables.

use std::path::PathBuf;

use kvplan_calibrate::table::{
    self, BUCKETS, Column, FitOptions, MeasuredTable, Sample, default_sms, fit_kernels,
    kernel_model, layer_errors, op_errors,
};
use kvplan_vocab::{CostModel, HardwareProfile};

const GPUS: [(&str, &str); 2] = [("a100", "a100-80g-sxm"), ("h100", "h100-sxm")];

fn csv_path(gpu: &str) -> PathBuf {
    let name = format!("{gpu}_Llama-2-7b-hf.csv");
    let beside = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/measured_kernels"
    ))
    .join(&name);
    assert!(
        beside.is_file(),
        "{} is missing (calibrate/data/measured_kernels/ is part of the repository)",
        beside.display()
    );
    beside
}

fn load(gpu: &str) -> MeasuredTable {
    MeasuredTable::read(&csv_path(gpu)).expect("the measured table")
}

/// Cells that miss the target (median <= 5%, p90 <= 15%), with the bound they do meet. The
/// measurements are too coarse or too spread for a kernel model keyed on bytes:
/// - norms and adds of 2-9 us are timed at 1 us resolution: one step is 11-50%, so the p90 of
///   small-token buckets is a timer step, not a model error;
/// - A100 RMSNorm at equal bytes differs by TP degree (at 1536 tokens TP 1 takes 36 us, TP 8
///   28 us; `input_layernorm` runs faster than `post_attention_layernorm` at 2048), which
///   one table per width cannot follow: median 6.5%.
const KNOWN_MISSES: &[(&str, Column, usize, f64, f64)] = &[
    ("a100-80g-sxm", Column::InputLayernorm, 1, 0.05, 0.20),
    ("a100-80g-sxm", Column::InputLayernorm, 2, 0.07, 0.16),
    (
        "a100-80g-sxm",
        Column::PostAttentionLayernorm,
        1,
        0.05,
        0.21,
    ),
    ("a100-80g-sxm", Column::Add, 2, 0.055, 0.15),
    ("h100-sxm", Column::Add, 0, 0.05, 0.26),
    ("h100-sxm", Column::Add, 1, 0.05, 0.26),
];

#[test]
fn preset_kernels_match_the_measured_tables() {
    let mut failures = Vec::new();
    for (gpu, preset) in GPUS {
        let t = load(gpu);
        let hw = HardwareProfile::preset(preset).unwrap();
        let cost = CostModel::new(&hw);
        let k = cost.kernels();
        println!(
            "== {preset} (preset) ==\n{}",
            table::error_report(k, &t.samples)
        );
        for (c, b, e) in op_errors(k, &t.samples) {
            let (max_median, max_p90) = KNOWN_MISSES
                .iter()
                .find(|m| m.0 == preset && m.1 == c && m.2 == b)
                .map_or((0.05, 0.15), |m| (m.3, m.4));
            if e.median > max_median || e.p90 > max_p90 {
                failures.push(format!(
                    "{preset} {} tokens {:?}: median {:.1}% p90 {:.1}%",
                    c.as_str(),
                    BUCKETS[b],
                    100.0 * e.median,
                    100.0 * e.p90
                ));
            }
        }
        for (tp, b, e) in layer_errors(k, &t.samples) {
            if b != 1 && e.median > 0.05 {
                failures.push(format!(
                    "{preset} layer TP {tp} tokens {:?}: median {:.1}%",
                    BUCKETS[b],
                    100.0 * e.median
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

fn fit_for(
    gpu: &str,
    preset: &str,
    samples: &[Sample],
) -> kvplan_vocab::kernel_model::KernelsSection {
    let hw = HardwareProfile::preset(preset).unwrap();
    let opts = FitOptions::from_base(
        &hw,
        default_sms(&hw.gpu.name).unwrap(),
        format!("test {gpu}"),
    );
    fit_kernels(samples, &hw, &opts).unwrap()
}

#[test]
fn held_out_tensor_parallel_degree() {
    for (gpu, preset) in GPUS {
        let t = load(gpu);
        let hw = HardwareProfile::preset(preset).unwrap();
        {
            let held = 4u32;
            let train: Vec<Sample> = t.samples.iter().filter(|s| s.tp != held).cloned().collect();
            let test: Vec<Sample> = t.samples.iter().filter(|s| s.tp == held).cloned().collect();
            let section = fit_for(gpu, preset, &train);
            let k = kernel_model(&section, &hw);
            println!(
                "== {preset}: fitted without TP {held}, evaluated on TP {held} ==\n{}",
                table::error_report(&k, &test)
            );
            let layer_ok = layer_errors(&k, &test)
                .iter()
                .all(|(_, b, e)| *b == 1 || e.median <= 0.10);
            assert!(
                layer_ok,
                "{preset}: per-layer median above 10% on held-out TP {held}"
            );
        }
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-300)
}

/// The presets' `[kernels]` (but attention and all-reduce, which the table does not measure)
/// are what `kvplan calibrate --from-table` fits from the CSVs.
#[test]
fn presets_are_reproducible_from_the_tables() {
    for (gpu, preset) in GPUS {
        let t = load(gpu);
        let hw = HardwareProfile::preset(preset).unwrap();
        let have = hw.kernels.clone().expect("the preset has [kernels]");
        let opts =
            FitOptions::from_base(&hw, default_sms(&hw.gpu.name).unwrap(), have.source.clone());
        let fit = fit_kernels(&t.samples, &hw, &opts).unwrap();
        let g = (&have.gemm, &fit.gemm);
        assert_eq!(g.0.sms, g.1.sms, "{preset}");
        for (name, a, b) in [
            ("floor_us", g.0.floor_us, g.1.floor_us),
            ("latency_us", g.0.latency_us, g.1.latency_us),
            (
                "memory_efficiency",
                g.0.memory_efficiency,
                g.1.memory_efficiency,
            ),
            (
                "compute_efficiency",
                g.0.compute_efficiency,
                g.1.compute_efficiency,
            ),
            (
                "tile_exponent",
                g.0.tile_exponent.unwrap(),
                g.1.tile_exponent.unwrap(),
            ),
            ("blend", g.0.blend.unwrap(), g.1.blend.unwrap()),
        ] {
            assert!(close(a, b), "{preset} gemm.{name}: preset {a}, fit {b}");
        }
        for kind in kvplan_vocab::schedule::ElemKind::ALL {
            let (a, b) = (have.mem(kind), fit.mem(kind));
            assert!(
                close(a.floor_us, b.floor_us) && close(a.efficiency, b.efficiency),
                "{preset} {}: preset {a:?}, fit {b:?}",
                kind.as_str()
            );
        }
        assert_eq!(have.tables.len(), fit.tables.len(), "{preset}");
        for (a, b) in have.tables.iter().zip(&fit.tables) {
            assert_eq!(
                (a.kind, a.n, a.k, a.width),
                (b.kind, b.n, b.k, b.width),
                "{preset}"
            );
            assert_eq!(a.points.len(), b.points.len());
            for (p, q) in a.points.iter().zip(&b.points) {
                assert!(p.0 == q.0 && close(p.1, q.1), "{preset} {a:?} vs {b:?}");
            }
        }
        assert!(have.source.contains("Vidur") && have.launch_us == 4.0);
    }
}

#[test]
fn malformed_tables_name_file_line_and_column() {
    let good = std::fs::read_to_string(csv_path("a100")).unwrap();
    let mut lines: Vec<String> = good.lines().take(4).map(String::from).collect();
    lines[2] = lines[2].replacen(",True,2,1,", ",True,abc,1,", 1);
    let e = MeasuredTable::parse(&lines.join("\n"), "t.csv")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("t.csv:3:") && e.contains("num_tokens"), "{e}");
    let mut lines: Vec<String> = good.lines().take(4).map(String::from).collect();
    lines[3] = lines[3].replacen(",True,4,1,", ",True,4,0,", 1);
    let e = MeasuredTable::parse(&lines.join("\n"), "t.csv")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("t.csv:4:") && e.contains("num_tensor_parallel_workers"),
        "{e}"
    );
    let e = MeasuredTable::parse("n_head,num_tokens\n1,2\n", "t.csv")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("t.csv:1:") && e.contains("missing column"),
        "{e}"
    );
    let header = good.lines().next().unwrap();
    let row = good
        .lines()
        .nth(1)
        .unwrap()
        .replacen(",0.003,", ",-0.003,", 1);
    let e = MeasuredTable::parse(&format!("{header}\n{row}\n"), "t.csv")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("t.csv:2:") && e.contains("emb_ms"), "{e}");
    // A tensor-parallel degree that does not divide the heads names the column and the fix.
    let row = good
        .lines()
        .nth(1)
        .unwrap()
        .replacen(",True,1,1,", ",True,1,3,", 1);
    let e = MeasuredTable::parse(&format!("{header}\n{row}\n"), "t.csv")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("t.csv:2: column num_tensor_parallel_workers")
            && e.contains("use a divisor of 32"),
        "{e}"
    );
    let _ = Column::ALL;
}

#[test]
fn the_simulator_costs_each_op_as_the_table_does() {
    // `CostModel::duration` (what the simulator runs) reads the same width-matched tables as
    // the error report: an op's rows give its row width. Only the launch interval separates
    // the two (no kernel is shorter than it on a stream).
    for (gpu, preset) in GPUS {
        let t = load(gpu);
        let cost = CostModel::new(&HardwareProfile::preset(preset).unwrap());
        let launch = cost.kernels().launch_s();
        for s in &t.samples {
            let device = table::device_seconds(cost.kernels(), s);
            let d = cost.duration(&s.op);
            assert!(
                (d - device.max(launch)).abs() <= 1e-12 * d,
                "{preset} line {}: {:?} costs {d} in the simulator, {device} in the report",
                s.line,
                s.column
            );
        }
    }
}

#[test]
fn crlf_tables_name_the_right_line() {
    // Vidur's CSVs end lines with CRLF, where the csv reader's own line numbers run one short.
    let good = std::fs::read_to_string(csv_path("a100")).unwrap();
    let mut lines: Vec<String> = good.lines().take(4).map(String::from).collect();
    lines[3] = lines[3].replacen(",True,4,1,", ",True,0,1,", 1);
    for eol in ["\n", "\r\n"] {
        let e = MeasuredTable::parse(&lines.join(eol), "t.csv")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.csv:4: column num_tokens"), "{eol:?}: {e}");
    }
}

/// The root mean square of `ln(predicted / measured)` over `v`, rounded to four decimals.
pub fn rms4(v: &[f64]) -> f64 {
    let rms = (v.iter().map(|x| x * x).sum::<f64>() / v.len() as f64).sqrt();
    (rms * 1e4).round() / 1e4
}

/// The error bands' token-wise cost spread (`kvplan_serve::bands::BUILTIN_DENSE_SIGMA`) is the
/// presets' per-layer residuals on both tables: when a kernel model or a table changes, the
/// bands follow on purpose (paste the printed figure).
#[test]
fn the_bands_dense_spread_is_the_tables() {
    let mut all = Vec::new();
    for (gpu, preset) in GPUS {
        let hw = HardwareProfile::preset(preset).unwrap();
        let r = table::layer_log_residuals(CostModel::new(&hw).kernels(), &load(gpu).samples);
        assert!(r.len() > 100, "{preset}: {} rows", r.len());
        println!("{preset}: {} rows, rms {}", r.len(), rms4(&r));
        all.extend(r);
    }
    let sigma = rms4(&all);
    println!("dense sigma {sigma}");
    assert!(sigma > 0.0, "a spread of zero would make zero-width bands");
    assert_eq!(
        sigma,
        kvplan_serve::bands::BUILTIN_DENSE_SIGMA,
        "set BUILTIN_DENSE_SIGMA to {sigma}"
    );
}
