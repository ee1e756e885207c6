//! A retry budget shared by many calls: retries may add at most a fraction of the traffic,
//! whatever the number of callers, so a struggling dependency sees a bounded surge.

use std::sync::PoisonError;
use std::time::Duration;

use tokio::time::Instant;

use crate::sync::Mutex;

/// The window is kept as this many slots; a slot's deposits expire together.
const SLOTS: usize = 10;

/// A token bucket for retries, in the model of Finagle's `RetryBudget` and tower's `TpsBudget`:
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
    ttl: Duration,
    floor: u64,
    /// Retries earned per deposit, in thousandths.
    ratio_milli: u64,
    window: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    slots: [Slot; SLOTS],
    current: usize,
    current_started: Instant,
}

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    deposits: u64,
    withdrawals: u64,
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
    /// `retry_ratio` (0.0 to 1000.0; clamped) retries per call.
    pub fn new(ttl: Duration, min_per_sec: u32, retry_ratio: f32) -> Self {
        let ttl = ttl.max(Duration::from_millis(SLOTS as u64));
        let ratio = if retry_ratio.is_finite() {
            retry_ratio.clamp(0.0, 1000.0)
        } else {
            0.0
        };
        RetryBudget {
            ttl,
            floor: (u64::from(min_per_sec) * ttl.as_millis() as u64) / 1000,
            ratio_milli: (ratio * 1000.0).round() as u64,
            window: Mutex::new(Window {
                slots: [Slot::default(); SLOTS],
                current: 0,
                current_started: Instant::now(),
            }),
        }
    }

    /// Records a call (its first attempt).
    pub fn deposit(&self) {
        self.with_window(|w| w.slots[w.current].deposits += 1);
    }

    /// Takes one retry from the budget; `false` when it is empty.
    pub fn withdraw(&self) -> bool {
        self.with_window(|w| {
            let available = self.remaining_in(w) > 0;
            if available {
                w.slots[w.current].withdrawals += 1;
            }
            available
        })
    }

    /// Retries the budget would allow now.
    ///
    /// ```
    /// let budget = retry_core::RetryBudget::new(std::time::Duration::from_secs(1), 5, 0.1);
    /// assert_eq!(budget.remaining(), 5);
    /// ```
    pub fn remaining(&self) -> u64 {
        self.with_window(|w| self.remaining_in(w))
    }

    fn remaining_in(&self, w: &Window) -> u64 {
        let (deposits, withdrawals) = w
            .slots
            .iter()
            .fold((0, 0), |(d, r), s| (d + s.deposits, r + s.withdrawals));
        (self.floor + deposits * self.ratio_milli / 1000).saturating_sub(withdrawals)
    }

    fn with_window<R>(&self, f: impl FnOnce(&mut Window) -> R) -> R {
        // The counters stay consistent even if a holder panicked: each update is one add.
        let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        self.expire(&mut window);
        f(&mut window)
    }

    /// Moves the window forward, clearing slots older than `ttl`.
    fn expire(&self, w: &mut Window) {
        let slot_len = self.ttl / SLOTS as u32;
        let elapsed = w.current_started.elapsed();
        let passed = (elapsed.as_nanos() / slot_len.as_nanos().max(1)) as usize;
        if passed == 0 {
            return;
        }
        for step in 1..=passed.min(SLOTS) {
            w.slots[(w.current + step) % SLOTS] = Slot::default();
        }
        w.current = (w.current + passed) % SLOTS;
        w.current_started += slot_len * passed.min(u32::MAX as usize) as u32;
    }
}
