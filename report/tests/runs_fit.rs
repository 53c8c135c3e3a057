//! The fit of serving figures to real runs, reported and written: to the file given, else (as
//! text) printed after the report; JSON is the report alone.

use std::fs;

use kvplan_calibrate::inputs::RunsFitted;
use kvplan_calibrate::runs::RunsFit;
use kvplan_report::Format;
use kvplan_report::calibrate::runs_fit;
use kvplan_vocab::HardwareProfile;

use crate::TempDir;

fn fitted() -> RunsFitted {
    let base = HardwareProfile::preset("h100-sxm").unwrap();
    RunsFitted {
        fit: RunsFit {
            profile: base.clone(),
            decode_efficiency: 0.9,
            unit_us: None,
            host_scale: 1.25,
            frontend_us: 2000.0,
            before: Vec::new(),
            after: Vec::new(),
            skipped: vec![("stage 3".into(), "no requests".into())],
            warnings: vec!["host_scale ended at 20 next to the upper bound".into()],
        },
        base,
        toml: "name = \"h100-fitted\"\nbase = \"h100-sxm\"\n".into(),
    }
}

#[test]
fn text_goes_to_the_file_or_after_the_report() {
    let dir = TempDir::new("runs-text");
    let f = fitted();
    let out = runs_fit("calibrate runs.csv", &f, None, "the profile", Format::Table).unwrap();
    assert!(out.starts_with("calibrate runs.csv on h100-sxm: fitted decode attention at 90.0%"));
    assert!(out.contains("skipped stage 3: no requests\n"), "{out}");
    assert!(
        out.contains("warning: host_scale ended at 20 next to the upper bound\n"),
        "{out}"
    );
    assert!(out.ends_with(&format!("\n{}", f.toml)), "{out}");

    let p = dir.path().join("fitted.toml");
    let written = runs_fit(
        "calibrate runs.csv",
        &f,
        Some(&p),
        "the profile",
        Format::Table,
    );
    assert!(
        written
            .unwrap()
            .ends_with(&format!("\nwrote {}\n", p.display()))
    );
    assert_eq!(fs::read_to_string(&p).unwrap(), f.toml);
}

#[test]
fn json_is_the_report_alone_and_still_writes_the_file() {
    let dir = TempDir::new("runs-json");
    let f = fitted();
    let p = dir.path().join("fitted.toml");
    for path in [None, Some(p.as_path())] {
        let out = runs_fit("calibrate runs.csv", &f, path, "the profile", Format::Json).unwrap();
        let json: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(json["base"], "h100-sxm");
        assert_eq!(json["host_scale"], 1.25);
    }
    assert_eq!(fs::read_to_string(&p).unwrap(), f.toml);
    let e = runs_fit("h", &f, Some(dir.path()), "the profile", Format::Json).unwrap_err();
    assert!(
        e.is_input() && e.message().starts_with("the profile: "),
        "{e}"
    );
}
