//! What the commands compute and print, apart from any store: pure functions of the letters.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use retry_core::dlq::{DeadLetter, FailureClass};
use retry_core::time::parse_rfc3339;

use crate::duration::format_age;

/// The pending letters summed up.
#[derive(Debug, Clone, PartialEq)]
pub struct Stats {
    /// Pending letters.
    pub total: usize,
    /// Letters per class, `system` then `data` (both always present).
    pub by_class: [(FailureClass, usize); 2],
    /// Letters per reason, most frequent first (ties by reason).
    pub reasons: Vec<(String, usize)>,
    /// The letter with the earliest readable `first_failed_at`.
    pub oldest: Option<Oldest>,
    /// Letters whose `first_failed_at` is not RFC 3339: their age is unknown.
    pub unreadable_times: Vec<String>,
}

/// The letter that has waited longest.
#[derive(Debug, Clone, PartialEq)]
pub struct Oldest {
    pub msg_id: String,
    /// As stored.
    pub first_failed_at: String,
    /// How long ago; zero when the time lies in the future (clock skew).
    pub age: Duration,
    /// The time lies in the future.
    pub in_future: bool,
}

impl Stats {
    pub fn of(letters: &[DeadLetter], now: SystemTime) -> Stats {
        let mut by_class = [(FailureClass::System, 0), (FailureClass::Data, 0)];
        let mut reasons: HashMap<&str, usize> = HashMap::new();
        let mut oldest: Option<(SystemTime, &DeadLetter)> = None;
        let mut unreadable_times = Vec::new();
        for letter in letters {
            for (class, n) in &mut by_class {
                if *class == letter.class {
                    *n += 1;
                }
            }
            *reasons.entry(&letter.reason).or_default() += 1;
            match parse_rfc3339(&letter.first_failed_at) {
                Some(at) => {
                    if oldest.is_none_or(|(t, _)| at < t) {
                        oldest = Some((at, letter));
                    }
                }
                None => unreadable_times.push(letter.msg_id.clone()),
            }
        }
        let mut reasons: Vec<(String, usize)> = reasons
            .into_iter()
            .map(|(reason, n)| (reason.to_owned(), n))
            .collect();
        reasons.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let oldest = oldest.map(|(at, letter)| {
            let (age, in_future) = match now.duration_since(at) {
                Ok(age) => (age, false),
                Err(_) => (Duration::ZERO, true),
            };
            Oldest {
                msg_id: letter.msg_id.clone(),
                first_failed_at: letter.first_failed_at.clone(),
                age,
                in_future,
            }
        });
        Stats {
            total: letters.len(),
            by_class,
            reasons,
            oldest,
            unreadable_times,
        }
    }

