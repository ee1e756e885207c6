//! Parsing `Retry-After` (RFC 9110 §10.2.3).
//!
//! ```text
//! Retry-After   = HTTP-date / delay-seconds
//! delay-seconds = 1*DIGIT
//! HTTP-date     = IMF-fixdate / obs-date        ; RFC 9110 §5.6.7
//! ```
//!
//! Decisions this parser makes where the RFCs leave room (all documented on
//! [`parse_retry_after`]):
//!
//! * **Cap.** A wait longer than 2^31 seconds (about 68 years) is an error,
//!   [`RetryAfterError::TooLarge`], not a silent clamp. 2^31 is the value RFC 9111 §1.2.2 tells
//!   caches to use for delta-seconds they cannot represent; a server asking for more is broken,
//!   and a caller can tell that apart from a genuine long wait.
//! * **Leap second.** `23:59:60` is accepted (RFC 9110's `time-of-day` comment allows it) and read
//!   as `23:59:59`, because [`SystemTime`] counts POSIX seconds, which have no leap seconds. A
//!   second of `60` at any other time of day is rejected.
//! * **Weekday.** The day name must be a valid name of the right form (`Sun` in IMF-fixdate and
//!   asctime, `Sunday` in the RFC 850 form) but need not match the date: it is redundant, RFC 9110
//!   gives recipients no rule for a mismatch, and the day, month and year say which instant was
//!   meant. Rejecting would turn a server's harmless slip into "no `Retry-After` at all".
//! * **Case.** Day names, month names and `GMT` are case-sensitive, as in the RFC's grammar;
//!   `sun`, `NOV` or `gmt` are rejected with a reason saying so.

// The grammar is read here and the calendar is jiff's. httpdate (1.0.3) reads the three forms
// but would break four of the decisions above: it rejects a weekday that does not match the
// date, years before 1970 and `23:59:60`, and reads two-digit years in a fixed 1970-2069
// window rather than RFC 9110's "not more than 50 years after now"; nor does it say what is
// wrong with a date it rejects.
use crate::time::{EPOCH, unix_nanos, utc_civil};
use jiff::civil::{Date, DateTime, Time};
use std::fmt;
use std::time::{Duration, SystemTime};

/// The longest wait accepted, in seconds: 2^31 (RFC 9111 §1.2.2), about 68 years.
const MAX_SECONDS: u64 = 1 << 31;

/// How many characters of an offending value an error keeps.
const MAX_SHOWN_CHARS: usize = 64;

const NANOS_PER_SEC: i128 = 1_000_000_000;

const SHORT_DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];
const LONG_DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// Why a `Retry-After` value was rejected by [`parse_retry_after`].
///
/// Every variant that concerns a particular value keeps it (with surrounding whitespace trimmed,
/// cut to its first 64 characters followed by `…` when longer) so that the message can show it.
/// The [`Display`](fmt::Display) messages are lower-case sentences meant for logs:
///
/// ```
/// use std::time::SystemTime;
/// use retry_core::http::{parse_retry_after, RetryAfterError};
///
/// let err = parse_retry_after("1.5", SystemTime::now()).unwrap_err();
/// assert_eq!(err, RetryAfterError::Fractional { value: "1.5".into() });
/// assert_eq!(
///     err.to_string(),
///     "Retry-After `1.5` is fractional; only whole seconds are allowed",
/// );
///
/// match parse_retry_after("Sun, 06 Nov 1994 08:49:37 UTC", SystemTime::now()) {
///     Err(RetryAfterError::InvalidDate { reason, .. }) => {
///         assert_eq!(reason, "the time zone must be `GMT`");
///     }
///     other => panic!("unexpected {other:?}"),
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RetryAfterError {
    /// The value is empty or only whitespace.
    #[error("Retry-After is empty; expected a whole number of seconds or an HTTP-date")]
    Empty,
    /// The value is neither `delay-seconds` nor anything that looks like an HTTP-date, e.g.
    /// `abc`, `1e9`, `+5`, `0x10`, `1 2` or non-ASCII digits.
    #[error(
        "Retry-After `{}` is neither a whole number of seconds nor an HTTP-date",
        Escaped(.value)
    )]
    NotANumberOrDate {
        /// The offending value (trimmed, cut to 64 characters).
        value: String,
    },
    /// The value is a negative number, e.g. `-1`.
    #[error(
        "Retry-After `{}` is negative; only zero or more whole seconds are allowed",
        Escaped(.value)
    )]
    Negative {
        /// The offending value (trimmed, cut to 64 characters).
        value: String,
    },
    /// The value is a number with a fractional part, e.g. `1.5`; only whole seconds are allowed.
    #[error(
        "Retry-After `{}` is fractional; only whole seconds are allowed",
        Escaped(.value)
    )]
    Fractional {
        /// The offending value (trimmed, cut to 64 characters).
        value: String,
    },
    /// The value asks for a wait longer than 2^31 seconds (about 68 years, the cap of RFC 9111
    /// §1.2.2), either as a number of seconds or as a date that far ahead of `now`.
    #[error(
        "Retry-After `{}` asks for a wait longer than 2^31 seconds (about 68 years)",
        Escaped(.value)
    )]
    TooLarge {
        /// The offending value (trimmed, cut to 64 characters).
        value: String,
    },
    /// The value starts like an HTTP-date (with a day name) but is not a valid one.
    #[error("Retry-After `{}` is not a valid HTTP-date: {reason}", Escaped(.value))]
    InvalidDate {
        /// The offending value (trimmed, cut to 64 characters).
        value: String,
        /// What is wrong with it, e.g. "unknown month name".
        reason: &'static str,
    },
}

/// Shows a value with control characters escaped, so that an error message stays on one line
/// whatever the peer sent.
struct Escaped<'a>(&'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// The value kept in an error: its first 64 characters, followed by `…` when it was longer.
fn shown(value: &str) -> String {
    match value.char_indices().nth(MAX_SHOWN_CHARS) {
        None => value.to_owned(),
        Some((cut, _)) => format!("{}…", &value[..cut]),
    }
}

