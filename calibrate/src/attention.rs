//! Fitting a profile's `[kernels.attention]` from a measured attention table:
//! `kvplan calibrate` with its from-table option naming a CSV whose header is
//! `phase,batch_size,query_tokens_per_seq,kv_tokens_per_seq,median_ms_per_layer`.
//!
//! Each row is one attention call of one layer: `batch_size` sequences, each computing
//! `query_tokens_per_seq` new tokens (1 in `decode`) against `kv_tokens_per_seq` tokens already
//! cached, with the median device time in milliseconds. The table carries no model shape: the
//! heads come from the model it was measured on (the `model` option).
//!
//! The measurements Vidur published were taken through Sarathi's FlashAttention wrapper, which
//! calls `flash_attn_with_kvcache` with the new tokens' K and V: the kernel appends them to the
//! cache itself, and every query block copies the new keys it attends to. That copy grows as the
//! square of the chunk and is most of a long chunk's time (a 1920-token chunk copies about 30,000
//! keys per head). The fit models it ([`KvAppend`], its rate a fitted `append_efficiency`) so
//! that the fitted kernel figures are the attention's own; vLLM writes the cache in a separate
//! kernel, so the profile's `[kernels.attention]` leaves the copy out.
//!
//! The fit is the same deterministic Nelder–Mead the GEMM fit uses ([`crate::fit::nelder_mead`])
//! on the sum over the report's buckets (decode: batch x context; prefill: chunk x cached tokens)
//! of `median + 0.5 * p90` of `|ln(predicted / measured)|`; `sms` is fixed (the GPU's streaming
//! multiprocessors).

use std::path::Path;

use kvplan_vocab::HardwareProfile;
/// The attention heads a table was measured with.
pub use kvplan_vocab::attention::Heads;
use kvplan_vocab::attention::{AttentionBatch, AttentionWork, BLOCK_Q};
use kvplan_vocab::kernel_model::{AttentionFit, KvAppend};

use crate::error::Error;
use crate::fit::nelder_mead;
use crate::table::{
    ErrorStat, TableRows, logit, median, p90, read_table_text, round4, sigmoid, stat, table_error,
};

/// The columns of an attention table.
pub const COLUMNS: [&str; 5] = [
    "phase",
    "batch_size",
    "query_tokens_per_seq",
    "kv_tokens_per_seq",
    "median_ms_per_layer",
];

/// Whether `text` starts with an attention table's header (every one of [`COLUMNS`]).
pub fn is_attention_table(text: &str) -> bool {
    let first = text.lines().next().unwrap_or("");
    let cols: Vec<&str> = first.split(',').map(str::trim).collect();
    COLUMNS.iter().all(|c| cols.contains(c))
}

/// Which call a row times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// One new token per sequence.
    Decode,
    /// A chunk of new tokens of one sequence (or several).
    Prefill,
}

impl Phase {
    /// `decode` or `prefill`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Decode => "decode",
            Phase::Prefill => "prefill",
        }
    }
}

/// One measured attention call.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionSample {
    /// The CSV line.
    pub line: u64,
    /// Decode or prefill.
    pub phase: Phase,
    /// Sequences.
    pub batch: u32,
    /// New tokens per sequence.
    pub q_len: u32,
    /// Tokens already cached per sequence.
    pub cached: u32,
    /// Measured device seconds.
    pub seconds: f64,
}

impl AttentionSample {
    /// Keys each sequence attends: its cache and its new tokens.
    pub fn kv_len(&self) -> u32 {
        self.cached + self.q_len
    }

    /// The batch's statistics (causal attention of the new tokens).
    pub fn batch_stats(&self) -> AttentionBatch {
        AttentionBatch::uniform(self.batch, self.q_len, self.kv_len(), self.q_len > 1)
    }
}

/// A measured attention table.
#[derive(Debug, Clone)]
pub struct AttentionTable {
    /// The file it was read from.
    pub origin: String,
    /// One sample per row.
    pub samples: Vec<AttentionSample>,
}

impl AttentionTable {
    /// Reads an attention table.
    pub fn read(path: &Path) -> Result<Self, Error> {
        Self::parse(&read_table_text(path)?, &path.display().to_string())
    }

