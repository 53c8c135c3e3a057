//! Configurations compared: the highest rate under the objectives of each GPU and
//! tensor-parallel size, with its price and its error band.

use kvplan_vocab::Progress;
use serde::Serialize;

use super::error::CapacityError;
use super::search::{SearchOptions, max_qps, max_qps_with};
use super::steady::Stage;
use crate::bands::{self, Band, BandSettings, CostSpread, Residuals, band};
use crate::output::Percentiles;
use crate::output::slo::Slo;
use crate::scenario::RawServeScenario;

/// US dollars per million tokens for `gpus` GPUs at `usd_per_gpu_hour` producing
/// `tokens_per_s` tokens per second.
pub fn usd_per_million_tokens(usd_per_gpu_hour: f64, gpus: u32, tokens_per_s: f64) -> Option<f64> {
    (tokens_per_s > 0.0).then(|| usd_per_gpu_hour * f64::from(gpus) / 3600.0 / tokens_per_s * 1e6)
}

/// One configuration's answer in a capacity comparison ([`compare_configurations`]).
#[derive(Debug, Clone, Serialize)]
pub struct ConfigCapacity {
    /// The hardware profile's name.
    pub hardware: String,
    /// Tensor-parallel GPUs per replica.
    pub tensor_parallel_size: u32,
    /// `None`: not even the lowest rate tried meets the SLO.
    pub max_qps: Option<f64>,
    /// The lowest rate found that misses it (`None`: the highest rate tried met it).
    pub fails_at_qps: Option<f64>,
    /// Why the next rate up fails (the terms it misses).
    pub limited_by: Vec<String>,
    /// Requests per second meeting every objective at `max_qps` (vLLM's goodput).
    pub goodput_rps: Option<f64>,
    /// TTFT percentiles at `max_qps` over the measured requests (rejected and truncated ones
    /// counted as infinite).
    pub ttft: Percentiles,
    /// TPOT percentiles at `max_qps`.
    pub tpot: Percentiles,
    /// E2E percentiles at `max_qps`.
    pub e2e: Percentiles,
    /// TTFT p99 at `max_qps`, seconds.
    pub ttft_p99_s: f64,
    /// TPOT p99 at `max_qps`, seconds.
    pub tpot_p99_s: f64,
    /// E2E p99 at `max_qps`, seconds.
    pub e2e_p99_s: f64,
    /// Output tokens per second at `max_qps`.
    pub output_tok_s: f64,
    /// Measured requests at `max_qps` that were rejected.
    pub rejected: u64,
    /// Measured requests at `max_qps` cut at max_model_len.
    pub truncated: u64,
    /// Requests in the measured window.
    pub measured_requests: u64,
    /// Requests served at `max_qps`.
    pub requests_per_rate: u64,
    /// Rates the search served.
    pub rates_served: usize,
    /// Price per million output tokens at `max_qps`, when the profile has one.
    pub usd_per_m_output_tokens: Option<f64>,
    /// Price per million tokens (prompt and output) at `max_qps`.
    pub usd_per_m_tokens: Option<f64>,
    /// The error band of `max_qps` (`None`: none asked for, or no rate met the SLO).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_qps_band: Option<Band>,
}

/// The error band of `value`, the highest rate `raw` sustains under `slo`: the search run once
/// per draw of `settings` with the kernel costs perturbed ([`crate::bands`]; in parallel), each
/// rate times the engine's validation residuals of time per output token, inverted (at
/// saturation the rate a server sustains goes as one over its time per token). A draw in which
/// no rate met the SLO counts as the lowest rate tried.
pub fn rate_band(
    raw: &RawServeScenario,
    slo: &Slo,
    opts: SearchOptions,
    settings: &BandSettings,
    value: f64,
) -> Result<Option<Band>, CapacityError> {
    use rayon::prelude::*;
    let spread = CostSpread::builtin();
    let draws: Vec<f64> = (settings.scales(&spread).par_iter())
        .map(|&scales| {
            let o = SearchOptions {
                scales,
                bands: None,
                ..opts
            };
            max_qps(raw, slo, o).map(|c| c.max_qps.unwrap_or(opts.min_qps))
        })
        .collect::<Result<_, _>>()?;
    let residuals: Vec<f64> = (Residuals::builtin().of(bands::Metric::TpotMean).iter())
        .map(|r| -r)
        .collect();
    Ok(band(value, &draws, &residuals, settings.coverage))
}

/// The answer of [`compare_configurations`].
#[derive(Debug, Clone)]
pub struct CapacityComparison {
    /// One row per hardware x tensor-parallel size, in the order given.
    pub rows: Vec<ConfigCapacity>,
}

/// The scenario a capacity comparison serves: `base` with the search's defaults (Poisson
/// arrivals unless it replays a trace; at least one request per rate).
pub fn search_base(mut base: RawServeScenario) -> RawServeScenario {
    let w = &mut base.workload;
    if w.trace.is_none() && w.arrivals.is_none() {
        w.arrivals = Some("poisson".into());
    }
    if let Some(n) = w.requests {
        w.requests = Some(n.max(1));
    }
    base
}

