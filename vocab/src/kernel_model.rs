//! The kernel cost model by shape: a profile's `[kernels]` section.
//!
//! Every kernel's time on the device is a fitted model of its shape, optionally corrected by
//! measured tables over a dense token grid:
//!
//! - **GEMM** `[m,k] x [k,n]`: a memory term `latency + bytes / (hbm * memory_efficiency)` and a
//!   compute term with tile/wave quantisation (the tile among [`TILES`] that finishes first: `waves
//!   = ceil(tiles / sms)`, each wave one tile's FLOPs at the SM's share of peak times
//!   `compute_efficiency * (tile_size / 64)^tile_exponent`), blended as a p-norm
//!   (`(mem^p + comp^p)^(1/p)`, the hard roofline max when `blend` is absent), plus a device
//!   floor;
//! - **memory-bound kinds** (norm, activation, rope, add, embedding, other): `floor + bytes /
//!   (hbm * efficiency)`, each kind with its own floor and efficiency;
//! - **attention**: one kernel per batch ([`AttentionFit`]): the roofline `floor + max(flops /
//!   (peak * prefill_efficiency), bytes / (hbm * decode_efficiency))`, or with `sms` a grid of
//!   work units (FlashAttention's thread blocks, [`crate::attention::AttentionWork`]) run in
//!   rounds over the SMs, each unit at the SM's share of HBM bandwidth and tensor peak;
//! - **all-reduce** (tensor parallelism): `latency + 2 (p-1)/p * bytes / bus_bandwidth` (the ring
//!   algorithm's traffic; NCCL's "bus bandwidth" convention).
//!
//! A kernel's duration on a stream is `max(launch, device time)`: a stream cannot run kernels
//! faster than the host issues them, and a long kernel hides the launches queued behind it.
//!
//! Measured tables (`[[kernels.tables]]`) hold device times of one GEMM shape (`n`, `k`) or one
//! memory-bound kind at one row width (`width` bytes per token) over token counts. A shape that
//! was measured is interpolated in log-log between the grid's token counts; a GEMM shape that
//! was not takes the fitted model times the measured / model ratio of the nearest measured shape
//! at the same token count; a memory-bound kind at another width reads the nearest width's table
//! at the same bytes. Beyond the last measured token count the model's growth continues the
//! table.
//!
//! A profile without `[kernels]` derives one from its `[gpu]` and `[efficiency]` figures that
//! reproduces the plain roofline (`overhead + max(flops / (peak * eff), bytes / (hbm * eff))`);
//! its `[attention]` table, when it has one, replaces the roofline's attention.

use serde::{Deserialize, Serialize};

use crate::attention::{AttentionBatch, AttentionWork, Heads};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::limits::{self, BANDWIDTH, EFFICIENCY, LATENCY};
use crate::quant::WeightFormat;
use crate::schedule::ElemKind;

/// Tile shapes `(rows, cols)` the GEMM model chooses from (the CUTLASS/cuBLAS tensor-core
/// tiles of Ampere and Hopper kernels).
pub const TILES: [(u32, u32); 6] = [
    (256, 128),
    (128, 256),
    (128, 128),
    (64, 128),
    (128, 64),
    (64, 64),
];

/// The token counts a kernel table is measured at: 1, 2, 4, 8, 16, then steps of about x1.25
/// rounded to multiples of 8 (to 1024), 16 (to 2048) and 32 (to 4096), with 24, 512 and 4096
/// included. `kvplan calibrate` measures these, or reads them from a table.
pub fn token_grid() -> Vec<u32> {
    let mut grid = vec![1u32, 2, 4, 8, 16];
    let mut x = 16.0f64;
    loop {
        x *= 1.25;
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
        let v = ((x / q).round() * q) as u32;
        if !grid.contains(&v) {
            grid.push(v);
        }
    }
    for v in [24, 512, 4096] {
        if !grid.contains(&v) {
            grid.push(v);
        }
    }
    grid.sort_unstable();
    grid
}

/// The GEMM model's fitted terms.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GemmFit {
    /// Device floor of any GEMM, microseconds.
    pub floor_us: f64,
    /// Memory term's fixed part (the ramp before weights stream at full rate), microseconds.
    #[serde(default)]
    pub latency_us: f64,
    /// Fraction of HBM bandwidth the weight stream reaches.
    pub memory_efficiency: f64,
    /// Fraction of the SM's tensor-core peak a 64-wide tile reaches.
    pub compute_efficiency: f64,
    /// How tile efficiency grows with tile size: `(harmonic(tm, tn) / 32)^tile_exponent`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tile_exponent: Option<f64>,
    /// Streaming multiprocessors (wave quantisation); absent: no quantisation (plain roofline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sms: Option<u32>,
    /// p of the p-norm blending memory and compute terms; absent: the hard maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blend: Option<f64>,
}

