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
    let asked = args.hardware.as_deref();
    let profiles = match asked {
        Some(h) => vec![HardwareProfile::resolve(h)?],
        None => HardwareProfile::presets()?,
    };
    let footer = "\n`kvplan hardware NAME` prints a preset with the source of every number. To adapt one,\nwrite a TOML file with `base = \"NAME\"` (a preset, or a profile file relative to this\none) and only the fields you change, e.g.\n  base = \"a100-40g-pcie4\"\n  [link]\n  h2d_pinned_gbps = 20.0\nand pass its path to --hardware. Prices are public on-demand list prices per GPU-hour, each\npreset's with its source and date; set gpu.price_usd_per_hour to use yours.\n";
    let format = args.output.format;
    let price = "--price NAME=USD";
    Ok(report::listings::hardware(
        &profiles, asked, format, footer, price,
    )?)
}
