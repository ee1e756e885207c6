//! What the commands compute and print, apart from any store: pure functions of the letters.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use retry_core::dlq::{DeadLetter, FailureClass};
use retry_core::time::format_rfc3339;

use crate::duration::format_age;

/// What is pending, summed up: the store's counts, its oldest letter, and (when asked) the
/// pending letters counted by reason.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    /// Pending letters.
    pub total: u64,
    /// Letters per class, `system` then `data` (both always present).
    pub by_class: [(FailureClass, u64); 2],
    /// Pending letters a redrive run holds a lease on.
    pub leased: u64,
    /// Resolved letters not purged yet.
    pub resolved: u64,
    /// The letter with the earliest first failure. (A store fails a read of a time that is
    /// not RFC 3339, so every oldest letter has an age.)
    pub oldest: Option<Oldest>,
    /// Letters per reason, most frequent first (ties by reason); `None` when not counted.
    pub reasons: Option<Vec<(String, u64)>>,
}

/// The letter that has waited longest.
#[derive(Debug, Clone, PartialEq)]
pub struct Oldest {
    pub msg_id: String,
    /// When it first failed.
    pub first_failed_at: SystemTime,
    /// How long ago; zero when the time lies in the future (clock skew).
    pub age: Duration,
    /// The time lies in the future.
    pub in_future: bool,
}

impl Oldest {
    /// The letter `msg_id`, first failed at `first_failed_at`, seen at `now`.
    pub fn at(msg_id: &str, first_failed_at: SystemTime, now: SystemTime) -> Oldest {
        let (age, in_future) = match now.duration_since(first_failed_at) {
            Ok(age) => (age, false),
            Err(_) => (Duration::ZERO, true),
        };
        Oldest {
            msg_id: msg_id.to_owned(),
            first_failed_at,
            age,
            in_future,
        }
    }
}

/// Pending letters counted by reason, a page at a time.
#[derive(Debug, Default)]
pub struct Reasons(HashMap<String, u64>);

impl Reasons {
    /// Counts `letters` in.
    pub fn add(&mut self, letters: &[DeadLetter]) {
        for letter in letters {
            *self.0.entry(letter.reason.clone()).or_default() += 1;
        }
    }
}

impl Stats {
    /// The store's `counts` and its `oldest` pending letter, at `now`.
    pub fn new(
        counts: &retry_core::dlq::Stats,
        oldest: Option<&DeadLetter>,
        now: SystemTime,
    ) -> Stats {
        let oldest = oldest.map(|letter| Oldest::at(&letter.msg_id, letter.first_failed_at, now));
        Stats {
            total: counts.pending,
            by_class: [
                (FailureClass::System, counts.system),
                (FailureClass::Data, counts.data),
            ],
            leased: counts.leased,
            resolved: counts.resolved,
            oldest,
            reasons: None,
        }
    }

    /// The same, with the letters counted by reason.
    pub fn with_reasons(mut self, reasons: Reasons) -> Stats {
        let mut reasons: Vec<(String, u64)> = reasons.0.into_iter().collect();
        reasons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        self.reasons = Some(reasons);
        self
    }

    /// The report `stats` prints, at most `top` reasons.
    pub fn render(&self, top: usize) -> String {
        let mut out = self.render_pending();
        if self.total == 0 && self.resolved == 0 {
            return out;
        }
        out.push_str(&self.render_classes());
        // Writing to a String cannot fail.
        let _ = writeln!(out, "leased by a redrive run: {}", self.leased);
        let _ = writeln!(out, "resolved, kept until purged: {}", self.resolved);
        out.push_str(&self.render_reasons(top));
        out
    }