/// A memory-bound kernel kind: `floor + bytes / (hbm * efficiency)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemFit {
    /// Device floor, microseconds.
    pub floor_us: f64,
    /// Fraction of HBM bandwidth.
    pub efficiency: f64,
}

/// One attention kernel over a batch ([`AttentionWork`]).
///
/// Without `sms`, the roofline: `floor + max(flops / (peak * prefill_efficiency), bytes / (hbm *
/// decode_efficiency))`.
///
/// With `sms`, the kernel is a grid of `n` work units (thread blocks: sequence x query head x
/// block of 64 query rows, times FlashAttention-2's split-KV count; a decode batch packs the query
/// heads of a KV head), run about one per SM at a time. A unit streams its mean share of the
/// batch's bytes at the SM's share of HBM bandwidth (`hbm * decode_efficiency / sms`) and
/// computes its mean share of the FLOPs (query rows padded to whole blocks) at the SM's share of
/// tensor peak (`peak * prefill_efficiency / sms`), overlapped, after a fixed `unit_us`:
///
/// `t_unit = unit + max(bytes / n / (hbm * e_d / sms), padded_flops / n / (peak * e_p / sms))`
///
/// and the kernel takes `k = n / sms` rounds of the mean unit plus a tail of `tail` unit-times
/// once the GPU is full, never less than its longest unit (`t_long`, the longest sequence's
/// last block over one split's keys):
///
/// `floor + max(t_long, (k + tail * min(1, k)) * t_unit) + split`
///
/// (`split`: the combine of split-KV partial results, when the kernel splits). Mean work per
/// unit, not the longest, sets the rounds: a GPU's block scheduler hands each SM the next unit as
/// one finishes, so uneven units even out and a batch of uneven sequences costs what a uniform
/// batch of the same totals costs, unless one sequence alone outlasts the rest. Every added field
/// is optional; with none of them this is the roofline above, bit for bit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionFit {
    /// Device floor, microseconds.
    pub floor_us: f64,
    /// Fraction of tensor-core peak in compute-bound (prefill) attention (with `sms`: what one
    /// unit reaches of its SM's share).
    pub prefill_efficiency: f64,
    /// Fraction of HBM bandwidth in memory-bound (decode) attention (with `sms`: what one unit
    /// streams of its SM's share).
    pub decode_efficiency: f64,
    /// Streaming multiprocessors: turns on the work-unit model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sms: Option<u32>,
    /// Fixed time of one work unit (a thread block's prologue and epilogue), microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit_us: Option<f64>,
    /// Unit-times added once the GPU is full: the last units finishing unevenly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail: Option<f64>,
    /// Combining split-KV partial results (a second kernel), microseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split_us: Option<f64>,
}

/// In-kernel KV-cache appends: FlashAttention-2's `flash_attn_with_kvcache` called with the new
/// tokens' `k` and `v` copies them into the cache inside the attention kernel, and every query
/// block copies the new keys it attends to (a benign race, per FlashAttention's source), so a
/// prefill chunk of `q` tokens copies about `q^2 / 128` keys per head. vLLM writes the cache in
/// a separate kernel and never pays this; measurements taken through such a harness (Vidur's
/// profiling of Sarathi's FlashAttention wrapper) do, and a fit must account for it: the copies
/// at a fraction of the SMs' share of HBM bandwidth, and a time per new token and query head.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KvAppend {
    /// Bytes the units copy (read and write), summed over units.
    pub bytes: f64,
    /// Bytes the longest unit copies.
    pub long_bytes: f64,
    /// Fraction of HBM bandwidth the copies run at (per unit: its SM's share).
    pub efficiency: f64,
    /// New tokens times query heads.
    pub tokens: f64,
    /// Time per new token and query head, nanoseconds.
    pub token_ns: f64,
}

/// The fields of one table of a profile: their names in errors (`origin: table.FIELD`) and the
/// range checks every table shares.
struct Fields(String);

impl Fields {
    fn new(origin: &str, table: &str) -> Self {
        Fields(format!("{origin}: {table}"))
    }

    /// `origin: table.field`.
    fn name(&self, field: &str) -> String {
        format!("{}.{field}", self.0)
    }

