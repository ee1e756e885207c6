//! The one duration grammar of [`retry-core`](https://docs.rs/retry-core): `"250ms"`, `"1s"`,
//! `"2m"`, `"1h30m"`, `"30d"`.
//!
//! `#[retryable(base = "250ms")]` reads it at compile time, a `Policy` read from configuration
//! (`base = "250ms"`) reads it at run time, and the `retry-dlq` command reads `--timeout 250ms`
//! with it, so one string means one duration everywhere. Use it through `retry_core::duration`;
//! this crate exists so the proc-macro crate, which cannot depend on `retry-core`, parses with
//! the same code.
//!
//! # The grammar
//!
//! One or more parts `<whole number><unit>`, with nothing between or around them:
//!
//! | unit | means |
//! | --- | --- |
//! | `d` | day, exactly 24 hours (no calendar, no time zones) |
//! | `h` | hour |
//! | `m` | minute |
//! | `s` | second |
//! | `ms` | millisecond |
//! | `us` | microsecond |
//! | `ns` | nanosecond |
//!
//! Units go from largest to smallest, each at most once (`"1h30m"`, not `"30m1h"`); a part may
//! be zero (`"0s"`). Refused, each with a message that says how to write it instead: fractions
//! (`"1.5s"`: write `"1500ms"`), a number without a unit (`"30"`), unknown units (`"5sec"`,
//! `"5µs"`: write `"5us"`), upper case (`"5S"`), signs, spaces, and anything longer than
//! [`Duration::MAX`].
//!
//! [`format()`] writes the canonical form: each non-zero part, largest first (`"1m30s"` for 90
//! seconds, `"0s"` for zero), which [`parse`] reads back as the same `Duration`, down to the
//! nanosecond.
//!
//! ```
//! use std::time::Duration;
//!
//! assert_eq!(retry_duration::parse("1h30m"), Ok(Duration::from_secs(5400)));
//! assert_eq!(retry_duration::format(Duration::from_millis(90_500)).to_string(), "1m30s500ms");
//!
//! let error = retry_duration::parse("1.5s").unwrap_err();
//! assert_eq!(
//!     error.to_string(),
//!     "invalid duration \"1.5s\": fractions are not supported; use a smaller unit (\"1500ms\" rather than \"1.5s\")"
//! );
//! ```

#![warn(missing_docs, rust_2018_idioms, unreachable_pub)]

use std::fmt;
use std::time::Duration;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The units in the order they must appear, largest first, with their length in nanoseconds.
const UNITS: [(&str, u128); 7] = [
    ("d", 86_400 * NANOS_PER_SEC),
    ("h", 3_600 * NANOS_PER_SEC),
    ("m", 60 * NANOS_PER_SEC),
    ("s", NANOS_PER_SEC),
    ("ms", 1_000_000),
    ("us", 1_000),
    ("ns", 1),
];

const EXAMPLES: &str = "e.g. \"250ms\", \"1s\", \"2m\", \"1h30m\" or \"30d\"";

/// Text that is not a duration of this grammar; its `Display` says what is wrong and how to
/// write it, in the words `#[retryable]` shows at the literal.
///
/// ```
/// let error = retry_duration::parse("30 seconds").unwrap_err();
/// assert!(error.to_string().contains("`30` has no unit; write \"30s\""));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurationError {
    message: String,
}

impl DurationError {
    fn new(message: String) -> Self {
        DurationError { message }
    }
}

impl fmt::Display for DurationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for DurationError {}

