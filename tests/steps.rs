//! Steps of an idempotent body on the memory store: a finished step is answered from the
//! journal, a started one runs again in doubt with the same key, labels are checked, and
//! `on_err = "resume"` drives a failed body to completion with one effect per step.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use retry_core::idempotency::{
    Claim, ClaimOutcome, ClaimRequest, IdempotencyError, IdempotencyStore, MemoryStore, StepError,
    StepWrite, step,
};
use retry_core::idempotent;

#[derive(Debug)]
enum OrderError {
    Declined,
    Idempotency(IdempotencyError),
}

impl From<IdempotencyError> for OrderError {
    fn from(e: IdempotencyError) -> Self {
        OrderError::Idempotency(e)
    }
}

/// A receiver that deduplicates by key and counts the effects it made.
#[derive(Default)]
struct Receiver {
    effects: Mutex<HashMap<String, u32>>,
    sends: AtomicU32,
}

impl Receiver {
    fn send(&self, key: &str) -> String {
        self.sends.fetch_add(1, Ordering::SeqCst);
        let mut effects = self.effects.lock().unwrap();
        let n = effects.len() as u32 + 1;
        effects.entry(key.to_owned()).or_insert(n);
        format!("effect-{}", effects[key])
    }

    fn effects(&self) -> usize {
        self.effects.lock().unwrap().len()
    }
}

struct Services {
    charges: Receiver,
    mails: Receiver,
    mail_up: AtomicBool,
    in_doubt: Mutex<Vec<String>>,
}

impl Services {
    fn new() -> Self {
        Services {
            charges: Receiver::default(),
            mails: Receiver::default(),
            mail_up: AtomicBool::new(true),
            in_doubt: Mutex::new(Vec::new()),
        }
    }
}

#[idempotent(key = order, store = inbox, on_err = "resume", lease = "1s", retention = "1d")]
async fn fulfil(
    inbox: &MemoryStore,
    services: &Services,
    order: u64,
) -> Result<(String, String), OrderError> {
    let charge = step("charge", async |s| {
        if s.in_doubt() {
            services.in_doubt.lock().unwrap().push(s.label().to_owned());
        }
        Ok::<_, OrderError>(services.charges.send(s.key()))
    })
    .await?;
    let mail = step("receipt", async |s| {
        if s.in_doubt() {
            services.in_doubt.lock().unwrap().push(s.label().to_owned());
        }
        // The mailer takes the message, then the connection fails: an effect, and an error.
        let sent = services.mails.send(s.key());
        if services.mail_up.load(Ordering::SeqCst) {
            Ok(sent)
        } else {
            Err(OrderError::Declined)
        }
    })
    .await?;
    Ok((charge, mail))
}

#[tokio::test]
async fn resume_completes_a_failed_order_with_one_effect_per_step() {
    let inbox = MemoryStore::new();
    let services = Services::new();
    services.mail_up.store(false, Ordering::SeqCst);
    assert!(matches!(
        fulfil(&inbox, &services, 7).await,
        Err(OrderError::Declined)
    ));
    services.mail_up.store(true, Ordering::SeqCst);
    let (charge, mail) = fulfil(&inbox, &services, 7).await.unwrap();
    assert_eq!((charge.as_str(), mail.as_str()), ("effect-1", "effect-1"));
    // The charge ran once; the receipt was sent twice with one key: one effect.
    assert_eq!(services.charges.sends.load(Ordering::SeqCst), 1);
    assert_eq!(services.mails.sends.load(Ordering::SeqCst), 2);
    assert_eq!(
        (services.charges.effects(), services.mails.effects()),
        (1, 1)
    );
    assert_eq!(*services.in_doubt.lock().unwrap(), ["receipt"]);
    // Done: the third call is the stored response.
    assert_eq!(fulfil(&inbox, &services, 7).await.unwrap(), (charge, mail));
    assert_eq!(services.charges.sends.load(Ordering::SeqCst), 1);
}

#[idempotent(key = order, store = inbox)]
async fn kept(inbox: &MemoryStore, services: &Services, order: u64) -> Result<String, OrderError> {
    step("charge", async |s| {
        Ok::<_, OrderError>(services.charges.send(s.key()))
    })
    .await?;
    Err(OrderError::Declined)
}

