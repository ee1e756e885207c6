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

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use ::base64::Engine as _;
use ::base64::engine::general_purpose::STANDARD as BASE64;
use ::bytes::Bytes;
use ::http::header::{self, HeaderMap, HeaderName, HeaderValue};
use ::http::request::Parts;
use ::http::{Method, Request, Response, StatusCode};
use ::http_body::{Body, Frame, SizeHint};
use ::http_body_util::combinators::UnsyncBoxBody;
use ::http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use ::tower_layer::Layer;
use ::tower_service::Service;
use serde::{Deserialize, Serialize};

use crate::http::{IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED, parse_key_header};
use crate::idempotency::{
    Begun, DEFAULT_LEASE, DEFAULT_RETENTION, HeldClaim, IdempotencyError, IdempotencyStore, OnErr,
    Settings, StoreError, begin_call, digest, encode_key, encode_scoped_key,
};
use crate::metrics;
use crate::{Classify, Decision};

/// The error type of [`IdempotencyBody`]: any error, boxed.
///
/// ```
/// let error: retry_core::tower::BoxError = "connection reset".into();
/// assert_eq!(error.to_string(), "connection reset");
/// ```
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The body [`Idempotency`] hands to its inner service and answers with: any body of
/// [`Bytes`], boxed. axum, hyper and tonic take it as it is.
///
/// ```
/// use http_body::Body as _;
/// use retry_core::tower::IdempotencyBody;
///
/// let body = IdempotencyBody::new(String::from("paid"));
/// assert_eq!(body.size_hint().exact(), Some(4));
/// ```
pub struct IdempotencyBody {
    inner: UnsyncBoxBody<Bytes, BoxError>,
}

impl IdempotencyBody {
    /// Boxes `body`.
    ///
    /// ```
    /// use http_body_util::Full;
    /// use retry_core::tower::IdempotencyBody;
    ///
    /// let body = IdempotencyBody::new(Full::new(bytes::Bytes::from_static(b"{}")));
    /// # drop(body);
    /// ```
    pub fn new<B>(body: B) -> Self
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        IdempotencyBody {
            inner: body.map_err(Into::into).boxed_unsync(),
        }
    }
}

impl Body for IdempotencyBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl fmt::Debug for IdempotencyBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyBody").finish_non_exhaustive()
    }
}

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

