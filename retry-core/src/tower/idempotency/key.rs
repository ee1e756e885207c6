//! The `Idempotency-Key` of a request: the one field it may carry, read as a key.

use ::http::header::{HeaderMap, HeaderValue};

use super::problem::Problem;
use crate::http::{IDEMPOTENCY_KEY, parse_key_header};

/// The `Idempotency-Key` fields of a request.
pub(super) enum KeyField<'a> {
    /// None: the request passes through, or gets `400` where a key is required.
    Absent,
    /// Exactly one, to be parsed.
    One(&'a HeaderValue),
    /// More than one: malformed, even when they agree.
    Several,
}

impl<'a> KeyField<'a> {
    pub(super) fn of(headers: &'a HeaderMap) -> Self {
        let mut fields = headers.get_all(IDEMPOTENCY_KEY).iter();
        match (fields.next(), fields.next()) {
            (None, _) => KeyField::Absent,
            (Some(value), None) => KeyField::One(value),
            (Some(_), Some(_)) => KeyField::Several,
        }
    }

    /// The key, at most `max` bytes, or the `400` that refuses it.
    pub(super) fn key(&self, max: usize) -> Result<String, Problem> {
        let key = match self {
            KeyField::Absent => return Err(Problem::MissingKey),
            KeyField::Several => {
                return Err(Problem::MalformedKey(
                    "more than one Idempotency-Key field was sent",
                ));
            }
            KeyField::One(value) => parse_key_header(value).map_err(Problem::MalformedKey)?,
        };
        if key.len() > max {
            return Err(Problem::KeyTooLong {
                len: key.len(),
                max,
            });
        }
        Ok(key)
    }
}
