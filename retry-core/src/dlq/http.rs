//! Redriving into an HTTP receiver that deduplicates on `Idempotency-Key` (feature `reqwest`).

use std::future::Future;

use super::{AssumeIdempotent, DeadLetter, assume_idempotent};
use crate::http::{IdempotencyKey, InvalidIdempotencyKey, status_text};
use crate::reqwest::{HttpError, RequestBuilderExt, redacted_url};

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
/// Only a 2xx of the URL the letter was sent to acknowledges it; anything else, a redirect
/// included, is [`PostLetterError::NotAcknowledged`]. Build the client without redirects, as
/// below: one that follows them carries the letter, its key and its credentials wherever the
/// receiver points (a `307` to another host), and the answer from there still counts for
/// nothing.
///
/// ```no_run
/// use retry_core::dlq::{http::post_letter, MemoryDeadLetters, Redrive};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let letters = MemoryDeadLetters::new();
/// let client = retry_core::reqwest::client_builder()
///     .redirect(reqwest::redirect::Policy::none())
///     .build()?;
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
    assume_idempotent(async move { acknowledged(request?).await }).with_key(key)
}

/// Sends `request` and takes only a 2xx of the URL it was sent to as the letter's
/// acknowledgement.
async fn acknowledged(
    request: ::reqwest::RequestBuilder,
) -> Result<::reqwest::Response, PostLetterError> {
    let (client, request) = request.build_split();
    let sent_to = request.as_ref().ok().map(|r| r.url().clone());
    let request = ::reqwest::RequestBuilder::from_parts(
        client,
        request.map_err(|e| PostLetterError::Http(HttpError::unbuilt(e)))?,
    );
    match request.send_checked().await {
        Ok(response)
            if response.status().is_success() && Some(response.url()) == sent_to.as_ref() =>
        {
            Ok(response)
        }
        Ok(response) => Err(PostLetterError::NotAcknowledged(NotAcknowledged {
            url: redacted_url(response.url()),
            status: response.status(),
            location: response
                .headers()
                .get(::http::header::LOCATION)
                .map(|location| redacted_location(response.url(), location)),
            redirected_from: sent_to
                .filter(|sent_to| sent_to != response.url())
                .map(|sent_to| redacted_url(&sent_to)),
            title: None,
        })),
        Err(e) => match (e.status(), &sent_to) {
            (Some(status), Some(sent_to)) => {
                Err(PostLetterError::NotAcknowledged(NotAcknowledged {
                    url: redacted_url(sent_to),
                    status,
                    location: None,
                    redirected_from: None,
                    title: problem_title(e.body_excerpt()),
                }))
            }
            _ => Err(PostLetterError::Http(e)),
        },
    }
}

/// The key a resend of `letter` carries: the one its original call claimed, when recorded.
fn key_of(letter: &DeadLetter) -> &str {
    letter.idempotency_key.as_deref().unwrap_or(&letter.msg_id)
}

/// How much of a receiver's problem `title` a refusal keeps.
const TITLE_LIMIT: usize = 120;

/// Why [`post_letter`] did not get a 2xx.
///
/// Its text is what a redrive keeps in the letter's history and prints, so it holds no body
/// and no credentials: URLs without userinfo, query or fragment ([`redacted_url`]), and of the
/// receiver's answer only its status, a redirect's `Location`, and the `title` of an RFC 9457
/// problem (meant for people, the same for every occurrence), cut to 120 characters.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PostLetterError {
    /// The letter's key (its recorded `idempotency_key`, else its `msg_id`) cannot be an
    /// `Idempotency-Key`; nothing was sent.
    /// (A leaf of this crate, so it is said in the message, not kept as a source: a redrive
    /// records only the message of its target's error.)
    #[error("the letter's key is not sendable as Idempotency-Key: {0}")]
    Key(InvalidIdempotencyKey),
    /// The request got no answer (or could not be built).
    #[error(transparent)]
    Http(HttpError),
    /// The receiver answered, but not with a 2xx of the URL the letter was sent to: the letter
    /// was not taken.
    #[error(transparent)]
    NotAcknowledged(NotAcknowledged),
}

/// An answer that does not acknowledge a letter: any status but a 2xx, or a 2xx from another
/// URL than the one the letter was sent to (the client followed a redirect; a redrive's own
/// client follows none, since a `302` to a login page would otherwise count as delivered and a
/// `307` would carry the letter, its key and its credentials to another host).
///
/// ```
/// use retry_core::dlq::http::NotAcknowledged;
///
/// let refusal = NotAcknowledged {
///     url: "http://127.0.0.1:8080/deposits".into(),
///     status: http::StatusCode::FOUND,
///     location: Some("http://127.0.0.1:8080/login".into()),
///     redirected_from: None,
///     title: None,
/// };
/// assert_eq!(
///     refusal.to_string(),
///     "POST http://127.0.0.1:8080/deposits answered 302 Found, Location: \
///      http://127.0.0.1:8080/login (redirects are not followed: only a 2xx acknowledges a letter)"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotAcknowledged {
    /// Where the answer came from, as [`redacted_url`] shows it.
    pub url: String,
    /// The answer's status.
    pub status: ::http::StatusCode,
    /// The answer's `Location`, resolved against `url` and redacted.
    pub location: Option<String>,
    /// The URL the letter was sent to, when the client followed a redirect away from it.
    pub redirected_from: Option<String>,
    /// The `title` of an `application/problem+json` answer.
    pub title: Option<String>,
}

impl std::fmt::Display for NotAcknowledged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "POST {} answered {}", self.url, status_text(self.status))?;
        if let Some(from) = &self.redirected_from {
            write!(f, " after a redirect from {from}")?;
        }
        if let Some(title) = &self.title {
            write!(f, ": {title:?}")?;
        }
        if let Some(location) = &self.location {
            write!(f, ", Location: {location}")?;
        }
        if self.status.is_redirection() || self.redirected_from.is_some() {
            f.write_str(" (redirects are not followed: only a 2xx acknowledges a letter)")?;
        }
        Ok(())
    }
}

impl std::error::Error for NotAcknowledged {}

/// A `Location` as a refusal shows it: resolved against the answer's URL, then redacted.
fn redacted_location(base: &::reqwest::Url, location: &::http::HeaderValue) -> String {
    match location.to_str().ok().map(|text| base.join(text)) {
        Some(Ok(url)) => redacted_url(&url),
        _ => "(not a URL)".to_owned(),
    }
}

/// The `title` of a problem body (RFC 9457), cut to [`TITLE_LIMIT`] characters; nothing else of
/// a body is kept.
fn problem_title(body: &str) -> Option<String> {
    let problem: serde_json::Value = serde_json::from_str(body).ok()?;
    let title = problem.get("title")?.as_str()?;
    Some(title.chars().take(TITLE_LIMIT).collect())
}
