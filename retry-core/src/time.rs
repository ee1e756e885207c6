//! Time as the library reads and writes it: an injectable clock, and at the edges (JSON, SQL
//! text columns) fixed-width UTC and RFC 3339 text, written and read with jiff. Inside, a time is
//! a `SystemTime`.

use jiff::civil::{self, DateTime};
use jiff::fmt::temporal::Pieces;
use jiff::{SignedDuration, tz::Offset};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where the stores read the time, so tests can move it.
///
/// ```
/// use retry_core::time::{Clock, SystemClock};
/// assert!(SystemClock.now() > std::time::UNIX_EPOCH);
/// ```
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time.
    fn now(&self) -> SystemTime;
}

/// The system's clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// A clock that moves only when told to: for tests of leases and retention.
///
/// ```
/// use retry_core::time::{Clock, ManualClock};
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let clock = ManualClock::new(UNIX_EPOCH + Duration::from_secs(100));
/// clock.advance(Duration::from_secs(5));
/// assert_eq!(clock.now(), UNIX_EPOCH + Duration::from_secs(105));
/// ```
#[derive(Debug)]
pub struct ManualClock(std::sync::Mutex<SystemTime>);

impl ManualClock {
    /// A clock showing `start`.
    pub fn new(start: SystemTime) -> Self {
        ManualClock(std::sync::Mutex::new(start))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let mut now = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *now += by;
    }

