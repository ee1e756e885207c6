//! [`Idempotency`], the service: a request's way through the layer, from its key to the
//! stored answer, and the default mode's ([`Plain`]) run from the claim to the settled key.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use ::bytes::Bytes;
use ::http::request::Parts;
use ::http::{Method, Request, Response};
use ::http_body::Body;
use ::http_body_util::Full;
use ::tower_layer::Layer;
use ::tower_service::Service;

use super::body::{BoxError, IdempotencyBody};
use super::extract::Asked;
use super::fingerprint::fingerprint;
use super::key::KeyField;
use super::layer::{IdempotencyLayer, Mode, Plain, sealed};
use super::problem::Problem;
use super::read::read_request;
use super::replay::replay;
use super::run::{Ran, detached, run_handler};
use super::settle::settle;
use crate::http::IdempotencyKey;
use crate::idempotency::{
    Begun, HeldClaim, IdempotencyError, IdempotencyStore, Settings, begin_call,
    encode_namespaced_key,
};

/// The service made by [`IdempotencyLayer`]; `M` is its mode ([`Plain`](super::Plain) or
/// [`InTransaction`](super::InTransaction)).
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
pub struct Idempotency<S, St, M = Plain> {
    inner: S,
    layer: IdempotencyLayer<St, M>,
}

impl<S, St, M> Idempotency<S, St, M> {
    pub(super) fn new(inner: S, layer: IdempotencyLayer<St, M>) -> Self {
        Idempotency { inner, layer }
    }
}

impl<S, St, M> Layer<S> for IdempotencyLayer<St, M> {
    type Service = Idempotency<S, St, M>;

    fn layer(&self, inner: S) -> Idempotency<S, St, M> {
        Idempotency::new(inner, self.clone())
    }
}

impl<S: Clone, St, M> Clone for Idempotency<S, St, M> {
    fn clone(&self) -> Self {
        Idempotency {
            inner: self.inner.clone(),
            layer: self.layer.clone(),
        }
    }
}

impl<S: fmt::Debug, St, M: Mode<St>> fmt::Debug for Idempotency<S, St, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idempotency")
            .field("inner", &self.inner)
            .field("layer", &self.layer)
            .finish()
    }
}

impl<S, St, M, B, RB> Service<Request<B>> for Idempotency<S, St, M>
where
    S: Service<Request<IdempotencyBody>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    St: IdempotencyStore + 'static,
    M: Mode<St>,
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

impl<St: IdempotencyStore + 'static, M: Mode<St>> IdempotencyLayer<St, M> {
    async fn handle<S, B, RB>(
        self,
        inner: S,
        request: Request<B>,
    ) -> Result<Response<IdempotencyBody>, S::Error>
    where
        S: Service<Request<IdempotencyBody>, Response = Response<RB>> + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Send + 'static,
        RB: Body<Data = Bytes> + Send + 'static,
        RB::Error: Into<BoxError>,
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        let (mut parts, body) = request.into_parts();
        if is_safe(&parts.method) {
            self.observe_arrival(&parts, None);
            return pass(inner, Request::from_parts(parts, body)).await;
        }
        let field = KeyField::of(&parts.headers);
        if matches!(field, KeyField::Absent) && !self.required {
            self.observe_arrival(&parts, None);
            return pass(inner, Request::from_parts(parts, body)).await;
        }
        // Authenticate before judging the key, so an anonymous caller learns nothing more.
        let scope = match &self.scope {
            None => None,
            // An empty id names nobody: taken as a client, it would pool every request whose
            // authentication came up empty into one scope.
            Some(scope) => match scope(&parts) {
                Some(client) if !client.is_empty() => Some(client),
                _ => {
                    self.observe_arrival(&parts, None);
                    return Ok(Problem::Unauthenticated.response());
                }
            },
        };
        let key = match field.key(self.max_key_bytes) {
            Ok(key) => key,
            Err(problem) => {
                self.observe_arrival(&parts, None);
                return Ok(problem.response());
            }
        };
        self.observe_arrival(&parts, Some((scope.as_deref(), &key)));
        let body = match read_request(body, self.max_body_bytes, self.function()).await {
            Ok(body) => body,
            Err(problem) => return Ok(problem.response()),
        };

        let stored_key = encode_namespaced_key(&self.namespace, scope.as_deref(), key.as_str());
        if let Err(problem) = self.fits(&stored_key, scope.as_deref(), &key) {
            return Ok(problem.response());
        }
        // The client's key as it meant it (unquoted, unescaped), for the handler: to park a dead
        // letter under it, or to send it on. `parse` only checks what the header's grammar did.
        if let Ok(client_key) = key.parse::<IdempotencyKey>() {
            parts.extensions.insert(client_key);
        }
        let mut call = Settings::new(stored_key, self.function_label());
        call.fingerprint = Some(fingerprint(&parts, &body));
        call.biz_key = Some(key);
        call.lease = self.lease;
        call.retention = self.retention;
        // The request is whole: from here on it runs to its end on a task of its own, whether
        // or not its client is still there to read the answer, so a resend finds the stored
        // response instead of a claim dropped mid-way.
        let function = self.function_label();
        match detached(M::claim_and_run(self, inner, call, parts, body)).await {
            Ok(answer) => answer,
            Err(e) => {
                tracing::error!(target: "retry_core::tower", function = &*function, error = %crate::error_chain(&e), "the task running an idempotent request was interrupted; its key stays in progress until its lease ends");
                Ok(Problem::Interrupted.response())
            }
        }
    }
}

