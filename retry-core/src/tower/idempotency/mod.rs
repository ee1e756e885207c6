//! [`IdempotencyLayer`]: the server side of the `Idempotency-Key` header (IETF httpapi draft
//! `draft-ietf-httpapi-idempotency-key-header`), on any [`IdempotencyStore`].
//!
//! # What the draft asks, and what this layer does
//!
//! A client sends a non-idempotent request (`POST`, `PATCH`) with `Idempotency-Key: "<key>"`,
//! one unique key per logical operation, and sends the same key again on every retry of it.
//! The server runs the operation once per key and answers every resend with the first
//! response. For each request that carries a key, the layer:
//!
//! | the request                                        | the answer                          |
//! |----------------------------------------------------|-------------------------------------|
//! | no client scope on an authenticated layer          | `401`, nothing runs                 |
//! | no key, on a layer that requires one               | `400` "Idempotency-Key is missing"  |
//! | key malformed, or longer than `max_key_bytes`      | `400`                               |
//! | body larger than `max_body_bytes`                  | `413`                               |
//! | the store cannot be reached                        | `503`, nothing runs (fail closed)   |
//! | first use of the key                               | the handler runs; its response      |
//! | same key while the first request is still running  | `409`                               |
//! | same key, another request (fingerprint differs)    | `422`                               |
//! | same key, same request, first one finished         | the stored response, replayed       |
//!
//! Error answers are small `application/problem+json` bodies (RFC 9457) whose `title` names the
//! problem and whose `detail` says what to do. Problems the draft defines (missing, malformed or
//! reused key, request outstanding) use the draft's page as `type` and its titles; the others
//! use `about:blank` with the status phrase as title.
//!
//! Safe methods (`GET`, `HEAD`, `OPTIONS`, `TRACE`) always pass straight through: they have no
//! effect to repeat, and a stored answer would only serve stale reads. So does a request without
//! a key on a layer built with [`required(false)`](IdempotencyLayer::required).
//!
//! # The key
//!
//! The draft makes the header a structured-field String: `Idempotency-Key: "8e03978e"`
//! (RFC 8941: printable ASCII, `\"` and `\\` escaped, no parameters). Many clients send the key
//! bare (`Idempotency-Key: 8e03978e`), as Stripe documents it; the layer accepts that too when
//! the value has no space, quote, backslash, `,` or `;`, and reads both forms as the same key,
//! so a client that switches form cannot run an operation twice. A request with more than one
//! `Idempotency-Key` field is malformed. Keys are at most [`DEFAULT_MAX_KEY_BYTES`] bytes
//! unless [`max_key_bytes`](IdempotencyLayer::max_key_bytes) says otherwise.
//!
//! # Scope: whose key it is
//!
//! A stored response is only ever returned to the client that caused it. The layer is built
//! with a function from the request head to the authenticated client
//! ([`IdempotencyLayer::new`]), and every key is stored under that scope: client B sending
//! client A's key runs its own request and never sees A's response. A request for which the
//! function finds no client gets `401`. Put your authentication in front of this layer: its
//! `401` carries the proper `WWW-Authenticate` challenge, this one is a backstop. A route
//! without authentication must say so with [`IdempotencyLayer::unauthenticated`]; there, the
//! key alone finds the response, so it must be unguessable (as
//! [`IdempotencyKey`](crate::http::IdempotencyKey) makes it).
//!
//! # Fingerprint
//!
//! The same key with another request is a client bug (`422`), told apart by a fingerprint of the
//! method, path, query and body. Headers are not part of it: a resend may carry a new date or
//! trace id.
//!
//! # Which responses are stored
//!
//! The draft asks for the final response to be stored. A response that says "not processed, try
//! again" would turn a transient refusal into a permanent one, so, as Stripe does, the layer
//! releases the claim for every `5xx` and for `408` and `429`, and stores everything else
//! (`2xx`, `3xx`, the other `4xx`). A released key runs the handler again when it is resent. A
//! handler that fails (the inner service returns `Err`, or its body fails while it is read) is
//! released the same way. A client that disconnects while the handler runs drops the claim,
//! which the store releases (or its lease frees).
//!
//! The response is stored before it is sent, so a resend that follows it always finds it.
//!
//! # Replay
//!
//! A replay carries the stored status and body bytes, the stored headers on the replay
//! allow-list ([`replay_headers`](IdempotencyLayer::replay_headers); by default
//! `Content-Type`, `Content-Language`, `Content-Location`, `Location`, `ETag` and
//! `Last-Modified`) and `Idempotent-Replayed: ?1` ([`IDEMPOTENT_REPLAYED`]: a structured-field
//! boolean, the name Stripe uses). Credentials are never stored or replayed, even if asked for:
//! `Set-Cookie` would hand a session to whoever holds the key, and `Authorization`,
//! `WWW-Authenticate` and the like belong to one exchange. Framing headers (`Content-Length`,
//! `Transfer-Encoding`, ...) are computed for the replay instead. Trailers are not stored.
//!
//! # Limits
//!
//! The request body is buffered to fingerprint it: at most [`DEFAULT_MAX_BODY_BYTES`] unless
//! [`max_body_bytes`](IdempotencyLayer::max_body_bytes) says otherwise; a larger one gets `413`
//! (at once when `Content-Length` says so) and nothing runs. The response is buffered to store
//! it, up to the store's [`Limits::max_response_bytes`](crate::idempotency::Limits). A larger
//! response is still sent to the first client in full (what does not fit is streamed, not
//! buffered), but it cannot be kept: its effect happened, so the key is marked failed, never
//! released — a resend gets `409` "Response for this Idempotency-Key was not kept" instead of
//! repeating the operation. This is logged as a warning and counted in
//! [`metrics::names::NOT_STORED`].
//!
//! # Store, lease, retention
//!
//! Claims follow the same flow as `#[idempotent]` (see [`crate::idempotency`]): an `INSERT`
//! under the primary key, a fencing token, a lease ([`lease`](IdempotencyLayer::lease), default
//! 30 s: set it longer than your slowest handler, or a resend may take the key over while the
//! first request still runs) and a retention ([`retention`](IdempotencyLayer::retention),
//! default 30 days: longer than any client retries; the draft asks servers to publish it).
//!
//! # Body types
//!
//! The inner service gets `Request<`[`IdempotencyBody`]`>` and the layer answers with
//! `Response<IdempotencyBody>`: any [`http_body::Body`] of [`Bytes`], boxed, which axum, hyper
//! and tonic accept. The inner service may answer with any body of `Bytes`.
//!
//! [`IDEMPOTENT_REPLAYED`]: crate::http::IDEMPOTENT_REPLAYED

