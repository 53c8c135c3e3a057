//! The planner and simulator against published tables (`data/validation/published/`) and against
//! the CUDA executor measured on a GPU (`data/validation/h100_kvplan_exec_measured.csv`). Each
//! test states its tolerance and why.

use kvplan_planner::plan::{Options, Shape, Strategy, plan};
use kvplan_planner::report::RunReport;
use kvplan_planner::run::simulate_scenario;
use kvplan_planner::scenario::RawScenario;
use kvplan_vocab::schedule::HostMemory;
use kvplan_vocab::{CostModel, HardwareProfile, ModelSpec};

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn table(name: &str) -> Vec<csv::StringRecord> {
    let path = root().join("data/validation/published").join(name);
    let mut r = csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .from_path(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    r.records().map(Result::unwrap).collect()
}

fn num(r: &csv::StringRecord, i: usize) -> f64 {
    r[i].parse()
        .unwrap_or_else(|_| panic!("column {i} of {r:?}"))
}

const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// KVPR Table 1: one layer's KV cache (fp16, batch 32, sequence 1024) and its PCIe time at
/// 32 GiB/s. Tolerance 1%: the table rounds to 3 significant digits (15.6 for 15.625 ms).
#[test]
fn kvpr_table1_kv_size_and_pcie_time() {
    // The table's link: 32 GiB/s, latency negligible next to 15 ms (set to 0 here).
    let hw = HardwareProfile::from_toml_str(
        &format!(
            "base = \"a100-40g-pcie4\"\n[link]\nh2d_pinned_gbps = {}\nh2d_latency_us = 0.0\n",
            32.0 * GIB / 1e9
        ),
        "table1",
    )
    .unwrap();
    let cost = CostModel::new(&hw);
    let rows = table("kvpr_table1_pcie.csv");
    assert_eq!(rows.len(), 3);
    for r in rows {
        let m = ModelSpec::preset(&r[0]).unwrap();
        assert_eq!(f64::from(m.hidden), num(&r, 1));
        let bytes = 32 * 1024 * m.kv_bytes_per_token_layer();
        let mib = bytes as f64 / (1024.0 * 1024.0);
        assert!(
            (mib - num(&r, 2)).abs() / num(&r, 2) <= 0.01,
            "{}: {mib} MiB",
            &r[0]
        );
        let ms = cost.h2d(HostMemory::Pinned).time(bytes) * 1e3;
        assert!(
            (ms - num(&r, 3)).abs() / num(&r, 3) <= 0.01,
            "{}: {ms} ms vs {}",
            &r[0],
            &r[3]
        );
    }
}

/// KVPR Table 3 `cache_gb`: the KV cache of batch 64 at prompt + gen tokens, as the offload
/// plan holds it on the host. Tolerance 2%: the table gives one decimal (5.0 for 5.0 GiB).
#[test]
fn kvpr_table3_cache_size() {
    let m = ModelSpec::preset("opt-6.7b").unwrap();
    let hw = HardwareProfile::preset("a100-40g-pcie4").unwrap();
    let cost = CostModel::new(&hw);
    let rows = table("kvpr_table3_opt6.7b_a100.csv");
    assert_eq!(rows.len(), 12);
    for r in rows {
        let shape = Shape {
            batch: num(&r, 1) as u32,
            gpu_batches: 1,
            prompt: num(&r, 2) as u32,
            gen_len: num(&r, 3) as u32,
        };
        let p = plan(
            &m,
            &hw,
            &cost,
            &Shape {
                gen_len: 2,
                ..shape
            },
            Strategy::FULL_TRANSFER,
            &Options::default(),
        )
        .unwrap();
        // Sized for the full generation, not the 2 steps simulated here.
        let kv = kvplan_planner::plan::memory_plan(
            &m,
            &shape,
            Strategy::FULL_TRANSFER,
            p.weights_on_gpu,
            false,
        )
        .host_item(kvplan_vocab::memory::MemoryKind::KvCache) as f64
            / GIB;
        let published = num(&r, 4);
        assert!(
            (kv - published).abs() / published <= 0.02,
            "{:?}: {kv} GiB vs {published}",
            &r
        );
    }
}

/// KVPR Table 3's decode latencies of `method` (`kvpr`, `accelerate`) by (prompt, gen), in
/// file order; every row has batch 64.
fn table3(method: &str) -> Vec<(u32, u32, f64)> {
    table("kvpr_table3_opt6.7b_a100.csv")
        .iter()
        .filter(|r| &r[0] == method)
        .map(|r| {
            assert_eq!(num(r, 1), 64.0);
            (num(r, 2) as u32, num(r, 3) as u32, num(r, 6))
        })
        .collect()
}

/// Simulated decode latency of `strategy` for a Table 3 row, on a100-40g-pcie4 with
/// `implementation` (a scenario's field; `None`: no host thread, everything pinned).
fn table3_latency(implementation: Option<&str>, strategy: &str, prompt: u32, gen_len: u32) -> f64 {
    let mut raw = RawScenario {
        model: Some("opt-6.7b".into()),
        hardware: Some("a100-40g-pcie4".into()),
        strategy: Some(strategy.into()),
        implementation: implementation.map(str::to_string),
        ..RawScenario::default()
    };
    raw.workload.batch = Some(64);
    raw.workload.prompt = Some(i64::from(prompt));
    raw.workload.gen_len = Some(i64::from(gen_len));
    let scenario = raw.resolve().unwrap();
    let cost = scenario.cost_model();
    let pl = scenario.plan_with(&cost, scenario.strategy).unwrap();
    assert!(pl.weights_on_gpu, "Table 3 keeps weights on the GPU");
    let tl = kvplan_sim::simulate(&pl.schedule, &cost).unwrap();
    RunReport::new(&pl, &tl).decode_latency_s
}

/// KVPR Table 3: the KVPR / Accelerate (full transfer) decode-latency ratio on a100-40g-pcie4,
/// simulated with the implementation profile of the paper's stack (`eager-hf`: Hugging Face
/// Transformers 4.46.1 in eager PyTorch, the KV cache in pageable memory, the recomputed
/// activations and the weights pinned; its host costs measured, nothing fitted to this table).
///
/// The mechanism: a pageable KV copy stages through the driver's bounce buffer and holds the host
/// thread until it ends, so the kernels after it are launched only then; the transfer no longer
/// hides behind the recomputation, and KVPR gains less than on an ideal pinned pipeline. Without
/// the host thread (no implementation, everything pinned) the ratio is ~0.53 on every row; with
/// the host costs but everything pinned (`flexgen`) still ~0.54: the memory kind, not the launch
/// cost, is what the published runs show.
///
/// Tolerances, and why:
/// - the mean within 0.10 of the published 0.748 (seen: 0.760; 0.772 when `eager-hf` launched
///   one kernel per module at 21.2 us, before its launches per module);
/// - each row within 0.15 of its published ratio: the rows are single end-to-end runs, and their
///   Accelerate baselines scatter (prompt 256 / gen 32 ran slower than prompt 512 / gen 32), so a
///   row is ~0.1 off the table's own trend (seen: 0.00-0.11);
/// - the longer-context rows keep their order: within each generation length the ratio rises
///   with the prompt, as the published gen-128 rows do (and the published gen-32 rows' largest
///   prompt has the largest ratio; their 128 / 256 pair swaps by 0.03, within that scatter);
/// - every row a gain (ratio below 1);
/// - the same profile does not move the Accelerate rows away from the table: their mean
///   |log(simulated / published)| is no larger than without it (seen: 0.27 against 0.44; the
///   prompt-512 rows go from 8-9% fast to 19-21% slow, the others come closer). The published
///   gen-128 baselines grow by 0.80 ms per step for each extra context token at batch 64, which
///   is 33.5 MB of K and V moved at 42 GB/s, above PCIe 4.0 x16: those runs did not move the
///   whole cache over the link each step, so no full-transfer model follows their slope
///   (docs/DESIGN.md, KVPR).
#[test]
fn kvpr_table3_latency_ratio() {
    let kvpr = table3("kvpr");
    let acc = table3("accelerate");
    assert_eq!((kvpr.len(), acc.len()), (6, 6));
    let mut published = Vec::new();
    let mut simulated = Vec::new();
    let (mut acc_err_hf, mut acc_err_none) = (0.0, 0.0);
    for (&(p, g, k), &(pa, ga, a)) in kvpr.iter().zip(&acc) {
        assert_eq!((p, g), (pa, ga), "the methods' rows pair up");
        let full = table3_latency(Some("eager-hf"), "full-transfer", p, g);
        let ratio = table3_latency(Some("eager-hf"), "kvpr", p, g) / full;
        let full_none = table3_latency(None, "full-transfer", p, g);
        acc_err_hf += (full / a).ln().abs() / 6.0;
        acc_err_none += (full_none / a).ln().abs() / 6.0;
        let published_ratio = k / a;
        println!(
            "table 3 prompt={p} gen={g}: kvpr/accelerate simulated {ratio:.3}, published \
             {published_ratio:.3}; accelerate simulated {full:.2} s (without the host {full_none:.2} \
             s), published {a:.2} s"
        );
        assert!(ratio > 0.0 && ratio < 1.0, "p={p} g={g}: ratio {ratio}");
        assert!(
            (ratio - published_ratio).abs() <= 0.15,
            "p={p} g={g}: simulated {ratio:.3} vs published {published_ratio:.3}"
        );
        published.push(published_ratio);
        simulated.push(ratio);
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let (pm, sm) = (mean(&published), mean(&simulated));
    assert!((pm - 0.748).abs() < 0.001, "published mean {pm}");
    println!(
        "table 3 mean: simulated {sm:.3}, published {pm:.3}; accelerate mean |log error| \
         {acc_err_hf:.3} (without the host {acc_err_none:.3})"
    );
    assert!(
        (sm - pm).abs() <= 0.10,
        "simulated mean {sm} vs published {pm} (rows {simulated:?})"
    );
    // Rows in file order: prompts 128, 256, 512 at gen 32 and at gen 128.
    for gen_rows in [[0, 2, 4], [1, 3, 5]] {
        let r = gen_rows.map(|i| simulated[i]);
        assert!(
            r[0] < r[1] && r[1] < r[2],
            "ratios rise with the prompt: {r:?}"
        );
    }
    assert!(
        acc_err_hf <= acc_err_none,
        "accelerate rows moved away: {acc_err_hf} vs {acc_err_none}"
    );
}

/// Without an implementation (no host thread, every tensor pinned) Table 3 stays what it was
/// (~0.53 on every row): an ideal pipeline, faster than the paper's stack. A sanity band only.
#[test]
fn kvpr_table3_ratio_without_the_host_thread() {
    let mut simulated = Vec::new();
    for (p, g, _) in table3("kvpr") {
        let r = table3_latency(None, "kvpr", p, g) / table3_latency(None, "full-transfer", p, g);
        assert!(r > 0.0 && r < 1.0, "p={p} g={g}: ratio {r}");
        simulated.push(r);
    }
    let mean = simulated.iter().sum::<f64>() / simulated.len() as f64;
    assert!((0.50..=0.60).contains(&mean), "mean {mean}: {simulated:?}");
}

/// The simulator against the CUDA executor on a real GPU: `scripts/gpu-check.sh` calibrated a
/// profile on the GPU and measured nine plans with it (`data/validation/<gpu>_kvplan_exec_measured.csv`:
/// KVPR at batch 32 and 64 over prompts 256-2048, plain offload, all-on-GPU, HeadInfer at 8K, a
/// one-GPU Runahead prefill). Each case, planned and simulated again from its scenario fields with
/// that profile, must stay within 12% of the measured end-to-end time and within 8% on the mean.
/// The band is the hardware's, not the model's: the PCIe link's per-step jitter reaches 26% on
/// single steps, and like cases moved by ~2% end to end between two runs of one day. A change to
/// the cost model, the planners or the engine that loses the agreement with the hardware fails
/// here, without a GPU. Returns each case's signed error.
fn executor_agreement(profile: &str, measured: &str) -> Vec<f64> {
    executor_agreement_with(profile, measured, None)
}

/// [`executor_agreement`] with the host thread of `implementation` modelled.
fn executor_agreement_with(
    profile: &str,
    measured: &str,
    implementation: Option<&str>,
) -> Vec<f64> {
    let profile = root().join(profile);
    let mut r = csv::ReaderBuilder::new()
        .comment(Some(b'#'))
        .from_path(root().join(measured))
        .unwrap();
    let field = |row: &csv::StringRecord, i: usize| -> Option<i64> {
        (!row[i].is_empty()).then(|| row[i].parse().unwrap())
    };
    let mut errors = Vec::new();
    for row in r.records() {
        let row = row.unwrap();
        let mut raw = RawScenario {
            model: Some(row[2].to_string()),
            hardware: Some(profile.display().to_string()),
            strategy: Some(row[1].to_string()),
            implementation: implementation.map(str::to_string),
            ..RawScenario::default()
        };
        raw.workload.batch = field(&row, 3);
        raw.workload.prompt = field(&row, 4);
        raw.workload.gen_len = field(&row, 5);
        raw.runahead.devices = field(&row, 6);
        let scenario = raw.resolve().unwrap_or_else(|e| panic!("{}: {e}", &row[0]));
        let simulated = simulate_scenario(&scenario).unwrap().report.total_latency_s;
        let (case, measured) = (&row[0], num(&row, 7));
        let e = simulated / measured - 1.0;
        println!(
            "{case}: simulated {simulated:.3} s, measured {measured:.3} s ({:+.1}%)",
            e * 100.0
        );
        assert!(
            e.abs() <= 0.12,
            "{case}: simulated {simulated} s vs measured {measured} s"
        );
        errors.push(e);
    }
    assert_eq!(errors.len(), 9, "every measured case is simulated");
    let mean = errors.iter().map(|e| e.abs()).sum::<f64>() / errors.len() as f64;
    println!("mean |error| {:.1}%", mean * 100.0);
    assert!(mean <= 0.08, "mean |error| {mean}");
    errors
}

/// NVIDIA H100 80GB HBM3, 2026-11-25 (seen: 3.4-9.5% per case, 5.8% mean).
#[test]
fn calibrated_h100_profile_matches_the_executor_measured_on_the_gpu() {
    executor_agreement(
        "calibrate/profiles/h100-sxm-kvplan-exec.toml",
        "data/validation/h100_kvplan_exec_measured.csv",
    );
}

/// NVIDIA H200, 2026-11-26, a second GPU and a second calibration (seen: 1.9-5.5% per case, 3.8%
/// mean). The simulator is fast on every offload and all-on-GPU plan on both GPUs and slow on
/// HeadInfer and Runahead's prefill: the sign of each case must agree between the two GPUs, so a
/// model change that flips one GPU's error while fixing the other's is seen.
#[test]
fn calibrated_h200_profile_matches_the_executor_measured_on_the_gpu() {
    let h200 = executor_agreement(
        "calibrate/profiles/h200-kvplan-exec.toml",
        "data/validation/h200_kvplan_exec_measured.csv",
    );
    let h100 = executor_agreement(
        "calibrate/profiles/h100-sxm-kvplan-exec.toml",
        "data/validation/h100_kvplan_exec_measured.csv",
    );
    for (i, (a, b)) in h200.iter().zip(&h100).enumerate() {
        assert_eq!(
            a.signum(),
            b.signum(),
            "case {i}: H200 {a:+.3} vs H100 {b:+.3}"
        );
    }
}

/// The executor's own host thread (`kvplan-exec`: its calibrated launch, raw copy issues, pinned
/// buffers) on the nine measured H100 cases: the bands hold and each case moves by under 0.5%
/// (seen: 0.1% at most): the executor's kernels are long next to its 5.6 us launch, so its host
/// hides, as the measurements say.
#[test]
fn the_executors_host_thread_hides_behind_its_kernels() {
    let profile = "calibrate/profiles/h100-sxm-kvplan-exec.toml";
    let measured = "data/validation/h100_kvplan_exec_measured.csv";
    let plain = executor_agreement(profile, measured);
    let hosted = executor_agreement_with(profile, measured, Some("kvplan-exec"));
    for (i, (a, b)) in plain.iter().zip(&hosted).enumerate() {
        assert!(
            ((1.0 + b) / (1.0 + a) - 1.0).abs() < 0.005,
            "case {i}: {a} vs {b}"
        );
    }
}

/// Eager Hugging Face OPT-6.7B decode steps measured on an H200 (`hf_decode_h200.csv`: batch
/// 1-64, prompt 128, KV on the GPU: 13.1-15.8 ms of wall for 5.2-10.3 ms of GPU work, 829
/// kernels a step) against a gpu-only plan on the calibrated H200 profile with the `eager-hf`
/// host. The gap was the kernel count: kvplan models 324 ops a step, Transformers launches 829
/// kernels for them, so one launch per op (21.2 us, a `linear` module's dispatch) gave 7.0 ms,
/// 47-56% fast. With the profile's launches per module (829 / 324 = 2.56, at the rows' mean 17.9
/// us of host time per kernel) the step is host-bound and flat in batch as measured: within 15%
/// of every row (seen: +14.2% at batch 1, -5.4%, -5.0% at 4 and 16, -2.5% at 64).
///
/// Where it stops holding: the per-kernel cost and the kernel count are this table's (the
/// batch-1 row is the fastest, so it is the worst); at batch 64 Transformers launches 669
/// kernels, not 829, while the simulated step keeps 829's host time and its GPU time falls
/// short (7.5 ms simulated, 10.3 ms busy measured), so the agreement there is the two errors
/// cancelling; and the 2.56 kernels per module are OPT's (an eager Llama's RMSNorm and rotary
/// embedding launch more per module).
#[test]
fn eager_hf_decode_step_on_the_h200() {
    let text = std::fs::read_to_string(root().join("calibrate/data/host_costs/hf_decode_h200.csv"))
        .unwrap();
    let mut steps = Vec::new();
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("batch"))
    {
        let f: Vec<f64> = line.split(',').map(|x| x.parse().unwrap()).collect();
        let (batch, wall, busy) = (f[0] as i64, f[1], f[2]);
        let step = |implementation: Option<&str>| {
            let mut raw = RawScenario {
                model: Some("opt-6.7b".into()),
                hardware: Some(
                    root()
                        .join("calibrate/profiles/h200-kvplan-exec.toml")
                        .display()
                        .to_string(),
                ),
                strategy: Some("gpu-only".into()),
                implementation: implementation.map(str::to_string),
                ..RawScenario::default()
            };
            raw.workload.batch = Some(batch);
            raw.workload.prompt = Some(128);
            raw.workload.gen_len = Some(9);
            let scenario = raw.resolve().unwrap();
            let cost = scenario.cost_model();
            let pl = scenario.plan_with(&cost, scenario.strategy).unwrap();
            let tl = kvplan_sim::simulate(&pl.schedule, &cost).unwrap();
            RunReport::new(&pl, &tl).decode_latency_s / 8.0
        };
        let (hosted, device) = (step(Some("eager-hf")), step(None));
        let err = hosted / wall - 1.0;
        println!(
            "batch {batch}: eager-hf {:.2} ms (GPU alone {:.2} ms); measured {:.2} ms wall, {:.2} \
             ms GPU busy ({:+.1}%)",
            hosted * 1e3,
            device * 1e3,
            wall * 1e3,
            busy * 1e3,
            100.0 * err
        );
        assert!(err.abs() <= 0.15, "batch {batch}: {hosted} s vs {wall} s");
        // Host-bound as measured: the wall well above the GPU's work.
        assert!(hosted > 1.4 * device && wall > 1.4 * busy, "batch {batch}");
        steps.push(hosted);
    }
    assert_eq!(steps.len(), 4);
    // Flat in batch (measured: 13.1-15.8 ms).
    let (lo, hi) = steps
        .iter()
        .fold((f64::INFINITY, 0.0f64), |(a, b), &t| (a.min(t), b.max(t)));
    assert!(hi / lo < 1.05, "{steps:?}");
}
