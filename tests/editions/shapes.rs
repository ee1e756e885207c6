//! Every shape of function the macros accept, built by one crate per edition
//! (`tests/editions/e2018`, `e2021`, `e2024` all compile this file): the generated code must
//! compile in the user's edition, not the macro crate's. Written in the 2018 subset of Rust.

use std::fmt::Display;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use retry_core::idempotency::{IdempotencyError, MemoryStore};
use retry_core::{idempotent, retryable, Classify};

#[derive(Debug, Clone, PartialEq, Classify)]
enum FetchError {
    #[classify(retry)]
    Busy(u32),
    #[classify(stop)]
    Fatal,
    #[classify(stop)]
    Idempotency(String),
}

impl From<IdempotencyError> for FetchError {
    fn from(e: IdempotencyError) -> Self {
        FetchError::Idempotency(e.to_string())
    }
}

/// Fails with `Busy(n)` on call n until call `succeed_on`.
#[derive(Default)]
struct Client {
    calls: AtomicU32,
}

impl Client {
    fn call(&self, succeed_on: u32) -> Result<u32, FetchError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        if n >= succeed_on {
            Ok(n)
        } else {
            Err(FetchError::Busy(n))
        }
    }

    /// `call`, with an `attempt` event. Only the tracing tests use it: tests run in parallel
    /// threads, and a callsite first reached on a thread without a subscriber can be cached as
    /// uninteresting for every thread (tracing's interest cache), losing the events.
    fn traced_call(&self, succeed_on: u32) -> Result<u32, FetchError> {
        tracing::info!("attempt");
        self.call(succeed_on)
    }

    fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }

    #[retryable(max = 3, base = "1ms", jitter = "none")]
    async fn by_ref(&self, id: u64) -> Result<u64, FetchError> {
        self.call(3)?;
        Ok(id)
    }

    #[retryable(max = 3, base = "1ms", jitter = "none")]
    async fn borrowed_out<'a>(&self, name: &'a str) -> Result<&'a str, FetchError> {
        self.call(2)?;
        Ok(name)
    }
}

#[derive(Default)]
struct Counter {
    bumps: u32,
}

impl Counter {
    #[retryable(max = 3, base = "1ms", jitter = "none")]
    async fn bump(&mut self, until: u32) -> Result<u32, FetchError> {
        self.bumps += 1;
        if self.bumps < until {
            Err(FetchError::Busy(self.bumps))
        } else {
            Ok(self.bumps)
        }
    }
}

#[retryable(max = 3, base = "1ms", jitter = "none")]
async fn fetch(client: &Client, id: u64) -> Result<u64, FetchError> {
    client.call(3)?;
    Ok(id)
}

#[retryable(max = 3, base = "1ms", jitter = "none")]
async fn fatal(client: &Client) -> Result<u64, FetchError> {
    client.call(u32::MAX).map_err(|_| FetchError::Fatal)?;
    Ok(0)
}

#[retryable(max = 3, base = "1ms", jitter = "none")]
async fn longest<'a, 'b, T>(client: &'b Client, a: &'a T, b: &'a str) -> Result<&'a str, FetchError>
where
    T: AsRef<str> + ?Sized,
{
    client.call(2)?;
    let a = a.as_ref();
    Ok(if a.len() >= b.len() { a } else { b })
}

#[retryable(max = 3, base = "1ms", jitter = "none")]
async fn generic<T: Clone + Display + Send>(
    client: &Client,
    value: T,
) -> Result<String, FetchError> {
    client.call(2)?;
    Ok(value.to_string())
}

#[retryable(max = 3, base = "1ms", jitter = "none")]
async fn argument_impl(client: &Client, shown: impl Display + Clone) -> Result<String, FetchError> {
    client.call(2)?;
    Ok(format!("<{}>", shown))
}

#[retryable(max = 3, base = "1ms", jitter = "none")]
async fn opaque_ok(client: &Client) -> Result<impl Display, FetchError> {
    let n = client.call(2)?;
    Ok(n)
}

#[retryable(max = 3, base = "1ms", jitter = "none")]
async fn parameter_attributes(
    client: &Client,
    #[cfg(any())] removed: std::convert::Infallible,
    #[allow(unused_variables)] unused: u32,
    #[cfg(not(any()))] kept: u32,
) -> Result<u32, FetchError> {
    client.call(2)?;
    Ok(kept)
}

// `#[idempotent]` above `#[retryable]`: one claim, the retries inside it.
#[idempotent(key = id, store = inbox)]
#[retryable(
    max = 3,
    base = "1ms",
    jitter = "none",
    deadline = "5s",
    attempt_timeout = "1s"
)]
async fn claim_then_retry(
    inbox: &MemoryStore,
    client: &Client,
    id: u64,
) -> Result<u64, FetchError> {
    client.call(3)?;
    Ok(id * 10)
}