mod body;
mod fingerprint;
mod key;
mod problem;
mod replay;
mod settle;
mod stored;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ::bytes::Bytes;
use ::http::header::HeaderName;
use ::http::request::Parts;
use ::http::{Method, Request, Response};
use ::http_body::Body;
use ::http_body_util::Full;
use ::tower_layer::Layer;
use ::tower_service::Service;

pub use body::{BoxError, IdempotencyBody};
pub use replay::RefusedHeader;

use crate::idempotency::{
    Begun, DEFAULT_LEASE, DEFAULT_RETENTION, IdempotencyError, IdempotencyStore, Settings,
    begin_call, encode_key, encode_scoped_key,
};
use body::read_request;
use fingerprint::fingerprint;
use key::KeyField;
use problem::Problem;
use replay::{ReplayHeaders, replay};
use settle::{keep, release};

/// Longest `Idempotency-Key` accepted by default, in bytes: 255, as Stripe allows; a UUID or an
/// [`IdempotencyKey`](crate::http::IdempotencyKey) is 32 to 36.
///
/// ```
/// assert_eq!(retry_core::tower::DEFAULT_MAX_KEY_BYTES, 255);
/// ```
pub const DEFAULT_MAX_KEY_BYTES: usize = 255;

/// Largest request body buffered by default to fingerprint it, in bytes: 1 MiB.
///
/// ```
/// assert_eq!(retry_core::tower::DEFAULT_MAX_BODY_BYTES, 1 << 20);
/// ```
pub const DEFAULT_MAX_BODY_BYTES: usize = 1 << 20;