impl<St: IdempotencyStore + 'static> Mode<St> for Plain {
    const TRANSACTIONAL: bool = false;
}

impl<St: IdempotencyStore + 'static> sealed::Sealed<St> for Plain {
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
        RB::Error: Into<BoxError>,
    {
        layer.claim_and_run(inner, call, parts, body)
    }
}

impl<St: IdempotencyStore + 'static, M> IdempotencyLayer<St, M> {
    /// Claims the call's key: the held claim, or the answer when the handler must not run
    /// (the stored response replayed, or a refusal).
    pub(super) async fn claim(
        &self,
        call: &Settings,
        parts: &Parts,
    ) -> Result<HeldClaim<'_, St>, Response<IdempotencyBody>> {
        match begin_call(&*self.store, call).await {
            Ok(Begun::Claimed(held)) => Ok(held),
            Ok(Begun::Stored(stored)) => {
                Err(replay(&stored, &self.replay_headers, self.function()))
            }
            Err(e) => Err(self.refuse(parts, e)),
        }
    }

    /// Whether `stored_key` (namespace, `scope` and `key` encoded) fits the store, or the
    /// problem naming what is too long: the scope, when no key at all would fit beside it
    /// (the client cannot shorten that), otherwise the key.
    fn fits(&self, stored_key: &str, scope: Option<&str>, key: &str) -> Result<(), Problem> {
        let max = self.store.limits().max_key_bytes;
        if stored_key.len() <= max {
            return Ok(());
        }
        let shortest = encode_namespaced_key(&self.namespace, scope, "k").len();
        if let Some(scope) = scope.filter(|_| shortest > max) {
            tracing::warn!(target: "retry_core::tower",
                function = self.function(),
                scope_bytes = scope.len(),
                max,
                "the client scope is too long for the store's keys: requests of this client are refused"
            );
            return Err(Problem::ScopeTooLong {
                len: scope.len(),
                max,
            });
        }
        Err(Problem::KeyTooLong {
            len: key.len(),
            max: max.saturating_sub(stored_key.len() - key.len()),
        })
    }

    /// Claims the key, then replays what is stored, refuses, or runs the handler and settles
    /// the claim with its outcome (non-transactional mode).
    pub(super) async fn claim_and_run<S, RB>(
        self,
        inner: S,
        call: Settings,
        parts: Parts,
        body: Bytes,
    ) -> Result<Response<IdempotencyBody>, S::Error>
    where
        S: Service<Request<IdempotencyBody>, Response = Response<RB>>,
        RB: Body<Data = Bytes> + Send + 'static,
        RB::Error: Into<BoxError>,
    {
        let held = match self.claim(&call, &parts).await {
            Ok(held) => held,
            Err(answer) => return Ok(answer),
        };
        let mut request = Request::from_parts(parts, IdempotencyBody::new(Full::new(body)));
        // The request's transaction is offered here too, refusing: a handler written for a
        // transactional route is found out at its first request, not stored and replayed.
        let asked = Asked::default();
        request.extensions_mut().insert(asked.offer::<St>());
        let max = self.store.limits().max_response_bytes;
        let handler = call_ready(inner, request);
        let mut ran = run_handler(&held, handler, max, &self.not_processed).await;
        if asked.asked() {
            tracing::error!(target: "retry_core::tower", function = self.function(), "the handler asked for the request's transaction, but this route's IdempotencyLayer is not transactional: build it with .transactional()");
            // As in transactional mode when the transaction could not begin: a handler that
            // failed after asking made its effects in the transaction it never had, so nothing
            // happened and the key is freed; one that answered below 500 may have acted
            // elsewhere, and its answer is kept as any other.
            let failed = match &ran {
                Ran::Answered { parts, .. } => parts.status.is_server_error(),
                Ran::Failed(_) | Ran::Panicked(_) => true,
                Ran::NotApplied(..) => false,
            };
            if failed {
                ran = Ran::NotApplied(
                    Problem::NotTransactional.response(),
                    "the route is not transactional",
                );
            }
        }
        settle(held, ran, max, &self.replay_headers, self.function()).await
    }

    /// The answer to a request whose key could not be claimed.
    pub(super) fn refuse(
        &self,
        parts: &Parts,
        error: IdempotencyError,
    ) -> Response<IdempotencyBody> {
        let problem = match error {
            IdempotencyError::InProgress => Problem::InProgress,
            IdempotencyError::KeyReused => Problem::KeyReused,
            IdempotencyError::PreviouslyFailed(failure) => Problem::kept_failure(&failure),
            IdempotencyError::KeyTooLong { len, max } => Problem::KeyTooLong { len, max },
            IdempotencyError::Store(e) => {
                tracing::warn!(target: "retry_core::tower", function = self.function(), method = %parts.method, path = parts.uri.path(), error = %crate::error_chain(&e), "idempotency store unavailable: request refused (fail closed)");
                Problem::StoreUnavailable
            }
            other => {
                tracing::error!(target: "retry_core::tower", function = self.function(), error = %crate::error_chain(&other), "idempotency claim failed");
                Problem::StoredUnreadable
            }
        };
        problem.response()
    }
}

