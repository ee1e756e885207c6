//! A retry budget shared by many calls: retries may add at most a fraction of the traffic,
//! whatever the number of callers, so a struggling dependency sees a bounded surge.

use std::sync::atomic::Ordering;
use std::sync::{PoisonError, TryLockError};
use std::time::Duration;

use tokio::time::Instant;

use crate::loom_sync::{AtomicU64, Mutex, MutexGuard};

/// The window is kept as this many slots; a slot's deposits expire together.
const SLOTS: usize = 10;

/// A token bucket for retries, in the model of Finagle's `RetryBudget` and tower's `TpsBudget`
/// (counters on atomics: the call path, a deposit, takes no lock):
/// every call deposits, every retry withdraws, deposits expire after `ttl`, and a floor of
/// `min_per_sec` retries per second is always allowed so a quiet service can still retry.
///
/// With `retry_ratio = 0.1`, 1,000 calls in one window allow at most 100 retries plus the
/// floor; an empty budget means the retry is skipped and the last error returned.
///
/// ```
/// use retry_core::RetryBudget;
/// use std::time::Duration;
///
/// let budget = RetryBudget::new(Duration::from_secs(10), 0, 0.2);
/// for _ in 0..10 {
///     budget.deposit();
/// }
/// assert!(budget.withdraw());
/// assert!(budget.withdraw());
/// assert!(!budget.withdraw(), "20% of 10 calls is 2 retries");
/// ```
#[derive(Debug)]
pub struct RetryBudget {
    /// Length of one slot of the window, in nanoseconds (at least 1).
    slot_nanos: u128,
    floor: u64,
    /// Retries earned per deposit, in thousandths.
    ratio_milli: u64,
    /// Where slot numbers count from.
    origin: Instant,
    /// The slot number the window is at (slots since `origin`); its slot is `epoch % SLOTS`.
    epoch: AtomicU64,
    deposits: [AtomicU64; SLOTS],
    withdrawals: [AtomicU64; SLOTS],
    /// What it was built from, normalised, for [`RetryBudget::settings`].
    settings: BudgetSettings,
    /// Serialises withdrawals and window moves: both are rare (a retry; once per slot), and a
    /// withdrawal counted into a slot being cleared would be lost, granting a retry the budget
    /// does not hold. Deposits, one per call, never wait for it.
    moving: Mutex<()>,
}

/// Lets `#[retryable(budget = expr)]` take a `RetryBudget`, a `&RetryBudget` or an
/// `Arc<RetryBudget>`.
impl AsRef<RetryBudget> for RetryBudget {
    fn as_ref(&self) -> &RetryBudget {
        self
    }
}

impl RetryBudget {
    /// A budget whose deposits last `ttl`, allowing `min_per_sec` retries per second plus
    /// `retry_ratio` (0.0 to 1000.0; clamped) retries per call. Any `ttl` and `min_per_sec` are
    /// accepted (e.g. from configuration): `ttl` is taken as at least 10 ms, and the floor
    /// saturates instead of overflowing.
    ///
    /// ```
    /// use retry_core::RetryBudget;
    /// use std::time::Duration;
    ///
    /// let budget = RetryBudget::new(Duration::MAX, u32::MAX, f32::INFINITY);
    /// assert_eq!(budget.remaining(), u64::MAX);
    /// ```
    pub fn new(ttl: Duration, min_per_sec: u32, retry_ratio: f32) -> Self {
        let ttl = ttl.max(BudgetSettings::MIN_TTL);
        let ratio = if retry_ratio.is_finite() {
            retry_ratio.clamp(0.0, 1000.0)
        } else {
            0.0
        };
        // u128: `min_per_sec * ttl` in milliseconds overflows u64 for a long `ttl`.
        let floor = u128::from(min_per_sec).saturating_mul(ttl.as_millis()) / 1000;
        RetryBudget {
            slot_nanos: (ttl.as_nanos() / SLOTS as u128).max(1),
            floor: u64::try_from(floor).unwrap_or(u64::MAX),
            ratio_milli: (ratio * 1000.0).round() as u64,
            origin: Instant::now(),
            epoch: AtomicU64::new(0),
            deposits: std::array::from_fn(|_| AtomicU64::new(0)),
            withdrawals: std::array::from_fn(|_| AtomicU64::new(0)),
            settings: BudgetSettings {
                ttl,
                min_per_sec,
                retry_ratio: ratio,
            },
            moving: Mutex::new(()),
        }
    }

    /// The settings this budget was built with, as it applies them (a `ttl` below 10 ms is
    /// 10 ms; a `retry_ratio` is clamped to 0.0..=1000.0). [`RetryBudget::from`] them builds a
    /// fresh budget that behaves the same.
    ///
    /// ```
    /// use retry_core::RetryBudget;
    /// use std::time::Duration;
    ///
    /// let budget = RetryBudget::new(Duration::from_secs(10), 5, 0.1);
    /// let settings = budget.settings();
    /// assert_eq!(settings.ttl, Duration::from_secs(10));
    /// assert_eq!((settings.min_per_sec, settings.retry_ratio), (5, 0.1));
    ///
    /// let twin = RetryBudget::from(settings);
    /// assert_eq!(twin.settings(), settings);
    /// ```
    pub fn settings(&self) -> BudgetSettings {
        self.settings
    }

