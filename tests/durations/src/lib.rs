//! One table of duration strings, valid and invalid, that every reader of the duration grammar
//! must agree on: `#[retryable(base = "...")]` at compile time, a `Policy` read from JSON or
//! TOML (feature `serde`), and the `retry-dlq` command's `--max-age`, `--timeout`, ....
//!
//! The root package's `tests/duration_grammar.rs` runs it through the attribute (valid strings
//! expanded by [`valid_durations!`], invalid ones in `tests/ui/duration_table.rs`, whose
//! `.stderr` it reads) and through `Policy`'s `Deserialize`; `retry-dlq/tests/durations.rs` runs
//! it through the command. Each invalid string must be refused by all three with the grammar's
//! own message (`retry_core::duration::parse`'s error), which contains the words given here.

use std::time::Duration;

/// Calls `$then! { ("text", seconds, nanoseconds), ... }` with every valid string of the table
/// and the duration it means; the attribute needs the strings as literal tokens, so the table
/// of valid strings is written once, here.
#[macro_export]
macro_rules! valid_durations {
    ($then:ident) => {
        $then! {
            ("250ms", 0, 250_000_000),
            ("1s", 1, 0),
            ("2m", 120, 0),
            ("1h30m", 5_400, 0),
            ("30d", 2_592_000, 0),
            ("1m500ms", 60, 500_000_000),
            ("1d2h3m4s5ms", 93_784, 5_000_000),
            ("750us", 0, 750_000),
            ("10ns", 0, 10),
            ("0s", 0, 0),
            ("0h90m", 5_400, 0),
            ("1000000s", 1_000_000, 0),
        }
    };
}

macro_rules! valid_table {
    ($(($text:literal, $secs:expr, $nanos:expr)),* $(,)?) => {
        /// Every valid string of the table and the duration it means.
        pub const VALID: &[(&str, Duration)] = &[$(($text, Duration::new($secs, $nanos))),*];
    };
}

valid_durations!(valid_table);

/// Every invalid string of the table, with words its error message contains.
pub const INVALID: &[(&str, &str)] = &[
    ("", "empty duration"),
    ("5", "`5` has no unit"),
    ("30 seconds", "`30` has no unit"),
    ("1.5s", "fractions are not supported"),
    (
        "0.5s",
        "use a smaller unit (\"500ms\" rather than \"0.5s\")",
    ),
    (
        "1,5s",
        "use a smaller unit (\"1500ms\" rather than \"1,5s\")",
    ),
    ("1.5ns", "`ns` is the smallest unit"),
    ("5x", "unknown unit `x`"),
    ("5sec", "unknown unit `sec`"),
    ("5S", "units are lower case: `s`"),
    ("5µs", "write microseconds as `us`"),
    ("30m1h", "units must go from largest to smallest"),
    ("1s1s", "units must go from largest to smallest"),
    ("-1s", "expected a whole number at `-1s`"),
    ("+1s", "expected a whole number at `+1s`"),
    ("s", "expected a whole number at `s`"),
    (" 1s", "spaces are not allowed; write \"1s\""),
    ("1s ", "spaces are not allowed; write \"1s\""),
    ("1h 30m", "spaces are not allowed; write \"1h30m\""),
    ("99999999999999999999999999999999999999999d", "too long"),
    ("213503982334602d", "too long"),
];