    /// The first lines of the report: how many are pending, and the oldest first failure.
    pub fn render_pending(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "pending: {}", self.total);
        match &self.oldest {
            Some(oldest) => {
                let age = if oldest.in_future {
                    "in the future: check the clocks".to_owned()
                } else {
                    format!("{} ago", format_age(oldest.age))
                };
                let _ = writeln!(
                    out,
                    "oldest first failure: {} ({age}; msg_id {})",
                    format_rfc3339(oldest.first_failed_at),
                    one_line(&oldest.msg_id)
                );
            }
            None => {
                let _ = writeln!(out, "oldest first failure: -");
            }
        }
        out
    }

    /// The letters by class.
    pub fn render_classes(&self) -> String {
        let mut out = String::from("by class:\n");
        for (class, n) in &self.by_class {
            let _ = writeln!(out, "  {n:>7}  {class}");
        }
        out
    }

    /// At most `top` reasons, most frequent first, and how many letters the others hold; empty
    /// when the reasons were not counted.
    pub fn render_reasons(&self, top: usize) -> String {
        let mut out = String::new();
        let Some(reasons) = &self.reasons else {
            return out;
        };
        let shown = top.min(reasons.len());
        let _ = writeln!(out, "top reasons ({shown} of {} distinct):", reasons.len());
        for (reason, n) in &reasons[..shown] {
            let _ = writeln!(out, "  {n:>7}  {}", truncate(&one_line(reason), 120));
        }
        let rest: u64 = reasons[shown..].iter().map(|(_, n)| n).sum();
        if rest > 0 {
            let _ = writeln!(
                out,
                "  {rest:>7}  (other reasons: {} more)",
                reasons.len() - shown
            );
        }
        out
    }
}

/// What `stats --check` decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to alert on.
    Ok(String),
    /// Something to alert on.
    Alert(String),
}

/// Alert when anything is pending; with `max_age`, only when the oldest letter is older than it.
pub fn check(stats: &Stats, max_age: Option<Duration>) -> Verdict {
    if stats.total == 0 {
        return Verdict::Ok("nothing pending".to_owned());
    }
    let Some(max_age) = max_age else {
        return Verdict::Alert(format!("{} letter(s) pending", stats.total));
    };
    // As the option is written (`1h30m`, `500ms`), not rounded as an age.
    let limit = retry_core::duration::format(max_age);
    match &stats.oldest {
        Some(oldest) if oldest.age > max_age => Verdict::Alert(format!(
            "{} letter(s) pending, the oldest ({}) failed {} ago, longer than {limit}",
            stats.total,
            one_line(&oldest.msg_id),
            format_age(oldest.age)
        )),
        Some(oldest) => Verdict::Ok(format!(
            "{} letter(s) pending, the oldest failed {} ago, within {limit}",
            stats.total,
            format_age(oldest.age)
        )),
        // Unreachable: a store that counts pending letters has an oldest one.
        None => Verdict::Alert(format!("{} letter(s) pending", stats.total)),
    }
}

/// The `list` line of a letter: msg_id, class, attempts, first_failed_at, reason; tab-separated,
/// control characters escaped so a letter is always one line.
pub fn list_line(letter: &DeadLetter) -> String {
    format!(
        "{}\t{}\t{}\t{}\t{}",
        one_line(&letter.msg_id),
        letter.class,
        letter.attempts,
        format_rfc3339(letter.first_failed_at),
        one_line(&letter.reason)
    )
}

