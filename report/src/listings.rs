//! The presets listings: models (with their sizes) and hardware profiles, as a table, CSV
//! rows or JSON.

use kvplan_vocab::{HardwareProfile, ModelSpec};
use serde::Serialize;

use crate::error::Error;
use crate::render::{Format, gib, listing};

#[derive(Serialize)]
struct ModelRow<'a> {
    #[serde(flatten)]
    spec: &'a ModelSpec,
    params: u64,
    /// Parameters a token passes through (mixtures of experts only).
    #[serde(skip_serializing_if = "Option::is_none")]
    active_params: Option<u64>,
    weight_bytes: u64,
    kv_bytes_per_token: u64,
}

/// A model's row: in the table (`plain` false) with sizes for people, in CSV as numbers.
fn model_cells(r: &ModelRow, plain: bool) -> Vec<String> {
    let s = r.spec;
    let mut v = vec![
        s.name.clone(),
        s.family.as_str().to_string(),
        s.num_layers.to_string(),
        s.hidden.to_string(),
        s.num_heads.to_string(),
        s.num_kv_heads.to_string(),
        s.head_dim.to_string(),
        match (&s.moe, plain) {
            // A mixture of experts in the table: experts x width, top-k (+ shared width).
            (Some(m), false) => {
                let shared = if m.shared_ffn > 0 {
                    format!("+{}", m.shared_ffn)
                } else {
                    String::new()
                };
                format!("{}x{} top{}{shared}", m.experts, m.expert_ffn, m.top_k)
            }
            _ => s.ffn_dim.to_string(),
        },
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
}

/// The models `specs` listed: every preset (`asked` `None`), with `footer` after their table, or
/// the one model `asked` for (a preset name or a config.json path) in detail.
pub fn models(
    specs: &[ModelSpec],
    asked: Option<&str>,
    format: Format,
    footer: &str,
) -> Result<String, Error> {
    let footer = asked.is_none().then_some(footer);
    let rows: Vec<ModelRow> = specs
        .iter()
        .map(|s| ModelRow {
            spec: s,
            params: s.params(),
            active_params: s.moe.is_some().then(|| s.active_params()),
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
    let mut out = listing(format, &rows, &header, &csv_header, model_cells, footer)?;
    if let (Format::Table, None, [one]) = (format, footer, rows.as_slice())
        && let Some(m) = &one.spec.moe
    {
        out.push_str(&moe_details(
            one.spec,
            m,
            one.active_params.unwrap_or(one.params),
        ));
    }
    Ok(out)
}

/// The lines under one mixture-of-experts model's row: its experts, where they are, and the
/// parameters a token passes through.
fn moe_details(s: &ModelSpec, m: &kvplan_vocab::model::Moe, active: u64) -> String {
    let shared = match m.shared_ffn {
        0 => "no shared expert".to_string(),
        w => format!("shared experts {w} wide"),
    };
    let layers = if m.dense_layers.is_empty() {
        format!("in all {} layers", s.num_layers)
    } else {
        format!(
            "in {} of {} layers (dense FFN {} wide in layers {})",
            s.moe_layers(),
            s.num_layers,
            s.ffn_dim,
            m.dense_layers
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    format!(
        "\nmixture of experts: {} routed experts {} wide, {} per token; {shared}; {layers}\n\
         active parameters per token: {:.2}B of {:.2}B\n",
        m.experts,
        m.expert_ffn,
        m.top_k,
        active as f64 / 1e9,
        s.params() as f64 / 1e9,
    )
}

/// A profile's row: in the table (`plain` false) rounded for people, in CSV as the profile
/// file's numbers, with the price's source and date.
fn hardware_cells(p: &HardwareProfile, plain: bool) -> Vec<String> {
    let bytes = |b: u64| if plain { b.to_string() } else { gib(b) };
    let num = |x: f64, decimals: usize| {
        if plain {
            x.to_string()
        } else {
            format!("{x:.decimals$}")
        }
    };
    let mut v = vec![
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
    ];
    let g = &p.gpu;
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| if plain { "" } else { "-" }.into());
    v.push(or_dash(g.power_watts.map(|w| num(w, 0))));
    v.push(or_dash(g.price_usd_per_hour.map(|usd| num(usd, 2))));
    if plain {
        v.push(g.price_source.clone().unwrap_or_default());
        v.push(g.price_date.clone().unwrap_or_default());
    }
    v
}

/// The hardware `profiles` listed: every preset (`asked` `None`), with `footer` after their
/// table, or the one profile `asked` for; a preset asked for by name prints in a table as its
/// file, every number with its source, ready to copy and edit. `price_option` is how a command
/// line that takes prices spells one, for a profile without a price.
pub fn hardware(
    profiles: &[HardwareProfile],
    asked: Option<&str>,
    format: Format,
    footer: &str,
    price_option: &str,
) -> Result<String, Error> {
    if let (Some(name), Format::Table) = (asked, format)
        && !name.ends_with(".toml")
        && let Ok(text) = HardwareProfile::preset_text(name)
    {
        return Ok(text.to_string());
    }
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
        "power W",
        "$/GPU-h",
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
        "power_watts",
        "price_usd_per_hour",
        "price_source",
        "price_date",
    ];
    let footer = asked.is_none().then_some(footer);
    let mut out = listing(
        format,
        profiles,
        &header,
        &csv_header,
        hardware_cells,
        footer,
    )?;
    if let (Format::Table, Some(_), [one]) = (format, asked, profiles) {
        out.push_str(&price_line(&one.gpu, price_option));
    }
    Ok(out)
}

/// `usd` with cents (`0.60`), or every digit it has (`1.9512`).
fn dollars(usd: f64) -> String {
    let cents = format!("{usd:.2}");
    if cents.parse::<f64>() == Ok(usd) {
        cents
    } else {
        usd.to_string()
    }
}

/// The line under one profile's row: its price per GPU-hour, where it comes from and when,
/// or how to give one (`price_option`: on a command line that takes it).
fn price_line(g: &kvplan_vocab::hardware::Gpu, price_option: &str) -> String {
    match g.price_usd_per_hour {
        Some(usd) => format!(
            "\nprice: ${} per GPU-hour, {}{}\n",
            dollars(usd),
            g.price_source.as_deref().unwrap_or("no source given"),
            g.price_date
                .as_deref()
                .map(|d| format!(" ({d})"))
                .unwrap_or_default(),
        ),
        None => format!(
            "\nprice: none; give gpu.price_usd_per_hour in the profile (or {price_option} where a command takes it)\n"
        ),
    }
}
