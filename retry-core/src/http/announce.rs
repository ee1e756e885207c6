//! The `Caller-Retries` field's value: the structured-field boolean `?1` ("my caller retries
//! this request"), with the parameters `attempt` and `max` saying which attempt of that caller's
//! retries this is (RFC 9651 §3.1.2: parameters in any order, unknown ones ignored).

use std::fmt;
use std::num::NonZeroU32;

use ::http::{HeaderMap, HeaderName, HeaderValue};
use ::sfv::visitor::ParameterVisitor;
use ::sfv::{BareItemFromInput, GenericBareItem, KeyRef};

/// The header marking a request whose caller retries it.
pub const CALLER_RETRIES: HeaderName = HeaderName::from_static("caller-retries");

/// The bare marker: the structured-field boolean "true", without the attempt's numbers (see
/// [`Announcement`] for the value the library's clients send).
pub const CALLER_RETRIES_VALUE: HeaderValue = HeaderValue::from_static("?1");

/// What a `Caller-Retries` field says: the caller retries this request, and, when it said so,
/// which attempt this is and how many it may make.
///
/// The library's clients send `Caller-Retries: ?1;attempt=2;max=5` from inside a retry (the
/// serialisation of RFC 9651, which writes no space after `;`; `?1; attempt=2; max=5` is the
/// same field), and a service that runs inside its caller's retry sends the numbers it
/// received on, so the service at the end of a chain sees which attempt of the one retrying
/// layer each arrival is. A field without the parameters (the bare `?1` older senders write)
/// still marks the request; it just announces nothing.
///
/// ```
/// use retry_core::http::Announcement;
///
/// let announced = Announcement::parse(b"?1; max=5; attempt=2").unwrap();
/// assert_eq!((announced.attempt(), announced.max()), (Some(2), Some(5)));
/// assert!(announced.is_retry());
/// assert_eq!(announced.to_string(), "?1;attempt=2;max=5");
///
/// let bare = Announcement::parse(b"?1").unwrap();
/// assert_eq!((bare.attempt(), bare.max()), (None, None));
/// assert_eq!(Announcement::parse(b"?0"), None, "false: the caller does not retry");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Announcement {
    attempt: Option<NonZeroU32>,
    max: Option<NonZeroU32>,
}

impl Announcement {
    /// The bare marker, `?1`: the caller retries, and says no more.
    ///
    /// ```
    /// assert_eq!(retry_core::http::Announcement::BARE.to_string(), "?1");
    /// ```
    pub const BARE: Announcement = Announcement {
        attempt: None,
        max: None,
    };

    /// Attempt `attempt` of at most `max`; `0` leaves a number out.
    ///
    /// ```
    /// use retry_core::http::Announcement;
    ///
    /// assert_eq!(Announcement::new(1, 4).to_string(), "?1;attempt=1;max=4");
    /// assert_eq!(Announcement::new(0, 0), Announcement::BARE);
    /// ```
    pub const fn new(attempt: u32, max: u32) -> Announcement {
        Announcement {
            attempt: NonZeroU32::new(attempt),
            max: NonZeroU32::new(max),
        }
    }

    /// Which attempt of its caller's retries the request is (1 for the first), if announced.
    ///
    /// ```
    /// assert_eq!(retry_core::http::Announcement::new(3, 4).attempt(), Some(3));
    /// ```
    pub fn attempt(&self) -> Option<u32> {
        self.attempt.map(NonZeroU32::get)
    }

    /// How many attempts its caller's retries may make, if announced.
    ///
    /// ```
    /// assert_eq!(retry_core::http::Announcement::new(3, 4).max(), Some(4));
    /// ```
    pub fn max(&self) -> Option<u32> {
        self.max.map(NonZeroU32::get)
    }