    /// A latency or overhead in microseconds ([`LATENCY`]).
    fn us(&self, field: &str, v: f64) -> Result<f64> {
        LATENCY.check(self.name(field), v, 1e-6, "us")
    }

    /// A fraction of peak ([`EFFICIENCY`]).
    fn frac(&self, field: &str, v: f64) -> Result<f64> {
        EFFICIENCY.check(self.name(field), v, 1.0, "of peak")
    }
}

impl AttentionFit {
    /// The roofline: a floor, a compute and a memory efficiency, no work-unit model.
    pub fn roofline(floor_us: f64, prefill_efficiency: f64, decode_efficiency: f64) -> Self {
        AttentionFit {
            floor_us,
            prefill_efficiency,
            decode_efficiency,
            sms: None,
            unit_us: None,
            tail: None,
            split_us: None,
        }
    }

    /// Checks every figure; errors name `origin: {table}.FIELD` (`table`: `kernels.attention` or
    /// `attention`).
    pub fn check(&self, origin: &str, table: &str) -> Result<()> {
        let fields = Fields::new(origin, table);
        fields.us("floor_us", self.floor_us)?;
        fields.frac("prefill_efficiency", self.prefill_efficiency)?;
        fields.frac("decode_efficiency", self.decode_efficiency)?;
        if self.sms == Some(0) || self.sms.is_some_and(|s| s > 10_000) {
            return Err(Error::invalid(
                fields.name("sms"),
                self.sms.unwrap_or(0),
                "must be from 1 to 10000 streaming multiprocessors",
            ));
        }
        for (field, v) in [("unit_us", self.unit_us), ("split_us", self.split_us)] {
            if let Some(v) = v {
                fields.us(field, v)?;
            }
        }
        if let Some(t) = self.tail
            && !(t.is_finite() && (0.0..=100.0).contains(&t))
        {
            return Err(Error::invalid(
                fields.name("tail"),
                limits::show(t),
                "must be from 0 to 100 unit-times",
            ));
        }
        let needs_sms = [
            ("unit_us", self.unit_us.is_some()),
            ("tail", self.tail.is_some()),
            ("split_us", self.split_us.is_some()),
        ];
        if self.sms.is_none()
            && let Some((field, _)) = needs_sms.iter().find(|(_, set)| *set)
        {
            return Err(Error::invalid(
                fields.name(field),
                "set without sms",
                "belongs to the work-unit model: give sms (the GPU's streaming multiprocessors) \
                 too, or leave it out",
            ));
        }
        Ok(())
    }

    /// Device seconds of the kernel `w` on a GPU of `secs_per_flop` (at `w.dtype`) and `hbm`
    /// bytes/s. `w` must be cut for this fit's `sms` ([`AttentionWork::new`]).
    #[inline]
    pub fn device_seconds(&self, w: &AttentionWork, secs_per_flop: f64, hbm: f64) -> f64 {
        self.device_seconds_appending(w, secs_per_flop, hbm, None)
    }

    /// [`AttentionFit::device_seconds`] of a kernel that also appends the new tokens' K and V
    /// to the cache ([`KvAppend`]; `None`: it does not, as in vLLM).
    pub fn device_seconds_appending(
        &self,
        w: &AttentionWork,
        secs_per_flop: f64,
        hbm: f64,
        append: Option<&KvAppend>,
    ) -> f64 {
        let core = match self.sms {
            Some(sms) if w.units > 0.0 => {
                let s = f64::from(sms);
                let unit_bw = hbm * self.decode_efficiency / s;
                let unit_spf = secs_per_flop * s / self.prefill_efficiency;
                let fixed = self.unit_us.unwrap_or(0.0) * 1e-6;
                let (mut t_unit, mut t_long) = (
                    fixed + (w.unit_bytes / unit_bw).max(w.unit_flops * unit_spf),
                    fixed + (w.long_bytes / unit_bw).max(w.long_flops * unit_spf),
                );
                if let Some(a) = append {
                    let append_bw = hbm * a.efficiency / s;
                    t_unit += a.bytes / w.units / append_bw;
                    t_long += a.long_bytes / append_bw;
                }
                let k = w.units / s;
                let rounds = k + self.tail.unwrap_or(0.0) * k.min(1.0);
                t_long.max(rounds * t_unit)
            }
            Some(_) => 0.0,
            None => (w.flops * secs_per_flop / self.prefill_efficiency)
                .max(w.bytes / (hbm * self.decode_efficiency)),
        };
        let mut t = self.floor_us * 1e-6 + core;
        if let Some(a) = append {
            t += a.token_ns * 1e-9 * a.tokens;
        }
        if w.splits > 1
            && let Some(c) = self.split_us
        {
            t += c * 1e-6;
        }
        t
    }
}