/// `text` with control characters (tabs and newlines included) escaped as `\t`, `\n`, `\u{..}`.
pub fn one_line(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_owned();
    }
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// At most `max_chars` characters of `text`, with `…` when cut.
pub fn truncate(text: &str, max_chars: usize) -> String {
    match text.char_indices().nth(max_chars) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use retry_core::time::parse_rfc3339;

    fn at(text: &str) -> SystemTime {
        parse_rfc3339(text).unwrap()
    }

    fn letter(id: &str, class: FailureClass, reason: &str, failed: SystemTime) -> DeadLetter {
        DeadLetter {
            msg_id: id.to_owned(),
            original: serde_json::json!({"id": id}),
            reason: reason.to_owned(),
            attempts: 5,
            first_failed_at: failed,
            last_failed_at: failed,
            trace_id: "t".to_owned(),
            class,
            error_type: "E".to_owned(),
            idempotency_key: None,
            source: None,
            redacted: false,
            key_scope: None,
            key_expires_at: None,
            history: Vec::new(),
            resolved: None,
        }
    }

    /// What `stats` makes of `letters`, counted as a store counts them.
    fn of(letters: &[DeadLetter], now: SystemTime) -> Stats {
        let mut counts = retry_core::dlq::Stats::default();
        counts.pending = letters.len() as u64;
        counts.system = letters
            .iter()
            .filter(|l| l.class == FailureClass::System)
            .count() as u64;
        counts.data = counts.pending - counts.system;
        // Stores take letters by first failure, then msg_id.
        let oldest = letters
            .iter()
            .min_by_key(|l| (l.first_failed_at, l.msg_id.clone()));
        let mut reasons = Reasons::default();
        reasons.add(letters);
        Stats::new(&counts, oldest, now).with_reasons(reasons)
    }

    fn ago(now: SystemTime, secs: u64) -> SystemTime {
        now - Duration::from_secs(secs)
    }

    #[test]
    fn counts_by_class_and_reason_and_finds_the_oldest_across_offsets() {
        let now = at("2026-08-19T12:00:00Z");
        let letters = [
            letter("a", FailureClass::System, "503", at("2026-08-19T11:00:00Z")),
            // 02:30 UTC: the oldest, though its text sorts after "2026-08-19T11..".
            letter(
                "b",
                FailureClass::System,
                "503",
                at("2026-08-19T11:30:00+09:00"),
            ),
            letter("c", FailureClass::Data, "400", at("2026-08-19T11:59:00Z")),
        ];
        let stats = of(&letters, now);
        assert_eq!(stats.total, 3);
        assert_eq!(
            stats.by_class,
            [(FailureClass::System, 2), (FailureClass::Data, 1)]
        );
        assert_eq!(
            stats.reasons.as_deref(),
            Some(&[("503".to_owned(), 2), ("400".to_owned(), 1)][..])
        );
        let oldest = stats.oldest.as_ref().unwrap();
        assert_eq!(oldest.msg_id, "b");
        assert_eq!(oldest.age, Duration::from_secs(9 * 3600 + 30 * 60));
        let text = stats.render(1);
        assert!(text.contains("pending: 3\n"), "{text}");
        assert!(
            // Printed as the stores write times: in UTC, to the millisecond.
            text.contains("2026-08-19T02:30:00.000+00:00 (9h 30m ago; msg_id b)"),
            "{text}"
        );
        assert!(
            text.contains("top reasons (1 of 2 distinct):\n        2  503\n"),
            "{text}"
        );
        assert!(
            text.contains("        1  (other reasons: 1 more)"),
            "{text}"
        );
    }

    #[test]
    fn check_alerts_on_anything_pending_or_only_on_age() {
        let now = SystemTime::now();
        let empty = of(&[], now);
        assert!(matches!(check(&empty, None), Verdict::Ok(_)));
        assert!(matches!(
            check(&empty, Some(Duration::from_secs(60))),
            Verdict::Ok(_)
        ));
        assert_eq!(empty.render(10), "pending: 0\noldest first failure: -\n");

        let recent = of(&[letter("r", FailureClass::Data, "x", ago(now, 60))], now);
        assert!(matches!(check(&recent, None), Verdict::Alert(_)));
        assert!(matches!(
            check(&recent, Some(Duration::from_secs(3600))),
            Verdict::Ok(_)
        ));
        assert!(matches!(
            check(&recent, Some(Duration::from_secs(30))),
            Verdict::Alert(_)
        ));
    }

    #[test]
    fn future_times_are_flagged_not_negative() {
        let now = SystemTime::now();
        let stats = of(
            &[letter(
                "f",
                FailureClass::System,
                "x",
                now + Duration::from_secs(600),
            )],
            now,
        );
        assert!(stats.oldest.as_ref().unwrap().in_future);
        assert!(stats.render(10).contains("in the future"));
    }

    #[test]
    fn list_lines_stay_one_line() {
        let l = letter(
            "id\n2",
            FailureClass::Data,
            "bad\trow\nhere",
            at("2026-08-19T11:00:00Z"),
        );
        assert_eq!(
            list_line(&l),
            "id\\n2\tdata\t5\t2026-08-19T11:00:00.000+00:00\tbad\\trow\\nhere"
        );
        assert_eq!(truncate("abcdef", 3), "abc…");
        assert_eq!(truncate("abc", 3), "abc");
    }
}