    /// Records a call (its first attempt). Lock-free: one atomic add, and once per slot of the
    /// window a move of the window, by whichever caller gets there first.
    pub fn deposit(&self) {
        let now = self.now_epoch();
        let mut epoch = self.epoch.load(Ordering::Acquire);
        if now > epoch {
            // Nobody waits: if another caller is moving the window, this deposit goes into
            // the slot that was current a moment ago, and expires a slot later than it would.
            let guard = match self.moving.try_lock() {
                Ok(guard) => Some(guard),
                Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
                Err(TryLockError::WouldBlock) => None,
            };
            if let Some(guard) = guard {
                epoch = self.move_to(now, &guard);
            }
        }
        self.deposits[slot(epoch)].fetch_add(1, Ordering::AcqRel);
    }

    /// Takes one retry from the budget; `false` when it is empty.
    pub fn withdraw(&self) -> bool {
        let guard = self.lock();
        let epoch = self.move_to(self.now_epoch(), &guard);
        let available = self.remaining_now() > 0;
        if available {
            self.withdrawals[slot(epoch)].fetch_add(1, Ordering::AcqRel);
        }
        available
    }

    /// Retries the budget would allow now.
    ///
    /// ```
    /// let budget = retry_core::RetryBudget::new(std::time::Duration::from_secs(1), 5, 0.1);
    /// assert_eq!(budget.remaining(), 5);
    /// ```
    pub fn remaining(&self) -> u64 {
        let guard = self.lock();
        self.move_to(self.now_epoch(), &guard);
        self.remaining_now()
    }

    fn remaining_now(&self) -> u64 {
        let sum = |counters: &[AtomicU64; SLOTS]| {
            counters
                .iter()
                .fold(0u64, |sum, c| sum.saturating_add(c.load(Ordering::Acquire)))
        };
        let earned = u128::from(sum(&self.deposits)) * u128::from(self.ratio_milli) / 1000;
        let earned = u64::try_from(earned).unwrap_or(u64::MAX);
        self.floor
            .saturating_add(earned)
            .saturating_sub(sum(&self.withdrawals))
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        // Guards no data of its own: a holder that panicked left every counter consistent.
        self.moving.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The slot number of the present moment.
    fn now_epoch(&self) -> u64 {
        let passed = self.origin.elapsed().as_nanos() / self.slot_nanos;
        u64::try_from(passed).unwrap_or(u64::MAX)
    }

    /// Moves the window to slot `now`, clearing the slots it passes (their counts are older
    /// than `ttl`); returns the epoch the window is at. Only with `moving` held.
    fn move_to(&self, now: u64, _moving: &MutexGuard<'_, ()>) -> u64 {
        let epoch = self.epoch.load(Ordering::Acquire);
        if now <= epoch {
            return epoch;
        }
        let passed = (now - epoch).min(SLOTS as u64);
        for step in 1..=passed {
            let index = slot(epoch.wrapping_add(step));
            self.deposits[index].store(0, Ordering::Release);
            self.withdrawals[index].store(0, Ordering::Release);
        }
        self.epoch.store(now, Ordering::Release);
        now
    }
}

/// The settings of a [`RetryBudget`], as [`RetryBudget::new`] takes them: read back with
/// [`RetryBudget::settings`], built with [`RetryBudget::from`], and (feature `serde`) read from
/// configuration as `{ ttl = "10s", min_per_sec = 10, retry_ratio = 0.1 }`, where values the
/// constructor would change (a `ttl` under 10 ms, a ratio outside 0.0..=1000.0) are refused
/// rather than adjusted.
///
/// ```
/// use retry_core::{BudgetSettings, RetryBudget};
/// use std::time::Duration;
///
/// # #[cfg(feature = "serde")] {
/// let settings: BudgetSettings =
///     serde_json::from_str(r#"{"ttl": "10s", "min_per_sec": 10, "retry_ratio": 0.1}"#).unwrap();
/// assert_eq!(settings.ttl, Duration::from_secs(10));
/// let budget = RetryBudget::from(settings);
/// assert_eq!(budget.remaining(), 100, "10 retries a second over 10 s");
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct BudgetSettings {
    /// How long a call's deposit counts.
    pub ttl: Duration,
    /// Retries per second always allowed, whatever the traffic.
    pub min_per_sec: u32,
    /// Retries earned per call (0.1: one retry for every ten calls).
    pub retry_ratio: f32,
}

impl BudgetSettings {
    /// The shortest `ttl` a budget keeps; [`RetryBudget::new`] takes a shorter one as this.
    pub const MIN_TTL: Duration = Duration::from_millis(SLOTS as u64);
}

/// A fresh budget with these settings (no deposits yet).
impl From<BudgetSettings> for RetryBudget {
    fn from(settings: BudgetSettings) -> Self {
        RetryBudget::new(settings.ttl, settings.min_per_sec, settings.retry_ratio)
    }
}

/// The index in the window of slot number `epoch`.
fn slot(epoch: u64) -> usize {
    (epoch % SLOTS as u64) as usize
}
