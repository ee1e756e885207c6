//! The layer's two modes ([`Plain`], [`InTransaction`]), and transactional mode's way from the
//! handler's answer to one commit: its writes, the `done` row and the stored response together,
//! or a rollback that frees the key.

use std::future::Future;
use std::sync::Arc;

use ::bytes::Bytes;
use ::http::header::HeaderMap;
use ::http::request::Parts;
use ::http::{Request, Response, response};
use ::http_body::Body;
use ::http_body_util::Full;
use ::tower_service::Service;

use super::IdempotencyLayer;
use super::body::{BoxError, Buffered, IdempotencyBody, Resumed, Tail};
use super::extract::{RequestTransaction, Taken};
use super::problem::Problem;
use super::replay::ReplayHeaders;
use super::run::{Ran, run_handler};
use super::service::call_ready;
use super::settle::{release, settle};
use super::stored::stored;
use crate::idempotency::{
    HeldClaim, IdempotencyError, IdempotencyStore, Settings, TransactionalStore,
    finish_transactional,
};

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
/// # #[cfg(feature = "sqlite")]
/// assert!(<InTransaction as Mode<retry_core::idempotency::SqliteStore>>::TRANSACTIONAL);
/// ```
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

impl<St> Mode<St> for InTransaction
where
    St: TransactionalStore + 'static,
    St::Transaction: 'static,
{
    const TRANSACTIONAL: bool = true;
}

impl<St> sealed::Sealed<St> for InTransaction
where
    St: TransactionalStore + 'static,
    St::Transaction: 'static,
{
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
        layer.claim_and_run_in_transaction(inner, call, parts, body)
    }
}

impl<St> IdempotencyLayer<St, InTransaction>
where
    St: TransactionalStore + 'static,
    St::Transaction: 'static,
{
    /// Claims the key (the claim commits on its own, so a duplicate gets `409` at once), runs
    /// the handler with a [`RequestTransaction`] in its extensions, then commits or rolls back
    /// what it left there. A transaction the handler asks for holds the claim instead of the
    /// lease ([`TransactionalStore::begin_for`]): if the process dies before its commit, the
    /// resend finds the key free at once.
    async fn claim_and_run_in_transaction<S, RB>(
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
        let transaction = RequestTransaction::new(Arc::clone(&self.store), held.claim().cloned());
        let mut request = Request::from_parts(parts, IdempotencyBody::new(Full::new(body)));
        request.extensions_mut().insert(transaction.clone());
        let max = self.store.limits().max_response_bytes;
        let ran = run_handler(&held, call_ready(inner, request), max).await;
        let finished = Finished {
            call: &call,
            max,
            replayed: &self.replay_headers,
        };
        finished.settle(held, transaction.close(), ran).await
    }
}

/// What settling a transactional request needs to know.
struct Finished<'a> {
    call: &'a Settings,
    /// The store's largest stored response.
    max: usize,
    replayed: &'a ReplayHeaders,
}

/// What the handler's answer asks for.
enum Verdict<E> {
    /// Commit its writes with this response (a complete body, status below 500).
    Commit {
        parts: response::Parts,
        data: Bytes,
        trailers: Option<HeaderMap>,
    },
    /// Roll back and free the key; the first client gets this.
    RollBack(Result<Response<IdempotencyBody>, E>),
}

/// Error side of [`finish_transactional`] here: the rollback asked for, or why the commit
/// did not happen.
enum NotCommitted {
    RolledBack,
    Refused(IdempotencyError),
}

impl From<IdempotencyError> for NotCommitted {
    fn from(e: IdempotencyError) -> Self {
        NotCommitted::Refused(e)
    }
}

