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
}