    /// Parses an attention table; `origin` names it in errors (`origin:line: column: why`).
    pub fn parse(text: &str, origin: &str) -> Result<Self, Error> {
        let (mut rows, headers) = TableRows::new(text, origin)?;
        let mut at = [0usize; 5];
        for (i, name) in COLUMNS.iter().enumerate() {
            at[i] = headers.iter().position(|h| h == *name).ok_or_else(|| {
                table_error(
                    origin,
                    1,
                    name,
                    format!(
                        "missing column (an attention table has {})",
                        COLUMNS.join(",")
                    ),
                )
            })?;
        }
        let mut samples = Vec::new();
        while let Some((record, line)) = rows.next_row()? {
            let field = |i: usize| record.get(at[i]).unwrap_or("");
            let phase = match field(0) {
                "decode" => Phase::Decode,
                "prefill" => Phase::Prefill,
                other => {
                    return Err(table_error(
                        origin,
                        line,
                        COLUMNS[0],
                        format!("'{other}' must be decode or prefill"),
                    ));
                }
            };
            let count = |i: usize, min: u32| -> Result<u32, Error> {
                match field(i).parse::<u32>() {
                    Ok(v) if v >= min => Ok(v),
                    _ => Err(table_error(
                        origin,
                        line,
                        COLUMNS[i],
                        format!("'{}' must be a whole number of at least {min}", field(i)),
                    )),
                }
            };
            let batch = count(1, 1)?;
            let q_len = count(2, 1)?;
            let cached = count(3, 0)?;
            if phase == Phase::Decode && q_len != 1 {
                return Err(table_error(
                    origin,
                    line,
                    COLUMNS[2],
                    format!("{q_len}: a decode row computes one token per sequence (1)"),
                ));
            }
            if cached.checked_add(q_len).is_none() {
                return Err(table_error(origin, line, COLUMNS[3], "too many tokens"));
            }
            let ms: f64 = field(4).parse().unwrap_or(f64::NAN);
            if !(ms.is_finite() && ms > 0.0) {
                return Err(table_error(
                    origin,
                    line,
                    COLUMNS[4],
                    format!("'{}' must be a positive time in milliseconds", field(4)),
                ));
            }
            samples.push(AttentionSample {
                line,
                phase,
                batch,
                q_len,
                cached,
                seconds: ms * 1e-3,
            });
        }
        if samples.is_empty() {
            return Err(table_error(origin, 2, "", "no rows"));
        }
        Ok(AttentionTable {
            origin: origin.to_string(),
            samples,
        })
    }
}

/// A sample cut into the kernel's work units for a fixed SM count, with the K/V copy of the
/// harness's in-kernel append.
#[derive(Debug, Clone, Copy)]
struct Prepared {
    work: AttentionWork,
    append_bytes: f64,
    append_long: f64,
    append_tokens: f64,
    seconds: f64,
    phase: Phase,
    bucket: usize,
}

fn prepare(s: &AttentionSample, heads: &Heads, sms: u32) -> Prepared {
    let stats = s.batch_stats();
    let work = AttentionWork::new(&stats, heads, Some(sms));
    // Every query block copies the new keys it attends to (block j: min((j + 1) * 64, q)); a
    // decode unit (one per KV head) copies its one new key. Read from the new-KV tensor and
    // written to the cache: K and V, twice.
    let (keys, unit_heads) = if stats.max_q <= 1 {
        (1.0, heads.kv_heads)
    } else {
        let blocks = f64::from(s.q_len.div_ceil(BLOCK_Q));
        let m = f64::from(BLOCK_Q);
        (
            m * blocks * (blocks - 1.0) / 2.0 + f64::from(s.q_len),
            heads.q_heads,
        )
    };
    let per_key = 2.0 * 2.0 * f64::from(heads.head_dim) * heads.dtype.bytes() as f64;
    Prepared {
        work,
        append_bytes: f64::from(s.batch) * f64::from(unit_heads) * keys * per_key,
        append_long: (f64::from(s.q_len) * per_key).min(2.0 * work.long_bytes),
        append_tokens: f64::from(s.batch) * f64::from(s.q_len) * f64::from(heads.q_heads),
        seconds: s.seconds,
        phase: s.phase,
        bucket: bucket(s),
    }
}

