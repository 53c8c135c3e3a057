//! Fitting a profile's `[kernels]` section from a table of measured kernel times (Vidur's
//! profiling format): the from-table option of `kvplan calibrate`.
//!
//! Each CSV row is one model shape (`n_head`, `n_kv_head`, `n_embd`, `n_expanded_embd`,
//! `vocab_size`, `use_gated_mlp`), one token count (`num_tokens`) and one tensor-parallel degree
//! (`num_tensor_parallel_workers`), with the median device time of each op in milliseconds
//! (`*_ms` columns). Every column is mapped to the kernel kvplan itself emits for that op
//! ([`forward_ops`] on the row's per-rank shapes, [`embed_op`] for the embedding), so the bytes
//! and GEMM shapes the fit sees are exactly the ones the simulator costs.
//!
//! The fit has two parts:
//! - the models ([`GemmFit`], one [`MemFit`] per memory-bound kind) minimise a robust loss, the
//!   sum over op × token bucket of `median + 0.5 * p90` of `|ln(predicted / measured)|`, with a
//!   deterministic Nelder–Mead search ([`crate::fit::nelder_mead`]); the GEMM's `sms` is fixed
//!   (the GPU's streaming multiprocessors), everything else is fitted;
//! - measured tables on [`token_grid`]: one per GEMM `(n, k)` and per memory-bound kind × row
//!   width, each node the median of the measurements within half a grid step of it (in log
//!   tokens), which smooths the jumps of cuBLAS's kernel choice and the timer's 1 µs steps.

use std::path::Path;

use kvplan_vocab::DType;
use kvplan_vocab::HardwareProfile;
use kvplan_vocab::ModelSpec;
use kvplan_vocab::kernel_model::{
    AllReduceFit, AttentionFit, GemmFit, KernelModel, KernelTable, KernelsSection, MemFit,
    TableKind, token_grid,
};
use kvplan_vocab::layers::{embed_op, forward_ops};
use kvplan_vocab::schedule::{ElemKind, OpKind};
use serde::Deserialize;

use crate::error::Error;
use crate::fit::nelder_mead;

/// A measured column of the table and the kvplan op it times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Column {
    /// `emb_ms`: the token-embedding gather.
    Emb,
    /// `input_layernorm_ms`: `ln1`.
    InputLayernorm,
    /// `attn_pre_proj_ms`: `qkv_proj` (fused QKV GEMM).
    AttnPreProj,
    /// `attn_rope_ms`: `rope`.
    AttnRope,
    /// `attn_post_proj_ms`: `out_proj`.
    AttnPostProj,
    /// `post_attention_layernorm_ms`: `ln2`.
    PostAttentionLayernorm,
    /// `mlp_up_proj_ms`: `ffn_up` (fused gate and up GEMM).
    MlpUpProj,
    /// `mlp_act_ms`: `ffn_act`.
    MlpAct,
    /// `mlp_down_proj_ms`: `ffn_down`.
    MlpDownProj,
    /// `add_ms`: one residual add (`residual_attn`; `residual_ffn` is the same kernel).
    Add,
}

impl Column {
    /// Every column, in the table's order.
    pub const ALL: [Column; 10] = [
        Column::Emb,
        Column::InputLayernorm,
        Column::AttnPreProj,
        Column::AttnRope,
        Column::AttnPostProj,
        Column::PostAttentionLayernorm,
        Column::MlpUpProj,
        Column::MlpAct,
        Column::MlpDownProj,
        Column::Add,
    ];