/// Parses a `Retry-After` header value into how long to wait from `now`.
///
/// Accepts both forms of RFC 9110 §10.2.3:
///
/// * **`delay-seconds`**: one or more ASCII digits (leading zeros allowed), nothing else: no
///   sign, fraction, exponent or inner whitespace. `"120"` is two minutes.
/// * **`HTTP-date`**, in all three forms RFC 9110 §5.6.7 says recipients must accept:
///   IMF-fixdate `Sun, 06 Nov 1994 08:49:37 GMT`, the obsolete RFC 850 form
///   `Sunday, 06-Nov-94 08:49:37 GMT` and asctime `Sun Nov  6 08:49:37 1994` (the day of the
///   month as a space and one digit, or two digits). The result is the time from `now` until
///   that instant, to the nanosecond, or [`Duration::ZERO`] if the instant is not after `now`.
///
/// Optional whitespace (spaces and horizontal tabs) around the whole value is ignored.
///
/// `now` is the current wall-clock time, normally [`SystemTime::now()`] taken when the response
/// arrived; it is a parameter so that callers and tests control the clock. A date compares the
/// server's clock with ours, so skew between the two shifts the result.
///
/// # Decisions
///
/// * A wait longer than 2^31 seconds (about 68 years) is [`RetryAfterError::TooLarge`] rather than
///   a silent clamp; 2^31 itself is accepted. 2^31 is RFC 9111 §1.2.2's cap for delta-seconds.
/// * Names are case-sensitive as in the RFC's grammar (`Sun`, `Nov`, `GMT`), and the weekday must
///   be a valid name of the form's kind but is **not** checked against the date: the date wins.
/// * Ranges are checked: month, day within that month (leap years included), hour 00–23,
///   minute 00–59, second 00–59. A leap second is accepted only as `23:59:60` and read as
///   `23:59:59` ([`SystemTime`] has no leap seconds).
/// * In the RFC 850 form, a two-digit year is the year with those last two digits that is not
///   more than 50 years after `now` (RFC 9110 §5.6.7): with `now` in 2024, `74` is 2074 up to
///   the same day and time of year as `now`, and 1974 after it; `99` is 1999.
///
/// Never panics, whatever `value` and `now` are.
///
/// # Errors
///
/// [`RetryAfterError`] says which rule the value broke; see its variants.
///
/// # Examples
///
/// ```
/// use std::time::{Duration, SystemTime, UNIX_EPOCH};
/// use retry_core::http::{parse_retry_after, RetryAfterError};
///
/// let now = SystemTime::now();
/// assert_eq!(parse_retry_after("120", now), Ok(Duration::from_secs(120)));
/// assert_eq!(parse_retry_after(" 0 ", now), Ok(Duration::ZERO));
///
/// // 1994-11-06T08:49:37Z, seen 30 seconds early; all three date forms mean the same instant.
/// let now = UNIX_EPOCH + Duration::from_secs(784_111_777 - 30);
/// for date in [
///     "Sun, 06 Nov 1994 08:49:37 GMT",
///     "Sunday, 06-Nov-94 08:49:37 GMT",
///     "Sun Nov  6 08:49:37 1994",
/// ] {
///     assert_eq!(parse_retry_after(date, now), Ok(Duration::from_secs(30)));
/// }
///
/// // A date in the past means "now".
/// let later = now + Duration::from_secs(3600);
/// assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", later), Ok(Duration::ZERO));
///
/// assert!(matches!(parse_retry_after("-1", now), Err(RetryAfterError::Negative { .. })));
/// assert!(matches!(
///     parse_retry_after("18446744073709551616", now),
///     Err(RetryAfterError::TooLarge { .. }),
/// ));
/// ```
pub fn parse_retry_after(value: &str, now: SystemTime) -> Result<Duration, RetryAfterError> {
    let value = value.trim_matches([' ', '\t']);
    let bytes = value.as_bytes();
    if bytes.is_empty() {
        return Err(RetryAfterError::Empty);
    }
    if bytes.iter().all(u8::is_ascii_digit) {
        return delay_seconds(bytes)
            .map(Duration::from_secs)
            .ok_or_else(|| RetryAfterError::TooLarge {
                value: shown(value),
            });
    }
    if starts_with_day_name(bytes) {
        let date = parse_http_date(bytes, now).map_err(|reason| RetryAfterError::InvalidDate {
            value: shown(value),
            reason,
        })?;
        return wait_until(date, now).ok_or_else(|| RetryAfterError::TooLarge {
            value: shown(value),
        });
    }
    if let Some(magnitude) = bytes.strip_prefix(b"-")
        && is_decimal(magnitude)
    {
        return Err(RetryAfterError::Negative {
            value: shown(value),
        });
    }
    if is_decimal(bytes) {
        // Not all digits (handled above), so it has a decimal point.
        return Err(RetryAfterError::Fractional {
            value: shown(value),
        });
    }
    Err(RetryAfterError::NotANumberOrDate {
        value: shown(value),
    })
}

/// `1*DIGIT` as seconds, or `None` past 2^31. Stops as soon as the value passes the cap, so
/// any number of digits is fine.
fn delay_seconds(digits: &[u8]) -> Option<u64> {
    let mut seconds: u64 = 0;
    for &digit in digits {
        seconds = seconds
            .checked_mul(10)?
            .checked_add(u64::from(digit.wrapping_sub(b'0')))?;
        if seconds > MAX_SECONDS {
            return None;
        }
    }
    Some(seconds)
}

/// Digits with at most one `.` and at least one digit: `1.5`, `.5`, `5.`, `12`.
fn is_decimal(bytes: &[u8]) -> bool {
    bytes.iter().any(u8::is_ascii_digit)
        && bytes.iter().filter(|&&b| b == b'.').count() <= 1
        && bytes.iter().all(|&b| b.is_ascii_digit() || b == b'.')
}

