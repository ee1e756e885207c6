//! Step 3, the run's half of the safety check: letters whose resend could repeat an effect,
//! whatever the target, are refused one by one.

use std::time::{Duration, SystemTime};

use crate::dlq::DeadLetter;
use crate::time::format_rfc3339;

/// What a redrive knows of its target's idempotency: how long it keeps keys, and the scope it
/// claims them in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Safety {
    /// How long the target keeps idempotency keys.
    pub(super) retention: Duration,
    /// The scope the target claims keys in, when known.
    pub(super) scope: Option<String>,
}

impl Safety {
    /// Why `letter` must not be sent at `now`, if it must not: its original is not the payload,
    /// or the receiver may no longer know its key, or knows it in another scope. Checked
    /// before the letter is decoded, so a redacted original is refused as redacted.
    pub(super) fn refuses(&self, letter: &DeadLetter, now: SystemTime) -> Option<String> {
        if letter.redacted {
            return Some(
                "the original was redacted: it is not the payload the call carried".to_owned(),
            );
        }
        if let Some(expires) = letter.key_expires_at
            && expires <= now
        {
            return Some(format!(
                "the receiver forgot its idempotency key at {}: a resend could repeat the effect",
                format_rfc3339(expires)
            ));
        }
        // The key was claimed at the first attempt; a receiver keeping it `retention` may have
        // purged it since, and would then run the effect again.
        let age = now
            .duration_since(letter.first_failed_at)
            .unwrap_or_default();
        if age > self.retention {
            return Some(format!(
                "first failed {}s ago, longer than the target keeps idempotency keys ({}s): a resend could repeat the effect",
                age.as_secs(),
                self.retention.as_secs()
            ));
        }
        if let (Some(claimed), Some(target)) = (&letter.key_scope, &self.scope)
            && claimed != target
        {
            return Some(format!(
                "the key was claimed in scope {claimed:?}, the target claims keys in {target:?}: it would not find the first call's record"
            ));
        }
        None
    }

    /// Why a call claiming `call_key` must not be sent for `letter`: the original call claimed
    /// another key (an original edited or redacted since), so the receiver would not find it.
    pub(super) fn key_mismatch(letter: &DeadLetter, call_key: Option<&str>) -> Option<String> {
        match (letter.idempotency_key.as_deref(), call_key) {
            (Some(recorded), Some(now)) if recorded != now => Some(format!(
                "the target would claim idempotency key {now:?}, not the original call's {recorded:?}: not sent"
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dlq::FailureClass;

    const DAY: Duration = Duration::from_secs(86_400);

    fn letter(first_failed: SystemTime) -> DeadLetter {
        DeadLetter {
            msg_id: "M-1".into(),
            original: serde_json::json!({}),
            reason: "503".into(),
            attempts: 5,
            first_failed_at: first_failed,
            last_failed_at: first_failed,
            trace_id: "t".into(),
            class: FailureClass::System,
            error_type: "E".into(),
            idempotency_key: None,
            source: None,
            redacted: false,
            key_scope: None,
            key_expires_at: None,
            history: Vec::new(),
            resolved: None,
        }
    }

    fn safety(scope: Option<&str>) -> Safety {
        Safety {
            retention: 30 * DAY,
            scope: scope.map(str::to_owned),
        }
    }

    #[test]
    fn each_reason_to_refuse_a_letter_is_named() {
        let now = SystemTime::UNIX_EPOCH + 1000 * DAY;
        let fresh = letter(now - DAY);
        assert_eq!(safety(None).refuses(&fresh, now), None);

        let redacted = DeadLetter {
            redacted: true,
            ..fresh.clone()
        };
        assert!(
            safety(None)
                .refuses(&redacted, now)
                .unwrap()
                .contains("redacted")
        );

        let old = letter(now - 31 * DAY);
        let why = safety(None).refuses(&old, now).unwrap();
        assert!(why.contains("longer than the target keeps"), "{why}");
        assert_eq!(
            safety(None).refuses(&letter(now - 30 * DAY), now),
            None,
            "at the edge"
        );

        let expired = DeadLetter {
            key_expires_at: Some(now - Duration::from_secs(1)),
            ..fresh.clone()
        };
        assert!(
            safety(None)
                .refuses(&expired, now)
                .unwrap()
                .contains("forgot")
        );
        let later = DeadLetter {
            key_expires_at: Some(now + DAY),
            ..fresh.clone()
        };
        assert_eq!(safety(None).refuses(&later, now), None);

        let scoped = DeadLetter {
            key_scope: Some("tenant-a".into()),
            ..fresh.clone()
        };
        assert!(
            safety(Some("tenant-b"))
                .refuses(&scoped, now)
                .unwrap()
                .contains("scope")
        );
        assert_eq!(safety(Some("tenant-a")).refuses(&scoped, now), None);
        assert_eq!(
            safety(None).refuses(&scoped, now),
            None,
            "unknown: not a mismatch"
        );
        assert_eq!(safety(Some("tenant-b")).refuses(&fresh, now), None);

        // A letter whose time is unreadable never reaches the check: it is refused where it is
        // read, so its age against the target's retention is never taken as unknown.
        let mut unreadable = serde_json::to_value(&fresh).unwrap();
        unreadable["first_failed_at"] = "yesterday".into();
        let why = serde_json::from_value::<DeadLetter>(unreadable).unwrap_err();
        assert!(why.to_string().contains("\"yesterday\""), "{why}");
    }

    #[test]
    fn a_different_key_is_refused_an_unknown_one_is_not() {
        let recorded = DeadLetter {
            idempotency_key: Some("k1".into()),
            ..letter(SystemTime::UNIX_EPOCH)
        };
        assert!(Safety::key_mismatch(&recorded, Some("k2")).is_some());
        assert!(Safety::key_mismatch(&recorded, Some("k1")).is_none());
        assert!(Safety::key_mismatch(&recorded, None).is_none());
        assert!(Safety::key_mismatch(&letter(SystemTime::UNIX_EPOCH), Some("k2")).is_none());
    }
}
