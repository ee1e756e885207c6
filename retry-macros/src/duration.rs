//! Durations written as strings ("250ms", "1h30m", "30d"), checked at compile time.

use std::time::Duration;

/// The units in the order they must appear, largest first.
const UNITS: [(&str, u128); 5] = [
    ("d", 86_400_000_000_000),
    ("h", 3_600_000_000_000),
    ("m", 60_000_000_000),
    ("s", 1_000_000_000),
    ("ms", 1_000_000),
];

const EXAMPLES: &str = "e.g. \"250ms\", \"1s\", \"2m\", \"1h30m\" or \"30d\"";

/// Parses `text` as a sum of `<whole number><unit>` parts, units from largest to smallest, each
/// at most once. The error says what is wrong and how to write it.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    if text.is_empty() {
        return Err(format!(
            "empty duration; write a number and a unit, {EXAMPLES}"
        ));
    }
    let mut rest = text;
    let mut total: u128 = 0;
    // Index into UNITS of the last unit used: the next one must come after it.
    let mut last_unit: Option<usize> = None;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!(
                "invalid duration \"{text}\": expected a whole number at `{rest}`; {EXAMPLES}"
            ));
        }
        let (number, after) = rest.split_at(digits);
        let unit_len = after.bytes().take_while(u8::is_ascii_alphabetic).count();
        let (unit, after) = after.split_at(unit_len);
        if unit.is_empty() {
            return Err(match after.chars().next() {
                Some('.') | Some(',') => format!(
                    "invalid duration \"{text}\": fractions are not supported; use a smaller unit (\"1500ms\" rather than \"1.5s\")"
                ),
                _ => format!(
                    "invalid duration \"{text}\": `{number}` has no unit; write \"{number}s\", \"{number}ms\", \"{number}m\", \"{number}h\" or \"{number}d\""
                ),
            });
        }
        let Some(index) = UNITS.iter().position(|(name, _)| *name == unit) else {
            return Err(format!(
                "invalid duration \"{text}\": unknown unit `{unit}`; expected one of `d`, `h`, `m`, `s`, `ms`"
            ));
        };
        if last_unit.is_some_and(|last| index <= last) {
            return Err(format!(
                "invalid duration \"{text}\": units must go from largest to smallest, each at most once (\"1h30m\", not \"30m1h\")"
            ));
        }
        last_unit = Some(index);
        let too_long = || format!("invalid duration \"{text}\": too long");
        let value: u128 = number.parse().map_err(|_| too_long())?;
        total = value
            .checked_mul(UNITS[index].1)
            .and_then(|part| total.checked_add(part))
            .ok_or_else(too_long)?;
        rest = after;
    }
    let secs = u64::try_from(total / 1_000_000_000)
        .map_err(|_| format!("invalid duration \"{text}\": too long"))?;
    // The remainder is below 10^9, so it fits.
    let nanos = (total % 1_000_000_000) as u32;
    Ok(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::parse;
    use std::time::Duration;

    #[test]
    fn accepts_each_unit_and_combinations() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert_eq!(parse("1m500ms"), Ok(Duration::from_millis(60_500)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_malformed_text_with_a_reason() {
        for (text, says) in [
            ("", "empty duration"),
            ("5", "has no unit"),
            ("1.5s", "fractions are not supported"),
            ("5x", "unknown unit `x`"),
            ("30m1h", "largest to smallest"),
            ("1s1s", "largest to smallest"),
            ("-1s", "expected a whole number"),
            ("s", "expected a whole number"),
            (" 1s", "expected a whole number"),
            ("99999999999999999999999999999999999999999d", "too long"),
            ("999999999999999999999d", "too long"),
        ] {
            let err = parse(text).expect_err(text);
            assert!(err.contains(says), "{text:?}: {err}");
        }
    }

    // --- properties --------------------------------------------------------------------------

    use proptest::prelude::*;

    /// The units as the macros spell them, with an independent meaning: a `Duration` built by
    /// `Duration`'s own checked arithmetic, not the parser's nanosecond sums.
    const NAMES: [&str; 5] = ["d", "h", "m", "s", "ms"];

    /// `value` of the unit `NAMES[unit]`, or `None` where it does not fit in a `Duration`.
    fn oracle(value: u128, unit: usize) -> Option<Duration> {
        let secs = |per_unit: u128| {
            value
                .checked_mul(per_unit)
                .and_then(|secs| u64::try_from(secs).ok())
                .map(Duration::from_secs)
        };
        match unit {
            0 => secs(86_400),
            1 => secs(3_600),
            2 => secs(60),
            3 => secs(1),
            _ => {
                let whole = u64::try_from(value / 1_000).ok()?;
                Some(Duration::from_secs(whole) + Duration::from_millis((value % 1_000) as u64))
            }
        }
    }

    /// How the macros' users write a whole-millisecond duration: each non-zero part, largest
    /// unit first (`0ms` for zero).
    fn format(duration: Duration) -> String {
        let mut millis = duration.as_millis();
        let mut text = String::new();
        for (name, size) in [
            ("d", 86_400_000),
            ("h", 3_600_000),
            ("m", 60_000),
            ("s", 1_000),
            ("ms", 1),
        ] {
            if millis >= size {
                text.push_str(&format!("{}{name}", millis / size));
                millis %= size;
            }
        }
        if text.is_empty() {
            text.push_str("0ms");
        }
        text
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
            if let Err(message) = parse(&text) {
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
                None => {
                    let message = parse(&text).expect_err(&text);
                    prop_assert!(message.ends_with("too long"), "{}: {}", text, message);
                }
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
                None => {
                    let message = parse(&text).expect_err(&text);
                    prop_assert!(message.ends_with("too long"), "{}: {}", text, message);
                }
            }
        }

        /// Every whole-millisecond duration, written as the macros' users write it, reads back as
        /// itself.
        #[test]
        fn formatted_durations_round_trip(secs in prop_oneof![0u64..1_000_000, any::<u64>()], millis in 0u32..1_000) {
            let duration = Duration::new(secs, millis * 1_000_000);
            let text = format(duration);
            prop_assert_eq!(parse(&text), Ok(duration), "{}", text);
        }

        #[test]
        fn negative_numbers_are_refused(value in number(), unit in 0..NAMES.len()) {
            let text = format!("-{value}{}", NAMES[unit]);
            let message = parse(&text).expect_err(&text);
            prop_assert!(message.contains("expected a whole number at `-"), "{}: {}", text, message);
        }

        #[test]
        fn fractions_are_refused(whole in number(), fraction in "[0-9]{1,5}", comma in any::<bool>(), unit in 0..NAMES.len()) {
            let text = format!("{whole}{}{fraction}{}", if comma { ',' } else { '.' }, NAMES[unit]);
            let message = parse(&text).expect_err(&text);
            prop_assert!(message.contains("fractions are not supported"), "{}: {}", text, message);
        }
    }
}
