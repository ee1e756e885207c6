//! The operations seen within the window, in a table of fixed size: one shard per slice of the
//! identities, each a ring in the order operations first arrived (so the oldest goes out
//! first, whether its window closed or the shard is full) and an index from identity to place.
//! Both are allocated once, when the observer is built, and never grow.

use std::collections::{HashMap, VecDeque};
use std::mem::size_of;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// How many shards the table is cut into: requests of different operations rarely wait on
/// one another's lock, and each lock is held for a few hash-map operations, never across an
/// `.await`.
const SHARDS: usize = 16;

/// How many distinct sources one operation remembers; more are counted as this many.
pub(super) const SOURCES: usize = 4;

/// One logical operation within its window.
#[derive(Debug, Clone, Copy)]
pub(super) struct Entry {
    /// The hash of its identity (see `request::Identity`).
    pub(super) id: u64,
    /// Its first arrival: the window opens here.
    pub(super) opened: Instant,
    pub(super) last: Instant,
    pub(super) arrivals: u32,
    /// The largest `attempt` and `max` its arrivals announced (`0`: none).
    pub(super) largest_attempt: u32,
    pub(super) largest_max: u32,
    /// The route label's number (see `Routes`).
    pub(super) route: u16,
    /// Grouped by `Idempotency-Key` (`true`) or `traceparent`.
    pub(super) keyed: bool,
    /// It arrived more often than allowed (and was counted as such, once).
    pub(super) amplified: bool,
    /// Hashes of the distinct sources it came from (`0`: free).
    pub(super) sources: [u32; SOURCES],
}

impl Entry {
    /// How many distinct sources it came from (at most [`SOURCES`]).
    pub(super) fn source_count(&self) -> usize {
        self.sources.iter().filter(|s| **s != 0).count()
    }

    fn add_source(&mut self, source: u32) {
        // `0` marks a free slot; a source that hashes to it is taken as 1.
        let source = source.max(1);
        if self.sources.contains(&source) {
            return;
        }
        if let Some(free) = self.sources.iter_mut().find(|s| **s == 0) {
            *free = source;
        }
    }
}

/// What one arrival brings to its operation.
#[derive(Debug, Clone, Copy)]
pub(super) struct Arrival {
    pub(super) id: u64,
    pub(super) now: Instant,
    pub(super) attempt: u32,
    pub(super) max: u32,
    pub(super) route: u16,
    pub(super) keyed: bool,
    pub(super) source: u32,
}

/// The table; see the module docs.
#[derive(Debug)]
pub(super) struct Table {
    shards: Box<[Mutex<Shard>]>,
    window: Duration,
}

#[derive(Debug)]
struct Shard {
    /// Oldest first; never longer than its capacity.
    ring: VecDeque<Entry>,
    /// Identity → sequence number of its entry; `ring[0]` has number `first`.
    index: HashMap<u64, u64>,
    first: u64,
    capacity: usize,
    /// `index`'s room as allocated. Its `capacity()` would not do: it counts the free slots,
    /// and removed entries leave markers that take slots until the next in-place rehash,
    /// while the allocation stays the same.
    index_room: usize,
}

impl Table {
    /// A table for at most `capacity` operations (at least one a shard).
    pub(super) fn new(capacity: usize, window: Duration) -> Table {
        let per_shard = capacity.div_ceil(SHARDS).max(1);
        let shards: Box<[Mutex<Shard>]> = (0..SHARDS)
            .map(|_| Mutex::new(Shard::new(per_shard)))
            .collect();
        Table { shards, window }
    }

    /// Operations the table can hold.
    pub(super) fn capacity(&self) -> usize {
        self.shards.iter().map(|shard| lock(shard).capacity).sum()
    }

