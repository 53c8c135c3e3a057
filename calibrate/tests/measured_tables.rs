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
use kvplan_planner::{CostModel, HardwareProfile};

const GPUS: [(&str, &str); 2] = [("a100", "a100-80g-sxm"), ("h100", "h100-sxm")];

fn csv_path(gpu: &str) -> PathBuf {
    let name = format!("{gpu}_Llama-2-7b-hf.csv");
    let beside = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/validation/measured_kernels"
    ))
    .join(&name);
    if beside.is_file() {
        beside
    } else {
        PathBuf::from("/work/shared/validation/measured_kernels").join(name)
    }
}

fn load(gpu: &str) -> MeasuredTable {
    MeasuredTable::read(&csv_path(gpu)).expect("the measured table")
}

#[test]
fn preset_kernels_match_the_measured_tables() {
    let mut failures = Vec::new();
    for (gpu, preset) in GPUS {
        let t = load(gpu);
        let hw = HardwareProfile::preset(preset).unwrap();
        let cost = CostModel::new(&hw);
        let k = cost.kernels();
        println!("== {preset} (preset) ==\n{}", table::error_report(k, &t.samples));
        for (c, b, e) in op_errors(k, &t.samples) {
            if e.median > 0.05 || e.p90 > 0.15 {
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

fn fit_for(gpu: &str, preset: &str, samples: &[Sample]) -> kvplan_planner::kernel_model::KernelsSection {
    let hw = HardwareProfile::preset(preset).unwrap();
    let opts = FitOptions::from_base(&hw, default_sms(&hw.gpu.name).unwrap(), format!("test {gpu}"));
    fit_kernels(samples, &hw, &opts).unwrap()
}

#[test]
fn held_out_tensor_parallel_degree() {
    for (gpu, preset) in GPUS {
        let t = load(gpu);
        let hw = HardwareProfile::preset(preset).unwrap();
        for held in [4u32] {
            let train: Vec<Sample> = t.samples.iter().filter(|s| s.tp != held).cloned().collect();
            let test: Vec<Sample> = t.samples.iter().filter(|s| s.tp == held).cloned().collect();
            let section = fit_for(gpu, preset, &train);
            let k = kernel_model(&section, &hw);
            println!("== {preset}: fitted without TP {held}, evaluated on TP {held} ==\n{}", table::error_report(&k, &test));
            let _ = Column::ALL;
        }
    }
}