    /// The column's name without `_ms`.
    pub fn as_str(self) -> &'static str {
        match self {
            Column::Emb => "emb",
            Column::InputLayernorm => "input_layernorm",
            Column::AttnPreProj => "attn_pre_proj",
            Column::AttnRope => "attn_rope",
            Column::AttnPostProj => "attn_post_proj",
            Column::PostAttentionLayernorm => "post_attention_layernorm",
            Column::MlpUpProj => "mlp_up_proj",
            Column::MlpAct => "mlp_act",
            Column::MlpDownProj => "mlp_down_proj",
            Column::Add => "add",
        }
    }

    /// The name of the op in [`forward_ops`] (`embedding` for [`embed_op`]).
    pub fn op_name(self) -> &'static str {
        match self {
            Column::Emb => "embedding",
            Column::InputLayernorm => "ln1",
            Column::AttnPreProj => "qkv_proj",
            Column::AttnRope => "rope",
            Column::AttnPostProj => "out_proj",
            Column::PostAttentionLayernorm => "ln2",
            Column::MlpUpProj => "ffn_up",
            Column::MlpAct => "ffn_act",
            Column::MlpDownProj => "ffn_down",
            Column::Add => "residual_attn",
        }
    }

    /// The memory-bound kind of the column (`None` for GEMMs).
    pub fn elem(self) -> Option<ElemKind> {
        match self {
            Column::Emb => Some(ElemKind::Embedding),
            Column::InputLayernorm | Column::PostAttentionLayernorm => Some(ElemKind::Norm),
            Column::AttnRope => Some(ElemKind::Rope),
            Column::MlpAct => Some(ElemKind::Activation),
            Column::Add => Some(ElemKind::Add),
            Column::AttnPreProj
            | Column::AttnPostProj
            | Column::MlpUpProj
            | Column::MlpDownProj => None,
        }
    }

    /// How many times the op runs in a layer (the residual add twice; the embedding not at all).
    pub fn per_layer(self) -> u32 {
        match self {
            Column::Emb => 0,
            Column::Add => 2,
            _ => 1,
        }
    }
}

/// Token-count buckets the error report groups by.
pub const BUCKETS: [(u32, u32); 3] = [(1, 16), (17, 256), (257, 4096)];

/// The bucket index of `tokens` (the last bucket holds everything above it too).
pub fn bucket(tokens: u32) -> usize {
    BUCKETS
        .iter()
        .position(|&(lo, hi)| tokens >= lo && tokens <= hi)
        .unwrap_or(BUCKETS.len() - 1)
}

/// One measured op: the kernel kvplan emits for it and its measured device seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The CSV line the measurement comes from.
    pub line: u64,
    /// Which column.
    pub column: Column,
    /// Tensor-parallel degree.
    pub tp: u32,
    /// Tokens in the forward pass.
    pub tokens: u32,
    /// The kernel.
    pub op: OpKind,
    /// Measured device seconds.
    pub seconds: f64,
}

/// A measured table: every row's ops as [`Sample`]s.
#[derive(Debug, Clone)]
pub struct MeasuredTable {
    /// The file it was read from.
    pub origin: String,
    /// One sample per row and column.
    pub samples: Vec<Sample>,
}

#[derive(Debug, Deserialize)]
struct RawRow {
    n_head: i64,
    n_kv_head: i64,
    n_embd: i64,
    n_expanded_embd: i64,
    vocab_size: i64,
    use_gated_mlp: String,
    num_tokens: i64,
    num_tensor_parallel_workers: i64,
    emb_ms: f64,
    input_layernorm_ms: f64,
    attn_pre_proj_ms: f64,
    attn_rope_ms: f64,
    attn_post_proj_ms: f64,
    post_attention_layernorm_ms: f64,
    mlp_up_proj_ms: f64,
    mlp_act_ms: f64,
    mlp_down_proj_ms: f64,
    add_ms: f64,
}

const SIZE_COLUMNS: [&str; 8] = [
    "n_head",
    "n_kv_head",
    "n_embd",
    "n_expanded_embd",
    "vocab_size",
    "use_gated_mlp",
    "num_tokens",
    "num_tensor_parallel_workers",
];

impl RawRow {
    fn times(&self) -> [(Column, f64); 10] {
        [
            (Column::Emb, self.emb_ms),
            (Column::InputLayernorm, self.input_layernorm_ms),
            (Column::AttnPreProj, self.attn_pre_proj_ms),
            (Column::AttnRope, self.attn_rope_ms),
            (Column::AttnPostProj, self.attn_post_proj_ms),
            (
                Column::PostAttentionLayernorm,
                self.post_attention_layernorm_ms,
            ),
            (Column::MlpUpProj, self.mlp_up_proj_ms),
            (Column::MlpAct, self.mlp_act_ms),
            (Column::MlpDownProj, self.mlp_down_proj_ms),
            (Column::Add, self.add_ms),
        ]
    }
}

/// A malformed table's error (`origin:line: column: why`).
pub(crate) fn table_error(origin: &str, line: u64, column: &str, why: impl Into<String>) -> Error {
    Error::Table {
        origin: origin.to_string(),
        line,
        column: column.to_string(),
        why: why.into(),
    }
}

