//! Regression suites: a directory of scenario files and their golden outputs.
//!
//! Every `DIR/*.toml` with a top-level `model` key is a case named by its file stem (other TOML
//! files, such as hardware profiles the cases use, are skipped). A case is a `serve` scenario
//! when it has a `[serve]` table or a `[workload]` key only serving reads (`trace`,
//! `arrivals`, `qps`, `requests`, ...); otherwise a `simulate` scenario. Goldens live in
//! `DIR/golden/<name>.json` (what `kvplan simulate|serve FILE` prints in its JSON format) and,
//! for `simulate` cases, `DIR/golden/<name>.timeline.csv` (its trace written as CSV) and
//! `DIR/golden/<name>.decisions.json` (what the planner decided: the KVPR split of every step,
//! HeadInfer's head groups, KV-Runahead's partition; [`kvplan_run::Report::decisions_json`]).
//!
//! Decisions are compared exactly, whatever the tolerance ([`Direction::Decision`]): a changed
//! split, recompute share, head-group partition, Runahead partition or prefix cache hit rate
//! fails the check unless the caller accepts it by name ([`check`]'s `accept`).
//!
//! [`Direction::Decision`]: crate::direction::Direction::Decision

use std::path::{Path, PathBuf};

use kvplan_run::RawScenario;
use kvplan_vocab::RunKind;

use crate::compare::{Comparison, Input, Status, compare};
use crate::error::{Error, Result};

/// Which command a case runs: its file's `kind` ([`RunKind`]; `simulate` where it has none):
/// `kvplan simulate FILE` in its JSON format with its trace written to `golden.timeline.csv`,
/// or `kvplan serve FILE` in its JSON format.
pub type CaseKind = RunKind;

/// One scenario of a suite.
#[derive(Debug, Clone)]
pub struct Case {
    /// The file stem.
    pub name: String,
    /// The scenario file.
    pub path: PathBuf,
    /// Which command runs it.
    pub kind: CaseKind,
}

/// What a case's run prints and writes.
#[derive(Debug, Clone)]
pub struct Outputs {
    /// The report or summary JSON.
    pub json: String,
    /// The timeline CSV (`simulate` cases).
    pub timeline_csv: Option<String>,
    /// The planner's decisions JSON (`simulate` cases).
    pub decisions_json: Option<String>,
}

/// A golden file and the output it is compared with.
#[derive(Debug, Clone)]
pub struct Golden {
    /// Where it is (or should be).
    pub path: PathBuf,
    /// The fresh output.
    pub text: String,
}

/// The cases of `dir`, sorted by name.
pub fn discover(dir: &Path) -> Result<Vec<Case>> {
    let read_err = |source| Error::ReadDir {
        path: dir.display().to_string(),
        source,
    };
    let mut cases = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read_err)? {
        let path = entry.map_err(read_err)?.path();
        if path.extension().is_none_or(|e| e != "toml") || !path.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(|source| Error::Read {
            path: path.display().to_string(),
            source,
        })?;
        let table: toml::Table = toml::from_str(&text).map_err(|e| Error::Toml {
            path: path.display().to_string(),
            message: e.message().trim().replace('\n', " "),
        })?;
        if !table.contains_key("model") {
            continue;
        }
        let kind = RunKind::of(&table)
            .map_err(|message| Error::Toml {
                path: path.display().to_string(),
                message,
            })?
            .unwrap_or_default();
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        cases.push(Case { name, path, kind });
    }
    if cases.is_empty() {
        return Err(Error::NoCases {
            path: dir.display().to_string(),
        });
    }
    cases.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(cases)
}

impl Case {
    /// Runs the scenario as `kvplan simulate|serve FILE` would in its JSON format; the JSON is
    /// byte-identical to what the command prints, the timeline to the trace it writes as CSV.
    pub fn run(&self) -> Result<Outputs> {
        let fail = |source| Error::Scenario {
            case: self.name.clone(),
            source: Box::new(source),
        };
        let sc = RawScenario::read_as(&self.path, self.kind)
            .and_then(RawScenario::resolve)
            .map_err(fail)?;
        let report = kvplan_run::run(&sc).map_err(fail)?;
        Ok(Outputs {
            json: report.json(),
            timeline_csv: report.timeline_csv(),
            decisions_json: report.decisions_json(),
        })
    }

