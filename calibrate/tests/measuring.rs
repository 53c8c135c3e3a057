//! A measuring run's inputs (`kvplan_calibrate::inputs::Measuring`): the models, the base and
//! the name resolved before anything runs, the base that the device's own preset supplies, and
//! the profile file's header in the caller's words.

use std::path::Path;

use kvplan_calibrate::Error;
use kvplan_calibrate::inputs::{Labels, Measuring};
use kvplan_exec::{BackendKind, DeviceInfo};
use kvplan_vocab::HardwareProfile;

use crate::kernels_section::synthetic;

const LABELS: Labels = Labels {
    command: "kvplan calibrate",
    table: "the table",
    runs: "the runs",
    out: "the output",
    quick: "quickly",
    hardware: "a hardware profile",
    model: "the model",
    base: "the base",
    sms: "the SMs",
    fit_requests: "the requests per stage",
};

fn device(backend: BackendKind, name: &str) -> DeviceInfo {
    DeviceInfo {
        backend,
        name: name.into(),
        driver: "test".into(),
        memory_bytes: Some(16 << 30),
        parallelism: None,
    }
}

#[test]
fn the_name_is_the_output_files_stem_unless_given() {
    let out = Path::new("dir/my-gpu.toml");
    let m = Measuring::new(&[], None, None, out, true, LABELS).unwrap();
    assert_eq!(m.name, "my-gpu");
    assert!(m.models.is_none() && m.base.is_none() && m.quick);
    let m = Measuring::new(&[], None, Some("named"), out, false, LABELS).unwrap();
    assert_eq!(m.name, "named");
    let Err(Error::Input(e)) = Measuring::new(&[], None, None, Path::new("/"), true, LABELS) else {
        panic!("a path without a file name has no stem");
    };
    assert_eq!(e, "the output: '/' is not a file path");
}

#[test]
fn models_and_base_are_resolved_before_anything_is_measured() {
    let out = Path::new("p.toml");
    let models = ["opt-125m".to_string(), "llama-3-8b".to_string()];
    let m = Measuring::new(&models, Some("h100-sxm"), None, out, true, LABELS).unwrap();
    let names: Vec<&str> = m.models.iter().flatten().map(|s| s.name.as_str()).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert_eq!(m.base.as_ref().map(|b| b.name.as_str()), Some("h100-sxm"));
    for (models, base) in [
        (&["no-such-model".to_string()][..], None),
        (&[][..], Some("nope")),
    ] {
        let e = Measuring::new(models, base, None, out, true, LABELS).unwrap_err();
        assert!(matches!(e, Error::Planner(_)), "{e}");
    }
}

#[test]
fn a_gpu_without_a_base_takes_the_preset_that_names_it() {
    let out = Path::new("p.toml");
    let h100 = HardwareProfile::preset("h100-sxm").unwrap();
    let mut m = Measuring::new(&[], None, None, out, true, LABELS).unwrap();
    let plan = m.plan(&device(BackendKind::Cuda, &h100.gpu.name)).unwrap();
    assert_eq!(m.base.as_ref().map(|b| b.name.as_str()), Some("h100-sxm"));
    assert!(plan.quick && !plan.models.is_empty());
    // A GPU no preset names, and a CPU (even one named like a GPU), keep no base.
    let mut m = Measuring::new(&[], None, None, out, true, LABELS).unwrap();
    m.plan(&device(BackendKind::Cuda, "Some Future GPU"))
        .unwrap();
    assert!(m.base.is_none());
    m.plan(&device(BackendKind::Cpu, &h100.gpu.name)).unwrap();
    assert!(m.base.is_none());
    // A base given is kept.
    let mut m = Measuring::new(&[], Some("a100-80g-sxm"), None, out, true, LABELS).unwrap();
    m.plan(&device(BackendKind::Cuda, &h100.gpu.name)).unwrap();
    assert_eq!(
        m.base.as_ref().map(|b| b.name.as_str()),
        Some("a100-80g-sxm")
    );
}

#[test]
fn the_profile_file_opens_with_what_measured_it_in_the_callers_words() {
    let mut meas = synthetic(Vec::new());
    meas.kernels = None;
    for quick in [true, false] {
        let m = Measuring::new(&[], None, None, Path::new("cpu.toml"), quick, LABELS).unwrap();
        let (file, text) = m.profile(&meas, LABELS).unwrap();
        let lines: Vec<&str> = text.lines().take(3).collect();
        let today = kvplan_calibrate::today();
        assert_eq!(
            lines[0],
            format!("# kvplan calibrated profile: cpu backend on test CPU (test), {today}.")
        );
        let how = if quick { " quickly" } else { "" };
        assert_eq!(
            lines[1],
            format!(
                "# Written by `kvplan calibrate`{how}; the [calibration] and [kernels] tables \
                 override the datasheet fields"
            )
        );
        assert_eq!(
            lines[2],
            "# in the cost model. Valid as a hardware profile for every kvplan command."
        );
        assert!(text.ends_with(&file.to_toml()));
        let hw = HardwareProfile::from_toml_str(&text, "cpu.toml").unwrap();
        assert_eq!(hw.name, "cpu");
    }
}