    /// Whether the request says it is a retry: an announced attempt after the first.
    ///
    /// ```
    /// use retry_core::http::Announcement;
    ///
    /// assert!(!Announcement::new(1, 4).is_retry());
    /// assert!(Announcement::new(2, 4).is_retry());
    /// assert!(!Announcement::BARE.is_retry());
    /// ```
    pub fn is_retry(&self) -> bool {
        self.attempt().is_some_and(|attempt| attempt > 1)
    }

    /// Reads a `Caller-Retries` value (an HTTP header or gRPC metadata): `None` when it does not
    /// say that the caller retries.
    ///
    /// Never an error: a value that is not a valid structured field but still begins with the
    /// marker (`?1;attempt=two`) marks the request and announces nothing, as does an `attempt`
    /// or `max` that is not an integer from 1 to 2³²−1. Unknown parameters are ignored, and
    /// of a parameter given twice the last counts (RFC 9651 §4.2.3.2).
    ///
    /// ```
    /// use retry_core::http::Announcement;
    ///
    /// assert_eq!(Announcement::parse(b"?1;attempt=2;max=5;hop=\"a\""), Some(Announcement::new(2, 5)));
    /// assert_eq!(Announcement::parse(b"?1;attempt=two"), Some(Announcement::BARE));
    /// assert_eq!(Announcement::parse(b"?1;attempt=0;max=4"), Some(Announcement::new(0, 4)));
    /// assert_eq!(Announcement::parse(b"yes"), None);
    /// ```
    pub fn parse(value: &[u8]) -> Option<Announcement> {
        let parsed =
            ::sfv::Parser::new(value).parse_item_with_visitor(|bare: BareItemFromInput<'_>| {
                match bare {
                    GenericBareItem::Boolean(true) => Ok(Parameters::default()),
                    _ => Err(NotMarked),
                }
            });
        match parsed {
            Ok(announced) => Some(announced),
            Err(_) => begins_with_marker(value).then_some(Announcement::BARE),
        }
    }

    /// The `Caller-Retries` field of `headers`, if it marks the request (see [`parse`](Self::parse)).
    ///
    /// ```
    /// use http::HeaderMap;
    /// use retry_core::http::{Announcement, CALLER_RETRIES};
    ///
    /// let mut headers = HeaderMap::new();
    /// assert_eq!(Announcement::of(&headers), None);
    /// headers.insert(CALLER_RETRIES, "?1;attempt=2;max=4".parse().unwrap());
    /// assert_eq!(Announcement::of(&headers), Some(Announcement::new(2, 4)));
    /// ```
    pub fn of(headers: &HeaderMap) -> Option<Announcement> {
        headers
            .get(CALLER_RETRIES)
            .and_then(|value| Announcement::parse(value.as_bytes()))
    }

    /// The header value: `?1`, with `;attempt=N` and `;max=N` when known.
    ///
    /// ```
    /// use retry_core::http::Announcement;
    ///
    /// assert_eq!(Announcement::new(2, 5).header_value(), "?1;attempt=2;max=5");
    /// ```
    pub fn header_value(&self) -> HeaderValue {
        if *self == Announcement::BARE {
            return CALLER_RETRIES_VALUE;
        }
        // Digits, `?`, `;` and `=` only: always a valid header value.
        HeaderValue::try_from(self.to_string()).unwrap_or(CALLER_RETRIES_VALUE)
    }
}

/// The structured-field serialisation (RFC 9651 §4.1.1.2): `?1;attempt=2;max=5`.
impl fmt::Display for Announcement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("?1")?;
        if let Some(attempt) = self.attempt {
            write!(f, ";attempt={attempt}")?;
        }
        if let Some(max) = self.max {
            write!(f, ";max={max}")?;
        }
        Ok(())
    }
}

/// Whether a value that is not a valid field still starts with the marker: the rule that keeps
/// retries in one layer errs on the side of fewer retries.
fn begins_with_marker(value: &[u8]) -> bool {
    match value.trim_ascii().strip_prefix(b"?1") {
        Some(rest) => matches!(rest.first(), None | Some(b';' | b' ' | b'\t')),
        None => false,
    }
}

