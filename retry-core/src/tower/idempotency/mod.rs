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
//! | no client scope (or an empty one) on an authenticated layer | `401`, nothing runs        |
//! | client scope too long for the store's keys         | `400` naming the scope              |
//! | no key, on a layer that requires one               | `400` "Idempotency-Key is missing"  |
//! | key malformed (a bare `?1`, `:YWJj:` or `42` included), or longer than `max_key_bytes` | `400` |
//! | body larger than `max_body_bytes`                  | `413`                               |
//! | the store cannot be reached                        | `503`, nothing runs (fail closed)   |
//! | first use of the key                               | the handler runs; its response      |
//! | same key while the first request is still running  | `409` with `Retry-After: 1`         |
//! | same key, another request (fingerprint differs)    | `422`                               |
//! | same key, same request, first one answered         | the stored response, replayed (`5xx` included) |
//! | same key, first one failed with its outcome unknown | `500`, never run again             |
//! | same key, first one's response too large to keep   | `409`, never run again              |
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
//! so a client that switches form cannot run an operation twice. A bare value that is a
//! structured-field item of another type is refused (`400`): a boolean (`?1`), a byte sequence
//! (`:YWJj:`), a date (`@1659578233`) or a number (`42`, `3.14`), which a parser of the field
//! reads as something else than its text (`007` is `7`); quoted, each is a key like any other. A request with more than one
//! `Idempotency-Key` field is malformed. Keys are at most [`DEFAULT_MAX_KEY_BYTES`] bytes
//! unless [`max_key_bytes`](IdempotencyLayer::max_key_bytes) says otherwise.
//!
//! The handler finds the client's key, as the client meant it (unquoted and unescaped), in the
//! request's extensions as an [`IdempotencyKey`](crate::http::IdempotencyKey): axum handlers
//! take `Extension<IdempotencyKey>`, for instance to park a dead letter under it (`dlq(id =
//! key.as_str(), ..)`) so that a redrive is answered by the stored response. The claim's own key
//! ([`current`](crate::idempotency::current)) is the stored, namespaced form.
//!
//! # Scope: whose key it is
//!
//! A stored response is only ever returned to the client that caused it. The layer is built
//! with a function from the request head to the authenticated client
//! ([`IdempotencyLayer::new`]), and every key is stored under that scope: client B sending
//! client A's key runs its own request and never sees A's response. A request for which the
//! function finds no client, or an empty id, gets `401`. A client id so long that no key fits
//! beside it within the store's key limit gets `400` naming the id, not the key. Put your authentication in front of this layer: its
//! `401` carries the proper `WWW-Authenticate` challenge, this one is a backstop. A route
//! without authentication must say so with [`IdempotencyLayer::unauthenticated`]; there, the
//! key alone finds the response, so it must be unguessable (as
//! [`IdempotencyKey`](crate::http::IdempotencyKey) makes it).
//!
//! The scope must be a **stable principal id** (the user, tenant or API client id your
//! authentication established), **never a raw bearer token**: the scope is part of the stored
//! key, so a token would sit in plain text in the store (a leaked table would hand out
//! credentials), and a client whose token was refreshed between two sends of one operation
//! would be another scope, so its resend would run a second time. If all you have is a token,
//! return a cryptographic hash of it (this keeps the secret out of the store, not the refresh
//! problem), e.g. with the `sha2` crate:
//!
//! ```ignore
//! use sha2::{Digest, Sha256};
//!
//! let layer = IdempotencyLayer::new(store, |parts: &http::request::Parts| {
//!     let token = parts.headers.get("authorization")?.to_str().ok()?.strip_prefix("Bearer ")?;
//!     let hash = Sha256::digest(token.as_bytes());
//!     Some(hash.iter().map(|byte| format!("{byte:02x}")).collect())
//! });
//! ```
//!
//! # Namespace
//!
//! The stored key is (namespace, scope, key) (see
//! [`encode_namespaced_key`](crate::idempotency::encode_namespaced_key)). The namespace is
//! [`DEFAULT_NAMESPACE`] (`"http"`) unless [`namespace`](IdempotencyLayer::namespace) pins
//! another: two layers on one store with different namespaces never answer for each other,
//! nor does a layer for an `#[idempotent]` function (whose namespace is its name).
//!
//! # Fingerprint
//!
//! The same key with another request is a client bug (`422`), told apart by a fingerprint of the
//! method, path, query and body. Headers are not part of it: a resend may carry a new date or
//! trace id.
//!
//! A JSON body counts by its canonical form: object keys sorted and whitespace dropped (a
//! redrive resends a dead letter's `original` as `serde_json::Value` wrote it, keys sorted, and
//! must find the first answer), but numbers exactly as written: `0.1` and
//! `0.10000000000000001`, or two 23-digit amounts that one `f64` holds alike, are other
//! requests, and so are `100` and `1e2`. A body whose objects repeat a key
//! (`{"to":"alice","to":"mallory"}`, which parsers read differently) counts by its bytes, as
//! does one nested deeper than 128 levels or that is not JSON at all. The fingerprint stored is
//! a SHA-256 digest of all this.
//!
//! # Which responses are stored
//!
//! **A key is freed for a second run only when the layer knows the first run's effect did not
//! happen.** Once the handler started, every response it gives is stored and replayed, `5xx`,
//! `408` and `429` included (Stripe: "Subsequent requests with the same key return the same
//! result, including 500 errors"): a `500` may come after the payment was booked, and only the
//! handler knows. A handler that knows nothing happened says so with [`NotApplied`].
//!
//! | what happened                                           | the key                  | a resend gets |
//! |---------------------------------------------------------|--------------------------|---------------|
//! | the layer refused (`400`, `401`, `409`, `413`, `422`, `503`) | nothing claimed     | judged anew   |
//! | the handler answered, any status                        | done: response stored    | the stored response |
//! | the handler answered with [`NotApplied`] in its extensions | **freed** (not stored) | a new run  |
//! | the handler (or an extractor before it) answered a not-processed status: `405`, `406`, `411`, `413`, `414`, `415`, `422` | **freed** (not stored) | a new run |
//! | the inner service returned `Err`                        | failed: outcome unknown  | `500` problem |
//! | the response body failed while it was read              | failed: outcome unknown  | `500` problem |
//! | the handler panicked (its client gets the `500` problem) | failed: outcome unknown | `500` problem |
//! | the response is larger than the store keeps (sent in full once) | failed: not kept | `409` problem |
//! | the client disconnected while the handler ran           | the handler runs on; its response is stored | the stored response |
//! | the process died while the handler ran                  | in progress until the lease runs out | `409` until then, then a new run |
//! | the store failed to take the response                   | in progress until the lease runs out | `409` until then, then a new run |
//!
//! **Refusals before the handler's body.** axum's extractors answer before the handler's body
//! runs: `415` for a wrong `Content-Type`, `422` for JSON that does not fit the type, `405` for
//! a method the route does not take. Nothing happened, so storing that answer would hand it
//! back to the corrected resend for the whole retention; such statuses free the key instead
//! (as Stripe stores nothing when a request fails validation). The layer cannot tell an
//! extractor's `422` from the handler's own, so the rule under uncertainty is the handler's to
//! keep: **a handler must never answer one of these statuses after it had an effect**, or that
//! effect is repeated by the resend. A service whose handlers do (a `422` for a card declined
//! after the attempt was booked) leaves the status out with
//! [`not_processed_statuses`](IdempotencyLayer::not_processed_statuses), and it is stored like
//! any other answer. JSON that is not JSON at all gets `400` from axum, which is stored: add
//! `400` to the set if no handler answers it after an effect.
//!
//! A key kept failed is never run again: whether the first run had its effect is for a person
//! to find out, and the problem's `detail` says so; a new operation needs a new key. The
//! failure's text (the panic message, the body's error) is kept in the store for operators and
//! never sent.
//!
//! The response is stored before it is sent, so a resend that follows it always finds it.
//!
//! This table is the non-transactional mode. Stored this way, the response commits after the
//! handler's own writes, in a transaction of its own: a crash (or a store that fails or hangs)
//! between the two leaves the key in progress, and once the lease has run out a resend runs the
//! handler again. [Transactional mode](#transactional-mode) closes that gap.
//!
//! # A client that goes away
//!
//! Once the request body is read, the claim, the handler and the storing of its response run on
//! a Tokio task of their own ([`tokio::spawn`]) that the response future only waits for: a
//! client that disconnects, or a timeout above this layer, drops the wait, not the handler. The
//! handler runs to its end and its response is stored for the resend. While it runs its claim's
//! lease is renewed every `lease / 3`, and
//! [`idempotency::current()`](crate::idempotency::current) returns the claim, so the handler can
//! derive keys for its own downstream calls. Outside a Tokio runtime the handler runs in place.
//!
//! This is why the inner service, its future, its error and its response body must be
//! `Send + 'static`. The store needs nothing more than [`IdempotencyStore`] (`Send + Sync`) and
//! `'static`: the layer keeps it in an [`Arc`] shared with the task.
//!
//! # A request still running
//!
//! A resend while the first request still runs gets `409` with `Retry-After: 1` (seconds). The
//! layer cannot tell how long the first one will take (the lease bounds only a dead holder), and
//! one second is short for a quick handler and cheap to answer again: one claim attempt.
//!
//! # Replay
//!
//! A replay carries the stored status and body bytes, the stored headers on the replay
//! allow-list ([`replay_headers`](IdempotencyLayer::replay_headers); by default
//! `Content-Type`, `Content-Language`, `Content-Location`, `Location`, `ETag` and
//! `Last-Modified`) and `Idempotent-Replayed: ?1` ([`IDEMPOTENT_REPLAYED`]: a structured-field
//! boolean, the name Stripe uses). Only headers that describe the response itself can be on
//! that list (those six, `Content-Encoding`, `Content-Disposition`, `Cache-Control`, `Expires`
//! and `Vary`); nothing else is ever stored or replayed, even if asked for: `Set-Cookie` would
//! hand a session to whoever holds the key, `Authorization`, `WWW-Authenticate` and the like
//! belong to one exchange, and a custom header (an `X-Echo-Auth` echoing the caller's
//! credential) would carry one client's secret to another client of the same scope. Framing
//! headers (`Content-Length`,
//! `Transfer-Encoding`, ...) are computed for the replay instead. Trailers are not stored.
//!
//! # Limits
//!
//! The request body is buffered to fingerprint it: at most [`DEFAULT_MAX_BODY_BYTES`] unless
//! [`max_body_bytes`](IdempotencyLayer::max_body_bytes) says otherwise; a larger one gets `413`
//! (at once when `Content-Length` says so) and nothing runs. The layer puts no time limit on
//! that read: put a timeout outside it (tower-http's `TimeoutLayer`, as docs/idempotency-http.md shows), so a
//! client that trickles its body cannot hold a connection and its buffer for ever. The key is
//! claimed only once the body is read, so a request cut off before then leaves nothing behind. The response is buffered to store
//! it, up to the store's [`Limits::max_response_bytes`](crate::idempotency::Limits). A larger
//! response is still sent to the first client in full (what does not fit is streamed, not
//! buffered), but it cannot be kept: its effect happened, so the key is marked failed, never
//! released — a resend gets `409` "Response for this Idempotency-Key was not kept" instead of
//! repeating the operation. This is logged as a warning and counted in
//! [`metrics::names::NOT_STORED`](crate::metrics::names::NOT_STORED).
//!
//! # Store, lease, retention
//!
//! Claims follow the same flow as `#[idempotent]` (see [`crate::idempotency`]): an `INSERT`
//! under the primary key, a fencing token, a lease ([`lease`](IdempotencyLayer::lease), default
//! 30 s, renewed every `lease / 3` while the handler runs: it only frees the keys of a process
//! that died) and a retention ([`retention`](IdempotencyLayer::retention),
//! default 30 days: longer than any client retries; the draft asks servers to publish it).
//!
//! # Transactional mode
//!
//! [`IdempotencyLayer::transactional`], on a [`TransactionalStore`] (retry-sqlite's `SqliteStore`, retry-postgres's `PgStore`),
//! gives each handler the store's transaction: its writes, the `done` row and the stored
//! response commit together, in one transaction fenced by the claim's token, or not at all. It
//! is the mode of `#[idempotent(transaction = ..)]`, for HTTP:
//!
//! 1. The claim commits first, on its own, so a duplicate gets `409` at once instead of waiting
//!    for the handler.
//! 2. The request carries a [`RequestTransaction<St>`](RequestTransaction) in its extensions
//!    (`St` is the layer's store type). An axum handler takes it with
//!    `Extension<RequestTransaction<St>>`, any other service from `request.extensions()`. Its
//!    [`get`](RequestTransaction::get) begins the transaction on first use and lends it out as
//!    a [`TransactionGuard`]: on SQLite a
//!    [`SqliteTransaction`](https://docs.rs/retry-sqlite/latest/retry_sqlite/struct.SqliteTransaction.html), whose `run(|conn| ..)`
//!    runs the handler's rusqlite code on the store's blocking thread; on PostgreSQL a
//!    [`PgTransaction`](https://docs.rs/retry-postgres/latest/retry_postgres/struct.PgTransaction.html), whose `client()` is a
//!    tokio-postgres client inside the transaction. The guard gives the transaction back to
//!    the layer when it is dropped. A layer built without `.transactional()` offers the same
//!    extension, refusing: `get` fails and the layer logs an ERROR; a handler that then fails
//!    gets `500` ("this route is not transactional") with its key freed, so the mistake costs
//!    one request, not a key that replays the handler's error forever. An answer below `500` is
//!    kept, as in transactional mode when `begin` failed.
//! 3. Once the handler answered and its body was read, the layer takes the transaction back and
//!    commits it with the stored response, or rolls it back:
//!
//! | the handler                                                   | its writes | the key | a resend gets |
//! |---------------------------------------------------------------|------------|---------|---------------|
//! | never asked for the transaction                               | its own business | the non-transactional rules (above) | |
//! | answered below `500`, body complete                           | committed with the response | done | the stored response |
//! | answered `5xx`, a not-processed status (`422`, ...), or with [`NotApplied`] | rolled back | **freed** | a new run |
//! | returned `Err`, panicked, or its body failed or was too large to keep | rolled back | **freed** | a new run (the first client got the `Err`, or a `500` problem) |
//! | answered while a `TransactionGuard` was still alive           | rolled back | **freed** | a new run (the first client got a `500` problem) |
//! | asked, but `begin` failed                                     | none began | **freed** after a `5xx` or failure; an answer below `500` is stored | |
//! | commit fenced: its lease ran out and a resend took the key over | rolled back | the other request's | its answer (this client got `503`) |
//! | the store failed at the commit (unreachable, no answer)       | committed or not | done, or in progress until the lease ends | the stored response, or `409` and then one new run (this client got `503`) |
//! | the client disconnected while the handler ran                 | committed with the response | done | the stored response |
//! | the process died before the commit                            | rolled back by the database | in progress until the lease ends | `409` until then, then one new run |
//!
//! A `5xx` rolls back rather than being stored: in this mode the handler's effects are its
//! writes, so after the rollback nothing happened and a resend may run (the rule of
//! [`crate::idempotency`]). A refusal the client must see again on every resend (a declined
//! card) is a `4xx`: committed and replayed like any answer below `500`, except the
//! not-processed statuses, which roll back and free the key here too, so both modes answer a
//! corrected resend alike (a declined card answered `422` needs `422` out of the set).
//!
//! **Asking for the transaction is a promise**: the handler's effects are its writes in it. A
//! call to another service made from such a handler is repeated by the resend after a
//! rollback, so it must be idempotent itself (send
//! [`Claim::derive`](crate::idempotency::Claim::derive) of
//! [`idempotency::current()`](crate::idempotency::current) as its `Idempotency-Key`). A handler
//! whose effects lie elsewhere (a card network, an email) does not ask: its request runs under
//! the non-transactional rules, on the same layer. One of each:
//!
//! An example on a SQLite file: [`retry_sqlite::transactional`](https://docs.rs/retry-sqlite/latest/retry_sqlite/transactional/index.html).
//!
//! **SQLite has one writer.** `get` runs `BEGIN IMMEDIATE`: the file's write lock is taken then
//! and held until the commit, and every other writer (the claims, commits and transactions of
//! all other requests, in this process or another) waits meanwhile, up to the store's busy
//! timeout, after which its request gets `503`. Throughput is at most one transactional request
//! per lock hold: keep such handlers short. Validate and call other services first, take the
//! transaction last, and run only SQL while the guard lives (milliseconds, not seconds; the
//! lease renewal every `lease / 3` is a write as well and waits for the same lock). A handler
//! that must hold its transaction longer, or many service instances, belong on PostgreSQL,
//! where transactions of different keys run side by side and the claim's row is only touched
//! by the commit.
//!
//! A crash before the commit leaves nothing of the handler's work, but the claim it committed
//! first stays in progress until its lease ends, so resends get `409` until then. Live handlers
//! renew their lease, so a short [`lease`](IdempotencyLayer::lease) (a few seconds) bounds that
//! wait without any risk of a takeover under a slow handler.
//!
//! ## One commit per request
//!
//! The mode above commits up to three times per request: the claim, then (`begin_for`) the
//! transaction's mark on the claim's row, then the handler's writes with `done` and the
//! response. A handler that dedups by hand commits once (`INSERT .. ON CONFLICT DO NOTHING`
//! on the key, its writes and the response in one transaction), and under load the commits
//! are what a request costs. When **every handler behind the layer keeps its effects in the
//! request's transaction**, say so with
//! [`effects_in_transaction`](IdempotencyLayer::effects_in_transaction), and the layer claims
//! the key inside that transaction
//! ([`claim_in_transaction`](crate::idempotency::TransactionalStore::claim_in_transaction)),
//! begun before the handler runs: the claim, the writes, `done` and the response commit
//! together, once. What differs from the table above:
//!
//! | the handler | its writes | the key | a resend gets |
//! |---|---|---|---|
//! | never asked for the transaction, answered below `500` | none | done, committed with the claim | the stored response |
//! | never asked for the transaction, answered `5xx` or failed | none | **freed** (rolled back) | a new run |
//! | the process died before the commit | rolled back by the database | **freed**: nothing of it was committed | a new run, at once |
//! | a duplicate arrived while it ran | | SQLite: the duplicate waits for the transaction (one writer), then replays its answer; PostgreSQL: `409` at once | |
//!
//! Freeing the key at once after a crash is right only because of the promise: nothing of the
//! first run happened outside the transaction that rolled back. A handler with an effect
//! elsewhere (an email, a card network) belongs behind a layer without the promise, where a
//! request that never asks for its transaction keeps the non-transactional rules.
//!
//! On SQLite the write transactions of one store queue in the process, in arrival order, for
//! the file's one write lock (at most the busy timeout, then `503`), rather than retrying it
//! from SQLite's busy handler.
//!
//! # Body types
//!
//! The inner service gets `Request<`[`IdempotencyBody`]`>` and the layer answers with
//! `Response<IdempotencyBody>`: any [`http_body::Body`] of [`Bytes`](::bytes::Bytes), boxed,
//! which axum, hyper and tonic accept. The inner service may answer with any body of `Bytes`.
//!
//! [`IDEMPOTENT_REPLAYED`]: crate::http::IDEMPOTENT_REPLAYED
//! [`Arc`]: std::sync::Arc
//! [`IdempotencyStore`]: crate::idempotency::IdempotencyStore
//! [`TransactionalStore`]: crate::idempotency::TransactionalStore

mod body;
mod extract;
mod fingerprint;
mod key;
mod layer;
mod not_applied;
mod problem;
mod read;
mod replay;
mod replay_headers;
mod run;
mod service;
mod settle;
mod stored;
mod transactional;

pub use body::{BoxError, IdempotencyBody};
// `RetryLayer` buffers request bodies for resending the same way.
pub(in crate::tower) use body::{Buffered, Resumed, Tail, buffer};
pub use extract::{RequestTransaction, TransactionGuard};
pub use layer::{
    DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_KEY_BYTES, DEFAULT_NAMESPACE, IdempotencyLayer,
    InTransaction, Mode, Plain,
};
pub use not_applied::NotApplied;
pub use replay_headers::RefusedHeader;
pub use service::Idempotency;
