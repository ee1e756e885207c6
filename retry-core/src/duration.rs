//! Durations as text, in the one grammar of the library: `"250ms"`, `"1s"`, `"2m"`, `"1h30m"`,
//! `"30d"`.
//!
//! `#[retryable(base = "250ms")]` and `#[idempotent(retention = "30d")]` read it at compile
//! time, a [`Policy`](crate::Policy) read from configuration (feature `serde`) reads it at run
//! time, and the `retry-dlq` command reads `--timeout 500ms` with it: the same string means the
//! same duration, and the same mistake gets the same message, in all three.
//!
//! Parts `<whole number><unit>` with units `d`, `h`, `m`, `s`, `ms`, `us`, `ns`, largest first,
//! each at most once, nothing between them. No fractions (`"1500ms"`, not `"1.5s"`), no spaces,
//! no signs; a day is exactly 24 hours. [`format()`] writes the canonical form (each non-zero
//! part, largest first; `"0s"` for zero) that [`parse`] reads back exactly.
//!
//! ```
//! use retry_core::duration;
//! use std::time::Duration;
//!
//! assert_eq!(duration::parse("1h30m"), Ok(Duration::from_secs(5400)));
//! assert_eq!(duration::format(Duration::from_millis(1500)).to_string(), "1s500ms");
//! assert_eq!(
//!     duration::parse("30 seconds").unwrap_err().to_string(),
//!     "invalid duration \"30 seconds\": `30` has no unit; write \"30s\", \"30ms\", \"30m\", \"30h\" or \"30d\""
//! );
//! ```
//!
//! With feature `serde`, [`serde`][duration-serde] reads and writes a `Duration` field of your
//! own configuration the same way.
#![doc = ""]
#![cfg_attr(feature = "serde", doc = "[duration-serde]: mod@self::serde")]
#![cfg_attr(
    not(feature = "serde"),
    doc = "[duration-serde]: https://docs.rs/retry-core/latest/retry_core/duration/serde/index.html"
)]

pub use retry_duration::{DurationError, Formatted, format, parse};

/// `#[serde(with = "retry_core::duration::serde")]` on a `Duration` field (and
/// [`option`](crate::duration::serde::option) on an `Option<Duration>`): written and read as a duration string of
/// this grammar. Feature `serde`.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use std::time::Duration;
///
/// #[derive(Debug, PartialEq, Serialize, Deserialize)]
/// struct Upstream {
///     url: String,
///     #[serde(with = "retry_core::duration::serde")]
///     connect_timeout: Duration,
///     #[serde(default, with = "retry_core::duration::serde::option")]
///     idle_timeout: Option<Duration>,
/// }
///
/// let read: Upstream =
///     serde_json::from_str(r#"{"url": "http://quotes", "connect_timeout": "1s500ms"}"#).unwrap();
/// assert_eq!(read.connect_timeout, Duration::from_millis(1500));
/// assert_eq!(read.idle_timeout, None);
/// assert_eq!(
///     serde_json::to_string(&read).unwrap(),
///     r#"{"url":"http://quotes","connect_timeout":"1s500ms","idle_timeout":null}"#
/// );
///
/// let wrong = serde_json::from_str::<Upstream>(r#"{"url": "x", "connect_timeout": "1.5s"}"#);
/// assert!(wrong.unwrap_err().to_string().contains("fractions are not supported"));
/// ```
#[cfg(feature = "serde")]
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
pub mod serde {
    use std::fmt;
    use std::time::Duration;

    use ::serde::{Deserialize, Deserializer, Serialize, Serializer, de};

    /// Writes `duration` in the canonical form ([`format()`](super::format)).
    pub fn serialize<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&super::format(*duration))
    }

    /// Reads a duration string; an error says what is wrong with it, as the attribute would.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
        deserializer.deserialize_str(TextVisitor)
    }

    /// An `Option<Duration>` as an optional duration string (`null`, or a missing field with
    /// `#[serde(default)]`, is `None`).
    pub mod option {
        use std::time::Duration;

        use ::serde::{Deserialize, Deserializer, Serializer};

        use super::Text;

        /// Writes `Some` as its canonical duration string, `None` as the format's none.
        pub fn serialize<S: Serializer>(
            duration: &Option<Duration>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            match duration {
                Some(duration) => serializer.serialize_some(&Text(*duration)),
                None => serializer.serialize_none(),
            }
        }

        /// Reads an optional duration string.
        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<Duration>, D::Error> {
            Ok(Option::<Text>::deserialize(deserializer)?.map(|text| text.0))
        }
    }

    /// A `Duration` as its text, for the places a type is needed (inside `Option`).
    pub(crate) struct Text(pub(crate) Duration);

    impl Serialize for Text {
        fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
            serialize(&self.0, serializer)
        }
    }

    impl<'de> Deserialize<'de> for Text {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserialize(deserializer).map(Text)
        }
    }

    struct TextVisitor;

    impl de::Visitor<'_> for TextVisitor {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration string such as \"250ms\", \"1s\", \"2m\", \"1h30m\" or \"30d\"")
        }

        fn visit_str<E: de::Error>(self, text: &str) -> Result<Duration, E> {
            super::parse(text).map_err(E::custom)
        }
    }
}
