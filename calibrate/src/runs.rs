//! Fitting a profile to measured serving runs (the from-runs option of `kvplan calibrate`).
//!
//! The serving simulator's time per step is the kernel model's GPU time, the host's time
//! (overlapped by asynchronous scheduling) and, for a client, the frontend's per-request
//! latency. Measured runs pin the figures the kernel tables cannot: how fast the batched decode
//! attention reads the KV cache on this GPU (`[kernels.attention] decode_efficiency`, and the
//! per-thread-block time `unit_us` where the section has the wave model), how long the
//! engine's host side takes per step (a common factor on `[serving]`'s host costs), and the
//! frontend latency (`serving.frontend_us`). They are fitted by a deterministic Nelder–Mead
//! search on the squared log errors of each served stage's TPOT, E2E mean and (half weight)
//! TTFT mean; overloaded stages are reported, not fitted (their latencies lack the requests
//! that failed). Each fitted figure is clamped to a physical range.

use kvplan_serve::runs::{StageComparison, StageRun};
use kvplan_vocab::HardwareProfile;
use kvplan_vocab::cost::derived_kernels;

use crate::error::Error;
use crate::fit::nelder_mead;

/// What a fit found, and the errors before and after.
#[derive(Debug, Clone)]
pub struct RunsFit {
    /// The fitted profile (the base with the three figures replaced).
    pub profile: HardwareProfile,
    /// Fitted `[kernels.attention] decode_efficiency`.
    pub decode_efficiency: f64,
    /// Fitted `[kernels.attention] unit_us` (`None`: the section has no wave model).
    pub unit_us: Option<f64>,
    /// Fitted factor on the base's host costs.
    pub host_scale: f64,
    /// Fitted `serving.frontend_us`.
    pub frontend_us: f64,
    /// Every stage replayed on the base profile.
    pub before: Vec<StageComparison>,
    /// Every stage replayed on the fitted profile.
    pub after: Vec<StageComparison>,
    /// Stages left out, with the reason.
    pub skipped: Vec<(String, String)>,
    /// What the fit cannot vouch for: a figure that ended at a bound of its range, errors left
    /// worse than before.
    pub warnings: Vec<String>,
}

/// The hardware preset the stages' GPU names share (`None`: several GPUs, or none with a
/// preset): the profile a fit starts from when none is named.
pub fn stages_base(stages: &[StageRun]) -> Option<&'static str> {
    let mut names: Vec<&'static str> = stages
        .iter()
        .filter_map(|s| kvplan_serve::runs::hardware_preset(&s.hardware))
        .collect();
    names.dedup();
    match names.as_slice() {
        [one] => Some(one),
        _ => None,
    }
}

impl RunsFit {
    /// The fitted figures as a profile file over `base_name`, named `name`; `command` (the
    /// command line that fits, as the caller words it) heads the header comment.
    pub fn profile_toml(&self, command: &str, base_name: &str, name: &str) -> String {
        let s = &self.profile.serving;
        format!(
            "# Fitted by `{command}`: the decode \
             attention's\n# KV bandwidth, the engine's host time and the frontend latency, to the \
             served stages of\n# real runs (see the error table it printed).\nbase = \"{base_name}\"\n\
             name = \"{name}\"\n\n[kernels.attention]\ndecode_efficiency = {:.4}\n{}\n[serving]\n\
             source = \"{}\"\nschedule_us = {:.2}\nschedule_per_seq_us = {:.3}\n\
             schedule_per_token_us = {:.4}\nupdate_us = {:.2}\nupdate_per_seq_us = {:.3}\n\
             graph_launch_us = {:.2}\npiecewise_layer_us = {:.3}\nfrontend_us = {:.1}\n",
            self.decode_efficiency,
            self.unit_us
                .map_or(String::new(), |u| format!("unit_us = {u:.4}\n")),
            s.source.replace('"', "'"),
            s.schedule_us,
            s.schedule_per_seq_us,
            s.schedule_per_token_us,
            s.update_us,
            s.update_per_seq_us,
            s.graph_launch_us,
            s.piecewise_layer_us,
            s.frontend_us,
        )
    }
}