/// Parses `text` as a sum of `<whole number><unit>` parts, units from largest to smallest, each
/// at most once (see the [grammar](crate#the-grammar)).
///
/// ```
/// use std::time::Duration;
/// use retry_duration::parse;
///
/// assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
/// assert_eq!(parse("1m500ms"), Ok(Duration::from_millis(60_500)));
/// assert_eq!(parse("30d"), Ok(Duration::from_secs(30 * 86_400)));
/// assert!(parse("30m1h").is_err(), "largest unit first");
/// ```
pub fn parse(text: &str) -> Result<Duration, DurationError> {
    if text.is_empty() {
        return Err(DurationError::new(format!(
            "empty duration; write a number and a unit, {EXAMPLES}"
        )));
    }
    let invalid = |why: String| DurationError::new(format!("invalid duration \"{text}\": {why}"));
    let too_long = || invalid("too long".to_owned());
    let mut rest = text;
    let mut total: u128 = 0;
    // Index into UNITS of the last unit used: the next one must come after it.
    let mut last_unit: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            if rest.starts_with(char::is_whitespace) {
                let joined: String = text.split_whitespace().collect();
                return Err(invalid(format!(
                    "spaces are not allowed; write \"{joined}\""
                )));
            }
            return Err(invalid(format!(
                "expected a whole number at `{rest}`; {EXAMPLES}"
            )));
        }
        let (number, after) = rest.split_at(digits);
        // Any letters, not only ASCII ones, so "1µs" is an unknown unit, not a missing one.
        let unit_len = after
            .chars()
            .take_while(|c| c.is_alphabetic())
            .map(char::len_utf8)
            .sum();
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(invalid(match after.chars().next() {
                Some('.' | ',') => {
                    let fraction_and_unit = &after[1..];
                    let written = &text[..text.len() - rest.len()];
                    let unit = fraction_and_unit.trim_start_matches(|c: char| c.is_ascii_digit());
                    // The same text with this last part in a smaller unit, where that is exact.
                    match in_a_smaller_unit(number, fraction_and_unit) {
                        Some(part) => format!(
                            "fractions are not supported; use a smaller unit (\"{written}{part}\" rather than \"{text}\")"
                        ),
                        None if unit == "ns" => {
                            "fractions are not supported, and `ns` is the smallest unit".to_owned()
                        }
                        None => "fractions are not supported; use a smaller unit (\"1500ms\" rather than \"1.5s\")".to_owned(),
                    }
                }
                _ => format!(
                    "`{number}` has no unit; write \"{number}s\", \"{number}ms\", \"{number}m\", \"{number}h\" or \"{number}d\""
                ),
            }));
        }
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            let lower = unit.to_lowercase();
            let hint = if UNITS.iter().any(|(name, _)| *name == lower) {
                format!("; units are lower case: `{lower}`")
            } else if matches!(unit, "µs" | "μs") {
                "; write microseconds as `us`".to_owned()
            } else {
                "; expected one of `d`, `h`, `m`, `s`, `ms`, `us`, `ns`".to_owned()
            };
            return Err(invalid(format!("unknown unit `{unit}`{hint}")));
        };
        if last_unit.is_some_and(|last| index <= last) {
            return Err(invalid(
                "units must go from largest to smallest, each at most once (\"1h30m\", not \"30m1h\")".to_owned(),
            ));
        }
        last_unit = Some(index);
        // More digits than a u128 holds is far longer than any `Duration`.
        let value: u128 = number.parse().map_err(|_| too_long())?;
        total = value
            .checked_mul(UNITS[index].1)
            .and_then(|part| total.checked_add(part))
            .ok_or_else(too_long)?;
        rest = after;
    }
    let secs = u64::try_from(total / NANOS_PER_SEC).map_err(|_| too_long())?;
    // The remainder is below 10^9, so it fits.
    let nanos = (total % NANOS_PER_SEC) as u32;
    Ok(Duration::new(secs, nanos))
}

