//! `kvplan hardware`: the hardware presets, or one profile with the source of every number.

use clap::Args;

use crate::args::*;
use crate::error::CliError;
use kvplan_report as report;
use kvplan_vocab::HardwareProfile;

/// `kvplan hardware`.
#[derive(Debug, Args)]
pub struct HardwareArgs {
    /// A preset name or profile TOML path to show (a preset prints as commented TOML)
    pub hardware: Option<String>,
    /// Output
    #[command(flatten)]
    pub output: OutputArgs,
}

/// `kvplan hardware`.
pub fn hardware(args: &HardwareArgs) -> Result<String, CliError> {
    if let (Some(name), Format::Table) = (&args.hardware, args.output.format)
        && let Ok(text) = HardwareProfile::preset_text(name)
        && !name.ends_with(".toml")
    {
        // The preset file itself: every number with its source, ready to copy and edit.
        return Ok(text.to_string());
    }
    let profiles: Vec<HardwareProfile> = match &args.hardware {
        Some(h) => vec![HardwareProfile::resolve(h)?],
        None => HardwareProfile::preset_names()
            .iter()
            .map(|n| HardwareProfile::preset(n))
            .collect::<Result<_, _>>()?,
    };
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
        let bytes = |b: u64| if plain { b.to_string() } else { report::gib(b) };
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
    let footer = "\n`kvplan hardware NAME` prints a preset with the source of every number. To adapt one,\nwrite a TOML file with `base = \"NAME\"` (a preset, or a profile file relative to this\none) and only the fields you change, e.g.\n  base = \"a100-40g-pcie4\"\n  [link]\n  h2d_pinned_gbps = 20.0\nand pass its path to --hardware.\n";
    Ok(report::listing(
        args.output.format.into(),
        &profiles,
        &header,
        &csv_header,
        cells,
        args.hardware.is_none().then_some(footer),
    )?)
}