/// The configurations a comparison searches ([`compare_configurations`]) from comma-separated
/// lists: `hardware` (presets or profile files) and `tensor_parallel` sizes (`1,2,4`); a list
/// not given is empty (the scenario's).
pub fn configurations(
    hardware: Option<&str>,
    tensor_parallel: Option<&str>,
) -> Result<(Vec<String>, Vec<u32>), CapacityError> {
    fn items(list: Option<&str>) -> impl Iterator<Item = &str> {
        list.into_iter().flat_map(|l| l.split(','))
    }
    let hardware: Vec<String> = items(hardware).map(|h| h.trim().to_string()).collect();
    let tps = items(tensor_parallel)
        .map(|t| {
            t.trim()
                .parse::<u32>()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| CapacityError::Setting {
                    field: "serve.tensor_parallel_size",
                    why: format!("'{t}' is not a GPU count; give counts such as 1,2,4"),
                })
        })
        .collect::<Result<Vec<u32>, _>>()?;
    // A configuration given twice would be searched twice and shown twice.
    // (An empty name is left for the comparison to refuse as no hardware.)
    let named: Vec<&String> = hardware.iter().filter(|h| !h.is_empty()).collect();
    if let Some(h) = first_repeat(&named) {
        return Err(CapacityError::Setting {
            field: "hardware",
            why: format!("{h} is given twice; give each configuration once"),
        });
    }
    if let Some(t) = first_repeat(&tps) {
        return Err(CapacityError::Setting {
            field: "serve.tensor_parallel_size",
            why: format!("{t} is given twice; give each size once"),
        });
    }
    Ok((hardware, tps))
}

/// The first item that appears again later in `v`.
fn first_repeat<T: PartialEq>(v: &[T]) -> Option<&T> {
    v.iter()
        .enumerate()
        .find(|(i, x)| v[i + 1..].contains(x))
        .map(|(_, x)| x)
}

/// The highest rate under `slo` of every configuration `hardware` x `tensor_parallel` (empty:
/// the scenario's hardware; the scenario's tensor-parallel size, or 1), with dollars per million
/// tokens where the profile has a price. Sizing a deployment for a rate is
/// [`crate::deploy`]'s, which simulates the whole cluster. `base` is searched as
/// [`search_base`] gives it; `progress` hears how far each run of each search has come.
pub fn compare_configurations(
    base: &RawServeScenario,
    hardware: &[String],
    tensor_parallel: &[u32],
    slo: &Slo,
    opts: SearchOptions,
    progress: &dyn Progress,
) -> Result<CapacityComparison, CapacityError> {
    let hardware: Vec<String> = match (hardware, &base.hardware) {
        ([], Some(h)) => vec![h.clone()],
        (list, _) => list.to_vec(),
    };
    if hardware.is_empty() || hardware.iter().any(String::is_empty) {
        return Err(CapacityError::NoHardware);
    }
    let tps: Vec<u32> = match tensor_parallel {
        [] => vec![base.serve.tensor_parallel_size.unwrap_or(1)],
        list => list.to_vec(),
    };
    let mut rows = Vec::new();
    for h in &hardware {
        let profile = kvplan_vocab::HardwareProfile::resolve(h)?;
        for &tp in &tps {
            let mut raw = base.clone();
            raw.hardware = Some(h.clone());
            raw.serve.tensor_parallel_size = Some(tp);
            let stage = Stage {
                inner: progress,
                label: format!("on {} TP {tp}", profile.name),
            };
            let c = max_qps_with(&raw, slo, opts, &stage)?;
            let max_qps_band = match (opts.bands, c.max_qps) {
                (Some(settings), Some(value)) => rate_band(&raw, slo, opts, &settings, value)?,
                _ => None,
            };
            let limited_by = c
                .probes
                .iter()
                .find(|p| Some(p.qps) == c.fails_at)
                .map(|p| slo.misses(&p.window))
                .unwrap_or_default();
            let requests_per_rate = c
                .probes
                .iter()
                .find(|p| Some(p.qps) == c.max_qps)
                .map_or(0, |p| p.requests);
            let price = profile.gpu.price_usd_per_hour;
            let per_m = |tok_s: f64| price.and_then(|p| usd_per_million_tokens(p, tp, tok_s));
            let found = c.max_qps.is_some();
            rows.push(ConfigCapacity {
                hardware: profile.name.clone(),
                tensor_parallel_size: tp,
                max_qps: c.max_qps,
                fails_at_qps: c.fails_at,
                limited_by,
                goodput_rps: found.then_some(c.at.goodput_rps),
                ttft: c.at.ttft_s,
                tpot: c.at.tpot_s,
                e2e: c.at.e2e_s,
                ttft_p99_s: c.at.ttft_s.p99,
                tpot_p99_s: c.at.tpot_s.p99,
                e2e_p99_s: c.at.e2e_s.p99,
                output_tok_s: c.at.output_tokens_per_s,
                rejected: c.at.rejected,
                truncated: c.at.truncated,
                measured_requests: c.at.measured,
                requests_per_rate,
                rates_served: c.probes.len(),
                usd_per_m_output_tokens: found.then(|| per_m(c.at.output_tokens_per_s)).flatten(),
                usd_per_m_tokens: found.then(|| per_m(c.at.total_tokens_per_s)).flatten(),
                max_qps_band,
            });
        }
    }
    Ok(CapacityComparison { rows })
}