/// The tensor-parallel all-reduce: `latency + 2 (p-1)/p * bytes / bus bandwidth`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AllReduceFit {
    /// Small-message latency, microseconds.
    pub latency_us: f64,
    /// Bus bandwidth (NCCL's convention), GB/s.
    pub bus_gbps: f64,
}

/// What a measured table times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TableKind {
    /// A GEMM of fixed `n`, `k`.
    Gemm,
    /// RMSNorm.
    Norm,
    /// SiLU-and-multiply.
    Activation,
    /// Rotary embedding.
    Rope,
    /// Residual add.
    Add,
    /// Embedding gather.
    Embedding,
}

impl TableKind {
    /// The memory-bound kind this table times (`None` for GEMMs).
    pub fn elem(self) -> Option<ElemKind> {
        match self {
            TableKind::Gemm => None,
            TableKind::Norm => Some(ElemKind::Norm),
            TableKind::Activation => Some(ElemKind::Activation),
            TableKind::Rope => Some(ElemKind::Rope),
            TableKind::Add => Some(ElemKind::Add),
            TableKind::Embedding => Some(ElemKind::Embedding),
        }
    }
}

/// Measured device times of one kernel shape over token counts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelTable {
    /// What is timed.
    pub kind: TableKind,
    /// Element type (GEMMs; memory-bound tables are fp16 unless stated).
    #[serde(default = "fp16")]
    pub dtype: DType,
    /// GEMM output columns.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub n: u32,
    /// GEMM inner dimension.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub k: u32,
    /// Memory-bound kinds: bytes read plus written per token.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub width: u64,
    /// `[tokens, microseconds]`, tokens strictly increasing.
    pub points: Vec<(u32, f64)>,
}

fn fp16() -> DType {
    DType::Fp16
}
fn is_zero(v: &u32) -> bool {
    *v == 0
}
fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

/// The `[kernels]` section of a profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelsSection {
    /// Where the figures come from (a measured table, `kvplan calibrate`, a datasheet).
    pub source: String,
    /// Host launch interval: no kernel on a stream takes less, microseconds.
    pub launch_us: f64,
    /// GEMMs.
    pub gemm: GemmFit,
    /// RMSNorm / LayerNorm.
    pub norm: MemFit,
    /// FFN activation.
    pub activation: MemFit,
    /// Rotary embedding.
    pub rope: MemFit,
    /// Residual add.
    pub add: MemFit,
    /// Embedding gather.
    pub embedding: MemFit,
    /// Other memory-bound kernels (copies inside the GPU, sampling).
    pub other: MemFit,
    /// Attention.
    pub attention: AttentionFit,
    /// Tensor-parallel all-reduce.
    pub allreduce: AllReduceFit,
    /// Measured device times over the token grid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tables: Vec<KernelTable>,
}

impl KernelsSection {
    /// The fit of a memory-bound kind.
    pub fn mem(&self, kind: ElemKind) -> &MemFit {
        match kind {
            ElemKind::Norm => &self.norm,
            ElemKind::Activation => &self.activation,
            ElemKind::Rope => &self.rope,
            ElemKind::Add => &self.add,
            ElemKind::Embedding => &self.embedding,
            ElemKind::Other => &self.other,
        }
    }

    /// Mutable fit of a memory-bound kind.
    pub fn mem_mut(&mut self, kind: ElemKind) -> &mut MemFit {
        match kind {
            ElemKind::Norm => &mut self.norm,
            ElemKind::Activation => &mut self.activation,
            ElemKind::Rope => &mut self.rope,
            ElemKind::Add => &mut self.add,
            ElemKind::Embedding => &mut self.embedding,
            ElemKind::Other => &mut self.other,
        }
    }

