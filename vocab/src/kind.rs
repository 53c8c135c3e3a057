//! What a scenario is: an op-level run (the planner and the discrete-event simulator) or a serving
//! run (the serving simulator). A scenario file says it with its top-level `kind` key; without one
//! the command that reads it decides (`kvplan simulate` / `kvplan serve`), and readers that have no
//! command (the regression suite, sweeps) take `simulate`. One rule for every reader.

use serde::{Deserialize, Serialize};

/// The two kinds of scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunKind {
    /// Op-level: a plan's schedule on the discrete-event simulator (`kvplan simulate`).
    #[default]
    Simulate,
    /// Serving: requests over time through the serving simulator (`kvplan serve`).
    Serve,
}

impl RunKind {
    /// The name a scenario file writes.
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Simulate => "simulate",
            RunKind::Serve => "serve",
        }
    }

    /// The `kind` a parsed scenario table states, if any; an unknown value is an error message
    /// naming the field and the accepted values.
    pub fn of(table: &toml::Table) -> Result<Option<RunKind>, String> {
        match table.get("kind") {
            None => Ok(None),
            Some(toml::Value::String(s)) if s == "simulate" => Ok(Some(RunKind::Simulate)),
            Some(toml::Value::String(s)) if s == "serve" => Ok(Some(RunKind::Serve)),
            Some(other) => Err(format!(
                "kind: unknown scenario kind {other}; write kind = \"simulate\" (op-level: planner and simulator) or kind = \"serve\" (serving simulator)"
            )),
        }
    }

    /// Why a scenario of kind `found` cannot be read as one of `self`'s.
    pub fn mismatch(self, found: RunKind) -> String {
        format!(
            "kind: the scenario says kind = \"{}\", so the {} runs it, not the {}",
            found.as_str(),
            found.engine(),
            self.engine()
        )
    }

    fn engine(self) -> &'static str {
        match self {
            RunKind::Simulate => "op-level simulator (simulate)",
            RunKind::Serve => "serving simulator (serve)",
        }
    }
}

impl std::fmt::Display for RunKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::RunKind;

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn reads_the_kind_key() {
        assert_eq!(RunKind::of(&table("model = \"x\"")), Ok(None));
        assert_eq!(
            RunKind::of(&table("kind = \"serve\"")),
            Ok(Some(RunKind::Serve))
        );
        assert_eq!(
            RunKind::of(&table("kind = \"simulate\"")),
            Ok(Some(RunKind::Simulate))
        );
        let e = RunKind::of(&table("kind = \"sim\"")).unwrap_err();
        assert!(e.starts_with("kind: unknown scenario kind \"sim\""), "{e}");
        assert!(RunKind::of(&table("kind = 3")).is_err());
        let m = RunKind::Simulate.mismatch(RunKind::Serve);
        assert!(
            m.contains("kind = \"serve\"") && m.contains("serving simulator"),
            "{m}"
        );
    }
}