/// Calls a service that was polled ready before it was handed over.
pub(super) fn call_ready<S: Service<R>, R>(mut service: S, request: R) -> S::Future {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use ::http_body_util::BodyExt;
    use ::tower_layer::Layer as _;

    use super::*;
    use crate::idempotency::MemoryStore;

    /// Fails with `Err` after counting its effect, as a hyper service can.
    #[derive(Clone)]
    struct Broken(Arc<AtomicU32>);

    impl Service<Request<IdempotencyBody>> for Broken {
        type Response = Response<Full<Bytes>>;
        type Error = std::io::Error;
        type Future = std::future::Ready<Result<Self::Response, std::io::Error>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), std::io::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<IdempotencyBody>) -> Self::Future {
            self.0.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Err(std::io::Error::other("connection to the ledger reset")))
        }
    }

    #[tokio::test]
    async fn an_inner_error_keeps_the_key_failed() {
        let runs = Arc::new(AtomicU32::new(0));
        let mut service =
            IdempotencyLayer::unauthenticated(MemoryStore::new()).layer(Broken(Arc::clone(&runs)));
        let send = || {
            Request::post("/pay")
                .header("idempotency-key", "\"k-err\"")
                .body(Full::new(Bytes::from_static(b"{}")))
                .unwrap()
        };
        let first = service.call(send()).await;
        assert!(
            first.is_err(),
            "the first caller gets the service's own error"
        );

        let resent = service.call(send()).await.unwrap();
        assert_eq!(resent.status(), 500);
        let body = resent.into_body().collect().await.unwrap().to_bytes();
        let problem: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let detail = problem["detail"].as_str().unwrap();
        assert!(
            detail.contains("failed after it may have had its effect"),
            "{detail}"
        );
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "an unknown outcome never runs again"
        );
    }
}
