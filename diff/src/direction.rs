//! Which way is worse, per metric name: one table, first matching pattern wins.

use serde::Serialize;

/// Which change of a metric is a regression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Direction {
    /// Higher is worse (latencies, times, bytes, idle time, preemptions).
    LowerIsBetter,
    /// Lower is worse (throughputs, speed-ups, bandwidths, finished requests).
    HigherIsBetter,
    /// No better side (counts, shapes, fractions): reported, never a regression.
    Neutral,
    /// A decision the planner or the serving scheduler made (the KVPR split and recompute
    /// share, HeadInfer's head groups and chunk, KV-Runahead's partition, the prefix cache hit
    /// rate): no better side either, but any change of it (beyond
    /// [`DECISION_TOLERANCE`](crate::compare::DECISION_TOLERANCE), whatever the comparison's
    /// tolerance) is a failure unless the comparison accepts it by name.
    Decision,
}

impl Direction {
    /// Short name for tables and CSV.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::LowerIsBetter => "lower-is-better",
            Direction::HigherIsBetter => "higher-is-better",
            Direction::Neutral => "neutral",
            Direction::Decision => "decision",
        }
    }
}

use Direction::{Decision, HigherIsBetter as Higher, LowerIsBetter as Lower, Neutral};

/// The rule table. A metric's name is matched in lower case against each pattern in order (`*`
/// matches any run of characters, the rest literally); the first match decides, and a name
/// that matches none is [`Direction::Neutral`]. Names are JSON paths (`ttft_s.p99`,
/// `decode_breakdown.compute_s`), CSV column names (`decode_latency_s`), or a timeline's
/// derived metrics (`makespan_s`, `label.qkv_proj.duration_s`, `category.compute.bytes`).
pub const RULES: [(&str, Direction); 34] = [
    // Decisions first: `mean_recompute_fraction` is a fraction, `prefix_cache_hit_rate` a rate.
    // The KVPR split (`splits.N.recompute_tokens` in a suite's decisions golden,
    // `recompute_tokens` / `recompute_fraction` columns of `plan kvpr`) and its share:
    ("*recompute_tokens", Decision),
    ("*recompute_fraction", Decision),
    // HeadInfer's head-group partition and prefill chunk (`headinfer.heads_per_group`, ...;
    // `roofline_chunk_tokens` is the profile's figure, not a choice):
    ("*heads_per_group", Decision),
    ("*groups_per_layer", Decision),
    ("chunk_tokens", Decision),
    ("*.chunk_tokens", Decision),
    // KV-Runahead's partition of the context over devices:
    ("*partition.*", Decision),
    ("*devices_used", Decision),
    // The serving scheduler's prefix cache:
    ("*prefix_cache_hit_rate", Decision),
    ("*cached_prompt_tokens", Decision),
    // Rates first: `decode_throughput_tok_s` and `requests_per_s` end in `_s` too.
    ("*throughput*", Higher),
    ("*tok_s*", Higher),
    ("*tokens_per_s*", Higher),
    ("*_per_s", Higher),
    ("*speedup*", Higher),
    ("*gbps*", Higher),
    ("*tflops*", Higher),
    ("finished", Higher),
    // Fractions say how busy something was, not how good the run was.
    ("*fraction*", Neutral),
    ("*busy", Neutral),
    ("*latency*", Lower),
    ("*ttft*", Lower),
    ("*tpot*", Lower),
    ("*e2e*", Lower),
    ("*queue*", Lower),
    ("*makespan*", Lower),
    ("*duration*", Lower),
    ("*idle*", Lower),
    ("*_s", Lower),
    ("*_us", Lower),
    ("*_ms", Lower),
    ("*bytes*", Lower),
    ("*preemption*", Lower),
    ("rejected", Lower),
];

/// The direction of the metric `name` under [`RULES`].
pub fn direction(name: &str) -> Direction {
    let name = name.to_ascii_lowercase();
    RULES
        .iter()
        .find(|(p, _)| glob(p, &name))
        .map_or(Neutral, |(_, d)| *d)
}

/// `*`-only glob match of the whole of `text`.
pub(crate) fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_fields_get_the_expected_directions() {
        for (name, want) in [
            ("decode_latency_s", Lower),
            ("decode_throughput_tok_s", Higher),
            ("requests_per_s", Higher),
            ("output_tokens_per_s", Higher),
            ("ttft_s.p99", Lower),
            ("e2e_s.mean", Lower),
            ("queue_s.p50", Lower),
            ("decode_breakdown.compute_s", Lower),
            ("gpu_idle_s", Lower),
            ("h2d_bytes", Lower),
            ("peak_gpu_bytes", Lower),
            ("gpu_busy_fraction", Neutral),
            ("stream_busy_fraction.gpu0.h2d", Neutral),
            ("gpu_busy", Neutral),
            ("preemptions", Lower),
            ("finished", Higher),
            ("rejected", Lower),
            ("makespan_s", Lower),
            ("label.qkv_proj.duration_s", Lower),
            ("category.load-cache.bytes", Lower),
            ("kvpr_vs_full_transfer.throughput_ratio", Higher),
            ("kvpr_vs_full_transfer.decode_latency_ratio", Lower),
            ("batch", Neutral),
            ("ops", Neutral),
            ("iterations", Neutral),
            ("mean_recompute_fraction", Decision),
            ("splits.0.recompute_tokens", Decision),
            ("recompute_fraction", Decision),
            ("headinfer.heads_per_group", Decision),
            ("headinfer.groups_per_layer", Decision),
            ("headinfer.chunk_tokens", Decision),
            ("chunk_tokens", Decision),
            ("headinfer.roofline_chunk_tokens", Neutral),
            ("runahead.partition.2", Decision),
            ("runahead.devices_used", Decision),
            ("prefix_cache_hit_rate", Decision),
            ("cached_prompt_tokens", Decision),
            ("splits.0.layer_s", Lower),
            ("headinfer.predicted_seconds", Neutral),
        ] {
            assert_eq!(direction(name), want, "{name}");
        }
    }

    #[test]
    fn glob_matches_whole_names() {
        assert!(glob("*_s", "a_s"));
        assert!(!glob("*_s", "a_s.p50"));
        assert!(glob("*tok_s*", "x_tok_s"));
        assert!(glob("a*b*c", "abc"));
        assert!(!glob("a*b*c", "acb"));
        assert!(glob("rejected", "rejected"));
        assert!(!glob("rejected", "rejected_x"));
        assert!(!glob("ab*ba", "aba"));
    }
}
