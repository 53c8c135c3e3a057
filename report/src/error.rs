//! The crate's one error: a rendering or output-file failure. A leaf: it imports nothing of
//! the crate.

/// A rendering or output-file error: one line, and whether the input is at fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// Bad input (a path that is a directory, a missing parent directory, a symlink loop).
    Input(String),
    /// A failure that is not the input's fault (a full disk, a value that cannot be rendered).
    Failure(String),
}

impl Error {
    /// Whether the input is at fault.
    pub fn is_input(&self) -> bool {
        matches!(self, Error::Input(_))
    }

    /// The one-line message.
    pub fn message(&self) -> &str {
        match self {
            Error::Input(m) | Error::Failure(m) => m,
        }
    }
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for Error {}
