//! An error and its causes on one line, for logs and dead-letter reasons.
//!
//! Every error type of this crate says only its own part in `Display` and hands its cause out
//! through `source()`, never both (anyhow's `{:#}` and `tracing`'s error fields print the whole
//! chain, and would print a cause that is also in the message twice). Where the crate itself
//! writes an error into a log line or a stored reason, it writes the whole chain with
//! [`error_chain`], so nothing a person needs is lost.

use std::error::Error;
use std::fmt;

/// Shows `error` and each of its sources, joined by `": "`, as anyhow's `{:#}` does.
///
/// ```
/// use retry_core::error_chain;
///
/// #[derive(Debug)]
/// struct StoreFailed(std::io::Error);
///
/// impl std::fmt::Display for StoreFailed {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         f.write_str("dead-letter store failed")
///     }
/// }
///
/// impl std::error::Error for StoreFailed {
///     fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
///         Some(&self.0)
///     }
/// }
///
/// let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused");
/// let error = StoreFailed(refused);
/// assert_eq!(error.to_string(), "dead-letter store failed");
/// assert_eq!(
///     error_chain(&error).to_string(),
///     "dead-letter store failed: connection refused"
/// );
/// ```
pub fn error_chain<'a>(error: &'a (dyn Error + 'a)) -> impl fmt::Display + 'a {
    ErrorChain(error)
}

struct ErrorChain<'a>(&'a (dyn Error + 'a));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(e) = cause {
            write!(f, ": {e}")?;
            cause = e.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_leaf_is_its_message() {
        let leaf = std::io::Error::other("disk full");
        assert_eq!(error_chain(&leaf).to_string(), "disk full");
    }
}
