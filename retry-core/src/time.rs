//! Time as the stores and dead letters write it: an injectable clock, fixed-width UTC
//! timestamps, and the proleptic Gregorian calendar (no date crate needed for this much).

use std::fmt::Write as _;
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
/// lease or retention that would end later ends there.
pub(crate) fn later(now: SystemTime, by: Duration) -> SystemTime {
    now.checked_add(by).map_or(UNIX_EPOCH + END_OF_TIME, |t| {
        t.min(UNIX_EPOCH + END_OF_TIME)
    })
}

const NANOS_PER_SEC: i128 = 1_000_000_000;
const SECS_PER_DAY: i128 = 86_400;

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
    const MIN: i128 = -62_167_219_200 * NANOS_PER_SEC; // 0000-01-01
    const MAX: i128 = 253_402_300_799_999_999_999; // 9999-12-31T23:59:59.999999999
    let nanos = unix_nanos(time).clamp(MIN, MAX);
    let seconds = nanos.div_euclid(NANOS_PER_SEC);
    let micros = nanos.rem_euclid(NANOS_PER_SEC) / 1000;
    let (year, month, day) = civil_from_days(seconds.div_euclid(SECS_PER_DAY));
    let in_day = seconds.rem_euclid(SECS_PER_DAY);
    let mut out = String::with_capacity(27);
    // Writing to a String cannot fail.
    let _ = write!(
        out,
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        in_day / 3600,
        in_day % 3600 / 60,
        in_day % 60
    );
    out
}

/// `time` as RFC 3339 with an explicit offset, to the millisecond: `2026-08-19T02:11:03.123+00:00`
/// (what dead letters carry).
///
/// ```
/// use retry_core::time::format_rfc3339;
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let t = UNIX_EPOCH + Duration::from_millis(1_755_569_463_123);
/// assert_eq!(format_rfc3339(t), "2025-08-19T02:11:03.123+00:00");
/// ```
pub fn format_rfc3339(time: SystemTime) -> String {
    let utc = format_utc(time);
    // `YYYY-MM-DDTHH:MM:SS.mmm` of the fixed-width form, then the offset.
    format!("{}+00:00", &utc[..23])
}

/// Reads an RFC 3339 timestamp with any offset (`Z`, `+09:00`, `-05:30`) and an optional
/// fraction; `None` for anything else.
///
/// ```
/// use retry_core::time::{format_rfc3339, parse_rfc3339};
///
/// let tokyo = parse_rfc3339("2026-08-19T02:11:03+09:00").unwrap();
/// assert_eq!(format_rfc3339(tokyo), "2026-08-18T17:11:03.000+00:00");
/// assert!(parse_rfc3339("2026-08-19 02:11:03").is_none());
/// ```
pub fn parse_rfc3339(text: &str) -> Option<SystemTime> {
    let b = text.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<u32> {
        let digits = text.get(range)?;
        digits
            .bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| digits.parse().ok())?
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &text[19..];
    let mut nanos: i128 = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let digits = fraction.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        let kept = &fraction[..digits.min(9)];
        nanos = i128::from(kept.parse::<u32>().ok()?) * 10i128.pow(9 - kept.len() as u32);
        rest = &fraction[digits..];
    }
    let offset_seconds: i128 = match rest.as_bytes() {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let digits = [*h1, *h2, *m1, *m2];
            if !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            let hours = i128::from((h1 - b'0') * 10 + (h2 - b'0'));
            let minutes = i128::from((m1 - b'0') * 10 + (m2 - b'0'));
            if hours > 23 || minutes > 59 {
                return None;
            }
            let magnitude = hours * 3600 + minutes * 60;
            if *sign == b'+' { magnitude } else { -magnitude }
        }
        _ => return None,
    };
    if !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(i128::from(year), month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let seconds = days_from_civil(i128::from(year), month, day) * SECS_PER_DAY
        + i128::from(hour * 3600 + minute * 60 + second.min(59))
        - offset_seconds;
    from_unix_nanos(seconds * NANOS_PER_SEC + nanos)
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
    let b = text.as_bytes();
    if b.len() != 27
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
        || b[19] != b'.'
        || b[26] != b'Z'
    {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<u32> {
        let digits = text.get(range)?;
        digits
            .bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| digits.parse().ok())?
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second, micros) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..26)?);
    if !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(i128::from(year), month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return None;
    }
    let seconds = days_from_civil(i128::from(year), month, day) * SECS_PER_DAY
        + i128::from(hour * 3600 + minute * 60 + second);
    from_unix_nanos(seconds * NANOS_PER_SEC + i128::from(micros) * 1000)
}

/// The time `nanos` nanoseconds after the Unix epoch (before it when negative), `None` where
/// `SystemTime` cannot hold it. Whole seconds and the rest apart: nanoseconds alone in a `u64`
/// end in the year 2554, and a retention or a `Retry-After` date may lie beyond.
fn from_unix_nanos(nanos: i128) -> Option<SystemTime> {
    let seconds = nanos.div_euclid(NANOS_PER_SEC);
    // In 0..1e9, so it fits.
    let rest = Duration::from_nanos(u64::try_from(nanos.rem_euclid(NANOS_PER_SEC)).ok()?);
    let whole = if seconds >= 0 {
        UNIX_EPOCH.checked_add(Duration::from_secs(u64::try_from(seconds).ok()?))
    } else {
        UNIX_EPOCH.checked_sub(Duration::from_secs(u64::try_from(-seconds).ok()?))
    };
    whole?.checked_add(rest)
}

/// Nanoseconds since the Unix epoch, negative before it.
pub(crate) fn unix_nanos(time: SystemTime) -> i128 {
    // A `Duration` holds at most ~1.8e28 ns, far below i128::MAX (~1.7e38).
    match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i128::try_from(after.as_nanos()).unwrap_or(i128::MAX),
        Err(before) => i128::try_from(before.duration().as_nanos()).map_or(i128::MIN, |n| -n),
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
pub(crate) fn days_from_civil(year: i128, month: u32, day: u32) -> i128 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400; // 0..=399
    let month_from_march = i128::from((month + 9) % 12); // March = 0
    let day_of_year = (153 * month_from_march + 2) / 5 + i128::from(day) - 1; // 0..=365
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The proleptic Gregorian date of a day number since 1970-01-01 (Hinnant's `civil_from_days`).
pub(crate) fn civil_from_days(days: i128) -> (i128, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097; // 0..=146_096
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153; // 0..=11
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1; // 1..=31
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i128::from(month <= 2);
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

pub(crate) fn is_leap_year(year: i128) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

pub(crate) fn days_in_month(year: i128, month: u32) -> u32 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
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
    fn malformed_timestamps_are_rejected() {
        for bad in [
            "",
            "2025-02-30T00:00:00.000000Z",
            "2025-08-19 02:11:03.000000Z",
            "2025-08-19T24:00:00.000000Z",
            "+025-08-19T02:11:03.000000Z",
        ] {
            assert_eq!(parse_utc(bad), None, "{bad}");
        }
    }
}
