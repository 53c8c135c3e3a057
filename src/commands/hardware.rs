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
    let footer = "\n`kvplan hardware NAME` prints a preset with the source of every number. To adapt one,\nwrite a TOML file with `base = \"NAME\"` (a preset, or a profile file relative to this\none) and only the fields you change, e.g.\n  base = \"a100-40g-pcie4\"\n  [link]\n  h2d_pinned_gbps = 20.0\nand pass its path to --hardware.\n";
    let footer = args.hardware.is_none().then_some(footer);
    Ok(report::listings::hardware(
        &profiles,
        args.output.format.into(),
        footer,
    )?)
}