/// The per-rank model of a row: a Llama-style config from the row's sizes, sharded `tp` ways.
fn row_spec(r: &RawRow, origin: &str, line: u64) -> Result<ModelSpec, Error> {
    let sizes = [
        ("n_head", r.n_head),
        ("n_kv_head", r.n_kv_head),
        ("n_embd", r.n_embd),
        ("n_expanded_embd", r.n_expanded_embd),
        ("vocab_size", r.vocab_size),
        ("num_tokens", r.num_tokens),
        ("num_tensor_parallel_workers", r.num_tensor_parallel_workers),
    ];
    for (column, v) in sizes {
        if v <= 0 || v > i64::from(u32::MAX) {
            return Err(table_error(
                origin,
                line,
                column,
                format!("{v} must be a positive size"),
            ));
        }
    }
    if !r.use_gated_mlp.eq_ignore_ascii_case("true") {
        return Err(table_error(
            origin,
            line,
            "use_gated_mlp",
            format!(
                "'{}': only gated (Llama-style) MLPs are supported, use_gated_mlp must be True",
                r.use_gated_mlp
            ),
        ));
    }
    let config = format!(
        r#"{{"model_type": "llama", "num_hidden_layers": 1, "hidden_size": {}, "num_attention_heads": {}, "num_key_value_heads": {}, "intermediate_size": {}, "vocab_size": {}, "max_position_embeddings": 4096, "torch_dtype": "float16"}}"#,
        r.n_embd, r.n_head, r.n_kv_head, r.n_expanded_embd, r.vocab_size
    );
    let at = format!("{origin}:{line}");
    let spec = ModelSpec::from_hf_config_str(&config, "table row", &at)?;
    spec.sharded(r.num_tensor_parallel_workers as u32)
        .map_err(|e| match e {
            kvplan_vocab::Error::InvalidValue { message, .. } => {
                table_error(origin, line, "num_tensor_parallel_workers", message)
            }
            other => other.into(),
        })
}

/// A measured table's text (a read failure is the planner's I/O error naming the file).
pub(crate) fn read_table_text(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|e| {
        Error::Planner(kvplan_vocab::Error::Io {
            path: path.to_path_buf(),
            source: e,
        })
    })
}

/// The rows of a measured table's CSV text (fields trimmed), each with its line in the file; a
/// row the reader cannot read is an error naming the table and the line.
pub(crate) struct TableRows<'a> {
    reader: csv::Reader<&'a [u8]>,
    record: csv::StringRecord,
    lines: kvplan_workloads::lines::LineCounter<'a>,
    origin: &'a str,
}

impl<'a> TableRows<'a> {
    /// The rows of `text` and its header row; `origin` names the table in errors.
    pub(crate) fn new(text: &'a str, origin: &'a str) -> Result<(Self, csv::StringRecord), Error> {
        let mut reader = csv::ReaderBuilder::new()
            .trim(csv::Trim::All)
            .from_reader(text.as_bytes());
        let headers = reader
            .headers()
            .map_err(|e| table_error(origin, 1, "", e.to_string()))?
            .clone();
        let rows = TableRows {
            reader,
            record: csv::StringRecord::new(),
            lines: kvplan_workloads::lines::LineCounter::new(text),
            origin,
        };
        Ok((rows, headers))
    }

    /// The next row and its line, `None` after the last.
    pub(crate) fn next_row(&mut self) -> Result<Option<(&csv::StringRecord, u64)>, Error> {
        match self.reader.read_record(&mut self.record) {
            Ok(false) => return Ok(None),
            Ok(true) => {}
            Err(e) => {
                let line = e.position().map_or(0, |p| self.lines.line_at(p.byte()));
                let why = match e.kind() {
                    csv::ErrorKind::UnequalLengths {
                        expected_len, len, ..
                    } => format!("{len} fields, but the header has {expected_len}"),
                    _ => e.to_string(),
                };
                return Err(table_error(self.origin, line, "", why));
            }
        }
        let line = self
            .record
            .position()
            .map_or(0, |p| self.lines.line_at(p.byte()));
        Ok(Some((&self.record, line)))
    }
}

impl MeasuredTable {
    /// Reads a Vidur-format CSV.
    pub fn read(path: &Path) -> Result<Self, Error> {
        Self::parse(&read_table_text(path)?, &path.display().to_string())
    }

