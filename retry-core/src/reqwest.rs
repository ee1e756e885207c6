//! reqwest integration (feature `reqwest`).

use std::fmt;
use std::time::{Duration, SystemTime};

use ::http::{Method, StatusCode};
use ::reqwest::{RequestBuilder, Response, Url};

use crate::attempt_timeout;
use crate::classify::{Classify, Decision, Elapsed};
use crate::http::{
    CALLER_RETRIES, IDEMPOTENCY_KEY, IdempotencyKey, current_announcement, guarded,
    has_idempotency_key, judge, method_name, retry_after, status_text,
};

pub use crate::http::ConnectFailure;

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

/// `url` as errors, logs and stored records show it: without its userinfo (`user:password@`),
/// query and fragment, where credentials travel (`?api_key=..`, `#access_token=..`). A reason
/// built from an [`HttpError`] can end up in a dead letter or an audit row, kept for months.
///
/// ```
/// let url = reqwest::Url::parse("https://shop:s3cret@payments.example/v1/pay?api_key=k#t").unwrap();
/// assert_eq!(retry_core::reqwest::redacted_url(&url), "https://payments.example/v1/pay");
/// ```
pub fn redacted_url(url: &Url) -> String {
    let mut url = url.clone();
    // Both fail only for URLs that cannot have userinfo (`mailto:`), which then have none.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.set_query(None);
    url.set_fragment(None);
    url.into()
}

/// Extensions for outgoing requests.
pub trait RequestBuilderExt {
    /// Adds `Caller-Retries` when the request is built inside a retry scope, so the server
    /// does not retry on the caller's behalf, with the attempt and the policy's `max`
    /// (`?1;attempt=2;max=4`) so the services down the chain see which attempt this is (see
    /// [`crate::http`] and [`Announcement`](crate::http::Announcement)).
    ///
    /// ```
    /// use retry_core::reqwest::RequestBuilderExt;
    /// use retry_core::retryable;
    ///
    /// #[retryable(max = 4)]
    /// async fn build(client: &reqwest::Client) -> Result<reqwest::Request, reqwest::Error> {
    ///     client.get("http://127.0.0.1:9/quote").caller_retries().build()
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// let client = retry_core::reqwest::client_builder().build().unwrap();
    /// let request = client.get("http://127.0.0.1:9/quote").caller_retries().build().unwrap();
    /// assert!(request.headers().get("caller-retries").is_none(), "not inside a retry");
    ///
    /// let request = build(&client).await.unwrap();
    /// assert_eq!(request.headers()["caller-retries"], "?1;attempt=1;max=4");
    /// # }
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
        match current_announcement() {
            Some(announced) => self.header(CALLER_RETRIES, announced.header_value()),
            None => self,
        }
    }

    fn idempotency_key(self, key: &IdempotencyKey) -> Self {
        self.header(IDEMPOTENCY_KEY, key.header_value())
    }

    async fn send_checked(self) -> Result<Response, HttpError> {
        let (client, request) = self.build_split();
        let request = request.map_err(HttpError::unbuilt)?;
        let method = request.method().clone();
        let keyed = has_idempotency_key(request.headers());
        let url = redacted_url(request.url());
        // From here the request may reach the server: an `attempt_timeout` that cuts the
        // attempt off must not resend it (see `Elapsed::unsafe_request`).
        let noted = !method.is_idempotent() && !keyed;
        if noted {
            attempt_timeout::note_unsafe_send(method_name(&method));
        }
        #[cfg(feature = "opentelemetry")]
        crate::otel::record_resend();
        match client.execute(request).await {
            Ok(response) => check_response(Some(method), keyed, response).await,
            Err(e) => {
                if noted && e.is_connect() {
                    // Never connected: nothing reached the server.
                    attempt_timeout::note_not_sent();
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
    /// A request that could not be built: nothing was sent.
    pub(crate) fn unbuilt(e: ::reqwest::Error) -> Self {
        HttpError {
            method: None,
            keyed: false,
            url: e.url().map(redacted_url),
            failure: Failure::Transport(e),
        }
    }

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

    /// Whether the method guard turned a retry into a stop: the request may have reached the
    /// server, and sending it again without a key could apply it twice.
    fn resend_refused(&self) -> bool {
        self.judged(guarded).0 != self.raw().0
    }

    /// The decision with the method guard, and its reason, by `rule`: [`judge`] where the
    /// failure is decided (`classify`, which says when the request is not sent again), the
    /// quiet [`guarded`] elsewhere.
    fn judged(&self, rule: JudgeRule) -> (Decision, String) {
        let (decision, what, reached) = self.raw();
        match &self.method {
            Some(method) => rule(method, self.keyed, decision, reached, what),
            None => (decision, what),
        }
    }
}

/// The method and URL (as [`redacted_url`] shows it), and what happened in a few words: a transport failure says its kind
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
        }?;
        if self.resend_refused() {
            f.write_str(" (not sent again: without Idempotency-Key it may have taken effect)")?;
        }
        Ok(())
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
/// [`judge`] or [`guarded`].
type JudgeRule = fn(&Method, bool, Decision, bool, String) -> (Decision, String);

impl Classify for HttpError {
    fn classify(&self) -> Decision {
        self.judged(judge).0
    }

    fn reason(&self) -> Option<String> {
        Some(self.judged(guarded).1)
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

/// A reqwest error in a few words: "timeout", "connect error", "503 Service Unavailable".
pub(crate) fn transport_text(e: &::reqwest::Error) -> String {
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
    let url = Some(redacted_url(response.url()));
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