/// Whether the value opens with a day name in any letter case (`Sun`, `sunday`, ...): then it is
/// meant as an HTTP-date, and what is wrong with it is worth reporting in detail.
fn starts_with_day_name(bytes: &[u8]) -> bool {
    let word = leading_letters(bytes);
    SHORT_DAYS
        .iter()
        .chain(LONG_DAYS.iter())
        .any(|name| word.eq_ignore_ascii_case(name.as_bytes()))
}

fn leading_letters(bytes: &[u8]) -> &[u8] {
    let len = bytes
        .iter()
        .position(|b| !b.is_ascii_alphabetic())
        .unwrap_or(bytes.len());
    &bytes[..len]
}

/// How long from `now` until `date`: zero if it is not after `now`, `None` if it is more than
/// 2^31 seconds away.
fn wait_until(date: DateTime, now: SystemTime) -> Option<Duration> {
    // jiff's civil times span 20,000 years and `now` is at most ~2^64 s from the epoch, so
    // this is far inside i128; checked anyway.
    let diff = date
        .duration_since(EPOCH)
        .as_nanos()
        .checked_sub(unix_nanos(now))?;
    if diff <= 0 {
        return Some(Duration::ZERO);
    }
    if diff > i128::from(MAX_SECONDS) * NANOS_PER_SEC {
        return None;
    }
    u64::try_from(diff).ok().map(Duration::from_nanos)
}

/// A position in the bytes of a date being parsed. Every failure is a short static reason.
struct Cursor<'a> {
    rest: &'a [u8],
}

type Parsed<T> = Result<T, &'static str>;

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.rest.first().copied()
    }

    fn expect(&mut self, byte: u8, reason: &'static str) -> Parsed<()> {
        match self.rest.split_first() {
            Some((&first, rest)) if first == byte => {
                self.rest = rest;
                Ok(())
            }
            _ => Err(reason),
        }
    }

    /// Exactly `count` ASCII digits.
    fn digits(&mut self, count: usize, reason: &'static str) -> Parsed<u32> {
        let Some((digits, rest)) = self.rest.split_at_checked(count) else {
            return Err(reason);
        };
        if !digits.iter().all(u8::is_ascii_digit) {
            return Err(reason);
        }
        self.rest = rest;
        // At most 4 digits are ever asked for, so this cannot overflow.
        Ok(digits.iter().fold(0, |n, &d| n * 10 + u32::from(d - b'0')))
    }

    /// The run of ASCII letters at the cursor (possibly empty).
    fn letters(&mut self) -> &'a [u8] {
        let word = leading_letters(self.rest);
        self.rest = &self.rest[word.len()..];
        word
    }

    fn end(&self) -> Parsed<()> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err("unexpected text after the date")
        }
    }

    /// `month = %s"Jan" / ... / %s"Dec"`, as 1..=12.
    fn month(&mut self) -> Parsed<u32> {
        let index = lookup(
            self.letters(),
            &MONTHS,
            "month names are case-sensitive (`Jan` ... `Dec`)",
            "unknown month name (expected `Jan` ... `Dec`)",
        )?;
        // `index` < 12.
        Ok(u32::try_from(index).unwrap_or(0) + 1)
    }

    /// `time-of-day = hour ":" minute ":" second`, each two digits; ranges are checked later.
    fn time_of_day(&mut self) -> Parsed<(u32, u32, u32)> {
        const REASON: &str = "the time must be hh:mm:ss";
        let hour = self.digits(2, REASON)?;
        self.expect(b':', REASON)?;
        let minute = self.digits(2, REASON)?;
        self.expect(b':', REASON)?;
        let second = self.digits(2, REASON)?;
        Ok((hour, minute, second))
    }

    /// `GMT`, exactly.
    fn gmt(&mut self) -> Parsed<()> {
        let zone = self.letters();
        if zone == b"GMT" {
            Ok(())
        } else if zone.eq_ignore_ascii_case(b"GMT") {
            Err("`GMT` is case-sensitive")
        } else {
            Err("the time zone must be `GMT`")
        }
    }
}

/// The index of `word` in `names`, compared case-sensitively; a case-insensitive match gets
/// its own reason.
fn lookup(
    word: &[u8],
    names: &[&str],
    wrong_case: &'static str,
    unknown: &'static str,
) -> Parsed<usize> {
    if let Some(index) = names.iter().position(|name| word == name.as_bytes()) {
        Ok(index)
    } else if names
        .iter()
        .any(|name| word.eq_ignore_ascii_case(name.as_bytes()))
    {
        Err(wrong_case)
    } else {
        Err(unknown)
    }
}

const SHORT_DAY_CASE: &str = "day names are case-sensitive (`Mon` ... `Sun`)";
const SHORT_DAY_UNKNOWN: &str = "unknown day name (expected `Mon` ... `Sun`)";

/// Parses any of the three HTTP-date forms, with the weekday checked as a name only.
fn parse_http_date(bytes: &[u8], now: SystemTime) -> Parsed<DateTime> {
    let mut cursor = Cursor { rest: bytes };
    let day_name = cursor.letters();
    match cursor.peek() {
        Some(b',') if day_name.len() == 3 => {
            lookup(day_name, &SHORT_DAYS, SHORT_DAY_CASE, SHORT_DAY_UNKNOWN)?;
            cursor.expect(b',', "expected `,` after the day name")?;
            imf_fixdate(cursor)
        }
        Some(b',') => {
            lookup(
                day_name,
                &LONG_DAYS,
                "day names are case-sensitive (`Monday` ... `Sunday`)",
                "unknown day name (expected `Monday` ... `Sunday` in the RFC 850 form)",
            )?;
            cursor.expect(b',', "expected `,` after the day name")?;
            rfc850_date(cursor, now)
        }
        Some(b' ') if day_name.len() == 3 => {
            lookup(day_name, &SHORT_DAYS, SHORT_DAY_CASE, SHORT_DAY_UNKNOWN)?;
            asctime_date(cursor)
        }
        _ => Err("expected `, ` after the day name (or a space, in the asctime form)"),
    }
}

