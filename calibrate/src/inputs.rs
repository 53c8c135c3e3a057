//! From the caller's options to the profile text: a measuring run's models, base (named, or the
//! preset of the device), name and file header ([`Measuring`]); fits to measured files: which
//! fit a table asks for (a kernel table or an attention table), the base profile it starts from
//! (named, or from the file's name), the model of an attention table, the streaming
//! multiprocessors, and the fit to real serving runs with its base and name. The caller names
//! its options in [`Labels`]; the messages name them by those labels.

use std::path::Path;

use kvplan_exec::{BackendKind, DeviceInfo};
use kvplan_serve::runs::StageRun;
use kvplan_vocab::hardware::ProfileFile;
use kvplan_vocab::{HardwareProfile, ModelSpec};

use crate::error::Error;
use crate::plan::{Measurements, Plan};
use crate::profile::{build_profile, today};
use crate::runs::RunsFit;

/// How the caller names what it was given, for messages and provenance comments.
#[derive(Debug, Clone, Copy)]
pub struct Labels<'a> {
    /// The command that calibrates (written into the profile's provenance).
    pub command: &'a str,
    /// The measured table file.
    pub table: &'a str,
    /// The file of real serving runs.
    pub runs: &'a str,
    /// The file the profile is written to.
    pub out: &'a str,
    /// A quick measurement (fewer sizes and shapes).
    pub quick: &'a str,
    /// Where the other commands take a profile.
    pub hardware: &'a str,
    /// The model of an attention table.
    pub model: &'a str,
    /// The base profile.
    pub base: &'a str,
    /// The streaming multiprocessors.
    pub sms: &'a str,
    /// The requests replayed per stage while fitting runs.
    pub fit_requests: &'a str,
}

/// A measuring run as the caller asked for it, resolved before anything is measured.
#[derive(Debug, Clone)]
pub struct Measuring {
    /// The models whose layer shapes to measure (`None`: the plan's defaults).
    pub models: Option<Vec<ModelSpec>>,
    /// The profile whose fields are kept where nothing is measured (`None`: the preset whose
    /// GPU is the device, once [`plan`](Self::plan) has seen it, if any).
    pub base: Option<HardwareProfile>,
    /// The profile's name.
    pub name: String,
    /// Fewer sizes and shapes.
    pub quick: bool,
}

impl Measuring {
    /// Resolves `models` (presets or config.json paths; none: the plan's defaults), `base` (a
    /// preset or profile file) and the profile's `name` (else the stem of `out`, the file the
    /// profile goes to).
    pub fn new(
        models: &[String],
        base: Option<&str>,
        name: Option<&str>,
        out: &Path,
        quick: bool,
        l: Labels,
    ) -> Result<Self, Error> {
        let models: Vec<ModelSpec> = models
            .iter()
            .map(|m| ModelSpec::resolve(m))
            .collect::<Result<_, _>>()?;
        let base = base.map(HardwareProfile::resolve).transpose()?;
        let name = match name {
            Some(n) => n.to_string(),
            None => out
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .ok_or_else(|| {
                    Error::Input(format!("{}: '{}' is not a file path", l.out, out.display()))
                })?,
        };
        Ok(Measuring {
            models: (!models.is_empty()).then_some(models),
            base,
            name,
            quick,
        })
    }

    /// The plan for `device`. Without a base, the preset whose GPU name is the device's becomes
    /// the base, so the profile keeps its datasheet fields.
    pub fn plan(&mut self, device: &DeviceInfo) -> Result<Plan, Error> {
        let gpu = device.backend == BackendKind::Cuda;
        if self.base.is_none() && gpu {
            self.base = HardwareProfile::preset_names()
                .iter()
                .filter_map(|n| HardwareProfile::preset(n).ok())
                .find(|p| p.gpu.name == device.name);
        }
        Plan::new(self.quick, gpu, self.models.clone())
    }

    /// The measurements `m` fitted into the profile ([`build_profile`]), and the text of its
    /// file: a header saying what was measured, when and by which command, then the TOML.
    pub fn profile(&self, m: &Measurements, l: Labels) -> Result<(ProfileFile, String), Error> {
        let file = build_profile(m, &self.name, self.base.as_ref(), self.quick)?;
        let text = format!(
            "# kvplan calibrated profile: {} backend on {} ({}), {}.\n# Written by `{}`{}; the \
             [calibration] and [kernels] tables override the datasheet fields\n# in the cost \
             model. Valid as {} for every kvplan command.\n{}",
            m.info.backend.as_str(),
            m.info.name,
            m.info.driver,
            today(),
            l.command,
            if self.quick {
                format!(" {}", l.quick)
            } else {
                String::new()
            },
            l.hardware,
            file.to_toml()
        );
        Ok((file, text))
    }
}