    /// Parses a Vidur-format CSV; `origin` names it in errors (`origin:line: column: why`).
    pub fn parse(text: &str, origin: &str) -> Result<Self, Error> {
        let (mut rows, headers) = TableRows::new(text, origin)?;
        let needed = SIZE_COLUMNS
            .iter()
            .map(|s| s.to_string())
            .chain(Column::ALL.iter().map(|c| format!("{}_ms", c.as_str())));
        for name in needed {
            if !headers.iter().any(|h| h == name) {
                return Err(table_error(
                    origin,
                    1,
                    &name,
                    "missing column (a Vidur profiling CSV has n_head, ..., num_tokens, \
                     num_tensor_parallel_workers and one *_ms column per op)",
                ));
            }
        }
        let mut samples = Vec::new();
        while let Some((record, line)) = rows.next_row()? {
            let raw: RawRow = record.deserialize(Some(&headers)).map_err(|e| {
                let (column, why) = match e.kind() {
                    csv::ErrorKind::Deserialize { err, .. } => (
                        err.field()
                            .and_then(|i| headers.get(i as usize))
                            .unwrap_or("")
                            .to_string(),
                        err.kind().to_string(),
                    ),
                    other => (String::new(), format!("{other:?}")),
                };
                table_error(origin, line, &column, why)
            })?;
            let spec = row_spec(&raw, origin, line)?;
            let tokens = raw.num_tokens as u32;
            let ops = forward_ops(&spec, &[(tokens, tokens)], 1);
            for (column, ms) in raw.times() {
                if !(ms.is_finite() && ms > 0.0) {
                    return Err(table_error(
                        origin,
                        line,
                        &format!("{}_ms", column.as_str()),
                        format!("{ms} must be a positive time in milliseconds"),
                    ));
                }
                let op = match column {
                    Column::Emb => embed_op(&spec, 1, tokens),
                    c => {
                        ops.iter()
                            .find(|(name, _)| *name == c.op_name())
                            .ok_or_else(|| {
                                table_error(
                                    origin,
                                    line,
                                    &format!("{}_ms", c.as_str()),
                                    format!("the model has no {} op", c.op_name()),
                                )
                            })?
                            .1
                    }
                };
                samples.push(Sample {
                    line,
                    column,
                    tp: spec.tensor_parallel,
                    tokens,
                    op,
                    seconds: ms * 1e-3,
                });
            }
        }
        if samples.is_empty() {
            return Err(table_error(origin, 2, "", "no rows"));
        }
        Ok(MeasuredTable {
            origin: origin.to_string(),
            samples,
        })
    }
}

/// Device seconds kvplan's kernel model gives a sample's op (memory-bound kinds at the sample's
/// row width).
pub fn device_seconds(k: &KernelModel, s: &Sample) -> f64 {
    match s.op {
        OpKind::Gemm {
            m,
            n,
            k: kk,
            batch,
            dtype,
            ..
        } => k.gemm_device(m, n, kk, batch, dtype),
        OpKind::Elementwise { kind, bytes, .. } => k.mem_device(kind, bytes, Some(s.tokens)),
        _ => unreachable!("table columns are GEMMs and memory-bound kernels"),
    }
}

/// The fitted models' device seconds (no tables).
fn model_seconds(k: &KernelModel, s: &Sample) -> f64 {
    match s.op {
        OpKind::Gemm {
            m,
            n,
            k: kk,
            batch,
            dtype,
            ..
        } => k.gemm_model(m, n, kk, batch, dtype),
        OpKind::Elementwise { kind, bytes, .. } => k.mem_model(kind, bytes as f64),
        _ => unreachable!("table columns are GEMMs and memory-bound kernels"),
    }
}

/// Median of a non-empty slice (sorted in place).
pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        0.5 * (v[n / 2 - 1] + v[n / 2])
    }
}

/// Nearest-rank 90th percentile of a non-empty slice (sorted in place).
pub fn p90(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let rank = ((0.9 * v.len() as f64).ceil() as usize).max(1);
    v[rank - 1]
}

