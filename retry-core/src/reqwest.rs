//! reqwest integration (feature `reqwest`).

use std::fmt;
use std::time::{Duration, SystemTime};

use ::http::{Method, StatusCode};
use ::reqwest::{RequestBuilder, Response};

use crate::attempt;
use crate::classify::{Classify, Decision, Elapsed};
use crate::http::{
    CALLER_RETRIES, CALLER_RETRIES_VALUE, IDEMPOTENCY_KEY, IdempotencyKey, guard_resend,
    has_idempotency_key, retry_after, status_text,
};
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

    /// Adds `Idempotency-Key: "<key>"` (see [`IdempotencyKey`]). Make the key once per logical
    /// operation, outside the retried call, so every attempt carries the same one: the server
    /// then runs the operation once, and [`send_checked`](Self::send_checked) may resend a POST
    /// that failed after it reached the server.
    ///
    /// ```
    /// use retry_core::http::IdempotencyKey;
    /// use retry_core::reqwest::RequestBuilderExt;
    ///
    /// let client = retry_core::reqwest::client_builder().build().unwrap();
    /// let key = IdempotencyKey::new();
    /// let request = client
    ///     .post("http://127.0.0.1:9/payments")
    ///     .idempotency_key(&key)
    ///     .build()
    ///     .unwrap();
    /// assert_eq!(request.headers()["idempotency-key"], key.header_value());
    /// ```
    ///
    /// Inside an `#[idempotent]` body, derive the downstream key from the body's own claim
    /// ([`Claim::derive`](crate::idempotency::Claim::derive)): every run of the same incoming key
    /// (a resend after a lease ran out, a redrive) then sends the same downstream key, so the
    /// service called dedups it too.
    ///
    /// ```
    /// use retry_core::idempotency::{current, IdempotencyError, MemoryStore};
    /// use retry_core::idempotent;
    /// use retry_core::reqwest::RequestBuilderExt;
    ///
    /// #[derive(Debug)]
    /// struct Failed;
    /// impl From<IdempotencyError> for Failed { fn from(_: IdempotencyError) -> Self { Failed } }
    ///
    /// #[idempotent(key = order, store = inbox)]
    /// async fn book(inbox: &MemoryStore, order: u64) -> Result<String, Failed> {
    ///     let client = retry_core::reqwest::client_builder().build().map_err(|_| Failed)?;
    ///     let claim = current().ok_or(Failed)?;
    ///     let request = client
    ///         .post("http://127.0.0.1:9/ledger/entries")
    ///         .idempotency_key(&claim.derive("ledger-entry"))
    ///         .build()
    ///         .map_err(|_| Failed)?;
    ///     // client.execute(request).await ...
    ///     Ok(request.headers()["idempotency-key"].to_str().map_err(|_| Failed)?.to_owned())
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let (first, again) = (MemoryStore::new(), MemoryStore::new());
    /// assert_eq!(book(&first, 7).await.unwrap(), book(&again, 7).await.unwrap());
    /// # }
    /// ```
    fn idempotency_key(self, key: &IdempotencyKey) -> Self;

    /// Sends the request and turns a transport failure or an error status (4xx, 5xx) into an
    /// [`HttpError`] that knows the method and whether the request carried `Idempotency-Key`,
    /// so its classification can refuse to resend a POST that may have taken effect. A 1xx,
    /// 2xx or 3xx (a `304 Not Modified`, a redirect the client does not follow) is not an
    /// error: it comes back as `Ok`.
    ///
    /// Under `#[retryable(attempt_timeout = ..)]` (`E: From<Elapsed>`, as `HttpError` is), a
    /// POST or PATCH without `Idempotency-Key` that the attempt timeout cuts off is not sent
    /// again either: `send_checked` notes such a request on the running attempt, and the
    /// [`Elapsed`] the timeout makes classifies [`Decision::Stop`]. Only requests sent with
    /// `send_checked` from the attempt's own task are seen (not from a task it spawns).
    ///
    /// With the feature `opentelemetry`, a request sent by a retry's second attempt or a later
    /// one sets the attribute `http.request.resend_count` (1, 2, ...: the OpenTelemetry
    /// semantic convention) on the current OpenTelemetry span (`Context::current()`); the first
    /// attempt sets nothing. Open a span per attempt inside the retried function to see each
    /// request's count; a span around the whole call ends with the last one.
    ///
    /// ```no_run
    /// use retry_core::reqwest::{client_builder, HttpError, RequestBuilderExt};
    /// use retry_core::retryable;
    ///
    /// #[retryable(max = 4, base = "200ms")]
    /// async fn pay(client: &reqwest::Client, key: &str) -> Result<String, HttpError> {
    ///     let response = client
    ///         .post("http://127.0.0.1:8080/payments")
    ///         .header("Idempotency-Key", key)
    ///         .send_checked()
    ///         .await?;
    ///     Ok(response.text().await.unwrap_or_default())
    /// }
    /// ```
    fn send_checked(self) -> impl std::future::Future<Output = Result<Response, HttpError>> + Send;
}