/// The `type` of the problems the draft defines: its page.
const DRAFT: &str = "https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/";

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
    replay_headers: Arc<[HeaderName]>,
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
            replay_headers: Arc::from(DEFAULT_REPLAY_HEADERS.as_slice()),
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
        let names: Vec<HeaderName> = names.into_iter().collect();
        if let Some((name, reason)) = names
            .iter()
            .find_map(|name| refusal(name).map(|reason| (name, reason)))
        {
            return Err(RefusedHeader {
                name: name.clone(),
                reason,
            });
        }
        self.replay_headers = names.into();
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
            replay_headers: Arc::clone(&self.replay_headers),
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
        let (field, extra) = {
            let mut fields = parts.headers.get_all(IDEMPOTENCY_KEY).iter();
            (fields.next(), fields.next().is_some())
        };
        if field.is_none() && !self.required {
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
        let key = match field {
            None => return Ok(Problem::MissingKey.response()),
            Some(_) if extra => {
                return Ok(
                    Problem::MalformedKey("more than one Idempotency-Key field was sent")
                        .response(),
                );
            }
            Some(value) => match parse_key_header(value) {
                Ok(key) => key,
                Err(reason) => return Ok(Problem::MalformedKey(reason).response()),
            },
        };
        if key.len() > self.max_key_bytes {
            return Ok(Problem::KeyTooLong {
                len: key.len(),
                max: self.max_key_bytes,
            }
            .response());
        }
        let body = match self.read_body(body).await {
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
            Ok(Begun::Stored(stored)) => return Ok(self.replay(&stored)),
            Err(e) => return Ok(self.refuse(&parts, e)),
        };

        let request = Request::from_parts(parts, IdempotencyBody::new(Full::new(body)));
        match call_ready(inner, request).await {
            Ok(response) => Ok(self.keep(held, response).await),
            Err(e) => {
                self.release(held, "the inner service failed").await;
                Err(e)
            }
        }
    }

    /// The whole request body, or the problem that stops the request.
    async fn read_body<B>(&self, body: B) -> Result<Bytes, Problem>
    where
        B: Body<Data = Bytes>,
        B::Error: Into<BoxError>,
    {
        let max = self.max_body_bytes;
        // `Content-Length` says so already: refuse without reading.
        if body.size_hint().lower() > u64::try_from(max).unwrap_or(u64::MAX) {
            return Err(Problem::BodyTooLarge { max });
        }
        match Limited::new(body, max).collect().await {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(e) if e.is::<LengthLimitError>() => Err(Problem::BodyTooLarge { max }),
            Err(e) => {
                tracing::debug!(function = self.name, error = %e, "request body could not be read");
                Err(Problem::BodyUnreadable)
            }
        }
    }

    /// Stores the handler's response (or gives the claim up), then returns it.
    async fn keep<RB>(
        &self,
        held: HeldClaim<'_, St>,
        response: Response<RB>,
    ) -> Response<IdempotencyBody>
    where
        RB: Body<Data = Bytes> + Send + 'static,
        RB::Error: Into<BoxError>,
    {
        let (parts, body) = response.into_parts();
        let body = IdempotencyBody::new(body);
        if !is_final(parts.status) {
            self.release(held, "the response asks for a retry").await;
            return Response::from_parts(parts, body);
        }
        let max = self.store.limits().max_response_bytes;
        let body = match buffer(body, max).await {
            Buffered::Complete { data, trailers } => {
                match self.stored_form(&parts, &data) {
                    Ok(json) if json.len() <= max => self.complete(held, &json).await,
                    Ok(json) => self.spend(held, json.len(), max).await,
                    Err(e) => {
                        tracing::error!(function = self.name, error = %e, "response cannot be serialised");
                        self.spend(held, data.len(), max).await;
                    }
                }
                Resumed::new(data, None, trailers.map(Tail::Trailers))
            }
            Buffered::TooLarge { prefix, rest } => {
                self.spend(held, prefix.len(), max).await;
                Resumed::new(prefix, Some(rest), None)
            }
            Buffered::Failed { prefix, error } => {
                self.release(held, "the response body failed").await;
                Resumed::new(prefix, None, Some(Tail::Error(error)))
            }
        };
        Response::from_parts(parts, IdempotencyBody::new(body))
    }

    /// The response as it is stored: status, allow-listed headers, body.
    fn stored_form(
        &self,
        parts: &::http::response::Parts,
        body: &[u8],
    ) -> Result<String, serde_json::Error> {
        let mut headers = Vec::new();
        for (name, value) in &parts.headers {
            if !self.replays(name) {
                continue;
            }
            match std::str::from_utf8(value.as_bytes()) {
                Ok(text) => headers.push((name.as_str().to_owned(), text.to_owned())),
                Err(_) => {
                    tracing::warn!(function = self.name, header = %name, "a header value that is not UTF-8 is not stored");
                }
            }
        }
        let (text, base64) = match std::str::from_utf8(body) {
            Ok(text) => (Some(text.to_owned()), None),
            Err(_) => (None, Some(BASE64.encode(body))),
        };
        serde_json::to_string(&StoredResponse {
            status: parts.status.as_u16(),
            headers,
            body: text,
            body_base64: base64,
        })
    }

    async fn complete(&self, held: HeldClaim<'_, St>, json: &str) {
        match held.complete(json).await {
            Ok(()) => {}
            Err(StoreError::Fenced) => {
                tracing::error!(
                    function = self.name,
                    "late completion refused: the lease ran out while the handler ran and a resend took the key over; set a longer lease"
                );
                metrics::fenced(self.name);
            }
            Err(e) => {
                tracing::warn!(function = self.name, error = %e, "response not stored: resends get 409 until the lease ends, then run again");
                metrics::response_not_stored(self.name);
            }
        }
    }

    /// The response cannot be kept, but its effect happened: mark the key failed so a resend
    /// is refused instead of repeating the effect.
    async fn spend(&self, held: HeldClaim<'_, St>, len: usize, max: usize) {
        tracing::warn!(
            function = self.name,
            len,
            max,
            "response too large to store: it is sent once, and resends of its key are refused with 409"
        );
        metrics::response_not_stored(self.name);
        if let Err(e) = held.fail(OnErr::Keep, "response too large to store").await {
            tracing::warn!(function = self.name, error = %e, "could not mark the key failed; the lease frees it");
        }
    }

    /// Gives the claim up so a resend runs the handler again.
    async fn release(&self, held: HeldClaim<'_, St>, why: &'static str) {
        tracing::debug!(function = self.name, why, "idempotency claim released");
        if let Err(e) = held.fail(OnErr::Release, "").await {
            tracing::warn!(function = self.name, error = %e, "could not release the claim; resends get 409 until the lease ends");
        }
    }

    /// The stored response, replayed.
    fn replay(&self, stored: &str) -> Response<IdempotencyBody> {
        let (mut parts, body) = match decode_stored(stored) {
            Ok(decoded) => decoded.into_parts(),
            Err(e) => {
                tracing::error!(function = self.name, error = %e, "stored response cannot be read");
                return Problem::StoredUnreadable.response();
            }
        };
        // Checked again: the row may predate today's allow-list.
        let stored_headers = std::mem::take(&mut parts.headers);
        for (name, value) in &stored_headers {
            if self.replays(name) {
                parts.headers.append(name, value.clone());
            }
        }
        let mut response = Response::from_parts(parts, IdempotencyBody::new(Full::new(body)));
        response
            .headers_mut()
            .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("?1"));
        response
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

    fn replays(&self, name: &HeaderName) -> bool {
        self.replay_headers.contains(name) && refusal(name).is_none()
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

/// Whether a response is the operation's final answer: everything a client would not retry.
/// `5xx`, `408` and `429` say "not processed, or not known to be": storing them would make a
/// transient refusal permanent.
fn is_final(status: StatusCode) -> bool {
    !status.is_server_error() && status.classify() == Decision::Stop
}

/// Why a header may never be stored and replayed.
fn refusal(name: &HeaderName) -> Option<&'static str> {
    const CREDENTIALS: [&str; 9] = [
        "set-cookie",
        "set-cookie2",
        "cookie",
        "authorization",
        "proxy-authorization",
        "www-authenticate",
        "proxy-authenticate",
        "authentication-info",
        "proxy-authentication-info",
    ];
    const FRAMING: [&str; 9] = [
        "content-length",
        "transfer-encoding",
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "upgrade",
        "idempotent-replayed",
    ];
    let name = name.as_str();
    if CREDENTIALS.contains(&name) {
        Some("it carries credentials, which must never be handed to whoever resends a key")
    } else if FRAMING.contains(&name) {
        Some("it is set for each response, not stored")
    } else {
        None
    }
}