    /// The golden files of this case in `dir` paired with `outputs`.
    pub fn goldens(&self, dir: &Path, outputs: Outputs) -> Vec<Golden> {
        let g = dir.join("golden");
        let mut v = vec![Golden {
            path: g.join(format!("{}.json", self.name)),
            text: outputs.json,
        }];
        if let Some(csv) = outputs.timeline_csv {
            v.push(Golden {
                path: g.join(format!("{}.timeline.csv", self.name)),
                text: csv,
            });
        }
        if let Some(json) = outputs.decisions_json {
            v.push(Golden {
                path: g.join(format!("{}.decisions.json", self.name)),
                text: json,
            });
        }
        v
    }
}

/// How one case fared.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CaseCheck {
    /// The case name.
    pub case: String,
    /// Which command ran it.
    pub kind: CaseKind,
    /// Golden files that do not exist.
    pub missing: Vec<PathBuf>,
    /// The golden outputs (A) against the fresh ones (B).
    pub comparisons: Vec<Comparison>,
}

/// A metric of a golden that the fresh output no longer has (or has as null).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Vanished<'a> {
    /// The golden file's comparison (A's name: its path).
    pub golden: &'a str,
    /// The row key (empty for JSON documents).
    pub row: &'a str,
    /// The metric.
    pub metric: &'a str,
}

impl CaseCheck {
    /// True when nothing regressed, no decision changed (unless accepted), no golden is missing
    /// and no metric of a golden vanished from the output.
    pub fn passed(&self) -> bool {
        self.missing.is_empty()
            && self.vanished().is_empty()
            && self
                .comparisons
                .iter()
                .all(|c| c.failures().next().is_none())
    }

    /// The metrics of the goldens that the fresh outputs lack: a regression, whatever the
    /// tolerance (a metric that disappears cannot be checked).
    pub fn vanished(&self) -> Vec<Vanished<'_>> {
        self.comparisons
            .iter()
            .flat_map(|c| {
                c.metrics
                    .iter()
                    .filter(|m| m.status == Status::Removed)
                    .map(move |m| Vanished {
                        golden: &c.a,
                        row: &m.row,
                        metric: &m.metric,
                    })
            })
            .collect()
    }
}

/// Runs `case` and compares its outputs with its goldens in `dir`; the failures (regressions,
/// changed decisions) that a pattern of `accept` names are accepted
/// ([`Comparison::accept`]).
pub fn check(dir: &Path, case: &Case, tolerance: f64, accept: &[String]) -> Result<CaseCheck> {
    let outputs = case.run()?;
    let mut result = CaseCheck {
        case: case.name.clone(),
        kind: case.kind,
        missing: Vec::new(),
        comparisons: Vec::new(),
    };
    for g in case.goldens(dir, outputs) {
        if !g.path.exists() {
            result.missing.push(g.path);
            continue;
        }
        let malformed = |message: String| Error::Golden {
            path: g.path.display().to_string(),
            message,
        };
        let golden = Input::read(&g.path).map_err(|e| match e {
            Error::Json { line, message, .. } => malformed(format!("line {line}: {message}")),
            Error::Csv { message, .. } | Error::Toml { message, .. } => malformed(message),
            Error::UnknownKind { .. } => {
                malformed("not a kvplan output (expected report JSON or a timeline CSV)".into())
            }
            other => other,
        })?;
        let fresh = Input::parse(&format!("{} (this build)", case.name), &g.text)?;
        if golden.kind != fresh.kind {
            return Err(malformed(format!(
                "it reads as {}, but this case writes {}{}",
                golden.kind,
                fresh.kind,
                missing_keys(&g.path, &g.text)
            )));
        }
        let mut c = compare(&golden, &fresh, tolerance)?;
        c.accept(accept);
        result.comparisons.push(c);
    }
    Ok(result)
}

/// `; missing key(s) K, ...`: the top-level keys of the fresh JSON `fresh` that the golden at
/// `path` does not have (nothing where either is not a JSON object).
fn missing_keys(path: &Path, fresh: &str) -> String {
    let keys = |text: &str| -> Option<Vec<String>> {
        match serde_json::from_str::<serde_json::Value>(text).ok()? {
            serde_json::Value::Object(m) => Some(m.keys().cloned().collect()),
            _ => None,
        }
    };
    let golden = std::fs::read_to_string(path).ok();
    let (Some(g), Some(f)) = (golden.as_deref().and_then(keys), keys(fresh)) else {
        return String::new();
    };
    let gone: Vec<String> = f.into_iter().filter(|k| !g.contains(k)).collect();
    match gone.len() {
        0 => String::new(),
        1 => format!("; missing key {}", gone[0]),
        _ => format!("; missing keys {}", gone.join(", ")),
    }
}
