//! One reader for scenario files of both kinds, one rule for the paths in them, one overlay.

use std::path::Path;

use kvplan_planner::scenario::RawScenario as RawSimulate;
use kvplan_serve::scenario::RawServeScenario;
use kvplan_vocab::RunKind;
use toml::{Table, Value};

use crate::error::ScenarioError;
use crate::scenario::Scenario;

/// A scenario as written (a file, a sweep point, or a front end's settings), of either kind.
#[derive(Debug, Clone)]
pub enum RawScenario {
    /// An op-level scenario (`kvplan simulate`).
    Simulate(Box<RawSimulate>),
    /// A serving scenario (`kvplan serve`).
    Serve(Box<RawServeScenario>),
}

/// The fields that hold a path, by kind, as the file writes them.
fn path_fields(kind: RunKind) -> &'static [&'static str] {
    match kind {
        RunKind::Simulate => &["model", "hardware"],
        RunKind::Serve => &["model", "hardware", "workload.trace"],
    }
}

/// Makes the relative paths in `value` (the scenario table, or the value at dotted `path` in
/// it) relative to `dir`, the directory of the file they were read from: the request trace
/// always, `model` and `hardware` when they look like a path (a `/`, or a `.json` / `.toml`
/// name) rather than a preset name. The one rule for every reader (scenario files, a sweep's
/// base and its points).
pub fn rebase(kind: RunKind, path: &str, value: &mut Value, dir: &Path) {
    match value {
        Value::Table(t) => {
            for (k, v) in t.iter_mut() {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                rebase(kind, &p, v, dir);
            }
        }
        Value::String(s) if path_fields(kind).contains(&path) => {
            let looks_like_path = path == "workload.trace"
                || s.contains('/')
                || s.ends_with(".json")
                || s.ends_with(".toml");
            if looks_like_path && Path::new(s.as_str()).is_relative() {
                *s = dir.join(s.as_str()).display().to_string();
            }
        }
        _ => {}
    }
}

fn one_line(message: &str) -> String {
    message.trim().replace(['\n', '\r'], " ")
}

impl RawScenario {
    /// A scenario of `kind` with nothing set.
    pub fn empty(kind: RunKind) -> Self {
        match kind {
            RunKind::Simulate => RawScenario::Simulate(Box::default()),
            RunKind::Serve => RawScenario::Serve(Box::default()),
        }
    }

    /// Reads a scenario file; its `kind` key says which kind it is, `default` where it has
    /// none. Relative paths in it become relative to the file ([`rebase`]).
    pub fn read(path: &Path, default: RunKind) -> Result<Self, ScenarioError> {
        Self::read_checked(path, default, None)
    }

    /// [`read`](Self::read), refusing a file whose kind is not `expected` (where given) before
    /// its fields are read.
    fn read_checked(
        path: &Path,
        default: RunKind,
        expected: Option<RunKind>,
    ) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let mut table: Table = toml::from_str(&text).map_err(|e| ScenarioError::Parse {
            path: Some(path.to_path_buf()),
            line: kvplan_vocab::error::toml_line(&text, &e),
            message: one_line(e.message()),
        })?;
        let kind = RunKind::of(&table)
            .map_err(|message| ScenarioError::Parse {
                path: Some(path.to_path_buf()),
                line: None,
                message,
            })?
            .unwrap_or(default);
        if let Some(expected) = expected.filter(|&e| e != kind) {
            return Err(ScenarioError::WrongKind {
                path: Some(path.to_path_buf()),
                expected,
                found: kind,
            });
        }
        let dir = path.parent().unwrap_or(Path::new(""));
        for (k, v) in table.iter_mut() {
            rebase(kind, k, v, dir);
        }
        Self::from_table(table, kind).map_err(|e| match e {
            // The same text parsed straight into the kind's type: the parser's error then
            // carries the field's place in the file: its line, and the key a type or range
            // error does not name (`max_num_seqs = -1`: "invalid value: integer `-1`").
            ScenarioError::Parse { message, .. } => {
                let (line, message) = match locate(&text, kind, None) {
                    Some(f) if f.message == message => (f.line, f.keyed()),
                    _ => (None, message),
                };
                ScenarioError::Parse {
                    path: Some(path.to_path_buf()),
                    line,
                    message,
                }
            }
            other => other,
        })
    }

    /// Reads a scenario file for a command that runs `kind`: a file that says it is of the
    /// other kind is refused by name, before its fields are read.
    pub fn read_as(path: &Path, kind: RunKind) -> Result<Self, ScenarioError> {
        Self::read_checked(path, kind, Some(kind))
    }

    /// [`read_as`](Self::read_as) for the op-level commands (`simulate`, `exec`, `validate`,
    /// `plan`), which go on with the planner's own raw scenario.
    pub fn read_simulate(path: &Path) -> Result<RawSimulate, ScenarioError> {
        match Self::read_as(path, RunKind::Simulate)? {
            RawScenario::Simulate(r) => Ok(*r),
            RawScenario::Serve(_) => unreachable!("read_as checked the kind"),
        }
    }

    /// [`read_as`](Self::read_as) for the serving commands (`serve`, `serve-capacity`).
    pub fn read_serve(path: &Path) -> Result<RawServeScenario, ScenarioError> {
        match Self::read_as(path, RunKind::Serve)? {
            RawScenario::Serve(r) => Ok(*r),
            RawScenario::Simulate(_) => unreachable!("read_as checked the kind"),
        }
    }

    /// A parsed scenario table (paths already [`rebase`]d); its `kind` key decides, `default`
    /// where it has none. Unknown fields and wrong types are errors the parser names.
    pub fn from_table(mut table: Table, default: RunKind) -> Result<Self, ScenarioError> {
        let kind = RunKind::of(&table)
            .map_err(|message| ScenarioError::Parse {
                path: None,
                line: None,
                message,
            })?
            .unwrap_or(default);
        let parse = |e: toml::de::Error| ScenarioError::Parse {
            path: None,
            line: None,
            message: kvplan_vocab::error::toml_message(e.message()),
        };
        // `kind` is the layer's: the kinds' own types hold their fields only.
        table.remove("kind");
        let value = Value::Table(table);
        Ok(match kind {
            RunKind::Simulate => RawScenario::Simulate(Box::new(value.try_into().map_err(parse)?)),
            RunKind::Serve => RawScenario::Serve(Box::new(value.try_into().map_err(parse)?)),
        })
    }

    /// Which kind it is.
    pub fn kind(&self) -> RunKind {
        match self {
            RawScenario::Simulate(_) => RunKind::Simulate,
            RawScenario::Serve(_) => RunKind::Serve,
        }
    }

    /// Overlays `other` (a front end's settings) on `self` (a file): any field `other` sets
    /// wins, by the kind's own rules. Both must be of one kind.
    pub fn overlay(self, other: RawScenario) -> Result<Self, ScenarioError> {
        match (self, other) {
            (RawScenario::Simulate(a), RawScenario::Simulate(b)) => {
                Ok(RawScenario::Simulate(Box::new(a.overlay(*b))))
            }
            (RawScenario::Serve(a), RawScenario::Serve(b)) => {
                Ok(RawScenario::Serve(Box::new(a.overlay(*b))))
            }
            (a, b) => Err(ScenarioError::WrongKind {
                path: None,
                expected: b.kind(),
                found: a.kind(),
            }),
        }
    }

    /// Checks every field, applies the defaults and loads the model and hardware.
    pub fn resolve(self) -> Result<Scenario, ScenarioError> {
        Ok(match self {
            RawScenario::Simulate(r) => Scenario::Simulate(Box::new(r.resolve()?)),
            RawScenario::Serve(r) => Scenario::Serve(Box::new(r.resolve()?)),
        })
    }
}