/// The robust loss: over column × bucket groups, `median + 0.5 * p90` of `|ln(pred / meas)|`.
fn robust_loss(samples: &[Sample], pred: impl Fn(&Sample) -> f64) -> f64 {
    let mut groups: Vec<((Column, usize), Vec<f64>)> = Vec::new();
    for s in samples {
        let key = (s.column, bucket(s.tokens));
        let p = pred(s);
        let e = if p.is_finite() && p > 0.0 {
            (p / s.seconds).ln().abs()
        } else {
            1e3
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(e),
            None => groups.push((key, vec![e])),
        }
    }
    groups
        .iter_mut()
        .map(|(_, v)| median(v) + 0.5 * p90(v))
        .sum()
}

pub(crate) fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

pub(crate) fn logit(p: f64) -> f64 {
    (p / (1.0 - p)).ln()
}

/// `v` to 4 significant digits (profiles stay readable; the fit's noise is larger).
pub(crate) fn round4(v: f64) -> f64 {
    if v == 0.0 || !v.is_finite() {
        return v;
    }
    let scale = 10f64.powi(3 - v.abs().log10().floor() as i32);
    (v * scale).round() / scale
}

/// What the fit keeps from outside the table.
#[derive(Debug, Clone)]
pub struct FitOptions {
    /// Streaming multiprocessors (the GEMM model's wave quantisation).
    pub sms: u32,
    /// Launch interval, microseconds.
    pub launch_us: f64,
    /// The section's `source`.
    pub source: String,
    /// Attention (not in the table).
    pub attention: AttentionFit,
    /// All-reduce (not in the table).
    pub allreduce: AllReduceFit,
    /// Other memory-bound kernels (not in the table).
    pub other: MemFit,
}

impl FitOptions {
    /// Keeps `base`'s attention, all-reduce, other kernels and launch interval (its `[kernels]`,
    /// else the derived ones), with `sms` and `source`.
    pub fn from_base(base: &HardwareProfile, sms: u32, source: String) -> Self {
        let (k, launch_us) = match &base.kernels {
            Some(k) => (k.clone(), k.launch_us),
            None => (
                kvplan_vocab::cost::derived_kernels(base),
                base.gpu.kernel_overhead_s * 1e6,
            ),
        };
        FitOptions {
            sms,
            launch_us,
            source,
            attention: k.attention,
            allreduce: k.allreduce,
            other: k.other,
        }
    }
}

/// The hardware preset a measured table's file name names (Vidur names its tables after the
/// GPU: `a100_...`, `h100_...`).
pub fn base_from_file_name(file_name: &str) -> Option<&'static str> {
    let lower = file_name.to_ascii_lowercase();
    if lower.starts_with("a100") {
        Some("a100-80g-sxm")
    } else if lower.starts_with("h100") {
        Some("h100-sxm")
    } else {
        None
    }
}

/// The model preset a table's file name contains (the longest name that matches).
pub fn model_from_file_name(file_name: &str) -> Option<String> {
    let lower = file_name.to_ascii_lowercase();
    ModelSpec::preset_names()
        .into_iter()
        .filter(|n| lower.contains(n.as_str()))
        .max_by_key(|n| n.len())
}

/// The profile TOML text of `base_name`: a preset's file, or the file at that path.
pub fn base_text(base_name: &str) -> std::io::Result<String> {
    match HardwareProfile::preset_text(base_name) {
        Ok(t) if !base_name.contains(['/', '.']) => Ok(t.to_string()),
        _ => std::fs::read_to_string(base_name),
    }
}

/// The streaming multiprocessors of a known GPU name (A100: 108, H100/H200 SXM: 132, H100
/// PCIe: 114).
pub fn default_sms(gpu_name: &str) -> Option<u32> {
    let n = gpu_name.to_ascii_uppercase();
    if n.contains("A100") {
        Some(108)
    } else if n.contains("H100") && n.contains("PCIE") {
        Some(114)
    } else if n.contains("H100") || n.contains("H200") {
        Some(132)
    } else {
        None
    }
}

fn peaks(hw: &HardwareProfile) -> [f64; DType::COUNT] {
    DType::ALL.map(|d| hw.gpu.peak_flops.get(d))
}