/// Who the scope function says sent a request.
type ScopeFn = Arc<dyn Fn(&Parts) -> Option<String> + Send + Sync>;

/// Answers resends of a request carrying `Idempotency-Key` with the first response, on any
/// [`IdempotencyStore`]; see the [module docs](crate::tower::idempotency) for the semantics and status codes.
///
/// ```
/// use axum::{Router, body::Body, routing::post};
/// use http::{Request, request::Parts};
/// use retry_core::idempotency::MemoryStore;
/// use retry_core::tower::IdempotencyLayer;
/// use tower_service::Service;
/// use std::sync::atomic::{AtomicU32, Ordering};
///
/// /// The client the authentication in front of this layer accepted: here, the bearer token.
/// fn client(parts: &Parts) -> Option<String> {
///     let token = parts.headers.get("authorization")?.to_str().ok()?;
///     token.strip_prefix("Bearer ").map(str::to_owned)
/// }
///
/// static CHARGES: AtomicU32 = AtomicU32::new(0);
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let mut app = Router::new()
///     .route("/payments", post(|| async {
///         CHARGES.fetch_add(1, Ordering::SeqCst);
///         "paid"
///     }))
///     .layer(IdempotencyLayer::new(MemoryStore::new(), client));
///
/// let pay = || {
///     Request::post("/payments")
///         .header("authorization", "Bearer alice")
///         .header("idempotency-key", "\"order-1234\"")
///         .body(Body::from("{\"amount\":10}"))
///         .unwrap()
/// };
/// let first = app.call(pay()).await.unwrap();
/// let again = app.call(pay()).await.unwrap();
/// assert_eq!(CHARGES.load(Ordering::SeqCst), 1, "the resend was answered from the store");
/// assert!(first.headers().get("idempotent-replayed").is_none());
/// assert_eq!(again.headers()["idempotent-replayed"], "?1");
///
/// let unkeyed = Request::post("/payments")
///     .header("authorization", "Bearer alice")
///     .body(Body::empty())
///     .unwrap();
/// assert_eq!(app.call(unkeyed).await.unwrap().status(), 400);
/// # }
/// ```
pub struct IdempotencyLayer<St> {
    store: Arc<St>,
    /// `None`: the layer was built `unauthenticated`.
    scope: Option<ScopeFn>,
    required: bool,
    max_key_bytes: usize,
    max_body_bytes: usize,
    lease: Duration,
    retention: Duration,
    replay_headers: ReplayHeaders,
    name: &'static str,
}