const DEFAULT_REPLAY_HEADERS: [HeaderName; 6] = [
    header::CONTENT_TYPE,
    header::CONTENT_LANGUAGE,
    header::CONTENT_LOCATION,
    header::LOCATION,
    header::ETAG,
    header::LAST_MODIFIED,
];

/// A header that [`IdempotencyLayer::replay_headers`] will not store and replay.
///
/// ```
/// use http::header::AUTHORIZATION;
/// use retry_core::idempotency::MemoryStore;
/// use retry_core::tower::IdempotencyLayer;
///
/// let refused = IdempotencyLayer::unauthenticated(MemoryStore::new())
///     .replay_headers([AUTHORIZATION])
///     .unwrap_err();
/// assert_eq!(
///     refused.to_string(),
///     "`authorization` cannot be replayed: it carries credentials, which must never be handed \
///      to whoever resends a key"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedHeader {
    name: HeaderName,
    reason: &'static str,
}

impl RefusedHeader {
    /// The refused header.
    ///
    /// ```
    /// use http::header::SET_COOKIE;
    /// use retry_core::idempotency::MemoryStore;
    /// use retry_core::tower::IdempotencyLayer;
    ///
    /// let refused = IdempotencyLayer::unauthenticated(MemoryStore::new())
    ///     .replay_headers([SET_COOKIE])
    ///     .unwrap_err();
    /// assert_eq!(refused.name(), "set-cookie");
    /// ```
    pub fn name(&self) -> &HeaderName {
        &self.name
    }
}

impl fmt::Display for RefusedHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "`{}` cannot be replayed: {}", self.name, self.reason)
    }
}