    /// Checks every figure (`origin: kernels.FIELD` in errors).
    pub fn check(&self, origin: &str) -> Result<()> {
        let fields = Fields::new(origin, "kernels");
        fields.us("launch_us", self.launch_us)?;
        let g = &self.gemm;
        fields.us("gemm.floor_us", g.floor_us)?;
        fields.us("gemm.latency_us", g.latency_us)?;
        fields.frac("gemm.memory_efficiency", g.memory_efficiency)?;
        fields.frac("gemm.compute_efficiency", g.compute_efficiency)?;
        if let Some(e) = g.tile_exponent
            && !(e.is_finite() && (-2.0..=2.0).contains(&e))
        {
            return Err(Error::invalid(
                fields.name("gemm.tile_exponent"),
                limits::show(e),
                "must be from -2 to 2",
            ));
        }
        if g.sms == Some(0) || g.sms.is_some_and(|s| s > 10_000) {
            return Err(Error::invalid(
                fields.name("gemm.sms"),
                g.sms.unwrap_or(0),
                "must be from 1 to 10000 streaming multiprocessors",
            ));
        }
        if let Some(p) = g.blend
            && !(p.is_finite() && (1.0..=64.0).contains(&p))
        {
            return Err(Error::invalid(
                fields.name("gemm.blend"),
                limits::show(p),
                "must be from 1 to 64 (the p of a p-norm; leave it out for the hard maximum)",
            ));
        }
        for kind in ElemKind::ALL {
            let m = self.mem(kind);
            fields.us(&format!("{}.floor_us", kind.as_str()), m.floor_us)?;
            // Memory-bound kernels that stay in L2 can beat HBM: allow up to 4x of peak.
            if !(m.efficiency.is_finite() && m.efficiency > 0.0 && m.efficiency <= 4.0) {
                return Err(Error::invalid(
                    fields.name(&format!("{}.efficiency", kind.as_str())),
                    limits::show(m.efficiency),
                    "must be more than 0, at most 4 (a fraction of HBM bandwidth; above 1 when the \
                     data stays in L2)",
                ));
            }
        }
        self.attention.check(origin, "kernels.attention")?;
        fields.us("allreduce.latency_us", self.allreduce.latency_us)?;
        BANDWIDTH.check(
            fields.name("allreduce.bus_gbps"),
            self.allreduce.bus_gbps,
            1e9,
            "GB/s",
        )?;
        for (i, t) in self.tables.iter().enumerate() {
            let field = fields.name(&format!("tables[{i}]"));
            match t.kind {
                TableKind::Gemm if t.n == 0 || t.k == 0 => {
                    return Err(Error::invalid(
                        field,
                        format!("n={} k={}", t.n, t.k),
                        "a GEMM table needs positive n and k",
                    ));
                }
                TableKind::Gemm => {}
                _ if t.width == 0 => {
                    return Err(Error::invalid(
                        field,
                        "width=0",
                        "a memory-bound table needs its bytes per token in `width`",
                    ));
                }
                _ => {}
            }
            if t.points.is_empty() {
                return Err(Error::invalid(
                    format!("{field}.points"),
                    "[]",
                    "needs at least one [tokens, microseconds] point",
                ));
            }
            for (j, &(tokens, us_)) in t.points.iter().enumerate() {
                let ok_time = us_.is_finite() && us_ > 0.0 && us_ <= 3.6e9;
                if tokens == 0 || !ok_time || (j > 0 && tokens <= t.points[j - 1].0) {
                    return Err(Error::invalid(
                        format!("{field}.points[{j}]"),
                        format!("[{tokens}, {}]", limits::show(us_)),
                        "tokens must be positive and increasing, microseconds more than 0",
                    ));
                }
            }
        }
        Ok(())
    }
}

/// A [`KernelsSection`] ready to evaluate: tables as log-log curves.
#[derive(Debug, Clone)]
pub struct KernelModel {
    section: KernelsSection,
    /// Seconds per FLOP at peak, per dtype.
    peak: [f64; DType::COUNT],
    /// Seconds per FLOP at the fp8 tensor peak, where the GPU has one (fp8-weight GEMMs).
    fp8_peak: Option<f64>,
    /// HBM bytes per second.
    hbm: f64,
    gemm_tables: Vec<GemmCurve>,
    mem_tables: [Vec<MemCurve>; 6],
    /// Each of [`TILES`]' efficiency: `compute_efficiency * (harmonic / 32)^tile_exponent`.
    tile_efficiency: [f64; TILES.len()],
}

#[derive(Debug, Clone)]
struct GemmCurve {
    dtype: DType,
    n: u32,
    k: u32,
    ln_n: f64,
    ln_k: f64,
    curve: Vec<(f64, f64)>,
}

#[derive(Debug, Clone)]
struct MemCurve {
    width: u64,
    curve: Vec<(f64, f64)>,
}

