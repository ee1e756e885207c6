//! [`IdempotencyLayer`]: the public builder and its settings, and the modes it runs in
//! ([`Plain`], [`InTransaction`]).

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use ::bytes::Bytes;
use ::http::header::HeaderName;
use ::http::request::Parts;
use ::http::{Request, Response};
use ::http_body::Body;
use ::tower_service::Service;

use super::body::{BoxError, IdempotencyBody};
use super::not_applied::NotProcessed;
use super::replay_headers::{RefusedHeader, ReplayHeaders};
use crate::idempotency::{
    DEFAULT_LEASE, DEFAULT_RETENTION, IdempotencyStore, Settings, TransactionalStore,
};
use crate::tower::amplification::{AmplificationObserver, Identity};

/// Longest `Idempotency-Key` accepted by default, in bytes: 255, as Stripe allows; a UUID or an
/// [`IdempotencyKey`](crate::http::IdempotencyKey) is 32 to 36.
///
/// ```
/// assert_eq!(retry_core::tower::DEFAULT_MAX_KEY_BYTES, 255);
/// ```
pub const DEFAULT_MAX_KEY_BYTES: usize = 255;

/// The namespace of an [`IdempotencyLayer`]'s keys unless
/// [`namespace`](IdempotencyLayer::namespace) says otherwise. Fixed rather than taken from
/// [`name`](IdempotencyLayer::name), so renaming a metric label never forgets stored keys.
///
/// ```
/// assert_eq!(retry_core::tower::DEFAULT_NAMESPACE, "http");
/// ```
pub const DEFAULT_NAMESPACE: &str = "http";

/// The `function` label of a layer with neither a name nor a namespace of its own.
const DEFAULT_NAME: &str = "idempotency_layer";

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
/// /// The account the authentication in front of this layer put into the request.
/// #[derive(Clone)]
/// struct Account(String);
///
/// fn client(parts: &Parts) -> Option<String> {
///     parts.extensions.get::<Account>().map(|account| account.0.clone())
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
///         .extension(Account("alice".into()))
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
///     .extension(Account("alice".into()))
///     .body(Body::empty())
///     .unwrap();
/// assert_eq!(app.call(unkeyed).await.unwrap().status(), 400);
/// # }
/// ```
pub struct IdempotencyLayer<St, M = Plain> {
    pub(super) store: Arc<St>,
    /// `None`: the layer was built `unauthenticated`.
    pub(super) scope: Option<ScopeFn>,
    pub(super) required: bool,
    pub(super) max_key_bytes: usize,
    pub(super) max_body_bytes: usize,
    pub(super) lease: Duration,
    pub(super) retention: Duration,
    pub(super) replay_headers: ReplayHeaders,
    pub(super) not_processed: NotProcessed,
    /// Set by [`name`](Self::name); see [`function`](Self::function).
    pub(super) name: Option<&'static str>,
    pub(super) namespace: Arc<str>,
    /// Transactional mode only: the handlers promised that their effects are their writes in
    /// the request's transaction ([`effects_in_transaction`](IdempotencyLayer::effects_in_transaction)),
    /// so the claim can be written in it too.
    pub(super) claim_in_transaction: bool,
    /// Set by [`observe`](Self::observe): counts each request's arrival.
    pub(super) observer: Option<AmplificationObserver>,
    /// [`Plain`] or [`InTransaction`]; `fn() -> M` so the layer is `Send + Sync` whatever `M`.
    mode: PhantomData<fn() -> M>,
}

/// How an [`IdempotencyLayer`] runs its handlers: [`Plain`] (the default) or [`InTransaction`]
/// ([`IdempotencyLayer::transactional`]). Sealed: the two are all there is.
///
/// ```
/// use retry_core::idempotency::MemoryStore;
/// use retry_core::tower::{Mode, Plain};
///
/// assert!(!<Plain as Mode<MemoryStore>>::TRANSACTIONAL);
/// ```
pub trait Mode<St>: sealed::Sealed<St> + 'static {
    /// Whether handlers get the store's transaction ([`RequestTransaction`]).
    ///
    /// [`RequestTransaction`]: super::RequestTransaction
    const TRANSACTIONAL: bool;
}

