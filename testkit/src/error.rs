//! The kit's one error: what failed, in words, for a test's panic message
//! or the soak's report.

use std::fmt;

/// A set-up or fault step that failed: a server that would not start, a
/// script that exited non-zero, a node that did not answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

/// The kit's results.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// An error saying `what`.
    pub fn new(what: impl Into<String>) -> Error {
        Error(what.into())
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}