/// The figures a fit sets.
#[derive(Debug, Clone, Copy)]
struct Params {
    decode_efficiency: f64,
    unit_us: Option<f64>,
    host_scale: f64,
    frontend_us: f64,
}

fn apply(base: &HardwareProfile, p: Params) -> HardwareProfile {
    let mut hw = base.clone();
    let mut k = hw.kernels.clone().unwrap_or_else(|| derived_kernels(&hw));
    k.attention.decode_efficiency = p.decode_efficiency;
    if p.unit_us.is_some() {
        k.attention.unit_us = p.unit_us;
    }
    hw.kernels = Some(k);
    let s = &mut hw.serving;
    for v in [
        &mut s.schedule_us,
        &mut s.schedule_per_seq_us,
        &mut s.schedule_per_token_us,
        &mut s.update_us,
        &mut s.update_per_seq_us,
        &mut s.graph_launch_us,
        &mut s.piecewise_layer_us,
    ] {
        *v *= p.host_scale;
    }
    s.frontend_us = p.frontend_us;
    hw
}

/// A stage resolved for replay on any profile.
struct Prepared {
    stage: StageRun,
    scenario: kvplan_serve::scenario::ServeScenario,
    requests: Vec<kvplan_workloads::Request>,
}

fn prepare(stage: &StageRun, base_name: &str, cap: Option<u64>) -> Result<Prepared, String> {
    let raw = stage
        .scenario(None, Some(base_name))
        .map_err(|e| e.to_string())?;
    let mut raw = raw;
    if let Some(n) = cap {
        let full = raw.workload.requests.unwrap_or(n);
        raw.workload.requests = Some(full.min(n));
    }
    let scenario = raw.resolve().map_err(|e| e.to_string())?;
    let requests = scenario.requests().map_err(|e| e.to_string())?;
    Ok(Prepared {
        stage: stage.clone(),
        scenario,
        requests,
    })
}

fn replay(p: &Prepared, hw: &HardwareProfile) -> Result<StageComparison, Error> {
    let out = kvplan_serve::simulate(&p.scenario.model, hw, &p.scenario.config, &p.requests)
        .map_err(|e| Error::Fit {
            what: p.stage.name.clone(),
            why: e.to_string(),
        })?;
    Ok(StageComparison::new(&p.stage, &out))
}

/// The loss of one stage: squared log errors of TPOT, E2E mean and half of TTFT mean.
fn loss(c: &StageComparison) -> f64 {
    let l = |e: f64| {
        let r = (1.0 + e).max(1e-6).ln();
        r * r
    };
    l(c.tpot_error) + l(c.e2e_error) + 0.5 * l(c.ttft_error)
}

/// Fits `base` (named `base_name`, a preset or profile path the stages resolve it by) to the
/// stages whose GPU is `base`'s (others are skipped, named); a row naming a model or GPU kvplan
/// does not know is refused ([`kvplan_serve::runs::check_stage_names`]). At most `fit_requests` requests of
/// each stage are replayed while searching (the figures settle within a few hundred seconds of
/// load); the before/after reports replay every request.
pub fn fit_stages(
    stages: &[StageRun],
    base: &HardwareProfile,
    base_name: &str,
    fit_requests: u64,
) -> Result<RunsFit, Error> {
    fit_stages_with(stages, base, base_name, fit_requests, FIT_ITERATIONS)
}

/// Nelder–Mead iterations per restart of [`fit_stages`].
pub const FIT_ITERATIONS: usize = 150;

/// [`fit_stages`] with the Nelder–Mead iteration budget per restart.
pub fn fit_stages_with(
    stages: &[StageRun],
    base: &HardwareProfile,
    base_name: &str,
    fit_requests: u64,
    iterations: usize,
) -> Result<RunsFit, Error> {
    fit_stages_progress(
        stages,
        base,
        base_name,
        fit_requests,
        iterations,
        FITTED_BY,
        &kvplan_vocab::Silent,
    )
}

/// The ranges the fitted figures are held to: `(name, low, high)`.
const RANGES: [(&str, f64, f64); 4] = [
    ("decode_efficiency", 0.05, 1.0),
    ("host_scale", 0.05, 20.0),
    ("frontend_us", 10.0, 1e6),
    ("unit_us", 0.05, 50.0),
];

