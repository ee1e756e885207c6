//! Redriving into an HTTP receiver that deduplicates on `Idempotency-Key` (feature `reqwest`).

use std::future::Future;

use super::{AssumeIdempotent, DeadLetter, assume_idempotent};
use crate::http::{IdempotencyKey, InvalidIdempotencyKey};
use crate::reqwest::{HttpError, RequestBuilderExt};

/// Sends `letter` again through `request` (a POST to the receiver, with whatever credentials
/// the original requests carried: the receiver keeps keys per client): its `original` as the
/// JSON body, and `Idempotency-Key` set to the key the original call recorded
/// ([`DeadLetter::idempotency_key`]), else to its `msg_id` (which `dlq(id = ...)` should make
/// the key the original requests carried), for
/// [`Redrive::run_letters`](super::Redrive::run_letters). The receiver's deduplication on that
/// key is what makes the resend safe, which is why the future is declared
/// [`assume_idempotent`] (with that key, so the redrive's key check sees it): point it only at
/// such a receiver (`tower::IdempotencyLayer`, or any server following the IETF
/// `Idempotency-Key` draft).
///
/// ```no_run
/// use retry_core::dlq::{http::post_letter, MemoryDeadLetters, Redrive};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let letters = MemoryDeadLetters::new();
/// let client = retry_core::reqwest::client_builder().build()?;
/// let url = "http://payments.internal/payments";
/// let report = Redrive::new(&letters, "alice")
///     .target(url)
///     .run_letters(|letter| post_letter(client.post(url).bearer_auth("shop-42"), letter))
///     .await?;
/// println!("{} redriven", report.record.succeeded);
/// # Ok(())
/// # }
/// ```
pub fn post_letter(
    request: ::reqwest::RequestBuilder,
    letter: &DeadLetter,
) -> AssumeIdempotent<
    impl Future<Output = Result<::reqwest::Response, PostLetterError>> + Send + use<>,
> {
    let key = key_of(letter);
    let request = key
        .parse::<IdempotencyKey>()
        .map(|key| {
            request
                .idempotency_key(&key)
                .header(::http::header::CONTENT_TYPE, "application/json")
                .body(letter.original.to_string())
        })
        .map_err(PostLetterError::Key);
    assume_idempotent(async move { request?.send_checked().await.map_err(PostLetterError::Http) })
        .with_key(key)
}

/// The key a resend of `letter` carries: the one its original call claimed, when recorded.
fn key_of(letter: &DeadLetter) -> &str {
    letter.idempotency_key.as_deref().unwrap_or(&letter.msg_id)
}

/// Why [`post_letter`] did not get a 2xx.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostLetterError {
    /// The letter's key (its recorded `idempotency_key`, else its `msg_id`) cannot be an
    /// `Idempotency-Key`; nothing was sent.
    /// (A leaf of this crate, so it is said in the message, not kept as a source: a redrive
    /// records only the message of its target's error.)
    #[error("the letter's key is not sendable as Idempotency-Key: {0}")]
    Key(InvalidIdempotencyKey),
    /// The request failed, or the receiver answered with an error status.
    #[error(transparent)]
    Http(HttpError),
}