/// Fits a `[kernels]` section to `samples` on `hw` (its HBM bandwidth and peak FLOP/s).
pub fn fit_kernels(
    samples: &[Sample],
    hw: &HardwareProfile,
    opts: &FitOptions,
) -> Result<KernelsSection, Error> {
    if samples.is_empty() {
        return Err(Error::Fit {
            what: "kernel table".into(),
            why: "no measurements".into(),
        });
    }
    let peak = peaks(hw);
    let hbm = hw.gpu.mem_bandwidth;
    let mem0 = MemFit {
        floor_us: 2.0,
        efficiency: 0.7,
    };
    let mut section = KernelsSection {
        source: opts.source.clone(),
        launch_us: opts.launch_us,
        gemm: GemmFit {
            floor_us: 2.0,
            latency_us: 2.0,
            memory_efficiency: 0.8,
            compute_efficiency: 0.7,
            tile_exponent: Some(0.3),
            sms: Some(opts.sms),
            blend: Some(4.0),
        },
        norm: mem0,
        activation: mem0,
        rope: mem0,
        add: mem0,
        embedding: mem0,
        other: opts.other,
        attention: opts.attention,
        allreduce: opts.allreduce,
        tables: Vec::new(),
    };

    // GEMMs: six parameters in an unconstrained space.
    let gemms: Vec<Sample> = samples
        .iter()
        .filter(|s| s.column.elem().is_none())
        .cloned()
        .collect();
    if !gemms.is_empty() {
        let decode = |x: &[f64]| GemmFit {
            floor_us: x[0].exp(),
            latency_us: x[1].exp(),
            memory_efficiency: sigmoid(x[2]),
            compute_efficiency: sigmoid(x[3]),
            tile_exponent: Some(2.0 * x[4].tanh()),
            sms: Some(opts.sms),
            blend: Some((1.0 + x[5].exp()).min(64.0)),
        };
        let base = section.clone();
        let loss = |x: &[f64]| {
            let mut s = base.clone();
            s.gemm = decode(x);
            let k = KernelModel::new(s, peak, hbm);
            robust_loss(&gemms, |p| model_seconds(&k, p))
        };
        let x0 = [
            2f64.ln(),
            2f64.ln(),
            logit(0.8),
            logit(0.7),
            (0.15f64).atanh(),
            3f64.ln(),
        ];
        let (x, _) = nelder_mead(&loss, &x0, 0.5, 400, 3);
        let g = decode(&x);
        section.gemm = GemmFit {
            floor_us: round4(g.floor_us),
            latency_us: round4(g.latency_us),
            memory_efficiency: round4(g.memory_efficiency),
            compute_efficiency: round4(g.compute_efficiency),
            tile_exponent: g.tile_exponent.map(round4),
            sms: g.sms,
            blend: g.blend.map(round4),
        };
    }

    // Memory-bound kinds: floor and efficiency each.
    for kind in ElemKind::ALL {
        let of_kind: Vec<Sample> = samples
            .iter()
            .filter(|s| s.column.elem() == Some(kind))
            .cloned()
            .collect();
        if of_kind.is_empty() {
            continue;
        }
        let decode = |x: &[f64]| MemFit {
            floor_us: x[0].exp(),
            efficiency: 4.0 * sigmoid(x[1]),
        };
        let base = section.clone();
        let loss = |x: &[f64]| {
            let mut s = base.clone();
            *s.mem_mut(kind) = decode(x);
            let k = KernelModel::new(s, peak, hbm);
            robust_loss(&of_kind, |p| model_seconds(&k, p))
        };
        let (x, _) = nelder_mead(&loss, &[2f64.ln(), logit(0.7 / 4.0)], 0.5, 300, 2);
        let m = decode(&x);
        *section.mem_mut(kind) = MemFit {
            floor_us: round4(m.floor_us),
            efficiency: round4(m.efficiency),
        };
    }

    section.tables = grid_tables(samples);
    section.check("fitted kernels").map_err(|e| Error::Fit {
        what: "kernel table".into(),
        why: e.to_string(),
    })?;
    Ok(section)
}