/// `(ln tokens, ln seconds)` of a table.
fn log_curve(points: &[(u32, f64)]) -> Vec<(f64, f64)> {
    points
        .iter()
        .map(|&(t, us)| (f64::from(t).ln(), (us * 1e-6).ln()))
        .collect()
}

/// Interpolates `curve` at `ln x`; `None` beyond its last point (the caller extrapolates).
fn interpolate(curve: &[(f64, f64)], lx: f64) -> Option<f64> {
    let (x0, y0) = curve[0];
    if lx <= x0 {
        return Some(y0.exp());
    }
    let i = curve.partition_point(|p| p.0 < lx);
    if i >= curve.len() {
        return None;
    }
    let (a, b) = (curve[i - 1], curve[i]);
    Some((a.1 + (b.1 - a.1) * (lx - a.0) / (b.0 - a.0)).exp())
}

fn last(curve: &[(f64, f64)]) -> (f64, f64) {
    let (x, y) = curve[curve.len() - 1];
    (x.exp(), y.exp())
}

impl KernelModel {
    /// Builds the model; `peak_flops[d]` is the peak FLOP/s of dtype `d`, `hbm` bytes/s.
    pub fn new(section: KernelsSection, peak_flops: [f64; DType::COUNT], hbm: f64) -> Self {
        let gemm_tables = section
            .tables
            .iter()
            .filter(|t| t.kind == TableKind::Gemm)
            .map(|t| GemmCurve {
                dtype: t.dtype,
                n: t.n,
                k: t.k,
                ln_n: f64::from(t.n).ln(),
                ln_k: f64::from(t.k).ln(),
                curve: log_curve(&t.points),
            })
            .collect();
        let mut mem_tables: [Vec<MemCurve>; 6] = Default::default();
        for t in &section.tables {
            if let Some(kind) = t.kind.elem() {
                mem_tables[kind.index()].push(MemCurve {
                    width: t.width,
                    curve: log_curve(&t.points),
                });
            }
        }
        let g = section.gemm;
        let tile_efficiency = TILES.map(|(tm, tn)| {
            let harmonic = f64::from(tm * tn) / f64::from(tm + tn);
            g.compute_efficiency * (harmonic / 32.0).powf(g.tile_exponent.unwrap_or(0.0))
        });
        KernelModel {
            tile_efficiency,
            section,
            peak: peak_flops.map(|p| 1.0 / p),
            fp8_peak: None,
            hbm,
            gemm_tables,
            mem_tables,
        }
    }

    /// The model with an fp8 tensor peak of `flops` FLOP/s (`None`: fp8-weight GEMMs run at
    /// the 16-bit rate, as vLLM's weight-only Marlin path does).
    pub fn with_fp8_peak(mut self, flops: Option<f64>) -> Self {
        self.fp8_peak = flops.filter(|f| *f > 0.0).map(|f| 1.0 / f);
        self
    }

    /// Device seconds of `batch` GEMMs with weights stored as `weights`: dense, what
    /// [`KernelModel::gemm_device`] gives; quantised, that time (measured tables included)
    /// scaled by the fitted model's quantised / dense ratio at this shape: the weight bytes at
    /// their own size, fp8 weights at the fp8 peak where there is one, 4-bit weights at the
    /// 16-bit rate with the compute term raised by
    /// [`crate::quant::INT4_DEQUANT_OVERHEAD`].
    pub fn gemm_device_weights(
        &self,
        m: u32,
        n: u32,
        k: u32,
        batch: u32,
        dtype: DType,
        weights: WeightFormat,
    ) -> f64 {
        let dense = self.gemm_device(m, n, k, batch, dtype);
        if weights.is_dense() {
            return dense;
        }
        dense * self.gemm_model_with(m, n, k, batch, dtype, weights)
            / self.gemm_model(m, n, k, batch, dtype)
    }

    /// The section this model evaluates.
    pub fn section(&self) -> &KernelsSection {
        &self.section
    }

    /// Launch interval, seconds.
    #[inline]
    pub fn launch_s(&self) -> f64 {
        self.section.launch_us * 1e-6
    }

    /// The fitted GEMM model's device seconds for `batch` GEMMs `[m,k] x [k,n]` (no tables).
    pub fn gemm_model(&self, m: u32, n: u32, k: u32, batch: u32, dtype: DType) -> f64 {
        self.gemm_model_with(m, n, k, batch, dtype, WeightFormat::Dense)
    }

