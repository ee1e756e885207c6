//! What must never leak: a request's payload (`original`) into logs, whatever happens to the
//! call, and an unredacted payload into a dead letter. One test, one subscriber: tracing caches
//! per-callsite interest process-wide, so scoped subscribers in parallel tests would miss events.

use std::fmt;
use std::sync::{Arc, Mutex};

use retry_core::dlq::{
    DeadLetter, DeadLetterSink, DeadLetterStore, DlqFailed, JsonlLine, JsonlReader, JsonlSink,
    MemoryDeadLetters, Outcome, Redrive, assume_idempotent,
};
use retry_core::{Classify, Decision, retryable};
use serde::{Deserialize, Serialize};
use tracing_subscriber::layer::SubscriberExt;

#[path = "common/tempdir.rs"]
mod tempdir;

/// A card number: in no log line, at any level, and only masked in a dead letter.
const SECRET: &str = "4111-1111-1111-1111";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Charge {
    order: String,
    card: String,
    cents: u64,
}

#[derive(Debug)]
enum ChargeError {
    Declined(String),
    Unavailable,
    NotParked,
}

impl fmt::Display for ChargeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChargeError::Declined(order) => write!(f, "card declined for {order}"),
            ChargeError::Unavailable => f.write_str("503 Service Unavailable"),
            ChargeError::NotParked => f.write_str("not parked"),
        }
    }
}

impl Classify for ChargeError {
    fn classify(&self) -> Decision {
        match self {
            ChargeError::Unavailable => Decision::Retry,
            _ => Decision::Stop,
        }
    }
}

impl From<DlqFailed> for ChargeError {
    fn from(_: DlqFailed) -> Self {
        ChargeError::NotParked
    }
}

fn mask_card(mut original: serde_json::Value) -> serde_json::Value {
    if let Some(card) = original.get_mut("card") {
        *card = serde_json::Value::String("****".into());
    }
    original
}

#[retryable(max = 3, base = "1ms", dlq(sink = letters, id = charge.order.clone(), original = &charge, redact = mask_card))]
async fn charge_unavailable(letters: &JsonlSink, charge: Charge) -> Result<(), ChargeError> {
    let _ = &charge;
    Err(ChargeError::Unavailable)
}

#[retryable(max = 3, base = "1ms", dlq(sink = letters, id = charge.order.clone(), original = &charge, redact = mask_card))]
async fn charge_declined(letters: &MemoryDeadLetters, charge: Charge) -> Result<(), ChargeError> {
    Err(ChargeError::Declined(charge.order.clone()))
}

/// Every event and span field, at every level.
#[derive(Clone, Default)]
struct Everything(Arc<Mutex<Vec<(tracing::Level, String)>>>);

struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        self.0.push_str(&format!("{}={:?} ", field.name(), value));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Everything {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        self.0
            .lock()
            .unwrap()
            .push((*event.metadata().level(), fields.0));
    }

    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = Fields(String::new());
        attrs.record(&mut fields);
        self.0
            .lock()
            .unwrap()
            .push((*attrs.metadata().level(), fields.0));
    }
}

#[test]
fn payloads_never_reach_the_logs_and_are_redacted_before_they_are_written() {
    let seen = Everything::default();
    let subscriber = tracing_subscriber::registry().with(seen.clone());
    let _default = tracing::subscriber::set_default(subscriber);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    let dir = tempdir::TempDir::new("security");
    let path = dir.file("dlq.jsonl");

    runtime.block_on(async {
        let charge = |order: &str| Charge {
            order: order.into(),
            card: SECRET.into(),
            cents: 995,
        };
        // Exhausted (WARN give-up), parked in a file.
        let sink = JsonlSink::open(&path).unwrap();
        assert!(charge_unavailable(&sink, charge("O-1")).await.is_err());
        // Moved into a store, as `retry-dlq import` does.
        let letters = MemoryDeadLetters::new();
        for line in JsonlReader::open(&path).unwrap() {
            let JsonlLine::Letter(letter) = line.unwrap() else {
                panic!("only letters in the file")
            };
            letters.park(&letter).await.unwrap();
        }
        // Stopped at once (a data letter).
        let memory = MemoryDeadLetters::new();
        assert!(charge_declined(&memory, charge("O-2")).await.is_err());
        // A redrive refuses the redacted letter: it is not the payload (INFO summary).
        let refused = Redrive::new(&letters, "ops")
            .run_letters(|_| assume_idempotent(async { Ok::<(), ChargeError>(()) }))
            .await
            .unwrap();
        assert!(
            matches!(&refused.letters[..], [(_, Outcome::Skipped(why))] if why.contains("redacted")),
            "{:?}",
            refused.letters
        );
        // The same letter, unflagged: a redrive that fails again (WARN stop), then one that
        // succeeds.
        let unflagged = MemoryDeadLetters::new();
        let masked = DeadLetterStore::get(&letters, "O-1").await.unwrap().unwrap();
        unflagged
            .park(&DeadLetter {
                redacted: false,
                ..masked
            })
            .await
            .unwrap();
        let failing = Redrive::new(&unflagged, "ops")
            .stop_after_failures(1)
            .run_letters(|_| assume_idempotent(async { Err::<(), _>(ChargeError::Unavailable) }))
            .await
            .unwrap();
        assert_eq!(failing.record.failed, 1);
        let fine = Redrive::new(&unflagged, "ops")
            .run_letters(|_| assume_idempotent(async { Ok::<(), ChargeError>(()) }))
            .await
            .unwrap();
        assert_eq!(fine.record.succeeded, 1);
        assert_eq!(memory.stats().await.unwrap().pending, 1);
        // Parking the same letter again directly goes through no log either.
        let letter = memory.get("O-2").await.unwrap().unwrap();
        sink.park(&letter).await.unwrap();
    });
    drop(_default);

    let events = seen.0.lock().unwrap();
    assert!(
        events
            .iter()
            .any(|(level, _)| *level == tracing::Level::WARN),
        "the scenario logged its give-ups: {events:?}"
    );
    assert!(
        events.iter().any(|(_, text)| text.contains("O-1")),
        "ids are logged where useful: {events:?}"
    );
    for (level, text) in events.iter() {
        assert!(
            !text.contains(SECRET) && !text.contains("4111-"),
            "a payload reached the logs at {level}: {text}"
        );
    }
    // The file holds the masked card only.
    let written = std::fs::read_to_string(&path).unwrap();
    assert!(written.contains("****"), "{written}");
    assert!(
        !written.contains(SECRET),
        "unredacted payload written: {written}"
    );
}
