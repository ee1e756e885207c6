//! Durations on the command line, in retry-core's one grammar (`500ms`, `30s`, `15m`, `1h30m`,
//! `2d`: what `#[retryable(base = "...")]` and a `Policy` read from configuration accept), and
//! ages as people read them.

use std::time::Duration;

/// A duration option's value: the grammar of `retry_core::duration::parse`, and above zero
/// (every duration option here bounds something: an age, a retention, a send). The error says
/// what is wrong in words, for clap to print after the option's name.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let duration = retry_core::duration::parse(text).map_err(|error| error.to_string())?;
    if duration.is_zero() {
        return Err(format!(
            "duration \"{text}\" is zero; give one longer than zero, e.g. \"500ms\" or \"30s\""
        ));
    }
    Ok(duration)
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
    fn reads_the_library_grammar_above_zero() {
        for (text, expected) in [
            ("500ms", Duration::from_millis(500)),
            ("30s", Duration::from_secs(30)),
            ("15m", Duration::from_secs(900)),
            ("1h30m", Duration::from_secs(5400)),
            ("1d12h", Duration::from_secs(129_600)),
        ] {
            assert_eq!(parse_duration(text), Ok(expected), "{text}");
        }
        for bad in ["", "1", "1x", "1.5h", "-1h", " 90s", "1 h", "1hh"] {
            assert_eq!(
                parse_duration(bad),
                Err(retry_core::duration::parse(bad).unwrap_err().to_string()),
                "{bad}"
            );
        }
        for zero in ["0s", "0h0m", "0ms"] {
            assert!(
                parse_duration(zero).unwrap_err().contains("is zero"),
                "{zero}"
            );
        }
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