/// One table per GEMM `(n, k)` and per memory-bound kind × row width, on [`token_grid`]: each
/// node the median of the measurements within half a grid step of it (log tokens).
pub fn grid_tables(samples: &[Sample]) -> Vec<KernelTable> {
    // (kind, dtype, n, k, width) -> (tokens, microseconds)
    type Key = (TableKind, DType, u32, u32, u64);
    let mut groups: Vec<(Key, Vec<(u32, f64)>)> = Vec::new();
    for s in samples {
        let key: Key = match s.op {
            OpKind::Gemm { n, k, dtype, .. } => (TableKind::Gemm, dtype, n, k, 0),
            OpKind::Elementwise { kind, bytes, .. } => {
                let t = match kind {
                    ElemKind::Norm => TableKind::Norm,
                    ElemKind::Activation => TableKind::Activation,
                    ElemKind::Rope => TableKind::Rope,
                    ElemKind::Add => TableKind::Add,
                    ElemKind::Embedding => TableKind::Embedding,
                    ElemKind::Other => continue,
                };
                (t, DType::Fp16, 0, 0, bytes / u64::from(s.tokens))
            }
            _ => continue,
        };
        let point = (s.tokens, s.seconds * 1e6);
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(point),
            None => groups.push((key, vec![point])),
        }
    }
    let grid: Vec<f64> = token_grid().iter().map(|&t| f64::from(t).ln()).collect();
    let mut tables = Vec::new();
    for ((kind, dtype, n, k, width), points) in groups {
        let mut out = Vec::new();
        for (i, &g) in grid.iter().enumerate() {
            let below = if i > 0 { g - grid[i - 1] } else { grid[1] - g };
            let above = if i + 1 < grid.len() {
                grid[i + 1] - g
            } else {
                below
            };
            let (lo, hi) = (g - 0.5 * below - 1e-9, g + 0.5 * above + 1e-9);
            let mut near: Vec<f64> = points
                .iter()
                .filter(|(t, _)| {
                    let lt = f64::from(*t).ln();
                    lt >= lo && lt <= hi
                })
                .map(|p| p.1)
                .collect();
            if near.is_empty() {
                continue;
            }
            let us = (median(&mut near) * 1000.0).round() / 1000.0;
            out.push((g.exp().round() as u32, us));
        }
        if !out.is_empty() {
            tables.push(KernelTable {
                kind,
                dtype,
                n,
                k,
                width,
                points: out,
            });
        }
    }
    tables.sort_by_key(|t| (t.kind as u8, t.n, t.k, t.width));
    tables
}

/// Median and p90 of `|pred / meas - 1|` for one group of samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ErrorStat {
    /// Samples in the group.
    pub count: usize,
    /// Median relative error.
    pub median: f64,
    /// 90th percentile relative error.
    pub p90: f64,
}

pub(crate) fn stat(mut errors: Vec<f64>) -> ErrorStat {
    let count = errors.len();
    if count == 0 {
        return ErrorStat {
            count,
            median: f64::NAN,
            p90: f64::NAN,
        };
    }
    ErrorStat {
        count,
        median: median(&mut errors),
        p90: p90(&mut errors),
    }
}

/// Per-column × bucket errors of `k`'s device times on `samples`: `(column, bucket, stat)`.
pub fn op_errors(k: &KernelModel, samples: &[Sample]) -> Vec<(Column, usize, ErrorStat)> {
    let mut out = Vec::new();
    for c in Column::ALL {
        for b in 0..BUCKETS.len() {
            let e: Vec<f64> = samples
                .iter()
                .filter(|s| s.column == c && bucket(s.tokens) == b)
                .map(|s| (device_seconds(k, s) / s.seconds - 1.0).abs())
                .collect();
            if !e.is_empty() {
                out.push((c, b, stat(e)));
            }
        }
    }
    out
}

/// Per CSV row: `(line, tp, tokens, predicted, measured)` seconds of a layer's ops but attention
/// and the all-reduces (the residual add twice).
fn layer_rows(k: &KernelModel, samples: &[Sample]) -> Vec<(u64, u32, u32, f64, f64)> {
    let mut rows: Vec<(u64, u32, u32, f64, f64)> = Vec::new();
    for s in samples {
        let times = f64::from(s.column.per_layer());
        if times == 0.0 {
            continue;
        }
        let (p, m) = (times * device_seconds(k, s), times * s.seconds);
        match rows.iter_mut().find(|r| r.0 == s.line) {
            Some(r) => {
                r.3 += p;
                r.4 += m;
            }
            None => rows.push((s.line, s.tp, s.tokens, p, m)),
        }
    }
    rows
}

/// Per-layer residuals `ln(predicted / measured)` (every op of a layer but attention and the
/// all-reduces, the residual add twice; one per CSV row), in row order: what an error band
/// draws the token-wise kernels' spread from (`kvplan_serve::bands::CostSpread`).
pub fn layer_log_residuals(k: &KernelModel, samples: &[Sample]) -> Vec<f64> {
    (layer_rows(k, samples).iter())
        .filter(|r| r.3 > 0.0 && r.4 > 0.0)
        .map(|r| (r.3 / r.4).ln())
        .collect()
}