// `#[retryable]` above `#[idempotent]`: a claim per attempt.
#[retryable(max = 3, base = "1ms", jitter = "none")]
#[idempotent(key = id, store = inbox, on_err = "release")]
async fn retry_then_claim(
    inbox: &MemoryStore,
    client: &Client,
    id: u64,
) -> Result<u64, FetchError> {
    client.call(3)?;
    Ok(id * 100)
}

impl From<retry_core::Elapsed> for FetchError {
    fn from(_: retry_core::Elapsed) -> Self {
        FetchError::Busy(0)
    }
}

/// Audits a payment; retried on its own.
#[retryable(max = 3, base = "1ms", jitter = "none")]
async fn audit(auditor: Arc<Client>) -> Result<u32, FetchError> {
    auditor.call(3)
}

/// Hands the audit to a task of its own: an independent layer, at compile time as at run
/// time, so its retries are neither rejected nor collapsed into this one's.
#[retryable(max = 2, base = "1ms", jitter = "none")]
async fn settle_and_audit(client: &Client, auditor: Arc<Client>) -> Result<u32, FetchError> {
    let audited = tokio::spawn(async move { audit(auditor).await });
    let audited = audited.await.map_err(|_| FetchError::Fatal)??;
    client.call(1)?;
    Ok(audited)
}

/// A client that keeps its retry configuration in fields, named by `&self` in the attribute:
/// `policy`, `budget` and `dlq(sink = ..)` borrow what they name, as `store = ..` does.
struct Configured {
    client: Client,
    policy: retry_core::Policy,
    budget: retry_core::RetryBudget,
    letters: retry_core::dlq::MemoryDeadLetters,
}

impl From<retry_core::dlq::DlqFailed> for FetchError {
    fn from(_: retry_core::dlq::DlqFailed) -> Self {
        FetchError::Fatal
    }
}

impl Configured {
    #[retryable(
        policy = self.policy,
        budget = self.budget,
        dlq(sink = self.letters, id = format!("order-{}", id), original = id)
    )]
    async fn charge(&self, id: u64) -> Result<u32, FetchError> {
        self.client.call(u32::MAX)
    }
}

#[tokio::test(start_paused = true)]
async fn policy_budget_and_sink_borrow_fields_of_self() {
    let configured = Configured {
        client: Client::default(),
        policy: retry_core::Policy::new()
            .max_attempts(2)
            .base(std::time::Duration::from_millis(1)),
        budget: retry_core::RetryBudget::new(std::time::Duration::from_secs(10), 10, 0.1),
        letters: retry_core::dlq::MemoryDeadLetters::new(),
    };
    assert_eq!(configured.charge(7).await, Err(FetchError::Busy(2)));
    assert_eq!(configured.client.calls(), 2);
    let parked = retry_core::dlq::DeadLetterStore::get(&configured.letters, "order-7")
        .await
        .unwrap()
        .expect("the give-up is parked in the sink the field holds");
    assert_eq!(parked.attempts, 2);
}