/// The item was not the boolean "true".
#[derive(Debug)]
struct NotMarked;

impl fmt::Display for NotMarked {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Caller-Retries is not ?1")
    }
}

impl std::error::Error for NotMarked {}

/// Collects `attempt` and `max` while the item's parameters are parsed.
#[derive(Default)]
struct Parameters(Announcement);

impl<'de> ParameterVisitor<'de> for Parameters {
    type Out = Announcement;
    type Error = NotMarked;

    fn parameter(
        &mut self,
        key: &'de KeyRef,
        value: BareItemFromInput<'de>,
    ) -> Result<(), NotMarked> {
        // The last of a repeated key counts, a wrongly typed one as absent.
        let number = match value {
            GenericBareItem::Integer(n) => {
                u32::try_from(i64::from(n)).ok().and_then(NonZeroU32::new)
            }
            _ => None,
        };
        match key.as_str() {
            "attempt" => self.0.attempt = number,
            "max" => self.0.max = number,
            _ => {}
        }
        Ok(())
    }

    fn finish(self) -> Result<Announcement, NotMarked> {
        Ok(self.0)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn the_bare_marker_and_its_parameters_in_any_order() {
        for (value, expected) in [
            ("?1", Some(Announcement::BARE)),
            (" ?1 ", Some(Announcement::BARE)),
            ("?1;attempt=2;max=5", Some(Announcement::new(2, 5))),
            ("?1; attempt=2; max=5", Some(Announcement::new(2, 5))),
            ("?1;max=5;attempt=2", Some(Announcement::new(2, 5))),
            ("?1;attempt=3", Some(Announcement::new(3, 0))),
            ("?1;max=4", Some(Announcement::new(0, 4))),
            (
                "?1;via=gw;attempt=2;x=:AQID:;max=5;y=1.5",
                Some(Announcement::new(2, 5)),
            ),
            (
                "?1;attempt=1;attempt=4;max=4",
                Some(Announcement::new(4, 4)),
            ),
            ("?1;attempt;max=4", Some(Announcement::new(0, 4))),
            ("?1;attempt=\"2\";max=4", Some(Announcement::new(0, 4))),
            ("?1;attempt=-1;max=99999999999", Some(Announcement::BARE)),
            ("?1;attempt=2.0", Some(Announcement::BARE)),
            ("?0", None),
            ("?0;attempt=2", None),
            ("1", None),
            ("true", None),
            ("", None),
            ("?10", None),
        ] {
            assert_eq!(Announcement::parse(value.as_bytes()), expected, "{value:?}");
        }
    }

    #[test]
    fn a_malformed_value_that_begins_with_the_marker_marks_and_announces_nothing() {
        for value in [
            "?1;Attempt=2",
            "?1;attempt=2;;max=5",
            "?1;attempt=2,max=5",
            "?1 ;attempt=2",
            "?1;attempt=2;max=5;",
        ] {
            assert_eq!(
                Announcement::parse(value.as_bytes()),
                Some(Announcement::BARE),
                "{value:?}"
            );
        }
    }

    #[test]
    fn what_is_written_is_read_back() {
        for (attempt, max) in [(1, 1), (2, 5), (0, 3), (7, 0), (u32::MAX, u32::MAX)] {
            let announced = Announcement::new(attempt, max);
            let value = announced.header_value();
            assert_eq!(Announcement::parse(value.as_bytes()), Some(announced));
        }
        assert_eq!(Announcement::BARE.header_value(), CALLER_RETRIES_VALUE);
    }

    proptest! {
        #[test]
        fn any_bytes_are_read_without_panicking(value in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = Announcement::parse(&value);
        }

        #[test]
        fn any_numbers_round_trip(attempt in any::<u32>(), max in any::<u32>()) {
            let announced = Announcement::new(attempt, max);
            prop_assert_eq!(Announcement::parse(announced.to_string().as_bytes()), Some(announced));
        }
    }
}