/// Non-transactional mode, the default: the handler's effects are its own business, and every
/// answer of a handler that started is stored and replayed (see the
/// [module docs](crate::tower::idempotency#which-responses-are-stored)).
///
/// ```
/// use retry_core::idempotency::MemoryStore;
/// use retry_core::tower::{IdempotencyLayer, Plain};
///
/// let layer: IdempotencyLayer<MemoryStore, Plain> = IdempotencyLayer::unauthenticated(MemoryStore::new());
/// # drop(layer);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Plain;

/// Transactional mode ([`IdempotencyLayer::transactional`]): a handler that takes the store's
/// transaction ([`RequestTransaction`]) commits its writes with the stored response, or not at
/// all (see the [module docs](crate::tower::idempotency#transactional-mode)).
///
/// ```
/// use retry_core::tower::{InTransaction, Mode};
///
/// fn is_transactional<St>() -> bool
/// where
///     St: retry_core::idempotency::TransactionalStore + 'static,
///     St::Transaction: 'static,
/// {
///     <InTransaction as Mode<St>>::TRANSACTIONAL // true for every transactional store
/// }
/// ```
///
/// [`RequestTransaction`]: super::RequestTransaction
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InTransaction;

pub(super) mod sealed {
    use super::{Body, BoxError, Bytes, Future, IdempotencyBody, IdempotencyLayer, Parts};
    use super::{Request, Response, Service, Settings};

    /// What a mode does once the request is read: claim, run, settle. Private to the crate.
    pub trait Sealed<St>: Sized {
        fn claim_and_run<S, RB>(
            layer: IdempotencyLayer<St, Self>,
            inner: S,
            call: Settings,
            parts: Parts,
            body: Bytes,
        ) -> impl Future<Output = Result<Response<IdempotencyBody>, S::Error>> + Send + 'static
        where
            S: Service<Request<IdempotencyBody>, Response = Response<RB>> + Send + 'static,
            S::Future: Send + 'static,
            S::Error: Send + 'static,
            RB: Body<Data = Bytes> + Send + 'static,
            RB::Error: Into<BoxError>;
    }
}

impl<St: IdempotencyStore + 'static> IdempotencyLayer<St> {
    /// A layer whose keys belong to the client `scope` finds in each request's head: a stable
    /// principal id (the user, tenant or API client id your authentication established, e.g.
    /// from a request extension), never a raw bearer token (see the
    /// [module docs](crate::tower::idempotency#scope-whose-key-it-is)). A request for which it
    /// returns `None` gets `401`.
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
            not_processed: NotProcessed::default(),
            name: None,
            namespace: Arc::from(DEFAULT_NAMESPACE),
            claim_in_transaction: false,
            observer: None,
            mode: PhantomData,
        }
    }

    /// The same layer in transactional mode: each handler may take the store's transaction from
    /// its request ([`RequestTransaction`]), and its writes, the `done` row and the stored
    /// response then commit together, or not at all. See the
    /// [module docs](crate::tower::idempotency#transactional-mode).
    ///
    /// An example on a SQLite file: [`retry_sqlite::transactional`](https://docs.rs/retry-sqlite/latest/retry_sqlite/transactional/index.html).
    ///
    /// [`RequestTransaction`]: super::RequestTransaction
    #[must_use]
    pub fn transactional(self) -> IdempotencyLayer<St, InTransaction>
    where
        St: TransactionalStore,
    {
        IdempotencyLayer {
            store: self.store,
            scope: self.scope,
            required: self.required,
            max_key_bytes: self.max_key_bytes,
            max_body_bytes: self.max_body_bytes,
            lease: self.lease,
            retention: self.retention,
            replay_headers: self.replay_headers,
            not_processed: self.not_processed,
            name: self.name,
            namespace: self.namespace,
            claim_in_transaction: false,
            observer: self.observer,
            mode: PhantomData,
        }
    }
}