impl std::error::Error for RefusedHeader {}

/// A fingerprint of what makes two requests the same operation: method, path, query and body.
///
/// A JSON body counts by its value, not its bytes: key order and whitespace do not make another
/// request. A redrive resends a dead letter's `original`, which went through
/// `serde_json::Value` (keys sorted) on its way into the letter, so byte equality would answer
/// the very resend idempotency exists for with `422`.
fn fingerprint(parts: &Parts, body: &[u8]) -> String {
    // Self-delimiting parts, then the body as canonical JSON, text or base64, tagged: injective
    // before hashing.
    let mut text = encode_key(&(parts.method.as_str(), parts.uri.path(), parts.uri.query()));
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(body) {
        text.push_str("|j");
        text.push_str(&value.to_string());
    } else if let Ok(body) = std::str::from_utf8(body) {
        text.push_str("|t");
        text.push_str(body);
    } else {
        text.push_str("|b");
        BASE64.encode_string(body, &mut text);
    }
    digest(&text)
}

/// A response as the store keeps it (JSON). Part of the stored data: fields may be added, never
/// changed.
#[derive(Serialize, Deserialize)]
struct StoredResponse {
    status: u16,
    /// Allow-listed headers, in order, one pair per value.
    headers: Vec<(String, String)>,
    /// The body, when it is UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<String>,
    /// The body in standard base64, when it is not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body_base64: Option<String>,
}

/// The stored response with every stored header.
fn decode_stored(stored: &str) -> Result<Response<Bytes>, String> {
    let stored: StoredResponse = serde_json::from_str(stored).map_err(|e| e.to_string())?;
    let body = match (stored.body, stored.body_base64) {
        (Some(text), None) => Bytes::from(text),
        (None, Some(encoded)) => Bytes::from(BASE64.decode(encoded).map_err(|e| e.to_string())?),
        _ => return Err("a stored response needs exactly one of `body` and `body_base64`".into()),
    };
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::from_u16(stored.status).map_err(|e| e.to_string())?;
    for (name, value) in stored.headers {
        response.headers_mut().append(
            HeaderName::try_from(name).map_err(|e| e.to_string())?,
            HeaderValue::try_from(value).map_err(|e| e.to_string())?,
        );
    }
    Ok(response)
}

/// A response body read as far as the store's limit allows.
enum Buffered {
    /// All of it, with its trailers.
    Complete {
        data: Bytes,
        trailers: Option<HeaderMap>,
    },
    /// More than the limit: what was read, and the rest still to stream.
    TooLarge {
        prefix: Bytes,
        rest: IdempotencyBody,
    },
    /// The body failed after `prefix`.
    Failed { prefix: Bytes, error: BoxError },
}

async fn buffer(mut body: IdempotencyBody, max: usize) -> Buffered {
    if body.size_hint().lower() > u64::try_from(max).unwrap_or(u64::MAX) {
        return Buffered::TooLarge {
            prefix: Bytes::new(),
            rest: body,
        };
    }
    let mut data = Vec::new();
    let mut trailers: Option<HeaderMap> = None;
    loop {
        match body.frame().await {
            None => {
                return Buffered::Complete {
                    data: data.into(),
                    trailers,
                };
            }
            Some(Err(error)) => {
                return Buffered::Failed {
                    prefix: data.into(),
                    error,
                };
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(chunk) => {
                    data.extend_from_slice(&chunk);
                    if data.len() > max {
                        return Buffered::TooLarge {
                            prefix: data.into(),
                            rest: body,
                        };
                    }
                }
                Err(frame) => {
                    if let Ok(more) = frame.into_trailers() {
                        trailers.get_or_insert_default().extend(more);
                    }
                }
            },
        }
    }
}

/// What a [`Resumed`] body ends with.
enum Tail {
    Trailers(HeaderMap),
    Error(BoxError),
}

/// A response body given back after buffering: the bytes read, then whatever was not read yet,
/// then its trailers or its error.
struct Resumed {
    head: Option<Bytes>,
    rest: Option<IdempotencyBody>,
    tail: Option<Tail>,
}

impl Resumed {
    fn new(head: Bytes, rest: Option<IdempotencyBody>, tail: Option<Tail>) -> Self {
        Resumed {
            head: Some(head).filter(|head| !head.is_empty()),
            rest,
            tail,
        }
    }
}