/// What a fit cannot vouch for: each figure within 1% of a bound of its range (the search
/// pressed against the range: the figure stands in for something the model leaves out), and
/// a mean loss over the stages no better than the base's.
pub fn fit_warnings(values: [Option<f64>; 4], loss_before: f64, loss_after: f64) -> Vec<String> {
    let mut out = Vec::new();
    for ((name, lo, hi), v) in RANGES.iter().zip(values) {
        let Some(v) = v else { continue };
        for (bound, side) in [(*lo, "lower"), (*hi, "upper")] {
            if (v - bound).abs() <= 0.01 * bound {
                out.push(format!(
                    "{name} ended at {} next to the {side} bound of its range ({lo} to {hi}): the figure stands in for something the model leaves out",
                    (v * 1e4).round() / 1e4
                ));
            }
        }
    }
    if loss_after >= loss_before {
        out.push(format!(
            "the fit leaves the stages' errors no better than the base profile's (mean loss {loss_after:.4} against {loss_before:.4}): keep the base"
        ));
    }
    out
}

/// Who fitted, in the fitted profile's `serving.source`, where the caller does not say.
const FITTED_BY: &str = "`kvplan calibrate`";

/// [`fit_stages_with`], telling `progress` how many of the search's evaluations (each replays
/// every served stage) have run; `fitted_by` (the command, as the caller words it) opens the
/// fitted profile's `serving.source`.
pub fn fit_stages_progress(
    stages: &[StageRun],
    base: &HardwareProfile,
    base_name: &str,
    fit_requests: u64,
    iterations: usize,
    fitted_by: &str,
    progress: &dyn kvplan_vocab::Progress,
) -> Result<RunsFit, Error> {
    // A row naming a model or GPU kvplan does not know is refused, not skipped (the fit has no
    // model or GPU to put in its place).
    kvplan_serve::runs::check_stage_names(stages, None, None)
        .map_err(|e| Error::Input(e.to_string()))?;
    let (fit_set, full_set, skipped) = prepare_stages(stages, base, base_name, fit_requests);
    let served: Vec<&Prepared> = fit_set.iter().filter(|p| !p.stage.overloaded).collect();
    if served.is_empty() {
        return Err(Error::Fit {
            what: "serving runs".into(),
            why: format!(
                "no served (not overloaded) stage of a supported model on {}",
                base.name
            ),
        });
    }
    let params = search(base, &served, iterations, progress);
    let fitted = apply(base, params);
    let mut before = Vec::new();
    let mut after = Vec::new();
    for p in &full_set {
        before.push(replay(p, base)?);
        after.push(replay(p, &fitted)?);
    }
    let mut profile = fitted;
    profile.serving.source = format!(
        "fitted by {fitted_by} to {} served stage(s) of real runs ({})",
        served.len(),
        served
            .iter()
            .map(|p| p.stage.name.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    );
    let mean = |v: &[StageComparison]| v.iter().map(loss).sum::<f64>() / v.len().max(1) as f64;
    let warnings = fit_warnings(
        [
            Some(params.decode_efficiency),
            Some(params.host_scale),
            Some(params.frontend_us),
            params.unit_us,
        ],
        mean(&before),
        mean(&after),
    );
    Ok(RunsFit {
        warnings,
        decode_efficiency: params.decode_efficiency,
        unit_us: params.unit_us,
        host_scale: params.host_scale,
        frontend_us: params.frontend_us,
        profile,
        before,
        after,
        skipped,
    })
}

/// The stages to fit on `base`'s GPU, each prepared twice: replaying at most `fit_requests`
/// requests (for the search) and whole (for the report); and the stages skipped, with why.
fn prepare_stages(
    stages: &[StageRun],
    base: &HardwareProfile,
    base_name: &str,
    fit_requests: u64,
) -> (Vec<Prepared>, Vec<Prepared>, Vec<(String, String)>) {
    let mut skipped = Vec::new();
    let mut fit_set = Vec::new();
    let mut full_set = Vec::new();
    for st in stages {
        // The stage's GPU must be the profile's (the same device name as its preset's).
        let same_gpu = kvplan_serve::runs::hardware_preset(&st.hardware)
            .and_then(|h| HardwareProfile::preset(h).ok())
            .is_some_and(|h| h.gpu.name == base.gpu.name);
        if !same_gpu {
            skipped.push((
                st.name.clone(),
                format!(
                    "runs on {}, not on {} ({})",
                    st.hardware, base.name, base.gpu.name
                ),
            ));
            continue;
        }
        match (
            prepare(st, base_name, Some(fit_requests)),
            prepare(st, base_name, None),
        ) {
            (Ok(a), Ok(b)) => {
                fit_set.push(a);
                full_set.push(b);
            }
            (Err(e), _) | (_, Err(e)) => {
                // The first clause of a long message.
                let short = e.split("; ").next().unwrap_or(&e).to_string();
                skipped.push((st.name.clone(), short));
            }
        }
    }
    (fit_set, full_set, skipped)
}

/// The figures that fit the `served` stages best, by a Nelder–Mead search from `base`'s
/// (`iterations` per restart), telling `progress` of each evaluation.
fn search(
    base: &HardwareProfile,
    served: &[&Prepared],
    iterations: usize,
    progress: &dyn kvplan_vocab::Progress,
) -> Params {
    let attention = base
        .kernels
        .clone()
        .unwrap_or_else(|| derived_kernels(base))
        .attention;
    let wave = attention.sms.is_some() && attention.unit_us.is_some();
    let r = |i: usize| (RANGES[i].1, RANGES[i].2);
    let to_params = |x: &[f64]| Params {
        decode_efficiency: (1.0 / (1.0 + (-x[0]).exp())).clamp(r(0).0, r(0).1),
        host_scale: x[1].exp().clamp(r(1).0, r(1).1),
        frontend_us: x[2].exp().clamp(r(2).0, r(2).1),
        unit_us: wave.then(|| x[3].exp().clamp(r(3).0, r(3).1)),
    };
    let logit = |p: f64| (p / (1.0 - p)).ln();
    let mut x0 = vec![
        logit(attention.decode_efficiency.clamp(0.06, 0.99)),
        0.0,
        base.serving.frontend_us.max(100.0).ln(),
    ];
    if wave {
        x0.push(attention.unit_us.unwrap_or(1.0).max(0.1).ln());
    }
    // Nelder–Mead evaluates about dims + 2 points per iteration and restarts once.
    let budget = (iterations * (x0.len() + 2) * 2) as u64;
    progress.start(budget, "fit evaluations (each replays the served stages)");
    let evaluations = std::cell::Cell::new(0u64);
    let objective = |x: &[f64]| -> f64 {
        evaluations.set(evaluations.get() + 1);
        progress.set(evaluations.get().min(budget));
        let hw = apply(base, to_params(x));
        let mut total = 0.0;
        for p in served {
            match replay(p, &hw) {
                Ok(c) => total += loss(&c),
                Err(_) => return f64::INFINITY,
            }
        }
        total / served.len() as f64
    };
    let (x, _) = nelder_mead(&objective, &x0, 0.4, iterations, 1);
    to_params(&x)
}

#[cfg(test)]
mod warning_tests {
    use super::fit_warnings;

    /// A figure within 1% of a bound of its range is named; one inside is not; a fit no better
    /// than the base says to keep the base.
    #[test]
    fn a_fit_at_a_bound_or_no_better_says_so() {
        let w = fit_warnings([Some(0.997), Some(1.0), Some(2000.0), None], 2.0, 1.0);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].starts_with("decode_efficiency ended at 0.997 next to the upper bound"),
            "{w:?}"
        );
        assert!(fit_warnings([Some(0.8), Some(1.0), Some(2000.0), Some(1.0)], 2.0, 1.0).is_empty());
        let w = fit_warnings([Some(0.8), Some(0.05), Some(10.0), None], 1.0, 1.0);
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].starts_with("host_scale ended at 0.05 next to the lower bound"));
        assert!(w[2].contains("no better than the base profile's"), "{w:?}");
    }
}
