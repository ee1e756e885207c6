//! Durations as people type them (`30s`, `15m`, `1h`, `2d`, `1h30m`) and ages as people read them.

use std::time::Duration;

/// Parses `<number><unit>` pairs, units `s`, `m`, `h`, `d`: `30s`, `15m`, `1h`, `2d`, `1h30m`.
/// A bare number, an unknown unit, zero in total or an overflow is an error (said in words, for
/// clap to print).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("`{text}` is not a duration: write e.g. 30s, 15m, 1h, 2d or 1h30m");
    let mut rest = text.trim();
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(invalid());
        }
        let number: u64 = rest[..digits].parse().map_err(|_| invalid())?;
        let unit = rest[digits..].chars().next().ok_or_else(invalid)?;
        let seconds_per_unit = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(invalid()),
        };
        total = number
            .checked_mul(seconds_per_unit)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(|| format!("`{text}` is too long a duration"))?;
        rest = &rest[digits + unit.len_utf8()..];
    }
    if total == 0 {
        return Err(format!("`{text}` is zero: give a duration above zero"));
    }
    Ok(Duration::from_secs(total))
}

/// An age in its two largest units, a zero second one left out: `2d 3h`, `1h 5m`, `1h`,
/// `4m 12s`, `42s`.
pub fn format_age(age: Duration) -> String {
    let secs = age.as_secs();
    let (days, hours, minutes, seconds) = (
        secs / 86_400,
        secs % 86_400 / 3600,
        secs % 3600 / 60,
        secs % 60,
    );
    let (first, second) = if days > 0 {
        ((days, 'd'), (hours, 'h'))
    } else if hours > 0 {
        ((hours, 'h'), (minutes, 'm'))
    } else if minutes > 0 {
        ((minutes, 'm'), (seconds, 's'))
    } else {
        return format!("{seconds}s");
    };
    if second.0 == 0 {
        format!("{}{}", first.0, first.1)
    } else {
        format!("{}{} {}{}", first.0, first.1, second.0, second.1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_usual_units_and_combinations() {
        for (text, secs) in [
            ("30s", 30),
            ("15m", 900),
            ("1h", 3600),
            ("2d", 172_800),
            ("1h30m", 5400),
            (" 90s ", 90),
            ("1d12h", 129_600),
        ] {
            assert_eq!(
                parse_duration(text),
                Ok(Duration::from_secs(secs)),
                "{text}"
            );
        }
    }

    #[test]
    fn rejects_what_it_cannot_read() {
        for bad in [
            "",
            "1",
            "h",
            "1x",
            "1.5h",
            "-1h",
            "1 h",
            "0s",
            "0h0m",
            "1hh",
            "99999999999999999999s",
        ] {
            let error = parse_duration(bad).unwrap_err();
            assert!(error.contains(&format!("`{bad}`")), "{bad}: {error}");
        }
        assert!(
            parse_duration("300000000000000d")
                .unwrap_err()
                .contains("too long")
        );
    }

    #[test]
    fn ages_show_two_units() {
        assert_eq!(format_age(Duration::from_secs(42)), "42s");
        assert_eq!(format_age(Duration::from_secs(252)), "4m 12s");
        assert_eq!(format_age(Duration::from_secs(3900)), "1h 5m");
        assert_eq!(
            format_age(Duration::from_secs(2 * 86_400 + 3 * 3600 + 7)),
            "2d 3h"
        );
        assert_eq!(format_age(Duration::from_secs(3600 + 59)), "1h");
        assert_eq!(format_age(Duration::from_secs(86_400)), "1d");
        assert_eq!(format_age(Duration::ZERO), "0s");
    }
}