impl RequestBuilderExt for RequestBuilder {
    fn caller_retries(self) -> Self {
        if scope::is_active() {
            self.header(CALLER_RETRIES, CALLER_RETRIES_VALUE)
        } else {
            self
        }
    }

    fn idempotency_key(self, key: &IdempotencyKey) -> Self {
        self.header(IDEMPOTENCY_KEY, key.header_value())
    }

    async fn send_checked(self) -> Result<Response, HttpError> {
        let (client, request) = self.build_split();
        let request = request.map_err(|e| HttpError {
            method: None,
            keyed: false,
            url: e.url().map(ToString::to_string),
            failure: Failure::Transport(e),
        })?;
        let method = request.method().clone();
        let keyed = has_idempotency_key(request.headers());
        let url = request.url().to_string();
        // From here the request may reach the server: an `attempt_timeout` that cuts the
        // attempt off must not resend it (see `Elapsed::unsafe_request`).
        let noted = !method.is_idempotent() && !keyed;
        if noted {
            attempt::note_unsafe_send(method_name(&method));
        }
        #[cfg(feature = "opentelemetry")]
        crate::otel::record_resend();
        match client.execute(request).await {
            Ok(response) => check_response(Some(method), keyed, response).await,
            Err(e) => {
                if noted && e.is_connect() {
                    // Never connected: nothing reached the server.
                    attempt::note_not_sent();
                }
                Err(HttpError {
                    method: Some(method),
                    keyed,
                    url: Some(url),
                    failure: Failure::Transport(e),
                })
            }
        }
    }
}

/// A `'static` name for a non-idempotent method, for [`Elapsed::unsafe_request`].
fn method_name(method: &Method) -> &'static str {
    match *method {
        Method::POST => "POST",
        Method::PATCH => "PATCH",
        Method::CONNECT => "CONNECT",
        // An extension method: not idempotent by RFC 9110, and its name is not `'static`.
        _ => "request",
    }
}

/// How much of an error response's body an [`HttpError`] keeps for people to read.
pub const BODY_EXCERPT_LIMIT: usize = 1024;

/// A request that failed: the transport error or the non-success status, with what the
/// classification needs (the method, whether it carried `Idempotency-Key`, `Retry-After`) and
/// the start of the body for a person to read. Made by [`RequestBuilderExt::send_checked`] and
/// [`ResponseExt::check`]; classify it with [`Classify`].
#[derive(Debug)]
pub struct HttpError {
    method: Option<Method>,
    keyed: bool,
    url: Option<String>,
    failure: Failure,
}

#[derive(Debug)]
enum Failure {
    Transport(::reqwest::Error),
    /// The attempt ran past its `attempt_timeout` (it knows whether an unsafe request was cut off).
    Elapsed(Elapsed),
    Status {
        status: StatusCode,
        retry_after: Option<Duration>,
        excerpt: String,
    },
}

impl HttpError {
    /// The response status, when the server answered.
    pub fn status(&self) -> Option<StatusCode> {
        match &self.failure {
            Failure::Status { status, .. } => Some(*status),
            Failure::Transport(e) => e.status(),
            Failure::Elapsed(_) => None,
        }
    }

    /// The server's `Retry-After`, when it sent a valid one with a 429 or 503.
    pub fn retry_after(&self) -> Option<Duration> {
        match &self.failure {
            Failure::Status { retry_after, .. } => *retry_after,
            Failure::Transport(_) | Failure::Elapsed(_) => None,
        }
    }

    /// The first [`BODY_EXCERPT_LIMIT`] bytes of the error response's body (lossy UTF-8).
    pub fn body_excerpt(&self) -> &str {
        match &self.failure {
            Failure::Status { excerpt, .. } => excerpt,
            Failure::Transport(_) | Failure::Elapsed(_) => "",
        }
    }

    /// The transport error, when the request got no response.
    pub fn transport(&self) -> Option<&::reqwest::Error> {
        match &self.failure {
            Failure::Transport(e) => Some(e),
            Failure::Status { .. } | Failure::Elapsed(_) => None,
        }
    }