#[tokio::test(start_paused = true)]
async fn a_spawned_retry_is_an_independent_layer() {
    let (client, auditor) = (Client::default(), Arc::new(Client::default()));
    assert_eq!(settle_and_audit(&client, auditor.clone()).await, Ok(3));
    assert_eq!(
        auditor.calls(),
        3,
        "the spawned audit made all its attempts"
    );
    assert_eq!(client.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn borrowing_function() {
    let client = Client::default();
    assert_eq!(fetch(&client, 7).await, Ok(7));
    assert_eq!(client.calls(), 3);
    let client = Client::default();
    assert_eq!(fatal(&client).await, Err(FetchError::Fatal));
    assert_eq!(client.calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn methods_by_ref_and_by_mut() {
    let client = Client::default();
    assert_eq!(client.by_ref(5).await, Ok(5));
    assert_eq!(client.borrowed_out("name").await, Ok("name"));
    let mut counter = Counter::default();
    assert_eq!(counter.bump(3).await, Ok(3));
    assert_eq!(counter.bumps, 3);
}

#[tokio::test(start_paused = true)]
async fn lifetimes_generics_and_argument_impl() {
    let owned = String::from("longer");
    assert_eq!(
        longest(&Client::default(), owned.as_str(), "short").await,
        Ok("longer")
    );
    assert_eq!(
        generic(&Client::default(), 42_u8).await,
        Ok("42".to_string())
    );
    assert_eq!(
        argument_impl(&Client::default(), "x").await,
        Ok("<x>".to_string())
    );
}

#[tokio::test(start_paused = true)]
async fn opaque_ok_type() {
    let shown = opaque_ok(&Client::default()).await.map(|n| n.to_string());
    assert_eq!(shown, Ok("2".to_string()));
}

#[tokio::test(start_paused = true)]
async fn parameter_attributes_are_kept() {
    assert_eq!(parameter_attributes(&Client::default(), 1, 9).await, Ok(9));
}

#[tokio::test(start_paused = true)]
async fn idempotent_in_both_orders() {
    let inbox = MemoryStore::new();
    let client = Client::default();
    assert_eq!(claim_then_retry(&inbox, &client, 1).await, Ok(10));
    assert_eq!(client.calls(), 3);
    // A duplicate gets the stored response without running the body.
    assert_eq!(claim_then_retry(&inbox, &client, 1).await, Ok(10));
    assert_eq!(client.calls(), 3);

    let client = Client::default();
    assert_eq!(retry_then_claim(&inbox, &client, 2).await, Ok(200));
    assert_eq!(client.calls(), 3);
    assert_eq!(retry_then_claim(&inbox, &client, 2).await, Ok(200));
    assert_eq!(client.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn derived_classify() {
    assert_eq!(FetchError::Busy(1).classify(), retry_core::Decision::Retry);
    assert_eq!(FetchError::Fatal.classify(), retry_core::Decision::Stop);
}

// ---- #[tracing::instrument], in both orders ----

#[retryable(max = 3, base = "1ms", jitter = "none")]
#[tracing::instrument(skip(client))]
async fn retry_above_instrument(client: &Client, id: u64) -> Result<u64, FetchError> {
    client.traced_call(3)?;
    Ok(id)
}

#[tracing::instrument(skip(client), fields(extra = 1))]
#[retryable(max = 3, base = "1ms", jitter = "none")]
async fn instrument_above_retry(client: &Client, id: u64) -> Result<u64, FetchError> {
    client.traced_call(3)?;
    Ok(id)
}

impl std::fmt::Display for FetchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self)
    }
}

// `err` and `ret` events: one per failed attempt, and the value returned, inside the one span.
#[retryable(max = 3, base = "1ms", jitter = "none")]
#[tracing::instrument(skip(client), err, ret, level = "debug")]
async fn instrument_err_ret(client: &Client, id: u64) -> Result<u64, FetchError> {
    client.traced_call(3)?;
    Ok(id)
}

impl Client {
    #[retryable(max = 3, base = "1ms", jitter = "none")]
    #[tracing::instrument(skip(self))]
    async fn instrumented_method(&self, id: u64) -> Result<u64, FetchError> {
        self.traced_call(3)?;
        Ok(id)
    }
}

impl Counter {
    #[tracing::instrument(skip(self))]
    #[retryable(max = 3, base = "1ms", jitter = "none")]
    async fn instrumented_bump(&mut self, until: u32) -> Result<u32, FetchError> {
        self.bumps += 1;
        tracing::info!("attempt");
        if self.bumps < until {
            Err(FetchError::Busy(self.bumps))
        } else {
            Ok(self.bumps)
        }
    }
}

/// An event's message and the name of the innermost span it was inside.
type EventIn = (String, Option<String>);

/// What a subscriber saw: spans created (by name) and every event.
#[derive(Default, Clone)]
struct Seen {
    created: Arc<Mutex<Vec<String>>>,
    events: Arc<Mutex<Vec<EventIn>>>,
}

impl<S> tracing_subscriber::Layer<S> for Seen
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        self.created
            .lock()
            .unwrap()
            .push(attrs.metadata().name().to_string());
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: tracing_subscriber::layer::Context<'_, S>) {
        let span = ctx.event_span(event).map(|s| s.name().to_string());
        let mut message = String::new();
        struct Message<'a>(&'a mut String);
        impl tracing::field::Visit for Message<'_> {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    *self.0 = format!("{:?}", value);
                }
            }
        }
        event.record(&mut Message(&mut message));
        self.events.lock().unwrap().push((message, span));
    }
}