/// `<number>.<fraction><unit>`, the last part of a text, as a whole number of the largest
/// smaller unit that holds it exactly (`1.5s` → `1500ms`, `0.25h` → `15m`), if there is one.
fn in_a_smaller_unit(number: &str, fraction_and_unit: &str) -> Option<String> {
    let digits = fraction_and_unit
        .bytes()
        .take_while(u8::is_ascii_digit)
        .count();
    let (fraction, unit) = fraction_and_unit.split_at(digits);
    let index = UNITS.iter().position(|(name, _)| *name == unit)?;
    let size = UNITS[index].1;
    // 10^38 is the largest power of ten in a u128; far more digits than any unit needs.
    let scale = 10u128.checked_pow(u32::try_from(digits).ok().filter(|d| *d > 0)?)?;
    let fraction = fraction.parse::<u128>().ok()?.checked_mul(size)?;
    if fraction % scale != 0 {
        return None;
    }
    let total = number
        .parse::<u128>()
        .ok()?
        .checked_mul(size)?
        .checked_add(fraction / scale)?;
    let (name, size) = UNITS[index + 1..]
        .iter()
        .find(|(_, size)| total % size == 0)?;
    Some(format!("{}{name}", total / size))
}

/// The canonical text of `duration`: each non-zero part, largest unit first (`"1h30m"`,
/// `"1s500ms"`), `"0s"` for zero. [`parse`] reads it back as `duration`, for every `Duration`.
///
/// ```
/// use std::time::Duration;
/// use retry_duration::{format, parse};
///
/// assert_eq!(format(Duration::from_secs(5400)).to_string(), "1h30m");
/// assert_eq!(format(Duration::ZERO).to_string(), "0s");
/// let odd = Duration::new(86_401, 1_500);
/// assert_eq!(format(odd).to_string(), "1d1s1us500ns");
/// assert_eq!(parse(&format(odd).to_string()), Ok(odd));
/// ```
pub fn format(duration: Duration) -> Formatted {
    Formatted(duration)
}

/// A `Duration` written in the canonical form; see [`format()`]. Width and alignment (`{:>8}`)
/// apply to the whole text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Formatted(Duration);

impl fmt::Display for Formatted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if f.width().is_none() {
            return write_parts(self.0, f);
        }
        // Padding applies to the whole text, so write it unpadded first.
        let mut text = String::new();
        write_parts(self.0, &mut text)?;
        f.pad(&text)
    }
}