    /// What happened, without the method guard.
    fn raw(&self) -> (Decision, String, bool) {
        match &self.failure {
            // Never connected: nothing reached the server, any method may be sent again
            // (unless the name or the certificate is wrong, which no resend fixes).
            Failure::Transport(e) if e.is_connect() => (e.classify(), transport_text(e), false),
            Failure::Transport(e) => (e.classify(), transport_text(e), true),
            // The method guard is already in the `Elapsed` (see `Elapsed::unsafe_request`).
            Failure::Elapsed(elapsed) => (
                elapsed.classify(),
                elapsed.reason().unwrap_or_default(),
                false,
            ),
            Failure::Status {
                status,
                retry_after,
                ..
            } => {
                let decision = match (status.classify(), retry_after) {
                    (Decision::Retry, Some(wait)) => Decision::RetryAfter(*wait),
                    (decision, _) => decision,
                };
                // A 5xx may have been produced after the effect; 408 and 429 were refused.
                (decision, status_text(*status), status.is_server_error())
            }
        }
    }

    fn unsafe_resend(&self) -> Option<&Method> {
        let (decision, _, reached) = self.raw();
        let method = self.method.as_ref()?;
        (reached && guard_resend(decision, method, self.keyed) != decision).then_some(method)
    }
}

/// The method and URL, and what happened in a few words: a transport failure says its kind
/// ("connect error", "timeout"), and reqwest's error is the source, with the details.
impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(method) = &self.method {
            write!(f, "{method} ")?;
        }
        if let Some(url) = &self.url {
            write!(f, "{url} ")?;
        }
        match &self.failure {
            Failure::Transport(e) => write!(f, "failed: {}", transport_text(e)),
            // A leaf of this crate, said whole here (not kept as a source).
            Failure::Elapsed(e) => write!(f, "failed: {e}"),
            Failure::Status {
                status, excerpt, ..
            } if excerpt.is_empty() => {
                write!(f, "answered {}", status_text(*status))
            }
            Failure::Status {
                status, excerpt, ..
            } => {
                write!(f, "answered {}: {excerpt}", status_text(*status))
            }
        }
    }
}

impl std::error::Error for HttpError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.failure {
            Failure::Transport(e) => Some(e),
            Failure::Elapsed(_) | Failure::Status { .. } => None,
        }
    }
}

/// An attempt cut off by `attempt_timeout`, so `#[retryable(attempt_timeout = ..)]` works on
/// functions returning `HttpError`. It is retried, unless it cut off a POST or PATCH sent with
/// [`RequestBuilderExt::send_checked`] without `Idempotency-Key` (see [`Elapsed`]).
///
/// ```
/// use retry_core::reqwest::HttpError;
/// use retry_core::{Classify, Decision, Elapsed};
/// use std::time::Duration;
///
/// let e = HttpError::from(Elapsed::new(Duration::from_secs(1)));
/// assert_eq!(e.classify(), Decision::Retry);
/// assert_eq!(e.to_string(), "failed: attempt timed out after 1s");
/// ```
impl From<Elapsed> for HttpError {
    fn from(elapsed: Elapsed) -> Self {
        HttpError {
            method: None,
            keyed: false,
            url: None,
            failure: Failure::Elapsed(elapsed),
        }
    }
}

/// Transient transport failures and 5xx are retried, as are 408 and 429 (`Retry-After`
/// honoured); other statuses stop. A POST or PATCH that may have reached the server (a timeout,
/// a reset after sending, a 5xx) is retried only with an `Idempotency-Key` header.
impl Classify for HttpError {
    fn classify(&self) -> Decision {
        match self.unsafe_resend() {
            Some(_) => Decision::Stop,
            None => self.raw().0,
        }
    }

    fn reason(&self) -> Option<String> {
        let (_, what, _) = self.raw();
        Some(match self.unsafe_resend() {
            Some(method) => format!("{method} without Idempotency-Key after {what}"),
            None => what,
        })
    }
}