/// Where in a file a scenario's field is refused by the parser: its line and its dotted key
/// ([`locate`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The line (1-based), where the parser knows it.
    pub line: Option<usize>,
    /// The dotted key of the value at fault (`serve.max_num_seqs`), where one holds it.
    pub key: Option<String>,
    /// The parser's message in words ([`kvplan_vocab::error::toml_message`]), as
    /// [`RawScenario::from_table`] words it.
    pub message: String,
}

impl FieldError {
    /// The message after the key it is about, where the message does not already name it
    /// (`serve.max_num_seqs: invalid value: integer `-1`, expected a whole number ...`).
    pub fn keyed(&self) -> String {
        match self.key.as_deref() {
            Some(k) if !k.is_empty() => {
                let last = k.rsplit('.').next().unwrap_or(k);
                let last = last.split('[').next().unwrap_or(last);
                if self.message.contains(&format!("`{last}`")) {
                    self.message.clone()
                } else {
                    format!("{k}: {}", self.message)
                }
            }
            _ => self.message.clone(),
        }
    }
}

/// The first field the parser refuses in `text`, a scenario of `kind` (or, with `under`, the
/// scenario in `text`'s top-level table of that name, a sweep's `[base]`): `text` parsed
/// straight into the kind's type, whose errors carry a place in the file, unlike those of a
/// table already parsed. `None` when it parses.
pub fn locate(text: &str, kind: RunKind, under: Option<&str>) -> Option<FieldError> {
    // Only its errors are wanted.
    #[allow(dead_code)]
    #[derive(serde::Deserialize)]
    struct Base<T> {
        base: T,
    }
    let text = without_kind(text);
    let e = match (kind, under) {
        (RunKind::Simulate, None) => toml::from_str::<RawSimulate>(&text).err(),
        (RunKind::Serve, None) => toml::from_str::<RawServeScenario>(&text).err(),
        (RunKind::Simulate, Some(_)) => toml::from_str::<Base<RawSimulate>>(&text).err(),
        (RunKind::Serve, Some(_)) => toml::from_str::<Base<RawServeScenario>>(&text).err(),
    }?;
    let mut key = kvplan_vocab::error::toml_key(&text, &e);
    if let (Some(table), Some(k)) = (under, key.as_mut()) {
        match k.strip_prefix(table).and_then(|r| r.strip_prefix('.')) {
            Some(rest) => *k = rest.to_string(),
            None => return None,
        }
    }
    Some(FieldError {
        line: kvplan_vocab::error::toml_line(&text, &e),
        key,
        message: kvplan_vocab::error::toml_message(e.message()),
    })
}

/// `text` with its top-level `kind = ...` line blanked (lines keep their numbers): the kinds'
/// own types do not hold `kind`, which the layer has read.
fn without_kind(text: &str) -> String {
    let mut top = true;
    let lines: Vec<&str> = (text.lines())
        .map(|l| {
            let t = l.trim_start();
            top &= !t.starts_with('[');
            let key = t.strip_prefix("kind").map(str::trim_start);
            if top && key.is_some_and(|rest| rest.starts_with('=')) {
                ""
            } else {
                l
            }
        })
        .collect();
    lines.join("\n")
}