impl<St: IdempotencyStore + 'static> IdempotencyLayer<St> {
    /// A layer whose keys belong to the client `scope` finds in each request's head (the user id
    /// or API key your authentication established, e.g. from a header or a request extension).
    /// A request for which it returns `None` gets `401`.
    ///
    /// ```
    /// use http::request::Parts;
    /// use retry_core::idempotency::MemoryStore;
    /// use retry_core::tower::IdempotencyLayer;
    ///
    /// #[derive(Clone)]
    /// struct Account(String);
    ///
    /// // The account an authentication layer in front of this one put into the request.
    /// let layer = IdempotencyLayer::new(MemoryStore::new(), |parts: &Parts| {
    ///     parts.extensions.get::<Account>().map(|account| account.0.clone())
    /// });
    /// # drop(layer);
    /// ```
    pub fn new<F>(store: St, scope: F) -> Self
    where
        F: Fn(&Parts) -> Option<String> + Send + Sync + 'static,
    {
        Self::build(store, Some(Arc::new(scope)))
    }

    /// A layer for a route without authentication: every caller shares one key space, so the
    /// key alone finds a stored response. Use it only when callers cannot read each other's
    /// responses that way, i.e. with unguessable keys such as
    /// [`IdempotencyKey`](crate::http::IdempotencyKey)s.
    ///
    /// ```
    /// use retry_core::idempotency::MemoryStore;
    /// use retry_core::tower::IdempotencyLayer;
    ///
    /// let layer = IdempotencyLayer::unauthenticated(MemoryStore::new());
    /// # drop(layer);
    /// ```
    pub fn unauthenticated(store: St) -> Self {
        Self::build(store, None)
    }

    fn build(store: St, scope: Option<ScopeFn>) -> Self {
        IdempotencyLayer {
            store: Arc::new(store),
            scope,
            required: true,
            max_key_bytes: DEFAULT_MAX_KEY_BYTES,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            lease: DEFAULT_LEASE,
            retention: DEFAULT_RETENTION,
            replay_headers: ReplayHeaders::default(),
            name: "idempotency_layer",
        }
    }

    /// Whether a non-safe request must carry `Idempotency-Key` (default `true`: `400` without
    /// one). With `false`, a request without a key passes straight through, unprotected.
    ///
    /// ```
    /// use retry_core::idempotency::MemoryStore;
    /// use retry_core::tower::IdempotencyLayer;
    ///
    /// let optional = IdempotencyLayer::unauthenticated(MemoryStore::new()).required(false);
    /// # drop(optional);
    /// ```
    #[must_use]
    pub fn required(mut self, required: bool) -> Self {
        self.required = required;
        self
    }

    /// The longest key accepted, in bytes (default [`DEFAULT_MAX_KEY_BYTES`]); a longer one gets
    /// `400`. The store's own limit on the stored key (scope included) applies as well.
    ///
    /// ```
    /// use retry_core::idempotency::MemoryStore;
    /// use retry_core::tower::IdempotencyLayer;
    ///
    /// let layer = IdempotencyLayer::unauthenticated(MemoryStore::new()).max_key_bytes(64);
    /// # drop(layer);
    /// ```
    #[must_use]
    pub fn max_key_bytes(mut self, max: usize) -> Self {
        self.max_key_bytes = max;
        self
    }

    /// The largest request body buffered to fingerprint it (default
    /// [`DEFAULT_MAX_BODY_BYTES`]); a larger one gets `413` and nothing runs.
    ///
    /// ```
    /// use retry_core::idempotency::MemoryStore;
    /// use retry_core::tower::IdempotencyLayer;
    ///
    /// let layer = IdempotencyLayer::unauthenticated(MemoryStore::new()).max_body_bytes(64 << 10);
    /// # drop(layer);
    /// ```
    #[must_use]
    pub fn max_body_bytes(mut self, max: usize) -> Self {
        self.max_body_bytes = max;
        self
    }

    /// How long a claim holds while its handler runs (default 30 s): after it, a resend may take
    /// the key over, as after a crash. Set it longer than the slowest handler.
    ///
    /// ```
    /// use retry_core::idempotency::MemoryStore;
    /// use retry_core::tower::IdempotencyLayer;
    /// use std::time::Duration;
    ///
    /// let layer = IdempotencyLayer::unauthenticated(MemoryStore::new())
    ///     .lease(Duration::from_secs(120));
    /// # drop(layer);
    /// ```
    #[must_use]
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// How long a stored response is kept (default 30 days): longer than any client keeps
    /// resending. Purging is the store's job (`purge_older_than`).
    ///
    /// ```
    /// use retry_core::idempotency::MemoryStore;
    /// use retry_core::tower::IdempotencyLayer;
    /// use std::time::Duration;
    ///
    /// let layer = IdempotencyLayer::unauthenticated(MemoryStore::new())
    ///     .retention(Duration::from_secs(7 * 86_400));
    /// # drop(layer);
    /// ```
    #[must_use]
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// The response headers stored and replayed, replacing the default list (`Content-Type`,
    /// `Content-Language`, `Content-Location`, `Location`, `ETag`, `Last-Modified`). Credentials
    /// (`Set-Cookie`, `Authorization`, `WWW-Authenticate`, ...) and framing headers
    /// (`Content-Length`, `Transfer-Encoding`, ...) are refused.
    ///
    /// ```
    /// use http::header::{CONTENT_TYPE, LOCATION, SET_COOKIE};
    /// use http::HeaderName;
    /// use retry_core::idempotency::MemoryStore;
    /// use retry_core::tower::IdempotencyLayer;
    ///
    /// let layer = IdempotencyLayer::unauthenticated(MemoryStore::new())
    ///     .replay_headers([CONTENT_TYPE, LOCATION, HeaderName::from_static("x-charge-id")])
    ///     .unwrap();
    ///
    /// let refused = IdempotencyLayer::unauthenticated(MemoryStore::new())
    ///     .replay_headers([CONTENT_TYPE, SET_COOKIE])
    ///     .unwrap_err();
    /// assert_eq!(refused.name(), &SET_COOKIE);
    /// # drop(layer);
    /// ```
    pub fn replay_headers<I>(mut self, names: I) -> Result<Self, RefusedHeader>
    where
        I: IntoIterator<Item = HeaderName>,
    {
        self.replay_headers = ReplayHeaders::new(names)?;
        Ok(self)
    }

    /// The name of the guarded operation, used as the `function` label of the idempotency
    /// metrics and in log events (default `"idempotency_layer"`).
    ///
    /// ```
    /// use retry_core::idempotency::MemoryStore;
    /// use retry_core::tower::IdempotencyLayer;
    ///
    /// let layer = IdempotencyLayer::unauthenticated(MemoryStore::new()).name("create_payment");
    /// # drop(layer);
    /// ```
    #[must_use]
    pub fn name(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }
}