impl Body for Resumed {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some(head) = this.head.take() {
            return Poll::Ready(Some(Ok(Frame::data(head))));
        }
        if let Some(rest) = &mut this.rest {
            match Pin::new(rest).poll_frame(cx) {
                Poll::Ready(None) => this.rest = None,
                other => return other,
            }
        }
        Poll::Ready(match this.tail.take() {
            Some(Tail::Trailers(trailers)) => Some(Ok(Frame::trailers(trailers))),
            Some(Tail::Error(error)) => Some(Err(error)),
            None => None,
        })
    }

    fn is_end_stream(&self) -> bool {
        self.head.is_none()
            && self.rest.as_ref().is_none_or(Body::is_end_stream)
            && self.tail.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        let head = self
            .head
            .as_ref()
            .map_or(0, |head| u64::try_from(head.len()).unwrap_or(u64::MAX));
        let rest = self
            .rest
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint);
        let mut hint = SizeHint::new();
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper.saturating_add(head));
        }
        hint.set_lower(rest.lower().saturating_add(head));
        hint
    }
}

/// Why a request was not run, as an RFC 9457 problem.
enum Problem {
    Unauthenticated,
    MissingKey,
    MalformedKey(&'static str),
    KeyTooLong { len: usize, max: usize },
    BodyTooLarge { max: usize },
    BodyUnreadable,
    InProgress,
    KeyReused,
    NotKept,
    StoreUnavailable,
    StoredUnreadable,
}

impl Problem {
    /// Status, title (for the draft's problems; otherwise the status phrase) and detail.
    fn describe(&self) -> (StatusCode, Option<&'static str>, String) {
        match self {
            Problem::Unauthenticated => (
                StatusCode::UNAUTHORIZED,
                None,
                "responses to Idempotency-Key are kept per client: authenticate the request".into(),
            ),
            Problem::MissingKey => (
                StatusCode::BAD_REQUEST,
                Some("Idempotency-Key is missing"),
                "this operation requires an Idempotency-Key header, one key per operation sent \
                 with every attempt of it, e.g. Idempotency-Key: \"8e03978e40d545e8bc936894a57f9324\""
                    .into(),
            ),
            Problem::MalformedKey(reason) => (
                StatusCode::BAD_REQUEST,
                Some("Idempotency-Key is malformed"),
                format!("{reason}; send the key as a structured-field string, e.g. Idempotency-Key: \"order-1234\""),
            ),
            Problem::KeyTooLong { len, max } => (
                StatusCode::BAD_REQUEST,
                Some("Idempotency-Key is too long"),
                format!("the key is {len} bytes; at most {max} are allowed"),
            ),
            Problem::BodyTooLarge { max } => (
                StatusCode::PAYLOAD_TOO_LARGE,
                None,
                format!("the request body is larger than the {max} bytes allowed for a request with Idempotency-Key"),
            ),
            Problem::BodyUnreadable => (
                StatusCode::BAD_REQUEST,
                None,
                "the request body could not be read".into(),
            ),
            Problem::InProgress => (
                StatusCode::CONFLICT,
                Some("A request is outstanding for this Idempotency-Key"),
                "a request with this key is still being processed; send it again after it finished to get its response".into(),
            ),
            Problem::KeyReused => (
                StatusCode::UNPROCESSABLE_ENTITY,
                Some("Idempotency-Key is already used"),
                "this key was used with a different request (method, path, query or body); use a new key for a new operation".into(),
            ),
            Problem::NotKept => (
                StatusCode::CONFLICT,
                Some("Response for this Idempotency-Key was not kept"),
                "a request with this key was processed, but its response was too large to keep; it will not be processed again".into(),
            ),
            Problem::StoreUnavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                "the idempotency store cannot be reached, so the request was not processed; send it again later".into(),
            ),
            Problem::StoredUnreadable => (
                StatusCode::INTERNAL_SERVER_ERROR,
                None,
                "the response stored for this key cannot be read; the request was not processed again".into(),
            ),
        }
    }

