//! Transactional mode ([`InTransaction`]): its way from the handler's answer to one commit: its
//! writes, the `done` row and the stored response together, or a rollback that frees the key.

use std::future::Future;
use std::sync::Arc;

use ::bytes::Bytes;
use ::http::header::HeaderMap;
use ::http::request::Parts;
use ::http::{Request, Response, response};
use ::http_body::Body;
use ::http_body_util::Full;
use ::tower_service::Service;

use super::body::{BoxError, Buffered, IdempotencyBody, Resumed, Tail};
use super::extract::{RequestTransaction, Taken};
use super::layer::{IdempotencyLayer, InTransaction, Mode, sealed};
use super::problem::Problem;
use super::replay::replay;
use super::replay_headers::ReplayHeaders;
use super::run::{Ran, run_handler};
use super::service::call_ready;
use super::settle::{release, settle};
use super::stored::stored;
use crate::idempotency::flow::{BegunTransaction, begin_transactional};
use crate::idempotency::{
    HeldClaim, IdempotencyError, IdempotencyStore, Settings, TransactionalStore,
    finish_transactional,
};

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
    /// Promises that every handler behind this layer keeps its effects in the request's
    /// transaction (its writes through [`RequestTransaction`], nothing elsewhere), so that the
    /// layer can claim the key inside that transaction too
    /// ([`TransactionalStore::claim_in_transaction`]): the claim, the handler's writes, the
    /// `done` row and the stored response commit together, **one commit per request**, as a
    /// handler that dedups by hand with `INSERT .. ON CONFLICT` in its own transaction.
    ///
    /// What changes (see the [module docs](crate::tower::idempotency#one-commit-per-request)):
    /// - nothing of a request is committed before its handler answered, so a crash, a rollback
    ///   or a dropped connection leaves the key free at once, and the resend runs the handler
    ///   (what the promise makes safe: nothing of the first run happened);
    /// - a handler that never asks for its transaction is held to the promise as well: its
    ///   answer commits with the claim, and a `5xx` or a failure rolls back and frees the key.
    ///   Do not put a handler whose effects lie elsewhere (an email, a card network) behind
    ///   such a layer: give it a layer without this promise, where its requests keep the
    ///   non-transactional rules;
    /// - a duplicate of a request still running waits for its transaction on SQLite (one
    ///   writer) and then replays the answer; PostgreSQL answers `409` at once.
    ///
    /// An example on a SQLite file: [`retry_sqlite::transactional`](https://docs.rs/retry-sqlite/latest/retry_sqlite/transactional/index.html).
    #[must_use]
    pub fn effects_in_transaction(mut self) -> Self {
        self.claim_in_transaction = true;
        self
    }

    /// Claims the key, runs the handler with a [`RequestTransaction`] in its extensions, then
    /// commits or rolls back what it left there.
    ///
    /// By default the claim commits on its own (so a duplicate gets `409` at once) and the
    /// transaction begins when the handler asks for it, holding the claim instead of the lease
    /// ([`TransactionalStore::begin_for`]); a handler that never asks keeps the
    /// non-transactional rules. Under [`effects_in_transaction`](Self::effects_in_transaction)
    /// the claim is written in the transaction, begun before the handler runs.
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
        let (held, transaction) = if self.claim_in_transaction {
            match begin_transactional(&*self.store, &call).await {
                Ok(BegunTransaction::Claimed(held, transaction)) => {
                    let open = RequestTransaction::open(Arc::clone(&self.store), transaction);
                    (held, open)
                }
                Ok(BegunTransaction::Stored(stored)) => {
                    return Ok(replay(&stored, &self.replay_headers, self.function()));
                }
                Err(e) => return Ok(self.refuse(&parts, e)),
            }
        } else {
            match self.claim(&call, &parts).await {
                Ok(held) => {
                    let claim = held.claim().cloned();
                    (
                        held,
                        RequestTransaction::new(Arc::clone(&self.store), claim),
                    )
                }
                Err(answer) => return Ok(answer),
            }
        };
        let mut request = Request::from_parts(parts, IdempotencyBody::new(Full::new(body)));
        request.extensions_mut().insert(transaction.clone());
        let max = self.store.limits().max_response_bytes;
        let handler = call_ready(inner, request);
        let ran = run_handler(&held, handler, max, &self.not_processed).await;
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
        let function = &*self.call.function;
        let (transaction, verdict) = match taken {
            // The handler chose not to use the transaction: the non-transactional rules.
            Taken::Unasked => return settle(held, ran, self.max, self.replayed, function).await,
            Taken::Open(transaction) => (Some(transaction), verdict(ran, function)),
            Taken::NotBegun => (None, verdict(ran, function)),
            Taken::Lent => {
                tracing::error!(target: "retry_core::tower",
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
                tracing::debug!(target: "retry_core::tower", function, key = %self.call.key, "transactional request failed: rolled back, key released");
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
/// anything else (`5xx`, [`NotApplied`](super::NotApplied) or a not-processed status, an error,
/// a panic, a body that failed or cannot be kept) rolls back.
fn verdict<E>(ran: Ran<E>, function: &str) -> Verdict<E> {
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
                    tracing::error!(target: "retry_core::tower",
                        function,
                        "response larger than the store keeps: the handler's transaction was rolled back"
                    );
                    return Verdict::RollBack(Ok(Problem::RolledBack.response()));
                }
                Buffered::Failed { error, .. } => {
                    tracing::warn!(target: "retry_core::tower", function, error = %crate::error_chain(&*error), "the response body failed while it was read: the handler's transaction was rolled back");
                    return Verdict::RollBack(Ok(Problem::RolledBack.response()));
                }
            };
            Verdict::RollBack(Ok(Response::from_parts(parts, IdempotencyBody::new(body))))
        }
        Ran::NotApplied(response, _) => Verdict::RollBack(Ok(response)),
        Ran::Failed(e) => Verdict::RollBack(Err(e)),
        Ran::Panicked(message) => {
            tracing::error!(target: "retry_core::tower", function, panic = %message, "the handler panicked: its transaction was rolled back");
            Verdict::RollBack(Ok(Problem::RolledBack.response()))
        }
    }
}