#[tokio::test]
async fn the_default_still_keeps_a_failure() {
    let inbox = MemoryStore::new();
    let services = Services::new();
    assert!(kept(&inbox, &services, 1).await.is_err());
    assert!(matches!(
        kept(&inbox, &services, 1).await,
        Err(OrderError::Idempotency(IdempotencyError::PreviouslyFailed(
            _
        )))
    ));
    assert_eq!(services.charges.sends.load(Ordering::SeqCst), 1);
}

fn request(key: &str) -> ClaimRequest<'_> {
    ClaimRequest {
        key,
        biz_key: key,
        fingerprint: None,
        lease: Duration::from_millis(50),
        retention: Duration::from_secs(86_400),
    }
}

/// A crash after the charge's effect and before its journal write, then a crash after it was
/// journaled: the taker-over skips the finished step and runs the started one in doubt.
#[tokio::test]
async fn a_takeover_skips_finished_steps_and_reruns_a_started_one_in_doubt() {
    let inbox = MemoryStore::new();
    let services = Services::new();
    let key = retry_core::idempotency::encode_namespaced_key("fulfil", None::<&str>, &7u64);
    // A first holder "crashed": the charge finished, the receipt started.
    let ClaimOutcome::Claimed(first) = inbox.claim(&request(&key)).await.unwrap() else {
        panic!("claimed")
    };
    let charge_key = first.derive("charge");
    let receipt_key = first.derive("receipt");
    let charged = services.charges.send(charge_key.as_str());
    let journaled = serde_json::to_string(&charged).unwrap();
    inbox
        .write_step(&first, "charge", StepWrite::Started)
        .await
        .unwrap();
    inbox
        .write_step(&first, "charge", StepWrite::Finished(&journaled))
        .await
        .unwrap();
    inbox
        .write_step(&first, "receipt", StepWrite::Started)
        .await
        .unwrap();
    services.mails.send(receipt_key.as_str());
    tokio::time::sleep(Duration::from_millis(60)).await;

    // The lease ran out: the next call takes over (the function's lease is 1s; its claim's
    // `request` asks the same store).
    let (charge, _) = fulfil(&inbox, &services, 7).await.unwrap();
    assert_eq!(charge, charged, "the journaled output, not a second charge");
    assert_eq!(services.charges.sends.load(Ordering::SeqCst), 1);
    assert_eq!(services.mails.sends.load(Ordering::SeqCst), 2);
    assert_eq!(services.mails.effects(), 1);
    assert_eq!(*services.in_doubt.lock().unwrap(), ["receipt"]);

    // The stale holder can write nothing more.
    assert!(
        inbox
            .write_step(&first, "receipt", StepWrite::Finished("\"x\""))
            .await
            .is_err()
    );
}

#[idempotent(key = order, store = inbox)]
async fn twice(inbox: &MemoryStore, order: u64) -> Result<u32, OrderError> {
    step("charge", async |_| Ok::<_, OrderError>(1)).await?;
    step("charge", async |_| Ok::<_, OrderError>(2)).await
}

#[tokio::test]
async fn the_same_label_twice_in_one_run_is_refused() {
    let inbox = MemoryStore::new();
    let Err(OrderError::Idempotency(IdempotencyError::Step(StepError::LabelReused(label)))) =
        twice(&inbox, 1).await
    else {
        panic!("refused")
    };
    assert_eq!(label, "charge");
}

#[idempotent(key = order, store = inbox, on_err = "resume")]
async fn typed(inbox: &MemoryStore, order: u64) -> Result<u32, OrderError> {
    step("charge", async |_| Ok::<u32, OrderError>(1)).await
}