impl<St: IdempotencyStore + 'static, M> IdempotencyLayer<St, M> {
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

    /// How long a claim holds without renewal (default 30 s). While the handler runs, the layer
    /// renews it every `lease / 3`, so a slow handler is never taken over while its process
    /// lives; after a crash, a resend takes the key over once the lease ran out. Shorter leases
    /// free a dead process's keys sooner, at the cost of more renewals.
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
    /// `Content-Language`, `Content-Location`, `Location`, `ETag`, `Last-Modified`), chosen
    /// from the headers that describe the response itself: those, `Content-Encoding`,
    /// `Content-Disposition`, `Cache-Control`, `Expires` and `Vary`. Any other is refused:
    /// credentials (`Set-Cookie`, `Authorization`, ...), framing (`Content-Length`, ...), and
    /// custom headers, which may carry one client's credentials or state (an `X-Echo-Auth`
    /// would hand it to another client of the same scope). Put what a resend needs in the body.
    ///
    /// ```
    /// use http::header::{CACHE_CONTROL, CONTENT_TYPE, LOCATION, SET_COOKIE};
    /// use http::HeaderName;
    /// use retry_core::idempotency::MemoryStore;
    /// use retry_core::tower::IdempotencyLayer;
    ///
    /// let layer = IdempotencyLayer::unauthenticated(MemoryStore::new())
    ///     .replay_headers([CONTENT_TYPE, LOCATION, CACHE_CONTROL])
    ///     .unwrap();
    ///
    /// let refused = IdempotencyLayer::unauthenticated(MemoryStore::new())
    ///     .replay_headers([CONTENT_TYPE, SET_COOKIE])
    ///     .unwrap_err();
    /// assert_eq!(refused.name(), &SET_COOKIE);
    /// let custom = HeaderName::from_static("x-charge-id");
    /// let refused = IdempotencyLayer::unauthenticated(MemoryStore::new())
    ///     .replay_headers([custom.clone()])
    ///     .unwrap_err();
    /// assert_eq!(refused.name(), &custom);
    /// # drop(layer);
    /// ```
    pub fn replay_headers<I>(mut self, names: I) -> Result<Self, RefusedHeader>
    where
        I: IntoIterator<Item = HeaderName>,
    {
        self.replay_headers = ReplayHeaders::new(names)?;
        Ok(self)
    }

    /// The statuses that mean "refused before anything was done", replacing the default set
    /// (`405`, `406`, `411`, `413`, `414`, `415`, `422`): a handler's response with one of them
    /// is not stored, and its key is freed as with [`NotApplied`], so the corrected resend runs.
    /// These are what axum's extractors and router answer before a handler's body runs (a
    /// wrong `Content-Type`, JSON that does not fit the type, a method not allowed).
    ///
    /// A handler must never answer one of these statuses **after** its effect: that effect
    /// would be repeated by the resend. If one of your handlers does (say, `422` for a payment
    /// the card network declined after booking it), leave that status out of the set, and it
    /// is stored and replayed like any other answer. An empty set stores every answer.
    ///
    /// ```
    /// use http::StatusCode;
    /// use retry_core::idempotency::MemoryStore;
    /// use retry_core::tower::IdempotencyLayer;
    ///
    /// // Our handlers answer 422 for a declined card, after the attempt was recorded.
    /// let layer = IdempotencyLayer::unauthenticated(MemoryStore::new()).not_processed_statuses([
    ///     StatusCode::METHOD_NOT_ALLOWED,
    ///     StatusCode::UNSUPPORTED_MEDIA_TYPE,
    /// ]);
    /// # drop(layer);
    /// ```
    ///
    /// [`NotApplied`]: super::NotApplied
    #[must_use]
    pub fn not_processed_statuses<I>(mut self, statuses: I) -> Self
    where
        I: IntoIterator<Item = ::http::StatusCode>,
    {
        self.not_processed = NotProcessed::new(statuses);
        self
    }

    /// The name of the guarded operation, used as the `function` label of the idempotency
    /// metrics and in log events. Without it, the [`namespace`](Self::namespace) when one was
    /// set, else `"idempotency_layer"`: two layers of one service are told apart either way.
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
        self.name = Some(name);
        self
    }

    /// The `function` label of this layer's metrics and events; see [`name`](Self::name).
    pub(super) fn function(&self) -> &str {
        self.static_function().unwrap_or(&self.namespace)
    }

    /// [`function`](Self::function), for what outlives the layer's borrow (a call's settings):
    /// copied per request only when it is the namespace.
    pub(super) fn function_label(&self) -> Cow<'static, str> {
        self.static_function()
            .map_or_else(|| Cow::Owned(self.namespace.to_string()), Cow::Borrowed)
    }

    /// The label when it is not the namespace: the name, or the default.
    fn static_function(&self) -> Option<&'static str> {
        match self.name {
            Some(name) => Some(name),
            None if &*self.namespace == DEFAULT_NAMESPACE => Some(DEFAULT_NAME),
            None => None,
        }
    }

    /// The namespace of this layer's keys (default [`DEFAULT_NAMESPACE`], `"http"`): the stored
    /// key is (namespace, client scope, key), see
    /// [`encode_namespaced_key`](crate::idempotency::encode_namespaced_key). Within one
    /// namespace a key is the client's across all routes, as Stripe's keys are per account: the
    /// same key on another route is the same key with another fingerprint (`422`). Layers with
    /// different namespaces never answer for each other, even on one store: give each service
    /// or API version sharing a store its own (`"payments.v2"`). Changing it later forgets the
    /// keys stored under the old one, so resends still in flight would run again.
    ///
    /// ```
    /// use retry_core::idempotency::MemoryStore;
    /// use retry_core::tower::IdempotencyLayer;
    /// use std::sync::Arc;
    ///
    /// let store = Arc::new(MemoryStore::new());
    /// let payments =
    ///     IdempotencyLayer::unauthenticated(Arc::clone(&store)).namespace("payments.v1");
    /// let refunds = IdempotencyLayer::unauthenticated(store).namespace("refunds.v1");
    /// # drop((payments, refunds));
    /// ```
    #[must_use]
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Arc::from(namespace.into());
        self
    }

    /// Counts every request's arrival with `observer`, to see retries multiplied upstream
    /// (see [`AmplificationLayer`](crate::tower::AmplificationLayer), which does the same in
    /// front of any service). Requests are grouped by the layer's own identity of them, the
    /// client's scope and key; requests without a key (safe methods, unkeyed ones the layer
    /// lets through or refuses) by their `traceparent`. The route label is the layer's
    /// `function` label ([`name`](Self::name), else the namespace). Use one or the other on
    /// a request's way, not both: each counts it.
    ///
    /// ```
    /// use retry_core::idempotency::MemoryStore;
    /// use retry_core::tower::{AmplificationObserver, IdempotencyLayer};
    ///
    /// let observer = AmplificationObserver::new();
    /// let layer = IdempotencyLayer::unauthenticated(MemoryStore::new())
    ///     .name("create_payment")
    ///     .observe(observer.clone());
    /// # drop(layer);
    /// ```
    #[must_use]
    pub fn observe(mut self, observer: AmplificationObserver) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Counts a request's arrival, when the layer observes: by `scope` and `key` when the
    /// layer has read them, else by the request's trace id.
    pub(super) fn observe_arrival(&self, parts: &Parts, keyed: Option<(Option<&str>, &str)>) {
        let Some(observer) = &self.observer else {
            return;
        };
        let identity = match keyed {
            Some((scope, key)) => Some(Identity::Key {
                scope,
                key: key.as_bytes(),
            }),
            None => Identity::trace(&parts.headers),
        };
        observer.arrive(
            self.function(),
            &parts.method,
            parts.uri.path(),
            &parts.headers,
            identity,
        );
    }
}

impl<St, M> Clone for IdempotencyLayer<St, M> {
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
            not_processed: self.not_processed.clone(),
            name: self.name,
            namespace: Arc::clone(&self.namespace),
            claim_in_transaction: self.claim_in_transaction,
            observer: self.observer.clone(),
            mode: PhantomData,
        }
    }
}

impl<St, M: Mode<St>> fmt::Debug for IdempotencyLayer<St, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyLayer")
            .field("name", &self.name)
            .field("namespace", &self.namespace)
            .field("transactional", &<M as Mode<St>>::TRANSACTIONAL)
            .field("effects_in_transaction", &self.claim_in_transaction)
            .field("authenticated", &self.scope.is_some())
            .field("required", &self.required)
            .field("max_key_bytes", &self.max_key_bytes)
            .field("max_body_bytes", &self.max_body_bytes)
            .field("lease", &self.lease)
            .field("retention", &self.retention)
            .field("replay_headers", &self.replay_headers)
            .field("not_processed", &self.not_processed)
            .field("observed", &self.observer.is_some())
            .finish_non_exhaustive()
    }
}