    /// [`KernelModel::gemm_model`] with the weights stored as `weights`.
    pub fn gemm_model_with(
        &self,
        m: u32,
        n: u32,
        k: u32,
        batch: u32,
        dtype: DType,
        weights: WeightFormat,
    ) -> f64 {
        let g = &self.section.gemm;
        let (mf, nf, kf, bf) = (
            f64::from(m),
            f64::from(n),
            f64::from(k),
            f64::from(batch.max(1)),
        );
        let bytes = if weights.is_dense() {
            (mf * kf + kf * nf + mf * nf) * bf * dtype.bytes() as f64
        } else {
            crate::schedule::gemm_bytes(m, n, k, batch.max(1), dtype, weights)
        };
        let mem = g.latency_us * 1e-6 + bytes / (self.hbm * g.memory_efficiency);
        let spf = match (weights, self.fp8_peak) {
            (WeightFormat::Fp8, Some(p)) => p,
            (WeightFormat::Int4G128, _) => {
                self.peak[dtype.index()] * crate::quant::INT4_DEQUANT_OVERHEAD
            }
            _ => self.peak[dtype.index()],
        };
        let comp = match g.sms {
            None => 2.0 * mf * nf * kf * bf * spf / g.compute_efficiency,
            Some(sms) => {
                let sm_spf = spf * f64::from(sms);
                TILES
                    .iter()
                    .zip(self.tile_efficiency)
                    .map(|(&(tm, tn), eff)| {
                        let tiles = u64::from(m.div_ceil(tm))
                            * u64::from(n.div_ceil(tn))
                            * u64::from(batch.max(1));
                        let waves = tiles.div_ceil(u64::from(sms)) as f64;
                        waves * 2.0 * f64::from(tm) * f64::from(tn) * kf * sm_spf / eff
                    })
                    .fold(f64::INFINITY, f64::min)
            }
        };
        let work = match g.blend {
            None => mem.max(comp),
            Some(p) => (mem.powf(p) + comp.powf(p)).powf(1.0 / p),
        };
        g.floor_us * 1e-6 + work
    }

    /// Device seconds of `batch` GEMMs `[m,k] x [k,n]`: a measured shape's table, else the
    /// model corrected by the nearest measured shape's ratio. A batched GEMM (a fused MoE
    /// kernel's experts, one GEMM per expert hit) takes the fitted model alone: its bytes are
    /// `batch × (mk + kn + mn)` and its tiles `batch` times one GEMM's, so its time follows the
    /// experts' weights; the tables measured single GEMMs.
    pub fn gemm_device(&self, m: u32, n: u32, k: u32, batch: u32, dtype: DType) -> f64 {
        let model = self.gemm_model(m, n, k, batch, dtype);
        if batch > 1 {
            return model;
        }
        // The two measured shapes nearest in (log n, log k).
        let (ln, lk) = (f64::from(n).ln(), f64::from(k).ln());
        let distance = |c: &GemmCurve| (c.ln_n - ln).abs() + (c.ln_k - lk).abs();
        let mut near: [Option<(f64, &GemmCurve)>; 2] = [None, None];
        for c in self.gemm_tables.iter().filter(|c| c.dtype == dtype) {
            let d = distance(c);
            if near[0].is_none_or(|(d0, _)| d < d0) {
                near[1] = near[0];
                near[0] = Some((d, c));
            } else if near[1].is_none_or(|(d1, _)| d < d1) {
                near[1] = Some((d, c));
            }
        }
        let Some((d0, c0)) = near[0] else {
            return model;
        };
        if d0 == 0.0 {
            return self.gemm_table_time(c0, m);
        }
        // Elsewhere: the model, times the measured / model ratio of the nearest shapes at these
        // rows (geometric mean weighted by inverse distance).
        let ln_ratio = |c: &GemmCurve| {
            (self.gemm_table_time(c, m) / self.gemm_model(m, c.n, c.k, 1, dtype)).ln()
        };
        let ratio = match near[1] {
            None => ln_ratio(c0).exp(),
            Some((d1, c1)) => {
                let (w0, w1) = (1.0 / d0, 1.0 / d1);
                ((w0 * ln_ratio(c0) + w1 * ln_ratio(c1)) / (w0 + w1)).exp()
            }
        };
        model * ratio
    }

