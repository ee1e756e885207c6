//! A [`Policy`], its [`Jitter`] and [`BudgetSettings`] as configuration (feature `serde`):
//! the knobs under their builder names, durations as strings of the one grammar
//! ([`crate::duration`]), unknown fields and values the builder would refuse or change reported
//! as errors.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer, de};

use crate::budget::{BudgetSettings, RetryBudget};
use crate::policy::{Jitter, Policy, ZERO_ATTEMPT_TIMEOUT, ZERO_DEADLINE};

/// The most attempts a policy may make, as `#[retryable(max = ..)]` allows.
const MAX_ATTEMPTS: u32 = 1000;

/// The fields of a policy as configuration writes them; one shape for both directions, so what
/// is written is what is read.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyFields {
    #[serde(default = "default_max_attempts")]
    max_attempts: u32,
    #[serde(default = "default_base", with = "crate::duration::serde")]
    base: Duration,
    #[serde(default = "default_cap", with = "crate::duration::serde")]
    cap: Duration,
    #[serde(default)]
    jitter: Jitter,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::duration::serde::option"
    )]
    deadline: Option<Duration>,
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "crate::duration::serde::option"
    )]
    attempt_timeout: Option<Duration>,
    #[serde(default = "default_max_retry_after", with = "crate::duration::serde")]
    max_retry_after: Duration,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    budget: Option<BudgetSettings>,
}

fn default_max_attempts() -> u32 {
    Policy::DEFAULT_MAX_ATTEMPTS
}

fn default_base() -> Duration {
    Policy::DEFAULT_BASE
}

fn default_cap() -> Duration {
    Policy::DEFAULT_CAP
}

fn default_max_retry_after() -> Duration {
    Policy::DEFAULT_MAX_RETRY_AFTER
}

impl PolicyFields {
    fn of(policy: &Policy) -> Self {
        let knobs = policy.knobs();
        PolicyFields {
            max_attempts: knobs.max_attempts,
            base: knobs.base,
            cap: knobs.cap,
            jitter: knobs.jitter,
            deadline: knobs.deadline,
            attempt_timeout: knobs.attempt_timeout,
            max_retry_after: knobs.max_retry_after,
            budget: knobs.budget.map(RetryBudget::settings),
        }
    }

    /// The policy, or why `#[retryable]` would refuse these values (the builder would panic on
    /// some, or quietly change others).
    fn into_policy(self) -> Result<Policy, String> {
        if self.max_attempts == 0 {
            return Err(
                "`max_attempts` must be at least 1; use `max_attempts = 1` to call once without retrying".into(),
            );
        }
        if self.max_attempts > MAX_ATTEMPTS {
            return Err(format!(
                "`max_attempts` must be at most {MAX_ATTEMPTS}, not {}; bound a long retry by time with `deadline` instead",
                self.max_attempts
            ));
        }
        if self.base > self.cap {
            return Err(format!(
                "`base` ({}) is longer than `cap` ({}), so no wait could grow from it; lower `base` or raise `cap`",
                crate::duration::format(self.base),
                crate::duration::format(self.cap)
            ));
        }
        let mut policy = Policy::new()
            .max_attempts(self.max_attempts)
            .base(self.base)
            .cap(self.cap)
            .jitter(self.jitter)
            .max_retry_after(self.max_retry_after);
        if let Some(deadline) = self.deadline {
            if deadline.is_zero() {
                return Err(ZERO_DEADLINE.into());
            }
            policy = policy.deadline(deadline);
        }
        if let Some(timeout) = self.attempt_timeout {
            if timeout.is_zero() {
                return Err(ZERO_ATTEMPT_TIMEOUT.into());
            }
            policy = policy.attempt_timeout(timeout);
        }
        if let Some(settings) = self.budget {
            policy = policy.budget(Arc::new(RetryBudget::from(settings)));
        }
        Ok(policy)
    }
}

/// Writes the knobs under their builder names, durations in the canonical form of
/// [`duration::format`](crate::duration::format), leaving out a `deadline`,
/// `attempt_timeout` or `budget` that is not set. A [`budget`](Policy::budget) is written as its
/// [`settings`](RetryBudget::settings) (a policy read back gets a fresh budget of its own), and
/// a test [`seed`](Policy::seed) is not written. What is written reads back as the same policy.
/// Feature `serde`.
///
/// ```
/// use retry_core::{Jitter, Policy};
/// use std::time::Duration;
///
/// let policy = Policy::new()
///     .max_attempts(5)
///     .base(Duration::from_millis(250))
///     .jitter(Jitter::Equal)
///     .deadline(Duration::from_secs(90));
/// assert_eq!(
///     serde_json::to_string(&policy).unwrap(),
///     r#"{"max_attempts":5,"base":"250ms","cap":"30s","jitter":"equal","deadline":"1m30s","max_retry_after":"5m"}"#
/// );
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl Serialize for Policy {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        PolicyFields::of(self).serialize(serializer)
    }
}