    /// Sets the clock.
    pub fn set(&self, to: SystemTime) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The latest time [`format_utc`] can write (9999-12-31T23:59:59Z).
// SQLite and the in-memory store compute leases in Rust; PostgreSQL in SQL, on the server's
// clock, with the same end.
const END_OF_TIME: Duration = Duration::from_secs(253_402_300_799);

/// `now + by`, ending at the latest time [`format_utc`] can write rather than overflowing: a
/// lease or retention that would end later ends there. What a store computes a lease's or a
/// retention's end with before writing it as [`format_utc`] text.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
///
/// use retry_core::time::{format_utc, later};
///
/// let start = UNIX_EPOCH + Duration::from_secs(1_786_000_000);
/// assert_eq!(later(start, Duration::from_secs(30)), start + Duration::from_secs(30));
/// // A retention of "forever" ends at the last time the text can hold, never overflows.
/// assert_eq!(format_utc(later(start, Duration::MAX)), "9999-12-31T23:59:59.000000Z");
/// ```
pub fn later(now: SystemTime, by: Duration) -> SystemTime {
    now.checked_add(by).map_or(UNIX_EPOCH + END_OF_TIME, |t| {
        t.min(UNIX_EPOCH + END_OF_TIME)
    })
}

/// The Unix epoch as a civil time in UTC. Instants go through civil times in UTC rather than
/// jiff's `Timestamp`, whose range ends 26 hours before 9999-12-31T23:59:59Z (room it keeps
/// for offsets), the end [`later`] clamps to: that end must read back as written.
pub(crate) const EPOCH: DateTime = civil::date(1970, 1, 1).at(0, 0, 0, 0);

/// `time` as a civil time in UTC, clamped to jiff's years -9999 to 9999.
pub(crate) fn utc_civil(time: SystemTime) -> DateTime {
    SignedDuration::system_until(UNIX_EPOCH, time)
        .and_then(|since| EPOCH.checked_add(since))
        .unwrap_or(if time < UNIX_EPOCH {
            DateTime::MIN
        } else {
            DateTime::MAX
        })
}

/// The instant of a civil time in UTC; `None` where `SystemTime` cannot hold it.
fn utc_instant(time: DateTime, offset: Offset) -> Option<SystemTime> {
    let since = time
        .duration_since(EPOCH)
        .checked_sub(SignedDuration::from_secs(offset.seconds().into()))?;
    if since.is_negative() {
        UNIX_EPOCH.checked_sub(since.unsigned_abs())
    } else {
        UNIX_EPOCH.checked_add(since.unsigned_abs())
    }
}

/// `time` in UTC within the years 0000 to 9999, the range the fixed-width form can write.
fn writable(time: SystemTime) -> DateTime {
    const FIRST: DateTime = civil::date(0, 1, 1).at(0, 0, 0, 0);
    utc_civil(time).max(FIRST)
}

/// `time` as `YYYY-MM-DDTHH:MM:SS.ffffffZ`: always 27 characters for years 0000 to 9999, so text
/// order is time order and SQL can compare them as strings. Microseconds; earlier or later
/// times are clamped to that range.
///
/// ```
/// use retry_core::time::format_utc;
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let t = UNIX_EPOCH + Duration::from_micros(1_755_569_463_000_123);
/// assert_eq!(format_utc(t), "2025-08-19T02:11:03.000123Z");
/// ```
pub fn format_utc(time: SystemTime) -> String {
    // A precision of 6 always writes six digits, cut (not rounded) from the nanoseconds.
    format!("{:.6}Z", writable(time))
}

/// `time` as RFC 3339 with an explicit offset, to the millisecond when that loses nothing:
/// `2026-08-19T02:11:03.123+00:00` (what dead letters carry). A time with a finer part keeps
/// it (six or nine digits), so it reads back as the same instant. Clamped to the years 0000 to
/// 9999 as [`format_utc`] is.
///
/// ```
/// use retry_core::time::format_rfc3339;
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let t = UNIX_EPOCH + Duration::from_millis(1_755_569_463_123);
/// assert_eq!(format_rfc3339(t), "2025-08-19T02:11:03.123+00:00");
/// let finer = t + Duration::from_nanos(4_500);
/// assert_eq!(format_rfc3339(finer), "2025-08-19T02:11:03.123004500+00:00");
/// ```
pub fn format_rfc3339(time: SystemTime) -> String {
    let time = writable(time);
    // Milliseconds are what the library writes (it reads its clocks to the millisecond, see
    // `to_millis`); a finer time written so would read back as another instant.
    match time.subsec_nanosecond() {
        n if n % 1_000_000 == 0 => format!("{time:.3}+00:00"),
        n if n % 1_000 == 0 => format!("{time:.6}+00:00"),
        _ => format!("{time:.9}+00:00"),
    }
}

/// `time` cut to the millisecond: the times the library takes from a clock for dead letters
/// and redrive records, so that they are written as milliseconds ([`format_rfc3339`]) and read
/// back as the same instant.
// Only dead letters take times from a clock to write.
#[cfg_attr(not(feature = "dlq"), allow(dead_code))]
pub(crate) fn to_millis(time: SystemTime) -> SystemTime {
    let cut = match time.duration_since(UNIX_EPOCH) {
        Ok(after) => after.subsec_nanos() % 1_000_000,
        // Before the epoch, cutting towards the past keeps the order of times.
        Err(before) => match before.duration().subsec_nanos() % 1_000_000 {
            0 => 0,
            n => 1_000_000 - n,
        },
    };
    // Only the earliest times `SystemTime` holds could not go back a millisecond.
    time.checked_sub(Duration::from_nanos(u64::from(cut)))
        .unwrap_or(time)
}

/// Reads an RFC 3339 timestamp with any offset (`Z`, `+09:00`, `-05:30`) and an optional
/// fraction (at most nine digits); `None` for text without an offset, or that is no time.
///
/// jiff's reading of RFC 9557, a superset of RFC 3339: it also takes what that grammar adds
/// (a space for the `T`, an offset without its colon, a time zone annotation in brackets).
/// A leap second (`:60`) reads as the second before it.
///
/// ```
/// use retry_core::time::{format_rfc3339, parse_rfc3339};
///
/// let tokyo = parse_rfc3339("2026-08-19T02:11:03+09:00").unwrap();
/// assert_eq!(format_rfc3339(tokyo), "2026-08-18T17:11:03.000+00:00");
/// assert!(parse_rfc3339("2026-08-19 02:11:03").is_none());
/// ```
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let pieces = Pieces::parse(text).ok()?;
    let time = pieces.date().to_datetime(pieces.time()?);
    utc_instant(time, pieces.to_numeric_offset()?)
}

/// Reads what [`format_utc`] wrote; `None` for anything else.
///
/// ```
/// use retry_core::time::{format_utc, parse_utc};
/// let now = std::time::SystemTime::now();
/// let text = format_utc(now);
/// assert_eq!(format_utc(parse_utc(&text).unwrap()), text);
/// assert!(parse_utc("yesterday").is_none());
/// ```
pub fn parse_utc(text: &str) -> Option<SystemTime> {
    // Only the fixed-width form: SQL compares these as text, so another spelling of the same
    // instant would sort wrong. Its shape is checked byte by byte; jiff reads the civil time.
    let civil = text.strip_suffix('Z')?;
    let fixed = civil.len() == 26
        && civil.bytes().enumerate().all(|(i, b)| match i {
            4 | 7 => b == b'-',
            10 => b == b'T',
            13 | 16 => b == b':',
            19 => b == b'.',
            _ => b.is_ascii_digit(),
        });
    if !fixed {
        return None;
    }
    utc_instant(civil.parse().ok()?, Offset::UTC)
}

