//! `#[derive(Classify)]`: each kind of variant, generic enums, structs, and a derived error driving
//! `#[retryable]`. The expansion is checked under the strictest lints a user is likely to enable.
#![deny(warnings, clippy::pedantic)]

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use retry_core::{Classify, Decision, retryable};

/// Shaped like a `thiserror` enum: the derive reads `#[classify]` and ignores the rest.
#[derive(Debug, Classify)]
#[allow(dead_code)]
enum FetchError {
    /// Other attributes on a variant (docs, lints, `thiserror`'s `#[error(...)]`) are left
    /// alone, before or after `#[classify]`.
    #[allow(clippy::doc_markdown)]
    #[classify(retry)]
    #[rustfmt::skip]
    Busy,
    #[classify(stop)]
    NotFound { id: u64 },
    #[classify(delegate)]
    Io(io::Error),
    #[classify(retry_after = wait)]
    TooManyRequests { wait: Duration, body: String },
    #[classify(retry_after = 1)]
    Unavailable(u16, Option<Duration>),
}

impl fmt::Display for FetchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FetchError::Busy => f.write_str("the upstream is busy"),
            FetchError::NotFound { id } => write!(f, "quote {id} not found"),
            FetchError::Io(e) => write!(f, "i/o: {e}"),
            FetchError::TooManyRequests { wait, .. } => {
                write!(f, "too many requests, wait {wait:?}")
            }
            FetchError::Unavailable(status, _) => write!(f, "upstream answered {status}"),
        }
    }
}

impl std::error::Error for FetchError {}

#[test]
fn each_variant_is_classified_as_it_says() {
    assert_eq!(FetchError::Busy.classify(), Decision::Retry);
    assert_eq!(FetchError::NotFound { id: 7 }.classify(), Decision::Stop);
    let refused = FetchError::Io(io::ErrorKind::ConnectionRefused.into());
    assert_eq!(refused.classify(), Decision::Retry);
    let missing = FetchError::Io(io::ErrorKind::NotFound.into());
    assert_eq!(missing.classify(), Decision::Stop);
    let wait = Duration::from_secs(3);
    let limited = FetchError::TooManyRequests {
        wait,
        body: "slow down".to_owned(),
    };
    assert_eq!(limited.classify(), Decision::RetryAfter(wait));
    let with_header = FetchError::Unavailable(503, Some(Duration::from_millis(1500)));
    assert_eq!(
        with_header.classify(),
        Decision::RetryAfter(Duration::from_millis(1500))
    );
    let without_header = FetchError::Unavailable(503, None);
    assert_eq!(without_header.classify(), Decision::Retry);
}

/// A delegated field of a generic type gets a `Classify` bound; other parameters get none.
#[derive(Debug, Classify)]
enum Wrapped<E, Tag> {
    #[classify(delegate)]
    Inner(E),
    #[classify(stop)]
    Bad,
    #[classify(retry)]
    Tagged(Tag),
}

/// `Tag` needs no bound: a type that is not `Classify` is accepted.
struct NotClassify;

#[test]
fn a_generic_enum_delegates_to_its_parameter() {
    let inner: Wrapped<io::Error, NotClassify> =
        Wrapped::Inner(io::ErrorKind::ConnectionReset.into());
    assert_eq!(inner.classify(), Decision::Retry);
    let bad: Wrapped<io::Error, NotClassify> = Wrapped::Bad;
    assert_eq!(bad.classify(), Decision::Stop);
    let tagged: Wrapped<io::Error, NotClassify> = Wrapped::Tagged(NotClassify);
    assert_eq!(tagged.classify(), Decision::Retry);
    // Derived errors nest: the outer asks the inner, which asks the `io::Error`.
    let nested: Wrapped<Wrapped<io::Error, ()>, ()> =
        Wrapped::Inner(Wrapped::Inner(io::ErrorKind::NotFound.into()));
    assert_eq!(nested.classify(), Decision::Stop);
}