    /// Bytes the table holds now: what it allocated when it was built, and never more.
    pub(super) fn footprint(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| lock(shard).footprint())
            .sum::<usize>()
            + size_of::<Table>()
    }

    /// Counts `arrival` into its operation, opening one if it has none within the window.
    /// Operations whose window has closed, and the oldest one when the shard is full, are
    /// handed to `closed` (in the order they opened) before it. Returns the operation as it
    /// is now, and whether this arrival was the one that first made it amplified by `limit`
    /// (the largest announced `max`, or `unannounced` when none was).
    pub(super) fn arrive(
        &self,
        arrival: &Arrival,
        unannounced: u32,
        closed: &mut impl FnMut(&Entry),
    ) -> (Entry, bool) {
        let mut shard = lock(&self.shards[shard_of(arrival.id)]);
        // Before the clock has run a whole window, nothing can have closed.
        if let Some(before) = arrival.now.checked_sub(self.window) {
            shard.close_before(Some(before), closed);
        }
        let entry = shard.entry(arrival, closed);
        entry.arrivals = entry.arrivals.saturating_add(1);
        entry.last = arrival.now;
        entry.largest_attempt = entry.largest_attempt.max(arrival.attempt);
        entry.largest_max = entry.largest_max.max(arrival.max);
        entry.add_source(arrival.source);
        let limit = match entry.largest_max {
            0 => unannounced,
            max => max,
        };
        let newly = entry.arrivals > limit && !entry.amplified;
        entry.amplified |= newly;
        (*entry, newly)
    }

    /// Closes every operation, handing each to `closed`, oldest first in each shard.
    pub(super) fn close_all(&self, closed: &mut impl FnMut(&Entry)) {
        for shard in &self.shards {
            lock(shard).close_before(None, closed);
        }
    }

    /// Closes the operations whose window ended by `now`.
    pub(super) fn close_expired(&self, now: Instant, closed: &mut impl FnMut(&Entry)) {
        let Some(before) = now.checked_sub(self.window) else {
            return;
        };
        for shard in &self.shards {
            lock(shard).close_before(Some(before), closed);
        }
    }

    /// The open operations, oldest first in each shard.
    pub(super) fn entries(&self) -> Vec<Entry> {
        self.shards
            .iter()
            .flat_map(|shard| lock(shard).ring.iter().copied().collect::<Vec<_>>())
            .collect()
    }
}

impl Shard {
    fn new(capacity: usize) -> Shard {
        // Twice the entries: with half its room free, the map rehashes in place as identities
        // come and go, instead of growing (hashbrown's rule).
        let index = HashMap::with_capacity(capacity.saturating_mul(2));
        Shard {
            ring: VecDeque::with_capacity(capacity),
            index_room: index.capacity(),
            index,
            first: 0,
            capacity,
        }
    }

    /// The entry of `arrival`'s operation, opened now if it has none; the oldest is closed
    /// first when the shard is full.
    fn entry(&mut self, arrival: &Arrival, closed: &mut impl FnMut(&Entry)) -> &mut Entry {
        if let Some(&seq) = self.index.get(&arrival.id)
            && let Some(at) = seq.checked_sub(self.first)
            && let Ok(at) = usize::try_from(at)
            && at < self.ring.len()
        {
            return &mut self.ring[at];
        }
        if self.ring.len() >= self.capacity {
            self.close_oldest(closed);
        }
        let seq = self.first + self.ring.len() as u64;
        self.index.insert(arrival.id, seq);
        self.ring.push_back(Entry {
            id: arrival.id,
            opened: arrival.now,
            last: arrival.now,
            arrivals: 0,
            largest_attempt: 0,
            largest_max: 0,
            route: arrival.route,
            keyed: arrival.keyed,
            amplified: false,
            sources: [0; SOURCES],
        });
        let last = self.ring.len() - 1;
        &mut self.ring[last]
    }

    /// Closes the operations that opened before `before` (all of them for `None`).
    fn close_before(&mut self, before: Option<Instant>, closed: &mut impl FnMut(&Entry)) {
        while let Some(oldest) = self.ring.front() {
            if before.is_some_and(|before| oldest.opened >= before) {
                break;
            }
            self.close_oldest(closed);
        }
    }

    fn close_oldest(&mut self, closed: &mut impl FnMut(&Entry)) {
        let Some(oldest) = self.ring.pop_front() else {
            return;
        };
        // The index may already point at a newer window of the same identity.
        if self.index.get(&oldest.id) == Some(&self.first) {
            self.index.remove(&oldest.id);
        }
        self.first += 1;
        closed(&oldest);
    }

    fn footprint(&self) -> usize {
        self.ring.capacity() * size_of::<Entry>()
            // hashbrown: a control byte and a slot per bucket, about 8 buckets per 7 entries.
            + self.index_room * (size_of::<(u64, u64)>() + 1) * 8 / 7
            + size_of::<Mutex<Shard>>()
    }
}

