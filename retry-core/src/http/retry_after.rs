//! Parsing `Retry-After` (RFC 9110 §10.2.3).
//!
//! ```text
//! Retry-After   = HTTP-date / delay-seconds
//! delay-seconds = 1*DIGIT
//! HTTP-date     = IMF-fixdate / obs-date        ; RFC 9110 §5.6.7
//! ```
//!
//! HTTP-dates are read by the `httpdate` crate; what is decided here (all documented on
//! [`parse_retry_after`]) is the rest:
//!
//! * **Cap.** A wait longer than 2^31 seconds (about 68 years) is an error,
//!   [`RetryAfterError::TooLarge`], not a silent clamp. 2^31 is the value RFC 9111 §1.2.2 tells
//!   caches to use for delta-seconds they cannot represent; a server asking for more is broken,
//!   and a caller can tell that apart from a genuine long wait.
//! * **Past dates** mean no wait at all, however far back.
//! * **Two-digit years.** httpdate puts an RFC 850 year in 1970-2069; a date that then lies more
//!   than 50 years ahead is, by RFC 9110 §5.6.7, in the past.
//! * **Errors** say which of these rules a value broke. For a date httpdate rejects they can
//!   only say what a date must look like: httpdate does not say what is wrong.
//!
//! httpdate is stricter than the grammar alone: the weekday must be the date's, the year 1970 or
//! later, and the second at most 59 (`23:59:60` is refused). Such a value is not an HTTP-date
//! here, and a 429 or 503 carrying it is retried after the policy's own backoff, as with any
//! `Retry-After` that cannot be read.

use std::fmt;
use std::time::{Duration, SystemTime};

/// The longest wait accepted, in seconds: 2^31 (RFC 9111 §1.2.2), about 68 years.
const MAX_SECONDS: u64 = 1 << 31;

/// How many characters of an offending value an error keeps.
const MAX_SHOWN_CHARS: usize = 64;

/// 50 years holding as many February 29ths as 50 years can (13). An RFC 850 date further ahead
/// than this is certainly "more than 50 years in the future"; one within a day short of it may
/// be too, by the calendar, and is then read as a long wait, which a policy's
/// `max_retry_after` refuses anyway.
const FIFTY_YEARS: Duration = Duration::from_secs((50 * 365 + 13) * 86_400);