/// Connection failures, timeouts and failures while sending or reading are retried; a request
/// that could not be built, a body that could not be decoded and a redirect loop are not. Two
/// connection failures are not transient either: a host name that does not exist, and a TLS
/// certificate that fails verification (see [`ConnectFailure`] for how they are told apart).
/// Connection refused is retried. An error made by `error_for_status` is classified by its
/// status. Without the request's method this cannot apply the POST rule: use
/// [`RequestBuilderExt::send_checked`] for that.
impl Classify for ::reqwest::Error {
    fn classify(&self) -> Decision {
        if let Some(status) = self.status() {
            return status.classify();
        }
        // A wrong host name or certificate is a connect error, but no resend fixes it.
        let hopeless_connect =
            self.is_connect() && ConnectFailure::of(self) != ConnectFailure::Other;
        if self.is_builder() || self.is_decode() || self.is_redirect() || hopeless_connect {
            Decision::Stop
        } else if self.is_connect() || self.is_timeout() || self.is_request() || self.is_body() {
            Decision::Retry
        } else {
            Decision::Stop
        }
    }

    fn reason(&self) -> Option<String> {
        Some(transport_text(self))
    }
}

fn transport_text(e: &::reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timeout"
    } else if e.is_connect() {
        match ConnectFailure::of(e) {
            ConnectFailure::NoSuchHost => "no such host",
            ConnectFailure::CertificateRejected => "TLS certificate rejected",
            ConnectFailure::Other => "connect error",
        }
    } else if e.is_redirect() {
        "redirect error"
    } else if e.is_decode() {
        "decode error"
    } else if e.is_builder() {
        "invalid request"
    } else if let Some(status) = e.status() {
        return status_text(status);
    } else {
        "transport error"
    };
    kind.to_owned()
}

/// Turns non-success responses into [`HttpError`]s.
pub trait ResponseExt: Sized {
    /// `Ok(self)` for a 1xx, 2xx or 3xx (a `304 Not Modified` is an answer); for a 4xx or 5xx an [`HttpError`] with the status, `Retry-After` and the
    /// start of the body, so a `#[retryable]` function can simply `?` it. The request's method is
    /// not known here: for the POST rule use [`RequestBuilderExt::send_checked`].
    fn check(self) -> impl std::future::Future<Output = Result<Self, HttpError>> + Send;
}

impl ResponseExt for Response {
    async fn check(self) -> Result<Self, HttpError> {
        check_response(None, false, self).await
    }
}

async fn check_response(
    method: Option<Method>,
    keyed: bool,
    mut response: Response,
) -> Result<Response, HttpError> {
    let status = response.status();
    // 1xx, 2xx and 3xx are answers, not failures: a `304 Not Modified` to a conditional GET,
    // or a redirect the client was told not to follow, is for the caller to read.
    if !(status.is_client_error() || status.is_server_error()) {
        return Ok(response);
    }
    let retry_after = retry_after(status, response.headers(), SystemTime::now());
    let url = Some(response.url().to_string());
    let mut body = Vec::new();
    // Bounded: an error page may be large, and only its start helps a person.
    while body.len() < BODY_EXCERPT_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    body.truncate(BODY_EXCERPT_LIMIT);
    Err(HttpError {
        method,
        keyed,
        url,
        failure: Failure::Status {
            status,
            retry_after,
            excerpt: String::from_utf8_lossy(&body).into_owned(),
        },
    })
}

/// Why a connection could not be made, read from a reqwest error's source chain: the two
/// failures that no resend fixes, and everything else (refused, reset, unreachable, a DNS server
/// that did not answer), which may work next time.
///
/// reqwest does not expose these as kinds, and the errors underneath depend on the resolver and
/// the TLS stack the application picked (reqwest's features), so the chain is read as text:
///
/// - **No such host**: hyper-util's connector wraps every resolution failure in an error whose
///   message is exactly `"dns error"`; below it, the resolver says why. A name that does not
///   exist reads "Name or service not known" / "No address associated with hostname" (glibc
///   `EAI_NONAME` / `EAI_NODATA`), "nodename nor servname provided, or not known" (macOS),
///   "Name does not resolve" (musl), "No such host is known" (Windows `WSAHOST_NOT_FOUND`) or
///   "no record found" (hickory-dns). A temporary failure ("Temporary failure in name
///   resolution", `EAI_AGAIN`) matches none of these and stays transient.
/// - **Certificate rejected**: rustls reports "invalid peer certificate: .." (its
///   `Error::InvalidCertificate`, also what rustls-platform-verifier returns), OpenSSL through
///   native-tls "certificate verify failed", Security.framework and SChannel "not trusted".
///
/// glibc's and OpenSSL's answers are also checked against real failures (the workspace's
/// `tests/reqwest_connect.rs`: a loopback TLS server with a self-signed certificate, and
/// `no-such-host.invalid`); the others only on constructed chains of the text those stacks give.
///
/// ```
/// use retry_core::reqwest::ConnectFailure;
/// use std::io;
///
/// let refused = io::Error::from(io::ErrorKind::ConnectionRefused);
/// assert_eq!(ConnectFailure::of(&refused), ConnectFailure::Other);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectFailure {
    /// The host name does not exist (the resolver answered: no such name).
    NoSuchHost,
    /// The server's TLS certificate failed verification.
    CertificateRejected,
    /// Anything else: refused, reset, unreachable, timed out, a resolver that did not answer.
    Other,
}