impl Seen {
    /// Installs a subscriber recording into `self` for the current thread.
    fn install(&self) -> tracing::subscriber::DefaultGuard {
        use tracing_subscriber::layer::SubscriberExt;
        tracing::subscriber::set_default(tracing_subscriber::registry().with(self.clone()))
    }

    /// Every `attempt` event was inside one span named `name`, created once.
    fn assert_one_span_around(&self, name: &str, attempts: usize) {
        let created = self.created.lock().unwrap().clone();
        assert_eq!(
            created.iter().filter(|c| *c == name).count(),
            1,
            "spans created: {:?}",
            created
        );
        let events = self.events.lock().unwrap().clone();
        let attempts_seen: Vec<_> = events.iter().filter(|(m, _)| m == "attempt").collect();
        assert_eq!(attempts_seen.len(), attempts, "events: {:?}", events);
        for (_, span) in &attempts_seen {
            assert_eq!(span.as_deref(), Some(name), "events: {:?}", events);
        }
        // retry-core's own events (the waits between attempts) are inside the span too.
        for (message, span) in &events {
            assert_eq!(
                span.as_deref(),
                Some(name),
                "{:?} outside the span",
                message
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn instrument_below_retryable_spans_every_attempt() {
    let seen = Seen::default();
    let _guard = seen.install();
    assert_eq!(retry_above_instrument(&Client::default(), 4).await, Ok(4));
    seen.assert_one_span_around("retry_above_instrument", 3);
}

#[tokio::test(start_paused = true)]
async fn instrument_above_retryable_spans_every_attempt() {
    let seen = Seen::default();
    let _guard = seen.install();
    assert_eq!(instrument_above_retry(&Client::default(), 4).await, Ok(4));
    seen.assert_one_span_around("instrument_above_retry", 3);
}

#[tokio::test(start_paused = true)]
async fn instrument_err_and_ret_events_are_inside_the_span() {
    let seen = Seen::default();
    let _guard = seen.install();
    assert_eq!(instrument_err_ret(&Client::default(), 4).await, Ok(4));
    seen.assert_one_span_around("instrument_err_ret", 3);
    // Two failed attempts (`err`) and the result (`ret`) besides the attempts' own events.
    let events = seen.events.lock().unwrap().clone();
    assert!(events.len() >= 6, "events: {:?}", events);
}

fn assert_send<T: Send>(_: &T) {}

#[test]
fn instrumented_futures_are_send() {
    let client = Client::default();
    assert_send(&retry_above_instrument(&client, 1));
    assert_send(&instrument_above_retry(&client, 1));
    assert_send(&fetch(&client, 1));
    let mut counter = Counter::default();
    assert_send(&counter.instrumented_bump(1));
}

#[tokio::test(start_paused = true)]
async fn instrumented_methods_span_every_attempt() {
    let seen = Seen::default();
    let _guard = seen.install();
    assert_eq!(Client::default().instrumented_method(4).await, Ok(4));
    seen.assert_one_span_around("instrumented_method", 3);

    let seen = Seen::default();
    let _guard = seen.install();
    let mut counter = Counter::default();
    assert_eq!(counter.instrumented_bump(3).await, Ok(3));
    seen.assert_one_span_around("instrumented_bump", 3);
}

// ---- #[async_trait] ----

#[async_trait::async_trait]
trait Fetch {
    async fn fetch_one(&self, id: u64) -> Result<u64, FetchError>;
    async fn bump_one(&mut self) -> Result<u32, FetchError>;
}

#[async_trait::async_trait]
trait Deposit {
    async fn once(&self, inbox: &MemoryStore, id: u64) -> Result<u64, FetchError>;
    async fn claimed_retries(&self, inbox: &MemoryStore, id: u64) -> Result<u64, FetchError>;
    async fn retried_claims(&self, inbox: &MemoryStore, id: u64) -> Result<u64, FetchError>;
}

#[async_trait::async_trait]
impl Deposit for Client {
    #[idempotent(key = id, store = inbox)]
    async fn once(&self, inbox: &MemoryStore, id: u64) -> Result<u64, FetchError> {
        self.call(1)?;
        Ok(id)
    }

    #[idempotent(key = id, store = inbox)]
    #[retryable(
        max = 3,
        base = "1ms",
        jitter = "none",
        deadline = "5s",
        attempt_timeout = "1s"
    )]
    async fn claimed_retries(&self, inbox: &MemoryStore, id: u64) -> Result<u64, FetchError> {
        self.call(3)?;
        Ok(id)
    }

    #[retryable(max = 3, base = "1ms", jitter = "none")]
    #[idempotent(key = id, store = inbox, on_err = "release")]
    async fn retried_claims(&self, inbox: &MemoryStore, id: u64) -> Result<u64, FetchError> {
        self.call(3)?;
        Ok(id)
    }
}

#[async_trait::async_trait]
impl Fetch for Client {
    #[retryable(max = 3, base = "1ms", jitter = "none")]
    async fn fetch_one(&self, id: u64) -> Result<u64, FetchError> {
        self.call(3)?;
        Ok(id)
    }

    async fn bump_one(&mut self) -> Result<u32, FetchError> {
        Ok(0)
    }
}

#[async_trait::async_trait]
impl Fetch for Counter {
    async fn fetch_one(&self, id: u64) -> Result<u64, FetchError> {
        Ok(id)
    }

    #[retryable(max = 3, base = "1ms", jitter = "none")]
    async fn bump_one(&mut self) -> Result<u32, FetchError> {
        self.bumps += 1;
        if self.bumps < 3 {
            Err(FetchError::Busy(self.bumps))
        } else {
            Ok(self.bumps)
        }
    }
}

#[tokio::test(start_paused = true)]
async fn async_trait_methods() {
    let client = Client::default();
    let dynamic: &dyn Fetch = &client;
    assert_eq!(dynamic.fetch_one(3).await, Ok(3));
    assert_eq!(client.calls(), 3);
    let mut counter = Counter::default();
    assert_eq!(counter.bump_one().await, Ok(3));

    let inbox = MemoryStore::new();
    let client = Client::default();
    let dynamic: &dyn Deposit = &client;
    assert_eq!(dynamic.once(&inbox, 1).await, Ok(1));
    assert_eq!(dynamic.once(&inbox, 1).await, Ok(1));
    assert_eq!(client.calls(), 1);
    let client = Client::default();
    assert_eq!(client.claimed_retries(&inbox, 2).await, Ok(2));
    assert_eq!(client.calls(), 3);
    let client = Client::default();
    assert_eq!(client.retried_claims(&inbox, 3).await, Ok(3));
    assert_eq!(client.calls(), 3);
}