    fn response(&self) -> Response<IdempotencyBody> {
        let (status, title, detail) = self.describe();
        let (kind, title) = match title {
            Some(title) => (DRAFT, title),
            None => ("about:blank", status.canonical_reason().unwrap_or_default()),
        };
        let json = serde_json::json!({
            "type": kind,
            "title": title,
            "status": status.as_u16(),
            "detail": detail,
        });
        let mut response = Response::new(IdempotencyBody::new(Full::new(Bytes::from(
            json.to_string(),
        ))));
        *response.status_mut() = status;
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_final_answers_are_stored() {
        for code in [200, 201, 204, 303, 400, 404, 409, 422] {
            assert!(is_final(StatusCode::from_u16(code).unwrap()), "{code}");
        }
        for code in [408, 429, 500, 501, 502, 503, 504] {
            assert!(!is_final(StatusCode::from_u16(code).unwrap()), "{code}");
        }
    }

    #[test]
    fn stored_responses_round_trip_text_and_binary_bodies() {
        for body in [&b"{\"id\":1}"[..], &[0xff, 0x00, 0xfe][..], &b""[..]] {
            let (text, base64) = match std::str::from_utf8(body) {
                Ok(text) => (Some(text.to_owned()), None),
                Err(_) => (None, Some(BASE64.encode(body))),
            };
            let json = serde_json::to_string(&StoredResponse {
                status: 201,
                headers: vec![("location".into(), "/payments/1".into())],
                body: text,
                body_base64: base64,
            })
            .unwrap();
            let decoded = decode_stored(&json).unwrap();
            assert_eq!(decoded.status(), StatusCode::CREATED);
            assert_eq!(decoded.headers()[header::LOCATION], "/payments/1");
            assert_eq!(decoded.body(), body);
        }
        assert!(decode_stored("{\"status\":200,\"headers\":[]}").is_err());
    }

    #[test]
    fn fingerprints_tell_requests_apart() {
        let parts = |uri: &str| Request::post(uri).body(()).unwrap().into_parts().0;
        let base = fingerprint(&parts("/a?x=1"), b"{}");
        assert_eq!(base, fingerprint(&parts("/a?x=1"), b"{}"));
        assert_ne!(base, fingerprint(&parts("/a?x=2"), b"{}"));
        assert_ne!(base, fingerprint(&parts("/b?x=1"), b"{}"));
        assert_ne!(base, fingerprint(&parts("/a?x=1"), b"[]"));
        assert_ne!(base, fingerprint(&parts("/a?x=1"), b"{ "));
        // The same JSON value, however it is written, is the same request.
        assert_eq!(
            fingerprint(&parts("/a"), br#"{"b": 2, "a": [1, "x"]}"#),
            fingerprint(&parts("/a"), br#"{"a":[1,"x"],"b":2}"#)
        );
        assert_ne!(
            fingerprint(&parts("/a"), br#"{"a":1}"#),
            fingerprint(&parts("/a"), br#"{"a":"1"}"#)
        );
        assert_ne!(
            fingerprint(&parts("/a"), &[0xff]),
            fingerprint(&parts("/a"), b"/w==")
        );
    }

    #[test]
    fn a_replay_drops_credentials_even_from_a_list_that_names_them() {
        let mut layer = IdempotencyLayer::unauthenticated(crate::idempotency::MemoryStore::new());
        // What `replay_headers` refuses to build, as a row written under another list might be.
        layer.replay_headers = Arc::from([header::SET_COOKIE, header::CONTENT_TYPE].as_slice());
        let stored = r#"{"status":200,"headers":[["set-cookie","s=1"],["content-type","text/plain"]],"body":"ok"}"#;
        let replay = layer.replay(stored);
        assert!(replay.headers().get(header::SET_COOKIE).is_none());
        assert_eq!(replay.headers()[header::CONTENT_TYPE], "text/plain");
        assert_eq!(replay.headers()[IDEMPOTENT_REPLAYED], "?1");
    }

    #[test]
    fn credentials_and_framing_are_never_replayed() {
        for name in [
            "set-cookie",
            "authorization",
            "www-authenticate",
            "proxy-authenticate",
        ] {
            assert!(refusal(&HeaderName::from_static(name)).is_some(), "{name}");
        }
        assert!(refusal(&header::TRANSFER_ENCODING).is_some());
        assert!(refusal(&header::LOCATION).is_none());
    }
}
