//! Why a scenario cannot be read, resolved or run: one error for both kinds, every field named
//! by its dotted path as the scenario file writes it (`workload.batch`, `serve.block_size`).

use std::fmt;
use std::path::PathBuf;

use kvplan_vocab::RunKind;

/// Why a scenario of either kind cannot be read, resolved or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// The scenario file could not be read.
    #[error("cannot read scenario {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// Not valid TOML, an unknown `kind`, an unknown field or a field of the wrong type.
    #[error("{}{message}", place(path, line))]
    Parse {
        /// The file, where the scenario came from one.
        path: Option<PathBuf>,
        /// The line at fault, where the parser knows it (1-based).
        line: Option<usize>,
        /// What the parser said, on one line.
        message: String,
    },
    /// A scenario of one kind where the other was expected (its `kind` key).
    #[error("{}{}", place(path, &None), expected.mismatch(*found))]
    WrongKind {
        /// The file, where the scenario came from one.
        path: Option<PathBuf>,
        /// The kind the reader runs.
        expected: RunKind,
        /// The kind the scenario says it is.
        found: RunKind,
    },
    /// An op-level scenario's field is missing or out of range, or its model or hardware
    /// cannot be loaded.
    #[error(transparent)]
    Simulate(Box<kvplan_planner::scenario::ScenarioError>),
    /// An op-level scenario cannot be planned (it does not fit, ...) or simulated.
    #[error(transparent)]
    Run(Box<kvplan_planner::run::RunError>),
    /// A serving scenario cannot be resolved or run; the message names the field by its path.
    #[error("{}", ServeMessage(.0.as_ref()))]
    Serve(Box<kvplan_serve::scenario::ScenarioError>),
}

fn place(path: &Option<PathBuf>, line: &Option<usize>) -> String {
    match (path, line) {
        (Some(p), Some(l)) => format!("{}: line {l}: ", p.display()),
        (Some(p), None) => format!("{}: ", p.display()),
        (None, _) => String::new(),
    }
}

/// A serving error's text with its field named by its path: the workload's and the engine's
/// errors name a field within their table (`qps: ...`), the path adds the table
/// (`workload.qps: ...`).
struct ServeMessage<'a>(&'a kvplan_serve::scenario::ScenarioError);

impl fmt::Display for ServeMessage<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0.to_string();
        match serve_field(self.0) {
            Some((table, field)) if !table.is_empty() && text.starts_with(&format!("{field}:")) => {
                write!(f, "{table}.{text}")
            }
            _ => f.write_str(&text),
        }
    }
}

/// The table and field a serving error names.
fn serve_field(e: &kvplan_serve::scenario::ScenarioError) -> Option<(&'static str, &'static str)> {
    use kvplan_serve::scenario::ScenarioError as S;
    use kvplan_workloads::Error as W;
    match e {
        S::Missing { field } => Some(("", field)),
        S::Workload(
            W::NonPositive { field, .. }
            | W::BadSpec { field, .. }
            | W::OutOfRange { field, .. }
            | W::Missing { field, .. }
            | W::Conflict { field, .. }
            | W::TraceFile { field, .. },
        ) => Some(("workload", field)),
        S::Workload(W::TooMany { .. }) | S::Serve(kvplan_serve::Error::TooManyRecords { .. }) => {
            Some(("workload", "requests"))
        }
        S::Serve(kvplan_serve::Error::InvalidConfig { field, .. }) => Some(("serve", field)),
        S::Cluster { field, .. } => Some(("", field)),
        S::Replica {
            path,
            source: kvplan_serve::Error::InvalidConfig { field, .. },
        } => Some((path, field)),
        _ => None,
    }
}

impl From<kvplan_planner::scenario::ScenarioError> for ScenarioError {
    fn from(e: kvplan_planner::scenario::ScenarioError) -> Self {
        ScenarioError::Simulate(Box::new(e))
    }
}

impl From<kvplan_planner::run::RunError> for ScenarioError {
    fn from(e: kvplan_planner::run::RunError) -> Self {
        ScenarioError::Run(Box::new(e))
    }
}

impl From<kvplan_serve::scenario::ScenarioError> for ScenarioError {
    fn from(e: kvplan_serve::scenario::ScenarioError) -> Self {
        ScenarioError::Serve(Box::new(e))
    }
}

impl ScenarioError {
    pub(crate) fn workload(e: kvplan_workloads::Error) -> Self {
        kvplan_serve::scenario::ScenarioError::from(e).into()
    }

    pub(crate) fn serve(e: kvplan_serve::Error) -> Self {
        kvplan_serve::scenario::ScenarioError::from(e).into()
    }

    /// The field at fault by its dotted path as the scenario file writes it
    /// (`workload.batch`, `serve.block_size`, `model`), where the error names one.
    pub fn field(&self) -> Option<String> {
        match self {
            ScenarioError::Simulate(e) => e.field().map(|f| f.as_str().to_string()),
            ScenarioError::Serve(e) => serve_field(e.as_ref()).map(|(table, field)| match table {
                "" => field.to_string(),
                t => format!("{t}.{field}"),
            }),
            _ => None,
        }
    }

    /// True for errors caused by the input (all but a failed simulation, a bug).
    pub fn is_input_error(&self) -> bool {
        use kvplan_serve::scenario::ScenarioError as S;
        match self {
            ScenarioError::Simulate(e) => e.is_input_error(),
            ScenarioError::Run(e) => e.is_input_error(),
            ScenarioError::Serve(e) => match e.as_ref() {
                S::Planner(e) => e.is_input_error(),
                S::Serve(e) => !matches!(
                    e,
                    kvplan_serve::Error::Stalled { .. }
                        | kvplan_serve::Error::OutOfMemory { .. }
                        | kvplan_serve::Error::Spill { .. }
                ),
                S::Workload(kvplan_workloads::Error::TooMany { .. }) => false,
                _ => true,
            },
            _ => true,
        }
    }
}