    /// A measured GEMM shape's time at `m` rows: the table, and beyond its last row count the
    /// model's growth from there.
    fn gemm_table_time(&self, c: &GemmCurve, m: u32) -> f64 {
        match interpolate(&c.curve, f64::from(m.max(1)).ln()) {
            Some(t) => t,
            None => {
                let (x, t) = last(&c.curve);
                t * self.gemm_model(m, c.n, c.k, 1, c.dtype)
                    / self.gemm_model(x.round() as u32, c.n, c.k, 1, c.dtype)
            }
        }
    }

    /// The fitted model's device seconds of a memory-bound kernel (no tables).
    pub fn mem_model(&self, kind: ElemKind, bytes: f64) -> f64 {
        let f = self.section.mem(kind);
        f.floor_us * 1e-6 + bytes / (self.hbm * f.efficiency)
    }

    /// Device seconds of a memory-bound kernel over `bytes`: the kind's table nearest in width
    /// (at `tokens` rows of `bytes / tokens`), else the fitted model.
    pub fn mem_device(&self, kind: ElemKind, bytes: u64, tokens: Option<u32>) -> f64 {
        let b = bytes as f64;
        let tables = &self.mem_tables[kind.index()];
        if bytes == 0 || tables.is_empty() {
            return self.mem_model(kind, b);
        }
        let rows = tokens.filter(|&t| t > 0);
        // The nearest measured width, read at the same bytes. (Interpolating between the two
        // widths around an unmeasured one, at equal rows or bytes, was tried on a held-out
        // tensor-parallel degree of the measured tables: better for prefill-sized activations,
        // worse below 256 rows, and no better per layer.)
        let near = match rows {
            Some(r) => {
                let w = (b / f64::from(r)).ln();
                tables
                    .iter()
                    .min_by(|x, y| {
                        let d = |c: &MemCurve| ((c.width as f64).ln() - w).abs();
                        d(x).total_cmp(&d(y))
                    })
                    .expect("non-empty")
            }
            None => tables.iter().max_by_key(|c| c.width).expect("non-empty"),
        };
        self.mem_table_time(kind, near, b)
    }

    /// A memory-bound table's time for `bytes`, read at the rows of its width that move them;
    /// below one row the model's share, beyond the last row count the model's growth.
    fn mem_table_time(&self, kind: ElemKind, c: &MemCurve, bytes: f64) -> f64 {
        let rows = bytes / c.width as f64;
        match interpolate(&c.curve, rows.max(1.0).ln()) {
            // From one row up this is `t` (then `t * rows >= t`).
            Some(t) => t.min(self.mem_model(kind, bytes).max(t * rows)),
            None => {
                let (x, t) = last(&c.curve);
                t * self.mem_model(kind, bytes) / self.mem_model(kind, x * c.width as f64)
            }
        }
    }

    /// Device seconds of one attention kernel over `batch` (see [`AttentionFit`]).
    pub fn attention_batch_device(&self, batch: &AttentionBatch, heads: &Heads) -> f64 {
        let w = AttentionWork::new(batch, heads, self.section.attention.sms);
        self.attention_work_device(&w)
    }

    /// Device seconds of an attention kernel's work, cut for this model's `attention.sms`
    /// ([`AttentionWork::new`]).
    #[inline]
    pub fn attention_work_device(&self, w: &AttentionWork) -> f64 {
        self.section
            .attention
            .device_seconds(w, self.peak[w.dtype.index()], self.hbm)
    }

    /// HBM bytes per second.
    pub fn hbm(&self) -> f64 {
        self.hbm
    }

    /// Seconds per FLOP at peak for `dtype`.
    pub fn secs_per_flop(&self, dtype: DType) -> f64 {
        self.peak[dtype.index()]
    }

    /// Seconds of an all-reduce of `bytes` per rank over `ranks` GPUs (0 for one rank).
    pub fn allreduce(&self, bytes: u64, ranks: u16) -> f64 {
        if ranks <= 1 || bytes == 0 {
            return 0.0;
        }
        let a = &self.section.allreduce;
        let p = f64::from(ranks);
        a.latency_us * 1e-6 + 2.0 * (p - 1.0) / p * bytes as f64 / (a.bus_gbps * 1e9)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_is_about_x1_25_and_includes_the_named_points() {
        let g = token_grid();
        for v in [1, 2, 4, 8, 16, 24, 512, 4096] {
            assert!(g.contains(&v), "{v} missing from {g:?}");
        }
        for w in g.windows(2).skip(5) {
            let r = f64::from(w[1]) / f64::from(w[0]);
            assert!(r > 1.0 && r < 1.45, "{w:?}");
        }
        assert!(g.len() >= 28 && g.len() <= 34, "{}", g.len());
    }
}
