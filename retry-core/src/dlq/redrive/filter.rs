//! Step 1, classify: which pending letters a redrive chooses.

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::dlq::{DeadLetter, FailureClass, Page};

/// Which letters a redrive chooses: all conditions must hold. Ages count from the letter's
/// `last_failed_at`. The class and source are asked of the store
/// ([`Page`]), reason and age are checked on each page as it comes.
///
/// ```
/// use retry_core::dlq::{FailureClass, Filter};
/// use std::time::Duration;
///
/// let filter = Filter::any()
///     .class(FailureClass::System)
///     .source("payments::deposit")
///     .reason_contains("503")
///     .older_than(Duration::from_secs(300));
/// assert_eq!(filter.to_string(), r#"class=system source=payments::deposit reason~"503" age>=300s"#);
/// assert_eq!(Filter::any().to_string(), "all");
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filter {
    class: Option<FailureClass>,
    source: Option<String>,
    reason_contains: Option<String>,
    older_than: Option<Duration>,
    newer_than: Option<Duration>,
}

impl Filter {
    /// Every pending letter.
    pub fn any() -> Self {
        Filter::default()
    }

    /// Only letters of `class` (`system`: the dependency failed; `data`: the message did).
    pub fn class(mut self, class: FailureClass) -> Self {
        self.class = Some(class);
        self
    }

    /// Only letters parked by the function `source` (`module::function`, as the letter's
    /// [`source`](DeadLetter::source) records it): the letters of one target.
    pub fn source(mut self, source: impl Into<String>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Only letters whose reason contains `text`.
    pub fn reason_contains(mut self, text: impl Into<String>) -> Self {
        self.reason_contains = Some(text.into());
        self
    }

    /// Only letters that last failed at least `age` ago (let the outage end first).
    pub fn older_than(mut self, age: Duration) -> Self {
        self.older_than = Some(age);
        self
    }

    /// Only letters that last failed at most `age` ago.
    pub fn newer_than(mut self, age: Duration) -> Self {
        self.newer_than = Some(age);
        self
    }

    /// The first page of at most `limit` letters of this filter's class and source, as the
    /// store is asked for it.
    pub(super) fn page(&self, limit: usize) -> Page {
        let mut page = Page::first(limit);
        page.class = self.class;
        page.source.clone_from(&self.source);
        page
    }

    /// Whether `letter` is chosen at `now`. Its age is how long before `now` it last failed
    /// (zero for a time after `now`).
    ///
    /// ```
    /// use retry_core::dlq::{DeadLetter, FailureClass, Filter};
    /// use std::time::{Duration, UNIX_EPOCH};
    ///
    /// let at = |secs| UNIX_EPOCH + Duration::from_secs(secs);
    /// let letter = DeadLetter {
    ///     msg_id: "M-1".into(), original: serde_json::json!({}),
    ///     reason: "gave up after 5 attempts: 503 Service Unavailable".into(), attempts: 5,
    ///     first_failed_at: at(0), last_failed_at: at(60),
    ///     trace_id: "t".into(), class: FailureClass::System, error_type: "E".into(), idempotency_key: None,
    ///     source: Some("app::deposit".into()), redacted: false, key_scope: None, key_expires_at: None,
    ///     history: Vec::new(), resolved: None,
    /// };
    /// let filter = Filter::any().reason_contains("503").older_than(Duration::from_secs(60));
    /// assert!(!filter.matches(&letter, at(90)));
    /// assert!(filter.matches(&letter, at(120)));
    /// assert!(!Filter::any().class(FailureClass::Data).matches(&letter, at(120)));
    /// assert!(!Filter::any().source("app::withdraw").matches(&letter, at(120)));
    /// ```
    pub fn matches(&self, letter: &DeadLetter, now: SystemTime) -> bool {
        if self.class.is_some_and(|class| class != letter.class) {
            return false;
        }
        if let Some(source) = &self.source
            && letter.source.as_deref() != Some(source.as_str())
        {
            return false;
        }
        if let Some(text) = &self.reason_contains
            && !letter.reason.contains(text.as_str())
        {
            return false;
        }
        if self.older_than.is_none() && self.newer_than.is_none() {
            return true;
        }
        let age = now
            .duration_since(letter.last_failed_at)
            .unwrap_or(Duration::ZERO);
        self.older_than.is_none_or(|min| age >= min) && self.newer_than.is_none_or(|max| age <= max)
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(class) = self.class {
            parts.push(format!("class={class}"));
        }
        if let Some(source) = &self.source {
            parts.push(format!("source={source}"));
        }
        if let Some(text) = &self.reason_contains {
            parts.push(format!("reason~{text:?}"));
        }
        if let Some(age) = self.older_than {
            parts.push(format!("age>={age:?}"));
        }
        if let Some(age) = self.newer_than {
            parts.push(format!("age<={age:?}"));
        }
        if parts.is_empty() {
            f.write_str("all")
        } else {
            f.write_str(&parts.join(" "))
        }
    }
}