/// `IMF-fixdate = day-name "," SP day SP month SP year SP time-of-day SP GMT`, after the comma.
fn imf_fixdate(mut cursor: Cursor<'_>) -> Parsed<DateTime> {
    cursor.expect(b' ', "expected a space after the day name's comma")?;
    let day = cursor.digits(2, "the day of the month must be two digits")?;
    cursor.expect(b' ', "expected a space after the day of the month")?;
    let month = cursor.month()?;
    cursor.expect(b' ', "expected a space after the month")?;
    let year = cursor.digits(4, "the year must be four digits")?;
    cursor.expect(b' ', "expected a space after the year")?;
    let (hour, minute, second) = cursor.time_of_day()?;
    cursor.expect(b' ', "expected a space before `GMT`")?;
    cursor.gmt()?;
    cursor.end()?;
    validate(i64::from(year), month, day, hour, minute, second)
}

/// `rfc850-date = day-name-l "," SP day "-" month "-" 2DIGIT SP time-of-day SP GMT`, after the
/// comma.
fn rfc850_date(mut cursor: Cursor<'_>, now: SystemTime) -> Parsed<DateTime> {
    const SEPARATOR: &str = "expected `-` between day, month and year (RFC 850 form)";
    cursor.expect(b' ', "expected a space after the day name's comma")?;
    let day = cursor.digits(2, "the day of the month must be two digits")?;
    cursor.expect(b'-', SEPARATOR)?;
    let month = cursor.month()?;
    cursor.expect(b'-', SEPARATOR)?;
    let two_digit_year = cursor.digits(2, "the year must be two digits in the RFC 850 form")?;
    cursor.expect(b' ', "expected a space after the year")?;
    let (hour, minute, second) = cursor.time_of_day()?;
    cursor.expect(b' ', "expected a space before `GMT`")?;
    cursor.gmt()?;
    cursor.end()?;
    let year = resolve_two_digit_year(
        two_digit_year,
        (month, day, hour, minute, second),
        utc_civil(now),
    );
    validate(year.into(), month, day, hour, minute, second)
}

/// `asctime-date = day-name SP month SP ( 2DIGIT / ( SP DIGIT ) ) SP time-of-day SP year`,
/// after the day name.
fn asctime_date(mut cursor: Cursor<'_>) -> Parsed<DateTime> {
    const DAY: &str = "the day of the month must be two digits, or a space and one digit";
    cursor.expect(b' ', "expected a space after the day name")?;
    let month = cursor.month()?;
    cursor.expect(b' ', "expected a space after the month")?;
    let day = if cursor.peek() == Some(b' ') {
        cursor.expect(b' ', DAY)?;
        cursor.digits(1, DAY)?
    } else {
        cursor.digits(2, DAY)?
    };
    cursor.expect(b' ', "expected a space after the day of the month")?;
    let (hour, minute, second) = cursor.time_of_day()?;
    cursor.expect(b' ', "expected a space after the time")?;
    let year = cursor.digits(4, "the year must be four digits")?;
    cursor.end()?;
    validate(i64::from(year), month, day, hour, minute, second)
}

/// RFC 9110 §5.6.7: a two-digit year that "appears to be more than 50 years in the future" is
/// "the most recent year in the past that had the same last two digits". So: the latest year
/// with these last two digits whose date and time (`rest` = month, day, hour, minute, second)
/// is not more than 50 years after `now`.
fn resolve_two_digit_year(two_digits: u32, rest: (u32, u32, u32, u32, u32), now: DateTime) -> i32 {
    let limit = i32::from(now.year()) + 50;
    // `two_digits` < 100.
    let mut year = limit - (limit - i32::try_from(two_digits).unwrap_or(0)).rem_euclid(100);
    let field = |value: i8| u32::from(value.unsigned_abs());
    let now_rest = (
        field(now.month()),
        field(now.day()),
        field(now.hour()),
        field(now.minute()),
        field(now.second()),
    );
    if year == limit && rest > now_rest {
        year -= 100;
    }
    year
}