impl Finished<'_> {
    /// Settles the claim as `taken` (what the handler left in its slot) and `ran` say.
    async fn settle<St, E>(
        &self,
        held: HeldClaim<'_, St>,
        taken: Taken<St::Transaction>,
        ran: Ran<E>,
    ) -> Result<Response<IdempotencyBody>, E>
    where
        St: TransactionalStore + ?Sized,
    {
        let function = self.call.function;
        let (transaction, verdict) = match taken {
            // The handler chose not to use the transaction: the non-transactional rules.
            Taken::Unasked => return settle(held, ran, self.max, self.replayed, function).await,
            Taken::Open(transaction) => (Some(transaction), verdict(ran, function)),
            Taken::NotBegun => (None, verdict(ran, function)),
            Taken::Lent => {
                tracing::error!(
                    function,
                    "the handler answered while a TransactionGuard was still alive: its transaction cannot be committed and rolls back when the guard is dropped"
                );
                let verdict = match verdict(ran, function) {
                    Verdict::Commit { .. } => Verdict::RollBack(Ok(Problem::RolledBack.response())),
                    rollback => rollback,
                };
                (None, verdict)
            }
        };
        match (verdict, transaction) {
            (
                Verdict::Commit {
                    parts,
                    data,
                    trailers,
                },
                Some(transaction),
            ) => {
                let response = stored(&parts, &data, self.replayed, function);
                let committed =
                    finish_transactional(held, transaction, self.call, Ok(response)).await;
                match committed {
                    Ok(_) => {
                        let body = Resumed::new(data, None, trailers.map(Tail::Trailers));
                        Ok(Response::from_parts(parts, IdempotencyBody::new(body)))
                    }
                    // Rolled back and released (logged by `finish_transactional`).
                    Err(NotCommitted::Refused(
                        IdempotencyError::ResponseTooLarge { .. } | IdempotencyError::Serde(_),
                    )) => Ok(Problem::RolledBack.response()),
                    // Fenced (rolled back), or the commit's outcome is unknown: the resend
                    // finds out which.
                    Err(_) => Ok(Problem::NotCommitted.response()),
                }
            }
            // Asked for, never begun: nothing transactional to commit, so the answer is kept
            // as any other.
            (
                Verdict::Commit {
                    parts,
                    data,
                    trailers,
                },
                None,
            ) => {
                let body = Buffered::Complete { data, trailers };
                let ran = Ran::Answered { parts, body };
                settle(held, ran, self.max, self.replayed, function).await
            }
            (Verdict::RollBack(answer), Some(transaction)) => {
                let rolled_back: Result<(), NotCommitted> = finish_transactional(
                    held,
                    transaction,
                    self.call,
                    Err(NotCommitted::RolledBack),
                )
                .await;
                debug_assert!(rolled_back.is_err());
                tracing::debug!(function, key = %self.call.key, "transactional request failed: rolled back, key released");
                answer
            }
            (Verdict::RollBack(answer), None) => {
                release(
                    held,
                    function,
                    "the transactional request failed before anything was committed",
                )
                .await;
                answer
            }
        }
    }
}

/// What a transactional handler's answer means: a complete answer below `500` commits;
/// anything else (`5xx`, [`NotApplied`](super::NotApplied), an error, a panic, a body that
/// failed or cannot be kept) rolls back.
fn verdict<E>(ran: Ran<E>, function: &'static str) -> Verdict<E> {
    match ran {
        Ran::Answered {
            parts,
            body: Buffered::Complete { data, trailers },
        } if !parts.status.is_server_error() => Verdict::Commit {
            parts,
            data,
            trailers,
        },
        Ran::Answered { parts, body } => {
            let body = match body {
                Buffered::Complete { data, trailers } => {
                    Resumed::new(data, None, trailers.map(Tail::Trailers))
                }
                Buffered::TooLarge { prefix, rest } if parts.status.is_server_error() => {
                    Resumed::new(prefix, Some(rest), None)
                }
                Buffered::TooLarge { .. } => {
                    tracing::error!(
                        function,
                        "response larger than the store keeps: the handler's transaction was rolled back"
                    );
                    return Verdict::RollBack(Ok(Problem::RolledBack.response()));
                }
                Buffered::Failed { error, .. } => {
                    tracing::warn!(function, error = %crate::error_chain(&*error), "the response body failed while it was read: the handler's transaction was rolled back");
                    return Verdict::RollBack(Ok(Problem::RolledBack.response()));
                }
            };
            Verdict::RollBack(Ok(Response::from_parts(parts, IdempotencyBody::new(body))))
        }
        Ran::NotApplied(response) => Verdict::RollBack(Ok(response)),
        Ran::Failed(e) => Verdict::RollBack(Err(e)),
        Ran::Panicked(message) => {
            tracing::error!(function, panic = %message, "the handler panicked: its transaction was rolled back");
            Verdict::RollBack(Ok(Problem::RolledBack.response()))
        }
    }
}