/// Per-layer errors (every op of a layer but attention and the all-reduces, the residual add
/// twice; per CSV row) by tensor-parallel degree and bucket: `(tp, bucket, stat)`.
pub fn layer_errors(k: &KernelModel, samples: &[Sample]) -> Vec<(u32, usize, ErrorStat)> {
    let rows = layer_rows(k, samples);
    let mut tps: Vec<u32> = rows.iter().map(|r| r.1).collect();
    tps.sort_unstable();
    tps.dedup();
    let mut out = Vec::new();
    for tp in tps {
        for b in 0..BUCKETS.len() {
            let e: Vec<f64> = rows
                .iter()
                .filter(|r| r.1 == tp && bucket(r.2) == b)
                .map(|r| (r.3 / r.4 - 1.0).abs())
                .collect();
            if !e.is_empty() {
                out.push((tp, b, stat(e)));
            }
        }
    }
    out
}

/// The error report as a text table.
pub fn error_report(k: &KernelModel, samples: &[Sample]) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let mut section = |title: &str, rows: Vec<(String, usize, ErrorStat)>| {
        if !s.is_empty() {
            s.push('\n');
        }
        let _ = writeln!(
            s,
            "{title:<26} {:>9} {:>5} {:>9} {:>9}",
            "tokens", "n", "median", "p90"
        );
        for (name, b, e) in rows {
            let _ = writeln!(
                s,
                "{name:<26} {:>9} {:>5} {:>8.1}% {:>8.1}%",
                format!("{}-{}", BUCKETS[b].0, BUCKETS[b].1),
                e.count,
                100.0 * e.median,
                100.0 * e.p90
            );
        }
    };
    section(
        "op (device time)",
        op_errors(k, samples)
            .into_iter()
            .map(|(c, b, e)| (c.as_str().to_string(), b, e))
            .collect(),
    );
    section(
        "layer (no attention)",
        layer_errors(k, samples)
            .into_iter()
            .map(|(tp, b, e)| (format!("TP {tp}"), b, e))
            .collect(),
    );
    s
}

/// The kernel model of `section` on `hw`.
pub fn kernel_model(section: &KernelsSection, hw: &HardwareProfile) -> KernelModel {
    KernelModel::new(section.clone(), peaks(hw), hw.gpu.mem_bandwidth)
}

/// `[kernels]` as profile TOML, every table header line carrying `# cite` (a preset's numbers
/// must cite their source), the tables the base profile gives (attention, the all-reduce,
/// other kernels) `# inherited` instead.
pub fn kernels_toml(section: &KernelsSection, cite: &str, inherited_note: &str) -> String {
    #[derive(serde::Serialize)]
    struct Wrap<'a> {
        kernels: &'a KernelsSection,
    }
    let text = toml::to_string(&Wrap { kernels: section }).expect("kernels serialize to TOML");
    let mut out = String::new();
    for line in text.lines() {
        out.push_str(line);
        if line.starts_with('[') {
            out.push_str("  # ");
            // Attention, the all-reduce and other kernels are not in a kernel table: they come
            // from the base profile.
            let inherited = [
                "[kernels.other]",
                "[kernels.attention]",
                "[kernels.allreduce]",
            ];
            if inherited.contains(&line.trim()) {
                out.push_str(inherited_note);
            } else {
                out.push_str(cite);
            }
        }
        out.push('\n');
    }
    out
}

/// `profile` (TOML text) without its `[kernels]` tables, then `kernels` appended.
pub fn replace_kernels(profile: &str, kernels: &str) -> String {
    let mut out = String::new();
    let mut skipping = false;
    for line in profile.lines() {
        let t = line.trim_start();
        if t.starts_with('[') {
            let name = t.trim_start_matches('[').trim_start();
            skipping = name.starts_with("kernels]")
                || name.starts_with("kernels.")
                || name.starts_with("kernels ");
        }
        if !skipping {
            out.push_str(line);
            out.push('\n');
        }
    }
    while out.ends_with("\n\n") {
        out.pop();
    }
    out.push('\n');
    out.push_str(kernels);
    out
}
