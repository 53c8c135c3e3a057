//! The binary's error: a one-line message and an exit code.

/// Exit code for bad input (unknown names, malformed files, impossible sizes, plans that do not
/// fit). clap uses the same code for malformed flags.
pub const EXIT_INPUT: i32 = 2;
/// Exit code for failures that are not the input's fault (I/O while writing, solver failure).
pub const EXIT_FAILURE: i32 = 1;

/// An error on its way to the user.
#[derive(Debug)]
pub struct CliError {
    /// Exit code.
    pub code: i32,
    /// One line, without the `error: ` prefix.
    pub message: String,
    /// A report to print on stdout before the error (a validation that ran but failed).
    pub stdout: Option<String>,
}

impl CliError {
    /// Bad input (exit code 2) where `input` (a library error's `is_input_error()`), else a
    /// failure (exit code 1).
    pub fn new(input: bool, message: impl Into<String>) -> Self {
        CliError {
            code: if input { EXIT_INPUT } else { EXIT_FAILURE },
            message: message.into(),
            stdout: None,
        }
    }

    /// Bad input (exit code 2).
    pub fn input(message: impl Into<String>) -> Self {
        Self::new(true, message)
    }

    /// A failure (exit code 1).
    pub fn failure(message: impl Into<String>) -> Self {
        Self::new(false, message)
    }

    /// A run that ended with no answer for its input (exit code 2), its report `stdout` printed
    /// first: what it did find, and why that is no answer.
    pub fn no_answer(stdout: String, message: impl Into<String>) -> Self {
        CliError {
            stdout: Some(stdout),
            ..Self::input(message)
        }
    }
}

impl From<kvplan_sim::Error> for CliError {
    fn from(e: kvplan_sim::Error) -> Self {
        CliError::failure(format!("simulation failed: {e}"))
    }
}

impl From<kvplan_exec::Error> for CliError {
    fn from(e: kvplan_exec::Error) -> Self {
        CliError::failure(e.to_string())
    }
}

/// A calibration error: bad input (its message names the option by the caller's label) exits
/// 2, a model or profile as the vocabulary's errors go, the rest (a measurement that cannot be
/// fitted, the executor) 1.
impl From<kvplan_calibrate::Error> for CliError {
    fn from(e: kvplan_calibrate::Error) -> Self {
        match e {
            kvplan_calibrate::Error::Input(m) => CliError::input(m),
            kvplan_calibrate::Error::Planner(p) => p.into(),
            other => CliError::failure(other.to_string()),
        }
    }
}

impl From<kvplan_planner::run::RunError> for CliError {
    fn from(e: kvplan_planner::run::RunError) -> Self {
        use kvplan_planner::run::RunError;
        match e {
            RunError::Plan(p) => p.into(),
            RunError::Simulate(s) => s.into(),
            other => CliError::new(other.is_input_error(), other.to_string()),
        }
    }
}