/// Reads a policy from configuration: the fields `max_attempts`, `base`, `cap`, `jitter`
/// (`"none"`, `"full"`, `"equal"`, `"decorrelated"`), `deadline`, `attempt_timeout`,
/// `max_retry_after` and `budget` (see [`BudgetSettings`]), each optional with the defaults of
/// [`Policy::new`], durations as strings like `"250ms"`, `"1h30m"` (the grammar of
/// `#[retryable]`, see [`crate::duration`]). Feature `serde`.
///
/// Refused with an error naming the field, by the rules `#[retryable]` checks at compile time:
/// an unknown field (a typo would otherwise leave a knob at its default), a duration that is not
/// one, `max_attempts` outside 1 to 1,000, a `base` longer than `cap`, and a zero `deadline` or
/// `attempt_timeout`.
///
/// ```
/// use retry_core::{Jitter, Policy};
/// use std::time::Duration;
///
/// let policy: Policy = serde_json::from_str(
///     r#"{"max_attempts": 5, "base": "250ms", "cap": "30s", "jitter": "full",
///         "deadline": "2m", "attempt_timeout": "2s"}"#,
/// )
/// .unwrap();
/// let knobs = policy.knobs();
/// assert_eq!(knobs.max_attempts, 5);
/// assert_eq!(knobs.base, Duration::from_millis(250));
/// assert_eq!(knobs.jitter, Jitter::Full);
/// assert_eq!(knobs.deadline, Some(Duration::from_secs(120)));
/// assert_eq!(knobs.attempt_timeout, Some(Duration::from_secs(2)));
/// assert_eq!(knobs.max_retry_after, Policy::DEFAULT_MAX_RETRY_AFTER, "not written: the default");
///
/// for (config, says) in [
///     (r#"{"max": 5}"#, "unknown field `max`, expected one of `max_attempts`"),
///     (r#"{"base": "1.5s"}"#, "fractions are not supported"),
///     (r#"{"deadline": "0s"}"#, "`deadline` must be longer than zero"),
///     (r#"{"max_attempts": 0}"#, "`max_attempts` must be at least 1"),
///     (r#"{"max_attempts": 1001}"#, "`max_attempts` must be at most 1000, not 1001"),
///     (r#"{"base": "1m", "cap": "30s"}"#, "`base` (1m) is longer than `cap` (30s)"),
/// ] {
///     let error = serde_json::from_str::<Policy>(config).unwrap_err().to_string();
///     assert!(error.contains(says), "{config}: {error}");
/// }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl<'de> Deserialize<'de> for Policy {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        PolicyFields::deserialize(deserializer)?
            .into_policy()
            .map_err(de::Error::custom)
    }
}

/// Written as its name (`"full"`, ...), as `jitter = "..."` in the attribute. Feature `serde`.
///
/// ```
/// use retry_core::Jitter;
///
/// assert_eq!(serde_json::to_string(&Jitter::Decorrelated).unwrap(), r#""decorrelated""#);
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl Serialize for Jitter {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// Read from one of [`Jitter::NAMES`]; any other text is an error listing them. Feature
/// `serde`.
///
/// ```
/// use retry_core::Jitter;
///
/// assert_eq!(serde_json::from_str::<Jitter>(r#""equal""#).unwrap(), Jitter::Equal);
/// let error = serde_json::from_str::<Jitter>(r#""fully""#).unwrap_err();
/// assert!(error.to_string().contains("unknown jitter `fully`; expected one of \"none\""));
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl<'de> Deserialize<'de> for Jitter {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Name;
        impl de::Visitor<'_> for Name {
            type Value = Jitter;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a jitter: \"none\", \"full\", \"equal\" or \"decorrelated\"")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Jitter, E> {
                text.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_str(Name)
    }
}

/// The fields of [`BudgetSettings`] as configuration writes them.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BudgetFields {
    #[serde(with = "crate::duration::serde")]
    ttl: Duration,
    min_per_sec: u32,
    retry_ratio: f32,
}

/// `{ "ttl": "10s", "min_per_sec": 10, "retry_ratio": 0.1 }`, the `ttl` in the duration grammar.
/// Feature `serde`.
///
/// ```
/// use retry_core::RetryBudget;
/// use std::time::Duration;
///
/// let settings = RetryBudget::new(Duration::from_secs(10), 10, 0.1).settings();
/// assert_eq!(
///     serde_json::to_string(&settings).unwrap(),
///     r#"{"ttl":"10s","min_per_sec":10,"retry_ratio":0.1}"#
/// );
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl Serialize for BudgetSettings {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        BudgetFields {
            ttl: self.ttl,
            min_per_sec: self.min_per_sec,
            retry_ratio: self.retry_ratio,
        }
        .serialize(serializer)
    }
}

/// Reads the three fields, all required; a `ttl` under [`BudgetSettings::MIN_TTL`] or a
/// `retry_ratio` outside 0.0..=1000.0 is an error (where [`RetryBudget::new`] would adjust it).
/// Feature `serde`.
///
/// ```
/// use retry_core::BudgetSettings;
///
/// let error = serde_json::from_str::<BudgetSettings>(
///     r#"{"ttl": "10s", "min_per_sec": 10, "retry_ratio": -1}"#,
/// )
/// .unwrap_err();
/// assert!(error.to_string().contains("`retry_ratio` must be from 0.0 to 1000.0"));
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "serde")))]
impl<'de> Deserialize<'de> for BudgetSettings {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let BudgetFields {
            ttl,
            min_per_sec,
            retry_ratio,
        } = BudgetFields::deserialize(deserializer)?;
        if ttl < BudgetSettings::MIN_TTL {
            return Err(de::Error::custom(format_args!(
                "`ttl` must be at least {}, not {}",
                crate::duration::format(BudgetSettings::MIN_TTL),
                crate::duration::format(ttl)
            )));
        }
        if !(0.0..=1000.0).contains(&retry_ratio) {
            return Err(de::Error::custom(format_args!(
                "`retry_ratio` must be from 0.0 to 1000.0 (retries per call), not {retry_ratio}"
            )));
        }
        Ok(BudgetSettings {
            ttl,
            min_per_sec,
            retry_ratio,
        })
    }
}
