//! The scenario layer's contract: one reader for both kinds, one path rule, one overlay, errors
//! naming fields by their dotted path, and one report with its metric columns.

use std::path::{Path, PathBuf};

use kvplan_run::{Metric, RawScenario, Report, RunKind, Scenario, ScenarioError, columns};

/// A fresh directory for one test's files.
fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kvplan-run-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

const SIMULATE: &str = "model = \"opt-1.3b\"\nhardware = \"a100-40g-pcie4\"\n[workload]\nbatch = 4\nprompt = 32\ngen = 3\n";
const SERVE: &str = "kind = \"serve\"\nmodel = \"llama-2-7b\"\nhardware = \"h100-sxm\"\n[workload]\narrivals = \"poisson\"\nqps = 4.0\nprompt_lengths = \"64\"\noutput_lengths = \"8\"\nrequests = 12\n";

#[test]
fn the_kind_key_decides_and_the_default_fills_in() {
    let d = dir("kind");
    let sim = write(&d, "sim.toml", SIMULATE);
    let serve = write(&d, "serve.toml", SERVE);
    assert_eq!(
        RawScenario::read(&sim, RunKind::Simulate).unwrap().kind(),
        RunKind::Simulate
    );
    // A file without `kind` is read as the default kind: as a serving scenario, its op-level
    // `workload.batch` is an unknown field, named with its line.
    let e = RawScenario::read(&sim, RunKind::Serve)
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(&format!("{}: line 4: unknown field `batch`", sim.display())),
        "{e}"
    );
    assert_eq!(
        RawScenario::read(&serve, RunKind::Simulate).unwrap().kind(),
        RunKind::Serve
    );
    // A command that runs the other kind refuses the file by name.
    let e = RawScenario::read_as(&serve, RunKind::Simulate).unwrap_err();
    assert!(matches!(e, ScenarioError::WrongKind { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.starts_with(&format!("{}: kind:", serve.display()))
            && text.contains("serving simulator"),
        "{text}"
    );
    assert!(RawScenario::read_serve(&serve).is_ok());
    assert!(RawScenario::read_simulate(&serve).is_err());
}

#[test]
fn parse_errors_name_the_file_and_line() {
    let d = dir("parse");
    let bad = write(
        &d,
        "bad.toml",
        "model = \"opt-1.3b\"\n[workload]\nbatchh = 4\n",
    );
    let e = RawScenario::read(&bad, RunKind::Simulate).unwrap_err();
    let ScenarioError::Parse { line, message, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(*line, Some(3), "{e}");
    assert!(message.contains("batchh"), "{message}");
    assert!(
        e.to_string()
            .starts_with(&format!("{}: line 3: ", bad.display()))
    );
    // The `kind` key is the layer's: the line found is still the unknown field's.
    let serve = write(
        &d,
        "serve.toml",
        "kind = \"serve\"\nmodel = \"llama-2-7b\"\n[workload]\nqpss = 1.0\n",
    );
    let e = RawScenario::read(&serve, RunKind::Simulate).unwrap_err();
    assert!(
        e.to_string().starts_with(&format!(
            "{}: line 4: unknown field `qpss`",
            serve.display()
        )),
        "{e}"
    );
    let kind = write(&d, "kind.toml", "kind = \"sim\"\nmodel = \"x\"\n");
    let e = RawScenario::read(&kind, RunKind::Simulate).unwrap_err();
    assert!(e.to_string().contains("unknown scenario kind"), "{e}");
    let e = RawScenario::read(&d.join("absent.toml"), RunKind::Simulate).unwrap_err();
    assert!(matches!(e, ScenarioError::Read { .. }), "{e:?}");
    assert!(e.is_input_error());
}

#[test]
fn relative_paths_follow_the_file_and_preset_names_stay() {
    let d = dir("paths");
    let f = write(
        &d,
        "s.toml",
        "kind = \"serve\"\nmodel = \"llama-2-7b\"\nhardware = \"profiles/gpu.toml\"\n[workload]\ntrace = \"t.csv\"\n",
    );
    let RawScenario::Serve(raw) = RawScenario::read(&f, RunKind::Serve).unwrap() else {
        panic!("a serving scenario")
    };
    assert_eq!(raw.model.as_deref(), Some("llama-2-7b"));
    assert_eq!(
        raw.hardware.as_deref(),
        Some(d.join("profiles/gpu.toml").display().to_string().as_str())
    );
    assert_eq!(raw.workload.trace, Some(d.join("t.csv")));
}

#[test]
fn overlay_keeps_to_one_kind() {
    let d = dir("overlay");
    let file = RawScenario::read(&write(&d, "s.toml", SIMULATE), RunKind::Simulate).unwrap();
    let mut flags = kvplan_planner::scenario::RawScenario::default();
    flags.workload.batch = Some(2);
    let merged = file
        .clone()
        .overlay(RawScenario::Simulate(Box::new(flags)))
        .unwrap();
    let RawScenario::Simulate(m) = &merged else {
        panic!("kind kept")
    };
    assert_eq!((m.workload.batch, m.workload.prompt), (Some(2), Some(32)));
    let e = file
        .overlay(RawScenario::empty(RunKind::Serve))
        .unwrap_err();
    assert!(matches!(e, ScenarioError::WrongKind { .. }), "{e:?}");
}

#[test]
fn errors_name_fields_by_their_path_for_both_kinds() {
    let table = |text: &str| toml::from_str::<toml::Table>(text).unwrap();
    let resolve = |text: &str, kind| {
        RawScenario::from_table(table(text), kind)
            .unwrap()
            .resolve()
            .and_then(|s| kvplan_run::run(&s))
            .unwrap_err()
    };
    let e = resolve(
        &SIMULATE.replace("batch = 4", "batch = 0"),
        RunKind::Simulate,
    );
    assert_eq!(e.field().as_deref(), Some("workload.batch"), "{e}");
    assert!(e.to_string().starts_with("workload.batch: "), "{e}");

    let e = resolve(&SERVE.replace("qps = 4.0", "qps = -1.0"), RunKind::Serve);
    assert_eq!(e.field().as_deref(), Some("workload.qps"), "{e}");
    assert!(e.to_string().starts_with("workload.qps: "), "{e}");

    let e = resolve(&format!("{SERVE}[serve]\nblock_size = 0\n"), RunKind::Serve);
    assert_eq!(e.field().as_deref(), Some("serve.block_size"), "{e}");
    assert!(e.to_string().starts_with("serve.block_size: "), "{e}");

    let e = resolve(
        "kind = \"serve\"\nhardware = \"h100-sxm\"\n",
        RunKind::Serve,
    );
    assert_eq!(e.field().as_deref(), Some("model"), "{e}");
    assert!(e.is_input_error());
}

#[test]
fn one_report_with_its_columns_for_both_kinds() {
    for (text, kind) in [(SIMULATE, RunKind::Simulate), (SERVE, RunKind::Serve)] {
        let raw =
            RawScenario::from_table(toml::from_str(text).unwrap(), RunKind::Simulate).unwrap();
        assert_eq!(raw.kind(), kind);
        let sc = raw.resolve().unwrap();
        assert_eq!(sc.kind(), kind);
        let report = kvplan_run::run(&sc).unwrap();
        let metrics = report.metrics();
        assert_eq!(metrics.len(), columns(kind).len(), "{kind}");
        let json: serde_json::Value = serde_json::from_str(&report.json()).unwrap();
        assert!(report.json().ends_with("}\n"));
        match (&report, kind) {
            (Report::Simulate(run), RunKind::Simulate) => {
                assert_eq!(metrics[1], Metric::Float(run.report.decode_latency_s));
                assert_eq!(json["batch"], 4);
                let csv = report.timeline_csv().unwrap();
                assert!(csv.lines().count() > 10, "{csv}");
            }
            (Report::Serve(out), RunKind::Serve) => {
                assert_eq!(metrics[0], Metric::Int(12));
                assert_eq!(metrics[1], Metric::Int(out.summary.finished));
                assert_eq!(json["requests"], 12);
                assert!(report.timeline_csv().is_none());
            }
            _ => panic!("{kind}: the report is of the scenario's kind"),
        }
    }
}

#[test]
fn given_requests_replace_the_workload() {
    let raw = RawScenario::from_table(toml::from_str(SERVE).unwrap(), RunKind::Serve).unwrap();
    let sc = raw.resolve().unwrap();
    let Scenario::Serve(serve) = &sc else {
        panic!("a serving scenario")
    };
    let own = serve.requests().unwrap();
    assert_eq!(sc.prepare(None).unwrap().requests(), own.len());
    let three = own[..3].to_vec();
    let prepared = sc.prepare(Some(three)).unwrap();
    assert_eq!(prepared.requests(), 3);
    let Report::Serve(out) = prepared.run().unwrap() else {
        panic!("a serving report")
    };
    assert_eq!(out.summary.requests, 3);
}

#[test]
fn the_other_kind_is_refused_before_its_fields_are_read() {
    let d = dir("kind-first");
    // A serving file with a misspelt field: a command running op-level scenarios names the
    // kind, not the serving table's typo.
    let f = write(
        &d,
        "s.toml",
        "kind = \"serve\"\nmodel = \"llama-2-7b\"\n[workload]\nqpss = 1.0\n",
    );
    let e = RawScenario::read_as(&f, RunKind::Simulate).unwrap_err();
    assert!(matches!(e, ScenarioError::WrongKind { .. }), "{e:?}");
}