/// Range checks shared by all three forms.
fn validate(
    year: i64,
    month: u32,
    day: u32,
    hour: u32,
    minute: u32,
    second: u32,
) -> Parsed<DateTime> {
    // Only an RFC 850 year read against a `now` near the ends of time can fall outside.
    let year = i16::try_from(year)
        .ok()
        .filter(|year| (-9999..=9999).contains(year))
        .ok_or("the year is outside -9999 to 9999")?;
    // The month is 1..=12 (from its name) and the day at most two digits.
    let (month, day) = (i8::try_from(month), i8::try_from(day));
    let date = match (month, day) {
        (Ok(month), Ok(day)) => Date::new(year, month, day).ok(),
        _ => None,
    }
    .ok_or("that day does not exist in that month")?;
    if hour > 23 {
        return Err("the hour must be between 00 and 23");
    }
    if minute > 59 {
        return Err("the minute must be between 00 and 59");
    }
    let second = match second {
        0..=59 => second,
        // A leap second; POSIX time (and so `SystemTime`) has none, read it as the second before.
        60 if hour == 23 && minute == 59 => 59,
        _ => return Err("the second must be between 00 and 59 (or 60 only at 23:59:60)"),
    };
    // All three are checked above, so jiff accepts them.
    let time = match (
        i8::try_from(hour),
        i8::try_from(minute),
        i8::try_from(second),
    ) {
        (Ok(hour), Ok(minute), Ok(second)) => Time::new(hour, minute, second, 0).ok(),
        _ => None,
    }
    .ok_or("the time must be hh:mm:ss")?;
    Ok(date.to_datetime(time))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::UNIX_EPOCH;

    /// 1994-11-06T08:49:37Z, the RFC's example instant.
    const RFC_EXAMPLE: u64 = 784_111_777;
    const IMF: &str = "Sun, 06 Nov 1994 08:49:37 GMT";
    const RFC850: &str = "Sunday, 06-Nov-94 08:49:37 GMT";
    const ASCTIME: &str = "Sun Nov  6 08:49:37 1994";

    fn at(unix_seconds: i64) -> SystemTime {
        let magnitude = Duration::from_secs(unix_seconds.unsigned_abs());
        if unix_seconds >= 0 {
            UNIX_EPOCH + magnitude
        } else {
            UNIX_EPOCH - magnitude
        }
    }

    fn before_example(seconds: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(RFC_EXAMPLE - seconds)
    }

    fn parse(value: &str) -> Result<Duration, RetryAfterError> {
        parse_retry_after(value, before_example(5))
    }

    fn invalid_date_reason(value: &str, now: SystemTime) -> &'static str {
        match parse_retry_after(value, now) {
            Err(RetryAfterError::InvalidDate { reason, .. }) => reason,
            other => panic!("{value:?}: expected InvalidDate, got {other:?}"),
        }
    }

    fn value(s: &str) -> String {
        s.to_owned()
    }

    // --- delay-seconds ---------------------------------------------------------------------

    #[test]
    fn delay_seconds() {
        assert_eq!(parse("120"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("007"), Ok(Duration::from_secs(7)));
        assert_eq!(
            parse("0000000000000000000000000000000042"),
            Ok(Duration::from_secs(42))
        );
    }

    #[test]
    fn whitespace_around_the_value_is_trimmed() {
        assert_eq!(parse(" 120"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("120\t"), Ok(Duration::from_secs(120)));
        assert_eq!(parse(" \t 120 \t "), Ok(Duration::from_secs(120)));
        assert_eq!(parse(&format!("  {IMF}\t")), Ok(Duration::from_secs(5)));
    }

    #[test]
    fn other_whitespace_is_not_trimmed() {
        for s in ["\n120", "120\r\n", "\u{a0}120", "1 2", "1\t2"] {
            assert_eq!(
                parse(s),
                Err(RetryAfterError::NotANumberOrDate { value: value(s) }),
                "{s:?}"
            );
        }
    }

    #[test]
    fn empty() {
        assert_eq!(parse(""), Err(RetryAfterError::Empty));
        assert_eq!(parse("  "), Err(RetryAfterError::Empty));
        assert_eq!(parse(" \t "), Err(RetryAfterError::Empty));
    }

    #[test]
    fn negative() {
        for s in ["-1", "-0", "-1.5", "-.5"] {
            assert_eq!(parse(s), Err(RetryAfterError::Negative { value: value(s) }));
        }
    }

    #[test]
    fn fractional() {
        for s in ["1.5", "1.0", ".5", "5."] {
            assert_eq!(
                parse(s),
                Err(RetryAfterError::Fractional { value: value(s) })
            );
        }
    }

    #[test]
    fn not_a_number_or_date() {
        for s in [
            "1e9",
            "+5",
            "abc",
            "0x10",
            "1.2.3",
            ".",
            "-",
            "--1",
            "5s",
            "1_000",
            "١٢",
            "１２",
            "Sunny",
            "06 Nov 1994 08:49:37 GMT",
            "Xyz, 06 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(
                parse(s),
                Err(RetryAfterError::NotANumberOrDate { value: value(s) }),
                "{s:?}"
            );
        }
    }

    #[test]
    fn cap_is_two_to_the_31_seconds() {
        assert_eq!(parse("2147483648"), Ok(Duration::from_secs(1 << 31)));
        assert_eq!(
            parse("2147483649"),
            Err(RetryAfterError::TooLarge {
                value: value("2147483649")
            })
        );
        assert_eq!(
            parse("18446744073709551616"),
            Err(RetryAfterError::TooLarge {
                value: value("18446744073709551616")
            })
        );
        let huge = "9".repeat(10_000);
        assert!(matches!(
            parse(&huge),
            Err(RetryAfterError::TooLarge { .. })
        ));
    }

    // --- HTTP-date ---------------------------------------------------------------------------

    #[test]
    fn all_three_forms_give_the_exact_difference() {
        for date in [IMF, RFC850, ASCTIME, "Sun Nov 06 08:49:37 1994"] {
            assert_eq!(parse(date), Ok(Duration::from_secs(5)), "{date}");
            assert_eq!(
                parse_retry_after(date, before_example(1)),
                Ok(Duration::from_secs(1)),
                "{date}"
            );
        }
    }

    #[test]
    fn sub_second_now_is_kept() {
        let now = before_example(5) + Duration::from_millis(750);
        assert_eq!(parse_retry_after(IMF, now), Ok(Duration::from_millis(4250)));
    }

    #[test]
    fn past_or_present_dates_mean_no_wait() {
        let example = before_example(0);
        for date in [IMF, RFC850, ASCTIME] {
            assert_eq!(
                parse_retry_after(date, example),
                Ok(Duration::ZERO),
                "{date}"
            );
            let later = example + Duration::from_nanos(1);
            assert_eq!(parse_retry_after(date, later), Ok(Duration::ZERO), "{date}");
            let much_later = at(1_700_000_000);
            assert_eq!(
                parse_retry_after(date, much_later),
                Ok(Duration::ZERO),
                "{date}"
            );
        }
        assert_eq!(
            parse_retry_after("Sat, 01 Jan 0000 00:00:00 GMT", SystemTime::now()),
            Ok(Duration::ZERO)
        );
    }

    #[test]
    fn dates_more_than_two_to_the_31_seconds_ahead_are_too_large() {
        // 1970-01-01 + 2^31 s = 2038-01-19T03:14:08Z.
        let epoch = at(0);
        assert_eq!(
            parse_retry_after("Tue, 19 Jan 2038 03:14:08 GMT", epoch),
            Ok(Duration::from_secs(1 << 31))
        );
        let one_more = "Tue, 19 Jan 2038 03:14:09 GMT";
        assert_eq!(
            parse_retry_after(one_more, epoch),
            Err(RetryAfterError::TooLarge {
                value: value(one_more)
            })
        );
        assert!(matches!(
            parse_retry_after("Fri, 31 Dec 9999 23:59:59 GMT", epoch),
            Err(RetryAfterError::TooLarge { .. })
        ));
    }

    #[test]
    fn bad_month_names() {
        let now = before_example(5);
        assert_eq!(
            invalid_date_reason("Sun, 06 Foo 1994 08:49:37 GMT", now),
            "unknown month name (expected `Jan` ... `Dec`)"
        );
        assert_eq!(
            invalid_date_reason("Sun, 06 November 1994 08:49:37 GMT", now),
            "unknown month name (expected `Jan` ... `Dec`)"
        );
        assert_eq!(
            invalid_date_reason("Sun, 06 nov 1994 08:49:37 GMT", now),
            "month names are case-sensitive (`Jan` ... `Dec`)"
        );
        assert_eq!(
            invalid_date_reason("Sunday, 06-NOV-94 08:49:37 GMT", now),
            "month names are case-sensitive (`Jan` ... `Dec`)"
        );
        assert_eq!(
            invalid_date_reason("Sun Foo  6 08:49:37 1994", now),
            "unknown month name (expected `Jan` ... `Dec`)"
        );
    }

    #[test]
    fn names_and_zone_are_case_sensitive() {
        let now = before_example(5);
        assert_eq!(
            invalid_date_reason("sun, 06 Nov 1994 08:49:37 GMT", now),
            SHORT_DAY_CASE
        );
        assert_eq!(
            invalid_date_reason("SUNDAY, 06-Nov-94 08:49:37 GMT", now),
            "day names are case-sensitive (`Monday` ... `Sunday`)"
        );
        assert_eq!(
            invalid_date_reason("Sun, 06 Nov 1994 08:49:37 gmt", now),
            "`GMT` is case-sensitive"
        );
        assert_eq!(
            invalid_date_reason("Sun, 06 Nov 1994 08:49:37 +0000", now),
            "the time zone must be `GMT`"
        );
    }

    #[test]
    fn day_name_must_fit_the_form_but_not_the_date() {
        let now = before_example(5);
        // Mismatched weekday: accepted, the date wins.
        assert_eq!(
            parse_retry_after("Mon, 06 Nov 1994 08:49:37 GMT", now),
            Ok(Duration::from_secs(5))
        );
        assert_eq!(
            parse_retry_after("Friday, 06-Nov-94 08:49:37 GMT", now),
            Ok(Duration::from_secs(5))
        );
        assert_eq!(
            parse_retry_after("Wed Nov  6 08:49:37 1994", now),
            Ok(Duration::from_secs(5))
        );
        // Wrong kind of name for the form.
        assert_eq!(
            invalid_date_reason("Sunday, 06 Nov 1994 08:49:37 GMT", now),
            "expected `-` between day, month and year (RFC 850 form)"
        );
        assert_eq!(
            invalid_date_reason("Sun, 06-Nov-94 08:49:37 GMT", now),
            "expected a space after the day of the month"
        );
        assert_eq!(
            invalid_date_reason("Sunday Nov  6 08:49:37 1994", now),
            "expected `, ` after the day name (or a space, in the asctime form)"
        );
    }

    #[test]
    fn structure_errors() {
        let now = before_example(5);
        for (date, reason) in [
            (
                "Sun, 6 Nov 1994 08:49:37 GMT",
                "the day of the month must be two digits",
            ),
            (
                "Sun, 06 Nov 94 08:49:37 GMT",
                "the year must be four digits",
            ),
            ("Sun, 06 Nov 1994 8:49:37 GMT", "the time must be hh:mm:ss"),
            ("Sun, 06 Nov 1994 08:49 GMT", "the time must be hh:mm:ss"),
            ("Sun, 06 Nov 1994 08:49:37", "expected a space before `GMT`"),
            (
                "Sun, 06 Nov 1994 08:49:37 GMT x",
                "unexpected text after the date",
            ),
            (
                "Sun,  06 Nov 1994 08:49:37 GMT",
                "the day of the month must be two digits",
            ),
            (
                "Sun,06 Nov 1994 08:49:37 GMT",
                "expected a space after the day name's comma",
            ),
            (
                "Sun",
                "expected `, ` after the day name (or a space, in the asctime form)",
            ),
            ("Sun,", "expected a space after the day name's comma"),
            (
                "Sun Nov 6 08:49:37 1994",
                "the day of the month must be two digits, or a space and one digit",
            ),
            (
                "Sun Nov  6 08:49:37 1994 GMT",
                "unexpected text after the date",
            ),
            (
                "Sunday, 06-Nov-1994 08:49:37 GMT",
                "expected a space after the year",
            ),
        ] {
            assert_eq!(invalid_date_reason(date, now), reason, "{date}");
        }
    }

    #[test]
    fn ranges_are_checked() {
        let now = before_example(5);
        for (date, reason) in [
            (
                "Sun, 00 Nov 1994 08:49:37 GMT",
                "that day does not exist in that month",
            ),
            (
                "Sun, 31 Nov 1994 08:49:37 GMT",
                "that day does not exist in that month",
            ),
            (
                "Sun, 32 Dec 1994 08:49:37 GMT",
                "that day does not exist in that month",
            ),
            (
                "Sun, 06 Nov 1994 24:00:00 GMT",
                "the hour must be between 00 and 23",
            ),
            (
                "Sun, 06 Nov 1994 08:60:00 GMT",
                "the minute must be between 00 and 59",
            ),
            (
                "Sun, 06 Nov 1994 08:49:61 GMT",
                "the second must be between 00 and 59 (or 60 only at 23:59:60)",
            ),
            (
                "Sun, 06 Nov 1994 08:49:60 GMT",
                "the second must be between 00 and 59 (or 60 only at 23:59:60)",
            ),
            (
                "Sun Nov  0 08:49:37 1994",
                "that day does not exist in that month",
            ),
        ] {
            assert_eq!(invalid_date_reason(date, now), reason, "{date}");
        }
    }

    #[test]
    fn february_29() {
        // 2024-02-28T00:00:00Z = 1_709_078_400.
        let now = at(1_709_078_400);
        assert_eq!(
            parse_retry_after("Thu, 29 Feb 2024 00:00:00 GMT", now),
            Ok(Duration::from_secs(86_400))
        );
        assert_eq!(
            parse_retry_after("Fri, 01 Mar 2024 00:00:00 GMT", now),
            Ok(Duration::from_secs(2 * 86_400))
        );
        for not_leap in [
            "Wed, 29 Feb 2023 00:00:00 GMT",
            "Thu, 29 Feb 1900 00:00:00 GMT",
            "Fri, 29 Feb 2100 00:00:00 GMT",
            "Wed Feb 29 00:00:00 2023",
        ] {
            assert_eq!(
                invalid_date_reason(not_leap, now),
                "that day does not exist in that month",
                "{not_leap}"
            );
        }
        // 2000 is a leap year (divisible by 400).
        assert_eq!(
            parse_retry_after("Tue, 29 Feb 2000 00:00:00 GMT", now),
            Ok(Duration::ZERO)
        );
    }

    #[test]
    fn leap_second_reads_as_the_second_before() {
        // 2016-12-31T23:59:59Z = 1_483_228_799, a real leap second followed it.
        let now = at(1_483_228_799 - 10);
        assert_eq!(
            parse_retry_after("Sat, 31 Dec 2016 23:59:60 GMT", now),
            Ok(Duration::from_secs(10))
        );
        assert_eq!(
            parse_retry_after("Sat, 31 Dec 2016 23:59:59 GMT", now),
            Ok(Duration::from_secs(10))
        );
    }

    #[test]
    fn rfc850_two_digit_year_fifty_year_window() {
        // now = 2024-06-01T12:00:00Z = 1_717_243_200; 2074-06-01T12:00:00Z = 3_295_080_000.
        let now = at(1_717_243_200);
        let fifty_years = Duration::from_secs(3_295_080_000 - 1_717_243_200);
        // Exactly 50 years ahead is not "more than 50 years": 2074.
        assert_eq!(
            parse_retry_after("Friday, 01-Jun-74 12:00:00 GMT", now),
            Ok(fifty_years)
        );
        // One second later is more than 50 years ahead: 1974, in the past.
        assert_eq!(
            parse_retry_after("Friday, 01-Jun-74 12:00:01 GMT", now),
            Ok(Duration::ZERO)
        );
        assert_eq!(
            parse_retry_after("Friday, 31-May-74 12:00:00 GMT", now),
            Ok(fifty_years - Duration::from_secs(86_400))
        );
        assert_eq!(
            parse_retry_after("Saturday, 02-Jun-74 00:00:00 GMT", now),
            Ok(Duration::ZERO)
        );
        // Near-future two-digit years.
        assert_eq!(
            parse_retry_after("Saturday, 01-Jun-24 12:00:05 GMT", now),
            Ok(Duration::from_secs(5))
        );

        let now = utc_civil(now);
        let mid_year = (6, 1, 12, 0, 0);
        assert_eq!(resolve_two_digit_year(74, mid_year, now), 2074);
        assert_eq!(resolve_two_digit_year(74, (6, 1, 12, 0, 1), now), 1974);
        assert_eq!(resolve_two_digit_year(75, (1, 1, 0, 0, 0), now), 1975);
        assert_eq!(resolve_two_digit_year(73, (12, 31, 23, 59, 59), now), 2073);
        assert_eq!(resolve_two_digit_year(99, mid_year, now), 1999);
        assert_eq!(resolve_two_digit_year(0, mid_year, now), 2000);
        assert_eq!(resolve_two_digit_year(24, mid_year, now), 2024);
        // Across a century: in 2051, `00` is 2100 (49 years ahead), `02` is 2002.
        let in_2051 = now.with().year(2051).build().unwrap();
        assert_eq!(resolve_two_digit_year(0, mid_year, in_2051), 2100);
        assert_eq!(resolve_two_digit_year(1, mid_year, in_2051), 2101);
        assert_eq!(resolve_two_digit_year(2, mid_year, in_2051), 2002);
    }

    #[test]
    fn rfc850_february_29_uses_the_resolved_year() {
        let now = at(1_717_243_200); // 2024-06-01
        // `00` → 2000, a leap year; `01` → 2001, not one.
        assert_eq!(
            parse_retry_after("Tuesday, 29-Feb-00 00:00:00 GMT", now),
            Ok(Duration::ZERO)
        );
        assert_eq!(
            invalid_date_reason("Thursday, 29-Feb-01 00:00:00 GMT", now),
            "that day does not exist in that month"
        );
    }

    #[test]
    fn extreme_clocks_do_not_panic() {
        let extremes = [
            UNIX_EPOCH,
            at(i64::from(i32::MIN)),
            at(-62_000_000_000),
            UNIX_EPOCH
                .checked_add(Duration::from_secs(u64::MAX / 4))
                .unwrap_or(UNIX_EPOCH),
            UNIX_EPOCH
                .checked_sub(Duration::from_secs(u64::MAX / 4))
                .unwrap_or(UNIX_EPOCH),
        ];
        for now in extremes {
            for date in [
                IMF,
                RFC850,
                ASCTIME,
                "Fri, 31 Dec 9999 23:59:59 GMT",
                "Sat, 01 Jan 0000 00:00:00 GMT",
            ] {
                let _ = parse_retry_after(date, now);
            }
        }
    }

    // --- errors ------------------------------------------------------------------------------

    #[test]
    fn messages() {
        let now = before_example(5);
        let message = |s: &str| parse_retry_after(s, now).unwrap_err().to_string();
        assert_eq!(
            message(""),
            "Retry-After is empty; expected a whole number of seconds or an HTTP-date"
        );
        assert_eq!(
            message("abc"),
            "Retry-After `abc` is neither a whole number of seconds nor an HTTP-date"
        );
        assert_eq!(
            message("-1"),
            "Retry-After `-1` is negative; only zero or more whole seconds are allowed"
        );
        assert_eq!(
            message(" 1.5 "),
            "Retry-After `1.5` is fractional; only whole seconds are allowed"
        );
        assert_eq!(
            message("18446744073709551616"),
            "Retry-After `18446744073709551616` asks for a wait longer than 2^31 seconds \
             (about 68 years)"
        );
        assert_eq!(
            message("Sun, 06 Foo 1994 08:49:37 GMT"),
            "Retry-After `Sun, 06 Foo 1994 08:49:37 GMT` is not a valid HTTP-date: \
             unknown month name (expected `Jan` ... `Dec`)"
        );
        assert_eq!(
            message("a\nb"),
            "Retry-After `a\\nb` is neither a whole number of seconds nor an HTTP-date"
        );
        let err: Box<dyn std::error::Error + Send + Sync> = Box::new(RetryAfterError::Empty);
        assert!(!err.to_string().is_empty());
    }

    #[test]
    fn kept_values_are_cut_to_64_characters() {
        let long = "é".repeat(100);
        let Err(RetryAfterError::NotANumberOrDate { value }) = parse(&long) else {
            panic!("expected NotANumberOrDate");
        };
        assert_eq!(value, format!("{}…", "é".repeat(64)));
        let exact = "x".repeat(64);
        assert_eq!(
            parse(&exact),
            Err(RetryAfterError::NotANumberOrDate {
                value: exact.clone()
            })
        );
    }

    // --- properties --------------------------------------------------------------------------

    const SHORT_DAYS_FROM_SUNDAY: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];

    /// An independent IMF-fixdate formatter (walks years and months one by one, rather than the
    /// closed-form arithmetic the parser uses).
    fn format_imf_fixdate(unix_seconds: i64) -> String {
        let mut days = unix_seconds.div_euclid(86_400);
        let in_day = unix_seconds.rem_euclid(86_400);
        let weekday = SHORT_DAYS_FROM_SUNDAY[usize::try_from((days + 4).rem_euclid(7)).unwrap()];
        let leap = |y: i64| (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
        let year_len = |y: i64| if leap(y) { 366 } else { 365 };
        let mut year = 1970;
        while days < 0 {
            year -= 1;
            days += year_len(year);
        }
        while days >= year_len(year) {
            days -= year_len(year);
            year += 1;
        }
        let month_lengths = [
            31,
            if leap(year) { 29 } else { 28 },
            31,
            30,
            31,
            30,
            31,
            31,
            30,
            31,
            30,
            31,
        ];
        let mut month = 0;
        while days >= month_lengths[month] {
            days -= month_lengths[month];
            month += 1;
        }
        format!(
            "{weekday}, {:02} {} {year:04} {:02}:{:02}:{:02} GMT",
            days + 1,
            MONTHS[month],
            in_day / 3600,
            in_day % 3600 / 60,
            in_day % 60
        )
    }

    #[test]
    fn formatter_matches_the_rfc_example() {
        assert_eq!(format_imf_fixdate(RFC_EXAMPLE as i64), IMF);
        assert_eq!(format_imf_fixdate(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(format_imf_fixdate(-1), "Wed, 31 Dec 1969 23:59:59 GMT");
    }

    /// 0000-01-01T00:00:00Z and 9999-12-31T23:59:59Z.
    const FIRST_IMF_SECOND: i64 = -62_167_219_200;
    const LAST_IMF_SECOND: i64 = 253_402_300_799;

    proptest! {
        #[test]
        fn never_panics(s in ".*") {
            let _ = parse_retry_after(&s, before_example(5));
            let _ = parse_retry_after(&s, SystemTime::now());
        }

        #[test]
        fn never_panics_on_date_like_strings(
            s in "[A-Za-z]{3,9},? [0-9 ]{1,3}[ -][A-Za-z]{3}[ -][0-9]{2,4} [0-9]{2}:[0-9]{2}:[0-9]{2}( [A-Za-z]{3})?",
            now in any::<i64>(),
        ) {
            let _ = parse_retry_after(&s, at(now / 1000));
        }

        #[test]
        fn whole_seconds_up_to_the_cap_parse_exactly(n in 0u32..=(1u32 << 31)) {
            prop_assert_eq!(
                parse_retry_after(&n.to_string(), SystemTime::now()),
                Ok(Duration::from_secs(n.into()))
            );
            prop_assert_eq!(
                parse_retry_after(&format!(" 000{n}\t"), SystemTime::now()),
                Ok(Duration::from_secs(n.into()))
            );
        }

        #[test]
        fn numbers_past_the_cap_are_too_large(n in (1u64 << 31) + 1..) {
            let is_too_large = matches!(
                parse_retry_after(&n.to_string(), SystemTime::now()),
                Err(RetryAfterError::TooLarge { .. })
            );
            prop_assert!(is_too_large);
        }

        #[test]
        fn imf_fixdate_round_trips(
            instant in FIRST_IMF_SECOND..=LAST_IMF_SECOND,
            ahead in 0u64..=(1u64 << 31),
            nanos in 0u32..1_000_000_000,
        ) {
            let date = format_imf_fixdate(instant);
            let wait = Duration::from_secs(ahead) - Duration::from_nanos(u64::from(nanos).min(ahead * 1_000_000_000));
            let now = at(instant) - wait;
            prop_assert_eq!(parse_retry_after(&date, now), Ok(wait), "{}", date);
            // Seen afterwards, it is in the past.
            let later = at(instant) + Duration::from_secs(ahead);
            prop_assert_eq!(parse_retry_after(&date, later), Ok(Duration::ZERO), "{}", date);
        }
    }
}