impl<St> Clone for IdempotencyLayer<St> {
    fn clone(&self) -> Self {
        IdempotencyLayer {
            store: Arc::clone(&self.store),
            scope: self.scope.clone(),
            required: self.required,
            max_key_bytes: self.max_key_bytes,
            max_body_bytes: self.max_body_bytes,
            lease: self.lease,
            retention: self.retention,
            replay_headers: self.replay_headers.clone(),
            name: self.name,
        }
    }
}

impl<St> fmt::Debug for IdempotencyLayer<St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("name", &self.name)
            .field("authenticated", &self.scope.is_some())
            .field("required", &self.required)
            .field("max_key_bytes", &self.max_key_bytes)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("lease", &self.lease)
            .field("retention", &self.retention)
            .field("replay_headers", &self.replay_headers)
            .finish_non_exhaustive()
    }
}

impl<S, St> Layer<S> for IdempotencyLayer<St> {
    type Service = Idempotency<S, St>;

    fn layer(&self, inner: S) -> Idempotency<S, St> {
        Idempotency {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service made by [`IdempotencyLayer`].
///
/// ```
/// use retry_core::idempotency::MemoryStore;
/// use retry_core::tower::{Idempotency, IdempotencyLayer};
/// use tower_layer::Layer;
///
/// # #[derive(Clone)] struct Handler;
/// let service: Idempotency<Handler, MemoryStore> =
///     IdempotencyLayer::unauthenticated(MemoryStore::new()).layer(Handler);
/// # drop(service);
/// ```
pub struct Idempotency<S, St> {
    inner: S,
    layer: IdempotencyLayer<St>,
}

impl<S: Clone, St> Clone for Idempotency<S, St> {
    fn clone(&self) -> Self {
        Idempotency {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S: fmt::Debug, St> fmt::Debug for Idempotency<S, St> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idempotency")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S, St, B, RB> Service<Request<B>> for Idempotency<S, St>
where
    S: Service<Request<IdempotencyBody>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    St: IdempotencyStore + 'static,
{
    type Response = Response<IdempotencyBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<IdempotencyBody>, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        // The service polled ready is the one that must take the call; a clone stays behind.
        let ready = self.inner.clone();
        let inner = std::mem::replace(&mut self.inner, ready);
        let layer = self.layer.clone();
        Box::pin(layer.handle(inner, request))
    }
}

impl<St: IdempotencyStore + 'static> IdempotencyLayer<St> {
    async fn handle<S, B, RB>(
        self,
        inner: S,
        request: Request<B>,
    ) -> Result<Response<IdempotencyBody>, S::Error>
    where
        S: Service<Request<IdempotencyBody>, Response = Response<RB>>,
        RB: Body<Data = Bytes> + Send + 'static,
        RB::Error: Into<BoxError>,
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        if is_safe(request.method()) {
            return pass(inner, request).await;
        }
        let (parts, body) = request.into_parts();
        let field = KeyField::of(&parts.headers);
        if matches!(field, KeyField::Absent) && !self.required {
            return pass(inner, Request::from_parts(parts, body)).await;
        }
        // Authenticate before judging the key, so an anonymous caller learns nothing more.
        let scope = match &self.scope {
            None => None,
            Some(scope) => match scope(&parts) {
                Some(client) => Some(client),
                None => return Ok(Problem::Unauthenticated.response()),
            },
        };
        let key = match field.key(self.max_key_bytes) {
            Ok(key) => key,
            Err(problem) => return Ok(problem.response()),
        };
        let body = match read_request(body, self.max_body_bytes, self.name).await {
            Ok(body) => body,
            Err(problem) => return Ok(problem.response()),
        };

        let mut call = Settings::new(
            match &scope {
                Some(client) => encode_scoped_key(client.as_str(), key.as_str()),
                None => encode_key(key.as_str()),
            },
            self.name,
        );
        call.fingerprint = Some(fingerprint(&parts, &body));
        call.biz_key = Some(key);
        call.lease = self.lease;
        call.retention = self.retention;
        let held = match begin_call(&*self.store, &call).await {
            Ok(Begun::Claimed(held)) => held,
            Ok(Begun::Stored(stored)) => {
                return Ok(replay(&stored, &self.replay_headers, self.name));
            }
            Err(e) => return Ok(self.refuse(&parts, e)),
        };

        let request = Request::from_parts(parts, IdempotencyBody::new(Full::new(body)));
        let max = self.store.limits().max_response_bytes;
        match call_ready(inner, request).await {
            Ok(response) => Ok(keep(held, response, max, &self.replay_headers, self.name).await),
            Err(e) => {
                release(held, "the inner service failed", self.name).await;
                Err(e)
            }
        }
    }

    /// The answer to a request whose key could not be claimed.
    fn refuse(&self, parts: &Parts, error: IdempotencyError) -> Response<IdempotencyBody> {
        let problem = match error {
            IdempotencyError::InProgress => Problem::InProgress,
            IdempotencyError::KeyReused => Problem::KeyReused,
            IdempotencyError::PreviouslyFailed(_) => Problem::NotKept,
            IdempotencyError::KeyTooLong { len, max } => Problem::KeyTooLong { len, max },
            IdempotencyError::Store(e) => {
                tracing::warn!(function = self.name, method = %parts.method, path = parts.uri.path(), error = %e, "idempotency store unavailable: request refused (fail closed)");
                Problem::StoreUnavailable
            }
            other => {
                tracing::error!(function = self.name, error = %other, "idempotency claim failed");
                Problem::StoredUnreadable
            }
        };
        problem.response()
    }
}

/// Calls a service that was polled ready before it was handed over.
fn call_ready<S: Service<R>, R>(mut service: S, request: R) -> S::Future {
    service.call(request)
}

async fn pass<S, B, RB>(
    inner: S,
    request: Request<B>,
) -> Result<Response<IdempotencyBody>, S::Error>
where
    S: Service<Request<IdempotencyBody>, Response = Response<RB>>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let response = call_ready(inner, request.map(IdempotencyBody::new)).await?;
    Ok(response.map(IdempotencyBody::new))
}

/// RFC 9110 §9.2.1: no effect to repeat.
fn is_safe(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    )
}
