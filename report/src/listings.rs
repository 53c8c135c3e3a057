//! The presets listings: models (with their sizes) and hardware profiles, as a table, CSV
//! rows or JSON.

use kvplan_vocab::{HardwareProfile, ModelSpec};
use serde::Serialize;

use crate::{Error, Format, gib, listing};

#[derive(Serialize)]
struct ModelRow<'a> {
    #[serde(flatten)]
    spec: &'a ModelSpec,
    params: u64,
    weight_bytes: u64,
    kv_bytes_per_token: u64,
}

/// The models `specs` listed; `footer` after a table of all of them (`None`: one model asked for).
pub fn models(specs: &[ModelSpec], format: Format, footer: Option<&str>) -> Result<String, Error> {
    let rows: Vec<ModelRow> = specs
        .iter()
        .map(|s| ModelRow {
            spec: s,
            params: s.params(),
            weight_bytes: s.weight_bytes(),
            kv_bytes_per_token: s.kv_bytes_per_token(),
        })
        .collect();
    let header = [
        "model", "family", "layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab",
        "dtype", "params", "weights", "kv/token",
    ];
    let csv_header = [
        "model",
        "family",
        "layers",
        "hidden",
        "heads",
        "kv_heads",
        "head_dim",
        "ffn",
        "vocab",
        "dtype",
        "params",
        "weight_bytes",
        "kv_bytes_per_token",
    ];
    let cells = |r: &ModelRow, plain: bool| -> Vec<String> {
        let s = r.spec;
        let mut v = vec![
            s.name.clone(),
            format!("{:?}", s.family).to_lowercase(),
            s.num_layers.to_string(),
            s.hidden.to_string(),
            s.num_heads.to_string(),
            s.num_kv_heads.to_string(),
            s.head_dim.to_string(),
            s.ffn_dim.to_string(),
            s.vocab.to_string(),
            s.dtype.to_string(),
        ];
        if plain {
            v.extend([
                r.params.to_string(),
                r.weight_bytes.to_string(),
                r.kv_bytes_per_token.to_string(),
            ]);
        } else {
            v.extend([
                format!("{:.2}B", r.params as f64 / 1e9),
                gib(r.weight_bytes),
                format!("{} KiB", r.kv_bytes_per_token / 1024),
            ]);
        }
        v
    };
    listing(format, &rows, &header, &csv_header, cells, footer)
}

/// The hardware `profiles` listed; `footer` after a table of all of them (`None`: one profile
/// asked for).
pub fn hardware(
    profiles: &[HardwareProfile],
    format: Format,
    footer: Option<&str>,
) -> Result<String, Error> {
    let header = [
        "hardware",
        "gpu",
        "memory",
        "mem GB/s",
        "fp16 TFLOP/s",
        "bf16 TFLOP/s",
        "link",
        "h2d pinned GB/s",
        "d2h pinned GB/s",
        "host RAM",
    ];
    // The CSV names are the profile file's fields.
    let csv_header = [
        "hardware",
        "gpu",
        "memory_bytes",
        "hbm_gbps",
        "fp16_tflops",
        "bf16_tflops",
        "link",
        "h2d_pinned_gbps",
        "d2h_pinned_gbps",
        "host_ram_bytes",
    ];
    let cells = |p: &HardwareProfile, plain: bool| -> Vec<String> {
        let bytes = |b: u64| if plain { b.to_string() } else { gib(b) };
        let num = |x: f64, decimals: usize| {
            if plain {
                x.to_string()
            } else {
                format!("{x:.decimals$}")
            }
        };
        vec![
            p.name.clone(),
            p.gpu.name.clone(),
            bytes(p.gpu.memory_bytes),
            num(p.gpu.mem_bandwidth / 1e9, 0),
            num(p.gpu.peak_flops.fp16 / 1e12, 1),
            num(p.gpu.peak_flops.bf16 / 1e12, 1),
            p.link.kind.clone(),
            num(p.link.h2d_pinned / 1e9, 2),
            num(p.link.d2h_pinned / 1e9, 2),
            bytes(p.host.ram_bytes),
        ]
    };
    listing(format, profiles, &header, &csv_header, cells, footer)
}