/// A journaled output the code can no longer read is an error, never a silent re-run.
#[tokio::test]
async fn an_undecodable_journaled_output_is_an_error() {
    let inbox = MemoryStore::new();
    let key = retry_core::idempotency::encode_namespaced_key("typed", None::<&str>, &3u64);
    let ClaimOutcome::Claimed(first) = inbox.claim(&request(&key)).await.unwrap() else {
        panic!("claimed")
    };
    inbox
        .write_step(&first, "charge", StepWrite::Finished("\"not a number\""))
        .await
        .unwrap();
    inbox.release(&first).await.unwrap();
    let outcome = typed(&inbox, 3).await;
    assert!(
        matches!(
            &outcome,
            Err(OrderError::Idempotency(IdempotencyError::Step(StepError::Undecodable { label, .. }))) if label == "charge"
        ),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_step_outside_a_claim_is_refused() {
    let outcome = step("charge", async |_| Ok::<u32, IdempotencyError>(1)).await;
    assert!(matches!(
        outcome,
        Err(IdempotencyError::Step(StepError::OutsideClaim))
    ));
}

/// The key a step sends is the claim's `derive(label)`, the same whatever the token.
#[tokio::test]
async fn the_step_key_is_the_claims_derived_key() {
    #[idempotent(key = order, store = inbox)]
    async fn key_of(inbox: &MemoryStore, order: u64) -> Result<String, OrderError> {
        step("charge", async |s| Ok::<_, OrderError>(s.key().to_owned())).await
    }
    let inbox = MemoryStore::new();
    let key = retry_core::idempotency::encode_namespaced_key("key_of", None::<&str>, &9u64);
    let claim = Claim { key, token: 5 };
    assert_eq!(
        key_of(&inbox, 9).await.unwrap(),
        claim.derive("charge").as_str()
    );
}

/// Under `IdempotencyLayer` a handler's steps are journaled under the request's claim: the
/// replay of a finished request runs nothing, and each step's key is the claim's derived key.
#[cfg(feature = "tower")]
#[tokio::test]
async fn an_idempotency_layer_handler_runs_steps() {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use axum::routing::post;
    use axum::{Extension, Router};
    use retry_core::tower::IdempotencyLayer;
    use std::sync::Arc;
    use tower_service::Service as _;

    async fn book(Extension(services): Extension<Arc<Services>>) -> (StatusCode, String) {
        let charged = step("charge", async |s| {
            Ok::<_, IdempotencyError>(services.charges.send(s.key()))
        })
        .await;
        match charged {
            Ok(charge) => (StatusCode::CREATED, charge),
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        }
    }

    let services = Arc::new(Services::new());
    let mut app = Router::new()
        .route("/rides", post(book))
        .layer(Extension(Arc::clone(&services)))
        .layer(IdempotencyLayer::unauthenticated(MemoryStore::new()));
    let send = || {
        let request = Request::post("/rides").header("idempotency-key", "\"r-1\"");
        request.body(Body::empty()).unwrap()
    };
    for _ in 0..2 {
        let response = app.call(send()).await.unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
    }
    assert_eq!(services.charges.sends.load(Ordering::SeqCst), 1);
}

#[derive(Debug)]
#[allow(dead_code, reason = "read through Debug when a test fails")]
enum Flaky {
    Again,
    Idempotency(IdempotencyError),
}

impl From<IdempotencyError> for Flaky {
    fn from(e: IdempotencyError) -> Self {
        Flaky::Idempotency(e)
    }
}

impl From<retry_core::Elapsed> for Flaky {
    fn from(_: retry_core::Elapsed) -> Self {
        Flaky::Again
    }
}

impl retry_core::Classify for Flaky {
    fn classify(&self) -> retry_core::Decision {
        match self {
            Flaky::Again => retry_core::Decision::Retry,
            Flaky::Idempotency(_) => retry_core::Decision::Stop,
        }
    }
}

#[idempotent(key = order, store = inbox, lease = "1m")]
#[retryable(max = 3, base = "1ms", deadline = "20s", attempt_timeout = "5s")]
async fn retried(inbox: &MemoryStore, services: &Services, order: u64) -> Result<String, Flaky> {
    let charge = step("charge", async |s| {
        Ok::<_, Flaky>(services.charges.send(s.key()))
    })
    .await?;
    if services.mails.sends.fetch_add(1, Ordering::SeqCst) < 2 {
        return Err(Flaky::Again);
    }
    Ok(charge)
}

/// Retries inside one claim run the body again: the charge that finished in the first attempt
/// is answered from the journal, not refused as a second use of its label.
#[tokio::test]
async fn retries_inside_the_claim_answer_finished_steps_from_the_journal() {
    let inbox = MemoryStore::new();
    let services = Services::new();
    assert_eq!(retried(&inbox, &services, 1).await.unwrap(), "effect-1");
    assert_eq!(services.charges.sends.load(Ordering::SeqCst), 1);
    assert_eq!(services.mails.sends.load(Ordering::SeqCst), 3);
}