/// What the fit found: the kernel's `[kernels.attention]` and the cost of the harness's
/// in-kernel K/V append (not part of the profile).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionTableFit {
    /// The attention kernel (vLLM's: no in-kernel append).
    pub attention: AttentionFit,
    /// The measured kernel's K/V copy.
    pub append: AppendCost,
}

/// The fitted cost of an in-kernel K/V append ([`KvAppend`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AppendCost {
    /// Fraction of HBM bandwidth the copies run at.
    pub efficiency: f64,
    /// Time per new token and query head, nanoseconds.
    pub token_ns: f64,
}

/// The device seconds `fit` predicts for `samples` as measured (with the harness's append
/// costing `append`), in order.
pub fn predicted(
    fit: &AttentionFit,
    append: &AppendCost,
    samples: &[AttentionSample],
    hw: &HardwareProfile,
    heads: &Heads,
) -> Vec<f64> {
    let sms = fit.sms.unwrap_or(0);
    let spf = 1.0 / hw.gpu.peak_flops.get(heads.dtype);
    let hbm = hw.gpu.mem_bandwidth;
    samples
        .iter()
        .map(|s| {
            let p = prepare(s, heads, sms);
            seconds_of(fit, append, &p, spf, hbm)
        })
        .collect()
}

fn seconds_of(fit: &AttentionFit, append: &AppendCost, p: &Prepared, spf: f64, hbm: f64) -> f64 {
    let a = KvAppend {
        bytes: p.append_bytes,
        long_bytes: p.append_long,
        efficiency: append.efficiency,
        tokens: p.append_tokens,
        token_ns: append.token_ns,
    };
    fit.device_seconds_appending(&p.work, spf, hbm, Some(&a))
}

/// The robust loss: per report bucket ([`bucket`]), `median + 0.5 * p90` of `|ln(predicted /
/// measured)|`, summed (so small decode batches weigh as much as the many large ones).
fn loss_of(prepared: &[Prepared], pred: impl Fn(&Prepared) -> f64) -> f64 {
    let mut total = 0.0;
    let mut groups: Vec<(Phase, usize)> = prepared.iter().map(|p| (p.phase, p.bucket)).collect();
    groups.sort_unstable();
    groups.dedup();
    for (phase, bucket) in groups {
        let mut e: Vec<f64> = prepared
            .iter()
            .filter(|p| p.phase == phase && p.bucket == bucket)
            .map(|p| {
                let t = pred(p);
                if t.is_finite() && t > 0.0 {
                    (t / p.seconds).ln().abs()
                } else {
                    1e3
                }
            })
            .collect();
        if !e.is_empty() {
            total += median(&mut e) + 0.5 * p90(&mut e);
        }
    }
    total
}