/// The day names an HTTP-date opens with; the first three letters are the short form.
const DAY_NAMES: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// The reason of every [`RetryAfterError::InvalidDate`]: what a date must be, since httpdate
/// does not say which part of one it rejected.
const NOT_AN_HTTP_DATE: &str = "expected a date like `Sun, 06 Nov 1994 08:49:37 GMT` (or its \
     RFC 850 or asctime form), from 1970 to 9999, on its own weekday";

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
///     Err(RetryAfterError::InvalidDate { value, reason }) => {
///         assert_eq!(value, "Sun, 06 Nov 1994 08:49:37 UTC");
///         assert!(reason.contains("`Sun, 06 Nov 1994 08:49:37 GMT`"));
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
    /// The value starts like an HTTP-date (with a day name) but is not a valid one: not in any
    /// of the three forms, or a day or time that does not exist, a weekday that is not the
    /// date's, or a year before 1970.
    #[error("Retry-After `{}` is not a valid HTTP-date: {reason}", Escaped(.value))]
    InvalidDate {
        /// The offending value (trimmed, cut to 64 characters).
        value: String,
        /// What an HTTP-date must be; the same text for every invalid date, as httpdate does
        /// not say what is wrong with the one it rejects.
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
///   month as a space and one digit, or two digits), as the `httpdate` crate reads them. The
///   result is the time from `now` until that instant, to the nanosecond, or
///   [`Duration::ZERO`] if the instant is not after `now`.
///
/// Optional whitespace (spaces and horizontal tabs) around the whole value is ignored; other
/// whitespace, such as a CR or LF, makes the value invalid.
///
/// `now` is the current wall-clock time, normally [`SystemTime::now()`] taken when the response
/// arrived; it is a parameter so that callers and tests control the clock. A date compares the
/// server's clock with ours, so skew between the two shifts the result.
///
/// # Decisions
///
/// * A wait longer than 2^31 seconds (about 68 years) is [`RetryAfterError::TooLarge`] rather than
///   a silent clamp; 2^31 itself is accepted. 2^31 is RFC 9111 §1.2.2's cap for delta-seconds.
/// * Dates are httpdate's: names and `GMT` are case-sensitive as in the RFC's grammar, the day
///   must exist in its month, the time be 00:00:00 to 23:59:59 (no leap second `23:59:60`), the
///   year 1970 to 9999 and the weekday the date's own. Anything else that opens with a day name
///   is [`RetryAfterError::InvalidDate`].
/// * In the RFC 850 form, httpdate reads a two-digit year as 1970-2069 (`94` is 1994, `24` is
///   2024). A date that then lies more than 50 years after `now` means the same day a century
///   earlier (RFC 9110 §5.6.7), in the past, so no wait. As the weekday must be right for the
///   year httpdate chose, an RFC 850 date in 2070 or later cannot be written.
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
/// // 6 November 1994 was a Sunday.
/// assert!(matches!(
///     parse_retry_after("Mon, 06 Nov 1994 08:49:37 GMT", now),
///     Err(RetryAfterError::InvalidDate { .. }),
/// ));
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
        let date = http_date(value).ok_or_else(|| RetryAfterError::InvalidDate {
            value: shown(value),
            reason: NOT_AN_HTTP_DATE,
        })?;
        return wait_until(date, now, has_two_digit_year(value)).ok_or_else(|| {
            RetryAfterError::TooLarge {
                value: shown(value),
            }
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
/// meant as an HTTP-date, and its error says what a date must look like rather than that it is
/// neither number nor date.
fn starts_with_day_name(bytes: &[u8]) -> bool {
    let len = bytes
        .iter()
        .position(|b| !b.is_ascii_alphabetic())
        .unwrap_or(bytes.len());
    let word = &bytes[..len];
    DAY_NAMES.iter().any(|name| {
        word.eq_ignore_ascii_case(name.as_bytes())
            || word.eq_ignore_ascii_case(&name.as_bytes()[..3])
    })
}

/// The instant of an HTTP-date, or `None` if httpdate rejects it.
fn http_date(value: &str) -> Option<SystemTime> {
    // httpdate trims any whitespace itself, CR and LF included, which RFC 9110 does not allow
    // around a field value; the optional kind is already gone.
    if value.trim() != value {
        return None;
    }
    httpdate::parse_http_date(value).ok()
}

/// Whether a value httpdate read is in the RFC 850 form, the one with a two-digit year: the
/// only form with `-` (between day, month and year).
fn has_two_digit_year(value: &str) -> bool {
    value.contains('-')
}

/// How long from `now` until `date`: zero if it is not after `now`, `None` if it is more than
/// 2^31 seconds away. A two-digit year more than 50 years ahead is a century earlier, so past.
fn wait_until(date: SystemTime, now: SystemTime, two_digit_year: bool) -> Option<Duration> {
    let Ok(wait) = date.duration_since(now) else {
        return Some(Duration::ZERO);
    };
    if two_digit_year && wait > FIFTY_YEARS {
        return Some(Duration::ZERO);
    }
    (wait <= Duration::from_secs(MAX_SECONDS)).then_some(wait)
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

    /// What every value that opens with a day name but that httpdate rejects gives.
    fn invalid_date(value: &str) -> Result<Duration, RetryAfterError> {
        Err(RetryAfterError::InvalidDate {
            value: value.to_owned(),
            reason: NOT_AN_HTTP_DATE,
        })
    }

    fn assert_invalid_date(value: &str, now: SystemTime) {
        assert_eq!(
            parse_retry_after(value, now),
            invalid_date(value),
            "{value:?}"
        );
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
        for s in [
            format!("{IMF}\r\n"),
            format!("{IMF}\n"),
            format!("{IMF}\u{a0}"),
        ] {
            assert_invalid_date(&s, before_example(5));
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
        // httpdate reads no year before 1970.
        assert_invalid_date("Sat, 01 Jan 0000 00:00:00 GMT", SystemTime::now());
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
        for date in [
            "Sun, 06 Foo 1994 08:49:37 GMT",
            "Sun, 06 November 1994 08:49:37 GMT",
            "Sun, 06 nov 1994 08:49:37 GMT",
            "Sunday, 06-NOV-94 08:49:37 GMT",
            "Sun Foo  6 08:49:37 1994",
        ] {
            assert_invalid_date(date, before_example(5));
        }
    }

    #[test]
    fn names_and_zone_are_case_sensitive() {
        for date in [
            "sun, 06 Nov 1994 08:49:37 GMT",
            "SUNDAY, 06-Nov-94 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49:37 gmt",
            "Sun, 06 Nov 1994 08:49:37 +0000",
        ] {
            assert_invalid_date(date, before_example(5));
        }
    }

    #[test]
    fn day_name_must_fit_the_form_and_the_date() {
        let now = before_example(5);
        // Mismatched weekday: httpdate rejects it (6 November 1994 was a Sunday).
        for date in [
            "Mon, 06 Nov 1994 08:49:37 GMT",
            "Friday, 06-Nov-94 08:49:37 GMT",
            "Wed Nov  6 08:49:37 1994",
        ] {
            assert_invalid_date(date, now);
        }
        // Wrong kind of name for the form.
        for date in [
            "Sunday, 06 Nov 1994 08:49:37 GMT",
            "Sun, 06-Nov-94 08:49:37 GMT",
            "Sunday Nov  6 08:49:37 1994",
        ] {
            assert_invalid_date(date, now);
        }
    }

    #[test]
    fn structure_errors() {
        for date in [
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 94 08:49:37 GMT",
            "Sun, 06 Nov 1994 8:49:37 GMT",
            "Sun, 06 Nov 1994 08:49 GMT",
            "Sun, 06 Nov 1994 08:49:37",
            "Sun, 06 Nov 1994 08:49:37 GMT x",
            "Sun,  06 Nov 1994 08:49:37 GMT",
            "Sun,06 Nov 1994 08:49:37 GMT",
            "Sun",
            "Sun,",
            "Sun Nov 6 08:49:37 1994",
            "Sun Nov  6 08:49:37 1994 GMT",
            "Sunday, 06-Nov-1994 08:49:37 GMT",
        ] {
            assert_invalid_date(date, before_example(5));
        }
    }

    #[test]
    fn ranges_are_checked() {
        for date in [
            "Sun, 00 Nov 1994 08:49:37 GMT",
            "Sun, 31 Nov 1994 08:49:37 GMT",
            "Sun, 32 Dec 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 24:00:00 GMT",
            "Sun, 06 Nov 1994 08:60:00 GMT",
            "Sun, 06 Nov 1994 08:49:61 GMT",
            "Sun, 06 Nov 1994 08:49:60 GMT",
            "Sun Nov  0 08:49:37 1994",
        ] {
            assert_invalid_date(date, before_example(5));
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
            assert_invalid_date(not_leap, now);
        }
        // 2000 is a leap year (divisible by 400).
        assert_eq!(
            parse_retry_after("Tue, 29 Feb 2000 00:00:00 GMT", now),
            Ok(Duration::ZERO)
        );
    }

    #[test]
    fn a_leap_second_is_not_an_http_date() {
        // 2016-12-31T23:59:59Z = 1_483_228_799, a real leap second followed it; httpdate reads
        // no second past 59.
        let now = at(1_483_228_799 - 10);
        assert_invalid_date("Sat, 31 Dec 2016 23:59:60 GMT", now);
        assert_eq!(
            parse_retry_after("Sat, 31 Dec 2016 23:59:59 GMT", now),
            Ok(Duration::from_secs(10))
        );
    }

    #[test]
    fn rfc850_two_digit_years_are_httpdates() {
        // now = 2024-06-01T12:00:00Z; httpdate reads `24` as 2024 and `74` as 1974.
        let now = at(1_717_243_200);
        assert_eq!(
            parse_retry_after("Saturday, 01-Jun-24 12:00:05 GMT", now),
            Ok(Duration::from_secs(5))
        );
        // 31 May 1974 was a Friday: in the past.
        assert_eq!(
            parse_retry_after("Friday, 31-May-74 12:00:00 GMT", now),
            Ok(Duration::ZERO)
        );
        // 1 June 2074 is a Friday, but 1 June 1974 was a Saturday and 2 June 1974 a Sunday.
        for date in [
            "Friday, 01-Jun-74 12:00:00 GMT",
            "Friday, 01-Jun-74 12:00:01 GMT",
            "Saturday, 02-Jun-74 00:00:00 GMT",
        ] {
            assert_invalid_date(date, now);
        }
    }

    #[test]
    fn rfc850_dates_more_than_fifty_years_ahead_are_past() {
        // now = 1994-11-06T08:49:32Z; 2044-11-06T08:49:32Z is 50 years (18,263 days) later.
        let now = before_example(5);
        let fifty_years = Duration::from_secs(18_263 * 86_400);
        assert_eq!(
            parse_retry_after("Saturday, 05-Nov-44 08:49:37 GMT", now),
            Ok(fifty_years - Duration::from_secs(86_400 - 5))
        );
        // Exactly 50 years ahead is not "more than 50 years".
        assert_eq!(
            parse_retry_after("Sunday, 06-Nov-44 08:49:32 GMT", now),
            Ok(fifty_years)
        );
        // More is 1944, in the past.
        assert_eq!(
            parse_retry_after("Sunday, 06-Nov-44 08:49:37 GMT", now),
            Ok(Duration::ZERO)
        );
        assert_eq!(
            parse_retry_after("Saturday, 01-Jan-50 00:00:00 GMT", now),
            Ok(Duration::ZERO)
        );
        // A four-digit year means what it says.
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 2044 08:49:37 GMT", now),
            Ok(fifty_years + Duration::from_secs(5))
        );
    }

    #[test]
    fn rfc850_february_29_uses_the_resolved_year() {
        let now = at(1_717_243_200); // 2024-06-01
        // `00` → 2000, a leap year; `01` → 2001, not one.
        assert_eq!(
            parse_retry_after("Tuesday, 29-Feb-00 00:00:00 GMT", now),
            Ok(Duration::ZERO)
        );
        assert_invalid_date("Thursday, 29-Feb-01 00:00:00 GMT", now);
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
            "Retry-After `Sun, 06 Foo 1994 08:49:37 GMT` is not a valid HTTP-date: expected a \
             date like `Sun, 06 Nov 1994 08:49:37 GMT` (or its RFC 850 or asctime form), from \
             1970 to 9999, on its own weekday"
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
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];

    /// An independent IMF-fixdate formatter (walks years and months one by one, rather than the
    /// closed-form arithmetic httpdate uses).
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

    /// 0000-01-01T00:00:00Z, 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z.
    const FIRST_IMF_SECOND: i64 = -62_167_219_200;
    const FIRST_HTTPDATE_SECOND: i64 = 0;
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
            instant in FIRST_HTTPDATE_SECOND..=LAST_IMF_SECOND,
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

        #[test]
        fn dates_before_1970_are_not_http_dates(instant in FIRST_IMF_SECOND..FIRST_HTTPDATE_SECOND) {
            let date = format_imf_fixdate(instant);
            prop_assert_eq!(parse_retry_after(&date, SystemTime::now()), invalid_date(&date));
        }
    }
}
