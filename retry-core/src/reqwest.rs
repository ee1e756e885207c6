//! reqwest integration (feature `reqwest`).

use ::reqwest::RequestBuilder;

use crate::http::{CALLER_RETRIES, CALLER_RETRIES_VALUE};
use crate::scope;

/// A client builder with reqwest's own retries turned off: they would be a hidden second layer
/// under `#[retryable]`. For a client you build yourself, add the same line:
/// `.retry(reqwest::retry::never())`.
///
/// ```
/// let client = retry_core::reqwest::client_builder().build().unwrap();
/// # drop(client);
/// ```
pub fn client_builder() -> ::reqwest::ClientBuilder {
    ::reqwest::Client::builder().retry(::reqwest::retry::never())
}

/// Extensions for outgoing requests.
pub trait RequestBuilderExt {
    /// Adds `Caller-Retries: ?1` when the request is built inside a retry scope, so the server
    /// does not retry on the caller's behalf (see [`crate::http`]).
    ///
    /// ```
    /// use retry_core::reqwest::RequestBuilderExt;
    ///
    /// let client = retry_core::reqwest::client_builder().build().unwrap();
    /// let request = client.get("http://127.0.0.1:9/quote").caller_retries().build().unwrap();
    /// assert!(request.headers().get("caller-retries").is_none(), "not inside a retry");
    /// ```
    fn caller_retries(self) -> Self;
}

impl RequestBuilderExt for RequestBuilder {
    fn caller_retries(self) -> Self {
        if scope::is_active() {
            self.header(CALLER_RETRIES, CALLER_RETRIES_VALUE)
        } else {
            self
        }
    }
}