/// What resolvers say when a name does not exist (see [`ConnectFailure`]).
const NO_SUCH_NAME: &[&str] = &[
    "name or service not known",
    "no address associated with hostname",
    "nodename nor servname provided",
    "name does not resolve",
    "no such host is known",
    "no record found",
    "no records found",
];

/// What TLS stacks say when the peer's certificate fails verification.
const CERTIFICATE_REJECTED: &[&str] = &[
    "invalid peer certificate",
    "certificate verify failed",
    "not trusted",
];

impl ConnectFailure {
    /// Reads `error` and its sources (see the type's documentation for what is matched).
    pub fn of(error: &(dyn std::error::Error + 'static)) -> Self {
        let mut resolving = false;
        let mut next = Some(error);
        while let Some(error) = next {
            let text = error.to_string();
            // hyper-util's `ConnectError::new("dns error", cause)`: only what is below it is
            // the resolver's answer.
            resolving |= text == "dns error";
            let text = text.to_ascii_lowercase();
            if resolving && NO_SUCH_NAME.iter().any(|known| text.contains(known)) {
                return ConnectFailure::NoSuchHost;
            }
            if CERTIFICATE_REJECTED
                .iter()
                .any(|known| text.contains(known))
            {
                return ConnectFailure::CertificateRejected;
            }
            next = error.source();
        }
        ConnectFailure::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A chain as hyper-util's connector builds it: a message over a cause.
    #[derive(Debug)]
    struct Wrapped(&'static str, Box<dyn std::error::Error + Send + Sync>);

    impl fmt::Display for Wrapped {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&*self.1)
        }
    }

    fn dns(cause: &str) -> Wrapped {
        Wrapped("dns error", std::io::Error::other(cause.to_owned()).into())
    }

    #[test]
    fn a_name_that_does_not_exist_is_told_from_a_resolver_that_did_not_answer() {
        for missing in [
            "failed to lookup address information: Name or service not known",
            "failed to lookup address information: No address associated with hostname",
            "failed to lookup address information: nodename nor servname provided, or not known",
            "failed to lookup address information: Name does not resolve",
            "No such host is known. (os error 11001)",
            "no record found for Query { name: Name(\"x.invalid.\") }",
        ] {
            assert_eq!(
                ConnectFailure::of(&Wrapped("client error (Connect)", dns(missing).into())),
                ConnectFailure::NoSuchHost,
                "{missing}"
            );
        }
        let again =
            dns("failed to lookup address information: Temporary failure in name resolution");
        assert_eq!(ConnectFailure::of(&again), ConnectFailure::Other);
        // The same words outside a resolution failure are not a DNS answer.
        let elsewhere = std::io::Error::other("Name or service not known");
        assert_eq!(ConnectFailure::of(&elsewhere), ConnectFailure::Other);
    }

    #[test]
    fn a_certificate_that_fails_verification_is_told_from_other_tls_failures() {
        for rejected in [
            // rustls `Error::InvalidCertificate(CertificateError::UnknownIssuer)`.
            "invalid peer certificate: UnknownIssuer",
            // OpenSSL 3.0 through native-tls: what tests/reqwest_connect.rs gets from its
            // loopback server, word for word.
            "error:0A000086:SSL routines:tls_post_process_server_certificate:certificate verify failed:../ssl/statem/statem_clnt.c:1889: (self-signed certificate)",
            // SChannel.
            "The certificate chain was issued by an authority that is not trusted.",
        ] {
            let chain = Wrapped(
                "client error (Connect)",
                std::io::Error::new(std::io::ErrorKind::InvalidData, rejected).into(),
            );
            assert_eq!(
                ConnectFailure::of(&chain),
                ConnectFailure::CertificateRejected,
                "{rejected}"
            );
        }
        let reset = Wrapped(
            "client error (Connect)",
            std::io::Error::from(std::io::ErrorKind::ConnectionReset).into(),
        );
        assert_eq!(ConnectFailure::of(&reset), ConnectFailure::Other);
    }
}