/// `#[serde(with = "retry_core::time::rfc3339")]`: a `SystemTime` as RFC 3339 text, written by
/// [`format_rfc3339`] (UTC, to the millisecond when that loses nothing) and read by
/// [`parse_rfc3339`] (any offset, normalised to the instant). Dead letters and redrive records
/// carry their times so; [`option`](rfc3339::option) is the same for an `Option<SystemTime>`.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use std::time::SystemTime;
///
/// #[derive(Serialize, Deserialize)]
/// struct Seen {
///     #[serde(with = "retry_core::time::rfc3339")]
///     at: SystemTime,
/// }
///
/// let seen: Seen = serde_json::from_str(r#"{"at":"2026-08-19T02:11:03+09:00"}"#).unwrap();
/// let text = serde_json::to_string(&seen).unwrap();
/// assert_eq!(text, r#"{"at":"2026-08-18T17:11:03.000+00:00"}"#);
/// assert!(serde_json::from_str::<Seen>(r#"{"at":"2026-08-19 02:11:03"}"#).is_err());
/// ```
pub mod rfc3339 {
    use serde::{Deserialize, Deserializer, Serializer, de::Error as _};
    use std::time::SystemTime;

    /// Writes `time` as [`format_rfc3339`](super::format_rfc3339) does.
    ///
    /// # Errors
    ///
    /// Only the serializer's own.
    pub fn serialize<S: Serializer>(time: &SystemTime, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&super::format_rfc3339(*time))
    }

    /// Reads RFC 3339 text with any offset, as [`parse_rfc3339`](super::parse_rfc3339) does.
    ///
    /// # Errors
    ///
    /// Text that is not an RFC 3339 time with an offset, or not text.
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<SystemTime, D::Error> {
        let text = String::deserialize(deserializer)?;
        super::parse_rfc3339(&text).ok_or_else(|| {
            D::Error::custom(format_args!(
                "{text:?} is not an RFC 3339 time with an offset"
            ))
        })
    }

    /// `#[serde(with = "retry_core::time::rfc3339::option")]`: an `Option<SystemTime>`, `None`
    /// as `null` (with `default` and `skip_serializing_if`, as a missing field).
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use std::time::SystemTime;
    ///
    /// #[derive(Serialize, Deserialize)]
    /// struct Entry {
    ///     #[serde(default, skip_serializing_if = "Option::is_none", with = "retry_core::time::rfc3339::option")]
    ///     finished_at: Option<SystemTime>,
    /// }
    ///
    /// let entry: Entry = serde_json::from_str("{}").unwrap();
    /// assert_eq!(entry.finished_at, None);
    /// let entry: Entry = serde_json::from_str(r#"{"finished_at":"2026-08-19T02:11:03Z"}"#).unwrap();
    /// assert_eq!(serde_json::to_string(&entry).unwrap(), r#"{"finished_at":"2026-08-19T02:11:03.000+00:00"}"#);
    /// ```
    pub mod option {
        use serde::{Deserialize, Deserializer, Serializer};
        use std::time::SystemTime;

        /// Writes `Some(time)` as [`rfc3339::serialize`](super::serialize) does, `None` as
        /// `null`.
        ///
        /// # Errors
        ///
        /// Only the serializer's own.
        pub fn serialize<S: Serializer>(
            time: &Option<SystemTime>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            match time {
                Some(time) => super::serialize(time, serializer),
                None => serializer.serialize_none(),
            }
        }

        /// Reads `null` as `None`, and text as [`rfc3339::deserialize`](super::deserialize)
        /// does.
        ///
        /// # Errors
        ///
        /// Text that is not an RFC 3339 time with an offset.
        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<SystemTime>, D::Error> {
            /// One time, read through the parent module.
            #[derive(Deserialize)]
            struct Time(#[serde(with = "super")] SystemTime);
            Ok(Option::<Time>::deserialize(deserializer)?.map(|Time(time)| time))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_fixed_width_and_sort_as_time_does() {
        let times = [
            0u64,
            1,
            999_999,
            86_400_000_000,
            1_755_569_463_000_123,
            4_102_444_800_000_000,
        ];
        let texts: Vec<_> = times
            .iter()
            .map(|&us| format_utc(UNIX_EPOCH + Duration::from_micros(us)))
            .collect();
        assert!(texts.iter().all(|t| t.len() == 27), "{texts:?}");
        assert!(texts.windows(2).all(|w| w[0] < w[1]), "{texts:?}");
        assert_eq!(texts[0], "1970-01-01T00:00:00.000000Z");
        for (us, text) in times.iter().zip(&texts) {
            assert_eq!(
                parse_utc(text),
                Some(UNIX_EPOCH + Duration::from_micros(*us))
            );
        }
    }

    #[test]
    fn times_up_to_the_year_9999_read_back_as_written() {
        // `later` clamps to the end of 9999: a retention that long must read back, not look
        // corrupt (nanoseconds in a `u64` stop in 2554).
        for text in [
            "2554-07-21T23:34:33.709551Z",
            "2554-07-21T23:34:33.709552Z",
            "3000-01-01T00:00:00.000001Z",
            "9999-12-31T23:59:59.999999Z",
        ] {
            let time = parse_utc(text).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(format_utc(time), text);
        }
        assert_eq!(
            parse_utc(&format_utc(later(UNIX_EPOCH, Duration::MAX))).map(format_utc),
            Some("9999-12-31T23:59:59.000000Z".to_owned())
        );
        let far = parse_rfc3339("3000-01-01T00:00:00.5+01:00").map(format_utc);
        assert_eq!(far.as_deref(), Some("2999-12-31T23:00:00.500000Z"));
        let early = parse_utc("1969-12-31T23:59:59.999999Z");
        assert_eq!(early, Some(UNIX_EPOCH - Duration::from_micros(1)));
    }

    #[test]
    fn rfc3339_text_is_to_the_millisecond_when_that_loses_nothing_and_reads_back_exactly() {
        let t = UNIX_EPOCH + Duration::from_millis(1_755_569_463_123);
        // What the library wrote before times were typed, byte for byte.
        assert_eq!(format_rfc3339(t), "2025-08-19T02:11:03.123+00:00");
        assert_eq!(format_rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000+00:00");
        for (nanos, text) in [
            (1_000, "2025-08-19T02:11:03.123001+00:00"),
            (1, "2025-08-19T02:11:03.123000001+00:00"),
            (999_999, "2025-08-19T02:11:03.123999999+00:00"),
        ] {
            let finer = t + Duration::from_nanos(nanos);
            assert_eq!(format_rfc3339(finer), text);
            assert_eq!(parse_rfc3339(text), Some(finer));
            assert_eq!(to_millis(finer), t);
        }
        assert_eq!(to_millis(t), t);
        let before = UNIX_EPOCH - Duration::from_nanos(1);
        assert_eq!(to_millis(before), UNIX_EPOCH - Duration::from_millis(1));
        assert_eq!(
            to_millis(UNIX_EPOCH - Duration::from_millis(2)),
            UNIX_EPOCH - Duration::from_millis(2)
        );
    }

    #[test]
    fn serde_writes_utc_and_reads_any_offset() {
        #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
        struct Times {
            #[serde(with = "rfc3339")]
            at: SystemTime,
            #[serde(
                default,
                skip_serializing_if = "Option::is_none",
                with = "rfc3339::option"
            )]
            until: Option<SystemTime>,
        }
        let read: Times = serde_json::from_str(
            r#"{"at": "2026-08-19T02:11:03+09:00", "until": "2026-08-19T02:11:03.5-05:00"}"#,
        )
        .unwrap();
        assert_eq!(
            serde_json::to_string(&read).unwrap(),
            r#"{"at":"2026-08-18T17:11:03.000+00:00","until":"2026-08-19T07:11:03.500+00:00"}"#
        );
        let none: Times = serde_json::from_str(r#"{"at": "2026-08-19T02:11:03Z"}"#).unwrap();
        assert_eq!(none.until, None);
        assert_eq!(
            serde_json::to_string(&none).unwrap(),
            r#"{"at":"2026-08-19T02:11:03.000+00:00"}"#
        );
        for bad in [
            r#"{"at": "2026-08-19T02:11:03"}"#,
            r#"{"at": 1}"#,
            r#"{"at": "2026-08-19T02:11:03Z", "until": "soon"}"#,
        ] {
            assert!(serde_json::from_str::<Times>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn malformed_timestamps_are_rejected() {
        for bad in [
            "",
            "2025-02-30T00:00:00.000000Z",
            "2025-08-19 02:11:03.000000Z",
            "2025-08-19T24:00:00.000000Z",
            "+025-08-19T02:11:03.000000Z",
            // The same instant in other spellings: they would sort wrong as text.
            "2025-08-19T02:11:03.000000+00:00",
            "2025-08-19T02:11:03.000Z",
            "2025-08-19T02:11:03.000000z",
            "2025-08-19t02:11:03.000000Z",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad}");
        }
    }
}