/// Lifetimes, bounds and where-clauses of the enum are kept.
#[derive(Debug, Classify)]
enum Borrowed<'a, E: fmt::Debug>
where
    E: Send,
{
    #[classify(delegate)]
    Inner(&'a E),
    #[classify(delegate)]
    Boxed(Box<E>),
}

#[test]
fn a_borrowed_generic_field_is_delegated_through_the_reference() {
    let error = io::Error::from(io::ErrorKind::TimedOut);
    assert_eq!(Borrowed::Inner(&error).classify(), Decision::Retry);
    let boxed: Borrowed<'_, io::Error> = Borrowed::Boxed(Box::new(io::ErrorKind::NotFound.into()));
    assert_eq!(boxed.classify(), Decision::Stop);
}

#[derive(Debug, Classify)]
#[classify(retry)]
struct Overloaded;

#[derive(Debug, Classify)]
#[classify(delegate)]
struct Transport(io::Error);

#[derive(Debug, Classify)]
#[classify(retry_after = after)]
struct RateLimited {
    after: Option<Duration>,
}

#[test]
fn a_struct_is_classified_by_its_container_attribute() {
    assert_eq!(Overloaded.classify(), Decision::Retry);
    assert_eq!(
        Transport(io::ErrorKind::BrokenPipe.into()).classify(),
        Decision::Retry
    );
    let after = Duration::from_secs(1);
    assert_eq!(
        RateLimited { after: Some(after) }.classify(),
        Decision::RetryAfter(after)
    );
    assert_eq!(RateLimited { after: None }.classify(), Decision::Retry);
}

/// An error with its own reason, as the HTTP status impls give.
#[derive(Debug)]
struct Status(u16);

impl Classify for Status {
    fn classify(&self) -> Decision {
        if self.0 >= 500 {
            Decision::Retry
        } else {
            Decision::Stop
        }
    }
    fn reason(&self) -> Option<String> {
        Some(format!("status {}", self.0))
    }
}

#[derive(Debug, Classify)]
enum CallError {
    #[classify(delegate)]
    Status(Status),
    #[classify(retry)]
    Busy,
}

#[derive(Debug, Classify)]
#[classify(delegate)]
struct Upstream {
    status: Status,
}

#[test]
fn a_delegated_field_gives_its_reason_too() {
    assert_eq!(CallError::Status(Status(404)).classify(), Decision::Stop);
    assert_eq!(
        CallError::Status(Status(404)).reason().as_deref(),
        Some("status 404")
    );
    assert_eq!(CallError::Busy.reason(), None);
    let upstream = Upstream {
        status: Status(503),
    };
    assert_eq!(upstream.classify(), Decision::Retry);
    assert_eq!(upstream.reason().as_deref(), Some("status 503"));
    // Without a delegated field, the trait's default reason stays.
    assert_eq!(FetchError::Busy.reason(), None);
}

#[derive(Debug, Classify)]
enum Never {}

#[test]
fn an_enum_without_variants_is_accepted() {
    fn classify_all<C: Classify>(errors: &[C]) -> Vec<Decision> {
        errors.iter().map(Classify::classify).collect()
    }
    assert!(classify_all::<Never>(&[]).is_empty());
}

/// A derived error that delegates to the `io::Error` it carries.
#[derive(Debug, Classify)]
enum ConnectError {
    #[classify(delegate)]
    Io(io::Error),
}

#[retryable(max = 3, base = "1ms")]
async fn connect(calls: &AtomicU32, kind: io::ErrorKind) -> Result<(), ConnectError> {
    calls.fetch_add(1, Ordering::SeqCst);
    Err(ConnectError::Io(kind.into()))
}

#[tokio::test(start_paused = true)]
async fn a_derived_retryable_error_is_retried_up_to_max() {
    let calls = AtomicU32::new(0);
    let result = connect(&calls, io::ErrorKind::ConnectionRefused).await;
    assert!(
        matches!(result, Err(ConnectError::Io(e)) if e.kind() == io::ErrorKind::ConnectionRefused)
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn a_derived_final_error_is_not_retried() {
    let calls = AtomicU32::new(0);
    let result = connect(&calls, io::ErrorKind::NotFound).await;
    assert!(matches!(result, Err(ConnectError::Io(e)) if e.kind() == io::ErrorKind::NotFound));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

/// `#[classify(reason = display)]`: the error's `Display` is its reason, so `Policy::retry` (which
/// has no other words for an error) and dead letters say what happened; a delegated field's own
/// reason comes first.
#[derive(Debug, Classify)]
#[classify(reason = display)]
enum Charge {
    #[classify(retry)]
    Busy,
    #[classify(stop)]
    Declined { code: u16 },
    #[classify(delegate)]
    Io(std::io::Error),
}

impl std::fmt::Display for Charge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Charge::Busy => f.write_str("the card network is busy"),
            Charge::Declined { code } => write!(f, "declined ({code})"),
            Charge::Io(e) => write!(f, "i/o: {e}"),
        }
    }
}

#[test]
fn reason_display_gives_the_display_unless_a_delegate_has_its_own() {
    assert_eq!(
        Charge::Busy.reason().as_deref(),
        Some("the card network is busy")
    );
    assert_eq!(
        Charge::Declined { code: 51 }.reason().as_deref(),
        Some("declined (51)")
    );
    let reset = Charge::Io(std::io::ErrorKind::ConnectionReset.into());
    assert_eq!(reset.classify(), retry_core::Decision::Retry);
    assert_eq!(
        reset.reason(),
        std::io::Error::from(std::io::ErrorKind::ConnectionReset)
            .reason()
            .or_else(|| Some(reset.to_string()))
    );
}