/// A table fitted onto its base profile.
#[derive(Debug, Clone)]
pub struct TableFit {
    /// What was fitted and the fit's error table.
    pub report: String,
    /// The whole profile with the fitted section.
    pub profile: String,
    /// The fitted section alone.
    pub section: String,
}

/// The file name of `path` (the path itself where it has none).
pub fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Fits a measured table: `[kernels]` from a kernel table (Vidur's profiling CSV), or
/// `[kernels.attention]` from an attention table, on `base` (else the preset the file name
/// names); `models` the attention table's model (else the preset the file name contains).
pub fn fit_table(
    table: &Path,
    models: &[String],
    base: Option<&str>,
    sms: Option<u32>,
    l: Labels,
) -> Result<TableFit, Error> {
    use crate::table::{
        FitOptions, MeasuredTable, error_report, fit_kernels, kernel_model, kernels_toml,
        replace_kernels,
    };
    let file_name = file_name(table);
    let fitted_by = format!("fitted by `{} {} {file_name}`", l.command, l.table);
    let text = std::fs::read_to_string(table)
        .map_err(|e| Error::Input(format!("{} {}: {e}", l.table, table.display())))?;
    if crate::attention::is_attention_table(&text) {
        return fit_attention_table(table, &file_name, &text, models, base, sms, l);
    }
    if let Some(m) = models.first() {
        return Err(Error::Input(format!(
            "{} {m}: a kernel table carries its model sizes in its rows; {} names the \
             model of an attention table (header {})",
            l.model,
            l.model,
            crate::attention::COLUMNS.join(",")
        )));
    }
    let (base, base_text, sms) = table_base(&file_name, base, sms, l)?;
    let measured = MeasuredTable::parse(&text, &table.display().to_string())
        .map_err(|e| Error::Input(e.to_string()))?;
    let source = format!(
        "{fitted_by} from Vidur's public profiling data (MIT, commit 7d47513), Llama-2-7B \
         shapes, TP 1/2/4/8"
    );
    let opts = FitOptions::from_base(&base, sms, source);
    let section = fit_kernels(&measured.samples, &base, &opts)?;
    let report = error_report(&kernel_model(&section, &base), &measured.samples);
    let inherited = format!("not in the table: kept from the {} profile", l.base);
    let kernels = kernels_toml(&section, &fitted_by, &inherited);
    let profile = replace_kernels(&base_text, &kernels);
    HardwareProfile::from_toml_str(&profile, "the fitted profile")?;
    let report = format!(
        "fitted {} rows of {file_name} ({} samples), sms {sms}; device-time error of the fitted \
         [kernels]:\n\n{report}",
        measured.samples.len() / 10,
        measured.samples.len()
    );
    Ok(TableFit {
        report,
        profile,
        section: kernels,
    })
}

/// The base profile of a table fit (named, or from the table's file name), its TOML text and
/// the GPU's streaming multiprocessors (given, else from its name).
fn table_base(
    file_name: &str,
    base: Option<&str>,
    sms: Option<u32>,
    l: Labels,
) -> Result<(HardwareProfile, String, u32), Error> {
    let base_name = match base {
        Some(b) => b.to_string(),
        None => crate::table::base_from_file_name(file_name)
            .ok_or_else(|| {
                Error::Input(format!(
                    "{} {file_name}: which GPU? pass {} PRESET|FILE (e.g. a100-80g-sxm)",
                    l.table, l.base
                ))
            })?
            .to_string(),
    };
    let base = HardwareProfile::resolve(&base_name)?;
    let base_text = crate::table::base_text(&base_name)
        .map_err(|e| Error::Input(format!("{} {base_name}: {e}", l.base)))?;
    let sms = match sms.or_else(|| crate::table::default_sms(&base.gpu.name)) {
        Some(s) if s > 0 => s,
        _ => {
            return Err(Error::Input(format!(
                "{}: the streaming multiprocessors of '{}' are not known; pass {} N",
                l.sms, base.gpu.name, l.sms
            )));
        }
    };
    Ok((base, base_text, sms))
}

/// An attention table fitted onto the base's `[kernels.attention]`.
fn fit_attention_table(
    table: &Path,
    file_name: &str,
    text: &str,
    models: &[String],
    base: Option<&str>,
    sms: Option<u32>,
    l: Labels,
) -> Result<TableFit, Error> {
    use crate::attention::{
        AttentionTable, Heads, attention_toml, error_report, fit_attention, predicted,
        replace_attention,
    };
    let model = match models {
        [m] => ModelSpec::resolve(m)?,
        [] => {
            // The preset whose name the file name contains (Vidur names tables after the model).
            crate::table::model_from_file_name(file_name)
                .map(|n| ModelSpec::preset(&n))
                .transpose()?
                .ok_or_else(|| {
                    Error::Input(format!(
                        "{}: an attention table has no head shape and {file_name} names no \
                         model preset; pass {} NAME|PATH (the model it was measured on)",
                        l.model, l.model
                    ))
                })?
        }
        more => {
            return Err(Error::Input(format!(
                "{}: an attention table is measured on one model; {} given",
                l.model,
                more.len()
            )));
        }
    };
    let (base, base_text, sms) = table_base(file_name, base, sms, l)?;
    let no_kernels = || {
        Error::Input(format!(
            "{}: {} has no [kernels] section to put the fitted [kernels.attention] in; \
             pass a {} with one (a100-80g-sxm, h100-sxm, or a profile written by \
             `kvplan calibrate`)",
            l.base, base.name, l.base
        ))
    };
    if base.kernels.is_none() {
        return Err(no_kernels());
    }
    let measured = AttentionTable::parse(text, &table.display().to_string())
        .map_err(|e| Error::Input(e.to_string()))?;
    let heads = Heads::of(&model);
    let fit = fit_attention(&measured.samples, &base, &heads, sms)?;
    let pred = predicted(
        &fit.attention,
        &fit.append,
        &measured.samples,
        &base,
        &heads,
    );
    let report = error_report(&measured.samples, &pred);
    let cite = format!("fitted by `{} {} {file_name}`", l.command, l.table);
    let attention = attention_toml(&fit.attention, &cite);
    let profile = replace_attention(&base_text, &attention).ok_or_else(no_kernels)?;
    HardwareProfile::from_toml_str(&profile, "the fitted profile")?;
    let report = format!(
        "fitted {} rows of {file_name} ({}: {} query / {} KV heads of {}), sms {sms}; the \
         measured kernel also appended the new tokens' K,V to the cache (every query block \
         copying the keys it attends: {} of HBM bandwidth, {} ns per new token and query head), \
         which the profile leaves out (vLLM writes the cache in a separate kernel); \
         device-time error of the fit, append included:\n\n{report}",
        measured.samples.len(),
        model.name,
        heads.q_heads,
        heads.kv_heads,
        heads.head_dim,
        fit.append.efficiency,
        fit.append.token_ns,
    );
    Ok(TableFit {
        report,
        profile,
        section: attention,
    })
}

/// Real serving runs fitted onto their base profile.
#[derive(Debug)]
pub struct RunsFitted {
    /// The fit.
    pub fit: RunsFit,
    /// The base profile.
    pub base: HardwareProfile,
    /// The profile file: the fitted figures over the base, named after `out` or the base.
    pub toml: String,
}

/// Fits the serving figures to the stage table at `runs`, on `base` (else the preset the
/// stages' GPUs share), replaying at most `fit_requests` requests per stage while searching;
/// the profile is named `name`, else after `out`'s stem, else `<base>-fitted`. `progress` hears
/// the search's evaluations.
pub fn fit_runs(
    runs: &Path,
    base: Option<&str>,
    fit_requests: u64,
    name: Option<&str>,
    out: Option<&Path>,
    l: Labels,
    progress: &dyn kvplan_vocab::Progress,
) -> Result<RunsFitted, Error> {
    let stages = StageRun::read(runs).map_err(|e| Error::Input(format!("{}: {e}", l.runs)))?;
    // Before the base is told from the rows' GPUs: a GPU without a preset is named by its row.
    kvplan_serve::runs::check_stage_names(&stages, None, None)
        .map_err(|e| Error::Input(format!("{}: {e}", l.runs)))?;
    let base_name = match base {
        Some(b) => b.to_string(),
        None => crate::runs::stages_base(&stages)
            .ok_or_else(|| {
                Error::Input(format!(
                    "{}: the runs name several GPUs (or none with a preset); pass \
                     {} PRESET|FILE for the one to fit",
                    l.runs, l.base
                ))
            })?
            .to_string(),
    };
    let base = HardwareProfile::resolve(&base_name)?;
    if fit_requests == 0 {
        return Err(Error::Input(format!(
            "{}: at least 1 request per stage",
            l.fit_requests
        )));
    }
    let fit = crate::runs::fit_stages_progress(
        &stages,
        &base,
        &base_name,
        fit_requests,
        crate::runs::FIT_ITERATIONS,
        &format!("`{} {}`", l.command, l.runs),
        progress,
    )
    .map_err(|e| Error::Input(format!("{}: {e}", l.runs)))?;
    let name = name.map(str::to_string).unwrap_or_else(|| {
        out.and_then(|p| p.file_stem()).map_or_else(
            || format!("{}-fitted", base.name),
            |s| s.to_string_lossy().into_owned(),
        )
    });
    let command = format!(
        "{} {} {} {} {base_name}",
        l.command,
        l.runs,
        file_name(runs),
        l.base
    );
    let toml = fit.profile_toml(&command, &base_name, &name);
    Ok(RunsFitted { fit, base, toml })
}