/// The shard of an identity (its hash is already uniform).
fn shard_of(id: u64) -> usize {
    // The top bits: the index's own hash of `id` uses all of them anyway.
    (id >> 60) as usize % SHARDS
}

/// The shard, also after a panic elsewhere left its lock poisoned: an observer never fails a
/// request, and every update leaves an entry whole.
fn lock(shard: &Mutex<Shard>) -> MutexGuard<'_, Shard> {
    shard.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrival(id: u64, now: Instant) -> Arrival {
        Arrival {
            id,
            now,
            attempt: 0,
            max: 0,
            route: 0,
            keyed: true,
            source: 7,
        }
    }

    #[test]
    fn arrivals_of_one_identity_are_one_operation_until_its_window_ends() {
        let table = Table::new(64, Duration::from_secs(30));
        let start = Instant::now();
        let mut closed = Vec::new();
        for i in 0..5 {
            let at = start + Duration::from_secs(i);
            let (entry, _) = table.arrive(&arrival(1, at), 5, &mut |e| closed.push(*e));
            assert_eq!(entry.arrivals, u32::try_from(i + 1).unwrap());
        }
        assert!(closed.is_empty());
        let late = start + Duration::from_secs(31);
        let (entry, _) = table.arrive(&arrival(1, late), 5, &mut |e| closed.push(*e));
        assert_eq!(entry.arrivals, 1, "a new window");
        assert_eq!(closed.len(), 1);
        assert_eq!(closed[0].arrivals, 5);
    }

    #[test]
    fn amplified_once_when_arrivals_pass_the_largest_announced_max() {
        let table = Table::new(64, Duration::from_secs(30));
        let now = Instant::now();
        let mut newly = 0;
        for attempt in 1..=4 {
            let mut a = arrival(9, now);
            (a.attempt, a.max) = (attempt, 4);
            newly += u32::from(table.arrive(&a, 100, &mut |_| {}).1);
        }
        assert_eq!(newly, 0, "4 arrivals of max = 4 are one layer's");
        for _ in 0..10 {
            newly += u32::from(table.arrive(&arrival(9, now), 100, &mut |_| {}).1);
        }
        assert_eq!(newly, 1);
    }

    #[test]
    fn without_an_announced_max_the_limit_is_the_configured_one() {
        let table = Table::new(64, Duration::from_secs(30));
        let now = Instant::now();
        let flags: Vec<bool> = (0..7)
            .map(|_| table.arrive(&arrival(3, now), 5, &mut |_| {}).1)
            .collect();
        assert_eq!(flags, [false, false, false, false, false, true, false]);
    }

    #[test]
    fn a_full_table_closes_its_oldest_and_never_grows() {
        let table = Table::new(32, Duration::from_secs(30));
        let built = table.footprint();
        let now = Instant::now();
        let mut closed = 0;
        for id in 0..20_000u64 {
            // Spread over the shards as real hashes are.
            let id = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            table.arrive(&arrival(id, now), 5, &mut |_| closed += 1);
        }
        assert_eq!(table.entries().len(), table.capacity());
        assert_eq!(closed, 20_000 - table.capacity());
        assert_eq!(table.footprint(), built, "nothing grew");
    }

    #[test]
    fn distinct_sources_are_counted_up_to_the_limit() {
        let table = Table::new(16, Duration::from_secs(30));
        let now = Instant::now();
        let mut last = None;
        for source in [1, 2, 2, 3, 4, 5, 6] {
            let mut a = arrival(5, now);
            a.source = source;
            last = Some(table.arrive(&a, 5, &mut |_| {}).0);
        }
        assert_eq!(last.map(|e| e.source_count()), Some(SOURCES));
    }

    #[test]
    fn closing_all_empties_the_table() {
        let table = Table::new(16, Duration::from_secs(30));
        let now = Instant::now();
        table.arrive(&arrival(1, now), 5, &mut |_| {});
        table.arrive(&arrival(u64::MAX, now), 5, &mut |_| {});
        let mut closed = 0;
        table.close_all(&mut |_| closed += 1);
        assert_eq!(closed, 2);
        assert!(table.entries().is_empty());
    }
}