/// Fits `[kernels.attention]` (with `sms` streaming multiprocessors) and the harness's append
/// rate to `samples` measured on `hw` with `heads`.
pub fn fit_attention(
    samples: &[AttentionSample],
    hw: &HardwareProfile,
    heads: &Heads,
    sms: u32,
) -> Result<AttentionTableFit, Error> {
    if samples.is_empty() {
        return Err(Error::Fit {
            what: "attention table".into(),
            why: "no measurements".into(),
        });
    }
    if sms == 0 {
        return Err(Error::Fit {
            what: "attention table".into(),
            why: "sms must be at least 1".into(),
        });
    }
    let spf = 1.0 / hw.gpu.peak_flops.get(heads.dtype);
    let hbm = hw.gpu.mem_bandwidth;
    let prepared: Vec<Prepared> = samples.iter().map(|s| prepare(s, heads, sms)).collect();
    let decode = |x: &[f64]| {
        (
            AttentionFit {
                floor_us: x[0].exp(),
                prefill_efficiency: sigmoid(x[3]),
                decode_efficiency: sigmoid(x[2]),
                sms: Some(sms),
                unit_us: Some(x[1].exp()),
                tail: Some(x[4].exp().min(100.0)),
                split_us: Some(x[6].exp()),
            },
            AppendCost {
                efficiency: x[7].exp(),
                token_ns: x[5].exp(),
            },
        )
    };
    let loss = |x: &[f64]| {
        let (fit, append) = decode(x);
        loss_of(&prepared, |p| seconds_of(&fit, &append, p, spf, hbm))
    };
    // Deterministic starts: floor, unit, decode and prefill efficiency, tail, the append's time
    // per token, split, the append's efficiency.
    let starts: [[f64; 8]; 3] = [
        [5.0, 3.0, 0.9, 0.5, 1.0, 3.0, 3.0, 1.0],
        [3.0, 2.0, 0.8, 0.6, 0.5, 1.0, 5.0, 1.5],
        [8.0, 4.0, 0.95, 0.4, 2.0, 5.0, 1.0, 0.7],
    ];
    let mut best: Option<(Vec<f64>, f64)> = None;
    for s in starts {
        let x0 = [
            s[0].ln(),
            s[1].ln(),
            logit(s[2]),
            logit(s[3]),
            s[4].ln(),
            s[5].ln(),
            s[6].ln(),
            s[7].ln(),
        ];
        let (x, v) = nelder_mead(&loss, &x0, 0.5, 600, 4);
        if best.as_ref().is_none_or(|b| v < b.1) {
            best = Some((x, v));
        }
    }
    let (x, _) = best.expect("at least one start");
    let (f, append) = decode(&x);
    let round = |v: Option<f64>| v.map(round4);
    let attention = AttentionFit {
        floor_us: round4(f.floor_us),
        prefill_efficiency: round4(f.prefill_efficiency).min(1.0),
        decode_efficiency: round4(f.decode_efficiency).min(1.0),
        sms: f.sms,
        unit_us: round(f.unit_us),
        tail: round(f.tail),
        split_us: round(f.split_us),
    };
    Ok(AttentionTableFit {
        attention,
        append: AppendCost {
            efficiency: round4(append.efficiency),
            token_ns: round4(append.token_ns),
        },
    })
}

/// Report buckets: decode rows by batch and context, prefill rows by chunk and cached tokens.
pub const DECODE_BATCH: [(u32, u32); 3] = [(1, 8), (9, 32), (33, u32::MAX)];
/// Context buckets of decode rows (cached tokens).
pub const DECODE_CONTEXT: [(u32, u32); 3] = [(0, 512), (513, 2048), (2049, u32::MAX)];
/// Chunk buckets of prefill rows (new tokens).
pub const PREFILL_CHUNK: [(u32, u32); 3] = [(1, 256), (257, 1024), (1025, u32::MAX)];
/// Cached-token buckets of prefill rows.
pub const PREFILL_CACHED: [(u32, u32); 3] = [(0, 1023), (1024, 2047), (2048, u32::MAX)];

fn range(r: (u32, u32)) -> String {
    if r.1 == u32::MAX {
        format!("{}+", r.0)
    } else {
        format!("{}-{}", r.0, r.1)
    }
}

fn within(v: u32, r: (u32, u32)) -> bool {
    v >= r.0 && v <= r.1
}

/// A sample's report bucket within its phase: `3 * outer + inner` (decode: batch x context;
/// prefill: chunk x cached tokens).
pub fn bucket(s: &AttentionSample) -> usize {
    let at = |v: u32, ranges: &[(u32, u32); 3]| {
        ranges
            .iter()
            .position(|&r| within(v, r))
            .unwrap_or(ranges.len() - 1)
    };
    match s.phase {
        Phase::Decode => 3 * at(s.batch, &DECODE_BATCH) + at(s.cached, &DECODE_CONTEXT),
        Phase::Prefill => 3 * at(s.q_len, &PREFILL_CHUNK) + at(s.cached, &PREFILL_CACHED),
    }
}