/// Each non-zero part of `duration`, largest unit first; `0s` for zero.
fn write_parts(duration: Duration, out: &mut impl fmt::Write) -> fmt::Result {
    let mut nanos = duration.as_nanos();
    if nanos == 0 {
        return out.write_str("0s");
    }
    for (name, size) in UNITS {
        if nanos >= size {
            write!(out, "{}{name}", nanos / size)?;
            nanos %= size;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{format, parse};
    use std::time::Duration;

    fn message(text: &str) -> String {
        parse(text).expect_err(text).to_string()
    }

    #[test]
    fn accepts_each_unit_and_combinations() {
        for (text, expected) in [
            ("250ms", Duration::from_millis(250)),
            ("1s", Duration::from_secs(1)),
            ("2m", Duration::from_secs(120)),
            ("1h30m", Duration::from_secs(5400)),
            ("30d", Duration::from_secs(30 * 86_400)),
            ("1m500ms", Duration::from_millis(60_500)),
            ("0s", Duration::ZERO),
            ("750us", Duration::from_micros(750)),
            ("1ms500us", Duration::from_micros(1500)),
            ("10ns", Duration::from_nanos(10)),
            ("1d2h3m4s5ms6us7ns", Duration::new(93_784, 5_006_007)),
        ] {
            assert_eq!(parse(text), Ok(expected), "{text}");
        }
    }

    #[test]
    fn rejects_malformed_text_with_a_reason() {
        for (text, says) in [
            ("", "empty duration"),
            ("5", "has no unit"),
            (
                "1.5s",
                "fractions are not supported; use a smaller unit (\"1500ms\" rather than \"1.5s\")",
            ),
            (
                "0.05s",
                "use a smaller unit (\"50ms\" rather than \"0.05s\")",
            ),
            ("1h0.25h", "(\"1h15m\" rather than \"1h0.25h\")"),
            (
                "1h0,25m",
                "use a smaller unit (\"1h15s\" rather than \"1h0,25m\")",
            ),
            ("2.5d", "(\"60h\" rather than \"2.5d\")"),
            (
                "1.5ns",
                "fractions are not supported, and `ns` is the smallest unit",
            ),
            ("1.0000000001s", "(\"1500ms\" rather than \"1.5s\")"),
            ("1.5s200ms", "(\"1500ms\" rather than \"1.5s\")"),
            ("1.5", "(\"1500ms\" rather than \"1.5s\")"),
            (
                "5x",
                "unknown unit `x`; expected one of `d`, `h`, `m`, `s`, `ms`, `us`, `ns`",
            ),
            ("5S", "unknown unit `S`; units are lower case: `s`"),
            ("5Ms", "units are lower case: `ms`"),
            ("5µs", "unknown unit `µs`; write microseconds as `us`"),
            ("5sé", "unknown unit `sé`"),
            ("30m1h", "largest to smallest"),
            ("1s1s", "largest to smallest"),
            ("-1s", "expected a whole number"),
            ("s", "expected a whole number"),
            (" 1s", "spaces are not allowed; write \"1s\""),
            ("1s ", "spaces are not allowed; write \"1s\""),
            ("1h 30m", "spaces are not allowed; write \"1h30m\""),
            ("99999999999999999999999999999999999999999d", "too long"),
            ("999999999999999999999d", "too long"),
        ] {
            let err = message(text);
            assert!(err.contains(says), "{text:?}: {err}");
        }
    }

    #[test]
    fn the_longest_duration_is_read_and_one_nanosecond_more_is_too_long() {
        let longest = format(Duration::MAX).to_string();
        assert_eq!(parse(&longest), Ok(Duration::MAX));
        let seconds = format!("{}s999999999ns", u64::MAX);
        assert_eq!(parse(&seconds), Ok(Duration::MAX));
        let past = format!("{}s1000000000ns", u64::MAX);
        assert!(message(&past).ends_with("too long"));
    }

    #[test]
    fn formats_largest_unit_first_and_pads_as_a_whole() {
        assert_eq!(format(Duration::from_secs(90)).to_string(), "1m30s");
        assert_eq!(format(Duration::from_millis(250)).to_string(), "250ms");
        assert_eq!(
            format(Duration::from_secs(86_400 + 3_600)).to_string(),
            "1d1h"
        );
        assert_eq!(format(Duration::from_nanos(1)).to_string(), "1ns");
        assert_eq!(
            format!("[{:>7}]", format(Duration::from_secs(90))),
            "[  1m30s]"
        );
        assert_eq!(format!("[{:<4}]", format(Duration::ZERO)), "[0s  ]");
    }

    // --- properties --------------------------------------------------------------------------

    use proptest::prelude::*;

    /// The units as people spell them, with an independent meaning: a `Duration` built by
    /// `Duration`'s own checked arithmetic, not the parser's nanosecond sums.
    const NAMES: [&str; 7] = ["d", "h", "m", "s", "ms", "us", "ns"];

    /// `value` of the unit `NAMES[unit]`, or `None` where it does not fit in a `Duration`.
    fn oracle(value: u128, unit: usize) -> Option<Duration> {
        let secs = |per_unit: u128| {
            value
                .checked_mul(per_unit)
                .and_then(|secs| u64::try_from(secs).ok())
                .map(Duration::from_secs)
        };
        // `per_second` of the unit make one second.
        let fraction = |per_second: u128, unit: fn(u64) -> Duration| {
            let whole = u64::try_from(value / per_second).ok()?;
            Some(Duration::from_secs(whole) + unit((value % per_second) as u64))
        };
        match unit {
            0 => secs(86_400),
            1 => secs(3_600),
            2 => secs(60),
            3 => secs(1),
            4 => fraction(1_000, Duration::from_millis),
            5 => fraction(1_000_000, Duration::from_micros),
            _ => fraction(1_000_000_000, Duration::from_nanos),
        }
    }

    /// Whole numbers as people and mistakes write them: small, near a unit's overflow, any
    /// `u64`, and more digits than any integer type holds.
    fn number() -> impl Strategy<Value = String> {
        prop_oneof![
            (0u64..100_000).prop_map(|n| n.to_string()),
            (0u64..=u64::MAX / 86_400 + 2).prop_map(|n| n.to_string()),
            any::<u64>().prop_map(|n| n.to_string()),
            "[0-9]{20,60}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn never_panics_on_any_text(text in ".*") {
            let _ = parse(&text);
        }

        #[test]
        fn never_panics_on_duration_like_text(text in "[-+ .,0-9]{0,25}[a-zA-Z.,]{0,3}([0-9]{0,25}[a-zA-Z]{0,3}){0,4}") {
            if let Err(error) = parse(&text) {
                let message = error.to_string();
                prop_assert!(message.starts_with("empty duration") || message.starts_with("invalid duration"), "{}", message);
            }
        }

        /// One part: exactly `value` of `unit`, or "too long" when that does not fit a `Duration`
        /// (never a wrapped, shorter one).
        #[test]
        fn one_part_means_its_value_or_is_too_long(
            value in prop_oneof![0u128..1_000_000, any::<u64>().prop_map(u128::from), any::<u128>()],
            unit in 0..NAMES.len(),
        ) {
            let text = format!("{value}{}", NAMES[unit]);
            match oracle(value, unit) {
                Some(expected) => prop_assert_eq!(parse(&text), Ok(expected), "{}", text),
                None => prop_assert!(message(&text).ends_with("too long"), "{}: {}", text, message(&text)),
            }
        }

        /// Any numbers in any subset of the units, in order: their sum, or "too long".
        #[test]
        fn parts_add_up_or_are_too_long(parts in proptest::collection::vec((number(), any::<bool>()), NAMES.len())) {
            let mut text = String::new();
            let mut expected = Some(Duration::ZERO);
            for (unit, (digits, used)) in parts.iter().enumerate() {
                if !used {
                    continue;
                }
                text.push_str(digits);
                text.push_str(NAMES[unit]);
                // Past u128 (39 digits), far more than any duration holds.
                expected = match (expected, digits.parse::<u128>().ok()) {
                    (Some(total), Some(value)) => oracle(value, unit).and_then(|part| total.checked_add(part)),
                    _ => None,
                };
            }
            prop_assume!(!text.is_empty());
            match expected {
                Some(expected) => prop_assert_eq!(parse(&text), Ok(expected), "{}", text),
                None => prop_assert!(message(&text).ends_with("too long"), "{}: {}", text, message(&text)),
            }
        }

        /// Every `Duration`, written in the canonical form, reads back as itself.
        #[test]
        fn formatted_durations_round_trip(secs in prop_oneof![0u64..1_000_000, any::<u64>()], nanos in prop_oneof![Just(0u32), 0u32..1_000_000_000]) {
            let duration = Duration::new(secs, nanos);
            let text = format(duration).to_string();
            prop_assert_eq!(parse(&text), Ok(duration), "{}", text);
        }

        #[test]
        fn negative_numbers_are_refused(value in number(), unit in 0..NAMES.len()) {
            let text = format!("-{value}{}", NAMES[unit]);
            prop_assert!(message(&text).contains("expected a whole number at `-"), "{}: {}", text, message(&text));
        }

        #[test]
        fn fractions_are_refused(whole in number(), fraction in "[0-9]{1,5}", comma in any::<bool>(), unit in 0..NAMES.len()) {
            let text = format!("{whole}{}{fraction}{}", if comma { ',' } else { '.' }, NAMES[unit]);
            prop_assert!(message(&text).contains("fractions are not supported"), "{}: {}", text, message(&text));
        }
    }
}