    /// The report `stats` prints, at most `top` reasons.
    pub fn render(&self, top: usize) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
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
                    oldest.first_failed_at,
                    one_line(&oldest.msg_id)
                );
            }
            None => {
                let _ = writeln!(out, "oldest first failure: -");
            }
        }
        if !self.unreadable_times.is_empty() {
            let _ = writeln!(
                out,
                "unreadable first_failed_at (age unknown): {} letter(s), e.g. msg_id {}",
                self.unreadable_times.len(),
                one_line(&self.unreadable_times[0])
            );
        }
        if self.total == 0 {
            return out;
        }
        let _ = writeln!(out, "by class:");
        for (class, n) in &self.by_class {
            let _ = writeln!(out, "  {n:>7}  {class}");
        }
        let shown = top.min(self.reasons.len());
        let _ = writeln!(
            out,
            "top reasons ({shown} of {} distinct):",
            self.reasons.len()
        );
        for (reason, n) in &self.reasons[..shown] {
            let _ = writeln!(out, "  {n:>7}  {}", truncate(&one_line(reason), 120));
        }
        let rest: usize = self.reasons[shown..].iter().map(|(_, n)| n).sum();
        if rest > 0 {
            let _ = writeln!(
                out,
                "  {rest:>7}  (other reasons: {} more)",
                self.reasons.len() - shown
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

/// Alert when anything is pending; with `max_age`, only when the oldest letter is older than it
/// (or a letter's age cannot be read).
pub fn check(stats: &Stats, max_age: Option<Duration>) -> Verdict {
    if stats.total == 0 {
        return Verdict::Ok("nothing pending".to_owned());
    }
    let Some(max_age) = max_age else {
        return Verdict::Alert(format!("{} letter(s) pending", stats.total));
    };
    let limit = format_age(max_age);
    if !stats.unreadable_times.is_empty() {
        return Verdict::Alert(format!(
            "{} letter(s) have an unreadable first_failed_at, so their age is unknown (limit {limit})",
            stats.unreadable_times.len()
        ));
    }
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
        // Unreachable: letters with readable times give an oldest, unreadable ones return above.
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
        one_line(&letter.first_failed_at),
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
    use retry_core::time::format_rfc3339;

    fn letter(id: &str, class: FailureClass, reason: &str, failed: &str) -> DeadLetter {
        DeadLetter {
            msg_id: id.to_owned(),
            original: serde_json::json!({"id": id}),
            reason: reason.to_owned(),
            attempts: 5,
            first_failed_at: failed.to_owned(),
            last_failed_at: failed.to_owned(),
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

    fn ago(now: SystemTime, secs: u64) -> String {
        format_rfc3339(now - Duration::from_secs(secs))
    }

    #[test]
    fn counts_by_class_and_reason_and_finds_the_oldest_across_offsets() {
        let now = parse_rfc3339("2026-08-19T12:00:00Z").unwrap();
        let letters = [
            letter("a", FailureClass::System, "503", "2026-08-19T11:00:00Z"),
            // 02:30 UTC: the oldest, though its text sorts after "2026-08-19T11..".
            letter(
                "b",
                FailureClass::System,
                "503",
                "2026-08-19T11:30:00+09:00",
            ),
            letter("c", FailureClass::Data, "400", "2026-08-19T11:59:00Z"),
        ];
        let stats = Stats::of(&letters, now);
        assert_eq!(stats.total, 3);
        assert_eq!(
            stats.by_class,
            [(FailureClass::System, 2), (FailureClass::Data, 1)]
        );
        assert_eq!(
            stats.reasons,
            [("503".to_owned(), 2), ("400".to_owned(), 1)]
        );
        let oldest = stats.oldest.as_ref().unwrap();
        assert_eq!(oldest.msg_id, "b");
        assert_eq!(oldest.age, Duration::from_secs(9 * 3600 + 30 * 60));
        let text = stats.render(1);
        assert!(text.contains("pending: 3\n"), "{text}");
        assert!(
            text.contains("2026-08-19T11:30:00+09:00 (9h 30m ago; msg_id b)"),
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
        let empty = Stats::of(&[], now);
        assert!(matches!(check(&empty, None), Verdict::Ok(_)));
        assert!(matches!(
            check(&empty, Some(Duration::from_secs(60))),
            Verdict::Ok(_)
        ));
        assert_eq!(empty.render(10), "pending: 0\noldest first failure: -\n");

        let recent = Stats::of(&[letter("r", FailureClass::Data, "x", &ago(now, 60))], now);
        assert!(matches!(check(&recent, None), Verdict::Alert(_)));
        assert!(matches!(
            check(&recent, Some(Duration::from_secs(3600))),
            Verdict::Ok(_)
        ));
        assert!(matches!(
            check(&recent, Some(Duration::from_secs(30))),
            Verdict::Alert(_)
        ));

        let unreadable = Stats::of(&[letter("u", FailureClass::Data, "x", "yesterday")], now);
        assert_eq!(unreadable.unreadable_times, ["u"]);
        assert!(matches!(
            check(&unreadable, Some(Duration::from_secs(3600))),
            Verdict::Alert(m) if m.contains("unreadable")
        ));
    }

    #[test]
    fn future_times_are_flagged_not_negative() {
        let now = SystemTime::now();
        let stats = Stats::of(
            &[letter(
                "f",
                FailureClass::System,
                "x",
                &format_rfc3339(now + Duration::from_secs(600)),
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
            "2026-08-19T11:00:00Z",
        );
        assert_eq!(
            list_line(&l),
            "id\\n2\tdata\t5\t2026-08-19T11:00:00Z\tbad\\trow\\nhere"
        );
        assert_eq!(truncate("abcdef", 3), "abc…");
        assert_eq!(truncate("abc", 3), "abc");
    }
}