/// Errors `|predicted / measured - 1|` of `predicted` (one per sample) by phase (`"decode"`,
/// `"prefill"`) and bucket (`"decode batch 1-8, context 0-512"`, ...): every group with rows.
pub fn attention_errors(
    samples: &[AttentionSample],
    predicted: &[f64],
) -> Vec<(String, ErrorStat)> {
    let err = |i: usize| (predicted[i] / samples[i].seconds - 1.0).abs();
    let group = |keep: &dyn Fn(&AttentionSample) -> bool| -> Vec<f64> {
        (0..samples.len())
            .filter(|&i| keep(&samples[i]))
            .map(err)
            .collect()
    };
    let mut out = Vec::new();
    for phase in [Phase::Decode, Phase::Prefill] {
        let all = group(&|s| s.phase == phase);
        if all.is_empty() {
            continue;
        }
        out.push((phase.as_str().to_string(), stat(all)));
        let (outer, inner, a, b) = match phase {
            Phase::Decode => (DECODE_BATCH, DECODE_CONTEXT, "batch", "context"),
            Phase::Prefill => (PREFILL_CHUNK, PREFILL_CACHED, "chunk", "cached"),
        };
        for (j, o) in outer.iter().enumerate() {
            for (k, i) in inner.iter().enumerate() {
                let e = group(&|s| s.phase == phase && bucket(s) == 3 * j + k);
                if !e.is_empty() {
                    out.push((
                        format!("{} {a} {}, {b} {}", phase.as_str(), range(*o), range(*i)),
                        stat(e),
                    ));
                }
            }
        }
    }
    out
}

/// The error table of [`attention_errors`] as text.
pub fn error_report(samples: &[AttentionSample], predicted: &[f64]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<40} {:>5} {:>9} {:>9}",
        "attention (device time)", "n", "median", "p90"
    );
    for (name, e) in attention_errors(samples, predicted) {
        let _ = writeln!(
            s,
            "{name:<40} {:>5} {:>8.1}% {:>8.1}%",
            e.count,
            100.0 * e.median,
            100.0 * e.p90
        );
    }
    s
}

/// `[kernels.attention]` as profile TOML, its header line carrying `# cite`.
pub fn attention_toml(a: &AttentionFit, cite: &str) -> String {
    #[derive(serde::Serialize)]
    struct Kernels<'a> {
        attention: &'a AttentionFit,
    }
    #[derive(serde::Serialize)]
    struct Wrap<'a> {
        kernels: Kernels<'a>,
    }
    let text = toml::to_string(&Wrap {
        kernels: Kernels { attention: a },
    })
    .expect("attention serializes to TOML");
    let mut out = String::new();
    for line in text.lines() {
        if line.trim() == "[kernels]" {
            continue;
        }
        out.push_str(line);
        if line.starts_with('[') {
            out.push_str("  # ");
            out.push_str(cite);
        }
        out.push('\n');
    }
    out
}

/// `profile` (TOML text) with its `[kernels.attention]` table replaced by `attention` (in place;
/// appended when it has none). `None` when the profile has no `[kernels]` at all.
pub fn replace_attention(profile: &str, attention: &str) -> Option<String> {
    let mut out = String::new();
    let mut skipping = false;
    let mut replaced = false;
    let mut has_kernels = false;
    for line in profile.lines() {
        let t = line.trim_start();
        if t.starts_with('[') {
            let name = t
                .trim_start_matches('[')
                .split(']')
                .next()
                .unwrap_or("")
                .trim();
            has_kernels |= name == "kernels" || name.starts_with("kernels.");
            skipping = name == "kernels.attention";
            if skipping && !replaced {
                out.push_str(attention);
                out.push('\n');
                replaced = true;
            }
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    if !has_kernels {
        return None;
    }
    if !replaced {
        while out.ends_with("\n\n") {
            out.pop();
        }
        out.push('\n');
        out.push_str(attention);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvplan_vocab::DType;

    #[test]
    fn header_detection_and_bad_rows_name_line_and_column() {
        let head = COLUMNS.join(",");
        assert!(is_attention_table(&format!(
            "{head}\ndecode,1,1,32,0.009\n"
        )));
        assert!(!is_attention_table("n_head,num_tokens\n1,2\n"));
        let t = AttentionTable::parse(&format!("{head}\ndecode,2,1,32,0.009\n"), "a.csv").unwrap();
        assert_eq!(t.samples[0].kv_len(), 33);
        assert_eq!(t.samples[0].seconds, 9e-6);
        for (row, column) in [
            ("decode,2,2,32,0.009", "query_tokens_per_seq"),
            ("train,2,1,32,0.009", "phase"),
            ("decode,0,1,32,0.009", "batch_size"),
            ("prefill,1,96,x,0.009", "kv_tokens_per_seq"),
            ("prefill,1,96,0,-1", "median_ms_per_layer"),
        ] {
            let e =
                AttentionTable::parse(&format!("{head}\ndecode,1,1,32,0.009\n{row}\n"), "a.csv")
                    .unwrap_err()
                    .to_string();
            assert!(
                e.starts_with(&format!("a.csv:3: column {column}")),
                "{row}: {e}"
            );
        }
        let e = AttentionTable::parse("phase,batch_size\ndecode,1\n", "a.csv")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a.csv:1:") && e.contains("missing column"),
            "{e}"
        );
    }

    #[test]
    fn replacing_attention_keeps_the_rest_of_the_profile() {
        let p = "name = \"x\"\n[kernels]\nsource = \"s\"\n[kernels.attention]  # old\nfloor_us = 1.0\n[kernels.allreduce]\nlatency_us = 1.0\n";
        let new = "[kernels.attention]  # new\nfloor_us = 2.0\n";
        let out = replace_attention(p, new).unwrap();
        assert!(out.contains("floor_us = 2.0") && !out.contains("floor_us = 1.0"));
        assert!(
            out.find("[kernels.attention]").unwrap() < out.find("[kernels.allreduce]").unwrap()
        );
        assert!(out.contains("latency_us = 1.0") && out.contains("source = \"s\""));
        assert_eq!(replace_attention("name = \"x\"\n[gpu]\n", new), None);
    }

    #[test]
    fn the_fit_recovers_a_known_kernel() {
        // Synthetic measurements from a known kernel (A100-like, Llama-2-7B heads): the fit
        // must find parameters that reproduce them within 2% (the rounding to 4 digits and the
        // search's tolerance), over decode batches and prefill chunks.
        let hw = HardwareProfile::preset("a100-80g-sxm").unwrap();
        let heads = Heads {
            q_heads: 32,
            kv_heads: 32,
            head_dim: 128,
            dtype: DType::Fp16,
            kv: kvplan_vocab::KvCacheDtype::Auto,
        };
        let truth = AttentionFit {
            floor_us: 4.0,
            prefill_efficiency: 0.55,
            decode_efficiency: 0.95,
            sms: Some(108),
            unit_us: Some(3.0),
            tail: Some(1.0),
            split_us: Some(4.0),
        };
        let harness = AppendCost {
            efficiency: 1.2,
            token_ns: 2.0,
        };
        let mut samples = Vec::new();
        let mut line = 2;
        for (b, kv) in [
            (1, 256),
            (3, 1024),
            (8, 2048),
            (20, 512),
            (64, 1024),
            (100, 4000),
        ] {
            samples.push(AttentionSample {
                line,
                phase: Phase::Decode,
                batch: b,
                q_len: 1,
                cached: kv,
                seconds: 1.0,
            });
            line += 1;
        }
        for (q, c) in [
            (96, 2000),
            (224, 0),
            (800, 1000),
            (1216, 2500),
            (1920, 0),
            (512, 512),
        ] {
            samples.push(AttentionSample {
                line,
                phase: Phase::Prefill,
                batch: 1,
                q_len: q,
                cached: c,
                seconds: 1.0,
            });
            line += 1;
        }
        let t = predicted(&truth, &harness, &samples, &hw, &heads);
        for (s, t) in samples.iter_mut().zip(&t) {
            s.seconds = *t;
        }
        let fit = fit_attention(&samples, &hw, &heads, 108).unwrap();
        let p = predicted(&fit.attention, &fit.append, &samples, &hw, &heads);
        for (s, p) in samples.iter().zip(&p) {
            assert!(
                (p / s.seconds - 1.0).abs() < 0.02,
                "line {}: {p} vs {}",
                s.line,
                s.seconds
            );
        }
        // The same inputs give the same bytes.
        assert_eq!(fit_attention(&samples, &hw, &heads, 108).unwrap(), fit);
    }
}
